//! What a check found: the anomalies with their witnesses, edge counts and
//! the verdict at the chosen level.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::history::{Outcome, TxnClass};

/// The isolation level a history is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// No G0, G1a, G1b, G1c (and no sanity anomaly).
    ReadCommitted,
    /// Additionally no G-single and no G-nonadjacent: every cycle has two
    /// adjacent anti-dependency edges (write skew is allowed), the graph
    /// characterization of snapshot isolation (Fekete et al. 2005; Cerone
    /// and Gotsman 2016). See docs/checker.md, "Snapshot isolation".
    SnapshotIsolation,
    /// Nothing at all: additionally no G-single and no G2.
    Serializable,
    /// Serializable for ACID transactions with BASE transactions as whole
    /// nodes that may interleave with each other, plus Salt's rule that no
    /// ACID transaction observes a BASE transaction's unfinished state
    /// (see docs/checker.md).
    Salt,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::ReadCommitted => "read-committed",
            Level::SnapshotIsolation => "snapshot-isolation",
            Level::Serializable => "serializable",
            Level::Salt => "salt",
        }
    }

    /// Whether an anomaly of `class` violates this level. G-salt is only
    /// ever found at the Salt level. A session-order violation fails every
    /// level: it is only found when records name their clients, and a run
    /// that records them promises each client its own order.
    pub fn forbids(self, class: AnomalyClass) -> bool {
        match self {
            Level::ReadCommitted => !matches!(
                class,
                AnomalyClass::GSingle
                    | AnomalyClass::GNonadjacent
                    | AnomalyClass::G2
                    | AnomalyClass::GSalt
            ),
            Level::SnapshotIsolation => !matches!(class, AnomalyClass::G2 | AnomalyClass::GSalt),
            Level::Serializable | Level::Salt => true,
        }
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read-committed" | "rc" => Ok(Level::ReadCommitted),
            "snapshot-isolation" | "si" => Ok(Level::SnapshotIsolation),
            "serializable" | "ser" => Ok(Level::Serializable),
            "salt" => Ok(Level::Salt),
            other => Err(format!(
                "unknown level {other:?} (expected read-committed, snapshot-isolation, \
                 serializable or salt)"
            )),
        }
    }
}

/// The kinds of anomaly the checker reports, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AnomalyClass {
    /// A cycle of write-write edges.
    G0,
    /// A committed transaction read a version written by an aborted one.
    G1a,
    /// A committed transaction read a version its writer later overwrote
    /// itself.
    G1b,
    /// A cycle of dependency edges (ww, wr, predicate wr).
    G1c,
    /// Salt level: an ACID transaction observed a BASE transaction's
    /// unfinished state (a cycle through a BASE -> ACID read edge).
    #[serde(rename = "G-salt")]
    GSalt,
    /// A cycle with exactly one anti-dependency edge.
    #[serde(rename = "G-single")]
    GSingle,
    /// A cycle with anti-dependency edges, no two of them adjacent (G-single
    /// is the case of one): snapshot isolation forbids it, as it allows
    /// only cycles with two consecutive anti-dependencies.
    #[serde(rename = "G-nonadjacent")]
    GNonadjacent,
    /// A cycle with anti-dependency edges (item or predicate); as reported,
    /// every cycle found had two adjacent ones (e.g. write skew).
    G2,
    /// A client observed a version of a key older than one it had observed
    /// in an earlier transaction (a session's per-key order broken:
    /// monotonic reads, read your writes, monotonic writes or writes
    /// follow reads). Only found when records name their clients (`cl`).
    #[serde(rename = "session-order")]
    SessionOrder,
    /// A read of a version no transaction wrote (or wrote to another key).
    #[serde(rename = "garbage-read")]
    GarbageRead,
    /// Two writes installed the same version id.
    #[serde(rename = "duplicate-version")]
    DuplicateVersion,
    /// Two committed writes replaced the same version of a key.
    #[serde(rename = "fork")]
    Fork,
    /// A write's `prev` is unknown, of another key, or a version whose
    /// writer aborted (a dirty write that survived).
    #[serde(rename = "bad-prev")]
    BadPrev,
    /// A range read missed a row that matched its range in every committed
    /// state of the row.
    #[serde(rename = "missed-row")]
    MissedRow,
}

impl AnomalyClass {
    pub fn name(self) -> &'static str {
        match self {
            AnomalyClass::G0 => "G0",
            AnomalyClass::G1a => "G1a",
            AnomalyClass::G1b => "G1b",
            AnomalyClass::G1c => "G1c",
            AnomalyClass::GSalt => "G-salt",
            AnomalyClass::GSingle => "G-single",
            AnomalyClass::GNonadjacent => "G-nonadjacent",
            AnomalyClass::G2 => "G2",
            AnomalyClass::SessionOrder => "session-order",
            AnomalyClass::GarbageRead => "garbage-read",
            AnomalyClass::DuplicateVersion => "duplicate-version",
            AnomalyClass::Fork => "fork",
            AnomalyClass::BadPrev => "bad-prev",
            AnomalyClass::MissedRow => "missed-row",
        }
    }
}

impl fmt::Display for AnomalyClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Kinds of edge of the serialization graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EdgeKind {
    /// `to` installed the version after `from`'s.
    Ww,
    /// `to` read a version `from` installed.
    Wr,
    /// `from` read a version; `to` installed the next one.
    Rw,
    /// `from`'s write changed whether a row matches `to`'s range read, and
    /// the range read observed the row's state after that write.
    PredWr,
    /// `from`'s range read observed a row's state before `to`'s write that
    /// changed whether the row matches.
    PredRw,
    /// Salt level: `to` (ACID) read a version written by a BASE transaction
    /// that had read (earlier in its program) what `from` (BASE) wrote,
    /// possibly through more BASE transactions.
    ChainWr,
    /// Internal to the checker, never reported: a hop through a run of
    /// commuting increments (a read relates to the whole run below or
    /// after its version through one edge into the run's chain of hops).
    /// Not in [`EdgeKind::ALL`].
    Via,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 6] = [
        EdgeKind::Ww,
        EdgeKind::Wr,
        EdgeKind::Rw,
        EdgeKind::PredWr,
        EdgeKind::PredRw,
        EdgeKind::ChainWr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
            EdgeKind::PredWr => "pred-wr",
            EdgeKind::PredRw => "pred-rw",
            EdgeKind::ChainWr => "chain-wr",
            EdgeKind::Via => "via",
        }
    }

    /// Anti-dependency edges (G-single / G2).
    pub fn is_anti(self) -> bool {
        matches!(self, EdgeKind::Rw | EdgeKind::PredRw)
    }

    /// Edges through which the target observed the source's writes.
    pub fn is_read(self) -> bool {
        matches!(self, EdgeKind::Wr | EdgeKind::PredWr | EdgeKind::ChainWr)
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transaction named in a witness.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TxnInfo {
    pub id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub procedure: Option<String>,
    pub class: TxnClass,
    pub outcome: Outcome,
    /// An `unknown` transaction the history proves committed (a committed
    /// transaction read or overwrote one of its versions).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inferred_committed: bool,
}

impl fmt::Display for TxnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}", self.id)?;
        let mut notes = Vec::new();
        if let Some(p) = &self.procedure {
            notes.push(p.clone());
        }
        match self.class {
            TxnClass::Acid => {}
            TxnClass::Base => notes.push("BASE".into()),
            TxnClass::Group => notes.push("group".into()),
        }
        match self.outcome {
            Outcome::Committed => {}
            Outcome::Aborted => notes.push("aborted".into()),
            Outcome::Unknown if self.inferred_committed => {
                notes.push("unknown, proven committed".into())
            }
            Outcome::Unknown => notes.push("unknown".into()),
        }
        if !notes.is_empty() {
            write!(f, " ({})", notes.join(", "))?;
        }
        Ok(())
    }
}

/// One hop of a Salt read chain: `txn` read `version` of `key`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChainHop {
    pub txn: u64,
    pub table: String,
    pub key: String,
    pub version: u64,
}

/// An edge of a witness, with the key and versions that cause it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EdgeInfo {
    pub from: u64,
    pub to: u64,
    pub kind: EdgeKind,
    pub table: String,
    /// The key, as brine prints keys: `(1,"a")`.
    pub key: String,
    /// ww: `from`'s version; wr: the version read; rw: the version `from`
    /// read; pred-*: the version before the matching-changing write.
    pub version_from: u64,
    /// ww, rw: the version `to` installed; wr: the version read; pred-*:
    /// the version the matching-changing write installed.
    pub version_to: u64,
    /// chain-wr only: the reads of the chain, from the first BASE reader to
    /// the ACID reader.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<ChainHop>,
}

impl fmt::Display for EdgeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, k) = (self.from, self.to, format!("{}{}", self.table, self.key));
        let (v1, v2) = (self.version_from, self.version_to);
        write!(f, "T{a} -{}-> T{b}: ", self.kind)?;
        match self.kind {
            EdgeKind::Ww => write!(f, "T{b} overwrote version {v1} of {k} with {v2}"),
            EdgeKind::Wr => write!(f, "T{b} read version {v1} of {k}, written by T{a}"),
            EdgeKind::Rw => write!(
                f,
                "T{a} read version {v1} of {k}; T{b} installed the next version {v2}"
            ),
            EdgeKind::PredWr => write!(
                f,
                "T{a}'s write {v1}->{v2} of {k} changed whether it matches T{b}'s range read, \
                 which observed the row after it"
            ),
            EdgeKind::PredRw => write!(
                f,
                "T{a}'s range read observed {k} before T{b}'s write {v1}->{v2} changed whether \
                 it matches"
            ),
            EdgeKind::ChainWr => {
                write!(f, "T{a} wrote version {v1} of {k}")?;
                for hop in &self.via {
                    write!(
                        f,
                        "; T{} read {}{}@{}",
                        hop.txn, hop.table, hop.key, hop.version
                    )?;
                }
                Ok(())
            }
            EdgeKind::Via => write!(f, "a hop through the run of increments of {k}"),
        }
    }
}

/// One anomaly with its minimal witness.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Anomaly {
    pub class: AnomalyClass,
    /// One line saying what happened.
    pub summary: String,
    pub txns: Vec<TxnInfo>,
    /// For cycles, the edges in cycle order; for the others, the edges that
    /// show the problem (may be empty).
    pub edges: Vec<EdgeInfo>,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.class, self.summary)?;
        let txns: Vec<String> = self.txns.iter().map(|t| t.to_string()).collect();
        writeln!(f, "  txns: {}", txns.join(", "))?;
        for e in &self.edges {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// Counts of the history and its graph.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub txns: u64,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Unknown transactions the history proves committed.
    pub unknown_inferred_committed: u64,
    pub ops: u64,
    /// Edges of the graph by kind (deduplicated per transaction pair).
    pub edges: BTreeMap<String, u64>,
    /// Non-trivial strongly connected components of the graph.
    pub cyclic_components: u64,
    /// Walks of runs of commuting increments cut short: edges beyond
    /// `RUN_WALK_MAX` increments of one run were not added.
    #[serde(skip_serializing_if = "is_zero")]
    pub increment_runs_cut: u64,
    /// ACID transactions whose Salt read chains were not searched: the
    /// chain search stopped at its bound on edges or witness links.
    #[serde(skip_serializing_if = "is_zero")]
    pub salt_chains_cut: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result of checking one history at one level.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub level: Level,
    pub stats: Stats,
    /// Anomalies found by class (all of them, whatever the level).
    pub counts: BTreeMap<String, u64>,
    /// Every anomaly found, most severe class first.
    pub anomalies: Vec<Anomaly>,
    /// True when no anomaly violates `level`.
    pub valid: bool,
}

impl Report {
    pub(crate) fn new(level: Level, stats: Stats, mut anomalies: Vec<Anomaly>) -> Report {
        anomalies.sort_by(|a, b| {
            (a.class, a.txns.first().map(|t| t.id)).cmp(&(b.class, b.txns.first().map(|t| t.id)))
        });
        let mut counts = BTreeMap::new();
        for a in &anomalies {
            *counts.entry(a.class.name().to_string()).or_insert(0) += 1;
        }
        let valid = !anomalies.iter().any(|a| level.forbids(a.class));
        Report {
            level,
            stats,
            counts,
            anomalies,
            valid,
        }
    }

    /// The anomalies that violate the level.
    pub fn violations(&self) -> impl Iterator<Item = &Anomaly> {
        self.anomalies
            .iter()
            .filter(move |a| self.level.forbids(a.class))
    }

    /// The summary and at most `max_witnesses` witnesses, as text.
    pub fn render(&self, max_witnesses: usize) -> String {
        use std::fmt::Write as _;
        let s = &self.stats;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "transactions: {} ({} committed, {} aborted, {} unknown of which {} proven committed), {} ops",
            s.txns, s.committed, s.aborted, s.unknown, s.unknown_inferred_committed, s.ops
        );
        let edges: Vec<String> = s.edges.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "edges: {}; cyclic components: {}",
            if edges.is_empty() {
                "none".to_string()
            } else {
                edges.join(", ")
            },
            s.cyclic_components
        );
        if s.increment_runs_cut > 0 {
            let _ = writeln!(
                out,
                "note: {} walks of long runs of increments were cut; edges past the cut were not checked",
                s.increment_runs_cut
            );
        }
        if s.salt_chains_cut > 0 {
            let _ = writeln!(
                out,
                "note: the Salt chain search hit its bound ({} chain-wr edges or {} witness links); \
                 {} ACID transactions' read chains were not checked",
                crate::chains::CHAIN_EDGES_MAX,
                crate::chains::CHAIN_LINKS_MAX,
                s.salt_chains_cut
            );
        }
        if self.anomalies.is_empty() {
            let _ = writeln!(out, "anomalies: none");
        } else {
            let counts: Vec<String> = self
                .counts
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = writeln!(out, "anomalies: {}", counts.join(", "));
        }
        let _ = writeln!(
            out,
            "level {}: {}",
            self.level.name(),
            if self.valid { "OK" } else { "VIOLATED" }
        );
        let shown: Vec<&Anomaly> = self.anomalies.iter().take(max_witnesses).collect();
        for a in &shown {
            let tag = if self.level.forbids(a.class) {
                ""
            } else {
                " [allowed at this level]"
            };
            let text = a.to_string();
            let mut lines = text.lines();
            if let Some(first) = lines.next() {
                let _ = writeln!(out, "{first}{tag}");
            }
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
        if self.anomalies.len() > shown.len() {
            let _ = writeln!(
                out,
                "... {} more anomalies not shown (raise --max-witnesses)",
                self.anomalies.len() - shown.len()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_from_their_names_and_short_names() {
        for level in [
            Level::ReadCommitted,
            Level::SnapshotIsolation,
            Level::Serializable,
            Level::Salt,
        ] {
            assert_eq!(level.name().parse::<Level>(), Ok(level));
        }
        assert_eq!("si".parse::<Level>(), Ok(Level::SnapshotIsolation));
        let e = "snapshot".parse::<Level>().unwrap_err();
        assert!(e.contains("snapshot-isolation"), "{e}");
        let json = serde_json::to_string(&Level::SnapshotIsolation).unwrap();
        assert_eq!(json, r#""snapshot-isolation""#);
    }

    /// Snapshot isolation sits between read committed and serializable:
    /// it forbids the cycles without two adjacent anti-dependencies and
    /// allows the rest (G2 as reported); session order fails every level.
    #[test]
    fn what_each_level_forbids() {
        use AnomalyClass::*;
        let rc = Level::ReadCommitted;
        let si = Level::SnapshotIsolation;
        for class in [G0, G1a, G1b, G1c, SessionOrder, Fork, GarbageRead] {
            for level in [rc, si, Level::Serializable, Level::Salt] {
                assert!(level.forbids(class), "{level:?} {class}");
            }
        }
        for class in [GSingle, GNonadjacent] {
            assert!(!rc.forbids(class), "{class}");
            assert!(si.forbids(class), "{class}");
            assert!(Level::Serializable.forbids(class), "{class}");
        }
        assert!(!rc.forbids(G2));
        assert!(!si.forbids(G2));
        assert!(Level::Serializable.forbids(G2));
        assert_eq!(GNonadjacent.name(), "G-nonadjacent");
        assert_eq!(
            serde_json::to_string(&SessionOrder).unwrap(),
            r#""session-order""#
        );
    }
}
