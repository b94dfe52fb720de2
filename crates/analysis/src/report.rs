//! Human-readable output of the analysis (`brine analyze`): ranks, pieces,
//! the conflicts that remain and why the others went away, SC-cycle
//! verdicts; and Graphviz DOT of the graphs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::conflict::{OpRef, Removal};
use crate::rp::{ProcChopping, RpAnalysis};
use crate::spec::ProcSpec;
use crate::GroupResult;

fn op_name(specs: &[&ProcSpec], o: OpRef) -> String {
    format!("{}.{}", specs[o.proc].name, specs[o.proc].ops[o.op].name)
}

/// One chopping as lines `  k  rank  op, op, ...`.
pub fn render_chopping(s: &ProcSpec, c: &ProcChopping, indent: &str) -> String {
    let mut out = String::new();
    for (k, p) in c.pieces.iter().enumerate() {
        let rank = match p.ranks {
            None => "free".to_string(),
            Some((lo, hi)) if lo == hi => format!("r{lo}"),
            Some((lo, hi)) => format!("r{lo}-r{hi}"),
        };
        let ops: Vec<String> = p
            .ops
            .iter()
            .map(|&o| {
                let op = &s.ops[o];
                let mut name = format!("{}({})", op.name, op.access.table_name);
                if op.rollback {
                    name.push_str(" [rollback]");
                }
                name
            })
            .collect();
        let _ = writeln!(out, "{indent}{:>2}  {:<7} {}", k + 1, rank, ops.join(", "));
    }
    out
}

/// Compact form `<1,2><3,4>` (operation numbers in execution order).
pub fn compact(c: &ProcChopping) -> String {
    c.numbered()
        .iter()
        .map(|p| {
            let ns: Vec<String> = p.iter().map(|n| n.to_string()).collect();
            format!("<{}>", ns.join(","))
        })
        .collect()
}

/// The full text report of one group.
pub fn render_group(specs: &[&ProcSpec], g: &GroupResult) -> String {
    let a: &RpAnalysis = &g.rp;
    let mut out = String::new();
    let _ = writeln!(out, "group {{{}}}", a.procedures.join(", "));
    let _ = writeln!(out, "  refinements: {}", a.refinements);
    let _ = writeln!(
        out,
        "  ranks (objects with C-edges; tables and columns no C-edge touches are free):"
    );
    if a.ranks.is_empty() {
        let _ = writeln!(out, "    none: no conflicts inside the group");
    }
    for (r, objs) in a.ranks.iter().enumerate() {
        let names: Vec<String> = objs.iter().map(|&o| a.objects[o].to_string()).collect();
        let _ = writeln!(out, "    r{r}  {}", names.join(" + "));
    }
    let mut edges: Vec<String> = Vec::new();
    for (&(x, y), &(i, j)) in &a.edge_witness {
        edges.push(format!(
            "{} -> {}  ({} then {})",
            a.objects[x],
            a.objects[y],
            op_name(specs, i),
            op_name(specs, j)
        ));
    }
    if !edges.is_empty() {
        let _ = writeln!(out, "  dependency edges between objects:");
        for e in edges {
            let _ = writeln!(out, "    {e}");
        }
    }
    let _ = writeln!(out, "  pieces:");
    for (p, c) in a.choppings.iter().enumerate() {
        let _ = writeln!(out, "    {}  {}", c.procedure, compact(c));
        out.push_str(&render_chopping(specs[p], c, "      "));
        let safe = &g.safe[p];
        if safe != c {
            let _ = writeln!(out, "      rollback-safe (safe mode): {}", compact(safe));
        }
    }
    let _ = writeln!(
        out,
        "  conflicts that remain ({}; each joins pieces of one rank, ordered at run time):",
        a.conflicts.len()
    );
    for c in &a.conflicts {
        let op = &specs[c.a.proc].ops[c.a.op];
        let cols: Vec<&str> = c
            .columns
            .iter()
            .map(|&k| op.access.column_name(k))
            .collect();
        let rank = a.op_rank(c.a).map(|r| format!("r{r}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "    {:<4} {} x {}  on {}{}{}  ({})",
            rank,
            op_name(specs, c.a),
            op_name(specs, c.b),
            op.access.table_name,
            if a.refinements.column_level { "." } else { "" },
            if a.refinements.column_level {
                format!("{{{}}}", cols.join(","))
            } else {
                String::new()
            },
            if c.write_write {
                "write-write"
            } else {
                "read-write"
            }
        );
    }
    let mut removed: BTreeMap<(String, Removal), (usize, String)> = BTreeMap::new();
    for e in &a.removed {
        let table = specs[e.a.proc].ops[e.a.op].access.table_name.to_string();
        let entry = removed.entry((table, e.why)).or_insert((0, String::new()));
        entry.0 += 1;
        if entry.1.is_empty() {
            entry.1 = format!("{} x {}", op_name(specs, e.a), op_name(specs, e.b));
        }
    }
    if !removed.is_empty() {
        let _ = writeln!(out, "  conflicts removed by the refinements:");
        for ((table, why), (n, example)) in removed {
            let _ = writeln!(out, "    {table}: {n} pair(s), {why}; e.g. {example}");
        }
    }
    match &g.cross_cycle {
        None => {
            let _ = writeln!(
                out,
                "  SC-cycles between different procedures of the group: none"
            );
        }
        Some(c) => {
            let _ = writeln!(
                out,
                "  SC-cycles between different procedures of the group: YES\n    {c}"
            );
        }
    }
    if let Some((what, c)) = &g.cross_cycle_compare {
        let _ = writeln!(out, "    with {what}: {}", c.as_deref().unwrap_or("none"));
    }
    let _ = writeln!(
        out,
        "  SC-cycles among two instances of each procedure: {}",
        match &g.instance_cycle {
            None => "none".to_string(),
            Some(c) => format!("yes, neutralized at run time by rank order\n    {c}"),
        }
    );
    out
}

fn dot_id(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "'"))
}

/// Graphviz DOT of a group: the object dependency graph (objects of one
/// rank in one cluster) and the pieces of each procedure in order, with
/// C-edges between pieces as dashed undirected edges.
pub fn render_dot(specs: &[&ProcSpec], g: &GroupResult, name: &str) -> String {
    let a = &g.rp;
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_id(name));
    let _ = writeln!(out, "  compound=true; rankdir=LR; node [shape=box];");
    let _ = writeln!(
        out,
        "  subgraph {} {{",
        dot_id(&format!("cluster_{name}_objects"))
    );
    let _ = writeln!(out, "    label=\"object dependency graph (step 1)\";");
    for (r, objs) in a.ranks.iter().enumerate() {
        let _ = writeln!(
            out,
            "    subgraph {} {{ label=\"r{r}\";",
            dot_id(&format!("cluster_{name}_r{r}"))
        );
        for &o in objs {
            let _ = writeln!(
                out,
                "      {} [label={}];",
                dot_id(&format!("{name}/obj{o}")),
                dot_id(&a.objects[o].to_string())
            );
        }
        let _ = writeln!(out, "    }}");
    }
    for (x, y) in a.object_graph.edges() {
        let _ = writeln!(
            out,
            "    {} -> {};",
            dot_id(&format!("{name}/obj{x}")),
            dot_id(&format!("{name}/obj{y}"))
        );
    }
    let _ = writeln!(out, "  }}");
    for (p, c) in a.choppings.iter().enumerate() {
        let _ = writeln!(
            out,
            "  subgraph {} {{ label={};",
            dot_id(&format!("cluster_{name}_{}", c.procedure)),
            dot_id(&format!("{} (step 2)", c.procedure))
        );
        for (k, piece) in c.pieces.iter().enumerate() {
            let ops: Vec<&str> = piece
                .ops
                .iter()
                .map(|&o| specs[p].ops[o].name.as_str())
                .collect();
            let rank = piece
                .rank()
                .map(|r| format!("r{r}"))
                .unwrap_or("free".into());
            let _ = writeln!(
                out,
                "    {} [label={}];",
                dot_id(&format!("{name}/{}/{k}", c.procedure)),
                dot_id(&format!("{rank}: {}", ops.join("\\n")))
            );
            if k > 0 {
                let _ = writeln!(
                    out,
                    "    {} -> {};",
                    dot_id(&format!("{name}/{}/{}", c.procedure, k - 1)),
                    dot_id(&format!("{name}/{}/{k}", c.procedure))
                );
            }
        }
        let _ = writeln!(out, "  }}");
    }
    let mut drawn = std::collections::BTreeSet::new();
    for cf in &a.conflicts {
        let (Some((pa, _)), Some((pb, _))) = (
            a.choppings[cf.a.proc].locate(cf.a.op),
            a.choppings[cf.b.proc].locate(cf.b.op),
        ) else {
            continue;
        };
        let x = format!("{name}/{}/{pa}", a.choppings[cf.a.proc].procedure);
        let y = format!("{name}/{}/{pb}", a.choppings[cf.b.proc].procedure);
        if drawn.insert((x.clone(), y.clone())) {
            let _ = writeln!(
                out,
                "  {} -> {} [dir=none, style=dashed, color=red, constraint=false];",
                dot_id(&x),
                dot_id(&y)
            );
        }
    }
    let _ = writeln!(out, "}}");
    out
}
