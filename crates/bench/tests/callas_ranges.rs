//! Runtime Pipelining with range reads (issue 31, item 1): `register` with
//! its read-write and range-read procedures pipelined in one group, at
//! serializable, the command. Its histories must be serializable
//! under both deadlock policies. The independent check found G-single and
//! G2 cycles there; two faults made them: the bodies' loop was not
//! declared to the analysis (so the range read, declared last, ended the
//! piece in mid-body), and a scan and a same-group write into its range
//! declared no dependency. The first is now refused at run time
//! (`crates/cluster/tests/callas.rs`,
//! `a_statement_after_its_piece_ended_is_an_error_naming_the_disagreement`)
//! and declared for register; the second has its scenario and mutation
//! there too (`a_scan_over_a_same_group_insert_depends_on_it`, and with
//! `Mutation::ExactCallasDeps` a dirty read of a rolled-back insert).
//! Short seeded debug-build runs; no timing figure is asserted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::Register;
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_check::{Level, Outcome, Report};
use brine_cluster::{ClusterConfig, DeadlockPolicy, Grouping, Isolation, LinkConfig};

const GROUPING: &str = "g:rp=read_write,range_read";

/// Runs `register` (8 keys, 16 clients) under Callas with [`GROUPING`],
/// records the history and checks it at serializable.
async fn pipelined_run(seed: u64, policy: DeadlockPolicy) -> Result<Report, BenchError> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "brine-callas-ranges-{}-{seed}-{policy:?}.jsonl",
        std::process::id()
    ));
    let mut cluster = ClusterConfig {
        isolation: Isolation::Serializable,
        link: LinkConfig {
            delay_us: 50,
            jitter_us: 10,
        },
        seed,
        history: Some(path.clone()),
        grouping: Some(Grouping::parse(GROUPING).expect("grouping")),
        ..ClusterConfig::default()
    };
    cluster.lock.policy = policy;
    let spec = BenchSpec {
        cluster,
        protocols: vec!["callas".into()],
        groupings: Vec::new(),
        clients: vec![16],
        warmup: Duration::from_millis(50),
        duration: Duration::from_millis(1000),
        check: false,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
    };
    let workload: Arc<dyn Workload> = Arc::new(Register::new(8)?);
    run_bench(&spec, &[workload], |_| {}).await?;
    let history = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    let committed = history
        .txns
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .count();
    assert!(
        committed >= 50,
        "too few transactions to say anything: {committed}"
    );
    Ok(brine_check::check(&history.txns, Level::Serializable))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_range_reads_stay_serializable() -> Result<(), BenchError> {
    for seed in 0..8 {
        for policy in [DeadlockPolicy::WaitDie, DeadlockPolicy::Detect] {
            let report = pipelined_run(seed, policy).await?;
            assert!(report.valid, "seed {seed} {policy:?}: {}", report.render(3));
        }
    }
    Ok(())
}
