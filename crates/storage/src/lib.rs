//! A partition's data: every table's rows for one partition, their indexes,
//! and per-transaction undo.
//!
//! ```text
//!  partition actor (single thread)
//!     |  lock_needs(plan, params)  -> [LockNeed]  (no locks taken here)
//!     |  ... lock table grants all (re-ask lock_needs after any wait) ...
//!     |  execute(txn, plan, params) -> QueryResult   (records undo)
//!     |  commit(txn) | abort(txn)                    (drop | apply undo)
//!     v
//!  PartitionStore
//!     table t: primary   BTreeMap<pk, Row>        (pk order)
//!              index i:  BTreeSet<index cols ++ pk>
//!     undo:    txn -> [Insert | Update(old values) | Delete(old row)]
//! ```
//!
//! # What it guarantees
//!
//! * **Index consistency.** After every `load`, `execute`, `commit` and
//!   `abort`, each secondary index holds exactly
//!   `TableDef::secondary_key_of(i, row)` for every stored row
//!   (`check_consistency` verifies it).
//! * **Statement atomicity.** A statement that fails (duplicate key, unique
//!   violation, type error, arithmetic overflow) changes nothing: rows it
//!   already changed are restored before the error is returned.
//! * **Exact undo.** `abort` restores every row and index entry the
//!   transaction touched to its state before the transaction's first write.
//! * **Type safety.** Every stored value passed `check_value` for its
//!   column; `Value::Max` and wrong types never reach the maps.
//! * **No locking inside.** The store is single-threaded (`&mut self`). It
//!   computes the locks a statement needs (`lock_needs`) but never waits;
//!   the caller acquires them and calls `execute` once all are granted.
//!
//! # Locks a statement needs
//!
//! Needs, in acquisition order:
//!
//! | statement                  | needs, in acquisition order                        |
//! |----------------------------|----------------------------------------------------|
//! | point SELECT               | Read Point(PRIMARY, pk)                            |
//! | range SELECT, primary      | RangeRead Range(PRIMARY, scanned interval)         |
//! | range SELECT, secondary i  | RangeRead Range(i, interval), Read Point(PRIMARY, pk) per row passed over (filters match or not) |
//! | full scan                  | RangeRead Range(PRIMARY, unbounded)                |
//! | INSERT                     | Write Point(PRIMARY, pk), Write Point(i, sec key) per index |
//! | point UPDATE               | Write PK; per index whose columns change: Write old and new sec key |
//! | range UPDATE / DELETE      | RangeRead interval, then per matching row as the point form; by a secondary index, Read Point(PRIMARY, pk) per row passed over |
//! | point DELETE               | Write PK, Write each sec key of the row            |
//!
//! With LIMIT, the range lock covers the interval actually scanned: from the
//! start of the scan up to and including the last key returned (or the whole
//! interval when fewer rows than the limit exist).
//!
//! The needs are the same at every isolation level; what differs is how
//! long the caller holds them. At read committed (S = {R, W}) the partition
//! releases read and range-read locks as soon as the statement ran, so a scan
//! still never sees uncommitted inserts or misses uncommitted deletes, yet one
//! short interval lock costs far less than a lock per returned row.
//!
//! Needs that depend on data (rows returned, old secondary keys) are
//! computed against the current state; the partition re-asks after waiting.

use brine_core::access::interval_nonempty;
use brine_core::schema::coerce_value;
use brine_core::{
    Access, Catalog, Error, IndexId, Key, LockNeed, LockTarget, Result, Row, TableDef, TableId,
    TxnId, Value,
};
use brine_sql::{
    arith, limit_value, AggFunc, Aggregate, ArithOp, Assignment, InsertPlan, Plan, Predicate,
    Projection, QueryResult, SetExpr, Statement,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use brine_check::Op;
pub use record::{KeyVersion, VerState};

/// A partition incarnation's version ids are `version_base + 1` on, its
/// base a multiple of 2^40 ([`PartitionStore::enable_recording`]): the
/// bits above tell its versions from another incarnation's.
pub const VERSION_RANGE_BITS: u32 = 40;
use record::{Recorder, Scanned};
use std::ops::Bound;
use std::sync::Arc;

/// One table's rows on this partition.
#[derive(Clone, Debug, Default, PartialEq)]
struct TableData {
    rows: BTreeMap<Key, Row>,
    /// `secondary[i]` is index `IndexId(i + 1)`.
    secondary: Vec<BTreeSet<Key>>,
}

/// How to undo one row change.
#[derive(Clone, Debug)]
enum Undo {
    Insert {
        table: TableId,
        pk: Key,
    },
    /// The old values of the columns the update changed.
    Update {
        table: TableId,
        pk: Key,
        old: Vec<(usize, Value)>,
    },
    Delete {
        table: TableId,
        pk: Key,
        row: Row,
    },
    /// A blind increment (`SET c = c + e`), undone by subtracting what it
    /// added: exact whatever other uncommitted increments of the same
    /// column came after it (Callas' Runtime Pipelining lets same-group
    /// transactions increment a row concurrently).
    Add {
        table: TableId,
        pk: Key,
        deltas: Vec<(usize, Value)>,
    },
}

impl Undo {
    fn target(&self) -> (TableId, &Key) {
        match self {
            Undo::Insert { table, pk }
            | Undo::Update { table, pk, .. }
            | Undo::Delete { table, pk, .. }
            | Undo::Add { table, pk, .. } => (*table, pk),
        }
    }
}

/// An undo entry with its position in the partition's order of changes
/// (what [`PartitionStore::abort_all`] undoes newest first).
#[derive(Clone, Debug)]
struct Logged {
    seq: u64,
    undo: Undo,
}

impl std::ops::Deref for Logged {
    type Target = Undo;
    fn deref(&self) -> &Undo {
        &self.undo
    }
}

/// The rows of every table for one partition. See the crate docs.
#[derive(Debug)]
pub struct PartitionStore {
    catalog: Arc<Catalog>,
    tables: Vec<TableData>,
    undo: HashMap<TxnId, Vec<Logged>>,
    /// Sequence number of the next undo entry.
    undo_seq: u64,
    /// Row versions for history recording; `None` unless enabled.
    recorder: Option<Box<Recorder>>,
    /// Versions a recovery read from the checkpoint and the log, kept for
    /// the recorder (`enable_recording`) or the next checkpoint.
    kept_versions: record::Versions,
    /// Several running transactions may change one row (Callas' Runtime
    /// Pipelining): their redo is computed per row (`redo.rs`).
    shared_rows: bool,
}

/// One change of a transaction for the log: the row's after-image, `None`
/// when deleted.
pub type WriteSetEntry = (TableId, Key, Option<Row>);

impl PartitionStore {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        let tables = catalog
            .tables()
            .iter()
            .map(|t| TableData {
                rows: BTreeMap::new(),
                secondary: vec![BTreeSet::new(); t.indexes.len()],
            })
            .collect();
        PartitionStore {
            catalog,
            tables,
            undo: HashMap::new(),
            undo_seq: 0,
            recorder: None,
            kept_versions: Vec::new(),
            shared_rows: false,
        }
    }

    /// Starts recording row versions (see the `record` module): writes draw version
    /// ids from `version_base + 1` on, so give each partition a disjoint
    /// range (and each incarnation of a partition recovered from its log
    /// another), `version_base` a multiple of 2^[`VERSION_RANGE_BITS`]. Rows present now are at version 0, or at the version
    /// their recovery found ([`PartitionStore::apply_versions`]).
    pub fn enable_recording(&mut self, version_base: u64) {
        let kept = std::mem::take(&mut self.kept_versions);
        self.recorder = Some(Box::new(Recorder::new(
            kept,
            self.tables.len(),
            version_base,
        )));
    }

    /// The versions `txn` leaves the keys it wrote here at (when
    /// recording; empty otherwise), for its log record: call before it
    /// commits or prepares.
    pub fn versions_of(&self, txn: TxnId) -> Vec<KeyVersion> {
        self.recorder
            .as_ref()
            .map(|r| r.versions_of(txn))
            .unwrap_or_default()
    }

    /// Recovery: a committed transaction left these keys at these
    /// versions, unless a version of the same incarnation written later
    /// is there already. Transactions commit in log order, but under
    /// Runtime Pipelining one may write a row over another's uncommitted
    /// write (other columns) and commit first: the later write is the
    /// row's version, whichever commit comes last. A later incarnation's
    /// versions (a range of its own, [`VERSION_RANGE_BITS`]) come later
    /// in the log and replace an earlier one's.
    pub fn apply_versions(&mut self, versions: Vec<KeyVersion>) {
        let n = self.tables.len();
        let maps = match &mut self.recorder {
            Some(r) => r.tables_mut(),
            None => &mut self.kept_versions,
        };
        maps.resize(n, BTreeMap::new());
        let incarnation = |v: u64| v >> VERSION_RANGE_BITS;
        for v in versions {
            let Some(map) = maps.get_mut(v.table.0 as usize) else {
                continue;
            };
            let written_later = map.get(&v.key).is_some_and(|c| {
                incarnation(c.version) == incarnation(v.state.version)
                    && c.version > v.state.version
            });
            if !written_later {
                map.insert(v.key, v.state);
            }
        }
    }

    /// The versions of the committed state, for a checkpoint: the
    /// recorder's, or those a recovery kept (empty: none recorded).
    pub(crate) fn committed_versions(&self) -> std::borrow::Cow<'_, record::Versions> {
        match &self.recorder {
            Some(r) => std::borrow::Cow::Owned(r.committed()),
            None => std::borrow::Cow::Borrowed(&self.kept_versions),
        }
    }

    pub fn is_recording(&self) -> bool {
        self.recorder.is_some()
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn check_table(&self, table: TableId) -> Result<()> {
        if (table.0 as usize) < self.tables.len() {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "table id {} is not in this partition's catalog",
                table.0
            )))
        }
    }

    /// Bulk-loads a row: type-checked, no undo. A duplicate primary key or
    /// unique-index value is `Error::DuplicateKey`.
    pub fn load(&mut self, table: TableId, row: Row) -> Result<()> {
        self.check_table(table)?;
        let def = self.catalog.table(table);
        let data = &mut self.tables[table.0 as usize];
        insert_row(def, data, row).map(|_| ())
    }

    /// Replaces the row with `row`'s primary key by `row` (or inserts it),
    /// with its index entries: type-checked, no undo. For a protocol that
    /// keeps its own versions and materializes the latest here (Mediator);
    /// a unique-index conflict is `Error::DuplicateKey` and changes nothing.
    pub fn replace_row(&mut self, table: TableId, row: Row) -> Result<()> {
        self.check_table(table)?;
        let def = self.catalog.table(table);
        def.check_row(&row)?;
        let data = &mut self.tables[table.0 as usize];
        let pk = def.primary_key_of(&row);
        if let Some(old) = data.rows.remove(&pk) {
            for (i, set) in data.secondary.iter_mut().enumerate() {
                set.remove(&def.secondary_key_of(IndexId(i as u32 + 1), &old));
            }
            if let Err(e) = insert_row(def, data, row) {
                // Put the old row back as it was.
                insert_row(def, data, old)?;
                return Err(e);
            }
            return Ok(());
        }
        insert_row(def, data, row).map(|_| ())
    }

    /// Number of rows of `table` on this partition.
    pub fn len(&self, table: TableId) -> usize {
        self.tables
            .get(table.0 as usize)
            .map_or(0, |t| t.rows.len())
    }

    pub fn is_empty(&self, table: TableId) -> bool {
        self.len(table) == 0
    }

    /// The row with primary key `pk`.
    pub fn get(&self, table: TableId, pk: &Key) -> Option<&Row> {
        self.tables.get(table.0 as usize)?.rows.get(pk)
    }

    /// Rows whose key in `index` lies in `[lo, hi]`, in index order.
    pub fn scan(
        &self,
        table: TableId,
        index: IndexId,
        lo: Bound<Key>,
        hi: Bound<Key>,
    ) -> Box<dyn Iterator<Item = &Row> + '_> {
        let Some(data) = self.tables.get(table.0 as usize) else {
            return Box::new(std::iter::empty());
        };
        if !interval_nonempty(&lo, &hi) {
            return Box::new(std::iter::empty());
        }
        if index == IndexId::PRIMARY {
            return Box::new(data.rows.range((lo, hi)).map(|(_, r)| r));
        }
        let def = self.catalog.table(table);
        let Some(set) = data.secondary.get(index.0 as usize - 1) else {
            return Box::new(std::iter::empty());
        };
        let n = def.index_columns(index).len();
        Box::new(
            set.range((lo, hi))
                .filter_map(move |sk| data.rows.get(&Key::new(sk.0[n..].iter().cloned()))),
        )
    }

    /// True if `txn` changed anything here (read-only participants skip the
    /// second phase of 2PC).
    /// Lets several running transactions change one row (Callas' Runtime
    /// Pipelining), so that their redo and the checkpoints' before-images
    /// account for each other (`redo.rs`).
    pub fn set_shared_rows(&mut self, shared: bool) {
        self.shared_rows = shared;
    }

    pub fn has_writes(&self, txn: TxnId) -> bool {
        self.undo.get(&txn).is_some_and(|u| !u.is_empty())
    }

    /// The rows `txn` changed, each once, in order of first change, with
    /// their current after-image (`None` if deleted).
    pub fn write_set(&self, txn: TxnId) -> Vec<WriteSetEntry> {
        let Some(log) = self.undo.get(&txn) else {
            return Vec::new();
        };
        let mut seen: HashSet<(TableId, &Key)> = HashSet::with_capacity(log.len());
        let mut out = Vec::new();
        for u in log {
            let (t, pk) = u.target();
            if seen.insert((t, pk)) {
                out.push((t, pk.clone(), self.get(t, pk).cloned()));
            }
        }
        out
    }

    /// Number of transactions with uncommitted writes on this partition.
    pub fn active_txns(&self) -> usize {
        self.undo.len()
    }

    /// The transactions with uncommitted writes here.
    pub fn active_txn_ids(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.undo.keys().copied()
    }

    /// Makes `txn`'s changes permanent (drops its undo).
    pub fn commit(&mut self, txn: TxnId) {
        self.undo.remove(&txn);
        if let Some(r) = &mut self.recorder {
            r.commit(txn);
        }
    }

    /// The writes that `txn`, aborted here lately, had reported (when
    /// recording): a coordinator that missed a statement's answer records
    /// them from its abort's answer, so a reader of such a write meets it
    /// in the history as an aborted write instead of as one nobody made.
    pub fn undone_writes(&self, txn: TxnId) -> Vec<Op> {
        self.recorder
            .as_ref()
            .map(|r| r.undone(txn))
            .unwrap_or_default()
    }

    /// Undoes every change of `txn`, newest first.
    pub fn abort(&mut self, txn: TxnId) {
        if let Some(r) = &mut self.recorder {
            r.abort(txn);
        }
        if let Some(log) = self.undo.remove(&txn) {
            for u in log.into_iter().rev() {
                self.apply_undo(u.undo);
            }
        }
    }

    /// Undoes every change of every one of `txns` together, newest first
    /// across all of them: exact when they changed the same rows in turn
    /// (a cascading abort of transactions that wrote over each other's
    /// uncommitted writes, in whatever order).
    pub fn abort_all(&mut self, txns: &[TxnId]) {
        let mut all: Vec<Logged> = Vec::new();
        if let Some(r) = &mut self.recorder {
            r.abort_all(txns);
        }
        for t in txns {
            if let Some(log) = self.undo.remove(t) {
                all.extend(log);
            }
        }
        all.sort_unstable_by_key(|u| std::cmp::Reverse(u.seq));
        for u in all {
            self.apply_undo(u.undo);
        }
    }

    fn rollback_to(&mut self, txn: TxnId, mark: usize) {
        if let Some(r) = &mut self.recorder {
            r.rollback_to(txn, mark);
        }
        let Some(log) = self.undo.get_mut(&txn) else {
            return;
        };
        let tail: Vec<Logged> = log.drain(mark.min(log.len())..).collect();
        if log.is_empty() {
            self.undo.remove(&txn);
        }
        for u in tail.into_iter().rev() {
            self.apply_undo(u.undo);
        }
    }

    fn apply_undo(&mut self, u: Undo) {
        let (table, _) = u.target();
        let def = self.catalog.table(table);
        let data = &mut self.tables[table.0 as usize];
        match u {
            Undo::Insert { pk, .. } => {
                if let Some(row) = data.rows.remove(&pk) {
                    for (i, set) in data.secondary.iter_mut().enumerate() {
                        set.remove(&def.secondary_key_of(IndexId(i as u32 + 1), &row));
                    }
                }
            }
            Undo::Delete { pk, row, .. } => {
                for (i, set) in data.secondary.iter_mut().enumerate() {
                    set.insert(def.secondary_key_of(IndexId(i as u32 + 1), &row));
                }
                data.rows.insert(pk, row);
            }
            Undo::Add { pk, deltas, .. } => {
                let Some(row) = data.rows.get_mut(&pk) else {
                    debug_assert!(false, "undo of an increment of a missing row");
                    return;
                };
                for (c, d) in deltas {
                    match arith(ArithOp::Sub, &row[c], &d) {
                        Ok(v) => row[c] = v,
                        Err(e) => debug_assert!(false, "undo of an increment: {e}"),
                    }
                }
            }
            Undo::Update { pk, old, .. } => {
                let Some(row) = data.rows.get_mut(&pk) else {
                    debug_assert!(false, "undo of an update to a missing row");
                    return;
                };
                // Indexes whose columns the update changed: move their
                // entries from the current values back to the old ones.
                let touched: Vec<usize> = (0..def.indexes.len())
                    .filter(|&i| old.iter().any(|(c, _)| def.indexes[i].columns.contains(c)))
                    .collect();
                for &i in &touched {
                    data.secondary[i].remove(&def.secondary_key_of(IndexId(i as u32 + 1), row));
                }
                for (c, v) in old {
                    row[c] = v;
                }
                for &i in &touched {
                    data.secondary[i].insert(def.secondary_key_of(IndexId(i as u32 + 1), row));
                }
            }
        }
    }

    /// Verifies that every secondary index holds exactly the entries of the
    /// stored rows, and every row passes the type check. For tests and
    /// debug assertions.
    pub fn check_consistency(&self) -> Result<()> {
        for (def, data) in self.catalog.tables().iter().zip(&self.tables) {
            for (i, set) in data.secondary.iter().enumerate() {
                let id = IndexId(i as u32 + 1);
                let expect: BTreeSet<Key> = data
                    .rows
                    .values()
                    .map(|r| def.secondary_key_of(id, r))
                    .collect();
                if &expect != set {
                    return Err(Error::Internal(format!(
                        "index `{}` of `{}` is inconsistent",
                        def.index_name(id),
                        def.name
                    )));
                }
            }
            for (pk, row) in &data.rows {
                def.check_row(row)?;
                if &def.primary_key_of(row) != pk {
                    return Err(Error::Internal(format!(
                        "row under wrong key in `{}`",
                        def.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The locks `plan` needs given the current data, in acquisition order.
    /// See the crate docs for the rules. Appends to `out`.
    pub fn lock_needs(&self, plan: &Plan, params: &[Value], out: &mut Vec<LockNeed>) -> Result<()> {
        let table = plan.table();
        self.check_table(table)?;
        let def = self.catalog.table(table);
        let data = &self.tables[table.0 as usize];
        let point = |index: IndexId, key: Key, access: Access| LockNeed {
            target: LockTarget::Point { table, index, key },
            access,
        };
        match plan.statement() {
            Statement::Insert(ins) => {
                let row = build_row(def, ins, params)?;
                out.push(point(
                    IndexId::PRIMARY,
                    def.primary_key_of(&row),
                    Access::Write,
                ));
                for i in 0..def.indexes.len() {
                    let id = IndexId(i as u32 + 1);
                    out.push(point(id, def.secondary_key_of(id, &row), Access::Write));
                }
            }
            Statement::Select(sel) => {
                let pred = &sel.pred;
                if pred.point {
                    out.push(point(IndexId::PRIMARY, pred.eq_key(params)?, Access::Read));
                    return Ok(());
                }
                let (lo, hi) = pred.bounds(params)?;
                let limit = sel
                    .limit
                    .as_ref()
                    .map(|l| limit_value(l, params))
                    .transpose()?;
                // LIMIT 0 reads nothing, of rows or of an aggregate's row.
                if limit == Some(0) {
                    return Ok(());
                }
                // An aggregate reads its whole interval whatever its
                // LIMIT: the limit counts output rows, and it has one.
                let limit = match &sel.projection {
                    Projection::Columns(_) => limit,
                    Projection::Aggregates(_) => None,
                };
                let secondary = pred.index != IndexId::PRIMARY;
                // A secondary index's interval lock does not cover the rows
                // behind it: every row the scan passes over is read-locked,
                // whether or not its filters match, since whether they match
                // is read from the row (a writer's uncommitted change could
                // otherwise hide a row from the scan, or show it).
                let mut passed = Scanned::default();
                let mut last_entry: Option<Key> = None;
                let mut n = 0usize;
                if secondary || limit.is_some() {
                    let walked = secondary.then_some(&mut passed);
                    visit(def, data, pred, params, sel.desc, walked, |entry, _, _| {
                        n += 1;
                        let more = limit.is_none_or(|l| n < l);
                        if !more {
                            last_entry = Some(entry.clone());
                        }
                        Ok(more)
                    })?;
                }
                {
                    let (lo, hi) = match last_entry {
                        Some(k) if sel.desc => (Bound::Included(k), hi),
                        Some(k) => (lo, Bound::Included(k)),
                        None => (lo, hi),
                    };
                    out.push(range_read(table, pred.index, lo, hi));
                }
                out.extend(
                    passed
                        .pks
                        .into_iter()
                        .map(|pk| point(IndexId::PRIMARY, pk, Access::Read)),
                );
            }
            Statement::Update(upd) => {
                self.write_needs(def, data, &upd.pred, Some(&upd.sets), params, out)?
            }
            Statement::Delete(del) => self.write_needs(def, data, &del.pred, None, params, out)?,
        }
        Ok(())
    }

    /// Needs of UPDATE (`sets` given) and DELETE.
    #[allow(clippy::too_many_arguments)]
    fn write_needs(
        &self,
        def: &TableDef,
        data: &TableData,
        pred: &Predicate,
        sets: Option<&[Assignment]>,
        params: &[Value],
        out: &mut Vec<LockNeed>,
    ) -> Result<()> {
        let table = def.id;
        let row_needs = |pk: &Key, row: Option<&Row>, out: &mut Vec<LockNeed>| {
            out.push(LockNeed {
                target: LockTarget::Point {
                    table,
                    index: IndexId::PRIMARY,
                    key: pk.clone(),
                },
                access: Access::Write,
            });
            let Some(row) = row else { return };
            for (i, idx) in def.indexes.iter().enumerate() {
                let id = IndexId(i as u32 + 1);
                let mut push = |key: Key| {
                    out.push(LockNeed {
                        target: LockTarget::Point {
                            table,
                            index: id,
                            key,
                        },
                        access: Access::Write,
                    })
                };
                match sets {
                    None => push(def.secondary_key_of(id, row)),
                    Some(sets) => {
                        if !sets.iter().any(|s| idx.columns.contains(&s.column)) {
                            continue;
                        }
                        let old = def.secondary_key_of(id, row);
                        // An expression that fails here fails in execute too;
                        // lock what can be computed.
                        let new = new_values(def, row, sets, params)
                            .ok()
                            .map(|nv| secondary_key_with(def, id, row, &nv));
                        let changed = new.as_ref().is_some_and(|n| *n != old);
                        push(old);
                        if let (true, Some(n)) = (changed, new) {
                            push(n);
                        }
                    }
                }
            }
        };
        if pred.point {
            let pk = pred.eq_key(params)?;
            if def.indexes.is_empty() {
                // Only secondary-index entries depend on the row; without
                // indexes the lookup (a cache miss on big tables) is skipped.
                row_needs(&pk, None, out);
                return Ok(());
            }
            let row = data.rows.get(&pk);
            let row = match row {
                Some(r) if filters_match(pred, r, params)? => Some(r),
                _ => None,
            };
            row_needs(&pk, row, out);
            return Ok(());
        }
        {
            let (lo, hi) = pred.bounds(params)?;
            out.push(range_read(table, pred.index, lo, hi));
        }
        // On a secondary index, the rows the predicate passes over are
        // read-locked too: their filters are read from them (as for a
        // SELECT above).
        let mut passed = Scanned::default();
        let walked = (pred.index != IndexId::PRIMARY).then_some(&mut passed);
        visit(def, data, pred, params, false, walked, |_, pk, row| {
            row_needs(pk, Some(row), out);
            Ok(true)
        })?;
        out.extend(passed.pks.into_iter().map(|key| LockNeed {
            target: LockTarget::Point {
                table,
                index: IndexId::PRIMARY,
                key,
            },
            access: Access::Read,
        }));
        Ok(())
    }

    /// Runs `plan` for `txn`, recording undo. A failed statement changes
    /// nothing. `params` must come from `plan.bind`.
    pub fn execute(&mut self, txn: TxnId, plan: &Plan, params: &[Value]) -> Result<QueryResult> {
        self.execute_recorded(txn, plan, params, None)
    }

    /// [`execute`](Self::execute), also appending to `ops` what the
    /// statement read and wrote, with versions, when recording is enabled
    /// and `ops` is given. A failed statement records nothing.
    pub fn execute_recorded(
        &mut self,
        txn: TxnId,
        plan: &Plan,
        params: &[Value],
        ops: Option<&mut Vec<Op>>,
    ) -> Result<QueryResult> {
        let table = plan.table();
        self.check_table(table)?;
        let mark = self.undo.get(&txn).map_or(0, Vec::len);
        let ops = if self.recorder.is_some() { ops } else { None };
        let ops_mark = ops.as_ref().map_or(0, |o| o.len());
        let mut ops = ops;
        let result = self.execute_inner(txn, plan, params, ops.as_deref_mut());
        match ops {
            Some(o) if result.is_err() => {
                self.rollback_to(txn, mark);
                o.truncate(ops_mark);
            }
            Some(o) => {
                let width = self.catalog.table(table).columns.len();
                for op in &mut o[ops_mark..] {
                    record::annotate_columns(op, plan.access(), width);
                }
                if let Some(r) = &mut self.recorder {
                    r.reported(txn, &o[ops_mark..]);
                }
            }
            None if result.is_err() => self.rollback_to(txn, mark),
            None => {}
        }
        result
    }

    fn execute_inner(
        &mut self,
        txn: TxnId,
        plan: &Plan,
        params: &[Value],
        mut ops: Option<&mut Vec<Op>>,
    ) -> Result<QueryResult> {
        let table = plan.table();
        let def = self.catalog.table(table);
        let data = &mut self.tables[table.0 as usize];
        let recorder = self.recorder.as_deref_mut().filter(|_| ops.is_some());
        match plan.statement() {
            Statement::Select(sel) => {
                let mut scanned = recorder.is_some().then(Scanned::default);
                let mut out = QueryResult {
                    columns: plan.columns().clone(),
                    rows: Vec::new(),
                    affected: 0,
                };
                match &sel.projection {
                    Projection::Columns(cols) => {
                        let limit = match &sel.limit {
                            Some(l) => limit_value(l, params)?,
                            None => usize::MAX,
                        };
                        if limit == 0 {
                            return Ok(out);
                        }
                        visit(
                            def,
                            data,
                            &sel.pred,
                            params,
                            sel.desc,
                            scanned.as_mut(),
                            |_, _, row| {
                                out.rows
                                    .push(cols.iter().map(|&c| row[c].clone()).collect());
                                Ok(out.rows.len() < limit)
                            },
                        )?;
                    }
                    Projection::Aggregates(aggs) => {
                        // LIMIT counts output rows: 0 drops the one row an
                        // aggregate has (and spares the scan).
                        if let Some(l) = &sel.limit {
                            if limit_value(l, params)? == 0 {
                                return Ok(out);
                            }
                        }
                        let mut acc = Aggregate::initial_row(aggs);
                        visit(
                            def,
                            data,
                            &sel.pred,
                            params,
                            sel.desc,
                            scanned.as_mut(),
                            |_, _, row| {
                                for (slot, a) in acc.iter_mut().zip(aggs) {
                                    let v = a.column.map(|c| &row[c]);
                                    match (a.func, v) {
                                        (AggFunc::Count, None) => *slot = count_plus_one(slot)?,
                                        (_, None) | (_, Some(Value::Null)) => {}
                                        (AggFunc::Count, Some(_)) => *slot = count_plus_one(slot)?,
                                        (AggFunc::Sum, Some(v)) => {
                                            *slot = if slot.is_null() {
                                                v.clone()
                                            } else {
                                                arith(brine_sql::ArithOp::Add, slot, v)?
                                            }
                                        }
                                        (AggFunc::Min, Some(v)) => {
                                            if slot.is_null() || v < slot {
                                                *slot = v.clone()
                                            }
                                        }
                                        (AggFunc::Max, Some(v)) => {
                                            if slot.is_null() || v > slot {
                                                *slot = v.clone()
                                            }
                                        }
                                    }
                                }
                                Ok(true)
                            },
                        )?;
                        out.rows.push(acc);
                    }
                }
                if let (Some(r), Some(ops), Some(s)) = (recorder, ops, scanned) {
                    ops.push(observed(r, def, &sel.pred, params, sel.desc, s)?);
                }
                Ok(out)
            }
            Statement::Insert(ins) => {
                let row = build_row(def, ins, params)?;
                let pk = insert_row(def, data, row)?;
                if let (Some(r), Some(ops)) = (recorder, ops) {
                    ops.push(r.write(txn, def, &pk, None, data.rows.get(&pk)));
                }
                self.undo_seq += 1;
                self.undo.entry(txn).or_default().push(Logged {
                    seq: self.undo_seq,
                    undo: Undo::Insert { table, pk },
                });
                Ok(affected(plan, 1))
            }
            Statement::Update(upd) => {
                let pred = &upd.pred;
                let (pks, mut recorder) =
                    matching_keys_recorded(def, data, pred, params, recorder, ops.as_deref_mut())?;
                if pks.is_empty() {
                    return Ok(affected(plan, 0));
                }
                let n = pks.len() as u64;
                let log = self.undo.entry(txn).or_default();
                // A blind increment of columns no index covers is undone
                // by subtraction (see `Undo::Add`).
                let additive = plan.access().blind_increment
                    && !def.indexes.iter().any(|idx| {
                        plan.access()
                            .columns_written
                            .iter()
                            .any(|c| idx.columns.contains(c))
                    });
                for pk in pks {
                    let before = recorder.as_ref().and_then(|_| data.rows.get(&pk).cloned());
                    let old = update_row(def, data, &pk, &upd.sets, params)?;
                    if let (Some(r), Some(ops)) = (recorder.as_deref_mut(), ops.as_deref_mut()) {
                        ops.push(r.write(txn, def, &pk, before.as_ref(), data.rows.get(&pk)));
                    }
                    let undo = match (additive, data.rows.get(&pk)) {
                        (true, Some(row)) => {
                            let deltas = old
                                .iter()
                                .map(|(c, v)| Ok((*c, arith(ArithOp::Sub, &row[*c], v)?)))
                                .collect::<Result<Vec<_>>>();
                            match deltas {
                                Ok(deltas) => Undo::Add { table, pk, deltas },
                                Err(_) => Undo::Update { table, pk, old },
                            }
                        }
                        _ => Undo::Update { table, pk, old },
                    };
                    self.undo_seq += 1;
                    log.push(Logged {
                        seq: self.undo_seq,
                        undo,
                    });
                }
                Ok(affected(plan, n))
            }
            Statement::Delete(del) => {
                let (pks, mut recorder) = matching_keys_recorded(
                    def,
                    data,
                    &del.pred,
                    params,
                    recorder,
                    ops.as_deref_mut(),
                )?;
                if pks.is_empty() {
                    return Ok(affected(plan, 0));
                }
                let n = pks.len() as u64;
                let log = self.undo.entry(txn).or_default();
                for pk in pks {
                    if let Some(row) = data.rows.remove(&pk) {
                        for (i, set) in data.secondary.iter_mut().enumerate() {
                            set.remove(&def.secondary_key_of(IndexId(i as u32 + 1), &row));
                        }
                        if let (Some(r), Some(ops)) = (recorder.as_deref_mut(), ops.as_deref_mut())
                        {
                            ops.push(r.write(txn, def, &pk, Some(&row), None));
                        }
                        self.undo_seq += 1;
                        log.push(Logged {
                            seq: self.undo_seq,
                            undo: Undo::Delete { table, pk, row },
                        });
                    }
                }
                Ok(affected(plan, n))
            }
        }
    }
}

/// A write's result; reuses the plan's (empty) column list instead of
/// allocating one.
fn affected(plan: &Plan, n: u64) -> QueryResult {
    QueryResult {
        columns: plan.columns().clone(),
        rows: Vec::new(),
        affected: n,
    }
}

fn count_plus_one(v: &Value) -> Result<Value> {
    match v {
        Value::Int(n) => Ok(Value::Int(n + 1)),
        other => Err(Error::Internal(format!("COUNT accumulator is {other:?}"))),
    }
}

mod record;
mod rows;
mod scan;
use rows::*;
use scan::*;

pub mod checkpoint;
pub mod recovery;
mod redo;
pub mod wal;

#[cfg(test)]
mod tests;
