//! YCSB-style key-value traffic, mixed native and transactional (seed 003
//! section 5): each client's operations split independently into gets and
//! puts (`--read-ratio`, rho) and into native single operations and
//! transactional ones (`--native-ratio`, nu); transactional operations come
//! in transactions of sizes uniform in 1..n (`--txn-size`, U_n), each over
//! distinct keys. Keys are drawn from a scrambled zipfian distribution
//! (YCSB's, theta 0.99: a few hot keys spread over the partitions) or
//! uniformly (`--distribution`).
//!
//! ```text
//!  usertable(k INT PK, v INT), partitioned by k
//!  get(k)                       native get:  SELECT v FROM usertable WHERE k = $k
//!  put(k, v)                    native put:  UPDATE usertable SET v = $v WHERE k = $k
//!  txn(op1, k1, v1, ...)        1..n of them in one transaction (op 0: get, 1: put)
//! ```
//!
//! `get` and `put` are declared native (`ProcedureDef::native`): Mediator
//! serves them natively; under a protocol without native operations
//! (`acid`, Salt, Callas, Mediator's baseline `omid`) each is a
//! one-statement transaction of its own, the sources' "transactified"
//! traffic.
//!
//! Invariant (`--check`): no row is lost or added (puts only overwrite).
//! The per-procedure latencies in the report are the native and the
//! transactional latencies apart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::{load_rows, read_scalar};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const GET: &str = "get";
pub const PUT: &str = "put";
pub const TXN: &str = "txn";
pub const TXN_RO: &str = "txn_ro";

pub const DEFAULT_KEYS: u64 = 100_000;
pub const MAX_KEYS: u64 = 50_000_000;
pub const DEFAULT_READ_RATIO: f64 = 0.5;
pub const DEFAULT_NATIVE_RATIO: f64 = 0.5;
pub const DEFAULT_TXN_SIZE: u32 = 4;
pub const MAX_TXN_SIZE: u32 = 100;

/// YCSB's zipfian constant.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDistribution {
    Uniform,
    /// Scrambled zipfian with this theta.
    Zipfian(f64),
}

impl KeyDistribution {
    pub fn parse(s: &str) -> Result<KeyDistribution> {
        match s {
            "uniform" => Ok(KeyDistribution::Uniform),
            "zipfian" => Ok(KeyDistribution::Zipfian(ZIPFIAN_THETA)),
            other => Err(BenchError::Config(format!(
                "--distribution: `{other}` (expected zipfian or uniform)"
            ))),
        }
    }

    fn label(self) -> &'static str {
        match self {
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipfian(_) => "zipfian",
        }
    }
}

/// Draws ranks `0..n` with P(rank i) proportional to 1 / (i+1)^theta
/// (Gray et al., "Quickly generating billion-record synthetic databases",
/// as YCSB's ZipfianGenerator does), in constant time per draw after an
/// O(n) setup.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    pub fn new(n: u64, theta: f64) -> Zipfian {
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipfian {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// FNV-1a over the rank's bytes: scrambles ranks so the hot ones are not
/// neighbours (and not all on one partition), as YCSB's scrambled zipfian.
fn scramble(rank: u64, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rank.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % n
}

/// The operations committed in the run, by kind.
#[derive(Debug, Default)]
struct Counts {
    native_gets: AtomicU64,
    native_puts: AtomicU64,
    txn_gets: AtomicU64,
    txn_puts: AtomicU64,
    txns: AtomicU64,
}

impl Counts {
    /// A new run starts counting from zero.
    fn reset(&self) {
        for c in [
            &self.native_gets,
            &self.native_puts,
            &self.txn_gets,
            &self.txn_puts,
            &self.txns,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

pub struct Ycsb {
    keys: u64,
    distribution: KeyDistribution,
    read_ratio: f64,
    native_ratio: f64,
    txn_size: u32,
    zipf: Option<Arc<Zipfian>>,
    counts: Arc<Counts>,
}

impl Ycsb {
    pub fn new(
        keys: u64,
        distribution: KeyDistribution,
        read_ratio: f64,
        native_ratio: f64,
        txn_size: u32,
    ) -> Result<Ycsb> {
        if !(1..=MAX_KEYS).contains(&keys) {
            return Err(BenchError::Config(format!("--keys: 1 to {MAX_KEYS}")));
        }
        for (name, r) in [
            ("--read-ratio", read_ratio),
            ("--native-ratio", native_ratio),
        ] {
            if !(0.0..=1.0).contains(&r) {
                return Err(BenchError::Config(format!("{name}: {r} is not in 0..1")));
            }
        }
        if !(1..=MAX_TXN_SIZE).contains(&txn_size) {
            return Err(BenchError::Config(format!(
                "--txn-size: 1 to {MAX_TXN_SIZE}"
            )));
        }
        if u64::from(txn_size) > keys {
            return Err(BenchError::Config(format!(
                "--txn-size {txn_size} needs at least as many --keys (a transaction's keys are distinct)"
            )));
        }
        let zipf = match distribution {
            KeyDistribution::Zipfian(theta) => Some(Arc::new(Zipfian::new(keys, theta))),
            KeyDistribution::Uniform => None,
        };
        Ok(Ycsb {
            keys,
            distribution,
            read_ratio,
            native_ratio,
            txn_size,
            zipf,
            counts: Arc::new(Counts::default()),
        })
    }

    /// The probability that a request is a native operation, so that the
    /// share of native operations among all operations is `native_ratio`
    /// (a transaction carries (1 + n) / 2 operations on average).
    fn native_call_probability(&self) -> f64 {
        let nu = self.native_ratio;
        let size = (1.0 + f64::from(self.txn_size)) / 2.0;
        if nu >= 1.0 {
            return 1.0;
        }
        nu * size / (1.0 - nu + nu * size)
    }
}

impl Workload for Ycsb {
    fn name(&self) -> &'static str {
        "ycsb"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("keys".into(), json!(self.keys));
        m.insert("distribution".into(), json!(self.distribution.label()));
        m.insert("read_ratio".into(), json!(self.read_ratio));
        m.insert("native_ratio".into(), json!(self.native_ratio));
        m.insert("txn_size".into(), json!(format!("U{}", self.txn_size)));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let q = self.native_call_probability();
        vec![
            (GET, q * self.read_ratio),
            (PUT, q * (1.0 - self.read_ratio)),
            (TXN, 1.0 - q),
        ]
    }

    fn application(&self) -> Application {
        Application {
            name: "ycsb".into(),
            ddl: DDL.into(),
            procedures: vec![get_proc(), put_proc(), txn_proc(), txn_ro_proc()],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.counts.reset();
            load_rows(cluster, "usertable", self.keys, |i| {
                vec![Value::Int(i as i64), Value::Int(0)]
            })
            .await
        })
    }

    /// Puts only overwrite values: the rows an earlier run left are the
    /// rows this one reads and writes, and the check counts them.
    fn reuse<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.counts.reset();
            Ok(())
        })
    }

    fn client(&self, _index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(YcsbClient {
            rng,
            keys: self.keys,
            zipf: self.zipf.clone(),
            read_ratio: self.read_ratio,
            native: self.native_call_probability(),
            txn_size: self.txn_size,
            counts: self.counts.clone(),
            last: Vec::new(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let n = read_scalar(cluster, "SELECT COUNT(*) FROM usertable").await?;
            if n.as_int() == Some(self.keys as i64) {
                Ok(())
            } else {
                Err(BenchError::Invariant(format!(
                    "ycsb: {n} rows after the run, {} loaded (puts only overwrite)",
                    self.keys
                )))
            }
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let c = &self.counts;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ops =
            load(&c.native_gets) + load(&c.native_puts) + load(&c.txn_gets) + load(&c.txn_puts);
        let calls = load(&c.native_gets) + load(&c.native_puts) + load(&c.txns);
        let mut m = Map::new();
        m.insert("native_gets".into(), json!(load(&c.native_gets)));
        m.insert("native_puts".into(), json!(load(&c.native_puts)));
        m.insert("txn_gets".into(), json!(load(&c.txn_gets)));
        m.insert("txn_puts".into(), json!(load(&c.txn_puts)));
        m.insert("operations".into(), json!(ops));
        // Operations per second = calls per second x this.
        let per_call = if calls == 0 {
            0.0
        } else {
            ops as f64 / calls as f64
        };
        m.insert("operations_per_call".into(), json!(per_call));
        m
    }
}

const DDL: &str =
    "CREATE TABLE usertable (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);";

fn get_proc() -> ProcedureDef {
    ProcedureDef::new(GET)
        .native()
        .statement("get", "SELECT v FROM usertable WHERE k = $k")
        .body(|mut ctx, args| async move {
            let r = ctx.exec("get", args).await?;
            Ok(r.rows.into_iter().next().unwrap_or_default())
        })
}

fn put_proc() -> ProcedureDef {
    ProcedureDef::new(PUT)
        .native()
        .statement("put", "UPDATE usertable SET v = $v WHERE k = $k")
        .body(|mut ctx, args| async move {
            let r = ctx.exec("put", args).await?;
            if r.affected != 1 {
                return Err(Error::Internal(format!(
                    "ycsb: a put touched {} rows",
                    r.affected
                )));
            }
            Ok(vec![])
        })
}

/// `txn_ro(k, ...)`: a transaction of gets only, declared so (a
/// procedure whose statements all read: under `mediator-ser` it reads a
/// snapshot and commits without validation).
fn txn_ro_proc() -> ProcedureDef {
    ProcedureDef::new(TXN_RO)
        .statement("get", "SELECT v FROM usertable WHERE k = $k")
        .body(|mut ctx, args| async move {
            let mut out = Vec::new();
            for k in args {
                let r = ctx.exec("get", vec![k]).await?;
                out.extend(r.rows.into_iter().next().unwrap_or_default());
            }
            Ok(out)
        })
}

/// `txn(op, k, v, ...)`: the operations in order; gets return their values.
fn txn_proc() -> ProcedureDef {
    ProcedureDef::new(TXN)
        .statement("get", "SELECT v FROM usertable WHERE k = $k")
        .statement("put", "UPDATE usertable SET v = $v WHERE k = $k")
        .body(|mut ctx, args| async move {
            if args.is_empty() || args.len() % 3 != 0 {
                return Err(Error::Arity {
                    what: format!("procedure `{TXN}` (triples of op, key, value)"),
                    expected: 3,
                    got: args.len(),
                });
            }
            let mut out = Vec::new();
            for op in args.chunks(3) {
                let (kind, k, v) = (&op[0], op[1].clone(), op[2].clone());
                if kind.as_int() == Some(0) {
                    let r = ctx.exec("get", vec![k]).await?;
                    out.extend(r.rows.into_iter().next().unwrap_or_default());
                } else {
                    ctx.exec("put", vec![v, k]).await?;
                }
            }
            Ok(out)
        })
}

struct YcsbClient {
    rng: SmallRng,
    keys: u64,
    zipf: Option<Arc<Zipfian>>,
    read_ratio: f64,
    native: f64,
    txn_size: u32,
    counts: Arc<Counts>,
    /// The last transaction's gets and puts, counted when it commits.
    last: Vec<bool>,
}

impl YcsbClient {
    fn key(&mut self) -> u64 {
        match &self.zipf {
            Some(z) => scramble(z.next(&mut self.rng), self.keys),
            None => self.rng.gen_range(0..self.keys),
        }
    }
}

impl ClientGen for YcsbClient {
    fn next(&mut self) -> TxnRequest {
        if self.rng.gen_bool(self.native) {
            let k = Value::Int(self.key() as i64);
            return if self.rng.gen_bool(self.read_ratio) {
                TxnRequest {
                    procedure: GET,
                    args: vec![k],
                }
            } else {
                let v = Value::Int(self.rng.gen_range(0..1_000_000));
                TxnRequest {
                    procedure: PUT,
                    args: vec![v, k],
                }
            };
        }
        let size = self.rng.gen_range(1..=self.txn_size) as usize;
        let mut keys: Vec<u64> = Vec::with_capacity(size);
        while keys.len() < size {
            let k = self.key();
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        self.last.clear();
        let mut args = Vec::with_capacity(3 * size);
        for k in keys {
            let read = self.rng.gen_bool(self.read_ratio);
            self.last.push(read);
            args.push(Value::Int(i64::from(!read)));
            args.push(Value::Int(k as i64));
            args.push(Value::Int(self.rng.gen_range(0..1_000_000)));
        }
        if self.last.iter().all(|&read| read) {
            let keys = args.chunks(3).map(|op| op[1].clone()).collect();
            return TxnRequest {
                procedure: TXN_RO,
                args: keys,
            };
        }
        TxnRequest {
            procedure: TXN,
            args,
        }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if outcome.is_err() {
            return;
        }
        let c = &self.counts;
        match procedure {
            GET => c.native_gets.fetch_add(1, Ordering::Relaxed),
            PUT => c.native_puts.fetch_add(1, Ordering::Relaxed),
            _ => {
                let gets = self.last.iter().filter(|&&r| r).count() as u64;
                c.txn_gets.fetch_add(gets, Ordering::Relaxed);
                c.txn_puts
                    .fetch_add(self.last.len() as u64 - gets, Ordering::Relaxed);
                c.txns.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipfian_ranks_are_skewed_and_in_range() {
        let z = Zipfian::new(1_000, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u32; 1_000];
        for _ in 0..100_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // P(rank 0) = 1 / zeta(1000, 0.99), about 13%; the top 10 ranks
        // take over a third, the bottom half a small share.
        assert!((10_000..16_000).contains(&counts[0]), "{}", counts[0]);
        let top: u32 = counts[..10].iter().sum();
        let bottom: u32 = counts[500..].iter().sum();
        assert!(top > 33_000 && bottom < 12_000, "top {top} bottom {bottom}");
    }

    #[test]
    fn the_native_share_of_operations_is_the_ratio_asked_for() -> Result<()> {
        for (nu, n) in [(0.0, 4), (0.25, 4), (0.5, 20), (0.75, 4), (1.0, 20)] {
            let w = Ycsb::new(10_000, KeyDistribution::Uniform, 0.5, nu, n)?;
            let mut c = w.client(0, SmallRng::seed_from_u64(1));
            let (mut native, mut total, mut reads) = (0u64, 0u64, 0u64);
            for _ in 0..20_000 {
                let r = c.next();
                match r.procedure {
                    GET | PUT => {
                        native += 1;
                        total += 1;
                        reads += u64::from(r.procedure == GET);
                    }
                    TXN_RO => {
                        let ops = r.args.len() as u64;
                        assert!((1..=u64::from(n)).contains(&ops));
                        let keys: std::collections::HashSet<_> = r.args.iter().cloned().collect();
                        assert_eq!(keys.len() as u64, ops, "distinct keys");
                        reads += ops;
                        total += ops;
                    }
                    _ => {
                        let ops = r.args.len() as u64 / 3;
                        assert!((1..=u64::from(n)).contains(&ops));
                        let keys: std::collections::HashSet<_> =
                            r.args.chunks(3).map(|op| op[1].clone()).collect();
                        assert_eq!(keys.len() as u64, ops, "distinct keys");
                        let puts = r.args.chunks(3).filter(|op| op[0].as_int() == Some(1));
                        assert!(puts.count() > 0, "all-get transactions are `txn_ro`");
                        reads += r
                            .args
                            .chunks(3)
                            .filter(|op| op[0].as_int() == Some(0))
                            .count() as u64;
                        total += ops;
                    }
                }
            }
            let share = native as f64 / total as f64;
            assert!((share - nu).abs() < 0.02, "nu {nu} U{n}: {share}");
            let read_share = reads as f64 / total as f64;
            assert!((read_share - 0.5).abs() < 0.02, "reads {read_share}");
        }
        Ok(())
    }

    #[test]
    fn bad_parameters_are_refused() {
        let u = KeyDistribution::Uniform;
        assert!(Ycsb::new(0, u, 0.5, 0.5, 4).is_err());
        assert!(Ycsb::new(100, u, 1.5, 0.5, 4).is_err());
        assert!(Ycsb::new(100, u, 0.5, -0.1, 4).is_err());
        assert!(Ycsb::new(100, u, 0.5, 0.5, 0).is_err());
        assert!(Ycsb::new(3, u, 0.5, 0.5, 4).is_err());
        assert!(KeyDistribution::parse("gaussian").is_err());
    }
}
