//! Salt (seed 000 chapter 3, seed 001; DESIGN 4.3): ACID procedures run as
//! the engine's ACID transactions (their first statement that spans
//! partitions gated); BASE procedures run as sequences of alkaline
//! subtransactions under alkaline and saline locks, accepted at their
//! first commit and rolled forward after a crash.
//!
//! - `base.rs`: the BASE transaction at its coordinator (subtransactions,
//!   context table, acceptance, retries);
//! - `release.rs`: the staged release of its saline locks at its end;
//! - `recover.rs`: the roll-forward of accepted ones after a crash;
//! - `partition.rs`: Salt's partition rules (long-term locks, the saline
//!   release-order dependencies, the staged release, the logged context).
//!
//! User guide: `docs/salt.md`.

mod base;
use super::gather;
mod partition;
mod recover;
mod release;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{NodeId, Result, Value};
use brine_lock::DeadlockPolicy;
use brine_sql::{Plan, QueryResult};
use brine_storage::wal::record::BaseContext;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::Registration;
use crate::coordinator::{run_acid, CallOutcome, ProcCtx, Shared};
use crate::message::{LockSpec, PartitionMsg};
use crate::partition::{Partition, PartitionParts};
use crate::procedure::PreparedProc;
use crate::protocol::{Call, Isolation, Mutation, Protocol, Statements};
use crate::stats::{Counter, Kept};

pub use partition::SaltRules;

/// `salt`: with the local-transaction optimization.
pub const SALT: Registration = Registration {
    name: "salt",
    deadlock: DeadlockPolicy::Detect,
    build: |config, _| Ok(Arc::new(Salt::new(true, config.mutation))),
};

/// `salt-nolocal`: without it (every subtransaction commits in a round).
pub const SALT_NOLOCAL: Registration = Registration {
    name: "salt-nolocal",
    deadlock: DeadlockPolicy::Detect,
    build: |config, _| Ok(Arc::new(Salt::new(false, config.mutation))),
};

/// How Salt runs BASE transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaltOptions {
    /// Local-transaction optimization (seed 000 section 3.4.4): a
    /// single-statement alkaline subtransaction on one partition commits
    /// there as soon as the statement has run, without a commit round.
    pub local_commit: bool,
    /// The saline release-order rules are on (off only under
    /// `Mutation::NoSalineReleaseOrder`, to show the indirect dirty read
    /// they prevent).
    pub release_order: bool,
    /// An ACID transaction's first statement that spans partitions waits
    /// gated (off only under `Mutation::NoGate`).
    pub gate: bool,
}

/// The Salt protocol.
pub struct Salt {
    pub options: SaltOptions,
    /// Across processes, the node this process is (`None`: the embedded
    /// cluster). A roll-forward there gathers its contexts from every
    /// process (`gather.rs`).
    home: Option<NodeId>,
    /// Roll-forwards of transactions given up in doubt still running, for
    /// `Protocol::quiesce`.
    rolling: gather::Rolling,
    /// This process announced its restart (`Protocol::announced`).
    announced: Arc<watch::Sender<bool>>,
    /// The engine and the procedures, for those roll-forwards.
    attached: std::sync::OnceLock<(std::sync::Weak<Shared>, Procedures)>,
}

/// The application's procedures by name.
type Procedures = Arc<HashMap<String, Arc<PreparedProc>>>;

impl Salt {
    /// `local_commit`: with the local-transaction optimization; the rest
    /// of its options as `mutation` (if any) bends them.
    pub fn new(local_commit: bool, mutation: Option<Mutation>) -> Salt {
        Salt {
            options: SaltOptions {
                local_commit,
                release_order: mutation != Some(Mutation::NoSalineReleaseOrder),
                gate: mutation != Some(Mutation::NoGate),
            },
            home: None,
            rolling: gather::Rolling::default(),
            announced: Arc::new(watch::Sender::new(false)),
            attached: std::sync::OnceLock::new(),
        }
    }

    /// `owner`, coordinated by `node`, was given up in doubt (a commit
    /// went unanswered). Across processes with a log it is rolled forward
    /// at once, in the background: its contexts are gathered from every
    /// partition (waiting for those that cannot answer yet), each fencing
    /// it first, so whatever the unanswered commit did is settled before
    /// they are read (`gather::OpenContexts`). In one process recovery
    /// finishes it.
    fn gave_up_in_doubt(&self, shared: &Shared, owner: brine_core::TxnId, node: NodeId) -> bool {
        // Without a log there is no context to roll forward from; with the
        // logs down (a crash) nothing can commit, and recovery finishes it.
        if shared.wal.as_ref().is_none_or(|w| w.is_down()) {
            return false;
        }
        let Some((shared, procedures)) = self.attached.get() else {
            return false;
        };
        let Some(shared) = shared.upgrade() else {
            return false;
        };
        let (procedures, opts) = (procedures.clone(), self.options);
        tracing::info!(%owner, "Salt: given up in doubt; rolling it forward once every partition answers");
        let rolling = self.rolling.one();
        tokio::spawn(async move {
            let gathered = gather::fenced(&shared, node, owner).await;
            if gathered.contexts.is_empty() {
                // The fence may have rolled back a subtransaction of it,
                // whose locks then stay as the transaction's (saline, to
                // its end): its end goes everywhere.
                tracing::info!(%owner, "Salt: not accepted after all (no subtransaction committed)");
                release::end_everywhere(shared.clone(), node, owner, false).await;
            }
            let gather::Gathered { contexts, undone } = gathered;
            for (sub, writes) in undone {
                base::record_undone(&shared, sub, writes);
            }
            recover::roll_forward(&shared, node, &procedures, contexts, opts).await;
            drop(rolling);
        });
        true
    }
}

/// Salt's counters: BASE transactions accepted (first subtransaction
/// committed), and bodies run again after acceptance because a
/// subtransaction was a concurrency-control victim (replayed from the
/// context table).
const COUNTERS: &[Counter] = &[
    Counter {
        name: "base_accepted",
        kept: Kept::Coordinator,
        slot: ACCEPTED,
        divisor: 1,
    },
    Counter {
        name: "base_replays",
        kept: Kept::Coordinator,
        slot: REPLAYS,
        divisor: 1,
    },
    Counter {
        name: "base_rows_relocked",
        kept: Kept::Partition,
        slot: RELOCKED,
        divisor: 1,
    },
];
const ACCEPTED: usize = 0;
const REPLAYS: usize = 1;
/// Rows of open BASE transactions locked again at a partition's restart
/// (`SaltRules::started`).
const RELOCKED: usize = 0;

/// The statements of a BASE transaction.
struct BaseStatements;

impl Statements for BaseStatements {
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        _statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>> {
        Box::pin(base::exec(ctx, plan, args))
    }

    fn begin_sub(&self, ctx: &mut ProcCtx) -> Result<()> {
        base::begin_alkaline(ctx)
    }

    fn end_sub<'a>(&'a self, ctx: &'a mut ProcCtx) -> BoxFuture<'a, Result<()>> {
        Box::pin(base::end_alkaline(ctx))
    }
}

impl Protocol for Salt {
    fn name(&self) -> &'static str {
        if self.options.local_commit {
            "salt"
        } else {
            "salt-nolocal"
        }
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn start(&self, setup: &crate::protocol::Setup<'_>) -> Result<Option<Arc<dyn Protocol>>> {
        // A fresh instance of the same options, knowing where it runs.
        let mut salt = Salt::new(self.options.local_commit, None);
        salt.options = self.options;
        salt.home = setup.hosting.as_ref().map(|h| h.node);
        Ok(Some(Arc::new(salt)))
    }

    fn attach(&self, shared: &Arc<Shared>, procedures: &Arc<HashMap<String, Arc<PreparedProc>>>) {
        let _ = self
            .attached
            .set((Arc::downgrade(shared), procedures.clone()));
    }

    /// Across processes every restart gathers the contexts of the node's
    /// BASE transactions from every process, whatever its own log holds.
    fn recovers_from_log(&self) -> bool {
        self.home.is_some()
    }

    /// Waits until the roll-forwards of transactions given up in doubt
    /// are done, so a check reads no BASE transaction half done.
    fn quiesce(&self, within: std::time::Duration) -> BoxFuture<'_, Result<()>> {
        Box::pin(
            self.rolling
                .settled(within, "Salt: BASE transactions given up in doubt"),
        )
    }

    fn announced(&self) {
        self.announced.send_replace(true);
    }

    fn encode_message(
        &self,
        msg: Box<dyn Any + Send>,
    ) -> Result<(Vec<u8>, crate::protocol::WireAnswer)> {
        crate::protocol::encode_message_as("Salt", msg, gather::encode)
    }

    fn decode_message(
        &self,
        link: &crate::link::Link,
        node: NodeId,
        bytes: &[u8],
    ) -> Result<(Box<dyn Any + Send>, crate::protocol::WireAnswering)> {
        crate::protocol::decoded_message(gather::decode(link, node, bytes))
    }

    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        if call.proc.base {
            Box::pin(base::run_base(call, self.options, None))
        } else {
            Box::pin(run_acid(call))
        }
    }

    fn gates_spanning_statements(&self) -> bool {
        self.options.gate
    }

    fn recover<'a>(
        &'a self,
        shared: &'a Arc<Shared>,
        node: NodeId,
        procedures: &'a HashMap<String, Arc<PreparedProc>>,
        unfinished: Vec<BaseContext>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if self.home.is_none() {
                return recover::roll_forward(shared, node, procedures, unfinished, self.options)
                    .await;
            }
            // Across processes this node's own log holds only part of its
            // BASE transactions' contexts (and parts of other nodes',
            // which their coordinators finish): its own are gathered from
            // every process. In the background: the peers answer only once
            // they serve, and at a cluster's start they all wait for each
            // other (so new work may run before the roll-forward ends; see
            // docs/salt.md, "Across processes").
            let (shared, procedures, opts) = (shared.clone(), procedures.clone(), self.options);
            let mut announced = self.announced.subscribe();
            tokio::spawn(async move {
                if announced.wait_for(|&a| a).await.is_err() {
                    return; // the protocol is gone: the node shuts down
                }
                let which = gather::Which::earlier_runs_of(&shared, node);
                // The previous run's subtransactions died with it; the
                // peers aborted those not prepared (`AbortOrphans`).
                let gathered = gather::gather(&shared, node, which, None).await;
                // One whose end this node logged is done: what a peer still
                // holds of its context is there because the end's release
                // never reached it (it went to a process that then died);
                // the release goes now. Rolled forward, it would run again.
                let ended = |c: &BaseContext| {
                    shared
                        .wal
                        .as_ref()
                        .is_some_and(|w| w.base_ended.contains(&c.owner))
                };
                let gather::Gathered { contexts, .. } = gathered;
                let (done, unfinished): (Vec<_>, Vec<_>) = contexts.into_iter().partition(ended);
                for c in done {
                    tokio::spawn(release::end_everywhere(shared.clone(), node, c.owner, true));
                }
                if !unfinished.is_empty() {
                    tracing::info!(
                        "Salt: rolling forward {} BASE transaction(s) of this node, from the \
                         contexts of every process",
                        unfinished.len()
                    );
                }
                recover::roll_forward(&shared, node, &procedures, unfinished, opts).await;
            });
        })
    }

    fn counters(&self) -> &'static [Counter] {
        COUNTERS
    }

    fn spawn_partition(&self, parts: PartitionParts, rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        let rules = SaltRules::new(self.options.release_order);
        tokio::spawn(Partition::new(parts, rules).run(rx));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
