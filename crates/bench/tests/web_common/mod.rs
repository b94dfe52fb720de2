//! Shared by the TPC-W and RUBiS tests: a run under Salt with its BASE
//! writers, its history checked for Salt Isolation; a run with every
//! procedure pipelined in one Callas group, its history checked at
//! serializable.

use std::sync::Arc;

use brine_bench::{run_bench, BenchError, BenchSpec, PointResult, Workload};
use brine_check::{Level, TxnClass};
use brine_cluster::{Grouping, Mechanism};

/// Runs `w` under `salt` with `s` (its default `--base`), recording the
/// history: the workload's check passes, more than ten BASE transactions
/// were accepted, and the history passes the Salt Isolation check (no
/// ACID transaction saw a BASE transaction half done).
pub async fn salt_history_is_clean(
    mut s: BenchSpec,
    w: Arc<dyn Workload>,
    name: &str,
) -> Result<(), BenchError> {
    let path = std::env::temp_dir().join(format!("brine-{name}-salt-{}.jsonl", std::process::id()));
    s.protocols = vec!["salt".into()];
    s.cluster.protocol = "salt".into();
    s.cluster.history = Some(path.clone());
    let report = run_bench(&s, &[w], |_| {}).await?;
    assert_eq!(report.results[0].check, "passed");
    let history = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    let accepted = history
        .txns
        .iter()
        .filter(|t| t.class == TxnClass::Base && t.accepted)
        .count();
    assert!(
        accepted > 10,
        "{name}: too few BASE transactions: {accepted}"
    );
    let report = brine_check::check(&history.txns, Level::Salt);
    assert!(report.valid, "{name}: {}", report.render(5));
    Ok(())
}

/// Runs `w` under `callas` with every procedure in one Runtime Pipelining
/// group, recording the history: the workload's check passes and the
/// history is serializable at the column level RP runs ask for. Returns
/// the point for more assertions.
pub async fn pipelined_history_is_clean(
    mut s: BenchSpec,
    w: Arc<dyn Workload>,
    name: &str,
) -> Result<PointResult, BenchError> {
    let path = std::env::temp_dir().join(format!("brine-{name}-rp-{}.jsonl", std::process::id()));
    let app = w.application();
    s.protocols = vec!["callas".into()];
    s.cluster.protocol = "callas".into();
    s.cluster.grouping = Some(Grouping::single(
        Mechanism::Rp,
        app.procedures.iter().map(|p| p.name.as_str()),
    ));
    s.cluster.history = Some(path.clone());
    let report = run_bench(&s, &[w], |_| {}).await?;
    let r = report
        .results
        .into_iter()
        .next()
        .ok_or_else(|| BenchError::Internal(format!("{name}: the run reported no point")))?;
    assert_eq!(r.check, "passed", "{name}");
    let history = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    // Runtime Pipelining orders columns, not rows (two members writing
    // different columns of one row do not wait for each other), and its
    // runs ask for column-level items, as `brine check` honours them.
    assert!(
        brine_check::columns::wants_columns(&history.header),
        "{name}"
    );
    let names = brine_check::columns::column_names(&history.header);
    let report = brine_check::check_columns(&history.txns, Level::Serializable, &names);
    assert!(report.valid, "{name}: {}", report.render(5));
    Ok(r)
}
