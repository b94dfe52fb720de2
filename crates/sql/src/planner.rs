//! SQL text -> `Plan`: parameter typing, index choice, ORDER BY checks and
//! the access descriptor. SELECT is planned here, the writes in `writes`.

use crate::literal::{generator, literal, literal_for, object_name, placeholder};
use crate::plan::*;
use brine_core::schema::ColumnDef;
use brine_core::{
    Catalog, ColumnDefault, DataType, Error, Generator, IndexId, Result, TableDef, Value,
};
use sqlparser::ast::{
    self, BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr,
    LimitClause, OrderByKind, SelectItem, SetExpr as AstSetExpr, TableFactor, TableObject,
    TableWithJoins,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use std::ops::Bound;
use std::sync::Arc;

mod writes;
use writes::{plan_delete, plan_insert, plan_update};

/// Prepares one statement against `catalog`. See the crate documentation
/// for the supported subset; anything else is `Error::Sql` naming what is
/// unsupported.
pub fn prepare(catalog: &Catalog, sql: &str) -> Result<Plan> {
    plan(catalog, sql, parse_one(sql)?)
}

/// Prepares one statement as the plans it runs, in order, parsing it once:
/// `INSERT ... VALUES (...), (...)` is one single-row INSERT per row
/// (a plan inserts one row), each with its own text; anything else is the
/// one plan `prepare` makes. The caller runs them in one transaction.
pub fn prepare_all(catalog: &Catalog, sql: &str) -> Result<Vec<Plan>> {
    let mut stmt = parse_one(sql)?;
    if let ast::Statement::Insert(ins) = &mut stmt {
        let rows = match ins.source.as_deref_mut().map(|q| q.body.as_mut()) {
            Some(AstSetExpr::Values(values)) if values.rows.len() > 1 => {
                std::mem::take(&mut values.rows)
            }
            _ => Vec::new(),
        };
        if !rows.is_empty() {
            let mut plans = Vec::with_capacity(rows.len());
            for row in rows {
                if let Some(AstSetExpr::Values(values)) =
                    ins.source.as_deref_mut().map(|q| q.body.as_mut())
                {
                    values.rows = vec![row];
                }
                plans.push(plan_insert(catalog, &ins.to_string(), ins)?);
            }
            return Ok(plans);
        }
    }
    Ok(vec![plan(catalog, sql, stmt)?])
}

fn parse_one(sql: &str) -> Result<ast::Statement> {
    let mut stmts = Parser::parse_sql(&GenericDialect {}, sql)
        .map_err(|e| Error::Sql(format!("cannot parse `{sql}`: {e}")))?;
    if stmts.len() != 1 {
        return Err(Error::Sql(format!(
            "expected exactly one statement, got {}",
            stmts.len()
        )));
    }
    Ok(stmts.remove(0))
}

fn plan(catalog: &Catalog, sql: &str, stmt: ast::Statement) -> Result<Plan> {
    match stmt {
        ast::Statement::Query(q) => plan_select(catalog, sql, &q),
        ast::Statement::Insert(ins) => plan_insert(catalog, sql, &ins),
        ast::Statement::Update {
            table,
            assignments,
            from,
            selection,
            returning,
            or,
            limit,
        } => {
            if from.is_some() || returning.is_some() || or.is_some() || limit.is_some() {
                return unsupported("UPDATE with FROM, RETURNING, OR or LIMIT");
            }
            plan_update(catalog, sql, &table, &assignments, selection.as_ref())
        }
        ast::Statement::Delete(del) => plan_delete(catalog, sql, &del),
        other => Err(Error::Sql(format!(
            "unsupported statement `{other}`: only SELECT, INSERT, UPDATE and DELETE"
        ))),
    }
}

fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::Sql(format!("unsupported: {what}")))
}

/// One conjunct of a WHERE clause: `column op operand`.
struct Conj {
    column: usize,
    op: CmpOp,
    operand: Operand,
}

/// What an operand is for, which decides the checks its value gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Stored in its column (an INSERT value, `SET c = v`): NULL only for
    /// a nullable column, a DECIMAL within the column's precision.
    Stored,
    /// Compared with its column in WHERE. NULL is refused (a comparison
    /// with NULL is never true); a DECIMAL needs the column's scale but
    /// not its precision: `amount < 100000000.00` is a fine question to
    /// ask of a DECIMAL(10,2).
    Compared,
    /// The `v` of `SET c = c op v`: the column's scale, any precision (the
    /// result is checked when stored). A parameter here is never NULL:
    /// `c = c + $x` is a blind increment that commutes with others and is
    /// undone by subtraction, which a NULL would break.
    Arith,
}

struct Builder<'a> {
    table: &'a TableDef,
    alias: Option<String>,
    params: Vec<Param>,
    param_columns: Vec<ColumnDef>,
    /// Per parameter: whether some use stores it (see `Plan::bind`).
    param_stored: Vec<bool>,
    /// Values made at bind time. While planning, the operand of
    /// `generated[k]` is `Param(GENERATED + k)`; `finish` renumbers them
    /// after the parameters (which are numbered in order of appearance).
    generated: Vec<Generator>,
}

/// Where generated operands are numbered until `finish` knows how many
/// parameters there are.
const GENERATED: usize = usize::MAX / 2;

impl<'a> Builder<'a> {
    fn new(catalog: &'a Catalog, name: &ast::ObjectName, alias: Option<String>) -> Result<Self> {
        let table = catalog.table_by_name(&object_name(name)?)?;
        Ok(Builder {
            table,
            alias,
            params: Vec::new(),
            param_columns: Vec::new(),
            param_stored: Vec::new(),
            generated: Vec::new(),
        })
    }

    fn from_table_with_joins(catalog: &'a Catalog, t: &TableWithJoins) -> Result<Self> {
        if !t.joins.is_empty() {
            return unsupported("joins (a statement reads one table)");
        }
        match &t.relation {
            TableFactor::Table { name, alias, .. } => {
                Builder::new(catalog, name, alias.as_ref().map(|a| a.name.value.clone()))
            }
            other => Err(Error::Sql(format!(
                "unsupported: FROM `{other}` (only a plain table name)"
            ))),
        }
    }

    fn column_def(&self, c: usize) -> &ColumnDef {
        &self.table.columns[c]
    }

    /// The column `expr` names, or `None` if it is not a column reference.
    fn column(&self, expr: &Expr) -> Result<Option<usize>> {
        match expr {
            Expr::Identifier(id) => self.table.column_index(&id.value).map(Some),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let q = &parts[0].value;
                let ok = q.eq_ignore_ascii_case(&self.table.name)
                    || self
                        .alias
                        .as_deref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(q));
                if !ok {
                    return Err(Error::Sql(format!(
                        "`{expr}` does not refer to table `{}`",
                        self.table.name
                    )));
                }
                self.table.column_index(&parts[1].value).map(Some)
            }
            Expr::Nested(inner) => self.column(inner),
            _ => Ok(None),
        }
    }

    fn require_column(&self, expr: &Expr) -> Result<usize> {
        self.column(expr)?
            .ok_or_else(|| Error::Sql(format!("expected a column name, got `{expr}`")))
    }

    /// Registers (or finds) parameter `name` with the type of `col`.
    fn param(&mut self, name: &str, col: ColumnDef, stored: bool) -> Result<usize> {
        if let Some(i) = self.params.iter().position(|p| p.name == name) {
            let known = &mut self.param_columns[i];
            known.ty = match (known.ty, col.ty) {
                (a, b) if a == b => a,
                // One scale, two precisions (a value stored, and compared
                // or added): the narrower one holds for every use.
                (
                    DataType::Decimal {
                        precision: p1,
                        scale: s1,
                    },
                    DataType::Decimal {
                        precision: p2,
                        scale: s2,
                    },
                ) if s1 == s2 => DataType::Decimal {
                    precision: p1.min(p2),
                    scale: s1,
                },
                (a, b) => {
                    return Err(Error::Sql(format!(
                        "parameter `${name}` is used both as {a} and as {b}"
                    )))
                }
            };
            known.nullable &= col.nullable;
            self.params[i].ty = known.ty;
            self.params[i].nullable = known.nullable;
            self.param_stored[i] |= stored;
            return Ok(i);
        }
        self.params.push(Param {
            name: name.to_string(),
            ty: col.ty,
            nullable: col.nullable,
        });
        self.param_columns.push(col);
        self.param_stored.push(stored);
        Ok(self.params.len() - 1)
    }

    /// A parameter or literal of column `c`'s type, checked for its role.
    fn operand(&mut self, expr: &Expr, c: usize, role: Role) -> Result<Operand> {
        let col = self.column_def(c);
        let ty = match (role, col.ty) {
            (Role::Compared | Role::Arith, DataType::Decimal { scale, .. }) => DataType::Decimal {
                precision: brine_core::Decimal::MAX_PRECISION,
                scale,
            },
            (_, ty) => ty,
        };
        let col = ColumnDef {
            name: col.name.clone(),
            ty,
            nullable: role == Role::Stored && col.nullable,
            default: None,
        };
        let declared = self.column_def(c).ty;
        self.typed_operand(expr, col, role == Role::Stored)
            .map_err(|e| match e {
                // Name the column's own type, not the widened one checked.
                Error::Type { what, got, .. } if declared != ty => Error::Type {
                    what,
                    expected: declared.to_string(),
                    got,
                },
                other => other,
            })
    }

    /// The operand of a value made at bind time.
    fn generate(&mut self, g: Generator) -> Operand {
        self.generated.push(g);
        Operand::Param(GENERATED + self.generated.len() - 1)
    }

    /// A parameter, generated value or literal of `col`'s type. `stored`:
    /// the value goes into its column (else a parameter's NULL is a type
    /// error, see `Plan::bind`).
    fn typed_operand(&mut self, expr: &Expr, col: ColumnDef, stored: bool) -> Result<Operand> {
        if let Some(name) = placeholder(expr) {
            return Ok(Operand::Param(self.param(name, col, stored)?));
        }
        if let Some(g) = generator(expr) {
            if g.ty() != col.ty {
                return Err(Error::type_mismatch(format!("{expr}"), col.ty, g.ty()));
            }
            return Ok(self.generate(g));
        }
        match literal(expr)? {
            Some(v) => Ok(Operand::Literal(literal_for(&self.table.name, &col, v)?)),
            None => Err(Error::Sql(format!(
                "unsupported expression `{expr}`: expected a $parameter or a literal"
            ))),
        }
    }

    /// Splits a WHERE clause into `column op operand` conjuncts, in text
    /// order (which numbers the parameters).
    fn conjuncts(&mut self, expr: &Expr, out: &mut Vec<Conj>) -> Result<()> {
        match expr {
            Expr::Nested(inner) => self.conjuncts(inner, out),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                self.conjuncts(left, out)?;
                self.conjuncts(right, out)
            }
            Expr::BinaryOp {
                op: BinaryOperator::Or,
                ..
            } => unsupported("OR in WHERE (only conjunctions of comparisons)"),
            Expr::BinaryOp { left, op, right } => {
                let cmp = match op {
                    BinaryOperator::Eq => CmpOp::Eq,
                    BinaryOperator::NotEq => CmpOp::NotEq,
                    BinaryOperator::Lt => CmpOp::Lt,
                    BinaryOperator::LtEq => CmpOp::LtEq,
                    BinaryOperator::Gt => CmpOp::Gt,
                    BinaryOperator::GtEq => CmpOp::GtEq,
                    other => {
                        return Err(Error::Sql(format!(
                            "unsupported operator `{other}` in WHERE"
                        )))
                    }
                };
                let (column, op, operand_expr) = match (self.column(left)?, self.column(right)?) {
                    (Some(_), Some(_)) => return unsupported("comparing two columns in WHERE"),
                    (Some(c), None) => (c, cmp, right),
                    (None, Some(c)) => (c, cmp.flip(), left),
                    (None, None) => {
                        return Err(Error::Sql(format!(
                            "unsupported predicate `{expr}`: one side must be a column"
                        )))
                    }
                };
                if is_null_literal(operand_expr) {
                    return unsupported("comparison with NULL (it is never true)");
                }
                let operand = self.operand(operand_expr, column, Role::Compared)?;
                out.push(Conj {
                    column,
                    op,
                    operand,
                });
                Ok(())
            }
            Expr::Between {
                expr: col,
                negated: false,
                low,
                high,
            } => {
                let column = self.require_column(col)?;
                if is_null_literal(low) || is_null_literal(high) {
                    return unsupported("comparison with NULL (it is never true)");
                }
                let lo = self.operand(low, column, Role::Compared)?;
                let hi = self.operand(high, column, Role::Compared)?;
                out.push(Conj {
                    column,
                    op: CmpOp::GtEq,
                    operand: lo,
                });
                out.push(Conj {
                    column,
                    op: CmpOp::LtEq,
                    operand: hi,
                });
                Ok(())
            }
            Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => {
                unsupported("subqueries")
            }
            other => Err(Error::Sql(format!(
                "unsupported predicate `{other}`: WHERE must be a conjunction of \
                 `column op value` comparisons (=, <>, <, <=, >, >=, BETWEEN)"
            ))),
        }
    }

    /// Key columns of an index in entry order (secondary: index columns,
    /// then primary key).
    fn key_columns(&self, index: IndexId) -> Vec<usize> {
        let mut cols = self.table.index_columns(index).to_vec();
        if index != IndexId::PRIMARY {
            cols.extend_from_slice(&self.table.primary_key);
        }
        cols
    }

    /// Picks the index whose key the equalities bind as the longest prefix
    /// (the primary key when they bind it fully), takes a range on the next
    /// key column, and leaves the rest as residual filters.
    fn predicate(&self, conj: Vec<Conj>) -> Result<Predicate> {
        let ncols = self.table.columns.len();
        let mut eq_of: Vec<Option<usize>> = vec![None; ncols];
        for (i, c) in conj.iter().enumerate() {
            if c.op == CmpOp::Eq && eq_of[c.column].is_none() {
                eq_of[c.column] = Some(i);
            }
        }
        let has_range_on = |col: usize| {
            conj.iter().any(|c| {
                c.column == col && matches!(c.op, CmpOp::Lt | CmpOp::LtEq | CmpOp::Gt | CmpOp::GtEq)
            })
        };
        let mut best: Option<(IndexId, Vec<usize>, usize, bool)> = None;
        for i in 0..=self.table.indexes.len() {
            let index = IndexId(i as u32);
            let keys = self.key_columns(index);
            let k = keys.iter().take_while(|&&c| eq_of[c].is_some()).count();
            let range = keys.get(k).is_some_and(|&c| has_range_on(c));
            if index == IndexId::PRIMARY && k == keys.len() {
                best = Some((index, keys, k, false));
                break;
            }
            // Prefix over the declared index columns only: a secondary
            // index that matches no index column is not useful.
            let useful = k > 0 || range;
            if !useful {
                continue;
            }
            let better = match &best {
                None => true,
                Some((_, _, bk, brange)) => (k, range) > (*bk, *brange),
            };
            if better {
                best = Some((index, keys, k, range));
            }
        }
        let (index, key_columns, k) = match best {
            Some((index, keys, k, _)) => (index, keys, k),
            None if conj.is_empty() => (IndexId::PRIMARY, self.key_columns(IndexId::PRIMARY), 0),
            None => {
                return Err(Error::Sql(format!(
                    "unsupported WHERE on `{}`: it must bind a prefix of the primary key \
                     ({}) or of a secondary index with `=`, optionally followed by a range \
                     on the next column",
                    self.table.name,
                    self.describe_index(IndexId::PRIMARY)
                )))
            }
        };
        let mut used = vec![false; conj.len()];
        let mut eq = Vec::with_capacity(k);
        for &c in &key_columns[..k] {
            if let Some(i) = eq_of[c] {
                used[i] = true;
                eq.push(conj[i].operand.clone());
            }
        }
        let mut lo = Bound::Unbounded;
        let mut hi = Bound::Unbounded;
        if let Some(&rc) = key_columns.get(k) {
            for (i, c) in conj.iter().enumerate() {
                if c.column != rc {
                    continue;
                }
                match c.op {
                    CmpOp::Gt | CmpOp::GtEq if matches!(lo, Bound::Unbounded) => {
                        lo = if c.op == CmpOp::Gt {
                            Bound::Excluded(c.operand.clone())
                        } else {
                            Bound::Included(c.operand.clone())
                        };
                        used[i] = true;
                    }
                    CmpOp::Lt | CmpOp::LtEq if matches!(hi, Bound::Unbounded) => {
                        hi = if c.op == CmpOp::Lt {
                            Bound::Excluded(c.operand.clone())
                        } else {
                            Bound::Included(c.operand.clone())
                        };
                        used[i] = true;
                    }
                    _ => {}
                }
            }
        }
        let filters = conj
            .into_iter()
            .zip(used)
            .filter(|(_, u)| !u)
            .map(|(c, _)| Filter {
                column: c.column,
                op: c.op,
                operand: c.operand,
            })
            .collect();
        let point = index == IndexId::PRIMARY && k == self.table.primary_key.len();
        Ok(Predicate {
            index,
            key_columns,
            eq,
            lo,
            hi,
            filters,
            point,
        })
    }

    fn describe_index(&self, index: IndexId) -> String {
        let names: Vec<&str> = self
            .key_columns(index)
            .iter()
            .map(|&c| self.table.columns[c].name.as_str())
            .collect();
        format!("{} ({})", self.table.index_name(index), names.join(", "))
    }

    fn where_predicate(&mut self, selection: Option<&Expr>) -> Result<Predicate> {
        let mut conj = Vec::new();
        if let Some(e) = selection {
            self.conjuncts(e, &mut conj)?;
        }
        self.predicate(conj)
    }

    fn finish(
        self,
        sql: &str,
        columns: Vec<String>,
        mut access: AccessDescriptor,
        mut statement: Statement,
    ) -> Plan {
        if !self.generated.is_empty() {
            let first = self.params.len();
            let mut renumber = |op: &mut Operand| {
                if let Operand::Param(i) = op {
                    if *i >= GENERATED {
                        *i = first + (*i - GENERATED);
                    }
                }
            };
            statement.for_each_operand_mut(&mut renumber);
            access.for_each_operand_mut(&mut renumber);
        }
        Plan {
            sql: Arc::from(sql),
            params: self.params,
            param_columns: self.param_columns,
            param_stored: self.param_stored,
            generated: self.generated,
            table_name: Arc::from(self.table.name.as_str()),
            columns: Arc::from(columns),
            access,
            statement,
        }
    }
}

/// True for the literal `NULL` (possibly parenthesized).
fn is_null_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Value(v) => matches!(v.value, ast::Value::Null),
        Expr::Nested(inner) => is_null_literal(inner),
        _ => false,
    }
}

fn sorted_unique(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

/// Columns a predicate observes beyond the primary key bound by it: the
/// residual filter columns, and every predicate column of a secondary index
/// (those columns are mutable, unlike primary-key columns).
fn predicate_reads(table: &TableDef, p: &Predicate) -> Vec<usize> {
    let mut cols: Vec<usize> = p.filters.iter().map(|f| f.column).collect();
    let range_col = if p.has_range() {
        p.key_columns.get(p.eq.len()).copied()
    } else {
        None
    };
    if p.index != IndexId::PRIMARY {
        cols.extend(p.key_columns[..p.eq.len()].iter().copied());
        cols.extend(range_col);
    }
    cols.retain(|c| {
        p.index != IndexId::PRIMARY || !table.primary_key.contains(c) || {
            // Residual filters on primary-key columns are still reads.
            p.filters.iter().any(|f| f.column == *c)
        }
    });
    cols
}

fn key_params(p: &Predicate) -> Vec<(usize, KeyBinding)> {
    let mut out: Vec<(usize, KeyBinding)> = Vec::with_capacity(p.eq.len());
    for (&c, op) in p.key_columns.iter().zip(&p.eq) {
        if !out.iter().any(|(k, _)| *k == c) {
            out.push((c, op.clone()));
        }
    }
    out
}

/// The operand that binds the partitioning column by equality anywhere in
/// the predicate (index prefix or residual filter).
fn partition_binding(table: &TableDef, p: &Predicate) -> Option<KeyBinding> {
    let pc = table.partition_column();
    p.key_columns
        .iter()
        .zip(&p.eq)
        .find(|(&c, _)| c == pc)
        .map(|(_, op)| op.clone())
        .or_else(|| {
            p.filters
                .iter()
                .find(|f| f.column == pc && f.op == CmpOp::Eq)
                .map(|f| f.operand.clone())
        })
}

fn base_access(table: &TableDef, kind: StatementKind, p: &Predicate) -> AccessDescriptor {
    AccessDescriptor {
        table: table.id,
        kind,
        index: p.index,
        columns_read: Vec::new(),
        columns_written: Vec::new(),
        key_params: key_params(p),
        range: !p.point,
        range_column: if p.has_range() {
            p.key_columns.get(p.eq.len()).copied()
        } else {
            None
        },
        blind_increment: false,
        partition_key: partition_binding(table, p),
    }
}

fn plan_select(catalog: &Catalog, sql: &str, q: &ast::Query) -> Result<Plan> {
    if q.with.is_some() || q.fetch.is_some() || !q.locks.is_empty() || !q.pipe_operators.is_empty()
    {
        return unsupported("WITH, FETCH, FOR UPDATE or pipe operators");
    }
    let AstSetExpr::Select(s) = q.body.as_ref() else {
        return unsupported("set operations, VALUES or nested queries as a statement");
    };
    if s.distinct.is_some() || s.top.is_some() || s.into.is_some() || s.having.is_some() {
        return unsupported("DISTINCT, TOP, INTO or HAVING");
    }
    match &s.group_by {
        GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty() => {}
        _ => return unsupported("GROUP BY"),
    }
    let [from] = s.from.as_slice() else {
        return unsupported("SELECT must read exactly one table (no joins, no FROM-less SELECT)");
    };
    let mut b = Builder::from_table_with_joins(catalog, from)?;
    let table = b.table;

    // Projection.
    let mut cols: Vec<usize> = Vec::new();
    let mut aggs: Vec<Aggregate> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for item in &s.projection {
        let (expr, alias) = match item {
            SelectItem::Wildcard(_) => {
                for (i, c) in table.columns.iter().enumerate() {
                    cols.push(i);
                    names.push(c.name.clone());
                }
                continue;
            }
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            other => return Err(Error::Sql(format!("unsupported select item `{other}`"))),
        };
        if let Some(c) = b.column(expr)? {
            cols.push(c);
            names.push(alias.unwrap_or_else(|| table.columns[c].name.clone()));
        } else if let Expr::Function(f) = expr {
            aggs.push(aggregate(&b, f)?);
            // PostgreSQL names an unaliased aggregate after its function.
            names.push(alias.unwrap_or_else(|| f.name.to_string().to_ascii_lowercase()));
        } else {
            return Err(Error::Sql(format!(
                "unsupported select item `{expr}`: only columns, * and MIN/MAX/SUM/COUNT"
            )));
        }
    }
    if !cols.is_empty() && !aggs.is_empty() {
        return unsupported("mixing columns and aggregates without GROUP BY");
    }

    let pred = b.where_predicate(s.selection.as_ref())?;

    // ORDER BY must follow the chosen index.
    let mut desc = false;
    let mut order_cols: Vec<usize> = Vec::new();
    if let Some(ob) = &q.order_by {
        let OrderByKind::Expressions(items) = &ob.kind else {
            return unsupported("ORDER BY ALL");
        };
        let eq_bound = &pred.key_columns[..pred.eq.len()];
        let mut dir: Option<bool> = None;
        for it in items {
            let c = b.require_column(&it.expr)?;
            if eq_bound.contains(&c) {
                continue; // constant within the scanned interval
            }
            let d = it.options.asc == Some(false);
            if dir.is_some_and(|x| x != d) {
                return unsupported("ORDER BY with mixed ASC/DESC (an index scans one way)");
            }
            dir = Some(d);
            order_cols.push(c);
        }
        desc = dir.unwrap_or(false);
        let mut rest: Vec<usize> = Vec::new();
        for &c in &pred.key_columns[pred.eq.len()..] {
            if !rest.contains(&c) && !eq_bound.contains(&c) {
                rest.push(c);
            }
        }
        if aggs.is_empty() && !rest.starts_with(&order_cols) {
            return Err(Error::Sql(format!(
                "unsupported: ORDER BY must follow the order of the index the WHERE clause \
                 uses, {}, after the columns fixed by `=`: expected a prefix of ({})",
                b.describe_index(pred.index),
                rest.iter()
                    .map(|&c| table.columns[c].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }

    let limit = match &q.limit_clause {
        None => None,
        Some(LimitClause::LimitOffset {
            limit: None,
            offset: None,
            limit_by,
        }) if limit_by.is_empty() => None,
        Some(LimitClause::LimitOffset {
            limit: Some(e),
            offset: None,
            limit_by,
        }) if limit_by.is_empty() => {
            let col = ColumnDef {
                name: "LIMIT".into(),
                ty: DataType::Int,
                nullable: false,
                default: None,
            };
            let op = b.typed_operand(e, col, false)?;
            if let Operand::Literal(_) = &op {
                // A negative literal is rejected now, not at every run.
                limit_value(&op, &[])?;
            }
            Some(op)
        }
        Some(_) => return unsupported("OFFSET"),
    };

    let mut access = base_access(table, StatementKind::Select, &pred);
    if access.partition_key.is_none() && matches!(limit, Some(Operand::Param(_))) {
        return unsupported(
            "LIMIT $parameter on a SELECT that runs on every partition (merging needs the \
             limit): use a literal LIMIT or bind the partitioning column",
        );
    }
    let visible = names.len();
    let mut sort_positions = Vec::new();
    // Broadcast results are re-sorted by `merge`, which needs the ORDER BY
    // columns in the output: add hidden ones when not projected.
    if access.partition_key.is_none() && aggs.is_empty() {
        for &c in &order_cols {
            let pos = match cols.iter().position(|&x| x == c) {
                Some(p) => p,
                None => {
                    cols.push(c);
                    cols.len() - 1
                }
            };
            sort_positions.push(pos);
        }
    }
    let mut read: Vec<usize> = cols[..visible.min(cols.len())].to_vec();
    read.extend(aggs.iter().filter_map(|a| a.column));
    read.extend(predicate_reads(table, &pred));
    access.columns_read = sorted_unique(read);
    let projection = if aggs.is_empty() {
        Projection::Columns(cols)
    } else {
        Projection::Aggregates(aggs)
    };
    let stmt = Statement::Select(SelectPlan {
        pred,
        projection,
        desc,
        sort_positions,
        visible,
        limit,
    });
    Ok(b.finish(sql, names, access, stmt))
}

fn aggregate(b: &Builder<'_>, f: &ast::Function) -> Result<Aggregate> {
    let name = object_name(&f.name)?.to_ascii_uppercase();
    let func = match name.as_str() {
        "COUNT" => AggFunc::Count,
        "SUM" => AggFunc::Sum,
        "MIN" => AggFunc::Min,
        "MAX" => AggFunc::Max,
        _ => {
            return Err(Error::Sql(format!(
                "unsupported function `{name}`: only MIN, MAX, SUM, COUNT"
            )))
        }
    };
    if f.over.is_some() || f.filter.is_some() {
        return unsupported("window functions and FILTER");
    }
    let FunctionArguments::List(list) = &f.args else {
        return Err(Error::Sql(format!("{name} takes one argument")));
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return unsupported("DISTINCT or clauses inside aggregates");
    }
    let [arg] = list.args.as_slice() else {
        return Err(Error::Sql(format!("{name} takes one argument")));
    };
    let column = match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Wildcard) if func == AggFunc::Count => None,
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(b.require_column(e)?),
        other => {
            return Err(Error::Sql(format!(
                "unsupported argument `{other}` of {name}"
            )))
        }
    };
    if func == AggFunc::Sum {
        if let Some(c) = column {
            if !matches!(
                b.table.columns[c].ty,
                DataType::Int | DataType::Decimal { .. }
            ) {
                return Err(Error::type_mismatch(
                    format!("SUM({})", b.table.columns[c].name),
                    "a numeric column",
                    b.table.columns[c].ty,
                ));
            }
        }
    }
    Ok(Aggregate { func, column })
}
