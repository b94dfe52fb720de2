//! The store's side of durability: encoding a transaction's redo (its
//! after-images) straight from the undo log into a log buffer, applying
//! redo at recovery, and encoding the committed state for a checkpoint.
//!
//! ```text
//!  commit / prepare:  undo[txn] ──► each touched row once ──► Put(after-image) | Delete(pk)
//!  recovery:          Put ──► replace the row (and its index entries);  Delete ──► remove
//!  checkpoint:        rows  ─┬─ rows no active txn touched: as they are
//!                            └─ rows an active txn touched: its before-image
//!                               (undo applied newest-first to a copy)
//! ```
//!
//! Strict two-phase locking gives each row at most one active writer, so a
//! before-image computed from one transaction's undo is the committed value.

use std::collections::{HashMap, HashSet};

use brine_core::{Error, IndexId, Key, Result, Row, TableId, TxnId};

use crate::wal::record::{RedoOp, RedoWriter};
use crate::{insert_row, PartitionStore, Undo};

/// Above this many changes a transaction's touched rows are deduplicated
/// with a hash set rather than a linear scan.
const LINEAR_DEDUP_MAX: usize = 16;

impl PartitionStore {
    /// Appends `txn`'s redo list (each row it changed once, with its
    /// current after-image) to `buf`; returns the number of entries.
    /// Allocates nothing for transactions of up to 16 changes.
    pub fn encode_redo(&self, txn: TxnId, buf: &mut Vec<u8>) -> u32 {
        let mut w = RedoWriter::start(buf);
        if let Some(log) = self.undo.get(&txn) {
            let mut seen: HashSet<(TableId, &Key)> = HashSet::new();
            for (i, u) in log.iter().enumerate() {
                let (table, pk) = u.target();
                let dup = if log.len() <= LINEAR_DEDUP_MAX {
                    log[..i].iter().any(|p| p.target() == (table, pk))
                } else {
                    !seen.insert((table, pk))
                };
                if dup {
                    continue;
                }
                match self.get(table, pk) {
                    Some(row) => w.put(buf, table, row),
                    None => w.delete(buf, table, pk),
                }
            }
        }
        let n = w.count();
        w.finish(buf);
        n
    }

    /// Applies one redo entry: the row becomes exactly the after-image (or
    /// disappears). Idempotent. Used by recovery only: no undo, no locks.
    pub fn apply_redo(&mut self, op: RedoOp) -> Result<()> {
        let table = match &op {
            RedoOp::Put { table, .. } | RedoOp::Delete { table, .. } => *table,
        };
        self.check_table(table)?;
        let def = self.catalog.table(table);
        let data = &mut self.tables[table.0 as usize];
        let pk = match &op {
            RedoOp::Put { row, .. } => {
                if row.len() != def.columns.len() {
                    return Err(Error::Internal(format!(
                        "redo row for `{}` has {} columns, the table has {}",
                        def.name,
                        row.len(),
                        def.columns.len()
                    )));
                }
                def.primary_key_of(row)
            }
            RedoOp::Delete { key, .. } => key.clone(),
        };
        if let Some(old) = data.rows.remove(&pk) {
            for (i, set) in data.secondary.iter_mut().enumerate() {
                set.remove(&def.secondary_key_of(IndexId(i as u32 + 1), &old));
            }
        }
        if let RedoOp::Put { row, .. } = op {
            insert_row(def, data, row)?;
        }
        Ok(())
    }

    /// The committed value of every row some active transaction changed:
    /// `None` if it did not exist before that transaction.
    fn before_images(&self) -> HashMap<(TableId, Key), Option<Row>> {
        let mut out: HashMap<(TableId, Key), Option<Row>> = HashMap::new();
        for log in self.undo.values() {
            for u in log.iter().rev() {
                let (table, pk) = u.target();
                let slot = out
                    .entry((table, pk.clone()))
                    .or_insert_with(|| self.get(table, pk).cloned());
                match &u.undo {
                    Undo::Insert { .. } => *slot = None,
                    Undo::Delete { row, .. } => *slot = Some(row.clone()),
                    Undo::Update { old, .. } => {
                        if let Some(r) = slot.as_mut() {
                            for (c, v) in old {
                                r[*c] = v.clone();
                            }
                        }
                    }
                    Undo::Add { deltas, .. } => {
                        if let Some(r) = slot.as_mut() {
                            for (c, d) in deltas {
                                if let Ok(v) = brine_sql::arith(brine_sql::ArithOp::Sub, &r[*c], d)
                                {
                                    r[*c] = v;
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Calls `f(table, row)` for every committed row: rows no active
    /// transaction touched as stored, the others as they were before it.
    pub fn for_each_committed_row(&self, mut f: impl FnMut(TableId, &Row)) {
        let before = self.before_images();
        for (t, data) in self.tables.iter().enumerate() {
            let table = TableId(t as u32);
            for (pk, row) in &data.rows {
                match before.get(&(table, pk.clone())) {
                    None => f(table, row),
                    Some(Some(old)) => f(table, old),
                    Some(None) => {}
                }
            }
            // Committed rows an active transaction deleted.
            for ((bt, pk), old) in &before {
                if *bt == table && !data.rows.contains_key(pk) {
                    if let Some(old) = old {
                        f(table, old);
                    }
                }
            }
        }
    }

    /// Number of committed rows per table (see `for_each_committed_row`).
    pub fn committed_counts(&self) -> Vec<u64> {
        let mut n = vec![0u64; self.tables.len()];
        self.for_each_committed_row(|t, _| n[t.0 as usize] += 1);
        n
    }

    /// Rows of `table`, for recovery tests and checks.
    pub fn rows(&self, table: TableId) -> impl Iterator<Item = &Row> + '_ {
        self.tables
            .get(table.0 as usize)
            .into_iter()
            .flat_map(|t| t.rows.values())
    }
}
