//! Workloads made for the isolation checker: small, hot, and varied, so
//! that a protocol that breaks isolation produces an anomaly quickly.
//!
//! ```text
//!  register:     reg(k INT PK, v INT)               K keys (default 8)
//!    read_only   2-4 point reads                              (30%)
//!    read_write  2-4 ops, each a read or a write of a unique v (55%)
//!    range_read  a range read over a window of keys, then
//!                a write of one key (predicate dependencies)  (15%)
//!
//!  list-append:  la(k INT, e INT, PK (k, e))        K lists (default 8)
//!    append_read 2-4 ops, each an append of a unique element e
//!                to list k (INSERT) or a read of list k         (80%)
//!    read_only   2-3 list reads                                 (20%)
//! ```
//!
//! A list stays short: after [`MAX_LIST_LEN`] appends have been issued to
//! one of the K list slots, the slot moves on to a fresh key (`slot +
//! K * generation`), as Jepsen's list-append does. Long lists would make
//! every read a large predicate read and the checker's anti-dependency
//! edges grow with the square of the list length.
//!
//! A transaction is one procedure call whose arguments encode its
//! operations as triples `(kind, key, value)`, so the checker sees many
//! different shapes from three procedures. Written values and appended
//! elements are unique in the run (`client << 32 | counter`). Keys are
//! drawn uniformly; every table is partitioned by key, so a transaction
//! usually spans several partitions and commits with 2PC; the range read
//! (`k BETWEEN lo AND hi`) broadcasts.
//!
//! Run with `--history FILE` and check with `brine check FILE`. `--check`
//! verifies what needs no history: for list-append, that every committed
//! append is in the table and no aborted one is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster, ProcCtx, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::{load_rows, read_scalar};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const DEFAULT_KEYS: u64 = 8;
pub const MAX_KEYS: u64 = 1_000_000;
/// Keys a range read covers.
const RANGE_WIDTH: i64 = 3;

/// Appends issued to one list key before its slot moves to a fresh key.
pub const MAX_LIST_LEN: u64 = 64;

const READ: i64 = 0;
const WRITE: i64 = 1;
const RANGE: i64 = 2;

/// Runs a transaction's encoded operations: `(kind, key, value)` triples.
/// `read`, `write` and `range` name the procedure's statements for each
/// kind (`range` takes `(lo, hi)`); reads' results are returned in order.
async fn run_ops(
    ctx: &mut ProcCtx,
    args: &[Value],
    what: &str,
    stmts: [&str; 3],
) -> brine_core::Result<Vec<Value>> {
    if !args.len().is_multiple_of(3) || args.is_empty() {
        return Err(Error::Arity {
            what: format!("procedure `{what}` (kind, key, value triples)"),
            expected: 3,
            got: args.len(),
        });
    }
    let mut out = Vec::new();
    for op in args.chunks(3) {
        let (kind, key, value) = (op[0].as_int(), op[1].clone(), op[2].clone());
        match kind {
            Some(READ) => {
                let r = ctx.exec(stmts[0], vec![key]).await?;
                out.push(Value::Int(r.rows.len() as i64));
            }
            Some(WRITE) => {
                ctx.exec(stmts[1], vec![key, value]).await?;
            }
            Some(RANGE) => {
                let r = ctx.exec(stmts[2], vec![key, value]).await?;
                out.push(Value::Int(r.rows.len() as i64));
            }
            _ => {
                return Err(Error::type_mismatch(
                    "operation kind (0 read, 1 write, 2 range)",
                    "INT 0..=2",
                    op[0].kind(),
                ))
            }
        }
    }
    Ok(out)
}

fn check_keys(keys: u64) -> Result<()> {
    if !(2..=MAX_KEYS).contains(&keys) {
        return Err(BenchError::Config(format!(
            "--keys must be between 2 and {MAX_KEYS}"
        )));
    }
    Ok(())
}

/// A value unique in the run: the client in the high half, a counter in
/// the low half.
fn unique(client: u32, counter: &mut u32) -> Value {
    *counter += 1;
    Value::Int((i64::from(client) << 32) | i64::from(*counter))
}

fn op(kind: i64, key: i64, value: Value) -> [Value; 3] {
    [Value::Int(kind), Value::Int(key), value]
}

// ---------------------------------------------------------------- register

const REG_READ_ONLY: &str = "read_only";
const REG_READ_WRITE: &str = "read_write";
const REG_RANGE: &str = "range_read";

/// Randomized registers: few hot keys, unique written values.
pub struct Register {
    keys: u64,
}

impl Register {
    pub fn new(keys: u64) -> Result<Register> {
        check_keys(keys)?;
        Ok(Register { keys })
    }
}

impl Workload for Register {
    fn name(&self) -> &'static str {
        "register"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("keys".into(), json!(self.keys));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![
            (REG_READ_ONLY, 0.30),
            (REG_READ_WRITE, 0.55),
            (REG_RANGE, 0.15),
        ]
    }

    fn application(&self) -> Application {
        let stmts = |p: ProcedureDef| {
            p.statement("r", "SELECT v FROM reg WHERE k = $k")
                .statement("w", "UPDATE reg SET v = $v WHERE k = $k")
                .statement("rr", "SELECT k, v FROM reg WHERE k >= $lo AND k <= $hi")
        };
        // `w` binds (v, k) in order of first appearance: reorder the pair.
        let body = |name: &'static str| {
            move |mut ctx: ProcCtx, args: Vec<Value>| async move {
                let args = swap_write_args(args);
                run_ops(&mut ctx, &args, name, ["r", "w", "rr"]).await
            }
        };
        Application {
            name: "register".into(),
            ddl: "CREATE TABLE reg (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);"
                .into(),
            procedures: vec![
                stmts(ProcedureDef::new(REG_READ_ONLY)).body(body(REG_READ_ONLY)),
                stmts(ProcedureDef::new(REG_READ_WRITE)).body(body(REG_READ_WRITE)),
                stmts(ProcedureDef::new(REG_RANGE)).body(body(REG_RANGE)),
            ],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(load_rows(cluster, "reg", self.keys, |i| {
            vec![Value::Int(i as i64), Value::Int(0)]
        }))
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(RegisterClient {
            rng,
            keys: self.keys as i64,
            client: index,
            counter: 0,
        })
    }
}

/// Write triples carry `(key, value)`; the statement's parameters are
/// `(v, k)`.
fn swap_write_args(mut args: Vec<Value>) -> Vec<Value> {
    for op in args.chunks_mut(3) {
        if op[0].as_int() == Some(WRITE) {
            op.swap(1, 2);
        }
    }
    args
}

struct RegisterClient {
    rng: SmallRng,
    keys: i64,
    client: u32,
    counter: u32,
}

impl ClientGen for RegisterClient {
    fn next(&mut self) -> TxnRequest {
        let roll = self.rng.gen_range(0..100);
        let n = self.rng.gen_range(2..=4);
        let mut args = Vec::with_capacity(12);
        let procedure = if roll < 30 {
            for _ in 0..n {
                args.extend(op(READ, self.rng.gen_range(0..self.keys), Value::Null));
            }
            REG_READ_ONLY
        } else if roll < 85 {
            for _ in 0..n {
                let k = self.rng.gen_range(0..self.keys);
                if self.rng.gen_bool(0.5) {
                    args.extend(op(READ, k, Value::Null));
                } else {
                    // The statement binds (v, k): swapped back in the body.
                    args.extend(op(WRITE, k, unique(self.client, &mut self.counter)));
                }
            }
            REG_READ_WRITE
        } else {
            let lo = self.rng.gen_range(0..self.keys);
            args.extend(op(RANGE, lo, Value::Int(lo + RANGE_WIDTH - 1)));
            let k = self.rng.gen_range(0..self.keys);
            args.extend(op(WRITE, k, unique(self.client, &mut self.counter)));
            REG_RANGE
        };
        TxnRequest { procedure, args }
    }
}

// ------------------------------------------------------------- list-append

const LA_APPEND_READ: &str = "append_read";
const LA_READ_ONLY: &str = "read_only";

/// Lists of unique elements: an append inserts `(k, e)`, a read scans
/// `k`'s rows.
pub struct ListAppend {
    keys: u64,
    appends_committed: Arc<AtomicU64>,
    slots: Arc<Slots>,
}

/// Appends issued per list slot, shared by the clients: the slot's
/// current key is `slot + K * (issued / MAX_LIST_LEN)`.
struct Slots(Vec<AtomicU64>);

impl Slots {
    fn new(keys: u64) -> Slots {
        Slots((0..keys).map(|_| AtomicU64::new(0)).collect())
    }

    fn key(&self, slot: usize, issued: u64) -> i64 {
        (slot as u64 + self.0.len() as u64 * (issued / MAX_LIST_LEN)) as i64
    }

    /// The key a read of `slot` reads now.
    fn read_key(&self, slot: usize) -> i64 {
        self.key(slot, self.0[slot].load(Ordering::Relaxed))
    }

    /// The key an append to `slot` goes to, counting the append.
    fn append_key(&self, slot: usize) -> i64 {
        self.key(slot, self.0[slot].fetch_add(1, Ordering::Relaxed))
    }

    fn reset(&self) {
        for n in &self.0 {
            n.store(0, Ordering::Relaxed);
        }
    }
}

impl ListAppend {
    pub fn new(keys: u64) -> Result<ListAppend> {
        check_keys(keys)?;
        Ok(ListAppend {
            keys,
            appends_committed: Arc::new(AtomicU64::new(0)),
            slots: Arc::new(Slots::new(keys)),
        })
    }
}

impl Workload for ListAppend {
    fn name(&self) -> &'static str {
        "list-append"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("keys".into(), json!(self.keys));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![(LA_APPEND_READ, 0.8), (LA_READ_ONLY, 0.2)]
    }

    fn application(&self) -> Application {
        let stmts = |p: ProcedureDef| {
            p.statement("r", "SELECT e FROM la WHERE k = $k")
                .statement("a", "INSERT INTO la (k, e) VALUES ($k, $e)")
                // Unused: list-append has no range reads over several lists.
                .statement("rr", "SELECT e FROM la WHERE k >= $lo AND k <= $hi")
        };
        let body = |name: &'static str| {
            move |mut ctx: ProcCtx, args: Vec<Value>| async move {
                run_ops(&mut ctx, &args, name, ["r", "a", "rr"]).await
            }
        };
        Application {
            name: "list-append".into(),
            ddl: "CREATE TABLE la (k INT, e INT, PRIMARY KEY (k, e)) PARTITION BY (k);".into(),
            procedures: vec![
                stmts(ProcedureDef::new(LA_APPEND_READ)).body(body(LA_APPEND_READ)),
                stmts(ProcedureDef::new(LA_READ_ONLY)).body(body(LA_READ_ONLY)),
            ],
        }
    }

    fn load<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        // Lists start empty.
        self.appends_committed.store(0, Ordering::Relaxed);
        self.slots.reset();
        Box::pin(async { Ok(()) })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(ListAppendClient {
            rng,
            slots: self.slots.clone(),
            client: index,
            counter: 0,
            pending_appends: 0,
            appends_committed: self.appends_committed.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let expected = self.appends_committed.load(Ordering::Relaxed);
            let rows = read_scalar(cluster, "SELECT COUNT(*) FROM la").await?;
            if rows.as_int() == Some(expected as i64) {
                Ok(())
            } else {
                Err(BenchError::Invariant(format!(
                    "list-append: {expected} appends committed, but the table holds {rows} elements"
                )))
            }
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            "appends_committed_total".into(),
            json!(self.appends_committed.load(Ordering::Relaxed)),
        );
        m
    }
}

struct ListAppendClient {
    rng: SmallRng,
    slots: Arc<Slots>,
    client: u32,
    counter: u32,
    /// Appends in the call just issued, counted when it commits.
    pending_appends: u64,
    appends_committed: Arc<AtomicU64>,
}

impl ClientGen for ListAppendClient {
    fn next(&mut self) -> TxnRequest {
        let mut args = Vec::with_capacity(12);
        self.pending_appends = 0;
        let slots = self.slots.0.len();
        let procedure = if self.rng.gen_range(0..100) < 80 {
            for _ in 0..self.rng.gen_range(2..=4) {
                let slot = self.rng.gen_range(0..slots);
                if self.rng.gen_bool(0.5) {
                    args.extend(op(READ, self.slots.read_key(slot), Value::Null));
                } else {
                    self.pending_appends += 1;
                    let k = self.slots.append_key(slot);
                    args.extend(op(WRITE, k, unique(self.client, &mut self.counter)));
                }
            }
            LA_APPEND_READ
        } else {
            for _ in 0..self.rng.gen_range(2..=3) {
                let slot = self.rng.gen_range(0..slots);
                args.extend(op(READ, self.slots.read_key(slot), Value::Null));
            }
            LA_READ_ONLY
        };
        TxnRequest { procedure, args }
    }

    fn observe(&mut self, _procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if outcome.is_ok() {
            self.appends_committed
                .fetch_add(self.pending_appends, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ops(r: &TxnRequest) -> Vec<(i64, i64)> {
        r.args
            .chunks(3)
            .map(|o| (o[0].as_int().unwrap(), o[1].as_int().unwrap()))
            .collect()
    }

    #[test]
    fn register_requests_use_every_shape_and_stay_in_range() {
        let w = Register::new(8).unwrap();
        let mut c = w.client(3, SmallRng::seed_from_u64(1));
        let mut shapes = std::collections::HashSet::new();
        let mut written = std::collections::HashSet::new();
        for _ in 0..500 {
            let r = c.next();
            shapes.insert(r.procedure);
            for (i, (kind, key)) in ops(&r).into_iter().enumerate() {
                assert!((0..8).contains(&key));
                if kind == WRITE {
                    assert!(
                        written.insert(r.args[i * 3 + 2].clone()),
                        "values are unique"
                    );
                }
            }
        }
        assert_eq!(shapes.len(), 3);
    }

    #[test]
    fn list_append_rotates_a_full_list_to_a_fresh_key() {
        let w = ListAppend::new(4).unwrap();
        let mut clients = [
            w.client(0, SmallRng::seed_from_u64(1)),
            w.client(1, SmallRng::seed_from_u64(2)),
        ];
        let mut per_key = std::collections::HashMap::<i64, u64>::new();
        for i in 0..4_000 {
            let r = clients[i % 2].next();
            for (kind, key) in ops(&r) {
                if kind == WRITE {
                    *per_key.entry(key).or_default() += 1;
                }
            }
        }
        assert!(per_key.len() > 4, "slots moved on to fresh keys");
        assert!(per_key.values().all(|&n| n <= MAX_LIST_LEN));
        // A read goes to its slot's current list (or the one just
        // before, if an append in the same call filled it).
        for _ in 0..50 {
            let r = clients[0].next();
            for (kind, key) in ops(&r) {
                let slot = (key % 4) as usize;
                let now = w.slots.0[slot].load(Ordering::Relaxed) / MAX_LIST_LEN;
                let generation = key as u64 / 4;
                assert!(kind == WRITE || generation == now || generation + 1 == now);
            }
        }
    }

    #[test]
    fn malformed_operation_lists_are_refused() {
        assert_eq!(
            swap_write_args(vec![Value::Int(WRITE), Value::Int(1), Value::Int(9)]),
            vec![Value::Int(WRITE), Value::Int(9), Value::Int(1)]
        );
        assert!(Register::new(1).is_err());
        assert!(ListAppend::new(MAX_KEYS + 1).is_err());
    }
}
