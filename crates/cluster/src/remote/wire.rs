//! What crosses the wire: the requests between nodes (and from clients),
//! the partition messages they carry, and their answers.

use brine_core::{Error, Result, Row, TableId, TxnId, Value};
use brine_sql::QueryResult;
use serde::{Deserialize, Serialize};

use super::Inquiry;
use crate::message::{Executed, LockSpec, PartitionStatus, ReleaseStage, SubStmt, Vote, WaitGraph};

/// A request between nodes, or from a client to a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// A request to a service of the protocol's own that the serving node
    /// hosts (`Protocol::serve`: Mediator's TSO).
    Protocol { bytes: Vec<u8> },
    /// Fault tests (`brine cut`): cut the serving node off from nodes
    /// `peers` for `millis` ms, as a network partition would: its requests
    /// to them fail at its transport (`brine_net::Client::cut_for`).
    Cut { peers: Vec<u32>, millis: u64 },
    /// Messages between the replicas of replicated logs
    /// (`replication::NodeReplicas::deliver`); answered `Ack` at once.
    Raft {
        msgs: Vec<(crate::replication::LogName, Vec<u8>)>,
    },
    /// Part of one raft message too large for one request (an image;
    /// `replication::parts`); answered `Ack` at once.
    RaftPart(crate::replication::Part),
    /// Replicated logs: node `serving.node` serves `partition` now (it
    /// leads its log's group; `remote::Routes`). Answered `Ack`.
    Serves {
        partition: u32,
        serving: super::routes::Serving,
    },
    /// Who serves `partition`, as far as the serving node knows
    /// (`WireResponse::Serving`).
    WhoServes { partition: u32 },
    /// Replicated logs: a new generation's replica `id` asks to replace
    /// its node's old one in `log`'s group (`NodeReplicas::join`).
    Join {
        log: crate::replication::LogName,
        id: u64,
    },
    /// Replicated logs: the newest generation of node `node`'s replicas
    /// the serving node knows in a group that committed entries
    /// (`WireResponse::Generation`).
    Generation { node: u32 },
}

/// [`PartitionMsg`](crate::message::PartitionMsg) without its reply path,
/// with the plan as SQL text.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WireMsg {
    Execute {
        txn: TxnId,
        sql: String,
        params: Vec<Value>,
        lock: LockSpec,
        sub: Option<SubStmt>,
        call: Option<(String, Vec<Value>)>,
        gate: WireGate,
        /// The protocol's words for its rules at the partition
        /// (`Protocol::encode_ext`).
        #[serde(default)]
        ext: Option<Vec<u8>>,
    },
    /// `expect`: the incarnation that ran the transaction's statements.
    Prepare {
        txn: TxnId,
        ending: crate::partition::Ending,
        #[serde(default)]
        hold: bool,
        expect: Option<u64>,
    },
    Commit {
        txn: TxnId,
        ending: crate::partition::Ending,
        decided: bool,
        expect: Option<u64>,
    },
    Abort {
        txn: TxnId,
        ending: crate::partition::Ending,
    },
    Release {
        owner: TxnId,
        stages: Vec<ReleaseStage>,
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
    /// A protocol's own message (`PartitionMsg::Protocol`), as the
    /// protocol encodes it (`Protocol::encode_message`).
    Protocol {
        bytes: Vec<u8>,
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
    /// This node's replicas of the replicated logs.
    #[serde(default)]
    pub replicas: Vec<crate::replication::ReplicaStatus>,
}

/// The answer to a [`WireRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum WireResponse {
    /// A statement's answer and the serving node's incarnation.
    Executed(Result<Executed>, u64),
    Vote(Vote),
    Ack,
    /// An abort's answer: the writes undone, when recording a history
    /// (`PartitionMsg::Abort`).
    Undone(#[serde(with = "crate::message::as_json")] Vec<brine_check::Op>),
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
    /// The answer to a protocol's own message or request, as it encodes
    /// it.
    Protocol(Result<Vec<u8>>),
    /// Who serves a partition (`WireRequest::WhoServes`).
    Serving(Option<super::routes::Serving>),
    Generation(Option<u64>),
}

pub(crate) fn unexpected(r: &WireResponse) -> Error {
    match r {
        WireResponse::Refused(e) => e.clone(),
        other => Error::Transport(format!("unexpected answer from a peer: {other:?}")),
    }
}
