//! Scenario tests of Callas' Runtime Pipelining groups (seed 002): pieces
//! pipelined in dependency order, cascading aborts, the analysis' pieces
//! and reorderings, range dependencies, the rank-progress wait, pipelined
//! commits, commuting increments, and the adaptive rollback-safe mode.

use std::time::Duration;

use brine_cluster::{
    Application, Cluster, ClusterConfig, Isolation, LinkConfig, Mutation, ProcedureDef,
    SafeModeConfig,
};
use brine_core::Value;

mod salt_common;
use salt_common::{call, int, Gates};

mod callas_common;
use callas_common::{acid_read, config, start, within, DDL};

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
    assert_eq!(
        (s.counter("rank_waits"), s.counter("commit_waits")),
        (0, 0),
        "2PL has no ranks"
    );
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
    assert_eq!(
        c.stats().counter("safe_mode_switches"),
        0,
        "the window is not full"
    );
    let abort = vec![Value::Int(1), Value::Null, Value::Int(1)];
    c.client()
        .call("order", abort)
        .await
        .expect_err("user abort");
    assert_eq!(c.stats().counter("safe_mode_switches"), 1);
    let o = c
        .client()
        .call("order", vec![Value::Int(2)])
        .await
        .expect("commits in safe mode");
    assert_eq!(o.values, vec![Value::Int(1)]);
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
            let (holds, held_us) = (s.counter("rank_holds"), s.counter("rank_hold_us_total"));
            assert!(holds >= 1 && held_us > 0, "{s:?}");
            assert_eq!(s.counter("rank_waits"), 0, "{s:?}");
        } else {
            let (waits, waited_us) = (s.counter("rank_waits"), s.counter("rank_wait_us_total"));
            assert!(waits >= 1 && waited_us > 0, "{s:?}");
            assert_eq!(s.counter("rank_holds"), 0, "{s:?}");
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
