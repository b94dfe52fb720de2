//! Read-only queries: the holders and waiters of a target, counts, and the
//! transactions the table keeps state for; for callers, status output and
//! tests.

use super::compat::Mode;
use super::queue::Entry;
use super::range::{split, Local};
use super::{LockTable, Ticket};
use brine_core::access::interval_nonempty;
use brine_core::{Key, LockTarget, TxnId};

impl LockTable {
    /// Granted locks on exactly `target`, in grant order.
    pub fn holders(&self, target: &LockTarget) -> Vec<(TxnId, Mode)> {
        let (sk, local) = split(target);
        self.spaces
            .get(&sk)
            .and_then(|s| s.entry(local))
            .map(|e| e.holders.iter().map(|h| (h.txn, h.mode)).collect())
            .unwrap_or_default()
    }

    /// Calls `f(holder, point)` for every holder other than `except` that
    /// holds exactly `mode` on a point lock covered by `target`: `target`
    /// itself if it is a point, every locked key inside it if it is a range
    /// (Salt: the rows a range read observed, whose BASE writers it then
    /// depends on, as a point read of each would).
    pub fn for_each_point_holder_with(
        &self,
        target: &LockTarget,
        mode: Mode,
        except: TxnId,
        mut f: impl FnMut(TxnId, LockTarget),
    ) {
        let (sk, local) = split(target);
        let Some(space) = self.spaces.get(&sk) else {
            return;
        };
        let mut visit = |key: &Key, e: &Entry| {
            for h in e.holders.iter() {
                if h.txn != except && h.mode == mode {
                    f(
                        h.txn,
                        LockTarget::Point {
                            table: sk.0,
                            index: sk.1,
                            key: key.clone(),
                        },
                    );
                }
            }
        };
        match local {
            Local::Point(k) => {
                if let Some(e) = space.points.get(k) {
                    visit(k, e);
                }
            }
            Local::Range(lo, hi) => {
                if let (Some(ordered), true) = (&space.ordered, interval_nonempty(lo, hi)) {
                    for k in ordered.range::<Key, _>((lo.as_ref(), hi.as_ref())) {
                        if let Some(e) = space.points.get(k) {
                            visit(k, e);
                        }
                    }
                }
            }
        }
    }

    /// Whether `txn` holds any lock on exactly `target`.
    pub fn holds(&self, txn: TxnId, target: &LockTarget) -> bool {
        self.txns.get(&txn).is_some_and(|s| s.held.contains(target))
    }

    /// Waiting requests on exactly `target`, in queue order.
    pub fn waiters(&self, target: &LockTarget) -> Vec<(Ticket, TxnId, Mode)> {
        let (sk, local) = split(target);
        self.spaces
            .get(&sk)
            .and_then(|s| s.entry(local))
            .map(|e| e.queue.iter().map(|q| (q.ticket, q.txn, q.mode)).collect())
            .unwrap_or_default()
    }

    /// Number of targets (point keys and ranges) with at least one waiter.
    pub fn keys_with_waiters(&self) -> usize {
        self.spaces
            .values()
            .map(|s| {
                s.points.values().filter(|e| !e.queue.is_empty()).count()
                    + s.ranges
                        .iter()
                        .filter(|r| !r.entry.queue.is_empty())
                        .count()
            })
            .sum()
    }

    /// Number of waiting requests.
    pub fn waiting_requests(&self) -> usize {
        self.waits.len()
    }

    pub fn is_waiting(&self, ticket: Ticket) -> bool {
        self.waits.contains_key(&ticket)
    }

    /// Transactions with any state here (locks, waits, dependencies).
    pub fn txn_count(&self) -> usize {
        self.txns.len()
    }

    /// Whether the table keeps any state for `txn` (a lock, a wait, a
    /// protection).
    pub fn knows(&self, txn: TxnId) -> bool {
        self.txns.contains_key(&txn)
    }

    /// Those transactions' ids (O(transactions): not for the hot path).
    pub fn txn_ids(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.txns.keys().copied()
    }
}
