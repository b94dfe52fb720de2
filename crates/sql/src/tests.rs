use super::*;
use brine_core::{Catalog, DataType, Decimal, Error, IndexId, Key, Value};
use std::ops::Bound;
use std::sync::Arc;

const SCHEMA: &str = "
    CREATE TABLE district (
        d_w_id INT, d_id INT, d_name VARCHAR(10), d_ytd DECIMAL(12,2) NOT NULL,
        d_next_o_id INT NOT NULL,
        PRIMARY KEY (d_w_id, d_id)
    );
    CREATE TABLE customer (
        c_w_id INT, c_d_id INT, c_id INT, c_last VARCHAR(16) NOT NULL, c_first VARCHAR(16),
        c_balance DECIMAL(12,2), c_since TIMESTAMP,
        PRIMARY KEY (c_w_id, c_d_id, c_id)
    ) PARTITION BY (c_w_id);
    CREATE INDEX customer_by_name ON customer (c_w_id, c_d_id, c_last, c_first);
    CREATE TABLE stock (
        s_w_id INT, s_i_id INT, s_quantity INT NOT NULL, s_ytd INT,
        PRIMARY KEY (s_w_id, s_i_id)
    );
    CREATE TABLE item (i_id INT PRIMARY KEY, i_name TEXT, i_price DECIMAL(5,2));
    CREATE TABLE byname (k INT, b INT, v INT, PRIMARY KEY (k, b)) PARTITION BY (b);
";

fn cat() -> Catalog {
    parse_schema(SCHEMA).unwrap()
}

fn select(p: &Plan) -> &SelectPlan {
    match p.statement() {
        Statement::Select(s) => s,
        other => panic!("not a select: {other:?}"),
    }
}

#[test]
fn point_select_binds_full_pk() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT d_next_o_id, d_ytd FROM district WHERE d_w_id = $w AND d_id = $d",
    )
    .unwrap();
    assert_eq!(p.kind(), StatementKind::Select);
    assert_eq!(p.params().len(), 2);
    assert_eq!(p.params()[0].name, "w");
    assert_eq!(p.params()[1].name, "d");
    assert_eq!(p.params()[0].ty, DataType::Int);
    let s = select(&p);
    assert!(s.pred.point);
    assert_eq!(s.pred.index, IndexId::PRIMARY);
    assert_eq!(s.projection, Projection::Columns(vec![4, 3]));
    assert_eq!(
        &p.columns()[..],
        &["d_next_o_id".to_string(), "d_ytd".into()]
    );
    let a = p.access();
    assert_eq!(a.columns_read, vec![3, 4]);
    assert!(a.columns_written.is_empty());
    assert_eq!(
        a.key_params,
        vec![(0, Operand::Param(0)), (1, Operand::Param(1))]
    );
    assert!(!a.range);
    assert_eq!(
        p.route(&[Value::Int(3), Value::Int(4)], &c),
        Route::Partition(Value::Int(3))
    );
}

#[test]
fn params_reversed_comparison_and_colon_syntax() {
    let c = cat();
    let p = prepare(&c, "SELECT * FROM district WHERE :w = d_w_id AND d_id = 7").unwrap();
    assert_eq!(p.params().len(), 1);
    assert_eq!(p.params()[0].name, "w");
    let s = select(&p);
    assert!(s.pred.point);
    assert_eq!(s.pred.eq[1], Operand::Literal(Value::Int(7)));
    assert_eq!(p.columns().len(), 5);
}

#[test]
fn secondary_index_chosen_for_longest_prefix_with_order_by() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT c_id, c_balance FROM customer WHERE c_w_id = $w AND c_d_id = $d \
         AND c_last = $last ORDER BY c_first",
    )
    .unwrap();
    let s = select(&p);
    assert_eq!(s.pred.index, IndexId(1));
    assert_eq!(s.pred.eq.len(), 3);
    assert!(!s.desc);
    assert_eq!(p.params()[2].ty, DataType::Str { max_len: Some(16) });
    // Secondary predicate columns are mutable, so they count as read.
    assert_eq!(p.access().columns_read, vec![0, 1, 2, 3, 5]);
    assert!(p.access().range);
    assert!(p.is_single_partition());
}

#[test]
fn prefix_range_desc_limit() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT c_id FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_id BETWEEN $lo AND $hi \
         ORDER BY c_id DESC LIMIT 3",
    )
    .unwrap();
    let s = select(&p);
    assert_eq!(s.pred.index, IndexId::PRIMARY);
    assert!(!s.pred.point);
    assert_eq!(s.pred.lo, Bound::Included(Operand::Param(2)));
    assert_eq!(s.pred.hi, Bound::Included(Operand::Param(3)));
    assert!(s.desc);
    assert_eq!(s.limit, Some(Operand::Literal(Value::Int(3))));
    assert_eq!(p.access().range_column, Some(2));
    let params = [1, 2, 10, 20].map(Value::Int);
    let (lo, hi) = s.pred.bounds(&params).unwrap();
    assert_eq!(lo, Bound::Included(Key::new([1, 2, 10].map(Value::Int))));
    assert_eq!(
        hi,
        Bound::Included(Key::new([
            Value::Int(1),
            Value::Int(2),
            Value::Int(20),
            Value::Max
        ]))
    );
}

#[test]
fn prefix_bounds_and_strict_range_bounds() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT * FROM customer WHERE c_w_id = $w AND c_d_id = $d",
    )
    .unwrap();
    let (lo, hi) = select(&p)
        .pred
        .bounds(&[Value::Int(1), Value::Int(2)])
        .unwrap();
    assert_eq!(
        lo,
        Bound::Included(Key::new([Value::Int(1), Value::Int(2)]))
    );
    assert_eq!(
        hi,
        Bound::Included(Key::prefix_upper(&[Value::Int(1), Value::Int(2)]))
    );
    let p = prepare(
        &c,
        "SELECT * FROM customer WHERE c_w_id = 1 AND c_d_id > 2 AND c_d_id < 5",
    )
    .unwrap();
    let (lo, hi) = select(&p).pred.bounds(&[]).unwrap();
    assert_eq!(
        lo,
        Bound::Excluded(Key::new([Value::Int(1), Value::Int(2), Value::Max]))
    );
    assert_eq!(
        hi,
        Bound::Excluded(Key::new([Value::Int(1), Value::Int(5)]))
    );
    // A full scan is unbounded and broadcasts.
    let p = prepare(&c, "SELECT * FROM customer").unwrap();
    assert_eq!(
        select(&p).pred.bounds(&[]).unwrap(),
        (Bound::Unbounded, Bound::Unbounded)
    );
    assert_eq!(p.route(&[], &c), Route::Broadcast);
}

#[test]
fn residual_filter_for_non_key_column() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT COUNT(*) FROM stock WHERE s_w_id = $w AND s_quantity < $threshold",
    )
    .unwrap();
    let s = select(&p);
    assert_eq!(s.pred.eq.len(), 1);
    assert_eq!(s.pred.filters.len(), 1);
    assert_eq!(s.pred.filters[0].column, 2);
    assert_eq!(s.pred.filters[0].op, CmpOp::Lt);
    assert_eq!(p.params()[1].name, "threshold");
    assert_eq!(p.access().columns_read, vec![2]);
    assert!(
        matches!(&s.projection, Projection::Aggregates(a) if a[0] == Aggregate { func: AggFunc::Count, column: None })
    );
}

#[test]
fn aggregates() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT MIN(c_id), MAX(c_balance), SUM(c_balance), COUNT(c_first) FROM customer \
         WHERE c_w_id = $w AND c_d_id = $d",
    )
    .unwrap();
    let Projection::Aggregates(a) = &select(&p).projection else {
        panic!()
    };
    assert_eq!(a.len(), 4);
    assert_eq!(a[2].func, AggFunc::Sum);
    assert_eq!(p.access().columns_read, vec![2, 4, 5]);
    assert!(matches!(
        prepare(&c, "SELECT SUM(c_last) FROM customer"),
        Err(Error::Type { .. })
    ));
}

#[test]
fn order_by_must_follow_index() {
    let c = cat();
    let e = prepare(
        &c,
        "SELECT * FROM customer WHERE c_w_id = $w AND c_d_id = $d ORDER BY c_balance",
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Sql(m) if m.contains("ORDER BY must follow")),
        "{e}"
    );
    // Order by an equality-bound column is fine; so is the full remaining key.
    prepare(
        &c,
        "SELECT * FROM customer WHERE c_w_id = $w ORDER BY c_w_id, c_d_id DESC, c_id DESC",
    )
    .unwrap();
    assert!(prepare(
        &c,
        "SELECT * FROM customer WHERE c_w_id = $w ORDER BY c_d_id ASC, c_id DESC",
    )
    .is_err());
}

#[test]
fn insert_plan_and_descriptor() {
    let c = cat();
    let p = prepare(
        &c,
        "INSERT INTO customer (c_w_id, c_d_id, c_id, c_last, c_balance) VALUES ($w, $d, $id, 'x', $bal)",
    )
    .unwrap();
    let Statement::Insert(ins) = p.statement() else {
        panic!()
    };
    assert_eq!(ins.values[3], Some(Operand::Literal(Value::str("x"))));
    assert_eq!(ins.values[4], None);
    assert_eq!(p.params()[3].name, "bal");
    assert!(p.params()[3].nullable);
    assert!(!p.params()[0].nullable);
    let a = p.access();
    assert_eq!(a.kind, StatementKind::Insert);
    assert_eq!(a.columns_written, (0..7).collect::<Vec<_>>());
    assert_eq!(a.key_params.len(), 3);
    // Int coerces into a DECIMAL parameter.
    let bound = p
        .bind(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(3),
            Value::Int(5),
        ])
        .unwrap();
    assert_eq!(bound[3], Value::Decimal(Decimal::new(500, 2)));
    assert_eq!(p.route(&bound, &c), Route::Partition(Value::Int(1)));
    // Missing NOT NULL column.
    assert_eq!(
        prepare(
            &c,
            "INSERT INTO customer (c_w_id, c_d_id, c_id) VALUES (1, 2, 3)"
        )
        .unwrap_err(),
        Error::NotNull {
            table: "customer".into(),
            column: "c_last".into()
        }
    );
    // Wrong arity of VALUES.
    assert!(matches!(
        prepare(&c, "INSERT INTO item VALUES (1, 'a')"),
        Err(Error::Arity { .. })
    ));
    // Literal of the wrong type.
    assert!(matches!(
        prepare(&c, "INSERT INTO item VALUES ('one', 'a', 1.5)"),
        Err(Error::Type { .. })
    ));
}

#[test]
fn update_blind_increment() {
    let c = cat();
    let p = prepare(
        &c,
        "UPDATE stock SET s_ytd = s_ytd + $x WHERE s_w_id = $w AND s_i_id = $k",
    )
    .unwrap();
    let a = p.access();
    assert!(a.blind_increment);
    assert_eq!(a.kind, StatementKind::Update);
    assert_eq!(a.columns_written, vec![3]);
    assert_eq!(a.columns_read, vec![3]);
    assert_eq!(
        a.key_params,
        vec![(0, Operand::Param(1)), (1, Operand::Param(2))]
    );
    assert_eq!(p.params()[0].name, "x");
    assert_eq!(p.params()[0].ty, DataType::Int);
    assert!(!a.range);

    let p = prepare(
        &c,
        "UPDATE district SET d_ytd = d_ytd + $amount WHERE d_w_id = $w AND d_id = $d",
    )
    .unwrap();
    assert!(p.access().blind_increment);
    // The column's scale; any precision, since only the sum is stored.
    assert_eq!(
        p.params()[0].ty,
        DataType::Decimal {
            precision: 18,
            scale: 2
        }
    );

    // Reads another column: not blind.
    let p = prepare(
        &c,
        "UPDATE stock SET s_quantity = $q, s_ytd = s_ytd + 1 WHERE s_w_id = $w AND s_i_id = $k",
    )
    .unwrap();
    assert!(!p.access().blind_increment);
    let p = prepare(
        &c,
        "UPDATE stock SET s_ytd = s_ytd + 1 WHERE s_w_id = $w AND s_i_id = $k AND s_quantity > 3",
    )
    .unwrap();
    assert!(!p.access().blind_increment);
    assert_eq!(p.access().columns_read, vec![2, 3]);
    let p = prepare(
        &c,
        "UPDATE stock SET s_ytd = s_quantity * 2 WHERE s_w_id = 1",
    )
    .unwrap();
    assert!(!p.access().blind_increment);
    assert!(p.access().range);
}

#[test]
fn update_errors() {
    let c = cat();
    assert!(matches!(
        prepare(&c, "UPDATE stock SET s_i_id = 3 WHERE s_w_id = 1 AND s_i_id = 2"),
        Err(Error::Sql(m)) if m.contains("primary-key")
    ));
    assert!(matches!(
        prepare(&c, "UPDATE stock SET nope = 3 WHERE s_w_id = 1"),
        Err(Error::UnknownColumn { .. })
    ));
    assert!(matches!(
        prepare(&c, "UPDATE stock SET s_ytd = s_ytd / 2 WHERE s_w_id = 1"),
        Err(Error::Sql(_))
    ));
}

#[test]
fn delete_plan() {
    let c = cat();
    let p = prepare(&c, "DELETE FROM stock WHERE s_w_id = $w AND s_i_id >= $lo").unwrap();
    let Statement::Delete(d) = p.statement() else {
        panic!()
    };
    assert!(!d.pred.point);
    assert_eq!(d.pred.lo, Bound::Included(Operand::Param(1)));
    assert!(p.access().range);
    assert_eq!(p.access().columns_written.len(), 4);
}

#[test]
fn routing_by_non_first_partition_column() {
    let c = cat();
    let p = prepare(&c, "SELECT v FROM byname WHERE k = $k").unwrap();
    assert_eq!(p.route(&[Value::Int(1)], &c), Route::Broadcast);
    let p = prepare(&c, "SELECT v FROM byname WHERE k = $k AND b = $b").unwrap();
    assert_eq!(
        p.route(&[Value::Int(1), Value::Int(9)], &c),
        Route::Partition(Value::Int(9))
    );
    // Residual equality on the partition column also routes.
    let p = prepare(&c, "SELECT v FROM byname WHERE k > $k AND b = $b").unwrap();
    assert!(p.is_single_partition());
    assert_eq!(select(&p).pred.filters.len(), 1);
    assert_eq!(
        p.route(&[Value::Int(1), Value::Int(5)], &c),
        Route::Partition(Value::Int(5))
    );
}

#[test]
fn bind_checks_arity_and_types() {
    let c = cat();
    let p = prepare(&c, "SELECT * FROM district WHERE d_w_id = $w AND d_id = $d").unwrap();
    assert!(matches!(
        p.bind(vec![Value::Int(1)]),
        Err(Error::Arity {
            expected: 2,
            got: 1,
            ..
        })
    ));
    match p.bind(vec![Value::Int(1), Value::str("x")]) {
        Err(Error::Type { what, .. }) => assert!(what.contains("$d"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.bind(vec![Value::Int(1), Value::Null]),
        Err(Error::Type { .. })
    ));
    assert_eq!(
        p.bind(vec![Value::Int(1), Value::Int(2)]).unwrap(),
        vec![Value::Int(1), Value::Int(2)]
    );
    // Limit parameter is an INT.
    let p = prepare(&c, "SELECT * FROM district WHERE d_w_id = $w LIMIT $n").unwrap();
    assert_eq!(p.params()[1].ty, DataType::Int);
    assert!(matches!(
        p.bind(vec![Value::Int(1), Value::str("x")]),
        Err(Error::Type { .. })
    ));
    // ... but not on a broadcast, whose merge could not apply it.
    assert!(matches!(
        prepare(&c, "SELECT * FROM byname WHERE k = $k LIMIT $n"),
        Err(Error::Sql(_))
    ));
    // Same parameter with conflicting types.
    assert!(prepare(
        &c,
        "UPDATE customer SET c_balance = $x WHERE c_w_id = $x AND c_d_id = 1 AND c_id = 1"
    )
    .is_err());
}

#[test]
fn malformed_and_unsupported_sql_are_typed_errors() {
    let c = cat();
    let sql_err = |s: &str| match prepare(&c, s) {
        Err(Error::Sql(m)) => m,
        other => panic!("{s}: {other:?}"),
    };
    sql_err("SELEC * FROM item");
    sql_err("SELECT * FROM item WHERE i_id = 1 OR i_id = 2");
    assert!(sql_err("SELECT * FROM item JOIN stock ON i_id = s_i_id").contains("join"));
    sql_err("SELECT * FROM item WHERE i_id IN (SELECT s_i_id FROM stock)");
    sql_err("SELECT i_name, COUNT(*) FROM item GROUP BY i_name");
    sql_err("SELECT * FROM item WHERE i_name = 'x'");
    sql_err("SELECT * FROM item; SELECT * FROM item");
    sql_err("CREATE TABLE x (a INT PRIMARY KEY)");
    sql_err("SELECT * FROM item WHERE i_id = 1 LIMIT 2 OFFSET 3");
    assert!(matches!(
        prepare(&c, "SELECT * FROM nope"),
        Err(Error::UnknownTable(_))
    ));
    assert!(matches!(
        prepare(&c, "SELECT nope FROM item"),
        Err(Error::UnknownColumn { .. })
    ));
    assert!(matches!(
        prepare(&c, "SELECT * FROM item WHERE nope = 1"),
        Err(Error::UnknownColumn { .. })
    ));
    assert!(matches!(
        prepare(&c, "SELECT * FROM item WHERE i_id = 'x'"),
        Err(Error::Type { .. })
    ));
}

#[test]
fn literal_decimal_and_timestamp() {
    let c = cat();
    let p = prepare(
        &c,
        "UPDATE customer SET c_balance = c_balance - 10.5, c_since = 1700000000 \
         WHERE c_w_id = 1 AND c_d_id = 2 AND c_id = 3",
    )
    .unwrap();
    let Statement::Update(u) = p.statement() else {
        panic!()
    };
    assert_eq!(
        u.sets[0].expr,
        SetExpr::Arith {
            source: 5,
            op: ArithOp::Sub,
            operand: Operand::Literal(Value::Decimal(Decimal::new(1050, 2)))
        }
    );
    assert_eq!(
        u.sets[1].expr,
        SetExpr::Value(Operand::Literal(Value::Timestamp(1_700_000_000)))
    );
}

fn qr(p: &Plan, rows: Vec<Vec<Value>>) -> QueryResult {
    QueryResult {
        columns: p.columns().clone(),
        rows,
        affected: 0,
    }
}

#[test]
fn merge_sorts_limits_and_drops_hidden_columns() {
    let c = cat();
    // Not routed (partition column b unbound) -> broadcast with hidden sort column.
    let p = prepare(
        &c,
        "SELECT v FROM byname WHERE k = $k ORDER BY b DESC LIMIT 3",
    )
    .unwrap();
    assert!(!p.is_single_partition());
    let s = select(&p);
    assert_eq!(s.visible, 1);
    assert_eq!(s.projection, Projection::Columns(vec![2, 1]));
    let r1 = qr(
        &p,
        vec![
            vec![Value::Int(10), Value::Int(9)],
            vec![Value::Int(11), Value::Int(4)],
        ],
    );
    let r2 = qr(
        &p,
        vec![
            vec![Value::Int(12), Value::Int(7)],
            vec![Value::Int(13), Value::Int(1)],
        ],
    );
    let m = p.merge(vec![r1, r2]).unwrap();
    assert_eq!(
        m.rows,
        vec![
            vec![Value::Int(10)],
            vec![Value::Int(12)],
            vec![Value::Int(11)]
        ]
    );
    assert_eq!(&m.columns[..], &["v".to_string()]);
}

#[test]
fn merge_aggregates_and_affected() {
    let c = cat();
    let p = prepare(
        &c,
        "SELECT COUNT(*), SUM(v), MIN(v), MAX(v) FROM byname WHERE k = 1",
    )
    .unwrap();
    let r1 = qr(
        &p,
        vec![vec![
            Value::Int(2),
            Value::Int(5),
            Value::Int(1),
            Value::Int(4),
        ]],
    );
    let r2 = qr(
        &p,
        vec![vec![Value::Int(0), Value::Null, Value::Null, Value::Null]],
    );
    let r3 = qr(
        &p,
        vec![vec![
            Value::Int(3),
            Value::Int(7),
            Value::Int(0),
            Value::Int(3),
        ]],
    );
    let m = p.merge(vec![r1, r2, r3]).unwrap();
    assert_eq!(
        m.rows,
        vec![vec![
            Value::Int(5),
            Value::Int(12),
            Value::Int(0),
            Value::Int(4)
        ]]
    );
    assert_eq!(m.scalar(), Some(&Value::Int(5)));

    let p = prepare(&c, "DELETE FROM byname WHERE k = 1").unwrap();
    let m = p
        .merge(vec![QueryResult::affected(2), QueryResult::affected(3)])
        .unwrap();
    assert_eq!(m.affected, 5);

    // SUM overflow across partitions is the error it is on one partition
    // (22003 over the wire), not a row.
    let p = prepare(&c, "SELECT SUM(v), COUNT(*) FROM byname WHERE k = 1").unwrap();
    let big = || qr(&p, vec![vec![Value::Int(i64::MAX), Value::Int(1)]]);
    assert!(matches!(
        p.merge(vec![big(), big()]),
        Err(Error::OutOfRange(_))
    ));
    assert!(p.merge(vec![big()]).is_ok());
}

#[test]
fn limit_applies_to_an_aggregates_row() {
    let c = cat();
    // LIMIT 0 leaves no row, on a broadcast as on one partition (storage
    // applies it there); LIMIT 1 and more keep the one row.
    let p = prepare(&c, "SELECT COUNT(*) FROM byname WHERE k = 1 LIMIT 0").unwrap();
    assert!(!p.is_single_partition());
    let m = p.merge(vec![qr(&p, vec![]), qr(&p, vec![])]).unwrap();
    assert!(m.rows.is_empty(), "{:?}", m.rows);
    let p = prepare(&c, "SELECT COUNT(*) FROM byname WHERE k = 1 LIMIT 5").unwrap();
    let m = p
        .merge(vec![
            qr(&p, vec![vec![Value::Int(2)]]),
            qr(&p, vec![vec![Value::Int(3)]]),
        ])
        .unwrap();
    assert_eq!(m.rows, vec![vec![Value::Int(5)]]);
}

#[test]
fn query_result_helpers() {
    let r = QueryResult {
        columns: Arc::from(vec!["a".to_string(), "b".to_string()]),
        rows: vec![vec![Value::Int(1), Value::Int(2)]],
        affected: 0,
    };
    assert_eq!(r.get("B"), Some(&Value::Int(2)));
    assert_eq!(r.first().map(|r| r.len()), Some(2));
    assert_eq!(r.len(), 1);
}

#[test]
fn plan_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone>() {}
    check::<Plan>();
    check::<QueryResult>();
}

const HISTORY: &str = "
    CREATE TABLE history (
        hid INT DEFAULT unique_rowid() PRIMARY KEY,
        aid INT NOT NULL,
        delta INT DEFAULT 7,
        mtime TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        note TEXT
    );
";

#[test]
fn defaults_fill_left_out_columns_and_generators_run_at_bind() {
    let c = parse_schema(HISTORY).unwrap();
    let p = prepare(
        &c,
        "INSERT INTO history (aid, note) VALUES ($a, now()::text)",
    );
    assert!(p.is_err(), "a cast of a generator is outside the subset");
    let p = prepare(&c, "INSERT INTO history (aid) VALUES ($a)").unwrap();
    assert_eq!(p.params().len(), 1, "generated values are not parameters");
    assert_eq!(p.param_name(1), "unique_rowid()");
    assert_eq!(p.param_name(2), "now()");
    let Statement::Insert(ins) = p.statement() else {
        panic!("not an insert")
    };
    assert_eq!(ins.values[0], Some(Operand::Param(1)));
    assert_eq!(ins.values[2], Some(Operand::Literal(Value::Int(7))));
    assert_eq!(ins.values[3], Some(Operand::Param(2)));
    assert_eq!(ins.values[4], None);
    assert_eq!(p.access().partition_key, Some(Operand::Param(1)));
    assert!(p.is_single_partition(), "the generated key routes the row");

    let a = p.bind(vec![Value::Int(5)]).unwrap();
    let b = p.bind(vec![Value::Int(5)]).unwrap();
    assert_eq!(a.len(), 3);
    let (Value::Int(ka), Value::Int(kb)) = (&a[1], &b[1]) else {
        panic!("unique_rowid() is an INT: {a:?}")
    };
    assert!(ka < kb, "each bind makes a new key");
    assert!(matches!(a[2], Value::Timestamp(t) if t > 1_600_000_000_000_000));
    assert!(matches!(
        p.bind(vec![]),
        Err(Error::Arity { expected: 1, .. })
    ));
}

#[test]
fn generators_in_values_set_and_where() {
    let c = parse_schema(HISTORY).unwrap();
    // Parameters keep their numbers whatever precedes them in the text.
    let p = prepare(
        &c,
        "INSERT INTO history (hid, mtime, aid) VALUES (unique_rowid(), CURRENT_TIMESTAMP, $a)",
    )
    .unwrap();
    assert_eq!(p.params().len(), 1);
    let Statement::Insert(ins) = p.statement() else {
        panic!("not an insert")
    };
    assert_eq!(ins.values[1], Some(Operand::Param(0)));
    assert_eq!(ins.values[0], Some(Operand::Param(1)));
    assert_eq!(ins.values[3], Some(Operand::Param(2)));

    let p = prepare(
        &c,
        "UPDATE history SET mtime = now() WHERE hid = $h AND mtime < LOCALTIMESTAMP",
    )
    .unwrap();
    assert_eq!(p.params().len(), 1);
    let bound = p.bind(vec![Value::Int(1)]).unwrap();
    assert_eq!(bound.len(), 3);
    assert_eq!(p.access().key_params, vec![(0, Operand::Param(0))]);

    let err = prepare(&c, "INSERT INTO history (aid, delta) VALUES (1, now())").unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
}

#[test]
fn bad_defaults_and_missing_keys_are_explained() {
    let e = parse_schema("CREATE TABLE t (a INT PRIMARY KEY, b TIMESTAMP DEFAULT unique_rowid())")
        .unwrap_err();
    assert!(matches!(e, Error::Type { .. }), "{e:?}");
    let e = parse_schema("CREATE TABLE t (a INT PRIMARY KEY, b INT DEFAULT random())").unwrap_err();
    assert!(e.to_string().contains("unsupported DEFAULT"), "{e}");
    let e = parse_schema("CREATE TABLE t (a INT, b INT)").unwrap_err();
    assert!(e.to_string().contains("unique_rowid()"), "{e}");
    let e =
        parse_schema("CREATE TABLE t (a INT PRIMARY KEY, b INT NOT NULL DEFAULT NULL)").unwrap();
    let err = prepare(&e, "INSERT INTO t (a) VALUES (1)").unwrap_err();
    assert!(matches!(err, Error::NotNull { .. }), "{err:?}");
}

#[test]
fn timestamp_literals_in_postgres_text_form() {
    let c = cat();
    let p = prepare(
        &c,
        "UPDATE customer SET c_since = '2024-03-01 12:00:00.25' \
         WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 1",
    )
    .unwrap();
    let Statement::Update(u) = p.statement() else {
        panic!()
    };
    assert_eq!(
        u.sets[0].expr,
        SetExpr::Value(Operand::Literal(Value::Timestamp(1_709_294_400_250_000)))
    );
    // In WHERE too, and the microseconds form still stands.
    prepare(
        &c,
        "SELECT c_id FROM customer WHERE c_w_id = 1 AND c_d_id = 1 AND c_since > '2024-01-01'",
    )
    .unwrap();
    prepare(
        &c,
        "INSERT INTO customer (c_w_id, c_d_id, c_id, c_last, c_since) VALUES (1, 1, 1, 'x', 0)",
    )
    .unwrap();
    let err = prepare(
        &c,
        "INSERT INTO customer (c_w_id, c_d_id, c_id, c_last, c_since) VALUES (1, 1, 1, 'x', 'noon')",
    )
    .unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
}

#[test]
fn set_arithmetic_with_null_stores_null_or_violates_not_null() {
    let c = cat();
    // Nullable: `c + NULL` is NULL whatever c holds, a plain assignment.
    let p = prepare(
        &c,
        "UPDATE stock SET s_ytd = s_ytd + NULL WHERE s_w_id = 1 AND s_i_id = 2",
    )
    .unwrap();
    let Statement::Update(u) = p.statement() else {
        panic!()
    };
    assert_eq!(
        u.sets[0].expr,
        SetExpr::Value(Operand::Literal(Value::Null))
    );
    assert!(!p.access().blind_increment);
    prepare(
        &c,
        "UPDATE stock SET s_ytd = NULL * s_ytd WHERE s_w_id = 1 AND s_i_id = 2",
    )
    .unwrap();
    // NOT NULL: refused when planned.
    let err = prepare(
        &c,
        "UPDATE stock SET s_quantity = s_quantity - NULL WHERE s_w_id = 1 AND s_i_id = 2",
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::NotNull {
            table: "stock".into(),
            column: "s_quantity".into()
        }
    );
    // A parameter operand stays a non-NULL blind increment.
    let p = prepare(
        &c,
        "UPDATE stock SET s_ytd = s_ytd + $n WHERE s_w_id = $w AND s_i_id = $i",
    )
    .unwrap();
    assert!(p.access().blind_increment);
    let err = p
        .bind(vec![Value::Null, Value::Int(1), Value::Int(2)])
        .unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
}

#[test]
fn errors_carry_the_kind_a_client_tells_apart() {
    let c = cat();
    let err = |sql: &str| prepare(&c, sql).unwrap_err();
    // A NULL stored in a NOT NULL column, as a literal or a parameter.
    assert!(matches!(
        err("INSERT INTO stock VALUES (1, 1, NULL, NULL)"),
        Error::NotNull { .. }
    ));
    let p = prepare(&c, "INSERT INTO stock VALUES ($w, $i, $q, $y)").unwrap();
    assert!(matches!(
        p.bind(vec![Value::Int(1), Value::Int(1), Value::Null, Value::Null]),
        Err(Error::NotNull { .. })
    ));
    assert!(p
        .bind(vec![
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Null
        ])
        .is_ok());
    // A compared parameter is never NULL: a type error, as before.
    let p = prepare(
        &c,
        "SELECT s_quantity FROM stock WHERE s_w_id = $w AND s_i_id = $i",
    )
    .unwrap();
    assert!(matches!(
        p.bind(vec![Value::Null, Value::Int(1)]),
        Err(Error::Type { .. })
    ));
    // A literal NULL in WHERE is outside the subset, not a type error.
    let e = err("SELECT s_quantity FROM stock WHERE s_w_id = 1 AND s_i_id = NULL");
    assert!(
        e.to_string().contains("unsupported: comparison with NULL"),
        "{e}"
    );
    // Too long, out of range, given twice.
    assert!(matches!(
        err("INSERT INTO district VALUES (1, 1, 'eleven char', 0, 1)"),
        Error::TooLong {
            max_len: 10,
            len: 11,
            ..
        }
    ));
    assert!(matches!(
        err("INSERT INTO item VALUES (1, 'a', 1000.00)"),
        Error::OutOfRange(_)
    ));
    assert!(matches!(
        err("INSERT INTO stock VALUES (1, 9223372036854775808, 1, 1)"),
        Error::OutOfRange(_)
    ));
    assert_eq!(
        err("INSERT INTO stock (s_w_id, s_i_id, s_quantity, s_quantity) VALUES (1, 1, 1, 2)"),
        Error::DuplicateColumn {
            table: "stock".into(),
            column: "s_quantity".into()
        }
    );
    // Refusals of the planner read `unsupported` (0A000 over the wire).
    for sql in [
        "UPDATE stock SET s_w_id = 2 WHERE s_w_id = 1 AND s_i_id = 1",
        "SELECT s_quantity FROM stock WHERE s_w_id = 1 ORDER BY s_quantity",
        "SELECT s_quantity FROM public.stock WHERE s_w_id = 1",
    ] {
        let e = err(sql);
        assert!(
            matches!(&e, Error::Sql(m) if m.starts_with("unsupported")),
            "{sql}: {e}"
        );
    }
}

#[test]
fn decimal_precision_binds_stored_values_only() {
    let c = cat();
    // i_price DECIMAL(5,2): 999.99 at most when stored...
    prepare(&c, "INSERT INTO item VALUES (1, 'a', 999.99)").unwrap();
    let p = prepare(&c, "INSERT INTO item VALUES ($i, $n, $p)").unwrap();
    assert!(matches!(
        p.bind(vec![Value::Int(1), Value::str("a"), Value::Int(1000)]),
        Err(Error::OutOfRange(m)) if m.contains("$p")
    ));
    // ...but compared with, or added to it, any number of its scale.
    prepare(
        &c,
        "SELECT i_id FROM item WHERE i_id > 0 AND i_price < 100000.00",
    )
    .unwrap();
    let p = prepare(&c, "UPDATE item SET i_price = i_price - $d WHERE i_id = $i").unwrap();
    assert!(p.bind(vec![Value::Int(5000), Value::Int(1)]).is_ok());
    // One parameter stored and compared takes the narrower precision.
    let p = prepare(
        &c,
        "UPDATE item SET i_price = $p WHERE i_id > 0 AND i_price < $p",
    )
    .unwrap();
    assert_eq!(
        p.params()[0].ty,
        DataType::Decimal {
            precision: 5,
            scale: 2
        }
    );
}

#[test]
fn prepare_all_splits_a_multi_row_insert_into_single_row_plans() {
    let c = cat();
    let plans = prepare_all(
        &c,
        "INSERT INTO item (i_id, i_name) VALUES (1, 'a'), ($id, $name), (3, 'c')",
    )
    .unwrap();
    assert_eq!(plans.len(), 3);
    assert!(plans.iter().all(|p| p.kind() == StatementKind::Insert));
    assert_eq!(plans[1].params().len(), 2);
    assert!(plans[2].sql().contains("(3, 'c')") && !plans[2].sql().contains("'a'"));
    let Statement::Insert(ins) = plans[0].statement() else {
        panic!("not an insert")
    };
    assert_eq!(ins.values[0], Some(Operand::Literal(Value::Int(1))));
    // One bad row refuses the whole statement.
    assert!(prepare_all(&c, "INSERT INTO item (i_id) VALUES (1), ('x')").is_err());
    // Anything else is the one plan `prepare` makes, with the same text.
    let one = prepare_all(&c, "SELECT i_name FROM item WHERE i_id = $id").unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].sql(), "SELECT i_name FROM item WHERE i_id = $id");
    assert!(prepare(&c, "INSERT INTO item (i_id) VALUES (1), (2)").is_err());
}
