//! A client session of a cluster: procedure calls and interactive
//! transactions (moved out of `cluster.rs`, which starts clusters).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_sql::QueryResult;
use parking_lot::Mutex;

use crate::cluster::Cluster;
use crate::coordinator::{self, CallOutcome, ProcCtx, TxnState};
use crate::protocol::Layout;

/// A client session: calls procedures and runs interactive transactions.
#[derive(Clone)]
pub struct Client {
    pub(crate) cluster: Cluster,
    pub(crate) node: NodeId,
    /// This client's number in the cluster (its session, in a history).
    pub(crate) session: u64,
}

impl Client {
    fn procedure(&self, name: &str) -> Result<Arc<crate::procedure::PreparedProc>> {
        self.cluster
            .procedures
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownProcedure(name.to_string()))
    }

    /// Calls a procedure; concurrency-control victims are retried (bounded).
    pub async fn call(&self, procedure: &str, args: Vec<Value>) -> Result<CallOutcome> {
        if let Some(nodes) = &self.cluster.call_nodes {
            return self.call_at_node(nodes, procedure, args).await;
        }
        let proc = self.procedure(procedure)?;
        coordinator::run_procedure(
            &self.cluster.shared,
            self.node,
            &proc,
            args,
            None,
            Some(self.session),
        )
        .await
    }

    /// Sends the call to this client's node, whose coordinator runs it
    /// (`Cluster::calls_at_nodes`). A lost connection leaves its outcome
    /// unknown.
    async fn call_at_node(
        &self,
        nodes: &[Arc<crate::remote::PeerClient>],
        procedure: &str,
        args: Vec<Value>,
    ) -> Result<CallOutcome> {
        use crate::remote::{WireRequest, WireResponse};
        let peer = &nodes[self.session as usize % nodes.len()];
        let req = WireRequest::Call {
            procedure: procedure.to_string(),
            args,
        };
        match peer.request(req).await {
            Ok(WireResponse::Called(r)) => {
                r.map(|(values, attempts)| CallOutcome { values, attempts })
            }
            Ok(other) => Err(crate::remote::unexpected(&other)),
            Err(e) => Err(Error::Transport(format!(
                "the call at {}: {e}; its outcome is unknown",
                peer.addr()
            ))),
        }
    }

    /// Starts a call and returns at once with its two moments (Salt): a
    /// BASE transaction is *accepted* when its first alkaline
    /// subtransaction commits (it will then complete whatever happens) and
    /// *completed* when its body has run; any other call is accepted when
    /// it commits. Needs a tokio runtime.
    pub fn submit(&self, procedure: &str, args: Vec<Value>) -> Result<Submitted> {
        let proc = self.procedure(procedure)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = self.cluster.shared.clone();
        let (node, session) = (self.node, Some(self.session));
        let done = tokio::spawn(async move {
            coordinator::run_procedure(&shared, node, &proc, args, Some(tx), session).await
        });
        Ok(Submitted { accepted: rx, done })
    }

    /// Begins an interactive transaction. Interactive transactions are not
    /// retried automatically: a concurrency-control victim gets
    /// `Error::Aborted` from `execute` or `commit` and may start over.
    pub fn begin(&self) -> Txn {
        let shared = self.cluster.shared.clone();
        let txn = shared.new_txn(None);
        let mut st = TxnState::begin(&shared, txn, None);
        if shared.protocol.layout() == Layout::Replicated {
            // It reads one replica, local rows of other servers included,
            // which no routed operation may do: a view for monitoring and
            // checks, outside the protocol's promise, so not in the
            // history.
            st.rec = None;
        }
        let state = Arc::new(Mutex::new(st));
        Txn {
            ctx: ProcCtx::new(shared, self.node, None, state.clone()),
            state,
            cluster: self.cluster.clone(),
            node: self.node,
        }
    }
}

/// A call started with [`Client::submit`].
pub struct Submitted {
    accepted: tokio::sync::oneshot::Receiver<()>,
    done: tokio::task::JoinHandle<Result<CallOutcome>>,
}

impl Submitted {
    /// Waits until the call is accepted. An error means it ended without
    /// being accepted (it aborted; `completed` tells why).
    pub async fn accepted(&mut self) -> Result<()> {
        (&mut self.accepted).await.map_err(|_| {
            Error::TxnState("the call ended without being accepted (see completed())".into())
        })
    }

    /// Waits until the call completed, with its result.
    pub async fn completed(self) -> Result<CallOutcome> {
        self.done
            .await
            .map_err(|e| Error::Internal(format!("the call's task failed: {e}")))?
    }
}

/// An interactive transaction. Dropping it without `commit` or `abort`
/// aborts it in the background.
pub struct Txn {
    ctx: ProcCtx,
    state: Arc<Mutex<TxnState>>,
    cluster: Cluster,
    node: NodeId,
}

impl Txn {
    pub fn id(&self) -> brine_core::TxnId {
        self.ctx.txn_id()
    }

    /// Executes one SQL statement of the supported subset.
    pub async fn execute(&mut self, sql: &str, args: Vec<Value>) -> Result<QueryResult> {
        let plan = self.cluster.adhoc_plan(sql)?;
        self.execute_plan(plan, args).await
    }

    /// Executes a statement prepared against this cluster's catalog (by
    /// `brine_sql::prepare`), without preparing its text again.
    pub async fn execute_plan(
        &mut self,
        plan: Arc<brine_sql::Plan>,
        args: Vec<Value>,
    ) -> Result<QueryResult> {
        self.cluster.shared.wait_ready().await;
        let sql = plan.sql();
        let protocol = &self.cluster.shared.protocol;
        if protocol.layout() == Layout::Replicated
            && plan.access().kind != brine_sql::StatementKind::Select
        {
            return Err(Error::Config(format!(
                "`{sql}`: under {} an interactive transaction may only read (writes go \
                 through the application's procedures, which keep the replicas in step)",
                protocol.name()
            )));
        }
        self.ctx.exec_plan(plan, args).await
    }

    pub async fn commit(self) -> Result<()> {
        let doomed = self.state.lock().doomed;
        let shared = &self.cluster.shared;
        if let Some(cause) = doomed {
            coordinator::abort(shared, self.node, &self.state).await;
            shared.counters.count_abort(cause);
            return Err(Error::Aborted(cause));
        }
        match coordinator::commit(shared, self.node, &self.state).await {
            Ok(()) => {
                shared.counters.commits.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    pub async fn abort(self) {
        coordinator::abort(&self.cluster.shared, self.node, &self.state).await;
        self.cluster
            .shared
            .counters
            .user_aborts
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if self.state.lock().finished {
            return;
        }
        let shared = self.cluster.shared.clone();
        let state = self.state.clone();
        let node = self.node;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { coordinator::abort(&shared, node, &state).await });
        }
    }
}
