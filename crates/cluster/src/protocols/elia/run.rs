//! A call under Elia: placed at its server by its route, run at once
//! (commutative, local) or at the token (global), every statement at the
//! server's own full replica; a global's mutating statements recorded
//! with their bound values as its update.
//!
//! Hot path: every call of an Elia cluster runs `run`, and every
//! statement `ReplicaStatements::exec` (one lock of the transaction's
//! state, no allocation unless the call is global).

use std::any::Any;
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_sql::{Plan, QueryResult, StatementKind};
use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::conveyor::{slot, Recorded, Turn, Update};
use super::log;
use super::routes::{Class, Placed};
use super::{Elia, Mode};
use crate::coordinator::{abort, commit, CallOutcome, ProcCtx, Retries, Sent, TxnState};
use crate::protocol::{Call, Statements, TxnExt};

/// An Elia transaction's state at its coordinator: its server, and for a
/// global the mutating statements it ran so far.
struct EliaTxn {
    server: usize,
    recorded: Option<Vec<Recorded>>,
}

impl TxnExt for EliaTxn {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

fn elia_txn(st: &mut TxnState) -> Option<&mut EliaTxn> {
    st.ext.as_mut()?.as_any_mut().downcast_mut::<EliaTxn>()
}

/// Every statement at the transaction's server, recorded if it mutates
/// and the transaction is global.
pub(super) struct ReplicaStatements;

impl Statements for ReplicaStatements {
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>> {
        Box::pin(async move {
            let (txn, class, isolation) = ctx.live()?;
            let params = plan.bind(args)?;
            let lock = ctx.lock_spec(isolation, class);
            let server = {
                let mut st = ctx.state.lock();
                let e = elia_txn(&mut st).ok_or_else(|| {
                    Error::Internal("elia: a transaction without its state".into())
                })?;
                if let Some(rec) = &mut e.recorded {
                    if plan.access().kind != StatementKind::Select {
                        rec.push(Recorded {
                            name: statement.to_string(),
                            plan: plan.clone(),
                            params: params.clone(),
                        });
                    }
                }
                e.server
            };
            let result = ctx
                .execute_on(&[server], txn, &plan, params, lock, Sent::default())
                .await;
            ctx.doom_on_abort(&result);
            result
        })
    }
}

/// How a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum How {
    Commutative,
    Local,
    /// At the token holder; its update appended to the token.
    Turn,
    /// At the primary at once; its update published for the token.
    Primary,
}

/// Runs `call` under Elia (seed 004 Algorithm 2, lines 1-9 and the
/// global's part of 16-21).
pub(super) async fn run(elia: &Elia, call: Call<'_>) -> Result<CallOutcome> {
    let Call {
        shared,
        node,
        proc,
        args,
        on_accept,
        session,
    } = call;
    let conveyor = &elia.conveyor;
    let servers = conveyor.servers();
    let reached = crate::topology::client_site(node, session, servers);
    let (placed, how) = match elia.mode {
        Mode::Conveyor => conveyor_place(elia, shared, &proc.name, &args, reached)?,
        // Read-only calls at the replica the client reached; every other
        // at the primary, at once, its update shipped in commit order.
        Mode::ReadReplicas => {
            let read_only = proc
                .statements
                .values()
                .all(|p| p.access().kind == StatementKind::Select);
            let server = if read_only { reached } else { 0 };
            let how = if read_only {
                How::Commutative
            } else {
                How::Primary
            };
            (
                Placed {
                    server,
                    global: !read_only,
                },
                how,
            )
        }
    };
    let counters = &shared.counters.protocol;
    counters.add(
        match how {
            How::Turn | How::Primary => slot::GLOBAL,
            How::Commutative => slot::COMMUTATIVE,
            How::Local => slot::LOCAL,
        },
        1,
    );
    if placed.server != reached {
        counters.add(slot::ROUTED_AWAY, 1);
    }
    if let Some(ring) = &elia.ring {
        if !ring.hosts(placed.server) {
            // Across processes: the call runs in its server's process.
            let outcome = ring.forward(placed.server, &proc.name, args, how).await?;
            if let Some(tx) = on_accept {
                let _ = tx.send(());
            }
            return Ok(outcome);
        }
    }
    let at = At {
        placed,
        how,
        session,
    };
    // The client sends to the call's server from its own site, and hears
    // back (where a topology places clients).
    let call = async {
        if elia.mode == Mode::ReadReplicas && how == How::Commutative {
            // Read-your-writes: the replica has applied this client's writes.
            conveyor.caught_up(placed.server, session).await;
        }
        run_at(elia, shared, proc, args, on_accept, at).await
    };
    shared.link.client_trip(reached, placed.server, call).await
}

/// Where and how a call runs under the Conveyor Belt, for a client that
/// reached server `reached`: its route's server, at the token if global.
fn conveyor_place(
    elia: &Elia,
    shared: &crate::coordinator::Shared,
    procedure: &str,
    args: &[Value],
    reached: u32,
) -> Result<(Placed, How)> {
    let local_lg = shared.mutation == Some(crate::protocol::Mutation::EliaLocalLG);
    let placed =
        elia.routes
            .place_as(procedure, args, elia.conveyor.servers(), reached, local_lg)?;
    let how = match (placed.global, elia.routes.get(procedure).map(|r| r.class)) {
        (true, _) => How::Turn,
        (false, Some(Class::Commutative)) => How::Commutative,
        (false, _) => How::Local,
    };
    Ok((placed, how))
}

/// A call another process forwarded here (`Ring::forward`), placed there
/// as `how` says: run here, if this server's routes place it here too.
pub(super) async fn run_forwarded(
    elia: &Elia,
    ring: &super::ring::Ring,
    procedure: &str,
    args: Vec<Value>,
    how: How,
) -> Result<(Vec<Value>, u32)> {
    let (shared, procedures) = ring.attached()?;
    let proc = procedures
        .get(procedure)
        .ok_or_else(|| Error::UnknownProcedure(procedure.to_string()))?;
    let server = ring
        .me()
        .ok_or_else(|| Error::Config("elia: this process is no server".into()))?;
    // Placed here as if a client had reached this server.
    let (placed, here) = conveyor_place(elia, &shared, &proc.name, &args, server)?;
    if placed.server != server || here != how {
        return Err(Error::Config(format!(
            "elia: `{procedure}` was sent to server {server} as {how:?}, but its routes here \
             place it at server {} as {here:?}: the processes run different routes (give every \
             process the cluster file's workload options)",
            placed.server
        )));
    }
    let at = At {
        placed: Placed {
            server,
            global: how == How::Turn,
        },
        how,
        session: None,
    };
    run_at(elia, &shared, proc, args, None, at)
        .await
        .map(|o| (o.values, o.attempts))
}

/// A global's commit point, its locks held (`log.rs`): the update
/// numbered and put in token order (or published, at the read replicas'
/// primary), its row kept in the global's own transaction. On an error
/// the update is taken back.
async fn commit_point(
    ctx: &ProcCtx,
    elia: &Elia,
    turn: Option<&Turn>,
    server: u32,
    make: impl FnOnce(u64) -> Update,
) -> Result<Arc<Update>> {
    let conveyor = &elia.conveyor;
    let st = conveyor.log(&ctx.shared)?;
    let p = server as usize;
    let update = match turn {
        Some(t) => t.append(make),
        None => conveyor.publish(&ctx.shared, server, make),
    };
    let kept = log::keep_update(ctx, &st, p, &update).await;
    if let Err(e) = kept {
        match turn {
            Some(t) => t.withdraw(&update),
            None => conveyor.retract(server, &update),
        }
        return Err(e);
    }
    Ok(update)
}

/// Where and how a call runs, and for which client.
struct At {
    placed: Placed,
    how: How,
    session: Option<u64>,
}

/// Runs the call at its server, `how` says.
async fn run_at(
    elia: &Elia,
    shared: &Arc<crate::coordinator::Shared>,
    proc: &Arc<crate::procedure::PreparedProc>,
    args: Vec<Value>,
    on_accept: Option<tokio::sync::oneshot::Sender<()>>,
    at: At,
) -> Result<CallOutcome> {
    let At {
        placed,
        how,
        session,
    } = at;
    let conveyor = &elia.conveyor;
    let turn = if how == How::Turn {
        Some(conveyor.wait_turn(shared, placed.server).await?)
    } else {
        None
    };
    let records = matches!(how, How::Turn | How::Primary);
    let node = NodeId(placed.server);
    let mut tries = Retries::new(shared);
    loop {
        let attempt = tries.begin();
        let txn = tries.new_txn();
        let mut st = TxnState::begin(shared, txn, Some(proc));
        st.ext = Some(Box::new(EliaTxn {
            server: placed.server as usize,
            recorded: records.then(Vec::new),
        }));
        let state = Arc::new(Mutex::new(st));
        let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone())
            .with_statements(&ReplicaStatements);
        let body_result = (proc.body)(ctx, args.clone()).await;
        let doomed = state.lock().doomed;
        let cause = match (body_result, doomed) {
            (Ok(values), None) => {
                // The commit point: the update takes its place in token
                // order while the transaction still holds its locks.
                let (recorded, versions) = {
                    let mut st = state.lock();
                    let versions = st
                        .rec
                        .as_ref()
                        .map(|r| super::conveyor::writes_of(&r.ops))
                        .unwrap_or_default();
                    (elia_txn(&mut st).and_then(|e| e.recorded.take()), versions)
                };
                let update = match recorded {
                    None => None,
                    Some(statements) => {
                        let ctx =
                            ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone());
                        let make = |seq| Update {
                            txn,
                            origin: placed.server,
                            seq,
                            procedure: proc.name.clone(),
                            statements,
                            versions,
                        };
                        match commit_point(&ctx, elia, turn.as_ref(), placed.server, make).await {
                            Ok(u) => Some(u),
                            Err(e) => {
                                abort(shared, node, &state).await;
                                match e {
                                    Error::Aborted(cause) => {
                                        tries.victim(cause, txn.id).await?;
                                        continue;
                                    }
                                    e => return Err(e),
                                }
                            }
                        }
                    }
                };
                match commit(shared, node, &state).await {
                    Ok(()) => {
                        if let (Some(u), None) = (&update, &turn) {
                            conveyor.wrote(session, placed.server, u.seq);
                        }
                        return Ok(tries.committed(txn, &proc.name, values, on_accept));
                    }
                    Err(e) => {
                        if let Some(u) = &update {
                            match &turn {
                                Some(t) => t.withdraw(u),
                                None => conveyor.retract(placed.server, u),
                            }
                        }
                        match e {
                            Error::Aborted(cause) => cause,
                            e => return Err(e),
                        }
                    }
                }
            }
            (_, Some(cause)) => {
                abort(shared, node, &state).await;
                cause
            }
            (Err(e), None) => {
                abort(shared, node, &state).await;
                tracing::debug!(%txn, procedure = %proc.name, attempt, "aborted: {e}");
                tries.failed(&e);
                return Err(e);
            }
        };
        tries.victim(cause, txn.id).await?;
    }
}
