//! The BASE-ified workloads (Salt): their bodies keep the ACID effects and
//! invariants under `acid`, and under every Salt protocol that exists
//! (`salt`, `salt-nolocal`), which run the same bodies as BASE
//! transactions. Invariants are asserted under every protocol, and so is
//! progress: a point that committed nothing fails, whatever its protocol
//! (a Salt point that stalls keeps its invariants trivially). How much
//! it commits is a performance figure and is not asserted. Short
//! debug-build runs; no timing figure is asserted.

use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::bank::{self, Bank};
use brine_bench::workloads::base::BaseSet;
use brine_bench::workloads::ticket::{self, Ticket, TicketParams};
use brine_bench::workloads::tpcc::{self, Mix, Scale, Tpcc};
use brine_bench::workloads::{Micro, Micro2, Micro3};
use brine_bench::{run_bench, BenchError, BenchSpec, PointResult, Workload};
use brine_cluster::protocols;
use brine_cluster::{Cluster, ClusterConfig, Isolation, LinkConfig};
use brine_core::{Decimal, Value};
use serde_json::Value as Json;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// `acid` and every Salt protocol the cluster knows.
fn protocols() -> Vec<String> {
    ["acid", "salt", "salt-nolocal"]
        .into_iter()
        .filter(|p| protocols::lookup(p).is_ok())
        .map(String::from)
        .collect()
}

fn spec(protocols: Vec<String>, clients: u32, secs: f64) -> BenchSpec {
    BenchSpec {
        cluster: ClusterConfig {
            isolation: Isolation::Serializable,
            ..ClusterConfig::default()
        },
        protocols,
        groupings: Vec::new(),
        clients: vec![clients],
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs_f64(secs),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    }
}

fn metric(r: &PointResult, key: &str) -> u64 {
    r.workload_metrics
        .get(key)
        .and_then(Json::as_u64)
        .unwrap_or(u64::MAX)
}

fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

fn cents(v: &Value) -> Option<i64> {
    v.as_decimal().and_then(|d| d.units_at(2))
}

/// Reads one balance with an interactive transaction. A concurrency-control
/// abort is retried (a BASE call's last locks may still be on their way to
/// release when the call returns); each retry is printed.
async fn balance(cluster: &Cluster, id: i64) -> R<i64> {
    let mut last = None;
    for attempt in 0..50 {
        let mut txn = cluster.client().begin();
        let q = match txn
            .execute(
                "SELECT balance FROM account WHERE id = $id",
                vec![Value::Int(id)],
            )
            .await
        {
            Ok(q) => q,
            Err(e) if e.is_retryable() => {
                println!(
                    "{}: reading account {id}: attempt {attempt} aborted: {e}",
                    cluster.config().protocol
                );
                txn.abort().await;
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        txn.commit().await?;
        return Ok(q
            .scalar()
            .and_then(cents)
            .ok_or_else(|| format!("account {id} has no balance"))?);
    }
    Err(format!("reading account {id} kept aborting: {last:?}").into())
}

/// Seed 000 Fig. 3.1 path by path: the money moves; an insufficient
/// balance returns without moving it; a missing receiver is compensated;
/// `total` is unchanged after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_follows_figure_3_1_on_every_path() -> R {
    for protocol in protocols() {
        let w = Bank::new(3, 10)?;
        let config = ClusterConfig {
            protocol: protocol.clone(),
            link: LinkConfig {
                delay_us: 0,
                jitter_us: 0,
            },
            ..ClusterConfig::default()
        };
        let cluster = Cluster::start(config, w.application())?;
        w.load(&cluster).await?;
        let client = cluster.client();
        let transfer = |from: i64, to: i64, amount: i64| {
            client.call(
                bank::TRANSFER,
                vec![Value::Int(from), Value::Int(to), money(amount)],
            )
        };
        let status = |o: brine_cluster::CallOutcome| {
            o.values
                .first()
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_default()
        };
        let start = bank::INITIAL_BALANCE_CENTS;

        assert_eq!(status(transfer(0, 1, 250).await?), bank::TRANSFERRED);
        assert_eq!(balance(&cluster, 0).await?, start - 250, "{protocol}");
        assert_eq!(balance(&cluster, 1).await?, start + 250, "{protocol}");

        // Lines 6 and 10: not enough money, nothing written, no abort.
        assert_eq!(
            status(transfer(0, 2, start).await?),
            bank::INSUFFICIENT_FUNDS
        );
        assert_eq!(balance(&cluster, 0).await?, start - 250, "{protocol}");
        assert_eq!(balance(&cluster, 2).await?, start, "{protocol}");

        // Lines 15-18: no such receiver, the sender is re-credited.
        assert_eq!(status(transfer(1, 99, 100).await?), bank::REFUNDED);
        assert_eq!(balance(&cluster, 1).await?, start + 250, "{protocol}");

        let total = client.call(bank::TOTAL, vec![]).await?;
        assert_eq!(
            total.values.first().and_then(cents),
            Some(w.expected_total_cents()),
            "{protocol}"
        );
        // Lines 3-9: a failure in the first subtransaction aborts the call
        // (no such sender) and changes nothing.
        assert!(transfer(77, 1, 100).await.is_err(), "{protocol}");
        assert_eq!(balance(&cluster, 1).await?, start + 250, "{protocol}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn base_transfers_keep_the_total() -> Result<(), BenchError> {
    let bank: Arc<dyn Workload> = Arc::new(Bank::new(200, 10)?);
    let report = run_bench(&spec(protocols(), 8, 1.0), &[bank], |_| {}).await?;
    for r in &report.results {
        assert_eq!(r.check, "passed", "{}", r.protocol);
        assert_eq!(metric(r, "total_violations"), 0, "{}", r.protocol);
        assert_eq!(metric(r, "transfers_refunded"), 0, "{}", r.protocol);
        assert!(metric(r, "totals_read") > 0, "{}", r.protocol);
        assert!(metric(r, "transfers_committed") > 0, "{}", r.protocol);
        println!("{}: {:?}", r.protocol, r.workload_metrics);
    }
    Ok(())
}

/// Micro 1-3, BASE-ified by default, keep SUM(v) = increments committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn microbenchmarks_keep_their_sums() -> Result<(), BenchError> {
    let micro: Vec<Arc<dyn Workload>> = vec![Arc::new(Micro::new(20)?)];
    let micro2: Vec<Arc<dyn Workload>> = vec![Arc::new(Micro2::new(1)?)];
    let micro3: Vec<Arc<dyn Workload>> = vec![
        Arc::new(Micro3::new(100, 50)?),
        Arc::new(Micro3::new(100, 50)?.with_base(BaseSet::of(&["write5"]))),
    ];
    for workloads in [micro, micro2, micro3] {
        let report = run_bench(&spec(protocols(), 16, 0.6), &workloads, |_| {}).await?;
        assert_eq!(report.results.len(), workloads.len() * protocols().len());
        for r in &report.results {
            assert_eq!(r.check, "passed", "{} {:?}", r.protocol, r.params);
            assert!(r.commits > 0, "{} {:?}", r.protocol, r.params);
            println!("{} {:?}: {} commits", r.protocol, r.params, r.commits);
        }
    }
    Ok(())
}

/// TPC-C with new-order, payment and delivery BASE-ified (and with every
/// procedure BASE): the consistency conditions still hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcc_base_variants_keep_consistency() -> Result<(), BenchError> {
    let window = (Duration::from_millis(200), Duration::from_millis(1500));
    let make = |base: BaseSet| -> Result<Arc<dyn Workload>, BenchError> {
        Ok(Arc::new(
            Tpcc::new(2, Scale::SMALL, Mix::SALT)?
                .with_measure_window(window.0, window.1)
                .with_base(base),
        ))
    };
    let workloads = vec![
        make(BaseSet::of(&[
            tpcc::NEW_ORDER,
            tpcc::PAYMENT,
            tpcc::DELIVERY,
        ]))?,
        make(BaseSet::of(&tpcc::PROCEDURES))?,
    ];
    let report = run_bench(&spec(protocols(), 12, 1.5), &workloads, |_| {}).await?;
    for r in &report.results {
        assert_eq!(r.check, "passed", "{} {:?}", r.protocol, r.params);
        assert!(
            r.per_procedure
                .get(tpcc::NEW_ORDER)
                .is_some_and(|s| s.commits > 0),
            "{} {:?}",
            r.protocol,
            r.params
        );
        println!("{} {:?}: {:?}", r.protocol, r.params, r.workload_metrics);
    }
    Ok(())
}

/// Ticketing with create-order BASE-ified keeps every invariant, and so
/// does it with delete-order BASE-ified too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_with_base_create_order_keeps_its_invariants() -> Result<(), BenchError> {
    let known = &ticket::procedures::BASE_CAPABLE;
    for base in ["create_order", "create_order,delete_order"] {
        let w: Arc<dyn Workload> = Arc::new(
            Ticket::new(TicketParams {
                seats_per_category: 300,
                customers: 200,
                abandon_percent: 20,
                delete_batch: 4,
                delete_percent: 100,
            })?
            .with_base(BaseSet::parse(base, known)?),
        );
        let report = run_bench(&spec(protocols(), 24, 1.5), &[w], |_| {}).await?;
        for r in &report.results {
            assert_eq!(r.check, "passed", "{base}: {}", r.protocol);
            assert_eq!(metric(r, "unexpected_aborts"), 0, "{base}: {}", r.protocol);
            assert!(metric(r, "orders_created") > 0, "{base}: {}", r.protocol);
            let deletes = r.per_procedure.get("delete_order");
            assert!(
                deletes.is_some_and(|d| d.commits > 0),
                "{base}: {}: no order deleted",
                r.protocol
            );
        }
    }
    Ok(())
}

/// A recorded ticketing history with create-order and delete-order both
/// BASE-ified passes the Salt Isolation check: no ACID transaction (the
/// listings, reservations, payments) observed a half-done order or a
/// half-done deletion, directly or through a chain of BASE reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_histories_with_both_orders_base_pass_the_salt_check() -> Result<(), BenchError> {
    let path = std::env::temp_dir().join(format!("brine-salt-ticket-{}.jsonl", std::process::id()));
    let w: Arc<dyn Workload> = Arc::new(
        Ticket::new(TicketParams {
            seats_per_category: 300,
            customers: 200,
            abandon_percent: 20,
            delete_batch: 2,
            delete_percent: 100,
        })?
        .with_base(BaseSet::parse(
            "create_order,delete_order",
            &ticket::procedures::BASE_CAPABLE,
        )?),
    );
    let mut s = spec(vec!["salt".into()], 16, 0.8);
    s.cluster.isolation = Isolation::ReadCommitted;
    s.cluster.history = Some(path.clone());
    run_bench(&s, &[w], |_| {}).await?;
    let h = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    let _ = std::fs::remove_file(&path);
    let base_ends = h
        .txns
        .iter()
        .filter(|t| t.class == brine_check::TxnClass::Base && t.accepted)
        .count();
    assert!(
        base_ends > 10,
        "too few accepted BASE transactions: {base_ends}"
    );
    let report = brine_check::check(&h.txns, brine_check::Level::Salt);
    assert!(report.valid, "{}", report.render(5));
    Ok(())
}
