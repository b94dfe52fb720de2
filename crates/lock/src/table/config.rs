//! How a lock table is set up: its deadlock policy, wait timeout and bounds.

#[cfg(doc)]
use super::LockTable;
use std::time::Duration;

/// How conflicts that could deadlock are resolved at request time.
/// [`LockTable::expire`] (the lock-wait timeout) applies under every policy;
/// it is the only backstop for cycles that span partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlockPolicy {
    /// A requester younger (larger `TxnId`) than any transaction it would
    /// wait for dies; older ones wait. No cycles can form. A transaction
    /// that can no longer roll back ([`LockTable::protect`]) ranks above
    /// every other: it never dies, and whoever would wait for it does.
    WaitDie,
    /// Wait-for graph of this table, checked on every new wait; the
    /// youngest transaction of a cycle is the victim. Cycles through
    /// several partitions are the cluster's detector's (see
    /// [`LockTable::wait_for_graph`] and [`LockTable::wait_for_changes`]).
    Detect,
    /// Waits are ended only by the timeout.
    TimeoutOnly,
}

impl DeadlockPolicy {
    /// Every policy, by the name cluster files and the command line use.
    pub const NAMED: [(&'static str, DeadlockPolicy); 3] = [
        ("wait-die", DeadlockPolicy::WaitDie),
        ("detect", DeadlockPolicy::Detect),
        ("timeout", DeadlockPolicy::TimeoutOnly),
    ];

    /// The policy called `name` (see [`DeadlockPolicy::NAMED`]).
    pub fn from_name(name: &str) -> Option<DeadlockPolicy> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, p)| p)
    }
}

/// Tunables and bounds of one lock table.
#[derive(Clone, Debug)]
pub struct LockConfig {
    pub policy: DeadlockPolicy,
    /// A wait older than this is aborted by [`LockTable::expire`].
    pub wait_timeout: Duration,
    /// Bound on the wait queue of one target; a request beyond it gets
    /// `Error::Bound` (the caller aborts or retries), never a hang.
    pub max_waiters_per_key: usize,
    /// Bound on the release-order dependencies one transaction carries.
    pub max_deps_per_txn: usize,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            policy: DeadlockPolicy::Detect,
            wait_timeout: Duration::from_secs(1),
            max_waiters_per_key: 1024,
            max_deps_per_txn: 4096,
        }
    }
}
