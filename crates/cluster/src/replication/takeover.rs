//! A node takes a partition over (issue 39): its replica of the
//! partition's log came to lead the group with everything committed
//! applied, its copy cut there. The partition is recovered from that copy
//! as a restarted node recovers its own: committed rows, prepared
//! transactions relocked and their outcome asked of whoever decides for
//! their coordinator now; then its actor starts here, its log written
//! through the same group, and every process routes its messages here.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{Error, PartitionId, Result, TxnId};
use tokio::sync::mpsc;

use super::{LogName, NodeReplicas};
use crate::cluster::Cluster;
use crate::partition::{PartitionCounters, PartitionParts};
use crate::remote::Inquiry;

/// How long a takeover waits for the outcome of a prepared transaction.
const ASK_PATIENCE: Duration = Duration::from_secs(120);

impl Cluster {
    /// Whether this process serves partition `p` now (replicated logs:
    /// it leads its log).
    pub fn serves_here(&self, p: u32) -> bool {
        self.shared()
            .routes
            .as_ref()
            .is_some_and(|r| r.local(p).is_some())
    }

    /// Takes partition `p` over (this node leads its log from `term` on).
    pub async fn take_over(&self, p: u32, term: u64) -> Result<()> {
        let shared = self.shared().clone();
        let not_replicated =
            || Error::Internal("a partition taken over without replicated logs".into());
        let wal = shared.wal.clone().ok_or_else(not_replicated)?;
        let routes = shared.routes.clone().ok_or_else(not_replicated)?;
        let across = self
            .config()
            .durability
            .across
            .clone()
            .ok_or_else(not_replicated)?;
        let book = wal.book.clone();
        let catalog = shared.catalog.clone();
        let replicas = across.replicas(LogName::Partition(p))?;
        let runtime = tokio::runtime::Handle::current();
        let started = Instant::now();
        let (store, log) = tokio::task::spawn_blocking(move || {
            let ask = |txns: &[TxnId]| runtime.block_on(decide(&across, book.as_deref(), txns));
            wal.adopt_partition(p, &catalog, &ask, Some(replicas))
        })
        .await
        .map_err(|e| Error::Internal(format!("taking partition {p} over: {e}")))??;
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(PartitionCounters::default());
        self.count_partition(counters.clone());
        shared.protocol.spawn_partition(
            PartitionParts {
                id: PartitionId(p),
                catalog: shared.catalog.clone(),
                lock_config: self.config().lock.clone(),
                counters,
                wal: Some((store, log)),
                history: shared.history.clone(),
            },
            rx,
        );
        routes.serve_here(p, tx, term);
        tracing::warn!(
            partition = p,
            term,
            ms = started.elapsed().as_millis() as u64,
            "partition {p} taken over: served here from term {term} on"
        );
        Ok(())
    }
}

/// Which of `txns` (prepared at a partition being taken over, no decision
/// in any copy here) committed: this node's own coordinator's book for its
/// own, whoever decides for the others' (their node, or while it is down,
/// the replica leading its decision log). Waits while no one can say.
async fn decide(
    across: &NodeReplicas,
    own: Option<&crate::decision::DecisionBook>,
    txns: &[TxnId],
) -> Result<HashSet<TxnId>> {
    let mut committed = HashSet::new();
    for &txn in txns {
        let started = Instant::now();
        loop {
            let coordinator = (txn.id >> crate::cluster::NODE_TXN_SHIFT) as u32;
            let answer = match own {
                Some(book) if coordinator == across.node() => Some(book.ask(txn)),
                _ => across.ask_decision(txn).await,
            };
            match answer {
                Some(Inquiry::Committed) => {
                    committed.insert(txn);
                    break;
                }
                Some(Inquiry::Aborted) => break,
                Some(Inquiry::Undecided) | None => {}
            }
            if started.elapsed() > ASK_PATIENCE {
                return Err(Error::Transport(format!(
                    "no node said what became of transaction {txn}, prepared at a partition being taken over (its coordinator, node {coordinator}, and its decision log's replicas did not answer for {} s)",
                    ASK_PATIENCE.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(committed)
}

/// With replicated logs across processes: each partition that moves to
/// another node (taken over there from its log) is, for the protocol, as
/// if that node had restarted (`Protocol::peer_restarted`), for as long as
/// the cluster lives.
pub(crate) async fn follow_moves(
    mut moves: tokio::sync::broadcast::Receiver<(u32, crate::remote::Serving)>,
    shared: std::sync::Weak<crate::coordinator::Shared>,
    me: brine_core::NodeId,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let serving = match moves.recv().await {
            Ok((_, serving)) => serving.node,
            // Some moves were missed: one is enough for all of them.
            Err(RecvError::Lagged(_)) => me.0,
            Err(RecvError::Closed) => return,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared
            .protocol
            .peer_restarted(&shared, me, brine_core::NodeId(serving));
    }
}
