//! What the lock table gives the cluster's deadlock detector: cycles of
//! its own broken at the moment of the wait that closes them, the
//! counter that tells a partition to ring the detector
//! (`LockTable::wait_for_changes`), and a wait-for graph of only the
//! waits that began by the moment a look began
//! (`LockTable::wait_for_graph`).

use brine_core::{AbortCause, Access};
use brine_lock::{
    Acquire, DeadlockPolicy, LockClass, LockConfig, LockTable, Mode, StandardCompat, Ticket, Wakeup,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{row, txn};

fn detecting() -> LockTable {
    LockTable::new(
        LockConfig {
            policy: DeadlockPolicy::Detect,
            // Never the answer here: every wait below ends by a grant or
            // by the detector.
            wait_timeout: Duration::from_secs(3600),
            ..LockConfig::default()
        },
        Arc::new(StandardCompat),
    )
}

fn read() -> Mode {
    Mode::new(LockClass::Acid, Access::Read)
}

fn write() -> Mode {
    Mode::new(LockClass::Acid, Access::Write)
}

fn acquire(
    t: &mut LockTable,
    who: u64,
    k: i64,
    mode: Mode,
    at: Instant,
    wakeups: &mut Vec<Wakeup>,
) -> Acquire {
    t.acquire(txn(who), &row(k), mode, at, wakeups)
        .expect("acquire")
}

/// `releasing` ends; its release grants `waiter`'s request `ticket`, and
/// nothing else happens.
fn granted_when_released(t: &mut LockTable, releasing: u64, waiter: u64, ticket: Ticket) {
    let mut w = Vec::new();
    t.release_all(txn(releasing), &mut w);
    assert_eq!(
        w,
        vec![Wakeup::Granted {
            txn: txn(waiter),
            ticket
        }]
    );
}

/// Two readers of one row both upgrade (read, then write: `register`'s
/// read-then-write): the second upgrade closes the cycle, and is answered
/// `Abort(Deadlock)` on the spot, with no wait left behind and nothing
/// for the cluster's detector (the counter that rings it does not move).
/// Then the older reader's upgrade is granted the moment the victim
/// releases.
#[test]
fn an_upgrade_deadlock_is_broken_at_the_wait_that_closes_it() {
    let mut t = detecting();
    let mut w = Vec::new();
    let now = Instant::now();
    assert_eq!(
        acquire(&mut t, 1, 7, read(), now, &mut w),
        Acquire::Granted { newly: true }
    );
    assert_eq!(
        acquire(&mut t, 2, 7, read(), now, &mut w),
        Acquire::Granted { newly: true }
    );
    let changes = t.wait_for_changes();
    let first = acquire(&mut t, 1, 7, write(), now, &mut w);
    let Acquire::Waiting(ticket) = first else {
        panic!("t1's upgrade waits for the reader t2: {first:?}");
    };
    // A wait left waiting: its cycle, if any, would run elsewhere.
    assert_eq!(t.wait_for_changes(), changes + 1);

    let second = acquire(&mut t, 2, 7, write(), now, &mut w);
    assert_eq!(second, Acquire::Abort(AbortCause::Deadlock));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(t.stats().aborts_deadlock, 1);
    assert_eq!(t.waiting_requests(), 1);
    assert_eq!(
        t.wait_for_changes(),
        changes + 1,
        "nothing left to ring for"
    );

    granted_when_released(&mut t, 2, 1, ticket);
}

/// The same cycle, closed by the older transaction: the victim is the
/// younger one, which was already waiting; it is told through a wakeup
/// at that same call, and the closing request is granted.
#[test]
fn a_cycle_closed_by_the_older_transaction_aborts_the_younger_waiter_at_once() {
    let mut t = detecting();
    let mut w = Vec::new();
    let now = Instant::now();
    acquire(&mut t, 1, 7, read(), now, &mut w);
    acquire(&mut t, 2, 7, read(), now, &mut w);
    let Acquire::Waiting(victim_ticket) = acquire(&mut t, 2, 7, write(), now, &mut w) else {
        panic!("t2's upgrade waits for the reader t1");
    };
    let got = acquire(&mut t, 1, 7, write(), now, &mut w);
    assert_eq!(
        w,
        vec![Wakeup::Aborted {
            txn: txn(2),
            ticket: victim_ticket,
            cause: AbortCause::Deadlock
        }]
    );
    // t2 still holds its read lock until it ends: t1 waits for that only.
    let Acquire::Waiting(ticket) = got else {
        panic!("t1 waits for t2's release: {got:?}");
    };
    w.clear();
    granted_when_released(&mut t, 2, 1, ticket);
}

/// A look counts only the waits that began by the moment it began, so
/// every wait it combines from every partition existed at one moment; a
/// later wait is left out and said to be, so the partition rings again.
#[test]
fn the_graph_holds_only_waits_begun_by_the_look() {
    let mut t = detecting();
    let mut w = Vec::new();
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_millis(1);
    let t2 = t0 + Duration::from_millis(2);
    acquire(&mut t, 1, 1, write(), t0, &mut w);
    acquire(&mut t, 2, 2, write(), t0, &mut w);
    // t3 waits for t1 since t0; t4 waits for t2 since t2.
    assert!(matches!(
        acquire(&mut t, 3, 1, write(), t0, &mut w),
        Acquire::Waiting(_)
    ));
    assert!(matches!(
        acquire(&mut t, 4, 2, write(), t2, &mut w),
        Acquire::Waiting(_)
    ));

    let (mut edges, mut waiting) = (Vec::new(), Vec::new());
    let left_out = t.wait_for_graph(t1, &mut edges, &mut waiting);
    assert!(left_out);
    assert_eq!(edges, vec![(txn(3), txn(1))]);
    assert_eq!(waiting, vec![(txn(3), false)]);

    let (mut edges, mut waiting) = (Vec::new(), Vec::new());
    let left_out = t.wait_for_graph(t2, &mut edges, &mut waiting);
    assert!(!left_out);
    edges.sort();
    waiting.sort();
    assert_eq!(edges, vec![(txn(3), txn(1)), (txn(4), txn(2))]);
    assert_eq!(waiting, vec![(txn(3), false), (txn(4), false)]);
}

/// A transaction is offered to the cluster's detector as one that could
/// pass the queue only if every one of its waits here could: passing one
/// would leave it waiting, holding what it passed for, and the cycle in
/// place.
#[test]
fn a_transaction_is_passable_only_if_every_wait_of_it_is() {
    let mut t = detecting();
    let mut w = Vec::new();
    let now = Instant::now();
    // Row 1: t1 reads; t2's write waits for it; t3's read queues behind
    // t2 (it conflicts with no holder: passable).
    acquire(&mut t, 1, 1, read(), now, &mut w);
    assert!(matches!(
        acquire(&mut t, 2, 1, write(), now, &mut w),
        Acquire::Waiting(_)
    ));
    assert!(matches!(
        acquire(&mut t, 3, 1, read(), now, &mut w),
        Acquire::Waiting(_)
    ));
    let graph = |t: &LockTable| {
        let (mut edges, mut waiting) = (Vec::new(), Vec::new());
        t.wait_for_graph(now, &mut edges, &mut waiting);
        waiting.sort();
        waiting
    };
    assert_eq!(graph(&t), vec![(txn(2), false), (txn(3), true)]);

    // t3 also waits on row 2 for the writer t4 (a conflicting holder).
    acquire(&mut t, 4, 2, write(), now, &mut w);
    assert!(matches!(
        acquire(&mut t, 3, 2, read(), now, &mut w),
        Acquire::Waiting(_)
    ));
    assert_eq!(graph(&t), vec![(txn(2), false), (txn(3), false)]);
}
