//! Questions about the server, answered from brine's catalog: the queries
//! psql's `\dt` and `\d table` send to `pg_catalog`, their
//! `information_schema` equivalents, and the server's functions
//! (`version()`, `current_schema()`, ...).
//!
//! brine keeps no `pg_catalog` tables. A catalog query is read as
//! "project these columns from these catalog relations where these
//! equalities hold": the first relation in FROM names a virtual table
//! whose rows are built here (one per table for `pg_class`, one per
//! column for `pg_attribute`), each row holding every column psql reads
//! under its PostgreSQL name. A select item takes the row's value of the
//! column it names (or of its alias, for CASE and function expressions);
//! anything else is NULL. A relation brine has nothing for (`pg_index`,
//! `pg_constraint`, `pg_inherits`, ...) in an inner join yields no rows,
//! which is how psql learns there are no foreign keys or triggers.
//!
//! What it guarantees: the table list and a table's columns, as psql
//! shows them; every other catalog query gets a well-formed, possibly
//! empty, result rather than an error, so psql's `\d` completes. The one
//! exception is `pg_partitioned_table`, which gets an error (see
//! [`answer`]).

use std::collections::HashMap;

use brine_core::{DataType, TableDef, Value};
use sqlparser::ast::{self, BinaryOperator, Expr, JoinOperator, SelectItem, SetExpr, TableFactor};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::command::{literal, Context, Rows};
use crate::sqlstate::SqlError;

/// Object ids of tables: the first user oid, plus the table's id.
const TABLE_OID_BASE: i64 = 16_384;
/// `public`'s oid in PostgreSQL.
const PUBLIC_OID: i64 = 2_200;

/// True if `lower` (lowercased SQL) reads PostgreSQL's catalog.
pub fn is_catalog_query(lower: &str) -> bool {
    [
        "pg_catalog.",
        "information_schema.",
        "from pg_",
        "join pg_",
        ", pg_",
    ]
    .iter()
    .any(|m| lower.contains(m))
}

/// The server's own functions, as `SELECT f()` returns them.
pub fn server_function(name: &str, cx: &Context<'_>) -> Option<Value> {
    Some(match name {
        "version" => Value::str(&format!(
            "PostgreSQL {} (brine {}), a brine node speaking PostgreSQL's protocol",
            crate::SERVER_VERSION,
            env!("CARGO_PKG_VERSION")
        )),
        "current_schema" => Value::str("public"),
        "current_database" => Value::str(cx.database),
        "current_user" | "session_user" | "user" | "current_role" => Value::str(cx.user),
        "pg_backend_pid" => Value::Int(0),
        "pg_is_in_recovery" => Value::str("f"),
        _ => return None,
    })
}

/// The name a function call (or bare function keyword) is known by,
/// lowercased and without its schema.
pub fn function_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_ascii_lowercase()),
        Expr::Identifier(id) => Some(id.value.to_ascii_lowercase()),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => function_name(expr),
        _ => None,
    }
}

/// Answers a catalog query (see the module's documentation).
pub fn answer(text: &str, cx: &Context<'_>) -> Result<Rows, SqlError> {
    let unsupported = |why: &str| {
        SqlError::new(
            "0A000",
            format!(
                "brine answers catalog queries for tables and their columns only ({why}): `{text}`"
            ),
        )
    };
    // Declarative partitioning is asked about by clients that then shape
    // their work to it (pgbench reads pgbench_accounts' partitions). An
    // empty answer would say the table does not exist; an error is what
    // such clients take for "no partitioning" (PostgreSQL before 10).
    if text.to_ascii_lowercase().contains("pg_partitioned_table") {
        return Err(unsupported(
            "brine has no pg_partitioned_table: its tables are partitioned by the application's schema",
        ));
    }
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| unsupported(&format!("cannot parse it: {e}")))?;
    let Some(ast::Statement::Query(q)) = stmts.pop() else {
        return Err(unsupported("not a query"));
    };
    let mut selects = Vec::new();
    leaves(q.body.as_ref(), &mut selects);
    let Some((first, rest)) = selects.split_first() else {
        return Err(unsupported("not a SELECT"));
    };
    // A UNION's branches are answered one by one, their rows put together.
    let mut out = select(first, cx);
    for sel in rest {
        out.rows.extend(select(sel, cx).rows);
    }
    Ok(out)
}

/// The SELECTs of a query body, through UNIONs and parentheses.
fn leaves<'a>(body: &'a SetExpr, out: &mut Vec<&'a ast::Select>) {
    match body {
        SetExpr::Select(s) => out.push(s),
        SetExpr::SetOperation { left, right, .. } => {
            leaves(left, out);
            leaves(right, out);
        }
        SetExpr::Query(q) => leaves(q.body.as_ref(), out),
        _ => {}
    }
}

/// One SELECT of a catalog query.
fn select(sel: &ast::Select, cx: &Context<'_>) -> Rows {
    let Some(first) = sel.from.first() else {
        // A catalog function without FROM (`SELECT pg_catalog.x()`).
        return project(&sel.projection, &[Row::new()], cx);
    };
    let mut rows = match relation(&first.relation).as_deref() {
        Some("pg_class") | Some("tables") => tables(cx),
        Some("pg_attribute") | Some("columns") => columns(cx),
        Some("pg_namespace") | Some("schemata") => vec![namespace()],
        Some("pg_database") => vec![HashMap::from([
            ("datname".to_string(), Value::str(cx.database)),
            ("oid".to_string(), Value::Int(1)),
        ])],
        _ => Vec::new(),
    };
    // An inner join with a relation brine has no rows for is empty.
    let inner_others = sel.from.iter().skip(1).map(|t| &t.relation).chain(
        sel.from
            .iter()
            .flat_map(|t| &t.joins)
            .filter(|j| {
                !matches!(
                    j.join_operator,
                    JoinOperator::Left(_) | JoinOperator::LeftOuter(_)
                )
            })
            .map(|j| &j.relation),
    );
    for r in inner_others {
        if !matches!(
            relation(r).as_deref(),
            Some("pg_class" | "pg_namespace" | "pg_am" | "pg_attribute" | "pg_type")
        ) {
            rows.clear();
        }
    }
    if let Some(w) = &sel.selection {
        rows.retain(|row| matches_where(row, w));
    }
    project(&sel.projection, &rows, cx)
}

/// The last part of a FROM item's name, lowercased.
fn relation(t: &TableFactor) -> Option<String> {
    match t {
        TableFactor::Table { name, .. } => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_ascii_lowercase()),
        _ => None,
    }
}

type Row = HashMap<String, Value>;

fn b(v: bool) -> Value {
    Value::str(if v { "t" } else { "f" })
}

fn namespace() -> Row {
    HashMap::from([
        ("oid".to_string(), Value::Int(PUBLIC_OID)),
        ("nspname".to_string(), Value::str("public")),
        ("schema_name".to_string(), Value::str("public")),
    ])
}

fn table_oid(t: &TableDef) -> i64 {
    TABLE_OID_BASE + i64::from(t.id.0)
}

/// `pg_class` (joined with `pg_namespace` and `pg_am`) and
/// `information_schema.tables`: one row per table.
fn tables(cx: &Context<'_>) -> Vec<Row> {
    let mut defs: Vec<&TableDef> = cx.catalog.tables().iter().collect();
    defs.sort_by(|a, b| a.name.cmp(&b.name));
    defs.into_iter()
        .map(|t| {
            let mut row = namespace();
            for (k, v) in [
                ("oid", Value::Int(table_oid(t))),
                ("relname", Value::str(&t.name)),
                ("relkind", Value::str("r")),
                ("relnamespace", Value::Int(PUBLIC_OID)),
                ("relchecks", Value::Int(0)),
                ("relhasindex", b(true)),
                ("relhasrules", b(false)),
                ("relhastriggers", b(false)),
                ("relrowsecurity", b(false)),
                ("relforcerowsecurity", b(false)),
                ("relhasoids", b(false)),
                ("relispartition", b(false)),
                ("reltablespace", Value::Int(0)),
                ("relpersistence", Value::str("p")),
                ("relreplident", Value::str("d")),
                ("amname", Value::str("heap")),
                ("type", Value::str("table")),
                ("owner", Value::str(cx.user)),
                ("pg_get_userbyid", Value::str(cx.user)),
                ("table_catalog", Value::str(cx.database)),
                ("table_schema", Value::str("public")),
                ("table_name", Value::str(&t.name)),
                ("table_type", Value::str("BASE TABLE")),
            ] {
                row.insert(k.to_string(), v);
            }
            row
        })
        .collect()
}

/// `pg_attribute` and `information_schema.columns`: one row per column.
fn columns(cx: &Context<'_>) -> Vec<Row> {
    let mut out = Vec::new();
    for t in cx.catalog.tables() {
        for (i, c) in t.columns.iter().enumerate() {
            let (udt, pretty) = type_names(&c.ty);
            let mut row = Row::new();
            for (k, v) in [
                ("attrelid", Value::Int(table_oid(t))),
                ("attname", Value::str(&c.name)),
                ("attnum", Value::Int(i as i64 + 1)),
                ("format_type", Value::str(&pretty)),
                ("attnotnull", b(!c.nullable)),
                ("atthasdef", b(false)),
                ("attisdropped", b(false)),
                ("attidentity", Value::str("")),
                ("attgenerated", Value::str("")),
                ("table_catalog", Value::str(cx.database)),
                ("table_schema", Value::str("public")),
                ("table_name", Value::str(&t.name)),
                ("column_name", Value::str(&c.name)),
                ("ordinal_position", Value::Int(i as i64 + 1)),
                ("data_type", Value::str(&pretty)),
                ("udt_name", Value::str(udt)),
                (
                    "is_nullable",
                    Value::str(if c.nullable { "YES" } else { "NO" }),
                ),
            ] {
                row.insert(k.to_string(), v);
            }
            if let DataType::Str { max_len: Some(n) } = c.ty {
                row.insert("character_maximum_length".into(), Value::Int(i64::from(n)));
            }
            if let DataType::Decimal { precision, scale } = c.ty {
                row.insert("numeric_precision".into(), Value::Int(precision.into()));
                row.insert("numeric_scale".into(), Value::Int(scale.into()));
            }
            out.push(row);
        }
    }
    out
}

/// A column type's PostgreSQL type name and its `format_type` text.
fn type_names(ty: &DataType) -> (&'static str, String) {
    match ty {
        DataType::Int => ("int8", "bigint".into()),
        DataType::Decimal { precision, scale } => {
            ("numeric", format!("numeric({precision},{scale})"))
        }
        DataType::Str { max_len: Some(n) } => ("varchar", format!("character varying({n})")),
        DataType::Str { max_len: None } => ("text", "text".into()),
        DataType::Timestamp => ("timestamp", "timestamp without time zone".into()),
    }
}

/// The row's value of a column reference, lowercased, without its
/// table alias.
fn column_ref(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(id) => Some(id.value.to_ascii_lowercase()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.to_ascii_lowercase()),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => column_ref(expr),
        _ => None,
    }
}

/// Whether `row` satisfies the WHERE clause's conditions that brine
/// understands: `column = literal` (where the row has that column), a
/// relation-name pattern (psql's `relname OPERATOR(pg_catalog.~)
/// '^(name)$'`) and `relkind IN (...)`. Other conditions do not filter.
fn matches_where(row: &Row, w: &Expr) -> bool {
    match w {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => matches_where(row, left) && matches_where(row, right),
        Expr::Nested(inner) => matches_where(row, inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let (Some(col), Ok(Some(lit))) = (column_ref(left), literal(right)) else {
                return true;
            };
            match row.get(&col) {
                Some(v) => text_of(v) == text_of(&lit),
                None => true,
            }
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::PGCustomBinaryOperator(_) | BinaryOperator::PGRegexMatch,
            right,
        } => {
            let pattern = match right.as_ref() {
                Expr::Collate { expr, .. } => literal(expr),
                e => literal(e),
            };
            match (column_ref(left), pattern) {
                (Some(col), Ok(Some(Value::Str(p)))) => match row.get(&col) {
                    Some(v) => regex_match(&p, &text_of(v)),
                    None => true,
                },
                _ => true,
            }
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let Some(col) = column_ref(expr) else {
                return true;
            };
            let Some(v) = row.get(&col) else {
                return true;
            };
            let found = list
                .iter()
                .any(|e| matches!(literal(e), Ok(Some(l)) if text_of(&l) == text_of(v)));
            found != *negated
        }
        _ => true,
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Str(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Decimal(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// The anchored patterns psql makes of `\d` arguments: `^(name)$` with
/// `.*` for `*`, `.` for `?`, alternatives with `|`; case-sensitive as in
/// PostgreSQL (psql lowercases unquoted names).
fn regex_match(pattern: &str, s: &str) -> bool {
    let p = pattern.strip_prefix('^').unwrap_or(pattern);
    let p = p.strip_suffix('$').unwrap_or(p);
    let p = p
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or(p);
    p.split('|').any(|alt| glob(alt.as_bytes(), s.as_bytes()))
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p {
        [] => s.is_empty(),
        [b'.', b'*', rest @ ..] => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        [b'.', rest @ ..] => !s.is_empty() && glob(rest, &s[1..]),
        [b'\\', c, rest @ ..] => s.first() == Some(c) && glob(rest, &s[1..]),
        [c, rest @ ..] => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// The select list over `rows`; aggregates alone give one row.
fn project(items: &[SelectItem], rows: &[Row], cx: &Context<'_>) -> Rows {
    let null = Expr::Value(ast::Value::Null.into());
    let mut names = Vec::with_capacity(items.len());
    let mut exprs = Vec::with_capacity(items.len());
    for item in items {
        match item {
            SelectItem::UnnamedExpr(e) => {
                names.push(
                    column_ref(e)
                        .or_else(|| function_name(e))
                        .unwrap_or_else(|| "?column?".into()),
                );
                exprs.push((e, None));
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                names.push(alias.value.clone());
                exprs.push((expr, Some(alias.value.to_ascii_lowercase())));
            }
            _ => {
                names.push("?column?".into());
                exprs.push((&null, None));
            }
        }
    }
    let all_counts = !exprs.is_empty()
        && exprs
            .iter()
            .all(|(e, _)| function_name(e).as_deref() == Some("count"));
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    if all_counts {
        let n = Value::str(&rows.len().to_string());
        return Rows::text(&names_ref, vec![vec![n; exprs.len()]]);
    }
    let out = rows
        .iter()
        .map(|row| {
            exprs
                .iter()
                .map(|(e, alias)| value(e, alias.as_deref(), row, cx))
                .map(|v| match v {
                    Value::Null => Value::Null,
                    v => Value::str(&text_of(&v)),
                })
                .collect()
        })
        .collect();
    Rows::text(&names_ref, out)
}

fn value(e: &Expr, alias: Option<&str>, row: &Row, cx: &Context<'_>) -> Value {
    let by_alias = || alias.and_then(|a| row.get(a)).cloned();
    if let Ok(Some(v)) = literal(e) {
        return v;
    }
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => column_ref(e)
            .and_then(|c| row.get(&c).cloned())
            .or_else(by_alias)
            .unwrap_or(Value::Null),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => value(expr, alias, row, cx),
        Expr::Function(_) => by_alias()
            .or_else(|| function_name(e).and_then(|f| row.get(&f).cloned()))
            .or_else(|| function_name(e).and_then(|f| server_function(&f, cx)))
            .unwrap_or(Value::Null),
        _ => by_alias().unwrap_or(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> brine_core::Catalog {
        brine_sql::parse_schema(
            "CREATE TABLE account (id INT NOT NULL, owner VARCHAR(32), PRIMARY KEY (id));
             CREATE TABLE item (n INT NOT NULL, PRIMARY KEY (n));",
        )
        .unwrap()
    }

    fn ask(sql: &str) -> Rows {
        let c = cat();
        answer(
            sql,
            &Context {
                catalog: &c,
                user: "alice",
                database: "brine",
            },
        )
        .unwrap()
    }

    #[test]
    fn psql_table_list() {
        let r = ask("SELECT n.nspname as \"Schema\",
  c.relname as \"Name\",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' END as \"Type\",
  pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ('r','p','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;");
        let names: Vec<&str> = r.fields.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["Schema", "Name", "Type", "Owner"]);
        assert_eq!(
            r.rows,
            vec![
                vec![
                    Value::str("public"),
                    Value::str("account"),
                    Value::str("table"),
                    Value::str("alice")
                ],
                vec![
                    Value::str("public"),
                    Value::str("item"),
                    Value::str("table"),
                    Value::str("alice")
                ],
            ]
        );
        let views = ask("SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind IN ('v','m')");
        assert!(views.rows.is_empty());
    }

    #[test]
    fn psql_describe_finds_the_table_then_its_columns() {
        let r = ask("SELECT c.oid,
  n.nspname,
  c.relname
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.~) '^(account)$' COLLATE pg_catalog.default
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 2, 3;");
        assert_eq!(
            r.rows,
            vec![vec![
                Value::str("16384"),
                Value::str("public"),
                Value::str("account")
            ]]
        );
        let r = ask("SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '16384' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;");
        assert_eq!(
            r.rows,
            vec![
                vec![
                    Value::str("id"),
                    Value::str("bigint"),
                    Value::Null,
                    Value::str("t")
                ],
                vec![
                    Value::str("owner"),
                    Value::str("character varying(32)"),
                    Value::Null,
                    Value::str("f")
                ],
            ]
        );
    }

    #[test]
    fn relations_brine_lacks_join_to_nothing() {
        let r = ask(
            "SELECT c2.relname, i.indisprimary FROM pg_catalog.pg_class c, pg_catalog.pg_class c2, pg_catalog.pg_index i
             WHERE c.oid = '16384' AND c.oid = i.indrelid AND i.indexrelid = c2.oid",
        );
        assert!(r.rows.is_empty());
        assert_eq!(r.fields.len(), 2);
        let r =
            ask("SELECT pg_catalog.count(*) FROM pg_catalog.pg_inherits WHERE inhparent = '16384'");
        assert_eq!(r.rows, vec![vec![Value::str("0")]]);
    }

    #[test]
    fn unions_answer_each_branch() {
        let r = ask("SELECT pubname, NULL, NULL FROM pg_catalog.pg_publication p
             WHERE p.puballtables AND pg_catalog.pg_relation_is_publishable('16384')
             UNION
             SELECT c.relname, NULL, NULL FROM pg_catalog.pg_class c WHERE c.oid = '16385'
             ORDER BY 1");
        assert_eq!(r.fields.len(), 3);
        assert_eq!(
            r.rows,
            vec![vec![Value::str("item"), Value::Null, Value::Null]]
        );
    }

    #[test]
    fn psql_patterns() {
        assert!(regex_match("^(acc.*)$", "account"));
        assert!(!regex_match("^(acc)$", "account"));
        assert!(regex_match("^(item|account)$", "account"));
    }
}
