//! `brine cluster up`: a cluster of `brine server` processes on loopback,
//! its cluster file, and its processes kept running (`supervise.rs`)
//! until the user stops them (moved out of `node.rs`, which serves one
//! node).
//!
//! Durable by default: every node keeps a write-ahead log under
//! DIR/data/node-<n>, so a node that exits is restarted from it and a
//! cluster started again on the same DIR finds its data.

use std::path::PathBuf;

use clap::Args;

use crate::node::{application, ClusterFile, NodeEntry, NodeError};
use crate::supervise::{Process, Supervisor};

/// Node n of `brine cluster up` serves metrics on port + 100 + n.
const METRICS_PORT_OFFSET: u32 = 100;
/// ... and PostgreSQL's protocol on port + 200 + n.
const PG_PORT_OFFSET: u32 = 200;

/// `brine cluster up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of server processes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Directory for the generated cluster file and the nodes' logs.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// First port; node n listens on 127.0.0.1:(port + n), serves
    /// metrics on 127.0.0.1:(port + 100 + n) and PostgreSQL's protocol on
    /// 127.0.0.1:(port + 200 + n).
    #[arg(long, default_value_t = 7400)]
    pub port: u16,
    /// The application: a `brine bench` workload name.
    #[arg(long, default_value = "bank", conflicts_with = "app")]
    pub workload: String,
    /// The application from a file (docs/apps.md) instead of a built-in
    /// workload: every node loads it.
    #[arg(long, value_name = "FILE")]
    pub app: Option<PathBuf>,
    /// Its options, as one string (e.g. "--warehouses 2").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub workload_args: String,
    #[arg(long, default_value = "acid")]
    pub protocol: String,
    #[arg(long, default_value = "serializable")]
    pub isolation: String,
    #[arg(long, default_value_t = 1)]
    pub partitions_per_node: u32,
    /// How lock waits that could deadlock end: wait-die, detect or
    /// timeout (the cluster file's `deadlock`; default: the protocol's).
    #[arg(long)]
    pub deadlock: Option<String>,
    /// Callas: the grouping (as `brine bench --grouping` takes it, e.g.
    /// "orders:rp=new_order,payment"); the cluster file's `grouping`.
    #[arg(long, value_name = "SPEC")]
    pub grouping: Option<String>,
    /// `wal`: write-ahead logs and checkpoints under DIR/data/node-<n>,
    /// recovered when a node restarts (and when the cluster is started
    /// again on the same DIR); `none`: in memory, a node that restarts
    /// comes back empty. [default: wal]
    #[arg(long, value_name = "MODE")]
    pub durability: Option<String>,
    /// With `wal`: copies of every log on this many nodes (the log's own
    /// and the next ones); a commit is durable once a majority has it, and
    /// a partition fails over when its node dies (docs/replication.md).
    /// [default: 3 for a durable `acid`, `salt` or `callas` cluster of 3
    /// nodes or more, else 1]
    #[arg(long)]
    pub replicas: Option<u32>,
}

/// The durability of a cluster started without `--durability`.
const DEFAULT_DURABILITY: &str = "wal";

/// `path` made absolute (the nodes run in another directory), as text.
fn absolute(path: &std::path::Path) -> Result<String, NodeError> {
    let abs = std::path::absolute(path).map_err(|source| NodeError::Io {
        context: format!("resolving {}", path.display()),
        source,
    })?;
    abs.to_str()
        .map(String::from)
        .ok_or_else(|| NodeError::Config(format!("{} is not UTF-8", abs.display())))
}

/// Writes the cluster file, starts the nodes, stops them on Ctrl-C/SIGTERM.
pub async fn up(args: &UpArgs) -> Result<(), NodeError> {
    if args.nodes == 0 || args.nodes > 64 {
        return Err(NodeError::Config("--nodes must be between 1 and 64".into()));
    }
    let io = |context: String| move |source| NodeError::Io { context, source };
    let durability = args
        .durability
        .clone()
        .unwrap_or_else(|| DEFAULT_DURABILITY.to_string());
    let durable = durability == "wal";
    // A protocol that cannot run across processes is refused here, before
    // any process starts (not by each node, after "up").
    let grouping = crate::node::grouping_of(&args.protocol, args.grouping.as_deref())?;
    let protocol = brine_cluster::protocols::build(
        &args.protocol,
        &brine_cluster::ClusterConfig {
            protocol: args.protocol.clone(),
            grouping,
            ..Default::default()
        },
        &[],
    );
    if let Ok(p) = &protocol {
        if let Err(e) = p.check_deployment(true, durable) {
            // Durable only because nobody said otherwise, and the protocol
            // would run in memory: say so, rather than fall back silently.
            let in_memory_runs = p.check_deployment(true, false).is_ok();
            return Err(NodeError::Config(
                if durable && args.durability.is_none() && in_memory_runs {
                    format!(
                        "protocol `{}` does not yet run durably across processes, and `brine \
                         cluster up` is durable by default (--durability {DEFAULT_DURABILITY}): \
                         {e}. `--durability none` runs it in memory (a node that restarts comes \
                         back empty)",
                        args.protocol
                    )
                } else {
                    e.to_string()
                },
            ));
        }
    }
    std::fs::create_dir_all(&args.dir).map_err(io(format!("creating {}", args.dir.display())))?;
    // The protocol's own services (Mediator's TSO) get processes of their
    // own, on the ports after the nodes'.
    let own: &[&str] = protocol.map(|p| p.own_processes()).unwrap_or(&[]);
    let services: std::collections::BTreeMap<String, String> = own
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let port = u32::from(args.port) + args.nodes + i as u32;
            (name.to_string(), format!("127.0.0.1:{port}"))
        })
        .collect();
    let file = ClusterFile {
        services: services.clone(),
        workload: match &args.app {
            Some(_) => "app".into(),
            None => args.workload.clone(),
        },
        workload_args: match &args.app {
            Some(app) => vec!["--app".into(), absolute(app)?],
            None => args
                .workload_args
                .split_whitespace()
                .map(String::from)
                .collect(),
        },
        protocol: args.protocol.clone(),
        isolation: args.isolation.clone(),
        partitions_per_node: args.partitions_per_node,
        deadlock: args.deadlock.clone(),
        grouping: args.grouping.clone(),
        durability: durability.clone(),
        data_dir: durable.then(|| "data".to_string()),
        history: None,
        replicas: args.replicas.unwrap_or(
            // Replicated logs across processes run `acid`, `salt` and
            // `callas` (Mediator's and Elia's own logs are not replicated).
            if durable
                && ["acid", "salt", "callas"].contains(&args.protocol.as_str())
                && args.nodes >= 3
            {
                3
            } else {
                1
            },
        ),
        nodes: (0..args.nodes)
            .map(|id| NodeEntry {
                id,
                address: format!("127.0.0.1:{}", u32::from(args.port) + id),
                metrics: Some(format!(
                    "127.0.0.1:{}",
                    u32::from(args.port) + METRICS_PORT_OFFSET + id
                )),
                pg_address: Some(format!(
                    "127.0.0.1:{}",
                    u32::from(args.port) + PG_PORT_OFFSET + id
                )),
            })
            .collect(),
    };
    file.validate().map_err(NodeError::Config)?;
    // Fail now, not in every child, on a bad workload.
    application(&file)?;
    let path = args.dir.join("cluster.toml");
    let text = file.to_toml()?;
    std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
    let exe = std::env::current_exe().map_err(io("finding the brine executable".into()))?;
    // Each child runs `brine server --config FILE` with its role, its
    // output in its log, its pid in DIR/<name>.pid.
    let mut processes = Vec::new();
    for n in 0..args.nodes {
        processes.push(Process {
            name: format!("node {n}"),
            role: vec!["--node".into(), n.to_string()],
            log: args.dir.join(format!("node-{n}.log")),
            pid_file: args.dir.join(format!("node-{n}.pid")),
            restart_warning: (!durable).then(|| {
                format!(
                    "node {n} keeps no log (--durability none): it restarts empty, and the rows \
                     of its partitions are lost"
                )
            }),
        });
    }
    for name in services.keys() {
        processes.push(Process {
            name: format!("service {name}"),
            role: vec!["--service".into(), name.clone()],
            log: args.dir.join(format!("service-{name}.log")),
            pid_file: args.dir.join(format!("service-{name}.pid")),
            // Durable, Mediator's TSO keeps its clock's lease in the data
            // directory and settles with the nodes when it restarts.
            restart_warning: (!durable).then(|| {
                format!("service {name} keeps its state in memory only: it restarts without it")
            }),
        });
    }
    let supervisor = Supervisor::start(exe, path.clone(), processes)?;
    println!(
        "cluster of {} nodes{} up: {} (logs in {}); Ctrl-C stops it",
        args.nodes,
        if services.is_empty() {
            String::new()
        } else {
            format!(
                " and {} service process(es) ({})",
                services.len(),
                services.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        },
        path.display(),
        args.dir.display()
    );
    for n in &file.nodes {
        if let Some(pg) = &n.pg_address {
            let (host, port) = pg.rsplit_once(':').unwrap_or((pg.as_str(), "5432"));
            println!(
                "node {}: PostgreSQL protocol on {pg} (psql -h {host} -p {port})",
                n.id
            );
        }
    }
    if durable {
        println!(
            "durability wal: each node's log in {}; a node that exits is restarted from it",
            args.dir.join("data").join("node-<n>").display()
        );
        if file.replicas > 1 {
            println!(
                "replicas {}: every log on {} nodes; a node's partitions fail over to another                  while it is down (brine status shows each log's leader and lag)",
                file.replicas, file.replicas
            );
        }
    } else {
        println!("durability none: in memory; a node that exits is restarted empty");
    }
    supervisor.run().await?;
    println!("cluster stopped");
    Ok(())
}
