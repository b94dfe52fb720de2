//! Concurrency-control protocols, seen from the coordinator.
//!
//! The coordinator is protocol-agnostic: it runs a transaction's body, routes
//! statements and drives two-phase commit. What differs between protocols is
//! *how locks are taken and released* (class, duration, release order,
//! downgrades) and *when the client is answered*. A protocol answers those
//! questions through this trait; `acid` (strict 2PL + 2PC) is the first
//! implementation, and Salt and Callas extend the same trait.

use std::fmt;
use std::str::FromStr;

use brine_core::Error;
use brine_lock::LockClass;

use crate::callas::Grouping;
use crate::message::LockSpec;

/// Isolation levels, defined as in seed 000 section 3.2.1 by which operations
/// take long (L) and short (S) locks.
/// Ordered from weakest to strongest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Isolation {
    /// L = {W}, S = {R, W}: reads lock only while they run. The sources'
    /// setting (MySQL Cluster's only level).
    ReadCommitted,
    /// L = S = {R, RR, W}: every lock is held to the end; range reads lock the
    /// scanned interval so phantoms cannot appear.
    #[default]
    Serializable,
}

impl FromStr for Isolation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "read-committed" | "rc" => Ok(Isolation::ReadCommitted),
            "serializable" | "ser" => Ok(Isolation::Serializable),
            other => Err(Error::Config(format!(
                "unknown isolation level `{other}` (expected read-committed or serializable)"
            ))),
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::ReadCommitted => "read-committed",
            Isolation::Serializable => "serializable",
        })
    }
}

/// The contract a protocol offers the coordinator.
///
/// `lock_spec` is asked once per statement: the class of the locks the
/// statement takes and the durations the isolation level asks for. Protocols
/// whose locks change class mid-transaction (Salt's alkaline-to-saline
/// downgrade) or depend on each other at release (Salt's saline order,
/// Callas' nexus order) add hooks here; the coordinator never inspects lock
/// classes itself.
pub trait Protocol: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn lock_spec(&self, isolation: Isolation) -> LockSpec;
    /// Salt's settings if the protocol runs BASE procedures as BASE
    /// transactions; `None`: their alkaline marks are ignored and they run
    /// as ACID transactions.
    fn salt(&self) -> Option<SaltOptions> {
        None
    }
    /// Callas' grouping, if the protocol runs grouped procedures in their
    /// groups; `None`: every procedure runs as an ACID transaction.
    fn callas(&self) -> Option<&Grouping> {
        None
    }
}

/// Callas (DESIGN 4.4): procedures of a group run under that group's
/// mechanism and nexus locks; the rest, and interactive transactions, as in
/// `acid` (the default group).
#[derive(Debug)]
pub struct Callas {
    pub grouping: Grouping,
}

impl Protocol for Callas {
    fn name(&self) -> &'static str {
        "callas"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        Acid.lock_spec(isolation)
    }

    fn callas(&self) -> Option<&Grouping> {
        Some(&self.grouping)
    }
}

/// How Salt runs BASE transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaltOptions {
    /// Local-transaction optimization (seed 000 section 3.4.4): a
    /// single-statement alkaline subtransaction on one partition commits
    /// there as soon as the statement has run, without a commit round.
    pub local_commit: bool,
}

/// Salt (DESIGN 4.3): ACID procedures as in `acid`; BASE procedures as
/// sequences of alkaline subtransactions under alkaline and saline locks.
#[derive(Debug)]
pub struct Salt {
    pub options: SaltOptions,
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
        Acid.lock_spec(isolation)
    }

    fn salt(&self) -> Option<SaltOptions> {
        Some(self.options)
    }
}

/// Strict two-phase locking with two-phase commit: the baseline every other
/// protocol is measured against (DESIGN 4.2).
#[derive(Debug, Default)]
pub struct Acid;

impl Protocol for Acid {
    fn name(&self) -> &'static str {
        "acid"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec {
            class: LockClass::Acid,
            short_reads: isolation == Isolation::ReadCommitted,
            serializable: isolation == Isolation::Serializable,
            short_writes: false,
            callas_deps: false,
            exact_callas_deps: false,
            for_update: false,
            end_row: false,
            ends_piece: None,
            after_rank: None,
        }
    }
}

/// "Raw ops" (seed 001 section 7, Fig. 10): every statement takes its locks
/// for its own duration only, as if each were a transaction of its own; one
/// commit round ends the call. No isolation and no atomicity against
/// concurrent work (a rollback restores rows others may have written since),
/// so invariants may break: it is the upper bound of what the workload's
/// operations reach with maximum concurrency, measured, never trusted.
#[derive(Debug, Default)]
pub struct Raw;

impl Protocol for Raw {
    fn name(&self) -> &'static str {
        "raw"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec {
            short_reads: true,
            short_writes: true,
            ..Acid.lock_spec(isolation)
        }
    }
}

/// A deliberately broken variant of a protocol's locking, for showing that
/// the isolation checker catches what it must (mutation testing). Only
/// reachable by building a `ClusterConfig` in code: no command-line flag
/// sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Read and range-read locks are released when the statement ends,
    /// whatever the isolation level (serializable becomes read committed).
    EarlyReadRelease,
    /// Write locks are released when the statement ends: uncommitted
    /// writes become visible and can be overwritten.
    EarlyWriteRelease,
    /// Salt without its saline release-order rules: a BASE transaction
    /// releases its saline locks at its end whatever it read, so an ACID
    /// transaction can read another BASE transaction's unfinished state
    /// through it (the indirect dirty read of seed 000 Fig. 3.3).
    NoSalineReleaseOrder,
    /// Callas without its nexus release order: a transaction releases its
    /// nexus locks as soon as it committed, whatever same-group
    /// transaction it depends on still holds its own, so a dependency
    /// cycle can span groups (seed 000 Fig. 4.2).
    NoNexusReleaseOrder,
    /// Salt without gated multi-partition statements: an ACID
    /// transaction's first statement that spans partitions is granted at
    /// each on its own, so it can hold one while it waits at another for
    /// an accepted BASE transaction that needs the first (bank's total:
    /// a deadlock whose victim is always the total).
    NoGate,
    /// Callas without range dependencies: a member's scan and another
    /// member's write into its range (or a scan over a row another member
    /// wrote) declare no dependency, as before range tracking, so Runtime
    /// Pipelining lets a scan see one of a transaction's writes and miss
    /// another (a phantom inside a group at serializable).
    ExactCallasDeps,
}

impl Mutation {
    /// Breaks `spec` as this mutation says.
    pub fn apply(self, mut spec: LockSpec) -> LockSpec {
        match self {
            Mutation::EarlyReadRelease => spec.short_reads = true,
            Mutation::EarlyWriteRelease => spec.short_writes = true,
            Mutation::ExactCallasDeps => spec.exact_callas_deps = true,
            Mutation::NoSalineReleaseOrder | Mutation::NoNexusReleaseOrder | Mutation::NoGate => {}
        }
        spec
    }
}

/// The deadlock handling a protocol runs best with, used when none is
/// asked for. `acid`: wait-die (short waits; per-partition detection misses
/// cross-partition cycles, measured in docs/results/micro-contention-sweep.md).
/// Salt: the wait-for-graph detector. Salt makes an ACID transaction wait
/// for whole BASE transactions (saline locks) and queues later BASE
/// requests behind it (FIFO); under wait-die those long waits become
/// repeated deaths and backoffs, which collapsed TPC-C with clause 2's
/// statement order from 1,378 to 28 txn/s at 32 clients
/// (docs/results/salt.md). Protecting accepted BASE transactions
/// (`LockTable::protect`) lifted wait-die there to 1,885 txn/s; the
/// detector, at 6,200 on the same workload, stays the default.
/// Callas: the detector too. A pipelined transaction waits for whole
/// pieces of the ones it depends on, and under wait-die those waits
/// become restarts: on ticketing at 256 clients 4,853 txn/s against
/// 20,628 with the detector, on TPC-C (one warehouse, new-order and
/// payment pipelined) at 128 clients 1,775 against 4,237
/// (docs/results/callas.md, "How busy the cores were").
pub fn default_deadlock_policy(protocol: &str) -> brine_lock::DeadlockPolicy {
    match protocol {
        "salt" | "salt-nolocal" | "callas" => brine_lock::DeadlockPolicy::Detect,
        _ => brine_lock::DeadlockPolicy::WaitDie,
    }
}

/// The protocol for a name given on the command line.
pub fn protocol_by_name(name: &str) -> Result<std::sync::Arc<dyn Protocol>, Error> {
    match name {
        "acid" => Ok(std::sync::Arc::new(Acid)),
        "raw" => Ok(std::sync::Arc::new(Raw)),
        "salt" | "salt-nolocal" => Ok(std::sync::Arc::new(Salt {
            options: SaltOptions {
                local_commit: name == "salt",
            },
        })),
        // No groups: every procedure in the default group. A cluster gets
        // its grouping from `protocol_with_grouping`.
        "callas" => Ok(std::sync::Arc::new(Callas {
            grouping: Grouping::default(),
        })),
        other => Err(Error::Config(format!(
            "unknown protocol `{other}` (available: acid, salt, salt-nolocal, callas, raw)"
        ))),
    }
}

/// The protocol for `name`, with Callas' grouping (`None`: every one of
/// `procedures` in one 2PL group), checked against the procedures.
pub fn protocol_with_grouping<'a>(
    name: &str,
    grouping: Option<&Grouping>,
    procedures: impl IntoIterator<Item = &'a str>,
) -> Result<std::sync::Arc<dyn Protocol>, Error> {
    if name != "callas" {
        if grouping.is_some() {
            return Err(Error::Config(format!(
                "a grouping is for protocol `callas`, not `{name}`"
            )));
        }
        return protocol_by_name(name);
    }
    let grouping = match grouping {
        Some(g) => {
            let g = g.clone();
            g.validate(procedures)?;
            g
        }
        None => Grouping::one_group(procedures),
    };
    Ok(std::sync::Arc::new(Callas { grouping }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_holds_every_lock_for_one_statement_only() -> Result<(), Error> {
        for isolation in [Isolation::ReadCommitted, Isolation::Serializable] {
            let raw = protocol_by_name("raw")?.lock_spec(isolation);
            assert!(raw.short_reads && raw.short_writes, "{isolation}: {raw:?}");
            let acid = protocol_by_name("acid")?.lock_spec(isolation);
            assert!(!acid.short_writes, "{isolation}: {acid:?}");
        }
        assert!(protocol_by_name("raw")?.salt().is_none());
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
}
