//! Scenario tests of Salt's saline release rules (seed 000 section 3.3):
//! the indirect dirty read of Figure 3.3 (absent with the rules, present
//! without them, and as the checker sees it), read-after-write (not
//! write-after-write) dependencies, a release stage per operation, and a
//! completed BASE transaction's locks gone before its client hears of it.
//!
//! The BASE procedures here pause at named gates (`salt_scenarios`).

use std::time::Duration;

use brine_cluster::{Cluster, DeadlockPolicy, Mutation};
use brine_core::Value;

mod salt_common;
use salt_common::{call, Gates};

mod salt_scenarios;
use salt_scenarios::{acid_get, app, config, partition, s, start};

/// Figure 3.3: BASE1 writes x = 100 and pauses; BASE2 copies x into y (with
/// `copy_proc`) and completes; ACID reads y. Returns what the ACID read saw
/// while BASE1 was unfinished (`None`: it could not read y before BASE1
/// ended).
async fn indirect_dirty_read(
    mutation: Option<Mutation>,
    copy_proc: &'static str,
) -> (Option<i64>, i64) {
    indirect_dirty_read_of(mutation, copy_proc, 3, 4).await
}

/// [`indirect_dirty_read`] with rows `x` and `y` (keys 0..8).
async fn indirect_dirty_read_of(
    mutation: Option<Mutation>,
    copy_proc: &'static str,
    x: i64,
    y: i64,
) -> (Option<i64>, i64) {
    let (c, gates) = start("salt", mutation).await;
    let base1 = call(
        &c,
        "two_step",
        vec![Value::Int(x), Value::Int(100), Value::Int(7), s("d1")],
    );
    gates.open("d1-in");
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(&c, copy_proc, vec![Value::Int(x), Value::Int(y)])
        .await
        .unwrap()
        .expect("BASE2 completes");
    let c2 = c.clone();
    let mut acid = tokio::spawn(async move { acid_get(&c2, y).await });
    let early = match tokio::time::timeout(Duration::from_millis(300), &mut acid).await {
        Ok(v) => Some(v.unwrap()),
        Err(_) => None,
    };
    gates.open("d1-between");
    base1.await.unwrap().expect("BASE1 completes");
    let late = match early {
        Some(v) => v,
        None => acid.await.unwrap(),
    };
    (early, late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_3_indirect_dirty_read_is_impossible_with_the_saline_release_rules() {
    let (early, late) = indirect_dirty_read(None, "copy").await;
    assert_eq!(
        early, None,
        "ACID must not read y while BASE1 is unfinished"
    );
    // BASE2 copied x = 100 into y; once BASE1 ended, that is committed state.
    assert_eq!(late, 100);
}

// The same when BASE2 also writes x after its dirty read of x: its lock on
// x is then taken again by a later statement, and the release of y must
// still wait for BASE1 (the shape the recorded concurrent run found, with
// two transfers through one account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_3_holds_when_the_dirty_row_is_written_after_the_read() {
    let (early, late) = indirect_dirty_read(None, "touch_copy").await;
    assert_eq!(
        early, None,
        "ACID must not read y while BASE1 is unfinished"
    );
    assert_eq!(late, 100);
}

// The same through a range read: BASE2 reads x with a range scan. The
// scan depends on the BASE writers of the rows inside its range as a point
// read of each would (before, rule (a) looked at the exact lock target
// only, and the ACID read of y saw BASE1's intermediate state: found by
// the list-append workload under Salt, docs/results/checker-lists-salt.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_3_holds_when_the_dirty_read_is_a_range_read() {
    let (early, late) = indirect_dirty_read(None, "range_copy").await;
    assert_eq!(
        early, None,
        "ACID must not read y while BASE1 is unfinished"
    );
    assert_eq!(late, 100);
}

// Both rules hold whether BASE2's write after its dirty read is at another
// partition (keys 3 and 4: the coordinator runs the release stages in
// lockstep at both) or at the same one (that partition runs BASE2's stages
// by itself, from one release message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_3_holds_when_both_rows_share_a_partition() {
    assert_ne!(partition(3), partition(4), "the other tests' rows");
    let y = (0..8)
        .find(|&k| k != 3 && partition(k) == partition(3))
        .expect("a key beside 3");
    for copy in ["copy", "touch_copy"] {
        let (early, late) = indirect_dirty_read_of(None, copy, 3, y).await;
        assert_eq!(
            early, None,
            "{copy}: ACID read y while BASE1 was unfinished"
        );
        assert_eq!(late, 100, "{copy}");
    }
    let (early, _) =
        indirect_dirty_read_of(Some(Mutation::NoSalineReleaseOrder), "copy", 3, y).await;
    assert_eq!(early, Some(100), "without the rules the dirty read shows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_3_indirect_dirty_read_appears_without_the_saline_release_rules() {
    let (early, _) = indirect_dirty_read(Some(Mutation::NoSalineReleaseOrder), "copy").await;
    assert_eq!(
        early,
        Some(100),
        "without the rules ACID reads BASE1's intermediate x through y"
    );
}

/// Polls `holds` until it answers true (`false` if it has not after 5 s):
/// releases finish after the calls return.
async fn within_5s<F: std::future::Future<Output = bool>>(mut holds: impl FnMut() -> F) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if holds().await {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the partitions' lock tables keep exactly `n` transactions.
async fn lock_txns_become(c: &Cluster, n: usize) -> bool {
    within_5s(|| async {
        let status = c.status().await.expect("status");
        status.iter().map(|p| p.lock_txns).sum::<usize>() == n
    })
    .await
}

// Read-after-write is the release rule, not write-after-write (seed 000
// section 3.3): BASE2 overwriting x blindly while BASE1, which wrote x,
// is unfinished, saw nothing of BASE1 and releases at its end (only
// BASE1 stays in the lock tables); a BASE2 that read x (a copy of x into
// y) keeps its locks until BASE1 has released. With write-after-write
// dependencies, transactions overwriting each other's rows in two orders
// waited for each other's releases for good (register under Salt never
// ended, docs/results/checker-lists-salt.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_overwrites_of_each_other_s_rows_do_not_stall_the_releases() {
    for (second, args, released) in [
        ("set", vec![Value::Int(5), Value::Int(9)], true),
        ("copy", vec![Value::Int(5), Value::Int(6)], false),
    ] {
        let (c, gates) = start("salt", None).await;
        let base1 = call(
            &c,
            "two_step",
            vec![
                Value::Int(5),
                Value::Int(1),
                Value::Int(2),
                s("b1"),
                s("b1-wrote"),
            ],
        );
        gates.open("b1-in");
        // BASE1's first subtransaction committed: it holds a saline write
        // on x that BASE2 meets.
        gates.wait("b1-wrote").await;
        c.client().call(second, args).await.expect("BASE2 ends");
        let only_base1 = lock_txns_become(&c, 1).await;
        assert_eq!(only_base1, released, "{second}: BASE2 released at its end");
        gates.open("b1-between");
        base1.await.unwrap().expect("BASE1 ends");
        assert!(lock_txns_become(&c, 0).await, "{second}: every lock went");
    }
}

/// Waits until some statement waits for a lock (a parked statement at
/// some partition).
async fn some_statement_waits(c: &Cluster) -> bool {
    within_5s(|| async { salt_common::parked_statements(c).await > 0 }).await
}

// The release rules are per operation (seed 000 section 3.3; the
// prototype queues a lock per operation, section 3.4.3). BASE1 writes x
// (alkaline1); BASE2 copies x into y (a dirty read of x: its release waits
// for BASE1's write of x) and ends; BASE1 then reads y (a dirty read of
// BASE2's write) and writes x again. The two writes of x are two
// operations: the first, which BASE2 depends on, is released at its own
// stage, ahead of the read of y; only the second waits behind that read.
// With one lock per row the first write's release moved behind the read
// of y, which waited for BASE2, which waited for BASE1's x: both
// transactions finished and never released (register and list-append
// under Salt stalled, docs/results/checker-lists-salt.md). Meanwhile an
// ACID reader of y waits (y derives from BASE1's unfinished state) and
// reads the copy once BASE1 ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_written_again_later_keeps_its_first_release_stage() {
    let (c, gates) = start("salt", None).await;
    let base1 = call(
        &c,
        "write_read_write",
        vec![
            Value::Int(5),
            Value::Int(10),
            Value::Int(1),
            Value::Int(30),
            s("b1-go"),
            s("b1-wrote"),
        ],
    );
    gates.wait("b1-wrote").await;
    c.client()
        .call("copy", vec![Value::Int(5), Value::Int(1)])
        .await
        .expect("BASE2 ends");
    let c2 = c.clone();
    let reader = tokio::spawn(async move { acid_get(&c2, 1).await });
    assert!(
        some_statement_waits(&c).await,
        "the ACID reader of y waits while BASE1 runs"
    );
    gates.open("b1-go");
    base1.await.unwrap().expect("BASE1 ends");
    assert_eq!(reader.await.unwrap(), 10, "the reader saw BASE2's copy");
    assert!(
        lock_txns_become(&c, 0).await,
        "both BASE transactions released every lock"
    );
    assert_eq!(acid_get(&c, 5).await, 30);
}

/// Figure 3.3 with a history: BASE1 writes x, pauses, then writes z; BASE2
/// copies x into y; an ACID transaction reads y and z. Returns the salt
/// check of the recorded history.
async fn recorded_fig_3_3(mutation: Option<Mutation>) -> brine_check::Report {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("h.jsonl");
    let gates = Gates::default();
    let mut cfg = config("salt", mutation, DeadlockPolicy::Detect);
    cfg.history = Some(path.clone());
    let c = Cluster::start(cfg, app(gates.clone())).expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    let (x, y, z) = (3, 4, 5);
    let base1 = call(
        &c,
        "x_then_z",
        vec![
            Value::Int(x),
            Value::Int(100),
            Value::Int(z),
            Value::Int(1),
            s("h1"),
        ],
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(&c, "copy", vec![Value::Int(x), Value::Int(y)])
        .await
        .unwrap()
        .expect("BASE2");
    let c2 = c.clone();
    let acid = tokio::spawn(async move {
        let mut t = c2.client().begin();
        t.execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(y)])
            .await
            .unwrap();
        t.execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(z)])
            .await
            .unwrap();
        t.commit().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gates.open("h1");
    base1.await.unwrap().expect("BASE1");
    acid.await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await; // background releases
    c.flush_history().expect("flush");
    let h = brine_check::read_file(&path).expect("history");
    brine_check::check(&h.txns, brine_check::Level::Salt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_finds_the_indirect_dirty_read_only_without_the_release_rules() {
    let with_rules = recorded_fig_3_3(None).await;
    assert!(with_rules.valid, "{:?}", with_rules.anomalies);
    let without = recorded_fig_3_3(Some(Mutation::NoSalineReleaseOrder)).await;
    assert!(
        !without.valid,
        "the checker must see the indirect dirty read"
    );
    assert!(
        without
            .violations()
            .any(|a| a.class == brine_check::AnomalyClass::GSalt),
        "{:?}",
        without.anomalies
    );
}

// A BASE transaction releases its saline locks before the client hears it
// completed: the client's next transaction on the same rows (ticketing's
// pay after create-order) finds them free, it does not wait for its own
// finished transaction. The release messages go out ahead of the reply,
// and a link delivers in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_base_transaction_holds_no_lock_its_client_meets_next() {
    let mut cfg = config("salt", None, DeadlockPolicy::Detect);
    cfg.link.delay_us = 50;
    let c = Cluster::start(cfg, app(Gates::default())).expect("start");
    c.load(
        "kv",
        (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect(),
    )
    .await
    .expect("load");
    let before = c.stats().lock_waits;
    for round in 1..=20 {
        let k = round % 8;
        c.client()
            .call("set", vec![Value::Int(k), Value::Int(round)])
            .await
            .expect("set");
        assert_eq!(acid_get(&c, k).await, round);
    }
    assert_eq!(
        c.stats().lock_waits - before,
        0,
        "an ACID read after completion waited for the saline lock"
    );
}
