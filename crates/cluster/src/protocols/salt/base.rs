//! Salt at the coordinator: BASE transactions as sequences of alkaline
//! subtransactions (seed 000 chapter 3, seed 001; DESIGN 4.3).
//!
//! ```text
//!  call(BASE proc) ──► body ── begin_alkaline ─ exec.. ─ end_alkaline ──► commit_at(sub, keep owner)
//!                        │        (a statement outside a block is its own      │ partitions downgrade
//!                        │         single-statement subtransaction)            ▼ alkaline -> saline
//!                        │                                   first subtransaction committed: ACCEPTED
//!                        ▼ body returned: COMPLETED ──► release saline locks (background), in stages:
//!                          d1, ..., dk, all
//!                          (d1 < .. < dk: statements that read another BASE transaction's
//!                           unreleased write; write-after-read rule)
//! ```
//!
//! Each partition runs its stages in order by itself, from one `Release`
//! message, when every dirty read it must wait for happened there; if a
//! partition holds a lock taken after a dirty read at another partition,
//! the coordinator runs the stages in lockstep instead: one `Release` per
//! stage to every partition, each after all answered the one before
//! (`BaseState::release_rounds`).
//!
//! One `TxnId` (the *owner*) holds every lock of the BASE transaction; each
//! alkaline subtransaction writes, prepares, logs and commits under a
//! `TxnId` of its own (same timestamp, so wait-die sees one age).
//!
//! Retries. A concurrency-control victim before acceptance aborts the
//! whole BASE transaction, which is retried like an ACID one. After
//! acceptance nothing rolls back: the victim subtransaction is undone and
//! the body is run again from the start against the *context table*, the
//! results (and errors) of every statement already executed, which are
//! replayed, not re-executed, up to the subtransaction that failed. Bodies
//! are deterministic (DESIGN 3), so the replay takes the same path; the
//! same mechanism rolls accepted transactions forward after a crash, with
//! the results logged with each subtransaction (`roll_forward`).
//!
//! Errors. A statement error inside a subtransaction rolls the
//! subtransaction back and closes it; the body's handler decides what
//! follows. Before acceptance such an error ends the call with it. A
//! commit nobody answered leaves the transaction in doubt: it stops, runs
//! no handler, and recovery finishes it (`BaseState::in_doubt`).
//!
//! User guide: `docs/salt.md`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use brine_core::{Error, Result, TxnId, Value};
use brine_lock::LockClass;
use brine_sql::{Plan, QueryResult};
use parking_lot::Mutex;
use smallvec::SmallVec;

use brine_check::{Op, Outcome, TxnClass};

use super::SaltOptions;
use crate::coordinator::{
    abort_at, commit_at, outcome_unknown, CallOutcome, ProcCtx, Retries, Sent, Shared, TxnState,
};
use crate::message::{PartitionMsg, ReleaseStage, SubStmt};
use crate::partition::Ending;
use crate::protocol::{Call, TxnExt};

use super::release::{give_up, release};

/// A BASE transaction's state at its coordinator.
pub(super) struct BaseState {
    opts: SaltOptions,
    pub(super) release_order: bool,
    /// Position of the next statement in program order.
    seq: u32,
    /// Statements before this position are answered from `context`.
    replay_until: u32,
    /// The context table: each executed statement's result, by position.
    context: Vec<Option<Result<QueryResult>>>,
    /// The open alkaline subtransaction, if any.
    block: Option<Block>,
    /// Local-transaction optimization for a longer subtransaction: the
    /// last one ended, which ran on one partition only, commits there with
    /// the next statement sent to that partition
    /// (`BaseStmt::commit_first`); any other next step commits it first,
    /// in a round of its own. Never the acceptance: that one is waited for.
    commit_later: Option<Block>,
    /// Blocks the body left with an error (it opened the next one without
    /// ending them): rolled back before anything else is sent.
    abandoned: Vec<Block>,
    pub(super) accepted: bool,
    /// An error that ended a subtransaction before acceptance.
    first_error: Option<Error>,
    /// Subtransactions opened so far (in this run of the body).
    subs: u32,
    /// Where the BASE transaction holds locks, each partition with the
    /// position of the last statement that ran there.
    pub(super) touched: SmallVec<[(usize, u32); 4]>,
    /// Positions of statements that read another BASE transaction's
    /// unreleased write (ascending), with the partitions where they did.
    pub(super) dirty: Vec<(u32, SmallVec<[usize; 2]>)>,
    /// With a log: the procedure and arguments, logged with the first
    /// statement (durable acceptance).
    pub(super) intro: Option<Arc<(String, Vec<Value>)>>,
    /// Roll-forward after a crash: the logged results of the statements
    /// of committed subtransactions (parts per partition), by position.
    pub(super) recovered: std::collections::HashMap<u32, Vec<QueryResult>>,
    /// Told when the transaction is accepted.
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
    /// First position of the subtransaction a concurrency-control abort
    /// hit (the replay resumes there).
    doomed_at: Option<u32>,
    /// A subtransaction's outcome is unknown (its commit was not answered:
    /// the log or a partition is down). The body must not go on, and
    /// above all must not run an exception handler, which would
    /// compensate for something that may have committed: every later
    /// operation gets this error, the locks go, the context stays, and
    /// recovery rolls the transaction forward from what was logged.
    in_doubt: Option<Error>,
}

/// An open alkaline subtransaction.
struct Block {
    explicit: bool,
    start: u32,
    /// Its number in the BASE transaction (the history's `sub`).
    no: u32,
    /// Recorded operations before it (history recording).
    mark: usize,
    /// `None` while replaying: nothing is sent.
    live: Option<Sub>,
}

struct Sub {
    txn: TxnId,
    participants: SmallVec<[usize; 4]>,
}

impl BaseState {
    pub(super) fn new(opts: SaltOptions) -> Self {
        BaseState {
            opts,
            release_order: opts.release_order,
            seq: 0,
            replay_until: 0,
            context: Vec::new(),
            block: None,
            commit_later: None,
            abandoned: Vec::new(),
            accepted: false,
            first_error: None,
            subs: 0,
            touched: SmallVec::new(),
            dirty: Vec::new(),
            doomed_at: None,
            in_doubt: None,
            on_accept: None,
            intro: None,
            recovered: Default::default(),
        }
    }

    /// Whether the statement at `seq` is answered from what was recorded
    /// (the context table, or the log during roll-forward).
    fn replayed(&self, seq: u32) -> bool {
        (seq < self.replay_until && self.context.get(seq as usize).is_some_and(Option::is_some))
            || self.recovered.contains_key(&seq)
    }

    /// The first alkaline subtransaction committed: the client may be told.
    fn accept(&mut self) {
        self.accepted = true;
        if let Some(tx) = self.on_accept.take() {
            let _ = tx.send(());
        }
    }

    fn touch(&mut self, p: usize, seq: u32) {
        match self.touched.iter_mut().find(|(q, _)| *q == p) {
            Some((_, last)) => *last = (*last).max(seq),
            None => self.touched.push((p, seq)),
        }
    }

    fn open(&mut self, shared: &Shared, owner: TxnId, explicit: bool, mark: usize) {
        let live = (!self.replayed(self.seq)).then(|| Sub {
            txn: shared.new_txn(Some(owner.ts)),
            participants: SmallVec::new(),
        });
        self.block = Some(Block {
            explicit,
            start: self.seq,
            no: self.subs,
            mark,
            live,
        });
        self.subs += 1;
    }

    fn remember(&mut self, seq: u32, result: &Result<QueryResult>) {
        let i = seq as usize;
        if self.context.len() <= i {
            self.context.resize(i + 1, None);
        }
        self.context[i] = Some(result.clone());
    }
}

/// Refuses to go on once an outcome is unknown (see `in_doubt`).
fn check_in_doubt(b: &BaseState) -> Result<()> {
    match &b.in_doubt {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

impl TxnExt for BaseState {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

pub(super) fn base_mut(st: &mut TxnState) -> &mut BaseState {
    st.ext
        .as_mut()
        .and_then(|e| e.as_any_mut().downcast_mut::<BaseState>())
        .expect("a BASE transaction")
}

/// Operations recorded so far (0 when the run records no history).
fn rec_len(st: &TxnState) -> usize {
    st.rec.as_ref().map_or(0, |r| r.ops.len())
}

pub(super) fn begin_alkaline(ctx: &mut ProcCtx) -> Result<()> {
    let shared = ctx.shared.clone();
    let mut st = ctx.state.lock();
    if let Some(cause) = st.doomed {
        return Err(Error::Aborted(cause));
    }
    let owner = st.txn;
    let mark = rec_len(&st);
    let b = base_mut(&mut st);
    check_in_doubt(b)?;
    match b.block.take() {
        // The body left the previous block with an error (`?` out of it):
        // it is rolled back, as an exception in it would.
        Some(prev) if prev.explicit => b.abandoned.push(prev),
        Some(_) => {
            return Err(Error::Internal(
                "begin_alkaline inside a single-statement subtransaction".into(),
            ))
        }
        None => {}
    }
    b.open(&shared, owner, true, mark);
    Ok(())
}

/// Rolls back the blocks the body abandoned.
async fn roll_back_abandoned(ctx: &ProcCtx) {
    let blocks = std::mem::take(&mut base_mut(&mut ctx.state.lock()).abandoned);
    for block in blocks {
        roll_back(ctx, block).await;
    }
}

pub(super) async fn end_alkaline(ctx: &mut ProcCtx) -> Result<()> {
    roll_back_abandoned(ctx).await;
    let block = {
        let mut st = ctx.state.lock();
        if let Some(cause) = st.doomed {
            return Err(Error::Aborted(cause));
        }
        let b = base_mut(&mut st);
        check_in_doubt(b)?;
        let block = match b.block.take() {
            Some(block) if block.explicit => block,
            other => {
                b.block = other;
                return Err(Error::TxnState(
                    "end_alkaline: no alkaline subtransaction is open (a failed statement closes it)"
                        .into(),
                ));
            }
        };
        let one_partition = block
            .live
            .as_ref()
            .is_some_and(|sub| sub.participants.len() == 1);
        if b.accepted && b.opts.local_commit && one_partition {
            b.commit_later = Some(block);
            return Ok(());
        }
        block
    };
    finish_block(ctx, block).await
}

/// Before a statement to `targets`: the subtransaction left to commit
/// later commits first, in a round of its own, unless the statement can
/// carry its commit (a live statement to the same single partition).
async fn commit_unless_carried(ctx: &ProcCtx, targets: &[usize]) -> Result<()> {
    let carried = {
        let mut st = ctx.state.lock();
        let b = base_mut(&mut st);
        let live = !b.replayed(b.seq);
        b.commit_later.as_ref().is_none_or(|bl| {
            live && bl
                .live
                .as_ref()
                .is_some_and(|sub| sub.participants.as_slice() == targets)
        })
    };
    if carried {
        Ok(())
    } else {
        commit_now(ctx).await
    }
}

/// Commits the subtransaction left to commit later, if any (the body
/// returned, or something else must go first).
async fn commit_now(ctx: &ProcCtx) -> Result<()> {
    let block = base_mut(&mut ctx.state.lock()).commit_later.take();
    match block {
        Some(block) => finish_block(ctx, block).await,
        None => Ok(()),
    }
}

/// A subtransaction committed: the first one accepts the transaction,
/// which can no longer roll back, so every partition it touched protects
/// it from now on (`LockTable::protect`: a cycle's victim is another
/// member when there is one) and its later statements carry the
/// protection to the partitions they reach.
fn accepted(ctx: &ProcCtx) {
    let (owner, newly) = {
        let mut st = ctx.state.lock();
        let owner = st.txn;
        let b = base_mut(&mut st);
        let newly = !b.accepted;
        b.accept();
        (owner, newly.then(|| b.touched.clone()))
    };
    for (p, _) in newly.into_iter().flatten() {
        ctx.shared
            .send(ctx.node, p, PartitionMsg::Protect { owner });
    }
}

/// Commits a subtransaction whose statements all succeeded.
async fn finish_block(ctx: &ProcCtx, block: Block) -> Result<()> {
    let mark = block.mark;
    let Some(sub) = block.live else {
        return Ok(()); // replayed: committed in an earlier run of the body
    };
    let owner = ctx.state.lock().txn;
    let (result, undone) = commit_at(
        &ctx.shared,
        ctx.node,
        sub.txn,
        Ending::Sub { owner },
        &sub.participants,
    )
    .await;
    record_undone(&ctx.shared, sub.txn, undone);
    match result {
        Ok(()) => {
            accepted(ctx);
            Ok(())
        }
        Err(e) => {
            let mut st = ctx.state.lock();
            if let Error::Aborted(cause) = e {
                // Aborted at its commit (a participant voted no, or did
                // not answer): it installed nothing, so its recorded
                // operations go, as a rollback's do.
                if let Some(rec) = &mut st.rec {
                    rec.ops.truncate(mark);
                }
                st.doomed = Some(cause);
                base_mut(&mut st).doomed_at = Some(block.start);
            } else if outcome_unknown(&e) {
                base_mut(&mut st).in_doubt = Some(e.clone());
            }
            Err(e)
        }
    }
}

/// Records what subtransaction `sub` wrote and its abort undid (when the
/// run records a history) as an aborted part (`HistorySink::aborted_part`):
/// its recorded operations left the BASE transaction's record, but
/// another's write may lie over one of them. Not once the log is down (a
/// crash): a commit that failed then may be in the log all the same, and
/// what recovery finds there is the transaction's (its roll-forward's
/// record); nothing written after the crash lies over it.
pub(super) fn record_undone(shared: &Shared, sub: TxnId, undone: Vec<Op>) {
    let down = shared.wal.as_ref().is_some_and(|w| w.is_down());
    if let (Some(h), false, false) = (&shared.history, undone.is_empty(), down) {
        h.aborted_part(sub, undone);
    }
}

/// Undoes a live subtransaction; its locks stay, downgraded to saline.
/// Its recorded operations are dropped: it installed nothing.
async fn roll_back(ctx: &ProcCtx, block: Block) {
    if let Some(sub) = block.live {
        let owner = {
            let mut st = ctx.state.lock();
            if let Some(rec) = &mut st.rec {
                rec.ops.truncate(block.mark);
            }
            st.txn
        };
        let undone = abort_at(
            &ctx.shared,
            ctx.node,
            sub.txn,
            Ending::Sub { owner },
            &sub.participants,
        )
        .await;
        record_undone(&ctx.shared, sub.txn, undone);
    }
}

/// Runs one statement of a BASE transaction.
pub(super) async fn exec(
    ctx: &mut ProcCtx,
    plan: Arc<Plan>,
    args: Vec<Value>,
) -> Result<QueryResult> {
    let params = plan.bind(args)?;
    let shared = ctx.shared.clone();
    roll_back_abandoned(ctx).await;
    let targets = shared.targets(&plan, &params);
    commit_unless_carried(ctx, &targets).await?;
    // Position, replay, and the subtransaction it belongs to.
    let (owner, seq, sub_txn, sub_no, implicit, opts, protect, intro, commit_first, isolation) = {
        let mut st = ctx.state.lock();
        let isolation = st.isolation.unwrap_or(shared.isolation);
        if let Some(cause) = st.doomed {
            return Err(Error::Aborted(cause));
        }
        let owner = st.txn;
        let mark = rec_len(&st);
        let b = base_mut(&mut st);
        check_in_doubt(b)?;
        let seq = b.seq;
        b.seq += 1;
        if b.replayed(seq) {
            let r = match b.recovered.remove(&seq) {
                Some(mut parts) if parts.len() == 1 => Ok(parts.pop().expect("one part")),
                Some(parts) => plan.merge(parts),
                None => b.context[seq as usize].clone().expect("replayed"),
            };
            b.remember(seq, &r);
            if r.is_err() {
                b.block = None;
            }
            return r;
        }
        let implicit = b.block.is_none();
        if implicit {
            b.open(&shared, owner, false, mark);
        }
        let Some((sub_txn, sub_no)) = b
            .block
            .as_ref()
            .and_then(|bl| bl.live.as_ref().map(|s| (s.txn, bl.no)))
        else {
            // The block began with a recorded statement but this one was
            // not recorded: the record of the subtransaction is partial.
            return Err(Error::Internal(format!(
                "{owner}: statement {seq} of a replayed subtransaction (from {:?}) has no recorded result (recovered {:?}, context {})",
                b.block.as_ref().map(|bl| bl.start),
                b.recovered.keys().collect::<Vec<_>>(),
                b.context.len()
            )));
        };
        let intro = if seq == 0 { b.intro.clone() } else { None };
        // Left by `commit_unless_carried` only if this statement carries it.
        let commit_first = b
            .commit_later
            .take()
            .and_then(|bl| bl.live.map(|sub| sub.txn));
        (
            owner,
            seq,
            sub_txn,
            sub_no,
            implicit,
            b.opts,
            b.accepted,
            intro,
            commit_first,
            isolation,
        )
    };
    let mut lock = shared.protocol.lock_spec(isolation);
    lock.class = LockClass::Alkaline;
    let autocommit = implicit && opts.local_commit && targets.len() == 1;
    {
        let mut st = ctx.state.lock();
        let b = base_mut(&mut st);
        for &p in &targets {
            b.touch(p, seq);
            if let Some(sub) = b.block.as_mut().and_then(|bl| bl.live.as_mut()) {
                if !sub.participants.contains(&p) {
                    sub.participants.push(p);
                }
            }
        }
    }
    let sub = SubStmt {
        owner,
        seq,
        autocommit,
        commit_first,
        protect,
        no: sub_no,
    };
    let futs = targets.iter().map(|&p| {
        ctx.send_execute(
            p,
            sub_txn,
            plan.clone(),
            params.clone(),
            lock,
            Sent {
                sub: Some(sub),
                call: intro.clone(),
                ext: None,
            },
            None,
        )
    });
    let mut parts = Vec::with_capacity(targets.len());
    let mut first_err: Option<Error> = None;
    let mut dirty: SmallVec<[usize; 2]> = SmallVec::new();
    for (r, &p) in futures::future::join_all(futs)
        .await
        .into_iter()
        .zip(&targets)
    {
        match r {
            Ok(mut e) => {
                if e.dirty {
                    dirty.push(p);
                }
                for op in &mut e.ops {
                    op.set_sub(sub_no);
                }
                ctx.record_ops(e.ops);
                parts.push(e.result);
            }
            Err(e) => {
                if first_err.is_none() || e.is_retryable() {
                    first_err = Some(e);
                }
            }
        }
    }
    let result = match first_err {
        Some(e) => Err(e),
        None if parts.len() == 1 => Ok(parts.pop().expect("one part")),
        None => plan.merge(parts),
    };
    if let Err(e) = &result {
        if outcome_unknown(e) {
            // Unanswered: with the local optimization it may even have
            // committed (see `in_doubt`).
            base_mut(&mut ctx.state.lock()).in_doubt = Some(e.clone());
            return result;
        }
    }
    // A concurrency-control victim: the body is run again (see module doc).
    if let Err(Error::Aborted(cause)) = &result {
        let mut st = ctx.state.lock();
        st.doomed = Some(*cause);
        let b = base_mut(&mut st);
        b.doomed_at = b.block.as_ref().map(|bl| bl.start);
        return result;
    }
    {
        let mut st = ctx.state.lock();
        let b = base_mut(&mut st);
        b.remember(seq, &result);
        if !dirty.is_empty() {
            b.dirty.push((seq, dirty));
        }
    }
    match &result {
        Ok(_) if implicit => {
            let block = base_mut(&mut ctx.state.lock())
                .block
                .take()
                .expect("the implicit block");
            if autocommit {
                // Committed at the partition (local-transaction optimization).
                accepted(ctx);
            } else {
                finish_block(ctx, block).await?;
            }
        }
        Ok(_) => {}
        Err(e) => {
            let block = {
                let mut st = ctx.state.lock();
                let b = base_mut(&mut st);
                if !b.accepted && b.first_error.is_none() {
                    b.first_error = Some(e.clone());
                }
                b.block.take()
            };
            if let Some(block) = block {
                roll_back(ctx, block).await;
            }
        }
    }
    result
}

/// A commit of the BASE transaction went unanswered (`e`), so it may or
/// may not have happened: its open subtransactions are rolled back and,
/// with a log, it is rolled forward at once, fenced, under the same owner.
/// Its locks stay (the roll-forward takes them over, and its end releases
/// them), so no ACID transaction sees it half done meanwhile, and no late
/// release of this run frees what the roll-forward holds. Otherwise its
/// locks go and recovery finishes it. Its record in a history is the
/// roll-forward's. Returns the error for the caller.
async fn settle_in_doubt(ctx: &ProcCtx, e: Error) -> Error {
    let (shared, node, state) = (&ctx.shared, ctx.node, &ctx.state);
    roll_back_abandoned(ctx).await;
    let block = base_mut(&mut state.lock()).block.take();
    if let Some(block) = block {
        roll_back(ctx, block).await;
    }
    let owner = state.lock().txn;
    let rolled = shared
        .protocol
        .as_any()
        .downcast_ref::<super::Salt>()
        .is_some_and(|salt| salt.gave_up_in_doubt(shared, owner, node));
    if rolled {
        state.lock().finished = true;
    } else {
        give_up(shared, node, state);
    }
    Error::Transport(format!(
        "BASE transaction {owner}: outcome unknown ({e}); if it was accepted, it is rolled forward"
    ))
}

/// Runs a BASE procedure to completion under Salt.
pub(super) async fn run_base(
    call: Call<'_>,
    opts: SaltOptions,
    resume: Option<Arc<Mutex<TxnState>>>,
) -> Result<CallOutcome> {
    let Call {
        shared,
        node,
        proc,
        args,
        mut on_accept,
        ..
    } = call;
    let mut tries = Retries::new(shared);
    let mut slot: Option<Arc<Mutex<TxnState>>> = resume;
    let ctx_of = |state: &Arc<Mutex<TxnState>>| {
        ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone())
            .with_statements(&super::BaseStatements)
    };
    loop {
        let attempt = tries.begin();
        // A fresh BASE transaction, or the same one replaying after a
        // victim subtransaction once it was accepted.
        let state = match slot.take() {
            Some(s) => s,
            None => {
                let txn = tries.new_txn();
                let mut st = TxnState::begin(shared, txn, Some(proc));
                if let Some(rec) = &mut st.rec {
                    rec.class = TxnClass::Base;
                }
                let mut b = BaseState::new(opts);
                b.on_accept = on_accept.take();
                if shared.wal.is_some() {
                    b.intro = Some(Arc::new((proc.name.clone(), args.clone())));
                }
                st.ext = Some(Box::new(b));
                Arc::new(Mutex::new(st))
            }
        };
        let body_result = (proc.body)(ctx_of(&state), args.clone()).await;
        let owner = state.lock().txn;
        let ctx = ctx_of(&state);
        // Its statements succeeded, whatever the body did next: it commits
        // (a failure dooms the transaction or leaves it in doubt, below).
        let _ = commit_now(&ctx).await;
        let in_doubt = base_mut(&mut state.lock()).in_doubt.clone();
        if let Some(e) = in_doubt {
            return Err(settle_in_doubt(&ctx, e).await);
        }
        let doomed = state.lock().doomed;
        if let Some(cause) = doomed {
            roll_back_abandoned(&ctx).await;
            let block = base_mut(&mut state.lock()).block.take();
            if let Some(block) = block {
                roll_back(&ctx, block).await;
            }
            let accepted = base_mut(&mut state.lock()).accepted;
            if accepted {
                if shared.wal.as_ref().is_some_and(|w| w.is_down()) {
                    shared.counters.count_abort(cause);
                    // Nothing can commit any more; recovery rolls the
                    // transaction forward from its logged context. Its
                    // locks go, so no release waits for it.
                    give_up(shared, node, &state);
                    return Err(Error::Storage(format!(
                        "{owner}: accepted, but the log is down: it completes when the node recovers"
                    )));
                }
                // Replay up to the victim subtransaction, then go on live.
                {
                    let mut st = state.lock();
                    st.doomed = None;
                    let b = base_mut(&mut st);
                    let resume = b.doomed_at.take().unwrap_or(b.seq);
                    b.replay_until = resume;
                    b.context.truncate(resume as usize);
                    b.dirty.retain(|&(d, _)| d < resume);
                    b.seq = 0;
                    b.subs = 0;
                    b.block = None;
                }
                shared.counters.protocol.add(super::REPLAYS, 1);
                // An accepted transaction cannot give up: no bound.
                Retries::rerun(shared, cause, attempt, owner.id).await;
                slot = Some(state);
                continue;
            }
            let rounds = {
                let mut st = state.lock();
                st.finished = true;
                st.record_end(shared, Outcome::Aborted);
                let b = base_mut(&mut st);
                // The next attempt tells the client.
                on_accept = b.on_accept.take();
                b.release_at_once(ReleaseStage::End)
            };
            release(shared.clone(), node, owner, rounds, false).await;
            tries.victim(cause, owner.id).await?;
            continue;
        }
        // The body returned: finish an open subtransaction.
        roll_back_abandoned(&ctx).await;
        let block = base_mut(&mut state.lock()).block.take();
        if let Some(block) = block {
            match &body_result {
                Ok(_) => {
                    if let Err(e) = finish_block(&ctx, block).await {
                        if matches!(e, Error::Aborted(_)) {
                            // The commit round failed: handled as a victim
                            // on the next turn (the state is doomed).
                            slot = Some(state);
                            tries.resume();
                            continue;
                        }
                        if outcome_unknown(&e) {
                            // The last commit went unanswered: as above.
                            return Err(settle_in_doubt(&ctx, e).await);
                        }
                        give_up(shared, node, &state);
                        return Err(e);
                    }
                }
                Err(_) => roll_back(&ctx, block).await,
            }
        }
        let (accepted, rounds, first_error) = {
            let mut st = state.lock();
            st.finished = true;
            let b = base_mut(&mut st);
            let rounds = if b.accepted {
                b.release_rounds()
            } else {
                b.release_at_once(ReleaseStage::End)
            };
            let out = (b.accepted, rounds, b.first_error.take());
            if let Some(rec) = &mut st.rec {
                rec.accepted = out.0;
            }
            let outcome = if out.0 {
                Outcome::Committed
            } else {
                Outcome::Aborted
            };
            st.record_end(shared, outcome);
            out
        };
        if !accepted {
            // Nothing committed: the BASE transaction aborted before
            // acceptance (or did nothing).
            release(shared.clone(), node, owner, rounds, false).await;
            if let Some(e) = first_error {
                shared.counters.user_aborts.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        } else {
            shared.counters.protocol.add(super::ACCEPTED, 1);
            tokio::spawn(release(shared.clone(), node, owner, rounds, true));
        }
        return match body_result {
            Ok(values) => {
                shared.counters.commits.fetch_add(1, Ordering::Relaxed);
                Ok(CallOutcome {
                    values,
                    attempts: attempt,
                })
            }
            Err(e) => Err(e),
        };
    }
}
