//! Replicated logs across processes (issue 39): every log of a durable
//! multi-process cluster (each partition's, each node's decisions) is a
//! replication group of `replicas` nodes: its home node (the one that
//! hosts the partition, or whose coordinator decides) and the next ones
//! in node order. Each member keeps its copy of the log in the directory
//! the log has at its home (`part-<p>`, `coord-<n>`) and its raft state
//! in `replicas/<log>/raft`.
//!
//! ```text
//!  node n: NodeReplicas ── one task per group it is a member of
//!    writer ─ batch ─► Propose ─► leader.propose ─► raft messages ─► peer sender
//!                                                                    (one per node,
//!    WireRequest::Raft ──► deliver ──► step ◄──────────────────────── batched)
//!    lead(log): waits until this replica leads with everything committed
//!               applied, cuts the copy there: the partition recovers from it
//! ```
//!
//! A partition is served where its log's group is led: the node whose
//! replica comes to lead it, with everything committed applied, cuts its
//! copy there and takes the partition over (`Takeover`: the node recovers
//! it from its copy, relocking what its prepared transactions hold and
//! asking their outcome, then serves it; `remote::Routes`). It stays
//! there until that node fails. A node's decision log is led by the node
//! itself while it runs (another leader hands the role back once it has
//! the whole log); while it is down, the replica that leads it answers
//! for its decisions (`book`) and has every node end what it left open.
//! A node that loses the lead of a log it writes (cut off from a quorum)
//! stops at once (`fatal`): what it had not replicated is not committed,
//! and it comes back as a follower.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use brine_core::{Error, Result, TxnId};
use brine_replication::{GroupStatus, Replica, Role};
use brine_storage::wal::{Replicas, Replicate, Waiter};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::{newest_checkpoint, LogCopy, Proposal, COMPACT_EVERY};
use crate::decision::DecisionBook;
use crate::remote::{Inquiry, PeerClient, WireRequest, WireResponse};

/// The clock of the groups' replicas across processes: elections after
/// 10 to 20 ticks without a leader (0.5 to 1 s), heartbeats every 3.
const TICK: Duration = Duration::from_millis(50);

/// A replicated log of a multi-process cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LogName {
    Partition(u32),
    Decisions(u32),
}

impl std::fmt::Display for LogName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogName::Partition(p) => write!(f, "part-{p}"),
            LogName::Decisions(n) => write!(f, "coord-{n}"),
        }
    }
}

impl LogName {
    /// The log's directory in the data directory `root`.
    pub fn dir(self, root: &Path) -> PathBuf {
        root.join(self.to_string())
    }

    pub fn log_id(self) -> u32 {
        match self {
            LogName::Partition(p) | LogName::Decisions(p) => p,
        }
    }
}

/// Where the groups' replicas are: `replicas` consecutive nodes from each
/// log's home.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub nodes: u32,
    pub partitions_per_node: u32,
    pub replicas: u32,
}

impl Layout {
    fn home(&self, log: LogName) -> u32 {
        match log {
            LogName::Partition(p) => p / self.partitions_per_node,
            LogName::Decisions(n) => n,
        }
    }

    /// The nodes holding a replica of `log`, its home first.
    pub fn members(&self, log: LogName) -> Vec<u32> {
        let home = self.home(log);
        (0..self.replicas)
            .map(|i| (home + i) % self.nodes)
            .collect()
    }

    /// The logs node `node` holds a replica of.
    fn logs_of(&self, node: u32) -> Vec<LogName> {
        let partitions = (0..self.nodes * self.partitions_per_node).map(LogName::Partition);
        let decisions = (0..self.nodes).map(LogName::Decisions);
        partitions
            .chain(decisions)
            .filter(|&l| self.members(l).contains(&node))
            .collect()
    }

    pub fn validate(&self) -> Result<()> {
        if self.replicas > self.nodes {
            return Err(Error::Config(format!(
                "{} replicas of every log need at least {} nodes (the cluster has {}): each replica is on a node of its own",
                self.replicas, self.replicas, self.nodes
            )));
        }
        Ok(())
    }
}

/// A replica's raft id: its node's number plus one (raft's 0 is "none").
fn replica_id(node: u32) -> u64 {
    u64::from(node) + 1
}

fn node_of(id: u64) -> u32 {
    (id - 1) as u32
}

/// A group's status as `brine status` shows it (nodes, not raft ids).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub log: LogName,
    pub role: String,
    pub leader: Option<u32>,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    /// At the leader: entries each other replica lacks, by node.
    pub lag: Vec<(u32, u64)>,
    /// This node stopped its replica (it lost the lead; restart it).
    pub stopped: bool,
}

impl ReplicaStatus {
    fn of(log: LogName, s: &GroupStatus) -> ReplicaStatus {
        ReplicaStatus {
            log,
            role: match s.role {
                Role::Leader => "leader",
                Role::Candidate => "candidate",
                Role::Follower => "follower",
            }
            .into(),
            leader: s.leader.map(node_of),
            term: s.term,
            commit: s.commit,
            applied: s.applied,
            lag: s.lag.iter().map(|&(id, n)| (node_of(id), n)).collect(),
            stopped: false,
        }
    }
}

enum Input {
    Raft(brine_replication::Message),
    Propose(Proposal),
    Lead(oneshot::Sender<Result<()>>),
    Status(oneshot::Sender<ReplicaStatus>),
}

/// The queues of the tasks that carry messages to each other node, by
/// its replicas' id.
type Senders = HashMap<u64, mpsc::UnboundedSender<(LogName, Vec<u8>)>>;

/// One node's replicas of every log it is a member of.
pub struct NodeReplicas {
    node: u32,
    layout: Layout,
    groups: HashMap<LogName, mpsc::UnboundedSender<Input>>,
    root: PathBuf,
    /// A client of every node, this one's included.
    clients: HashMap<u32, Arc<PeerClient>>,
    /// Partitions this node came to lead (partition, term), for the node
    /// to take over; taken once by the node (`takeovers`).
    takeovers: parking_lot::Mutex<Option<mpsc::UnboundedReceiver<(u32, u64)>>>,
    /// Decisions of other nodes whose logs this node leads while they
    /// are down, by node.
    books: Arc<parking_lot::RwLock<HashMap<u32, Arc<DecisionBook>>>>,
    /// Why the node must stop (it lost the lead of a log it writes).
    fatal: tokio::sync::watch::Sender<Option<String>>,
}

/// What the group tasks share with their node.
#[derive(Clone)]
struct GroupShared {
    node: u32,
    root: PathBuf,
    senders: Arc<Senders>,
    clients: HashMap<u32, Arc<PeerClient>>,
    takeovers: mpsc::UnboundedSender<(u32, u64)>,
    books: Arc<parking_lot::RwLock<HashMap<u32, Arc<DecisionBook>>>>,
    fatal: tokio::sync::watch::Sender<Option<String>>,
}

impl std::fmt::Debug for NodeReplicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NodeReplicas(node {}, {} logs)",
            self.node,
            self.groups.len()
        )
    }
}

/// How long `lead` waits for this node to lead a log.
const LEAD_PATIENCE: Duration = Duration::from_secs(120);

impl NodeReplicas {
    /// Opens node `node`'s replicas under `root` (its data directory) and
    /// starts their tasks on the current runtime; `clients` (one per node
    /// of the cluster, this one's included) carry their messages.
    pub fn start(
        node: u32,
        layout: Layout,
        root: &Path,
        segment_bytes: u64,
        clients: HashMap<u32, Arc<PeerClient>>,
    ) -> Result<Arc<NodeReplicas>> {
        layout.validate()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Config("replicated logs start inside a tokio runtime".into()))?;
        let mut senders = HashMap::new();
        for (&peer, client) in clients.iter().filter(|(&n, _)| n != node) {
            let (tx, rx) = mpsc::unbounded_channel();
            runtime.spawn(send_to_peer(client.clone(), rx));
            senders.insert(replica_id(peer), tx);
        }
        let (takeovers, taken) = mpsc::unbounded_channel();
        let (fatal, _) = tokio::sync::watch::channel(None);
        let shared = GroupShared {
            node,
            root: root.to_path_buf(),
            senders: Arc::new(senders),
            clients: clients.clone(),
            takeovers,
            books: Arc::default(),
            fatal: fatal.clone(),
        };
        let mut groups = HashMap::new();
        for log in layout.logs_of(node) {
            let members = layout.members(log);
            let ids: Vec<u64> = members.iter().map(|&n| replica_id(n)).collect();
            let copy = LogCopy::open(&log.dir(root), log.log_id(), segment_bytes)?;
            let raft = root.join("replicas").join(log.to_string()).join("raft");
            let replica = Replica::open(&raft, replica_id(node), &ids, copy)
                .map_err(|e| Error::Storage(format!("node {node}'s replica of {log}: {e}")))?;
            let (tx, rx) = mpsc::unbounded_channel();
            let home = replica_id(members[0]);
            runtime.spawn(run_group(log, replica, home, rx, shared.clone()));
            groups.insert(log, tx);
        }
        Ok(Arc::new(NodeReplicas {
            node,
            layout,
            groups,
            root: root.to_path_buf(),
            clients,
            takeovers: parking_lot::Mutex::new(Some(taken)),
            books: shared.books,
            fatal,
        }))
    }

    /// The node these replicas are on.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// A client of every node of the cluster, this one's included.
    pub fn clients(&self) -> HashMap<u32, Arc<PeerClient>> {
        self.clients.clone()
    }

    /// The partitions this node comes to lead, (partition, term), as it
    /// does: the node takes each over. Given once.
    pub fn takeovers(&self) -> Option<mpsc::UnboundedReceiver<(u32, u64)>> {
        self.takeovers.lock().take()
    }

    /// The node must stop, for `why`.
    pub fn stop_node(&self, why: String) {
        tracing::error!("{why}; the node stops");
        let _ = self.fatal.send(Some(why));
    }

    /// Set, with the reason, once the node must stop.
    pub fn fatal(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    /// What became of `txn` (prepared somewhere, coordinated by another
    /// node), as its decisions' leader says: the coordinator's node, or
    /// while it is down, the replica of its decision log that leads.
    /// `None` while no one can say (ask again).
    pub async fn ask_decision(&self, txn: TxnId) -> Option<Inquiry> {
        let coordinator = (txn.id >> crate::cluster::NODE_TXN_SHIFT) as u32;
        if coordinator >= self.layout.nodes {
            // A coordinator-only client's: it keeps no log.
            return Some(Inquiry::Aborted);
        }
        if let Some(book) = self.books.read().get(&coordinator) {
            return Some(book.ask(txn));
        }
        for n in self.layout.members(LogName::Decisions(coordinator)) {
            let Some(client) = self.clients.get(&n).filter(|_| n != self.node) else {
                continue;
            };
            if let Ok(WireResponse::Decision(i @ (Inquiry::Committed | Inquiry::Aborted))) =
                client.request(WireRequest::Decision { txn }).await
            {
                return Some(i);
            }
        }
        None
    }

    /// What became of `txn` if another node coordinated it: `Some(Ok)`
    /// while this node leads that node's decision log (it answers for
    /// it), `Some(Err)` otherwise; `None` for this node's own.
    pub fn decision_of_another(&self, txn: TxnId) -> Option<Result<Inquiry>> {
        let coordinator = (txn.id >> crate::cluster::NODE_TXN_SHIFT) as u32;
        if coordinator == self.node {
            return None;
        }
        Some(match self.books.read().get(&coordinator) {
            Some(book) => Ok(book.ask(txn)),
            None => Err(Error::Transport(format!(
                "node {} does not answer for node {coordinator}'s decisions",
                self.node
            ))),
        })
    }

    fn group(&self, log: LogName) -> Result<&mpsc::UnboundedSender<Input>> {
        self.groups
            .get(&log)
            .ok_or_else(|| Error::Config(format!("node {} holds no replica of {log}", self.node)))
    }

    /// Messages from another node's replicas (`WireRequest::Raft`).
    pub fn deliver(&self, msgs: Vec<(LogName, Vec<u8>)>) -> Result<()> {
        for (log, bytes) in msgs {
            let m = brine_replication::decode_message(&bytes)
                .map_err(|e| Error::Transport(e.to_string()))?;
            // A group that stopped takes nothing more.
            let _ = self.group(log)?.send(Input::Raft(m));
        }
        Ok(())
    }

    /// Waits until this node leads `log` with everything committed
    /// applied, then cuts its copy there: what it holds is exactly what
    /// the group committed, for the partition (or coordinator) to recover
    /// from and go on writing.
    pub async fn lead(&self, log: LogName) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.group(log)?.send(Input::Lead(tx)).map_err(|_| {
            Error::Storage(format!("node {}'s replica of {log} stopped", self.node))
        })?;
        match tokio::time::timeout(LEAD_PATIENCE, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Storage(format!(
                "node {}'s replica of {log} stopped",
                self.node
            ))),
            Err(_) => Err(Error::Transport(format!(
                "node {} could not lead its log {log} within {} s: a majority of its replicas ({} nodes) must be running",
                self.node,
                LEAD_PATIENCE.as_secs(),
                self.groups.len()
            ))),
        }
    }

    /// The handle a log's writer hands its batches to (after
    /// [`NodeReplicas::lead`]). A restarted log goes on from the
    /// checkpoint its recovery wrote: that is the first entry proposed,
    /// so every copy goes on from there.
    pub fn replicas(&self, log: LogName) -> Result<Replicas> {
        let tx = self.group(log)?.clone();
        if let Some(first) = newest_checkpoint(&log.dir(&self.root))? {
            let _ = tx.send(Input::Propose(first));
        }
        Ok(Replicas(Arc::new(GroupInput(tx))))
    }

    /// Every group's status at this node.
    pub async fn status(&self) -> Vec<ReplicaStatus> {
        let mut out = Vec::new();
        let mut logs: Vec<&LogName> = self.groups.keys().collect();
        logs.sort();
        for log in logs {
            let (tx, rx) = oneshot::channel();
            let sent = self.groups[log].send(Input::Status(tx)).is_ok();
            match rx.await {
                Ok(s) if sent => out.push(s),
                _ => out.push(ReplicaStatus {
                    log: *log,
                    role: "stopped".into(),
                    leader: None,
                    term: 0,
                    commit: 0,
                    applied: 0,
                    lag: Vec::new(),
                    stopped: true,
                }),
            }
        }
        out
    }
}

/// A log's writer's side of its group at this node.
struct GroupInput(mpsc::UnboundedSender<Input>);

impl Replicate for GroupInput {
    fn replicate(&self, batch: Vec<u8>, _end: u64, done: Waiter) {
        self.send(Proposal::batch(&batch, done));
    }

    fn checkpoint(&self, _lsn: u64, bytes: Vec<u8>, done: Waiter) {
        self.send(Proposal::checkpoint(&bytes, Some(done)));
    }
}

impl GroupInput {
    fn send(&self, p: Proposal) {
        if let Err(mpsc::error::SendError(Input::Propose(p))) = self.0.send(Input::Propose(p)) {
            p.fail("this node's replica of the log stopped (it lost the lead): restart the node");
        }
    }
}

/// Carries the messages of this node's replicas to one peer node, as many
/// as are waiting in one request.
async fn send_to_peer(
    client: Arc<PeerClient>,
    mut rx: mpsc::UnboundedReceiver<(LogName, Vec<u8>)>,
) {
    while let Some(first) = rx.recv().await {
        let mut msgs = vec![first];
        while let Ok(m) = rx.try_recv() {
            msgs.push(m);
        }
        // Lost messages are raft's to repeat.
        let _ = client.request(WireRequest::Raft { msgs }).await;
    }
}

/// One group's replica at this node.
async fn run_group(
    log: LogName,
    mut replica: Replica<LogCopy>,
    home: u64,
    mut rx: mpsc::UnboundedReceiver<Input>,
    shared: GroupShared,
) {
    let me = replica.id();
    let waiting = replica.machine().waiting.clone();
    if me == home {
        let _ = replica.campaign();
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut leads: Vec<oneshot::Sender<Result<()>>> = Vec::new();
    let mut out = Vec::new();
    let mut compacted_at = replica.applied();
    // A decision log of another node this replica answers for.
    let mut answering = false;
    loop {
        tokio::select! {
            input = rx.recv() => match input {
                None => return,
                Some(Input::Raft(m)) => {
                    // A message of a term gone by is refused: raft says.
                    let _ = replica.step(m);
                }
                Some(Input::Propose(p)) => {
                    if !(replica.machine().leading && replica.is_leader()) {
                        p.fail(&format!("node {} does not lead the log {log}", node_of(me)));
                    } else {
                        match replica.propose(p.data) {
                            Ok(index) => {
                                if let Some(done) = p.done {
                                    waiting.lock().expect("waiting").insert(index, done);
                                }
                            }
                            Err(e) => {
                                if let Some(done) = p.done {
                                    done(Err(Error::Storage(format!("replicating {log}: {e}"))));
                                }
                            }
                        }
                    }
                }
                Some(Input::Lead(tx)) => leads.push(tx),
                Some(Input::Status(tx)) => {
                    let _ = tx.send(ReplicaStatus::of(log, &replica.status()));
                }
            },
            _ = tick.tick() => {
                replica.tick();
                // A node's decision log is led by the node while it runs.
                let decisions = matches!(log, LogName::Decisions(_));
                if decisions && me != home && replica.is_leader() && replica.has_whole_log(home) {
                    replica.transfer_leader(home);
                }
            }
        }
        if let Err(e) = replica.ready(&mut out) {
            let why = format!("node {}'s replica of {log}: {e}", node_of(me));
            tracing::error!("{why}; the node stops");
            let _ = shared.fatal.send(Some(why));
            return;
        }
        for m in out.drain(..) {
            if let (Some(tx), Ok(bytes)) = (
                shared.senders.get(&m.to),
                brine_replication::encode_message(&m),
            ) {
                let _ = tx.send((log, bytes));
            }
        }
        if replica.machine().leading && !replica.is_leader() {
            // Cut off from a quorum, or another took over: what waits
            // here may or may not have committed, and this node's writer
            // must not go on. The node stops; it comes back a follower.
            let failed = std::mem::take(&mut *waiting.lock().expect("waiting"));
            for done in failed.into_values() {
                done(Err(Error::Transport(format!(
                    "node {} lost the lead of the log {log}: outcome unknown",
                    node_of(me)
                ))));
            }
            let why = format!(
                "node {} lost the lead of the log {log} it writes",
                node_of(me)
            );
            tracing::error!("{why}; the node stops");
            let _ = shared.fatal.send(Some(why));
            return;
        }
        if replica.leads_caught_up() {
            match log {
                LogName::Partition(p) if !replica.machine().leading => {
                    match replica.machine_mut().take_the_lead() {
                        Ok(()) => {
                            tracing::info!(partition = p, term = replica.status().term, "node {} leads the log of partition {p}: it takes the partition over", node_of(me));
                            let _ = shared.takeovers.send((p, replica.status().term));
                        }
                        Err(e) => {
                            let why =
                                format!("node {} cannot take partition {p} over: {e}", node_of(me));
                            let _ = shared.fatal.send(Some(why));
                            return;
                        }
                    }
                }
                LogName::Decisions(_) if !leads.is_empty() => {
                    let settled = replica.machine_mut().take_the_lead();
                    for tx in leads.drain(..) {
                        let _ = tx.send(settled.clone());
                    }
                }
                LogName::Decisions(n) if me != home && !answering => {
                    answering = true;
                    answer_for(n, &shared).await;
                }
                _ => {}
            }
        }
        if answering && !replica.is_leader() {
            answering = false;
            if let LogName::Decisions(n) = log {
                shared.books.write().remove(&n);
            }
        }
        if replica.applied() >= compacted_at + COMPACT_EVERY {
            compacted_at = replica.applied();
            let _ = replica.compact();
        }
    }
}

/// This node leads node `n`'s decision log while `n` is down: it answers
/// for `n`'s decisions from its copy, and every node ends what `n` left
/// open (its prepared transactions are decided by those answers).
async fn answer_for(n: u32, shared: &GroupShared) {
    match crate::durability::node_decisions(&shared.root, n) {
        Ok(committed) => {
            tracing::warn!(
                node = n,
                decisions = committed.len(),
                "node {} answers for node {n}'s decisions while it is down",
                shared.node
            );
            shared
                .books
                .write()
                .insert(n, Arc::new(DecisionBook::recovered(committed)));
        }
        Err(e) => {
            tracing::error!(
                node = n,
                "reading node {n}'s decisions from this node's copy: {e}"
            );
            return;
        }
    }
    for client in shared.clients.values() {
        let client = client.clone();
        tokio::spawn(async move {
            let _ = client.request(WireRequest::PeerRestarted { node: n }).await;
        });
    }
}
