//! TPC-W end to end on the small (non-standard) scale: the database loads
//! with the scale's sizes and passes the checks, a buy has its effect, the
//! default (shopping) mix keeps the checks under `acid` at serializable
//! and read committed, its recorded history passes the isolation checker
//! at the run's level, and bad parameters are refused. Debug-build
//! friendly; no timing figure is asserted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::tpcw::{self, check, Mix, Scale, Tpcw};
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_check::{Level, Outcome};
use brine_cluster::{Cluster, ClusterConfig, Isolation, LinkConfig};
use brine_core::Value;

mod web_common;

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

async fn count(cluster: &Cluster, table: &str) -> R<i64> {
    let rows = check::read_rows_all(cluster, &format!("SELECT COUNT(*) FROM {table}")).await?;
    rows.first()
        .and_then(|r| r.first())
        .and_then(Value::as_int)
        .ok_or_else(|| BenchError::Internal(format!("no count of {table}")))
}

fn spec(isolation: Isolation, clients: u32, history: Option<PathBuf>) -> BenchSpec {
    BenchSpec {
        cluster: ClusterConfig {
            isolation,
            history,
            ..fast_config()
        },
        protocols: vec!["acid".into()],
        groupings: Vec::new(),
        clients: vec![clients],
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(1_500),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_database_loads_with_its_sizes_and_a_buy_has_its_effect() -> R {
    let s = Scale::SMALL;
    let w = Tpcw::new(s, Mix::SHOPPING)?;
    let cluster =
        Cluster::start(fast_config(), w.application()).map_err(BenchError::cluster("starting"))?;
    w.load(&cluster).await?;
    assert_eq!(count(&cluster, "item").await?, s.items);
    assert_eq!(count(&cluster, "customer").await?, s.customers);
    assert_eq!(count(&cluster, "address").await?, s.addresses());
    assert_eq!(count(&cluster, "author").await?, s.authors());
    assert_eq!(count(&cluster, "country").await?, 92);
    assert_eq!(count(&cluster, "orders").await?, s.orders());
    assert_eq!(count(&cluster, "cc_xacts").await?, s.orders());
    assert_eq!(count(&cluster, "shopping_cart").await?, 0);
    let f = w.find_violations(&cluster).await?;
    assert_eq!(f.count, 0, "{:?}", f.violations);

    // A cart with two items, bought: stock goes down by the quantities
    // (or is restocked by 21), the order has its lines and payment, the
    // cart is empty.
    let client = cluster.client();
    let call = |p: &'static str, args: Vec<Value>| {
        let client = client.clone();
        async move {
            client
                .call(p, args)
                .await
                .map(|o| o.values)
                .map_err(|source| BenchError::Call {
                    procedure: p.to_string(),
                    source,
                })
        }
    };
    let stock = |i: i64| {
        let cluster = &cluster;
        async move {
            let rows = check::read_rows_all(
                cluster,
                &format!("SELECT i_stock FROM item WHERE i_id = {i}"),
            )
            .await?;
            Ok::<i64, BenchError>(rows[0][0].as_int().unwrap_or(-1))
        }
    };
    let now = Value::Timestamp(1_700_000_000_000_000);
    let (s1, s2) = (stock(3).await?, stock(7).await?);
    call(tpcw::CREATE_EMPTY_CART, vec![Value::Int(1), now.clone()]).await?;
    for (i, q) in [(7, 2), (3, 4)] {
        call(
            tpcw::DO_CART,
            vec![Value::Int(1), Value::Int(i), Value::Int(q), now.clone()],
        )
        .await?;
    }
    let cart = call(tpcw::GET_CART, vec![Value::Int(1)]).await?;
    assert_eq!(cart[0], Value::Int(2));
    let o = s.orders() + 1;
    let args = vec![
        Value::Int(1),
        Value::Int(5),
        Value::Int(o),
        now.clone(),
        Value::str("AIR"),
        Value::str("VISA"),
        Value::str("1234567890123456"),
        Value::str("customer 5"),
        now.clone(),
        Value::str("AUTH00000000000"),
        Value::Int(1),
    ];
    let out = call(tpcw::DO_BUY_CONFIRM, args.clone()).await?;
    assert_eq!(out[0], Value::Int(o));
    assert_eq!(out[2], Value::Int(2));
    let expect = |before: i64, q: i64| {
        if before - q < 10 {
            before - q + 21
        } else {
            before - q
        }
    };
    assert_eq!(stock(3).await?, expect(s1, 4));
    assert_eq!(stock(7).await?, expect(s2, 2));
    let cart = call(tpcw::GET_CART, vec![Value::Int(1)]).await?;
    assert_eq!(cart[0], Value::Int(0));
    let recent = call(
        tpcw::GET_MOST_RECENT_ORDER,
        vec![Value::str(&tpcw::schema::digsyl(5))],
    )
    .await?;
    assert_eq!(recent, vec![Value::Int(o), Value::Int(2)]);
    // A second buy of the now empty cart is refused.
    let mut again = args;
    again[2] = Value::Int(o + 1);
    assert!(call(tpcw::DO_BUY_CONFIRM, again).await.is_err());
    // Every read-only transaction runs on the loaded data.
    for (p, args) in [
        (tpcw::GET_NAME, vec![Value::Int(5)]),
        (tpcw::GET_BOOK, vec![Value::Int(5)]),
        (
            tpcw::GET_CUSTOMER,
            vec![Value::str(&tpcw::schema::digsyl(5))],
        ),
        (tpcw::DO_SUBJECT_SEARCH, vec![Value::str("ARTS")]),
        (
            tpcw::DO_TITLE_SEARCH,
            vec![Value::str("OG"), Value::str("OG~")],
        ),
        (tpcw::DO_AUTHOR_SEARCH, vec![Value::str("RE")]),
        (tpcw::GET_NEW_PRODUCTS, vec![Value::str("ARTS")]),
        (
            tpcw::GET_BEST_SELLERS,
            vec![Value::str("ARTS"), Value::Int(0)],
        ),
        (tpcw::GET_RELATED, vec![Value::Int(5)]),
        (tpcw::GET_USER_NAME, vec![Value::Int(5)]),
        (
            tpcw::GET_PASSWORD,
            vec![Value::str(&tpcw::schema::digsyl(5))],
        ),
    ] {
        call(p, args).await?;
    }
    let titles = call(
        tpcw::DO_TITLE_SEARCH,
        vec![Value::str("OG"), Value::str("OG~")],
    )
    .await?;
    assert!(!titles.is_empty(), "no title starts with OG");
    let f = w.find_violations(&cluster).await?;
    assert_eq!(f.count, 0, "{:?}", f.violations);
    assert_eq!(f.run_orders, 1);
    Ok(())
}

async fn mix_run_passes_checks(isolation: Isolation) -> R {
    let w: Arc<dyn Workload> = Arc::new(Tpcw::new(Scale::SMALL, Mix::SHOPPING)?);
    let report = run_bench(&spec(isolation, 8, None), &[w], |_| {}).await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    for p in [tpcw::GET_RELATED, tpcw::DO_CART, tpcw::GET_BOOK] {
        assert!(
            r.per_procedure.get(p).is_some_and(|s| s.commits > 0),
            "{p} never committed: {:?}",
            r.per_procedure.keys()
        );
    }
    println!(
        "tpcw small shopping {isolation}: {} txn/s, {:?}",
        r.throughput_tps, r.workload_metrics
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shopping_mix_keeps_the_checks_at_serializable() -> R {
    mix_run_passes_checks(Isolation::Serializable).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shopping_mix_keeps_the_checks_at_read_committed() -> R {
    mix_run_passes_checks(Isolation::ReadCommitted).await
}

/// The ordering mix (most writes) under serializable, its history recorded
/// and checked at the run's level.
async fn recorded_history_is_valid(isolation: Isolation, level: Level) -> R {
    let path = std::env::temp_dir().join(format!(
        "brine-tpcw-{}-{isolation}.jsonl",
        std::process::id()
    ));
    let w: Arc<dyn Workload> = Arc::new(Tpcw::new(Scale::SMALL, Mix::ORDERING)?);
    let mut s = spec(isolation, 8, Some(path.clone()));
    s.duration = Duration::from_millis(800);
    run_bench(&s, &[w], |_| {}).await?;
    let history = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    let committed = history
        .txns
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .count();
    assert!(committed >= 50, "too few transactions: {committed}");
    let report = brine_check::check(&history.txns, level);
    assert!(report.valid, "{:?}", report.counts);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_history_checks_serializable() -> R {
    recorded_history_is_valid(Isolation::Serializable, Level::Serializable).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_history_checks_read_committed() -> R {
    recorded_history_is_valid(Isolation::ReadCommitted, Level::ReadCommitted).await
}

/// Every procedure pipelined in one Callas group: the analysis knows the
/// bodies' loops (an author per listed item, a stock update per cart line)
/// and user aborts, so the pieces it cuts agree with what the bodies run.
/// The ordering mix keeps the checks and its history is serializable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_pipelines_in_one_callas_group() -> R {
    let w: Arc<dyn Workload> = Arc::new(Tpcw::new(Scale::SMALL, Mix::ORDERING)?);
    let s = spec(Isolation::Serializable, 8, None);
    let r = web_common::pipelined_history_is_clean(s, w, "tpcw").await?;
    assert!(
        r.per_procedure
            .get(tpcw::DO_BUY_CONFIRM)
            .is_some_and(|p| p.commits > 0),
        "no buy committed: {:?}",
        r.per_procedure.keys()
    );
    Ok(())
}

/// Both buy-confirms BASE under Salt (the default `--base`): the ordering
/// mix keeps the checks, and its history passes the Salt Isolation check
/// (no ACID transaction, the listings and cart views included, saw a buy
/// half done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_buys_under_salt_keep_the_checks_and_salt_isolation() -> R {
    let w: Arc<dyn Workload> = Arc::new(Tpcw::new(Scale::SMALL, Mix::ORDERING)?);
    web_common::salt_history_is_clean(spec(Isolation::Serializable, 8, None), w, "tpcw").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_clients_than_customers_is_refused() -> R {
    let w: Arc<dyn Workload> = Arc::new(Tpcw::new(Scale::SMALL, Mix::SHOPPING)?);
    let clients = u32::try_from(Scale::SMALL.customers + 1).unwrap_or(u32::MAX);
    match run_bench(&spec(Isolation::Serializable, clients, None), &[w], |_| {}).await {
        Err(BenchError::Config(m)) => assert!(m.contains("customers"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted more clients than customers"),
    }
    assert!(matches!(Mix::by_name("odd"), Err(BenchError::Config(_))));
    assert!(matches!(Scale::by_name("odd"), Err(BenchError::Config(_))));
    Ok(())
}
