//! Callas' rollback microbenchmark (seed 000 section 4.6.6): tables A, B
//! and C of ten rows; each transaction checks and updates row i of A, of B
//! and of C, then updates five rows private to its client. The check on C
//! rolls the transaction back in `--rollback-percent` of the calls, after
//! A and B were updated: under Runtime Pipelining those updates were
//! already visible to the group, so the rollback cascades, and past a
//! rollback rate the adaptive safe mode switches to the rollback-safe
//! chopping (which moves everything up to the check on C into the first
//! piece).
//!
//! The schema, statements and analysis notes are the analysis crate's
//! (`brine_analysis::workloads::rollback_micro`), so `brine analyze` and
//! the runtime see the same procedure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_analysis::workloads::rollback_micro;
use brine_cluster::{Application, CallOutcome, Cluster, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::load_rows;
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const PROC: &str = rollback_micro::PROC;
/// Rows of A, B and C.
pub const SHARED_ROWS: u64 = 10;
/// Private rows per table (clients beyond it share rows, modulo).
pub const PRIVATE_ROWS: u64 = 4096;
pub const DEFAULT_ROLLBACK_PERCENT: u32 = 0;
const ROLLED_BACK: &str = "rolled back by the check on C";

pub struct Rollback {
    percent: u32,
    rolled_back: Arc<AtomicU64>,
}

impl Rollback {
    pub fn new(percent: u32) -> Result<Rollback> {
        if percent > 100 {
            return Err(BenchError::Config("--rollback-percent: at most 100".into()));
        }
        Ok(Rollback {
            percent,
            rolled_back: Arc::new(AtomicU64::new(0)),
        })
    }
}

impl Workload for Rollback {
    fn name(&self) -> &'static str {
        "rollback"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("rollback_percent".into(), json!(self.percent));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![(PROC, 1.0)]
    }

    fn application(&self) -> Application {
        let source = rollback_micro::source();
        let mut def = ProcedureDef::new(PROC);
        for (name, sql) in source.statements {
            def = def.statement(name, sql);
        }
        Application {
            name: rollback_micro::APP.into(),
            ddl: rollback_micro::DDL.into(),
            procedures: vec![def.body(|mut ctx, args| async move {
                // Arguments: row i, client, roll back (0/1), value.
                if args.len() != 4 {
                    return Err(Error::Arity {
                        what: format!("procedure `{PROC}(i, client, rollback, value)`"),
                        expected: 4,
                        got: args.len(),
                    });
                }
                let (i, client, v) = (args[0].clone(), args[1].clone(), args[3].clone());
                for t in ["a", "b", "c"] {
                    ctx.exec(&format!("check_{t}"), vec![i.clone()]).await?;
                    if t == "c" && args[2] == Value::Int(1) {
                        return Err(ctx.abort(ROLLED_BACK));
                    }
                    ctx.exec(&format!("update_{t}"), vec![v.clone(), i.clone()])
                        .await?;
                }
                for k in 1..=5 {
                    ctx.exec(&format!("private_{k}"), vec![v.clone(), client.clone()])
                        .await?;
                }
                Ok(vec![])
            })],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.rolled_back.store(0, Ordering::Relaxed);
            for t in ["a", "b", "c"] {
                load_rows(cluster, t, SHARED_ROWS, |i| {
                    vec![Value::Int(i as i64), Value::Int(0)]
                })
                .await?;
            }
            for k in 1..=5 {
                load_rows(cluster, &format!("p{k}"), PRIVATE_ROWS, |i| {
                    vec![Value::Int(i as i64), Value::Int(0)]
                })
                .await?;
            }
            Ok(())
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(RollbackClient {
            rng,
            client: i64::from(index) % PRIVATE_ROWS as i64,
            percent: self.percent,
            rolled_back: self.rolled_back.clone(),
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            "rolled_back".into(),
            json!(self.rolled_back.load(Ordering::Relaxed)),
        );
        m
    }
}

struct RollbackClient {
    rng: SmallRng,
    client: i64,
    percent: u32,
    rolled_back: Arc<AtomicU64>,
}

impl ClientGen for RollbackClient {
    fn next(&mut self) -> TxnRequest {
        let i = self.rng.gen_range(0..SHARED_ROWS as i64);
        let roll = self.rng.gen_range(0..100u32) < self.percent;
        TxnRequest {
            procedure: PROC,
            args: vec![
                Value::Int(i),
                Value::Int(self.client),
                Value::Int(i64::from(roll)),
                Value::Int(self.rng.gen_range(0..1_000_000)),
            ],
        }
    }

    fn observe(&mut self, _procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if matches!(outcome, Err(Error::UserAbort(m)) if m == ROLLED_BACK) {
            self.rolled_back.fetch_add(1, Ordering::Relaxed);
        }
    }
}
