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
//!
//! What a protocol changes here it changes through its [`Rules`]: the
//! partition is generic over them, and names no protocol.
//!
//! - `statement.rs`: a statement's path (locks, execution, the answer) and
//!   the wakeups the lock table reports;
//! - `ending.rs`: phase one, commit, abort and the release of locks;
//! - `owned.rs`: locks owned across subtransactions, released in stages
//!   behind release-order dependencies (used by Salt's and Callas' rules);
//! - `rules.rs`: the rules interface and the engine's plain rules.

mod contexts;
mod ending;
#[cfg(test)]
pub(crate) mod harness;
mod owned;
mod rules;
mod statement;

pub use contexts::{locked_again, recorded_ops, Contexts};
pub use owned::Owned;
pub use rules::{Ending, Plain, Prepared, Rules};

use rustc_hash::FxHashMap as HashMap;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_check::Op;
use brine_core::{AbortCause, Access, Catalog, Error, LockNeed, PartitionId, Result, TxnId, Value};
use brine_lock::{LockConfig, LockTable, StandardCompat, Ticket, Wakeup};
use brine_sql::Plan;
use brine_storage::PartitionStore;
use tokio::sync::mpsc;

use crate::durability::PartitionWal;
use crate::message::{
    Executed, Gate, LockSpec, PartitionMsg, PartitionStatus, Reply, StmtExt, SubStmt,
};

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
    /// The protocol's own counters here (`Protocol::counters` names
    /// them).
    pub protocol: crate::stats::ProtocolCounters,
}

/// At most this many transactions' hold start times are kept.
const HELD_SINCE_MAX: usize = 1 << 20;

/// Per-table counter slots.
pub const TABLE_SLOTS: usize = 32;

fn table_slot(plan: &brine_sql::Plan) -> usize {
    (plan.table().0 as usize).min(TABLE_SLOTS - 1)
}

impl PartitionCounters {
    pub(crate) fn count_victim(&self, cause: AbortCause) {
        let c = match cause {
            AbortCause::WaitDie => &self.victims_wait_die,
            AbortCause::Deadlock => &self.victims_deadlock,
            AbortCause::LockTimeout => &self.victims_timeout,
            AbortCause::Cascade | AbortCause::Validation | AbortCause::Unreachable => return,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A statement in progress at this partition.
pub struct Stmt {
    /// The transaction whose writes it makes (a subtransaction, for a
    /// statement of one).
    pub txn: TxnId,
    /// Who holds its locks: `txn`, or the transaction `txn` is a
    /// subtransaction of.
    pub owner: TxnId,
    pub sub: Option<SubStmt>,
    /// It accessed a row another transaction wrote and has not released
    /// (Salt's rules say so: a read-after-write dependency).
    pub dirty: bool,
    /// Transactions it depends on (Callas' rules: same-group
    /// transactions whose nexus locks it met).
    pub after: Vec<TxnId>,
    /// The call it belongs to, for the log (`PartitionMsg::Execute`).
    pub call: Option<Arc<(String, Vec<Value>)>>,
    pub plan: Arc<Plan>,
    pub params: Vec<Value>,
    pub lock: LockSpec,
    /// What the protocol adds for its rules here.
    pub ext: StmtExt,
    pub reply: Reply<Result<Executed>>,
    /// Short-duration locks granted so far, released when it ends.
    short: Vec<LockNeed>,
    /// What it read and wrote, when the run records a history.
    ops: Vec<Op>,
    /// Gated until ungated (`PartitionMsg::Execute`).
    gate: Option<Gate>,
}

impl Stmt {
    /// What it read and wrote so far, when the run records a history.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
}

/// A statement waiting for a lock.
pub struct Parked {
    pub stmt: Stmt,
    /// The need it waits for, and since when.
    waiting: LockNeed,
    ticket: Ticket,
    since: Instant,
}

/// One partition: its rows, its lock table, its log and its protocol's
/// rules (`rules`, with their state here).
pub struct Partition<R> {
    pub id: PartitionId,
    /// When the run records a history (see [`PartitionParts::history`]).
    history: Option<Arc<crate::history::HistorySink>>,
    pub store: PartitionStore,
    pub locks: LockTable,
    /// Statements waiting for a lock, by lock owner (one each).
    pub parked: HashMap<TxnId, Parked>,
    pub counters: Arc<PartitionCounters>,
    // Scratch buffers, reused so the hot path does not allocate.
    pub needs: Vec<LockNeed>,
    pub wakeups: Vec<Wakeup>,
    /// The partition's write-ahead log (`None`: durability off).
    pub wal: Option<PartitionWal>,
    /// Scratch: holders whose held-back releases progressed.
    progressed: Vec<TxnId>,
    /// Scratch: readiness changes of gated requests.
    gate_changes: Vec<(TxnId, Ticket, bool)>,
    /// Since when each transaction (by lock owner) has held locks on each
    /// table here, for the hold-time counters.
    held_since: HashMap<TxnId, smallvec::SmallVec<[(u8, Instant); 4]>>,
    /// The cluster detector's doorbell from its last look, with the lock
    /// table's `wait_for_changes` then: rung (once) after a message that
    /// changed it, so a cycle through this and another partition is looked
    /// for at once instead of at the detector's next period.
    nudge: Option<(crate::message::Nudge, u64)>,
    /// Phase-one requests the rules hold back (`Rules::prepare_waits`),
    /// asked again whenever a transaction ends here.
    held_prepares: Vec<HeldPrepare>,
    /// Held phase-one requests are being asked again.
    retrying_prepares: bool,
    /// The protocol's rules and their state here.
    pub rules: R,
}

/// A phase-one request held back by the rules: the transaction, its
/// ending, whether to hold its locks, and where its vote goes.
pub(crate) type HeldPrepare = (
    TxnId,
    Ending,
    bool,
    crate::message::Reply<crate::message::Vote>,
);

/// What a partition is made of before its protocol's rules join
/// (`Protocol::spawn_partition`).
pub struct PartitionParts {
    pub id: PartitionId,
    pub catalog: Arc<Catalog>,
    pub lock_config: LockConfig,
    pub counters: Arc<PartitionCounters>,
    /// Durability: the store recovery rebuilt, and the log.
    pub wal: Option<(PartitionStore, PartitionWal)>,
    /// When the run records a history: its sink (the partition records
    /// row versions, and what it undid of an orphan it aborted).
    pub history: Option<Arc<crate::history::HistorySink>>,
}

/// The partition's clock: tokio's, so a test on a paused runtime (virtual
/// time) sees lock waits and timeouts replay exactly; in a normal runtime it
/// is the system's monotonic clock.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

use brine_storage::VERSION_RANGE_BITS;

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

impl<R: Rules> Partition<R> {
    pub fn new(parts: PartitionParts, rules: R) -> Partition<R> {
        let PartitionParts {
            id,
            catalog,
            lock_config,
            counters,
            wal,
            history,
        } = parts;
        let record = history.is_some();
        let (store, wal) = match wal {
            Some((store, wal)) => (store, Some(wal)),
            None => (PartitionStore::new(catalog), None),
        };
        let mut p = Partition {
            id,
            history,
            store,
            locks: LockTable::new(lock_config, Arc::new(StandardCompat)),
            parked: HashMap::default(),
            counters,
            needs: Vec::new(),
            wakeups: Vec::new(),
            wal,
            progressed: Vec::new(),
            gate_changes: Vec::new(),
            held_since: HashMap::default(),
            nudge: None,
            held_prepares: Vec::new(),
            retrying_prepares: false,
            rules,
        };
        if record {
            // Version ids come from a range of this partition's own, so
            // they are unique in the cluster. A partition with a log may
            // be recovered (restarted, or taken over at another node): it
            // goes on from the versions its log holds, and each of its
            // incarnations draws from a range of its own, at random among
            // 2^23 (what an earlier one drew but never logged, it wrote
            // in the history as aborted or unknown).
            let base = match p.wal {
                Some(_) => (rand::random::<u64>() >> 41).max(1) << VERSION_RANGE_BITS,
                None => u64::from(id.0 + 1) << VERSION_RANGE_BITS,
            };
            p.store.enable_recording(base);
        }
        p
    }

    /// The actor loop. Ends when every sender is gone.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        R::started(&mut self);
        self.process_wakeups();
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
                    R::tick(&mut self);
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
                sub,
                call,
                ext,
                gate,
                reply,
            } => {
                self.counters.statements.fetch_add(1, Ordering::Relaxed);
                let stmt = Stmt {
                    txn,
                    owner: sub.map_or(txn, |s| s.owner),
                    sub,
                    dirty: false,
                    after: Vec::new(),
                    call,
                    plan,
                    params,
                    lock,
                    ext,
                    reply,
                    short: Vec::new(),
                    ops: Vec::new(),
                    gate,
                };
                if let Err(e) = R::arrive(self, &stmt) {
                    stmt.reply.send(Err(e));
                    return;
                }
                if let Some(s) = sub.filter(|s| s.protect) {
                    self.locks.protect(s.owner, &mut self.wakeups);
                    self.process_wakeups();
                }
                if let Some(stmt) = R::admit(self, stmt) {
                    self.run_statement(stmt);
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
            PartitionMsg::Protect { owner } => {
                // Only while the owner holds or waits for something here:
                // over TCP this message may overtake nothing but be
                // overtaken by the owner's release, and protecting an
                // ended transaction would keep it in the lock table for
                // good. Its later statements here carry the protection
                // (`SubStmt::protect`).
                if self.locks.knows(owner) {
                    self.locks.protect(owner, &mut self.wakeups);
                    self.process_wakeups();
                }
            }
            PartitionMsg::Protocol(msg) => {
                if let Err(e) = R::message(self, msg) {
                    tracing::error!(partition = self.id.0, "{e}");
                }
                self.process_wakeups();
            }
            PartitionMsg::Prepare {
                txn,
                ending,
                hold,
                reply,
            } => self.prepare(txn, ending, hold, reply),
            PartitionMsg::Commit {
                txn, ending, reply, ..
            } => self.commit(txn, ending, reply, Ok(())),
            PartitionMsg::Abort { txn, ending, reply } => {
                self.forget_aborted(txn);
                self.end_txn(txn, ending, false);
                reply.send(self.store.undone_writes(txn));
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
                    // A BASE transaction a subtransaction of which
                    // committed here keeps its locks (held under its id,
                    // or forked to a committed subtransaction's): the
                    // restarted coordinator rolls it forward under the
                    // same owner (which must find it running here, not
                    // released), or sends its end again. Its running
                    // subtransactions, which wrote and did not commit,
                    // are aborted.
                    let owner = R::holder_owner(self, txn);
                    if !self.store.has_writes(txn)
                        && self.wal.as_ref().is_some_and(|w| w.has_open_context(owner))
                    {
                        // A statement of it that waited here: its
                        // subtransaction is rolled back, as one (the
                        // statement fails, the owner's locks stay).
                        if let Some(sub) = self.parked.get(&txn).map(|p| p.stmt.txn) {
                            self.forget_aborted(sub);
                            self.end_txn(sub, Ending::Sub { owner: txn }, false);
                        }
                        continue;
                    }
                    tracing::info!(partition = self.id.0, %txn, "aborting a transaction of a restarted coordinator");
                    self.forget_aborted(txn);
                    self.end_txn(txn, Ending::Release, false);
                    // Its coordinator may never have recorded it, and a
                    // pipelined write over its undone one names it.
                    if let Some(h) = &self.history {
                        h.orphan_aborted(txn, self.store.undone_writes(txn));
                    }
                }
                reply.send(in_doubt);
            }
            PartitionMsg::Release {
                owner,
                stages,
                reply,
                ..
            } => {
                R::release(self, owner, stages.into_iter(), reply);
                self.process_wakeups();
            }
            PartitionMsg::Load { table, rows, reply } if self.wal.is_some() => {
                let kept = R::KEEPS_LOADED_ROWS.then(|| rows.clone());
                if let Some(wal) = &mut self.wal {
                    wal.load(&mut self.store, table, rows, reply);
                }
                if let Some(rows) = kept {
                    R::loaded_durably(self, table, rows);
                }
            }
            PartitionMsg::Load { table, rows, reply } => {
                reply.send(R::load(self, table, rows));
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
}
