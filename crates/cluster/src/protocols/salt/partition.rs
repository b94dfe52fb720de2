//! Salt's rules at the partition: a BASE transaction's locks are owned
//! across its alkaline subtransactions ([`Owned`], with the saline
//! release-order dependencies on), downgraded from alkaline to saline as
//! each subtransaction ends, and released in stages at its end; with a log,
//! what each subtransaction ran here is its context, logged with its
//! commit or prepare so a roll-forward can replay it (seed 000 section 3.3;
//! `docs/salt.md`).

use rustc_hash::FxHashMap as HashMap;

use brine_core::{Result, TxnId};
use brine_lock::LockClass;
use brine_sql::QueryResult;
use brine_storage::wal::record::{BaseContext, BaseEntry};

use crate::message::Reply;
use crate::partition::{Ending, Owned, Partition, Prepared, Rules, Stmt};

/// Salt's state at one partition.
pub struct SaltRules {
    owned: Owned,
    /// With a log: what each running alkaline subtransaction ran here,
    /// logged when it commits or prepares.
    contexts: HashMap<TxnId, BaseContext>,
    /// BASE transactions being rolled forward after their coordinator gave
    /// them up in doubt: statements of their subtransactions with ids below
    /// the fence are refused (see `gather::OpenContexts`).
    fences: HashMap<TxnId, u64>,
}

/// Fences BASE transaction `owner` here at `fence` (`gather::OpenContexts`):
/// its subtransactions older than the fence that have not committed here
/// are aborted (a statement of one waiting for a lock fails), and later
/// statements of such subtransactions are refused (`arrive`).
pub(super) fn fence(p: &mut Partition<SaltRules>, owner: TxnId, fence: u64) {
    let f = p.rules.fences.entry(owner).or_insert(fence);
    *f = (*f).max(fence);
    let mut subs: Vec<TxnId> = p
        .rules
        .contexts
        .iter()
        .filter(|(sub, c)| c.owner == owner && sub.id < fence)
        .map(|(sub, _)| *sub)
        .collect();
    if let Some(parked) = p.parked.get(&owner) {
        let sub = parked.stmt.txn;
        if sub.id < fence && !subs.contains(&sub) {
            subs.push(sub);
        }
    }
    for sub in subs {
        tracing::info!(partition = p.id.0, %owner, %sub, "fenced: a subtransaction of a BASE transaction rolled forward is aborted");
        p.forget_aborted(sub);
        p.end_txn(sub, Ending::Sub { owner }, false);
    }
}

impl SaltRules {
    /// `release_order`: the saline release-order rules are on.
    pub fn new(release_order: bool) -> SaltRules {
        SaltRules {
            owned: Owned::new(release_order),
            contexts: HashMap::default(),
            fences: HashMap::default(),
        }
    }
}

impl Rules for SaltRules {
    fn owned(&mut self) -> Option<&mut Owned> {
        Some(&mut self.owned)
    }

    /// Salt's only message: the open BASE contexts logged here
    /// (`gather.rs`).
    fn message(p: &mut Partition<Self>, msg: Box<dyn std::any::Any + Send>) -> Result<()> {
        let msg = msg.downcast::<super::gather::OpenContexts>().map_err(|_| {
            brine_core::Error::Internal("a message Salt's rules do not know".into())
        })?;
        super::gather::answer(p, *msg);
        Ok(())
    }

    fn owned_ref(&self) -> Option<&Owned> {
        Some(&self.owned)
    }

    fn forget(p: &mut Partition<Self>, owner: TxnId) {
        p.rules.fences.remove(&owner);
    }

    fn arrive(p: &mut Partition<Self>, stmt: &Stmt) -> Result<()> {
        if p.rules
            .fences
            .get(&stmt.owner)
            .is_some_and(|&fence| stmt.txn.id < fence)
        {
            // Sent before its coordinator gave the transaction up: the
            // roll-forward runs this part again if it must.
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
        Ok(())
    }

    fn finishing(p: &mut Partition<Self>, stmt: &Stmt, result: &Result<QueryResult>) {
        let (Some(s), Some(_), Ok(r)) = (stmt.sub, &p.wal, result) else {
            return;
        };
        let c = p
            .rules
            .contexts
            .entry(stmt.txn)
            .or_insert_with(|| BaseContext {
                sub: stmt.txn,
                owner: s.owner,
                intro: None,
                entries: Vec::new(),
            });
        if let Some(call) = &stmt.call {
            c.intro = Some((call.0.clone(), call.1.clone()));
        }
        c.entries.push(BaseEntry {
            seq: s.seq,
            columns: r.columns.to_vec(),
            rows: r.rows.clone(),
            affected: r.affected,
        });
    }

    fn prepare(p: &mut Partition<Self>, txn: TxnId) -> Prepared {
        Prepared::Go {
            context: p.rules.contexts.remove(&txn),
        }
    }

    fn commit_context(p: &mut Partition<Self>, txn: TxnId) -> Option<BaseContext> {
        p.rules.contexts.remove(&txn)
    }

    fn aborted(p: &mut Partition<Self>, txn: TxnId) {
        p.rules.contexts.remove(&txn);
    }

    /// An alkaline subtransaction's locks are downgraded to saline, not
    /// released: kept to the BASE transaction's end, also after a
    /// rollback (conservative; the end-of-BASE release accounts for them).
    /// An ACID transaction's go; `acid` sets no release-order
    /// dependencies, so that completes now.
    fn end_locks(p: &mut Partition<Self>, txn: TxnId, ending: Ending, _commit: bool) {
        match ending {
            Ending::Release => {
                let _ = p.release_all(txn);
            }
            Ending::Keep | Ending::Sub { .. } => {
                let owner = ending.owner(txn);
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
