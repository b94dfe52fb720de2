//! Locks owned across subtransactions: a transaction (the *owner*) whose
//! statements run in subtransactions of their own (Salt's alkaline
//! subtransactions, Callas' chopped pieces) holds their locks past each
//! subtransaction's end, and releases them when its coordinator says
//! (`Release`), in stages, each lock once its release-order dependencies
//! allow. With `dependencies` on (Salt's saline release-order rules), an
//! access that observes a row another owner wrote and still holds takes a
//! read-after-write release dependency on it (seed 000 section 3.3;
//! `docs/salt.md`).
//!
//! The rules of a protocol that uses them keep an [`Owned`] and hand it
//! out through [`Rules::owned`]; the default hooks then release and answer
//! through it.

use rustc_hash::FxHashMap as HashMap;

use brine_core::{Access, LockNeed, LockTarget, TxnId};
use brine_lock::{LockClass, Mode, ReleaseOutcome};
use smallvec::SmallVec;

use super::{Partition, Rules, Stmt};
use crate::message::{ReleaseStage, Reply};

/// The owned locks at one partition.
#[derive(Default)]
pub struct Owned {
    /// Read-after-write release dependencies are taken (Salt's saline
    /// release order).
    dependencies: bool,
    /// The long-term locks of each owner here, with the position of the
    /// latest statement that took each.
    locks: HashMap<TxnId, Vec<OwnedLock>>,
    /// The owner of each holder its locks were forked to, and the other
    /// way round.
    forked: HashMap<TxnId, TxnId>,
    forks: HashMap<TxnId, SmallVec<[TxnId; 2]>>,
    /// Releases still held back by release-order dependencies, by owner.
    releases: HashMap<TxnId, Vec<PendingRelease>>,
    /// The owner that last wrote each row (the prototype's per-row
    /// pointer, seed 000 section 3.4.3). Stale entries (writer gone) are
    /// ignored and swept when the map grows.
    last_writer: HashMap<LockTarget, TxnId>,
    /// The size at which `last_writer` is next swept.
    sweep_at: usize,
}

impl Owned {
    /// `dependencies`: accesses take read-after-write release
    /// dependencies on the owners whose writes they observe.
    pub fn new(dependencies: bool) -> Owned {
        Owned {
            dependencies,
            ..Owned::default()
        }
    }

    /// The owner of a lock holder (itself, or the owner it was forked
    /// from).
    pub fn owner_of(&self, holder: TxnId) -> TxnId {
        self.forked.get(&holder).copied().unwrap_or(holder)
    }

    /// What `owner`'s subtransaction `sub` read and did not write, and
    /// keeps locked: keys and intervals of any index (Salt logs them with
    /// its context, `BaseContext::read`).
    pub fn reads_kept(&self, owner: TxnId, sub: TxnId) -> Vec<LockTarget> {
        let Some(held) = self.locks.get(&owner) else {
            return Vec::new();
        };
        let read = |l: &OwnedLock| {
            l.accesses[access_index(Access::Read)] || l.accesses[access_index(Access::RangeRead)]
        };
        held.iter()
            .filter(|l| l.sub == sub && read(l) && !l.accesses[access_index(Access::Write)])
            .map(|l| l.target.clone())
            .collect()
    }

    /// `holder`'s lock on `target` in the lock table (for `access`) is
    /// `owner`'s, as a lock forked from it at the first release stage:
    /// Salt's rows of an open BASE transaction locked again after a
    /// restart (written or read), under the id of
    /// a subtransaction of its previous run. They go with the owner's
    /// first release stage, as the earliest of its locks (held to its end,
    /// they would wait behind the release-order dependencies its
    /// roll-forward takes on the rows, which may in turn wait for them).
    pub fn adopt(&mut self, owner: TxnId, holder: TxnId, target: LockTarget, access: Access) {
        if self.forked.insert(holder, owner).is_none() {
            self.forks.entry(owner).or_default().push(holder);
        }
        let mut accesses = [false; 3];
        accesses[access_index(access)] = true;
        self.locks.entry(owner).or_default().push(OwnedLock {
            target,
            holder,
            sub: holder,
            accesses,
            seq: 0,
            dirty_at: None,
        });
    }
}

/// Which of an owner's locks one stage of its release lets go.
#[derive(Clone, Copy)]
enum Which {
    /// Those taken by statements at positions `<= upto`.
    Upto(u32),
    /// Every one.
    All,
    /// Those forked to a holder of their own (`LockTable::fork_hold`),
    /// whatever their stage.
    Forked,
}

/// A long-term lock of an owner.
struct OwnedLock {
    target: LockTarget,
    /// Who holds it in the lock table: the BASE transaction, or, once a
    /// later subtransaction accessed the row again, the subtransaction
    /// that took it (`LockTable::fork_hold`), so each keeps its own
    /// release stage.
    holder: TxnId,
    /// The alkaline subtransaction whose statement took it.
    sub: TxnId,
    accesses: [bool; 3],
    /// The latest statement of its subtransaction that needed it: the
    /// write-after-read rule holds the lock until every dirty read before
    /// that statement is released. A forked lock's position is at most
    /// the forking statement's minus one (a re-run subtransaction reuses
    /// the positions of the attempt that rolled back).
    seq: u32,
    /// The first statement whose access to it was a dirty read (it carries
    /// a read-after-write dependency): the release stage of that statement
    /// waits for the dependency even when a later statement of the same
    /// subtransaction moved the lock itself to a later stage.
    dirty_at: Option<u32>,
}

fn access_index(a: Access) -> usize {
    match a {
        Access::Read => 0,
        Access::RangeRead => 1,
        Access::Write => 2,
    }
}

const ACCESSES: [Access; 3] = [Access::Read, Access::RangeRead, Access::Write];

/// A `Release` waiting for some of its locks.
struct PendingRelease {
    /// `None`: a whole release (`release_all`), answered on `Released`.
    /// `Some`: a partial one, answered once no release-order dependency
    /// holds back any of these targets (those whose release was held back,
    /// and those of the stage's dirty reads that a later statement keeps).
    targets: Option<Vec<(TxnId, LockTarget)>>,
    /// The stages of the same `Release` still to run once this one is
    /// done; answered after the last.
    rest: std::vec::IntoIter<ReleaseStage>,
    reply: Reply<()>,
    /// Answered once the log is durable (`answer_release`).
    after_log: bool,
}

/// The rules' owned locks (only asked for of rules that keep them).
fn own<R: Rules>(rules: &mut R) -> &mut Owned {
    rules.owned().expect("rules that keep owned locks")
}

/// [`own`], to read.
fn own_ref<R: Rules>(rules: &R) -> &Owned {
    rules.owned_ref().expect("rules that keep owned locks")
}

impl<R: Rules> Partition<R> {
    /// Salt: runs the stages of a `Release` of BASE transaction `owner`, in
    /// order. A stage releases the locks
    /// taken by statements up to its position (all of them, and the end of
    /// the transaction here, with `None`), each once its release-order
    /// dependencies allow; the next stage starts when all of them went,
    /// and the reply goes after the last.
    pub fn release_owned(
        &mut self,
        owner: TxnId,
        mut stages: std::vec::IntoIter<ReleaseStage>,
        reply: Reply<()>,
    ) {
        let Some(stage) = stages.next() else {
            reply.send(());
            return;
        };
        let which = match stage {
            ReleaseStage::Upto(upto) => Some(Which::Upto(upto)),
            ReleaseStage::AllKept => Some(Which::All),
            ReleaseStage::End => None,
        };
        if let Some(which) = which {
            self.locks.begin_staged_release(owner, &mut self.wakeups);
            for alias in own_ref(&self.rules).forks.get(&owner).into_iter().flatten() {
                self.locks.begin_staged_release(*alias, &mut self.wakeups);
            }
            self.release_stage(owner, which, stages, reply);
            return;
        }
        if self
            .rules
            .owned_ref()
            .expect("rules that keep owned locks")
            .locks
            .get(&owner)
            .is_some_and(|held| held.iter().any(|l| l.holder != owner))
        {
            // Forked locks are not the owner's to release all at once:
            // they go in a stage of their own, then the end.
            let rest: Vec<_> = std::iter::once(ReleaseStage::End).chain(stages).collect();
            self.release_stage(owner, Which::Forked, rest.into_iter(), reply);
            return;
        }
        let after_log = self.wal.as_mut().is_some_and(|wal| wal.context_end(owner));
        let owned = own(&mut self.rules);
        owned.locks.remove(&owner);
        for alias in owned.forks.remove(&owner).unwrap_or_default() {
            owned.forked.remove(&alias);
            let _ = self.locks.release_all(alias, &mut self.wakeups);
        }
        R::forget(self, owner);
        self.count_holds(owner);
        match self.locks.release_all(owner, &mut self.wakeups) {
            ReleaseOutcome::Done => self.answer_release(reply, after_log),
            ReleaseOutcome::Deferred => own(&mut self.rules)
                .releases
                .entry(owner)
                .or_default()
                .push(PendingRelease {
                    targets: None,
                    rest: Vec::new().into_iter(),
                    reply,
                    after_log,
                }),
        }
        // Partial releases still waiting are answered once their
        // targets went (now, or with the whole release).
        self.answer_releases(owner, false);
        self.process_wakeups();
    }

    /// One stage of `release_owned`: the locks of `owner` that `which`
    /// says, each now or once its dependencies allow; the rest of the
    /// stages run once all of them went.
    fn release_stage(
        &mut self,
        owner: TxnId,
        which: Which,
        stages: std::vec::IntoIter<ReleaseStage>,
        reply: Reply<()>,
    ) {
        let mut held_back = Vec::new();
        if let Some(held) = own(&mut self.rules).locks.get_mut(&owner) {
            let (now, later): (Vec<_>, Vec<_>) =
                std::mem::take(held).into_iter().partition(|l| match which {
                    Which::Upto(upto) => l.seq <= upto,
                    Which::All => true,
                    Which::Forked => l.holder != owner,
                });
            // A dirty read of this stage on a row a later statement of the
            // same subtransaction needed again: the lock stays for its own
            // stage, but this stage (and so every write after the read)
            // waits for the dependency.
            if let Which::Upto(upto) = which {
                for l in &later {
                    if l.dirty_at.is_some_and(|d| d <= upto)
                        && self.locks.release_blocked(l.holder, &l.target)
                    {
                        held_back.push((l.holder, l.target.clone()));
                    }
                }
            }
            *held = later;
            for l in now {
                for (i, a) in ACCESSES.iter().enumerate() {
                    if l.accesses[i] {
                        self.locks
                            .release(l.holder, &l.target, *a, &mut self.wakeups);
                    }
                }
                if self.locks.holds(l.holder, &l.target) {
                    held_back.push((l.holder, l.target));
                }
            }
        }
        if held_back.is_empty() {
            self.process_wakeups();
            self.release_owned(owner, stages, reply);
            return;
        }
        own(&mut self.rules)
            .releases
            .entry(owner)
            .or_default()
            .push(PendingRelease {
                targets: Some(held_back),
                rest: stages,
                reply,
                after_log: false,
            });
        self.process_wakeups();
    }

    /// Answers a release; `after_log`: it logged the owner's end here
    /// (`context_end`), and is answered once that record is durable: once
    /// its coordinator heard the end arrived it never sends it again, so a
    /// restart must not find the context open and lock its rows again.
    fn answer_release(&self, reply: Reply<()>, after_log: bool) {
        match &self.wal {
            Some(wal) if after_log => wal.after_durable(reply, ()),
            _ => reply.send(()),
        }
    }

    /// Answers the partial releases of `owner` whose held-back targets are
    /// all released now (`whole`: and its whole release, which completed).
    pub fn answer_releases(&mut self, owner: TxnId, whole: bool) {
        let Some(pending) = own(&mut self.rules).releases.remove(&owner) else {
            return;
        };
        let mut kept = Vec::new();
        let mut next = Vec::new();
        for r in pending {
            let done = match &r.targets {
                Some(ts) => ts
                    .iter()
                    .all(|(h, t)| !self.locks.holds(*h, t) || !self.locks.release_blocked(*h, t)),
                None => whole,
            };
            if !done {
                kept.push(r);
            } else if r.rest.as_slice().is_empty() {
                self.answer_release(r.reply, r.after_log);
            } else {
                next.push((r.rest, r.reply));
            }
        }
        if !kept.is_empty() {
            own(&mut self.rules).releases.insert(owner, kept);
        }
        // The next stages of the same releases, now that these went.
        for (rest, reply) in next {
            self.release_owned(owner, rest, reply);
        }
    }

    /// After a subtransaction's statement's lock on `target` was granted:
    /// remembers it as long-term (with the statement's position) and, with
    /// dependencies on, if other owners hold saline writes on the row,
    /// records the read-after-write release dependencies. Returns whether
    /// it did (a dirty access, whose lock must then outlive the statement).
    pub fn owned_granted(&mut self, stmt: &Stmt, need: &LockNeed, short: bool) -> bool {
        let Some(b) = stmt.sub else {
            return false;
        };
        let release_order = own_ref(&self.rules).dependencies;
        let mut dirty = false;
        // The owner's own lock on the row, if it has one.
        let mut pos = own_ref(&self.rules).locks.get(&b.owner).and_then(|held| {
            held.iter()
                .position(|l| l.holder == b.owner && l.target == need.target)
        });
        // A later access of the same subtransaction adds no dependency:
        // its alkaline lock kept every other BASE transaction off the row
        // since the first.
        let already = pos.is_some_and(|i| own_ref(&self.rules).locks[&b.owner][i].sub == stmt.txn);
        // Read-after-write is the rule (seed 000 section 3.3): only an
        // access that observes the row's value (a read, a range read, or a
        // write that reads a column: `SET v = v + 1`, a filter on a
        // column) takes a dependency. A blind overwrite of a row another
        // BASE transaction wrote sees nothing of it; a dependency there
        // (write-after-write) is no rule of the sources'.
        let observes = need.access != Access::Write || !stmt.plan.access().columns_read.is_empty();
        let mut writers: SmallVec<[(TxnId, LockTarget); 4]> = SmallVec::new();
        if release_order && !already && observes {
            // Every other BASE transaction holding a saline write on the
            // row (on a row inside the range, for a range read: it
            // observed those rows as a point read of each would); not the
            // locks forked from this one's own earlier operations...
            let forked = &own_ref(&self.rules).forked;
            self.locks.for_each_point_holder_with(
                &need.target,
                Mode::new(LockClass::Saline, Access::Write),
                b.owner,
                |t, at| {
                    if forked.get(&t) != Some(&b.owner) {
                        writers.push((t, at))
                    }
                },
            );
            // ...or, per row, only the last one, when it still holds its
            // write (the prototype's per-row pointer, seed 000 section
            // 3.4.3): it depends in turn on the writer before it (whose
            // value it read), so release order follows along the chain,
            // and a row written by many concurrent BASE transactions (every
            // one of them holding its saline write) costs one dependency,
            // not one per holder.
            let last_of = |at: &LockTarget| own_ref(&self.rules).last_writer.get(at).copied();
            let lasts: SmallVec<[(TxnId, LockTarget); 4]> = writers
                .iter()
                .filter(|(w, at)| last_of(at) == Some(*w))
                .cloned()
                .collect();
            writers
                .retain(|(w, at)| last_of(at) == Some(*w) || !lasts.iter().any(|(_, l)| l == at));
        }
        // A later subtransaction's access to a row an earlier one locked,
        // kept past the statement: the earlier lock goes on at its own
        // release stage under a holder of its own, and this access takes a
        // lock of its own, with its own dependencies (the rules are per
        // operation: one lock for both would hold the earlier operation's
        // release back behind the dirty reads in between, on which other
        // BASE transactions that read the row meanwhile may depend).
        if let Some(i) = pos.filter(|_| !already && (!short || !writers.is_empty())) {
            let alias = own_ref(&self.rules).locks[&b.owner][i].sub;
            if self.locks.fork_hold(b.owner, &need.target, alias) {
                let owned = own(&mut self.rules);
                let l = &mut owned.locks.get_mut(&b.owner).expect("held")[i];
                l.holder = alias;
                // Its stage comes before this statement's. Program order is
                // time order, except for a subtransaction run again after a
                // rollback: its statements take the positions of the
                // attempt that rolled back, whose locks came earlier.
                l.seq = l.seq.min(b.seq.saturating_sub(1));
                if owned.forked.insert(alias, b.owner).is_none() {
                    owned.forks.entry(b.owner).or_default().push(alias);
                }
                if let Some(w) = owned.last_writer.get_mut(&need.target) {
                    if *w == b.owner {
                        *w = alias;
                    }
                }
                pos = None;
            }
        }
        // A bound error leaves the dependency out; the cap is far above
        // what a transaction reads.
        writers.retain(|(w, at)| {
            self.locks
                .add_release_dependency(b.owner, Some(&need.target), *w, Some(at))
                .is_ok()
        });
        if !writers.is_empty() {
            dirty = true;
            let mut on: SmallVec<[TxnId; 4]> = writers.iter().map(|(w, _)| *w).collect();
            on.sort_unstable();
            on.dedup();
            // The new edges may close a cycle that no new wait closed.
            self.locks
                .detect_from_waiters(&need.target, &on, &mut self.wakeups);
        }
        if release_order && need.access == Access::Write {
            self.note_last_writer(&need.target, b.owner);
        }
        if short && !dirty {
            return false;
        }
        let held = own(&mut self.rules).locks.entry(b.owner).or_default();
        match pos.map(|i| &mut held[i]) {
            Some(l) => {
                l.accesses[access_index(need.access)] = true;
                l.seq = l.seq.max(b.seq);
                if dirty && l.dirty_at.is_none() {
                    l.dirty_at = Some(b.seq);
                }
            }
            None => {
                let mut accesses = [false; 3];
                accesses[access_index(need.access)] = true;
                held.push(OwnedLock {
                    target: need.target.clone(),
                    holder: b.owner,
                    sub: stmt.txn,
                    accesses,
                    seq: b.seq,
                    dirty_at: dirty.then_some(b.seq),
                });
            }
        }
        dirty
    }

    /// `owner` is now the last owner to write `target`. Sweeps the
    /// pointers of writers that no longer hold their row when the map
    /// has doubled since the last sweep (and holds at least
    /// `SWEEP_MIN`): the map stays about twice the rows written under
    /// held locks, small and in cache, where a fixed bound let it grow
    /// through every resize to the bound, each into fresh pages.
    fn note_last_writer(&mut self, target: &LockTarget, owner: TxnId) {
        const SWEEP_MIN: usize = 1 << 12;
        let owned = own(&mut self.rules);
        match owned.last_writer.get_mut(target) {
            Some(w) => *w = owner,
            None => {
                if owned.last_writer.len() >= owned.sweep_at.max(SWEEP_MIN) {
                    let locks = &self.locks;
                    owned.last_writer.retain(|t, w| locks.holds(*w, t));
                    owned.sweep_at = 2 * owned.last_writer.len();
                }
                owned.last_writer.insert(target.clone(), owner);
            }
        }
    }
}
