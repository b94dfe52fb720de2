//! `brine group <workload>`: Callas' grouping tool (seed 000 section 4.5,
//! seed 002 section 6.2). Profile-driven: it measures how each procedure's
//! latency grows from one client to the given load under `acid` (the
//! contention-critical procedures are the ones whose latency grows
//! disproportionately), builds candidate groupings from that profile,
//! measures each candidate under `callas` on the same data and request
//! streams, prints every candidate's throughput and picks the best.
//!
//! The candidates follow section 4.5.2 and 4.6.3: the two naive groupings
//! (every procedure in one group; one group per type), with Runtime
//! Pipelining and with plain 2PL; then, when few procedures are contended
//! (latency growth at least `CONTENDED_GROWTH`, at most `EXHAUSTIVE_MAX`
//! of them), every grouping of those: each subset of them, split every
//! possible way into `rp` groups, the rest in the default group; with more
//! contended procedures, the 1..`HOT_MAX` fastest-growing in one `rp` group.
//!
//! ```text
//!  acid @ 1 client, acid @ N clients ──► latency growth per procedure
//!        │
//!        ▼ candidates: one group · one per type (rp and 2pl) ·
//!          every grouping of the contended procedures (<= 4 of them)
//!          or the k fastest-growing in one rp group
//!        ▼ callas @ N clients, each candidate ──► table, chosen grouping
//! ```

use std::sync::Arc;

use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::{GroupDef, Grouping, Mechanism};

/// Exhaustive search when at most this many procedures are contended
/// (4 of them: 51 groupings).
const EXHAUSTIVE_MAX: usize = 4;

/// A procedure whose p50 latency under load is at least this multiple of
/// its latency alone counts as contended.
const CONTENDED_GROWTH: f64 = 1.5;

/// Past `EXHAUSTIVE_MAX` contended procedures, at most this many of the
/// fastest-growing form the one pipelined group.
const HOT_MAX: usize = 3;

struct Candidate {
    name: String,
    grouping: Grouping,
}

/// Runs the tool; `spec` carries the cluster and the run lengths, its
/// largest client count is the load.
pub async fn run(mut spec: BenchSpec, workload: Arc<dyn Workload>) -> Result<(), BenchError> {
    let load = spec.clients.iter().copied().max().unwrap_or(64);
    let procedures: Vec<String> = workload
        .application()
        .procedures
        .iter()
        .map(|p| p.name.clone())
        .collect();
    spec.cluster.grouping = None;
    spec.groupings.clear();
    spec.deadlock_per_protocol = false;

    // 1. The profile: latency growth per procedure under acid.
    spec.protocols = vec!["acid".into()];
    spec.clients = vec![1, load];
    println!(
        "profiling {} under acid at 1 and {load} clients ...",
        workload.name()
    );
    let profile = run_bench(&spec, std::slice::from_ref(&workload), |_| {}).await?;
    let at = |clients: u32| profile.results.iter().find(|r| r.clients == clients);
    let (Some(low), Some(high)) = (at(1), at(load)) else {
        return Err(BenchError::Internal(
            "the profile runs gave no result".into(),
        ));
    };
    let acid_tps = high.throughput_tps;
    let mut growth: Vec<(String, f64)> = procedures
        .iter()
        .filter_map(|p| {
            let l = low.per_procedure.get(p)?;
            let h = high.per_procedure.get(p)?;
            (l.latency_us_p50 > 0 && h.commits > 0)
                .then(|| (p.clone(), h.latency_us_p50 as f64 / l.latency_us_p50 as f64))
        })
        .collect();
    growth.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("\nlatency growth (p50 at {load} clients / p50 at 1 client):");
    for (p, g) in &growth {
        println!("  {p:<20} {g:>8.1}x");
    }

    // 2. The candidates.
    let mut candidates = Vec::new();
    for (label, mechanism) in [("rp", Mechanism::Rp), ("2pl", Mechanism::TwoPl)] {
        candidates.push(Candidate {
            name: format!("one group, {label}"),
            grouping: Grouping {
                groups: vec![group("all", mechanism, &procedures)],
            },
        });
        candidates.push(Candidate {
            name: format!("one per type, {label}"),
            grouping: Grouping {
                groups: procedures
                    .iter()
                    .map(|p| group(p, mechanism, std::slice::from_ref(p)))
                    .collect(),
            },
        });
    }
    let contended: Vec<String> = growth
        .iter()
        .filter(|(_, g)| *g >= CONTENDED_GROWTH)
        .map(|(p, _)| p.clone())
        .collect();
    if contended.len() <= EXHAUSTIVE_MAX {
        println!(
            "contended (growth >= {CONTENDED_GROWTH}x): {}; every grouping of them",
            if contended.is_empty() {
                "none".to_string()
            } else {
                contended.join(", ")
            }
        );
        for grouping in groupings_of(&contended) {
            let name = grouping
                .groups
                .iter()
                .map(|g| g.procedures.join("+"))
                .collect::<Vec<_>>()
                .join(" | ");
            candidates.push(Candidate { name, grouping });
        }
    } else {
        println!(
            "contended (growth >= {CONTENDED_GROWTH}x): {} procedures; the fastest-growing pipelined",
            contended.len()
        );
        for k in 1..=HOT_MAX.min(contended.len()) {
            candidates.push(Candidate {
                name: format!("hottest {k} pipelined"),
                grouping: Grouping {
                    groups: vec![group("hot", Mechanism::Rp, &contended[..k])],
                },
            });
        }
    }

    // 3. Each candidate under callas, at the load.
    spec.protocols = vec!["callas".into()];
    spec.clients = vec![load];
    println!(
        "\nmeasuring {} candidates under callas at {load} clients (acid: {acid_tps:.1} txn/s):",
        candidates.len()
    );
    let mut best: Option<(f64, &Candidate)> = None;
    for c in &candidates {
        let mut s = spec.clone();
        s.cluster.grouping = Some(c.grouping.clone());
        match run_bench(&s, std::slice::from_ref(&workload), |_| {}).await {
            Ok(report) => {
                let tps = report.results.first().map_or(0.0, |r| r.throughput_tps);
                println!(
                    "  {:<36} {tps:>10.1} txn/s {:>6.2}x   {}",
                    c.name,
                    tps / acid_tps.max(f64::MIN_POSITIVE),
                    c.grouping
                );
                if best.is_none_or(|(b, _)| tps > b) {
                    best = Some((tps, c));
                }
            }
            Err(e) => println!("  {:<36} failed: {e}   {}", c.name, c.grouping),
        }
    }
    match best {
        Some((tps, c)) => {
            println!(
                "\nchosen: {} ({tps:.1} txn/s, {:.2}x acid)\n  --grouping \"{}\"",
                c.name,
                tps / acid_tps.max(f64::MIN_POSITIVE),
                c.grouping
            );
            Ok(())
        }
        None => Err(BenchError::Internal(
            "no candidate grouping could run".into(),
        )),
    }
}

fn group(name: &str, mechanism: Mechanism, procedures: &[String]) -> GroupDef {
    GroupDef {
        name: name.to_string(),
        mechanism,
        procedures: procedures.to_vec(),
        as_written: false,
    }
}

/// Every grouping of `contended`: each non-empty subset of it, split
/// every possible way into `rp` groups (named g1, g2, ...); the others stay
/// in the default group.
fn groupings_of(contended: &[String]) -> Vec<Grouping> {
    let mut out = Vec::new();
    for mask in 1u32..(1 << contended.len()) {
        let subset: Vec<String> = contended
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, p)| p.clone())
            .collect();
        for partition in partitions(&subset) {
            out.push(Grouping {
                groups: partition
                    .iter()
                    .enumerate()
                    .map(|(g, members)| group(&format!("g{}", g + 1), Mechanism::Rp, members))
                    .collect(),
            });
        }
    }
    out
}

/// Every partition of `items` into non-empty groups (set partitions, in
/// the order of restricted growth strings).
fn partitions(items: &[String]) -> Vec<Vec<Vec<String>>> {
    let mut out = Vec::new();
    let mut assign = vec![0usize; items.len()];
    fn rec(
        i: usize,
        max: usize,
        assign: &mut [usize],
        items: &[String],
        out: &mut Vec<Vec<Vec<String>>>,
    ) {
        if i == items.len() {
            let mut groups = vec![Vec::new(); max];
            for (k, &g) in assign.iter().enumerate() {
                groups[g].push(items[k].clone());
            }
            out.push(groups);
            return;
        }
        for g in 0..=max {
            assign[i] = g;
            rec(i + 1, max.max(g + 1), assign, items, out);
        }
    }
    rec(0, 0, &mut assign, items, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each non-empty subset of k items contributes Bell(k) groupings: 0,
    /// 1, 4, 14 and 51 for 0 to 4 items; each names every item at most
    /// once, in `rp` groups, and no grouping comes twice.
    #[test]
    fn groupings_cover_every_subset_split_every_way() {
        let names = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
        for (n, count) in [(0, 0), (1, 1), (2, 4), (3, 14), (4, 51)] {
            let gs = groupings_of(&names(n));
            assert_eq!(gs.len(), count, "n = {n}");
            for g in &gs {
                let mut all: Vec<&String> = g.groups.iter().flat_map(|d| &d.procedures).collect();
                let len = all.len();
                all.sort();
                all.dedup();
                assert_eq!(all.len(), len, "a procedure twice in {g}");
                assert!(g.groups.iter().all(|d| d.mechanism == Mechanism::Rp));
            }
            let distinct: std::collections::BTreeSet<String> =
                gs.iter().map(|g| g.to_string()).collect();
            assert_eq!(distinct.len(), gs.len(), "n = {n}: a grouping twice");
        }
    }

    #[test]
    fn partitions_are_the_bell_numbers_and_cover_every_item_once() {
        let names = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
        for (n, bell) in [(1, 1), (2, 2), (3, 5), (4, 15)] {
            let ps = partitions(&names(n));
            assert_eq!(ps.len(), bell, "n = {n}");
            for p in &ps {
                let mut all: Vec<&String> = p.iter().flatten().collect();
                all.sort();
                all.dedup();
                assert_eq!(all.len(), n);
                assert!(p.iter().all(|g| !g.is_empty()));
            }
        }
    }
}
