//! Salt's rules at the partition: a BASE transaction's locks are owned
//! across its alkaline subtransactions ([`Owned`], with the saline
//! release-order dependencies on), downgraded from alkaline to saline as
//! each subtransaction ends, and released in stages at its end; with a log,
//! what each subtransaction ran here is its context, logged with its
//! commit or prepare so a roll-forward can replay it (seed 000 section 3.3;
//! `docs/salt.md`).

use rustc_hash::FxHashMap as HashMap;

use brine_core::{Result, TxnId};
use brine_lock::{LockClass, Mode};
use brine_sql::QueryResult;
use brine_storage::wal::record::BaseContext;

use crate::message::Reply;
use crate::partition::{Contexts, Ending, Owned, Partition, Prepared, Rules, Stmt};
use crate::protocols::gather;

/// Salt's state at one partition.
pub struct SaltRules {
    owned: Owned,
    /// With a log: what each running alkaline subtransaction ran here
    /// (and recorded, when the run records a history), logged when it
    /// commits or prepares; a roll-forward gathers the open ones
    /// (`gather::OpenContexts`).
    contexts: Contexts,
    /// BASE transactions being rolled forward after their coordinator gave
    /// them up in doubt: statements of their subtransactions with ids below
    /// the fence are refused (see `gather::OpenContexts`).
    fences: HashMap<TxnId, u64>,
    /// Per BASE transaction, its latest subtransaction that sent a
    /// statement here and has not ended here. The end of an older one (a
    /// commit resent after a loss, or a late duplicate) leaves the locks
    /// alkaline while it runs (`end_locks`).
    live: HashMap<TxnId, TxnId>,
}

/// The context of subtransaction `txn` to log with its commit or prepare,
/// with the rows it wrote here and what it read and keeps locked.
fn logged_context(p: &mut Partition<SaltRules>, txn: TxnId) -> Option<BaseContext> {
    let SaltRules {
        contexts, owned, ..
    } = &mut p.rules;
    contexts.take_logged(txn, &p.store, owned)
}

impl SaltRules {
    /// `release_order`: the saline release-order rules are on.
    pub fn new(release_order: bool) -> SaltRules {
        SaltRules {
            owned: Owned::new(release_order),
            contexts: Contexts::default(),
            fences: HashMap::default(),
            live: HashMap::default(),
        }
    }
}

impl gather::GatherRules for SaltRules {
    fn fencing(&mut self) -> (&mut HashMap<TxnId, u64>, &Contexts) {
        (&mut self.fences, &self.contexts)
    }
}

impl Rules for SaltRules {
    fn owned(&mut self) -> Option<&mut Owned> {
        Some(&mut self.owned)
    }

    /// Salt's only message: the open BASE contexts logged here
    /// (`gather.rs`).
    fn message(p: &mut Partition<Self>, msg: Box<dyn std::any::Any + Send>) -> Result<()> {
        let msg = msg.downcast::<gather::OpenContexts>().map_err(|_| {
            brine_core::Error::Internal("a message Salt's rules do not know".into())
        })?;
        gather::answer(p, *msg);
        Ok(())
    }

    fn owned_ref(&self) -> Option<&Owned> {
        Some(&self.owned)
    }

    fn forget(p: &mut Partition<Self>, owner: TxnId) {
        p.rules.fences.remove(&owner);
        p.rules.live.remove(&owner);
    }

    fn arrive(p: &mut Partition<Self>, stmt: &Stmt) -> Result<()> {
        if gather::fenced_off(p, stmt) {
            return Err(brine_core::Error::Aborted(
                brine_core::AbortCause::Unreachable,
            ));
        }
        if let Some(prev) = stmt.sub.and_then(|s| s.commit_first) {
            // Nobody waits for this commit: the statement's answer says
            // it happened, and a later commit of the owner here that is
            // durable makes it durable (one log, in order).
            let ending = Ending::Sub { owner: stmt.owner };
            p.commit(prev, ending, Reply::nobody(), ());
        }
        if stmt.sub.is_some() {
            let live = p.rules.live.entry(stmt.owner).or_insert(stmt.txn);
            if live.id < stmt.txn.id {
                *live = stmt.txn;
            }
        }
        Ok(())
    }

    fn finishing(p: &mut Partition<Self>, stmt: &Stmt, result: &Result<QueryResult>) {
        if let (Some(_), Ok(r)) = (&p.wal, result) {
            p.rules.contexts.note(stmt, r);
        }
    }

    fn prepare(p: &mut Partition<Self>, txn: TxnId) -> Prepared {
        Prepared::Go {
            context: logged_context(p, txn),
        }
    }

    fn commit_context(p: &mut Partition<Self>, txn: TxnId) -> Option<BaseContext> {
        logged_context(p, txn)
    }

    /// With a log, the rows the open BASE transactions' committed
    /// subtransactions wrote here are locked again, saline, for their
    /// owners, before anything else runs: their locks died with the
    /// process, and without them an ACID transaction could read a BASE
    /// transaction's intermediate state until its roll-forward (or its
    /// end) comes. They stay locked until then: the coordinator sends an
    /// accepted transaction's end until this incarnation acknowledges it
    /// (`Release::lasting`), and a coordinator that restarted sends it
    /// again, or rolls the transaction forward, once it has gathered its
    /// contexts.
    fn started(p: &mut Partition<Self>) {
        let Some(wal) = &p.wal else {
            return;
        };
        let mut relocked = 0;
        let open = wal.open_contexts(|_| true);
        let mut again = Vec::new();
        for c in &open {
            tracing::debug!(partition = p.id.0, owner = %c.owner, "an open BASE transaction here after the restart");
            // One context per owner: its subtransactions' here, merged.
            again.extend(
                crate::partition::locked_again(c)
                    .into_iter()
                    .map(|(t, access)| (c.owner, c.sub, t, access)),
            );
        }
        for (owner, sub, target, access) in again {
            let mode = Mode {
                class: LockClass::Saline,
                access,
            };
            // Held under the id of a subtransaction of its previous run, as
            // a lock forked from the owner (`Owned::adopt`): its release
            // stages leave it, its end releases it, and its own statements
            // pass it.
            if p.lock_again(sub, &target, mode, "an open BASE transaction") {
                p.rules.owned.adopt(owner, sub, target, access);
                relocked += 1;
            }
        }
        p.locked_again_after_restart(
            super::RELOCKED,
            relocked,
            "open BASE transactions",
            "saline",
        );
    }

    fn aborted(p: &mut Partition<Self>, txn: TxnId) {
        p.rules.contexts.forget(txn);
        p.rules.live.retain(|_, live| *live != txn);
    }

    /// An alkaline subtransaction's locks are downgraded to saline, not
    /// released: kept to the BASE transaction's end, also after a
    /// rollback (conservative; the end-of-BASE release accounts for them).
    /// The locks are the BASE transaction's, not the subtransaction's: when
    /// a later subtransaction of it runs here (the end of this one came
    /// late: a commit resent after a loss, or a duplicate), they stay
    /// alkaline until that one ends, or its uncommitted writes would be
    /// open to readers. An ACID transaction's go; `acid` sets no
    /// release-order dependencies, so that completes now.
    fn end_locks(p: &mut Partition<Self>, txn: TxnId, ending: Ending, _commit: bool) {
        match ending {
            Ending::Release => {
                let _ = p.release_all(txn);
            }
            Ending::Keep | Ending::Sub { .. } => {
                let owner = ending.owner(txn);
                match p.rules.live.get(&owner) {
                    Some(&live) if live != txn => return,
                    Some(_) => {
                        p.rules.live.remove(&owner);
                    }
                    None => {}
                }
                p.locks.downgrade_all(
                    owner,
                    LockClass::Alkaline,
                    LockClass::Saline,
                    &mut p.wakeups,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use brine_core::Value;
    use tokio::sync::oneshot;

    use super::*;
    use crate::message::{Executed, PartitionMsg};
    use crate::partition::harness::{first_value as value, txn, Harness, How};

    /// Sends `sql` (binding `k`) as statement `seq` of `owner`'s alkaline
    /// subtransaction `sub`; the answer comes on the receiver.
    fn execute(
        h: &Harness,
        owner: TxnId,
        sub: TxnId,
        seq: u32,
        sql: &str,
        k: i64,
    ) -> oneshot::Receiver<Result<Executed>> {
        let how = How {
            class: LockClass::Alkaline,
            sub: Some(crate::partition::harness::sub_stmt(owner, seq)),
            ext: None,
        };
        h.execute(sub, sql, k, how)
    }

    async fn commit(h: &Harness, owner: TxnId, sub: TxnId) {
        let ending = Ending::Sub { owner };
        h.ask(|reply| PartitionMsg::Commit {
            txn: sub,
            ending,
            decided: false,
            reply,
        })
        .await
        .expect("committed");
    }

    /// A BASE transaction's locks belong to it, not to one subtransaction.
    /// A commit of an earlier subtransaction that arrives again while a
    /// later one runs here (resent after its answer was lost) must leave
    /// the later one's write lock alkaline: before, it turned every lock
    /// of the owner saline, another BASE transaction read the uncommitted
    /// write, and the write was then rolled back (a G1a the fault runs
    /// found).
    #[tokio::test]
    async fn a_resent_commit_leaves_the_next_subtransaction_s_locks_alkaline() -> Result<()> {
        let h = Harness::kv(SaltRules::new(true), 2).await?;
        let (owner, first, second) = (txn(10), txn(11), txn(12));
        let set = "UPDATE kv SET v = 7 WHERE k = $1";
        execute(&h, owner, first, 0, set, 1)
            .await
            .expect("answered")?;
        commit(&h, owner, first).await;
        execute(&h, owner, second, 1, set, 2)
            .await
            .expect("answered")?;
        // The first commit again, as a resend after a lost answer.
        commit(&h, owner, first).await;

        let (other, its_sub) = (txn(20), txn(21));
        let get = "SELECT v FROM kv WHERE k = $1";
        let read = execute(&h, other, its_sub, 0, get, 1)
            .await
            .expect("answered")?;
        assert_eq!(
            value(read),
            Some(Value::Int(7)),
            "the committed one is saline"
        );
        let waiting = execute(&h, other, its_sub, 1, get, 2);
        assert_eq!(
            h.status().await.parked_statements,
            1,
            "the running subtransaction's write lock is still alkaline"
        );
        let ending = Ending::Sub { owner };
        h.ask(|reply| PartitionMsg::Abort {
            txn: second,
            ending,
            reply,
        })
        .await;
        let read = waiting.await.expect("answered")?;
        assert_eq!(value(read), Some(Value::Int(0)), "no dirty read");
        Ok(())
    }

    /// After a restart, what an open BASE transaction read at a partition
    /// (and did not write), a row and a range, is locked again, saline,
    /// like the rows it wrote: an ACID transaction's write of any of them
    /// waits for the BASE transaction's end (before, what it read was open
    /// to it, and the BASE transaction's next steps relied on a value
    /// overwritten).
    #[tokio::test]
    async fn rows_an_open_base_transaction_read_stay_locked_after_a_restart() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| brine_core::Error::Storage(e.to_string()))?;
        let h = Harness::durable_kv(SaltRules::new(true), 6, dir.path()).await?;
        let (owner, sub) = (txn(10), txn(11));
        let get = "SELECT v FROM kv WHERE k = $1";
        execute(&h, owner, sub, 0, get, 1)
            .await
            .expect("answered")?;
        let set = "UPDATE kv SET v = 7 WHERE k = $1";
        execute(&h, owner, sub, 1, set, 2)
            .await
            .expect("answered")?;
        let scan = "SELECT v FROM kv WHERE k >= $1";
        execute(&h, owner, sub, 2, scan, 5)
            .await
            .expect("answered")?;
        commit(&h, owner, sub).await;
        h.crash().await;

        // Restarted twice: from the log, then from the checkpoint the
        // first recovery wrote.
        let mut h = Harness::durable_kv(SaltRules::new(true), 0, dir.path()).await?;
        let mut round = 0;
        let (of_read, of_written, in_range) = loop {
            // Older than the BASE transaction: they wait rather than die.
            let acid = |id, k| {
                let how = How {
                    class: LockClass::Acid,
                    sub: None,
                    ext: None,
                };
                h.execute(txn(id), "UPDATE kv SET v = 1 WHERE k = $1", k, how)
            };
            let base = 4 * round;
            let waiting = (acid(base + 1, 1), acid(base + 2, 2), acid(base + 3, 6));
            acid(base + 4, 3).await.expect("answered")?;
            assert_eq!(
                h.status().await.parked_statements,
                3,
                "restart {round}: the writes of what it read and wrote wait"
            );
            if round == 1 {
                break waiting;
            }
            round += 1;
            h.crash().await;
            h = Harness::durable_kv(SaltRules::new(true), 0, dir.path()).await?;
        };
        h.ask(|reply| PartitionMsg::Release {
            owner,
            stages: vec![crate::message::ReleaseStage::End],
            lasting: true,
            reply,
        })
        .await;
        for waited in [of_read, of_written, in_range] {
            waited.await.expect("answered")?;
        }
        Ok(())
    }
}
