//! The lock table of one partition: holders and FIFO wait queues per target,
//! deadlock handling, downgrades and release-order dependencies.
//!
//! [`LockTable`] is one type whose `impl` is spread over the files of this
//! folder, one concern each. This file holds the type, its constructor and
//! the per-transaction state every concern reads. Where the rest lives:
//!
//! ```text
//!   config.rs        LockConfig, DeadlockPolicy
//!   outcome.rs       what operations answer: Ticket, Acquire, Wakeup, ReleaseOutcome
//!   stats.rs         LockStats
//!   compat.rs        lock modes and the compatibility matrices (Compatibility)
//!   range.rs         a (table, index)'s point and range entries (Space), overlap
//!   queue.rs         holders and wait queues (Entry), who makes a request wait,
//!                    acquire, grant, regrant, cancel_waits
//!   release.rs       release, release_all, release_class, downgrades
//!   release_deps.rs  release-order dependencies, fork_hold, staged releases
//!   gate.rs          gated requests (acquire_gated, ungate), protection (protect)
//!   deadlock.rs      wait-die, the wait-for graph, cycle search and breaking,
//!                    the wait timeout (expire), the cluster detector's interface
//!   inspect.rs       read-only queries: holders, waiters, counts
//!   invariants.rs    check_invariants
//!   display.rs       the deterministic dump (Display), targets in messages
//! ```

pub(crate) mod compat;
mod config;
mod deadlock;
mod display;
mod gate;
mod inspect;
mod invariants;
mod outcome;
mod queue;
mod range;
mod release;
mod release_deps;
mod stats;

pub use config::{DeadlockPolicy, LockConfig};
pub use deadlock::MAX_SEARCH;
pub use gate::GateOpens;
pub use outcome::{Acquire, ReleaseOutcome, Ticket, Wakeup};
pub use stats::LockStats;

use brine_core::{Access, LockTarget, TxnId};
use compat::Compatibility;
use queue::Wait;
use range::{Space, SpaceKey};
use release_deps::Dep;
use smallvec::SmallVec;
use std::sync::Arc;

/// rustc's hash (FxHash). SipHash dominated the uncontended path; lock
/// keys are hashed several times per operation and the table is private
/// to one partition, so speed wins over DoS resistance here (a
/// pathological key set degrades one partition's lock table, it cannot
/// corrupt it).
type Map<K, V> = rustc_hash::FxHashMap<K, V>;

/// What the table keeps about one transaction here; dropped once idle
/// ([`LockTable::maybe_drop_txn`]).
#[derive(Default)]
struct TxnState {
    /// Exact targets on which the txn holds at least one mode, in grant order.
    held: Vec<LockTarget>,
    /// Targets granted in the alkaline class since the last
    /// `downgrade_all` from alkaline (may repeat): what that call must look
    /// at, so a subtransaction's end costs its own locks, not all of them.
    alkaline: Vec<LockTarget>,
    waiting: SmallVec<[Ticket; 1]>,
    deps: Vec<Dep>,
    /// Transactions with a dependency on this one (may hold stale names).
    dependants: Vec<TxnId>,
    /// Single releases (`release`) held back by dependencies.
    pending: Vec<(LockTarget, Access)>,
    /// `release_all` was called; the txn can take no new locks.
    releasing: bool,
    /// `release_all` answered `Deferred`: completion emits `Released`.
    deferred: bool,
    /// The transaction can no longer roll back ([`LockTable::protect`]);
    /// keeps the state until `release_all`.
    protected: bool,
    /// Its locks are being released in stages (Salt's write-after-read
    /// rule): a lock of a later stage goes only after every earlier stage
    /// went, so each of its locks waits, through its stages, for every
    /// release-order dependency it carries.
    staged: bool,
    /// It holds a lock granted through a gate (an ACID statement across
    /// partitions): a gated request does not wait for its shared locks
    /// as for those of a reader that may upgrade.
    gate_granted: bool,
    /// Salt: this "transaction" only holds locks forked from `parent`
    /// ([`LockTable::fork_hold`]): an earlier operation's long-term locks,
    /// released on their own schedule, never before `parent` ends its
    /// body. It never requests a lock; it waits, for the deadlock
    /// searches, for its parent.
    parent: Option<TxnId>,
    /// The holders its locks were forked to: a stage of its release waits
    /// for theirs, so their dependencies are its edges too.
    children: SmallVec<[TxnId; 1]>,
}

impl TxnState {
    fn is_blocked(&self, target: &LockTarget) -> bool {
        self.deps.iter().any(|d| match &d.target {
            None => true,
            Some(t) => t == target,
        })
    }

    fn is_idle(&self) -> bool {
        self.held.is_empty()
            && self.waiting.is_empty()
            && self.pending.is_empty()
            && self.deps.is_empty()
            && !self.releasing
            && (!self.protected || self.parent.is_some())
    }
}

/// The lock table of one partition. See the crate documentation for the
/// guarantees; every method runs to completion without blocking.
pub struct LockTable {
    config: LockConfig,
    compat: Arc<dyn Compatibility>,
    spaces: Map<SpaceKey, Space>,
    waits: Map<Ticket, Wait>,
    txns: Map<TxnId, TxnState>,
    next_ticket: u64,
    /// Transactions whose held-back releases may have become possible.
    worklist: Vec<TxnId>,
    /// Transactions some of whose dependencies were satisfied or
    /// held-back single releases (`release`) happened since the last
    /// `take_released_held_back`.
    held_back_progress: Vec<TxnId>,
    /// Gated requests queued, and how many of them are ready.
    gated: usize,
    gated_ready: usize,
    /// Gated requests whose readiness changed since the last
    /// `take_gate_changes`: `(txn, ticket, ready)`.
    gate_changes: Vec<(TxnId, Ticket, bool)>,
    /// Counts what may have added a wait-for edge that this table's own
    /// search cannot close into a cycle: a wait left waiting, a
    /// release-order dependency recorded, a staged release begun. See
    /// [`LockTable::wait_for_changes`].
    graph_changes: u64,
    stats: LockStats,
}

impl LockTable {
    pub fn new(config: LockConfig, compat: Arc<dyn Compatibility>) -> Self {
        LockTable {
            config,
            compat,
            spaces: Map::default(),
            waits: Map::default(),
            txns: Map::default(),
            next_ticket: 1,
            worklist: Vec::new(),
            held_back_progress: Vec::new(),
            gated: 0,
            gated_ready: 0,
            gate_changes: Vec::new(),
            graph_changes: 0,
            stats: LockStats::default(),
        }
    }

    pub fn config(&self) -> &LockConfig {
        &self.config
    }

    pub fn stats(&self) -> &LockStats {
        &self.stats
    }

    fn maybe_drop_txn(&mut self, txn: TxnId) {
        if self.txns.get(&txn).is_some_and(TxnState::is_idle) {
            self.txns.remove(&txn);
        }
    }
}
