//! brine's static analysis for Callas' Runtime Pipelining (DESIGN section
//! 5; seed 000 section 4.4, seed 002 sections 5-6): given a group of
//! procedures, rank the data they conflict on and cut each procedure into
//! rank-ordered pieces; plus classic transaction chopping as the comparison
//! point, and the rollback-safe variant the runtime's safe mode uses. And,
//! for Elia, operation partitioning (seed 004 Algorithm 1, [`elia`]): from
//! the same specs, each procedure's partitioning parameters and class.
//!
//! ```text
//!  Application (DDL + ProcSource) + ProcNotes
//!        |  spec::ProcSpec::from_source: descriptors, execution order,
//!        v  dependencies (every statement depends on every earlier read)
//!  ProcSpec ---------------------------+------------------------------.
//!        |  rp::runtime_pipelining     | classic::classic_chopping    |
//!        v  (conflict: C-edges,        v (SC-graph, finest chopping)  |
//!  RpAnalysis: ranks, pieces     ProcChopping                          |
//!        |  safe::rollback_safe                                        |
//!        v                                                             |
//!  safe-mode pieces        report: text and DOT  <---------------------'
//! ```
//!
//! What it guarantees: every chopping it returns has been checked by
//! [`rp::check_chopping`]: each operation in exactly one piece, one rank per
//! piece (GR1; the first piece of a safe-mode chopping may span ranks),
//! ranked pieces in increasing rank (GR2), every declared or default
//! dependency respected; and every remaining C-edge joins operations of one
//! rank. A violation is an `AnalysisError::Internal`, never a silent
//! result. The analysis reads only access descriptors, statement order and
//! notes; it never runs a body.

pub mod classic;
pub mod conflict;
pub mod elia;
pub mod error;
pub mod graph;
pub mod order;
pub mod report;
pub mod rp;
pub mod safe;
pub mod spec;
pub mod workloads;

pub use conflict::{OpRef, Refinements};
pub use elia::{elia_plan, EliaPlan, OpClass, ProcPartition};
pub use error::{AnalysisError, Result};
pub use order::{choose_orderings, Choice};
pub use rp::{check_chopping, runtime_pipelining, Piece, ProcChopping, RpAnalysis};
pub use spec::{specs_from_sources, Access, Bound, Op, ProcNotes, ProcSource, ProcSpec, Selection};

/// Everything `brine analyze` shows about one group.
#[derive(Clone, Debug)]
pub struct GroupResult {
    pub rp: RpAnalysis,
    /// The rollback-safe variant of each procedure's chopping.
    pub safe: Vec<ProcChopping>,
    /// An SC-cycle through C-edges between different procedures of the
    /// group (one instance each), described; `None` if there is none.
    pub cross_cycle: Option<String>,
    /// The same test with column-level analysis off, when it is on: what
    /// the column-level refinement buys.
    pub cross_cycle_compare: Option<(String, Option<String>)>,
    /// An SC-cycle among two instances of every procedure: the cycles
    /// Runtime Pipelining neutralizes at run time.
    pub instance_cycle: Option<String>,
}

/// Analyses one group with the given refinements.
pub fn analyze_group(specs: &[&ProcSpec], r: Refinements) -> Result<GroupResult> {
    let rp = runtime_pipelining(specs, r)?;
    let mut safe = Vec::with_capacity(specs.len());
    for (p, s) in specs.iter().enumerate() {
        let c = safe::rollback_safe(s, &rp.choppings[p]);
        let op_rank = |i: usize| rp.op_rank(OpRef { proc: p, op: i });
        check_chopping(s, &c, op_rank, true)
            .map_err(|e| AnalysisError::Internal(format!("{} (safe mode): {e}", s.name)))?;
        safe.push(c);
    }
    let one_each: Vec<usize> = (0..specs.len()).collect();
    let cross = |rp: &RpAnalysis| {
        (specs.len() > 1)
            .then(|| classic::find_sc_cycle(specs, &rp.choppings, &one_each, rp.refinements, true))
            .flatten()
    };
    let cross_cycle = cross(&rp);
    let cross_cycle_compare = if r.column_level && specs.len() > 1 {
        let off = Refinements {
            column_level: false,
            ..r
        };
        Some((
            "column-level off".to_string(),
            cross(&runtime_pipelining(specs, off)?),
        ))
    } else {
        None
    };
    let instance_cycle = classic::find_sc_cycle(
        specs,
        &rp.choppings,
        &classic::two_of_each(specs.len()),
        r,
        false,
    );
    Ok(GroupResult {
        rp,
        safe,
        cross_cycle,
        cross_cycle_compare,
        instance_cycle,
    })
}

/// The specs named by `names`, in that order.
pub fn select<'a>(specs: &'a [ProcSpec], names: &[&str]) -> Result<Vec<&'a ProcSpec>> {
    let mut out: Vec<&ProcSpec> = Vec::with_capacity(names.len());
    for n in names {
        let s =
            specs
                .iter()
                .find(|s| s.name == *n)
                .ok_or_else(|| AnalysisError::UnknownProcedure {
                    name: n.to_string(),
                    known: specs
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        if out.iter().any(|o| o.name == s.name) {
            return Err(AnalysisError::DuplicateProcedure(s.name.clone()));
        }
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
