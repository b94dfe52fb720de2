//! `brine`: the command-line entry point of the brine database.
//!
//! Today it runs benchmarks against an embedded cluster (every node, every
//! partition and the simulated network inside this one process):
//!
//! ```text
//! brine bench micro --rows 10,1000,100000 --clients 8,64 --json micro.json
//! brine bench bank --check --isolation serializable
//! ```

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::driver::BenchSpec;
use brine_bench::list::{parse_counts, parse_names};
use brine_bench::workloads::{bank, micro, Bank, Micro};
use brine_bench::{render_point, BenchError, Workload};
use brine_cluster::{ClusterConfig, DeadlockPolicy, Isolation, LinkConfig, Placement};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "brine",
    version,
    about = "brine: a distributed transactional database with per-transaction-class concurrency control",
    long_about = "brine: a distributed transactional database whose concurrency control is chosen per \
class of transaction (ACID two-phase locking today; Salt, Callas, Mediator and Elia to come).\n\n\
Without cluster configuration, brine runs a whole cluster (nodes x partitions, coordinators and a \
simulated network link) inside this one process.\n\n\
Logging goes to stderr and is controlled by RUST_LOG (e.g. RUST_LOG=info or RUST_LOG=brine_cluster=debug)."
)]
struct Cli {
    /// Worker threads of the async runtime that runs partitions and
    /// coordinators (default: one per core).
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark workload against an embedded cluster and report
    /// throughput, latency percentiles, aborts and retries.
    #[command(
        long_about = "Run a benchmark workload against an embedded cluster.\n\n\
Closed-loop clients run the workload's transactions for a warm-up period, then for the measured \
duration. Every point of a sweep (--clients, --compare, --rows) runs on a freshly started cluster \
with freshly loaded data, in this one process, with identical seeded request streams. Each point \
prints a table with the topology line and the measured link delay; --json writes every point, the \
peaks and the protocol ratios (DESIGN section 7).\n\n\
Workloads:\n  \
micro  Salt microbenchmark 1: each transaction updates 5 distinct rows drawn uniformly from \
--rows N (default 10000); contention rises as N falls.\n  \
bank   transfers between two random accounts (90%) and a broadcast SUM of every balance (10%) \
that must always equal the initial total; --check enforces it.",
        after_long_help = "Examples:\n  \
brine bench micro\n  \
brine bench micro --rows 10,100,1000,100000 --clients 64 --check\n  \
brine bench bank --check --isolation read-committed\n  \
brine bench micro --compare acid,acid --clients 8,64 --json micro.json"
    )]
    Bench(BenchArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadName {
    /// Salt microbenchmark 1: 5 updates of N rows (contention sweep with --rows).
    Micro,
    /// Bank transfers with a constant total (the invariant workload).
    Bank,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum IsolationArg {
    /// Reads lock only while they run (the sources' setting).
    ReadCommitted,
    /// Strict two-phase locking with range locks.
    Serializable,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum PlacementArg {
    /// Coordinators on a node of their own: every statement crosses the link.
    Separate,
    /// Each client's coordinator on a data node (round-robin).
    Colocated,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum DeadlockArg {
    /// A younger transaction that would wait for an older one dies.
    WaitDie,
    /// Per-partition wait-for graph; the youngest of a cycle dies.
    Detect,
    /// Waits end only by the lock timeout.
    Timeout,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// The workload to run.
    #[arg(value_enum)]
    workload: WorkloadName,

    /// Closed-loop client counts to sweep, comma-separated (e.g. 1,8,64).
    #[arg(long, value_name = "LIST", default_value = "1,16,64")]
    clients: String,

    /// Measured seconds per point.
    #[arg(long, value_name = "SECS", default_value_t = 4.0)]
    duration: f64,

    /// Warm-up seconds per point before measuring.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    warmup: f64,

    /// Protocols to compare in this run, comma-separated; ratios are against the first.
    #[arg(long, value_name = "LIST", conflicts_with = "protocol")]
    compare: Option<String>,

    /// The concurrency-control protocol (available: acid).
    #[arg(long, value_name = "P", default_value = "acid")]
    protocol: String,

    /// Isolation level of ACID transactions.
    #[arg(long, value_enum, default_value_t = IsolationArg::Serializable)]
    isolation: IsolationArg,

    /// Data nodes of the embedded cluster.
    #[arg(long, value_name = "N", default_value_t = 2)]
    nodes: u32,

    /// Partitions per data node.
    #[arg(long, value_name = "P", default_value_t = 1)]
    partitions_per_node: u32,

    /// Where coordinators run relative to the data.
    #[arg(long, value_enum, default_value_t = PlacementArg::Separate)]
    placement: PlacementArg,

    /// One-way delay of the simulated link between nodes, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 100)]
    link_delay: u64,

    /// Extra uniform random delay per message, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 0)]
    jitter: u64,

    /// Seed of the link jitter and of every client's request stream.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,

    /// Deadlock handling of the lock tables.
    #[arg(long, value_enum, default_value_t = DeadlockArg::WaitDie)]
    deadlock: DeadlockArg,

    /// Lock wait timeout in milliseconds (the cross-partition deadlock backstop).
    #[arg(long, value_name = "MS", default_value_t = 500)]
    lock_timeout_ms: u64,

    /// Write the JSON report (DESIGN section 7) to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,

    /// Check the workload's invariants after every point; a violation fails the run.
    #[arg(long)]
    check: bool,

    /// micro: table sizes to sweep, comma-separated (default 10000).
    #[arg(long, value_name = "LIST")]
    rows: Option<String>,

    /// bank: number of accounts (default 10000).
    #[arg(long, value_name = "N")]
    accounts: Option<u64>,

    /// bank: percentage of calls that read the total (the rest transfer; default 10).
    #[arg(long, value_name = "PCT")]
    total_percent: Option<u32>,
}

fn seconds(v: f64, what: &str) -> Result<Duration, BenchError> {
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(BenchError::Config(format!(
            "{what} must be between 0 and 86400 seconds, not {v}"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

fn spec_from(args: &BenchArgs) -> Result<BenchSpec, BenchError> {
    let clients = parse_counts(&args.clients, "--clients", brine_bench::driver::MAX_CLIENTS)
        .map_err(BenchError::Config)?
        .into_iter()
        .map(|c| c as u32)
        .collect();
    let protocols = match &args.compare {
        Some(list) => parse_names(list, "--compare").map_err(BenchError::Config)?,
        None => vec![args.protocol.clone()],
    };
    let mut cluster = ClusterConfig {
        nodes: args.nodes,
        partitions_per_node: args.partitions_per_node,
        placement: match args.placement {
            PlacementArg::Separate => Placement::Separate,
            PlacementArg::Colocated => Placement::Colocated,
        },
        link: LinkConfig {
            delay_us: args.link_delay,
            jitter_us: args.jitter,
        },
        seed: args.seed,
        isolation: match args.isolation {
            IsolationArg::ReadCommitted => Isolation::ReadCommitted,
            IsolationArg::Serializable => Isolation::Serializable,
        },
        ..ClusterConfig::default()
    };
    cluster.lock.policy = match args.deadlock {
        DeadlockArg::WaitDie => DeadlockPolicy::WaitDie,
        DeadlockArg::Detect => DeadlockPolicy::Detect,
        DeadlockArg::Timeout => DeadlockPolicy::TimeoutOnly,
    };
    if args.lock_timeout_ms == 0 {
        return Err(BenchError::Config(
            "--lock-timeout-ms must be at least 1".into(),
        ));
    }
    cluster.lock.wait_timeout = Duration::from_millis(args.lock_timeout_ms);
    let duration = seconds(args.duration, "--duration")?;
    if duration.is_zero() {
        return Err(BenchError::Config("--duration must be positive".into()));
    }
    Ok(BenchSpec {
        cluster,
        protocols,
        clients,
        warmup: seconds(args.warmup, "--warmup")?,
        duration,
        check: args.check,
    })
}

fn workloads_from(args: &BenchArgs) -> Result<Vec<Arc<dyn Workload>>, BenchError> {
    let only = |given: bool, flag: &str, workload: &str| {
        if given {
            Err(BenchError::Config(format!(
                "{flag} applies to the {workload} workload only"
            )))
        } else {
            Ok(())
        }
    };
    match args.workload {
        WorkloadName::Micro => {
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let rows = match &args.rows {
                Some(list) => {
                    parse_counts(list, "--rows", micro::MAX_ROWS).map_err(BenchError::Config)?
                }
                None => vec![micro::DEFAULT_ROWS],
            };
            rows.into_iter()
                .map(|n| Micro::new(n).map(|m| Arc::new(m) as Arc<dyn Workload>))
                .collect()
        }
        WorkloadName::Bank => {
            only(args.rows.is_some(), "--rows", "micro")?;
            let bank = Bank::new(
                args.accounts.unwrap_or(bank::DEFAULT_ACCOUNTS),
                args.total_percent.unwrap_or(bank::DEFAULT_TOTAL_PERCENT),
            )?;
            Ok(vec![Arc::new(bank)])
        }
    }
}

async fn bench(args: BenchArgs) -> Result<(), BenchError> {
    let spec = spec_from(&args)?;
    let workloads = workloads_from(&args)?;
    spec.validate()?;
    // Open the report file before running, so a bad path fails in a second
    // rather than after the whole sweep.
    let json_file = match &args.json {
        Some(path) => Some((
            path,
            std::fs::File::create(path).map_err(|source| BenchError::Io {
                path: path.display().to_string(),
                source,
            })?,
        )),
        None => None,
    };
    let name = workloads.first().map(|w| w.name()).unwrap_or("?");
    let report = brine_bench::run_bench(&spec, &workloads, |point| {
        println!("{}", render_point(name, point));
    })
    .await?;
    println!("{}", report.render_summary());
    if let Some((path, mut file)) = json_file {
        let text = report
            .to_json()
            .map_err(|e| BenchError::Internal(format!("serializing the report: {e}")))?;
        file.write_all((text + "\n").as_bytes())
            .map_err(|source| BenchError::Io {
                path: path.display().to_string(),
                source,
            })?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second initialization (never expected here) is not worth failing on.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    // A delayed link runs its own delivery thread, which must not compete
    // with the workers for a core or every delivery comes late; so it gets
    // one core of its own when there is more than one.
    let link_delayed = match &cli.command {
        Command::Bench(b) => b.link_delay > 0 || b.jitter > 0,
    };
    let default_threads = if link_delayed && cores > 1 {
        cores - 1
    } else {
        cores
    };
    let threads = cli.threads.unwrap_or(default_threads).max(1);
    eprintln!("runtime: {threads} worker threads on {cores} cores");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("brine-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Bench(args) => runtime.block_on(bench(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            // The top-level message already quotes the direct cause.
            if source.is_some() {
                source = source.and_then(std::error::Error::source);
            }
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> BenchArgs {
        let mut v = vec!["brine", "bench"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v) {
            Ok(Cli {
                command: Command::Bench(b),
                ..
            }) => b,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn defaults_are_the_paper_topology() -> Result<(), BenchError> {
        let spec = spec_from(&parse(&["micro"]))?;
        assert_eq!(spec.cluster.nodes, 2);
        assert_eq!(spec.cluster.partitions_per_node, 1);
        assert_eq!(spec.cluster.placement, Placement::Separate);
        assert_eq!(spec.cluster.link.delay_us, 100);
        assert_eq!(spec.cluster.isolation, Isolation::Serializable);
        assert!(matches!(spec.cluster.lock.policy, DeadlockPolicy::WaitDie));
        assert_eq!(spec.protocols, vec!["acid".to_string()]);
        assert_eq!(spec.clients, vec![1, 16, 64]);
        Ok(())
    }

    #[test]
    fn bad_options_are_errors_not_panics() {
        assert!(spec_from(&parse(&["micro", "--clients", "0"])).is_err());
        assert!(spec_from(&parse(&["micro", "--clients", "a,b"])).is_err());
        assert!(spec_from(&parse(&["micro", "--duration=-1"])).is_err());
        assert!(spec_from(&parse(&["micro", "--duration", "NaN"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--accounts", "5"])).is_err());
        assert!(workloads_from(&parse(&["bank", "--rows", "5"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--rows", "3"])).is_err());
        assert!(Cli::try_parse_from(["brine", "bench", "tpcc"]).is_err());
        assert!(Cli::try_parse_from([
            "brine",
            "bench",
            "micro",
            "--protocol",
            "acid",
            "--compare",
            "acid"
        ])
        .is_err());
        let spec = spec_from(&parse(&["micro", "--compare", "acid,salt"]));
        assert!(spec.is_ok_and(|s| s.validate().is_err()));
    }

    #[test]
    fn rows_sweep_makes_one_workload_per_size() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&["micro", "--rows", "10,100,1000"]))?;
        assert_eq!(w.len(), 3);
        Ok(())
    }
}
