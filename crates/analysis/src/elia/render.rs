//! The report of operation partitioning (`brine analyze <app> --elia`):
//! one line per procedure, the conflicts behind every G and L/G, and the
//! summary in the form of seed 004 Table 1.

use std::fmt::Write as _;

use super::conflicts::{Atom, Clause, Conflict, Kind};
use super::sets::Term;
use super::{EliaPlan, OpClass, Search};
use crate::spec::ProcSpec;

/// Reasons listed per procedure, at most (the rest are counted).
pub const MAX_REASONS: usize = 8;

/// `proc.$arg`; `primed` for the other instance of a self-conflict.
fn operand(specs: &[ProcSpec], proc: usize, primed: bool, v: &Term) -> String {
    match v {
        Term::Arg(k) => format!(
            "{}{}.${}",
            specs[proc].name,
            if primed { "'" } else { "" },
            specs[proc].args.get(*k).map_or("?", String::as_str)
        ),
        Term::Literal(v) => format!("{v:?}"),
    }
}

/// One clause from `t`'s side: who writes what the other reads or
/// writes, and the condition on the common row.
pub fn clause_text(
    specs: &[ProcSpec],
    c: &Conflict,
    cl: &Clause,
    t: usize,
    params: &[Vec<usize>],
) -> String {
    let first = c.t == t;
    let (me, other) = if first { (c.t, c.t2) } else { (c.t2, c.t) };
    let (my_op, other_op) = if first {
        (cl.op, cl.op2)
    } else {
        (cl.op2, cl.op)
    };
    let kind = match (first, cl.kind) {
        (false, Kind::ReadWrite) => Kind::WriteRead,
        (false, Kind::WriteRead) => Kind::ReadWrite,
        (_, k) => k,
    };
    let who = |p: usize, op: usize| format!("{}.{}", specs[p].name, specs[p].ops[op].name);
    let mine = who(me, my_op);
    let theirs = if me == other {
        format!("another {}", who(other, other_op))
    } else {
        who(other, other_op)
    };
    let cols: Vec<&str> = cl
        .columns
        .iter()
        .map(|&c| cl.column_names.get(c).map_or("?", String::as_str))
        .collect();
    let what = format!("{}.{}", cl.table_name, cols.join(","));
    let verb = match kind {
        Kind::WriteWrite => format!("{mine} and {theirs} both write {what}"),
        Kind::WriteRead => format!("{mine} writes {what}, which {theirs} reads"),
        Kind::ReadWrite => format!("{mine} reads {what}, which {theirs} writes"),
    };
    let atom = |a: &Atom| {
        let theirs = a.second == first;
        let side = if theirs { other } else { me };
        format!(
            "{} = {}",
            cl.column_names.get(a.column).map_or("?", String::as_str),
            operand(specs, side, theirs && me == other, &a.value)
        )
    };
    // The columns both sides bind (what partitioning could match), t's
    // equalities first; the others (every value of an INSERT) would only
    // bury them.
    let shared = |a: &Atom| {
        cl.atoms
            .iter()
            .any(|b| b.second != a.second && b.column == a.column)
    };
    let mut atoms: Vec<&Atom> = cl
        .atoms
        .iter()
        .filter(|a| a.second != first && shared(a))
        .collect();
    atoms.extend(cl.atoms.iter().filter(|a| a.second == first && shared(a)));
    if cl.atoms.is_empty() {
        format!("{verb}, on any row")
    } else if atoms.is_empty() {
        format!("{verb}, with no column bound by both")
    } else {
        let cond: Vec<String> = atoms.into_iter().map(atom).collect();
        // Both bind a column: say which parameters P gave them instead.
        let by = |p: usize| match params.get(p).map(Vec::as_slice) {
            None | Some([]) => "none".to_string(),
            Some(ks) => ks
                .iter()
                .map(|&k| format!("${}", specs[p].args.get(k).map_or("?", String::as_str)))
                .collect::<Vec<_>>()
                .join("+"),
        };
        let parts = if me == other {
            format!("{} by {}", specs[me].name, by(me))
        } else {
            format!(
                "{} by {}, {} by {}",
                specs[me].name,
                by(me),
                specs[other].name,
                by(other)
            )
        };
        format!("{verb}, where {} ({parts})", cond.join(" and "))
    }
}

/// The rendered clauses, deduplicated, at most [`MAX_REASONS`].
pub fn reasons(
    specs: &[ProcSpec],
    t: usize,
    clauses: &[(&Conflict, &Clause)],
    params: &[Vec<usize>],
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (c, cl) in clauses {
        let s = clause_text(specs, c, cl, t, params);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if out.len() > MAX_REASONS {
        let more = out.len() - MAX_REASONS;
        out.truncate(MAX_REASONS);
        out.push(format!("... and {more} more"));
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

impl EliaPlan {
    /// The report: header, one line per procedure (class, parameters,
    /// weight as a share of calls, read-only mark) with the reasons of
    /// every G and L/G under it, then the Table 1 summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let total_w = self.weights.iter().fold(0.0, |a, w| a + w);
        let _ = writeln!(
            out,
            "operation partitioning (seed 004 Algorithm 1): {} procedures, weights {}",
            self.procs.len(),
            if self.weighted {
                "from the mix (share of calls)"
            } else {
                "1 each (no mix)"
            }
        );
        let search = match &self.search {
            Search::Exhaustive {
                combinations,
                evaluated,
            } => format!(
                "exhaustive over {combinations} combinations (branch and bound, {evaluated} \
                 evaluated in full): optimal"
            ),
            Search::Descent {
                components,
                largest,
                passes,
            } => format!(
                "coordinate descent on {components} component(s) of up to {largest} \
                 combinations, {passes} pass(es): a local optimum"
            ),
        };
        let _ = writeln!(
            out,
            "  conflicting pairs {} (self included), {} left across servers; cost {:.4} \
             (no partitioning: {:.4}); search {search}",
            self.conflicting_pairs, self.remaining_pairs, self.cost, self.cost_unpartitioned
        );
        let undeclared: Vec<&str> = self
            .procs
            .iter()
            .zip(&self.args_declared)
            .filter(|(_, d)| !**d)
            .map(|(p, _)| p.name.as_str())
            .collect();
        if !undeclared.is_empty() {
            let _ = writeln!(
                out,
                "  no argument declaration (cannot be partitioned): {}",
                undeclared.join(", ")
            );
        }
        let unused: Vec<String> = self
            .procs
            .iter()
            .zip(&self.unused_args)
            .filter(|(_, u)| !u.is_empty())
            .map(|(p, u)| format!("{} ({})", p.name, u.join(", ")))
            .collect();
        if !unused.is_empty() {
            let _ = writeln!(
                out,
                "  declared arguments no placeholder stands for: {}",
                unused.join("; ")
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<28} {:<5} {:<22} {:>7}  read-only",
            "procedure", "class", "partitioned by", "weight"
        );
        for (i, p) in self.procs.iter().enumerate() {
            let by = if p.param_names.is_empty() {
                "-".to_string()
            } else {
                p.param_names
                    .iter()
                    .zip(&p.params)
                    .map(|(n, k)| format!("{n} (#{k})"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            };
            let share = if total_w > 0.0 {
                self.weights[i] / total_w
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "  {:<28} {:<5} {:<22} {:>7}  {}",
                p.name,
                p.class.label(),
                by,
                format!("{:.2}%", 100.0 * share),
                if self.read_only[i] { "yes" } else { "" }
            );
            for r in &p.reasons {
                let _ = writeln!(out, "      {r}");
            }
        }
        let s = self.summary();
        let _ = writeln!(out);
        let _ = writeln!(out, "  in the form of seed 004 Table 1:");
        let _ = writeln!(
            out,
            "  {:>3} {:>3} {:>3} {:>4} {:>9} {:>5} | {:>6} {:>6} {:>6} {:>6} {:>9}",
            "L", "G", "C", "L/G", "read-only", "total", "L", "G", "C", "L/G", "read-only"
        );
        let _ = writeln!(
            out,
            "  {:>3} {:>3} {:>3} {:>4} {:>9} {:>5} | {:>6} {:>6} {:>6} {:>6} {:>9}",
            s.local,
            s.global,
            s.commutative,
            s.local_global,
            s.read_only,
            s.total,
            pct(s.share_local),
            pct(s.share_global),
            pct(s.share_commutative),
            pct(s.share_local_global),
            pct(s.share_read_only)
        );
        out
    }
}

impl std::fmt::Display for OpClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}
