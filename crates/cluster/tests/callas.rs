//! Scenario tests of Callas' inter-group mechanism (seed 000 section 4.3,
//! seed 002 section 4): nexus locks between groups, sharing inside a
//! group, and the nexus lock release order, whose absence lets a
//! dependency cycle span two groups (seed 000 Fig. 4.2, first example).

use std::time::Duration;

use brine_check::{AnomalyClass, Level};
use brine_cluster::{
    Application, Cluster, ClusterConfig, DeadlockPolicy, Grouping, Isolation, LinkConfig, Mutation,
    ProcedureDef, SafeModeConfig,
};
use brine_core::Value;

mod salt_common;
use salt_common::{call, int, read_dies_at_once, Gates};

const DDL: &str = "
CREATE TABLE kv (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
CREATE TABLE district (d INT NOT NULL, next INT NOT NULL, PRIMARY KEY (d)) PARTITION BY (d);
CREATE TABLE orders (o INT NOT NULL, d INT NOT NULL, PRIMARY KEY (o)) PARTITION BY (o);
CREATE TABLE stock (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
CREATE TABLE wh (w INT NOT NULL, ytd INT NOT NULL, name INT NOT NULL, PRIMARY KEY (w)) PARTITION BY (w);
";

const A: i64 = 1;
const B: i64 = 2;
const C: i64 = 3;

/// T1 writes a, waits at gate `t1`, then reads c (returned). T2 writes a
/// and b. T3 reads b (returned) and writes c. T1 and T2 are in group
/// `g1` (chopped: each statement commits on its own, so T2 can go ahead
/// of the unfinished T1), T3 in group `g2` (2PL).
fn app(gates: Gates) -> Application {
    let gates_for_order = gates.clone();
    let gates_for_sc = gates.clone();
    Application {
        name: "callas-scenarios".into(),
        ddl: DDL.into(),
        procedures: vec![
            ProcedureDef::new("t1")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .statement("get", "SELECT v FROM kv WHERE k = $k")
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
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .body(|mut ctx, _| async move {
                    ctx.exec("set", vec![Value::Int(20), Value::Int(A)]).await?;
                    ctx.exec("set", vec![Value::Int(20), Value::Int(B)]).await?;
                    Ok(vec![])
                }),
            ProcedureDef::new("t3")
                .statement("set", "UPDATE kv SET v = $v WHERE k = $k")
                .statement("get", "SELECT v FROM kv WHERE k = $k")
                .body(|mut ctx, _| async move {
                    let b = ctx.exec("get", vec![Value::Int(B)]).await?;
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

/// A new-order in miniature with two bodies (seed 002 section 6.1). Its
/// own takes district `d`'s counter, then writes stock rows k, k+1, k+2
/// (the larger piece, like new-order's stock loop; no procedure outside
/// its group writes stock, so the reordering keeps its lock order
/// towards them); its reordering `rows-first`
/// writes the rows first. Each waits at gate `<gate>` (if given) after its
/// first piece. Arguments: d, k, gate. Returns the counter and which body
/// ran (0: its own, 1: the reordering).
/// A payment in miniature: adds `amount` to the row's `ytd` (a blind
/// increment), waits at gate `<gate>` if one is given, then runs `then`,
/// a read of the same row, in the same piece. Arguments: w, amount, gate.
/// Returns what it read.
fn paid(name: &str, then: &str, gates: &Gates) -> ProcedureDef {
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

fn stocked(gates: &Gates) -> ProcedureDef {
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

fn config(
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

async fn start(cfg: ClusterConfig, gates: Gates) -> Cluster {
    let c = Cluster::start(cfg, app(gates)).expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("stock", rows).await.expect("load");
    let districts = (1..=2)
        .map(|d| vec![Value::Int(d), Value::Int(0)])
        .collect();
    c.load("district", districts).await.expect("load");
    let wh = vec![vec![Value::Int(1), Value::Int(0), Value::Int(42)]];
    c.load("wh", wh).await.expect("load");
    c
}

/// An ACID read of one column of one row.
async fn acid_read(c: &Cluster, sql: &str, key: i64) -> Option<i64> {
    let mut t = c.client().begin();
    let r = t.execute(sql, vec![Value::Int(key)]).await.expect("read");
    t.commit().await.expect("commit");
    r.rows.first().map(|row| int(&row[0]))
}

const RP: &str = "orders:rp=order,backwards";

/// T1 takes district 1's next order number and pauses after its order
/// insert; T2 does the same. Returns whether T2 got through its first
/// piece (the counter) while T1 was paused, and both results.
async fn order_pair(grouping: &str) -> (bool, i64, i64, Cluster) {
    let gates = Gates::default();
    let c = start(config(grouping, None, None), gates.clone()).await;
    let t1 = call(&c, "order", vec![Value::Int(1), Value::str("t1")]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t2 = call(
        &c,
        "order",
        vec![
            Value::Int(1),
            Value::Null,
            Value::Null,
            Value::str("t2-got"),
        ],
    );
    let overlapped = tokio::time::timeout(Duration::from_millis(300), gates.wait("t2-got"))
        .await
        .is_ok();
    gates.open("t1");
    let t1 = int(&t1.await.unwrap().expect("T1 commits")[0]);
    let t2 = int(&t2.await.unwrap().expect("T2 commits")[0]);
    (overlapped, t1, t2, c)
}

// Runtime Pipelining: T2 takes the district counter right after T1's
// first piece (it reads T1's uncommitted increment), but its next piece
// waits until T1 has executed a piece of that rank or committed, and it
// commits after T1. Under in-group 2PL, T2 cannot start before T1 ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_pair_of_orders_commits_in_dependency_order() {
    let (overlapped, t1, t2, c) = order_pair(RP).await;
    assert!(overlapped, "T2's first piece ran while T1 was unfinished");
    assert_eq!((t1, t2), (1, 2), "T2 read T1's uncommitted increment");
    let next = "SELECT next FROM district WHERE d = $d";
    assert_eq!(acid_read(&c, next, 1).await, Some(2));
    let order = "SELECT d FROM orders WHERE o = $o";
    assert_eq!(acid_read(&c, order, 101).await, Some(1));
    assert_eq!(acid_read(&c, order, 201).await, Some(1));

    let (overlapped, t1, t2, c) = order_pair("orders:2pl=order,backwards").await;
    assert!(!overlapped, "in-group 2PL: T2 waits for T1's end");
    assert_eq!((t1, t2), (1, 2));
    let s = c.stats();
    assert_eq!((s.rank_waits, s.commit_waits), (0, 0), "2PL has no ranks");
}

// Cascading abort: T1 aborts after T2 read its uncommitted increment, so
// T2 aborts too and runs again; T3 (same group, another district) does
// not depend on T1 and is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_cascades_to_exactly_the_dependants() {
    let gates = Gates::default();
    let c = start(config(RP, None, None), gates.clone()).await;
    let t1 = call(
        &c,
        "order",
        vec![Value::Int(1), Value::str("t1"), Value::Int(1)],
    );
    // T2's first piece overlaps T1 (it reads T1's increment), then T2
    // waits for T1.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let client = c.client();
    let mut t2 = tokio::spawn(async move { client.call("order", vec![Value::Int(1)]).await });
    assert!(within(&mut t2).await.is_none(), "T2 waits for T1");
    let t3 = c
        .client()
        .call("order", vec![Value::Int(2)])
        .await
        .expect("T3 commits: it depends on nobody");
    assert_eq!((t3.values, t3.attempts), (vec![Value::Int(1)], 1));
    gates.open("t1");
    let e = t1.await.unwrap().expect_err("T1 aborts");
    assert!(e.to_string().contains("asked to abort"), "{e}");
    let t2 = t2.await.unwrap().expect("T2 commits on its retry");
    assert!(t2.attempts >= 2, "T2 was cascaded: {t2:?}");
    assert_eq!(t2.values, vec![Value::Int(1)], "T1's increment was undone");
    let next = "SELECT next FROM district WHERE d = $d";
    assert_eq!(acid_read(&c, next, 1).await, Some(1));
    assert_eq!(acid_read(&c, next, 2).await, Some(1));
    let order = "SELECT d FROM orders WHERE o = $o";
    assert_eq!(acid_read(&c, order, 101).await, Some(1), "T2's order");
    assert_eq!(acid_read(&c, order, 201).await, None, "nothing of T1's");
    assert!(c.stats().aborts_cascade >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_before_its_piece_is_an_error_naming_the_disagreement() {
    let c = start(config(RP, None, None), Gates::default()).await;
    let e = c
        .client()
        .call("backwards", vec![])
        .await
        .expect_err("out of order")
        .to_string();
    assert!(e.contains("disagree"), "{e}");
}

const SCAN: &str = "scans:rp=ins_order,scan_orders,scan_then_insert";

// A statement after the one the analysis takes for its piece's last (whose
// locks became nexus locks where it ran) is refused, as a statement of an
// earlier piece is: the register workload's bodies ran that way without
// their loop declared, and pipelined transactions saw each other half
// done (issue 31, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_after_its_piece_ended_is_an_error_naming_the_disagreement() {
    let c = start(config(SCAN, None, None), Gates::default()).await;
    let e = c
        .client()
        .call("scan_then_insert", vec![])
        .await
        .expect_err("out of order")
        .to_string();
    assert!(e.contains("disagree") && e.contains("`scan`"), "{e}");
    let order = "SELECT d FROM orders WHERE o = $o";
    assert_eq!(
        acid_read(&c, order, 160).await,
        None,
        "nothing was inserted"
    );
}

/// T1 inserts order 150 into orders (its only piece ends there) and waits
/// at gate `t1`; T2, of T1's group, counts orders 100..=199, a range read
/// over T1's uncommitted insert; then T1 aborts. Returns T2's count and
/// attempts, and the cluster.
async fn scan_over_a_rolled_back_insert(mutation: Option<Mutation>) -> (i64, u32, Cluster) {
    let gates = Gates::default();
    let c = start(config(SCAN, mutation, None), gates.clone()).await;
    let t1 = call(
        &c,
        "ins_order",
        vec![
            Value::Int(150),
            Value::str("t1-in"),
            Value::str("t1"),
            Value::Int(1),
        ],
    );
    gates.wait("t1-in").await;
    let client = c.client();
    let t2 = tokio::spawn(async move {
        client
            .call(
                "scan_orders",
                vec![Value::Int(100), Value::Int(199), Value::str("t2-scanned")],
            )
            .await
    });
    // T2's scan ran (it saw the insert, committed or not); T1 goes on.
    gates.wait("t2-scanned").await;
    gates.open("t1");
    let e = t1.await.unwrap().expect_err("T1 aborts");
    assert!(e.to_string().contains("asked to abort"), "{e}");
    let t2 = t2.await.unwrap().expect("T2 commits");
    (int(&t2.values[0]), t2.attempts, c)
}

// Issue 31, item 1: a scan's range lock and a same-group insert's row lock
// are different targets. The scan must depend on the insert it saw (the
// insert's lock became a nexus lock when its piece ended), so the
// insert's abort cascades to the scan, which runs again and finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_over_a_same_group_insert_depends_on_it() {
    let (count, attempts, c) = scan_over_a_rolled_back_insert(None).await;
    assert_eq!(
        count, 0,
        "T2 committed what it saw of T1's rolled-back insert"
    );
    assert!(attempts >= 2, "T2 was cascaded: {attempts} attempt(s)");
    assert!(c.stats().aborts_cascade >= 1);
}

// The same with range dependencies off: the scan commits having counted
// an order that was never committed (a dirty read, G1a).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_range_dependencies_a_scan_keeps_a_rolled_back_insert() {
    let (count, attempts, c) =
        scan_over_a_rolled_back_insert(Some(Mutation::ExactCallasDeps)).await;
    assert_eq!((count, attempts), (1, 1));
    let order = "SELECT d FROM orders WHERE o = $o";
    assert_eq!(acid_read(&c, order, 150).await, None, "T1 rolled back");
}

/// Awaits `task` for a short while: `None` if it is still pending
/// (blocked), else its output.
/// T1 calls `procedure` with `first` (which makes it pause at gate `t1`);
/// 50 ms later T2 calls it with `second`. Returns whether T2 finished
/// while T1 was paused, then (once the gate opened) both results.
async fn paused_pair(
    c: &Cluster,
    gates: &Gates,
    procedure: &'static str,
    first: Vec<Value>,
    second: Vec<Value>,
) -> (bool, Vec<Value>, Vec<Value>) {
    let t1 = call(c, procedure, first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let client = c.client();
    let name = procedure.to_string();
    let mut t2 = tokio::spawn(async move { client.call(&name, second).await });
    let early = within(&mut t2).await;
    let finished = early.is_some();
    gates.open("t1");
    let t1 = t1.await.unwrap().expect("T1 commits");
    let t2 = match early {
        Some(r) => r,
        None => t2.await.unwrap(),
    }
    .expect("T2 commits")
    .values;
    (finished, t1, t2)
}

/// `paused_pair` of `stocked` on district 1: T1 writes stock rows 1-3 and
/// pauses after its first piece, T2 writes rows 4-6.
async fn stocked_pair(cfg: ClusterConfig) -> (bool, Vec<Value>, Vec<Value>, Cluster) {
    let gates = Gates::default();
    let c = start(cfg, gates.clone()).await;
    let (early, t1, t2) = paused_pair(
        &c,
        &gates,
        "stocked",
        vec![Value::Int(1), Value::Int(1), Value::str("t1")],
        vec![Value::Int(1), Value::Int(4)],
    )
    .await;
    (early, t1, t2, c)
}

async fn within<T>(task: &mut tokio::task::JoinHandle<T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(200), task)
        .await
        .ok()
        .map(|r| r.expect("task"))
}

const FIG_4_2: &str = "g1:chop=t1,t2;g2:2pl=t3";

/// Fig. 4.2: T1 writes a and pauses; T2 (T1's group) writes a after it and
/// writes b, and commits; T3 (the other group) reads b and writes c; T1
/// reads c. Returns (whether T3 had to wait for T1, what T3 read of b, what
/// T1 read of c, the checker's report).
async fn fig_4_2(mutation: Option<Mutation>) -> (bool, i64, i64, brine_check::Report) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("h.jsonl");
    let gates = Gates::default();
    let c = start(config(FIG_4_2, mutation, Some(path.clone())), gates.clone()).await;
    let t1 = call(&c, "t1", vec![]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(&c, "t2", vec![])
        .await
        .unwrap()
        .expect("T2 commits: its group shares T1's nexus lock on a");
    let mut t3 = call(&c, "t3", vec![]);
    let early = within(&mut t3).await;
    let t3_waited = early.is_none();
    gates.open("t1");
    let c_seen = int(&t1.await.unwrap().expect("T1 completes")[0]);
    let t3_result = match early {
        Some(r) => r,
        None => t3.await.unwrap(),
    };
    let b_seen = int(&t3_result.expect("T3 completes")[0]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.flush_history().expect("flush");
    let h = brine_check::read_file(&path).expect("history");
    (
        t3_waited,
        b_seen,
        c_seen,
        brine_check::check(&h.txns, Level::ReadCommitted),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_4_2_no_cycle_spans_groups_with_the_nexus_release_order() {
    let (t3_waited, b, c, report) = fig_4_2(None).await;
    assert!(
        t3_waited,
        "T2 depends on the unfinished T1, so it keeps its nexus lock on b"
    );
    assert_eq!(b, 20, "T3 reads T2's b once T1 and T2 released");
    assert_eq!(c, 0, "T1 read c before T3 could write it");
    assert!(report.valid, "{:?}", report.anomalies);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_4_2_cycle_appears_without_the_nexus_release_order() {
    let (t3_waited, b, c, report) = fig_4_2(Some(Mutation::NoNexusReleaseOrder)).await;
    assert!(!t3_waited, "T2 released b as soon as it committed");
    assert_eq!(b, 20);
    assert_eq!(c, 30, "T1 read T3's c: T1 -> T2 -> T3 -> T1");
    assert!(
        report.violations().any(|a| a.class == AnomalyClass::G1c),
        "{:?}",
        report.anomalies
    );
}

// Nexus locks: a transaction of another group (or of the default group)
// waits for a committed group member's nexus lock; one of the same group
// goes through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexus_locks_block_other_groups_and_share_within_one() {
    let gates = Gates::default();
    let c = start(
        config("g1:chop=t1,bump;g2:2pl=t3", None, None),
        gates.clone(),
    )
    .await;
    let t1 = call(&c, "t1", vec![]);
    shares_inside_waits_outside(&c, &gates, "t1", t1).await;
}

/// `held`, a transaction of group g1 that wrote 10 into row A, pauses at
/// gate `gate`. Meanwhile a same-group `bump` of A goes through its nexus
/// lock, and an ACID read of A (the default group) waits; once the gate
/// opens, `held` completes and the read sees both writes.
async fn shares_inside_waits_outside(
    c: &Cluster,
    gates: &Gates,
    gate: &str,
    held: tokio::task::JoinHandle<brine_core::Result<Vec<Value>>>,
) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::time::timeout(Duration::from_secs(2), call(c, "bump", vec![Value::Int(A)]))
        .await
        .expect("the same group shares the nexus lock")
        .unwrap()
        .expect("bump commits");
    let c2 = c.clone();
    let mut acid = tokio::spawn(async move {
        let mut t = c2.client().begin();
        let r = t
            .execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(A)])
            .await?;
        t.commit().await?;
        Ok::<_, brine_core::Error>(int(&r.rows[0][0]))
    });
    assert!(
        within(&mut acid).await.is_none(),
        "ACID waits for the nexus lock"
    );
    gates.open(gate);
    held.await
        .unwrap()
        .expect("the paused transaction completes");
    assert_eq!(acid.await.unwrap().expect("ACID read"), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouping_naming_an_unknown_procedure_is_refused() {
    let e = Cluster::start(config("g1:2pl=t1,nope", None, None), app(Gates::default()))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("`nope`"), "{e}");
}

// The adaptive safe mode: a Runtime Pipelining group whose rollback rate
// passes the threshold switches to its rollback-safe chopping, and
// transactions still commit there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rolling_back_often_goes_rollback_safe() {
    let mut cfg = config(RP, None, None);
    cfg.safe_mode = SafeModeConfig {
        threshold_percent: 5.0,
        window: 10,
        hold: Duration::from_secs(60),
    };
    let c = start(cfg, Gates::default()).await;
    for _ in 0..9 {
        let abort = vec![Value::Int(1), Value::Null, Value::Int(1)];
        c.client()
            .call("order", abort)
            .await
            .expect_err("user abort");
    }
    assert_eq!(c.stats().safe_mode_switches, 0, "the window is not full");
    let abort = vec![Value::Int(1), Value::Null, Value::Int(1)];
    c.client()
        .call("order", abort)
        .await
        .expect_err("user abort");
    assert_eq!(c.stats().safe_mode_switches, 1);
    let o = c
        .client()
        .call("order", vec![Value::Int(2)])
        .await
        .expect("commits in safe mode");
    assert_eq!(o.values, vec![Value::Int(1)]);
}

// Classic transaction chopping (`sc`): the group's chopping cuts sc_set
// into <set><next>. Its first piece commits when the second starts: a
// same-group transaction then updates the row (the nexus lock is shared
// inside the group) while sc_set is unfinished, and an ACID reader waits
// until sc_set ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_pieces_commit_on_their_own_inside_the_group_and_stay_hidden_outside() {
    let gates = Gates::default();
    let c = start(
        config("g1:sc=sc_set,bump,sc_inc", None, None),
        gates.clone(),
    )
    .await;
    let s = call(
        &c,
        "sc_set",
        vec![
            Value::Int(A),
            Value::Int(10),
            Value::Int(1),
            Value::str("sc"),
        ],
    );
    shares_inside_waits_outside(&c, &gates, "sc", s).await;
}

/// Under wait-die with lock timeout `wait_timeout`: an ACID transaction
/// writes district 1, then sc_inc (younger) runs: its first piece
/// increments kv B and commits, its second piece (a read of district 1)
/// cannot pass the older writer.
async fn sc_inc_behind_an_older_writer(
    wait_timeout: Duration,
) -> (
    Cluster,
    brine_cluster::Txn,
    tokio::task::JoinHandle<brine_core::Result<Vec<Value>>>,
) {
    let mut cfg = config("g1:sc=sc_set,bump,sc_inc", None, None);
    cfg.lock.policy = DeadlockPolicy::WaitDie;
    cfg.lock.wait_timeout = wait_timeout;
    let c = start(cfg, Gates::default()).await;
    let mut older = c.client().begin();
    older
        .execute(
            "UPDATE district SET next = next + 1 WHERE d = $d",
            vec![Value::Int(1)],
        )
        .await
        .expect("older ACID writer");
    let mut s = call(&c, "sc_inc", vec![Value::Int(B), Value::Int(1)]);
    assert!(
        within(&mut s).await.is_none(),
        "sc_inc's second piece cannot pass the older writer"
    );
    (c, older, s)
}

// A piece after the first that the concurrency control aborts is run
// again, not the transaction: sc_inc's second piece (a read of the
// district) waits for an older ACID writer of the district longer than
// the lock timeout, and the body runs again with its committed first
// piece answered from the record, so the increment is applied exactly
// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_victim_piece_is_run_again_and_earlier_pieces_apply_once() {
    let (c, older, s) = sc_inc_behind_an_older_writer(Duration::from_millis(50)).await;
    assert!(
        c.stats().retries > 0,
        "the second piece's wait timed out and it was run again"
    );
    older.commit().await.expect("commit");
    let r = s.await.unwrap().expect("sc_inc completes");
    assert_eq!(int(&r[0]), 1, "the rerun read the committed counter");
    let v = "SELECT v FROM kv WHERE k = $k";
    assert_eq!(
        acid_read(&c, v, B).await,
        Some(1),
        "first piece applied once"
    );
}

// Once a piece that wrote has committed, the chopped transaction cannot
// roll back, so it ranks above every other transaction (the lock table's
// `protect`): its later piece waits for an older writer, and when that
// older transaction asks for the committed piece's lock it is the one that
// dies. Before, the older transaction waited for the piece's lock while the
// later piece died on the older one's lock, ran again and died again, for
// as long as the older one waited (TPC-C under `sc` groups left calls stuck
// this way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_transaction_dies_rather_than_wait_for_a_committed_piece() {
    let (c, older, s) = sc_inc_behind_an_older_writer(Duration::from_secs(10)).await;
    read_dies_at_once(older, B).await;
    let r = s.await.unwrap().expect("sc_inc completes");
    assert_eq!(int(&r[0]), 0, "the older writer rolled back");
    assert_eq!(c.stats().retries, 0, "sc_inc's later piece never died");
    let v = "SELECT v FROM kv WHERE k = $k";
    assert_eq!(acid_read(&c, v, B).await, Some(1));
    // The protection went with the transaction.
    c.locks_released(Duration::from_secs(2))
        .await
        .expect("no lock state outlives its transaction");
}

/// Seed 002 section 6.1: the analysis runs the body that takes the larger
/// piece first. T1 pauses after its first piece; T2 runs on the same
/// district and other rows. Reordered (rows first), T2 writes its rows
/// without meeting T1, takes the counter T1 has not reached yet, and
/// finishes while T1 is paused. As written (`rp/as-written`: the counter
/// first), T2 reads T1's uncommitted counter and its rows wait until T1
/// has run its own: T2 is held until T1 goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reordered_body_runs_its_larger_piece_before_the_counter() {
    for (grouping, reordered) in [
        ("stock:rp=stocked", true),
        ("stock:rp/as-written=stocked", false),
    ] {
        let (early, t1, t2, c) = stocked_pair(config(grouping, None, None)).await;
        assert_eq!(early, reordered, "{grouping}: T2 done while T1 paused");
        let body = Value::Int(i64::from(reordered));
        let (first, second) = if reordered { (2, 1) } else { (1, 2) };
        assert_eq!(t1, vec![Value::Int(first), body.clone()], "{grouping}: T1");
        assert_eq!(t2, vec![Value::Int(second), body], "{grouping}: T2");
        let next = "SELECT next FROM district WHERE d = $d";
        assert_eq!(acid_read(&c, next, 1).await, Some(2), "{grouping}");
        for k in 1..=6 {
            let v = acid_read(&c, "SELECT v FROM stock WHERE k = $k", k).await;
            assert_eq!(v, Some(7), "{grouping}: row {k}");
        }
    }
    // Every other protocol runs the procedure's own body.
    let mut cfg = config("stock:rp=stocked", None, None);
    cfg.protocol = "acid".into();
    cfg.grouping = None;
    let c = start(cfg, Gates::default()).await;
    let r = call(&c, "stocked", vec![Value::Int(2), Value::Int(1)])
        .await
        .unwrap()
        .expect("commits");
    assert_eq!(r, vec![Value::Int(1), Value::Int(0)]);
}

/// Runtime Pipelining's rank-progress wait, at the partition and at the
/// coordinator (`ClusterConfig::rank_holds`): T1 takes the district counter
/// and pauses before its stock piece; T2 reads T1's uncommitted counter, so
/// its stock piece must wait until T1 has run its own. Either way T2 is not
/// done while T1 is paused and both orders come out in dependency order;
/// held at the partition, T2's stock statement waits there (counted with
/// its time), and the coordinator does not wait before sending it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_s_rank_wait_is_held_at_its_partition() {
    for holds in [true, false] {
        let mut cfg = config("stock:rp/as-written=stocked", None, None);
        cfg.rank_holds = holds;
        let (early, t1, t2, c) = stocked_pair(cfg).await;
        assert!(!early, "holds {holds}: T2 done while T1 paused");
        assert_eq!(t1, vec![Value::Int(1), Value::Int(0)], "holds {holds}");
        assert_eq!(t2, vec![Value::Int(2), Value::Int(0)], "holds {holds}");
        for k in 1..=6 {
            let v = acid_read(&c, "SELECT v FROM stock WHERE k = $k", k).await;
            assert_eq!(v, Some(7), "holds {holds}: row {k}");
        }
        let s = c.stats();
        if holds {
            assert!(s.rank_holds >= 1 && s.rank_hold_us_total > 0, "{s:?}");
            assert_eq!(s.rank_waits, 0, "{s:?}");
        } else {
            assert!(s.rank_waits >= 1 && s.rank_wait_us_total > 0, "{s:?}");
            assert_eq!(s.rank_holds, 0, "{s:?}");
        }
    }
}

/// Runtime Pipelining, pipelined commits: T2 reads T1's uncommitted row
/// (T1, an `sc_set`, is paused after writing it, its piece over) and a stock row, and
/// finishes its body; its commit waits for T1's. Meanwhile an ACID write
/// of the stock row must wait: T2 keeps its read lock through its prepare
/// round, though it wrote nothing anywhere (`Prepare { hold }`), until it
/// is decided after T1, so no other transaction writes what T2 read
/// before T1, which T2 follows, has committed (serializable, long reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependant_keeps_its_read_locks_until_its_predecessor_commits() {
    let gates = Gates::default();
    let mut cfg = config("g:rp=sc_set,read_two", None, None);
    cfg.isolation = Isolation::Serializable;
    let c = start(cfg, gates.clone()).await;
    let args = vec![
        Value::Int(5),
        Value::Int(50),
        Value::Int(1),
        Value::str("t1"),
    ];
    let t1 = call(&c, "sc_set", args);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t2 = call(&c, "read_two", vec![Value::Int(5), Value::Int(6)]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c2 = c.clone();
    let mut t3 = tokio::spawn(async move {
        let mut t = c2.client().begin();
        t.execute("UPDATE stock SET v = 9 WHERE k = $k", vec![Value::Int(6)])
            .await?;
        t.commit().await
    });
    assert!(
        within(&mut t3).await.is_none(),
        "the write waits for the dependant's read lock"
    );
    assert!(!t2.is_finished(), "T2 is not decided before T1");
    gates.open("t1");
    t1.await.unwrap().expect("T1 commits");
    let read = t2.await.unwrap().expect("T2 commits");
    assert_eq!(
        read,
        vec![Value::Int(50), Value::Int(0)],
        "T2 saw T1's write"
    );
    t3.await.unwrap().expect("the write commits after T2");
    let v = acid_read(&c, "SELECT v FROM stock WHERE k = $k", 6).await;
    assert_eq!(v, Some(9));
}

/// Runtime Pipelining, commuting increments (`Placed::ends_row`): T1 adds
/// to a row and pauses before the rest of its piece, which reads another
/// column of the row (one no procedure of the group writes). T2 adds to
/// the same row: the increments commute, so T1's row lock became the
/// group's nexus lock as soon as its increment ran, and T2 finishes while
/// T1 is paused. When the rest of T1's piece reads the column it
/// increments, the row stays T1's until the piece ends: T2 is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_increment_frees_its_row_for_the_groups_other_increments() {
    for (procedure, freed, reads) in [("pay", true, 42), ("pay_ytd", false, 10)] {
        let gates = Gates::default();
        let grouping = format!("wh:rp={procedure}");
        let c = start(config(&grouping, None, None), gates.clone()).await;
        let (early, t1, t2) = paused_pair(
            &c,
            &gates,
            procedure,
            vec![Value::Int(1), Value::Int(10), Value::str("t1")],
            vec![Value::Int(1), Value::Int(5)],
        )
        .await;
        assert_eq!(early, freed, "{procedure}: T2 done while T1 paused");
        if freed {
            assert_eq!(t1, vec![Value::Int(42)], "{procedure}: T1");
            assert_eq!(t2, vec![Value::Int(42)], "{procedure}: T2");
        } else {
            assert_eq!(
                t1,
                vec![Value::Int(reads)],
                "{procedure}: T1 read its own sum"
            );
            assert_eq!(t2, vec![Value::Int(15)], "{procedure}: T2 read both");
        }
        let ytd = acid_read(&c, "SELECT ytd FROM wh WHERE w = $w", 1).await;
        assert_eq!(ytd, Some(15), "{procedure}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reordering_that_leaves_out_a_statement_is_refused() {
    let body = ProcedureDef::new("b")
        .body(|_, _| async { Ok(vec![]) })
        .body;
    let app = Application {
        name: "bad-reordering".into(),
        ddl: DDL.into(),
        procedures: vec![ProcedureDef::new("p")
            .statement("bump", "UPDATE district SET next = next + 1 WHERE d = $d")
            .statement("get", "SELECT next FROM district WHERE d = $d")
            .body(|_, _| async { Ok(vec![]) })
            .reordered("get-first", &["get"], body)],
    };
    let cfg = ClusterConfig {
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    };
    let e = Cluster::start(cfg, app).err().expect("refused").to_string();
    assert!(
        e.contains("reordering `get-first`") && e.contains("leaves out statement `bump`"),
        "{e}"
    );
}
