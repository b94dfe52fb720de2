//! Callas at one partition: what each grouped transaction used on each row
//! and range it locked here, so that a new access finds the same-group
//! transactions it conflicts with.
//!
//! ```text
//!  member lock granted on T ──► uses overlapping T ──► same-group owners whose
//!        (point or range)         (exact target, and      column use conflicts:
//!                                  point-in-range,        dependencies of the
//!                                  range-over-range)      access (`after`)
//! ```
//!
//! Same-group member locks do not block each other, so the lock table never
//! orders two members that touch one row; the partition declares the
//! dependency instead (Runtime Pipelining and chopping order and commit by
//! it). A scan locks its interval with one range target and a write locks
//! its row with a point target, so looking up the exact target alone misses
//! a write into a range a member scanned, and a scan over a row a member
//! wrote: inside one group that let a range read see one of a transaction's
//! writes but not another (a phantom at serializable). Overlapping targets
//! count as 2PL's range locks count across groups: a point inside a
//! range, and two intersecting ranges. A scan also observes which rows
//! exist, so an insert or delete into its interval conflicts with it
//! whatever the columns.
//!
//! Ranges are few (one per distinct scanned interval); point keys are kept
//! in order only in a (table, index) where a range was recorded, so spaces
//! that see only point accesses (most of them) pay one hash lookup.

use std::collections::BTreeSet;
use std::ops::Bound;

use brine_core::access::{interval_nonempty, intervals_overlap, key_in_range};
use brine_core::{IndexId, Key, LockTarget, TableId, TxnId};
use brine_sql::{AccessDescriptor, StatementKind};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// The columns one transaction used on one row or range (bit `c` for
/// column `c`; columns past 63 share bit 63), in one of its pieces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColUse {
    pub txn: TxnId,
    /// The piece that used them: under `chop` and `sc` a piece is a
    /// transaction of its own (`Ending::Sub`), which may roll back while
    /// the pieces before it stay committed; its uses then go, and only
    /// its own ([`NexusUses::forget_piece`]). Otherwise `txn` itself.
    pub piece: TxnId,
    pub read: u64,
    /// Written other than by a blind increment.
    pub write: u64,
    /// Written by blind increments only (`SET c = c + e`), which commute
    /// with each other and are undone by subtraction.
    pub add: u64,
    /// Inserted or deleted a row: changed which rows a scan finds.
    pub rows: bool,
}

impl ColUse {
    pub fn of(txn: TxnId, piece: TxnId, a: &AccessDescriptor) -> ColUse {
        let mask = |cols: &[usize]| cols.iter().fold(0u64, |m, &c| m | 1u64 << c.min(63));
        let written = mask(&a.columns_written);
        // A blind increment reads the column it adds to only to add: it
        // observes nothing, so its read does not count (else two
        // increments would depend on each other, which the analysis, for
        // which they commute, does not expect).
        let (write, add, unread) = if a.blind_increment {
            (0, written, written)
        } else {
            (written, 0, 0)
        };
        ColUse {
            txn,
            piece,
            read: mask(&a.columns_read) & !unread,
            write,
            add,
            rows: matches!(a.kind, StatementKind::Insert | StatementKind::Delete),
        }
    }

    /// Whether `self` (the later access) saw or overwrote what `earlier`
    /// wrote: a read or write of a column it wrote, or an increment of a
    /// column it wrote other than by increments. Increments of the same
    /// column commute. Such a dependency also makes an abort of `earlier`
    /// cascade.
    pub fn reads_or_overwrites(&self, earlier: &ColUse) -> bool {
        let w = earlier.write | earlier.add;
        (self.read & w) | (self.write & w) | (self.add & earlier.write) != 0
    }

    /// Whether `self` writes what `earlier` read (an anti-dependency).
    pub fn overwrites_read(&self, earlier: &ColUse) -> bool {
        (self.write | self.add) & earlier.read != 0
    }

    fn merge(&mut self, other: &ColUse) {
        self.read |= other.read;
        self.write |= other.write;
        self.add |= other.add;
        self.rows |= other.rows;
    }
}

/// How a later access relates to an earlier same-group one on overlapping
/// targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// It saw or overwrote what the earlier one wrote (a dependency that
    /// also cascades an abort).
    pub sees: bool,
    /// It wrote what the earlier one read (an anti-dependency: counts at
    /// serializable only).
    pub overwrites_read: bool,
}

/// The uses of one (table, index) that range lookups need.
#[derive(Default)]
struct Space {
    /// Distinct recorded range targets' intervals.
    ranges: Vec<(Bound<Key>, Bound<Key>)>,
    /// Point keys with uses, in order; kept from the first range on.
    ordered: Option<BTreeSet<Key>>,
}

/// Every grouped transaction's column uses at this partition.
#[derive(Default)]
pub(crate) struct NexusUses {
    by_target: HashMap<LockTarget, SmallVec<[ColUse; 2]>>,
    by_txn: HashMap<TxnId, Vec<LockTarget>>,
    spaces: HashMap<(TableId, IndexId), Space>,
}

impl NexusUses {
    /// The uses recorded on exactly `target`.
    pub fn on(&self, target: &LockTarget) -> &[ColUse] {
        self.by_target.get(target).map_or(&[], |u| u.as_slice())
    }

    /// Calls `f` with each use by another transaction than `mine.txn` on
    /// `target` and, if `overlapping`, on every target that overlaps it,
    /// with how `mine` (on `target`) conflicts with it; uses that do not
    /// conflict are skipped.
    pub fn for_each_conflict(
        &mut self,
        target: &LockTarget,
        mine: &ColUse,
        overlapping: bool,
        mut f: impl FnMut(&ColUse, Conflict),
    ) {
        if let (true, LockTarget::Range { table, index, .. }) = (overlapping, target) {
            self.ordered_space(*table, *index);
        }
        let mine_scans = matches!(target, LockTarget::Range { .. });
        let mut visit = |uses: &SmallVec<[ColUse; 2]>, theirs_scan: bool| {
            for u in uses.iter().filter(|u| u.txn != mine.txn) {
                let c = Conflict {
                    sees: mine.reads_or_overwrites(u) || (mine_scans && u.rows),
                    overwrites_read: mine.overwrites_read(u) || (theirs_scan && mine.rows),
                };
                if c.sees || c.overwrites_read {
                    f(u, c);
                }
            }
        };
        if let Some(uses) = self.by_target.get(target) {
            visit(uses, mine_scans);
        }
        if !overlapping {
            return;
        }
        let (space, lo, hi) = match target {
            LockTarget::Point { table, index, key } => {
                let Some(space) = self.spaces.get(&(*table, *index)) else {
                    return;
                };
                for (rlo, rhi) in &space.ranges {
                    if key_in_range(key, rlo, rhi) {
                        let range = range_target(*table, *index, rlo, rhi);
                        if let Some(uses) = self.by_target.get(&range) {
                            visit(uses, true);
                        }
                    }
                }
                return;
            }
            LockTarget::Range {
                table,
                index,
                lo,
                hi,
            } => match self.spaces.get(&(*table, *index)) {
                Some(space) => ((*table, *index, space), lo, hi),
                None => return,
            },
        };
        let (table, index, space) = space;
        if let Some(ordered) = &space.ordered {
            if interval_nonempty(lo, hi) {
                for key in ordered.range::<Key, _>((lo.as_ref(), hi.as_ref())) {
                    let point = LockTarget::Point {
                        table,
                        index,
                        key: key.clone(),
                    };
                    if let Some(uses) = self.by_target.get(&point) {
                        visit(uses, false);
                    }
                }
            }
        }
        for (rlo, rhi) in &space.ranges {
            if (rlo, rhi) != (lo, hi) && intervals_overlap(lo, hi, rlo, rhi) {
                if let Some(uses) = self.by_target.get(&range_target(table, index, rlo, rhi)) {
                    visit(uses, true);
                }
            }
        }
    }

    /// Records that `mine.txn` used `target` as `mine` says (merged with
    /// what the same piece used there before).
    pub fn record(&mut self, target: &LockTarget, mine: ColUse) {
        if let Some(uses) = self.by_target.get_mut(target) {
            if let Some(u) = uses
                .iter_mut()
                .find(|u| u.txn == mine.txn && u.piece == mine.piece)
            {
                u.merge(&mine);
                return;
            }
            let listed = uses.iter().any(|u| u.txn == mine.txn);
            uses.push(mine);
            if listed {
                // Another piece of it used the target: listed already.
                return;
            }
        } else {
            self.by_target
                .insert(target.clone(), SmallVec::from_elem(mine, 1));
            self.index(target);
        }
        self.by_txn
            .entry(mine.txn)
            .or_default()
            .push(target.clone());
    }

    /// `piece` of `txn` rolled back: what it used is forgotten, and only
    /// that. The transaction's earlier pieces stay committed, and what
    /// they used stays, on the same rows too: a dependency on the
    /// rolled-back piece alone would tie later transactions to one that
    /// never wrote what they depend on, and could close a cycle of
    /// release waits that no execution had.
    pub fn forget_piece(&mut self, txn: TxnId, piece: TxnId) {
        let Some(targets) = self.by_txn.remove(&txn) else {
            return;
        };
        let mut kept = Vec::with_capacity(targets.len());
        for t in targets {
            if self.forget_use(&t, txn, |u| u.piece == piece) {
                kept.push(t);
            }
        }
        if !kept.is_empty() {
            self.by_txn.insert(txn, kept);
        }
    }

    /// `txn` holds nothing here any more.
    pub fn forget_txn(&mut self, txn: TxnId) {
        for t in self.by_txn.remove(&txn).unwrap_or_default() {
            self.forget_use(&t, txn, |_| true);
        }
    }

    /// Drops the uses of `target` by `txn` that `gone` picks; whether a
    /// use by `txn` is left there.
    fn forget_use(
        &mut self,
        target: &LockTarget,
        txn: TxnId,
        gone: impl Fn(&ColUse) -> bool,
    ) -> bool {
        let Some(uses) = self.by_target.get_mut(target) else {
            return false;
        };
        uses.retain(|u| u.txn != txn || !gone(u));
        let left = uses.iter().any(|u| u.txn == txn);
        if uses.is_empty() {
            self.by_target.remove(target);
            self.unindex(target);
        }
        left
    }

    /// A target got its first use.
    fn index(&mut self, target: &LockTarget) {
        match target {
            LockTarget::Point { table, index, key } => {
                if let Some(ordered) = self.ordered_keys(*table, *index) {
                    ordered.insert(key.clone());
                }
            }
            LockTarget::Range {
                table,
                index,
                lo,
                hi,
            } => self
                .ordered_space(*table, *index)
                .ranges
                .push((lo.clone(), hi.clone())),
        }
    }

    /// The ordered point keys of (`table`, `index`), if a range was
    /// recorded there.
    fn ordered_keys(&mut self, table: TableId, index: IndexId) -> Option<&mut BTreeSet<Key>> {
        self.spaces
            .get_mut(&(table, index))
            .and_then(|s| s.ordered.as_mut())
    }

    /// The space of (`table`, `index`), its point keys ordered from now on
    /// (the first range here orders the points used so far).
    fn ordered_space(&mut self, table: TableId, index: IndexId) -> &mut Space {
        let space = self.spaces.entry((table, index)).or_default();
        if space.ordered.is_none() {
            space.ordered = Some(
                self.by_target
                    .keys()
                    .filter_map(|t| match t {
                        LockTarget::Point {
                            table: t2,
                            index: i2,
                            key,
                        } if *t2 == table && *i2 == index => Some(key.clone()),
                        _ => None,
                    })
                    .collect(),
            );
        }
        space
    }

    /// A target's last use went.
    fn unindex(&mut self, target: &LockTarget) {
        match target {
            LockTarget::Point { table, index, key } => {
                if let Some(ordered) = self.ordered_keys(*table, *index) {
                    ordered.remove(key);
                }
            }
            LockTarget::Range {
                table,
                index,
                lo,
                hi,
            } => {
                if let Some(space) = self.spaces.get_mut(&(*table, *index)) {
                    if let Some(i) = space.ranges.iter().position(|(l, h)| l == lo && h == hi) {
                        space.ranges.swap_remove(i);
                    }
                }
            }
        }
    }
}

fn range_target(table: TableId, index: IndexId, lo: &Bound<Key>, hi: &Bound<Key>) -> LockTarget {
    LockTarget::Range {
        table,
        index,
        lo: lo.clone(),
        hi: hi.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brine_core::Value;

    const TABLE: TableId = TableId(0);

    fn t(id: u64) -> TxnId {
        TxnId { ts: id, id }
    }

    fn key(k: i64) -> Key {
        Key::new([Value::Int(k)])
    }

    fn point(k: i64) -> LockTarget {
        LockTarget::Point {
            table: TABLE,
            index: IndexId::PRIMARY,
            key: key(k),
        }
    }

    fn range(lo: i64, hi: i64) -> LockTarget {
        LockTarget::Range {
            table: TABLE,
            index: IndexId::PRIMARY,
            lo: Bound::Included(key(lo)),
            hi: Bound::Included(key(hi)),
        }
    }

    /// Column 0 is the key, column 1 the value.
    fn scan(txn: u64) -> ColUse {
        ColUse {
            txn: t(txn),
            piece: t(txn),
            read: 0b11,
            write: 0,
            add: 0,
            rows: false,
        }
    }

    fn update(txn: u64) -> ColUse {
        ColUse {
            txn: t(txn),
            piece: t(txn),
            read: 0,
            write: 0b10,
            add: 0,
            rows: false,
        }
    }

    fn insert(txn: u64) -> ColUse {
        ColUse {
            txn: t(txn),
            piece: t(txn),
            read: 0,
            write: 0,
            add: 0,
            rows: true,
        }
    }

    fn conflicts(
        uses: &mut NexusUses,
        target: &LockTarget,
        mine: &ColUse,
        on: bool,
    ) -> Vec<(u64, Conflict)> {
        let mut out = Vec::new();
        uses.for_each_conflict(target, mine, on, |u, c| out.push((u.txn.id, c)));
        out
    }

    const SEES: Conflict = Conflict {
        sees: true,
        overwrites_read: false,
    };
    const ANTI: Conflict = Conflict {
        sees: false,
        overwrites_read: true,
    };

    #[test]
    fn a_write_into_a_scanned_range_overwrites_what_the_scan_read() {
        let mut uses = NexusUses::default();
        uses.record(&range(2, 4), scan(1));
        assert_eq!(
            conflicts(&mut uses, &point(3), &update(2), true),
            [(1, ANTI)]
        );
        assert_eq!(conflicts(&mut uses, &point(5), &update(2), true), []);
        // With overlap tracking off, only the exact target counts.
        assert_eq!(conflicts(&mut uses, &point(3), &update(2), false), []);
    }

    #[test]
    fn a_scan_over_a_written_row_sees_the_write() {
        let mut uses = NexusUses::default();
        uses.record(&point(3), update(1));
        uses.record(&point(9), update(3));
        assert_eq!(
            conflicts(&mut uses, &range(2, 4), &scan(2), true),
            [(1, SEES)]
        );
    }

    #[test]
    fn inserts_and_deletes_conflict_with_a_scan_whatever_the_columns() {
        let mut uses = NexusUses::default();
        uses.record(&point(3), insert(1));
        let count = ColUse { read: 0, ..scan(2) };
        assert_eq!(
            conflicts(&mut uses, &range(1, 5), &count, true),
            [(1, SEES)]
        );
        let mut uses = NexusUses::default();
        uses.record(&range(1, 5), count);
        assert_eq!(
            conflicts(&mut uses, &point(3), &insert(1), true),
            [(2, ANTI)]
        );
    }

    #[test]
    fn intersecting_ranges_and_points_recorded_before_the_first_range_are_found() {
        let mut uses = NexusUses::default();
        uses.record(&point(4), update(1));
        uses.record(&range(0, 2), scan(2));
        let range_update = ColUse {
            read: 0b01,
            ..update(3)
        };
        assert_eq!(
            conflicts(&mut uses, &range(2, 6), &range_update, true),
            [
                (
                    1,
                    Conflict {
                        sees: true,
                        overwrites_read: false
                    }
                ),
                (2, ANTI)
            ]
        );
    }

    #[test]
    fn forgotten_uses_no_longer_conflict_and_leave_no_index_behind() {
        let mut uses = NexusUses::default();
        uses.record(&range(2, 4), scan(1));
        uses.record(&point(3), update(2));
        uses.forget_txn(t(1));
        assert_eq!(
            conflicts(&mut uses, &point(3), &update(3), true),
            [(2, SEES)]
        );
        uses.forget_txn(t(2));
        assert!(uses.by_target.is_empty() && uses.by_txn.is_empty());
        let space = &uses.spaces[&(TABLE, IndexId::PRIMARY)];
        assert!(space.ranges.is_empty());
        assert!(space.ordered.as_ref().is_some_and(BTreeSet::is_empty));
    }

    /// A rolled-back piece's uses go, and only its own: the piece before
    /// it stays committed, and so does what it used on the same row.
    #[test]
    fn a_rolled_back_piece_leaves_the_uses_of_the_pieces_before_it() {
        let mut uses = NexusUses::default();
        let (owner, first, second) = (t(1), t(11), t(12));
        // The first piece read row 3 and committed; the second wrote rows
        // 3 and 4, then rolled back.
        uses.record(
            &point(3),
            ColUse {
                piece: first,
                ..scan(1)
            },
        );
        uses.record(
            &point(3),
            ColUse {
                piece: second,
                ..update(1)
            },
        );
        uses.record(
            &point(4),
            ColUse {
                piece: second,
                ..update(1)
            },
        );
        assert_eq!(conflicts(&mut uses, &point(3), &scan(2), true), [(1, SEES)]);
        uses.forget_piece(owner, second);
        // No write of row 3 or 4 is left to depend on; the first piece's
        // read still counts against a writer.
        assert_eq!(conflicts(&mut uses, &point(3), &scan(2), true), []);
        assert_eq!(conflicts(&mut uses, &point(4), &scan(2), true), []);
        assert_eq!(
            conflicts(&mut uses, &point(3), &update(2), true),
            [(1, ANTI)]
        );
        assert!(!uses.by_target.contains_key(&point(4)));
        assert_eq!(uses.by_txn[&owner], [point(3)]);
        uses.forget_txn(owner);
        assert!(uses.by_target.is_empty() && uses.by_txn.is_empty());
    }
}
