//! The protocols, each a module that plugs into the engine through
//! [`crate::protocol`] (coordinator side) and [`crate::partition::Rules`]
//! (partition side), and the registry that finds them by name.
//!
//! A protocol depends on the engine, never the other way round: the
//! coordinator and the partition actor name none of these modules. Adding
//! one is a new module and one line in [`BUILT_IN`] (or, from outside the
//! crate, one call of [`register`]); `docs/architecture.md`, "How to add a
//! protocol".

pub mod acid;
pub mod callas;
pub mod central;
pub mod elia;
pub(crate) mod gather;
pub mod mediator;
pub mod raw;
pub mod salt;

use std::sync::Arc;

use brine_core::{Error, Result};
use brine_lock::DeadlockPolicy;
use parking_lot::RwLock;

use crate::cluster::ClusterConfig;
use crate::protocol::Protocol;

/// A protocol as the registry knows it: its name, the deadlock handling it
/// runs best with, and how a cluster builds it from its configuration.
#[derive(Clone, Copy)]
pub struct Registration {
    pub name: &'static str,
    /// The deadlock handling used when none is asked for.
    pub deadlock: DeadlockPolicy,
    /// Builds the protocol for a cluster's configuration and the names of
    /// its application's procedures.
    pub build: Build,
}

/// How a cluster builds a protocol: from its configuration and the names
/// of its application's procedures.
pub type Build = fn(&ClusterConfig, &[&str]) -> Result<Arc<dyn Protocol>>;

/// The protocols brine ships, one line each.
///
/// Deadlock handling: `acid` and `raw` run wait-die (short waits;
/// per-partition detection misses cross-partition cycles, measured in
/// docs/results/micro-contention-sweep.md). Salt runs the wait-for-graph
/// detector: Salt makes an ACID transaction wait for whole BASE
/// transactions (saline locks) and queues later BASE requests behind it
/// (FIFO); under wait-die those long waits become repeated deaths and
/// backoffs, which collapsed TPC-C with clause 2's statement order from
/// 1,378 to 28 txn/s at 32 clients (docs/results/salt.md); protecting
/// accepted BASE transactions lifted wait-die there to 1,885 txn/s, the
/// detector does 6,200. Callas runs the detector too: a pipelined
/// transaction waits for whole pieces of the ones it depends on, and under
/// wait-die those waits become restarts (ticketing at 256 clients 4,853
/// txn/s against 20,628 with the detector; TPC-C at one warehouse and 128
/// clients 1,775 against 4,237; docs/results/callas.md).
pub const BUILT_IN: &[Registration] = &[
    Registration {
        name: "acid",
        deadlock: DeadlockPolicy::WaitDie,
        build: |_, _| Ok(Arc::new(acid::Acid)),
    },
    Registration {
        name: "raw",
        deadlock: DeadlockPolicy::WaitDie,
        build: |_, _| Ok(Arc::new(raw::Raw)),
    },
    salt::SALT,
    salt::SALT_NOLOCAL,
    callas::CALLAS,
    mediator::MEDIATOR,
    mediator::MEDIATOR_SER,
    mediator::OMID,
    mediator::KV,
    elia::ELIA,
    elia::READ_REPLICAS,
    Registration {
        name: "central",
        deadlock: DeadlockPolicy::WaitDie,
        build: |_, _| Ok(Arc::new(central::Central)),
    },
];

/// Protocols registered at run time ([`register`]).
static EXTRA: RwLock<Vec<Registration>> = RwLock::new(Vec::new());

/// Adds a protocol to the registry (a test's, or an embedding
/// application's); a name already taken is refused.
pub fn register(r: Registration) -> Result<()> {
    let mut extra = EXTRA.write();
    if lookup_in(&extra, r.name).is_some() {
        return Err(Error::Config(format!(
            "a protocol named `{}` is registered already",
            r.name
        )));
    }
    extra.push(r);
    Ok(())
}

fn lookup_in(extra: &[Registration], name: &str) -> Option<Registration> {
    BUILT_IN
        .iter()
        .chain(extra.iter())
        .find(|r| r.name == name)
        .copied()
}

/// The registration of protocol `name`.
pub fn lookup(name: &str) -> Result<Registration> {
    let extra = EXTRA.read();
    lookup_in(&extra, name).ok_or_else(|| {
        let names: Vec<_> = BUILT_IN
            .iter()
            .chain(extra.iter())
            .map(|r| r.name)
            .collect();
        Error::Config(format!(
            "unknown protocol `{name}` (available: {})",
            names.join(", ")
        ))
    })
}

/// The protocol `name` for a cluster's configuration and procedures.
pub fn build(name: &str, config: &ClusterConfig, procedures: &[&str]) -> Result<Arc<dyn Protocol>> {
    (lookup(name)?.build)(config, procedures)
}

/// The protocol `name` with the default configuration (no Callas grouping:
/// every procedure in the default group).
pub fn by_name(name: &str) -> Result<Arc<dyn Protocol>> {
    build(name, &ClusterConfig::default(), &[])
}

/// The deadlock handling protocol `name` runs best with (wait-die for a
/// name nobody registered).
pub fn default_deadlock_policy(name: &str) -> DeadlockPolicy {
    lookup(name).map_or(DeadlockPolicy::WaitDie, |r| r.deadlock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Isolation;

    #[test]
    fn raw_holds_every_lock_for_one_statement_only() -> Result<()> {
        for isolation in [Isolation::ReadCommitted, Isolation::Serializable] {
            let raw = by_name("raw")?.lock_spec(isolation);
            assert!(raw.short_reads && raw.short_writes, "{isolation}: {raw:?}");
            let acid = by_name("acid")?.lock_spec(isolation);
            assert!(!acid.short_writes, "{isolation}: {acid:?}");
        }
        Ok(())
    }

    #[test]
    fn deadlock_defaults_per_protocol() {
        use brine_lock::DeadlockPolicy::{Detect, WaitDie};
        assert_eq!(default_deadlock_policy("acid"), WaitDie);
        assert_eq!(default_deadlock_policy("raw"), WaitDie);
        assert_eq!(default_deadlock_policy("salt"), Detect);
        assert_eq!(default_deadlock_policy("salt-nolocal"), Detect);
        assert_eq!(default_deadlock_policy("callas"), Detect);
    }

    #[test]
    fn names_are_unique_and_unknown_ones_refused() {
        for (i, r) in BUILT_IN.iter().enumerate() {
            assert!(
                BUILT_IN[..i].iter().all(|o| o.name != r.name),
                "{} twice",
                r.name
            );
            assert_eq!(by_name(r.name).map(|p| p.name()).ok(), Some(r.name));
        }
        let err = by_name("nope")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("unknown protocol `nope`") && err.contains("callas"),
            "{err}"
        );
        assert!(register(BUILT_IN[0]).is_err());
    }
}
