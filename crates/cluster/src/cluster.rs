//! Starting an embedded cluster and talking to it.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use brine_core::schema::partition_of;
use brine_core::{Catalog, Error, NodeId, PartitionId, Result, Row, TableId, TxnId};
use brine_lock::{DeadlockPolicy, LockConfig};
use brine_sql::Plan;
use parking_lot::RwLock;
use tokio::sync::mpsc;

use crate::client::Client;
use crate::coordinator::{PartitionRef, RetryPolicy, Shared};
use crate::decision::DecisionBook;
use crate::durability::{DurabilityConfig, DurabilityMode, NodeScope, WalSet};
use crate::history::HistorySink;
use crate::link::{Link, LinkConfig};
use crate::message::{PartitionMsg, PartitionStatus};
use crate::partition::{PartitionCounters, PartitionParts};
use crate::procedure::{Application, PreparedProc};
use crate::protocol::{Isolation, Layout, Mutation, Protocol, Setup};
use crate::remote::{NodeService, PeerClient};
use crate::stats::{ClusterCounters, Kept, StatsSnapshot};
use brine_check::history::FORMAT_VERSION;
use brine_check::Header;

/// Where coordinators run relative to the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Coordinators on a node of their own: every statement and every commit
    /// phase crosses the link, as in the sources' deployments.
    #[default]
    Separate,
    /// Each client's coordinator sits on a data node (round-robin); messages
    /// to that node's partitions are local.
    Colocated,
}

impl std::str::FromStr for Placement {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "separate" => Ok(Placement::Separate),
            "colocated" => Ok(Placement::Colocated),
            o => Err(Error::Config(format!(
                "unknown placement `{o}` (expected separate or colocated)"
            ))),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub nodes: u32,
    pub partitions_per_node: u32,
    pub placement: Placement,
    pub link: LinkConfig,
    /// Seeds the link's jitter (and workloads that ask the cluster for it).
    pub seed: u64,
    pub protocol: String,
    pub isolation: Isolation,
    pub lock: LockConfig,
    pub retry: RetryPolicy,
    /// Record the run's history (every transaction's reads and writes with
    /// versions) to this file, for `brine check`.
    pub history: Option<PathBuf>,
    /// A deliberately broken locking variant, for validating the isolation
    /// checker; `None` in every real run.
    pub mutation: Option<Mutation>,
    /// Write-ahead logging, checkpoints and recovery (default: in memory).
    pub durability: DurabilityConfig,
    /// Callas: which procedures run in which group (protocol `callas`
    /// only; `None`: every procedure in one 2PL group).
    pub grouping: Option<crate::protocols::callas::Grouping>,
    /// Callas: when a Runtime Pipelining group goes rollback-safe.
    pub safe_mode: crate::protocols::callas::SafeModeConfig,
    /// Callas, Runtime Pipelining: a piece's wait for the rank of one
    /// transaction it follows is held at the partitions its statements go
    /// to (`LockSpec::after_rank`), which let them go as soon as that
    /// transaction ends its piece there; off: the coordinator waits before
    /// sending them (the follower's statements leave only once the
    /// coordinator has heard that the piece ended).
    pub rank_holds: bool,
    /// Mediator: snapshot lifetime, the helper's patience, the TSO's
    /// write-set filters (protocols `mediator`, `mediator-ser`, `omid`).
    pub mediator: crate::protocols::mediator::MediatorOptions,
    /// Elia's routes (protocol `elia`).
    pub elia: crate::protocols::elia::EliaOptions,
    /// Per-pair delays between the nodes (and between a client and the
    /// server of its own site), overriding `link` where it has them.
    pub topology: Option<Arc<crate::topology::Topology>>,
    /// The link's clock: its own thread (benchmarks), or the runtime's
    /// (with a paused single-threaded runtime, a run replays from `seed`).
    pub link_clock: crate::link::LinkClock,
    /// Faults the embedded link injects (lost messages, partitions),
    /// seeded by `seed`.
    pub faults: crate::link::FaultConfig,
    /// Across processes: the addresses of the protocol's services that run
    /// in processes of their own (`Protocol::own_processes`), by name.
    pub services: std::collections::BTreeMap<String, String>,
    /// This process hosts that service of the protocol (`brine server
    /// --service NAME`) and no partition.
    pub hosts_service: Option<String>,
    /// Where such a service keeps its state when the cluster is durable
    /// (Mediator's TSO: its clock's lease); `None`: it keeps none.
    pub service_dir: Option<std::path::PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 2,
            partitions_per_node: 1,
            placement: Placement::Separate,
            link: LinkConfig::default(),
            seed: 1,
            protocol: "acid".into(),
            isolation: Isolation::Serializable,
            lock: LockConfig {
                policy: DeadlockPolicy::WaitDie,
                wait_timeout: Duration::from_millis(500),
                max_waiters_per_key: 4096,
                max_deps_per_txn: 4096,
            },
            retry: RetryPolicy::default(),
            history: None,
            mutation: None,
            durability: DurabilityConfig::default(),
            grouping: None,
            safe_mode: Default::default(),
            rank_holds: true,
            mediator: Default::default(),
            elia: Default::default(),
            topology: None,
            link_clock: Default::default(),
            faults: Default::default(),
            services: Default::default(),
            hosts_service: None,
            service_dir: None,
        }
    }
}

impl ClusterConfig {
    pub fn total_partitions(&self) -> u32 {
        self.nodes * self.partitions_per_node
    }

    pub fn validate(&self) -> Result<()> {
        self.durability.validate()?;
        if self.nodes == 0 || self.partitions_per_node == 0 {
            return Err(Error::Config(
                "a cluster needs at least one node and one partition per node".into(),
            ));
        }
        if self.total_partitions() > 4096 {
            return Err(Error::Config("at most 4096 partitions".into()));
        }
        if self.retry.max_attempts == 0 {
            return Err(Error::Config("max attempts must be at least 1".into()));
        }
        Ok(())
    }
}

impl fmt::Display for ClusterConfig {
    /// The topology line printed with every result.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} nodes x {} partitions, coordinators {}, link {} us one-way (+{} us jitter), protocol {}, {}, deadlock {:?}",
            self.nodes,
            self.partitions_per_node,
            match self.placement {
                Placement::Separate => "on their own node",
                Placement::Colocated => "co-located",
            },
            self.link.delay_us,
            self.link.jitter_us,
            self.protocol,
            self.isolation,
            self.lock.policy,
        )?;
        if self.durability.mode != DurabilityMode::None {
            write!(f, ", durability {}", self.durability.mode)?;
        }
        if let Some(t) = &self.topology {
            write!(f, ", one-way delays by site: {}", t.describe(self.nodes))?;
        }
        Ok(())
    }
}

/// The run configuration written into a history's header.
fn history_config(
    c: &ClusterConfig,
    catalog: &Catalog,
    protocol: &dyn Protocol,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    // Operations name columns by position; the checker names them back.
    let columns: serde_json::Map<String, serde_json::Value> = catalog
        .tables()
        .iter()
        .map(|t| {
            let names = t.columns.iter().map(|c| c.name.clone().into()).collect();
            (t.name.clone(), serde_json::Value::Array(names))
        })
        .collect();
    m.insert("columns".into(), columns.into());
    m.insert("nodes".into(), c.nodes.into());
    m.insert("partitions_per_node".into(), c.partitions_per_node.into());
    m.insert("link_delay_us".into(), c.link.delay_us.into());
    m.insert("link_jitter_us".into(), c.link.jitter_us.into());
    m.insert("seed".into(), c.seed.into());
    m.insert("topology".into(), c.to_string().into());
    if let Some(mutation) = c.mutation {
        m.insert("mutation".into(), format!("{mutation:?}").into());
    }
    protocol.describe(&mut m);
    m
}

/// A running embedded cluster. Dropping every handle stops the partitions.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) shared: Arc<Shared>,
    config: Arc<ClusterConfig>,
    pub(crate) procedures: Arc<HashMap<String, Arc<PreparedProc>>>,
    /// This process's partitions' counters (a partition taken over with
    /// replicated logs adds its own).
    partition_counters: Arc<parking_lot::RwLock<Vec<Arc<PartitionCounters>>>>,
    adhoc: Arc<RwLock<HashMap<String, Arc<Plan>>>>,
    next_client: Arc<std::sync::atomic::AtomicU32>,
    /// The node this process is, in a multi-process cluster; its clients'
    /// calls are coordinated here.
    home: Option<NodeId>,
    /// A coordinator-only process's clients send their calls to these
    /// nodes instead (client `c` to node `c % n`; [`Cluster::calls_at_nodes`]).
    pub(crate) call_nodes: Option<Arc<Vec<Arc<PeerClient>>>>,
}

/// Lock figures of one table (see `PartitionCounters`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableLocks {
    pub table: String,
    /// Statements that waited for a lock, and how long in all.
    pub waits: u64,
    pub wait_us: u64,
    /// Lock holds ended (one per transaction and table per partition),
    /// and how long they lasted in all.
    pub holds: u64,
    pub hold_us: u64,
}

/// How this process takes part in a multi-process cluster.
struct Hosting {
    /// The node it is (or, for a coordinator-only client, an id above
    /// every node's).
    node: NodeId,
    /// One client per node it reaches over TCP.
    peers: HashMap<NodeId, Arc<PeerClient>>,
    /// A durable node's commit decisions (for its peers' recoveries).
    book: Option<Arc<DecisionBook>>,
}

/// Transaction ids of node n start at `n << NODE_TXN_SHIFT` (above the WAL
/// epoch's bits), so ids from different processes never collide.
pub(crate) const NODE_TXN_SHIFT: u32 = 56;

/// At most this many distinct ad-hoc statements are kept prepared.
const ADHOC_CACHE_MAX: usize = 10_000;

impl Cluster {
    /// Starts the partitions of `config` as tasks of the current tokio
    /// runtime and prepares `app`'s schema and procedures.
    pub fn start(config: ClusterConfig, app: Application) -> Result<Cluster> {
        Ok(Cluster::start_hosting(config, app, None)?.0)
    }

    /// Starts node `node` of a multi-process cluster: this process hosts
    /// that node's partitions (served to peers by the returned
    /// [`NodeService`]) and reaches every other partition through
    /// `peers` (one client per other node). Calls made through this
    /// cluster's clients are coordinated here. The link is the real
    /// network: `config.link` must not add a delay.
    pub fn start_node(
        config: ClusterConfig,
        app: Application,
        node: NodeId,
        peers: HashMap<NodeId, Arc<PeerClient>>,
        book: Option<Arc<DecisionBook>>,
    ) -> Result<(Cluster, NodeService)> {
        if node.0 >= config.nodes {
            return Err(Error::Config(format!(
                "node {} is not in a cluster of {} nodes",
                node.0, config.nodes
            )));
        }
        if config.link.delay_us != 0 || config.link.jitter_us != 0 {
            return Err(Error::Config(
                "a multi-process node runs over the real network: the simulated link delay must be 0".into(),
            ));
        }
        let wal = config.durability.mode == DurabilityMode::Wal;
        if wal && book.is_none() {
            return Err(Error::Config(
                "a durable multi-process node needs its decision book (durability::node_decisions)"
                    .into(),
            ));
        }
        let names: Vec<&str> = app.procedures.iter().map(|d| d.name.as_str()).collect();
        crate::protocols::build(&config.protocol, &config, &names)?.check_deployment(true, wal)?;
        for n in (0..config.nodes).map(NodeId).filter(|&n| n != node) {
            if !peers.contains_key(&n) {
                return Err(Error::Config(format!("no address for peer node {}", n.0)));
            }
        }
        let (cluster, service) =
            Cluster::start_hosting(config, app, Some(Hosting { node, peers, book }))?;
        let service =
            service.ok_or_else(|| Error::Internal("node started without its service".into()))?;
        Ok((cluster, service))
    }

    /// Runs a service of the protocol's own in this process (`brine server
    /// --service NAME`: Mediator's TSO), for a multi-process cluster whose
    /// nodes `peers` reach. Like [`Cluster::connect`] it hosts no
    /// partition; `config.hosts_service` names the service.
    pub fn start_service(
        config: ClusterConfig,
        app: Application,
        peers: HashMap<NodeId, Arc<PeerClient>>,
    ) -> Result<Cluster> {
        let service = config
            .hosts_service
            .clone()
            .ok_or_else(|| Error::Config("a service process needs the service it hosts".into()))?;
        let names: Vec<&str> = app.procedures.iter().map(|d| d.name.as_str()).collect();
        let protocol = crate::protocols::build(&config.protocol, &config, &names)?;
        if !protocol.own_processes().contains(&service.as_str()) {
            return Err(Error::Config(format!(
                "protocol `{}` has no service `{service}` (it has: {:?})",
                config.protocol,
                protocol.own_processes()
            )));
        }
        let here = NodeId(config.nodes + 1);
        Cluster::start_without_partitions(config, app, here, peers)
    }

    /// A process of a multi-process cluster that hosts no partition (a
    /// coordinator-only client, a service), as node `here`.
    fn start_without_partitions(
        config: ClusterConfig,
        app: Application,
        here: NodeId,
        peers: HashMap<NodeId, Arc<PeerClient>>,
    ) -> Result<Cluster> {
        let hosting = Hosting {
            node: here,
            peers,
            book: None,
        };
        Ok(Cluster::start_hosting(config, app, Some(hosting))?.0)
    }

    /// This coordinator-only process's clients send each call to a node of
    /// `nodes` (client `c` to node `c % n`), whose coordinator runs it:
    /// with a durable cluster, the node logs what its protocol needs to
    /// finish a call a crash interrupted, which this process does not.
    pub fn calls_at_nodes(mut self, nodes: Vec<Arc<PeerClient>>) -> Cluster {
        self.call_nodes = (!nodes.is_empty()).then(|| Arc::new(nodes));
        self
    }

    /// Joins a running multi-process cluster as a coordinator only (as the
    /// sources' clients did): this process hosts no partition, reaches
    /// every partition through `peers` (one client per node), and
    /// coordinates its own calls, loads and interactive transactions. Its
    /// transaction ids come from a range drawn at random, so concurrent
    /// clients' ids do not collide (a 1 in ~250 chance per pair that they
    /// share one; the nodes' own ranges are always distinct).
    pub fn connect(
        config: ClusterConfig,
        app: Application,
        peers: HashMap<NodeId, Arc<PeerClient>>,
    ) -> Result<Cluster> {
        // Above the nodes and the service processes' id (nodes + 1).
        let spare = 254u32.saturating_sub(config.nodes).max(1);
        let tag = config.nodes + 2 + rand::random::<u32>() % spare;
        let here = NodeId(tag.min(255));
        for n in (0..config.nodes).map(NodeId) {
            if !peers.contains_key(&n) {
                return Err(Error::Config(format!("no address for node {}", n.0)));
            }
        }
        Cluster::start_without_partitions(config, app, here, peers)
    }

    fn start_hosting(
        config: ClusterConfig,
        app: Application,
        hosting: Option<Hosting>,
    ) -> Result<(Cluster, Option<NodeService>)> {
        config.validate()?;
        let hosting_node = hosting.as_ref().map(|h| h.node);
        let names: Vec<&str> = app.procedures.iter().map(|d| d.name.as_str()).collect();
        let protocol = crate::protocols::build(&config.protocol, &config, &names)?;
        let catalog = Arc::new(brine_sql::parse_schema(&format!(
            "{}\n{}",
            app.ddl,
            protocol.extra_ddl()
        ))?);
        protocol.check_deployment(
            hosting.is_some(),
            config.durability.mode == DurabilityMode::Wal,
        )?;
        if config.durability.across.is_some() {
            protocol.check_failover()?;
        }
        // A durable node (it has a decision book) replicates through its
        // replicas; a coordinator-only process just follows the routes.
        if hosting.as_ref().is_some_and(|h| h.book.is_some())
            && config.durability.replicas > 1
            && config.durability.across.is_none()
        {
            return Err(Error::Config(
                "a multi-process node replicates its logs through its peers' replicas: start it with `brine server` and `replicas` in the cluster file (docs/replication.md)"
                    .into(),
            ));
        }
        let link = Link::build(
            config.link,
            config.seed,
            config.topology.clone(),
            config.link_clock,
            &config.faults,
        );
        // With a log: recover what the data directory holds first.
        let (wal, mut recovered) = if config.durability.mode == DurabilityMode::Wal {
            let opened = match &hosting {
                Some(h) => {
                    let book = h.book.clone().ok_or_else(|| {
                        Error::Config("a durable node needs its decision book".into())
                    })?;
                    // With replicated logs a node takes its partitions over
                    // as it comes to lead their logs (`replication`).
                    let local: Vec<u32> = (0..config.total_partitions())
                        .filter(|p| p / config.partitions_per_node == h.node.0)
                        .filter(|_| config.durability.across.is_none())
                        .collect();
                    let ask = |txns: &[TxnId]| crate::remote::ask_coordinators(&h.peers, txns);
                    let scope = NodeScope {
                        node: h.node.0,
                        local: &local,
                        ask: &ask,
                        book,
                    };
                    WalSet::open(
                        &config.durability,
                        config.nodes,
                        config.total_partitions(),
                        &catalog,
                        Some(&scope),
                    )?
                }
                None => WalSet::open(
                    &config.durability,
                    config.nodes,
                    config.total_partitions(),
                    &catalog,
                    None,
                )?,
            };
            (Some(Arc::new(opened.0)), opened.1)
        } else {
            (None, Vec::new())
        };
        // The protocol starts after recovery: its own logs live beside
        // the engine's (Mediator).
        let setup = Setup {
            link: &link,
            nodes: config.nodes,
            partitions: config.total_partitions(),
            app_name: &app.name,
            ddl: &app.ddl,
            procedures: &app.procedures,
            isolation: config.isolation,
            mutation: config.mutation,
            wal: wal.as_ref(),
            hosting: hosting.as_ref().map(|h| crate::protocol::SetupHosting {
                node: h.node,
                peers: &h.peers,
            }),
        };
        let protocol = protocol.start(&setup)?.unwrap_or(protocol);
        let mut procedures = HashMap::new();
        for def in app.procedures {
            let name = def.name.clone();
            let prepared = PreparedProc::prepare(&catalog, def)?;
            if procedures
                .insert(name.clone(), Arc::new(prepared))
                .is_some()
            {
                return Err(Error::Schema(format!(
                    "procedure `{name}` is defined twice"
                )));
            }
        }
        let mut partitions = Vec::new();
        let mut partition_counters = Vec::new();
        let mut local = HashMap::new();
        // With replicated logs across processes, a partition is served
        // where its log is led: every message goes by its route.
        let routes = hosting
            .as_ref()
            .filter(|_| config.durability.replicas > 1)
            .map(|h| {
                let clients = match &config.durability.across {
                    Some(across) => across.clients(),
                    None => h.peers.iter().map(|(n, c)| (n.0, c.clone())).collect(),
                };
                crate::remote::Routes::new(
                    h.node,
                    config.total_partitions(),
                    config.partitions_per_node,
                    clients,
                )
            });
        let history = match &config.history {
            Some(path) => {
                let header = Header {
                    brine_history: FORMAT_VERSION,
                    workload: app.name.clone(),
                    protocol: config.protocol.clone(),
                    isolation: config.isolation.to_string(),
                    config: history_config(&config, &catalog, protocol.as_ref()),
                };
                // A node across processes writes each record at once (a
                // SIGKILL must not lose one whose writes others read).
                Some(Arc::new(match hosting_node {
                    Some(_) => HistorySink::create_direct(path, &header)?,
                    None => HistorySink::create(path, &header)?,
                }))
            }
            None => None,
        };
        for p in 0..config.total_partitions() {
            let node = NodeId(p / config.partitions_per_node);
            if let Some(routes) = &routes {
                partitions.push(PartitionRef {
                    id: PartitionId(p),
                    node,
                    tx: crate::remote::spawn_routed_proxy(p, routes.clone(), protocol.clone()),
                });
                continue;
            }
            if let Some(Hosting {
                node: here, peers, ..
            }) = &hosting
            {
                if node != *here {
                    let peer = peers.get(&node).ok_or_else(|| {
                        Error::Config(format!("no address for peer node {}", node.0))
                    })?;
                    partitions.push(PartitionRef {
                        id: PartitionId(p),
                        node,
                        tx: crate::remote::spawn_proxy(p, peer.clone(), protocol.clone()),
                    });
                    continue;
                }
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let counters = Arc::new(PartitionCounters::default());
            let durable = wal.as_ref().and_then(|w| {
                let store = recovered.get_mut(p as usize).and_then(Option::take);
                store.zip(w.partition_wal(p as usize))
            });
            protocol.spawn_partition(
                PartitionParts {
                    id: PartitionId(p),
                    catalog: catalog.clone(),
                    lock_config: config.lock.clone(),
                    counters: counters.clone(),
                    wal: durable,
                    history: history.clone(),
                },
                rx,
            );
            local.insert(p, tx.clone());
            partitions.push(PartitionRef {
                id: PartitionId(p),
                node,
                tx,
            });
            partition_counters.push(counters);
        }
        if config.lock.policy == DeadlockPolicy::Detect && !local.is_empty() {
            // Cycles through several partitions, and those a partition's
            // own search gave up on (`MAX_SEARCH`). In one process: its
            // partitions. Across processes: node 0 watches every
            // partition, its peers' over the wire (`deadlock`).
            // It runs on node 0, beside partition 0: its messages to the
            // others cross the link.
            let watch = |p: &PartitionRef| crate::deadlock::Watched {
                node: p.node,
                tx: p.tx.downgrade(),
            };
            let watched: Vec<_> = match hosting_node {
                None => partitions
                    .iter()
                    .filter(|p| local.contains_key(&p.id.0))
                    .map(watch)
                    .collect(),
                Some(NodeId(0)) => partitions.iter().map(watch).collect(),
                Some(_) => Vec::new(),
            };
            if !watched.is_empty() {
                tokio::spawn(crate::deadlock::run(watched, link.clone(), NodeId(0)));
            }
        }
        let unfinished = wal
            .as_ref()
            .map(|w| std::mem::take(&mut *w.unfinished_contexts.lock()))
            .unwrap_or_default();
        // Recovery to run before new work: Salt's unfinished BASE
        // transactions, or a protocol's own catch-up from the log (Elia).
        let recovering = !unfinished.is_empty() || (wal.is_some() && protocol.recovers_from_log());
        let (ready_tx, ready) = tokio::sync::watch::channel(!recovering);
        let shared = Arc::new(Shared {
            wait_timeout: config.lock.wait_timeout,
            ready,
            history,
            mutation: config.mutation,
            catalog,
            link,
            partitions,
            protocol,
            isolation: config.isolation,
            retry: config.retry,
            counters: ClusterCounters::default(),
            // Nodes of a multi-process cluster draw ids from disjoint ranges.
            next_txn: std::sync::atomic::AtomicU64::new(
                wal.as_ref().map_or(0, |w| w.txn_base)
                    + hosting_node.map_or(0, |n| u64::from(n.0) << NODE_TXN_SHIFT),
            ),
            clock_ts: hosting_node.is_some(),
            seed: config.seed,
            wal,
            routes: routes.clone(),
        });
        let procedures = Arc::new(procedures);
        shared.protocol.attach(&shared, &procedures);
        if let (Some(routes), Some(me)) = (&shared.routes, hosting_node) {
            tokio::spawn(crate::replication::follow_moves(
                routes.moves(),
                Arc::downgrade(&shared),
                me,
            ));
        }
        if recovering {
            // What the log says was promised but not done (Salt: accepted
            // BASE transactions; Elia: updates a replica lacks) is finished
            // before anything else runs.
            let (shared, procedures) = (shared.clone(), procedures.clone());
            let node = hosting_node.unwrap_or(NodeId(config.nodes));
            tokio::spawn(async move {
                let protocol = shared.protocol.clone();
                protocol
                    .recover(&shared, node, &procedures, unfinished)
                    .await;
                let _ = ready_tx.send(true);
            });
        }
        let service = hosting.map(|h| {
            NodeService::new(
                h.node,
                shared.catalog.clone(),
                local,
                h.book,
                h.peers,
                routes,
            )
        });
        let cluster = Cluster {
            shared,
            config: Arc::new(config),
            procedures,
            partition_counters: Arc::new(parking_lot::RwLock::new(partition_counters)),
            adhoc: Default::default(),
            next_client: Default::default(),
            home: hosting_node,
            call_nodes: None,
        };
        Ok((cluster, service))
    }

    /// Waits until recovery has rolled every unfinished BASE transaction
    /// forward; calls wait for it by themselves.
    pub async fn wait_ready(&self) {
        self.shared.wait_ready().await;
    }

    /// Waits until every transaction recorded so far is in the history
    /// file; returns how many were written (`None` if not recording).
    pub fn flush_history(&self) -> Result<Option<u64>> {
        match &self.shared.history {
            Some(h) => h.flush().map(Some),
            None => Ok(None),
        }
    }

    /// Counts a partition this process came to serve with the others.
    pub(crate) fn count_partition(&self, counters: Arc<PartitionCounters>) {
        self.partition_counters.write().push(counters);
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The protocol the cluster runs (as started: downcast it through
    /// `Protocol::as_any` for a protocol's own report).
    pub fn protocol(&self) -> &Arc<dyn Protocol> {
        &self.shared.protocol
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.shared.catalog
    }

    pub fn link_stats(&self) -> &crate::link::LinkStats {
        &self.shared.link.stats
    }

    /// What the link's faults did so far (`ClusterConfig::faults`).
    pub fn fault_stats(&self) -> &crate::link::FaultStats {
        &self.shared.link.fault_stats
    }

    /// Begins the link's faults, when they wait to be begun
    /// (`FaultConfig::on_demand`): a benchmark's once its data is loaded.
    pub fn begin_faults(&self) {
        self.shared.link.begin_faults();
    }

    /// Ends the link's faults (a benchmark's before its checks).
    pub fn end_faults(&self) {
        self.shared.link.end_faults();
    }

    /// Names of the registered procedures, sorted.
    pub fn procedure_names(&self) -> Vec<String> {
        let mut v: Vec<_> = self.procedures.keys().cloned().collect();
        v.sort();
        v
    }

    /// This cluster seen from node `node`: its clients' coordinator is
    /// there. Under a replicated protocol their interactive reads read
    /// that node's replica (a check of every replica).
    pub fn at_node(&self, node: NodeId) -> Cluster {
        Cluster {
            home: Some(node),
            ..self.clone()
        }
    }

    /// A new client session. Clients are cheap; each has a coordinator node.
    pub fn client(&self) -> Client {
        // Numbered apart from a driver's numbered clients (sessions must
        // not collide: a session's calls are one client's order).
        let n = self.next_client.fetch_add(1, Ordering::Relaxed);
        self.client_numbered(n.wrapping_add(1 << 31))
    }

    /// The client numbered `n` (a driver's client `n`): its session is
    /// `n`, and under co-located placement its coordinator is node
    /// `n mod nodes`, so the same number always lands at the same place
    /// (Elia's clients sit at site `n mod servers`).
    pub fn client_numbered(&self, n: u32) -> Client {
        let node = match (self.home, self.config.placement) {
            (Some(home), _) => home,
            (None, Placement::Separate) => NodeId(self.config.nodes),
            (None, Placement::Colocated) => NodeId(n % self.config.nodes),
        };
        Client {
            session: n as u64,
            cluster: self.clone(),
            node,
        }
    }

    /// Bulk-loads rows (outside any transaction: for initial data only),
    /// routed to their partitions. Rows are type-checked by the partitions.
    pub async fn load(&self, table: &str, rows: Vec<Row>) -> Result<()> {
        let def = self.shared.catalog.table_by_name(table)?;
        let table_id: TableId = def.id;
        let pcol = def.partition_column();
        let n = self.shared.partitions.len();
        let mut per: Vec<Vec<Row>> = vec![Vec::new(); n];
        let layout = self.shared.protocol.layout();
        if layout == Layout::Replicated {
            // A full replica everywhere.
            for p in &mut per {
                p.clone_from(&rows);
            }
        } else if layout == Layout::Central {
            per[0] = rows;
        } else {
            for row in rows {
                let v = row.get(pcol).ok_or_else(|| Error::Arity {
                    what: format!("row of `{table}`"),
                    expected: def.columns.len(),
                    got: row.len(),
                })?;
                per[partition_of(v, n as u32) as usize].push(row);
            }
        }
        let node = NodeId(self.config.nodes);
        // Partitions load in parallel; each partition's rows go in chunks
        // one after the other, so no request outgrows a wire frame however
        // many rows the caller passes.
        let futs = per
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(p, rows)| async move {
                for chunk in crate::load::chunks(rows, crate::load::CHUNK_BYTES) {
                    self.shared
                        .request(node, p, move |reply| PartitionMsg::Load {
                            table: table_id,
                            rows: chunk,
                            reply,
                        })
                        .await??;
                }
                Ok::<(), Error>(())
            });
        for r in futures::future::join_all(futs).await {
            r?;
        }
        Ok(())
    }

    /// Status of every partition.
    pub async fn status(&self) -> Result<Vec<PartitionStatus>> {
        let node = NodeId(self.config.nodes);
        let futs = (0..self.shared.partitions.len()).map(|p| {
            self.shared
                .request(node, p, |reply| PartitionMsg::Status { reply })
        });
        futures::future::join_all(futs).await.into_iter().collect()
    }

    /// Waits until no partition's lock table keeps state for any
    /// transaction (call it when no transaction runs: releases in order and
    /// Salt's staged releases may still be under way). An error names what
    /// is left after `within`: a lock, wait or protection that outlived its
    /// transaction.
    pub async fn locks_released(&self, within: std::time::Duration) -> Result<()> {
        // Tokio's clock, as the partitions': virtual on a paused runtime.
        let until = crate::partition::now() + within;
        loop {
            let left: Vec<usize> = self.status().await?.iter().map(|p| p.lock_txns).collect();
            if left.iter().all(|&n| n == 0) {
                return Ok(());
            }
            if crate::partition::now() >= until {
                return Err(Error::Internal(format!(
                    "lock tables still keep transactions {} s after the last call (per partition: {left:?})",
                    within.as_secs_f64()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Verifies every partition's storage structures (secondary indexes
    /// agree with the rows). Costs a pass over all data.
    pub async fn verify_storage(&self) -> Result<()> {
        let node = NodeId(self.config.nodes);
        let futs = (0..self.shared.partitions.len()).map(|p| {
            self.shared
                .request(node, p, |reply| PartitionMsg::Verify { reply })
        });
        for r in futures::future::join_all(futs).await {
            r??;
        }
        Ok(())
    }

    pub fn stats(&self) -> StatsSnapshot {
        let c = &self.shared.counters;
        let mut s = StatsSnapshot {
            commits: c.commits.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            user_aborts: c.user_aborts.load(Ordering::Relaxed),
            aborts_wait_die: c.aborts_wait_die.load(Ordering::Relaxed),
            aborts_deadlock: c.aborts_deadlock.load(Ordering::Relaxed),
            aborts_timeout: c.aborts_timeout.load(Ordering::Relaxed),
            aborts_cascade: c.aborts_cascade.load(Ordering::Relaxed),
            aborts_validation: c.aborts_validation.load(Ordering::Relaxed),
            aborts_unreachable: c.aborts_unreachable.load(Ordering::Relaxed),
            ..Default::default()
        };
        for k in self.shared.protocol.counters() {
            let raw = match k.kept {
                Kept::Coordinator => c.protocol.get(k.slot),
                Kept::Partition => self
                    .partition_counters
                    .read()
                    .iter()
                    .map(|p| p.protocol.get(k.slot))
                    .sum(),
            };
            s.protocol.insert(k.name, raw / k.divisor.max(1));
        }
        for p in self.partition_counters.read().iter() {
            s.statements += p.statements.load(Ordering::Relaxed);
            s.lock_waits += p.lock_waits.load(Ordering::Relaxed);
            s.queue_bypasses += p.queue_bypasses.load(Ordering::Relaxed);
            s.searches_cut += p.searches_cut.load(Ordering::Relaxed);
            s.detector_breaks += p.detector_breaks.load(Ordering::Relaxed);
            s.lock_wait_us_total += p.lock_wait_ns.load(Ordering::Relaxed) / 1000;
        }
        s
    }

    /// Lock figures of this process's partitions by table.
    pub fn locks_by_table(&self) -> Vec<TableLocks> {
        let tables = self.shared.catalog.tables();
        let mut out: Vec<TableLocks> = tables
            .iter()
            .take(crate::partition::TABLE_SLOTS)
            .map(|t| TableLocks {
                table: t.name.clone(),
                ..TableLocks::default()
            })
            .collect();
        if tables.len() > crate::partition::TABLE_SLOTS {
            if let Some(last) = out.last_mut() {
                last.table = "(other tables)".into();
            }
        }
        let sum = |a: &[std::sync::atomic::AtomicU64], i: usize| a[i].load(Ordering::Relaxed);
        for c in self.partition_counters.read().iter() {
            for (i, row) in out.iter_mut().enumerate() {
                row.waits += sum(&c.lock_waits_by_table, i);
                row.wait_us += sum(&c.lock_wait_ns_by_table, i) / 1000;
                row.holds += sum(&c.lock_holds_by_table, i);
                row.hold_us += sum(&c.lock_hold_ns_by_table, i) / 1000;
            }
        }
        out
    }

    pub(crate) fn adhoc_plan(&self, sql: &str) -> Result<Arc<Plan>> {
        if let Some(p) = self.adhoc.read().get(sql) {
            return Ok(p.clone());
        }
        let plan = Arc::new(brine_sql::prepare(&self.shared.catalog, sql)?);
        let mut cache = self.adhoc.write();
        if cache.len() >= ADHOC_CACHE_MAX {
            cache.clear();
        }
        cache.insert(sql.to_string(), plan.clone());
        Ok(plan)
    }
}
