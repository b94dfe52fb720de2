//! The partition actor: one task owns one partition's rows, indexes and lock
//! table, and handles its messages one at a time, so nothing inside needs a
//! latch (like an H-Store site or an NDB LDM thread).
//!
//! ```text
//!  Execute ──► lock_needs(stmt) ──► acquire each ──all granted──► execute ──► reply
//!                  ▲                     │ must wait
//!                  │                     ▼
//!                  └──── Wakeup::Granted ◄── parked (one statement per txn)
//!  Commit/Abort ──► store.commit/abort ──► release_all ──► wakeups ──► resume parked
//! ```
//!
//! A statement that had to wait recomputes its lock needs when it resumes:
//! what a scan returns can change while it waits, and the locks already held
//! make the second computation stable. A statement runs only when every need
//! was granted in one pass, so it always executes under all its locks.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_check::Op;
use brine_core::{
    AbortCause, Access, Catalog, Error, IndexId, LockNeed, LockTarget, PartitionId, Result, TxnId,
    Value,
};
use brine_lock::{
    Acquire, GateOpens, LockClass, LockConfig, LockTable, Mode, StandardCompat, Ticket, Wakeup,
};
use brine_sql::{Plan, QueryResult};
use brine_storage::wal::record::{BaseContext, BaseEntry};
use brine_storage::PartitionStore;
use tokio::sync::mpsc;

use crate::durability::PartitionWal;
use crate::message::{
    BaseStmt, Executed, Gate, LockSpec, PartitionMsg, PartitionStatus, Reply, Vote,
};
use crate::nexus_uses::{ColUse, NexusUses};

mod salt;
use salt::{BaseLock, PendingRelease};

/// Counters a partition keeps; read by the cluster's stats without locking.
#[derive(Debug, Default)]
pub struct PartitionCounters {
    pub statements: AtomicU64,
    pub lock_waits: AtomicU64,
    /// Deadlocks the lock table broke by letting a request pass the queue
    /// instead of aborting one (a copy of its `LockStats`, refreshed every
    /// `EXPIRE_TICK`).
    pub queue_bypasses: AtomicU64,
    /// Deadlock searches the lock table gave up (its `LockStats`, copied
    /// as `queue_bypasses` is).
    pub searches_cut: AtomicU64,
    /// Deadlocks broken at the cluster detector's request (its
    /// `LockStats`, copied as `queue_bypasses` is).
    pub detector_breaks: AtomicU64,
    pub lock_wait_ns: AtomicU64,
    /// The same two by the waiting statement's table (tables past
    /// `TABLE_SLOTS - 1` share the last slot).
    pub lock_waits_by_table: [AtomicU64; TABLE_SLOTS],
    pub lock_wait_ns_by_table: [AtomicU64; TABLE_SLOTS],
    /// Lock holds ended, by table: one per (transaction, table) here, from
    /// the transaction's first long-held lock on the table to the release
    /// of its locks (a BASE transaction's: to its end).
    pub lock_holds_by_table: [AtomicU64; TABLE_SLOTS],
    pub lock_hold_ns_by_table: [AtomicU64; TABLE_SLOTS],
    pub commits: AtomicU64,
    pub aborts: AtomicU64,
    pub victims_wait_die: AtomicU64,
    pub victims_deadlock: AtomicU64,
    pub victims_timeout: AtomicU64,
    /// Callas, Runtime Pipelining: statements held here for another
    /// transaction's rank (`LockSpec::after_rank`), and for how long.
    pub rank_holds: AtomicU64,
    pub rank_hold_ns: AtomicU64,
}

/// At most this many transactions' hold start times are kept.
const HELD_SINCE_MAX: usize = 1 << 20;

/// Per-table counter slots.
pub const TABLE_SLOTS: usize = 32;

fn table_slot(plan: &brine_sql::Plan) -> usize {
    (plan.table().0 as usize).min(TABLE_SLOTS - 1)
}

impl PartitionCounters {
    fn count_victim(&self, cause: AbortCause) {
        let c = match cause {
            AbortCause::WaitDie => &self.victims_wait_die,
            AbortCause::Deadlock => &self.victims_deadlock,
            AbortCause::LockTimeout => &self.victims_timeout,
            AbortCause::Cascade => return,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A statement in progress at this partition.
struct Stmt {
    /// The transaction whose writes it makes (an alkaline subtransaction
    /// for a BASE statement).
    txn: TxnId,
    /// Who holds its locks: `txn`, or the BASE transaction.
    owner: TxnId,
    base: Option<BaseStmt>,
    /// Salt: it accessed a row another BASE transaction wrote and holds.
    dirty: bool,
    /// Callas: same-group transactions it depends on.
    after: Vec<TxnId>,
    intro: Option<Arc<(String, Vec<Value>)>>,
    plan: Arc<Plan>,
    params: Vec<Value>,
    lock: LockSpec,
    reply: Reply<Result<Executed>>,
    /// Short-duration locks granted so far, released when it ends.
    short: Vec<LockNeed>,
    /// What it read and wrote, when the run records a history.
    ops: Vec<Op>,
    /// Salt: gated until ungated (`PartitionMsg::Execute`).
    gate: Option<Gate>,
}

/// A statement waiting for a lock.
struct Parked {
    stmt: Stmt,
    /// The need it waits for, and since when.
    waiting: LockNeed,
    ticket: Ticket,
    since: Instant,
}

pub struct Partition {
    id: PartitionId,
    store: PartitionStore,
    locks: LockTable,
    parked: HashMap<TxnId, Parked>,
    counters: Arc<PartitionCounters>,
    // Scratch buffers, reused so the hot path does not allocate.
    needs: Vec<LockNeed>,
    wakeups: Vec<Wakeup>,
    /// The partition's write-ahead log (`None`: durability off).
    wal: Option<PartitionWal>,
    /// Salt: the long-term locks of each BASE transaction here, with the
    /// position of the latest statement that took each.
    base_locks: HashMap<TxnId, Vec<BaseLock>>,
    /// Salt: the BASE transaction of each holder its locks were forked to,
    /// and the other way round.
    forked: HashMap<TxnId, TxnId>,
    forks: HashMap<TxnId, SmallVec<[TxnId; 2]>>,
    /// Salt: releases still held back by release-order dependencies, by
    /// owner.
    releases: HashMap<TxnId, Vec<PendingRelease>>,
    /// Scratch: owners whose held-back releases progressed.
    progressed: Vec<TxnId>,
    /// Scratch: readiness changes of gated requests.
    gate_changes: Vec<(TxnId, Ticket, bool)>,
    /// Salt: the BASE transaction that last wrote each row (the
    /// prototype's per-row pointer, seed 000 section 3.4.3). Stale entries
    /// (writer gone) are ignored and swept when the map grows.
    last_writer: HashMap<LockTarget, TxnId>,
    /// Salt with a log: what each running alkaline subtransaction ran
    /// here, logged when it commits or prepares.
    base_results: HashMap<TxnId, BaseContext>,
    /// Callas: the group of each transaction (lock owner) running here in
    /// one, until its nexus locks are released.
    callas_groups: HashMap<TxnId, u32>,
    /// Callas, Runtime Pipelining: for each uncommitted transaction, the
    /// same-group transactions that accessed rows it wrote here (they saw
    /// or overwrote its uncommitted state): its abort is theirs.
    rp_dependants: HashMap<TxnId, SmallVec<[TxnId; 2]>>,
    /// Transactions aborted here by such a cascade, until their
    /// coordinator ends them (every later statement and vote fails).
    cascaded: HashSet<TxnId>,
    /// Callas: which columns each grouped transaction read, wrote and
    /// incremented on each row and range it locked here, so dependencies
    /// are declared only on real (column-level) conflicts, as the analysis
    /// assumes, including those between a scan and the rows in its range.
    nexus: NexusUses,
    /// Since when each transaction (by lock owner) has held locks on each
    /// table here, for the hold-time counters.
    held_since: HashMap<TxnId, smallvec::SmallVec<[(u8, Instant); 4]>>,
    /// Callas, Runtime Pipelining: 1 + the highest rank of a piece each
    /// transaction (lock owner) ended here, while it runs here.
    rp_reached: HashMap<TxnId, u32>,
    /// Statements held for another transaction's rank
    /// (`LockSpec::after_rank`), in arrival order, and those let go, to be
    /// run by `process_wakeups`.
    rank_held: Vec<(Stmt, Instant)>,
    rank_ready: std::collections::VecDeque<Stmt>,
    /// The cluster detector's doorbell from its last look, with the lock
    /// table's `wait_for_changes` then: rung (once) after a message that
    /// changed it, so a cycle through this and another partition is looked
    /// for at once instead of at the detector's next period.
    nudge: Option<(crate::message::Nudge, u64)>,
}

/// The partition's clock: tokio's, so a test on a paused runtime (virtual
/// time) sees lock waits and timeouts replay exactly; in a normal runtime it
/// is the system's monotonic clock.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Each partition draws history version ids from its own range of
/// 2^40 ids.
const VERSION_RANGE_BITS: u32 = 40;

/// Whether a granted lock of this access is released when the statement
/// ends: reads at read committed, and writes only under the checker's
/// deliberately broken mutation.
fn short_lived(lock: &LockSpec, access: Access) -> bool {
    if access == Access::Write {
        lock.short_writes
    } else {
        lock.short_reads
    }
}

/// How often the partition checks for lock waits past the timeout.
const EXPIRE_TICK: Duration = Duration::from_millis(5);

impl Partition {
    pub fn new(
        id: PartitionId,
        catalog: Arc<Catalog>,
        lock_config: LockConfig,
        counters: Arc<PartitionCounters>,
    ) -> Partition {
        Partition {
            id,
            store: PartitionStore::new(catalog),
            locks: LockTable::new(lock_config, Arc::new(StandardCompat)),
            parked: HashMap::default(),
            counters,
            needs: Vec::new(),
            wakeups: Vec::new(),
            wal: None,
            base_locks: HashMap::default(),
            forked: HashMap::default(),
            forks: HashMap::default(),
            releases: HashMap::default(),
            progressed: Vec::new(),
            gate_changes: Vec::new(),
            last_writer: HashMap::default(),
            callas_groups: HashMap::default(),
            rp_dependants: HashMap::default(),
            cascaded: HashSet::default(),
            nexus: NexusUses::default(),
            base_results: HashMap::default(),
            held_since: HashMap::default(),
            rp_reached: HashMap::default(),
            rank_held: Vec::new(),
            rank_ready: std::collections::VecDeque::new(),
            nudge: None,
        }
    }

    /// Makes the partition durable: `store` is what recovery rebuilt, and
    /// commits, prepares and loads go through `wal` (see `durability`).
    pub(crate) fn with_wal(mut self, store: PartitionStore, wal: PartitionWal) -> Self {
        self.store = store;
        self.wal = Some(wal);
        self
    }

    /// Records row versions and reports each statement's reads and writes
    /// (history recording). Version ids come from a range of this
    /// partition's own, so they are unique in the cluster.
    pub fn enable_recording(&mut self) {
        self.store
            .enable_recording(u64::from(self.id.0 + 1) << VERSION_RANGE_BITS);
    }

    /// The actor loop. Ends when every sender is gone.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        let mut tick = tokio::time::interval(EXPIRE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                msg = rx.recv() => match msg {
                    Some(msg) => {
                        self.handle(msg);
                        self.maybe_nudge();
                        if let Some(wal) = &mut self.wal {
                            wal.maybe_checkpoint(&self.store);
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    // Off the per-message path: the copy lags by a tick.
                    let stats = self.locks.stats();
                    self.counters
                        .queue_bypasses
                        .store(stats.queue_bypasses, Ordering::Relaxed);
                    self.counters
                        .searches_cut
                        .store(stats.searches_cut, Ordering::Relaxed);
                    self.counters
                        .detector_breaks
                        .store(stats.detector_breaks, Ordering::Relaxed);
                    if !self.parked.is_empty() {
                        self.locks.expire(now(), &mut self.wakeups);
                        self.process_wakeups();
                        self.maybe_nudge();
                    }
                }
            }
        }
        tracing::debug!(partition = self.id.0, "partition stopped");
    }

    /// Rings the detector's doorbell if the lock table recorded something
    /// since the detector's last look that may close a cycle through
    /// another partition (one `Option` check per message otherwise).
    fn maybe_nudge(&mut self) {
        if self
            .nudge
            .as_ref()
            .is_some_and(|(_, seen)| *seen != self.locks.wait_for_changes())
        {
            if let Some((nudge, _)) = self.nudge.take() {
                nudge.ring();
            }
        }
    }

    pub fn handle(&mut self, msg: PartitionMsg) {
        match msg {
            PartitionMsg::Execute {
                txn,
                plan,
                params,
                lock,
                base,
                intro,
                gate,
                reply,
            } => {
                self.counters.statements.fetch_add(1, Ordering::Relaxed);
                if let Some(b) = base {
                    if let Some(prev) = b.commit_first {
                        // Nobody waits for this commit: the statement's
                        // answer says it happened, and a later commit of
                        // the owner here that is durable makes it durable
                        // (one log, in order).
                        self.commit(prev, Some(b.owner), Reply::nobody(), ());
                    }
                }
                if self.cascaded.contains(&base.map_or(txn, |b| b.owner)) {
                    reply.send(Err(Error::Aborted(AbortCause::Cascade)));
                    return;
                }
                if let LockClass::Member(g) = lock.class {
                    self.callas_groups.insert(base.map_or(txn, |b| b.owner), g);
                }
                if let Some(b) = base.filter(|b| b.protect) {
                    self.locks.protect(b.owner, &mut self.wakeups);
                    self.process_wakeups();
                }
                let stmt = Stmt {
                    txn,
                    owner: base.map_or(txn, |b| b.owner),
                    base,
                    dirty: false,
                    after: Vec::new(),
                    intro,
                    plan,
                    params,
                    lock,
                    reply,
                    short: Vec::new(),
                    ops: Vec::new(),
                    gate,
                };
                match lock.after_rank {
                    Some((t, r)) if !self.reached(t, r) => {
                        self.counters.rank_holds.fetch_add(1, Ordering::Relaxed);
                        self.rank_held.push((stmt, now()));
                    }
                    _ => self.run_statement(stmt),
                }
            }
            PartitionMsg::Ungate { txn } => {
                let Some(p) = self.parked.get_mut(&txn) else {
                    return;
                };
                if p.stmt.gate.take().is_some() {
                    let ticket = p.ticket;
                    self.locks.ungate(ticket, &mut self.wakeups);
                    self.process_wakeups();
                }
            }
            PartitionMsg::Prepare { txn, reply, .. } if self.cascaded.remove(&txn) => {
                reply.send(Vote::No);
            }
            PartitionMsg::Protect { owner } => {
                // Only while the owner holds or waits for something here:
                // over TCP this message may overtake nothing but be
                // overtaken by the owner's release, and protecting an
                // ended transaction would keep it in the lock table for
                // good. Its later statements here carry the protection
                // (`BaseStmt::protect`).
                if self.locks.knows(owner) {
                    self.locks.protect(owner, &mut self.wakeups);
                    self.process_wakeups();
                }
            }
            PartitionMsg::EndPiece { owner, rank } => {
                self.end_piece(owner, rank);
                self.process_wakeups();
            }
            PartitionMsg::RankGo { txn, after } => {
                if let Some(i) = self
                    .rank_held
                    .iter()
                    .position(|(h, _)| h.owner == txn && h.lock.after_rank == Some(after))
                {
                    self.let_go(i);
                    self.process_wakeups();
                }
            }
            PartitionMsg::Prepare {
                txn,
                keep,
                hold,
                reply,
            } => self.prepare(txn, keep, hold, reply),
            PartitionMsg::Commit {
                txn, keep, reply, ..
            } => self.commit(txn, keep, reply, ()),
            PartitionMsg::Abort { txn, keep, reply } => {
                self.cascaded.remove(&txn);
                self.base_results.remove(&txn);
                if let Some(wal) = &mut self.wal {
                    wal.abort(txn);
                }
                self.end_txn(txn, keep, false);
                reply.send(());
            }
            PartitionMsg::AbortOrphans { coordinator, reply } => {
                let of_it =
                    |t: &TxnId| t.id >> crate::cluster::NODE_TXN_SHIFT == u64::from(coordinator);
                let mut orphans: Vec<TxnId> = self
                    .locks
                    .txn_ids()
                    .chain(self.store.active_txn_ids())
                    .chain(self.parked.keys().copied())
                    .filter(of_it)
                    .collect();
                orphans.sort_unstable();
                orphans.dedup();
                let mut in_doubt = Vec::new();
                for txn in orphans {
                    if self.wal.as_ref().is_some_and(|w| w.is_prepared(txn)) {
                        in_doubt.push(txn);
                        continue;
                    }
                    tracing::info!(partition = self.id.0, %txn, "aborting a transaction of a restarted coordinator");
                    self.base_results.remove(&txn);
                    if let Some(wal) = &mut self.wal {
                        wal.abort(txn);
                    }
                    self.end_txn(txn, None, false);
                }
                reply.send(in_doubt);
            }
            PartitionMsg::Release {
                owner,
                stages,
                reply,
            } => self.release_base(owner, stages.into_iter(), reply),
            PartitionMsg::Load { table, rows, reply } if self.wal.is_some() => {
                if let Some(wal) = &mut self.wal {
                    wal.load(&mut self.store, table, rows, reply);
                }
            }
            PartitionMsg::Load { table, rows, reply } => {
                let mut result = Ok(());
                for row in rows {
                    if let Err(e) = self.store.load(table, row) {
                        result = Err(e);
                        break;
                    }
                }
                reply.send(result);
            }
            PartitionMsg::Verify { reply } => {
                let id = self.id.0;
                reply.send(
                    self.store
                        .check_consistency()
                        .map_err(|e| Error::Internal(format!("partition {id}: {e}"))),
                );
            }
            PartitionMsg::WaitGraph {
                began_by,
                nudge,
                reply,
            } => {
                let mut g = crate::message::WaitGraph::default();
                let left_out = self
                    .locks
                    .wait_for_graph(began_by, &mut g.edges, &mut g.waiting);
                // Armed with what this look saw: what changes from now on
                // rings it. A wait that began after the look did (it
                // crossed the link meanwhile) was left out: the bell rings
                // at once, so the next look sees it.
                let seen = if left_out {
                    u64::MAX
                } else {
                    self.locks.wait_for_changes()
                };
                self.nudge = nudge.map(|n| (n, seen));
                g.protected = g
                    .waiting
                    .iter()
                    .map(|&(t, _)| t)
                    .filter(|&t| self.locks.is_protected(t))
                    .collect();
                reply.send(g);
            }
            PartitionMsg::BreakDeadlock { victim, pass } => {
                if let Some(p) = self.parked.get(&victim) {
                    tracing::debug!(
                        partition = self.id.0,
                        %victim,
                        pass,
                        waited_us = now().saturating_duration_since(p.since).as_micros() as u64,
                        "deadlock across partitions broken here"
                    );
                }
                if self.locks.break_deadlock(victim, pass, &mut self.wakeups) {
                    self.process_wakeups();
                }
            }
            PartitionMsg::Status { reply } => {
                let catalog = self.store.catalog().clone();
                reply.send(PartitionStatus {
                    rows_per_table: catalog
                        .tables()
                        .iter()
                        .map(|t| self.store.len(t.id))
                        .collect(),
                    parked_statements: self.parked.len(),
                    active_txns: self.store.active_txns(),
                    lock_txns: self.locks.txn_count(),
                });
            }
        }
    }

    /// Ends `txn` here: its writes are kept or undone, and its locks
    /// released, or, for an alkaline subtransaction of the BASE
    /// transaction `keep`, downgraded to saline (kept to the BASE
    /// transaction's end, also after a rollback: conservative, and the
    /// end-of-BASE release accounts for them).
    fn end_txn(&mut self, txn: TxnId, keep: Option<TxnId>, commit: bool) {
        let owner = keep.unwrap_or(txn);
        if let Some(p) = self.parked.remove(&owner) {
            // Abort while a statement waits (the coordinator gave up on it).
            self.locks.cancel_waits(owner, &mut self.wakeups);
            p.stmt.reply.send(Err(Error::Aborted(AbortCause::Cascade)));
        }
        self.drop_held(owner);
        if commit {
            self.store.commit(txn);
            self.counters.commits.fetch_add(1, Ordering::Relaxed);
            self.rp_dependants.remove(&txn);
        } else {
            self.abort_with_dependants(txn);
            self.counters.aborts.fetch_add(1, Ordering::Relaxed);
        }
        match (keep, self.callas_groups.get(&owner).copied()) {
            // Callas: a transaction that commits with `keep` naming itself
            // keeps its locks as its group's nexus locks until the release
            // order lets them go (`Release`), and so does every committed
            // piece of a chopped one; a rolled-back piece's locks go (the
            // nexus locks of the pieces before it stay), and with them
            // what it was recorded to have used; without `keep` (nothing to
            // wait for), or on abort, they go now.
            (Some(k), Some(g)) if !commit && k != txn => {
                let gone = self
                    .locks
                    .release_class(owner, LockClass::Member(g), &mut self.wakeups);
                self.nexus.forget_targets(owner, &gone);
            }
            (Some(_), Some(g)) if commit => {
                self.locks.downgrade_all(
                    owner,
                    LockClass::Member(g),
                    LockClass::Nexus(g),
                    &mut self.wakeups,
                );
            }
            (_, Some(_)) => {
                self.forget_callas(owner);
                let _ = self.locks.release_all(txn, &mut self.wakeups);
                self.count_holds(txn);
            }
            (Some(owner), None) => {
                self.locks.downgrade_all(
                    owner,
                    LockClass::Alkaline,
                    LockClass::Saline,
                    &mut self.wakeups,
                );
            }
            // `acid` sets no release-order dependencies, so this completes
            // now.
            (None, None) => {
                let _ = self.locks.release_all(txn, &mut self.wakeups);
                self.count_holds(txn);
            }
        }
        self.process_wakeups();
    }

    /// Commits `txn` here (a one-round commit, phase two, or a BASE
    /// statement's own subtransaction) and answers `value`. Logged before
    /// the store forgets the undo the redo is read from; answered by the
    /// log writer once durable.
    fn commit<T: Send + 'static>(
        &mut self,
        txn: TxnId,
        keep: Option<TxnId>,
        reply: Reply<T>,
        value: T,
    ) {
        match &mut self.wal {
            Some(wal) => {
                if let Some(c) = self.base_results.remove(&txn) {
                    wal.log_base(c, true);
                }
                wal.commit(&self.store, txn, reply, value);
                self.end_txn(txn, keep, true);
            }
            None => {
                self.end_txn(txn, keep, true);
                reply.send(value);
            }
        }
    }

    /// Undoes `txn` here. Under Runtime Pipelining every same-group
    /// transaction that saw or overwrote its uncommitted writes here (and,
    /// in turn, theirs) aborts here with it: all their changes are undone
    /// together, newest first, their waiting statements fail, their locks
    /// go, and whatever they send here next fails until their coordinator
    /// ends them.
    fn abort_with_dependants(&mut self, txn: TxnId) {
        let mut closure: Vec<TxnId> = Vec::new();
        let mut stack = vec![txn];
        while let Some(t) = stack.pop() {
            for d in self.rp_dependants.remove(&t).unwrap_or_default() {
                if d != txn
                    && !closure.contains(&d)
                    && !self.cascaded.contains(&d)
                    && self.callas_groups.contains_key(&d)
                {
                    closure.push(d);
                    stack.push(d);
                }
            }
        }
        if closure.is_empty() {
            self.store.abort(txn);
            return;
        }
        closure.push(txn);
        self.store.abort_all(&closure);
        closure.pop();
        for d in closure {
            tracing::debug!(partition = self.id.0, %d, cause = %txn, "cascading abort");
            if let Some(p) = self.parked.remove(&d) {
                self.locks.cancel_waits(d, &mut self.wakeups);
                p.stmt.reply.send(Err(Error::Aborted(AbortCause::Cascade)));
            }
            self.drop_held(d);
            self.counters.aborts.fetch_add(1, Ordering::Relaxed);
            self.counters.count_victim(AbortCause::Cascade);
            self.forget_callas(d);
            let _ = self.locks.release_all(d, &mut self.wakeups);
            self.count_holds(d);
            self.cascaded.insert(d);
        }
    }

    /// Adds `owner`'s lock holds here to the per-table counters.
    fn count_holds(&mut self, owner: TxnId) {
        let Some(held) = self.held_since.remove(&owner) else {
            return;
        };
        let at = now();
        for (slot, since) in held {
            let ns = at.saturating_duration_since(since).as_nanos() as u64;
            self.counters.lock_holds_by_table[slot as usize].fetch_add(1, Ordering::Relaxed);
            self.counters.lock_hold_ns_by_table[slot as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Acquires every lock the statement needs, then runs it; parks it if a
    /// lock must be waited for. Afterwards acts on whatever the lock table
    /// reported meanwhile (victims chosen by the detector, grants).
    fn run_statement(&mut self, stmt: Stmt) {
        self.try_statement(stmt);
        self.process_wakeups();
    }

    fn try_statement(&mut self, mut stmt: Stmt) {
        self.needs.clear();
        if let Err(e) = self
            .store
            .lock_needs(&stmt.plan, &stmt.params, &mut self.needs)
        {
            self.finish(stmt, Err(e));
            return;
        }
        if stmt.lock.for_update {
            for need in &mut self.needs {
                let row = matches!(&need.target, LockTarget::Point { index, .. } if *index == IndexId::PRIMARY);
                if row && need.access == Access::Read {
                    need.access = Access::Write;
                }
            }
        }
        let now = now();
        let needs = std::mem::take(&mut self.needs);
        for need in &needs {
            let mode = Mode {
                class: stmt.lock.class,
                access: need.access,
            };
            // Gated: the statement's first lock only (it holds nothing
            // before; once ungated, the others are taken as usual). A local
            // gate ready on arrival opens at once.
            let (t, w) = (&need.target, &mut self.wakeups);
            let outcome = match &stmt.gate {
                Some(gate) => {
                    let opens = match gate {
                        Gate::Local => GateOpens::WhenReady,
                        Gate::Coordinated(_) => GateOpens::OnUngate,
                    };
                    self.locks.acquire_gated(stmt.owner, t, mode, opens, now, w)
                }
                None => self.locks.acquire(stmt.owner, t, mode, now, w),
            };
            let failure = match outcome {
                Ok(Acquire::Granted { newly }) => {
                    if matches!(stmt.gate, Some(Gate::Local)) {
                        stmt.gate = None;
                    }
                    self.granted(&mut stmt, need, newly, now);
                    continue;
                }
                Ok(Acquire::Waiting(ticket)) => {
                    self.counters.lock_waits.fetch_add(1, Ordering::Relaxed);
                    self.counters.lock_waits_by_table[table_slot(&stmt.plan)]
                        .fetch_add(1, Ordering::Relaxed);
                    let owner = stmt.owner;
                    let prev = self.parked.insert(
                        owner,
                        Parked {
                            stmt,
                            waiting: need.clone(),
                            ticket,
                            since: now,
                        },
                    );
                    debug_assert!(prev.is_none(), "one statement per transaction at a time");
                    self.needs = needs;
                    return;
                }
                Ok(Acquire::Abort(cause)) => {
                    self.counters.count_victim(cause);
                    Error::Aborted(cause)
                }
                Err(e) => e,
            };
            self.needs = needs;
            self.finish(stmt, Err(failure));
            return;
        }
        self.needs = needs;
        if let Some(Gate::Coordinated(notice)) = stmt.gate.take() {
            // Never gated here (nothing to lock): ready for good.
            notice.send(true);
        }
        let result =
            self.store
                .execute_recorded(stmt.txn, &stmt.plan, &stmt.params, Some(&mut stmt.ops));
        if result.is_ok() && stmt.lock.end_row {
            self.end_incremented_rows(&stmt);
        }
        if let (Ok(_), Some(r)) = (&result, stmt.lock.ends_piece) {
            self.end_piece(stmt.owner, Some(r));
        }
        self.finish(stmt, result);
    }

    /// Runtime Pipelining, after a blind increment that ends its row's part
    /// of the piece (`LockSpec::end_row`): the member locks on the rows it
    /// wrote become the group's nexus locks, for a transaction that has done
    /// nothing to the row but increment it (and read it), as at the end of
    /// the piece.
    fn end_incremented_rows(&mut self, stmt: &Stmt) {
        let LockClass::Member(g) = stmt.lock.class else {
            return;
        };
        if !stmt.lock.callas_deps {
            return;
        }
        let owner = stmt.owner;
        for i in 0..self.needs.len() {
            if self.needs[i].access != Access::Write {
                continue;
            }
            let only_added = self
                .nexus
                .on(&self.needs[i].target)
                .iter()
                .any(|u| u.txn == owner && u.write == 0 && u.add != 0);
            if only_added {
                let target = self.needs[i].target.clone();
                self.locks.downgrade(
                    owner,
                    &target,
                    LockClass::Member(g),
                    LockClass::Nexus(g),
                    &mut self.wakeups,
                );
            }
        }
    }

    /// A lock of the statement was granted (`newly`: not already held).
    fn granted(&mut self, stmt: &mut Stmt, need: &LockNeed, newly: bool, now: Instant) {
        let short = short_lived(&stmt.lock, need.access);
        if newly && !short {
            if self.held_since.len() >= HELD_SINCE_MAX && !self.held_since.contains_key(&stmt.owner)
            {
                // Owners whose end never came here (a coordinator that
                // vanished): the counters are statistics, the bound is not.
                self.held_since.clear();
            }
            let slot = table_slot(&stmt.plan) as u8;
            let held = self.held_since.entry(stmt.owner).or_default();
            if !held.iter().any(|(t, _)| *t == slot) {
                held.push((slot, now));
            }
        }
        if let (LockClass::Member(g), true) = (stmt.lock.class, stmt.lock.callas_deps) {
            self.callas_granted(stmt, need, g);
        }
        if self.base_granted(stmt, need, short) {
            stmt.dirty = true;
        } else if newly && short {
            stmt.short.push(need.clone());
        }
    }

    /// Callas, after a member lock on `target` was granted: the same-group
    /// transactions with nexus locks there, or on a row or range that
    /// overlaps it (`NexusUses`), that this access depends on, column by
    /// column (it read or overwrote what they wrote, or scanned a row they
    /// inserted or deleted; at serializable also: it wrote what they read,
    /// or inserted or deleted a row in a range they scanned; read committed
    /// ignores anti-dependencies, DESIGN 4.4). Those whose writes are
    /// uncommitted (Runtime Pipelining) take this transaction down if they
    /// abort.
    fn callas_granted(&mut self, stmt: &mut Stmt, need: &LockNeed, g: u32) {
        let owner = stmt.owner;
        let mine = ColUse::of(owner, stmt.plan.access());
        let serializable = stmt.lock.serializable;
        let (groups, store, dependants) =
            (&self.callas_groups, &self.store, &mut self.rp_dependants);
        self.nexus
            .for_each_conflict(&need.target, &mine, !stmt.lock.exact_callas_deps, |u, c| {
                if groups.get(&u.txn) != Some(&g)
                    || !(c.sees || (serializable && c.overwrites_read))
                {
                    return;
                }
                if !stmt.after.contains(&u.txn) {
                    stmt.after.push(u.txn);
                }
                if c.sees && store.has_writes(u.txn) {
                    let ds = dependants.entry(u.txn).or_default();
                    if !ds.contains(&owner) {
                        ds.push(owner);
                    }
                }
            });
        self.nexus.record(&need.target, mine);
    }

    /// Callas: `txn` holds nothing here any more.
    fn forget_callas(&mut self, txn: TxnId) {
        self.callas_groups.remove(&txn);
        self.nexus.forget_txn(txn);
        // Ended here: what waited for its rank here goes on.
        self.rp_reached.remove(&txn);
        self.let_go_held(txn, u32::MAX);
    }

    /// Whether `txn` ended a piece of rank `>= rank` here.
    fn reached(&self, txn: TxnId, rank: u32) -> bool {
        self.rp_reached.get(&txn).is_some_and(|&r| r > rank)
    }

    /// Phase one of two-phase commit here (`PartitionMsg::Prepare`).
    fn prepare(&mut self, txn: TxnId, keep: Option<TxnId>, hold: bool, reply: Reply<Vote>) {
        // Nothing can make a live participant refuse yet (no
        // constraint is deferred to commit, and no log can fail);
        // a participant that wrote nothing is done after phase one
        // unless told to `hold` its locks until phase two.
        // A BASE subtransaction that ran statements here logs their
        // results even if it wrote nothing: they are its context.
        let context = self.base_results.remove(&txn);
        if self.store.has_writes(txn) || context.is_some() {
            match &mut self.wal {
                Some(wal) => {
                    if let Some(c) = context {
                        wal.log_base(c, false);
                    }
                    wal.prepare(&self.store, txn, reply)
                }
                None => reply.send(Vote::Yes),
            }
        } else {
            if !hold {
                self.end_txn(txn, keep, true);
            }
            match &self.wal {
                Some(wal) => wal.after_durable(reply, Vote::ReadOnly),
                None => reply.send(Vote::ReadOnly),
            }
        }
    }

    /// Callas, Runtime Pipelining: a piece of `owner` ended here (its last
    /// statement ran here, or its coordinator said so): its member locks
    /// become nexus locks, and its rank (if any) counts as reached here.
    fn end_piece(&mut self, owner: TxnId, rank: Option<u32>) {
        let Some(&g) = self.callas_groups.get(&owner) else {
            return;
        };
        self.locks.downgrade_all(
            owner,
            LockClass::Member(g),
            LockClass::Nexus(g),
            &mut self.wakeups,
        );
        if let Some(r) = rank {
            let reached = self.rp_reached.entry(owner).or_default();
            *reached = (*reached).max(r + 1);
            let reached = *reached;
            self.let_go_held(owner, reached);
        }
    }

    /// Lets go, to be run by `process_wakeups`, the statements held for a
    /// rank of `txn` below `reached`.
    fn let_go_held(&mut self, txn: TxnId, reached: u32) {
        if self.rank_held.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.rank_held.len() {
            match self.rank_held[i].0.lock.after_rank {
                Some((t, r)) if t == txn && r < reached => self.let_go(i),
                _ => i += 1,
            }
        }
    }

    /// Lets the `i`th held statement go.
    fn let_go(&mut self, i: usize) {
        let (mut stmt, since) = self.rank_held.remove(i);
        let ns = now().saturating_duration_since(since).as_nanos() as u64;
        self.counters.rank_hold_ns.fetch_add(ns, Ordering::Relaxed);
        stmt.lock.after_rank = None;
        self.rank_ready.push_back(stmt);
    }

    /// Fails the statement `owner` has held here, if any (it ended).
    fn drop_held(&mut self, owner: TxnId) {
        if let Some(i) = self.rank_held.iter().position(|(h, _)| h.owner == owner) {
            let (stmt, _) = self.rank_held.remove(i);
            stmt.reply.send(Err(Error::Aborted(AbortCause::Cascade)));
        }
    }

    /// Ends a statement: releases its short locks and answers. A BASE
    /// statement sent with the local-transaction optimization is its own
    /// alkaline subtransaction: committed (or rolled back) here at once.
    fn finish(&mut self, mut stmt: Stmt, result: Result<QueryResult>) {
        self.release_short(stmt.owner, &mut stmt.short);
        if let (Some(b), Some(_), Ok(r)) = (stmt.base, &self.wal, &result) {
            let c = self
                .base_results
                .entry(stmt.txn)
                .or_insert_with(|| BaseContext {
                    sub: stmt.txn,
                    owner: b.owner,
                    intro: None,
                    entries: Vec::new(),
                });
            if let Some(intro) = &stmt.intro {
                c.intro = Some((intro.0.clone(), intro.1.clone()));
            }
            c.entries.push(BaseEntry {
                seq: b.seq,
                columns: r.columns.to_vec(),
                rows: r.rows.clone(),
                affected: r.affected,
            });
        }
        let (ops, dirty, after) = (stmt.ops, stmt.dirty, stmt.after);
        let executed = result.map(|result| Executed {
            result,
            ops,
            dirty,
            after,
        });
        match stmt.base {
            Some(b) if b.autocommit && executed.is_ok() => {
                self.commit(stmt.txn, Some(b.owner), stmt.reply, executed);
            }
            Some(b) if b.autocommit => {
                self.base_results.remove(&stmt.txn);
                if let Some(wal) = &mut self.wal {
                    wal.abort(stmt.txn);
                }
                stmt.reply.send(executed);
                self.end_txn(stmt.txn, Some(b.owner), false);
            }
            _ => stmt.reply.send(executed),
        }
    }

    /// Releases a statement's short locks (reads at read committed). A
    /// Callas member's read lock goes too: at read committed a read need
    /// not keep out later writers of other groups (circularity there is a
    /// cycle of write and read dependencies, which the writers' nexus
    /// locks prevent).
    fn release_short(&mut self, txn: TxnId, short: &mut Vec<LockNeed>) {
        if short.is_empty() {
            return;
        }
        for need in short.drain(..) {
            self.locks
                .release(txn, &need.target, need.access, &mut self.wakeups);
        }
        self.process_wakeups();
    }

    /// Acts on what the lock table reported: resumes granted statements and
    /// fails the ones chosen as victims. Resuming can produce more wakeups,
    /// so this loops until none are left.
    fn process_wakeups(&mut self) {
        loop {
            let Some(w) = self.wakeups.pop() else {
                // Statements let go from their rank hold run in order,
                // one at a time, each with the wakeups it makes.
                match self.rank_ready.pop_front() {
                    Some(stmt) => {
                        self.run_statement(stmt);
                        continue;
                    }
                    None => break,
                }
            };
            match w {
                Wakeup::Granted { txn, ticket } => {
                    let Some(p) = self.parked.remove(&txn) else {
                        continue;
                    };
                    debug_assert_eq!(p.ticket, ticket);
                    let at = now();
                    let waited = at.saturating_duration_since(p.since).as_nanos() as u64;
                    self.counters
                        .lock_wait_ns
                        .fetch_add(waited, Ordering::Relaxed);
                    self.counters.lock_wait_ns_by_table[table_slot(&p.stmt.plan)]
                        .fetch_add(waited, Ordering::Relaxed);
                    let mut stmt = p.stmt;
                    self.granted(&mut stmt, &p.waiting, true, at);
                    self.run_statement(stmt);
                }
                Wakeup::Aborted { txn, ticket, cause } => {
                    let Some(p) = self.parked.remove(&txn) else {
                        continue;
                    };
                    debug_assert_eq!(p.ticket, ticket);
                    self.counters.count_victim(cause);
                    self.finish(p.stmt, Err(Error::Aborted(cause)));
                }
                Wakeup::Released { txn } => self.answer_releases(txn, true),
            }
        }
        self.locks.take_gate_changes(&mut self.gate_changes);
        let mut changes = std::mem::take(&mut self.gate_changes);
        let mut ungated = false;
        for (txn, ticket, ready) in changes.drain(..) {
            let Some(p) = self.parked.get_mut(&txn).filter(|p| p.ticket == ticket) else {
                continue;
            };
            match &p.stmt.gate {
                Some(Gate::Coordinated(notice)) => notice.send(ready),
                Some(Gate::Local) if ready && self.locks.is_ready(ticket) => {
                    p.stmt.gate = None;
                    self.locks.ungate(ticket, &mut self.wakeups);
                    ungated = true;
                }
                _ => {}
            }
        }
        self.gate_changes = changes;
        if ungated {
            // The grants it made.
            self.process_wakeups();
            return;
        }
        let mut progressed = std::mem::take(&mut self.progressed);
        self.locks.take_released_held_back(&mut progressed);
        for holder in progressed.drain(..) {
            let owner = self.forked.get(&holder).copied().unwrap_or(holder);
            self.answer_releases(owner, false);
        }
        self.progressed = progressed;
    }
}
