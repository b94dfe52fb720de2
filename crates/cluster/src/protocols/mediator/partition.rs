//! Mediator's rules at a partition: the partition's versioned items and
//! clock ([`VersionedStore`], Algorithm 3), served through Mediator's own
//! messages ([`MediatorMsg`], in `PartitionMsg::Protocol`). The engine's
//! store keeps the latest version of every row, so loads, checks and
//! plain SQL reads see the current state; every version lives here.

use std::any::Any;

use brine_core::{Error, Result, Row, TableId};

use super::durable::PartitionLog;
use super::kv::{put_row, Item, KvOp};
use super::store::{Ts, VersionedStore};
use crate::message::Reply;
use crate::partition::{Partition, Rules, Stmt};

/// Mediator's requests to a partition.
pub enum MediatorMsg {
    /// A native get: the latest version.
    Get {
        item: Item,
        reply: Reply<Option<(Row, Ts)>>,
    },
    /// A native put: the row it makes of the latest version, stamped with
    /// the clock advanced by delta (`None`: an update of no row, nothing
    /// written).
    Put {
        op: KvOp,
        reply: Reply<Result<Option<Ts>>>,
    },
    /// A transactional get: the latest version before `ts`, the clock
    /// fenced at `ts` first (unless `fence` is off: mutation testing);
    /// `Err(SnapshotGone)` if versions it may need were collected.
    TxGet {
        item: Item,
        ts: Ts,
        fence: bool,
        reply: Reply<std::result::Result<Option<(Row, Ts)>, SnapshotGone>>,
    },
    /// The native-conflict check at commit timestamp `ts` (fencing the
    /// clock there unless `fence` is off): whether no item changed after
    /// the timestamp the transaction knew it by.
    Check {
        items: Vec<(Item, Ts)>,
        ts: Ts,
        fence: bool,
        reply: Reply<bool>,
    },
    /// The temporal fence alone (the write set of a serializable commit).
    Fence { ts: Ts, reply: Reply<()> },
    /// A transaction's write-back at its commit timestamp (idempotent).
    WriteBack {
        writes: Vec<(Item, Row)>,
        ts: Ts,
        reply: Reply<Result<()>>,
    },
    /// Drops the versions no snapshot at or after `oldest` can read.
    Collect { oldest: Ts },
}

/// A transactional get's snapshot is older than what the partition
/// collected: the transaction outlived its snapshot's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotGone;

/// Mediator's state at one partition.
pub struct MediatorRules {
    versions: VersionedStore<Item, Row>,
    /// The versions log, when the cluster is durable.
    log: Option<PartitionLog>,
    /// `kv`: gets and puts go to the engine's store, unversioned.
    raw: bool,
}

impl MediatorRules {
    /// `delta`: the clock's step for a native put; `tag`: the low bits of
    /// this partition's native timestamps (`VersionedStore::tagged`).
    pub fn new(delta: Ts, tag: Ts, log: Option<PartitionLog>) -> MediatorRules {
        let versions = if tag == 0 {
            VersionedStore::new(delta)
        } else {
            VersionedStore::tagged(delta, tag)
        };
        MediatorRules {
            versions,
            log,
            raw: false,
        }
    }

    /// Serves native gets and puts from the engine's store alone (`kv`).
    pub fn raw(self, raw: bool) -> MediatorRules {
        MediatorRules { raw, ..self }
    }

    /// After a restart: the engine store's rows (loaded, or recovered by
    /// the engine's log) are the first versions, and the versions Mediator's
    /// log recovered are laid over them, in the store too; the clock
    /// resumes above them.
    pub fn restore(p: &mut Partition<MediatorRules>) -> Result<()> {
        let mut rows = Vec::new();
        p.store
            .for_each_committed_row(|table, row| rows.push((table, row.clone())));
        let catalog = p.store.catalog().clone();
        for (table, row) in rows {
            let item = (table, catalog.table(table).primary_key_of(&row));
            p.rules.versions.tx_put([(item, row)], 0);
        }
        let recovered = p
            .rules
            .log
            .as_mut()
            .map(|l| std::mem::take(&mut l.recovered))
            .unwrap_or_default();
        for (item, (ts, row)) in recovered {
            p.store.replace_row(item.0, row.clone())?;
            p.rules.versions.tx_put([(item, row)], ts);
            p.rules.versions.sync(ts);
        }
        Ok(())
    }

    /// Answers `reply` once everything this partition logged is durable
    /// (at once without a log): nobody acts on a version a crash could
    /// take back.
    fn answer_durable<T: Send + 'static>(&self, reply: Reply<T>, value: T) {
        match &self.log {
            Some(log) => log.when_durable(Box::new(move |r| {
                if r.is_ok() {
                    reply.send(value);
                }
            })),
            None => reply.send(value),
        }
    }

    /// Logs `versions` and answers `reply` once they are durable (at once
    /// without a log; with the log's error if it failed).
    fn log_then<T: Send + 'static>(
        &self,
        versions: &[(Ts, TableId, &Row)],
        reply: Reply<Result<T>>,
        value: T,
    ) {
        match &self.log {
            Some(log) if !versions.is_empty() => log.append_then(
                versions.iter().copied(),
                Box::new(move |r| reply.send(r.map(|()| value))),
            ),
            _ => reply.send(Ok(value)),
        }
    }
}

/// Makes `row` the engine store's current row of `table` if its version
/// `ts` is the item's latest.
fn materialize(p: &mut Partition<MediatorRules>, item: &Item, row: Row, ts: Ts) -> Result<()> {
    let latest = p.rules.versions.get(item).map(|(_, t)| t);
    if latest == Some(ts) {
        p.store.replace_row(item.0, row)?;
    }
    Ok(())
}

impl Rules for MediatorRules {
    /// SQL statements run on the engine's store, which holds the latest
    /// versions: reads only (a check, an interactive read). Writes go
    /// through Mediator's puts, or they would bypass the versions.
    fn arrive(_p: &mut Partition<Self>, stmt: &Stmt) -> Result<()> {
        if stmt.plan.kind() != brine_sql::StatementKind::Select {
            return Err(Error::Sql(format!(
                "under Mediator, writes are puts: `{}` cannot run as a locked SQL statement",
                stmt.plan.sql()
            )));
        }
        Ok(())
    }

    /// Loaded rows are the first versions, before every transaction and
    /// native put (timestamp 0).
    fn load(p: &mut Partition<Self>, table: TableId, rows: Vec<Row>) -> Result<()> {
        let catalog = p.store.catalog().clone();
        let def = catalog.table(table);
        for row in rows {
            p.store.load(table, row.clone())?;
            p.rules
                .versions
                .tx_put([((table, def.primary_key_of(&row)), row)], 0);
        }
        Ok(())
    }

    const KEEPS_LOADED_ROWS: bool = true;

    /// Loaded rows the store took (a failed load stops at its first bad
    /// row) are the first versions.
    fn loaded_durably(p: &mut Partition<Self>, table: TableId, rows: Vec<Row>) {
        let catalog = p.store.catalog().clone();
        let def = catalog.table(table);
        for row in rows {
            let key = def.primary_key_of(&row);
            if p.store.get(table, &key) == Some(&row) {
                p.rules.versions.tx_put([((table, key), row)], 0);
            }
        }
    }

    fn message(p: &mut Partition<Self>, msg: Box<dyn Any + Send>) -> Result<()> {
        let msg = msg
            .downcast::<MediatorMsg>()
            .map_err(|_| Error::Internal("a message Mediator's rules do not know".into()))?;
        match *msg {
            MediatorMsg::Get { item, reply } if p.rules.raw => {
                reply.send(p.store.get(item.0, &item.1).map(|r| (r.clone(), 0)));
            }
            MediatorMsg::Put { op, reply } if p.rules.raw => {
                let item = op.item().clone();
                let answer = match put_row(&op, p.store.get(item.0, &item.1)) {
                    None => Ok(None),
                    Some(row) => p.store.replace_row(item.0, row).map(|()| Some(0)),
                };
                reply.send(answer);
            }
            MediatorMsg::Get { item, reply } => {
                let got = p.rules.versions.get(&item);
                p.rules.answer_durable(reply, got);
            }
            MediatorMsg::Put { op, reply } => {
                let item = op.item().clone();
                let old = p.rules.versions.get(&item).map(|(r, _)| r);
                match put_row(&op, old.as_ref()) {
                    None => reply.send(Ok(None)),
                    // The engine's store checks the row (types, unique
                    // indexes) before it becomes a version.
                    Some(row) => match p.store.replace_row(item.0, row.clone()) {
                        Ok(()) => {
                            let table = item.0;
                            let ts = p.rules.versions.put(item, row.clone());
                            p.rules.log_then(&[(ts, table, &row)], reply, Some(ts));
                        }
                        Err(e) => reply.send(Err(e)),
                    },
                }
            }
            MediatorMsg::TxGet {
                item,
                ts,
                fence,
                reply,
            } => {
                let v = &mut p.rules.versions;
                let got = if !v.snapshot_kept(ts) {
                    Err(SnapshotGone)
                } else if fence {
                    Ok(v.tx_get(&item, ts))
                } else {
                    Ok(v.version_before(&item, ts))
                };
                p.rules.answer_durable(reply, got);
            }
            MediatorMsg::Check {
                items,
                ts,
                fence,
                reply,
            } => {
                let v = &mut p.rules.versions;
                let items = items.iter().map(|(i, t)| (i, *t));
                reply.send(if fence {
                    v.tx_check_conflict(items, ts)
                } else {
                    v.unchanged_before(items, ts)
                });
            }
            MediatorMsg::Fence { ts, reply } => {
                p.rules.versions.sync(ts);
                reply.send(());
            }
            MediatorMsg::WriteBack { writes, ts, reply } => {
                let mut result = Ok(());
                for (item, row) in &writes {
                    p.rules.versions.tx_put([(item.clone(), row.clone())], ts);
                    if let Err(e) = materialize(p, item, row.clone(), ts) {
                        result = Err(e);
                    }
                }
                match result {
                    Ok(()) => {
                        let logged: Vec<(Ts, TableId, &Row)> =
                            writes.iter().map(|((t, _), r)| (ts, *t, r)).collect();
                        p.rules.log_then(&logged, reply, ());
                    }
                    Err(e) => reply.send(Err(e)),
                }
            }
            MediatorMsg::Collect { oldest } => {
                p.rules.versions.collect(oldest);
            }
        }
        let MediatorRules { versions, log, .. } = &mut p.rules;
        if let Some(log) = log {
            log.maybe_checkpoint(p.id.0 as usize, || {
                versions
                    .latest()
                    .filter(|(_, ts, _)| *ts > 0)
                    .map(|((t, _), ts, r)| (ts, *t, r))
                    .collect()
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use brine_core::{Key, Value};

    use super::*;
    use crate::message::{LockSpec, PartitionMsg};
    use crate::partition::harness::Harness;
    use crate::protocol::Isolation;

    fn start() -> Result<Harness> {
        Harness::start(
            crate::partition::harness::KV,
            MediatorRules::new(1, 0, None),
        )
    }

    impl Harness {
        async fn mediator<T: Send + 'static>(
            &self,
            make: impl FnOnce(Reply<T>) -> MediatorMsg,
        ) -> T {
            self.ask(|reply| PartitionMsg::Protocol(Box::new(make(reply))))
                .await
        }

        fn item(&self, k: i64) -> Item {
            let t = self.catalog.table_by_name("kv").expect("kv").id;
            (t, Key::new([Value::Int(k)]))
        }

        fn set(&self, k: i64, v: i64) -> KvOp {
            KvOp::Set {
                item: self.item(k),
                sets: vec![(1, Value::Int(v))],
            }
        }

        async fn get(&self, k: i64) -> Option<(Row, Ts)> {
            let item = self.item(k);
            self.mediator(move |reply| MediatorMsg::Get { item, reply })
                .await
        }

        async fn put(&self, k: i64, v: i64) -> Result<Option<Ts>> {
            let op = self.set(k, v);
            self.mediator(move |reply| MediatorMsg::Put { op, reply })
                .await
        }

        async fn check(&self, k: i64, known: Ts, ts: Ts) -> bool {
            let items = vec![(self.item(k), known)];
            self.mediator(move |reply| MediatorMsg::Check {
                items,
                ts,
                fence: true,
                reply,
            })
            .await
        }

        /// A SQL statement through the engine's path (locks, store).
        async fn sql(&self, sql: &str, params: Vec<Value>) -> Result<brine_sql::QueryResult> {
            let plan = Arc::new(brine_sql::prepare(&self.catalog, sql)?);
            let txn = brine_core::TxnId { ts: 1, id: 1 };
            let executed = self
                .ask(|reply| PartitionMsg::Execute {
                    txn,
                    plan,
                    params,
                    lock: LockSpec::acid(Isolation::ReadCommitted),
                    sub: None,
                    call: None,
                    ext: None,
                    gate: None,
                    reply,
                })
                .await?;
            let _ = self
                .ask(|reply| PartitionMsg::Commit {
                    txn,
                    ending: crate::partition::Ending::Release,
                    decided: false,
                    reply,
                })
                .await;
            Ok(executed.result)
        }
    }

    fn v_of(row: Option<(Row, Ts)>) -> Option<(i64, Ts)> {
        row.map(|(r, t)| (r[1].as_int().unwrap_or(-1), t))
    }

    /// The partition side of the fences, through the partition actor:
    /// loads are versions at 0; a native put advances the clock by delta;
    /// a transactional get fences it, so the next put is stamped past the
    /// transaction's start; the conflict check sees that put; a
    /// write-back is the latest version only if nothing newer is there,
    /// and SQL reads see the latest version; SQL writes are refused.
    #[tokio::test]
    async fn a_partition_serves_versions_and_fences() -> Result<()> {
        let h = start()?;
        let t = h.item(1).0;
        let rows = (1..=3)
            .map(|k| vec![Value::Int(k), Value::Int(0)])
            .collect();
        h.ask(|reply| PartitionMsg::Load {
            table: t,
            rows,
            reply,
        })
        .await?;
        assert_eq!(v_of(h.get(1).await), Some((0, 0)));
        assert_eq!(h.put(1, 5).await?, Some(1));
        assert_eq!(
            h.put(9, 5).await?,
            None,
            "an update of no row writes nothing"
        );

        let start = 1 << 20;
        let item = h.item(1);
        let read = h
            .mediator(move |reply| MediatorMsg::TxGet {
                item,
                ts: start,
                fence: true,
                reply,
            })
            .await;
        assert_eq!(v_of(read.expect("a kept snapshot")), Some((5, 1)));
        let after = h.put(1, 6).await?.unwrap_or(0);
        assert_eq!(after, start + 1, "stamped past the fence");
        assert!(
            !h.check(1, 1, 2 << 20).await,
            "the put after the start conflicts"
        );
        assert!(h.check(1, after, 2 << 20).await);

        // Write-backs: at 3<<20 the latest; at 2.5<<20 an older version.
        for (ts, v) in [(3 << 20, 9), (5 << 19, 8)] {
            let writes = vec![(h.item(2), vec![Value::Int(2), Value::Int(v)])];
            h.mediator(move |reply| MediatorMsg::WriteBack { writes, ts, reply })
                .await?;
        }
        assert_eq!(v_of(h.get(2).await), Some((9, 3 << 20)));
        let r = h
            .sql("SELECT v FROM kv WHERE k = $k", vec![Value::Int(2)])
            .await?;
        assert_eq!(r.rows, vec![vec![Value::Int(9)]], "SQL reads the latest");
        let r = h
            .sql("SELECT v FROM kv WHERE k = $k", vec![Value::Int(1)])
            .await?;
        assert_eq!(r.rows, vec![vec![Value::Int(6)]]);
        let w = h
            .sql("UPDATE kv SET v = 1 WHERE k = $k", vec![Value::Int(1)])
            .await;
        assert!(
            w.as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("writes are puts")),
            "{w:?}"
        );
        Ok(())
    }
}
