//! Where each partition is served (issue 39). With replicated logs a
//! partition runs on the node that leads its log's group, and moves when
//! the leader changes: every process keeps a route per partition, the
//! node serving it and the group's term when it began to.
//!
//! ```text
//!  node takes a partition over ──► Routes::serve_here ──► WireRequest::Serves to every peer
//!  a request to the route fails ──► Routes::refresh: WhoServes to every node, highest term wins
//!  a proxy picks the route at each send (a decided commit at each retry)
//! ```
//!
//! Without replicated logs the routes never change: each partition stays
//! on its home node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use brine_core::NodeId;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{PeerClient, WireRequest, WireResponse};
use crate::message::PartitionMsg;

/// Who serves a partition: a node, from a term of its log's group on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serving {
    pub node: u32,
    pub term: u64,
}

/// Every partition's route, and the partitions this process serves.
pub struct Routes {
    here: NodeId,
    serving: RwLock<Vec<Serving>>,
    local: RwLock<HashMap<u32, mpsc::UnboundedSender<PartitionMsg>>>,
    /// A client of every node (this one's too: a decided commit retried
    /// after its partition moved here goes through it).
    clients: HashMap<u32, Arc<PeerClient>>,
    refreshing: Vec<AtomicBool>,
    /// Each route that changed, as it changes.
    moved: tokio::sync::broadcast::Sender<(u32, Serving)>,
}

impl Routes {
    /// Routes of `partitions` partitions, each at its home node
    /// (`partitions_per_node` per node), as seen from node `here`.
    pub fn new(
        here: NodeId,
        partitions: u32,
        partitions_per_node: u32,
        clients: HashMap<u32, Arc<PeerClient>>,
    ) -> Arc<Routes> {
        Arc::new(Routes {
            here,
            serving: RwLock::new(
                (0..partitions)
                    .map(|p| Serving {
                        node: p / partitions_per_node,
                        term: 0,
                    })
                    .collect(),
            ),
            local: RwLock::default(),
            clients,
            refreshing: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
            moved: tokio::sync::broadcast::channel(64).0,
        })
    }

    pub fn serving(&self, p: u32) -> Option<Serving> {
        self.serving.read().get(p as usize).copied()
    }

    /// Takes `s` as partition `p`'s route if it is newer than the one
    /// known.
    pub fn learn(&self, p: u32, s: Serving) {
        if let Some(known) = self.serving.write().get_mut(p as usize) {
            if s.term > known.term {
                // A partition's first takeover at its home node (at a
                // cluster's start) moves nothing.
                let moved = known.term > 0 || known.node != s.node;
                *known = s;
                if moved {
                    let _ = self.moved.send((p, s));
                }
            }
        }
    }

    /// The partitions that move from now on (taken over from another
    /// serving node): each and who serves it since.
    pub fn moves(&self) -> tokio::sync::broadcast::Receiver<(u32, Serving)> {
        self.moved.subscribe()
    }

    /// This process's actor of partition `p`, if it serves it.
    pub fn local(&self, p: u32) -> Option<mpsc::UnboundedSender<PartitionMsg>> {
        self.local.read().get(&p).cloned()
    }

    pub fn local_partitions(&self) -> Vec<u32> {
        let mut ps: Vec<u32> = self.local.read().keys().copied().collect();
        ps.sort_unstable();
        ps
    }

    /// This node now serves partition `p` (from `term` on): its messages
    /// go to `tx`, and every peer is told.
    pub fn serve_here(&self, p: u32, tx: mpsc::UnboundedSender<PartitionMsg>, term: u64) {
        self.local.write().insert(p, tx);
        let s = Serving {
            node: self.here.0,
            term,
        };
        self.learn(p, s);
        for (&n, client) in &self.clients {
            if n == self.here.0 {
                continue;
            }
            let client = client.clone();
            tokio::spawn(async move {
                let _ = client
                    .request(WireRequest::Serves {
                        partition: p,
                        serving: s,
                    })
                    .await;
            });
        }
    }

    /// The client of the node that serves `p` (as far as this process
    /// knows).
    pub fn client(&self, p: u32) -> Option<Arc<PeerClient>> {
        let s = self.serving(p)?;
        self.clients.get(&s.node).cloned()
    }

    /// Asks every node who serves `p` now and learns the newest answer;
    /// whether the route changed.
    pub async fn refresh_now(&self, p: u32) -> bool {
        let before = self.serving(p);
        let asks = self.clients.values().map(|c| {
            let c = c.clone();
            async move { c.request(WireRequest::WhoServes { partition: p }).await }
        });
        for answer in futures::future::join_all(asks).await {
            if let Ok(WireResponse::Serving(Some(s))) = answer {
                self.learn(p, s);
            }
        }
        self.serving(p) != before
    }

    /// A request to `p`'s route failed: asks every node who serves it and
    /// learns the newest answer (one refresh at a time per partition).
    pub fn refresh(self: &Arc<Self>, p: u32) {
        let Some(flag) = self.refreshing.get(p as usize) else {
            return;
        };
        if flag.swap(true, Ordering::AcqRel) {
            return;
        }
        let routes = self.clone();
        tokio::spawn(async move {
            routes.refresh_now(p).await;
            // Not at once again: a node that is down answers nothing.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            routes.refreshing[p as usize].store(false, Ordering::Release);
        });
    }
}
