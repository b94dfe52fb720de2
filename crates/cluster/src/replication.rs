//! Replicated logs in the embedded cluster (issue 39, first part): each
//! log of a durable cluster (a partition's, a coordinator's decisions)
//! with `DurabilityConfig::replicas` > 1 is a replication group
//! (`brine_replication`, raft-rs). The log's writer hands each batch it
//! fsynced to the group's leader, which proposes it; the batch's waiters
//! (commit acknowledgements, prepare votes) run once a quorum of replicas
//! has it, so every acknowledgement pays the round trip to the nearest
//! majority, as in the sources' replicated MySQL Cluster.
//!
//! ```text
//!  log writer ── fsync ── batch ──► group task: leader.propose(batch)
//!                                     │ AppendEntries ──link delay──► followers
//!                                     │ ◄──link delay── acks
//!  waiters run ◄── leader applies the entry (committed at a quorum)
//! ```
//!
//! The replicas run in one task per group, their messages delayed by the
//! link's one-way delay (replicas live on other nodes). Not yet: replicas
//! of their own on other processes, followers that keep the entries on
//! disk (they keep them in memory, as MySQL Cluster's data nodes do before
//! their asynchronous checkpoint), failover (the leader is the log's own
//! replica; the group never loses it), membership changes (the library
//! does them: `brine_replication` tests). See `docs/replication.md`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brine_replication::{Replica, StateMachine};
use brine_storage::wal::{Replicas, Replicate, Waiter};
use tokio::sync::mpsc;

/// The clock of a group's replicas (elections, heartbeats).
const TICK: Duration = Duration::from_millis(10);

/// Entries applied between two compactions of the replicas' logs.
const COMPACT_EVERY: u64 = 1024;

/// A batch to replicate and what runs once a quorum has it.
type Proposal = (Vec<u8>, Waiter);

/// The log side of a group: batches go to its task.
struct GroupHandle {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Replicate for GroupHandle {
    fn replicate(&self, batch: Vec<u8>, _end: u64, done: Waiter) {
        if let Err(mpsc::error::SendError((_, done))) = self.tx.send((batch, done)) {
            done(Err(brine_core::Error::Storage(
                "the log's replication group stopped".into(),
            )));
        }
    }
}

/// The leader's state machine: each batch applied is acknowledged, in
/// order (the leader proposes them in the order it got them).
struct Acknowledge(Arc<Mutex<VecDeque<Waiter>>>);

impl StateMachine for Acknowledge {
    fn apply(&mut self, _index: u64, _data: &[u8]) {
        if let Some(done) = self.0.lock().expect("waiting").pop_front() {
            done(Ok(()));
        }
    }

    fn image(&self) -> Vec<u8> {
        Vec::new()
    }

    fn restore(&mut self, _image: &[u8]) {}
}

/// A follower's state machine: what it holds (in memory) is the log.
#[derive(Default)]
struct Hold {
    bytes: u64,
}

impl StateMachine for Hold {
    fn apply(&mut self, _index: u64, data: &[u8]) {
        self.bytes += data.len() as u64;
    }

    fn image(&self) -> Vec<u8> {
        self.bytes.to_le_bytes().to_vec()
    }

    fn restore(&mut self, image: &[u8]) {
        self.bytes = image.try_into().map(u64::from_le_bytes).unwrap_or_default();
    }
}

/// A replication group of `replicas` for one log, its messages delayed by
/// `delay` one way (`None` for one replica). Its task runs on the current
/// tokio runtime.
pub fn group(replicas: u32, delay: Duration) -> brine_core::Result<Option<Replicas>> {
    if replicas <= 1 {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        brine_core::Error::Config("replicated logs start inside a tokio runtime".into())
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    runtime.spawn(drive(rx, replicas, delay));
    Ok(Some(Replicas(Arc::new(GroupHandle { tx }))))
}

/// The group's task: the leader (replica 1, the log's own) and its
/// followers, the messages between them on a wire that delays them.
async fn drive(mut rx: mpsc::UnboundedReceiver<Proposal>, replicas: u32, delay: Duration) {
    let ids: Vec<u64> = (1..=u64::from(replicas)).collect();
    let waiting: Arc<Mutex<VecDeque<Waiter>>> = Arc::default();
    let Ok(mut leader) = Replica::new(1, &ids, Acknowledge(waiting.clone())) else {
        return;
    };
    let mut followers: Vec<Replica<Hold>> = ids[1..]
        .iter()
        .filter_map(|&id| Replica::new(id, &ids, Hold::default()).ok())
        .collect();
    if leader.campaign().is_err() {
        return;
    }
    let mut wire: VecDeque<(tokio::time::Instant, brine_replication::Message)> = VecDeque::new();
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut since_compaction = 0u64;
    let mut unproposed: VecDeque<Vec<u8>> = VecDeque::new();
    loop {
        let due = wire.front().map(|(at, _)| *at);
        tokio::select! {
            proposal = rx.recv() => match proposal {
                Some((batch, done)) => {
                    // Never empty: an empty entry is a new leader's marker.
                    let mut data = Vec::with_capacity(batch.len() + 1);
                    data.push(b'B');
                    data.extend_from_slice(&batch);
                    waiting.lock().expect("waiting").push_back(done);
                    // Proposed once the leader is elected (at start, its
                    // election takes a round trip), in order.
                    unproposed.push_back(data);
                    since_compaction += 1;
                }
                None => return, // the log closed
            },
            _ = tick.tick() => {
                leader.tick();
                for f in &mut followers {
                    f.tick();
                }
            }
            _ = sleep_until(due) => {
                let now = tokio::time::Instant::now();
                while wire.front().is_some_and(|(at, _)| *at <= now) {
                    let (_, m) = wire.pop_front().expect("a message");
                    step(&mut leader, &mut followers, m);
                }
            }
        }
        if leader.is_leader() && !unproposed.is_empty() {
            while let Some(data) = unproposed.pop_front() {
                if let Err(e) = leader.propose(data) {
                    // The waiters of this batch and of all after it fail:
                    // the log fails with them (its node must restart).
                    let failed: Vec<Waiter> = waiting.lock().expect("waiting").drain(..).collect();
                    for done in failed {
                        done(Err(brine_core::Error::Storage(format!(
                            "replicating a log batch: {e}"
                        ))));
                    }
                    unproposed.clear();
                    break;
                }
            }
        }
        // Everything that follows from it, immediate where the link is.
        loop {
            let _ = leader.ready(&mut out);
            for f in &mut followers {
                let _ = f.ready(&mut out);
            }
            if out.is_empty() {
                break;
            }
            if delay.is_zero() {
                for m in std::mem::take(&mut out) {
                    step(&mut leader, &mut followers, m);
                }
                continue;
            }
            let at = tokio::time::Instant::now() + delay;
            wire.extend(out.drain(..).map(|m| (at, m)));
            break;
        }
        if since_compaction >= COMPACT_EVERY {
            since_compaction = 0;
            let _ = leader.compact();
            for f in &mut followers {
                let _ = f.compact();
            }
        }
    }
}

/// Sleeps until `due`, or for ever with nothing due.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Hands message `m` to its replica.
fn step(
    leader: &mut Replica<Acknowledge>,
    followers: &mut [Replica<Hold>],
    m: brine_replication::Message,
) {
    // A message of a term gone by is refused by raft: nothing to do.
    let _ = if m.to == leader.id() {
        leader.step(m)
    } else {
        match followers.iter_mut().find(|f| f.id() == m.to) {
            Some(f) => f.step(m),
            None => Ok(()),
        }
    };
}
