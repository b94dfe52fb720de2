//! The helper (seed 003 section 2): a client that crashes after the
//! oracle serialized its transaction leaves it `Active` in the ring,
//! holding the ring's horizon back, and possibly half written back. The
//! helper resolves every such transaction older than a patience bound by
//! the log: a write set that reached the log committed (the checks passed
//! before it was logged), so it is written back again (write-backs are
//! idempotent) and the oracle hears it committed; one that did not is
//! aborted, and its writes never become visible.

use std::collections::HashMap;
use std::hash::Hash;

use super::client::Db;
use super::store::Ts;
use super::tso::Tso;

/// What a helper pass decided, by commit timestamp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub committed: Vec<Ts>,
    pub aborted: Vec<Ts>,
}

/// Resolves the transactions serialized before `before` that nobody
/// finished, from `log` (commit timestamp and write set, as appended by
/// write-back).
pub fn resolve<K: Hash + Eq + Clone, V: Clone>(
    tso: &mut Tso<K>,
    log: &[(Ts, Vec<(K, V)>)],
    db: &mut impl Db<K, V>,
    before: Ts,
) -> Resolved {
    let unresolved = tso.unresolved(before);
    if unresolved.is_empty() {
        return Resolved::default();
    }
    let logged: HashMap<Ts, &Vec<(K, V)>> = log.iter().map(|(ts, w)| (*ts, w)).collect();
    let mut r = Resolved::default();
    for (commit, start) in unresolved {
        match logged.get(&commit) {
            Some(writes) => {
                db.write_back(writes, commit);
                tso.commit(commit);
                r.committed.push(commit);
            }
            None => {
                tso.abort(commit);
                r.aborted.push(commit);
            }
        }
        tso.end(start);
    }
    r
}

/// A write set by partition.
pub type PartitionWrites = Vec<(usize, Vec<(super::kv::Item, brine_core::Row)>)>;

/// A write set (item, row, partition) by partition.
pub fn by_partition(writes: &[(super::kv::Item, brine_core::Row, usize)]) -> PartitionWrites {
    let mut out: PartitionWrites = Vec::new();
    for (item, row, p) in writes {
        match out.iter_mut().find(|(q, _)| q == p) {
            Some((_, w)) => w.push((item.clone(), row.clone())),
            None => out.push((*p, vec![(item.clone(), row.clone())])),
        }
    }
    out
}

/// The commits a cluster's coordinators have in flight, from the TSO's
/// answer to the write-back's end: what the helper needs to finish or
/// abort one whose coordinator went away (its call dropped). Sharded by
/// commit timestamp, so commits do not meet on one lock.
pub struct Inflight {
    shards: Vec<parking_lot::Mutex<HashMap<Ts, Stage>>>,
    /// Commit requests at the TSO not answered yet (their timestamps are
    /// not known here yet).
    asking: std::sync::atomic::AtomicUsize,
}

/// Where an in-flight commit is.
#[derive(Clone, Debug)]
pub enum Stage {
    /// Serialized by the TSO, its checks under way: not logged.
    Checking,
    /// Logged (the write set, by partition): it commits whatever happens.
    Logged(PartitionWrites),
    /// The helper gave up on it before it was logged: its coordinator,
    /// if still there, must abort it.
    Abandoned,
    /// Recovered from the log after a restart: being written back by
    /// recovery (`upkeep::recover`), not by the helper.
    Resending,
}

const SHARDS: usize = 16;

impl Default for Inflight {
    fn default() -> Self {
        Inflight {
            shards: (0..SHARDS).map(|_| Default::default()).collect(),
            asking: Default::default(),
        }
    }
}

impl Inflight {
    fn shard(&self, ts: Ts) -> &parking_lot::Mutex<HashMap<Ts, Stage>> {
        // Commit timestamps step by 2^20: shard by the steps.
        &self.shards[((ts >> 20) as usize) % SHARDS]
    }

    /// The TSO serialized `ts`.
    pub fn checking(&self, ts: Ts) {
        self.shard(ts).lock().insert(ts, Stage::Checking);
    }

    /// `ts` is about to be logged with its write set; `false` if the
    /// helper abandoned it first (its coordinator must abort it).
    pub fn logging(
        &self,
        ts: Ts,
        writes: Vec<(usize, Vec<(super::kv::Item, brine_core::Row)>)>,
    ) -> bool {
        let mut shard = self.shard(ts).lock();
        match shard.get(&ts) {
            Some(Stage::Abandoned) => {
                shard.remove(&ts);
                false
            }
            _ => {
                shard.insert(ts, Stage::Logged(writes));
                true
            }
        }
    }

    /// A commit request goes to the TSO; `asked` when it is answered (and
    /// its timestamp, if any, is in flight here).
    pub fn ask(&self) {
        self.asking
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn asked(&self) {
        self.asking
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Recovery writes `ts` back (logged before a restart).
    pub fn resending(&self, ts: Ts) {
        self.shard(ts).lock().insert(ts, Stage::Resending);
    }

    /// For a restarted TSO whose epoch is `ts`: the commits serialized
    /// before it that are being checked are abandoned (their coordinators
    /// abort them), and those logged are returned, to be written back.
    pub fn settle_before(&self, ts: Ts) -> Vec<(Ts, PartitionWrites)> {
        let mut logged = Vec::new();
        for shard in &self.shards {
            for (&c, stage) in shard.lock().iter_mut().filter(|(&c, _)| c < ts) {
                match stage {
                    Stage::Checking => *stage = Stage::Abandoned,
                    Stage::Logged(w) => logged.push((c, w.clone())),
                    Stage::Abandoned | Stage::Resending => {}
                }
            }
        }
        logged
    }

    /// Whether a commit serialized before `ts` that may still be written
    /// back (or one whose timestamp is on its way from the TSO) is in
    /// flight here.
    pub fn any_before(&self, ts: Ts) -> bool {
        self.asking.load(std::sync::atomic::Ordering::Acquire) > 0
            || self.shards.iter().any(|s| {
                s.lock()
                    .iter()
                    .any(|(&c, stage)| c < ts && !matches!(stage, Stage::Abandoned))
            })
    }

    /// `ts` ended (written back, or aborted by its coordinator).
    pub fn done(&self, ts: Ts) {
        self.shard(ts).lock().remove(&ts);
    }

    /// The helper's decision on a commit stuck at the TSO: its write set
    /// to write back again (logged), or `None` (abandoned now, if it was
    /// still being checked; left alone if it is not in flight here, e.g.
    /// its end is on its way to the TSO).
    pub fn resolve(&self, ts: Ts) -> Option<Option<PartitionWrites>> {
        let mut shard = self.shard(ts).lock();
        match shard.get(&ts)? {
            Stage::Logged(w) => Some(Some(w.clone())),
            Stage::Resending => None,
            Stage::Checking | Stage::Abandoned => {
                shard.insert(ts, Stage::Abandoned);
                Some(None)
            }
        }
    }
}
