//! What a `brine bench` run runs, apart from the workload: the cluster,
//! the compared protocols and their baseline, the client counts, the
//! durations; how a compared entry (`acid@detect`, `callas@LABEL`) is
//! read, and the report's `config` object.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use brine_cluster::protocols;
use brine_cluster::{ClusterConfig, DeadlockPolicy};
use serde_json::{json, Map, Value as Json};

use crate::error::{BenchError, Result};
use crate::workload::Workload;

/// Upper bound on closed-loop clients per point: each is a tokio task with
/// its own histograms; beyond this the driver, not the cluster, is measured.
pub const MAX_CLIENTS: u64 = 100_000;

/// What to run, apart from the workload.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// The cluster of every point; `protocol` is replaced by each entry of
    /// `protocols` in turn.
    pub cluster: ClusterConfig,
    /// Protocols to run; the first `baseline` entries are the baseline of
    /// the ratios. A `callas@LABEL` entry runs Callas under the grouping
    /// `groupings` labels LABEL (plain `callas`: `cluster.grouping`), so
    /// one run can compare several groupings; any other protocol's label
    /// is a deadlock handling it runs under (`acid@wait-die`,
    /// `acid@detect`, `acid@timeout`), whatever `deadlock_per_protocol`
    /// and `cluster.lock.policy` say.
    pub protocols: Vec<String>,
    /// How many leading `protocols` entries form the baseline: each
    /// point's ratio is against the best of them at its client count, and
    /// each peak ratio against the best of their peaks. 1: the first entry
    /// alone; [`best_acid_baseline`] makes `acid` one entry per deadlock
    /// handling, all of them the baseline.
    pub baseline: usize,
    /// Labelled Callas groupings, for `callas@LABEL` entries.
    pub groupings: Vec<(String, brine_cluster::Grouping)>,
    /// Client counts to sweep, in order.
    pub clients: Vec<u32>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Run the workload's invariant check after every point.
    pub check: bool,
    /// Give each protocol its own default deadlock handling
    /// (`protocols::default_deadlock_policy`) instead of
    /// `cluster.lock.policy` (what `brine bench` does without --deadlock).
    pub deadlock_per_protocol: bool,
    /// Drive a running multi-process cluster instead of starting an
    /// embedded one (one point), loading its data or not as it says.
    pub remote: Option<Remote>,
    /// Times to measure every point (at least 1). With more than one, the
    /// protocols take turns at each client count, round after round, so a
    /// slow stretch of the machine falls on all of them; the report's
    /// peaks and ratios use each point's median over the rounds.
    pub rounds: u32,
}

/// A running multi-process cluster a run drives (`brine bench --cluster`),
/// and whether the run loads the workload's data into it. An embedded
/// cluster starts empty and is always loaded.
#[derive(Clone, Debug)]
pub struct Remote {
    pub cluster: brine_cluster::remote::RemoteCluster,
    pub load: LoadPolicy,
    /// The servers' durability (the cluster file's), which the report
    /// names: this process keeps no log of its own.
    pub durability: brine_cluster::DurabilityMode,
}

/// Whether a run against a running cluster loads the workload's data
/// (`--load`). A cluster that keeps its data (durable, or restarted nodes
/// recovered from their logs) still holds what an earlier load wrote, and
/// loading it again fails on the first duplicate key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadPolicy {
    /// Load only when the workload's tables hold no row; otherwise run on
    /// the data they hold (checked first with `--check`).
    #[default]
    IfEmpty,
    /// Load, whatever the tables hold (a duplicate key fails the run).
    Always,
    /// Never load: run on the data the tables hold.
    Never,
}

impl LoadPolicy {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LoadPolicy::IfEmpty => "if-empty",
            LoadPolicy::Always => "always",
            LoadPolicy::Never => "never",
        }
    }
}

/// `callas@LABEL` -> (`callas`, Some(`LABEL`)); other names as they are.
fn split_label(protocol: &str) -> (&str, Option<&str>) {
    match protocol.split_once('@') {
        Some((name, label)) => (name, Some(label)),
        None => (protocol, None),
    }
}

/// The protocol a compared entry runs (`acid@detect` -> `acid`).
pub fn protocol_of(entry: &str) -> &str {
    split_label(entry).0
}

/// What the label of a `protocol@LABEL` entry names.
pub(crate) enum Label<'a> {
    /// `callas@LABEL`: a labelled grouping.
    Grouping(&'a str),
    /// Any other protocol: the deadlock handling it runs under.
    Deadlock(DeadlockPolicy),
    /// Neither.
    Unknown(&'a str),
}

/// The entry's protocol and what its label, if any, names.
pub(crate) fn parse_entry(entry: &str) -> (&str, Option<Label<'_>>) {
    let (name, label) = split_label(entry);
    let label = label.map(|l| {
        if name == "callas" {
            return Label::Grouping(l);
        }
        [
            DeadlockPolicy::WaitDie,
            DeadlockPolicy::Detect,
            DeadlockPolicy::TimeoutOnly,
        ]
        .into_iter()
        .find(|p| deadlock_name(p) == l)
        .map_or(Label::Unknown(l), Label::Deadlock)
    });
    (name, label)
}

/// The deadlock handlings `acid` is measured under by the `best`
/// baseline policy. Timeout-only is not among them: it handles a deadlock
/// by waiting out the lock wait timeout (500 ms), so it can only tie the
/// detector where there are none and loses wherever there are
/// (`docs/results/baselines.md`); `acid@timeout` still runs it.
pub const BEST_OF: [DeadlockPolicy; 2] = [DeadlockPolicy::WaitDie, DeadlockPolicy::Detect];

/// The `best` baseline policy: when `protocols` compares something
/// against a plain `acid` first, `acid` becomes one entry per deadlock
/// handling in [`BEST_OF`] (`acid@wait-die`, `acid@detect`), and the
/// ratios are against the best of them at each client count. Returns how
/// many leading entries form the baseline (`BenchSpec::baseline`): 1
/// when nothing was expanded.
pub fn best_acid_baseline(protocols: &mut Vec<String>) -> usize {
    if protocols.len() < 2 || protocols[0] != "acid" {
        return 1;
    }
    let variants: Vec<String> = BEST_OF
        .iter()
        .map(|p| format!("acid@{}", deadlock_name(p)))
        .collect();
    let n = variants.len();
    protocols.splice(0..1, variants);
    n
}

/// Applies `--baseline` (`best`, or a protocol entry such as
/// `acid@wait-die`) to the compared `protocols`, and returns
/// [`BenchSpec::baseline`]. `best` expands a leading `acid`
/// ([`best_acid_baseline`]) unless `--deadlock` pins every protocol's
/// handling, the baseline's too (`deadlock_pinned`). An entry replaces a
/// first entry of the same protocol, or runs first.
pub fn apply_baseline(
    protocols: &mut Vec<String>,
    baseline: &str,
    deadlock_pinned: bool,
) -> std::result::Result<usize, String> {
    match baseline.trim() {
        "best" if deadlock_pinned => Ok(1),
        "best" => Ok(best_acid_baseline(protocols)),
        "" => Err("--baseline: empty (best, or a protocol such as acid@wait-die)".into()),
        pinned => {
            match protocols.first() {
                Some(first) if protocol_of(first) == protocol_of(pinned) => {
                    protocols[0] = pinned.to_string()
                }
                _ => protocols.insert(0, pinned.to_string()),
            }
            Ok(1)
        }
    }
}

impl BenchSpec {
    /// The grouping labelled `label`.
    pub(crate) fn grouping(&self, label: &str) -> Result<&brine_cluster::Grouping> {
        self.groupings
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, g)| g)
            .ok_or_else(|| {
                BenchError::Config(format!(
                    "callas@{label}: no grouping is labelled `{label}` (give --grouping '{label}@name:mechanism=procedure,...')"
                ))
            })
    }

    /// The deadlock handling the `protocol` entry runs under: its label's
    /// (`acid@detect`), else its protocol's default with
    /// `deadlock_per_protocol`, else `cluster.lock.policy`.
    pub fn deadlock_policy(&self, protocol: &str) -> DeadlockPolicy {
        match parse_entry(protocol) {
            (_, Some(Label::Deadlock(policy))) => policy,
            (name, _) if self.deadlock_per_protocol => protocols::default_deadlock_policy(name),
            _ => self.cluster.lock.policy,
        }
    }

    /// Rejects what cannot run, before anything is started.
    pub fn validate(&self) -> Result<()> {
        if self.protocols.is_empty() {
            return Err(BenchError::Config("no protocol to run".into()));
        }
        if self.baseline == 0 || self.baseline > self.protocols.len() {
            return Err(BenchError::Config(format!(
                "the baseline is {} of the {} compared protocols: it must be at least the first and at most all",
                self.baseline,
                self.protocols.len()
            )));
        }
        for p in &self.protocols {
            let (name, label) = parse_entry(p);
            protocols::lookup(name).map_err(|e| BenchError::Config(e.to_string()))?;
            match label {
                Some(Label::Grouping(label)) => {
                    self.grouping(label)?;
                }
                Some(Label::Unknown(label)) => {
                    return Err(BenchError::Config(format!(
                        "`{p}`: `{label}` after @ is neither a deadlock handling (wait-die, detect, timeout) nor, for callas, a grouping label"
                    )));
                }
                Some(Label::Deadlock(_)) | None => {}
            }
        }
        for (label, _) in &self.groupings {
            if !self
                .protocols
                .iter()
                .any(|p| split_label(p) == ("callas", Some(label.as_str())))
            {
                return Err(BenchError::Config(format!(
                    "grouping `{label}` is given but no protocol runs it: add callas@{label} to --compare"
                )));
            }
        }
        if self.clients.is_empty() {
            return Err(BenchError::Config(
                "no client count to run (--clients)".into(),
            ));
        }
        if let Some(c) = self
            .clients
            .iter()
            .find(|&&c| c == 0 || u64::from(c) > MAX_CLIENTS)
        {
            return Err(BenchError::Config(format!(
                "--clients: {c} is out of range (1..={MAX_CLIENTS})"
            )));
        }
        if self.duration.is_zero() {
            return Err(BenchError::Config("--duration must be positive".into()));
        }
        if self.cluster.history.is_some() && (self.protocols.len() > 1 || self.clients.len() > 1) {
            return Err(BenchError::Config(
                "--history records one run: give one protocol and one client count".into(),
            ));
        }
        if self.rounds == 0 {
            return Err(BenchError::Config("--rounds must be at least 1".into()));
        }
        if self.rounds > 1 && (self.cluster.history.is_some() || self.remote.is_some()) {
            return Err(BenchError::Config(
                "--rounds repeats points on fresh embedded clusters: not with --history or --cluster"
                    .into(),
            ));
        }
        if self.remote.is_some() && (self.protocols.len() > 1 || self.clients.len() > 1) {
            return Err(BenchError::Config(
                "--cluster drives one run against the cluster's data: give one protocol and one client count".into(),
            ));
        }
        self.cluster
            .validate()
            .map_err(|e| BenchError::Config(e.to_string()))
    }

    /// Says at which level the compared protocols run when that is not
    /// simply the cluster's for every one of them: procedures that declare
    /// they need less (`ProcedureDef::isolation`) run at it, except under
    /// Callas, which runs every procedure at the cluster's level. `None`
    /// when every procedure runs at the cluster's level under every
    /// protocol.
    fn isolation_note(&self, workloads: &[Arc<dyn Workload>]) -> Option<String> {
        let level = self.cluster.isolation;
        let app = workloads.first()?.application();
        let weaker: Vec<String> = app
            .procedures
            .iter()
            .filter_map(|p| {
                let own = p.isolation.filter(|i| *i < level)?;
                Some(format!("{} at {own}", p.name))
            })
            .collect();
        if weaker.is_empty() {
            return None;
        }
        let callas = self.protocols.iter().any(|p| protocol_of(p) == "callas");
        Some(format!(
            "{level} for every protocol; {} (declared: needs no more){}",
            weaker.join(", "),
            if callas {
                format!(", except under callas, which runs every procedure at {level}")
            } else {
                String::new()
            }
        ))
    }

    /// The report's `config` object.
    pub fn config_json(&self, workloads: &[Arc<dyn Workload>]) -> Map<String, Json> {
        let c = &self.cluster;
        let mut m = Map::new();
        m.insert("nodes".into(), json!(c.nodes));
        m.insert("partitions_per_node".into(), json!(c.partitions_per_node));
        m.insert(
            "placement".into(),
            json!(format!("{:?}", c.placement).to_lowercase()),
        );
        m.insert("link_delay_us".into(), json!(c.link.delay_us));
        m.insert("link_jitter_us".into(), json!(c.link.jitter_us));
        m.insert("seed".into(), json!(c.seed));
        m.insert("isolation".into(), json!(c.isolation.to_string()));
        if let Some(note) = self.isolation_note(workloads) {
            m.insert("isolation_note".into(), json!(note));
        }
        // What each compared entry ran under: one name when they agree.
        let deadlocks: Map<String, Json> = self
            .protocols
            .iter()
            .map(|p| (p.clone(), json!(deadlock_name(&self.deadlock_policy(p)))))
            .collect();
        let first = deadlocks.values().next().cloned().unwrap_or(Json::Null);
        if deadlocks.values().all(|d| *d == first) {
            m.insert("deadlock".into(), first);
        } else {
            m.insert("deadlock".into(), Json::Object(deadlocks));
        }
        m.insert(
            "lock_timeout_ms".into(),
            json!(c.lock.wait_timeout.as_millis() as u64),
        );
        m.insert("max_attempts".into(), json!(c.retry.max_attempts));
        m.insert("protocols".into(), json!(self.protocols));
        m.insert("rounds".into(), json!(self.rounds));
        if self.protocols.iter().any(|p| p == "callas") {
            let grouping = c
                .grouping
                .as_ref()
                .map_or("every procedure in one 2pl group".to_string(), |g| {
                    g.to_string()
                });
            m.insert("grouping".into(), json!(grouping));
        }
        if !self.groupings.is_empty() {
            let labelled: Map<String, Json> = self
                .groupings
                .iter()
                .map(|(l, g)| (format!("callas@{l}"), json!(g.to_string())))
                .collect();
            m.insert("groupings".into(), Json::Object(labelled));
        }
        let baseline = &self.protocols[..self.baseline.min(self.protocols.len())];
        m.insert(
            "baseline".into(),
            if baseline.len() > 1 {
                json!({
                    "rule": "best at each client count",
                    "of": baseline,
                })
            } else {
                json!(baseline.first())
            },
        );
        m.insert("clients".into(), json!(self.clients));
        m.insert("warmup_s".into(), json!(self.warmup.as_secs_f64()));
        m.insert("duration_s".into(), json!(self.duration.as_secs_f64()));
        m.insert("check".into(), json!(self.check));
        if let Some(remote) = &self.remote {
            m.insert("load".into(), json!(remote.load.name()));
        }
        let mut shown = c.clone();
        if let Some(p) = self.protocols.first() {
            shown.protocol = p.clone();
        }
        m.insert("topology".into(), json!(shown.to_string()));
        // Workload parameters: a scalar when every variant shares it, the
        // list of values when the run sweeps it.
        let mut params: BTreeMap<String, Vec<Json>> = BTreeMap::new();
        for w in workloads {
            for (k, v) in w.params() {
                params.entry(k).or_default().push(v);
            }
        }
        for (k, vs) in params {
            let first = vs.first().cloned().unwrap_or(Json::Null);
            if vs.iter().all(|v| *v == first) {
                m.insert(k, first);
            } else {
                m.insert(k, Json::Array(vs));
            }
        }
        if let Some(w) = workloads.first() {
            let mix: Map<String, Json> = w
                .mix()
                .into_iter()
                .map(|(n, share)| (n.to_string(), json!(share)))
                .collect();
            m.insert("mix".into(), Json::Object(mix));
        }
        m
    }
}

/// The command-line name of a deadlock policy.
pub fn deadlock_name(policy: &impl std::fmt::Debug) -> String {
    match format!("{policy:?}").as_str() {
        "WaitDie" => "wait-die".into(),
        "Detect" => "detect".into(),
        "TimeoutOnly" => "timeout".into(),
        other => other.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(protocols: &[&str]) -> BenchSpec {
        BenchSpec {
            cluster: ClusterConfig::default(),
            protocols: protocols.iter().map(|p| p.to_string()).collect(),
            groupings: Vec::new(),
            clients: vec![1],
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            check: false,
            deadlock_per_protocol: true,
            remote: None,
            rounds: 1,
            baseline: 1,
        }
    }

    #[test]
    fn unknown_protocol_is_a_clear_error() {
        let e = spec(&["acid", "nope"]).validate().unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn an_entry_s_label_is_a_deadlock_handling_or_a_callas_grouping() {
        let s = spec(&[
            "acid@wait-die",
            "acid@detect",
            "acid@timeout",
            "salt",
            "acid",
        ]);
        s.validate().expect("every label names a handling");
        let policies: Vec<DeadlockPolicy> =
            s.protocols.iter().map(|p| s.deadlock_policy(p)).collect();
        use DeadlockPolicy::{Detect, TimeoutOnly, WaitDie};
        // Labels first; then each protocol's default.
        assert_eq!(policies, [WaitDie, Detect, TimeoutOnly, Detect, WaitDie]);
        let e = spec(&["acid@sometimes"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("sometimes"), "{e}");
        // For callas the label is a grouping, here one nobody gave.
        let e = spec(&["acid", "callas@detect"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("no grouping is labelled"), "{e}");
    }

    #[test]
    fn the_best_baseline_expands_a_leading_acid_only() {
        let mut p = vec!["acid".to_string(), "salt".to_string()];
        assert_eq!(best_acid_baseline(&mut p), 2);
        assert_eq!(p, ["acid@wait-die", "acid@detect", "salt"]);
        for given in [
            vec!["acid"],
            vec!["salt", "acid"],
            vec!["acid@detect", "salt"],
        ] {
            let mut p: Vec<String> = given.iter().map(|s| s.to_string()).collect();
            assert_eq!(best_acid_baseline(&mut p), 1, "{given:?}");
            assert_eq!(p, given, "unchanged");
        }
    }

    #[test]
    fn a_pinned_baseline_replaces_its_protocol_or_runs_first() {
        let run = |given: &[&str], baseline: &str, pinned: bool| {
            let mut p: Vec<String> = given.iter().map(|s| s.to_string()).collect();
            let n = apply_baseline(&mut p, baseline, pinned).expect("a baseline");
            (p, n)
        };
        let (p, n) = run(&["acid", "salt"], "acid@wait-die", false);
        assert_eq!(p, ["acid@wait-die", "salt"]);
        assert_eq!(n, 1);
        let (p, _) = run(&["salt"], "acid@detect", false);
        assert_eq!(p, ["acid@detect", "salt"]);
        // --deadlock pins every protocol: nothing expands.
        let (p, n) = run(&["acid", "salt"], "best", true);
        assert_eq!(p, ["acid", "salt"]);
        assert_eq!(n, 1);
        assert!(apply_baseline(&mut Vec::new(), " ", false).is_err());
    }

    #[test]
    fn deadlock_names() {
        #[derive(Debug)]
        enum P {
            WaitDie,
            TimeoutOnly,
        }
        assert_eq!(deadlock_name(&P::WaitDie), "wait-die");
        assert_eq!(deadlock_name(&P::TimeoutOnly), "timeout");
    }
}
