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
fn list_append_reads_list_elements_in_version_order() -> Result<(), Box<dyn std::error::Error>> {
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
                    // The generator appends 1, 2, 3... to each list in
                    // version order, so a read is increasing (aborted
                    // appends leave gaps).
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
