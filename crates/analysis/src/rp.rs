//! Runtime Pipelining chopping (seed 000 section 4.4.1, Fig. 4.4; seed 002
//! section 5.1): ranks for the conflicting objects of a group, and each
//! procedure cut into rank-ordered pieces.
//!
//! ```text
//!  group specs --conflict::group_conflicts--> C-edges --objects--> ranked objects
//!       |                                                            |
//!       |  step 1: object dependency graph (an edge a -> b for every  |
//!       |          dependency between an op on a and a later op on b) |
//!       |          SCCs merged, topological order = ranks <-----------'
//!       v
//!  step 2, per procedure: one vertex per rank it touches (chained in rank
//!          order) + one per free op, dependency edges, SCCs merged,
//!          topological order = pieces; consecutive free pieces coalesce
//! ```
//!
//! What it guarantees (Theorem 4.4.5, checked by [`check_chopping`] on every
//! result): every operation lands in exactly one piece; a piece's ranked
//! operations share one rank (GR1); ranked pieces run in strictly
//! increasing rank (GR2); if op b depends on op a, a runs before b (in an
//! earlier piece, or earlier in the same piece; loop bodies share a piece).
//! Hence every C-edge joins pieces of equal rank, which the run-time rule
//! of DESIGN 4.4 orders.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use brine_core::TableId;

use crate::conflict::{
    group_conflicts, objects, Conflict, Object, OpRef, Refinements, Removal, RemovedEdge,
};
use crate::error::{AnalysisError, Result};
use crate::graph::Digraph;
use crate::spec::ProcSpec;

/// A piece of a chopped procedure: operations (indices into the spec) in
/// the order they run, and the range of ranks its operations touch (`None`
/// when it touches only free objects). Runtime Pipelining pieces have
/// `lo == hi`; the first piece of a rollback-safe chopping may span ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub ops: Vec<usize>,
    pub ranks: Option<(usize, usize)>,
}

impl Piece {
    /// The piece's rank, when it has exactly one.
    pub fn rank(&self) -> Option<usize> {
        self.ranks.filter(|(lo, hi)| lo == hi).map(|(lo, _)| lo)
    }
}

/// One procedure's chopping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcChopping {
    pub procedure: String,
    pub pieces: Vec<Piece>,
}

impl ProcChopping {
    /// `(piece, position in piece)` of an operation.
    pub fn locate(&self, op: usize) -> Option<(usize, usize)> {
        self.pieces
            .iter()
            .enumerate()
            .find_map(|(p, piece)| piece.ops.iter().position(|&o| o == op).map(|pos| (p, pos)))
    }

    /// Whether running the pieces in order runs the operations in the
    /// body's order (operation indices are execution order), so the body
    /// can run as written.
    pub fn runs_in_body_order(&self) -> bool {
        self.pieces
            .iter()
            .flat_map(|p| &p.ops)
            .collect::<Vec<_>>()
            .is_sorted()
    }

    /// Pieces as lists of operation numbers counted from 1 in execution
    /// order (the notation of seed 000 section 4.6.6: `<1,2><3,4>`).
    pub fn numbered(&self) -> Vec<Vec<usize>> {
        self.pieces
            .iter()
            .map(|p| p.ops.iter().map(|o| o + 1).collect())
            .collect()
    }
}

/// The result of analysing one group.
#[derive(Clone, Debug)]
pub struct RpAnalysis {
    pub procedures: Vec<String>,
    pub refinements: Refinements,
    /// Objects that carry C-edges, and the object of each ranked op.
    pub objects: Vec<Object>,
    pub op_object: BTreeMap<OpRef, usize>,
    /// The step-1 graph over objects, with one witness dependency per edge
    /// (the op pair that created it).
    pub object_graph: Digraph,
    pub edge_witness: BTreeMap<(usize, usize), (OpRef, OpRef)>,
    /// `ranks[r]`: the objects of rank `r` (an SCC of the object graph).
    pub ranks: Vec<Vec<usize>>,
    pub object_rank: Vec<usize>,
    pub conflicts: Vec<Conflict>,
    pub removed: Vec<RemovedEdge>,
    pub choppings: Vec<ProcChopping>,
}

impl RpAnalysis {
    /// The rank of an operation, `None` if it is free.
    pub fn op_rank(&self, o: OpRef) -> Option<usize> {
        self.op_object.get(&o).map(|&ob| self.object_rank[ob])
    }
}

/// Runs both steps of the algorithm on a group.
pub fn runtime_pipelining(specs: &[&ProcSpec], r: Refinements) -> Result<RpAnalysis> {
    let (conflicts, removed) = group_conflicts(specs, r);
    let objs = objects(specs, &conflicts, r);
    let n_obj = objs.list.len();

    // Step 1.a: object dependency graph.
    let mut g = Digraph::new(n_obj);
    let mut edge_witness = BTreeMap::new();
    for (p, s) in specs.iter().enumerate() {
        for (i, j) in s.deps() {
            let (a, b) = (OpRef { proc: p, op: i }, OpRef { proc: p, op: j });
            if let (Some(&oa), Some(&ob)) = (objs.of_op.get(&a), objs.of_op.get(&b)) {
                if oa != ob {
                    g.add_edge(oa, ob);
                    edge_witness.entry((oa, ob)).or_insert((a, b));
                }
            }
        }
    }
    // Step 1.b: SCCs merged, topological order gives the ranks.
    let (comp, ncomp) = g.sccs();
    let cg = g.condense(&comp, ncomp);
    let mut weight = vec![0usize; ncomp];
    let mut first = vec![
        OpRef {
            proc: usize::MAX,
            op: usize::MAX
        };
        ncomp
    ];
    for (&o, &ob) in &objs.of_op {
        let c = comp[ob];
        weight[c] += 1;
        first[c] = first[c].min(o);
    }
    let order = cg
        .topo_order_by(|c| {
            let w = if r.larger_first { weight[c] } else { 0 };
            (Reverse(w), first[c])
        })
        .ok_or_else(|| AnalysisError::Internal("condensed object graph has a cycle".into()))?;
    let mut rank_of_comp = vec![0usize; ncomp];
    for (rank, &c) in order.iter().enumerate() {
        rank_of_comp[c] = rank;
    }
    let object_rank: Vec<usize> = (0..n_obj).map(|o| rank_of_comp[comp[o]]).collect();
    let mut ranks = vec![Vec::new(); ncomp];
    for (o, &rk) in object_rank.iter().enumerate() {
        ranks[rk].push(o);
    }

    // Free operations that still share rows with the group's writes: the
    // refinements that made them free (different columns, commutative
    // increments) hold for the analysis, but the lock table locks rows.
    let row_shared: BTreeSet<OpRef> = removed
        .iter()
        .filter(|e| e.why != Removal::UniqueKeys)
        .flat_map(|e| [e.a, e.b])
        .collect();

    // Step 1.c and step 2, per procedure.
    let mut choppings = Vec::with_capacity(specs.len());
    for (p, s) in specs.iter().enumerate() {
        let op_rank = |i: usize| {
            objs.of_op
                .get(&OpRef { proc: p, op: i })
                .map(|&ob| object_rank[ob])
        };
        let shared = |i: usize| row_shared.contains(&OpRef { proc: p, op: i });
        let chopping = order_pieces(s, op_rank, shared, r.larger_first)?;
        check_chopping(s, &chopping, op_rank, false)
            .map_err(|e| AnalysisError::Internal(format!("{}: {e}", s.name)))?;
        choppings.push(chopping);
    }
    let analysis = RpAnalysis {
        procedures: specs.iter().map(|s| s.name.clone()).collect(),
        refinements: r,
        objects: objs.list,
        op_object: objs.of_op,
        object_graph: g,
        edge_witness,
        ranks,
        object_rank,
        conflicts,
        removed,
        choppings,
    };
    // Every remaining C-edge joins operations of one rank.
    for c in &analysis.conflicts {
        if analysis.op_rank(c.a).is_none() || analysis.op_rank(c.a) != analysis.op_rank(c.b) {
            return Err(AnalysisError::Internal(format!(
                "C-edge {:?}-{:?} crosses ranks",
                c.a, c.b
            )));
        }
    }
    Ok(analysis)
}

/// Step 1.c and step 2 for one procedure: given each op's rank (`None`:
/// free) and whether it shares rows with the group's writes, the pieces in
/// execution order.
fn order_pieces(
    s: &ProcSpec,
    op_rank: impl Fn(usize) -> Option<usize>,
    row_shared: impl Fn(usize) -> bool,
    larger_first: bool,
) -> Result<ProcChopping> {
    let n = s.ops.len();
    // Vertices: one per distinct rank (in rank order), then one per free op.
    let ranks: BTreeSet<usize> = (0..n).filter_map(&op_rank).collect();
    let ranks: Vec<usize> = ranks.into_iter().collect();
    let mut vertex_of = vec![0usize; n];
    let mut vertex_rank: Vec<Option<usize>> = ranks.iter().map(|&r| Some(r)).collect();
    for (i, v) in vertex_of.iter_mut().enumerate() {
        match op_rank(i) {
            Some(r) => *v = ranks.iter().position(|&x| x == r).unwrap_or_default(),
            None => {
                *v = vertex_rank.len();
                vertex_rank.push(None);
            }
        }
    }
    let nv = vertex_rank.len();
    let mut g = Digraph::new(nv);
    for k in 1..ranks.len() {
        g.add_edge(k - 1, k);
    }
    for (i, j) in s.deps() {
        g.add_edge(vertex_of[i], vertex_of[j]);
    }
    let (comp, ncomp) = g.sccs();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); ncomp];
    for i in 0..n {
        members[comp[vertex_of[i]]].push(i);
    }
    let mut comp_rank: Vec<Option<usize>> = vec![None; ncomp];
    for (v, r) in vertex_rank.iter().enumerate() {
        if let Some(r) = r {
            if let Some(prev) = comp_rank[comp[v]] {
                // Lemma 4.4.1 says this cannot happen with closed
                // dependencies; an error here is a bug in step 1.
                return Err(AnalysisError::Internal(format!(
                    "{}: step 2 merged ranks {prev} and {r}",
                    s.name
                )));
            }
            comp_rank[comp[v]] = Some(*r);
        }
    }
    let cg = g.condense(&comp, ncomp);
    let order = cg
        .topo_order_by(|c| {
            let size = if larger_first { members[c].len() } else { 0 };
            (
                Reverse(size),
                members[c].iter().min().copied().unwrap_or(usize::MAX),
            )
        })
        .ok_or_else(|| AnalysisError::Internal(format!("{}: step-2 graph has a cycle", s.name)))?;
    let mut pieces: Vec<Piece> = Vec::new();
    for c in order {
        if members[c].is_empty() {
            continue;
        }
        let mut ops = members[c].clone();
        ops.sort_unstable();
        let ranks = comp_rank[c].map(|r| (r, r));
        // Free operations between two ranked pieces have nothing to order
        // among themselves beyond program order, so they may share a
        // piece; but a piece holds its row locks to its end, so an
        // operation on rows the group also writes shares its piece only
        // with operations on the same tables (payment's `ytd` increment
        // and the read of the names beside it), and others run their own
        // round trips without holding that row.
        let tables = |ops: &[usize]| -> BTreeSet<TableId> {
            ops.iter().map(|&o| s.ops[o].access.table).collect()
        };
        let shared = |ops: &[usize]| ops.iter().any(|&o| row_shared(o));
        match pieces.last_mut() {
            Some(last)
                if last.ranks.is_none()
                    && ranks.is_none()
                    && ((!shared(&last.ops) && !shared(&ops))
                        || tables(&last.ops) == tables(&ops)) =>
            {
                last.ops.extend(ops);
            }
            _ => pieces.push(Piece { ops, ranks }),
        }
    }
    Ok(ProcChopping {
        procedure: s.name.clone(),
        pieces,
    })
}

/// Checks a chopping of `s` against Theorem 4.4.5: a partition of the ops;
/// each piece's `ranks` is the range of its ops' ranks; GR1 (one rank per
/// piece; with `first_may_span`, the first piece may span several, as in a
/// rollback-safe chopping); GR2 (ranked pieces strictly increasing); and
/// every dependency respected. Returns what is violated.
pub fn check_chopping(
    s: &ProcSpec,
    c: &ProcChopping,
    op_rank: impl Fn(usize) -> Option<usize>,
    first_may_span: bool,
) -> std::result::Result<(), String> {
    let n = s.ops.len();
    let mut seen = vec![0usize; n];
    for p in &c.pieces {
        if p.ops.is_empty() {
            return Err("an empty piece".into());
        }
        for &o in &p.ops {
            if o >= n {
                return Err(format!("piece names op {o} of {n}"));
            }
            seen[o] += 1;
        }
    }
    if let Some(o) = seen.iter().position(|&k| k != 1) {
        return Err(format!("op `{}` is in {} pieces", s.ops[o].name, seen[o]));
    }
    let mut last_hi: Option<usize> = None;
    for (k, p) in c.pieces.iter().enumerate() {
        let rs: BTreeSet<usize> = p.ops.iter().filter_map(|&o| op_rank(o)).collect();
        let range = rs.first().copied().zip(rs.last().copied());
        if range != p.ranks {
            return Err(format!(
                "piece {k} claims ranks {:?} but its ops have {:?}",
                p.ranks, range
            ));
        }
        if rs.len() > 1 && !(first_may_span && k == 0) {
            return Err(format!("GR1: piece {k} touches ranks {rs:?}"));
        }
        if let Some((lo, hi)) = range {
            if let Some(prev) = last_hi {
                if lo <= prev {
                    return Err(format!(
                        "GR2: piece {k} (ranks {lo}..={hi}) runs after a piece of rank {prev}"
                    ));
                }
            }
            last_hi = Some(hi);
        }
    }
    for (i, j) in s.deps() {
        let (Some(a), Some(b)) = (c.locate(i), c.locate(j)) else {
            return Err("an op is missing".into());
        };
        let ok = a < b || (a.0 == b.0 && s.in_loop_with(i, j));
        if !ok {
            return Err(format!(
                "dependency `{}` -> `{}` runs backwards",
                s.ops[i].name, s.ops[j].name
            ));
        }
    }
    Ok(())
}
