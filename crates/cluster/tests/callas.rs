//! Scenario tests of Callas' inter-group mechanism (seed 000 section 4.3,
//! seed 002 section 4): nexus locks between groups, sharing inside a
//! group, and the nexus lock release order, whose absence lets a
//! dependency cycle span two groups (seed 000 Fig. 4.2, first example);
//! classic transaction chopping (`sc`) inside a group. Runtime Pipelining
//! is in `callas_pipelining.rs`.

use std::time::Duration;

use brine_check::{AnomalyClass, Level};
use brine_cluster::{Cluster, DeadlockPolicy, Mutation};
use brine_core::Value;

mod salt_common;
use salt_common::{call, int, read_dies_at_once, Gates};

mod callas_common;
use callas_common::{acid_read, app, config, start, within, A, B};

const FIG_4_2: &str = "g1:chop=t1,t2;g2:2pl=t3";

/// Fig. 4.2: T1 writes a and pauses; T2 (T1's group) writes a after it and
/// writes b, and commits; T3 (the other group) reads b and writes c; T1
/// reads c (a, b, c: `callas_common::app`). Returns (whether T3 had to wait for T1, what T3 read of b, what
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

/// `chop` commits every statement on its own: a group whose finest
/// chopping has an SC-cycle (two `stocked` calls each write stock rows
/// and add to and read the district counter) could have two transactions
/// each depend on the other, which no release order can serve. It is
/// refused, with the cycle and what runs the group instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chop_group_whose_chopping_has_an_sc_cycle_is_refused() {
    let e = Cluster::start(
        config("g1:chop=stocked;g2:2pl=t3", None, None),
        app(Gates::default()),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("group `g1`") && e.contains("SC-cycle"), "{e}");
    assert!(e.contains("stocked") && e.contains("`sc`"), "{e}");
    // The same procedures chopped without SC-cycles run.
    let c = Cluster::start(
        config("g1:sc=stocked;g2:2pl=t3", None, None),
        app(Gates::default()),
    );
    assert!(c.is_ok(), "{:?}", c.err());
}

/// With a log, `2pl`, `rp` and `sc` groups run (a crash between two `sc`
/// pieces is rolled forward at recovery); a `chop` group, which has no
/// roll-forward, is refused with the reason, not run without it (in one
/// process and across processes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_log_chop_groups_are_refused_and_the_others_run() {
    let dir = tempfile::tempdir().expect("tmp");
    let durable = |grouping: &str| {
        let mut c = config(grouping, None, None);
        c.durability = brine_cluster::DurabilityConfig {
            mode: brine_cluster::DurabilityMode::Wal,
            data_dir: Some(dir.path().join(grouping.replace([':', '=', ';', ','], "-"))),
            ..brine_cluster::DurabilityConfig::default()
        };
        c
    };
    let refused = "g1:chop=t1,t2;g2:2pl=t3";
    let e = Cluster::start(durable(refused), app(Gates::default()))
        .err()
        .unwrap_or_else(|| panic!("{refused}: refused"))
        .to_string();
    assert!(
        e.contains("rolled forward") && e.contains("--durability none"),
        "{e}"
    );
    for runs in ["g1:rp=order", "g1:2pl=t1,t2", "g1:sc=sc_set,bump"] {
        let c = Cluster::start(durable(runs), app(Gates::default()));
        assert!(c.is_ok(), "{runs}: {:?}", c.err());
    }
    // Across processes too (rolled forward from the contexts of every
    // process); `chop` is refused there as well.
    let config = durable("g1:sc=sc_set,bump");
    let sc = brine_cluster::protocols::build("callas", &config, &["sc_set", "bump"]).expect("sc");
    assert!(sc.check_deployment(true, true).is_ok());
    let config = durable(refused);
    let chop =
        brine_cluster::protocols::build("callas", &config, &["t1", "t2", "t3"]).expect("chop");
    assert!(chop.check_deployment(true, true).is_err());
    assert!(chop.check_deployment(true, false).is_ok());
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
