//! Small conversions from sqlparser's AST: names and literal values.

use brine_core::schema::{coerce_value, ColumnDef};
use brine_core::{DataType, Decimal, Error, Generator, Result, Value};
use sqlparser::ast::{self, Expr, UnaryOperator};

/// A one-part object name (`t`); qualified names are outside the subset
/// (brine has one namespace of tables).
pub(crate) fn object_name(name: &ast::ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(id)] => Ok(id.value.clone()),
        _ => Err(Error::Sql(format!(
            "unsupported: qualified or unusual name `{name}` (brine's tables have one-part names)"
        ))),
    }
}

/// A literal expression as an untyped value, or `None` if `expr` is not a
/// literal. Numbers without a point are `Int`, with a point `Decimal`.
pub(crate) fn literal(expr: &Expr) -> Result<Option<Value>> {
    match expr {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(s, _) => number(s, false).map(Some),
            ast::Value::SingleQuotedString(s) => Ok(Some(Value::str(s))),
            ast::Value::Null => Ok(Some(Value::Null)),
            ast::Value::Placeholder(_) => Ok(None),
            other => Err(Error::Sql(format!("unsupported literal `{other}`"))),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                ast::Value::Number(s, _) => number(s, true).map(Some),
                _ => Err(Error::Sql(format!("cannot negate `{expr}`"))),
            },
            _ => Ok(None),
        },
        Expr::Nested(inner) => literal(inner),
        _ => Ok(None),
    }
}

/// A numeric literal: `Int` without a point, `Decimal` with one. One that
/// does not fit (beyond 64 bits, more than 18 digits) is out of range.
/// A literal (as `literal` reads it) as a value of `col`: for a TIMESTAMP
/// column an integer counts microseconds since 1970 and a quoted string is
/// read as PostgreSQL reads its text (`'2024-03-01 12:00:00[.ffffff]'`,
/// UTC); then the value is coerced and checked as any value of the column
/// (`coerce_value`).
pub(crate) fn literal_for(table: &str, col: &ColumnDef, v: Value) -> Result<Value> {
    let v = match (col.ty, v) {
        (DataType::Timestamp, Value::Int(t)) => Value::Timestamp(t),
        (DataType::Timestamp, Value::Str(text)) => brine_core::timestamp::parse(&text)
            .map(Value::Timestamp)
            .ok_or_else(|| {
                Error::type_mismatch(
                    format!("column `{table}.{}`", col.name),
                    "TIMESTAMP ('YYYY-MM-DD HH:MM:SS[.ffffff]' or microseconds since 1970)",
                    format!("STRING {text:?}"),
                )
            })?,
        (_, v) => v,
    };
    coerce_value(table, col, v)
}

fn number(s: &str, neg: bool) -> Result<Value> {
    let bad = || {
        let sign = if neg { "-" } else { "" };
        Error::OutOfRange(format!(
            "out-of-range number `{sign}{s}` (brine's numbers are 64-bit integers \
             and decimals of at most 18 digits)"
        ))
    };
    if s.contains(['e', 'E']) {
        return Err(Error::Sql(format!(
            "unsupported: number `{s}` in exponent notation (write its digits)"
        )));
    }
    if s.contains('.') {
        let d = Decimal::parse(s).ok_or_else(bad)?;
        Ok(Value::Decimal(Decimal::new(
            if neg { -d.units } else { d.units },
            d.scale,
        )))
    } else {
        let digits = if neg { format!("-{s}") } else { s.to_string() };
        digits.parse::<i64>().map(Value::Int).map_err(|_| bad())
    }
}

/// A placeholder's name without its sigil: `$w_id` and `:w_id` -> `w_id`.
pub(crate) fn placeholder(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => Some(
                p.strip_prefix('$')
                    .or_else(|| p.strip_prefix(':'))
                    .unwrap_or(p),
            ),
            _ => None,
        },
        Expr::Nested(inner) => placeholder(inner),
        _ => None,
    }
}

/// A call of a value generator: `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`,
/// `now()`, `unique_rowid()` (no arguments), or `None`.
pub(crate) fn generator(expr: &Expr) -> Option<Generator> {
    let Expr::Function(f) = expr else {
        return match expr {
            Expr::Nested(inner) => generator(inner),
            _ => None,
        };
    };
    let no_args = match &f.args {
        ast::FunctionArguments::None => true,
        ast::FunctionArguments::List(l) => l.args.is_empty(),
        ast::FunctionArguments::Subquery(_) => false,
    };
    let [ast::ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else {
        return None;
    };
    if !no_args {
        return None;
    }
    match name.value.to_ascii_lowercase().as_str() {
        "current_timestamp" | "localtimestamp" | "now" => Some(Generator::Now),
        "unique_rowid" => Some(Generator::UniqueRowId),
        _ => None,
    }
}
