//! Choosing the order each procedure of a Runtime Pipelining group runs
//! its statements in (seed 002 section 6.1, "identifies better performing
//! subtransaction orderings"; step 1 of section 5 sorts operations by
//! rank where dependencies allow).
//!
//! The sources' tool rewrites the transaction's code. brine's bodies are
//! Rust and stay opaque, so a procedure offers the orders its author wrote
//! (its own body and its reorderings, each analysed as the program it is),
//! and the analysis chooses one per procedure:
//!
//! 1. only combinations whose every chopping (optimistic and rollback-safe)
//!    runs in its body's order: the runtime cannot reorder a body;
//! 2. larger pieces first (section 6.1): the least sum over pieces of
//!    position x queries. A dependency at run time orders the pieces that
//!    follow it, so big pieces early are less often held up;
//! 3. then the finest: most ranked pieces over the group (free operations
//!    have no C-edges, so how they split does not make a chopping finer);
//! 4. then the procedures' own bodies (the first candidate of each).
//!
//! Larger pieces first comes before the finest because the bodies are
//! different programs, not orders of one chopping, and the run time
//! decides: TPC-C's five procedures in one group on the tuned program,
//! where clause 2's body (offered as new-order's reordering) cuts one
//! more ranked piece but takes the district counter before the stock
//! loop, ran at 0.90x `acid` chosen finest-first against 1.29x for the
//! tuned body (`docs/results/callas.md`).
//!
//! Before all that, a reordering must keep its lock order towards the
//! procedures outside the group ([`keeps_lock_order`]): between groups,
//! nexus locks are held as ACID locks are, so a reordering that took two
//! tables in the opposite order to another group's transaction would
//! deadlock with it. (Measured: TPC-C with clause 2's bodies, one group
//! per type, new-order reordered to take the district before reading the
//! warehouse while payment, in its own group, writes the warehouse and
//! then the district: 0.77x `acid`, 2,339 aborts in 5 s.)

use brine_core::TableId;

use crate::error::{AnalysisError, Result};
use crate::rp::ProcChopping;
use crate::spec::ProcSpec;
use crate::{analyze_group, GroupResult, Refinements};

/// How many queries a statement inside a loop counts for: the loop runs
/// its body several times a call (TPC-C's order lines: 5 to 15).
pub const LOOP_QUERIES: usize = 10;

/// The most combinations of orderings analysed for one group.
pub const MAX_COMBINATIONS: usize = 256;

/// The queries piece after piece runs, looped statements counting
/// [`LOOP_QUERIES`] times.
pub fn piece_queries(spec: &ProcSpec, chopping: &ProcChopping) -> Vec<usize> {
    chopping
        .pieces
        .iter()
        .map(|p| {
            p.ops
                .iter()
                .map(|&o| {
                    if spec.loops().iter().any(|l| l.contains(&o)) {
                        LOOP_QUERIES
                    } else {
                        1
                    }
                })
                .sum()
        })
        .collect()
}

/// Sum over pieces of position x queries: lower runs larger pieces
/// earlier.
pub fn larger_first_cost(spec: &ProcSpec, chopping: &ProcChopping) -> usize {
    piece_queries(spec, chopping)
        .iter()
        .enumerate()
        .map(|(k, q)| k * q)
        .sum()
}

/// Whether `reordering` (a candidate of the procedure whose own body is
/// `own`) takes the tables of every pair of statements it swaps in an
/// order no procedure of `outside` can invert into a deadlock: no
/// outside procedure writes the table of one of the two while also
/// touching the other's. Table granularity, so conservative.
pub fn keeps_lock_order(own: &ProcSpec, reordering: &ProcSpec, outside: &[&ProcSpec]) -> bool {
    let at = |s: &ProcSpec, name: &str| s.ops.iter().position(|o| o.name == name);
    let crossed = |ta: TableId, tb: TableId| {
        outside.iter().any(|u| {
            let touches = |t: TableId| u.ops.iter().any(|o| o.access.table == t);
            let writes = |t: TableId| {
                u.ops
                    .iter()
                    .any(|o| o.access.table == t && o.access.writes())
            };
            (writes(ta) && touches(tb)) || (writes(tb) && touches(ta))
        })
    };
    for (i, a) in own.ops.iter().enumerate() {
        for b in &own.ops[i + 1..] {
            let swapped = match (at(reordering, &a.name), at(reordering, &b.name)) {
                (Some(ra), Some(rb)) => ra > rb,
                _ => false,
            };
            if swapped && crossed(a.access.table, b.access.table) {
                return false;
            }
        }
    }
    true
}

/// Whether every chopping of `g` runs in its body's order.
pub fn runs_in_body_order(g: &GroupResult) -> bool {
    g.rp.choppings
        .iter()
        .chain(&g.safe)
        .all(|c| c.runs_in_body_order())
}

/// The chosen combination: `picks[p]` indexes `candidates[p]`.
#[derive(Clone, Debug)]
pub struct Choice {
    pub picks: Vec<usize>,
    pub result: GroupResult,
}

/// `candidates[p]`: procedure `p`'s orderings as specs, its own body's
/// first; `outside`: the application's procedures in other groups (and
/// the default group). Analyses every combination of the candidates that
/// keep their lock order towards `outside` and returns the best by the
/// rules of the module documentation, `None` if no combination runs in
/// body order.
pub fn choose_orderings(
    candidates: &[Vec<ProcSpec>],
    outside: &[&ProcSpec],
    r: Refinements,
) -> Result<Option<Choice>> {
    if let Some(empty) = candidates.iter().position(Vec::is_empty) {
        return Err(AnalysisError::Internal(format!(
            "procedure {empty} of the group has no ordering"
        )));
    }
    let combinations = candidates
        .iter()
        .try_fold(1usize, |n, c| n.checked_mul(c.len()))
        .filter(|&n| n <= MAX_COMBINATIONS)
        .ok_or_else(|| AnalysisError::Notes {
            procedure: candidates
                .iter()
                .map(|c| c[0].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            msg: format!(
                "the group's reorderings make more than {MAX_COMBINATIONS} combinations to analyse; offer fewer"
            ),
        })?;
    let admissible: Vec<Vec<bool>> = candidates
        .iter()
        .map(|c| {
            c.iter()
                .map(|s| keeps_lock_order(&c[0], s, outside))
                .collect()
        })
        .collect();
    let mut best: Option<((usize, isize), Choice)> = None;
    let mut picks = vec![0usize; candidates.len()];
    for _ in 0..combinations {
        if !picks.iter().zip(&admissible).all(|(&i, a)| a[i]) {
            next(&mut picks, candidates);
            continue;
        }
        let specs: Vec<&ProcSpec> = picks.iter().zip(candidates).map(|(&i, c)| &c[i]).collect();
        let result = analyze_group(&specs, r)?;
        if runs_in_body_order(&result) {
            let pieces: usize = result
                .rp
                .choppings
                .iter()
                .map(|c| c.pieces.iter().filter(|p| p.ranks.is_some()).count())
                .sum();
            let cost: usize = specs
                .iter()
                .zip(&result.rp.choppings)
                .map(|(s, c)| larger_first_cost(s, c))
                .sum();
            let score = (cost, -(pieces as isize));
            if best.as_ref().is_none_or(|(b, _)| score < *b) {
                best = Some((
                    score,
                    Choice {
                        picks: picks.clone(),
                        result,
                    },
                ));
            }
        }
        next(&mut picks, candidates);
    }
    Ok(best.map(|(_, c)| c))
}

/// The next combination, the last procedure's choice varying fastest.
fn next(picks: &mut [usize], candidates: &[Vec<ProcSpec>]) {
    for (p, c) in picks.iter_mut().zip(candidates).rev() {
        *p += 1;
        if *p < c.len() {
            return;
        }
        *p = 0;
    }
}
