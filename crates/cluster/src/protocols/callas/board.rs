//! The nexus board: each running Callas transaction's progress (ranks
//! reached, outcome) and the nexus release order between them.
//!
//! Across processes (`NexusBoard::multi_process`), a transaction's
//! progress stays at its home (its coordinator's process); another
//! process that meets it (a dependency its partitions reported) keeps a
//! mirror of it, fed by watches sent to the home (`docs/callas.md`,
//! "Across processes").

use std::collections::VecDeque;
use std::sync::Weak;

use futures::future::BoxFuture;

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
    /// A mirror of a transaction homed in another process: the length of
    /// the undecided chain it heads, as its home last told (0: not a
    /// mirror; its own `below` is then walked).
    told_depth: AtomicU32,
}

/// What a watcher knows of a transaction's progress
/// ([`Progress::seen`]); the home answers a watch once it knows more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// 1 + the highest rank of a piece it finished.
    pub rank: u32,
    /// 0 while running, then committed (1) or aborted (2).
    pub outcome: u8,
    pub released: bool,
    /// The undecided chain it heads (answers only; see
    /// [`Progress::uncommitted_depth`]).
    pub depth: u32,
}

impl Seen {
    /// What a home says of a transaction it no longer has: it ended and
    /// released, with `outcome` (aborted if the home does not remember:
    /// assuming so only ever aborts a dependant that has not committed,
    /// which is always allowed).
    fn gone(outcome: Option<u8>) -> Seen {
        Seen {
            rank: 0,
            outcome: outcome.unwrap_or(ABORTED),
            released: true,
            depth: 0,
        }
    }

    /// Whether `self` tells more than `known`.
    fn beyond(&self, known: &Seen) -> bool {
        self.rank > known.rank
            || (self.outcome != 0 && known.outcome == 0)
            || (self.released && !known.released)
    }
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
        // A mirror: its chain is walked at its home, which told its length.
        let told = self.told_depth.load(Ordering::Acquire);
        if told > 0 {
            return told.min(budget);
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

    /// A mirror of a transaction homed in another process, before its
    /// home told anything: running, heading a chain of one.
    fn mirror() -> Progress {
        Progress {
            told_depth: AtomicU32::new(1),
            ..Progress::default()
        }
    }

    /// What a watcher sees of it now (without `depth`).
    pub fn seen(&self) -> Seen {
        Seen {
            rank: self.rank.load(Ordering::Acquire),
            outcome: self.outcome.load(Ordering::Acquire),
            released: self.released.load(Ordering::Acquire),
            depth: 0,
        }
    }

    /// A mirror learns what its transaction's home told.
    pub fn learn(&self, s: Seen) {
        self.told_depth.store(s.depth.max(1), Ordering::Release);
        if s.rank > 0 {
            self.finished_piece(s.rank - 1);
        }
        if s.outcome != 0 && self.outcome.load(Ordering::Acquire) == 0 {
            self.decide(s.outcome == COMMITTED);
        }
        if s.released {
            self.release();
        }
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
    shards: Vec<Mutex<Shard>>,
    /// In a multi-process cluster: this process's node and how it reaches
    /// the homes of the others' transactions.
    remote: Option<Remote>,
}

#[derive(Default)]
struct Shard {
    /// This process's transactions that may still hold nexus locks, and
    /// mirrors of other processes' transactions not yet seen released.
    live: HashMap<TxnId, Arc<Progress>>,
    /// Multi-process only: transactions that left `live` recently, and
    /// their outcomes, oldest first (this process's, to answer watches
    /// that come after them; others', not to watch them again).
    ended: FxHashMap<TxnId, u8>,
    ended_order: VecDeque<TxnId>,
}

/// Outcomes each shard remembers after their transactions left the board.
const ENDED_PER_SHARD: usize = 1024;

impl Shard {
    fn ended(&mut self, t: TxnId, outcome: u8) {
        if self.ended.insert(t, outcome).is_none() {
            self.ended_order.push_back(t);
        }
        while self.ended_order.len() > ENDED_PER_SHARD {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

/// Sends a watch (encoded [`CallasRequest`]) to a node's Callas and
/// answers its encoded [`Seen`].
pub type Homes = Arc<dyn Fn(NodeId, Vec<u8>) -> BoxFuture<'static, Result<Vec<u8>>> + Send + Sync>;

/// A board's view of the other processes.
struct Remote {
    node: NodeId,
    homes: Homes,
    /// The board itself, for the watches it spawns.
    board: Weak<NexusBoard>,
}

/// Requests to a process's Callas (`Protocol::serve`).
#[derive(Debug, Serialize, Deserialize)]
pub enum CallasRequest {
    /// Answer once `txn` (homed here) is beyond `seen`, or after a while
    /// with what it is.
    Watch { txn: TxnId, seen: Seen },
}

/// How long a home holds a watch with nothing new before it answers with
/// what is (well under the transport's request timeout).
const WATCH_HOLD: Duration = Duration::from_secs(5);

/// The node a transaction's coordinator runs on (its home).
fn home_of(t: TxnId) -> NodeId {
    NodeId((t.id >> crate::cluster::NODE_TXN_SHIFT) as u32)
}

impl Default for NexusBoard {
    fn default() -> Self {
        NexusBoard {
            shards: (0..64).map(|_| Mutex::new(Shard::default())).collect(),
            remote: None,
        }
    }
}

impl NexusBoard {
    /// The board of process `node` of a multi-process cluster: other
    /// processes' transactions are mirrored, fed by watches sent to their
    /// homes through `homes`.
    pub fn multi_process(node: NodeId, homes: Homes) -> Arc<NexusBoard> {
        Arc::new_cyclic(|me| NexusBoard {
            remote: Some(Remote {
                node,
                homes,
                board: me.clone(),
            }),
            ..NexusBoard::default()
        })
    }

    fn shard(&self, t: TxnId) -> &Mutex<Shard> {
        &self.shards[(t.id as usize) % self.shards.len()]
    }

    /// Registers `t` before it takes its first lock.
    pub(super) fn register(&self, t: TxnId) -> Arc<Progress> {
        // A transaction rolled forward under its owner id while its given-up
        // attempt is still registered (`across::gave_up_in_doubt`) keeps
        // its progress: whoever waits for it waits for the roll-forward.
        self.shard(t)
            .lock()
            .live
            .entry(t)
            .or_insert_with(|| Arc::new(Progress::default()))
            .clone()
    }

    /// `t`'s progress; `None` once it released its nexus locks. A
    /// transaction homed in another process is mirrored from the first
    /// time it is asked for.
    pub(super) fn get(&self, t: TxnId) -> Option<Arc<Progress>> {
        let mut shard = self.shard(t).lock();
        if let Some(p) = shard.live.get(&t) {
            return Some(p.clone());
        }
        let remote = self.remote.as_ref()?;
        if home_of(t) == remote.node || shard.ended.contains_key(&t) {
            return None;
        }
        let mirror = Arc::new(Progress::mirror());
        shard.live.insert(t, mirror.clone());
        drop(shard);
        tokio::spawn(watch(
            remote.board.clone(),
            remote.homes.clone(),
            t,
            mirror.clone(),
        ));
        Some(mirror)
    }

    /// `t` released its nexus locks (or never will hold any).
    pub(super) fn released(&self, t: TxnId) {
        let mut shard = self.shard(t).lock();
        if let Some(r) = shard.live.remove(&t) {
            if self.remote.is_some() {
                shard.ended(t, r.outcome.load(Ordering::Acquire));
            }
            drop(shard);
            r.release();
        }
    }

    /// A watch of `txn`, homed here: what it is once beyond `seen`, or
    /// after [`WATCH_HOLD`].
    pub async fn serve_watch(&self, txn: TxnId, seen: Seen) -> Seen {
        let (p, outcome) = {
            let shard = self.shard(txn).lock();
            (
                shard.live.get(&txn).cloned(),
                shard.ended.get(&txn).copied(),
            )
        };
        let Some(p) = p else {
            return Seen::gone(outcome);
        };
        let _ = tokio::time::timeout(
            WATCH_HOLD,
            p.until(|p| p.seen().beyond(&seen).then_some(())),
        )
        .await;
        Seen {
            depth: p.uncommitted_depth(MAX_CHAIN),
            ..p.seen()
        }
    }

    /// [`NexusBoard::serve_watch`] for an encoded [`CallasRequest`].
    pub async fn serve(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let req: CallasRequest = postcard::from_bytes(bytes)
            .map_err(|e| Error::Internal(format!("a Callas request: {e}")))?;
        let CallasRequest::Watch { txn, seen } = req;
        let answer = self.serve_watch(txn, seen).await;
        postcard::to_stdvec(&answer).map_err(|e| Error::Internal(format!("a Callas answer: {e}")))
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

    /// Waits until `t`, registered here, released its nexus locks (at once
    /// if it is not registered).
    pub(super) async fn until_released(&self, t: TxnId) {
        let progress = self.shard(t).lock().live.get(&t).cloned();
        if let Some(p) = progress {
            p.until(|p| p.released.load(Ordering::Acquire).then_some(()))
                .await;
        }
    }

    /// Whether `t` may still hold nexus locks (one of another process
    /// does unless seen released).
    pub(super) fn holds(&self, t: TxnId) -> bool {
        let shard = self.shard(t).lock();
        match shard.live.get(&t) {
            Some(p) => !p.released.load(Ordering::Acquire),
            None => match &self.remote {
                Some(r) => home_of(t) != r.node && !shard.ended.contains_key(&t),
                None => false,
            },
        }
    }

    /// Transactions still holding nexus locks, and mirrors (for tests and
    /// status).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().live.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Keeps the mirror of `t` (homed in another process) up to date: one
/// watch after the other until its home says it released its nexus locks.
/// A home that answers nothing for [`crate::coordinator::DECISION_PATIENCE`]
/// is taken to have aborted `t`: its dependants that have not committed
/// abort (always allowed), and waits on its release end.
async fn watch(board: Weak<NexusBoard>, homes: Homes, t: TxnId, mirror: Arc<Progress>) {
    let home = home_of(t);
    let mut heard = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let req = CallasRequest::Watch {
            txn: t,
            seen: mirror.seen(),
        };
        let answer = match postcard::to_stdvec(&req) {
            Ok(bytes) => homes(home, bytes).await.and_then(|b| {
                postcard::from_bytes::<Seen>(&b)
                    .map_err(|e| Error::Internal(format!("a Callas answer: {e}")))
            }),
            Err(e) => Err(Error::Internal(format!("a Callas request: {e}"))),
        };
        match answer {
            Ok(seen) => {
                mirror.learn(seen);
                if seen.released {
                    break;
                }
                heard = tokio::time::Instant::now();
                pause = Duration::from_millis(1);
            }
            Err(e) if heard.elapsed() >= crate::coordinator::DECISION_PATIENCE => {
                tracing::warn!(%t, "Callas: the home of {t} (node {}) did not answer: {e}; taken as aborted", home.0);
                mirror.learn(Seen::gone(None));
                break;
            }
            Err(e) => {
                tracing::debug!(%t, "Callas: a watch of {t} failed: {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
    if let Some(board) = board.upgrade() {
        let outcome = mirror.outcome.load(Ordering::Acquire);
        let mut shard = board.shard(t).lock();
        shard.live.remove(&t);
        shard.ended(t, outcome);
    }
}
