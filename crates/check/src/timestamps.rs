//! Timestamp-ordered versions: the pre-pass for histories whose header says
//! `config.versions: "timestamp"` ([`Header::timestamp_versions`]).
//!
//! ```text
//!  recorded:  T2 w(x, 0>200)   T1 w(x, 0>100)     (installed in this order)
//!  derived:   T1 w(x, 0>100)   T2 w(x, 100>200)   (ordered by version id)
//! ```
//!
//! A multi-versioned store writes each version at its transaction's commit
//! timestamp, and a write with a later timestamp may be installed before
//! one with an earlier timestamp. The `prev` a write records (the newest
//! version it saw at install time) is then not the version it follows, and
//! read literally the two writes above would fork. In such a store the
//! version id *is* the order: a reader at a snapshot sees the newest
//! version below its timestamp. So this pass replaces the `prev` of every
//! installed write with the next-lower installed version of its key (0, the
//! initial state, when there is none), and the checker then runs unchanged:
//! its version order, edges and anomalies follow from the rewritten prevs.
//!
//! Installed writes are those of committed transactions and of unknown ones
//! a committed transaction read from (transitively, as the checker itself
//! decides; see docs/checker.md, "Unknown outcomes"). The prevs of
//! aborted writes and of unproven unknown ones are left as recorded: they
//! are in no key's order, and a read of one is still a G1a (aborted) or
//! promotes its writer (unknown); a read of a version nobody wrote is
//! still a garbage read.

use std::borrow::Cow;
use std::collections::HashMap;

use brine_core::Key;

use crate::history::{Header, Op, Outcome, TxnRecord, INITIAL_VERSION};
use crate::reader::History;

/// The records to check for `history`: as recorded, or with the prevs
/// derived from version ids when its header asks for it.
pub fn prepared(history: &History) -> Cow<'_, [TxnRecord]> {
    prepared_for(&history.header, &history.txns)
}

/// [`prepared`] for a header and records held apart.
pub fn prepared_for<'t>(header: &Header, txns: &'t [TxnRecord]) -> Cow<'t, [TxnRecord]> {
    if !header.timestamp_versions() {
        return Cow::Borrowed(txns);
    }
    let mut owned = txns.to_vec();
    renumber(&mut owned);
    derive_prevs(&mut owned);
    Cow::Owned(owned)
}

/// Makes version ids unique across keys. Under the timestamp switch a
/// version id is its timestamp, which one transaction's writes to several
/// keys share, while the checker names a version by its id alone. When
/// at most `m` keys share an id, every id becomes `id * f + i`, where
/// `f` is the smallest power of ten above `m` and `i` the key's rank
/// among those sharing it: each key's order is kept, the witnesses still
/// show the timestamp (its digits first), and a history with no shared
/// id is left as it is (`f` = 1). Returns `f` (0: the ids were too large
/// to scale and were numbered densely instead, in the same order).
pub fn renumber(txns: &mut [TxnRecord]) -> u64 {
    let mut all: Vec<(u64, String, Key)> = Vec::new();
    for rec in txns.iter_mut() {
        for op in &mut rec.ops {
            each_version(op, |table, key, v| {
                if *v != INITIAL_VERSION {
                    all.push((*v, table.to_string(), key.clone()));
                }
            });
        }
    }
    all.sort_unstable();
    all.dedup();
    // Rank of each (id, key) among the keys sharing the id.
    let mut rank: Vec<u64> = Vec::with_capacity(all.len());
    for (i, (v, _, _)) in all.iter().enumerate() {
        rank.push(match i.checked_sub(1).map(|j| (&all[j], rank[j])) {
            Some(((w, _, _), r)) if w == v => r + 1,
            _ => 0,
        });
    }
    let shared = rank.iter().max().map_or(0, |r| r + 1);
    let mut factor: u64 = 1;
    while factor < shared {
        factor *= 10;
    }
    if factor == 1 {
        return 1;
    }
    let max = all.last().map_or(0, |(v, _, _)| *v);
    let scaled = max.checked_mul(factor).is_some();
    // Dense numbering keeps each key's order too: ids sort by (id, key).
    let ids: HashMap<(&str, &Key, u64), u64> = all
        .iter()
        .zip(&rank)
        .enumerate()
        .map(|(n, ((v, t, k), r))| {
            let id = if scaled { v * factor + r } else { n as u64 + 1 };
            ((t.as_str(), k, *v), id)
        })
        .collect();
    let id = |table: &str, key: &Key, v: u64| {
        if v == INITIAL_VERSION {
            v
        } else {
            ids[&(table, key, v)]
        }
    };
    for rec in txns.iter_mut() {
        for op in &mut rec.ops {
            each_version(op, |table, key, v| *v = id(table, key, *v));
        }
    }
    if scaled {
        factor
    } else {
        0
    }
}

/// Calls `f` with every version id `op` names (a read's, a write's and its
/// prev, a range read's rows'), with its table and key.
fn each_version(op: &mut Op, mut f: impl FnMut(&str, &Key, &mut u64)) {
    match op {
        Op::Read {
            table,
            key,
            version,
            ..
        } => f(table, key, version),
        Op::Write {
            table,
            key,
            version,
            prev,
            ..
        } => {
            f(table, key, version);
            f(table, key, prev);
        }
        Op::RangeRead { table, seen, .. } => {
            for s in seen {
                f(table, &s.key, &mut s.version);
            }
        }
    }
}

/// Replaces the `prev` of every installed write with the next-lower
/// installed version of the same key (0 if none); returns how many prevs
/// changed. Leaves the writes of aborted and unproven unknown transactions
/// alone (see the module docs).
pub fn derive_prevs(txns: &mut [TxnRecord]) -> usize {
    let installed = installed(txns);
    let mut by_key: HashMap<(&str, &Key), Vec<u64>> = HashMap::new();
    for (rec, _) in txns.iter().zip(&installed).filter(|(_, i)| **i) {
        for op in &rec.ops {
            if let Op::Write {
                table,
                key,
                version,
                ..
            } = op
            {
                if *version != INITIAL_VERSION {
                    by_key.entry((table, key)).or_default().push(*version);
                }
            }
        }
    }
    for versions in by_key.values_mut() {
        versions.sort_unstable();
        versions.dedup();
    }
    // (record, op, derived prev), collected while the keys are borrowed.
    let mut rewrites: Vec<(usize, usize, u64)> = Vec::new();
    for (t, rec) in txns.iter().enumerate().filter(|(t, _)| installed[*t]) {
        for (o, op) in rec.ops.iter().enumerate() {
            let Op::Write {
                table,
                key,
                version,
                prev,
                ..
            } = op
            else {
                continue;
            };
            let Some(versions) = by_key.get(&(table.as_str(), key)) else {
                continue;
            };
            let below = versions.partition_point(|v| v < version);
            let derived = below
                .checked_sub(1)
                .map_or(INITIAL_VERSION, |i| versions[i]);
            if derived != *prev {
                rewrites.push((t, o, derived));
            }
        }
    }
    for &(t, o, derived) in &rewrites {
        if let Op::Write { prev, .. } = &mut txns[t].ops[o] {
            *prev = derived;
        }
    }
    rewrites.len()
}

/// Which records' writes are installed: committed ones, and unknown ones
/// whose versions an installed record read (the prevs cannot prove
/// anything here: they are what this pass replaces).
fn installed(txns: &[TxnRecord]) -> Vec<bool> {
    let mut writer: HashMap<u64, usize> = HashMap::new();
    for (t, rec) in txns.iter().enumerate() {
        for op in &rec.ops {
            if let Op::Write { version, .. } = op {
                writer.entry(*version).or_insert(t);
            }
        }
    }
    let mut installed: Vec<bool> = txns
        .iter()
        .map(|r| r.outcome == Outcome::Committed)
        .collect();
    let mut work: Vec<usize> = (0..txns.len()).filter(|&t| installed[t]).collect();
    while let Some(t) = work.pop() {
        for v in read_versions(&txns[t]) {
            let Some(&w) = writer.get(&v) else {
                continue;
            };
            if !installed[w] && txns[w].outcome == Outcome::Unknown {
                installed[w] = true;
                work.push(w);
            }
        }
    }
    installed
}

/// Every version a record read, range reads' rows included.
fn read_versions(rec: &TxnRecord) -> impl Iterator<Item = u64> + '_ {
    rec.ops
        .iter()
        .flat_map(|op| -> Box<dyn Iterator<Item = u64>> {
            match op {
                Op::Read { version, .. } => Box::new(std::iter::once(*version)),
                Op::RangeRead { seen, .. } => Box::new(seen.iter().map(|s| s.version)),
                Op::Write { .. } => Box::new(std::iter::empty()),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{AnomalyClass, Level};
    use crate::script;

    fn prevs(txns: &[TxnRecord]) -> Vec<(u64, u64, u64)> {
        txns.iter()
            .flat_map(|r| {
                r.ops.iter().filter_map(move |o| match o {
                    Op::Write { version, prev, .. } => Some((r.id, *version, *prev)),
                    _ => None,
                })
            })
            .collect()
    }

    fn timestamped(text: &str) -> History {
        let mut h = script::parse(text).expect("script");
        h.header
            .config
            .insert("versions".into(), serde_json::json!("timestamp"));
        h
    }

    /// Installed writes follow the next-lower installed version of their
    /// key, whatever they recorded; aborted writes keep their prev, and an
    /// unknown write counts once a committed transaction read it.
    #[test]
    fn prevs_follow_version_ids_of_installed_writes() {
        let mut h = script::parse(
            "t2: w(x,0>200) w(y,7>300)\n\
             t1: w(x,0>100)\n\
             t3 aborted: w(x,0>150)\n\
             t4 unknown: w(x,0>120)\n\
             t5 unknown: w(x,0>180)\n\
             t6: r(x,120) w(x,100>250)",
        )
        .expect("script");
        let changed = derive_prevs(&mut h.txns);
        assert_eq!(
            prevs(&h.txns),
            vec![
                (2, 200, 120),
                (2, 300, 0),
                (1, 100, 0),
                (3, 150, 0),
                (4, 120, 100),
                (5, 180, 0),
                (6, 250, 200),
            ]
        );
        assert_eq!(changed, 4);
    }

    /// One transaction's writes share its commit timestamp: by key they
    /// are distinct versions (a duplicate version read literally), and a
    /// reader of both is fine; one that misses x beside T1's y is not.
    #[test]
    fn a_transactions_writes_share_its_timestamp() {
        let text = "t1: w(x,0>100) w(y,0>100)\n\
                    t2: r(x,100) r(y,100)";
        let literal =
            crate::check_history(&script::parse(text).expect("script"), Level::Serializable);
        assert!(!literal.valid, "{}", literal.render(5));
        let r = crate::check_history(&timestamped(text), Level::Serializable);
        assert!(r.valid, "{}", r.render(5));
        let mut h = timestamped(text);
        assert_eq!(renumber(&mut h.txns), 10);
        assert_eq!(prevs(&h.txns), vec![(1, 1000, 0), (1, 1001, 0)]);
        let skew = timestamped(
            "t1: w(x,0>100) w(y,0>100)\n\
             t2: r(x,0) r(y,100)",
        );
        let r = crate::check_history(&skew, Level::SnapshotIsolation);
        assert!(!r.valid, "{}", r.render(5));
    }

    /// T2's version 200 was installed before T1's 100, both over 0 as
    /// recorded: a fork read literally, a valid history by timestamps.
    #[test]
    fn out_of_order_installs_check_by_timestamp() {
        let text = "t2: w(x,0>200)\n\
                    t1: w(x,0>100)\n\
                    t3: r(x,200)";
        let literal = script::parse(text).expect("script");
        let r = crate::check_history(&literal, Level::Serializable);
        assert!(
            r.anomalies.iter().any(|a| a.class == AnomalyClass::Fork),
            "{}",
            r.render(5)
        );
        let r = crate::check_history(&timestamped(text), Level::Serializable);
        assert!(r.valid, "{}", r.render(5));
        assert!(r.anomalies.is_empty(), "{}", r.render(5));
    }

    /// T3 read T2's y but the older x, 100: by timestamps it missed T2's
    /// x, a G-single (read skew), which snapshot isolation forbids.
    #[test]
    fn a_stale_read_is_caught_by_timestamp() {
        let h = timestamped(
            "t2: w(x,0>200) w(y,0>201)\n\
             t1: w(x,0>100)\n\
             t3: r(y,201) r(x,100)",
        );
        let r = crate::check_history(&h, Level::SnapshotIsolation);
        assert!(!r.valid, "{}", r.render(5));
        let classes: Vec<AnomalyClass> = r.anomalies.iter().map(|a| a.class).collect();
        assert_eq!(classes, vec![AnomalyClass::GSingle], "{}", r.render(5));
        let ids: Vec<u64> = r.anomalies[0].txns.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![3, 2], "{}", r.render(5));
    }

    /// Reads of versions no committed write installed are still reported:
    /// an aborted writer's version (G1a) and a version nobody wrote.
    #[test]
    fn reads_of_uninstalled_versions_are_still_reported() {
        let h = timestamped(
            "t1: w(x,0>100)\n\
             t2 aborted: w(x,0>150)\n\
             t3: w(x,100>200)\n\
             t4: r(x,150)\n\
             t5: r(x,170)",
        );
        let r = crate::check_history(&h, Level::ReadCommitted);
        let mut classes: Vec<AnomalyClass> = r.anomalies.iter().map(|a| a.class).collect();
        classes.sort();
        assert_eq!(
            classes,
            vec![AnomalyClass::G1a, AnomalyClass::GarbageRead],
            "{}",
            r.render(5)
        );
        assert!(!r.valid);
    }

    /// Without the header switch nothing is rewritten.
    #[test]
    fn without_the_switch_records_are_borrowed_as_they_are() {
        let h = script::parse("t2: w(x,0>200)\nt1: w(x,0>100)").expect("script");
        assert!(matches!(prepared(&h), Cow::Borrowed(_)));
        let h = timestamped("t2: w(x,0>200)\nt1: w(x,0>100)");
        let p = prepared(&h);
        assert!(matches!(p, Cow::Owned(_)));
        assert_eq!(prevs(&p), vec![(2, 200, 100), (1, 100, 0)]);
    }
}
