//! The simulated network link of the embedded cluster.
//!
//! Every message between two different nodes is handed to the link, which
//! delivers it after the configured one-way delay plus seeded jitter, in FIFO
//! order per (from, to) pair like a TCP connection would. Messages within one
//! node are delivered at once and never touch the link.
//!
//! ```text
//!   sender ──schedule(from, to, deliver)──► [delay thread: min-heap by due time]
//!                                                  │ sleeps until the earliest due
//!                                                  ▼
//!                                            deliver() (pushes into the
//!                                            receiver's channel)
//! ```
//!
//! Tokio's timer has millisecond granularity, far too coarse for a 100 µs
//! link, so delivery runs on one dedicated thread that sleeps with a 1 µs
//! timer slack, wakes early by the oversleep it has measured so far, and
//! spins only through the last few microseconds before a due time.
//! The measured one-way delay is reported with every benchmark result.
//!
//! On the runtime's clock instead (`LinkClock::Runtime`), each directed
//! pair of nodes has a task of the runtime that delivers its messages in
//! order at their due times on tokio's clock. On a paused single-threaded
//! runtime that clock is virtual: the same seed then gives the same run,
//! delays and jitter included, so a failing trial replays exactly.
//!
//! Faults (`FaultConfig`, seeded): a message between two nodes may be lost,
//! and chosen nodes may be cut off from the others for chosen intervals
//! (every message across the cut is lost). A lost message is dropped with
//! what it carries, a reply's channel included: whoever waits for the
//! answer learns at once that none will come, as a broken connection
//! tells it. Reordering needs no fault of its own: messages on one pair
//! stay in order (TCP), and jitter reorders those of different pairs.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use brine_core::NodeId;

use crate::topology::Topology;

/// How the link keeps time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkClock {
    /// A thread of its own on the machine's clock, precise to a few
    /// microseconds (benchmarks).
    #[default]
    Thread,
    /// Tasks of the runtime on tokio's clock: with a paused
    /// single-threaded runtime, the run replays from its seed.
    Runtime,
}

/// Faults the link injects, drawn from the cluster's seed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Chance that a message between two nodes is lost (0 to 1).
    pub loss: f64,
    /// Messages are lost at random from this long after the link started
    /// (a cluster loads its data first, say) ...
    pub loss_from: Duration,
    /// ... until this long after it (`None`: for as long as it runs).
    pub loss_until: Option<Duration>,
    /// Intervals during which nodes are cut off from the others.
    pub cuts: Vec<Cut>,
    /// Chance that a message between two nodes is held back for up to
    /// `reorder_window` before it enters the link, so messages sent after
    /// it on the same pair may overtake it (0 to 1). One connection keeps
    /// its order, but brine's transport sends each request on its own
    /// task: two requests from one node to one partition may arrive in
    /// either order, and so may a request and a one-way message.
    pub reorder: f64,
    pub reorder_window: Duration,
    /// Chance that a decision (a commit, abort or release) between two
    /// nodes arrives twice: a copy, whose answer nobody awaits, follows it
    /// up to `reorder_window` later (at least 1 ms), possibly after what
    /// was sent next. One connection never duplicates, and brine resends
    /// nothing but decisions, so this is the duplicate a network can make
    /// of brine's traffic: a resend whose first copy also arrived, later.
    /// Statements are never duplicated (nor resent).
    pub duplicate: f64,
    /// The faults begin when `Cluster::start_faults` is called (a
    /// benchmark: once its data is loaded), not when the link starts;
    /// their times count from then.
    pub on_demand: bool,
}

impl FaultConfig {
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.cuts.is_empty() && self.reorder <= 0.0 && self.duplicate <= 0.0
    }
}

/// A network partition: `side` (nodes) cannot reach the other nodes, nor
/// they it, from `from` to `until` after the faults began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub side: Vec<NodeId>,
    pub from: Duration,
    pub until: Duration,
}

impl Cut {
    fn separates(&self, a: NodeId, b: NodeId, at: Duration) -> bool {
        at >= self.from && at < self.until && self.side.contains(&a) != self.side.contains(&b)
    }
}

/// What the faults did so far.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Messages lost at random.
    pub lost: AtomicU64,
    /// Messages lost to a cut.
    pub cut: AtomicU64,
    /// Messages held back so later ones could overtake them.
    pub reordered: AtomicU64,
    /// Decisions delivered twice.
    pub duplicated: AtomicU64,
}

/// What the faults do to one message.
enum Fate {
    Passes,
    Lost,
    /// Held back this long before it enters the link.
    HeldBack(Duration),
}

/// The faults of one link and their random source.
struct Faults {
    config: FaultConfig,
    /// When the link started; the faults began `began_ns` after it
    /// (`NOT_BEGUN`: not yet), and stop once `ended`.
    base: Instant,
    began_ns: AtomicU64,
    ended: std::sync::atomic::AtomicBool,
    rng: parking_lot::Mutex<SmallRng>,
    stats: Arc<FaultStats>,
}

const NOT_BEGUN: u64 = u64::MAX;

impl Faults {
    /// How long the faults have run, if they run now.
    fn running_for(&self) -> Option<Duration> {
        let began = self.began_ns.load(Ordering::Acquire);
        if began == NOT_BEGUN || self.ended.load(Ordering::Acquire) {
            return None;
        }
        Some(
            crate::partition::now()
                .saturating_duration_since(self.base)
                .saturating_sub(Duration::from_nanos(began)),
        )
    }

    /// Whether a decision sent now arrives twice, and if so how long
    /// after the first its copy enters the link.
    fn duplicates(&self) -> Option<Duration> {
        if self.config.duplicate <= 0.0 {
            return None;
        }
        self.running_for()?;
        let later = self.held_back(self.config.duplicate, Duration::from_millis(1))?;
        self.stats.duplicated.fetch_add(1, Ordering::Relaxed);
        Some(later)
    }

    /// With chance `p`, a delay of up to `reorder_window` (at least
    /// `floor`) that a message is held back by.
    fn held_back(&self, p: f64, floor: Duration) -> Option<Duration> {
        let mut rng = self.rng.lock();
        if !rng.gen_bool(p.min(1.0)) {
            return None;
        }
        let us = self.config.reorder_window.max(floor).as_micros().max(1) as u64;
        Some(Duration::from_micros(rng.gen_range(1..=us)))
    }

    /// What becomes of a message from `from` to `to` sent now.
    fn fate(&self, from: NodeId, to: NodeId) -> Fate {
        let Some(at) = self.running_for() else {
            return Fate::Passes;
        };
        if self.config.cuts.iter().any(|c| c.separates(from, to, at)) {
            self.stats.cut.fetch_add(1, Ordering::Relaxed);
            return Fate::Lost;
        }
        let lossy = self.config.loss > 0.0
            && at >= self.config.loss_from
            && self.config.loss_until.is_none_or(|u| at < u);
        if lossy && self.rng.lock().gen_bool(self.config.loss.min(1.0)) {
            self.stats.lost.fetch_add(1, Ordering::Relaxed);
            return Fate::Lost;
        }
        if self.config.reorder > 0.0 && !self.config.reorder_window.is_zero() {
            if let Some(held) = self.held_back(self.config.reorder, Duration::ZERO) {
                self.stats.reordered.fetch_add(1, Ordering::Relaxed);
                return Fate::HeldBack(held);
            }
        }
        Fate::Passes
    }
}

/// Link settings. `delay_us = 0` makes every message immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// One-way delay between two nodes.
    pub delay_us: u64,
    /// Uniform extra delay in `[0, jitter_us]` per message, seeded.
    pub jitter_us: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay_us: 100,
            jitter_us: 0,
        }
    }
}

type Delivery = Box<dyn FnOnce() + Send>;

struct Scheduled {
    due: Instant,
    seq: u64,
    deliver: Delivery,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Measured link statistics: how late deliveries were relative to the send.
#[derive(Debug, Default)]
pub struct LinkStats {
    pub messages: AtomicU64,
    pub total_delay_ns: AtomicU64,
    pub max_delay_ns: AtomicU64,
}

impl LinkStats {
    /// Mean measured one-way delay of delayed messages, in microseconds.
    pub fn mean_delay_us(&self) -> f64 {
        let n = self.messages.load(Ordering::Relaxed);
        if n == 0 {
            return 0.0;
        }
        self.total_delay_ns.load(Ordering::Relaxed) as f64 / n as f64 / 1000.0
    }

    pub fn max_delay_us(&self) -> f64 {
        self.max_delay_ns.load(Ordering::Relaxed) as f64 / 1000.0
    }
}

/// Handle to the simulated link. Cheap to clone.
#[derive(Clone)]
pub struct Link {
    config: LinkConfig,
    topology: Option<Arc<Topology>>,
    /// The delivery thread (`LinkClock::Thread`, delayed).
    tx: Option<crossbeam_channel::Sender<(NodeId, NodeId, Instant, Delivery)>>,
    /// The delivery tasks (`LinkClock::Runtime`, delayed).
    tasks: Option<Arc<RuntimeLink>>,
    faults: Option<Arc<Faults>>,
    pub stats: Arc<LinkStats>,
    pub fault_stats: Arc<FaultStats>,
}

/// The link on the runtime's clock: one delivery task per directed pair.
struct RuntimeLink {
    config: LinkConfig,
    topology: Option<Arc<Topology>>,
    state: parking_lot::Mutex<RuntimeState>,
    stats: Arc<LinkStats>,
}

/// A message on its way over one pair: when sent, when due, its delivery.
type InFlight = (Instant, Instant, Delivery);

struct RuntimeState {
    rng: SmallRng,
    /// Per directed pair: its task's queue and the last due time given.
    pairs: HashMap<(NodeId, NodeId), (tokio::sync::mpsc::UnboundedSender<InFlight>, Instant)>,
}

impl RuntimeLink {
    fn send(&self, from: NodeId, to: NodeId, deliver: Delivery) {
        let sent = crate::partition::now();
        let mut st = self.state.lock();
        let jitter = if self.config.jitter_us > 0 {
            Duration::from_micros(st.rng.gen_range(0..=self.config.jitter_us))
        } else {
            Duration::ZERO
        };
        let pair = self.topology.as_ref().and_then(|t| t.one_way(from.0, to.0));
        let mut due = sent + pair.unwrap_or(Duration::from_micros(self.config.delay_us)) + jitter;
        let stats = self.stats.clone();
        let (queue, last) = st.pairs.entry((from, to)).or_insert_with(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<InFlight>();
            tokio::spawn(async move {
                while let Some((sent, due, deliver)) = rx.recv().await {
                    tokio::time::sleep_until(due.into()).await;
                    let took = crate::partition::now().saturating_duration_since(sent);
                    let ns = took.as_nanos() as u64;
                    stats.messages.fetch_add(1, Ordering::Relaxed);
                    stats.total_delay_ns.fetch_add(ns, Ordering::Relaxed);
                    stats.max_delay_ns.fetch_max(ns, Ordering::Relaxed);
                    deliver();
                }
            });
            (tx, due)
        });
        // In order per pair, as over one connection.
        due = due.max(*last);
        *last = due;
        // If the task is gone the runtime is shutting down: the message is
        // lost, as on a dead network.
        let _ = queue.send((sent, due, deliver));
    }
}

/// Deliveries happen in batches at least this far apart, so a busy link
/// costs a fraction of a core instead of one spinning core.
const TICK: Duration = Duration::from_micros(20);
/// A batch first takes every message due within this of the batch's time;
/// the horizon then adapts to the measured lateness, up to `MAX_AHEAD`.
const HALF_TICK: Duration = Duration::from_micros(10);
const MAX_AHEAD: Duration = Duration::from_micros(40);
/// A busy machine wakes sleepers later; past this the thread would spin
/// most of the time, so the estimate is capped.
const MAX_OVERSLEEP: Duration = Duration::from_micros(12);
/// First guess of how late a timed sleep wakes, before any is measured.
const INITIAL_OVERSLEEP_US: u64 = 8;

impl Link {
    pub fn new(config: LinkConfig, seed: u64) -> Link {
        Link::with_topology(config, seed, None)
    }

    /// A link whose messages between two sites of `topology` take their
    /// pair's delay (every other message the uniform one).
    pub fn with_topology(config: LinkConfig, seed: u64, topology: Option<Arc<Topology>>) -> Link {
        Link::build(
            config,
            seed,
            topology,
            LinkClock::Thread,
            &FaultConfig::default(),
        )
    }

    /// A link on `clock`, with `faults`.
    pub fn build(
        config: LinkConfig,
        seed: u64,
        topology: Option<Arc<Topology>>,
        clock: LinkClock,
        faults: &FaultConfig,
    ) -> Link {
        let stats = Arc::new(LinkStats::default());
        let fault_stats = Arc::new(FaultStats::default());
        let faults = (!faults.is_none()).then(|| {
            Arc::new(Faults {
                config: faults.clone(),
                base: crate::partition::now(),
                began_ns: AtomicU64::new(if faults.on_demand { NOT_BEGUN } else { 0 }),
                ended: Default::default(),
                // Its own stream, apart from the jitter's.
                rng: parking_lot::Mutex::new(SmallRng::seed_from_u64(seed ^ 0x6661_756c_7473)),
                stats: fault_stats.clone(),
            })
        });
        let immediate = Link {
            config,
            topology: topology.clone(),
            tx: None,
            tasks: None,
            faults,
            stats: stats.clone(),
            fault_stats,
        };
        if config.delay_us == 0 && config.jitter_us == 0 && topology.is_none() {
            return immediate;
        }
        if clock == LinkClock::Runtime {
            return Link {
                tasks: Some(Arc::new(RuntimeLink {
                    config,
                    topology,
                    state: parking_lot::Mutex::new(RuntimeState {
                        rng: SmallRng::seed_from_u64(seed),
                        pairs: HashMap::new(),
                    }),
                    stats,
                })),
                ..immediate
            };
        }
        let (tx, rx) = crossbeam_channel::unbounded::<(NodeId, NodeId, Instant, Delivery)>();
        let thread_stats = stats.clone();
        let pairs = topology.clone();
        thread::Builder::new()
            .name("brine-link".into())
            .spawn(move || run_link(config, pairs, seed, rx, thread_stats))
            .expect("spawning the link thread");
        Link {
            tx: Some(tx),
            ..immediate
        }
    }

    pub fn topology(&self) -> Option<&Arc<Topology>> {
        self.topology.as_ref()
    }

    /// The delay between a client at site `site` and server `server`, one
    /// way, where a topology gives it (`None`: clients are not placed).
    pub fn client_hop(&self, site: u32, server: u32) -> Option<Duration> {
        self.topology.as_ref()?.one_way(site, server)
    }

    /// `work` as a client at `site` sees it run at `server`: the request's
    /// trip there before it, the answer's trip back after (where a
    /// topology places clients; else `work` alone).
    pub async fn client_trip<T>(
        &self,
        site: u32,
        server: u32,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        let Some(hop) = self.client_hop(site, server) else {
            return work.await;
        };
        tokio::time::sleep(hop).await;
        let out = work.await;
        tokio::time::sleep(hop).await;
        out
    }

    pub fn config(&self) -> LinkConfig {
        self.config
    }

    /// Begins the faults of an on-demand `FaultConfig` now (their times
    /// count from here); nothing if they began already.
    pub fn begin_faults(&self) {
        if let Some(f) = &self.faults {
            let ns = crate::partition::now()
                .saturating_duration_since(f.base)
                .as_nanos() as u64;
            let _ = f
                .began_ns
                .compare_exchange(NOT_BEGUN, ns, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Ends the faults: every message gets through from now on.
    pub fn end_faults(&self) {
        if let Some(f) = &self.faults {
            f.ended.store(true, Ordering::Release);
        }
    }

    /// True if messages between different nodes are delayed.
    pub fn is_delayed(&self) -> bool {
        self.tx.is_some() || self.tasks.is_some()
    }

    /// Delivers `deliver` after the link delay if `from != to`, else now;
    /// or drops it, if a fault loses it (between two nodes only).
    pub fn send(&self, from: NodeId, to: NodeId, deliver: impl FnOnce() + Send + 'static) {
        if from == to {
            return deliver();
        }
        if let Some(f) = &self.faults {
            match f.fate(from, to) {
                Fate::Passes => {}
                Fate::Lost => return,
                Fate::HeldBack(held) => return self.enter_after(held, from, to, Box::new(deliver)),
            }
        }
        self.enter(from, to, Box::new(deliver));
    }

    /// Whether a decision from `from` to `to` sent now arrives twice
    /// (`FaultConfig::duplicate`), and if so how long after it its copy
    /// goes ([`send_after`](Self::send_after)).
    pub fn duplicate_delay(&self, from: NodeId, to: NodeId) -> Option<Duration> {
        if from == to {
            return None;
        }
        self.faults.as_ref().and_then(|f| f.duplicates())
    }

    /// [`send`](Self::send) `held` from now, past the faults (a copy the
    /// faults made).
    pub fn send_after(
        &self,
        held: Duration,
        from: NodeId,
        to: NodeId,
        deliver: impl FnOnce() + Send + 'static,
    ) {
        self.enter_after(held, from, to, Box::new(deliver));
    }

    /// Puts a message on the link `held` from now (on a task of the
    /// runtime; at once outside one).
    fn enter_after(&self, held: Duration, from: NodeId, to: NodeId, deliver: Delivery) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let link = self.clone();
                rt.spawn(async move {
                    tokio::time::sleep(held).await;
                    link.enter(from, to, deliver);
                });
            }
            Err(_) => self.enter(from, to, deliver),
        }
    }

    /// Puts a message on the link (past its faults).
    fn enter(&self, from: NodeId, to: NodeId, deliver: Delivery) {
        if let Some(tasks) = &self.tasks {
            return tasks.send(from, to, deliver);
        }
        match &self.tx {
            Some(tx) => {
                // If the link thread is gone the cluster is shutting down;
                // dropping the message is what a dead network does.
                let _ = tx.send((from, to, Instant::now(), deliver));
            }
            None => deliver(),
        }
    }
}

fn set_fine_timer_slack() {
    // Default timer slack is 50 µs, half the link delay we simulate.
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

fn run_link(
    config: LinkConfig,
    topology: Option<Arc<Topology>>,
    seed: u64,
    rx: crossbeam_channel::Receiver<(NodeId, NodeId, Instant, Delivery)>,
    stats: Arc<LinkStats>,
) {
    set_fine_timer_slack();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut heap: BinaryHeap<Reverse<(Scheduled, Instant)>> = BinaryHeap::new();
    // Last due time per directed link, so delivery stays FIFO per link.
    let mut last_due: HashMap<(NodeId, NodeId), Instant> = HashMap::new();
    let mut seq = 0u64;
    let delay = Duration::from_micros(config.delay_us);
    let mut enqueue =
        |heap: &mut BinaryHeap<_>,
         (from, to, sent, deliver): (NodeId, NodeId, Instant, Delivery)| {
            let jitter = if config.jitter_us > 0 {
                Duration::from_micros(rng.gen_range(0..=config.jitter_us))
            } else {
                Duration::ZERO
            };
            let pair = topology.as_ref().and_then(|t| t.one_way(from.0, to.0));
            let mut due = sent + pair.unwrap_or(delay) + jitter;
            let last = last_due.entry((from, to)).or_insert(due);
            if *last > due {
                due = *last;
            }
            *last = due;
            seq += 1;
            heap.push(Reverse((Scheduled { due, seq, deliver }, sent)));
        };
    // How late a timed sleep wakes, learned as we go: the thread sleeps that
    // much less than the wait.
    let mut oversleep = Duration::from_micros(INITIAL_OVERSLEEP_US);
    let mut ahead = HALF_TICK;
    loop {
        // Drain new messages without blocking; block only on an empty heap.
        while let Ok(m) = rx.try_recv() {
            enqueue(&mut heap, m);
        }
        if heap.is_empty() {
            match rx.recv() {
                Ok(m) => enqueue(&mut heap, m),
                Err(_) => return,
            }
            continue;
        }
        // Deliver everything due within the horizon. The horizon follows
        // the measured lateness so the mean delay stays the configured
        // one; each message is off by at most about a tick.
        let batch_start = Instant::now();
        let horizon = batch_start + ahead;
        let mut lateness_ns: i64 = 0;
        let mut batch = 0i64;
        while let Some(Reverse((s, _))) = heap.peek() {
            if s.due > horizon {
                break;
            }
            let Some(Reverse((s, sent))) = heap.pop() else {
                break;
            };
            // Measured at the hand-over to the receiver's queue.
            let at = Instant::now();
            let took = (at - sent).as_nanos() as u64;
            lateness_ns += signed_ns(at, s.due);
            batch += 1;
            // Counted first, so whoever the delivery wakes sees it counted.
            stats.messages.fetch_add(1, Ordering::Relaxed);
            stats.total_delay_ns.fetch_add(took, Ordering::Relaxed);
            stats.max_delay_ns.fetch_max(took, Ordering::Relaxed);
            (s.deliver)();
        }
        if batch > 0 {
            let mean = lateness_ns / batch;
            let nudged = ahead.as_nanos() as i64 + mean / 4;
            ahead = Duration::from_nanos(nudged.clamp(0, MAX_AHEAD.as_nanos() as i64) as u64);
        }
        // Sleep at least a tick, and until the next message is within
        // half a tick of due. A plain sleep, not a timed receive: senders
        // then only push, they never have to wake this thread (a message
        // sent now is due a whole link delay later).
        let now = Instant::now();
        let next = heap.peek().map(|Reverse((s, _))| s.due);
        let until = match next {
            Some(due) => due.checked_sub(ahead).unwrap_or(due).max(now + TICK),
            None => now + TICK,
        };
        let wait = until - now;
        if wait > oversleep {
            // No spin after a sleep: a late wake is absorbed by the batch
            // horizon, and spinning would cost the core this saves.
            let sleep = wait - oversleep;
            thread::sleep(sleep);
            let late = now.elapsed().saturating_sub(sleep);
            oversleep = ((oversleep * 7 + late) / 8).min(MAX_OVERSLEEP);
        } else {
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }
}

/// `a - b` in nanoseconds, negative when `a` is earlier.
fn signed_ns(a: Instant, b: Instant) -> i64 {
    if a >= b {
        (a - b).as_nanos() as i64
    } else {
        -((b - a).as_nanos() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn same_node_messages_are_immediate_and_fifo_per_link() {
        let link = Link::new(
            LinkConfig {
                delay_us: 200,
                jitter_us: 150,
            },
            7,
        );
        let (tx, rx) = mpsc::channel();
        let t = tx.clone();
        link.send(NodeId(0), NodeId(0), move || t.send(usize::MAX).unwrap());
        assert_eq!(rx.recv().unwrap(), usize::MAX);
        for i in 0..200 {
            let t = tx.clone();
            link.send(NodeId(0), NodeId(1), move || t.send(i).unwrap());
        }
        let got: Vec<usize> = (0..200).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(
            got,
            (0..200).collect::<Vec<_>>(),
            "jitter must not reorder a link"
        );
        assert_eq!(link.stats.messages.load(Ordering::Relaxed), 200);
    }

    /// A pair of the topology takes its own delay; a node beyond the
    /// table, the uniform one. Delays are lower bounds: a message is never
    /// delivered early.
    #[test]
    fn topology_pairs_take_their_own_delay() {
        let topology =
            Topology::parse("unit = us\nkind = one-way\nsites = a b\na = 0 30000\nb = 30000 0")
                .expect("topology");
        let link = Link::with_topology(
            LinkConfig {
                delay_us: 100,
                jitter_us: 0,
            },
            7,
            Some(Arc::new(topology)),
        );
        assert_eq!(link.client_hop(0, 1), Some(Duration::from_millis(30)));
        assert_eq!(link.client_hop(0, 2), None);
        let (tx, rx) = mpsc::channel();
        for (to, tag) in [(1, "pair"), (2, "uniform")] {
            let t = tx.clone();
            let sent = Instant::now();
            link.send(NodeId(0), NodeId(to), move || {
                t.send((tag, sent.elapsed())).unwrap()
            });
        }
        let mut got: Vec<(&str, Duration)> = (0..2).map(|_| rx.recv().unwrap()).collect();
        // The uniform 100 us message arrives first, the 30 ms one after.
        assert_eq!(got[0].0, "uniform");
        let pair = got.remove(1);
        // A batch delivers what is due within its horizon: up to
        // `MAX_AHEAD` early, by design.
        assert!(pair.1 + MAX_AHEAD >= Duration::from_millis(30), "{pair:?}");
    }
}
