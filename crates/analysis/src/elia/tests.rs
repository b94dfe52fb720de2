use std::collections::HashMap;

use brine_bench::Workload;

use crate::workloads;
use crate::ProcSource;

fn app_specs(w: &dyn Workload) -> Vec<crate::ProcSpec> {
    let app = w.application();
    // Not `ProcedureDef::source()`: that builds the library's
    // `ProcSource`, not this test build's.
    let procs: Vec<ProcSource> = app
        .procedures
        .iter()
        .map(|p| ProcSource {
            name: p.name.clone(),
            statements: p.statements.clone(),
            reorderings: Vec::new(),
        })
        .collect();
    workloads::specs_with_notes(&app.name, &app.ddl, &procs)
        .expect("specs")
        .1
}

#[test]
fn dump() {
    use brine_bench::workloads::{rubis, tpcw};
    let w: Box<dyn Workload> = if std::env::var("APP").as_deref() == Ok("rubis") {
        Box::new(rubis::Rubis::new(rubis::Scale::SMALL, rubis::Mix::BIDDING).unwrap())
    } else {
        Box::new(tpcw::Tpcw::new(tpcw::Scale::SMALL, tpcw::Mix::SHOPPING).unwrap())
    };
    let w = w.as_ref();
    let specs = app_specs(w);
    for s in &specs {
        println!("{} args={:?}", s.name, s.args);
        for o in &s.ops {
            println!("   {} {:?} {} eq={:?} ord={:?}", o.name, o.access.kind, o.access.table_name, o.selection.equalities, o.selection.order_columns);
        }
    }
    let weights: HashMap<String, f64> = w.mix().into_iter().map(|(p, s)| (p.to_string(), s)).collect();
    let plan = super::elia_plan(&specs, &weights).unwrap();
    println!("{}", plan.render());
}
