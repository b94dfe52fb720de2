//! Conflict detection (seed 004 Algorithm 1, lines 1-10): for every pair
//! of procedures {t, t'}, self included, the condition in DNF under which
//! an operation of t and one of t' touch one row on a common attribute
//! and one of them writes it.
//!
//! ```text
//!  for r in R_t, w in W_t'  same table, r.A ∩ w.A ≠ ∅  -> clause rw (t reads, t' writes)
//!  for w in W_t, r in R_t'  ...                        -> clause wr (t writes, t' reads)
//!  for w in W_t, w' in W_t' ...                        -> clause ww
//!  clause condition: r.C ∧ w.C over one row: atoms `A = t.$k`, `A = t'.$k'`,
//!  `A = literal`; unsatisfiable iff one column is bound to two literals
//!  (dropped); a pair with no satisfiable clause does not conflict
//! ```
//!
//! Two INSERTs never conflict (fresh keys, the module's assumption). For
//! t = t' the mirror images (wr of an rw, ww of (b, a) for (a, b)) are
//! not repeated: they say the same of two operations of one procedure.

use std::collections::BTreeSet;
use std::sync::Arc;

use brine_core::TableId;

use super::sets::{Entry, RwSets, Term};
use crate::spec::ProcSpec;

/// Which side writes, relative to the conflict's first procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// t reads what t' writes.
    ReadWrite,
    /// t writes what t' reads.
    WriteRead,
    /// Both write.
    WriteWrite,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::ReadWrite => "rw",
            Kind::WriteRead => "wr",
            Kind::WriteWrite => "ww",
        }
    }
}

/// `column = value` over the common row; `second`: from t' (else t).
#[derive(Clone, Debug, PartialEq)]
pub struct Atom {
    pub column: usize,
    pub second: bool,
    pub value: Term,
}

/// One clause of a pair's DNF: two operations that may touch one row.
#[derive(Clone, Debug)]
pub struct Clause {
    pub kind: Kind,
    pub table: TableId,
    pub table_name: Arc<str>,
    pub column_names: Arc<[String]>,
    /// The attributes both touch where one writes.
    pub columns: BTreeSet<usize>,
    /// The operations (of t, of t').
    pub op: usize,
    pub op2: usize,
    /// The conjunction.
    pub atoms: Vec<Atom>,
    /// `(k, k')`: partitioning t by argument `k` and t' by `k'` removes
    /// the clause (both bind one column by equality).
    pub(crate) removers: Vec<(usize, usize)>,
}

impl Clause {
    fn new(kind: Kind, a: &Entry, b: &Entry, columns: BTreeSet<usize>) -> Clause {
        let mut atoms: Vec<Atom> = Vec::new();
        for (second, e) in [(false, a), (true, b)] {
            for (column, value) in &e.condition {
                let atom = Atom {
                    column: *column,
                    second,
                    value: value.clone(),
                };
                if !atoms.contains(&atom) {
                    atoms.push(atom);
                }
            }
        }
        let mut removers = Vec::new();
        for x in atoms.iter().filter(|x| !x.second) {
            for y in atoms.iter().filter(|y| y.second && y.column == x.column) {
                if let (Term::Arg(k), Term::Arg(k2)) = (&x.value, &y.value) {
                    if !removers.contains(&(*k, *k2)) {
                        removers.push((*k, *k2));
                    }
                }
            }
        }
        Clause {
            kind,
            table: a.table,
            table_name: a.table_name.clone(),
            column_names: a.column_names.clone(),
            columns,
            op: a.op,
            op2: b.op,
            atoms,
            removers,
        }
    }

    /// False if one column is bound to two different literals.
    pub fn satisfiable(&self) -> bool {
        self.atoms.iter().all(|x| match &x.value {
            Term::Literal(v) => self
                .atoms
                .iter()
                .all(|y| y.column != x.column || !matches!(&y.value, Term::Literal(w) if w != v)),
            Term::Arg(_) => true,
        })
    }

    /// True if partitioning t by `pa` and t' by `pb` makes the clause
    /// local: it holds only when a parameter of each is equal.
    pub fn removed_by(&self, pa: &[usize], pb: &[usize]) -> bool {
        self.removers
            .iter()
            .any(|(k, k2)| pa.contains(k) && pb.contains(k2))
    }

    /// True if the clause, left across servers, makes procedure `t` of
    /// `conflict` global: `t` writes what the other side reads or writes.
    pub fn makes_global(&self, conflict: &Conflict, t: usize) -> bool {
        if conflict.t == t && conflict.t2 == t {
            return true;
        }
        match self.kind {
            Kind::WriteWrite => true,
            Kind::WriteRead => conflict.t == t,
            Kind::ReadWrite => conflict.t2 == t,
        }
    }
}

/// The conflict condition `C_{t,t'}` of one pair (`t <= t2`), as the
/// clauses of its DNF; never empty.
#[derive(Clone, Debug)]
pub struct Conflict {
    pub t: usize,
    pub t2: usize,
    pub clauses: Vec<Clause>,
}

impl Conflict {
    pub fn involves(&self, t: usize) -> bool {
        self.t == t || self.t2 == t
    }

    /// The clauses partitioning t by `pa` and t' by `pb` leaves.
    pub fn remaining<'a>(
        &'a self,
        pa: &'a [usize],
        pb: &'a [usize],
    ) -> impl Iterator<Item = &'a Clause> + 'a {
        self.clauses.iter().filter(move |c| !c.removed_by(pa, pb))
    }

    /// True if the pair still conflicts across servers (Algorithm 1 line
    /// 18: some clause is left).
    pub fn remains(&self, pa: &[usize], pb: &[usize]) -> bool {
        self.remaining(pa, pb).next().is_some()
    }
}

/// The common attributes of two entries where `kind` says who writes.
fn common(a: &Entry, b: &Entry) -> Option<BTreeSet<usize>> {
    if a.table != b.table || (a.insert && b.insert) {
        return None;
    }
    let c: BTreeSet<usize> = a.columns.intersection(&b.columns).copied().collect();
    (!c.is_empty()).then_some(c)
}

/// Every conflicting pair {t, t'} (t <= t'), with its satisfiable clauses.
pub fn detect(specs: &[ProcSpec], sets: &[RwSets]) -> Vec<Conflict> {
    let mut out = Vec::new();
    for t in 0..specs.len() {
        for t2 in t..specs.len() {
            let (s, s2) = (&sets[t], &sets[t2]);
            let same = t == t2;
            let mut clauses = Vec::new();
            let mut add = |kind: Kind, a: &Entry, b: &Entry| {
                if let Some(cols) = common(a, b) {
                    let c = Clause::new(kind, a, b, cols);
                    if c.satisfiable() {
                        clauses.push(c);
                    }
                }
            };
            for r in &s.reads {
                for w in &s2.writes {
                    add(Kind::ReadWrite, r, w);
                }
            }
            if !same {
                for w in &s.writes {
                    for r in &s2.reads {
                        add(Kind::WriteRead, w, r);
                    }
                }
            }
            for (i, w) in s.writes.iter().enumerate() {
                for (j, w2) in s2.writes.iter().enumerate() {
                    if !same || i <= j {
                        add(Kind::WriteWrite, w, w2);
                    }
                }
            }
            if !clauses.is_empty() {
                out.push(Conflict { t, t2, clauses });
            }
        }
    }
    out
}
