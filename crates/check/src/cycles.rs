//! Cycle search on the serialization graph: Tarjan's strongly connected
//! components, then breadth-first searches for short cycles inside one
//! component. Nothing here enumerates cycles: every search is linear in the
//! size of the component it runs on.

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
