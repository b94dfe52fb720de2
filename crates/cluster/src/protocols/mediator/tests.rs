//! Mediator's parts together: the scenarios of seed 003 Fig. 2, the
//! serializable variant's write-set fence, the oracle's conflict checks,
//! its shortcuts, Bloom false positives, and collection.

use super::*;

type Key = u64;
type Val = &'static str;

/// Keys below 100 on partition 0, the rest on partition 1.
fn route(k: &Key) -> usize {
    usize::from(*k >= 100)
}

struct World {
    db: Partitioned<Key, Val>,
    tso: Tso<Key>,
    log: Vec<(Ts, Vec<(Key, Val)>)>,
}

fn world() -> World {
    World {
        db: Partitioned::new(2, 1, route),
        tso: Tso::new(TsoConfig::default()),
        log: Vec::new(),
    }
}

impl World {
    /// Loads `key = val` as if by a transaction that committed long ago.
    fn load(&mut self, key: Key, val: Val) {
        let mut t = Txn::begin(&mut self.tso);
        t.put(key, val);
        t.put(key + 1_000_000, val);
        let c = ClientConfig::new(Level::Snapshot);
        match t.commit(&mut self.db, &mut self.tso, &c) {
            Ok(Committing::WriteBack(p)) => {
                p.write_back(&mut self.db, &mut self.tso, &mut self.log)
            }
            other => panic!("load: {other:?}"),
        }
    }

    fn native_get(&mut self, key: Key) -> Option<Val> {
        self.db.get(&key).map(|(v, _)| v)
    }
}

fn si() -> ClientConfig {
    ClientConfig::new(Level::Snapshot)
}

fn ser() -> ClientConfig {
    ClientConfig::new(Level::Serializable)
}

/// Fig. 2b: a native put to z between the transaction's start and its
/// commit is stamped inside that epoch (the start fenced the clock), so
/// the commit finds it and the transaction aborts.
#[test]
fn fig_2b_a_native_put_inside_the_epoch_aborts_the_transaction() {
    let mut w = world();
    w.load(7, "s0");
    let mut tx = Txn::begin(&mut w.tso);
    assert_eq!(tx.get(&mut w.db, &mut w.tso, &7, &si()), Ok(Some("s0")));
    let put_ts = w.db.put(7, "s1");
    assert!(put_ts > tx.start, "the start fenced the clock");
    tx.put(7, "s2");
    tx.put(8, "x");
    let r = tx.commit(&mut w.db, &mut w.tso, &si());
    assert!(matches!(r, Err(Abort::Native)), "{r:?}");
    assert_eq!(w.native_get(7), Some("s1"));
}

/// Fig. 2c: a native put after the commit's fence is stamped after the
/// commit timestamp: the transaction commits and the put stays the latest
/// version, visible to natives and to later snapshots.
#[test]
fn fig_2c_a_native_put_after_the_fence_is_ordered_after_the_transaction() {
    for fences in [true, false] {
        let mut w = world();
        w.load(7, "s0");
        let c = ClientConfig { fences, ..si() };
        let mut tx = Txn::begin(&mut w.tso);
        tx.get(&mut w.db, &mut w.tso, &7, &c).expect("get");
        tx.put(7, "s2");
        tx.put(8, "x");
        let Ok(Committing::WriteBack(p)) = tx.commit(&mut w.db, &mut w.tso, &c) else {
            panic!("the transaction should pass its checks");
        };
        let put_ts = w.db.put(7, "s1");
        let commit = p.commit;
        p.write_back(&mut w.db, &mut w.tso, &mut w.log);
        if fences {
            assert!(put_ts > commit);
            assert_eq!(w.native_get(7), Some("s1"), "the put is not lost");
            let mut later = Txn::begin(&mut w.tso);
            let seen = later.get(&mut w.db, &mut w.tso, &7, &c);
            assert_eq!(seen, Ok(Some("s1")));
        } else {
            // Fig. 2a: without the fence the put is stamped below the
            // commit timestamp and lost behind the transaction's version.
            assert!(put_ts < commit);
            assert_eq!(w.native_get(7), Some("s2"), "the put was lost");
        }
    }
}

/// The serializable variant checks its read set, which fences only the
/// partitions it read from. A native put that comes after the transaction
/// completed, to an item it wrote on a partition it read nothing from, is
/// stamped below the commit timestamp and lost unless the write set's
/// partitions are fenced too (the fence the source's Algorithm 4 omits).
#[test]
fn serializable_commits_fence_the_write_set_or_a_later_native_put_is_lost() {
    for fences in [true, false] {
        let mut w = world();
        w.load(1, "x0"); // partition 0
        w.load(150, "y0"); // partition 1
        let clock_before = w.db.part(&150).clock();
        let c = ClientConfig { fences, ..ser() };
        let mut tx = Txn::begin(&mut w.tso);
        assert_eq!(tx.get(&mut w.db, &mut w.tso, &1, &c), Ok(Some("x0")));
        tx.put(150, "y-tx");
        let Ok(Committing::WriteBack(p)) = tx.commit(&mut w.db, &mut w.tso, &c) else {
            panic!("no conflict to find");
        };
        let commit = p.commit;
        p.write_back(&mut w.db, &mut w.tso, &mut w.log);
        // The transaction completed; then a native put of the same item.
        let put_ts = w.db.put(150, "y-native");
        let got = w.native_get(150);
        if fences {
            assert!(put_ts > commit);
            assert_eq!(got, Some("y-native"));
        } else {
            assert_eq!(clock_before + 1, put_ts, "partition 1 was never fenced");
            assert_eq!(got, Some("y-tx"), "the later put is lost");
        }
    }
}

/// Snapshot isolation: two transactions that write the same item cannot
/// both commit (write-write conflict in the ring); write skew passes.
/// Serializability: a transaction whose read was overwritten by a later
/// committer aborts (read-write conflict), where SI lets it commit.
#[test]
fn the_oracle_checks_write_write_under_si_and_read_write_under_serializability() {
    let mut w = world();
    w.load(5, "a");
    let mut t1 = Txn::begin(&mut w.tso);
    let mut t2 = Txn::begin(&mut w.tso);
    for t in [&mut t1, &mut t2] {
        t.get(&mut w.db, &mut w.tso, &5, &si()).expect("get");
        t.put(5, "mine");
        t.put(6, "mine");
    }
    let Ok(Committing::WriteBack(p)) = t1.commit(&mut w.db, &mut w.tso, &si()) else {
        panic!("t1 commits");
    };
    p.write_back(&mut w.db, &mut w.tso, &mut w.log);
    let r = t2.commit(&mut w.db, &mut w.tso, &si());
    assert!(matches!(r, Err(Abort::Tso(Refusal::Conflict))), "{r:?}");

    for (config, aborts) in [(si(), false), (ser(), true)] {
        let mut w = world();
        w.load(10, "x");
        w.load(11, "y");
        // T1 reads x, T2 writes x and commits, T1 writes y.
        let mut t1 = Txn::begin(&mut w.tso);
        t1.get(&mut w.db, &mut w.tso, &10, &config).expect("get");
        let mut t2 = Txn::begin(&mut w.tso);
        t2.get(&mut w.db, &mut w.tso, &11, &config).expect("get");
        t2.put(10, "x2");
        let Ok(Committing::WriteBack(p)) = t2.commit(&mut w.db, &mut w.tso, &config) else {
            panic!("t2 commits");
        };
        p.write_back(&mut w.db, &mut w.tso, &mut w.log);
        t1.put(11, "y1");
        t1.put(12, "z1");
        let r = t1.commit(&mut w.db, &mut w.tso, &config);
        assert_eq!(r.is_err(), aborts, "{:?}: {r:?}", config.level);
    }
}

/// No-commit and local-commit: a read-only SI transaction and a single
/// put leave nothing in the ring; the put is stamped by its partition.
#[test]
fn read_only_and_single_put_transactions_take_the_shortcuts() {
    let mut w = world();
    w.load(3, "a");
    let ring = w.tso.ring_len();
    let mut ro = Txn::begin(&mut w.tso);
    ro.get(&mut w.db, &mut w.tso, &3, &si()).expect("get");
    assert!(matches!(
        ro.commit(&mut w.db, &mut w.tso, &si()),
        Ok(Committing::Done)
    ));
    let mut one = Txn::begin(&mut w.tso);
    one.put(3, "b");
    assert!(matches!(
        one.commit(&mut w.db, &mut w.tso, &ser()),
        Ok(Committing::Done)
    ));
    assert_eq!(w.tso.ring_len(), ring);
    let (v, ts) = w.db.get(&3).expect("written");
    assert_eq!(v, "b");
    assert_eq!(ts, w.db.part(&3).clock(), "a native put's timestamp");
    let next = w.tso.begin();
    assert_eq!(w.tso.oldest_active(), next, "the shortcuts ended theirs");
}

/// A Bloom filter's false positive refuses a commit no key conflicts with,
/// and is counted apart from real conflicts.
#[test]
fn bloom_false_positives_abort_spuriously_and_are_counted() {
    let mut w = World {
        tso: Tso::new(TsoConfig {
            bloom_bits: 64,
            bloom_hashes: 1,
            ..TsoConfig::default()
        }),
        ..world()
    };
    let mut t1 = Txn::begin(&mut w.tso);
    let mut refused = 0;
    let mut others: Vec<Txn<Key, Val>> = (0..64).map(|_| Txn::begin(&mut w.tso)).collect();
    for k in 0..40 {
        t1.put(k, "t1");
    }
    let Ok(Committing::WriteBack(p)) = t1.commit(&mut w.db, &mut w.tso, &si()) else {
        panic!("t1 commits");
    };
    p.write_back(&mut w.db, &mut w.tso, &mut w.log);
    for (i, mut t) in others.drain(..).enumerate() {
        let k = 1_000 + 2 * i as Key;
        t.put(k, "other");
        t.put(k + 1, "other");
        if let Err(e) = t.commit(&mut w.db, &mut w.tso, &si()) {
            assert_eq!(e, Abort::Tso(Refusal::FalsePositive));
            refused += 1;
        }
    }
    assert!(refused > 0, "40 keys in 64 bits: most probes hit");
    assert_eq!(w.tso.stats().false_positives, refused);
    assert_eq!(w.tso.stats().conflicts, 0);
}

/// A snapshot read finds the version its start can see, not one written
/// after; one whose expected version is still being written back retries,
/// then aborts.
#[test]
fn snapshots_read_the_version_before_their_start_or_abort_if_it_is_not_written_yet() {
    let mut w = world();
    w.load(4, "old");
    let mut reader = Txn::begin(&mut w.tso);
    let mut writer = Txn::begin(&mut w.tso);
    writer.put(4, "new");
    writer.put(5, "new");
    let Ok(Committing::WriteBack(p)) = writer.commit(&mut w.db, &mut w.tso, &si()) else {
        panic!("writer commits");
    };
    // Serialized, not written back: a snapshot after it must wait for it.
    let mut late = Txn::begin(&mut w.tso);
    assert_eq!(
        late.get(&mut w.db, &mut w.tso, &4, &si()),
        Err(Abort::Stale)
    );
    p.write_back(&mut w.db, &mut w.tso, &mut w.log);
    assert_eq!(
        reader.get(&mut w.db, &mut w.tso, &4, &si()),
        Ok(Some("old"))
    );
    let mut after = Txn::begin(&mut w.tso);
    assert_eq!(after.get(&mut w.db, &mut w.tso, &4, &si()), Ok(Some("new")));
    assert_eq!(w.log.last().map(|(_, ws)| ws.len()), Some(2), "logged");
}

/// Collection: the ring drops complete entries older than every active
/// start; the partitions keep, of each item, the newest version the oldest
/// snapshot can read and everything newer; a transaction given up on
/// (outliving its snapshot) is refused as too old.
#[test]
fn collection_is_bounded_by_the_oldest_active_snapshot() {
    let mut w = world();
    let old = Txn::<Key, Val>::begin(&mut w.tso);
    for v in ["a", "b", "c"] {
        w.load(9, v);
    }
    assert_eq!(w.db.part(&9).versions(&9), 3);
    assert_eq!(w.tso.collect(), 0, "the old transaction holds the ring");
    let oldest = w.tso.oldest_active();
    w.db.part(&9).collect(oldest);
    assert_eq!(
        w.db.part(&9).versions(&9),
        3,
        "all newer than the old snapshot"
    );
    assert_eq!(w.tso.expire(oldest + 1), 1);
    assert_eq!(w.tso.collect(), 3);
    let oldest = w.tso.oldest_active();
    let c = w.db.part(&9).collect(oldest);
    assert_eq!((c.versions, w.db.part(&9).versions(&9)), (2, 1));
    assert_eq!(w.native_get(9), Some("c"));
    let mut old = old;
    old.put(9, "late");
    old.put(10, "late");
    let r = old.commit(&mut w.db, &mut w.tso, &si());
    assert_eq!(r.err(), Some(Abort::Tso(Refusal::TooOld)));
    assert_eq!(w.tso.stats().too_old, 1);
}

/// The helper: a client that crashed after logging its write set (here,
/// halfway through its write-back, one partition written) is committed by
/// a replay of the log, both partitions written; one that crashed before
/// logging is aborted and its writes never appear; both stop holding the
/// ring's horizon, and the aborted one conflicts with nobody.
#[test]
fn the_helper_replays_logged_write_backs_and_aborts_the_rest() {
    let mut w = world();
    w.load(20, "a0");
    w.load(120, "b0");
    let mut logged = Txn::begin(&mut w.tso);
    logged.put(20, "a1");
    logged.put(120, "b1");
    let Ok(Committing::WriteBack(p)) = logged.commit(&mut w.db, &mut w.tso, &si()) else {
        panic!("passes its checks");
    };
    // Crash after the log append and the first partition's write.
    w.log.record(p.commit, &p.writes);
    w.db.part(&20).tx_put([(20, "a1")], p.commit);
    let logged_at = p.commit;
    drop(p);
    let mut lost = Txn::begin(&mut w.tso);
    lost.put(21, "c1");
    lost.put(121, "d1");
    let Ok(Committing::WriteBack(q)) = lost.commit(&mut w.db, &mut w.tso, &si()) else {
        panic!("passes its checks");
    };
    let lost_at = q.commit;
    drop(q); // crash before the log append
    assert_eq!(w.native_get(120), Some("b0"), "half written back");
    assert_eq!(w.tso.status(logged_at), Some(Status::Active));
    let horizon = w.tso.oldest_active();

    let r = helper::resolve(&mut w.tso, &w.log, &mut w.db, lost_at + 1);
    assert_eq!((r.committed, r.aborted), (vec![logged_at], vec![lost_at]));
    assert_eq!(
        (w.native_get(20), w.native_get(120)),
        (Some("a1"), Some("b1"))
    );
    assert_eq!((w.native_get(21), w.native_get(121)), (None, None));
    assert_eq!(w.tso.status(lost_at), Some(Status::Aborted));
    assert!(w.tso.oldest_active() > horizon, "the horizon moved on");
    // Nothing left to resolve; the aborted writes conflict with nobody.
    assert_eq!(
        helper::resolve(&mut w.tso, &w.log, &mut w.db, u64::MAX),
        helper::Resolved::default()
    );
    let mut again = Txn::begin(&mut w.tso);
    again.put(21, "c2");
    again.put(121, "d2");
    assert!(again.commit(&mut w.db, &mut w.tso, &si()).is_ok());
}
