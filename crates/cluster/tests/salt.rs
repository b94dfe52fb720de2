//! Scenario tests of Salt (seed 000 chapter 3): the interactions of
//! Figures 3.2 (a), (b), (c), FIFO fairness for an ACID waiter, the
//! transfer of Figure 3.1, a total across partitions beside an accepted
//! transfer (gated statements), and exactly-once effects of
//! subtransactions that are retried after acceptance. The saline release
//! rules (the indirect dirty read of Figure 3.3) are in `salt_release.rs`.
//!
//! The BASE procedures here pause at named gates, so a test can hold a
//! BASE transaction between its subtransactions and look at what others
//! can and cannot do meanwhile.

use std::sync::Arc;
use std::time::Duration;

use brine_cluster::{Cluster, DeadlockPolicy, Isolation, Mutation};
use brine_core::Value;

mod salt_common;
use salt_common::{call, int, read_dies_at_once, Gates};

mod salt_scenarios;
use salt_scenarios::{acid_get, app, blocked, config, partition, s, start};

// Figure 3.2 (a): an ACID lock makes the BASE transaction wait until the
// ACID transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_2a_base_waits_until_acid_commits() {
    let (c, _) = start("salt", None).await;
    let mut acid = c.client().begin();
    acid.execute(
        "UPDATE kv SET v = $v WHERE k = $k",
        vec![Value::Int(10), Value::Int(1)],
    )
    .await
    .unwrap();
    let mut base = call(&c, "set", vec![Value::Int(1), Value::Int(20)]);
    assert!(blocked(&mut base).await, "BASE must wait for the ACID lock");
    acid.commit().await.unwrap();
    base.await
        .unwrap()
        .expect("BASE completes after the ACID commit");
    assert_eq!(acid_get(&c, 1).await, 20);
}

// Figure 3.2 (b): BASE2 waits only for alkaline1, not for all of BASE1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_2b_base_waits_only_for_the_alkaline_subtransaction() {
    let (c, gates) = start("salt", None).await;
    let base1 = call(
        &c,
        "two_step",
        vec![Value::Int(1), Value::Int(10), Value::Int(30), s("b1")],
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut base2 = call(&c, "set", vec![Value::Int(1), Value::Int(20)]);
    assert!(
        blocked(&mut base2).await,
        "alkaline1 holds its alkaline lock"
    );
    gates.open("b1-in"); // alkaline1 commits; BASE1 pauses between subtransactions
    base2
        .await
        .unwrap()
        .expect("BASE2 goes through the saline lock");
    gates.open("b1-between");
    base1.await.unwrap().expect("BASE1 completes");
    assert_eq!(acid_get(&c, 1).await, 30);
}

// Figure 3.2 (c): an ACID transaction waits for the whole BASE transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_2c_acid_waits_for_the_whole_base_transaction() {
    let (c, gates) = start("salt", None).await;
    let base1 = call(
        &c,
        "two_step",
        vec![Value::Int(2), Value::Int(10), Value::Int(30), s("c1")],
    );
    gates.open("c1-in");
    tokio::time::sleep(Duration::from_millis(50)).await; // alkaline1 committed
    let c2 = c.clone();
    let mut acid = tokio::spawn(async move { acid_get(&c2, 2).await });
    assert!(blocked(&mut acid).await, "the saline lock keeps ACID out");
    gates.open("c1-between");
    base1.await.unwrap().expect("BASE1 completes");
    assert_eq!(acid.await.unwrap(), 30, "ACID sees only the final state");
}

// FIFO: a stream of BASE transactions on x cannot starve an ACID waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acid_waiter_behind_a_stream_of_base_transactions_gets_its_lock() {
    let (c, _) = start("salt", None).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut streams = Vec::new();
    for i in 0..6 {
        let client = c.client();
        let stop = stop.clone();
        streams.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .call("set", vec![Value::Int(5), Value::Int(i)])
                    .await
                    .expect("BASE set");
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c2 = c.clone();
    let acid = tokio::spawn(async move {
        let mut t = c2.client().begin();
        t.execute(
            "UPDATE kv SET v = $v WHERE k = $k",
            vec![Value::Int(99), Value::Int(5)],
        )
        .await
        .map(|_| t)
    });
    // Liveness, not speed: the bound is far above any wait FIFO allows.
    let t = tokio::time::timeout(Duration::from_secs(20), acid)
        .await
        .expect("the ACID writer was starved")
        .unwrap()
        .expect("ACID update");
    let in_stream_before_commit = stop.load(std::sync::atomic::Ordering::Relaxed);
    t.commit().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for s in streams {
        total += s.await.unwrap();
    }
    assert!(!in_stream_before_commit);
    assert!(total > 0, "the BASE stream ran");
}

// Figure 3.1 end to end: transfers, the insufficient-funds path, and the
// compensation when the receiver does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig_3_1_transfer_with_its_handlers() {
    let (c, _) = start("salt", None).await;
    let client = c.client();
    client
        .call("set", vec![Value::Int(1), Value::Int(100)])
        .await
        .unwrap();
    let t = |from: i64, to: i64, amt: i64, id: i64| {
        vec![
            Value::Int(from),
            Value::Int(to),
            Value::Int(amt),
            Value::Int(id),
        ]
    };
    let ok = client.call("transfer", t(1, 2, 30, 1)).await.unwrap();
    assert_eq!(ok.values, vec![Value::Int(1)]);
    let short = client.call("transfer", t(1, 2, 500, 2)).await.unwrap();
    assert_eq!(
        short.values,
        vec![Value::Int(0)],
        "constraint violation returns"
    );
    let comp = client.call("transfer", t(1, 77, 10, 3)).await.unwrap();
    assert_eq!(comp.values, vec![Value::Int(0)], "compensated");
    assert_eq!(acid_get(&c, 1).await, 70);
    assert_eq!(acid_get(&c, 2).await, 30);
}

// Concurrent BASE transfers under wait-die (victims retried after
// acceptance by replay): every accepted transfer is applied exactly once,
// and an ACID total never sees a transfer half done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_subtransactions_apply_exactly_once_and_acid_sees_whole_transfers() {
    let gates = Gates::default();
    let c =
        Cluster::start(config("salt", None, DeadlockPolicy::WaitDie), app(gates)).expect("start");
    let rows = (0..8)
        .map(|k| vec![Value::Int(k), Value::Int(1000)])
        .collect();
    c.load("kv", rows).await.expect("load");
    let mut tasks = Vec::new();
    for client_no in 0..6i64 {
        let client = c.client();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            for i in 0..40i64 {
                let (from, to) = ((client_no + i) % 4, (client_no + 2 * i + 1) % 4);
                if from == to {
                    continue;
                }
                let id = client_no * 1000 + i;
                let r = client
                    .call(
                        "transfer",
                        vec![
                            Value::Int(from),
                            Value::Int(to),
                            Value::Int(7),
                            Value::Int(id),
                        ],
                    )
                    .await
                    .expect("transfer");
                done += int(&r.values[0]);
            }
            done
        }));
    }
    let c2 = c.clone();
    let totals = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..20 {
            let mut t = c2.client().begin();
            match t.execute("SELECT SUM(v) FROM kv", vec![]).await {
                Ok(r) => {
                    seen.push(int(&r.rows[0][0]));
                    let _ = t.commit().await;
                }
                Err(_) => t.abort().await,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen
    });
    let mut transfers = 0;
    for t in tasks {
        transfers += t.await.unwrap();
    }
    for total in totals.await.unwrap() {
        assert_eq!(total, 8000, "an ACID read saw a transfer half done");
    }
    let mut t = c.client().begin();
    let ledger = t
        .execute("SELECT COUNT(*) FROM ledger", vec![])
        .await
        .unwrap();
    let sum = t.execute("SELECT SUM(v) FROM kv", vec![]).await.unwrap();
    t.commit().await.unwrap();
    assert_eq!(
        int(&ledger.rows[0][0]),
        transfers,
        "each credit applied once"
    );
    assert_eq!(int(&sum.rows[0][0]), 8000);
    let stats = c.stats();
    // The scenario is built to make victims after acceptance: 6 clients
    // on 4 rows under wait-die. (If none happened, the test proved nothing.)
    assert!(stats.counter("base_replays") > 0, "{stats:?}");
    assert!(
        stats.counter("base_accepted") >= transfers as u64,
        "{stats:?}"
    );
}

// A recorded run of concurrent BASE transfers and ACID reads checks clean
// at the salt level. (It once failed about 1 run in 20: a transfer that read
// an account dirty and then debited it released its other writes too early;
// `fig_3_3_holds_when_the_dirty_row_is_written_after_the_read` pins that
// case down.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_concurrent_run_satisfies_salt_isolation() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("h.jsonl");
    let mut cfg = config("salt", None, DeadlockPolicy::WaitDie);
    cfg.history = Some(path.clone());
    // Six clients on five rows under wait-die: a young transfer can die
    // more than the default 100 times in a row (2 of 260 runs did); this
    // test is about isolation, so it lets every transfer through.
    cfg.retry.max_attempts = 100_000;
    let c = Cluster::start(cfg, app(Gates::default())).expect("start");
    let rows = (0..8)
        .map(|k| vec![Value::Int(k), Value::Int(1000)])
        .collect();
    c.load("kv", rows).await.expect("load");
    let mut tasks = Vec::new();
    for client_no in 0..6i64 {
        let client = c.client();
        tasks.push(tokio::spawn(async move {
            for i in 0..30i64 {
                let (from, to) = ((client_no + i) % 5, (client_no + 3 * i + 1) % 5);
                if from != to {
                    let args = vec![
                        Value::Int(from),
                        Value::Int(to),
                        Value::Int(3),
                        Value::Int(client_no * 1000 + i),
                    ];
                    client.call("transfer", args).await.expect("transfer");
                }
                let mut t = client.begin();
                if t.execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(i % 5)])
                    .await
                    .is_ok()
                {
                    let _ = t.commit().await;
                } else {
                    t.abort().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.flush_history().expect("flush");
    let h = brine_check::read_file(&path).expect("history");
    assert!(h
        .txns
        .iter()
        .any(|t| t.class == brine_check::TxnClass::Base && t.accepted));
    let report = brine_check::check(&h.txns, brine_check::Level::Salt);
    assert!(report.valid, "{:?}", report.anomalies);
}

// The client sees the two moments: accepted after the first alkaline
// subtransaction, completed when the body has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sees_acceptance_before_completion() {
    let (c, gates) = start("salt", None).await;
    let mut call = c
        .client()
        .submit(
            "two_step",
            vec![Value::Int(6), Value::Int(10), Value::Int(30), s("m1")],
        )
        .expect("submit");
    gates.open("m1-in");
    tokio::time::timeout(Duration::from_secs(20), call.accepted())
        .await
        .expect("accepted while the body waits between its subtransactions")
        .expect("accepted");
    gates.open("m1-between");
    call.completed().await.expect("completed");
    assert_eq!(acid_get(&c, 6).await, 30);
    // Under acid the same procedure is one ACID transaction, accepted when
    // it commits.
    let gates = Gates::default();
    let c = Cluster::start(
        config("acid", None, DeadlockPolicy::Detect),
        app(gates.clone()),
    )
    .expect("start");
    c.load("kv", vec![vec![Value::Int(6), Value::Int(0)]])
        .await
        .unwrap();
    let mut call = c
        .client()
        .submit(
            "two_step",
            vec![Value::Int(6), Value::Int(10), Value::Int(30), s("m2")],
        )
        .unwrap();
    gates.open("m2-in");
    let early = tokio::time::timeout(Duration::from_millis(150), call.accepted()).await;
    assert!(
        early.is_err(),
        "an ACID call is not accepted before it commits"
    );
    gates.open("m2-between");
    call.accepted().await.expect("accepted at commit");
    call.completed().await.expect("completed");
}

/// Messages a `steps(k, n)` call sends over the link (every statement,
/// commit and release crosses it: coordinators are on a node of their own).
async fn messages_of_steps(c: &Cluster, k: i64, n: i64) -> u64 {
    use std::sync::atomic::Ordering;
    let before = c.link_stats().messages.load(Ordering::Relaxed);
    c.client()
        .call("steps", vec![Value::Int(k), Value::Int(n)])
        .await
        .expect("steps");
    // The releases are acknowledged in the background after completion.
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.link_stats().messages.load(Ordering::Relaxed) - before
}

// The local-transaction optimization, for subtransactions of several
// statements on one partition: each commits with the next statement sent
// there, so one more such subtransaction costs its statements' messages
// and no commit round. Without the optimization it costs a commit round
// (two messages) more. The effects are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_subtransaction_commits_with_the_next_statement() {
    for (protocol, commit_messages) in [("salt", 0), ("salt-nolocal", 2)] {
        // Wait-die: no process-wide deadlock detector asks the partitions
        // for their wait-for graphs meanwhile (its messages would count).
        let mut cfg = config(protocol, None, DeadlockPolicy::WaitDie);
        cfg.link.delay_us = 1;
        let c = Cluster::start(cfg, app(Gates::default())).expect("start");
        c.load("kv", vec![vec![Value::Int(3), Value::Int(0)]])
            .await
            .expect("load");
        let two = messages_of_steps(&c, 3, 2).await;
        let three = messages_of_steps(&c, 3, 3).await;
        // Two statements: a request and an answer each.
        assert_eq!(three - two, 4 + commit_messages, "{protocol}");
        assert_eq!(acid_get(&c, 3).await, 5, "{protocol}");
    }
}

// An accepted BASE transaction can no longer roll back, so it is protected
// in the lock tables: under wait-die its later subtransaction waits for an
// older ACID writer, and when that ACID transaction asks for the accepted
// transaction's saline lock it dies at once. Before, the ACID transaction
// waited for the saline lock while the later subtransaction, younger, died
// on the ACID transaction's lock, ran again and died again (TPC-C with
// clause 2's order fell to 28 txn/s that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_acid_transaction_dies_rather_than_wait_for_an_accepted_base_one() {
    let gates = Gates::default();
    let c = Cluster::start(
        config("salt", None, DeadlockPolicy::WaitDie),
        app(gates.clone()),
    )
    .expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    let (x, z) = (3, 4);
    let mut older = c.client().begin();
    older
        .execute(
            "UPDATE kv SET v = $v WHERE k = $k",
            vec![Value::Int(7), Value::Int(z)],
        )
        .await
        .expect("older ACID writer");
    gates.open("p");
    let mut base = call(
        &c,
        "x_then_z",
        vec![
            Value::Int(x),
            Value::Int(1),
            Value::Int(z),
            Value::Int(2),
            s("p"),
        ],
    );
    assert!(
        blocked(&mut base).await,
        "the BASE transaction's second subtransaction waits for the older writer"
    );
    read_dies_at_once(older, x).await;
    base.await.unwrap().expect("the BASE transaction completes");
    assert_eq!(c.stats().retries, 0, "no subtransaction of it died");
    // The call returns before its saline locks are gone everywhere; under
    // wait-die a (younger) ACID read of them dies until then.
    let mut tries = 0;
    let v = loop {
        let mut t = c.client().begin();
        match t
            .execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(x)])
            .await
        {
            Ok(r) => {
                t.commit().await.expect("commit");
                break int(&r.rows[0][0]);
            }
            Err(e) if tries < 100 => {
                assert!(matches!(e, brine_core::Error::Aborted(_)), "{e}");
                t.abort().await;
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("the BASE transaction's locks stayed: {e}"),
        }
    };
    assert_eq!(v, 1);
    // The protection went with the transaction.
    c.locks_released(Duration::from_secs(2))
        .await
        .expect("no lock state outlives its transaction");
}

/// Bank's total across partitions while an accepted transfer is half done:
/// BASE1 (`x_then_z`) wrote `x` at one partition and pauses before its
/// write of `z` at the other; an ACID SUM over every row (its transaction's
/// first statement, serializable) starts, then a fresh BASE2 writes
/// `fresh` at `z`'s partition; then BASE1 goes on. Returns the SUM's
/// answer and whether BASE2 was still waiting when BASE1 went on.
async fn total_beside_a_transfer(mutation: Option<Mutation>) -> (brine_core::Result<i64>, bool) {
    let gates = Gates::default();
    let mut cfg = config("salt", mutation, DeadlockPolicy::Detect);
    cfg.isolation = Isolation::Serializable;
    let c = Cluster::start(cfg, app(gates.clone())).expect("start");
    let rows = (0..8).map(|k| vec![Value::Int(k), Value::Int(0)]).collect();
    c.load("kv", rows).await.expect("load");
    let x = (0..8)
        .find(|&k| partition(k) == 0)
        .expect("a key at partition 0");
    let mut at_1 = (0..8).filter(|&k| partition(k) == 1);
    let (z, fresh) = (at_1.next().expect("z"), at_1.next().expect("fresh"));
    let base1 = call(
        &c,
        "x_then_z",
        vec![
            Value::Int(x),
            Value::Int(10),
            Value::Int(z),
            Value::Int(20),
            s("t1"),
        ],
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // BASE1 accepted
    let c2 = c.clone();
    let total = tokio::spawn(async move {
        let mut t = c2.client().begin();
        let r = t.execute("SELECT SUM(v) FROM kv", vec![]).await;
        match r {
            Ok(r) => {
                t.commit().await?;
                Ok(int(&r.rows[0][0]))
            }
            Err(e) => {
                t.abort().await;
                Err(e)
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut base2 = call(&c, "set", vec![Value::Int(fresh), Value::Int(5)]);
    let base2_waited = blocked(&mut base2).await;
    gates.open("t1");
    base1.await.unwrap().expect("BASE1 completes");
    base2.await.unwrap().expect("BASE2 completes");
    (total.await.unwrap(), base2_waited)
}

// Gated multi-partition statements: the total keeps its place at both
// partitions but holds neither until both can grant it, so the accepted
// transfer's second write passes it. It reads the transfer whole, and the
// fresh BASE2 behind it at `z`'s partition waits for it (no overtaking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_total_across_partitions_waits_gated_for_an_accepted_transfer() {
    let (total, base2_waited) = total_beside_a_transfer(None).await;
    assert_eq!(total.expect("the total is never a victim"), 30);
    assert!(
        base2_waited,
        "the fresh BASE2 queues behind the waiting total"
    );
}

// Without the gate the total holds `z`'s partition while it waits at
// `x`'s for BASE1, whose write of `z` waits for the total: a deadlock, and
// the total (BASE1 can no longer roll back) is its victim every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_the_total_is_the_victim_of_the_transfer() {
    let (total, _) = total_beside_a_transfer(Some(Mutation::NoGate)).await;
    match total {
        Err(brine_core::Error::Aborted(brine_core::AbortCause::Deadlock)) => {}
        other => panic!("expected the total to die in a deadlock, got {other:?}"),
    }
}

/// Read committed: two accepted transfers each half done, in opposite
/// directions (BASE1 wrote at partition 0 and will write at 1, BASE2 the
/// reverse), and an ACID SUM over every row that must wait for both. The
/// SUM's read locks end with it at each partition, but its *waiting*
/// requests sat in both FIFO queues, ahead of each transfer's second
/// write, while it waited for the other transfer: a cycle across the two
/// partitions. Returns the SUM and how many deadlocks the cluster broke
/// (queue passes and victims).
async fn total_between_two_transfers(mutation: Option<Mutation>) -> (i64, u64) {
    let (c, gates) = start("salt", mutation).await;
    let at = |p: u32| (0..8).filter(move |&k| partition(k) == p);
    let (mut at_0, mut at_1) = (at(0), at(1));
    let (a0, b0) = (at_0.next().expect("a0"), at_0.next().expect("b0"));
    let (a1, b1) = (at_1.next().expect("a1"), at_1.next().expect("b1"));
    let one = call(
        &c,
        "x_then_z",
        vec![
            Value::Int(a0),
            Value::Int(10),
            Value::Int(a1),
            Value::Int(20),
            s("r1"),
        ],
    );
    let two = call(
        &c,
        "x_then_z",
        vec![
            Value::Int(b1),
            Value::Int(1),
            Value::Int(b0),
            Value::Int(2),
            s("r2"),
        ],
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // both accepted
    let c2 = c.clone();
    let total = tokio::spawn(async move {
        let mut t = c2.client().begin();
        let r = t
            .execute("SELECT SUM(v) FROM kv", vec![])
            .await
            .expect("SUM");
        t.commit().await.expect("commit");
        int(&r.rows[0][0])
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    gates.open("r1");
    gates.open("r2");
    one.await.unwrap().expect("BASE1 completes");
    two.await.unwrap().expect("BASE2 completes");
    let sum = total.await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await; // counters copied
    let st = c.stats();
    (sum, st.queue_bypasses + st.aborts_deadlock)
}

// With the gate (each partition opens it as soon as it can grant it), the
// transfers' second writes pass the waiting SUM: no cycle forms. Under read
// committed each partition is read when it is free: after every transfer
// holding a lock there has finished, but possibly before one that holds
// nothing there yet writes there. So the SUM sees both transfers whole
// (33), or one of them without its second write: BASE2 if partition 0 was
// read before BASE2 wrote there (31), or BASE1 if partition 1 was read
// before BASE1 wrote there (13). Read committed allows that skew (`acid`
// shows it too, docs/results/bank-invariant.md); which one appears is
// timing. Both cannot: partition 0 is read only after BASE1 finished,
// partition 1 only after BASE2 did, and each wrote its second row
// before finishing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_committed_total_lets_the_transfers_it_waits_for_pass() {
    let (sum, broken) = total_between_two_transfers(None).await;
    assert!(sum == 33 || sum == 31 || sum == 13, "{sum}");
    assert_eq!(broken, 0, "no deadlock formed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_read_committed_total_closes_a_cycle() {
    let (_, broken) = total_between_two_transfers(Some(Mutation::NoGate)).await;
    assert!(broken > 0, "the detector had a cycle to break");
}
