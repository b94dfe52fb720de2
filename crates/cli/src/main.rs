//! `brine`: the command-line entry point of the brine database.
//!
//! Today it runs benchmarks against an embedded cluster (every node, every
//! partition and the simulated network inside this one process):
//!
//! ```text
//! brine bench micro --rows 10,1000,100000 --clients 8,64 --json micro.json
//! brine bench bank --check --isolation serializable
//! ```

mod addresses;
mod analyze;
mod faults;
mod group;
mod metrics;
mod node;
mod replicas;
mod service;
mod supervise;
mod up;
mod workloads;

use workloads::workloads_from;

/// The engine allocates small rows, keys and messages at a high rate from
/// the runtime's threads; mimalloc's thread-local free lists serve that
/// with a fraction of the system allocator's cost (glibc malloc took about
/// 15% of a worker's time at Salt's peak).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use brine_bench::list::{parse_counts, parse_names, parse_percents, parse_ratios};
use brine_bench::spec::{BenchSpec, LoadPolicy};
use brine_bench::workloads::base::BaseSet;
use brine_bench::workloads::ticket::{self, Ticket, TicketParams};
use brine_bench::workloads::{
    bank, checking, micro, micro2, micro3, tpcc, tpcw, Bank, ListAppend, Micro, Micro2, Micro3,
    Register, Tpcc, Tpcw,
};
use brine_bench::{render_point, BenchError, Workload};
use brine_cluster::{
    ClusterConfig, DeadlockPolicy, DurabilityConfig, DurabilityMode, Isolation, LinkConfig,
    Placement,
};
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
micro2 Salt microbenchmark 2: 10 updates, one of them on one of 10 shared rows, at --position \
LIST (1-10; 10 - position updates follow it).\n  \
micro3 Salt microbenchmark 3: read 5 or write 5 of --rows N (default 100) rows; \
--read-only-percent LIST sweeps the share of read-only transactions.\n  \
bank   transfers between two random accounts (90%) and a broadcast SUM of every balance (10%) \
that must always equal the initial total; --check enforces it.\n  \
register     randomized read / write / range-read transactions over --keys N (default 8) hot \
registers, made for the isolation checker: record with --history FILE, then brine check FILE.\n  \
list-append  appends of fresh unique elements to --keys N lists (each append takes the next \
position from its list's counter row, so appends to one list conflict) and whole-list reads \
(Elle's list-append model), for the isolation checker.\n  \
tpcc   TPC-C's five transactions on --warehouses N (default 2), --mix standard (45/43/4/4/4) or \
salt; --check runs clause 3.3.2's consistency conditions; --tpcc-scale small is a reduced, \
non-standard database for quick runs. Reports new_order_per_min (tpmC-style, not an audited \
TPC result).\n  \
tpcw   TPC-W's online bookstore: 20 transactions (13 read-only) behind the 14 web \
interactions, --mix browsing, shopping (default) or ordering, --scale small or standard \
(10,000 items, 28,800 customers; default); --check verifies stock, orders, payments and carts.\n  \
ticket ticketing modelled on the sources' description of Fusion Ticket: one event, two \
categories of --seats N (default 10000) seats, 11 booking-flow procedures with a hot create_order; \
--check verifies seats, counters, payments and tickets.\n  \
ycsb   key-value traffic over --keys N (default 100000, zipfian or --distribution uniform): \
native gets and puts (--native-ratio LIST of their share, nu) beside transactions of 1..n \
operations (--txn-size LIST of n), --read-ratio LIST of gets (rho); the seed 003 workload.\n  \
intergroup Callas' inter-group microbenchmark: a contended \"pipelined\" type (row i of A, B, \
C of 10 rows each, then a private row) and an \"other\" type (a row of D) that also updates a row \
of A in --conflict-bp LIST basis points of its calls, --ratio LIST pipelined calls per other call.\n  \
rubis  RUBiS, the auction site modelled after eBay: 8 tables, the 22 database transactions \
behind its client requests (17 read-only), --mix bidding (about 15% writing transactions, the \
default) or browsing (read-only), --scale standard (default) or small; --check verifies bids, \
buy-now quantities, ratings and unique ids.\n  \
rollback Callas' rollback microbenchmark: check and update a row of A, B and C (10 rows each), \
the check on C rolling back --rollback-percent LIST of the calls, then 5 private updates.\n\n\
Under --protocol salt (or salt-nolocal), the procedures named by --base LIST run as BASE \
transactions (Salt's alkaline subtransactions); under acid they are ordinary ACID transactions, so \
--compare acid,salt runs the same application code. Defaults: the sources' choices (micro update5, \
micro2 update10, micro3 read5,write5, bank transfer, tpcc new_order,payment, ticket create_order, \
tpcw do_buy_confirm,do_buy_confirm_address, rubis store_bid,store_buy_now (ours: the sources do not \
BASE-ify them), \
register read_write (range_read may be added), list-append append_read: every operation of a BASE \
call its own alkaline subtransaction, so brine check --level salt checks Salt isolation under load); \
`none` BASE-ifies nothing, `all` every procedure the workload can BASE-ify.",
        after_long_help = "Examples:\n  \
brine bench micro\n  \
brine bench micro --rows 10,100,1000,100000 --clients 64 --check\n  \
brine bench bank --check --isolation read-committed\n  \
brine bench micro --compare acid,acid --clients 8,64 --json micro.json\n  \
brine bench micro --rows 10,100,1000,10000 --compare acid,salt-nolocal,salt --clients 64\n  \
brine bench micro2 --position 1,4,7,10 --compare acid,salt-nolocal,salt --clients 64\n  \
brine bench micro3 --read-only-percent 0,50,95 --compare acid,salt --clients 64\n  \
brine bench tpcc --mix salt --base new_order,payment --compare acid,salt --check\n  \
brine bench register --clients 64 --history h.jsonl && brine check h.jsonl --level serializable\n  \
brine bench bank --cluster D/cluster.toml --clients 8 --check   (D from brine cluster up: loads \
the accounts, or runs on those the cluster holds, checked first)"
    )]
    // Boxed: the bench flags make this variant far larger than the others.
    Bench(Box<BenchArgs>),
    /// Callas' grouping tool: profile a workload under acid, measure
    /// candidate groupings under callas, print each one's throughput and
    /// the chosen grouping (takes the bench options).
    #[command(
        long_about = "Callas' grouping tool (seed 000 section 4.5).

Profiles the workload under acid at 1 client and at the largest --clients count (the load), ranks the procedures by how much their latency grows under load, builds candidate groupings (every procedure in one 2PL group; one 2PL group per type; the 1, 2 and 3 fastest-growing procedures pipelined in one Runtime Pipelining group with the rest in the default group; with at most four procedure types, every partition of them into Runtime Pipelining groups), measures each under callas at the load on the same data and request streams, prints each one's throughput and ratio to acid, and prints the best as a --grouping argument. A candidate whose procedures the analysis cannot pipeline as their bodies run is reported as failed and skipped.",
        after_long_help = "Examples:
  brine group tpcc --warehouses 1 --clients 64 --duration 3 --isolation read-committed
  brine group micro --rows 100 --clients 32 --duration 2"
    )]
    Group(Box<BenchArgs>),
    /// Check a recorded history (--history FILE of a bench run) for
    /// isolation anomalies; exits 1 on any violation at --level.
    #[command(
        long_about = "Check a recorded history for isolation anomalies.\n\n\
Builds Adya's direct serialization graph over the committed transactions (ww, wr, rw and predicate \
edges) and reports G0, G1a, G1b, G1c, G-single and G2 (and, at --level salt, G-salt: an ACID \
transaction that observed a BASE transaction's unfinished state), each with a short witness: the \
transactions, the edges and the keys and versions that cause them. See docs/checker.md and \
docs/history-format.md.\n\n\
Exit status: 0 when the history satisfies --level, 1 on a violation, 2 when the history cannot be \
read.",
        after_long_help = "Examples:\n  \
brine check h.jsonl\n  \
brine check h.jsonl --level read-committed --max-witnesses 3\n  \
brine check h.jsonl --export-elle h.edn --elle-model rw-register\n  \
brine check --self-bench 100000"
    )]
    Check(CheckArgs),
    /// Draw the rho x nu equilibrium plot (SVG) of a saved ycsb report
    /// (--json FILE of a two-protocol --read-ratio x --native-ratio sweep).
    #[command(
        long_about = "Draw the rho x nu equilibrium plot of a saved ycsb report, without running \
anything.\n\n\
The report must compare two protocols (--compare BASELINE,CANDIDATE) over a sweep of at least two \
--read-ratio (rho, the x axis) and two --native-ratio (nu, the y axis) values, every other \
workload parameter held. Each cell is coloured by the candidate's operations per second over the \
baseline's (calls per second x operations per call; log2 scale, blue above 1, red below, white at \
1) and labelled with that ratio; the black line is the equilibrium where the ratio crosses 1 \
(log ratio interpolated linearly between cells), and the caption says where each rho column \
crosses, or which protocol wins at every nu. With several client counts, the largest is drawn \
unless --clients picks one; with --rounds, each protocol's median. See docs/bench.md.",
        after_long_help = "Examples:\n  \
brine bench ycsb --compare omid,mediator --read-ratio 0,0.5,1 --native-ratio 0,0.5,1 --clients 32 \
--json grid.json --plot grid.svg\n  \
brine plot grid.json --out grid.svg\n  \
brine plot grid.json --out grid-8.svg --clients 8"
    )]
    Plot(PlotArgs),
    /// Static analysis for Runtime Pipelining: ranks, pieces per procedure,
    /// remaining conflicts, classic chopping; Graphviz DOT with --dot.
    Analyze(analyze::AnalyzeArgs),
    /// Run one node of a multi-process cluster (until Ctrl-C or SIGTERM).
    #[command(after_long_help = "Example:\n  \
brine server --config cluster.toml --node 0\n\n\
See docs/operations.md for the cluster file.")]
    Server(node::ServerArgs),
    /// Manage a local multi-process cluster.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Call a procedure on a running cluster; a node coordinates it.
    #[command(
        after_long_help = "Example:\n  brine call --cluster DIR/cluster.toml transfer 1 2 10"
    )]
    Call(node::CallArgs),
    /// Show the nodes of a running cluster: up or down, commits, lock waits,
    /// and per partition its rows, active transactions and waiting statements.
    Status(node::StatusArgs),
    /// Fault tests: cut nodes off from the rest of a running cluster for a
    /// while, as a network partition would (each node refuses to reach the
    /// other side at its transport until then).
    #[command(
        after_long_help = "Example:\n  brine cut --cluster DIR/cluster.toml --nodes 2 --for-ms 3000"
    )]
    Cut(faults::CutArgs),
    /// Run SQL statements in one interactive transaction on a running
    /// cluster, print their results, and commit (or --abort).
    #[command(after_long_help = "Example:\n  \
brine sql --cluster DIR/cluster.toml --param 1 \"SELECT balance FROM account WHERE id = $1\"")]
    Sql(node::SqlArgs),
    /// Load the cluster file's workload data into a running cluster.
    Load(node::LoadArgs),
}

#[derive(clap::Subcommand, Debug)]
enum ClusterCommand {
    /// Start a local cluster of server processes on loopback: writes
    /// DIR/cluster.toml, logs to DIR/node-<n>.log; Ctrl-C or SIGTERM stops it.
    #[command(after_long_help = "Example:\n  \
brine cluster up --nodes 3 --dir /tmp/brine\n  \
brine call --cluster /tmp/brine/cluster.toml transfer 1 2 10   (in another terminal)")]
    Up(up::UpArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadName {
    /// Salt microbenchmark 1: 5 updates of N rows (contention sweep with --rows).
    Micro,
    /// Salt microbenchmark 2: 10 updates, one contended (position sweep with --position).
    Micro2,
    /// Salt microbenchmark 3: read 5 or write 5 of 100 rows (--read-only-percent sweep).
    Micro3,
    /// Bank transfers with a constant total (the invariant workload).
    Bank,
    /// TPC-C: the five transactions, spec data, consistency checks.
    Tpcc,
    /// TPC-W: the online bookstore's 20 transactions behind 14 web interactions.
    Tpcw,
    /// Ticketing modelled on Fusion Ticket: booking sessions, a hot create_order.
    Ticket,
    /// Randomized registers for the isolation checker (few hot keys).
    Register,
    /// Lists of unique elements for the isolation checker (Elle's list-append).
    ListAppend,
    /// Callas' rollback microbenchmark: check and update rows of A, B, C (10 rows each), the
    /// check on C rolling back --rollback-percent of the calls, then 5 private updates.
    Rollback,
    /// Callas' inter-group microbenchmark: a contended "pipelined" type and an "other" type
    /// that conflicts with it in --conflict-bp of its calls, --ratio N to 1.
    Intergroup,
    /// RUBiS, the eBay-like auction site: 22 transactions behind its client requests,
    /// --mix bidding (~15% writes, the default) or browsing (read-only), --scale.
    Rubis,
    /// YCSB-style key-value traffic: native gets and puts beside transactions of U_n
    /// operations (--read-ratio, --native-ratio, --txn-size, --distribution, --keys).
    Ycsb,
    /// Elia's microbenchmark: --local-percent LIST local operations, the rest global, each
    /// holding its locks --op-ms (default 5); client i at server i mod nodes.
    EliaMicro,
    /// An application file (--app FILE): its schema, procedures and [bench] (docs/apps.md).
    App,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum IsolationArg {
    /// Reads lock only while they run (the sources' setting).
    ReadCommitted,
    /// Strict two-phase locking with range locks.
    Serializable,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum LoadArg {
    /// Load when the workload's tables hold no row; otherwise run on the rows they hold.
    IfEmpty,
    /// Load, whatever the tables hold (a duplicate key fails the run).
    Always,
    /// Never load: run on the rows the tables hold.
    Never,
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

    /// Protocols to compare in this run, comma-separated; ratios are against the first (see
    /// --baseline). `callas@LABEL` runs a labelled --grouping; any other protocol may name a
    /// deadlock handling to run under: `acid@wait-die`, `acid@detect`, `acid@timeout`.
    #[arg(long, value_name = "LIST", conflicts_with = "protocol")]
    compare: Option<String>,

    /// What the ratios of a comparison are against. `best` (the default): when the first
    /// compared protocol is `acid` and --deadlock is not given, acid runs under each deadlock
    /// handling (acid@wait-die, acid@detect) on the same request streams, and every ratio is
    /// against the best of them at each client count (peak against the best peak). A
    /// protocol entry (`acid@wait-die`) pins the baseline: it replaces a first entry of the
    /// same protocol, or runs first.
    #[arg(long, value_name = "B", default_value = "best")]
    baseline: String,

    /// Measure every point N times, the compared protocols taking turns at each client count
    /// (so a slow stretch of the machine falls on all of them); peaks and ratios then use
    /// each point's median, and the summary adds each round's ratios.
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: u32,

    /// The concurrency-control protocol: acid; salt or salt-nolocal (Salt, with or without
    /// the local-transaction optimization); callas (transaction groups with nexus locks, see
    /// --grouping); raw (every statement locks only while it runs: the "raw ops" upper
    /// bound, no isolation, invariants may break). [default: acid; with --cluster, the
    /// cluster file's]
    #[arg(long, value_name = "P")]
    protocol: Option<String>,

    /// Isolation level of ACID transactions. [default: serializable; with --cluster, the
    /// cluster file's]
    #[arg(long, value_enum)]
    isolation: Option<IsolationArg>,

    /// Callas' transaction groups, for the `callas` points:
    /// `name:mechanism=proc,proc;...` with mechanism 2pl, chop, sc (classic
    /// transaction chopping) or rp (Runtime Pipelining). Procedures in no
    /// group run as ACID transactions (the default group). Default: every
    /// procedure in one 2PL group. Repeat as `LABEL@SPEC` to compare
    /// groupings in one run: `--compare acid,callas@a,callas@b
    /// --grouping 'a@...' --grouping 'b@...'`.
    #[arg(long, value_name = "SPEC")]
    grouping: Vec<String>,

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

    /// Faults of the embedded link (seeded by --seed).
    #[command(flatten)]
    faults: faults::LinkFaultArgs,

    /// Per-pair delays between the nodes from FILE (node i is site i), and
    /// between a client and the server of its site under elia, central and
    /// read-replicas (format: topologies/wan-seed004.txt, seed 004's WAN).
    #[arg(long, value_name = "FILE")]
    topology: Option<std::path::PathBuf>,

    /// elia: each procedure's class and partitioning arguments,
    /// `PROC=CLASS[:ARG[,ARG]];...` with CLASS C, L, G or L/G (default: the
    /// operation partitioning analysis of the application).
    #[arg(long, value_name = "ROUTES")]
    elia_routes: Option<String>,

    /// Seed of the link jitter and of every client's request stream.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,

    /// Deadlock handling of the lock tables, for every protocol. Default: each
    /// protocol's own (acid, raw: wait-die; salt, salt-nolocal, callas: detect).
    #[arg(long, value_enum)]
    deadlock: Option<DeadlockArg>,

    /// Lock wait timeout in milliseconds (the cross-partition deadlock backstop).
    #[arg(long, value_name = "MS", default_value_t = 500)]
    lock_timeout_ms: u64,

    /// Write the JSON report (DESIGN section 7) to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,

    /// ycsb: draw the rho x nu equilibrium plot (SVG) of the run to this file: the ratio
    /// of the second --compare protocol's operations per second over the first's, per
    /// --read-ratio x --native-ratio cell, at the largest client count (see `brine plot`).
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,

    /// Drive a running multi-process cluster (its cluster file, e.g. from
    /// `brine cluster up`) instead of an embedded one: this process loads
    /// the data (see --load) and coordinates the calls; one protocol, one
    /// client count.
    #[arg(long, value_name = "FILE")]
    cluster: Option<std::path::PathBuf>,

    /// With --cluster: whether this run loads the workload's data into the running cluster.
    /// if-empty: load when the workload's tables hold no row, otherwise run on the data they
    /// hold (a cluster that keeps its data, e.g. a durable one after a restart), checking it
    /// before the run with --check; always: load (fails on a duplicate key if the data is
    /// there); never: run on the data the tables hold. An embedded cluster starts empty and is
    /// always loaded (never is refused there).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = LoadArg::IfEmpty)]
    load: LoadArg,

    /// With --cluster: send each call to a node (round-robin by client), whose
    /// coordinator runs it, instead of coordinating it in this process. With a
    /// durable cluster the nodes log what a protocol needs to finish a call a
    /// crash interrupted (Salt's and Callas' roll-forwards, Mediator's
    /// commits); this process keeps no log.
    #[arg(long)]
    calls_at_nodes: bool,

    /// Record the run's history (every transaction's reads and writes with
    /// versions, JSON lines) to this file, for `brine check`. One protocol
    /// and one client count only.
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,

    /// Keys (registers or lists) of the register and list-append workloads
    /// [default: 8]; ycsb: its rows [default: 100000].
    #[arg(long, value_name = "N")]
    keys: Option<u64>,

    /// ycsb: shares of gets among operations (rho), comma-separated (default 0.5).
    #[arg(long, value_name = "LIST")]
    read_ratio: Option<String>,

    /// ycsb: shares of native (single-operation) operations (nu), comma-separated
    /// (default 0.5).
    #[arg(long, value_name = "LIST")]
    native_ratio: Option<String>,

    /// ycsb: largest transaction size n (sizes uniform in 1..n, U_n), comma-separated
    /// (default 4).
    #[arg(long, value_name = "LIST")]
    txn_size: Option<String>,

    /// ycsb: key distribution, zipfian (YCSB's, scrambled) or uniform [default: zipfian].
    #[arg(long, value_name = "NAME")]
    distribution: Option<String>,

    /// Check the workload's invariants after every point; a violation fails the run.
    #[arg(long)]
    check: bool,

    /// micro, micro3: table sizes to sweep, comma-separated (default 10000; micro3: 100).
    #[arg(long, value_name = "LIST")]
    rows: Option<String>,

    /// micro2: positions (1-10) of the contended update to sweep, comma-separated
    /// (default 1: nine updates follow it).
    #[arg(long, value_name = "LIST")]
    position: Option<String>,

    /// micro3: percentages of read-only transactions to sweep, comma-separated (default 50).
    #[arg(long, value_name = "LIST")]
    read_only_percent: Option<String>,

    /// rollback: percentages of calls the check on C rolls back, comma-separated (default 0).
    #[arg(long, value_name = "LIST")]
    rollback_percent: Option<String>,

    /// app: the application file (docs/apps.md).
    #[arg(long, value_name = "FILE")]
    app: Option<std::path::PathBuf>,

    /// elia-micro: percentages of local operations, comma-separated (default 70).
    #[arg(long, value_name = "LIST")]
    local_percent: Option<String>,

    /// elia-micro: how long each operation holds its locks, in milliseconds (default 5,
    /// the seed's execution time).
    #[arg(long, value_name = "MS")]
    op_ms: Option<u64>,

    /// intergroup: "pipelined" calls per "other" call, comma-separated (default 1).
    #[arg(long, value_name = "LIST")]
    ratio: Option<String>,

    /// intergroup: basis points (1 = 0.01%) of "other" calls that also update a row the
    /// "pipelined" type uses, comma-separated (default 10000: every call).
    #[arg(long, value_name = "LIST")]
    conflict_bp: Option<String>,

    /// callas: rollback rate (percent of a Runtime Pipelining group's attempts) above which
    /// the group switches to its rollback-safe chopping [default: 7; 100: never].
    #[arg(long, value_name = "PCT")]
    safe_mode_threshold: Option<f64>,

    /// callas: wait for the rank of a pipelined predecessor at the coordinator, before
    /// sending the piece's statements, instead of holding them at their partitions (the
    /// default; see docs/callas.md, "Rank waits at the partitions").
    #[arg(long)]
    rank_waits_at_coordinator: bool,

    /// Procedures to run as BASE transactions under salt, comma-separated, or none,
    /// or all (default: the sources' choice for the workload; see the workload list).
    #[arg(long, value_name = "LIST")]
    base: Option<String>,

    /// bank: number of accounts (default 10000).
    #[arg(long, value_name = "N")]
    accounts: Option<u64>,

    /// bank: percentage of calls that read the total (the rest transfer; default 10).
    #[arg(long, value_name = "PCT")]
    total_percent: Option<u32>,

    /// tpcc: number of warehouses (default 2).
    #[arg(long, value_name = "N")]
    warehouses: Option<i64>,

    /// tpcc: transaction mix, standard (45/43/4/4/4) or salt (43.5/43.5/4.35/4.35/4.35);
    /// tpcw: web-interaction mix, browsing, shopping (the default) or ordering;
    /// rubis: bidding (the default) or browsing.
    #[arg(long, value_name = "MIX")]
    mix: Option<String>,

    /// Scale of tpcw or rubis: small or standard
    #[arg(long, value_name = "NAME")]
    scale: Option<String>,

    /// tpcc: how terminals run delivery: deferred (clause 2.7.2, the default: queued per
    /// warehouse, one worker each; latency from queueing to completion) or inline (in the
    /// terminal's own call).
    #[arg(long, value_name = "MODE")]
    delivery: Option<String>,

    /// tpcc: where new-order and payment lock the hot rows (warehouse, district): hot-last
    /// (the default, the tuned order) or spec (clause 2's order, the one the sources
    /// BASE-ified).
    #[arg(long, value_name = "ORDER")]
    tpcc_order: Option<String>,

    /// tpcc: the isolation stock-level needs: read-committed (the default; clause 3.4.1
    /// requires no more of it) or serializable (its scan holds its read locks to its end).
    /// It runs at the weaker of this and --isolation.
    #[arg(long, value_name = "LEVEL")]
    stock_level_isolation: Option<String>,

    /// tpcc: database size per warehouse, standard (clause 4.3) or small (non-standard:
    /// 1,000 items, 100 customers per district; for quick runs).
    #[arg(long, value_name = "SCALE")]
    tpcc_scale: Option<String>,

    /// ticket: seats per category (two categories; default 10000).
    #[arg(long, value_name = "N")]
    seats: Option<u64>,

    /// ticket: number of customers (default 10000).
    #[arg(long, value_name = "N")]
    customers: Option<u64>,

    /// ticket: percentage of filled carts abandoned before create_order (default 15).
    #[arg(long, value_name = "PCT")]
    abandon_percent: Option<u32>,

    /// ticket: percentage of finished orders the box office deletes
    /// (default 100: the hall stays in a steady state; below, it fills,
    /// so give it enough --seats for the run).
    #[arg(long, value_name = "PCT")]
    delete_percent: Option<u32>,

    /// Durability modes to run, comma-separated: none (in memory) or wal
    /// (write-ahead log with group commit, checkpoints). With both (none,wal)
    /// every point runs in each mode in this process and the ratio is reported.
    #[arg(long, value_name = "LIST", default_value = "none")]
    durability: String,

    /// With --durability wal: replicas of every log (a replication group on
    /// raft-rs, docs/replication.md): a commit is acknowledged once a
    /// majority of them has it. 1: the log alone. A list (1,3) runs every
    /// point with each, in this process, and reports the ratio. Embedded
    /// cluster only (a multi-process cluster's are in its cluster file).
    #[arg(long, value_name = "LIST", default_value = "1")]
    replicas: String,

    /// wal: directory under which each point gets a fresh data directory
    /// (default: a new temporary directory per point).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,

    /// wal: keep each point's data directory instead of removing it.
    #[arg(long)]
    keep_data: bool,

    /// wal: how long a log writer may wait for more commits before an
    /// fsync, in microseconds, once batches hold more than one commit (0:
    /// sync as soon as the previous fsync ends).
    #[arg(long, value_name = "US", default_value_t = 200)]
    group_commit_us: u64,

    /// wal: a partition checkpoints after this many MiB of log (0: only at start).
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    checkpoint_mib: u64,
}

/// `--replicas 1,3` as counts, in order, without duplicates.
fn replica_counts(list: &str) -> Result<Vec<u32>, BenchError> {
    let mut out = Vec::new();
    for name in parse_names(list, "--replicas").map_err(BenchError::Config)? {
        let n: u32 = name.parse().map_err(|_| {
            BenchError::Config(format!("--replicas: `{name}` is not a number of replicas"))
        })?;
        if n == 0 {
            return Err(BenchError::Config("--replicas must be at least 1".into()));
        }
        if out.contains(&n) {
            return Err(BenchError::Config(format!("--replicas lists {n} twice")));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(BenchError::Config(
            "--replicas needs at least one count".into(),
        ));
    }
    Ok(out)
}

/// `--durability none,wal` as modes, in order, without duplicates.
fn durability_modes(list: &str) -> Result<Vec<DurabilityMode>, BenchError> {
    let mut modes = Vec::new();
    for name in parse_names(list, "--durability").map_err(BenchError::Config)? {
        let m: DurabilityMode = name
            .parse()
            .map_err(|e: brine_core::Error| BenchError::Config(format!("--durability: {e}")))?;
        if modes.contains(&m) {
            return Err(BenchError::Config(format!(
                "--durability lists `{m}` twice"
            )));
        }
        modes.push(m);
    }
    Ok(modes)
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
    let clients = parse_counts(&args.clients, "--clients", brine_bench::spec::MAX_CLIENTS)
        .map_err(BenchError::Config)?
        .into_iter()
        .map(|c| c as u32)
        .collect();
    let mut protocols = match &args.compare {
        Some(list) => parse_names(list, "--compare").map_err(BenchError::Config)?,
        None => vec![args.protocol.clone().unwrap_or_else(|| "acid".into())],
    };
    let baseline =
        brine_bench::spec::apply_baseline(&mut protocols, &args.baseline, args.deadlock.is_some())
            .map_err(BenchError::Config)?;
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
        isolation: isolation_of(args.isolation).unwrap_or(Isolation::Serializable),
        history: args.history.clone(),
        grouping: None,
        rank_holds: !args.rank_waits_at_coordinator,
        faults: faults::fault_config(&args.faults).map_err(BenchError::Config)?,
        ..ClusterConfig::default()
    };
    if let Some(path) = &args.topology {
        let t = brine_cluster::topology::Topology::load(path)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        if (t.sites().len() as u32) < args.nodes {
            return Err(BenchError::Config(format!(
                "--topology {}: {} sites for {} nodes",
                path.display(),
                t.sites().len(),
                args.nodes
            )));
        }
        cluster.topology = Some(std::sync::Arc::new(t));
    }
    if let Some(r) = &args.elia_routes {
        cluster.elia.routes = brine_cluster::protocols::elia::Routes::parse(r)
            .map_err(|e| BenchError::Config(format!("--elia-routes: {e}")))?;
    }
    if let Some(n) = cluster
        .faults
        .cuts
        .iter()
        .flat_map(|c| &c.side)
        .find(|n| n.0 >= args.nodes)
    {
        return Err(BenchError::Config(format!(
            "--cut names node {}, but the cluster has nodes 0 to {}",
            n.0,
            args.nodes.saturating_sub(1)
        )));
    }
    if !cluster.faults.is_none() && args.cluster.is_some() {
        return Err(BenchError::Config(
            "--loss and --cut are faults of the embedded cluster's link; a running cluster's \
             network is its own"
                .into(),
        ));
    }
    if let Some(t) = args.safe_mode_threshold {
        if !(0.0..=100.0).contains(&t) {
            return Err(BenchError::Config(
                "--safe-mode-threshold must be between 0 and 100".into(),
            ));
        }
        cluster.safe_mode.threshold_percent = t;
    }
    let mut groupings = Vec::new();
    for g in &args.grouping {
        let (label, text) = match g.split_once('@') {
            Some((label, text)) => (Some(label.trim()), text),
            None => (None, g.as_str()),
        };
        let parsed = brine_cluster::Grouping::parse(text)
            .map_err(|e| BenchError::Config(format!("--grouping: {e}")))?;
        match label {
            Some("") => {
                return Err(BenchError::Config(format!(
                    "--grouping `{g}`: the label before @ is empty"
                )))
            }
            Some(label) => {
                if groupings.iter().any(|(l, _)| l == label) {
                    return Err(BenchError::Config(format!(
                        "--grouping: two groupings are labelled `{label}`"
                    )));
                }
                groupings.push((label.to_string(), parsed));
            }
            None if cluster.grouping.is_some() => {
                return Err(BenchError::Config(
                    "--grouping: give one unlabelled grouping; label the others (LABEL@SPEC) and run them as callas@LABEL".into(),
                ))
            }
            None => cluster.grouping = Some(parsed),
        }
    }
    groupings.extend(workloads::app_groupings(args, &protocols)?);
    if cluster.grouping.is_some() && !protocols.iter().any(|p| p == "callas") {
        return Err(BenchError::Config(
            "--grouping applies to the callas protocol: add it to --compare or --protocol".into(),
        ));
    }
    cluster.lock.policy = match args.deadlock {
        None | Some(DeadlockArg::WaitDie) => DeadlockPolicy::WaitDie,
        Some(DeadlockArg::Detect) => DeadlockPolicy::Detect,
        Some(DeadlockArg::Timeout) => DeadlockPolicy::TimeoutOnly,
    };
    if args.lock_timeout_ms == 0 {
        return Err(BenchError::Config(
            "--lock-timeout-ms must be at least 1".into(),
        ));
    }
    cluster.lock.wait_timeout = Duration::from_millis(args.lock_timeout_ms);
    cluster.durability = DurabilityConfig {
        mode: durability_modes(&args.durability)?
            .first()
            .copied()
            .unwrap_or_default(),
        data_dir: args.data_dir.clone(),
        keep_data: args.keep_data,
        group_commit_window: Duration::from_micros(args.group_commit_us),
        checkpoint_every_bytes: args.checkpoint_mib.saturating_mul(1 << 20),
        replicas: replica_counts(&args.replicas)?[0],
        // The replicas live on other nodes: the link's delay apart.
        replica_delay: Duration::from_micros(cluster.link.delay_us),
        ..DurabilityConfig::default()
    };
    let replicated = replica_counts(&args.replicas)?.iter().any(|&r| r > 1);
    if replicated && (args.cluster.is_some() || !args.durability.contains("wal")) {
        return Err(BenchError::Config(
            "--replicas replicates the logs of an embedded cluster with --durability wal".into(),
        ));
    }
    let duration = seconds(args.duration, "--duration")?;
    if duration.is_zero() {
        return Err(BenchError::Config("--duration must be positive".into()));
    }
    Ok(BenchSpec {
        cluster,
        protocols,
        groupings,
        clients,
        warmup: seconds(args.warmup, "--warmup")?,
        duration,
        check: args.check,
        deadlock_per_protocol: args.deadlock.is_none(),
        remote: None,
        rounds: args.rounds,
        baseline,
    })
}

fn isolation_of(arg: Option<IsolationArg>) -> Option<Isolation> {
    arg.map(|a| match a {
        IsolationArg::ReadCommitted => Isolation::ReadCommitted,
        IsolationArg::Serializable => Isolation::Serializable,
    })
}

async fn bench(args: BenchArgs) -> Result<(), BenchError> {
    let mut spec = spec_from(&args)?;
    if let Some(path) = &args.cluster {
        let name = args
            .workload
            .to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        // The servers' protocol and isolation, unless asked for (and then
        // they must agree: a coordinator of another protocol would meet
        // partitions configured for the servers').
        node::use_cluster_file(
            &mut spec,
            path,
            &name,
            args.compare.is_some() || args.protocol.is_some(),
            isolation_of(args.isolation),
        )?;
    }
    if let Some(remote) = &mut spec.remote {
        remote.cluster.calls_at_nodes = args.calls_at_nodes;
        remote.load = match args.load {
            LoadArg::IfEmpty => LoadPolicy::IfEmpty,
            LoadArg::Always => LoadPolicy::Always,
            LoadArg::Never => LoadPolicy::Never,
        };
    } else if args.calls_at_nodes {
        return Err(BenchError::Config(
            "--calls-at-nodes sends calls to the nodes of a running cluster (--cluster FILE)"
                .into(),
        ));
    } else if args.load == LoadArg::Never {
        return Err(BenchError::Config(
            "--load never runs on the data of a running cluster (--cluster FILE); an embedded \
             cluster starts empty and is always loaded"
                .into(),
        ));
    }
    let workloads = workloads_from(&args)?;
    spec.validate()?;
    let mut modes = Vec::new();
    for mode in durability_modes(&args.durability)? {
        for &replicas in &replica_counts(&args.replicas)? {
            // Replicas copy the log: without one there is one copy.
            if mode == DurabilityMode::Wal || replicas == 1 {
                modes.push((mode, replicas));
            }
        }
    }
    if args.plot.is_some() {
        let variants: Vec<_> = workloads.iter().map(|w| w.params()).collect();
        brine_bench::report::plot::check_sweep(&spec.protocols, modes.len(), &variants)?;
    }
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
    let plot_file = match &args.plot {
        Some(path) => Some((path, create_file(path)?)),
        None => None,
    };
    let name = workloads.first().map(|w| w.name()).unwrap_or("?");
    let report =
        brine_bench::durability::run_bench_durability(&spec, &workloads, &modes, |point| {
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
    if let Some((path, file)) = plot_file {
        let opts = brine_bench::report::plot::PlotOptions::default();
        let svg = brine_bench::report::plot::svg_of_report(&report, &opts)?;
        write_file(path, file, &svg)?;
    }
    Ok(())
}

fn create_file(path: &std::path::Path) -> Result<std::fs::File, BenchError> {
    std::fs::File::create(path).map_err(|source| BenchError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn write_file(
    path: &std::path::Path,
    mut file: std::fs::File,
    text: &str,
) -> Result<(), BenchError> {
    file.write_all(text.as_bytes())
        .map_err(|source| BenchError::Io {
            path: path.display().to_string(),
            source,
        })?;
    println!("wrote {}", path.display());
    Ok(())
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// The JSON report of a `brine bench ycsb --compare A,B --read-ratio LIST
    /// --native-ratio LIST` run (--json FILE).
    #[arg(value_name = "REPORT")]
    report: std::path::PathBuf,
    /// The SVG file to write [default: REPORT with the extension .svg].
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
    /// The client count to draw [default: the largest in the report].
    #[arg(long, value_name = "N")]
    clients: Option<u32>,
}

/// `brine plot`: the report's SVG, written to --out.
fn plot_command(args: &PlotArgs) -> Result<(), BenchError> {
    let text = std::fs::read_to_string(&args.report)
        .map_err(|e| BenchError::Plot(format!("cannot read {}: {e}", args.report.display())))?;
    let report: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| BenchError::Plot(format!("{} is not JSON: {e}", args.report.display())))?;
    let opts = brine_bench::report::plot::PlotOptions {
        clients: args.clients,
    };
    let svg = brine_bench::report::plot::svg_of_json(&report, &opts)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.report.with_extension("svg"));
    if out == args.report {
        return Err(BenchError::Plot(format!(
            "--out {} would overwrite the report",
            out.display()
        )));
    }
    write_file(&out, create_file(&out)?, &svg)
}

async fn group_command(args: BenchArgs) -> Result<(), BenchError> {
    if args.cluster.is_some() || args.history.is_some() || args.compare.is_some() {
        return Err(BenchError::Config(
            "brine group runs its own protocols on an embedded cluster: --compare, --cluster and \
             --history do not apply"
                .into(),
        ));
    }
    let spec = spec_from(&args)?;
    let mut workloads = workloads_from(&args)?;
    if workloads.len() != 1 {
        return Err(BenchError::Config(
            "brine group measures one workload variant: give single values, not sweeps".into(),
        ));
    }
    group::run(spec, workloads.remove(0)).await
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second initialization (never expected here) is not worth failing on.
    // Colours only on a terminal: a node's log file gets plain text.
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum CheckLevelArg {
    /// No G0, G1a, G1b, G1c.
    ReadCommitted,
    /// None of the anomalies (no G-single, no G2 either).
    Serializable,
    /// Serializable for ACID transactions, BASE transactions interleaving
    /// under Salt isolation.
    Salt,
    /// No G0, G1, G-single, G-nonadjacent (write skew allowed).
    SnapshotIsolation,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ElleModelArg {
    /// Registers named table/key holding version ids.
    RwRegister,
    /// Lists of table `la` (the list-append workload).
    ListAppend,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The history file (JSON lines, see docs/history-format.md), or a
    /// directory of them checked as one history (a cluster's `history`
    /// directory: each node's records).
    #[arg(value_name = "FILE", required_unless_present = "self_bench")]
    file: Option<std::path::PathBuf>,
    /// The isolation level the history must satisfy.
    #[arg(long, value_enum, default_value = "serializable")]
    level: CheckLevelArg,
    /// Also write the history as a Jepsen/Elle EDN history to this file.
    #[arg(long, value_name = "OUT", requires = "elle_model")]
    export_elle: Option<std::path::PathBuf>,
    /// The Elle model of --export-elle.
    #[arg(long, value_enum, requires = "export_elle")]
    elle_model: Option<ElleModelArg>,
    /// Print at most N witnesses (every anomaly is still counted).
    #[arg(long, value_name = "N", default_value_t = 10)]
    max_witnesses: usize,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Time the checker on a generated valid history of N transactions
    /// instead of reading FILE.
    #[arg(long, value_name = "N", conflicts_with = "file")]
    self_bench: Option<usize>,
    /// Seed of the --self-bench history.
    #[arg(long, default_value_t = 1, requires = "self_bench")]
    seed: u64,
    /// Check each row (row) or each column of each row (column) as one
    /// item. Default: what the history's header asks for (column for runs
    /// with a Runtime Pipelining group, whose dependencies are per column).
    #[arg(long, value_enum)]
    granularity: Option<GranularityArg>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum GranularityArg {
    Row,
    Column,
}

/// `brine check`: 0 valid, 1 violation, 2 unreadable input.
fn run_check(args: &CheckArgs) -> ExitCode {
    use brine_check::command::{run, CheckOptions};
    use brine_check::elle::ElleModel;
    let level = match args.level {
        CheckLevelArg::ReadCommitted => brine_check::Level::ReadCommitted,
        CheckLevelArg::Serializable => brine_check::Level::Serializable,
        CheckLevelArg::Salt => brine_check::Level::Salt,
        CheckLevelArg::SnapshotIsolation => brine_check::Level::SnapshotIsolation,
    };
    let model = match args.elle_model {
        Some(ElleModelArg::ListAppend) => ElleModel::ListAppend,
        _ => ElleModel::RwRegister,
    };
    let opts = CheckOptions {
        file: args.file.clone(),
        level,
        export_elle: args.export_elle.clone().map(|p| (p, model)),
        max_witnesses: args.max_witnesses,
        json: args.json,
        self_bench: args.self_bench,
        seed: args.seed,
        granularity: args.granularity.map(|g| match g {
            GranularityArg::Row => brine_check::command::Granularity::Row,
            GranularityArg::Column => brine_check::command::Granularity::Column,
        }),
    };
    let stdout = std::io::stdout();
    match run(&opts, &mut stdout.lock()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the multi-process commands (server, cluster, call, status) on a
/// runtime of their own; `None` for the other commands.
fn run_process_command(command: &Command) -> Option<ExitCode> {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("brine-worker")
            .enable_all()
            .build()
    };
    let run = |f: &dyn Fn(&tokio::runtime::Runtime) -> Result<(), node::NodeError>| match runtime()
    {
        Ok(rt) => match f(&rt) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    };
    Some(match command {
        Command::Server(a) => run(&|rt| rt.block_on(node::server(a))),
        Command::Cluster(ClusterCommand::Up(a)) => run(&|rt| rt.block_on(up::up(a))),
        Command::Call(a) => run(&|rt| rt.block_on(node::call(a))),
        Command::Status(a) => run(&|rt| rt.block_on(node::status(a))),
        Command::Cut(a) => run(&|rt| rt.block_on(faults::cut(a))),
        Command::Sql(a) => run(&|rt| rt.block_on(node::sql(a))),
        Command::Load(a) => run(&|rt| rt.block_on(node::load(a))),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    // Checking needs no cluster and no async runtime.
    if let Command::Check(args) = &cli.command {
        return run_check(args);
    }
    if let Command::Analyze(args) = &cli.command {
        return analyze::run(args);
    }
    if let Command::Plot(args) = &cli.command {
        return match plot_command(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(code) = run_process_command(&cli.command) {
        return code;
    }
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    // A delayed link runs its own delivery thread, which must not compete
    // with the workers for a core or every delivery comes late; so it gets
    // one core of its own when there is more than one.
    let link_delayed = match &cli.command {
        Command::Bench(b) | Command::Group(b) => b.link_delay > 0 || b.jitter > 0,
        _ => false,
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
        Command::Bench(args) => runtime.block_on(bench(*args)),
        Command::Group(args) => runtime.block_on(group_command(*args)),
        _ => Ok(()),
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

    #[test]
    fn check_args_parse() {
        let ok = |args: &[&str]| {
            let mut v = vec!["brine", "check"];
            v.extend_from_slice(args);
            match Cli::try_parse_from(v) {
                Ok(Cli {
                    command: Command::Check(c),
                    ..
                }) => Some(c),
                _ => None,
            }
        };
        let c = ok(&[
            "h.jsonl",
            "--level",
            "salt",
            "--export-elle",
            "h.edn",
            "--elle-model",
            "list-append",
        ]);
        assert!(c.is_some_and(|c| c.level == CheckLevelArg::Salt
            && c.elle_model == Some(ElleModelArg::ListAppend)
            && c.max_witnesses == 10));
        assert!(ok(&["--self-bench", "100"]).is_some());
        assert!(ok(&[]).is_none(), "a file or --self-bench is required");
        assert!(
            ok(&["h.jsonl", "--export-elle", "h.edn"]).is_none(),
            "needs --elle-model"
        );
        assert!(ok(&["h.jsonl", "--level", "snapshot"]).is_none());
        assert!(ok(&["h.jsonl", "--self-bench", "10"]).is_none());
    }

    fn parse(args: &[&str]) -> BenchArgs {
        let mut v = vec!["brine", "bench"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v) {
            Ok(Cli {
                command: Command::Bench(b),
                ..
            }) => *b,
            Ok(other) => panic!("not a bench command: {:?}", other.command),
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
        assert!(Cli::try_parse_from(["brine", "bench", "nope"]).is_err());
        assert!(workloads_from(&parse(&["micro", "--warehouses", "2"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--warehouses", "0"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--mix", "odd"])).is_err());
        assert!(workloads_from(&parse(&["tpcw", "--mix", "odd"])).is_err());
        assert!(workloads_from(&parse(&["tpcw", "--scale", "huge"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--scale", "small"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--mix", "shopping"])).is_err());
        assert!(workloads_from(&parse(&["tpcw", "--mix", "ordering", "--scale", "small"])).is_ok());
        assert!(workloads_from(&parse(&["tpcc", "--tpcc-scale", "huge"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--delivery", "later"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--tpcc-order", "random"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--delivery", "inline"])).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--rows", "5"])).is_err());
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
        let spec = spec_from(&parse(&["micro", "--compare", "acid,nope"]));
        assert!(spec.is_ok_and(|s| s.validate().is_err()));
    }

    #[test]
    fn labelled_groupings_run_as_callas_at_label() -> Result<(), BenchError> {
        let args = |extra: &[&str]| {
            let mut a = vec!["tpcc", "--compare", "acid,callas@a,callas@b"];
            a.extend_from_slice(extra);
            parse(&a)
        };
        let two = [
            "--grouping",
            "a@g:sc=new_order",
            "--grouping",
            "b@g:rp=new_order",
        ];
        let spec = spec_from(&args(&two))?;
        spec.validate()?;
        let labels: Vec<&str> = spec.groupings.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(spec.groupings[0].1.to_string(), "g:sc=new_order");
        // `callas@b` without a grouping labelled b.
        let spec = spec_from(&args(&["--grouping", "a@g:sc=new_order"]))?;
        assert!(spec.validate().is_err());
        // A labelled grouping no protocol runs.
        let unused = spec_from(&parse(&[
            "tpcc",
            "--compare",
            "acid,callas",
            "--grouping",
            "x@g:sc=new_order",
        ]))?;
        assert!(unused.validate().is_err());
        // Two unlabelled groupings, two with one label, an empty label.
        let g = "g:2pl=new_order";
        assert!(spec_from(&args(&["--grouping", g, "--grouping", g])).is_err());
        assert!(spec_from(&args(&["--grouping", "a@g:sc=x", "--grouping", "a@g:sc=y"])).is_err());
        assert!(spec_from(&args(&["--grouping", "@g:sc=x"])).is_err());
        // Only callas takes a label.
        let salt = spec_from(&parse(&["tpcc", "--compare", "acid,salt@a"]))?;
        assert!(salt.validate().is_err());
        Ok(())
    }

    #[test]
    fn plot_args_parse() {
        match Cli::try_parse_from([
            "brine",
            "plot",
            "r.json",
            "--out",
            "r.svg",
            "--clients",
            "8",
        ]) {
            Ok(Cli {
                command: Command::Plot(p),
                ..
            }) => {
                assert_eq!(p.report, std::path::PathBuf::from("r.json"));
                assert_eq!(p.out, Some("r.svg".into()));
                assert_eq!(p.clients, Some(8));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            Cli::try_parse_from(["brine", "plot"]).is_err(),
            "needs a report"
        );
        let b = parse(&["ycsb", "--compare", "omid,mediator", "--plot", "g.svg"]);
        assert_eq!(b.plot, Some("g.svg".into()));
    }

    /// `--plot` on a run it cannot draw fails before anything runs (and
    /// before the file is created).
    fn plot_refusal(args: &[&str]) -> String {
        let dir = tempfile::tempdir().expect("temp dir");
        let svg = dir.path().join("p.svg");
        let mut v = args.to_vec();
        let svg_arg = svg.display().to_string();
        v.extend([
            "--plot",
            svg_arg.as_str(),
            "--duration",
            "0.01",
            "--warmup",
            "0",
        ]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let e = match rt.block_on(bench(parse(&v))) {
            Err(e @ BenchError::Plot(_)) => e.to_string(),
            other => panic!("{args:?}: {other:?}"),
        };
        assert!(!svg.exists(), "{args:?} created the plot file");
        e
    }

    #[test]
    fn plot_is_refused_before_a_run_it_cannot_draw() {
        let grid = ["--read-ratio", "0,1", "--native-ratio", "0,1"];
        let one = plot_refusal(&[&["ycsb", "--protocol", "mediator"], &grid[..]].concat());
        assert!(one.contains("two protocols"), "{one}");
        let flat = plot_refusal(&["ycsb", "--compare", "omid,mediator", "--read-ratio", "0,1"]);
        assert!(flat.contains("native_ratio"), "{flat}");
        let sizes = plot_refusal(
            &[
                &["ycsb", "--compare", "omid,mediator", "--txn-size", "1,4"],
                &grid[..],
            ]
            .concat(),
        );
        assert!(sizes.contains("txn_size"), "{sizes}");
        let micro = plot_refusal(&[
            "micro",
            "--compare",
            "acid@wait-die,salt",
            "--rows",
            "10,100",
        ]);
        assert!(micro.contains("read_ratio"), "{micro}");
    }

    #[test]
    fn plot_command_draws_a_saved_report() -> Result<(), BenchError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let report = dir.path().join("grid.json");
        let saved = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/results/mediator-2026-11-26/grid-u4.json"
        );
        std::fs::copy(saved, &report).expect("copying the saved report");
        let args = PlotArgs {
            report: report.clone(),
            out: None,
            clients: None,
        };
        plot_command(&args)?;
        let svg = std::fs::read_to_string(dir.path().join("grid.svg")).expect("the SVG");
        assert_eq!(svg.matches("<text class=\"ratio\"").count(), 9);
        assert!(svg.contains("ycsb U4, 100000 keys, zipfian, 32 clients: mediator vs omid"));
        let wrong = PlotArgs {
            clients: Some(5),
            ..args
        };
        assert!(matches!(plot_command(&wrong), Err(BenchError::Plot(_))));
        Ok(())
    }

    #[test]
    fn rows_sweep_makes_one_workload_per_size() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&["micro", "--rows", "10,100,1000"]))?;
        assert_eq!(w.len(), 3);
        Ok(())
    }

    #[test]
    fn rubis_options() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&["rubis"]))?;
        let p = w[0].params();
        assert_eq!(w[0].name(), "rubis");
        assert_eq!(p.get("mix"), Some(&serde_json::json!("bidding")));
        assert_eq!(p.get("scale"), Some(&serde_json::json!("standard")));
        let w = workloads_from(&parse(&["rubis", "--mix", "browsing", "--scale", "small"]))?;
        let p = w[0].params();
        assert_eq!(p.get("mix"), Some(&serde_json::json!("browsing")));
        assert_eq!(p.get("scale"), Some(&serde_json::json!("small")));
        let refused = |a: &[&str]| matches!(workloads_from(&parse(a)), Err(BenchError::Config(_)));
        assert!(refused(&["rubis", "--mix", "standard"]));
        assert!(refused(&["rubis", "--scale", "huge"]));
        assert!(refused(&["rubis", "--warehouses", "2"]));
        assert!(refused(&["micro", "--scale", "small"]));
        // Too many clients for the users: refused before any point runs
        // (`Workload::validate_clients`, at the start of `run_bench`).
        let small = workloads_from(&parse(&["rubis", "--scale", "small"]))?;
        assert!(small[0].validate_clients(1_000).is_ok());
        assert!(matches!(
            small[0].validate_clients(1_001),
            Err(BenchError::Config(_))
        ));
        Ok(())
    }

    #[test]
    fn tpcc_options() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&["tpcc", "--warehouses", "4", "--mix", "salt"]))?;
        let p = w[0].params();
        assert_eq!(p.get("warehouses"), Some(&serde_json::json!(4)));
        assert_eq!(p.get("mix"), Some(&serde_json::json!("salt")));
        assert_eq!(p.get("scale"), Some(&serde_json::json!("standard")));
        assert_eq!(p.get("delivery"), Some(&serde_json::json!("deferred")));
        assert_eq!(p.get("order"), Some(&serde_json::json!("hot-last")));
        let w = workloads_from(&parse(&["tpcc", "--delivery", "inline"]))?;
        assert_eq!(w[0].deferred_queues(), 0);
        assert_eq!(
            w[0].params().get("delivery"),
            Some(&serde_json::json!("inline"))
        );
        let w = workloads_from(&parse(&["tpcc", "--tpcc-scale", "small"]))?;
        assert_eq!(w[0].params().get("warehouses"), Some(&serde_json::json!(2)));
        Ok(())
    }

    #[test]
    fn salt_microbenchmark_sweeps() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&["micro2", "--position", "1,5,10"]))?;
        assert_eq!(w.len(), 3);
        assert_eq!(
            w[2].params().get("ops_after_hot"),
            Some(&serde_json::json!(0))
        );
        assert!(workloads_from(&parse(&["micro2", "--position", "11"])).is_err());
        assert!(workloads_from(&parse(&["micro2", "--rows", "10"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--position", "1"])).is_err());
        let w = workloads_from(&parse(&["micro3", "--read-only-percent", "0,50,95"]))?;
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].params().get("rows"), Some(&serde_json::json!(100)));
        assert!(workloads_from(&parse(&["micro3", "--read-only-percent", "101"])).is_err());
        assert!(workloads_from(&parse(&["bank", "--read-only-percent", "5"])).is_err());
        Ok(())
    }

    #[test]
    fn base_lists() -> Result<(), BenchError> {
        let base = |args: &[&str]| -> Result<serde_json::Value, BenchError> {
            let w = workloads_from(&parse(args))?;
            Ok(w[0].params().get("base").cloned().unwrap_or_default())
        };
        assert_eq!(base(&["tpcc"])?, "new_order,payment");
        assert_eq!(base(&["tpcc", "--base", "none"])?, "none");
        assert_eq!(
            base(&["tpcc", "--base", "payment,new_order,delivery"])?,
            "delivery,new_order,payment"
        );
        assert_eq!(base(&["ticket"])?, "create_order");
        assert_eq!(
            base(&["ticket", "--base", "delete_order,create_order"])?,
            "create_order,delete_order"
        );
        assert_eq!(base(&["bank", "--base", "none"])?, "none");
        assert_eq!(base(&["micro3", "--base", "write5"])?, "write5");
        assert!(workloads_from(&parse(&["tpcc", "--base", "neworder"])).is_err());
        assert!(workloads_from(&parse(&["ticket", "--base", "pay"])).is_err());
        assert_eq!(base(&["register"])?, "read_write");
        assert_eq!(
            base(&["register", "--base", "all"])?,
            "range_read,read_write"
        );
        assert_eq!(base(&["tpcw"])?, "do_buy_confirm,do_buy_confirm_address");
        assert_eq!(base(&["rubis", "--base", "store_bid"])?, "store_bid");
        assert_eq!(base(&["rubis"])?, "store_bid,store_buy_now");
        assert!(workloads_from(&parse(&["rubis", "--base", "view_item"])).is_err());
        assert_eq!(base(&["list-append"])?, "append_read");
        assert_eq!(base(&["list-append", "--base", "none"])?, "none");
        assert!(workloads_from(&parse(&["register", "--base", "read_only"])).is_err());
        Ok(())
    }

    #[test]
    fn ticket_options() -> Result<(), BenchError> {
        let w = workloads_from(&parse(&[
            "ticket",
            "--seats",
            "500",
            "--abandon-percent",
            "0",
            "--delete-percent",
            "5",
        ]))?;
        let p = w[0].params();
        assert_eq!(p.get("seats_per_category"), Some(&serde_json::json!(500)));
        assert_eq!(p.get("abandon_percent"), Some(&serde_json::json!(0)));
        assert_eq!(p.get("delete_percent"), Some(&serde_json::json!(5)));
        let bad = &["ticket", "--delete-percent", "101"];
        assert!(workloads_from(&parse(bad)).is_err());
        assert!(workloads_from(&parse(&["tpcc", "--delete-percent", "5"])).is_err());
        assert!(workloads_from(&parse(&["ticket", "--seats", "1"])).is_err());
        assert!(workloads_from(&parse(&["ticket", "--rows", "5"])).is_err());
        assert!(workloads_from(&parse(&["micro", "--seats", "5"])).is_err());
        Ok(())
    }
}
