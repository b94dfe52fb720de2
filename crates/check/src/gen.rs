//! A generator of large valid histories: a seeded serial simulation.
//!
//! Transactions run one after another against an in-memory store (so every
//! history is serializable by construction: the serial order is the
//! generation order) while their recorded time intervals overlap as under
//! two-phase locking: each ends at its slot in the serial order and starts
//! up to `overlap_us` earlier. Aborted transactions install versions that
//! nobody sees; unknown ones take effect half of the time.
//!
//! The store has a register table `reg` (INT keys, a secondary index 1 on
//! a small "bucket" column, rows inserted, updated and deleted) and the
//! list-append table `la` with rows `(list, position, element)`, elements
//! unique in the history (`lists` lists are active at a time; a list
//! retires after 64 appends). Operations: point
//! reads, writes, range reads over the primary key and over index 1,
//! appends and whole-list reads.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use brine_core::{Key, Value};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::history::{IndexChange, Op, Outcome, Seen, TxnClass, TxnRecord, WriteKind};
use crate::reader::History;
use crate::script::header;

/// Parameters of a generated history.
#[derive(Clone, Debug)]
pub struct GenConfig {
    pub txns: usize,
    pub seed: u64,
    /// Keys of table `reg` (the first half exist initially).
    pub keys: i64,
    /// Lists of table `la`.
    pub lists: i64,
    pub abort_pct: u32,
    pub unknown_pct: u32,
    pub ops_max: usize,
    pub overlap_us: u64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            txns: 1000,
            seed: 1,
            keys: 100,
            lists: 10,
            abort_pct: 5,
            unknown_pct: 2,
            ops_max: 6,
            overlap_us: 40,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Row {
    version: u64,
    /// `None`: no row (never inserted, or deleted).
    bucket: Option<i64>,
}

fn int_key(vals: &[i64]) -> Key {
    Key::new(vals.iter().map(|&v| Value::Int(v)))
}

/// Appends per list before the list is retired.
const LIST_LEN_MAX: i64 = 64;

/// Generates a valid history.
pub fn generate(cfg: &GenConfig) -> History {
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let keys = cfg.keys.max(1);
    let lists = cfg.lists.max(1);
    // About four rows per bucket, so index range reads stay narrow.
    let buckets = (keys / 4).max(2);
    let mut reg: BTreeMap<i64, Row> = (0..keys)
        .map(|k| {
            let bucket = (k < keys / 2).then_some(k % buckets);
            (k, Row { version: 0, bucket })
        })
        .collect();
    let mut la: BTreeMap<(i64, i64, i64), u64> = BTreeMap::new();
    // Appends issued per list (for retiring it), committed lengths, and
    // the next element (unique in the history).
    let mut issued: HashMap<i64, i64> = HashMap::new();
    let mut len: HashMap<i64, i64> = HashMap::new();
    let mut next_elem: i64 = 0;
    let mut list_base: i64 = 0;
    let mut next_version: u64 = 1;
    let mut txns = Vec::with_capacity(cfg.txns);
    for i in 0..cfg.txns {
        let mut local: BTreeMap<i64, Row> = BTreeMap::new();
        let mut local_la: BTreeMap<(i64, i64, i64), u64> = BTreeMap::new();
        let mut local_len: HashMap<i64, i64> = HashMap::new();
        let mut ops = Vec::new();
        let n_ops = rng.gen_range(1..=cfg.ops_max.max(1));
        for _ in 0..n_ops {
            let view = |k: i64, local: &BTreeMap<i64, Row>| -> Row {
                local
                    .get(&k)
                    .or_else(|| reg.get(&k))
                    .copied()
                    .unwrap_or(Row {
                        version: 0,
                        bucket: None,
                    })
            };
            let dice = rng.gen_range(0..100);
            if dice < 35 {
                let k = rng.gen_range(0..keys);
                ops.push(Op::Read {
                    table: "reg".into(),
                    key: int_key(&[k]),
                    version: view(k, &local).version,
                    sub: None,
                    cols: None,
                });
            } else if dice < 65 {
                let k = rng.gen_range(0..keys);
                let cur = view(k, &local);
                let (kind, bucket) = match cur.bucket {
                    None => (WriteKind::Insert, Some(rng.gen_range(0..buckets))),
                    Some(_) if rng.gen_range(0..10) < 3 => (WriteKind::Delete, None),
                    // Most updates keep the indexed column (rows rarely
                    // move between index ranges, as in real schemas).
                    Some(b) if rng.gen_range(0..10) < 8 => (WriteKind::Update, Some(b)),
                    Some(_) => (WriteKind::Update, Some(rng.gen_range(0..buckets))),
                };
                let version = next_version;
                next_version += 1;
                ops.push(Op::Write {
                    table: "reg".into(),
                    key: int_key(&[k]),
                    version,
                    prev: cur.version,
                    kind,
                    ix: vec![IndexChange {
                        index: 1,
                        old: cur.bucket.map(|b| int_key(&[b])),
                        new: bucket.map(|b| int_key(&[b])),
                    }],
                    sub: None,
                    cols: None,
                });
                local.insert(k, Row { version, bucket });
            } else if dice < 75 {
                let a = rng.gen_range(0..keys);
                let b = (a + rng.gen_range(0..4)).min(keys - 1);
                let mut seen = Vec::new();
                for k in a..=b {
                    let row = view(k, &local);
                    if row.bucket.is_some() || row.version != 0 {
                        seen.push(Seen {
                            key: int_key(&[k]),
                            version: row.version,
                            deleted: row.bucket.is_none(),
                        });
                    }
                }
                ops.push(Op::RangeRead {
                    table: "reg".into(),
                    index: 0,
                    lo: Box::new(Bound::Included(int_key(&[a]))),
                    hi: Box::new(Bound::Included(int_key(&[b]))),
                    seen,
                    sub: None,
                    cols: None,
                });
            } else if dice < 80 {
                let b1 = rng.gen_range(0..buckets);
                let b2 = (b1 + rng.gen_range(0..2)).min(buckets - 1);
                let seen = (0..keys)
                    .filter_map(|k| {
                        let row = view(k, &local);
                        row.bucket.filter(|b| (b1..=b2).contains(b)).map(|_| Seen {
                            key: int_key(&[k]),
                            version: row.version,
                            deleted: false,
                        })
                    })
                    .collect();
                ops.push(Op::RangeRead {
                    table: "reg".into(),
                    index: 1,
                    lo: Box::new(Bound::Included(int_key(&[b1]))),
                    hi: Box::new(Bound::Excluded(int_key(&[b2 + 1]))),
                    seen,
                    sub: None,
                    cols: None,
                });
            } else if dice < 90 {
                let l = list_base + rng.gen_range(0..lists);
                let n = issued.entry(l).or_insert(0);
                *n += 1;
                next_elem += 1;
                let e = next_elem;
                let pos = *local_len
                    .entry(l)
                    .or_insert_with(|| len.get(&l).copied().unwrap_or(0));
                local_len.insert(l, pos + 1);
                let version = next_version;
                next_version += 1;
                ops.push(Op::Write {
                    table: "la".into(),
                    key: int_key(&[l, pos, e]),
                    version,
                    prev: 0,
                    kind: WriteKind::Insert,
                    ix: vec![],
                    sub: None,
                    cols: None,
                });
                if *n >= LIST_LEN_MAX {
                    // Retire the full list (Elle's key rotation): the
                    // window of active lists moves on.
                    list_base += 1;
                }
                local_la.insert((l, pos, e), version);
            } else {
                let l = list_base + rng.gen_range(0..lists);
                let whole = (l, i64::MIN, i64::MIN)..=(l, i64::MAX, i64::MAX);
                let mut rows: BTreeMap<(i64, i64), u64> = la
                    .range(whole.clone())
                    .map(|(&(_, pos, e), &v)| ((pos, e), v))
                    .collect();
                for (&(_, pos, e), &v) in local_la.range(whole) {
                    rows.insert((pos, e), v);
                }
                ops.push(Op::RangeRead {
                    table: "la".into(),
                    index: 0,
                    lo: Box::new(Bound::Included(Key::new([Value::Int(l)]))),
                    hi: Box::new(Bound::Included(Key::prefix_upper(&[Value::Int(l)]))),
                    seen: rows
                        .into_iter()
                        .map(|((pos, e), v)| Seen {
                            key: int_key(&[l, pos, e]),
                            version: v,
                            deleted: false,
                        })
                        .collect(),
                    sub: None,
                    cols: None,
                });
            }
        }
        let roll = rng.gen_range(0..100);
        let outcome = if roll < cfg.abort_pct {
            Outcome::Aborted
        } else if roll < cfg.abort_pct + cfg.unknown_pct {
            Outcome::Unknown
        } else {
            Outcome::Committed
        };
        let applies = match outcome {
            Outcome::Committed => true,
            Outcome::Aborted => false,
            Outcome::Unknown => rng.gen_bool(0.5),
        };
        if applies {
            reg.extend(local);
            la.extend(local_la);
            len.extend(local_len);
        }
        let end_us = 100 + i as u64 * 10;
        let start_us = end_us - rng.gen_range(0..=cfg.overlap_us.min(100));
        txns.push(TxnRecord {
            id: i as u64 + 1,
            ts: i as u64 + 1,
            procedure: Some("gen".into()),
            class: TxnClass::Acid,
            group: None,
            outcome,
            accepted: false,
            read_committed: false,
            client: None,
            two_phase: false,
            orphan: false,
            start_us,
            end_us,
            ops,
        });
    }
    History {
        header: header("generated"),
        txns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check, Level};

    #[test]
    fn generated_histories_are_valid() {
        for seed in 0..8 {
            let h = generate(&GenConfig {
                txns: 400,
                seed,
                keys: 8,
                lists: 3,
                ..GenConfig::default()
            });
            let r = check(&h.txns, Level::Serializable);
            assert!(
                r.valid && r.anomalies.is_empty(),
                "seed {seed}:\n{}",
                r.render(5)
            );
            assert!(
                r.stats.edges.get("pred-rw").copied().unwrap_or(0) > 0,
                "{:?}",
                r.stats
            );
        }
    }

    #[test]
    fn generation_is_deterministic() {
        let cfg = GenConfig {
            txns: 50,
            ..GenConfig::default()
        };
        assert_eq!(generate(&cfg).txns, generate(&cfg).txns);
    }
}
