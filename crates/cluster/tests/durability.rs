//! Durability of the embedded cluster: restart, crash trials with real
//! files, a corrupted log refused, a torn tail truncated.
//!
//! The crash workload is a bank with a ledger: `pay(src, dst, amount, tid)`
//! moves money and inserts ledger row `tid`, so after recovery every
//! balance must equal its initial value plus exactly the effects of the
//! ledger rows present; a half-applied transaction breaks that equation,
//! an acknowledged one missing from the ledger is a lost commit.
//!
//! TPC-C's consistency conditions after a crash belong here too once the
//! TPC-C workload lands (crates/bench/src/workloads/tpcc): run it in
//! `crash_trial` instead of `pay` and check its conditions after recovery.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brine_cluster::{
    Application, Cluster, ClusterConfig, DeadlockPolicy, DurabilityConfig, DurabilityMode,
    Isolation, LinkConfig, ProcedureDef,
};
use brine_core::{Decimal, Error, Value};
use brine_storage::wal::{CrashSwitch, StepKind};
use rand::rngs::SmallRng;

mod crash_common;
use crash_common::{fast_root, runtime, trials};
use rand::{Rng, SeedableRng};

const DDL: &str = "
CREATE TABLE account (
    id INT NOT NULL,
    balance DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE TABLE ledger (
    tid INT NOT NULL,
    src INT NOT NULL,
    dst INT NOT NULL,
    amount DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (tid)
) PARTITION BY (tid);
";

const PARTITIONS: i64 = 4;
const ACCOUNTS: i64 = 16;
const INITIAL_CENTS: i64 = 10_000;

fn app() -> Application {
    Application {
        name: "ledger-bank".into(),
        ddl: DDL.into(),
        procedures: vec![ProcedureDef::new("pay")
            .statement(
                "add",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .statement(
                "log",
                "INSERT INTO ledger (tid, src, dst, amount) VALUES ($tid, $src, $dst, $amount)",
            )
            .body(|mut ctx, args| async move {
                let (src, dst, amount, tid) = (
                    args[0].clone(),
                    args[1].clone(),
                    args[2].clone(),
                    args[3].clone(),
                );
                let cents = amount.as_decimal().map_or(0, |d| d.units);
                ctx.exec("add", vec![cents_value(-cents), src.clone()])
                    .await?;
                ctx.exec("add", vec![amount.clone(), dst.clone()]).await?;
                ctx.exec("log", vec![tid, src, dst, amount]).await?;
                Ok(vec![])
            })],
    }
}

fn cents_value(c: i64) -> Value {
    Value::Decimal(Decimal::new(c, 2))
}

fn cents(v: &Value) -> i64 {
    v.as_decimal()
        .map_or(i64::MIN, |d| d.units_at(2).unwrap_or(i64::MIN))
}

fn wal_config(
    dir: &Path,
    crash: Option<Arc<CrashSwitch>>,
    link_delay_us: u64,
    checkpoint_every_bytes: u64,
) -> ClusterConfig {
    let mut c = ClusterConfig {
        nodes: 2,
        partitions_per_node: 2,
        link: LinkConfig {
            delay_us: link_delay_us,
            jitter_us: link_delay_us / 2,
        },
        isolation: Isolation::Serializable,
        durability: DurabilityConfig {
            mode: DurabilityMode::Wal,
            data_dir: Some(dir.to_path_buf()),
            segment_bytes: 1024,
            checkpoint_every_bytes,
            crash,
            ..DurabilityConfig::default()
        },
        ..ClusterConfig::default()
    };
    c.lock.policy = DeadlockPolicy::WaitDie;
    c.lock.wait_timeout = std::time::Duration::from_millis(200);
    c
}

async fn load_accounts(cluster: &Cluster) {
    let rows = (1..=ACCOUNTS)
        .map(|i| vec![Value::Int(i), cents_value(INITIAL_CENTS)])
        .collect();
    cluster.load("account", rows).await.expect("load");
}

/// Balances by account and the ledger, read after recovery.
async fn read_state(cluster: &Cluster) -> (BTreeMap<i64, i64>, Vec<(i64, i64, i64, i64)>) {
    let mut t = cluster.client().begin();
    let acc = t
        .execute("SELECT id, balance FROM account", vec![])
        .await
        .expect("read accounts");
    let led = t
        .execute("SELECT tid, src, dst, amount FROM ledger", vec![])
        .await
        .expect("read ledger");
    t.commit().await.expect("commit reads");
    let balances = acc
        .rows
        .iter()
        .map(|r| (r[0].as_int().unwrap_or(-1), cents(&r[1])))
        .collect();
    let ledger = led
        .rows
        .iter()
        .map(|r| {
            (
                r[0].as_int().unwrap_or(-1),
                r[1].as_int().unwrap_or(-1),
                r[2].as_int().unwrap_or(-1),
                cents(&r[3]),
            )
        })
        .collect();
    (balances, ledger)
}

/// Every balance is its initial value plus exactly the ledger's effects,
/// and every acknowledged payment is in the ledger.
fn check_state(
    balances: &BTreeMap<i64, i64>,
    ledger: &[(i64, i64, i64, i64)],
    acked: &HashSet<i64>,
    what: &str,
) {
    assert_eq!(balances.len() as i64, ACCOUNTS, "{what}: accounts lost");
    let mut expect: BTreeMap<i64, i64> = (1..=ACCOUNTS).map(|i| (i, INITIAL_CENTS)).collect();
    for &(_, src, dst, amount) in ledger {
        *expect.entry(src).or_default() -= amount;
        *expect.entry(dst).or_default() += amount;
    }
    assert_eq!(
        balances, &expect,
        "{what}: balances disagree with the ledger (a half-applied transaction)"
    );
    let total: i64 = balances.values().sum();
    assert_eq!(total, ACCOUNTS * INITIAL_CENTS, "{what}: bank total");
    let present: HashSet<i64> = ledger.iter().map(|l| l.0).collect();
    let lost: Vec<&i64> = acked.iter().filter(|t| !present.contains(t)).collect();
    assert!(
        lost.is_empty(),
        "{what}: acknowledged commits lost: {lost:?}"
    );
}

/// A payment: 40% single-partition (both accounts and the ledger row on
/// one partition), the rest spread (two-phase commit).
fn payment(rng: &mut SmallRng, tid: i64) -> Vec<Value> {
    let src = rng.gen_range(1..=ACCOUNTS);
    let dst = if rng.gen_bool(0.4) {
        // Same partition as src (ids and tids map by value mod 4).
        let mut d = src;
        while d == src {
            d = (rng.gen_range(0..ACCOUNTS / PARTITIONS)) * PARTITIONS + (src % PARTITIONS);
            if d == 0 {
                d = PARTITIONS;
            }
            if d > ACCOUNTS {
                d = src;
            }
        }
        d
    } else {
        let mut d = src;
        while d == src {
            d = rng.gen_range(1..=ACCOUNTS);
        }
        d
    };
    vec![
        Value::Int(src),
        Value::Int(dst),
        cents_value(rng.gen_range(1..500)),
        Value::Int(tid),
    ]
}

fn single_partition_tid(args: &[Value], tid: i64) -> i64 {
    let src = args[0].as_int().unwrap_or(0);
    let dst = args[1].as_int().unwrap_or(0);
    if src % PARTITIONS == dst % PARTITIONS {
        // Move the ledger row onto the same partition.
        tid * PARTITIONS + src % PARTITIONS
    } else {
        tid * PARTITIONS
    }
}

/// Runs `clients` clients of `ops` payments each; returns acknowledged tids.
async fn run_payments(cluster: &Cluster, seed: u64, clients: u64, ops: u64) -> HashSet<i64> {
    run_payments_of(cluster, seed, 0..clients, ops).await
}

/// `run_payments` by clients numbered `clients` (their payments' ids
/// differ from other clients').
async fn run_payments_of(
    cluster: &Cluster,
    seed: u64,
    clients: std::ops::Range<u64>,
    ops: u64,
) -> HashSet<i64> {
    let mut tasks = Vec::new();
    for c in clients {
        let client = cluster.client();
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (c + 1).wrapping_mul(0x9E37_79B9));
            let mut acked = Vec::new();
            for i in 0..ops {
                let base = (c * 10_000 + i) as i64;
                let mut args = payment(&mut rng, base);
                let tid = single_partition_tid(&args, base);
                args[3] = Value::Int(tid);
                match client.call("pay", args).await {
                    Ok(_) => acked.push(tid),
                    // After the crash nothing answers any more.
                    Err(_) => break,
                }
            }
            acked
        }));
    }
    let mut acked = HashSet::new();
    for t in tasks {
        acked.extend(t.await.expect("client task"));
    }
    acked
}

#[test]
fn committed_data_survives_a_clean_restart() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let rt = runtime(true);
    let acked = rt.block_on(async {
        let cluster = Cluster::start(wal_config(dir.path(), None, 0, 8192), app()).expect("start");
        load_accounts(&cluster).await;
        let acked = run_payments(&cluster, 1, 4, 25).await;
        assert_eq!(acked.len(), 100);
        let stats = cluster.wal_stats().expect("wal stats");
        assert!(stats.partitions.fsyncs > 0 && stats.decisions.fsyncs > 0);
        assert!(stats.partitions.rotations > 0, "segments rotated");
        cluster.close_logs();
        acked
    });
    for round in 0..2 {
        rt.block_on(async {
            let cluster =
                Cluster::start(wal_config(dir.path(), None, 0, 8192), app()).expect("restart");
            let report = cluster.recovery_report().expect("report");
            assert_eq!(report.epoch, round + 2);
            let (balances, ledger) = read_state(&cluster).await;
            check_state(&balances, &ledger, &acked, "after restart");
            assert_eq!(ledger.len(), 100);
            cluster.verify_storage().await.expect("indexes consistent");
            cluster.close_logs();
        });
    }
}

/// Issue 39: with three replicas of every log, each batch goes to the
/// log's replication group, and commits are acknowledged once a majority
/// has it. Every replica keeps its copy of the log on disk: the groups go
/// on from there after a restart, and a follower's copy alone, put in the
/// place of the log, recovers every acknowledged payment (what a failover
/// recovers from).
#[test]
fn with_replicated_logs_every_replica_holds_what_was_acknowledged() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let rt = runtime(true);
    let replicated = |root: &Path, replicas| {
        let mut c = wal_config(root, None, 100, 8192);
        c.durability.replicas = replicas;
        c.durability.replica_delay = std::time::Duration::from_micros(100);
        c
    };
    let mut acked = rt.block_on(async {
        let cluster = Cluster::start(replicated(dir.path(), 3), app()).expect("start");
        load_accounts(&cluster).await;
        let acked = run_payments(&cluster, 1, 4, 25).await;
        assert_eq!(acked.len(), 100);
        let stats = cluster.wal_stats().expect("wal stats");
        assert!(
            stats.partitions.replicated > 0 && stats.decisions.replicated > 0,
            "{stats:?}"
        );
        // A clean stop: every replica applied what was committed.
        cluster.settle_replicas().await;
        cluster.close_logs();
        acked
    });
    rt.block_on(async {
        let cluster = Cluster::start(replicated(dir.path(), 3), app()).expect("restart");
        let (balances, ledger) = read_state(&cluster).await;
        check_state(&balances, &ledger, &acked, "after restart");
        acked.extend(run_payments_of(&cluster, 2, 4..8, 25).await);
        assert_eq!(acked.len(), 200);
        cluster.settle_replicas().await;
        cluster.close_logs();
    });
    drop(rt);
    // A follower's copy in the place of every log (the one that got
    // furthest, as a raft election would choose, though both are complete
    // after the settling above).
    let copy = tempfile::tempdir().expect("tmpdir");
    let replicas = dir.path().join("replicas");
    for entry in std::fs::read_dir(&replicas).expect("replica dirs") {
        let log = entry.expect("entry").file_name();
        let name = log.to_string_lossy().into_owned();
        let id: u32 = name
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("log id");
        let furthest = ["r2", "r3"]
            .into_iter()
            .map(|r| replicas.join(&log).join(r).join("log"))
            .max_by_key(|d| {
                brine_storage::wal::Mirror::open(d, id, 1 << 20)
                    .expect("a copy")
                    .end()
                    .lsn
            })
            .expect("a follower");
        let to = copy.path().join(&log);
        std::fs::create_dir_all(&to).expect("dir");
        for f in std::fs::read_dir(furthest).expect("copy") {
            let f = f.expect("file");
            std::fs::copy(f.path(), to.join(f.file_name())).expect("copied");
        }
    }
    for f in std::fs::read_dir(dir.path()).expect("root") {
        let f = f.expect("file");
        if f.file_type().expect("type").is_file() {
            std::fs::copy(f.path(), copy.path().join(f.file_name())).expect("copied");
        }
    }
    let rt = runtime(true);
    rt.block_on(async {
        let cluster = Cluster::start(replicated(copy.path(), 1), app()).expect("from a copy");
        let (balances, ledger) = read_state(&cluster).await;
        check_state(&balances, &ledger, &acked, "from the followers' copies");
        assert_eq!(ledger.len(), 200);
        let stats = cluster.wal_stats().expect("wal stats");
        assert_eq!(
            stats.total().replicated,
            0,
            "one replica: nothing handed over"
        );
        cluster.close_logs();
    });
}

/// One crash trial: load, arm the switch `k` I/O steps ahead, run
/// payments until the crash, crash, recover, check.
fn crash_trial(root: &Path, seed: u64, multi: bool, tally: &mut Tally) {
    let dir = root.join(format!("trial-{seed}"));
    let mut rng = SmallRng::seed_from_u64(seed);
    let k = rng.gen_range(1..=250);
    let link = if multi { 30 } else { 0 };
    let switch = Arc::new(CrashSwitch::never(seed));
    let rt = runtime(multi);
    let acked = rt.block_on(async {
        let cluster = Cluster::start(wal_config(&dir, Some(switch.clone()), link, 1500), app())
            .expect("start");
        load_accounts(&cluster).await;
        let t = std::time::Instant::now();
        switch.arm(k);
        let acked = run_payments(&cluster, seed, 4, 25).await;
        let t1 = t.elapsed();
        cluster.crash();
        if std::env::var("BRINE_TRIAL_TIMES").is_ok() {
            eprintln!("  payments {t1:?} crash {:?}", t.elapsed());
        }
        acked
    });
    drop(rt);
    tally.record(switch.hit());
    let rt = runtime(false);
    rt.block_on(async {
        let cluster = Cluster::start(wal_config(&dir, None, 0, 1500), app())
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        let report = cluster.recovery_report().expect("report").clone();
        tally.in_doubt_committed += report.in_doubt_committed;
        tally.in_doubt_aborted += report.in_doubt_aborted;
        tally.torn += report
            .partitions
            .iter()
            .filter(|p| p.torn_bytes > 0)
            .count();
        tally.from_checkpoint += report
            .partitions
            .iter()
            .filter(|p| p.checkpoint_lsn > 0)
            .count();
        let (balances, ledger) = read_state(&cluster).await;
        check_state(&balances, &ledger, &acked, &format!("seed {seed} (k {k})"));
        cluster
            .verify_storage()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        cluster.close_logs();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Default, Debug)]
struct Tally {
    hits: BTreeMap<String, usize>,
    in_doubt_committed: usize,
    in_doubt_aborted: usize,
    torn: usize,
    from_checkpoint: usize,
}

impl Tally {
    fn record(&mut self, hit: Option<StepKind>) {
        let k = hit.map_or("after the run".to_string(), |h| format!("{h:?}"));
        *self.hits.entry(k).or_default() += 1;
    }
}

#[test]
fn crash_trials_lose_no_acknowledged_commit_and_apply_nothing_by_half() {
    let trials: u64 = trials("BRINE_CRASH_TRIALS", 500);
    let fast = fast_root();
    let disk = tempfile::tempdir().expect("tmpdir");
    let mut tally = Tally::default();
    for seed in 1..=trials {
        // Every tenth trial on the real disk; alternate the simulator
        // (single thread, immediate link) and a multi-threaded runtime
        // with a delayed, jittery link.
        let root = if seed % 10 == 0 {
            disk.path()
        } else {
            fast.path()
        };
        let t0 = std::time::Instant::now();
        crash_trial(root, seed, seed % 2 == 0, &mut tally);
        if std::env::var("BRINE_TRIAL_TIMES").is_ok() {
            eprintln!("trial {seed}: {:?}", t0.elapsed());
        }
    }
    eprintln!("crash trials: {tally:?}");
    if trials >= 500 {
        for kind in ["Write", "Sync", "Rotate", "Checkpoint"] {
            assert!(
                tally.hits.get(kind).copied().unwrap_or(0) > 0,
                "no crash hit a {kind} step: {tally:?}"
            );
        }
        assert!(
            tally.in_doubt_committed + tally.in_doubt_aborted > 0,
            "{tally:?}"
        );
        assert!(tally.torn > 0, "{tally:?}");
        assert!(tally.from_checkpoint > 0, "{tally:?}");
    }
}

/// Writes some committed payments and closes the logs cleanly; returns
/// the newest segment of partition 0.
fn clean_run(dir: &Path) -> (HashSet<i64>, PathBuf) {
    let rt = runtime(false);
    let acked = rt.block_on(async {
        let cluster = Cluster::start(wal_config(dir, None, 0, 0), app()).expect("start");
        load_accounts(&cluster).await;
        let acked = run_payments(&cluster, 7, 2, 20).await;
        cluster.close_logs();
        acked
    });
    let seg = brine_storage::wal::segment::list_segments(&dir.join("part-0"))
        .expect("list")
        .pop()
        .expect("a segment")
        .1;
    (acked, seg)
}

#[test]
fn corrupted_middle_record_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let (_, seg) = clean_run(dir.path());
    let mut bytes = std::fs::read(&seg).expect("read");
    let mid = 32 + (bytes.len() - 32) / 3;
    bytes[mid] ^= 0x5A;
    std::fs::write(&seg, &bytes).expect("write");
    let rt = runtime(false);
    let e = rt
        .block_on(async { Cluster::start(wal_config(dir.path(), None, 0, 0), app()).err() })
        .expect("recovery must refuse a corrupt log");
    match &e {
        Error::Corrupt { file, reason, .. } => {
            assert!(file.contains("part-0"), "{e}");
            assert!(reason.contains("corrupt in the middle"), "{e}");
        }
        other => panic!("expected a corruption error, got: {other}"),
    }
    // Refused, not repaired: the damaged file is left for inspection.
    assert_eq!(std::fs::read(&seg).expect("read"), bytes);
}

#[test]
fn torn_tail_is_truncated_and_acknowledged_commits_survive() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let (acked, seg) = clean_run(dir.path());
    // A torn write after the last acknowledged record: a partial frame.
    let mut bytes = std::fs::read(&seg).expect("read");
    let len = bytes.len();
    bytes.extend_from_slice(&[7, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    std::fs::write(&seg, &bytes).expect("write");
    let rt = runtime(false);
    rt.block_on(async {
        let cluster = Cluster::start(wal_config(dir.path(), None, 0, 0), app()).expect("recovers");
        let report = cluster.recovery_report().expect("report");
        assert_eq!(report.partitions[0].torn_bytes, 13);
        let (balances, ledger) = read_state(&cluster).await;
        check_state(&balances, &ledger, &acked, "after torn tail");
        cluster.close_logs();
    });
    let _ = len;
}

#[test]
fn a_different_partition_count_is_refused() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let rt = runtime(false);
    rt.block_on(async {
        let c = Cluster::start(wal_config(dir.path(), None, 0, 0), app()).expect("start");
        c.close_logs();
        let mut other = wal_config(dir.path(), None, 0, 0);
        other.partitions_per_node = 1;
        let e = Cluster::start(other, app()).err().expect("refused");
        assert!(e.to_string().contains("different layout"), "{e}");
    });
}
