//! The TCP carrier: the partition protocol of [`crate::message`] between
//! processes, over `brine-net`.
//!
//! ```text
//!  node A (coordinator)                                   node B (partition p)
//!  Shared::send(p, PartitionMsg)                          NodeService::handle
//!    │ p is remote: its PartitionRef.tx feeds a proxy        │ WireRequest::Partition{p, msg}
//!    ▼                                                      ▼ plan SQL text (cached)
//!  proxy task ── WireMsg (plan as SQL text) ══ TCP ══►   PartitionMsg + local Reply ──► actor
//!    ◄──────────────────────── WireResponse ═════════════ reply awaited, sent back
//!    │ completes the PartitionMsg's Reply
//! ```
//!
//! Neither the coordinator nor the partition actor knows which carrier it
//! is on: a remote partition's [`PartitionRef`](crate::coordinator::PartitionRef)
//! sends into a proxy task instead of the actor's queue, and the serving
//! node turns each wire request back into the same
//! [`PartitionMsg`](crate::message::PartitionMsg) with a
//! reply path that ends in the network answer.
//!
//! Plans do not cross the wire: the statement's SQL text does, and the
//! serving node prepares it against its own catalog (every node runs the
//! same application), caching the result.
//!
//! Failures: a request that cannot reach its partition answers as the
//! protocol's safe default: a statement gets `Error::Transport` (the
//! transaction aborts), a prepare votes No, an abort is presumed. A commit
//! decision must reach its participant, so a commit is retried until it is
//! acknowledged or `COMMIT_RETRY_FOR` has passed (then logged as an error:
//! the participant resolves it at its recovery).
//!
//! - `wire.rs`: what crosses the wire (requests, partition messages,
//!   answers);
//! - `proxy.rs`: the client side, a remote partition's proxy task;
//! - `service.rs`: the server side, [`NodeService`];
//! - `sessions.rs`: the interactive transactions of remote clients;
//! - here: the peers' clients, [`RemoteCluster`], and a restarting
//!   participant's questions to its coordinators.

mod proxy;
mod routes;
mod service;
mod sessions;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{Error, NodeId, Result, TxnId};

use crate::cluster::Cluster;
pub use crate::decision::Inquiry;
pub use proxy::{spawn_proxy, spawn_routed_proxy};
pub use routes::{Routes, Serving};
pub use service::NodeService;
pub use sessions::SESSION_IDLE_TIMEOUT;
pub(crate) use wire::unexpected;
pub use wire::{NodeStatus, WireGate, WireMsg, WireRequest, WireResponse};

/// The client of one peer node.
pub type PeerClient = brine_net::Client<WireRequest, WireResponse>;

/// A running multi-process cluster, as its clients see it: the address of
/// every node, in node order.
#[derive(Clone, Debug)]
pub struct RemoteCluster {
    pub addresses: Vec<String>,
    /// Procedure calls go to the nodes (each client's to one node, in
    /// turn), whose coordinators run them, instead of being coordinated in
    /// the joining process ([`Cluster::calls_at_nodes`]).
    pub calls_at_nodes: bool,
}

impl RemoteCluster {
    /// Joins the cluster as a coordinator-only member
    /// ([`Cluster::connect`]); `config.nodes` must match the addresses.
    pub fn connect(
        &self,
        config: crate::ClusterConfig,
        app: crate::Application,
    ) -> Result<Cluster> {
        if config.nodes as usize != self.addresses.len() {
            return Err(Error::Config(format!(
                "the configuration has {} nodes but {} addresses were given",
                config.nodes,
                self.addresses.len()
            )));
        }
        let peers = peer_clients(&self.addresses, None)?;
        let nodes: Vec<Arc<PeerClient>> = (0..self.addresses.len() as u32)
            .filter_map(|n| peers.get(&NodeId(n)).cloned())
            .collect();
        let cluster = Cluster::connect(config, app, peers)?;
        Ok(if self.calls_at_nodes {
            cluster.calls_at_nodes(nodes)
        } else {
            cluster
        })
    }
}

/// One lazily connecting client per node of `addresses` (node n at
/// `addresses[n]`), except node `skip` (the caller itself).
pub fn peer_clients(
    addresses: &[String],
    skip: Option<NodeId>,
) -> Result<HashMap<NodeId, Arc<PeerClient>>> {
    let mut peers = HashMap::new();
    for (n, addr) in addresses.iter().enumerate() {
        let node = NodeId(n as u32);
        if Some(node) == skip {
            continue;
        }
        let client = PeerClient::new(addr.clone(), brine_net::ClientConfig::default())
            .map_err(|e| Error::Transport(format!("client of node {n} at {addr}: {e}")))?;
        peers.insert(node, Arc::new(client));
    }
    Ok(peers)
}

/// How long a restarting participant waits for the coordinators of its
/// in-doubt transactions before it gives up starting.
const INQUIRY_PATIENCE: Duration = Duration::from_secs(120);

/// Asks the coordinators on other nodes which of `txns` (prepared here, no
/// outcome logged) committed. Blocks the calling thread, which must be
/// one of the runtime's blocking threads (`Cluster::start_node` of a
/// durable node runs in `spawn_blocking`): waits while a coordinator is
/// unreachable or still deciding, up to `INQUIRY_PATIENCE`. A transaction whose id names
/// no node (coordinated by a client process, which keeps no log) is
/// presumed aborted.
pub(crate) fn ask_coordinators(
    peers: &HashMap<NodeId, Arc<PeerClient>>,
    txns: &[TxnId],
) -> Result<std::collections::HashSet<TxnId>> {
    let ask = async {
        let mut committed = std::collections::HashSet::new();
        for &txn in txns {
            let coordinator = NodeId((txn.id >> crate::cluster::NODE_TXN_SHIFT) as u32);
            let Some(peer) = peers.get(&coordinator) else {
                tracing::warn!(%txn, "in-doubt transaction of a coordinator without a log: presumed aborted");
                continue;
            };
            let started = Instant::now();
            loop {
                let why = match peer.request(WireRequest::Decision { txn }).await {
                    Ok(WireResponse::Decision(Inquiry::Committed)) => {
                        committed.insert(txn);
                        break;
                    }
                    Ok(WireResponse::Decision(Inquiry::Aborted)) => break,
                    Ok(WireResponse::Decision(Inquiry::Undecided)) => "still deciding".to_string(),
                    Ok(other) => unexpected(&other).to_string(),
                    Err(e) => e.to_string(),
                };
                if started.elapsed() > INQUIRY_PATIENCE {
                    return Err(Error::Transport(format!(
                        "in-doubt transaction {txn}: its coordinator, node {} at {}, has not answered for {} s ({why}); start that node",
                        coordinator.0,
                        peer.addr(),
                        INQUIRY_PATIENCE.as_secs()
                    )));
                }
                tracing::info!(%txn, node = coordinator.0, "waiting for the coordinator's decision: {why}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(committed)
    };
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        Error::Internal(
            "in-doubt inquiry outside the runtime (start_node must run in spawn_blocking)".into(),
        )
    })?;
    handle.block_on(ask)
}
