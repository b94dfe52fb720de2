//! Durability of the embedded cluster: one write-ahead log per partition,
//! one decision log per coordinator node, recovery at start, and the
//! partition actor's and coordinator's use of them.
//!
//! ```text
//!  data dir/
//!    cluster.meta          partition count (a mismatch is refused)
//!    epoch                 bumped at every start; txn ids start at epoch << 40
//!    part-<p>/             partition p: <lsn>.wal segments, <lsn>.ckpt checkpoints
//!    coord-<n>/            coordinator node n: commit decisions
//!    replicas/<log>/       with replicated logs: raft state (`replication`)
//!
//!  single partition:  Commit ──► actor logs Commit(txn, redo), applies it,
//!                     releases locks ──► ack sent by the log writer once durable
//!  two-phase commit:  Prepare ──► participant logs Prepare(txn, redo); votes Yes
//!                     once durable ──► coordinator logs Decision(txn) in its
//!                     node's decision log ──► durable ──► Commit to participants
//!                     (they log Outcome, unforced) and the answer to the client
//!  read-only:         ack / ReadOnly vote once the log is durable up to its end,
//!                     so nobody acts on a write that a crash could still undo
//! ```
//!
//! Locks are released at commit, before the commit record is durable (early
//! lock release): anything that saw the change either logs after it in the
//! same partition log, or is acknowledged only after that log is durable up
//! to where it read (the read-only rule above).
//!
//! The decision is logged on the coordinator's node, not at a participant,
//! because the coordinator is the one that must not tell anyone "commit"
//! before it is durable, and in the paper topology it has no partition of its
//! own. Only commits are logged (presumed abort): at recovery a prepared
//! transaction with no decision record in any decision log is aborted. Once
//! recovery has resolved every in-doubt transaction and checkpointed every
//! partition, the old decision logs are deleted.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brine_core::{Catalog, Error, NodeId, Result, Row, TableId, TxnId};
use brine_storage::checkpoint::{
    checkpoint_path, list_checkpoints, tmp_checkpoint_path, BaseContexts,
};
use brine_storage::recovery::{read_decisions, recover_partition, RecoveryStats};
use brine_storage::wal::codec::{put_txn, put_u32};
use brine_storage::wal::record::{
    encode_base_context, encode_decision, encode_outcome, encode_versions, BaseContext, RedoWriter,
};
use brine_storage::wal::segment::{list_segments, sync_dir};
use brine_storage::wal::{CrashSwitch, Log, LogConfig, LogPosition, LogStatsSnapshot, RecordKind};
use brine_storage::PartitionStore;

use crate::decision::DecisionBook;
use crate::message::{Reply, Vote};
use crate::replication::LogName;

mod node;
pub use node::node_decisions;
pub(crate) use node::NodeScope;

/// Whether commits are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum DurabilityMode {
    /// Everything in memory: a crash loses everything (quick runs).
    #[default]
    None,
    /// Write-ahead log with group commit, checkpoints and recovery.
    Wal,
}

impl std::str::FromStr for DurabilityMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(DurabilityMode::None),
            "wal" => Ok(DurabilityMode::Wal),
            o => Err(Error::Config(format!(
                "unknown durability `{o}` (expected none or wal)"
            ))),
        }
    }
}

impl std::fmt::Display for DurabilityMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DurabilityMode::None => "none",
            DurabilityMode::Wal => "wal",
        })
    }
}

/// Durability settings of a cluster.
#[derive(Clone, Debug)]
pub struct DurabilityConfig {
    pub mode: DurabilityMode,
    /// Where logs and checkpoints live (required with `Wal`). A directory
    /// holding a previous run's files is recovered at start.
    pub data_dir: Option<PathBuf>,
    /// How long a log writer may wait for more records before a batch,
    /// once batches hold more than one record (0: write as soon as the
    /// previous fsync is done). Default 200 us: on this machine it doubled
    /// the batch size at 64+ clients and raised `wal` throughput (see
    /// docs/results/durability.md).
    pub group_commit_window: Duration,
    /// A batch is written at once when this many bytes are pending.
    pub max_batch_bytes: usize,
    /// Log segment size before rotation.
    pub segment_bytes: u64,
    /// A partition checkpoints after this many log bytes (0: only at
    /// start, after recovery).
    pub checkpoint_every_bytes: u64,
    /// Crash injection for tests: every log of the cluster shares it.
    pub crash: Option<Arc<CrashSwitch>>,
    /// Benchmarks: keep each point's data directory instead of removing it.
    pub keep_data: bool,
    /// Replicas of each log (1: itself only): a batch is durable once a
    /// majority has it (`replication.rs`); `replica_delay` apart, one way.
    pub replicas: u32,
    pub replica_delay: Duration,
    /// A multi-process node's replicas of the replicated logs (its peers
    /// hold the others): set by `brine server` with `replicas` > 1.
    pub across: Option<Arc<crate::replication::NodeReplicas>>,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            replicas: 1,
            replica_delay: Duration::ZERO,
            across: None,
            mode: DurabilityMode::None,
            data_dir: None,
            group_commit_window: Duration::from_micros(200),
            max_batch_bytes: 4 << 20,
            segment_bytes: 64 << 20,
            checkpoint_every_bytes: 256 << 20,
            crash: None,
            keep_data: false,
        }
    }
}

impl DurabilityConfig {
    pub fn validate(&self) -> Result<()> {
        if self.segment_bytes < 512 {
            return Err(Error::Config(
                "log segments must be at least 512 bytes".into(),
            ));
        }
        if self.group_commit_window > Duration::from_secs(1) {
            return Err(Error::Config(
                "the group-commit window is bounded by 1 s".into(),
            ));
        }
        if self.max_batch_bytes == 0 {
            return Err(Error::Config("max batch bytes must be positive".into()));
        }
        Ok(())
    }
}

/// What recovery did at start.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub epoch: u64,
    pub partitions: Vec<RecoveryStats>,
    /// Commit decisions read from the decision logs.
    pub decisions: usize,
    pub in_doubt_committed: usize,
    pub in_doubt_aborted: usize,
    /// Salt: accepted BASE transactions found unfinished (rolled forward).
    pub base_unfinished: usize,
}

/// Write-ahead log statistics of a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    pub partitions: LogStatsSnapshot,
    pub decisions: LogStatsSnapshot,
}

impl WalStats {
    pub fn total(&self) -> LogStatsSnapshot {
        let mut t = self.partitions;
        t.add(&self.decisions);
        t
    }

    pub fn since(&self, before: &WalStats) -> WalStats {
        WalStats {
            partitions: self.partitions.since(&before.partitions),
            decisions: self.decisions.since(&before.decisions),
        }
    }
}

/// Every log of a running cluster.
pub struct WalSet {
    /// Indexed by partition; `None` for partitions another process hosts.
    partitions: Vec<Option<Arc<Log>>>,
    /// Indexed by node id; coordinators of node n log decisions here
    /// (`None`: another process's node).
    decisions: Vec<Option<Arc<Log>>>,
    /// A multi-process node's decisions, for peers' restarted participants.
    pub(crate) book: Option<Arc<DecisionBook>>,
    crash: Arc<CrashSwitch>,
    checkpoint_every_bytes: u64,
    pub report: RecoveryReport,
    /// First transaction id of this run (above every id of earlier runs).
    pub txn_base: u64,
    /// Salt: each partition's recovered BASE contexts, taken by its
    /// `PartitionWal`.
    recovered_base: parking_lot::Mutex<Vec<BaseContexts>>,
    /// Salt: the accepted BASE transactions that had not ended, merged
    /// over the partitions, to roll forward (taken once at start).
    pub(crate) unfinished_contexts: parking_lot::Mutex<Vec<BaseContext>>,
    /// Salt: the BASE transactions whose end this process's coordinators
    /// logged. Across processes a peer's partition may still hold part of
    /// such a transaction's context (the end's release never reached it):
    /// it is done all the same, never rolled forward.
    pub(crate) base_ended: HashSet<TxnId>,
    /// The data directory.
    root: PathBuf,
    /// Every log's settings but its directory and id.
    template: LogConfig,
    /// Logs a protocol opened for itself (Mediator's version and commit
    /// logs): crashed, closed and counted with the engine's.
    protocol_logs: parking_lot::Mutex<Vec<Arc<Log>>>,
}

pub(crate) fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Storage(format!("{what} {}: {e}", path.display()))
}

/// Writes `contents` to `path` atomically (tmp, fsync, rename, dir fsync).
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| io("creating", &tmp, e))?;
    f.write_all(contents)
        .and_then(|_| f.sync_all())
        .map_err(|e| io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("renaming", &tmp, e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// After recovery checkpointed a log's directory at `lsn`: deletes every
/// segment (recovery read them all) and every older checkpoint.
pub(crate) fn drop_before_checkpoint(dir: &Path, lsn: u64) -> Result<()> {
    for (_, path) in list_segments(dir)? {
        std::fs::remove_file(&path).map_err(|e| io("deleting", &path, e))?;
    }
    for (older, path) in list_checkpoints(dir)? {
        if older < lsn {
            std::fs::remove_file(&path).map_err(|e| io("deleting", &path, e))?;
        }
    }
    sync_dir(dir)
}

/// Txn ids of a run start at `epoch << EPOCH_SHIFT`, so ids never repeat
/// across restarts (decision records name transactions by id).
const EPOCH_SHIFT: u32 = 40;

impl WalSet {
    /// Recovers whatever `durability.data_dir` holds (nothing, for a fresh
    /// directory) and opens the logs. Returns the recovered partition
    /// stores, in partition order.
    pub(crate) fn open(
        durability: &DurabilityConfig,
        nodes: u32,
        partitions: u32,
        catalog: &Arc<Catalog>,
        scope: Option<&NodeScope<'_>>,
    ) -> Result<(WalSet, Vec<Option<PartitionStore>>)> {
        durability.validate()?;
        let root = durability
            .data_dir
            .clone()
            .ok_or_else(|| Error::Config("durability `wal` needs a data directory".into()))?;
        std::fs::create_dir_all(&root).map_err(|e| io("creating data directory", &root, e))?;
        // The partition count fixes where every row lives.
        let meta_path = root.join("cluster.meta");
        let meta = format!("brine data directory\npartitions={partitions}\n");
        match std::fs::read_to_string(&meta_path) {
            Ok(old) if old != meta => {
                return Err(Error::Config(format!(
                    "data directory {} was written by a cluster with a different layout ({}); this one has {partitions} partitions",
                    root.display(),
                    old.lines().nth(1).unwrap_or("?")
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(&meta_path, meta.as_bytes())?
            }
            Err(e) => return Err(io("reading", &meta_path, e)),
        }
        let epoch_path = root.join("epoch");
        let epoch = match std::fs::read_to_string(&epoch_path) {
            Ok(s) => {
                s.trim().parse::<u64>().map_err(|_| Error::Corrupt {
                    file: epoch_path.display().to_string(),
                    offset: 0,
                    reason: "not a number".into(),
                })? + 1
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 1,
            Err(e) => return Err(io("reading", &epoch_path, e)),
        };

        // 1. Every decision any coordinator made durable.
        let mut committed: HashSet<TxnId> = HashSet::new();
        let mut base_ended: HashSet<TxnId> = HashSet::new();
        let mut decision_ends: HashMap<u32, LogPosition> = HashMap::new();
        for (n, dir) in node::decision_dirs(&root)? {
            // Another node's, copied here by a replica that runs already:
            // read as it is.
            let repair = scope.is_none_or(|s| s.node == n);
            let (found, end) = read_decisions(&dir, n, repair)?;
            committed.extend(found.committed);
            base_ended.extend(found.base_ended);
            decision_ends.insert(n, end.position);
        }
        // A node whose directory was lost and copied back from its
        // replicas: its ids go on above those its decisions name.
        let own = |t: &&TxnId| scope.is_some_and(|s| t.id >> 56 == u64::from(s.node));
        let logged = committed
            .iter()
            .filter(own)
            .map(|t| ((t.id >> EPOCH_SHIFT) & 0xffff) + 1);
        let epoch = logged.max().unwrap_or(0).max(epoch);
        if epoch >= 1 << (56 - EPOCH_SHIFT) {
            return Err(Error::Bound("restart epoch overflow".into()));
        }
        write_atomic(&epoch_path, format!("{epoch}\n").as_bytes())?;
        let mut report = RecoveryReport {
            epoch,
            decisions: committed.len(),
            ..RecoveryReport::default()
        };

        // 2. Each partition: checkpoint + log, in-doubt resolved, then a
        //    fresh checkpoint so the old log (and the decisions) can go.
        let mut stores = Vec::with_capacity(partitions as usize);
        let mut ends = Vec::with_capacity(partitions as usize);
        let mut recovered_base = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            if scope.is_some_and(|s| !s.local.contains(&p)) {
                stores.push(None);
                ends.push(None);
                recovered_base.push(BaseContexts::default());
                continue;
            }
            let dir = LogName::Partition(p).dir(&root);
            std::fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
            let mut rec = recover_partition(&dir, catalog, p)?;
            // A multi-process node asks the coordinators on other nodes.
            let decided = match scope {
                Some(scope) => node::decided(&rec, committed.clone(), scope.ask)?,
                None => committed.clone(),
            };
            let (c, a) = rec.resolve(&decided)?;
            // A BASE transaction whose end its coordinator logged is done,
            // whatever this partition logged of its end.
            for owner in base_ended.iter() {
                rec.base.end(*owner);
            }
            report.in_doubt_committed += c;
            report.in_doubt_aborted += a;
            if rec.stats.records > 0 || c + a > 0 || list_checkpoints(&dir)?.is_empty() {
                let bytes = rec.store.encode_checkpoint(p, rec.end, &[], &rec.base);
                write_atomic(&checkpoint_path(&dir, rec.end.lsn), &bytes)?;
                let _ = std::fs::remove_file(tmp_checkpoint_path(&dir, rec.end.lsn));
            }
            report.partitions.push(rec.stats.clone());
            ends.push(Some((dir, rec.end)));
            stores.push(Some(rec.store));
            recovered_base.push(rec.base);
        }
        // Salt: an accepted BASE transaction that did not end is rolled
        // forward from what all partitions logged of it.
        let mut unfinished: std::collections::BTreeMap<TxnId, BaseContext> = Default::default();
        for b in &recovered_base {
            for c in b.open.values() {
                match unfinished.get_mut(&c.owner) {
                    Some(u) => u.absorb(c.clone()),
                    None => {
                        unfinished.insert(c.owner, c.clone());
                    }
                }
            }
        }
        report.base_unfinished = unfinished.len();
        if partition_dirs_beyond(&root, partitions)? {
            return Err(Error::Config(format!(
                "data directory {} holds more than {partitions} partitions",
                root.display()
            )));
        }
        // 3. Everything before the new checkpoints is now redundant.
        for (dir, end) in ends.iter().flatten() {
            drop_before_checkpoint(dir, end.lsn)?;
        }
        // A multi-process node keeps its decisions: participants on other
        // nodes may still ask about them.
        for (n, _) in decision_ends.iter().filter(|_| scope.is_none()) {
            let dir = LogName::Decisions(*n).dir(&root);
            for (_, path) in list_segments(&dir)? {
                std::fs::remove_file(&path).map_err(|e| io("deleting", &path, e))?;
            }
            sync_dir(&dir)?;
        }

        // 4. Open the logs where the old ones ended.
        let crash = durability
            .crash
            .clone()
            .unwrap_or_else(|| Arc::new(CrashSwitch::never(0)));
        let template = LogConfig {
            dir: root.clone(),
            log_id: 0,
            segment_bytes: durability.segment_bytes,
            group_commit_window: durability.group_commit_window,
            max_batch_bytes: durability.max_batch_bytes,
            replicas: None,
        };
        let config = |dir: PathBuf, log: LogName| -> Result<LogConfig> {
            Ok(LogConfig {
                replicas: crate::replication::log_replicas(durability, &root, &dir, log)?,
                dir,
                log_id: log.log_id(),
                ..template.clone()
            })
        };
        let mut plogs = Vec::with_capacity(ends.len());
        for (p, end) in ends.into_iter().enumerate() {
            plogs.push(match end {
                Some((dir, end)) => Some(Arc::new(Log::open(
                    config(dir, LogName::Partition(p as u32))?,
                    end,
                    crash.clone(),
                )?)),
                None => None,
            });
        }
        let mut dlogs = Vec::new();
        for n in 0..=nodes {
            if scope.is_some_and(|s| s.node != n) {
                dlogs.push(None);
                continue;
            }
            let end = decision_ends.get(&n).copied().unwrap_or_default();
            dlogs.push(Some(Arc::new(Log::open(
                config(LogName::Decisions(n).dir(&root), LogName::Decisions(n))?,
                end,
                crash.clone(),
            )?)));
        }
        let book = scope.map(|s| s.book.clone());
        tracing::info!(
            epoch,
            decisions = report.decisions,
            in_doubt_committed = report.in_doubt_committed,
            in_doubt_aborted = report.in_doubt_aborted,
            "recovered {}",
            root.display()
        );
        Ok((
            WalSet {
                partitions: plogs,
                decisions: dlogs,
                book,
                crash,
                checkpoint_every_bytes: durability.checkpoint_every_bytes,
                report,
                txn_base: epoch << EPOCH_SHIFT,
                recovered_base: parking_lot::Mutex::new(recovered_base),
                unfinished_contexts: parking_lot::Mutex::new(unfinished.into_values().collect()),
                base_ended,
                root,
                template,
                protocol_logs: parking_lot::Mutex::new(Vec::new()),
            },
            stores,
        ))
    }

    /// The actor-side handle of partition `p`'s log.
    pub(crate) fn partition_wal(&self, p: usize) -> Option<PartitionWal> {
        let base = self
            .recovered_base
            .lock()
            .get_mut(p)
            .map(std::mem::take)
            .unwrap_or_default();
        Some(PartitionWal {
            log: self.partitions.get(p)?.as_ref()?.clone(),
            id: p as u32,
            base,
            prepared: HashMap::new(),
            checkpoint_every_bytes: self.checkpoint_every_bytes,
            last_checkpoint_lsn: 0,
            checkpointing: Arc::new(AtomicBool::new(false)),
            scratch: Vec::new(),
            context_commit: None,
        })
    }

    /// Logs a commit decision in `node`'s decision log and waits until it
    /// is durable.
    pub async fn log_decision(
        &self,
        node: NodeId,
        txn: TxnId,
        participants: &[usize],
    ) -> Result<()> {
        let parts: smallvec::SmallVec<[u32; 8]> = participants.iter().map(|&p| p as u32).collect();
        self.log_at_coordinator(node, txn, RecordKind::Decision, |buf| {
            encode_decision(buf, txn, &parts)
        })
        .await
    }

    /// Salt: the BASE transaction `owner` ended; logged (durably) at its
    /// coordinator before any partition drops its context, so recovery
    /// never rolls it forward from a partial context.
    pub async fn log_context_end(&self, node: NodeId, owner: TxnId) -> Result<()> {
        self.log_at_coordinator(node, owner, RecordKind::BaseEnd, |buf| put_txn(buf, owner))
            .await
    }

    /// Appends a record to coordinator `node`'s decision log and waits
    /// until it is durable.
    async fn log_at_coordinator(
        &self,
        node: NodeId,
        txn: TxnId,
        kind: RecordKind,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        let log = self
            .decisions
            .get(node.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::Internal(format!("no decision log for coordinator node {}", node.0))
            })?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // On an error the waiter already carries it to `rx`.
        let _ = log.append_then(
            kind,
            encode,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await.map_err(|_| {
            Error::Storage(format!(
                "the decision log of node {} stopped before the {kind:?} record of {txn} was durable",
                node.0
            ))
        })?
    }

    /// The logs' statistics; a protocol's own logs count with the
    /// partitions' (they hold its partitions' writes).
    pub fn stats(&self) -> WalStats {
        let mut s = WalStats::default();
        for l in self.partitions.iter().flatten() {
            s.partitions.add(&l.stats());
        }
        for l in self.protocol_logs.lock().iter() {
            s.partitions.add(&l.stats());
        }
        for l in self.decisions.iter().flatten() {
            s.decisions.add(&l.stats());
        }
        s
    }

    /// Nothing more can commit: a log failed or the power was cut.
    pub fn is_down(&self) -> bool {
        self.crash.is_crashed() || self.logs().iter().any(|l| l.is_down())
    }

    /// Simulated power loss: every writer stops at once and loses what it
    /// had not synced; returns when all have stopped.
    pub fn crash(&self) {
        self.crash.crash_now();
        let logs = self.logs();
        for l in &logs {
            l.wake();
        }
        for l in &logs {
            l.join();
        }
    }

    /// Clean stop: writers flush what is pending and end.
    pub fn close(&self) {
        for l in self.logs() {
            l.close();
        }
    }

    pub(crate) fn logs(&self) -> Vec<Arc<Log>> {
        let mut logs: Vec<Arc<Log>> = self
            .partitions
            .iter()
            .chain(&self.decisions)
            .flatten()
            .cloned()
            .collect();
        logs.extend(self.protocol_logs.lock().iter().cloned());
        logs
    }

    /// Where a protocol keeps logs of its own (`<data dir>/<name>`).
    pub fn protocol_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Opens a log of a protocol's own in `dir`, continuing at `end` (what
    /// the protocol's recovery read), with the cluster's log settings and
    /// crash switch; it is crashed, closed and counted with the engine's.
    pub fn open_protocol_log(
        &self,
        dir: PathBuf,
        log_id: u32,
        end: LogPosition,
    ) -> Result<Arc<Log>> {
        std::fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
        let config = LogConfig {
            dir,
            log_id,
            ..self.template.clone()
        };
        let log = Arc::new(Log::open(config, end, self.crash.clone())?);
        self.protocol_logs.lock().push(log.clone());
        Ok(log)
    }

    /// How many log bytes a partition writes between checkpoints (0: only
    /// at start).
    pub fn checkpoint_every_bytes(&self) -> u64 {
        self.checkpoint_every_bytes
    }
}

fn partition_dirs_beyond(root: &Path, partitions: u32) -> Result<bool> {
    let entries = std::fs::read_dir(root).map_err(|e| io("listing", root, e))?;
    Ok(entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|s| s.strip_prefix("part-"))
            .and_then(|s| s.parse::<u32>().ok())
            .is_some_and(|p| p >= partitions)
    }))
}

/// Bulk-load records are split so none exceeds this payload size.
const LOAD_CHUNK_BYTES: usize = 1 << 20;

/// Coordinator field of Prepare records: recovery looks decisions up in
/// every decision log, so the node is not needed (reserved).
const ANY_COORDINATOR: u32 = u32::MAX;

/// A partition actor's side of its log.
pub struct PartitionWal {
    log: Arc<Log>,
    id: u32,
    /// Transactions prepared here (a Prepare record was logged) and not yet
    /// decided.
    prepared: HashMap<TxnId, u32>,
    checkpoint_every_bytes: u64,
    last_checkpoint_lsn: u64,
    checkpointing: Arc<AtomicBool>,
    scratch: Vec<u8>,
    /// Salt: BASE contexts not yet ended (kept in checkpoints).
    base: BaseContexts,
    /// Salt: the subtransaction whose context was just logged to commit
    /// with it: its Commit record is written even if it wrote nothing
    /// (recovery attaches a context only to a Commit or Prepare); `false`:
    /// logging it failed.
    context_commit: Option<(TxnId, bool)>,
}

impl PartitionWal {
    /// Salt: logs what alkaline subtransaction `c.sub` ran here, just
    /// before its Commit (`committed`: it commits with that record) or
    /// Prepare record, which forces it.
    /// A commit whose context could not be logged is never acknowledged.
    pub fn log_context(&mut self, c: BaseContext, committed: bool) {
        if let Err(e) = self
            .log
            .append(RecordKind::BaseContext, |b| encode_base_context(b, &c))
        {
            tracing::error!(partition = self.id, "cannot log a BASE context: {e}");
            if committed {
                self.context_commit = Some((c.sub, false));
            }
            return;
        }
        if committed {
            self.context_commit = Some((c.sub, true));
            self.base.commit(c);
        } else {
            self.base.pending.insert(c.sub, c);
        }
    }

    /// Salt: what the BASE transactions that have not ended ran here (the
    /// contexts of their committed subtransactions), of those `which`
    /// picks.
    pub fn open_contexts(&self, which: impl Fn(TxnId) -> bool) -> Vec<BaseContext> {
        self.base
            .open
            .values()
            .filter(|c| which(c.owner))
            .cloned()
            .collect()
    }

    /// Salt: the BASE transaction `owner` ended (its coordinator logged it
    /// durably); its context here can go.
    /// Returns whether it logged an end record (the owner had a context
    /// here).
    pub fn context_end(&mut self, owner: TxnId) -> bool {
        if !self.base.open.contains_key(&owner) {
            return false;
        }
        if let Err(e) = self.log.append(RecordKind::BaseEnd, |b| put_txn(b, owner)) {
            tracing::error!(partition = self.id, "cannot log a BASE end: {e}");
        }
        self.base.end(owner);
        true
    }

    /// Commit of `txn` at this partition; call before the store commits
    /// (the redo is read from its undo). One-round commits log a Commit
    /// record and are acknowledged once it is durable; commits of a
    /// prepared transaction log its Outcome (the coordinator's decision
    /// record is the durable one) and are acknowledged at once.
    pub fn commit<T: Send + 'static>(
        &mut self,
        store: &PartitionStore,
        txn: TxnId,
        reply: Reply<T>,
        value: T,
    ) {
        if self.prepared.remove(&txn).is_some() {
            self.base.decide(txn, true);
            if let Err(e) = self
                .log
                .append(RecordKind::Outcome, |b| encode_outcome(b, txn, true))
            {
                tracing::error!(partition = self.id, %txn, "cannot log an outcome: {e}");
            }
            reply.send(value);
            return;
        }
        let context = self.context_commit.take().filter(|&(sub, _)| sub == txn);
        if let Some((_, false)) = context {
            // Acknowledging it would tell the coordinator that results are
            // durable which recovery cannot replay (a read-only
            // subtransaction would be acknowledged at once): the reply is
            // dropped, and the outcome stays unknown to the coordinator.
            tracing::error!(partition = self.id, %txn, "commit not acknowledged: its BASE context is not logged");
            return;
        }
        let has_context = context.is_some();
        if !store.has_writes(txn) && !has_context {
            self.after_durable(reply, value);
            return;
        }
        self.log_versions(store, txn);
        let _ = self.log.append_then(
            RecordKind::Commit,
            |buf| {
                put_txn(buf, txn);
                store.encode_redo(txn, buf);
            },
            Box::new(move |r| match r {
                Ok(()) => reply.send(value),
                // No answer: the caller sees the commit fail, never a false ack.
                Err(e) => tracing::error!(%txn, "commit not durable: {e}"),
            }),
        );
    }

    /// Phase one for a participant that wrote: log Prepare with the redo,
    /// vote yes once durable (no if the log failed).
    pub fn prepare(&mut self, store: &PartitionStore, txn: TxnId, reply: Reply<Vote>) {
        self.prepared.insert(txn, ANY_COORDINATOR);
        self.log_versions(store, txn);
        let _ = self.log.append_then(
            RecordKind::Prepare,
            |buf| {
                put_txn(buf, txn);
                put_u32(buf, ANY_COORDINATOR);
                store.encode_redo(txn, buf);
            },
            // After a log failure no vote is sent: the coordinator sees a
            // participant that cannot answer, aborts, and does not retry.
            Box::new(move |r| match r {
                Ok(()) => reply.send(Vote::Yes),
                Err(e) => tracing::error!(%txn, "prepare not durable: {e}"),
            }),
        );
    }

    /// When the run records a history: the versions `txn` leaves the
    /// keys it wrote at, just before its Commit or Prepare record (in the
    /// same batch), so a recovery from this log, here or at a replica
    /// that takes the partition over, goes on from the versions the
    /// history names. A failure shows in the record after it.
    fn log_versions(&mut self, store: &PartitionStore, txn: TxnId) {
        let versions = store.versions_of(txn);
        if versions.is_empty() {
            return;
        }
        if let Err(e) = self
            .log
            .append(RecordKind::Versions, |b| encode_versions(b, txn, &versions))
        {
            tracing::error!(partition = self.id, %txn, "cannot log recorded versions: {e}");
        }
    }

    /// True if `txn` prepared here and awaits its decision.
    pub fn is_prepared(&self, txn: TxnId) -> bool {
        self.prepared.contains_key(&txn)
    }

    /// Whether `owner` (a BASE transaction, or a chopped Callas one) has
    /// a context open here: a subtransaction of it committed here, and it
    /// has not ended.
    pub fn has_open_context(&self, owner: TxnId) -> bool {
        self.base.open.contains_key(&owner)
    }

    /// An abort; a prepared transaction's is logged (unforced).
    pub fn abort(&mut self, txn: TxnId) {
        self.base.decide(txn, false);
        if self.prepared.remove(&txn).is_some() {
            if let Err(e) = self
                .log
                .append(RecordKind::Outcome, |b| encode_outcome(b, txn, false))
            {
                tracing::error!(partition = self.id, %txn, "cannot log an outcome: {e}");
            }
        }
    }

    /// Sends `value` once the log is durable up to its current end: the
    /// answer of a read-only participant, which may have read writes whose
    /// records are not durable yet.
    pub fn after_durable<T: Send + 'static>(&self, reply: Reply<T>, value: T) {
        let end = self.log.position().lsn;
        self.log.when_durable(
            end,
            Box::new(move |r| {
                if r.is_ok() {
                    reply.send(value);
                }
            }),
        );
    }

    /// Bulk load: rows go into the store and into Load records; the answer
    /// is sent once they are durable.
    pub fn load(
        &mut self,
        store: &mut PartitionStore,
        table: TableId,
        rows: Vec<Row>,
        reply: Reply<Result<()>>,
    ) {
        let mut result = Ok(());
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let mut w = RedoWriter::start(&mut buf);
        for row in rows {
            let mark = buf.len();
            w.put(&mut buf, table, &row);
            if let Err(e) = store.load(table, row) {
                buf.truncate(mark);
                w.forget_last();
                result = Err(e);
                break;
            }
            if buf.len() >= LOAD_CHUNK_BYTES {
                w.finish(&mut buf);
                chunks.push(std::mem::take(&mut buf));
                w = RedoWriter::start(&mut buf);
            }
        }
        w.finish(&mut buf);
        chunks.push(buf);
        let mut end = self.log.position().lsn;
        for c in &chunks {
            // Every chunk begins with its u32 count; an empty one (count 0)
            // carries nothing.
            if c.len() <= 4 || c[..4] == [0, 0, 0, 0] {
                continue;
            }
            match self
                .log
                .append(RecordKind::Load, |b| b.extend_from_slice(c))
            {
                Ok(e) => end = e,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Some(mut c) = chunks.pop() {
            c.clear();
            self.scratch = c;
        }
        self.log
            .when_durable(end, Box::new(move |r| reply.send(result.and(r))));
    }

    /// Takes a checkpoint when enough log has been written since the last
    /// one (and none is being installed). Called between messages.
    pub fn maybe_checkpoint(&mut self, store: &PartitionStore) {
        if self.checkpoint_every_bytes == 0 || self.checkpointing.load(Ordering::Acquire) {
            return;
        }
        let pos = self.log.position();
        if pos.lsn.saturating_sub(self.last_checkpoint_lsn) < self.checkpoint_every_bytes {
            return;
        }
        self.checkpointing.store(true, Ordering::Release);
        let mut in_doubt: Vec<(TxnId, u32)> = self.prepared.iter().map(|(&t, &c)| (t, c)).collect();
        in_doubt.sort();
        let bytes = store.encode_checkpoint(self.id, pos, &in_doubt, &self.base);
        let flag = self.checkpointing.clone();
        let id = self.id;
        self.log.checkpoint(
            pos.lsn,
            bytes,
            Box::new(move |r| {
                if let Err(e) = r {
                    tracing::error!(partition = id, "checkpoint failed: {e}");
                }
                flag.store(false, Ordering::Release);
            }),
        );
        self.last_checkpoint_lsn = pos.lsn;
    }
}

impl crate::Cluster {
    /// What recovery found at start (`None` without a log).
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.shared().wal.as_ref().map(|w| &w.report)
    }

    /// Log statistics so far (`None` without a log).
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.shared().wal.as_ref().map(|w| w.stats())
    }

    /// Simulates a power cut: every log writer stops at once, losing what it
    /// had not synced, and no further commit is acknowledged. The cluster is
    /// useless afterwards; start a new one on the same data directory to
    /// recover. Without a log this does nothing.
    pub fn crash(&self) {
        if let Some(w) = &self.shared().wal {
            w.crash();
        }
    }

    /// Stops the log writers after they flushed what is pending (a clean
    /// shutdown; later commits fail). Without a log this does nothing.
    pub fn close_logs(&self) {
        if let Some(w) = &self.shared().wal {
            w.close();
        }
    }
}
