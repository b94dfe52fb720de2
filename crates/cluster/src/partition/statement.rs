//! A statement's path through the partition: its lock needs, each
//! acquired (or waited for), the execution under all of them, the answer;
//! and the wakeups the lock table reports, which resume or fail waiting
//! statements.

use std::sync::atomic::Ordering;

use brine_core::{Access, Error, IndexId, LockNeed, LockTarget, Result, TxnId};
use brine_lock::{Acquire, GateOpens, Mode, Wakeup};
use brine_sql::QueryResult;

use super::{now, short_lived, table_slot, Parked, Partition, Rules, Stmt, HELD_SINCE_MAX};
use crate::message::{Executed, Gate};
use crate::partition::Ending;

impl<R: Rules> Partition<R> {
    /// Acquires every lock the statement needs, then runs it; parks it if a
    /// lock must be waited for. Afterwards acts on whatever the lock table
    /// reported meanwhile (victims chosen by the detector, grants).
    pub fn run_statement(&mut self, stmt: Stmt) {
        self.try_statement(stmt);
        self.process_wakeups();
    }

    fn try_statement(&mut self, mut stmt: Stmt) {
        self.needs.clear();
        if let Err(e) = self
            .store
            .lock_needs(&stmt.plan, &stmt.params, &mut self.needs)
        {
            self.finish(stmt, Err(e));
            return;
        }
        if stmt.lock.for_update {
            for need in &mut self.needs {
                let row = matches!(&need.target, LockTarget::Point { index, .. } if *index == IndexId::PRIMARY);
                if row && need.access == Access::Read {
                    need.access = Access::Write;
                }
            }
        }
        let now = now();
        let needs = std::mem::take(&mut self.needs);
        for need in &needs {
            let mode = Mode {
                class: stmt.lock.class,
                access: need.access,
            };
            // Gated: the statement's first lock only (it holds nothing
            // before; once ungated, the others are taken as usual). A local
            // gate ready on arrival opens at once.
            let (t, w) = (&need.target, &mut self.wakeups);
            let outcome = match &stmt.gate {
                Some(gate) => {
                    let opens = match gate {
                        Gate::Local => GateOpens::WhenReady,
                        Gate::Coordinated(_) => GateOpens::OnUngate,
                    };
                    self.locks.acquire_gated(stmt.owner, t, mode, opens, now, w)
                }
                None => self.locks.acquire(stmt.owner, t, mode, now, w),
            };
            let failure = match outcome {
                Ok(Acquire::Granted { newly }) => {
                    if matches!(stmt.gate, Some(Gate::Local)) {
                        stmt.gate = None;
                    }
                    self.granted(&mut stmt, need, newly, now);
                    continue;
                }
                Ok(Acquire::Waiting(_)) if R::refuses_wait(self, &stmt) => {
                    // The rules do not wait (no-wait locking): the request
                    // goes, and the statement fails as a victim.
                    self.locks.cancel_waits(stmt.owner, &mut self.wakeups);
                    let cause = brine_core::AbortCause::LockTimeout;
                    self.counters.count_victim(cause);
                    Error::Aborted(cause)
                }
                Ok(Acquire::Waiting(ticket)) => {
                    self.counters.lock_waits.fetch_add(1, Ordering::Relaxed);
                    self.counters.lock_waits_by_table[table_slot(&stmt.plan)]
                        .fetch_add(1, Ordering::Relaxed);
                    let owner = stmt.owner;
                    let prev = self.parked.insert(
                        owner,
                        Parked {
                            stmt,
                            waiting: need.clone(),
                            ticket,
                            since: now,
                        },
                    );
                    debug_assert!(prev.is_none(), "one statement per transaction at a time");
                    self.needs = needs;
                    return;
                }
                Ok(Acquire::Abort(cause)) => {
                    self.counters.count_victim(cause);
                    Error::Aborted(cause)
                }
                Err(e) => e,
            };
            self.needs = needs;
            self.finish(stmt, Err(failure));
            return;
        }
        self.needs = needs;
        if let Some(Gate::Coordinated(notice)) = stmt.gate.take() {
            // Never gated here (nothing to lock): ready for good.
            notice.send(true);
        }
        let result =
            self.store
                .execute_recorded(stmt.txn, &stmt.plan, &stmt.params, Some(&mut stmt.ops));
        if result.is_ok() {
            R::executed(self, &stmt);
        }
        self.finish(stmt, result);
    }

    /// A lock of the statement was granted (`newly`: not already held).
    fn granted(&mut self, stmt: &mut Stmt, need: &LockNeed, newly: bool, now: std::time::Instant) {
        let short = short_lived(&stmt.lock, need.access);
        if newly && !short {
            if self.held_since.len() >= HELD_SINCE_MAX && !self.held_since.contains_key(&stmt.owner)
            {
                // Owners whose end never came here (a coordinator that
                // vanished): the counters are statistics, the bound is not.
                self.held_since.clear();
            }
            let slot = table_slot(&stmt.plan) as u8;
            let held = self.held_since.entry(stmt.owner).or_default();
            if !held.iter().any(|(t, _)| *t == slot) {
                held.push((slot, now));
            }
        }
        if !R::granted(self, stmt, need, short) && newly && short {
            stmt.short.push(need.clone());
        }
    }

    /// Ends a statement: releases its short locks and answers. A statement
    /// sent as a whole subtransaction (`SubStmt::autocommit`) is committed
    /// (or rolled back) here at once.
    pub fn finish(&mut self, mut stmt: Stmt, result: Result<QueryResult>) {
        self.release_short(stmt.owner, &mut stmt.short);
        R::finishing(self, &stmt, &result);
        let (ops, dirty, after) = (stmt.ops, stmt.dirty, stmt.after);
        let executed = result.map(|result| Executed {
            result,
            ops,
            dirty,
            after,
        });
        match stmt.sub {
            Some(s) if s.autocommit && executed.is_ok() => {
                let ending = Ending::Sub { owner: s.owner };
                self.commit(stmt.txn, ending, stmt.reply, executed);
            }
            Some(s) if s.autocommit => {
                self.forget_aborted(stmt.txn);
                stmt.reply.send(executed);
                self.end_txn(stmt.txn, Ending::Sub { owner: s.owner }, false);
            }
            _ => stmt.reply.send(executed),
        }
    }

    /// Releases a statement's short locks (reads at read committed). A
    /// Callas member's read lock goes too: at read committed a read need
    /// not keep out later writers of other groups (circularity there is a
    /// cycle of write and read dependencies, which the writers' nexus
    /// locks prevent).
    fn release_short(&mut self, txn: TxnId, short: &mut Vec<LockNeed>) {
        if short.is_empty() {
            return;
        }
        // Newest first: the lock table finds each at the end of what the
        // transaction holds (a scan's thousands of row locks at read
        // committed were quadratic in the other order).
        for need in short.drain(..).rev() {
            self.locks
                .release(txn, &need.target, need.access, &mut self.wakeups);
        }
        self.process_wakeups();
    }

    /// Acts on what the lock table reported: resumes granted statements and
    /// fails the ones chosen as victims. Resuming can produce more wakeups,
    /// so this loops until none are left.
    pub fn process_wakeups(&mut self) {
        loop {
            let Some(w) = self.wakeups.pop() else {
                // Statements the rules let go run in order, one at a
                // time, each with the wakeups it makes.
                match R::next_ready(self) {
                    Some(stmt) => {
                        self.run_statement(stmt);
                        continue;
                    }
                    None => break,
                }
            };
            match w {
                Wakeup::Granted { txn, ticket } => {
                    let Some(p) = self.parked.remove(&txn) else {
                        continue;
                    };
                    debug_assert_eq!(p.ticket, ticket);
                    let at = now();
                    let waited = at.saturating_duration_since(p.since).as_nanos() as u64;
                    self.counters
                        .lock_wait_ns
                        .fetch_add(waited, Ordering::Relaxed);
                    self.counters.lock_wait_ns_by_table[table_slot(&p.stmt.plan)]
                        .fetch_add(waited, Ordering::Relaxed);
                    let mut stmt = p.stmt;
                    self.granted(&mut stmt, &p.waiting, true, at);
                    self.run_statement(stmt);
                }
                Wakeup::Aborted { txn, ticket, cause } => {
                    let Some(p) = self.parked.remove(&txn) else {
                        continue;
                    };
                    debug_assert_eq!(p.ticket, ticket);
                    self.counters.count_victim(cause);
                    self.finish(p.stmt, Err(Error::Aborted(cause)));
                }
                Wakeup::Released { txn } => R::released(self, txn, true),
            }
        }
        self.locks.take_gate_changes(&mut self.gate_changes);
        let mut changes = std::mem::take(&mut self.gate_changes);
        let mut ungated = false;
        for (txn, ticket, ready) in changes.drain(..) {
            let Some(p) = self.parked.get_mut(&txn).filter(|p| p.ticket == ticket) else {
                continue;
            };
            match &p.stmt.gate {
                Some(Gate::Coordinated(notice)) => notice.send(ready),
                Some(Gate::Local) if ready && self.locks.is_ready(ticket) => {
                    p.stmt.gate = None;
                    self.locks.ungate(ticket, &mut self.wakeups);
                    ungated = true;
                }
                _ => {}
            }
        }
        self.gate_changes = changes;
        if ungated {
            // The grants it made.
            self.process_wakeups();
            return;
        }
        let mut progressed = std::mem::take(&mut self.progressed);
        self.locks.take_released_held_back(&mut progressed);
        for holder in progressed.drain(..) {
            let owner = R::holder_owner(self, holder);
            R::released(self, owner, false);
        }
        self.progressed = progressed;
    }
}
