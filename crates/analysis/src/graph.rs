//! Small directed-graph tools the analysis needs: strongly connected
//! components (Tarjan) and a topological order of the condensation that
//! breaks ties by a caller-given priority.
//!
//! Graphs here have at most a few hundred vertices (tables, columns,
//! operations of one procedure), so adjacency sets are plain `BTreeSet`s and
//! the recursion depth of Tarjan's algorithm is bounded by the vertex count.

use std::collections::BTreeSet;

/// A directed graph on vertices `0..n`.
#[derive(Clone, Debug, Default)]
pub struct Digraph {
    succ: Vec<BTreeSet<usize>>,
}

impl Digraph {
    pub fn new(n: usize) -> Digraph {
        Digraph {
            succ: vec![BTreeSet::new(); n],
        }
    }

    pub fn len(&self) -> usize {
        self.succ.len()
    }

    pub fn is_empty(&self) -> bool {
        self.succ.is_empty()
    }

    /// Adds `a -> b`; self-loops are ignored (they never constrain order).
    pub fn add_edge(&mut self, a: usize, b: usize) {
        if a != b {
            self.succ[a].insert(b);
        }
    }

    pub fn succ(&self, a: usize) -> &BTreeSet<usize> {
        &self.succ[a]
    }

    pub fn edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.succ
            .iter()
            .enumerate()
            .flat_map(|(a, s)| s.iter().map(move |&b| (a, b)))
    }

    /// Strongly connected components: `comp[v]` for every vertex, and the
    /// number of components. Component ids carry no order.
    pub fn sccs(&self) -> (Vec<usize>, usize) {
        struct Tarjan<'g> {
            g: &'g Digraph,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            comp: Vec<usize>,
            ncomp: usize,
        }
        impl Tarjan<'_> {
            fn visit(&mut self, v: usize) {
                self.index[v] = Some(self.next);
                self.low[v] = self.next;
                self.next += 1;
                self.stack.push(v);
                self.on_stack[v] = true;
                for &w in self.g.succ(v) {
                    match self.index[w] {
                        None => {
                            self.visit(w);
                            self.low[v] = self.low[v].min(self.low[w]);
                        }
                        Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                        Some(_) => {}
                    }
                }
                if Some(self.low[v]) == self.index[v] {
                    while let Some(w) = self.stack.pop() {
                        self.on_stack[w] = false;
                        self.comp[w] = self.ncomp;
                        if w == v {
                            break;
                        }
                    }
                    self.ncomp += 1;
                }
            }
        }
        let n = self.len();
        let mut t = Tarjan {
            g: self,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            comp: vec![0; n],
            ncomp: 0,
        };
        for v in 0..n {
            if t.index[v].is_none() {
                t.visit(v);
            }
        }
        (t.comp, t.ncomp)
    }

    /// The condensation: one vertex per component, an edge between
    /// components wherever an edge joins their members.
    pub fn condense(&self, comp: &[usize], ncomp: usize) -> Digraph {
        let mut c = Digraph::new(ncomp);
        for (a, b) in self.edges() {
            c.add_edge(comp[a], comp[b]);
        }
        c
    }

    /// A topological order of an acyclic graph that, among the vertices
    /// ready at each step, takes the one with the smallest `key`. `None` if
    /// the graph has a cycle.
    pub fn topo_order_by<K: Ord>(&self, key: impl Fn(usize) -> K) -> Option<Vec<usize>> {
        let n = self.len();
        let mut indeg = vec![0usize; n];
        for (_, b) in self.edges() {
            indeg[b] += 1;
        }
        let mut ready: Vec<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
        let mut out = Vec::with_capacity(n);
        while !ready.is_empty() {
            let (pos, _) = ready.iter().enumerate().min_by_key(|(_, &v)| key(v))?;
            let v = ready.swap_remove(pos);
            out.push(v);
            for &w in self.succ(v) {
                indeg[w] -= 1;
                if indeg[w] == 0 {
                    ready.push(w);
                }
            }
        }
        (out.len() == n).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sccs_merge_cycles_only() {
        let mut g = Digraph::new(5);
        g.add_edge(0, 1);
        g.add_edge(1, 0);
        g.add_edge(1, 2);
        g.add_edge(2, 3);
        g.add_edge(3, 2);
        let (comp, n) = g.sccs();
        assert_eq!(n, 3);
        assert_eq!(comp[0], comp[1]);
        assert_eq!(comp[2], comp[3]);
        assert_ne!(comp[0], comp[2]);
        assert_ne!(comp[4], comp[0]);
        let c = g.condense(&comp, n);
        let order = c.topo_order_by(|v| v).expect("condensation is acyclic");
        let pos = |v: usize| order.iter().position(|&x| x == comp[v]);
        assert!(pos(0) < pos(2));
    }

    #[test]
    fn topo_order_detects_cycles_and_honours_keys() {
        let mut g = Digraph::new(3);
        g.add_edge(0, 1);
        g.add_edge(1, 0);
        assert!(g.topo_order_by(|v| v).is_none());
        let mut g = Digraph::new(3);
        g.add_edge(2, 1);
        assert_eq!(g.topo_order_by(|v| v), Some(vec![0, 2, 1]));
        assert_eq!(g.topo_order_by(std::cmp::Reverse), Some(vec![2, 1, 0]));
    }
}
