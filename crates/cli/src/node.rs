//! brine as processes: `brine server`, `brine cluster up`, `brine call`,
//! `brine status`, and the cluster file they share.
//!
//! ```text
//!  cluster.toml ──► brine server --node 0 ─┐
//!               ──► brine server --node 1 ─┼── TCP (brine-net): partition messages between
//!               ──► brine server --node 2 ─┘   nodes, calls and status from clients
//!  brine cluster up --nodes 3 --dir D: writes D/cluster.toml, runs the three servers
//!  (logs in D/node-<n>.log), stops them on Ctrl-C / SIGTERM
//! ```
//!
//! Every node runs the same application, named in the cluster file by a
//! workload and its `brine bench` options, and hosts its share of the
//! partitions; a call sent to a node is coordinated there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use brine_client::{ClusterFile, NodeEntry};
use brine_cluster::decision::DecisionBook;
use brine_cluster::remote::{self, NodeService, WireRequest, WireResponse};
use brine_cluster::replication::{NodeReplicas, ReplicaStatus};
use brine_cluster::{Application, Cluster, ClusterConfig, Isolation};
use brine_core::{NodeId, Value};
use clap::{Args, Parser};

use crate::metrics::CallMetrics;
use crate::{workloads_from, Cli, Command};

/// Errors of the process commands, with the file or address involved.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Client(#[from] brine_client::ClientError),
    #[error("{0}")]
    Config(String),
    #[error("{context}: {source}")]
    Engine {
        context: String,
        #[source]
        source: brine_core::Error,
    },
    #[error("{context}: {source}")]
    Net {
        context: String,
        #[source]
        source: brine_net::NetError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The engine configuration of the cluster in `file` (no simulated link:
/// the network is real).
pub fn cluster_config(file: &ClusterFile) -> Result<ClusterConfig, NodeError> {
    let isolation = isolation_of(file)?;
    let mut config = ClusterConfig {
        nodes: file.nodes.len() as u32,
        partitions_per_node: file.partitions_per_node,
        protocol: file.protocol.clone(),
        isolation,
        ..ClusterConfig::default()
    };
    config.link.delay_us = 0;
    config.link.jitter_us = 0;
    // Replicated logs: partitions move with their logs' leaders.
    config.durability.replicas = file.replicas;
    config.lock.policy = match file.deadlock.as_deref() {
        None => brine_cluster::protocols::default_deadlock_policy(&file.protocol),
        Some(name) => brine_cluster::DeadlockPolicy::from_name(name).ok_or_else(|| {
            NodeError::Config(format!(
                "deadlock `{name}` (expected wait-die, detect or timeout)"
            ))
        })?,
    };
    config.services = file.services.clone();
    config.grouping = grouping_of(&file.protocol, file.grouping.as_deref())?;
    if file.protocol == "elia" {
        // Every process routes calls alike: by the workload's routes, as
        // `brine bench` gives them.
        if let Some(routes) = workload_of(file)?.elia_routes() {
            config.elia.routes = routes;
        }
    }
    Ok(config)
}

/// The cluster file's Callas grouping, parsed (only `callas` has one).
pub fn grouping_of(
    protocol: &str,
    grouping: Option<&str>,
) -> Result<Option<brine_cluster::Grouping>, NodeError> {
    let Some(text) = grouping else {
        return Ok(None);
    };
    if protocol != "callas" {
        return Err(NodeError::Config(format!(
            "grouping `{text}`: groupings are Callas' (protocol `callas`), not `{protocol}`'s"
        )));
    }
    brine_cluster::Grouping::parse(text)
        .map(Some)
        .map_err(|e| NodeError::Config(format!("grouping `{text}`: {e}")))
}

/// The application named by the file's `workload` and `workload_args`.
pub fn application(file: &ClusterFile) -> Result<Application, NodeError> {
    // A server needs an application file's schema and procedures, not the
    // `[bench]` table that only `brine bench` and `brine load` run.
    if let [flag, path] = file.workload_args.as_slice() {
        if file.workload == "app" && flag == "--app" {
            return brine_app::load(Path::new(path))
                .map(|app| app.application)
                .map_err(|e| NodeError::Config(e.to_string()));
        }
    }
    Ok(workload_of(file)?.application())
}

/// The workload named by the file's `workload` and `workload_args`.
fn workload_of(file: &ClusterFile) -> Result<Arc<dyn brine_bench::Workload>, NodeError> {
    let mut argv = vec!["brine".to_string(), "bench".into(), file.workload.clone()];
    argv.extend(file.workload_args.iter().cloned());
    let cli = Cli::try_parse_from(&argv).map_err(|e| {
        NodeError::Config(format!(
            "workload `{}` with options {:?}: {}",
            file.workload,
            file.workload_args,
            e.to_string().lines().next().unwrap_or("invalid")
        ))
    })?;
    let Command::Bench(args) = cli.command else {
        return Err(NodeError::Config(
            "workload options do not describe a bench run".into(),
        ));
    };
    let workloads = workloads_from(&args).map_err(|e| NodeError::Config(e.to_string()))?;
    let workload = workloads
        .first()
        .ok_or_else(|| NodeError::Config(format!("workload `{}` has no variant", file.workload)))?;
    Ok(workload.clone())
}

pub(crate) fn read_file(path: &Path) -> Result<ClusterFile, NodeError> {
    ClusterFile::read(path).map_err(NodeError::Client)
}

/// `brine server`.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// The cluster file (see docs/operations.md).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Which node of the cluster file this process is.
    #[arg(long, value_name = "N", required_unless_present = "service")]
    pub node: Option<u32>,
    /// Run the protocol's service NAME (Mediator: `tso`) instead of a
    /// node, at the address the cluster file's `[services]` gives it.
    #[arg(long, value_name = "NAME", conflicts_with = "node")]
    pub service: Option<String>,
    /// Run the application in FILE (docs/apps.md) instead of the cluster
    /// file's workload; every process of the cluster must be given it.
    #[arg(long, value_name = "FILE")]
    pub app: Option<PathBuf>,
}

/// Runs one node, or one of the protocol's services, until Ctrl-C or
/// SIGTERM.
pub async fn server(args: &ServerArgs) -> Result<(), NodeError> {
    let mut file = read_file(&args.config)?;
    if let Some(app) = &args.app {
        file.workload = "app".into();
        file.workload_args = vec!["--app".into(), app.display().to_string()];
    }
    let me = match (args.node, &args.service) {
        (_, Some(name)) => return crate::service::serve(&file, name).await,
        (Some(n), None) => n,
        (None, None) => return Err(NodeError::Config("--node N or --service NAME".into())),
    };
    // Keys `unique_rowid()` makes in this process differ from every other
    // node's.
    brine_core::rowid::set_node(me as u16);
    let addr: SocketAddr = file
        .address(me)?
        .parse()
        .map_err(|e| NodeError::Config(format!("address of node {me}: {e}")))?;
    let addresses: Vec<String> = file.nodes.iter().map(|n| n.address.clone()).collect();
    let peers =
        remote::peer_clients(&addresses, Some(NodeId(me))).map_err(|source| NodeError::Engine {
            context: format!("node {me}'s peers"),
            source,
        })?;
    let mut config = cluster_config(&file)?;
    let data_dir = match file.node_data_dir(me) {
        Some(dir) if file.durability == "wal" => Some(dir),
        _ => None,
    };
    // With replicated logs this node's replicas answer their peers from
    // the start: the groups must run for any node to lead its logs.
    // With replicated logs this node's replicas answer their peers from
    // the start (the groups must run for any node to lead its logs); they
    // start once the node knows their generation (`replication::generation`).
    let replicated = data_dir.is_some() && file.replicas > 1;
    let replicas: Arc<std::sync::OnceLock<Arc<NodeReplicas>>> = Arc::default();
    let has_replica_state = data_dir
        .as_ref()
        .is_some_and(|d| d.join("replicas").join("generation").exists());
    // A durable node answers its peers' questions about its decisions as
    // soon as it has read them, even while its own recovery waits for
    // theirs.
    let book: Arc<std::sync::OnceLock<Arc<DecisionBook>>> = Arc::default();
    let ready: Arc<std::sync::OnceLock<(Cluster, Arc<NodeService>)>> = Arc::default();
    let calls = Arc::new(CallMetrics::default());
    let durable = data_dir.is_some();
    let handler = {
        let (ready, calls, book, replicas) =
            (ready.clone(), calls.clone(), book.clone(), replicas.clone());
        move |req: WireRequest| {
            let (ready, calls, book, replicas) =
                (ready.clone(), calls.clone(), book.clone(), replicas.clone());
            async move {
                if let Some(answer) = crate::replicas::request(
                    me,
                    replicated,
                    has_replica_state,
                    replicas.get(),
                    &req,
                )
                .await
                {
                    return answer;
                }
                // Another node's decisions: this node answers for them
                // while it leads that node's decision log.
                if let (WireRequest::Decision { txn }, Some(r)) = (&req, replicas.get()) {
                    match r.decision_of_another(*txn) {
                        Some(Ok(i)) => return WireResponse::Decision(i),
                        Some(Err(e)) => return WireResponse::Refused(e),
                        None => {}
                    }
                }
                let Some((cluster, service)) = ready.get() else {
                    return match (req, book.get()) {
                        (WireRequest::Decision { txn }, Some(book)) => {
                            WireResponse::Decision(book.ask(txn))
                        }
                        // Its decisions are not read yet: ask again.
                        (WireRequest::Decision { .. }, None) if durable => {
                            WireResponse::Decision(remote::Inquiry::Undecided)
                        }
                        // Without a log nothing decided survived a restart.
                        (WireRequest::Decision { .. }, None) => {
                            WireResponse::Decision(remote::Inquiry::Aborted)
                        }
                        _ => WireResponse::Refused(brine_core::Error::Transport(format!(
                            "node {me} is starting (recovering); try again shortly"
                        ))),
                    };
                };
                let timed = matches!(req, WireRequest::Call { .. }).then(std::time::Instant::now);
                let answer = service.handle(cluster, req).await;
                if let Some(started) = timed {
                    calls.record(
                        started.elapsed(),
                        matches!(answer, WireResponse::Called(Ok(_))),
                    );
                }
                answer
            }
        }
    };
    let server = brine_net::Server::bind(addr, brine_net::ServerConfig::default(), handler)
        .await
        .map_err(|source| NodeError::Net {
            context: format!("node {me} listening on {addr}"),
            source,
        })?;
    if let (true, Some(dir)) = (replicated, &data_dir) {
        let started = crate::replicas::start(&file, me, dir, &addresses, &config).await?;
        config.durability.replicas = file.replicas;
        config.durability.across = Some(started.clone());
        let _ = replicas.set(started);
    }
    let replicas = replicas.get().cloned();
    if let Some(dir) = &data_dir {
        if let Some(r) = &replicas {
            // Its decision log as the group committed it.
            r.lead(brine_cluster::replication::LogName::Decisions(me))
                .await
                .map_err(|source| NodeError::Engine {
                    context: format!("node {me} leading its decision log"),
                    source,
                })?;
        }
        let committed = brine_cluster::durability::node_decisions(dir, me).map_err(|source| {
            NodeError::Engine {
                context: format!("reading node {me}'s decision log in {}", dir.display()),
                source,
            }
        })?;
        config.durability.mode = brine_cluster::DurabilityMode::Wal;
        config.durability.data_dir = Some(dir.clone());
        let _ = book.set(Arc::new(DecisionBook::recovered(committed)));
    }
    let book = book.get().cloned();
    // Where the file moves a peer (a node replaced at another address),
    // every client of it follows.
    let mut followed: Vec<(u32, Arc<remote::PeerClient>)> =
        peers.iter().map(|(n, c)| (n.0, c.clone())).collect();
    if let Some(r) = &replicas {
        followed.extend(r.clients());
    }
    crate::addresses::follow(args.config.clone(), me, followed);
    let history_file = file.node_history_file(me);
    if let Some(path) = &history_file {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                NodeError::Config(format!(
                    "cannot create the history directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        config.history = Some(path.clone());
    }
    let app = application(&file)?;
    // Recovery may block on peers' answers: off the async threads.
    let (cluster, service) = tokio::task::spawn_blocking(move || {
        Cluster::start_node(config, app, NodeId(me), peers, book)
    })
    .await
    .map_err(|e| NodeError::Config(format!("node {me}'s start failed: {e}")))?
    .map_err(|source| NodeError::Engine {
        context: format!("starting node {me}"),
        source,
    })?;
    if let Some(path) = &history_file {
        settle_earlier_history(&cluster, &file, me, path).await?;
    }
    cluster.wait_ready().await;
    let service = Arc::new(service);
    service.announce_restart().await;
    cluster.protocol().announced();
    // With replicated logs: the partitions this node comes to lead are
    // taken over as it does; a log it writes and no longer leads stops
    // the node.
    let mut fatal = replicas.as_ref().map(|r| r.fatal());
    let placement = replicas
        .as_ref()
        .and_then(|r| r.takeovers())
        .map(|mut takeovers| {
            let (cluster, replicas) = (cluster.clone(), replicas.clone());
            tokio::spawn(async move {
                while let Some((p, term)) = takeovers.recv().await {
                    if let Err(e) = cluster.take_over(p, term).await {
                        if let Some(r) = &replicas {
                            r.stop_node(format!("taking partition {p} over: {e}"));
                        }
                    }
                }
            })
        });
    if replicas.is_some() {
        // A new cluster's partitions start on their homes: this node's
        // are served before it says it is up (a bounded wait: after a
        // failure another node may serve them).
        let home: Vec<u32> = (0..file.partitions_per_node)
            .map(|i| me * file.partitions_per_node + i)
            .collect();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !home.iter().all(|&p| cluster.serves_here(p)) && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = ready.set((cluster.clone(), service.clone()));
    eprintln!(
        "brine node {me} serving on {} ({} nodes, workload {}, durability {})",
        server.local_addr(),
        file.nodes.len(),
        file.workload,
        file.durability
    );
    let reaper = {
        let service = service.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                let reaped = service.reap_idle_sessions();
                if reaped > 0 {
                    tracing::warn!(reaped, "aborted idle interactive transactions");
                }
            }
        })
    };
    let pg = match file
        .nodes
        .get(me as usize)
        .and_then(|n| n.pg_address.clone())
    {
        Some(pg) => {
            let paddr: SocketAddr = pg
                .parse()
                .map_err(|e| NodeError::Config(format!("pg_address of node {me}: {e}")))?;
            let listener = brine_pgwire::PgServer::bind(paddr, cluster.clone(), Default::default())
                .await
                .map_err(|source| NodeError::Io {
                    context: format!("node {me} PostgreSQL protocol on {paddr}"),
                    source,
                })?;
            eprintln!("brine node {me} PostgreSQL protocol on {paddr}");
            Some(listener)
        }
        None => None,
    };
    let server = Arc::new(parking_lot::Mutex::new(Some(server)));
    let metrics_task = match file.nodes.get(me as usize).and_then(|n| n.metrics.clone()) {
        Some(maddr) => {
            let maddr: SocketAddr = maddr
                .parse()
                .map_err(|e| NodeError::Config(format!("metrics address of node {me}: {e}")))?;
            let listener = crate::metrics::bind(maddr)
                .await
                .map_err(|source| NodeError::Io {
                    context: format!("node {me} metrics on {maddr}"),
                    source,
                })?;
            eprintln!("brine node {me} metrics on http://{maddr}/metrics");
            let (cluster, service, server) = (cluster.clone(), service.clone(), server.clone());
            Some(tokio::spawn(crate::metrics::serve(listener, move || {
                let (cluster, service, calls, server) = (
                    cluster.clone(),
                    service.clone(),
                    calls.clone(),
                    server.clone(),
                );
                async move { crate::metrics::render_node(me, &cluster, &service, &calls, &server).await }
            })))
        }
        None => None,
    };
    let stopped_by = tokio::select! {
        _ = wait_for_stop() => None,
        why = async {
            match &mut fatal {
                Some(f) => {
                    let _ = f.wait_for(Option::is_some).await;
                    f.borrow().clone()
                }
                None => std::future::pending().await,
            }
        } => why,
    };
    if let Some(t) = placement {
        t.abort();
    }
    if let Some(why) = stopped_by {
        // Fail-stop: nothing more is served or written; the supervisor
        // (`brine cluster up`) restarts the node, a follower of its logs.
        eprintln!("brine node {me}: stopping at once: {why}");
        return Err(NodeError::Config(why));
    }
    eprintln!("brine node {me}: stopping");
    if let Some(t) = metrics_task {
        t.abort();
    }
    reaper.abort();
    if let Some(pg) = pg {
        // Its sessions' open transactions are aborted before the node's
        // own server stops.
        pg.stop().await;
    }
    let server = server.lock().take();
    if let Some(server) = server {
        let outcome = server.shutdown().await;
        // Everything acknowledged is durable already; this flushes the rest.
        cluster.close_logs();
        eprintln!("brine node {me}: stopped ({outcome:?})");
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `brine call`.
#[derive(Args, Debug)]
pub struct CallArgs {
    /// The cluster file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// The node that coordinates the call.
    #[arg(long, default_value_t = 0)]
    pub node: u32,
    /// The procedure.
    pub procedure: String,
    /// Its arguments: integers, decimals (with a '.'), or text.
    pub args: Vec<String>,
}

fn parse_arg(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return Value::Int(i);
    }
    if let Some(d) = parse_decimal(s) {
        return Value::Decimal(d);
    }
    Value::str(s)
}

/// `-12.50` as a decimal of scale 2; `None` unless the text is one.
fn parse_decimal(s: &str) -> Option<brine_core::Decimal> {
    let (whole, frac) = s.split_once('.')?;
    let negative = whole.starts_with('-');
    let digits = whole.trim_start_matches('-');
    if frac.is_empty() || frac.len() > 18 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = frac.len() as u32;
    let whole_units: i64 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let units = whole_units
        .checked_mul(10i64.checked_pow(scale)?)?
        .checked_add(frac.parse::<i64>().ok()?)?;
    Some(brine_core::Decimal::new(
        if negative { -units } else { units },
        scale as u8,
    ))
}

fn node_client(cluster: &Path, node: u32) -> Result<brine_client::Client, NodeError> {
    let file = read_file(cluster)?;
    Ok(brine_client::Client::single(node, file.address(node)?)?)
}

fn show(values: &[Value]) -> String {
    let shown: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", shown.join(", "))
}

pub async fn call(args: &CallArgs) -> Result<(), NodeError> {
    let client = node_client(&args.cluster, args.node)?;
    let values: Vec<Value> = args.args.iter().map(|a| parse_arg(a)).collect();
    let called = client.call(&args.procedure, values).await?;
    println!(
        "ok {} ({} attempt{})",
        show(&called.values),
        called.attempts,
        if called.attempts == 1 { "" } else { "s" }
    );
    Ok(())
}

/// `brine sql`.
#[derive(Args, Debug)]
pub struct SqlArgs {
    /// The cluster file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// The node that coordinates the transaction.
    #[arg(long, default_value_t = 0)]
    pub node: u32,
    /// Parameters ($1, $2, ...) shared by every statement: integers,
    /// decimals (with a '.'), or text.
    #[arg(long = "param", value_name = "VALUE")]
    pub params: Vec<String>,
    /// Abort at the end instead of committing (to look without changing).
    #[arg(long)]
    pub abort: bool,
    /// The statements, run in order in one interactive transaction.
    #[arg(required = true)]
    pub statements: Vec<String>,
}

/// The placeholders of `sql` (`$1`, `$x`), each once, in order of first
/// appearance (the order the engine binds them in), outside quoted text.
fn placeholders(sql: &str) -> Vec<&str> {
    let bytes = sql.as_bytes();
    let mut out: Vec<&str> = Vec::new();
    let (mut i, mut quoted) = (0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => quoted = !quoted,
            b'$' if !quoted => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                {
                    end += 1;
                }
                let name = &sql[start..end];
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The arguments of `sql` from `--param`s: `$N` is the N-th, wherever and
/// however often it appears.
fn bind_numbered(sql: &str, params: &[Value]) -> Result<Vec<Value>, String> {
    placeholders(sql)
        .into_iter()
        .map(|name| {
            let n: usize = name.parse().map_err(|_| {
                format!("`${name}`: brine sql binds numbered parameters ($1, $2, ...)")
            })?;
            n.checked_sub(1)
                .and_then(|i| params.get(i))
                .cloned()
                .ok_or_else(|| format!("`${n}` but {} --param given", params.len()))
        })
        .collect()
}

pub async fn sql(args: &SqlArgs) -> Result<(), NodeError> {
    let client = node_client(&args.cluster, args.node)?;
    let params: Vec<Value> = args.params.iter().map(|a| parse_arg(a)).collect();
    let mut txn = client.begin().await?;
    for stmt in &args.statements {
        let bound = match bind_numbered(stmt, &params) {
            Ok(b) => b,
            Err(e) => {
                let _ = txn.abort().await;
                return Err(NodeError::Config(format!(
                    "{stmt}: {e} (transaction aborted)"
                )));
            }
        };
        match txn.execute(stmt, bound).await {
            Ok(r) => {
                if r.columns.is_empty() {
                    println!("{stmt}\n  {} row(s) affected", r.affected);
                } else {
                    println!("{stmt}\n  {}", r.columns.join(" | "));
                    for row in &r.rows {
                        println!("  {}", show(row));
                    }
                }
            }
            Err(e) => {
                let _ = txn.abort().await;
                return Err(NodeError::Config(format!(
                    "{stmt}: {e} (transaction aborted)"
                )));
            }
        }
    }
    if args.abort {
        txn.abort().await?;
        println!("aborted");
    } else {
        txn.commit().await?;
        println!("committed");
    }
    Ok(())
}

/// `brine load`.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The cluster file; its workload's data is generated here and loaded.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
}

/// Loads the cluster file's workload data (as `brine bench` would before a
/// run), from this process.
pub async fn load(args: &LoadArgs) -> Result<(), NodeError> {
    let file = read_file(&args.cluster)?;
    let workload = workload_of(&file)?;
    let remote = brine_cluster::remote::RemoteCluster {
        addresses: file.nodes.iter().map(|n| n.address.clone()).collect(),
        calls_at_nodes: false,
    };
    let cluster = remote
        .connect(cluster_config(&file)?, workload.application())
        .map_err(|source| NodeError::Engine {
            context: "joining the cluster".into(),
            source,
        })?;
    let started = std::time::Instant::now();
    workload
        .load(&cluster)
        .await
        .map_err(|e| NodeError::Config(format!("loading: {e}")))?;
    println!(
        "loaded workload {} {:?} in {:.1} s",
        file.workload,
        file.workload_args,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `brine status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The cluster file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
}

pub async fn status(args: &StatusArgs) -> Result<(), NodeError> {
    let file = read_file(&args.cluster)?;
    println!(
        "cluster: {} nodes x {} partitions, workload {}, protocol {}, {}",
        file.nodes.len(),
        file.partitions_per_node,
        file.workload,
        file.protocol,
        file.isolation
    );
    println!("node  address               state  commits  lock waits  sessions  partition: rows / active txns / waiting statements");
    let mut down = 0;
    let client = brine_client::Client::new(&file)?;
    let mut logs: std::collections::BTreeMap<_, Vec<(u32, ReplicaStatus)>> = Default::default();
    for (id, answer) in client.status().await {
        let address = file.address(id).unwrap_or("?");
        match answer {
            Ok(s) => {
                for r in &s.replicas {
                    logs.entry(r.log).or_default().push((id, r.clone()));
                }
                let parts: Vec<String> = s
                    .partitions
                    .iter()
                    .map(|(p, st)| {
                        format!(
                            "p{p}: {} / {} / {}",
                            st.rows_per_table.iter().sum::<usize>(),
                            st.active_txns,
                            st.parked_statements
                        )
                    })
                    .collect();
                println!(
                    "{:<5} {:<21} {:<6} {:>7}  {:>10}  {:>8}  {}",
                    id,
                    address,
                    "up",
                    s.commits,
                    s.lock_waits,
                    s.sessions,
                    parts.join(", ")
                );
            }
            Err(e) => {
                down += 1;
                println!("{id:<5} {address:<21} down   ({e})");
            }
        }
    }
    if !logs.is_empty() {
        crate::replicas::print_status(file.replicas, &logs);
    }
    if down > 0 {
        return Err(NodeError::Config(format!("{down} node(s) down")));
    }
    Ok(())
}

/// The file's isolation level; an unknown name is an error.
fn isolation_of(file: &ClusterFile) -> Result<Isolation, NodeError> {
    file.isolation
        .parse()
        .map_err(|e: brine_core::Error| NodeError::Config(e.to_string()))
}

/// Points a bench run at the cluster of `path`: its topology, protocol and
/// isolation, no simulated link, and calls coordinated in this process.
/// `asked_protocol`: the command named protocols; `asked_isolation`: the
/// isolation it named. They must be the cluster's (a coordinator of
/// another protocol would meet partitions configured for the servers':
/// Salt's deadlock detector under `acid` calls, say).
pub fn use_cluster_file(
    spec: &mut brine_bench::spec::BenchSpec,
    path: &Path,
    workload: &str,
    asked_protocol: bool,
    asked_isolation: Option<Isolation>,
) -> Result<(), brine_bench::BenchError> {
    use brine_bench::BenchError;
    let file = read_file(path).map_err(|e| BenchError::Config(e.to_string()))?;
    let isolation = isolation_of(&file).map_err(|e| BenchError::Config(e.to_string()))?;
    if asked_protocol {
        if let Some(other) = spec.protocols.iter().find(|p| **p != file.protocol) {
            return Err(BenchError::Config(format!(
                "the cluster at {} runs protocol `{}`, not `{other}` (leave out --protocol to use it)",
                path.display(),
                file.protocol
            )));
        }
    }
    if asked_isolation.is_some_and(|i| i != isolation) {
        return Err(BenchError::Config(format!(
            "the cluster at {} runs {isolation} (leave out --isolation to use it)",
            path.display()
        )));
    }
    let grouping = grouping_of(&file.protocol, file.grouping.as_deref())
        .map_err(|e| BenchError::Config(e.to_string()))?;
    if let Some(asked) = &spec.cluster.grouping {
        if grouping.as_ref().map(|g| g.to_string()) != Some(asked.to_string()) {
            return Err(BenchError::Config(format!(
                "the cluster at {} runs grouping `{}`, not `{asked}` (leave out --grouping to \
                 use it)",
                path.display(),
                file.grouping.as_deref().unwrap_or("(none)")
            )));
        }
    }
    spec.cluster.grouping = grouping;
    spec.protocols = vec![file.protocol.clone()];
    spec.cluster.protocol = file.protocol.clone();
    spec.cluster.isolation = isolation;
    spec.cluster.services = file.services.clone();
    if file.workload != workload {
        return Err(BenchError::Config(format!(
            "the cluster at {} runs workload `{}`, not `{workload}`",
            path.display(),
            file.workload
        )));
    }
    if spec.cluster.history.is_some()
        || spec.cluster.durability.mode != brine_cluster::DurabilityMode::None
    {
        return Err(BenchError::Config(
            "--cluster runs record no history and use the servers' durability".into(),
        ));
    }
    spec.cluster.nodes = file.nodes.len() as u32;
    spec.cluster.partitions_per_node = file.partitions_per_node;
    // Replicated logs: partitions move with their logs' leaders, and this
    // process's messages follow them.
    spec.cluster.durability.replicas = file.replicas;
    spec.cluster.link.delay_us = 0;
    spec.cluster.link.jitter_us = 0;
    spec.remote = Some(brine_bench::spec::Remote {
        cluster: brine_cluster::remote::RemoteCluster {
            addresses: file.nodes.iter().map(|n| n.address.clone()).collect(),
            calls_at_nodes: false,
        },
        load: brine_bench::spec::LoadPolicy::default(),
        durability: match file.durability.as_str() {
            "wal" => brine_cluster::DurabilityMode::Wal,
            _ => brine_cluster::DurabilityMode::None,
        },
    });
    spec.validate()
}

/// A restarted node that records its history settles the commits its
/// earlier runs left of unknown outcome (their files, beside this run's
/// `path`) from its decision log (`Cluster::settle_earlier_history`).
async fn settle_earlier_history(
    cluster: &Cluster,
    file: &ClusterFile,
    me: u32,
    path: &Path,
) -> Result<(), NodeError> {
    let earlier = file.earlier_history_files(me, path).map_err(|e| {
        NodeError::Config(format!("listing node {me}'s earlier history files: {e}"))
    })?;
    if earlier.is_empty() {
        return Ok(());
    }
    let cluster = cluster.clone();
    let settled = tokio::task::spawn_blocking(move || cluster.settle_earlier_history(&earlier))
        .await
        .map_err(|e| NodeError::Config(format!("settling the earlier history: {e}")))?
        .map_err(|source| NodeError::Engine {
            context: format!("settling node {me}'s earlier history"),
            source,
        })?;
    if settled > 0 {
        tracing::info!(settled, "commits of earlier runs left of unknown outcome, settled in the history from the decision log");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_bind_by_their_number() {
        let p = [Value::Int(10), Value::Int(20), Value::str("x")];
        // `$2` alone gets the second; `$1` is not `$10`'s prefix.
        assert_eq!(
            bind_numbered("SELECT a FROM t WHERE id = $2", &p),
            Ok(vec![Value::Int(20)])
        );
        assert_eq!(
            bind_numbered("UPDATE t SET a = $3 WHERE id = $1 OR id = $1", &p),
            Ok(vec![Value::str("x"), Value::Int(10)])
        );
        assert!(bind_numbered("SELECT a FROM t WHERE id = $10", &p)
            .is_err_and(|e| e.contains("$10") && e.contains("3 --param")));
        // Inside quotes a `$` is text.
        assert_eq!(
            bind_numbered("SELECT a FROM t WHERE s = '$1'", &p),
            Ok(vec![])
        );
        assert!(bind_numbered("SELECT a FROM t WHERE id = $id", &p).is_err());
    }
}
