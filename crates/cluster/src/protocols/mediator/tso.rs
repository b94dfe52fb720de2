//! The transaction status oracle (seed 003 section 4.3, Algorithm 2, with
//! Algorithm 4's read-write variant): the global clock, stepping by Delta
//! for every timestamp it hands out (and ticking on its own when traffic
//! is idle); the ring of transactions that asked to commit, each with its
//! commit timestamp, status and write set as a Bloom filter; the conflict
//! check against the ring; its garbage collection.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;

use super::bloom::Bloom;
use super::store::Ts;

/// A ring entry's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Status {
    /// Serialized (it has its commit timestamp), still checking conflicts
    /// with native puts or writing back.
    Active,
    Committed,
    Aborted,
}

/// Which conflicts a commit checks (seed 003: `ww` for snapshot isolation,
/// `rw` for serializability).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The transaction's writes against later committers' writes.
    WriteWrite,
    /// The transaction's reads against later committers' writes.
    ReadWrite,
}

/// Why the TSO refused a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Refusal {
    /// The transaction began before the ring's horizon (`ts_min`): its
    /// conflicts can no longer be checked.
    TooOld,
    /// A transaction that committed after it began wrote what it wrote
    /// (or read).
    Conflict,
    /// Only the Bloom filter said so: no key actually overlapped.
    FalsePositive,
}

/// The TSO's settings.
#[derive(Clone, Copy, Debug)]
pub struct TsoConfig {
    /// The global clock's step (Delta, much larger than a partition's
    /// delta: 2^20 against 1 in the source).
    pub big_delta: Ts,
    /// Bits and probes of each entry's write-set filter. 8192 bits (1 KiB
    /// an entry): a U_20 commit checks some ten keys against the hundred
    /// or so entries committed during its life, about a thousand probes;
    /// at 2048 bits that made about one commit in a thousand a spurious
    /// abort, at 8192 one in a hundred thousand.
    pub bloom_bits: usize,
    pub bloom_hashes: u32,
}

impl Default for TsoConfig {
    fn default() -> Self {
        TsoConfig {
            big_delta: 1 << 20,
            bloom_bits: 8192,
            bloom_hashes: 3,
        }
    }
}

struct Entry<K> {
    /// The transaction's start, which holds the horizon until it ends.
    start: Ts,
    ts_c: Ts,
    status: Status,
    bloom: Bloom,
    /// The exact keys, to tell a real conflict from a Bloom filter's false
    /// positive (counted) and to tell a snapshot what is still being
    /// written back (`pending_before`).
    keys: HashSet<K>,
}

/// What the TSO counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsoStats {
    pub begun: u64,
    pub commits: u64,
    pub conflicts: u64,
    pub false_positives: u64,
    pub too_old: u64,
    pub collected: u64,
}

/// The oracle.
pub struct Tso<K> {
    config: TsoConfig,
    clock: Ts,
    /// Oldest first.
    ring: VecDeque<Entry<K>>,
    /// The earliest timestamp the ring still holds history from.
    ts_min: Ts,
    /// Start timestamps of transactions that have not ended.
    active: BTreeMap<Ts, u32>,
    stats: TsoStats,
}

impl<K: Hash + Eq + Clone> Tso<K> {
    pub fn new(config: TsoConfig) -> Self {
        Tso {
            config,
            clock: 0,
            ring: VecDeque::new(),
            ts_min: 0,
            active: BTreeMap::new(),
            stats: TsoStats::default(),
        }
    }

    pub fn stats(&self) -> TsoStats {
        self.stats
    }

    /// After a restart: the clock resumes at the first multiple of Delta
    /// at or above `after` (every recovered timestamp), so each new
    /// timestamp is above them and keeps its low bits zero.
    pub fn resume(&mut self, after: Ts) {
        let d = self.config.big_delta;
        self.clock = self.clock.max(after.div_ceil(d) * d);
        self.ts_min = self.ts_min.max(self.clock);
    }

    /// The newest timestamp handed out (or ticked to).
    pub fn clock(&self) -> Ts {
        self.clock
    }

    /// The step of the clock (Delta).
    pub fn big_delta(&self) -> Ts {
        self.config.big_delta
    }

    pub fn ring_len(&self) -> usize {
        self.ring.len()
    }

    fn next_timestamp(&mut self) -> Ts {
        self.clock += self.config.big_delta;
        self.clock
    }

    /// Advances the clock by Delta with no transaction asking, so a
    /// partition's native puts never reach the next transactional
    /// timestamp however long transactions stay away.
    pub fn tick(&mut self) {
        self.next_timestamp();
    }

    /// A transaction begins: its start timestamp.
    pub fn begin(&mut self) -> Ts {
        let ts = self.next_timestamp();
        *self.active.entry(ts).or_default() += 1;
        self.stats.begun += 1;
        ts
    }

    /// The transaction that began at `start` ended (committed, aborted or
    /// abandoned): it no longer holds the ring's horizon back.
    pub fn end(&mut self, start: Ts) {
        if let Some(n) = self.active.get_mut(&start) {
            *n -= 1;
            if *n == 0 {
                self.active.remove(&start);
            }
        }
    }

    /// Whether the transaction that began at `start` has not ended.
    pub fn is_active(&self, start: Ts) -> bool {
        self.active.contains_key(&start)
    }

    /// Gives up on every transaction that began before `before` (one that
    /// outlived the collection of its snapshot): they no longer hold the
    /// ring's horizon back, and their commits are refused as too old once
    /// the ring is collected past them. Returns how many.
    pub fn expire(&mut self, before: Ts) -> usize {
        let keep = self.active.split_off(&before);
        let gone = std::mem::replace(&mut self.active, keep);
        gone.values().map(|&n| n as usize).sum()
    }

    /// The oldest snapshot still in use (a bound for the partitions'
    /// version collection and the ring's): the oldest active start, or,
    /// with none active, one past the clock, below every start to come.
    pub fn oldest_active(&self) -> Ts {
        self.active.keys().next().copied().unwrap_or(self.clock + 1)
    }

    /// TXTRYCOMMIT: serializes a transaction that began at `start` and
    /// writes `writes`, checking `checked` (its writes for
    /// `Check::WriteWrite`, its reads for `Check::ReadWrite`, each with
    /// the timestamp it knew the item by) against every transaction in
    /// the ring that is not aborted and committed after that timestamp.
    /// Returns its commit timestamp; it enters the ring as `Active`.
    pub fn try_commit<'a>(
        &mut self,
        start: Ts,
        writes: impl IntoIterator<Item = &'a K>,
        checked: &[(K, Ts)],
    ) -> Result<Ts, Refusal>
    where
        K: 'a,
    {
        if self.ts_min > start {
            self.stats.too_old += 1;
            return Err(Refusal::TooOld);
        }
        let mut false_positive = false;
        for current in self.ring.iter().rev() {
            if current.status == Status::Aborted {
                continue;
            }
            for (key, known) in checked {
                if current.ts_c <= *known || !current.bloom.may_contain(key) {
                    continue;
                }
                if current.keys.contains(key) {
                    self.stats.conflicts += 1;
                    return Err(Refusal::Conflict);
                }
                false_positive = true;
            }
        }
        if false_positive {
            self.stats.false_positives += 1;
            return Err(Refusal::FalsePositive);
        }
        let ts_c = self.next_timestamp();
        let mut bloom = Bloom::new(self.config.bloom_bits, self.config.bloom_hashes);
        let mut keys = HashSet::new();
        for k in writes {
            bloom.insert(k);
            keys.insert(k.clone());
        }
        self.ring.push_back(Entry {
            start,
            ts_c,
            status: Status::Active,
            bloom,
            keys,
        });
        Ok(ts_c)
    }

    fn entry(&mut self, ts_c: Ts) -> Option<&mut Entry<K>> {
        let i = self.ring.binary_search_by_key(&ts_c, |e| e.ts_c).ok()?;
        self.ring.get_mut(i)
    }

    /// The transaction with commit timestamp `ts_c` wrote back: committed.
    pub fn commit(&mut self, ts_c: Ts) {
        if let Some(e) = self.entry(ts_c) {
            e.status = Status::Committed;
            self.stats.commits += 1;
        }
    }

    /// It failed after serialization (a conflict with a native put):
    /// aborted, so it conflicts with nobody.
    pub fn abort(&mut self, ts_c: Ts) {
        if let Some(e) = self.entry(ts_c) {
            e.status = Status::Aborted;
        }
    }

    pub fn status(&self, ts_c: Ts) -> Option<Status> {
        let i = self.ring.binary_search_by_key(&ts_c, |e| e.ts_c).ok()?;
        Some(self.ring[i].status)
    }

    /// The transactions serialized before `start` whose write-backs have
    /// not been heard of yet, with their write sets: a snapshot at
    /// `start` must see their versions, and a get that finds an older one
    /// reads again (the oracle's state a client gets with its start
    /// timestamp, seed 003 section 4.2).
    pub fn pending_before(&self, start: Ts) -> Vec<(Ts, Vec<K>)> {
        self.ring
            .iter()
            .filter(|e| e.status == Status::Active && e.ts_c < start)
            .map(|e| (e.ts_c, e.keys.iter().cloned().collect()))
            .collect()
    }

    /// The transactions serialized but not heard of since (their commit
    /// and start timestamps), commit timestamp `< before`: those the
    /// helper resolves when their clients went away.
    pub fn unresolved(&self, before: Ts) -> Vec<(Ts, Ts)> {
        self.ring
            .iter()
            .filter(|e| e.status == Status::Active && e.ts_c < before)
            .map(|e| (e.ts_c, e.start))
            .collect()
    }

    /// Drops the entries no active transaction can conflict with: complete
    /// ones (committed or aborted) older than the oldest active start, from
    /// the head; an entry whose outcome is unknown stays (the helper
    /// resolves it). Returns how many went.
    pub fn collect(&mut self) -> usize {
        let horizon = self.oldest_active();
        let mut n = 0;
        while let Some(e) = self.ring.front() {
            if e.status == Status::Active || e.ts_c >= horizon {
                break;
            }
            self.ts_min = e.ts_c;
            self.ring.pop_front();
            n += 1;
        }
        self.stats.collected += n as u64;
        n
    }
}
