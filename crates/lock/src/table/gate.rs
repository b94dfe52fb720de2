//! Gated requests and protected transactions. A gated request
//! ([`LockTable::acquire_gated`], Salt's ACID statements across partitions)
//! keeps its place in the queue but is granted only after
//! [`LockTable::ungate`]; its readiness is reported through
//! [`LockTable::take_gate_changes`]. A protected transaction
//! ([`LockTable::protect`]) can no longer roll back: its requests pass
//! gated ones, and it ranks above every unprotected transaction.

use super::compat::Mode;
use super::deadlock::outranks;
use super::queue::{is_blocked, order, queued, queued_mut, Order, Request};
use super::range::split;
use super::{Acquire, DeadlockPolicy, LockTable, Map, Ticket, TxnState, Wakeup};
use brine_core::{AbortCause, Error, LockTarget, TxnId};
use smallvec::SmallVec;
use std::time::Instant;

/// How a request meets gated ones ([`LockTable::acquire_gated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Waits behind a gated request ahead of it, whatever its mode.
    Plain,
    /// Its transaction is protected: it passes gated requests. It holds
    /// locks it will not give up (an accepted BASE transaction), which
    /// the gated request's transaction may be waiting for at another
    /// partition.
    Protected,
    /// A gated request: it also waits for every holder that may upgrade
    /// (one granted a shared mode beside it may upgrade ahead of it later:
    /// neither protected nor granted through a gate), and waits behind
    /// another gated request only on a conflict.
    Gated,
    /// A gated request since ungated: waits behind gated requests only on
    /// a conflict still (else two statements gated at the same partitions
    /// in different orders would each wait for the other).
    Opened,
}

impl Kind {
    #[inline]
    pub(super) fn of(txns: &Map<TxnId, TxnState>, txn: TxnId, gated: bool, opened: bool) -> Kind {
        if gated {
            Kind::Gated
        } else if opened {
            Kind::Opened
        } else if is_protected(txns, txn) {
            Kind::Protected
        } else {
            Kind::Plain
        }
    }
}

/// Who opens the gate of a gated request ([`LockTable::acquire_gated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateOpens {
    /// Only [`LockTable::ungate`] (Salt: the coordinator, once every
    /// partition of the statement is ready).
    OnUngate,
    /// Its partition, as soon as it is ready (Salt: a read under read
    /// committed, whose lock ends with its statement): a request ready on
    /// arrival is granted at once, as queueing it and opening its gate
    /// would (nothing is queued behind the newest request, so no one
    /// else's turn or readiness changes); one that is not waits, and its
    /// partition ungates it when it reports ready.
    WhenReady,
}

/// Whether a request is gated and how its gate opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gating {
    None,
    /// Until [`LockTable::ungate`].
    Held,
    /// Granted at once if ready on arrival; else as `Held`.
    OpenWhenReady,
}

impl LockTable {
    /// Queues a *gated* request of `mode` on `target` for `txn`, a
    /// transaction that holds no lock anywhere yet (Salt: the first
    /// statement of an ACID transaction that spans partitions). It takes
    /// its place in the queue like any request, so fresh requests queue
    /// behind it, but it is not granted until its gate opens (`opens`):
    /// while the transaction waits for its turn at another partition it
    /// holds nothing here, and the requests of protected transactions
    /// (accepted BASE transactions, which it may be waiting for there)
    /// pass it. Whether it could be granted (it is
    /// *ready*) is reported through [`LockTable::take_gate_changes`] each
    /// time it changes, starting with its state now. Answers `Waiting`,
    /// or `Abort` under wait-die; with [`GateOpens::WhenReady`] also
    /// `Granted` when it is ready on arrival. The transaction must not be
    /// protected ([`LockTable::protect`]) while the request is gated; a
    /// protected transaction's request is acquired as by
    /// [`LockTable::acquire`].
    pub fn acquire_gated(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        opens: GateOpens,
        now: Instant,
        wakeups: &mut Vec<Wakeup>,
    ) -> Result<Acquire, Error> {
        let gating = match opens {
            GateOpens::OnUngate => Gating::Held,
            GateOpens::WhenReady => Gating::OpenWhenReady,
        };
        self.acquire_as(txn, target, mode, now, gating, wakeups)
    }

    /// Marks `txn` as unable to roll back any more (an accepted Salt BASE
    /// transaction, a chopped Callas transaction whose first writing piece
    /// committed): it ranks above every unprotected transaction, so a
    /// victim is never chosen from it when another member of a cycle can
    /// go, and under wait-die it never dies while whoever would wait for
    /// it does. Requests already waiting here for its locks (or queued
    /// behind a request of its own) were older than it and may wait no
    /// longer: under wait-die they abort now (else
    /// the protected transaction, waiting for one of them elsewhere, would
    /// close a cycle no one breaks). A second call is a no-op. The
    /// protection lasts until the transaction's
    /// [`LockTable::release_all`] here.
    pub fn protect(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) {
        let st = self.txns.entry(txn).or_default();
        if st.protected {
            return;
        }
        debug_assert!(
            !st.waiting
                .iter()
                .any(|t| self.waits.get(t).is_some_and(|w| w.gated)),
            "{txn} protected while a request of its own is gated"
        );
        st.protected = true;
        if self.gated > 0 {
            // Its waiting requests now pass gated ones, and its locks no
            // longer keep gated ones from being ready.
            let targets: SmallVec<[LockTarget; 2]> = st
                .waiting
                .iter()
                .filter_map(|t| self.waits.get(t).map(|w| w.target.clone()))
                .chain(st.held.iter().cloned())
                .collect();
            for t in &targets {
                self.regrant(t, wakeups);
            }
        }
        if self.config.policy != DeadlockPolicy::WaitDie {
            return;
        }
        let Some(st) = self.txns.get(&txn) else {
            return;
        };
        let compat = &*self.compat;
        let mut victims: SmallVec<[Ticket; 4]> = SmallVec::new();
        for target in &st.held {
            let (sk, local) = split(target);
            let Some(space) = self.spaces.get(&sk) else {
                continue;
            };
            // Its modes on exactly `target`, against the requests queued
            // on every overlapping target (a range waiter too).
            let Some(held) = space.entry(local) else {
                continue;
            };
            let mine: SmallVec<[Mode; 2]> = held
                .holders
                .iter()
                .filter(|h| h.txn == txn)
                .map(|h| h.mode)
                .collect();
            space.for_each_overlapping(local, |e| {
                for q in &e.queue {
                    if q.txn != txn && mine.iter().any(|&m| !compat.compatible(m, q.mode)) {
                        victims.push(q.ticket);
                    }
                }
            });
        }
        victims.sort_unstable();
        victims.dedup();
        victims.retain(|t| {
            self.waits
                .get(t)
                .is_some_and(|w| outranks(&self.txns, txn, w.txn))
        });
        let queued: SmallVec<[(Ticket, LockTarget, Mode, Order); 1]> = st
            .waiting
            .iter()
            .filter_map(|t| {
                let w = self.waits.get(t)?;
                Some((*t, w.target.clone(), w.mode, order(w.upgrade, *t)))
            })
            .collect();
        for ticket in victims {
            self.stats.count_abort(AbortCause::WaitDie);
            self.abort_wait(ticket, AbortCause::WaitDie, wakeups);
        }
        // So do those queued behind a request of its own.
        for (ticket, target, mode, ord) in queued {
            if self.waits.contains_key(&ticket) {
                self.kill_younger_bypassed(txn, &target, mode, (ord, false), wakeups);
            }
        }
    }

    /// Whether `txn` is protected here ([`LockTable::protect`]).
    pub fn is_protected(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.protected)
    }

    /// Lets the gated request `ticket` ([`LockTable::acquire_gated`]) be
    /// granted: from now on it is an ordinary request in its place in the
    /// queue, granted at once if nothing blocks it (a `Granted` wakeup).
    /// Returns whether `ticket` was a gated request still waiting.
    pub fn ungate(&mut self, ticket: Ticket, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(w) = self.waits.get_mut(&ticket).filter(|w| w.gated) else {
            return false;
        };
        w.gated = false;
        w.opened = true;
        let target = w.target.clone();
        let (sk, local) = split(&target);
        if let Some(q) = queued_mut(&mut self.spaces, &target, ticket) {
            self.gated -= 1;
            self.gated_ready -= usize::from(q.ready);
            q.gated = false;
            q.ready = false;
            q.opened = true;
        }
        self.reopen_gate(&target, wakeups);
        // It blocks differently now: the requests that passed it while
        // gated no longer do (a ready gated one behind it, too), and
        // those it held back in a mode it shares no longer wait for it.
        // (Under wait-die, a request the opened gate let be seen again
        // may have made it die.)
        let Some((txn, mode, upgrade)) =
            self.waits.get(&ticket).map(|w| (w.txn, w.mode, w.upgrade))
        else {
            self.regrant(&target, wakeups);
            return true;
        };
        if self.gated_ready > 0 {
            self.unready_behind(txn, &target, mode, Some(order(upgrade, ticket)));
        }
        let free = self.spaces.get(&sk).is_some_and(|space| {
            let w = &self.waits[&ticket];
            let r = Request {
                txn: w.txn,
                t: local,
                mode: w.mode,
                before: order(w.upgrade, ticket),
                kind: Kind::Opened,
            };
            !is_blocked(space, self.view(), r)
        });
        if free {
            self.grant_waiter(ticket, wakeups);
        }
        self.regrant(&target, wakeups);
        true
    }

    /// Whether the gated request `ticket` could be granted now (it is
    /// ready); false for any other ticket.
    pub fn is_ready(&self, ticket: Ticket) -> bool {
        let Some(w) = self.waits.get(&ticket).filter(|w| w.gated) else {
            return false;
        };
        queued(&self.spaces, &w.target, ticket).is_some_and(|q| q.ready)
    }

    /// Moves to `out` the readiness changes of gated requests since the
    /// last call, in order: `(txn, ticket, ready)`.
    pub fn take_gate_changes(&mut self, out: &mut Vec<(TxnId, Ticket, bool)>) {
        out.append(&mut self.gate_changes);
    }

    /// A gated request on `target` opened (ungated or gone): the requests
    /// queued behind it that no other gate holds back stop waiting for a
    /// gate. The caller regrants `target`.
    pub(super) fn reopen_gate(&mut self, target: &LockTarget, wakeups: &mut Vec<Wakeup>) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut behind: SmallVec<[(Ticket, Order, TxnId); 4]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            behind.extend(
                e.queue
                    .iter()
                    .filter(|q| q.behind_gate)
                    .map(|q| (q.ticket, q.order(), q.txn)),
            );
        });
        for (ticket, ord, txn) in behind {
            let Some(w) = self.waits.get(&ticket) else {
                continue;
            };
            let (wsk, wl) = split(&w.target);
            let Some(space) = self.spaces.get(&wsk) else {
                continue;
            };
            let mut gate = false;
            space.for_each_overlapping(wl, |e| {
                gate |= e
                    .queue
                    .iter()
                    .any(|q| q.gated && q.txn != txn && q.order() < ord);
            });
            if gate {
                continue;
            }
            if let Some(q) = queued_mut(&mut self.spaces, &w.target, ticket) {
                q.behind_gate = false;
            }
            // Seen again, it may make a ready gated request behind it wait,
            // and under wait-die, younger ones behind it die.
            let (target, mode) = (w.target.clone(), w.mode);
            if self.gated_ready > 0 {
                self.unready_behind(txn, &target, mode, Some(ord));
            }
            if self.config.policy == DeadlockPolicy::WaitDie {
                self.kill_younger_bypassed(txn, &target, mode, (ord, false), wakeups);
            }
        }
    }

    /// Records whether the gated request `ticket` is ready, reporting a
    /// change.
    pub(super) fn set_ready(&mut self, ticket: Ticket, ready: bool) {
        let Some(w) = self.waits.get(&ticket) else {
            return;
        };
        let Some(q) = queued_mut(&mut self.spaces, &w.target, ticket) else {
            return;
        };
        if q.gated && q.ready != ready {
            q.ready = ready;
            if ready {
                self.gated_ready += 1;
            } else {
                self.gated_ready -= 1;
            }
            self.gate_changes.push((q.txn, ticket, ready));
        }
    }

    /// A lock of `mode` on `target` was just granted to `txn` (`ahead:
    /// None`), or queued at `ahead`: the ready gated requests it now
    /// blocks (overlapping, conflicting, and queued behind it) are ready
    /// no more.
    pub(super) fn unready_behind(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        ahead: Option<Order>,
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let compat = &*self.compat;
        // A holder the gated request does not share with: conflicting, or
        // unprotected (it may upgrade).
        let unshared = ahead.is_none() && may_upgrade(&self.txns, txn);
        let mut blocked: SmallVec<[Ticket; 2]> = SmallVec::new();
        space.for_each_overlapping(local, |e| {
            for q in &e.queue {
                if q.gated
                    && q.ready
                    && q.txn != txn
                    && ahead.is_none_or(|o| o < q.order())
                    && (unshared || !compat.compatible(mode, q.mode))
                {
                    blocked.push(q.ticket);
                }
            }
        });
        for ticket in blocked {
            self.set_ready(ticket, false);
        }
    }
}

#[inline]
pub(super) fn is_protected(txns: &Map<TxnId, TxnState>, txn: TxnId) -> bool {
    txns.get(&txn).is_some_and(|s| {
        s.protected
            || s.parent
                .is_some_and(|p| txns.get(&p).is_some_and(|ps| ps.protected))
    })
}

/// Whether a holder's shared lock keeps a gated request from being ready:
/// neither protected nor granted through a gate, it may be a reader that
/// upgrades ahead of the gated request later.
#[inline]
pub(super) fn may_upgrade(txns: &Map<TxnId, TxnState>, txn: TxnId) -> bool {
    txns.get(&txn)
        .is_none_or(|s| !s.protected && !s.gate_granted)
}
