//! Shared by the TPC-W and RUBiS tests: a run under Salt with its BASE
//! writers, its history checked for Salt Isolation.

use std::sync::Arc;

use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_check::{Level, TxnClass};

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
