//! The rho x nu equilibrium plot of a two-protocol ycsb sweep (Mediator
//! against its baseline), as hand-written SVG.
//!
//! ```text
//!  BenchReport ──serde──► JSON report ──► Grid ──► SVG
//!                 (brine plot REPORT.json reads the same JSON)
//!
//!   nu ▲ ┌──────┬──────┬──────┐  one cell per (rho, nu): candidate ops/s
//!    1 │ │ 4.77 │ 3.63 │ 2.97 │  over baseline ops/s; blue above 1, red
//!  0.5 │ │ 1.77 │ 1.18 │ 2.04 │  below, white at 1 (log2 scale); the black
//!      │ │  ●───┼──────┼──●   │  line and its dots: where the ratio
//!    0 │ │ 0.80 │ 0.95 │ 0.90 │  crosses 1
//!      └─┴──────┴──────┴──────┴─► rho
//! ```
//!
//! The figure compared is operations per second, not calls per second: a
//! transaction of U_n carries several operations. Operations per second =
//! measured calls per second (`throughput_tps`) x `operations_per_call`
//! (the ycsb workload's metric). The workload's `operations` counter spans
//! the whole run (warm-up and the drain too), so it is not divided by
//! `measured_s`.
//!
//! Baseline = the first compared protocol (`config.protocols`), candidate =
//! the second. With several client counts, one is drawn: the largest, or
//! [`PlotOptions::clients`]. With `--rounds`, a cell uses each protocol's
//! median over the rounds.
//!
//! The equilibrium: along each rho column, the ratio is interpolated
//! linearly in log(ratio) between adjacent nu cells, and a crossing of 1
//! is marked with a dot ([`crossing_between`], [`column_verdict`]). The
//! curve joins them across rho by marching squares over the same
//! edge interpolation, so it passes through every dot (and bends through
//! the rows where the crossing moves from one nu interval to the next).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value as Json};

use super::BenchReport;
use crate::error::{BenchError, Result};

/// The swept parameter on the x axis (rho).
pub const X_PARAM: &str = "read_ratio";
/// The swept parameter on the y axis (nu).
pub const Y_PARAM: &str = "native_ratio";

/// Per-point keys that must hold one value over the plotted points, besides
/// any the report's `config` lists as swept (a JSON array).
const HELD_KEYS: [&str; 4] = ["durability", "txn_size", "keys", "distribution"];

/// Keys a sweep may vary without breaking the plot: the axes and what the
/// plot selects on.
const FREE_KEYS: [&str; 5] = [X_PARAM, Y_PARAM, "clients", "protocols", "protocol"];

/// What to draw of a report.
#[derive(Clone, Debug, Default)]
pub struct PlotOptions {
    /// The client count to draw; `None`: the largest in the report.
    pub clients: Option<u32>,
}

/// One (rho, nu) cell: each protocol's operations per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub baseline_ops: f64,
    pub candidate_ops: f64,
}

impl Cell {
    /// Candidate over baseline; `None` when either measured no operations.
    pub fn ratio(&self) -> Option<f64> {
        let r = self.candidate_ops / self.baseline_ops;
        (self.baseline_ops > 0.0 && self.candidate_ops > 0.0 && r.is_finite()).then_some(r)
    }
}

/// The rho x nu grid of one client count of a two-protocol sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub workload: String,
    pub baseline: String,
    pub candidate: String,
    /// The client count drawn, and every one in the report (ascending).
    pub clients: u32,
    pub all_clients: Vec<u32>,
    /// Rounds per point (medians are drawn when above 1).
    pub rounds: u32,
    /// The workload parameters every plotted point shares, for the title
    /// (`txn_size`, `keys`, `distribution`).
    pub fixed: Vec<(String, String)>,
    /// The axes, ascending.
    pub rhos: Vec<f64>,
    pub nus: Vec<f64>,
    /// `cells[i][j]`: rho `rhos[i]`, nu `nus[j]`.
    pub cells: Vec<Vec<Cell>>,
}

/// What a rho column says about the equilibrium.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The ratio crosses 1 at these nu (ascending).
    Crosses(Vec<f64>),
    /// Above 1 in every measured cell: the candidate wins at every nu.
    CandidateAhead,
    /// At most 1 in every measured cell: the baseline wins (or ties).
    BaselineAhead,
    /// Cells above and below 1 separated by cells without a ratio.
    Undetermined,
}

fn plot_err(msg: impl Into<String>) -> BenchError {
    BenchError::Plot(msg.into())
}

/// Checks, before a run, that `brine bench --plot` will be able to draw
/// its report: exactly two compared protocols (`protocols`, the run's
/// entries), one durability mode, and workload variants (`variants`, each
/// one's parameters) that sweep read_ratio and native_ratio over at least
/// two values each and hold every other parameter.
pub fn check_sweep(
    protocols: &[String],
    durability_modes: usize,
    variants: &[Map<String, Json>],
) -> Result<()> {
    check_protocols(protocols)?;
    if durability_modes > 1 {
        return Err(plot_err(format!(
            "the run compares {durability_modes} durability modes; the plot draws one: give one --durability"
        )));
    }
    let mut rhos = Vec::new();
    let mut nus = Vec::new();
    for v in variants {
        rhos.push(param_f64(v, X_PARAM, "a workload variant")?);
        nus.push(param_f64(v, Y_PARAM, "a workload variant")?);
    }
    check_axes(&sorted_distinct(rhos), &sorted_distinct(nus))?;
    if let Some(first) = variants.first() {
        for k in first.keys() {
            if FREE_KEYS.contains(&k.as_str()) {
                continue;
            }
            let values: BTreeSet<String> = variants
                .iter()
                .map(|w| w.get(k).map(json_short).unwrap_or_default())
                .collect();
            if values.len() > 1 {
                return Err(held_err(k, &values));
            }
        }
    }
    Ok(())
}

fn check_protocols(protocols: &[String]) -> Result<()> {
    if protocols.len() != 2 {
        let acid = protocols.len() > 2
            && protocols
                .iter()
                .take(2)
                .all(|p| crate::spec::protocol_of(p) == "acid");
        return Err(plot_err(format!(
            "the plot compares two protocols, a baseline and a candidate; {} {} ({}){}",
            protocols.len(),
            if protocols.len() == 1 {
                "was run"
            } else {
                "were run"
            },
            protocols.join(", "),
            if acid {
                ": acid runs under each deadlock handling with --baseline best; pin one with \
                 --baseline acid@wait-die"
            } else {
                ": give --compare BASELINE,CANDIDATE"
            }
        )));
    }
    Ok(())
}

fn check_axes(rhos: &[f64], nus: &[f64]) -> Result<()> {
    for (name, flag, values) in [(X_PARAM, "rho", rhos), (Y_PARAM, "nu", nus)] {
        if values.len() < 2 {
            let shown: Vec<String> = values.iter().map(|&v| num(v)).collect();
            return Err(plot_err(format!(
                "the sweep has {} value{} of {name} ({flag}: {}); the plot needs at least two of \
                 {X_PARAM} and of {Y_PARAM} (--read-ratio 0,0.5,1 --native-ratio 0,0.5,1)",
                values.len(),
                if values.len() == 1 { "" } else { "s" },
                shown.join(", ")
            )));
        }
    }
    Ok(())
}

fn held_err(key: &str, values: &BTreeSet<String>) -> BenchError {
    let shown: Vec<&str> = values.iter().map(String::as_str).collect();
    plot_err(format!(
        "the sweep also varies `{key}` ({}); the plot draws one value of every parameter but \
         {X_PARAM} and {Y_PARAM}: run (or keep) one",
        shown.join(", ")
    ))
}

fn param_f64(m: &Map<String, Json>, key: &str, what: &str) -> Result<f64> {
    m.get(key).and_then(Json::as_f64).ok_or_else(|| {
        plot_err(format!(
            "{what} has no numeric `{key}`: the plot draws a ycsb sweep over --read-ratio and \
             --native-ratio"
        ))
    })
}

fn sorted_distinct(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The grid of an in-memory report (what `brine bench --plot` draws).
pub fn grid_from_report(report: &BenchReport, opts: &PlotOptions) -> Result<Grid> {
    let json = serde_json::to_value(report)
        .map_err(|e| BenchError::Internal(format!("serializing the report: {e}")))?;
    grid_from_json(&json, opts)
}

/// The grid of a JSON report (`--json FILE`'s contents).
pub fn grid_from_json(report: &Json, opts: &PlotOptions) -> Result<Grid> {
    let workload = report
        .get("workload")
        .and_then(Json::as_str)
        .ok_or_else(|| plot_err("not a brine bench report: no `workload`"))?
        .to_string();
    let empty = Map::new();
    let config = report
        .get("config")
        .and_then(Json::as_object)
        .unwrap_or(&empty);
    let results: Vec<&Map<String, Json>> = report
        .get("results")
        .and_then(Json::as_array)
        .ok_or_else(|| plot_err("not a brine bench report: no `results` list"))?
        .iter()
        .map(|r| {
            r.as_object()
                .ok_or_else(|| plot_err("a `results` entry is not an object"))
        })
        .collect::<Result<_>>()?;
    if results.is_empty() {
        return Err(plot_err("the report has no results"));
    }

    // The protocols, in the run's order (config.protocols), else as met.
    let mut seen: Vec<String> = Vec::new();
    for (n, r) in results.iter().enumerate() {
        let p = r
            .get("protocol")
            .and_then(Json::as_str)
            .ok_or_else(|| plot_err(format!("result {n} has no `protocol`")))?;
        if !seen.iter().any(|s| s == p) {
            seen.push(p.to_string());
        }
    }
    let mut protocols: Vec<String> = config
        .get("protocols")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    protocols.retain(|p| seen.contains(p));
    for p in seen {
        if !protocols.contains(&p) {
            protocols.push(p);
        }
    }
    check_protocols(&protocols)?;

    let clients_of = |n: usize, r: &Map<String, Json>| {
        r.get("clients")
            .and_then(Json::as_u64)
            .and_then(|c| u32::try_from(c).ok())
            .ok_or_else(|| plot_err(format!("result {n} has no `clients` count")))
    };
    let mut all_clients = Vec::new();
    for (n, r) in results.iter().enumerate() {
        all_clients.push(clients_of(n, r)?);
    }
    all_clients.sort_unstable();
    all_clients.dedup();
    let clients = match opts.clients {
        Some(c) if all_clients.contains(&c) => c,
        Some(c) => {
            let shown: Vec<String> = all_clients.iter().map(u32::to_string).collect();
            return Err(plot_err(format!(
                "the report has no points at {c} clients (it has {})",
                shown.join(", ")
            )));
        }
        None => *all_clients.last().unwrap_or(&0),
    };
    let mut chosen = Vec::new();
    for (n, r) in results.iter().enumerate() {
        if clients_of(n, r)? == clients {
            chosen.push((n, *r));
        }
    }

    // Every parameter but the axes must hold one value.
    let mut held: BTreeSet<&str> = HELD_KEYS.into_iter().collect();
    for (k, v) in config {
        if v.is_array() {
            held.insert(k);
        }
    }
    for key in held {
        if FREE_KEYS.contains(&key) {
            continue;
        }
        let values: BTreeSet<String> = chosen
            .iter()
            .filter_map(|(_, r)| r.get(key).map(json_short))
            .collect();
        if values.len() > 1 {
            return Err(held_err(key, &values));
        }
    }

    let mut rhos = Vec::new();
    let mut nus = Vec::new();
    for (n, r) in &chosen {
        rhos.push(param_f64(r, X_PARAM, &format!("result {n}"))?);
        nus.push(param_f64(r, Y_PARAM, &format!("result {n}"))?);
    }
    let rhos = sorted_distinct(rhos);
    let nus = sorted_distinct(nus);
    check_axes(&rhos, &nus)?;

    // Each protocol's operations per second per cell (several with rounds).
    let mut ops: BTreeMap<(usize, usize, usize), Vec<f64>> = BTreeMap::new();
    let mut rounds = 1u32;
    for (n, r) in &chosen {
        let rho = param_f64(r, X_PARAM, "")?;
        let nu = param_f64(r, Y_PARAM, "")?;
        let i = rhos.iter().position(|&x| x == rho).unwrap_or(0);
        let j = nus.iter().position(|&x| x == nu).unwrap_or(0);
        let p = r.get("protocol").and_then(Json::as_str).unwrap_or("");
        let pi = protocols.iter().position(|q| q == p).unwrap_or(0);
        let tps = r
            .get("throughput_tps")
            .and_then(Json::as_f64)
            .ok_or_else(|| plot_err(format!("result {n} has no `throughput_tps`")))?;
        let per_call = r
            .get("workload_metrics")
            .and_then(|m| m.get("operations_per_call"))
            .and_then(Json::as_f64)
            .ok_or_else(|| {
                plot_err(format!(
                    "result {n} ({p}) has no workload_metrics.operations_per_call: the plot \
                     compares operations per second, which the ycsb workload reports"
                ))
            })?;
        if let Some(round) = r.get("round").and_then(Json::as_u64) {
            rounds = rounds.max(u32::try_from(round).unwrap_or(u32::MAX));
        }
        ops.entry((pi, i, j)).or_default().push(tps * per_call);
    }
    let mut cells = Vec::with_capacity(rhos.len());
    for (i, &rho) in rhos.iter().enumerate() {
        let mut column = Vec::with_capacity(nus.len());
        for (j, &nu) in nus.iter().enumerate() {
            let of = |pi: usize| {
                ops.get(&(pi, i, j))
                    .map(|v| median(v.clone()))
                    .ok_or_else(|| {
                        plot_err(format!(
                        "no {} point at rho={}, nu={} with {clients} clients: the sweep is not a \
                         full grid",
                        protocols[pi],
                        num(rho),
                        num(nu)
                    ))
                    })
            };
            column.push(Cell {
                baseline_ops: of(0)?,
                candidate_ops: of(1)?,
            });
        }
        cells.push(column);
    }

    let first = chosen.first().map(|(_, r)| *r);
    let fixed = ["txn_size", "keys", "distribution"]
        .iter()
        .filter_map(|&k| {
            first
                .and_then(|r| r.get(k))
                .map(|v| (k.to_string(), json_short(v)))
        })
        .collect();
    let [baseline, candidate] = [protocols[0].clone(), protocols[1].clone()];
    Ok(Grid {
        workload,
        baseline,
        candidate,
        clients,
        all_clients,
        rounds,
        fixed,
        rhos,
        nus,
        cells,
    })
}

/// The SVG of an in-memory report.
pub fn svg_of_report(report: &BenchReport, opts: &PlotOptions) -> Result<String> {
    Ok(render_svg(&grid_from_report(report, opts)?))
}

/// The SVG of a JSON report.
pub fn svg_of_json(report: &Json, opts: &PlotOptions) -> Result<String> {
    Ok(render_svg(&grid_from_json(report, opts)?))
}

/// Where the ratio crosses 1 between `(nu0, r0)` and `(nu1, r1)`, by linear
/// interpolation of log(ratio) in nu; `None` when both sides are above 1 or
/// both are at most 1 (a ratio of exactly 1 counts as "at most": a crossing
/// from it upwards is at its own nu).
pub fn crossing_between(nu0: f64, r0: f64, nu1: f64, r1: f64) -> Option<f64> {
    unit_crossing(r0, r1).map(|t| nu0 + t * (nu1 - nu0))
}

/// Where, as a fraction of the way from `r0` to `r1`, log(ratio) crosses 0
/// (linearly interpolated); `None` when it does not.
fn unit_crossing(r0: f64, r1: f64) -> Option<f64> {
    let (a, b) = (r0.ln(), r1.ln());
    ((a > 0.0) != (b > 0.0)).then(|| a / (a - b))
}

/// What one rho column's ratios (`ratios[j]` at `nus[j]`, ascending nu)
/// say: where they cross 1, or which protocol leads at every nu.
pub fn column_verdict(nus: &[f64], ratios: &[Option<f64>]) -> Verdict {
    let mut at = Vec::new();
    for j in 1..nus.len().min(ratios.len()) {
        if let (Some(r0), Some(r1)) = (ratios[j - 1], ratios[j]) {
            if let Some(nu) = crossing_between(nus[j - 1], r0, nus[j], r1) {
                at.push(nu);
            }
        }
    }
    if !at.is_empty() {
        return Verdict::Crosses(at);
    }
    let present: Vec<f64> = ratios.iter().flatten().copied().collect();
    if present.iter().all(|&r| r > 1.0) {
        Verdict::CandidateAhead
    } else if present.iter().all(|&r| r <= 1.0) {
        Verdict::BaselineAhead
    } else {
        Verdict::Undetermined
    }
}

/// The ratio = 1 contour by marching squares over the grid
/// (`ratios[i][j]` at `(rhos[i], nus[j])`), each edge interpolated as
/// [`crossing_between`] does: segments in (rho, nu) coordinates. Squares
/// with a cell without a ratio are skipped; a saddle is split by the mean
/// of its corners.
pub fn equilibrium_segments(
    rhos: &[f64],
    nus: &[f64],
    ratios: &[Vec<Option<f64>>],
) -> Vec<[(f64, f64); 2]> {
    let mut out = Vec::new();
    let at = |i: usize, j: usize| ratios.get(i).and_then(|c| c.get(j)).copied().flatten();
    for i in 0..rhos.len().saturating_sub(1) {
        for j in 0..nus.len().saturating_sub(1) {
            // Corners counter-clockwise from the bottom left.
            let idx = [(i, j), (i + 1, j), (i + 1, j + 1), (i, j + 1)];
            let Some(r) = idx
                .iter()
                .map(|&(a, b)| at(a, b))
                .collect::<Option<Vec<f64>>>()
            else {
                continue;
            };
            let pos = |k: usize| (rhos[idx[k].0], nus[idx[k].1]);
            // Edge k joins corner k and corner k + 1.
            let edge = |k: usize| -> Option<(f64, f64)> {
                let l = (k + 1) % 4;
                let t = unit_crossing(r[k], r[l])?;
                let ((x0, y0), (x1, y1)) = (pos(k), pos(l));
                Some((x0 + t * (x1 - x0), y0 + t * (y1 - y0)))
            };
            let edges: Vec<Option<(f64, f64)>> = (0..4).map(edge).collect();
            let hits: Vec<(f64, f64)> = edges.iter().flatten().copied().collect();
            match hits.len() {
                2 => out.push([hits[0], hits[1]]),
                4 => {
                    // A saddle: cut off the corners on the other side of
                    // the centre (corner k lies between edges k-1 and k).
                    let centre = r.iter().map(|x| x.ln()).sum::<f64>() / 4.0 > 0.0;
                    for k in 0..4 {
                        if (r[k].ln() > 0.0) != centre {
                            if let (Some(p), Some(q)) = (edges[(k + 3) % 4], edges[k]) {
                                out.push([p, q]);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Candidate faster: ColorBrewer RdBu's blue; baseline faster: its red.
const BLUE: (f64, f64, f64) = (33.0, 102.0, 172.0);
const RED: (f64, f64, f64) = (178.0, 24.0, 43.0);

/// The colour of log2(ratio) `v` on a scale saturating at +-`extent`.
fn colour(v: f64, extent: f64) -> (String, bool) {
    let s = (v / extent).clamp(-1.0, 1.0);
    let (r, g, b) = if s >= 0.0 { BLUE } else { RED };
    let t = s.abs();
    let mix = |c: f64| (255.0 + (c - 255.0) * t).round() as u8;
    (
        format!("#{:02x}{:02x}{:02x}", mix(r), mix(g), mix(b)),
        t > 0.55,
    )
}

/// `0.25`, `1`, `0.3333`: at most four decimals, no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// `950`, `12.6k`, `1.25M`.
fn short_ops(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn json_short(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The SVG document of the grid: the heat map, the equilibrium curve and
/// its crossings, axes, title, colour legend and a caption with each rho
/// column's verdict.
pub fn render_svg(g: &Grid) -> String {
    let (nx, ny) = (g.rhos.len(), g.nus.len());
    let (cw, ch) = (104.0, 68.0);
    let (left, top) = (110.0, 116.0);
    let (gw, gh) = (nx as f64 * cw, ny as f64 * ch);
    let ratios: Vec<Vec<Option<f64>>> = g
        .cells
        .iter()
        .map(|c| c.iter().map(Cell::ratio).collect())
        .collect();
    let max_log = ratios
        .iter()
        .flatten()
        .flatten()
        .map(|r| r.log2().abs())
        .fold(0.0, f64::max);
    // At least a factor of two either way, at most 2^16, in whole powers of
    // two (colours saturate beyond it).
    let extent = max_log.ceil().clamp(1.0, 16.0);
    let verdicts: Vec<Verdict> = ratios.iter().map(|c| column_verdict(&g.nus, c)).collect();
    let (b, c) = (esc(&g.baseline), esc(&g.candidate));

    // Data (rho, nu) to the page: piecewise linear between cell centres.
    let along = |v: f64, axis: &[f64]| -> f64 {
        if axis.len() < 2 {
            return 0.0;
        }
        match axis.iter().position(|&a| v <= a) {
            Some(0) => 0.0,
            None => (axis.len() - 1) as f64,
            Some(k) => (k - 1) as f64 + (v - axis[k - 1]) / (axis[k] - axis[k - 1]),
        }
    };
    let px = |rho: f64| left + (along(rho, &g.rhos) + 0.5) * cw;
    let py = |nu: f64| top + gh - (along(nu, &g.nus) + 0.5) * ch;

    let mut caption: Vec<String> = Vec::new();
    let mut s = String::new();
    let mut title = esc(&g.workload);
    for (k, v) in &g.fixed {
        let _ = match k.as_str() {
            "keys" => write!(title, ", {} keys", esc(v)),
            "txn_size" => write!(title, " {}", esc(v)),
            _ => write!(title, ", {}", esc(v)),
        };
    }
    let _ = write!(title, ", {} clients: {c} vs {b}", g.clients);

    for (i, v) in verdicts.iter().enumerate() {
        let rho = num(g.rhos[i]);
        caption.push(match v {
            Verdict::Crosses(at) => {
                // Two decimals: the grid is coarser than that.
                let at: Vec<String> = at
                    .iter()
                    .map(|&x| num((x * 100.0).round() / 100.0))
                    .collect();
                format!("rho={rho}: the ratio crosses 1 at nu={}", at.join(", "))
            }
            Verdict::CandidateAhead => {
                format!("rho={rho}: never crosses 1, {c} wins at every nu")
            }
            Verdict::BaselineAhead => {
                format!("rho={rho}: never crosses 1, {b} wins (or ties) at every nu")
            }
            Verdict::Undetermined => {
                format!("rho={rho}: undetermined (cells without a ratio)")
            }
        });
    }
    let segments = equilibrium_segments(&g.rhos, &g.nus, &ratios);
    if segments.is_empty() {
        caption.push("no equilibrium inside the grid: the ratio does not cross 1".into());
    }
    let clients_note = if g.all_clients.len() > 1 {
        let all: Vec<String> = g.all_clients.iter().map(u32::to_string).collect();
        format!(
            "{} clients drawn (the report has {}; brine plot --clients N picks one)",
            g.clients,
            all.join(", ")
        )
    } else {
        format!("{} clients", g.clients)
    };
    caption.push(
        "rho: the share of gets among operations; nu: the share of native (single, \
         non-transactional) operations"
            .into(),
    );
    caption.push(format!(
        "{clients_note}; operations/s = calls/s x operations per call; under each ratio: {c} / \
         {b} operations/s{}",
        if g.rounds > 1 {
            format!("; medians of {} rounds", g.rounds)
        } else {
            String::new()
        }
    ));

    // The caption goes below the axis title, and below the legend when
    // that is taller than the grid.
    let bar_h = gh.max(140.0);
    let cap_top = (top + gh + 66.0).max(top + bar_h + 76.0);
    let height = cap_top + caption.len() as f64 * 18.0 + 10.0;
    let subtitle = [
        format!(
            "cell: {c} operations/s over {b} operations/s (colour on a log2 scale; blue: {c} \
             faster, red: {b} faster)"
        ),
        "black line: the equilibrium, where the ratio crosses 1 (log ratio interpolated \
         linearly between cells)"
            .to_string(),
    ];
    // No text metrics in SVG: widths from character counts (about 0.55 em
    // a character, 0.6 em bold).
    let chars = |t: &str| t.chars().count() as f64;
    let width = [
        left + gw + 200.0,
        640.0,
        40.0 + chars(&title) * 17.0 * 0.6,
        40.0 + subtitle
            .iter()
            .chain(caption.iter())
            .map(|t| chars(t))
            .fold(0.0, f64::max)
            * 12.0
            * 0.55,
    ]
    .into_iter()
    .fold(0.0, f64::max)
    .ceil();
    let _ = writeln!(
        s,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif">
<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>
<defs><linearGradient id="scale" x1="0" y1="1" x2="0" y2="0"><stop offset="0" stop-color="{}"/><stop offset="0.5" stop-color="#ffffff"/><stop offset="1" stop-color="{}"/></linearGradient></defs>
<text x="20" y="30" font-size="17" font-weight="bold">{title}</text>
<text x="20" y="52" font-size="12">{}</text>
<text x="20" y="70" font-size="12">{}</text>"##,
        colour(-extent, extent).0,
        colour(extent, extent).0,
        subtitle[0],
        subtitle[1],
    );

    // The cells, then the curve over them, then the labels (at the top and
    // bottom of each cell, clear of its centre where the curve meets the
    // cell's nu; each with a halo of its cell's colour), then the dots.
    let mut labels = String::new();
    let _ = writeln!(s, r#"<g class="cells">"#);
    for (i, column) in g.cells.iter().enumerate() {
        for (j, cell) in column.iter().enumerate() {
            let (x, y) = (left + i as f64 * cw, top + gh - (j + 1) as f64 * ch);
            let (rho, nu) = (num(g.rhos[i]), num(g.nus[j]));
            let (fill, dark) = match cell.ratio() {
                Some(r) => colour(r.log2(), extent),
                None => ("#d9d9d9".to_string(), false),
            };
            let ink = if dark { "#ffffff" } else { "#111111" };
            let label = cell
                .ratio()
                .map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}"));
            let cx = x + cw / 2.0;
            let _ = writeln!(
                s,
                r##"<rect class="cell" data-rho="{rho}" data-nu="{nu}" x="{x:.1}" y="{y:.1}" width="{cw:.1}" height="{ch:.1}" fill="{fill}" stroke="#9a9a9a" stroke-width="0.5"><title>rho={rho} nu={nu}: {c} {:.0} ops/s, {b} {:.0} ops/s, ratio {label}</title></rect>"##,
                cell.candidate_ops, cell.baseline_ops,
            );
            let halo = format!(
                r#"stroke="{fill}" stroke-width="4" stroke-linejoin="round" paint-order="stroke""#
            );
            let _ = writeln!(
                labels,
                r##"<text class="ratio" data-rho="{rho}" data-nu="{nu}" x="{cx:.1}" y="{:.1}" font-size="17" font-weight="bold" text-anchor="middle" fill="{ink}" {halo}>{label}</text>
<text class="ops" x="{cx:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="{ink}" {halo}>{} / {}</text>"##,
                y + 24.0,
                y + ch - 8.0,
                short_ops(cell.candidate_ops),
                short_ops(cell.baseline_ops),
            );
        }
    }
    let _ = writeln!(s, "</g>");

    // The equilibrium and its crossings on each column.
    if !segments.is_empty() {
        let mut d = String::new();
        for [(x0, y0), (x1, y1)] in &segments {
            let _ = write!(
                d,
                "M{:.1},{:.1} L{:.1},{:.1} ",
                px(*x0),
                py(*y0),
                px(*x1),
                py(*y1)
            );
        }
        let _ = writeln!(
            s,
            r##"<path class="equilibrium" d="{}" fill="none" stroke="#000000" stroke-width="3" stroke-linecap="round"/>"##,
            d.trim_end()
        );
    }
    let _ = writeln!(s, r#"<g class="labels">"#);
    s.push_str(&labels);
    let _ = writeln!(s, "</g>");
    for (i, v) in verdicts.iter().enumerate() {
        if let Verdict::Crosses(at) = v {
            for &nu in at {
                let _ = writeln!(
                    s,
                    r##"<circle class="crossing" data-rho="{}" data-nu="{}" cx="{:.1}" cy="{:.1}" r="5" fill="#000000" stroke="#ffffff" stroke-width="1.5"/>"##,
                    num(g.rhos[i]),
                    num(nu),
                    px(g.rhos[i]),
                    py(nu)
                );
            }
        }
    }

    // Axes: ticks at the cell centres, titles.
    let _ = writeln!(
        s,
        r##"<rect x="{left:.1}" y="{top:.1}" width="{gw:.1}" height="{gh:.1}" fill="none" stroke="#333333" stroke-width="1"/>"##
    );
    for (i, &rho) in g.rhos.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
            left + (i as f64 + 0.5) * cw,
            top + gh + 18.0,
            num(rho)
        );
    }
    for (j, &nu) in g.nus.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"#,
            left - 8.0,
            top + gh - (j as f64 + 0.5) * ch + 4.0,
            num(nu)
        );
    }
    let _ = writeln!(
        s,
        r#"<text class="axis" x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle">rho = read ratio</text>
<text class="axis" transform="translate({:.1},{:.1}) rotate(-90)" font-size="13" text-anchor="middle">nu = native ratio</text>"#,
        left + gw / 2.0,
        top + gh + 40.0,
        left - 62.0,
        top + gh / 2.0
    );

    // The legend: the colour scale with its ratios.
    let lx = left + gw + 36.0;
    let _ = writeln!(
        s,
        r##"<g class="legend">
<text x="{lx:.1}" y="{:.1}" font-size="11" font-weight="bold">{c} / {b} ops/s</text>
<text x="{lx:.1}" y="{:.1}" font-size="11" fill="{}">{c} faster</text>
<rect x="{lx:.1}" y="{top:.1}" width="18" height="{bar_h:.1}" fill="url(#scale)" stroke="#9a9a9a" stroke-width="0.5"/>"##,
        top - 26.0,
        top - 8.0,
        colour(extent, extent).0,
    );
    // At most nine ticks.
    let step = ((extent / 4.0).ceil() as i32).max(1);
    let e = extent as i32;
    for k in (-e..=e).filter(|k| k % step == 0) {
        let y = top + bar_h / 2.0 - f64::from(k) / extent * bar_h / 2.0;
        let label = if k >= 0 {
            format!("{}", 1u64 << k)
        } else {
            format!("1/{}", 1u64 << -k)
        };
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333333"/><text x="{:.1}" y="{:.1}" font-size="11">{label}</text>"##,
            lx + 18.0,
            lx + 23.0,
            lx + 26.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{lx:.1}" y="{:.1}" font-size="11" fill="{}">{b} faster</text>
<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000000" stroke-width="3"/><text x="{:.1}" y="{:.1}" font-size="11">ratio = 1</text>
<circle cx="{:.1}" cy="{:.1}" r="5" fill="#000000"/><text x="{:.1}" y="{:.1}" font-size="11">crossing on a column</text>
</g>"##,
        top + bar_h + 16.0,
        colour(-extent, extent).0,
        top + bar_h + 38.0,
        lx + 24.0,
        top + bar_h + 38.0,
        lx + 30.0,
        top + bar_h + 42.0,
        lx + 12.0,
        top + bar_h + 56.0,
        lx + 30.0,
        top + bar_h + 60.0,
    );

    // The caption: each column's verdict, what was drawn.
    for (k, line) in caption.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text class="caption" x="20" y="{:.1}" font-size="12">{line}</text>"#,
            cap_top + k as f64 * 18.0
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

#[cfg(test)]
mod tests;
