//! The end of a BASE transaction at its coordinator: its saline locks are
//! released in rounds of `Release` messages (see `base.rs`'s module doc),
//! the end logged first; a transaction that cannot go on gives up its
//! locks but keeps its context for recovery.

use std::future::Future;
use std::sync::Arc;

use brine_core::{NodeId, Result, TxnId};
use parking_lot::Mutex;

use super::base::{base_mut, BaseState};
use crate::coordinator::{Shared, TxnState, DECISION_PATIENCE};
use crate::message::{PartitionMsg, ReleaseStage};

/// The `Release` messages that end a BASE transaction, in rounds: a
/// round's messages (partition, stages) go together, and the next round
/// waits for all their answers.
type Rounds = Vec<Round>;
type Round = Vec<(usize, Vec<ReleaseStage>)>;

impl BaseState {
    /// Every lock everywhere in one stage, `stage`.
    pub(super) fn release_at_once(&self, stage: ReleaseStage) -> Rounds {
        vec![self
            .touched
            .iter()
            .map(|&(p, _)| (p, vec![stage]))
            .collect()]
    }

    /// How the locks of a transaction whose body completed go (see the
    /// module doc): each partition runs its own stages (those of the dirty
    /// reads that happened there, then all), unless it holds a lock taken
    /// after a dirty read elsewhere, which must wait for that read's
    /// dependency: then every stage runs at every partition in lockstep.
    pub(super) fn release_rounds(&self) -> Rounds {
        if !self.release_order || self.dirty.is_empty() {
            return self.release_at_once(ReleaseStage::End);
        }
        let mut each = Vec::with_capacity(self.touched.len());
        for &(p, last) in &self.touched {
            let mut stages = Vec::new();
            for (d, at) in &self.dirty {
                if at.as_slice() == [p] {
                    stages.push(ReleaseStage::Upto(*d));
                } else if *d < last {
                    return self
                        .dirty
                        .iter()
                        .map(|(d, _)| ReleaseStage::Upto(*d))
                        .chain([ReleaseStage::End])
                        .flat_map(|stage| self.release_at_once(stage))
                        .collect();
                }
            }
            stages.push(ReleaseStage::End);
            each.push((p, stages));
        }
        vec![each]
    }
}

/// Ends a BASE transaction that cannot go on (a failure that is not a
/// concurrency-control abort): its locks are released in the background,
/// so nothing that waits for them (locks, release-order dependencies)
/// waits forever; its end is not logged, so what it committed stays in
/// the log and recovery rolls it forward.
pub(super) fn give_up(shared: &Arc<Shared>, node: NodeId, state: &Arc<Mutex<TxnState>>) {
    let (owner, rounds) = {
        let mut st = state.lock();
        st.finished = true;
        let owner = st.txn;
        // Every lock, but not the end (the context stays).
        (
            owner,
            base_mut(&mut st).release_at_once(ReleaseStage::AllKept),
        )
    };
    // No end among them: `lasting` has nothing to say.
    tokio::spawn(release(shared.clone(), node, owner, rounds, false));
}

/// Releases the BASE transaction's locks at every partition it touched,
/// round by round (see the module doc). The first round's messages leave
/// at the call, unless the round ends the transaction and its end must be
/// logged first: a caller that spawns the rest and then reports
/// completion has the release on the link ahead of the client's next
/// request (pay after create-order used to wait for the saline lock its
/// own order still held). `lasting`: the transaction was accepted, and
/// its end must reach a partition that restarted since (`send_round`).
pub(super) fn release(
    shared: Arc<Shared>,
    node: NodeId,
    owner: TxnId,
    rounds: Rounds,
    lasting: bool,
) -> impl Future<Output = ()> + Send + 'static {
    let ends = |round: &Round| {
        round
            .iter()
            .any(|(_, stages)| stages.contains(&ReleaseStage::End))
    };
    let mut rounds = rounds.into_iter().peekable();
    let first = match rounds.peek() {
        Some(round) if shared.wal.is_none() || !ends(round) => rounds
            .next()
            .map(|round| send_round(&shared, node, owner, round, lasting)),
        _ => None,
    };
    async move {
        if let Some(acks) = first {
            acknowledged(owner, acks).await;
        }
        for mut round in rounds {
            if let (true, Some(wal)) = (ends(&round), &shared.wal) {
                // The end is durable at the coordinator before any
                // partition forgets the context; if it cannot be logged,
                // the locks go but the contexts stay (a later recovery
                // finds the transaction complete by replaying it).
                if let Err(e) = wal.log_context_end(node, owner).await {
                    tracing::error!(%owner, "cannot log the end of a BASE transaction: {e}");
                    for stage in round.iter_mut().flat_map(|(_, stages)| stages.iter_mut()) {
                        if *stage == ReleaseStage::End {
                            *stage = ReleaseStage::AllKept;
                        }
                    }
                }
            }
            acknowledged(owner, send_round(&shared, node, owner, round, lasting)).await;
        }
    }
}

/// Ends BASE transaction `owner` at every partition (its end is logged):
/// what they still hold of its context and locks goes.
/// `lasting` as in `send_round`.
pub(super) async fn end_everywhere(shared: Arc<Shared>, node: NodeId, owner: TxnId, lasting: bool) {
    let round: Round = (0..shared.partitions.len())
        .map(|p| (p, vec![ReleaseStage::End]))
        .collect();
    acknowledged(owner, send_round(&shared, node, owner, round, lasting)).await;
}

/// Sends one round of `Release` messages now, each again until it is
/// acknowledged (a lost message; releasing what is released already is a
/// no-op); the answers come later. With `lasting` (the transaction was
/// accepted), an end is sent for as long as this process runs, also to a
/// partition's next incarnation: one that restarted holds the
/// transaction's rows locked again until it hears it
/// (`SaltRules::started`).
fn send_round(
    shared: &Shared,
    node: NodeId,
    owner: TxnId,
    round: Round,
    lasting: bool,
) -> Vec<impl Future<Output = Result<()>> + Send + 'static> {
    round
        .into_iter()
        .map(|(p, stages)| {
            let lasting = lasting && stages.contains(&ReleaseStage::End);
            let patience = (!lasting).then_some(DECISION_PATIENCE);
            let release = move |reply| PartitionMsg::Release {
                owner,
                stages: stages.clone(),
                lasting,
                reply,
            };
            crate::coordinator::resend_until_acked(shared.route(node, p), release, patience)
        })
        .collect()
}

async fn acknowledged(owner: TxnId, acks: Vec<impl Future<Output = Result<()>>>) {
    for a in futures::future::join_all(acks).await {
        if let Err(e) = a {
            tracing::error!(%owner, "release not acknowledged: {e}");
        }
    }
}
