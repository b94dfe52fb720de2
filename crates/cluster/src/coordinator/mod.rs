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
use smallvec::SmallVec;
use tokio::sync::mpsc;

use crate::history::{HistorySink, TxnRecording};
use crate::link::Link;
use crate::message::{Executed, Gate, GateNotice, LockSpec, PartitionMsg, Reply, SubStmt};
use crate::procedure::PreparedProc;
use crate::protocol::{Isolation, Mutation, Protocol, Statements, TxnExt};

mod commit;
mod retry;

use crate::stats::ClusterCounters;
use brine_check::{Op, Outcome};
pub use commit::{abort, abort_at, commit, commit_at, commit_keeping_after};
use futures::stream::{FuturesUnordered, StreamExt};
pub use retry::{backoff, run_acid, CallOutcome, Retries};

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
    /// A deliberately broken locking variant (checker validation only).
    pub mutation: Option<Mutation>,
    /// The cluster's logs (`None`: durability off).
    pub wal: Option<Arc<crate::durability::WalSet>>,
    /// False while recovery rolls unfinished BASE transactions forward:
    /// new work waits (it must not see their intermediate state).
    pub ready: tokio::sync::watch::Receiver<bool>,
    /// With replicated logs across processes: where each partition is
    /// served now (it moves with its log's leader).
    pub routes: Option<Arc<crate::remote::Routes>>,
}

/// The way from a coordinator to one partition, apart from `Shared`.
#[derive(Clone)]
pub(crate) struct PartRoute {
    /// The cluster's logs: once they are down nothing can commit, and a
    /// decision is not sent again.
    wal: Option<Arc<crate::durability::WalSet>>,
    link: crate::link::Link,
    from: NodeId,
    to: NodeId,
    p: usize,
    tx: mpsc::UnboundedSender<PartitionMsg>,
}

impl PartRoute {
    /// Whether sending again is useless: the partition is gone (the
    /// cluster shuts down) or the logs are down (nothing commits).
    fn dead(&self) -> bool {
        self.tx.is_closed() || self.wal.as_ref().is_some_and(|w| w.is_down())
    }

    /// Sends the request `make` builds now; the answer, or an error if none
    /// will come (the message or its answer was lost, or the partition is
    /// gone).
    fn request<T: Send + 'static>(
        &self,
        make: &dyn Fn(Reply<T>) -> PartitionMsg,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let (reply, rx) = Reply::channel(&self.link, self.to, self.from);
        deliver(
            &self.link,
            self.from,
            (self.to, self.p, &self.tx),
            make(reply),
            rx,
        )
    }
}

/// Sends `msg` from node `from` to partition `p` (on node `to`, fed by
/// `tx`) over the link, now; the answer `rx` waits for, or an error if none
/// will come (the message or its answer was lost, or the partition is gone).
fn deliver<T: Send + 'static>(
    link: &crate::link::Link,
    from: NodeId,
    (to, p, tx): (NodeId, usize, &mpsc::UnboundedSender<PartitionMsg>),
    msg: PartitionMsg,
    rx: tokio::sync::oneshot::Receiver<T>,
) -> impl Future<Output = Result<T>> + Send + 'static {
    if let Some(later) = link.duplicate_delay(from, to) {
        if let Some(copy) = msg.duplicate() {
            link.send_after(later, from, to, push(tx.clone(), copy));
        }
    }
    link.send(from, to, push(tx.clone(), msg));
    async move {
        rx.await
            .map_err(|_| Error::Transport(format!("partition {p} did not answer (shut down?)")))
    }
}

/// Delivers `msg` into a partition's queue. A closed partition means the
/// cluster is shutting down; the requester sees its reply channel close.
fn push(tx: mpsc::UnboundedSender<PartitionMsg>, msg: PartitionMsg) -> impl FnOnce() + Send {
    move || {
        let _ = tx.send(msg);
    }
}

/// Whether a failed commit (or autocommitted statement) leaves its outcome
/// unknown: nobody answered, so it may have committed.
pub(crate) fn outcome_unknown(e: &Error) -> bool {
    matches!(e, Error::Transport(_) | Error::Storage(_))
}

/// How long a decision (commit, abort, release) is sent again to a
/// participant that did not acknowledge it: a network partition heals, or
/// a restarted node recovers, within it; past it the participant is given
/// up on (logged).
pub const DECISION_PATIENCE: Duration = Duration::from_secs(30);

/// Sends the request `make` builds now, and again until it is answered: a
/// decision must reach its participant, and sending it again is safe (a
/// partition commits, aborts or releases a transaction it already ended as
/// a no-op). Not once the partition is gone or the logs are down
/// (`PartRoute::dead`). Waits 1 ms before the first resend, doubling up
/// to 200 ms, for at most [`DECISION_PATIENCE`].
pub(crate) fn until_acked<T, F>(route: PartRoute, make: F) -> impl Future<Output = Result<T>> + Send
where
    T: Send + 'static,
    F: Fn(Reply<T>) -> PartitionMsg + Send,
{
    resend_until_acked(route, make, Some(DECISION_PATIENCE))
}

/// [`until_acked`] for as long as this process runs (`patience: None`):
/// for what a participant must hear even after it restarts (Salt's end of
/// a BASE transaction, which the restarted partition waits for holding
/// the rows it locked again).
pub(crate) fn resend_until_acked<T, F>(
    route: PartRoute,
    make: F,
    patience: Option<Duration>,
) -> impl Future<Output = Result<T>> + Send
where
    T: Send + 'static,
    F: Fn(Reply<T>) -> PartitionMsg + Send,
{
    let first = route.request(&make);
    async move {
        let start = crate::partition::now();
        let mut pause = Duration::from_millis(1);
        let mut last = first.await;
        loop {
            let waited = crate::partition::now().saturating_duration_since(start);
            match last {
                Ok(v) => return Ok(v),
                Err(e) if route.dead() || patience.is_some_and(|p| waited >= p) => return Err(e),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                    last = route.request(&make).await;
                }
            }
        }
    }
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
        self.link.send(from, part.node, push(part.tx.clone(), msg));
    }

    /// The way to partition `p` from `from`, for a task of its own
    /// (`until_acked`).
    pub(crate) fn route(&self, from: NodeId, p: usize) -> PartRoute {
        let part = &self.partitions[p];
        PartRoute {
            wal: self.wal.clone(),
            link: self.link.clone(),
            from,
            to: part.node,
            p,
            tx: part.tx.clone(),
        }
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
        let part = &self.partitions[p];
        let (reply, rx) = Reply::channel(&self.link, part.node, from);
        deliver(&self.link, from, (part.node, p, &part.tx), make(reply), rx)
    }

    /// The partitions a statement with `params` goes to: the one its
    /// partition key names, or every one (a broadcast).
    pub(crate) fn targets(&self, plan: &Plan, params: &[Value]) -> SmallVec<[usize; 4]> {
        self.targets_from(None, plan, params)
    }

    /// Where a statement a coordinator at `node` runs goes: by its key,
    /// or, where every partition holds a full replica, to the replica of
    /// the coordinator's own node (partition 0's from elsewhere); where
    /// one partition holds everything, to it.
    pub(crate) fn targets_from(
        &self,
        node: Option<NodeId>,
        plan: &Plan,
        params: &[Value],
    ) -> SmallVec<[usize; 4]> {
        match self.protocol.layout() {
            crate::protocol::Layout::Partitioned => {}
            crate::protocol::Layout::Replicated => {
                let own = node.map(|n| n.0 as usize).filter(|&p| {
                    p < self.partitions.len() && self.partitions[p].node.0 as usize == p
                });
                return SmallVec::from_elem(own.unwrap_or(0), 1);
            }
            crate::protocol::Layout::Central => return SmallVec::from_elem(0, 1),
        }
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
    /// The lock class its statements take instead of the protocol's
    /// (Callas: the group's member class).
    pub lock_class: Option<brine_lock::LockClass>,
    /// The protocol's own state of the transaction (Salt's BASE
    /// transaction, Callas' group membership), if it keeps one.
    pub ext: Option<Box<dyn TxnExt>>,
    /// The level its statements lock at: the cluster's, or less for a
    /// procedure that needs less (`ProcedureDef::isolation`).
    pub isolation: Option<Isolation>,
}

impl TxnState {
    pub fn new(txn: TxnId) -> Self {
        TxnState {
            txn,
            participants: SmallVec::new(),
            doomed: None,
            finished: false,
            rec: None,
            lock_class: None,
            ext: None,
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
    pub fn at_cluster_level(&mut self) {
        self.isolation = None;
        if let Some(rec) = &mut self.rec {
            rec.read_committed = false;
        }
    }

    /// Hands the attempt's record to the history, with its outcome.
    pub fn record_end(&mut self, shared: &Shared, outcome: Outcome) {
        if let (Some(h), Some(mut rec)) = (&shared.history, self.rec.take()) {
            shared.protocol.rewrite_history(&mut rec.ops);
            h.end(self.txn, *rec, outcome);
        }
    }

    /// Adds to the aborted attempt's record the writes its participants
    /// undid that it lacks: those of statements whose answer was lost.
    pub fn record_undone(&mut self, undone: Vec<Op>) {
        let Some(rec) = self.rec.as_mut().filter(|_| !undone.is_empty()) else {
            return;
        };
        let version_of = |o: &Op| match o {
            Op::Write { version, .. } => Some(*version),
            _ => None,
        };
        let known: std::collections::HashSet<u64> = rec.ops.iter().filter_map(version_of).collect();
        rec.ops.extend(
            undone
                .into_iter()
                .filter(|o| version_of(o).is_some_and(|v| !known.contains(&v))),
        );
    }

    pub fn add_participant(&mut self, p: usize) {
        if let Some(e) = &mut self.ext {
            e.touched(p);
        }
        if !self.participants.contains(&p) {
            self.participants.push(p);
        }
    }
}

/// What a procedure body sees: a handle to execute its declared statements
/// inside the current transaction attempt.
pub struct ProcCtx {
    pub shared: Arc<Shared>,
    pub node: NodeId,
    proc: Option<Arc<PreparedProc>>,
    pub state: Arc<Mutex<TxnState>>,
    /// How the protocol runs this transaction's statements (`None`: the
    /// engine's plain statement, [`ProcCtx::exec_plan`]).
    statements: Option<&'static dyn Statements>,
}

impl ProcCtx {
    pub fn new(
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
            statements: None,
        }
    }

    /// Its statements run the protocol's way.
    pub fn with_statements(mut self, statements: &'static dyn Statements) -> Self {
        self.statements = Some(statements);
        self
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
        match self.statements {
            Some(s) => s.exec(self, statement, plan, args).await,
            None => self.exec_plan(plan, args).await,
        }
    }

    /// Opens an alkaline subtransaction of a BASE procedure (Salt): the
    /// statements until [`ProcCtx::end_alkaline`] commit or roll back
    /// together. Statements outside a block are single-statement alkaline
    /// subtransactions. Under a protocol without BASE transactions, and in
    /// ACID procedures, the marks do nothing: the whole body is one ACID
    /// transaction.
    pub fn begin_alkaline(&mut self) -> Result<()> {
        match self.statements {
            Some(s) => s.begin_sub(self),
            None => Ok(()),
        }
    }

    /// Commits the open alkaline subtransaction (see `begin_alkaline`).
    pub async fn end_alkaline(&mut self) -> Result<()> {
        match self.statements {
            Some(s) => s.end_sub(self).await,
            None => Ok(()),
        }
    }

    /// Aborts the transaction on the user's behalf: returns the error the
    /// body should return.
    pub fn abort(&self, reason: impl Into<String>) -> Error {
        Error::UserAbort(reason.into())
    }

    /// Sends one statement to partition `p` now (gated by `gate`, if
    /// any); the future answers its result.
    #[allow(clippy::too_many_arguments)]
    pub fn send_execute(
        &self,
        p: usize,
        txn: TxnId,
        plan: Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
        how: Sent,
        gate: Option<Gate>,
    ) -> impl Future<Output = Result<Executed>> + Send + 'static {
        let Sent { sub, call, ext } = how;
        // A statement that commits where it runs (Salt's local commit, or
        // one carrying the commit of the subtransaction before it) may
        // have committed when its answer is lost: its outcome is unknown.
        // Any other unanswered statement committed nothing: its
        // transaction is aborted (at every participant, by whoever ends
        // it) and may run again.
        let in_doubt = sub.is_some_and(|s| s.autocommit || s.commit_first.is_some());
        let answer = self
            .shared
            .request_now(self.node, p, move |reply| PartitionMsg::Execute {
                txn,
                plan,
                params,
                lock,
                sub,
                call,
                ext,
                gate,
                reply,
            });
        async move {
            match answer.await {
                Ok(r) => r,
                Err(Error::Transport(_)) if !in_doubt => {
                    Err(Error::Aborted(AbortCause::Unreachable))
                }
                Err(e) => Err(e),
            }
        }
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
            && self.shared.protocol.gates_spanning_statements();
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
                let how = Sent::default();
                let part =
                    self.send_execute(p, txn, plan.clone(), params.clone(), lock, how, Some(gate));
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

    /// Tells the protocol's state of the transactions a statement found
    /// this one depends on (Callas: for the nexus release order).
    pub fn note_after(&self, after: &[TxnId]) {
        if !after.is_empty() {
            if let Some(e) = &mut self.state.lock().ext {
                e.depends_on(after);
            }
        }
    }

    /// Adds a statement's recorded operations to the attempt's history.
    pub fn record_ops(&self, ops: Vec<Op>) {
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
    pub async fn execute_on(
        &self,
        targets: &[usize],
        txn: TxnId,
        plan: &Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
        how: Sent,
    ) -> Result<QueryResult> {
        let first = {
            let mut st = self.state.lock();
            let first = st.participants.is_empty();
            for &p in targets {
                st.add_participant(p);
            }
            first
        };
        if let [p] = targets {
            let e = self
                .send_execute(*p, txn, plan.clone(), params, lock, how, None)
                .await?;
            self.note_after(&e.after);
            self.record_ops(e.ops);
            return Ok(e.result);
        }
        let gating = if how.sub.is_none() {
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
                    how.clone(),
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
            // A SUM whose partial sums overflow is an error here, as it is
            // on one partition.
            None => plan.merge(parts),
        }
    }

    /// How a statement of this transaction locks: the protocol's way at
    /// `isolation` (the transaction's `TxnState::isolation`; `None`: the
    /// cluster's level), in `class` if given (Callas: the group's member
    /// class), bent by the mutation if one is set.
    pub fn lock_spec(&self, isolation: Option<Isolation>, class: Option<LockClass>) -> LockSpec {
        let isolation = isolation.unwrap_or(self.shared.isolation);
        let mut lock = self.shared.protocol.lock_spec(isolation);
        if let Some(class) = class {
            lock.class = class;
        }
        if let Some(m) = self.shared.mutation {
            lock = m.apply(lock);
        }
        lock
    }

    /// The transaction's id, its lock class and level, or the error a
    /// statement gets if it can no longer run one (a victim, or ended).
    pub fn live(&self) -> Result<(TxnId, Option<LockClass>, Option<Isolation>)> {
        let st = self.state.lock();
        if let Some(cause) = st.doomed {
            return Err(Error::Aborted(cause));
        }
        if st.finished {
            return Err(Error::TxnState("the transaction already ended".into()));
        }
        Ok((st.txn, st.lock_class, st.isolation))
    }

    /// A statement failed: a concurrency-control victim dooms the attempt.
    pub fn doom_on_abort<T>(&self, result: &Result<T>) {
        if let Err(Error::Aborted(cause)) = result {
            self.state.lock().doomed = Some(*cause);
        }
    }

    /// Runs a statement the engine's way: strict two-phase locking at the
    /// transaction's level and class.
    pub async fn exec_plan(&mut self, plan: Arc<Plan>, args: Vec<Value>) -> Result<QueryResult> {
        let (txn, lock_class, isolation) = self.live()?;
        let params = plan.bind(args)?;
        let lock = self.lock_spec(isolation, lock_class);
        let targets = self.shared.targets_from(Some(self.node), &plan, &params);
        let result = self
            .execute_on(&targets, txn, &plan, params, lock, Sent::default())
            .await;
        self.doom_on_abort(&result);
        result
    }
}

/// How a statement is sent, beyond its lock spec: as a subtransaction's
/// (`sub`), with its call for the log (`call`), with the protocol's words
/// for its rules (`ext`).
#[derive(Clone, Default)]
pub struct Sent {
    pub sub: Option<SubStmt>,
    pub call: crate::message::Intro,
    pub ext: crate::message::StmtExt,
}

/// Runs a call of `proc` to completion, the way the cluster's protocol
/// runs it (`Protocol::run`), once recovery let new work in.
pub async fn run_procedure(
    shared: &Arc<Shared>,
    node: NodeId,
    proc: &Arc<PreparedProc>,
    args: Vec<Value>,
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
    session: Option<u64>,
) -> Result<CallOutcome> {
    shared.wait_ready().await;
    let call = crate::protocol::Call {
        shared,
        node,
        proc,
        args,
        on_accept,
        session,
    };
    shared.protocol.run(call).await
}
