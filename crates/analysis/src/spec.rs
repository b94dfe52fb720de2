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

use brine_core::{Catalog, IndexId, TableId, Value};
use brine_sql::{AccessDescriptor, CmpOp, Operand, Plan, Statement, StatementKind};

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
    /// Notes the application declares with the procedure (an application
    /// file); the built-in workloads' are kept by the analysis
    /// (`crate::workloads::notes`).
    pub notes: Option<ProcNotes>,
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

/// What an equality of a statement's predicate (or an inserted value)
/// binds a column to.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// The procedure's argument of this index (a placeholder named like a
    /// declared argument, [`ProcNotes::args`]).
    Arg(usize),
    /// A literal of the statement's text.
    Literal(Value),
    /// A value the body computed (any other placeholder): unknown to the
    /// analysis.
    Computed(String),
}

/// Which rows an operation touches, as far as its equalities tell, for
/// operation partitioning (seed 004 section 3.1: an entry's condition).
/// Empty (`Default`) when unknown: the operation may touch any row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// `(column, value)`: every row the statement touches has `column =
    /// value`. The key columns its index prefix binds by `=`, the residual
    /// `=` filters, and, for INSERT, every inserted column (the row's
    /// values are known). Ranges and other comparisons are left out.
    pub equalities: Vec<(usize, Bound)>,
    /// For a SELECT with a LIMIT on a secondary index, the index's columns
    /// after the `=` prefix: their values decide which rows it returns,
    /// though the descriptor does not list them as read.
    pub order_columns: Vec<usize>,
}

impl Selection {
    /// Reads the equalities off a prepared statement. `arg_of_param[i]`:
    /// the procedure argument statement parameter `i` is, if any.
    pub fn from_plan(plan: &Plan, arg_of_param: &[Option<usize>]) -> Selection {
        let bound = |op: &Operand| match op {
            Operand::Literal(v) => Bound::Literal(v.clone()),
            Operand::Param(i) => match arg_of_param.get(*i).copied().flatten() {
                Some(a) => Bound::Arg(a),
                None => Bound::Computed(plan.param_name(*i)),
            },
        };
        let mut eq: Vec<(usize, Bound)> = plan
            .access()
            .key_params
            .iter()
            .map(|(c, op)| (*c, bound(op)))
            .collect();
        let mut order_columns = Vec::new();
        match plan.statement() {
            Statement::Insert(ins) => {
                for (c, v) in ins.values.iter().enumerate() {
                    if let Some(op) = v {
                        eq.push((c, bound(op)));
                    }
                }
            }
            Statement::Select(sel) => {
                eq.extend(filter_equalities(&sel.pred.filters, &bound));
                // A LIMIT keeps the first rows in index order: which rows
                // depends on the index columns after the `=` prefix.
                if sel.pred.index != IndexId::PRIMARY && sel.limit.is_some() {
                    let from = sel.pred.eq.len().min(sel.pred.key_columns.len());
                    order_columns = sel.pred.key_columns[from..].to_vec();
                    order_columns.sort_unstable();
                    order_columns.dedup();
                }
            }
            Statement::Update(u) => eq.extend(filter_equalities(&u.pred.filters, &bound)),
            Statement::Delete(d) => eq.extend(filter_equalities(&d.pred.filters, &bound)),
        }
        let mut equalities: Vec<(usize, Bound)> = Vec::with_capacity(eq.len());
        for e in eq {
            if !equalities.contains(&e) {
                equalities.push(e);
            }
        }
        Selection {
            equalities,
            order_columns,
        }
    }
}

fn filter_equalities<'a>(
    filters: &'a [brine_sql::Filter],
    bound: &'a impl Fn(&Operand) -> Bound,
) -> impl Iterator<Item = (usize, Bound)> + 'a {
    filters
        .iter()
        .filter(|f| f.op == CmpOp::Eq)
        .map(move |f| (f.column, bound(&f.operand)))
}

/// One operation of a procedure: a declared statement at its place in the
/// body's execution order.
#[derive(Clone, Debug)]
pub struct Op {
    /// The statement's declared name.
    pub name: String,
    pub access: Access,
    /// The rows it touches by equality, for operation partitioning.
    pub selection: Selection,
    /// Per statement parameter (in the plan's order), the procedure
    /// argument it is, if declared ([`ProcNotes::args`]).
    pub param_args: Vec<Option<usize>>,
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
    /// The procedure's argument names, in call order (operation
    /// partitioning): a statement placeholder `$x` is argument `x` when
    /// one is so named, unless `not_args` says otherwise. `None`: not
    /// declared (no argument can partition the procedure). `_` names an
    /// argument no placeholder stands for.
    pub args: Option<Vec<String>>,
    /// `(statement, placeholder)`: in that statement, `$placeholder` is
    /// not the argument of its name (a value the body computed, or
    /// another argument).
    pub not_args: Vec<(String, String)>,
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

    /// Declares the procedure's arguments, positionally (the field
    /// `args`). A placeholder `$x` of any statement is taken to be
    /// argument `x`: name an argument only if every statement's `$x`
    /// receives exactly that argument, and declare the exceptions with
    /// [`ProcNotes::not_arg`]. A wrong name silently makes a wrong
    /// partitioning: check each against the body and its call sites.
    pub fn args(mut self, names: &[&str]) -> Self {
        self.args = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    /// In `statement`, `$placeholder` is not the argument of that name
    /// (a row read earlier, a loop value, another argument): the analysis
    /// treats it as unknown.
    pub fn not_arg(mut self, statement: &str, placeholder: &str) -> Self {
        self.not_args
            .push((statement.into(), placeholder.trim_start_matches('$').into()));
        self
    }

    /// True if the notes say anything about the body (order, loops,
    /// dependencies, rollbacks, counters), not only argument names.
    pub fn describes_body(&self) -> bool {
        self.order.is_some()
            || !self.loops.is_empty()
            || !self.independent.is_empty()
            || !self.rollbacks.is_empty()
            || !self.unique_keys.is_empty()
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

/// The declared argument names of `notes`, checked: no name twice (but
/// `_`), every `not_arg` exception naming a declared statement and an
/// argument.
fn check_args(notes: &ProcNotes, declared: &[&str]) -> std::result::Result<Vec<String>, String> {
    let args = notes.args.clone().unwrap_or_default();
    for (i, a) in args.iter().enumerate() {
        if a.is_empty() || a.starts_with('$') {
            return Err(format!(
                "argument {i} is named `{a}`: give the placeholder's name without `$` (or `_`)"
            ));
        }
        if a != "_" && args[..i].contains(a) {
            return Err(format!("argument name `{a}` is declared twice"));
        }
    }
    for (st, ph) in &notes.not_args {
        if !declared.contains(&st.as_str()) {
            return Err(format!("`not_arg` names undeclared statement `{st}`"));
        }
        if !args.contains(ph) {
            return Err(format!(
                "`not_arg({st}, ${ph})`: no argument is named `{ph}`, so nothing to undo"
            ));
        }
    }
    Ok(args)
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
    /// The declared argument names (empty: none or not declared), for
    /// operation partitioning; `Bound::Arg` indexes them.
    pub args: Vec<String>,
    /// True if the notes declared the arguments (possibly none).
    pub args_declared: bool,
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
            args: Vec::new(),
            args_declared: false,
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
            args: self.args.clone(),
            args_declared: self.args_declared,
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
        let args = check_args(notes, &declared).map_err(notes_err)?;
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
            let arg_of_param: Vec<Option<usize>> = plan
                .params()
                .iter()
                .map(|p| {
                    let not_arg = notes
                        .not_args
                        .iter()
                        .any(|(st, ph)| st == name && *ph == p.name);
                    (!not_arg)
                        .then(|| args.iter().position(|a| *a == p.name))
                        .flatten()
                })
                .collect();
            for (st, ph) in notes.not_args.iter().filter(|(st, _)| st == name) {
                if !plan.params().iter().any(|p| p.name == *ph) {
                    return Err(notes_err(format!(
                        "`not_arg({st}, ${ph})`: statement `{st}` has no placeholder `${ph}`"
                    )));
                }
            }
            ops.push(Op {
                name: name.to_string(),
                access: Access::from_descriptor(plan.access(), def.name.as_str().into(), columns),
                selection: Selection::from_plan(&plan, &arg_of_param),
                param_args: arg_of_param,
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
        let mut spec = ProcSpec::new(src.name.clone(), ops, &independent, loops)?;
        spec.args_declared = notes.args.is_some();
        spec.args = args;
        Ok(spec)
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

    /// Declared argument names (but `_`) that no statement placeholder
    /// stands for: harmless, but often a typo or a stale declaration.
    pub fn unused_args(&self) -> Vec<&str> {
        self.args
            .iter()
            .enumerate()
            .filter(|(k, a)| {
                *a != "_" && !self.ops.iter().any(|o| o.param_args.contains(&Some(*k)))
            })
            .map(|(_, a)| a.as_str())
            .collect()
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
