//! The Elle export round-trips: history -> EDN text -> parsed EDN -> the
//! same operations as the history, checked against the records directly
//! (not against the exporter's own intermediate form).

use brine_check::edn::Edn;
use brine_check::elle::{self, ElleModel, OpType};
use brine_check::gen::{generate, GenConfig};
use brine_check::{Op, Outcome};

fn register(table: &str, key: &brine_core::Key) -> Edn {
    elle::register_name(table, key)
}

#[test]
fn rw_register_export_round_trips() -> Result<(), Box<dyn std::error::Error>> {
    let h = generate(&GenConfig {
        txns: 500,
        seed: 11,
        ..GenConfig::default()
    });
    let mut out = Vec::new();
    elle::export(&h.txns, ElleModel::RwRegister, &mut out)?;
    let parsed = elle::parse_history(std::str::from_utf8(&out)?)?;
    // Completions in index order match the records in end-time order
    // (records without any operation Elle can see are left out).
    let mut by_end: Vec<&brine_check::TxnRecord> = h
        .txns
        .iter()
        .filter(|r| {
            r.ops.iter().any(|o| match o {
                Op::RangeRead { seen, .. } => !seen.is_empty(),
                _ => true,
            })
        })
        .collect();
    assert_eq!(parsed.len(), 2 * by_end.len());
    by_end.sort_by_key(|r| r.end_us);
    let completions: Vec<&elle::ElleOp> =
        parsed.iter().filter(|o| o.typ != OpType::Invoke).collect();
    assert_eq!(completions.len(), by_end.len());
    for (op, rec) in completions.iter().zip(&by_end) {
        let expected_type = match rec.outcome {
            Outcome::Committed => OpType::Ok,
            Outcome::Aborted => OpType::Fail,
            Outcome::Unknown => OpType::Info,
        };
        assert_eq!(op.typ, expected_type);
        assert_eq!(op.time, rec.end_us * 1000);
        let mut expected: Vec<(String, Edn, Edn)> = Vec::new();
        let observed = rec.outcome == Outcome::Committed;
        let read = |v: u64| {
            if !observed || v == 0 {
                Edn::Nil
            } else {
                Edn::Int(v as i64)
            }
        };
        for o in &rec.ops {
            match o {
                Op::Read {
                    table,
                    key,
                    version,
                    ..
                } => expected.push(("r".into(), register(table, key), read(*version))),
                Op::Write {
                    table,
                    key,
                    version,
                    ..
                } => expected.push(("w".into(), register(table, key), Edn::Int(*version as i64))),
                Op::RangeRead { table, seen, .. } => {
                    for s in seen {
                        expected.push(("r".into(), register(table, &s.key), read(s.version)));
                    }
                }
            }
        }
        let got: Vec<(String, Edn, Edn)> = op
            .value
            .iter()
            .map(|m| (m.f.clone(), m.key.clone(), m.value.clone()))
            .collect();
        assert_eq!(got, expected, "txn {}", rec.id);
    }
    Ok(())
}

#[test]
fn list_append_reads_list_elements_in_position_order() -> Result<(), Box<dyn std::error::Error>> {
    let h = generate(&GenConfig {
        txns: 800,
        seed: 5,
        ..GenConfig::default()
    });
    let mut out = Vec::new();
    elle::export(&h.txns, ElleModel::ListAppend, &mut out)?;
    let parsed = elle::parse_history(std::str::from_utf8(&out)?)?;
    let mut reads = 0;
    let mut appends = 0;
    for op in parsed.iter().filter(|o| o.typ == OpType::Ok) {
        for m in &op.value {
            match (m.f.as_str(), &m.value) {
                ("append", Edn::Int(_)) => appends += 1,
                ("r", Edn::Vector(elems)) => {
                    reads += 1;
                    // The generator's elements increase in the serial
                    // order, which is the lists' position order, so a
                    // read is increasing.
                    let ints: Vec<i64> = elems
                        .iter()
                        .filter_map(|e| if let Edn::Int(i) = e { Some(*i) } else { None })
                        .collect();
                    assert_eq!(ints.len(), elems.len());
                    assert!(ints.windows(2).all(|w| w[0] < w[1]), "{ints:?}");
                }
                other => panic!("unexpected micro-op {other:?}"),
            }
        }
    }
    assert!(
        reads > 10 && appends > 10,
        "{reads} reads, {appends} appends"
    );
    Ok(())
}

#[test]
fn generated_list_append_histories_keep_the_invariants() -> Result<(), Box<dyn std::error::Error>> {
    for seed in 0..4 {
        let h = generate(&GenConfig {
            txns: 1500,
            seed,
            lists: 3,
            ..GenConfig::default()
        });
        let mut out = Vec::new();
        elle::export(&h.txns, ElleModel::ListAppend, &mut out)?;
        let parsed = elle::parse_history(std::str::from_utf8(&out)?)?;
        let c = elle::check_list_append(&parsed);
        assert!(c.ok(), "seed {seed}: {}", c.render());
        assert!(
            c.appends > 100 && c.reads > 50 && c.ordered_pairs > 100,
            "{c:?}"
        );
    }
    Ok(())
}

/// A copy of `ops` with the first `:ok` read of at least two elements
/// changed by `f`.
fn with_read(ops: &[elle::ElleOp], f: impl Fn(&mut Vec<Edn>)) -> Vec<elle::ElleOp> {
    let mut ops = ops.to_vec();
    let m = ops
        .iter_mut()
        .filter(|o| o.typ == OpType::Ok)
        .flat_map(|o| o.value.iter_mut())
        .find(|m| m.f == "r" && matches!(&m.value, Edn::Vector(v) if v.len() >= 2))
        .expect("a read of two elements");
    if let Edn::Vector(v) = &mut m.value {
        f(v);
    }
    ops
}

#[test]
fn broken_list_append_histories_are_caught() -> Result<(), Box<dyn std::error::Error>> {
    let h = generate(&GenConfig {
        txns: 1500,
        seed: 3,
        lists: 3,
        ..GenConfig::default()
    });
    let ops = elle::elle_ops(&h.txns, ElleModel::ListAppend);
    assert!(elle::check_list_append(&ops).ok());
    let problems = |ops: &[elle::ElleOp]| {
        let c = elle::check_list_append(ops);
        assert!(!c.ok());
        c.problems.join("\n")
    };
    // Two elements of a read swapped: the reads disagree.
    let swapped = with_read(&ops, |v| v.swap(0, 1));
    assert!(problems(&swapped).contains("not a prefix"));
    // An element read twice; an element nobody appended.
    assert!(problems(&with_read(&ops, |v| v[1] = v[0].clone())).contains("twice"));
    assert!(problems(&with_read(&ops, |v| v.push(Edn::Int(-7)))).contains("nobody appended"));
    // An element lost from a read that began after its append completed.
    let lost = with_read(&ops, |v| {
        v.remove(0);
    });
    assert!(!elle::check_list_append(&lost).ok());
    // A retry that re-appends its element (the old workload's retries).
    let mut dup = ops.clone();
    let e = dup
        .iter()
        .flat_map(|o| o.value.iter())
        .find(|m| m.f == "append")
        .cloned()
        .expect("an append");
    let at = dup
        .iter()
        .rposition(|o| o.typ == OpType::Ok)
        .expect("an ok");
    dup[at].value.push(e);
    assert!(problems(&dup).contains("duplicate append"));
    // Real time: a list order against the commit order. Two appends to a
    // fresh list, one completing before the other begins, read in the
    // opposite order.
    let op = |typ, process, time, index, value: Vec<elle::Mop>| elle::ElleOp {
        typ,
        process,
        time,
        index,
        value,
    };
    let mop = |f: &str, key: i64, value: Edn| elle::Mop {
        f: f.into(),
        key: Edn::Int(key),
        value,
    };
    let app = |e| vec![mop("append", 99, Edn::Int(e))];
    let late = vec![
        op(OpType::Invoke, 0, 0, 0, app(1)),
        op(OpType::Ok, 0, 10, 1, app(1)),
        op(OpType::Invoke, 0, 20, 2, app(2)),
        op(OpType::Ok, 0, 30, 3, app(2)),
        op(
            OpType::Invoke,
            0,
            40,
            4,
            vec![mop("r", 99, Edn::Vector(vec![Edn::Int(2), Edn::Int(1)]))],
        ),
        op(
            OpType::Ok,
            0,
            50,
            5,
            vec![mop("r", 99, Edn::Vector(vec![Edn::Int(2), Edn::Int(1)]))],
        ),
    ];
    let c = elle::check_list_append(&late);
    assert_eq!(c.problem_count, 1, "{}", c.render());
    assert!(c.problems[0].contains("before"), "{}", c.render());
    Ok(())
}
