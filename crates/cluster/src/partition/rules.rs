//! The partition side of the protocol interface: what a protocol's rules
//! decide at a partition, and the engine's plain rules (strict two-phase
//! locking: every lock held to the transaction's end, then released).
//!
//! Each hook is an associated function that gets the whole partition,
//! [`Partition<Self>`], so the protocol reaches its own state
//! (`p.rules`) and the engine's (store, lock table, log) alike, and calls
//! back into the engine (`p.commit`, `p.process_wakeups`) where it must.
//! The partition is generic over its rules: no dynamic dispatch on the
//! statement path.

use std::any::Any;

use brine_core::{Error, LockNeed, Result, Row, TableId, TxnId};
use brine_sql::QueryResult;
use brine_storage::wal::record::BaseContext;
use serde::{Deserialize, Serialize};

use super::{Owned, Partition, Stmt};
use crate::message::{ReleaseStage, Reply};

/// What happens to a transaction's locks here when it commits or aborts
/// (`PartitionMsg::Commit`, `Abort`, `Prepare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ending {
    /// They go (strict two-phase locking).
    Release,
    /// The transaction keeps them until its coordinator sends `Release`
    /// (Callas: as nexus locks, released in the nexus order).
    Keep,
    /// The transaction is a subtransaction (a Salt alkaline
    /// subtransaction, a Callas piece) whose locks belong to `owner`,
    /// which keeps them past this end; the rules decide in which form.
    Sub { owner: TxnId },
}

impl Ending {
    /// Who holds the locks of transaction `txn` ending this way.
    pub fn owner(self, txn: TxnId) -> TxnId {
        match self {
            Ending::Sub { owner } => owner,
            Ending::Release | Ending::Keep => txn,
        }
    }
}

/// What a protocol's rules say at phase one.
pub enum Prepared {
    /// Prepare as usual; `context`: what the transaction ran here that
    /// the log must keep with its prepare record (Salt: the results a
    /// roll-forward replays), which also makes a participant that wrote
    /// nothing prepare instead of voting read-only.
    Go { context: Option<BaseContext> },
    /// Vote no (the transaction was aborted here meanwhile).
    Refuse,
}

/// A protocol's rules at one partition, with its own state there.
///
/// Every hook has the engine's default: a protocol overrides the ones
/// where it differs from strict two-phase locking.
pub trait Rules: Sized + Send + 'static {
    /// A statement arrived, before anything of it is locked: an error
    /// refuses it.
    fn arrive(_p: &mut Partition<Self>, _stmt: &Stmt) -> Result<()> {
        Ok(())
    }

    /// The statement may run now (`Some`), or the rules keep it to run it
    /// later (`None`; handed back by [`Rules::next_ready`]).
    fn admit(_p: &mut Partition<Self>, stmt: Stmt) -> Option<Stmt> {
        Some(stmt)
    }

    /// A statement the rules let go, to run now.
    fn next_ready(_p: &mut Partition<Self>) -> Option<Stmt> {
        None
    }

    /// A lock of `stmt` was granted (`short`: its access holds it for the
    /// statement only). Returns whether the lock must outlive the
    /// statement all the same (a dirty read's lock, which carries a
    /// release-order dependency: `Owned`).
    fn granted(p: &mut Partition<Self>, stmt: &mut Stmt, need: &LockNeed, short: bool) -> bool {
        if p.rules.owned_ref().is_none() {
            return false;
        }
        let dirty = p.owned_granted(stmt, need, short);
        stmt.dirty |= dirty;
        dirty
    }

    /// A lock `stmt` asked for must be waited for: whether the rules
    /// refuse to wait (no-wait locking), failing the statement as a
    /// victim (`AbortCause::LockTimeout`: a wait timeout of zero).
    fn refuses_wait(_p: &Partition<Self>, _stmt: &Stmt) -> bool {
        false
    }

    /// `stmt` ran successfully (its locks still held).
    fn executed(_p: &mut Partition<Self>, _stmt: &Stmt) {}

    /// `stmt` ends with `result`, before its answer goes.
    fn finishing(_p: &mut Partition<Self>, _stmt: &Stmt, _result: &Result<QueryResult>) {}

    /// Phase one of `txn` must wait until another transaction ends here
    /// (asked again whenever one does). With a log, a Runtime Pipelining
    /// dependant prepares only once the transactions whose uncommitted
    /// writes it saw here have ended here, so the log holds their records
    /// in dependency order and recovery applies them in that order.
    fn prepare_waits(_p: &Partition<Self>, _txn: TxnId) -> bool {
        false
    }

    /// Phase one for `txn`.
    fn prepare(_p: &mut Partition<Self>, _txn: TxnId) -> Prepared {
        Prepared::Go { context: None }
    }

    /// What `txn` ran here that the log keeps with its commit record.
    fn commit_context(_p: &mut Partition<Self>, _txn: TxnId) -> Option<BaseContext> {
        None
    }

    /// `txn` committed here (its writes kept).
    fn committed(_p: &mut Partition<Self>, _txn: TxnId) {}

    /// Undoes `txn`'s writes here (and, under Runtime Pipelining, those of
    /// the transactions that saw them).
    fn undo(p: &mut Partition<Self>, txn: TxnId) {
        p.store.abort(txn);
    }

    /// `txn` aborted here, or was abandoned (its coordinator restarted):
    /// forget what the rules keep of it that its end does not.
    fn aborted(_p: &mut Partition<Self>, _txn: TxnId) {}

    /// `owner` (the lock holder of a transaction that ends) ends here: a
    /// statement the rules keep for it fails.
    fn ending(_p: &mut Partition<Self>, _owner: TxnId) {}

    /// What becomes of the locks of `txn` (held by `ending.owner(txn)`)
    /// when it ends (`commit` or not).
    fn end_locks(p: &mut Partition<Self>, txn: TxnId, _ending: Ending, _commit: bool) {
        let _ = p.release_all(txn);
    }

    /// The locks the rules own across subtransactions (`Owned`), if they
    /// keep any: `Release` and held-back releases then go through them
    /// (the defaults of `release`, `released` and `holder_owner`).
    fn owned(&mut self) -> Option<&mut Owned> {
        None
    }

    /// [`Rules::owned`], to read.
    fn owned_ref(&self) -> Option<&Owned> {
        None
    }

    /// The partition starts (after its recovery from the log, before its
    /// first message).
    fn started(_p: &mut Partition<Self>) {}

    /// Every few milliseconds (`EXPIRE_TICK`), between messages.
    fn tick(_p: &mut Partition<Self>) {}

    /// `owner` released every lock it owned here (`Release` completed its
    /// last stage): what else the rules keep of it goes too.
    fn forget(_p: &mut Partition<Self>, _owner: TxnId) {}

    /// `Release`: the coordinator lets `owner`'s kept locks go, in
    /// `stages`; `reply` once all went.
    fn release(
        p: &mut Partition<Self>,
        owner: TxnId,
        stages: std::vec::IntoIter<ReleaseStage>,
        reply: Reply<()>,
    ) {
        if p.rules.owned_ref().is_some() {
            p.release_owned(owner, stages, reply);
        } else {
            let _ = p.release_all(owner);
            reply.send(());
        }
    }

    /// Locks of `owner` held back by release-order dependencies went
    /// (`whole`: its whole release completed).
    fn released(p: &mut Partition<Self>, owner: TxnId, whole: bool) {
        if p.rules.owned_ref().is_some() {
            p.answer_releases(owner, whole);
        }
    }

    /// Whom a lock holder's held-back release answers to (a forked
    /// holder's owner).
    fn holder_owner(p: &Partition<Self>, holder: TxnId) -> TxnId {
        p.rules.owned_ref().map_or(holder, |o| o.owner_of(holder))
    }

    /// Loads initial rows of `table` (`PartitionMsg::Load`, without a
    /// log): into the engine's store, and wherever else the rules keep
    /// rows (Mediator: as the first versions). The first error stops it.
    fn load(p: &mut Partition<Self>, table: TableId, rows: Vec<Row>) -> Result<()> {
        for row in rows {
            p.store.load(table, row)?;
        }
        Ok(())
    }

    /// Whether loads through the log ([`Rules::loaded_durably`]) must
    /// hand the rules their rows (a copy of each).
    const KEEPS_LOADED_ROWS: bool = false;

    /// Rows of `table` loaded through the log (a durable cluster's loads
    /// go there, not through [`Rules::load`]), after the store took them:
    /// the rules keep those the store holds wherever else they keep rows.
    fn loaded_durably(_p: &mut Partition<Self>, _table: TableId, _rows: Vec<Row>) {}

    /// A message of the protocol's own (`PartitionMsg::Protocol`).
    fn message(_p: &mut Partition<Self>, _msg: Box<dyn Any + Send>) -> Result<()> {
        Err(Error::Internal(
            "a protocol message reached a partition whose protocol has none".into(),
        ))
    }
}

/// The engine's own rules: strict two-phase locking (`acid`, `raw`).
#[derive(Debug, Default)]
pub struct Plain;

impl Rules for Plain {}
