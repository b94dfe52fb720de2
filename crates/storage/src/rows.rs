//! Writing a row: building it from an INSERT, checking unique indexes,
//! and applying an UPDATE's new values with every index kept in step.

use super::*;

pub(crate) fn build_row(def: &TableDef, ins: &InsertPlan, params: &[Value]) -> Result<Row> {
    ins.values
        .iter()
        .map(|op| match op {
            Some(op) => op.value(params).cloned(),
            None => Ok(Value::Null),
        })
        .collect::<Result<Row>>()
        .and_then(|row| {
            if row.len() == def.columns.len() {
                Ok(row)
            } else {
                Err(Error::Internal(format!(
                    "plan does not match table `{}`",
                    def.name
                )))
            }
        })
}

/// The index-column prefix of `row` in index `id` and whether a unique
/// index already holds it. NULLs never conflict.
pub(crate) fn unique_conflict(
    def: &TableDef,
    set: &BTreeSet<Key>,
    id: IndexId,
    sec_key: &Key,
) -> bool {
    let n = def.index_columns(id).len();
    let prefix = &sec_key.0[..n];
    if prefix.iter().any(Value::is_null) {
        return false;
    }
    let lo = Key::new(prefix.iter().cloned());
    let hi = Key::prefix_upper(prefix);
    set.range(lo..=hi).next().is_some()
}

/// Type-checks and inserts a row with its index entries; returns its pk.
pub(crate) fn insert_row(def: &TableDef, data: &mut TableData, row: Row) -> Result<Key> {
    def.check_row(&row)?;
    let pk = def.primary_key_of(&row);
    if data.rows.contains_key(&pk) {
        return Err(Error::DuplicateKey {
            table: def.name.clone(),
            key: pk.to_string(),
        });
    }
    let mut keys = Vec::with_capacity(def.indexes.len());
    for (i, idx) in def.indexes.iter().enumerate() {
        let id = IndexId(i as u32 + 1);
        let sk = def.secondary_key_of(id, &row);
        if idx.unique && unique_conflict(def, &data.secondary[i], id, &sk) {
            return Err(Error::DuplicateKey {
                table: def.name.clone(),
                key: format!("{} in unique index `{}`", sk, idx.name),
            });
        }
        keys.push(sk);
    }
    for (set, sk) in data.secondary.iter_mut().zip(keys) {
        set.insert(sk);
    }
    data.rows.insert(pk.clone(), row);
    Ok(pk)
}

/// The values an UPDATE's SETs give `row`, all computed from the old row,
/// coerced and checked against their columns.
pub(crate) fn new_values(
    def: &TableDef,
    row: &Row,
    sets: &[Assignment],
    params: &[Value],
) -> Result<Vec<(usize, Value)>> {
    sets.iter()
        .map(|s| {
            let v = match &s.expr {
                SetExpr::Value(op) => op.value(params)?.clone(),
                SetExpr::Arith {
                    source,
                    op,
                    operand,
                } => arith(*op, &row[*source], operand.value(params)?)?,
            };
            Ok((
                s.column,
                coerce_value(&def.name, &def.columns[s.column], v)?,
            ))
        })
        .collect()
}

pub(crate) fn secondary_key_with(
    def: &TableDef,
    id: IndexId,
    row: &Row,
    new: &[(usize, Value)],
) -> Key {
    let cols = def.index_columns(id);
    Key::new(cols.iter().chain(def.primary_key.iter()).map(|&c| {
        new.iter()
            .find(|(nc, _)| *nc == c)
            .map_or_else(|| row[c].clone(), |(_, v)| v.clone())
    }))
}

/// Updates one row in place; returns the old values of the changed
/// columns. On error nothing changed.
pub(crate) fn update_row(
    def: &TableDef,
    data: &mut TableData,
    pk: &Key,
    sets: &[Assignment],
    params: &[Value],
) -> Result<Vec<(usize, Value)>> {
    let row = data
        .rows
        .get(pk)
        .ok_or_else(|| Error::Internal(format!("row {pk} of `{}` vanished", def.name)))?;
    let new = new_values(def, row, sets, params)?;
    let mut moves: Vec<(usize, Key, Key)> = Vec::new();
    for (i, idx) in def.indexes.iter().enumerate() {
        if !new.iter().any(|(c, _)| idx.columns.contains(c)) {
            continue;
        }
        let id = IndexId(i as u32 + 1);
        let old_key = def.secondary_key_of(id, row);
        let new_key = secondary_key_with(def, id, row, &new);
        if old_key == new_key {
            continue;
        }
        if idx.unique && unique_conflict(def, &data.secondary[i], id, &new_key) {
            return Err(Error::DuplicateKey {
                table: def.name.clone(),
                key: format!("{} in unique index `{}`", new_key, idx.name),
            });
        }
        moves.push((i, old_key, new_key));
    }
    for (i, old_key, new_key) in moves {
        data.secondary[i].remove(&old_key);
        data.secondary[i].insert(new_key);
    }
    let row = data
        .rows
        .get_mut(pk)
        .ok_or_else(|| Error::Internal(format!("row {pk} of `{}` vanished", def.name)))?;
    Ok(new
        .into_iter()
        .map(|(c, v)| (c, std::mem::replace(&mut row[c], v)))
        .collect())
}
