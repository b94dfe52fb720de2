//! Commit and abort at the participants: one round for one participant,
//! two-phase commit (with a durable decision when logging) for several.

use brine_check::{Op, Outcome};
use brine_core::{AbortCause, Error, NodeId, Result, TxnId};
use futures::FutureExt;
use parking_lot::Mutex;

use super::{until_acked, Shared, TxnState};
use crate::message::{PartitionMsg, Vote};
use crate::partition::Ending;

/// Commits an attempt whose body succeeded. On a `No` vote the attempt is
/// aborted and the cause returned.
pub async fn commit(shared: &Shared, node: NodeId, state: &Mutex<TxnState>) -> Result<()> {
    commit_keeping_after(shared, node, state, Ending::Release, NOTHING_BEFORE).await
}

/// No dependency to await before a commit decision.
const NOTHING_BEFORE: Option<std::future::Ready<Result<()>>> = None;

/// [`commit`], its locks ending as `ending` says (Callas: `Keep`, as nexus
/// locks released later in order); `after`: for a transaction that
/// depends on others (Runtime
/// Pipelining: it saw same-group transactions' uncommitted state), given
/// as `after`, which is done once they committed. Such a transaction asks
/// for votes even on one participant (one that cascaded an abort to it
/// says No), its participants hold their locks through phase one even
/// where it wrote nothing, and it is decided once `after` is done: the
/// participants prepare meanwhile. An error from `after` aborts it with
/// that error.
pub async fn commit_keeping_after(
    shared: &Shared,
    node: NodeId,
    state: &Mutex<TxnState>,
    ending: Ending,
    after: Option<impl std::future::Future<Output = Result<()>>>,
) -> Result<()> {
    let (txn, participants) = {
        let mut st = state.lock();
        if st.finished {
            return Err(Error::TxnState("the transaction already ended".into()));
        }
        st.finished = true;
        if let (Some(h), Some(rec)) = (&shared.history, &st.rec) {
            let two_phase = two_phase(st.participants.len(), after.is_some());
            h.provisional(st.txn, rec, two_phase);
        }
        (st.txn, st.participants.clone())
    };
    let (result, undone) = commit_at_with(shared, node, txn, ending, &participants, after).await;
    if shared.history.is_some() {
        let outcome = match &result {
            Ok(()) => Outcome::Committed,
            Err(Error::Aborted(_)) => Outcome::Aborted,
            Err(_) => Outcome::Unknown,
        };
        let mut st = state.lock();
        st.record_undone(undone);
        st.record_end(shared, outcome);
    }
    result
}

/// Commits `txn` at `participants`: one round for one participant,
/// two-phase commit (with a durable decision when logging) for several.
/// `ending`: what becomes of its locks (`Ending::Sub`: `txn` is a
/// subtransaction, whose locks its owner keeps). Also returns, when the
/// decision was an abort, the writes the participants undid (when
/// recording a history).
pub async fn commit_at(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    ending: Ending,
    participants: &[usize],
) -> (Result<()>, Vec<Op>) {
    commit_at_with(shared, node, txn, ending, participants, NOTHING_BEFORE).await
}

/// Whether a commit at `participants` participants is decided in two
/// phases (`hold`: it waits for what it read uncommitted): one participant
/// alone commits in one round.
fn two_phase(participants: usize, hold: bool) -> bool {
    participants > 1 || (participants == 1 && hold)
}

/// [`commit_at`]; `after`: see [`commit_keeping_after`].
async fn commit_at_with(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    ending: Ending,
    participants: &[usize],
    after: Option<impl std::future::Future<Output = Result<()>>>,
) -> (Result<()>, Vec<Op>) {
    let hold = after.is_some();
    let after = async {
        match after {
            Some(f) => f.await,
            None => Ok(()),
        }
    };
    match participants.len() {
        0 => (after.await, Vec::new()),
        n if !two_phase(n, hold) => {
            // A decision, like phase two: sent again until acknowledged
            // (a commit of a transaction the participant already
            // committed is a no-op), so a lost message or answer leaves no
            // doubt. Only a participant unheard of for DECISION_PATIENCE
            // leaves the outcome unknown.
            let p = participants[0];
            let commit = move |reply| PartitionMsg::Commit {
                txn,
                ending,
                decided: false,
                reply,
            };
            let result = until_acked(shared.route(node, p), commit)
                .await
                .and_then(|refused| refused)
                .map_err(|e| match e {
                    Error::Transport(m) => Error::Transport(format!("commit outcome unknown: {m}")),
                    e => e,
                });
            (result, Vec::new())
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
                        ending,
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
            // (voted Yes, or could not be heard from), and again until it
            // is acknowledged (a lost message, a node cut off for a
            // while). A commit is sent now, so per-link FIFO delivery
            // orders it before anything this coordinator sends next, and
            // not awaited: the decision is made, and what comes next can
            // only wait for its locks. An abort is awaited: a retry (or a
            // Salt subtransaction run again under the same owner's locks)
            // must not reach a participant before the abort it resends
            // after a loss, or the abort would undo the retry's writes.
            let mut aborts = Vec::new();
            for (&p, v) in participants.iter().zip(&votes) {
                if matches!(v, Ok(Vote::ReadOnly)) && !hold {
                    continue;
                }
                let route = shared.route(node, p);
                let not_acked = move |e: Error| tracing::error!(%txn, partition = p, "decision not acknowledged: {e}");
                if decision_commit {
                    let commit = move |reply| PartitionMsg::Commit {
                        txn,
                        ending,
                        decided: true,
                        reply,
                    };
                    tokio::spawn(
                        until_acked(route, commit)
                            .map(move |r| r.and_then(|refused| refused).unwrap_or_else(not_acked)),
                    );
                } else {
                    let abort = move |reply| PartitionMsg::Abort { txn, ending, reply };
                    aborts.push(until_acked(route, abort).map(move |r| {
                        r.unwrap_or_else(|e| {
                            not_acked(e);
                            Vec::new()
                        })
                    }));
                }
            }
            let undone: Vec<Op> = futures::future::join_all(aborts)
                .await
                .into_iter()
                .flatten()
                .collect();
            if let Some(e) = log_error {
                return (Err(e), undone);
            }
            if let Err(e) = after {
                return (Err(e), undone);
            }
            // A participant whose log failed is not a concurrency-control
            // abort: no retry (nor once the cluster's logs are down, when
            // no vote can come). One that did not answer (its vote or the
            // request was lost, or it is cut off) made the decision an
            // abort, which may run again.
            let logs_down = shared.wal.as_ref().is_some_and(|w| w.is_down());
            let result = if let Some(Err(e)) = votes.iter().find(|v| v.is_err()) {
                Err(match e {
                    Error::Transport(_) if !logs_down => Error::Aborted(AbortCause::Unreachable),
                    e => e.clone(),
                })
            } else if decision_commit {
                Ok(())
            } else {
                Err(Error::Aborted(AbortCause::Cascade))
            };
            (result, undone)
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
    let undone = abort_at(shared, node, txn, Ending::Release, &participants).await;
    let mut st = state.lock();
    st.record_undone(undone);
    st.record_end(shared, Outcome::Aborted);
}

/// Aborts `txn` at `participants` and waits for every acknowledgement,
/// sending it again where none came (`until_acked`; `ending` as in
/// [`commit_at`]). Returns the writes they undid, when recording a
/// history (`PartitionMsg::Abort`).
pub async fn abort_at(
    shared: &Shared,
    node: NodeId,
    txn: TxnId,
    ending: Ending,
    participants: &[usize],
) -> Vec<Op> {
    let acks = futures::future::join_all(participants.iter().map(|&p| {
        let abort = move |reply| PartitionMsg::Abort { txn, ending, reply };
        until_acked(shared.route(node, p), abort)
    }))
    .await;
    let mut undone = Vec::new();
    for a in acks {
        match a {
            Ok(ops) => undone.extend(ops),
            Err(e) => tracing::error!(%txn, "abort not acknowledged: {e}"),
        }
    }
    undone
}
