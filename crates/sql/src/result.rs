//! Statement results.

use brine_core::{Row, Value};
use std::sync::Arc;

/// The result of one statement: rows for SELECT, an affected-row count for
/// INSERT/UPDATE/DELETE. Column names are shared with the plan (an `Arc`
/// clone), so a single-row result costs one `Vec` for the row.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueryResult {
    pub columns: Arc<[String]>,
    pub rows: Vec<Row>,
    pub affected: u64,
}

impl QueryResult {
    /// A result of a write that touched `n` rows.
    pub fn affected(n: u64) -> Self {
        QueryResult {
            columns: Arc::from(Vec::<String>::new()),
            rows: Vec::new(),
            affected: n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The first row, if any.
    pub fn first(&self) -> Option<&Row> {
        self.rows.first()
    }

    /// The first column of the first row (aggregates, single-value lookups).
    pub fn scalar(&self) -> Option<&Value> {
        self.rows.first().and_then(|r| r.first())
    }

    /// Position of a column by name (case-insensitive).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
    }

    /// The value of column `name` in the first row.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let i = self.column_index(name)?;
        self.rows.first().and_then(|r| r.get(i))
    }

    /// Consumes the result, giving its rows.
    pub fn into_rows(self) -> Vec<Row> {
        self.rows
    }
}
