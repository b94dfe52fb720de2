//! The cluster-wide deadlock detector: finds wait-for cycles that span
//! partitions, which no partition's own detector can see.
//!
//! ```text
//!  partition: a request is left waiting (or a release-order dependency /
//!  staged release adds edges) ──► rings the detector's doorbell (Nudge),
//!  once per look, over the link
//!                 │
//!  detector (node 0): a look, at once when rung while cycles are being
//!  found; after looks that found none, when rung but no sooner than a
//!  gap that doubles from MIN_GAP to PERIOD; else every PERIOD;
//!  FOLLOW_UP after a look that broke something
//!     WaitGraph{began_by: start of the look} ──► every partition at once,
//!     over the link ◄── edges of the transactions whose waits all began
//!     by then, and of transactions releasing behind release-order deps
//!  union ──► strongly connected components ──► per cycle: a queue pass
//!  (a member every one of whose waits conflicts with no holder), else
//!  the youngest member that waits ──► BreakDeadlock, over the link ──►
//!  the partitions where it waits grant the pass, or abort its requests
//!  (cause: deadlock; its coordinator retries)
//! ```
//!
//! A partition's lock table breaks every cycle made of its own edges the
//! moment a wait closes it (`DeadlockPolicy::Detect`), unless its search
//! gave up at `brine_lock::MAX_SEARCH` transactions: that cycle is found
//! here, which is why this runs even over a single partition. A cycle
//! through two partitions (T waits at A for U, U waits at B for T; or,
//! under Salt, a BASE transaction releasing in stages at B behind a
//! dependency whose holder waits at A) is found only here.
//!
//! **Promptness.** This used to look every 20 ms at waits 20 ms old or
//! older, so every such cycle stalled its members, and every request
//! queued behind them, for 20-40 ms. On `register` (8 hot keys over two
//! partitions, 32 clients) almost every transaction was in one and the
//! whole cluster advanced by one round of the detector at a time: 27
//! txn/s against wait-die's 1,062 (`docs/results/deadlock-detector.md`).
//! Now a partition rings the detector when a request stays waiting after
//! its own search (`LockTable::wait_for_changes`), and the detector looks
//! at once: a cycle costs about two link round trips (the bell, the
//! look, the break), not a period. Where waits are frequent but cycles
//! rare, the gap between looks grows back to `PERIOD` (the old cost,
//! about fifty looks a second; the first cycle after a quiet stretch then
//! waits up to a period, as every cycle used to). Without bells (peers
//! over TCP, whose doorbell does not cross the wire) a look runs every
//! `PERIOD`.
//!
//! **Only real cycles.** The partitions answer one after another, so a
//! naive union could combine a wait that ended with one that began later
//! into a cycle that never existed. Each look therefore counts only the
//! waits that began by the moment the look began (`began_by`): each of
//! them lasted, unbroken, from then until its partition answered, so all
//! of them existed together at that moment and a cycle among them was a
//! cycle then, and a deadlock persists. (It used to count waits 20 ms old
//! instead, a heuristic that cost the 20 ms.) A queue pass is offered only
//! to a member each of whose waits could pass, at every partition where
//! it waits: passing one of two waits left the cycle in place (the member
//! then held what it had queued for), and the next look had to abort it
//! anyway. The lock wait timeout stays the backstop.
//!
//! **Messages.** The doorbell, the looks, their answers and the breaks
//! cross the simulated link like every other message between nodes (the
//! detector runs on node 0, beside partition 0): a cycle's cost includes
//! the network. Across processes (`brine server`), node 0 runs the
//! detector over every partition, asking its peers' over the wire
//! (`WireMsg::WaitGraph`, `WireMsg::BreakDeadlock`); the other nodes run
//! none, and while node 0 is down the timeout is the only handling of
//! cycles across partitions. (Before, each process ran it over its own
//! partitions: bank under Salt over three processes ran at 10.6 txn/s
//! against `acid`'s 5,367, every cycle through two processes waiting out
//! the 500 ms timeout.)

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use brine_core::{NodeId, TxnId};
use tokio::sync::mpsc::{self, WeakUnboundedSender};

use crate::link::Link;
use crate::message::{Nudge, PartitionMsg, Reply, WaitGraph};

/// The longest the detector goes without a look when no partition rings.
pub const PERIOD: Duration = Duration::from_millis(20);
/// The shortest time between the starts of two looks once no cycle was
/// found for `RECENT`; it doubles with every look that finds none, up to
/// `PERIOD`. Bounds the cost of a storm of waits with no cycles (each
/// look costs every partition a pass over its waiting transactions).
pub const MIN_GAP: Duration = Duration::from_millis(1);
/// After a look that broke a cycle, the next one comes this soon even if
/// no partition rings: a victim's abort ends waits without adding any, so
/// a cycle its break left (or one a failed queue pass left) rings nothing.
pub const FOLLOW_UP: Duration = Duration::from_millis(1);

/// How long after a look that broke a cycle bells are answered at once
/// (no `MIN_GAP`).
pub const RECENT: Duration = Duration::from_millis(10);

/// A partition the detector watches: the node it lives on, and its queue.
pub(crate) struct Watched {
    pub node: NodeId,
    pub tx: WeakUnboundedSender<PartitionMsg>,
}

/// Runs the detector, on node `here`, over `partitions` until they are
/// gone (the cluster was dropped).
pub(crate) async fn run(partitions: Vec<Watched>, link: Link, here: NodeId) {
    let (bell_tx, mut bell) = mpsc::unbounded_channel::<usize>();
    let mut last_found: Option<tokio::time::Instant> = None;
    let mut gap = MIN_GAP;
    loop {
        // Bells that rang before this look began are answered by it.
        while bell.try_recv().is_ok() {}
        let look = tokio::time::Instant::now();
        let began_by = look.into_std();
        let mut answers = Vec::with_capacity(partitions.len());
        for (i, p) in partitions.iter().enumerate() {
            let Some(tx) = p.tx.upgrade() else {
                return;
            };
            let (reply, rx) = Reply::channel(&link, p.node, here);
            let msg = PartitionMsg::WaitGraph {
                began_by,
                nudge: Some(Nudge::new(&link, p.node, here, i, bell_tx.clone())),
                reply,
            };
            // All at once: a look costs one round trip, not one per
            // partition.
            link.send(here, p.node, move || {
                let _ = tx.send(msg);
            });
            answers.push(rx);
        }
        let mut graphs = Vec::with_capacity(partitions.len());
        for rx in answers {
            if let Ok(g) = rx.await {
                graphs.push(g);
            }
        }
        // A partition that did not answer (the request or its answer was
        // lost, or it is cut off): this look sees only part of the graph,
        // and a queue pass decided on part of it could be wrong, so it
        // breaks nothing; the next look asks again. (Returning here, as
        // this once did, stopped the detector for good after one lost
        // message: cycles then ended only at the lock wait timeout.)
        let breaks = if graphs.len() == partitions.len() {
            victims(&graphs)
        } else {
            Vec::new()
        };
        tracing::debug!(
            took_us = look.elapsed().as_micros() as u64,
            edges = graphs.iter().map(|g| g.edges.len()).sum::<usize>(),
            breaks = breaks.len(),
            "deadlock detector look"
        );
        for b in &breaks {
            tracing::debug!(victim = %b.victim, pass = b.pass, "deadlock across partitions");
            for &i in &b.at {
                if let Some(tx) = partitions[i].tx.upgrade() {
                    let (victim, pass) = (b.victim, b.pass);
                    link.send(here, partitions[i].node, move || {
                        let _ = tx.send(PartitionMsg::BreakDeadlock { victim, pass });
                    });
                }
            }
        }
        // While cycles are being found (one was within RECENT), a bell is
        // answered at once: cycles are coming thick and fast, and each
        // look is paced by its own round trip. (The look right after a
        // break usually finds nothing: the victims' aborts are still on
        // their way.) Otherwise the gap between looks doubles with every
        // look that finds nothing, from MIN_GAP up to PERIOD: waits may
        // be frequent where cycles are rare (ticketing's hot counters:
        // sixty waiters on one row, thousands of edges per look), and a
        // look costs every partition a pass over its waits.
        let busy = if breaks.is_empty() {
            last_found.is_some_and(|t| look.duration_since(t) < RECENT)
        } else {
            last_found = Some(look);
            true
        };
        gap = if busy { MIN_GAP } else { (gap * 2).min(PERIOD) };
        let next = look + if busy { FOLLOW_UP } else { PERIOD };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = bell.recv() => {
                if !busy {
                    tokio::time::sleep_until(look + gap).await;
                }
            }
        }
    }
}

/// How the detector breaks one cycle.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Break {
    pub victim: TxnId,
    /// Grant its request ahead of the queue instead of aborting it.
    pub pass: bool,
    /// Indexes of the graphs (partitions) to tell.
    pub at: Vec<usize>,
}

/// How to break every cycle of the union of `graphs`, one strongly
/// connected component with a cycle at a time: if a member waits only
/// because FIFO queued it behind requests that wait for it, at every
/// partition where it waits, those requests are granted ahead of the
/// queue (no abort; the youngest such member; a member that would still
/// wait somewhere after its pass keeps every edge of the cycle);
/// otherwise the youngest member that waits is aborted
/// wherever it waits, one that can no longer roll back (protected at a
/// partition) only if every member that waits is. Then its edges go and
/// the components are found again, until none has a cycle.
pub(crate) fn victims(graphs: &[WaitGraph]) -> Vec<Break> {
    let mut succ: HashMap<TxnId, Vec<TxnId>> = HashMap::new();
    for g in graphs {
        for &(a, b) in &g.edges {
            if a != b {
                succ.entry(a).or_default().push(b);
            }
        }
    }
    // Per waiting transaction: where it waits, and where it could pass.
    let mut waits_at: HashMap<TxnId, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (i, g) in graphs.iter().enumerate() {
        for &(t, passable) in &g.waiting {
            let e = waits_at.entry(t).or_default();
            e.0.push(i);
            if passable {
                e.1.push(i);
            }
        }
    }
    let protected: HashSet<TxnId> = graphs
        .iter()
        .flat_map(|g| g.protected.iter().copied())
        .collect();
    let mut out = Vec::new();
    // A victim's waits end, so its edges go; components are computed again
    // until no cycle is left (a range read waiting for twenty holders,
    // each in a cycle with it through another partition, needs twenty).
    for _ in 0..MAX_ROUNDS {
        let mut broke = false;
        for scc in components(&succ) {
            if scc.len() < 2 {
                continue;
            }
            let passing = scc
                .iter()
                .filter(|t| {
                    waits_at
                        .get(t)
                        .is_some_and(|w| !w.1.is_empty() && w.1.len() == w.0.len())
                })
                .max();
            let b = if let Some(v) = passing {
                Break {
                    victim: *v,
                    pass: true,
                    at: waits_at[v].1.clone(),
                }
            } else if let Some(v) = scc
                .iter()
                .filter(|t| waits_at.contains_key(t))
                .max_by_key(|&t| (!protected.contains(t), t))
            {
                Break {
                    victim: *v,
                    pass: false,
                    at: waits_at[v].0.clone(),
                }
            } else {
                continue;
            };
            succ.remove(&b.victim);
            waits_at.remove(&b.victim);
            out.push(b);
            broke = true;
        }
        if !broke {
            break;
        }
    }
    out.sort();
    out
}

/// Bound on the rounds of [`victims`] (each breaks at least one cycle);
/// what is left is found by the next look.
const MAX_ROUNDS: usize = 256;

/// Strongly connected components (Tarjan's algorithm, iterative so a long
/// chain of dependencies cannot overflow the stack).
fn components(succ: &HashMap<TxnId, Vec<TxnId>>) -> Vec<Vec<TxnId>> {
    let mut index: HashMap<TxnId, (usize, usize)> = HashMap::new(); // (index, lowlink)
    let mut on_stack: HashSet<TxnId> = HashSet::new();
    let mut stack: Vec<TxnId> = Vec::new();
    let mut out = Vec::new();
    let mut next = 0usize;
    let no_succ: Vec<TxnId> = Vec::new();
    let mut roots: Vec<TxnId> = succ.keys().copied().collect();
    roots.sort();
    for root in roots {
        if index.contains_key(&root) {
            continue;
        }
        // Frames: (node, position in its successor list).
        let mut frames: Vec<(TxnId, usize)> = vec![(root, 0)];
        index.insert(root, (next, next));
        next += 1;
        stack.push(root);
        on_stack.insert(root);
        while let Some(&mut (v, ref mut pos)) = frames.last_mut() {
            let vs = succ.get(&v).unwrap_or(&no_succ);
            if *pos < vs.len() {
                let w = vs[*pos];
                *pos += 1;
                match index.get(&w) {
                    None => {
                        index.insert(w, (next, next));
                        next += 1;
                        stack.push(w);
                        on_stack.insert(w);
                        frames.push((w, 0));
                    }
                    Some(&(wi, _)) if on_stack.contains(&w) => {
                        let e = index.get_mut(&v).expect("indexed");
                        e.1 = e.1.min(wi);
                    }
                    Some(_) => {}
                }
                continue;
            }
            frames.pop();
            let (vi, vl) = index[&v];
            if let Some(&(parent, _)) = frames.last() {
                let e = index.get_mut(&parent).expect("indexed");
                e.1 = e.1.min(vl);
            }
            if vi == vl {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(&w);
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(scc);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> TxnId {
        TxnId { ts: n, id: n }
    }

    /// One partition's graph: edges and waiting transactions by number.
    fn g(edges: &[(u64, u64)], waiting: &[(u64, bool)]) -> WaitGraph {
        WaitGraph {
            edges: edges.iter().map(|&(a, b)| (t(a), t(b))).collect(),
            waiting: waiting.iter().map(|&(a, p)| (t(a), p)).collect(),
            protected: Vec::new(),
        }
    }

    fn abort(n: u64, at: Vec<usize>) -> Break {
        Break {
            victim: t(n),
            pass: false,
            at,
        }
    }

    #[test]
    fn a_cycle_through_two_partitions_yields_its_youngest_waiter() {
        // Partition 0: t1 waits for t2. Partition 1: t2 waits for t3,
        // t3 (releasing in stages) waits for its dependency t1.
        let graphs = vec![
            g(&[(1, 2)], &[(1, false)]),
            g(&[(2, 3), (3, 1)], &[(2, false)]),
        ];
        // t3 is youngest but waits nowhere: t2 is the victim, at partition 1.
        assert_eq!(victims(&graphs), vec![abort(2, vec![1])]);
    }

    #[test]
    fn a_protected_waiter_is_spared_while_the_cycle_has_another() {
        // Partition 0: t1 waits for t2's earlier piece. Partition 1: t2
        // (protected there: a piece of it committed) waits for t1.
        let mut graphs = vec![g(&[(1, 2)], &[(1, false)]), g(&[(2, 1)], &[(2, false)])];
        assert_eq!(victims(&graphs), vec![abort(2, vec![1])]);
        graphs[1].protected.push(t(2));
        assert_eq!(victims(&graphs), vec![abort(1, vec![0])]);
        // Every waiter protected: the youngest goes all the same.
        graphs[0].protected.push(t(1));
        assert_eq!(victims(&graphs), vec![abort(2, vec![1])]);
    }

    #[test]
    fn chains_without_a_cycle_yield_no_victim() {
        let graphs = vec![
            g(&[(1, 2), (2, 3)], &[(1, false), (2, false)]),
            g(&[(4, 1), (5, 4)], &[(4, false), (5, false)]),
        ];
        assert!(victims(&graphs).is_empty());
    }

    #[test]
    fn each_component_gets_one_victim_and_every_partition_it_waits_at() {
        let graphs = vec![
            g(&[(1, 2), (7, 8)], &[(1, false), (7, false), (2, false)]),
            g(&[(2, 1), (8, 7)], &[(2, false), (8, false)]),
        ];
        assert_eq!(
            victims(&graphs),
            vec![abort(2, vec![0, 1]), abort(8, vec![1])]
        );
    }

    #[test]
    fn a_request_held_back_only_by_the_queue_passes_instead_of_an_abort() {
        // A broadcast range read t1 waits at partition 0 for transfer t2;
        // t2 waits at partition 1 only because t1's range read is queued
        // ahead of it there (it conflicts with no holder).
        let graphs = vec![g(&[(1, 2)], &[(1, false)]), g(&[(2, 1)], &[(2, true)])];
        assert_eq!(
            victims(&graphs),
            vec![Break {
                victim: t(2),
                pass: true,
                at: vec![1]
            }]
        );
    }

    #[test]
    fn a_member_that_would_still_wait_elsewhere_is_aborted_not_passed() {
        // Partition 0: t1 waits for t2 (a holder); t2, a broadcast, also
        // waits there for the holder t3. Partition 1: t2 waits only
        // behind t1's queued request (it could pass there). Passing it at
        // 1 would leave it waiting at 0, and t1 waiting for it: the cycle
        // would stay, and cost another look.
        let graphs = vec![
            g(&[(1, 2), (2, 3)], &[(1, false), (2, false)]),
            g(&[(2, 1)], &[(2, true)]),
        ];
        assert_eq!(victims(&graphs), vec![abort(2, vec![0, 1])]);
    }

    #[test]
    fn one_look_breaks_every_cycle_through_a_shared_waiter() {
        // t1 (a range read) waits at partition 0 for holders t2, t3, t4;
        // each waits at partition 1 for t1's range lock there.
        let graphs = vec![
            g(&[(1, 2), (1, 3), (1, 4)], &[(1, false)]),
            g(
                &[(2, 1), (3, 1), (4, 1)],
                &[(2, false), (3, false), (4, false)],
            ),
        ];
        // One component; the youngest waiter goes, the component is found
        // again, and so on: the three holders are the victims, in one look,
        // and t1, the oldest, keeps its place.
        assert_eq!(
            victims(&graphs),
            vec![abort(2, vec![1]), abort(3, vec![1]), abort(4, vec![1])]
        );
    }

    #[test]
    fn a_long_chain_into_a_cycle_does_not_overflow() {
        let n = 200_000u64;
        let mut edges: Vec<(TxnId, TxnId)> = (1..n).map(|i| (t(i), t(i + 1))).collect();
        edges.push((t(n), t(n - 1)));
        let graphs = vec![WaitGraph {
            edges,
            waiting: vec![(t(n - 1), false)],
            protected: Vec::new(),
        }];
        assert_eq!(victims(&graphs), vec![abort(n - 1, vec![0])]);
    }
}
