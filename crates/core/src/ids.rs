//! Identifiers that travel in messages.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A transaction attempt. Ids are unique per cluster run. `ts` orders
/// transactions by age for wait-die: a smaller `ts` is older. A retried
/// transaction gets a fresh `id` but keeps its original `ts`, so it ages and
/// cannot starve.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TxnId {
    pub ts: u64,
    pub id: u64,
}

impl fmt::Debug for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}@{}", self.id, self.ts)
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A node (a process in a real deployment; a set of tasks in the embedded
/// cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// A partition: a single-threaded owner of a disjoint slice of every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionId(pub u32);
