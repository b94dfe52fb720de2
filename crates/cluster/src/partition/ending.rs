//! The end of a transaction at the partition: phase one, commit, abort,
//! and what becomes of its locks (the protocol's rules decide that last).

use std::sync::atomic::Ordering;

use brine_core::{AbortCause, Error, TxnId};

use super::{now, Partition, Rules};
use crate::message::{Reply, Vote};
use crate::partition::{Ending, Prepared};

impl<R: Rules> Partition<R> {
    /// Phase one of two-phase commit here (`PartitionMsg::Prepare`).
    pub(super) fn prepare(&mut self, txn: TxnId, ending: Ending, hold: bool, reply: Reply<Vote>) {
        if R::prepare_waits(self, txn) {
            self.held_prepares.push((txn, ending, hold, reply));
            return;
        }
        // Nothing can make a live participant refuse yet (no constraint is
        // deferred to commit, and no log can fail) but its rules (a
        // transaction aborted here meanwhile); a participant that wrote
        // nothing is done after phase one unless told to `hold` its locks
        // until phase two. A subtransaction whose rules keep a context of
        // what it ran here logs it even if it wrote nothing.
        let context = match R::prepare(self, txn) {
            Prepared::Refuse => {
                reply.send(Vote::No);
                return;
            }
            Prepared::Go { context } => context,
        };
        if self.store.has_writes(txn) || context.is_some() {
            match &mut self.wal {
                Some(wal) => {
                    if let Some(c) = context {
                        wal.log_context(c, false);
                    }
                    wal.prepare(&self.store, txn, reply)
                }
                None => reply.send(Vote::Yes),
            }
        } else {
            if !hold {
                self.end_txn(txn, ending, true);
            }
            match &self.wal {
                Some(wal) => wal.after_durable(reply, Vote::ReadOnly),
                None => reply.send(Vote::ReadOnly),
            }
        }
    }

    /// Commits `txn` here (a one-round commit, phase two, or a
    /// subtransaction's own commit) and answers `value`. Logged before the
    /// store forgets the undo the redo is read from; answered by the log
    /// writer once durable.
    pub fn commit<T: Send + 'static>(
        &mut self,
        txn: TxnId,
        ending: Ending,
        reply: Reply<T>,
        value: T,
    ) {
        match &mut self.wal {
            Some(_) => {
                let context = R::commit_context(self, txn);
                if let Some(wal) = &mut self.wal {
                    if let Some(c) = context {
                        wal.log_context(c, true);
                    }
                    wal.commit(&self.store, txn, reply, value);
                }
                self.end_txn(txn, ending, true);
            }
            None => {
                self.end_txn(txn, ending, true);
                reply.send(value);
            }
        }
    }

    /// Asks the rules again about the phase-one requests they held back
    /// (a transaction ended here), until none more can go.
    fn retry_held_prepares(&mut self) {
        if self.retrying_prepares || self.held_prepares.is_empty() {
            return;
        }
        self.retrying_prepares = true;
        loop {
            let held = std::mem::take(&mut self.held_prepares);
            let before = held.len();
            for (txn, ending, hold, reply) in held {
                self.prepare(txn, ending, hold, reply);
            }
            if self.held_prepares.is_empty() || self.held_prepares.len() == before {
                break;
            }
        }
        self.retrying_prepares = false;
    }

    /// `txn` aborted (or was abandoned): its rules and the log forget it.
    pub fn forget_aborted(&mut self, txn: TxnId) {
        if let Some(i) = self.held_prepares.iter().position(|h| h.0 == txn) {
            let (_, _, _, reply) = self.held_prepares.swap_remove(i);
            reply.send(Vote::No);
        }
        R::aborted(self, txn);
        if let Some(wal) = &mut self.wal {
            wal.abort(txn);
        }
    }

    /// Ends `txn` here: its writes are kept or undone, and its locks go or
    /// stay as `ending` and the rules say.
    pub fn end_txn(&mut self, txn: TxnId, ending: Ending, commit: bool) {
        let owner = ending.owner(txn);
        if let Some(p) = self.parked.remove(&owner) {
            // Abort while a statement waits (the coordinator gave up on it).
            self.locks.cancel_waits(owner, &mut self.wakeups);
            p.stmt.reply.send(Err(Error::Aborted(AbortCause::Cascade)));
        }
        R::ending(self, owner);
        if commit {
            self.store.commit(txn);
            self.counters.commits.fetch_add(1, Ordering::Relaxed);
            R::committed(self, txn);
        } else {
            R::undo(self, txn);
            self.counters.aborts.fetch_add(1, Ordering::Relaxed);
        }
        R::end_locks(self, txn, ending, commit);
        self.process_wakeups();
        self.retry_held_prepares();
    }

    /// Releases every lock `owner` holds here (what release-order
    /// dependencies hold back goes when they allow) and counts its holds.
    pub fn release_all(&mut self, owner: TxnId) -> brine_lock::ReleaseOutcome {
        let outcome = self.locks.release_all(owner, &mut self.wakeups);
        self.count_holds(owner);
        outcome
    }

    /// Adds `owner`'s lock holds here to the per-table counters.
    pub fn count_holds(&mut self, owner: TxnId) {
        let Some(held) = self.held_since.remove(&owner) else {
            return;
        };
        let at = now();
        for (slot, since) in held {
            let ns = at.saturating_duration_since(since).as_nanos() as u64;
            self.counters.lock_holds_by_table[slot as usize].fetch_add(1, Ordering::Relaxed);
            self.counters.lock_hold_ns_by_table[slot as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }
}
