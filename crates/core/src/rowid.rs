//! `unique_rowid()`: keys for tables whose rows have no natural one
//! (pgbench's history, audit logs), made without any coordination.
//!
//! An id is `micros * 1024 + node`: the wall clock in microseconds, then
//! the process's node tag (0..1024, set once by a server from its node
//! id). Within a process the ids strictly increase (a call in the same
//! microsecond takes the next free one), and two processes with different
//! tags never make the same id. Two calls can only collide if a process
//! restarts with its clock set back past ids it made before; the insert
//! then fails as a duplicate key (a clear error, nothing overwritten).
//! Ids fit an i64 until the year 2255.

use std::sync::atomic::{AtomicI64, AtomicU16, Ordering};

const NODE_BITS: u32 = 10;
const NODE_LIMIT: u16 = 1 << NODE_BITS;

static NODE: AtomicU16 = AtomicU16::new(0);
static LAST: AtomicI64 = AtomicI64::new(0);

/// Sets this process's node tag; ids of processes with different tags
/// never collide. Tags are taken modulo 1024.
pub fn set_node(node: u16) {
    NODE.store(node % NODE_LIMIT, Ordering::Relaxed);
}

/// The next id (see the module's documentation).
pub fn next() -> i64 {
    let node = i64::from(NODE.load(Ordering::Relaxed));
    let from_clock = (crate::timestamp::now() << NODE_BITS) | node;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        // The next id after `last` that carries this node's tag.
        let after_last = ((last >> NODE_BITS) + 1) << NODE_BITS | node;
        let id = from_clock.max(after_last);
        match LAST.compare_exchange_weak(last, id, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return id,
            Err(seen) => last = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_and_carry_the_node_tag() {
        set_node(1027);
        let ids: Vec<i64> = (0..10_000).map(|_| next()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids strictly increase");
        assert!(
            ids.iter().all(|id| id & 1023 == 3),
            "tag 1027 is 3 modulo 1024"
        );
        let micros = ids[0] >> NODE_BITS;
        assert!(
            (micros - crate::timestamp::now()).abs() < 60_000_000,
            "ids follow the clock"
        );
        set_node(0);
    }

    #[test]
    fn concurrent_callers_never_share_an_id() {
        let handles: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..5_000).map(|_| next()).collect::<Vec<_>>()))
            .collect();
        let mut all: Vec<i64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
