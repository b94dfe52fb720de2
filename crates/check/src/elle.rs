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
//! * `list-append`: rows `(k, pos, e)` of table `la` are element `e` at
//!   position `pos` of list `k` (the list-append workload takes `pos` from
//!   the list's counter row, which every append writes first, so positions
//!   are the appends' commit order). An insert is `[:append k e]`; a range
//!   read of the whole prefix `(k)` is `[:r k [e...]]` with the rows it saw
//!   in key order, i.e. by position: the list as read. Other operations
//!   (the counter row among them) are not representable and left out.
//!
//! [`check_list_append`] checks the invariants of an exported list-append
//! history that need no version order: unique appends, reads of one list
//! prefixes of each other, nothing read that no committed append wrote,
//! and list order consistent with real time.

use std::collections::{BTreeMap, HashMap};
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
            ) if table == LIST_APPEND_TABLE && key.len() == 3 => out.push(Mop {
                f: "append".into(),
                key: value_edn(&key.values()[0]),
                value: value_edn(&key.values()[2]),
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
                    // Key order is position order: the list as read.
                    let mut rows: Vec<&Key> = seen
                        .iter()
                        .filter(|s| !s.deleted && s.key.len() == 3)
                        .map(|s| &s.key)
                        .collect();
                    rows.sort();
                    Edn::Vector(
                        rows.into_iter()
                            .map(|k| value_edn(&k.values()[2]))
                            .collect(),
                    )
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

/// What [`check_list_append`] found in a list-append EDN history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListAppendCheck {
    /// Appends in `:ok` and `:info` completions.
    pub appends: usize,
    /// Reads in `:ok` completions.
    pub reads: usize,
    /// Lists read or appended to.
    pub lists: usize,
    /// Pairs of elements whose order in the lists was checked against real
    /// time.
    pub ordered_pairs: usize,
    /// Every invariant that does not hold, one line each (the first 100).
    pub problems: Vec<String>,
    /// Problems found, including those not listed.
    pub problem_count: usize,
}

impl ListAppendCheck {
    pub fn ok(&self) -> bool {
        self.problem_count == 0
    }

    fn problem(&mut self, p: String) {
        self.problem_count += 1;
        if self.problems.len() < 100 {
            self.problems.push(p);
        }
    }

    /// A one-line summary and the problems listed.
    pub fn render(&self) -> String {
        let mut s = format!(
            "list-append invariants: {} appends, {} reads of {} lists, {} ordered pairs against real time: {}",
            self.appends,
            self.reads,
            self.lists,
            self.ordered_pairs,
            if self.ok() {
                "OK".to_string()
            } else {
                format!("{} VIOLATED", self.problem_count)
            }
        );
        for p in &self.problems {
            s.push_str("\n  ");
            s.push_str(p);
        }
        s
    }
}

/// Checks a list-append history (Elle's model, as [`export`] writes it or
/// [`parse_history`] reads it) for the invariants that hold in every
/// strictly serializable run and need no inferred version order:
///
/// 1. **unique appends**: no element is appended twice, in any completion
///    (`:ok`, `:info` or `:fail`: every attempt appends fresh elements);
/// 2. **no garbage**: every element an `:ok` read returns was appended to
///    that list by an `:ok` or `:info` transaction, and appears once in
///    the read;
/// 3. **prefixes**: of two `:ok` reads of one list, the shorter is a prefix
///    of the longer (lists only grow at the end, in one order);
/// 4. **real time**: if `a` comes before `b` in a list, `b`'s transaction
///    did not complete before `a`'s was invoked (the list order is the
///    appends' commit order, which real time bounds);
/// 5. **no lost append**: an `:ok` read returns every `:ok` append to its
///    list that completed before the read's transaction was invoked.
pub fn check_list_append(ops: &[ElleOp]) -> ListAppendCheck {
    let mut out = ListAppendCheck::default();
    // Invocation time of each completion (a process has one open op).
    let mut open: HashMap<u64, u64> = HashMap::new();
    // (invoked, completed, op) of every completion.
    let mut done: Vec<(u64, u64, &ElleOp)> = Vec::new();
    for op in ops {
        if op.typ == OpType::Invoke {
            open.insert(op.process, op.time);
        } else {
            let start = open.remove(&op.process).unwrap_or(op.time);
            done.push((start, op.time, op));
        }
    }
    // Element -> (list, completion) of its append; lists by name.
    struct Append {
        list: String,
        typ: OpType,
        start: u64,
        end: u64,
    }
    let mut appended: HashMap<String, Append> = HashMap::new();
    let mut lists: BTreeMap<String, Vec<(u64, Vec<String>)>> = BTreeMap::new();
    for &(start, end, op) in &done {
        for m in &op.value {
            let list = m.key.to_string();
            match m.f.as_str() {
                "append" => {
                    let e = m.value.to_string();
                    if op.typ != OpType::Fail {
                        out.appends += 1;
                    }
                    lists.entry(list.clone()).or_default();
                    if let Some(first) = appended.get(&e) {
                        out.problem(format!(
                            "duplicate append: element {e} appended to list {} and again to list {list} (op {})",
                            first.list, op.index
                        ));
                        continue;
                    }
                    appended.insert(
                        e,
                        Append {
                            list,
                            typ: op.typ,
                            start,
                            end,
                        },
                    );
                }
                "r" if op.typ == OpType::Ok => {
                    let Edn::Vector(items) = &m.value else {
                        out.problem(format!(
                            "read of list {list} without a list (op {})",
                            op.index
                        ));
                        continue;
                    };
                    out.reads += 1;
                    let elems: Vec<String> = items.iter().map(Edn::to_string).collect();
                    lists.entry(list).or_default().push((start, elems));
                }
                _ => {}
            }
        }
    }
    out.lists = lists.len();
    for (list, reads) in &mut lists {
        for (_, elems) in reads.iter() {
            let mut once = std::collections::HashSet::new();
            for e in elems {
                if !once.insert(e) {
                    out.problem(format!("list {list}: a read returned element {e} twice"));
                }
                match appended.get(e) {
                    Some(a) if a.list == *list && a.typ != OpType::Fail => {}
                    Some(a) if a.list != *list => out.problem(format!(
                        "list {list}: a read returned element {e}, appended to list {}",
                        a.list
                    )),
                    Some(_) => out.problem(format!(
                        "list {list}: a read returned element {e}, appended by an aborted transaction"
                    )),
                    None => out.problem(format!(
                        "list {list}: a read returned element {e}, which nobody appended"
                    )),
                }
            }
        }
        // Prefixes: each read is a prefix of the next longer one.
        reads.sort_by_key(|(_, e)| e.len());
        for w in reads.windows(2) {
            let (a, b) = (&w[0].1, &w[1].1);
            if b[..a.len()] != a[..] {
                out.problem(format!(
                    "list {list}: reads disagree: [{}] is not a prefix of [{}]",
                    a.join(" "),
                    b.join(" ")
                ));
            }
        }
        let Some((_, longest)) = reads.last() else {
            continue;
        };
        // Real time against the longest read's order.
        for (i, a) in longest.iter().enumerate() {
            let Some(ta) = appended.get(a) else { continue };
            for b in &longest[i + 1..] {
                let Some(tb) = appended.get(b) else { continue };
                out.ordered_pairs += 1;
                if tb.typ == OpType::Ok && tb.end < ta.start {
                    out.problem(format!(
                        "list {list}: {a} comes before {b}, but {b}'s transaction completed \
                         ({} ns) before {a}'s was invoked ({} ns)",
                        tb.end, ta.start
                    ));
                }
            }
        }
    }
    // No lost append: an :ok append that completed before a read began.
    let mut by_list: HashMap<&str, Vec<(&String, u64)>> = HashMap::new();
    for (e, a) in &appended {
        if a.typ == OpType::Ok {
            by_list.entry(a.list.as_str()).or_default().push((e, a.end));
        }
    }
    for (list, reads) in &lists {
        let Some(appends) = by_list.get(list.as_str()) else {
            continue;
        };
        for (start, elems) in reads {
            let have: std::collections::HashSet<&String> = elems.iter().collect();
            for (e, end) in appends {
                if end < start && !have.contains(e) {
                    out.problem(format!(
                        "list {list}: a read invoked at {start} ns misses element {e}, \
                         whose append completed at {end} ns"
                    ));
                }
            }
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
