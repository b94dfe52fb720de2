//! The statements Mediator runs: point gets and puts by primary key, read
//! from a declared SQL statement and its parameters. Anything else (a scan,
//! a delete, an arithmetic update) is refused with the reason.

use brine_core::{Catalog, Error, IndexId, Key, Result, Row, TableId, Value};
use brine_sql::{Plan, Projection, QueryResult, SetExpr, Statement};

/// An item: a row of a table, by primary key.
pub type Item = (TableId, Key);

/// A statement as Mediator runs it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum KvOp {
    /// `SELECT cols FROM t WHERE pk = ...`.
    Get { item: Item },
    /// `UPDATE t SET c = v, ... WHERE pk = ...`: the row's columns `sets`
    /// get the values given.
    Set {
        item: Item,
        sets: Vec<(usize, Value)>,
    },
    /// `INSERT INTO t VALUES (...)`: the whole row.
    Insert { item: Item, row: Row },
}

impl KvOp {
    pub fn item(&self) -> &Item {
        match self {
            KvOp::Get { item } | KvOp::Set { item, .. } | KvOp::Insert { item, .. } => item,
        }
    }
}

fn refuse(plan: &Plan, why: &str) -> Error {
    Error::Sql(format!(
        "Mediator runs point gets and puts by primary key: `{}` {why}",
        plan.sql()
    ))
}

/// The point get or put `plan` makes with `params` (bound).
pub fn interpret(plan: &Plan, params: &[Value], catalog: &Catalog) -> Result<KvOp> {
    let table = plan.table();
    match plan.statement() {
        Statement::Select(s) => {
            if !s.pred.point || s.pred.index != IndexId::PRIMARY || !s.pred.filters.is_empty() {
                return Err(refuse(
                    plan,
                    "does not read one row by its whole primary key",
                ));
            }
            if !matches!(s.projection, Projection::Columns(_)) {
                return Err(refuse(plan, "aggregates"));
            }
            Ok(KvOp::Get {
                item: (table, s.pred.eq_key(params)?),
            })
        }
        Statement::Update(u) => {
            if !u.pred.point || u.pred.index != IndexId::PRIMARY || !u.pred.filters.is_empty() {
                return Err(refuse(
                    plan,
                    "does not write one row by its whole primary key",
                ));
            }
            let sets = u
                .sets
                .iter()
                .map(|a| match &a.expr {
                    SetExpr::Value(op) => Ok((a.column, op.value(params)?.clone())),
                    SetExpr::Arith { .. } => Err(refuse(plan, "computes from the row it writes")),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(KvOp::Set {
                item: (table, u.pred.eq_key(params)?),
                sets,
            })
        }
        Statement::Insert(i) => {
            let def = catalog.table(table);
            let row: Row = i
                .values
                .iter()
                .map(|v| match v {
                    Some(op) => op.value(params).cloned(),
                    None => Ok(Value::Null),
                })
                .collect::<Result<_>>()?;
            def.check_row(&row)?;
            Ok(KvOp::Insert {
                item: (table, def.primary_key_of(&row)),
                row,
            })
        }
        Statement::Delete(_) => Err(refuse(plan, "deletes")),
    }
}

/// The row a put makes of `old` (`None`: the item has no row; an update
/// then writes nothing, as in SQL).
pub fn put_row(op: &KvOp, old: Option<&Row>) -> Option<Row> {
    match op {
        KvOp::Get { .. } => None,
        KvOp::Insert { row, .. } => Some(row.clone()),
        KvOp::Set { sets, .. } => {
            let mut row = old?.clone();
            for (c, v) in sets {
                row[*c] = v.clone();
            }
            Some(row)
        }
    }
}

/// A get's answer: `row` (if the item has one) projected as `plan` says.
pub fn get_result(plan: &Plan, row: Option<&Row>) -> QueryResult {
    let rows = match (plan.statement(), row) {
        (Statement::Select(s), Some(row)) => match &s.projection {
            Projection::Columns(cols) => vec![cols.iter().map(|&c| row[c].clone()).collect()],
            Projection::Aggregates(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    QueryResult {
        columns: plan.columns().clone(),
        rows,
        affected: 0,
    }
}

/// A put's answer: the rows it wrote.
pub fn put_result(wrote: bool) -> QueryResult {
    QueryResult::affected(u64::from(wrote))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DDL: &str =
        "CREATE TABLE kv (k INT, v INT NOT NULL, w INT, PRIMARY KEY (k)) PARTITION BY (k);";

    fn plan(catalog: &Catalog, sql: &str) -> Result<Plan> {
        brine_sql::prepare(catalog, sql)
    }

    #[test]
    fn point_gets_and_puts_are_read_and_the_rest_refused() -> Result<()> {
        let c = brine_sql::parse_schema(DDL)?;
        let t = c.table_by_name("kv")?.id;
        let k = |i: i64| Key::new([Value::Int(i)]);
        let get = plan(&c, "SELECT v, w FROM kv WHERE k = $k")?;
        assert_eq!(
            interpret(&get, &[Value::Int(3)], &c)?,
            KvOp::Get { item: (t, k(3)) }
        );
        let row = vec![Value::Int(3), Value::Int(7), Value::Int(9)];
        assert_eq!(
            get_result(&get, Some(&row)).rows,
            vec![vec![Value::Int(7), Value::Int(9)]]
        );
        assert!(get_result(&get, None).rows.is_empty());

        let set = plan(&c, "UPDATE kv SET v = $v WHERE k = $k")?;
        let op = interpret(&set, &[Value::Int(8), Value::Int(3)], &c)?;
        assert_eq!(
            put_row(&op, Some(&row)),
            Some(vec![Value::Int(3), Value::Int(8), Value::Int(9)])
        );
        assert_eq!(
            put_row(&op, None),
            None,
            "an update of no row writes nothing"
        );

        let ins = plan(&c, "INSERT INTO kv (k, v, w) VALUES ($k, $v, $w)")?;
        let op = interpret(&ins, &[Value::Int(4), Value::Int(1), Value::Int(2)], &c)?;
        assert_eq!(op.item(), &(t, k(4)));

        for sql in [
            "SELECT v FROM kv WHERE k > $k",
            "SELECT SUM(v) FROM kv WHERE k = $k",
            "UPDATE kv SET v = v + $d WHERE k = $k",
            "DELETE FROM kv WHERE k = $k",
            "SELECT v FROM kv WHERE k = $k AND v > 3",
        ] {
            let p = plan(&c, sql)?;
            let params = vec![Value::Int(1); p.params().len()];
            let e = interpret(&p, &params, &c).err().map(|e| e.to_string());
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.contains("point gets and puts")),
                "{sql}: {e:?}"
            );
        }
        Ok(())
    }
}
