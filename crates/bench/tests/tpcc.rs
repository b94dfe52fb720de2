//! TPC-C end to end on the small (non-standard) scale: generated data has
//! the clause 4.3 cardinalities, each transaction has its clause 2 effect,
//! a multi-client serializable run keeps the clause 3.3.2 conditions, and
//! the check does fail on corrupted data. Debug-build friendly; no timing
//! figure is asserted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::tpcc::{
    self, check, load, procedures, random::Constants, schema, Mix, Scale, Tpcc,
};
use brine_bench::{run_bench, BenchError, BenchSpec, ClientGen, Workload};
use brine_cluster::{Cluster, ClusterConfig, Isolation, LinkConfig};
use brine_core::{Decimal, Error, Row, Value};
use rand::rngs::SmallRng;
use rand::SeedableRng;

type R<T = ()> = Result<T, BenchError>;

fn fast_config() -> ClusterConfig {
    ClusterConfig {
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    }
}

/// A started and loaded small database of `warehouses` warehouses.
async fn loaded(warehouses: i64) -> R<(Tpcc, Cluster)> {
    let w = Tpcc::new(warehouses, Scale::SMALL, Mix::STANDARD)?;
    let cluster =
        Cluster::start(fast_config(), w.application()).map_err(BenchError::cluster("starting"))?;
    w.load(&cluster).await?;
    Ok((w, cluster))
}

async fn rows(cluster: &Cluster, sql: &str, args: Vec<Value>) -> R<Vec<Row>> {
    check::read_rows(cluster, sql, args).await
}

async fn int(cluster: &Cluster, sql: &str, args: Vec<Value>) -> R<i64> {
    let r = rows(cluster, sql, args).await?;
    r.first()
        .and_then(|row| row.first())
        .and_then(Value::as_int)
        .ok_or_else(|| BenchError::Internal(format!("`{sql}` returned no INT: {r:?}")))
}

async fn cents(cluster: &Cluster, sql: &str, args: Vec<Value>) -> R<i64> {
    let r = rows(cluster, sql, args).await?;
    r.first()
        .and_then(|row| row.first())
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| BenchError::Internal(format!("`{sql}` returned no DECIMAL: {r:?}")))
}

async fn call(cluster: &Cluster, proc: &str, args: Vec<Value>) -> brine_core::Result<Vec<Value>> {
    cluster.client().call(proc, args).await.map(|o| o.values)
}

fn call_err(proc: &str) -> impl FnOnce(Error) -> BenchError + '_ {
    move |source| BenchError::Call {
        procedure: proc.to_string(),
        source,
    }
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

#[test]
fn generated_data_has_spec_cardinalities() {
    let s = Scale::SMALL;
    let p = load::GenParams {
        scale: s,
        seed: 5,
        constants: Constants::draw(&mut SmallRng::seed_from_u64(5)),
        now_us: 1,
    };
    let items = load::item_template(&p);
    assert_eq!(items.len() as i64, s.items);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    let mut widths: HashMap<&str, usize> = HashMap::new();
    let mut originals = 0;
    for job in load::jobs(2) {
        for (table, rows) in load::generate(job, &p, &items) {
            *counts.entry(table).or_default() += rows.len();
            for r in &rows {
                assert_eq!(*widths.entry(table).or_insert(r.len()), r.len());
            }
            if table == schema::STOCK {
                originals += rows
                    .iter()
                    .filter(|r| r[16].as_str().is_some_and(|d| d.contains("ORIGINAL")))
                    .count();
            }
        }
    }
    let per_w = |n: i64| (2 * n) as usize;
    let d = schema::DISTRICTS;
    assert_eq!(counts[schema::WAREHOUSE], per_w(1));
    assert_eq!(counts[schema::DISTRICT], per_w(d));
    assert_eq!(
        counts[schema::CUSTOMER],
        per_w(d * s.customers_per_district)
    );
    assert_eq!(counts[schema::HISTORY], per_w(d * s.customers_per_district));
    assert_eq!(counts[schema::ORDERS], per_w(d * s.customers_per_district));
    assert_eq!(
        counts[schema::NEW_ORDER],
        per_w(d * s.new_orders_per_district)
    );
    assert_eq!(counts[schema::STOCK], per_w(s.items));
    assert_eq!(counts[schema::ITEM], per_w(s.items));
    let lines = counts[schema::ORDER_LINE] as i64;
    let orders = 2 * d * s.customers_per_district;
    assert!(lines >= 5 * orders && lines <= 15 * orders, "{lines}");
    // 10% of S_DATA carry ORIGINAL.
    let stock = counts[schema::STOCK];
    assert!(
        originals * 20 > stock && originals * 20 < stock * 3,
        "{originals}"
    );
    assert_eq!(widths[schema::WAREHOUSE], schema::COLUMNS_WAREHOUSE);
    assert_eq!(widths[schema::DISTRICT], schema::COLUMNS_DISTRICT);
    assert_eq!(widths[schema::CUSTOMER], schema::COLUMNS_CUSTOMER);
    assert_eq!(widths[schema::HISTORY], schema::COLUMNS_HISTORY);
    assert_eq!(widths[schema::NEW_ORDER], schema::COLUMNS_NEW_ORDER);
    assert_eq!(widths[schema::ORDERS], schema::COLUMNS_ORDERS);
    assert_eq!(widths[schema::ORDER_LINE], schema::COLUMNS_ORDER_LINE);
    assert_eq!(widths[schema::ITEM], schema::COLUMNS_ITEM);
    assert_eq!(widths[schema::STOCK], schema::COLUMNS_STOCK);

    // The same seed generates the same data.
    let again = load::generate(load::Job::Core(1), &p, &items);
    let first = load::generate(load::Job::Core(1), &p, &items);
    assert_eq!(format!("{again:?}"), format!("{first:?}"));
}

#[test]
fn inputs_follow_clause_2() -> R {
    let w = Tpcc::new(4, Scale::STANDARD, Mix::STANDARD)?;
    let mut t = w.terminal(6, SmallRng::seed_from_u64(2));
    let mut by_proc: HashMap<&str, usize> = HashMap::new();
    let (mut lines, mut remote_lines, mut rollbacks, mut new_orders) = (0, 0, 0, 0);
    let (mut payments, mut remote_payments, mut by_name) = (0, 0, 0);
    let n = 20_000;
    for _ in 0..n {
        let r = t.next();
        *by_proc.entry(r.procedure).or_default() += 1;
        let a: Vec<i64> = r.args.iter().map(|v| v.as_int().unwrap_or(-1)).collect();
        match r.procedure {
            tpcc::NEW_ORDER => {
                new_orders += 1;
                assert_eq!(a[0], 3, "home warehouse of terminal 6 of 4 warehouses");
                assert!((1..=10).contains(&a[1]));
                assert!((1..=3000).contains(&a[2]));
                let cnt = a[4];
                assert!((5..=15).contains(&cnt));
                assert_eq!(a.len() as i64, 5 + 3 * cnt);
                for l in 0..cnt as usize {
                    let (item, supply, qty) = (a[5 + 3 * l], a[6 + 3 * l], a[7 + 3 * l]);
                    lines += 1;
                    if item == 100_001 {
                        assert_eq!(l as i64, cnt - 1, "only the last item is invalid");
                        rollbacks += 1;
                    } else {
                        assert!((1..=100_000).contains(&item));
                    }
                    assert!((1..=4).contains(&supply));
                    remote_lines += usize::from(supply != 3);
                    assert!((1..=10).contains(&qty));
                }
            }
            tpcc::PAYMENT => {
                payments += 1;
                remote_payments += usize::from(a[2] != 3);
                by_name += usize::from(a[4] == 1);
                let amount = r.args[7].as_decimal().map(|d| d.units).unwrap_or(0);
                assert!((100..=500_000).contains(&amount));
            }
            tpcc::STOCK_LEVEL => {
                assert_eq!(a[1], 2, "terminal 6's fixed district");
                assert!((10..=20).contains(&a[2]));
            }
            tpcc::DELIVERY => assert!((1..=10).contains(&a[1])),
            tpcc::ORDER_STATUS => assert!((1..=10).contains(&a[1])),
            other => panic!("unexpected procedure {other}"),
        }
    }
    let share = |p: &str| by_proc.get(p).copied().unwrap_or(0) as f64 / n as f64;
    assert!((share(tpcc::NEW_ORDER) - 0.45).abs() < 0.02);
    assert!((share(tpcc::PAYMENT) - 0.43).abs() < 0.02);
    for p in [tpcc::ORDER_STATUS, tpcc::DELIVERY, tpcc::STOCK_LEVEL] {
        assert!((share(p) - 0.04).abs() < 0.01, "{p}: {}", share(p));
    }
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b as f64;
    assert!(
        (0.5..2.0).contains(&pct(remote_lines, lines)),
        "remote lines"
    );
    assert!(
        (0.3..2.0).contains(&pct(rollbacks, new_orders)),
        "rollbacks"
    );
    assert!(
        (12.0..18.0).contains(&pct(remote_payments, payments)),
        "remote payments"
    );
    assert!((56.0..64.0).contains(&pct(by_name, payments)), "by name");

    // One warehouse: nothing is remote.
    let one = Tpcc::new(1, Scale::SMALL, Mix::SALT)?;
    let mut t = one.terminal(0, SmallRng::seed_from_u64(1));
    for _ in 0..2_000 {
        let r = t.next();
        if r.procedure == tpcc::NEW_ORDER {
            for l in 0..r.args[4].as_int().unwrap_or(0) as usize {
                assert_eq!(r.args[6 + 3 * l], i(1));
                let item = r.args[5 + 3 * l].as_int().unwrap_or(0);
                assert!((1..=1_001).contains(&item), "small scale has 1,000 items");
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loaded_database_is_consistent_and_counted() -> R {
    let (w, cluster) = loaded(2).await?;
    let s = Scale::SMALL;
    let count = |t: &str| format!("SELECT COUNT(*) FROM {t}");
    assert_eq!(int(&cluster, &count("stock"), vec![]).await?, 2 * s.items);
    assert_eq!(int(&cluster, &count("item"), vec![]).await?, 2 * s.items);
    assert_eq!(
        int(&cluster, &count("customer"), vec![]).await?,
        20 * s.customers_per_district
    );
    assert_eq!(
        int(&cluster, &count("new_order"), vec![]).await?,
        20 * s.new_orders_per_district
    );
    assert_eq!(
        int(
            &cluster,
            "SELECT d_next_o_id FROM district WHERE d_w_id = $w AND d_id = $d",
            vec![i(2), i(7)]
        )
        .await?,
        s.customers_per_district + 1
    );
    // The last-name index finds the first customers by their names.
    let named = rows(
        &cluster,
        "SELECT c_id FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_last = $l",
        vec![i(1), i(3), Value::str("BARBARABLE")],
    )
    .await?;
    assert_eq!(named, vec![vec![i(3)]]);
    let f = w.find_violations(&cluster).await?;
    assert_eq!(f.count, 0, "{:?}", f.violations);
    assert!(f.rows_read > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_transaction_has_its_effect() -> R {
    let (w, cluster) = loaded(2).await?;
    let s = Scale::SMALL;
    let next_o = s.customers_per_district + 1;

    // new-order: 3 lines, one supplied by warehouse 2.
    let stock_q = |wh: i64, item: i64| {
        int(
            &cluster,
            "SELECT s_quantity FROM stock WHERE s_w_id = $w AND s_i_id = $i",
            vec![i(wh), i(item)],
        )
    };
    let q_before = stock_q(2, 20).await?;
    let args = vec![
        i(1),
        i(4),
        i(7),
        Value::Timestamp(9),
        i(3),
        i(10),
        i(1),
        i(2),
        i(20),
        i(2),
        i(5),
        i(30),
        i(1),
        i(1),
    ];
    let out = call(&cluster, tpcc::NEW_ORDER, args)
        .await
        .map_err(call_err(tpcc::NEW_ORDER))?;
    assert_eq!(out[0], i(next_o));
    let dkey = vec![i(1), i(4)];
    assert_eq!(
        int(
            &cluster,
            "SELECT d_next_o_id FROM district WHERE d_w_id = $w AND d_id = $d",
            dkey.clone()
        )
        .await?,
        next_o + 1
    );
    let order = rows(
        &cluster,
        "SELECT o_c_id, o_ol_cnt, o_all_local, o_carrier_id FROM orders \
         WHERE o_w_id = $w AND o_d_id = $d AND o_id = $o",
        vec![i(1), i(4), i(next_o)],
    )
    .await?;
    assert_eq!(order, vec![vec![i(7), i(3), i(0), Value::Null]]);
    assert_eq!(
        int(
            &cluster,
            "SELECT COUNT(*) FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id = $o",
            vec![i(1), i(4), i(next_o)]
        )
        .await?,
        3
    );
    assert_eq!(
        int(
            &cluster,
            "SELECT MAX(no_o_id) FROM new_order WHERE no_w_id = $w AND no_d_id = $d",
            dkey.clone()
        )
        .await?,
        next_o
    );
    let q_after = stock_q(2, 20).await?;
    let expect = if q_before >= 15 {
        q_before - 5
    } else {
        q_before + 86
    };
    assert_eq!(q_after, expect);
    assert_eq!(
        int(
            &cluster,
            "SELECT s_remote_cnt FROM stock WHERE s_w_id = $w AND s_i_id = $i",
            vec![i(2), i(20)]
        )
        .await?,
        1
    );

    // new-order with an invalid last item rolls back entirely.
    let bad = vec![
        i(1),
        i(4),
        i(8),
        Value::Timestamp(9),
        i(2),
        i(10),
        i(1),
        i(1),
        i(s.items + 1),
        i(1),
        i(1),
    ];
    match call(&cluster, tpcc::NEW_ORDER, bad).await {
        Err(Error::UserAbort(m)) => assert_eq!(m, procedures::INVALID_ITEM),
        other => panic!("expected the rollback, got {other:?}"),
    }
    assert_eq!(
        int(
            &cluster,
            "SELECT d_next_o_id FROM district WHERE d_w_id = $w AND d_id = $d",
            dkey.clone()
        )
        .await?,
        next_o + 1,
        "the rolled-back order left no trace"
    );

    // payment by id, remote customer (warehouse 2, district 6, customer 9).
    let w_ytd = "SELECT w_ytd FROM warehouse WHERE w_id = $w";
    let before_w = cents(&cluster, w_ytd, vec![i(1)]).await?;
    let bal = "SELECT c_balance FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c";
    let before_c = cents(&cluster, bal, vec![i(2), i(6), i(9)]).await?;
    let pay = vec![
        i(1),
        i(4),
        i(2),
        i(6),
        i(0),
        i(9),
        Value::str(""),
        Value::Decimal(Decimal::new(12_345, 2)),
        Value::Timestamp(10),
        i(1 << 40),
    ];
    call(&cluster, tpcc::PAYMENT, pay)
        .await
        .map_err(call_err(tpcc::PAYMENT))?;
    assert_eq!(cents(&cluster, w_ytd, vec![i(1)]).await?, before_w + 12_345);
    assert_eq!(
        cents(&cluster, bal, vec![i(2), i(6), i(9)]).await?,
        before_c - 12_345
    );
    let h = rows(
        &cluster,
        "SELECT h_c_w_id, h_c_d_id, h_c_id FROM history WHERE h_w_id = $w AND h_d_id = $d AND h_id = $h",
        vec![i(1), i(4), i(1 << 40)],
    )
    .await?;
    assert_eq!(h, vec![vec![i(2), i(6), i(9)]]);

    // payment by last name: customers 1..=100 have distinct names, so the
    // name of customer 12 (number 11) finds exactly customer 12.
    let pay = vec![
        i(2),
        i(3),
        i(2),
        i(3),
        i(1),
        i(0),
        Value::str(&tpcc::random::last_name(11)),
        Value::Decimal(Decimal::new(100, 2)),
        Value::Timestamp(10),
        i(2 << 40),
    ];
    let out = call(&cluster, tpcc::PAYMENT, pay)
        .await
        .map_err(call_err(tpcc::PAYMENT))?;
    assert_eq!(out, vec![i(12)]);

    // order-status finds customer 7's new order (the last one).
    let out = call(
        &cluster,
        tpcc::ORDER_STATUS,
        vec![i(1), i(4), i(0), i(7), Value::str("")],
    )
    .await
    .map_err(call_err(tpcc::ORDER_STATUS))?;
    assert_eq!(out, vec![i(7), i(next_o), i(3)]);

    // delivery delivers the oldest new order of every district of w 1.
    let first_new = s.first_new_order();
    let out = call(
        &cluster,
        tpcc::DELIVERY,
        vec![i(1), i(3), Value::Timestamp(11)],
    )
    .await
    .map_err(call_err(tpcc::DELIVERY))?;
    assert_eq!(out, vec![i(10)]);
    assert_eq!(
        int(
            &cluster,
            "SELECT MIN(no_o_id) FROM new_order WHERE no_w_id = $w AND no_d_id = $d",
            dkey.clone()
        )
        .await?,
        first_new + 1
    );
    assert_eq!(
        int(
            &cluster,
            "SELECT o_carrier_id FROM orders WHERE o_w_id = $w AND o_d_id = $d AND o_id = $o",
            vec![i(1), i(4), i(first_new)]
        )
        .await?,
        3
    );

    // stock-level agrees with a direct count.
    let threshold = 60;
    let out = call(&cluster, tpcc::STOCK_LEVEL, vec![i(1), i(4), i(threshold)])
        .await
        .map_err(call_err(tpcc::STOCK_LEVEL))?;
    let next = next_o + 1;
    let lines = rows(
        &cluster,
        "SELECT ol_i_id FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id >= $lo AND ol_o_id < $hi",
        vec![i(1), i(4), i(next - 20), i(next)],
    )
    .await?;
    let mut items: Vec<i64> = lines.iter().filter_map(|r| r[0].as_int()).collect();
    items.sort_unstable();
    items.dedup();
    let mut low = 0;
    for it in items {
        if stock_q(1, it).await? < threshold {
            low += 1;
        }
    }
    assert_eq!(out, vec![i(low)]);

    // After all of it, every consistency condition still holds.
    let f = w.find_violations(&cluster).await?;
    assert_eq!(f.count, 0, "{:?}", f.violations);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_skips_empty_districts() -> R {
    let (_w, cluster) = loaded(1).await?;
    let n = Scale::SMALL.new_orders_per_district;
    for round in 0..n {
        let out = call(
            &cluster,
            tpcc::DELIVERY,
            vec![i(1), i(1), Value::Timestamp(1)],
        )
        .await
        .map_err(call_err(tpcc::DELIVERY))?;
        assert_eq!(out, vec![i(10)], "round {round}");
    }
    let out = call(
        &cluster,
        tpcc::DELIVERY,
        vec![i(1), i(1), Value::Timestamp(1)],
    )
    .await
    .map_err(call_err(tpcc::DELIVERY))?;
    assert_eq!(out, vec![i(0)], "every district is empty now");
    assert_eq!(
        int(&cluster, "SELECT COUNT(*) FROM new_order", vec![]).await?,
        0
    );
    Ok(())
}

/// The deferred worker's form: one district per call (clause 2.7.4.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_of_one_district() -> R {
    let (_w, cluster) = loaded(1).await?;
    let undelivered = |d: i64| {
        let c = &cluster;
        async move {
            int(
                c,
                "SELECT COUNT(*) FROM new_order WHERE no_w_id = 1 AND no_d_id = $d",
                vec![i(d)],
            )
            .await
        }
    };
    let (three, four) = (undelivered(3).await?, undelivered(4).await?);
    let out = call(
        &cluster,
        tpcc::DELIVERY,
        vec![i(1), i(1), Value::Timestamp(1), i(3)],
    )
    .await
    .map_err(call_err(tpcc::DELIVERY))?;
    assert_eq!(out, vec![i(1)]);
    assert_eq!(undelivered(3).await?, three - 1);
    assert_eq!(undelivered(4).await?, four, "only district 3 was delivered");
    for bad in [0, 11] {
        let e = call(
            &cluster,
            tpcc::DELIVERY,
            vec![i(1), i(1), Value::Timestamp(1), i(bad)],
        )
        .await;
        assert!(matches!(e, Err(Error::Bound(_))), "district {bad}: {e:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_fails_on_corrupted_data() -> R {
    let (w, cluster) = loaded(1).await?;
    assert_eq!(w.find_violations(&cluster).await?.count, 0);
    let mut txn = cluster.client().begin();
    txn.execute(
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $w AND d_id = $d",
        vec![i(1), i(5)],
    )
    .await
    .map_err(BenchError::cluster("corrupting"))?;
    txn.commit()
        .await
        .map_err(BenchError::cluster("corrupting"))?;
    let e = match w.check(&cluster).await {
        Err(BenchError::Invariant(m)) => m,
        other => panic!("a bumped D_NEXT_O_ID must fail the check, got {other:?}"),
    };
    assert!(e.contains("condition 2"), "{e}");

    // A payment applied to the warehouse only breaks conditions 1 and 8.
    let (w, cluster) = loaded(1).await?;
    let mut txn = cluster.client().begin();
    txn.execute(
        "UPDATE warehouse SET w_ytd = w_ytd + $a WHERE w_id = $w",
        vec![Value::Decimal(Decimal::new(100, 2)), i(1)],
    )
    .await
    .map_err(BenchError::cluster("corrupting"))?;
    txn.commit()
        .await
        .map_err(BenchError::cluster("corrupting"))?;
    let f = w.find_violations(&cluster).await?;
    let text = f.violations.join("; ");
    assert_eq!(f.count, 2, "{text}");
    assert!(
        text.contains("condition 1:") && text.contains("condition 8:"),
        "{text}"
    );

    // A lost order line breaks conditions 4 and 6.
    let mut txn = cluster.client().begin();
    txn.execute(
        "DELETE FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id = $o AND ol_number = $n",
        vec![i(1), i(2), i(3), i(1)],
    )
    .await
    .map_err(BenchError::cluster("corrupting"))?;
    txn.commit()
        .await
        .map_err(BenchError::cluster("corrupting"))?;
    let f = w.find_violations(&cluster).await?;
    let text = f.violations.join("; ");
    assert!(
        text.contains("condition 4:") && text.contains("condition 6:"),
        "{text}"
    );
    Ok(())
}

/// The "short version" of the 60 s, 64-client run: 16 clients on
/// two warehouses under acid serializable with the default 100 us link,
/// then every consistency condition must hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_client_serializable_run_keeps_consistency() -> R {
    let w: Arc<dyn Workload> = Arc::new(
        Tpcc::new(2, Scale::SMALL, Mix::STANDARD)?
            .with_measure_window(Duration::from_millis(300), Duration::from_secs(3)),
    );
    let spec = BenchSpec {
        cluster: ClusterConfig {
            isolation: Isolation::Serializable,
            ..ClusterConfig::default()
        },
        protocols: vec!["acid".into()],
        groupings: Vec::new(),
        clients: vec![16],
        warmup: Duration::from_millis(300),
        duration: Duration::from_secs(3),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    };
    let report = run_bench(&spec, &[w], |_| {}).await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    for p in tpcc::PROCEDURES {
        assert!(r.per_procedure.contains_key(p), "{p} missing");
    }
    let committed = r.per_procedure[tpcc::NEW_ORDER].commits;
    assert!(committed > 0, "no new order committed");
    // Delivery is deferred by default: the per-warehouse workers ran it.
    assert_eq!(r.params["delivery"], serde_json::json!("deferred"));
    assert!(
        r.per_procedure[tpcc::DELIVERY].commits > 0,
        "no delivery ran"
    );
    assert!(
        r.workload_metrics["deliveries"].as_u64().unwrap_or(0) > 0,
        "{:?}",
        r.workload_metrics
    );
    let per_min = r.workload_metrics["new_order_per_min"]
        .as_f64()
        .unwrap_or(-1.0);
    assert!(per_min > 0.0, "{:?}", r.workload_metrics);
    println!(
        "tpcc small, 2 warehouses, 16 clients: {} txn/s, {per_min} new orders/min, {:?}",
        r.throughput_tps, r.workload_metrics
    );
    Ok(())
}
