//! A call under Mediator, at its coordinator: a native procedure's one
//! statement goes straight to its partition (no TSO, never aborted); a
//! transaction begins at the TSO, reads at its snapshot, buffers its puts,
//! and commits as `client.rs` describes, over messages: the TSO's check,
//! the partitions' native-conflict checks, the fences, the write-back.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use brine_check::{Op, Outcome, WriteKind};
use brine_core::{AbortCause, Error, Result, Row, Value};
use brine_sql::{Plan, QueryResult};
use futures::future::{join_all, BoxFuture};
use parking_lot::Mutex;

use super::client::{commit_path, expected_version, CommitPath};
use super::helper::PartitionWrites;
use super::kv::{self, Item, KvOp};
use super::partition::{MediatorMsg, SnapshotGone};
use super::service::TsoMsg;
use super::store::Ts;
use super::tso::{Check, Refusal, Status};
use super::{Abandon, Mediator};
use crate::coordinator::{CallOutcome, ProcCtx, Retries, Shared, TxnState};
use crate::message::PartitionMsg;
use crate::procedure::PreparedProc;
use crate::protocol::{Call, Statements, TxnExt};

/// Counter slots (`Mediator::counters`).
pub(super) const TSO_CONFLICTS: usize = 0;
pub(super) const FALSE_POSITIVES: usize = 1;
pub(super) const TOO_OLD: usize = 2;
pub(super) const NATIVE_CONFLICTS: usize = 3;
pub(super) const STALE_READS: usize = 4;
pub(super) const NATIVE_OPS: usize = 5;
pub(super) const HELPER_COMMITTED: usize = 6;
pub(super) const HELPER_ABORTED: usize = 7;

/// Re-reads of a version still being written back before the
/// transaction aborts (`stale_reads`), each after twice the last pause,
/// from `RETRY_PAUSE`: 8 of them wait some 13 ms in all, enough for a
/// write-back across processes.
const RETRY_GET: u32 = 8;
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_micros(50);

/// A transaction's state at its coordinator.
struct MedTxn {
    /// The level it runs at: the protocol's, or snapshot isolation for a
    /// procedure that only reads (`read_level`).
    level: super::Level,
    start: Ts,
    /// Serialized before the start, still writing back (item sets).
    pending: Vec<(Ts, Vec<Item>)>,
    /// Each read with the version's timestamp and its partition.
    reads: Vec<(Item, Ts, usize)>,
    /// Each buffered put with its partition.
    writes: Vec<(Item, Row, usize)>,
}

impl TxnExt for MedTxn {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

fn med(st: &mut TxnState) -> &mut MedTxn {
    st.ext
        .as_mut()
        .and_then(|e| e.as_any_mut().downcast_mut::<MedTxn>())
        .expect("a Mediator transaction")
}

fn mediator_of(shared: &Shared) -> &Mediator {
    shared
        .protocol
        .as_any()
        .downcast_ref::<Mediator>()
        .expect("a Mediator call runs under Mediator")
}

/// Sends `msg` to partition `p` and awaits the answer.
async fn ask<T: Send + 'static>(
    shared: &Shared,
    node: brine_core::NodeId,
    p: usize,
    make: impl FnOnce(crate::message::Reply<T>) -> MediatorMsg,
) -> Result<T> {
    shared
        .request(node, p, move |reply| {
            PartitionMsg::Protocol(Box::new(make(reply)))
        })
        .await
}

/// The partition of a point statement.
fn partition_of(shared: &Shared, plan: &Plan, params: &[Value]) -> Result<usize> {
    match shared.targets(plan, params).as_slice() {
        [p] => Ok(*p),
        _ => Err(Error::Sql(format!(
            "Mediator: `{}` does not name its partition's key",
            plan.sql()
        ))),
    }
}

/// A read of `item`'s version `ts`, for the history (versions are
/// timestamps: `docs/history-format.md`, "versions").
fn read_op(shared: &Shared, item: &Item, ts: Ts) -> Op {
    Op::Read {
        table: shared.catalog.table(item.0).name.clone(),
        key: item.1.clone(),
        version: ts,
        sub: None,
        cols: None,
    }
}

/// A write of `item`'s version `ts` (its predecessor is the checker's to
/// find: versions are installed out of timestamp order).
fn write_op(shared: &Shared, item: &Item, ts: Ts) -> Op {
    Op::Write {
        table: shared.catalog.table(item.0).name.clone(),
        key: item.1.clone(),
        version: ts,
        prev: 0,
        kind: WriteKind::Update,
        ix: Vec::new(),
        sub: None,
        cols: None,
    }
}

/// A new attempt's state, its record naming its client.
fn begin_state(
    shared: &Shared,
    txn: brine_core::TxnId,
    proc: &PreparedProc,
    session: Option<u64>,
) -> TxnState {
    let mut st = TxnState::begin(shared, txn, Some(proc));
    if let Some(rec) = &mut st.rec {
        rec.client = session;
    }
    st
}

/// A native operation's statement.
struct NativeStatements;

impl Statements for NativeStatements {
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        _statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>> {
        Box::pin(async move {
            let shared = ctx.shared.clone();
            let params = plan.bind(args)?;
            let op = kv::interpret(&plan, &params, &shared.catalog)?;
            let p = partition_of(&shared, &plan, &params)?;
            match op {
                KvOp::Get { item } => {
                    let item2 = item.clone();
                    let got = ask(&shared, ctx.node, p, |reply| MediatorMsg::Get {
                        item: item2,
                        reply,
                    })
                    .await?;
                    if shared.history.is_some() {
                        let ts = got.as_ref().map_or(0, |(_, t)| *t);
                        ctx.record_ops(vec![read_op(&shared, &item, ts)]);
                    }
                    Ok(kv::get_result(&plan, got.as_ref().map(|(r, _)| r)))
                }
                op => {
                    let item = op.item().clone();
                    let wrote =
                        ask(&shared, ctx.node, p, |reply| MediatorMsg::Put { op, reply }).await??;
                    if let (Some(ts), Some(_)) = (wrote, &shared.history) {
                        ctx.record_ops(vec![write_op(&shared, &item, ts)]);
                    }
                    Ok(kv::put_result(wrote.is_some()))
                }
            }
        })
    }
}

/// A transaction's statements.
struct TxnStatements;

impl Statements for TxnStatements {
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        _statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>> {
        Box::pin(tx_exec(ctx, plan, args))
    }
}

async fn tx_exec(ctx: &mut ProcCtx, plan: Arc<Plan>, args: Vec<Value>) -> Result<QueryResult> {
    let shared = ctx.shared.clone();
    // A victim or ended transaction runs nothing more.
    ctx.live()?;
    let params = plan.bind(args)?;
    let op = kv::interpret(&plan, &params, &shared.catalog)?;
    let p = partition_of(&shared, &plan, &params)?;
    let m = mediator_of(&shared);
    match op {
        KvOp::Get { item } => {
            let (start, expected, mine, level) = {
                let mut st = ctx.state.lock();
                let t = med(&mut st);
                let mine = t
                    .writes
                    .iter()
                    .find(|(i, _, _)| *i == item)
                    .map(|w| w.1.clone());
                let expected = expected_version(&t.pending, &item);
                (t.start, expected, mine, t.level)
            };
            if let Some(row) = mine {
                // Its own write (read after write): the buffered row.
                return Ok(kv::get_result(&plan, Some(&row)));
            }
            let serializable = level == super::Level::Serializable;
            let mut expected = expected;
            let mut tries = 0;
            loop {
                tries += 1;
                let item2 = item.clone();
                let got = if serializable {
                    ask(&shared, ctx.node, p, |reply| MediatorMsg::Get {
                        item: item2,
                        reply,
                    })
                    .await?
                } else {
                    let fence = m.fences;
                    ask(&shared, ctx.node, p, |reply| MediatorMsg::TxGet {
                        item: item2,
                        ts: start,
                        fence,
                        reply,
                    })
                    .await?
                    .map_err(|SnapshotGone| {
                        shared.counters.protocol.add(TOO_OLD, 1);
                        Error::TxnState(format!(
                            "under Mediator this transaction held its snapshot longer than {:?}: the TSO gave up on it and its versions may be collected (retry it, or raise the snapshot lifetime)",
                            m.options.snapshot_lifetime
                        ))
                    })?
                };
                let ts = got.as_ref().map_or(0, |(_, t)| *t);
                if serializable || ts >= expected {
                    if shared.history.is_some() {
                        ctx.record_ops(vec![read_op(&shared, &item, ts)]);
                    }
                    med(&mut ctx.state.lock()).reads.push((item, ts, p));
                    return Ok(kv::get_result(&plan, got.as_ref().map(|(r, _)| r)));
                }
                if tries >= RETRY_GET {
                    shared.counters.protocol.add(STALE_READS, 1);
                    let cause = AbortCause::Validation;
                    ctx.state.lock().doomed = Some(cause);
                    return Err(Error::Aborted(cause));
                }
                // The version it must see is not there: still being
                // written back (wait), written back since (read again), or
                // its transaction aborted after all (then it must not see
                // it: the next version it must see, if any).
                let tso = m
                    .tso
                    .as_ref()
                    .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
                let status = tso
                    .ask(ctx.node, |reply| TsoMsg::Status {
                        commit: expected,
                        reply,
                    })
                    .await?;
                match status {
                    Some(Status::Active) => {
                        tokio::time::sleep(RETRY_PAUSE * (1 << (tries - 1))).await;
                    }
                    Some(Status::Aborted) => {
                        let mut st = ctx.state.lock();
                        let t = med(&mut st);
                        t.pending.retain(|(c, _)| *c != expected);
                        expected = expected_version(&t.pending, &item);
                    }
                    // Committed (written back), or complete and collected:
                    // read again.
                    Some(Status::Committed) | None => {}
                }
            }
        }
        op => {
            let item = op.item().clone();
            let row = whole_row(&plan, &shared, &op)?;
            let mut st = ctx.state.lock();
            let t = med(&mut st);
            match t.writes.iter_mut().find(|(i, _, _)| *i == item) {
                Some(w) => w.1 = row,
                None => t.writes.push((item, row, p)),
            }
            Ok(kv::put_result(true))
        }
    }
}

/// The level a call of `proc` runs at. Under serializability, a
/// procedure whose declared statements all read runs as a snapshot read:
/// a snapshot at its start is a prefix of the commit order (every writer
/// serializes at its commit timestamp, its reads validated up to it), so
/// a transaction that only reads one is serializable and commits without
/// the TSO's check or the partitions' (the no-commit shortcut). The
/// baseline keeps its one path.
fn read_level(m: &Mediator, proc: &PreparedProc) -> super::Level {
    let reads_only = proc
        .statements
        .values()
        .all(|p| p.kind() == brine_sql::StatementKind::Select);
    if reads_only && !m.transactify {
        super::Level::Snapshot
    } else {
        m.level
    }
}

/// The row a transactional put writes: whole rows only (a put is blind;
/// keeping columns of the old row would be a read).
fn whole_row(plan: &Plan, shared: &Shared, op: &KvOp) -> Result<Row> {
    match op {
        KvOp::Insert { row, .. } => Ok(row.clone()),
        KvOp::Set { item, sets } => {
            let def = shared.catalog.table(item.0);
            let mut row: Row = vec![Value::Null; def.columns.len()];
            for (c, v) in def.primary_key.iter().zip(item.1.values()) {
                row[*c] = v.clone();
            }
            for (c, v) in sets {
                row[*c] = v.clone();
            }
            if let Some(c) = (0..def.columns.len())
                .find(|c| !def.primary_key.contains(c) && !sets.iter().any(|(s, _)| s == c))
            {
                return Err(Error::Sql(format!(
                    "under Mediator a transactional put writes whole rows: `{}` leaves `{}` as it was",
                    plan.sql(),
                    def.columns[c].name
                )));
            }
            def.check_row(&row)?;
            Ok(row)
        }
        KvOp::Get { .. } => Err(Error::Internal("a get is no put".into())),
    }
}

/// Runs a call: natively, or as a transaction.
pub(super) fn run<'a>(m: &'a Mediator, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
    m.collector.call_once(|| {
        tokio::spawn(collect_versions(Arc::downgrade(call.shared), call.node));
    });
    if m.raw_store && !call.proc.native {
        let name = call.proc.name.clone();
        return Box::pin(async move {
            Err(Error::Config(format!(
                "`kv` is the raw store: native single-key gets and puts only; `{name}` is a transaction"
            )))
        });
    }
    if call.proc.native && !m.transactify {
        Box::pin(run_native(call))
    } else {
        Box::pin(run_txn(m, call))
    }
}

async fn run_native(call: Call<'_>) -> Result<CallOutcome> {
    let Call {
        shared,
        node,
        proc,
        args,
        on_accept,
        session,
    } = call;
    let mut tries = Retries::new(shared);
    tries.begin();
    let txn = tries.new_txn();
    let state = Arc::new(Mutex::new(begin_state(shared, txn, proc, session)));
    let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone())
        .with_statements(&NativeStatements);
    // A native operation is a transaction of its own in the history.
    let values = match (proc.body)(ctx, args).await {
        Ok(values) => values,
        Err(e) => {
            tries.failed(&e);
            state.lock().record_end(shared, Outcome::Aborted);
            return Err(e);
        }
    };
    state.lock().record_end(shared, Outcome::Committed);
    shared.counters.protocol.add(NATIVE_OPS, 1);
    Ok(tries.committed(txn, &proc.name, values, on_accept))
}

async fn run_txn(m: &Mediator, call: Call<'_>) -> Result<CallOutcome> {
    let Call {
        shared,
        node,
        proc,
        args,
        mut on_accept,
        session,
    } = call;
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    let mut tries = Retries::new(shared);
    loop {
        tries.begin();
        let txn = tries.new_txn();
        let begun = tso.ask(node, |reply| TsoMsg::Begin { reply }).await?;
        let start = begun.start;
        let mut st = begin_state(shared, txn, proc, session);
        st.ext = Some(Box::new(MedTxn {
            level: read_level(m, proc),
            start,
            pending: begun.pending,
            reads: Vec::new(),
            writes: Vec::new(),
        }));
        let state = Arc::new(Mutex::new(st));
        let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone())
            .with_statements(&TxnStatements);
        let body = (proc.body)(ctx, args.clone()).await;
        let doomed = state.lock().doomed;
        let values = match (body, doomed) {
            (_, Some(cause)) => {
                tso.send(node, TsoMsg::Ended { start });
                state.lock().record_end(shared, Outcome::Aborted);
                tries.victim(cause, txn.id).await?;
                continue;
            }
            (Err(e), None) => {
                tso.send(node, TsoMsg::Ended { start });
                state.lock().record_end(shared, Outcome::Aborted);
                tries.failed(&e);
                return Err(e);
            }
            (Ok(values), None) => values,
        };
        let (reads, writes, level) = {
            let mut st = state.lock();
            let t = med(&mut st);
            (
                std::mem::take(&mut t.reads),
                std::mem::take(&mut t.writes),
                t.level,
            )
        };
        let items: Vec<Item> = match shared.history {
            Some(_) => writes.iter().map(|(i, _, _)| i.clone()).collect(),
            None => Vec::new(),
        };
        // A commit that fails midway may have been logged (then it is
        // written back whatever happens): its outcome is unknown.
        let committed = commit(m, shared, node, (start, level), reads, writes)
            .await
            .map_err(|e| {
                state.lock().record_end(shared, Outcome::Unknown);
                Error::Transport(format!(
                    "Mediator transaction {txn}: outcome unknown ({e}); if its write set was \
                     logged, it is written back"
                ))
            })?;
        match committed {
            Ok(version) => {
                let mut st = state.lock();
                // Its writes carry the commit's timestamp (or the local
                // put's), known only now.
                if let (Some(v), Some(rec)) = (version, &mut st.rec) {
                    rec.ops.extend(items.iter().map(|i| write_op(shared, i, v)));
                }
                st.record_end(shared, Outcome::Committed);
                drop(st);
                return Ok(tries.committed(txn, &proc.name, values, on_accept.take()));
            }
            Err(refused) => {
                state.lock().record_end(shared, Outcome::Aborted);
                let slot = match refused {
                    Some(Refusal::Conflict) => TSO_CONFLICTS,
                    Some(Refusal::FalsePositive) => FALSE_POSITIVES,
                    Some(Refusal::TooOld) => TOO_OLD,
                    None => NATIVE_CONFLICTS,
                };
                shared.counters.protocol.add(slot, 1);
                tries.victim(AbortCause::Validation, txn.id).await?;
            }
        }
    }
}

/// How often the partitions collect versions and the helper looks for
/// commits left unfinished.
const COLLECT_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);

/// Every `COLLECT_PERIOD`: the helper's pass (`help`), then asks the TSO
/// for the oldest snapshot in use and tells every partition to drop the
/// versions no snapshot at or after it can read (native puts add versions
/// too, so this runs whatever the traffic). Ends when the cluster is gone.
pub(super) async fn collect_versions(shared: std::sync::Weak<Shared>, node: brine_core::NodeId) {
    let mut tick = tokio::time::interval(COLLECT_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = 0;
    let mut stuck: HashMap<Ts, tokio::time::Instant> = HashMap::new();
    let mut epoch = None;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(tso) = mediator_of(&shared).tso.clone() else {
            return;
        };
        // A TSO or a partition out of reach (its process down) is asked
        // again at the next pass.
        if let Err(e) = drain(&shared, node, &mut epoch).await {
            tracing::debug!("Mediator: settling commits for the TSO: {e}");
            continue;
        }
        if let Err(e) = help(&shared, node, &mut stuck).await {
            tracing::debug!("Mediator helper: {e}");
            continue;
        }
        let Ok(oldest) = tso.ask(node, |reply| TsoMsg::Oldest { reply }).await else {
            continue;
        };
        if oldest == last {
            continue;
        }
        last = oldest;
        for p in 0..shared.partitions.len() {
            let msg = MediatorMsg::Collect { oldest };
            shared.send(node, p, PartitionMsg::Protocol(Box::new(msg)));
        }
        mediator_of(&shared)
            .collected
            .store(oldest, std::sync::atomic::Ordering::Release);
    }
}

/// Whether commits coordinated by `node` are logged where its restart
/// finds them (durable across processes): nobody else may give one up.
fn logs_commits(m: &Mediator, node: u32) -> bool {
    node < m.logging_nodes || (m.logging_nodes > 0 && node == super::service::UNKNOWN_NODE)
}

/// Across processes, a restarted TSO lets transactions begin once every
/// node has settled the commits it had in flight when the TSO came back
/// (their ring went with it): each pass asks for the TSO's epoch; those
/// serialized before it that are not logged are abandoned (their
/// coordinators abort them), those logged are written back here (again,
/// if their coordinators do too: a write-back is idempotent), and once
/// none is left, the node says so.
async fn drain(
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    seen: &mut Option<Ts>,
) -> Result<()> {
    let m = mediator_of(shared);
    if !m.logging_node() {
        return Ok(());
    }
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    let epoch = tso.ask(node, |reply| TsoMsg::Epoch { reply }).await?;
    if *seen == Some(epoch) {
        return Ok(());
    }
    let logged = m.inflight.settle_before(epoch);
    if !logged.is_empty() {
        tracing::info!(
            commits = logged.len(),
            "Mediator: the TSO restarted; writing back the logged commits it had serialized"
        );
    }
    for (commit, parts) in logged {
        write_back_parts(shared, node, commit, parts).await?;
        logs_done(m, commit);
        m.inflight.done(commit);
    }
    if m.inflight.any_before(epoch) {
        return Ok(());
    }
    tso.send(
        node,
        TsoMsg::Drained {
            node: node.0,
            epoch,
        },
    );
    *seen = Some(epoch);
    Ok(())
}

/// How long a recovered commit's write-back waits before it says in the
/// log that a partition does not answer (it goes on trying).
const SAY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A durable node's restart across processes, before it takes calls: it
/// tells the TSO which of its commits its log holds (the TSO aborts its
/// others: they were never logged, so never written back), asking until
/// the TSO answers. Then, in the background, each logged commit is
/// written back at every partition (remote ones as they come back),
/// logged done and reported committed: until then it stays pending at
/// the TSO, so a snapshot that must see it waits for it.
pub(super) async fn recover(m: &Mediator, shared: &Arc<Shared>, node: brine_core::NodeId) {
    let (Some(logs), Some(tso)) = (&m.logs, &m.tso) else {
        return;
    };
    let resends = logs.take_resends();
    for (commit, _) in &resends {
        m.inflight.resending(*commit);
    }
    let logged: Vec<Ts> = resends.iter().map(|(c, _)| *c).collect();
    let mut pause = std::time::Duration::from_millis(10);
    let started = tokio::time::Instant::now();
    let kept = loop {
        let logged = logged.clone();
        match tso
            .ask(node, |reply| TsoMsg::Restarted {
                node: node.0,
                logged,
                reply,
            })
            .await
        {
            Ok(kept) => break kept,
            Err(e) => {
                if started.elapsed() >= SAY_AFTER {
                    tracing::warn!(
                        "Mediator: telling the TSO of this node's restart: {e}; asking again"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
    };
    if !resends.is_empty() {
        tracing::info!(
            commits = resends.len(),
            "Mediator: writing back the commits this node logged before its restart"
        );
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let m = mediator_of(&shared);
        let finishing = resends.into_iter().map(|(commit, parts)| {
            // The TSO that still holds it knows its start (a restarted
            // TSO holds none: its ring is gone).
            let start = kept.iter().find(|(c, _)| *c == commit).map(|(_, s)| *s);
            let shared = &shared;
            async move {
                let started = tokio::time::Instant::now();
                let mut pause = std::time::Duration::from_millis(10);
                let mut said = false;
                while let Err(e) = write_back_parts(shared, node, commit, parts.clone()).await {
                    if !said && started.elapsed() >= SAY_AFTER {
                        said = true;
                        tracing::warn!(
                            commit,
                            "Mediator: writing back a logged commit: {e}; trying again"
                        );
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                logs_done(m, commit);
                if let (Some(start), Some(tso)) = (start, &m.tso) {
                    tso.send(node, TsoMsg::Committed { commit, start });
                }
                m.inflight.done(commit);
            }
        });
        futures::future::join_all(finishing).await;
    });
}

/// Logs that `commit`'s write-back finished.
fn logs_done(m: &Mediator, commit: Ts) {
    if let Some(logs) = &m.logs {
        logs.log_done(commit);
    }
}

/// How many times the helper's patience a commit that no coordinator of
/// this process holds may stay unfinished before the TSO's process aborts
/// it.
const ORPHAN_PATIENCE: u32 = 5;

/// The helper (seed 003 section 2) in the running cluster: a commit the
/// TSO serialized and has not heard the end of for the helper's patience
/// lost its coordinator (the call was dropped, or failed midway). Logged,
/// it is written back again and reported committed; not logged yet, it
/// is abandoned (its coordinator, if it is still there, aborts it) and
/// reported aborted. `stuck`: when each unresolved commit was first seen.
async fn help(
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    stuck: &mut HashMap<Ts, tokio::time::Instant>,
) -> Result<()> {
    let m = mediator_of(shared);
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    let unresolved = tso.ask(node, |reply| TsoMsg::Unresolved { reply }).await?;
    let now = tokio::time::Instant::now();
    stuck.retain(|ts, _| unresolved.iter().any(|(c, _, _)| c == ts));
    for (commit, start, coordinator) in unresolved {
        let first = *stuck.entry(commit).or_insert(now);
        if now.duration_since(first) < m.options.helper_patience {
            continue;
        }
        match m.inflight.resolve(commit) {
            Some(Some(parts)) => {
                if let Err(e) = write_back(m, shared, node, start, commit, parts).await {
                    // A partition out of reach: again at the next pass.
                    tracing::debug!(commit, "Mediator helper: writing back: {e}");
                    continue;
                }
                m.inflight.done(commit);
                shared.counters.protocol.add(HELPER_COMMITTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: finished a logged commit its coordinator left"
                );
            }
            Some(None) => {
                tso.send(node, TsoMsg::Aborted { commit, start });
                shared.counters.protocol.add(HELPER_ABORTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: aborted a commit its coordinator left before logging it"
                );
            }
            // Not in flight here: its end is on its way to the TSO, or
            // (across processes) its coordinator's process is gone with
            // the write set. The TSO's own process gives up on it after
            // a while, so the ring and the snapshots move on; with no
            // log, what it wrote back before it died stays. A node that
            // logs its commits settles its own when it restarts (its log
            // may hold this one: `recover`), so none of its is given up.
            None if tso.local().is_some()
                && !logs_commits(m, coordinator)
                && now.duration_since(first) >= m.options.helper_patience * ORPHAN_PATIENCE =>
            {
                tso.send(node, TsoMsg::Aborted { commit, start });
                shared.counters.protocol.add(HELPER_ABORTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: aborted a commit no coordinator holds (its process is gone?)"
                );
            }
            None => continue,
        }
        stuck.remove(&commit);
    }
    Ok(())
}

/// Commits a transaction (Algorithms 1 and 4 over messages) and returns
/// the timestamp its writes carry (`None`: it wrote nothing). The outer
/// error: a failure (an unreachable TSO or partition); the inner one: a
/// validation abort, by the TSO's refusal (`Some`) or a native conflict
/// (`None`).
async fn commit(
    m: &Mediator,
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    (start, level): (Ts, super::Level),
    reads: Vec<(Item, Ts, usize)>,
    writes: Vec<(Item, Row, usize)>,
) -> Result<std::result::Result<Option<Ts>, Option<Refusal>>> {
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    // The baseline (`omid`) has neither shortcut: every transaction
    // commits through the TSO.
    let path = commit_path(level, !m.transactify, m.fences, reads.len(), writes.len());
    let (check, fence_writes) = match path {
        CommitPath::NoCommit => {
            tso.send(node, TsoMsg::Ended { start });
            return Ok(Ok(None));
        }
        CommitPath::LocalPut => {
            let (item, row, p) = writes.into_iter().next().expect("one write");
            let op = KvOp::Insert { item, row };
            let ts = ask(shared, node, p, |reply| MediatorMsg::Put { op, reply }).await??;
            tso.send(node, TsoMsg::Ended { start });
            return Ok(Ok(ts));
        }
        CommitPath::Validate {
            check,
            fence_writes,
        } => (check, fence_writes),
    };
    let checked: Vec<(Item, Ts, usize)> = match check {
        Check::ReadWrite => reads,
        Check::WriteWrite => writes
            .iter()
            .map(|(i, _, p)| (i.clone(), start, *p))
            .collect(),
    };
    let write_items: Vec<Item> = writes.iter().map(|(i, _, _)| i.clone()).collect();
    let checked_items: Vec<(Item, Ts)> = checked.iter().map(|(i, t, _)| (i.clone(), *t)).collect();
    // Counted while its timestamp is on its way: a node settling its
    // commits for a restarted TSO waits for it (`drain`).
    m.inflight.ask();
    let refused = tso
        .ask(node, |reply| TsoMsg::TryCommit {
            start,
            node: node.0,
            writes: write_items,
            checked: checked_items,
            reply,
        })
        .await;
    if let Ok(Ok(ts)) = &refused {
        m.inflight.checking(*ts);
    }
    m.inflight.asked();
    let commit_ts = match refused? {
        Ok(ts) => ts,
        Err(r) => {
            tso.send(node, TsoMsg::Ended { start });
            return Ok(Err(Some(r)));
        }
    };
    let finished = finish(
        m,
        shared,
        node,
        (start, commit_ts),
        checked,
        writes,
        fence_writes,
    )
    .await;
    // A commit that failed midway stays in flight: the helper finishes
    // it (logged) or aborts it (not logged).
    if finished.is_ok() {
        m.inflight.done(commit_ts);
    }
    finished.map(|r| r.map(|()| Some(commit_ts)))
}

/// A serialized commit's rest: the native-conflict checks, the fences, the
/// log, the write-back, the TSO's notice.
async fn finish(
    m: &Mediator,
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    (start, commit_ts): (Ts, Ts),
    checked: Vec<(Item, Ts, usize)>,
    writes: Vec<(Item, Row, usize)>,
    fence_writes: bool,
) -> Result<std::result::Result<(), Option<Refusal>>> {
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    match m.options.abandon {
        Some(Abandon::Serialized) => {
            return Err(Error::Transport(
                "abandoned after serialization (test)".into(),
            ));
        }
        Some(Abandon::ProcessGone) => {
            m.inflight.done(commit_ts);
            return Err(Error::Transport("abandoned with its process (test)".into()));
        }
        _ => {}
    }
    // The native-conflict check at the checked items' partitions (each
    // fences its partition), and at once, serializable only, the fence of
    // the write set's other partitions: a fence of a commit that then
    // aborts only moves a clock on.
    let mut by_part: Vec<(usize, Vec<(Item, Ts)>)> = Vec::new();
    if m.native_check {
        for (item, ts, p) in checked {
            match by_part.iter_mut().find(|(q, _)| *q == p) {
                Some((_, items)) => items.push((item, ts)),
                None => by_part.push((p, vec![(item, ts)])),
            }
        }
    }
    let mut fenced: Vec<usize> = Vec::new();
    if fence_writes {
        for (_, _, p) in &writes {
            if !fenced.contains(p) && !by_part.iter().any(|(q, _)| q == p) {
                fenced.push(*p);
            }
        }
    }
    let fence = m.fences;
    let checks = join_all(by_part.into_iter().map(|(p, items)| {
        ask(shared, node, p, move |reply| MediatorMsg::Check {
            items,
            ts: commit_ts,
            fence,
            reply,
        })
    }));
    let fences = join_all(fenced.into_iter().map(|p| {
        ask(shared, node, p, |reply| MediatorMsg::Fence {
            ts: commit_ts,
            reply,
        })
    }));
    let (oks, fences) = futures::join!(checks, fences);
    fences.into_iter().collect::<Result<Vec<()>>>()?;
    let mut all = true;
    for ok in oks {
        all &= ok?;
    }
    if !all {
        tso.send(
            node,
            TsoMsg::Aborted {
                commit: commit_ts,
                start,
            },
        );
        return Ok(Err(None));
    }
    // The write set reaches the log before any of it is written back: a
    // crash from here on leaves it to recovery's helper to finish, and a
    // coordinator that goes away to the running helper.
    if !m.inflight.logging(commit_ts, by_partition(&writes)) {
        return Ok(Err(Some(Refusal::TooOld)));
    }
    if let Some(logs) = &m.logs {
        logs.log_commit(commit_ts, &writes).await?;
    }
    if m.options.abandon == Some(Abandon::Logged) {
        return Err(Error::Transport("abandoned after logging (test)".into()));
    }
    write_back(m, shared, node, start, commit_ts, by_partition(&writes)).await?;
    Ok(Ok(()))
}

/// A write set by partition.
fn by_partition(writes: &[(Item, Row, usize)]) -> PartitionWrites {
    let mut out: PartitionWrites = Vec::new();
    for (item, row, p) in writes {
        match out.iter_mut().find(|(q, _)| q == p) {
            Some((_, w)) => w.push((item.clone(), row.clone())),
            None => out.push((*p, vec![(item.clone(), row.clone())])),
        }
    }
    out
}

/// Writes a logged commit back, partition by partition in parallel, logs
/// its end and tells the TSO it committed (the coordinator's last step,
/// and the helper's for a commit whose coordinator went away).
async fn write_back(
    m: &Mediator,
    shared: &Shared,
    node: brine_core::NodeId,
    start: Ts,
    commit_ts: Ts,
    parts: PartitionWrites,
) -> Result<()> {
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    write_back_parts(shared, node, commit_ts, parts).await?;
    logs_done(m, commit_ts);
    tso.send(
        node,
        TsoMsg::Committed {
            commit: commit_ts,
            start,
        },
    );
    Ok(())
}

/// Writes `commit`'s writes back at their partitions, in parallel.
async fn write_back_parts(
    shared: &Shared,
    node: brine_core::NodeId,
    commit: Ts,
    parts: PartitionWrites,
) -> Result<()> {
    let answers = join_all(parts.into_iter().map(|(p, mine)| {
        ask(shared, node, p, move |reply| MediatorMsg::WriteBack {
            writes: mine,
            ts: commit,
            reply,
        })
    }))
    .await;
    for a in answers {
        a??;
    }
    Ok(())
}
