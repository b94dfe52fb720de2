//! What makes Elia's replicas recoverable: every global's update numbered
//! in token order and kept in a table of every replica, and each server's
//! mark of the last update it applied, both written by the transactions
//! that make them true.
//!
//! ```text
//!  elia_updates(seq, origin, body)  the update, as JSON: its procedure and
//!                                   its mutating statements' names and
//!                                   bound values
//!  elia_applied(server, seq)        server's last applied update
//!
//!  a global at p, at its commit point: lock p's mark row (so p's globals
//!    reach their commit points one at a time, in the order they take their
//!    numbers); take the next number; insert its update row; set p's mark;
//!    commit -- all in its own transaction
//!  a replay batch at q: the updates' statements, their update rows, q's
//!    mark set to the batch's last number -- one transaction
//!  after a crash (`recover`): every update row any replica holds, by
//!    number; each server applies the ones above its mark, in order
//! ```
//!
//! What it guarantees: a server's mark says it applied every update up to
//! it and none after (updates are applied in number order, and the mark
//! moves in the transaction that applies them); a global whose client
//! heard back committed its update row at its own server. So after a crash
//! that the write-ahead logs survive, every replica can be brought to
//! every acknowledged global, exactly once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_sql::Plan;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::conveyor::Update;
use crate::coordinator::{ProcCtx, Sent, Shared, TxnState};
use crate::procedure::PreparedProc;

/// The tables, appended to the application's schema (`extra_ddl`).
pub const DDL: &str = "
CREATE TABLE elia_applied (server INT, seq INT NOT NULL, PRIMARY KEY (server));
CREATE TABLE elia_updates (seq INT, origin INT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (seq));
";

const LOCK_MARK: &str = "UPDATE elia_applied SET seq = seq + 0 WHERE server = $s";
const NEW_MARK: &str = "INSERT INTO elia_applied (server, seq) VALUES ($s, $q)";
const SET_MARK: &str = "UPDATE elia_applied SET seq = $q WHERE server = $s";
const INSERT_UPDATE: &str = "INSERT INTO elia_updates (seq, origin, body) VALUES ($q, $o, $b)";
const MARKS: &str = "SELECT server, seq FROM elia_applied";
const UPDATES: &str = "SELECT seq, origin, body FROM elia_updates";

/// The statements above, prepared once against the cluster's catalog.
pub struct Statements {
    lock_mark: Arc<Plan>,
    new_mark: Arc<Plan>,
    set_mark: Arc<Plan>,
    insert_update: Arc<Plan>,
    marks: Arc<Plan>,
    updates: Arc<Plan>,
}

impl Statements {
    pub fn prepare(shared: &Shared) -> Result<Statements> {
        let p = |sql: &str| {
            brine_sql::prepare(&shared.catalog, sql)
                .map(Arc::new)
                .map_err(|e| Error::Internal(format!("elia: preparing `{sql}`: {e}")))
        };
        Ok(Statements {
            lock_mark: p(LOCK_MARK)?,
            new_mark: p(NEW_MARK)?,
            set_mark: p(SET_MARK)?,
            insert_update: p(INSERT_UPDATE)?,
            marks: p(MARKS)?,
            updates: p(UPDATES)?,
        })
    }
}

/// An update as its row keeps it.
#[derive(Serialize, Deserialize)]
pub struct Body {
    pub procedure: String,
    pub statements: Vec<(String, Vec<Value>)>,
}

impl Body {
    pub fn of(update: &Update) -> Body {
        Body {
            procedure: update.procedure.clone(),
            statements: update
                .statements
                .iter()
                .map(|s| (s.name.clone(), s.params.clone()))
                .collect(),
        }
    }

    fn encode(&self) -> Result<Value> {
        serde_json::to_string(self)
            .map(|s| Value::str(&s))
            .map_err(|e| Error::Internal(format!("elia: encoding an update: {e}")))
    }
}

/// Runs `plan` with `params` as transaction `state` at `server`.
async fn exec(
    ctx: &ProcCtx,
    server: usize,
    plan: &Arc<Plan>,
    params: Vec<Value>,
) -> Result<brine_sql::QueryResult> {
    let (txn, class, isolation) = ctx.live()?;
    let lock = ctx.lock_spec(isolation, class);
    let r = ctx
        .execute_on(&[server], txn, plan, params, lock, Sent::default())
        .await;
    ctx.doom_on_abort(&r);
    r
}

/// Takes `server`'s mark row's lock (creating the row the first time):
/// whoever holds it is the server's only transaction between taking an
/// update number and committing.
pub async fn lock_mark(ctx: &ProcCtx, st: &Statements, server: usize) -> Result<()> {
    let s = Value::Int(server as i64);
    if exec(ctx, server, &st.lock_mark, vec![s.clone()])
        .await?
        .affected
        == 0
    {
        exec(ctx, server, &st.new_mark, vec![s, Value::Int(0)]).await?;
    }
    Ok(())
}

/// Sets `server`'s mark to `seq` (its row locked by `lock_mark` first).
pub async fn set_mark(ctx: &ProcCtx, st: &Statements, server: usize, seq: u64) -> Result<()> {
    exec(
        ctx,
        server,
        &st.set_mark,
        vec![Value::Int(seq as i64), Value::Int(server as i64)],
    )
    .await
    .map(|_| ())
}

/// Keeps `update`'s row at `server`.
pub async fn keep_update(
    ctx: &ProcCtx,
    st: &Statements,
    server: usize,
    update: &Update,
) -> Result<()> {
    let body = Body::of(update).encode()?;
    exec(
        ctx,
        server,
        &st.insert_update,
        vec![
            Value::Int(update.seq as i64),
            Value::Int(i64::from(update.origin)),
            body,
        ],
    )
    .await
    .map(|_| ())
}

/// What one replica's tables say.
struct Replica {
    mark: u64,
    updates: Vec<(u64, u32, String)>,
}

async fn read_replica(shared: &Arc<Shared>, st: &Statements, server: u32) -> Result<Replica> {
    let txn = shared.new_txn(None);
    let state = Arc::new(Mutex::new(TxnState::new(txn)));
    let ctx = ProcCtx::new(shared.clone(), NodeId(server), None, state.clone());
    let p = server as usize;
    let marks = exec(&ctx, p, &st.marks, vec![]).await?;
    let rows = exec(&ctx, p, &st.updates, vec![]).await?;
    crate::coordinator::commit(shared, NodeId(server), &state).await?;
    let mark = marks
        .rows
        .iter()
        .find(|r| r.first().and_then(Value::as_int) == Some(i64::from(server)))
        .and_then(|r| r.get(1).and_then(Value::as_int))
        .unwrap_or(0) as u64;
    let updates = rows
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                r.first()?.as_int()? as u64,
                r.get(1)?.as_int()? as u32,
                r.get(2)?.as_str()?.to_string(),
            ))
        })
        .collect();
    Ok(Replica { mark, updates })
}

/// After a restart: every update any replica kept, and what each server
/// must apply (above its mark, in number order). Returns the highest
/// update number, which the token numbers on from.
pub async fn recover(
    shared: &Arc<Shared>,
    st: &Statements,
    servers: u32,
    procedures: &HashMap<String, Arc<PreparedProc>>,
    mut apply: impl FnMut(u32, Vec<Arc<Update>>) -> futures::future::BoxFuture<'static, Result<()>>,
) -> Result<u64> {
    let mut replicas = Vec::with_capacity(servers as usize);
    let mut all: BTreeMap<u64, (u32, String)> = BTreeMap::new();
    for s in 0..servers {
        let r = read_replica(shared, st, s).await?;
        for (seq, origin, body) in &r.updates {
            all.entry(*seq).or_insert_with(|| (*origin, body.clone()));
        }
        replicas.push(r);
    }
    let mut decoded: BTreeMap<u64, Arc<Update>> = BTreeMap::new();
    for (&seq, (origin, body)) in &all {
        decoded.insert(seq, Arc::new(decode(seq, *origin, body, procedures)?));
    }
    for (s, r) in replicas.iter().enumerate() {
        let missing: Vec<Arc<Update>> = decoded
            .range(r.mark + 1..)
            .map(|(_, u)| u.clone())
            .collect();
        if !missing.is_empty() {
            tracing::info!(
                server = s,
                mark = r.mark,
                missing = missing.len(),
                "elia: a replica catches up after a restart"
            );
            apply(s as u32, missing).await?;
        }
    }
    Ok(decoded.keys().next_back().copied().unwrap_or(0))
}

fn decode(
    seq: u64,
    origin: u32,
    body: &str,
    procedures: &HashMap<String, Arc<PreparedProc>>,
) -> Result<Update> {
    let corrupt = |reason: String| Error::Corrupt {
        file: "elia_updates".into(),
        offset: seq,
        reason,
    };
    let b: Body = serde_json::from_str(body).map_err(|e| corrupt(e.to_string()))?;
    let proc = procedures
        .get(&b.procedure)
        .ok_or_else(|| corrupt(format!("no procedure `{}`", b.procedure)))?;
    let statements = b
        .statements
        .into_iter()
        .map(|(name, params)| {
            let plan = proc.plan(&name)?.clone();
            Ok(super::conveyor::Recorded { name, plan, params })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Update {
        txn: brine_core::TxnId { ts: 0, id: 0 },
        origin,
        seq,
        procedure: b.procedure,
        statements,
        versions: Vec::new(),
    })
}
