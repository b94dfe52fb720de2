//! The deadlock search's bound and its search from a new release-order
//! dependency (`LockTable::detect_from_waiters`).

use brine_core::{Access, TxnId};
use brine_lock::{
    Acquire, DeadlockPolicy, LockClass, LockConfig, LockTable, Mode, StandardCompat, Wakeup,
    MAX_SEARCH,
};
use std::sync::Arc;
use std::time::Instant;

mod common;
use common::{row, txn};

fn detecting() -> LockTable {
    LockTable::new(
        LockConfig {
            policy: DeadlockPolicy::Detect,
            ..LockConfig::default()
        },
        Arc::new(StandardCompat),
    )
}

fn acid(access: Access) -> Mode {
    Mode::new(LockClass::Acid, access)
}

fn acquire(t: &mut LockTable, who: u64, k: i64, mode: Mode, wakeups: &mut Vec<Wakeup>) -> Acquire {
    t.acquire(txn(who), &row(k), mode, Instant::now(), wakeups)
        .expect("acquire")
}

/// A cycle through more transactions than one search may visit is not
/// broken at the wait that closes it: the search gives up and says so,
/// and the whole cycle is in the wait-for graph the cluster's periodic
/// detector reads. A short cycle is still broken at once.
#[test]
fn a_cycle_longer_than_the_search_bound_is_left_to_the_periodic_detector() {
    let mut t = detecting();
    let mut wakeups = Vec::new();
    let n = (MAX_SEARCH + 10) as u64;
    for i in 1..=n {
        let got = acquire(&mut t, i, i as i64, acid(Access::Write), &mut wakeups);
        assert!(matches!(got, Acquire::Granted { .. }), "{got:?}");
    }
    // t1 waits for t2, t2 for t3, ..., and t_n for t1: one cycle of n.
    for i in 1..n {
        let got = acquire(&mut t, i, i as i64 + 1, acid(Access::Write), &mut wakeups);
        assert!(matches!(got, Acquire::Waiting(_)), "t{i}: {got:?}");
    }
    assert_eq!(t.stats().searches_cut, 0);
    let got = acquire(&mut t, n, 1, acid(Access::Write), &mut wakeups);
    assert!(matches!(got, Acquire::Waiting(_)), "{got:?}");
    assert!(wakeups.is_empty(), "{wakeups:?}");
    assert_eq!(t.stats().aborts_deadlock, 0);
    assert!(t.stats().searches_cut >= 1);

    let (mut edges, mut waiting) = (Vec::new(), Vec::new());
    let left_out = t.wait_for_graph(Instant::now(), &mut edges, &mut waiting);
    assert!(!left_out);
    for i in 1..=n {
        let next = if i == n { 1 } else { i + 1 };
        assert!(
            edges.contains(&(txn(i), txn(next))),
            "edge t{i} -> t{next} missing"
        );
    }
    assert_eq!(waiting.len(), n as usize);

    // Three transactions: found and broken by the wait that closes it.
    let mut t = detecting();
    let mut wakeups = Vec::new();
    for i in 1..=3 {
        acquire(&mut t, i, i as i64, acid(Access::Write), &mut wakeups);
    }
    acquire(&mut t, 1, 2, acid(Access::Write), &mut wakeups);
    acquire(&mut t, 2, 3, acid(Access::Write), &mut wakeups);
    let got = acquire(&mut t, 3, 1, acid(Access::Write), &mut wakeups);
    assert!(matches!(got, Acquire::Abort(_)), "{got:?}");
    assert_eq!(t.stats().searches_cut, 0);
}

/// A release-order dependency gained by a holder makes every request
/// waiting behind it wait for the dependency's transaction too. One search
/// from that transaction finds the cycle through whichever waiter closes
/// it, among many that do not, and breaks it.
#[test]
fn a_new_dependency_closing_a_cycle_through_one_of_many_waiters_is_broken() {
    let mut t = detecting();
    let mut wakeups = Vec::new();
    let (x, y, z) = (1, 2, 3);
    // t1 (BASE) writes x in an alkaline subtransaction; t2 holds y and t3
    // holds z (ACID).
    let alkaline = Mode::new(LockClass::Alkaline, Access::Write);
    acquire(&mut t, 1, x, alkaline, &mut wakeups);
    acquire(&mut t, 2, y, acid(Access::Write), &mut wakeups);
    acquire(&mut t, 3, z, acid(Access::Write), &mut wakeups);
    // Readers queue on x behind t1: t3, and eight that hold nothing.
    let got = acquire(&mut t, 3, x, acid(Access::Read), &mut wakeups);
    assert!(matches!(got, Acquire::Waiting(_)), "{got:?}");
    for r in 10..18 {
        let got = acquire(&mut t, r, x, acid(Access::Read), &mut wakeups);
        assert!(matches!(got, Acquire::Waiting(_)), "{got:?}");
    }
    // t2 waits for t3 (z). No cycle yet.
    let got = acquire(&mut t, 2, z, acid(Access::Write), &mut wakeups);
    assert!(matches!(got, Acquire::Waiting(_)), "{got:?}");
    assert!(wakeups.is_empty(), "{wakeups:?}");

    // t1's lock on x now cannot go before t2 releases y (t1 read y
    // dirty): t3, waiting on x, waits for t2, which waits for t3.
    t.add_release_dependency(txn(1), Some(&row(x)), txn(2), Some(&row(y)))
        .expect("dependency");
    t.detect_from_waiters(&row(x), &[txn(2)], &mut wakeups);
    let aborted: Vec<TxnId> = wakeups
        .iter()
        .filter_map(|w| match w {
            Wakeup::Aborted { txn, .. } => Some(*txn),
            _ => None,
        })
        .collect();
    assert_eq!(aborted, vec![txn(3)], "{wakeups:?}");
    assert_eq!(t.stats().aborts_deadlock, 1);

    // Nothing left to break: a second look changes nothing.
    wakeups.clear();
    t.detect_from_waiters(&row(x), &[txn(2)], &mut wakeups);
    assert!(wakeups.is_empty(), "{wakeups:?}");
}
