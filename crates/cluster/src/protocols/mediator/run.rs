//! A call under Mediator, at its coordinator: a native procedure's one
//! statement goes straight to its partition (no TSO, never aborted); a
//! transaction begins at the TSO, reads at its snapshot, buffers its puts,
//! and commits as `client.rs` describes, over messages: the TSO's check,
//! the partitions' native-conflict checks, the fences, the write-back.

use std::any::Any;
use std::sync::Arc;

use brine_check::{Op, Outcome, WriteKind};
use brine_core::{AbortCause, Error, Result, Row, Value};
use brine_sql::{Plan, QueryResult};
use futures::future::{join_all, BoxFuture};
use parking_lot::Mutex;

use super::client::{commit_path, expected_version, CommitPath};
use super::helper::{by_partition, PartitionWrites};
use super::kv::{self, Item, KvOp};
use super::partition::{MediatorMsg, SnapshotGone};
use super::service::TsoMsg;
use super::store::Ts;
use super::tso::{Check, Refusal, Status};
use super::upkeep::logs_done;
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

pub(super) fn mediator_of(shared: &Shared) -> &Mediator {
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
        tokio::spawn(super::upkeep::collect_versions(
            Arc::downgrade(call.shared),
            call.node,
        ));
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

/// Writes a logged commit back, partition by partition in parallel, logs
/// its end and tells the TSO it committed (the coordinator's last step,
/// and the helper's for a commit whose coordinator went away).
pub(super) async fn write_back(
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
pub(super) async fn write_back_parts(
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
