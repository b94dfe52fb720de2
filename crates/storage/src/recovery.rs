//! Recovery of one partition (newest checkpoint, then the log after it) and
//! of a coordinator's decision log.
//!
//! ```text
//!  newest *.ckpt ──► committed rows + in-doubt txns ──► replay frames >= its lsn:
//!     Commit / Load ──► apply redo
//!     Prepare       ──► remember (txn, redo) as in doubt
//!     Outcome       ──► commit: apply the remembered redo; abort: forget it
//!  end of log: torn tail truncated; the caller resolves what is still in
//!  doubt from the coordinators' decision records (none found: abort, the
//!  coordinator never logged a commit, so nobody was told one).
//! ```
//!
//! A damaged checkpoint, a gap between segments, or a damaged record with
//! valid records after it is an [`Error::Corrupt`]: recovery never guesses.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use brine_core::{Catalog, Error, Result, TxnId};

use crate::checkpoint::{list_checkpoints, load_checkpoint, BaseContexts, InDoubt};
use crate::wal::reader::{read_log, LogEnd, ReadOptions};
use crate::wal::record::Record;
use crate::wal::writer::LogPosition;
use crate::PartitionStore;

/// What replaying a partition's checkpoint and log found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Lsn of the checkpoint recovery started from (0: none).
    pub checkpoint_lsn: u64,
    pub records: u64,
    pub commits: u64,
    pub prepares: u64,
    pub torn_bytes: u64,
}

/// A partition rebuilt up to the end of its log, with the transactions
/// still in doubt there.
pub struct PartitionRecovery {
    pub store: PartitionStore,
    pub end: LogPosition,
    pub in_doubt: Vec<InDoubt>,
    pub stats: RecoveryStats,
    /// Salt: contexts of BASE transactions that had not ended.
    pub base: BaseContexts,
}

fn bad_record(dir: &Path, lsn: u64, why: String) -> Error {
    Error::Corrupt {
        file: dir.display().to_string(),
        offset: lsn,
        reason: format!("record at lsn {lsn}: {why}"),
    }
}

/// Rebuilds partition `log_id` from `dir` (an empty or missing directory
/// gives an empty store). Truncates a torn tail.
pub fn recover_partition(
    dir: &Path,
    catalog: &Arc<Catalog>,
    log_id: u32,
) -> Result<PartitionRecovery> {
    // A .tmp checkpoint was never installed (crash before its rename).
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".ckpt.tmp"))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let (mut store, from, in_doubt, mut base) = match list_checkpoints(dir)?.pop() {
        Some((_, path)) => {
            let c = load_checkpoint(&path, catalog, log_id)?;
            (c.store, c.position, c.in_doubt, c.base)
        }
        None => (
            PartitionStore::new(catalog.clone()),
            LogPosition::default(),
            Vec::new(),
            BaseContexts::default(),
        ),
    };
    // Contexts logged just before their subtransaction's Commit/Prepare.
    let mut logged: std::collections::HashMap<TxnId, crate::wal::record::BaseContext> =
        std::collections::HashMap::new();
    // Likewise the versions of a run that records a history.
    let mut versions: std::collections::HashMap<TxnId, Vec<crate::KeyVersion>> =
        std::collections::HashMap::new();
    let mut stats = RecoveryStats {
        checkpoint_lsn: from.lsn,
        ..RecoveryStats::default()
    };
    let mut doubt: BTreeMap<TxnId, InDoubt> = in_doubt.into_iter().map(|d| (d.txn, d)).collect();
    let end: LogEnd = read_log(
        dir,
        ReadOptions {
            from,
            allow_missing_prefix: false,
            repair: true,
            log_id,
        },
        |lsn, h, payload| {
            let rec = Record::decode(h.kind, h.version, payload)
                .map_err(|e| bad_record(dir, lsn, e.0))?;
            let apply = |store: &mut PartitionStore, redo| -> Result<()> {
                for op in redo {
                    store
                        .apply_redo(op)
                        .map_err(|e| bad_record(dir, lsn, format!("cannot redo: {e}")))?;
                }
                Ok(())
            };
            match rec {
                Record::Commit { txn, redo } => {
                    stats.commits += 1;
                    apply(&mut store, redo)?;
                    if let Some(c) = logged.remove(&txn) {
                        base.commit(c);
                    }
                    if let Some(v) = versions.remove(&txn) {
                        store.apply_versions(v);
                    }
                }
                Record::Load { redo } => apply(&mut store, redo)?,
                Record::Prepare {
                    txn,
                    coordinator,
                    redo,
                } => {
                    stats.prepares += 1;
                    if let Some(c) = logged.remove(&txn) {
                        base.pending.insert(txn, c);
                    }
                    doubt.insert(
                        txn,
                        InDoubt {
                            txn,
                            coordinator,
                            redo,
                            versions: versions.remove(&txn).unwrap_or_default(),
                        },
                    );
                }
                Record::Outcome { txn, commit } => {
                    base.decide(txn, commit);
                    if let Some(d) = doubt.remove(&txn) {
                        if commit {
                            stats.commits += 1;
                            apply(&mut store, d.redo)?;
                            store.apply_versions(d.versions);
                        }
                    }
                }
                Record::Versions { txn, versions: v } => {
                    versions.insert(txn, v);
                }
                Record::BaseContext(c) => {
                    logged.insert(c.sub, c);
                }
                Record::BaseEnd { owner } => {
                    base.end(owner);
                    logged.retain(|_, c| c.owner != owner);
                }
                Record::Decision { .. } => {
                    return Err(bad_record(
                        dir,
                        lsn,
                        "a coordinator decision record in a partition log".into(),
                    ))
                }
            }
            Ok(())
        },
    )?;
    stats.records = end.records;
    stats.torn_bytes = end.torn_bytes;
    Ok(PartitionRecovery {
        store,
        end: end.position,
        in_doubt: doubt.into_values().collect(),
        stats,
        base,
    })
}

impl PartitionRecovery {
    /// Resolves the in-doubt transactions: those in `committed` are
    /// applied, the others aborted (presumed abort). Returns (committed,
    /// aborted) counts.
    pub fn resolve(&mut self, committed: &HashSet<TxnId>) -> Result<(usize, usize)> {
        let (mut c, mut a) = (0, 0);
        for d in std::mem::take(&mut self.in_doubt) {
            let commit = committed.contains(&d.txn);
            self.base.decide(d.txn, commit);
            if commit {
                for op in d.redo {
                    self.store.apply_redo(op)?;
                }
                self.store.apply_versions(d.versions);
                c += 1;
            } else {
                a += 1;
            }
        }
        Ok((c, a))
    }
}

/// What a coordinator's decision log holds.
#[derive(Debug, Default)]
pub struct Decisions {
    /// Transactions whose commit was decided.
    pub committed: HashSet<TxnId>,
    /// Salt: BASE transactions that ended (no roll-forward needed).
    pub base_ended: HashSet<TxnId>,
}

/// The commit decisions (and Salt's BASE ends) in a coordinator's decision
/// log, and where it ends. `repair`: truncates a torn tail (never on a
/// copy a replica may be writing at the time).
pub fn read_decisions(dir: &Path, log_id: u32, repair: bool) -> Result<(Decisions, LogEnd)> {
    let mut found = Decisions::default();
    let end = read_log(
        dir,
        ReadOptions {
            from: LogPosition::default(),
            allow_missing_prefix: true,
            repair,
            log_id,
        },
        |lsn, h, payload| match Record::decode(h.kind, h.version, payload)
            .map_err(|e| bad_record(dir, lsn, e.0))?
        {
            Record::Decision { txn, .. } => {
                found.committed.insert(txn);
                Ok(())
            }
            Record::BaseEnd { owner } => {
                found.base_ended.insert(owner);
                Ok(())
            }
            _ => Err(bad_record(
                dir,
                lsn,
                "a partition record in a decision log".into(),
            )),
        },
    )?;
    Ok((found, end))
}
