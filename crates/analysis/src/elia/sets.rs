//! Read and write sets (seed 004 section 3.1, "Extracting read/write
//! sets"): one entry `<attributes, condition>` per statement and
//! direction, over every declared statement regardless of the path the
//! body takes.
//!
//! ```text
//!  statement       read entry                     write entry
//!  SELECT          projection, filters, key cols, -
//!                  index order after the = prefix
//!  UPDATE          SET sources, filters, key cols SET columns
//!  DELETE          filters, key cols              every column
//!  INSERT          -                              every column
//!  condition: the statement's equalities whose value is a procedure
//!  argument or a literal (Selection::equalities), minus, for UPDATE, the
//!  columns it sets (the row it leaves has other values there)
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use brine_core::{TableId, Value};
use brine_sql::StatementKind;

use crate::spec::{Bound, ProcSpec};

/// What a condition's equality binds a column to: an argument of the
/// procedure or a literal. (Computed values are not kept: they say
/// nothing usable.)
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    Arg(usize),
    Literal(Value),
}

/// One entry of a read or write set.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The operation (index into `ProcSpec::ops`).
    pub op: usize,
    pub table: TableId,
    pub table_name: Arc<str>,
    pub column_names: Arc<[String]>,
    /// The accessed attributes.
    pub columns: BTreeSet<usize>,
    /// The condition: a conjunction of `column = operand`. Empty: true
    /// (any row of the table).
    pub condition: Vec<(usize, Term)>,
    /// The statement is an INSERT (of a fresh key, by assumption).
    pub insert: bool,
}

/// A procedure's read set and write set.
#[derive(Clone, Debug, Default)]
pub struct RwSets {
    pub reads: Vec<Entry>,
    pub writes: Vec<Entry>,
}

/// The read and write sets of one procedure.
pub fn rw_sets(spec: &ProcSpec) -> RwSets {
    let mut sets = RwSets::default();
    for (i, op) in spec.ops.iter().enumerate() {
        let a = &op.access;
        let update = a.kind == StatementKind::Update;
        let condition: Vec<(usize, Term)> = op
            .selection
            .equalities
            .iter()
            .filter(|(c, _)| !(update && a.written.contains(c)))
            .filter_map(|(c, b)| match b {
                Bound::Arg(k) => Some((*c, Term::Arg(*k))),
                Bound::Literal(v) => Some((*c, Term::Literal(v.clone()))),
                Bound::Computed(_) => None,
            })
            .collect();
        let entry = |columns: BTreeSet<usize>| Entry {
            op: i,
            table: a.table,
            table_name: a.table_name.clone(),
            column_names: a.column_names.clone(),
            columns,
            condition: condition.clone(),
            insert: a.kind == StatementKind::Insert,
        };
        if a.kind != StatementKind::Insert {
            let mut read = a.read.clone();
            read.extend(op.selection.order_columns.iter().copied());
            if !read.is_empty() {
                sets.reads.push(entry(read));
            }
        }
        if !a.written.is_empty() {
            sets.writes.push(entry(a.written.clone()));
        }
    }
    sets
}
