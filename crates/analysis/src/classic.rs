//! Classic transaction chopping (Shasha et al., as restated in seed 000
//! section 4.4): the SC-graph, the SC-cycle test, and the finest chopping
//! that is rollback-safe and free of SC-cycles. It is the comparison point
//! of the TPC-C ladder (TARGETS.md: SC-chopping / + grouping / + RP).
//!
//! ```text
//!  SC-graph: vertices = pieces of transaction instances
//!            S-edges  = between pieces of one instance (a clique)
//!            C-edges  = between pieces of different instances that
//!                       conflict (conflict::judge, same refinements)
//!  SC-cycle: a simple cycle with at least one S-edge and one C-edge
//! ```
//!
//! An SC-cycle exists iff some instance has two distinct pieces joined by a
//! path that uses none of that instance's S-edges: the path leaves through
//! a C-edge, and the S-edge between its ends closes the cycle. That is the
//! test [`find_sc_cycle`] runs, with a breadth-first search per instance.
//!
//! The finest chopping: for each procedure P, start from one piece per
//! operation, with every operation up to the last rollback statement in the
//! first piece and every loop body in one piece; treat every procedure of
//! the set (P included, as a second instance) as one unchopped vertex;
//! merge P's operations that are connected through C-edges in that graph;
//! make pieces contiguous. The union of these per-procedure choppings is
//! the finest SC-cycle-free chopping (Shasha et al. 1995, Theorem 3).

use std::collections::{BTreeSet, VecDeque};

use crate::conflict::{judge, Refinements, Verdict};
use crate::rp::{Piece, ProcChopping};
use crate::spec::ProcSpec;

/// A vertex of an SC-graph: piece `piece` of instance `instance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScNode {
    pub instance: usize,
    pub piece: usize,
}

/// A C-edge of an SC-graph, with one conflicting op pair as its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScEdge {
    pub a: ScNode,
    pub b: ScNode,
    /// `(op of a, op of b)`.
    pub why: (usize, usize),
}

/// An SC-cycle: pieces `path[0]` and `path.last()` belong to one instance
/// (the closing S-edge); consecutive path entries are joined by the
/// listed edges (C-edges, or S-edges inside another instance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScCycle {
    pub path: Vec<ScNode>,
    /// For each step of `path`, the C-edge taken, or `None` for an S-edge.
    pub steps: Vec<Option<ScEdge>>,
}

/// The SC-graph of instances (`instances[k]` indexes `specs` and
/// `choppings`). With `cross_only`, C-edges join only instances of
/// different procedures.
pub struct ScGraph<'a> {
    specs: &'a [&'a ProcSpec],
    choppings: &'a [ProcChopping],
    instances: Vec<usize>,
    c_edges: Vec<ScEdge>,
}

impl<'a> ScGraph<'a> {
    pub fn new(
        specs: &'a [&'a ProcSpec],
        choppings: &'a [ProcChopping],
        instances: &[usize],
        r: Refinements,
        cross_only: bool,
    ) -> ScGraph<'a> {
        let mut c_edges = Vec::new();
        for (u, &pu) in instances.iter().enumerate() {
            for (v, &pv) in instances.iter().enumerate().skip(u + 1) {
                if cross_only && pu == pv {
                    continue;
                }
                for (x, px) in choppings[pu].pieces.iter().enumerate() {
                    for (y, py) in choppings[pv].pieces.iter().enumerate() {
                        let why = px.ops.iter().find_map(|&a| {
                            py.ops.iter().find_map(|&b| {
                                matches!(
                                    judge(&specs[pu].ops[a], &specs[pv].ops[b], r),
                                    Verdict::Conflict { .. }
                                )
                                .then_some((a, b))
                            })
                        });
                        if let Some(why) = why {
                            c_edges.push(ScEdge {
                                a: ScNode {
                                    instance: u,
                                    piece: x,
                                },
                                b: ScNode {
                                    instance: v,
                                    piece: y,
                                },
                                why,
                            });
                        }
                    }
                }
            }
        }
        ScGraph {
            specs,
            choppings,
            instances: instances.to_vec(),
            c_edges,
        }
    }

    pub fn c_edges(&self) -> &[ScEdge] {
        &self.c_edges
    }

    /// The procedure of an instance.
    pub fn procedure(&self, instance: usize) -> &str {
        &self.specs[self.instances[instance]].name
    }

    fn pieces(&self, instance: usize) -> usize {
        self.choppings[self.instances[instance]].pieces.len()
    }

    /// Finds an SC-cycle, if any (the shortest closing path for the first
    /// instance and piece that has one).
    pub fn find_cycle(&self) -> Option<ScCycle> {
        for t in 0..self.instances.len() {
            let n = self.pieces(t);
            if n < 2 {
                continue;
            }
            for x in 0..n {
                if let Some(c) = self.closing_path(t, x) {
                    return Some(c);
                }
            }
        }
        None
    }

    /// A path from piece `x` of instance `t` to another piece of `t` that
    /// uses none of `t`'s S-edges.
    fn closing_path(&self, t: usize, x: usize) -> Option<ScCycle> {
        let start = ScNode {
            instance: t,
            piece: x,
        };
        let mut prev: Vec<(ScNode, ScNode, Option<ScEdge>)> = Vec::new();
        let mut seen: BTreeSet<ScNode> = BTreeSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            if u.instance == t && u != start {
                // Walk back to start.
                let mut path = vec![u];
                let mut steps = Vec::new();
                let mut cur = u;
                while cur != start {
                    let (p, _, e) = prev.iter().find(|(_, to, _)| *to == cur)?.clone();
                    steps.push(e);
                    path.push(p);
                    cur = p;
                }
                path.reverse();
                steps.reverse();
                return Some(ScCycle { path, steps });
            }
            let mut next: Vec<(ScNode, Option<ScEdge>)> = Vec::new();
            for e in &self.c_edges {
                if e.a == u {
                    next.push((e.b, Some(e.clone())));
                } else if e.b == u {
                    next.push((
                        e.a,
                        Some(ScEdge {
                            a: e.b,
                            b: e.a,
                            why: (e.why.1, e.why.0),
                        }),
                    ));
                }
            }
            if u.instance != t {
                for p in 0..self.pieces(u.instance) {
                    if p != u.piece {
                        next.push((
                            ScNode {
                                instance: u.instance,
                                piece: p,
                            },
                            None,
                        ));
                    }
                }
            }
            for (w, e) in next {
                if seen.insert(w) {
                    prev.push((u, w, e));
                    queue.push_back(w);
                }
            }
        }
        None
    }

    /// A one-line account of a cycle: pieces as `proc#instance[piece]`,
    /// C-edges with the conflicting statements.
    pub fn describe(&self, c: &ScCycle) -> String {
        let node = |n: ScNode| {
            format!(
                "{}#{}[{}]",
                self.procedure(n.instance),
                n.instance,
                n.piece + 1
            )
        };
        let mut out = node(c.path[0]);
        for (k, step) in c.steps.iter().enumerate() {
            let to = c.path[k + 1];
            match step {
                Some(e) => {
                    let pa = &self.specs[self.instances[e.a.instance]].ops[e.why.0];
                    let pb = &self.specs[self.instances[e.b.instance]].ops[e.why.1];
                    out.push_str(&format!(
                        " -C({}: {} x {})- {}",
                        pa.access.table_name,
                        pa.name,
                        pb.name,
                        node(to)
                    ));
                }
                None => out.push_str(&format!(" -S- {}", node(to))),
            }
        }
        out.push_str(&format!(" -S- {}", node(c.path[0])));
        out
    }
}

/// Finds an SC-cycle among `instances` of the chopped procedures.
pub fn find_sc_cycle(
    specs: &[&ProcSpec],
    choppings: &[ProcChopping],
    instances: &[usize],
    r: Refinements,
    cross_only: bool,
) -> Option<String> {
    let g = ScGraph::new(specs, choppings, instances, r, cross_only);
    g.find_cycle().map(|c| g.describe(&c))
}

/// Two instances of every procedure: the set whose SC-graph tells whether a
/// chopping is safe when any mix of the procedures may run concurrently.
pub fn two_of_each(n: usize) -> Vec<usize> {
    (0..n).flat_map(|p| [p, p]).collect()
}

/// The finest rollback-safe chopping without SC-cycles of every procedure
/// of `specs`, each chopped against all of them (itself included).
pub fn classic_chopping(specs: &[&ProcSpec], r: Refinements) -> Vec<ProcChopping> {
    let m = specs.len();
    // conflicts_with[p][k] = set of procedures op k of p conflicts with.
    let conflicts_with: Vec<Vec<BTreeSet<usize>>> = specs
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .map(|o| {
                    (0..m)
                        .filter(|&q| {
                            specs[q]
                                .ops
                                .iter()
                                .any(|x| matches!(judge(o, x, r), Verdict::Conflict { .. }))
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    // Procedures joined to each other by some C-edge (whole vertices).
    let mut proc_parent: Vec<usize> = (0..m).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while parent[r] != r {
            r = parent[r];
        }
        let mut c = x;
        while parent[c] != r {
            let n = parent[c];
            parent[c] = r;
            c = n;
        }
        r
    }
    for (p, per_op) in conflicts_with.iter().enumerate() {
        for qs in per_op {
            for &q in qs {
                let (a, b) = (find(&mut proc_parent, p), find(&mut proc_parent, q));
                if a != b {
                    proc_parent[b] = a;
                }
            }
        }
    }
    let proc_comp: Vec<usize> = (0..m).map(|p| find(&mut proc_parent, p)).collect();

    specs
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let n = s.ops.len();
            // Op k joins the component of the whole vertices it has C-edges
            // to; whole vertices joined by C-edges (P's own second instance
            // among them) form one component, so that component names k's
            // piece.
            let comp_of = |k: usize| -> Option<usize> {
                conflicts_with[p][k].iter().next().map(|&q| proc_comp[q])
            };
            // Spans [first, last] per component, then forced spans.
            let mut spans: Vec<(usize, usize)> = Vec::new();
            let comps: BTreeSet<usize> = (0..n).filter_map(comp_of).collect();
            for c in comps {
                let ks: Vec<usize> = (0..n).filter(|&k| comp_of(k) == Some(c)).collect();
                if let (Some(&a), Some(&b)) = (ks.first(), ks.last()) {
                    spans.push((a, b));
                }
            }
            if let Some(last_rb) = (0..n).rev().find(|&k| s.ops[k].rollback) {
                spans.push((0, last_rb));
            }
            for l in s.loops() {
                if let (Some(&a), Some(&b)) = (l.iter().min(), l.iter().max()) {
                    spans.push((a, b));
                }
            }
            // Merge overlapping spans into contiguous pieces.
            let mut cut_after = vec![true; n];
            for (a, b) in spans {
                for c in cut_after.iter_mut().take(b).skip(a) {
                    *c = false;
                }
            }
            let mut pieces = Vec::new();
            let mut cur = Vec::new();
            for (k, &cut) in cut_after.iter().enumerate() {
                cur.push(k);
                if cut {
                    pieces.push(Piece {
                        ops: std::mem::take(&mut cur),
                        ranks: None,
                    });
                }
            }
            ProcChopping {
                procedure: s.name.clone(),
                pieces,
            }
        })
        .collect()
}
