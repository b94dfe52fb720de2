//! The workloads under `callas`: TPC-C, ticketing and bank keep their
//! consistency checks and invariants with several groupings (one 2PL group
//! for everything, one group per procedure type, groups beside the default
//! ACID group), and recorded TPC-C and ticketing histories pass the
//! checker at the level the run promised. Short debug-build runs; no
//! timing figure is asserted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::workloads::bank::Bank;
use brine_bench::workloads::ticket::{Ticket, TicketParams};
use brine_bench::workloads::tpcc::procedures::StatementOrder;
use brine_bench::workloads::tpcc::{self, Mix, Scale, Tpcc};
use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_check::Level;
use brine_cluster::{ClusterConfig, Grouping, Isolation, LinkConfig};

fn spec(grouping: Option<&str>, isolation: Isolation, clients: u32, secs: f64) -> BenchSpec {
    BenchSpec {
        cluster: ClusterConfig {
            isolation,
            link: LinkConfig {
                delay_us: 50,
                jitter_us: 10,
            },
            grouping: grouping.map(|g| Grouping::parse(g).expect("grouping")),
            ..ClusterConfig::default()
        },
        protocols: vec!["callas".into()],
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

/// One group per TPC-C procedure type (each 2PL inside), the tool's
/// starting point in seed 000 section 4.5.
fn tpcc_per_type() -> String {
    tpcc::PROCEDURES
        .iter()
        .map(|p| format!("{p}:2pl={p}"))
        .collect::<Vec<_>>()
        .join(";")
}

const TPCC_SC_APP: &str = "app:sc=new_order,payment,delivery,order_status,stock_level";
const TPCC_SC_GROUPS: &str =
    "orders:sc=new_order,payment;dl:sc=delivery;os:sc=order_status;sl:sc=stock_level";

fn tpcc_workload() -> Result<Arc<dyn Workload>, BenchError> {
    Ok(Arc::new(
        Tpcc::new(2, Scale::SMALL, Mix::STANDARD)?
            .with_measure_window(Duration::from_millis(200), Duration::from_millis(1500)),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcc_keeps_its_consistency_under_every_grouping() -> Result<(), BenchError> {
    let per_type = tpcc_per_type();
    for grouping in [
        None,
        Some(per_type.as_str()),
        // new-order and payment grouped, the rest in the default group.
        Some("orders:2pl=new_order,payment"),
        // The sources' group, under Runtime Pipelining.
        Some("orders:rp=new_order,payment"),
        // Classic transaction chopping of the whole application, and
        // within the sources' groups (the ladder of seed 000 Fig. 4.8).
        Some(TPCC_SC_APP),
        Some(TPCC_SC_GROUPS),
        // Ranks that contradict new-order's body: chopped in body order.
        Some("g1:rp=payment,stock_level,new_order"),
    ] {
        let report = run_bench(
            &spec(grouping, Isolation::Serializable, 12, 1.5),
            &[tpcc_workload()?],
            |_| {},
        )
        .await?;
        for r in &report.results {
            assert_eq!(r.check, "passed", "{grouping:?}");
            assert!(
                r.per_procedure
                    .get(tpcc::NEW_ORDER)
                    .is_some_and(|s| s.commits > 0),
                "{grouping:?}: no new-order committed"
            );
        }
    }
    Ok(())
}

/// Clause 2's statement order (the sources' program, `--tpcc-order
/// spec`): the analysis reads its bodies' order, so Runtime Pipelining and
/// classic chopping run it as written and keep its consistency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcc_in_clause_2_s_order_runs_pipelined_and_chopped() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(
        Tpcc::new(1, Scale::SMALL, Mix::STANDARD)?
            .with_order(StatementOrder::Spec)
            .with_measure_window(Duration::from_millis(200), Duration::from_millis(1500)),
    );
    for grouping in ["orders:rp=new_order,payment", TPCC_SC_APP] {
        let report = run_bench(
            &spec(Some(grouping), Isolation::Serializable, 12, 1.5),
            std::slice::from_ref(&w),
            |_| {},
        )
        .await?;
        for r in &report.results {
            assert_eq!(r.check, "passed", "{grouping}");
            for p in [tpcc::NEW_ORDER, tpcc::PAYMENT] {
                assert!(
                    r.per_procedure.get(p).is_some_and(|s| s.commits > 0),
                    "{grouping}: no {p} committed"
                );
            }
        }
    }
    Ok(())
}

/// Ticketing on a small event (300 seats per category, 200 customers), so
/// short runs contend.
fn small_ticketing() -> Result<Arc<dyn Workload>, BenchError> {
    Ok(Arc::new(Ticket::new(TicketParams {
        seats_per_category: 300,
        customers: 200,
        abandon_percent: 20,
        delete_batch: 1,
        delete_percent: 100,
    })?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticketing_keeps_its_invariants_under_callas() -> Result<(), BenchError> {
    let w = small_ticketing()?;
    for grouping in [
        None,
        Some("checkout:2pl=reserve_seats,create_order,pay,issue_tickets,delete_order"),
        // The sources' group: checkout (create-order) alone, pipelined.
        Some("checkout:rp=create_order"),
        // `brine group ticket`'s choice (the looping, rolling-back bodies
        // pipelined through their notes), and every procedure pipelined.
        Some("g1:rp=delete_order,create_order"),
        Some(
            "all:rp=browse_events,view_event,lookup_customer,list_free_seats,reserve_seats,\
             view_cart,create_order,pay,issue_tickets,view_order,delete_order",
        ),
    ] {
        let report = run_bench(
            &spec(grouping, Isolation::ReadCommitted, 24, 1.5),
            std::slice::from_ref(&w),
            |_| {},
        )
        .await?;
        for r in &report.results {
            assert_eq!(r.check, "passed", "{grouping:?}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_keeps_its_total_with_transfers_in_a_group() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(Bank::new(20, 10)?);
    // Transfers in a group, totals in the default group (ACID): every
    // total must see the whole sum.
    let report = run_bench(
        &spec(Some("money:2pl=transfer"), Isolation::Serializable, 16, 1.5),
        &[w],
        |_| {},
    )
    .await?;
    for r in &report.results {
        assert_eq!(r.check, "passed");
        assert!(r.commits > 0);
    }
    Ok(())
}

/// Records a short run's history under `callas` with `grouping` and checks
/// it at `level`.
async fn checked_history(
    workload: Arc<dyn Workload>,
    grouping: &str,
    isolation: Isolation,
    level: Level,
) -> Result<brine_check::Report, BenchError> {
    // Tests run concurrently: each history gets a file of its own.
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "brine-callas-{}-{}-{isolation}-{}.jsonl",
        std::process::id(),
        workload.name(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut s = spec(Some(grouping), isolation, 16, 0.6);
    s.cluster.history = Some(path.clone());
    run_bench(&s, &[workload], |_| {}).await?;
    let h = brine_check::read_file(&path).map_err(|e| BenchError::Internal(e.to_string()))?;
    let _ = std::fs::remove_file(&path);
    assert!(h.txns.len() > 100, "too short a history: {}", h.txns.len());
    // Runs with a Runtime Pipelining or chopped group ask for
    // column-level items.
    let rp = grouping.contains(":rp=") || grouping.contains(":sc=");
    assert_eq!(brine_check::columns::wants_columns(&h.header), rp);
    Ok(if rp {
        let names = brine_check::columns::column_names(&h.header);
        assert!(!names.is_empty(), "the header names no columns");
        brine_check::check_columns(&h.txns, level, &names)
    } else {
        brine_check::check(&h.txns, level)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcc_histories_under_callas_pass_the_checker() -> Result<(), BenchError> {
    let report = checked_history(
        tpcc_workload()?,
        &tpcc_per_type(),
        Isolation::Serializable,
        Level::Serializable,
    )
    .await?;
    assert!(report.valid, "{:?}", report.anomalies);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticketing_histories_under_callas_pass_the_checker() -> Result<(), BenchError> {
    let w = small_ticketing()?;
    let report = checked_history(
        w,
        "checkout:2pl=reserve_seats,create_order,pay,issue_tickets,delete_order",
        Isolation::ReadCommitted,
        Level::ReadCommitted,
    )
    .await?;
    assert!(report.valid, "{:?}", report.anomalies);
    Ok(())
}

/// Runtime Pipelining's histories, checked per column (its dependencies
/// are per column; see brine_check::columns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_tpcc_histories_pass_the_checker() -> Result<(), BenchError> {
    // One warehouse, so new-orders and payments pipeline on its rows.
    let w: Arc<dyn Workload> = Arc::new(
        Tpcc::new(1, Scale::SMALL, Mix::STANDARD)?
            .with_measure_window(Duration::from_millis(200), Duration::from_millis(1500)),
    );
    let report = checked_history(
        w,
        "orders:rp=new_order,payment",
        Isolation::Serializable,
        Level::Serializable,
    )
    .await?;
    assert!(report.valid, "{}", report.render(5));
    Ok(())
}

/// Classic transaction chopping (`sc`) of the whole application: its
/// pieces commit on their own, and the chopping's lack of SC-cycles keeps
/// the history serializable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chopped_tpcc_histories_pass_the_checker() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(
        Tpcc::new(1, Scale::SMALL, Mix::STANDARD)?
            .with_measure_window(Duration::from_millis(200), Duration::from_millis(1500)),
    );
    let report =
        checked_history(w, TPCC_SC_APP, Isolation::Serializable, Level::Serializable).await?;
    assert!(report.valid, "{}", report.render(5));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_ticketing_histories_pass_the_checker() -> Result<(), BenchError> {
    let report = checked_history(
        small_ticketing()?,
        "checkout:rp=create_order,delete_order",
        Isolation::ReadCommitted,
        Level::ReadCommitted,
    )
    .await?;
    assert!(report.valid, "{}", report.render(5));
    Ok(())
}

/// The rollback microbenchmark under Runtime Pipelining: calls the check
/// on C rolls back end as user aborts (cascading to the group members that
/// saw their writes, which are retried), and the rest commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollback_microbenchmark_rolls_back_and_commits() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(brine_bench::workloads::Rollback::new(20)?);
    let report = run_bench(
        &spec(Some("g:rp=rollback11"), Isolation::ReadCommitted, 16, 1.0),
        &[w],
        |_| {},
    )
    .await?;
    for r in &report.results {
        assert!(r.commits > 0);
        assert!(r.user_aborts > 0, "{:?}", r.workload_metrics);
        // Counted over the whole run, warm-up included.
        let rolled_back = r
            .workload_metrics
            .get("rolled_back")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        assert!(
            rolled_back >= r.user_aborts,
            "every user abort is the check on C: {rolled_back} < {}",
            r.user_aborts
        );
    }
    Ok(())
}

/// The rollback microbenchmark without rollbacks, serializable: every
/// piece checks a shared row and then updates it. Two pieces of the same
/// rank that both took a read lock would deadlock on the upgrade (the
/// `acid` baseline does, thousands of times a second); the piece takes
/// the write lock at its check instead (`Placed::write_first`),
/// so no call is a concurrency-control victim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_check_then_update_pieces_do_not_deadlock() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(brine_bench::workloads::Rollback::new(0)?);
    // Under the detector a conflict waits, and only a deadlock aborts
    // (wait-die would abort the younger of any two pieces on one row).
    let mut detect = spec(Some("g:rp=rollback11"), Isolation::Serializable, 16, 1.0);
    detect.cluster.lock.policy = brine_cluster::DeadlockPolicy::Detect;
    let report = run_bench(&detect, &[w], |_| {}).await?;
    for r in &report.results {
        assert!(r.commits > 0);
        assert_eq!(r.cc_aborts, 0, "{:?}", r.aborts_by_cause);
    }
    Ok(())
}

/// The inter-group microbenchmark: both types commit under callas with
/// each type in its own group, conflicting through nexus locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inter_group_microbenchmark_runs_both_types() -> Result<(), BenchError> {
    let w: Arc<dyn Workload> = Arc::new(brine_bench::workloads::InterGroup::new(1, 5_000)?);
    let report = run_bench(
        &spec(
            Some("p:rp=pipelined;o:2pl=other"),
            Isolation::Serializable,
            16,
            1.0,
        ),
        &[w],
        |_| {},
    )
    .await?;
    for r in &report.results {
        for p in ["pipelined", "other"] {
            assert!(
                r.per_procedure.get(p).is_some_and(|s| s.commits > 0),
                "{p}: {:?}",
                r.per_procedure.get(p)
            );
        }
        assert!(r.workload_metrics["conflicting_other_calls"].as_u64() > Some(0));
    }
    Ok(())
}
