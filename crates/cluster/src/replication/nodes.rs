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
        if self.nodes > 256 {
            return Err(Error::Config(format!(
                "replicated logs run on at most 256 nodes (replica ids carry the node in a byte); the cluster has {}",
                self.nodes
            )));
        }
        if self.replicas > self.nodes {
            return Err(Error::Config(format!(
                "{} replicas of every log need at least {} nodes (the cluster has {}): each replica is on a node of its own",
                self.replicas, self.replicas, self.nodes
            )));
        }
        Ok(())
    }
}

/// A replica's raft id: its node's number plus one (raft's 0 is "none"),
/// plus 256 for each generation of the node's replicas (a node whose
/// disk was lost comes back as a new replica: raft forbids a replica to
/// forget its votes and log under the same id).
fn replica_id(node: u32, generation: u64) -> u64 {
    generation * 256 + u64::from(node) + 1
}

fn node_of(id: u64) -> u32 {
    (id.saturating_sub(1) % 256) as u32
}

fn generation_of(id: u64) -> u64 {
    id.saturating_sub(1) / 256
}

/// How many ticks a new group's replicas other than its home's wait for
/// the home to lead before they may (3 s).
const HOME_HEAD_START_TICKS: u32 = 60;

/// How long a node without replica state waits for a peer to say whether
/// the cluster is new or its own disk was lost.
const GENERATION_PATIENCE: Duration = Duration::from_secs(60);

/// The replicas' generation a node starts with.
#[derive(Clone, Copy, Debug)]
pub struct Generation {
    pub number: u64,
    /// A new generation of a node whose disk was lost: it joins every
    /// group in place of its old replicas.
    pub joining: bool,
    /// The state is new in this run (a new cluster, or a lost disk).
    pub new: bool,
}

/// The generation of node `node`'s replicas under `root` (kept in
/// `replicas/generation`). A node without replica state asks its peers
/// whether it ran before: a peer that ran before its own start knows it
/// from its groups' replicas, one new in this run from having heard from
/// it. If it did, its disk was lost, and it comes back as a new
/// generation, added to each group in place of its old replica; if not,
/// the cluster is new (or it is a new cluster's late node).
pub async fn generation(
    node: u32,
    root: &Path,
    clients: &HashMap<u32, Arc<PeerClient>>,
) -> Result<Generation> {
    let dir = root.join("replicas");
    let path = dir.join("generation");
    let io =
        |what: &str, e: std::io::Error| Error::Storage(format!("{what} {}: {e}", path.display()));
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let g = text.trim().parse().map_err(|_| Error::Corrupt {
                file: path.display().to_string(),
                offset: 0,
                reason: "not a number".into(),
            })?;
            return Ok(Generation {
                number: g,
                joining: false,
                new: false,
            });
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("reading", e)),
        Err(_) => {}
    }
    let started = std::time::Instant::now();
    let (generation, joining) = loop {
        let mut answered = false;
        let mut known: Option<u64> = None;
        for (&n, client) in clients.iter().filter(|(&n, _)| n != node) {
            if let Ok(WireResponse::Generation(g)) =
                client.request(WireRequest::Generation { node }).await
            {
                tracing::debug!(peer = n, ?g, "replica generation of node {node}");
                answered = true;
                known = known.max(g);
            }
        }
        if answered {
            break match known {
                Some(g) => (g + 1, true),
                None => (0, false),
            };
        }
        if started.elapsed() > GENERATION_PATIENCE {
            return Err(Error::Transport(format!(
                "node {node} has no replica state and no peer answered for {} s: it cannot tell a new cluster from a lost disk; start its peers",
                GENERATION_PATIENCE.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if joining {
        tracing::warn!("node {node} lost its replicas' state: it joins every group again as generation {generation}");
    }
    std::fs::create_dir_all(&dir).map_err(|e| io("creating", e))?;
    std::fs::write(&path, format!("{generation}\n")).map_err(|e| io("writing", e))?;
    Ok(Generation {
        number: generation,
        joining,
        new: true,
    })
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
    /// The voting replicas: (node, generation).
    #[serde(default)]
    pub voters: Vec<(u32, u64)>,
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
            voters: s
                .voters
                .iter()
                .map(|&id| (node_of(id), generation_of(id)))
                .collect(),
            stopped: false,
        }
    }
}

enum Input {
    Raft(brine_replication::Message),
    /// A node's new replica asks to replace its old one (`NodeReplicas::join`).
    Join(u64),
    Propose(Proposal),
    Lead(oneshot::Sender<Result<()>>),
    Status(oneshot::Sender<ReplicaStatus>),
}

/// The queues of the tasks that carry messages to each other node, by
/// node: one for small messages (heartbeats, votes, appends) and one for
/// large ones (a checkpoint proposed at a takeover, an image), each
/// its own stream of requests on the peer's connection, so a large one
/// sent in parts never holds back another group's heartbeats past an
/// election timeout.
type Senders = HashMap<u32, [mpsc::UnboundedSender<(LogName, Vec<u8>)>; 2]>;

/// A message this large goes in the large messages' queue ([`Senders`]).
const LARGE_MESSAGE: usize = 64 * 1024;

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
    /// Its replica state is new in this run.
    new_state: bool,
    /// The newest generation of each node whose replicas sent this one a
    /// message in this run.
    heard: parking_lot::Mutex<HashMap<u32, u64>>,
    /// Messages arriving in parts (`WireRequest::RaftPart`).
    parts: super::parts::Assembly,
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
        generation: Generation,
    ) -> Result<Arc<NodeReplicas>> {
        layout.validate()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Config("replicated logs start inside a tokio runtime".into()))?;
        let mut senders = HashMap::new();
        // The size of a request's raft messages: `BRINE_RAFT_PART_BYTES`
        // (tests send images in small parts), else `PART_BYTES`.
        let part_bytes = std::env::var("BRINE_RAFT_PART_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(super::parts::PART_BYTES);
        for (&peer, client) in clients.iter().filter(|(&n, _)| n != node) {
            let lane = || {
                let (tx, rx) = mpsc::unbounded_channel();
                runtime.spawn(send_to_peer(client.clone(), rx, part_bytes));
                tx
            };
            senders.insert(peer, [lane(), lane()]);
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
            // A new cluster's replicas are all of generation 0; a joining
            // one starts with none and is added by the group's leader.
            let ids: Vec<u64> = match generation.joining {
                true => Vec::new(),
                false => members.iter().map(|&n| replica_id(n, 0)).collect(),
            };
            let copy = LogCopy::open(&log.dir(root), log.log_id(), segment_bytes)?;
            let raft = root.join("replicas").join(log.to_string()).join("raft");
            let replica = Replica::open(&raft, replica_id(node, generation.number), &ids, copy)
                .map_err(|e| Error::Storage(format!("node {node}'s replica of {log}: {e}")))?;
            let (tx, rx) = mpsc::unbounded_channel();
            runtime.spawn(run_group(log, replica, members, rx, shared.clone()));
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
            new_state: generation.new,
            heard: Default::default(),
            parts: Default::default(),
        }))
    }

    /// Node `node`'s replica `id` asks to join `log`'s group in place of
    /// its old one (its leader does it).
    pub fn join(&self, log: LogName, id: u64) -> Result<()> {
        // Only a replica of a node the layout puts in this group.
        if id == 0 || !self.layout.members(log).contains(&node_of(id)) {
            return Err(Error::Config(format!(
                "replica {id} is not of a node that holds {log} (nodes {:?})",
                self.layout.members(log)
            )));
        }
        let _ = self.group(log)?.send(Input::Join(id));
        Ok(())
    }

    /// The newest generation of node `node`'s replicas in this node's
    /// groups, if this node ran before this start (`None`: its state is
    /// new too: so is the cluster).
    pub async fn generation_of(&self, node: u32) -> Option<u64> {
        if self.new_state {
            // New in this run: the node ran before only if this one heard
            // from it (a new cluster's late node has not run yet).
            return self.heard.lock().get(&node).copied();
        }
        let mut newest = None;
        for s in self.status().await {
            for &(n, g) in &s.voters {
                if n == node {
                    newest = newest.max(Some(g));
                }
            }
        }
        newest
    }

    /// Fault tests: cuts this node's replicas off from nodes `peers` for
    /// `d` (their messages to them fail, as a network partition's would).
    pub fn cut(&self, peers: &[u32], d: Duration) {
        for p in peers {
            if let Some(c) = self.clients.get(p) {
                c.cut_for(d);
            }
        }
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
            if m.from != 0 {
                let mut heard = self.heard.lock();
                let g = heard.entry(node_of(m.from)).or_default();
                *g = (*g).max(generation_of(m.from));
            }
            // A group that stopped takes nothing more.
            let _ = self.group(log)?.send(Input::Raft(m));
        }
        Ok(())
    }

    /// Part of a message from another node's replicas too large for one
    /// request (`WireRequest::RaftPart`): delivered once every part came.
    pub fn deliver_part(&self, part: super::Part) -> Result<()> {
        let log = part.log;
        match self.parts.add(part)? {
            Some(whole) => self.deliver(vec![(log, whole)]),
            None => Ok(()),
        }
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
                    voters: Vec::new(),
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
    part_bytes: usize,
) {
    while let Some(first) = rx.recv().await {
        let mut msgs = vec![first];
        while let Ok(m) = rx.try_recv() {
            msgs.push(m);
        }
        // In requests of at most `part_bytes` (a larger message in parts,
        // in order). Lost messages are raft's to repeat.
        for req in super::parts::requests(msgs, part_bytes, rand::random) {
            let _ = client.request(req).await;
        }
    }
}

/// One group's replica at this node.
async fn run_group(
    log: LogName,
    mut replica: Replica<LogCopy>,
    members: Vec<u32>,
    mut rx: mpsc::UnboundedReceiver<Input>,
    shared: GroupShared,
) {
    let me = replica.id();
    let waiting = replica.machine().waiting.clone();
    let home_node = members[0];
    // A replica not yet among the voters (a new generation) joins.
    let mut joined = replica.status().voters.contains(&me);
    if joined && node_of(me) == home_node {
        let _ = replica.campaign();
    }
    // A new group's other replicas give its home a head start (processes
    // of a new cluster come up at different times): the log starts where
    // its partition (or coordinator) does.
    let mut head_start = if node_of(me) != home_node && replica.status().term == 0 {
        HOME_HEAD_START_TICKS
    } else {
        0
    };
    let mut ticks = 0u64;
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
                    // One for this node's replica of an older generation
                    // is not this one's.
                    if m.to == me {
                        let _ = replica.step(m);
                    }
                }
                Some(Input::Join(id)) => {
                    let voters = replica.status().voters;
                    if replica.is_leader() && !voters.contains(&id) {
                        // One change at a time: the old replica goes,
                        // then the new one comes (raft-rs drops a change
                        // proposed while one is pending; it is asked again).
                        let _ = match voters.iter().find(|&&v| node_of(v) == node_of(id)) {
                            Some(&old) => replica.propose_remove(old),
                            None => {
                                // The new replica starts from an image (it
                                // knows no voters to replay the log from):
                                // the log is compacted first.
                                let _ = replica.compact();
                                replica.propose_add(id)
                            }
                        };
                    }
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
                ticks += 1;
                if head_start > 0 && replica.status().leader.is_none() {
                    head_start -= 1;
                } else {
                    head_start = 0;
                    replica.tick();
                }
                // A node's decision log is led by the node while it runs.
                let decisions = matches!(log, LogName::Decisions(_));
                if decisions && node_of(me) != home_node && replica.is_leader() {
                    let voters = replica.status().voters;
                    if let Some(&home) = voters.iter().find(|&&v| node_of(v) == home_node) {
                        if replica.has_whole_log(home) {
                            replica.transfer_leader(home);
                        }
                    }
                }
                if !joined && ticks.is_multiple_of(10) {
                    joined = replica.status().voters.contains(&me);
                    if !joined {
                        ask_to_join(log, me, &members, &shared);
                    }
                }
            }
        }
        if let Err(e) = super::persist(&mut replica, &mut out) {
            let why = format!("node {}'s replica of {log}: {e}", node_of(me));
            tracing::error!("{why}; the node stops");
            let _ = shared.fatal.send(Some(why));
            return;
        }
        for m in out.drain(..) {
            if let (Some(lanes), Ok(bytes)) = (
                shared.senders.get(&node_of(m.to)),
                brine_replication::encode_message(&m),
            ) {
                let _ = lanes[usize::from(bytes.len() > LARGE_MESSAGE)].send((log, bytes));
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
                LogName::Decisions(n) if node_of(me) != home_node && !answering => {
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

/// Asks every other member of `log`'s group to let replica `me` (a new
/// generation of this node's) in: their leader replaces the old one.
fn ask_to_join(log: LogName, me: u64, members: &[u32], shared: &GroupShared) {
    for n in members.iter().filter(|&&n| n != shared.node) {
        if let Some(client) = shared.clients.get(n) {
            let client = client.clone();
            tokio::spawn(async move {
                let _ = client.request(WireRequest::Join { log, id: me }).await;
            });
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
