//! Deadlock handling: wait-die's ranks and victims, this table's wait-for
//! graph and its bounded cycle search, breaking a cycle by a queue bypass
//! or by aborting its youngest waiting member, the wait timeout
//! ([`LockTable::expire`]), and this table's part of the cluster-wide
//! detector ([`LockTable::wait_for_graph`], [`LockTable::break_deadlock`]).

use super::compat::{LockClass, Mode};
use super::gate::{is_protected, Kind};
#[cfg(doc)]
use super::queue::GATED_ONLY;
use super::queue::{collect_blockers, order, Order, Request};
use super::range::split;
use super::{Acquire, DeadlockPolicy, LockTable, Map, Ticket, TxnState, Wakeup};
use brine_core::{AbortCause, LockTarget, TxnId};
use smallvec::SmallVec;
use std::time::Instant;

/// Most transactions one deadlock search visits before it gives up.
pub const MAX_SEARCH: usize = 64;

impl LockTable {
    /// Breaks every wait-for cycle through `start`: by a queue pass where
    /// a member can pass, else by aborting its youngest waiting member.
    pub(super) fn break_cycles_through(&mut self, start: TxnId, wakeups: &mut Vec<Wakeup>) {
        self.break_cycles(|t| t.find_cycle(start), wakeups);
    }

    /// Breaks every cycle `find` finds, one at a time (each break changes
    /// the graph, so `find` looks again): by a queue pass where a member
    /// can pass, else by aborting its youngest waiting member.
    fn break_cycles(
        &mut self,
        mut find: impl FnMut(&mut Self) -> Option<Vec<TxnId>>,
        wakeups: &mut Vec<Wakeup>,
    ) {
        while let Some(cycle) = find(self) {
            if self.bypass_queue_in(&cycle, wakeups) {
                continue;
            }
            let Some(victim) = self.youngest_waiting(&cycle) else {
                break;
            };
            self.abort_waits_of(victim, wakeups);
        }
    }

    /// Breaks a deadlock without an abort where it can: a member of `cycle`
    /// whose request conflicts with no holder waits only because FIFO
    /// queued it behind a conflicting request, and that request waits, in
    /// turn, for it (through holders and release-order dependencies). It
    /// is granted ahead of the queue. The request it passes loses nothing:
    /// it could not be granted before the bypassing one progressed. (Salt:
    /// an ACID reader queued on a district row behind saline writers,
    /// ahead of the payment whose district update those writers' releases
    /// wait for.) Returns whether it granted one; the grant is in
    /// `wakeups`, or, for the caller's own request, gone from the waits.
    fn bypass_queue_in(&mut self, cycle: &[TxnId], wakeups: &mut Vec<Wakeup>) -> bool {
        cycle.iter().any(|m| self.pass_queue(*m, wakeups))
    }

    /// Grants `txn`'s first waiting request that conflicts with no holder
    /// ahead of the queue; returns whether there was one.
    fn pass_queue(&mut self, txn: TxnId, wakeups: &mut Vec<Wakeup>) -> bool {
        let Some(st) = self.txns.get(&txn) else {
            return false;
        };
        let free = st
            .waiting
            .iter()
            .copied()
            .find(|ticket| self.blocked_only_by_queue(*ticket));
        let Some(ticket) = free else {
            return false;
        };
        self.stats.queue_bypasses += 1;
        self.grant_waiter(ticket, wakeups);
        true
    }

    /// This table's part of the cluster-wide wait-for graph, for the
    /// detector of cycles that span partitions (each table sees only its
    /// own). Appends to `waiting` every transaction whose every waiting
    /// request here began at or before `began_by`, with whether each of
    /// those requests conflicts with no holder (it could pass the queue),
    /// and to `edges` its wait-for edges (holders, requests queued ahead,
    /// release-order dependencies behind held-back locks); appends the
    /// edges of transactions releasing in stages, or all at once, to the
    /// transactions their release-order dependencies name.
    ///
    /// The detector passes the moment its look began, so every wait it
    /// combines, from every partition, existed at that one moment (a wait
    /// is one unbroken interval): a cycle made of them was a cycle then,
    /// not a mix of waits that never overlapped. A wait that began later
    /// is left for the next look; returns whether one was.
    pub fn wait_for_graph(
        &self,
        began_by: Instant,
        edges: &mut Vec<(TxnId, TxnId)>,
        waiting: &mut Vec<(TxnId, bool)>,
    ) -> bool {
        let mut left_out = false;
        for (&txn, st) in self.txns.iter() {
            let counted = !st.waiting.is_empty()
                && st
                    .waiting
                    .iter()
                    .all(|t| self.waits.get(t).is_some_and(|w| w.since <= began_by));
            left_out |= !counted && !st.waiting.is_empty();
            if counted {
                // Passable only if every wait of it here can pass: a pass
                // that leaves it waiting for something else here breaks
                // nothing (it then also holds what it passed for).
                let passable = st.waiting.iter().all(|t| self.blocked_only_by_queue(*t));
                waiting.push((txn, passable));
            }
            if counted
                || st.parent.is_some()
                || ((st.staged || st.releasing) && !(st.deps.is_empty() && st.children.is_empty()))
            {
                edges.extend(self.wait_for_edges(txn).into_iter().map(|to| (txn, to)));
            }
        }
        left_out
    }

    /// Grows whenever something happened here that may have added a
    /// wait-for edge this table's own search does not resolve: a request
    /// left waiting (its cycle, if any, runs through another partition),
    /// a release-order dependency recorded, a staged release begun. The
    /// partition compares it with the value at the detector's last look to
    /// tell the detector, once, that a new look may find something.
    pub fn wait_for_changes(&self) -> u64 {
        self.graph_changes
    }

    /// Breaks a cycle that spans partitions at `victim`, chosen by a
    /// cluster-wide detector: with `pass`, grants its request that
    /// conflicts with no holder ahead of the queue (as
    /// [`LockTable::acquire`]'s detector does locally), if it still has
    /// one; otherwise aborts its waiting requests. Returns whether it
    /// changed anything.
    pub fn break_deadlock(&mut self, victim: TxnId, pass: bool, wakeups: &mut Vec<Wakeup>) -> bool {
        if self.txns.get(&victim).is_none_or(|s| s.waiting.is_empty()) {
            return false;
        }
        self.stats.detector_breaks += 1;
        if !(pass && self.pass_queue(victim, wakeups)) {
            self.abort_waits_of(victim, wakeups);
        }
        true
    }

    /// Whether the waiting request `ticket` conflicts with no holder (it
    /// waits only because FIFO queued it behind a conflicting request).
    /// Never for a gated request, which waits for `ungate` too.
    fn blocked_only_by_queue(&self, ticket: Ticket) -> bool {
        let Some(w) = self.waits.get(&ticket).filter(|w| !w.gated) else {
            return false;
        };
        let (sk, local) = split(&w.target);
        let Some(space) = self.spaces.get(&sk) else {
            return false;
        };
        let mut ok = true;
        space.for_each_overlapping(local, |e| {
            ok &= e
                .holders
                .iter()
                .all(|h| h.txn == w.txn || self.compat.compatible(h.mode, w.mode));
        });
        ok
    }

    /// Aborts every waiting request of `victim` as a deadlock victim.
    fn abort_waits_of(&mut self, victim: TxnId, wakeups: &mut Vec<Wakeup>) {
        let waits: SmallVec<[Ticket; 1]> = self
            .txns
            .get(&victim)
            .map(|s| s.waiting.clone())
            .unwrap_or_default();
        self.stats.count_abort(AbortCause::Deadlock);
        for t in waits {
            self.abort_wait(t, AbortCause::Deadlock, wakeups);
        }
    }

    /// Aborts (`LockTimeout`) every request that has waited longer than
    /// `wait_timeout` at `now`, then grants what their removal admits.
    /// Expired requests are removed before any grant, so none of them is
    /// granted by this call.
    pub fn expire(&mut self, now: Instant, wakeups: &mut Vec<Wakeup>) {
        let timeout = self.config.wait_timeout;
        let mut expired: Vec<Ticket> = self
            .waits
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.since) > timeout)
            .map(|(t, _)| *t)
            .collect();
        if expired.is_empty() {
            return;
        }
        expired.sort_unstable();
        let mut targets = Vec::with_capacity(expired.len());
        for ticket in expired {
            if let Some(w) = self.remove_wait(ticket, wakeups) {
                self.stats.count_abort(AbortCause::LockTimeout);
                wakeups.push(Wakeup::Aborted {
                    txn: w.txn,
                    ticket,
                    cause: AbortCause::LockTimeout,
                });
                self.maybe_drop_txn(w.txn);
                targets.push(w.target);
            }
        }
        for t in &targets {
            self.regrant(t, wakeups);
        }
    }

    /// Under wait-die, a waiter must only ever wait for younger transactions.
    /// An upgrade that jumps ahead of fresh waiters (queued after `ord`)
    /// would make younger ones wait for it; so would any grant (`granted`)
    /// that passed gated requests or requests behind a gate, and a request
    /// behind a gate that opened, for those queued after it; those die
    /// instead. `ord` = [`GATED_ONLY`]: none but the passed ones.
    pub(super) fn kill_younger_bypassed(
        &mut self,
        txn: TxnId,
        target: &LockTarget,
        mode: Mode,
        (ord, granted): (Order, bool),
        wakeups: &mut Vec<Wakeup>,
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut victims: SmallVec<[Ticket; 4]> = SmallVec::new();
        let unprotected = !is_protected(&self.txns, txn);
        space.for_each_overlapping(local, |e| {
            for q in &e.queue {
                let blocked = !self.compat.compatible(mode, q.mode) || (q.gated && unprotected);
                if (q.order() > ord || (granted && (q.gated || q.behind_gate)))
                    && q.txn != txn
                    && outranks(&self.txns, txn, q.txn)
                    && blocked
                {
                    victims.push(q.ticket);
                }
            }
        });
        victims.sort_unstable();
        victims.dedup();
        for ticket in victims {
            self.stats.count_abort(AbortCause::WaitDie);
            self.abort_wait(ticket, AbortCause::WaitDie, wakeups);
        }
    }

    /// Removes a waiting request and tells its transaction to abort. The
    /// caller counts the victim (once per transaction, not per request).
    pub(super) fn abort_wait(
        &mut self,
        ticket: Ticket,
        cause: AbortCause,
        wakeups: &mut Vec<Wakeup>,
    ) {
        if let Some(w) = self.remove_wait(ticket, wakeups) {
            wakeups.push(Wakeup::Aborted {
                txn: w.txn,
                ticket,
                cause,
            });
            self.maybe_drop_txn(w.txn);
            self.regrant(&w.target, wakeups);
        }
    }

    /// Runs the detector for the new wait `ticket` of `txn` until no cycle
    /// through `txn` remains. Every new wait-for edge starts or ends at the
    /// new request, so every new cycle passes through `txn`.
    pub(super) fn resolve_deadlocks(
        &mut self,
        txn: TxnId,
        ticket: Ticket,
        wakeups: &mut Vec<Wakeup>,
    ) -> Acquire {
        loop {
            if !self.waits.contains_key(&ticket) {
                // A victim's removal let the request through: report it as
                // the direct answer rather than as a wakeup.
                wakeups.retain(|w| *w != Wakeup::Granted { txn, ticket });
                return Acquire::Granted { newly: true };
            }
            let Some(cycle) = self.find_cycle(txn) else {
                return Acquire::Waiting(ticket);
            };
            if self.bypass_queue_in(&cycle, wakeups) {
                continue;
            }
            // The youngest member that waits (a member held only by a
            // release-order dependency has no request to abort).
            let Some(victim) = self.youngest_waiting(&cycle) else {
                return Acquire::Waiting(ticket);
            };
            if victim == txn {
                if let Some(w) = self.remove_wait(ticket, wakeups) {
                    self.stats.count_abort(AbortCause::Deadlock);
                    self.maybe_drop_txn(txn);
                    self.regrant(&w.target, wakeups);
                }
                return Acquire::Abort(AbortCause::Deadlock);
            }
            let victim_waits: SmallVec<[Ticket; 1]> = self
                .txns
                .get(&victim)
                .map(|s| s.waiting.clone())
                .unwrap_or_default();
            debug_assert!(
                !victim_waits.is_empty(),
                "deadlock victim {victim} is not waiting"
            );
            if victim_waits.is_empty() {
                return Acquire::Waiting(ticket);
            }
            self.stats.count_abort(AbortCause::Deadlock);
            for t in victim_waits {
                self.abort_wait(t, AbortCause::Deadlock, wakeups);
            }
        }
    }

    /// The lowest-ranked member of `cycle` with a waiting request: the
    /// youngest unprotected one, or the youngest if all are protected.
    fn youngest_waiting(&self, cycle: &[TxnId]) -> Option<TxnId> {
        cycle
            .iter()
            .copied()
            .filter(|t| self.txns.get(t).is_some_and(|s| !s.waiting.is_empty()))
            .max_by_key(|&t| rank(&self.txns, t))
    }

    /// Detector only: after a holder of `target` gained release-order
    /// dependencies on `on` (edges no new wait created: a request waiting
    /// on `target` behind that holder now waits for `on` too), breaks
    /// every cycle those edges closed: a cycle through one of them runs
    /// from an `on` back to a waiter on `target`, so one search from each
    /// `on` finds it, however many requests wait there. Victims are
    /// reported in `wakeups`.
    pub fn detect_from_waiters(
        &mut self,
        target: &LockTarget,
        on: &[TxnId],
        wakeups: &mut Vec<Wakeup>,
    ) {
        if self.config.policy != DeadlockPolicy::Detect {
            return;
        }
        let (sk, local) = split(target);
        for &root in on {
            self.break_cycles(
                |t| {
                    let waiters: SmallVec<[TxnId; 8]> =
                        match t.spaces.get(&sk).and_then(|s| s.entry(local)) {
                            Some(e) => e.queue.iter().map(|q| q.txn).collect(),
                            None => return None,
                        };
                    t.search_cycle(root, |w, edges| {
                        waiters.contains(&w) && edges.contains(&root)
                    })
                },
                wakeups,
            );
        }
    }

    /// Transactions `txn` waits for, over all its waiting requests: the
    /// conflicting holders and queued requests ahead, and, behind a holder
    /// whose lock would still conflict after a downgrade to saline (so `txn`
    /// waits for its release), the transactions that release is held back
    /// for (release-order dependencies); and, for a transaction releasing
    /// in stages or all at once, every transaction its own dependencies
    /// name (so chains of held-back releases are followed).
    fn wait_for_edges(&self, txn: TxnId) -> SmallVec<[TxnId; 4]> {
        let mut out = SmallVec::new();
        let Some(st) = self.txns.get(&txn) else {
            return out;
        };
        // A transaction releasing (in stages, or all at once) waits for
        // the transactions its release-order dependencies name: its
        // remaining locks go only after theirs.
        if st.staged || st.releasing {
            let forked = st.children.iter().filter_map(|c| self.txns.get(c));
            for d in st.deps.iter().chain(forked.flat_map(|c| c.deps.iter())) {
                if !out.contains(&d.on) {
                    out.push(d.on);
                }
            }
        }
        // Locks forked from a transaction go no earlier than it ends.
        if let Some(p) = st.parent {
            if self.txns.contains_key(&p) && !out.contains(&p) {
                out.push(p);
            }
        }
        for ticket in &st.waiting {
            let Some(w) = self.waits.get(ticket) else {
                continue;
            };
            let (sk, local) = split(&w.target);
            let Some(space) = self.spaces.get(&sk) else {
                continue;
            };
            space.for_each_overlapping(local, |e| {
                for h in &e.holders {
                    let saline = Mode::new(LockClass::Saline, h.mode.access);
                    if h.txn == txn
                        || self.compat.compatible(h.mode, w.mode)
                        || self.compat.compatible(saline, w.mode)
                    {
                        continue;
                    }
                    let Some(hs) = self.txns.get(&h.txn) else {
                        continue;
                    };
                    for d in &hs.deps {
                        let blocks = d.target.as_ref().is_none_or(|t| *t == w.target);
                        if blocks && !out.contains(&d.on) {
                            out.push(d.on);
                        }
                    }
                }
            });
        }
        for ticket in &st.waiting {
            let Some(w) = self.waits.get(ticket) else {
                continue;
            };
            let (sk, local) = split(&w.target);
            if let Some(space) = self.spaces.get(&sk) {
                let r = Request {
                    txn,
                    t: local,
                    mode: w.mode,
                    before: order(w.upgrade, *ticket),
                    kind: Kind::of(&self.txns, txn, w.gated, w.opened),
                };
                collect_blockers(space, self.view(), r, &mut out);
            }
        }
        out
    }

    /// A cycle of the wait-for graph through `start`, as the list of its
    /// transactions, found by depth-first search.
    fn find_cycle(&mut self, start: TxnId) -> Option<Vec<TxnId>> {
        self.search_cycle(start, |_, edges| edges.contains(&start))
    }

    /// Depth-first search from `root` for a transaction `t` whose edges
    /// `closes` a cycle back to `root` (`closes(t, edges of t)`); returns
    /// the path from `root` to `t`. The search visits at most
    /// [`MAX_SEARCH`] transactions: past that it gives up and counts a
    /// cut search, leaving the cycle, if there is one, to the cluster's
    /// periodic detector (and the wait timeout). Under heavy contention
    /// the graph behind one wait can span every waiting transaction, and
    /// a search per wait and per new dependency then cost more than the
    /// work it guarded.
    fn search_cycle(
        &mut self,
        root: TxnId,
        closes: impl Fn(TxnId, &[TxnId]) -> bool,
    ) -> Option<Vec<TxnId>> {
        let mut visited: rustc_hash::FxHashSet<TxnId> = Default::default();
        visited.insert(root);
        let edges = self.wait_for_edges(root);
        if closes(root, &edges) {
            return Some(vec![root]);
        }
        let mut stack: Vec<(TxnId, SmallVec<[TxnId; 4]>, usize)> = vec![(root, edges, 0)];
        while let Some(top) = stack.last_mut() {
            if top.2 < top.1.len() {
                let next = top.1[top.2];
                top.2 += 1;
                if !visited.insert(next) {
                    continue;
                }
                if visited.len() > MAX_SEARCH {
                    self.stats.searches_cut += 1;
                    return None;
                }
                let edges = self.wait_for_edges(next);
                if closes(next, &edges) {
                    let mut path: Vec<TxnId> = stack.iter().map(|f| f.0).collect();
                    path.push(next);
                    return Some(path);
                }
                stack.push((next, edges, 0));
            } else {
                stack.pop();
            }
        }
        None
    }
}

/// Where `txn` stands in wait-die's order (smaller goes first): protected
/// transactions ahead of all others, then by age.
#[inline]
fn rank(txns: &Map<TxnId, TxnState>, txn: TxnId) -> (bool, TxnId) {
    (!is_protected(txns, txn), txn)
}

/// Whether `a` ranks above `b`: under wait-die, `b` dies rather than wait
/// for `a`.
#[inline]
pub(super) fn outranks(txns: &Map<TxnId, TxnState>, a: TxnId, b: TxnId) -> bool {
    rank(txns, a) < rank(txns, b)
}
