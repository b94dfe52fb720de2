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
//! timer slack and spins through the last few microseconds before a due time.
//! The measured one-way delay is reported with every benchmark result.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use brine_core::NodeId;

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
    tx: Option<crossbeam_channel::Sender<(NodeId, NodeId, Instant, Delivery)>>,
    pub stats: Arc<LinkStats>,
}

/// Spin for at most this long before a due time; sleep before that.
const SPIN_NS: u64 = 60_000;

impl Link {
    pub fn new(config: LinkConfig, seed: u64) -> Link {
        let stats = Arc::new(LinkStats::default());
        if config.delay_us == 0 && config.jitter_us == 0 {
            return Link {
                config,
                tx: None,
                stats,
            };
        }
        let (tx, rx) = crossbeam_channel::unbounded::<(NodeId, NodeId, Instant, Delivery)>();
        let thread_stats = stats.clone();
        thread::Builder::new()
            .name("brine-link".into())
            .spawn(move || run_link(config, seed, rx, thread_stats))
            .expect("spawning the link thread");
        Link {
            config,
            tx: Some(tx),
            stats,
        }
    }

    pub fn config(&self) -> LinkConfig {
        self.config
    }

    /// True if messages between different nodes are delayed.
    pub fn is_delayed(&self) -> bool {
        self.tx.is_some()
    }

    /// Delivers `deliver` after the link delay if `from != to`, else now.
    pub fn send(&self, from: NodeId, to: NodeId, deliver: impl FnOnce() + Send + 'static) {
        match &self.tx {
            Some(tx) if from != to => {
                // If the link thread is gone the cluster is shutting down;
                // dropping the message is what a dead network does.
                let _ = tx.send((from, to, Instant::now(), Box::new(deliver)));
            }
            _ => deliver(),
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
            let mut due = sent + delay + jitter;
            let last = last_due.entry((from, to)).or_insert(due);
            if *last > due {
                due = *last;
            }
            *last = due;
            seq += 1;
            heap.push(Reverse((Scheduled { due, seq, deliver }, sent)));
        };
    loop {
        // Drain new messages without blocking.
        while let Ok(m) = rx.try_recv() {
            enqueue(&mut heap, m);
        }
        let now = Instant::now();
        match heap.peek() {
            None => match rx.recv() {
                Ok(m) => enqueue(&mut heap, m),
                Err(_) => return,
            },
            Some(Reverse((s, _))) if s.due <= now => {
                let Some(Reverse((s, sent))) = heap.pop() else {
                    continue;
                };
                // Measured at the hand-over to the receiver's queue.
                let took = sent.elapsed().as_nanos() as u64;
                (s.deliver)();
                stats.messages.fetch_add(1, Ordering::Relaxed);
                stats.total_delay_ns.fetch_add(took, Ordering::Relaxed);
                stats.max_delay_ns.fetch_max(took, Ordering::Relaxed);
            }
            Some(Reverse((s, _))) => {
                let wait = s.due - now;
                if wait.as_nanos() as u64 > SPIN_NS {
                    let sleep = wait - Duration::from_nanos(SPIN_NS);
                    match rx.recv_timeout(sleep) {
                        Ok(m) => enqueue(&mut heap, m),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                            // Shutting down: deliver what is left on time.
                            thread::sleep(wait);
                        }
                    }
                } else {
                    std::hint::spin_loop();
                    thread::yield_now();
                }
            }
        }
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
}
