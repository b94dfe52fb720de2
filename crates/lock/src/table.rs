//! The lock table of one partition: holders and FIFO wait queues per target,
//! deadlock handling, downgrades and release-order dependencies.

use crate::compat::{Compatibility, LockClass, Mode};
use brine_core::access::{interval_nonempty, intervals_overlap, key_in_range};
use brine_core::{AbortCause, Access, Error, IndexId, Key, LockTarget, TableId, TxnId};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Names one waiting request. Tickets are handed out in arrival order, so
/// they also are the FIFO order of fresh requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The immediate answer to [`LockTable::acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is held. `newly` is false if a lock the transaction already
    /// held on this target (same class, same or stronger access) covers it.
    Granted { newly: bool },
    /// The request waits; a later [`Wakeup`] with this ticket ends the wait.
    Waiting(Ticket),
    /// The requester must abort (wait-die victim, or victim of the deadlock
    /// its wait would have closed). Nothing of the request stays in the table;
    /// the transaction's other locks stay held until `release_all`.
    Abort(AbortCause),
}

/// Events produced by table operations for the partition to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// The waiting request `ticket` of `txn` now holds its lock.
    Granted { txn: TxnId, ticket: Ticket },
    /// The waiting request `ticket` of `txn` was removed; `txn` must abort.
    Aborted {
        txn: TxnId,
        ticket: Ticket,
        cause: AbortCause,
    },
    /// A deferred `release_all` of `txn` has completed: it holds nothing.
    Released { txn: TxnId },
}

/// The answer to [`LockTable::release_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Every lock of the transaction is released.
    Done,
    /// Some locks wait for release-order dependencies; a
    /// [`Wakeup::Released`] follows when the last one is released.
    Deferred,
}

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
    /// Victims of the given cause (`Cascade` is never produced here).
    pub fn aborts(&self, cause: AbortCause) -> u64 {
        match cause {
            AbortCause::WaitDie => self.aborts_wait_die,
            AbortCause::Deadlock => self.aborts_deadlock,
            AbortCause::LockTimeout => self.aborts_lock_timeout,
            AbortCause::Cascade => 0,
        }
    }

    fn count_abort(&mut self, cause: AbortCause) {
        match cause {
            AbortCause::WaitDie => self.aborts_wait_die += 1,
            AbortCause::Deadlock => self.aborts_deadlock += 1,
            AbortCause::LockTimeout => self.aborts_lock_timeout += 1,
            AbortCause::Cascade => {}
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

// ---------------------------------------------------------------------------
// Internal structure.

type SpaceKey = (TableId, IndexId);

/// rustc's hash (FxHash). SipHash dominated the uncontended path; lock
/// keys are hashed several times per operation and the table is private
/// to one partition, so speed wins over DoS resistance here (a
/// pathological key set degrades one partition's lock table, it cannot
/// corrupt it).
type Map<K, V> = rustc_hash::FxHashMap<K, V>;

/// A target inside its (table, index) space, borrowed from a `LockTarget`.
#[derive(Clone, Copy)]
enum Local<'a> {
    Point(&'a Key),
    Range(&'a Bound<Key>, &'a Bound<Key>),
}

fn split(t: &LockTarget) -> (SpaceKey, Local<'_>) {
    match t {
        LockTarget::Point { table, index, key } => ((*table, *index), Local::Point(key)),
        LockTarget::Range {
            table,
            index,
            lo,
            hi,
        } => ((*table, *index), Local::Range(lo, hi)),
    }
}

/// Most transactions one deadlock search visits before it gives up.
pub const MAX_SEARCH: usize = 64;

/// Queue position: upgrades (0) before fresh requests (1), then arrival.
type Order = (u8, u64);

/// Past every queue position: see [`LockTable::kill_younger_bypassed`].
const GATED_ONLY: Order = (u8::MAX, u64::MAX);

fn order(upgrade: bool, ticket: Ticket) -> Order {
    (u8::from(!upgrade), ticket.0)
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    txn: TxnId,
    mode: Mode,
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    ticket: Ticket,
    txn: TxnId,
    mode: Mode,
    upgrade: bool,
    /// A gated request ([`LockTable::acquire_gated`]): never granted
    /// before [`LockTable::ungate`]; see [`Kind`] for who passes it.
    gated: bool,
    /// Gated: nothing it must wait for is left (it would be granted now).
    ready: bool,
    /// Was gated, and was ungated ([`Kind::Opened`]).
    opened: bool,
    /// An unprotected transaction's fresh request that queued behind a
    /// gated one: it waits for the gate to open, and meanwhile makes no
    /// one wait ([`View::queued_blocks`]).
    behind_gate: bool,
}

impl Queued {
    fn order(&self) -> Order {
        order(self.upgrade, self.ticket)
    }
}

/// Granted holders and the wait queue of one exact target. A transaction may
/// appear several times among the holders with different modes, never twice
/// with the same mode. The queue is sorted by `Order`.
#[derive(Default)]
struct Entry {
    holders: SmallVec<[Holder; 2]>,
    queue: SmallVec<[Queued; 1]>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }

    /// Keeps one holder per mode of `txn` (after its modes changed class
    /// or owner); returns its modes.
    fn merge_modes_of(&mut self, txn: TxnId) -> SmallVec<[Mode; 4]> {
        let mut seen: SmallVec<[Mode; 4]> = SmallVec::new();
        self.holders.retain(|h| {
            if h.txn != txn {
                return true;
            }
            if seen.contains(&h.mode) {
                return false;
            }
            seen.push(h.mode);
            true
        });
        seen
    }
}

struct RangeEntry {
    lo: Bound<Key>,
    hi: Bound<Key>,
    entry: Entry,
}

/// All locks of one (table, index). Points are found by hash; `ordered`
/// indexes the point keys for range requests. It is built the first time a
/// range is requested in this space and maintained from then on, so spaces
/// that only ever see point locks never pay for it. Range entries are few
/// (one per distinct interval), so a list is enough.
#[derive(Default)]
struct Space {
    points: Map<Key, Entry>,
    ordered: Option<BTreeSet<Key>>,
    ranges: Vec<RangeEntry>,
}

impl Space {
    fn entry(&self, t: Local<'_>) -> Option<&Entry> {
        match t {
            Local::Point(k) => self.points.get(k),
            Local::Range(lo, hi) => self
                .ranges
                .iter()
                .find(|r| &r.lo == lo && &r.hi == hi)
                .map(|r| &r.entry),
        }
    }

    fn entry_mut(&mut self, t: Local<'_>) -> Option<&mut Entry> {
        match t {
            Local::Point(k) => self.points.get_mut(k),
            Local::Range(lo, hi) => self
                .ranges
                .iter_mut()
                .find(|r| &r.lo == lo && &r.hi == hi)
                .map(|r| &mut r.entry),
        }
    }

    fn entry_or_insert(&mut self, t: Local<'_>) -> &mut Entry {
        match t {
            Local::Point(k) => match self.points.entry(k.clone()) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    if let Some(ordered) = &mut self.ordered {
                        ordered.insert(k.clone());
                    }
                    v.insert(Entry::default())
                }
            },
            Local::Range(lo, hi) => {
                let pos = match self.ranges.iter().position(|r| &r.lo == lo && &r.hi == hi) {
                    Some(pos) => pos,
                    None => {
                        self.ranges.push(RangeEntry {
                            lo: lo.clone(),
                            hi: hi.clone(),
                            entry: Entry::default(),
                        });
                        self.ranges.len() - 1
                    }
                };
                &mut self.ranges[pos].entry
            }
        }
    }

    /// Drops the entry of `t` if nothing holds or waits on it.
    fn prune(&mut self, t: Local<'_>) {
        match t {
            Local::Point(k) => {
                if self.points.get(k).is_some_and(Entry::is_empty) {
                    self.points.remove(k);
                    if let Some(ordered) = &mut self.ordered {
                        ordered.remove(k);
                    }
                }
            }
            Local::Range(lo, hi) => {
                if let Some(pos) = self
                    .ranges
                    .iter()
                    .position(|r| &r.lo == lo && &r.hi == hi && r.entry.is_empty())
                {
                    self.ranges.remove(pos);
                }
            }
        }
    }

    fn ensure_ordered(&mut self) {
        if self.ordered.is_none() {
            self.ordered = Some(self.points.keys().cloned().collect());
        }
    }

    /// Calls `f` on every entry whose target overlaps `t` (including the entry
    /// of `t` itself). Point vs point: equal keys; point vs range: key in
    /// interval; range vs range: intervals intersect.
    fn for_each_overlapping<'s>(&'s self, t: Local<'_>, mut f: impl FnMut(&'s Entry)) {
        self.for_each_overlapping_exact(t, |e, _| f(e));
    }

    /// As `for_each_overlapping`, also telling whether the entry is the one
    /// of exactly `t`.
    fn for_each_overlapping_exact<'s>(&'s self, t: Local<'_>, mut f: impl FnMut(&'s Entry, bool)) {
        match t {
            Local::Point(k) => {
                if let Some(e) = self.points.get(k) {
                    f(e, true);
                }
                for r in &self.ranges {
                    if key_in_range(k, &r.lo, &r.hi) {
                        f(&r.entry, false);
                    }
                }
            }
            Local::Range(lo, hi) => {
                debug_assert!(
                    self.ordered.is_some(),
                    "range request in a space without a key index"
                );
                if let Some(ordered) = &self.ordered {
                    if interval_nonempty(lo, hi) {
                        for k in ordered.range::<Key, _>((lo.as_ref(), hi.as_ref())) {
                            if let Some(e) = self.points.get(k) {
                                f(e, false);
                            }
                        }
                    }
                }
                for r in &self.ranges {
                    if intervals_overlap(lo, hi, &r.lo, &r.hi) {
                        f(&r.entry, &r.lo == lo && &r.hi == hi);
                    }
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.ranges.is_empty()
    }
}

/// A request as its queue sees it: whose, on what, in which mode, its
/// place in the queue, and what kind of request it is.
#[derive(Clone, Copy)]
struct Request<'a> {
    txn: TxnId,
    t: Local<'a>,
    mode: Mode,
    before: Order,
    kind: Kind,
}

/// How a request meets gated ones ([`LockTable::acquire_gated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Waits behind a gated request ahead of it, whatever its mode.
    Plain,
    /// Its transaction is protected: it passes gated requests. It holds
    /// locks it will not give up (an accepted BASE transaction), which
    /// the gated request's transaction may be waiting for at another
    /// partition.
    Protected,
    /// A gated request: it also waits for every holder that may upgrade
    /// (one granted a shared mode beside it may upgrade ahead of it later:
    /// neither protected nor granted through a gate), and waits behind
    /// another gated request only on a conflict.
    Gated,
    /// A gated request since ungated: waits behind gated requests only on
    /// a conflict still (else two statements gated at the same partitions
    /// in different orders would each wait for the other).
    Opened,
}

impl Kind {
    fn of(txns: &Map<TxnId, TxnState>, txn: TxnId, gated: bool, opened: bool) -> Kind {
        if gated {
            Kind::Gated
        } else if opened {
            Kind::Opened
        } else if is_protected(txns, txn) {
            Kind::Protected
        } else {
            Kind::Plain
        }
    }
}

/// Who opens the gate of a gated request ([`LockTable::acquire_gated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateOpens {
    /// Only [`LockTable::ungate`] (Salt: the coordinator, once every
    /// partition of the statement is ready).
    OnUngate,
    /// Its partition, as soon as it is ready (Salt: a read under read
    /// committed, whose lock ends with its statement): a request ready on
    /// arrival is granted at once, as queueing it and opening its gate
    /// would (nothing is queued behind the newest request, so no one
    /// else's turn or readiness changes); one that is not waits, and its
    /// partition ungates it when it reports ready.
    WhenReady,
}

/// Whether a request is gated and how its gate opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gating {
    None,
    /// Until [`LockTable::ungate`].
    Held,
    /// Granted at once if ready on arrival; else as `Held`.
    OpenWhenReady,
}

/// What the blocking rules read besides the space.
#[derive(Clone, Copy)]
struct View<'a> {
    compat: &'a dyn Compatibility,
    txns: &'a Map<TxnId, TxnState>,
}

impl View<'_> {
    /// Whether holder `h` makes request `r` wait.
    fn holder_blocks(&self, r: &Request<'_>, h: &Holder) -> bool {
        h.txn != r.txn
            && (!self.compat.compatible(h.mode, r.mode)
                || (r.kind == Kind::Gated && may_upgrade(self.txns, h.txn)))
    }

    /// Whether the queued request `q` makes `r` wait: it is ahead and
    /// conflicts, or it is a gated request ahead that `r` does not pass
    /// (see [`Kind`]). A request queued behind a gate (`behind_gate`)
    /// makes no one wait: until the gate opens it is as if it had not
    /// arrived, so a protected transaction or another gated request is
    /// not held up by a request that waits for a gate in turn.
    fn queued_blocks(&self, r: &Request<'_>, q: &Queued) -> bool {
        if q.txn == r.txn || q.order() >= r.before || q.behind_gate {
            return false;
        }
        let conflicts = !self.compat.compatible(q.mode, r.mode);
        match (q.gated, r.kind) {
            (true, Kind::Protected) => false,
            (true, Kind::Plain) => true,
            _ => conflicts,
        }
    }
}

/// The other transactions the request must wait for, each once: holders
/// and queued requests that make it wait (see [`View`]) on overlapping
/// targets.
fn collect_blockers(space: &Space, v: View<'_>, r: Request<'_>, out: &mut SmallVec<[TxnId; 4]>) {
    space.for_each_overlapping(r.t, |e| {
        for h in &e.holders {
            if v.holder_blocks(&r, h) && !out.contains(&h.txn) {
                out.push(h.txn);
            }
        }
        for q in e.queue.iter().take_while(|q| q.order() < r.before) {
            if v.queued_blocks(&r, q) && !out.contains(&q.txn) {
                out.push(q.txn);
            }
        }
    });
}

/// Whether the request must wait: [`collect_blockers`] without the list,
/// stopping at the first blocker. A regrant asks this of every request
/// queued on a target, so on a long queue collecting the list (and its
/// duplicate check) made a release cost the cube of the queue's length.
fn is_blocked(space: &Space, v: View<'_>, r: Request<'_>) -> bool {
    let mut blocked = false;
    space.for_each_overlapping(r.t, |e| {
        blocked = blocked
            || e.holders.iter().any(|h| v.holder_blocks(&r, h))
            || e.queue
                .iter()
                .take_while(|q| q.order() < r.before)
                .any(|q| v.queued_blocks(&r, q));
    });
    blocked
}

/// The queue entry of the waiting request `ticket` on `target`.
fn queued<'s>(
    spaces: &'s Map<SpaceKey, Space>,
    target: &LockTarget,
    ticket: Ticket,
) -> Option<&'s Queued> {
    let (sk, local) = split(target);
    let e = spaces.get(&sk)?.entry(local)?;
    e.queue.iter().find(|q| q.ticket == ticket)
}

/// [`queued`], to change it.
fn queued_mut<'s>(
    spaces: &'s mut Map<SpaceKey, Space>,
    target: &LockTarget,
    ticket: Ticket,
) -> Option<&'s mut Queued> {
    let (sk, local) = split(target);
    let e = spaces.get_mut(&sk)?.entry_mut(local)?;
    e.queue.iter_mut().find(|q| q.ticket == ticket)
}

/// What `remove_holders` did.
struct Removed {
    any: bool,
    still_holds: bool,
    /// Some waiter may have been waiting for what was removed.
    may_unblock: bool,
}

/// A waiting request, found by ticket.
struct Wait {
    txn: TxnId,
    target: LockTarget,
    mode: Mode,
    upgrade: bool,
    gated: bool,
    opened: bool,
    since: Instant,
}

/// "`target` (or every lock, if None) of the owning txn cannot be released
/// before `on` has released `on_target` (or every lock, if None)". Only
/// unsatisfied dependencies are stored: they are dropped as soon as `on`
/// releases the lock they name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dep {
    target: Option<LockTarget>,
    on: TxnId,
    on_target: Option<LockTarget>,
}

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

// ---------------------------------------------------------------------------

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

    fn view(&self) -> View<'_> {
        View {
            compat: &*self.compat,
            txns: &self.txns,
        }
    }

    pub fn stats(&self) -> &LockStats {
        &self.stats
    }

    /// Requests `mode` on `target` for `txn`.
    ///
    /// Granted at once if compatible with every other transaction's granted
    /// lock on an overlapping target and with every conflicting request
    /// queued ahead. A transaction that already holds a lock on an
    /// overlapping target makes an *upgrade*: it queues ahead of fresh
    /// requests (behind earlier upgrades), so it only waits for holders.
    /// Wakeups of other transactions (deadlock victims, wait-die victims of a
    /// queue-jumping upgrade, grants that follow) are appended to `wakeups`.
    pub fn acquire(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        now: Instant,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        self.acquire_as(txn, target, mode, now, Gating::None, wakeups)
    }

    /// Queues a *gated* request of `mode` on `target` for `txn`, a
    /// transaction that holds no lock anywhere yet (Salt: the first
    /// statement of an ACID transaction that spans partitions). It takes
    /// its place in the queue like any request, so fresh requests queue
    /// behind it, but it is not granted until its gate opens (`opens`):
    /// while the transaction waits for its turn at another partition it
    /// holds nothing here, and the requests of protected transactions
    /// (accepted BASE transactions, which it may be waiting for there)
    /// pass it. Whether it could be granted (it is
    /// *ready*) is reported through [`LockTable::take_gate_changes`] each
    /// time it changes, starting with its state now. Answers `Waiting`,
    /// or `Abort` under wait-die; with [`GateOpens::WhenReady`] also
    /// `Granted` when it is ready on arrival. The transaction must not be
    /// protected ([`LockTable::protect`]) while the request is gated; a
    /// protected transaction's request is acquired as by
    /// [`LockTable::acquire`].
    pub fn acquire_gated(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        opens: GateOpens,
        now: Instant,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        let gating = match opens {
            GateOpens::OnUngate => Gating::Held,
            GateOpens::WhenReady => Gating::OpenWhenReady,
        };
        self.acquire_as(txn, target, mode, now, gating, wakeups)
    }

    fn acquire_as(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        now: Instant,
        gating: Gating,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        self.stats.acquires += 1;
        if self.txns.get(&txn).is_some_and(|s| s.releasing) {
            return Err(Error::TxnState(format!(
                "{txn} is releasing its locks at this partition and cannot acquire {mode} on {}",
                describe(target)
            )));
        }
        // A protected transaction's request is never gated (it passes them).
        let gated = gating != Gating::None && !is_protected(&self.txns, txn);
        let kind = Kind::of(&self.txns, txn, gated, false);
        let (sk, local) = split(target);
        let space = self.spaces.entry(sk).or_default();
        if matches!(local, Local::Range(..)) {
            space.ensure_ordered();
        }
        // One pass over the overlapping entries: is it covered, is it an
        // upgrade, which holders and queued requests make it wait, is
        // there a gate.
        let v = View {
            compat: &*self.compat,
            txns: &self.txns,
        };
        let mut covered = false;
        let mut upgrade = false;
        let mut gate = false;
        let mut blockers: SmallVec<[TxnId; 4]> = SmallVec::new();
        let mut queued: SmallVec<[(Order, TxnId); 4]> = SmallVec::new();
        let me = Request {
            txn,
            t: local,
            mode,
            before: GATED_ONLY,
            kind,
        };
        space.for_each_overlapping_exact(local, |e, exact| {
            for h in &e.holders {
                if h.txn == txn {
                    upgrade = true;
                    covered |= exact && h.mode.covers(mode);
                } else if v.holder_blocks(&me, h) && !blockers.contains(&h.txn) {
                    blockers.push(h.txn);
                }
            }
            for q in &e.queue {
                if v.queued_blocks(&me, q) {
                    queued.push((q.order(), q.txn));
                }
                gate |= q.gated && q.txn != txn;
            }
        });
        // Upgrades queue ahead of every fresh request, gated ones too.
        let behind_gate = gate && kind == Kind::Plain && !upgrade;
        if covered {
            self.stats.already_held += 1;
            return Ok(Acquire::Granted { newly: false });
        }
        let ticket = Ticket(self.next_ticket);
        let ord = order(upgrade, ticket);
        for (o, t) in queued {
            if o < ord && !blockers.contains(&t) {
                blockers.push(t);
            }
        }

        if blockers.is_empty() && !gated {
            self.add_holder(txn, target, mode);
            self.stats.granted_immediately += 1;
            if (upgrade || self.gated > 0) && self.config.policy == DeadlockPolicy::WaitDie {
                let past = if upgrade { ord } else { GATED_ONLY };
                self.kill_younger_bypassed(txn, target, mode, (past, true), wakeups);
            }
            return Ok(Acquire::Granted { newly: true });
        }
        if blockers.is_empty() && gating == Gating::OpenWhenReady {
            // Ready on arrival, its gate opened: granted as `grant_waiter`
            // grants an opened request.
            self.txns.entry(txn).or_default().gate_granted = true;
            self.add_holder(txn, target, mode);
            self.stats.granted_immediately += 1;
            if self.gated > 0 && self.config.policy == DeadlockPolicy::WaitDie {
                self.kill_younger_bypassed(txn, target, mode, (GATED_ONLY, true), wakeups);
            }
            return Ok(Acquire::Granted { newly: true });
        }

        if self.config.policy == DeadlockPolicy::WaitDie
            && blockers.iter().any(|&b| outranks(&self.txns, b, txn))
        {
            self.stats.aborts_wait_die += 1;
            return Ok(Acquire::Abort(AbortCause::WaitDie));
        }
        let queue_len = space.entry(local).map_or(0, |e| e.queue.len());
        if queue_len >= self.config.max_waiters_per_key {
            self.stats.bound_errors += 1;
            return Err(Error::Bound(format!(
                "{queue_len} requests already wait on {} (max_waiters_per_key); {txn} cannot queue",
                describe(target)
            )));
        }

        self.next_ticket += 1;
        let entry = space.entry_or_insert(local);
        let pos = entry
            .queue
            .iter()
            .position(|q| q.order() > ord)
            .unwrap_or(entry.queue.len());
        let ready = gated && blockers.is_empty();
        entry.queue.insert(
            pos,
            Queued {
                ticket,
                txn,
                mode,
                upgrade,
                gated,
                ready,
                opened: false,
                behind_gate,
            },
        );
        self.waits.insert(
            ticket,
            Wait {
                txn,
                target: target.clone(),
                mode,
                upgrade,
                gated,
                opened: false,
                since: now,
            },
        );
        self.txns.entry(txn).or_default().waiting.push(ticket);
        self.stats.waits += 1;
        if gated {
            self.gated += 1;
            if ready {
                self.gated_ready += 1;
            }
            self.gate_changes.push((txn, ticket, ready));
        } else if upgrade {
            // Queued ahead of fresh requests: a ready gated one behind it
            // may now have to wait for it.
            self.unready_behind(txn, target, mode, Some(ord));
        }

        let answer = match self.config.policy {
            DeadlockPolicy::WaitDie => {
                if upgrade {
                    self.kill_younger_bypassed(txn, target, mode, (ord, false), wakeups);
                }
                Acquire::Waiting(ticket)
            }
            DeadlockPolicy::Detect => self.resolve_deadlocks(txn, ticket, wakeups),
            DeadlockPolicy::TimeoutOnly => Acquire::Waiting(ticket),
        };
        if matches!(answer, Acquire::Waiting(_)) {
            // Its edges may close a cycle through another partition.
            self.graph_changes += 1;
        }
        Ok(answer)
    }

    /// Releases the locks of `txn` on exactly `target` with access `access`
    /// (every class), e.g. a short read lock. If a release-order dependency
    /// holds the lock back, the release happens when the dependency is
    /// released. Releasing something not held is a no-op.
    pub fn release(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Access,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        if st.is_blocked(target) {
            if !st.pending.iter().any(|(t, a)| t == target && *a == access) {
                st.pending.push((target.clone(), access));
                self.stats.deferred_releases += 1;
            }
            return;
        }
        self.release_single_now(txn, target, access, wakeups);
        self.drain_worklist(wakeups);
        self.maybe_drop_txn(txn);
    }

    /// Ends `txn` at this partition: cancels its waits and releases every
    /// lock it holds. Locks held back by release-order dependencies stay held
    /// until those dependencies are released; then the answer is `Deferred`
    /// and a `Wakeup::Released { txn }` follows. Calling it again while
    /// deferred is a no-op answering `Deferred`.
    pub fn release_all(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> ReleaseOutcome {
        let Some(st) = self.txns.get_mut(&txn) else {
            return ReleaseOutcome::Done;
        };
        if st.releasing {
            return ReleaseOutcome::Deferred;
        }
        st.releasing = true;
        st.pending.clear();
        let waiting = std::mem::take(&mut st.waiting);
        for ticket in waiting {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.regrant(&w.target, wakeups);
            }
        }
        self.try_complete(txn, wakeups);
        self.drain_worklist(wakeups);
        match self.txns.get_mut(&txn) {
            Some(st) => {
                st.deferred = true;
                self.stats.deferred_releases += 1;
                ReleaseOutcome::Deferred
            }
            None => ReleaseOutcome::Done,
        }
    }

    /// Changes the class of every lock `txn` holds in class `from` to `to`
    /// (Salt: alkaline to saline when the subtransaction commits). Waiters
    /// the new modes admit are granted.
    pub fn downgrade_all(
        &mut self,
        txn: TxnId,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        let targets = if from == LockClass::Alkaline {
            std::mem::take(&mut st.alkaline)
        } else {
            st.held.clone()
        };
        for target in &targets {
            self.downgrade(txn, target, from, to, wakeups);
        }
        if from == LockClass::Alkaline {
            // Reuse the buffer unless new alkaline grants arrived meanwhile.
            if let Some(st) = self.txns.get_mut(&txn) {
                if st.alkaline.is_empty() {
                    let mut targets = targets;
                    targets.clear();
                    st.alkaline = targets;
                }
            }
        }
    }

    /// Releases every lock `txn` holds in `class`, keeping its locks of
    /// other classes (Callas: a rolled-back piece's member locks go, the
    /// nexus locks of the transaction's committed pieces stay). Locks held
    /// back by release-order dependencies stay. Returns the targets `txn`
    /// no longer holds at all.
    pub fn release_class(
        &mut self,
        txn: TxnId,
        class: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) -> Vec<LockTarget> {
        let Some(st) = self.txns.get(&txn) else {
            return Vec::new();
        };
        let targets: Vec<LockTarget> = st
            .held
            .iter()
            .filter(|t| !st.is_blocked(t))
            .cloned()
            .collect();
        let mut gone = Vec::new();
        for target in targets {
            let removed = self.remove_holders_where(txn, &target, |m| m.class == class);
            if self.settle_removal(txn, &target, removed, wakeups) {
                gone.push(target);
            }
        }
        self.drain_worklist(wakeups);
        self.maybe_drop_txn(txn);
        gone
    }

    /// Single-target variant of [`LockTable::downgrade_all`].
    pub fn downgrade(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        self.downgrade_access(txn, target, None, from, to, wakeups);
    }

    /// [`LockTable::downgrade`] of the locks with exactly `access` only
    /// (every access with `None`), e.g. a statement's short read lock whose
    /// transaction also holds a write on the row.
    pub fn downgrade_access(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Option<Access>,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let (sk, local) = split(target);
        let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) else {
            return;
        };
        let mut changed = false;
        for h in e.holders.iter_mut() {
            if h.txn == txn && h.mode.class == from && access.is_none_or(|a| h.mode.access == a) {
                h.mode.class = to;
                changed = true;
            }
        }
        if !changed {
            return;
        }
        for mode in e.merge_modes_of(txn) {
            debug_assert!(
                !self.conflicts_with_holders(txn, target, mode),
                "downgrade of {txn} on {target:?} to {mode} conflicts with another holder"
            );
        }
        self.regrant(target, wakeups);
    }

    /// Records that `txn`'s lock on `target` (every lock of `txn`, if None)
    /// cannot be released before `on` releases its lock on `on_target`
    /// (every lock it holds here, if None). A dependency that is already
    /// satisfied (`on` does not hold what it names) is not recorded.
    /// Dependencies must not form cycles: the caller derives them from
    /// real-time order (Salt's read-after-write and write-after-read rules,
    /// Callas' group order), which cannot.
    pub fn add_release_dependency(
        &mut self,
        txn: TxnId,
        target: Option<&LockTarget>,
        on: TxnId,
        on_target: Option<&LockTarget>,
    ) -> Result<(), Error> {
        if txn == on {
            match (target, on_target) {
                (Some(a), Some(b)) if a != b => {}
                _ => {
                    return Err(Error::Internal(format!(
                        "{txn}: a release dependency of a transaction on itself must name two different targets"
                    )))
                }
            }
        }
        let satisfied = match self.txns.get(&on) {
            None => true,
            Some(s) => match on_target {
                Some(t) => !s.held.contains(t),
                None => s.held.is_empty(),
            },
        };
        if satisfied {
            return Ok(());
        }
        let dep = Dep {
            target: target.cloned(),
            on,
            on_target: on_target.cloned(),
        };
        let st = self.txns.entry(txn).or_default();
        if st.deps.contains(&dep) {
            return Ok(());
        }
        if st.deps.len() >= self.config.max_deps_per_txn {
            self.stats.bound_errors += 1;
            return Err(Error::Bound(format!(
                "{txn} already has {} release dependencies (max_deps_per_txn)",
                st.deps.len()
            )));
        }
        st.deps.push(dep);
        self.graph_changes += 1;
        if let Some(on_state) = self.txns.get_mut(&on) {
            if !on_state.dependants.contains(&txn) {
                on_state.dependants.push(txn);
            }
        }
        Ok(())
    }

    /// Salt: moves `txn`'s saline locks on exactly `target` to `alias`, a
    /// holder of its own whose parent is `txn`, with the release-order
    /// dependencies that lock carries and those others carry on it. An
    /// operation of a later subtransaction on a row an earlier one locked
    /// then holds a lock of its own, released at its own stage: the seed's
    /// rules are per operation (seed 000 section 3.3; the prototype queues
    /// one lock per operation, section 3.4.3), and one lock per row moved
    /// the earlier operation's release behind the later one's, behind
    /// dependencies other BASE transactions depended on in turn, closing
    /// release cycles among finished transactions. `alias` keeps `txn`'s
    /// protection and waits, for the deadlock searches, for `txn`. Returns
    /// whether `txn` held a saline lock there to move.
    pub fn fork_hold(&mut self, txn: TxnId, target: &LockTarget, alias: TxnId) -> bool {
        debug_assert_ne!(txn, alias);
        let (sk, local) = split(target);
        let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) else {
            return false;
        };
        let mut moved = false;
        let mut still_holds = false;
        for h in e.holders.iter_mut().filter(|h| h.txn == txn) {
            if h.mode.class == LockClass::Saline {
                h.txn = alias;
                moved = true;
            } else {
                still_holds = true;
            }
        }
        if !moved {
            return false;
        }
        // Two saline holders of the same mode under `alias` (a second fork
        // of the same row into the same alias) are one.
        e.merge_modes_of(alias);
        let Some(st) = self.txns.get_mut(&txn) else {
            return true;
        };
        if !still_holds {
            st.held.retain(|t| t != target);
        }
        let (protected, gate_granted) = (st.protected, st.gate_granted);
        let mut carried = Vec::new();
        st.deps.retain(|d| {
            let mine = d.target.as_ref() == Some(target);
            if mine {
                carried.push(d.clone());
            }
            !mine
        });
        let dependants = st.dependants.clone();
        if !st.children.contains(&alias) {
            st.children.push(alias);
        }
        let a = self.txns.entry(alias).or_default();
        a.parent = Some(txn);
        a.protected |= protected;
        a.gate_granted |= gate_granted;
        if !a.held.contains(target) {
            a.held.push(target.clone());
        }
        for d in &carried {
            if !a.deps.contains(d) {
                a.deps.push(d.clone());
            }
        }
        for d in &carried {
            if let Some(on) = self.txns.get_mut(&d.on) {
                if !on.dependants.contains(&alias) {
                    on.dependants.push(alias);
                }
            }
        }
        // Those who depend on the lock now depend on the alias's.
        for d in dependants {
            let Some(ds) = self.txns.get_mut(&d) else {
                continue;
            };
            let mut repointed = false;
            for dep in ds.deps.iter_mut() {
                if dep.on == txn && dep.on_target.as_ref() == Some(target) {
                    dep.on = alias;
                    repointed = true;
                }
            }
            if repointed {
                let mut i = 0;
                while i < ds.deps.len() {
                    if ds.deps[..i].contains(&ds.deps[i]) {
                        ds.deps.remove(i);
                    } else {
                        i += 1;
                    }
                }
                let a = self.txns.get_mut(&alias).expect("alias state");
                if !a.dependants.contains(&d) {
                    a.dependants.push(d);
                }
            }
        }
        true
    }

    /// Salt: `txn` has begun releasing its locks in stages, each stage only
    /// after the one before it went (the coordinator sends them in order).
    /// From now on a request waiting for any of its locks also waits for
    /// every transaction its release-order dependencies name, so the
    /// detector sees the cycles that run through a later stage (an ACID
    /// reader queued on a row of the last stage, ahead of the writer the
    /// first stage waits for). Those edges are new: every cycle through
    /// `txn` is looked for, and broken, at once.
    pub fn begin_staged_release(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        if st.staged {
            return;
        }
        st.staged = true;
        if st.deps.is_empty() || self.config.policy != DeadlockPolicy::Detect {
            return;
        }
        self.graph_changes += 1;
        // Every cycle the new edges close runs through `txn`.
        self.break_cycles_through(txn, wakeups);
    }

    /// Breaks every wait-for cycle through `start`: by a queue pass where
    /// a member can pass, else by aborting its youngest waiting member.
    fn break_cycles_through(&mut self, start: TxnId, wakeups: &mut Vec<Wakeup>) {
        self.break_cycles(|t| t.find_cycle(start), wakeups);
    }

    /// Breaks every cycle `find` finds, one at a time (each break changes
    /// the graph, so `find` looks again): by a queue pass where a member
    /// can pass, else by aborting its youngest waiting member.
    fn break_cycles(
        &mut self,
        mut find: impl FnMut(&mut Self) -> Option<Vec<TxnId>>,
        wakeups: &mut Vec<Wakeup>,
    ) {
        while let Some(cycle) = find(self) {
            if self.bypass_queue_in(&cycle, wakeups) {
                continue;
            }
            let Some(victim) = self.youngest_waiting(&cycle) else {
                break;
            };
            self.abort_waits_of(victim, wakeups);
        }
    }

    /// Breaks a deadlock without an abort where it can: a member of `cycle`
    /// whose request conflicts with no holder waits only because FIFO
    /// queued it behind a conflicting request, and that request waits, in
    /// turn, for it (through holders and release-order dependencies). It
    /// is granted ahead of the queue. The request it passes loses nothing:
    /// it could not be granted before the bypassing one progressed. (Salt:
    /// an ACID reader queued on a district row behind saline writers,
    /// ahead of the payment whose district update those writers' releases
    /// wait for.) Returns whether it granted one; the grant is in
    /// `wakeups`, or, for the caller's own request, gone from the waits.
    fn bypass_queue_in(&mut self, cycle: &[TxnId], wakeups: &mut Vec<Wakeup>) -> bool {
        cycle.iter().any(|m| self.pass_queue(*m, wakeups))
    }

    /// Grants `txn`'s first waiting request that conflicts with no holder
    /// ahead of the queue; returns whether there was one.
    fn pass_queue(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(st) = self.txns.get(&txn) else {
            return false;
        };
        let free = st
            .waiting
            .iter()
            .copied()
            .find(|ticket| self.blocked_only_by_queue(*ticket));
        let Some(ticket) = free else {
            return false;
        };
        self.stats.queue_bypasses += 1;
        self.grant_waiter(ticket, wakeups);
        true
    }

    /// This table's part of the cluster-wide wait-for graph, for the
    /// detector of cycles that span partitions (each table sees only its
    /// own). Appends to `waiting` every transaction whose every waiting
    /// request here began at or before `began_by`, with whether each of
    /// those requests conflicts with no holder (it could pass the queue),
    /// and to `edges` its wait-for edges (holders, requests queued ahead,
    /// release-order dependencies behind held-back locks); appends the
    /// edges of transactions releasing in stages, or all at once, to the
    /// transactions their release-order dependencies name.
    ///
    /// The detector passes the moment its look began, so every wait it
    /// combines, from every partition, existed at that one moment (a wait
    /// is one unbroken interval): a cycle made of them was a cycle then,
    /// not a mix of waits that never overlapped. A wait that began later
    /// is left for the next look; returns whether one was.
    pub fn wait_for_graph(
        &self,
        began_by: Instant,
        edges: &mut Vec<(TxnId, TxnId)>,
        waiting: &mut Vec<(TxnId, bool)>,
    ) -> bool {
        let mut left_out = false;
        for (&txn, st) in self.txns.iter() {
            let counted = !st.waiting.is_empty()
                && st
                    .waiting
                    .iter()
                    .all(|t| self.waits.get(t).is_some_and(|w| w.since <= began_by));
            left_out |= !counted && !st.waiting.is_empty();
            if counted {
                // Passable only if every wait of it here can pass: a pass
                // that leaves it waiting for something else here breaks
                // nothing (it then also holds what it passed for).
                let passable = st.waiting.iter().all(|t| self.blocked_only_by_queue(*t));
                waiting.push((txn, passable));
            }
            if counted
                || st.parent.is_some()
                || ((st.staged || st.releasing) && !(st.deps.is_empty() && st.children.is_empty()))
            {
                edges.extend(self.wait_for_edges(txn).into_iter().map(|to| (txn, to)));
            }
        }
        left_out
    }

    /// Grows whenever something happened here that may have added a
    /// wait-for edge this table's own search does not resolve: a request
    /// left waiting (its cycle, if any, runs through another partition),
    /// a release-order dependency recorded, a staged release begun. The
    /// partition compares it with the value at the detector's last look to
    /// tell the detector, once, that a new look may find something.
    pub fn wait_for_changes(&self) -> u64 {
        self.graph_changes
    }

    /// Breaks a cycle that spans partitions at `victim`, chosen by a
    /// cluster-wide detector: with `pass`, grants its request that
    /// conflicts with no holder ahead of the queue (as
    /// [`LockTable::acquire`]'s detector does locally), if it still has
    /// one; otherwise aborts its waiting requests. Returns whether it
    /// changed anything.
    pub fn break_deadlock(&mut self, victim: TxnId, pass: bool, wakeups: &mut Vec<Wakeup>) -> bool {
        if self.txns.get(&victim).is_none_or(|s| s.waiting.is_empty()) {
            return false;
        }
        self.stats.detector_breaks += 1;
        if !(pass && self.pass_queue(victim, wakeups)) {
            self.abort_waits_of(victim, wakeups);
        }
        true
    }

    /// Whether the waiting request `ticket` conflicts with no holder (it
    /// waits only because FIFO queued it behind a conflicting request).
    /// Never for a gated request, which waits for `ungate` too.
    fn blocked_only_by_queue(&self, ticket: Ticket) -> bool {
        let Some(w) = self.waits.get(&ticket).filter(|w| !w.gated) else {
            return false;
        };
        let (sk, local) = split(&w.target);
        let Some(space) = self.spaces.get(&sk) else {
            return false;
        };
        let mut ok = true;
        space.for_each_overlapping(local, |e| {
            ok &= e
                .holders
                .iter()
                .all(|h| h.txn == w.txn || self.compat.compatible(h.mode, w.mode));
        });
        ok
    }

    /// Aborts every waiting request of `victim` as a deadlock victim.
    fn abort_waits_of(&mut self, victim: TxnId, wakeups: &mut Vec<Wakeup>) {
        let waits: SmallVec<[Ticket; 1]> = self
            .txns
            .get(&victim)
            .map(|s| s.waiting.clone())
            .unwrap_or_default();
        self.stats.count_abort(AbortCause::Deadlock);
        for t in waits {
            self.abort_wait(t, AbortCause::Deadlock, wakeups);
        }
    }

    /// Marks `txn` as unable to roll back any more (an accepted Salt BASE
    /// transaction, a chopped Callas transaction whose first writing piece
    /// committed): it ranks above every unprotected transaction, so a
    /// victim is never chosen from it when another member of a cycle can
    /// go, and under wait-die it never dies while whoever would wait for
    /// it does. Requests already waiting here for its locks (or queued
    /// behind a request of its own) were older than it and may wait no
    /// longer: under wait-die they abort now (else
    /// the protected transaction, waiting for one of them elsewhere, would
    /// close a cycle no one breaks). A second call is a no-op. The
    /// protection lasts until the transaction's
    /// [`LockTable::release_all`] here.
    pub fn protect(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let st = self.txns.entry(txn).or_default();
        if st.protected {
            return;
        }
        debug_assert!(
            !st.waiting
                .iter()
                .any(|t| self.waits.get(t).is_some_and(|w| w.gated)),
            "{txn} protected while a request of its own is gated"
        );
        st.protected = true;
        if self.gated > 0 {
            // Its waiting requests now pass gated ones, and its locks no
            // longer keep gated ones from being ready.
            let targets: SmallVec<[LockTarget; 2]> = st
                .waiting
                .iter()
                .filter_map(|t| self.waits.get(t).map(|w| w.target.clone()))
                .chain(st.held.iter().cloned())
                .collect();
            for t in &targets {
                self.regrant(t, wakeups);
            }
        }
        if self.config.policy != DeadlockPolicy::WaitDie {
            return;
        }
        let Some(st) = self.txns.get(&txn) else {
            return;
        };
        let compat = &*self.compat;
        let mut victims: SmallVec<[Ticket; 4]> = SmallVec::new();
        for target in &st.held {
            let (sk, local) = split(target);
            let Some(space) = self.spaces.get(&sk) else {
                continue;
            };
            // Its modes on exactly `target`, against the requests queued
            // on every overlapping target (a range waiter too).
            let Some(held) = space.entry(local) else {
                continue;
            };
            let mine: SmallVec<[Mode; 2]> = held
                .holders
                .iter()
                .filter(|h| h.txn == txn)
                .map(|h| h.mode)
                .collect();
            space.for_each_overlapping(local, |e| {
                for q in &e.queue {
                    if q.txn != txn && mine.iter().any(|&m| !compat.compatible(m, q.mode)) {
                        victims.push(q.ticket);
                    }
                }
            });
        }
        victims.sort_unstable();
        victims.dedup();
        victims.retain(|t| {
            self.waits
                .get(t)
                .is_some_and(|w| outranks(&self.txns, txn, w.txn))
        });
        let queued: SmallVec<[(Ticket, LockTarget, Mode, Order); 1]> = st
            .waiting
            .iter()
            .filter_map(|t| {
                let w = self.waits.get(t)?;
                Some((*t, w.target.clone(), w.mode, order(w.upgrade, *t)))
            })
            .collect();
        for ticket in victims {
            self.stats.count_abort(AbortCause::WaitDie);
            self.abort_wait(ticket, AbortCause::WaitDie, wakeups);
        }
        // So do those queued behind a request of its own.
        for (ticket, target, mode, ord) in queued {
            if self.waits.contains_key(&ticket) {
                self.kill_younger_bypassed(txn, &target, mode, (ord, false), wakeups);
            }
        }
    }

    /// Whether `txn` is protected here ([`LockTable::protect`]).
    pub fn is_protected(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.protected)
    }

    /// Removes every waiting request of `txn` without counting an abort (the
    /// coordinator aborted it elsewhere). Its held locks stay held.
    pub fn cancel_waits(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        let waiting = std::mem::take(&mut st.waiting);
        for ticket in waiting {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.regrant(&w.target, wakeups);
            }
        }
        self.maybe_drop_txn(txn);
    }

    /// Lets the gated request `ticket` ([`LockTable::acquire_gated`]) be
    /// granted: from now on it is an ordinary request in its place in the
    /// queue, granted at once if nothing blocks it (a `Granted` wakeup).
    /// Returns whether `ticket` was a gated request still waiting.
    pub fn ungate(&mut self, ticket: Ticket, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(w) = self.waits.get_mut(&ticket).filter(|w| w.gated) else {
            return false;
        };
        w.gated = false;
        w.opened = true;
        let target = w.target.clone();
        let (sk, local) = split(&target);
        if let Some(q) = queued_mut(&mut self.spaces, &target, ticket) {
            self.gated -= 1;
            self.gated_ready -= usize::from(q.ready);
            q.gated = false;
            q.ready = false;
            q.opened = true;
        }
        self.reopen_gate(&target, wakeups);
        // It blocks differently now: the requests that passed it while
        // gated no longer do (a ready gated one behind it, too), and
        // those it held back in a mode it shares no longer wait for it.
        // (Under wait-die, a request the opened gate let be seen again
        // may have made it die.)
        let Some((txn, mode, upgrade)) =
            self.waits.get(&ticket).map(|w| (w.txn, w.mode, w.upgrade))
        else {
            self.regrant(&target, wakeups);
            return true;
        };
        if self.gated_ready > 0 {
            self.unready_behind(txn, &target, mode, Some(order(upgrade, ticket)));
        }
        let free = self.spaces.get(&sk).is_some_and(|space| {
            let w = &self.waits[&ticket];
            let r = Request {
                txn: w.txn,
                t: local,
                mode: w.mode,
                before: order(w.upgrade, ticket),
                kind: Kind::Opened,
            };
            !is_blocked(space, self.view(), r)
        });
        if free {
            self.grant_waiter(ticket, wakeups);
        }
        self.regrant(&target, wakeups);
        true
    }

    /// Whether the gated request `ticket` could be granted now (it is
    /// ready); false for any other ticket.
    pub fn is_ready(&self, ticket: Ticket) -> bool {
        let Some(w) = self.waits.get(&ticket).filter(|w| w.gated) else {
            return false;
        };
        queued(&self.spaces, &w.target, ticket).is_some_and(|q| q.ready)
    }

    /// Moves to `out` the readiness changes of gated requests since the
    /// last call, in order: `(txn, ticket, ready)`.
    pub fn take_gate_changes(&mut self, out: &mut Vec<(TxnId, Ticket, bool)>) {
        out.append(&mut self.gate_changes);
    }

    /// A gated request on `target` opened (ungated or gone): the requests
    /// queued behind it that no other gate holds back stop waiting for a
    /// gate. The caller regrants `target`.
    fn reopen_gate(&mut self, target: &LockTarget, wakeups: &mut Vec<Wakeup>) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut behind: SmallVec<[(Ticket, Order, TxnId); 4]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            behind.extend(
                e.queue
                    .iter()
                    .filter(|q| q.behind_gate)
                    .map(|q| (q.ticket, q.order(), q.txn)),
            );
        });
        for (ticket, ord, txn) in behind {
            let Some(w) = self.waits.get(&ticket) else {
                continue;
            };
            let (wsk, wl) = split(&w.target);
            let Some(space) = self.spaces.get(&wsk) else {
                continue;
            };
            let mut gate = false;
            space.for_each_overlapping(wl, |e| {
                gate |= e
                    .queue
                    .iter()
                    .any(|q| q.gated && q.txn != txn && q.order() < ord);
            });
            if gate {
                continue;
            }
            if let Some(q) = queued_mut(&mut self.spaces, &w.target, ticket) {
                q.behind_gate = false;
            }
            // Seen again, it may make a ready gated request behind it wait,
            // and under wait-die, younger ones behind it die.
            let (target, mode) = (w.target.clone(), w.mode);
            if self.gated_ready > 0 {
                self.unready_behind(txn, &target, mode, Some(ord));
            }
            if self.config.policy == DeadlockPolicy::WaitDie {
                self.kill_younger_bypassed(txn, &target, mode, (ord, false), wakeups);
            }
        }
    }

    /// Records whether the gated request `ticket` is ready, reporting a
    /// change.
    fn set_ready(&mut self, ticket: Ticket, ready: bool) {
        let Some(w) = self.waits.get(&ticket) else {
            return;
        };
        let Some(q) = queued_mut(&mut self.spaces, &w.target, ticket) else {
            return;
        };
        if q.gated && q.ready != ready {
            q.ready = ready;
            if ready {
                self.gated_ready += 1;
            } else {
                self.gated_ready -= 1;
            }
            self.gate_changes.push((q.txn, ticket, ready));
        }
    }

    /// A lock of `mode` on `target` was just granted to `txn` (`ahead:
    /// None`), or queued at `ahead`: the ready gated requests it now
    /// blocks (overlapping, conflicting, and queued behind it) are ready
    /// no more.
    fn unready_behind(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        ahead: Option<Order>,
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let compat = &*self.compat;
        // A holder the gated request does not share with: conflicting, or
        // unprotected (it may upgrade).
        let unshared = ahead.is_none() && may_upgrade(&self.txns, txn);
        let mut blocked: SmallVec<[Ticket; 2]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            for q in &e.queue {
                if q.gated
                    && q.ready
                    && q.txn != txn
                    && ahead.is_none_or(|o| o < q.order())
                    && (unshared || !compat.compatible(mode, q.mode))
                {
                    blocked.push(q.ticket);
                }
            }
        });
        for ticket in blocked {
            self.set_ready(ticket, false);
        }
    }

    /// Aborts (`LockTimeout`) every request that has waited longer than
    /// `wait_timeout` at `now`, then grants what their removal admits.
    /// Expired requests are removed before any grant, so none of them is
    /// granted by this call.
    pub fn expire(&mut self, now: Instant, wakeups: &mut Vec<Wakeup>) {
        let timeout = self.config.wait_timeout;
        let mut expired: Vec<Ticket> = self
            .waits
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.since) > timeout)
            .map(|(t, _)| *t)
            .collect();
        if expired.is_empty() {
            return;
        }
        expired.sort_unstable();
        let mut targets = Vec::with_capacity(expired.len());
        for ticket in expired {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.stats.count_abort(AbortCause::LockTimeout);
                wakeups.push(Wakeup::Aborted {
                    txn: w.txn,
                    ticket,
                    cause: AbortCause::LockTimeout,
                });
                self.maybe_drop_txn(w.txn);
                targets.push(w.target);
            }
        }
        for t in &targets {
            self.regrant(t, wakeups);
        }
    }

    // -- introspection -----------------------------------------------------

    /// Granted locks on exactly `target`, in grant order.
    pub fn holders(&self, target: &LockTarget) -> Vec<(TxnId, Mode)> {
        let (sk, local) = split(target);
        self.spaces
            .get(&sk)
            .and_then(|s| s.entry(local))
            .map(|e| e.holders.iter().map(|h| (h.txn, h.mode)).collect())
            .unwrap_or_default()
    }

    /// Calls `f(holder, point)` for every holder other than `except` that
    /// holds exactly `mode` on a point lock covered by `target`: `target`
    /// itself if it is a point, every locked key inside it if it is a range
    /// (Salt: the rows a range read observed, whose BASE writers it then
    /// depends on, as a point read of each would).
    pub fn for_each_point_holder_with(
        &self,
        target: &LockTarget,
        mode: Mode,
        except: TxnId,
        mut f: impl FnMut(TxnId, LockTarget),
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut visit = |key: &Key, e: &Entry| {
            for h in e.holders.iter() {
                if h.txn != except && h.mode == mode {
                    f(
                        h.txn,
                        LockTarget::Point {
                            table: sk.0,
                            index: sk.1,
                            key: key.clone(),
                        },
                    );
                }
            }
        };
        match local {
            Local::Point(k) => {
                if let Some(e) = space.points.get(k) {
                    visit(k, e);
                }
            }
            Local::Range(lo, hi) => {
                if let (Some(ordered), true) = (&space.ordered, interval_nonempty(lo, hi)) {
                    for k in ordered.range::<Key, _>((lo.as_ref(), hi.as_ref())) {
                        if let Some(e) = space.points.get(k) {
                            visit(k, e);
                        }
                    }
                }
            }
        }
    }

    /// Whether a release-order dependency still holds back `txn`'s lock on
    /// `target` (whether or not a release of it was asked for).
    pub fn release_blocked(&self, txn: TxnId, target: &LockTarget) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.is_blocked(target))
    }

    /// Whether `txn` holds any lock on exactly `target`.
    pub fn holds(&self, txn: TxnId, target: &LockTarget) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.held.contains(target))
    }

    /// Moves into `out` the transactions some of whose release-order
    /// dependencies were satisfied, or whose held-back single releases
    /// (`release` answered while a dependency held the lock back) happened,
    /// since the last call, so a caller waiting for them looks only at
    /// those.
    pub fn take_released_held_back(&mut self, out: &mut Vec<TxnId>) {
        out.append(&mut self.held_back_progress);
    }

    /// Waiting requests on exactly `target`, in queue order.
    pub fn waiters(&self, target: &LockTarget) -> Vec<(Ticket, TxnId, Mode)> {
        let (sk, local) = split(target);
        self.spaces
            .get(&sk)
            .and_then(|s| s.entry(local))
            .map(|e| e.queue.iter().map(|q| (q.ticket, q.txn, q.mode)).collect())
            .unwrap_or_default()
    }

    /// Number of targets (point keys and ranges) with at least one waiter.
    pub fn keys_with_waiters(&self) -> usize {
        self.spaces
            .values()
            .map(|s| {
                s.points.values().filter(|e| !e.queue.is_empty()).count()
                    + s.ranges
                        .iter()
                        .filter(|r| !r.entry.queue.is_empty())
                        .count()
            })
            .sum()
    }

    /// Number of waiting requests.
    pub fn waiting_requests(&self) -> usize {
        self.waits.len()
    }

    pub fn is_waiting(&self, ticket: Ticket) -> bool {
        self.waits.contains_key(&ticket)
    }

    /// Transactions with any state here (locks, waits, dependencies).
    pub fn txn_count(&self) -> usize {
        self.txns.len()
    }

    /// Whether the table keeps any state for `txn` (a lock, a wait, a
    /// protection).
    pub fn knows(&self, txn: TxnId) -> bool {
        self.txns.contains_key(&txn)
    }

    /// Those transactions' ids (O(transactions): not for the hot path).
    pub fn txn_ids(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.txns.keys().copied()
    }

    /// Checks every structural invariant; for tests and debug assertions.
    /// O(size of the table), so not for the hot path.
    pub fn check_invariants(&self) -> Result<(), String> {
        let compat = &*self.compat;
        let mut queued = 0usize;
        let (mut gated, mut ready) = (0usize, 0usize);
        for (sk, space) in &self.spaces {
            let mut check_entry = |t: Local<'_>, e: &Entry, what: String| -> Result<(), String> {
                for w in e.queue.windows(2) {
                    if w[0].order() >= w[1].order() {
                        return Err(format!("{what}: queue out of order"));
                    }
                }
                for h in &e.holders {
                    let mut bad = None;
                    space.for_each_overlapping(t, |other| {
                        for o in &other.holders {
                            if o.txn != h.txn && !compat.compatible(o.mode, h.mode) {
                                bad = Some(o.txn);
                            }
                        }
                    });
                    if let Some(o) = bad {
                        return Err(format!(
                            "{what}: {} {} granted beside conflicting {o}",
                            h.txn, h.mode
                        ));
                    }
                    let held = self.txns.get(&h.txn).is_some_and(|s| {
                        s.held.iter().any(|ht| {
                            let (hsk, hl) = split(ht);
                            hsk == *sk
                                && match (hl, t) {
                                    (Local::Point(a), Local::Point(b)) => a == b,
                                    (Local::Range(a, b), Local::Range(c, d)) => a == c && b == d,
                                    _ => false,
                                }
                        })
                    });
                    if !held {
                        return Err(format!("{what}: {} missing from its held list", h.txn));
                    }
                }
                for q in &e.queue {
                    queued += 1;
                    let r = Request {
                        txn: q.txn,
                        t,
                        mode: q.mode,
                        before: q.order(),
                        kind: Kind::of(&self.txns, q.txn, q.gated, q.opened),
                    };
                    let mut blockers = SmallVec::new();
                    collect_blockers(space, self.view(), r, &mut blockers);
                    if q.behind_gate {
                        let mut gate = false;
                        space.for_each_overlapping(t, |o| {
                            gate |= o
                                .queue
                                .iter()
                                .any(|g| g.gated && g.txn != q.txn && g.order() < q.order());
                        });
                        if !gate {
                            return Err(format!(
                                "{what}: {} {} behind a gate that is gone",
                                q.ticket, q.txn
                            ));
                        }
                    }
                    if q.gated {
                        ready += usize::from(q.ready);
                        if q.ready != blockers.is_empty() {
                            return Err(format!(
                                "{what}: gated {} {} marked ready={} but blockers {blockers:?}",
                                q.ticket, q.txn, q.ready
                            ));
                        }
                        gated += 1;
                    } else if blockers.is_empty() {
                        return Err(format!(
                            "{what}: {} {} waits for nothing (lost wakeup)",
                            q.ticket, q.txn
                        ));
                    }
                    if !self.waits.contains_key(&q.ticket) {
                        return Err(format!("{what}: {} not in the wait index", q.ticket));
                    }
                    if self.config.policy == DeadlockPolicy::WaitDie
                        && blockers.iter().any(|&b| outranks(&self.txns, b, q.txn))
                    {
                        return Err(format!(
                            "{what}: wait-die waiter {} waits for an older txn",
                            q.txn
                        ));
                    }
                }
                if e.is_empty() {
                    return Err(format!("{what}: empty entry not pruned"));
                }
                Ok(())
            };
            for (k, e) in &space.points {
                check_entry(Local::Point(k), e, format!("{k:?}"))?;
            }
            for r in &space.ranges {
                check_entry(
                    Local::Range(&r.lo, &r.hi),
                    &r.entry,
                    fmt_range(&r.lo, &r.hi),
                )?;
            }
            if let Some(ordered) = &space.ordered {
                if ordered.len() != space.points.len()
                    || !space.points.keys().all(|k| ordered.contains(k))
                {
                    return Err("ordered key index out of sync".into());
                }
            }
        }
        if queued != self.waits.len() {
            return Err(format!(
                "{queued} queued requests but {} in the wait index",
                self.waits.len()
            ));
        }
        if (gated, ready) != (self.gated, self.gated_ready) {
            return Err(format!(
                "{gated} gated requests ({ready} ready) queued, counted {} ({})",
                self.gated, self.gated_ready
            ));
        }
        for (txn, st) in &self.txns {
            for t in &st.held {
                if !self.holders(t).iter().any(|(h, _)| h == txn) {
                    return Err(format!("{txn} lists {t:?} as held but holds nothing there"));
                }
            }
            for tk in &st.waiting {
                if self.waits.get(tk).map(|w| w.txn) != Some(*txn) {
                    return Err(format!("{txn} lists {tk} as waiting but it is not"));
                }
            }
            if st.is_idle() {
                return Err(format!(
                    "{txn} has idle state that should have been dropped"
                ));
            }
        }
        Ok(())
    }

    // -- internals -----------------------------------------------------------

    fn conflicts_with_holders(&self, txn: TxnId, target: &LockTarget, mode: Mode) -> bool {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return false;
        };
        let mut conflict = false;
        space.for_each_overlapping(local, |e| {
            conflict |= e
                .holders
                .iter()
                .any(|h| h.txn != txn && !self.compat.compatible(h.mode, mode));
        });
        conflict
    }

    fn add_holder(&mut self, txn: TxnId, target: &LockTarget, mode: Mode) {
        debug_assert!(
            !self.conflicts_with_holders(txn, target, mode),
            "granting {txn} {mode} on {target:?} beside a conflicting holder"
        );
        let (sk, local) = split(target);
        let e = self.spaces.entry(sk).or_default().entry_or_insert(local);
        let had = e.holders.iter().any(|h| h.txn == txn);
        let new_mode = !e.holders.iter().any(|h| h.txn == txn && h.mode == mode);
        if new_mode {
            e.holders.push(Holder { txn, mode });
        }
        if new_mode && self.gated_ready > 0 {
            self.unready_behind(txn, target, mode, None);
        }
        if !had || (new_mode && mode.class == LockClass::Alkaline) {
            let st = self.txns.entry(txn).or_default();
            if !had {
                st.held.push(target.clone());
            }
            if new_mode && mode.class == LockClass::Alkaline {
                st.alkaline.push(target.clone());
            }
        }
    }

    /// Under wait-die, a waiter must only ever wait for younger transactions.
    /// An upgrade that jumps ahead of fresh waiters (queued after `ord`)
    /// would make younger ones wait for it; so would any grant (`granted`)
    /// that passed gated requests or requests behind a gate, and a request
    /// behind a gate that opened, for those queued after it; those die
    /// instead. `ord` = [`GATED_ONLY`]: none but the passed ones.
    fn kill_younger_bypassed(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        (ord, granted): (Order, bool),
        wakeups: &mut Vec<Wakeup>,
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut victims: SmallVec<[Ticket; 4]> = SmallVec::new();
        let unprotected = !is_protected(&self.txns, txn);
        space.for_each_overlapping(local, |e| {
            for q in &e.queue {
                let blocked = !self.compat.compatible(mode, q.mode) || (q.gated && unprotected);
                if (q.order() > ord || (granted && (q.gated || q.behind_gate)))
                    && q.txn != txn
                    && outranks(&self.txns, txn, q.txn)
                    && blocked
                {
                    victims.push(q.ticket);
                }
            }
        });
        victims.sort_unstable();
        victims.dedup();
        for ticket in victims {
            self.stats.count_abort(AbortCause::WaitDie);
            self.abort_wait(ticket, AbortCause::WaitDie, wakeups);
        }
    }

    /// Removes a waiting request and tells its transaction to abort. The
    /// caller counts the victim (once per transaction, not per request).
    fn abort_wait(&mut self, ticket: Ticket, cause: AbortCause, wakeups: &mut Vec<Wakeup>) {
        if let Some(w) = self.remove_wait(ticket, wakeups) {
            wakeups.push(Wakeup::Aborted {
                txn: w.txn,
                ticket,
                cause,
            });
            self.maybe_drop_txn(w.txn);
            self.regrant(&w.target, wakeups);
        }
    }

    /// Runs the detector for the new wait `ticket` of `txn` until no cycle
    /// through `txn` remains. Every new wait-for edge starts or ends at the
    /// new request, so every new cycle passes through `txn`.
    fn resolve_deadlocks(
        &mut self,
        txn: TxnId,
        ticket: Ticket,
        wakeups: &mut Vec<Wakeup>,
    ) -> Acquire {
        loop {
            if !self.waits.contains_key(&ticket) {
                // A victim's removal let the request through: report it as
                // the direct answer rather than as a wakeup.
                wakeups.retain(|w| *w != Wakeup::Granted { txn, ticket });
                return Acquire::Granted { newly: true };
            }
            let Some(cycle) = self.find_cycle(txn) else {
                return Acquire::Waiting(ticket);
            };
            if self.bypass_queue_in(&cycle, wakeups) {
                continue;
            }
            // The youngest member that waits (a member held only by a
            // release-order dependency has no request to abort).
            let Some(victim) = self.youngest_waiting(&cycle) else {
                return Acquire::Waiting(ticket);
            };
            if victim == txn {
                if let Some(w) = self.remove_wait(ticket, wakeups) {
                    self.stats.count_abort(AbortCause::Deadlock);
                    self.maybe_drop_txn(txn);
                    self.regrant(&w.target, wakeups);
                }
                return Acquire::Abort(AbortCause::Deadlock);
            }
            let victim_waits: SmallVec<[Ticket; 1]> = self
                .txns
                .get(&victim)
                .map(|s| s.waiting.clone())
                .unwrap_or_default();
            debug_assert!(
                !victim_waits.is_empty(),
                "deadlock victim {victim} is not waiting"
            );
            if victim_waits.is_empty() {
                return Acquire::Waiting(ticket);
            }
            self.stats.count_abort(AbortCause::Deadlock);
            for t in victim_waits {
                self.abort_wait(t, AbortCause::Deadlock, wakeups);
            }
        }
    }

    /// The lowest-ranked member of `cycle` with a waiting request: the
    /// youngest unprotected one, or the youngest if all are protected.
    fn youngest_waiting(&self, cycle: &[TxnId]) -> Option<TxnId> {
        cycle
            .iter()
            .copied()
            .filter(|t| self.txns.get(t).is_some_and(|s| !s.waiting.is_empty()))
            .max_by_key(|&t| rank(&self.txns, t))
    }

    /// Detector only: after a holder of `target` gained release-order
    /// dependencies on `on` (edges no new wait created: a request waiting
    /// on `target` behind that holder now waits for `on` too), breaks
    /// every cycle those edges closed: a cycle through one of them runs
    /// from an `on` back to a waiter on `target`, so one search from each
    /// `on` finds it, however many requests wait there. Victims are
    /// reported in `wakeups`.
    pub fn detect_from_waiters(
        &mut self,
        target: &LockTarget,
        on: &[TxnId],
        wakeups: &mut Vec<Wakeup>,
    ) {
        if self.config.policy != DeadlockPolicy::Detect {
            return;
        }
        let (sk, local) = split(target);
        for &root in on {
            self.break_cycles(
                |t| {
                    let waiters: SmallVec<[TxnId; 8]> =
                        match t.spaces.get(&sk).and_then(|s| s.entry(local)) {
                            Some(e) => e.queue.iter().map(|q| q.txn).collect(),
                            None => return None,
                        };
                    t.search_cycle(root, |w, edges| {
                        waiters.contains(&w) && edges.contains(&root)
                    })
                },
                wakeups,
            );
        }
    }

    /// Transactions `txn` waits for, over all its waiting requests: the
    /// conflicting holders and queued requests ahead, and, behind a holder
    /// whose lock would still conflict after a downgrade to saline (so `txn`
    /// waits for its release), the transactions that release is held back
    /// for (release-order dependencies); and, for a transaction releasing
    /// in stages or all at once, every transaction its own dependencies
    /// name (so chains of held-back releases are followed).
    fn wait_for_edges(&self, txn: TxnId) -> SmallVec<[TxnId; 4]> {
        let mut out = SmallVec::new();
        let Some(st) = self.txns.get(&txn) else {
            return out;
        };
        // A transaction releasing (in stages, or all at once) waits for
        // the transactions its release-order dependencies name: its
        // remaining locks go only after theirs.
        if st.staged || st.releasing {
            let forked = st.children.iter().filter_map(|c| self.txns.get(c));
            for d in st.deps.iter().chain(forked.flat_map(|c| c.deps.iter())) {
                if !out.contains(&d.on) {
                    out.push(d.on);
                }
            }
        }
        // Locks forked from a transaction go no earlier than it ends.
        if let Some(p) = st.parent {
            if self.txns.contains_key(&p) && !out.contains(&p) {
                out.push(p);
            }
        }
        for ticket in &st.waiting {
            let Some(w) = self.waits.get(ticket) else {
                continue;
            };
            let (sk, local) = split(&w.target);
            let Some(space) = self.spaces.get(&sk) else {
                continue;
            };
            space.for_each_overlapping(local, |e| {
                for h in &e.holders {
                    let saline = Mode::new(LockClass::Saline, h.mode.access);
                    if h.txn == txn
                        || self.compat.compatible(h.mode, w.mode)
                        || self.compat.compatible(saline, w.mode)
                    {
                        continue;
                    }
                    let Some(hs) = self.txns.get(&h.txn) else {
                        continue;
                    };
                    for d in &hs.deps {
                        let blocks = d.target.as_ref().is_none_or(|t| *t == w.target);
                        if blocks && !out.contains(&d.on) {
                            out.push(d.on);
                        }
                    }
                }
            });
        }
        for ticket in &st.waiting {
            let Some(w) = self.waits.get(ticket) else {
                continue;
            };
            let (sk, local) = split(&w.target);
            if let Some(space) = self.spaces.get(&sk) {
                let r = Request {
                    txn,
                    t: local,
                    mode: w.mode,
                    before: order(w.upgrade, *ticket),
                    kind: Kind::of(&self.txns, txn, w.gated, w.opened),
                };
                collect_blockers(space, self.view(), r, &mut out);
            }
        }
        out
    }

    /// A cycle of the wait-for graph through `start`, as the list of its
    /// transactions, found by depth-first search.
    fn find_cycle(&mut self, start: TxnId) -> Option<Vec<TxnId>> {
        self.search_cycle(start, |_, edges| edges.contains(&start))
    }

    /// Depth-first search from `root` for a transaction `t` whose edges
    /// `closes` a cycle back to `root` (`closes(t, edges of t)`); returns
    /// the path from `root` to `t`. The search visits at most
    /// [`MAX_SEARCH`] transactions: past that it gives up and counts a
    /// cut search, leaving the cycle, if there is one, to the cluster's
    /// periodic detector (and the wait timeout). Under heavy contention
    /// the graph behind one wait can span every waiting transaction, and
    /// a search per wait and per new dependency then cost more than the
    /// work it guarded.
    fn search_cycle(
        &mut self,
        root: TxnId,
        closes: impl Fn(TxnId, &[TxnId]) -> bool,
    ) -> Option<Vec<TxnId>> {
        let mut visited: rustc_hash::FxHashSet<TxnId> = Default::default();
        visited.insert(root);
        let edges = self.wait_for_edges(root);
        if closes(root, &edges) {
            return Some(vec![root]);
        }
        let mut stack: Vec<(TxnId, SmallVec<[TxnId; 4]>, usize)> = vec![(root, edges, 0)];
        while let Some(top) = stack.last_mut() {
            if top.2 < top.1.len() {
                let next = top.1[top.2];
                top.2 += 1;
                if !visited.insert(next) {
                    continue;
                }
                if visited.len() > MAX_SEARCH {
                    self.stats.searches_cut += 1;
                    return None;
                }
                let edges = self.wait_for_edges(next);
                if closes(next, &edges) {
                    let mut path: Vec<TxnId> = stack.iter().map(|f| f.0).collect();
                    path.push(next);
                    return Some(path);
                }
                stack.push((next, edges, 0));
            } else {
                stack.pop();
            }
        }
        None
    }

    /// Removes a waiting request from its queue and the indexes. The caller
    /// regrants its target (a removed waiter may have blocked others).
    fn remove_wait(&mut self, ticket: Ticket, wakeups: &mut Vec<Wakeup>) -> Option<Wait> {
        let w = self.waits.remove(&ticket)?;
        let (sk, local) = split(&w.target);
        if let Some(space) = self.spaces.get_mut(&sk) {
            if let Some(e) = space.entry_mut(local) {
                if let Some(pos) = e.queue.iter().position(|q| q.ticket == ticket) {
                    let q = e.queue.remove(pos);
                    if q.gated {
                        self.gated -= 1;
                        self.gated_ready -= usize::from(q.ready);
                        self.reopen_gate(&w.target, wakeups);
                    }
                }
            }
            if let Some(space) = self.spaces.get_mut(&sk) {
                space.prune(local);
            }
        }
        if let Some(st) = self.txns.get_mut(&w.txn) {
            st.waiting.retain(|t| *t != ticket);
        }
        Some(w)
    }

    /// Grants, in queue order, every waiter on a target overlapping `target`
    /// that nothing blocks any more. Only such waiters can have been
    /// unblocked by a change at `target`; granting only adds holders, so one
    /// pass in order is complete.
    fn regrant(&mut self, target: &LockTarget, wakeups: &mut Vec<Wakeup>) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut candidates: SmallVec<[(Order, Ticket); 8]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            candidates.extend(e.queue.iter().map(|q| (q.order(), q.ticket)));
        });
        if candidates.is_empty() {
            return;
        }
        candidates.sort_unstable();
        candidates.dedup();
        for (ord, ticket) in candidates {
            let (free, gated) = {
                let Some(w) = self.waits.get(&ticket) else {
                    continue;
                };
                let (wsk, wl) = split(&w.target);
                let Some(space) = self.spaces.get(&wsk) else {
                    continue;
                };
                let r = Request {
                    txn: w.txn,
                    t: wl,
                    mode: w.mode,
                    before: ord,
                    kind: Kind::of(&self.txns, w.txn, w.gated, w.opened),
                };
                (!is_blocked(space, self.view(), r), w.gated)
            };
            if gated {
                self.set_ready(ticket, free);
            } else if free {
                self.grant_waiter(ticket, wakeups);
            }
        }
    }

    fn grant_waiter(&mut self, ticket: Ticket, wakeups: &mut Vec<Wakeup>) {
        let Some(w) = self.waits.remove(&ticket) else {
            return;
        };
        let (sk, local) = split(&w.target);
        if let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) {
            e.queue.retain(|q| q.ticket != ticket);
        }
        if w.opened {
            self.txns.entry(w.txn).or_default().gate_granted = true;
        }
        self.add_holder(w.txn, &w.target, w.mode);
        if let Some(st) = self.txns.get_mut(&w.txn) {
            st.waiting.retain(|t| *t != ticket);
        }
        self.stats.granted_after_wait += 1;
        wakeups.push(Wakeup::Granted { txn: w.txn, ticket });
        if self.gated > 0 && self.config.policy == DeadlockPolicy::WaitDie {
            self.kill_younger_bypassed(w.txn, &w.target, w.mode, (GATED_ONLY, true), wakeups);
        }
    }

    /// Removes `txn`'s holders on exactly `target` whose access matches
    /// `filter` (all, if None). Touches the space only; returns whether
    /// anything was removed and whether the txn still holds a mode there.
    fn remove_holders(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        filter: Option<Access>,
    ) -> Removed {
        self.remove_holders_where(txn, target, |m| filter.is_none_or(|a| a == m.access))
    }

    /// [`LockTable::remove_holders`] of the modes `selected` picks.
    fn remove_holders_where(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        selected: impl Fn(&Mode) -> bool,
    ) -> Removed {
        let (sk, local) = split(target);
        let none = Removed {
            any: false,
            still_holds: false,
            may_unblock: false,
        };
        let Some(space) = self.spaces.get_mut(&sk) else {
            return none;
        };
        let has_ranges = !space.ranges.is_empty();
        let Some(e) = space.entry_mut(local) else {
            return none;
        };
        let before = e.holders.len();
        e.holders.retain(|h| !(h.txn == txn && selected(&h.mode)));
        let out = Removed {
            any: e.holders.len() != before,
            still_holds: e.holders.iter().any(|h| h.txn == txn),
            // Waiters elsewhere can only be affected through a range.
            may_unblock: !e.queue.is_empty() || has_ranges || matches!(local, Local::Range(..)),
        };
        if e.is_empty() {
            space.prune(local);
        }
        out
    }

    fn release_single_now(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Access,
        wakeups: &mut Vec<Wakeup>,
    ) {
        debug_assert!(
            !self.txns.get(&txn).is_some_and(|s| s.is_blocked(target)),
            "releasing {txn}'s lock on {target:?} with unreleased release dependencies"
        );
        let removed = self.remove_holders(txn, target, Some(access));
        self.settle_removal(txn, target, removed, wakeups);
    }

    /// After some of `txn`'s locks on `target` were removed: if it holds
    /// none there any more, forgets the target and tells what waited for
    /// its release (and, if it holds nothing at all now, for that); lets
    /// waiters the removal may unblock in. Returns whether `txn` no longer
    /// holds `target`.
    fn settle_removal(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        removed: Removed,
        wakeups: &mut Vec<Wakeup>,
    ) -> bool {
        if !removed.any {
            return false;
        }
        if !removed.still_holds {
            let mut now_empty = false;
            if let Some(st) = self.txns.get_mut(&txn) {
                if let Some(i) = st.held.iter().position(|t| t == target) {
                    st.held.remove(i);
                }
                now_empty = st.held.is_empty();
            }
            self.on_released(txn, Some(target));
            if now_empty {
                self.on_released(txn, None);
            }
        }
        if removed.may_unblock {
            self.regrant(target, wakeups);
        }
        !removed.still_holds
    }

    /// One pass of a `release_all` in progress: releases every held target
    /// that no dependency holds back. Returns whether anything was released.
    fn release_pass(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(st) = self.txns.get_mut(&txn) else {
            return false;
        };
        let held = std::mem::take(&mut st.held);
        let mut kept = Vec::new();
        let mut progress = false;
        for target in held {
            if self.txns.get(&txn).is_some_and(|s| s.is_blocked(&target)) {
                kept.push(target);
                continue;
            }
            let removed = self.remove_holders(txn, &target, None);
            self.on_released(txn, Some(&target));
            if removed.may_unblock {
                self.regrant(&target, wakeups);
            }
            progress = true;
        }
        let now_empty = kept.is_empty();
        if let Some(st) = self.txns.get_mut(&txn) {
            st.held = kept;
        }
        if progress && now_empty {
            self.on_released(txn, None);
        }
        progress
    }

    /// `txn` released `target` (or, with None, now holds nothing): drop the
    /// dependencies this satisfies and queue the dependants that may now
    /// complete held-back releases.
    fn on_released(&mut self, txn: TxnId, target: Option<&LockTarget>) {
        let dependants = match self.txns.get_mut(&txn) {
            Some(st) if !st.dependants.is_empty() => {
                if target.is_none() {
                    std::mem::take(&mut st.dependants)
                } else {
                    st.dependants.clone()
                }
            }
            _ => return,
        };
        for d in dependants {
            let Some(ds) = self.txns.get_mut(&d) else {
                continue;
            };
            let before = ds.deps.len();
            ds.deps.retain(|dep| {
                !(dep.on == txn && (target.is_none() || dep.on_target.as_ref() == target))
            });
            if ds.deps.len() != before && !self.held_back_progress.contains(&d) {
                self.held_back_progress.push(d);
            }
            if (ds.releasing || !ds.pending.is_empty()) && !self.worklist.contains(&d) {
                self.worklist.push(d);
            }
            if d != txn {
                self.maybe_drop_txn(d);
            }
        }
    }

    fn drain_worklist(&mut self, wakeups: &mut Vec<Wakeup>) {
        while let Some(d) = self.worklist.pop() {
            self.try_complete(d, wakeups);
        }
    }

    /// Performs every held-back release of `txn` that its dependencies now
    /// allow; finishes a `release_all` whose last lock went.
    fn try_complete(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        loop {
            let Some(st) = self.txns.get_mut(&txn) else {
                return;
            };
            let releasing = st.releasing;
            let pending = std::mem::take(&mut st.pending);
            let mut progress = false;
            let mut kept = Vec::new();
            for (target, access) in pending {
                if self.txns.get(&txn).is_some_and(|s| s.is_blocked(&target)) {
                    kept.push((target, access));
                } else {
                    self.release_single_now(txn, &target, access, wakeups);
                    progress = true;
                    if !self.held_back_progress.contains(&txn) {
                        self.held_back_progress.push(txn);
                    }
                }
            }
            if let Some(st) = self.txns.get_mut(&txn) {
                st.pending.extend(kept);
            }
            if releasing && self.release_pass(txn, wakeups) {
                progress = true;
            }
            // Without dependencies left, one pass released all it could.
            let settled = match self.txns.get(&txn) {
                None => true,
                Some(s) => s.deps.is_empty() && s.pending.is_empty(),
            };
            if !progress || settled {
                break;
            }
        }
        let Some(st) = self.txns.get(&txn) else {
            return;
        };
        if st.releasing {
            if st.held.is_empty() {
                debug_assert!(st.waiting.is_empty());
                let deferred = st.deferred;
                self.txns.remove(&txn);
                if deferred {
                    wakeups.push(Wakeup::Released { txn });
                }
            }
        } else {
            self.maybe_drop_txn(txn);
        }
    }

    fn maybe_drop_txn(&mut self, txn: TxnId) {
        if self.txns.get(&txn).is_some_and(TxnState::is_idle) {
            self.txns.remove(&txn);
        }
    }
}

/// Where `txn` stands in wait-die's order (smaller goes first): protected
/// transactions ahead of all others, then by age.
fn rank(txns: &Map<TxnId, TxnState>, txn: TxnId) -> (bool, TxnId) {
    (!is_protected(txns, txn), txn)
}

fn is_protected(txns: &Map<TxnId, TxnState>, txn: TxnId) -> bool {
    txns.get(&txn).is_some_and(|s| {
        s.protected
            || s.parent
                .is_some_and(|p| txns.get(&p).is_some_and(|ps| ps.protected))
    })
}

/// Whether a holder's shared lock keeps a gated request from being ready:
/// neither protected nor granted through a gate, it may be a reader that
/// upgrades ahead of the gated request later.
fn may_upgrade(txns: &Map<TxnId, TxnState>, txn: TxnId) -> bool {
    txns.get(&txn)
        .is_none_or(|s| !s.protected && !s.gate_granted)
}

/// Whether `a` ranks above `b`: under wait-die, `b` dies rather than wait
/// for `a`.
fn outranks(txns: &Map<TxnId, TxnState>, a: TxnId, b: TxnId) -> bool {
    rank(txns, a) < rank(txns, b)
}

// ---------------------------------------------------------------------------
// Deterministic dump.

fn fmt_range(lo: &Bound<Key>, hi: &Bound<Key>) -> String {
    let lo = match lo {
        Bound::Included(k) => format!("[{k:?}"),
        Bound::Excluded(k) => format!("({k:?}"),
        Bound::Unbounded => "(-inf".to_string(),
    };
    let hi = match hi {
        Bound::Included(k) => format!("{k:?}]"),
        Bound::Excluded(k) => format!("{k:?})"),
        Bound::Unbounded => "+inf)".to_string(),
    };
    format!("{lo}, {hi}")
}

/// A target for error messages: `table 1 index 0 key ("k")`.
fn describe(t: &LockTarget) -> String {
    let kind = if matches!(t, LockTarget::Point { .. }) {
        "key"
    } else {
        "range"
    };
    format!(
        "table {} index {} {kind} {}",
        t.table().0,
        t.index().0,
        fmt_target(t)
    )
}

fn fmt_target(t: &LockTarget) -> String {
    match t {
        LockTarget::Point { key, .. } => format!("{key:?}"),
        LockTarget::Range { lo, hi, .. } => fmt_range(lo, hi),
    }
}

fn cmp_lower(a: &Bound<Key>, b: &Bound<Key>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Less),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Greater),
    }
}

fn cmp_upper(a: &Bound<Key>, b: &Bound<Key>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Greater,
        (_, Bound::Unbounded) => Ordering::Less,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Greater),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Less),
    }
}

fn fmt_entry(f: &mut fmt::Formatter<'_>, name: &str, e: &Entry) -> fmt::Result {
    write!(f, "  {name}:")?;
    if !e.holders.is_empty() {
        write!(f, " held")?;
        for (i, h) in e.holders.iter().enumerate() {
            write!(f, "{} {} {}", if i > 0 { "," } else { "" }, h.txn, h.mode)?;
        }
    }
    if !e.queue.is_empty() {
        write!(
            f,
            "{}waiting",
            if e.holders.is_empty() { " " } else { " | " }
        )?;
        for (i, q) in e.queue.iter().enumerate() {
            let up = match (q.upgrade, q.gated, q.ready) {
                (true, _, _) => " (upgrade)",
                (_, true, true) => " (gated, ready)",
                (_, true, false) => " (gated)",
                _ if q.behind_gate => " (behind gate)",
                _ => "",
            };
            write!(
                f,
                "{} {} {} {}{up}",
                if i > 0 { "," } else { "" },
                q.ticket,
                q.txn,
                q.mode
            )?;
        }
    }
    writeln!(f)
}

impl fmt::Display for LockTable {
    /// One line per target with holders (grant order) and waiters (queue
    /// order); spaces, keys and ranges sorted; then transactions with
    /// release-order state, sorted. Identical histories print identically.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut spaces: Vec<_> = self.spaces.iter().filter(|(_, s)| !s.is_empty()).collect();
        spaces.sort_by_key(|(k, _)| **k);
        let mut any = false;
        for ((table, index), space) in spaces {
            any = true;
            writeln!(f, "table {} index {}:", table.0, index.0)?;
            let mut points: Vec<_> = space.points.iter().collect();
            points.sort_by(|a, b| a.0.cmp(b.0));
            for (k, e) in points {
                fmt_entry(f, &format!("{k:?}"), e)?;
            }
            let mut ranges: Vec<_> = space.ranges.iter().collect();
            ranges.sort_by(|a, b| cmp_lower(&a.lo, &b.lo).then_with(|| cmp_upper(&a.hi, &b.hi)));
            for r in ranges {
                fmt_entry(f, &fmt_range(&r.lo, &r.hi), &r.entry)?;
            }
        }
        let mut txns: Vec<_> = self
            .txns
            .iter()
            .filter(|(_, s)| {
                !s.deps.is_empty()
                    || !s.pending.is_empty()
                    || s.releasing
                    || s.staged
                    || s.parent.is_some()
            })
            .collect();
        txns.sort_by_key(|(t, _)| **t);
        for (txn, st) in txns {
            any = true;
            write!(f, "txn {txn}:")?;
            if let Some(p) = st.parent {
                write!(f, " forked from {p}")?;
            }
            if st.releasing {
                write!(f, " releasing")?;
            }
            if st.staged {
                write!(f, " staged")?;
            }
            for d in &st.deps {
                let mine = d.target.as_ref().map_or("all".to_string(), fmt_target);
                let theirs = d.on_target.as_ref().map_or("all".to_string(), fmt_target);
                write!(f, " [{mine} after {} {theirs}]", d.on)?;
            }
            for (t, a) in &st.pending {
                write!(f, " pending-release {} {a:?}", fmt_target(t))?;
            }
            writeln!(f)?;
        }
        if !any {
            writeln!(f, "(empty)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
