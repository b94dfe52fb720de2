//! The table's deterministic dump (`Display`: identical histories print
//! identically, which the scenario tests compare) and how targets read in
//! it and in error messages.

use super::queue::Entry;
use super::LockTable;
use brine_core::{Key, LockTarget};
use std::cmp::Ordering;
use std::fmt;
use std::ops::Bound;

pub(super) fn fmt_range(lo: &Bound<Key>, hi: &Bound<Key>) -> String {
    let lo = match lo {
        Bound::Included(k) => format!("[{k:?}"),
        Bound::Excluded(k) => format!("({k:?}"),
        Bound::Unbounded => "(-inf".to_string(),
    };
    let hi = match hi {
        Bound::Included(k) => format!("{k:?}]"),
        Bound::Excluded(k) => format!("{k:?})"),
        Bound::Unbounded => "+inf)".to_string(),
    };
    format!("{lo}, {hi}")
}

/// A target for error messages: `table 1 index 0 key ("k")`.
pub(super) fn describe(t: &LockTarget) -> String {
    let kind = if matches!(t, LockTarget::Point { .. }) {
        "key"
    } else {
        "range"
    };
    format!(
        "table {} index {} {kind} {}",
        t.table().0,
        t.index().0,
        fmt_target(t)
    )
}

fn fmt_target(t: &LockTarget) -> String {
    match t {
        LockTarget::Point { key, .. } => format!("{key:?}"),
        LockTarget::Range { lo, hi, .. } => fmt_range(lo, hi),
    }
}

fn cmp_lower(a: &Bound<Key>, b: &Bound<Key>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Less),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Greater),
    }
}

fn cmp_upper(a: &Bound<Key>, b: &Bound<Key>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Greater,
        (_, Bound::Unbounded) => Ordering::Less,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Greater),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Less),
    }
}

fn fmt_entry(f: &mut fmt::Formatter<'_>, name: &str, e: &Entry) -> fmt::Result {
    write!(f, "  {name}:")?;
    if !e.holders.is_empty() {
        write!(f, " held")?;
        for (i, h) in e.holders.iter().enumerate() {
            write!(f, "{} {} {}", if i > 0 { "," } else { "" }, h.txn, h.mode)?;
        }
    }
    if !e.queue.is_empty() {
        write!(
            f,
            "{}waiting",
            if e.holders.is_empty() { " " } else { " | " }
        )?;
        for (i, q) in e.queue.iter().enumerate() {
            let up = match (q.upgrade, q.gated, q.ready) {
                (true, _, _) => " (upgrade)",
                (_, true, true) => " (gated, ready)",
                (_, true, false) => " (gated)",
                _ if q.behind_gate => " (behind gate)",
                _ => "",
            };
            write!(
                f,
                "{} {} {} {}{up}",
                if i > 0 { "," } else { "" },
                q.ticket,
                q.txn,
                q.mode
            )?;
        }
    }
    writeln!(f)
}

impl fmt::Display for LockTable {
    /// One line per target with holders (grant order) and waiters (queue
    /// order); spaces, keys and ranges sorted; then transactions with
    /// release-order state, sorted. Identical histories print identically.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut spaces: Vec<_> = self.spaces.iter().filter(|(_, s)| !s.is_empty()).collect();
        spaces.sort_by_key(|(k, _)| **k);
        let mut any = false;
        for ((table, index), space) in spaces {
            any = true;
            writeln!(f, "table {} index {}:", table.0, index.0)?;
            let mut points: Vec<_> = space.points.iter().collect();
            points.sort_by(|a, b| a.0.cmp(b.0));
            for (k, e) in points {
                fmt_entry(f, &format!("{k:?}"), e)?;
            }
            let mut ranges: Vec<_> = space.ranges.iter().collect();
            ranges.sort_by(|a, b| cmp_lower(&a.lo, &b.lo).then_with(|| cmp_upper(&a.hi, &b.hi)));
            for r in ranges {
                fmt_entry(f, &fmt_range(&r.lo, &r.hi), &r.entry)?;
            }
        }
        let mut txns: Vec<_> = self
            .txns
            .iter()
            .filter(|(_, s)| {
                !s.deps.is_empty()
                    || !s.pending.is_empty()
                    || s.releasing
                    || s.staged
                    || s.parent.is_some()
            })
            .collect();
        txns.sort_by_key(|(t, _)| **t);
        for (txn, st) in txns {
            any = true;
            write!(f, "txn {txn}:")?;
            if let Some(p) = st.parent {
                write!(f, " forked from {p}")?;
            }
            if st.releasing {
                write!(f, " releasing")?;
            }
            if st.staged {
                write!(f, " staged")?;
            }
            for d in &st.deps {
                let mine = d.target.as_ref().map_or("all".to_string(), fmt_target);
                let theirs = d.on_target.as_ref().map_or("all".to_string(), fmt_target);
                write!(f, " [{mine} after {} {theirs}]", d.on)?;
            }
            for (t, a) in &st.pending {
                write!(f, " pending-release {} {a:?}", fmt_target(t))?;
            }
            writeln!(f)?;
        }
        if !any {
            writeln!(f, "(empty)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
