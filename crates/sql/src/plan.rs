//! Prepared statements: what to run, with which parameters, and what it
//! touches (the access descriptor).

use crate::result::QueryResult;
use brine_core::schema::{coerce_value, ColumnDef};
use brine_core::{Catalog, DataType, Error, Generator, IndexId, Key, Result, Row, TableId, Value};
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

/// Where a value comes from: a parameter (by number, in order of first
/// appearance) or a literal already coerced to its column's type.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Param(usize),
    Literal(Value),
}

/// What binds a key column in a predicate. Same thing as an operand; the
/// alias names the role in access descriptors.
pub type KeyBinding = Operand;

impl Operand {
    /// The value of this operand given bound parameters.
    #[inline]
    pub fn value<'a>(&'a self, params: &'a [Value]) -> Result<&'a Value> {
        match self {
            Operand::Literal(v) => Ok(v),
            Operand::Param(i) => params.get(*i).ok_or_else(|| Error::Arity {
                what: "statement parameters".into(),
                expected: i + 1,
                got: params.len(),
            }),
        }
    }
}

/// A named parameter and the type it was inferred to have.
#[derive(Clone, Debug)]
pub struct Param {
    /// Name without its sigil (`$w_id` -> `w_id`).
    pub name: String,
    pub ty: DataType,
    /// Only parameters assigned to nullable columns may be NULL.
    pub nullable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatementKind {
    Select,
    Insert,
    Update,
    Delete,
}

/// Comparison operators of range predicates and residual filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    /// `a op b` given `a.cmp(b)`.
    pub fn holds(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::NotEq => ord != Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::LtEq => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::GtEq => ord != Ordering::Less,
        }
    }

    /// The operator with its operands swapped (`$x < c` is `c > $x`).
    pub fn flip(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
            other => other,
        }
    }
}

/// A residual predicate `column op operand`, evaluated on each row the index
/// scan yields. Comparisons with NULL are false.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub column: usize,
    pub op: CmpOp,
    pub operand: Operand,
}

impl Filter {
    #[inline]
    pub fn matches(&self, row: &Row, params: &[Value]) -> Result<bool> {
        let v = self.operand.value(params)?;
        let c = &row[self.column];
        if c.is_null() || v.is_null() {
            return Ok(false);
        }
        Ok(self.op.holds(c.cmp(v)))
    }
}

/// Which rows a statement visits: an interval of one index, then residual
/// filters.
///
/// The interval is `eq` (values for a prefix of the index key) optionally
/// followed by a range on the next key column (`lo`/`hi`). A full scan is
/// the primary index with no `eq` and unbounded `lo`/`hi`.
#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    pub index: IndexId,
    /// Key columns of `index` (for a secondary index: index columns then
    /// primary-key columns, which is the order of its entries).
    pub key_columns: Vec<usize>,
    /// Operands binding `key_columns[..eq.len()]`.
    pub eq: Vec<Operand>,
    /// Range on `key_columns[eq.len()]`, if any.
    pub lo: Bound<Operand>,
    pub hi: Bound<Operand>,
    pub filters: Vec<Filter>,
    /// True when `index` is the primary index and `eq` binds all of it: at
    /// most one row.
    pub point: bool,
}

impl Predicate {
    pub fn has_range(&self) -> bool {
        !matches!((&self.lo, &self.hi), (Bound::Unbounded, Bound::Unbounded))
    }

    /// The key bound by `eq` (the full primary key for a point predicate).
    pub fn eq_key(&self, params: &[Value]) -> Result<Key> {
        let mut k = Key::default();
        for op in &self.eq {
            k.0.push(op.value(params)?.clone());
        }
        Ok(k)
    }

    /// The scanned interval of `index`, as inclusive/exclusive key bounds.
    /// A prefix `p` spans `[p, p ++ MAX]`; `c > v` excludes every key
    /// starting with `p ++ v`, so its bound is `Excluded(p ++ v ++ MAX)`.
    pub fn bounds(&self, params: &[Value]) -> Result<(Bound<Key>, Bound<Key>)> {
        let prefix = self.eq_key(params)?;
        let with = |v: &Value| {
            let mut k = prefix.clone();
            k.0.push(v.clone());
            k
        };
        let with_max = |v: &Value| {
            let mut k = with(v);
            k.0.push(Value::Max);
            k
        };
        let lo = match &self.lo {
            Bound::Included(op) => Bound::Included(with(op.value(params)?)),
            Bound::Excluded(op) => Bound::Excluded(with_max(op.value(params)?)),
            Bound::Unbounded if prefix.is_empty() => Bound::Unbounded,
            Bound::Unbounded => Bound::Included(prefix.clone()),
        };
        let hi = match &self.hi {
            Bound::Included(op) => Bound::Included(with_max(op.value(params)?)),
            Bound::Excluded(op) => Bound::Excluded(with(op.value(params)?)),
            Bound::Unbounded if prefix.is_empty() => Bound::Unbounded,
            Bound::Unbounded => Bound::Included(Key::prefix_upper(prefix.values())),
        };
        Ok((lo, hi))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFunc {
    Count,
    Sum,
    Min,
    Max,
}

/// `func(column)`; `column == None` is `COUNT(*)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Aggregate {
    pub func: AggFunc,
    pub column: Option<usize>,
}

impl Aggregate {
    /// The accumulator row before any input: COUNT starts at 0, the others
    /// at NULL (the value of MIN/MAX/SUM over no rows).
    pub fn initial_row(aggs: &[Aggregate]) -> Row {
        aggs.iter()
            .map(|a| match a.func {
                AggFunc::Count => Value::Int(0),
                _ => Value::Null,
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Projection {
    /// Column positions, in output order. Broadcast plans with ORDER BY may
    /// carry hidden trailing sort columns (see `SelectPlan::visible`).
    Columns(Vec<usize>),
    /// One output row of aggregates.
    Aggregates(Vec<Aggregate>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SelectPlan {
    pub pred: Predicate,
    pub projection: Projection,
    /// Scan the index backwards (`ORDER BY ... DESC`).
    pub desc: bool,
    /// Output positions that order the result (ORDER BY), used by `merge`.
    pub sort_positions: Vec<usize>,
    /// Number of output columns the user sees; the rest are hidden sort
    /// columns that `merge` drops.
    pub visible: usize,
    pub limit: Option<Operand>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InsertPlan {
    /// One entry per table column; `None` inserts NULL.
    pub values: Vec<Option<Operand>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
}

/// The right-hand side of `SET column = ...`.
#[derive(Clone, Debug, PartialEq)]
pub enum SetExpr {
    Value(Operand),
    /// `source op operand`, e.g. `c = c + $x`.
    Arith {
        source: usize,
        op: ArithOp,
        operand: Operand,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub column: usize,
    pub expr: SetExpr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct UpdatePlan {
    pub pred: Predicate,
    pub sets: Vec<Assignment>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DeletePlan {
    pub pred: Predicate,
}

/// The executable part of a plan. Storage interprets it.
#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Select(SelectPlan),
    Insert(InsertPlan),
    Update(UpdatePlan),
    Delete(DeletePlan),
}

/// What a statement touches, for static analysis (Callas chopping, Elia
/// partitioning) and for reasoning about conflicts without running it.
///
/// Two statements on the same `table` can conflict only if one writes a
/// column the other reads or writes, on keys both may touch.
#[derive(Clone, Debug, PartialEq)]
pub struct AccessDescriptor {
    pub table: TableId,
    pub kind: StatementKind,
    /// Index the statement scans (`IndexId::PRIMARY` for inserts).
    pub index: IndexId,
    /// Columns whose stored values the statement observes: the projection,
    /// aggregate arguments, residual filter columns, the range column, and
    /// the sources of `SET` expressions. Key columns bound by equality are
    /// not listed (their values are the parameters) unless also projected.
    /// Sorted, no duplicates.
    pub columns_read: Vec<usize>,
    /// Columns the statement stores: every column for INSERT and DELETE, the
    /// `SET` columns for UPDATE, none for SELECT. Sorted, no duplicates.
    pub columns_written: Vec<usize>,
    /// Which parameter or literal binds which key column, by equality: the
    /// bound prefix of `index` (for INSERT, every primary-key column).
    pub key_params: Vec<(usize, KeyBinding)>,
    /// True if the statement may touch more than one row (a prefix, range
    /// or full scan).
    pub range: bool,
    /// The column the range predicate constrains, if any, with its bounds.
    pub range_column: Option<usize>,
    /// An UPDATE whose every `SET` is `c = c + e` or `c = c - e` and that
    /// reads no other column: it commutes with other blind increments.
    pub blind_increment: bool,
    /// The operand binding the table's partitioning column by equality, if
    /// any: then the statement runs on one partition.
    pub partition_key: Option<KeyBinding>,
}

impl Predicate {
    fn for_each_operand_mut(&mut self, f: &mut impl FnMut(&mut Operand)) {
        self.eq.iter_mut().for_each(&mut *f);
        for b in [&mut self.lo, &mut self.hi] {
            if let Bound::Included(op) | Bound::Excluded(op) = b {
                f(op);
            }
        }
        self.filters.iter_mut().for_each(|x| f(&mut x.operand));
    }
}

impl Statement {
    /// Visits every operand of the statement.
    pub(crate) fn for_each_operand_mut(&mut self, f: &mut impl FnMut(&mut Operand)) {
        match self {
            Statement::Select(s) => {
                s.pred.for_each_operand_mut(f);
                s.limit.iter_mut().for_each(f);
            }
            Statement::Insert(i) => i.values.iter_mut().flatten().for_each(f),
            Statement::Update(u) => {
                for a in &mut u.sets {
                    match &mut a.expr {
                        SetExpr::Value(op) | SetExpr::Arith { operand: op, .. } => f(op),
                    }
                }
                u.pred.for_each_operand_mut(f);
            }
            Statement::Delete(d) => d.pred.for_each_operand_mut(f),
        }
    }
}

impl AccessDescriptor {
    /// Visits every operand the descriptor names.
    pub(crate) fn for_each_operand_mut(&mut self, f: &mut impl FnMut(&mut Operand)) {
        self.key_params.iter_mut().for_each(|(_, op)| f(op));
        self.partition_key.iter_mut().for_each(f);
    }
}

/// Where a statement runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// On the partition that owns this value of the partitioning column
    /// (`brine_core::schema::partition_of`).
    Partition(Value),
    /// On every partition; the coordinator merges the results with
    /// `Plan::merge`.
    Broadcast,
}

/// A prepared statement. Cheap to clone; callers share it by `Arc`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub(crate) sql: Arc<str>,
    pub(crate) params: Vec<Param>,
    pub(crate) param_columns: Vec<ColumnDef>,
    /// Per parameter: whether some use stores it in its column (else it is
    /// only compared, or the operand of `c = c op $x`).
    pub(crate) param_stored: Vec<bool>,
    /// Values `bind` makes, after the parameters: operand
    /// `Param(params.len() + k)` is `generated[k]`'s value.
    pub(crate) generated: Vec<Generator>,
    pub(crate) table_name: Arc<str>,
    pub(crate) columns: Arc<[String]>,
    pub(crate) access: AccessDescriptor,
    pub(crate) statement: Statement,
}

impl Plan {
    pub fn sql(&self) -> &str {
        &self.sql
    }

    pub fn table(&self) -> TableId {
        self.access.table
    }

    pub fn kind(&self) -> StatementKind {
        self.access.kind
    }

    /// Parameters in order of first appearance.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// What operand `Param(i)` stands for, for messages and analyses: a
    /// parameter's `$name`, or the generator (`now()`) that makes it.
    pub fn param_name(&self, i: usize) -> String {
        match self.params.get(i) {
            Some(p) => format!("${}", p.name),
            None => self
                .generated
                .get(i - self.params.len())
                .map_or_else(|| format!("${}", i + 1), |g| g.to_string()),
        }
    }

    pub fn access(&self) -> &AccessDescriptor {
        &self.access
    }

    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// Output column names (empty for INSERT/UPDATE/DELETE).
    pub fn columns(&self) -> &Arc<[String]> {
        &self.columns
    }

    /// Checks arity and types of `args` and coerces them (INT into a
    /// DECIMAL parameter, a DECIMAL to a larger scale) to the parameters'
    /// types, then appends the values the plan generates (`now()`,
    /// `unique_rowid()`). The result is what `route` and storage take.
    ///
    /// A NULL for a parameter that is stored in a NOT NULL column is
    /// `Error::NotNull`; for one that is only compared or added (which
    /// brine refuses to let be NULL, see the crate docs) a type error.
    pub fn bind(&self, args: Vec<Value>) -> Result<Vec<Value>> {
        if args.len() != self.params.len() {
            return Err(Error::Arity {
                what: format!("parameters of `{}`", self.sql),
                expected: self.params.len(),
                got: args.len(),
            });
        }
        let mut bound = Vec::with_capacity(args.len() + self.generated.len());
        for (((v, p), col), &stored) in args
            .into_iter()
            .zip(&self.params)
            .zip(&self.param_columns)
            .zip(&self.param_stored)
        {
            if v.is_null() && !col.nullable && !stored {
                return Err(Error::type_mismatch(
                    format!("parameter `${}`", p.name),
                    format!("{} NOT NULL", col.ty),
                    "NULL",
                ));
            }
            bound.push(coerce_value(&self.table_name, col, v).map_err(|e| match e {
                Error::Type { expected, got, .. } => Error::Type {
                    what: format!("parameter `${}`", p.name),
                    expected,
                    got,
                },
                Error::OutOfRange(msg) => {
                    Error::OutOfRange(format!("parameter `${}`: {msg}", p.name))
                }
                other => other,
            })?);
        }
        bound.extend(self.generated.iter().map(|g| g.generate()));
        Ok(bound)
    }

    /// True if the plan always runs on exactly one partition.
    pub fn is_single_partition(&self) -> bool {
        self.access.partition_key.is_some()
    }

    /// Where to run the statement given bound parameters. Routing is static
    /// per plan: a plan either always routes to one partition (its
    /// predicate or insert binds the partitioning column) or always
    /// broadcasts. `catalog` is accepted so routing may later depend on
    /// schema-level placement; today the plan carries everything.
    pub fn route(&self, params: &[Value], _catalog: &Catalog) -> Route {
        match &self.access.partition_key {
            Some(op) => match op.value(params) {
                Ok(v) => Route::Partition(v.clone()),
                Err(_) => Route::Broadcast,
            },
            None => Route::Broadcast,
        }
    }

    /// Combines the results of a broadcast: concatenates rows, re-sorts them
    /// by the ORDER BY (honouring DESC), applies LIMIT, merges aggregates
    /// (COUNT and SUM add, MIN/MAX take the extreme; LIMIT 0 leaves no
    /// row) and sums affected counts. Hidden sort columns are dropped.
    /// Every broadcast result must go through `merge`, even with a single
    /// partition.
    ///
    /// A SUM whose partial sums overflow when added is
    /// `Error::OutOfRange`, as the same SUM is on one partition. (A
    /// broadcast `LIMIT $p` is rejected by `prepare`, so merging never
    /// needs parameters.)
    pub fn merge(&self, results: Vec<QueryResult>) -> Result<QueryResult> {
        let params: &[Value] = &[];
        let affected = results.iter().map(|r| r.affected).sum();
        let Statement::Select(sel) = &self.statement else {
            return Ok(QueryResult::affected(affected));
        };
        match &sel.projection {
            Projection::Aggregates(aggs) => {
                let mut acc = Aggregate::initial_row(aggs);
                for r in &results {
                    for row in &r.rows {
                        for ((slot, a), v) in acc.iter_mut().zip(aggs).zip(row) {
                            let merged = merge_agg(a.func, slot, v)?;
                            *slot = merged;
                        }
                    }
                }
                let mut rows = vec![acc];
                if let Some(limit) = &sel.limit {
                    rows.truncate(limit_value(limit, params)?);
                }
                Ok(QueryResult {
                    columns: self.columns.clone(),
                    rows,
                    affected,
                })
            }
            Projection::Columns(_) => {
                let mut rows: Vec<Row> = results.into_iter().flat_map(|r| r.rows).collect();
                if !sel.sort_positions.is_empty() {
                    let cmp = |a: &Row, b: &Row| {
                        let o = sel
                            .sort_positions
                            .iter()
                            .map(|&p| a[p].cmp(&b[p]))
                            .find(|o| o.is_ne())
                            .unwrap_or(Ordering::Equal);
                        if sel.desc {
                            o.reverse()
                        } else {
                            o
                        }
                    };
                    rows.sort_by(cmp);
                }
                if let Some(limit) = &sel.limit {
                    let n = limit_value(limit, params)?;
                    rows.truncate(n);
                }
                for r in &mut rows {
                    r.truncate(sel.visible);
                }
                Ok(QueryResult {
                    columns: self.columns.clone(),
                    rows,
                    affected,
                })
            }
        }
    }
}

/// A LIMIT operand as a row count; negative limits are errors.
pub fn limit_value(op: &Operand, params: &[Value]) -> Result<usize> {
    match op.value(params)? {
        Value::Int(n) if *n >= 0 => Ok(usize::try_from(*n).unwrap_or(usize::MAX)),
        other => Err(Error::type_mismatch(
            "LIMIT",
            "non-negative INT",
            format!("{other:?}"),
        )),
    }
}

/// Folds one partial aggregate `v` into `acc`.
pub fn merge_agg(func: AggFunc, acc: &Value, v: &Value) -> Result<Value> {
    if v.is_null() {
        return Ok(acc.clone());
    }
    if acc.is_null() {
        return Ok(v.clone());
    }
    Ok(match func {
        AggFunc::Count | AggFunc::Sum => add_values(acc, v)?,
        AggFunc::Min => std::cmp::min(acc, v).clone(),
        AggFunc::Max => std::cmp::max(acc, v).clone(),
    })
}

/// Exact `a op b` on numbers (a DECIMAL product rounded half away from
/// zero to the larger scale). NULL operands give NULL; overflow is
/// `Error::OutOfRange`, a non-number a type error.
pub fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value> {
    let overflow = || Error::OutOfRange(format!("arithmetic overflow in {a:?} {op:?} {b:?}"));
    Ok(match (a, b) {
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        (Value::Int(x), Value::Int(y)) => Value::Int(
            match op {
                ArithOp::Add => x.checked_add(*y),
                ArithOp::Sub => x.checked_sub(*y),
                ArithOp::Mul => x.checked_mul(*y),
            }
            .ok_or_else(overflow)?,
        ),
        (Value::Decimal(_) | Value::Int(_), Value::Decimal(_) | Value::Int(_)) => {
            let (x, y) = match (a.as_decimal(), b.as_decimal()) {
                (Some(x), Some(y)) => (x, y),
                _ => return Err(overflow()),
            };
            Value::Decimal(
                match op {
                    ArithOp::Add => x.checked_add(y),
                    ArithOp::Sub => x.checked_sub(y),
                    ArithOp::Mul => x.checked_mul(y),
                }
                .ok_or_else(overflow)?,
            )
        }
        _ => {
            return Err(Error::type_mismatch(
                format!("arithmetic {op:?}"),
                "numbers",
                format!("{} and {}", a.kind(), b.kind()),
            ))
        }
    })
}

fn add_values(a: &Value, b: &Value) -> Result<Value> {
    arith(ArithOp::Add, a, b)
}
