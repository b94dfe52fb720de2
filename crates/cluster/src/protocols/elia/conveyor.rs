//! The Conveyor Belt (seed 004 Algorithm 2): the token, the servers'
//! queues of global operations, and the state updates the token carries.
//!
//! ```text
//!   token task (one per cluster: the token itself)
//!   ┌──────────────────────────────────────────────────────────────────┐
//!   │ arrive at p:  apply every update <u, q> with q != p, in token     │
//!   │               order (a replay transaction each); drop p's own     │
//!   │               (they have been everywhere)                         │
//!   │               Q' = atomic snapshot of p's queue                   │
//!   │               hand each global of Q' its turn; they run at once,  │
//!   │               each appending its update at its commit point       │
//!   │               wait until all of Q' ended; append their updates    │
//!   │ idle (no update in flight, every queue empty): park until a       │
//!   │               global arrives                                      │
//!   │ pass to p+1 over the link (its delay between the two servers)    │
//!   └──────────────────────────────────────────────────────────────────┘
//! ```
//!
//! What it guarantees: the updates of global operations are applied at
//! every server in one order, the token's; a server applies the updates
//! it has not seen before it runs its own globals; a global's update is
//! appended while its transaction still holds its locks (before the commit
//! releases them), so two conflicting globals append in the order the
//! engine serialized them (seed 004 section 5, "Tracing the sequential
//! order"). The snapshot of the queue keeps the token moving however fast
//! new globals arrive.
//!
//! Hot path: `wait_turn`, `Turn::append` and the token's visit run once
//! per global; `apply` once per update at every other server (a batch per
//! transaction). Local calls never come here.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use brine_check::Op;
use brine_core::{Error, NodeId, Result, TxnId, Value};
use brine_sql::Plan;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::coordinator::{abort, commit, ProcCtx, Retries, Sent, Shared, TxnState};
use crate::protocol::Mutation;

/// One mutating statement of a global, with its bound values.
pub struct Recorded {
    /// Its declared name in the procedure.
    pub name: String,
    pub plan: Arc<Plan>,
    pub params: Vec<Value>,
}

/// What one global operation changed: its mutating statements with their
/// bound values, in the order it ran them.
pub struct Update {
    pub txn: TxnId,
    /// The server that ran it.
    pub origin: u32,
    /// Its number in token order (for the read replicas' primary: in
    /// commit order), from 1.
    pub seq: u64,
    pub procedure: String,
    pub statements: Vec<Recorded>,
    /// When the run records a history: the rows its writes installed and
    /// their versions at its own server, in order (a replica's replay
    /// installs its own versions, which the history then names by these).
    pub versions: Vec<Written>,
}

/// A global operation's turn at the token holder. Dropping it tells the
/// token the operation ended.
pub struct Turn {
    appended: Arc<Mutex<Vec<Arc<Update>>>>,
    sequence: Arc<AtomicU64>,
    _done: mpsc::Sender<()>,
}

impl Turn {
    /// The operation reached its commit point, its locks held: its update
    /// takes the next number and its place in token order.
    pub fn append(&self, make: impl FnOnce(u64) -> Update) -> Arc<Update> {
        let mut appended = self.appended.lock();
        let seq = self.sequence.fetch_add(1, Ordering::AcqRel) + 1;
        let u = Arc::new(make(seq));
        appended.push(u.clone());
        u
    }

    /// Its commit failed after all: the update is taken back.
    pub fn withdraw(&self, update: &Arc<Update>) {
        self.appended.lock().retain(|u| !Arc::ptr_eq(u, update));
    }
}

/// The most global operations one server's queue holds (each client has
/// one call at a time, so only a runaway client count reaches it).
const MAX_WAITING: usize = 1 << 16;

/// The servers' queues and the token.
pub struct Conveyor {
    servers: u32,
    queues: Vec<Mutex<Vec<oneshot::Sender<Turn>>>>,
    /// Updates a server's operations made outside the token's turns (the
    /// read-replicas baseline's primary), in commit order, for the token
    /// to pick up when it visits.
    outboxes: Vec<Mutex<Vec<Arc<Update>>>>,
    wake: Notify,
    running: AtomicBool,
    /// Updates the token carries that some server has not applied yet.
    carried: AtomicUsize,
    /// When the run records a history: a version a replica installed by
    /// a replay -> the version the global installed at its server.
    replayed: Mutex<HashMap<u64, u64>>,
    /// The last update number given (token order), the last one each
    /// server applied, and each session's last write (read-replicas).
    sequence: Arc<AtomicU64>,
    applied: Vec<AtomicU64>,
    applied_moved: Notify,
    sessions: Mutex<HashMap<u64, u64>>,
    /// The update log's statements, prepared on first use.
    log: std::sync::OnceLock<Arc<super::log::Statements>>,
}

/// The protocol's counters, by slot (`super::COUNTERS`).
pub mod slot {
    pub const LOCAL: usize = 0;
    pub const GLOBAL: usize = 1;
    pub const COMMUTATIVE: usize = 2;
    pub const ROUTED_AWAY: usize = 3;
    pub const TOKEN_HOPS: usize = 4;
    pub const TURNS: usize = 5;
    pub const UPDATES_APPLIED: usize = 6;
    pub const APPLY_RETRIES: usize = 7;
    pub const REGENERATIONS: usize = 8;
}

impl Conveyor {
    pub fn new(servers: u32) -> Conveyor {
        Conveyor {
            servers,
            queues: (0..servers).map(|_| Mutex::new(Vec::new())).collect(),
            outboxes: (0..servers).map(|_| Mutex::new(Vec::new())).collect(),
            wake: Notify::new(),
            running: AtomicBool::new(false),
            carried: AtomicUsize::new(0),
            replayed: Mutex::new(HashMap::new()),
            sequence: Arc::new(AtomicU64::new(0)),
            applied: (0..servers).map(|_| AtomicU64::new(0)).collect(),
            applied_moved: Notify::new(),
            sessions: Mutex::new(HashMap::new()),
            log: std::sync::OnceLock::new(),
        }
    }

    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// Lines 16-21 at `at`, the token's holder: the atomic snapshot of its
    /// queue, every global of it run at once; their updates, in token
    /// order, once every one of them ended.
    pub async fn run_turn(&self, shared: &Shared, at: u32) -> Vec<Arc<Update>> {
        let waiting = std::mem::take(&mut *self.queues[at as usize].lock());
        if waiting.is_empty() {
            return Vec::new();
        }
        let appended = Arc::new(Mutex::new(Vec::new()));
        let (done, mut ended) = mpsc::channel::<()>(1);
        for w in waiting {
            let _ = w.send(Turn {
                appended: appended.clone(),
                sequence: self.sequence.clone(),
                _done: done.clone(),
            });
        }
        drop(done);
        // Every turn dropped: every global of the snapshot ended.
        while ended.recv().await.is_some() {}
        shared.counters.protocol.add(slot::TURNS, 1);
        let out = std::mem::take(&mut *appended.lock());
        out
    }

    /// Whether a global waits at `server`.
    pub fn queued(&self, server: u32) -> bool {
        !self.queues[server as usize].lock().is_empty()
    }

    /// Waits until a global is queued somewhere (or `within` passed).
    pub async fn queued_within(&self, within: Duration) {
        let _ = tokio::time::timeout(within, self.wake.notified()).await;
    }

    /// The last update number given.
    pub fn sequence(&self) -> u64 {
        self.sequence.load(Ordering::Acquire)
    }

    /// The token's holder numbers on from `last` (the token's count).
    pub fn number_from(&self, last: u64) {
        self.sequence.fetch_max(last, Ordering::AcqRel);
    }

    /// The token is driven from outside (`ring.rs`: across processes), so
    /// no task of this process carries it.
    pub fn driven_elsewhere(&self) {
        self.running.store(true, Ordering::Release);
    }

    /// Queues a global operation at `server` and waits for its turn at the
    /// token. Starts the token on first use.
    pub async fn wait_turn(self: &Arc<Self>, shared: &Arc<Shared>, server: u32) -> Result<Turn> {
        self.start(shared);
        let (tx, rx) = oneshot::channel();
        {
            let mut queue = self.queues[server as usize].lock();
            if queue.len() >= MAX_WAITING {
                return Err(Error::Bound(format!(
                    "elia: {MAX_WAITING} global operations already wait for the token at server \
                     {server}"
                )));
            }
            queue.push(tx);
        }
        self.wake.notify_one();
        rx.await.map_err(|_| {
            Error::Internal("elia: the token stopped before this global's turn".into())
        })
    }

    fn start(self: &Arc<Self>, shared: &Arc<Shared>) {
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(token(self.clone(), Arc::downgrade(shared)));
        }
    }

    fn idle(&self) -> bool {
        self.queues.iter().all(|q| q.lock().is_empty())
            && self.outboxes.iter().all(|o| o.lock().is_empty())
    }

    /// An operation of `server` that ran outside the token reached its
    /// commit point, its locks held: its update joins the token at the
    /// token's next visit, in commit order.
    /// Numbered in commit order (`Update::seq`).
    pub fn publish(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        server: u32,
        make: impl FnOnce(u64) -> Update,
    ) -> Arc<Update> {
        self.start(shared);
        let update = {
            let mut outbox = self.outboxes[server as usize].lock();
            let seq = self.sequence.fetch_add(1, Ordering::AcqRel) + 1;
            let u = Arc::new(make(seq));
            outbox.push(u.clone());
            u
        };
        self.wake.notify_one();
        update
    }

    /// The update log's statements (`log.rs`).
    pub fn log(&self, shared: &Shared) -> Result<Arc<super::log::Statements>> {
        if let Some(st) = self.log.get() {
            return Ok(st.clone());
        }
        let st = Arc::new(super::log::Statements::prepare(shared)?);
        Ok(self.log.get_or_init(|| st).clone())
    }

    /// Numbers updates on from `last` (after a restart).
    pub fn resume_numbering(&self, last: u64) {
        self.sequence.fetch_max(last, Ordering::AcqRel);
        for a in &self.applied {
            a.fetch_max(last, Ordering::AcqRel);
        }
    }

    /// Session `session`'s write numbered `seq` committed at `server`.
    pub fn wrote(&self, session: Option<u64>, server: u32, seq: u64) {
        self.applied_at(server, seq);
        if let Some(s) = session {
            let mut sessions = self.sessions.lock();
            let last = sessions.entry(s).or_insert(0);
            *last = (*last).max(seq);
        }
    }

    fn applied_at(&self, server: u32, seq: u64) {
        self.applied[server as usize].fetch_max(seq, Ordering::AcqRel);
        self.applied_moved.notify_waiters();
    }

    /// Waits until `server` applied every write `session` made (a
    /// session reads its own writes at any replica).
    pub async fn caught_up(&self, server: u32, session: Option<u64>) {
        let Some(s) = session else { return };
        let Some(need) = self.sessions.lock().get(&s).copied() else {
            return;
        };
        loop {
            let moved = self.applied_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.applied[server as usize].load(Ordering::Acquire) >= need {
                return;
            }
            moved.await;
        }
    }

    /// Its commit failed after all.
    pub fn retract(&self, server: u32, update: &Arc<Update>) {
        self.outboxes[server as usize]
            .lock()
            .retain(|u| !Arc::ptr_eq(u, update));
    }

    /// Names every version in `ops` that a replay installed by the version
    /// its global installed (see `Update::versions`).
    pub fn rewrite(&self, ops: &mut Vec<Op>) {
        // The update log's tables are the protocol's bookkeeping, not the
        // application's data: no read of the application's touches them.
        ops.retain(|op| {
            let table = match op {
                Op::Read { table, .. } | Op::Write { table, .. } | Op::RangeRead { table, .. } => {
                    table
                }
            };
            !table.starts_with("elia_")
        });
        let map = self.replayed.lock();
        if map.is_empty() {
            return;
        }
        let name = |v: &mut u64| {
            if let Some(&orig) = map.get(v) {
                *v = orig;
            }
        };
        for op in ops.iter_mut() {
            match op {
                Op::Read { version, .. } => name(version),
                Op::Write { prev, .. } => name(prev),
                Op::RangeRead { seen, .. } => seen.iter_mut().for_each(|s| name(&mut s.version)),
            }
        }
    }

    /// A replay at `server` installed the versions its `ops` write: each
    /// is named by the original's write of the same row, in order. A row
    /// the original wrote that the replica lacks (a local row of the
    /// origin, which no operation of this server reads) has no replay.
    fn name_replayed(&self, ops: &[Op], originals: &[Written], server: u32, txn: TxnId) {
        let mut used = vec![false; originals.len()];
        let mut map = self.replayed.lock();
        for w in writes_of(ops)
            .into_iter()
            .filter(|w| !w.table.starts_with("elia_"))
        {
            let found = originals
                .iter()
                .enumerate()
                .find(|(i, o)| !used[*i] && o.table == w.table && o.key == w.key);
            match found {
                Some((i, o)) => {
                    used[i] = true;
                    map.insert(w.version, o.version);
                }
                None => tracing::error!(
                    server,
                    %txn,
                    table = %w.table,
                    "elia: a replay wrote a row its global did not"
                ),
            }
        }
    }

    /// Waits until no global waits for the token and every server applied
    /// every update (call it when no call runs: the replicas then agree on
    /// everything globals wrote). An error after `within`.
    pub async fn settled(&self, within: Duration) -> Result<()> {
        let until = Instant::now() + within;
        while self.carried.load(Ordering::Acquire) > 0 || !self.idle() {
            if Instant::now() >= until {
                return Err(Error::Internal(format!(
                    "elia: {} updates still in flight after {} s",
                    self.carried.load(Ordering::Acquire),
                    within.as_secs_f64()
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }
}

/// A row a write installed, and its version.
pub struct Written {
    table: String,
    key: brine_core::Key,
    version: u64,
}

/// The rows `ops` write and the versions they install, in order.
pub fn writes_of(ops: &[Op]) -> Vec<Written> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Write {
                table,
                key,
                version,
                ..
            } => Some(Written {
                table: table.clone(),
                key: key.clone(),
                version: *version,
            }),
            _ => None,
        })
        .collect()
}

/// The token: visits the servers in ring order for as long as the cluster
/// lives.
async fn token(conveyor: Arc<Conveyor>, shared: Weak<Shared>) {
    let n = conveyor.servers;
    let mut carried: Vec<Arc<Update>> = Vec::new();
    let mut at = 0u32;
    loop {
        let Some(sh) = shared.upgrade() else { return };
        // Lines 11-15: apply the others' updates in token order; one's own
        // have been everywhere. (The mutation applies them backwards.)
        let mut order: Vec<&Arc<Update>> = carried.iter().filter(|u| u.origin != at).collect();
        if sh.mutation == Some(Mutation::EliaOutOfOrder) {
            order.reverse();
        }
        if let Err(e) = apply(&sh, &conveyor, at, &order).await {
            tracing::error!(
                server = at,
                "elia: applying the token's updates failed: {e}"
            );
        }
        carried.retain(|u| u.origin != at);
        carried.extend(conveyor.outboxes[at as usize].lock().drain(..));
        conveyor.carried.store(carried.len(), Ordering::Release);
        // Lines 16-21: the atomic snapshot of the queue, run at once.
        let queued = conveyor.queues[at as usize].lock().len();
        if queued > 0 {
            // In flight while they run.
            conveyor
                .carried
                .store(carried.len() + queued, Ordering::Release);
            carried.extend(conveyor.run_turn(&sh, at).await);
            conveyor.carried.store(carried.len(), Ordering::Release);
        }
        // Nothing to carry and nobody waiting: the token rests here until
        // a global arrives (it would only circle).
        let notified = conveyor.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if carried.is_empty() && conveyor.idle() {
            drop(sh);
            notified.await;
            continue;
        }
        // Line 22: pass the token over the link.
        let next = (at + 1) % n;
        if next != at {
            let (tx, rx) = oneshot::channel();
            sh.link.send(NodeId(at), NodeId(next), move || {
                let _ = tx.send(());
            });
            drop(sh);
            let _ = rx.await;
            if let Some(sh) = shared.upgrade() {
                sh.counters.protocol.add(slot::TOKEN_HOPS, 1);
            }
        } else {
            drop(sh);
            tokio::task::yield_now().await;
        }
        at = next;
    }
}

/// Updates applied in one replay transaction at most: a visit's updates
/// go in batches, in token order, each batch atomically (a prefix of the
/// token's order is what any server shows at any time).
pub(super) const APPLY_BATCH: usize = 128;

/// Applies `updates` at `server`, in order: their statements with their
/// bound values, a batch per transaction of the oldest age (wait-die never
/// makes it the victim; a victim anyway is run again).
pub(super) async fn apply(
    shared: &Arc<Shared>,
    conveyor: &Conveyor,
    server: u32,
    updates: &[&Arc<Update>],
) -> Result<()> {
    for batch in updates.chunks(APPLY_BATCH) {
        apply_batch(shared, conveyor, server, batch).await?;
    }
    Ok(())
}

async fn apply_batch(
    shared: &Arc<Shared>,
    conveyor: &Conveyor,
    server: u32,
    batch: &[&Arc<Update>],
) -> Result<()> {
    // Token order is number order (the mutation reverses it on purpose).
    debug_assert!(
        shared.mutation == Some(Mutation::EliaOutOfOrder)
            || batch.windows(2).all(|w| w[0].seq < w[1].seq),
        "elia: a batch out of number order"
    );
    let node = NodeId(server);
    let p = server as usize;
    let mut n = 0u32;
    loop {
        n += 1;
        let txn = shared.new_txn(Some(1));
        // Recording (when the run records) only to learn the versions the
        // replays install; the batch is not a transaction of the history.
        let state = Arc::new(Mutex::new(TxnState::begin(shared, txn, None)));
        let ctx = ProcCtx::new(shared.clone(), node, None, state.clone());
        let lock = ctx.lock_spec(None, None);
        let mut failed = None;
        // Where each update's recorded operations end.
        let mut ends = Vec::with_capacity(batch.len());
        'updates: for u in batch {
            for s in &u.statements {
                if let Err(e) = ctx
                    .execute_on(&[p], txn, &s.plan, s.params.clone(), lock, Sent::default())
                    .await
                {
                    failed = Some(e);
                    break 'updates;
                }
            }
            ends.push(state.lock().rec.as_ref().map_or(0, |r| r.ops.len()));
        }
        // The batch's update rows, in the same transaction (`log.rs`).
        if failed.is_none() {
            let kept = async {
                let st = conveyor.log(shared)?;
                for u in batch {
                    super::log::keep_update(&ctx, &st, p, u).await?;
                }
                Ok::<(), Error>(())
            }
            .await;
            if let Err(e) = kept {
                failed = Some(e);
            }
        }
        let rec = state.lock().rec.take();
        let result = match failed {
            Some(e) => {
                abort(shared, node, &state).await;
                Err(e)
            }
            None => {
                // Named before the commit lets anyone read them.
                if let Some(rec) = rec {
                    let mut from = 0;
                    for (u, &end) in batch.iter().zip(&ends) {
                        conveyor.name_replayed(&rec.ops[from..end], &u.versions, server, u.txn);
                        from = end;
                    }
                }
                commit(shared, node, &state).await
            }
        };
        match result {
            Ok(()) => {
                shared
                    .counters
                    .protocol
                    .add(slot::UPDATES_APPLIED, batch.len() as u64);
                if let Some(last) = batch.iter().map(|u| u.seq).max() {
                    conveyor.applied_at(server, last);
                }
                return Ok(());
            }
            Err(Error::Aborted(cause)) => {
                shared.counters.protocol.add(slot::APPLY_RETRIES, 1);
                Retries::rerun(shared, cause, n, txn.id).await;
            }
            Err(e) => return Err(e),
        }
    }
}
