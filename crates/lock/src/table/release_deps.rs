//! Release-order dependencies: "this lock cannot be released before that
//! transaction releases that lock" (Salt's saline rules, Callas' nexus
//! release order). Recording them, performing the releases they held back
//! once they are satisfied, moving a lock to a holder of its own
//! ([`LockTable::fork_hold`]), and staged releases
//! ([`LockTable::begin_staged_release`]).

use super::compat::LockClass;
use super::range::split;
use super::{DeadlockPolicy, LockTable, Wakeup};
use brine_core::{Error, LockTarget, TxnId};

/// "`target` (or every lock, if None) of the owning txn cannot be released
/// before `on` has released `on_target` (or every lock, if None)". Only
/// unsatisfied dependencies are stored: they are dropped as soon as `on`
/// releases the lock they name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Dep {
    pub(super) target: Option<LockTarget>,
    pub(super) on: TxnId,
    pub(super) on_target: Option<LockTarget>,
}

impl LockTable {
    /// Records that `txn`'s lock on `target` (every lock of `txn`, if None)
    /// cannot be released before `on` releases its lock on `on_target`
    /// (every lock it holds here, if None). A dependency that is already
    /// satisfied (`on` does not hold what it names) is not recorded.
    /// Dependencies must not form cycles: the caller derives them from
    /// real-time order (Salt's read-after-write and write-after-read rules,
    /// Callas' group order), which cannot.
    pub fn add_release_dependency(
        &mut self,
        txn: TxnId,
        target: Option<&LockTarget>,
        on: TxnId,
        on_target: Option<&LockTarget>,
    ) -> Result<(), Error> {
        if txn == on {
            match (target, on_target) {
                (Some(a), Some(b)) if a != b => {}
                _ => {
                    return Err(Error::Internal(format!(
                        "{txn}: a release dependency of a transaction on itself must name two different targets"
                    )))
                }
            }
        }
        let satisfied = match self.txns.get(&on) {
            None => true,
            Some(s) => match on_target {
                Some(t) => !s.held.contains(t),
                None => s.held.is_empty(),
            },
        };
        if satisfied {
            return Ok(());
        }
        let dep = Dep {
            target: target.cloned(),
            on,
            on_target: on_target.cloned(),
        };
        let st = self.txns.entry(txn).or_default();
        if st.deps.contains(&dep) {
            return Ok(());
        }
        if st.deps.len() >= self.config.max_deps_per_txn {
            self.stats.bound_errors += 1;
            return Err(Error::Bound(format!(
                "{txn} already has {} release dependencies (max_deps_per_txn)",
                st.deps.len()
            )));
        }
        st.deps.push(dep);
        self.graph_changes += 1;
        if let Some(on_state) = self.txns.get_mut(&on) {
            if !on_state.dependants.contains(&txn) {
                on_state.dependants.push(txn);
            }
        }
        Ok(())
    }

    /// Salt: moves `txn`'s saline locks on exactly `target` to `alias`, a
    /// holder of its own whose parent is `txn`, with the release-order
    /// dependencies that lock carries and those others carry on it. An
    /// operation of a later subtransaction on a row an earlier one locked
    /// then holds a lock of its own, released at its own stage: the seed's
    /// rules are per operation (seed 000 section 3.3; the prototype queues
    /// one lock per operation, section 3.4.3), and one lock per row moved
    /// the earlier operation's release behind the later one's, behind
    /// dependencies other BASE transactions depended on in turn, closing
    /// release cycles among finished transactions. `alias` keeps `txn`'s
    /// protection and waits, for the deadlock searches, for `txn`. Returns
    /// whether `txn` held a saline lock there to move.
    pub fn fork_hold(&mut self, txn: TxnId, target: &LockTarget, alias: TxnId) -> bool {
        debug_assert_ne!(txn, alias);
        let (sk, local) = split(target);
        let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) else {
            return false;
        };
        let mut moved = false;
        let mut still_holds = false;
        for h in e.holders.iter_mut().filter(|h| h.txn == txn) {
            if h.mode.class == LockClass::Saline {
                h.txn = alias;
                moved = true;
            } else {
                still_holds = true;
            }
        }
        if !moved {
            return false;
        }
        // Two saline holders of the same mode under `alias` (a second fork
        // of the same row into the same alias) are one.
        e.merge_modes_of(alias);
        let Some(st) = self.txns.get_mut(&txn) else {
            return true;
        };
        if !still_holds {
            st.held.retain(|t| t != target);
        }
        let (protected, gate_granted) = (st.protected, st.gate_granted);
        let mut carried = Vec::new();
        st.deps.retain(|d| {
            let mine = d.target.as_ref() == Some(target);
            if mine {
                carried.push(d.clone());
            }
            !mine
        });
        let dependants = st.dependants.clone();
        if !st.children.contains(&alias) {
            st.children.push(alias);
        }
        let a = self.txns.entry(alias).or_default();
        a.parent = Some(txn);
        a.protected |= protected;
        a.gate_granted |= gate_granted;
        if !a.held.contains(target) {
            a.held.push(target.clone());
        }
        for d in &carried {
            if !a.deps.contains(d) {
                a.deps.push(d.clone());
            }
        }
        for d in &carried {
            if let Some(on) = self.txns.get_mut(&d.on) {
                if !on.dependants.contains(&alias) {
                    on.dependants.push(alias);
                }
            }
        }
        // Those who depend on the lock now depend on the alias's.
        for d in dependants {
            let Some(ds) = self.txns.get_mut(&d) else {
                continue;
            };
            let mut repointed = false;
            for dep in ds.deps.iter_mut() {
                if dep.on == txn && dep.on_target.as_ref() == Some(target) {
                    dep.on = alias;
                    repointed = true;
                }
            }
            if repointed {
                let mut i = 0;
                while i < ds.deps.len() {
                    if ds.deps[..i].contains(&ds.deps[i]) {
                        ds.deps.remove(i);
                    } else {
                        i += 1;
                    }
                }
                let a = self.txns.get_mut(&alias).expect("alias state");
                if !a.dependants.contains(&d) {
                    a.dependants.push(d);
                }
            }
        }
        true
    }

    /// Salt: `txn` has begun releasing its locks in stages, each stage only
    /// after the one before it went (the coordinator sends them in order).
    /// From now on a request waiting for any of its locks also waits for
    /// every transaction its release-order dependencies name, so the
    /// detector sees the cycles that run through a later stage (an ACID
    /// reader queued on a row of the last stage, ahead of the writer the
    /// first stage waits for). Those edges are new: every cycle through
    /// `txn` is looked for, and broken, at once.
    pub fn begin_staged_release(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        if st.staged {
            return;
        }
        st.staged = true;
        if st.deps.is_empty() || self.config.policy != DeadlockPolicy::Detect {
            return;
        }
        self.graph_changes += 1;
        // Every cycle the new edges close runs through `txn`.
        self.break_cycles_through(txn, wakeups);
    }

    /// Whether a release-order dependency still holds back `txn`'s lock on
    /// `target` (whether or not a release of it was asked for).
    pub fn release_blocked(&self, txn: TxnId, target: &LockTarget) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.is_blocked(target))
    }

    /// Moves into `out` the transactions some of whose release-order
    /// dependencies were satisfied, or whose held-back single releases
    /// (`release` answered while a dependency held the lock back) happened,
    /// since the last call, so a caller waiting for them looks only at
    /// those.
    pub fn take_released_held_back(&mut self, out: &mut Vec<TxnId>) {
        out.append(&mut self.held_back_progress);
    }

    /// One pass of a `release_all` in progress: releases every held target
    /// that no dependency holds back. Returns whether anything was released.
    fn release_pass(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(st) = self.txns.get_mut(&txn) else {
            return false;
        };
        let held = std::mem::take(&mut st.held);
        let mut kept = Vec::new();
        let mut progress = false;
        for target in held {
            if self.txns.get(&txn).is_some_and(|s| s.is_blocked(&target)) {
                kept.push(target);
                continue;
            }
            let removed = self.remove_holders(txn, &target, None);
            self.on_released(txn, Some(&target));
            if removed.may_unblock {
                self.regrant(&target, wakeups);
            }
            progress = true;
        }
        let now_empty = kept.is_empty();
        if let Some(st) = self.txns.get_mut(&txn) {
            st.held = kept;
        }
        if progress && now_empty {
            self.on_released(txn, None);
        }
        progress
    }

    /// `txn` released `target` (or, with None, now holds nothing): drop the
    /// dependencies this satisfies and queue the dependants that may now
    /// complete held-back releases.
    pub(super) fn on_released(&mut self, txn: TxnId, target: Option<&LockTarget>) {
        let dependants = match self.txns.get_mut(&txn) {
            Some(st) if !st.dependants.is_empty() => {
                if target.is_none() {
                    std::mem::take(&mut st.dependants)
                } else {
                    st.dependants.clone()
                }
            }
            _ => return,
        };
        for d in dependants {
            let Some(ds) = self.txns.get_mut(&d) else {
                continue;
            };
            let before = ds.deps.len();
            ds.deps.retain(|dep| {
                !(dep.on == txn && (target.is_none() || dep.on_target.as_ref() == target))
            });
            if ds.deps.len() != before && !self.held_back_progress.contains(&d) {
                self.held_back_progress.push(d);
            }
            if (ds.releasing || !ds.pending.is_empty()) && !self.worklist.contains(&d) {
                self.worklist.push(d);
            }
            if d != txn {
                self.maybe_drop_txn(d);
            }
        }
    }

    pub(super) fn drain_worklist(&mut self, wakeups: &mut Vec<Wakeup>) {
        while let Some(d) = self.worklist.pop() {
            self.try_complete(d, wakeups);
        }
    }

    /// Performs every held-back release of `txn` that its dependencies now
    /// allow; finishes a `release_all` whose last lock went.
    pub(super) fn try_complete(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        loop {
            let Some(st) = self.txns.get_mut(&txn) else {
                return;
            };
            let releasing = st.releasing;
            let pending = std::mem::take(&mut st.pending);
            let mut progress = false;
            let mut kept = Vec::new();
            for (target, access) in pending {
                if self.txns.get(&txn).is_some_and(|s| s.is_blocked(&target)) {
                    kept.push((target, access));
                } else {
                    self.release_single_now(txn, &target, access, wakeups);
                    progress = true;
                    if !self.held_back_progress.contains(&txn) {
                        self.held_back_progress.push(txn);
                    }
                }
            }
            if let Some(st) = self.txns.get_mut(&txn) {
                st.pending.extend(kept);
            }
            if releasing && self.release_pass(txn, wakeups) {
                progress = true;
            }
            // Without dependencies left, one pass released all it could.
            let settled = match self.txns.get(&txn) {
                None => true,
                Some(s) => s.deps.is_empty() && s.pending.is_empty(),
            };
            if !progress || settled {
                break;
            }
        }
        let Some(st) = self.txns.get(&txn) else {
            return;
        };
        if st.releasing {
            if st.held.is_empty() {
                debug_assert!(st.waiting.is_empty());
                let deferred = st.deferred;
                self.txns.remove(&txn);
                if deferred {
                    wakeups.push(Wakeup::Released { txn });
                }
            }
        } else {
            self.maybe_drop_txn(txn);
        }
    }
}
