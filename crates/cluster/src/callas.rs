//! Callas at the coordinator: transaction groups, nexus locks and the nexus
//! lock release order (seed 000 chapter 4, seed 002; DESIGN 4.4).
//!
//! ```text
//!  call(proc in group g) ──► body: every statement locks member_g (in-group
//!      │                     2PL; shares with nexus_g), reports the same-group
//!      │                     transactions it now depends on ("after")
//!      ▼ commit, if a transaction it depends on still holds nexus locks:
//!        member_g ──► nexus_g at every participant (locks kept); else the
//!        locks go with the commit, as in 2PL
//!  client answered ──► (background) wait until every transaction it depends
//!                      on released its nexus locks ──► Release everywhere
//!                      ──► tell the transactions waiting on this one
//! ```
//!
//! A nexus lock is compatible with its own group and conflicts with other
//! groups (and the default group's ACID locks) unless both read, so no
//! transaction sees another group's uncommitted or intermediate state. The
//! release order ("if T2 depends on T1 and both are in one group, T2 cannot
//! release its nexus locks until T1 does") keeps dependency cycles from
//! spanning groups (Theorem 4.3.2); it is enforced here, across partitions,
//! because one partition sees only its own rows.
//!
//! Mechanisms inside a group:
//! - `2pl`: plain two-phase locking among the group's transactions.
//! - `chop`: every statement is a piece that commits on its own as soon as
//!   it ran (the finest chopping; transaction chopping's commit-per-piece
//!   behaviour). Its pieces' locks become nexus locks at once, so later
//!   same-group transactions go ahead while the transaction still runs.
//!   Only for procedures whose aborts all come from their first statement
//!   (rollback safety): a later piece cannot be undone.
//! - `sc`: classic transaction chopping (the SC-cycle analysis) of the
//!   group's procedures against each other; each piece, one or more
//!   statements, commits on its own like a `chop` piece (`crate::sc`).
//!
//! Procedures in no group and interactive transactions run in the default
//! group: the `acid` protocol, under ACID locks (a group of its own to
//! every nexus lock).
//!
//! User guide: `docs/callas.md`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{AbortCause, Error, NodeId, Result, TxnId, Value};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::coordinator::{
    abort, backoff, commit_keeping_after, committed, retry_after, CallOutcome, ProcCtx, Shared,
    TxnState,
};
use crate::message::PartitionMsg;
use crate::procedure::PreparedProc;
use crate::protocol::Mutation;
use crate::stats::ClusterCounters;

/// How a group's transactions are isolated from each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// Plain two-phase locking inside the group.
    #[serde(rename = "2pl")]
    TwoPl,
    /// Every statement a piece committed on its own (see the module doc).
    Chop,
    /// Classic transaction chopping: the SC-cycle analysis' pieces, each
    /// committed on its own (see `crate::sc`).
    Sc,
    /// Runtime Pipelining: rank-ordered pieces from the static analysis,
    /// piece-level locks, uncommitted reads inside the group with commit
    /// dependencies and cascading aborts (see the module doc).
    Rp,
}

impl FromStr for Mechanism {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "2pl" => Ok(Mechanism::TwoPl),
            "chop" => Ok(Mechanism::Chop),
            "sc" => Ok(Mechanism::Sc),
            "rp" => Ok(Mechanism::Rp),
            other => Err(Error::Config(format!(
                "unknown group mechanism `{other}` (expected 2pl, chop, sc or rp)"
            ))),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::TwoPl => "2pl",
            Mechanism::Chop => "chop",
            Mechanism::Sc => "sc",
            Mechanism::Rp => "rp",
        })
    }
}

/// One transaction group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDef {
    pub name: String,
    pub mechanism: Mechanism,
    pub procedures: Vec<String>,
    /// Runtime Pipelining: run every procedure's own body, never one of
    /// its reorderings (`rp/as-written`; the analysis's choice is the
    /// default, `crate::Reordering`).
    #[serde(default)]
    pub as_written: bool,
}

/// Which procedures run in which group. Group ids are positions + 1 (the
/// default group, ACID, has none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grouping {
    pub groups: Vec<GroupDef>,
}

impl Grouping {
    /// Parses `name:mechanism=proc,proc;name:mechanism=proc`, e.g.
    /// `orders:2pl=new_order,payment;rest:chop=delivery`; `rp/as-written`
    /// is Runtime Pipelining without reorderings.
    pub fn parse(spec: &str) -> Result<Grouping> {
        let mut groups = Vec::new();
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::Config(format!(
                    "bad group `{part}`: expected name:mechanism=procedure,procedure"
                ))
            };
            let (head, procs) = part.split_once('=').ok_or_else(bad)?;
            let (name, mechanism) = head.split_once(':').ok_or_else(bad)?;
            let procedures: Vec<String> = procs
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            if name.trim().is_empty() || procedures.is_empty() {
                return Err(bad());
            }
            let (mechanism, as_written) = match mechanism.trim().split_once('/') {
                None => (mechanism.trim(), false),
                Some((m, "as-written")) if m.trim() == "rp" => (m.trim(), true),
                Some((_, option)) => {
                    return Err(Error::Config(format!(
                        "bad group `{part}`: unknown option `/{option}` (only rp/as-written)"
                    )))
                }
            };
            groups.push(GroupDef {
                name: name.trim().to_string(),
                mechanism: mechanism.parse()?,
                procedures,
                as_written,
            });
        }
        if groups.is_empty() {
            return Err(Error::Config("a grouping needs at least one group".into()));
        }
        Ok(Grouping { groups })
    }

    /// Every one of `procedures` in one 2PL group (what `callas` runs when
    /// no grouping is given: nexus locks everywhere, no in-group gain).
    pub fn one_group<'a>(procedures: impl IntoIterator<Item = &'a str>) -> Grouping {
        let mut procedures: Vec<String> = procedures.into_iter().map(str::to_string).collect();
        procedures.sort();
        Grouping {
            groups: vec![GroupDef {
                name: "all".into(),
                mechanism: Mechanism::TwoPl,
                procedures,
                as_written: false,
            }],
        }
    }

    /// Checks the grouping against the application: every procedure named
    /// exists and is in one group only.
    pub fn validate<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let known: std::collections::HashSet<&str> = known.into_iter().collect();
        let mut seen = HashMap::new();
        for g in &self.groups {
            for p in &g.procedures {
                if !known.contains(p.as_str()) {
                    let mut names: Vec<&str> = known.iter().copied().collect();
                    names.sort();
                    return Err(Error::Config(format!(
                        "group `{}` names procedure `{p}`, which the application does not have (it has: {})",
                        g.name,
                        names.join(", ")
                    )));
                }
                if let Some(other) = seen.insert(p.as_str(), g.name.as_str()) {
                    return Err(Error::Config(format!(
                        "procedure `{p}` is in two groups: `{other}` and `{}`",
                        g.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The group of `procedure` (id, mechanism), `None` for the default
    /// group.
    pub fn group_of(&self, procedure: &str) -> Option<(u32, Mechanism)> {
        self.groups
            .iter()
            .position(|g| g.procedures.iter().any(|p| p == procedure))
            .map(|i| (i as u32 + 1, self.groups[i].mechanism))
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            let option = if g.as_written { "/as-written" } else { "" };
            write!(
                f,
                "{}:{}{option}={}",
                g.name,
                g.mechanism,
                g.procedures.join(",")
            )?;
        }
        Ok(())
    }
}

/// A Callas transaction's state at its coordinator.
pub(crate) struct CallasState {
    pub mechanism: Mechanism,
    /// Same-group transactions this one depends on (reported by the
    /// partitions when a lock was granted next to their nexus locks), and
    /// their progress (`None`: gone from the board, so released).
    pub after: SmallVec<[TxnId; 4]>,
    pub deps: SmallVec<[Option<Arc<Progress>>; 4]>,
    /// Position of the next statement (chop: each is a piece).
    pub seq: u32,
    /// Runtime Pipelining and `sc`: the procedure's pieces, the current
    /// piece (number, rank) and the partitions it touched.
    pub pieces: Option<Arc<ProcPieces>>,
    /// Runs the rollback-safe chopping (the group is in safe mode).
    pub safe: bool,
    pub piece: Option<(u32, Option<u32>)>,
    pub piece_parts: SmallVec<[usize; 4]>,
    /// The current piece's last statement (`Placed::ends_piece`) ran: its
    /// locks where it ran are nexus locks already, so another statement
    /// of the piece means the body and the analysis disagree.
    pub piece_ended: bool,
    /// The rank-progress wait of the current piece left to the partitions
    /// (`LockSpec::after_rank`): the transaction followed, the rank, and
    /// its progress. Its statements carry it until the coordinator sees
    /// the rank reached.
    pub rank_hold: Option<(TxnId, u32, Arc<Progress>)>,
    /// This transaction's own progress, on the board.
    pub progress: Arc<Progress>,
    /// `sc`: the open piece and the results the body is replayed from.
    pub sc: Option<Box<crate::sc::ScRun>>,
}

impl CallasState {
    pub fn note_after(&mut self, txns: &[TxnId], board: &NexusBoard) {
        for t in txns {
            if !self.after.contains(t) {
                self.after.push(*t);
                let p = board.get(*t);
                if let Some(p) = p
                    .as_ref()
                    .filter(|p| p.outcome.load(Ordering::Acquire) == 0)
                {
                    self.progress.below.lock().push(p.clone());
                }
                self.deps.push(p);
            }
        }
    }

    /// The partitions of the current piece (Runtime Pipelining: they learn
    /// it ended; `sc`: they commit it).
    pub fn touch(&mut self, p: usize) {
        if self.pieces.is_some() && !self.piece_parts.contains(&p) {
            self.piece_parts.push(p);
        }
    }
}

/// Which piece (and rank, `None` for a piece of free operations or one
/// spanning ranks) each statement of a procedure belongs to. Runtime
/// Pipelining: in the optimistic chopping and in the rollback-safe one
/// (every statement after which the body may roll back in the first
/// piece), and the group's safe-mode switch. `sc`: the classic chopping
/// (no ranks, no safe mode: it is rollback-safe).
#[derive(Debug)]
pub struct ProcPieces {
    pub by_statement: HashMap<String, Placed>,
    pub safe_by_statement: HashMap<String, Placed>,
    pub mode: Option<Arc<SafeMode>>,
    /// Runtime Pipelining: the reordering of the body the analysis chose
    /// (`None`: the procedure's own body).
    pub reordering: Option<crate::Reordering>,
}

/// Where a statement runs in a chopping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub piece: u32,
    /// `None`: a piece of free operations, or one spanning ranks.
    pub rank: Option<u32>,
    /// Runtime Pipelining: the statement reads, by primary key, a row a
    /// later statement of its piece updates or deletes, so its read takes
    /// the write lock (`LockSpec::for_update`). The piece would hold that
    /// lock from the later statement to its end anyway; taking it at the
    /// read costs the statements in between, and two pieces that both
    /// read and then write the row cannot deadlock on the upgrade.
    pub write_first: bool,
    /// Runtime Pipelining: the statement is a blind increment of one row,
    /// outside any loop, after which its piece touches that table only to
    /// read columns no statement of the group writes. Increments commute
    /// (the analysis frees them of each other) and are undone by
    /// subtraction, so once it has run, its row's member lock becomes the
    /// group's nexus lock (`LockSpec::end_row`): the group's other
    /// increments and reads of other columns need not wait for the piece
    /// to end. A same-group reader of the column still depends on it (the
    /// partitions track columns); the condition on the rest of the piece
    /// keeps such a reader from seeing the piece half done.
    pub ends_row: bool,
    /// Runtime Pipelining: the statement is the last of its piece, which
    /// has a rank, and is outside any loop, so once it has run at a
    /// partition the piece has ended there (`LockSpec::ends_piece`): its
    /// member locks there become nexus locks and the followers held there
    /// for its rank go on, without waiting for the coordinator's
    /// `EndPiece`.
    pub ends_piece: bool,
}

impl ProcPieces {
    /// Where `statement` runs, an error naming it if the analysis has
    /// none (the body runs a statement its procedure did not declare to
    /// the analysis).
    pub(crate) fn piece_of(&self, statement: &str, safe: bool) -> Result<Placed> {
        self.placements(safe)
            .get(statement)
            .copied()
            .ok_or_else(|| {
                Error::Internal(format!(
                    "statement `{statement}` is not in the chopping analysis of its procedure"
                ))
            })
    }

    /// The statement that ends `piece` where it runs (`Placed::ends_piece`).
    fn piece_end(&self, piece: u32, safe: bool) -> Option<&str> {
        self.placements(safe)
            .iter()
            .find(|(_, p)| p.piece == piece && p.ends_piece)
            .map(|(name, _)| name.as_str())
    }

    fn placements(&self, safe: bool) -> &HashMap<String, Placed> {
        if safe {
            &self.safe_by_statement
        } else {
            &self.by_statement
        }
    }
}

/// Where each statement of `spec` runs in `chopping`; `plans` (by
/// statement name) decide `Placed::write_first`, which stays off without
/// them.
fn place(
    spec: &brine_analysis::ProcSpec,
    chopping: &brine_analysis::ProcChopping,
    plans: Option<&HashMap<&str, brine_sql::Plan>>,
    group_writes: Option<&GroupWrites>,
) -> HashMap<String, Placed> {
    let write_first = plans
        .map(|p| write_first(p, spec, chopping))
        .unwrap_or_default();
    let ends_row = group_writes
        .map(|w| ends_row(spec, chopping, w))
        .unwrap_or_default();
    let looped: HashSet<usize> = spec.loops().iter().flatten().copied().collect();
    let mut out = HashMap::new();
    for (k, piece) in chopping.pieces.iter().enumerate() {
        let last = piece.ops.iter().max().filter(|op| !looped.contains(op));
        for &op in &piece.ops {
            let name = &spec.ops[op].name;
            let placed = Placed {
                piece: k as u32,
                rank: piece.rank().map(|r| r as u32),
                write_first: write_first.contains(name.as_str()),
                ends_row: ends_row.contains(name.as_str()),
                ends_piece: piece.rank().is_some() && last == Some(&op),
            };
            out.insert(name.clone(), placed);
        }
    }
    out
}

/// The columns each table's statements write, over a group's procedures.
type GroupWrites = HashMap<brine_core::TableId, std::collections::BTreeSet<usize>>;

fn group_writes(specs: &[brine_analysis::ProcSpec]) -> GroupWrites {
    let mut out = GroupWrites::new();
    for op in specs.iter().flat_map(|s| &s.ops) {
        out.entry(op.access.table)
            .or_default()
            .extend(op.access.written.iter().copied());
    }
    out
}

/// The statements of `chopping`'s pieces whose row's piece-level lock may
/// end as soon as they ran (`Placed::ends_row`).
fn ends_row<'a>(
    spec: &'a brine_analysis::ProcSpec,
    chopping: &brine_analysis::ProcChopping,
    group_writes: &GroupWrites,
) -> HashSet<&'a str> {
    use brine_sql::StatementKind;
    let looped: HashSet<usize> = spec.loops().iter().flatten().copied().collect();
    let mut out = HashSet::new();
    for piece in &chopping.pieces {
        let mut ops: Vec<usize> = piece.ops.clone();
        ops.sort_unstable();
        for (i, &op) in ops.iter().enumerate() {
            let a = &spec.ops[op].access;
            if a.kind != StatementKind::Update
                || !a.blind_increment
                || !a.point
                || looped.contains(&op)
            {
                continue;
            }
            let written = group_writes.get(&a.table);
            let then_reads_only = ops[i + 1..].iter().all(|&later| {
                let b = &spec.ops[later].access;
                b.table != a.table
                    || (b.kind == StatementKind::Select
                        && written.is_none_or(|w| w.is_disjoint(&b.read)))
            });
            if then_reads_only {
                out.insert(spec.ops[op].name.as_str());
            }
        }
    }
    out
}

/// The statements of `chopping`'s pieces that read, by primary key, a row
/// a later statement of the same piece updates or deletes: same table,
/// every key column bound by the same parameter or literal.
fn write_first<'a>(
    plans: &HashMap<&str, brine_sql::Plan>,
    spec: &'a brine_analysis::ProcSpec,
    chopping: &brine_analysis::ProcChopping,
) -> HashSet<&'a str> {
    use brine_sql::{Operand, StatementKind};
    // The key columns of a point access, each with what binds it (a
    // parameter by name, or a literal).
    let key = |p: &brine_sql::Plan| -> Option<Vec<(usize, Result<String, brine_core::Value>)>> {
        let a = p.access();
        if a.range || a.index != brine_core::IndexId::PRIMARY {
            return None;
        }
        let bind = |o: &Operand| match o {
            Operand::Param(i) => Ok(p.params()[*i].name.clone()),
            Operand::Literal(v) => Err(v.clone()),
        };
        Some(a.key_params.iter().map(|(c, o)| (*c, bind(o))).collect())
    };
    let mut out = HashSet::new();
    for piece in &chopping.pieces {
        let mut ops: Vec<usize> = piece.ops.clone();
        ops.sort_unstable();
        let plans: Vec<(&str, &brine_sql::Plan)> = ops
            .iter()
            .filter_map(|&op| {
                let name = spec.ops[op].name.as_str();
                plans.get(name).map(|p| (name, p))
            })
            .collect();
        for (i, (name, read)) in plans.iter().enumerate() {
            if read.access().kind != StatementKind::Select {
                continue;
            }
            let Some(read_key) = key(read) else { continue };
            let written = plans[i + 1..].iter().any(|(_, w)| {
                matches!(
                    w.access().kind,
                    StatementKind::Update | StatementKind::Delete
                ) && w.access().table == read.access().table
                    && key(w).as_ref() == Some(&read_key)
            });
            if written {
                out.insert(*name);
            }
        }
    }
    out
}

/// Whether an attempt counts toward the safe mode's rollback rate: the
/// application rolled it back (seed 002 section 6, Fig. 14: the switch
/// "when the rollback rate is higher than 7%", the rate of the check that
/// fails). A cascade is what such a rollback costs under optimism, not
/// another rollback of the application; counted too, it pushed the group
/// into safe mode at application rates of 1-5%.
fn rolled_back<T>(outcome: &Result<T>) -> bool {
    matches!(outcome, Err(Error::UserAbort(_)))
}

/// When Runtime Pipelining switches a group to its rollback-safe chopping
/// (seed 002 section 5.1: "when the rollback rate crosses a threshold,
/// Runtime Pipelining goes temporarily back to enforcing rollback safety
/// ... it periodically tries to revert").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SafeModeConfig {
    /// Rollback rate (attempts the application rolled back, per finished
    /// attempt of the group; cascades do not count), in percent, above
    /// which the group goes safe.
    pub threshold_percent: f64,
    /// Attempts per measurement window.
    pub window: u32,
    /// How long the group stays safe before it tries optimism again.
    pub hold: Duration,
}

impl Default for SafeModeConfig {
    fn default() -> Self {
        // The sources' crossover: optimism wins below about 7% rollbacks.
        SafeModeConfig {
            threshold_percent: 7.0,
            window: 200,
            hold: Duration::from_secs(1),
        }
    }
}

/// One `rp` group's rollback rate and mode.
#[derive(Debug)]
pub struct SafeMode {
    config: SafeModeConfig,
    /// Attempts and rollbacks in the current window.
    counts: Mutex<(u32, u32)>,
    /// Safe until this instant (`None`: optimistic).
    safe_until: Mutex<Option<tokio::time::Instant>>,
}

impl SafeMode {
    pub fn new(config: SafeModeConfig) -> SafeMode {
        SafeMode {
            config,
            counts: Mutex::new((0, 0)),
            safe_until: Mutex::new(None),
        }
    }

    /// Whether a transaction starting now runs the rollback-safe chopping.
    pub fn is_safe(&self) -> bool {
        let mut until = self.safe_until.lock();
        match *until {
            Some(t) if tokio::time::Instant::now() < t => true,
            Some(_) => {
                // Probe: optimism again until the rate says otherwise.
                *until = None;
                false
            }
            None => false,
        }
    }

    /// An attempt of the group finished; `rolled_back`: by a user abort or
    /// a cascade. Returns whether this made the group go safe.
    pub fn record(&self, rolled_back: bool) -> bool {
        let mut c = self.counts.lock();
        c.0 += 1;
        c.1 += u32::from(rolled_back);
        if c.0 < self.config.window.max(1) {
            return false;
        }
        let rate = 100.0 * f64::from(c.1) / f64::from(c.0);
        *c = (0, 0);
        drop(c);
        if rate <= self.config.threshold_percent {
            return false;
        }
        let mut until = self.safe_until.lock();
        let switched = until.is_none();
        if switched {
            tracing::info!(
                rate,
                "Runtime Pipelining group switches to its rollback-safe chopping"
            );
        }
        *until = Some(tokio::time::Instant::now() + self.config.hold);
        switched
    }
}

/// Runs the static analysis (DESIGN 5) on every `rp` and `sc` group of
/// `grouping`: the pieces of each of its procedures. `rp`: Runtime
/// Pipelining's rank-ordered pieces (`brine analyze --off larger-first`)
/// and their rollback-safe variant; `sc`: the classic chopping of the
/// group's procedures against each other (`brine analyze`, "within each
/// group"). The notes the analysis keeps for the built-in workloads
/// (`brine_analysis::workloads`) are used when the application is one of
/// them.
pub fn plan_pieces(
    grouping: &Grouping,
    app: &str,
    ddl: &str,
    procedures: &[crate::ProcedureDef],
    safe_mode: SafeModeConfig,
) -> Result<HashMap<String, Arc<ProcPieces>>> {
    use brine_analysis::workloads::specs_with_notes;
    use brine_analysis::{analyze_group, classic, ProcSource, Refinements};
    let mut out = HashMap::new();
    for g in grouping
        .groups
        .iter()
        .filter(|g| matches!(g.mechanism, Mechanism::Rp | Mechanism::Sc))
    {
        let sources: Vec<ProcSource> = g
            .procedures
            .iter()
            .filter_map(|name| procedures.iter().find(|d| &d.name == name))
            .map(crate::ProcedureDef::source)
            .collect();
        let fail = |e: brine_analysis::AnalysisError| {
            Error::Config(format!(
                "group `{}`: the {} analysis failed: {e}",
                g.name,
                if g.mechanism == Mechanism::Rp {
                    "Runtime Pipelining"
                } else {
                    "transaction chopping"
                }
            ))
        };
        let (catalog, specs) = specs_with_notes(app, ddl, &sources).map_err(fail)?;
        let refs: Vec<&brine_analysis::ProcSpec> = specs.iter().collect();
        // Larger pieces first is the sources' tool reordering the code;
        // brine runs each body as written, so within one body the pieces
        // keep its order, and larger pieces first chooses among the
        // bodies a procedure offers (`brine_analysis::order`).
        let refinements = Refinements {
            larger_first: false,
            ..Refinements::ALL
        };
        if g.mechanism == Mechanism::Sc {
            for (spec, chopping) in specs
                .iter()
                .zip(classic::classic_chopping(&refs, refinements))
            {
                let by_statement = place(spec, &chopping, None, None);
                out.insert(
                    spec.name.clone(),
                    Arc::new(ProcPieces {
                        safe_by_statement: by_statement.clone(),
                        by_statement,
                        mode: None,
                        reordering: None,
                    }),
                );
            }
            continue;
        }
        // Each procedure's candidates: its own body, then its reorderings
        // (unless the group runs the bodies as written).
        let mut candidates: Vec<Vec<brine_analysis::ProcSpec>> = Vec::new();
        for (src, own) in sources.iter().zip(&specs) {
            candidates.push(if g.as_written {
                vec![own.clone()]
            } else {
                let notes = brine_analysis::workloads::notes(app, &src.name).unwrap_or_default();
                own.clone()
                    .with_reorderings(&catalog, src, &notes)
                    .map_err(fail)?
            });
        }
        let defs: Vec<&crate::ProcedureDef> = sources
            .iter()
            .filter_map(|src| procedures.iter().find(|d| d.name == src.name))
            .collect();
        // The procedures outside the group, whose lock order a reordering
        // must keep (only needed when there is a reordering to check).
        let outside = if candidates.iter().any(|c| c.len() > 1) {
            let others: Vec<ProcSource> = procedures
                .iter()
                .filter(|d| !g.procedures.contains(&d.name))
                .map(crate::ProcedureDef::source)
                .collect();
            specs_with_notes(app, ddl, &others).map_err(fail)?.1
        } else {
            Vec::new()
        };
        let outside_refs: Vec<&brine_analysis::ProcSpec> = outside.iter().collect();
        let (picks, analysed, specs) = match brine_analysis::choose_orderings(
            &candidates,
            &outside_refs,
            refinements,
        )
        .map_err(fail)?
        {
            Some(choice) => {
                let chosen: Vec<brine_analysis::ProcSpec> = choice
                    .picks
                    .iter()
                    .zip(&candidates)
                    .map(|(&i, c)| c[i].clone())
                    .collect();
                (choice.picks, choice.result, chosen)
            }
            None => {
                // No combination of the bodies runs its chopping in
                // order: the ranks put some statement before one a body
                // runs earlier. Chop the own bodies again with every
                // statement depending on the ones before it (coarser
                // ranks and pieces, in body order).
                let ordered: Vec<brine_analysis::ProcSpec> =
                    specs.iter().map(|s| s.in_body_order()).collect();
                let ordered_refs: Vec<&brine_analysis::ProcSpec> = ordered.iter().collect();
                let analysed = analyze_group(&ordered_refs, refinements).map_err(fail)?;
                tracing::info!(
                    group = %g.name,
                    "chopped in body order: the analysis's ranks would need the bodies reordered"
                );
                if !brine_analysis::order::runs_in_body_order(&analysed) {
                    return Err(Error::Internal(format!(
                        "group `{}`: the chopping in body order does not run in body order",
                        g.name
                    )));
                }
                (vec![0; specs.len()], analysed, ordered)
            }
        };
        let mode = Arc::new(SafeMode::new(safe_mode));
        let writes = group_writes(&specs);
        for ((((spec, chopping), safe), source), (def, pick)) in specs
            .iter()
            .zip(&analysed.rp.choppings)
            .zip(&analysed.safe)
            .zip(&sources)
            .zip(defs.iter().zip(picks))
        {
            // Prepared once for both choppings; a statement that does not
            // prepare is refused when the procedure is, so it only loses
            // `write_first` here.
            let plans: HashMap<&str, brine_sql::Plan> = source
                .statements
                .iter()
                .filter_map(|(n, sql)| Some((n.as_str(), brine_sql::prepare(&catalog, sql).ok()?)))
                .collect();
            let reordering = pick.checked_sub(1).map(|i| def.reorderings[i].clone());
            if let Some(r) = &reordering {
                tracing::info!(
                    group = %g.name,
                    procedure = %def.name,
                    reordering = %r.name,
                    "Runtime Pipelining runs a reordering of the body (its chopping runs better)"
                );
            }
            out.insert(
                spec.name.clone(),
                Arc::new(ProcPieces {
                    by_statement: place(spec, chopping, Some(&plans), Some(&writes)),
                    safe_by_statement: place(spec, safe, Some(&plans), Some(&writes)),
                    mode: Some(mode.clone()),
                    reordering,
                }),
            );
        }
    }
    Ok(out)
}

/// Runtime Pipelining, when the body returned: its last piece ends now,
/// not at the commit (which may wait for other transactions' commits and
/// takes a round of votes), so same-group transactions waiting for this
/// one's rank go on. Returns whether a piece ended.
fn rp_body_done(shared: &Shared, node: NodeId, state: &Mutex<TxnState>, ok: bool) -> bool {
    let mut st = state.lock();
    let owner = st.txn;
    if !ok || st.doomed.is_some() {
        return false;
    }
    let Some(c) = st
        .callas
        .as_mut()
        .filter(|c| c.mechanism == Mechanism::Rp && c.pieces.is_some())
    else {
        return false;
    };
    let Some((_, rank)) = c.piece.take() else {
        return false;
    };
    for p in std::mem::take(&mut c.piece_parts) {
        shared.send(node, p, PartitionMsg::EndPiece { owner, rank });
    }
    if let Some(r) = rank {
        c.progress.finished_piece(r);
    }
    true
}

/// Runtime Pipelining, before a statement runs: when it opens a new piece,
/// the previous piece ends (its piece-level locks become nexus locks at its
/// partitions, and its rank counts as executed), and the new piece of rank
/// `r` waits until every same-group transaction this one depends on
/// executed a piece of rank `>= r` or committed. A statement of an earlier
/// piece than the current one means the body and the analysis disagree.
/// Returns where the statement runs (which decides how it locks:
/// `Placed::write_first`, `Placed::ends_row`), `None` outside a chopping.
pub(crate) async fn enter_piece(ctx: &ProcCtx, statement: &str) -> Result<Option<Placed>> {
    let (owner, progress, ending, wait, placed) = {
        let mut st = ctx.state.lock();
        let owner = st.txn;
        let Some(c) = st.callas.as_mut() else {
            return Ok(None);
        };
        let Some(pieces) = &c.pieces else {
            return Ok(None);
        };
        let placed = pieces.piece_of(statement, c.safe)?;
        let Placed { piece, rank, .. } = placed;
        match c.piece {
            Some((cur, _)) if piece == cur => {
                if c.piece_ended {
                    let last = pieces
                        .piece_end(piece, c.safe)
                        .unwrap_or("its last statement");
                    // Its partitions already turned the piece's locks into
                    // nexus locks: running on would let same-group
                    // transactions see the piece half done.
                    return Err(Error::Internal(format!(
                        "statement `{statement}` of piece {} runs after `{last}`, which the \
                         analysis takes for that piece's last statement: the body and the \
                         analysis disagree (declare the loop or the order the body runs its \
                         statements in: crates/analysis/src/workloads.rs)",
                        piece + 1
                    )));
                }
                c.piece_ended |= placed.ends_piece;
                return Ok(Some(placed));
            }
            Some((cur, _)) if piece < cur => {
                return Err(Error::Internal(format!(
                    "statement `{statement}` belongs to piece {} but the transaction already runs \
                     piece {}: the body and the analysis's notes disagree \
                     (crates/analysis/src/workloads.rs)",
                    piece + 1,
                    cur + 1
                )))
            }
            _ => {}
        }
        let ending = c
            .piece
            .map(|(_, r)| (r, std::mem::take(&mut c.piece_parts)));
        c.piece = Some((piece, rank));
        c.piece_ended = placed.ends_piece;
        c.rank_hold = None;
        let wait: SmallVec<[(TxnId, Arc<Progress>); 4]> = match rank {
            Some(_) => c
                .after
                .iter()
                .zip(&c.deps)
                .filter_map(|(t, d)| Some((*t, d.clone()?)))
                .collect(),
            None => SmallVec::new(),
        };
        (
            owner,
            c.progress.clone(),
            ending,
            rank.map(|r| (r, wait)),
            placed,
        )
    };
    if let Some((rank, parts)) = ending {
        for p in parts {
            ctx.shared
                .send(ctx.node, p, PartitionMsg::EndPiece { owner, rank });
        }
        if let Some(r) = rank {
            progress.finished_piece(r);
        }
    }
    if let Some((r, mut deps)) = wait {
        let c = &ctx.shared.counters;
        // One transaction still short of the rank (the last) is waited for
        // at the partitions, with the piece's statements; the others here.
        let chained = |d: &Progress| d.uncommitted_depth(MAX_CHAIN) >= MAX_CHAIN;
        let hold = if ctx.shared.rank_holds {
            (0..deps.len())
                .rev()
                .find(|&i| !deps[i].1.has_reached(r) && !chained(&deps[i].1))
        } else {
            None
        };
        let wait = |d: Arc<Progress>, commit: bool| async move {
            tracing::trace!(%owner, rank = r, commit, "rank wait");
            let patience = ctx.shared.wait_timeout;
            let waited = if commit {
                d.committed(patience).await
            } else {
                d.reached(r, patience).await
            };
            match waited {
                Ok(Some(took)) => ClusterCounters::count_wait(&c.rank_waits, &c.rank_wait_ns, took),
                Ok(None) => {}
                Err(e) => {
                    if let Error::Aborted(cause) = &e {
                        ctx.state.lock().doomed = Some(*cause);
                    }
                    return Err(e);
                }
            }
            Ok(())
        };
        // First the dependencies whose chains are short, for their rank,
        // newest first: the newest are the furthest behind, and by the
        // time one reaches the rank the older ones mostly have too, so
        // most of the rest need no wait (on ticketing at 256 clients,
        // about 10,000 waits in 5 s instead of 900,000 short ones, each a
        // wake-up of the coordinator's task).
        let mut deep: SmallVec<[usize; 4]> = SmallVec::new();
        for (i, (_, d)) in deps.iter().enumerate().rev() {
            if Some(i) == hold {
                continue;
            }
            if chained(d) {
                deep.push(i);
            } else {
                wait(d.clone(), false).await?;
            }
        }
        // Then the deep ones, oldest first, each asked again: the waits
        // before it give its chain time to commit, and a chain still deep
        // is waited for to commit, not only to reach the rank. (Waiting
        // for the commit of every dependency found deep at the start, or
        // asking the newest first, serialized the pipeline: inter-group
        // at 100:1 fell from 12,000 to 7,000 txn/s;
        // `docs/results/baselines.md`.)
        for &i in deep.iter().rev() {
            let d = &deps[i].1;
            wait(d.clone(), chained(d)).await?;
        }
        if let Some((t, d)) = hold.map(|i| deps.swap_remove(i)) {
            if let Some(c) = ctx.state.lock().callas.as_mut() {
                c.rank_hold = Some((t, r, d));
            }
        }
    }
    Ok(Some(placed))
}

/// The rank-progress wait the current piece's next statement leaves to
/// its partitions (`LockSpec::after_rank`), if the coordinator has not
/// yet seen the rank reached.
pub(crate) fn rank_hold(state: &Mutex<TxnState>) -> Option<(TxnId, u32, Arc<Progress>)> {
    let mut st = state.lock();
    let c = st.callas.as_mut()?;
    match &c.rank_hold {
        Some((_, r, d)) if !d.has_reached(*r) => c.rank_hold.clone(),
        Some(_) => {
            c.rank_hold = None;
            None
        }
        None => None,
    }
}

/// Runs `exec`, a statement sent held for `after` (the transaction and
/// rank of `d`) at `targets`, while waiting here for the same rank: if the
/// coordinator sees it first (the rank was reached at another partition,
/// or the transaction ended), the partitions are told to let the statement
/// go. A failed wait (the transaction aborted, or the wait timed out)
/// dooms this one.
pub(crate) async fn held<T>(
    ctx: &ProcCtx,
    targets: &[usize],
    after: (TxnId, u32),
    d: Arc<Progress>,
    exec: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::pin!(exec);
    let reached = d.reached(after.1, ctx.shared.wait_timeout);
    tokio::pin!(reached);
    let waited = tokio::select! {
        biased;
        r = &mut exec => return r,
        w = &mut reached => w,
    };
    let txn = ctx.state.lock().txn;
    for &p in targets {
        ctx.shared
            .send(ctx.node, p, PartitionMsg::RankGo { txn, after });
    }
    let r = exec.await;
    match waited {
        Err(Error::Aborted(cause)) => {
            ctx.state.lock().doomed = Some(cause);
            Err(Error::Aborted(cause))
        }
        _ => r,
    }
}

/// What a same-group transaction may wait for about a running Callas
/// transaction: the highest rank of a piece it finished, its outcome, and
/// the release of its nexus locks.
#[derive(Default)]
pub struct Progress {
    /// 1 + the highest rank of a piece it finished (0: none yet).
    rank: AtomicU32,
    /// The same-group transactions it depends on that were running when
    /// it came to depend on them; dropped when it ends, so a chain holds
    /// only what is still undecided (see [`Progress::uncommitted_depth`]).
    below: Mutex<SmallVec<[Arc<Progress>; 2]>>,
    /// 0 while running, then `COMMITTED` or `ABORTED`.
    outcome: AtomicU8,
    released: AtomicBool,
    /// The transaction whose release its own release waits for, if any.
    awaits: Mutex<Option<TxnId>>,
    notify: Notify,
}

const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;

/// Runtime Pipelining pipelines a transaction behind a chain of at most
/// this many uncommitted transactions; one that would be deeper waits for
/// the one it depends on to commit instead of only for its rank, so an
/// abort cascades through at most this many transactions (seed 002
/// section 5.1: "limits the depth of dependency chains").
pub const MAX_CHAIN: u32 = 4;

impl Progress {
    /// How many transactions long the chain of still-undecided ones it
    /// heads is: 0 once it ended, else 1 + the longest chain below it,
    /// counted up to `cap`. Transactions that committed since a
    /// dependency was taken no longer count: the bound is on what an
    /// abort could still cascade through.
    ///
    /// Walked depth first with a budget: a transaction asked for at most
    /// `b` more looks for at most `b - 1` below it, and stops as soon as
    /// it has found that many, so the walk is never deeper than `cap`.
    /// What each transaction was found to head is remembered for the
    /// walk, so none is walked twice for the same budget.
    ///
    /// On a hot row every transaction depends on dozens or hundreds of
    /// others, which depend on the same ones:
    /// - following every path (as this first did) took time exponential
    ///   in `cap`;
    /// - counting level by level (as it then did) expanded every level in
    ///   full. At 256 clients on ticketing that left the coordinator's
    ///   core fully busy with 600 txn/s getting through.
    ///
    /// With the newest dependencies looked at first, such a chain is
    /// found at once, in `cap` steps.
    fn uncommitted_depth(&self, cap: u32) -> u32 {
        let mut found = FxHashMap::default();
        self.chain_within(cap, &mut found)
    }

    /// The longest undecided chain it heads, counted up to `budget`.
    /// `found` holds, per transaction already walked, the length found
    /// and the budget it was found with: exact when below that budget.
    fn chain_within(&self, budget: u32, found: &mut FxHashMap<*const Progress, (u32, u32)>) -> u32 {
        if budget == 0 || self.outcome.load(Ordering::Acquire) != 0 {
            return 0;
        }
        if budget == 1 {
            return 1;
        }
        let key = self as *const Progress;
        if let Some(&(length, asked)) = found.get(&key) {
            if length < asked || budget <= asked {
                return length.min(budget);
            }
        }
        // No lock is held while walking below: each dependency is taken
        // out on its own (the list only grows, or is cleared when this one
        // ends).
        let n = self.below.lock().len();
        if n == 0 {
            // Nothing below: nothing worth remembering (the common case,
            // which then allocates nothing).
            return 1;
        }
        let mut longest = 1;
        for i in (0..n).rev() {
            if longest == budget {
                break;
            }
            let Some(p) = self.below.lock().get(i).cloned() else {
                break;
            };
            longest = longest.max(1 + p.chain_within(budget - 1, found));
        }
        found.insert(key, (longest, budget));
        longest
    }

    /// Whether it finished a piece of rank `>= rank` or ended.
    fn has_reached(&self, rank: u32) -> bool {
        self.outcome.load(Ordering::Acquire) != 0 || self.rank.load(Ordering::Acquire) > rank
    }

    fn finished_piece(&self, rank: u32) {
        self.rank.fetch_max(rank + 1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    fn decide(&self, committed: bool) {
        let o = if committed { COMMITTED } else { ABORTED };
        self.outcome.store(o, Ordering::Release);
        self.below.lock().clear();
        self.notify.notify_waiters();
    }

    fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Waits until `ready` says something.
    async fn until<T>(&self, ready: impl Fn(&Progress) -> Option<T>) -> T {
        loop {
            // Created before the check, so a notification in between is
            // not lost.
            let notified = self.notify.notified();
            if let Some(v) = ready(self) {
                return v;
            }
            notified.await;
        }
    }

    /// `until`, and how long it waited (`None`: `ready` said something at
    /// once), for the cluster's wait counters.
    async fn timed_until<T>(
        &self,
        ready: impl Fn(&Progress) -> Option<T>,
    ) -> (T, Option<Duration>) {
        if let Some(v) = ready(self) {
            return (v, None);
        }
        let start = Instant::now();
        let v = self.until(ready).await;
        (v, Some(start.elapsed()))
    }

    /// Runtime Pipelining's rank-progress wait: until the transaction
    /// finished a piece of rank `>= rank`, or committed. An abort is an
    /// error: the waiter read its uncommitted state. A wait longer than
    /// `patience` is an error too (see [`Progress::committed`]).
    /// `Ok(Some(how long))` when it had to wait.
    async fn reached(&self, rank: u32, patience: Duration) -> Result<Option<Duration>> {
        let wait = self.timed_until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => (p.rank.load(Ordering::Acquire) > rank).then_some(Ok(())),
        });
        match tokio::time::timeout(patience, wait).await {
            Ok((r, waited)) => r.map(|()| waited),
            Err(_) => Err(Error::Aborted(AbortCause::LockTimeout)),
        }
    }

    /// Runtime Pipelining's commit dependency: until the transaction
    /// committed (`Ok`) or aborted (an error). Waits that the rank order
    /// does not cover (conflicts the analysis removed, such as commutative
    /// increments, still order commits so undo stays exact) could form a
    /// cycle no lock table sees; like a lock wait, a wait longer than
    /// `patience` (the lock wait timeout) aborts the waiter.
    /// `Ok(Some(how long))` when it had to wait.
    async fn committed(&self, patience: Duration) -> Result<Option<Duration>> {
        let wait = self.timed_until(|p| match p.outcome.load(Ordering::Acquire) {
            ABORTED => Some(Err(Error::Aborted(AbortCause::Cascade))),
            COMMITTED => Some(Ok(())),
            _ => None,
        });
        match tokio::time::timeout(patience, wait).await {
            Ok((r, waited)) => r.map(|()| waited),
            Err(_) => Err(Error::Aborted(AbortCause::LockTimeout)),
        }
    }
}

/// The running Callas transactions' progress, until each released its
/// nexus locks. Sharded so coordinators do not contend on one mutex.
pub struct NexusBoard {
    shards: Vec<Mutex<HashMap<TxnId, Arc<Progress>>>>,
}

impl Default for NexusBoard {
    fn default() -> Self {
        NexusBoard {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl NexusBoard {
    fn shard(&self, t: TxnId) -> &Mutex<HashMap<TxnId, Arc<Progress>>> {
        &self.shards[(t.id as usize) % self.shards.len()]
    }

    /// Registers `t` before it takes its first lock.
    fn register(&self, t: TxnId) -> Arc<Progress> {
        let r = Arc::new(Progress::default());
        self.shard(t).lock().insert(t, r.clone());
        r
    }

    fn get(&self, t: TxnId) -> Option<Arc<Progress>> {
        self.shard(t).lock().get(&t).cloned()
    }

    /// `t` released its nexus locks (or never will hold any).
    fn released(&self, t: TxnId) {
        if let Some(r) = self.shard(t).lock().remove(&t) {
            r.release();
        }
    }

    /// `txn`'s release waits until `t` released its nexus locks (at once
    /// if `t` is not registered: it already did). Dependencies the
    /// partitions over-approximate (a row a rolled-back `sc` piece touched
    /// stays recorded while an earlier piece's lock on it is kept) can
    /// make two committed transactions wait for each other's release; such
    /// a cycle is found by following what each release waits for, and
    /// broken by not waiting (the release order cannot hold along a cycle
    /// anyway).
    async fn wait_in_order(&self, txn: TxnId, t: TxnId) {
        const LOOK_AFTER: Duration = Duration::from_millis(50);
        let Some(r) = self.get(t) else {
            return;
        };
        let me = self.get(txn);
        if let Some(me) = &me {
            *me.awaits.lock() = Some(t);
        }
        loop {
            let released = r.until(|p| p.released.load(Ordering::Acquire).then_some(()));
            if tokio::time::timeout(LOOK_AFTER, released).await.is_ok() {
                break;
            }
            if self.awaits_reach(t, txn) {
                tracing::warn!(%txn, %t, "nexus release order: a cycle of release waits, broken");
                break;
            }
        }
        if let Some(me) = &me {
            *me.awaits.lock() = None;
        }
    }

    /// Whether following what each release waits for leads from `from` to
    /// `to`.
    fn awaits_reach(&self, from: TxnId, to: TxnId) -> bool {
        let mut cur = from;
        for _ in 0..1024 {
            let Some(next) = self.get(cur).and_then(|p| *p.awaits.lock()) else {
                return false;
            };
            if next == to {
                return true;
            }
            cur = next;
        }
        false
    }

    /// Whether `t` may still hold nexus locks.
    fn holds(&self, t: TxnId) -> bool {
        self.shard(t).lock().contains_key(&t)
    }

    /// Transactions still holding nexus locks (for tests and status).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs a procedure of group `group` to completion: attempts, retries,
/// commit; then, in the background, the nexus release in order.
pub(crate) async fn run_grouped(
    shared: &Arc<Shared>,
    node: NodeId,
    proc: &Arc<PreparedProc>,
    args: Vec<Value>,
    (group, mechanism): (u32, Mechanism),
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<CallOutcome> {
    let mut ts = None;
    let mut attempt = 0u32;
    let mut cascaded = false;
    loop {
        attempt += 1;
        let txn = shared.new_txn(ts);
        ts = Some(txn.ts);
        let progress = shared.nexus.register(txn);
        // A transaction a cascade rolled back runs its retry in the
        // default group, under ACID locks: it reads no uncommitted state,
        // so no cascade can roll it back again (seed 002 section 5.1).
        let (mechanism, pieces) = match mechanism {
            Mechanism::Rp if cascaded => (Mechanism::TwoPl, None),
            Mechanism::Rp | Mechanism::Sc => (mechanism, shared.pieces.get(&proc.name).cloned()),
            m => (m, None),
        };
        let mut st = TxnState::begin(shared, txn, Some(proc));
        st.at_cluster_level();
        if !cascaded {
            st.lock_class = Some(brine_lock::LockClass::Member(group));
        }
        st.callas = Some(Box::new(CallasState {
            mechanism,
            after: SmallVec::new(),
            deps: SmallVec::new(),
            seq: 0,
            safe: pieces
                .as_ref()
                .and_then(|p| p.mode.as_ref())
                .is_some_and(|m| m.is_safe()),
            pieces: pieces.clone(),
            piece: None,
            piece_parts: SmallVec::new(),
            piece_ended: false,
            rank_hold: None,
            progress: progress.clone(),
            sc: (mechanism == Mechanism::Sc).then(Box::default),
        }));
        let state = Arc::new(Mutex::new(st));
        // The body whose order the pieces were cut for.
        let body = pieces
            .as_ref()
            .and_then(|p| p.reordering.as_ref())
            .map_or(&proc.body, |r| &r.body);
        let body_result = loop {
            let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone());
            let r = body(ctx, args.clone()).await;
            if mechanism != Mechanism::Sc {
                break r;
            }
            // `sc`: the last piece commits, or a victim piece after the
            // first is rolled back and the body runs again.
            match crate::sc::body_done(shared, node, &state, r).await {
                crate::sc::Step::Rerun => continue,
                crate::sc::Step::Done(r) => break r,
            }
        };
        if rp_body_done(shared, node, &state, body_result.is_ok()) {
            tracing::trace!(%txn, "last piece ended before the commit");
        }
        let rp = mechanism == Mechanism::Rp;
        let doomed = state.lock().doomed;
        let ordered = shared.mutation != Some(Mutation::NoNexusReleaseOrder);
        // The release order matters only where a transaction can commit
        // before one it depends on (`chop`, `sc`: pieces commit on their
        // own).
        // Under `2pl` and `rp` a dependant commits after what it depends
        // on, and releases no earlier than it commits, so "releases after"
        // already holds and the nexus locks go with the commit, as ACID
        // locks would, with no release round; so do a `chop`
        // transaction's when nothing it depends on still holds its own.
        let (waits, depends) = {
            let st = state.lock();
            let c = st.callas.as_ref().expect("callas state");
            let waits = ordered
                && matches!(mechanism, Mechanism::Chop | Mechanism::Sc)
                && c.after.iter().any(|t| shared.nexus.holds(*t));
            (waits, !c.after.is_empty())
        };
        let keep = waits.then_some(txn);
        let outcome = match (body_result, doomed) {
            // Runtime Pipelining: a transaction that saw another's
            // uncommitted state asks for votes (a participant that
            // cascaded an abort to it says No; only such a transaction
            // can be cascaded, and every dependency is reported with the
            // statement that created it), and is not decided before the
            // same-group transactions whose state it saw committed: their
            // abort is its own. Its participants prepare meanwhile.
            (Ok(values), None) => {
                let after = (rp && depends).then(|| commit_dependencies(shared, &state));
                match commit_keeping_after(shared, node, &state, keep, after).await {
                    Ok(()) => Ok(values),
                    Err(e) => Err(e),
                }
            }
            (_, Some(cause)) => {
                abort(shared, node, &state).await;
                Err(Error::Aborted(cause))
            }
            (Err(e), None) => {
                abort(shared, node, &state).await;
                Err(e)
            }
        };
        progress.decide(outcome.is_ok());
        if let Some(mode) = pieces.as_ref().and_then(|p| p.mode.as_ref()) {
            if mode.record(rolled_back(&outcome)) {
                shared
                    .counters
                    .safe_mode_switches
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let (participants, after) = {
            let st = state.lock();
            let c = st.callas.as_ref().expect("callas state");
            (st.participants.clone(), c.after.clone())
        };
        if outcome.is_ok() && waits {
            tokio::spawn(release_in_order(
                shared.clone(),
                node,
                txn,
                participants,
                after,
            ));
        } else {
            // Released with the commit, or by the abort.
            shared.nexus.released(txn);
        }
        match outcome {
            Ok(values) => {
                return Ok(committed(
                    shared, txn, &proc.name, attempt, values, on_accept,
                ));
            }
            Err(Error::Aborted(cause)) => {
                cascaded |= cause == AbortCause::Cascade;
                retry_after(shared, attempt, cause, txn).await?;
            }
            Err(e) => {
                if matches!(e, Error::UserAbort(_)) {
                    shared.counters.user_aborts.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        }
    }
}

/// Runtime Pipelining's commit dependencies: done once every same-group
/// transaction `state`'s transaction depends on committed; an abort of
/// one (or a wait past the lock wait timeout) is an error.
async fn commit_dependencies(shared: &Shared, state: &Mutex<TxnState>) -> Result<()> {
    let deps: SmallVec<[Arc<Progress>; 4]> = {
        let st = state.lock();
        let c = st.callas.as_ref().expect("callas state");
        c.deps.iter().flatten().cloned().collect()
    };
    let c = &shared.counters;
    for d in deps {
        if let Some(took) = d.committed(shared.wait_timeout).await? {
            ClusterCounters::count_wait(&c.commit_waits, &c.commit_wait_ns, took);
        }
    }
    Ok(())
}

/// Chop: runs one statement as a piece of its own (a fresh id, the same
/// age), which its partition commits as soon as it ran, turning the
/// piece's locks into nexus locks of the transaction. A victim piece after
/// the first is run again (earlier pieces are committed and stay); a victim
/// first piece aborts the transaction, which is retried.
pub(crate) async fn exec_piece(
    ctx: &ProcCtx,
    plan: Arc<brine_sql::Plan>,
    params: Vec<Value>,
    lock: crate::message::LockSpec,
    seq: u32,
) -> Result<brine_sql::QueryResult> {
    let shared = ctx.shared.clone();
    let owner = ctx.state.lock().txn;
    let p = match plan.route(&params, &shared.catalog) {
        brine_sql::Route::Partition(v) => shared.partition_for(&v),
        brine_sql::Route::Broadcast => return Err(Error::Config(
            "a statement of a `chop` group must reach one partition (give it the partition key), \
                 or put its procedure in a `2pl` group"
                .into(),
        )),
    };
    // The first piece committed: the transaction can no longer roll back,
    // and the partitions that hold its locks protect it from now on (the
    // statements after it carry the protection to theirs).
    let protect_at = {
        let mut st = ctx.state.lock();
        let earlier = (seq == 1).then(|| st.participants.clone());
        st.add_participant(p);
        if let Some(c) = &mut st.callas {
            c.seq += 1;
        }
        earlier.unwrap_or_default()
    };
    for q in protect_at {
        shared.send(ctx.node, q, PartitionMsg::Protect { owner });
    }
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let piece = shared.new_txn(Some(owner.ts));
        let base = crate::message::BaseStmt {
            owner,
            seq,
            autocommit: true,
            release_order: false,
            commit_first: None,
            protect: seq > 0,
        };
        let r = ctx
            .send_execute(
                p,
                piece,
                plan.clone(),
                params.clone(),
                lock,
                Some((base, None)),
                None,
            )
            .await;
        match r {
            Ok(e) => {
                ctx.note_after(&e.after);
                ctx.record_ops(e.ops);
                return Ok(e.result);
            }
            Err(Error::Aborted(cause)) if seq > 0 && attempt < shared.retry.max_attempts => {
                shared.counters.count_abort(cause);
                shared.counters.retries.fetch_add(1, Ordering::Relaxed);
                backoff(&shared.retry, attempt, shared.seed ^ piece.id).await;
            }
            Err(e) => {
                if let Error::Aborted(cause) = &e {
                    ctx.state.lock().doomed = Some(*cause);
                }
                return Err(e);
            }
        }
    }
}

/// The nexus release order: waits until every same-group transaction `txn`
/// depends on released its nexus locks, releases `txn`'s at every
/// participant, then tells the transactions waiting on it.
async fn release_in_order(
    shared: Arc<Shared>,
    node: NodeId,
    txn: TxnId,
    participants: SmallVec<[usize; 4]>,
    after: SmallVec<[TxnId; 4]>,
) {
    for t in after {
        shared.nexus.wait_in_order(txn, t).await;
    }
    let acks = futures::future::join_all(participants.iter().map(|&p| {
        shared.request(node, p, move |reply| PartitionMsg::Release {
            owner: txn,
            stages: vec![None],
            reply,
        })
    }))
    .await;
    for a in acks {
        if let Err(e) = a {
            tracing::warn!(%txn, "nexus release not acknowledged: {e}");
        }
    }
    shared.nexus.released(txn);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grouping_parses_prints_and_finds_groups() -> Result<()> {
        let g = Grouping::parse("orders:2pl=new_order, payment ; slow:chop=delivery")?;
        assert_eq!(
            g.to_string(),
            "orders:2pl=new_order,payment;slow:chop=delivery"
        );
        assert_eq!(g.group_of("payment"), Some((1, Mechanism::TwoPl)));
        assert_eq!(g.group_of("delivery"), Some((2, Mechanism::Chop)));
        assert_eq!(g.group_of("stock_level"), None);
        g.validate(["new_order", "payment", "delivery", "stock_level"])?;
        let g = Grouping::parse("orders: rp/as-written =new_order;rest:rp=delivery")?;
        assert!(g.groups[0].as_written && !g.groups[1].as_written);
        assert_eq!(
            g.to_string(),
            "orders:rp/as-written=new_order;rest:rp=delivery"
        );
        for bad in [
            "orders:2pl/as-written=new_order",
            "orders:rp/fast=new_order",
        ] {
            let e = Grouping::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("only rp/as-written"), "{bad}: {e}");
        }
        Ok(())
    }

    #[test]
    fn only_the_application_s_rollbacks_count_toward_safe_mode() {
        assert!(rolled_back::<()>(&Err(Error::UserAbort("no".into()))));
        assert!(!rolled_back::<()>(&Err(Error::Aborted(
            AbortCause::Cascade
        ))));
        assert!(!rolled_back::<()>(&Err(Error::Aborted(
            AbortCause::Deadlock
        ))));
        assert!(!rolled_back(&Ok(())));
    }

    /// The chain bound counts transactions still undecided: once the
    /// ones at the bottom of a chain committed, the transactions above
    /// them may pipeline again.
    #[test]
    fn a_chain_is_as_deep_as_its_undecided_transactions() {
        let chain: Vec<Arc<Progress>> = (0..5).map(|_| Arc::new(Progress::default())).collect();
        for w in chain.windows(2) {
            w[1].below.lock().push(w[0].clone());
        }
        assert_eq!(chain[3].uncommitted_depth(MAX_CHAIN), 4);
        assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), MAX_CHAIN, "capped");
        assert_eq!(chain[4].uncommitted_depth(8), 5);
        chain[0].decide(true);
        chain[1].decide(true);
        assert_eq!(chain[3].uncommitted_depth(MAX_CHAIN), 2);
        assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), 3);
        assert!(
            chain[1].below.lock().is_empty(),
            "an ended transaction pins nothing"
        );
        chain[4].decide(false);
        assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), 0);
    }

    /// Against the longest path counted the plain way, on random
    /// dependency graphs with random decided transactions, for every cap.
    #[test]
    fn the_chain_walk_agrees_with_the_longest_path_on_random_graphs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..200 {
            let n = rng.gen_range(1..30);
            let txns: Vec<Arc<Progress>> = (0..n).map(|_| Arc::new(Progress::default())).collect();
            let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
            for i in 0..n {
                for j in 0..i {
                    if rng.gen_bool(0.3) {
                        preds[i].push(j);
                        txns[i].below.lock().push(txns[j].clone());
                    }
                }
            }
            let decided: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.2)).collect();
            for (t, d) in txns.iter().zip(&decided) {
                if *d {
                    t.decide(true);
                }
            }
            // A decided transaction heads nothing and forgot what it
            // depended on; the others head 1 + their longest undecided
            // dependency's chain.
            let mut longest = vec![0u32; n];
            for i in 0..n {
                if !decided[i] {
                    longest[i] = 1 + preds[i].iter().map(|&j| longest[j]).max().unwrap_or(0);
                }
            }
            for i in 0..n {
                for cap in [1, 2, 3, MAX_CHAIN, 5, 64] {
                    assert_eq!(
                        txns[i].uncommitted_depth(cap),
                        longest[i].min(cap),
                        "transaction {i} of {n}, cap {cap}"
                    );
                }
            }
        }
    }

    /// On a hot row every transaction depends on every one before it that
    /// is still undecided: the depth is the longest chain, whichever way
    /// it runs through the others, and a decided link in the middle of
    /// every path shortens it.
    #[test]
    fn a_chain_through_many_dependencies_counts_its_longest_path() {
        let txns: Vec<Arc<Progress>> = (0..40).map(|_| Arc::new(Progress::default())).collect();
        for (i, t) in txns.iter().enumerate() {
            t.below.lock().extend(txns[..i].iter().cloned());
        }
        assert_eq!(txns[39].uncommitted_depth(64), 40);
        assert_eq!(txns[39].uncommitted_depth(MAX_CHAIN), MAX_CHAIN);
        assert_eq!(txns[2].uncommitted_depth(MAX_CHAIN), 3);
        // Only the first three undecided: a chain of three below any later one.
        for t in &txns[3..39] {
            t.decide(true);
        }
        assert_eq!(txns[39].uncommitted_depth(MAX_CHAIN), MAX_CHAIN);
        assert_eq!(txns[39].uncommitted_depth(64), 4);
        txns[1].decide(true);
        assert_eq!(txns[39].uncommitted_depth(64), 3, "39 -> 2 -> 0");
    }

    /// A piece that checks a row and then updates it takes the write lock
    /// at the check; a read of a row no later statement of its piece
    /// writes keeps its read lock.
    #[test]
    fn reads_of_rows_their_piece_then_writes_take_write_locks() -> Result<()> {
        use brine_analysis::workloads::rollback_micro as micro;
        let def = |statements: &[(String, String)]| {
            statements
                .iter()
                .fold(crate::ProcedureDef::new(micro::PROC), |d, (n, sql)| {
                    d.statement(n.clone(), sql.clone())
                })
        };
        let source = micro::source();
        let grouping = Grouping::parse("g:rp=rollback11")?;
        let plan = |defs: &[crate::ProcedureDef]| {
            plan_pieces(
                &grouping,
                micro::APP,
                micro::DDL,
                defs,
                SafeModeConfig::default(),
            )
        };
        let pieces = plan(&[def(&source.statements)])?;
        let p = &pieces[micro::PROC];
        let first = |p: &ProcPieces, statement: &str, safe| -> Result<bool> {
            Ok(p.piece_of(statement, safe)?.write_first)
        };
        for safe in [false, true] {
            for t in ["a", "b", "c"] {
                assert!(first(p, &format!("check_{t}"), safe)?, "{t} {safe}");
                assert!(!first(p, &format!("update_{t}"), safe)?, "{t} {safe}");
            }
            assert!(!first(p, "private_1", safe)?);
        }
        // The check on C reads another key than the update writes: no.
        let mut other = source.statements.clone();
        other[5].1 = "UPDATE c SET val = $v WHERE id = $v".into();
        let pieces = plan(&[def(&other)])?;
        assert!(!first(&pieces[micro::PROC], "check_c", false)?);
        assert!(first(&pieces[micro::PROC], "check_b", false)?);
        Ok(())
    }

    #[test]
    fn bad_groupings_are_refused_with_the_reason() {
        for (spec, needle) in [
            ("", "at least one group"),
            ("orders=new_order", "expected name:mechanism"),
            ("orders:2pl=", "expected name:mechanism"),
            ("orders:occ=new_order", "unknown group mechanism `occ`"),
        ] {
            let e = Grouping::parse(spec).expect_err(spec).to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        let g = Grouping::parse("a:2pl=x;b:2pl=x").expect("parses");
        let e = g.validate(["x"]).expect_err("twice").to_string();
        assert!(e.contains("in two groups"), "{e}");
        let g = Grouping::parse("a:2pl=nope").expect("parses");
        let e = g.validate(["x", "y"]).expect_err("unknown").to_string();
        assert!(e.contains("does not have (it has: x, y)"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn safe_mode_goes_on_above_the_threshold_and_probes_back_after_the_hold() {
        let m = SafeMode::new(SafeModeConfig {
            threshold_percent: 7.0,
            window: 100,
            hold: Duration::from_secs(1),
        });
        // 7 rollbacks in 100: not above the threshold.
        let switched: Vec<bool> = (0..100).map(|i| m.record(i < 7)).collect();
        assert!(!switched.contains(&true) && !m.is_safe());
        // 8 in 100: safe, once.
        let switched: Vec<bool> = (0..100).map(|i| m.record(i < 8)).collect();
        assert_eq!(switched.iter().filter(|s| **s).count(), 1);
        assert!(m.is_safe());
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(m.is_safe());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!m.is_safe(), "probes optimism again after the hold");
    }

    #[tokio::test]
    async fn the_board_wakes_waiters_when_a_transaction_released() {
        let board = Arc::new(NexusBoard::default());
        let t = TxnId { ts: 1, id: 7 };
        board.register(t);
        let me = TxnId { ts: 3, id: 9 };
        board.register(me);
        let b = board.clone();
        let waiter = tokio::spawn(async move { b.wait_in_order(me, t).await });
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(!waiter.is_finished(), "no cycle: the wait goes on");
        board.released(t);
        waiter.await.expect("woken");
        // Unknown (already released) transactions do not block.
        board.wait_in_order(me, TxnId { ts: 2, id: 8 }).await;
        board.released(me);
        assert!(board.is_empty());
    }

    #[tokio::test]
    async fn release_waits_that_form_a_cycle_are_not_kept() {
        let board = Arc::new(NexusBoard::default());
        let (a, b) = (TxnId { ts: 1, id: 1 }, TxnId { ts: 2, id: 2 });
        board.register(a);
        board.register(b);
        // Each releases once its wait ended, as `release_in_order` does.
        let release_after = |me: TxnId, on: TxnId| {
            let board = board.clone();
            tokio::spawn(async move {
                board.wait_in_order(me, on).await;
                board.released(me);
            })
        };
        let (wa, wb) = (release_after(a, b), release_after(b, a));
        tokio::time::timeout(Duration::from_secs(5), async {
            wa.await.expect("a");
            wb.await.expect("b");
        })
        .await
        .expect("the cycle of release waits is broken");
        assert!(board.is_empty());
    }
}
