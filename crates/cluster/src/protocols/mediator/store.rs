//! One partition's multi-versioned items and its local clock (seed 003
//! section 4.4, Algorithm 3). A native put stamps its version with the
//! clock advanced by delta; a transactional access first promotes the
//! clock to the transaction's timestamp (a *temporal fence*), so no later
//! native put here is stamped below it.

use std::collections::HashMap;
use std::hash::Hash;

/// A timestamp: of the global TSO clock for transactions, of a partition's
/// clock for native puts.
pub type Ts = u64;

/// The span of a partition's tag in a native put's timestamp (its low 8
/// bits).
pub const TAG_SPAN: Ts = 1 << 8;

/// The multi-versioned items of one partition, with its clock.
#[derive(Debug)]
pub struct VersionedStore<K, V> {
    clock: Ts,
    /// The step of a native put (delta, much smaller than the TSO's).
    delta: Ts,
    /// Low bits of every native put's timestamp (0: none): the partition's
    /// tag, so no native put of one partition shares a timestamp with
    /// another's or with a transaction's (whose low bits are zero), and a
    /// timestamp names one version of the whole cluster.
    tag: Ts,
    /// Each key's versions, oldest first.
    items: HashMap<K, Vec<(Ts, V)>>,
    /// Snapshots below this may have lost versions to collection.
    collected_below: Ts,
}

/// Versions a garbage collection removed, and the keys it looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub versions: usize,
    pub keys: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> VersionedStore<K, V> {
    pub fn new(delta: Ts) -> Self {
        VersionedStore {
            clock: 0,
            delta: delta.max(1),
            tag: 0,
            items: HashMap::new(),
            collected_below: 0,
        }
    }

    /// A store whose native puts carry `tag` (below [`TAG_SPAN`]) in their
    /// timestamps' low bits; `delta` must be a multiple of `TAG_SPAN`.
    pub fn tagged(delta: Ts, tag: Ts) -> Self {
        assert!(tag < TAG_SPAN && delta.is_multiple_of(TAG_SPAN) && delta > 0);
        VersionedStore {
            tag,
            ..Self::new(delta)
        }
    }

    pub fn clock(&self) -> Ts {
        self.clock
    }

    /// A native get: the latest version, whatever its timestamp.
    pub fn get(&self, key: &K) -> Option<(V, Ts)> {
        let (ts, v) = self.items.get(key)?.last()?;
        Some((v.clone(), *ts))
    }

    /// A native put: stamped with the clock advanced by delta. Returns its
    /// timestamp.
    pub fn put(&mut self, key: K, val: V) -> Ts {
        self.clock = if self.tag == 0 {
            self.clock + self.delta
        } else {
            // Above the clock whatever its low bits, then tagged.
            (self.clock & !(TAG_SPAN - 1)) + self.delta + self.tag
        };
        self.insert(key, self.clock, val);
        self.clock
    }

    /// The temporal fence: no later native put here is stamped at or
    /// below `ts`.
    pub fn sync(&mut self, ts: Ts) {
        self.clock = self.clock.max(ts);
    }

    /// The latest version strictly before `ts`.
    pub fn version_before(&self, key: &K, ts: Ts) -> Option<(V, Ts)> {
        let versions = self.items.get(key)?;
        let i = versions.partition_point(|(t, _)| *t < ts);
        let (t, v) = versions.get(i.checked_sub(1)?)?;
        Some((v.clone(), *t))
    }

    /// Whether a snapshot at `ts` is still whole here: no collection ran
    /// past it (a transaction that outlived its snapshot's lifetime).
    pub fn snapshot_kept(&self, ts: Ts) -> bool {
        ts >= self.collected_below
    }

    /// A transactional get at snapshot `ts`: fences the clock at `ts`, then
    /// reads the latest version before it.
    pub fn tx_get(&mut self, key: &K, ts: Ts) -> Option<(V, Ts)> {
        self.sync(ts);
        self.version_before(key, ts)
    }

    /// The conflict test against native puts at commit timestamp `ts`:
    /// fences the clock at `ts` (so the set of versions before it is
    /// sealed), then [`VersionedStore::unchanged_before`].
    pub fn tx_check_conflict<'a>(
        &mut self,
        items: impl IntoIterator<Item = (&'a K, Ts)>,
        ts: Ts,
    ) -> bool
    where
        K: 'a,
    {
        self.sync(ts);
        self.unchanged_before(items, ts)
    }

    /// Whether every item's latest version before `ts` is no newer than
    /// the timestamp the transaction knew it by (`items`: key and
    /// timestamp). False: some put wrote it since.
    pub fn unchanged_before<'a>(&self, items: impl IntoIterator<Item = (&'a K, Ts)>, ts: Ts) -> bool
    where
        K: 'a,
    {
        items.into_iter().all(|(key, known)| {
            self.items.get(key).is_none_or(|versions| {
                let i = versions.partition_point(|(t, _)| *t < ts);
                i == 0 || versions[i - 1].0 <= known
            })
        })
    }

    /// A transaction's write-back: its values stamped with its commit
    /// timestamp `ts` (in timestamp order among the versions already
    /// there: a native put after the fence may precede it here).
    pub fn tx_put(&mut self, writes: impl IntoIterator<Item = (K, V)>, ts: Ts) {
        for (key, val) in writes {
            self.insert(key, ts, val);
        }
    }

    fn insert(&mut self, key: K, ts: Ts, val: V) {
        let versions = self.items.entry(key).or_default();
        let i = versions.partition_point(|(t, _)| *t <= ts);
        if i > 0 && versions[i - 1].0 == ts {
            // The same write again (a replayed write-back): idempotent.
            versions[i - 1].1 = val;
        } else {
            versions.insert(i, (ts, val));
        }
    }

    /// Drops the versions no snapshot at or after `oldest` can read: of
    /// each key, every version older than the newest one before `oldest`.
    pub fn collect(&mut self, oldest: Ts) -> Collected {
        self.collected_below = self.collected_below.max(oldest);
        let mut c = Collected::default();
        for versions in self.items.values_mut() {
            c.keys += 1;
            let visible = versions.partition_point(|(t, _)| *t < oldest);
            if visible > 1 {
                versions.drain(..visible - 1);
                c.versions += visible - 1;
            }
        }
        c
    }

    /// Every item's latest version.
    pub fn latest(&self) -> impl Iterator<Item = (&K, Ts, &V)> {
        self.items
            .iter()
            .filter_map(|(k, vs)| vs.last().map(|(t, v)| (k, *t, v)))
    }

    /// How many versions `key` keeps.
    pub fn versions(&self, key: &K) -> usize {
        self.items.get(key).map_or(0, Vec::len)
    }
}
