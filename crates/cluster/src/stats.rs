//! Cluster-wide counters, kept as relaxed atomics so no hot path takes a lock
//! to count.

use std::sync::atomic::{AtomicU64, Ordering};

use brine_core::AbortCause;

#[derive(Debug, Default)]
pub struct ClusterCounters {
    pub commits: AtomicU64,
    pub retries: AtomicU64,
    pub user_aborts: AtomicU64,
    pub aborts_wait_die: AtomicU64,
    pub aborts_deadlock: AtomicU64,
    pub aborts_timeout: AtomicU64,
    pub aborts_cascade: AtomicU64,
    /// Salt: BASE transactions accepted (first subtransaction committed).
    pub base_accepted: AtomicU64,
    /// Salt: bodies run again after acceptance because a subtransaction
    /// was a concurrency-control victim (replayed from the context table).
    pub base_replays: AtomicU64,
    /// Callas: times a Runtime Pipelining group went rollback-safe.
    pub safe_mode_switches: AtomicU64,
    /// Runtime Pipelining: pieces that waited for a transaction they
    /// depend on to reach their rank (or commit), and for how long.
    pub rank_waits: AtomicU64,
    pub rank_wait_ns: AtomicU64,
    /// Runtime Pipelining: commits that waited for a transaction they
    /// depend on to commit, and for how long.
    pub commit_waits: AtomicU64,
    pub commit_wait_ns: AtomicU64,
}

impl ClusterCounters {
    pub fn count_abort(&self, cause: AbortCause) {
        let c = match cause {
            AbortCause::WaitDie => &self.aborts_wait_die,
            AbortCause::Deadlock => &self.aborts_deadlock,
            AbortCause::LockTimeout => &self.aborts_timeout,
            AbortCause::Cascade => &self.aborts_cascade,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one wait of `took` in `count`/`ns`.
    pub fn count_wait(count: &AtomicU64, ns: &AtomicU64, took: std::time::Duration) {
        count.fetch_add(1, Ordering::Relaxed);
        ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A point-in-time copy of the counters, with partition-level lock figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub commits: u64,
    pub retries: u64,
    pub user_aborts: u64,
    /// Concurrency-control aborts by cause.
    pub aborts_wait_die: u64,
    pub aborts_deadlock: u64,
    pub aborts_timeout: u64,
    pub aborts_cascade: u64,
    pub statements: u64,
    pub lock_waits: u64,
    pub lock_wait_us_total: u64,
    /// Deadlocks broken by a queue pass instead of an abort.
    pub queue_bypasses: u64,
    /// Deadlock searches that gave up at `brine_lock::MAX_SEARCH`
    /// transactions, leaving a cycle, if any, to the periodic detector.
    pub searches_cut: u64,
    /// Deadlocks broken at the request of the cluster's detector (cycles
    /// through several partitions, or left by a cut search).
    pub detector_breaks: u64,
    pub base_accepted: u64,
    pub base_replays: u64,
    pub safe_mode_switches: u64,
    /// Runtime Pipelining's waits besides locks (see `ClusterCounters`).
    pub rank_waits: u64,
    pub rank_wait_us_total: u64,
    pub commit_waits: u64,
    pub commit_wait_us_total: u64,
    /// Rank waits held at the partitions (`LockSpec::after_rank`).
    pub rank_holds: u64,
    pub rank_hold_us_total: u64,
}

impl StatsSnapshot {
    pub fn cc_aborts(&self) -> u64 {
        self.aborts_wait_die + self.aborts_deadlock + self.aborts_timeout + self.aborts_cascade
    }

    /// The difference `self - earlier`, for measuring an interval.
    pub fn since(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            commits: self.commits - earlier.commits,
            retries: self.retries - earlier.retries,
            user_aborts: self.user_aborts - earlier.user_aborts,
            aborts_wait_die: self.aborts_wait_die - earlier.aborts_wait_die,
            aborts_deadlock: self.aborts_deadlock - earlier.aborts_deadlock,
            aborts_timeout: self.aborts_timeout - earlier.aborts_timeout,
            aborts_cascade: self.aborts_cascade - earlier.aborts_cascade,
            statements: self.statements - earlier.statements,
            lock_waits: self.lock_waits - earlier.lock_waits,
            lock_wait_us_total: self.lock_wait_us_total - earlier.lock_wait_us_total,
            queue_bypasses: self.queue_bypasses - earlier.queue_bypasses,
            searches_cut: self.searches_cut - earlier.searches_cut,
            detector_breaks: self.detector_breaks - earlier.detector_breaks,
            base_accepted: self.base_accepted - earlier.base_accepted,
            base_replays: self.base_replays - earlier.base_replays,
            safe_mode_switches: self.safe_mode_switches - earlier.safe_mode_switches,
            rank_waits: self.rank_waits - earlier.rank_waits,
            rank_wait_us_total: self.rank_wait_us_total - earlier.rank_wait_us_total,
            commit_waits: self.commit_waits - earlier.commit_waits,
            commit_wait_us_total: self.commit_wait_us_total - earlier.commit_wait_us_total,
            rank_holds: self.rank_holds - earlier.rank_holds,
            rank_hold_us_total: self.rank_hold_us_total - earlier.rank_hold_us_total,
        }
    }
}
