//! Reading a table by a predicate: the rows a plan selects, in index
//! order, and the keys and locks a scan covers.

use super::*;

pub(crate) fn filters_match(pred: &Predicate, row: &Row, params: &[Value]) -> Result<bool> {
    for f in &pred.filters {
        if !f.matches(row, params)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Calls `f(entry key, primary key, row)` for every row the predicate
/// selects, in index order (reversed if `desc`), until `f` returns false.
pub(crate) fn visit(
    def: &TableDef,
    data: &TableData,
    pred: &Predicate,
    params: &[Value],
    desc: bool,
    mut scanned: Option<&mut Scanned>,
    mut f: impl FnMut(&Key, &Key, &Row) -> Result<bool>,
) -> Result<()> {
    if pred.point {
        let pk = pred.eq_key(params)?;
        if let Some(row) = data.rows.get(&pk) {
            if filters_match(pred, row, params)? {
                f(&pk, &pk, row)?;
            }
        }
        return Ok(());
    }
    let (lo, hi) = pred.bounds(params)?;
    if !interval_nonempty(&lo, &hi) {
        return Ok(());
    }
    if pred.index == IndexId::PRIMARY {
        let step = |(pk, row): (&Key, &Row)| -> Result<bool> {
            if let Some(s) = scanned.as_deref_mut() {
                s.pks.push(pk.clone());
            }
            if !filters_match(pred, row, params)? {
                return Ok(true);
            }
            let go_on = f(pk, pk, row)?;
            if !go_on {
                if let Some(s) = scanned.as_deref_mut() {
                    s.stop = Some(pk.clone());
                }
            }
            Ok(go_on)
        };
        return walk(data.rows.range((lo, hi)), desc, step);
    }
    let set = data
        .secondary
        .get(pred.index.0 as usize - 1)
        .ok_or_else(|| Error::Internal(format!("no index {:?} on `{}`", pred.index, def.name)))?;
    let n = def.index_columns(pred.index).len();
    let step = |sk: &Key| -> Result<bool> {
        let pk = Key::new(sk.0[n..].iter().cloned());
        let row = data.rows.get(&pk).ok_or_else(|| {
            Error::Internal(format!("index entry {sk} of `{}` has no row", def.name))
        })?;
        if let Some(s) = scanned.as_deref_mut() {
            s.pks.push(pk.clone());
        }
        if !filters_match(pred, row, params)? {
            return Ok(true);
        }
        let go_on = f(sk, &pk, row)?;
        if !go_on {
            if let Some(s) = scanned.as_deref_mut() {
                s.stop = Some(sk.clone());
            }
        }
        Ok(go_on)
    };
    walk(set.range((lo, hi)), desc, step)
}

/// A range-read lock on an interval of one index.
pub(crate) fn range_read(
    table: TableId,
    index: IndexId,
    lo: Bound<Key>,
    hi: Bound<Key>,
) -> LockNeed {
    LockNeed {
        target: LockTarget::Range {
            table,
            index,
            lo,
            hi,
        },
        access: Access::RangeRead,
    }
}

/// Feeds `step` the items of an ordered range, forwards or backwards, until
/// it returns `false` or fails.
pub(crate) fn walk<I: DoubleEndedIterator>(
    range: I,
    desc: bool,
    mut step: impl FnMut(I::Item) -> Result<bool>,
) -> Result<()> {
    if desc {
        for item in range.rev() {
            if !step(item)? {
                break;
            }
        }
    } else {
        for item in range {
            if !step(item)? {
                break;
            }
        }
    }
    Ok(())
}

/// Primary keys of the rows an UPDATE/DELETE predicate selects.
pub(crate) fn matching_keys(
    def: &TableDef,
    data: &TableData,
    pred: &Predicate,
    params: &[Value],
) -> Result<Vec<Key>> {
    let mut pks = Vec::new();
    visit(def, data, pred, params, false, None, |_, pk, _| {
        pks.push(pk.clone());
        Ok(true)
    })?;
    Ok(pks)
}

/// [`matching_keys`], recording the predicate read when `recorder` and
/// `ops` are given: a range predicate is a range read; a point predicate
/// that finds no row is a read of the absent key (a row found is recorded
/// by its write). Hands the recorder back for the writes.
pub(crate) fn matching_keys_recorded<'r>(
    def: &TableDef,
    data: &TableData,
    pred: &Predicate,
    params: &[Value],
    recorder: Option<&'r mut Recorder>,
    ops: Option<&mut Vec<Op>>,
) -> Result<(Vec<Key>, Option<&'r mut Recorder>)> {
    let (Some(r), Some(ops)) = (recorder, ops) else {
        return Ok((matching_keys(def, data, pred, params)?, None));
    };
    let mut scanned = Scanned::default();
    let mut pks = Vec::new();
    visit(
        def,
        data,
        pred,
        params,
        false,
        Some(&mut scanned),
        |_, pk, _| {
            pks.push(pk.clone());
            Ok(true)
        },
    )?;
    if !pred.point {
        ops.push(observed(r, def, pred, params, false, scanned)?);
    } else if pks.is_empty() {
        ops.push(r.read(def, &pred.eq_key(params)?));
    }
    Ok((pks, Some(r)))
}

/// The read a SELECT (or a DML predicate) made, as a history operation.
pub(crate) fn observed(
    r: &Recorder,
    def: &TableDef,
    pred: &Predicate,
    params: &[Value],
    desc: bool,
    scanned: Scanned,
) -> Result<Op> {
    if pred.point {
        return Ok(r.read(def, &pred.eq_key(params)?));
    }
    Ok(r.range_read(def, pred.index, pred.bounds(params)?, desc, scanned))
}
