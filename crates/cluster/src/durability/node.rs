//! Durability of a multi-process node: what it recovers at start, the
//! decisions it reads first, and (with replicated logs) a partition it
//! comes to lead while it runs, recovered from its copy of the log.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use brine_core::{Catalog, Result, TxnId};
use brine_storage::checkpoint::checkpoint_path;
use brine_storage::recovery::{read_decisions, recover_partition, PartitionRecovery};
use brine_storage::wal::{Log, LogConfig, Replicas};
use brine_storage::PartitionStore;

use super::{drop_before_checkpoint, write_atomic, PartitionWal, WalSet};
use crate::decision::DecisionBook;
use crate::replication::LogName;

/// What a multi-process node recovers: its partitions and its own decision
/// log; `ask` gets, from the coordinators on other nodes, which of the
/// given prepared transactions committed (it may wait for them).
pub(crate) struct NodeScope<'a> {
    pub node: u32,
    pub local: &'a [u32],
    pub ask: &'a (dyn Fn(&[TxnId]) -> Result<HashSet<TxnId>> + Sync),
    /// Made from `node_decisions` before recovery; answers peers' inquiries.
    pub book: Arc<DecisionBook>,
}

/// The commit decisions in node `node`'s decision log under `data_dir`
/// (a multi-process node reads them before anything else, to answer its
/// peers' recoveries while its own runs).
pub fn node_decisions(data_dir: &Path, node: u32) -> Result<HashSet<TxnId>> {
    let dir = LogName::Decisions(node).dir(data_dir);
    if !dir.exists() {
        return Ok(HashSet::new());
    }
    Ok(read_decisions(&dir, node, true)?.0.committed)
}

/// The decision logs in the data directory `root` (`coord-<n>`), by node:
/// a node's own, and with replicated logs its copies of others'.
pub(super) fn decision_dirs(root: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let entries = std::fs::read_dir(root).map_err(|e| super::io("listing", root, e))?;
    Ok(entries
        .flatten()
        .filter_map(|e| {
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("coord-")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect())
}

/// The prepared transactions of `rec` that committed: those in `known`,
/// then those `ask` says committed (their coordinators, or whoever
/// decides for them now), asked only of the rest.
pub(super) fn decided(
    rec: &PartitionRecovery,
    mut known: HashSet<TxnId>,
    ask: &(dyn Fn(&[TxnId]) -> Result<HashSet<TxnId>> + Sync),
) -> Result<HashSet<TxnId>> {
    let rest: Vec<TxnId> = rec
        .in_doubt
        .iter()
        .map(|d| d.txn)
        .filter(|t| !known.contains(t))
        .collect();
    if !rest.is_empty() {
        known.extend(ask(&rest)?);
    }
    Ok(known)
}

impl WalSet {
    /// Partition `p`, whose log's group this node came to lead (its copy
    /// cut at what the group committed): recovered from that copy, its
    /// prepared transactions decided by every decision log this node
    /// holds a copy of, then by `ask` (their coordinators, or whoever
    /// leads their decision logs now), checkpointed, and its log opened
    /// with `replicas`. Returns its rows and its actor's side of the log.
    pub(crate) fn adopt_partition(
        &self,
        p: u32,
        catalog: &Arc<Catalog>,
        ask: &(dyn Fn(&[TxnId]) -> Result<HashSet<TxnId>> + Sync),
        replicas: Option<Replicas>,
    ) -> Result<(PartitionStore, PartitionWal)> {
        let dir = LogName::Partition(p).dir(&self.root);
        let mut rec = recover_partition(&dir, catalog, p)?;
        // The decisions, and Salt's and Callas' ends, of every decision
        // log this node holds a copy of (its replicas may be writing them:
        // read as they are), when the copy leaves something to decide or
        // to end: the takeover's time is the partition's unavailability.
        let mut known = HashSet::new();
        if !rec.in_doubt.is_empty() || !rec.base.is_empty() {
            for (n, dir) in decision_dirs(&self.root)? {
                let found = read_decisions(&dir, n, false)?.0;
                known.extend(found.committed);
                for owner in found.base_ended {
                    rec.base.end(owner);
                }
            }
        }
        let decided = decided(&rec, known, ask)?;
        let (c, a) = rec.resolve(&decided)?;
        tracing::info!(
            partition = p,
            in_doubt_committed = c,
            in_doubt_aborted = a,
            records = rec.stats.records,
            "partition recovered from this node's copy of its log"
        );
        let bytes = rec.store.encode_checkpoint(p, rec.end, &[], &rec.base);
        write_atomic(&checkpoint_path(&dir, rec.end.lsn), &bytes)?;
        drop_before_checkpoint(&dir, rec.end.lsn)?;
        let config = LogConfig {
            dir,
            log_id: p,
            replicas,
            ..self.template.clone()
        };
        let log = Arc::new(Log::open(config, rec.end, self.crash.clone())?);
        self.protocol_logs.lock().push(log.clone());
        let wal = PartitionWal {
            log,
            id: p,
            base: rec.base,
            prepared: Default::default(),
            checkpoint_every_bytes: self.checkpoint_every_bytes,
            last_checkpoint_lsn: 0,
            checkpointing: Arc::new(AtomicBool::new(false)),
            scratch: Vec::new(),
            context_commit: None,
        };
        Ok((rec.store, wal))
    }
}
