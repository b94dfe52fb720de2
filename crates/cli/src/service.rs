//! `brine server --service NAME`: a service of the protocol's own (Mediator's
//! TSO) in a process of its own, at the address the cluster file's
//! `[services]` table gives it.

use std::net::SocketAddr;

use brine_client::ClusterFile;
use brine_cluster::remote::{self, WireRequest, WireResponse};
use brine_cluster::Cluster;

use crate::node::{application, cluster_config, wait_for_stop, NodeError};

/// Runs the protocol's service `name` (Mediator's TSO) as a process of
/// its own: it hosts no partition and answers the protocol's requests of
/// the nodes and clients until Ctrl-C or SIGTERM.
pub async fn serve(file: &ClusterFile, name: &str) -> Result<(), NodeError> {
    let addr: SocketAddr = file
        .services
        .get(name)
        .ok_or_else(|| {
            NodeError::Config(format!(
                "the cluster file gives service `{name}` no address ([services] {name} = \"host:port\")"
            ))
        })?
        .parse()
        .map_err(|e| NodeError::Config(format!("address of service {name}: {e}")))?;
    let addresses: Vec<String> = file.nodes.iter().map(|n| n.address.clone()).collect();
    let peers = remote::peer_clients(&addresses, None).map_err(|source| NodeError::Engine {
        context: format!("service {name}'s peers"),
        source,
    })?;
    let mut config = cluster_config(file)?;
    config.hosts_service = Some(name.to_string());
    // A durable cluster's service keeps its state beside the nodes' data
    // (Mediator's TSO: its clock's lease, so a restart never hands out a
    // timestamp twice).
    if file.durability == "wal" {
        if let Some(dir) = file.service_data_dir(name) {
            std::fs::create_dir_all(&dir).map_err(|e| {
                NodeError::Config(format!(
                    "service {name}'s data directory {}: {e}",
                    dir.display()
                ))
            })?;
            config.service_dir = Some(dir);
        }
    }
    let cluster = Cluster::start_service(config, application(file)?, peers).map_err(|source| {
        NodeError::Engine {
            context: format!("starting service {name}"),
            source,
        }
    })?;
    let only = name.to_string();
    let handler = move |req: WireRequest| {
        let (cluster, only) = (cluster.clone(), only.clone());
        async move {
            match req {
                WireRequest::Protocol { bytes } => {
                    WireResponse::Protocol(cluster.protocol().serve(bytes).await)
                }
                _ => WireResponse::Refused(brine_core::Error::Config(format!(
                    "this process runs the protocol's `{only}` service only"
                ))),
            }
        }
    };
    let server = brine_net::Server::bind(addr, brine_net::ServerConfig::default(), handler)
        .await
        .map_err(|source| NodeError::Net {
            context: format!("service {name} listening on {addr}"),
            source,
        })?;
    eprintln!(
        "brine service {name} of protocol {} serving on {}",
        file.protocol,
        server.local_addr()
    );
    wait_for_stop().await;
    let outcome = server.shutdown().await;
    eprintln!("brine service {name}: stopped ({outcome:?})");
    Ok(())
}
