//! Which operations of a group conflict (the C-edges of the sources), at
//! what granularity, and what the refinements remove.
//!
//! Two operations conflict when two concurrent instances could touch the
//! same data and one of them writes it. The group's procedures may each run
//! in many instances at once, so an operation is compared with every
//! operation of the group, itself included (two instances of it).
//!
//! ```text
//!  pair (a, b) on one table, one writes
//!    |- column-level on and no common column written .... removed: disjoint columns
//!    |- commutative on and both are blind increments .... removed: commutative
//!    |- uniqueness on and both keyed by one counter ..... removed: unique keys
//!    `- otherwise ........................................ C-edge
//! ```
//!
//! The objects the ranking works on are the units conflicts happen on: whole
//! tables (table-level) or classes of columns (column-level; the written
//! columns one operation touches together fall in one class, since one
//! operation lands in one piece). An object no C-edge touches needs no rank:
//! like the read-only tables of seed 000 section 4.4.1 (whose footnote gives
//! exactly this reason), operations on it are placed by the second pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use brine_core::TableId;

use crate::spec::{Op, ProcSpec};

/// The refinements of seed 000 section 4.5.1 / seed 002 section 6.1, each
/// switchable so its effect can be measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refinements {
    /// Conflicts and ranks over columns instead of tables.
    pub column_level: bool,
    /// No C-edge between two blind increments (they commute).
    pub commutative: bool,
    /// No C-edge between operations whose keys come from one counter each
    /// instance increments itself (distinct instances, distinct rows).
    pub runtime_uniqueness: bool,
    /// Where order is free, larger pieces (more statements) first.
    pub larger_first: bool,
}

impl Refinements {
    /// Every refinement on (the default).
    pub const ALL: Refinements = Refinements {
        column_level: true,
        commutative: true,
        runtime_uniqueness: true,
        larger_first: true,
    };
    /// The algorithm of seed 000 Fig. 4.4 as printed.
    pub const NONE: Refinements = Refinements {
        column_level: false,
        commutative: false,
        runtime_uniqueness: false,
        larger_first: false,
    };

    /// Names accepted by [`Refinements::without`].
    pub const NAMES: [&'static str; 4] = ["column", "commutative", "uniqueness", "larger-first"];

    /// This set with the named refinement switched off.
    pub fn without(mut self, name: &str) -> Option<Refinements> {
        match name {
            "column" => self.column_level = false,
            "commutative" => self.commutative = false,
            "uniqueness" => self.runtime_uniqueness = false,
            "larger-first" => self.larger_first = false,
            _ => return None,
        }
        Some(self)
    }
}

impl fmt::Display for Refinements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        write!(
            f,
            "column-level {}, commutative {}, uniqueness {}, larger-first {}",
            on(self.column_level),
            on(self.commutative),
            on(self.runtime_uniqueness),
            on(self.larger_first)
        )
    }
}

/// An operation of a group: procedure index (in the group) and operation
/// index (in the procedure's execution order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpRef {
    pub proc: usize,
    pub op: usize,
}

/// Why a pair that table-level analysis would call a conflict is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Removal {
    DisjointColumns,
    Commutative,
    UniqueKeys,
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Removal::DisjointColumns => "different columns",
            Removal::Commutative => "commutative increments",
            Removal::UniqueKeys => "keys from a counter (runtime uniqueness)",
        })
    }
}

/// The verdict on one pair of operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Different tables, or neither writes.
    Independent,
    Removed(Removal),
    /// A C-edge on these columns (all columns touched, at table level).
    Conflict {
        columns: BTreeSet<usize>,
        write_write: bool,
    },
}

/// Judges two operations (of two distinct transaction instances).
pub fn judge(a: &Op, b: &Op, r: Refinements) -> Verdict {
    let (x, y) = (&a.access, &b.access);
    if x.table != y.table || (!x.writes() && !y.writes()) {
        return Verdict::Independent;
    }
    let ww: BTreeSet<usize> = x.written.intersection(&y.written).copied().collect();
    let mut overlap: BTreeSet<usize> = x.written.intersection(&y.read).copied().collect();
    overlap.extend(y.written.intersection(&x.read).copied());
    overlap.extend(ww.iter().copied());
    if r.column_level && overlap.is_empty() {
        return Verdict::Removed(Removal::DisjointColumns);
    }
    if r.commutative && x.blind_increment && y.blind_increment {
        return Verdict::Removed(Removal::Commutative);
    }
    if r.runtime_uniqueness && a.unique_key.is_some() && a.unique_key == b.unique_key {
        return Verdict::Removed(Removal::UniqueKeys);
    }
    if r.column_level {
        Verdict::Conflict {
            write_write: !ww.is_empty(),
            columns: overlap,
        }
    } else {
        let mut all: BTreeSet<usize> = x.read.union(&x.written).copied().collect();
        all.extend(y.read.iter().chain(&y.written).copied());
        Verdict::Conflict {
            columns: all,
            write_write: x.writes() && y.writes(),
        }
    }
}

/// A C-edge between two operations of the group (`a <= b`; `a == b` is two
/// instances of one operation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub a: OpRef,
    pub b: OpRef,
    pub table: TableId,
    pub columns: BTreeSet<usize>,
    pub write_write: bool,
}

/// A pair table-level analysis would have called a conflict, and why it
/// is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedEdge {
    pub a: OpRef,
    pub b: OpRef,
    pub why: Removal,
}

/// Every C-edge of the group and every removed one.
pub fn group_conflicts(specs: &[&ProcSpec], r: Refinements) -> (Vec<Conflict>, Vec<RemovedEdge>) {
    let refs: Vec<OpRef> = specs
        .iter()
        .enumerate()
        .flat_map(|(p, s)| (0..s.ops.len()).map(move |op| OpRef { proc: p, op }))
        .collect();
    let op = |o: OpRef| &specs[o.proc].ops[o.op];
    let mut conflicts = Vec::new();
    let mut removed = Vec::new();
    for (i, &a) in refs.iter().enumerate() {
        for &b in &refs[i..] {
            match judge(op(a), op(b), r) {
                Verdict::Independent => {}
                Verdict::Removed(why) => removed.push(RemovedEdge { a, b, why }),
                Verdict::Conflict {
                    columns,
                    write_write,
                } => conflicts.push(Conflict {
                    a,
                    b,
                    table: op(a).access.table,
                    columns,
                    write_write,
                }),
            }
        }
    }
    (conflicts, removed)
}

/// A unit of ranking: a whole table, or a class of its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub table: TableId,
    pub table_name: Arc<str>,
    pub column_names: Arc<[String]>,
    /// `None`: the whole table (table-level analysis).
    pub columns: Option<BTreeSet<usize>>,
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table_name)?;
        if let Some(cols) = &self.columns {
            let names: Vec<&str> = cols
                .iter()
                .map(|&c| self.column_names.get(c).map(String::as_str).unwrap_or("?"))
                .collect();
            write!(f, "{{{}}}", names.join(","))?;
        }
        Ok(())
    }
}

/// The objects that carry C-edges and the object of every operation that
/// touches one (the ranked operations; the others are free).
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub list: Vec<Object>,
    pub of_op: BTreeMap<OpRef, usize>,
}

/// Finds the objects of a group from its C-edges. Object ids follow the
/// first operation (in group order) that touches each.
pub fn objects(specs: &[&ProcSpec], conflicts: &[Conflict], r: Refinements) -> Objects {
    // Hot columns per table: those some C-edge is on.
    let mut hot: BTreeMap<TableId, BTreeSet<usize>> = BTreeMap::new();
    for c in conflicts {
        hot.entry(c.table)
            .or_default()
            .extend(c.columns.iter().copied());
    }
    // Union-find over (table, column), or over tables at table level
    // (column usize::MAX stands for the whole table).
    let whole = usize::MAX;
    let mut parent: BTreeMap<(TableId, usize), (TableId, usize)> = BTreeMap::new();
    fn find(
        parent: &mut BTreeMap<(TableId, usize), (TableId, usize)>,
        x: (TableId, usize),
    ) -> (TableId, usize) {
        let mut root = x;
        while let Some(&p) = parent.get(&root) {
            if p == root {
                break;
            }
            root = p;
        }
        let mut cur = x;
        while cur != root {
            let next = parent.get(&cur).copied().unwrap_or(root);
            parent.insert(cur, root);
            cur = next;
        }
        root
    }
    let touched = |o: &Op| -> Vec<(TableId, usize)> {
        let t = o.access.table;
        let Some(h) = hot.get(&t) else {
            return Vec::new();
        };
        if !r.column_level {
            return vec![(t, whole)];
        }
        o.access
            .read
            .union(&o.access.written)
            .filter(|c| h.contains(c))
            .map(|&c| (t, c))
            .collect()
    };
    for s in specs {
        for o in &s.ops {
            let cells = touched(o);
            for &c in &cells {
                parent.entry(c).or_insert(c);
            }
            if let Some((&first, rest)) = cells.split_first() {
                for &c in rest {
                    let (ra, rb) = (find(&mut parent, first), find(&mut parent, c));
                    if ra != rb {
                        parent.insert(rb, ra);
                    }
                }
            }
        }
    }
    let mut out = Objects::default();
    let mut id_of_root: BTreeMap<(TableId, usize), usize> = BTreeMap::new();
    for (p, s) in specs.iter().enumerate() {
        for (i, o) in s.ops.iter().enumerate() {
            let cells = touched(o);
            let Some(&first) = cells.first() else {
                continue;
            };
            let root = find(&mut parent, first);
            let id = *id_of_root.entry(root).or_insert_with(|| {
                out.list.push(Object {
                    table: o.access.table,
                    table_name: o.access.table_name.clone(),
                    column_names: o.access.column_names.clone(),
                    columns: r.column_level.then(BTreeSet::new),
                });
                out.list.len() - 1
            });
            out.of_op.insert(OpRef { proc: p, op: i }, id);
        }
    }
    // Fill each column class with its members.
    if r.column_level {
        let cells: Vec<(TableId, usize)> = parent.keys().copied().collect();
        for cell in cells {
            let root = find(&mut parent, cell);
            if let Some(&id) = id_of_root.get(&root) {
                if let Some(cols) = out.list[id].columns.as_mut() {
                    cols.insert(cell.1);
                }
            }
        }
    }
    out
}
