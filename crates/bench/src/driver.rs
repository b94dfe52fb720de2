//! The closed-loop driver: runs a workload against freshly started embedded
//! clusters, one measured point per (workload variant, protocol, client
//! count), and collects the report.
//!
//! ```text
//!  for variant (e.g. --rows 10,1000)      each point: fresh cluster + data
//!    for protocol (--compare acid,...)     |<- warm-up ->|<--- measured --->| drain
//!      for clients (--clients 1,8,64)      clients loop: next() -> call() -> record
//!                                          stats snapshot ^                  ^
//! ```
//!
//! Guarantees: every point starts from the same initial data (except a
//! run against a running cluster that holds its data already, which may
//! start from it: `prepare_data`) and the same request streams (client
//! RNGs are seeded from the cluster seed, the variant, the client count
//! and the client index, not the protocol), so protocols are compared on
//! identical work. A call completing inside the
//! measured interval is recorded; the cluster's counters (aborts by cause,
//! retries, statements, lock waits) and the link's measured delay are
//! sampled at the interval's edges. A call failing for any reason other
//! than contention (user abort, retries exhausted) stops the run: it is a
//! bug to fix, not a number to report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_cluster::{Client, Cluster, StatsSnapshot};
use brine_core::Error;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::{Map, Value as Json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cpu::{CpuPoint, CpuSample};
use crate::error::{BenchError, Result};
use crate::recorder::{round2, Recorder};
use crate::report::{BenchReport, FaultsPoint, PointResult};
use crate::spec::{deadlock_name, parse_entry, BenchSpec, Label, LoadPolicy};
use crate::workload::{ClientGen, TxnRequest, Workload};

/// Requests a deferred queue holds before clients handing it more wait.
const DEFERRED_QUEUE_DEPTH: usize = 16;

/// How long clients may take to finish their last call after the measured
/// interval before the run is declared stuck.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs every point and builds the report. `on_point` sees each result as
/// soon as it is measured (to print it).
pub async fn run_bench(
    spec: &BenchSpec,
    workloads: &[Arc<dyn Workload>],
    mut on_point: impl FnMut(&PointResult),
) -> Result<BenchReport> {
    spec.validate()?;
    let name = match workloads.first() {
        Some(w) => w.name(),
        None => return Err(BenchError::Config("no workload to run".into())),
    };
    // Every point's client count is refused now, not after the points
    // before it ran.
    for w in workloads {
        for &clients in &spec.clients {
            w.validate_clients(clients)?;
        }
    }
    // One round: each protocol's client sweep in turn. Several: at each
    // client count, every protocol once per round.
    let nprot = spec.protocols.len();
    let mut order: Vec<(usize, usize, u32, u32)> = Vec::new();
    for variant in 0..workloads.len() {
        if spec.rounds <= 1 {
            for protocol_index in 0..nprot {
                for &clients in &spec.clients {
                    order.push((variant, protocol_index, clients, 1));
                }
            }
        } else {
            for &clients in &spec.clients {
                for round in 1..=spec.rounds {
                    for protocol_index in 0..nprot {
                        order.push((variant, protocol_index, clients, round));
                    }
                }
            }
        }
    }
    let mut results = Vec::new();
    for (variant, protocol_index, clients, round) in order {
        let workload = workloads[variant].as_ref();
        let (mut r, failed_check) =
            measure_point(spec, workload, variant, protocol_index, clients).await?;
        r.round = round;
        // The table of a point whose check failed is still shown: it is
        // the evidence.
        on_point(&r);
        if let Some(e) = failed_check {
            return Err(e);
        }
        results.push(r);
    }
    Ok(BenchReport::with_baseline(
        name,
        spec.config_json(workloads),
        results,
        spec.baseline,
    ))
}

/// One measured point on a freshly started and loaded cluster. With
/// `spec.check`, a failed invariant check is an error.
pub async fn run_point(
    spec: &BenchSpec,
    workload: &dyn Workload,
    variant: usize,
    protocol_index: usize,
    clients: u32,
) -> Result<PointResult> {
    match measure_point(spec, workload, variant, protocol_index, clients).await? {
        (_, Some(e)) => Err(e),
        (r, None) => Ok(r),
    }
}

/// Measures one point; the second element is the failed check, if any.
async fn measure_point(
    spec: &BenchSpec,
    workload: &dyn Workload,
    variant: usize,
    protocol_index: usize,
    clients: u32,
) -> Result<(PointResult, Option<BenchError>)> {
    let protocol = spec
        .protocols
        .get(protocol_index)
        .ok_or_else(|| BenchError::Internal(format!("no protocol #{protocol_index}")))?
        .clone();
    let mut config = spec.cluster.clone();
    let (name, label) = parse_entry(&protocol);
    config.protocol = name.to_string();
    if name != "callas" {
        config.grouping = None;
    }
    if let Some(Label::Grouping(label)) = label {
        config.grouping = Some(spec.grouping(label)?.clone());
    }
    config.lock.policy = spec.deadlock_policy(&protocol);
    // Only `elia` routes calls (the analysis behind the default routes is
    // not run for the other protocols' points).
    if name == "elia" && config.elia.routes.is_empty() {
        if let Some(routes) = workload.elia_routes() {
            config.elia.routes = routes;
        }
    }
    let deadlock = deadlock_name(&config.lock.policy);
    // A durable point gets a fresh data directory (removed when `_data`
    // drops, after the cluster).
    let _data = crate::durability::point_data(&mut config)?;
    // A run against a running cluster is named by the servers' durability.
    let mode = spec
        .remote
        .as_ref()
        .map_or(config.durability.mode, |r| r.durability);
    let durability = crate::durability::durability_label(mode, config.durability.replicas);
    let topology = config.to_string();
    let isolation = config.isolation.to_string();
    let cluster = match &spec.remote {
        Some(remote) => remote
            .cluster
            .connect(config, workload.application())
            .map_err(BenchError::cluster("connecting to the cluster"))?,
        None => Cluster::start(config, workload.application())
            .map_err(BenchError::cluster("starting the embedded cluster"))?,
    };
    let load_started = Instant::now();
    let data = prepare_data(spec, workload, &cluster).await?;
    tracing::info!(
        workload = workload.name(),
        %protocol,
        clients,
        load_ms = load_started.elapsed().as_millis() as u64,
        data,
        "data ready"
    );

    let stop = Arc::new(AtomicBool::new(false));
    // The link's faults (`--loss`, `--cut`), if any, from the warm-up on.
    cluster.begin_faults();
    let start = Instant::now();
    let measure_start = start + spec.warmup;
    let measure_end = measure_start + spec.duration;
    let window = Window {
        start: measure_start,
        end: measure_end,
        stop: stop.clone(),
        isolated: name != "raw",
        faulty: !spec.cluster.faults.is_none() || spec.remote.is_some(),
    };
    let mut set = JoinSet::new();
    let mut queues = Vec::new();
    for q in 0..workload.deferred_queues() {
        let (tx, rx) = mpsc::channel(DEFERRED_QUEUE_DEPTH);
        queues.push(tx);
        // The worker's generator only splits requests and observes outcomes.
        let index = clients.saturating_add(u32::try_from(q).unwrap_or(u32::MAX));
        let rng = SmallRng::seed_from_u64(client_seed(spec.cluster.seed, variant, clients, index));
        set.spawn(deferred_worker(
            cluster.client_numbered(index),
            workload.client(index, rng),
            rx,
            window.clone(),
        ));
    }
    let queues = Arc::new(queues);
    for i in 0..clients {
        let rng = SmallRng::seed_from_u64(client_seed(spec.cluster.seed, variant, clients, i));
        let gen = workload.client(i, rng);
        set.spawn(client_loop(
            cluster.client_numbered(i),
            gen,
            queues.clone(),
            window.clone(),
        ));
    }
    drop(queues);

    let mut done = Vec::new();
    let outcome = async {
        wait_until(&mut set, measure_start, &mut done).await?;
        let s0 = cluster.stats();
        let t0_locks = cluster.locks_by_table();
        let l0 = link_snapshot(&cluster);
        let w0 = cluster.wal_stats();
        let c0 = CpuSample::now();
        let t0 = Instant::now();
        wait_until(&mut set, measure_end, &mut done).await?;
        let c1 = CpuSample::now();
        let s1 = cluster.stats();
        let by_table = table_waits(&t0_locks, &cluster.locks_by_table());
        let l1 = link_snapshot(&cluster);
        let w1 = cluster.wal_stats();
        let stats_s = t0.elapsed().as_secs_f64();
        let wal = w1
            .zip(w0)
            .map(|(a, b)| crate::durability::WalPoint::from_delta(&a.since(&b), stats_s));
        let link = (l1.0 - l0.0, l1.1 - l0.1);
        let cpu = c1.zip(c0).and_then(|(a, b)| a.since(&b, stats_s));
        Ok::<_, BenchError>((s1.since(&s0), by_table, link, stats_s, wal, cpu))
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let (delta, by_table, link, stats_s, wal, cpu) = match outcome {
        Ok(x) => x,
        Err(e) => {
            set.abort_all();
            return Err(e);
        }
    };
    drain(&mut set, &mut done).await?;
    // Every call has ended: the faults end before the checks.
    cluster.end_faults();
    let faults = (!spec.cluster.faults.is_none()).then(|| FaultsPoint {
        lost: cluster.fault_stats().lost.load(Ordering::Relaxed),
        cut: cluster.fault_stats().cut.load(Ordering::Relaxed),
        reordered: cluster.fault_stats().reordered.load(Ordering::Relaxed),
        duplicated: cluster.fault_stats().duplicated.load(Ordering::Relaxed),
    });

    let mut merged = Recorder::new();
    for r in &done {
        merged.merge(r);
    }
    let measured_s = spec.duration.as_secs_f64();
    let names: Vec<&'static str> = workload.mix().into_iter().map(|(n, _)| n).collect();
    let (all, per_procedure) = merged.summarize(&names, measured_s)?;

    let (check, failed_check) = if spec.check {
        // The workload's invariants, then the engine's own: every
        // secondary index agrees with its rows on every partition, every
        // transaction's lock state went with it, and the protocol's
        // counters show none of its rules broken.
        let settled = cluster.protocol().quiesce(Duration::from_secs(30)).await;
        let checked = match settled.map_err(BenchError::cluster("settling before the check")) {
            Err(e) => Err(e),
            Ok(()) => check_every_replica(workload, &cluster).await,
        };
        let checked = match checked {
            Ok(()) => match cluster.verify_storage().await {
                Ok(()) => cluster
                    .locks_released(Duration::from_secs(5))
                    .await
                    .map_err(|e| BenchError::Invariant(format!("lock tables: {e}")))
                    .and_then(|()| {
                        cluster
                            .protocol()
                            .rules_kept(&cluster.stats())
                            .map_err(|e| BenchError::Invariant(format!("protocol rules: {e}")))
                    }),
                Err(e) => Err(BenchError::Invariant(format!("storage verification: {e}"))),
            },
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => ("passed".to_string(), None),
            // Without isolation a broken invariant is a finding, not a
            // bug: the point reports it and the comparison goes on.
            Err(e) if !window.isolated => (format!("violated (no isolation): {e}"), None),
            Err(e) => (format!("FAILED: {e}"), Some(e)),
        }
    } else {
        ("not run".to_string(), None)
    };

    // Every call has ended (the check's too): make sure its record is in
    // the history file before anyone reads it.
    if let Some(n) = cluster
        .flush_history()
        .map_err(BenchError::cluster("writing the history"))?
    {
        tracing::info!(transactions = n, "history written");
    }
    let result = point_result(PointInputs {
        protocol,
        protocol_index,
        variant,
        clients,
        params: workload.params(),
        all,
        per_procedure,
        delta,
        by_table,
        link,
        stats_s,
        measured_s,
        warmup_s: spec.warmup.as_secs_f64(),
        isolation,
        deadlock,
        topology,
        workload_metrics: workload.metrics(),
        durability,
        wal,
        cpu,
        check,
        data,
        faults,
    });
    // Flush and stop the log writers before the data directory goes.
    cluster.close_logs();
    Ok((result, failed_check))
}

/// Makes the point's data ready: loads it into an embedded cluster, and
/// into a running one as `--load` says (`LoadPolicy`). Data a running
/// cluster holds already is reused, and with `--check` checked before the
/// run, so a run on data that is not intact fails before it starts rather
/// than after. Returns how the data came to be there, for the report.
async fn prepare_data(
    spec: &BenchSpec,
    workload: &dyn Workload,
    cluster: &Cluster,
) -> Result<String> {
    let policy = spec.remote.as_ref().map(|r| r.load);
    let reason = match policy {
        None | Some(LoadPolicy::Always) => None,
        Some(LoadPolicy::Never) => Some("--load never"),
        Some(LoadPolicy::IfEmpty) => {
            let rows = stored_rows(cluster).await?;
            (rows > 0).then_some("--load if-empty: the workload's tables hold rows")
        }
    };
    let Some(reason) = reason else {
        return match workload.load(cluster).await {
            Ok(()) => Ok("loaded".to_string()),
            Err(BenchError::Cluster {
                context,
                source: source @ Error::DuplicateKey { .. },
            }) if policy.is_some() => {
                let why = if policy == Some(LoadPolicy::Always) {
                    "--load always, but the cluster holds this data already; --load if-empty \
                     runs on it"
                } else {
                    "the workload's tables were empty when this run looked: another load \
                     ran meanwhile?"
                };
                Err(BenchError::Cluster {
                    context: format!("{context} ({why})"),
                    source,
                })
            }
            Err(e) => Err(e),
        };
    };
    workload.reuse(cluster).await?;
    if !spec.check {
        return Ok(format!(
            "reused ({reason}); not checked before the run (no --check)"
        ));
    }
    check_every_replica(workload, cluster)
        .await
        .map_err(|e| match e {
            BenchError::Invariant(m) => BenchError::Invariant(format!(
                "the data the cluster holds, checked before the run ({reason}): {m}"
            )),
            other => other,
        })?;
    Ok(format!("reused ({reason}); checked before the run: passed"))
}

/// Rows in the cluster's tables, over every partition. Every partition
/// must answer: one that is down or still recovering might hold the rows
/// that decide between loading and not.
async fn stored_rows(cluster: &Cluster) -> Result<usize> {
    let status = cluster
        .status()
        .await
        .map_err(BenchError::cluster("counting the rows the cluster holds"))?;
    // A partition answers with a count for each table of the schema (one
    // at least); a remote one that did not answer shows none.
    if let Some(p) = status.iter().position(|p| p.rows_per_table.is_empty()) {
        return Err(BenchError::Cluster {
            context: "counting the rows the cluster holds (--load if-empty)".into(),
            source: Error::Transport(format!(
                "partition {p} did not answer: is every node up and done recovering \
                 (brine status --cluster FILE)?"
            )),
        });
    }
    Ok(status
        .iter()
        .map(|p| p.rows_per_table.iter().sum::<usize>())
        .sum())
}

struct PointInputs {
    protocol: String,
    protocol_index: usize,
    variant: usize,
    clients: u32,
    params: Map<String, Json>,
    all: crate::recorder::ProcSummary,
    per_procedure: BTreeMap<String, crate::recorder::ProcSummary>,
    delta: StatsSnapshot,
    by_table: BTreeMap<String, crate::report::TableWaits>,
    /// (messages, total delay ns) crossing the link in the interval.
    link: (u64, u64),
    stats_s: f64,
    measured_s: f64,
    warmup_s: f64,
    isolation: String,
    deadlock: String,
    topology: String,
    workload_metrics: Map<String, Json>,
    check: String,
    durability: String,
    wal: Option<crate::durability::WalPoint>,
    cpu: Option<CpuPoint>,
    data: String,
    faults: Option<FaultsPoint>,
}

/// The workload's check; where every node holds a full replica (Elia),
/// against each replica in turn: global data must agree everywhere, and
/// each server's local rows must be consistent where they live.
async fn check_every_replica(workload: &dyn Workload, cluster: &Cluster) -> Result<()> {
    if cluster.protocol().layout() != brine_cluster::Layout::Replicated {
        return workload.check(cluster).await;
    }
    for node in 0..cluster.config().nodes {
        workload
            .check(&cluster.at_node(brine_core::NodeId(node)))
            .await
            .map_err(|e| match e {
                BenchError::Invariant(m) => BenchError::Invariant(format!("server {node}: {m}")),
                other => other,
            })?;
    }
    Ok(())
}

fn point_result(p: PointInputs) -> PointResult {
    let d = &p.delta;
    let mut aborts_by_cause = BTreeMap::new();
    aborts_by_cause.insert("wait_die".to_string(), d.aborts_wait_die);
    aborts_by_cause.insert("deadlock".to_string(), d.aborts_deadlock);
    aborts_by_cause.insert("lock_timeout".to_string(), d.aborts_timeout);
    aborts_by_cause.insert("cascade".to_string(), d.aborts_cascade);
    aborts_by_cause.insert("validation".to_string(), d.aborts_validation);
    aborts_by_cause.insert("unreachable".to_string(), d.aborts_unreachable);
    aborts_by_cause.insert("user".to_string(), d.user_aborts);
    let per_s = |n: u64| {
        if p.stats_s > 0.0 {
            round2(n as f64 / p.stats_s)
        } else {
            0.0
        }
    };
    PointResult {
        protocol: p.protocol,
        clients: p.clients,
        throughput_tps: round2(p.all.throughput_tps),
        latency_us_p50: p.all.latency_us_p50,
        latency_us_p99: p.all.latency_us_p99,
        aborts: d.cc_aborts() + d.user_aborts,
        retries: d.retries,
        per_procedure: p
            .per_procedure
            .into_iter()
            .map(|(k, mut v)| {
                v.throughput_tps = round2(v.throughput_tps);
                (k, v)
            })
            .collect(),
        params: p.params,
        latency_us_p95: p.all.latency_us_p95,
        latency_us_max: p.all.latency_us_max,
        latency_us_mean: p.all.latency_us_mean,
        commits: p.all.commits,
        cc_aborts: d.cc_aborts(),
        user_aborts: d.user_aborts,
        gave_up: p.all.gave_up,
        aborts_by_cause,
        statements_per_s: per_s(d.statements),
        lock_waits: d.lock_waits,
        lock_waits_by_table: p.by_table,
        protocol_counters: d
            .protocol
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        pipelining_waits: [
            (
                "rank",
                d.counter("rank_waits"),
                d.counter("rank_wait_us_total"),
            ),
            (
                "commit",
                d.counter("commit_waits"),
                d.counter("commit_wait_us_total"),
            ),
            (
                "rank held at partitions",
                d.counter("rank_holds"),
                d.counter("rank_hold_us_total"),
            ),
        ]
        .into_iter()
        .filter_map(|(k, n, us)| Some((k.to_string(), crate::report::TableWaits::of(n, us)?)))
        .collect(),
        queue_bypasses: d.queue_bypasses,
        searches_cut: d.searches_cut,
        detector_breaks: d.detector_breaks,
        lock_wait_us_mean: if d.lock_waits > 0 {
            round2(d.lock_wait_us_total as f64 / d.lock_waits as f64)
        } else {
            0.0
        },
        link_delay_us_measured: if p.link.0 > 0 {
            round2(p.link.1 as f64 / p.link.0 as f64 / 1000.0)
        } else {
            0.0
        },
        link_messages: p.link.0,
        measured_s: p.measured_s,
        warmup_s: p.warmup_s,
        isolation: p.isolation,
        deadlock: p.deadlock,
        topology: p.topology,
        peak: false,
        throughput_ratio_vs_baseline: None,
        baseline: None,
        round: 1,
        workload_metrics: p.workload_metrics,
        check: p.check,
        variant: p.variant,
        protocol_index: p.protocol_index,
        durability: p.durability,
        wal: p.wal,
        cpu: p.cpu,
        data: p.data,
        faults: p.faults,
    }
}

/// The lock waits of the measured interval per table (tables without
/// waits left out).
fn table_waits(
    before: &[brine_cluster::TableLocks],
    after: &[brine_cluster::TableLocks],
) -> BTreeMap<String, crate::report::TableWaits> {
    after
        .iter()
        .zip(before)
        .filter_map(|(a, b)| {
            let w = crate::report::TableWaits::of(
                a.waits.saturating_sub(b.waits),
                a.wait_us.saturating_sub(b.wait_us),
            )?;
            Some((a.table.clone(), w))
        })
        .collect()
}

fn link_snapshot(cluster: &Cluster) -> (u64, u64) {
    let s = cluster.link_stats();
    (
        s.messages.load(Ordering::Relaxed),
        s.total_delay_ns.load(Ordering::Relaxed),
    )
}

/// Client `i`'s RNG seed: independent of the protocol, so compared
/// protocols get identical request streams.
fn client_seed(seed: u64, variant: usize, clients: u32, i: u32) -> u64 {
    fn mix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    mix(mix(mix(mix(seed) ^ variant as u64) ^ u64::from(clients)) ^ u64::from(i))
}

/// The measured interval, and the flag that stops every client early.
#[derive(Clone)]
struct Window {
    start: Instant,
    end: Instant,
    stop: Arc<AtomicBool>,
    /// False under `raw`: without isolation a workload's consistency
    /// guards can trip (a seat two carts took at once), and such a call
    /// is an anomaly to count, not a bug that stops the run.
    isolated: bool,
    /// The link has faults (`--loss`, `--cut`, `--reorder`), or the run
    /// drives processes (`--cluster`), any of which may die and restart: a
    /// call whose outcome they left unknown (a transport error: a Salt
    /// BASE transaction given up in doubt, which its protocol rolls
    /// forward; a one-round commit never acknowledged; a node's connection
    /// lost) is counted as given up, not a bug that stops the run. The
    /// checks after the run say whether the protocol kept its promises.
    faulty: bool,
}

impl Window {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && Instant::now() < self.end
    }

    /// Records a call that started (or was handed over) at `t0` and ended
    /// now, if it ended inside the interval. A failure other than
    /// contention (or, without isolation, a tripped workload guard) stops
    /// the run.
    fn record(
        &self,
        rec: &mut Recorder,
        procedure: &'static str,
        t0: Instant,
        outcome: brine_core::Result<brine_cluster::CallOutcome>,
    ) -> Result<()> {
        let t1 = Instant::now();
        let measured = t1 >= self.start && t1 < self.end;
        match outcome {
            Ok(o) if measured => {
                let us = u64::try_from(t1.duration_since(t0).as_micros()).unwrap_or(u64::MAX);
                rec.commit(procedure, us, o.attempts);
            }
            Err(Error::UserAbort(_)) if measured => rec.user_abort(procedure),
            Err(Error::RetriesExhausted { attempts, .. }) if measured => {
                rec.gave_up(procedure, attempts);
            }
            Err(Error::Internal(_)) if !self.isolated && measured => rec.anomaly(procedure),
            Err(Error::Transport(_)) if self.faulty && measured => rec.gave_up(procedure, 0),
            Ok(_) | Err(Error::UserAbort(_) | Error::RetriesExhausted { .. }) => {}
            Err(Error::Internal(_)) if !self.isolated => {}
            Err(Error::Transport(_)) if self.faulty => {}
            Err(source) => {
                self.stop.store(true, Ordering::Relaxed);
                return Err(BenchError::Call {
                    procedure: procedure.to_string(),
                    source,
                });
            }
        }
        Ok(())
    }
}

/// A request handed to a deferred-execution queue, and when.
struct Deferred {
    request: TxnRequest,
    handed_at: Instant,
}

/// One closed-loop client: issue, wait, record, repeat until the end of the
/// measured interval (or until another client failed). A request the
/// generator defers goes to its queue instead (waiting only while the
/// queue is full).
async fn client_loop(
    client: Client,
    mut gen: Box<dyn ClientGen>,
    queues: Arc<Vec<mpsc::Sender<Deferred>>>,
    window: Window,
) -> Result<Recorder> {
    let mut rec = Recorder::new();
    while window.running() {
        let req = gen.next();
        let procedure = req.procedure;
        if let Some(q) = gen.defer(&req) {
            let queue = queues.get(q).ok_or_else(|| {
                BenchError::Internal(format!(
                    "{procedure} deferred to queue {q}, which does not exist"
                ))
            })?;
            let handed = Deferred {
                request: req,
                handed_at: Instant::now(),
            };
            tokio::select! {
                sent = queue.send(handed) => if sent.is_err() { break },
                _ = tokio::time::sleep_until(window.end.into()) => break,
            }
            continue;
        }
        let t0 = Instant::now();
        let outcome = client.call(procedure, req.args).await;
        gen.observe(procedure, &outcome);
        window.record(&mut rec, procedure, t0, outcome)?;
    }
    Ok(rec)
}

/// Serves one deferred-execution queue in order until the end of the
/// measured interval; latency counts from the hand-over (queueing included).
async fn deferred_worker(
    client: Client,
    mut gen: Box<dyn ClientGen>,
    mut queue: mpsc::Receiver<Deferred>,
    window: Window,
) -> Result<Recorder> {
    let mut rec = Recorder::new();
    while window.running() {
        let next = tokio::select! {
            d = queue.recv() => d,
            _ = tokio::time::sleep_until(window.end.into()) => None,
        };
        let Some(d) = next else { break };
        let procedure = d.request.procedure;
        let parts = gen.split_deferred(&d.request).into_iter().map(|part| {
            let client = &client;
            async move { client.call(part.procedure, part.args).await }
        });
        let outcome = join_outcomes(futures::future::join_all(parts).await);
        gen.observe(procedure, &outcome);
        window.record(&mut rec, procedure, d.handed_at, outcome)?;
    }
    Ok(rec)
}

/// One outcome for the parts of a deferred request: the first failure, or
/// every part's values in order with the most attempts any part took.
fn join_outcomes(
    parts: Vec<brine_core::Result<brine_cluster::CallOutcome>>,
) -> brine_core::Result<brine_cluster::CallOutcome> {
    let mut joined = brine_cluster::CallOutcome {
        values: Vec::new(),
        attempts: 0,
    };
    for part in parts {
        let o = part?;
        joined.values.extend(o.values);
        joined.attempts = joined.attempts.max(o.attempts);
    }
    Ok(joined)
}

/// Waits until `deadline`, collecting clients that end early; a client that
/// ends with an error (or panics) ends the wait with that error.
async fn wait_until(
    set: &mut JoinSet<Result<Recorder>>,
    deadline: Instant,
    done: &mut Vec<Recorder>,
) -> Result<()> {
    let sleep = tokio::time::sleep_until(deadline.into());
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return Ok(()),
            joined = set.join_next(), if !set.is_empty() => {
                if let Some(j) = joined {
                    done.push(joined_client(j)?);
                }
            }
        }
    }
}

/// Waits for every client to finish its last call.
async fn drain(set: &mut JoinSet<Result<Recorder>>, done: &mut Vec<Recorder>) -> Result<()> {
    let all = async {
        while let Some(j) = set.join_next().await {
            done.push(joined_client(j)?);
        }
        Ok::<_, BenchError>(())
    };
    match tokio::time::timeout(DRAIN_TIMEOUT, all).await {
        Ok(r) => r,
        Err(_) => {
            set.abort_all();
            Err(BenchError::Internal(format!(
                "clients did not finish their last call within {} s of the end of the measured interval (is a transaction stuck?)",
                DRAIN_TIMEOUT.as_secs()
            )))
        }
    }
}

fn joined_client(
    j: std::result::Result<Result<Recorder>, tokio::task::JoinError>,
) -> Result<Recorder> {
    match j {
        Ok(r) => r,
        Err(e) => Err(BenchError::Internal(format!("a client task failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_waits_are_the_interval_s_and_skip_quiet_tables() {
        let t = |table: &str, waits, wait_us| brine_cluster::TableLocks {
            table: table.into(),
            waits,
            wait_us,
            ..Default::default()
        };
        let before = [t("a", 10, 1_000), t("b", 5, 50), t("c", 0, 0)];
        let after = [t("a", 14, 3_000), t("b", 5, 50), t("c", 1, 7)];
        let w = table_waits(&before, &after);
        assert_eq!(w.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(w["a"].waits, 4);
        assert_eq!(w["a"].wait_us_mean, 500.0);
        assert_eq!(w["c"].wait_us_mean, 7.0);
    }

    #[test]
    fn seeds_differ_by_client_not_protocol() {
        assert_ne!(client_seed(1, 0, 8, 0), client_seed(1, 0, 8, 1));
        assert_ne!(client_seed(1, 0, 8, 0), client_seed(1, 1, 8, 0));
        assert_eq!(client_seed(7, 2, 8, 3), client_seed(7, 2, 8, 3));
    }

    /// Without isolation (`raw`) a tripped workload guard is an anomaly
    /// that is counted; with isolation it is a bug that stops the run.
    #[test]
    fn a_tripped_guard_stops_an_isolated_run_and_is_counted_under_raw() -> Result<()> {
        let now = Instant::now();
        let window = |isolated| Window {
            start: now - Duration::from_secs(1),
            end: now + Duration::from_secs(60),
            stop: Arc::new(AtomicBool::new(false)),
            isolated,
            faulty: false,
        };
        let guard = || Err(Error::Internal("ticket: seat 7 is not held".into()));

        let raw = window(false);
        let mut rec = Recorder::new();
        raw.record(&mut rec, "create_order", now, guard())?;
        assert!(raw.running());
        let (all, per) = rec.summarize(&["create_order"], 1.0)?;
        assert_eq!((all.anomalies, all.commits), (1, 0));
        assert_eq!(per["create_order"].anomalies, 1);

        let isolated = window(true);
        let mut rec = Recorder::new();
        assert!(isolated
            .record(&mut rec, "create_order", now, guard())
            .is_err());
        assert!(!isolated.running());
        Ok(())
    }
}
