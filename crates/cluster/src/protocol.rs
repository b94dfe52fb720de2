//! The protocol interface: what a concurrency-control protocol tells the
//! engine, on both sides of the wire.
//!
//! The engine (coordinator, partition actor, lock table, log) is
//! protocol-agnostic: it runs a transaction's body, routes statements,
//! takes locks, drives two-phase commit and logs. What differs between
//! protocols is *how locks are taken and released* (class, duration,
//! release order, downgrades), *how a call is cut into transactions*
//! (Salt's alkaline subtransactions, Callas' pieces), and *when the client
//! is answered*. A protocol answers those questions through three traits:
//!
//! - [`Protocol`], at the coordinator: how a statement locks, how a call
//!   runs ([`Protocol::run`]; the engine's [`run_acid`] by default), what
//!   the cluster must refuse, what recovery rolls forward, and which
//!   partition rules its partitions run ([`Protocol::spawn_partition`]).
//! - [`Statements`], per transaction at the coordinator: how each of its
//!   statements runs, and where its subtransactions begin and end.
//! - [`Rules`](crate::partition::Rules), at the partition: the protocol's
//!   per-transaction state there and what granting a lock, ending a
//!   statement, committing, aborting and releasing do.
//!
//! The protocols live in `crate::protocols`, each in its own module, and
//! are found by name in its registry; nothing here names one.

use std::fmt;
use std::str::FromStr;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_sql::{Plan, QueryResult};
use brine_storage::wal::record::BaseContext;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::coordinator::{run_acid, CallOutcome, ProcCtx, Shared};
use crate::message::{LockSpec, PartitionMsg};
use crate::partition::{Partition, PartitionParts, Plain};
use crate::procedure::{PreparedProc, ProcedureDef};

/// Isolation levels, defined as in seed 000 section 3.2.1 by which operations
/// take long (L) and short (S) locks.
/// Ordered from weakest to strongest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Isolation {
    /// L = {W}, S = {R, W}: reads lock only while they run. The sources'
    /// setting (MySQL Cluster's only level).
    ReadCommitted,
    /// L = S = {R, RR, W}: every lock is held to the end; range reads lock the
    /// scanned interval so phantoms cannot appear.
    #[default]
    Serializable,
}

impl FromStr for Isolation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "read-committed" | "rc" => Ok(Isolation::ReadCommitted),
            "serializable" | "ser" => Ok(Isolation::Serializable),
            other => Err(Error::Config(format!(
                "unknown isolation level `{other}` (expected read-committed or serializable)"
            ))),
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::ReadCommitted => "read-committed",
            Isolation::Serializable => "serializable",
        })
    }
}

/// A concurrency-control protocol, as the coordinator sees it.
///
/// Only [`Protocol::name`] and [`Protocol::lock_spec`] are required: a
/// protocol that changes nothing else runs every call as the engine's
/// ACID transaction (strict two-phase locking and two-phase commit) with
/// its own lock spec. The protocols and their registry are in
/// `crate::protocols` (`docs/architecture.md`, "How to add a protocol").
pub trait Protocol: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// How a statement locks at `isolation`: the class of its locks and
    /// how long each access holds them.
    fn lock_spec(&self, isolation: Isolation) -> LockSpec;

    /// The protocol the cluster runs, if it is not this one as it is:
    /// built once as the cluster starts, with the application (per-cluster
    /// state: Callas' pieces and nexus board).
    fn start(&self, _setup: &Setup<'_>) -> Result<Option<Arc<dyn Protocol>>> {
        Ok(None)
    }

    /// Refuses a deployment the protocol cannot keep its promises in
    /// (`multi_process`: coordinators and partitions in several `brine
    /// server` processes; `durable`: a write-ahead log).
    fn check_deployment(&self, _multi_process: bool, _durable: bool) -> Result<()> {
        Ok(())
    }

    /// Refuses replicated logs across processes where a partition taken
    /// over on another node (`Cluster::take_over`: recovered from its copy
    /// of the log, its actor started under the protocol's rules, and the
    /// protocol told as of a restart, [`Protocol::peer_restarted`]) would
    /// not finish the protocol's own work.
    fn check_failover(&self) -> Result<()> {
        Ok(())
    }

    /// Runs one call of a procedure to completion: attempts, retries,
    /// commit. The engine's ACID transaction unless the protocol runs the
    /// procedure its own way.
    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        Box::pin(run_acid(call))
    }

    /// Rewrites an attempt's recorded operations before they go to the
    /// history (Elia: a version a replica installed when it applied a
    /// global's update is named by the version the global installed at its
    /// own server, so the history shows one write, not one per replica).
    fn rewrite_history(&self, _ops: &mut Vec<brine_check::Op>) {}

    /// Tables the protocol keeps beside the application's (Elia: its
    /// update log and applied marks), as DDL appended to the schema.
    fn extra_ddl(&self) -> &'static str {
        ""
    }

    /// Whether [`Protocol::recover`] runs at every start from a log, with
    /// or without unfinished BASE transactions (Elia: replicas catch up).
    fn recovers_from_log(&self) -> bool {
        false
    }

    /// Waits, once no call runs, until the protocol's own work in flight is
    /// done (Elia: every update applied at every replica), so a check then
    /// reads a state every server agrees on. An error after `within`.
    fn quiesce(&self, _within: std::time::Duration) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether the protocol's counters show one of its rules broken (Callas:
    /// a cycle of nexus release waits), as an error saying which; checked
    /// with the workload's invariants (`brine bench --check`).
    fn rules_kept(&self, _stats: &crate::stats::StatsSnapshot) -> Result<()> {
        Ok(())
    }

    /// Where the data lives: partitioned by key (the engine's way), a full
    /// replica in every partition (Elia), or all of it in partition 0 (a
    /// centralized server).
    fn layout(&self) -> Layout {
        Layout::Partitioned
    }

    /// Whether an ACID transaction's first statement that spans partitions
    /// waits gated at each until it can be granted at all at once (Salt:
    /// it must never hold one partition while it waits at another for a
    /// transaction that cannot yield; `ProcCtx::execute_on`).
    fn gates_spanning_statements(&self) -> bool {
        false
    }

    /// Finishes, after a crash, the work the log says was promised but not
    /// done (Salt: accepted BASE transactions, rolled forward). Runs before
    /// the cluster takes new work.
    fn recover<'a>(
        &'a self,
        _shared: &'a Arc<Shared>,
        _node: NodeId,
        _procedures: &'a HashMap<String, Arc<PreparedProc>>,
        unfinished: Vec<BaseContext>,
    ) -> BoxFuture<'a, ()> {
        let name = self.name();
        Box::pin(async move {
            if !unfinished.is_empty() {
                tracing::error!(
                    count = unfinished.len(),
                    "unfinished BASE transactions in the log, but protocol `{name}` has none: not rolled forward"
                );
            }
        })
    }

    /// The cluster is built: its shared state and prepared procedures, for
    /// a protocol with work of its own in this process (Elia across
    /// processes: the server joins the token's ring). Runs once, before
    /// any call.
    fn attach(&self, _shared: &Arc<Shared>, _procedures: &Arc<HashMap<String, Arc<PreparedProc>>>) {
    }

    /// Starts one partition's actor under this protocol's partition rules
    /// ([`Rules`](crate::partition::Rules)); the engine's plain rules (strict
    /// 2PL) unless the protocol has its own.
    fn spawn_partition(&self, parts: PartitionParts, rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        tokio::spawn(Partition::new(parts, Plain).run(rx));
    }

    /// The protocol's own counters, kept in its slots of the engine's
    /// counters and reported by name in `StatsSnapshot::protocol`.
    fn counters(&self) -> &'static [crate::stats::Counter] {
        &[]
    }

    /// What the protocol adds to a run's recorded configuration (history
    /// header, `--json`).
    fn describe(&self, _config: &mut serde_json::Map<String, serde_json::Value>) {}

    /// For a protocol's own code that finds itself behind `Arc<dyn
    /// Protocol>` (its statements' hooks).
    fn as_any(&self) -> &dyn Any;

    /// Across processes, the coordinator's side of a protocol message
    /// (`PartitionMsg::Protocol`) for a partition in another process: its
    /// request as bytes, and what delivers the answer's bytes to its
    /// reply. A protocol whose messages never leave their process has
    /// none.
    fn encode_message(&self, _msg: Box<dyn Any + Send>) -> Result<(Vec<u8>, WireAnswer)> {
        Err(Error::Config(format!(
            "protocol `{}` has no messages that cross processes",
            self.name()
        )))
    }

    /// The serving side: the message `bytes` encode, to hand to the
    /// partition, with the future of its answer as bytes (`link` and
    /// `node`: the serving node's, for the reply).
    fn decode_message(
        &self,
        _link: &crate::link::Link,
        _node: NodeId,
        _bytes: &[u8],
    ) -> Result<(Box<dyn Any + Send>, WireAnswering)> {
        Err(Error::Config(format!(
            "protocol `{}` has no messages that cross processes",
            self.name()
        )))
    }

    /// Across processes, this process told its peers it (re)started, and
    /// they ended what its previous run left open with them
    /// (`NodeService::announce_restart`). Salt's roll-forward of this
    /// node's BASE transactions waits for it, so the peers' clean-up of
    /// the previous run never meets the roll-forward's work.
    fn announced(&self) {}

    /// Across processes, node `peer` restarted and told this node `me`
    /// (after its partitions serve; `NodeService::announce_restart`), or,
    /// with replicated logs, `peer` took a partition over (recovered from
    /// its copy of the log, as a restart recovers it). Callas: a chopped
    /// transaction of this node that ended while that partition held part
    /// of it may have lost its end there (it was logged after the end's
    /// answer), and is ended again.
    fn peer_restarted(&self, _shared: &Arc<Shared>, _me: NodeId, _peer: NodeId) {}

    /// Across processes, a statement's protocol words
    /// (`PartitionMsg::Execute`'s `ext`) as bytes; [`Protocol::decode_ext`]
    /// reads them at the partition's process.
    fn encode_ext(&self, _ext: &(dyn Any + Send + Sync)) -> Result<Vec<u8>> {
        Err(Error::Config(format!(
            "protocol `{}` has no statement words that cross processes",
            self.name()
        )))
    }

    fn decode_ext(&self, _bytes: &[u8]) -> Result<crate::message::StmtExt> {
        Err(Error::Config(format!(
            "protocol `{}` has no statement words that cross processes",
            self.name()
        )))
    }

    /// The services of the protocol's own that run in a process of their
    /// own in a multi-process cluster (Mediator: `tso`), by name: `brine
    /// cluster up` starts one `brine server --service NAME` for each, and
    /// `ClusterConfig::services` gives the others their addresses.
    fn own_processes(&self) -> &'static [&'static str] {
        &[]
    }

    /// A request to a service of the protocol's own that this process
    /// hosts (Mediator's TSO), from another process; the answer as bytes.
    fn serve<'a>(&'a self, _bytes: Vec<u8>) -> BoxFuture<'a, Result<Vec<u8>>> {
        let name = self.name();
        Box::pin(async move {
            Err(Error::Config(format!(
                "protocol `{name}` serves no requests of its own"
            )))
        })
    }
}

/// [`Protocol::encode_message`] for a protocol whose messages are of type
/// `M` (`name`: the protocol's, for the error on any other).
pub fn encode_message_as<M: 'static>(
    name: &str,
    msg: Box<dyn Any + Send>,
    encode: impl FnOnce(M) -> Result<(Vec<u8>, WireAnswer)>,
) -> Result<(Vec<u8>, WireAnswer)> {
    let msg = msg
        .downcast::<M>()
        .map_err(|_| Error::Internal(format!("a message {name} does not know")))?;
    encode(*msg)
}

/// [`Protocol::decode_message`] from a protocol's own decoding.
pub fn decoded_message<M: Send + 'static>(
    decoded: Result<(M, WireAnswering)>,
) -> Result<(Box<dyn Any + Send>, WireAnswering)> {
    let (msg, answer) = decoded?;
    Ok((Box::new(msg), answer))
}

/// Delivers the bytes of a protocol message's answer to its reply (an
/// error: the bytes are not the answer it waits for).
pub type WireAnswer = Box<dyn FnOnce(Vec<u8>) -> Result<()> + Send>;

/// The future of a decoded protocol message's answer, as bytes.
pub type WireAnswering = BoxFuture<'static, Result<Vec<u8>>>;

/// Where this process stands in a multi-process cluster, for a protocol
/// with a service of its own (`Setup::hosting`).
pub struct SetupHosting<'a> {
    /// The node this process is (above every node's for a
    /// coordinator-only process).
    pub node: NodeId,
    /// The other nodes.
    pub peers: &'a HashMap<NodeId, Arc<crate::remote::PeerClient>>,
}

/// Where a protocol keeps the data ([`Protocol::layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Each row in the partition its partitioning column routes it to.
    Partitioned,
    /// Every row in every partition: loading sends each row everywhere,
    /// and an interactive transaction reads one replica (its
    /// coordinator's node's, else partition 0's) and may not write (writes
    /// go through the protocol's procedures, which keep the replicas in
    /// step). Such a read may see one server's local rows beside another's
    /// stale copies: it is a view, outside the protocol's isolation, and
    /// not recorded in a history.
    Replicated,
    /// Every row in partition 0: a single server, the others idle.
    Central,
}

/// What a protocol's [`Protocol::start`] sees of the cluster.
pub struct Setup<'a> {
    /// The link between nodes, for a service of the protocol's own (the
    /// Mediator TSO) that answers over it.
    pub link: &'a crate::link::Link,
    /// Nodes of the cluster: `NodeId(nodes)` hosts the coordinators
    /// (separate placement); the protocol's service goes on the next one.
    pub nodes: u32,
    /// Partitions of the whole cluster.
    pub partitions: u32,
    pub app_name: &'a str,
    pub ddl: &'a str,
    pub procedures: &'a [ProcedureDef],
    pub isolation: Isolation,
    pub mutation: Option<Mutation>,
    /// The cluster's logs, recovered, when it runs durably: a protocol
    /// may open logs of its own beside them (`WalSet::open_protocol_log`).
    pub wal: Option<&'a Arc<crate::durability::WalSet>>,
    /// In a multi-process cluster, this process's node and its peers
    /// (`None`: the embedded cluster).
    pub hosting: Option<SetupHosting<'a>>,
}

/// One call of a procedure, handed to [`Protocol::run`].
pub struct Call<'a> {
    pub shared: &'a Arc<Shared>,
    /// The coordinator's node.
    pub node: NodeId,
    pub proc: &'a Arc<PreparedProc>,
    pub args: Vec<Value>,
    /// Told once the call's outcome is settled for the client (commit,
    /// or Salt's acceptance).
    pub on_accept: Option<tokio::sync::oneshot::Sender<()>>,
    /// The client that made the call (`None`: recovery's own calls).
    pub session: Option<u64>,
}

/// How one transaction's statements run, where a protocol runs them its
/// own way (set on its [`ProcCtx`]; the engine's plain statement
/// otherwise: `ProcCtx::exec_plan`).
pub trait Statements: Send + Sync {
    /// Runs the declared statement `statement` (its plan and arguments).
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>>;

    /// The body opens a subtransaction (`ProcCtx::begin_alkaline`).
    fn begin_sub(&self, _ctx: &mut ProcCtx) -> Result<()> {
        Ok(())
    }

    /// The body ends the open subtransaction (`ProcCtx::end_alkaline`).
    fn end_sub<'a>(&'a self, _ctx: &'a mut ProcCtx) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// A protocol's own state of one transaction at its coordinator, kept in
/// the engine's `TxnState` (which tells it of the partitions the
/// transaction reaches and of the transactions it turns out to depend
/// on); the protocol reads it back with [`TxnExt::as_any_mut`].
pub trait TxnExt: Send + 'static {
    /// The transaction reached partition `p`.
    fn touched(&mut self, _p: usize) {}
    /// A statement found that the transaction depends on `txns` (their
    /// partitions said so: `Executed::after`).
    fn depends_on(&mut self, _txns: &[brine_core::TxnId]) {}
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A deliberately broken variant of a protocol's locking, for showing that
/// the isolation checker catches what it must (mutation testing). Only
/// reachable by building a `ClusterConfig` in code: no command-line flag
/// sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Read and range-read locks are released when the statement ends,
    /// whatever the isolation level (serializable becomes read committed).
    EarlyReadRelease,
    /// Write locks are released when the statement ends: uncommitted
    /// writes become visible and can be overwritten.
    EarlyWriteRelease,
    /// Salt without its saline release-order rules: a BASE transaction
    /// releases its saline locks at its end whatever it read, so an ACID
    /// transaction can read another BASE transaction's unfinished state
    /// through it (the indirect dirty read of seed 000 Fig. 3.3).
    NoSalineReleaseOrder,
    /// Callas without its nexus release order: a transaction releases its
    /// nexus locks as soon as it committed, whatever same-group
    /// transaction it depends on still holds its own, so a dependency
    /// cycle can span groups (seed 000 Fig. 4.2).
    NoNexusReleaseOrder,
    /// Salt without gated multi-partition statements: an ACID
    /// transaction's first statement that spans partitions is granted at
    /// each on its own, so it can hold one while it waits at another for
    /// an accepted BASE transaction that needs the first (bank's total:
    /// a deadlock whose victim is always the total).
    NoGate,
    /// Callas without range dependencies: a member's scan and another
    /// member's write into its range (or a scan over a row another member
    /// wrote) declare no dependency, as before range tracking, so Runtime
    /// Pipelining lets a scan see one of a transaction's writes and miss
    /// another (a phantom inside a group at serializable).
    ExactCallasDeps,
    /// Mediator without temporal fences: transactional accesses leave the
    /// partitions' clocks where they are, so a native put after a
    /// transaction's commit can be stamped below it and lost (seed 003
    /// Fig. 2a).
    NoTemporalFence,
    /// Mediator without the native-conflict check: a transaction commits
    /// over a native put to an item it read or wrote since (a lost
    /// update).
    NoNativeCheck,
    /// Elia with its token's updates applied in reverse order at each
    /// server: replicas apply two conflicting globals in different orders.
    EliaOutOfOrder,
    /// Elia running an L/G call locally when its arguments route to one
    /// server, as seed 004 does: its writes stay there while another call
    /// of the procedure runs globally over a replica without them.
    EliaLocalLG,
}

impl Mutation {
    /// Breaks `spec` as this mutation says.
    pub fn apply(self, mut spec: LockSpec) -> LockSpec {
        match self {
            Mutation::EarlyReadRelease => spec.short_reads = true,
            Mutation::EarlyWriteRelease => spec.short_writes = true,
            // Read by the protocols' own rules.
            Mutation::ExactCallasDeps
            | Mutation::NoTemporalFence
            | Mutation::NoNativeCheck
            | Mutation::EliaOutOfOrder
            | Mutation::EliaLocalLG
            | Mutation::NoSalineReleaseOrder
            | Mutation::NoNexusReleaseOrder
            | Mutation::NoGate => {}
        }
        spec
    }
}
