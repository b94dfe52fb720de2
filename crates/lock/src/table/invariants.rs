//! [`LockTable::check_invariants`]: every structural invariant of the
//! table, checked from scratch, for tests and debug assertions.

use super::deadlock::outranks;
use super::display::fmt_range;
use super::gate::Kind;
use super::queue::{collect_blockers, Entry, Request};
use super::range::{split, Local};
use super::{DeadlockPolicy, LockTable};
use smallvec::SmallVec;

impl LockTable {
    /// Checks every structural invariant; for tests and debug assertions.
    /// O(size of the table), so not for the hot path.
    pub fn check_invariants(&self) -> Result<(), String> {
        let compat = &*self.compat;
        let mut queued = 0usize;
        let (mut gated, mut ready) = (0usize, 0usize);
        for (sk, space) in &self.spaces {
            let mut check_entry = |t: Local<'_>, e: &Entry, what: String| -> Result<(), String> {
                for w in e.queue.windows(2) {
                    if w[0].order() >= w[1].order() {
                        return Err(format!("{what}: queue out of order"));
                    }
                }
                for h in &e.holders {
                    let mut bad = None;
                    space.for_each_overlapping(t, |other| {
                        for o in &other.holders {
                            if o.txn != h.txn && !compat.compatible(o.mode, h.mode) {
                                bad = Some(o.txn);
                            }
                        }
                    });
                    if let Some(o) = bad {
                        return Err(format!(
                            "{what}: {} {} granted beside conflicting {o}",
                            h.txn, h.mode
                        ));
                    }
                    let held = self.txns.get(&h.txn).is_some_and(|s| {
                        s.held.iter().any(|ht| {
                            let (hsk, hl) = split(ht);
                            hsk == *sk
                                && match (hl, t) {
                                    (Local::Point(a), Local::Point(b)) => a == b,
                                    (Local::Range(a, b), Local::Range(c, d)) => a == c && b == d,
                                    _ => false,
                                }
                        })
                    });
                    if !held {
                        return Err(format!("{what}: {} missing from its held list", h.txn));
                    }
                }
                for q in &e.queue {
                    queued += 1;
                    let r = Request {
                        txn: q.txn,
                        t,
                        mode: q.mode,
                        before: q.order(),
                        kind: Kind::of(&self.txns, q.txn, q.gated, q.opened),
                    };
                    let mut blockers = SmallVec::new();
                    collect_blockers(space, self.view(), r, &mut blockers);
                    if q.behind_gate {
                        let mut gate = false;
                        space.for_each_overlapping(t, |o| {
                            gate |= o
                                .queue
                                .iter()
                                .any(|g| g.gated && g.txn != q.txn && g.order() < q.order());
                        });
                        if !gate {
                            return Err(format!(
                                "{what}: {} {} behind a gate that is gone",
                                q.ticket, q.txn
                            ));
                        }
                    }
                    if q.gated {
                        ready += usize::from(q.ready);
                        if q.ready != blockers.is_empty() {
                            return Err(format!(
                                "{what}: gated {} {} marked ready={} but blockers {blockers:?}",
                                q.ticket, q.txn, q.ready
                            ));
                        }
                        gated += 1;
                    } else if blockers.is_empty() {
                        return Err(format!(
                            "{what}: {} {} waits for nothing (lost wakeup)",
                            q.ticket, q.txn
                        ));
                    }
                    if !self.waits.contains_key(&q.ticket) {
                        return Err(format!("{what}: {} not in the wait index", q.ticket));
                    }
                    if self.config.policy == DeadlockPolicy::WaitDie
                        && blockers.iter().any(|&b| outranks(&self.txns, b, q.txn))
                    {
                        return Err(format!(
                            "{what}: wait-die waiter {} waits for an older txn",
                            q.txn
                        ));
                    }
                }
                if e.is_empty() {
                    return Err(format!("{what}: empty entry not pruned"));
                }
                Ok(())
            };
            for (k, e) in &space.points {
                check_entry(Local::Point(k), e, format!("{k:?}"))?;
            }
            for r in &space.ranges {
                check_entry(
                    Local::Range(&r.lo, &r.hi),
                    &r.entry,
                    fmt_range(&r.lo, &r.hi),
                )?;
            }
            if let Some(ordered) = &space.ordered {
                if ordered.len() != space.points.len()
                    || !space.points.keys().all(|k| ordered.contains(k))
                {
                    return Err("ordered key index out of sync".into());
                }
            }
        }
        if queued != self.waits.len() {
            return Err(format!(
                "{queued} queued requests but {} in the wait index",
                self.waits.len()
            ));
        }
        if (gated, ready) != (self.gated, self.gated_ready) {
            return Err(format!(
                "{gated} gated requests ({ready} ready) queued, counted {} ({})",
                self.gated, self.gated_ready
            ));
        }
        for (txn, st) in &self.txns {
            for t in &st.held {
                if !self.holders(t).iter().any(|(h, _)| h == txn) {
                    return Err(format!("{txn} lists {t:?} as held but holds nothing there"));
                }
            }
            for tk in &st.waiting {
                if self.waits.get(tk).map(|w| w.txn) != Some(*txn) {
                    return Err(format!("{txn} lists {tk} as waiting but it is not"));
                }
            }
            if st.is_idle() {
                return Err(format!(
                    "{txn} has idle state that should have been dropped"
                ));
            }
        }
        Ok(())
    }
}
