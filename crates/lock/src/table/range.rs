//! Targets inside their (table, index) space: the point and range entries
//! of one [`Space`], and which of them overlap a target (equal keys, a key
//! in an interval, intersecting intervals).

use super::queue::Entry;
use super::Map;
use brine_core::access::{interval_nonempty, intervals_overlap, key_in_range};
use brine_core::{IndexId, Key, LockTarget, TableId};
use std::collections::BTreeSet;
use std::ops::Bound;

pub(super) type SpaceKey = (TableId, IndexId);

/// A target inside its (table, index) space, borrowed from a `LockTarget`.
#[derive(Clone, Copy)]
pub(super) enum Local<'a> {
    Point(&'a Key),
    Range(&'a Bound<Key>, &'a Bound<Key>),
}

#[inline]
pub(super) fn split(t: &LockTarget) -> (SpaceKey, Local<'_>) {
    match t {
        LockTarget::Point { table, index, key } => ((*table, *index), Local::Point(key)),
        LockTarget::Range {
            table,
            index,
            lo,
            hi,
        } => ((*table, *index), Local::Range(lo, hi)),
    }
}

pub(super) struct RangeEntry {
    pub(super) lo: Bound<Key>,
    pub(super) hi: Bound<Key>,
    pub(super) entry: Entry,
}

/// All locks of one (table, index). Points are found by hash; `ordered`
/// indexes the point keys for range requests. It is built the first time a
/// range is requested in this space and maintained from then on, so spaces
/// that only ever see point locks never pay for it. Range entries are few
/// (one per distinct interval), so a list is enough.
#[derive(Default)]
pub(super) struct Space {
    pub(super) points: Map<Key, Entry>,
    pub(super) ordered: Option<BTreeSet<Key>>,
    pub(super) ranges: Vec<RangeEntry>,
}

impl Space {
    pub(super) fn entry(&self, t: Local<'_>) -> Option<&Entry> {
        match t {
            Local::Point(k) => self.points.get(k),
            Local::Range(lo, hi) => self
                .ranges
                .iter()
                .find(|r| &r.lo == lo && &r.hi == hi)
                .map(|r| &r.entry),
        }
    }

    pub(super) fn entry_mut(&mut self, t: Local<'_>) -> Option<&mut Entry> {
        match t {
            Local::Point(k) => self.points.get_mut(k),
            Local::Range(lo, hi) => self
                .ranges
                .iter_mut()
                .find(|r| &r.lo == lo && &r.hi == hi)
                .map(|r| &mut r.entry),
        }
    }

    pub(super) fn entry_or_insert(&mut self, t: Local<'_>) -> &mut Entry {
        match t {
            Local::Point(k) => match self.points.entry(k.clone()) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    if let Some(ordered) = &mut self.ordered {
                        ordered.insert(k.clone());
                    }
                    v.insert(Entry::default())
                }
            },
            Local::Range(lo, hi) => {
                let pos = match self.ranges.iter().position(|r| &r.lo == lo && &r.hi == hi) {
                    Some(pos) => pos,
                    None => {
                        self.ranges.push(RangeEntry {
                            lo: lo.clone(),
                            hi: hi.clone(),
                            entry: Entry::default(),
                        });
                        self.ranges.len() - 1
                    }
                };
                &mut self.ranges[pos].entry
            }
        }
    }

    /// Drops the entry of `t` if nothing holds or waits on it.
    pub(super) fn prune(&mut self, t: Local<'_>) {
        match t {
            Local::Point(k) => {
                if self.points.get(k).is_some_and(Entry::is_empty) {
                    self.points.remove(k);
                    if let Some(ordered) = &mut self.ordered {
                        ordered.remove(k);
                    }
                }
            }
            Local::Range(lo, hi) => {
                if let Some(pos) = self
                    .ranges
                    .iter()
                    .position(|r| &r.lo == lo && &r.hi == hi && r.entry.is_empty())
                {
                    self.ranges.remove(pos);
                }
            }
        }
    }

    pub(super) fn ensure_ordered(&mut self) {
        if self.ordered.is_none() {
            self.ordered = Some(self.points.keys().cloned().collect());
        }
    }

    /// Calls `f` on every entry whose target overlaps `t` (including the entry
    /// of `t` itself). Point vs point: equal keys; point vs range: key in
    /// interval; range vs range: intervals intersect.
    pub(super) fn for_each_overlapping<'s>(&'s self, t: Local<'_>, mut f: impl FnMut(&'s Entry)) {
        self.for_each_overlapping_exact(t, |e, _| f(e));
    }

    /// As `for_each_overlapping`, also telling whether the entry is the one
    /// of exactly `t`.
    pub(super) fn for_each_overlapping_exact<'s>(
        &'s self,
        t: Local<'_>,
        mut f: impl FnMut(&'s Entry, bool),
    ) {
        match t {
            Local::Point(k) => {
                if let Some(e) = self.points.get(k) {
                    f(e, true);
                }
                for r in &self.ranges {
                    if key_in_range(k, &r.lo, &r.hi) {
                        f(&r.entry, false);
                    }
                }
            }
            Local::Range(lo, hi) => {
                debug_assert!(
                    self.ordered.is_some(),
                    "range request in a space without a key index"
                );
                if let Some(ordered) = &self.ordered {
                    if interval_nonempty(lo, hi) {
                        for k in ordered.range::<Key, _>((lo.as_ref(), hi.as_ref())) {
                            if let Some(e) = self.points.get(k) {
                                f(e, false);
                            }
                        }
                    }
                }
                for r in &self.ranges {
                    if intervals_overlap(lo, hi, &r.lo, &r.hi) {
                        f(&r.entry, &r.lo == lo && &r.hi == hi);
                    }
                }
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.points.is_empty() && self.ranges.is_empty()
    }
}
