//! Mediator (seed 003; DESIGN 4.5): native single-key gets and puts that
//! never abort and pay no transaction overhead, beside snapshot-isolation
//! and serializable transactions over the same multi-versioned items,
//! ordered by temporal fences.
//!
//! This module holds the algorithm's parts, each as the source states it
//! and tested on its own and together (`tests.rs`, including the fence
//! scenarios of Fig. 2 and the serializable variant's missing fence):
//!
//! - `store.rs`: a partition's versions and local clock (Algorithm 3);
//! - `tso.rs`: the transaction status oracle, its ring with write-set
//!   Bloom filters (`bloom.rs`) and its collection (Algorithms 2 and 4);
//! - `client.rs`: a transaction at its client (Algorithms 1 and 4);
//! - `helper.rs`: the helper that resolves transactions their clients
//!   left serialized but unfinished, from the log;
//! - `kv.rs`: the statements Mediator runs, point gets and puts by
//!   primary key, read from declared SQL;
//! - `partition.rs`: Mediator's partition rules, the versioned store
//!   served through Mediator's messages, the engine's store kept at the
//!   latest versions.
//!
//! - `service.rs`: the TSO as a task on a node of its own (across
//!   processes, a process of its own or node 0's);
//! - `run.rs`: a call at its coordinator, native or transactional;
//! - `upkeep.rs`: the version collector and the running helper, and the
//!   settling of commits when a process restarts;
//! - `durable.rs`: the versions logs and the commit log, recovery;
//! - `wire.rs`: the messages across processes.
//!
//! Registered as `mediator` (snapshot isolation), `mediator-ser`
//! (serializable), the baseline `omid` (the same store and TSO, every
//! native operation run as a one-operation transaction) and `kv` (the raw
//! store: native operations on the bare partitions). See
//! `docs/mediator.md`.

pub mod bloom;
pub mod client;
pub mod durable;
pub mod helper;
pub mod kv;
pub mod partition;
mod run;
pub mod service;
pub mod store;
pub mod tso;
mod upkeep;
mod wire;

#[cfg(test)]
mod tests;

pub use client::{
    commit_path, expected_version, Abort, ClientConfig, CommitPath, Committing, Db, Level, Log,
    Partitioned, Prepared, Txn,
};
pub use store::{Ts, VersionedStore};
pub use tso::{Check, Refusal, Status, Tso, TsoConfig, TsoStats};

use std::any::Any;
use std::sync::Arc;

use brine_core::{Error, NodeId, Result};
use brine_lock::DeadlockPolicy;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::Registration;
use crate::coordinator::CallOutcome;
use crate::message::{LockSpec, PartitionMsg};
use crate::partition::{Partition, PartitionParts};
use crate::protocol::{Call, Isolation, Mutation, Protocol, Setup};
use crate::stats::Counter;
use service::TsoHandle;

/// A native put's clock step (delta): one step of a partition's clock
/// above its tag bits (`store::TAG_SPAN`); the TSO's is 2^20
/// (`TsoConfig`), 4096 native puts' worth.
pub const DELTA: Ts = store::TAG_SPAN;

/// Mediator's settings (`ClusterConfig::mediator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediatorOptions {
    /// How long a transaction may hold its snapshot before the TSO gives
    /// up on it, so its versions can be collected (its later gets fail
    /// with a clear error, its commit is refused as too old).
    pub snapshot_lifetime: std::time::Duration,
    /// How long a serialized commit may go unfinished before the helper
    /// finishes it (logged: written back) or aborts it (not logged): its
    /// coordinator went away.
    pub helper_patience: std::time::Duration,
    /// Bits of each ring entry's write-set Bloom filter.
    pub bloom_bits: usize,
    /// Fault injection for tests: every commit's coordinator goes away at
    /// this point (the call fails with a transport error), leaving the
    /// commit to the helper.
    pub abandon: Option<Abandon>,
}

/// Where a commit's coordinator goes away (`MediatorOptions::abandon`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// After the TSO serialized it, before its checks and log.
    Serialized,
    /// After its write set reached the log, before its write-back.
    Logged,
    /// After the TSO serialized it, with the process that held it (no
    /// coordinator of this process knows it any more: a coordinator
    /// process that died, across processes).
    ProcessGone,
}

impl Default for MediatorOptions {
    fn default() -> Self {
        MediatorOptions {
            snapshot_lifetime: service::SNAPSHOT_LIFETIME,
            helper_patience: std::time::Duration::from_secs(2),
            bloom_bits: TsoConfig::default().bloom_bits,
            abandon: None,
        }
    }
}

/// The name of Mediator's TSO as a service of its own across processes
/// (`Protocol::own_processes`, `brine server --service tso`).
pub const TSO_SERVICE: &str = "tso";

/// Where the TSO runs in a multi-process cluster (in the embedded one, in
/// its process, on a node of its own).
#[derive(Clone, Debug)]
enum TsoPlace {
    /// In this process (`brine server --service tso`).
    Here,
    /// In a process of its own at this address (`ClusterConfig::services`).
    At(String),
    /// With node 0, when no process of its own is given.
    WithNode0,
}

/// `mediator`: snapshot isolation.
pub const MEDIATOR: Registration = Registration {
    name: "mediator",
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| {
        Ok(Arc::new(Mediator::new(
            "mediator",
            Level::Snapshot,
            false,
            config,
        )))
    },
};

/// `kv`: the raw store of the sources' Table 1, the baseline of native
/// operations: the same partitions and messages, each get and put one
/// request served straight from the store, with no versions, clocks or
/// transactions (a procedure that is not native is refused).
pub const KV: Registration = Registration {
    name: "kv",
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| {
        Ok(Arc::new(Mediator {
            raw_store: true,
            ..Mediator::new("kv", Level::Snapshot, false, config)
        }))
    },
};

/// `mediator-ser`: serializability (Algorithm 4, with the write-set fence).
pub const MEDIATOR_SER: Registration = Registration {
    name: "mediator-ser",
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| {
        Ok(Arc::new(Mediator::new(
            "mediator-ser",
            Level::Serializable,
            false,
            config,
        )))
    },
};

/// `omid`: the sources' baseline (Omid), every native operation
/// transactified, and every transaction committed through the TSO (none of
/// Mediator's no-commit and local-commit shortcuts).
pub const OMID: Registration = Registration {
    name: "omid",
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| {
        Ok(Arc::new(Mediator::new(
            "omid",
            Level::Snapshot,
            true,
            config,
        )))
    },
};

/// Mediator's counters (at the coordinators): commits the TSO refused for
/// a conflict, for a Bloom filter's false positive, for age; commits a
/// native put aborted; gets that gave up on a version still being written
/// back; native operations served; commits the helper finished and
/// aborted for coordinators that went away.
const COUNTERS: &[Counter] = &[
    counter("tso_conflicts", run::TSO_CONFLICTS),
    counter("bloom_false_positives", run::FALSE_POSITIVES),
    counter("too_old", run::TOO_OLD),
    counter("native_conflicts", run::NATIVE_CONFLICTS),
    counter("stale_reads", run::STALE_READS),
    counter("native_ops", run::NATIVE_OPS),
    counter("helper_committed", run::HELPER_COMMITTED),
    counter("helper_aborted", run::HELPER_ABORTED),
];

const fn counter(name: &'static str, slot: usize) -> Counter {
    Counter::at_coordinators(name, slot)
}

/// The Mediator protocol (and, transactified, its baseline).
pub struct Mediator {
    name: &'static str,
    level: Level,
    /// Native operations run as transactions, and no commit takes a
    /// shortcut (the `omid` baseline).
    transactify: bool,
    /// The temporal fences and the native-conflict check; off only under
    /// `Mutation::NoTemporalFence` and `Mutation::NoNativeCheck`.
    fences: bool,
    native_check: bool,
    tso: Option<TsoHandle>,
    /// Where the TSO runs across processes.
    tso_place: TsoPlace,
    /// `kv`: native operations on the bare store, nothing else.
    raw_store: bool,
    options: MediatorOptions,
    /// Commits in flight at this cluster's coordinators (the helper's).
    inflight: Arc<helper::Inflight>,
    /// The snapshot the partitions were last told to collect below.
    collected: std::sync::atomic::AtomicU64,
    /// Mediator's logs, when the cluster is durable (`durable.rs`).
    logs: Option<Arc<durable::MediatorLogs>>,
    /// The version collector (`upkeep.rs`, `collect_versions`), started
    /// with the first call (at start on a durable node across processes).
    collector: std::sync::Once,
    /// Across processes, this process's node (`None`: embedded).
    home: Option<NodeId>,
    /// Durable across processes: the nodes whose coordinators log their
    /// commits (`0..n`); the TSO's process never gives up on one of
    /// theirs by itself (their restart settles it). 0 otherwise.
    logging_nodes: u32,
    /// Where a service process keeps the TSO's lease (durable cluster).
    service_dir: Option<std::path::PathBuf>,
}

impl Mediator {
    fn new(
        name: &'static str,
        level: Level,
        transactify: bool,
        config: &crate::ClusterConfig,
    ) -> Mediator {
        let mutation = config.mutation;
        let tso_place = if config.hosts_service.as_deref() == Some(TSO_SERVICE) {
            TsoPlace::Here
        } else if let Some(address) = config.services.get(TSO_SERVICE) {
            TsoPlace::At(address.clone())
        } else {
            TsoPlace::WithNode0
        };
        Mediator {
            options: config.mediator,
            tso_place,
            raw_store: false,
            inflight: Default::default(),
            collected: Default::default(),
            name,
            level,
            transactify,
            fences: mutation != Some(Mutation::NoTemporalFence),
            native_check: mutation != Some(Mutation::NoNativeCheck),
            tso: None,
            logs: None,
            collector: std::sync::Once::new(),
            home: None,
            logging_nodes: 0,
            service_dir: config.service_dir.clone(),
        }
    }
}

impl Mediator {
    /// What recovery found in Mediator's logs (`None` without a log).
    pub fn recovery(&self) -> Option<&durable::MediatorRecovery> {
        self.logs.as_ref().map(|l| &l.recovery)
    }

    /// The oldest snapshot a transaction holds, as the TSO says (from the
    /// coordinators' node `node`).
    pub async fn oldest_snapshot(&self, node: NodeId) -> Result<Ts> {
        let tso = self
            .tso
            .as_ref()
            .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
        tso.ask(node, |reply| service::TsoMsg::Oldest { reply })
            .await
    }

    /// The snapshot below which the partitions were last told to collect
    /// versions (0: not yet).
    pub fn collected_below(&self) -> Ts {
        self.collected.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether this process is a node whose coordinators log their commits
    /// in a cluster durable across processes.
    fn logging_node(&self) -> bool {
        self.logs.is_some() && self.home.is_some()
    }

    /// Stops the TSO (from node `node`): transactions then fail with a
    /// clear error, native gets and puts go on.
    pub fn stop_tso(&self, node: NodeId) {
        if let Some(tso) = &self.tso {
            tso.send(node, service::TsoMsg::Stop);
        }
    }
}

impl Protocol for Mediator {
    fn name(&self) -> &'static str {
        self.name
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn start(&self, setup: &Setup<'_>) -> Result<Option<Arc<dyn Protocol>>> {
        let across = setup.hosting.is_some();
        let logs = match setup.wal {
            Some(wal) => {
                let catalog = brine_sql::parse_schema(setup.ddl)?;
                Some(Arc::new(durable::MediatorLogs::open(
                    wal,
                    &catalog,
                    setup.partitions,
                    across,
                )?))
            }
            None => None,
        };
        let resume = logs.as_ref().map_or(0, |l| l.recovery.clock);
        // Durable across processes, the TSO keeps a lease on its clock:
        // at node 0 beside Mediator's logs, in a process of its own in the
        // service's data directory.
        let lease = match (setup.wal, &self.service_dir) {
            _ if !across => None,
            (Some(wal), _) => Some(durable::MediatorLogs::lease_path(wal)),
            (None, Some(dir)) => Some(dir.join("tso-lease")),
            (None, None) => None,
        };
        // The TSO is a node of its own: across processes, a process of
        // its own (or node 0's), which the others reach over the network.
        let node = NodeId(setup.nodes + 1);
        let remote = |peer| Ok::<_, Error>(TsoHandle::remote(setup.link, node, peer));
        let tso = match (&setup.hosting, &self.tso_place) {
            (Some(_), TsoPlace::At(address)) => remote(Arc::new(
                crate::remote::PeerClient::new(address.clone(), brine_net::ClientConfig::default())
                    .map_err(|e| Error::Transport(format!("Mediator's TSO at {address}: {e}")))?,
            ))?,
            (Some(h), TsoPlace::WithNode0) if h.node != NodeId(0) => {
                remote(h.peers.get(&NodeId(0)).cloned().ok_or_else(|| {
                    Error::Config("Mediator's TSO runs with node 0: its address is missing".into())
                })?)?
            }
            _ => TsoHandle::spawn(
                setup.link,
                node,
                TsoConfig {
                    bloom_bits: self.options.bloom_bits,
                    ..TsoConfig::default()
                },
                resume,
                self.options.snapshot_lifetime,
                lease.clone().map(|lease| service::TsoDurable {
                    lease,
                    nodes: setup.nodes,
                }),
            )?,
        };
        let home = setup.hosting.as_ref().map(|h| h.node);
        Ok(Some(Arc::new(Mediator {
            name: self.name,
            level: self.level,
            transactify: self.transactify,
            fences: self.fences,
            native_check: self.native_check,
            tso: Some(tso),
            tso_place: self.tso_place.clone(),
            raw_store: self.raw_store,
            options: self.options,
            inflight: Default::default(),
            collected: Default::default(),
            logs,
            collector: std::sync::Once::new(),
            home,
            logging_nodes: if lease.is_some() { setup.nodes } else { 0 },
            service_dir: self.service_dir.clone(),
        })))
    }

    /// Durable across processes too: each node logs its commits and its
    /// partitions' versions, the TSO its clock's lease (`service.rs`,
    /// `durable.rs`, docs/mediator.md).
    fn check_failover(&self) -> Result<()> {
        Err(Error::Config(
            "replicated logs across processes (`replicas` in the cluster file) run `acid`, \
             `salt` and `callas`, not `mediator`: its commits' write-backs are settled with the TSO from the coordinating node's own log, which is not replicated (docs/replication.md)"
                .into(),
        ))
    }

    fn check_deployment(&self, _multi_process: bool, durable: bool) -> Result<()> {
        if self.raw_store && durable {
            return Err(Error::Config(
                "`kv` (the raw store, a benchmark baseline) keeps no log".into(),
            ));
        }
        Ok(())
    }

    /// Across processes a durable node settles its commits with the TSO
    /// at every start, before it takes calls (`upkeep::recover`).
    fn recovers_from_log(&self) -> bool {
        self.logging_node()
    }

    fn recover<'a>(
        &'a self,
        shared: &'a Arc<crate::coordinator::Shared>,
        node: NodeId,
        _procedures: &'a std::collections::HashMap<String, Arc<crate::procedure::PreparedProc>>,
        _unfinished: Vec<brine_storage::wal::record::BaseContext>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(upkeep::recover(self, shared, node))
    }

    fn attach(
        &self,
        shared: &Arc<crate::coordinator::Shared>,
        _procedures: &Arc<std::collections::HashMap<String, Arc<crate::procedure::PreparedProc>>>,
    ) {
        // A durable node across processes runs its helper from the start:
        // it settles its commits when the TSO restarts, calls or not.
        if let (Some(home), true) = (self.home, self.logging_node()) {
            self.collector.call_once(|| {
                tokio::spawn(upkeep::collect_versions(Arc::downgrade(shared), home));
            });
        }
    }

    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        run::run(self, call)
    }

    fn spawn_partition(&self, parts: PartitionParts, rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        let p = parts.id.0 as usize;
        let log = self.logs.as_ref().and_then(|l| l.take_partition(p));
        // Tags 1..=255: partitions further on share them (their versions
        // stay distinct within each partition; only a history's version
        // ids could meet).
        let tag = (p as Ts % (store::TAG_SPAN - 1)) + 1;
        let rules = partition::MediatorRules::new(DELTA, tag, log);
        let mut partition = Partition::new(parts, rules.raw(self.raw_store));
        if let Err(e) = partition::MediatorRules::restore(&mut partition) {
            tracing::error!(partition = p, "Mediator cannot restore its versions: {e}");
        }
        tokio::spawn(partition.run(rx));
    }

    fn counters(&self) -> &'static [Counter] {
        COUNTERS
    }

    fn own_processes(&self) -> &'static [&'static str] {
        &[TSO_SERVICE]
    }

    /// Histories name versions by timestamp, which orders each item's
    /// versions (they are installed out of order), and say which level
    /// the run promises.
    fn describe(&self, config: &mut serde_json::Map<String, serde_json::Value>) {
        config.insert(
            "versions".into(),
            brine_check::history::TIMESTAMP_VERSIONS.into(),
        );
        let level = match self.level {
            Level::Snapshot => "snapshot-isolation",
            Level::Serializable => "serializable",
        };
        config.insert("level".into(), level.into());
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn encode_message(
        &self,
        msg: Box<dyn Any + Send>,
    ) -> Result<(Vec<u8>, crate::protocol::WireAnswer)> {
        crate::protocol::encode_message_as("Mediator", msg, wire::encode_partition)
    }

    fn decode_message(
        &self,
        link: &crate::link::Link,
        node: NodeId,
        bytes: &[u8],
    ) -> Result<(Box<dyn Any + Send>, crate::protocol::WireAnswering)> {
        crate::protocol::decoded_message(wire::decode_partition(link, node, bytes))
    }

    /// The TSO's requests from the other processes (this one hosts it).
    fn serve<'a>(&'a self, bytes: Vec<u8>) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move {
            let tso = self
                .tso
                .as_ref()
                .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
            let local = tso.local().ok_or_else(|| {
                Error::Config("this process does not host Mediator's TSO (node 0 does)".into())
            })?;
            wire::serve_tso(&tso.link(), tso.node(), local, &bytes).await
        })
    }
}
