//! What a statement touches, in the terms the lock table understands.
//!
//! Storage computes `LockNeed`s for a statement; the partition asks the lock
//! table for each of them before the statement runs.

use crate::schema::{IndexId, TableId};
use crate::value::Key;
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// The kind of access a lock protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Access {
    /// A point read of one key.
    Read,
    /// A read of every key in an interval of an index, including keys that do
    /// not exist yet (phantom protection).
    RangeRead,
    /// Insert, update or delete of one key.
    Write,
}

impl Access {
    pub fn is_read(self) -> bool {
        !matches!(self, Access::Write)
    }
}

/// What is locked: one key of an index, or an interval of an index. Keys of
/// different `(table, index)` pairs never conflict.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockTarget {
    Point {
        table: TableId,
        index: IndexId,
        key: Key,
    },
    Range {
        table: TableId,
        index: IndexId,
        lo: Bound<Key>,
        hi: Bound<Key>,
    },
}

impl LockTarget {
    pub fn table(&self) -> TableId {
        match self {
            LockTarget::Point { table, .. } | LockTarget::Range { table, .. } => *table,
        }
    }

    pub fn index(&self) -> IndexId {
        match self {
            LockTarget::Point { index, .. } | LockTarget::Range { index, .. } => *index,
        }
    }
}

/// One lock a statement needs before it can run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockNeed {
    pub target: LockTarget,
    pub access: Access,
}

/// False for intervals that contain no key (and that `BTreeSet::range` would
/// panic on).
pub fn interval_nonempty(lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l <= h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l < h,
        _ => true,
    }
}

/// True if the lower bound `lo` is not above the upper bound `hi`, i.e. some
/// key could satisfy both. Conservative for exclusive bounds on adjacent keys.
fn lower_not_above_upper(lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    match (lo, hi) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        (Bound::Included(l), Bound::Included(h)) => l <= h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l < h,
    }
}

/// True if some key may lie in both intervals (conservative for exclusive
/// bounds on adjacent keys).
pub fn intervals_overlap(
    lo1: &Bound<Key>,
    hi1: &Bound<Key>,
    lo2: &Bound<Key>,
    hi2: &Bound<Key>,
) -> bool {
    interval_nonempty(lo1, hi1)
        && interval_nonempty(lo2, hi2)
        && lower_not_above_upper(lo1, hi2)
        && lower_not_above_upper(lo2, hi1)
}

/// True if `key` lies within `[lo, hi]` with the given bounds. Keys compare
/// lexicographically, so a bound that is a prefix covers every key that
/// starts with it only when the caller builds bounds accordingly (storage
/// does, see `brine-storage`).
pub fn key_in_range(key: &Key, lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => key <= h,
        Bound::Excluded(h) => key < h,
    };
    above && below
}
