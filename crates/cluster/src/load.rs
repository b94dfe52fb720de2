//! Bulk loads in pieces: the rows of one `Cluster::load` call go to each
//! partition in chunks small enough for one wire frame, whatever the
//! caller passes (TPC-C's customer table of one warehouse is about 17 MB,
//! more than a 16 MiB frame).

use brine_core::{Row, Value};

/// Most bytes (estimated from the values, an upper bound on their postcard
/// encoding) one bulk-load request carries: a quarter of the default wire
/// frame, so a chunk fits with room to spare.
pub(crate) const CHUNK_BYTES: usize = brine_net::DEFAULT_MAX_FRAME_BYTES / 4;

/// An upper bound on the bytes `row` takes on the wire.
fn row_bytes(row: &Row) -> usize {
    let values: usize = row
        .iter()
        .map(|v| match v {
            Value::Null | Value::Max => 1,
            Value::Int(_) | Value::Timestamp(_) => 11,
            Value::Decimal(_) => 16,
            Value::Str(s) => s.len() + 6,
        })
        .sum();
    values + 6
}

/// Splits `rows` into chunks of at most `max_bytes` (by [`row_bytes`]),
/// in order; a single row larger than that is a chunk of its own.
pub(crate) fn chunks(rows: Vec<Row>, max_bytes: usize) -> Vec<Vec<Row>> {
    let mut out = Vec::new();
    let mut chunk = Vec::new();
    let mut bytes = 0;
    for row in rows {
        let b = row_bytes(&row);
        if !chunk.is_empty() && bytes + b > max_bytes {
            out.push(std::mem::take(&mut chunk));
            bytes = 0;
        }
        bytes += b;
        chunk.push(row);
    }
    if !chunk.is_empty() {
        out.push(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: i64, text: usize) -> Row {
        vec![
            Value::Int(i),
            Value::str(&"x".repeat(text)),
            Value::Decimal(brine_core::Decimal::new(i, 2)),
            Value::Null,
        ]
    }

    #[test]
    fn chunks_keep_every_row_in_order_within_the_budget() {
        let rows: Vec<Row> = (0..1000).map(|i| row(i, (i as usize * 7) % 300)).collect();
        let budget = 4096;
        let chunks = chunks(rows.clone(), budget);
        assert!(chunks.len() > 1, "the rows need several chunks");
        for c in &chunks {
            assert!(!c.is_empty());
            assert!(c.iter().map(row_bytes).sum::<usize>() <= budget);
        }
        let back: Vec<Row> = chunks.into_iter().flatten().collect();
        assert_eq!(back, rows);
    }

    #[test]
    fn a_row_above_the_budget_goes_alone() {
        let rows = vec![row(1, 10), row(2, 10_000), row(3, 10)];
        let chunks = chunks(rows, 1000);
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1]);
    }

    #[test]
    fn row_bytes_bounds_the_wire_encoding() {
        for i in [0, 1, -1, i64::MAX, i64::MIN] {
            let r = vec![
                Value::Int(i),
                Value::Timestamp(i),
                Value::Decimal(brine_core::Decimal::new(i, 18)),
                Value::str(&"é".repeat(200)),
                Value::Null,
            ];
            let wire = postcard::to_allocvec(&r).expect("encodes");
            assert!(
                wire.len() <= row_bytes(&r),
                "{} > {}",
                wire.len(),
                row_bytes(&r)
            );
        }
    }
}
