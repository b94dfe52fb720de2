//! A partition's replication group (issue 39, DESIGN section 6): each
//! replica a [`raft::RawNode`] (TiKV's raft-rs, a maintained consensus
//! library), driven by brine's own loop rather than a runtime of the
//! library's: the caller ticks it, hands it the messages that reached it,
//! and carries the messages it returns. So the same group runs over the
//! embedded cluster's seeded link (deterministic, with its faults) and
//! over TCP between processes.
//!
//! ```text
//!  leader:   propose(bytes) ──► log entry ──► replicated ──► committed at a
//!            quorum ──► applied, in log order, by every replica's state machine
//!  any:      tick() (elections, heartbeats) · step(message) · ready(&mut out)
//!            persists what raft asks, returns the messages to send, applies
//!            what committed (entries and membership changes)
//!  compact(): the state machine's image becomes the log's prefix; a
//!            follower behind it is sent the image (a snapshot)
//! ```
//!
//! A replica keeps its log in memory ([`Replica::new`]: one that restarts
//! rejoins empty and is caught up from the others) or on disk
//! ([`Replica::open`], `disk.rs`: it restarts with its term, vote, log and
//! image, as raft requires of a replica that counted in a quorum).

use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use raft::prelude::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, RawNode, StateRole, Storage, StorageError};

/// What replicas apply: committed entries, in log order, the same on
/// every replica; and an image of its state for a follower the log no
/// longer reaches.
pub trait StateMachine {
    /// Entry `index` committed with `data`.
    fn apply(&mut self, index: u64, data: &[u8]);
    /// The state as bytes (what [`StateMachine::restore`] takes back).
    fn image(&self) -> Vec<u8>;
    /// Replaces the state with an image another replica took (or with
    /// its own marker, at restart).
    fn restore(&mut self, image: &[u8]);
    /// For a state machine that keeps itself on disk: what its replica's
    /// own compaction keeps instead of a full image (the full image is
    /// then taken only when a follower needs one). `None`: the image.
    fn marker(&self) -> Option<Vec<u8>> {
        None
    }
    /// Makes what it applied durable, before the log drops those entries
    /// (a machine on disk that writes without syncing syncs here); false
    /// if it cannot: the log is not compacted.
    fn sync(&self) -> bool {
        true
    }
}

/// Why a request to a replica was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicationError {
    #[error("replica {id} is not the group's leader (the leader is {leader:?})")]
    NotLeader { id: u64, leader: Option<u64> },
    #[error("raft: {0}")]
    Raft(String),
    #[error("replica state on disk: {0}")]
    Disk(String),
}

impl From<raft::Error> for ReplicationError {
    fn from(e: raft::Error) -> Self {
        ReplicationError::Raft(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, ReplicationError>;

/// A message between replicas (raft's).
pub use raft::prelude::Message;

/// A message as bytes, to carry between processes.
pub fn encode_message(m: &Message) -> Result<Vec<u8>> {
    protobuf::Message::write_to_bytes(m).map_err(|e| ReplicationError::Raft(e.to_string()))
}

/// A message carried between processes, back from its bytes.
pub fn decode_message(bytes: &[u8]) -> Result<Message> {
    <Message as protobuf::Message>::parse_from_bytes(bytes)
        .map_err(|e| ReplicationError::Raft(format!("a replica message: {e}")))
}

/// A replica's role, as its status reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Candidate,
    Follower,
}

/// A replica's view of its group (the metrics `brine status` shows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    pub id: u64,
    pub role: Role,
    pub leader: Option<u64>,
    pub term: u64,
    /// The highest entry known committed at a quorum.
    pub commit: u64,
    /// The highest entry this replica's state machine applied.
    pub applied: u64,
    /// At the leader: how far behind its log each other replica is
    /// (entries), by replica; empty elsewhere.
    pub lag: Vec<(u64, u64)>,
    /// The voting replicas.
    pub voters: Vec<u64>,
}

/// The log's storage: raft-rs' in-memory log, and the image of the state
/// machine the log's compacted prefix stands for (sent as a snapshot);
/// both kept on disk too for a replica opened on a directory.
#[derive(Clone)]
struct GroupStore {
    log: MemStorage,
    image: Arc<Mutex<Snapshot>>,
    disk: Option<Arc<Mutex<DiskLog>>>,
    /// A follower needs an image newer than the one kept (one that counts
    /// it among the replicas, or covers more): the next tick takes it.
    wanted: Arc<std::sync::atomic::AtomicBool>,
}

impl GroupStore {
    fn on_disk(&self, f: impl FnOnce(&mut DiskLog) -> Result<()>) -> Result<()> {
        match &self.disk {
            Some(d) => f(&mut d.lock().expect("replica disk")),
            None => Ok(()),
        }
    }

    /// The entries the log holds after `index`.
    fn after(&self, index: u64) -> Result<Vec<Entry>> {
        let last = self.log.last_index()?;
        if last <= index {
            return Ok(Vec::new());
        }
        Ok(self
            .log
            .entries(index + 1, last + 1, None, GetEntriesContext::empty(false))?)
    }
}

impl Storage for GroupStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.log.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.log.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.log.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.log.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.log.last_index()
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let image = self.image.lock().expect("image").clone();
        let conf = image.get_metadata().get_conf_state();
        // raft-rs refuses an image whose replicas leave out its receiver;
        // and it must reach the log's compacted prefix.
        let counts = conf.voters.contains(&to) || conf.learners.contains(&to);
        let floor = self.log.first_index()?.saturating_sub(1).max(request_index);
        if image.get_metadata().index < floor || !counts {
            self.wanted
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(image)
    }
}

/// Election and heartbeat periods, in ticks.
const ELECTION_TICKS: usize = 10;
const HEARTBEAT_TICKS: usize = 3;

/// One replica of a group.
pub struct Replica<S> {
    id: u64,
    node: RawNode<GroupStore>,
    store: GroupStore,
    machine: S,
    applied: u64,
}

impl<S: StateMachine> Replica<S> {
    /// Replica `id` of a group whose voters are `voters` (all of them
    /// created the same way), applying to `machine`. A replica that joins
    /// a running group later is created with `voters` empty and added by
    /// the leader ([`Replica::propose_add`]).
    pub fn new(id: u64, voters: &[u64], machine: S) -> Result<Replica<S>> {
        let log = MemStorage::new_with_conf_state(ConfState::from((voters.to_vec(), vec![])));
        let store = GroupStore {
            log,
            image: Arc::default(),
            disk: None,
            wanted: Arc::default(),
        };
        Replica::start(id, store, machine, 0)
    }

    /// Replica `id` keeping its raft state in `dir`: created there with
    /// `voters` the first time, restarted from it after (then `voters` is
    /// not used: the state holds them). A restarted replica's `machine`
    /// is given the image it kept, and the entries after it are applied
    /// again as raft hands them over.
    pub fn open(dir: &Path, id: u64, voters: &[u64], mut machine: S) -> Result<Replica<S>> {
        let (mut disk, restored) = DiskLog::open(dir)?;
        let log = MemStorage::new();
        let mut applied = 0;
        let conf = restored
            .conf
            .clone()
            .unwrap_or_else(|| ConfState::from((voters.to_vec(), vec![])));
        let image = match restored.snapshot {
            Some(snapshot) => {
                machine.restore(snapshot.get_data());
                applied = snapshot.get_metadata().index;
                log.wl().apply_snapshot(snapshot.clone())?;
                // A marker is no image to send: one is taken when needed.
                if machine.marker().is_some() {
                    Snapshot::default()
                } else {
                    snapshot
                }
            }
            None => Snapshot::default(),
        };
        log.wl().append(&restored.entries)?;
        log.wl().set_conf_state(conf.clone());
        let mut hs = restored.hard;
        // Never ahead of the log it has.
        hs.commit = hs.commit.min(log.last_index()?).max(applied);
        log.wl().set_hardstate(hs.clone());
        if restored.conf.is_none() {
            disk.state(&hs, &conf)?;
        }
        let store = GroupStore {
            log,
            image: Arc::new(Mutex::new(image)),
            disk: Some(Arc::new(Mutex::new(disk))),
            wanted: Arc::default(),
        };
        Replica::start(id, store, machine, applied)
    }

    fn start(id: u64, store: GroupStore, machine: S, applied: u64) -> Result<Replica<S>> {
        let config = raft::Config {
            id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            // An isolated leader steps down once it no longer hears from a
            // quorum, so clients stop writing to it.
            check_quorum: true,
            pre_vote: true,
            applied,
            ..raft::Config::default()
        };
        config.validate()?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&config, store.clone(), &logger)?;
        Ok(Replica {
            id,
            node,
            store,
            machine,
            applied,
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn machine(&self) -> &S {
        &self.machine
    }

    pub fn machine_mut(&mut self) -> &mut S {
        &mut self.machine
    }

    /// Starts an election now (the replica a group should be led by at
    /// start, rather than waiting for an election timeout).
    pub fn campaign(&mut self) -> Result<()> {
        self.node.campaign()?;
        Ok(())
    }

    /// One tick of the replica's clock (elections and heartbeats count
    /// ticks).
    pub fn tick(&mut self) {
        if self
            .store
            .wanted
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            // Failing, it is asked again at the next attempt.
            let _ = self.share_image();
        }
        self.node.tick();
    }

    /// A message from another replica.
    pub fn step(&mut self, msg: Message) -> Result<()> {
        self.node.step(msg)?;
        Ok(())
    }

    /// Whether this replica leads its group now.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// Whether this replica leads and has applied everything committed,
    /// its own term's first entry included: everything a previous leader
    /// got a quorum for is in its state machine.
    pub fn leads_caught_up(&self) -> bool {
        let log = &self.node.raft.raft_log;
        self.is_leader()
            && log.term(log.committed).unwrap_or(0) == self.node.raft.term
            && self.applied >= log.committed
    }

    /// The leader hands its role to replica `id` (once `id` has the
    /// whole log: raft-rs waits for it).
    pub fn transfer_leader(&mut self, id: u64) {
        self.node.transfer_leader(id);
    }

    /// At the leader: whether replica `id` has every entry of the log.
    pub fn has_whole_log(&self, id: u64) -> bool {
        let raft = &self.node.raft;
        raft.prs()
            .get(id)
            .is_some_and(|p| p.matched >= raft.raft_log.last_index())
    }

    fn leader_only(&self) -> Result<()> {
        if self.is_leader() {
            return Ok(());
        }
        let leader = self.node.raft.leader_id;
        Err(ReplicationError::NotLeader {
            id: self.id,
            leader: (leader != raft::INVALID_ID).then_some(leader),
        })
    }

    /// Appends `data` to the group's log (at the leader only); it is
    /// applied everywhere once a quorum has it. Returns the index it
    /// takes (applied at that index, unless a change of leader drops it).
    pub fn propose(&mut self, data: Vec<u8>) -> Result<u64> {
        self.leader_only()?;
        self.node.propose(Vec::new(), data)?;
        Ok(self.node.raft.raft_log.last_index())
    }

    /// Adds replica `id` as a voter (at the leader; one change at a time).
    pub fn propose_add(&mut self, id: u64) -> Result<()> {
        self.change(id, ConfChangeType::AddNode)
    }

    /// Removes replica `id` from the group.
    pub fn propose_remove(&mut self, id: u64) -> Result<()> {
        self.change(id, ConfChangeType::RemoveNode)
    }

    fn change(&mut self, id: u64, change: ConfChangeType) -> Result<()> {
        self.leader_only()?;
        let mut cc = ConfChange::default();
        cc.set_change_type(change);
        cc.node_id = id;
        self.node.propose_conf_change(Vec::new(), cc)?;
        Ok(())
    }

    /// Whether raft has something for [`Replica::ready`] to do.
    pub fn has_ready(&self) -> bool {
        self.node.has_ready()
    }

    /// Does what raft asks once something happened (a tick, a message, a
    /// proposal): persists the log and the hard state, applies what
    /// committed, and pushes the messages to send onto `out`.
    pub fn ready(&mut self, out: &mut Vec<Message>) -> Result<()> {
        if !self.node.has_ready() {
            return Ok(());
        }
        let mut rd = self.node.ready();
        out.extend(rd.take_messages());
        if !rd.snapshot().is_empty() {
            let snapshot = rd.snapshot().clone();
            self.machine.restore(snapshot.get_data());
            // A machine on disk keeps its marker, not the image, as the
            // compaction point.
            let mut kept = snapshot.clone();
            if let Some(marker) = self.machine.marker() {
                kept.set_data(Bytes::from(marker));
            }
            self.store.on_disk(|d| d.snapshot(&kept, &[]))?;
            self.applied = snapshot.get_metadata().index;
            *self.store.image.lock().expect("image") = snapshot.clone();
            self.store.log.wl().apply_snapshot(snapshot)?;
        }
        let committed = rd.take_committed_entries();
        self.apply(committed)?;
        if !rd.entries().is_empty() {
            self.store.on_disk(|d| d.append(rd.entries()))?;
            self.store.log.wl().append(rd.entries())?;
        }
        if let Some(hs) = rd.hs() {
            let conf = self.store.log.initial_state()?.conf_state;
            self.store.on_disk(|d| d.hard_state(hs, &conf))?;
            self.store.log.wl().set_hardstate(hs.clone());
        }
        out.extend(rd.take_persisted_messages());
        let mut light = self.node.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.store.log.wl().mut_hard_state().set_commit(commit);
        }
        out.extend(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(committed)?;
        self.node.advance_apply();
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if !e.data.is_empty() => {
                    self.machine.apply(e.index, &e.data);
                }
                EntryType::EntryNormal => {} // a new leader's empty entry
                EntryType::EntryConfChange => {
                    let mut cc = ConfChange::default();
                    protobuf::Message::merge_from_bytes(&mut cc, &e.data)
                        .map_err(|err| ReplicationError::Raft(err.to_string()))?;
                    let cs = self.node.apply_conf_change(&cc)?;
                    let hs = self.store.log.initial_state()?.hard_state;
                    self.store.on_disk(|d| d.state(&hs, &cs))?;
                    self.store.log.wl().set_conf_state(cs);
                }
                EntryType::EntryConfChangeV2 => {
                    return Err(ReplicationError::Raft(
                        "joint membership changes are not used".into(),
                    ))
                }
            }
            self.applied = e.index;
        }
        Ok(())
    }

    /// Drops the log up to what the state machine applied: the machine's
    /// image (or marker) stands for it. A replica that needs older entries
    /// gets the image.
    pub fn compact(&mut self) -> Result<()> {
        let index = self.applied;
        if index == 0 {
            return Ok(());
        }
        if !self.machine.sync() {
            return Err(ReplicationError::Disk(
                "the state machine could not make what it applied durable".into(),
            ));
        }
        let marker = self.machine.marker();
        let kept = self.snapshot_at(
            index,
            marker.clone().unwrap_or_else(|| self.machine.image()),
        )?;
        let rest = self.store.after(index)?;
        self.store.on_disk(|d| d.snapshot(&kept, &rest))?;
        if marker.is_none() {
            *self.store.image.lock().expect("image") = kept;
        }
        self.store.log.wl().compact(index)?;
        Ok(())
    }

    /// Takes the full image at what the machine applied, for a follower
    /// that needs one (kept in memory; the log is not compacted).
    fn share_image(&mut self) -> Result<()> {
        if self.applied == 0 {
            return Ok(());
        }
        let image = self.snapshot_at(self.applied, self.machine.image())?;
        *self.store.image.lock().expect("image") = image;
        Ok(())
    }

    fn snapshot_at(&self, index: u64, data: Vec<u8>) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        snapshot.set_data(Bytes::from(data));
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = self.store.log.term(index)?;
        meta.set_conf_state(self.node.raft.prs().conf().to_conf_state());
        Ok(snapshot)
    }

    /// The last entry this replica's state machine applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The first entry the log still holds.
    pub fn first_index(&self) -> u64 {
        self.store.log.first_index().unwrap_or(0)
    }

    pub fn status(&self) -> GroupStatus {
        let raft = &self.node.raft;
        let role = match raft.state {
            StateRole::Leader => Role::Leader,
            StateRole::Candidate | StateRole::PreCandidate => Role::Candidate,
            StateRole::Follower => Role::Follower,
        };
        let last = raft.raft_log.last_index();
        let mut lag: Vec<(u64, u64)> = match role {
            Role::Leader => raft
                .prs()
                .iter()
                .filter(|(id, _)| **id != self.id)
                .map(|(id, p)| (*id, last.saturating_sub(p.matched)))
                .collect(),
            _ => Vec::new(),
        };
        lag.sort_unstable();
        let mut voters: Vec<u64> = raft.prs().conf().voters().ids().iter().collect();
        voters.sort_unstable();
        GroupStatus {
            id: self.id,
            role,
            leader: (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id),
            term: raft.term,
            commit: raft.raft_log.committed,
            applied: self.applied,
            lag,
            voters,
        }
    }
}

mod disk;
use disk::DiskLog;

#[cfg(test)]
mod tests;
