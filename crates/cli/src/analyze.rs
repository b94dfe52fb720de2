//! `brine analyze`: the static analysis of Runtime Pipelining on a
//! workload's procedures, or with `--elia` Elia's operation partitioning
//! (crates/analysis, docs/analysis.md).
//!
//! ```text
//! brine analyze tpcc                       # the sources' TPC-C groups
//! brine analyze tpcc --group new_order     # one group
//! brine analyze tpcc --off column          # measure a refinement
//! brine analyze callas-rollback --dot g.dot
//! brine analyze tpcw --elia                # classes C/L/G/L/G, seed 004 Table 1
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use brine_analysis::workloads::{self, rollback_micro};
use brine_analysis::{
    analyze_group, choose_orderings, classic, report, select, ProcSource, ProcSpec, Refinements,
};
use brine_bench::workloads::{
    bank, checking, micro, micro2, micro3, rubis, ticket, tpcc, tpcw, Bank, ListAppend, Micro,
    Micro2, Micro3, Register, Rubis, Ticket, Tpcc, Tpcw,
};
use brine_bench::Workload;
use clap::Args;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Workload: tpcc, tpcw, rubis, ticket, micro, micro2, micro3, bank,
    /// register, list-append, callas-rollback (seed 000 section 4.6.6), or
    /// an application file (FILE.toml, docs/apps.md).
    pub workload: String,
    /// A group of procedures, comma-separated; repeat for several groups.
    /// Default: the sources' grouping for tpcc, otherwise one group of
    /// every procedure.
    #[arg(long = "group", value_name = "A,B")]
    pub groups: Vec<String>,
    /// Write Graphviz DOT of every group's graphs (object dependency graph,
    /// pieces, C-edges) to FILE.
    #[arg(long, value_name = "FILE")]
    pub dot: Option<PathBuf>,
    /// Switch refinements off, comma-separated: column, commutative,
    /// uniqueness, larger-first, or all.
    #[arg(long, value_name = "LIST")]
    pub off: Option<String>,
    /// tpcc: where new-order and payment take the warehouse and district
    /// rows, hot-last (default) or spec (clause 2's order); the analysis
    /// reads the statements in the order the body runs them.
    #[arg(long, value_name = "ORDER")]
    pub tpcc_order: Option<String>,
    /// Elia's operation partitioning (seed 004 Algorithm 1) instead of
    /// Runtime Pipelining: each procedure's class (C, L, G, L/G), its
    /// partitioning parameter(s), the conflicts behind every G, and
    /// seed 004 Table 1 for the workload's default mix.
    #[arg(long)]
    pub elia: bool,
}

/// A workload's application: name, DDL, procedures, and the share of
/// calls each procedure gets in its default mix (empty: no mix).
#[derive(Debug)]
struct App {
    name: String,
    ddl: String,
    procs: Vec<ProcSource>,
    mix: Vec<(&'static str, f64)>,
}

/// An application file's application, with its [bench] mix if it has one.
fn app_file(path: &str) -> Result<App, String> {
    let f = brine_app::load(std::path::Path::new(path)).map_err(|e| e.to_string())?;
    let procs = f
        .application
        .procedures
        .iter()
        .map(brine_cluster::ProcedureDef::source)
        .collect();
    let mix = f
        .bench
        .map(|b| {
            b.mix
                .into_iter()
                .map(|(n, w)| (&*Box::leak(n.into_boxed_str()), w))
                .collect()
        })
        .unwrap_or_default();
    Ok(App {
        name: f.application.name,
        ddl: f.application.ddl,
        procs,
        mix,
    })
}

/// The workload's application, with its default mix.
fn application(workload: &str, tpcc_order: Option<&str>) -> Result<App, String> {
    if tpcc_order.is_some() && workload != "tpcc" {
        return Err(format!("--tpcc-order applies to tpcc, not `{workload}`"));
    }
    let w: Box<dyn Workload> = match workload {
        file if file.ends_with(".toml") => return app_file(file),
        "callas-rollback" => {
            return Ok(App {
                name: rollback_micro::APP.into(),
                ddl: rollback_micro::DDL.into(),
                procs: vec![rollback_micro::source()],
                mix: Vec::new(),
            })
        }
        "tpcc" => Box::new(
            Tpcc::new(
                tpcc::DEFAULT_WAREHOUSES,
                tpcc::Scale::by_name("standard").map_err(|e| e.to_string())?,
                tpcc::Mix::by_name("standard").map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?
            .with_order(
                tpcc::procedures::StatementOrder::by_name(tpcc_order.unwrap_or("hot-last"))
                    .map_err(|e| e.to_string())?,
            ),
        ),
        // The default mixes of `brine bench`: TPC-W shopping, RUBiS
        // bidding (the ones seed 004 Table 1 reports).
        "tpcw" => Box::new(
            Tpcw::new(tpcw::Scale::STANDARD, tpcw::Mix::SHOPPING).map_err(|e| e.to_string())?,
        ),
        "rubis" => Box::new(
            Rubis::new(rubis::Scale::STANDARD, rubis::Mix::BIDDING).map_err(|e| e.to_string())?,
        ),
        "ticket" => {
            Box::new(Ticket::new(ticket::TicketParams::default()).map_err(|e| e.to_string())?)
        }
        "micro" => Box::new(Micro::new(micro::DEFAULT_ROWS).map_err(|e| e.to_string())?),
        "micro2" => Box::new(Micro2::new(micro2::DEFAULT_POSITION).map_err(|e| e.to_string())?),
        "micro3" => Box::new(
            Micro3::new(micro3::DEFAULT_ROWS, micro3::DEFAULT_READ_ONLY_PERCENT)
                .map_err(|e| e.to_string())?,
        ),
        "bank" => Box::new(
            Bank::new(bank::DEFAULT_ACCOUNTS, bank::DEFAULT_TOTAL_PERCENT)
                .map_err(|e| e.to_string())?,
        ),
        "register" => Box::new(Register::new(checking::DEFAULT_KEYS).map_err(|e| e.to_string())?),
        "list-append" => {
            Box::new(ListAppend::new(checking::DEFAULT_KEYS).map_err(|e| e.to_string())?)
        }
        other => {
            return Err(format!(
                "unknown workload `{other}` (known: tpcc, tpcw, rubis, ticket, micro, micro2, \
                 micro3, bank, register, list-append, callas-rollback)"
            ))
        }
    };
    let app = w.application();
    let procs = app
        .procedures
        .iter()
        .map(brine_cluster::ProcedureDef::source)
        .collect();
    Ok(App {
        name: app.name,
        ddl: app.ddl,
        procs,
        mix: w.mix(),
    })
}

/// `--elia`: operation partitioning of the whole application, weighted
/// by its default mix.
fn run_elia(args: &AnalyzeArgs) -> Result<(), String> {
    if !args.groups.is_empty() || args.dot.is_some() || args.off.is_some() {
        return Err(
            "--elia analyses the whole application: --group, --dot and --off do not apply".into(),
        );
    }
    let app = application(&args.workload, args.tpcc_order.as_deref())?;
    let weights: HashMap<String, f64> = app.mix.iter().map(|(p, w)| (p.to_string(), *w)).collect();
    let plan = workloads::elia_plan_for(&app.name, &app.ddl, &app.procs, &weights)
        .map_err(|e| e.to_string())?;
    println!(
        "application {} (brine analyze {} --elia)",
        app.name, args.workload
    );
    print!("{}", plan.render());
    Ok(())
}

fn refinements(off: Option<&str>) -> Result<Refinements, String> {
    let mut r = Refinements::ALL;
    for name in off.into_iter().flat_map(|l| l.split(',')).map(str::trim) {
        if name.is_empty() {
            continue;
        }
        if name == "all" {
            r = Refinements::NONE;
            continue;
        }
        r = r.without(name).ok_or_else(|| {
            format!(
                "--off: unknown refinement `{name}` (known: {}, all)",
                Refinements::NAMES.join(", ")
            )
        })?;
    }
    Ok(r)
}

/// What Callas runs for a group whose procedures offer reorderings: the
/// order it chooses for each (`brine_analysis::order`; `all`, every
/// procedure's own body, gives the procedures outside the group) and the
/// pieces, by statement name.
fn print_runtime_orderings(
    catalog: &brine_core::Catalog,
    procs: &[ProcSource],
    notes: &[(String, Option<brine_analysis::ProcNotes>)],
    members: &[&ProcSpec],
    all: &[ProcSpec],
    r: Refinements,
) -> Result<(), String> {
    let sources: Vec<&ProcSource> = members
        .iter()
        .filter_map(|m| procs.iter().find(|p| p.name == m.name))
        .collect();
    if sources.iter().all(|s| s.reorderings.is_empty()) {
        return Ok(());
    }
    let mut candidates = Vec::new();
    for (src, own) in sources.iter().zip(members) {
        let notes = notes
            .iter()
            .find(|(n, _)| *n == src.name)
            .and_then(|(_, n)| n.clone())
            .unwrap_or_default();
        let c = (*own).clone().with_reorderings(catalog, src, &notes);
        candidates.push(c.map_err(|e| e.to_string())?);
    }
    // The runtime cuts each body in its own order (no larger-first
    // reordering inside a body) and chooses among the bodies.
    let runtime = Refinements {
        larger_first: false,
        ..r
    };
    println!("  Callas runs (each body as written; the orders offered, larger pieces first):");
    let outside: Vec<&ProcSpec> = all
        .iter()
        .filter(|s| !members.iter().any(|m| m.name == s.name))
        .collect();
    match choose_orderings(&candidates, &outside, runtime).map_err(|e| e.to_string())? {
        None => println!(
            "    no combination runs its chopping in body order: the own bodies, chopped in body order"
        ),
        Some(choice) => {
            for (p, src) in sources.iter().enumerate() {
                let pick = choice.picks[p];
                let chosen = &candidates[p][pick];
                let which = match pick.checked_sub(1) {
                    None => "its own body".to_string(),
                    Some(i) => format!("reordering `{}`", src.reorderings[i].0),
                };
                let pieces: String = choice.result.rp.choppings[p]
                    .pieces
                    .iter()
                    .map(|piece| {
                        let names: Vec<&str> =
                            piece.ops.iter().map(|&o| chosen.ops[o].name.as_str()).collect();
                        format!("<{}>", names.join(","))
                    })
                    .collect();
                println!("    {:<12} {which}: {pieces}", src.name);
            }
        }
    }
    Ok(())
}

fn run_inner(args: &AnalyzeArgs) -> Result<(), String> {
    if args.elia {
        return run_elia(args);
    }
    let r = refinements(args.off.as_deref())?;
    let App {
        name: app,
        ddl,
        procs,
        ..
    } = application(&args.workload, args.tpcc_order.as_deref())?;
    let notes: Vec<(String, Option<brine_analysis::ProcNotes>)> = procs
        .iter()
        .map(|p| (p.name.clone(), workloads::notes_of(&app, p)))
        .collect();
    let (catalog, specs) =
        workloads::specs_with_notes(&app, &ddl, &procs).map_err(|e| e.to_string())?;

    let groups: Vec<Vec<String>> = if !args.groups.is_empty() {
        args.groups
            .iter()
            // `new-order` names the procedure `new_order`, as in the sources.
            .map(|g| g.split(',').map(|s| s.trim().replace('-', "_")).collect())
            .collect()
    } else if let Some(g) = workloads::default_groups(&app) {
        g.iter()
            .map(|g| g.iter().map(|s| s.to_string()).collect())
            .collect()
    } else {
        vec![specs.iter().map(|s| s.name.clone()).collect()]
    };

    println!("application {app}: {} procedures", specs.len());
    for (name, n) in &notes {
        // Argument names alone (operation partitioning) say nothing of
        // the body's order.
        if !n
            .as_ref()
            .is_some_and(brine_analysis::ProcNotes::describes_body)
        {
            println!(
                "  {name}: no notes; assuming declaration order, dependencies on every earlier read"
            );
        }
    }
    println!();

    let mut dot = String::new();
    let mut grouped: Vec<&ProcSpec> = Vec::new();
    for (k, g) in groups.iter().enumerate() {
        let names: Vec<&str> = g.iter().map(String::as_str).collect();
        let members = select(&specs, &names).map_err(|e| e.to_string())?;
        let result = analyze_group(&members, r).map_err(|e| e.to_string())?;
        print!("{}", report::render_group(&members, &result));
        print_runtime_orderings(&catalog, &procs, &notes, &members, &specs, r)?;
        println!();
        dot.push_str(&report::render_dot(
            &members,
            &result,
            &format!("group{}", k + 1),
        ));
        grouped.extend(members.iter().copied());
    }

    // The comparison point: classic chopping (SC-cycle analysis), for the
    // whole application and within the groups.
    let all: Vec<&ProcSpec> = specs.iter().collect();
    println!("classic transaction chopping (SC-graph, rollback-safe, no SC-cycles; {r}):");
    println!("  whole application, every procedure chopped against all:");
    let whole = classic::classic_chopping(&all, r);
    for (s, c) in all.iter().zip(&whole) {
        println!("    {:<20} {}", s.name, report::compact(c));
    }
    let cycle = classic::find_sc_cycle(&all, &whole, &classic::two_of_each(all.len()), r, false);
    println!(
        "    SC-cycles: {}",
        cycle
            .as_deref()
            .unwrap_or("none (as the theory guarantees)")
    );
    println!("  within each group:");
    for g in &groups {
        let names: Vec<&str> = g.iter().map(String::as_str).collect();
        let members = select(&specs, &names).map_err(|e| e.to_string())?;
        let c = classic::classic_chopping(&members, r);
        for (s, c) in members.iter().zip(&c) {
            println!("    {:<20} {}", s.name, report::compact(c));
        }
    }
    let ungrouped: Vec<&str> = specs
        .iter()
        .filter(|s| !grouped.iter().any(|g| g.name == s.name))
        .map(|s| s.name.as_str())
        .collect();
    if !ungrouped.is_empty() {
        println!(
            "  not in any group (default group, no chopping): {}",
            ungrouped.join(", ")
        );
    }

    if let Some(path) = &args.dot {
        std::fs::write(path, dot)
            .map_err(|e| format!("cannot write --dot {}: {e}", path.display()))?;
        println!("\nwrote Graphviz DOT to {}", path.display());
    }
    Ok(())
}

/// Runs `brine analyze`; needs no cluster and no async runtime.
pub fn run(args: &AnalyzeArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpcc_order_chooses_the_bodies_the_analysis_reads() {
        let names = |order| {
            let app = application("tpcc", order).expect("tpcc");
            let p = app
                .procs
                .iter()
                .find(|p| p.name == "new_order")
                .expect("new_order");
            p.statements
                .iter()
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        };
        // Clause 2 takes the warehouse right after the items; hot-last
        // (the default) at the end.
        assert_eq!(names(Some("spec"))[1], "warehouse");
        assert_eq!(names(None).last().map(String::as_str), Some("warehouse"));
        assert!(application("tpcc", Some("sideways")).is_err());
        let e = application("ticket", Some("spec")).expect_err("not tpcc");
        assert!(e.contains("--tpcc-order"), "{e}");
    }

    fn elia(workload: &str) -> AnalyzeArgs {
        AnalyzeArgs {
            workload: workload.into(),
            groups: Vec::new(),
            dot: None,
            off: None,
            tpcc_order: None,
            elia: true,
        }
    }

    #[test]
    fn elia_runs_on_every_built_in_application() {
        for w in ["tpcw", "rubis", "tpcc", "ticket", "bank", "callas-rollback"] {
            run_inner(&elia(w)).unwrap_or_else(|e| panic!("{w}: {e}"));
        }
        let mut a = elia("tpcw");
        a.off = Some("column".into());
        assert!(run_inner(&a).is_err_and(|e| e.contains("--elia")));
        // The web workloads carry their default mixes.
        let app = application("tpcw", None).expect("tpcw");
        assert_eq!(app.mix.len(), 20);
        let app = application("rubis", None).expect("rubis");
        assert_eq!(app.mix.len(), 22);
    }
}
