//! Cycle search on the serialization graph: Tarjan's strongly connected
//! components, then breadth-first searches for short cycles inside one
//! component. Nothing here enumerates cycles: every search is linear in the
//! size of the component it runs on.
//!
//! Cycles with no two adjacent anti-dependency edges (G-nonadjacent, which
//! snapshot isolation forbids) are found exactly in a graph of two copies
//! of every node, one per kind of the edge a walk reached it by:
//!
//! ```text
//!   v.dep ──dependency──► w.dep      v.anti ──dependency──► w.dep
//!   v.dep ──anti-dep────► w.anti     (no anti-dep out of v.anti)
//! ```
//!
//! A cycle there is a closed walk that never takes two anti-dependencies
//! in a row, wrapping around included (the walk ends in the copy it began
//! in). `Via` edges (hops through a run of increments, standing for the
//! edge that entered the run) keep the copy they leave.

use std::collections::{HashMap, VecDeque};

use crate::report::EdgeKind;

/// A graph over nodes `0..n` whose edges carry a kind and the index of the
/// checker's edge record they stand for.
#[derive(Debug, Default)]
pub struct Graph {
    /// `adj[v]` = `(to, kind, edge index)`.
    pub adj: Vec<Vec<(u32, EdgeKind, u32)>>,
}

/// Which edges a search may use.
pub type Filter<'a> = &'a dyn Fn(EdgeKind) -> bool;

const UNVISITED: u32 = u32::MAX;

impl Graph {
    pub fn with_nodes(n: usize) -> Graph {
        Graph {
            adj: vec![Vec::new(); n],
        }
    }

    pub fn len(&self) -> usize {
        self.adj.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    /// The strongly connected components with more than one node, using
    /// only edges `allow` accepts (iterative Tarjan; no recursion, so deep
    /// graphs cannot overflow the stack).
    pub fn sccs(&self, allow: Filter<'_>) -> Vec<Vec<u32>> {
        let n = self.adj.len();
        let mut index = vec![UNVISITED; n];
        let mut low = vec![0u32; n];
        let mut on_stack = vec![false; n];
        let mut stack: Vec<u32> = Vec::new();
        let mut call: Vec<(u32, usize)> = Vec::new();
        let mut counter = 0u32;
        let mut out = Vec::new();
        for root in 0..n as u32 {
            if index[root as usize] != UNVISITED {
                continue;
            }
            index[root as usize] = counter;
            low[root as usize] = counter;
            counter += 1;
            stack.push(root);
            on_stack[root as usize] = true;
            call.push((root, 0));
            while let Some(&mut (v, ref mut pos)) = call.last_mut() {
                let adj = &self.adj[v as usize];
                if *pos < adj.len() {
                    let (w, kind, _) = adj[*pos];
                    *pos += 1;
                    if !allow(kind) {
                        continue;
                    }
                    if index[w as usize] == UNVISITED {
                        index[w as usize] = counter;
                        low[w as usize] = counter;
                        counter += 1;
                        stack.push(w);
                        on_stack[w as usize] = true;
                        call.push((w, 0));
                    } else if on_stack[w as usize] {
                        low[v as usize] = low[v as usize].min(index[w as usize]);
                    }
                } else {
                    call.pop();
                    if let Some(&(u, _)) = call.last() {
                        low[u as usize] = low[u as usize].min(low[v as usize]);
                    }
                    if low[v as usize] == index[v as usize] {
                        let mut comp = Vec::new();
                        while let Some(w) = stack.pop() {
                            on_stack[w as usize] = false;
                            comp.push(w);
                            if w == v {
                                break;
                            }
                        }
                        if comp.len() > 1 {
                            comp.sort_unstable();
                            out.push(comp);
                        }
                    }
                }
            }
        }
        out
    }

    /// A topological position of every node over allowed edges, or `None`
    /// if those edges have a cycle (Kahn's algorithm).
    pub fn topo_order(&self, allow: Filter<'_>) -> Option<Vec<u32>> {
        let n = self.adj.len();
        let mut indeg = vec![0u32; n];
        for edges in &self.adj {
            for &(w, kind, _) in edges {
                if allow(kind) {
                    indeg[w as usize] += 1;
                }
            }
        }
        let mut ready: Vec<u32> = (0..n as u32).filter(|&v| indeg[v as usize] == 0).collect();
        let mut pos = vec![u32::MAX; n];
        let mut next = 0u32;
        while let Some(v) = ready.pop() {
            pos[v as usize] = next;
            next += 1;
            for &(w, kind, _) in &self.adj[v as usize] {
                if allow(kind) {
                    indeg[w as usize] -= 1;
                    if indeg[w as usize] == 0 {
                        ready.push(w);
                    }
                }
            }
        }
        (next as usize == n).then_some(pos)
    }

    /// The subgraph induced by `nodes` (renumbered `0..nodes.len()` in the
    /// given order), keeping edge kinds and edge indices.
    pub fn induced(&self, nodes: &[u32]) -> Graph {
        let local: HashMap<u32, u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u32))
            .collect();
        let mut g = Graph::with_nodes(nodes.len());
        for (i, &v) in nodes.iter().enumerate() {
            for &(w, kind, e) in &self.adj[v as usize] {
                if let Some(&lw) = local.get(&w) {
                    g.adj[i].push((lw, kind, e));
                }
            }
        }
        g
    }

    /// The shortest path from `from` to `to` over allowed edges, as the
    /// list of `(from, to, kind, edge index)` hops; `from == to` finds the
    /// shortest cycle through `from`.
    pub fn shortest_path(
        &self,
        from: u32,
        to: u32,
        allow: Filter<'_>,
    ) -> Option<Vec<(u32, u32, EdgeKind, u32)>> {
        self.shortest_path_within(from, to, allow, &|_| true)
    }

    /// [`Graph::shortest_path`] visiting only nodes `keep` accepts.
    pub fn shortest_path_within(
        &self,
        from: u32,
        to: u32,
        allow: Filter<'_>,
        keep: &dyn Fn(u32) -> bool,
    ) -> Option<Vec<(u32, u32, EdgeKind, u32)>> {
        let n = self.adj.len();
        // parent[w] = (predecessor, kind, edge index)
        let mut parent: Vec<Option<(u32, EdgeKind, u32)>> = vec![None; n];
        let mut queue = VecDeque::new();
        queue.push_back(from);
        while let Some(v) = queue.pop_front() {
            for &(w, kind, e) in &self.adj[v as usize] {
                if !allow(kind) || w == from && from != to || !keep(w) {
                    continue;
                }
                if parent[w as usize].is_some() {
                    continue;
                }
                parent[w as usize] = Some((v, kind, e));
                if w == to {
                    let mut path = Vec::new();
                    let mut cur = to;
                    // Walk back; when from == to the walk stops at the
                    // first hop out of `from`.
                    loop {
                        let (p, k, e) = parent[cur as usize]?;
                        path.push((p, cur, k, e));
                        if p == from {
                            break;
                        }
                        cur = p;
                        if path.len() > n {
                            return None;
                        }
                    }
                    path.reverse();
                    return Some(path);
                }
                queue.push_back(w);
            }
        }
        None
    }

    /// The graph of walks that never take two anti-dependency edges in a
    /// row (see the module docs): node `2v` is `v` reached by a dependency
    /// edge, `2v + 1` reached by an anti-dependency; edge kinds and
    /// indices are kept.
    pub fn nonadjacent_walks(&self) -> Graph {
        let mut g = Graph::with_nodes(2 * self.len());
        for (v, edges) in self.adj.iter().enumerate() {
            let (dep, anti) = (2 * v, 2 * v + 1);
            for &(w, kind, e) in edges {
                let (w_dep, w_anti) = (2 * w, 2 * w + 1);
                if kind.is_anti() {
                    g.adj[dep].push((w_anti, kind, e));
                } else if kind == EdgeKind::Via {
                    g.adj[dep].push((w_dep, kind, e));
                    g.adj[anti].push((w_anti, kind, e));
                } else {
                    g.adj[dep].push((w_dep, kind, e));
                    g.adj[anti].push((w_dep, kind, e));
                }
            }
        }
        g
    }

    /// The shortest closed walk with an anti-dependency edge and no two
    /// adjacent ones that a BFS from up to `starts_max` nodes finds, or
    /// `None` when there is none at all (exact: the search runs on the
    /// components of [`Graph::nonadjacent_walks`] that hold an
    /// anti-dependency). Hops are in this graph's node ids.
    ///
    /// Where the dependency edges are acyclic (no G1c), every such walk
    /// holds a simple cycle with the same property ([`simple_nonadjacent`]
    /// finds it); with a dependency cycle a walk may join it to a cycle
    /// with adjacent anti-dependencies, so callers search only components
    /// without one.
    pub fn nonadjacent_cycle(&self, starts_max: usize) -> Option<Vec<(u32, u32, EdgeKind, u32)>> {
        let walks = self.nonadjacent_walks();
        let all = |_: EdgeKind| true;
        let mut best: Option<Vec<(u32, u32, EdgeKind, u32)>> = None;
        let mut starts = 0;
        // A node reached by an anti-dependency lies on a cycle of its
        // component only through one (Via edges form no cycle), so the
        // components holding one are exactly those with such walks.
        'search: for comp in walks.sccs(&all) {
            for &s in comp.iter().filter(|&&s| s % 2 == 1) {
                if starts == starts_max {
                    break 'search;
                }
                starts += 1;
                if let Some(cycle) = walks.shortest_path(s, s, &all) {
                    if best.as_ref().is_none_or(|b| cycle.len() < b.len()) {
                        best = Some(cycle);
                    }
                }
            }
        }
        best.map(|c| {
            c.into_iter()
                .map(|(a, b, kind, e)| (a / 2, b / 2, kind, e))
                .collect()
        })
    }
}

/// Whether closed walk `walk` has an anti-dependency edge and no two
/// adjacent ones, the last and the first included.
pub fn is_nonadjacent<T>(walk: &[T], anti: impl Fn(&T) -> bool) -> bool {
    let n = walk.len();
    walk.iter().any(&anti) && (0..n).all(|i| !(anti(&walk[i]) && anti(&walk[(i + 1) % n])))
}

/// A simple cycle inside closed walk `walk` (edges in order, `node` the
/// node each leaves) that, like the walk, has an anti-dependency and no two
/// adjacent ones. Splitting a walk at a node it visits twice gives two
/// closed walks, and only the pairs at the split change: if one half now
/// wraps from an anti-dependency into another, the other half's new pairs
/// were neighbours of those in the walk, so they are not both
/// anti-dependencies; and a half without any anti-dependency would be a
/// dependency cycle, which the caller has ruled out. Should neither half
/// qualify (the caller's promise broken), the walk is returned as it is.
pub fn simple_nonadjacent<T: Clone>(
    mut walk: Vec<T>,
    node: impl Fn(&T) -> u32,
    anti: impl Fn(&T) -> bool,
) -> Vec<T> {
    'split: loop {
        let mut first: HashMap<u32, usize> = HashMap::new();
        for i in 0..walk.len() {
            let Some(&j) = first.get(&node(&walk[i])) else {
                first.insert(node(&walk[i]), i);
                continue;
            };
            let inner: Vec<T> = walk[j..i].to_vec();
            let outer: Vec<T> = walk[i..].iter().chain(&walk[..j]).cloned().collect();
            for half in [inner, outer] {
                if is_nonadjacent(&half, &anti) {
                    walk = half;
                    continue 'split;
                }
            }
            return walk;
        }
        return walk;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(n: usize, edges: &[(u32, u32, EdgeKind)]) -> Graph {
        let mut g = Graph::with_nodes(n);
        for (i, &(a, b, k)) in edges.iter().enumerate() {
            g.adj[a as usize].push((b, k, i as u32));
        }
        g
    }

    #[test]
    fn finds_components_and_shortest_cycles() {
        use EdgeKind::*;
        let g = graph(
            6,
            &[
                (0, 1, Ww),
                (1, 2, Wr),
                (2, 0, Rw),
                (1, 0, Rw),
                (3, 4, Ww),
                (4, 5, Ww),
            ],
        );
        let all = |_: EdgeKind| true;
        assert_eq!(g.sccs(&all), vec![vec![0, 1, 2]]);
        let deps = |k: EdgeKind| !k.is_anti();
        assert!(g.sccs(&deps).is_empty());
        let c = g.shortest_path(0, 0, &all).map(|p| p.len());
        assert_eq!(c, Some(2));
        let sub = g.induced(&[2, 0, 1]);
        assert_eq!(sub.sccs(&all), vec![vec![0, 1, 2]]);
        assert_eq!(g.shortest_path(0, 2, &deps).map(|p| p.len()), Some(2));
        assert_eq!(g.shortest_path(3, 3, &all), None);
    }

    /// Every simple cycle of a small graph, as edge lists.
    fn simple_cycles(g: &Graph) -> Vec<Vec<(u32, u32, EdgeKind, u32)>> {
        fn extend(
            g: &Graph,
            start: u32,
            path: &mut Vec<(u32, u32, EdgeKind, u32)>,
            out: &mut Vec<Vec<(u32, u32, EdgeKind, u32)>>,
        ) {
            let v = path.last().map_or(start, |e| e.1);
            for &(w, k, e) in &g.adj[v as usize] {
                if w == start {
                    let mut c = path.clone();
                    c.push((v, w, k, e));
                    out.push(c);
                } else if w > start && !path.iter().any(|p| p.0 == w) {
                    path.push((v, w, k, e));
                    extend(g, start, path, out);
                    path.pop();
                }
            }
        }
        let mut out = Vec::new();
        for s in 0..g.len() as u32 {
            extend(g, s, &mut Vec::new(), &mut out);
        }
        out
    }

    /// On random small graphs whose dependency edges are acyclic, the
    /// search finds a walk exactly when some simple cycle has an
    /// anti-dependency and no two adjacent ones, and the walk it finds
    /// simplifies to such a cycle.
    #[test]
    fn nonadjacent_search_agrees_with_enumerating_cycles() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let anti = |e: &(u32, u32, EdgeKind, u32)| e.2.is_anti();
        let (mut with, mut without) = (0, 0);
        for seed in 0..3000u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let n = rng.gen_range(2..7u32);
            let mut edges = Vec::new();
            for _ in 0..rng.gen_range(1..12) {
                let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
                if a == b {
                    continue;
                }
                // Dependencies only forward: no G1c.
                let kind = if a > b || rng.gen_bool(0.4) {
                    EdgeKind::Rw
                } else if rng.gen_bool(0.5) {
                    EdgeKind::Wr
                } else {
                    EdgeKind::Ww
                };
                edges.push((a, b, kind));
            }
            let g = graph(n as usize, &edges);
            let expected = simple_cycles(&g).iter().any(|c| is_nonadjacent(c, anti));
            let found = g.nonadjacent_cycle(usize::MAX);
            assert_eq!(found.is_some(), expected, "seed {seed}: {edges:?}");
            let Some(walk) = found else {
                without += 1;
                continue;
            };
            with += 1;
            assert!(is_nonadjacent(&walk, anti), "seed {seed}: {walk:?}");
            for (i, e) in walk.iter().enumerate() {
                assert_eq!(e.1, walk[(i + 1) % walk.len()].0, "seed {seed}: {walk:?}");
            }
            let cycle = simple_nonadjacent(walk, |e| e.0, anti);
            assert!(is_nonadjacent(&cycle, anti), "seed {seed}: {cycle:?}");
            let mut nodes: Vec<u32> = cycle.iter().map(|e| e.0).collect();
            nodes.sort_unstable();
            nodes.dedup();
            assert_eq!(
                nodes.len(),
                cycle.len(),
                "seed {seed}: not simple {cycle:?}"
            );
        }
        assert!(
            with > 300 && without > 300,
            "{with} with, {without} without"
        );
    }

    /// Write skew (two adjacent anti-dependencies) is not such a cycle;
    /// two anti-dependencies apart are, and so is one (G-single).
    #[test]
    fn adjacent_anti_dependencies_are_allowed_apart_ones_are_found() {
        use EdgeKind::*;
        let skew = graph(2, &[(0, 1, Rw), (1, 0, Rw)]);
        assert!(skew.nonadjacent_cycle(16).is_none());
        let skew3 = graph(3, &[(0, 1, Rw), (1, 2, Rw), (2, 0, Wr)]);
        assert!(skew3.nonadjacent_cycle(16).is_none());
        let single = graph(2, &[(0, 1, Rw), (1, 0, Ww)]);
        assert_eq!(single.nonadjacent_cycle(16).map(|c| c.len()), Some(2));
        let apart = graph(4, &[(0, 1, Rw), (1, 2, Wr), (2, 3, PredRw), (3, 0, Wr)]);
        assert_eq!(apart.nonadjacent_cycle(16).map(|c| c.len()), Some(4));
        // A hop carries the anti-dependency that entered it: rw then via
        // is one anti-dependency, and another straight after it is adjacent.
        // Node 3 is the hop.
        let hop = graph(4, &[(0, 3, Rw), (3, 1, Via), (1, 2, Rw), (2, 0, Wr)]);
        assert!(hop.nonadjacent_cycle(16).is_none());
        let hop = graph(
            5,
            &[(0, 3, Rw), (3, 1, Via), (1, 2, Wr), (2, 4, Rw), (4, 0, Ww)],
        );
        assert_eq!(hop.nonadjacent_cycle(16).map(|c| c.len()), Some(5));
    }

    #[test]
    fn deep_chains_do_not_overflow() {
        let n = 50_000u32;
        let mut edges: Vec<(u32, u32, EdgeKind)> =
            (0..n - 1).map(|i| (i, i + 1, EdgeKind::Ww)).collect();
        edges.push((n - 1, 0, EdgeKind::Wr));
        let g = graph(n as usize, &edges);
        let s = g.sccs(&|_| true);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].len(), n as usize);
    }
}
