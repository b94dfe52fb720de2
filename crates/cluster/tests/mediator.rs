//! Mediator in the embedded cluster: seed 003 Fig. 2b end to end (a native
//! put inside a transaction's epoch aborts it; its retry commits), the
//! shortcuts, and bad input (wrong types, SQL writes, partial puts) with
//! clear errors and nothing changed.

use std::sync::Arc;

use std::time::Duration;

use brine_cluster::protocols::mediator::{Abandon, Mediator, MediatorOptions};
use brine_cluster::{
    Application, CallOutcome, Cluster, ClusterConfig, LinkConfig, Mutation, ProcedureDef,
};
use brine_core::NodeId;
use brine_core::{Error, Value};
use tokio::sync::{mpsc, Mutex, Notify};

const DDL: &str =
    "CREATE TABLE kv (k INT, v INT NOT NULL, w INT, PRIMARY KEY (k)) PARTITION BY (k);";

/// The points a transaction body stops at, for the test to act in between.
#[derive(Default)]
struct Gate {
    /// The body reached the gate.
    reached: Notify,
    /// The test lets it go on.
    go: Notify,
    /// Whether the next run of the body stops at the gate.
    armed: Mutex<bool>,
}

fn app(gate: Arc<Gate>, seen: mpsc::UnboundedSender<i64>) -> Application {
    let gate2 = gate.clone();
    let get = ProcedureDef::new("get")
        .native()
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .body(|mut ctx, args| async move {
            let r = ctx.exec("get", args).await?;
            Ok(r.rows.into_iter().next().unwrap_or_default())
        });
    let put = ProcedureDef::new("put")
        .native()
        .statement("put", "UPDATE kv SET v = $v, w = $w WHERE k = $k")
        .body(|mut ctx, args| async move {
            ctx.exec("put", args).await?;
            Ok(vec![])
        });
    // Reads k, stops at the gate (if armed), then writes k and k + 1.
    let bump = ProcedureDef::new("bump")
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .statement("put", "UPDATE kv SET v = $v, w = $w WHERE k = $k")
        .body(move |mut ctx, args| {
            let (gate, seen) = (gate.clone(), seen.clone());
            async move {
                let k = args[0].clone();
                let r = ctx.exec("get", vec![k.clone()]).await?;
                let v = r.rows[0][0].as_int().unwrap_or(0);
                let _ = seen.send(v);
                let armed = std::mem::take(&mut *gate.armed.lock().await);
                if armed {
                    gate.reached.notify_one();
                    gate.go.notified().await;
                }
                let next = Value::Int(k.as_int().unwrap_or(0) + 1);
                for key in [k, next] {
                    ctx.exec("put", vec![Value::Int(v + 100), Value::Int(0), key])
                        .await?;
                }
                Ok(vec![])
            }
        });
    // Reads a, stops at the gate (if armed), then reads b.
    let slow_pair = ProcedureDef::new("slow_pair")
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .body(move |mut ctx, args| {
            let gate = gate2.clone();
            async move {
                ctx.exec("get", vec![args[0].clone()]).await?;
                if std::mem::take(&mut *gate.armed.lock().await) {
                    gate.reached.notify_one();
                    gate.go.notified().await;
                }
                ctx.exec("get", vec![args[1].clone()]).await?;
                Ok(vec![])
            }
        });
    let partial = ProcedureDef::new("partial")
        .statement("get", "SELECT v FROM kv WHERE k = $k")
        .statement("set_v", "UPDATE kv SET v = $v WHERE k = $k")
        .body(|mut ctx, args| async move {
            ctx.exec("get", vec![args[0].clone()]).await?;
            ctx.exec("set_v", vec![args[1].clone(), args[0].clone()])
                .await?;
            Ok(vec![])
        });
    Application {
        name: "kv".into(),
        ddl: DDL.into(),
        procedures: vec![get, put, bump, slow_pair, partial],
    }
}

async fn start(
    protocol: &str,
    mutation: Option<Mutation>,
) -> (Cluster, Arc<Gate>, mpsc::UnboundedReceiver<i64>) {
    start_with(protocol, mutation, MediatorOptions::default()).await
}

async fn start_with(
    protocol: &str,
    mutation: Option<Mutation>,
    mediator: MediatorOptions,
) -> (Cluster, Arc<Gate>, mpsc::UnboundedReceiver<i64>) {
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let config = ClusterConfig {
        protocol: protocol.into(),
        mutation,
        mediator,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    };
    let c = Cluster::start(config, app(gate.clone(), tx)).expect("cluster");
    let rows = (0..10)
        .map(|k| vec![Value::Int(k), Value::Int(k), Value::Int(0)])
        .collect();
    c.load("kv", rows).await.expect("load");
    (c, gate, rx)
}

async fn v_of(c: &Cluster, k: i64) -> i64 {
    let r = c
        .client()
        .call("get", vec![Value::Int(k)])
        .await
        .expect("get");
    r.values[0].as_int().unwrap_or(-1)
}

/// Fig. 2b's race in the cluster: `bump` reads k = 3 (v = 3) and stops
/// at the gate; a native `put` (or, under the baseline, a one-put
/// transaction) writes v = 50 inside its epoch; then `bump` goes on to
/// write k and k + 1 and commit. Returns the cluster, `bump`'s outcome
/// and the values its runs read.
async fn race(protocol: &str, mutation: Option<Mutation>) -> (Cluster, CallOutcome, Vec<i64>) {
    let (c, gate, mut seen) = start(protocol, mutation).await;
    *gate.armed.lock().await = true;
    let client = c.client();
    let bump = tokio::spawn(async move { client.call("bump", vec![Value::Int(3)]).await });
    gate.reached.notified().await;
    c.client()
        .call("put", vec![Value::Int(50), Value::Int(1), Value::Int(3)])
        .await
        .expect("put");
    gate.go.notify_one();
    let outcome = bump.await.expect("task").expect("bump commits");
    seen.close();
    let mut reads = Vec::new();
    while let Some(v) = seen.recv().await {
        reads.push(v);
    }
    (c, outcome, reads)
}

/// Fig. 2b: the commit finds the put and aborts (a native conflict,
/// counted); the retry reads 50 and commits 150.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_put_inside_a_transaction_s_epoch_aborts_it_and_the_retry_commits() {
    let (c, outcome, reads) = race("mediator", None).await;
    assert_eq!((outcome.attempts, reads), (2, vec![3, 50]));
    assert_eq!((v_of(&c, 3).await, v_of(&c, 4).await), (150, 150));
    let s = c.stats();
    assert_eq!(s.counter("native_conflicts"), 1, "{s:?}");
    assert_eq!(s.aborts_validation, 1, "{s:?}");
    assert_eq!(s.counter("native_ops"), 3, "one put, two gets");
}

/// Without the native-conflict check (the mutation) the same race loses
/// the put: `bump` commits on its first attempt the value it computed from
/// v = 3, over the put's 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_native_check_the_put_is_lost() {
    let (c, outcome, reads) = race("mediator", Some(Mutation::NoNativeCheck)).await;
    assert_eq!((outcome.attempts, reads), (1, vec![3]));
    assert_eq!(v_of(&c, 3).await, 103, "the put's 50 was overwritten");
    assert_eq!(c.stats().aborts_validation, 0);
}

/// The baseline runs the same procedures as transactions: the put is a
/// transaction serialized before `bump`'s commit, so the oracle (not a
/// native check) refuses `bump`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_baseline_the_same_conflict_is_the_oracle_s() {
    let (c, outcome, reads) = race("omid", None).await;
    assert_eq!((outcome.attempts, reads), (2, vec![3, 50]));
    let s = c.stats();
    assert_eq!(
        (s.counter("tso_conflicts"), s.counter("native_ops")),
        (1, 0),
        "{s:?}"
    );
}

/// Bad input: a key of the wrong type, a SQL write in an interactive
/// transaction, a transactional put that would keep columns of the old
/// row: each a clear error, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let (c, _gate, _seen) = start("mediator", None).await;
    let client = c.client();
    let err = client
        .call("get", vec![Value::str("three")])
        .await
        .expect_err("a string key");
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    let mut t = client.begin();
    let err = t
        .execute("UPDATE kv SET v = 1 WHERE k = $k", vec![Value::Int(2)])
        .await
        .expect_err("a SQL write");
    assert!(err.to_string().contains("writes are puts"), "{err}");
    t.abort().await;
    let err = client
        .call("partial", vec![Value::Int(2), Value::Int(9)])
        .await
        .expect_err("a partial put");
    assert!(err.to_string().contains("writes whole rows"), "{err}");
    assert_eq!(v_of(&c, 2).await, 2);
    let mut t = client.begin();
    let r = t
        .execute("SELECT COUNT(*) FROM kv", vec![])
        .await
        .expect("SQL reads see the latest versions");
    assert_eq!(r.scalar().and_then(Value::as_int), Some(10));
    t.commit().await.expect("read-only");
}

fn mediator(c: &Cluster) -> &Mediator {
    c.protocol()
        .as_any()
        .downcast_ref::<Mediator>()
        .expect("a Mediator cluster")
}

/// Waits (observing, with a deadline) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn impatient(abandon: Option<Abandon>) -> MediatorOptions {
    MediatorOptions {
        helper_patience: Duration::from_millis(100),
        abandon,
        ..MediatorOptions::default()
    }
}

/// A cluster whose coordinators go away at `point` of every commit (an
/// impatient helper), after one `bump` of 3 failed there.
async fn left_at(point: Abandon) -> Cluster {
    let (c, _gate, _seen) = start_with("mediator", None, impatient(Some(point))).await;
    let err = c
        .client()
        .call("bump", vec![Value::Int(3)])
        .await
        .expect_err("the coordinator went away");
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    c
}

/// A coordinator that goes away after its commit reached the log: the
/// call fails, and the helper writes the commit back and tells the TSO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_finishes_a_logged_commit_its_coordinator_left() {
    let c = left_at(Abandon::Logged).await;
    until("the helper finished it", || {
        c.stats().counter("helper_committed") == 1
    })
    .await;
    assert_eq!((v_of(&c, 3).await, v_of(&c, 4).await), (103, 103));
    assert_eq!(c.stats().counter("helper_aborted"), 0);
}

/// One that goes away after the TSO serialized it, before its log: the
/// helper aborts it, its writes never appear, and the ring lets the next
/// transactions on the same items commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_aborts_an_unlogged_commit_its_coordinator_left() {
    let c = left_at(Abandon::Serialized).await;
    until("the helper aborted it", || {
        c.stats().counter("helper_aborted") == 1
    })
    .await;
    assert_eq!((v_of(&c, 3).await, v_of(&c, 4).await), (3, 4));
    c.client()
        .call("put", vec![Value::Int(7), Value::Int(0), Value::Int(3)])
        .await
        .expect("native puts never wait for the helper");
    assert_eq!(v_of(&c, 3).await, 7);
}

/// A transaction that holds its snapshot past its lifetime: the TSO gives
/// up on it, the partitions collect below it, and its next get fails with
/// a clear error instead of reading a collected snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_outlives_its_snapshot_gets_a_clear_error() {
    let options = MediatorOptions {
        snapshot_lifetime: Duration::from_millis(200),
        ..MediatorOptions::default()
    };
    let (c, gate, _seen) = start_with("mediator", None, options).await;
    // A native get starts the version collector.
    v_of(&c, 0).await;
    *gate.armed.lock().await = true;
    let client = c.client();
    let pair = tokio::spawn(async move {
        client
            .call("slow_pair", vec![Value::Int(1), Value::Int(2)])
            .await
    });
    gate.reached.notified().await;
    let m = mediator(&c);
    let start = m.oldest_snapshot(NodeId(0)).await.expect("the TSO answers");
    until("the partitions collected past the snapshot", || {
        m.collected_below() > start
    })
    .await;
    gate.go.notify_one();
    let err = pair.await.expect("task").expect_err("its snapshot is gone");
    assert!(
        err.to_string()
            .contains("held its snapshot longer than 200ms"),
        "{err}"
    );
    assert_eq!(c.stats().counter("too_old"), 1);
    assert_eq!(v_of(&c, 1).await, 1, "nothing changed");
}

/// An unreachable TSO: transactions fail with a clear error, native gets
/// and puts go on, and nothing committed is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_tso_fails_transactions_clearly_and_loses_nothing() {
    let (c, _gate, _seen) = start("mediator", None).await;
    let client = c.client();
    client
        .call("bump", vec![Value::Int(5)])
        .await
        .expect("bump commits");
    mediator(&c).stop_tso(NodeId(0));
    let err = client
        .call("bump", vec![Value::Int(7)])
        .await
        .expect_err("no TSO");
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    assert!(err.to_string().contains("the TSO"), "{err}");
    client
        .call("put", vec![Value::Int(70), Value::Int(0), Value::Int(7)])
        .await
        .expect("a native put needs no TSO");
    assert_eq!((v_of(&c, 5).await, v_of(&c, 6).await), (105, 105));
    assert_eq!((v_of(&c, 7).await, v_of(&c, 8).await), (70, 8));
}

/// A statement on an unknown table is refused when the application is
/// deployed, and interactively, with the table's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_table_is_refused_by_name() {
    let bad = Application {
        name: "bad".into(),
        ddl: DDL.into(),
        procedures: vec![ProcedureDef::new("get")
            .native()
            .statement("get", "SELECT v FROM nope WHERE k = $k")
            .body(|mut ctx, args| async move {
                ctx.exec("get", args).await?;
                Ok(vec![])
            })],
    };
    let config = ClusterConfig {
        protocol: "mediator".into(),
        ..ClusterConfig::default()
    };
    let err = Cluster::start(config, bad).err().expect("refused");
    assert!(err.to_string().contains("nope"), "{err}");
    let (c, _gate, _seen) = start("mediator", None).await;
    let mut t = c.client().begin();
    let err = t
        .execute("SELECT v FROM nope WHERE k = 1", vec![])
        .await
        .expect_err("unknown table");
    assert!(err.to_string().contains("nope"), "{err}");
    t.abort().await;
}

/// Under serializability a procedure that only reads runs on its snapshot
/// and commits without validation: a writer that commits inside its
/// window neither aborts it nor shows it half its writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_procedure_under_serializability_reads_its_snapshot_and_never_aborts() {
    let (c, gate, _seen) = start("mediator-ser", None).await;
    *gate.armed.lock().await = true;
    let client = c.client();
    let pair = tokio::spawn(async move {
        client
            .call("slow_pair", vec![Value::Int(3), Value::Int(4)])
            .await
    });
    gate.reached.notified().await;
    // bump reads 3 and writes 103 to both 3 and 4.
    c.client()
        .call("bump", vec![Value::Int(3)])
        .await
        .expect("bump commits");
    gate.go.notify_one();
    let outcome = pair.await.expect("task").expect("the pair commits");
    assert_eq!(outcome.attempts, 1);
    assert_eq!(c.stats().aborts_validation, 0);
    assert_eq!((v_of(&c, 3).await, v_of(&c, 4).await), (103, 103));
}

/// A commit whose coordinator's process died with it (no coordinator left
/// knows it): the TSO's process aborts it after five times the helper's
/// patience, so the ring and later snapshots move on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tso_s_process_aborts_a_commit_no_coordinator_holds() {
    let c = left_at(Abandon::ProcessGone).await;
    until("the orphan was aborted", || {
        c.stats().counter("helper_aborted") == 1
    })
    .await;
    assert_eq!(c.stats().counter("helper_committed"), 0);
    assert_eq!((v_of(&c, 3).await, v_of(&c, 4).await), (3, 4));
}
