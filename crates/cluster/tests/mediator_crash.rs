//! Mediator survives crashes: seeded trials run transfers (SI
//! transactions that move money between accounts and log a ledger row)
//! beside native puts (each client's own register, counting up; and hot
//! items the transactions write too), cut the power at a random log step,
//! recover, and require:
//!
//! - nothing half applied: the balances are the initial ones plus exactly
//!   the ledger's transfers (a write-back cut between partitions would
//!   break it);
//! - nothing acknowledged lost: every acknowledged transfer is in the
//!   ledger, and every client's register holds at least the last value
//!   it was told was put;
//! - every hot item holds a value someone wrote.
//!
//! A client's transfers write its register too, so a commit whose end
//! was not logged yet (it is unforced) is written back again at recovery
//! while the client's next native put may already be durable: the put is
//! newer and must stay. Over the trials, recovery's helper must have
//! written back commits whose write-back the crash cut (`replayed`) and
//! kept newer native puts (`superseded`).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use brine_cluster::protocols::mediator::Mediator;
use brine_cluster::{
    Application, Cluster, ClusterConfig, DurabilityConfig, DurabilityMode, LinkConfig, ProcedureDef,
};
use brine_core::{Error, Value};
use brine_storage::wal::{CrashSwitch, StepKind};
use rand::rngs::SmallRng;

mod crash_common;
use crash_common::{fast_root, runtime, trials};
use rand::{Rng, SeedableRng};

const ACCOUNTS: i64 = 8;
const START: i64 = 1000;
const HOT: i64 = 4;
const CLIENTS: u64 = 4;

fn app() -> Application {
    let transfer = ProcedureDef::new("transfer")
        .statement("bal", "SELECT v FROM acct WHERE k = $k")
        .statement("set", "UPDATE acct SET v = $v WHERE k = $k")
        .statement(
            "log",
            "INSERT INTO ledger (id, src, dst, amt) VALUES ($id, $src, $dst, $amt)",
        )
        .statement("hot", "UPDATE hot SET v = $v WHERE k = $k")
        .statement("reg", "UPDATE reg SET v = $v WHERE k = $k")
        .body(|mut ctx, args| async move {
            let (src, dst, amt, id, hot) = (
                args[0].clone(),
                args[1].clone(),
                args[2].as_int().unwrap_or(0),
                args[3].clone(),
                args[4].clone(),
            );
            // The client's register, which its native puts write too.
            ctx.exec("reg", vec![args[6].clone(), args[5].clone()])
                .await?;
            let b = |r: brine_cluster::QueryResult| r.rows[0][0].as_int().unwrap_or(0);
            let s = b(ctx.exec("bal", vec![src.clone()]).await?);
            let d = b(ctx.exec("bal", vec![dst.clone()]).await?);
            ctx.exec("set", vec![Value::Int(s - amt), src.clone()])
                .await?;
            ctx.exec("set", vec![Value::Int(d + amt), dst.clone()])
                .await?;
            ctx.exec("log", vec![id.clone(), src, dst, Value::Int(amt)])
                .await?;
            ctx.exec("hot", vec![id, hot]).await?;
            Ok(vec![])
        });
    let native = |name: &str, table: &str| {
        ProcedureDef::new(name)
            .native()
            .statement("put", format!("UPDATE {table} SET v = $v WHERE k = $k"))
            .body(|mut ctx, args| async move {
                ctx.exec("put", args).await?;
                Ok(vec![])
            })
    };
    Application {
        name: "mediator-crash".into(),
        ddl: "CREATE TABLE acct (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
              CREATE TABLE ledger (id INT, src INT NOT NULL, dst INT NOT NULL, amt INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
              CREATE TABLE reg (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
              CREATE TABLE hot (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);"
            .into(),
        procedures: vec![transfer, native("reg_put", "reg"), native("hot_put", "hot")],
    }
}

fn config(dir: &Path, crash: Option<Arc<CrashSwitch>>, link_delay_us: u64) -> ClusterConfig {
    ClusterConfig {
        protocol: "mediator".into(),
        nodes: 2,
        partitions_per_node: 2,
        link: LinkConfig {
            delay_us: link_delay_us,
            jitter_us: link_delay_us / 2,
        },
        durability: DurabilityConfig {
            mode: DurabilityMode::Wal,
            data_dir: Some(dir.to_path_buf()),
            segment_bytes: 1024,
            checkpoint_every_bytes: 1500,
            crash,
            ..DurabilityConfig::default()
        },
        ..ClusterConfig::default()
    }
}

async fn load(cluster: &Cluster) {
    let rows = |n: i64, v: i64| (0..n).map(|k| vec![Value::Int(k), Value::Int(v)]).collect();
    cluster
        .load("acct", rows(ACCOUNTS, START))
        .await
        .expect("load");
    cluster
        .load("reg", rows(CLIENTS as i64, 0))
        .await
        .expect("load");
    cluster.load("hot", rows(HOT, 0)).await.expect("load");
}

/// What the clients were told, and what they wrote to hot items.
#[derive(Default)]
struct Acked {
    transfers: HashSet<i64>,
    /// Each client's last acknowledged register value.
    registers: BTreeMap<i64, i64>,
    hot_values: HashSet<i64>,
}

async fn run(cluster: &Cluster, switch: &Arc<CrashSwitch>, seed: u64, ops: u64) -> Acked {
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = cluster.client();
        let switch = switch.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (c + 1).wrapping_mul(0x9E37_79B9));
            let mut acked = Acked::default();
            let mut counter = 0;
            for i in 0..ops {
                let id = (c * 100_000 + i + 1) as i64;
                let roll = rng.gen_range(0..10);
                counter += 1;
                let (proc, args) = if roll < 6 {
                    let src = rng.gen_range(0..ACCOUNTS);
                    let dst = (src + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
                    let hot = rng.gen_range(0..HOT);
                    acked.hot_values.insert(id);
                    let args = [src, dst, rng.gen_range(1..50), id, hot, c as i64, counter];
                    ("transfer", args.map(Value::Int).to_vec())
                } else if roll < 8 {
                    ("reg_put", vec![Value::Int(counter), Value::Int(c as i64)])
                } else {
                    acked.hot_values.insert(id);
                    let k = rng.gen_range(0..HOT);
                    ("hot_put", vec![Value::Int(id), Value::Int(k)])
                };
                match client.call(proc, args).await {
                    Ok(_) if proc == "transfer" => {
                        acked.transfers.insert(id);
                        acked.registers.insert(c as i64, counter);
                    }
                    Ok(_) if proc == "reg_put" => {
                        acked.registers.insert(c as i64, counter);
                    }
                    Ok(_) => {}
                    // After the crash nothing answers any more.
                    Err(_) if switch.is_crashed() => break,
                    // A transfer that lost its conflicts too often.
                    Err(Error::Aborted(_)) | Err(Error::RetriesExhausted { .. }) => {}
                    Err(e) => panic!("seed {seed}: {proc} failed before the crash: {e}"),
                }
            }
            acked
        }));
    }
    let mut all = Acked::default();
    for t in tasks {
        let a = t.await.expect("client task");
        all.transfers.extend(a.transfers);
        all.registers.extend(a.registers);
        all.hot_values.extend(a.hot_values);
    }
    all
}

async fn rows(cluster: &Cluster, sql: &str) -> Vec<Vec<i64>> {
    let mut t = cluster.client().begin();
    let r = t.execute(sql, vec![]).await.expect(sql);
    t.commit().await.expect("commit reads");
    r.rows
        .iter()
        .map(|r| r.iter().map(|v| v.as_int().unwrap_or(-1)).collect())
        .collect()
}

async fn check(cluster: &Cluster, acked: &Acked, what: &str) {
    let mut expect: BTreeMap<i64, i64> = (0..ACCOUNTS).map(|k| (k, START)).collect();
    let mut logged = HashSet::new();
    for r in rows(cluster, "SELECT id, src, dst, amt FROM ledger").await {
        *expect.get_mut(&r[1]).expect("src") -= r[3];
        *expect.get_mut(&r[2]).expect("dst") += r[3];
        logged.insert(r[0]);
    }
    let balances: BTreeMap<i64, i64> = rows(cluster, "SELECT k, v FROM acct")
        .await
        .into_iter()
        .map(|r| (r[0], r[1]))
        .collect();
    assert_eq!(balances, expect, "{what}: balances are not the ledger's");
    let lost: Vec<_> = acked.transfers.difference(&logged).collect();
    assert!(
        lost.is_empty(),
        "{what}: acknowledged transfers lost: {lost:?}"
    );
    for r in rows(cluster, "SELECT k, v FROM reg").await {
        let told = acked.registers.get(&r[0]).copied().unwrap_or(0);
        assert!(
            r[1] >= told,
            "{what}: register {} is {} below the acknowledged {told}",
            r[0],
            r[1]
        );
    }
    for r in rows(cluster, "SELECT k, v FROM hot").await {
        assert!(
            r[1] == 0 || acked.hot_values.contains(&r[1]),
            "{what}: hot item {} holds {}, which nobody wrote",
            r[0],
            r[1]
        );
    }
}

#[derive(Default, Debug)]
struct Tally {
    hits: BTreeMap<String, usize>,
    replayed: usize,
    superseded: usize,
    already_written: usize,
    torn: usize,
}

fn mediator(cluster: &Cluster) -> &Mediator {
    cluster
        .protocol()
        .as_any()
        .downcast_ref::<Mediator>()
        .expect("a Mediator cluster")
}

fn trial(root: &Path, seed: u64, tally: &mut Tally) {
    let dir = root.join(format!("trial-{seed}"));
    let multi = seed.is_multiple_of(2);
    let k = SmallRng::seed_from_u64(seed).gen_range(1..=200);
    let switch = Arc::new(CrashSwitch::never(seed));
    let rt = runtime(multi);
    let acked = rt.block_on(async {
        let cluster = Cluster::start(
            config(&dir, Some(switch.clone()), if multi { 30 } else { 0 }),
            app(),
        )
        .expect("start");
        load(&cluster).await;
        switch.arm(k);
        let acked = run(&cluster, &switch, seed, 30).await;
        cluster.crash();
        acked
    });
    drop(rt);
    let hit = switch.hit();
    *tally
        .hits
        .entry(hit.map_or("after the run".into(), |h: StepKind| format!("{h:?}")))
        .or_default() += 1;
    runtime(false).block_on(async {
        let cluster = Cluster::start(config(&dir, None, 0), app())
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        let report = mediator(&cluster).recovery().expect("a log").clone();
        tally.replayed += report.replayed;
        tally.superseded += report.superseded;
        tally.already_written += report.already_written;
        tally.torn += report.torn;
        check(&cluster, &acked, &format!("seed {seed} (k {k})")).await;
        // Recovery's work is durable: a second restart finds the same.
        cluster.close_logs();
        drop(cluster);
        let again = Cluster::start(config(&dir, None, 0), app()).expect("second restart");
        assert_eq!(mediator(&again).recovery().expect("a log").replayed, 0);
        check(
            &again,
            &acked,
            &format!("seed {seed} (k {k}), second restart"),
        )
        .await;
        again.close_logs();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn crash_trials_lose_no_acknowledged_write_and_show_no_half_written_commit() {
    let trials: u64 = trials("BRINE_CRASH_TRIALS", 100);
    let root = fast_root();
    let mut tally = Tally::default();
    for seed in 1..=trials {
        trial(root.path(), seed, &mut tally);
    }
    eprintln!("Mediator crash trials: {tally:?}");
    if trials >= 100 {
        assert!(tally.replayed > 0, "no crash cut a write-back: {tally:?}");
        assert!(tally.superseded > 0, "no replay met a newer put: {tally:?}");
        assert!(tally.hits.contains_key("Sync"), "{tally:?}");
    }
}

#[test]
fn a_clean_restart_keeps_every_version_and_resumes_the_clocks_above_them() {
    let root = fast_root();
    let dir = root.path().join("clean");
    runtime(false).block_on(async {
        let cluster = Cluster::start(config(&dir, None, 0), app()).expect("start");
        load(&cluster).await;
        let c = cluster.client();
        c.call("transfer", [0, 1, 10, 1, 0, 0, 1].map(Value::Int).to_vec())
            .await
            .expect("transfer");
        c.call("hot_put", vec![Value::Int(7), Value::Int(0)])
            .await
            .expect("put");
        cluster.close_logs();
    });
    runtime(false).block_on(async {
        let cluster = Cluster::start(config(&dir, None, 0), app()).expect("restart");
        let report = mediator(&cluster).recovery().expect("a log").clone();
        assert_eq!(report.replayed, 0, "{report:?}");
        // acct 0 and 1, the ledger row, reg 0, hot 0 (written twice).
        assert_eq!(report.items, 5, "{report:?}");
        let hot = rows(&cluster, "SELECT v FROM hot WHERE k = 0").await;
        assert_eq!(hot, vec![vec![7]]);
        // A transaction after the restart is ordered after the recovered
        // versions: its write is the latest, and a native put after it too.
        let c = cluster.client();
        c.call("transfer", [1, 2, 5, 2, 0, 0, 2].map(Value::Int).to_vec())
            .await
            .expect("transfer after restart");
        assert_eq!(
            rows(&cluster, "SELECT v FROM hot WHERE k = 0").await,
            vec![vec![2]]
        );
        c.call("hot_put", vec![Value::Int(9), Value::Int(0)])
            .await
            .expect("put");
        assert_eq!(
            rows(&cluster, "SELECT v FROM hot WHERE k = 0").await,
            vec![vec![9]]
        );
        let acct = rows(&cluster, "SELECT k, v FROM acct WHERE k = 1").await;
        assert_eq!(acct, vec![vec![1, START + 10 - 5]]);
        cluster.close_logs();
    });
}
