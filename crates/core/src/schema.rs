//! Schemas: tables, columns, indexes, and how rows map to partitions.
//!
//! A `Catalog` is immutable once built (from DDL by `brine-sql`) and shared
//! by `Arc` between the coordinator and every partition, so plans can refer to
//! tables and columns by index.

use crate::error::{Error, Result};
use crate::value::{Key, Row, Value};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableId(pub u32);

/// Index 0 is the primary key; secondary indexes are numbered from 1 in
/// declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IndexId(pub u32);

impl IndexId {
    pub const PRIMARY: IndexId = IndexId(0);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataType {
    Int,
    /// Fixed-point, `scale` digits after the point.
    Decimal {
        precision: u8,
        scale: u8,
    },
    /// Variable-length string with an optional maximum length in characters.
    Str {
        max_len: Option<u32>,
    },
    Timestamp,
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Int => write!(f, "INT"),
            DataType::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            DataType::Str { max_len: Some(n) } => write!(f, "VARCHAR({n})"),
            DataType::Str { max_len: None } => write!(f, "TEXT"),
            DataType::Timestamp => write!(f, "TIMESTAMP"),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: DataType,
    pub nullable: bool,
    /// What an INSERT that leaves the column out stores (NULL when none).
    #[serde(default)]
    pub default: Option<ColumnDefault>,
}

/// A column's `DEFAULT`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ColumnDefault {
    /// A literal, already of the column's type.
    Value(Value),
    /// A value made when the statement is bound.
    Generated(Generator),
}

/// Values made when a statement is bound, so every replica and every
/// retry of a logged statement sees the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Generator {
    /// `unique_rowid()`: an INT no other call in the cluster returns
    /// (see `crate::rowid`).
    UniqueRowId,
    /// `CURRENT_TIMESTAMP` / `now()`: the wall clock, in microseconds.
    Now,
}

impl Generator {
    pub fn ty(self) -> DataType {
        match self {
            Generator::UniqueRowId => DataType::Int,
            Generator::Now => DataType::Timestamp,
        }
    }

    pub fn generate(self) -> Value {
        match self {
            Generator::UniqueRowId => Value::Int(crate::rowid::next()),
            Generator::Now => Value::Timestamp(crate::timestamp::now()),
        }
    }
}

impl fmt::Display for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Generator::UniqueRowId => "unique_rowid()",
            Generator::Now => "now()",
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IndexDef {
    pub name: String,
    /// Column positions, in index order.
    pub columns: Vec<usize>,
    pub unique: bool,
}

/// How a table's rows are spread over partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Partitioning {
    /// By the value of one column (which must be part of the primary key, so
    /// every primary-key lookup can be routed).
    Column(usize),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableDef {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key, in key order.
    pub primary_key: Vec<usize>,
    /// Secondary indexes; `IndexId(i + 1)` is `indexes[i]`.
    pub indexes: Vec<IndexDef>,
    pub partitioning: Partitioning,
}

impl TableDef {
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::UnknownColumn {
                table: self.name.clone(),
                column: name.to_string(),
            })
    }

    /// Column positions of an index (0 = primary key).
    pub fn index_columns(&self, index: IndexId) -> &[usize] {
        if index == IndexId::PRIMARY {
            &self.primary_key
        } else {
            &self.indexes[index.0 as usize - 1].columns
        }
    }

    pub fn index_name(&self, index: IndexId) -> &str {
        if index == IndexId::PRIMARY {
            "PRIMARY"
        } else {
            &self.indexes[index.0 as usize - 1].name
        }
    }

    pub fn primary_key_of(&self, row: &Row) -> Key {
        Key::new(self.primary_key.iter().map(|&c| row[c].clone()))
    }

    /// The key of `row` in secondary index `index`: the index columns
    /// followed by the primary key, so entries are unique even for
    /// non-unique indexes.
    pub fn secondary_key_of(&self, index: IndexId, row: &Row) -> Key {
        let cols = self.index_columns(index);
        Key::new(
            cols.iter()
                .chain(self.primary_key.iter())
                .map(|&c| row[c].clone()),
        )
    }

    pub fn partition_column(&self) -> usize {
        match self.partitioning {
            Partitioning::Column(c) => c,
        }
    }

    /// Position of the partitioning column within the primary key.
    pub fn partition_key_position(&self) -> usize {
        let c = self.partition_column();
        self.primary_key
            .iter()
            .position(|&k| k == c)
            .expect("schema validation keeps the partition column in the primary key")
    }

    /// Checks a full row against the column types. Used where data enters a
    /// partition, so a malformed row is an error, never a stored value.
    pub fn check_row(&self, row: &Row) -> Result<()> {
        if row.len() != self.columns.len() {
            return Err(Error::Arity {
                what: format!("row of `{}`", self.name),
                expected: self.columns.len(),
                got: row.len(),
            });
        }
        for (col, v) in self.columns.iter().zip(row) {
            check_value(&self.name, col, v)?;
        }
        Ok(())
    }
}

/// Checks one value against a column: its type, NOT NULL, a DECIMAL's
/// scale and precision, a string's length. Each failure is the error a
/// PostgreSQL client expects for it: `Error::NotNull`, `Error::OutOfRange`
/// (a number with more integer digits than `precision - scale`),
/// `Error::TooLong`, and `Error::Type` for a value of another type.
pub fn check_value(table: &str, col: &ColumnDef, v: &Value) -> Result<()> {
    let ok = match (&col.ty, v) {
        (_, Value::Null) if !col.nullable => {
            return Err(Error::NotNull {
                table: table.to_string(),
                column: col.name.clone(),
            })
        }
        (_, Value::Null) => true,
        (DataType::Int, Value::Int(_)) => true,
        (DataType::Decimal { precision, scale }, Value::Decimal(d)) if d.scale == *scale => {
            if !fits_precision(*d, *precision) {
                return Err(Error::OutOfRange(format!(
                    "{d} does not fit column `{table}.{}` {}: at most {} digits before the point",
                    col.name,
                    col.ty,
                    precision - scale
                )));
            }
            true
        }
        (DataType::Str { max_len: Some(m) }, Value::Str(s)) => {
            // Characters, not bytes, as VARCHAR(n) counts them.
            let len = s.chars().count();
            if len > *m as usize {
                return Err(Error::TooLong {
                    table: table.to_string(),
                    column: col.name.clone(),
                    max_len: *m,
                    len,
                });
            }
            true
        }
        (DataType::Str { max_len: None }, Value::Str(_)) => true,
        (DataType::Timestamp, Value::Timestamp(_)) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::type_mismatch(
            format!("column `{}.{}`", table, col.name),
            col.ty,
            format!("{} {v:?}", v.kind()),
        ))
    }
}

/// Whether `d` (already at its column's scale) has at most `precision`
/// digits: `|units| < 10^precision`.
fn fits_precision(d: crate::Decimal, precision: u8) -> bool {
    // DDL keeps precision within 1..=18, so 10^precision fits an i64.
    match 10i64.checked_pow(u32::from(precision)) {
        Some(limit) => d.units.unsigned_abs() < limit.unsigned_abs(),
        None => true,
    }
}

/// Coerces a value to a column's type where the conversion is exact (an
/// integer into a decimal column, a decimal with fewer fractional digits
/// into one with more), then checks it (`check_value`). A value that
/// cannot be brought to the column's scale without overflowing 64 bits is
/// `Error::OutOfRange`; one of another type is a type error.
pub fn coerce_value(table: &str, col: &ColumnDef, v: Value) -> Result<Value> {
    let overflow = |v: &dyn fmt::Display| {
        Error::OutOfRange(format!("{v} overflows column `{table}.{}`", col.name))
    };
    let v = match (&col.ty, v) {
        (DataType::Decimal { scale, .. }, Value::Int(i)) => Value::Decimal(crate::Decimal::new(
            crate::Decimal::new(i, 0)
                .units_at(*scale)
                .ok_or_else(|| overflow(&i))?,
            *scale,
        )),
        (DataType::Decimal { scale, .. }, Value::Decimal(d)) if d.scale < *scale => Value::Decimal(
            crate::Decimal::new(d.units_at(*scale).ok_or_else(|| overflow(&d))?, *scale),
        ),
        (_, v) => v,
    };
    check_value(table, col, &v)?;
    Ok(v)
}

/// All tables of an application.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Catalog {
    tables: Vec<TableDef>,
    #[serde(skip)]
    by_name: HashMap<String, TableId>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a table, assigning its id. Names are case-insensitive.
    pub fn add_table(&mut self, mut def: TableDef) -> Result<TableId> {
        let lname = def.name.to_ascii_lowercase();
        if self.by_name.contains_key(&lname) {
            return Err(Error::Schema(format!(
                "table `{}` already exists",
                def.name
            )));
        }
        if def.primary_key.is_empty() {
            return Err(Error::Schema(format!(
                "table `{}` has no primary key",
                def.name
            )));
        }
        let Partitioning::Column(pc) = def.partitioning;
        if !def.primary_key.contains(&pc) {
            return Err(Error::Schema(format!(
                "table `{}`: the partitioning column `{}` must be part of the primary key",
                def.name,
                def.columns.get(pc).map(|c| c.name.as_str()).unwrap_or("?")
            )));
        }
        let id = TableId(self.tables.len() as u32);
        def.id = id;
        self.by_name.insert(lname, id);
        self.tables.push(def);
        Ok(id)
    }

    pub fn table(&self, id: TableId) -> &TableDef {
        &self.tables[id.0 as usize]
    }

    pub fn table_mut(&mut self, id: TableId) -> &mut TableDef {
        &mut self.tables[id.0 as usize]
    }

    pub fn table_by_name(&self, name: &str) -> Result<&TableDef> {
        self.by_name
            .get(&name.to_ascii_lowercase())
            .map(|id| self.table(*id))
            .ok_or_else(|| Error::UnknownTable(name.to_string()))
    }

    pub fn tables(&self) -> &[TableDef] {
        &self.tables
    }
}

/// The partition that owns rows whose partitioning column has value `v`.
/// Integers map by modulo so that dense ids (warehouses 1..W) spread evenly
/// and predictably; other values by a stable hash.
pub fn partition_of(v: &Value, partitions: u32) -> u32 {
    debug_assert!(partitions > 0);
    match v {
        Value::Int(i) => i.rem_euclid(partitions as i64) as u32,
        other => (other.stable_hash() % partitions as u64) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decimal;

    fn col(ty: DataType, nullable: bool) -> ColumnDef {
        ColumnDef {
            name: "c".into(),
            ty,
            nullable,
            default: None,
        }
    }

    #[test]
    fn decimal_precision_is_enforced_after_scale() {
        // DECIMAL(8,2): at most 6 digits before the point.
        let c = col(
            DataType::Decimal {
                precision: 8,
                scale: 2,
            },
            true,
        );
        let ok = coerce_value("t", &c, Value::Decimal(Decimal::new(99_999_999, 2))).unwrap();
        assert_eq!(ok, Value::Decimal(Decimal::new(99_999_999, 2)));
        assert!(coerce_value("t", &c, Value::Decimal(Decimal::new(-99_999_999, 2))).is_ok());
        for big in [
            Value::Decimal(Decimal::new(12_345_678_900, 2)),
            Value::Decimal(Decimal::new(-100_000_000, 2)),
            Value::Int(1_000_000),
            Value::Decimal(Decimal::new(10_000_000, 1)),
        ] {
            let e = coerce_value("t", &c, big.clone()).unwrap_err();
            assert!(matches!(e, Error::OutOfRange(_)), "{big:?}: {e:?}");
            assert!(e.to_string().contains("`t.c` DECIMAL(8,2)"), "{e}");
        }
        // NUMERIC(5) is NUMERIC(5,0).
        let whole = col(
            DataType::Decimal {
                precision: 5,
                scale: 0,
            },
            true,
        );
        assert!(coerce_value("t", &whole, Value::Int(99_999)).is_ok());
        assert!(matches!(
            coerce_value("t", &whole, Value::Int(123_456)),
            Err(Error::OutOfRange(_))
        ));
        // DECIMAL(18,18): a fraction only.
        let frac = col(
            DataType::Decimal {
                precision: 18,
                scale: 18,
            },
            true,
        );
        assert!(check_value(
            "t",
            &frac,
            &Value::Decimal(Decimal::new(123_456_789_012_345_678, 18))
        )
        .is_ok());
        assert!(matches!(
            coerce_value("t", &frac, Value::Int(1)),
            Err(Error::OutOfRange(_))
        ));
        // Scaling an integer past 64 bits is out of range too.
        assert!(matches!(
            coerce_value("t", &frac, Value::Int(100)),
            Err(Error::OutOfRange(_))
        ));
    }

    #[test]
    fn nulls_lengths_and_types_get_their_own_errors() {
        let int = col(DataType::Int, false);
        assert_eq!(
            check_value("t", &int, &Value::Null),
            Err(Error::NotNull {
                table: "t".into(),
                column: "c".into()
            })
        );
        assert!(check_value("t", &col(DataType::Int, true), &Value::Null).is_ok());
        let short = col(DataType::Str { max_len: Some(4) }, true);
        assert!(check_value("t", &short, &Value::str("ñañá")).is_ok());
        assert_eq!(
            check_value("t", &short, &Value::str("abcde")),
            Err(Error::TooLong {
                table: "t".into(),
                column: "c".into(),
                max_len: 4,
                len: 5
            })
        );
        assert!(matches!(
            check_value("t", &int, &Value::str("1")),
            Err(Error::Type { .. })
        ));
    }
}
