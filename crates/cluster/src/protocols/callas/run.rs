//! Runs a call of a grouped procedure: attempts, commit with the nexus
//! release order, `chop` pieces.

use super::prelude::*;
use super::GroupedStatements;

/// A chopped (`sc`) transaction rolled forward after a crash: its first
/// attempt runs under its owner id as it was, with the logged results of
/// its committed pieces, from statement position `seq` on.
pub(super) struct Resume {
    pub owner: TxnId,
    pub run: Box<super::sc::ScRun>,
    pub seq: u32,
    /// What its committed pieces recorded (when the run records a
    /// history): the roll-forward's record begins with it.
    pub recorded: Vec<brine_check::Op>,
}

/// Runs a procedure of group `group` to completion: attempts, retries,
/// commit; then, in the background, the nexus release in order.
pub(super) async fn run_grouped(
    callas: &Callas,
    call: crate::protocol::Call<'_>,
    group: (u32, Mechanism),
) -> Result<CallOutcome> {
    run_resumed(callas, call, group, None).await
}

/// [`run_grouped`], its first attempt resuming a rolled-forward
/// transaction when `resume` says so.
pub(super) async fn run_resumed(
    callas: &Callas,
    call: crate::protocol::Call<'_>,
    (group, mechanism): (u32, Mechanism),
    mut resume: Option<Resume>,
) -> Result<CallOutcome> {
    let crate::protocol::Call {
        shared,
        node,
        proc,
        args,
        on_accept,
        ..
    } = call;
    let mut tries = Retries::new(shared);
    let mut cascaded = false;
    // `sc` with a log: each piece's partitions log what it ran, and the
    // transaction's end is logged before they forget it, so a crash
    // between two pieces leaves it to be rolled forward at recovery.
    let durable = shared.wal.is_some() && mechanism == Mechanism::Sc;
    let intro: crate::message::Intro = durable.then(|| Arc::new((proc.name.clone(), args.clone())));
    loop {
        tries.begin();
        let mut resumed = resume.take();
        let txn = match &resumed {
            Some(r) => r.owner,
            None => tries.new_txn(),
        };
        let progress = callas.board.register(txn);
        // A transaction a cascade rolled back runs its retry in the
        // default group, under ACID locks: it reads no uncommitted state,
        // so no cascade can roll it back again (seed 002 section 5.1).
        let (mechanism, pieces) = match mechanism {
            Mechanism::Rp if cascaded => (Mechanism::TwoPl, None),
            Mechanism::Rp | Mechanism::Sc => (mechanism, callas.pieces_of(&proc.name)),
            m => (m, None),
        };
        let mut st = TxnState::begin(shared, txn, Some(proc));
        if let (Some(rec), Some(r)) = (&mut st.rec, resumed.as_mut()) {
            rec.ops = std::mem::take(&mut r.recorded);
        }
        st.at_cluster_level();
        if !cascaded {
            st.lock_class = Some(brine_lock::LockClass::Member(group));
        }
        st.ext = Some(Box::new(CallasState {
            mechanism,
            after: SmallVec::new(),
            deps: SmallVec::new(),
            seq: resumed.as_ref().map_or(0, |r| r.seq),
            safe: pieces
                .as_ref()
                .and_then(|p| p.mode.as_ref())
                .is_some_and(|m| m.is_safe()),
            pieces: pieces.clone(),
            piece: None,
            piece_parts: SmallVec::new(),
            piece_ended: false,
            rank_hold: None,
            progress: progress.clone(),
            sc: match resumed {
                Some(r) => Some(r.run),
                None => (mechanism == Mechanism::Sc).then(|| {
                    let mut run = Box::<super::sc::ScRun>::default();
                    run.intro = intro.clone();
                    run
                }),
            },
            board: callas.board.clone(),
        }));
        let state = Arc::new(Mutex::new(st));
        // The body whose order the pieces were cut for.
        let body = pieces
            .as_ref()
            .and_then(|p| p.reordering.as_ref())
            .map_or(&proc.body, |r| &r.body);
        let body_result = loop {
            let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone())
                .with_statements(&GroupedStatements);
            let r = body(ctx, args.clone()).await;
            if mechanism != Mechanism::Sc {
                break r;
            }
            // `sc`: the last piece commits, or a victim piece after the
            // first is rolled back and the body runs again.
            match super::sc::body_done(shared, node, &state, r).await {
                super::sc::Step::Rerun => continue,
                super::sc::Step::Done(r) => break r,
            }
        };
        if super::pipeline::rp_body_done(shared, node, &state, body_result.is_ok()) {
            tracing::trace!(%txn, "last piece ended before the commit");
        }
        let rp = mechanism == Mechanism::Rp;
        let doomed = state.lock().doomed;
        let ordered = callas.release_order;
        // The release order matters only where a transaction can commit
        // before one it depends on (`chop`, `sc`: pieces commit on their
        // own).
        // Under `2pl` and `rp` a dependant commits after what it depends
        // on, and releases no earlier than it commits, so "releases after"
        // already holds and the nexus locks go with the commit, as ACID
        // locks would, with no release round; so do a `chop`
        // transaction's when nothing it depends on still holds its own.
        let (waits, depends) = {
            let st = state.lock();
            let c = state_ref(&st).expect("callas state");
            let waits = ordered
                && matches!(mechanism, Mechanism::Chop | Mechanism::Sc)
                && c.after.iter().any(|t| callas.holds(*t));
            (waits, !c.after.is_empty())
        };
        let ending = if waits { Ending::Keep } else { Ending::Release };
        if let (true, Some(wal)) = (durable, &shared.wal) {
            // Committed or not, this attempt is over: its pieces' contexts
            // are closed before its partitions hear so (and before a retry
            // starts). A piece whose commit went unanswered (the log is
            // down, or a participant was out of reach past the decision's
            // patience) may have committed: the attempt is left as it is,
            // contexts and locks, for recovery to roll it forward; so is
            // one whose end cannot be logged.
            let unknown = match &body_result {
                Err(e) if crate::coordinator::outcome_unknown(e) => Some(e.clone()),
                _ => wal.log_context_end(node, txn).await.err(),
            };
            if let Some(e) = unknown {
                // Across processes it is rolled forward now, from the
                // contexts of every process (`across.rs`).
                let rolled = super::across::gave_up_in_doubt(callas, shared, txn, node);
                let e = Error::Transport(format!(
                    "chopped transaction {txn}: outcome unknown ({e}); if a piece committed, it \
                     is rolled forward{}",
                    if rolled { "" } else { " at the next recovery" }
                ));
                tries.failed(&e);
                return Err(e);
            }
        }
        let outcome = match (body_result, doomed) {
            // Runtime Pipelining: a transaction that saw another's
            // uncommitted state asks for votes (a participant that
            // cascaded an abort to it says No; only such a transaction
            // can be cascaded, and every dependency is reported with the
            // statement that created it), and is not decided before the
            // same-group transactions whose state it saw committed: their
            // abort is its own. Its participants prepare meanwhile.
            (Ok(values), None) => {
                let after = (rp && depends).then(|| commit_dependencies(shared, &state));
                match commit_keeping_after(shared, node, &state, ending, after).await {
                    Ok(()) => Ok(values),
                    Err(e) => Err(e),
                }
            }
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
        if let Some(mode) = pieces.as_ref().and_then(|p| p.mode.as_ref()) {
            if mode.record(super::pieces::rolled_back(&outcome)) {
                shared.counters.protocol.add(super::SAFE_MODE_SWITCHES, 1);
            }
        }
        let (participants, after) = {
            let st = state.lock();
            let c = state_ref(&st).expect("callas state");
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
            callas.board.released(txn);
        }
        match outcome {
            Ok(values) => return Ok(tries.committed(txn, &proc.name, values, on_accept)),
            Err(Error::Aborted(cause)) => {
                cascaded |= cause == AbortCause::Cascade;
                tries.victim(cause, txn.id).await?;
            }
            Err(e) => {
                tries.failed(&e);
                return Err(e);
            }
        }
    }
}

/// Runtime Pipelining's commit dependencies: done once every same-group
/// transaction `state`'s transaction depends on committed; an abort of
/// one (or a wait past the lock wait timeout) is an error.
async fn commit_dependencies(shared: &Shared, state: &Mutex<TxnState>) -> Result<()> {
    let deps: SmallVec<[Arc<Progress>; 4]> = {
        let st = state.lock();
        let c = state_ref(&st).expect("callas state");
        c.deps.iter().flatten().cloned().collect()
    };
    let c = &shared.counters;
    for d in deps {
        if let Some(took) = d.committed(shared.wait_timeout).await? {
            c.protocol
                .count_wait(super::COMMIT_WAITS, super::COMMIT_WAIT_NS, took);
        }
    }
    Ok(())
}

/// Chop: runs one statement as a piece of its own (a fresh id, the same
/// age), which its partition commits as soon as it ran, turning the
/// piece's locks into nexus locks of the transaction. A victim piece after
/// the first is run again (earlier pieces are committed and stay); a victim
/// first piece aborts the transaction, which is retried.
async fn exec_piece(
    ctx: &ProcCtx,
    plan: Arc<brine_sql::Plan>,
    params: Vec<Value>,
    (lock, ext): (crate::message::LockSpec, crate::message::StmtExt),
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
    // The first piece committed: the transaction can no longer roll back,
    // and the partitions that hold its locks protect it from now on (the
    // statements after it carry the protection to theirs).
    let protect_at = {
        let mut st = ctx.state.lock();
        let earlier = (seq == 1).then(|| st.participants.clone());
        st.add_participant(p);
        if let Some(c) = state_mut(&mut st) {
            c.seq += 1;
        }
        earlier.unwrap_or_default()
    };
    for q in protect_at {
        shared.send(ctx.node, q, PartitionMsg::Protect { owner });
    }
    let mut tries = Retries::new(&shared);
    loop {
        tries.begin();
        let piece = shared.new_txn(Some(owner.ts));
        let sub = crate::message::SubStmt {
            owner,
            seq,
            autocommit: true,
            commit_first: None,
            protect: seq > 0,
            no: 0,
        };
        let how = Sent {
            sub: Some(sub),
            call: None,
            ext: ext.clone(),
        };
        let r = ctx
            .send_execute(p, piece, plan.clone(), params.clone(), lock, how, None)
            .await;
        match r {
            Ok(e) => {
                ctx.note_after(&e.after);
                ctx.record_ops(e.ops);
                return Ok(e.result);
            }
            Err(Error::Aborted(cause)) if seq > 0 && tries.within_bound() => {
                Retries::rerun(&shared, cause, tries.attempt(), piece.id).await;
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
    let board = callas_of(&shared).board.clone();
    for t in after {
        let counters = &shared.counters.protocol;
        board
            .wait_in_order(txn, t, || counters.add(super::RELEASE_CYCLES, 1))
            .await;
    }
    // With a log, the end goes for as long as this process runs, also to
    // a partition's next incarnation: a restarted one holds the chopped
    // transaction's rows locked again until it hears it.
    let lasting = shared.wal.is_some();
    let patience = (!lasting).then_some(crate::coordinator::DECISION_PATIENCE);
    let acks = futures::future::join_all(participants.iter().map(|&p| {
        let release = move |reply| PartitionMsg::Release {
            owner: txn,
            stages: vec![crate::message::ReleaseStage::End],
            lasting,
            reply,
        };
        crate::coordinator::resend_until_acked(shared.route(node, p), release, patience)
    }))
    .await;
    for a in acks {
        if let Err(e) = a {
            tracing::error!(%txn, "nexus release not acknowledged: {e}");
        }
    }
    board.released(txn);
}

/// Runs one statement of a grouped transaction, as its mechanism says:
/// `sc` in its piece; `rp` in its piece, after the piece's rank waits;
/// `chop` as a piece of its own; `2pl` as is. The statement locks in the
/// group's member class and tells the partitions how to track it
/// ([`CallasStmt`]).
pub(super) async fn exec(
    ctx: &mut ProcCtx,
    statement: &str,
    plan: Arc<brine_sql::Plan>,
    args: Vec<Value>,
) -> Result<brine_sql::QueryResult> {
    let mechanism = state_ref(&ctx.state.lock()).map(|c| c.mechanism);
    let placed = match mechanism {
        Some(Mechanism::Sc) => return super::sc::exec(ctx, statement, plan, args).await,
        Some(Mechanism::Rp) => super::pipeline::enter_piece(ctx, statement).await?,
        _ => None,
    };
    let (txn, lock_class, isolation) = ctx.live()?;
    let (chop, tracked) = {
        let st = ctx.state.lock();
        let c = state_ref(&st);
        let chop = c.filter(|c| c.mechanism == Mechanism::Chop).map(|c| c.seq);
        let tracked = c.is_some_and(|c| c.mechanism != Mechanism::TwoPl);
        (chop, tracked)
    };
    let params = plan.bind(args)?;
    let hold = placed.and_then(|_| super::pipeline::rank_hold(&ctx.state));
    let lock = crate::message::LockSpec {
        for_update: placed.is_some_and(|p| p.write_first),
        ..ctx.lock_spec(isolation, lock_class)
    };
    let words = CallasStmt {
        track: tracked && lock_class.is_some(),
        end_row: placed.is_some_and(|p| p.ends_row),
        ends_piece: placed.filter(|p| p.ends_piece).and_then(|p| p.rank),
        after_rank: hold.as_ref().map(|(t, r, _)| (*t, *r)),
        piece: placed.map(|p| (p.piece, p.rank)),
    };
    let ext: crate::message::StmtExt =
        (words != CallasStmt::default()).then(|| Arc::new(words) as _);
    if let Some(seq) = chop {
        return exec_piece(ctx, plan, params, (lock, ext), seq).await;
    }
    let targets = ctx.shared.targets(&plan, &params);
    let how = Sent {
        ext,
        ..Sent::default()
    };
    let exec = ctx.execute_on(&targets, txn, &plan, params, lock, how);
    let result = match hold {
        Some((t, r, d)) => super::pipeline::held(ctx, &targets, (t, r), d, exec).await,
        None => exec.await,
    };
    if result.is_ok() && words.ends_piece.is_some() {
        // The piece ended where this statement ran: no `EndPiece` there.
        if let Some(c) = state_mut(&mut ctx.state.lock()) {
            c.piece_parts.retain(|p| !targets.contains(p));
        }
    }
    ctx.doom_on_abort(&result);
    result
}

/// After a crash: the `sc` transactions whose first piece committed and
/// whose end was not logged are rolled forward, each under its owner id,
/// its body run again with the logged results of its committed pieces'
/// statements replayed and the rest run live (`sc.rs`). Runs before the
/// cluster takes new work.
pub(super) async fn roll_forward(
    callas: &Callas,
    shared: &Arc<Shared>,
    node: NodeId,
    procedures: &HashMap<String, Arc<crate::procedure::PreparedProc>>,
    unfinished: Vec<brine_storage::wal::record::BaseContext>,
) {
    let mut runs = Vec::new();
    for c in unfinished {
        let owner = c.owner;
        let Some((name, args)) = c.intro.clone() else {
            tracing::error!(%owner, "a chopped transaction's context without its procedure: cannot roll forward");
            continue;
        };
        let (Some(proc), Some(group @ (_, Mechanism::Sc))) = (
            procedures.get(&name).cloned(),
            callas.grouping.group_of(&name),
        ) else {
            tracing::error!(%owner, "`{name}` is not a procedure of an `sc` group: cannot roll it forward");
            continue;
        };
        let recorded = crate::partition::recorded_ops(&c);
        let mut by_seq: std::collections::BTreeMap<u32, Vec<brine_sql::QueryResult>> =
            Default::default();
        for e in c.entries {
            by_seq
                .entry(e.seq)
                .or_default()
                .push(brine_sql::QueryResult {
                    columns: e.columns.into(),
                    rows: e.rows,
                    affected: e.affected,
                });
        }
        tracing::info!(%owner, "rolling forward {name}({args:?}) from {} logged statement result(s)", by_seq.len());
        let seq = by_seq.keys().next_back().map_or(0, |s| s + 1);
        let intro = Some(Arc::new((name, args.clone())));
        let run = Box::new(super::sc::ScRun::recovered(
            intro,
            by_seq.into_values().collect(),
        ));
        runs.push((
            proc,
            args,
            group,
            Resume {
                owner,
                run,
                seq,
                recorded,
            },
        ));
    }
    let runs = runs
        .into_iter()
        .map(|(proc, args, group, resume)| async move {
            let owner = resume.owner;
            let call = crate::protocol::Call {
                shared,
                node,
                proc: &proc,
                args,
                on_accept: None,
                session: None,
            };
            shared.counters.protocol.add(super::ROLLED_FORWARD, 1);
            match run_resumed(callas, call, group, Some(resume)).await {
                Ok(_) => tracing::info!(%owner, "chopped transaction rolled forward"),
                Err(e) => {
                    tracing::warn!(%owner, "chopped transaction rolled forward, ending with: {e}")
                }
            }
            // The pieces of its earlier run may hold their nexus locks at
            // partitions the roll-forward did not reach: locked again at
            // a restart, or kept by a process that lived on. Once it
            // released its own, in order, it ends there too.
            super::across::end_after_release(callas, shared, node, owner).await;
        });
    futures::future::join_all(runs).await;
}
