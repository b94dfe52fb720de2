//! Cluster-wide counters, kept as relaxed atomics so no hot path takes a lock
//! to count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use brine_core::AbortCause;

/// Counter slots a protocol keeps for itself, at the coordinators
/// (`ClusterCounters::protocol`) and at each partition
/// (`PartitionCounters::protocol`), reported under the names it gives
/// them ([`Counter`], `Protocol::counters`).
pub const PROTOCOL_SLOTS: usize = 12;

/// A protocol's own counter slots.
#[derive(Debug, Default)]
pub struct ProtocolCounters([AtomicU64; PROTOCOL_SLOTS]);

impl ProtocolCounters {
    pub fn add(&self, slot: usize, n: u64) {
        self.0[slot].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one wait of `took`: one in `count`, its nanoseconds in `ns`.
    pub fn count_wait(&self, count: usize, ns: usize, took: std::time::Duration) {
        self.add(count, 1);
        self.add(ns, took.as_nanos() as u64);
    }

    pub fn get(&self, slot: usize) -> u64 {
        self.0[slot].load(Ordering::Relaxed)
    }
}

/// Where a protocol's counter is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// At the coordinators (`ClusterCounters::protocol`).
    Coordinator,
    /// At each partition (`PartitionCounters::protocol`), summed.
    Partition,
}

/// One of a protocol's counters: its name in stats and reports, where it
/// is kept and in which slot, and the divisor its raw value is reported
/// with (1000: nanoseconds kept, microseconds reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    pub name: &'static str,
    pub kept: Kept,
    pub slot: usize,
    pub divisor: u64,
}

impl Counter {
    /// A count kept at the coordinators, reported as it is.
    pub const fn at_coordinators(name: &'static str, slot: usize) -> Counter {
        Counter {
            name,
            kept: Kept::Coordinator,
            slot,
            divisor: 1,
        }
    }
}

#[derive(Debug, Default)]
pub struct ClusterCounters {
    pub commits: AtomicU64,
    pub retries: AtomicU64,
    pub user_aborts: AtomicU64,
    pub aborts_wait_die: AtomicU64,
    pub aborts_deadlock: AtomicU64,
    pub aborts_timeout: AtomicU64,
    pub aborts_cascade: AtomicU64,
    pub aborts_validation: AtomicU64,
    pub aborts_unreachable: AtomicU64,
    /// The protocol's own counters (`Protocol::counters` names them).
    pub protocol: ProtocolCounters,
}

impl ClusterCounters {
    pub fn count_abort(&self, cause: AbortCause) {
        let c = match cause {
            AbortCause::WaitDie => &self.aborts_wait_die,
            AbortCause::Deadlock => &self.aborts_deadlock,
            AbortCause::LockTimeout => &self.aborts_timeout,
            AbortCause::Cascade => &self.aborts_cascade,
            AbortCause::Validation => &self.aborts_validation,
            AbortCause::Unreachable => &self.aborts_unreachable,
        };
        c.fetch_add(1, Ordering::Relaxed);
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
    pub aborts_validation: u64,
    pub aborts_unreachable: u64,
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
    /// The protocol's own counters, by the names it gives them
    /// (`Protocol::counters`; Salt: `base_accepted`, Callas:
    /// `rank_waits`, ...).
    pub protocol: BTreeMap<&'static str, u64>,
}

impl StatsSnapshot {
    /// The protocol's counter `name` (0 if it keeps none of that name).
    pub fn counter(&self, name: &str) -> u64 {
        self.protocol.get(name).copied().unwrap_or(0)
    }

    pub fn cc_aborts(&self) -> u64 {
        self.aborts_wait_die
            + self.aborts_deadlock
            + self.aborts_timeout
            + self.aborts_cascade
            + self.aborts_validation
            + self.aborts_unreachable
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
            aborts_validation: self.aborts_validation - earlier.aborts_validation,
            aborts_unreachable: self.aborts_unreachable - earlier.aborts_unreachable,
            statements: self.statements - earlier.statements,
            lock_waits: self.lock_waits - earlier.lock_waits,
            lock_wait_us_total: self.lock_wait_us_total - earlier.lock_wait_us_total,
            queue_bypasses: self.queue_bypasses - earlier.queue_bypasses,
            searches_cut: self.searches_cut - earlier.searches_cut,
            detector_breaks: self.detector_breaks - earlier.detector_breaks,
            protocol: self
                .protocol
                .iter()
                .map(|(&k, &v)| (k, v - earlier.counter(k)))
                .collect(),
        }
    }
}
