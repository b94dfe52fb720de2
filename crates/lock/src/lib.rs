//! brine's lock table: one per partition, shared by every lock-based
//! protocol (ACID 2PL, Salt, Callas).
//!
//! # What it guarantees
//!
//! - **Safety.** A lock is granted to a transaction only if its mode is
//!   compatible (per the pluggable [`Compatibility`]) with every lock another
//!   transaction holds on an overlapping target. Targets overlap when they
//!   are in the same (table, index) and: two points have equal keys; a point
//!   lies in a range; two ranges intersect. Range locks therefore give
//!   phantom protection to serializable range scans. A transaction's own
//!   locks never conflict with each other; it may hold several modes on one
//!   target (e.g. ACID read then write), and the table keeps them exactly.
//! - **Fairness (FIFO).** A fresh request is granted only if it is also
//!   compatible with every request queued ahead of it on an overlapping
//!   target. A stream of compatible readers, or of BASE requests, therefore
//!   cannot overtake a waiting writer or a waiting ACID request. The one
//!   exception is an *upgrade*: a request of a transaction that already
//!   holds a lock on an overlapping target queues ahead of fresh requests
//!   (behind earlier upgrades), since making it wait behind requests that
//!   wait for it would be a certain deadlock. The detector makes the same
//!   call at run time: when a deadlock cycle runs through a request that
//!   conflicts with no holder (it waits only because FIFO queued it behind
//!   a request that, in turn, waits for it, through holders and
//!   release-order dependencies), that request is granted ahead of the
//!   queue instead of aborting anyone ([`LockStats::queue_bypasses`]). The
//!   request it passes loses nothing: it could not have been granted
//!   before the bypassing one progressed.
//! - **Liveness.** Whenever a lock goes away (release, downgrade, a waiter
//!   cancelled or aborted), every waiter on an overlapping target that is no
//!   longer blocked is granted, in queue order, and reported as a [`Wakeup`].
//!   A transaction that can no longer roll back (an accepted Salt BASE
//!   transaction, a chopped Callas transaction whose first writing piece
//!   committed) is marked with [`LockTable::protect`]: every policy then
//!   ranks it above the others, so it is never the victim while a
//!   transaction that can roll back stands in the way.
//!   A *gated* request ([`LockTable::acquire_gated`], Salt's ACID statements
//!   across partitions) keeps its place in the queue but is granted only
//!   after [`LockTable::ungate`]; protected transactions pass it, fresh
//!   requests wait behind it, and its readiness is reported through
//!   [`LockTable::take_gate_changes`] (rules and reasons: `docs/salt.md`).
//!   Deadlocks are resolved by the configured [`DeadlockPolicy`] (wait-die,
//!   or a wait-for-graph detector that breaks a cycle by a queue bypass
//!   where one exists, else aborts the youngest waiting transaction of the
//!   cycle), and by [`LockTable::expire`], the wait timeout that is the
//!   backstop for cycles spanning partitions. Every victim is counted by
//!   cause in [`LockStats`]. One search visits at most [`MAX_SEARCH`]
//!   transactions: past that it gives up ([`LockStats::searches_cut`]) and
//!   the cycle, if there is one, is left to the cluster's detector, which
//!   reads [`LockTable::wait_for_graph`] (only the waits begun by the
//!   moment its look began) and breaks cycles through several partitions
//!   with [`LockTable::break_deadlock`]; [`LockTable::wait_for_changes`]
//!   tells the partition when to ring it. Without the bound, under
//!   heavy contention (ticketing at 256 clients) the searches made at every
//!   wait took most of a partition's time and throughput collapsed.
//! - **Bounds.** Queues per target and release-order dependencies per
//!   transaction are bounded; hitting a bound is an `Error::Bound`, never a
//!   hang.
//!
//! # When locks outlive requests
//!
//! A lock lives until its transaction releases it ([`LockTable::release`]
//! for one short lock, [`LockTable::release_all`] at the transaction's end),
//! and possibly longer: a *release-order dependency*
//! ([`LockTable::add_release_dependency`]) says "this lock cannot be released
//! before that transaction releases that lock" (Salt's saline rules, Callas'
//! nexus release order). A release held back by a dependency is performed
//! when the dependency is released; `release_all` then answers
//! [`ReleaseOutcome::Deferred`] and a later [`Wakeup::Released`] says the
//! transaction holds nothing any more. A downgrade (alkaline to saline) keeps
//! the lock but changes its class, which may admit waiters.
//!
//! Salt releases a BASE transaction's locks in stages, each after the one
//! before it went (the write-after-read rule, kept by the coordinator).
//! [`LockTable::begin_staged_release`] tells the table, so the detector
//! knows that every lock of such a transaction now waits for all its
//! release-order dependencies, and that the transaction itself waits for
//! them: chains of dependencies through staged transactions are edges of
//! the wait-for graph.
//!
//! # Request flow
//!
//! ```text
//!   acquire(txn, target, mode)
//!        |
//!        v
//!   covered by a lock txn already holds? --yes--> Granted{newly: false}
//!        | no
//!        v
//!   conflicting holder, or conflicting ---no---> Granted{newly: true}
//!   request queued ahead?
//!        | yes
//!        v
//!   policy: wait-die and an older (or protected) blocker? --yes--> Abort(WaitDie)
//!        | no
//!        v
//!   queue full? --yes--> Err(Bound)
//!        | no
//!        v
//!   enqueue (upgrades before fresh requests) -> Waiting(ticket)
//!        |                       |
//!        |  detect: cycle?       |  later: release / release_all /
//!        |  youngest dies        |  downgrade / cancel / expire
//!        v                       v
//!   Abort(Deadlock) or      regrant overlapping waiters in queue order
//!   Wakeup::Aborted{victim} ---> Wakeup::Granted{txn, ticket}
//! ```
//!
//! The table is a plain `&mut self` structure with no synchronization and no
//! async: the partition that owns it is a single-threaded actor. It never
//! blocks; operations that affect other transactions append [`Wakeup`]s to a
//! caller-provided vector, which the partition turns into messages.

mod table;

pub use table::compat::{Compatibility, LockClass, Mode, StandardCompat};
pub use table::{
    Acquire, DeadlockPolicy, GateOpens, LockConfig, LockStats, LockTable, ReleaseOutcome, Ticket,
    Wakeup, MAX_SEARCH,
};
