//! brine's SQL subset: schemas from DDL, statements to plans, and the access
//! descriptors static analysis reads.
//!
//! ```text
//!  DDL script --parse_schema--> Catalog (Arc, shared by everyone)
//!  SQL text ----prepare-------> Plan (Arc)   -- access() --> analysis
//!  args --------plan.bind-----> typed params -- route() ---> one partition
//!                                                            or broadcast
//!  partition: storage.lock_needs(plan, params) / execute(plan, params)
//!  coordinator: plan.merge(per-partition results) for broadcasts
//! ```
//!
//! # What it guarantees
//!
//! * Every statement `prepare` accepts runs as an index lookup or scan of one
//!   table: no plan ever needs a join, a sort of unbounded input, or a
//!   scan of a table without a key predicate unless it has no WHERE at all.
//!   Anything outside the subset is `Error::Sql` whose message starts with
//!   `unsupported` and names the construct (SQL that does not parse is
//!   `Error::Sql` too, without that word); unknown tables and columns are
//!   `Error::UnknownTable` / `Error::UnknownColumn`; literal type
//!   mismatches are `Error::Type`.
//! * A value that its column cannot hold is refused with the kind a
//!   PostgreSQL client tells apart, when planned (literals), bound
//!   (parameters) or stored (computed values): a NULL for a NOT NULL column
//!   is `Error::NotNull`, a string over `VARCHAR(n)` is `Error::TooLong`, a
//!   number over a DECIMAL's precision, a 64-bit integer, or arithmetic that
//!   overflows (SUM included, on one partition or in `Plan::merge`) is
//!   `Error::OutOfRange`; a column named twice in an INSERT is
//!   `Error::DuplicateColumn`.
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
//! A `DECIMAL(p,s)` holds `s` digits after the point and at most `p - s`
//! before it; what is stored is checked against both (`Error::OutOfRange`
//! past `p`), while an operand it is compared with or that is added to it
//! needs only its scale.
//!
//! **A unique index must include the partitioning column.** Each partition
//! checks uniqueness among its own rows; there is no index across
//! partitions, so two equal values on different partitions would both be
//! taken. `parse_schema` therefore refuses a `UNIQUE` constraint or a
//! `CREATE UNIQUE INDEX` whose columns leave out the table's partitioning
//! column (`Error::Schema` naming the table, the index and the column), as
//! PostgreSQL refuses it for partitioned tables and Citus for distributed
//! ones. With the column among them, equal values share a partition and
//! the check is complete: `UNIQUE (org, email)` on a table partitioned by
//! `org` is an e-mail unique within its organisation. A table that needs a
//! value unique across partitions makes it its own primary key (and
//! partitioning column), or keeps a plain index and guarantees uniqueness
//! where its rows are made.
//!
//! # Statements
//!
//! Parameters are `$name` (or `:name`), numbered in order of first
//! appearance; a parameter takes the type of the column it is compared
//! with, assigned to or inserted into (`c = c + $x`: `c`'s type). Only a
//! parameter stored in a nullable column may be NULL: one that is compared
//! could never match, and `c = c + $x` is a blind increment that commutes
//! with others and is undone by subtraction, which a NULL would break.
//! `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`, `now()` and `unique_rowid()` may
//! stand where a value goes: `Plan::bind` makes their values and appends
//! them after the parameters, so storage, replicas and logs see values.
//!
//! Literals: integers and decimals (a decimal with more fractional digits
//! than its column is a type error, not rounded), quoted strings, `NULL`;
//! for a `TIMESTAMP` column, a quoted time in PostgreSQL's text form
//! (`'2024-03-01 12:00:00[.ffffff]'`, UTC; `brine_core::timestamp`) or an
//! integer count of microseconds since 1970.
//!
//! * `SELECT cols | * | MIN/MAX/SUM/COUNT(col)/COUNT(*) FROM t [WHERE p]
//!   [ORDER BY key cols [ASC|DESC]] [LIMIT n | $p]` (LIMIT counts output
//!   rows, an aggregate's one row too: `LIMIT 0` returns none)
//! * `INSERT INTO t [(cols)] VALUES (...)` (missing columns take their
//!   DEFAULT, else NULL)
//! * `UPDATE t SET c = v | c = c +/-/* v, ... [WHERE p]` (not primary-key
//!   columns). `c = c op NULL` stores NULL, or is `Error::NotNull` for a NOT
//!   NULL column. A DECIMAL product is rounded half away from zero to the
//!   column's scale, as PostgreSQL stores a numeric.
//! * `DELETE FROM t [WHERE p]`
//!
//! `p` is a conjunction of `column op value` comparisons (`=`, `<>`, `<`,
//! `<=`, `>`, `>=`, `BETWEEN`; a comparison with a literal NULL is refused,
//! as it is never true). The planner picks the index whose key the
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
pub use planner::{prepare, prepare_all};
pub use result::QueryResult;

#[cfg(test)]
mod tests;
