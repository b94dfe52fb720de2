//! A group of replicas on a simulated network that can cut replicas off:
//! elections, replication at a quorum, failover, catch-up from a
//! snapshot, membership changes.

use std::collections::{BTreeMap, HashSet};

use super::*;

/// A state machine that keeps what it applied, in order.
#[derive(Default)]
struct Applied(Vec<(u64, Vec<u8>)>);

impl StateMachine for Applied {
    fn apply(&mut self, index: u64, data: &[u8]) {
        self.0.push((index, data.to_vec()));
    }

    fn image(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (index, data) in &self.0 {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        out
    }

    fn restore(&mut self, mut image: &[u8]) {
        self.0.clear();
        while image.len() >= 12 {
            let index = u64::from_le_bytes(image[..8].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(image[8..12].try_into().expect("4 bytes")) as usize;
            self.0.push((index, image[12..12 + len].to_vec()));
            image = &image[12 + len..];
        }
    }
}

impl Applied {
    fn data(&self) -> Vec<Vec<u8>> {
        self.0.iter().map(|(_, d)| d.clone()).collect()
    }
}

/// Replicas and the network between them.
struct Group {
    replicas: BTreeMap<u64, Replica<Applied>>,
    /// Replicas cut off from every other: their messages, both ways, are
    /// lost.
    cut: HashSet<u64>,
    /// Messages sent and not yet delivered.
    wire: Vec<Message>,
}

impl Group {
    fn new(ids: &[u64]) -> Group {
        let replicas = ids
            .iter()
            .map(|&id| {
                (
                    id,
                    Replica::new(id, ids, Applied::default()).expect("replica"),
                )
            })
            .collect();
        Group {
            replicas,
            cut: HashSet::new(),
            wire: Vec::new(),
        }
    }

    /// Replicas keeping their raft state under `root` (one directory each).
    fn on_disk(ids: &[u64], root: &std::path::Path) -> Group {
        let mut g = Group::new(&[]);
        for &id in ids {
            g.replicas.insert(id, open(root, id, ids));
        }
        g
    }

    /// Delivers what is on the wire, and whatever that makes the replicas
    /// send, until nothing is left.
    fn settle(&mut self) {
        for _ in 0..1000 {
            for r in self.replicas.values_mut() {
                r.ready(&mut self.wire).expect("ready");
            }
            if self.wire.is_empty() {
                return;
            }
            for m in std::mem::take(&mut self.wire) {
                if self.cut.contains(&m.from) || self.cut.contains(&m.to) {
                    continue;
                }
                if let Some(r) = self.replicas.get_mut(&m.to) {
                    // A message from a term gone by is refused: raft says.
                    let _ = r.step(m);
                }
            }
        }
        panic!("the group never settled");
    }

    /// `n` ticks of every replica's clock, each followed by a settle.
    fn ticks(&mut self, n: usize) {
        for _ in 0..n {
            for r in self.replicas.values_mut() {
                r.tick();
            }
            self.settle();
        }
    }

    /// Ticks until one replica among those not cut off leads, and returns
    /// it.
    fn leader(&mut self) -> u64 {
        for _ in 0..200 {
            self.ticks(1);
            let leaders: Vec<u64> = self
                .replicas
                .values()
                .filter(|r| !self.cut.contains(&r.id()) && r.status().role == Role::Leader)
                .map(|r| r.id())
                .collect();
            if leaders.len() == 1 {
                return leaders[0];
            }
        }
        panic!("no leader elected");
    }

    fn replica(&mut self, id: u64) -> &mut Replica<Applied> {
        self.replicas.get_mut(&id).expect("replica")
    }

    fn applied(&self, id: u64) -> Vec<Vec<u8>> {
        self.replicas[&id].machine().data()
    }
}

/// Replica `id` opened on its directory under `root`, with a machine that
/// starts empty (it gets the image the replica kept).
fn open(root: &std::path::Path, id: u64, voters: &[u64]) -> Replica<Applied> {
    Replica::open(&root.join(format!("r{id}")), id, voters, Applied::default()).expect("replica")
}

fn data(i: u32) -> Vec<u8> {
    format!("entry {i}").into_bytes()
}

#[test]
fn one_leader_is_elected_and_entries_apply_in_one_order_everywhere() {
    let mut g = Group::new(&[1, 2, 3]);
    let leader = g.leader();
    let follower = (1..=3).find(|&i| i != leader).expect("a follower");
    let refused = g.replica(follower).propose(data(0));
    assert_eq!(
        refused,
        Err(ReplicationError::NotLeader {
            id: follower,
            leader: Some(leader)
        })
    );
    for i in 0..20 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    let expected: Vec<Vec<u8>> = (0..20).map(data).collect();
    for id in 1..=3 {
        assert_eq!(g.applied(id), expected, "replica {id}");
        let s = g.replicas[&id].status();
        assert_eq!((s.leader, s.commit), (Some(leader), s.applied));
    }
    let s = g.replicas[&leader].status();
    assert_eq!(s.lag.len(), 2);
    assert!(s.lag.iter().all(|&(_, behind)| behind == 0), "{s:?}");
}

#[test]
fn an_isolated_leader_is_replaced_and_what_it_alone_holds_is_dropped() {
    let mut g = Group::new(&[1, 2, 3]);
    let old = g.leader();
    g.replica(old).propose(data(1)).expect("proposed");
    g.settle();
    // Cut off, it still takes a proposal: no quorum ever has it.
    g.cut.insert(old);
    g.replica(old)
        .propose(data(2))
        .expect("taken, never committed");
    g.settle();
    let new = g.leader();
    assert_ne!(new, old);
    g.replica(new).propose(data(3)).expect("proposed");
    g.settle();
    // The old leader steps down once it no longer hears a quorum.
    g.ticks(3 * ELECTION_TICKS);
    assert_ne!(g.replicas[&old].status().role, Role::Leader);
    g.cut.clear();
    g.ticks(3 * HEARTBEAT_TICKS);
    for id in 1..=3 {
        assert_eq!(g.applied(id), vec![data(1), data(3)], "replica {id}");
    }
}

#[test]
fn a_follower_behind_the_compacted_log_catches_up_from_the_image() {
    let mut g = Group::new(&[1, 2, 3]);
    let leader = g.leader();
    let behind = (1..=3).find(|&i| i != leader).expect("a follower");
    g.cut.insert(behind);
    for i in 0..30 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    g.replica(leader).compact().expect("compacted");
    assert!(g.replicas[&leader].first_index() > 20);
    let lag = g.replicas[&leader].status().lag;
    assert!(
        lag.iter().any(|&(id, n)| id == behind && n >= 30),
        "{lag:?}"
    );
    g.cut.clear();
    g.ticks(3 * HEARTBEAT_TICKS);
    let expected: Vec<Vec<u8>> = (0..30).map(data).collect();
    assert_eq!(g.applied(behind), expected);
    // And it follows from there on.
    g.replica(leader).propose(data(30)).expect("proposed");
    g.settle();
    assert_eq!(g.applied(behind).last(), Some(&data(30)));
}

#[test]
fn a_replica_is_added_caught_up_and_another_removed() {
    let mut g = Group::new(&[1, 2, 3]);
    let leader = g.leader();
    for i in 0..5 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    g.replicas.insert(
        4,
        Replica::new(4, &[], Applied::default()).expect("replica"),
    );
    g.replica(leader).propose_add(4).expect("added");
    g.ticks(3 * HEARTBEAT_TICKS);
    assert_eq!(g.replicas[&leader].status().voters, vec![1, 2, 3, 4]);
    let expected: Vec<Vec<u8>> = (0..5).map(data).collect();
    assert_eq!(g.applied(4), expected);
    // A replica other than the leader leaves; the group goes on with three.
    let gone = (1..=3).find(|&i| i != leader).expect("a follower");
    g.replica(leader).propose_remove(gone).expect("removed");
    g.ticks(3 * HEARTBEAT_TICKS);
    g.replicas.remove(&gone);
    let mut rest: Vec<u64> = vec![1, 2, 3, 4];
    rest.retain(|&i| i != gone);
    assert_eq!(g.replicas[&leader].status().voters, rest);
    g.replica(leader).propose(data(5)).expect("proposed");
    g.settle();
    for id in rest {
        assert_eq!(g.applied(id).last(), Some(&data(5)), "replica {id}");
    }
}

/// Seeded runs of random proposals, cuts and heals, compactions and
/// ticks: replicas never apply different entries at one position (what
/// each applied is a prefix of what another did), and once the network
/// heals they all apply the same, including a new proposal (proposed
/// again if a change of leader lost it).
#[test]
fn random_cuts_never_make_replicas_disagree() {
    use rand::{Rng, SeedableRng};
    for seed in 0..60u64 {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut g = Group::new(&[1, 2, 3, 4, 5]);
        let mut next = 0u32;
        for _ in 0..150 {
            match rng.gen_range(0..10) {
                0 if g.cut.len() < 2 => {
                    g.cut.insert(rng.gen_range(1..=5));
                }
                1 => g.cut.clear(),
                2 => {
                    let id = rng.gen_range(1..=5);
                    g.replica(id).compact().expect("compacted");
                }
                3..=6 => {
                    let leaders: Vec<u64> = g
                        .replicas
                        .values()
                        .filter(|r| r.status().role == Role::Leader)
                        .map(|r| r.id())
                        .collect();
                    for l in leaders {
                        if g.replica(l).propose(data(next)).is_ok() {
                            next += 1;
                        }
                    }
                    g.settle();
                }
                _ => g.ticks(1),
            }
            let applied: Vec<Vec<Vec<u8>>> = (1..=5).map(|id| g.applied(id)).collect();
            for a in &applied {
                for b in &applied {
                    let n = a.len().min(b.len());
                    assert_eq!(a[..n], b[..n], "seed {seed}: replicas disagree");
                }
            }
        }
        g.cut.clear();
        // A proposal a leader took can be lost to a change of leader
        // before it commits: the client proposes again until it applies.
        let last = data(u32::MAX);
        for _ in 0..10 {
            let leader = g.leader();
            g.replica(leader).propose(last.clone()).expect("proposed");
            for _ in 0..3 * ELECTION_TICKS {
                if (1..=5).all(|id| g.applied(id).contains(&last)) {
                    break;
                }
                g.ticks(1);
            }
            if (1..=5).all(|id| g.applied(id).contains(&last)) {
                break;
            }
        }
        let first = g.applied(1);
        assert!(first.contains(&last), "seed {seed}");
        for id in 2..=5 {
            assert_eq!(g.applied(id), first, "seed {seed}: replica {id}");
        }
    }
}

/// Replicas on disk restarted (all of them, as after a power cut) come
/// back with their terms and logs: what was committed stays applied (the
/// compacted prefix from the image kept), and the group goes on.
#[test]
fn replicas_restarted_from_their_directories_keep_what_was_committed() {
    let root = tempfile::tempdir().expect("tempdir");
    let ids = [1, 2, 3];
    let mut g = Group::on_disk(&ids, root.path());
    let leader = g.leader();
    for i in 0..10 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    for id in ids {
        g.replica(id).compact().expect("compacted");
    }
    for i in 10..15 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    let terms: Vec<u64> = ids.iter().map(|id| g.replicas[id].status().term).collect();
    drop(g);
    let mut g = Group::on_disk(&ids, root.path());
    for (id, term) in ids.iter().zip(&terms) {
        assert_eq!(g.replicas[id].status().term, *term, "replica {id}'s term");
        assert_eq!(g.applied(*id), (0..10).map(data).collect::<Vec<_>>());
    }
    let leader = g.leader();
    g.replica(leader).propose(data(15)).expect("proposed");
    g.settle();
    let expected: Vec<Vec<u8>> = (0..16).map(data).collect();
    for id in ids {
        assert_eq!(g.applied(id), expected, "replica {id}");
    }
}

/// A replica whose directory is lost leaves the group and a new one (a
/// new id, as raft requires of a replica that forgot its votes) joins and
/// is caught up from the image; a torn last record of the log file is cut
/// off at open.
#[test]
fn a_lost_replica_is_replaced_and_the_new_one_caught_up_from_the_image() {
    let root = tempfile::tempdir().expect("tempdir");
    let ids = [1, 2, 3];
    let mut g = Group::on_disk(&ids, root.path());
    let leader = g.leader();
    for i in 0..20 {
        g.replica(leader).propose(data(i)).expect("proposed");
    }
    g.settle();
    g.replica(leader).compact().expect("compacted");
    let lost = (1..=3).find(|&i| i != leader).expect("a follower");
    g.replicas.remove(&lost);
    std::fs::remove_dir_all(root.path().join(format!("r{lost}"))).expect("wiped");
    g.replica(leader).propose_remove(lost).expect("removed");
    g.ticks(3 * HEARTBEAT_TICKS);
    g.replicas.insert(4, open(root.path(), 4, &[]));
    g.replica(leader).propose_add(4).expect("added");
    g.ticks(3 * HEARTBEAT_TICKS);
    let expected: Vec<Vec<u8>> = (0..20).map(data).collect();
    assert_eq!(g.applied(4), expected);
    // Torn: half of a record appended after the last whole one.
    let entries = root.path().join(format!("r{leader}")).join("entries");
    let mut bytes = std::fs::read(&entries).expect("entries");
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2]);
    std::fs::write(&entries, bytes).expect("torn");
    let voters = g.replicas[&leader].status().voters;
    drop(g);
    let mut g = Group::on_disk(&voters, root.path());
    let leader = g.leader();
    g.replica(leader).propose(data(20)).expect("proposed");
    g.settle();
    for id in voters {
        assert_eq!(g.applied(id).last(), Some(&data(20)), "replica {id}");
    }
}
