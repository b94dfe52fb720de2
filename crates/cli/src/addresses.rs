//! A node follows the cluster file's addresses while it runs: a node lost
//! for good and replaced by a machine at another address
//! (docs/replication.md, "A node lost for good") is reached there once
//! the file names it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use brine_client::ClusterFile;
use brine_cluster::remote::PeerClient;

/// How often a node reads the cluster file again.
const EVERY: Duration = Duration::from_secs(1);

/// Reads the cluster file at `path` every second for as long as the node
/// runs; where it names another address for a peer of node `me`, each of
/// `clients` of that peer goes there. A file that does not read (being
/// written, say) is read again at the next turn.
pub(crate) fn follow(path: PathBuf, me: u32, clients: Vec<(u32, Arc<PeerClient>)>) {
    let mut known: HashMap<u32, String> = clients.iter().map(|(n, c)| (*n, c.addr())).collect();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let Ok(file) = ClusterFile::read(&path) else {
                continue;
            };
            for node in file.nodes.iter().filter(|n| n.id != me) {
                if known.get(&node.id).is_none_or(|a| *a == node.address) {
                    continue;
                }
                tracing::warn!(
                    peer = node.id,
                    address = %node.address,
                    "the cluster file moves node {} to {}",
                    node.id,
                    node.address
                );
                for (_, c) in clients.iter().filter(|(n, _)| *n == node.id) {
                    c.set_addr(&node.address);
                }
                known.insert(node.id, node.address.clone());
            }
        }
    });
}
