//! End-to-end runs of the driver against the embedded cluster: invariants
//! hold, sweeps produce one result per point, the JSON keeps its contract.
//! Short debug-build runs; no timing figure is asserted.

use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::ycsb::KeyDistribution;
use brine_bench::workloads::{Bank, Micro, Ycsb};
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::{ClusterConfig, Isolation};
use serde_json::Value as Json;

fn spec(clients: &[u32], protocols: &[&str], secs: f64, isolation: Isolation) -> BenchSpec {
    BenchSpec {
        cluster: ClusterConfig {
            isolation,
            ..ClusterConfig::default()
        },
        protocols: protocols.iter().map(|p| p.to_string()).collect(),
        groupings: Vec::new(),
        clients: clients.to_vec(),
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs_f64(secs),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    }
}

fn metric(r: &brine_bench::PointResult, key: &str) -> u64 {
    r.workload_metrics
        .get(key)
        .and_then(Json::as_u64)
        .unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bank_total_is_constant_at_serializable() -> Result<(), BenchError> {
    let bank: Arc<dyn Workload> = Arc::new(Bank::new(1_000, 10)?);
    let report = run_bench(
        &spec(&[64], &["acid"], 2.5, Isolation::Serializable),
        &[bank],
        |_| {},
    )
    .await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    assert!(
        metric(r, "totals_read") > 0,
        "no total was read: {:?}",
        r.workload_metrics
    );
    assert_eq!(metric(r, "total_violations"), 0);
    assert!(metric(r, "transfers_committed") > 0);
    Ok(())
}

/// At read-committed a `total` may see a transfer half-applied (its reads
/// release their locks at once), so only the final total is asserted; the
/// number of inconsistent totals is printed for the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bank_final_total_is_constant_at_read_committed() -> Result<(), BenchError> {
    let bank: Arc<dyn Workload> = Arc::new(Bank::new(1_000, 10)?);
    let report = run_bench(
        &spec(&[64], &["acid"], 2.5, Isolation::ReadCommitted),
        &[bank],
        |_| {},
    )
    .await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    assert!(metric(r, "transfers_committed") > 0);
    println!(
        "read-committed: {} of {} totals read were inconsistent (legal at this level)",
        metric(r, "total_violations"),
        metric(r, "totals_read")
    );
    Ok(())
}

/// YCSB-style mixed traffic under `acid`: native gets and puts (one
/// statement each) beside transactions of 1..4 operations; no row lost,
/// and the operations of both kinds counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ycsb_runs_native_and_transactional_operations() -> Result<(), BenchError> {
    let ycsb: Arc<dyn Workload> =
        Arc::new(Ycsb::new(500, KeyDistribution::Zipfian(0.99), 0.5, 0.5, 4)?);
    let report = run_bench(
        &spec(&[8], &["acid"], 1.0, Isolation::Serializable),
        &[ycsb],
        |_| {},
    )
    .await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    for m in ["native_gets", "native_puts", "txn_gets", "txn_puts"] {
        assert!(
            metric(r, m) > 0 && metric(r, m) != u64::MAX,
            "{m}: {:?}",
            r.workload_metrics
        );
    }
    for p in ["get", "put", "txn"] {
        assert!(r.per_procedure[p].commits > 0, "{p}");
    }
    Ok(())
}

/// The same traffic under Mediator (snapshot isolation and serializable)
/// and its baseline: every row kept; Mediator serves the native gets and
/// puts natively (counted), the baseline runs each as a transaction; the
/// only aborts are validation aborts (no locks, no deadlocks).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ycsb_runs_under_mediator_and_its_baseline() -> Result<(), BenchError> {
    let ycsb: Arc<dyn Workload> = Arc::new(Ycsb::new(
        2_000,
        KeyDistribution::Zipfian(0.99),
        0.5,
        0.5,
        4,
    )?);
    let report = run_bench(
        &spec(
            &[8],
            &["omid", "mediator", "mediator-ser"],
            1.0,
            Isolation::Serializable,
        ),
        &[ycsb],
        |_| {},
    )
    .await?;
    for r in &report.results {
        assert_eq!(r.check, "passed", "{}", r.protocol);
        assert!(r.commits > 0, "{}", r.protocol);
        assert_eq!(r.lock_waits, 0, "{}: no locks", r.protocol);
        let others: u64 = r
            .aborts_by_cause
            .iter()
            .filter(|(k, _)| k.as_str() != "validation")
            .map(|(_, v)| v)
            .sum();
        assert_eq!(others, 0, "{}: {:?}", r.protocol, r.aborts_by_cause);
        let native = r.protocol_counters.get("native_ops").copied().unwrap_or(0);
        if r.protocol == "omid" {
            assert_eq!(native, 0, "the baseline transactifies them");
        } else {
            assert!(native > 0, "{}: {:?}", r.protocol, r.protocol_counters);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn micro_commits_and_keeps_its_sum() -> Result<(), BenchError> {
    let micro: Arc<dyn Workload> = Arc::new(Micro::new(100)?);
    let report = run_bench(
        &spec(&[8], &["acid"], 1.0, Isolation::Serializable),
        &[micro],
        |_| {},
    )
    .await?;
    let r = &report.results[0];
    assert!(r.commits > 0);
    assert!(r.per_procedure["update5"].commits > 0);
    assert_eq!(r.check, "passed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sweeps_give_one_result_per_point_and_the_json_contract(
) -> Result<(), Box<dyn std::error::Error>> {
    let workloads: Vec<Arc<dyn Workload>> =
        vec![Arc::new(Micro::new(50)?), Arc::new(Micro::new(500)?)];
    let mut printed = 0;
    let report = run_bench(
        &spec(&[1, 4], &["acid", "acid"], 0.3, Isolation::Serializable),
        &workloads,
        |_| printed += 1,
    )
    .await?;
    // 2 row counts x 2 protocols x 2 client counts.
    assert_eq!(report.results.len(), 8);
    assert_eq!(printed, 8);
    let points: Vec<(u64, String, u32)> = report
        .results
        .iter()
        .map(|r| {
            (
                r.params["rows"].as_u64().unwrap_or(0),
                r.protocol.clone(),
                r.clients,
            )
        })
        .collect();
    assert_eq!(points[0], (50, "acid".into(), 1));
    assert_eq!(points[3], (50, "acid".into(), 4));
    assert_eq!(points[7], (500, "acid".into(), 4));
    assert_eq!(report.peak.len(), 4);

    let v: Json = serde_json::from_str(&report.to_json()?)?;
    assert_eq!(v["workload"], "micro");
    assert!(v["config"].is_object());
    assert!(v["ratios"]["acid/acid"].is_number(), "{}", v["ratios"]);
    assert!(v["ratios"]["acid/acid@rows=50"].is_number());
    let results = v["results"].as_array().ok_or("results is not an array")?;
    for r in results {
        for key in brine_bench::report::CONTRACT_RESULT_KEYS.iter().chain(&[
            "statements_per_s",
            "aborts_by_cause",
            "link_delay_us_measured",
            "peak",
            "rows",
        ]) {
            assert!(r.get(key).is_some(), "result lacks `{key}`: {r}");
        }
        assert!(r["per_procedure"]["update5"]["latency_us_p99"].is_number());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_protocol_is_rejected_before_running() -> Result<(), BenchError> {
    let micro: Arc<dyn Workload> = Arc::new(Micro::new(100)?);
    let err = run_bench(
        &spec(&[1], &["acid", "nonesuch"], 0.1, Isolation::Serializable),
        &[micro],
        |_| {},
    )
    .await
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("nonesuch"), "{err}");
    Ok(())
}

/// A workload whose invariant never holds: the run must end with the
/// check's error, after the point was reported.
struct NeverHolds(Micro);

impl Workload for NeverHolds {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn params(&self) -> serde_json::Map<String, Json> {
        self.0.params()
    }
    fn mix(&self) -> Vec<(&'static str, f64)> {
        self.0.mix()
    }
    fn application(&self) -> brine_cluster::Application {
        self.0.application()
    }
    fn load<'a>(
        &'a self,
        cluster: &'a brine_cluster::Cluster,
    ) -> brine_bench::workload::BoxFuture<'a, brine_bench::Result<()>> {
        self.0.load(cluster)
    }
    fn client(&self, index: u32, rng: rand::rngs::SmallRng) -> Box<dyn brine_bench::ClientGen> {
        self.0.client(index, rng)
    }
    fn check<'a>(
        &'a self,
        _: &'a brine_cluster::Cluster,
    ) -> brine_bench::workload::BoxFuture<'a, brine_bench::Result<()>> {
        Box::pin(async { Err(BenchError::Invariant("never holds".into())) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_fails_the_run_after_reporting_the_point() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(NeverHolds(Micro::new(100)?));
    let mut seen = Vec::new();
    let out = run_bench(
        &spec(&[2, 4], &["acid"], 0.2, Isolation::Serializable),
        &[w],
        |r| seen.push(r.check.clone()),
    )
    .await;
    assert!(matches!(out, Err(BenchError::Invariant(_))));
    assert_eq!(seen.len(), 1, "the sweep stops at the first failed check");
    assert!(seen[0].starts_with("FAILED"), "{seen:?}");
    Ok(())
}

/// `raw` promises no isolation, so a broken invariant there is reported
/// on its point and the comparison goes on (a `--compare acid,salt,raw
/// --check` run keeps its summary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_under_raw_is_reported_and_the_run_goes_on() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(NeverHolds(Micro::new(100)?));
    let report = run_bench(
        &spec(&[2, 4], &["raw"], 0.2, Isolation::Serializable),
        &[w],
        |_| {},
    )
    .await?;
    assert_eq!(report.results.len(), 2, "both points ran");
    for r in &report.results {
        assert!(
            r.check.starts_with("violated (no isolation)"),
            "{}",
            r.check
        );
    }
    Ok(())
}

/// With `rounds`, the protocols take turns at each client count, round
/// after round, and every point is measured once per round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rounds_interleave_the_protocols_at_each_client_count() -> Result<(), BenchError> {
    let micro: Arc<dyn Workload> = Arc::new(Micro::new(100)?);
    let mut s = spec(&[1, 2], &["acid", "raw"], 0.2, Isolation::ReadCommitted);
    s.warmup = Duration::ZERO;
    s.rounds = 2;
    let report = run_bench(&s, &[micro], |_| {}).await?;
    let order: Vec<(u32, u32, &str)> = report
        .results
        .iter()
        .map(|r| (r.clients, r.round, r.protocol.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            (1, 1, "acid"),
            (1, 1, "raw"),
            (1, 2, "acid"),
            (1, 2, "raw"),
            (2, 1, "acid"),
            (2, 1, "raw"),
            (2, 2, "acid"),
            (2, 2, "raw"),
        ]
    );
    assert_eq!(report.round_ratios.get("raw/acid").map(Vec::len), Some(2));
    s.rounds = 0;
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("--rounds"), "{e}");
    Ok(())
}
