use super::*;
use brine_check::{Op as HOp, WriteKind};
use brine_core::Decimal;
use brine_sql::{parse_schema, prepare};
use proptest::prelude::*;

const SCHEMA: &str = "
    CREATE TABLE acct (
        w INT, id INT, name VARCHAR(8) NOT NULL, bal DECIMAL(12,2) NOT NULL, n INT, code INT,
        PRIMARY KEY (w, id)
    );
    CREATE INDEX acct_by_name ON acct (w, name);
    CREATE UNIQUE INDEX acct_code ON acct (w, code);
";

const ACCT: TableId = TableId(0);
const T1: TxnId = TxnId { ts: 1, id: 1 };
const T2: TxnId = TxnId { ts: 2, id: 2 };

fn dec(units: i64) -> Value {
    Value::Decimal(Decimal::new(units, 2))
}

fn row(w: i64, id: i64, name: &str, bal: i64, n: Option<i64>, code: Option<i64>) -> Row {
    vec![
        Value::Int(w),
        Value::Int(id),
        Value::str(name),
        dec(bal),
        n.map_or(Value::Null, Value::Int),
        code.map_or(Value::Null, Value::Int),
    ]
}

fn pk(w: i64, id: i64) -> Key {
    Key::new([Value::Int(w), Value::Int(id)])
}

fn store() -> PartitionStore {
    let cat = Arc::new(parse_schema(SCHEMA).unwrap());
    let mut s = PartitionStore::new(cat);
    for id in 1..=5 {
        let name = if id % 2 == 0 { "even" } else { "odd" };
        s.load(ACCT, row(1, id, name, id * 100, Some(id), Some(id)))
            .unwrap();
    }
    s.load(ACCT, row(2, 1, "odd", 50, None, None)).unwrap();
    s
}

struct Stmt {
    plan: Plan,
}

fn stmt(s: &PartitionStore, sql: &str) -> Stmt {
    Stmt {
        plan: prepare(s.catalog(), sql).unwrap(),
    }
}

fn run(s: &mut PartitionStore, txn: TxnId, sql: &str, args: Vec<Value>) -> Result<QueryResult> {
    let st = stmt(s, sql);
    let params = st.plan.bind(args)?;
    s.execute(txn, &st.plan, &params)
}

fn needs(s: &PartitionStore, sql: &str, args: Vec<Value>) -> Vec<LockNeed> {
    let st = stmt(s, sql);
    let params = st.plan.bind(args).unwrap();
    let mut out = Vec::new();
    s.lock_needs(&st.plan, &params, &mut out).unwrap();
    out
}

fn snapshot(s: &PartitionStore) -> Vec<TableData> {
    s.tables.clone()
}

fn ints(r: &QueryResult) -> Vec<i64> {
    r.rows.iter().map(|r| r[0].as_int().unwrap()).collect()
}

#[test]
fn insert_get_duplicate_and_unique() {
    let mut s = store();
    let ins = "INSERT INTO acct (w, id, name, bal, code) VALUES ($w, $id, $name, $bal, $code)";
    let r = run(
        &mut s,
        T1,
        ins,
        vec![
            Value::Int(1),
            Value::Int(9),
            Value::str("x"),
            Value::Int(3),
            Value::Int(90),
        ],
    )
    .unwrap();
    assert_eq!(r.affected, 1);
    assert_eq!(s.get(ACCT, &pk(1, 9)).unwrap()[3], dec(300));
    assert_eq!(s.get(ACCT, &pk(1, 9)).unwrap()[4], Value::Null);
    // Duplicate primary key.
    let e = run(
        &mut s,
        T1,
        ins,
        vec![
            Value::Int(1),
            Value::Int(9),
            Value::str("y"),
            Value::Int(3),
            Value::Int(91),
        ],
    )
    .unwrap_err();
    assert!(matches!(e, Error::DuplicateKey { .. }), "{e}");
    // Unique secondary index.
    let e = run(
        &mut s,
        T1,
        ins,
        vec![
            Value::Int(1),
            Value::Int(10),
            Value::str("y"),
            Value::Int(3),
            Value::Int(90),
        ],
    )
    .unwrap_err();
    assert!(matches!(e, Error::DuplicateKey { .. }), "{e}");
    // NULLs in a unique index never conflict.
    run(
        &mut s,
        T1,
        ins,
        vec![
            Value::Int(1),
            Value::Int(11),
            Value::str("y"),
            Value::Int(3),
            Value::Null,
        ],
    )
    .unwrap();
    // Too long a string is refused at the row check.
    let e = run(
        &mut s,
        T1,
        ins,
        vec![
            Value::Int(1),
            Value::Int(12),
            Value::str("123456789"),
            Value::Int(3),
            Value::Null,
        ],
    )
    .unwrap_err();
    assert!(matches!(e, Error::TooLong { .. }), "{e}");
    assert_eq!(s.len(ACCT), 8);
    s.check_consistency().unwrap();
    assert!(s.has_writes(T1));
    let ws = s.write_set(T1);
    assert_eq!(ws.len(), 2);
    assert_eq!(ws[0].1, pk(1, 9));
    s.abort(T1);
    assert_eq!(s.len(ACCT), 6);
    assert!(!s.has_writes(T1));
    s.check_consistency().unwrap();
}

#[test]
fn load_rejects_bad_rows() {
    let mut s = store();
    assert!(matches!(
        s.load(ACCT, vec![Value::Int(1)]),
        Err(Error::Arity { .. })
    ));
    assert!(matches!(
        s.load(ACCT, row(1, 1, "dup", 1, None, None)),
        Err(Error::DuplicateKey { .. })
    ));
    let mut bad = row(1, 77, "x", 1, None, None);
    bad[3] = Value::Int(5);
    assert!(matches!(s.load(ACCT, bad), Err(Error::Type { .. })));
    let mut bad = row(1, 78, "x", 1, None, None);
    bad[0] = Value::Max;
    assert!(s.load(ACCT, bad).is_err());
    s.check_consistency().unwrap();
}

#[test]
fn point_update_moves_secondary_entries_and_abort_restores() {
    let mut s = store();
    let before = snapshot(&s);
    let r = run(
        &mut s,
        T1,
        "UPDATE acct SET name = $name, bal = bal + $x WHERE w = $w AND id = $id",
        vec![
            Value::str("zed"),
            Value::Int(1),
            Value::Int(1),
            Value::Int(2),
        ],
    )
    .unwrap();
    assert_eq!(r.affected, 1);
    let row = s.get(ACCT, &pk(1, 2)).unwrap();
    assert_eq!(row[2], Value::str("zed"));
    assert_eq!(row[3], dec(300));
    s.check_consistency().unwrap();
    let by_name = run(
        &mut s,
        T1,
        "SELECT id FROM acct WHERE w = 1 AND name = 'zed'",
        vec![],
    )
    .unwrap();
    assert_eq!(ints(&by_name), vec![2]);
    // Update of a missing row affects nothing.
    let r = run(
        &mut s,
        T1,
        "UPDATE acct SET n = 1 WHERE w = 9 AND id = 9",
        vec![],
    )
    .unwrap();
    assert_eq!(r.affected, 0);
    // Two updates of the same row undo in order.
    run(
        &mut s,
        T1,
        "UPDATE acct SET name = 'again' WHERE w = 1 AND id = 2",
        vec![],
    )
    .unwrap();
    assert_eq!(s.write_set(T1).len(), 1);
    s.abort(T1);
    assert_eq!(snapshot(&s), before);
}

#[test]
fn delete_point_and_range_then_abort() {
    let mut s = store();
    let before = snapshot(&s);
    let r = run(
        &mut s,
        T1,
        "DELETE FROM acct WHERE w = 1 AND id = 3",
        vec![],
    )
    .unwrap();
    assert_eq!(r.affected, 1);
    let r = run(
        &mut s,
        T1,
        "DELETE FROM acct WHERE w = 1 AND id >= 4",
        vec![],
    )
    .unwrap();
    assert_eq!(r.affected, 2);
    assert_eq!(s.len(ACCT), 3);
    s.check_consistency().unwrap();
    let ws = s.write_set(T1);
    assert!(ws.iter().all(|(_, _, after)| after.is_none()));
    s.abort(T1);
    assert_eq!(snapshot(&s), before);
}

#[test]
fn commit_keeps_changes() {
    let mut s = store();
    run(&mut s, T1, "DELETE FROM acct WHERE w = 2", vec![]).unwrap();
    s.commit(T1);
    s.abort(T1);
    assert_eq!(s.len(ACCT), 5);
}

#[test]
fn range_scans_order_desc_limit() {
    let mut s = store();
    let q = |s: &mut PartitionStore, sql: &str| ints(&run(s, T1, sql, vec![]).unwrap());
    assert_eq!(
        q(&mut s, "SELECT id FROM acct WHERE w = 1"),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 ORDER BY id DESC LIMIT 2"
        ),
        vec![5, 4]
    );
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND id > 2 AND id <= 4"
        ),
        vec![3, 4]
    );
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND id BETWEEN 2 AND 3 ORDER BY id DESC"
        ),
        vec![3, 2]
    );
    // Inverted interval is empty, not a panic.
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND id BETWEEN 4 AND 2"
        ),
        Vec::<i64>::new()
    );
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND id > 3 AND id < 4"
        ),
        Vec::<i64>::new()
    );
    assert_eq!(q(&mut s, "SELECT id FROM acct LIMIT 0"), Vec::<i64>::new());
    // Secondary index, ordered by (name, then pk).
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND name = 'odd' ORDER BY id DESC"
        ),
        vec![5, 3, 1]
    );
    assert_eq!(
        q(&mut s, "SELECT id FROM acct WHERE w = 1 AND name >= 'f'"),
        vec![1, 3, 5]
    );
    // Residual filter.
    assert_eq!(
        q(
            &mut s,
            "SELECT id FROM acct WHERE w = 1 AND n <> 3 AND bal > 1.00"
        ),
        vec![2, 4, 5]
    );
    // Full scan crosses prefixes.
    assert_eq!(q(&mut s, "SELECT w FROM acct").len(), 6);
    // Point select projects.
    let r = run(
        &mut s,
        T1,
        "SELECT name, bal FROM acct WHERE w = $w AND id = $i",
        vec![Value::Int(1), Value::Int(4)],
    )
    .unwrap();
    assert_eq!(r.rows, vec![vec![Value::str("even"), dec(400)]]);
    assert_eq!(r.get("bal"), Some(&dec(400)));
}

#[test]
fn aggregates() {
    let mut s = store();
    let r = run(
        &mut s,
        T1,
        "SELECT COUNT(*), COUNT(n), SUM(bal), MIN(n), MAX(name) FROM acct WHERE w = $w",
        vec![Value::Int(1)],
    )
    .unwrap();
    assert_eq!(
        r.rows,
        vec![vec![
            Value::Int(5),
            Value::Int(5),
            dec(1500),
            Value::Int(1),
            Value::str("odd")
        ]]
    );
    let r = run(
        &mut s,
        T1,
        "SELECT COUNT(n), SUM(n), MAX(n) FROM acct WHERE w = 2",
        vec![],
    )
    .unwrap();
    assert_eq!(r.rows, vec![vec![Value::Int(0), Value::Null, Value::Null]]);
    let r = run(
        &mut s,
        T1,
        "SELECT COUNT(*) FROM acct WHERE w = 1 AND n < $t",
        vec![Value::Int(3)],
    )
    .unwrap();
    assert_eq!(r.scalar(), Some(&Value::Int(2)));
    // LIMIT counts output rows: 0 leaves none (and needs no lock), 1 or
    // more the aggregate's one row over the whole interval.
    let count = "SELECT COUNT(*) FROM acct WHERE w = 1 LIMIT $l";
    let r = run(&mut s, T1, count, vec![Value::Int(0)]).unwrap();
    assert!(r.rows.is_empty(), "{:?}", r.rows);
    assert!(needs(&s, count, vec![Value::Int(0)]).is_empty());
    let r = run(&mut s, T1, count, vec![Value::Int(1)]).unwrap();
    assert_eq!(r.scalar(), Some(&Value::Int(5)));
    assert_eq!(
        needs(&s, count, vec![Value::Int(1)]),
        needs(&s, "SELECT COUNT(*) FROM acct WHERE w = 1", vec![])
    );
}

#[test]
fn statement_atomicity_on_overflow_and_unique_violation() {
    let mut s = store();
    run(
        &mut s,
        T1,
        "UPDATE acct SET n = $v WHERE w = 1 AND id = 4",
        vec![Value::Int(i64::MAX - 1)],
    )
    .unwrap();
    let before = snapshot(&s);
    // Rows 1..3 succeed, row 4 overflows: the statement changes nothing.
    let e = run(
        &mut s,
        T1,
        "UPDATE acct SET n = n + 5, name = 'q' WHERE w = 1",
        vec![],
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutOfRange(_)), "{e}");
    assert_eq!(snapshot(&s), before);
    s.check_consistency().unwrap();
    // Unique violation half-way: code = code * 0 + 3 style is not expressible;
    // set every code to the same value instead.
    let e = run(&mut s, T1, "UPDATE acct SET code = 42 WHERE w = 1", vec![]).unwrap_err();
    assert!(matches!(e, Error::DuplicateKey { .. }), "{e}");
    assert_eq!(snapshot(&s), before);
    // The earlier statement of T1 is still there and undoable.
    assert!(s.has_writes(T1));
    s.abort(T1);
    assert_eq!(s.get(ACCT, &pk(1, 4)).unwrap()[4], Value::Int(4));
    s.check_consistency().unwrap();
}

#[test]
fn decimal_arithmetic_and_types() {
    let mut s = store();
    run(
        &mut s,
        T1,
        "UPDATE acct SET bal = bal - 0.5 WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(s.get(ACCT, &pk(1, 1)).unwrap()[3], dec(50));
    run(
        &mut s,
        T1,
        "UPDATE acct SET bal = bal * 2 WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(s.get(ACCT, &pk(1, 1)).unwrap()[3], dec(100));
    // NULL arithmetic yields NULL, which a NOT NULL column rejects.
    let e = run(
        &mut s,
        T1,
        "UPDATE acct SET n = n + 1 WHERE w = 2 AND id = 1",
        vec![],
    );
    assert!(e.is_ok(), "n is nullable: {e:?}");
    assert_eq!(s.get(ACCT, &pk(2, 1)).unwrap()[4], Value::Null);
}

fn point(index: u32, key: Key, access: Access) -> LockNeed {
    LockNeed {
        target: LockTarget::Point {
            table: ACCT,
            index: IndexId(index),
            key,
        },
        access,
    }
}

fn range(index: u32, lo: Bound<Key>, hi: Bound<Key>) -> LockNeed {
    LockNeed {
        target: LockTarget::Range {
            table: ACCT,
            index: IndexId(index),
            lo,
            hi,
        },
        access: Access::RangeRead,
    }
}

fn k(vals: &[Value]) -> Key {
    Key::new(vals.iter().cloned())
}

#[test]
fn lock_needs_select_forms() {
    let s = store();
    let (i1, i2) = (Value::Int(1), Value::Int(2));
    assert_eq!(
        needs(&s, "SELECT n FROM acct WHERE w = 1 AND id = 2", vec![]),
        vec![point(0, pk(1, 2), Access::Read)]
    );
    assert_eq!(
        needs(&s, "SELECT n FROM acct WHERE w = $w", vec![i1.clone()]),
        vec![range(
            0,
            Bound::Included(k(&[Value::Int(1)])),
            Bound::Included(Key::prefix_upper(&[Value::Int(1)]))
        )]
    );
    assert_eq!(
        needs(&s, "SELECT n FROM acct WHERE w = 1 AND id > 2", vec![]),
        vec![range(
            0,
            Bound::Excluded(k(&[i1.clone(), i2.clone(), Value::Max])),
            Bound::Included(Key::prefix_upper(&[Value::Int(1)]))
        )]
    );
    assert_eq!(
        needs(&s, "SELECT n FROM acct", vec![]),
        vec![range(0, Bound::Unbounded, Bound::Unbounded)]
    );
    // LIMIT: the interval actually scanned.
    assert_eq!(
        needs(&s, "SELECT n FROM acct WHERE w = 1 LIMIT 2", vec![]),
        vec![range(
            0,
            Bound::Included(k(&[Value::Int(1)])),
            Bound::Included(pk(1, 2))
        )]
    );
    assert_eq!(
        needs(
            &s,
            "SELECT n FROM acct WHERE w = 1 ORDER BY id DESC LIMIT 2",
            vec![]
        ),
        vec![range(
            0,
            Bound::Included(pk(1, 4)),
            Bound::Included(Key::prefix_upper(&[Value::Int(1)]))
        )]
    );
    // Fewer rows than the limit: the whole interval.
    assert_eq!(
        needs(&s, "SELECT n FROM acct WHERE w = 2 LIMIT 5", vec![]),
        vec![range(
            0,
            Bound::Included(k(&[Value::Int(2)])),
            Bound::Included(Key::prefix_upper(&[Value::Int(2)]))
        )]
    );
    // Secondary index: range on the index plus every returned row's pk.
    // The key is (w, name, w, id): `w = 1` binds both w positions.
    let odd = Value::str("odd");
    assert_eq!(
        needs(
            &s,
            "SELECT n FROM acct WHERE w = 1 AND name = 'odd'",
            vec![]
        ),
        vec![
            range(
                1,
                Bound::Included(k(&[i1.clone(), odd.clone(), i1.clone()])),
                Bound::Included(Key::prefix_upper(&[i1.clone(), odd.clone(), i1.clone()]))
            ),
            point(0, pk(1, 1), Access::Read),
            point(0, pk(1, 3), Access::Read),
            point(0, pk(1, 5), Access::Read),
        ]
    );
}

#[test]
fn lock_needs_write_forms() {
    let s = store();
    let i1 = Value::Int(1);
    // INSERT: pk then each secondary key.
    assert_eq!(
        needs(
            &s,
            "INSERT INTO acct (w, id, name, bal, code) VALUES (1, 7, 'x', 0, 70)",
            vec![]
        ),
        vec![
            point(0, pk(1, 7), Access::Write),
            point(
                1,
                k(&[i1.clone(), Value::str("x"), i1.clone(), Value::Int(7)]),
                Access::Write
            ),
            point(
                2,
                k(&[i1.clone(), Value::Int(70), i1.clone(), Value::Int(7)]),
                Access::Write
            ),
        ]
    );
    // Point UPDATE of a non-indexed column: just the pk.
    assert_eq!(
        needs(
            &s,
            "UPDATE acct SET bal = bal + $x WHERE w = 1 AND id = 2",
            vec![Value::Int(1)]
        ),
        vec![point(0, pk(1, 2), Access::Write)]
    );
    // Point UPDATE of an indexed column: old and new secondary key.
    assert_eq!(
        needs(
            &s,
            "UPDATE acct SET name = $n WHERE w = 1 AND id = 2",
            vec![Value::str("new")]
        ),
        vec![
            point(0, pk(1, 2), Access::Write),
            point(
                1,
                k(&[i1.clone(), Value::str("even"), i1.clone(), Value::Int(2)]),
                Access::Write
            ),
            point(
                1,
                k(&[i1.clone(), Value::str("new"), i1.clone(), Value::Int(2)]),
                Access::Write
            ),
        ]
    );
    // Unchanged value: one secondary key.
    assert_eq!(
        needs(
            &s,
            "UPDATE acct SET name = 'even' WHERE w = 1 AND id = 2",
            vec![]
        )
        .len(),
        2
    );
    // Range UPDATE: the interval, then each row.
    assert_eq!(
        needs(&s, "UPDATE acct SET n = 0 WHERE w = 1 AND id >= 4", vec![]),
        vec![
            range(
                0,
                Bound::Included(pk(1, 4)),
                Bound::Included(Key::prefix_upper(&[Value::Int(1)]))
            ),
            point(0, pk(1, 4), Access::Write),
            point(0, pk(1, 5), Access::Write),
        ]
    );
    // Point DELETE: pk and the row's secondary keys.
    assert_eq!(
        needs(&s, "DELETE FROM acct WHERE w = 1 AND id = 3", vec![]),
        vec![
            point(0, pk(1, 3), Access::Write),
            point(
                1,
                k(&[i1.clone(), Value::str("odd"), i1.clone(), Value::Int(3)]),
                Access::Write
            ),
            point(
                2,
                k(&[i1.clone(), Value::Int(3), i1.clone(), Value::Int(3)]),
                Access::Write
            ),
        ]
    );
    // Point DELETE of a missing row still locks the key.
    assert_eq!(
        needs(&s, "DELETE FROM acct WHERE w = 1 AND id = 99", vec![]),
        vec![point(0, pk(1, 99), Access::Write)]
    );
    // Range DELETE.
    let n = needs(&s, "DELETE FROM acct WHERE w = 2", vec![]);
    assert_eq!(n.len(), 1 + 3);
    assert_eq!(n[0].access, Access::RangeRead);
}

#[test]
fn execute_with_unbound_params_is_an_error_not_a_panic() {
    let mut s = store();
    let st = stmt(&s, "SELECT n FROM acct WHERE w = $w AND id = $i");
    assert!(matches!(
        s.execute(T2, &st.plan, &[Value::Int(1)]),
        Err(Error::Arity { .. })
    ));
    let mut out = Vec::new();
    assert!(s.lock_needs(&st.plan, &[], &mut out).is_err());
    assert!(matches!(
        st.plan.bind(vec![Value::str("x"), Value::Int(1)]),
        Err(Error::Type { .. })
    ));
}

#[derive(Clone, Debug)]
enum Op {
    Insert(i64, i64, u8, i64, Option<i64>),
    SetName(i64, i64, u8),
    AddBal(i64, i64, i64),
    SetCode(i64, i64, Option<i64>),
    DeletePoint(i64, i64),
    DeleteRange(i64, i64),
    AddRange(i64, i64),
}

fn op() -> impl Strategy<Value = Op> {
    let w = 1i64..3;
    let id = 0i64..8;
    prop_oneof![
        (
            w.clone(),
            id.clone(),
            0u8..4,
            -50i64..50,
            proptest::option::of(0i64..6)
        )
            .prop_map(|(w, i, n, b, c)| Op::Insert(w, i, n, b, c)),
        (w.clone(), id.clone(), 0u8..4).prop_map(|(w, i, n)| Op::SetName(w, i, n)),
        (w.clone(), id.clone(), -1000i64..1000).prop_map(|(w, i, b)| Op::AddBal(w, i, b)),
        (w.clone(), id.clone(), proptest::option::of(0i64..6))
            .prop_map(|(w, i, c)| Op::SetCode(w, i, c)),
        (w.clone(), id.clone()).prop_map(|(w, i)| Op::DeletePoint(w, i)),
        (w.clone(), id.clone()).prop_map(|(w, i)| Op::DeleteRange(w, i)),
        (w, id).prop_map(|(w, i)| Op::AddRange(w, i)),
    ]
}

const NAMES: [&str; 4] = ["ann", "bob", "cy", "odd"];

fn apply(s: &mut PartitionStore, txn: TxnId, op: &Op) {
    let (sql, args): (&str, Vec<Value>) = match op {
        Op::Insert(w, i, n, b, c) => (
            "INSERT INTO acct (w, id, name, bal, code) VALUES ($w, $i, $n, $b, $c)",
            vec![
                Value::Int(*w),
                Value::Int(*i),
                Value::str(NAMES[*n as usize]),
                Value::Int(*b),
                c.map_or(Value::Null, Value::Int),
            ],
        ),
        Op::SetName(w, i, n) => (
            "UPDATE acct SET name = $n WHERE w = $w AND id = $i",
            vec![
                Value::str(NAMES[*n as usize]),
                Value::Int(*w),
                Value::Int(*i),
            ],
        ),
        Op::AddBal(w, i, b) => (
            "UPDATE acct SET bal = bal + $b WHERE w = $w AND id = $i",
            vec![Value::Int(*b), Value::Int(*w), Value::Int(*i)],
        ),
        Op::SetCode(w, i, c) => (
            "UPDATE acct SET code = $c WHERE w = $w AND id = $i",
            vec![
                c.map_or(Value::Null, Value::Int),
                Value::Int(*w),
                Value::Int(*i),
            ],
        ),
        Op::DeletePoint(w, i) => (
            "DELETE FROM acct WHERE w = $w AND id = $i",
            vec![Value::Int(*w), Value::Int(*i)],
        ),
        Op::DeleteRange(w, i) => (
            "DELETE FROM acct WHERE w = $w AND id > $i",
            vec![Value::Int(*w), Value::Int(*i)],
        ),
        Op::AddRange(w, i) => (
            "UPDATE acct SET code = $i, n = 1 WHERE w = $w AND id <= $i",
            vec![Value::Int(*i), Value::Int(*w)],
        ),
    };
    // Errors (duplicates, unique violations) are expected; atomicity is
    // what is checked.
    let before = snapshot(s);
    if run(s, txn, sql, args).is_err() {
        assert_eq!(
            snapshot(s),
            before,
            "failed statement changed state: {op:?}"
        );
    }
    s.check_consistency().unwrap();
}

proptest! {
    #[test]
    fn random_ops_then_abort_restore_exactly(
        committed in proptest::collection::vec(op(), 0..10),
        ops in proptest::collection::vec(op(), 0..30),
    ) {
        let mut s = store();
        for o in &committed {
            apply(&mut s, T1, o);
        }
        s.commit(T1);
        let before = snapshot(&s);
        for o in &ops {
            apply(&mut s, T2, o);
        }
        // The write set's after-images are the current rows.
        for (t, key, after) in s.write_set(T2) {
            prop_assert_eq!(s.get(t, &key).cloned(), after);
        }
        s.abort(T2);
        prop_assert!(snapshot(&s) == before);
        s.check_consistency().unwrap();
    }
}

/// Runs a statement with recording, returning the operations it recorded.
fn run_rec(s: &mut PartitionStore, txn: TxnId, sql: &str, args: Vec<Value>) -> Result<Vec<HOp>> {
    let st = stmt(s, sql);
    let params = st.plan.bind(args)?;
    let mut ops = Vec::new();
    s.execute_recorded(txn, &st.plan, &params, Some(&mut ops))?;
    Ok(ops)
}

fn version_of(op: &HOp) -> (u64, Option<u64>) {
    match op {
        HOp::Read { version, .. } => (*version, None),
        HOp::Write { version, prev, .. } => (*version, Some(*prev)),
        HOp::RangeRead { .. } => panic!("not a point operation: {op:?}"),
    }
}

#[test]
fn recording_is_off_by_default_and_records_nothing() {
    let mut s = store();
    assert!(!s.is_recording());
    let ops = run_rec(
        &mut s,
        T1,
        "UPDATE acct SET n = 9 WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert!(ops.is_empty());
}

#[test]
fn recorded_writes_chain_versions_and_reads_see_them() {
    let mut s = store();
    s.enable_recording(1000);
    let r0 = run_rec(
        &mut s,
        T1,
        "SELECT n FROM acct WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(
        version_of(&r0[0]),
        (0, None),
        "loaded rows are at version 0"
    );
    let w1 = run_rec(
        &mut s,
        T1,
        "UPDATE acct SET n = 9 WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(version_of(&w1[0]), (1001, Some(0)));
    let w2 = run_rec(
        &mut s,
        T1,
        "UPDATE acct SET n = n + 1 WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(version_of(&w2[0]), (1002, Some(1001)));
    s.commit(T1);
    let r = run_rec(
        &mut s,
        T2,
        "SELECT n FROM acct WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(version_of(&r[0]), (1002, None));
    // The write names the secondary keys before and after.
    let HOp::Write { ix, kind, .. } = &w1[0] else {
        panic!()
    };
    assert_eq!(*kind, WriteKind::Update);
    assert_eq!(ix.len(), 2);
    assert!(ix.iter().all(|c| c.old.is_some() && c.new.is_some()));
}

/// A coordinator that missed a statement's answer learns what the
/// statement wrote from its abort's answer (`undone_writes`): the writes an
/// aborted transaction reported, kept after the abort; none of a committed
/// one.
#[test]
fn an_aborted_transaction_s_writes_are_kept_for_its_coordinator() {
    let mut s = store();
    s.enable_recording(1000);
    let set = "UPDATE acct SET n = 9 WHERE w = 1 AND id = 1";
    run_rec(
        &mut s,
        T1,
        "SELECT n FROM acct WHERE w = 1 AND id = 2",
        vec![],
    )
    .unwrap();
    let w = run_rec(&mut s, T1, set, vec![]).unwrap();
    assert!(s.undone_writes(T1).is_empty(), "not aborted yet");
    s.abort(T1);
    assert_eq!(s.undone_writes(T1), w, "its write, not its read");
    assert_eq!(s.undone_writes(T1), w, "again for a resent abort");
    run_rec(&mut s, T2, set, vec![]).unwrap();
    s.commit(T2);
    assert!(s.undone_writes(T2).is_empty(), "committed");
}

#[test]
fn abort_and_failed_statements_restore_versions() {
    let mut s = store();
    s.enable_recording(0);
    run_rec(
        &mut s,
        T1,
        "UPDATE acct SET n = 9 WHERE w = 1 AND id = 2",
        vec![],
    )
    .unwrap();
    s.abort(T1);
    let r = run_rec(
        &mut s,
        T2,
        "SELECT n FROM acct WHERE w = 1 AND id = 2",
        vec![],
    )
    .unwrap();
    assert_eq!(version_of(&r[0]).0, 0, "an aborted write's version is gone");
    // A range update that fails half-way (unique violation on `code`)
    // records nothing and leaves versions as they were.
    let mut ops = Vec::new();
    let st = stmt(&s, "UPDATE acct SET code = 3 WHERE w = 1 AND id >= 1");
    let params = st.plan.bind(vec![]).unwrap();
    assert!(s
        .execute_recorded(T2, &st.plan, &params, Some(&mut ops))
        .is_err());
    assert!(ops.is_empty());
    let r = run_rec(
        &mut s,
        T2,
        "SELECT n FROM acct WHERE w = 1 AND id = 1",
        vec![],
    )
    .unwrap();
    assert_eq!(version_of(&r[0]).0, 0);
}

#[test]
fn deletes_leave_tombstones_that_reads_observe() {
    let mut s = store();
    s.enable_recording(0);
    let d = run_rec(
        &mut s,
        T1,
        "DELETE FROM acct WHERE w = 1 AND id = 3",
        vec![],
    )
    .unwrap();
    let (tomb, prev) = version_of(&d[0]);
    assert_eq!(prev, Some(0));
    s.commit(T1);
    let r = run_rec(
        &mut s,
        T2,
        "SELECT n FROM acct WHERE w = 1 AND id = 3",
        vec![],
    )
    .unwrap();
    assert_eq!(
        version_of(&r[0]).0,
        tomb,
        "the absent key reports its tombstone"
    );
    let rr = run_rec(&mut s, T2, "SELECT id FROM acct WHERE w = 1", vec![]).unwrap();
    let HOp::RangeRead { seen, .. } = &rr[0] else {
        panic!("{rr:?}")
    };
    assert_eq!(seen.len(), 5, "four live rows and one tombstone: {seen:?}");
    assert!(seen
        .iter()
        .any(|x| x.deleted && x.version == tomb && x.key == pk(1, 3)));
    let ins = run_rec(
        &mut s,
        T2,
        "INSERT INTO acct (w, id, name, bal) VALUES (1, 3, 'x', 1.00)",
        vec![],
    )
    .unwrap();
    assert_eq!(
        version_of(&ins[0]).1,
        Some(tomb),
        "a re-insert replaces the tombstone"
    );
}

#[test]
fn range_reads_report_rows_walked_and_the_interval_observed() {
    let mut s = store();
    s.enable_recording(0);
    // The residual filter drops rows, but they were observed.
    let rr = run_rec(
        &mut s,
        T1,
        "SELECT id FROM acct WHERE w = 1 AND n > 4",
        vec![],
    )
    .unwrap();
    let HOp::RangeRead { seen, .. } = &rr[0] else {
        panic!()
    };
    assert_eq!(seen.len(), 5);
    // LIMIT stops the scan: the interval ends where it stopped.
    let rr = run_rec(
        &mut s,
        T1,
        "SELECT id FROM acct WHERE w = 1 ORDER BY id LIMIT 2",
        vec![],
    )
    .unwrap();
    let HOp::RangeRead {
        seen, hi, index, ..
    } = &rr[0]
    else {
        panic!()
    };
    assert_eq!(*index, 0);
    assert_eq!(seen.len(), 2);
    assert_eq!(**hi, Bound::Included(pk(1, 2)));
    // A descending scan stops at its low end.
    let rr = run_rec(
        &mut s,
        T1,
        "SELECT id FROM acct WHERE w = 1 ORDER BY id DESC LIMIT 1",
        vec![],
    )
    .unwrap();
    let HOp::RangeRead { lo, seen, .. } = &rr[0] else {
        panic!()
    };
    assert_eq!(**lo, Bound::Included(pk(1, 5)));
    assert_eq!(seen.len(), 1);
    // A secondary-index scan reports index 1 and the rows by primary key.
    let rr = run_rec(
        &mut s,
        T1,
        "SELECT id FROM acct WHERE w = 1 AND name = 'odd'",
        vec![],
    )
    .unwrap();
    let HOp::RangeRead { index, seen, .. } = &rr[0] else {
        panic!()
    };
    assert_eq!(*index, 1);
    let mut keys: Vec<Key> = seen.iter().map(|x| x.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, vec![pk(1, 1), pk(1, 3), pk(1, 5)]);
}

// Callas' Runtime Pipelining lets same-group transactions increment one
// row in turn before either commits: a blind increment is undone by
// subtracting it, so either can abort alone.
#[test]
fn interleaved_blind_increments_undo_independently() {
    let mut s = store();
    let add = "UPDATE acct SET bal = bal + $d WHERE w = $w AND id = $id";
    let bal = |s: &PartitionStore| s.get(ACCT, &pk(1, 1)).unwrap()[3].clone();
    run(&mut s, T1, add, vec![dec(10), Value::Int(1), Value::Int(1)]).unwrap();
    run(&mut s, T2, add, vec![dec(7), Value::Int(1), Value::Int(1)]).unwrap();
    assert_eq!(bal(&s), dec(117));
    s.abort(T1);
    assert_eq!(bal(&s), dec(107), "T2's increment survives T1's abort");
    s.commit(T2);
    assert_eq!(bal(&s), dec(107));
}

// A cascading abort undoes the transactions' changes together, newest
// first across all of them, whatever the order they wrote in.
#[test]
fn abort_all_undoes_interleaved_writes_newest_first() {
    let mut s = store();
    let set = "UPDATE acct SET n = $n WHERE w = $w AND id = $id";
    let n = |s: &PartitionStore, id: i64| s.get(ACCT, &pk(1, id)).unwrap()[4].clone();
    // T1 then T2 on row 1; T2 then T1 on row 2 (a cycle no single
    // transaction order undoes correctly).
    run(
        &mut s,
        T1,
        set,
        vec![Value::Int(10), Value::Int(1), Value::Int(1)],
    )
    .unwrap();
    run(
        &mut s,
        T2,
        set,
        vec![Value::Int(20), Value::Int(1), Value::Int(1)],
    )
    .unwrap();
    run(
        &mut s,
        T2,
        set,
        vec![Value::Int(21), Value::Int(1), Value::Int(2)],
    )
    .unwrap();
    run(
        &mut s,
        T1,
        set,
        vec![Value::Int(11), Value::Int(1), Value::Int(2)],
    )
    .unwrap();
    let before = snapshot(&store());
    s.abort_all(&[T1, T2]);
    assert_eq!((n(&s, 1), n(&s, 2)), (Value::Int(1), Value::Int(2)));
    assert_eq!(snapshot(&s), before);
    assert_eq!(s.active_txns(), 0);
}

// Pipelined transactions write over each other's uncommitted changes; the
// recorded version of a row stays the newest write still standing, and
// never names an undone one.
#[test]
fn recorded_versions_survive_undo_under_a_later_write() {
    let mut s = store();
    s.enable_recording(0);
    let add = "UPDATE acct SET bal = bal + $d WHERE w = $w AND id = $id";
    let read = |s: &mut PartitionStore| {
        let reader = TxnId { ts: 3, id: 3 };
        let ops = run_rec(
            s,
            reader,
            "SELECT bal FROM acct WHERE w = 1 AND id = 1",
            vec![],
        )
        .unwrap();
        version_of(&ops[0]).0
    };
    let args = |d| vec![dec(d), Value::Int(1), Value::Int(1)];
    let w1 = run_rec(&mut s, T1, add, args(10)).unwrap();
    let w2 = run_rec(&mut s, T2, add, args(7)).unwrap();
    let (v1, _) = version_of(&w1[0]);
    let (v2, p2) = version_of(&w2[0]);
    assert_eq!(p2, Some(v1));
    // Each increment records what it changed, and that it is one.
    let HOp::Write { cols: Some(c), .. } = &w2[0] else {
        panic!("no column detail: {w2:?}");
    };
    assert_eq!((c.w.as_slice(), c.add), (&[3u16][..], true));
    s.abort(T1);
    assert_eq!(read(&mut s), v2, "T2's version still names the row");
    s.abort(T2);
    assert_eq!(read(&mut s), 0, "back past T1's undone version");
    // Together (a cascade), newest first: the row returns to its start.
    run_rec(&mut s, T1, add, args(1)).unwrap();
    run_rec(&mut s, T2, add, args(2)).unwrap();
    s.abort_all(&[T1, T2]);
    assert_eq!(read(&mut s), 0);
}

#[test]
fn replace_row_overwrites_a_whole_row_with_its_index_entries() -> Result<()> {
    let catalog = Arc::new(brine_sql::parse_schema(
        "CREATE TABLE t (g INT, id INT, name VARCHAR(10) NOT NULL, PRIMARY KEY (g, id), \
         UNIQUE (g, name));",
    )?);
    let t = catalog.table_by_name("t")?.id;
    let mut s = PartitionStore::new(catalog);
    let row = |id: i64, name: &str| vec![Value::Int(1), Value::Int(id), Value::Str(name.into())];
    let pk = |id: i64| Key::new([Value::Int(1), Value::Int(id)]);
    s.replace_row(t, row(1, "a"))?;
    s.replace_row(t, row(2, "b"))?;
    s.replace_row(t, row(1, "c"))?;
    assert_eq!(s.len(t), 2);
    assert_eq!(s.get(t, &pk(1)), Some(&row(1, "c")));
    // `a` is free again; `b` is taken by row 2, and the failed replace
    // leaves row 1 as it was.
    s.replace_row(t, row(3, "a"))?;
    let dup = s.replace_row(t, row(1, "b"));
    assert!(matches!(dup, Err(Error::DuplicateKey { .. })), "{dup:?}");
    assert_eq!(s.get(t, &pk(1)), Some(&row(1, "c")));
    s.check_consistency()?;
    Ok(())
}

/// `txn`'s redo as the log would hold it, decoded.
fn redo_of(s: &PartitionStore, txn: TxnId) -> Vec<crate::wal::RedoOp> {
    let mut buf = Vec::new();
    s.encode_redo(txn, &mut buf);
    crate::wal::record::decode_redo(&mut crate::wal::codec::Decoder::new(&buf)).unwrap()
}

/// Replays redo lists in order on a copy of `base`, as recovery does.
fn replayed(base: &PartitionStore, lists: &[&[crate::wal::RedoOp]]) -> PartitionStore {
    let mut r = PartitionStore::new(base.catalog().clone());
    base.for_each_committed_row(|t, row| r.load(t, row.clone()).unwrap());
    for ops in lists {
        for op in ops.iter() {
            r.apply_redo(op.clone()).unwrap();
        }
    }
    r
}

/// A store whose rows several running transactions may change, and a
/// copy of its committed rows (what recovery starts from).
fn shared_store() -> (PartitionStore, PartitionStore) {
    let mut s = store();
    s.set_shared_rows(true);
    let base = replayed(&s, &[]);
    (s, base)
}

/// Commits or aborts T2 (T1 committed before it): the redo lists the log
/// then holds, T1's first.
fn end_t2<'a>(
    s: &mut PartitionStore,
    t2_commits: bool,
    r1: &'a [crate::wal::RedoOp],
    r2: &'a [crate::wal::RedoOp],
) -> Vec<&'a [crate::wal::RedoOp]> {
    if t2_commits {
        s.commit(T2);
        vec![r1, r2]
    } else {
        s.abort(T2);
        vec![r1]
    }
}

// Under Runtime Pipelining two running transactions increment one row.
// With after-images, the first to commit would log the other's increment
// (or the second would lose the first's): each logs its own deltas, so a
// replay of whichever committed, in either order, is exact. A checkpoint
// taken meanwhile holds the row as committed.
#[test]
fn interleaved_increments_log_their_own_deltas() {
    let add = "UPDATE acct SET bal = bal + $d WHERE w = $w AND id = $id";
    let bal = |s: &PartitionStore| s.get(ACCT, &pk(1, 1)).unwrap()[3].clone();
    for t2_commits in [true, false] {
        let (mut s, base) = shared_store();
        run(&mut s, T1, add, vec![dec(10), Value::Int(1), Value::Int(1)]).unwrap();
        run(&mut s, T2, add, vec![dec(7), Value::Int(1), Value::Int(1)]).unwrap();
        run(&mut s, T1, add, vec![dec(1), Value::Int(1), Value::Int(1)]).unwrap();
        let checkpoint = replayed(&s, &[]);
        assert_eq!(
            bal(&checkpoint),
            dec(100),
            "a checkpoint holds the committed row"
        );
        // T2 prepares first (its redo taken now), T1 commits first.
        let (r2, r1) = (redo_of(&s, T2), redo_of(&s, T1));
        assert!(
            matches!(&r1[..], [crate::wal::RedoOp::Update { set, add, .. }] if set.is_empty() && add == &[(3, dec(11))]),
            "{r1:?}"
        );
        s.commit(T1);
        let logged = end_t2(&mut s, t2_commits, &r1, &r2);
        let after = replayed(&base, &logged);
        assert_eq!(bal(&after), bal(&s), "T2 commits: {t2_commits}");
        assert_eq!(bal(&s), dec(if t2_commits { 118 } else { 111 }));
    }
}

// A write over another running transaction's write (Runtime Pipelining:
// the later one depends on the earlier and commits after it) logs the row
// as the earlier transaction left it, not with the later one's value.
#[test]
fn a_row_overwritten_by_a_running_transaction_logs_its_own_value() {
    let set = "UPDATE acct SET n = $n WHERE w = $w AND id = $id";
    let n = |s: &PartitionStore| s.get(ACCT, &pk(1, 2)).unwrap()[4].clone();
    for t2_commits in [true, false] {
        let (mut s, base) = shared_store();
        run(
            &mut s,
            T1,
            set,
            vec![Value::Int(10), Value::Int(1), Value::Int(2)],
        )
        .unwrap();
        run(
            &mut s,
            T2,
            set,
            vec![Value::Int(20), Value::Int(1), Value::Int(2)],
        )
        .unwrap();
        let r1 = redo_of(&s, T1);
        assert_eq!(n(&replayed(&base, &[&r1])), Value::Int(10));
        s.commit(T1);
        let r2 = redo_of(&s, T2);
        let logged = end_t2(&mut s, t2_commits, &r1, &r2);
        assert_eq!(
            n(&replayed(&base, &logged)),
            n(&s),
            "T2 commits: {t2_commits}"
        );
    }
}

// A prepared transaction's redo is applied when its outcome is read, after
// what committed between its prepare and its commit. Under Runtime
// Pipelining that may be another running transaction's increment of the
// same row (another column): the prepared update's redo names only the
// columns it set, so the increment stays.
#[test]
fn a_prepared_update_does_not_overwrite_an_increment_committed_meanwhile() {
    let set = "UPDATE acct SET n = $n WHERE w = $w AND id = $id";
    let add = "UPDATE acct SET bal = bal + $d WHERE w = $w AND id = $id";
    let (mut s, base) = shared_store();
    run(
        &mut s,
        T1,
        set,
        vec![Value::Int(10), Value::Int(1), Value::Int(3)],
    )
    .unwrap();
    let r1 = redo_of(&s, T1); // its prepare
    run(&mut s, T2, add, vec![dec(5), Value::Int(1), Value::Int(3)]).unwrap();
    let r2 = redo_of(&s, T2); // its one-round commit
    s.commit(T2);
    s.commit(T1); // its outcome, after T2's commit in the log
    let after = replayed(&base, &[&r2, &r1]);
    assert_eq!(after.get(ACCT, &pk(1, 3)), s.get(ACCT, &pk(1, 3)));
    assert_eq!(s.get(ACCT, &pk(1, 3)).unwrap()[3], dec(305));
}

/// Issue 39: a partition recovered from its checkpoint and log goes on
/// from the versions the history named. The checkpoint keeps the
/// committed versions (an open writer's replaced by what it replaced) and
/// each in-doubt transaction's, and an open BASE context what it recorded;
/// a Versions record survives its encoding.
#[test]
fn recorded_versions_survive_a_checkpoint_and_the_log() {
    use crate::checkpoint::{load_checkpoint, BaseContexts};
    use crate::wal::record::{encode_versions, Record, RecordKind, VERSION};
    const T3: TxnId = TxnId { ts: 3, id: 3 };
    let mut s = store();
    s.enable_recording(1000);
    let set = |id: i64| format!("UPDATE acct SET n = 7 WHERE w = 1 AND id = {id}");
    run_rec(&mut s, T1, &set(1), vec![]).unwrap();
    let w = run_rec(&mut s, T1, &set(1), vec![]).unwrap();
    let committed = version_of(&w[0]).0;
    assert_eq!(s.versions_of(T1).len(), 1, "the key's last version only");
    assert_eq!(s.versions_of(T1)[0].state.version, committed);
    s.commit(T1);
    // T2 is prepared (in doubt) at the checkpoint; T3 still runs.
    let prepared = version_of(&run_rec(&mut s, T2, &set(2), vec![]).unwrap()[0]).0;
    run_rec(&mut s, T3, &set(1), vec![]).unwrap();
    // An open BASE context keeps what its subtransaction recorded.
    let mut base = BaseContexts::default();
    base.commit(crate::wal::record::BaseContext {
        sub: T3,
        owner: T1,
        intro: None,
        entries: vec![],
        locked: vec![],
        read: vec![],
        recorded: vec![b"[\"ops\"]".to_vec()],
    });
    let bytes = s.encode_checkpoint(0, Default::default(), &[(T2, 0)], &base);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    std::fs::write(&path, bytes).unwrap();
    let mut loaded = load_checkpoint(&path, s.catalog(), 0).unwrap();
    assert_eq!(loaded.base.open[&T1].recorded, base.open[&T1].recorded);
    let in_doubt = std::mem::take(&mut loaded.in_doubt);
    assert_eq!(in_doubt.len(), 1);
    assert_eq!(in_doubt[0].versions[0].state.version, prepared);
    let mut r = loaded.store;
    r.enable_recording(5000);
    let read = |r: &mut PartitionStore, id: i64, txn| {
        let sql = format!("SELECT n FROM acct WHERE w = 1 AND id = {id}");
        version_of(&run_rec(r, txn, &sql, vec![]).unwrap()[0]).0
    };
    assert_eq!(
        read(&mut r, 1, T1),
        committed,
        "T3's open write is not in it"
    );
    assert_eq!(read(&mut r, 2, T1), 0, "T2 in doubt: not applied yet");
    assert_eq!(read(&mut r, 3, T1), 0, "never written");
    r.apply_versions(in_doubt[0].versions.clone());
    assert_eq!(read(&mut r, 2, T1), prepared, "T2 decided committed");
    // New writes draw from the new incarnation's range.
    let w = run_rec(&mut r, T3, &set(3), vec![]).unwrap();
    assert_eq!(version_of(&w[0]), (5001, Some(0)));
    // The log's record.
    let mut buf = Vec::new();
    encode_versions(&mut buf, T2, &in_doubt[0].versions);
    let decoded = Record::decode(RecordKind::Versions as u8, VERSION, &buf).unwrap();
    assert_eq!(
        decoded,
        Record::Versions {
            txn: T2,
            versions: in_doubt[0].versions.clone()
        }
    );
}

/// Recovery keeps, per key, the version written last: under Runtime
/// Pipelining a transaction can write a row over another's uncommitted
/// write (other columns) and commit first, so the log holds the later
/// write's version before the earlier one's. A later incarnation's
/// version (another range) replaces an earlier one's whatever its id.
#[test]
fn recovery_keeps_the_version_written_last() {
    use crate::record::{KeyVersion, VerState};
    let mut s = store();
    s.enable_recording(5 << crate::VERSION_RANGE_BITS);
    let at = |version: u64| KeyVersion {
        table: ACCT,
        key: pk(1, 1),
        state: VerState {
            version,
            deleted: false,
        },
    };
    let read = |s: &mut PartitionStore| {
        let sql = "SELECT n FROM acct WHERE w = 1 AND id = 1";
        version_of(&run_rec(s, T1, sql, vec![]).unwrap()[0]).0
    };
    let first = (3 << crate::VERSION_RANGE_BITS) + 10;
    // The later write's commit came first in the log.
    s.apply_versions(vec![at(first + 1)]);
    s.apply_versions(vec![at(first)]);
    assert_eq!(read(&mut s), first + 1, "the write made last");
    // A takeover's incarnation drew a lower range; its versions come
    // after the earlier incarnation's in the log.
    let next = (2 << crate::VERSION_RANGE_BITS) + 1;
    s.apply_versions(vec![at(next)]);
    assert_eq!(read(&mut s), next, "the later incarnation's");
}
