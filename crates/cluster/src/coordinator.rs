//! The coordinator: runs a transaction's body, routes its statements to the
//! partitions that own the keys, and commits with two-phase commit.
//!
//! ```text
//!  call(proc, args)
//!    │  attempt: TxnId { ts (kept across retries), id (fresh) }
//!    ▼
//!  body(ctx, args) ── ctx.exec(stmt, params) ──► route ──► Execute ──► partition(s)
//!    │                                              ◄── result ───────┘
//!    ▼ body returned Ok
//!  one participant:  Commit ──► ack                           (one round)
//!  several:          Prepare ──► votes ──► Commit to Yes voters  (two rounds)
//!    │ body failed / a statement was a concurrency-control victim
//!    ▼
//!  Abort ──► every participant (acked) ──► backoff ──► retry (bounded)
//! ```
//!
//! The coordinator knows nothing of lock classes: the transaction's
//! [`Protocol`] says how each statement locks. It runs in the caller's task;
//! "coordinator node" is where the link sees its messages come from.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brine_core::schema::partition_of;
use brine_core::{AbortCause, Catalog, Error, NodeId, PartitionId, Result, TxnId, Value};
use brine_lock::LockClass;
use brine_sql::{Plan, QueryResult, Route};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use smallvec::SmallVec;
use tokio::sync::mpsc;

use crate::history::{HistorySink, TxnRecording};
use crate::link::Link;
use crate::message::{Executed, Gate, GateNotice, LockSpec, PartitionMsg, Reply, Vote};
use crate::procedure::PreparedProc;
use crate::protocol::{Isolation, Mutation, Protocol};
use crate::stats::ClusterCounters;
use brine_check::{Op, Outcome};
use futures::stream::{FuturesUnordered, StreamExt};

/// Who ungates a gated statement ([`ProcCtx::execute_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ungater {
    Coordinator,
    Partition,
}

/// What every coordinator shares: the topology and the way to each partition.
pub struct Shared {
    pub catalog: Arc<Catalog>,
    pub link: Link,
    pub partitions: Vec<PartitionRef>,
    pub protocol: Arc<dyn Protocol>,
    pub isolation: Isolation,
    pub retry: RetryPolicy,
    pub counters: ClusterCounters,
    pub next_txn: AtomicU64,
    /// Age transactions by the wall clock rather than by id (multi-process
    /// nodes, whose id ranges differ).
    pub clock_ts: bool,
    /// Seeds retry backoff, so a run on a single-threaded runtime replays.
    pub seed: u64,
    /// Where the run's history goes, when it records one.
    pub history: Option<Arc<HistorySink>>,
    /// How long a transaction waits for a lock, or (Callas) for another
    /// transaction's progress, before it aborts.
    pub wait_timeout: Duration,
    /// Callas: `ClusterConfig::rank_holds`.
    pub rank_holds: bool,
    /// Callas: which transactions still hold nexus locks, and how far
    /// each got.
    pub nexus: crate::callas::NexusBoard,
    /// Callas: the pieces of each procedure of an `rp` group (Runtime
    /// Pipelining) or an `sc` group (classic chopping).
    pub pieces: std::collections::HashMap<String, Arc<crate::callas::ProcPieces>>,
    /// A deliberately broken locking variant (checker validation only).
    pub mutation: Option<Mutation>,
    /// The cluster's logs (`None`: durability off).
    pub wal: Option<Arc<crate::durability::WalSet>>,
    /// False while recovery rolls unfinished BASE transactions forward:
    /// new work waits (it must not see their intermediate state).
    pub ready: tokio::sync::watch::Receiver<bool>,
}

/// Where a partition lives and how to send it a message.
pub struct PartitionRef {
    pub id: PartitionId,
    pub node: NodeId,
    pub tx: mpsc::UnboundedSender<PartitionMsg>,
}

/// Bounded retries of concurrency-control victims.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    /// The first retry yields; later ones sleep a random time up to
    /// `backoff_base * 2^(attempt-2)`, capped at `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 100,
            backoff_base: Duration::from_micros(200),
            backoff_max: Duration::from_millis(20),
        }
    }
}

impl Shared {
    pub(crate) fn send(&self, from: NodeId, p: usize, msg: PartitionMsg) {
        let part = &self.partitions[p];
        let tx = part.tx.clone();
        self.link.send(from, part.node, move || {
            // A closed partition means the cluster is shutting down; the
            // requester sees its reply channel close.
            let _ = tx.send(msg);
        });
    }

    /// Sends a request built around a reply path and awaits the answer.
    pub async fn request<T: Send + 'static>(
        &self,
        from: NodeId,
        p: usize,
        make: impl FnOnce(Reply<T>) -> PartitionMsg,
    ) -> Result<T> {
        self.request_now(from, p, make).await
    }

    /// `request`, with the message sent at the call rather than when the
    /// answer is first awaited.
    pub(crate) fn request_now<T: Send + 'static>(
        &self,
        from: NodeId,
        p: usize,
        make: impl FnOnce(Reply<T>) -> PartitionMsg,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let (reply, rx) = Reply::channel(&self.link, self.partitions[p].node, from);
        self.send(from, p, make(reply));
        async move {
            rx.await
                .map_err(|_| Error::Transport(format!("partition {p} did not answer (shut down?)")))
        }
    }

    /// The partitions a statement with `params` goes to: the one its
    /// partition key names, or every one (a broadcast).
    pub(crate) fn targets(&self, plan: &Plan, params: &[Value]) -> SmallVec<[usize; 4]> {
        match plan.route(params, &self.catalog) {
            Route::Partition(v) => SmallVec::from_elem(self.partition_for(&v), 1),
            Route::Broadcast => (0..self.partitions.len()).collect(),
        }
    }

    pub(crate) fn partition_for(&self, v: &Value) -> usize {
        partition_of(v, self.partitions.len() as u32) as usize
    }

    /// Waits until recovery has rolled every unfinished BASE transaction
    /// forward (at once in the common case).
    pub async fn wait_ready(&self) {
        if *self.ready.borrow() {
            return;
        }
        let mut rx = self.ready.clone();
        let _ = rx.wait_for(|ready| *ready).await;
    }

    pub fn new_txn(&self, ts: Option<u64>) -> TxnId {
        let id = self.next_txn.fetch_add(1, Ordering::Relaxed) + 1;
        let fresh = || {
            if self.clock_ts {
                // Ids of different processes come from disjoint ranges and
                // say nothing of age; the clock does (ties broken by id).
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(id, |d| d.as_micros() as u64)
            } else {
                id
            }
        };
        TxnId {
            ts: ts.unwrap_or_else(fresh),
            id,
        }
    }
}

/// Per-attempt state of a transaction at its coordinator.
pub struct TxnState {
    pub txn: TxnId,
    /// Partitions that executed at least one statement.
    pub participants: SmallVec<[usize; 4]>,
    /// Set when a statement was a concurrency-control victim: the attempt
    /// can only abort now.
    pub doomed: Option<AbortCause>,
    /// Set once commit or abort was sent.
    pub finished: bool,
    /// The attempt's operations, when the run records a history.
    pub rec: Option<Box<TxnRecording>>,
    /// Set when the transaction runs as a Salt BASE transaction.
    pub(crate) base: Option<Box<crate::salt::BaseState>>,
    /// The lock class its statements take instead of the protocol's
    /// (Callas: the group's member class).
    pub(crate) lock_class: Option<brine_lock::LockClass>,
    /// Set when the transaction runs in a Callas group.
    pub(crate) callas: Option<Box<crate::callas::CallasState>>,
    /// The level its statements lock at: the cluster's, or less for a
    /// procedure that needs less (`ProcedureDef::isolation`).
    pub(crate) isolation: Option<Isolation>,
}

impl TxnState {
    pub fn new(txn: TxnId) -> Self {
        TxnState {
            txn,
            participants: SmallVec::new(),
            doomed: None,
            finished: false,
            rec: None,
            base: None,
            lock_class: None,
            callas: None,
            isolation: None,
        }
    }

    /// A new attempt of `procedure` (`None`: interactive), recording its
    /// operations if the run records a history.
    pub fn begin(shared: &Shared, txn: TxnId, procedure: Option<&PreparedProc>) -> Self {
        let mut st = TxnState::new(txn);
        st.isolation = procedure.map(|p| p.isolation_in(shared.isolation));
        st.rec = shared.history.as_ref().map(|h| {
            let mut rec = h.begin(procedure.map(|p| p.name.as_str()));
            rec.read_committed = st.isolation == Some(Isolation::ReadCommitted)
                && shared.isolation > Isolation::ReadCommitted;
            rec
        });
        st
    }

    /// Runs the attempt at the cluster's level, whatever its procedure
    /// needs (Callas: its analysis, group dependencies and chopping
    /// assume every member at one level).
    pub(crate) fn at_cluster_level(&mut self) {
        self.isolation = None;
        if let Some(rec) = &mut self.rec {
            rec.read_committed = false;
        }
    }

    /// Hands the attempt's record to the history, with its outcome.
    pub(crate) fn record_end(&mut self, shared: &Shared, outcome: Outcome) {
        if let (Some(h), Some(rec)) = (&shared.history, self.rec.take()) {
            h.end(self.txn, *rec, outcome);
        }
    }

    pub(crate) fn add_participant(&mut self, p: usize) {
        if let Some(c) = &mut self.callas {
            c.touch(p);
        }
        if !self.participants.contains(&p) {
            self.participants.push(p);
        }
    }
}

/// What a procedure body sees: a handle to execute its declared statements
/// inside the current transaction attempt.
pub struct ProcCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) node: NodeId,
    proc: Option<Arc<PreparedProc>>,
    pub(crate) state: Arc<Mutex<TxnState>>,
}

impl ProcCtx {
    pub(crate) fn new(
        shared: Arc<Shared>,
        node: NodeId,
        proc: Option<Arc<PreparedProc>>,
        state: Arc<Mutex<TxnState>>,
    ) -> Self {
        ProcCtx {
            shared,
            node,
            proc,
            state,
        }
    }

    pub fn txn_id(&self) -> TxnId {
        self.state.lock().txn
    }

    /// Executes the declared statement `statement` with `args` (bound to the
    /// statement's parameters in order of first appearance).
    pub async fn exec(&mut self, statement: &str, args: Vec<Value>) -> Result<QueryResult> {
        let plan = match &self.proc {
            Some(p) => p.plan(statement)?.clone(),
            None => {
                return Err(Error::UndeclaredStatement {
                    procedure: "<interactive>".into(),
                    statement: statement.into(),
                })
            }
        };
        let mechanism = self.state.lock().callas.as_ref().map(|c| c.mechanism);
        if mechanism == Some(crate::callas::Mechanism::Sc) {
            return crate::sc::exec(self, statement, plan, args).await;
        }
        if mechanism == Some(crate::callas::Mechanism::Rp) {
            let placed = crate::callas::enter_piece(self, statement).await?;
            return self.exec_plan_locking(plan, args, placed).await;
        }
        self.exec_plan(plan, args).await
    }

    /// Opens an alkaline subtransaction of a BASE procedure (Salt): the
    /// statements until [`ProcCtx::end_alkaline`] commit or roll back
    /// together. Statements outside a block are single-statement alkaline
    /// subtransactions. Under a protocol without BASE transactions, and in
    /// ACID procedures, the marks do nothing: the whole body is one ACID
    /// transaction.
    pub fn begin_alkaline(&mut self) -> Result<()> {
        if self.state.lock().base.is_none() {
            return Ok(());
        }
        crate::salt::begin_alkaline(self)
    }

    /// Commits the open alkaline subtransaction (see `begin_alkaline`).
    pub async fn end_alkaline(&mut self) -> Result<()> {
        if self.state.lock().base.is_none() {
            return Ok(());
        }
        crate::salt::end_alkaline(self).await
    }

    /// Aborts the transaction on the user's behalf: returns the error the
    /// body should return.
    pub fn abort(&self, reason: impl Into<String>) -> Error {
        Error::UserAbort(reason.into())
    }

    /// Sends one statement to partition `p` now (gated by `gate`, if
    /// any); the future answers its result.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_execute(
        &self,
        p: usize,
        txn: TxnId,
        plan: Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
        salt: Option<(crate::message::BaseStmt, crate::message::Intro)>,
        gate: Option<Gate>,
    ) -> impl Future<Output = Result<Executed>> + Send + 'static {
        let (base, intro) = match salt {
            Some((b, i)) => (Some(b), i),
            None => (None, None),
        };
        let answer = self
            .shared
            .request_now(self.node, p, move |reply| PartitionMsg::Execute {
                txn,
                plan,
                params,
                lock,
                base,
                intro,
                gate,
                reply,
            });
        async move { answer.await? }
    }

    /// Salt: whether a statement of this ACID transaction that spans
    /// partitions waits gated at each (`LockTable::acquire_gated`), and
    /// who ungates it. Only its first statement, which holds nothing
    /// anywhere yet, and not under the `NoGate` mutation. A statement
    /// whose locks outlive it is ungated by the coordinator, at every
    /// partition at once; a read under read committed lets
    /// each partition's locks go as soon as it ran there, so it never
    /// holds one while it waits at another, and each partition ungates
    /// it as soon as it can grant it.
    fn gating(&self, plan: &Plan, lock: &LockSpec, first: bool) -> Option<Ungater> {
        let gated = first
            && lock.class == LockClass::Acid
            && self.shared.protocol.salt().is_some()
            && self.shared.mutation != Some(Mutation::NoGate);
        let short = lock.short_reads && plan.kind() == brine_sql::StatementKind::Select;
        gated.then_some(if short {
            Ungater::Partition
        } else {
            Ungater::Coordinator
        })
    }

    /// Runs a gated statement at `targets`: each part waits gated at its
    /// partition until every partition said it could be granted there at
    /// once; then all are ungated together, so the statement never holds
    /// one partition while it waits for another (where the holder it waits
    /// for may need the first: an accepted BASE transaction, which never
    /// yields). A partition that is no longer ready when the ungate
    /// arrives (a protected transaction passed it meanwhile) opens it all
    /// the same: kept gated, it would let more of them pass while it holds
    /// the other partitions. A part that answers first (an error, or
    /// nothing to lock) ungates the others too. The answers come in
    /// `targets` order.
    async fn execute_gated(
        &self,
        targets: &[usize],
        txn: TxnId,
        plan: &Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
    ) -> Vec<Result<Executed>> {
        let n = targets.len();
        let (tx, mut readiness) = tokio::sync::mpsc::unbounded_channel();
        let mut parts: FuturesUnordered<_> = targets
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let node = self.shared.partitions[p].node;
                let notice = GateNotice::new(&self.shared.link, node, self.node, i, tx.clone());
                let gate = Gate::Coordinated(notice);
                let part =
                    self.send_execute(p, txn, plan.clone(), params.clone(), lock, None, Some(gate));
                async move { (i, part.await) }
            })
            .collect();
        drop(tx);
        let mut ready = vec![false; n];
        let mut ungated = false;
        let mut answers: Vec<Option<Result<Executed>>> = (0..n).map(|_| None).collect();
        let mut left = n;
        let ungate = |ungated: &mut bool| {
            if !std::mem::replace(ungated, true) {
                for &p in targets {
                    self.shared.send(self.node, p, PartitionMsg::Ungate { txn });
                }
            }
        };
        while left > 0 {
            tokio::select! {
                Some((i, answer)) = parts.next() => {
                    answers[i] = Some(answer);
                    left -= 1;
                    ungate(&mut ungated);
                }
                Some((i, now_ready)) = readiness.recv(), if !ungated => {
                    ready[i] = now_ready;
                    if ready.iter().all(|&r| r) {
                        ungate(&mut ungated);
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(Error::Internal("a gated part never answered".into())))
            })
            .collect()
    }

    /// Callas: remembers the same-group transactions a statement found it
    /// depends on (for the nexus release order).
    pub(crate) fn note_after(&self, after: &[TxnId]) {
        if !after.is_empty() {
            if let Some(c) = &mut self.state.lock().callas {
                c.note_after(after, &self.shared.nexus);
            }
        }
    }

    /// Adds a statement's recorded operations to the attempt's history.
    pub(crate) fn record_ops(&self, ops: Vec<Op>) {
        if !ops.is_empty() {
            if let Some(rec) = &mut self.state.lock().rec {
                rec.ops.extend(ops);
            }
        }
    }

    /// Runs a statement as `txn` at `targets` (its partition, or every
    /// partition for a broadcast; they become participants), noting the
    /// same-group transactions it depends on and recording its operations;
    /// a broadcast's parts are merged. A victim anywhere is the error
    /// reported, over other errors.
    pub(crate) async fn execute_on(
        &self,
        targets: &[usize],
        txn: TxnId,
        plan: &Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
        base: Option<crate::message::BaseStmt>,
    ) -> Result<QueryResult> {
        let first = {
            let mut st = self.state.lock();
            let first = st.participants.is_empty();
            for &p in targets {
                st.add_participant(p);
            }
            first
        };
        let salt = base.map(|b| (b, None));
        if let [p] = targets {
            let e = self
                .send_execute(*p, txn, plan.clone(), params, lock, salt, None)
                .await?;
            self.note_after(&e.after);
            self.record_ops(e.ops);
            return Ok(e.result);
        }
        let gating = if base.is_none() {
            self.gating(plan, &lock, first)
        } else {
            None
        };
        let answers = if gating == Some(Ungater::Coordinator) {
            self.execute_gated(targets, txn, plan, params, lock).await
        } else {
            let futs = targets.iter().map(|&p| {
                let gate = gating.map(|_| Gate::Local);
                self.send_execute(
                    p,
                    txn,
                    plan.clone(),
                    params.clone(),
                    lock,
                    salt.clone(),
                    gate,
                )
            });
            futures::future::join_all(futs).await
        };
        let mut parts = Vec::with_capacity(targets.len());
        let mut ops = Vec::new();
        let mut first_err = None;
        for r in answers {
            match r {
                Ok(e) => {
                    self.note_after(&e.after);
                    parts.push(e.result);
                    if !e.ops.is_empty() {
                        ops.push(e.ops);
                    }
                }
                Err(e) => {
                    if first_err.is_none() || e.is_retryable() {
                        first_err = Some(e);
                    }
                }
            }
        }
        if !ops.is_empty() {
            self.record_ops(crate::history::merge_broadcast(ops));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(plan.merge(parts)),
        }
    }

    /// How a statement of this transaction locks: the protocol's way at
    /// `isolation` (the transaction's `TxnState::isolation`; `None`: the
    /// cluster's level), in `class` if given (Callas: the
    /// group's member class; `callas_deps`: the partitions report
    /// same-group dependencies), bent by the mutation if one is set.
    pub(crate) fn lock_spec(
        &self,
        isolation: Option<Isolation>,
        class: Option<LockClass>,
        callas_deps: bool,
    ) -> LockSpec {
        let isolation = isolation.unwrap_or(self.shared.isolation);
        let mut lock = self.shared.protocol.lock_spec(isolation);
        if let Some(class) = class {
            lock.class = class;
            lock.callas_deps = callas_deps;
        }
        if let Some(m) = self.shared.mutation {
            lock = m.apply(lock);
        }
        lock
    }

    pub(crate) async fn exec_plan(
        &mut self,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> Result<QueryResult> {
        self.exec_plan_locking(plan, args, None).await
    }

    /// [`ProcCtx::exec_plan`], in a Runtime Pipelining piece if `placed`
    /// (which sets `LockSpec::for_update` and `LockSpec::end_row`).
    async fn exec_plan_locking(
        &mut self,
        plan: Arc<Plan>,
        args: Vec<Value>,
        placed: Option<crate::callas::Placed>,
    ) -> Result<QueryResult> {
        if self.state.lock().base.is_some() {
            return crate::salt::exec(self, plan, args).await;
        }
        let (txn, lock_class, chop, callas_deps, isolation) = {
            let st = self.state.lock();
            if let Some(cause) = st.doomed {
                return Err(Error::Aborted(cause));
            }
            if st.finished {
                return Err(Error::TxnState("the transaction already ended".into()));
            }
            let chop = st
                .callas
                .as_ref()
                .filter(|c| c.mechanism == crate::callas::Mechanism::Chop)
                .map(|c| c.seq);
            let callas_deps = st
                .callas
                .as_ref()
                .is_some_and(|c| c.mechanism != crate::callas::Mechanism::TwoPl);
            (st.txn, st.lock_class, chop, callas_deps, st.isolation)
        };
        let params = plan.bind(args)?;
        let hold = placed.and_then(|_| crate::callas::rank_hold(&self.state));
        let lock = LockSpec {
            for_update: placed.is_some_and(|p| p.write_first),
            end_row: placed.is_some_and(|p| p.ends_row),
            ends_piece: placed.filter(|p| p.ends_piece).and_then(|p| p.rank),
            after_rank: hold.as_ref().map(|(t, r, _)| (*t, *r)),
            ..self.lock_spec(isolation, lock_class, callas_deps)
        };
        if let Some(seq) = chop {
            return crate::callas::exec_piece(self, plan, params, lock, seq).await;
        }
        let targets = self.shared.targets(&plan, &params);
        let exec = self.execute_on(&targets, txn, &plan, params, lock, None);
        let result = match hold {
            Some((t, r, d)) => crate::callas::held(self, &targets, (t, r), d, exec).await,
            None => exec.await,
        };
        if result.is_ok() && lock.ends_piece.is_some() {
            // The piece ended where this statement ran: no `EndPiece` there.
            if let Some(c) = self.state.lock().callas.as_mut() {
                c.piece_parts.retain(|p| !targets.contains(p));
            }
        }
        if let Err(Error::Aborted(cause)) = &result {
            self.state.lock().doomed = Some(*cause);
        }
        result
    }
}

/// Commits an attempt whose body succeeded. On a `No` vote the attempt is
/// aborted and the cause returned.
pub async fn commit(shared: &Shared, node: NodeId, state: &Mutex<TxnState>) -> Result<()> {
    commit_keeping(shared, node, state, None).await
}

/// [`commit`] with the participants told to keep the transaction's locks
/// under `keep` (Callas: as nexus locks, released later in order).
pub(crate) async fn commit_keeping(
    shared: &Shared,
    node: NodeId,
    state: &Mutex<TxnState>,
    keep: Option<TxnId>,
) -> Result<()> {
    commit_keeping_after(shared, node, state, keep, NOTHING_BEFORE).await
}

/// No dependency to await before a commit decision.
const NOTHING_BEFORE: Option<std::future::Ready<Result<()>>> = None;

/// [`commit_keeping`] for a transaction that depends on others (Runtime
/// Pipelining: it saw same-group transactions' uncommitted state), given
/// as `after`, which is done once they committed. Such a transaction asks
/// for votes even on one participant (one that cascaded an abort to it
/// says No), its participants hold their locks through phase one even
/// where it wrote nothing, and it is decided once `after` is done: the
/// participants prepare meanwhile. An error from `after` aborts it with
/// that error.
pub(crate) async fn commit_keeping_after(
    shared: &Shared,
    node: NodeId,
    state: &Mutex<TxnState>,
    keep: Option<TxnId>,
    after: Option<impl std::future::Future<Output = Result<()>>>,
) -> Result<()> {
    let (txn, participants) = {
        let mut st = state.lock();
        if st.finished {
            return Err(Error::TxnState("the transaction already ended".into()));
        }
        st.finished = true;
        (st.txn, st.participants.clone())
    };
    let result = commit_at_with(shared, node, txn, keep, &participants, after).await;
    if shared.history.is_some() {
        let outcome = match &result {
            Ok(()) => Outcome::Committed,
            Err(Error::Aborted(_)) => Outcome::Aborted,
            Err(_) => Outcome::Unknown,
        };
        state.lock().record_end(shared, outcome);
    }
    result
}

/// Commits `txn` at `participants`: one round for one participant,
/// two-phase commit (with a durable decision when logging) for several.
/// `keep`: `txn` is an alkaline subtransaction of that BASE transaction,
/// whose locks are downgraded instead of released.
pub(crate) async fn commit_at(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    keep: Option<TxnId>,
    participants: &[usize],
) -> Result<()> {
    commit_at_with(shared, node, txn, keep, participants, NOTHING_BEFORE).await
}

/// [`commit_at`]; `after`: see [`commit_keeping_after`].
async fn commit_at_with(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    keep: Option<TxnId>,
    participants: &[usize],
    after: Option<impl std::future::Future<Output = Result<()>>>,
) -> Result<()> {
    let hold = after.is_some();
    let after = async {
        match after {
            Some(f) => f.await,
            None => Ok(()),
        }
    };
    match participants.len() {
        0 => after.await,
        1 if !hold => {
            shared
                .request(node, participants[0], |reply| PartitionMsg::Commit {
                    txn,
                    keep,
                    decided: false,
                    reply,
                })
                .await
                // The commit may have been applied and its answer lost.
                .map_err(|e| match e {
                    Error::Transport(m) => Error::Transport(format!("commit outcome unknown: {m}")),
                    e => e,
                })
        }
        _ => {
            // A multi-process node records the decision's progress, so a
            // restarted participant's inquiry gets a safe answer.
            let book = shared.wal.as_ref().and_then(|w| w.book.as_deref());
            if let Some(b) = book {
                b.preparing(txn);
            }
            let (votes, after) = futures::future::join(
                futures::future::join_all(participants.iter().map(|&p| {
                    shared.request(node, p, move |reply| PartitionMsg::Prepare {
                        txn,
                        keep,
                        hold,
                        reply,
                    })
                })),
                after,
            )
            .await;
            let all_yes = votes
                .iter()
                .all(|v| matches!(v, Ok(Vote::Yes) | Ok(Vote::ReadOnly)));
            let mut decision_commit = all_yes && after.is_ok();
            // With a log, the decision is durable before anyone hears it
            // (only commits are logged: presumed abort). A failed decision
            // log aborts the transaction.
            let mut log_error = None;
            let any_yes = votes.iter().any(|v| matches!(v, Ok(Vote::Yes)));
            if let (true, true, Some(wal)) = (decision_commit, any_yes, &shared.wal) {
                if book.is_some_and(|b| !b.try_decide(txn)) {
                    // A restarted participant was told "aborted".
                    decision_commit = false;
                } else if let Err(e) = wal.log_decision(node, txn, participants).await {
                    decision_commit = false;
                    log_error = Some(e);
                }
            }
            if let Some(b) = book {
                b.decided(txn, decision_commit && any_yes);
            }
            // Phase two goes to every participant that still holds state
            // (voted Yes, or could not be heard from). It is not awaited: the
            // decision is made, and per-link FIFO delivery orders it before
            // anything this coordinator sends next.
            for (&p, v) in participants.iter().zip(&votes) {
                if matches!(v, Ok(Vote::ReadOnly)) && !hold {
                    continue;
                }
                let (reply, _rx) = Reply::channel(&shared.link, shared.partitions[p].node, node);
                let msg = if decision_commit {
                    PartitionMsg::Commit {
                        txn,
                        keep,
                        decided: true,
                        reply,
                    }
                } else {
                    PartitionMsg::Abort { txn, keep, reply }
                };
                shared.send(node, p, msg);
            }
            if let Some(e) = log_error {
                return Err(e);
            }
            after?;
            // A participant that did not answer (its log failed, or it is
            // gone) is not a concurrency-control abort: no retry.
            if let Some(Err(e)) = votes.iter().find(|v| v.is_err()) {
                return Err(e.clone());
            }
            if decision_commit {
                Ok(())
            } else {
                Err(Error::Aborted(AbortCause::Cascade))
            }
        }
    }
}

/// Aborts an attempt at every participant and waits until each has undone
/// its writes and released its locks, so a retry never waits on its own
/// previous attempt.
pub async fn abort(shared: &Shared, node: NodeId, state: &Mutex<TxnState>) {
    let (txn, participants) = {
        let mut st = state.lock();
        if st.finished {
            return;
        }
        st.finished = true;
        (st.txn, st.participants.clone())
    };
    abort_at(shared, node, txn, None, &participants).await;
    state.lock().record_end(shared, Outcome::Aborted);
}

/// Aborts `txn` at `participants` and waits for every acknowledgement
/// (`keep` as in [`commit_at`]).
pub(crate) async fn abort_at(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    keep: Option<TxnId>,
    participants: &[usize],
) {
    let acks = futures::future::join_all(participants.iter().map(|&p| {
        shared.request(node, p, move |reply| PartitionMsg::Abort {
            txn,
            keep,
            reply,
        })
    }))
    .await;
    for a in acks {
        if let Err(e) = a {
            tracing::warn!(%txn, "abort not acknowledged: {e}");
        }
    }
}

/// Runs a procedure to completion: attempts, retries of concurrency-control
/// victims (bounded, with backoff), commit.
pub async fn run_procedure(
    shared: &Arc<Shared>,
    node: NodeId,
    proc: &Arc<PreparedProc>,
    args: Vec<Value>,
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<CallOutcome> {
    shared.wait_ready().await;
    if proc.base {
        if let Some(opts) = shared.protocol.salt() {
            return crate::salt::run_base(shared, node, proc, args, opts, on_accept, None).await;
        }
    }
    if let Some(group) = shared
        .protocol
        .callas()
        .and_then(|g| g.group_of(&proc.name))
    {
        return crate::callas::run_grouped(shared, node, proc, args, group, on_accept).await;
    }
    let mut ts = None;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let txn = shared.new_txn(ts);
        ts = Some(txn.ts);
        let state = Arc::new(Mutex::new(TxnState::begin(shared, txn, Some(proc))));
        let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone());
        let body_result = (proc.body)(ctx, args.clone()).await;
        let doomed = state.lock().doomed;
        let cause = match (body_result, doomed) {
            (Ok(values), None) => match commit(shared, node, &state).await {
                Ok(()) => {
                    return Ok(committed(
                        shared, txn, &proc.name, attempt, values, on_accept,
                    ));
                }
                Err(Error::Aborted(cause)) => cause,
                Err(e) => return Err(e),
            },
            (_, Some(cause)) => {
                abort(shared, node, &state).await;
                cause
            }
            (Err(e), None) => {
                abort(shared, node, &state).await;
                tracing::debug!(%txn, procedure = %proc.name, attempt, "aborted: {e}");
                shared.counters.user_aborts.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        tracing::debug!(%txn, procedure = %proc.name, attempt, cause = cause.as_str(), "concurrency-control abort");
        retry_after(shared, attempt, cause, txn).await?;
    }
}

/// Attempt `attempt` of a call committed: counts it, tells whoever waits
/// for acceptance, and makes the call's outcome.
pub(crate) fn committed(
    shared: &Shared,
    txn: TxnId,
    procedure: &str,
    attempt: u32,
    values: Vec<Value>,
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
) -> CallOutcome {
    tracing::debug!(%txn, procedure, attempt, "committed");
    shared.counters.commits.fetch_add(1, Ordering::Relaxed);
    if let Some(tx) = on_accept {
        let _ = tx.send(());
    }
    CallOutcome {
        values,
        attempts: attempt,
    }
}

/// Attempt `attempt` of a call was a concurrency-control victim: counts
/// it and, within the retry bound, backs off before the next attempt;
/// past the bound, the error the call ends with.
pub(crate) async fn retry_after(
    shared: &Shared,
    attempt: u32,
    cause: AbortCause,
    txn: TxnId,
) -> Result<()> {
    shared.counters.count_abort(cause);
    if attempt >= shared.retry.max_attempts {
        return Err(Error::RetriesExhausted {
            attempts: attempt,
            last: cause,
        });
    }
    shared.counters.retries.fetch_add(1, Ordering::Relaxed);
    backoff(&shared.retry, attempt, shared.seed ^ txn.id).await;
    Ok(())
}

pub(crate) async fn backoff(policy: &RetryPolicy, attempt: u32, seed: u64) {
    if attempt <= 1 {
        tokio::task::yield_now().await;
        return;
    }
    let exp = policy
        .backoff_base
        .saturating_mul(1u32 << (attempt - 2).min(16))
        .min(policy.backoff_max);
    // The attempt goes into the draw: callers that retry under one id (a
    // chopped transaction's piece, an accepted BASE transaction's
    // subtransaction) would otherwise draw the same fraction every time.
    let draw = seed ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let wait = SmallRng::seed_from_u64(draw).gen_range(Duration::ZERO..=exp);
    tokio::time::sleep(wait).await;
}

/// A completed call: the procedure's result and how many attempts it took.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    pub values: Vec<Value>,
    pub attempts: u32,
}
