//! A Mediator transaction, as its client runs it (seed 003 section 4.2,
//! Algorithm 1; Algorithm 4 for serializability), over the partitions
//! ([`Db`]), the oracle ([`Tso`]) and the log ([`Log`]).
//!
//! ```text
//!  begin ── start ts (TSO) ─► get: fence + version before start (SI) / latest (SER)
//!                              put: buffered
//!  commit: nothing written (SI) ─► done            one put, nothing read ─► native put
//!          else: TSO check (ww | rw), commit ts ─► native-conflict check at the
//!                checked items' partitions (fence at the commit ts)
//!                [SER: fence the write set's partitions too]
//!          ─► log ─► write-back at the commit ts ─► TSO: committed
//! ```
//!
//! The serializable variant also fences the partitions of the write set
//! before write-back. The source's pseudo-code checks (and so fences) only
//! the read set's: a native put to a written item on a partition the
//! transaction read nothing from would then be stamped below the commit
//! timestamp and lost behind the transaction's version, although it came
//! after the transaction completed (`tests.rs`, the fence scenarios).

use std::hash::Hash;

use super::store::{Ts, VersionedStore};
use super::tso::{Check, Refusal, Tso};

/// The consistency of transactions (native operations are single
/// operations either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Snapshot,
    Serializable,
}

/// How a client runs its transactions.
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    pub level: Level,
    /// Transactional accesses fence the partitions' clocks. Off only to
    /// show the anomalies fences prevent (mutation testing).
    pub fences: bool,
    /// The commit checks conflicts with native puts. Off only for
    /// mutation testing.
    pub native_check: bool,
    /// Re-reads of an item whose expected version is not written back yet
    /// before the transaction aborts.
    pub retry_get: u32,
}

impl ClientConfig {
    pub fn new(level: Level) -> Self {
        ClientConfig {
            level,
            fences: true,
            native_check: true,
            retry_get: 3,
        }
    }
}

/// Why a transaction aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abort {
    /// The oracle refused it (a conflict with a transaction, a Bloom
    /// filter's false positive, or too old).
    Tso(Refusal),
    /// A native put wrote an item it checked after it knew it.
    Native,
    /// The version a get had to return was not written back in time.
    Stale,
}

/// The partitions, as a transaction sees them (Algorithm 3).
pub trait Db<K, V> {
    fn get(&mut self, key: &K) -> Option<(V, Ts)>;
    fn put(&mut self, key: K, val: V) -> Ts;
    fn tx_get(&mut self, key: &K, ts: Ts, fence: bool) -> Option<(V, Ts)>;
    /// The native-conflict check of `items` at `ts` (fencing their
    /// partitions at `ts` if `fence`).
    fn check(&mut self, items: &[(K, Ts)], ts: Ts, fence: bool) -> bool;
    /// Fences the partitions of `keys` at `ts`.
    fn fence(&mut self, keys: &[K], ts: Ts);
    fn write_back(&mut self, writes: &[(K, V)], ts: Ts);
}

/// The write-ahead log of committing transactions' write sets.
pub trait Log<K, V> {
    fn record(&mut self, ts: Ts, writes: &[(K, V)]);
}

impl<K: Clone, V: Clone> Log<K, V> for Vec<(Ts, Vec<(K, V)>)> {
    fn record(&mut self, ts: Ts, writes: &[(K, V)]) {
        self.push((ts, writes.to_vec()));
    }
}

/// Partitions in one process: stores routed to by a function of the key.
pub struct Partitioned<K, V> {
    pub parts: Vec<VersionedStore<K, V>>,
    route: fn(&K) -> usize,
}

impl<K: Hash + Eq + Clone, V: Clone> Partitioned<K, V> {
    pub fn new(n: usize, delta: Ts, route: fn(&K) -> usize) -> Self {
        Partitioned {
            parts: (0..n.max(1)).map(|_| VersionedStore::new(delta)).collect(),
            route,
        }
    }

    pub fn part(&mut self, key: &K) -> &mut VersionedStore<K, V> {
        let n = self.parts.len();
        &mut self.parts[(self.route)(key) % n]
    }

    fn index(&self, key: &K) -> usize {
        (self.route)(key) % self.parts.len()
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Db<K, V> for Partitioned<K, V> {
    fn get(&mut self, key: &K) -> Option<(V, Ts)> {
        self.part(key).get(key)
    }

    fn put(&mut self, key: K, val: V) -> Ts {
        self.part(&key).put(key, val)
    }

    fn tx_get(&mut self, key: &K, ts: Ts, fence: bool) -> Option<(V, Ts)> {
        let part = self.part(key);
        if fence {
            part.tx_get(key, ts)
        } else {
            part.version_before(key, ts)
        }
    }

    fn check(&mut self, items: &[(K, Ts)], ts: Ts, fence: bool) -> bool {
        let mut ok = true;
        for p in 0..self.parts.len() {
            let mine: Vec<(&K, Ts)> = items
                .iter()
                .filter(|(k, _)| self.index(k) == p)
                .map(|(k, t)| (k, *t))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let part = &mut self.parts[p];
            ok &= if fence {
                part.tx_check_conflict(mine, ts)
            } else {
                // The mutation: the check does not seal the items.
                part.unchanged_before(mine, ts)
            };
        }
        ok
    }

    fn fence(&mut self, keys: &[K], ts: Ts) {
        for k in keys {
            self.part(k).sync(ts);
        }
    }

    fn write_back(&mut self, writes: &[(K, V)], ts: Ts) {
        for (k, v) in writes {
            self.part(k).tx_put([(k.clone(), v.clone())], ts);
        }
    }
}

/// What a commit must do, decided from what the transaction did: the
/// shortcuts and the conflict check of Algorithms 1 and 4. `Txn::commit`
/// carries it out in one process, `run.rs` over messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitPath {
    /// No-commit: a snapshot-isolation transaction that wrote nothing
    /// was its snapshot.
    NoCommit,
    /// Local commit: one put and nothing read is a native put.
    LocalPut,
    /// The oracle's check (`check`: its writes at the start under SI, its
    /// reads at their versions under serializability), the partitions'
    /// native-conflict check, the write set's fences if `fence_writes`,
    /// then the write-back.
    Validate { check: Check, fence_writes: bool },
}

/// The commit path of a transaction at `level` that read `reads` items
/// and writes `writes` (`shortcuts` off: every commit validates, as the
/// `omid` baseline's; `fences` off: mutation testing).
pub fn commit_path(
    level: Level,
    shortcuts: bool,
    fences: bool,
    reads: usize,
    writes: usize,
) -> CommitPath {
    let serializable = level == Level::Serializable;
    if shortcuts && writes == 0 && !serializable {
        return CommitPath::NoCommit;
    }
    if shortcuts && reads == 0 && writes == 1 {
        return CommitPath::LocalPut;
    }
    CommitPath::Validate {
        check: if serializable {
            Check::ReadWrite
        } else {
            Check::WriteWrite
        },
        // The fence the source's pseudo-code omits: the write set's
        // partitions, which the read-set check may not have reached.
        fence_writes: serializable && fences,
    }
}

/// The timestamp a snapshot-isolation get of `key` must find at least:
/// that of the latest transaction serialized before the start that wrote
/// it and is still writing back (`pending`, from `Tso::pending_before`).
pub fn expected_version<K: PartialEq>(pending: &[(Ts, Vec<K>)], key: &K) -> Ts {
    pending
        .iter()
        .filter(|(_, keys)| keys.contains(key))
        .map(|(ts, _)| *ts)
        .max()
        .unwrap_or(0)
}

/// A transaction's descriptor: its start timestamp, the write-backs
/// pending at its start, what it read (with the timestamps of the
/// versions) and what it will write.
#[derive(Debug)]
pub struct Txn<K, V> {
    pub start: Ts,
    pub pending: Vec<(Ts, Vec<K>)>,
    pub reads: Vec<(K, Ts)>,
    pub writes: Vec<(K, V)>,
}

/// A transaction serialized by the oracle and checked at the partitions,
/// not yet written back.
#[derive(Debug)]
pub struct Prepared<K, V> {
    pub start: Ts,
    pub commit: Ts,
    pub writes: Vec<(K, V)>,
}

/// How a commit ended: nothing to write back (read-only, or a single put
/// that committed locally), or prepared for write-back.
#[derive(Debug)]
pub enum Committing<K, V> {
    Done,
    WriteBack(Prepared<K, V>),
}

impl<K: Hash + Eq + Clone, V: Clone> Txn<K, V> {
    pub fn begin(tso: &mut Tso<K>) -> Self {
        let start = tso.begin();
        Txn {
            start,
            pending: tso.pending_before(start),
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// TXGET: under snapshot isolation the latest version before the
    /// start (fencing its partition there), re-read while the oracle says
    /// a later committed version is still being written back; under
    /// serializability the latest version, whatever its timestamp.
    pub fn get(
        &mut self,
        db: &mut impl Db<K, V>,
        tso: &mut Tso<K>,
        key: &K,
        config: &ClientConfig,
    ) -> Result<Option<V>, Abort> {
        if config.level == Level::Serializable {
            let got = db.get(key);
            self.reads
                .push((key.clone(), got.as_ref().map_or(0, |(_, t)| *t)));
            return Ok(got.map(|(v, _)| v));
        }
        let expected = expected_version(&self.pending, key);
        for _ in 0..config.retry_get.max(1) {
            let got = db.tx_get(key, self.start, config.fences);
            let ts = got.as_ref().map_or(0, |(_, t)| *t);
            if ts >= expected {
                self.reads.push((key.clone(), ts));
                return Ok(got.map(|(v, _)| v));
            }
        }
        self.abandon(tso);
        Err(Abort::Stale)
    }

    /// A transactional put: buffered until commit.
    pub fn put(&mut self, key: K, val: V) {
        match self.writes.iter_mut().find(|(k, _)| *k == key) {
            Some(w) => w.1 = val,
            None => self.writes.push((key, val)),
        }
    }

    /// The transaction ends without committing.
    pub fn abandon(&self, tso: &mut Tso<K>) {
        tso.end(self.start);
    }

    /// The first phase of TXCOMMIT, with its shortcuts.
    pub fn commit(
        self,
        db: &mut impl Db<K, V>,
        tso: &mut Tso<K>,
        config: &ClientConfig,
    ) -> Result<Committing<K, V>, Abort> {
        let path = commit_path(
            config.level,
            true,
            config.fences,
            self.reads.len(),
            self.writes.len(),
        );
        let (check, fence_writes) = match path {
            CommitPath::NoCommit => {
                tso.end(self.start);
                return Ok(Committing::Done);
            }
            CommitPath::LocalPut => {
                let (k, v) = self.writes.into_iter().next().expect("one write");
                db.put(k, v);
                tso.end(self.start);
                return Ok(Committing::Done);
            }
            CommitPath::Validate {
                check,
                fence_writes,
            } => (check, fence_writes),
        };
        let checked: Vec<(K, Ts)> = match check {
            Check::ReadWrite => self.reads.clone(),
            Check::WriteWrite => self
                .writes
                .iter()
                .map(|(k, _)| (k.clone(), self.start))
                .collect(),
        };
        let commit = match tso.try_commit(self.start, self.writes.iter().map(|(k, _)| k), &checked)
        {
            Ok(ts) => ts,
            Err(r) => {
                tso.end(self.start);
                return Err(Abort::Tso(r));
            }
        };
        if config.native_check && !db.check(&checked, commit, config.fences) {
            tso.abort(commit);
            tso.end(self.start);
            return Err(Abort::Native);
        }
        if fence_writes {
            let keys: Vec<K> = self.writes.iter().map(|(k, _)| k.clone()).collect();
            db.fence(&keys, commit);
        }
        if self.writes.is_empty() {
            tso.commit(commit);
            tso.end(self.start);
            return Ok(Committing::Done);
        }
        Ok(Committing::WriteBack(Prepared {
            start: self.start,
            commit,
            writes: self.writes,
        }))
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Prepared<K, V> {
    /// The second phase (WRITEVALS): the write set to the log, then to the
    /// partitions at the commit timestamp, then the oracle hears it
    /// committed.
    pub fn write_back(self, db: &mut impl Db<K, V>, tso: &mut Tso<K>, log: &mut impl Log<K, V>) {
        log.record(self.commit, &self.writes);
        db.write_back(&self.writes, self.commit);
        tso.commit(self.commit);
        tso.end(self.start);
    }
}
