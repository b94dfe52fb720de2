//! What the wire tests share.

use brine_cluster::{ClusterConfig, LinkConfig};

/// Two nodes of two partitions each, no simulated link delay: a statement
/// that does not bind the partitioning column is a broadcast whose
/// results brine merges, and nothing waits on a timer.
pub fn four_partitions() -> ClusterConfig {
    ClusterConfig {
        nodes: 2,
        partitions_per_node: 2,
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    }
}
