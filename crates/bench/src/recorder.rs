//! Per-client measurement: latency histograms and outcome counts per
//! procedure, merged across clients when a point ends.
//!
//! Each client task owns one `Recorder`, so recording takes no lock. Only
//! calls that *complete* inside the measured interval are recorded (a
//! closed-loop client's throughput is its completion rate).
//!
//! A client keeps its latencies as plain samples; the histograms are built
//! once, from the merged samples, when the point is summarized. A
//! histogram per procedure per client (about 140 KB each at this range and
//! precision) would be zeroed, page by page, by the clients' first calls
//! inside the measured interval: at 256 clients that was over 300 MB, and
//! the page faults took a fifth of the cores the cluster was measured on.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::error::{BenchError, Result};

/// Latencies above this are clamped (and visible as `latency_us_max`).
const LATENCY_US_MAX: u64 = 60_000_000;
/// Samples are kept as `u32` microseconds: the clamp must fit.
const _: () = assert!(LATENCY_US_MAX <= u32::MAX as u64);

fn new_histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)
        .map_err(|e| BenchError::Internal(format!("cannot create a latency histogram: {e}")))
}

/// Measurements of one procedure at one client (or merged).
#[derive(Clone, Debug, Default)]
pub struct ProcRecord {
    /// Latency of committed calls, from first attempt to commit, in µs
    /// (clamped to `LATENCY_US_MAX`).
    latency_us: Vec<u32>,
    commits: u64,
    /// Attempts beyond the first of committed calls (concurrency-control
    /// victims that were retried).
    retries: u64,
    user_aborts: u64,
    /// Calls that failed after the cluster's retry bound.
    gave_up: u64,
    /// Attempts aborted by concurrency control (retried or not).
    cc_aborts: u64,
    /// Calls stopped by one of the workload's own consistency guards, under
    /// a protocol without isolation (`raw`), where those can trip.
    anomalies: u64,
}

impl ProcRecord {
    fn merge(&mut self, other: &ProcRecord) {
        self.latency_us.extend_from_slice(&other.latency_us);
        self.commits += other.commits;
        self.retries += other.retries;
        self.user_aborts += other.user_aborts;
        self.gave_up += other.gave_up;
        self.cc_aborts += other.cc_aborts;
        self.anomalies += other.anomalies;
    }

    fn record(&mut self, latency_us: u64) {
        let clamped = latency_us.clamp(1, LATENCY_US_MAX);
        self.latency_us
            .push(u32::try_from(clamped).unwrap_or(u32::MAX));
    }

    fn summary(&self, measured_s: f64) -> Result<ProcSummary> {
        let mut h = new_histogram()?;
        for &us in &self.latency_us {
            h.saturating_record(u64::from(us));
        }
        let q = |x: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(x)
            }
        };
        Ok(ProcSummary {
            commits: self.commits,
            throughput_tps: if measured_s > 0.0 {
                self.commits as f64 / measured_s
            } else {
                0.0
            },
            latency_us_p50: q(0.50),
            latency_us_p95: q(0.95),
            latency_us_p99: q(0.99),
            latency_us_max: if h.is_empty() { 0 } else { h.max() },
            latency_us_mean: if h.is_empty() { 0.0 } else { round2(h.mean()) },
            retries: self.retries,
            cc_aborts: self.cc_aborts,
            user_aborts: self.user_aborts,
            gave_up: self.gave_up,
            anomalies: self.anomalies,
        })
    }
}

/// What the report says about one procedure (or all of them together).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProcSummary {
    pub commits: u64,
    pub throughput_tps: f64,
    pub latency_us_p50: u64,
    pub latency_us_p95: u64,
    pub latency_us_p99: u64,
    pub latency_us_max: u64,
    pub latency_us_mean: f64,
    pub retries: u64,
    pub cc_aborts: u64,
    pub user_aborts: u64,
    pub gave_up: u64,
    /// See `ProcRecord::anomalies`.
    pub anomalies: u64,
}

/// All procedures of one client, plus the combined latency of all of them.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    procs: BTreeMap<&'static str, ProcRecord>,
    all: ProcRecord,
}

impl Recorder {
    pub fn new() -> Self {
        Recorder::default()
    }

    fn both(&mut self, procedure: &'static str) -> (&mut ProcRecord, &mut ProcRecord) {
        (self.procs.entry(procedure).or_default(), &mut self.all)
    }

    /// A call that committed after `attempts` attempts.
    pub fn commit(&mut self, procedure: &'static str, latency_us: u64, attempts: u32) {
        let retries = u64::from(attempts.saturating_sub(1));
        let (p, all) = self.both(procedure);
        for r in [p, all] {
            r.record(latency_us);
            r.commits += 1;
            r.retries += retries;
            r.cc_aborts += retries;
        }
    }

    /// A call the procedure body aborted on purpose.
    pub fn user_abort(&mut self, procedure: &'static str) {
        let (p, all) = self.both(procedure);
        p.user_aborts += 1;
        all.user_aborts += 1;
    }

    /// A call stopped by a workload guard that only a protocol without
    /// isolation can trip.
    pub fn anomaly(&mut self, procedure: &'static str) {
        let (p, all) = self.both(procedure);
        p.anomalies += 1;
        all.anomalies += 1;
    }

    /// A call that was a concurrency-control victim `attempts` times in a
    /// row and was given up.
    pub fn gave_up(&mut self, procedure: &'static str, attempts: u32) {
        let (p, all) = self.both(procedure);
        for r in [p, all] {
            r.gave_up += 1;
            r.cc_aborts += u64::from(attempts);
            r.retries += u64::from(attempts.saturating_sub(1));
        }
    }

    pub fn merge(&mut self, other: &Recorder) {
        for (name, rec) in &other.procs {
            self.procs.entry(name).or_default().merge(rec);
        }
        self.all.merge(&other.all);
    }

    /// Summary of every procedure in `names` (present even with no calls,
    /// so a report always lists the whole mix) and of all together.
    pub fn summarize(
        &self,
        names: &[&'static str],
        measured_s: f64,
    ) -> Result<(ProcSummary, BTreeMap<String, ProcSummary>)> {
        let mut per = BTreeMap::new();
        for name in names.iter().copied().chain(self.procs.keys().copied()) {
            if per.contains_key(name) {
                continue;
            }
            let s = match self.procs.get(name) {
                Some(r) => r.summary(measured_s)?,
                None => ProcRecord::default().summary(measured_s)?,
            };
            per.insert(name.to_string(), s);
        }
        Ok((self.all.summary(measured_s)?, per))
    }
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merge_and_summarize() -> Result<()> {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        for us in 1..=100 {
            a.commit("x", us, 1);
        }
        b.commit("x", 1000, 3);
        b.commit("y", 50, 1);
        b.user_abort("y");
        b.gave_up("y", 100);
        a.merge(&b);
        let (all, per) = a.summarize(&["x", "y", "z"], 2.0)?;
        let x = &per["x"];
        assert_eq!(x.commits, 101);
        assert_eq!(x.retries, 2);
        assert_eq!(x.cc_aborts, 2);
        assert_eq!(x.latency_us_p50, 51);
        assert_eq!(x.latency_us_max, 1000);
        assert!((x.throughput_tps - 50.5).abs() < 1e-9);
        let y = &per["y"];
        assert_eq!(
            (y.commits, y.user_aborts, y.gave_up, y.cc_aborts),
            (1, 1, 1, 100)
        );
        assert_eq!(per["z"].commits, 0);
        assert_eq!(per["z"].latency_us_p99, 0);
        assert_eq!(all.commits, 102);
        assert_eq!(all.cc_aborts, 102);
        assert_eq!(all.user_aborts, 1);
        Ok(())
    }

    #[test]
    fn huge_latency_is_clamped_not_lost() -> Result<()> {
        let mut r = Recorder::new();
        r.commit("x", u64::MAX, 1);
        let (all, _) = r.summarize(&[], 1.0)?;
        assert_eq!(all.commits, 1);
        assert!(all.latency_us_max >= LATENCY_US_MAX);
        Ok(())
    }
}
