//! Operation partitioning (seed 004 sections 3.1-3.2, Algorithm 1): from
//! the declared procedures of an application, choose each procedure's
//! partitioning parameter(s) so that as few operations as possible need
//! global coordination, and classify every procedure commutative (C),
//! local (L), global (G) or local/global (L/G), for Elia's Conveyor Belt
//! (DESIGN 4.6).
//!
//! ```text
//!  ProcSpec (+ ProcNotes::args: which argument each placeholder is)
//!     |  sets::rw_sets: per statement an entry <attributes, condition>,
//!     v  condition = the equalities binding columns to arguments/literals
//!  read set R_t, write set W_t
//!     |  conflicts::detect (Algorithm 1, lines 1-10): per pair {t, t'},
//!     v  self included, clauses (kind rw|wr|ww, table, columns, atoms)
//!  Conflicts (DNF per pair, unsatisfiable clauses dropped)
//!     |  search::optimize (lines 11-20): P[t] in {none, one argument,
//!     v  a pair}; exhaustive per component, coordinate descent past 2^24
//!  P, cost
//!     |  classify: C (no conflict at all), G (a remaining clause where t
//!     v  writes what another writes or reads), L/G (a pair), else L
//!  EliaPlan { procs: [ProcPartition { class, params, reasons }], cost }
//! ```
//!
//! What it guarantees, given correct argument declarations:
//!
//! * **Soundness of removal.** A conflict clause is removed only when it
//!   contains `A = k` (from t) and `A = k'` (from t') on one column `A` of
//!   one table, with `k` in `P[t]` and `k'` in `P[t']`: two operations in
//!   that conflict then have equal routing values and run on one server.
//!   Any equality the analysis does not know (a computed placeholder, a
//!   range, `<>`) leaves the clause in place (conservative).
//! * **Classification as in section 3.2.** C: no conflict with any
//!   operation, itself included, before partitioning. G: some remaining
//!   (cross-server) clause has it writing what another operation writes
//!   or reads. L: every remaining clause has it only reading from another
//!   (a writer that is therefore G and replicated). L/G: its pair of
//!   parameters makes it L when both route to one server.
//! * **Optimality** of the cost (sum over remaining conflicts of the two
//!   procedures' weights, plus one weight per pair of parameters) when
//!   the search is exhaustive; [`EliaPlan::search`] says which ran.
//!
//! Assumptions, each a documented choice (docs/analysis.md, "Operation
//! partitioning"): an INSERT inserts a fresh key, so two INSERTs never
//! touch one row (the paper's write-only log is commutative); statements
//! are taken regardless of execution path (the paper's conservative
//! choice); two literals on one column make a clause unsatisfiable, any
//! other conjunction is satisfiable.
//!
//! Where things live: `sets` (entries), `conflicts` (clauses), `search`
//! (the choice of P), `render` (the report). Routing calls by the chosen
//! parameters is the runtime's (crates/cluster), not this module's.

mod conflicts;
mod render;
mod search;
mod sets;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use conflicts::{Atom, Clause, Conflict, Kind};
pub use search::{Search, EXHAUSTIVE_LIMIT};
pub use sets::{rw_sets, Entry, RwSets, Term};

use crate::error::{AnalysisError, Result};
use crate::spec::ProcSpec;

/// The class of a procedure's operations (seed 004 section 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Conflicts with no operation: runs at any server, at once.
    Commutative,
    /// Runs at once at the server its parameter routes to.
    Local,
    /// Waits for the token at the server its parameter routes to (any
    /// server if it has none); its writes are replicated.
    Global,
    /// Two parameters: local when both route to one server, global
    /// otherwise.
    LocalGlobal,
}

impl OpClass {
    /// The label of seed 004 Table 1.
    pub fn label(self) -> &'static str {
        match self {
            OpClass::Commutative => "C",
            OpClass::Local => "L",
            OpClass::Global => "G",
            OpClass::LocalGlobal => "L/G",
        }
    }
}

/// One procedure's partitioning and class.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcPartition {
    pub name: String,
    pub class: OpClass,
    /// Procedure argument indexes that route the call (empty: none).
    pub params: Vec<usize>,
    /// Names of those arguments, for reports.
    pub param_names: Vec<String>,
    /// Why it is global (for G and L/G): the remaining conflicts, rendered.
    pub reasons: Vec<String>,
}

/// The result of operation partitioning for one application.
#[derive(Clone, Debug)]
pub struct EliaPlan {
    /// One per procedure, in the order of the specs given.
    pub procs: Vec<ProcPartition>,
    /// The cost of the chosen partitioning (Algorithm 1 line 20, plus the
    /// pair penalty).
    pub cost: f64,
    /// The cost with no procedure partitioned, for comparison.
    pub cost_unpartitioned: f64,
    /// Each procedure's weight (the given frequency, or 1 each).
    pub weights: Vec<f64>,
    /// True for procedures that declare only SELECTs.
    pub read_only: Vec<bool>,
    /// True for procedures whose arguments are declared.
    pub args_declared: Vec<bool>,
    /// Declared argument names no placeholder stands for, per procedure.
    pub unused_args: Vec<Vec<String>>,
    /// Pairs of procedures {t, t'} (self included) that conflict before
    /// partitioning, and how many of them remain.
    pub conflicting_pairs: usize,
    pub remaining_pairs: usize,
    /// How P was found.
    pub search: Search,
    /// True when weights came from a mix (false: 1 each).
    pub weighted: bool,
}

/// Seed 004 Table 1 for one application: counts of procedures per class
/// and the share of operations (by weight) per class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub local: usize,
    pub global: usize,
    pub commutative: usize,
    pub local_global: usize,
    pub read_only: usize,
    pub total: usize,
    pub share_local: f64,
    pub share_global: f64,
    pub share_commutative: f64,
    pub share_local_global: f64,
    pub share_read_only: f64,
}

impl EliaPlan {
    /// The partition of procedure `name`.
    pub fn proc(&self, name: &str) -> Option<&ProcPartition> {
        self.procs.iter().find(|p| p.name == name)
    }

    /// Counts and frequency shares per class (seed 004 Table 1's columns).
    pub fn summary(&self) -> Summary {
        let total_w = self.weights.iter().fold(0.0, |a, w| a + w);
        let share = |f: &dyn Fn(usize) -> bool| {
            if total_w <= 0.0 {
                return 0.0;
            }
            (0..self.procs.len())
                .filter(|&i| f(i))
                .fold(0.0, |acc, i| acc + self.weights[i])
                / total_w
        };
        let count = |c: OpClass| self.procs.iter().filter(|p| p.class == c).count();
        let is = |c: OpClass| move |i: usize| self.procs[i].class == c;
        Summary {
            local: count(OpClass::Local),
            global: count(OpClass::Global),
            commutative: count(OpClass::Commutative),
            local_global: count(OpClass::LocalGlobal),
            read_only: self.read_only.iter().filter(|r| **r).count(),
            total: self.procs.len(),
            share_local: share(&is(OpClass::Local)),
            share_global: share(&is(OpClass::Global)),
            share_commutative: share(&is(OpClass::Commutative)),
            share_local_global: share(&is(OpClass::LocalGlobal)),
            share_read_only: share(&|i| self.read_only[i]),
        }
    }
}

/// Runs operation partitioning over `specs` (an application's procedures,
/// arguments declared through [`crate::ProcNotes::args`]). `weights` maps
/// procedure names to their frequencies (any scale; a procedure missing
/// from a non-empty map weighs 0); an empty map weighs every procedure 1.
pub fn elia_plan(specs: &[ProcSpec], weights: &HashMap<String, f64>) -> Result<EliaPlan> {
    for (name, w) in weights {
        if !w.is_finite() || *w < 0.0 {
            return Err(AnalysisError::Elia(format!(
                "procedure `{name}` has weight {w}: weights must be finite and non-negative"
            )));
        }
        if !specs.iter().any(|s| s.name == *name) {
            return Err(AnalysisError::Elia(format!(
                "weight given for unknown procedure `{name}`"
            )));
        }
    }
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|o| o.name == s.name) {
            return Err(AnalysisError::DuplicateProcedure(s.name.clone()));
        }
    }
    let weighted = !weights.is_empty();
    let w: Vec<f64> = specs
        .iter()
        .map(|s| {
            if weighted {
                weights.get(&s.name).copied().unwrap_or(0.0)
            } else {
                1.0
            }
        })
        .collect();
    let sets: Vec<RwSets> = specs.iter().map(rw_sets).collect();
    let conflicts = conflicts::detect(specs, &sets);
    let chosen = search::optimize(&sets, &conflicts, &w)?;
    let mut procs = classify(specs, &conflicts, &chosen.params);
    run_anywhere(&mut procs, &conflicts);
    // What leaves must hold: a C has no parameter, an L/G exactly two, any
    // other at most one.
    for p in &procs {
        let ok = match p.class {
            OpClass::Commutative => p.params.is_empty(),
            OpClass::LocalGlobal => p.params.len() == 2,
            OpClass::Local | OpClass::Global => p.params.len() <= 1,
        };
        if !ok || p.params.len() != p.param_names.len() {
            return Err(AnalysisError::Internal(format!(
                "operation partitioning: {} is {} with parameters {:?}",
                p.name, p.class, p.param_names
            )));
        }
    }
    let remaining_pairs = conflicts
        .iter()
        .filter(|c| c.remains(&chosen.params[c.t], &chosen.params[c.t2]))
        .count();
    let read_only = specs
        .iter()
        .map(|s| s.ops.iter().all(|o| o.access.is_read()))
        .collect();
    Ok(EliaPlan {
        procs,
        cost: chosen.cost,
        cost_unpartitioned: chosen.cost_unpartitioned,
        weights: w,
        read_only,
        args_declared: specs.iter().map(|s| s.args_declared).collect(),
        unused_args: specs
            .iter()
            .map(|s| s.unused_args().into_iter().map(String::from).collect())
            .collect(),
        conflicting_pairs: conflicts.len(),
        remaining_pairs,
        search: chosen.search,
        weighted,
    })
}

/// A procedure that touches no server's local data can run at any
/// server: every row it reads or writes is written only by globals, whose
/// writes are on every replica in token order (and if it writes, it is a
/// global itself, so its writes join the token wherever it runs). Its
/// partitioning parameter is then dropped, so it runs where its client is
/// (the closest server of the seed's WAN setting) instead of where the
/// parameter would send it. Algorithm 1's cost cannot tell the two apart
/// (such a parameter only removes clauses between globals, which stay
/// global), so this is decided after the search. A global that reads a
/// local's rows (buy-confirm reads the cart do_cart fills) keeps its
/// parameter: it must run where those rows are.
fn run_anywhere(procs: &mut [ProcPartition], conflicts: &[Conflict]) {
    let classes: Vec<OpClass> = procs.iter().map(|p| p.class).collect();
    for (t, p) in procs.iter_mut().enumerate() {
        if !matches!(p.class, OpClass::Local | OpClass::Global) || p.params.is_empty() {
            continue;
        }
        let free = conflicts.iter().filter(|c| c.involves(t)).all(|c| {
            let (me_first, other) = if c.t == t { (true, c.t2) } else { (false, c.t) };
            c.clauses.iter().all(|clause| {
                // Who writes the clause's row: t, the other, or both.
                let (t_writes, other_writes) =
                    match (clause.kind, me_first) {
                        (conflicts::Kind::WriteWrite, _) => (true, true),
                        (conflicts::Kind::ReadWrite, true)
                        | (conflicts::Kind::WriteRead, false) => (false, true),
                        (conflicts::Kind::WriteRead, true)
                        | (conflicts::Kind::ReadWrite, false) => (true, false),
                    };
                (!t_writes || classes[t] == OpClass::Global)
                    && (!other_writes || classes[other] == OpClass::Global)
            })
        });
        if free {
            p.params.clear();
            p.param_names.clear();
        }
    }
}

/// Section 3.2, given P: the class of each procedure and why.
fn classify(
    specs: &[ProcSpec],
    conflicts: &[Conflict],
    params: &[Vec<usize>],
) -> Vec<ProcPartition> {
    specs
        .iter()
        .enumerate()
        .map(|(t, s)| {
            let p = &params[t];
            let mine: Vec<&Conflict> = conflicts.iter().filter(|c| c.involves(t)).collect();
            let param_names: Vec<String> = p
                .iter()
                .map(|&a| s.args.get(a).cloned().unwrap_or_else(|| format!("#{a}")))
                .collect();
            let class_of = |p_t: &[usize]| global_clauses(t, &mine, params, p_t);
            let (class, reasons) = if mine.is_empty() {
                (OpClass::Commutative, Vec::new())
            } else {
                let global = class_of(p);
                if !global.is_empty() {
                    let r = render::reasons(specs, t, &global, params);
                    (OpClass::Global, r)
                } else if p.len() == 2 {
                    // What each parameter alone leaves: the conflicts that
                    // make it global when the two route apart.
                    let mut r = Vec::new();
                    for (alone, other) in [(p[0], p[1]), (p[1], p[0])] {
                        let left = class_of(&[alone]);
                        let mut shown = params.to_vec();
                        shown[t] = vec![alone];
                        for line in render::reasons(specs, t, &left, &shown) {
                            r.push(format!(
                                "when ${} and ${} route apart, as by ${0} alone: {line}",
                                s.args.get(alone).map_or("?", String::as_str),
                                s.args.get(other).map_or("?", String::as_str),
                            ));
                        }
                    }
                    (OpClass::LocalGlobal, r)
                } else {
                    (OpClass::Local, Vec::new())
                }
            };
            ProcPartition {
                name: s.name.clone(),
                class,
                params: p.clone(),
                param_names,
                reasons,
            }
        })
        .collect()
}

/// The clauses left when `t` is partitioned by `p_t` (the others by
/// `params`) that make `t` global.
fn global_clauses<'a>(
    t: usize,
    mine: &[&'a Conflict],
    params: &[Vec<usize>],
    p_t: &[usize],
) -> Vec<(&'a Conflict, &'a Clause)> {
    let mut out = Vec::new();
    for &c in mine {
        let (pa, pb) = if c.t == t && c.t2 == t {
            (p_t, p_t)
        } else if c.t == t {
            (p_t, params[c.t2].as_slice())
        } else {
            (params[c.t].as_slice(), p_t)
        };
        out.extend(
            c.clauses
                .iter()
                .filter(|cl| !cl.removed_by(pa, pb) && cl.makes_global(c, t))
                .map(|cl| (c, cl)),
        );
    }
    out
}
