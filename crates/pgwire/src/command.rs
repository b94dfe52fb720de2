//! What a client's SQL text asks for: a statement of brine's SQL subset, a
//! transaction boundary, a session setting, a procedure call, or a
//! question about the server that is answered here (the catalog, version,
//! constants).
//!
//! ```text
//!  query text --split--> statements --classify--> Command
//!    BEGIN / START TRANSACTION, COMMIT / END, ROLLBACK / ABORT
//!    SET, RESET, DISCARD, SHOW
//!    CALL proc(literal | $n, ...)
//!    SELECT without FROM, pg_catalog / information_schema queries -> Rows
//!    anything else -> brine_sql::prepare -> Statement (a Plan)
//! ```
//!
//! Classifying never touches the cluster; a statement's plan is prepared
//! here so that its parameters and result columns can be described before
//! it runs (the extended protocol's Describe).

use std::sync::Arc;

use brine_cluster::Isolation;
use brine_core::{Catalog, Value};
use brine_sql::{Plan, Projection, Statement as PlanStatement};
use pgwire::api::Type;
use sqlparser::ast::{self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::catalog;
use crate::sqlstate::SqlError;
use crate::values::pg_type;

/// At most this many statements in one simple-protocol query string.
pub const STATEMENTS_PER_QUERY_MAX: usize = 1_000;
/// At most this many parameters (`$1` .. `$n`) in one statement.
pub const PARAMS_MAX: usize = 1_000;

/// A result computed without the cluster: column names and types, rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub fields: Vec<(String, Type)>,
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    /// Text columns named `names`, holding `rows`.
    pub fn text(names: &[&str], rows: Vec<Vec<Value>>) -> Rows {
        Rows {
            fields: names.iter().map(|n| (n.to_string(), Type::TEXT)).collect(),
            rows,
        }
    }
}

/// One argument of a CALL.
#[derive(Clone, Debug, PartialEq)]
pub enum CallArg {
    Literal(Value),
    /// `$n`, zero-based.
    Param(usize),
}

/// One classified statement.
#[derive(Clone, Debug)]
pub enum Command {
    /// Nothing but whitespace, comments or semicolons.
    Empty,
    /// BEGIN / START TRANSACTION, with the isolation level asked for.
    Begin {
        isolation: Option<Isolation>,
    },
    Commit,
    Rollback,
    /// SET TRANSACTION ISOLATION LEVEL (or the session's default).
    SetIsolation {
        isolation: Option<Isolation>,
    },
    Set {
        name: String,
        value: String,
    },
    /// RESET name; `None` is RESET ALL (and DISCARD).
    Reset {
        name: Option<String>,
    },
    Show {
        name: String,
    },
    Call {
        procedure: String,
        args: Vec<CallArg>,
    },
    /// DEALLOCATE [PREPARE] name | ALL (`None`): the connection's prepared
    /// statements, forgotten (the handler holds them).
    Deallocate {
        name: Option<String>,
    },
    /// Answered without the cluster.
    Rows(Arc<Rows>),
    /// A statement of brine's SQL subset. `order[i]` is the PostgreSQL
    /// parameter (`$order[i]+1`) that binds the plan's parameter `i`.
    Statement {
        plan: Arc<Plan>,
        order: Vec<usize>,
    },
    /// `INSERT ... VALUES (...), (...)`: one single-row statement per row,
    /// run in one transaction (brine's plans insert one row each).
    InsertRows(Vec<Prepared>),
}

/// A prepared statement of brine's subset with its parameter order (see
/// `Command::Statement`).
pub type Prepared = (Arc<Plan>, Vec<usize>);

impl Command {
    /// The number of `$n` parameters the client binds (the highest n).
    pub fn param_count(&self) -> usize {
        match self {
            Command::Statement { order, .. } => order.iter().map(|&i| i + 1).max().unwrap_or(0),
            Command::InsertRows(rows) => rows
                .iter()
                .flat_map(|(_, order)| order.iter().map(|&i| i + 1))
                .max()
                .unwrap_or(0),
            Command::Call { args, .. } => args
                .iter()
                .filter_map(|a| match a {
                    CallArg::Param(i) => Some(i + 1),
                    CallArg::Literal(_) => None,
                })
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// The parameters' types as the server infers them, by position; text
    /// where nothing says (an unused `$n`, a CALL argument).
    pub fn param_types(&self) -> Vec<Type> {
        let mut types = vec![Type::TEXT; self.param_count()];
        for (plan, order) in self.statements() {
            for (p, &at) in plan.params().iter().zip(order) {
                types[at] = pg_type(&p.ty);
            }
        }
        types
    }

    /// The prepared statements the command runs, each with its parameter
    /// order.
    pub fn statements(&self) -> impl Iterator<Item = (&Arc<Plan>, &[usize])> {
        let (one, rows) = match self {
            Command::Statement { plan, order } => (Some((plan, order.as_slice())), &[][..]),
            Command::InsertRows(rows) => (None, rows.as_slice()),
            _ => (None, &[][..]),
        };
        one.into_iter()
            .chain(rows.iter().map(|(p, o)| (p, o.as_slice())))
    }
}

/// What classification may read: the schema, and who is connected.
pub struct Context<'a> {
    pub catalog: &'a Catalog,
    pub user: &'a str,
    pub database: &'a str,
}

/// Splits a query string at its top-level semicolons (not those inside
/// quotes, dollar quotes or comments). Empty pieces are dropped.
pub fn split(sql: &str) -> Result<Vec<&str>, SqlError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        // A doubled quote is an escaped one.
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'$' => {
                // $tag$ ... $tag$ (a parameter `$1` has no closing `$`).
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
                    .map(|p| i + 1 + p);
                match tag_end {
                    Some(e)
                        if b[e] == b'$' && !b[i + 1..e].first().is_some_and(u8::is_ascii_digit) =>
                    {
                        let tag = &b[i..=e];
                        let body = e + 1;
                        i = b[body..]
                            .windows(tag.len())
                            .position(|w| w == tag)
                            .map_or(b.len(), |p| body + p + tag.len());
                    }
                    _ => i += 1,
                }
            }
            b';' => {
                out.push(&sql[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push(&sql[start.min(sql.len())..]);
    out.retain(|s| !is_blank(s));
    if out.len() > STATEMENTS_PER_QUERY_MAX {
        return Err(SqlError::new(
            "54000",
            format!(
                "{} statements in one query (at most {STATEMENTS_PER_QUERY_MAX})",
                out.len()
            ),
        ));
    }
    Ok(out)
}

/// True if `sql` holds no statement: whitespace, comments, semicolons.
pub fn is_blank(sql: &str) -> bool {
    strip_comments(sql)
        .trim()
        .trim_matches(';')
        .trim()
        .is_empty()
}

fn strip_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    loop {
        let line = rest.find("--");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Classifies one statement (one piece of [`split`]).
pub fn classify(sql: &str, cx: &Context<'_>) -> Result<Command, SqlError> {
    let text = strip_comments(sql);
    let text = text.trim().trim_end_matches(';').trim();
    if text.is_empty() {
        return Ok(Command::Empty);
    }
    let lower = text.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == '=')
        .filter(|w| !w.is_empty())
        .collect();
    match words.as_slice() {
        ["begin", ..] | ["start", "transaction", ..] => Ok(Command::Begin {
            isolation: isolation_in(&words)?,
        }),
        ["commit", ..] | ["end", ..] => Ok(Command::Commit),
        ["rollback", "to", ..] | ["savepoint", ..] | ["release", ..] => Err(SqlError::new(
            "0A000",
            "savepoints are not supported by brine",
        )),
        ["rollback", ..] | ["abort", ..] => Ok(Command::Rollback),
        ["set", "transaction", ..]
        | ["set", "session", "characteristics", ..]
        | ["set", "session", "transaction", ..]
        | ["set", "local", "transaction", ..] => Ok(Command::SetIsolation {
            isolation: isolation_in(&words)?,
        }),
        ["set", ..] => set(text),
        ["reset", "all"] | ["discard", ..] => Ok(Command::Reset { name: None }),
        ["reset", name] => Ok(Command::Reset {
            name: Some(name.to_string()),
        }),
        ["show", "transaction", "isolation", "level"] => Ok(Command::Show {
            name: "transaction_isolation".into(),
        }),
        ["show", name] => Ok(Command::Show {
            name: name.trim_matches('"').to_string(),
        }),
        ["call", ..] => call(text),
        ["deallocate", "all"] | ["deallocate", "prepare", "all"] => {
            Ok(Command::Deallocate { name: None })
        }
        ["deallocate", name] | ["deallocate", "prepare", name] => Ok(Command::Deallocate {
            name: Some(name.trim_matches('"').to_string()),
        }),
        _ if catalog::is_catalog_query(&lower) => {
            Ok(Command::Rows(Arc::new(catalog::answer(text, cx)?)))
        }
        ["select", ..] if !lower.contains(" from ") && !lower.contains("\nfrom") => {
            Ok(Command::Rows(Arc::new(constants(text, cx)?)))
        }
        _ => statement(text, cx.catalog),
    }
}

/// The isolation level named after `ISOLATION LEVEL` among `words`.
fn isolation_in(words: &[&str]) -> Result<Option<Isolation>, SqlError> {
    let Some(at) = words
        .windows(2)
        .position(|w| w == ["isolation", "level"])
        .map(|p| p + 2)
    else {
        return Ok(None);
    };
    match (words.get(at).copied(), words.get(at + 1).copied()) {
        (Some("serializable"), _) | (Some("repeatable"), Some("read")) => {
            Ok(Some(Isolation::Serializable))
        }
        (Some("read"), Some("committed" | "uncommitted")) => Ok(Some(Isolation::ReadCommitted)),
        _ => Err(SqlError::new(
            "42601",
            "expected SERIALIZABLE, REPEATABLE READ, READ COMMITTED or READ UNCOMMITTED after ISOLATION LEVEL",
        )),
    }
}

/// `SET [SESSION | LOCAL] name {TO | =} value`, `SET TIME ZONE value`,
/// `SET NAMES value`.
fn set(text: &str) -> Result<Command, SqlError> {
    let rest = text[3..].trim_start();
    let rest = strip_word(rest, "session")
        .or_else(|| strip_word(rest, "local"))
        .unwrap_or(rest);
    let (name, value) = if let Some(v) = strip_word(rest, "time") {
        let v = strip_word(v, "zone").ok_or_else(|| set_syntax(text))?;
        ("timezone".to_string(), v)
    } else if let Some(v) = strip_word(rest, "names") {
        ("client_encoding".to_string(), v)
    } else {
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .ok_or_else(|| set_syntax(text))?;
        let name = rest[..end].trim_matches('"').to_ascii_lowercase();
        let v = rest[end..].trim_start();
        let v = v
            .strip_prefix('=')
            .or_else(|| strip_word(v, "to"))
            .ok_or_else(|| set_syntax(text))?;
        (name, v)
    };
    let value = value
        .split(',')
        .map(|p| p.trim().trim_matches('\'').trim_matches('"'))
        .collect::<Vec<_>>()
        .join(", ");
    if name.is_empty() || value.is_empty() {
        return Err(set_syntax(text));
    }
    Ok(Command::Set { name, value })
}

fn strip_word<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let head = s.get(..word.len())?;
    let tail = &s[word.len()..];
    (head.eq_ignore_ascii_case(word) && tail.starts_with(char::is_whitespace))
        .then(|| tail.trim_start())
}

fn set_syntax(text: &str) -> SqlError {
    SqlError::new(
        "42601",
        format!("expected SET name TO value (or = value): `{text}`"),
    )
}

fn parse_pg(text: &str) -> Result<ast::Statement, SqlError> {
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| SqlError::new("42601", format!("cannot parse `{text}`: {e}")))?;
    if stmts.len() != 1 {
        return Err(SqlError::new(
            "42601",
            "cannot insert multiple commands into a prepared statement",
        ));
    }
    Ok(stmts.remove(0))
}

/// `CALL procedure(arg, ...)`: literals and `$n` parameters.
fn call(text: &str) -> Result<Command, SqlError> {
    let ast::Statement::Call(f) = parse_pg(text)? else {
        return Err(SqlError::new(
            "42601",
            format!("expected CALL procedure(...): `{text}`"),
        ));
    };
    let procedure = match f.name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(id)] => id.value.clone(),
        _ => {
            return Err(SqlError::new(
                "42601",
                format!("procedure names are not qualified: `{}`", f.name),
            ))
        }
    };
    let list = match &f.args {
        FunctionArguments::None => Vec::new(),
        FunctionArguments::List(l) if l.clauses.is_empty() && l.duplicate_treatment.is_none() => {
            l.args.clone()
        }
        other => {
            return Err(SqlError::new(
                "0A000",
                format!("unsupported CALL arguments `{other}`"),
            ))
        }
    };
    let mut args = Vec::with_capacity(list.len());
    for a in &list {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a else {
            return Err(SqlError::new(
                "0A000",
                format!("CALL takes positional arguments, not `{a}`"),
            ));
        };
        args.push(call_arg(e)?);
    }
    Ok(Command::Call { procedure, args })
}

fn call_arg(e: &Expr) -> Result<CallArg, SqlError> {
    if let Some(n) = param_number(e)? {
        return Ok(CallArg::Param(n));
    }
    match literal(e)? {
        Some(v) => Ok(CallArg::Literal(v)),
        None => Err(SqlError::new(
            "0A000",
            format!("CALL arguments are literals or $n parameters, not `{e}`"),
        )),
    }
}

/// `$n` as the zero-based n - 1.
fn param_number(e: &Expr) -> Result<Option<usize>, SqlError> {
    let Expr::Value(v) = e else {
        return Ok(None);
    };
    let ast::Value::Placeholder(p) = &v.value else {
        return Ok(None);
    };
    pg_param(p.strip_prefix('$').unwrap_or(p)).map(Some)
}

/// A parameter name as brine's planner reports it (`1` for `$1`), as a
/// zero-based position.
fn pg_param(name: &str) -> Result<usize, SqlError> {
    match name.parse::<usize>() {
        Ok(n) if (1..=PARAMS_MAX).contains(&n) => Ok(n - 1),
        _ => Err(SqlError::new(
            "42601",
            format!("parameter `${name}`: over PostgreSQL's protocol parameters are $1 .. ${PARAMS_MAX}"),
        )),
    }
}

/// A literal as a brine value: integers, decimals (with a point),
/// strings, NULL, and booleans (as the text `t` / `f`).
pub(crate) fn literal(e: &Expr) -> Result<Option<Value>, SqlError> {
    let number = |s: &str, neg: bool| -> Result<Value, SqlError> {
        let bad = || SqlError::new("22003", format!("number `{s}` is out of brine's range"));
        let s = if neg { format!("-{s}") } else { s.to_string() };
        if s.contains('.') {
            brine_core::Decimal::parse(&s)
                .map(Value::Decimal)
                .ok_or_else(bad)
        } else {
            s.parse::<i64>().map(Value::Int).map_err(|_| bad())
        }
    };
    Ok(match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(s, _) => Some(number(s, false)?),
            ast::Value::SingleQuotedString(s) | ast::Value::EscapedStringLiteral(s) => {
                Some(Value::str(s))
            }
            ast::Value::Boolean(b) => Some(Value::str(if *b { "t" } else { "f" })),
            ast::Value::Null => Some(Value::Null),
            _ => None,
        },
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                ast::Value::Number(s, _) => Some(number(s, true)?),
                _ => None,
            },
            _ => None,
        },
        Expr::Nested(inner) => literal(inner)?,
        _ => None,
    })
}

/// `SELECT` without `FROM`: constants and the server's own functions
/// (`version()`, `current_schema()`, ...), as drivers and pools send them
/// (`SELECT 1` as a health check).
fn constants(text: &str, cx: &Context<'_>) -> Result<Rows, SqlError> {
    let stmt = parse_pg(text)?;
    let unsupported = || {
        SqlError::new(
            "0A000",
            format!("brine answers SELECT without FROM only for constants and the server's functions (version(), current_schema(), ...): `{text}`"),
        )
    };
    let ast::Statement::Query(q) = stmt else {
        return Err(unsupported());
    };
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return Err(unsupported());
    };
    let mut rows = Rows::default();
    let mut row = Vec::new();
    for item in &sel.projection {
        let (expr, alias) = match item {
            ast::SelectItem::UnnamedExpr(e) => (e, None),
            ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            _ => return Err(unsupported()),
        };
        let (name, value) = if let Some(v) = literal(expr)? {
            ("?column?".to_string(), v)
        } else {
            let name = catalog::function_name(expr).ok_or_else(unsupported)?;
            let v = catalog::server_function(&name, cx).ok_or_else(unsupported)?;
            (name, v)
        };
        let ty = match &value {
            Value::Int(_) => Type::INT8,
            Value::Decimal(_) => Type::NUMERIC,
            _ => Type::TEXT,
        };
        rows.fields.push((alias.unwrap_or(name), ty));
        row.push(value);
    }
    rows.rows.push(row);
    Ok(rows)
}

/// A statement of brine's subset, prepared, with its parameters mapped to
/// PostgreSQL's `$n`; a multi-row INSERT as its single-row statements.
fn statement(text: &str, catalog: &Catalog) -> Result<Command, SqlError> {
    let mut prepared = brine_sql::prepare_all(catalog, text)?
        .into_iter()
        .map(|plan| {
            let order = plan
                .params()
                .iter()
                .map(|p| pg_param(&p.name))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Arc::new(plan), order))
        })
        .collect::<Result<Vec<Prepared>, SqlError>>()?;
    Ok(match prepared.len() {
        1 => {
            let (plan, order) = prepared.remove(0);
            Command::Statement { plan, order }
        }
        _ => Command::InsertRows(prepared),
    })
}

/// The result columns of a prepared statement, with PostgreSQL types:
/// the projected columns' types; COUNT is int8, SUM/MIN/MAX take their
/// column's type.
pub fn result_fields(plan: &Plan, catalog: &Catalog) -> Vec<(String, Type)> {
    let PlanStatement::Select(sel) = plan.statement() else {
        return Vec::new();
    };
    let Some(table) = catalog.tables().iter().find(|t| t.id == plan.table()) else {
        return Vec::new();
    };
    let col_type = |c: usize| {
        table
            .columns
            .get(c)
            .map_or(Type::TEXT, |col| pg_type(&col.ty))
    };
    let types: Vec<Type> = match &sel.projection {
        Projection::Columns(cols) => cols.iter().map(|&c| col_type(c)).collect(),
        Projection::Aggregates(aggs) => aggs
            .iter()
            .map(|a| match (a.func, a.column) {
                (brine_sql::AggFunc::Count, _) | (_, None) => Type::INT8,
                (_, Some(c)) => col_type(c),
            })
            .collect(),
    };
    plan.columns()
        .iter()
        .zip(types)
        .take(sel.visible)
        .map(|(n, t)| (n.clone(), t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        brine_sql::parse_schema(
            "CREATE TABLE account (id INT NOT NULL, owner VARCHAR(32), balance DECIMAL(12,2) NOT NULL, PRIMARY KEY (id));",
        )
        .expect("schema")
    }

    fn cls(sql: &str) -> Result<Command, SqlError> {
        let cat = catalog();
        classify(
            sql,
            &Context {
                catalog: &cat,
                user: "u",
                database: "d",
            },
        )
    }

    #[test]
    fn splits_at_top_level_semicolons_only() {
        let parts = split("SELECT 'a;b'; -- c;d\nSELECT $$x;y$$; /* ; */ ;SELECT $1").unwrap();
        assert_eq!(
            parts,
            vec![
                "SELECT 'a;b'",
                " -- c;d\nSELECT $$x;y$$",
                " /* ; */ ",
                "SELECT $1"
            ]
            .into_iter()
            .filter(|s| !is_blank(s))
            .collect::<Vec<_>>()
        );
        assert!(split(" ; ;").unwrap().is_empty());
    }

    #[test]
    fn transaction_control() {
        assert!(matches!(
            cls("BEGIN").unwrap(),
            Command::Begin { isolation: None }
        ));
        assert!(matches!(
            cls("start transaction isolation level read committed, read write").unwrap(),
            Command::Begin {
                isolation: Some(Isolation::ReadCommitted)
            }
        ));
        assert!(matches!(
            cls("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap(),
            Command::Begin {
                isolation: Some(Isolation::Serializable)
            }
        ));
        assert!(matches!(cls("commit;").unwrap(), Command::Commit));
        assert!(matches!(cls("END").unwrap(), Command::Commit));
        assert!(matches!(cls("ROLLBACK").unwrap(), Command::Rollback));
        assert_eq!(cls("SAVEPOINT a").unwrap_err().code, "0A000");
    }

    #[test]
    fn settings() {
        let Command::Set { name, value } = cls("SET application_name = 'x y'").unwrap() else {
            panic!("a SET");
        };
        assert_eq!((name.as_str(), value.as_str()), ("application_name", "x y"));
        let Command::Set { name, value } = cls("set time zone 'UTC'").unwrap() else {
            panic!("a SET");
        };
        assert_eq!((name.as_str(), value.as_str()), ("timezone", "UTC"));
        assert!(matches!(
            cls("SHOW TRANSACTION ISOLATION LEVEL").unwrap(),
            Command::Show { name } if name == "transaction_isolation"
        ));
        assert_eq!(cls("SET x").unwrap_err().code, "42601");
    }

    #[test]
    fn calls_take_literals_and_parameters() {
        let Command::Call { procedure, args } = cls("CALL transfer(1, $2, -3.50, 'x')").unwrap()
        else {
            panic!("a CALL");
        };
        assert_eq!(procedure, "transfer");
        assert_eq!(
            args,
            vec![
                CallArg::Literal(Value::Int(1)),
                CallArg::Param(1),
                CallArg::Literal(Value::Decimal(brine_core::Decimal::new(-350, 2))),
                CallArg::Literal(Value::str("x")),
            ]
        );
        assert_eq!(cls("CALL p(1 + 2)").unwrap_err().code, "0A000");
    }

    #[test]
    fn statements_map_parameters_by_number() {
        let cmd = cls("UPDATE account SET balance = $2 WHERE id = $1").unwrap();
        let Command::Statement { order, .. } = &cmd else {
            panic!("a statement");
        };
        assert_eq!(order, &vec![1, 0]);
        assert_eq!(cmd.param_types(), vec![Type::INT8, Type::NUMERIC]);
        assert_eq!(
            cls("SELECT * FROM nope WHERE id = 1").unwrap_err().code,
            "42P01"
        );
        assert_eq!(cls("SELEC 1 FROM account").unwrap_err().code, "42601");
        assert_eq!(
            cls("SELECT id FROM account WHERE id = $x")
                .unwrap_err()
                .code,
            "42601"
        );
    }

    #[test]
    fn result_columns_have_postgres_types() {
        let cat = catalog();
        let plan = brine_sql::prepare(&cat, "SELECT id, owner, balance FROM account WHERE id = $1")
            .unwrap();
        assert_eq!(
            result_fields(&plan, &cat),
            vec![
                ("id".to_string(), Type::INT8),
                ("owner".to_string(), Type::VARCHAR),
                ("balance".to_string(), Type::NUMERIC)
            ]
        );
        let plan = brine_sql::prepare(&cat, "SELECT COUNT(*), SUM(balance) FROM account").unwrap();
        let types: Vec<Type> = result_fields(&plan, &cat)
            .into_iter()
            .map(|f| f.1)
            .collect();
        assert_eq!(types, vec![Type::INT8, Type::NUMERIC]);
    }

    #[test]
    fn constants_and_server_functions() {
        let Command::Rows(rows) = cls("SELECT 1").unwrap() else {
            panic!("rows");
        };
        assert_eq!(rows.rows, vec![vec![Value::Int(1)]]);
        let Command::Rows(rows) = cls("select version()").unwrap() else {
            panic!("rows");
        };
        assert_eq!(rows.fields[0].0, "version");
        assert!(rows.rows[0][0].as_str().unwrap().starts_with("PostgreSQL"));
    }
}
