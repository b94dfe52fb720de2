//! Shared fixtures for the cluster's scenario tests.
#![allow(dead_code)]

use std::time::Duration;

use brine_cluster::{
    Application, Cluster, ClusterConfig, DeadlockPolicy, Isolation, LinkConfig, ProcedureDef,
};
use brine_core::{Decimal, Value};

pub const DDL: &str = "
CREATE TABLE account (
    id INT NOT NULL,
    owner VARCHAR(32) NOT NULL,
    balance DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE INDEX account_owner ON account (owner);
CREATE TABLE item (
    grp INT NOT NULL,
    n INT NOT NULL,
    label VARCHAR(16),
    PRIMARY KEY (grp, n)
) PARTITION BY (grp);
";

pub fn money(units: i64) -> Value {
    Value::Decimal(Decimal::new(units * 100, 2))
}

pub fn procedures() -> Vec<ProcedureDef> {
    vec![
        ProcedureDef::new("deposit")
            .statement(
                "bump",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .body(|mut ctx, args| async move {
                let r = ctx.exec("bump", args).await?;
                if r.affected == 0 {
                    return Err(ctx.abort("no such account"));
                }
                Ok(vec![])
            }),
        ProcedureDef::new("transfer")
            .statement("get", "SELECT balance FROM account WHERE id = $id")
            .statement(
                "add",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .body(|mut ctx, args| async move {
                let (from, to, amount) = (args[0].clone(), args[1].clone(), args[2].clone());
                let neg = match amount.as_decimal() {
                    Some(d) => Value::Decimal(Decimal::new(-d.units, d.scale)),
                    None => return Err(ctx.abort("amount must be a number")),
                };
                let bal = ctx.exec("get", vec![from.clone()]).await?;
                let Some(row) = bal.rows.first() else {
                    return Err(ctx.abort("no such source account"));
                };
                ctx.exec("add", vec![neg, from]).await?;
                ctx.exec("add", vec![amount.clone(), to]).await?;
                if row[0] < amount {
                    // Checked after the writes on purpose: the abort must
                    // undo writes on two partitions.
                    return Err(ctx.abort("insufficient funds"));
                }
                Ok(vec![])
            }),
        ProcedureDef::new("open")
            .statement(
                "ins",
                "INSERT INTO account (id, owner, balance) VALUES ($id, $owner, $balance)",
            )
            .statement(
                "bump",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .body(|mut ctx, args| async move {
                // Credits account 1 first, so a failing insert must undo it.
                ctx.exec("bump", vec![money(1), Value::Int(1)]).await?;
                ctx.exec("ins", args).await?;
                Ok(vec![])
            }),
        ProcedureDef::new("sneaky")
            .statement(
                "bump",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .body(|mut ctx, _args| async move {
                ctx.exec("bump", vec![money(5), Value::Int(1)]).await?;
                ctx.exec("not_declared", vec![]).await?;
                Ok(vec![])
            }),
        ProcedureDef::new("total")
            .statement("sum", "SELECT SUM(balance) FROM account")
            .body(|mut ctx, _args| async move {
                let r = ctx.exec("sum", vec![]).await?;
                Ok(r.rows.into_iter().next().unwrap_or_default())
            }),
        ProcedureDef::new("add_item")
            .statement(
                "ins",
                "INSERT INTO item (grp, n, label) VALUES ($grp, $n, $label)",
            )
            .body(|mut ctx, args| async move {
                ctx.exec("ins", args).await?;
                Ok(vec![])
            }),
    ]
}

/// A single-threaded runtime on tokio's paused clock: time is virtual, and
/// a run is a function of its seed (`replay.rs`).
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

pub fn config(isolation: Isolation, policy: DeadlockPolicy) -> ClusterConfig {
    let mut c = ClusterConfig {
        nodes: 2,
        partitions_per_node: 2,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        isolation,
        ..ClusterConfig::default()
    };
    c.lock.policy = policy;
    // Short, so cross-partition deadlocks (invisible to each partition's
    // detector) are broken quickly by the backstop.
    c.lock.wait_timeout = Duration::from_millis(300);
    c
}

/// A cluster with accounts 1..=n, each holding 100.00.
pub async fn bank(n: i64, isolation: Isolation, policy: DeadlockPolicy) -> Cluster {
    bank_with(config(isolation, policy), n).await
}

/// A cluster of `config` with accounts 1..=n, each holding 100.00.
pub async fn bank_with(config: ClusterConfig, n: i64) -> Cluster {
    let app = Application {
        name: "test-bank".into(),
        ddl: DDL.into(),
        procedures: procedures(),
    };
    let cluster = Cluster::start(config, app).expect("cluster starts");
    let rows = (1..=n)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::str(&format!("owner{}", i % 7)),
                money(100),
            ]
        })
        .collect();
    cluster.load("account", rows).await.expect("load");
    cluster
}

pub async fn balance(cluster: &Cluster, id: i64) -> Value {
    let mut t = cluster.client().begin();
    let r = t
        .execute(
            "SELECT balance FROM account WHERE id = $id",
            vec![Value::Int(id)],
        )
        .await
        .expect("read balance");
    t.commit().await.expect("commit read");
    r.rows[0][0].clone()
}

pub async fn total(cluster: &Cluster) -> Value {
    cluster
        .client()
        .call("total", vec![])
        .await
        .expect("total")
        .values[0]
        .clone()
}
