//! Mediator in the embedded cluster: seed 003 Fig. 2b end to end (a native
//! put inside a transaction's epoch aborts it; its retry commits), the
//! shortcuts, and bad input (wrong types, SQL writes, partial puts) with
//! clear errors and nothing changed.

use std::sync::Arc;

use brine_cluster::{
    Application, CallOutcome, Cluster, ClusterConfig, LinkConfig, Mutation, ProcedureDef,
};
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
        procedures: vec![get, put, bump, partial],
    }
}

async fn start(
    protocol: &str,
    mutation: Option<Mutation>,
) -> (Cluster, Arc<Gate>, mpsc::UnboundedReceiver<i64>) {
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let config = ClusterConfig {
        protocol: protocol.into(),
        mutation,
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
