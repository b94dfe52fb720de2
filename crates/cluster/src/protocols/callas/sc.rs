//! Callas `sc` groups: classic transaction chopping inside a group (seed
//! 000 section 4.6, "Comparison with other techniques"; Shasha et al.'s
//! SC-cycle analysis, `brine_analysis::classic`).
//!
//! ```text
//!  body ── exec(stmt) ──► the piece of stmt (the group's classic chopping)
//!    │     a later piece: commit the open piece (its locks become the
//!    │     transaction's nexus locks), open the next (a fresh id, same age)
//!    ▼ body returned: commit the last piece; the transaction's nexus locks
//!      go as under `chop` (in release order)
//!  a committed piece wrote: the transaction is protected at every
//!    partition that holds its locks (it ranks above all others there)
//!  a victim in a later piece of a protected transaction: roll that piece
//!  back and run the body again, the committed pieces' statements answered
//!  from their recorded results (a body is a function of its arguments and
//!  results); of a transaction whose committed pieces only read: abort it
//!  whole and retry
//! ```
//!
//! Each piece is a two-phase-locking transaction of its own: its member
//! locks conflict with every running piece of the group, and become nexus
//! locks (compatible inside the group, conflicting with other groups) when
//! it commits. The chopping has no SC-cycle among the group's procedures,
//! so the group's executions are serializable (Shasha et al.); it is
//! rollback-safe (every rollback is in the first piece), so a piece after
//! the first never rolls back for the application's reasons, and one that
//! the concurrency control chose as a victim is run again until it commits.
//!
//! For that to end, a transaction that cannot roll back any more must not
//! be the one that gives way: once a piece that wrote committed, the lock
//! tables protect the transaction (`LockTable::protect`). Wait-die then
//! ranks it above every unprotected transaction: its later pieces wait for
//! older transactions instead of dying, and a transaction that would wait
//! for its locks dies instead (one already waiting is aborted when the
//! protection arrives). Without this, an older transaction waiting for a
//! committed piece's lock, while the younger later piece died on the older
//! one's lock, ran again and died again, kept a call stuck (TPC-C under
//! `sc` groups). A transaction whose committed pieces only read is not
//! protected: it is aborted whole, which also lets go of its nexus locks.
//!
//! After a crash (with the log, in one process): each piece's partitions
//! logged its statements' results with its commit (the first piece's
//! statements carry the call), and an attempt's end is logged at its
//! coordinator before its partitions close what it logged. Recovery runs
//! the transactions that logged pieces but no end again under their owner
//! id (`run::roll_forward`): their committed pieces' statements are
//! answered from the log ([`ScRun::recovered`]), the rest run live.

use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{AbortCause, Error, NodeId, Result, TxnId, Value};
use brine_sql::{Plan, QueryResult, StatementKind};
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::state::state_mut;
use super::CallasStmt;
use crate::coordinator::{abort_at, commit_at, ProcCtx, Retries, Sent, Shared, TxnState};
use crate::message::{Intro, PartitionMsg, SubStmt};
use crate::partition::Ending;

/// An `sc` transaction's pieces at its coordinator.
#[derive(Debug, Default)]
pub struct ScRun {
    /// The open piece's transaction (a fresh id with the owner's age).
    sub: Option<TxnId>,
    /// Every statement's piece and result in this attempt, in order.
    results: Vec<(u32, Result<QueryResult>)>,
    /// How many of `results` belong to committed pieces: a re-run of the
    /// body gets them back instead of running them again.
    committed: usize,
    /// Statements the current run of the body has asked for.
    cursor: usize,
    /// Length of the attempt's recorded history when the piece opened.
    rec_mark: usize,
    /// How many same-group transactions it depended on when the piece
    /// opened (`CallasState::after`): a rolled-back piece's dependencies
    /// go with it.
    after_mark: usize,
    /// Re-runs of the current piece.
    reruns: u32,
    /// The open piece has a statement that writes.
    open_writes: bool,
    /// A committed piece wrote: the transaction can no longer roll back,
    /// and the partitions protect it (`LockTable::protect`).
    protected: bool,
    /// Partitions of the committed pieces (where the nexus locks are).
    held_at: SmallVec<[usize; 4]>,
    /// With a log: the procedure and its arguments, sent with every
    /// statement (its partitions log it with the piece's context, so
    /// recovery knows what to roll forward, and a restarted partition the
    /// group whose nexus locks it takes again).
    pub(super) intro: Intro,
    /// A roll-forward's logged results of one statement from several
    /// partitions (by position in `results`), merged when the statement's
    /// plan is at hand (its first replay).
    parts: HashMap<usize, Vec<QueryResult>>,
}

/// A result in [`ScRun::results`] that a roll-forward took from the log:
/// its piece is not known (the statement's replay sets it).
const RECOVERED: u32 = u32::MAX;

impl ScRun {
    /// The run of a transaction rolled forward after a crash: `results`,
    /// each statement's logged parts (one per partition it ran at) in
    /// statement order, are its committed pieces' results. It cannot roll
    /// back any more (its pieces may have written).
    pub(super) fn recovered(intro: Intro, results: Vec<Vec<QueryResult>>) -> ScRun {
        let mut run = ScRun {
            intro,
            protected: true,
            ..ScRun::default()
        };
        for parts in results {
            let Some(first) = parts.first().cloned() else {
                continue;
            };
            if parts.len() > 1 {
                run.parts.insert(run.results.len(), parts);
            }
            run.results.push((RECOVERED, Ok(first)));
        }
        run.committed = run.results.len();
        run
    }

    /// A piece that ran at `parts` committed. Returns the partitions to
    /// protect the transaction at: every one it holds locks at, when this
    /// is the first committed piece that wrote.
    fn piece_committed(&mut self, parts: &[usize]) -> SmallVec<[usize; 4]> {
        self.committed = self.results.len();
        self.reruns = 0;
        for &p in parts {
            if !self.held_at.contains(&p) {
                self.held_at.push(p);
            }
        }
        if self.open_writes && !self.protected {
            self.protected = true;
            return self.held_at.clone();
        }
        SmallVec::new()
    }
}

/// The `sc` state of a transaction running in an `sc` group.
fn run_of(st: &mut TxnState) -> &mut ScRun {
    state_mut(st)
        .and_then(|c| c.sc.as_deref_mut())
        .expect("sc state")
}

fn rec_len(st: &TxnState) -> usize {
    st.rec.as_ref().map_or(0, |r| r.ops.len())
}

/// The open piece, taken: its transaction and partitions.
fn take_open(st: &mut TxnState) -> Option<(TxnId, SmallVec<[usize; 4]>)> {
    let c = state_mut(st).expect("callas state");
    let run = c.sc.as_mut().expect("sc state");
    let sub = run.sub.take()?;
    Some((sub, std::mem::take(&mut c.piece_parts)))
}

/// Runs one statement of an `sc` transaction: replayed if its piece
/// committed in an earlier run of the body; otherwise in its piece, which
/// it opens (committing the one before) if it is the piece's first.
pub(super) async fn exec(
    ctx: &mut ProcCtx,
    statement: &str,
    plan: Arc<Plan>,
    args: Vec<Value>,
) -> Result<QueryResult> {
    let shared = ctx.shared.clone();
    let (owner, k, closing) = {
        let mut st = ctx.state.lock();
        if let Some(cause) = st.doomed {
            return Err(Error::Aborted(cause));
        }
        let owner = st.txn;
        let c = state_mut(&mut st).expect("callas state");
        let pieces = c
            .pieces
            .as_ref()
            .ok_or_else(|| Error::Internal("an `sc` transaction without its pieces".into()))?;
        let k = pieces.piece_of(statement, false)?.piece;
        let cur = c.piece.map(|(p, _)| p);
        let run = c.sc.as_mut().expect("sc state");
        if run.cursor < run.committed {
            let at = run.cursor;
            if run.results[at].0 == RECOVERED {
                if let Some(parts) = run.parts.remove(&at) {
                    run.results[at].1 = plan.merge(parts);
                }
                run.results[at].0 = k;
            }
            let (was, result) = &run.results[at];
            if *was != k {
                return Err(Error::Internal(format!(
                    "statement `{statement}` (piece {}) runs where the body's earlier run had a \
                     statement of piece {}: a body must run the same statements for the same results",
                    k + 1,
                    was + 1
                )));
            }
            run.cursor += 1;
            return result.clone();
        }
        if cur.is_some_and(|cur| k < cur) {
            return Err(Error::Internal(format!(
                "statement `{statement}` belongs to piece {} but the transaction already runs piece \
                 {}: the body and the analysis's notes disagree (crates/analysis/src/workloads.rs)",
                k + 1,
                cur.map_or(0, |c| c + 1)
            )));
        }
        let closing = if cur != Some(k) {
            take_open(&mut st)
        } else {
            None
        };
        (owner, k, closing)
    };
    if let Some(piece) = closing {
        let parts = piece.1.clone();
        commit_piece(&shared, ctx.node, &ctx.state, owner, piece).await?;
        let protect_at = run_of(&mut ctx.state.lock()).piece_committed(&parts);
        for p in protect_at {
            shared.send(ctx.node, p, PartitionMsg::Protect { owner });
        }
    }
    let (sub, base, lock_class, intro) = {
        let mut st = ctx.state.lock();
        let mark = rec_len(&st);
        let lock_class = st.lock_class;
        let c = state_mut(&mut st).expect("callas state");
        c.piece = Some((k, None));
        let after_mark = c.after.len();
        let seq = c.seq;
        c.seq += 1;
        let run = c.sc.as_mut().expect("sc state");
        let base = SubStmt {
            owner,
            seq,
            autocommit: false,
            commit_first: None,
            protect: run.protected,
            no: 0,
        };
        let sub = match run.sub {
            Some(sub) => sub,
            None => {
                let sub = shared.new_txn(Some(owner.ts));
                run.sub = Some(sub);
                run.rec_mark = mark;
                run.after_mark = after_mark;
                run.open_writes = false;
                sub
            }
        };
        run.open_writes |= plan.kind() != StatementKind::Select;
        // With a log, the call goes with each statement: the first piece's
        // context carries it to recovery, and every context names the
        // procedure, whose group a restarted partition locks the
        // transaction's rows again for (`partition::relock_open_contexts`).
        let intro = run.intro.clone();
        (sub, base, lock_class, intro)
    };
    let result = run_in_piece(ctx, sub, (base, intro), plan, args, lock_class).await;
    let mut st = ctx.state.lock();
    if let Err(Error::Aborted(cause)) = &result {
        st.doomed = Some(*cause);
    }
    let run = run_of(&mut st);
    run.results.push((k, result.clone()));
    run.cursor += 1;
    result
}

/// Executes a statement at the partitions it routes to, as part of piece
/// transaction `sub` whose locks `base.owner` holds.
async fn run_in_piece(
    ctx: &ProcCtx,
    sub: TxnId,
    (base, intro): (SubStmt, Intro),
    plan: Arc<Plan>,
    args: Vec<Value>,
    lock_class: Option<brine_lock::LockClass>,
) -> Result<QueryResult> {
    let params = plan.bind(args)?;
    // Callas runs every transaction at the cluster's level.
    let lock = ctx.lock_spec(None, lock_class);
    let words = CallasStmt {
        track: lock_class.is_some(),
        ..CallasStmt::default()
    };
    let how = Sent {
        sub: Some(base),
        call: intro,
        ext: (words != CallasStmt::default()).then(|| Arc::new(words) as _),
    };
    let targets = ctx.shared.targets(&plan, &params);
    ctx.execute_on(&targets, sub, &plan, params, lock, how)
        .await
}

/// Commits the piece `sub` of `owner` at `parts`; a concurrency-control
/// abort dooms the attempt.
async fn commit_piece(
    shared: &Shared,
    node: NodeId,
    state: &Mutex<TxnState>,
    owner: TxnId,
    (sub, parts): (TxnId, SmallVec<[usize; 4]>),
) -> Result<()> {
    let (r, _) = commit_at(shared, node, sub, Ending::Sub { owner }, &parts).await;
    if let Err(Error::Aborted(cause)) = &r {
        state.lock().doomed = Some(*cause);
    }
    r
}

/// Victim reruns of one piece after which a possible deadlock between
/// protected transactions is reported.
const STUCK_RERUNS: u32 = 100;

/// What [`body_done`] decided.
pub(super) enum Step<T> {
    /// A piece after the first was a victim and was rolled back: run the
    /// body again (the committed pieces are replayed).
    Rerun,
    /// The body's outcome, the last piece committed (or, on an error,
    /// rolled back).
    Done(Result<T>),
}

/// After a run of an `sc` body: commits the open piece if the body
/// succeeded; otherwise rolls it back, and if it was not the first piece
/// and the concurrency control chose it as a victim, asks for the body to
/// run again.
pub(super) async fn body_done<T>(
    shared: &Arc<Shared>,
    node: NodeId,
    state: &Mutex<TxnState>,
    result: Result<T>,
) -> Step<T> {
    let (owner, doomed, open) = {
        let mut st = state.lock();
        (st.txn, st.doomed, take_open(&mut st))
    };
    if let (Ok(_), None) = (&result, doomed) {
        if let Some(piece) = open {
            if let Err(e) = commit_piece(shared, node, state, owner, piece).await {
                return Step::Done(Err(e));
            }
        }
        return Step::Done(result);
    }
    if let Some((sub, parts)) = open {
        abort_at(shared, node, sub, Ending::Sub { owner }, &parts).await;
    }
    let victim: Option<AbortCause> = doomed.or(match &result {
        Err(Error::Aborted(cause)) => Some(*cause),
        _ => None,
    });
    // Only a transaction a committed piece of which wrote is kept: one
    // whose committed pieces only read is aborted whole and retried, which
    // also lets go of its nexus locks (a transaction waiting for them may
    // be what the victim piece waited for).
    let (protected, reruns) = {
        let mut st = state.lock();
        let (mark, protected, reruns) = {
            let c = state_mut(&mut st).expect("callas state");
            let run = c.sc.as_mut().expect("sc state");
            run.results.truncate(run.committed);
            run.cursor = 0;
            run.reruns += 1;
            let (marks, after_mark) = ((run.rec_mark, run.protected, run.reruns), run.after_mark);
            // What only the rolled-back piece depended on is no dependency
            // of the transaction (its partitions forgot the piece's uses
            // likewise, `NexusUses::forget_piece`).
            c.forget_after(after_mark);
            marks
        };
        if let Some(rec) = &mut st.rec {
            rec.ops.truncate(mark);
        }
        if protected && victim.is_some() {
            st.doomed = None;
        }
        (protected, reruns)
    };
    match (protected, victim) {
        (true, Some(cause)) => {
            if reruns == STUCK_RERUNS {
                tracing::warn!(
                    %owner,
                    ?cause,
                    "an `sc` piece was a victim {reruns} times in a row: it may be in a deadlock \
                     with a chopped transaction of another group, which neither can break (both \
                     committed a piece that wrote); see docs/callas.md, Limits"
                );
            }
            Retries::rerun(shared, cause, reruns, owner.id).await;
            Step::Rerun
        }
        (protected, victim) => {
            if protected {
                tracing::warn!(
                    %owner,
                    "an `sc` transaction failed after its first piece committed; the committed \
                     pieces stay (the chopping's rollback notes missed this failure)"
                );
            }
            Step::Done(match (result, victim) {
                (Err(e), _) => Err(e),
                (Ok(_), Some(cause)) => Err(Error::Aborted(cause)),
                (Ok(v), None) => Ok(v),
            })
        }
    }
}
