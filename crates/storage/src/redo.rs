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
//! Strict two-phase locking gives each row at most one running writer.
//! Callas' Runtime Pipelining does not: a same-group transaction may write
//! a row another still running wrote (it then depends on it, and commits
//! after it), and same-group blind increments interleave. A store that
//! allows that (`set_shared_rows`) logs an update column by column
//! (`RedoOp::Update`): the columns the transaction set, as it left them
//! (the other running transactions' later changes undone on a copy), and
//! the deltas of those it only incremented. A whole image would carry the
//! others' uncommitted changes, or overwrite what commits between its
//! prepare and its commit; a column another transaction sets or
//! increments after it is one that transaction depends on, so its record
//! comes later (`Rules::prepare_waits`), and deltas commute. Inserted and
//! deleted rows are logged whole, as the transaction left them.
//! Before-images undo every running transaction's changes newest first
//! across all of them.

use std::collections::{HashMap, HashSet};

use brine_core::{Error, IndexId, Key, Result, Row, TableId, TxnId};

use crate::wal::record::{RedoOp, RedoWriter};
use crate::{insert_row, Logged, PartitionStore, Undo};

/// Above this many changes a transaction's touched rows are deduplicated
/// with a hash set rather than a linear scan.
const LINEAR_DEDUP_MAX: usize = 16;

impl PartitionStore {
    /// Appends `txn`'s redo list (each row it changed once, with its
    /// current after-image) to `buf`; returns the number of entries.
    /// Allocates nothing for transactions of up to 16 changes.
    pub fn encode_redo(&self, txn: TxnId, buf: &mut Vec<u8>) -> u32 {
        if self.shared_rows {
            return self.encode_shared_redo(txn, buf);
        }
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

    /// [`encode_redo`](Self::encode_redo) where other running
    /// transactions may change the rows `txn` changed (see the module's
    /// notes).
    fn encode_shared_redo(&self, txn: TxnId, buf: &mut Vec<u8>) -> u32 {
        let mut w = RedoWriter::start(buf);
        let Some(log) = self.undo.get(&txn) else {
            w.finish(buf);
            return 0;
        };
        // Each row once, in the order first changed, with what `txn` did
        // to it.
        let mut rows: Vec<((TableId, &Key), Changed)> = Vec::new();
        let mut at: HashMap<(TableId, &Key), usize> = HashMap::new();
        for u in log {
            let target = u.target();
            let i = *at.entry(target).or_insert_with(|| {
                rows.push((target, Changed::default()));
                rows.len() - 1
            });
            rows[i].1.note(&u.undo);
        }
        // The other running transactions' changes of those rows.
        let mut others: HashMap<(TableId, &Key), Vec<&Logged>> = HashMap::new();
        for (t, l) in &self.undo {
            if *t != txn {
                for u in l.iter().filter(|u| at.contains_key(&u.target())) {
                    others.entry(u.target()).or_default().push(u);
                }
            }
        }
        for ((table, pk), changed) in rows {
            // The row as `txn` left it.
            let image = || {
                let mut image = self.get(table, pk).cloned();
                if let Some(theirs) = others.get(&(table, pk)) {
                    let mut theirs = theirs.clone();
                    theirs.sort_unstable_by_key(|u| std::cmp::Reverse(u.seq));
                    for u in theirs {
                        undo_on_copy(&mut image, &u.undo);
                    }
                }
                image
            };
            if changed.whole {
                match image() {
                    Some(row) => w.put(buf, table, &row),
                    None => w.delete(buf, table, pk),
                }
                continue;
            }
            let set: Vec<(usize, brine_core::Value)> = match image() {
                Some(row) if !changed.set.is_empty() => {
                    changed.set.iter().map(|&c| (c, row[c].clone())).collect()
                }
                _ => Vec::new(),
            };
            let add: Vec<(usize, brine_core::Value)> = changed
                .add
                .into_iter()
                .filter(|(c, _)| !changed.set.contains(c))
                .collect();
            w.update(buf, table, pk, &set, &add);
        }
        let n = w.count();
        w.finish(buf);
        n
    }

    /// Applies one redo entry: the row becomes exactly the after-image (or
    /// disappears), or gets the columns set and the deltas added. Used by
    /// recovery only: no undo, no locks.
    pub fn apply_redo(&mut self, op: RedoOp) -> Result<()> {
        let table = match &op {
            RedoOp::Put { table, .. }
            | RedoOp::Delete { table, .. }
            | RedoOp::Update { table, .. } => *table,
        };
        self.check_table(table)?;
        if let RedoOp::Update { key, set, add, .. } = op {
            let name = &self.catalog.table(table).name;
            let row = self.tables[table.0 as usize]
                .rows
                .get_mut(&key)
                .ok_or_else(|| {
                    Error::Internal(format!("redo updates a missing row of `{name}`: {key:?}"))
                })?;
            let width = row.len();
            let column = |c: usize| {
                (c < width).then_some(c).ok_or_else(|| {
                    Error::Internal(format!(
                        "redo updates column {c} of `{name}`, which has {width}"
                    ))
                })
            };
            for (c, v) in set {
                row[column(c)?] = v;
            }
            for (c, d) in &add {
                let c = column(*c)?;
                row[c] = brine_sql::arith(brine_sql::ArithOp::Add, &row[c], d)?;
            }
            return Ok(());
        }
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
            RedoOp::Update { .. } => unreachable!("applied above"),
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
    /// `None` if it did not exist before that transaction. Every running
    /// transaction's changes are undone newest first across all of them
    /// (under Runtime Pipelining several may have changed one row).
    fn before_images(&self) -> HashMap<(TableId, Key), Option<Row>> {
        let mut changes: Vec<&Logged> = self.undo.values().flatten().collect();
        changes.sort_unstable_by_key(|u| std::cmp::Reverse(u.seq));
        let mut out: HashMap<(TableId, Key), Option<Row>> = HashMap::new();
        for u in changes {
            let (table, pk) = u.target();
            let slot = out
                .entry((table, pk.clone()))
                .or_insert_with(|| self.get(table, pk).cloned());
            undo_on_copy(slot, &u.undo);
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

/// Undoes `u` on a copy of its row (`None`: the row does not exist).
fn undo_on_copy(slot: &mut Option<Row>, u: &Undo) {
    match u {
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
                    if let Ok(v) = brine_sql::arith(brine_sql::ArithOp::Sub, &r[*c], d) {
                        r[*c] = v;
                    }
                }
            }
        }
    }
}

/// What one transaction did to one row: inserted or deleted it (logged
/// whole), or set and incremented which columns.
#[derive(Default)]
struct Changed {
    whole: bool,
    set: Vec<usize>,
    add: Vec<(usize, brine_core::Value)>,
}

impl Changed {
    fn note(&mut self, u: &Undo) {
        match u {
            Undo::Insert { .. } | Undo::Delete { .. } => self.whole = true,
            Undo::Update { old, .. } => {
                for (c, _) in old {
                    if !self.set.contains(c) {
                        self.set.push(*c);
                    }
                }
            }
            Undo::Add { deltas, .. } => add_deltas(&mut self.add, deltas),
        }
    }
}

/// Adds `more` (column, delta) pairs into `sums`.
fn add_deltas(sums: &mut Vec<(usize, brine_core::Value)>, more: &[(usize, brine_core::Value)]) {
    for (c, d) in more {
        match sums.iter_mut().find(|(s, _)| s == c) {
            Some((_, v)) => {
                if let Ok(sum) = brine_sql::arith(brine_sql::ArithOp::Add, v, d) {
                    *v = sum;
                }
            }
            None => sums.push((*c, d.clone())),
        }
    }
}
