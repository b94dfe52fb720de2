//! Callas at the coordinator: transaction groups, nexus locks and the nexus
//! lock release order (seed 000 chapter 4, seed 002; DESIGN 4.4).
//!
//! ```text
//!  call(proc in group g) ──► body: every statement locks member_g (in-group
//!      │                     2PL; shares with nexus_g), reports the same-group
//!      │                     transactions it now depends on ("after")
//!      ▼ commit, if a transaction it depends on still holds nexus locks:
//!        member_g ──► nexus_g at every participant (locks kept); else the
//!        locks go with the commit, as in 2PL
//!  client answered ──► (background) wait until every transaction it depends
//!                      on released its nexus locks ──► Release everywhere
//!                      ──► tell the transactions waiting on this one
//! ```
//!
//! A nexus lock is compatible with its own group and conflicts with other
//! groups (and the default group's ACID locks) unless both read, so no
//! transaction sees another group's uncommitted or intermediate state. The
//! release order ("if T2 depends on T1 and both are in one group, T2 cannot
//! release its nexus locks until T1 does") keeps dependency cycles from
//! spanning groups (Theorem 4.3.2); it is enforced here, across partitions,
//! because one partition sees only its own rows.
//!
//! Mechanisms inside a group:
//! - `2pl`: plain two-phase locking among the group's transactions.
//! - `chop`: every statement is a piece that commits on its own as soon as
//!   it ran (the finest chopping; transaction chopping's commit-per-piece
//!   behaviour). Its pieces' locks become nexus locks at once, so later
//!   same-group transactions go ahead while the transaction still runs.
//!   Only for procedures whose aborts all come from their first statement
//!   (rollback safety): a later piece cannot be undone.
//!
//! Procedures in no group and interactive transactions run in the default
//! group: the `acid` protocol, under ACID locks (a group of its own to
//! every nexus lock).
//!
//! User guide: `docs/callas.md`.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brine_core::{AbortCause, Error, NodeId, Result, TxnId, Value};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::coordinator::{abort, backoff, commit_keeping, CallOutcome, ProcCtx, Shared, TxnState};
use crate::message::PartitionMsg;
use crate::procedure::PreparedProc;
use crate::protocol::Mutation;

/// How a group's transactions are isolated from each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// Plain two-phase locking inside the group.
    #[serde(rename = "2pl")]
    TwoPl,
    /// Every statement a piece committed on its own (see the module doc).
    Chop,
    /// Runtime Pipelining: rank-ordered pieces from the static analysis,
    /// piece-level locks, uncommitted reads inside the group with commit
    /// dependencies and cascading aborts (see the module doc).
    Rp,
}

impl FromStr for Mechanism {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "2pl" => Ok(Mechanism::TwoPl),
            "chop" => Ok(Mechanism::Chop),
            "rp" => Ok(Mechanism::Rp),
            other => Err(Error::Config(format!(
                "unknown group mechanism `{other}` (expected 2pl, chop or rp)"
            ))),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::TwoPl => "2pl",
            Mechanism::Chop => "chop",
            Mechanism::Rp => "rp",
        })
    }
}

/// One transaction group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDef {
    pub name: String,
    pub mechanism: Mechanism,
    pub procedures: Vec<String>,
}

/// Which procedures run in which group. Group ids are positions + 1 (the
/// default group, ACID, has none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grouping {
    pub groups: Vec<GroupDef>,
}

impl Grouping {
    /// Parses `name:mechanism=proc,proc;name:mechanism=proc`, e.g.
    /// `orders:2pl=new_order,payment;rest:chop=delivery`.
    pub fn parse(spec: &str) -> Result<Grouping> {
        let mut groups = Vec::new();
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::Config(format!(
                    "bad group `{part}`: expected name:mechanism=procedure,procedure"
                ))
            };
            let (head, procs) = part.split_once('=').ok_or_else(bad)?;
            let (name, mechanism) = head.split_once(':').ok_or_else(bad)?;
            let procedures: Vec<String> = procs
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            if name.trim().is_empty() || procedures.is_empty() {
                return Err(bad());
            }
            groups.push(GroupDef {
                name: name.trim().to_string(),
                mechanism: mechanism.trim().parse()?,
                procedures,
            });
        }
        if groups.is_empty() {
            return Err(Error::Config("a grouping needs at least one group".into()));
        }
        Ok(Grouping { groups })
    }

    /// Every one of `procedures` in one 2PL group (what `callas` runs when
    /// no grouping is given: nexus locks everywhere, no in-group gain).
    pub fn one_group<'a>(procedures: impl IntoIterator<Item = &'a str>) -> Grouping {
        let mut procedures: Vec<String> = procedures.into_iter().map(str::to_string).collect();
        procedures.sort();
        Grouping {
            groups: vec![GroupDef {
                name: "all".into(),
                mechanism: Mechanism::TwoPl,
                procedures,
            }],
        }
    }

    /// Checks the grouping against the application: every procedure named
    /// exists and is in one group only.
    pub fn validate<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let known: std::collections::HashSet<&str> = known.into_iter().collect();
        let mut seen = HashMap::new();
        for g in &self.groups {
            for p in &g.procedures {
                if !known.contains(p.as_str()) {
                    let mut names: Vec<&str> = known.iter().copied().collect();
                    names.sort();
                    return Err(Error::Config(format!(
                        "group `{}` names procedure `{p}`, which the application does not have (it has: {})",
                        g.name,
                        names.join(", ")
                    )));
                }
                if let Some(other) = seen.insert(p.as_str(), g.name.as_str()) {
                    return Err(Error::Config(format!(
                        "procedure `{p}` is in two groups: `{other}` and `{}`",
                        g.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The group of `procedure` (id, mechanism), `None` for the default
    /// group.
    pub fn group_of(&self, procedure: &str) -> Option<(u32, Mechanism)> {
        self.groups
            .iter()
            .position(|g| g.procedures.iter().any(|p| p == procedure))
            .map(|i| (i as u32 + 1, self.groups[i].mechanism))
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{}:{}={}", g.name, g.mechanism, g.procedures.join(","))?;
        }
        Ok(())
    }
}

/// A Callas transaction's state at its coordinator.
pub(crate) struct CallasState {
    pub mechanism: Mechanism,
    /// Same-group transactions this one depends on (reported by the
    /// partitions when a lock was granted next to their nexus locks), and
    /// their progress (`None`: gone from the board, so released).
    pub after: SmallVec<[TxnId; 4]>,
    pub deps: SmallVec<[Option<Arc<Progress>>; 4]>,
    /// Position of the next statement (chop: each is a piece).
    pub seq: u32,
    /// Runtime Pipelining: the procedure's pieces, the current piece
    /// (number, rank) and the partitions it touched.
    pub pieces: Option<Arc<ProcPieces>>,
    pub piece: Option<(u32, Option<u32>)>,
    pub piece_parts: SmallVec<[usize; 4]>,
    /// This transaction's own progress, on the board.
    pub progress: Arc<Progress>,
}

impl CallasState {
    pub fn note_after(&mut self, txns: &[TxnId], board: &NexusBoard) {
        for t in txns {
            if !self.after.contains(t) {
                self.after.push(*t);
                self.deps.push(board.get(*t));
            }
        }
    }

    /// Runtime Pipelining: the partitions of the current piece learn it
    /// ended.
    pub fn touch(&mut self, p: usize) {
        if self.pieces.is_some() && !self.piece_parts.contains(&p) {
            self.piece_parts.push(p);
        }
    }
}

/// Runtime Pipelining: which piece (and rank, `None` for a piece of free
/// operations) each statement of a procedure belongs to.
#[derive(Debug, Default)]
pub struct ProcPieces {
    pub by_statement: HashMap<String, (u32, Option<u32>)>,
}

/// Runs the static analysis (DESIGN 5, `brine analyze`) on every `rp` group
/// of `grouping`: the pieces of each of its procedures. The notes the
/// analysis keeps for the built-in workloads (`brine_analysis::workloads`)
/// are used when the application is one of them.
pub fn plan_rp(
    grouping: &Grouping,
    app: &str,
    ddl: &str,
    procedures: &[crate::ProcedureDef],
) -> Result<HashMap<String, Arc<ProcPieces>>> {
    use brine_analysis::{runtime_pipelining, specs_from_sources, ProcSource, Refinements};
    let mut out = HashMap::new();
    for g in grouping
        .groups
        .iter()
        .filter(|g| g.mechanism == Mechanism::Rp)
    {
        let sources: Vec<ProcSource> = g
            .procedures
            .iter()
            .filter_map(|name| procedures.iter().find(|d| &d.name == name))
            .map(|d| ProcSource {
                name: d.name.clone(),
                statements: d.statements.clone(),
            })
            .collect();
        let notes: Vec<(String, Option<brine_analysis::ProcNotes>)> = sources
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    brine_analysis::workloads::notes(app, &p.name),
                )
            })
            .collect();
        let fail = |e: brine_analysis::AnalysisError| {
            Error::Config(format!(
                "group `{}`: the Runtime Pipelining analysis failed: {e}",
                g.name
            ))
        };
        let (_catalog, specs) = specs_from_sources(ddl, &sources, |name| {
            notes
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, n)| n.as_ref())
        })
        .map_err(fail)?;
        let refs: Vec<&brine_analysis::ProcSpec> = specs.iter().collect();
        let rp = runtime_pipelining(&refs, Refinements::ALL).map_err(fail)?;
        for (spec, chopping) in specs.iter().zip(&rp.choppings) {
            let mut by_statement = HashMap::new();
            for (k, piece) in chopping.pieces.iter().enumerate() {
                for &op in &piece.ops {
                    by_statement.insert(
                        spec.ops[op].name.clone(),
                        (k as u32, piece.rank().map(|r| r as u32)),
                    );
                }
            }
            out.insert(spec.name.clone(), Arc::new(ProcPieces { by_statement }));
        }
    }
    Ok(out)
}

/// Runtime Pipelining, before a statement runs: when it opens a new piece,
/// the previous piece ends (its piece-level locks become nexus locks at its
/// partitions, and its rank counts as executed), and the new piece of rank
/// `r` waits until every same-group transaction this one depends on
/// executed a piece of rank `>= r` or committed. A statement of an earlier
/// piece than the current one means the body and the analysis disagree.
pub(crate) async fn enter_piece(ctx: &ProcCtx, statement: &str) -> Result<()> {
    let (owner, progress, ending, wait) = {
        let mut st = ctx.state.lock();
        let owner = st.txn;
        let Some(c) = st.callas.as_mut() else {
            return Ok(());
        };
        let Some(pieces) = &c.pieces else {
            return Ok(());
        };
        let Some(&(piece, rank)) = pieces.by_statement.get(statement) else {
            return Err(Error::Internal(format!(
                "statement `{statement}` is not in the Runtime Pipelining analysis of its procedure"
            )));
        };
        match c.piece {
            Some((cur, _)) if piece == cur => return Ok(()),
            Some((cur, _)) if piece < cur => {
                return Err(Error::Internal(format!(
                    "statement `{statement}` belongs to piece {} but the transaction already runs \
                     piece {}: the body and the analysis's notes disagree \
                     (crates/analysis/src/workloads.rs)",
                    piece + 1,
                    cur + 1
                )))
            }
            _ => {}
        }
        let ending = c
            .piece
            .map(|(_, r)| (r, std::mem::take(&mut c.piece_parts)));
        c.piece = Some((piece, rank));
        let wait: SmallVec<[Arc<Progress>; 4]> = match rank {
            Some(_) => c.deps.iter().flatten().cloned().collect(),
            None => SmallVec::new(),
        };
        (owner, c.progress.clone(), ending, rank.map(|r| (r, wait)))
    };
    if let Some((rank, parts)) = ending {
        for p in parts {
            ctx.shared
                .send(ctx.node, p, PartitionMsg::EndPiece { owner });
        }
        if let Some(r) = rank {
            progress.finished_piece(r);
        }
    }
    if let Some((r, deps)) = wait {
        for d in deps {
            tracing::trace!(%owner, rank = r, "rank wait");
            if let Err(e) = d.reached(r, ctx.shared.wait_timeout).await {
                if let Error::Aborted(cause) = &e {
                    ctx.state.lock().doomed = Some(*cause);
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// What a same-group transaction may wait for about a running Callas
/// transaction: the highest rank of a piece it finished, its outcome, and
/// the release of its nexus locks.
#[derive(Default)]
pub struct Progress {
    /// 1 + the highest rank of a piece it finished (0: none yet).
    rank: AtomicU32,
    /// 0 while running, then `COMMITTED` or `ABORTED`.
    outcome: AtomicU8,
    released: AtomicBool,
    notify: Notify,
}

const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;

impl Progress {
    fn finished_piece(&self, rank: u32) {
        self.rank.fetch_max(rank + 1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    fn decide(&self, committed: bool) {
        let o = if committed { COMMITTED } else { ABORTED };
        self.outcome.store(o, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Waits until `ready` says something.
    async fn until<T>(&self, ready: impl Fn(&Progress) -> Option<T>) -> T {
        loop {
            // Created before the check, so a notification in between is
            // not lost.
            let notified = self.notify.notified();
            if let Some(v) = ready(self) {
                return v;
            }
            notified.await;
        }
    }

    /// Runtime Pipelining's rank-progress wait: until the transaction
    /// finished a piece of rank `>= rank`, or committed. An abort is an
    /// error: the waiter read its uncommitted state. A wait longer than
    /// `patience` is an error too (see [`Progress::committed`]).
    async fn reached(&self, rank: u32, patience: Duration) -> Result<()> {
        let wait = self.until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => (p.rank.load(Ordering::Acquire) > rank).then_some(Ok(())),
        });
        tokio::time::timeout(patience, wait)
            .await
            .unwrap_or(Err(Error::Aborted(AbortCause::LockTimeout)))
    }

    /// Runtime Pipelining's commit dependency: until the transaction
    /// committed (`Ok`) or aborted (an error). Waits that the rank order
    /// does not cover (conflicts the analysis removed, such as commutative
    /// increments, still order commits so undo stays exact) could form a
    /// cycle no lock table sees; like a lock wait, a wait longer than
    /// `patience` (the lock wait timeout) aborts the waiter.
    async fn committed(&self, patience: Duration) -> Result<()> {
        let wait = self.until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => None,
        });
        tokio::time::timeout(patience, wait)
            .await
            .unwrap_or(Err(Error::Aborted(AbortCause::LockTimeout)))
    }
}

/// The running Callas transactions' progress, until each released its
/// nexus locks. Sharded so coordinators do not contend on one mutex.
pub struct NexusBoard {
    shards: Vec<Mutex<HashMap<TxnId, Arc<Progress>>>>,
}

impl Default for NexusBoard {
    fn default() -> Self {
        NexusBoard {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl NexusBoard {
    fn shard(&self, t: TxnId) -> &Mutex<HashMap<TxnId, Arc<Progress>>> {
        &self.shards[(t.id as usize) % self.shards.len()]
    }

    /// Registers `t` before it takes its first lock.
    fn register(&self, t: TxnId) -> Arc<Progress> {
        let r = Arc::new(Progress::default());
        self.shard(t).lock().insert(t, r.clone());
        r
    }

    fn get(&self, t: TxnId) -> Option<Arc<Progress>> {
        self.shard(t).lock().get(&t).cloned()
    }

    /// `t` released its nexus locks (or never will hold any).
    fn released(&self, t: TxnId) {
        if let Some(r) = self.shard(t).lock().remove(&t) {
            r.release();
        }
    }

    /// Waits until `t` released its nexus locks (at once if it is not
    /// registered: it already did).
    async fn wait(&self, t: TxnId) {
        if let Some(r) = self.get(t) {
            r.until(|p| p.released.load(Ordering::Acquire).then_some(()))
                .await;
        }
    }

    /// Whether `t` may still hold nexus locks.
    fn holds(&self, t: TxnId) -> bool {
        self.shard(t).lock().contains_key(&t)
    }

    /// Transactions still holding nexus locks (for tests and status).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs a procedure of group `group` to completion: attempts, retries,
/// commit; then, in the background, the nexus release in order.
pub(crate) async fn run_grouped(
    shared: &Arc<Shared>,
    node: NodeId,
    proc: &Arc<PreparedProc>,
    args: Vec<Value>,
    (group, mechanism): (u32, Mechanism),
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<CallOutcome> {
    let mut ts = None;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let txn = shared.new_txn(ts);
        ts = Some(txn.ts);
        let progress = shared.nexus.register(txn);
        let mut st = TxnState::begin(shared, txn, Some(&proc.name));
        st.lock_class = Some(brine_lock::LockClass::Member(group));
        st.callas = Some(Box::new(CallasState {
            mechanism,
            after: SmallVec::new(),
            deps: SmallVec::new(),
            seq: 0,
            pieces: match mechanism {
                Mechanism::Rp => shared.rp.get(&proc.name).cloned(),
                _ => None,
            },
            piece: None,
            piece_parts: SmallVec::new(),
            progress: progress.clone(),
        }));
        let state = Arc::new(Mutex::new(st));
        let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone());
        let body_result = (proc.body)(ctx, args.clone()).await;
        // Runtime Pipelining: no commit before the same-group transactions
        // whose uncommitted state this one saw; their abort is its own.
        let rp = mechanism == Mechanism::Rp;
        if rp && body_result.is_ok() && state.lock().doomed.is_none() {
            let deps: SmallVec<[Arc<Progress>; 4]> = {
                let st = state.lock();
                let c = st.callas.as_ref().expect("callas state");
                c.deps.iter().flatten().cloned().collect()
            };
            for d in deps {
                tracing::trace!(%txn, "commit wait");
                if let Err(Error::Aborted(cause)) = d.committed(shared.wait_timeout).await {
                    state.lock().doomed = Some(cause);
                    break;
                }
            }
        }
        let doomed = state.lock().doomed;
        let ordered = shared.mutation != Some(Mutation::NoNexusReleaseOrder);
        // Nothing to wait for (the common case without contention): the
        // nexus locks go with the commit, as ACID locks would, and no
        // release round follows.
        let waits = ordered && {
            let st = state.lock();
            let c = st.callas.as_ref().expect("callas state");
            c.after.iter().any(|t| shared.nexus.holds(*t))
        };
        let keep = waits.then_some(txn);
        let outcome = match (body_result, doomed) {
            // Runtime Pipelining always asks for votes: a participant that
            // cascaded this transaction's abort says No.
            (Ok(values), None) => match commit_keeping(shared, node, &state, keep, rp).await {
                Ok(()) => Ok(values),
                Err(e) => Err(e),
            },
            (_, Some(cause)) => {
                abort(shared, node, &state).await;
                Err(Error::Aborted(cause))
            }
            (Err(e), None) => {
                abort(shared, node, &state).await;
                Err(e)
            }
        };
        progress.decide(outcome.is_ok());
        let (participants, after) = {
            let st = state.lock();
            let c = st.callas.as_ref().expect("callas state");
            (st.participants.clone(), c.after.clone())
        };
        if outcome.is_ok() && waits {
            tokio::spawn(release_in_order(
                shared.clone(),
                node,
                txn,
                participants,
                after,
            ));
        } else {
            // Released with the commit, or by the abort.
            shared.nexus.released(txn);
        }
        match outcome {
            Ok(values) => {
                tracing::debug!(%txn, procedure = %proc.name, attempt, "committed");
                shared.counters.commits.fetch_add(1, Ordering::Relaxed);
                if let Some(tx) = on_accept {
                    let _ = tx.send(());
                }
                return Ok(CallOutcome {
                    values,
                    attempts: attempt,
                });
            }
            Err(Error::Aborted(cause)) => {
                shared.counters.count_abort(cause);
                if attempt >= shared.retry.max_attempts {
                    return Err(Error::RetriesExhausted {
                        attempts: attempt,
                        last: cause,
                    });
                }
                shared.counters.retries.fetch_add(1, Ordering::Relaxed);
                backoff(&shared.retry, attempt, shared.seed ^ txn.id).await;
            }
            Err(e) => {
                if matches!(e, Error::UserAbort(_)) {
                    shared.counters.user_aborts.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        }
    }
}

/// Chop: runs one statement as a piece of its own (a fresh id, the same
/// age), which its partition commits as soon as it ran, turning the
/// piece's locks into nexus locks of the transaction. A victim piece after
/// the first is run again (earlier pieces are committed and stay); a victim
/// first piece aborts the transaction, which is retried.
pub(crate) async fn exec_piece(
    ctx: &ProcCtx,
    plan: Arc<brine_sql::Plan>,
    params: Vec<Value>,
    lock: crate::message::LockSpec,
    seq: u32,
) -> Result<brine_sql::QueryResult> {
    let shared = ctx.shared.clone();
    let owner = ctx.state.lock().txn;
    let p = match plan.route(&params, &shared.catalog) {
        brine_sql::Route::Partition(v) => shared.partition_for(&v),
        brine_sql::Route::Broadcast => return Err(Error::Config(
            "a statement of a `chop` group must reach one partition (give it the partition key), \
                 or put its procedure in a `2pl` group"
                .into(),
        )),
    };
    {
        let mut st = ctx.state.lock();
        st.add_participant(p);
        if let Some(c) = &mut st.callas {
            c.seq += 1;
        }
    }
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let piece = shared.new_txn(Some(owner.ts));
        let base = crate::message::BaseStmt {
            owner,
            seq,
            autocommit: true,
            release_order: false,
        };
        let r = ctx
            .execute_at(
                p,
                piece,
                plan.clone(),
                params.clone(),
                lock,
                Some((base, None)),
            )
            .await;
        match r {
            Ok(e) => {
                ctx.note_after(&e.after);
                ctx.record_ops(e.ops);
                return Ok(e.result);
            }
            Err(Error::Aborted(cause)) if seq > 0 && attempt < shared.retry.max_attempts => {
                shared.counters.count_abort(cause);
                shared.counters.retries.fetch_add(1, Ordering::Relaxed);
                backoff(&shared.retry, attempt, shared.seed ^ piece.id).await;
            }
            Err(e) => {
                if let Error::Aborted(cause) = &e {
                    ctx.state.lock().doomed = Some(*cause);
                }
                return Err(e);
            }
        }
    }
}

/// The nexus release order: waits until every same-group transaction `txn`
/// depends on released its nexus locks, releases `txn`'s at every
/// participant, then tells the transactions waiting on it.
async fn release_in_order(
    shared: Arc<Shared>,
    node: NodeId,
    txn: TxnId,
    participants: SmallVec<[usize; 4]>,
    after: SmallVec<[TxnId; 4]>,
) {
    for t in after {
        shared.nexus.wait(t).await;
    }
    let acks = futures::future::join_all(participants.iter().map(|&p| {
        shared.request(node, p, move |reply| PartitionMsg::Release {
            owner: txn,
            upto: None,
            reply,
        })
    }))
    .await;
    for a in acks {
        if let Err(e) = a {
            tracing::warn!(%txn, "nexus release not acknowledged: {e}");
        }
    }
    shared.nexus.released(txn);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grouping_parses_prints_and_finds_groups() -> Result<()> {
        let g = Grouping::parse("orders:2pl=new_order, payment ; slow:chop=delivery")?;
        assert_eq!(
            g.to_string(),
            "orders:2pl=new_order,payment;slow:chop=delivery"
        );
        assert_eq!(g.group_of("payment"), Some((1, Mechanism::TwoPl)));
        assert_eq!(g.group_of("delivery"), Some((2, Mechanism::Chop)));
        assert_eq!(g.group_of("stock_level"), None);
        g.validate(["new_order", "payment", "delivery", "stock_level"])?;
        Ok(())
    }

    #[test]
    fn bad_groupings_are_refused_with_the_reason() {
        for (spec, needle) in [
            ("", "at least one group"),
            ("orders=new_order", "expected name:mechanism"),
            ("orders:2pl=", "expected name:mechanism"),
            ("orders:occ=new_order", "unknown group mechanism `occ`"),
        ] {
            let e = Grouping::parse(spec).expect_err(spec).to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        let g = Grouping::parse("a:2pl=x;b:2pl=x").expect("parses");
        let e = g.validate(["x"]).expect_err("twice").to_string();
        assert!(e.contains("in two groups"), "{e}");
        let g = Grouping::parse("a:2pl=nope").expect("parses");
        let e = g.validate(["x", "y"]).expect_err("unknown").to_string();
        assert!(e.contains("does not have (it has: x, y)"), "{e}");
    }

    #[tokio::test]
    async fn the_board_wakes_waiters_when_a_transaction_released() {
        let board = Arc::new(NexusBoard::default());
        let t = TxnId { ts: 1, id: 7 };
        board.register(t);
        let b = board.clone();
        let waiter = tokio::spawn(async move { b.wait(t).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        board.released(t);
        waiter.await.expect("woken");
        // Unknown (already released) transactions do not block.
        board.wait(TxnId { ts: 2, id: 8 }).await;
        assert!(board.is_empty());
    }
}
