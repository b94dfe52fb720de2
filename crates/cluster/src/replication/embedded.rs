//! The embedded cluster's replication groups: each replica of a log in a
//! task of its own, as if on a node of its own, their messages delayed by
//! the link's one-way delay. Each fsyncs its raft log (and a follower its
//! copy) on its own, off the async workers (`persist`), as replicas on
//! separate machines would, in parallel.
//!
//! ```text
//!  log writer ─ batch ─► leader task ── (due, message) ──► follower task: step,
//!                          ▲   propose, persist, apply      persist, apply (copy)
//!                          └──────────── acks, after the delay ◄─┘
//! ```

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brine_replication::{Message, Replica};
use brine_storage::wal::{Replicas, Replicate, Waiter};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{newest_checkpoint, persist, GroupPlace, LogCopy, Proposal, COMPACT_EVERY, TICK};

/// What the leader's task is asked.
enum Input {
    Propose(Proposal),
    /// Run the waiter once every follower applied what the leader did.
    Settle(Waiter),
}

/// The log side of an embedded group: entries go to its leader's task.
struct GroupHandle {
    tx: mpsc::UnboundedSender<Input>,
}

impl GroupHandle {
    fn send(&self, p: Proposal) {
        if let Err(mpsc::error::SendError(Input::Propose(p))) = self.tx.send(Input::Propose(p)) {
            p.fail("the log's replication group stopped");
        }
    }
}

impl Replicate for GroupHandle {
    fn replicate(&self, batch: Vec<u8>, _end: u64, done: Waiter) {
        self.send(Proposal::batch(&batch, done));
    }

    fn checkpoint(&self, _lsn: u64, bytes: Vec<u8>, done: Waiter) {
        self.send(Proposal::checkpoint(&bytes, Some(done)));
    }

    fn settle(&self, done: Waiter) {
        if let Err(mpsc::error::SendError(Input::Settle(done))) = self.tx.send(Input::Settle(done))
        {
            done(Ok(()));
        }
    }
}

/// The wire between a group's replicas: each message is due the link's
/// delay after it was sent.
#[derive(Clone)]
struct Wire {
    to: HashMap<u64, mpsc::UnboundedSender<(Instant, Message)>>,
    delay: Duration,
}

impl Wire {
    fn send(&self, out: &mut Vec<Message>) {
        let due = Instant::now() + self.delay;
        for m in out.drain(..) {
            if let Some(tx) = self.to.get(&m.to) {
                let _ = tx.send((due, m));
            }
        }
    }
}

/// Messages that reached a replica, each stepped once due.
struct Inbox {
    rx: mpsc::UnboundedReceiver<(Instant, Message)>,
    waiting: VecDeque<(Instant, Message)>,
}

impl Inbox {
    fn due(&self) -> Option<Instant> {
        self.waiting.front().map(|(at, _)| *at)
    }

    /// Steps every message due by now.
    fn deliver(&mut self, replica: &mut Replica<LogCopy>) {
        while let Ok(m) = self.rx.try_recv() {
            self.waiting.push_back(m);
        }
        let now = Instant::now();
        while self.waiting.front().is_some_and(|(at, _)| *at <= now) {
            let (_, m) = self.waiting.pop_front().expect("a message");
            // A message of a term gone by is refused: raft says.
            let _ = replica.step(m);
        }
    }
}

/// A replication group of `replicas` for the log at `place`, its
/// messages delayed by `delay` one way (`None` for one replica). Its
/// tasks run on the current tokio runtime.
pub(crate) fn group(
    replicas: u32,
    delay: Duration,
    place: &GroupPlace,
) -> brine_core::Result<Option<Replicas>> {
    if replicas <= 1 {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        brine_core::Error::Config("replicated logs start inside a tokio runtime".into())
    })?;
    let ids: Vec<u64> = (1..=u64::from(replicas)).collect();
    let open = |id: u64, dir: &Path| -> brine_core::Result<Replica<LogCopy>> {
        let copy = LogCopy::open(dir, place.log_id, place.segment_bytes)?;
        let raft = place.replicas.join(format!("r{id}")).join("raft");
        Replica::open(&raft, id, &ids, copy).map_err(|e| {
            brine_core::Error::Storage(format!("replica {id} of {}: {e}", place.dir.display()))
        })
    };
    let mut leader = open(1, &place.dir)?;
    leader.machine_mut().leading = true;
    let mut inboxes = HashMap::new();
    let mut wire = Wire {
        to: HashMap::new(),
        delay,
    };
    for &id in &ids {
        let (tx, rx) = mpsc::unbounded_channel();
        wire.to.insert(id, tx);
        inboxes.insert(
            id,
            Inbox {
                rx,
                waiting: VecDeque::new(),
            },
        );
    }
    let (stop, stopped) = watch::channel(false);
    let mut applied = Vec::new();
    for &id in &ids[1..] {
        let dir = place.replicas.join(format!("r{id}")).join("log");
        let follower = open(id, &dir)?;
        let at = Arc::new(AtomicU64::new(follower.applied()));
        applied.push(at.clone());
        let inbox = inboxes.remove(&id).expect("an inbox");
        runtime.spawn(follow(follower, inbox, wire.clone(), at, stopped.clone()));
    }
    // A restarted log goes on from the checkpoint its recovery wrote: the
    // group's first entry, so every copy goes on from there too.
    let first: VecDeque<Proposal> = newest_checkpoint(&place.dir)?.into_iter().collect();
    let (tx, rx) = mpsc::unbounded_channel();
    let inbox = inboxes.remove(&1).expect("an inbox");
    runtime.spawn(lead(leader, rx, inbox, wire, first, applied, stop));
    Ok(Some(Replicas(Arc::new(GroupHandle { tx }))))
}

/// Sleeps until `due`, or for ever with nothing due.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A follower's task: until the leader's ends.
async fn follow(
    mut replica: Replica<LogCopy>,
    mut inbox: Inbox,
    wire: Wire,
    applied: Arc<AtomicU64>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut out = Vec::new();
    let mut compacted_at = replica.applied();
    loop {
        let due = inbox.due();
        tokio::select! {
            m = inbox.rx.recv() => match m {
                Some(m) => inbox.waiting.push_back(m),
                None => return,
            },
            _ = tick.tick() => replica.tick(),
            _ = sleep_until(due) => {}
            _ = stopped.changed() => return,
        }
        inbox.deliver(&mut replica);
        if persist(&mut replica, &mut out).is_err() {
            return;
        }
        wire.send(&mut out);
        applied.store(replica.applied(), Ordering::Release);
        if replica.applied() >= compacted_at + COMPACT_EVERY {
            compacted_at = replica.applied();
            let _ = replica.compact();
        }
    }
}

/// How long a clean stop waits for the followers to apply everything.
const SETTLE_PATIENCE: Duration = Duration::from_secs(2);

/// The leader's task (replica 1, the log's own): until the log closes.
async fn lead(
    mut leader: Replica<LogCopy>,
    mut rx: mpsc::UnboundedReceiver<Input>,
    mut inbox: Inbox,
    wire: Wire,
    mut unproposed: VecDeque<Proposal>,
    followers: Vec<Arc<AtomicU64>>,
    stop: watch::Sender<bool>,
) {
    let waiting = leader.machine().waiting.clone();
    if leader.campaign().is_err() {
        let _ = stop.send(true);
        return;
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut out = Vec::new();
    let mut compacted_at = leader.applied();
    let mut settles: Vec<(Instant, Waiter)> = Vec::new();
    loop {
        let due = inbox.due();
        tokio::select! {
            input = rx.recv() => match input {
                // Proposed once the leader is elected (at start, its
                // election takes a round trip), in order.
                Some(Input::Propose(p)) => unproposed.push_back(p),
                Some(Input::Settle(done)) => settles.push((Instant::now(), done)),
                None => {
                    // The log closed.
                    let _ = stop.send(true);
                    return;
                }
            },
            m = inbox.rx.recv() => {
                if let Some(m) = m {
                    inbox.waiting.push_back(m);
                }
            }
            _ = tick.tick() => leader.tick(),
            _ = sleep_until(due) => {}
        }
        inbox.deliver(&mut leader);
        if leader.is_leader() {
            while let Some(p) = unproposed.pop_front() {
                match leader.propose(p.data) {
                    Ok(index) => {
                        if let Some(done) = p.done {
                            waiting.lock().expect("waiting").insert(index, done);
                        }
                    }
                    Err(e) => {
                        // This entry and all after it fail: the log fails
                        // with them (its node must restart).
                        let failed = std::mem::take(&mut *waiting.lock().expect("waiting"));
                        let failed = failed
                            .into_values()
                            .chain(p.done)
                            .chain(unproposed.drain(..).filter_map(|p| p.done));
                        for done in failed {
                            done(Err(brine_core::Error::Storage(format!(
                                "replicating a log batch: {e}"
                            ))));
                        }
                        break;
                    }
                }
            }
        }
        if persist(&mut leader, &mut out).is_err() {
            let _ = stop.send(true);
            return;
        }
        wire.send(&mut out);
        if !settles.is_empty() {
            let done = followers
                .iter()
                .all(|f| f.load(Ordering::Acquire) >= leader.applied());
            let now = Instant::now();
            for (asked, waiter) in std::mem::take(&mut settles) {
                if done || now.duration_since(asked) > SETTLE_PATIENCE {
                    waiter(Ok(()));
                } else {
                    settles.push((asked, waiter));
                }
            }
        }
        if leader.applied() >= compacted_at + COMPACT_EVERY {
            compacted_at = leader.applied();
            let _ = leader.compact();
        }
    }
}
