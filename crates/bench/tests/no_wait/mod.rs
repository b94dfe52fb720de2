//! `no-wait`: strict two-phase locking where a lock that must be waited
//! for is never waited for: the statement fails at once as a victim, and
//! the call is retried (DBx1000's NO_WAIT). No deadlock can form, so no
//! detection is needed.
//!
//! A protocol added from outside brine's engine and protocols: this module
//! and one registration line (`brine_cluster::protocols::register`), and
//! nothing else. Its coordinator side is the engine's ACID transaction;
//! its partition side is one rule.

use std::any::Any;

use brine_cluster::message::{LockSpec, PartitionMsg};
use brine_cluster::partition::{Partition, PartitionParts, Rules, Stmt};
use brine_cluster::protocols::Registration;
use brine_cluster::{DeadlockPolicy, Isolation, Protocol};
use std::sync::Arc;
use tokio::sync::mpsc;

/// How the registry knows it.
pub const REGISTRATION: Registration = Registration {
    name: "no-wait",
    // Never consulted: nothing waits.
    deadlock: DeadlockPolicy::WaitDie,
    build: |_, _| Ok(Arc::new(NoWait)),
};

pub struct NoWait;

impl Protocol for NoWait {
    fn name(&self) -> &'static str {
        "no-wait"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn spawn_partition(&self, parts: PartitionParts, rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        tokio::spawn(Partition::new(parts, NoWaitRules).run(rx));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// At the partition: strict two-phase locking that refuses every wait.
pub struct NoWaitRules;

impl Rules for NoWaitRules {
    fn refuses_wait(_p: &Partition<Self>, _stmt: &Stmt) -> bool {
        true
    }
}
