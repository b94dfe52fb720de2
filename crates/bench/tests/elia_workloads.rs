//! Elia's microbenchmark under `elia` and its baselines (`central`,
//! `read-replicas`, partitioned `acid`), on three servers with per-pair
//! delays: every protocol keeps the check (each site's items count its
//! clients' local operations; every replica counts every global one), and
//! under `elia` local operations never wait for the token while global
//! ones all do. Short debug-build runs; no timing figure is asserted.

use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::elia_micro::{self, EliaMicro};
use brine_bench::workloads::rubis::{self, Rubis};
use brine_bench::workloads::tpcw::{self, Tpcw};
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::topology::Topology;
use brine_cluster::{ClusterConfig, Isolation, LinkConfig, Placement};

fn spec(protocols: &[&str]) -> BenchSpec {
    let topology = Topology::parse(
        "unit = us\nkind = one-way\nsites = a b c\na = 200 900 700\nb = 900 200 800\nc = 700 800 200",
    )
    .expect("topology");
    BenchSpec {
        cluster: ClusterConfig {
            nodes: 3,
            partitions_per_node: 1,
            placement: Placement::Colocated,
            isolation: Isolation::Serializable,
            link: LinkConfig {
                delay_us: 100,
                jitter_us: 0,
            },
            topology: Some(Arc::new(topology)),
            ..ClusterConfig::default()
        },
        protocols: protocols.iter().map(|p| p.to_string()).collect(),
        groupings: Vec::new(),
        clients: vec![12],
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(600),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_keeps_the_micro_check() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(EliaMicro::new(60, 1)?);
    let report = run_bench(
        &spec(&["elia", "central", "read-replicas", "acid"]),
        &[w],
        |_| {},
    )
    .await?;
    for r in &report.results {
        assert_eq!(r.check, "passed", "{}", r.protocol);
        for p in [elia_micro::LOCAL_OP, elia_micro::GLOBAL_OP] {
            assert!(
                r.per_procedure.get(p).is_some_and(|s| s.commits > 0),
                "{}: no {p} committed",
                r.protocol
            );
        }
    }
    // Under elia the token ran the globals; every local ran where its
    // client was.
    let elia = &report.results[0];
    let counter = |name: &str| elia.protocol_counters.get(name).copied().unwrap_or(0);
    assert!(counter("global_calls") > 0, "{:?}", elia.protocol_counters);
    assert!(counter("local_calls") > 0, "{:?}", elia.protocol_counters);
    assert!(counter("token_turns") > 0);
    assert_eq!(
        counter("routed_away"),
        0,
        "clients pick their own site's items"
    );
    Ok(())
}

/// TPC-W and RUBiS under `elia` on three servers, their routes from the
/// analysis: each workload's check passes against every server's replica
/// (global data the same everywhere, each server's carts and sessions
/// consistent where they live), and the recorded history is serializable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_workloads_under_elia_keep_their_checks_and_serializability() -> Result<(), BenchError>
{
    let tpcw: Arc<dyn Workload> = Arc::new(Tpcw::new(tpcw::Scale::SMALL, tpcw::Mix::ORDERING)?);
    let rubis: Arc<dyn Workload> = Arc::new(Rubis::new(rubis::Scale::SMALL, rubis::Mix::BIDDING)?);
    for (name, w) in [("tpcw", tpcw), ("rubis", rubis)] {
        let path =
            std::env::temp_dir().join(format!("brine-elia-{name}-{}.jsonl", std::process::id()));
        let mut s = spec(&["elia"]);
        s.cluster.topology = None;
        s.cluster.history = Some(path.clone());
        s.clients = vec![9];
        let report = run_bench(&s, &[w], |_| {}).await?;
        let r = &report.results[0];
        assert_eq!(r.check, "passed", "{name}");
        assert!(
            r.protocol_counters
                .get("global_calls")
                .copied()
                .unwrap_or(0)
                > 0,
            "{name}: no global call: {:?}",
            r.protocol_counters
        );
        let h = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
        std::fs::remove_file(&path).ok();
        let report = brine_check::check(&h.txns, brine_check::Level::Serializable);
        assert!(report.valid, "{name}: {}", report.render(5));
    }
    Ok(())
}

#[test]
fn bad_parameters_are_refused() {
    assert!(matches!(EliaMicro::new(101, 5), Err(BenchError::Config(_))));
    assert!(matches!(
        EliaMicro::new(50, 20_000),
        Err(BenchError::Config(_))
    ));
}
