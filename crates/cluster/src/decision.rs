//! A multi-process node's record of its commit decisions, for participants
//! on other nodes that restart with a prepared transaction and must ask
//! its coordinator what became of it.
//!
//! ```text
//!  coordinator (this node)                     participant (restarted node)
//!  preparing(T) ── Prepare ──► ... crash ...    recovery: T prepared, no outcome
//!  votes all Yes: try_decide(T)?                 ── Decision?(T) ──► ask(T):
//!    Preparing -> Deciding, log the decision         committed        -> Committed
//!    Vetoed    -> abort T                            Preparing        -> Vetoed, Aborted
//!  decided(T, commit)                                Deciding         -> Undecided (ask again)
//!                                                    unknown          -> Aborted (presumed abort)
//! ```
//!
//! Guarantee: `ask` never answers Aborted for a transaction this node
//! commits, nor Committed for one it aborts. An inquiry that finds the
//! transaction still preparing vetoes it, so the coordinator's later
//! `try_decide` fails and the transaction aborts everywhere. A node that
//! restarted knows only the decisions in its log: anything it had in
//! flight was never decided, so "unknown" is an abort.
//!
//! The committed set holds every decision of this node's log, which is not
//! compacted yet (docs/operations.md, limits).

use std::collections::{HashMap, HashSet};

use brine_core::TxnId;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// What a coordinator answers about a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Inquiry {
    Committed,
    Aborted,
    /// The decision is being made durable: ask again shortly.
    Undecided,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Preparing,
    Vetoed,
    Deciding,
}

#[derive(Default)]
struct Book {
    committed: HashSet<TxnId>,
    open: HashMap<TxnId, Phase>,
}

/// See the module documentation.
#[derive(Default)]
pub struct DecisionBook {
    book: Mutex<Book>,
}

impl DecisionBook {
    /// A book that knows the decisions recovered from the node's log.
    pub fn recovered(committed: HashSet<TxnId>) -> DecisionBook {
        DecisionBook {
            book: Mutex::new(Book {
                committed,
                open: HashMap::new(),
            }),
        }
    }

    /// Two-phase commit of `txn` begins (before any Prepare is sent).
    pub fn preparing(&self, txn: TxnId) {
        self.book.lock().open.insert(txn, Phase::Preparing);
    }

    /// Every vote was Yes: may `txn` commit? False if an inquiry vetoed it.
    pub fn try_decide(&self, txn: TxnId) -> bool {
        let mut b = self.book.lock();
        match b.open.get_mut(&txn) {
            Some(p @ Phase::Preparing) => {
                *p = Phase::Deciding;
                true
            }
            Some(Phase::Vetoed) => {
                b.open.remove(&txn);
                false
            }
            Some(Phase::Deciding) | None => {
                debug_assert!(false, "try_decide({txn}) outside preparing");
                false
            }
        }
    }

    /// The outcome of `txn` is final (a commit is durable in the log).
    pub fn decided(&self, txn: TxnId, committed: bool) {
        let mut b = self.book.lock();
        b.open.remove(&txn);
        if committed {
            b.committed.insert(txn);
        }
    }

    /// A restarted participant asks about `txn`.
    pub fn ask(&self, txn: TxnId) -> Inquiry {
        let mut b = self.book.lock();
        if b.committed.contains(&txn) {
            return Inquiry::Committed;
        }
        match b.open.get_mut(&txn) {
            Some(p @ Phase::Preparing) => {
                *p = Phase::Vetoed;
                Inquiry::Aborted
            }
            Some(Phase::Deciding) => Inquiry::Undecided,
            Some(Phase::Vetoed) | None => Inquiry::Aborted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: u64) -> TxnId {
        TxnId { ts: id, id }
    }

    #[test]
    fn an_inquiry_during_prepare_vetoes_the_commit() {
        let book = DecisionBook::default();
        book.preparing(t(1));
        assert_eq!(book.ask(t(1)), Inquiry::Aborted);
        assert!(!book.try_decide(t(1)), "vetoed: must abort");
        assert_eq!(book.ask(t(1)), Inquiry::Aborted);
    }

    #[test]
    fn an_inquiry_while_deciding_waits_then_sees_the_decision() {
        let book = DecisionBook::default();
        book.preparing(t(2));
        assert!(book.try_decide(t(2)));
        assert_eq!(book.ask(t(2)), Inquiry::Undecided);
        book.decided(t(2), true);
        assert_eq!(book.ask(t(2)), Inquiry::Committed);
    }

    #[test]
    fn unknown_and_failed_decisions_are_aborts() {
        let book = DecisionBook::recovered([t(3)].into_iter().collect());
        assert_eq!(book.ask(t(3)), Inquiry::Committed, "recovered from the log");
        assert_eq!(book.ask(t(4)), Inquiry::Aborted, "presumed abort");
        book.preparing(t(5));
        assert!(book.try_decide(t(5)));
        book.decided(t(5), false); // the decision log failed
        assert_eq!(book.ask(t(5)), Inquiry::Aborted);
    }
}
