//! The uncontended path must stay cheap: acquire + release of a point lock
//! well under a microsecond in release builds. Only measured (not asserted)
//! in debug builds.

use brine_core::{Access, IndexId, Key, LockTarget, TableId, TxnId, Value};
use brine_lock::{Acquire, LockClass, LockConfig, LockTable, Mode, ReleaseOutcome, StandardCompat};
use std::sync::Arc;
use std::time::Instant;

#[test]
fn uncontended_acquire_release_is_fast() {
    let mut table = LockTable::new(LockConfig::default(), Arc::new(StandardCompat));
    let targets: Vec<LockTarget> = (0..1024)
        .map(|k| LockTarget::Point {
            table: TableId(1),
            index: IndexId(0),
            key: Key::new([Value::Int(k), Value::Int(7)]),
        })
        .collect();
    let mode = Mode::new(LockClass::Acid, Access::Write);
    let mut wakeups = Vec::new();
    let rounds: u64 = if cfg!(debug_assertions) {
        2_000
    } else {
        200_000
    };
    let now = Instant::now();
    let start = Instant::now();
    for i in 0..rounds {
        let txn = TxnId { ts: i, id: i };
        let t = &targets[(i % 1024) as usize];
        let r = table.acquire(txn, t, mode, now, &mut wakeups);
        assert_eq!(r, Ok(Acquire::Granted { newly: true }));
        assert_eq!(table.release_all(txn, &mut wakeups), ReleaseOutcome::Done);
    }
    let ns_per_pair = start.elapsed().as_nanos() as u64 / rounds;
    eprintln!("uncontended acquire+release_all: {ns_per_pair} ns");
    assert!(wakeups.is_empty());
    if !cfg!(debug_assertions) {
        assert!(ns_per_pair < 1_000, "{ns_per_pair} ns per acquire+release");
    }
}
