//! Salt's chain search: which BASE transactions an ACID transaction
//! observed through a chain of BASE reads (docs/checker.md, "Salt").
//!
//! ```text
//!   write node (B, op): B's write at position op
//!
//!   (B2, w2) ──► (B1, w1)   B2 read, before position w2, what B1 wrote at w1
//!
//!   ACID A read (B, w) ─► multi-source BFS from all of A's reads at once
//!                         ─► chain-wr B' -> A for every B' reached (≥1 hop)
//! ```
//!
//! A chain `B1 -wr-> B2 -wr-> ... -wr-> A` in which each BASE reader read
//! before the write the next one read is a path in the graph of write
//! nodes above, from the node A read back to a node of B1. The search
//! runs once per ACID transaction from all its reads together; each write
//! node is relayed at most twice per search (see below), so one search is
//! linear in the part of the graph it reaches, whatever the number of
//! reads, and the witness of each edge is a shortest chain held as a link
//! into a shared arena (parent pointers) rather than a copied list.
//!
//! One detail of the rule is per read: a chain that leads from the writer
//! `B` of a version A read back to `B` itself, at or before the write A
//! read, gives no edge from `B` (A's read of that write already orders
//! them); reached from another BASE transaction's write, or at a later
//! write of `B`, it does. A shared search therefore labels each node with
//! the writers of the reads it was reached from, keeping at most two
//! distinct labels: a node with a label other than its own transaction is
//! reached from another writer; a node whose only label is its own
//! transaction is decided by a second, small search among such nodes.
//!
//! Bounds: the checker starts no search once [`CHAIN_EDGES_MAX`] edges or
//! [`CHAIN_LINKS_MAX`] witness links are held (one search adds at most an
//! edge per BASE transaction and two links per write node, plus its
//! fallback's), and the report says how many ACID transactions were left
//! unsearched.

use std::collections::{HashMap, VecDeque};

/// The most chain-wr edges the checker adds for one history.
pub const CHAIN_EDGES_MAX: usize = 1 << 23;
/// The most witness links the searches keep for one history.
pub const CHAIN_LINKS_MAX: usize = 1 << 24;

const NONE: u32 = u32::MAX;

/// One step of a witness chain: `txn` read `version` of `key`; `up` is the
/// link of the step after it (toward the ACID reader), `NONE` at the ACID
/// read itself.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub txn: u32,
    pub key: u32,
    pub version: u64,
    pub up: u32,
}

/// A read by a BASE transaction of another BASE transaction's write.
#[derive(Clone, Copy, Debug)]
pub struct ChainRead {
    /// Position of the read in the reader's program.
    pub op: u32,
    /// The write node it read.
    pub node: u32,
    pub key: u32,
    pub version: u64,
}

/// An edge found: `from` (the BASE writer) -chain-wr-> the searched ACID
/// transaction, through its reader's read of `key` at `version`, with the
/// witness chain starting at `link`.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub from: u32,
    pub key: u32,
    pub version: u64,
    pub link: u32,
}

/// The graph of BASE write nodes, with the search's scratch space.
pub struct ChainGraph {
    /// `(txn, op)` of each write node.
    nodes: Vec<(u32, u32)>,
    index: HashMap<(u32, u32), u32>,
    /// Per transaction, its reads of other BASE transactions' writes, in
    /// program order.
    reads: HashMap<u32, Vec<ChainRead>>,
    marks: Marks,
}

/// Per-search labels of the nodes (valid where `stamp` is the search's
/// number).
struct Marks {
    generation: u32,
    stamp: Vec<u32>,
    /// Up to two `(label, link)` slots.
    slots: Vec<[(u32, u32); 2]>,
    touched: Vec<u32>,
    /// Per transaction: the search number that emitted its edge.
    emitted: HashMap<u32, u32>,
    /// The second search's visits and links.
    fallback_generation: u32,
    fallback_stamp: Vec<u32>,
    fallback_link: Vec<u32>,
}

impl Marks {
    fn labels(&self, n: u32) -> [(u32, u32); 2] {
        if self.stamp[n as usize] == self.generation {
            self.slots[n as usize]
        } else {
            [(NONE, NONE); 2]
        }
    }

    /// Whether `label` is the only label of node `n`.
    fn only(&self, n: u32, label: u32) -> bool {
        let s = self.labels(n);
        s[0].0 == label && s[1].0 == NONE
    }

    /// Adds `label` to node `n`; false when it has it or has two.
    fn add(&mut self, n: u32, label: u32, link: u32) -> bool {
        let i = n as usize;
        if self.stamp[i] != self.generation {
            self.stamp[i] = self.generation;
            self.slots[i] = [(label, link), (NONE, NONE)];
            self.touched.push(n);
            return true;
        }
        let s = &mut self.slots[i];
        if s[0].0 == label || s[1].0 != NONE {
            return false;
        }
        s[1] = (label, link);
        true
    }

    fn emitted(&self, txn: u32) -> bool {
        self.emitted.get(&txn) == Some(&self.generation)
    }

    /// Marks `txn`'s edge emitted; false when it already was.
    fn emit_once(&mut self, txn: u32) -> bool {
        let g = self.generation;
        let e = self.emitted.entry(txn).or_insert(0);
        if *e == g {
            return false;
        }
        *e = g;
        true
    }
}

/// The reads of `node`'s transaction before its write.
fn before<'r>(
    nodes: &[(u32, u32)],
    reads: &'r HashMap<u32, Vec<ChainRead>>,
    node: u32,
) -> &'r [ChainRead] {
    let (txn, op) = nodes[node as usize];
    match reads.get(&txn) {
        Some(r) => &r[..r.partition_point(|x| x.op < op)],
        None => &[],
    }
}

impl ChainGraph {
    pub fn new() -> ChainGraph {
        ChainGraph {
            nodes: Vec::new(),
            index: HashMap::new(),
            reads: HashMap::new(),
            marks: Marks {
                generation: 0,
                stamp: Vec::new(),
                slots: Vec::new(),
                touched: Vec::new(),
                emitted: HashMap::new(),
                fallback_generation: 0,
                fallback_stamp: Vec::new(),
                fallback_link: Vec::new(),
            },
        }
    }

    /// The node of `txn`'s write at position `op`, made on first use.
    pub fn node(&mut self, txn: u32, op: u32) -> u32 {
        if let Some(&n) = self.index.get(&(txn, op)) {
            return n;
        }
        let n = self.nodes.len() as u32;
        self.nodes.push((txn, op));
        self.index.insert((txn, op), n);
        let m = &mut self.marks;
        m.stamp.push(0);
        m.slots.push([(NONE, NONE); 2]);
        m.fallback_stamp.push(0);
        m.fallback_link.push(NONE);
        n
    }

    /// Records a read by `reader`; reads must come in program order.
    pub fn add_read(&mut self, reader: u32, read: ChainRead) {
        self.reads.entry(reader).or_default().push(read);
    }

    /// Searches from the write nodes one ACID transaction read (`starts`:
    /// node and the link of that read), appending witness links to
    /// `links` and returning the edges, each BASE writer once.
    pub fn search(&mut self, starts: &[(u32, Link)], links: &mut Vec<Link>) -> Vec<Found> {
        let Self {
            nodes,
            reads,
            marks,
            ..
        } = self;
        marks.generation += 1;
        marks.touched.clear();
        let mut found = Vec::new();
        let mut queue: VecDeque<(u32, u32, u32)> = VecDeque::new();
        for &(s, link) in starts {
            let label = nodes[s as usize].0;
            let l = links.len() as u32;
            if marks.add(s, label, l) {
                links.push(link);
                queue.push_back((s, label, l));
            }
        }
        while let Some((n, label, link)) = queue.pop_front() {
            let reader = nodes[n as usize].0;
            for r in before(nodes, reads, n) {
                let l = links.len() as u32;
                if !marks.add(r.node, label, l) {
                    continue;
                }
                links.push(Link {
                    txn: reader,
                    key: r.key,
                    version: r.version,
                    up: link,
                });
                queue.push_back((r.node, label, l));
                let writer = nodes[r.node as usize].0;
                if label != writer && marks.emit_once(writer) {
                    found.push(Found {
                        from: writer,
                        key: r.key,
                        version: r.version,
                        link: l,
                    });
                }
            }
        }
        self.fallback(starts, links, &mut found);
        found
    }

    /// Nodes reached only from reads of their own transaction's writes:
    /// an edge when one of those writes comes before the node's. Every
    /// node on a chain to such a node has that transaction as its only
    /// label (another label would have reached it), so one breadth-first
    /// search per start of that transaction, among those nodes, decides.
    fn fallback(&mut self, starts: &[(u32, Link)], links: &mut Vec<Link>, found: &mut Vec<Found>) {
        let Self {
            nodes,
            reads,
            marks,
            ..
        } = self;
        // txn -> the latest position of its nodes that may need it.
        let mut wanted: HashMap<u32, u32> = HashMap::new();
        for &n in &marks.touched {
            let (txn, op) = nodes[n as usize];
            if marks.only(n, txn) && !marks.emitted(txn) {
                let w = wanted.entry(txn).or_insert(0);
                *w = (*w).max(op);
            }
        }
        if wanted.is_empty() {
            return;
        }
        let mut sorted: Vec<(u32, Link)> = starts
            .iter()
            .filter(|(s, _)| {
                let (txn, op) = nodes[*s as usize];
                wanted.get(&txn).is_some_and(|&w| op < w)
            })
            .copied()
            .collect();
        sorted.sort_by_key(|(s, _)| (nodes[*s as usize].1, *s));
        sorted.dedup_by_key(|(s, _)| *s);
        let mut queue: VecDeque<u32> = VecDeque::new();
        for (s, start_link) in sorted {
            let (txn, op) = nodes[s as usize];
            if marks.emitted(txn) {
                continue;
            }
            marks.fallback_generation += 1;
            let mark = marks.fallback_generation;
            let root = links.len() as u32;
            links.push(start_link);
            queue.clear();
            queue.push_back(s);
            marks.fallback_stamp[s as usize] = mark;
            marks.fallback_link[s as usize] = root;
            'bfs: while let Some(n) = queue.pop_front() {
                let reader = nodes[n as usize].0;
                let up = marks.fallback_link[n as usize];
                for r in before(nodes, reads, n) {
                    let m = r.node as usize;
                    if marks.fallback_stamp[m] == mark || !marks.only(r.node, txn) {
                        continue;
                    }
                    marks.fallback_stamp[m] = mark;
                    let l = links.len() as u32;
                    links.push(Link {
                        txn: reader,
                        key: r.key,
                        version: r.version,
                        up,
                    });
                    marks.fallback_link[m] = l;
                    if nodes[m].0 == txn && nodes[m].1 > op {
                        marks.emit_once(txn);
                        found.push(Found {
                            from: txn,
                            key: r.key,
                            version: r.version,
                            link: l,
                        });
                        break 'bfs;
                    }
                    queue.push_back(r.node);
                }
            }
        }
    }

    /// The steps of the chain ending at `link`, from the reader of the
    /// first write to the ACID read.
    pub fn chain(links: &[Link], link: u32) -> Vec<Link> {
        let mut out = Vec::new();
        let mut cur = link;
        while let Some(l) = links.get(cur as usize) {
            out.push(*l);
            if out.len() > links.len() {
                break;
            }
            cur = l.up;
        }
        out
    }
}

impl Default for ChainGraph {
    fn default() -> Self {
        ChainGraph::new()
    }
}
