//! What the process tests share: a cluster of `brine server` processes
//! on loopback ports, started from a cluster file and killed when the test
//! ends; the `brine` command; a call's outcome as its client saw it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BRINE: &str = env!("CARGO_BIN_EXE_brine");

/// Server processes that are killed when the test ends, however it ends.
pub struct Nodes {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub children: Vec<Child>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A base port such that `base + o` is free for every offset `o`. Drawn
/// below Linux's ephemeral range (32768 and up), where the thousands of
/// client connections other tests open at the same time cannot take them.
pub fn free_port_block(offsets: &[u16]) -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..1000 {
        let base: u16 = rng.gen_range(20_000..32_000 - 200);
        // Held together, so the check is of the whole block at once.
        let held: Vec<TcpListener> = offsets
            .iter()
            .filter_map(|o| TcpListener::bind(("127.0.0.1", base + o)).ok())
            .collect();
        if held.len() == offsets.len() {
            return base;
        }
    }
    panic!("no free block of ports below 32000");
}

pub fn free_ports(n: usize) -> Vec<u16> {
    let offsets: Vec<u16> = (0..n as u16).collect();
    let base = free_port_block(&offsets);
    offsets.iter().map(|o| base + o).collect()
}

pub fn brine(args: &[&str]) -> Output {
    Command::new(BRINE)
        .args(args)
        .output()
        .expect("running brine")
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes a cluster file for `nodes` nodes and starts every server.
pub fn start(nodes: usize, workload: &str, workload_args: &[&str]) -> Nodes {
    start_with(nodes, workload, workload_args, "")
}

/// `start`, with extra top-level cluster-file lines.
pub fn start_with(nodes: usize, workload: &str, workload_args: &[&str], extra: &str) -> Nodes {
    start_as("acid", nodes, workload, workload_args, extra)
}

/// `start_with`, the servers running `protocol`.
pub fn start_as(
    protocol: &str,
    nodes: usize,
    workload: &str,
    workload_args: &[&str],
    extra: &str,
) -> Nodes {
    let dir = tempfile::tempdir().expect("temp dir");
    let ports = free_ports(nodes);
    let args: Vec<String> = workload_args.iter().map(|a| format!("{a:?}")).collect();
    let mut toml = format!(
        "workload = \"{workload}\"\nworkload_args = [{}]\nprotocol = \"{protocol}\"\nisolation = \"serializable\"\npartitions_per_node = 1\n{extra}",
        args.join(", ")
    );
    for (i, p) in ports.iter().enumerate() {
        toml += &format!("\n[[nodes]]\nid = {i}\naddress = \"127.0.0.1:{p}\"\n");
    }
    let config = dir.path().join("cluster.toml");
    std::fs::write(&config, toml).expect("writing the cluster file");
    let mut cluster = Nodes {
        config,
        children: Vec::new(),
        dir,
    };
    for i in 0..nodes {
        let child = spawn_server(&cluster.config, cluster.dir.path(), i);
        cluster.children.push(child);
    }
    wait_up(&cluster.config);
    cluster
}

pub fn spawn_server(config: &Path, dir: &Path, node: usize) -> Child {
    let log = std::fs::File::create(dir.join(format!("node-{node}.log"))).expect("log file");
    Command::new(BRINE)
        .env("RUST_LOG", "brine_cluster=info,brine=info")
        // Replicated logs: images (and large batches) cross in parts.
        .env("BRINE_RAFT_PART_BYTES", "16384")
        .args(["server", "--config"])
        .arg(config)
        .args(["--node", &node.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting brine server")
}

/// Waits until `brine status` sees every node up.
pub fn wait_up(config: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = brine(&["status", "--cluster", config.to_str().expect("utf-8 path")]);
        if o.status.success() {
            return;
        }
        if Instant::now() >= deadline {
            if let Some(dir) = config.parent() {
                keep_dir_for_study(dir);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not come up:\n{}",
            text(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Three durable server processes running `protocol` and `workload`, its
/// data loaded.
pub fn start_loaded(protocol: &str, workload: &str, workload_args: &[&str]) -> Nodes {
    start_loaded_with(protocol, workload, workload_args, "")
}

/// `start_loaded`, with extra top-level cluster-file lines.
pub fn start_loaded_with(
    protocol: &str,
    workload: &str,
    workload_args: &[&str],
    extra: &str,
) -> Nodes {
    let durable = format!("durability = \"wal\"\ndata_dir = \"data\"\n{extra}");
    let cluster = start_as(protocol, 3, workload, workload_args, &durable);
    let load = brine(&["load", "--cluster", path(&cluster.config)]);
    assert!(load.status.success(), "{}", text(&load));
    cluster
}

/// The runtime of a test's own clients.
pub fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A call's outcome as its client saw it.
pub enum Seen {
    Committed,
    /// Why (shown if the data does not add up).
    Aborted(String),
    /// The connection or the commit's answer was lost: it may have run.
    Unknown,
}

/// What a call's answer says of its outcome.
pub fn seen(r: &Result<brine_client::Called, brine_client::ClientError>) -> Seen {
    use brine_client::ClientError;
    match r {
        Ok(_) => Seen::Committed,
        Err(ClientError::Net { .. }) => Seen::Unknown,
        Err(ClientError::Engine(brine_core::Error::Transport(m)))
            if m.contains("outcome unknown") =>
        {
            Seen::Unknown
        }
        Err(e) => Seen::Aborted(e.to_string()),
    }
}

/// A running `brine cluster up`: its directory (cluster file, logs, pid
/// files) and its output in DIR/up.out. Dropped, it is stopped with
/// SIGTERM, and any node it leaves behind is killed.
pub struct ClusterUp {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    /// Node n listens on port + n, its metrics on port + 100 + n.
    pub port: u16,
    pub up: Child,
}

/// Starts `brine cluster up --nodes N --dir DIR --port P ARGS` and waits
/// until `brine status` sees every node up.
pub fn cluster_up(nodes: u16, args: &[&str]) -> ClusterUp {
    let dir = tempfile::tempdir().expect("temp dir");
    let offsets: Vec<u16> = [0, 100, 200]
        .iter()
        .flat_map(|o| (0..nodes).map(move |n| o + n))
        .collect();
    let port = free_port_block(&offsets);
    let out = std::fs::File::create(dir.path().join("up.out")).expect("up.out");
    let err = out.try_clone().expect("up.out");
    let up = Command::new(BRINE)
        .args(["cluster", "up", "--nodes", &nodes.to_string(), "--dir"])
        .arg(dir.path())
        .args(["--port", &port.to_string()])
        .args(args)
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("starting brine cluster up");
    let config = dir.path().join("cluster.toml");
    let cluster = ClusterUp {
        dir,
        config,
        port,
        up,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.config.exists() {
        assert!(
            Instant::now() < deadline,
            "no cluster file written:\n{}",
            cluster.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_up(&cluster.config);
    cluster
}

impl ClusterUp {
    /// What `cluster up` printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("up.out")).unwrap_or_default()
    }

    /// The pid in node `n`'s pid file, if it holds one.
    pub fn node_pid(&self, n: u32) -> Option<u32> {
        std::fs::read_to_string(self.dir.path().join(format!("node-{n}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn node_log(&self, n: u32) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node-{n}.log"))).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (up to 30 s) for `cluster up` to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child with SIGTERM.
        unsafe {
            libc::kill(self.up.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.up.try_wait().expect("waiting") {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "cluster up did not stop:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ClusterUp {
    fn drop(&mut self) {
        if self.up.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on our own child with SIGTERM.
            unsafe {
                libc::kill(self.up.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while self.up.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.up.kill();
            let _ = self.up.wait();
        }
        // Whatever it could not stop (its nodes run in a process group of
        // their own, so they outlive a killed `cluster up`).
        for n in 0..64 {
            if let Some(pid) = self.node_pid(n) {
                // SAFETY: kill(2) with SIGKILL on a node this test started.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
}

/// The cluster-file line that has every node record the history of the
/// transactions it coordinates (acid), under the cluster's `history/`.
pub const RECORD_HISTORY: &str = "history = \"history\"\n";

/// With `BRINE_KEEP_FAILED=DIR`: copies `cluster`'s directory (its
/// cluster file, data, logs and history) under DIR, for a failure to be
/// studied after the test's temporary directory is gone.
pub fn keep_for_study(cluster: &Nodes) {
    keep_dir_for_study(cluster.dir.path());
}

/// [`keep_for_study`] of a cluster's directory `dir`.
pub fn keep_dir_for_study(dir: &Path) {
    let Ok(to) = std::env::var("BRINE_KEEP_FAILED") else {
        return;
    };
    let to = std::path::Path::new(&to).join(format!("cluster-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&to);
    let copied = Command::new("cp").arg("-r").arg(dir).arg(&to).status();
    eprintln!(
        "the failed cluster's directory kept in {} ({copied:?})",
        to.display()
    );
}

/// Checks the history the nodes of `cluster` recorded ([`RECORD_HISTORY`])
/// at `level` (`serializable`, or `salt` for Salt's BASE transactions), as
/// one history of every node's files; the checker's count of
/// transactions. A violation fails the caller.
pub fn history_holds(cluster: &Nodes, level: &str) -> String {
    let dir = cluster.dir.path().join("history");
    let o = brine(&["check", path(&dir), "--level", level]);
    if !o.status.success() {
        keep_for_study(cluster);
    }
    assert!(
        o.status.success(),
        "the nodes' history does not hold at {level}:\n{}",
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.starts_with("transactions:"))
        .unwrap_or("")
        .to_string()
}
