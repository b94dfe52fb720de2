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
mod partition;
mod recover;
mod release;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{Error, NodeId, Result, Value};
use brine_lock::DeadlockPolicy;
use brine_sql::{Plan, QueryResult};
use brine_storage::wal::record::BaseContext;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

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
#[derive(Debug)]
pub struct Salt {
    pub options: SaltOptions,
}

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
        }
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
];
const ACCEPTED: usize = 0;
const REPLAYS: usize = 1;

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

    fn check_deployment(&self, multi_process: bool, durable: bool) -> Result<()> {
        if multi_process && durable {
            return Err(Error::Config(
                "Salt with durability `wal` runs in the embedded cluster only for now: rolling a BASE \
                 transaction forward needs its context from every node"
                    .into(),
            ));
        }
        Ok(())
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
        Box::pin(base::roll_forward(
            shared,
            node,
            procedures,
            unfinished,
            self.options,
        ))
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
