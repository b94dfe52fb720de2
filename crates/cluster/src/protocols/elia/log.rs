//! What makes Elia's replicas recoverable: every global's update numbered
//! in token order and kept, as a row, in every replica that applied it,
//! by the transaction that applied it.
//!
//! ```text
//!  elia_updates(seq, origin, body)  the update, as JSON: its procedure and
//!                                   its mutating statements' names and
//!                                   bound values
//!
//!  a global at p, at its commit point: take the next number; insert its
//!    update row -- in its own transaction
//!  a replay batch at q: the updates' statements and their rows -- one
//!    transaction
//!  after a crash (`recover`): every update row any replica holds, by
//!    number; each server applies, in number order, the ones it lacks
//! ```
//!
//! What it guarantees: a replica holds an update's row exactly when it
//! applied the update (the row commits with the update's effects); a
//! global whose client heard back committed its row at its own server.
//! So after a crash that the write-ahead logs survive, every replica can
//! be brought to every acknowledged global, exactly once. No row is shared
//! by two transactions, so the bookkeeping adds no conflict: globals at one
//! server still commit in parallel.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_sql::Plan;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::conveyor::Update;
use crate::coordinator::{ProcCtx, Sent, Shared, TxnState};
use crate::procedure::PreparedProc;

/// The table, appended to the application's schema (`extra_ddl`).
pub const DDL: &str = "
CREATE TABLE elia_updates (seq INT, origin INT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (seq));
";

const INSERT_UPDATE: &str = "INSERT INTO elia_updates (seq, origin, body) VALUES ($q, $o, $b)";
const UPDATES: &str = "SELECT seq, origin, body FROM elia_updates";
const UPDATE: &str = "SELECT seq, origin, body FROM elia_updates WHERE seq = $q";

/// The statements above, prepared once against the cluster's catalog.
pub struct Statements {
    insert_update: Arc<Plan>,
    updates: Arc<Plan>,
    update: Arc<Plan>,
}

impl Statements {
    pub fn prepare(shared: &Shared) -> Result<Statements> {
        let p = |sql: &str| {
            brine_sql::prepare(&shared.catalog, sql)
                .map(Arc::new)
                .map_err(|e| Error::Internal(format!("elia: preparing `{sql}`: {e}")))
        };
        Ok(Statements {
            insert_update: p(INSERT_UPDATE)?,
            updates: p(UPDATES)?,
            update: p(UPDATE)?,
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
        self.json().map(|s| Value::str(&s))
    }

    /// As its row keeps it (and the token carries it across processes).
    pub fn json(&self) -> Result<String> {
        serde_json::to_string(self)
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

/// An update row: `(seq, origin, body)`.
pub type Row = (u64, u32, String);

fn update_rows(rows: &brine_sql::QueryResult) -> Vec<Row> {
    rows.rows
        .iter()
        .filter_map(|r| {
            Some((
                r.first()?.as_int()? as u64,
                r.get(1)?.as_int()? as u32,
                r.get(2)?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Runs `plan` once per parameter list at `server`, in one read-only
/// transaction; every row they return.
async fn read_at(
    shared: &Arc<Shared>,
    server: u32,
    plan: &Arc<Plan>,
    params: Vec<Vec<Value>>,
) -> Result<Vec<Row>> {
    let txn = shared.new_txn(None);
    let state = Arc::new(Mutex::new(TxnState::new(txn)));
    let ctx = ProcCtx::new(shared.clone(), NodeId(server), None, state.clone());
    let p = server as usize;
    let mut out = Vec::new();
    for ps in params {
        match exec(&ctx, p, plan, ps).await {
            Ok(rows) => out.extend(update_rows(&rows)),
            Err(e) => {
                crate::coordinator::abort(shared, NodeId(server), &state).await;
                return Err(e);
            }
        }
    }
    crate::coordinator::commit(shared, NodeId(server), &state).await?;
    Ok(out)
}

/// Every update row `server`'s replica holds.
pub async fn held(shared: &Arc<Shared>, st: &Statements, server: u32) -> Result<Vec<Row>> {
    read_at(shared, server, &st.updates, vec![vec![]]).await
}

/// The rows of updates `seqs` that `server`'s replica holds.
pub async fn rows(
    shared: &Arc<Shared>,
    st: &Statements,
    server: u32,
    seqs: &[u64],
) -> Result<Vec<Row>> {
    let params = seqs.iter().map(|&q| vec![Value::Int(q as i64)]).collect();
    read_at(shared, server, &st.update, params).await
}

/// After a restart: every update any replica kept, and what each server
/// must apply (the ones it lacks, in number order). Returns the highest
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
        let r = held(shared, st, s).await?;
        for (seq, origin, body) in &r {
            all.entry(*seq).or_insert_with(|| (*origin, body.clone()));
        }
        replicas.push(r);
    }
    let mut decoded: BTreeMap<u64, Arc<Update>> = BTreeMap::new();
    for (&seq, (origin, body)) in &all {
        decoded.insert(seq, Arc::new(decode(seq, *origin, body, procedures)?));
    }
    for (s, r) in replicas.iter().enumerate() {
        let has: std::collections::BTreeSet<u64> = r.iter().map(|u| u.0).collect();
        let missing: Vec<Arc<Update>> = decoded
            .iter()
            .filter(|(seq, _)| !has.contains(seq))
            .map(|(_, u)| u.clone())
            .collect();
        if !missing.is_empty() {
            tracing::info!(
                server = s,
                held = has.len(),
                missing = missing.len(),
                "elia: a replica catches up after a restart"
            );
            apply(s as u32, missing).await?;
        }
    }
    Ok(decoded.keys().next_back().copied().unwrap_or(0))
}

pub fn decode(
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
