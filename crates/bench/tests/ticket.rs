//! The ticketing workload end to end: each procedure's effect on a tiny
//! hall, the invariant check passing on good data and failing on corrupted
//! data, and a short multi-client serializable run whose check passes.
//! Debug-build runs; no timing figure is asserted.

use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::ticket::procedures::*;
use brine_bench::workloads::ticket::schema::{customer_email, money};
use brine_bench::workloads::ticket::{Ticket, TicketParams};
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::{Cluster, ClusterConfig, Isolation, LinkConfig};
use brine_core::{Error, Row, Value};
use serde_json::Value as Json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const SEATS: u64 = 10;

fn tiny() -> Result<Ticket, BenchError> {
    Ticket::new(TicketParams {
        seats_per_category: SEATS,
        customers: 5,
        ..TicketParams::default()
    })
}

/// A loaded two-partition cluster with an immediate link.
async fn start(w: &Ticket) -> Result<Cluster, Box<dyn std::error::Error>> {
    let config = ClusterConfig {
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config, w.application())?;
    w.load(&cluster).await?;
    Ok(cluster)
}

async fn call(cluster: &Cluster, proc: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    cluster.client().call(proc, args).await.map(|o| o.values)
}

fn ints(v: &[i64]) -> Vec<Value> {
    v.iter().map(|&i| Value::Int(i)).collect()
}

/// Runs one statement in its own transaction.
async fn sql(cluster: &Cluster, text: &str) -> Result<Vec<Row>, Error> {
    let mut txn = cluster.client().begin();
    let rows = txn.execute(text, vec![]).await?.rows;
    txn.commit().await?;
    Ok(rows)
}

async fn one_row(cluster: &Cluster, text: &str) -> Result<Row, Box<dyn std::error::Error>> {
    let rows = sql(cluster, text).await?;
    Ok(rows
        .into_iter()
        .next()
        .ok_or_else(|| format!("no row for `{text}`"))?)
}

fn is_user_abort(r: &Result<Vec<Value>, Error>, needle: &str) -> bool {
    matches!(r, Err(Error::UserAbort(m)) if m.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_procedure_does_what_it_says() -> TestResult {
    let w = tiny()?;
    let c = start(&w).await?;

    assert_eq!(call(&c, BROWSE_EVENTS, vec![]).await?, ints(&[1]));
    assert_eq!(
        call(&c, VIEW_EVENT, ints(&[1])).await?,
        vec![Value::Int(1), money(8_000), Value::Int(2), money(4_500)]
    );
    let email = |id| vec![Value::str(&customer_email(id))];
    assert_eq!(call(&c, LOOKUP_CUSTOMER, email(3)).await?, ints(&[3]));
    assert!(is_user_abort(
        &call(&c, LOOKUP_CUSTOMER, email(99)).await,
        "no customer"
    ));
    assert_eq!(
        call(&c, LIST_FREE_SEATS, ints(&[1, 0])).await?,
        ints(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    );
    assert_eq!(
        call(&c, LIST_FREE_SEATS, ints(&[2, 18])).await?,
        ints(&[18, 19])
    );

    // reserve: seats free -> held, cart filled.
    assert_eq!(
        call(&c, RESERVE_SEATS, ints(&[100, 3, 1, 1, 0, 2, 3])).await?,
        vec![Value::Int(100), Value::Int(2), money(16_000)]
    );
    assert_eq!(
        call(&c, LIST_FREE_SEATS, ints(&[1, 0])).await?,
        ints(&[0, 1, 4, 5, 6, 7, 8, 9])
    );
    // Losing one seat to another cart undoes the whole reservation.
    assert!(is_user_abort(
        &call(&c, RESERVE_SEATS, ints(&[101, 4, 1, 1, 0, 4, 3])).await,
        SEAT_TAKEN
    ));
    assert_eq!(
        one_row(&c, "SELECT status, cart_id FROM seat WHERE seat_id = 4").await?,
        vec![Value::Int(0), Value::Null]
    );
    assert!(sql(&c, "SELECT cart_id FROM cart WHERE cart_id = 101")
        .await?
        .is_empty());
    // A seat of the other category is not free in this one.
    assert!(is_user_abort(
        &call(&c, RESERVE_SEATS, ints(&[101, 4, 1, 1, 0, 12])).await,
        SEAT_TAKEN
    ));
    assert_eq!(
        call(&c, VIEW_CART, ints(&[100])).await?,
        vec![Value::Int(2), money(16_000)]
    );
    w.verify(&c).await?;

    // create_order: order + items, seats sold, counters moved, cart cleared.
    assert!(is_user_abort(
        &call(&c, CREATE_ORDER, ints(&[100, 500, 4, 1])).await,
        "belongs to customer 3"
    ));
    assert_eq!(
        call(&c, CREATE_ORDER, ints(&[100, 500, 3, 1])).await?,
        vec![Value::Int(500), Value::Int(2), money(16_000)]
    );
    assert_eq!(
        one_row(
            &c,
            "SELECT status, cart_id, order_id FROM seat WHERE seat_id = 3"
        )
        .await?,
        vec![Value::Int(2), Value::Null, Value::Int(500)]
    );
    assert_eq!(
        one_row(
            &c,
            "SELECT free_count, sold_count FROM category_counters WHERE event_id = 1 AND category_id = 1"
        )
        .await?,
        ints(&[8, 2])
    );
    assert_eq!(
        one_row(
            &c,
            "SELECT free_count, sold_count, order_count, revenue FROM event_counters WHERE event_id = 1"
        )
        .await?,
        vec![Value::Int(18), Value::Int(2), Value::Int(1), money(16_000)]
    );
    assert!(sql(&c, "SELECT seat_id FROM cart_item WHERE cart_id = 100")
        .await?
        .is_empty());
    assert!(is_user_abort(
        &call(&c, VIEW_CART, ints(&[100])).await,
        "no cart"
    ));
    assert!(is_user_abort(
        &call(&c, CREATE_ORDER, ints(&[100, 501, 3, 1])).await,
        "no cart"
    ));

    // pay: exactly the total, once.
    assert!(is_user_abort(
        &call(&c, ISSUE_TICKETS, ints(&[500])).await,
        "not paid"
    ));
    assert!(is_user_abort(
        &call(&c, PAY, vec![Value::Int(500), money(15_900)]).await,
        "does not match"
    ));
    assert_eq!(
        call(&c, PAY, vec![Value::Int(500), money(16_000)]).await?,
        ints(&[500])
    );
    assert!(is_user_abort(
        &call(&c, PAY, vec![Value::Int(500), money(16_000)]).await,
        "already paid"
    ));
    assert_eq!(
        one_row(&c, "SELECT amount FROM payment WHERE order_id = 500").await?,
        vec![money(16_000)]
    );
    assert_eq!(call(&c, VIEW_ORDER, ints(&[500])).await?, ints(&[1, 2, 0]));
    assert_eq!(call(&c, ISSUE_TICKETS, ints(&[500])).await?, ints(&[2]));
    assert_eq!(call(&c, VIEW_ORDER, ints(&[500])).await?, ints(&[2, 2, 2]));
    w.verify(&c).await?;

    // A new reservation replaces the visitor's stale cart.
    call(&c, RESERVE_SEATS, ints(&[102, 1, 1, 2, 0, 15, 16])).await?;
    call(&c, RESERVE_SEATS, ints(&[103, 1, 1, 2, 102, 17])).await?;
    assert!(sql(&c, "SELECT cart_id FROM cart WHERE cart_id = 102")
        .await?
        .is_empty());
    assert_eq!(
        call(&c, LIST_FREE_SEATS, ints(&[2, 10])).await?,
        ints(&[10, 11, 12, 13, 14, 15, 16, 18, 19])
    );
    w.verify(&c).await?;

    // A second order in the other category, left unpaid, then both deleted.
    call(&c, CREATE_ORDER, ints(&[103, 501, 1, 1])).await?;
    assert_eq!(
        call(&c, DELETE_ORDER, ints(&[1, 500, 501])).await?,
        ints(&[2, 3])
    );
    for table in [
        "orders",
        "order_item",
        "payment",
        "ticket",
        "cart",
        "cart_item",
    ] {
        assert!(
            sql(&c, &format!("SELECT COUNT(*) FROM {table}")).await?[0][0] == Value::Int(0),
            "{table} is not empty"
        );
    }
    assert_eq!(
        one_row(
            &c,
            "SELECT free_count, sold_count, order_count, revenue FROM event_counters WHERE event_id = 1"
        )
        .await?,
        vec![Value::Int(20), Value::Int(0), Value::Int(0), money(0)]
    );
    assert!(is_user_abort(
        &call(&c, DELETE_ORDER, ints(&[1, 500])).await,
        "no order"
    ));
    w.verify(&c).await?;

    // Bad input is an error, not a panic, and changes nothing.
    assert!(matches!(
        call(&c, RESERVE_SEATS, ints(&[1, 2])).await,
        Err(Error::Arity { .. })
    ));
    assert!(matches!(
        call(&c, LIST_FREE_SEATS, ints(&[1, 0, 12])).await,
        Err(Error::Arity { .. })
    ));
    assert!(matches!(
        call(&c, PAY, vec![Value::Int(1), Value::str("x")]).await,
        Err(Error::Type { .. })
    ));
    w.verify(&c).await?;
    Ok(())
}

/// Puts the tiny hall in a state with every kind of row: a paid and
/// ticketed order (seats 2, 3), an unpaid order (seat 5), an open cart
/// (seat 12).
async fn busy_hall(w: &Ticket) -> Result<Cluster, Box<dyn std::error::Error>> {
    let c = start(w).await?;
    call(&c, RESERVE_SEATS, ints(&[100, 3, 1, 1, 0, 2, 3])).await?;
    call(&c, CREATE_ORDER, ints(&[100, 500, 3, 1])).await?;
    call(&c, PAY, vec![Value::Int(500), money(16_000)]).await?;
    call(&c, ISSUE_TICKETS, ints(&[500])).await?;
    call(&c, RESERVE_SEATS, ints(&[101, 2, 1, 1, 0, 5])).await?;
    call(&c, CREATE_ORDER, ints(&[101, 501, 2, 1])).await?;
    call(&c, RESERVE_SEATS, ints(&[102, 4, 1, 2, 0, 12])).await?;
    w.verify(&c).await?;
    Ok(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_fails_on_corrupted_data() -> TestResult {
    let cases: [(&[&str], &str); 9] = [
        (
            &["UPDATE seat SET status = 2 WHERE seat_id = 7"],
            "seat 7 has status 2",
        ),
        (
            &["UPDATE category_counters SET free_count = free_count - 1 WHERE event_id = 1 AND category_id = 2"],
            "category 2 counters",
        ),
        (
            &[
                "INSERT INTO orders (order_id, customer_id, event_id, seats, total, status) VALUES (999, 1, 1, 1, 80.00, 0)",
                "INSERT INTO order_item (order_id, seat_id, category_id, price) VALUES (999, 2, 1, 80.00)",
            ],
            "seat 2 is sold twice",
        ),
        (
            &["UPDATE payment SET amount = 1.00 WHERE order_id = 500"],
            "order 500 totals 16000 cents but its payment is Some(100)",
        ),
        (
            &["INSERT INTO payment (order_id, amount, method) VALUES (501, 80.00, 'card')"],
            "order 501 is unpaid but has a payment",
        ),
        (
            &["UPDATE event_counters SET order_count = 5 WHERE event_id = 1"],
            "event 1 counters",
        ),
        (
            &["DELETE FROM cart_item WHERE cart_id = 102"],
            "seat 12 has status 1",
        ),
        (
            &["DELETE FROM ticket WHERE order_id = 500 AND seat_id = 3"],
            "order 500 is ticketed",
        ),
        (
            &["UPDATE orders SET total = 70.00 WHERE order_id = 501"],
            "order 501 says 1 seats for 7000 cents",
        ),
    ];
    let w = tiny()?;
    for (statements, expected) in cases {
        let c = busy_hall(&w).await?;
        let mut txn = c.client().begin();
        for s in statements {
            txn.execute(s, vec![]).await?;
        }
        txn.commit().await?;
        match w.verify(&c).await {
            Err(BenchError::Invariant(msg)) => {
                assert!(msg.contains(expected), "{statements:?}: {msg}")
            }
            other => panic!("{statements:?}: the check did not fail: {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_after_a_contended_serializable_run() -> Result<(), BenchError> {
    // A small hall, and every finished order deleted before the client's
    // next session, so seats are fought over and every procedure runs
    // within two seconds even of a slow debug build.
    let w: Arc<dyn Workload> = Arc::new(Ticket::new(TicketParams {
        seats_per_category: 300,
        customers: 200,
        abandon_percent: 20,
        delete_batch: 1,
        delete_percent: 100,
    })?);
    let spec = BenchSpec {
        cluster: ClusterConfig {
            isolation: Isolation::Serializable,
            ..ClusterConfig::default()
        },
        protocols: vec!["acid".into()],
        groupings: Vec::new(),
        clients: vec![32],
        warmup: Duration::from_millis(300),
        duration: Duration::from_secs(2),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    };
    let report = run_bench(&spec, &[w], |_| {}).await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    let metric = |k: &str| {
        r.workload_metrics
            .get(k)
            .and_then(Json::as_u64)
            .unwrap_or(0)
    };
    assert!(metric("orders_created") > 0, "{:?}", r.workload_metrics);
    assert!(metric("delete_calls") > 0, "{:?}", r.workload_metrics);
    assert_eq!(metric("unexpected_aborts"), 0);
    for p in ALL {
        assert!(
            r.per_procedure.get(p).is_some_and(|s| s.commits > 0),
            "{p} never committed: {:?}",
            r.per_procedure.keys()
        );
    }
    Ok(())
}
