//! Runtime Pipelining at the coordinator: a piece's end, the rank waits
//! before the next piece, and the rank holds left to the partitions.

use super::prelude::*;

/// Runtime Pipelining, when the body returned: its last piece ends now,
/// not at the commit (which may wait for other transactions' commits and
/// takes a round of votes), so same-group transactions waiting for this
/// one's rank go on. Returns whether a piece ended.
pub(super) fn rp_body_done(
    shared: &Shared,
    node: NodeId,
    state: &Mutex<TxnState>,
    ok: bool,
) -> bool {
    let mut st = state.lock();
    let owner = st.txn;
    if !ok || st.doomed.is_some() {
        return false;
    }
    let Some(c) = state_mut(&mut st).filter(|c| c.mechanism == Mechanism::Rp && c.pieces.is_some())
    else {
        return false;
    };
    let Some((piece, rank)) = c.piece.take() else {
        return false;
    };
    for p in std::mem::take(&mut c.piece_parts) {
        CallasMsg::EndPiece { owner, piece, rank }.send(shared, node, p);
    }
    if let Some(r) = rank {
        c.progress.finished_piece(r);
    }
    true
}

/// Runtime Pipelining, before a statement runs: when it opens a new piece,
/// the previous piece ends (its piece-level locks become nexus locks at its
/// partitions, and its rank counts as executed), and the new piece of rank
/// `r` waits until every same-group transaction this one depends on
/// executed a piece of rank `>= r` or committed. A statement of an earlier
/// piece than the current one means the body and the analysis disagree.
/// Returns where the statement runs (which decides how it locks:
/// `Placed::write_first`, `Placed::ends_row`), `None` outside a chopping.
pub(super) async fn enter_piece(ctx: &ProcCtx, statement: &str) -> Result<Option<Placed>> {
    let (owner, progress, ending, wait, placed) = {
        let mut st = ctx.state.lock();
        let owner = st.txn;
        let Some(c) = state_mut(&mut st) else {
            return Ok(None);
        };
        let Some(pieces) = &c.pieces else {
            return Ok(None);
        };
        let placed = pieces.piece_of(statement, c.safe)?;
        let Placed { piece, rank, .. } = placed;
        match c.piece {
            Some((cur, _)) if piece == cur => {
                if c.piece_ended {
                    let last = pieces
                        .piece_end(piece, c.safe)
                        .unwrap_or("its last statement");
                    // Its partitions already turned the piece's locks into
                    // nexus locks: running on would let same-group
                    // transactions see the piece half done.
                    return Err(Error::Internal(format!(
                        "statement `{statement}` of piece {} runs after `{last}`, which the \
                         analysis takes for that piece's last statement: the body and the \
                         analysis disagree (declare the loop or the order the body runs its \
                         statements in: crates/analysis/src/workloads.rs)",
                        piece + 1
                    )));
                }
                c.piece_ended |= placed.ends_piece;
                return Ok(Some(placed));
            }
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
            .map(|ended| (ended, std::mem::take(&mut c.piece_parts)));
        c.piece = Some((piece, rank));
        c.piece_ended = placed.ends_piece;
        c.rank_hold = None;
        let wait: SmallVec<[(TxnId, Arc<Progress>); 4]> = match rank {
            Some(_) => c
                .after
                .iter()
                .zip(&c.deps)
                .filter_map(|(t, d)| Some((*t, d.clone()?)))
                .collect(),
            None => SmallVec::new(),
        };
        (
            owner,
            c.progress.clone(),
            ending,
            rank.map(|r| (r, wait)),
            placed,
        )
    };
    if let Some(((piece, rank), parts)) = ending {
        for p in parts {
            CallasMsg::EndPiece { owner, piece, rank }.send(&ctx.shared, ctx.node, p);
        }
        if let Some(r) = rank {
            progress.finished_piece(r);
        }
    }
    if let Some((r, mut deps)) = wait {
        let c = &ctx.shared.counters;
        // One transaction still short of the rank (the last) is waited for
        // at the partitions, with the piece's statements; the others here.
        let chained = |d: &Progress| d.uncommitted_depth(MAX_CHAIN) >= MAX_CHAIN;
        let hold = if callas_of(&ctx.shared).rank_holds {
            (0..deps.len())
                .rev()
                .find(|&i| !deps[i].1.has_reached(r) && !chained(&deps[i].1))
        } else {
            None
        };
        let wait = |d: Arc<Progress>, commit: bool| async move {
            tracing::trace!(%owner, rank = r, commit, "rank wait");
            let patience = ctx.shared.wait_timeout;
            let waited = if commit {
                d.committed(patience).await
            } else {
                d.reached(r, patience).await
            };
            match waited {
                Ok(Some(took)) => {
                    c.protocol
                        .count_wait(super::RANK_WAITS, super::RANK_WAIT_NS, took)
                }
                Ok(None) => {}
                Err(e) => {
                    if let Error::Aborted(cause) = &e {
                        ctx.state.lock().doomed = Some(*cause);
                    }
                    return Err(e);
                }
            }
            Ok(())
        };
        // First the dependencies whose chains are short, for their rank,
        // newest first: the newest are the furthest behind, and by the
        // time one reaches the rank the older ones mostly have too, so
        // most of the rest need no wait (on ticketing at 256 clients,
        // about 10,000 waits in 5 s instead of 900,000 short ones, each a
        // wake-up of the coordinator's task).
        let mut deep: SmallVec<[usize; 4]> = SmallVec::new();
        for (i, (_, d)) in deps.iter().enumerate().rev() {
            if Some(i) == hold {
                continue;
            }
            if chained(d) {
                deep.push(i);
            } else {
                wait(d.clone(), false).await?;
            }
        }
        // Then the deep ones, oldest first, each asked again: the waits
        // before it give its chain time to commit, and a chain still deep
        // is waited for to commit, not only to reach the rank. (Waiting
        // for the commit of every dependency found deep at the start, or
        // asking the newest first, serialized the pipeline: inter-group
        // at 100:1 fell from 12,000 to 7,000 txn/s;
        // `docs/results/baselines.md`.)
        for &i in deep.iter().rev() {
            let d = &deps[i].1;
            wait(d.clone(), chained(d)).await?;
        }
        if let Some((t, d)) = hold.map(|i| deps.swap_remove(i)) {
            if let Some(c) = state_mut(&mut ctx.state.lock()) {
                c.rank_hold = Some((t, r, d));
            }
        }
    }
    Ok(Some(placed))
}

/// The rank-progress wait the current piece's next statement leaves to
/// its partitions (`LockSpec::after_rank`), if the coordinator has not
/// yet seen the rank reached.
pub(super) fn rank_hold(state: &Mutex<TxnState>) -> Option<(TxnId, u32, Arc<Progress>)> {
    let mut st = state.lock();
    let c = state_mut(&mut st)?;
    match &c.rank_hold {
        Some((_, r, d)) if !d.has_reached(*r) => c.rank_hold.clone(),
        Some(_) => {
            c.rank_hold = None;
            None
        }
        None => None,
    }
}

/// Runs `exec`, a statement sent held for `after` (the transaction and
/// rank of `d`) at `targets`, while waiting here for the same rank: if the
/// coordinator sees it first (the rank was reached at another partition,
/// or the transaction ended), the partitions are told to let the statement
/// go. A failed wait (the transaction aborted, or the wait timed out)
/// dooms this one.
pub(super) async fn held<T>(
    ctx: &ProcCtx,
    targets: &[usize],
    after: (TxnId, u32),
    d: Arc<Progress>,
    exec: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::pin!(exec);
    let reached = d.reached(after.1, ctx.shared.wait_timeout);
    tokio::pin!(reached);
    let waited = tokio::select! {
        biased;
        r = &mut exec => return r,
        w = &mut reached => w,
    };
    // Across processes `RankGo` may arrive before the statement it lets
    // go (which then ignores it) or be lost: it is sent again, less and
    // less often, until the statement answers.
    let txn = ctx.state.lock().txn;
    let mut pause = Duration::from_millis(5);
    let r = loop {
        for &p in targets {
            CallasMsg::RankGo { txn, after }.send(&ctx.shared, ctx.node, p);
        }
        tokio::select! {
            r = &mut exec => break r,
            _ = tokio::time::sleep(pause) => pause = (pause * 2).min(Duration::from_millis(200)),
        }
    };
    match waited {
        Err(Error::Aborted(cause)) => {
            ctx.state.lock().doomed = Some(cause);
            Err(Error::Aborted(cause))
        }
        _ => r,
    }
}
