//! `brine group <workload>`: Callas' grouping tool (seed 000 section 4.5,
//! seed 002 section 6.2). Profile-driven and iterative: it measures how
//! each procedure's latency grows from one client to the given load under
//! `acid` (the contention-critical procedures are the ones whose latency
//! grows), builds candidate groupings from that profile (and, with at most
//! four procedure types, every partition of them into groups), measures
//! each candidate under `callas` on the same data and request streams,
//! prints every candidate's throughput and picks the best.
//!
//! ```text
//!  acid @ 1 client, acid @ N clients ──► latency growth per procedure
//!        │
//!        ▼ candidates: one group (2pl) · one per type (2pl) ·
//!          the k fastest-growing in one rp group, the rest default ·
//!          every partition into rp groups (<= 4 types)
//!        ▼ callas @ N clients, each candidate ──► table, chosen grouping
//! ```

use std::sync::Arc;

use brine_bench::{run_bench, BenchError, BenchSpec, Workload};
use brine_cluster::{GroupDef, Grouping, Mechanism};

/// Exhaustive search over partitions up to this many procedure types
/// (Bell(4) = 15 candidates).
const EXHAUSTIVE_MAX: usize = 4;

/// At most this many of the fastest-growing procedures form the hot group.
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
    let mut candidates = vec![
        Candidate {
            name: "one group".into(),
            grouping: Grouping::one_group(procedures.iter().map(String::as_str)),
        },
        Candidate {
            name: "one per type".into(),
            grouping: Grouping {
                groups: procedures
                    .iter()
                    .map(|p| group(p, Mechanism::TwoPl, std::slice::from_ref(p)))
                    .collect(),
            },
        },
    ];
    for k in 1..=HOT_MAX.min(growth.len()) {
        let hot: Vec<String> = growth[..k].iter().map(|(p, _)| p.clone()).collect();
        candidates.push(Candidate {
            name: format!("hottest {k} pipelined"),
            grouping: Grouping {
                groups: vec![group("hot", Mechanism::Rp, &hot)],
            },
        });
    }
    if procedures.len() <= EXHAUSTIVE_MAX {
        for (i, partition) in partitions(&procedures).into_iter().enumerate() {
            candidates.push(Candidate {
                name: format!("partition {}", i + 1),
                grouping: Grouping {
                    groups: partition
                        .iter()
                        .enumerate()
                        .map(|(g, members)| group(&format!("g{}", g + 1), Mechanism::Rp, members))
                        .collect(),
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
                    "  {:<22} {tps:>10.1} txn/s {:>6.2}x   {}",
                    c.name,
                    tps / acid_tps.max(f64::MIN_POSITIVE),
                    c.grouping
                );
                if best.is_none_or(|(b, _)| tps > b) {
                    best = Some((tps, c));
                }
            }
            Err(e) => println!("  {:<22} failed: {e}   {}", c.name, c.grouping),
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
    }
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
