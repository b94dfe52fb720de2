//! A partition on its own, for the protocols' rule tests: its queue, the
//! link its replies cross, and its catalog.

use std::path::Path;
use std::sync::Arc;

use brine_core::{Catalog, NodeId, PartitionId, Result, TxnId, Value};
use brine_lock::{LockClass, LockConfig};
use tokio::sync::{mpsc, oneshot};

use super::{Partition, PartitionCounters, PartitionParts, Rules};
use crate::durability::{DurabilityConfig, DurabilityMode, WalSet};
use crate::link::{Link, LinkConfig};
use crate::message::{Executed, LockSpec, PartitionMsg, PartitionStatus, Reply, StmtExt, SubStmt};

/// The rules tests' schema: one table, `kv(k, v)`.
pub const KV: &str = "CREATE TABLE kv (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);";

/// Transaction `id` (its timestamp too).
pub fn txn(id: u64) -> TxnId {
    TxnId { ts: id, id }
}

/// Statement `seq` of a subtransaction (or piece) of `owner`, neither
/// autocommitted nor protected.
pub fn sub_stmt(owner: TxnId, seq: u32) -> SubStmt {
    SubStmt {
        owner,
        seq,
        autocommit: false,
        commit_first: None,
        protect: false,
        no: seq,
    }
}

/// The first column of an answer's first row.
pub fn first_value(e: Executed) -> Option<Value> {
    e.result.rows.first().and_then(|r| r.first().cloned())
}

/// How a test statement goes: its lock class, subtransaction and the
/// protocol's words.
pub struct How {
    pub class: LockClass,
    pub sub: Option<SubStmt>,
    pub ext: StmtExt,
}

pub struct Harness {
    pub link: Link,
    pub tx: mpsc::UnboundedSender<PartitionMsg>,
    pub catalog: Arc<Catalog>,
    /// A durable partition's logs ([`Harness::durable_kv`]).
    wal: Option<WalSet>,
    task: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// Partition 0 of a cluster whose schema is `ddl`, under `rules`.
    pub fn start<R: Rules>(ddl: &str, rules: R) -> Result<Harness> {
        Harness::spawn(ddl, rules, None)
    }

    /// With `dir`: durable, its logs in `dir`, recovered from what a
    /// previous partition left there.
    fn spawn<R: Rules>(ddl: &str, rules: R, dir: Option<&Path>) -> Result<Harness> {
        let catalog = Arc::new(brine_sql::parse_schema(ddl)?);
        let (wal, durable) = match dir {
            Some(dir) => {
                let config = DurabilityConfig {
                    mode: DurabilityMode::Wal,
                    data_dir: Some(dir.to_path_buf()),
                    ..DurabilityConfig::default()
                };
                let (wal, mut stores) = WalSet::open(&config, 1, 1, &catalog, None)?;
                let store = stores.first_mut().and_then(Option::take);
                let durable = store.zip(wal.partition_wal(0));
                (Some(wal), durable)
            }
            None => (None, None),
        };
        let parts = PartitionParts {
            id: PartitionId(0),
            catalog: catalog.clone(),
            lock_config: LockConfig::default(),
            counters: Arc::new(PartitionCounters::default()),
            wal: durable,
            history: None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(Partition::new(parts, rules).run(rx));
        let link = Link::new(
            LinkConfig {
                delay_us: 0,
                jitter_us: 0,
            },
            1,
        );
        Ok(Harness {
            link,
            tx,
            catalog,
            wal,
            task,
        })
    }

    /// Partition 0 of [`KV`] under `rules`, with rows `1..=rows` at 0.
    pub async fn kv<R: Rules>(rules: R, rows: i64) -> Result<Harness> {
        Harness::start(KV, rules)?.load_kv(rows).await
    }

    /// [`Harness::kv`], durable: its logs in `dir`. A `dir` that holds a
    /// previous partition's logs is recovered (load no rows then).
    pub async fn durable_kv<R: Rules>(rules: R, rows: i64, dir: &Path) -> Result<Harness> {
        Harness::spawn(KV, rules, Some(dir))?.load_kv(rows).await
    }

    async fn load_kv(self, rows: i64) -> Result<Harness> {
        if rows > 0 {
            let table = self.catalog.table_by_name("kv").expect("kv").id;
            let rows = (1..=rows)
                .map(|k| vec![Value::Int(k), Value::Int(0)])
                .collect();
            self.ask(|reply| PartitionMsg::Load { table, rows, reply })
                .await?;
        }
        Ok(self)
    }

    /// A power cut: the logs stop where they are (what was acknowledged
    /// is durable), and the partition is gone once this returns.
    pub async fn crash(self) {
        if let Some(wal) = &self.wal {
            wal.crash();
        }
        drop(self.tx);
        let _ = self.task.await;
    }

    /// Sends `sql` (binding `k` as `$1`) as a statement of `txn`, as `how`
    /// says; the answer comes on the receiver.
    pub fn execute(
        &self,
        txn: TxnId,
        sql: &str,
        k: i64,
        how: How,
    ) -> oneshot::Receiver<Result<Executed>> {
        self.execute_in_call(txn, sql, k, how, None)
    }

    /// [`Harness::execute`] of a statement that carries its call (the
    /// procedure and its arguments, `PartitionMsg::Execute`'s `call`).
    pub fn execute_in_call(
        &self,
        txn: TxnId,
        sql: &str,
        k: i64,
        how: How,
        call: crate::message::Intro,
    ) -> oneshot::Receiver<Result<Executed>> {
        let plan = Arc::new(brine_sql::prepare(&self.catalog, sql).expect("plan"));
        let (reply, rx) = Reply::channel(&self.link, NodeId(0), NodeId(1));
        self.send(PartitionMsg::Execute {
            txn,
            plan,
            params: vec![Value::Int(k)],
            lock: LockSpec {
                class: how.class,
                short_reads: false,
                serializable: true,
                short_writes: false,
                for_update: false,
            },
            sub: how.sub,
            call,
            ext: how.ext,
            gate: None,
            reply,
        });
        rx
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
