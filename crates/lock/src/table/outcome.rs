//! What table operations answer: the ticket of a waiting request, the
//! answers to [`LockTable::acquire`] and [`LockTable::release_all`], and the
//! [`Wakeup`]s they produce for other transactions.

#[cfg(doc)]
use super::LockTable;
use brine_core::{AbortCause, TxnId};
use std::fmt;

/// Names one waiting request. Tickets are handed out in arrival order, so
/// they also are the FIFO order of fresh requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The immediate answer to [`LockTable::acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is held. `newly` is false if a lock the transaction already
    /// held on this target (same class, same or stronger access) covers it.
    Granted { newly: bool },
    /// The request waits; a later [`Wakeup`] with this ticket ends the wait.
    Waiting(Ticket),
    /// The requester must abort (wait-die victim, or victim of the deadlock
    /// its wait would have closed). Nothing of the request stays in the table;
    /// the transaction's other locks stay held until `release_all`.
    Abort(AbortCause),
}

/// Events produced by table operations for the partition to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// The waiting request `ticket` of `txn` now holds its lock.
    Granted { txn: TxnId, ticket: Ticket },
    /// The waiting request `ticket` of `txn` was removed; `txn` must abort.
    Aborted {
        txn: TxnId,
        ticket: Ticket,
        cause: AbortCause,
    },
    /// A deferred `release_all` of `txn` has completed: it holds nothing.
    Released { txn: TxnId },
}

/// The answer to [`LockTable::release_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Every lock of the transaction is released.
    Done,
    /// Some locks wait for release-order dependencies; a
    /// [`Wakeup::Released`] follows when the last one is released.
    Deferred,
}
