//! A protocol plugs into brine as a module and one registration line: the
//! test protocol `no-wait` (`no_wait/mod.rs`, written against the public
//! protocol interface only) runs the bank workload with its invariant
//! checked, beside `acid` on the same workload.

mod no_wait;

use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::Bank;
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::{ClusterConfig, Isolation};
use serde_json::Value as Json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_protocol_runs_the_bank_with_its_total_kept() -> Result<(), BenchError> {
    brine_cluster::protocols::register(no_wait::REGISTRATION)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    // Few accounts, so transfers meet each other.
    let bank: Arc<dyn Workload> = Arc::new(Bank::new(50, 10)?);
    let spec = BenchSpec {
        cluster: ClusterConfig {
            isolation: Isolation::Serializable,
            ..ClusterConfig::default()
        },
        protocols: vec!["acid".into(), "no-wait".into()],
        groupings: Vec::new(),
        clients: vec![16],
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(2),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    };
    let report = run_bench(&spec, &[bank], |_| {}).await?;
    let metric = |r: &brine_bench::PointResult, key: &str| {
        r.workload_metrics.get(key).and_then(Json::as_u64)
    };
    let (acid, no_wait) = (&report.results[0], &report.results[1]);
    assert_eq!(
        (acid.protocol.as_str(), no_wait.protocol.as_str()),
        ("acid", "no-wait")
    );
    for r in [acid, no_wait] {
        assert_eq!(r.check, "passed", "{}", r.protocol);
        assert_eq!(metric(r, "total_violations"), Some(0), "{}", r.protocol);
        assert!(metric(r, "transfers_committed") > Some(0), "{}", r.protocol);
    }
    // The same conflicts: under `acid` they are waited for; under
    // `no-wait` never, each one a victim retried instead.
    assert!(
        acid.lock_waits > 0,
        "acid never waited: no conflict to show"
    );
    assert_eq!(no_wait.lock_waits, 0);
    assert!(
        no_wait.aborts_by_cause.get("lock_timeout") > Some(&0),
        "{:?}",
        no_wait.aborts_by_cause
    );
    Ok(())
}
