//! Holders and FIFO wait queues: the [`Entry`] of one exact target, who
//! makes a request wait ([`View`]), and a request's way through them:
//! acquired at once or queued, granted when nothing blocks it any more
//! ([`LockTable::regrant`] after every change), or removed.
//!
//! Hot path: `acquire_as` runs on every lock request, `regrant` and
//! `grant_waiter` on every change that may let a waiter in; an allocation
//! or an extra pass over the overlapping entries here costs every
//! transaction.

use super::compat::{Compatibility, LockClass, Mode};
use super::deadlock::outranks;
use super::display::describe;
use super::gate::{is_protected, may_upgrade, Gating, Kind};
use super::range::{split, Local, Space, SpaceKey};
use super::{Acquire, DeadlockPolicy, LockTable, Map, Ticket, TxnState, Wakeup};
use brine_core::{AbortCause, Error, LockTarget, TxnId};
use smallvec::SmallVec;
use std::time::Instant;

/// Queue position: upgrades (0) before fresh requests (1), then arrival.
pub(super) type Order = (u8, u64);

/// Past every queue position: see [`LockTable::kill_younger_bypassed`].
pub(super) const GATED_ONLY: Order = (u8::MAX, u64::MAX);

#[inline]
pub(super) fn order(upgrade: bool, ticket: Ticket) -> Order {
    (u8::from(!upgrade), ticket.0)
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Holder {
    pub(super) txn: TxnId,
    pub(super) mode: Mode,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Queued {
    pub(super) ticket: Ticket,
    pub(super) txn: TxnId,
    pub(super) mode: Mode,
    pub(super) upgrade: bool,
    /// A gated request ([`LockTable::acquire_gated`]): never granted
    /// before [`LockTable::ungate`]; see [`Kind`] for who passes it.
    pub(super) gated: bool,
    /// Gated: nothing it must wait for is left (it would be granted now).
    pub(super) ready: bool,
    /// Was gated, and was ungated ([`Kind::Opened`]).
    pub(super) opened: bool,
    /// An unprotected transaction's fresh request that queued behind a
    /// gated one: it waits for the gate to open, and meanwhile makes no
    /// one wait ([`View::queued_blocks`]).
    pub(super) behind_gate: bool,
}

impl Queued {
    #[inline]
    pub(super) fn order(&self) -> Order {
        order(self.upgrade, self.ticket)
    }
}

/// Granted holders and the wait queue of one exact target. A transaction may
/// appear several times among the holders with different modes, never twice
/// with the same mode. The queue is sorted by `Order`.
#[derive(Default)]
pub(super) struct Entry {
    pub(super) holders: SmallVec<[Holder; 2]>,
    pub(super) queue: SmallVec<[Queued; 1]>,
}

impl Entry {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }

    /// Keeps one holder per mode of `txn` (after its modes changed class
    /// or owner); returns its modes.
    pub(super) fn merge_modes_of(&mut self, txn: TxnId) -> SmallVec<[Mode; 4]> {
        let mut seen: SmallVec<[Mode; 4]> = SmallVec::new();
        self.holders.retain(|h| {
            if h.txn != txn {
                return true;
            }
            if seen.contains(&h.mode) {
                return false;
            }
            seen.push(h.mode);
            true
        });
        seen
    }
}

/// A request as its queue sees it: whose, on what, in which mode, its
/// place in the queue, and what kind of request it is.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub(super) txn: TxnId,
    pub(super) t: Local<'a>,
    pub(super) mode: Mode,
    pub(super) before: Order,
    pub(super) kind: Kind,
}

/// What the blocking rules read besides the space.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) compat: &'a dyn Compatibility,
    pub(super) txns: &'a Map<TxnId, TxnState>,
}

impl View<'_> {
    /// Whether holder `h` makes request `r` wait.
    pub(super) fn holder_blocks(&self, r: &Request<'_>, h: &Holder) -> bool {
        h.txn != r.txn
            && (!self.compat.compatible(h.mode, r.mode)
                || (r.kind == Kind::Gated && may_upgrade(self.txns, h.txn)))
    }

    /// Whether the queued request `q` makes `r` wait: it is ahead and
    /// conflicts, or it is a gated request ahead that `r` does not pass
    /// (see [`Kind`]). A request queued behind a gate (`behind_gate`)
    /// makes no one wait: until the gate opens it is as if it had not
    /// arrived, so a protected transaction or another gated request is
    /// not held up by a request that waits for a gate in turn.
    pub(super) fn queued_blocks(&self, r: &Request<'_>, q: &Queued) -> bool {
        if q.txn == r.txn || q.order() >= r.before || q.behind_gate {
            return false;
        }
        let conflicts = !self.compat.compatible(q.mode, r.mode);
        match (q.gated, r.kind) {
            (true, Kind::Protected) => false,
            (true, Kind::Plain) => true,
            _ => conflicts,
        }
    }
}

/// The other transactions the request must wait for, each once: holders
/// and queued requests that make it wait (see [`View`]) on overlapping
/// targets.
pub(super) fn collect_blockers(
    space: &Space,
    v: View<'_>,
    r: Request<'_>,
    out: &mut SmallVec<[TxnId; 4]>,
) {
    space.for_each_overlapping(r.t, |e| {
        for h in &e.holders {
            if v.holder_blocks(&r, h) && !out.contains(&h.txn) {
                out.push(h.txn);
            }
        }
        for q in e.queue.iter().take_while(|q| q.order() < r.before) {
            if v.queued_blocks(&r, q) && !out.contains(&q.txn) {
                out.push(q.txn);
            }
        }
    });
}

/// Whether the request must wait: [`collect_blockers`] without the list,
/// stopping at the first blocker. A regrant asks this of every request
/// queued on a target, so on a long queue collecting the list (and its
/// duplicate check) made a release cost the cube of the queue's length.
pub(super) fn is_blocked(space: &Space, v: View<'_>, r: Request<'_>) -> bool {
    let mut blocked = false;
    space.for_each_overlapping(r.t, |e| {
        blocked = blocked
            || e.holders.iter().any(|h| v.holder_blocks(&r, h))
            || e.queue
                .iter()
                .take_while(|q| q.order() < r.before)
                .any(|q| v.queued_blocks(&r, q));
    });
    blocked
}

/// The queue entry of the waiting request `ticket` on `target`.
pub(super) fn queued<'s>(
    spaces: &'s Map<SpaceKey, Space>,
    target: &LockTarget,
    ticket: Ticket,
) -> Option<&'s Queued> {
    let (sk, local) = split(target);
    let e = spaces.get(&sk)?.entry(local)?;
    e.queue.iter().find(|q| q.ticket == ticket)
}

/// [`queued`], to change it.
pub(super) fn queued_mut<'s>(
    spaces: &'s mut Map<SpaceKey, Space>,
    target: &LockTarget,
    ticket: Ticket,
) -> Option<&'s mut Queued> {
    let (sk, local) = split(target);
    let e = spaces.get_mut(&sk)?.entry_mut(local)?;
    e.queue.iter_mut().find(|q| q.ticket == ticket)
}

/// A waiting request, found by ticket.
pub(super) struct Wait {
    pub(super) txn: TxnId,
    pub(super) target: LockTarget,
    pub(super) mode: Mode,
    pub(super) upgrade: bool,
    pub(super) gated: bool,
    pub(super) opened: bool,
    pub(super) since: Instant,
}

impl LockTable {
    pub(super) fn view(&self) -> View<'_> {
        View {
            compat: &*self.compat,
            txns: &self.txns,
        }
    }

    /// Requests `mode` on `target` for `txn`.
    ///
    /// Granted at once if compatible with every other transaction's granted
    /// lock on an overlapping target and with every conflicting request
    /// queued ahead. A transaction that already holds a lock on an
    /// overlapping target makes an *upgrade*: it queues ahead of fresh
    /// requests (behind earlier upgrades), so it only waits for holders.
    /// Wakeups of other transactions (deadlock victims, wait-die victims of a
    /// queue-jumping upgrade, grants that follow) are appended to `wakeups`.
    pub fn acquire(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        now: Instant,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        self.acquire_as(txn, target, mode, now, Gating::None, wakeups)
    }

    pub(super) fn acquire_as(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        now: Instant,
        gating: Gating,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        self.stats.acquires += 1;
        if self.txns.get(&txn).is_some_and(|s| s.releasing) {
            return Err(Error::TxnState(format!(
                "{txn} is releasing its locks at this partition and cannot acquire {mode} on {}",
                describe(target)
            )));
        }
        // A protected transaction's request is never gated (it passes them).
        let gated = gating != Gating::None && !is_protected(&self.txns, txn);
        let kind = Kind::of(&self.txns, txn, gated, false);
        let (sk, local) = split(target);
        let space = self.spaces.entry(sk).or_default();
        if matches!(local, Local::Range(..)) {
            space.ensure_ordered();
        }
        // One pass over the overlapping entries: is it covered, is it an
        // upgrade, which holders and queued requests make it wait, is
        // there a gate.
        let v = View {
            compat: &*self.compat,
            txns: &self.txns,
        };
        let mut covered = false;
        let mut upgrade = false;
        let mut gate = false;
        let mut blockers: SmallVec<[TxnId; 4]> = SmallVec::new();
        let mut queued: SmallVec<[(Order, TxnId); 4]> = SmallVec::new();
        let me = Request {
            txn,
            t: local,
            mode,
            before: GATED_ONLY,
            kind,
        };
        space.for_each_overlapping_exact(local, |e, exact| {
            for h in &e.holders {
                if h.txn == txn {
                    upgrade = true;
                    covered |= exact && h.mode.covers(mode);
                } else if v.holder_blocks(&me, h) && !blockers.contains(&h.txn) {
                    blockers.push(h.txn);
                }
            }
            for q in &e.queue {
                if v.queued_blocks(&me, q) {
                    queued.push((q.order(), q.txn));
                }
                gate |= q.gated && q.txn != txn;
            }
        });
        // Upgrades queue ahead of every fresh request, gated ones too.
        let behind_gate = gate && kind == Kind::Plain && !upgrade;
        if covered {
            self.stats.already_held += 1;
            return Ok(Acquire::Granted { newly: false });
        }
        let ticket = Ticket(self.next_ticket);
        let ord = order(upgrade, ticket);
        for (o, t) in queued {
            if o < ord && !blockers.contains(&t) {
                blockers.push(t);
            }
        }

        if blockers.is_empty() && !gated {
            self.add_holder(txn, target, mode);
            self.stats.granted_immediately += 1;
            if (upgrade || self.gated > 0) && self.config.policy == DeadlockPolicy::WaitDie {
                let past = if upgrade { ord } else { GATED_ONLY };
                self.kill_younger_bypassed(txn, target, mode, (past, true), wakeups);
            }
            return Ok(Acquire::Granted { newly: true });
        }
        if blockers.is_empty() && gating == Gating::OpenWhenReady {
            // Ready on arrival, its gate opened: granted as `grant_waiter`
            // grants an opened request.
            self.txns.entry(txn).or_default().gate_granted = true;
            self.add_holder(txn, target, mode);
            self.stats.granted_immediately += 1;
            if self.gated > 0 && self.config.policy == DeadlockPolicy::WaitDie {
                self.kill_younger_bypassed(txn, target, mode, (GATED_ONLY, true), wakeups);
            }
            return Ok(Acquire::Granted { newly: true });
        }

        if self.config.policy == DeadlockPolicy::WaitDie
            && blockers.iter().any(|&b| outranks(&self.txns, b, txn))
        {
            self.stats.aborts_wait_die += 1;
            return Ok(Acquire::Abort(AbortCause::WaitDie));
        }
        let queue_len = space.entry(local).map_or(0, |e| e.queue.len());
        if queue_len >= self.config.max_waiters_per_key {
            self.stats.bound_errors += 1;
            return Err(Error::Bound(format!(
                "{queue_len} requests already wait on {} (max_waiters_per_key); {txn} cannot queue",
                describe(target)
            )));
        }

        self.next_ticket += 1;
        let entry = space.entry_or_insert(local);
        let pos = entry
            .queue
            .iter()
            .position(|q| q.order() > ord)
            .unwrap_or(entry.queue.len());
        let ready = gated && blockers.is_empty();
        entry.queue.insert(
            pos,
            Queued {
                ticket,
                txn,
                mode,
                upgrade,
                gated,
                ready,
                opened: false,
                behind_gate,
            },
        );
        self.waits.insert(
            ticket,
            Wait {
                txn,
                target: target.clone(),
                mode,
                upgrade,
                gated,
                opened: false,
                since: now,
            },
        );
        self.txns.entry(txn).or_default().waiting.push(ticket);
        self.stats.waits += 1;
        if gated {
            self.gated += 1;
            if ready {
                self.gated_ready += 1;
            }
            self.gate_changes.push((txn, ticket, ready));
        } else if upgrade {
            // Queued ahead of fresh requests: a ready gated one behind it
            // may now have to wait for it.
            self.unready_behind(txn, target, mode, Some(ord));
        }

        let answer = match self.config.policy {
            DeadlockPolicy::WaitDie => {
                if upgrade {
                    self.kill_younger_bypassed(txn, target, mode, (ord, false), wakeups);
                }
                Acquire::Waiting(ticket)
            }
            DeadlockPolicy::Detect => self.resolve_deadlocks(txn, ticket, wakeups),
            DeadlockPolicy::TimeoutOnly => Acquire::Waiting(ticket),
        };
        if matches!(answer, Acquire::Waiting(_)) {
            // Its edges may close a cycle through another partition.
            self.graph_changes += 1;
        }
        Ok(answer)
    }

    /// Removes every waiting request of `txn` without counting an abort (the
    /// coordinator aborted it elsewhere). Its held locks stay held.
    pub fn cancel_waits(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let Some(st) = self.txns.get_mut(&txn) else {
            return;
        };
        let waiting = std::mem::take(&mut st.waiting);
        for ticket in waiting {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.regrant(&w.target, wakeups);
            }
        }
        self.maybe_drop_txn(txn);
    }

    pub(super) fn conflicts_with_holders(
        &self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
    ) -> bool {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return false;
        };
        let mut conflict = false;
        space.for_each_overlapping(local, |e| {
            conflict |= e
                .holders
                .iter()
                .any(|h| h.txn != txn && !self.compat.compatible(h.mode, mode));
        });
        conflict
    }

    fn add_holder(&mut self, txn: TxnId, target: &LockTarget, mode: Mode) {
        debug_assert!(
            !self.conflicts_with_holders(txn, target, mode),
            "granting {txn} {mode} on {target:?} beside a conflicting holder"
        );
        let (sk, local) = split(target);
        let e = self.spaces.entry(sk).or_default().entry_or_insert(local);
        let had = e.holders.iter().any(|h| h.txn == txn);
        let new_mode = !e.holders.iter().any(|h| h.txn == txn && h.mode == mode);
        if new_mode {
            e.holders.push(Holder { txn, mode });
        }
        if new_mode && self.gated_ready > 0 {
            self.unready_behind(txn, target, mode, None);
        }
        if !had || (new_mode && mode.class == LockClass::Alkaline) {
            let st = self.txns.entry(txn).or_default();
            if !had {
                st.held.push(target.clone());
            }
            if new_mode && mode.class == LockClass::Alkaline {
                st.alkaline.push(target.clone());
            }
        }
    }

    /// Removes a waiting request from its queue and the indexes. The caller
    /// regrants its target (a removed waiter may have blocked others).
    pub(super) fn remove_wait(
        &mut self,
        ticket: Ticket,
        wakeups: &mut Vec<Wakeup>,
    ) -> Option<Wait> {
        let w = self.waits.remove(&ticket)?;
        let (sk, local) = split(&w.target);
        if let Some(space) = self.spaces.get_mut(&sk) {
            if let Some(e) = space.entry_mut(local) {
                if let Some(pos) = e.queue.iter().position(|q| q.ticket == ticket) {
                    let q = e.queue.remove(pos);
                    if q.gated {
                        self.gated -= 1;
                        self.gated_ready -= usize::from(q.ready);
                        self.reopen_gate(&w.target, wakeups);
                    }
                }
            }
            if let Some(space) = self.spaces.get_mut(&sk) {
                space.prune(local);
            }
        }
        if let Some(st) = self.txns.get_mut(&w.txn) {
            st.waiting.retain(|t| *t != ticket);
        }
        Some(w)
    }

    /// Grants, in queue order, every waiter on a target overlapping `target`
    /// that nothing blocks any more. Only such waiters can have been
    /// unblocked by a change at `target`; granting only adds holders, so one
    /// pass in order is complete.
    pub(super) fn regrant(&mut self, target: &LockTarget, wakeups: &mut Vec<Wakeup>) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut candidates: SmallVec<[(Order, Ticket); 8]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            candidates.extend(e.queue.iter().map(|q| (q.order(), q.ticket)));
        });
        if candidates.is_empty() {
            return;
        }
        candidates.sort_unstable();
        candidates.dedup();
        for (ord, ticket) in candidates {
            let (free, gated) = {
                let Some(w) = self.waits.get(&ticket) else {
                    continue;
                };
                let (wsk, wl) = split(&w.target);
                let Some(space) = self.spaces.get(&wsk) else {
                    continue;
                };
                let r = Request {
                    txn: w.txn,
                    t: wl,
                    mode: w.mode,
                    before: ord,
                    kind: Kind::of(&self.txns, w.txn, w.gated, w.opened),
                };
                (!is_blocked(space, self.view(), r), w.gated)
            };
            if gated {
                self.set_ready(ticket, free);
            } else if free {
                self.grant_waiter(ticket, wakeups);
            }
        }
    }

    pub(super) fn grant_waiter(&mut self, ticket: Ticket, wakeups: &mut Vec<Wakeup>) {
        let Some(w) = self.waits.remove(&ticket) else {
            return;
        };
        let (sk, local) = split(&w.target);
        if let Some(e) = self.spaces.get_mut(&sk).and_then(|s| s.entry_mut(local)) {
            e.queue.retain(|q| q.ticket != ticket);
        }
        if w.opened {
            self.txns.entry(w.txn).or_default().gate_granted = true;
        }
        self.add_holder(w.txn, &w.target, w.mode);
        if let Some(st) = self.txns.get_mut(&w.txn) {
            st.waiting.retain(|t| *t != ticket);
        }
        self.stats.granted_after_wait += 1;
        wakeups.push(Wakeup::Granted { txn: w.txn, ticket });
        if self.gated > 0 && self.config.policy == DeadlockPolicy::WaitDie {
            self.kill_younger_bypassed(w.txn, &w.target, w.mode, (GATED_ONLY, true), wakeups);
        }
    }
}
