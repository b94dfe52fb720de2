//! The analysis input: a procedure as a sequence of operations, each with
//! what it reads and writes, and the dependencies between them.
//!
//! A procedure body is opaque Rust, so the analysis knows only what is
//! declared: the statements (their access descriptors), the order the body
//! runs them in, and optional [`ProcNotes`]. Without notes the rules are the
//! conservative ones of DESIGN section 5:
//!
//! * the body runs the declared statements in declaration order (each may
//!   repeat in place, as in a loop over one statement);
//! * every statement depends on every earlier read (a SELECT: its rows may
//!   steer control flow or feed parameters of anything after it);
//! * a statement depends on an earlier statement of the same table when
//!   their columns overlap and one of them writes (the data flows through
//!   the database, so their order must hold whatever the body does).
//!
//! Notes may give the real execution order, declare loops (statements that
//! repeat as a block, so each may run again after the others), remove a
//! dependency on a read the statement provably does not use, mark the
//! statements after which the body may roll back, and declare runtime
//! uniqueness (a key taken from a counter the transaction itself
//! increments). Dependencies are closed transitively: if c uses b's result
//! and b was steered by a, c depends on a.

use std::collections::BTreeSet;
use std::sync::Arc;

use brine_core::{Catalog, TableId};
use brine_sql::{AccessDescriptor, StatementKind};

use crate::error::{AnalysisError, Result};

/// The most operations one procedure may declare: the analysis keeps
/// per-procedure matrices of this size, and a bigger body is a mistake.
pub const MAX_OPS_PER_PROC: usize = 256;

/// A procedure as declared: its name and `(statement name, SQL)` pairs in
/// declaration order (what `ProcedureDef` holds, without the body).
#[derive(Clone, Debug)]
pub struct ProcSource {
    pub name: String,
    pub statements: Vec<(String, String)>,
    /// `(name, order)` of each reordering the procedure offers: another
    /// body that runs every statement once, in `order`
    /// (`brine_cluster::Reordering`, [`crate::order`]).
    pub reorderings: Vec<(String, Vec<String>)>,
}

/// What one operation touches, read off its access descriptor.
#[derive(Clone, Debug)]
pub struct Access {
    pub table: TableId,
    pub table_name: Arc<str>,
    /// Column names of the table, for reports.
    pub column_names: Arc<[String]>,
    pub kind: StatementKind,
    /// Columns observed, including key columns bound by equality (a
    /// point read observes whether its row exists).
    pub read: BTreeSet<usize>,
    /// Columns stored: every column for INSERT and DELETE.
    pub written: BTreeSet<usize>,
    /// `SET c = c +/- e` only: commutes with other blind increments.
    pub blind_increment: bool,
    /// True if the statement touches at most one row.
    pub point: bool,
}

impl Access {
    pub fn from_descriptor(
        d: &AccessDescriptor,
        table_name: Arc<str>,
        column_names: Arc<[String]>,
    ) -> Access {
        let mut read: BTreeSet<usize> = d.columns_read.iter().copied().collect();
        read.extend(d.key_params.iter().map(|(c, _)| *c));
        Access {
            table: d.table,
            table_name,
            column_names,
            kind: d.kind,
            read,
            written: d.columns_written.iter().copied().collect(),
            blind_increment: d.blind_increment,
            point: !d.range,
        }
    }

    /// A read in the dependency sense: the body sees rows it returns.
    pub fn is_read(&self) -> bool {
        self.kind == StatementKind::Select
    }

    pub fn writes(&self) -> bool {
        !self.written.is_empty()
    }

    pub fn column_name(&self, c: usize) -> &str {
        self.column_names.get(c).map(String::as_str).unwrap_or("?")
    }

    /// True if the two accesses touch a common column of one table and at
    /// least one of them writes it.
    pub fn overlaps(&self, other: &Access) -> bool {
        self.table == other.table
            && (self
                .written
                .iter()
                .any(|c| other.read.contains(c) || other.written.contains(c))
                || other.written.iter().any(|c| self.read.contains(c)))
    }
}

/// A monotonic counter: one column of one table that transactions
/// increment before using its value as a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Counter {
    pub table: TableId,
    pub column: usize,
}

/// One operation of a procedure: a declared statement at its place in the
/// body's execution order.
#[derive(Clone, Debug)]
pub struct Op {
    /// The statement's declared name.
    pub name: String,
    pub access: Access,
    /// The body may roll back (a user abort) after seeing this
    /// operation's result.
    pub rollback: bool,
    /// The rows this operation touches have keys derived from this
    /// counter, which the same transaction incremented earlier.
    pub unique_key: Option<Counter>,
}

/// Annotations a procedure's author (or the analysis crate, for the
/// built-in workloads) gives beyond the declared statements.
#[derive(Clone, Debug, Default)]
pub struct ProcNotes {
    /// The order the body executes the statements in, each named once.
    /// Default: declaration order.
    pub order: Option<Vec<String>>,
    /// Statements that repeat as a block (a loop body): each may run again
    /// after every other one, so they depend on each other both ways.
    pub loops: Vec<Vec<String>>,
    /// `(statement, earlier read)`: the statement neither uses the read's
    /// rows nor runs or not because of them.
    pub independent: Vec<(String, String)>,
    /// Statements after which the body may roll back.
    pub rollbacks: Vec<String>,
    /// `(statement, counter statement)`: the statement's key comes from
    /// the counter the counter statement (a blind increment of one column
    /// of one row) incremented earlier in the same transaction.
    pub unique_keys: Vec<(String, String)>,
}

impl ProcNotes {
    pub fn new() -> ProcNotes {
        ProcNotes::default()
    }

    pub fn order(mut self, names: &[&str]) -> Self {
        self.order = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn looped(mut self, names: &[&str]) -> Self {
        self.loops
            .push(names.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn independent(mut self, statement: &str, read: &str) -> Self {
        self.independent.push((statement.into(), read.into()));
        self
    }

    pub fn rollback(mut self, statement: &str) -> Self {
        self.rollbacks.push(statement.into());
        self
    }

    pub fn unique_key(mut self, statement: &str, counter: &str) -> Self {
        self.unique_keys.push((statement.into(), counter.into()));
        self
    }

    /// These notes (which describe the procedure's own body) for a
    /// reordering that runs the statements in `order`: the same loops,
    /// rollbacks and counters, and the independences that still name an
    /// earlier read (a read that now runs later cannot steer the
    /// statement).
    pub fn for_order(&self, order: &[String]) -> ProcNotes {
        let at = |name: &str| order.iter().position(|o| o == name);
        let mut notes = self.clone();
        notes.independent.retain(|(stmt, read)| at(read) < at(stmt));
        notes.order = Some(order.to_vec());
        notes
    }
}

/// `deps[j]` from an adjacency matrix (`dep[i][j]`: op `j` depends on op
/// `i`), closed transitively (Floyd-Warshall; the number of operations is
/// bounded).
fn closed(mut dep: Vec<Vec<bool>>) -> Vec<BTreeSet<usize>> {
    let n = dep.len();
    for k in 0..n {
        let through_k = dep[k].clone();
        for row in dep.iter_mut() {
            if row[k] {
                for (cell, &kj) in row.iter_mut().zip(&through_k) {
                    *cell |= kj;
                }
            }
        }
    }
    (0..n)
        .map(|j| (0..n).filter(|&i| i != j && dep[i][j]).collect())
        .collect()
}

/// A procedure ready for analysis: operations in execution order and the
/// (transitively closed) dependencies between them.
#[derive(Clone, Debug)]
pub struct ProcSpec {
    pub name: String,
    pub ops: Vec<Op>,
    /// `deps[j]`: the operations op `j` depends on. Closed transitively,
    /// never containing `j` itself. Points backwards in execution order
    /// except inside loops.
    deps: Vec<BTreeSet<usize>>,
    /// Loop bodies, as operation indices.
    loops: Vec<Vec<usize>>,
}

impl ProcSpec {
    /// Builds a spec from operations in execution order. `independent`
    /// holds `(op, earlier read)` pairs to drop from the default
    /// dependencies; `loops` holds loop bodies as op indices.
    pub fn new(
        name: impl Into<String>,
        ops: Vec<Op>,
        independent: &[(usize, usize)],
        loops: Vec<Vec<usize>>,
    ) -> Result<ProcSpec> {
        let name = name.into();
        let n = ops.len();
        if n > MAX_OPS_PER_PROC {
            return Err(AnalysisError::Notes {
                procedure: name,
                msg: format!("{n} operations, more than the bound {MAX_OPS_PER_PROC}"),
            });
        }
        for l in &loops {
            if let Some(&bad) = l.iter().find(|&&i| i >= n) {
                return Err(AnalysisError::Notes {
                    procedure: name,
                    msg: format!("loop names operation {bad} of {n}"),
                });
            }
        }
        // Adjacency matrix: dep[i][j] = op j depends on op i.
        let mut dep = vec![vec![false; n]; n];
        for j in 0..n {
            for i in 0..j {
                let (a, b) = (&ops[i].access, &ops[j].access);
                let steered = a.is_read() && !independent.contains(&(j, i));
                if steered || a.overlaps(b) {
                    dep[i][j] = true;
                }
            }
        }
        for l in &loops {
            for &a in l {
                for &b in l {
                    if a != b {
                        dep[a][b] = true;
                    }
                }
            }
        }
        Ok(ProcSpec {
            name,
            ops,
            deps: closed(dep),
            loops,
        })
    }

    /// The same procedure with every operation depending on every earlier
    /// one: a chopping of it runs its pieces in the body's order, so it
    /// needs no reordering of the code (which the sources' tool does and
    /// brine does not). Coarser than the chopping of the real
    /// dependencies, and valid whenever that one is (more dependencies
    /// only constrain more).
    pub fn in_body_order(&self) -> ProcSpec {
        let n = self.ops.len();
        let mut dep = vec![vec![false; n]; n];
        for (j, on) in self.deps.iter().enumerate() {
            for &i in on {
                dep[i][j] = true;
            }
            for row in dep.iter_mut().take(j) {
                row[j] = true;
            }
        }
        ProcSpec {
            name: self.name.clone(),
            ops: self.ops.clone(),
            deps: closed(dep),
            loops: self.loops.clone(),
        }
    }

    /// Prepares the declared statements against `catalog` and applies
    /// `notes`.
    pub fn from_source(catalog: &Catalog, src: &ProcSource, notes: &ProcNotes) -> Result<ProcSpec> {
        let notes_err = |msg: String| AnalysisError::Notes {
            procedure: src.name.clone(),
            msg,
        };
        let declared: Vec<&str> = src.statements.iter().map(|(n, _)| n.as_str()).collect();
        let order: Vec<&str> = match &notes.order {
            None => declared.clone(),
            Some(order) => {
                let listed: BTreeSet<&str> = order.iter().map(String::as_str).collect();
                if listed.len() != order.len() {
                    return Err(notes_err(
                        "the execution order names a statement twice".into(),
                    ));
                }
                if let Some(missing) = declared.iter().find(|d| !listed.contains(**d)) {
                    return Err(notes_err(format!(
                        "the execution order leaves out statement `{missing}`"
                    )));
                }
                if let Some(extra) = order.iter().find(|o| !declared.contains(&o.as_str())) {
                    return Err(notes_err(format!(
                        "the execution order names undeclared statement `{extra}`"
                    )));
                }
                order.iter().map(String::as_str).collect()
            }
        };
        let position = |name: &str| -> Result<usize> {
            order
                .iter()
                .position(|o| *o == name)
                .ok_or_else(|| notes_err(format!("notes name undeclared statement `{name}`")))
        };
        let mut ops = Vec::with_capacity(order.len());
        for name in &order {
            let sql = src
                .statements
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.as_str())
                .unwrap_or_default();
            let plan = brine_sql::prepare(catalog, sql).map_err(|e| AnalysisError::Statement {
                procedure: src.name.clone(),
                statement: name.to_string(),
                source: e,
            })?;
            let def = catalog.table(plan.table());
            let columns: Arc<[String]> = def.columns.iter().map(|c| c.name.clone()).collect();
            ops.push(Op {
                name: name.to_string(),
                access: Access::from_descriptor(plan.access(), def.name.as_str().into(), columns),
                rollback: false,
                unique_key: None,
            });
        }
        for r in &notes.rollbacks {
            let i = position(r)?;
            ops[i].rollback = true;
        }
        for (stmt, counter) in &notes.unique_keys {
            let (i, c) = (position(stmt)?, position(counter)?);
            let ca = &ops[c].access;
            if !(ca.blind_increment && ca.point && ca.written.len() == 1) {
                return Err(notes_err(format!(
                    "counter statement `{counter}` must be a blind increment of one column of one row"
                )));
            }
            if c >= i {
                return Err(notes_err(format!(
                    "`{stmt}` takes its key from counter `{counter}`, which must run before it"
                )));
            }
            let column = ca.written.iter().next().copied().unwrap_or_default();
            ops[i].unique_key = Some(Counter {
                table: ca.table,
                column,
            });
        }
        let mut independent = Vec::new();
        for (stmt, read) in &notes.independent {
            let (j, i) = (position(stmt)?, position(read)?);
            if i >= j || !ops[i].access.is_read() {
                return Err(notes_err(format!(
                    "`{stmt}` can be declared independent only of an earlier read, and `{read}` is not one"
                )));
            }
            independent.push((j, i));
        }
        let mut loops = Vec::new();
        for l in &notes.loops {
            let idx: Vec<usize> = l.iter().map(|s| position(s)).collect::<Result<_>>()?;
            loops.push(idx);
        }
        ProcSpec::new(src.name.clone(), ops, &independent, loops)
    }

    /// The procedure's own body as a spec, then one per reordering it
    /// offers: the candidates [`crate::order::choose_orderings`] chooses
    /// among.
    pub fn candidates(
        catalog: &Catalog,
        src: &ProcSource,
        notes: &ProcNotes,
    ) -> Result<Vec<ProcSpec>> {
        ProcSpec::from_source(catalog, src, notes)?.with_reorderings(catalog, src, notes)
    }

    /// This spec (the own body of `src`, from `notes`) followed by one
    /// per reordering `src` offers: [`ProcSpec::candidates`] for a caller
    /// that has the own spec already.
    pub fn with_reorderings(
        self,
        catalog: &Catalog,
        src: &ProcSource,
        notes: &ProcNotes,
    ) -> Result<Vec<ProcSpec>> {
        let mut out = vec![self];
        for (name, order) in &src.reorderings {
            out.push(
                ProcSpec::from_source(catalog, src, &notes.for_order(order)).map_err(|e| {
                    let msg = match e {
                        AnalysisError::Notes { msg, .. } => msg,
                        other => other.to_string(),
                    };
                    AnalysisError::Notes {
                        procedure: src.name.clone(),
                        msg: format!("reordering `{name}`: {msg}"),
                    }
                })?,
            );
        }
        Ok(out)
    }

    /// The operations op `j` depends on (transitively).
    pub fn deps_of(&self, j: usize) -> &BTreeSet<usize> {
        &self.deps[j]
    }

    /// Every dependency `(i, j)`: op `j` depends on op `i`.
    pub fn deps(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.deps
            .iter()
            .enumerate()
            .flat_map(|(j, s)| s.iter().map(move |&i| (i, j)))
    }

    pub fn loops(&self) -> &[Vec<usize>] {
        &self.loops
    }

    /// True if ops `a` and `b` are in one loop body.
    pub fn in_loop_with(&self, a: usize, b: usize) -> bool {
        self.loops.iter().any(|l| l.contains(&a) && l.contains(&b))
    }

    pub fn op_index(&self, name: &str) -> Option<usize> {
        self.ops.iter().position(|o| o.name == name)
    }
}

/// Builds the specs of an application: parses the schema once, then each
/// procedure with its notes (`notes(name)`; `None` means the defaults).
pub fn specs_from_sources<'a>(
    ddl: &str,
    procs: &[ProcSource],
    notes: impl Fn(&str) -> Option<&'a ProcNotes>,
) -> Result<(Catalog, Vec<ProcSpec>)> {
    let catalog = brine_sql::parse_schema(ddl).map_err(AnalysisError::Schema)?;
    let empty = ProcNotes::default();
    let specs = procs
        .iter()
        .map(|p| ProcSpec::from_source(&catalog, p, notes(&p.name).unwrap_or(&empty)))
        .collect::<Result<_>>()?;
    Ok((catalog, specs))
}
