//! Mediator (seed 003; DESIGN 4.5): native single-key gets and puts that
//! never abort and pay no transaction overhead, beside snapshot-isolation
//! and serializable transactions over the same multi-versioned items,
//! ordered by temporal fences.
//!
//! This module holds the algorithm's parts, each as the source states it
//! and tested on its own and together (`tests.rs`, including the fence
//! scenarios of Fig. 2 and the serializable variant's missing fence):
//!
//! - `store.rs`: a partition's versions and local clock (Algorithm 3);
//! - `tso.rs`: the transaction status oracle, its ring with write-set
//!   Bloom filters (`bloom.rs`) and its collection (Algorithms 2 and 4);
//! - `client.rs`: a transaction at its client (Algorithms 1 and 4);
//! - `helper.rs`: the helper that resolves transactions their clients
//!   left serialized but unfinished, from the log;
//! - `kv.rs`: the statements Mediator runs, point gets and puts by
//!   primary key, read from declared SQL;
//! - `partition.rs`: Mediator's partition rules, the versioned store
//!   served through Mediator's messages, the engine's store kept at the
//!   latest versions.
//!
//! Not yet built (issue 34): the coordinator side in the cluster (the TSO
//! on its node, a call's path), its baseline, history checking. See
//! `docs/mediator.md`.

pub mod bloom;
pub mod client;
pub mod helper;
pub mod kv;
pub mod partition;
pub mod store;
pub mod tso;

#[cfg(test)]
mod tests;

pub use client::{Abort, ClientConfig, Committing, Db, Level, Log, Partitioned, Prepared, Txn};
pub use store::{Ts, VersionedStore};
pub use tso::{Check, Refusal, Status, Tso, TsoConfig, TsoStats};
