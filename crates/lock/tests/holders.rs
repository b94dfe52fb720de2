//! `LockTable::for_each_point_holder_with`: the holders a Salt read depends
//! on under rule (a), for a point read and for a range read (every row
//! inside the range).

use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use brine_core::{Access, IndexId, Key, LockTarget, TableId, Value};
use brine_lock::{Acquire, LockClass, LockConfig, LockTable, Mode, StandardCompat};

mod common;
use common::{row, txn};

fn range(lo: i64, hi: i64) -> LockTarget {
    LockTarget::Range {
        table: TableId(1),
        index: IndexId(0),
        lo: Bound::Included(Key::new([Value::Int(lo)])),
        hi: Bound::Included(Key::new([Value::Int(hi)])),
    }
}

fn holders(t: &LockTable, target: &LockTarget, except: u64) -> Vec<(u64, LockTarget)> {
    let mut out = Vec::new();
    t.for_each_point_holder_with(
        target,
        Mode::new(LockClass::Saline, Access::Write),
        txn(except),
        |w, at| out.push((w.id, at)),
    );
    out.sort_by_key(|(w, _)| *w);
    out
}

#[test]
fn a_range_read_sees_the_saline_writers_of_the_rows_inside_it() {
    let mut t = LockTable::new(LockConfig::default(), Arc::new(StandardCompat));
    let mut wakeups = Vec::new();
    let mut take = |t: &mut LockTable, who: u64, target: LockTarget, class, access| {
        let got = t
            .acquire(
                txn(who),
                &target,
                Mode::new(class, access),
                Instant::now(),
                &mut wakeups,
            )
            .expect("acquire");
        assert!(matches!(got, Acquire::Granted { .. }), "{got:?}");
    };
    take(&mut t, 2, row(5), LockClass::Saline, Access::Write);
    take(&mut t, 3, row(7), LockClass::Saline, Access::Write);
    take(&mut t, 4, row(6), LockClass::Saline, Access::Read);
    // The reader's range lock (alkaline reads pass saline writes).
    take(
        &mut t,
        9,
        range(4, 8),
        LockClass::Alkaline,
        Access::RangeRead,
    );

    assert_eq!(holders(&t, &range(4, 6), 9), vec![(2, row(5))]);
    assert_eq!(holders(&t, &range(4, 8), 9), vec![(2, row(5)), (3, row(7))]);
    assert_eq!(holders(&t, &range(8, 9), 9), vec![]);
    // A point: its own writers only; never the asking transaction.
    assert_eq!(holders(&t, &row(7), 9), vec![(3, row(7))]);
    assert_eq!(holders(&t, &range(4, 8), 3), vec![(2, row(5))]);
}
