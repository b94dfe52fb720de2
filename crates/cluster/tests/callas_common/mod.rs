//! The fixture of the Callas scenario tests (`callas.rs`,
//! `callas_pipelining.rs`): the schema, the procedures (which pause at
//! named gates), the cluster, an ACID read. Its test file declares
//! `mod salt_common;` beside it.
#![allow(dead_code)]

use std::time::Duration;

use brine_cluster::{
    Application, Cluster, ClusterConfig, DeadlockPolicy, Grouping, Isolation, LinkConfig, Mutation,
    ProcedureDef,
};
use brine_core::Value;

use super::salt_common::{int, Gates};

pub const DDL: &str = "
CREATE TABLE kv (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
CREATE TABLE district (d INT NOT NULL, next INT NOT NULL, PRIMARY KEY (d)) PARTITION BY (d);
CREATE TABLE orders (o INT NOT NULL, d INT NOT NULL, PRIMARY KEY (o)) PARTITION BY (o);
CREATE TABLE stock (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
CREATE TABLE wh (w INT NOT NULL, ytd INT NOT NULL, name INT NOT NULL, PRIMARY KEY (w)) PARTITION BY (w);
CREATE TABLE cell (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
";

pub const A: i64 = 1;
pub const B: i64 = 2;
pub const C: i64 = 3;

/// Seed 000 Fig. 4.2's transactions, with a = kv row A, b = district 1's
/// `next` and c = cell row C (a table only T1 and T3 use): T1 writes a,
/// waits at gate `t1`, then reads c (returned). T2 adds 20 to a and to b.
/// T3 reads b (returned) and writes 30 into c. T1 and T2 are in group
/// `g1` (chopped: each statement commits on its own, so T2 can go ahead
/// of the unfinished T1), T3 in group `g2` (2PL). Their finest chopping
/// has no SC-cycle (T2's increments commute with each other, and no
/// statement of the group writes c), so `chop` runs them; the cycle the
/// figure is about spans the two groups.
pub fn app(gates: Gates) -> Application {
    let gates_for_order = gates.clone();
    let gates_for_sc = gates.clone();
    Application {
        name: "callas-scenarios".into(),
        ddl: DDL.into(),
        procedures: vec![
            ProcedureDef::new("t1")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .statement("get", "SELECT v FROM cell WHERE k = $k")
                .body(move |mut ctx, _| {
                    let gates = gates.clone();
                    async move {
                        ctx.exec("set", vec![Value::Int(10), Value::Int(A)]).await?;
                        gates.wait("t1").await;
                        let c = ctx.exec("get", vec![Value::Int(C)]).await?;
                        Ok(vec![c.rows[0][0].clone()])
                    }
                }),
            ProcedureDef::new("t2")
                .statement("add", "UPDATE kv SET v = v + $n WHERE k = $k")
                .statement("bump", "UPDATE district SET next = next + $n WHERE d = $d")
                .body(|mut ctx, _| async move {
                    ctx.exec("add", vec![Value::Int(20), Value::Int(A)]).await?;
                    ctx.exec("bump", vec![Value::Int(20), Value::Int(1)])
                        .await?;
                    Ok(vec![])
                }),
            ProcedureDef::new("t3")
                .statement("get", "SELECT next FROM district WHERE d = $d")
                .statement("set", "UPDATE cell SET v = $v WHERE k = $k")
                .body(|mut ctx, _| async move {
                    let b = ctx.exec("get", vec![Value::Int(1)]).await?;
                    ctx.exec("set", vec![Value::Int(30), Value::Int(C)]).await?;
                    Ok(vec![b.rows[0][0].clone()])
                }),
            // A new-order in miniature: take the district's next order
            // number (rank 0: district), open gate `<signal>` if one is
            // given, insert the order (rank 1: orders), wait at gate
            // `<gate>` if one is given, and abort there if asked to (1).
            // Arguments: district, gate, abort, signal. Returns the order
            // number.
            ProcedureDef::new("order")
                .statement("bump", "UPDATE district SET next = next + 1 WHERE d = $d")
                .statement("get", "SELECT next FROM district WHERE d = $d")
                .statement("ins", "INSERT INTO orders (o, d) VALUES ($o, $d)")
                .body({
                    let gates = gates_for_order.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            let d = args[0].clone();
                            ctx.exec("bump", vec![d.clone()]).await?;
                            let next = int(&ctx.exec("get", vec![d.clone()]).await?.rows[0][0]);
                            if let Some(g) = args.get(3).and_then(Value::as_str) {
                                gates.open(g);
                            }
                            let o = next * 100 + int(&d);
                            ctx.exec("ins", vec![Value::Int(o), d]).await?;
                            if let Some(g) = args.get(1).and_then(Value::as_str) {
                                gates.wait(g).await;
                            }
                            if matches!(args.get(2), Some(Value::Int(1))) {
                                return Err(ctx.abort("asked to abort"));
                            }
                            Ok(vec![Value::Int(next)])
                        }
                    }
                }),
            // Inserts order `o` of district 1 (one piece: it ends with
            // the insert, whose lock then becomes the group's nexus lock),
            // opens gate `<signal>`, waits at gate `<gate>`, and aborts
            // there if asked to (1). Arguments: o, signal, gate, abort.
            ProcedureDef::new("ins_order")
                .statement("ins", "INSERT INTO orders (o, d) VALUES ($o, 1)")
                .body({
                    let gates = gates_for_order.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            ctx.exec("ins", vec![args[0].clone()]).await?;
                            gates.open(args[1].as_str().unwrap_or("-"));
                            gates.wait(args[2].as_str().unwrap_or("-")).await;
                            if matches!(args.get(3), Some(Value::Int(1))) {
                                return Err(ctx.abort("asked to abort"));
                            }
                            Ok(vec![])
                        }
                    }
                }),
            // Counts the orders numbered lo..=hi (a range read), then
            // opens gate `<signal>`. Arguments: lo, hi, signal.
            ProcedureDef::new("scan_orders")
                .statement("scan", "SELECT o FROM orders WHERE o >= $lo AND o <= $hi")
                .body({
                    let gates = gates_for_order.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            let r = ctx
                                .exec("scan", vec![args[0].clone(), args[1].clone()])
                                .await?;
                            gates.open(args[2].as_str().unwrap_or("-"));
                            Ok(vec![Value::Int(r.rows.len() as i64)])
                        }
                    }
                }),
            // Declares an insert, then a range read (the piece's last
            // statement in declaration order), and runs them the other way
            // round, as a loop over both would, without saying so.
            ProcedureDef::new("scan_then_insert")
                .statement("ins", "INSERT INTO orders (o, d) VALUES ($o, 1)")
                .statement("scan", "SELECT o FROM orders WHERE o >= $lo AND o <= $hi")
                .body(|mut ctx, _| async move {
                    ctx.exec("scan", vec![Value::Int(100), Value::Int(199)])
                        .await?;
                    ctx.exec("ins", vec![Value::Int(160)]).await?;
                    Ok(vec![])
                }),
            // The same statements out of the analysis's order.
            ProcedureDef::new("backwards")
                .statement("bump", "UPDATE district SET next = next + 1 WHERE d = $d")
                .statement("ins", "INSERT INTO orders (o, d) VALUES ($o, $d)")
                .body(|mut ctx, _| async move {
                    ctx.exec("ins", vec![Value::Int(999), Value::Int(1)])
                        .await?;
                    ctx.exec("bump", vec![Value::Int(1)]).await?;
                    Ok(vec![])
                }),
            stocked(&gates_for_order),
            paid("pay", "SELECT name FROM wh WHERE w = $w", &gates_for_order),
            paid(
                "pay_ytd",
                "SELECT ytd FROM wh WHERE w = $w",
                &gates_for_order,
            ),
            // Reads kv row `k` and stock row `s`. Arguments: k, s.
            ProcedureDef::new("read_two")
                .statement("kv", "SELECT v FROM kv WHERE k = $k")
                .statement("stock", "SELECT v FROM stock WHERE k = $k")
                .body(|mut ctx, args| async move {
                    let a = ctx.exec("kv", vec![args[0].clone()]).await?;
                    let b = ctx.exec("stock", vec![args[1].clone()]).await?;
                    Ok(vec![a.rows[0][0].clone(), b.rows[0][0].clone()])
                }),
            ProcedureDef::new("bump")
                .statement("add", "UPDATE kv SET v = v + 1 WHERE k = $k")
                .body(|mut ctx, args| async move {
                    ctx.exec("add", vec![args[0].clone()]).await?;
                    Ok(vec![])
                }),
            // For `sc` groups: writes kv row `k` (a piece conflicting with
            // the group's other writers of kv), then reads district `d`
            // (no writer in the group: a piece of its own), and waits at
            // gate `<gate>` if one is given. Arguments: k, v, d, gate.
            // Returns the district's counter.
            ProcedureDef::new("sc_set")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .statement("next", "SELECT next FROM district WHERE d = $d")
                .body({
                    let gates = gates_for_sc.clone();
                    move |mut ctx, args| {
                        let gates = gates.clone();
                        async move {
                            ctx.exec("set", vec![args[1].clone(), args[0].clone()])
                                .await?;
                            let next = ctx.exec("next", vec![args[2].clone()]).await?;
                            if let Some(g) = args.get(3).and_then(Value::as_str) {
                                gates.wait(g).await;
                            }
                            Ok(vec![next.rows[0][0].clone()])
                        }
                    }
                }),
            // The same shape with an increment: applying its first piece
            // twice would show in the row.
            ProcedureDef::new("sc_inc")
                .statement("add", "UPDATE kv SET v = v + 1 WHERE k = $k")
                .statement("next", "SELECT next FROM district WHERE d = $d")
                .body(|mut ctx, args| async move {
                    ctx.exec("add", vec![args[0].clone()]).await?;
                    let next = ctx.exec("next", vec![args[1].clone()]).await?;
                    Ok(vec![next.rows[0][0].clone()])
                }),
        ],
    }
}

/// A payment in miniature: adds `amount` to the row's `ytd` (a blind
/// increment), waits at gate `<gate>` if one is given, then runs `then`,
/// a read of the same row, in the same piece. Arguments: w, amount, gate.
/// Returns what it read.
pub fn paid(name: &str, then: &str, gates: &Gates) -> ProcedureDef {
    let gates = gates.clone();
    ProcedureDef::new(name)
        .statement("add", "UPDATE wh SET ytd = ytd + $a WHERE w = $w")
        .statement("then", then)
        .body(move |mut ctx, args| {
            let gates = gates.clone();
            async move {
                ctx.exec("add", vec![args[1].clone(), args[0].clone()])
                    .await?;
                if let Some(g) = args.get(2).and_then(Value::as_str) {
                    gates.wait(g).await;
                }
                let r = ctx.exec("then", vec![args[0].clone()]).await?;
                Ok(vec![r.rows[0][0].clone()])
            }
        })
}

/// A new-order in miniature with two bodies (seed 002 section 6.1). Its
/// own takes district `d`'s counter, then writes stock rows k, k+1, k+2
/// (the larger piece, like new-order's stock loop; no procedure outside
/// its group writes stock, so the reordering keeps its lock order
/// towards them); its reordering `rows-first`
/// writes the rows first. Each waits at gate `<gate>` (if given) after its
/// first piece. Arguments: d, k, gate. Returns the counter and which body
/// ran (0: its own, 1: the reordering).
pub fn stocked(gates: &Gates) -> ProcedureDef {
    let body = |rows_first: bool| {
        let gates = gates.clone();
        ProcedureDef::new("body")
            .body(move |mut ctx, args| {
                let gates = gates.clone();
                async move {
                    let (d, k) = (args[0].clone(), int(&args[1]));
                    let mut steps = [false, true];
                    if rows_first {
                        steps.reverse();
                    }
                    let mut next = 0;
                    for (i, rows) in steps.into_iter().enumerate() {
                        if rows {
                            for (j, stmt) in ["set1", "set2", "set3"].into_iter().enumerate() {
                                let row = Value::Int(k + j as i64);
                                ctx.exec(stmt, vec![Value::Int(7), row]).await?;
                            }
                        } else {
                            ctx.exec("bump", vec![d.clone()]).await?;
                            next = int(&ctx.exec("get", vec![d.clone()]).await?.rows[0][0]);
                        }
                        if let (0, Some(g)) = (i, args.get(2).and_then(Value::as_str)) {
                            gates.wait(g).await;
                        }
                    }
                    Ok(vec![Value::Int(next), Value::Int(i64::from(rows_first))])
                }
            })
            .body
    };
    let set = "UPDATE stock SET v = $v WHERE k = $k";
    let mut def = ProcedureDef::new("stocked")
        .statement("bump", "UPDATE district SET next = next + 1 WHERE d = $d")
        .statement("get", "SELECT next FROM district WHERE d = $d")
        .statement("set1", set)
        .statement("set2", set)
        .statement("set3", set);
    def.body = body(false);
    def.reordered(
        "rows-first",
        &["set1", "set2", "set3", "bump", "get"],
        body(true),
    )
}

pub fn config(
    grouping: &str,
    mutation: Option<Mutation>,
    history: Option<std::path::PathBuf>,
) -> ClusterConfig {
    let mut c = ClusterConfig {
        nodes: 2,
        partitions_per_node: 1,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        protocol: "callas".into(),
        isolation: Isolation::ReadCommitted,
        mutation,
        history,
        grouping: Some(Grouping::parse(grouping).expect("grouping")),
        ..ClusterConfig::default()
    };
    c.lock.policy = DeadlockPolicy::Detect;
    c.lock.wait_timeout = Duration::from_secs(10);
    c
}

pub async fn start(cfg: ClusterConfig, gates: Gates) -> Cluster {
    let c = Cluster::start(cfg, app(gates)).expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("stock", rows).await.expect("load");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("cell", rows).await.expect("load");
    let districts = (1..=2)
        .map(|d| vec![Value::Int(d), Value::Int(0)])
        .collect();
    c.load("district", districts).await.expect("load");
    let wh = vec![vec![Value::Int(1), Value::Int(0), Value::Int(42)]];
    c.load("wh", wh).await.expect("load");
    c
}

/// An ACID read of one column of one row.
pub async fn acid_read(c: &Cluster, sql: &str, key: i64) -> Option<i64> {
    let mut t = c.client().begin();
    let r = t.execute(sql, vec![Value::Int(key)]).await.expect("read");
    t.commit().await.expect("commit");
    r.rows.first().map(|row| int(&row[0]))
}

/// Awaits `task` for a short while: `None` if it is still pending
/// (blocked), else its output.
pub async fn within<T>(task: &mut tokio::task::JoinHandle<T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(200), task)
        .await
        .ok()
        .map(|r| r.expect("task"))
}
