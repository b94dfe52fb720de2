//! The cluster file: what every node and client of one cluster agrees on
//! (TOML; the reference is in docs/operations.md).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ClientError;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The application every node runs: a `brine bench` workload name.
    pub workload: String,
    /// Its `brine bench` options (e.g. ["--warehouses", "2"]).
    #[serde(default)]
    pub workload_args: Vec<String>,
    /// Concurrency control of calls coordinated by the nodes.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// `serializable` or `read-committed`.
    #[serde(default = "default_isolation")]
    pub isolation: String,
    #[serde(default = "default_partitions_per_node")]
    pub partitions_per_node: u32,
    /// How lock waits that could deadlock end: `wait-die` (a younger
    /// transaction that would wait for an older one aborts), `detect`
    /// (waits; a cycle of waits within one node's partitions aborts its
    /// youngest, a cycle through several nodes ends by the lock wait
    /// timeout) or `timeout` (waits end by the timeout only). Unset: the
    /// protocol's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlock: Option<String>,
    /// Callas (`protocol = "callas"`): which procedures run in which group
    /// under which mechanism, as `brine bench --grouping` takes it (e.g.
    /// `orders:rp=new_order,payment`). Unset: every procedure in one `2pl`
    /// group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grouping: Option<String>,
    /// `none` (in memory) or `wal` (write-ahead log, checkpoints,
    /// recovery at start).
    #[serde(default = "default_durability")]
    pub durability: String,
    /// With `wal`: node n keeps its logs and checkpoints in
    /// `data_dir/node-<n>` (relative paths are relative to the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// Record the history of the transactions the nodes coordinate (their
    /// reads and writes with versions, for `brine check`): each node
    /// process writes `history/node-<n>-<start>.jsonl` under this
    /// directory (relative paths are relative to the file); `brine check
    /// DIR` checks them as one history. Protocols `acid`, `salt` and
    /// `callas` (docs/history-format.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
    /// With `wal`: copies of every log (each partition's, each node's
    /// decisions) on this many nodes, the log's own and the next ones; a
    /// commit is durable once a majority of them has it
    /// (docs/replication.md). 1: the log's node alone.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// Addresses of the protocol's services that run in processes of
    /// their own (`brine server --service NAME`), by name: Mediator's
    /// `tso = "host:port"`. Without one, node 0's process hosts it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub services: std::collections::BTreeMap<String, String>,
    /// One entry per node, ids 0..n in order.
    pub nodes: Vec<NodeEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    pub id: u32,
    /// Where the node listens for peers and clients (host:port).
    pub address: String,
    /// Where it serves Prometheus metrics (`GET /metrics`); none if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Where it serves PostgreSQL's wire protocol (psql, drivers; see
    /// docs/pgwire.md); none if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg_address: Option<String>,
}

fn default_protocol() -> String {
    "acid".into()
}
fn default_isolation() -> String {
    "serializable".into()
}
fn default_partitions_per_node() -> u32 {
    1
}
fn default_replicas() -> u32 {
    1
}
fn default_durability() -> String {
    "none".into()
}

impl ClusterFile {
    /// Reads and validates a cluster file; a relative `data_dir` becomes
    /// relative to the file's directory.
    pub fn read(path: &Path) -> Result<ClusterFile, ClientError> {
        let err = |reason: String| ClientError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut file: ClusterFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        file.validate().map_err(err)?;
        if let Some(base) = path.parent() {
            for dir in [&mut file.data_dir, &mut file.history]
                .into_iter()
                .flatten()
            {
                if Path::new(dir.as_str()).is_relative() {
                    *dir = base.join(&*dir).display().to_string();
                }
            }
        }
        Ok(file)
    }

    /// Where node `node` keeps its data (with `wal`).
    pub fn node_data_dir(&self, node: u32) -> Option<std::path::PathBuf> {
        self.data_dir
            .as_ref()
            .map(|d| Path::new(d).join(format!("node-{node}")))
    }

    /// Where node `node` records its history (`history`): a file of its
    /// own per start, named by the time and process (a restarted node's
    /// records follow the earlier run's, in a file beside it).
    pub fn node_history_file(&self, node: u32) -> Option<std::path::PathBuf> {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.history.as_ref().map(|d| {
            Path::new(d).join(format!(
                "node-{node}-{}-{}.jsonl",
                since_epoch.as_millis(),
                std::process::id()
            ))
        })
    }

    /// The history files earlier starts of node `node` wrote (named as
    /// [`ClusterFile::node_history_file`] names them), in the order they
    /// were written, `current` (this start's) left out.
    pub fn earlier_history_files(
        &self,
        node: u32,
        current: &Path,
    ) -> std::io::Result<Vec<std::path::PathBuf>> {
        let Some(dir) = &self.history else {
            return Ok(Vec::new());
        };
        let prefix = format!("node-{node}-");
        let mut earlier = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let f = entry?.path();
            let named = f
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jsonl"));
            if named && f != current {
                earlier.push(f);
            }
        }
        // The start time in each name orders them.
        earlier.sort();
        Ok(earlier)
    }

    /// Where service `name` (a protocol's process of its own: Mediator's
    /// TSO) keeps its state, under `data_dir`.
    pub fn service_data_dir(&self, name: &str) -> Option<std::path::PathBuf> {
        self.data_dir
            .as_ref()
            .map(|d| Path::new(d).join(format!("service-{name}")))
    }

    /// The file as TOML text.
    pub fn to_toml(&self) -> Result<String, ClientError> {
        toml::to_string(self)
            .map_err(|e| ClientError::Protocol(format!("writing a cluster file: {e}")))
    }

    /// Checks what a node or client relies on; the reason names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes.is_empty() {
            return Err("no [[nodes]]".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id as usize != i {
                return Err(format!(
                    "nodes must be listed with ids 0, 1, 2, ... in order; entry {i} has id {}",
                    n.id
                ));
            }
        }
        match (self.durability.as_str(), &self.data_dir) {
            ("none", _) | ("wal", Some(_)) => {}
            ("wal", None) => return Err("durability `wal` needs a data_dir".into()),
            (o, _) => return Err(format!("durability `{o}` (expected none or wal)")),
        }
        if self.partitions_per_node == 0 {
            return Err("partitions_per_node must be at least 1".into());
        }
        if self.replicas == 0 || self.replicas as usize > self.nodes.len() {
            return Err(format!(
                "replicas = {}: between 1 and the number of nodes ({}), each replica on a node of its own",
                self.replicas,
                self.nodes.len()
            ));
        }
        if self.replicas > 1 && self.durability != "wal" {
            return Err(format!(
                "replicas = {} copies the write-ahead log: it needs durability = \"wal\"",
                self.replicas
            ));
        }
        if self.history.is_some() && !matches!(self.protocol.as_str(), "acid" | "salt" | "callas") {
            return Err(format!(
                "history: the nodes record the history of protocols `acid`, `salt` and `callas`, not `{}` (record one process with `brine bench --history`)",
                self.protocol
            ));
        }
        if let Some(d) = &self.deadlock {
            if brine_cluster::DeadlockPolicy::from_name(d).is_none() {
                return Err(format!(
                    "deadlock `{d}` (expected wait-die, detect or timeout)"
                ));
            }
        }
        if !matches!(self.isolation.as_str(), "serializable" | "read-committed") {
            return Err(format!(
                "isolation `{}` (expected serializable or read-committed)",
                self.isolation
            ));
        }
        Ok(())
    }

    /// The address of node `node`.
    pub fn address(&self, node: u32) -> Result<&str, ClientError> {
        self.nodes
            .get(node as usize)
            .map(|n| n.address.as_str())
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "node {node} is not in the cluster file ({} nodes)",
                    self.nodes.len()
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's earlier history files are its own (not a node whose id
    /// begins with its own), in the order they were written, this
    /// start's left out.
    #[test]
    fn a_node_finds_its_earlier_history_files() {
        let dir = std::env::temp_dir().join(format!("brine-history-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for name in [
            "node-1-200-7.jsonl",
            "node-1-100-5.jsonl",
            "node-1-300-9.jsonl",
            "node-10-150-6.jsonl",
            "node-1-notes.txt",
        ] {
            std::fs::write(dir.join(name), "").expect("written");
        }
        let text = format!(
            "workload = \"bank\"\nhistory = \"{}\"\n[[nodes]]\nid = 0\naddress = \"127.0.0.1:1\"\n[[nodes]]\nid = 1\naddress = \"127.0.0.1:2\"\n",
            dir.display()
        );
        let file: ClusterFile = toml::from_str(&text).expect("a cluster file");
        let current = dir.join("node-1-300-9.jsonl");
        let earlier = file.earlier_history_files(1, &current).expect("listed");
        let names: Vec<_> = earlier
            .iter()
            .filter_map(|f| f.file_name()?.to_str().map(str::to_owned))
            .collect();
        assert_eq!(names, ["node-1-100-5.jsonl", "node-1-200-7.jsonl"]);
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
