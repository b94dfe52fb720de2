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
//! node turns each wire request back into the same [`PartitionMsg`] with a
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{Catalog, Error, NodeId, Result, Row, TableId, TxnId, Value};
use brine_sql::{Plan, QueryResult};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::cluster::{Cluster, Txn};
use crate::decision::DecisionBook;
pub use crate::decision::Inquiry;
use crate::link::{Link, LinkConfig};
use crate::message::{
    BaseStmt, Executed, Gate, GateNotice, LockSpec, PartitionMsg, PartitionStatus, Reply, Vote,
    WaitGraph,
};

/// The client of one peer node.
pub type PeerClient = brine_net::Client<WireRequest, WireResponse>;

/// How long a commit decision is retried against an unreachable
/// participant before it is left to that participant's recovery.
const COMMIT_RETRY_FOR: Duration = Duration::from_secs(60);

/// At most this many distinct statements are kept prepared per node.
const PLAN_CACHE_MAX: usize = 10_000;

/// A request between nodes, or from a client to a node.
#[derive(Debug, Serialize, Deserialize)]
pub enum WireRequest {
    /// A partition message for partition `partition` of the serving node.
    Partition { partition: u32, msg: WireMsg },
    /// Run procedure `procedure` on the serving node's coordinator.
    Call { procedure: String, args: Vec<Value> },
    /// The serving node's status.
    NodeStatus,
    /// Begin an interactive transaction coordinated by the serving node;
    /// answered with its session id.
    Begin,
    /// Run one SQL statement in session `session`.
    Execute {
        session: u64,
        sql: String,
        params: Vec<Value>,
    },
    /// Commit session `session`'s transaction and end the session.
    Commit { session: u64 },
    /// Abort it and end the session.
    Abort { session: u64 },
    /// A restarted participant asks this node, the coordinator of `txn`,
    /// whether it committed.
    Decision { txn: TxnId },
    /// Node `node` restarted: end what its previous run left open here.
    PeerRestarted { node: u32 },
}

/// [`PartitionMsg`] without its reply path, with the plan as SQL text.
#[derive(Debug, Serialize, Deserialize)]
pub enum WireMsg {
    Execute {
        txn: TxnId,
        sql: String,
        params: Vec<Value>,
        lock: LockSpec,
        base: Option<BaseStmt>,
        intro: Option<(String, Vec<Value>)>,
        gate: WireGate,
    },
    /// `expect`: the incarnation that ran the transaction's statements.
    Prepare {
        txn: TxnId,
        keep: Option<TxnId>,
        #[serde(default)]
        hold: bool,
        expect: Option<u64>,
    },
    Commit {
        txn: TxnId,
        keep: Option<TxnId>,
        decided: bool,
        expect: Option<u64>,
    },
    Abort {
        txn: TxnId,
        keep: Option<TxnId>,
    },
    Release {
        owner: TxnId,
        stages: Vec<Option<u32>>,
    },
    /// `owner` can no longer roll back (an accepted BASE transaction).
    Protect {
        owner: TxnId,
    },
    Load {
        table: TableId,
        rows: Vec<Row>,
    },
    Status,
    Verify,
    AbortOrphans {
        coordinator: u32,
    },
    /// The partition's part of the wait-for graph, for the cluster-wide
    /// deadlock detector (`deadlock`), which runs on one node.
    WaitGraph {
        older_than_us: u64,
    },
    /// The detector chose `victim` (see `PartitionMsg::BreakDeadlock`).
    BreakDeadlock {
        victim: TxnId,
        pass: bool,
    },
    /// The next change of readiness of `txn`'s statement gated here
    /// (`WireGate::Coordinated`): answered when it comes
    /// (`WireResponse::GateReady`).
    WatchGate {
        txn: TxnId,
    },
    /// Opens `txn`'s gated statement here (`PartitionMsg::Ungate`).
    Ungate {
        txn: TxnId,
    },
}

/// How a statement sent over the wire is gated (`message::Gate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireGate {
    None,
    Local,
    /// Its coordinator ungates it; it watches the readiness with
    /// `WireMsg::WatchGate`.
    Coordinated,
}

/// A node's status as `brine status` shows it: per partition its rows,
/// active transactions and parked (lock-waiting) statements.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node: u32,
    pub partitions: Vec<(u32, PartitionStatus)>,
    pub commits: u64,
    pub lock_waits: u64,
    /// Interactive transactions open on this node.
    pub sessions: u64,
}

/// The answer to a [`WireRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum WireResponse {
    /// A statement's answer and the serving node's incarnation.
    Executed(Result<Executed>, u64),
    Vote(Vote),
    Ack,
    Done(Result<()>),
    Status(PartitionStatus),
    Called(Result<(Vec<Value>, u32)>),
    NodeStatus(NodeStatus),
    Begun(u64),
    Rows(Result<QueryResult>),
    Decision(Inquiry),
    Orphans(Vec<TxnId>),
    WaitGraph(WaitGraph),
    /// A gated statement's readiness changed (`Some`), or it is no longer
    /// gated here (`None`: executed, aborted, or never was).
    GateReady(Option<bool>),
    /// The request was well-formed but cannot be served here (e.g. a
    /// partition this node does not host).
    Refused(Error),
}

/// Starts the proxy of remote partition `partition`: messages sent into
/// the returned queue go to the peer over `client`.
pub fn spawn_proxy(partition: u32, client: Arc<PeerClient>) -> mpsc::UnboundedSender<PartitionMsg> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PartitionMsg>();
    let seen = Arc::new(Incarnations::default());
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            // Each request runs on its own: the coordinator never has two
            // requests of one transaction to one partition in flight, so
            // their order cannot matter.
            tokio::spawn(forward(partition, client.clone(), seen.clone(), msg));
        }
    });
    tx
}

/// Which incarnation of the serving node ran each open transaction's
/// statements. A node that restarted lost what an open transaction did
/// there: its prepare must vote No and its one-round commit must fail,
/// never commit the statements that ran elsewhere without these.
#[derive(Default)]
struct Incarnations {
    by_txn: parking_lot::Mutex<HashMap<TxnId, u64>>,
}

/// Transactions whose end never reaches this proxy (a coordinator that
/// died) would otherwise stay; past this many the map starts over.
const INCARNATIONS_MAX: usize = 1 << 20;

impl Incarnations {
    /// Records the incarnation that ran a statement of `txn`; false if an
    /// earlier statement ran on another one.
    fn ran(&self, txn: TxnId, incarnation: u64) -> bool {
        let mut m = self.by_txn.lock();
        if m.len() >= INCARNATIONS_MAX && !m.contains_key(&txn) {
            tracing::warn!(
                "{INCARNATIONS_MAX} open transactions tracked by one proxy; starting over"
            );
            m.clear();
        }
        *m.entry(txn).or_insert(incarnation) == incarnation
    }

    fn expected(&self, txn: TxnId) -> Option<u64> {
        self.by_txn.lock().get(&txn).copied()
    }

    fn ended(&self, txn: TxnId) {
        self.by_txn.lock().remove(&txn);
    }
}

async fn forward(
    partition: u32,
    client: Arc<PeerClient>,
    seen: Arc<Incarnations>,
    msg: PartitionMsg,
) {
    let request = |msg: WireMsg| WireRequest::Partition { partition, msg };
    let unreachable = |e: &brine_net::NetError| {
        Error::Transport(format!("partition {partition} at {}: {e}", client.addr()))
    };
    match msg {
        PartitionMsg::Execute {
            txn,
            plan,
            params,
            lock,
            base,
            intro,
            gate,
            reply,
        } => {
            let wire_gate = match &gate {
                None => WireGate::None,
                Some(Gate::Local) => WireGate::Local,
                Some(Gate::Coordinated(_)) => WireGate::Coordinated,
            };
            // The coordinator learns the readiness by watching it.
            let watch = match gate {
                Some(Gate::Coordinated(notice)) => Some(tokio::spawn(follow_remote_gate(
                    partition,
                    client.clone(),
                    txn,
                    notice,
                ))),
                _ => None,
            };
            let msg = WireMsg::Execute {
                txn,
                sql: plan.sql().to_string(),
                params,
                lock,
                base,
                intro: intro.map(|i| (i.0.clone(), i.1.clone())),
                gate: wire_gate,
            };
            let answer = client.request(request(msg)).await;
            if let Some(w) = watch {
                w.abort();
            }
            let answer = match answer {
                Ok(WireResponse::Executed(r, incarnation)) => {
                    if seen.ran(txn, incarnation) {
                        r
                    } else {
                        Err(Error::Transport(format!(
                            "partition {partition} at {} restarted during transaction {txn}",
                            client.addr()
                        )))
                    }
                }
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
        PartitionMsg::Prepare {
            txn,
            keep,
            hold,
            reply,
        } => {
            let expect = seen.expected(txn);
            let vote = match client
                .request(request(WireMsg::Prepare {
                    txn,
                    keep,
                    hold,
                    expect,
                }))
                .await
            {
                Ok(WireResponse::Vote(v)) => v,
                Ok(other) => {
                    tracing::warn!(%txn, "prepare: {}", unexpected(&other));
                    Vote::No
                }
                Err(e) => {
                    tracing::warn!(%txn, "prepare: {}", unreachable(&e));
                    Vote::No
                }
            };
            if vote != Vote::Yes {
                // No phase two follows a read-only or No vote.
                seen.ended(txn);
            }
            reply.send(vote);
        }
        PartitionMsg::Commit {
            txn,
            keep,
            decided,
            reply,
        } => {
            let expect = seen.expected(txn);
            seen.ended(txn);
            let commit = || {
                request(WireMsg::Commit {
                    txn,
                    keep,
                    decided,
                    expect,
                })
            };
            if !decided {
                // One round: if it cannot be delivered its outcome is
                // unknown (the participant may have lost the transaction
                // in a crash, or applied it and lost the answer), so it is
                // never resent; dropping the reply tells the coordinator.
                match client.request(commit()).await {
                    Ok(WireResponse::Ack) => reply.send(()),
                    Ok(other) => tracing::warn!(%txn, "commit: {}", unexpected(&other)),
                    Err(e) => tracing::warn!(%txn, "commit outcome unknown: {}", unreachable(&e)),
                }
                return;
            }
            let started = Instant::now();
            let mut backoff = Duration::from_millis(10);
            loop {
                let failure = match client.request(commit()).await {
                    Ok(WireResponse::Ack) => break,
                    // Refused: the node is restarting (or no longer hosts it).
                    Ok(other) => unexpected(&other),
                    Err(e) => unreachable(&e),
                };
                if started.elapsed() >= COMMIT_RETRY_FOR {
                    tracing::error!(%txn, "commit not delivered; the participant asks for it at its recovery: {failure}");
                    break;
                }
                tracing::warn!(%txn, "commit not delivered yet, retrying: {failure}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            reply.send(());
        }
        PartitionMsg::Abort { txn, keep, reply } => {
            seen.ended(txn);
            // Presumed abort: a participant that never hears it aborts the
            // transaction at recovery.
            if let Err(e) = client.request(request(WireMsg::Abort { txn, keep })).await {
                tracing::warn!(%txn, "abort not delivered: {}", unreachable(&e));
            }
            reply.send(());
        }
        PartitionMsg::Ungate { txn } => {
            if let Err(e) = client.request(request(WireMsg::Ungate { txn })).await {
                tracing::warn!(%txn, "ungate not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::EndPiece { owner, .. } | PartitionMsg::RankGo { txn: owner, .. } => {
            // Callas runs in one process only (Cluster::start refuses it
            // on nodes), so this never crosses the network.
            tracing::error!(%owner, "a Callas piece message cannot be sent to another process");
        }
        PartitionMsg::Protect { owner } => {
            // Lost, the protection still reaches the partition with the
            // owner's next statement there (`BaseStmt::protect`).
            if let Err(e) = client.request(request(WireMsg::Protect { owner })).await {
                tracing::warn!(%owner, "protection not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::Release {
            owner,
            stages,
            reply,
        } => {
            if let Err(e) = client
                .request(request(WireMsg::Release { owner, stages }))
                .await
            {
                tracing::warn!(%owner, "release not delivered: {}", unreachable(&e));
            }
            reply.send(());
        }
        PartitionMsg::Load { table, rows, reply } => {
            let answer = match client.request(request(WireMsg::Load { table, rows })).await {
                Ok(WireResponse::Done(r)) => r,
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
        PartitionMsg::WaitGraph {
            began_by, reply, ..
        } => {
            // A peer that cannot answer shows no waits: its cycles wait
            // for the detector's next round, or for the lock wait timeout.
            // The look's start crosses as an age (clocks of two processes
            // do not compare); the peer counts it from when it reads the
            // request, so its cut-off is later by the wire's one-way
            // latency. The detector's doorbell does not cross the wire:
            // a peer's cycles are found by the detector's periodic look.
            let age = tokio::time::Instant::now()
                .into_std()
                .saturating_duration_since(began_by);
            let older_than_us = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
            let graph = match client
                .request(request(WireMsg::WaitGraph { older_than_us }))
                .await
            {
                Ok(WireResponse::WaitGraph(g)) => g,
                Ok(other) => {
                    tracing::debug!("wait graph: {}", unexpected(&other));
                    WaitGraph::default()
                }
                Err(e) => {
                    tracing::debug!("wait graph: {}", unreachable(&e));
                    WaitGraph::default()
                }
            };
            reply.send(graph);
        }
        PartitionMsg::BreakDeadlock { victim, pass } => {
            if let Err(e) = client
                .request(request(WireMsg::BreakDeadlock { victim, pass }))
                .await
            {
                tracing::warn!(%victim, "deadlock victim not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::Status { reply } => {
            let answer = match client.request(request(WireMsg::Status)).await {
                Ok(WireResponse::Status(s)) => s,
                _ => PartitionStatus::default(),
            };
            reply.send(answer);
        }
        PartitionMsg::AbortOrphans { coordinator, reply } => {
            match client
                .request(request(WireMsg::AbortOrphans { coordinator }))
                .await
            {
                Ok(WireResponse::Orphans(in_doubt)) => reply.send(in_doubt),
                Ok(other) => tracing::warn!("abort orphans: {}", unexpected(&other)),
                Err(e) => tracing::warn!("abort orphans: {}", unreachable(&e)),
            }
        }
        PartitionMsg::Verify { reply } => {
            let answer = match client.request(request(WireMsg::Verify)).await {
                Ok(WireResponse::Done(r)) => r,
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
    }
}

fn unexpected(r: &WireResponse) -> Error {
    match r {
        WireResponse::Refused(e) => e.clone(),
        other => Error::Transport(format!("unexpected answer from a peer: {other:?}")),
    }
}

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

/// The coordinator's side of a statement gated at a remote partition:
/// watches its readiness there and reports every change through `notice`,
/// until the partition says it is no longer gated (or cannot be reached;
/// then the statement's lock wait timeout ends it).
async fn follow_remote_gate(
    partition: u32,
    client: Arc<PeerClient>,
    txn: TxnId,
    notice: GateNotice,
) {
    loop {
        let msg = WireMsg::WatchGate { txn };
        match client
            .request(WireRequest::Partition { partition, msg })
            .await
        {
            Ok(WireResponse::GateReady(Some(ready))) => notice.send(ready),
            _ => return,
        }
    }
}

impl NodeService {
    pub fn new(
        node: NodeId,
        catalog: Arc<Catalog>,
        partitions: HashMap<u32, mpsc::UnboundedSender<PartitionMsg>>,
        book: Option<Arc<DecisionBook>>,
        peers: HashMap<NodeId, Arc<PeerClient>>,
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
            gates: parking_lot::Mutex::new(HashMap::new()),
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

    /// Serves one partition message and returns its answer.
    pub async fn serve(&self, partition: u32, msg: WireMsg) -> WireResponse {
        let Some(tx) = self.partitions.get(&partition) else {
            return WireResponse::Refused(Error::Config(format!(
                "node {} does not host partition {partition}",
                self.node.0
            )));
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
                base,
                intro,
                gate,
            } => {
                let plan = match self.plan(&sql) {
                    Ok(p) => p,
                    Err(e) => return WireResponse::Executed(Err(e), self.incarnation),
                };
                let intro = intro.map(Arc::new);
                let gate = match gate {
                    WireGate::None => None,
                    WireGate::Local => Some(Gate::Local),
                    WireGate::Coordinated => {
                        // Readiness goes to `WatchGate`, through this queue.
                        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
                        self.gates.lock().insert((partition, txn), GateWatch::Idle(ready_rx));
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
                        base,
                        intro,
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
                    "partition {partition} restarted since the transaction ran here; it did not commit"
                )))
            }
            WireMsg::Prepare {
                txn, keep, hold, ..
            } => ask!(
                |reply| PartitionMsg::Prepare {
                    txn,
                    keep,
                    hold,
                    reply
                },
                WireResponse::Vote
            ),
            WireMsg::Commit {
                txn, keep, decided, ..
            } => {
                ask!(|reply| PartitionMsg::Commit { txn, keep, decided, reply }, |()| {
                    WireResponse::Ack
                })
            }
            WireMsg::Abort { txn, keep } => {
                ask!(|reply| PartitionMsg::Abort { txn, keep, reply }, |()| {
                    WireResponse::Ack
                })
            }
            WireMsg::Release { owner, stages } => {
                ask!(|reply| PartitionMsg::Release { owner, stages, reply }, |()| {
                    WireResponse::Ack
                })
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
        self.partitions.keys().copied()
    }
}

impl NodeService {
    /// Answers one request to this node: partition messages from peers,
    /// calls, interactive transactions and status from clients.
    pub async fn handle(&self, cluster: &Cluster, req: WireRequest) -> WireResponse {
        match req {
            WireRequest::Partition { partition, msg } => self.serve(partition, msg).await,
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
            WireRequest::PeerRestarted { node } => WireResponse::Done(self.end_orphans(node).await),
            WireRequest::Abort { session } => match self.sessions.end(session) {
                Ok(txn) => {
                    txn.abort().await;
                    WireResponse::Done(Ok(()))
                }
                Err(e) => WireResponse::Done(Err(e)),
            },
        }
    }

    /// This node's status (also what `brine status` shows).
    pub async fn status(&self, cluster: &Cluster) -> NodeStatus {
        let mut partitions = Vec::new();
        for p in self.local_partitions() {
            if let WireResponse::Status(s) = self.serve(p, WireMsg::Status).await {
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
        }
    }

    /// Node `node` restarted: its previous run's transactions still open at
    /// this node's partitions are aborted, except prepared ones, whose
    /// outcome is asked of it (its decision log has it) and applied.
    async fn end_orphans(&self, node: u32) -> Result<()> {
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
                .serve(p, WireMsg::AbortOrphans { coordinator: node })
                .await
            else {
                continue;
            };
            for txn in in_doubt {
                let started = Instant::now();
                let committed = loop {
                    match peer.request(WireRequest::Decision { txn }).await {
                        Ok(WireResponse::Decision(Inquiry::Committed)) => break Some(true),
                        Ok(WireResponse::Decision(Inquiry::Aborted)) => break Some(false),
                        _ if started.elapsed() > INQUIRY_PATIENCE => break None,
                        Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                };
                let Some(committed) = committed else {
                    tracing::error!(%txn, "node {node} did not say what became of this prepared transaction; it stays in doubt (holding its locks) until node {node} restarts again");
                    continue;
                };
                let msg = if committed {
                    WireMsg::Commit {
                        txn,
                        keep: None,
                        decided: true,
                        expect: None,
                    }
                } else {
                    WireMsg::Abort { txn, keep: None }
                };
                tracing::info!(%txn, committed, "resolved a transaction of restarted node {node}");
                self.serve(p, msg).await;
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

/// At most this many interactive transactions open per node.
const SESSIONS_MAX: usize = 10_000;
/// An interactive transaction idle this long is aborted.
pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Interactive transactions of remote clients, by session id. A session's
/// transaction is taken out while a statement runs, so a second concurrent
/// statement of the same session is refused instead of interleaved.
#[derive(Default)]
struct Sessions {
    open: parking_lot::Mutex<HashMap<u64, Session>>,
    next: std::sync::atomic::AtomicU64,
}

struct Session {
    txn: Option<Txn>,
    last_used: Instant,
}

impl Sessions {
    fn begin(&self, cluster: &Cluster) -> Result<u64> {
        let mut open = self.open.lock();
        if open.len() >= SESSIONS_MAX {
            return Err(Error::Bound(format!(
                "{SESSIONS_MAX} interactive transactions are open on this node; commit or abort some first"
            )));
        }
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        open.insert(
            id,
            Session {
                txn: Some(cluster.client().begin()),
                last_used: Instant::now(),
            },
        );
        Ok(id)
    }

    fn take(&self, id: u64) -> Result<Txn> {
        let mut open = self.open.lock();
        let s = open.get_mut(&id).ok_or_else(|| unknown_session(id))?;
        s.last_used = Instant::now();
        s.txn.take().ok_or_else(|| {
            Error::TxnState(format!(
                "session {id} is already running a statement; wait for its answer"
            ))
        })
    }

    fn put_back(&self, id: u64, txn: Txn) {
        if let Some(s) = self.open.lock().get_mut(&id) {
            s.last_used = Instant::now();
            s.txn = Some(txn);
        }
        // Reaped meanwhile: dropping the transaction aborts it.
    }

    fn end(&self, id: u64) -> Result<Txn> {
        let mut open = self.open.lock();
        match open.get_mut(&id) {
            None => Err(unknown_session(id)),
            Some(s) if s.txn.is_none() => Err(Error::TxnState(format!(
                "session {id} is running a statement; wait for its answer"
            ))),
            Some(_) => open
                .remove(&id)
                .and_then(|s| s.txn)
                .ok_or_else(|| unknown_session(id)),
        }
    }

    fn reap(&self) -> usize {
        let mut open = self.open.lock();
        let before = open.len();
        // Dropping an idle session's transaction aborts it.
        open.retain(|_, s| s.txn.is_none() || s.last_used.elapsed() < SESSION_IDLE_TIMEOUT);
        before - open.len()
    }

    fn open(&self) -> usize {
        self.open.lock().len()
    }
}

fn unknown_session(id: u64) -> Error {
    Error::TxnState(format!(
        "no open transaction with session {id} (it ended, or was aborted after {} s idle)",
        SESSION_IDLE_TIMEOUT.as_secs()
    ))
}

/// A running multi-process cluster, as its clients see it: the address of
/// every node, in node order.
#[derive(Clone, Debug)]
pub struct RemoteCluster {
    pub addresses: Vec<String>,
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
        Cluster::connect(config, app, peer_clients(&self.addresses, None)?)
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
