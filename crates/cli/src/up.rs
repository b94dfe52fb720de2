//! `brine cluster up`: a cluster of `brine server` processes on loopback,
//! its cluster file, and its processes watched until one exits or the
//! user stops them (moved out of `node.rs`, which serves one node).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::node::{application, wait_for_stop, ClusterFile, NodeEntry, NodeError};

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
    /// `none` (in memory) or `wal`: write-ahead logs and checkpoints under
    /// DIR/data/node-<n>, recovered when a node restarts.
    #[arg(long, default_value = "none")]
    pub durability: String,
}

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
    std::fs::create_dir_all(&args.dir).map_err(io(format!("creating {}", args.dir.display())))?;
    // A protocol that cannot run across processes is refused here, before
    // any process starts (not by each node, after "up").
    let protocol = brine_cluster::protocols::build(
        &args.protocol,
        &brine_cluster::ClusterConfig {
            protocol: args.protocol.clone(),
            ..Default::default()
        },
        &[],
    );
    if let Ok(p) = &protocol {
        p.check_deployment(true, args.durability == "wal")
            .map_err(|e| NodeError::Config(e.to_string()))?;
    }
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
        durability: args.durability.clone(),
        data_dir: (args.durability == "wal").then(|| "data".to_string()),
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
    // output in its log.
    let spawn = |role: [String; 2], log_name: String| {
        let log_path = args.dir.join(log_name);
        let log = std::fs::File::create(&log_path)
            .map_err(io(format!("creating {}", log_path.display())))?;
        let err = log
            .try_clone()
            .map_err(io(format!("opening {}", log_path.display())))?;
        tokio::process::Command::new(&exe)
            .arg("server")
            .arg("--config")
            .arg(&path)
            .args(&role)
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("starting {}", role.join(" "))))
    };
    let mut children = Vec::new();
    for n in 0..args.nodes {
        children.push(spawn(
            ["--node".into(), n.to_string()],
            format!("node-{n}.log"),
        )?);
    }
    for name in services.keys() {
        children.push(spawn(
            ["--service".into(), name.clone()],
            format!("service-{name}.log"),
        )?);
    }
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
    // Stop on a signal, or as soon as any node exits on its own.
    let mut exited = None;
    tokio::select! {
        _ = wait_for_stop() => {}
        n = first_exit(&mut children) => { exited = Some(n); }
    }
    for child in &children {
        if let Some(pid) = child.id() {
            terminate(pid);
        }
    }
    for (n, child) in children.iter_mut().enumerate() {
        match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!("node {n} did not stop within 10 s; killing it");
                let _ = child.kill().await;
            }
        }
    }
    match exited {
        Some((n, status)) => {
            let (what, log) = match services.keys().nth(n.saturating_sub(args.nodes as usize)) {
                Some(name) if n >= args.nodes as usize => {
                    (format!("service {name}"), format!("service-{name}.log"))
                }
                _ => (format!("node {n}"), format!("node-{n}.log")),
            };
            Err(NodeError::Config(format!(
                "{what} exited ({status}); see {}",
                args.dir.join(log).display()
            )))
        }
        None => {
            println!("cluster stopped");
            Ok(())
        }
    }
}

async fn first_exit(children: &mut [tokio::process::Child]) -> (usize, String) {
    loop {
        for (n, c) in children.iter_mut().enumerate() {
            if let Ok(Some(status)) = c.try_wait() {
                return (n, status.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn terminate(pid: u32) {
    #[cfg(unix)]
    // SAFETY: kill(2) with a child's pid and SIGTERM has no memory effects.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    #[cfg(not(unix))]
    let _ = pid;
}
