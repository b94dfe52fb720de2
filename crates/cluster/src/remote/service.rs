//! The server side: [`NodeService`] serves the node's local partitions to
//! its peers (statements prepared from their SQL text, gated statements'
//! readiness), runs calls and interactive transactions for clients, and
//! resolves what a restarted peer left open here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{Catalog, Error, NodeId, Result, TxnId};
use brine_sql::Plan;
use parking_lot::RwLock;
use tokio::sync::mpsc;

use super::sessions::Sessions;
use super::wire::{unexpected, NodeStatus, WireGate, WireMsg, WireRequest, WireResponse};
use super::{Inquiry, PeerClient, INQUIRY_PATIENCE};
use crate::cluster::Cluster;
use crate::decision::DecisionBook;
use crate::link::{Link, LinkConfig};
use crate::message::{Gate, GateNotice, PartitionMsg, Reply, StmtExt, Vote};

/// At most this many distinct statements are kept prepared per node.
const PLAN_CACHE_MAX: usize = 10_000;

/// The serving side of partition messages: the node's local partitions and
/// a cache of prepared statements.
pub struct NodeService {
    node: NodeId,
    catalog: Arc<Catalog>,
    /// Local partitions by global partition number.
    partitions: HashMap<u32, mpsc::UnboundedSender<PartitionMsg>>,
    plans: RwLock<HashMap<String, Arc<Plan>>>,
    /// Replies to wire requests are local: the network is the link.
    link: Link,
    sessions: Sessions,
    /// A durable node's commit decisions.
    book: Option<Arc<DecisionBook>>,
    /// Differs between two runs of the node (see `Incarnations`).
    incarnation: u64,
    /// The other nodes.
    peers: HashMap<NodeId, Arc<PeerClient>>,
    /// With replicated logs: the partitions this node came to serve.
    routes: Option<Arc<super::Routes>>,
    /// Readiness of the statements gated here for a remote coordinator,
    /// by (partition, transaction), for `WireMsg::WatchGate`.
    gates: parking_lot::Mutex<HashMap<(u32, TxnId), GateWatch>>,
}

/// A gated statement's readiness queue: waiting for a watch, or taken by
/// one.
enum GateWatch {
    Idle(mpsc::UnboundedReceiver<(usize, bool)>),
    Watched,
}

/// Forgets a gated statement's readiness queue when its `Execute` is
/// answered (or dropped).
struct GateForget<'a> {
    gates: &'a parking_lot::Mutex<HashMap<(u32, TxnId), GateWatch>>,
    key: (u32, TxnId),
}

impl Drop for GateForget<'_> {
    fn drop(&mut self) {
        self.gates.lock().remove(&self.key);
    }
}

/// How long a `WatchGate` waits for its statement's `Execute` to arrive
/// (both leave the coordinator together and may cross).
const GATE_REGISTER_WAIT: Duration = Duration::from_millis(50);

impl NodeService {
    pub fn new(
        node: NodeId,
        catalog: Arc<Catalog>,
        partitions: HashMap<u32, mpsc::UnboundedSender<PartitionMsg>>,
        book: Option<Arc<DecisionBook>>,
        peers: HashMap<NodeId, Arc<PeerClient>>,
        routes: Option<Arc<super::Routes>>,
    ) -> Self {
        NodeService {
            node,
            catalog,
            partitions,
            plans: RwLock::new(HashMap::new()),
            link: Link::new(
                LinkConfig {
                    delay_us: 0,
                    jitter_us: 0,
                },
                0,
            ),
            sessions: Sessions::default(),
            book,
            incarnation: rand::random(),
            peers,
            routes,
            gates: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The queue of local partition `p`'s actor (one this node hosts from
    /// the start, or one it came to serve).
    fn partition(&self, p: u32) -> Option<mpsc::UnboundedSender<PartitionMsg>> {
        match self.partitions.get(&p) {
            Some(tx) => Some(tx.clone()),
            None => self.routes.as_ref().and_then(|r| r.local(p)),
        }
    }

    /// `WireMsg::WatchGate`: the next readiness change of `txn`'s
    /// statement gated at `partition`.
    async fn watch_gate(&self, partition: u32, txn: TxnId) -> WireResponse {
        let key = (partition, txn);
        let deadline = Instant::now() + GATE_REGISTER_WAIT;
        let mut rx = loop {
            if let Some(w) = self.gates.lock().get_mut(&key) {
                if let GateWatch::Idle(rx) = std::mem::replace(w, GateWatch::Watched) {
                    break rx;
                }
            }
            if Instant::now() >= deadline {
                return WireResponse::GateReady(None);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let next = rx.recv().await;
        if let Some(w) = self.gates.lock().get_mut(&key) {
            *w = GateWatch::Idle(rx);
        }
        WireResponse::GateReady(next.map(|(_, ready)| ready))
    }

    fn plan(&self, sql: &str) -> Result<Arc<Plan>> {
        if let Some(p) = self.plans.read().get(sql) {
            return Ok(p.clone());
        }
        let plan = Arc::new(brine_sql::prepare(&self.catalog, sql)?);
        let mut cache = self.plans.write();
        if cache.len() >= PLAN_CACHE_MAX {
            cache.clear();
        }
        cache.insert(sql.to_string(), plan.clone());
        Ok(plan)
    }

    /// Serves one partition message and returns its answer (`ext`: an
    /// `Execute`'s protocol words, decoded).
    pub async fn serve(&self, partition: u32, msg: WireMsg, ext: StmtExt) -> WireResponse {
        let Some(tx) = self.partition(partition) else {
            // With replicated logs a partition moves: the attempt runs
            // again where it went (the sender asks who serves it now).
            let why = format!("node {} does not host partition {partition}", self.node.0);
            return WireResponse::Refused(match self.routes {
                Some(_) => Error::Transport(format!("{why} now (it moved)")),
                None => Error::Config(why),
            });
        };
        macro_rules! ask {
            ($make:expr, $wrap:expr) => {{
                let (reply, rx) = Reply::channel(&self.link, self.node, self.node);
                if tx.send($make(reply)).is_err() {
                    return WireResponse::Refused(Error::Transport(format!(
                        "partition {partition} is shut down"
                    )));
                }
                match rx.await {
                    Ok(v) => $wrap(v),
                    Err(_) => WireResponse::Refused(Error::Transport(format!(
                        "partition {partition} did not answer (shutting down?)"
                    ))),
                }
            }};
        }
        match msg {
            WireMsg::Execute {
                txn,
                sql,
                params,
                lock,
                sub,
                call,
                gate,
                ext: _,
            } => {
                let plan = match self.plan(&sql) {
                    Ok(p) => p,
                    Err(e) => return WireResponse::Executed(Err(e), self.incarnation),
                };
                let call = call.map(Arc::new);
                let gate = match gate {
                    WireGate::None => None,
                    WireGate::Local => Some(Gate::Local),
                    WireGate::Coordinated => {
                        // Readiness goes to `WatchGate`, through this queue.
                        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
                        self.gates
                            .lock()
                            .insert((partition, txn), GateWatch::Idle(ready_rx));
                        let notice = GateNotice::new(&self.link, self.node, self.node, 0, ready_tx);
                        Some(Gate::Coordinated(notice))
                    }
                };
                let _forget = GateForget {
                    gates: &self.gates,
                    key: (partition, txn),
                };
                ask!(
                    |reply| PartitionMsg::Execute {
                        txn,
                        plan,
                        params,
                        lock,
                        sub,
                        call,
                        ext,
                        gate,
                        reply
                    },
                    |r| WireResponse::Executed(r, self.incarnation)
                )
            }
            WireMsg::Prepare { expect, .. } if expect.is_some_and(|e| e != self.incarnation) => {
                // This node restarted since the transaction ran here.
                WireResponse::Vote(Vote::No)
            }
            WireMsg::Commit {
                decided: false,
                expect,
                ..
            } if expect.is_some_and(|e| e != self.incarnation) => {
                WireResponse::Refused(Error::Transport(format!(
                    "partition {partition} restarted since the transaction ran here; whether it \
                     committed is unknown to this run (its log has it if it did)"
                )))
            }
            WireMsg::Prepare {
                txn, ending, hold, ..
            } => ask!(
                |reply| PartitionMsg::Prepare {
                    txn,
                    ending,
                    hold,
                    reply
                },
                WireResponse::Vote
            ),
            WireMsg::Commit {
                txn,
                ending,
                decided,
                ..
            } => {
                ask!(
                    |reply| PartitionMsg::Commit {
                        txn,
                        ending,
                        decided,
                        reply
                    },
                    |r: Result<()>| match r {
                        Ok(()) => WireResponse::Ack,
                        Err(e) => WireResponse::Refused(e),
                    }
                )
            }
            WireMsg::Abort { txn, ending } => {
                ask!(
                    |reply| PartitionMsg::Abort { txn, ending, reply },
                    WireResponse::Undone
                )
            }
            WireMsg::Release { owner, stages } => {
                ask!(
                    |reply| PartitionMsg::Release {
                        owner,
                        stages,
                        lasting: false,
                        reply
                    },
                    |()| { WireResponse::Ack }
                )
            }
            WireMsg::Protect { owner } => {
                if tx.send(PartitionMsg::Protect { owner }).is_err() {
                    return WireResponse::Refused(Error::Transport(format!(
                        "partition {partition} is shut down"
                    )));
                }
                WireResponse::Ack
            }
            WireMsg::Load { table, rows } => ask!(
                |reply| PartitionMsg::Load { table, rows, reply },
                WireResponse::Done
            ),
            WireMsg::Status => ask!(|reply| PartitionMsg::Status { reply }, WireResponse::Status),
            // Served with the protocol at hand (`handle`).
            WireMsg::Protocol { .. } => WireResponse::Refused(Error::Internal(
                "a protocol message reached the partition service without its protocol".into(),
            )),
            WireMsg::Verify => ask!(|reply| PartitionMsg::Verify { reply }, WireResponse::Done),
            WireMsg::AbortOrphans { coordinator } => ask!(
                |reply| PartitionMsg::AbortOrphans { coordinator, reply },
                WireResponse::Orphans
            ),
            WireMsg::WaitGraph { older_than_us } => ask!(
                |reply| PartitionMsg::WaitGraph {
                    began_by: {
                        let now = tokio::time::Instant::now().into_std();
                        now.checked_sub(Duration::from_micros(older_than_us))
                            .unwrap_or(now)
                    },
                    nudge: None,
                    reply
                },
                WireResponse::WaitGraph
            ),
            WireMsg::WatchGate { txn } => self.watch_gate(partition, txn).await,
            WireMsg::Ungate { txn } => {
                if tx.send(PartitionMsg::Ungate { txn }).is_err() {
                    return WireResponse::Refused(Error::Transport(format!(
                        "partition {partition} is shut down"
                    )));
                }
                WireResponse::Ack
            }
            WireMsg::BreakDeadlock { victim, pass } => {
                if tx
                    .send(PartitionMsg::BreakDeadlock { victim, pass })
                    .is_err()
                {
                    return WireResponse::Refused(Error::Transport(format!(
                        "partition {partition} is shut down"
                    )));
                }
                WireResponse::Ack
            }
        }
    }

    pub fn local_partitions(&self) -> impl Iterator<Item = u32> + '_ {
        let moving = self.routes.as_ref().map(|r| r.local_partitions());
        self.partitions
            .keys()
            .copied()
            .chain(moving.into_iter().flatten())
    }
}

impl NodeService {
    /// Answers one request to this node: partition messages from peers,
    /// calls, interactive transactions and status from clients.
    pub async fn handle(&self, cluster: &Cluster, req: WireRequest) -> WireResponse {
        match req {
            WireRequest::Partition {
                partition,
                msg: WireMsg::Protocol { bytes },
            } => WireResponse::Protocol(self.serve_protocol(cluster, partition, &bytes).await),
            WireRequest::Partition { partition, msg } => {
                let ext = match &msg {
                    WireMsg::Execute { ext: Some(b), .. } => match cluster.protocol().decode_ext(b)
                    {
                        Ok(ext) => ext,
                        Err(e) => return WireResponse::Executed(Err(e), self.incarnation),
                    },
                    _ => None,
                };
                self.serve(partition, msg, ext).await
            }
            WireRequest::Protocol { bytes } => {
                WireResponse::Protocol(cluster.protocol().serve(bytes).await)
            }
            WireRequest::Call { procedure, args } => WireResponse::Called(
                cluster
                    .client()
                    .call(&procedure, args)
                    .await
                    .map(|o| (o.values, o.attempts)),
            ),
            WireRequest::NodeStatus => WireResponse::NodeStatus(self.status(cluster).await),
            WireRequest::Begin => match self.sessions.begin(cluster) {
                Ok(id) => WireResponse::Begun(id),
                Err(e) => WireResponse::Refused(e),
            },
            WireRequest::Execute {
                session,
                sql,
                params,
            } => {
                let mut txn = match self.sessions.take(session) {
                    Ok(t) => t,
                    Err(e) => return WireResponse::Rows(Err(e)),
                };
                let result = txn.execute(&sql, params).await;
                self.sessions.put_back(session, txn);
                WireResponse::Rows(result)
            }
            WireRequest::Commit { session } => match self.sessions.end(session) {
                Ok(txn) => WireResponse::Done(txn.commit().await),
                Err(e) => WireResponse::Done(Err(e)),
            },
            WireRequest::Decision { txn } => WireResponse::Decision(match &self.book {
                Some(book) => book.ask(txn),
                // A node without a log recovers nothing: it decided nothing
                // that survived.
                None => Inquiry::Aborted,
            }),
            WireRequest::Cut { peers, millis } => {
                // The replicas' messages take the same network.
                if let Some(across) = &cluster.config().durability.across {
                    across.cut(&peers, Duration::from_millis(millis));
                }
                WireResponse::Done(self.cut(&peers, millis))
            }
            // The node's replicas take these before its service starts
            // (`brine server`): one that gets here has none.
            WireRequest::Raft { .. } | WireRequest::RaftPart(_) => {
                WireResponse::Refused(Error::Config(format!(
                    "node {} keeps no replicas of replicated logs",
                    self.node.0
                )))
            }
            WireRequest::Serves { partition, serving } => {
                if let Some(r) = &self.routes {
                    r.learn(partition, serving);
                }
                WireResponse::Ack
            }
            // The node's replicas take these before its service starts
            // (`brine server`).
            WireRequest::Join { .. } | WireRequest::Generation { .. } => {
                WireResponse::Refused(Error::Config(format!(
                    "node {} keeps no replicas of replicated logs",
                    self.node.0
                )))
            }
            WireRequest::WhoServes { partition } => {
                WireResponse::Serving(self.routes.as_ref().and_then(|r| r.serving(partition)))
            }
            WireRequest::PeerRestarted { node } => {
                let ended = self
                    .end_orphans(node, cluster.config().durability.across.as_deref())
                    .await;
                cluster
                    .protocol()
                    .peer_restarted(&cluster.shared, self.node, NodeId(node));
                WireResponse::Done(ended)
            }
            WireRequest::Abort { session } => match self.sessions.end(session) {
                Ok(txn) => {
                    txn.abort().await;
                    WireResponse::Done(Ok(()))
                }
                Err(e) => WireResponse::Done(Err(e)),
            },
        }
    }

    /// A protocol's own message for local partition `partition`, decoded
    /// by the protocol; its answer, encoded.
    async fn serve_protocol(
        &self,
        cluster: &Cluster,
        partition: u32,
        bytes: &[u8],
    ) -> Result<Vec<u8>> {
        let tx = self.partition(partition).ok_or_else(|| {
            Error::Config(format!(
                "partition {partition} is not hosted by node {}",
                self.node.0
            ))
        })?;
        let (msg, answer) = cluster
            .protocol()
            .decode_message(&self.link, self.node, bytes)?;
        tx.send(PartitionMsg::Protocol(msg)).map_err(|_| {
            Error::Transport(format!(
                "partition {partition} did not answer (shutting down?)"
            ))
        })?;
        answer.await
    }

    /// `WireRequest::Cut`.
    fn cut(&self, peers: &[u32], millis: u64) -> Result<()> {
        let d = Duration::from_millis(millis);
        for p in peers {
            let peer = self.peers.get(&NodeId(*p)).ok_or_else(|| {
                Error::Config(format!("node {p} is not a peer of node {}", self.node.0))
            })?;
            tracing::warn!(peer = p, "cut off from node {p} for {d:?} (a fault test)");
            peer.cut_for(d);
        }
        Ok(())
    }

    /// This node's status (also what `brine status` shows).
    pub async fn status(&self, cluster: &Cluster) -> NodeStatus {
        let mut partitions = Vec::new();
        for p in self.local_partitions() {
            if let WireResponse::Status(s) = self.serve(p, WireMsg::Status, None).await {
                partitions.push((p, s));
            }
        }
        partitions.sort_by_key(|(p, _)| *p);
        let stats = cluster.stats();
        NodeStatus {
            node: self.node.0,
            partitions,
            commits: stats.commits,
            lock_waits: stats.lock_waits,
            sessions: self.sessions.open() as u64,
            replicas: match &cluster.config().durability.across {
                Some(r) => r.status().await,
                None => Vec::new(),
            },
        }
    }

    /// Node `node` restarted: its previous run's transactions still open at
    /// this node's partitions are aborted, except prepared ones, whose
    /// outcome is asked of it (its decision log has it) and applied.
    /// With replicated logs (`across`) the outcome is asked of whoever
    /// decides for `node` now: itself, or while it is down, the replica
    /// leading its decision log.
    async fn end_orphans(
        &self,
        node: u32,
        across: Option<&crate::replication::NodeReplicas>,
    ) -> Result<()> {
        let Some(peer) = self.peers.get(&NodeId(node)).cloned() else {
            return Err(Error::Config(format!(
                "node {node} is not a peer of node {}",
                self.node.0
            )));
        };
        let mut parts: Vec<u32> = self.local_partitions().collect();
        parts.sort_unstable();
        for p in parts {
            let WireResponse::Orphans(in_doubt) = self
                .serve(p, WireMsg::AbortOrphans { coordinator: node }, None)
                .await
            else {
                continue;
            };
            for txn in in_doubt {
                let started = Instant::now();
                let committed = loop {
                    let answer = match across {
                        Some(a) => a.ask_decision(txn).await,
                        None => match peer.request(WireRequest::Decision { txn }).await {
                            Ok(WireResponse::Decision(i)) => Some(i),
                            _ => None,
                        },
                    };
                    match answer {
                        Some(Inquiry::Committed) => break Some(true),
                        Some(Inquiry::Aborted) => break Some(false),
                        _ if started.elapsed() > INQUIRY_PATIENCE => break None,
                        _ => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                };
                let Some(committed) = committed else {
                    tracing::error!(%txn, "node {node} did not say what became of this prepared transaction; it stays in doubt (holding its locks) until node {node} restarts again");
                    continue;
                };
                let msg = if committed {
                    WireMsg::Commit {
                        txn,
                        ending: crate::partition::Ending::Release,
                        decided: true,
                        expect: None,
                    }
                } else {
                    WireMsg::Abort {
                        txn,
                        ending: crate::partition::Ending::Release,
                    }
                };
                tracing::info!(%txn, committed, "resolved a transaction of restarted node {node}");
                self.serve(p, msg, None).await;
            }
        }
        Ok(())
    }

    /// Tells every peer that this node restarted (after its recovery,
    /// before it serves): they end what its previous run left open.
    /// Unreachable peers are skipped: their own restart ends it there.
    pub async fn announce_restart(&self) {
        for (n, peer) in &self.peers {
            match peer
                .request(WireRequest::PeerRestarted { node: self.node.0 })
                .await
            {
                Ok(WireResponse::Done(Ok(()))) => {}
                Ok(other) => {
                    tracing::warn!(peer = n.0, "restart announcement: {}", unexpected(&other))
                }
                Err(e) => tracing::info!(peer = n.0, "restart announcement not delivered: {e}"),
            }
        }
    }

    /// Aborts interactive transactions idle for longer than
    /// `SESSION_IDLE_TIMEOUT` (their client is gone or stalled: they must
    /// not hold locks forever). Run it periodically.
    pub fn reap_idle_sessions(&self) -> usize {
        self.sessions.reap()
    }
}
