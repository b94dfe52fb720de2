//! Column-level checking: every column of every row is an item of its own.
//!
//! ```text
//!  row history ──► split ──► column history ──► checker (unchanged rules)
//!   w(r, p>v){w=[b]}          w(t.b[r], p_b>v_b)
//!   r(r, v){r=[a]}            r(t[r], v_row)  r(t.a[r], v_a)
//! ```
//!
//! Callas' Runtime Pipelining declares dependencies per column, as its
//! static analysis does: two transactions of a group that write different
//! columns of one row (or increment the same one) do not wait for each
//! other. Row versions then interleave in ways that make row-level cycles
//! out of no conflict at all. Splitting each row into its columns gives the
//! checker the items the protocol actually orders. Nothing is weakened for
//! what a transaction observes: every value it read is the same item, with
//! the same writer, at either level.
//!
//! # The split
//!
//! * Each row has an existence item under the table's own name. Inserts,
//!   deletes and updates that move a row in a secondary index write it
//!   (with their index changes, so range reads keep their predicate
//!   checks); every read and every update or delete reads it.
//! * Each column `c` is the item `table.c` (named from the header's
//!   `config.columns`). A write writes the columns it changed; a read reads
//!   the columns it observed, at the version of the nearest write at or
//!   below the observed row version that changed that column.
//! * Increments carry `add`, so the checker lets them commute.
//! * An operation without column detail touches every column, plus a
//!   catch-all item (`table.*`), so an old or foreign history checks as it
//!   would at row level.
//!
//! # What a split cannot tell
//!
//! A write undone while a later write of another transaction sat on its
//! row (pipelined transactions only) leaves the row at the later version
//! with the undone columns restored. Below the version a transaction
//! observed or wrote over, such an undone change is skipped: the engine
//! makes every access of an uncommitted change depend on it, so a committed
//! reader of it would have been rolled back with it. The checker takes this
//! from the engine rather than verifying it. A read of an aborted write's
//! own version is still a G1a.

use std::collections::HashMap;

use crate::history::{Cols, Op, Outcome, TxnRecord, WriteKind};
use crate::report::{Level, Report};

/// Column names by table, from a history header's `config.columns`.
pub type ColumnNames = HashMap<String, Vec<String>>;

/// The existence item of a row.
const EXISTS: u16 = u16::MAX;
/// The catch-all column of operations without column detail.
const ANY: u16 = u16::MAX - 1;

/// Checks `txns` with every column as an item (see the module docs).
pub fn check_columns(txns: &[TxnRecord], level: Level, names: &ColumnNames) -> Report {
    crate::check(&split(txns, names), level)
}

/// The column names a history header records (`config.columns`: table ->
/// names in definition order); empty when it has none.
pub fn column_names(header: &crate::Header) -> ColumnNames {
    let Some(serde_json::Value::Object(tables)) = header.config.get("columns") else {
        return ColumnNames::new();
    };
    tables
        .iter()
        .filter_map(|(t, cols)| {
            let names = cols
                .as_array()?
                .iter()
                .map(|c| c.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()?;
            Some((t.clone(), names))
        })
        .collect()
}

/// Whether a header asks for column-level checking (`config.granularity`
/// is `"column"`: a run with a Runtime Pipelining group).
pub fn wants_columns(header: &crate::Header) -> bool {
    header.config.get("granularity").and_then(|g| g.as_str()) == Some("column")
}

/// What the split needs to know of one row version.
struct Write {
    prev: u64,
    aborted: bool,
    /// Changed columns; `None`: every column.
    changed: Option<Vec<u16>>,
    moves_row: bool,
}

impl Write {
    fn changes(&self, c: u16) -> bool {
        match (c, &self.changed) {
            (EXISTS, _) => self.moves_row,
            (_, None) => true,
            (c, Some(cols)) => cols.contains(&c),
        }
    }
}

struct Splitter<'n> {
    names: &'n ColumnNames,
    writes: HashMap<u64, Write>,
    /// Per table, the columns any operation mentions (for operations
    /// without detail).
    universe: HashMap<String, Vec<u16>>,
    /// Fresh version ids of column items: (row version, column) -> id.
    ids: HashMap<(u64, u16), u64>,
    next_id: u64,
    /// The column version below a row version, skipping undone changes.
    below: HashMap<(u64, u16), u64>,
}

/// The history with every row operation split into per-column operations.
pub fn split(txns: &[TxnRecord], names: &ColumnNames) -> Vec<TxnRecord> {
    let mut s = Splitter {
        names,
        writes: HashMap::new(),
        universe: HashMap::new(),
        ids: HashMap::new(),
        next_id: 0,
        below: HashMap::new(),
    };
    let mut max_version = 0;
    for rec in txns {
        for op in &rec.ops {
            let (table, cols) = match op {
                Op::Read {
                    table,
                    version,
                    cols,
                    ..
                } => {
                    max_version = max_version.max(*version);
                    (table, cols)
                }
                Op::RangeRead {
                    table, seen, cols, ..
                } => {
                    for r in seen {
                        max_version = max_version.max(r.version);
                    }
                    (table, cols)
                }
                Op::Write {
                    table,
                    version,
                    prev,
                    kind,
                    ix,
                    cols,
                    ..
                } => {
                    max_version = max_version.max(*version).max(*prev);
                    s.writes.entry(*version).or_insert(Write {
                        prev: *prev,
                        aborted: rec.outcome == Outcome::Aborted,
                        changed: cols.as_ref().map(|c| c.w.clone()),
                        moves_row: *kind != WriteKind::Update || ix.iter().any(|i| i.old != i.new),
                    });
                    (table, cols)
                }
            };
            let known = s.universe.entry(table.clone()).or_default();
            for c in cols.iter().flat_map(|c| c.r.iter().chain(&c.w)) {
                if !known.contains(c) {
                    known.push(*c);
                }
            }
        }
    }
    for cols in s.universe.values_mut() {
        cols.push(ANY);
        cols.sort_unstable();
    }
    s.next_id = max_version + 1;
    txns.iter()
        .map(|rec| TxnRecord {
            ops: rec.ops.iter().flat_map(|op| s.split_op(op)).collect(),
            ..rec.clone()
        })
        .collect()
}

impl Splitter<'_> {
    fn item(&self, table: &str, c: u16) -> String {
        match c {
            EXISTS => table.to_owned(),
            ANY => format!("{table}.*"),
            c => match self.names.get(table).and_then(|n| n.get(c as usize)) {
                Some(name) => format!("{table}.{name}"),
                None => format!("{table}.#{c}"),
            },
        }
    }

    /// The id of column `c`'s item version written by row version `v`.
    fn id(&mut self, v: u64, c: u16) -> u64 {
        if c == EXISTS {
            return v;
        }
        let next = &mut self.next_id;
        *self.ids.entry((v, c)).or_insert_with(|| {
            *next += 1;
            *next
        })
    }

    /// Column `c` as a reader of row version `v` observed it: `v`'s own
    /// change if it made one (even an aborted one), else what lies below.
    fn observed(&mut self, v: u64, c: u16) -> u64 {
        match self.writes.get(&v) {
            Some(w) if w.changes(c) => self.id(v, c),
            Some(w) => {
                let prev = w.prev;
                self.below(prev, c)
            }
            // Version 0, or one no transaction wrote (the checker reports
            // the garbage read on the item).
            None if v == 0 => 0,
            None => self.id(v, c),
        }
    }

    /// Column `c`'s version at row version `v` and below, skipping changes
    /// that were undone (see the module docs).
    fn below(&mut self, v: u64, c: u16) -> u64 {
        let mut path = Vec::new();
        let mut cur = v;
        let found = loop {
            if let Some(&known) = self.below.get(&(cur, c)) {
                break known;
            }
            let Some(w) = self.writes.get(&cur) else {
                break if cur == 0 { 0 } else { self.id(cur, c) };
            };
            if w.changes(c) && !w.aborted {
                break self.id(cur, c);
            }
            path.push(cur);
            cur = w.prev;
            if path.len() > self.writes.len() {
                // A loop of prev links: the row-level rules report it.
                break self.id(cur, c);
            }
        };
        for p in path {
            self.below.insert((p, c), found);
        }
        found
    }

    fn columns_of(&self, table: &str, listed: Option<&[u16]>) -> Vec<u16> {
        match listed {
            Some(cols) => cols.to_vec(),
            None => self
                .universe
                .get(table)
                .cloned()
                .unwrap_or_else(|| vec![ANY]),
        }
    }

    fn split_op(&mut self, op: &Op) -> Vec<Op> {
        let mut out = Vec::new();
        match op {
            Op::Read {
                table,
                key,
                version,
                sub,
                cols,
            } => {
                let read = self.columns_of(table, cols.as_ref().map(|c| &c.r[..]));
                for c in std::iter::once(EXISTS).chain(read) {
                    out.push(Op::Read {
                        table: self.item(table, c),
                        key: key.clone(),
                        version: self.observed(*version, c),
                        sub: *sub,
                        cols: None,
                    });
                }
            }
            Op::RangeRead {
                table,
                index,
                lo,
                hi,
                seen,
                sub,
                cols,
            } => {
                let mut rows = seen.clone();
                for r in &mut rows {
                    r.version = self.observed(r.version, EXISTS);
                }
                out.push(Op::RangeRead {
                    table: table.clone(),
                    index: *index,
                    lo: lo.clone(),
                    hi: hi.clone(),
                    seen: rows,
                    sub: *sub,
                    cols: None,
                });
                let read = self.columns_of(table, cols.as_ref().map(|c| &c.r[..]));
                for r in seen.iter().filter(|r| !r.deleted) {
                    for &c in &read {
                        out.push(Op::Read {
                            table: self.item(table, c),
                            key: r.key.clone(),
                            version: self.observed(r.version, c),
                            sub: *sub,
                            cols: None,
                        });
                    }
                }
            }
            Op::Write {
                table,
                key,
                version,
                prev,
                kind,
                ix,
                sub,
                cols,
            } => {
                let add = cols.as_ref().is_some_and(|c| c.add);
                let (read, changed) = match cols {
                    Some(c) => (
                        // An increment's own columns are not observed.
                        c.r.iter()
                            .copied()
                            .filter(|r| !(add && c.w.contains(r)))
                            .collect(),
                        c.w.clone(),
                    ),
                    None => (Vec::new(), self.columns_of(table, None)),
                };
                let read_exists = (*kind != WriteKind::Insert).then_some(EXISTS);
                for c in read_exists.into_iter().chain(read) {
                    out.push(Op::Read {
                        table: self.item(table, c),
                        key: key.clone(),
                        version: self.observed(*prev, c),
                        sub: *sub,
                        cols: None,
                    });
                }
                if self.writes.get(version).is_some_and(|w| w.moves_row) {
                    out.push(Op::Write {
                        table: table.clone(),
                        key: key.clone(),
                        version: *version,
                        prev: self.below(*prev, EXISTS),
                        kind: *kind,
                        ix: ix.clone(),
                        sub: *sub,
                        cols: None,
                    });
                }
                for c in changed {
                    out.push(Op::Write {
                        table: self.item(table, c),
                        key: key.clone(),
                        version: self.id(*version, c),
                        prev: self.below(*prev, c),
                        kind: *kind,
                        ix: Vec::new(),
                        sub: *sub,
                        cols: add.then(|| {
                            Box::new(Cols {
                                add: true,
                                ..Cols::default()
                            })
                        }),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::AnomalyClass;
    use crate::script;

    fn classes(r: &Report) -> Vec<AnomalyClass> {
        r.anomalies.iter().map(|a| a.class).collect()
    }

    /// Checks `text` per row and per column at serializable.
    fn both(text: &str) -> (Report, Report) {
        let h = script::parse(text).expect("script");
        let row = crate::check(&h.txns, Level::Serializable);
        let col = check_columns(&h.txns, Level::Serializable, &ColumnNames::new());
        (row, col)
    }

    #[test]
    fn writes_of_different_columns_are_no_conflict() {
        // T2 changes column 1 of x over T1's uncommitted column 0, and T1
        // column 1 of y over T2's column 0: a ww cycle per row only.
        let (row, col) = both(
            "t1: w(x,0>1)[w=0] w(y,2>4)[w=1]\n\
             t2: w(x,1>3)[w=1] w(y,0>2)[w=0]",
        );
        assert_eq!(classes(&row), vec![AnomalyClass::G0]);
        assert!(col.valid, "{}", col.render(3));
    }

    #[test]
    fn a_conflict_on_one_column_is_still_found() {
        // T1 reads column 0 of x before T2's change and column 0 of y
        // after it: G-single, whichever level checks it.
        let cycle = "t1: r(x,0)[r=0] r(y,2)[r=0]\n\
                     t2: w(x,0>1)[w=0] w(y,0>2)[w=0]";
        let (row, col) = both(cycle);
        assert_eq!(classes(&row), vec![AnomalyClass::GSingle]);
        assert_eq!(classes(&col), vec![AnomalyClass::GSingle]);
        // Reading column 1 of x instead: T2 changed nothing T1 saw there.
        let (row, col) = both(&cycle.replace("r(x,0)[r=0]", "r(x,0)[r=1]"));
        assert_eq!(classes(&row), vec![AnomalyClass::GSingle]);
        assert!(col.valid, "{}", col.render(3));
        // The witness names the column.
        let (_, col) = both(cycle);
        let names: ColumnNames = [("t".to_string(), vec!["a".to_string()])].into();
        let h = script::parse(cycle).expect("script");
        let named = check_columns(&h.txns, Level::Serializable, &names);
        assert_eq!(classes(&named), classes(&col));
        assert!(
            named.render(1).contains("of t.a(\"x\")"),
            "{}",
            named.render(1)
        );
    }

    #[test]
    fn increments_commute() {
        // Two transactions increment x and y in opposite orders.
        let text = "t1: w(x,0>1)[w=0;add] w(y,3>4)[w=0;add]\n\
                    t2: w(x,1>2)[w=0;add] w(y,0>3)[w=0;add]";
        let (row, col) = both(text);
        assert!(row.valid, "{}", row.render(3));
        assert!(col.valid, "{}", col.render(3));
        // As plain writes they are a ww cycle.
        let (row, col) = both(&text.replace(";add", ""));
        assert_eq!(classes(&row), vec![AnomalyClass::G0]);
        assert_eq!(classes(&col), vec![AnomalyClass::G0]);
    }

    #[test]
    fn a_read_of_an_increment_sees_the_whole_run_and_misses_what_follows() {
        // T3 read x after both increments: it saw T1's too, and T1 read
        // what T3 wrote: a G1c through the run.
        let seen = "t1: w(x,0>1)[w=0;add] r(z,6)[r=0]\n\
                    t2: w(x,1>2)[w=0;add]\n\
                    t3: r(x,2)[r=0] w(z,0>6)[w=0]";
        let (_, col) = both(seen);
        assert_eq!(classes(&col), vec![AnomalyClass::G1c], "{}", col.render(3));
        // T3 read x between the increments: it missed T2's, and saw what
        // T2 wrote to z: G-single.
        let missed = "t1: w(x,0>1)[w=0;add]\n\
                      t2: w(x,1>2)[w=0;add] w(z,0>6)[w=0]\n\
                      t3: r(x,1)[r=0] r(z,6)[r=0]";
        let (_, col) = both(missed);
        assert_eq!(
            classes(&col),
            vec![AnomalyClass::GSingle],
            "{}",
            col.render(3)
        );
    }

    #[test]
    fn an_increment_over_an_aborted_one_is_no_dirty_write() {
        let text = "t1 aborted: w(x,0>1)[w=0;add]\n\
                    t2: w(x,1>2)[w=0;add]\n\
                    t3: r(x,2)[r=0]";
        let (row, col) = both(text);
        assert!(row.valid, "{}", row.render(3));
        assert!(col.valid, "{}", col.render(3));
        // An overwrite over an aborted write is one.
        let (row, _) = both(&text.replace(";add", ""));
        assert_eq!(classes(&row), vec![AnomalyClass::BadPrev]);
    }

    #[test]
    fn reads_of_aborted_columns_are_g1a_and_of_others_are_not() {
        let (_, col) = both("t1 aborted: w(x,0>1)[w=0]\nt2: r(x,1)[r=0]");
        assert_eq!(classes(&col), vec![AnomalyClass::G1a]);
        let (_, col) = both("t1 aborted: w(x,0>1)[w=0]\nt2: r(x,1)[r=1]");
        assert!(col.valid, "{}", col.render(3));
    }

    #[test]
    fn phantoms_are_checked_on_the_rows_existence() {
        // T1 scanned the table without T2's insert, then read T2's y.
        let (_, col) = both(
            "t1: rr(*..*|)[r=0] r(y,2)[r=0]\n\
             t2: ins(x,0>1) w(y,0>2)[w=0]",
        );
        assert_eq!(
            classes(&col),
            vec![AnomalyClass::GSingle],
            "{}",
            col.render(3)
        );
    }

    #[test]
    fn without_column_detail_the_split_checks_rows() {
        let text = "t1: r(x,0) r(y,2)\nt2: w(x,0>1) w(y,0>2)";
        let (row, col) = both(text);
        assert_eq!(classes(&row), classes(&col));
        assert!(!col.valid);
    }
}
