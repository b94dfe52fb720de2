//! Salt microbenchmark 3 (seed 000 section 3.6.3, seed 001 section 7):
//! "each transaction either reads five rows or writes five rows, randomly
//! chosen from a collection of 100 rows. We tune the percentage of
//! read-only transactions".
//!
//! ```text
//!  micro(id INT PK, v INT), partitioned by id (id mod P), --rows (100)
//!  read5(id1..id5):    5 x  SELECT v FROM micro WHERE id = $id
//!  write5(id1..id5):   5 x  UPDATE micro SET v = v + 1 WHERE id = $id
//!  a call is read5 with probability --read-only-percent, else write5;
//!  five distinct rows, uniform, in the drawn order
//! ```
//!
//! BASE version: every statement is its own single-statement alkaline
//! subtransaction (no blocks), as in micro 1. Which procedures are BASE is
//! `--base` (default `read5,write5`). The sources BASE-ify the read-only
//! transactions too: the reads are what costs Salt here ("increasing reads
//! increases the overhead introduced by Salt over traditional ACID systems,
//! since Salt must log read operations"), and they report that Salt stays
//! ahead "even when 95% of the transactions are read-only". `--base write5`
//! keeps the readers ACID instead (then they wait for the writers' saline
//! locks until each BASE writer ends), for comparison.
//!
//! Invariant (`--check`): SUM(v) = 5 x the committed write5 calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::base::BaseSet;
use super::micro::{check_sum, load_table, update_rows, DDL};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

/// Rows each transaction reads or writes.
pub const ROWS_PER_TXN: usize = 5;
/// The sources' table size.
pub const DEFAULT_ROWS: u64 = 100;
pub const MAX_ROWS: u64 = 100_000_000;
/// Default share of read-only transactions, in percent.
pub const DEFAULT_READ_ONLY_PERCENT: u32 = 50;

pub const READ: &str = "read5";
pub const WRITE: &str = "write5";
/// Procedures `--base` may name.
pub const PROCEDURES: [&str; 2] = [READ, WRITE];

pub struct Micro3 {
    rows: u64,
    read_only_percent: u32,
    base: BaseSet,
    writes_committed: Arc<AtomicU64>,
}

impl Micro3 {
    pub fn new(rows: u64, read_only_percent: u32) -> Result<Micro3> {
        if !(ROWS_PER_TXN as u64..=MAX_ROWS).contains(&rows) {
            return Err(BenchError::Config(format!(
                "--rows must be between {ROWS_PER_TXN} and {MAX_ROWS}: each transaction touches {ROWS_PER_TXN} distinct rows"
            )));
        }
        if read_only_percent > 100 {
            return Err(BenchError::Config(
                "--read-only-percent must be between 0 and 100".into(),
            ));
        }
        Ok(Micro3 {
            rows,
            read_only_percent,
            base: BaseSet::of(&PROCEDURES),
            writes_committed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Which procedures are BASE (default: both, as in the sources).
    pub fn with_base(mut self, base: BaseSet) -> Micro3 {
        self.base = base;
        self
    }
}

/// `read5(id1..id5)`: reads the rows, returns their values.
fn read_rows() -> ProcedureDef {
    ProcedureDef::new(READ)
        .statement("get", "SELECT v FROM micro WHERE id = $id")
        .body(|mut ctx, args| async move {
            if args.len() != ROWS_PER_TXN {
                return Err(Error::Arity {
                    what: format!("procedure `{READ}`"),
                    expected: ROWS_PER_TXN,
                    got: args.len(),
                });
            }
            let mut out = Vec::with_capacity(args.len());
            for id in args {
                let r = ctx.exec("get", vec![id.clone()]).await?;
                let v = r
                    .scalar()
                    .cloned()
                    .ok_or_else(|| Error::Internal(format!("micro3: row {id} not found")))?;
                out.push(v);
            }
            Ok(out)
        })
}

impl Workload for Micro3 {
    fn name(&self) -> &'static str {
        "micro3"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("rows".into(), json!(self.rows));
        m.insert("read_only_percent".into(), json!(self.read_only_percent));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let r = f64::from(self.read_only_percent) / 100.0;
        vec![(READ, r), (WRITE, 1.0 - r)]
    }

    fn application(&self) -> Application {
        Application {
            name: "micro3".into(),
            ddl: DDL.into(),
            procedures: vec![
                self.base.apply(read_rows()),
                self.base.apply(update_rows(WRITE, ROWS_PER_TXN)),
            ],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.writes_committed.store(0, Ordering::Relaxed);
            load_table(cluster, self.rows).await
        })
    }

    fn client(&self, _index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(Micro3Client {
            rng,
            rows: self.rows as usize,
            read_only_percent: self.read_only_percent,
            writes_committed: self.writes_committed.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let writes = self.writes_committed.load(Ordering::Relaxed);
            check_sum(
                cluster,
                writes.saturating_mul(ROWS_PER_TXN as u64),
                &format!("micro3 ({writes} committed {WRITE} calls)"),
            )
            .await
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            "writes_committed".into(),
            json!(self.writes_committed.load(Ordering::Relaxed)),
        );
        m
    }
}

struct Micro3Client {
    rng: SmallRng,
    rows: usize,
    read_only_percent: u32,
    writes_committed: Arc<AtomicU64>,
}

impl ClientGen for Micro3Client {
    fn next(&mut self) -> TxnRequest {
        let procedure = if self.rng.gen_range(0..100) < self.read_only_percent {
            READ
        } else {
            WRITE
        };
        let ids = rand::seq::index::sample(&mut self.rng, self.rows, ROWS_PER_TXN);
        TxnRequest {
            procedure,
            args: ids.into_iter().map(|i| Value::Int(i as i64)).collect(),
        }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if procedure == WRITE && outcome.is_ok() {
            self.writes_committed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    #[test]
    fn read_only_share_and_five_distinct_rows() -> Result<()> {
        for (pct, lo, hi) in [(0, 0, 0), (95, 900, 990), (100, 1000, 1000)] {
            let w = Micro3::new(DEFAULT_ROWS, pct)?;
            let mut c = w.client(0, SmallRng::seed_from_u64(5));
            let mut reads = 0;
            for _ in 0..1000 {
                let r = c.next();
                if r.procedure == READ {
                    reads += 1;
                }
                let ids: BTreeSet<i64> = r.args.iter().filter_map(Value::as_int).collect();
                assert_eq!(ids.len(), ROWS_PER_TXN);
                assert!(ids.iter().all(|&i| (0..DEFAULT_ROWS as i64).contains(&i)));
            }
            assert!((lo..=hi).contains(&reads), "{pct}%: {reads} reads");
        }
        Ok(())
    }

    #[test]
    fn base_defaults_to_both_procedures() -> Result<()> {
        let w = Micro3::new(DEFAULT_ROWS, 50)?;
        assert!(w.application().procedures.iter().all(|p| p.base));
        let w = w.with_base(BaseSet::of(&[WRITE]));
        let app = w.application();
        let base: Vec<&str> = app
            .procedures
            .iter()
            .filter(|p| p.base)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(base, vec![WRITE]);
        Ok(())
    }

    #[test]
    fn rejects_bad_options() {
        assert!(Micro3::new(4, 50).is_err());
        assert!(Micro3::new(100, 101).is_err());
    }
}
