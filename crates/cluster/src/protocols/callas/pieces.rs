//! The pieces of each procedure of an `rp` or `sc` group (from the
//! analysis), where each statement runs, and the rollback-safe mode.

use super::prelude::*;

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
    pub(super) fn piece_end(&self, piece: u32, safe: bool) -> Option<&str> {
        self.placements(safe)
            .iter()
            .find(|(_, p)| p.piece == piece && p.ends_piece)
            .map(|(name, _)| name.as_str())
    }

    pub(super) fn placements(&self, safe: bool) -> &HashMap<String, Placed> {
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
            Operand::Param(i) => Ok(p.param_name(*i)),
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
pub(super) fn rolled_back<T>(outcome: &Result<T>) -> bool {
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
/// The analyses' refinements for Callas' groups: all of them but larger
/// pieces first, which is the sources' tool reordering the code; brine
/// runs each body as written, so within one body the pieces keep its
/// order, and larger pieces first chooses among the bodies a procedure
/// offers (`brine_analysis::order`).
const REFINEMENTS: brine_analysis::Refinements = brine_analysis::Refinements {
    larger_first: false,
    ..brine_analysis::Refinements::ALL
};

/// The analysis' sources of group `g`'s procedures.
fn group_sources(
    g: &super::GroupDef,
    procedures: &[crate::ProcedureDef],
) -> Vec<brine_analysis::ProcSource> {
    g.procedures
        .iter()
        .filter_map(|name| procedures.iter().find(|d| &d.name == name))
        .map(crate::ProcedureDef::source)
        .collect()
}

/// A `chop` group commits every statement on its own, so its executions
/// are serializable only if that finest chopping has no SC-cycle among
/// the group's procedures (two instances of each, as any mix of them may
/// run at once; a statement in a loop counts as two pieces, one per
/// iteration). Otherwise two of its transactions can each depend on the
/// other, after both committed pieces that cannot be undone; their nexus
/// release waits would then form a cycle that neither the release order
/// nor an abort can resolve. Such a group is refused, naming the cycle;
/// `sc` (the finest chopping without SC-cycles) runs it.
fn check_chop(
    g: &super::GroupDef,
    app: &str,
    ddl: &str,
    procedures: &[crate::ProcedureDef],
) -> Result<()> {
    use brine_analysis::{classic, Piece, ProcChopping};
    let sources = group_sources(g, procedures);
    let (_, specs) =
        brine_analysis::workloads::specs_with_notes(app, ddl, &sources).map_err(|e| {
            Error::Config(format!(
                "group `{}`: the chopping analysis failed: {e}",
                g.name
            ))
        })?;
    let choppings: Vec<ProcChopping> = specs
        .iter()
        .map(|spec| {
            let looped: HashSet<usize> = spec.loops().iter().flatten().copied().collect();
            let pieces = (0..spec.ops.len())
                .flat_map(|op| {
                    let runs = if looped.contains(&op) { 2 } else { 1 };
                    (0..runs).map(move |_| Piece {
                        ops: vec![op],
                        ranks: None,
                    })
                })
                .collect();
            ProcChopping {
                procedure: spec.name.clone(),
                pieces,
            }
        })
        .collect();
    let refs: Vec<&brine_analysis::ProcSpec> = specs.iter().collect();
    let refinements = REFINEMENTS;
    let instances = classic::two_of_each(specs.len());
    match classic::find_sc_cycle(&refs, &choppings, &instances, refinements, false) {
        None => Ok(()),
        Some(cycle) => Err(Error::Config(format!(
            "group `{}`: `chop` commits each statement on its own, but these pieces form an \
             SC-cycle, so two of the group's transactions could each depend on the other (not \
             serializable, and no release order between them): {cycle}. Run the group as `sc` \
             (the finest chopping without SC-cycles) or `rp`",
            g.name
        ))),
    }
}

pub fn plan_pieces(
    grouping: &Grouping,
    app: &str,
    ddl: &str,
    procedures: &[crate::ProcedureDef],
    safe_mode: SafeModeConfig,
) -> Result<HashMap<String, Arc<ProcPieces>>> {
    use brine_analysis::workloads::specs_with_notes;
    use brine_analysis::{analyze_group, classic, ProcSource};
    let mut out = HashMap::new();
    for g in grouping
        .groups
        .iter()
        .filter(|g| g.mechanism == Mechanism::Chop)
    {
        check_chop(g, app, ddl, procedures)?;
    }
    for g in grouping
        .groups
        .iter()
        .filter(|g| matches!(g.mechanism, Mechanism::Rp | Mechanism::Sc))
    {
        let sources = group_sources(g, procedures);
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
        let refinements = REFINEMENTS;
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
                let notes = brine_analysis::workloads::notes_of(app, src).unwrap_or_default();
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
