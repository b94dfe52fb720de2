//! A partition on its own, for the protocols' rule tests: its queue, the
//! link its replies cross, and its catalog.

use std::sync::Arc;

use brine_core::{Catalog, NodeId, PartitionId, Result};
use brine_lock::LockConfig;
use tokio::sync::mpsc;

use super::{Partition, PartitionCounters, PartitionParts, Rules};
use crate::link::{Link, LinkConfig};
use crate::message::{PartitionMsg, PartitionStatus, Reply};

pub struct Harness {
    pub link: Link,
    pub tx: mpsc::UnboundedSender<PartitionMsg>,
    pub catalog: Arc<Catalog>,
}

impl Harness {
    /// Partition 0 of a cluster whose schema is `ddl`, under `rules`.
    pub fn start<R: Rules>(ddl: &str, rules: R) -> Result<Harness> {
        let catalog = Arc::new(brine_sql::parse_schema(ddl)?);
        let parts = PartitionParts {
            id: PartitionId(0),
            catalog: catalog.clone(),
            lock_config: LockConfig::default(),
            counters: Arc::new(PartitionCounters::default()),
            wal: None,
            record: false,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(Partition::new(parts, rules).run(rx));
        let link = Link::new(
            LinkConfig {
                delay_us: 0,
                jitter_us: 0,
            },
            1,
        );
        Ok(Harness { link, tx, catalog })
    }

    /// Sends a request; its answer.
    pub async fn ask<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> PartitionMsg) -> T {
        let (reply, rx) = Reply::channel(&self.link, NodeId(0), NodeId(1));
        self.send(make(reply));
        rx.await.expect("answered")
    }

    /// Sends a message; the partition handles its messages in order.
    pub fn send(&self, msg: PartitionMsg) {
        self.tx.send(msg).expect("partition running");
    }

    /// The partition's status, once it handled everything sent before.
    pub async fn status(&self) -> PartitionStatus {
        self.ask(|reply| PartitionMsg::Status { reply }).await
    }
}
