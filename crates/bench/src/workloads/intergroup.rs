//! Callas' inter-group microbenchmark (seed 000 section 4.6, TARGETS
//! "inter-group" rows): two transaction types meant for two groups.
//!
//! - `pipelined`: checks and updates row i of A, then of B, then of C (ten
//!   rows each: contended), then one row private to its client. Runtime
//!   Pipelining's case: in a group of its own it overlaps with itself.
//! - `other`: updates one row of D (10,000 rows: no contention among
//!   themselves) and, in `--conflict-bp` basis points of its calls (1 bp =
//!   0.01%), also row i of A: only then does it conflict with the other
//!   group, through the nexus locks.
//!
//! `--ratio N` runs N `pipelined` calls per `other` call. Run it under
//! `--compare acid,callas --grouping "p:rp=pipelined;o:2pl=other"`: the
//! sources' shape is a large gain when `other` is rare or rarely conflicts,
//! a smaller one when it is frequent and always conflicts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, Cluster, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::load_rows;
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const PIPELINED: &str = "pipelined";
pub const OTHER: &str = "other";
pub const HOT_ROWS: u64 = 10;
pub const D_ROWS: u64 = 10_000;
pub const PRIVATE_ROWS: u64 = 4096;
pub const MAX_RATIO: u64 = 1_000_000;
pub const DEFAULT_RATIO: u64 = 1;
pub const DEFAULT_CONFLICT_BP: u64 = 10_000;

const DDL: &str = "
CREATE TABLE a (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE b (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE c (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE d (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p (client INT PRIMARY KEY, val INT NOT NULL);
";

pub struct InterGroup {
    ratio: u64,
    conflict_bp: u64,
    conflicting: Arc<AtomicU64>,
}

impl InterGroup {
    pub fn new(ratio: u64, conflict_bp: u64) -> Result<InterGroup> {
        if ratio == 0 || ratio > MAX_RATIO {
            return Err(BenchError::Config(format!(
                "--ratio must be between 1 and {MAX_RATIO}"
            )));
        }
        if conflict_bp > 10_000 {
            return Err(BenchError::Config(
                "--conflict-bp: at most 10000 (every call)".into(),
            ));
        }
        Ok(InterGroup {
            ratio,
            conflict_bp,
            conflicting: Arc::new(AtomicU64::new(0)),
        })
    }
}

fn arity(name: &str, args: &[Value], n: usize) -> brine_core::Result<()> {
    if args.len() == n {
        return Ok(());
    }
    Err(Error::Arity {
        what: format!("procedure `{name}`"),
        expected: n,
        got: args.len(),
    })
}

impl Workload for InterGroup {
    fn name(&self) -> &'static str {
        "intergroup"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("ratio".into(), json!(self.ratio));
        m.insert("conflict_bp".into(), json!(self.conflict_bp));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let n = self.ratio as f64;
        vec![(PIPELINED, n / (n + 1.0)), (OTHER, 1.0 / (n + 1.0))]
    }

    fn application(&self) -> Application {
        let mut pipelined = ProcedureDef::new(PIPELINED);
        for t in ["a", "b", "c"] {
            pipelined = pipelined
                .statement(
                    format!("check_{t}"),
                    format!("SELECT val FROM {t} WHERE id = $i"),
                )
                .statement(
                    format!("update_{t}"),
                    format!("UPDATE {t} SET val = $v WHERE id = $i"),
                );
        }
        let pipelined = pipelined
            .statement("private", "UPDATE p SET val = $v WHERE client = $c")
            .body(|mut ctx, args| async move {
                // Arguments: row i, client, value.
                arity(PIPELINED, &args, 3)?;
                let (i, c, v) = (args[0].clone(), args[1].clone(), args[2].clone());
                for t in ["a", "b", "c"] {
                    ctx.exec(&format!("check_{t}"), vec![i.clone()]).await?;
                    ctx.exec(&format!("update_{t}"), vec![v.clone(), i.clone()])
                        .await?;
                }
                ctx.exec("private", vec![v, c]).await?;
                Ok(vec![])
            });
        let other = ProcedureDef::new(OTHER)
            .statement("update_d", "UPDATE d SET val = $v WHERE id = $j")
            .statement("update_a", "UPDATE a SET val = $v WHERE id = $i")
            .body(|mut ctx, args| async move {
                // Arguments: row j of D, row i of A or NULL, value.
                arity(OTHER, &args, 3)?;
                ctx.exec("update_d", vec![args[2].clone(), args[0].clone()])
                    .await?;
                if args[1] != Value::Null {
                    ctx.exec("update_a", vec![args[2].clone(), args[1].clone()])
                        .await?;
                }
                Ok(vec![])
            });
        Application {
            name: "intergroup".into(),
            ddl: DDL.into(),
            procedures: vec![pipelined, other],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.conflicting.store(0, Ordering::Relaxed);
            let row = |i: u64| vec![Value::Int(i as i64), Value::Int(0)];
            for t in ["a", "b", "c"] {
                load_rows(cluster, t, HOT_ROWS, row).await?;
            }
            load_rows(cluster, "d", D_ROWS, row).await?;
            load_rows(cluster, "p", PRIVATE_ROWS, row).await
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(InterGroupClient {
            rng,
            client: i64::from(index) % PRIVATE_ROWS as i64,
            ratio: self.ratio,
            conflict_bp: self.conflict_bp,
            conflicting: self.conflicting.clone(),
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            // Issued over the whole run, warm-up included.
            "conflicting_other_calls".into(),
            json!(self.conflicting.load(Ordering::Relaxed)),
        );
        m
    }
}

struct InterGroupClient {
    rng: SmallRng,
    client: i64,
    ratio: u64,
    conflict_bp: u64,
    conflicting: Arc<AtomicU64>,
}

impl ClientGen for InterGroupClient {
    fn next(&mut self) -> TxnRequest {
        let v = Value::Int(self.rng.gen_range(0..1_000_000));
        let i = Value::Int(self.rng.gen_range(0..HOT_ROWS as i64));
        if self.rng.gen_range(0..=self.ratio) < self.ratio {
            return TxnRequest {
                procedure: PIPELINED,
                args: vec![i, Value::Int(self.client), v],
            };
        }
        let j = Value::Int(self.rng.gen_range(0..D_ROWS as i64));
        let conflicts = self.rng.gen_range(0..10_000) < self.conflict_bp;
        if conflicts {
            self.conflicting.fetch_add(1, Ordering::Relaxed);
        }
        TxnRequest {
            procedure: OTHER,
            args: vec![j, if conflicts { i } else { Value::Null }, v],
        }
    }
}
