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
//! Here: what every group shares (entries, a replica's copy of the log,
//! where a log's group lives); `embedded.rs`: the embedded cluster's
//! groups, every replica in a task of its own, their messages delayed by
//! the link; `nodes.rs`: the groups across processes, where a partition
//! is served where its log is led; `takeover.rs`: a node taking a
//! partition over (`docs/replication.md`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brine_replication::{Replica, StateMachine};
use brine_storage::wal::mirror::{checkpoint_position, Mirror};
use brine_storage::wal::{Replicas, Waiter};

mod embedded;
mod nodes;
mod parts;
mod takeover;
pub use nodes::{generation, Generation, Layout, LogName, NodeReplicas, ReplicaStatus};
pub use parts::Part;
pub(crate) use takeover::follow_moves;

/// The clock of a group's replicas (elections, heartbeats).
const TICK: Duration = Duration::from_millis(10);

/// Does what raft asks of `replica` once something happened (it fsyncs
/// its log, and a follower its copy): on a blocking thread's terms where
/// the runtime allows, so the other tasks go on meanwhile.
fn persist(
    replica: &mut Replica<LogCopy>,
    out: &mut Vec<brine_replication::Message>,
) -> brine_replication::Result<()> {
    if !replica.has_ready() {
        return Ok(());
    }
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(|| replica.ready(out))
    } else {
        replica.ready(out)
    }
}

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

    fn sync(&self) -> bool {
        // The replica's log drops the entries the marker stands for: the
        // copy must hold them durable first.
        self.mirror
            .sync()
            .map_err(|e| tracing::error!(dir = %self.mirror.dir().display(), "syncing a replica's copy: {e}"))
            .is_ok()
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
            embedded::group(durability.replicas, durability.replica_delay, &place)
        }
    }
}
