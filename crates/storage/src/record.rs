//! History recording: the version of every row, and what each statement
//! observed and installed, for the isolation checker (crates/check).
//!
//! ```text
//!  execute(txn, plan, params, Some(ops))
//!     reads  -> Op::Read / Op::RangeRead with the versions seen
//!     writes -> Op::Write { version: fresh, prev: the replaced one }
//!  abort / failed statement -> versions restored with the rows
//! ```
//!
//! Off unless `PartitionStore::enable_recording` was called: then every
//! write draws a version id from this partition's own range (`base + n`), so
//! ids are unique across the cluster without coordination. Rows never
//! written since the load are at version 0; a deleted row leaves a
//! tombstone version, so a later read of the absent key reports which
//! deletion it observed. Recording costs a map update per write and a map
//! lookup per row read; with it off, nothing here runs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;

use brine_check::history::INITIAL_VERSION;
use brine_check::{Cols, IndexChange, Op, Seen, WriteKind};
use brine_core::{IndexId, Key, Row, TableDef, TableId, TxnId};
use brine_sql::AccessDescriptor;

/// A key's current version, and whether that version is a deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerState {
    pub version: u64,
    pub deleted: bool,
}

/// The version a committed transaction left a key at, as its partition
/// logs it (a `Versions` record before its Commit or Prepare, when the
/// run records a history), so a partition recovered from its log, or
/// taken over from a replica's copy, goes on from the versions the
/// history names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyVersion {
    pub table: TableId,
    pub key: Key,
    pub state: VerState,
}

/// Per table, the version of every key written since the load (keys
/// absent are at version 0).
pub(crate) type Versions = Vec<BTreeMap<Key, VerState>>;

const INITIAL: VerState = VerState {
    version: INITIAL_VERSION,
    deleted: false,
};

/// Rows a scan walked over (whether or not its filters matched them), and
/// where it stopped early, if it did.
#[derive(Default)]
pub(crate) struct Scanned {
    pub pks: Vec<Key>,
    /// The index entry at which the caller stopped the scan (LIMIT).
    pub stop: Option<Key>,
}

/// Version bookkeeping of one partition while recording.
#[derive(Debug)]
pub(crate) struct Recorder {
    next: u64,
    /// Per table: keys written since the load (live or tombstone).
    tables: Vec<BTreeMap<Key, VerState>>,
    /// Per transaction, in step with the store's undo log: each write's
    /// version and the state it replaced.
    undo: HashMap<TxnId, Vec<Installed>>,
    /// Orders writes across transactions (see `abort_all`).
    seq: u64,
    /// Undone writes another write had already covered: version -> the
    /// state it replaced (see `restore`).
    covered: HashMap<u64, Option<VerState>>,
    /// Per open transaction, the writes its statements reported.
    written: HashMap<TxnId, Vec<Op>>,
    /// The writes of the latest aborted transactions, for the coordinator
    /// to record when a statement's answer never reached it
    /// ([`PartitionStore::undone_writes`]); at most [`UNDONE_KEPT`].
    undone: HashMap<TxnId, Vec<Op>>,
    undone_order: VecDeque<TxnId>,
}

/// How many aborted transactions' writes a partition keeps for their
/// coordinators (an abort is resent until answered, so an answer lost
/// before must find them again).
const UNDONE_KEPT: usize = 16_384;

/// One recorded write, for undoing it.
#[derive(Debug)]
struct Installed {
    seq: u64,
    table: TableId,
    pk: Key,
    version: u64,
    deleted: bool,
    /// The state it replaced (`None`: the key was at its initial state).
    before: Option<VerState>,
}

impl Recorder {
    /// A recorder drawing versions from `base + 1` on, its keys at
    /// `versions` (those a recovery found; empty: every key at 0).
    pub fn new(mut versions: Versions, tables: usize, base: u64) -> Self {
        versions.resize(tables, BTreeMap::new());
        Recorder {
            next: base,
            tables: versions,
            undo: HashMap::new(),
            seq: 0,
            covered: HashMap::new(),
            written: HashMap::new(),
            undone: HashMap::new(),
            undone_order: VecDeque::new(),
        }
    }

    pub(crate) fn tables_mut(&mut self) -> &mut Versions {
        &mut self.tables
    }

    /// A statement of `txn` succeeded having recorded `ops`: its writes are
    /// kept until `txn` ends.
    pub fn reported(&mut self, txn: TxnId, ops: &[Op]) {
        let writes = ops.iter().filter(|o| matches!(o, Op::Write { .. }));
        let mut writes = writes.peekable();
        if writes.peek().is_some() {
            self.written.entry(txn).or_default().extend(writes.cloned());
        }
    }

    /// What `txn` wrote here, if it aborted here lately.
    pub fn undone(&self, txn: TxnId) -> Vec<Op> {
        self.undone.get(&txn).cloned().unwrap_or_default()
    }

    /// `txn` aborted: its reported writes move to the kept ones.
    fn keep_undone(&mut self, txn: TxnId) {
        let Some(ops) = self.written.remove(&txn) else {
            return;
        };
        if self.undone.insert(txn, ops).is_none() {
            self.undone_order.push_back(txn);
        }
        while self.undone_order.len() > UNDONE_KEPT {
            if let Some(old) = self.undone_order.pop_front() {
                self.undone.remove(&old);
            }
        }
    }

    fn state(&self, table: TableId, pk: &Key) -> VerState {
        self.tables[table.0 as usize]
            .get(pk)
            .copied()
            .unwrap_or(INITIAL)
    }

    /// Installs a fresh version of `pk`; returns `(version, prev)`.
    fn install(&mut self, txn: TxnId, table: TableId, pk: &Key, deleted: bool) -> (u64, u64) {
        self.next += 1;
        let version = self.next;
        let before =
            self.tables[table.0 as usize].insert(pk.clone(), VerState { version, deleted });
        self.seq += 1;
        self.undo.entry(txn).or_default().push(Installed {
            seq: self.seq,
            table,
            pk: pk.clone(),
            version,
            deleted,
            before,
        });
        (version, before.unwrap_or(INITIAL).version)
    }

    /// The version `txn` leaves each key it wrote here at (its last write
    /// of the key), for its log record.
    pub fn versions_of(&self, txn: TxnId) -> Vec<KeyVersion> {
        let Some(log) = self.undo.get(&txn) else {
            return Vec::new();
        };
        let mut out: Vec<KeyVersion> = Vec::with_capacity(log.len());
        let mut seen: std::collections::HashSet<(TableId, &Key)> = Default::default();
        for w in log.iter().rev() {
            if !seen.insert((w.table, &w.pk)) {
                continue;
            }
            out.push(KeyVersion {
                table: w.table,
                key: w.pk.clone(),
                state: VerState {
                    version: w.version,
                    deleted: w.deleted,
                },
            });
        }
        out
    }

    /// The versions of the committed state (a checkpoint's): each key an
    /// open transaction wrote at what the first of those writes replaced.
    pub fn committed(&self) -> Versions {
        let mut out = self.tables.clone();
        let mut open: Vec<&Installed> = self.undo.values().flatten().collect();
        open.sort_unstable_by_key(|w| std::cmp::Reverse(w.seq));
        // Oldest last: its `before` is what stays.
        for w in open {
            let map = &mut out[w.table.0 as usize];
            match w.before {
                Some(s) => map.insert(w.pk.clone(), s),
                None => map.remove(&w.pk),
            };
        }
        out
    }

    pub fn commit(&mut self, txn: TxnId) {
        self.undo.remove(&txn);
        self.written.remove(&txn);
    }

    pub fn abort(&mut self, txn: TxnId) {
        self.keep_undone(txn);
        self.rollback_to(txn, 0);
    }

    /// Restores the versions of every write of `txn` after the first
    /// `mark`, newest first (the store's undo log uses the same marks).
    pub fn rollback_to(&mut self, txn: TxnId, mark: usize) {
        let Some(log) = self.undo.get_mut(&txn) else {
            return;
        };
        let tail: Vec<_> = log.drain(mark.min(log.len())..).collect();
        if log.is_empty() {
            self.undo.remove(&txn);
        }
        for w in tail.into_iter().rev() {
            self.restore(w);
        }
    }

    /// Restores the versions of every write of every one of `txns`,
    /// newest first across all of them (the store's `abort_all`).
    pub fn abort_all(&mut self, txns: &[TxnId]) {
        for &t in txns {
            self.keep_undone(t);
        }
        let mut all: Vec<Installed> = txns
            .iter()
            .filter_map(|t| self.undo.remove(t))
            .flatten()
            .collect();
        all.sort_unstable_by_key(|w| std::cmp::Reverse(w.seq));
        for w in all {
            self.restore(w);
        }
    }

    /// Undoes one write's version. When another transaction has written
    /// the row since (Callas' Runtime Pipelining lets a same-group
    /// transaction change other columns, or increment the same ones, over
    /// an uncommitted write), the row keeps that later version: the undo
    /// took back only this write's columns, and the later write's version
    /// still names what the row holds.
    /// If that later write is undone in turn, the row goes back past this
    /// one to what it replaced.
    fn restore(&mut self, w: Installed) {
        let map = &mut self.tables[w.table.0 as usize];
        if map.get(&w.pk).map(|s| s.version) != Some(w.version) {
            self.covered.insert(w.version, w.before);
            return;
        }
        let mut before = w.before;
        while let Some(older) = before.and_then(|s| self.covered.remove(&s.version)) {
            before = older;
        }
        match before {
            Some(s) => map.insert(w.pk, s),
            None => map.remove(&w.pk),
        };
    }

    /// A point read of `pk` (present or not).
    pub fn read(&self, def: &TableDef, pk: &Key) -> Op {
        Op::Read {
            table: def.name.clone(),
            key: pk.clone(),
            version: self.state(def.id, pk).version,
            sub: None,
            cols: None,
        }
    }

    /// A range read of `index` over `[lo, hi]` that walked `scanned`. The
    /// interval reported is the one observed: a scan stopped early ends at
    /// the entry where it stopped.
    pub fn range_read(
        &self,
        def: &TableDef,
        index: IndexId,
        (mut lo, mut hi): (Bound<Key>, Bound<Key>),
        desc: bool,
        scanned: Scanned,
    ) -> Op {
        if let Some(stop) = scanned.stop {
            if desc {
                lo = Bound::Included(stop);
            } else {
                hi = Bound::Included(stop);
            }
        }
        let mut seen: Vec<Seen> = scanned
            .pks
            .into_iter()
            .map(|pk| {
                let version = self.state(def.id, &pk).version;
                Seen {
                    key: pk,
                    version,
                    deleted: false,
                }
            })
            .collect();
        if index == IndexId::PRIMARY && brine_core::access::interval_nonempty(&lo, &hi) {
            let map = &self.tables[def.id.0 as usize];
            seen.extend(
                map.range((lo.clone(), hi.clone()))
                    .filter(|(_, s)| s.deleted)
                    .map(|(pk, s)| Seen {
                        key: pk.clone(),
                        version: s.version,
                        deleted: true,
                    }),
            );
        }
        Op::RangeRead {
            table: def.name.clone(),
            index: index.0,
            lo: Box::new(lo),
            hi: Box::new(hi),
            seen,
            sub: None,
            cols: None,
        }
    }

    /// A write of `pk` from `old` (absent: insert) to `new` (absent:
    /// delete).
    pub fn write(
        &mut self,
        txn: TxnId,
        def: &TableDef,
        pk: &Key,
        old: Option<&Row>,
        new: Option<&Row>,
    ) -> Op {
        let kind = match (old, new) {
            (None, _) => WriteKind::Insert,
            (Some(_), Some(_)) => WriteKind::Update,
            (Some(_), None) => WriteKind::Delete,
        };
        let (version, prev) = self.install(txn, def.id, pk, new.is_none());
        let ix = (1..=def.indexes.len() as u32)
            .map(|i| IndexChange {
                index: i,
                old: old.map(|r| def.secondary_key_of(IndexId(i), r)),
                new: new.map(|r| def.secondary_key_of(IndexId(i), r)),
            })
            .collect();
        Op::Write {
            table: def.name.clone(),
            key: pk.clone(),
            version,
            prev,
            kind,
            ix,
            sub: None,
            cols: None,
        }
    }
}

/// Sets what a statement's operation touched column by column (the
/// history's `c`): reads observe the statement's read columns; an update
/// changes its `SET` columns after reading its read columns; an insert or
/// a delete changes every one of the table's `width` columns.
pub(crate) fn annotate_columns(op: &mut Op, access: &AccessDescriptor, width: usize) {
    let list = |cols: &[usize]| cols.iter().map(|&c| c as u16).collect::<Vec<u16>>();
    let cols = match op {
        Op::Read { .. } | Op::RangeRead { .. } => Cols {
            r: list(&access.columns_read),
            ..Cols::default()
        },
        Op::Write {
            kind: WriteKind::Update,
            ..
        } => Cols {
            r: list(&access.columns_read),
            w: list(&access.columns_written),
            add: access.blind_increment,
        },
        Op::Write { .. } => Cols {
            r: Vec::new(),
            w: (0..width as u16).collect(),
            add: false,
        },
    };
    *op.cols_mut() = Some(Box::new(cols));
}
