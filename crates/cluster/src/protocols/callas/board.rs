//! The nexus board: each running Callas transaction's progress (ranks
//! reached, outcome) and the nexus release order between them.

use super::prelude::*;

/// What a same-group transaction may wait for about a running Callas
/// transaction: the highest rank of a piece it finished, its outcome, and
/// the release of its nexus locks.
#[derive(Default)]
pub struct Progress {
    /// 1 + the highest rank of a piece it finished (0: none yet).
    rank: AtomicU32,
    /// The same-group transactions it depends on that were running when
    /// it came to depend on them; dropped when it ends, so a chain holds
    /// only what is still undecided (see [`Progress::uncommitted_depth`]).
    pub(super) below: Mutex<SmallVec<[Arc<Progress>; 2]>>,
    /// 0 while running, then `COMMITTED` or `ABORTED`.
    pub(super) outcome: AtomicU8,
    released: AtomicBool,
    /// The transaction whose release its own release waits for, if any.
    awaits: Mutex<Option<TxnId>>,
    notify: Notify,
}

const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;

/// Runtime Pipelining pipelines a transaction behind a chain of at most
/// this many uncommitted transactions; one that would be deeper waits for
/// the one it depends on to commit instead of only for its rank, so an
/// abort cascades through at most this many transactions (seed 002
/// section 5.1: "limits the depth of dependency chains").
pub const MAX_CHAIN: u32 = 4;

impl Progress {
    /// How many transactions long the chain of still-undecided ones it
    /// heads is: 0 once it ended, else 1 + the longest chain below it,
    /// counted up to `cap`. Transactions that committed since a
    /// dependency was taken no longer count: the bound is on what an
    /// abort could still cascade through.
    ///
    /// Walked depth first with a budget: a transaction asked for at most
    /// `b` more looks for at most `b - 1` below it, and stops as soon as
    /// it has found that many, so the walk is never deeper than `cap`.
    /// What each transaction was found to head is remembered for the
    /// walk, so none is walked twice for the same budget.
    ///
    /// On a hot row every transaction depends on dozens or hundreds of
    /// others, which depend on the same ones:
    /// - following every path (as this first did) took time exponential
    ///   in `cap`;
    /// - counting level by level (as it then did) expanded every level in
    ///   full. At 256 clients on ticketing that left the coordinator's
    ///   core fully busy with 600 txn/s getting through.
    ///
    /// With the newest dependencies looked at first, such a chain is
    /// found at once, in `cap` steps.
    pub(super) fn uncommitted_depth(&self, cap: u32) -> u32 {
        let mut found = FxHashMap::default();
        self.chain_within(cap, &mut found)
    }

    /// The longest undecided chain it heads, counted up to `budget`.
    /// `found` holds, per transaction already walked, the length found
    /// and the budget it was found with: exact when below that budget.
    pub(super) fn chain_within(
        &self,
        budget: u32,
        found: &mut FxHashMap<*const Progress, (u32, u32)>,
    ) -> u32 {
        if budget == 0 || self.outcome.load(Ordering::Acquire) != 0 {
            return 0;
        }
        if budget == 1 {
            return 1;
        }
        let key = self as *const Progress;
        if let Some(&(length, asked)) = found.get(&key) {
            if length < asked || budget <= asked {
                return length.min(budget);
            }
        }
        // No lock is held while walking below: each dependency is taken
        // out on its own (the list only grows, or is cleared when this one
        // ends).
        let n = self.below.lock().len();
        if n == 0 {
            // Nothing below: nothing worth remembering (the common case,
            // which then allocates nothing).
            return 1;
        }
        let mut longest = 1;
        for i in (0..n).rev() {
            if longest == budget {
                break;
            }
            let Some(p) = self.below.lock().get(i).cloned() else {
                break;
            };
            longest = longest.max(1 + p.chain_within(budget - 1, found));
        }
        found.insert(key, (longest, budget));
        longest
    }

    /// Whether it finished a piece of rank `>= rank` or ended.
    pub(super) fn has_reached(&self, rank: u32) -> bool {
        self.outcome.load(Ordering::Acquire) != 0 || self.rank.load(Ordering::Acquire) > rank
    }

    pub(super) fn finished_piece(&self, rank: u32) {
        self.rank.fetch_max(rank + 1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    pub(super) fn decide(&self, committed: bool) {
        let o = if committed { COMMITTED } else { ABORTED };
        self.outcome.store(o, Ordering::Release);
        self.below.lock().clear();
        self.notify.notify_waiters();
    }

    pub(super) fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Waits until `ready` says something.
    pub(super) async fn until<T>(&self, ready: impl Fn(&Progress) -> Option<T>) -> T {
        loop {
            // Created before the check, so a notification in between is
            // not lost.
            let notified = self.notify.notified();
            if let Some(v) = ready(self) {
                return v;
            }
            notified.await;
        }
    }

    /// `until`, and how long it waited (`None`: `ready` said something at
    /// once), for the cluster's wait counters.
    pub(super) async fn timed_until<T>(
        &self,
        ready: impl Fn(&Progress) -> Option<T>,
    ) -> (T, Option<Duration>) {
        if let Some(v) = ready(self) {
            return (v, None);
        }
        let start = Instant::now();
        let v = self.until(ready).await;
        (v, Some(start.elapsed()))
    }

    /// Runtime Pipelining's rank-progress wait: until the transaction
    /// finished a piece of rank `>= rank`, or committed. An abort is an
    /// error: the waiter read its uncommitted state. A wait longer than
    /// `patience` is an error too (see [`Progress::committed`]).
    /// `Ok(Some(how long))` when it had to wait.
    pub(super) async fn reached(&self, rank: u32, patience: Duration) -> Result<Option<Duration>> {
        let wait = self.timed_until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => (p.rank.load(Ordering::Acquire) > rank).then_some(Ok(())),
        });
        match tokio::time::timeout(patience, wait).await {
            Ok((r, waited)) => r.map(|()| waited),
            Err(_) => Err(Error::Aborted(AbortCause::LockTimeout)),
        }
    }

    /// Runtime Pipelining's commit dependency: until the transaction
    /// committed (`Ok`) or aborted (an error). Waits that the rank order
    /// does not cover (conflicts the analysis removed, such as commutative
    /// increments, still order commits so undo stays exact) could form a
    /// cycle no lock table sees; like a lock wait, a wait longer than
    /// `patience` (the lock wait timeout) aborts the waiter.
    /// `Ok(Some(how long))` when it had to wait.
    pub(super) async fn committed(&self, patience: Duration) -> Result<Option<Duration>> {
        let wait = self.timed_until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => None,
        });
        match tokio::time::timeout(patience, wait).await {
            Ok((r, waited)) => r.map(|()| waited),
            Err(_) => Err(Error::Aborted(AbortCause::LockTimeout)),
        }
    }
}

/// The running Callas transactions' progress, until each released its
/// nexus locks. Sharded so coordinators do not contend on one mutex.
pub struct NexusBoard {
    shards: Vec<Mutex<HashMap<TxnId, Arc<Progress>>>>,
}

impl Default for NexusBoard {
    fn default() -> Self {
        NexusBoard {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl NexusBoard {
    pub(super) fn shard(&self, t: TxnId) -> &Mutex<HashMap<TxnId, Arc<Progress>>> {
        &self.shards[(t.id as usize) % self.shards.len()]
    }

    /// Registers `t` before it takes its first lock.
    pub(super) fn register(&self, t: TxnId) -> Arc<Progress> {
        let r = Arc::new(Progress::default());
        self.shard(t).lock().insert(t, r.clone());
        r
    }

    pub(super) fn get(&self, t: TxnId) -> Option<Arc<Progress>> {
        self.shard(t).lock().get(&t).cloned()
    }

    /// `t` released its nexus locks (or never will hold any).
    pub(super) fn released(&self, t: TxnId) {
        if let Some(r) = self.shard(t).lock().remove(&t) {
            r.release();
        }
    }

    /// `txn`'s release waits until `t` released its nexus locks (at once
    /// if `t` is not registered: it already did). If the wait is found to be part of a cycle of release waits, it calls
    /// `on_cycle` (once) and goes on waiting.
    ///
    /// No execution has such a cycle: a release waits only for
    /// transactions its own depends on, and the dependencies inside a
    /// group are those of a serializable execution (a `chop` group is
    /// refused unless its chopping is free of SC-cycles, `check_chop`;
    /// `sc` runs a chopping free of them; the partitions forget what a
    /// rolled-back piece used, `NexusUses::forget_piece`, and its
    /// coordinator what it depended on, `CallasState::forget_after`), so
    /// they form no cycle. Should one appear all the same (a bug), the
    /// rule is not dropped: the waits go on, every transaction of the
    /// cycle keeps its nexus locks, other groups' transactions that need
    /// them time out as lock waits do, and the cycle is logged and
    /// counted (`release_cycles`), which fails `brine bench --check`.
    pub(super) async fn wait_in_order(&self, txn: TxnId, t: TxnId, on_cycle: impl FnOnce()) {
        const LOOK_AFTER: Duration = Duration::from_millis(50);
        let Some(r) = self.get(t) else {
            return;
        };
        let me = self.get(txn);
        if let Some(me) = &me {
            *me.awaits.lock() = Some(t);
        }
        let mut on_cycle = Some(on_cycle);
        loop {
            let released = r.until(|p| p.released.load(Ordering::Acquire).then_some(()));
            if tokio::time::timeout(LOOK_AFTER, released).await.is_ok() {
                break;
            }
            if on_cycle.is_some() && self.awaits_reach(t, txn) {
                if let Some(f) = on_cycle.take() {
                    f();
                }
                tracing::error!(
                    %txn,
                    %t,
                    "nexus release order: a cycle of release waits (a bug: the group's \
                     dependencies should be those of a serializable execution); the waits go on"
                );
            }
        }
        if let Some(me) = &me {
            *me.awaits.lock() = None;
        }
    }

    /// Whether following what each release waits for leads from `from` to
    /// `to`.
    pub(super) fn awaits_reach(&self, from: TxnId, to: TxnId) -> bool {
        let mut cur = from;
        for _ in 0..1024 {
            let Some(next) = self.get(cur).and_then(|p| *p.awaits.lock()) else {
                return false;
            };
            if next == to {
                return true;
            }
            cur = next;
        }
        false
    }

    /// Whether `t` may still hold nexus locks.
    pub(super) fn holds(&self, t: TxnId) -> bool {
        self.shard(t).lock().contains_key(&t)
    }

    /// Transactions still holding nexus locks (for tests and status).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
