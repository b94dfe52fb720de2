//! Elia (seed 004; DESIGN 4.6): operation partitioning and the Conveyor
//! Belt over full replicas.
//!
//! ```text
//!  client call ──► route (routes.rs): class + partitioning arguments
//!                    │  C: the server it reached     L: server_of(arg)
//!                    │  G: server_of(arg), at the token
//!                    │  L/G: local if its arguments agree on a server
//!                    ▼
//!  server p = node p = partition p, a full replica (every row loaded
//!  everywhere), its own single-node engine (2PL, serializable)
//!    C, L: one transaction at p, at once, no coordination (run.rs)
//!    G:    queued at p; when the token is at p it runs, its mutating
//!          statements recorded with their bound values; the update rides
//!          the token and every other server applies it in token order
//!          (conveyor.rs)
//! ```
//!
//! What it guarantees: every statement of a call runs at one server, in
//! one local transaction; global updates are applied everywhere in token
//! order before the receiving server runs its own globals. With a correct
//! operation partitioning (no local operation conflicts with an operation
//! of another server), executions are serializable (seed 004, appendix).
//!
//! Registered as `elia`. The topology: one server per node, one partition
//! per node. The routes come from `ClusterConfig::elia` (see
//! `docs/elia.md`). In one process the token is a task (`conveyor.rs`);
//! across processes, a message between them (`ring.rs`).

pub mod conveyor;
mod log;
mod ring;
pub mod routes;
mod run;

use std::any::Any;
use std::sync::Arc;

use brine_core::{Error, Result};
use brine_lock::DeadlockPolicy;
use futures::future::BoxFuture;

use super::Registration;
use crate::cluster::ClusterConfig;
use crate::coordinator::CallOutcome;
use crate::message::LockSpec;
use crate::protocol::{Call, Isolation, Layout, Protocol, Setup};
use crate::stats::Counter;
use conveyor::{slot, Conveyor};
pub use routes::{Class, Placed, Route, Routes};

/// Elia's settings (`ClusterConfig::elia`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EliaOptions {
    /// Each procedure's class and partitioning arguments. A procedure
    /// without one runs as a global operation.
    pub routes: Routes,
}

/// How calls are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Elia: by the routes, globals at the token.
    Conveyor,
    /// The read-only-replicas baseline (seed 004 section 7.2): read-only
    /// calls at the replica the client reached, without coordination;
    /// every other call at server 0 (the primary) at once, its updates
    /// carried by the token to the replicas in commit order.
    ReadReplicas,
}

/// The protocol: the routes and the conveyor of one cluster.
pub struct Elia {
    mode: Mode,
    routes: Routes,
    conveyor: Arc<Conveyor>,
    /// Across processes: this process's part of the token's ring.
    ring: Option<Arc<ring::Ring>>,
}

pub const ELIA: Registration = Registration {
    name: "elia",
    // Each server's engine is plain 2PL; its transactions are short and
    // local.
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| Elia::new(config, Mode::Conveyor).map(|e| Arc::new(e) as Arc<dyn Protocol>),
};

pub const READ_REPLICAS: Registration = Registration {
    name: "read-replicas",
    deadlock: DeadlockPolicy::WaitDie,
    build: |config, _| {
        Elia::new(config, Mode::ReadReplicas).map(|e| Arc::new(e) as Arc<dyn Protocol>)
    },
};

const fn counter(name: &'static str, slot: usize) -> Counter {
    Counter::at_coordinators(name, slot)
}

const COUNTERS: &[Counter] = &[
    counter("local_calls", slot::LOCAL),
    counter("global_calls", slot::GLOBAL),
    counter("commutative_calls", slot::COMMUTATIVE),
    counter("routed_away", slot::ROUTED_AWAY),
    counter("token_hops", slot::TOKEN_HOPS),
    counter("token_turns", slot::TURNS),
    counter("updates_applied", slot::UPDATES_APPLIED),
    counter("apply_retries", slot::APPLY_RETRIES),
    counter("token_regenerations", slot::REGENERATIONS),
];

impl Elia {
    pub fn new(config: &ClusterConfig, mode: Mode) -> Result<Elia> {
        if config.partitions_per_node != 1 {
            return Err(Error::Config(format!(
                "elia runs one server per node, each a full replica in one partition: \
                 --partitions-per-node must be 1, not {}",
                config.partitions_per_node
            )));
        }
        if config.nodes > ring::MAX_SERVERS {
            return Err(Error::Config(format!(
                "elia runs at most {} servers (nodes), not {}",
                ring::MAX_SERVERS,
                config.nodes
            )));
        }
        config.elia.routes.validate()?;
        Ok(Elia {
            mode,
            routes: config.elia.routes.clone(),
            conveyor: Arc::new(Conveyor::new(config.nodes)),
            ring: None,
        })
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    pub fn conveyor(&self) -> &Arc<Conveyor> {
        &self.conveyor
    }
}

impl Protocol for Elia {
    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Conveyor => "elia",
            Mode::ReadReplicas => "read-replicas",
        }
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn layout(&self) -> Layout {
        Layout::Replicated
    }

    /// Without routes given, the analysis chooses them (every procedure
    /// weighted 1: a workload passes its mix's weights through
    /// `ClusterConfig::elia` instead). Across processes, the process's
    /// part of the ring.
    fn start(&self, setup: &Setup<'_>) -> Result<Option<Arc<dyn Protocol>>> {
        if self.mode != Mode::Conveyor {
            return Ok(None);
        }
        let routes = if self.routes.is_empty() {
            Routes::analyzed(
                setup.app_name,
                setup.ddl,
                setup.procedures,
                &Default::default(),
            )?
        } else {
            // Routes given: each names a procedure of the application.
            let known: Vec<&str> = setup.procedures.iter().map(|p| p.name.as_str()).collect();
            if let Some(unknown) = self.routes.names().find(|n| !known.contains(n)) {
                return Err(Error::Config(format!(
                    "elia route for `{unknown}`: the application `{}` has no such procedure \
                     (it has {})",
                    setup.app_name,
                    known.join(", ")
                )));
            }
            if setup.hosting.is_none() {
                return Ok(None);
            }
            self.routes.clone()
        };
        let servers = self.conveyor.servers();
        let conveyor = Arc::new(Conveyor::new(servers));
        let ring = setup.hosting.as_ref().map(|h| {
            let me = (h.node.0 < servers).then_some(h.node.0);
            Arc::new(ring::Ring::new(
                me,
                servers,
                h.peers.clone(),
                conveyor.clone(),
            ))
        });
        Ok(Some(Arc::new(Elia {
            mode: self.mode,
            routes,
            conveyor,
            ring,
        })))
    }

    fn check_failover(&self) -> Result<()> {
        Err(Error::Config(
            "replicated logs across processes (`replicas` in the cluster file) run `acid`, \
             `salt` and `callas`, not `elia`: its update log and the token's ring are its own, not replicated; Elia's full replicas are its own replication (docs/replication.md)"
                .into(),
        ))
    }

    fn check_deployment(&self, multi_process: bool, _durable: bool) -> Result<()> {
        if multi_process && self.mode == Mode::ReadReplicas {
            return Err(Error::Config(
                "read-replicas (a baseline of the embedded cluster) runs in one process; \
                 elia runs across processes"
                    .into(),
            ));
        }
        Ok(())
    }

    fn attach(
        &self,
        shared: &Arc<crate::coordinator::Shared>,
        procedures: &Arc<std::collections::HashMap<String, Arc<crate::procedure::PreparedProc>>>,
    ) {
        if let Some(ring) = &self.ring {
            ring.attach(shared, procedures);
        }
    }

    /// Elia's messages between processes: the token, fences, joins,
    /// forwarded calls (`ring.rs`).
    fn serve<'a>(&'a self, bytes: Vec<u8>) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move {
            let ring = self
                .ring
                .as_ref()
                .ok_or_else(|| Error::Config("elia: this process is not part of a ring".into()))?;
            let msg: ring::RingMsg = postcard::from_bytes(&bytes)
                .map_err(|e| Error::Transport(format!("elia: a malformed message: {e}")))?;
            let answer = match msg {
                ring::RingMsg::Call {
                    procedure,
                    args,
                    how,
                } => ring::RingAnswer::Called(
                    run::run_forwarded(self, ring, &procedure, args, how).await,
                ),
                msg => ring.handle(msg).await?,
            };
            postcard::to_allocvec(&answer)
                .map_err(|e| Error::Internal(format!("elia: encoding an answer: {e}")))
        })
    }

    fn extra_ddl(&self) -> &'static str {
        log::DDL
    }

    /// In one process; across processes a restarted server joins the
    /// ring instead (`ring.rs`).
    fn recovers_from_log(&self) -> bool {
        self.ring.is_none()
    }

    /// After a restart from the logs: every replica applies the updates
    /// it lacks (`log.rs`), and the token numbers on from the last.
    fn recover<'a>(
        &'a self,
        shared: &'a Arc<crate::coordinator::Shared>,
        _node: brine_core::NodeId,
        procedures: &'a std::collections::HashMap<String, Arc<crate::procedure::PreparedProc>>,
        _unfinished: Vec<brine_storage::wal::record::BaseContext>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let conveyor = self.conveyor.clone();
            let result = async {
                let st = conveyor.log(shared)?;
                let apply_shared = shared.clone();
                let apply_conveyor = conveyor.clone();
                let last = log::recover(
                    shared,
                    &st,
                    conveyor.servers(),
                    procedures,
                    move |s, updates| {
                        let (shared, conveyor) = (apply_shared.clone(), apply_conveyor.clone());
                        Box::pin(async move {
                            let refs: Vec<&Arc<conveyor::Update>> = updates.iter().collect();
                            conveyor::apply(&shared, &conveyor, s, &refs).await
                        })
                    },
                )
                .await?;
                conveyor.resume_numbering(last);
                Ok::<(), Error>(())
            }
            .await;
            if let Err(e) = result {
                tracing::error!("elia: recovery failed: {e}");
            }
        })
    }

    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        Box::pin(run::run(self, call))
    }

    fn rewrite_history(&self, ops: &mut Vec<brine_check::Op>) {
        self.conveyor.rewrite(ops);
    }

    fn quiesce(&self, within: std::time::Duration) -> BoxFuture<'_, Result<()>> {
        match &self.ring {
            Some(ring) => Box::pin(ring.settled(within)),
            None => Box::pin(self.conveyor.settled(within)),
        }
    }

    fn counters(&self) -> &'static [Counter] {
        COUNTERS
    }

    fn describe(&self, config: &mut serde_json::Map<String, serde_json::Value>) {
        config.insert("elia_routes".into(), self.routes.describe().into());
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
