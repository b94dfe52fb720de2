//! Releasing and downgrading held locks: one lock ([`LockTable::release`]),
//! a transaction's end ([`LockTable::release_all`]), one class
//! ([`LockTable::release_class`]), and downgrades, which keep a lock but
//! change its class. Each lets in the waiters the change admits. What holds
//! a release back is in `release_deps.rs`.

use super::compat::{LockClass, Mode};
use super::range::{split, Local};
use super::{LockTable, ReleaseOutcome, Wakeup};
use brine_core::{Access, LockTarget, TxnId};

/// What `remove_holders` did.
pub(super) struct Removed {
    pub(super) any: bool,
    pub(super) still_holds: bool,
    /// Some waiter may have been waiting for what was removed.
    pub(super) may_unblock: bool,
}

impl LockTable {
    /// Releases the locks of `txn` on exactly `target` with access `access`
    /// (every class), e.g. a short read lock. If a release-order dependency
    /// holds the lock back, the release happens when the dependency is
    /// released. Releasing something not held is a no-op.
    pub fn release(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Access,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        if st.is_blocked(target) {
            if !st.pending.iter().any(|(t, a)| t == target && *a == access) {
                st.pending.push((target.clone(), access));
                self.stats.deferred_releases += 1;
            }
            return;
        }
        self.release_single_now(txn, target, access, wakeups);
        self.drain_worklist(wakeups);
        self.maybe_drop_txn(txn);
    }

    /// Ends `txn` at this partition: cancels its waits and releases every
    /// lock it holds. Locks held back by release-order dependencies stay held
    /// until those dependencies are released; then the answer is `Deferred`
    /// and a `Wakeup::Released { txn }` follows. Calling it again while
    /// deferred is a no-op answering `Deferred`.
    pub fn release_all(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> ReleaseOutcome {
        let Some(st) = self.txns.get_mut(&txn) else {
            return ReleaseOutcome::Done;
        };
        if st.releasing {
            return ReleaseOutcome::Deferred;
        }
        st.releasing = true;
        st.pending.clear();
        let waiting = std::mem::take(&mut st.waiting);
        for ticket in waiting {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.regrant(&w.target, wakeups);
            }
        }
        self.try_complete(txn, wakeups);
        self.drain_worklist(wakeups);
        match self.txns.get_mut(&txn) {
            Some(st) => {
                st.deferred = true;
                self.stats.deferred_releases += 1;
                ReleaseOutcome::Deferred
            }
            None => ReleaseOutcome::Done,
        }
    }

    /// Changes the class of every lock `txn` holds in class `from` to `to`
    /// (Salt: alkaline to saline when the subtransaction commits). Waiters
    /// the new modes admit are granted.
    pub fn downgrade_all(
        &mut self,
        txn: TxnId,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        let targets = if from == LockClass::Alkaline {
            std::mem::take(&mut st.alkaline)
        } else {
            st.held.clone()
        };
        for target in &targets {
            self.downgrade(txn, target, from, to, wakeups);
        }
        if from == LockClass::Alkaline {
            // Reuse the buffer unless new alkaline grants arrived meanwhile.
            if let Some(st) = self.txns.get_mut(&txn) {
                if st.alkaline.is_empty() {
                    let mut targets = targets;
                    targets.clear();
                    st.alkaline = targets;
                }
            }
        }
    }

    /// Releases every lock `txn` holds in `class`, keeping its locks of
    /// other classes (Callas: a rolled-back piece's member locks go, the
    /// nexus locks of the transaction's committed pieces stay). Locks held
    /// back by release-order dependencies stay. Returns the targets `txn`
    /// no longer holds at all.
    pub fn release_class(
        &mut self,
        txn: TxnId,
        class: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) -> Vec<LockTarget> {
        let Some(st) = self.txns.get(&txn) else {
            return Vec::new();
        };
        let targets: Vec<LockTarget> = st
            .held
            .iter()
            .filter(|t| !st.is_blocked(t))
            .cloned()
            .collect();
        let mut gone = Vec::new();
        for target in targets {
            let removed = self.remove_holders_where(txn, &target, |m| m.class == class);
            if self.settle_removal(txn, &target, removed, wakeups) {
                gone.push(target);
            }
        }
        self.drain_worklist(wakeups);
        self.maybe_drop_txn(txn);
        gone
    }

    /// Single-target variant of [`LockTable::downgrade_all`].
    pub fn downgrade(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        self.downgrade_access(txn, target, None, from, to, wakeups);
    }

    /// [`LockTable::downgrade`] of the locks with exactly `access` only
    /// (every access with `None`), e.g. a statement's short read lock whose
    /// transaction also holds a write on the row.
    pub fn downgrade_access(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Option<Access>,
        from: LockClass,
        to: LockClass,
        wakeups: &mut Vec<Wakeup>,
    ) {
        let (sk, local) = split(target);
        let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) else {
            return;
        };
        let mut changed = false;
        for h in e.holders.iter_mut() {
            if h.txn == txn && h.mode.class == from && access.is_none_or(|a| h.mode.access == a) {
                h.mode.class = to;
                changed = true;
            }
        }
        if !changed {
            return;
        }
        for mode in e.merge_modes_of(txn) {
            debug_assert!(
                !self.conflicts_with_holders(txn, target, mode),
                "downgrade of {txn} on {target:?} to {mode} conflicts with another holder"
            );
        }
        self.regrant(target, wakeups);
    }

    /// Removes `txn`'s holders on exactly `target` whose access matches
    /// `filter` (all, if None). Touches the space only; returns whether
    /// anything was removed and whether the txn still holds a mode there.
    pub(super) fn remove_holders(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        filter: Option<Access>,
    ) -> Removed {
        self.remove_holders_where(txn, target, |m| filter.is_none_or(|a| a == m.access))
    }

    /// [`LockTable::remove_holders`] of the modes `selected` picks.
    fn remove_holders_where(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        selected: impl Fn(&Mode) -> bool,
    ) -> Removed {
        let (sk, local) = split(target);
        let none = Removed {
            any: false,
            still_holds: false,
            may_unblock: false,
        };
        let Some(space) = self.spaces.get_mut(&sk) else {
            return none;
        };
        let has_ranges = !space.ranges.is_empty();
        let Some(e) = space.entry_mut(local) else {
            return none;
        };
        let before = e.holders.len();
        e.holders.retain(|h| !(h.txn == txn && selected(&h.mode)));
        let out = Removed {
            any: e.holders.len() != before,
            still_holds: e.holders.iter().any(|h| h.txn == txn),
            // Waiters elsewhere can only be affected through a range.
            may_unblock: !e.queue.is_empty() || has_ranges || matches!(local, Local::Range(..)),
        };
        if e.is_empty() {
            space.prune(local);
        }
        out
    }

    pub(super) fn release_single_now(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        access: Access,
        wakeups: &mut Vec<Wakeup>,
    ) {
        debug_assert!(
            !self.txns.get(&txn).is_some_and(|s| s.is_blocked(target)),
            "releasing {txn}'s lock on {target:?} with unreleased release dependencies"
        );
        let removed = self.remove_holders(txn, target, Some(access));
        self.settle_removal(txn, target, removed, wakeups);
    }

    /// After some of `txn`'s locks on `target` were removed: if it holds
    /// none there any more, forgets the target and tells what waited for
    /// its release (and, if it holds nothing at all now, for that); lets
    /// waiters the removal may unblock in. Returns whether `txn` no longer
    /// holds `target`.
    fn settle_removal(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        removed: Removed,
        wakeups: &mut Vec<Wakeup>,
    ) -> bool {
        if !removed.any {
            return false;
        }
        if !removed.still_holds {
            let mut now_empty = false;
            if let Some(st) = self.txns.get_mut(&txn) {
                // From the back: a statement's short locks go newest
                // first (`release_short`), so each is found at the end and
                // removed without shifting the rest.
                if let Some(i) = st.held.iter().rposition(|t| t == target) {
                    st.held.remove(i);
                }
                now_empty = st.held.is_empty();
            }
            self.on_released(txn, Some(target));
            if now_empty {
                self.on_released(txn, None);
            }
        }
        if removed.may_unblock {
            self.regrant(target, wakeups);
        }
        !removed.still_holds
    }
}
