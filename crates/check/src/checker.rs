//! The checker: builds Adya's direct serialization graph (DSG) over the
//! committed transactions of a history and searches it for anomalies.
//!
//! ```text
//!  records ──► index versions ──► which txns count as committed
//!                  │                 (committed + unknown proven committed)
//!                  ▼
//!        item edges (ww, wr, rw) ── G1a, G1b, garbage reads, forks, bad prevs
//!                  ▼
//!        predicate edges for range reads (pred-wr, pred-rw; only when
//!        unambiguous) ── missed rows
//!                  ▼
//!        [salt] drop BASE-BASE edges, add chain-wr edges
//!                  ▼
//!        sessions (records with `cl`) ── session-order
//!                  ▼
//!        Tarjan SCCs ─► per component: G0 (ww), G1c (ww+wr), G-single
//!                       (one rw), G-nonadjacent (no two rw in a row),
//!                       else G2; each as a short cycle (BFS)
//! ```
//!
//! Guarantees: every edge is implied by the history (the version order is
//! read from `prev` links, never guessed), so every reported cycle is a
//! real anomaly; a component yields one witness of its most severe class
//! (G0 and G1c sub-components each yield their own). A history whose
//! header orders versions by timestamp gets its prevs derived first
//! ([`crate::check_history`], [`crate::timestamps`]). See docs/checker.md for the
//! rules, the predicate rule, snapshot isolation, sessions and the Salt
//! level.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use brine_core::access::key_in_range;
use brine_core::Key;
use smallvec::SmallVec;

use crate::chains::{ChainGraph, ChainRead, Link, CHAIN_EDGES_MAX, CHAIN_LINKS_MAX};
use crate::cycles::{simple_nonadjacent, Graph};
use crate::history::{Op, Outcome, TxnClass, TxnRecord, WriteKind, INITIAL_VERSION};
use crate::report::{
    Anomaly, AnomalyClass, ChainHop, EdgeInfo, EdgeKind, Level, Report, Stats, TxnInfo,
};

/// Bounds on the work spent looking for witnesses in one cyclic component.
const GSINGLE_TRIES_MAX: usize = 256;
const G2_STARTS_MAX: usize = 16;
/// A `prev` chain longer than this is treated as corrupt (it can only be a
/// loop of `prev` links in a malformed file).
const PREV_WALK_MAX: usize = 1 << 20;
/// The most versions of one run of commuting increments the checker
/// relates to a read or an overwrite (see `Checker::run_above`); runs are
/// walked from the version, so only runs longer than this are cut, and the
/// report says so.
const RUN_WALK_MAX: usize = 1 << 12;

mod sessions;

type KeyId = u32;
type TxnIdx = u32;

/// What the checker knows about one version id.
#[derive(Clone, Debug)]
struct VersionInfo {
    txn: TxnIdx,
    op: u32,
    key: KeyId,
    prev: u64,
    sub: Option<u32>,
    /// A blind increment: it commutes with the increments next to it in
    /// its key's version order.
    add: bool,
}

/// An edge of the graph, with what causes it.
#[derive(Clone, Debug)]
struct Edge {
    from: TxnIdx,
    to: TxnIdx,
    kind: EdgeKind,
    key: KeyId,
    v1: u64,
    v2: u64,
    /// For chain-wr edges, the link of its witness chain in
    /// `Checker::chain_links`.
    chain: Option<u32>,
}

/// Per version of a chain, its key in one secondary index (see
/// `Checker::index_keys`).
type IndexKeys = Vec<Option<Option<Key>>>;
/// A key's installed chain with its index keys.
type ChainIndexKeys = (Vec<u64>, IndexKeys);
/// Installed children of one version (more than one is a fork).
type Kids = SmallVec<[u64; 1]>;
/// Index key -> the keys (rows) that ever had it.
type RangeIndex = BTreeMap<Key, SmallVec<[KeyId; 1]>>;

/// A key's installed chain when it holds increments and does not fork:
/// reads relate to runs of commuting increments through hop nodes instead
/// of one edge per increment. A reader of version `i` saw every increment
/// of its run below it and the run's base, and missed every version after
/// it up to the end of the run; with one edge per version that is
/// quadratic in a run's length (TPC-C's warehouse and district rows are
/// one run of increments for a whole history, and a 10 s history had 22
/// million edges). Hop `up[j]` is reached from the writer of version `j`
/// and from `up[j - 1]` when `j` is an increment, so it reaches forward
/// from every version of `[start[j], j]`; hop `down[j]` reaches the writer
/// of `j` and, when `j` is an increment, `down[j + 1]`, so it covers
/// `[j, end of the walk]`. A read is then one edge `up[i] -> reader`
/// (`wr`) and one `reader -> down[i + 1]` (`rw`), and the graph's
/// reachability between transactions is what the per-version edges gave.
/// Where the reader's own versions lie in the covered stretch (a
/// transaction that reads its key and then increments it), the stretch
/// up to its last own version gets plain edges, so no path leads from a
/// transaction back to itself through hops alone.
struct RunIndex {
    chain: Vec<u64>,
    add: Vec<bool>,
    /// `start[i]`: the base of the run `i` is in (`i` itself when `i` is no
    /// increment).
    start: Vec<u32>,
    /// `end[i]`: the last version a walk from `i` to what it missed
    /// reaches (the first non-increment after `i`, or the chain's end).
    end: Vec<u32>,
    up: Vec<u32>,
    down: Vec<u32>,
}

const NO_HOP: u32 = u32::MAX;

/// A key's installed versions with whether each matches a range read.
struct Track {
    chain: Vec<u64>,
    /// First and last versions that may not match (the states a read that
    /// did not see the row may have observed).
    first_candidate: Option<usize>,
    last_candidate: Option<usize>,
    /// Positions `j` where the match changes between `j - 1` and `j`
    /// (both known), ascending.
    changes: Vec<usize>,
}

impl Track {
    fn new(chain: Vec<u64>, member: Vec<Option<bool>>) -> Track {
        let first_candidate = member.iter().position(|m| *m != Some(true));
        let last_candidate = member.iter().rposition(|m| *m != Some(true));
        let changes = (1..member.len())
            .filter(|&j| matches!((member[j - 1], member[j]), (Some(a), Some(b)) if a != b))
            .collect();
        Track {
            chain,
            first_candidate,
            last_candidate,
            changes,
        }
    }
}

/// A read as the item rules see it: a point read or a row a range read saw.
struct ReadRef {
    op: u32,
    key: KeyId,
    version: u64,
}

struct Checker<'h> {
    txns: &'h [TxnRecord],
    level: Level,
    tables: HashMap<String, u32>,
    table_names: Vec<String>,
    key_ids: Vec<HashMap<Key, KeyId>>,
    keys: Vec<(u32, Key)>,
    versions: HashMap<u64, VersionInfo>,
    installed: Vec<bool>,
    promoted: Vec<bool>,
    /// Installed versions by their nearest installed ancestor:
    /// `(key, ancestor) -> children`.
    kids: HashMap<(KeyId, u64), Kids>,
    /// Each installed version's nearest installed ancestor.
    parent: HashMap<u64, u64>,
    /// Walks of increment runs cut at `RUN_WALK_MAX`.
    runs_cut: u64,
    /// Keys whose installed chain holds increments and does not fork,
    /// indexed for relating reads to whole runs (see [`RunIndex`]).
    runs: HashMap<KeyId, RunIndex>,
    /// Position of each version of those keys in its key's chain.
    run_pos: HashMap<u64, u32>,
    /// Hop nodes allocated so far; hop `h` is graph node `txns.len() + h`.
    hops: u32,
    edges: Vec<Edge>,
    edge_set: HashSet<(TxnIdx, TxnIdx, EdgeKind)>,
    /// Witness chains of chain-wr edges, as parent-linked steps.
    chain_links: Vec<Link>,
    /// ACID transactions whose chains were not searched (a bound hit).
    chains_cut: u64,
    /// Bounds of the chain search ([`CHAIN_EDGES_MAX`],
    /// [`CHAIN_LINKS_MAX`]; tests lower them).
    chain_edges_max: usize,
    chain_links_max: usize,
    anomalies: Vec<Anomaly>,
}

/// Checks a history's records at `level`, reading each key's version
/// order from the writes' `prev` links (see [`crate::check_history`] for a
/// history whose header orders versions by timestamp).
pub fn check(txns: &[TxnRecord], level: Level) -> Report {
    check_with(txns, level, true)
}

/// [`check`]; `hops`: relate reads to runs of increments through hop
/// nodes ([`RunIndex`]) rather than one edge per version (tests compare
/// the two).
fn check_with(txns: &[TxnRecord], level: Level, hops: bool) -> Report {
    let mut c = Checker::new(txns, level);
    c.build(hops);
    let cyclic = c.cycles();
    let stats = c.stats(cyclic);
    Report::new(level, stats, c.anomalies)
}

impl<'h> Checker<'h> {
    fn new(txns: &'h [TxnRecord], level: Level) -> Checker<'h> {
        Checker {
            txns,
            level,
            tables: HashMap::new(),
            table_names: Vec::new(),
            key_ids: Vec::new(),
            keys: Vec::new(),
            versions: HashMap::new(),
            installed: vec![false; txns.len()],
            promoted: vec![false; txns.len()],
            kids: HashMap::new(),
            parent: HashMap::new(),
            runs_cut: 0,
            runs: HashMap::new(),
            run_pos: HashMap::new(),
            hops: 0,
            edges: Vec::new(),
            edge_set: HashSet::new(),
            chain_links: Vec::new(),
            chains_cut: 0,
            chain_edges_max: CHAIN_EDGES_MAX,
            chain_links_max: CHAIN_LINKS_MAX,
            anomalies: Vec::new(),
        }
    }

    /// The graph and the anomalies found while building it.
    fn build(&mut self, hops: bool) {
        self.index_versions();
        self.decide_installed();
        // At the Salt level edges between BASE transactions are dropped, which
        // hops through a run (shared by every reader) cannot do.
        self.version_order(hops && self.level != Level::Salt);
        self.item_reads();
        self.predicates();
        if self.level == Level::Salt {
            self.salt_chains();
        }
        self.session_order();
    }

    fn key_id(&mut self, table: &str, key: &Key) -> KeyId {
        let t = match self.tables.get(table) {
            Some(&t) => t,
            None => {
                let t = self.table_names.len() as u32;
                self.tables.insert(table.to_string(), t);
                self.table_names.push(table.to_string());
                self.key_ids.push(HashMap::new());
                t
            }
        };
        if let Some(&k) = self.key_ids[t as usize].get(key) {
            return k;
        }
        let k = self.keys.len() as KeyId;
        self.key_ids[t as usize].insert(key.clone(), k);
        self.keys.push((t, key.clone()));
        k
    }

    fn lookup_key(&self, table: &str, key: &Key) -> Option<KeyId> {
        let t = *self.tables.get(table)?;
        self.key_ids[t as usize].get(key).copied()
    }

    fn is_base(&self, t: TxnIdx) -> bool {
        self.txns[t as usize].class == TxnClass::Base
    }

    fn txn_info(&self, t: TxnIdx) -> TxnInfo {
        let r = &self.txns[t as usize];
        TxnInfo {
            id: r.id,
            procedure: r.procedure.clone(),
            class: r.class,
            outcome: r.outcome,
            inferred_committed: self.promoted[t as usize],
        }
    }

    fn key_name(&self, k: KeyId) -> (String, String) {
        let (t, key) = &self.keys[k as usize];
        (self.table_names[*t as usize].clone(), key.to_string())
    }

    fn key_display(&self, k: KeyId) -> String {
        let (t, key) = self.key_name(k);
        format!("{t}{key}")
    }

    fn anomaly(
        &mut self,
        class: AnomalyClass,
        summary: String,
        txns: &[TxnIdx],
        edges: Vec<EdgeInfo>,
    ) {
        let txns = txns.iter().map(|&t| self.txn_info(t)).collect();
        self.anomalies.push(Anomaly {
            class,
            summary,
            txns,
            edges,
        });
    }

    /// Every write's version, with duplicate ids reported.
    fn index_versions(&mut self) {
        for (ti, rec) in self.txns.iter().enumerate() {
            for (oi, op) in rec.ops.iter().enumerate() {
                if let Op::Write {
                    table,
                    key,
                    version,
                    prev,
                    sub,
                    cols,
                    ..
                } = op
                {
                    let k = self.key_id(table, key);
                    if *version == INITIAL_VERSION {
                        let summary = format!(
                            "T{} wrote {table}{key} with version 0, which is reserved for initial states",
                            rec.id
                        );
                        self.anomaly(
                            AnomalyClass::DuplicateVersion,
                            summary,
                            &[ti as TxnIdx],
                            vec![],
                        );
                        continue;
                    }
                    let info = VersionInfo {
                        txn: ti as TxnIdx,
                        op: oi as u32,
                        key: k,
                        prev: *prev,
                        sub: *sub,
                        add: cols.as_ref().is_some_and(|c| c.add),
                    };
                    if let Some(first) = self.versions.get(version) {
                        let first_txn = first.txn;
                        let summary = format!(
                            "version {version} was installed twice: by T{} and by T{} ({table}{key})",
                            self.txns[first_txn as usize].id, rec.id
                        );
                        self.anomaly(
                            AnomalyClass::DuplicateVersion,
                            summary,
                            &[first_txn, ti as TxnIdx],
                            vec![],
                        );
                        continue;
                    }
                    self.versions.insert(*version, info);
                } else if let Op::Read { table, key, .. } = op {
                    self.key_id(table, key);
                } else if let Op::RangeRead { table, seen, .. } = op {
                    for s in seen {
                        self.key_id(table, &s.key);
                    }
                }
            }
        }
    }

    /// The reads of a transaction as `(op, key, version)`, range reads'
    /// rows included.
    fn reads_of(&self, t: TxnIdx) -> Vec<ReadRef> {
        let mut out = Vec::new();
        for (oi, op) in self.txns[t as usize].ops.iter().enumerate() {
            match op {
                Op::Read {
                    table,
                    key,
                    version,
                    ..
                } => {
                    if let Some(k) = self.lookup_key(table, key) {
                        out.push(ReadRef {
                            op: oi as u32,
                            key: k,
                            version: *version,
                        });
                    }
                }
                Op::RangeRead { table, seen, .. } => {
                    for s in seen {
                        if let Some(k) = self.lookup_key(table, &s.key) {
                            out.push(ReadRef {
                                op: oi as u32,
                                key: k,
                                version: s.version,
                            });
                        }
                    }
                }
                Op::Write { .. } => {}
            }
        }
        out
    }

    /// Committed transactions, plus unknown ones the history proves
    /// committed: a committed transaction read one of their versions or
    /// installed a version over one of them (transitively).
    fn decide_installed(&mut self) {
        let mut work: Vec<TxnIdx> = Vec::new();
        for (i, r) in self.txns.iter().enumerate() {
            if r.outcome == Outcome::Committed {
                self.installed[i] = true;
                work.push(i as TxnIdx);
            }
        }
        while let Some(t) = work.pop() {
            let mut depends: Vec<u64> = self.reads_of(t).iter().map(|r| r.version).collect();
            for op in &self.txns[t as usize].ops {
                if let Op::Write { prev, .. } = op {
                    depends.push(*prev);
                }
            }
            for v in depends {
                let Some(info) = self.versions.get(&v) else {
                    continue;
                };
                let w = info.txn as usize;
                if !self.installed[w] && self.txns[w].outcome == Outcome::Unknown {
                    self.installed[w] = true;
                    self.promoted[w] = true;
                    work.push(w as TxnIdx);
                }
            }
        }
    }

    fn add_edge(&mut self, e: Edge) {
        if e.from == e.to {
            return;
        }
        if self.level == Level::Salt && self.is_base(e.from) && self.is_base(e.to) {
            // Salt lets BASE transactions interleave freely; only their
            // relations to ACID transactions order them.
            return;
        }
        if !self.binds(&e) {
            return;
        }
        if self.edge_set.insert((e.from, e.to, e.kind)) {
            self.edges.push(e);
        }
    }

    /// Whether `e` obliges its source: an anti-dependency out of a
    /// transaction that ran at read committed does not (its reads bind it
    /// to nothing after them; Adya's mixed levels: an anti-dependency is
    /// an obligation only of a transaction at repeatable read or above).
    fn binds(&self, e: &Edge) -> bool {
        !(matches!(e.kind, EdgeKind::Rw | EdgeKind::PredRw)
            && !self.is_hop(e.from)
            && self.txns[e.from as usize].read_committed)
    }

    /// The nearest installed ancestor of installed version `v` (0 for the
    /// initial state), reporting prevs that are unknown, of another key or
    /// uninstalled. Returns `None` when the chain is corrupt.
    fn installed_parent(&mut self, v: u64, info: &VersionInfo) -> Option<u64> {
        let mut p = info.prev;
        let mut skipped: Vec<TxnIdx> = Vec::new();
        for _ in 0..PREV_WALK_MAX {
            if p == INITIAL_VERSION {
                break;
            }
            let Some(pi) = self.versions.get(&p) else {
                let summary = format!(
                    "T{} wrote version {v} of {} over version {p}, which no transaction wrote",
                    self.txns[info.txn as usize].id,
                    self.key_display(info.key)
                );
                self.anomaly(AnomalyClass::BadPrev, summary, &[info.txn], vec![]);
                return None;
            };
            if pi.key != info.key {
                let summary = format!(
                    "T{} wrote version {v} of {} over version {p}, which is a version of {}",
                    self.txns[info.txn as usize].id,
                    self.key_display(info.key),
                    self.key_display(pi.key)
                );
                self.anomaly(AnomalyClass::BadPrev, summary, &[info.txn, pi.txn], vec![]);
                return None;
            }
            if self.installed[pi.txn as usize] {
                break;
            }
            skipped.push(pi.txn);
            p = pi.prev;
        }
        let commuted = info.add && skipped.len() == self.skipped_adds(info.prev, skipped.len());
        if let (Some(&first), false) = (skipped.first(), commuted) {
            let summary = format!(
                "T{} wrote version {v} of {} over version {} of T{}, which did not commit (a dirty write)",
                self.txns[info.txn as usize].id,
                self.key_display(info.key),
                info.prev,
                self.txns[first as usize].id
            );
            self.anomaly(AnomalyClass::BadPrev, summary, &[info.txn, first], vec![]);
        }
        Some(p)
    }

    /// The installed version order of every key: ww edges and forks.
    /// `index`: build the run index ([`RunIndex`]) once the order is
    /// known, and find runs' bases through it.
    fn version_order(&mut self, index: bool) {
        let mut installed_versions: Vec<(u64, VersionInfo)> = self
            .versions
            .iter()
            .filter(|(_, i)| self.installed[i.txn as usize])
            .map(|(v, i)| (*v, i.clone()))
            .collect();
        installed_versions.sort_unstable_by_key(|(v, _)| *v);
        let mut placed = Vec::with_capacity(installed_versions.len());
        for (v, info) in installed_versions {
            let Some(parent) = self.installed_parent(v, &info) else {
                continue;
            };
            self.kids.entry((info.key, parent)).or_default().push(v);
            self.parent.insert(v, parent);
            placed.push((v, info, parent));
        }
        if index {
            self.index_runs();
        }
        for (v, info, parent) in placed {
            // An increment over increments follows only the run's base;
            // anything else over a run follows every increment in it.
            let (run, base) = match (self.runs.get(&info.key), self.run_pos.get(&parent)) {
                (Some(r), Some(&i)) => {
                    let (s, i) = (r.start[i as usize] as usize, i as usize);
                    let run = if info.add {
                        Vec::new()
                    } else {
                        r.chain[s + 1..=i].iter().rev().copied().collect()
                    };
                    (run, r.chain[s])
                }
                _ => self.run_above(parent),
            };
            let before: SmallVec<[u64; 1]> = if info.add {
                SmallVec::from_elem(base, 1)
            } else {
                run.into_iter().chain([base]).collect()
            };
            for p in before {
                let Some(pi) = self.versions.get(&p) else {
                    continue;
                };
                let from = pi.txn;
                self.add_edge(Edge {
                    from,
                    to: info.txn,
                    kind: EdgeKind::Ww,
                    key: info.key,
                    v1: p,
                    v2: v,
                    chain: None,
                });
            }
        }
        let mut forks: Vec<((KeyId, u64), Kids)> = self
            .kids
            .iter()
            .filter(|(_, k)| k.len() > 1)
            .map(|(a, k)| (*a, k.clone()))
            .collect();
        forks.sort_unstable();
        for ((key, parent), children) in forks {
            let writers: Vec<TxnIdx> = children
                .iter()
                .filter_map(|c| self.versions.get(c).map(|i| i.txn))
                .collect();
            let names: Vec<String> = children
                .iter()
                .zip(&writers)
                .map(|(c, w)| format!("{c} by T{}", self.txns[*w as usize].id))
                .collect();
            let summary = format!(
                "committed versions {} of {} all replaced version {parent} (the version chain forks; a lost update)",
                names.join(", "),
                self.key_display(key)
            );
            self.anomaly(AnomalyClass::Fork, summary, &writers, vec![]);
        }
    }

    /// Builds a [`RunIndex`] for every key with an installed increment whose
    /// chain does not fork.
    fn index_runs(&mut self) {
        let mut keys: Vec<KeyId> = self
            .versions
            .values()
            .filter(|i| i.add && self.installed[i.txn as usize])
            .map(|i| i.key)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let Some(chain) = self.chain(key) else {
                continue;
            };
            let add: Vec<bool> = chain
                .iter()
                .map(|v| self.versions.get(v).is_some_and(|i| i.add))
                .collect();
            let n = chain.len();
            let mut start = vec![0u32; n];
            for i in 0..n {
                start[i] = if add[i] && i > 0 {
                    start[i - 1]
                } else {
                    i as u32
                };
            }
            let mut end = vec![0u32; n];
            for i in (0..n).rev() {
                // The walk from `i` visits `i + 1` and goes on past every
                // increment.
                end[i] = match i + 1 {
                    k if k >= n => i as u32,
                    k if add[k] && k + 1 < n => end[k],
                    k => k as u32,
                };
            }
            for (i, v) in chain.iter().enumerate() {
                self.run_pos.insert(*v, i as u32);
            }
            self.runs.insert(
                key,
                RunIndex {
                    chain,
                    add,
                    start,
                    end,
                    up: vec![NO_HOP; n],
                    down: vec![NO_HOP; n],
                },
            );
        }
    }

    fn is_hop(&self, node: TxnIdx) -> bool {
        node as usize >= self.txns.len()
    }

    fn new_hop(&mut self) -> TxnIdx {
        let h = self.txns.len() as u32 + self.hops;
        self.hops += 1;
        h
    }

    /// An edge to or from a hop: no Salt filter (hops are only used below
    /// the Salt level).
    fn add_hop_edge(&mut self, e: Edge) {
        if !self.binds(&e) {
            return;
        }
        if self.edge_set.insert((e.from, e.to, e.kind)) {
            self.edges.push(e);
        }
    }

    /// Hop `up[j]` (`up`) or `down[j]` of `key`'s run index, made on first
    /// use with the hops it leads on to: `up[j]` is reached from the writer
    /// of `j` and from `up[j - 1]` when `j` is an increment; `down[j]`
    /// reaches the writer of `j` and, when `j` is an increment,
    /// `down[j + 1]`.
    fn hop(&mut self, key: KeyId, j: usize, up: bool) -> TxnIdx {
        // The neighbour a hop at `k` links to, if any.
        let next = |r: &RunIndex, k: usize| match up {
            true => (r.add[k] && k > 0).then(|| k - 1),
            false => (r.add[k] && k + 1 < r.chain.len()).then_some(k + 1),
        };
        let mut todo = Vec::new();
        let mut k = j;
        loop {
            let r = &self.runs[&key];
            let hops = if up { &r.up } else { &r.down };
            if hops[k] != NO_HOP {
                break;
            }
            todo.push(k);
            match next(r, k) {
                Some(n) => k = n,
                None => break,
            }
        }
        for &k in todo.iter().rev() {
            let h = self.new_hop();
            let (v, linked) = {
                let r = self.runs.get_mut(&key).expect("run index");
                if up {
                    r.up[k] = h;
                } else {
                    r.down[k] = h;
                }
                let hops = if up { &r.up } else { &r.down };
                (r.chain[k], next(r, k).map(|n| hops[n]))
            };
            let writer = self.versions.get(&v).map(|i| i.txn);
            let edges = [
                writer.map(|w| match up {
                    true => (w, h, EdgeKind::Wr),
                    false => (h, w, EdgeKind::Via),
                }),
                linked
                    .map(|n| if up { (n, h) } else { (h, n) })
                    .map(|(a, b)| (a, b, EdgeKind::Via)),
            ];
            for (from, to, kind) in edges.into_iter().flatten() {
                self.add_hop_edge(Edge {
                    from,
                    to,
                    kind,
                    key,
                    v1: v,
                    v2: v,
                    chain: None,
                });
            }
        }
        let r = &self.runs[&key];
        if up {
            r.up[j]
        } else {
            r.down[j]
        }
    }

    /// Positions in `key`'s chain of the versions `t` installed there.
    fn own_positions(&self, t: TxnIdx, key: KeyId) -> SmallVec<[u32; 2]> {
        let mut out = SmallVec::new();
        for op in &self.txns[t as usize].ops {
            let Op::Write { version, .. } = op else {
                continue;
            };
            if self.versions.get(version).is_some_and(|i| i.key == key) {
                if let Some(&p) = self.run_pos.get(version) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Through `key`'s run index, when it has one: the `wr` edges of `t`'s
    /// read of `v` (the increments of its run at and below `v`, and the
    /// base; `seen`) or its `rw` edges (the versions after `v` up to the
    /// end of the run; `!seen`). Returns false when the key has no index.
    fn run_edges(&mut self, t: TxnIdx, key: KeyId, v: u64, seen: bool) -> bool {
        let (Some(r), Some(&i)) = (self.runs.get(&key), self.run_pos.get(&v)) else {
            return false;
        };
        let i = i as usize;
        let (lo, hi) = if seen {
            (r.start[i] as usize, i)
        } else {
            (i + 1, r.end[i] as usize)
        };
        if lo > hi || (!seen && i + 1 >= r.chain.len()) {
            return true;
        }
        let own = self.own_positions(t, key);
        let own_in: SmallVec<[usize; 2]> = own
            .iter()
            .map(|&p| p as usize)
            .filter(|p| (lo..=hi).contains(p))
            .collect();
        // Plain edges for the stretch between the read and its farthest own
        // version; one hop edge for the rest.
        let plain = if seen {
            own_in.iter().min().map(|&o| o..=hi)
        } else {
            own_in.iter().max().map(|&o| lo..=o)
        };
        if let Some(stretch) = plain.clone() {
            for j in stretch {
                let c = self.runs[&key].chain[j];
                let Some(w) = self.versions.get(&c).map(|x| x.txn) else {
                    continue;
                };
                let (from, to, kind, v1) = if seen {
                    (w, t, EdgeKind::Wr, c)
                } else {
                    (t, w, EdgeKind::Rw, v)
                };
                self.add_edge(Edge {
                    from,
                    to,
                    kind,
                    key,
                    v1,
                    v2: c,
                    chain: None,
                });
            }
        }
        let rest = match (&plain, seen) {
            (None, true) => Some(hi),
            (None, false) => Some(lo),
            (Some(s), true) => (*s.start() > lo).then(|| s.start() - 1),
            (Some(s), false) => (*s.end() < hi).then(|| s.end() + 1),
        };
        if let Some(j) = rest {
            if seen {
                let h = self.hop(key, j, true);
                self.add_hop_edge(Edge {
                    from: h,
                    to: t,
                    kind: EdgeKind::Via,
                    key,
                    v1: v,
                    v2: v,
                    chain: None,
                });
            } else {
                let h = self.hop(key, j, false);
                let first = self.runs[&key].chain[j];
                self.add_hop_edge(Edge {
                    from: t,
                    to: h,
                    kind: EdgeKind::Rw,
                    key,
                    v1: v,
                    v2: first,
                    chain: None,
                });
            }
        }
        true
    }

    /// wr and rw edges of point reads and of the rows range reads saw;
    /// G1a, G1b and garbage reads.
    fn item_reads(&mut self) {
        for t in 0..self.txns.len() as TxnIdx {
            if !self.installed[t as usize] {
                continue;
            }
            for r in self.reads_of(t) {
                self.item_read(t, &r);
            }
        }
    }

    fn item_read(&mut self, t: TxnIdx, r: &ReadRef) {
        let v = r.version;
        let reader_id = self.txns[t as usize].id;
        if v != INITIAL_VERSION {
            let Some(info) = self.versions.get(&v).cloned() else {
                let summary = format!(
                    "T{reader_id} read version {v} of {}, which no transaction wrote",
                    self.key_display(r.key)
                );
                self.anomaly(AnomalyClass::GarbageRead, summary, &[t], vec![]);
                return;
            };
            if info.key != r.key {
                let summary = format!(
                    "T{reader_id} read version {v} of {}, but version {v} is of {}",
                    self.key_display(r.key),
                    self.key_display(info.key)
                );
                self.anomaly(AnomalyClass::GarbageRead, summary, &[t, info.txn], vec![]);
                return;
            }
            let w = info.txn;
            if w == t {
                return;
            }
            if !self.installed[w as usize] {
                let edge = self.edge_info(&Edge {
                    from: w,
                    to: t,
                    kind: EdgeKind::Wr,
                    key: r.key,
                    v1: v,
                    v2: v,
                    chain: None,
                });
                let summary = format!(
                    "T{reader_id} read version {v} of {}, written by T{} which aborted",
                    self.key_display(r.key),
                    self.txns[w as usize].id
                );
                self.anomaly(AnomalyClass::G1a, summary, &[w, t], vec![edge]);
                return;
            }
            if self.check_intermediate(t, r, &info) {
                // The wr edge and the rw edge back to the writer are the
                // G1b itself; adding them would report it again as a cycle.
                return;
            }
            // A read of an increment saw every increment below it in its
            // run, and the run's base.
            if info.add && self.run_edges(t, r.key, v, true) {
                self.missed_edges(t, r);
                return;
            }
            let (run, base) = if info.add {
                self.run_above(v)
            } else {
                (Vec::new(), v)
            };
            for seen in run.into_iter().chain([base]) {
                let Some(si) = self.versions.get(&seen) else {
                    continue;
                };
                let from = si.txn;
                self.add_edge(Edge {
                    from,
                    to: t,
                    kind: EdgeKind::Wr,
                    key: r.key,
                    v1: seen,
                    v2: seen,
                    chain: None,
                });
            }
        }
        self.missed_edges(t, r);
    }

    /// The rw edges of `t`'s read `r`: to the versions after the one it
    /// read that it did not see.
    fn missed_edges(&mut self, t: TxnIdx, r: &ReadRef) {
        let v = r.version;
        if self.run_edges(t, r.key, v, false) {
            return;
        }
        for c in self.run_below(r.key, v) {
            if let Some(ci) = self.versions.get(&c) {
                let to = ci.txn;
                self.add_edge(Edge {
                    from: t,
                    to,
                    kind: EdgeKind::Rw,
                    key: r.key,
                    v1: v,
                    v2: c,
                    chain: None,
                });
            }
        }
    }

    /// The increments at and above installed version `v` in its key's
    /// order, newest first, and the version below them (`v` itself and an
    /// empty run when `v` is no increment; 0 for the initial state).
    fn run_above(&mut self, v: u64) -> (Vec<u64>, u64) {
        let mut run = Vec::new();
        let mut cur = v;
        while self.versions.get(&cur).is_some_and(|i| i.add) {
            if run.len() == RUN_WALK_MAX {
                self.runs_cut += 1;
                break;
            }
            run.push(cur);
            cur = self.parent.get(&cur).copied().unwrap_or(INITIAL_VERSION);
        }
        (run, cur)
    }

    /// The installed versions a reader of `v` did not see that follow it:
    /// its children, and below an increment child the rest of the run and
    /// the version that ends it.
    fn run_below(&mut self, key: KeyId, v: u64) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .kids
            .get(&(key, v))
            .map(|k| k.to_vec())
            .unwrap_or_default();
        let mut cur = match out.as_slice() {
            [only] => *only,
            _ => return out,
        };
        while self.versions.get(&cur).is_some_and(|i| i.add) {
            let Some([next]) = self.kids.get(&(key, cur)).map(|k| k.as_slice()) else {
                break;
            };
            if out.len() == RUN_WALK_MAX {
                self.runs_cut += 1;
                break;
            }
            cur = *next;
            out.push(cur);
        }
        out
    }

    /// How many of the `n` versions from `v` down the `prev` links are
    /// increments (the uncommitted ones a write skipped).
    fn skipped_adds(&self, mut v: u64, n: usize) -> usize {
        let mut adds = 0;
        for _ in 0..n {
            let Some(i) = self.versions.get(&v) else {
                break;
            };
            adds += usize::from(i.add);
            v = i.prev;
        }
        adds
    }

    /// G1b: `t` read a version its writer overwrote itself later (returns
    /// whether it reported one). At the
    /// Salt level a BASE writer's versions overwritten by a later alkaline
    /// subtransaction are its boundary states, visible to BASE readers; an
    /// ACID reader of one is caught as a G-salt cycle instead.
    fn check_intermediate(&mut self, t: TxnIdx, r: &ReadRef, info: &VersionInfo) -> bool {
        let w = info.txn;
        let Some(next) = self.kids.get(&(r.key, r.version)) else {
            return false;
        };
        let overwrite = next.iter().find_map(|c| {
            self.versions
                .get(c)
                .filter(|ci| ci.txn == w)
                .map(|ci| (*c, ci.sub))
        });
        let Some((c, csub)) = overwrite else {
            return false;
        };
        if self.level == Level::Salt && self.is_base(w) {
            let same_sub = match (info.sub, csub) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            if !same_sub {
                return false;
            }
        }
        let edges = vec![
            self.edge_info(&Edge {
                from: w,
                to: t,
                kind: EdgeKind::Wr,
                key: r.key,
                v1: r.version,
                v2: r.version,
                chain: None,
            }),
            self.edge_info(&Edge {
                from: t,
                to: w,
                kind: EdgeKind::Rw,
                key: r.key,
                v1: r.version,
                v2: c,
                chain: None,
            }),
        ];
        let summary = format!(
            "T{} read version {} of {}, an intermediate version: its writer T{} overwrote it with {c}",
            self.txns[t as usize].id,
            r.version,
            self.key_display(r.key),
            self.txns[w as usize].id
        );
        self.anomaly(AnomalyClass::G1b, summary, &[w, t], edges);
        true
    }

    /// The installed version chain of a key from version 0, or `None` when
    /// it forks (forks are reported; predicate edges skip such keys).
    fn chain(&self, key: KeyId) -> Option<Vec<u64>> {
        let mut out = vec![INITIAL_VERSION];
        let mut cur = INITIAL_VERSION;
        while let Some(k) = self.kids.get(&(key, cur)) {
            if k.len() != 1 || out.len() > self.versions.len() + 1 {
                return None;
            }
            cur = k[0];
            out.push(cur);
        }
        Some(out)
    }

    /// Predicate edges of range reads (see docs/checker.md, "Range reads").
    fn predicates(&mut self) {
        let txns = self.txns;
        // (table, index) -> index key -> keys that ever had that index key
        // in an installed version (or, for index 0, were ever written).
        let mut ranges: HashMap<(u32, u32), RangeIndex> = HashMap::new();
        let mut wanted: HashSet<(u32, u32)> = HashSet::new();
        for (i, rec) in txns.iter().enumerate() {
            if !self.installed[i] {
                continue;
            }
            for op in &rec.ops {
                if let Op::RangeRead { table, index, .. } = op {
                    if let Some(&t) = self.tables.get(table.as_str()) {
                        wanted.insert((t, *index));
                    }
                }
            }
        }
        if wanted.is_empty() {
            return;
        }
        for info in self.versions.values() {
            if !self.installed[info.txn as usize] {
                continue;
            }
            let (t, pk) = &self.keys[info.key as usize];
            if wanted.contains(&(*t, 0)) {
                let e = ranges
                    .entry((*t, 0))
                    .or_default()
                    .entry(pk.clone())
                    .or_default();
                if !e.contains(&info.key) {
                    e.push(info.key);
                }
            }
            if let Some(Op::Write { ix, .. }) = txns[info.txn as usize].ops.get(info.op as usize) {
                for c in ix {
                    if !wanted.contains(&(*t, c.index)) {
                        continue;
                    }
                    for k in [&c.old, &c.new].into_iter().flatten() {
                        let e = ranges
                            .entry((*t, c.index))
                            .or_default()
                            .entry(k.clone())
                            .or_default();
                        if !e.contains(&info.key) {
                            e.push(info.key);
                        }
                    }
                }
            }
        }
        // Primary-key tracks do not depend on the range: cache them. For
        // secondary indexes, cache each key's chain and index keys.
        let mut pk_tracks: HashMap<KeyId, Option<Track>> = HashMap::new();
        let mut ix_keys: HashMap<(KeyId, u32), Option<ChainIndexKeys>> = HashMap::new();
        let mut new_edges: Vec<Edge> = Vec::new();
        let mut missed: Vec<(TxnIdx, KeyId)> = Vec::new();
        let mut candidates: Vec<KeyId> = Vec::new();
        for (ti, rec) in txns.iter().enumerate() {
            if !self.installed[ti] {
                continue;
            }
            let mut written: Option<HashSet<KeyId>> = None;
            for op in &rec.ops {
                let Op::RangeRead {
                    table,
                    index,
                    lo,
                    hi,
                    seen,
                    ..
                } = op
                else {
                    continue;
                };
                let Some(&tid) = self.tables.get(table.as_str()) else {
                    continue;
                };
                let Some(map) = ranges.get(&(tid, *index)) else {
                    continue;
                };
                let written = written.get_or_insert_with(|| {
                    rec.ops
                        .iter()
                        .filter_map(|op| match op {
                            Op::Write { table, key, .. } => self.lookup_key(table, key),
                            _ => None,
                        })
                        .collect()
                });
                let seen: HashSet<KeyId> = seen
                    .iter()
                    .filter_map(|s| self.lookup_key(table, &s.key))
                    .collect();
                candidates.clear();
                for (_, ks) in range_of(map, lo, hi) {
                    candidates.extend(
                        ks.iter()
                            .filter(|k| !seen.contains(k) && !written.contains(k)),
                    );
                }
                candidates.sort_unstable();
                candidates.dedup();
                for &k in &candidates {
                    let computed;
                    let track = if *index == 0 {
                        pk_tracks
                            .entry(k)
                            .or_insert_with(|| {
                                self.chain(k).map(|c| {
                                    let m = self.membership(&c, 0, lo, hi);
                                    Track::new(c, m)
                                })
                            })
                            .as_ref()
                    } else {
                        let cached = ix_keys.entry((k, *index)).or_insert_with(|| {
                            self.chain(k).map(|c| {
                                let ik = self.index_keys(&c, *index);
                                (c, ik)
                            })
                        });
                        computed = cached.as_ref().map(|(c, ik)| {
                            let m = ik
                                .iter()
                                .map(|x| {
                                    x.as_ref().map(|x| {
                                        x.as_ref().is_some_and(|x| key_in_range(x, lo, hi))
                                    })
                                })
                                .collect();
                            Track::new(c.clone(), m)
                        });
                        computed.as_ref()
                    };
                    let Some(track) = track else { continue };
                    match self.predicate_edges(ti as TxnIdx, k, track) {
                        Some(edges) => new_edges.extend(edges),
                        None => missed.push((ti as TxnIdx, k)),
                    }
                }
            }
        }
        for e in new_edges {
            self.add_edge(e);
        }
        for (t, k) in missed {
            let summary = format!(
                "T{}'s range read did not see {}, which matched the range in every committed state",
                txns[t as usize].id,
                self.key_display(k)
            );
            self.anomaly(AnomalyClass::MissedRow, summary, &[t], vec![]);
        }
    }

    /// Whether each version of `chain` exists, which is whether it matches
    /// a primary-key range read that covers its key (`None`: not known from
    /// the history).
    fn membership(
        &self,
        chain: &[u64],
        index: u32,
        lo: &Bound<Key>,
        hi: &Bound<Key>,
    ) -> Vec<Option<bool>> {
        if index != 0 {
            return self
                .index_keys(chain, index)
                .into_iter()
                .map(|x| x.map(|x| x.is_some_and(|x| key_in_range(&x, lo, hi))))
                .collect();
        }
        let kind_of = |v: u64| -> Option<WriteKind> {
            let i = self.versions.get(&v)?;
            match self.txns[i.txn as usize].ops.get(i.op as usize) {
                Some(Op::Write { kind, .. }) => Some(*kind),
                _ => None,
            }
        };
        chain
            .iter()
            .enumerate()
            .map(|(j, &v)| {
                if j == 0 {
                    chain
                        .get(1)
                        .and_then(|&n| kind_of(n))
                        .map(|k| k != WriteKind::Insert)
                } else {
                    kind_of(v).map(|k| k != WriteKind::Delete)
                }
            })
            .collect()
    }

    /// The key each version of `chain` has in secondary index `index`:
    /// `Some(None)` no row, `None` not known (no `ix` entry says).
    fn index_keys(&self, chain: &[u64], index: u32) -> IndexKeys {
        let ix_of = |v: u64| -> Option<&crate::history::IndexChange> {
            let i = self.versions.get(&v)?;
            match self.txns[i.txn as usize].ops.get(i.op as usize) {
                Some(Op::Write { ix, .. }) => ix.iter().find(|c| c.index == index),
                _ => None,
            }
        };
        (0..chain.len())
            .map(|j| {
                let own_new = if j == 0 {
                    None
                } else {
                    ix_of(chain[j]).map(|c| c.new.clone())
                };
                own_new.or_else(|| {
                    chain
                        .get(j + 1)
                        .and_then(|&n| ix_of(n))
                        .map(|c| c.old.clone())
                })
            })
            .collect()
    }

    /// The predicate rule: `t`'s range read did not see key `k`, so it
    /// observed one of the versions that do not match (or may not). A write
    /// that changed whether the row matches gets an edge only when all
    /// those candidate versions lie on one side of it: after it (pred-wr
    /// from the writer) or before it (pred-rw to the writer). Only the
    /// nearest such write on each side gets an edge; the farther ones
    /// follow through the key's ww chain. `None`: no candidate at all (the
    /// row matched in every committed state: a missed row).
    fn predicate_edges(&self, t: TxnIdx, k: KeyId, track: &Track) -> Option<SmallVec<[Edge; 2]>> {
        let (first, last) = (track.first_candidate?, track.last_candidate?);
        let c = &track.changes;
        // The latest change at or before `first`, the earliest after `last`.
        let at = c.partition_point(|&j| j <= first);
        let before = at.checked_sub(1).map(|i| c[i]);
        let after = c.get(c.partition_point(|&j| j <= last)).copied();
        let mut out = SmallVec::new();
        for (j, kind) in [(before, EdgeKind::PredWr), (after, EdgeKind::PredRw)] {
            let Some(j) = j else { continue };
            let Some(w) = self.versions.get(&track.chain[j]).map(|i| i.txn) else {
                continue;
            };
            let (from, to) = if kind == EdgeKind::PredWr {
                (w, t)
            } else {
                (t, w)
            };
            out.push(Edge {
                from,
                to,
                kind,
                key: k,
                v1: track.chain[j - 1],
                v2: track.chain[j],
                chain: None,
            });
        }
        Some(out)
    }

    /// Salt's indirect dirty reads: for every ACID reader of a BASE
    /// transaction's version, the BASE transactions whose writes that BASE
    /// transaction had read earlier in its program, transitively, get a
    /// chain-wr edge to the ACID reader (Salt Lemma 3.3.2: they must all
    /// have finished before the ACID read). One search per ACID
    /// transaction over the graph of BASE writes (see [`crate::chains`]);
    /// past [`CHAIN_EDGES_MAX`] edges or [`CHAIN_LINKS_MAX`] witness links
    /// the remaining ACID transactions are not searched and the report
    /// says how many.
    fn salt_chains(&mut self) {
        let mut graph = ChainGraph::new();
        for b in 0..self.txns.len() as TxnIdx {
            if !self.installed[b as usize] || !self.is_base(b) {
                continue;
            }
            for br in self.reads_of(b) {
                let Some(bi) = self.versions.get(&br.version) else {
                    continue;
                };
                let src = bi.txn;
                if src == b || !self.is_base(src) || !self.installed[src as usize] {
                    continue;
                }
                let node = graph.node(src, bi.op);
                graph.add_read(
                    b,
                    ChainRead {
                        op: br.op,
                        node,
                        key: br.key,
                        version: br.version,
                    },
                );
            }
        }
        let mut added = 0usize;
        let mut starts: Vec<(u32, Link)> = Vec::new();
        for a in 0..self.txns.len() as TxnIdx {
            if !self.installed[a as usize] || self.is_base(a) {
                continue;
            }
            if added >= self.chain_edges_max || self.chain_links.len() >= self.chain_links_max {
                self.chains_cut += 1;
                continue;
            }
            starts.clear();
            for r in self.reads_of(a) {
                let Some(info) = self.versions.get(&r.version) else {
                    continue;
                };
                if !self.is_base(info.txn) || !self.installed[info.txn as usize] || info.txn == a {
                    continue;
                }
                let node = graph.node(info.txn, info.op);
                let link = Link {
                    txn: a,
                    key: r.key,
                    version: r.version,
                    up: u32::MAX,
                };
                starts.push((node, link));
            }
            if starts.is_empty() {
                continue;
            }
            for f in graph.search(&starts, &mut self.chain_links) {
                added += 1;
                self.add_edge(Edge {
                    from: f.from,
                    to: a,
                    kind: EdgeKind::ChainWr,
                    key: f.key,
                    v1: f.version,
                    v2: f.version,
                    chain: Some(f.link),
                });
            }
        }
    }

    /// The hops of the witness chain of a chain-wr edge, from the reader
    /// of the first BASE write to the ACID read.
    fn chain_hops(&self, link: u32) -> Vec<ChainHop> {
        ChainGraph::chain(&self.chain_links, link)
            .into_iter()
            .map(|l| {
                let (table, key) = self.key_name(l.key);
                ChainHop {
                    txn: self.txns[l.txn as usize].id,
                    table,
                    key,
                    version: l.version,
                }
            })
            .collect()
    }

    fn edge_info(&self, e: &Edge) -> EdgeInfo {
        let (table, key) = self.key_name(e.key);
        EdgeInfo {
            from: self.txns[e.from as usize].id,
            to: self.txns[e.to as usize].id,
            kind: e.kind,
            table,
            key,
            version_from: e.v1,
            version_to: e.v2,
            via: e.chain.map(|c| self.chain_hops(c)).unwrap_or_default(),
        }
    }

    /// Finds the cycles: one witness per cyclic component (its most severe
    /// class), plus one per G0 and G1c sub-component. Returns the number of
    /// cyclic components.
    fn cycles(&mut self) -> u64 {
        let real = self.txns.len() as TxnIdx;
        let nodes: Vec<TxnIdx> = (0..real)
            .filter(|&t| self.installed[t as usize])
            .chain(real..real + self.hops)
            .collect();
        let mut local = vec![u32::MAX; real as usize + self.hops as usize];
        for (i, &t) in nodes.iter().enumerate() {
            local[t as usize] = i as u32;
        }
        let mut g = Graph::with_nodes(nodes.len());
        for (ei, e) in self.edges.iter().enumerate() {
            let (a, b) = (local[e.from as usize], local[e.to as usize]);
            if a != u32::MAX && b != u32::MAX {
                g.adj[a as usize].push((b, e.kind, ei as u32));
            }
        }
        let all = |_: EdgeKind| true;
        let ww = |k: EdgeKind| k == EdgeKind::Ww;
        let deps = |k: EdgeKind| !k.is_anti();
        let comps = g.sccs(&all);
        for comp in &comps {
            let sub = g.induced(comp);
            let mut severe = false;
            let ww_comps = sub.sccs(&ww);
            let mut in_g0 = vec![false; comp.len()];
            for c in &ww_comps {
                for &v in c {
                    in_g0[v as usize] = true;
                }
                if let Some(cycle) = sub.shortest_path(c[0], c[0], &ww) {
                    self.report_cycle(AnomalyClass::G0, &cycle);
                    severe = true;
                }
            }
            for c in sub.sccs(&deps) {
                if c.iter().any(|&v| in_g0[v as usize]) {
                    continue;
                }
                if let Some(cycle) = sub.shortest_path(c[0], c[0], &deps) {
                    self.report_cycle(AnomalyClass::G1c, &cycle);
                    severe = true;
                }
            }
            if severe {
                continue;
            }
            // G-single: an anti-dependency edge a -> b closed by a path of
            // dependency edges b -> a. The dependency edges of the
            // component form a DAG here (no G1c); b can reach a only if it
            // comes before a in topological order, and such a path stays
            // between the two positions.
            let Some(topo) = sub.topo_order(&deps) else {
                continue;
            };
            let mut best: Option<Vec<(u32, u32, EdgeKind, u32)>> = None;
            let mut tries = 0;
            'search: for a in 0..sub.len() as u32 {
                for &(b, kind, ei) in &sub.adj[a as usize] {
                    let (pa, pb) = (topo[a as usize], topo[b as usize]);
                    if !kind.is_anti() || pb >= pa {
                        continue;
                    }
                    tries += 1;
                    if tries > GSINGLE_TRIES_MAX {
                        break 'search;
                    }
                    let between = |v: u32| (pb..=pa).contains(&topo[v as usize]);
                    if let Some(path) = sub.shortest_path_within(b, a, &deps, &between) {
                        if best.as_ref().is_none_or(|p| path.len() + 1 < p.len()) {
                            let mut cycle = vec![(a, b, kind, ei)];
                            cycle.extend(path);
                            best = Some(cycle);
                        }
                    }
                }
            }
            if let Some(cycle) = best {
                self.report_cycle(AnomalyClass::GSingle, &cycle);
                continue;
            }
            // G-nonadjacent: exact, over the component's walks that never
            // take two anti-dependencies in a row (`Graph::nonadjacent_walks`);
            // it also finds a G-single the bounded search above missed.
            if let Some(walk) = sub.nonadjacent_cycle(G2_STARTS_MAX) {
                self.report_nonadjacent(&walk);
                continue;
            }
            let mut best: Option<Vec<(u32, u32, EdgeKind, u32)>> = None;
            for s in 0..sub.len().min(G2_STARTS_MAX) as u32 {
                if let Some(cycle) = sub.shortest_path(s, s, &all) {
                    if best.as_ref().is_none_or(|p| cycle.len() < p.len()) {
                        best = Some(cycle);
                    }
                }
            }
            if let Some(cycle) = best {
                self.report_cycle(AnomalyClass::G2, &cycle);
            }
        }
        comps.len() as u64
    }

    /// A cycle's edges with every stretch through hop nodes replaced by the
    /// edge it stands for: the edge into the run gives its source, kind
    /// and read, the edge out of it its target (and, for `rw`, the version
    /// that target installed).
    fn collapse_hops(&self, edges: &[Edge]) -> Vec<Edge> {
        let start = edges.iter().position(|e| !self.is_hop(e.from)).unwrap_or(0);
        let mut out = Vec::with_capacity(edges.len());
        let mut open: Option<Edge> = None;
        for e in edges[start..].iter().chain(&edges[..start]) {
            match (self.is_hop(e.from), self.is_hop(e.to)) {
                (false, false) => out.push(e.clone()),
                (false, true) => open = Some(e.clone()),
                (true, true) => {}
                (true, false) => {
                    if let Some(mut o) = open.take() {
                        o.to = e.to;
                        if o.kind == EdgeKind::Rw {
                            o.v2 = e.v2;
                        }
                        out.push(o);
                    }
                }
            }
        }
        out
    }

    /// A cycle found on the graph as the checker's edges, hops collapsed.
    fn cycle_edges(&self, cycle: &[(u32, u32, EdgeKind, u32)]) -> Vec<Edge> {
        let edges: Vec<Edge> = cycle
            .iter()
            .filter_map(|&(_, _, _, ei)| self.edges.get(ei as usize).cloned())
            .collect();
        self.collapse_hops(&edges)
    }

    fn report_cycle(&mut self, class: AnomalyClass, cycle: &[(u32, u32, EdgeKind, u32)]) {
        let edges = self.cycle_edges(cycle);
        self.report_edges(class, edges);
    }

    /// A closed walk without adjacent anti-dependencies, as the simple
    /// cycle inside it: a G-single when it has one anti-dependency, else a
    /// G-nonadjacent.
    fn report_nonadjacent(&mut self, walk: &[(u32, u32, EdgeKind, u32)]) {
        let edges = simple_nonadjacent(self.cycle_edges(walk), |e| e.from, |e| e.kind.is_anti());
        let class = match edges.iter().filter(|e| e.kind.is_anti()).count() {
            1 => AnomalyClass::GSingle,
            _ => AnomalyClass::GNonadjacent,
        };
        self.report_edges(class, edges);
    }

    fn report_edges(&mut self, class: AnomalyClass, edges: Vec<Edge>) {
        let salt_read = self.level == Level::Salt
            && edges
                .iter()
                .any(|e| e.kind.is_read() && self.is_base(e.from) && !self.is_base(e.to));
        let class = if salt_read {
            AnomalyClass::GSalt
        } else {
            class
        };
        let txns: Vec<TxnIdx> = edges.iter().map(|e| e.from).collect();
        let infos: Vec<EdgeInfo> = edges.iter().map(|e| self.edge_info(e)).collect();
        let path: Vec<String> = txns
            .iter()
            .map(|&t| format!("T{}", self.txns[t as usize].id))
            .collect();
        let kinds: Vec<&str> = edges.iter().map(|e| e.kind.name()).collect();
        let what = match class {
            AnomalyClass::G0 => "a cycle of write-write edges",
            AnomalyClass::G1c => "a cycle of dependency edges",
            AnomalyClass::GSalt => {
                "an ACID transaction observed a BASE transaction's unfinished state (a cycle through a BASE -> ACID read)"
            }
            AnomalyClass::GSingle => "a cycle with exactly one anti-dependency edge",
            AnomalyClass::GNonadjacent => {
                "a cycle with anti-dependency edges, no two of them adjacent"
            }
            _ => "a cycle with anti-dependency edges",
        };
        let summary = format!(
            "{what}: {} -> {} ({})",
            path.join(" -> "),
            path.first().cloned().unwrap_or_default(),
            kinds.join(", ")
        );
        self.anomaly(class, summary, &txns, infos);
    }

    fn stats(&self, cyclic: u64) -> Stats {
        let mut s = Stats {
            txns: self.txns.len() as u64,
            cyclic_components: cyclic,
            increment_runs_cut: self.runs_cut,
            salt_chains_cut: self.chains_cut,
            ..Stats::default()
        };
        for (i, r) in self.txns.iter().enumerate() {
            match r.outcome {
                Outcome::Committed => s.committed += 1,
                Outcome::Aborted => s.aborted += 1,
                Outcome::Unknown => s.unknown += 1,
            }
            if self.promoted[i] {
                s.unknown_inferred_committed += 1;
            }
            s.ops += r.ops.len() as u64;
        }
        for k in EdgeKind::ALL {
            let n = self.edges.iter().filter(|e| e.kind == k).count() as u64;
            if n > 0 {
                s.edges.insert(k.name().to_string(), n);
            }
        }
        s
    }
}

/// The entries of `map` within the bounds, without panicking on inverted
/// or empty bounds (which `BTreeMap::range` would).
fn range_of<'m, V>(
    map: &'m BTreeMap<Key, V>,
    lo: &Bound<Key>,
    hi: &Bound<Key>,
) -> Box<dyn Iterator<Item = (&'m Key, &'m V)> + 'm> {
    if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
        (lo, hi)
    {
        let empty = l > h
            || (l == h && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))));
        if empty {
            return Box::new(std::iter::empty());
        }
    }
    Box::new(map.range::<Key, _>((lo.as_ref(), hi.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{generate, GenConfig};

    fn history() -> Vec<TxnRecord> {
        generate(&GenConfig {
            txns: 600,
            seed: 3,
            keys: 6,
            lists: 2,
            abort_pct: 10,
            ..GenConfig::default()
        })
        .txns
    }

    fn classes(r: &Report) -> Vec<AnomalyClass> {
        r.anomalies.iter().map(|a| a.class).collect()
    }

    /// Makes one committed point read observe a version written by an
    /// aborted transaction of the same key: exactly one G1a, naming both.
    #[test]
    fn injected_aborted_read_is_g1a() {
        let mut txns = history();
        let aborted: Vec<(u64, u64, String, Key)> = txns
            .iter()
            .filter(|t| t.outcome == Outcome::Aborted)
            .flat_map(|t| {
                t.ops.iter().filter_map(move |o| match o {
                    Op::Write {
                        table,
                        key,
                        version,
                        ..
                    } => Some((t.id, *version, table.clone(), key.clone())),
                    _ => None,
                })
            })
            .collect();
        let mut injected = None;
        'outer: for t in txns.iter_mut().filter(|t| t.outcome == Outcome::Committed) {
            for o in t.ops.iter_mut() {
                if let Op::Read {
                    table,
                    key,
                    version,
                    ..
                } = o
                {
                    if let Some((w, v, _, _)) =
                        aborted.iter().find(|(_, _, tb, k)| tb == table && k == key)
                    {
                        *version = *v;
                        injected = Some((*w, t.id));
                        break 'outer;
                    }
                }
            }
        }
        let Some((writer, reader)) = injected else {
            panic!("no read to mutate");
        };
        let r = check(&txns, Level::ReadCommitted);
        assert!(!r.valid);
        let g1a: Vec<&Anomaly> = r
            .anomalies
            .iter()
            .filter(|a| a.class == AnomalyClass::G1a)
            .collect();
        assert_eq!(g1a.len(), 1, "{}", r.render(10));
        let ids: Vec<u64> = g1a[0].txns.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![writer, reader]);
    }

    /// Makes a committed write replace the same version as another
    /// committed write (a lost update): a fork, and the cycles it implies.
    #[test]
    fn injected_lost_update_is_a_fork() {
        let mut txns = history();
        let r = check(&txns, Level::Serializable);
        assert!(r.anomalies.is_empty(), "{}", r.render(5));
        // The last two committed updates of one key: point the second's
        // prev at the first's prev.
        let mut writes: Vec<(usize, usize, u64)> = Vec::new();
        for (ti, t) in txns.iter().enumerate() {
            if t.outcome != Outcome::Committed {
                continue;
            }
            for (oi, o) in t.ops.iter().enumerate() {
                if let Op::Write {
                    table, key, prev, ..
                } = o
                {
                    if table == "reg" && key.values() == [brine_core::Value::Int(0)] {
                        writes.push((ti, oi, *prev));
                    }
                }
            }
        }
        let n = writes.len();
        assert!(n > 2);
        let (ta, _, prev_a) = writes[n - 2];
        let (tb, ob, _) = writes[n - 1];
        assert_ne!(ta, tb);
        if let Op::Write { prev, .. } = &mut txns[tb].ops[ob] {
            *prev = prev_a;
        }
        let r = check(&txns, Level::Serializable);
        assert!(classes(&r).contains(&AnomalyClass::Fork), "{}", r.render(5));
        assert!(!r.valid);
    }

    /// A run of `n` increments of `x`, each by its own transaction, with a
    /// reader of `x` after each: every reader saw the increments below it
    /// and missed those after it.
    fn run_with_readers(n: u64) -> String {
        let mut text = String::new();
        for i in 1..=n {
            text.push_str(&format!("t{i}: w(x,{}>{i})[w=0;add]\n", i - 1));
        }
        for i in 1..=n {
            text.push_str(&format!("t{}: r(x,{i})\n", n + i));
        }
        text
    }

    fn edge_count(r: &Report) -> u64 {
        r.stats.edges.values().sum()
    }

    /// Hops keep the edges of a run linear in the run's length and its
    /// readers: one edge per per-version walk step before, their product.
    #[test]
    fn reads_of_a_long_run_cost_edges_linear_in_the_run() {
        let n = 300;
        let h = crate::script::parse(&run_with_readers(n)).expect("script");
        let hops = check_with(&h.txns, Level::Serializable, true);
        let walks = check_with(&h.txns, Level::Serializable, false);
        assert!(hops.valid, "{}", hops.render(3));
        assert!(walks.valid, "{}", walks.render(3));
        assert!(
            edge_count(&hops) <= 6 * n,
            "{} edges for a run of {n} and {n} readers",
            edge_count(&hops)
        );
        assert!(edge_count(&walks) >= n * n / 2, "{}", edge_count(&walks));
    }

    /// A cycle through a run is found with hops, and its witness names
    /// the transactions and versions the hops stand for.
    #[test]
    fn a_cycle_through_a_run_is_reported_without_its_hops() {
        // T42 read x at version 10 (missing the increments 11..=40) and
        // read z written by T30: it must follow T30 and precede it.
        let mut text = String::new();
        for i in 1..=40u64 {
            let z = if i == 30 { " w(z,0>99)" } else { "" };
            text.push_str(&format!("t{i}: w(x,{}>{i})[w=0;add]{z}\n", i - 1));
        }
        text.push_str("t42: r(x,10) r(z,99)\n");
        let h = crate::script::parse(&text).expect("script");
        let r = check(&h.txns, Level::Serializable);
        assert_eq!(classes(&r), vec![AnomalyClass::GSingle], "{}", r.render(3));
        let a = &r.anomalies[0];
        assert_eq!(a.edges.len(), 2, "{}", r.render(3));
        let rw = &a.edges[0];
        assert_eq!((rw.kind, rw.from, rw.to), (EdgeKind::Rw, 42, 30));
        assert_eq!((rw.version_from, rw.version_to), (10, 30));
        let wr = &a.edges[1];
        assert_eq!((wr.kind, wr.from, wr.to), (EdgeKind::Wr, 30, 42));
        assert!(!r.render(3).contains("via"), "{}", r.render(3));
        // Seen instead of missed: T42 read x at 35, which includes T30's
        // increment, and z before T30 wrote it.
        let text = text.replace("t42: r(x,10) r(z,99)", "t42: r(x,35) r(z,0)");
        let h = crate::script::parse(&text).expect("script");
        let r = check(&h.txns, Level::Serializable);
        assert_eq!(classes(&r), vec![AnomalyClass::GSingle], "{}", r.render(3));
        let kinds: Vec<(EdgeKind, u64, u64)> = r.anomalies[0]
            .edges
            .iter()
            .map(|e| (e.kind, e.from, e.to))
            .collect();
        assert!(kinds.contains(&(EdgeKind::Wr, 30, 42)), "{kinds:?}");
        assert!(kinds.contains(&(EdgeKind::Rw, 42, 30)), "{kinds:?}");
    }

    /// A reader that increments the key it read is in the run it relates
    /// to; it gets no path to itself (no false cycle), and a real cycle
    /// through the versions after its own is still found.
    #[test]
    fn a_reader_inside_its_own_run_has_no_cycle_with_itself() {
        let valid = "t1: w(x,0>1)[w=0;add]\n\
                     t2: r(x,1) w(x,1>2)[w=0;add]\n\
                     t3: w(x,2>3)[w=0;add]\n\
                     t4: w(x,3>4)[w=0;add]\n\
                     t5: r(x,4)";
        let h = crate::script::parse(valid).expect("script");
        let r = check(&h.txns, Level::Serializable);
        assert!(r.valid, "{}", r.render(3));
        // T2 also read z written by T4, whose increment it missed.
        let cycle = valid
            .replace("t2: r(x,1)", "t2: r(z,7) r(x,1)")
            .replace("t4: w(x,3>4)[w=0;add]", "t4: w(x,3>4)[w=0;add] w(z,0>7)");
        let h = crate::script::parse(&cycle).expect("script");
        let r = check(&h.txns, Level::Serializable);
        assert_eq!(classes(&r), vec![AnomalyClass::GSingle], "{}", r.render(3));
    }

    impl Checker<'_> {
        /// The chain-wr pairs as the checker found them before the shared
        /// search (`crate::chains`): a depth-first search per ACID read,
        /// kept as the reference the shared search must agree with.
        fn chain_pairs_per_read(&self) -> std::collections::BTreeSet<(TxnIdx, TxnIdx)> {
            let mut out = std::collections::BTreeSet::new();
            for a in 0..self.txns.len() as TxnIdx {
                if !self.installed[a as usize] || self.is_base(a) {
                    continue;
                }
                for r in self.reads_of(a) {
                    let Some(info) = self.versions.get(&r.version) else {
                        continue;
                    };
                    if !self.is_base(info.txn)
                        || !self.installed[info.txn as usize]
                        || info.txn == a
                    {
                        continue;
                    }
                    let mut stack = vec![(info.txn, info.op)];
                    let mut reached: HashMap<TxnIdx, u32> = HashMap::new();
                    reached.insert(info.txn, info.op);
                    while let Some((b, pos)) = stack.pop() {
                        for br in self.reads_of(b) {
                            if br.op >= pos {
                                continue;
                            }
                            let Some(bi) = self.versions.get(&br.version) else {
                                continue;
                            };
                            let src = bi.txn;
                            if src == b || !self.is_base(src) || !self.installed[src as usize] {
                                continue;
                            }
                            if reached.get(&src).is_some_and(|&p| p >= bi.op) {
                                continue;
                            }
                            reached.insert(src, bi.op);
                            out.insert((src, a));
                            stack.push((src, bi.op));
                        }
                    }
                }
            }
            out
        }
    }

    /// A random Salt history: BASE and ACID transactions over a few keys,
    /// every read of a version any transaction wrote (so BASE read chains
    /// branch, join and loop back to their own writer).
    fn random_salt_history(seed: u64) -> String {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(seed);
        let keys = ["x", "y", "z", "v"];
        let n = rng.gen_range(2..12u64);
        // (txn, is write, key, version or prev>version)
        let mut plan: Vec<Vec<(bool, usize, u64, u64)>> = Vec::new();
        let mut last = [0u64; 4];
        let mut pool: Vec<Vec<u64>> = vec![vec![0]; keys.len()];
        let mut next = 1u64;
        for _ in 0..n {
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(1..6) {
                let k = rng.gen_range(0..keys.len());
                if rng.gen_bool(0.5) {
                    ops.push((false, k, 0, 0));
                } else {
                    ops.push((true, k, last[k], next));
                    last[k] = next;
                    pool[k].push(next);
                    next += 1;
                }
            }
            plan.push(ops);
        }
        let mut text = String::new();
        for (i, ops) in plan.iter().enumerate() {
            let base = rng.gen_bool(0.6);
            let outcome = if rng.gen_ratio(1, 12) { " aborted" } else { "" };
            let class = if base { " base" } else { "" };
            text.push_str(&format!("t{}{outcome}{class}:", i + 1));
            let mut sub = 1;
            for &(w, k, p, v) in ops {
                let tag = if base {
                    sub += usize::from(rng.gen_bool(0.4));
                    format!("#{sub}")
                } else {
                    String::new()
                };
                if w {
                    text.push_str(&format!(" w({},{p}>{v}){tag}", keys[k]));
                } else {
                    let seen = pool[k][rng.gen_range(0..pool[k].len())];
                    text.push_str(&format!(" r({},{seen}){tag}", keys[k]));
                }
            }
            text.push('\n');
        }
        text
    }

    /// The shared chain search finds exactly the chain-wr pairs of one
    /// search per read, and every witness is a chain of reads from the
    /// edge's source to its ACID reader.
    #[test]
    fn shared_chain_search_agrees_with_one_search_per_read() {
        let mut with_chains = 0;
        for seed in 0..2000u64 {
            let text = random_salt_history(seed);
            let h = crate::script::parse(&text).expect("script");
            let mut c = Checker::new(&h.txns, Level::Salt);
            c.build(true);
            let found: std::collections::BTreeSet<(TxnIdx, TxnIdx)> = c
                .edges
                .iter()
                .filter(|e| e.kind == EdgeKind::ChainWr)
                .map(|e| (e.from, e.to))
                .collect();
            assert_eq!(found, c.chain_pairs_per_read(), "seed {seed}:\n{text}");
            with_chains += usize::from(!found.is_empty());
            for e in c.edges.iter().filter(|e| e.kind == EdgeKind::ChainWr) {
                let hops = ChainGraph::chain(&c.chain_links, e.chain.expect("witness"));
                assert_eq!(hops.last().map(|l| l.txn), Some(e.to), "seed {seed}");
                let mut writer = e.from;
                for l in &hops {
                    let w = c.versions.get(&l.version).map(|i| i.txn);
                    assert_eq!(w, Some(writer), "seed {seed}:\n{text}");
                    writer = l.txn;
                }
            }
        }
        assert!(with_chains > 100, "{with_chains} histories with chains");
    }

    /// Past its bound the chain search stops and the report says so.
    #[test]
    fn the_chain_search_bound_is_reported() {
        let text = "t1 base: w(x,0>1)#1 w(z,0>3)#2\n\
                    t2 base: r(x,1)#1 w(y,0>2)#1\n\
                    t3: r(y,2) r(z,0)\n\
                    t4: r(y,2)";
        let h = crate::script::parse(text).expect("script");
        let mut c = Checker::new(&h.txns, Level::Salt);
        c.chain_edges_max = 1;
        c.build(true);
        let cyclic = c.cycles();
        let r = Report::new(Level::Salt, c.stats(cyclic), c.anomalies);
        assert_eq!(r.stats.salt_chains_cut, 1, "{}", r.render(3));
        assert!(r.render(3).contains("not checked"), "{}", r.render(3));
        assert_eq!(classes(&r), vec![AnomalyClass::GSalt], "{}", r.render(3));
    }

    /// Random histories over a few keys, increments and plain writes,
    /// some aborted and some forking: hops find exactly the anomaly
    /// classes one edge per version finds.
    #[test]
    fn hops_and_per_version_walks_find_the_same_anomalies() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        for seed in 0..300u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let keys = ["x", "y", "z"];
            let mut chains: Vec<Vec<u64>> = vec![vec![0]; keys.len()];
            let mut next = 1u64;
            let mut text = String::new();
            for t in 1..=rng.gen_range(3..14u64) {
                let outcome = if rng.gen_ratio(1, 8) { " aborted" } else { "" };
                text.push_str(&format!("t{t}{outcome}:"));
                for _ in 0..rng.gen_range(1..5) {
                    let k = rng.gen_range(0..keys.len());
                    let chain = &mut chains[k];
                    if rng.gen_bool(0.5) {
                        let v = chain[rng.gen_range(0..chain.len())];
                        text.push_str(&format!(" r({},{v})", keys[k]));
                    } else {
                        // Mostly over the newest version; sometimes over an
                        // older one (a fork, or a write over an aborted one).
                        let p = if rng.gen_ratio(1, 10) {
                            chain[rng.gen_range(0..chain.len())]
                        } else {
                            *chain.last().expect("chain")
                        };
                        let add = if rng.gen_ratio(2, 3) { "[w=0;add]" } else { "" };
                        text.push_str(&format!(" w({},{p}>{next}){add}", keys[k]));
                        chain.push(next);
                        next += 1;
                    }
                }
                text.push('\n');
            }
            let h = crate::script::parse(&text).expect("script");
            let sorted = |r: &Report| {
                let mut c = classes(r);
                c.sort_by_key(|c| c.name());
                c
            };
            let hops = check_with(&h.txns, Level::Serializable, true);
            let walks = check_with(&h.txns, Level::Serializable, false);
            assert_eq!(hops.valid, walks.valid, "seed {seed}:\n{text}");
            assert_eq!(sorted(&hops), sorted(&walks), "seed {seed}:\n{text}");
        }
    }
}
