//! Export to Jepsen/Elle EDN histories, and the reader for what it writes.
//!
//! Each transaction attempt becomes an invocation and a completion:
//!
//! ```text
//! {:type :invoke, :f :txn, :value [[:r "t/1" nil] [:w "t/1" 7]], :process 0, :time 10000, :index 0}
//! {:type :ok,     :f :txn, :value [[:r "t/1" 3] [:w "t/1" 7]],   :process 0, :time 15000, :index 1}
//! ```
//!
//! `:type` of the completion is `:ok` (committed), `:fail` (aborted) or
//! `:info` (unknown); an invocation's and a failed or unknown completion's
//! reads carry `nil`. `:time` is nanoseconds (the record's microseconds
//! times 1000); events are ordered by time. Processes are assigned so that
//! one process never has two transactions open at once, and a process whose
//! transaction ended `:info` is never reused (Jepsen's rule: it may still be
//! running).
//!
//! Models:
//! * `rw-register`: every row is a register named `"table/c1/c2..."`
//!   whose value is the version id: reads of version 0 are `nil`; writes
//!   (deletes included: a tombstone is a value) write their version id;
//!   range reads become reads of each row they saw.
//! * `list-append`: rows `(k, e)` of table `la` are element `e` of list
//!   `k`. An insert is `[:append k e]`; a range read of the whole prefix
//!   `(k)` is `[:r k [e...]]` with the elements ordered by the version ids
//!   of their inserts. Other operations are not representable and left out.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Bound;

use brine_core::{Key, Value};
use thiserror::Error;

use crate::edn::{self, Edn};
use crate::history::{Op, Outcome, TxnRecord, WriteKind, INITIAL_VERSION};

/// The table the list-append workload stores its lists in.
pub const LIST_APPEND_TABLE: &str = "la";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElleModel {
    RwRegister,
    ListAppend,
}

impl ElleModel {
    pub fn name(self) -> &'static str {
        match self {
            ElleModel::RwRegister => "rw-register",
            ElleModel::ListAppend => "list-append",
        }
    }
}

impl std::str::FromStr for ElleModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rw-register" => Ok(ElleModel::RwRegister),
            "list-append" => Ok(ElleModel::ListAppend),
            other => Err(format!(
                "unknown Elle model {other:?} (expected rw-register or list-append)"
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl OpType {
    fn name(self) -> &'static str {
        match self {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        }
    }
}

/// One micro-operation: `[:r k v]`, `[:w k v]` or `[:append k e]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mop {
    /// `r`, `w` or `append`.
    pub f: String,
    pub key: Edn,
    pub value: Edn,
}

/// One history event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElleOp {
    pub typ: OpType,
    pub process: u64,
    /// Nanoseconds.
    pub time: u64,
    pub index: u64,
    pub value: Vec<Mop>,
}

impl ElleOp {
    pub fn to_edn(&self) -> Edn {
        let value = Edn::Vector(
            self.value
                .iter()
                .map(|m| Edn::Vector(vec![Edn::kw(&m.f), m.key.clone(), m.value.clone()]))
                .collect(),
        );
        Edn::Map(vec![
            (Edn::kw("type"), Edn::kw(self.typ.name())),
            (Edn::kw("f"), Edn::kw("txn")),
            (Edn::kw("value"), value),
            (Edn::kw("process"), Edn::Int(self.process as i64)),
            (Edn::kw("time"), Edn::Int(self.time as i64)),
            (Edn::kw("index"), Edn::Int(self.index as i64)),
        ])
    }
}

#[derive(Debug, Error)]
pub enum ElleError {
    #[error(transparent)]
    Edn(#[from] edn::EdnError),
    #[error("Elle op {index}: {message}")]
    Shape { index: usize, message: String },
    #[error("cannot write the EDN history: {0}")]
    Io(#[from] std::io::Error),
}

fn value_edn(v: &Value) -> Edn {
    match v {
        Value::Int(i) => Edn::Int(*i),
        Value::Str(s) => Edn::Str(s.to_string()),
        Value::Null => Edn::Nil,
        other => Edn::Str(format!("{other:?}")),
    }
}

/// The register name of a row: `"table/c1/c2"`.
pub fn register_name(table: &str, key: &Key) -> Edn {
    let mut s = table.to_string();
    for v in key.values() {
        s.push('/');
        match v {
            Value::Str(x) => s.push_str(x),
            other => s.push_str(&format!("{other:?}")),
        }
    }
    Edn::Str(s)
}

fn version_edn(v: u64) -> Edn {
    if v == INITIAL_VERSION {
        Edn::Nil
    } else {
        Edn::Int(v as i64)
    }
}

/// The prefix `k` if the range covers exactly the list `(k)` of `la`.
fn list_prefix<'k>(index: u32, lo: &'k Bound<Key>, hi: &Bound<Key>) -> Option<&'k Value> {
    if index != 0 {
        return None;
    }
    let (Bound::Included(l), Bound::Included(h)) = (lo, hi) else {
        return None;
    };
    match (l.values(), h.values()) {
        ([k], [k2, Value::Max]) if k == k2 => Some(k),
        _ => None,
    }
}

/// The micro-operations of one transaction, as completed (`observed`) or
/// as invoked (reads unknown).
fn mops(rec: &TxnRecord, model: ElleModel, observed: bool) -> Vec<Mop> {
    let mut out = Vec::new();
    let read = |v: Edn| if observed { v } else { Edn::Nil };
    for op in &rec.ops {
        match (model, op) {
            (
                ElleModel::RwRegister,
                Op::Read {
                    table,
                    key,
                    version,
                    ..
                },
            ) => out.push(Mop {
                f: "r".into(),
                key: register_name(table, key),
                value: read(version_edn(*version)),
            }),
            (
                ElleModel::RwRegister,
                Op::Write {
                    table,
                    key,
                    version,
                    ..
                },
            ) => out.push(Mop {
                f: "w".into(),
                key: register_name(table, key),
                value: Edn::Int(*version as i64),
            }),
            (ElleModel::RwRegister, Op::RangeRead { table, seen, .. }) => {
                for s in seen {
                    out.push(Mop {
                        f: "r".into(),
                        key: register_name(table, &s.key),
                        value: read(version_edn(s.version)),
                    });
                }
            }
            (
                ElleModel::ListAppend,
                Op::Write {
                    table,
                    key,
                    kind: WriteKind::Insert,
                    ..
                },
            ) if table == LIST_APPEND_TABLE && key.len() == 2 => out.push(Mop {
                f: "append".into(),
                key: value_edn(&key.values()[0]),
                value: value_edn(&key.values()[1]),
            }),
            (
                ElleModel::ListAppend,
                Op::RangeRead {
                    table,
                    index,
                    lo,
                    hi,
                    seen,
                    ..
                },
            ) if table == LIST_APPEND_TABLE => {
                let Some(k) = list_prefix(*index, lo, hi) else {
                    continue;
                };
                let value = if observed {
                    let mut rows: Vec<(u64, Edn)> = seen
                        .iter()
                        .filter(|s| !s.deleted && s.key.len() == 2)
                        .map(|s| (s.version, value_edn(&s.key.values()[1])))
                        .collect();
                    rows.sort_by_key(|(v, _)| *v);
                    Edn::Vector(rows.into_iter().map(|(_, e)| e).collect())
                } else {
                    Edn::Nil
                };
                out.push(Mop {
                    f: "r".into(),
                    key: value_edn(k),
                    value,
                });
            }
            _ => {}
        }
    }
    out
}

/// The Elle history of `txns` (transactions without any representable
/// operation are left out).
pub fn elle_ops(txns: &[TxnRecord], model: ElleModel) -> Vec<ElleOp> {
    // (time, 0 = invoke / 1 = completion, record index)
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(txns.len() * 2);
    let mut invoked: Vec<Vec<Mop>> = Vec::with_capacity(txns.len());
    for (i, rec) in txns.iter().enumerate() {
        let m = mops(rec, model, false);
        if !m.is_empty() {
            events.push((rec.start_us, 0, i));
            events.push((rec.end_us.max(rec.start_us), 1, i));
        }
        invoked.push(m);
    }
    events.sort_unstable();
    let mut free: Vec<u64> = Vec::new();
    let mut next_process = 0u64;
    let mut process_of: BTreeMap<usize, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(events.len());
    for (time, phase, i) in events {
        let rec = &txns[i];
        let index = out.len() as u64;
        if phase == 0 {
            let p = free.pop().unwrap_or_else(|| {
                next_process += 1;
                next_process - 1
            });
            process_of.insert(i, p);
            out.push(ElleOp {
                typ: OpType::Invoke,
                process: p,
                time: time * 1000,
                index,
                value: invoked[i].clone(),
            });
        } else {
            let p = process_of.remove(&i).unwrap_or_default();
            let (typ, value) = match rec.outcome {
                Outcome::Committed => (OpType::Ok, mops(rec, model, true)),
                Outcome::Aborted => (OpType::Fail, invoked[i].clone()),
                Outcome::Unknown => (OpType::Info, invoked[i].clone()),
            };
            if typ != OpType::Info {
                // Smallest free process first keeps process ids small.
                free.push(p);
                free.sort_unstable_by(|a, b| b.cmp(a));
            }
            out.push(ElleOp {
                typ,
                process: p,
                time: time * 1000,
                index,
                value,
            });
        }
    }
    out
}

/// Writes the history as EDN, one op map per line.
pub fn write_edn<W: Write>(ops: &[ElleOp], out: &mut W) -> std::io::Result<()> {
    for op in ops {
        writeln!(out, "{}", op.to_edn())?;
    }
    Ok(())
}

/// Exports `txns` in `model` to `out`.
pub fn export<W: Write>(
    txns: &[TxnRecord],
    model: ElleModel,
    out: &mut W,
) -> Result<(), ElleError> {
    write_edn(&elle_ops(txns, model), out)?;
    Ok(())
}

/// Reads an EDN history of op maps (as written by [`export`]; a top-level
/// vector of maps is accepted too).
pub fn parse_history(text: &str) -> Result<Vec<ElleOp>, ElleError> {
    let mut forms = edn::parse_all(text)?;
    if let [Edn::Vector(items)] = forms.as_mut_slice() {
        forms = std::mem::take(items);
    }
    forms
        .iter()
        .enumerate()
        .map(|(i, f)| op_from_edn(f).map_err(|message| ElleError::Shape { index: i, message }))
        .collect()
}

fn op_from_edn(f: &Edn) -> Result<ElleOp, String> {
    let typ = match f.get("type") {
        Some(Edn::Keyword(k)) => match k.as_str() {
            "invoke" => OpType::Invoke,
            "ok" => OpType::Ok,
            "fail" => OpType::Fail,
            "info" => OpType::Info,
            other => return Err(format!("unknown :type :{other}")),
        },
        _ => return Err("missing :type".into()),
    };
    let int = |k: &str| match f.get(k) {
        Some(Edn::Int(i)) if *i >= 0 => Ok(*i as u64),
        _ => Err(format!("missing or negative :{k}")),
    };
    let Some(Edn::Vector(items)) = f.get("value") else {
        return Err("missing :value vector".into());
    };
    let mut value = Vec::new();
    for m in items {
        match m {
            Edn::Vector(parts) if parts.len() == 3 => {
                let Edn::Keyword(fname) = &parts[0] else {
                    return Err(format!("micro-op {m} does not start with a keyword"));
                };
                value.push(Mop {
                    f: fname.clone(),
                    key: parts[1].clone(),
                    value: parts[2].clone(),
                });
            }
            other => return Err(format!("micro-op {other} is not [f k v]")),
        }
    }
    Ok(ElleOp {
        typ,
        process: int("process")?,
        time: int("time")?,
        index: int("index")?,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{generate, GenConfig};

    #[test]
    fn generated_histories_round_trip_through_edn() -> Result<(), ElleError> {
        let h = generate(&GenConfig {
            txns: 300,
            seed: 7,
            ..GenConfig::default()
        });
        for model in [ElleModel::RwRegister, ElleModel::ListAppend] {
            let ops = elle_ops(&h.txns, model);
            assert!(!ops.is_empty());
            let mut out = Vec::new();
            write_edn(&ops, &mut out)?;
            let back = parse_history(&String::from_utf8_lossy(&out))?;
            assert_eq!(back, ops);
            // A process never has two transactions open.
            let mut open: BTreeMap<u64, bool> = BTreeMap::new();
            for op in &back {
                let busy = open.entry(op.process).or_default();
                assert_eq!(*busy, op.typ != OpType::Invoke, "{op:?}");
                *busy = op.typ == OpType::Invoke;
            }
        }
        Ok(())
    }
}
