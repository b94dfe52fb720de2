//! Salt microbenchmark 1 (seed 000 section 3.6, seed 001 section 7): each
//! transaction updates five distinct rows chosen uniformly at random from a
//! table of N rows. N sets the contention: with C clients each holding five
//! write locks, a transaction meets a held lock with probability about
//! 25 C / N, so contention rises as N falls (`--rows 10,100,1000,...`).
//!
//! ```text
//!  micro(id INT PK, v INT), partitioned by id (id mod P)
//!  update5(id1..id5):  5 x  UPDATE micro SET v = v + 1 WHERE id = $id
//!                       (in the drawn order: one statement per row)
//! ```
//!
//! BASE version (`--base update5`, the default): "BASE transactions that
//! consist of five alkaline subtransactions - one for each update" (seed
//! 000 section 3.6.3). The body has no explicit block: each statement
//! outside a block is its own single-statement alkaline subtransaction,
//! which the local-transaction optimization (`salt`, not `salt-nolocal`)
//! commits at its partition. The first update is the acceptance; nothing
//! after it can fail but a bug. Under `acid` the body is one transaction.
//!
//! With P partitions a transaction is single-partition only with
//! probability about P^-4, so nearly every one runs two-phase commit. The
//! updates run in the drawn (random) order, not sorted, so transactions can
//! deadlock as in the source; the deadlock policy resolves it.
//!
//! Invariant (`--check`): the sum of `v` equals 5 x the committed calls
//! (every committed call applied all five increments exactly once; aborted
//! attempts applied none).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster, ProcedureDef};
use brine_core::{Decimal, Error, Value};
use rand::rngs::SmallRng;
use serde_json::{json, Map, Value as Json};

use super::base::BaseSet;
use super::{decimal_cmp, load_rows, read_scalar};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

/// Rows updated by each transaction.
pub const UPDATES_PER_TXN: usize = 5;
/// Default table size: moderate contention with tens of clients, and a load
/// of well under a second even in a debug build.
pub const DEFAULT_ROWS: u64 = 10_000;
/// Largest table accepted (memory: a few hundred bytes per row).
pub const MAX_ROWS: u64 = 100_000_000;

pub const PROC: &str = "update5";
/// Procedures `--base` may name.
pub const PROCEDURES: [&str; 1] = [PROC];

pub struct Micro {
    rows: u64,
    base: BaseSet,
    committed: Arc<AtomicU64>,
}

impl Micro {
    pub fn new(rows: u64) -> Result<Micro> {
        if rows < UPDATES_PER_TXN as u64 {
            return Err(BenchError::Config(format!(
                "--rows must be at least {UPDATES_PER_TXN}: each transaction updates {UPDATES_PER_TXN} distinct rows"
            )));
        }
        if rows > MAX_ROWS {
            return Err(BenchError::Config(format!("--rows: at most {MAX_ROWS}")));
        }
        Ok(Micro {
            rows,
            base: BaseSet::of(&PROCEDURES),
            committed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Which procedures are BASE (default: `update5`, as in the source).
    pub fn with_base(mut self, base: BaseSet) -> Micro {
        self.base = base;
        self
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }
}

impl Workload for Micro {
    fn name(&self) -> &'static str {
        "micro"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("rows".into(), json!(self.rows));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![(PROC, 1.0)]
    }

    fn application(&self) -> Application {
        Application {
            name: "micro".into(),
            ddl: DDL.into(),
            procedures: vec![self.base.apply(update_rows(PROC, UPDATES_PER_TXN))],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.committed.store(0, Ordering::Relaxed);
            load_table(cluster, self.rows).await
        })
    }

    fn client(&self, _index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(MicroClient {
            rng,
            rows: self.rows as usize,
            committed: self.committed.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let committed = self.committed.load(Ordering::Relaxed);
            let expected = committed.saturating_mul(UPDATES_PER_TXN as u64);
            check_sum(
                cluster,
                expected,
                &format!("micro ({committed} calls of {UPDATES_PER_TXN} increments)"),
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

/// The table of the three Salt microbenchmarks.
pub(crate) const DDL: &str =
    "CREATE TABLE micro (id INT, v INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);";

/// A procedure `name(id1..idn)` that adds 1 to `v` of each row, in the
/// order given, one statement per row and no alkaline block: under Salt
/// each update is a single-statement alkaline subtransaction.
pub(crate) fn update_rows(name: &'static str, n: usize) -> ProcedureDef {
    ProcedureDef::new(name)
        .statement("bump", "UPDATE micro SET v = v + $d WHERE id = $id")
        .body(move |mut ctx, args| async move {
            if args.len() != n {
                return Err(Error::Arity {
                    what: format!("procedure `{name}`"),
                    expected: n,
                    got: args.len(),
                });
            }
            for id in args {
                let r = ctx.exec("bump", vec![Value::Int(1), id.clone()]).await?;
                if r.affected != 1 {
                    return Err(Error::Internal(format!(
                        "micro: updating row {id} touched {} rows",
                        r.affected
                    )));
                }
            }
            Ok(vec![])
        })
}

/// Loads rows `0..rows` of the micro table with `v = 0`.
pub(crate) async fn load_table(cluster: &Cluster, rows: u64) -> Result<()> {
    load_rows(cluster, "micro", rows, |i| {
        vec![Value::Int(i as i64), Value::Int(0)]
    })
    .await
}

/// Checks `SUM(v) = expected` (every committed call applied each of its
/// increments exactly once; aborted calls none).
pub(crate) async fn check_sum(cluster: &Cluster, expected: u64, what: &str) -> Result<()> {
    let sum = read_scalar(cluster, "SELECT SUM(v) FROM micro").await?;
    let ok = match sum.as_decimal() {
        Some(d) => {
            decimal_cmp(d, Decimal::new(expected as i64, 0)) == Some(std::cmp::Ordering::Equal)
        }
        None => expected == 0 && sum.is_null(),
    };
    if ok {
        Ok(())
    } else {
        Err(BenchError::Invariant(format!(
            "{what}: SUM(v) = {sum}, but the committed calls make {expected}"
        )))
    }
}

struct MicroClient {
    rng: SmallRng,
    rows: usize,
    committed: Arc<AtomicU64>,
}

impl ClientGen for MicroClient {
    fn next(&mut self) -> TxnRequest {
        let ids = rand::seq::index::sample(&mut self.rng, self.rows, UPDATES_PER_TXN);
        TxnRequest {
            procedure: PROC,
            args: ids.into_iter().map(|i| Value::Int(i as i64)).collect(),
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
    use std::collections::BTreeSet;

    #[test]
    fn picks_five_distinct_rows_in_range() -> Result<()> {
        let w = Micro::new(5)?;
        let mut c = w.client(0, SmallRng::seed_from_u64(3));
        for _ in 0..100 {
            let r = c.next();
            assert_eq!(r.procedure, PROC);
            let ids: BTreeSet<i64> = r.args.iter().filter_map(Value::as_int).collect();
            assert_eq!(ids.len(), 5);
            assert!(ids.iter().all(|&i| (0..5).contains(&i)));
        }
        Ok(())
    }

    #[test]
    fn rejects_too_few_rows() {
        assert!(Micro::new(4).is_err());
        assert!(Micro::new(MAX_ROWS + 1).is_err());
    }
}
