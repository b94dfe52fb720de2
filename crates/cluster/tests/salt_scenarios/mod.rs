//! The fixture of the Salt scenario tests (`salt.rs`, `salt_release.rs`):
//! a two-node cluster of rows `kv(k, v)` (keys 0..8) whose BASE
//! procedures pause at named gates, so a test can hold a BASE transaction
//! between its subtransactions and look at what others can and cannot do
//! meanwhile. Its test file declares `mod salt_common;` beside it.
#![allow(dead_code)]

use std::time::Duration;

use brine_cluster::{
    Application, Cluster, ClusterConfig, DeadlockPolicy, Isolation, LinkConfig, Mutation,
    ProcedureDef,
};
use brine_core::Value;

use super::salt_common::{fig_3_1_transfer, int, Gates};

pub const DDL: &str = "
CREATE TABLE kv (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
CREATE TABLE ledger (id INT NOT NULL, amt INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
";

pub fn app(gates: Gates) -> Application {
    let g1 = gates.clone();
    let gates_for_xz = gates.clone();
    let gates_for_wrw = gates.clone();
    let g2 = gates;
    Application {
        name: "salt-scenarios".into(),
        ddl: DDL.into(),
        procedures: vec![
            // BASE: one alkaline subtransaction setting k := v.
            ProcedureDef::new("set")
                .base()
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(|mut ctx, args| async move {
                    ctx.exec("set", vec![args[1].clone(), args[0].clone()])
                        .await?;
                    Ok(vec![])
                }),
            // BASE: alkaline1 sets k := v1, waits at `<gate>-in` inside the
            // subtransaction, opens gate `<signal>` (a fifth argument, if
            // given) once it committed, waits at `<gate>-between`, then
            // alkaline2 sets k := v2.
            ProcedureDef::new("two_step")
                .base()
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(move |mut ctx, args| {
                    let gates = g1.clone();
                    async move {
                        let (k, v1, v2) = (args[0].clone(), args[1].clone(), args[2].clone());
                        let gate = args[3].as_str().expect("gate name").to_string();
                        ctx.begin_alkaline()?;
                        ctx.exec("set", vec![v1, k.clone()]).await?;
                        gates.wait(&format!("{gate}-in")).await;
                        ctx.end_alkaline().await?;
                        if let Some(signal) = args.get(4).and_then(Value::as_str) {
                            gates.open(signal);
                        }
                        gates.wait(&format!("{gate}-between")).await;
                        ctx.exec("set", vec![v2, k]).await?;
                        Ok(vec![])
                    }
                }),
            // BASE: alkaline1 sets x, waits at `<gate>`, alkaline2 sets z.
            ProcedureDef::new("x_then_z")
                .base()
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body({
                    let gates = gates_for_xz.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            let gate = args[4].as_str().expect("gate name").to_string();
                            ctx.exec("set", vec![args[1].clone(), args[0].clone()])
                                .await?;
                            gates.wait(&gate).await;
                            ctx.exec("set", vec![args[3].clone(), args[2].clone()])
                                .await?;
                            Ok(vec![])
                        }
                    }
                }),
            // BASE: copy src into dst in one alkaline subtransaction.
            ProcedureDef::new("copy")
                .base()
                .statement("get", "SELECT v FROM kv WHERE k = $k")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(|mut ctx, args| async move {
                    ctx.begin_alkaline()?;
                    let r = ctx.exec("get", vec![args[0].clone()]).await?;
                    let v = r.rows[0][0].clone();
                    ctx.exec("set", vec![v, args[1].clone()]).await?;
                    ctx.end_alkaline().await?;
                    Ok(vec![])
                }),
            // BASE: `copy`, reading src with a range read over
            // [src - 1, src] instead of a point read.
            ProcedureDef::new("range_copy")
                .base()
                .statement("scan", "SELECT k, v FROM kv WHERE k >= $lo AND k <= $hi")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(|mut ctx, args| async move {
                    let src = int(&args[0]);
                    ctx.begin_alkaline()?;
                    let r = ctx
                        .exec("scan", vec![Value::Int(src - 1), Value::Int(src)])
                        .await?;
                    let v = r
                        .rows
                        .iter()
                        .find(|row| int(&row[0]) == src)
                        .map(|row| row[1].clone())
                        .expect("src row");
                    ctx.exec("set", vec![v, args[1].clone()]).await?;
                    ctx.end_alkaline().await?;
                    Ok(vec![])
                }),
            // BASE: like `copy`, but it also writes src back after reading
            // it (the shape of a transfer's debit), so its lock on src is
            // needed again by a statement after the dirty read.
            ProcedureDef::new("touch_copy")
                .base()
                .statement("get", "SELECT v FROM kv WHERE k = $k")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(|mut ctx, args| async move {
                    ctx.begin_alkaline()?;
                    let r = ctx.exec("get", vec![args[0].clone()]).await?;
                    let v = r.rows[0][0].clone();
                    ctx.exec("set", vec![v.clone(), args[0].clone()]).await?;
                    ctx.exec("set", vec![v, args[1].clone()]).await?;
                    ctx.end_alkaline().await?;
                    Ok(vec![])
                }),
            // BASE: accepted once k is read; then `n` subtransactions that
            // each read k and add 1 to it (all on k's partition).
            ProcedureDef::new("steps")
                .base()
                .statement("get", "SELECT v FROM kv WHERE k = $k")
                .statement("add", "UPDATE kv SET v = v + 1 WHERE k = $k")
                .body(|mut ctx, args| async move {
                    let (k, n) = (args[0].clone(), int(&args[1]));
                    ctx.begin_alkaline()?;
                    ctx.exec("get", vec![k.clone()]).await?;
                    ctx.end_alkaline().await?;
                    for _ in 0..n {
                        ctx.begin_alkaline()?;
                        ctx.exec("get", vec![k.clone()]).await?;
                        ctx.exec("add", vec![k.clone()]).await?;
                        ctx.end_alkaline().await?;
                    }
                    Ok(vec![])
                }),
            // BASE: sets k := v1, opens gate `<signal>`, waits at
            // `<gate>`, reads j, then sets k := v2: three single-statement
            // subtransactions, the last one on the row the first wrote.
            ProcedureDef::new("write_read_write")
                .base()
                .statement("get", "SELECT v FROM kv WHERE k = $k")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body({
                    let gates = gates_for_wrw.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            let (k, v1, j, v2) = (
                                args[0].clone(),
                                args[1].clone(),
                                args[2].clone(),
                                args[3].clone(),
                            );
                            ctx.exec("set", vec![v1, k.clone()]).await?;
                            gates.open(args[5].as_str().expect("signal name"));
                            gates.wait(args[4].as_str().expect("gate name")).await;
                            ctx.exec("get", vec![j]).await?;
                            ctx.exec("set", vec![v2, k]).await?;
                            Ok(vec![])
                        }
                    }
                }),
            fig_3_1_transfer(Some(g2)),
        ],
    }
}

pub fn config(protocol: &str, mutation: Option<Mutation>, policy: DeadlockPolicy) -> ClusterConfig {
    let mut c = ClusterConfig {
        nodes: 2,
        partitions_per_node: 1,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        protocol: protocol.into(),
        isolation: Isolation::ReadCommitted,
        mutation,
        ..ClusterConfig::default()
    };
    c.lock.policy = policy;
    c.lock.wait_timeout = Duration::from_secs(10);
    c
}

pub async fn start(protocol: &str, mutation: Option<Mutation>) -> (Cluster, Gates) {
    let gates = Gates::default();
    let c = Cluster::start(
        config(protocol, mutation, DeadlockPolicy::Detect),
        app(gates.clone()),
    )
    .expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    (c, gates)
}

/// An ACID read of k (an interactive transaction).
pub async fn acid_get(c: &Cluster, k: i64) -> i64 {
    let mut t = c.client().begin();
    let r = t
        .execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(k)])
        .await
        .expect("acid read");
    t.commit().await.expect("commit");
    int(&r.rows[0][0])
}

/// Whether `fut` is still pending after a short while (it is blocked).
pub async fn blocked<T>(fut: &mut tokio::task::JoinHandle<T>) -> bool {
    tokio::time::timeout(Duration::from_millis(150), fut)
        .await
        .is_err()
}

pub fn s(x: &str) -> Value {
    Value::str(x)
}

/// The partition of key `k` in the two-partition scenario cluster.
pub fn partition(k: i64) -> u32 {
    brine_core::schema::partition_of(&Value::Int(k), 2)
}
