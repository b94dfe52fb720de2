//! What procedure bodies share (TPC-C, TPC-W): their arguments by
//! position, and the rows and cells of their results, each with an error
//! that names what was missing or mistyped.

use brine_cluster::QueryResult;
use brine_core::{Decimal, Error, Result, Row, Value};

/// Arguments of one call, with errors that name the procedure.
pub(crate) struct Args<'a> {
    pub values: &'a [Value],
    pub what: &'static str,
}

impl<'a> Args<'a> {
    pub fn get(&self, i: usize) -> Result<&'a Value> {
        self.values.get(i).ok_or_else(|| Error::Arity {
            what: format!("procedure `{}`", self.what),
            expected: i + 1,
            got: self.values.len(),
        })
    }

    pub fn v(&self, i: usize) -> Result<Value> {
        self.get(i).cloned()
    }

    fn typed<T>(&self, i: usize, kind: &str, f: impl FnOnce(&Value) -> Option<T>) -> Result<T> {
        let v = self.get(i)?;
        f(v).ok_or_else(|| {
            Error::type_mismatch(format!("argument {i} of `{}`", self.what), kind, v.kind())
        })
    }

    pub fn int(&self, i: usize) -> Result<i64> {
        self.typed(i, "INT", Value::as_int)
    }

    pub fn decimal(&self, i: usize) -> Result<Decimal> {
        self.typed(i, "DECIMAL", Value::as_decimal)
    }

    pub fn timestamp(&self, i: usize) -> Result<i64> {
        self.typed(i, "TIMESTAMP", |v| match v {
            Value::Timestamp(t) => Some(*t),
            _ => None,
        })
    }
}

/// The first row of a result, or an error naming what was missing.
pub(crate) fn first(q: &QueryResult, what: impl FnOnce() -> String) -> Result<&Row> {
    q.first()
        .ok_or_else(|| Error::Internal(format!("{} not found", what())))
}

pub(crate) fn cell<'r>(row: &'r Row, i: usize, what: &str) -> Result<&'r Value> {
    row.get(i)
        .ok_or_else(|| Error::Internal(format!("result row of {what} has no column {i}")))
}

pub(crate) fn int_at(row: &Row, i: usize, what: &str) -> Result<i64> {
    let v = cell(row, i, what)?;
    v.as_int()
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "INT", v.kind()))
}

pub(crate) fn decimal_at(row: &Row, i: usize, what: &str) -> Result<Decimal> {
    let v = cell(row, i, what)?;
    v.as_decimal()
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "DECIMAL", v.kind()))
}

/// A fresh id from `counter` that routes to server `site` of `servers`
/// (`v mod servers = site`, the routing of integers): a server-specific
/// id (seed 004 section 6), so a session's new cart or customer lives at
/// the server its client talks to, and its later calls there see it.
/// Ids stay unique; those of the other sites are skipped.
pub(crate) fn site_id(counter: &std::sync::atomic::AtomicI64, servers: i64, site: i64) -> i64 {
    loop {
        let v = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if servers <= 1 || v.rem_euclid(servers) == site {
            return v;
        }
    }
}
