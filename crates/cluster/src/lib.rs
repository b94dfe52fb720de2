//! The embedded cluster: partitions, coordinators, two-phase commit and the
//! message transport between them.
//!
//! ```text
//!  Client::call ──► coordinator (caller's task, on its node)
//!                      │ PartitionMsg over the Link (delay if nodes differ)
//!                      ▼
//!            partition actors (one tokio task each: store + lock table)
//! ```
//!
//! The same messages cross processes over TCP in a multi-process cluster
//! ([`remote`]); neither side knows which carrier it is on.
//!
//! The engine (coordinator, partition actor, link, log, cluster) is
//! protocol-agnostic; each protocol is a module of [`protocols`] that plugs
//! into it through [`protocol`] (coordinator side) and
//! [`partition::Rules`] (partition side).
//!
//! Guarantees: a committed call's writes are all applied or none are
//! (two-phase commit); with the `acid` protocol at serializable, the
//! committed history is conflict-serializable (strict two-phase locking with
//! range locks); concurrency-control victims are retried a bounded number of
//! times, and user aborts and constraint violations reach the caller as typed
//! errors with nothing changed.

pub mod client;
pub mod cluster;
pub mod coordinator;
pub mod deadlock;
pub mod decision;
pub mod durability;
pub mod history;
pub mod link;
mod load;
pub mod message;
pub mod partition;
pub mod procedure;
pub mod protocol;
pub mod protocols;
pub mod remote;
pub mod replication;
pub mod stats;
pub mod topology;

pub use client::{Client, Submitted, Txn};
pub use cluster::{Cluster, ClusterConfig, Placement, TableLocks};
pub use coordinator::{CallOutcome, ProcCtx, RetryPolicy};
pub use durability::{DurabilityConfig, DurabilityMode, RecoveryReport, WalStats};
pub use link::{Cut, FaultConfig, FaultStats, LinkClock, LinkConfig};
pub use procedure::{Application, ProcBody, ProcedureDef, Reordering};
pub use protocol::{Isolation, Layout, Mutation, Protocol};
pub use protocols::callas::{Callas, GroupDef, Grouping, Mechanism, SafeModeConfig};
pub use protocols::salt::{Salt, SaltOptions};
pub use stats::StatsSnapshot;

pub use brine_lock::{DeadlockPolicy, LockConfig};
pub use brine_sql::QueryResult;
