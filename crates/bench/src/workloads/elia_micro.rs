//! Elia's microbenchmark (seed 004 section 7.3): operations of a fixed
//! execution time, a given share of them local, the rest global.
//!
//! ```text
//!  item(k, site, v)    k = site + servers * j: owned by server `site`
//!  global(g, v)        100 rows every server reads
//!
//!  local_op(k, g, ms)   read global g; v += 1 on item k; hold ms   L by k
//!  global_op(g, ms)     v += 1 on global g; hold ms                 G
//!  items_at(site)       sum of v over the items of `site`           L by site
//!  globals_at(site)     sum of v over the global rows, at `site`    L by site
//! ```
//!
//! Client `i` sits at site `i mod servers` and draws a local operation on
//! an item of its own site with probability `--local-percent`, a global
//! one otherwise; an operation holds its locks for `--op-ms` (the seed's
//! 5 ms "execution time"). The routes are the workload's own (given to
//! `elia` unless `--elia-routes` says otherwise): a local operation reads
//! the global rows a global one writes, so under any partitioning the
//! global one is read by other servers' operations (global), while the
//! local one only reads from them and writes its own server's items
//! (local).
//!
//! `--check`: the items of each site add up to the local operations its
//! clients committed, and every server's replica of the global rows adds
//! up to every global operation committed (the token carried each one
//! everywhere).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brine_cluster::protocols::elia::{Class, Routes};
use brine_cluster::{Application, CallOutcome, Cluster, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::load_rows;
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const LOCAL_OP: &str = "local_op";
pub const GLOBAL_OP: &str = "global_op";
pub const ITEMS_AT: &str = "items_at";
pub const GLOBALS_AT: &str = "globals_at";
pub const DEFAULT_LOCAL_PERCENT: u32 = 70;
pub const DEFAULT_OP_MS: u64 = 5;
/// Items per site.
const ITEMS_PER_SITE: i64 = 1_000;
/// Global rows.
const GLOBALS: i64 = 100;

const DDL: &str = "
CREATE TABLE item (k INT, site INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k));
CREATE INDEX item_by_site ON item (site, k);
CREATE TABLE global (g INT, v INT NOT NULL, PRIMARY KEY (g));
";

pub struct EliaMicro {
    local_percent: u32,
    op_ms: u64,
    /// The cluster's servers, learned at load.
    servers: Arc<AtomicU32>,
    /// Local operations committed by the clients of each site.
    local_commits: Arc<Vec<AtomicU64>>,
    global_commits: Arc<AtomicU64>,
}

/// The most servers the workload keeps counters for.
const MAX_SERVERS: usize = 64;

impl EliaMicro {
    pub fn new(local_percent: u32, op_ms: u64) -> Result<EliaMicro> {
        if local_percent > 100 {
            return Err(BenchError::Config("--local-percent: at most 100".into()));
        }
        if op_ms > 10_000 {
            return Err(BenchError::Config("--op-ms: at most 10000".into()));
        }
        Ok(EliaMicro {
            local_percent,
            op_ms,
            servers: Arc::new(AtomicU32::new(1)),
            local_commits: Arc::new((0..MAX_SERVERS).map(|_| AtomicU64::new(0)).collect()),
            global_commits: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The workload's routes (`elia`).
    pub fn routes() -> Routes {
        Routes::new()
            .with(LOCAL_OP, Class::Local, &[0])
            .with(GLOBAL_OP, Class::Global, &[])
            .with(ITEMS_AT, Class::Local, &[0])
            .with(GLOBALS_AT, Class::Local, &[0])
    }
}

fn hold(ms: &Value) -> Duration {
    Duration::from_millis(ms.as_int().unwrap_or(0).clamp(0, 10_000) as u64)
}

fn sum_of(q: &brine_cluster::QueryResult) -> i64 {
    q.rows
        .iter()
        .filter_map(|r| r.first().and_then(Value::as_int))
        .sum()
}

fn procedures() -> Vec<ProcedureDef> {
    vec![
        ProcedureDef::new(LOCAL_OP)
            .statement("read_global", "SELECT v FROM global WHERE g = $g")
            .statement("bump", "UPDATE item SET v = v + 1 WHERE k = $k")
            .body(|mut ctx, args| async move {
                let [k, g, ms] = <[Value; 3]>::try_from(args).map_err(|a| Error::Arity {
                    what: format!("procedure `{LOCAL_OP}(k, g, ms)`"),
                    expected: 3,
                    got: a.len(),
                })?;
                ctx.exec("read_global", vec![g]).await?;
                let u = ctx.exec("bump", vec![k.clone()]).await?;
                if u.affected != 1 {
                    return Err(Error::Internal(format!("elia-micro: no item {k}")));
                }
                tokio::time::sleep(hold(&ms)).await;
                Ok(vec![])
            }),
        ProcedureDef::new(GLOBAL_OP)
            .statement("bump", "UPDATE global SET v = v + 1 WHERE g = $g")
            .body(|mut ctx, args| async move {
                let [g, ms] = <[Value; 2]>::try_from(args).map_err(|a| Error::Arity {
                    what: format!("procedure `{GLOBAL_OP}(g, ms)`"),
                    expected: 2,
                    got: a.len(),
                })?;
                ctx.exec("bump", vec![g]).await?;
                tokio::time::sleep(hold(&ms)).await;
                Ok(vec![])
            }),
        ProcedureDef::new(ITEMS_AT)
            .statement("items", "SELECT v FROM item WHERE site = $s")
            .body(|mut ctx, args| async move {
                let q = ctx.exec("items", args).await?;
                Ok(vec![Value::Int(sum_of(&q))])
            }),
        // The site argument routes it; the scan reads every global row.
        ProcedureDef::new(GLOBALS_AT)
            .statement("globals", "SELECT v FROM global WHERE g >= $lo")
            .body(|mut ctx, _args| async move {
                let q = ctx.exec("globals", vec![Value::Int(0)]).await?;
                Ok(vec![Value::Int(sum_of(&q))])
            }),
    ]
}

impl Workload for EliaMicro {
    fn name(&self) -> &'static str {
        "elia-micro"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("local_percent".into(), json!(self.local_percent));
        m.insert("op_ms".into(), json!(self.op_ms));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let l = f64::from(self.local_percent) / 100.0;
        vec![(LOCAL_OP, l), (GLOBAL_OP, 1.0 - l)]
    }

    fn application(&self) -> Application {
        Application {
            name: "elia-micro".into(),
            ddl: DDL.into(),
            procedures: procedures(),
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let servers = cluster.config().nodes.max(1);
            if servers as usize > MAX_SERVERS {
                return Err(BenchError::Config(format!(
                    "elia-micro: at most {MAX_SERVERS} servers (nodes), not {servers}"
                )));
            }
            self.servers.store(servers, Ordering::Relaxed);
            for c in self.local_commits.iter() {
                c.store(0, Ordering::Relaxed);
            }
            self.global_commits.store(0, Ordering::Relaxed);
            let n = u64::from(servers) * ITEMS_PER_SITE as u64;
            load_rows(cluster, "item", n, |k| {
                let k = k as i64;
                vec![
                    Value::Int(k),
                    Value::Int(k % i64::from(servers)),
                    Value::Int(0),
                ]
            })
            .await?;
            load_rows(cluster, "global", GLOBALS as u64, |g| {
                vec![Value::Int(g as i64), Value::Int(0)]
            })
            .await
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        let servers = self.servers.load(Ordering::Relaxed).max(1);
        Box::new(MicroClient {
            rng,
            site: i64::from(index % servers),
            servers: i64::from(servers),
            local_percent: self.local_percent,
            op_ms: self.op_ms as i64,
            local_commits: self.local_commits.clone(),
            global_commits: self.global_commits.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let servers = self.servers.load(Ordering::Relaxed);
            let client = cluster.client();
            let call = |proc: &'static str, site: u32| {
                let client = client.clone();
                async move {
                    client
                        .call(proc, vec![Value::Int(i64::from(site))])
                        .await
                        .ok()
                        .and_then(|o| o.values.first().and_then(Value::as_int))
                        .ok_or_else(|| BenchError::Invariant(format!("{proc}({site}) failed")))
                }
            };
            let globals = self.global_commits.load(Ordering::Relaxed) as i64;
            for site in 0..servers {
                let local = self.local_commits[site as usize].load(Ordering::Relaxed) as i64;
                let items = call(ITEMS_AT, site).await?;
                if items != local {
                    return Err(BenchError::Invariant(format!(
                        "site {site}: its items add up to {items}, its clients committed \
                         {local} local operations"
                    )));
                }
                let seen = call(GLOBALS_AT, site).await?;
                if seen != globals {
                    return Err(BenchError::Invariant(format!(
                        "server {site}'s replica counts {seen} global operations, \
                         {globals} committed"
                    )));
                }
            }
            Ok(())
        })
    }

    fn elia_routes(&self) -> Option<Routes> {
        Some(EliaMicro::routes())
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        let servers = self.servers.load(Ordering::Relaxed) as usize;
        let local: u64 = self.local_commits[..servers]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        m.insert("local_commits".into(), json!(local));
        m.insert(
            "global_commits".into(),
            json!(self.global_commits.load(Ordering::Relaxed)),
        );
        m
    }
}

struct MicroClient {
    rng: SmallRng,
    site: i64,
    servers: i64,
    local_percent: u32,
    op_ms: i64,
    local_commits: Arc<Vec<AtomicU64>>,
    global_commits: Arc<AtomicU64>,
}

impl ClientGen for MicroClient {
    fn next(&mut self) -> TxnRequest {
        let g = Value::Int(self.rng.gen_range(0..GLOBALS));
        let ms = Value::Int(self.op_ms);
        if self.rng.gen_range(0..100) < self.local_percent {
            let k = self.site + self.servers * self.rng.gen_range(0..ITEMS_PER_SITE);
            TxnRequest {
                procedure: LOCAL_OP,
                args: vec![Value::Int(k), g, ms],
            }
        } else {
            TxnRequest {
                procedure: GLOBAL_OP,
                args: vec![g, ms],
            }
        }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if outcome.is_ok() {
            match procedure {
                LOCAL_OP => {
                    self.local_commits[self.site as usize].fetch_add(1, Ordering::Relaxed);
                }
                GLOBAL_OP => {
                    self.global_commits.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }
}
