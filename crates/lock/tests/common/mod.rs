//! What the lock table's integration tests share: transaction ids and rows.

use brine_core::{IndexId, Key, LockTarget, TableId, TxnId, Value};

/// Transaction `n`, as old as its number.
pub fn txn(n: u64) -> TxnId {
    TxnId { ts: n, id: n }
}

/// Row `k` of table 1's primary index.
pub fn row(k: i64) -> LockTarget {
    LockTarget::Point {
        table: TableId(1),
        index: IndexId(0),
        key: Key::new([Value::Int(k)]),
    }
}
