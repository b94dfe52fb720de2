//! Mediator's mixed traffic, checked: transactions (read-modify-write of
//! two items, and read-only pairs) beside native gets and puts of the same
//! items, from clients that each run one call at a time. The history names
//! versions by timestamp and each record's client; the checker treats
//! native operations as one-operation transactions and holds each client
//! to per-key order. Mediator (snapshot isolation), its serializable
//! variant and the baseline pass at their levels over seeded runs; with
//! the native-conflict check off (lost updates) or the temporal fences off
//! (a client's native put ordered before its own earlier transaction's
//! write) the checker must object.

use std::path::PathBuf;

use brine_check::{Level, Outcome};
use brine_cluster::{Application, Cluster, ClusterConfig, LinkConfig, Mutation, ProcedureDef};
use brine_core::Value;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: i64 = 6;
const CLIENTS: u64 = 8;
const CALLS: u64 = 40;

fn app() -> Application {
    let int = |r: brine_cluster::QueryResult| r.rows[0][0].as_int().unwrap_or(0);
    let rmw = ProcedureDef::new("rmw")
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .statement("put", "UPDATE kv SET v = $v WHERE k = $k")
        .body(move |mut ctx, args| async move {
            let a = int(ctx.exec("get", vec![args[0].clone()]).await?);
            let b = int(ctx.exec("get", vec![args[1].clone()]).await?);
            ctx.exec("put", vec![Value::Int(a + 1), args[0].clone()])
                .await?;
            ctx.exec("put", vec![Value::Int(b + 1), args[1].clone()])
                .await?;
            Ok(vec![])
        });
    let pair = ProcedureDef::new("pair")
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .body(|mut ctx, args| async move {
            for k in args {
                ctx.exec("get", vec![k]).await?;
            }
            Ok(vec![])
        });
    let get = ProcedureDef::new("get")
        .native()
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .body(|mut ctx, args| async move {
            ctx.exec("get", args).await?;
            Ok(vec![])
        });
    let put = ProcedureDef::new("put")
        .native()
        .statement("put", "UPDATE kv SET v = $v WHERE k = $k")
        .body(|mut ctx, args| async move {
            ctx.exec("put", args).await?;
            Ok(vec![])
        });
    Application {
        name: "mediator-history".into(),
        ddl: "CREATE TABLE kv (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);".into(),
        procedures: vec![rmw, pair, get, put],
    }
}

/// Runs the mixed traffic and returns the recorded history.
async fn record(protocol: &str, mutation: Option<Mutation>, seed: u64) -> brine_check::History {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "brine-mediator-history-{}-{}.jsonl",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let config = ClusterConfig {
        protocol: protocol.into(),
        mutation,
        nodes: 2,
        partitions_per_node: 2,
        link: LinkConfig {
            delay_us: 50,
            jitter_us: 10,
        },
        seed,
        history: Some(path.clone()),
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config, app()).expect("cluster");
    let rows = (0..KEYS)
        .map(|k| vec![Value::Int(k), Value::Int(0)])
        .collect();
    cluster.load("kv", rows).await.expect("load");
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = cluster.client();
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed * 1000 + c);
            for i in 0..CALLS {
                let a = rng.gen_range(0..KEYS);
                let b = (a + rng.gen_range(1..KEYS)) % KEYS;
                let (proc, args) = match rng.gen_range(0..4) {
                    0 => ("rmw", vec![Value::Int(a), Value::Int(b)]),
                    1 => ("pair", vec![Value::Int(a), Value::Int(b)]),
                    2 => ("get", vec![Value::Int(a)]),
                    _ => (
                        "put",
                        vec![Value::Int((c * 1000 + i) as i64), Value::Int(a)],
                    ),
                };
                // A transaction that lost its conflicts too often is no
                // failure here: the history records its attempts.
                let _ = client.call(proc, args).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    cluster.flush_history().expect("history");
    let history = brine_check::read_file(&path).expect("read history");
    std::fs::remove_file(&path).ok();
    history
}

fn committed(h: &brine_check::History) -> usize {
    h.txns
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_traffic_keeps_each_protocols_level() {
    for (protocol, level) in [
        ("mediator", Level::SnapshotIsolation),
        ("omid", Level::SnapshotIsolation),
        ("mediator-ser", Level::Serializable),
    ] {
        for seed in 0..4 {
            let h = record(protocol, None, seed).await;
            assert!(h.header.timestamp_versions());
            assert!(
                h.txns.iter().all(|t| t.client.is_some()),
                "{protocol}: every record names its client"
            );
            assert!(
                committed(&h) > 100,
                "{protocol} seed {seed}: too few commits"
            );
            let report = brine_check::check_history(&h, level);
            assert!(report.valid, "{protocol} seed {seed}: {}", report.render(3));
        }
    }
}

/// Runs seeds until the checker objects at `level`; the mutation must
/// be caught within a few.
async fn caught(mutation: Mutation, level: Level) -> brine_check::Report {
    for seed in 0..6 {
        let h = record("mediator", Some(mutation), seed).await;
        let report = brine_check::check_history(&h, level);
        if !report.valid {
            return report;
        }
    }
    panic!("{mutation:?} went unnoticed in 6 seeded runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_native_conflict_check_lost_updates_are_caught() {
    let report = caught(Mutation::NoNativeCheck, Level::SnapshotIsolation).await;
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| a.class == brine_check::AnomalyClass::GSingle),
        "{}",
        report.render(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_temporal_fences_a_clients_order_is_broken() {
    let report = caught(Mutation::NoTemporalFence, Level::SnapshotIsolation).await;
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| a.class == brine_check::AnomalyClass::SessionOrder),
        "{}",
        report.render(3)
    );
}
