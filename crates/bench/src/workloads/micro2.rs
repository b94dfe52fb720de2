//! Salt microbenchmark 2 (seed 000 section 3.6.3, seed 001 section 7):
//! "each transaction updates ten rows, but only one of those updates
//! contends with other transactions by writing to one row, randomly chosen
//! from a collection of ten shared rows. We tune the number of operations
//! that follow the contending operation within the transaction."
//!
//! ```text
//!  micro(id INT PK, v INT), partitioned by id (id mod P)
//!    ids 0..9      the ten shared (hot) rows
//!    ids 10..      private rows: client slot s owns 10 + 9s .. 10 + 9s + 8
//!  update10(id1..id10):  10 x  UPDATE micro SET v = v + 1 WHERE id = $id
//!    update number --position (1..10) is the hot one (a uniform shared
//!    row); the 9 others are the client's private rows, so they never
//!    contend. 10 - position updates follow the hot one.
//! ```
//!
//! Under `acid` the hot row's write lock is held until commit, through
//! every update that follows it: throughput falls as the hot update moves
//! forward (position 1 is worst). BASE version (`--base update10`, the
//! default): each update is its own single-statement alkaline
//! subtransaction, as in micro 1, so the hot row's alkaline lock lasts one
//! update whatever its position and Salt's throughput should not depend on
//! it (TARGETS.md: "ACID falls as more ops follow the hot one; Salt flat").
//!
//! The private rows make "only one of those updates contends" exact rather
//! than likely: client `i` uses slot `i mod SLOTS`, so up to `SLOTS`
//! clients never share a private row (beyond that, clients `SLOTS` apart
//! share theirs and the other nine updates start to contend too). With one
//! hot row per transaction no two transactions can deadlock.
//!
//! Invariant (`--check`): SUM(v) = 10 x the committed calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster};
use brine_core::Value;
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::base::BaseSet;
use super::micro::{check_sum, load_table, update_rows, DDL};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

/// Rows updated by each transaction.
pub const UPDATES_PER_TXN: usize = 10;
/// The shared rows the hot update draws from.
pub const HOT_ROWS: u64 = 10;
/// Private-row slots: clients up to this many never share a private row.
pub const SLOTS: u64 = 10_000;
/// Default position of the hot update: first, so nine updates follow it
/// (ACID's worst case).
pub const DEFAULT_POSITION: u64 = 1;

pub const PROC: &str = "update10";
/// Procedures `--base` may name.
pub const PROCEDURES: [&str; 1] = [PROC];

pub struct Micro2 {
    /// 1-based position of the hot update among the ten.
    position: u64,
    base: BaseSet,
    committed: Arc<AtomicU64>,
}

impl Micro2 {
    pub fn new(position: u64) -> Result<Micro2> {
        if !(1..=UPDATES_PER_TXN as u64).contains(&position) {
            return Err(BenchError::Config(format!(
                "--position must be between 1 and {UPDATES_PER_TXN} (the hot update's place among the {UPDATES_PER_TXN})"
            )));
        }
        Ok(Micro2 {
            position,
            base: BaseSet::of(&PROCEDURES),
            committed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Which procedures are BASE (default: `update10`).
    pub fn with_base(mut self, base: BaseSet) -> Micro2 {
        self.base = base;
        self
    }

    /// Updates that follow the hot one (the x-axis of seed 000 Fig. 3.11).
    pub fn ops_after_hot(&self) -> u64 {
        UPDATES_PER_TXN as u64 - self.position
    }

    fn rows(&self) -> u64 {
        HOT_ROWS + SLOTS * (UPDATES_PER_TXN as u64 - 1)
    }
}

impl Workload for Micro2 {
    fn name(&self) -> &'static str {
        "micro2"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("position".into(), json!(self.position));
        m.insert("ops_after_hot".into(), json!(self.ops_after_hot()));
        m.insert("hot_rows".into(), json!(HOT_ROWS));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![(PROC, 1.0)]
    }

    fn application(&self) -> Application {
        Application {
            name: "micro2".into(),
            ddl: DDL.into(),
            procedures: vec![self.base.apply(update_rows(PROC, UPDATES_PER_TXN))],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.committed.store(0, Ordering::Relaxed);
            load_table(cluster, self.rows()).await
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        let slot = u64::from(index) % SLOTS;
        let first = HOT_ROWS + slot * (UPDATES_PER_TXN as u64 - 1);
        Box::new(Micro2Client {
            rng,
            private: (first..first + UPDATES_PER_TXN as u64 - 1)
                .map(|i| i as i64)
                .collect(),
            hot_index: (self.position - 1) as usize,
            committed: self.committed.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let committed = self.committed.load(Ordering::Relaxed);
            check_sum(
                cluster,
                committed.saturating_mul(UPDATES_PER_TXN as u64),
                &format!("micro2 ({committed} calls of {UPDATES_PER_TXN} increments)"),
            )
            .await
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            "committed_calls_total".into(),
            json!(self.committed.load(Ordering::Relaxed)),
        );
        m
    }
}

struct Micro2Client {
    rng: SmallRng,
    /// The client's nine private rows, in the order they are updated.
    private: Vec<i64>,
    /// 0-based index of the hot update.
    hot_index: usize,
    committed: Arc<AtomicU64>,
}

impl ClientGen for Micro2Client {
    fn next(&mut self) -> TxnRequest {
        let hot = self.rng.gen_range(0..HOT_ROWS) as i64;
        let mut args: Vec<Value> = self.private.iter().map(|&i| Value::Int(i)).collect();
        args.insert(self.hot_index, Value::Int(hot));
        TxnRequest {
            procedure: PROC,
            args,
        }
    }

    fn observe(&mut self, _procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if outcome.is_ok() {
            self.committed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn one_hot_update_at_the_position_and_nine_private_rows() -> Result<()> {
        for position in 1..=10u64 {
            let w = Micro2::new(position)?;
            assert_eq!(w.ops_after_hot(), 10 - position);
            let mut a = w.client(0, SmallRng::seed_from_u64(1));
            let mut b = w.client(1, SmallRng::seed_from_u64(2));
            for _ in 0..50 {
                let ra = a.next();
                let rb = b.next();
                let ids_a: Vec<i64> = ra.args.iter().filter_map(Value::as_int).collect();
                let ids_b: Vec<i64> = rb.args.iter().filter_map(Value::as_int).collect();
                assert_eq!(ids_a.len(), 10);
                let hot: Vec<usize> = (0..10).filter(|&k| ids_a[k] < HOT_ROWS as i64).collect();
                assert_eq!(hot, vec![(position - 1) as usize]);
                // The private rows of two clients never meet.
                let cold_b: Vec<i64> = ids_b
                    .iter()
                    .copied()
                    .filter(|&i| i >= HOT_ROWS as i64)
                    .collect();
                assert!(ids_a
                    .iter()
                    .filter(|&&i| i >= HOT_ROWS as i64)
                    .all(|i| !cold_b.contains(i) && (*i as u64) < w.rows()));
            }
        }
        Ok(())
    }

    #[test]
    fn rejects_positions_outside_the_transaction() {
        assert!(Micro2::new(0).is_err());
        assert!(Micro2::new(11).is_err());
    }
}
