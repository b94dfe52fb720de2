//! TPC-C survives crashes: seeded trials load a small TPC-C database with
//! the write-ahead log on, run the standard mix from several clients, cut
//! the power at a random log step (a write, a sync, a segment rotation or
//! a checkpoint), recover from the files, and then require that the
//! clause 3.3.2 consistency conditions hold and that every acknowledged
//! new-order's order is present.
//!
//! The bank-style trials in `crates/cluster/tests/durability.rs` cover the
//! commit and recovery paths in depth (500 trials); these add TPC-C's
//! wide, multi-table transactions and its consistency checks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use brine_bench::workloads::tpcc::{check, Mix, Scale, Tpcc};
use brine_bench::Workload;
use brine_cluster::{
    Cluster, ClusterConfig, DeadlockPolicy, DurabilityConfig, DurabilityMode, Grouping, Isolation,
    LinkConfig,
};
use brine_core::Value;
use brine_storage::wal::{CrashSwitch, StepKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const WAREHOUSES: i64 = 2;
const CLIENTS: u64 = 4;
const CALLS_PER_CLIENT: usize = 40;

/// The cluster of a trial: `acid` under wait-die, or Callas with new-order
/// and payment in one group under its own deadlock handling (detection):
/// pipelined (`Protocol::Callas`), or chopped by the classic analysis,
/// each piece committing on its own (`Protocol::CallasSc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Acid,
    Callas,
    CallasSc,
}

/// `history`: the file the run records its history to.
fn wal_config(
    dir: &Path,
    crash: Option<Arc<CrashSwitch>>,
    protocol: Protocol,
    history: &Path,
) -> ClusterConfig {
    let mut c = ClusterConfig {
        nodes: 2,
        partitions_per_node: 1,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        isolation: Isolation::Serializable,
        durability: DurabilityConfig {
            mode: DurabilityMode::Wal,
            data_dir: Some(dir.to_path_buf()),
            // Small segments and a small checkpoint interval, so crashes
            // also land on rotations and checkpoints.
            segment_bytes: 32 * 1024,
            checkpoint_every_bytes: 96 * 1024,
            crash,
            ..DurabilityConfig::default()
        },
        history: Some(history.to_path_buf()),
        ..ClusterConfig::default()
    };
    c.lock.policy = DeadlockPolicy::WaitDie;
    let grouping = match protocol {
        Protocol::Acid => None,
        Protocol::Callas => Some("orders:rp=new_order,payment"),
        Protocol::CallasSc => Some("orders:sc=new_order,payment"),
    };
    if let Some(grouping) = grouping {
        c.protocol = "callas".into();
        c.grouping = Some(Grouping::parse(grouping).expect("grouping"));
        c.lock.policy = DeadlockPolicy::Detect;
    }
    c
}

fn workload() -> Tpcc {
    Tpcc::new(WAREHOUSES, Scale::SMALL, Mix::STANDARD).expect("tpcc")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An acknowledged new-order: (warehouse, district, order id).
type Acked = (i64, i64, i64);

/// Runs the mix from `CLIENTS` clients until each made its calls or the
/// power is cut; returns the new-orders that were acknowledged.
async fn run_until_crash(
    cluster: &Cluster,
    w: &Tpcc,
    seed: u64,
    switch: &Arc<CrashSwitch>,
) -> Vec<Acked> {
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let client = cluster.client();
        let mut gen = w.client(i as u32, SmallRng::seed_from_u64(seed * 100 + i));
        let stop = switch.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for _ in 0..CALLS_PER_CLIENT {
                if stop.is_crashed() {
                    break;
                }
                let req = gen.next();
                let outcome = client.call(req.procedure, req.args.clone()).await;
                gen.observe(req.procedure, &outcome);
                if let (Ok(out), "new_order") = (&outcome, req.procedure) {
                    let int = |v: &Value| v.as_int().expect("INT");
                    acked.push((int(&req.args[0]), int(&req.args[1]), int(&out.values[0])));
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.expect("client task"));
    }
    acked
}

fn trial(
    root: &Path,
    seed: u64,
    protocol: Protocol,
    hits: &mut std::collections::BTreeMap<String, usize>,
) {
    let dir = root.join(format!("trial-{seed}"));
    let history = dir.join("history");
    std::fs::create_dir_all(&history).expect("the history directory");
    let mut rng = SmallRng::seed_from_u64(seed);
    let k = rng.gen_range(1..=300);
    let switch = Arc::new(CrashSwitch::never(seed));
    let w = workload();
    let rt = runtime();
    let acked = rt.block_on(async {
        let cluster = Cluster::start(
            wal_config(
                &dir,
                Some(switch.clone()),
                protocol,
                &history.join("1-before.jsonl"),
            ),
            w.application(),
        )
        .expect("start");
        w.load(&cluster).await.expect("load");
        switch.arm(k);
        let acked = run_until_crash(&cluster, &w, seed, &switch).await;
        cluster.crash();
        acked
    });
    drop(rt);
    let hit = switch
        .hit()
        .map_or("after the run".to_string(), |h: StepKind| format!("{h:?}"));
    *hits.entry(hit).or_default() += 1;

    let rt = runtime();
    rt.block_on(async {
        let w = workload();
        let after = history.join("2-after.jsonl");
        let cluster = Cluster::start(wal_config(&dir, None, protocol, &after), w.application())
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        w.check(&cluster)
            .await
            .unwrap_or_else(|e| panic!("seed {seed} (k {k}): consistency after recovery: {e}"));
        *hits.entry("rolled forward".into()).or_default() +=
            cluster.stats().counter("rolled_forward") as usize;
        for (wh, d, o) in &acked {
            let rows = check::read_rows(
                &cluster,
                "SELECT o_id FROM orders WHERE o_w_id = $w AND o_d_id = $d AND o_id = $o",
                vec![Value::Int(*wh), Value::Int(*d), Value::Int(*o)],
            )
            .await
            .expect("read orders");
            assert_eq!(
                rows.len(),
                1,
                "seed {seed} (k {k}): acknowledged new-order ({wh}, {d}, {o}) lost"
            );
        }
        cluster
            .verify_storage()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // Both runs' histories, as one, are serializable (per column
        // under Runtime Pipelining, as its header asks): a chopped
        // transaction's roll-forward is recorded with what its pieces
        // committed before the crash (logged with their contexts).
        cluster.flush_history().expect("flush");
        let h = brine_check::reader::read_path(&history).expect("the history");
        let report = brine_check::check_history(&h, brine_check::Level::Serializable);
        assert!(report.valid, "seed {seed} (k {k}): {:?}", report.anomalies);
        cluster.close_logs();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn fast_root() -> tempfile::TempDir {
    // tmpfs when there is one: the same files and fsyncs, without the
    // disk's latency.
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(&shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tmpdir")
}

/// Runs `default` trials (or `var`'s count) of `protocol`, and checks
/// that the power cuts fell mid-run in at least half of them.
fn trials(protocol: Protocol, var: &str, default: u64) {
    let trials: u64 = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let root = fast_root();
    let mut hits = std::collections::BTreeMap::new();
    for seed in 1..=trials {
        trial(root.path(), seed, protocol, &mut hits);
    }
    eprintln!("tpcc crash trials ({protocol:?}): {trials} trials, cuts at {hits:?}");
    // The trials must have crashed mid-run, not only after it.
    let mid_run: usize = hits
        .iter()
        .filter(|(k, _)| !["after the run", "rolled forward"].contains(&k.as_str()))
        .map(|(_, n)| n)
        .sum();
    assert!(mid_run * 2 >= trials as usize, "{hits:?}");
}

#[test]
fn tpcc_stays_consistent_and_keeps_acknowledged_orders_across_crashes() {
    trials(Protocol::Acid, "BRINE_TPCC_CRASH_TRIALS", 24);
}

/// Callas with the log: new-order and payment pipelined (Runtime
/// Pipelining reads and increments the district and warehouse rows of
/// transactions still running, and commits in dependency order). No
/// acknowledged new-order is lost, and the consistency conditions hold
/// (every payment's increments of the year-to-date totals are there
/// exactly when the payment committed).
#[test]
fn callas_tpcc_stays_consistent_and_keeps_acknowledged_orders_across_crashes() {
    trials(Protocol::Callas, "BRINE_CALLAS_CRASH_TRIALS", 16);
}

/// Callas with the log and new-order and payment chopped (`sc`): each
/// piece commits on its own, so a power cut can fall between two pieces
/// of a new-order (the order inserted, its lines not yet) or a payment.
/// Recovery rolls such transactions forward from what their pieces
/// logged, before the consistency conditions are checked: without it,
/// an order without its lines, or a district's year-to-date total without
/// its warehouse's, breaks them.
#[test]
fn callas_sc_tpcc_rolls_chopped_transactions_forward_across_crashes() {
    trials(Protocol::CallasSc, "BRINE_CALLAS_SC_CRASH_TRIALS", 12);
}
