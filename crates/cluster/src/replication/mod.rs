//! Replicated logs in the embedded cluster (issue 39): each log of a
//! durable cluster (a partition's, a coordinator's decisions) with
//! `DurabilityConfig::replicas` > 1 is a replication group
//! (`brine_replication`, raft-rs). The log's writer hands each batch it
//! fsynced to the group's leader, which proposes it; the batch's waiters
//! (commit acknowledgements, prepare votes) run once a quorum of replicas
//! has it, so every acknowledgement pays the round trip to the nearest
//! majority, as in the sources' replicated MySQL Cluster. Checkpoints go
//! through the group too, installed everywhere once a quorum has them.
//!
//! ```text
//!  log writer ── fsync ── batch ──► group task: leader.propose(B batch)
//!                                     │ AppendEntries ──link delay──► followers: raft
//!                                     │ ◄──link delay── acks            log fsynced
//!  waiters run ◄── leader applies the entry (committed at a quorum)
//!                             followers apply it: their copy of the log (`Mirror`)
//! ```
//!
//! Every replica keeps its raft state and its copy of the log on disk,
//! under `<data>/replicas/<log>/r<id>/` (the leader's copy is the log
//! itself): a restarted cluster's groups go on from there. The replicas
//! run in one task per group, their messages delayed by the link's one-way
//! delay (replicas live on other nodes). Replicas on processes of their
//! own, and failover, are the multi-process cluster's
//! (`docs/replication.md`).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brine_replication::{Replica, StateMachine};
use brine_storage::wal::mirror::{checkpoint_position, Mirror};
use brine_storage::wal::{Replicas, Replicate, Waiter};
use tokio::sync::mpsc;

mod nodes;
mod takeover;
pub use nodes::{generation, Layout, LogName, NodeReplicas, ReplicaStatus};

/// The clock of a group's replicas (elections, heartbeats).
const TICK: Duration = Duration::from_millis(10);

/// Entries applied between two compactions of the replicas' logs.
const COMPACT_EVERY: u64 = 1024;

/// Entry tags: a batch of frames, or a checkpoint file.
const BATCH: u8 = b'B';
const CHECKPOINT: u8 = b'C';

impl crate::Cluster {
    /// Waits until every replica of every log applied what its group
    /// committed so far (a clean stop leaves every copy complete; without
    /// replicas at once).
    pub async fn settle_replicas(&self) {
        let Some(wal) = &self.shared().wal else {
            return;
        };
        for log in wal.logs() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            log.settle_replicas(Box::new(move |_| {
                let _ = tx.send(());
            }));
            let _ = rx.await;
        }
    }
}

/// What an embedded group's task is asked.
enum Input {
    Propose(Proposal),
    /// Run the waiter once every follower applied what the leader did.
    Settle(Waiter),
}

/// An entry to replicate and what runs once a quorum has it.
struct Proposal {
    data: Vec<u8>,
    done: Option<Waiter>,
}

impl Proposal {
    fn tagged(tag: u8, bytes: &[u8], done: Option<Waiter>) -> Proposal {
        let mut data = Vec::with_capacity(bytes.len() + 1);
        data.push(tag);
        data.extend_from_slice(bytes);
        Proposal { data, done }
    }

    fn batch(frames: &[u8], done: Waiter) -> Proposal {
        Proposal::tagged(BATCH, frames, Some(done))
    }

    fn checkpoint(bytes: &[u8], done: Option<Waiter>) -> Proposal {
        Proposal::tagged(CHECKPOINT, bytes, done)
    }

    fn fail(self, why: &str) {
        if let Some(done) = self.done {
            done(Err(brine_core::Error::Storage(why.to_string())));
        }
    }
}

/// The newest checkpoint in the log directory `dir`, as an entry.
fn newest_checkpoint(dir: &Path) -> brine_core::Result<Option<Proposal>> {
    let Some((_, path)) = brine_storage::checkpoint::list_checkpoints(dir)?.pop() else {
        return Ok(None);
    };
    let bytes = std::fs::read(&path)
        .map_err(|e| brine_core::Error::Storage(format!("reading {}: {e}", path.display())))?;
    Ok(checkpoint_position(&bytes).map(|_| Proposal::checkpoint(&bytes, None)))
}

/// The log side of an embedded group: entries go to its task.
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

/// A replica's state machine: its copy of the log. At the leader, whose
/// copy the log's writer writes, applying an entry runs what waited for
/// it (entries complete in the order proposed); at a follower it writes
/// the entry into its copy.
pub(crate) struct LogCopy {
    mirror: Mirror,
    /// Whether the log's writer writes this copy (this replica leads).
    pub leading: bool,
    /// What waits for the entries this replica proposed, by index.
    waiting: Arc<Mutex<BTreeMap<u64, Waiter>>>,
}

impl LogCopy {
    /// This replica leads, with everything committed applied: its copy
    /// is cut there, and from now on the log's writer writes it.
    fn take_the_lead(&mut self) -> brine_core::Result<()> {
        self.mirror.settle()?;
        self.leading = true;
        Ok(())
    }
}

impl LogCopy {
    pub(crate) fn open(dir: &Path, log_id: u32, segment_bytes: u64) -> brine_core::Result<LogCopy> {
        Ok(LogCopy {
            mirror: Mirror::open(dir, log_id, segment_bytes)?,
            leading: false,
            waiting: Arc::default(),
        })
    }

    fn apply_entry(&mut self, data: &[u8]) -> brine_core::Result<()> {
        match data.split_first() {
            // Waiters with nothing new written (`Log::when_durable`).
            Some((&BATCH, [])) => Ok(()),
            Some((&BATCH, frames)) if self.leading => self.mirror.written(frames),
            Some((&BATCH, frames)) => self.mirror.apply_batch(frames),
            Some((&CHECKPOINT, bytes)) => self.mirror.apply_checkpoint(bytes),
            _ => Err(brine_core::Error::Storage(
                "an entry of a replicated log is of no known kind".into(),
            )),
        }
    }
}

impl StateMachine for LogCopy {
    fn apply(&mut self, index: u64, data: &[u8]) {
        let result = self.apply_entry(data);
        if let Err(e) = &result {
            tracing::error!(index, dir = %self.mirror.dir().display(), "applying a replicated log entry: {e}");
        }
        let done = self.waiting.lock().expect("waiting").remove(&index);
        if let Some(done) = done {
            done(result);
        }
    }

    fn image(&self) -> Vec<u8> {
        self.mirror.image().unwrap_or_else(|e| {
            tracing::error!(dir = %self.mirror.dir().display(), "taking a replica's image: {e}");
            Vec::new()
        })
    }

    fn restore(&mut self, image: &[u8]) {
        if let Err(e) = self.mirror.restore(image) {
            tracing::error!(dir = %self.mirror.dir().display(), "restoring a replica's image: {e}");
        }
    }

    fn marker(&self) -> Option<Vec<u8>> {
        Some(self.mirror.marker())
    }
}

/// Where a log's group keeps its replicas.
#[derive(Clone, Debug)]
pub(crate) struct GroupPlace {
    /// The log's own directory (the leader's copy).
    pub dir: PathBuf,
    /// `<data>/replicas/<log name>`: one `r<id>` directory per replica.
    pub replicas: PathBuf,
    pub log_id: u32,
    pub segment_bytes: u64,
}

impl GroupPlace {
    /// The group of the log in `dir` of the cluster whose data is `root`.
    pub(crate) fn of(
        root: &Path,
        dir: &Path,
        log_id: u32,
        durability: &crate::DurabilityConfig,
    ) -> GroupPlace {
        GroupPlace {
            replicas: root
                .join("replicas")
                .join(dir.file_name().unwrap_or_default()),
            dir: dir.to_path_buf(),
            log_id,
            segment_bytes: durability.segment_bytes,
        }
    }
}

/// The replicas of log `log` in directory `dir` of the data directory
/// `root`: this node's group across processes, an embedded group, or none
/// (one replica).
pub(crate) fn log_replicas(
    durability: &crate::DurabilityConfig,
    root: &Path,
    dir: &Path,
    log: LogName,
) -> brine_core::Result<Option<Replicas>> {
    match &durability.across {
        Some(across) => across.replicas(log).map(Some),
        None => {
            let place = GroupPlace::of(root, dir, log.log_id(), durability);
            group(durability.replicas, durability.replica_delay, &place)
        }
    }
}

/// Across processes: waits (blocking: recovery runs on a blocking thread)
/// until this node leads `log` with its copy cut at what the group
/// committed, before the log is recovered from it. Nothing to wait for
/// otherwise.
pub(crate) fn lead(durability: &crate::DurabilityConfig, log: LogName) -> brine_core::Result<()> {
    let Some(across) = &durability.across else {
        return Ok(());
    };
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        brine_core::Error::Internal("leading a replicated log outside the runtime".into())
    })?;
    handle.block_on(across.lead(log))
}

/// A replication group of `replicas` for the log at `place`, its
/// messages delayed by `delay` one way (`None` for one replica). Its task
/// runs on the current tokio runtime.
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
    let mut followers = Vec::new();
    for &id in &ids[1..] {
        let dir = place.replicas.join(format!("r{id}")).join("log");
        followers.push(open(id, &dir)?);
    }
    // A restarted log goes on from the checkpoint its recovery wrote: the
    // group's first entry, so every copy goes on from there too.
    let mut first = VecDeque::new();
    if let Some((_, path)) = brine_storage::checkpoint::list_checkpoints(&place.dir)?.last() {
        let bytes = std::fs::read(path)
            .map_err(|e| brine_core::Error::Storage(format!("reading {}: {e}", path.display())))?;
        if checkpoint_position(&bytes).is_some() {
            let mut data = vec![CHECKPOINT];
            data.extend_from_slice(&bytes);
            first.push_back(Proposal { data, done: None });
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    runtime.spawn(drive(rx, leader, followers, delay, first));
    Ok(Some(Replicas(Arc::new(GroupHandle { tx }))))
}

/// The group's task: the leader (replica 1, the log's own) and its
/// followers, the messages between them on a wire that delays them.
async fn drive(
    mut rx: mpsc::UnboundedReceiver<Input>,
    mut leader: Replica<LogCopy>,
    mut followers: Vec<Replica<LogCopy>>,
    delay: Duration,
    mut unproposed: VecDeque<Proposal>,
) {
    let waiting = leader.machine().waiting.clone();
    if leader.campaign().is_err() {
        return;
    }
    let mut wire: VecDeque<(tokio::time::Instant, brine_replication::Message)> = VecDeque::new();
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut since_compaction = 0u64;
    loop {
        let due = wire.front().map(|(at, _)| *at);
        tokio::select! {
            input = rx.recv() => match input {
                Some(Input::Propose(p)) => {
                    // Proposed once the leader is elected (at start, its
                    // election takes a round trip), in order.
                    unproposed.push_back(p);
                    since_compaction += 1;
                }
                Some(Input::Settle(done)) => {
                    catch_up(&mut leader, &mut followers, std::mem::take(&mut wire));
                    done(Ok(()));
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

/// Delivers what is on the wire, and what follows from it, at once, until
/// every follower applied what the leader did (or a while has passed:
/// one may be cut off).
fn catch_up(
    leader: &mut Replica<LogCopy>,
    followers: &mut [Replica<LogCopy>],
    wire: VecDeque<(tokio::time::Instant, brine_replication::Message)>,
) {
    let mut out: Vec<brine_replication::Message> = wire.into_iter().map(|(_, m)| m).collect();
    for round in 0..1000u32 {
        for m in std::mem::take(&mut out) {
            step(leader, followers, m);
        }
        let _ = leader.ready(&mut out);
        for f in followers.iter_mut() {
            let _ = f.ready(&mut out);
        }
        let behind = followers.iter().any(|f| f.applied() < leader.applied());
        if !behind && out.is_empty() {
            return;
        }
        if out.is_empty() && (round + 1).is_multiple_of(10) {
            // Heartbeats carry the commit index.
            for _ in 0..3 {
                leader.tick();
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
    leader: &mut Replica<LogCopy>,
    followers: &mut [Replica<LogCopy>],
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
