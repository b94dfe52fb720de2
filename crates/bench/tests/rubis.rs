//! RUBiS end to end on the small scale: every transaction runs and has its
//! effect, the default (bidding) mix keeps the consistency checks at
//! serializable and read committed, a recorded history passes the
//! isolation checker at the run's level, and the check does fail on
//! corrupted data. Debug-build friendly; no timing figure is asserted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::rubis::{self, check, procedures, Mix, Rubis, Scale};
use brine_bench::workloads::tpcc::check::read_rows;
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_check::{Level, Outcome};
use brine_cluster::{Cluster, ClusterConfig, Isolation, LinkConfig};
use brine_core::{Decimal, Error, Value};
use rand::rngs::SmallRng;
use rand::SeedableRng;

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

async fn loaded() -> R<(Rubis, Cluster)> {
    let w = Rubis::new(Scale::SMALL, Mix::BIDDING)?;
    let cluster =
        Cluster::start(fast_config(), w.application()).map_err(BenchError::cluster("starting"))?;
    w.load(&cluster).await?;
    Ok((w, cluster))
}

async fn int(cluster: &Cluster, sql: &str, args: Vec<Value>) -> R<i64> {
    let r = read_rows(cluster, sql, args).await?;
    r.first()
        .and_then(|row| row.first())
        .and_then(Value::as_int)
        .ok_or_else(|| BenchError::Internal(format!("`{sql}` returned no INT: {r:?}")))
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

fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transaction_runs_and_writers_have_their_effect() -> R {
    let (w, cluster) = loaded().await?;
    assert_eq!(w.find_violations(&cluster).await?.count, 0);

    // Every read-only transaction runs with a session's inputs.
    let mut session = w.session(0, SmallRng::seed_from_u64(3));
    for p in rubis::READ_ONLY {
        let t = session.transaction(p);
        call(&cluster, p, t.args).await.map_err(call_err(p))?;
    }
    let page = call(
        &cluster,
        rubis::SEARCH_ITEMS_BY_CATEGORY,
        vec![i(1), i(1), Value::Timestamp(0)],
    )
    .await
    .map_err(call_err("search"))?;
    assert!(page[0]
        .as_int()
        .is_some_and(|n| n > 0 && n <= procedures::PAGE_SIZE));
    let auth = call(
        &cluster,
        rubis::AUTHENTICATE,
        vec![Value::str("user5"), Value::str("password5")],
    )
    .await
    .map_err(call_err("authenticate"))?;
    assert_eq!(auth, vec![i(5)]);
    assert!(matches!(
        call(
            &cluster,
            rubis::AUTHENTICATE,
            vec![Value::str("user5"), Value::str("nope")]
        )
        .await,
        Err(Error::UserAbort(_))
    ));

    // A bid above every other raises max_bid and counts.
    let item = 3;
    let nb = int(
        &cluster,
        "SELECT nb_of_bids FROM items WHERE id = $i",
        vec![i(item)],
    )
    .await?;
    let id = rubis::load::RUN_ID_BASE + 1;
    call(
        &cluster,
        rubis::STORE_BID,
        vec![
            i(7),
            i(item),
            i(id),
            money(9_999_900),
            money(9_999_900),
            i(1),
            Value::Timestamp(1),
        ],
    )
    .await
    .map_err(call_err("store_bid"))?;
    assert_eq!(
        int(
            &cluster,
            "SELECT nb_of_bids FROM items WHERE id = $i",
            vec![i(item)]
        )
        .await?,
        nb + 1
    );

    // Buying more than is offered is refused and changes nothing.
    let q = int(
        &cluster,
        "SELECT quantity FROM items WHERE id = $i",
        vec![i(item)],
    )
    .await?;
    let bn = |id: i64, qty: i64| vec![i(8), i(item), i(id), i(qty), Value::Timestamp(2)];
    let r = call(&cluster, rubis::STORE_BUY_NOW, bn(id + 1, q + 1)).await;
    assert!(
        matches!(r, Err(Error::UserAbort(ref m)) if m == procedures::SOLD_OUT),
        "{r:?}"
    );
    assert_eq!(
        int(
            &cluster,
            "SELECT quantity FROM items WHERE id = $i",
            vec![i(item)]
        )
        .await?,
        q
    );
    call(&cluster, rubis::STORE_BUY_NOW, bn(id + 2, q))
        .await
        .map_err(call_err("store_buy_now"))?;
    assert_eq!(
        int(
            &cluster,
            "SELECT quantity FROM items WHERE id = $i",
            vec![i(item)]
        )
        .await?,
        0
    );

    // A comment moves the rating.
    let rating = int(
        &cluster,
        "SELECT rating FROM users WHERE id = $u",
        vec![i(9)],
    )
    .await?;
    call(
        &cluster,
        rubis::STORE_COMMENT,
        vec![
            i(1),
            i(9),
            i(item),
            i(id + 3),
            i(5),
            Value::Timestamp(3),
            Value::str("fine"),
        ],
    )
    .await
    .map_err(call_err("store_comment"))?;
    assert_eq!(
        int(
            &cluster,
            "SELECT rating FROM users WHERE id = $u",
            vec![i(9)]
        )
        .await?,
        rating + 5
    );

    // Registrations; a taken nickname is refused.
    for p in [rubis::REGISTER_USER, rubis::REGISTER_ITEM] {
        let t = session.transaction(p);
        call(&cluster, p, t.args).await.map_err(call_err(p))?;
    }
    let r = call(
        &cluster,
        rubis::REGISTER_USER,
        vec![
            i(id + 4),
            Value::str("user1"),
            Value::str("x"),
            i(1),
            Value::Timestamp(4),
        ],
    )
    .await;
    assert!(matches!(r, Err(Error::UserAbort(ref m)) if m == procedures::NICKNAME_TAKEN));
    assert_eq!(w.find_violations(&cluster).await?.count, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_corruption() -> R {
    let (_w, cluster) = loaded().await?;
    let client = cluster.client();
    let mut txn = client.begin();
    for sql in [
        "UPDATE items SET nb_of_bids = nb_of_bids + 1 WHERE id = 1",
        "UPDATE items SET quantity = quantity - 1 WHERE id = 2",
        "UPDATE users SET rating = rating + 1 WHERE id = 3",
    ] {
        txn.execute(sql, vec![])
            .await
            .map_err(BenchError::cluster(sql.to_string()))?;
    }
    txn.commit().await.map_err(BenchError::cluster("commit"))?;
    let f = check::check(&cluster).await?;
    assert_eq!(f.count, 3, "{:?}", f.violations);
    assert!(check::check_or_fail(&cluster).await.is_err());
    Ok(())
}

fn spec(isolation: Isolation, history: Option<PathBuf>) -> BenchSpec {
    BenchSpec {
        cluster: ClusterConfig {
            isolation,
            link: LinkConfig {
                delay_us: 50,
                jitter_us: 10,
            },
            history,
            ..ClusterConfig::default()
        },
        protocols: vec!["acid".into()],
        groupings: Vec::new(),
        clients: vec![16],
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(700),
        check: true,
        deadlock_per_protocol: false,
        remote: None,
        rounds: 1,
        baseline: 1,
    }
}

/// The bidding mix under `acid` at `isolation`: the checks pass, writes
/// commit, and the recorded history passes the checker at the run's level.
async fn bidding_run(isolation: Isolation, level: Level) -> R {
    let path = std::env::temp_dir().join(format!(
        "brine-rubis-{}-{isolation}.jsonl",
        std::process::id()
    ));
    let w: Arc<dyn Workload> = Arc::new(Rubis::new(Scale::SMALL, Mix::BIDDING)?);
    let report = run_bench(&spec(isolation, Some(path.clone())), &[w], |_| {}).await?;
    let r = &report.results[0];
    assert_eq!(r.check, "passed");
    assert!(r.commits > 100, "{} commits", r.commits);
    for m in ["bids_committed", "comments_committed"] {
        let n = r
            .workload_metrics
            .get(m)
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        assert!(n > 0, "{m}: {:?}", r.workload_metrics);
    }
    let history = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    let committed = history
        .txns
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .count();
    assert!(committed >= 50, "{committed} committed");
    let report = brine_check::check(&history.txns, level);
    assert_eq!(report.violations().count(), 0, "{}", report.render(5));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bidding_keeps_the_checks_at_serializable() -> R {
    bidding_run(Isolation::Serializable, Level::Serializable).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bidding_keeps_the_checks_at_read_committed() -> R {
    bidding_run(Isolation::ReadCommitted, Level::ReadCommitted).await
}

/// Every procedure pipelined in one Callas group: the analysis knows which
/// statements the bodies run in a loop (a nickname per bidder, an item per
/// item of a user's page), so the pieces it cuts agree with what the
/// bodies run; the checks pass and the history is serializable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_procedure_pipelines_in_one_callas_group() -> R {
    let w: Arc<dyn Workload> = Arc::new(Rubis::new(Scale::SMALL, Mix::BIDDING)?);
    let s = spec(Isolation::Serializable, None);
    let r = web_common::pipelined_history_is_clean(s, w, "rubis").await?;
    assert!(r.commits > 100, "{} commits", r.commits);
    Ok(())
}

/// Bids and buy-nows BASE under Salt (the default `--base`): the bidding
/// mix keeps the checks, and its history passes the Salt Isolation check
/// (no ACID page saw an item counted without its bid).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn base_bids_under_salt_keep_the_checks_and_salt_isolation() -> R {
    let w: Arc<dyn Workload> = Arc::new(Rubis::new(Scale::SMALL, Mix::BIDDING)?);
    web_common::salt_history_is_clean(spec(Isolation::Serializable, None), w, "rubis").await
}
