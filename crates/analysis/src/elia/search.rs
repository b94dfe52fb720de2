//! Partitioning optimization (seed 004 Algorithm 1, lines 11-20): the
//! array P of partitioning parameters that minimizes the cost of the
//! conflicts left across servers.
//!
//! ```text
//!  options(t) = none | one candidate argument | a candidate pair
//!    candidate argument: binds, in some clause, a column that the other
//!      side binds to one of its arguments (any other argument removes
//!      nothing: it never lowers the cost)
//!    candidate pair {a, b}: t writes; a and b are candidates on
//!      different tables (two entities, e.g. RUBiS's user and item)
//!  cost(P) = Σ over pairs {t,t'} with a clause left   w(t) + w(t')
//!          + Σ over t partitioned by a pair           w(t)  (pair penalty)
//!  a pair is admissible only if it is what keeps t from being global:
//!    with both arguments on one server t has no clause left that makes
//!    it global (it is L/G), and with either argument alone it has one
//!  procedures with several options that share a conflict form a
//!  component; the cost is a sum of terms within components, so each is
//!  searched alone:
//!    <= EXHAUSTIVE_LIMIT combinations: every one, by branch and bound
//!      (depth-first in lexicographic order, a branch cut as soon as its
//!      partial cost cannot win: costs only grow with depth) -> optimal
//!    larger: coordinate descent from "none everywhere", each procedure
//!      in turn taking its best option given the others, until a pass
//!      changes nothing (at most MAX_DESCENT_PASSES) -> a local optimum
//!  ties: lower cost, then fewer parameters, then the earlier option
//!  (none first, then arguments in call order, then pairs)
//! ```
//!
//! Why pairs are rationed: an L/G procedure runs globally whenever its
//! two parameters route apart (most calls, with many servers), so a pair
//! pays only where it turns a G into an L/G. A read-only procedure is
//! never G (it writes nothing another could read or overwrite), so it
//! never gets a pair; the penalty keeps the search from adding a pair
//! where one argument does as well.

use std::collections::{BTreeMap, BTreeSet};

use brine_core::TableId;

use super::conflicts::Conflict;
use super::sets::RwSets;
use crate::error::{AnalysisError, Result};

/// Components with at most this many combinations are searched
/// exhaustively (by branch and bound).
pub const EXHAUSTIVE_LIMIT: u64 = 1 << 24;
/// Passes of coordinate descent, at most.
pub const MAX_DESCENT_PASSES: usize = 64;
/// A pair of parameters costs this times the procedure's weight.
pub const PAIR_PENALTY: f64 = 1.0;
/// Costs closer than this are equal (they are sums of the weights).
const EPS: f64 = 1e-9;

/// How P was found.
#[derive(Clone, Debug, PartialEq)]
pub enum Search {
    /// Every combination of every component was covered: P is optimal.
    Exhaustive {
        /// Combinations covered (the product of option counts, summed
        /// over components) and those evaluated to the end.
        combinations: u64,
        evaluated: u64,
    },
    /// Some components were too large: coordinate descent there (P is a
    /// local optimum).
    Descent {
        /// Components searched by descent, the largest one's combination
        /// count (saturating), and the most passes one took.
        components: usize,
        largest: u64,
        passes: usize,
    },
}

pub(crate) struct Chosen {
    pub params: Vec<Vec<usize>>,
    pub cost: f64,
    pub cost_unpartitioned: f64,
    pub search: Search,
}

/// Per conflict and pair of options: is a clause left, and does one make
/// t (resp. t') global.
#[derive(Clone, Copy, Default)]
struct Cell {
    remains: bool,
    global_t: bool,
    global_t2: bool,
}

/// A conflict, tabulated over the options of its two procedures.
struct Link {
    t: usize,
    t2: usize,
    cost: f64,
    /// `cells[oa * width + ob]`.
    cells: Vec<Cell>,
    width: usize,
}

impl Link {
    fn cell(&self, oa: usize, ob: usize) -> Cell {
        self.cells[oa * self.width + ob]
    }
}

/// Every procedure's options and, for a pair, the options of its two
/// arguments alone.
struct Options {
    of: Vec<Vec<Vec<usize>>>,
    /// `parts[t][o]`: for a pair option, the single options of its parts.
    parts: Vec<Vec<Option<(usize, usize)>>>,
}

impl Options {
    fn new(sets: &[RwSets], conflicts: &[Conflict]) -> Options {
        // tables[t][k]: tables on which argument k of t can remove a clause.
        let mut tables: Vec<BTreeMap<usize, BTreeSet<TableId>>> = vec![BTreeMap::new(); sets.len()];
        for c in conflicts {
            for cl in &c.clauses {
                for &(k, k2) in &cl.removers {
                    tables[c.t].entry(k).or_default().insert(cl.table);
                    tables[c.t2].entry(k2).or_default().insert(cl.table);
                }
            }
        }
        let mut of = Vec::with_capacity(sets.len());
        let mut parts = Vec::with_capacity(sets.len());
        for (t, args) in tables.iter().enumerate() {
            let mut opts: Vec<Vec<usize>> = vec![Vec::new()];
            opts.extend(args.keys().map(|&k| vec![k]));
            let single = |k: usize| 1 + args.keys().position(|&x| x == k).unwrap_or(0);
            let mut p: Vec<Option<(usize, usize)>> = vec![None; opts.len()];
            if !sets[t].writes.is_empty() {
                for (&a, ta) in args {
                    for (&b, tb) in args.range(a + 1..) {
                        if ta.iter().any(|x| tb.iter().any(|y| x != y)) {
                            opts.push(vec![a, b]);
                            p.push(Some((single(a), single(b))));
                        }
                    }
                }
            }
            of.push(opts);
            parts.push(p);
        }
        Options { of, parts }
    }

    fn count(&self, t: usize) -> usize {
        self.of[t].len()
    }

    fn is_pair(&self, t: usize, o: usize) -> bool {
        self.parts[t][o].is_some()
    }
}

fn links(conflicts: &[Conflict], opts: &Options, w: &[f64]) -> Vec<Link> {
    conflicts
        .iter()
        .map(|c| {
            let (na, nb) = (opts.count(c.t), opts.count(c.t2));
            let mut cells = vec![Cell::default(); na * nb];
            for (oa, pa) in opts.of[c.t].iter().enumerate() {
                for (ob, pb) in opts.of[c.t2].iter().enumerate() {
                    if c.t == c.t2 && oa != ob {
                        continue; // one procedure, one choice
                    }
                    let mut cell = Cell::default();
                    for cl in c.remaining(pa, pb) {
                        cell.remains = true;
                        cell.global_t |= cl.makes_global(c, c.t);
                        cell.global_t2 |= cl.makes_global(c, c.t2);
                    }
                    cells[oa * nb + ob] = cell;
                }
            }
            Link {
                t: c.t,
                t2: c.t2,
                cost: w[c.t] + w[c.t2],
                cells,
                width: nb,
            }
        })
        .collect()
}

/// True if procedure `t`, partitioned by option `o_t` (the others by
/// `choice`), has a clause left that makes it global.
fn global_with(t: usize, o_t: usize, choice: &[usize], links: &[&Link]) -> bool {
    links.iter().any(|l| {
        if l.t == t && l.t2 == t {
            l.cell(o_t, o_t).global_t
        } else if l.t == t {
            l.cell(o_t, choice[l.t2]).global_t
        } else if l.t2 == t {
            l.cell(choice[l.t], o_t).global_t2
        } else {
            false
        }
    })
}

/// True if every pair in `choice` among `members` is admissible: it
/// makes its procedure L/G where either argument alone leaves it G.
fn admissible(choice: &[usize], members: &[usize], opts: &Options, links: &[&Link]) -> bool {
    members.iter().all(|&t| match opts.parts[t][choice[t]] {
        None => true,
        Some((a, b)) => {
            !global_with(t, choice[t], choice, links)
                && global_with(t, a, choice, links)
                && global_with(t, b, choice, links)
        }
    })
}

/// The cost of `choice` over `links` plus the pair penalties of
/// `members`.
fn cost_of(choice: &[usize], links: &[&Link], members: &[usize], opts: &Options, w: &[f64]) -> f64 {
    let mut cost = 0.0;
    for l in links {
        if l.cell(choice[l.t], choice[l.t2]).remains {
            cost += l.cost;
        }
    }
    for &t in members {
        if opts.is_pair(t, choice[t]) {
            cost += PAIR_PENALTY * w[t];
        }
    }
    cost
}

/// Connected components of the procedures with a choice, linked by a
/// conflict between two of them.
fn components(opts: &Options, links: &[Link]) -> Vec<Vec<usize>> {
    let n = opts.of.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for l in links {
        if opts.count(l.t) > 1 && opts.count(l.t2) > 1 {
            let (a, b) = (find(&mut parent, l.t), find(&mut parent, l.t2));
            parent[a] = b;
        }
    }
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for t in (0..n).filter(|&t| opts.count(t) > 1) {
        let r = find(&mut parent, t);
        by_root.entry(r).or_default().push(t);
    }
    by_root.into_values().collect()
}

/// Branch and bound over one component, in lexicographic order.
struct Bnb<'a> {
    members: &'a [usize],
    opts: &'a Options,
    w: &'a [f64],
    relevant: &'a [&'a Link],
    /// `closing[d]`: links whose later endpoint (in member order) is the
    /// member at depth `d` (a fixed endpoint counts as earliest).
    closing: Vec<Vec<&'a Link>>,
    best: Option<(f64, usize, Vec<usize>)>,
    evaluated: u64,
}

impl Bnb<'_> {
    fn run(&mut self, choice: &mut Vec<usize>, depth: usize, cost: f64, n: usize) {
        if let Some((bc, bn, _)) = &self.best {
            if cost > bc + EPS || (cost > bc - EPS && n >= *bn) {
                return; // cannot win: costs and counts only grow
            }
        }
        if depth == self.members.len() {
            self.evaluated += 1;
            if admissible(choice, self.members, self.opts, self.relevant) {
                self.best = Some((cost, n, choice.clone()));
            }
            return;
        }
        let t = self.members[depth];
        for o in 0..self.opts.count(t) {
            choice[t] = o;
            let mut c = cost;
            if self.opts.is_pair(t, o) {
                c += PAIR_PENALTY * self.w[t];
            }
            for l in &self.closing[depth] {
                if l.cell(choice[l.t], choice[l.t2]).remains {
                    c += l.cost;
                }
            }
            self.run(choice, depth + 1, c, n + self.opts.of[t][o].len());
        }
        choice[t] = 0;
    }
}

/// Coordinate descent over one component from `choice`; returns passes.
fn descend(
    choice: &mut [usize],
    members: &[usize],
    opts: &Options,
    relevant: &[&Link],
    w: &[f64],
) -> usize {
    let eval = |c: &[usize]| {
        admissible(c, members, opts, relevant).then(|| cost_of(c, relevant, members, opts, w))
    };
    let mut passes = 0;
    loop {
        passes += 1;
        let mut changed = false;
        for &t in members {
            let current = choice[t];
            let mut best = (eval(choice).unwrap_or(f64::INFINITY), current);
            for o in (0..opts.count(t)).filter(|&o| o != current) {
                choice[t] = o;
                let Some(cost) = eval(choice) else { continue };
                let fewer = opts.of[t][o].len() < opts.of[t][best.1].len();
                if cost < best.0 - EPS || (cost < best.0 + EPS && fewer) {
                    best = (cost, o);
                }
            }
            choice[t] = best.1;
            changed |= best.1 != current;
        }
        if !changed || passes >= MAX_DESCENT_PASSES {
            return passes;
        }
    }
}

/// Chooses P (Algorithm 1 line 11).
pub(crate) fn optimize(sets: &[RwSets], conflicts: &[Conflict], w: &[f64]) -> Result<Chosen> {
    let opts = Options::new(sets, conflicts);
    let links = links(conflicts, &opts, w);
    let mut choice = vec![0usize; sets.len()];
    let (mut combinations_total, mut evaluated_total) = (0u64, 0u64);
    let (mut descended, mut largest, mut passes_max) = (0usize, 0u64, 0usize);
    for members in components(&opts, &links) {
        let relevant: Vec<&Link> = links
            .iter()
            .filter(|l| members.contains(&l.t) || members.contains(&l.t2))
            .collect();
        let combinations = members
            .iter()
            .try_fold(1u64, |acc, &t| acc.checked_mul(opts.count(t) as u64))
            .unwrap_or(u64::MAX);
        if combinations <= EXHAUSTIVE_LIMIT {
            let pos = |t: usize| members.iter().position(|&m| m == t);
            let mut closing: Vec<Vec<&Link>> = vec![Vec::new(); members.len()];
            for l in &relevant {
                let d = pos(l.t).max(pos(l.t2)).ok_or_else(|| {
                    AnalysisError::Internal("operation partitioning: a link outside".into())
                })?;
                closing[d].push(l);
            }
            let mut bnb = Bnb {
                members: &members,
                opts: &opts,
                w,
                relevant: &relevant,
                closing,
                best: None,
                evaluated: 0,
            };
            let mut c = choice.clone();
            bnb.run(&mut c, 0, 0.0, 0);
            let (_, _, best) = bnb.best.ok_or_else(|| {
                AnalysisError::Internal("operation partitioning: no admissible choice".into())
            })?;
            for &t in &members {
                choice[t] = best[t];
            }
            combinations_total = combinations_total.saturating_add(combinations);
            evaluated_total = evaluated_total.saturating_add(bnb.evaluated);
        } else {
            descended += 1;
            largest = largest.max(combinations);
            let passes = descend(&mut choice, &members, &opts, &relevant, w);
            passes_max = passes_max.max(passes);
        }
    }
    let all: Vec<&Link> = links.iter().collect();
    let everyone: Vec<usize> = (0..sets.len()).collect();
    if !admissible(&choice, &everyone, &opts, &all) {
        return Err(AnalysisError::Internal(
            "operation partitioning chose an inadmissible pair".into(),
        ));
    }
    let cost = cost_of(&choice, &all, &everyone, &opts, w);
    let cost_unpartitioned = links.iter().fold(0.0, |a, l| a + l.cost);
    let search = if descended == 0 {
        Search::Exhaustive {
            combinations: combinations_total,
            evaluated: evaluated_total,
        }
    } else {
        Search::Descent {
            components: descended,
            largest,
            passes: passes_max,
        }
    };
    Ok(Chosen {
        params: choice
            .iter()
            .enumerate()
            .map(|(t, &o)| opts.of[t][o].clone())
            .collect(),
        cost,
        cost_unpartitioned,
        search,
    })
}
