//! `sc` transactions durable across processes: a chopped transaction's
//! pieces commit one by one at partitions in several processes, so its
//! roll-forward needs what every process logged of it, gathered as Salt
//! gathers its BASE contexts (`protocols::gather`).
//!
//! ```text
//!  node N restarts ──► (once its peers ended what its previous run left
//!      open) OpenContexts { coordinated by N } to every partition
//!      ──► end logged at N: ended everywhere (an abort of the owner,
//!          which closes its context and lets its locks go)
//!      ──► otherwise: rolled forward under its owner id (`run::roll_forward`)
//!  a piece's commit goes unanswered at a live coordinator ──►
//!      OpenContexts { owner, fence } to every partition (each aborts the
//!      owner's pieces older than the fence that did not commit there
//!      first) ──► rolled forward, or ended if no piece committed
//!  partition restarts ──► the rows of open transactions locked again as
//!      their group's nexus locks (`partition::relock_open_contexts`),
//!      until their owner ends there
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{NodeId, TxnId};

use super::Callas;
use crate::coordinator::Shared;
use crate::message::PartitionMsg;
use crate::partition::Ending;
use crate::protocols::gather;

/// The application's procedures by name.
pub(super) type Procedures = Arc<HashMap<String, Arc<crate::procedure::PreparedProc>>>;

/// Ends `owner` at every partition, each until it answers (for as long as
/// this process runs: a partition that restarted holds its rows locked
/// again until it hears it). An abort of the owner itself: its pieces
/// committed under ids of their own, so it undoes nothing, and it closes
/// the owner's context and lets its locks go.
pub(super) async fn end_everywhere(shared: &Shared, node: NodeId, owner: TxnId) {
    end_at(shared, node, owner, 0..shared.partitions.len()).await;
}

/// [`end_everywhere`] at `partitions`.
async fn end_at(
    shared: &Shared,
    node: NodeId,
    owner: TxnId,
    partitions: impl IntoIterator<Item = usize>,
) {
    let ends = partitions.into_iter().map(|p| {
        let abort = move |reply| PartitionMsg::Abort {
            txn: owner,
            ending: Ending::Release,
            reply,
        };
        crate::coordinator::resend_until_acked(shared.route(node, p), abort, None)
    });
    for r in futures::future::join_all(ends).await {
        if let Err(e) = r {
            tracing::error!(%owner, "ending a chopped transaction: {e}");
        }
    }
}

/// How long a roll-forward's end waits for its own release in order
/// before it ends the transaction everywhere anyway.
const RELEASE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Once `owner` (rolled forward) released its nexus locks in the release
/// order, ends it at every partition: the pieces of its run before the
/// roll-forward may hold locks where the roll-forward did not go.
pub(super) async fn end_after_release(
    callas: &Callas,
    shared: &Shared,
    node: NodeId,
    owner: TxnId,
) {
    let released = callas.board.until_released(owner);
    if tokio::time::timeout(RELEASE_PATIENCE, released)
        .await
        .is_err()
    {
        tracing::warn!(%owner, "a rolled-forward chopped transaction still waits for its release in order; ending it everywhere");
    }
    end_everywhere(shared, node, owner).await;
    callas.board.released(owner);
}

/// Across processes, a restarted node's `sc` transactions: their contexts
/// gathered from every partition (in the background, once the peers have
/// ended what its previous run left open), those whose end this node
/// logged ended everywhere, the others rolled forward.
pub(super) fn recover(callas: &Callas, shared: &Arc<Shared>, node: NodeId, procedures: Procedures) {
    let mut announced = callas.announced.subscribe();
    let rolling = callas.rolling.one();
    let shared = shared.clone();
    tokio::spawn(async move {
        if announced.wait_for(|&a| a).await.is_err() {
            return; // the protocol is gone: the node shuts down
        }
        let which = gather::Which::earlier_runs_of(&shared, node);
        let gathered = gather::gather(&shared, node, which, None).await;
        let ended = |owner: &TxnId| {
            shared
                .wal
                .as_ref()
                .is_some_and(|w| w.base_ended.contains(owner))
        };
        let (done, unfinished): (Vec<_>, Vec<_>) =
            gathered.contexts.into_iter().partition(|c| ended(&c.owner));
        // Held from now on (a peer's restart leaves them be, `peer_restarted`).
        let callas = super::callas_of(&shared);
        for c in &unfinished {
            callas.board.register(c.owner);
        }
        for c in done {
            end_everywhere(&shared, node, c.owner).await;
        }
        if !unfinished.is_empty() {
            tracing::info!(
                "Callas: rolling forward {} chopped transaction(s) of this node, from the \
                 contexts of every process",
                unfinished.len()
            );
        }
        super::run::roll_forward(callas, &shared, node, &procedures, unfinished).await;
        drop(rolling);
    });
}

/// Across processes, `owner`'s attempt left a piece's commit unanswered
/// (a participant out of reach, or its process restarted): it may have
/// committed. Its contexts are gathered from every partition (waiting for
/// those that cannot answer yet), each fencing the owner first, so what
/// the unanswered commit did is settled before they are read; then it is
/// rolled forward under its owner id, or, if no piece committed, ended
/// everywhere. In the background; `false` where that cannot be done (no
/// log, the logs down, one process: recovery finishes it).
pub(super) fn gave_up_in_doubt(
    callas: &Callas,
    shared: &Shared,
    owner: TxnId,
    node: NodeId,
) -> bool {
    if callas.home.is_none() || shared.wal.as_ref().is_none_or(|w| w.is_down()) {
        return false;
    }
    let Some((shared, procedures)) = callas.attached.get() else {
        return false;
    };
    let Some(shared) = shared.upgrade() else {
        return false;
    };
    let procedures = procedures.clone();
    tracing::info!(%owner, "Callas: a chopped transaction given up in doubt; rolling it forward once every partition answers");
    let rolling = callas.rolling.one();
    tokio::spawn(async move {
        let gathered = gather::fenced(&shared, node, owner).await;
        if gathered.contexts.is_empty() {
            tracing::info!(%owner, "Callas: no piece of it committed after all");
            end_everywhere(&shared, node, owner).await;
            // Those that depend on it release after it: now.
            super::callas_of(&shared).board.released(owner);
        } else {
            let callas = super::callas_of(&shared);
            super::run::roll_forward(callas, &shared, node, &procedures, gathered.contexts).await;
        }
        drop(rolling);
    });
    true
}

/// Node `peer` restarted: a chopped transaction of this node (`me`) whose
/// end was sent while `peer` was down (or answered before `peer` logged
/// it) never ended there, and `peer`'s partitions hold its rows locked
/// again. Its contexts are gathered from every partition; each of a
/// transaction that still runs here is ended everywhere once it released
/// its nexus locks (its own end may have gone out while `peer` was down),
/// each of one that no longer runs, at once. In the background: the
/// transactions' ends carry no extra message on their way.
pub(super) fn peer_restarted(callas: &Callas, shared: &Arc<Shared>, me: NodeId, peer: NodeId) {
    let Some(home) = callas.home else {
        return;
    };
    if home != me
        || shared.wal.is_none()
        || !callas
            .grouping
            .groups
            .iter()
            .any(|g| g.mechanism == super::Mechanism::Sc)
    {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let gathered = gather::gather(&shared, me, gather::Which::CoordinatedBy(me.0), None).await;
        let callas = super::callas_of(&shared);
        let ends = gathered.contexts.into_iter().map(|c| {
            let shared = &shared;
            async move {
                callas.board.until_released(c.owner).await;
                tracing::info!(owner = %c.owner, peer = peer.0, "Callas: a chopped transaction that ended is ended again at a restarted node");
                end_everywhere(shared, me, c.owner).await;
            }
        });
        futures::future::join_all(ends).await;
    });
}
