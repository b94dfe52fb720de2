//! Benchmark results: the JSON report (DESIGN section 7 contract) and the
//! human-readable tables.
//!
//! The JSON shape is a contract other tools read:
//!
//! ```text
//! {"workload": "micro",
//!  "config": {...},
//!  "results": [{"protocol", "clients", "throughput_tps", "latency_us_p50",
//!               "latency_us_p99", "aborts", "retries",
//!               "per_procedure": {name: {...}}, ...added keys}, ...],
//!  "ratios": {"<protocol>/<baseline>": x, ...},
//!  ...added keys}
//! ```
//!
//! Keys may be added, never renamed. `aborts` counts every aborted attempt
//! in the measured interval: concurrency-control victims (by cause in
//! `aborts_by_cause`) plus user aborts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::recorder::ProcSummary;

pub mod plot;

/// One measured point: one protocol, one client count, one workload variant.
/// Messages the link's faults lost over a point's run (warm-up and
/// measured interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultsPoint {
    /// Lost at random (`--loss`).
    pub lost: u64,
    /// Lost to cuts (`--cut`).
    pub cut: u64,
    /// Held back so later ones overtook them (`--reorder`).
    pub reordered: u64,
    /// Decisions delivered twice (`--duplicate`).
    #[serde(default)]
    pub duplicated: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub protocol: String,
    pub clients: u32,
    pub throughput_tps: f64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
    pub aborts: u64,
    pub retries: u64,
    pub per_procedure: BTreeMap<String, ProcSummary>,
    /// Workload parameters of this point (`rows`, `accounts`), flattened so
    /// a sweep over them reads like a sweep over clients.
    #[serde(flatten)]
    pub params: Map<String, Json>,
    pub latency_us_p95: u64,
    pub latency_us_max: u64,
    pub latency_us_mean: f64,
    pub commits: u64,
    pub cc_aborts: u64,
    pub user_aborts: u64,
    /// Calls given up after the cluster's retry bound.
    pub gave_up: u64,
    pub aborts_by_cause: BTreeMap<String, u64>,
    pub statements_per_s: f64,
    pub lock_waits: u64,
    pub lock_wait_us_mean: f64,
    /// The lock waits per table (only tables where statements waited).
    pub lock_waits_by_table: BTreeMap<String, TableWaits>,
    /// Runtime Pipelining's other waits (only kinds that happened):
    /// `rank`, a piece waiting for a transaction it depends on to reach
    /// its rank; `commit`, a commit waiting for one to commit.
    pub pipelining_waits: BTreeMap<String, TableWaits>,
    /// The protocol's own counters over the measured interval
    /// (`Protocol::counters`: Salt's acceptances, Mediator's aborts by
    /// cause, ...).
    #[serde(default)]
    pub protocol_counters: BTreeMap<String, u64>,
    /// Deadlocks the detector broke by letting a request pass the queue
    /// instead of aborting one.
    pub queue_bypasses: u64,
    /// Deadlock searches that gave up at their bound (the cycle, if any,
    /// was left to the periodic detector).
    pub searches_cut: u64,
    /// Deadlocks the cluster's detector broke: cycles through several
    /// partitions (or left by a cut search).
    pub detector_breaks: u64,
    /// Mean one-way delay of the messages that crossed the simulated link
    /// during the measured interval (0 when none did).
    pub link_delay_us_measured: f64,
    pub link_messages: u64,
    pub measured_s: f64,
    pub warmup_s: f64,
    pub isolation: String,
    /// The deadlock handling the point ran under (`wait-die`, `detect`,
    /// `timeout`).
    pub deadlock: String,
    /// The cluster's topology line (`ClusterConfig`'s Display).
    pub topology: String,
    /// True for the point of highest throughput among the points of the same
    /// protocol and workload variant (the client sweep's peak).
    pub peak: bool,
    /// This point's throughput over the baseline protocol's at the same
    /// client count and variant (absent without `--compare`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_ratio_vs_baseline: Option<f64>,
    /// The baseline point that ratio is against: the best of the baseline
    /// series at this client count, variant and round (`acid@detect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Which measurement of the point this is (1 to `--rounds`).
    pub round: u32,
    /// Workload-specific counters (e.g. the bank's `total_violations`).
    pub workload_metrics: Map<String, Json>,
    /// `passed` when `--check` ran the workload's invariant check and it
    /// held, `FAILED: <why>` when it did not (the run then ends with that
    /// error after printing this point), `violated (no isolation): <why>`
    /// when it did not under `raw`, which promises nothing (the run goes
    /// on), `not run` without `--check`.
    pub check: String,
    /// Index of the workload variant (sweep over workload parameters).
    #[serde(skip)]
    pub variant: usize,
    /// Index of the protocol in the compared list (0 = baseline); with a
    /// durability sweep, `mode index * protocols + protocol index`.
    #[serde(skip)]
    pub protocol_index: usize,
    /// `none` or `wal` (`--durability`).
    pub durability: String,
    /// Log statistics of the measured interval, with `wal`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal: Option<crate::durability::WalPoint>,
    /// What the link's faults did over the run (`--loss`, `--cut`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsPoint>,
    /// How busy this process's threads were in the measured interval
    /// (Linux; absent elsewhere). With a remote cluster this is the
    /// driver's process only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::cpu::CpuPoint>,
    /// Where the point's data came from: `loaded` by this run, or
    /// `reused (why)` when it ran on what a running cluster held already
    /// (`--cluster` with `--load`), saying whether `--check` checked it
    /// before the run.
    pub data: String,
}

/// Statements that waited for a lock on one table during a point, and
/// their mean wait.
#[derive(Clone, Debug, Serialize)]
pub struct TableWaits {
    pub waits: u64,
    pub wait_us_mean: f64,
}

impl TableWaits {
    /// `waits` waits of `wait_us` in all; `None` when there were none.
    pub fn of(waits: u64, wait_us: u64) -> Option<TableWaits> {
        (waits > 0).then(|| TableWaits {
            waits,
            wait_us_mean: crate::recorder::round2(wait_us as f64 / waits as f64),
        })
    }
}

/// `label: name N (mean M us), ...`, most waits first; `None` when empty.
fn waits_line(label: &str, waits: &BTreeMap<String, TableWaits>) -> Option<String> {
    if waits.is_empty() {
        return None;
    }
    let mut t: Vec<_> = waits.iter().collect();
    t.sort_by(|a, b| b.1.waits.cmp(&a.1.waits).then(a.0.cmp(b.0)));
    let t: Vec<String> = t
        .iter()
        .map(|(n, w)| format!("{n} {} (mean {:.0} us)", w.waits, w.wait_us_mean))
        .collect();
    Some(format!("{label}: {}", t.join(", ")))
}

impl PointResult {
    /// The name of this point's series in ratios and tables: the protocol,
    /// and its durability when the run compares durability modes.
    pub fn series(&self, durability_compared: bool) -> String {
        if durability_compared {
            format!("{}+{}", self.protocol, self.durability)
        } else {
            self.protocol.clone()
        }
    }
}

fn durability_compared(results: &[PointResult]) -> bool {
    results.iter().any(|r| {
        results
            .first()
            .is_some_and(|f| f.durability != r.durability)
    })
}

/// The peak of one protocol on one workload variant.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Peak {
    pub protocol: String,
    pub clients: u32,
    pub throughput_tps: f64,
    #[serde(flatten)]
    pub params: Map<String, Json>,
}

/// The keys every entry of `results` carries by DESIGN section 7's
/// contract (other tools read them; keys may be added, never renamed).
pub const CONTRACT_RESULT_KEYS: [&str; 8] = [
    "protocol",
    "clients",
    "throughput_tps",
    "latency_us_p50",
    "latency_us_p99",
    "aborts",
    "retries",
    "per_procedure",
];

/// A whole `brine bench` invocation.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub workload: String,
    pub config: Map<String, Json>,
    pub results: Vec<PointResult>,
    /// `"<protocol>/<baseline>"`: peak throughput of the protocol over the
    /// peak of the baseline (the first compared protocol), over all points.
    /// With a sweep over workload parameters, also one key per variant,
    /// labelled with the swept parameters: `"<protocol>/<baseline>@rows=10"`.
    pub ratios: BTreeMap<String, f64>,
    pub peak: Vec<Peak>,
    /// With `--rounds` above 1: per `"<protocol>/<baseline>"`, each
    /// round's ratio of peak throughputs (the protocol's best point in
    /// that round over the baseline's). `ratios` and `peak` then use each
    /// point's median over the rounds.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub round_ratios: BTreeMap<String, Vec<f64>>,
    /// The baseline when it is the best of several series (`acid` under
    /// each deadlock handling): which one was best where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineReport>,
    /// When `raw` was compared: each other series' peak over raw's peak,
    /// the share of the ceiling that no protocol passes on this machine.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub raw_share: BTreeMap<String, f64>,
}

/// A baseline made of several series: the ratios are against the best of
/// them at each client count (and peak against the best peak).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BaselineReport {
    /// The series the baseline is the best of.
    pub of: Vec<String>,
    /// The name the ratios give it (`salt/acid`).
    pub name: String,
    /// Per workload variant and client count, the best series and its
    /// (median) throughput.
    pub chosen: Vec<Peak>,
    /// The best of their peaks: the denominator of `ratios`.
    pub peak: Vec<Peak>,
}

impl BenchReport {
    /// Builds the report with the first compared protocol as the baseline.
    pub fn new(workload: &str, config: Map<String, Json>, results: Vec<PointResult>) -> Self {
        BenchReport::with_baseline(workload, config, results, 1)
    }

    /// Builds the report: marks peaks and computes ratios against the
    /// best of the first `baseline` protocols (`BenchSpec::baseline`). A
    /// point measured in several rounds counts with its median throughput.
    pub fn with_baseline(
        workload: &str,
        config: Map<String, Json>,
        mut results: Vec<PointResult>,
        baseline: usize,
    ) -> Self {
        let in_base = |pi: usize| pi < baseline.max(1);
        let mut runs: BTreeMap<(usize, usize, u32), Vec<f64>> = BTreeMap::new();
        for r in &results {
            runs.entry((r.variant, r.protocol_index, r.clients))
                .or_default()
                .push(r.throughput_tps);
        }
        let medians: BTreeMap<(usize, usize, u32), f64> =
            runs.into_iter().map(|(k, v)| (k, median(v))).collect();
        // The peak of each protocol and variant: the client count of the
        // highest (median) throughput, the first such in sweep order.
        let mut groups: BTreeMap<(usize, usize), (u32, f64, usize)> = BTreeMap::new();
        for (i, r) in results.iter().enumerate() {
            let t = medians[&(r.variant, r.protocol_index, r.clients)];
            let key = (r.variant, r.protocol_index);
            if groups.get(&key).is_none_or(|&(_, best, _)| t > best) {
                groups.insert(key, (r.clients, t, i));
            }
        }
        for r in results.iter_mut() {
            r.peak = groups
                .get(&(r.variant, r.protocol_index))
                .is_some_and(|&(c, _, _)| c == r.clients);
        }
        let peak = groups
            .values()
            .map(|&(clients, t, i)| Peak {
                protocol: results[i].protocol.clone(),
                clients,
                throughput_tps: t,
                params: results[i].params.clone(),
            })
            .collect();

        let by_durability = durability_compared(&results);
        // Per-point ratios against the best baseline point at the same
        // variant, clients and round.
        let mut base: BTreeMap<(usize, u32, u32), (f64, String)> = BTreeMap::new();
        for r in results.iter().filter(|r| in_base(r.protocol_index)) {
            let best = base
                .entry((r.variant, r.clients, r.round))
                .or_insert((f64::NEG_INFINITY, String::new()));
            if r.throughput_tps > best.0 {
                *best = (r.throughput_tps, r.series(by_durability));
            }
        }
        let compared = results.iter().any(|r| !in_base(r.protocol_index));
        for r in results.iter_mut() {
            let b = base
                .get(&(r.variant, r.clients, r.round))
                .filter(|(b, _)| compared && *b > 0.0);
            r.throughput_ratio_vs_baseline = b.map(|(b, _)| ratio(r.throughput_tps, *b));
            r.baseline = b.map(|(_, name)| name.clone());
        }

        let mut ratios = BTreeMap::new();
        let variants: Vec<usize> = {
            let mut v: Vec<usize> = results.iter().map(|r| r.variant).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let max_tps = |pi: usize, variant: Option<usize>| {
            max_of(
                medians
                    .iter()
                    .filter(|((v, p, _), _)| *p == pi && variant.is_none_or(|w| w == *v))
                    .map(|(_, &t)| t),
            )
        };
        let mut protocols: BTreeMap<usize, String> = BTreeMap::new();
        for r in &results {
            protocols.insert(r.protocol_index, r.series(by_durability));
        }
        let base_pis: Vec<usize> = protocols
            .keys()
            .copied()
            .filter(|&pi| in_base(pi))
            .collect();
        let base_tps =
            |variant: Option<usize>| max_of(base_pis.iter().filter_map(|&pi| max_tps(pi, variant)));
        // Several baseline series share one name in the ratios: their
        // protocol's (`acid@wait-die`, `acid@detect` -> `acid`).
        let base_name = match base_pis.as_slice() {
            [] => None,
            [pi] => protocols.get(pi).cloned(),
            [pi, ..] => protocols
                .get(pi)
                .map(|n| crate::spec::protocol_of(n).to_string()),
        };
        if let Some(base_name) = base_name.clone() {
            for (&pi, name) in protocols.iter().filter(|(&pi, _)| !in_base(pi)) {
                let key = format!("{name}/{base_name}");
                if let (Some(p), Some(b)) = (max_tps(pi, None), base_tps(None)) {
                    if b > 0.0 {
                        ratios.insert(key.clone(), ratio(p, b));
                    }
                }
                if variants.len() > 1 {
                    let swept = swept_params(&results);
                    for &v in &variants {
                        let label = results
                            .iter()
                            .find(|r| r.variant == v)
                            .map(|r| {
                                let shown: Map<String, Json> = r
                                    .params
                                    .iter()
                                    .filter(|(k, _)| swept.is_empty() || swept.contains(*k))
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect();
                                params_label(&shown)
                            })
                            .unwrap_or_default();
                        if let (Some(p), Some(b)) = (max_tps(pi, Some(v)), base_tps(Some(v))) {
                            if b > 0.0 {
                                ratios.insert(format!("{key}@{label}"), ratio(p, b));
                            }
                        }
                    }
                }
            }
        }

        let mut round_ratios = BTreeMap::new();
        let rounds = rounds_of(&results);
        if rounds > 1 {
            // The best point in `round` of the series `of` accepts.
            let round_peak = |of: &dyn Fn(usize) -> bool, round: u32| {
                max_of(
                    results
                        .iter()
                        .filter(|r| r.round == round && of(r.protocol_index))
                        .map(|r| r.throughput_tps),
                )
            };
            if let Some(base_name) = &base_name {
                for (&pi, name) in protocols.iter().filter(|(&pi, _)| !in_base(pi)) {
                    let per_round: Vec<f64> = (1..=rounds)
                        .filter_map(|round| {
                            match (round_peak(&|p| p == pi, round), round_peak(&in_base, round)) {
                                (Some(p), Some(b)) if b > 0.0 => Some(ratio(p, b)),
                                _ => None,
                            }
                        })
                        .collect();
                    round_ratios.insert(format!("{name}/{base_name}"), per_round);
                }
            }
        }

        let baseline = (base_pis.len() > 1)
            .then(|| {
                let name = base_name.clone()?;
                Some(baseline_report(
                    &results, &medians, &base_pis, &protocols, name,
                ))
            })
            .flatten();

        let mut raw_share = BTreeMap::new();
        let raw = protocols
            .iter()
            .find(|(_, n)| crate::spec::protocol_of(n) == "raw")
            .map(|(&pi, _)| pi);
        if let Some(raw_peak) = raw.and_then(|pi| max_tps(pi, None)).filter(|t| *t > 0.0) {
            for (&pi, name) in protocols.iter().filter(|(&pi, _)| Some(pi) != raw) {
                if let Some(p) = max_tps(pi, None) {
                    raw_share.insert(name.clone(), ratio(p, raw_peak));
                }
            }
        }

        BenchReport {
            workload: workload.to_string(),
            config,
            results,
            ratios,
            peak,
            round_ratios,
            baseline,
            raw_share,
        }
    }

    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The closing table: one row per point, then peaks and ratios.
    pub fn render_summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "== summary: {} ==", self.workload);
        let param_keys: Vec<String> = self
            .results
            .first()
            .map(|r| r.params.keys().cloned().collect())
            .unwrap_or_default();
        let mut header = String::new();
        for k in &param_keys {
            let _ = write!(header, "{k:>9} ");
        }
        let by_durability = durability_compared(&self.results);
        let rounds = rounds_of(&self.results);
        // Wide enough for the longest series name (`callas@label`).
        let w = self
            .results
            .iter()
            .map(|r| r.series(by_durability).len())
            .max()
            .unwrap_or(0)
            .max(10);
        let _ = writeln!(
            s,
            "{header}{:<w$} {:>7} {:>11} {:>8} {:>8} {:>9} {:>9} {:>8}",
            "protocol", "clients", "tps", "p50 us", "p99 us", "aborts", "retries", "ratio"
        );
        for r in &self.results {
            let mut row = String::new();
            for k in &param_keys {
                let v = r.params.get(k).map(json_short).unwrap_or_default();
                let _ = write!(row, "{v:>9} ");
            }
            let ratio = r
                .throughput_ratio_vs_baseline
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "{row}{:<w$} {:>7} {:>11.1} {:>8} {:>8} {:>9} {:>9} {:>8}{}",
                r.series(by_durability),
                r.clients,
                r.throughput_tps,
                r.latency_us_p50,
                r.latency_us_p99,
                r.aborts,
                r.retries,
                ratio,
                match (rounds > 1, r.peak) {
                    (true, _) => format!("  round {}", r.round),
                    (false, true) => "  <- peak".to_string(),
                    (false, false) => String::new(),
                }
            );
        }
        if rounds > 1 {
            self.render_medians(&mut s, rounds, w);
        }
        let of = if rounds > 1 {
            format!("peak of the medians over {rounds} rounds")
        } else {
            "peak throughput".to_string()
        };
        for (k, v) in &self.ratios {
            let _ = writeln!(s, "ratio {k} ({of}) = {v:.2}x");
        }
        for (k, v) in &self.round_ratios {
            let each: Vec<String> = v.iter().map(|x| format!("{x:.2}x")).collect();
            let _ = writeln!(
                s,
                "ratio {k} per round (peak against peak) = {}",
                each.join(", ")
            );
        }
        if let Some(b) = &self.baseline {
            let _ = writeln!(
                s,
                "baseline `{}`: the best of {} at each client count",
                b.name,
                b.of.join(", ")
            );
            let variants = self.results.iter().map(|r| r.variant).max().unwrap_or(0) > 0;
            // One client count per variant: the peaks are those points.
            let lines: &[(&str, &Vec<Peak>)] = if b.chosen.len() == b.peak.len() {
                &[("at", &b.chosen)]
            } else {
                &[("at", &b.chosen), ("peak", &b.peak)]
            };
            for &(what, points) in lines {
                let each: Vec<String> = points
                    .iter()
                    .map(|p| {
                        let variant = if variants {
                            format!("{} ", params_label(&p.params))
                        } else {
                            String::new()
                        };
                        format!(
                            "{variant}{} clients {} {:.1}",
                            p.clients, p.protocol, p.throughput_tps
                        )
                    })
                    .collect();
                let _ = writeln!(s, "  {what}: {}", each.join("; "));
            }
        }
        if !self.raw_share.is_empty() {
            let each: Vec<String> = self
                .raw_share
                .iter()
                .map(|(k, v)| format!("{k} {:.0}%", v * 100.0))
                .collect();
            let _ = writeln!(s, "share of raw's peak ({of}): {}", each.join(", "));
        }
        if let Some(note) = self.config.get("isolation_note").and_then(Json::as_str) {
            let _ = writeln!(s, "isolation: {note}");
        }
        s
    }

    /// Each point's median, lowest and highest throughput over the rounds.
    fn render_medians(&self, s: &mut String, rounds: u32, w: usize) {
        let by_durability = durability_compared(&self.results);
        let _ = writeln!(s, "-- each point over {rounds} rounds --");
        let _ = writeln!(
            s,
            "{:<w$} {:>7} {:>11} {:>11} {:>11}",
            "protocol", "clients", "median tps", "min tps", "max tps"
        );
        let variants = self.results.iter().map(|r| r.variant).max().unwrap_or(0) + 1;
        let mut seen: Vec<(usize, usize, u32)> = Vec::new();
        for r in &self.results {
            let key = (r.variant, r.protocol_index, r.clients);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let tps: Vec<f64> = self
                .results
                .iter()
                .filter(|x| (x.variant, x.protocol_index, x.clients) == key)
                .map(|x| x.throughput_tps)
                .collect();
            let lo = tps.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = tps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let variant = if variants > 1 {
                format!("{} ", params_label(&r.params))
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "{variant}{:<w$} {:>7} {:>11.1} {:>11.1} {:>11.1}{}",
                r.series(by_durability),
                r.clients,
                median(tps),
                lo,
                hi,
                if r.peak { "  <- peak" } else { "" }
            );
        }
    }
}

/// The per-point table printed as soon as a point finishes.
pub fn render_point(workload: &str, r: &PointResult) -> String {
    let mut s = String::new();
    let label = params_label(&r.params);
    let _ = writeln!(
        s,
        "== {workload}{}{} | protocol {}{} | {} clients ==",
        if label.is_empty() { "" } else { " " },
        label,
        r.protocol,
        if r.durability == "none" {
            String::new()
        } else {
            format!(" | durability {}", r.durability)
        },
        r.clients
    );
    let _ = writeln!(s, "topology: {}", r.topology);
    if r.data != "loaded" {
        let _ = writeln!(s, "data: {}", r.data);
    }
    let _ = writeln!(
        s,
        "measured {:.2} s after {:.2} s warm-up; link delay measured {:.1} us mean one-way over {} messages",
        r.measured_s, r.warmup_s, r.link_delay_us_measured, r.link_messages
    );
    let _ = writeln!(
        s,
        "{:<16} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>11}",
        "procedure",
        "commits",
        "tps",
        "p50 us",
        "p95 us",
        "p99 us",
        "max us",
        "retries",
        "cc aborts",
        "user aborts"
    );
    // The (all) row adds up the per-procedure rows (calls completed in the
    // interval); the cluster's own counters are on the `aborts` line below.
    let sum = |f: fn(&ProcSummary) -> u64| r.per_procedure.values().map(f).sum::<u64>();
    let all = ProcSummary {
        commits: r.commits,
        throughput_tps: r.throughput_tps,
        latency_us_p50: r.latency_us_p50,
        latency_us_p95: r.latency_us_p95,
        latency_us_p99: r.latency_us_p99,
        latency_us_max: r.latency_us_max,
        latency_us_mean: r.latency_us_mean,
        retries: sum(|p| p.retries),
        cc_aborts: sum(|p| p.cc_aborts),
        user_aborts: sum(|p| p.user_aborts),
        gave_up: r.gave_up,
        anomalies: sum(|p| p.anomalies),
    };
    let rows = r
        .per_procedure
        .iter()
        .map(|(n, p)| (n.as_str(), p))
        .chain(std::iter::once(("(all)", &all)));
    for (name, p) in rows {
        let _ = writeln!(
            s,
            "{:<16} {:>9} {:>11.1} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>11}",
            name,
            p.commits,
            p.throughput_tps,
            p.latency_us_p50,
            p.latency_us_p95,
            p.latency_us_p99,
            p.latency_us_max,
            p.retries,
            p.cc_aborts,
            p.user_aborts
        );
    }
    let causes: Vec<String> = r
        .aborts_by_cause
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        s,
        "cluster: aborts {} ({}), retries {}; gave up {}; statements {:.0}/s; lock waits {} (mean {:.1} us); queue passes {}; searches cut {}; detector breaks {}",
        r.aborts,
        causes.join(", "),
        r.retries,
        r.gave_up,
        r.statements_per_s,
        r.lock_waits,
        r.lock_wait_us_mean,
        r.queue_bypasses,
        r.searches_cut,
        r.detector_breaks
    );
    for line in [
        waits_line("lock waits by table", &r.lock_waits_by_table),
        waits_line("pipelining waits", &r.pipelining_waits),
    ]
    .into_iter()
    .flatten()
    {
        let _ = writeln!(s, "{line}");
    }
    if all.anomalies > 0 {
        let _ = writeln!(
            s,
            "anomalies: {} calls tripped a workload guard (possible without isolation) and were rolled back",
            all.anomalies
        );
    }
    if !r.protocol_counters.is_empty() {
        let m: Vec<String> = r
            .protocol_counters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "protocol: {}", m.join(", "));
    }
    if !r.workload_metrics.is_empty() {
        let m: Vec<String> = r
            .workload_metrics
            .iter()
            .map(|(k, v)| format!("{k}={}", json_short(v)))
            .collect();
        let _ = writeln!(s, "workload: {}", m.join(", "));
    }
    if let Some(f) = &r.faults {
        let unreachable = r.aborts_by_cause.get("unreachable").copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "faults: {} messages lost at random, {} to cuts, {} held back (reordered), {} decisions duplicated; {unreachable} attempts aborted on a participant that did not answer",
            f.lost, f.cut, f.reordered, f.duplicated
        );
    }
    if let Some(w) = &r.wal {
        let _ = writeln!(
            s,
            "wal: {} fsyncs ({:.0}/s, {} of them decision logs), {:.2} records and {:.0} bytes per fsync, {} checkpoints",
            w.fsyncs,
            w.fsyncs_per_s,
            w.decision_fsyncs,
            w.records_per_fsync,
            w.bytes_per_fsync,
            w.checkpoints
        );
    }
    if let Some(c) = &r.cpu {
        let _ = writeln!(s, "cpu: {}", c.line());
    }
    let _ = writeln!(s, "check: {}", r.check);
    s
}

/// `rows=10,accounts=5` from a parameter map.
/// The workload parameters whose values differ between the results'
/// variants (what a sweep sweeps): variant labels name only these, so a
/// parameter every variant shares (`base=update5`) does not clutter them.
fn swept_params(results: &[PointResult]) -> std::collections::BTreeSet<String> {
    let mut swept = std::collections::BTreeSet::new();
    if let Some(first) = results.first() {
        for r in results {
            for (k, v) in &r.params {
                if first.params.get(k) != Some(v) {
                    swept.insert(k.clone());
                }
            }
        }
    }
    swept
}

pub fn params_label(params: &Map<String, Json>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", json_short(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn json_short(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How many rounds the points were measured in (1 without `--rounds`).
fn rounds_of(results: &[PointResult]) -> u32 {
    results.iter().map(|r| r.round).max().unwrap_or(1)
}

/// The largest of `xs`, `None` if there is none.
fn max_of(xs: impl Iterator<Item = f64>) -> Option<f64> {
    xs.fold(None, |m, x| Some(m.map_or(x, |m: f64| m.max(x))))
}

/// Which of the baseline series `base_pis` was best at each variant and
/// client count (by median throughput; client counts ascending), and at
/// its peak per variant.
fn baseline_report(
    results: &[PointResult],
    medians: &BTreeMap<(usize, usize, u32), f64>,
    base_pis: &[usize],
    series: &BTreeMap<usize, String>,
    name: String,
) -> BaselineReport {
    let params_of = |variant: usize| {
        results
            .iter()
            .find(|r| r.variant == variant)
            .map(|r| r.params.clone())
            .unwrap_or_default()
    };
    let mut best: BTreeMap<(usize, u32), (f64, usize)> = BTreeMap::new();
    for (&(variant, pi, clients), &t) in medians {
        if base_pis.contains(&pi) {
            let b = best.entry((variant, clients)).or_insert((t, pi));
            if t > b.0 {
                *b = (t, pi);
            }
        }
    }
    let mut chosen = Vec::with_capacity(best.len());
    let mut peak: BTreeMap<usize, Peak> = BTreeMap::new();
    for (&(variant, clients), &(t, pi)) in &best {
        let p = Peak {
            protocol: series.get(&pi).cloned().unwrap_or_default(),
            clients,
            throughput_tps: t,
            params: params_of(variant),
        };
        if peak.get(&variant).is_none_or(|q| t > q.throughput_tps) {
            peak.insert(variant, p.clone());
        }
        chosen.push(p);
    }
    BaselineReport {
        of: base_pis
            .iter()
            .filter_map(|pi| series.get(pi).cloned())
            .collect(),
        name,
        chosen,
        peak: peak.into_values().collect(),
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    (a / b * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests;
