//! Counters of what the lock table did, by outcome and abort cause.

#[cfg(doc)]
use super::{LockTable, MAX_SEARCH};
use brine_core::AbortCause;
use std::fmt;

/// Counters, for status output and tests. Every abort victim is counted
/// once per aborted request, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    pub acquires: u64,
    pub granted_immediately: u64,
    pub already_held: u64,
    pub waits: u64,
    pub granted_after_wait: u64,
    pub aborts_wait_die: u64,
    pub aborts_deadlock: u64,
    pub aborts_lock_timeout: u64,
    pub bound_errors: u64,
    pub deferred_releases: u64,
    /// Deadlocks broken by granting a request ahead of the queue instead
    /// of aborting one (see [`LockTable::acquire`]).
    pub queue_bypasses: u64,
    /// Deadlock searches that gave up at [`MAX_SEARCH`] transactions (see
    /// [`LockTable::detect_from_waiters`]); a cycle they missed is left to
    /// the cluster's periodic detector and the wait timeout.
    pub searches_cut: u64,
    /// Deadlocks broken at the request of the cluster's detector
    /// ([`LockTable::break_deadlock`]): cycles through several partitions,
    /// or one a cut search left. Each is also counted as an abort or a
    /// queue bypass.
    pub detector_breaks: u64,
}

impl LockStats {
    /// Victims of the given cause (`Cascade` and `Validation` are never
    /// produced here).
    pub fn aborts(&self, cause: AbortCause) -> u64 {
        match cause {
            AbortCause::WaitDie => self.aborts_wait_die,
            AbortCause::Deadlock => self.aborts_deadlock,
            AbortCause::LockTimeout => self.aborts_lock_timeout,
            AbortCause::Cascade | AbortCause::Validation | AbortCause::Unreachable => 0,
        }
    }

    pub(super) fn count_abort(&mut self, cause: AbortCause) {
        match cause {
            AbortCause::WaitDie => self.aborts_wait_die += 1,
            AbortCause::Deadlock => self.aborts_deadlock += 1,
            AbortCause::LockTimeout => self.aborts_lock_timeout += 1,
            AbortCause::Cascade | AbortCause::Validation | AbortCause::Unreachable => {}
        }
    }
}

impl fmt::Display for LockStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "acquires={} granted_immediately={} already_held={} waits={} granted_after_wait={} \
             aborts_wait_die={} aborts_deadlock={} aborts_lock_timeout={} bound_errors={} \
             deferred_releases={} queue_bypasses={} searches_cut={} detector_breaks={}",
            self.acquires,
            self.granted_immediately,
            self.already_held,
            self.waits,
            self.granted_after_wait,
            self.aborts_wait_die,
            self.aborts_deadlock,
            self.aborts_lock_timeout,
            self.bound_errors,
            self.deferred_releases,
            self.queue_bypasses,
            self.searches_cut,
            self.detector_breaks
        )
    }
}
