//! A node's replicas of the replicated logs (issue 39, `docs/replication.md`):
//! starting them, answering their peers' requests before anything else,
//! their metrics, and `brine status`'s table of them.

use std::path::Path;
use std::sync::Arc;

use brine_client::ClusterFile;
use brine_cluster::remote::{self, WireRequest, WireResponse};
use brine_cluster::replication::{NodeReplicas, ReplicaStatus};
use brine_cluster::ClusterConfig;

use crate::node::NodeError;

/// Starts node `me`'s replicas in its data directory `dir`, once it knows
/// their generation (a new cluster, a restart, or a lost disk).
pub async fn start(
    file: &ClusterFile,
    me: u32,
    dir: &Path,
    addresses: &[String],
    config: &ClusterConfig,
) -> Result<Arc<NodeReplicas>, NodeError> {
    let layout = brine_cluster::replication::Layout {
        nodes: file.nodes.len() as u32,
        partitions_per_node: file.partitions_per_node,
        replicas: file.replicas,
    };
    let engine = |context: String| move |source| NodeError::Engine { context, source };
    let clients: std::collections::HashMap<u32, Arc<remote::PeerClient>> =
        remote::peer_clients(addresses, None)
            .map_err(engine(format!("node {me}'s replicas' peers")))?
            .into_iter()
            .map(|(n, c)| (n.0, c))
            .collect();
    let generation = brine_cluster::replication::generation(me, dir, &clients)
        .await
        .map_err(engine(format!("node {me}'s replicas in {}", dir.display())))?;
    NodeReplicas::start(
        me,
        layout,
        dir,
        config.durability.segment_bytes,
        clients,
        generation,
    )
    .map_err(engine(format!("node {me}'s replicas in {}", dir.display())))
}

/// Each replicated log's group as this node's replica sees it (`n`: the
/// node's label).
pub async fn render_metrics(out: &mut String, n: &str, across: &NodeReplicas) {
    use crate::metrics::gauge;
    let groups = across.status().await;
    let each = |f: fn(&ReplicaStatus) -> u64| {
        groups
            .iter()
            .map(|g| (format!("{n},log=\"{}\"", g.log), f(g)))
            .collect::<Vec<_>>()
    };
    gauge(
        out,
        "brine_replica_term",
        "The group's raft term.",
        &each(|g| g.term),
    );
    gauge(
        out,
        "brine_replica_commit_index",
        "The highest entry committed at a quorum.",
        &each(|g| g.commit),
    );
    gauge(
        out,
        "brine_replica_applied_index",
        "The highest entry this replica applied.",
        &each(|g| g.applied),
    );
    gauge(
        out,
        "brine_replica_leader",
        "1 where this node's replica leads the group.",
        &each(|g| u64::from(g.role == "leader")),
    );
    let mut lag: Vec<(String, u64)> = Vec::new();
    for g in &groups {
        for &(peer, behind) in &g.lag {
            lag.push((format!("{n},log=\"{}\",peer=\"{peer}\"", g.log), behind));
        }
    }
    gauge(
        out,
        "brine_replica_lag_entries",
        "At the leader: entries each other replica lacks.",
        &lag,
    );
}

/// The requests of the replicated logs' groups, which a node answers
/// before anything else (before it has even started its replicas):
/// `None` for any other request.
pub async fn request(
    me: u32,
    replicated: bool,
    has_state: bool,
    replicas: Option<&Arc<NodeReplicas>>,
    req: &WireRequest,
) -> Option<WireResponse> {
    let starting = || {
        WireResponse::Refused(brine_core::Error::Transport(format!(
            "node {me}'s replicas are starting; try again shortly"
        )))
    };
    let none = || {
        WireResponse::Refused(brine_core::Error::Config(format!(
            "node {me} keeps no replicas (the cluster file's replicas = 1)"
        )))
    };
    Some(match (req, replicas) {
        (WireRequest::Raft { msgs }, Some(r)) => WireResponse::Done(r.deliver(msgs.clone())),
        (WireRequest::RaftPart(part), Some(r)) => WireResponse::Done(r.deliver_part(part.clone())),
        (WireRequest::Join { log, id }, Some(r)) => WireResponse::Done(r.join(*log, *id)),
        (WireRequest::Generation { node }, Some(r)) => {
            WireResponse::Generation(r.generation_of(*node).await)
        }
        // A new node knows no group: the cluster is new to it too.
        (WireRequest::Generation { .. }, None) if replicated && !has_state => {
            WireResponse::Generation(None)
        }
        (
            WireRequest::Raft { .. }
            | WireRequest::RaftPart(_)
            | WireRequest::Join { .. }
            | WireRequest::Generation { .. },
            None,
        ) => {
            if replicated {
                starting()
            } else {
                none()
            }
        }
        _ => return None,
    })
}

/// `brine status`'s table of the replicated logs: per log its leader,
/// term and commit index, and each replica's role, applied index and lag.
pub fn print_status(
    replicas: u32,
    logs: &std::collections::BTreeMap<
        brine_cluster::replication::LogName,
        Vec<(u32, ReplicaStatus)>,
    >,
) {
    println!("replicated logs ({replicas} replicas each): log, leader, term, commit; per replica: node role applied (entries behind the leader)");
    for (log, members) in logs {
        let lead = members
            .iter()
            .find(|(_, r)| r.role == "leader")
            .map(|(_, r)| r);
        let leader = members.iter().find_map(|(_, r)| r.leader);
        let (term, commit) = members
            .iter()
            .map(|(_, r)| (r.term, r.commit))
            .max()
            .unwrap_or_default();
        let each: Vec<String> = members
            .iter()
            .map(|(node, r)| {
                let lag = lead
                    .and_then(|l| l.lag.iter().find(|(n, _)| n == node))
                    .map(|(_, n)| format!(" ({n} behind)"))
                    .unwrap_or_default();
                format!("n{node} {} {}{lag}", r.role, r.applied)
            })
            .collect();
        println!(
            "{:<9} leader {:<4} term {:<4} commit {:<8} {}",
            log.to_string(),
            leader.map_or("none".to_string(), |n| n.to_string()),
            term,
            commit,
            each.join(", ")
        );
    }
}
