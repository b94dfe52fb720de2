//! brine's SQL subset: schemas from DDL, statements to plans, and the access
//! descriptors static analysis reads.
//!
//! ```text
//!  DDL script --parse_schema--> Catalog (Arc, shared by everyone)
//!  SQL text ----prepare-------> Plan (Arc)   -- access() --> analysis
//!  args --------plan.bind-----> typed params -- route() ---> one partition
//!                                                            or broadcast
//!  partition: storage.lock_needs(plan, params) / execute(plan, params)
//!  coordinator: plan.merge(params, per-partition results) for broadcasts
//! ```
//!
//! # What it guarantees
//!
//! * Every statement `prepare` accepts runs as an index lookup or scan of one
//!   table: no plan ever needs a join, a sort of unbounded input, or a
//!   scan of a table without a key predicate unless it has no WHERE at all.
//!   Anything outside the subset is `Error::Sql` naming the unsupported
//!   construct; unknown tables and columns are `Error::UnknownTable` /
//!   `Error::UnknownColumn`; literal type mismatches are `Error::Type`.
//! * Parameters are typed at prepare time; `Plan::bind` checks arity
//!   (`Error::Arity`) and types (`Error::Type` naming the parameter) and
//!   coerces exactly (INT -> DECIMAL). Storage relies on bound parameters.
//! * The access descriptor is complete: every column a statement observes
//!   or stores, and every key column bound by equality, is listed.
//! * Routing is static per plan: a plan whose predicate (or INSERT) binds the
//!   table's partitioning column by equality always routes to one partition,
//!   otherwise it always broadcasts, and its results must go through
//!   `Plan::merge`.
//!
//! # DDL
//!
//! `CREATE TABLE` with column types `INT/INTEGER/BIGINT/SMALLINT` (Int),
//! `DECIMAL(p,s)/NUMERIC(p,s)` (p <= 18), `VARCHAR(n)/CHAR(n)/TEXT` (Str),
//! `TIMESTAMP`; `NOT NULL`; `PRIMARY KEY` as a column option or a table
//! constraint (primary-key columns are NOT NULL); `UNIQUE` (becomes a unique
//! secondary index); `DEFAULT` a literal, `CURRENT_TIMESTAMP` / `now()` or
//! `unique_rowid()` (see `brine_core::rowid`), stored when an INSERT leaves
//! the column out. The partitioning column is given by a trailing
//! `PARTITION BY (col)` (or `PARTITION BY col`), or by
//! `WITH (partition_by = 'col')`; it must be a primary-key column and
//! defaults to the first one. `CREATE [UNIQUE] INDEX name ON t (c1, ...)`
//! adds a secondary index (`IndexId(1)` is the first).
//!
//! # Statements
//!
//! Parameters are `$name` (or `:name`), numbered in order of first
//! appearance; a parameter takes the type of the column it is compared
//! with, assigned to or inserted into (`c = c + $x`: `c`'s type).
//! `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`, `now()` and `unique_rowid()` may
//! stand where a value goes: `Plan::bind` makes their values and appends
//! them after the parameters, so storage, replicas and logs see values.
//!
//! * `SELECT cols | * | MIN/MAX/SUM/COUNT(col)/COUNT(*) FROM t [WHERE p]
//!   [ORDER BY key cols [ASC|DESC]] [LIMIT n | $p]`
//! * `INSERT INTO t [(cols)] VALUES (...)` (missing columns take their
//!   DEFAULT, else NULL)
//! * `UPDATE t SET c = v | c = c +/-/* v, ... [WHERE p]` (not primary-key
//!   columns)
//! * `DELETE FROM t [WHERE p]`
//!
//! `p` is a conjunction of `column op value` comparisons (`=`, `<>`, `<`,
//! `<=`, `>`, `>=`, `BETWEEN`). The planner picks the index whose key the
//! `=` comparisons bind as the longest prefix (the primary key when they bind
//! all of it), takes `<`/`<=`/`>`/`>=`/`BETWEEN` on the next key column as
//! the scanned range, and evaluates every other comparison as a residual
//! filter on the rows the scan yields. A WHERE that binds no index prefix
//! is an error (it would be a hidden full scan). ORDER BY must name the
//! index's key columns after those fixed by `=`, in order, all ASC or all
//! DESC.

mod ddl;
mod literal;
mod plan;
mod planner;
mod result;

pub use ddl::parse_schema;
pub use plan::{
    arith, limit_value, merge_agg, AccessDescriptor, AggFunc, Aggregate, ArithOp, Assignment,
    CmpOp, DeletePlan, Filter, InsertPlan, KeyBinding, Operand, Param, Plan, Predicate, Projection,
    Route, SelectPlan, SetExpr, Statement, StatementKind, UpdatePlan,
};
pub use planner::prepare;
pub use result::QueryResult;

#[cfg(test)]
mod tests;
