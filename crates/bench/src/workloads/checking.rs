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
//!  list-append:  la(k INT, pos INT, e INT, PK (k, pos, e))   the lists
//!                la_count(s INT PK, n INT, last INT)         K slots (default 8)
//!    append_read 2-4 ops, each an append to slot s or a read of list k (80%)
//!    read_only   2-3 list reads                                     (20%)
//!
//!  append to slot s:  UPDATE la_count SET n = n + 1, last = e WHERE s = s   (exclusive lock first)
//!                     n := SELECT n FROM la_count WHERE s = s
//!                     INSERT INTO la (k, pos, e), k = s + K * ((n-1) / 64), pos = (n-1) % 64
//!  read of list k:    SELECT pos, e FROM la WHERE k = k   (the whole list, in position order)
//! ```
//!
//! **Lists are objects whose appends conflict.** Every append to a slot
//! writes the slot's counter row before anything else, so two appends to
//! one list conflict (2PL serializes them, with no lock upgrade to
//! deadlock on) and the position each takes is the order in which they
//! committed. A read lists the elements by position: the list as the
//! committed state held it. The Elle export (`brine check --export-elle
//! --elle-model list-append`) maps an insert into `la` to `[:append k e]`
//! and a read of the prefix `(k)` to `[:r k [e ...]]`, and leaves the
//! counter out.
//!
//! **Elements are fresh per attempt**: `e = 4 * attempt id + i` for the
//! call's `i`-th append (the coordinator's `TxnId::id`, unique in the run),
//! computed in the body, so a retried call appends new elements and an
//! aborted attempt's elements never appear elsewhere. (A BASE transaction
//! keeps its id while the runtime retries a subtransaction after
//! acceptance; the undone attempt of that subtransaction leaves no
//! record, and the replay appends the same element once.)
//!
//! A list stays short: once a slot's counter passes a multiple of
//! [`MAX_LIST_LEN`], its appends go to a fresh list key (`slot + K *
//! generation`), as Jepsen's list-append rotates keys. Long lists would
//! make every read a large predicate read. Readers pick the list of a slot
//! from the appends issued to it so far (shared by the clients), which is
//! the current list or close to it; any list is a valid read.
//!
//! A transaction is one procedure call whose arguments encode its
//! operations as triples `(kind, key, value)`, so the checker sees many
//! different shapes from three procedures. Written register values are
//! unique in the run (`client << 32 | counter`). Keys are drawn uniformly;
//! every table is partitioned by key, so a transaction usually spans
//! several partitions and commits with 2PC; the range read (`k BETWEEN lo
//! AND hi`) broadcasts.
//!
//! **BASE.** `--base` (default: the multi-key writers, `read_write` and
//! `append_read`; `range_read` may be named too) marks procedures BASE.
//! Under `acid` that changes nothing; under `salt` every operation of a
//! BASE call is an alkaline subtransaction of its own (an append's three
//! statements are one block), so histories recorded under load hold BASE
//! transactions (`class: base`, each op's `sub`) beside ACID readers, and
//! `brine check --level salt` checks Salt isolation on them.
//!
//! Run with `--history FILE` and check with `brine check FILE`. `--check`
//! verifies what needs no history: for list-append, that every committed
//! append is in the table and counted by its slot, and no aborted one is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Application, CallOutcome, Cluster, ProcCtx, ProcedureDef};
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::base::BaseSet;
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

/// Register procedures `--base` may name (the writers).
pub const REGISTER_BASE_CAPABLE: [&str; 2] = [REG_READ_WRITE, REG_RANGE];
/// List-append procedures `--base` may name.
pub const LIST_APPEND_BASE_CAPABLE: [&str; 1] = [LA_APPEND_READ];

/// Randomized registers: few hot keys, unique written values.
pub struct Register {
    keys: u64,
    base: BaseSet,
}

impl Register {
    /// With the default BASE set (`read_write`; it matters only under
    /// `salt`).
    pub fn new(keys: u64) -> Result<Register> {
        check_keys(keys)?;
        Ok(Register {
            keys,
            base: BaseSet::of(&[REG_READ_WRITE]),
        })
    }

    /// The procedures that run as BASE transactions under Salt.
    pub fn with_base(mut self, base: BaseSet) -> Register {
        self.base = base;
        self
    }
}

impl Workload for Register {
    fn name(&self) -> &'static str {
        "register"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("keys".into(), json!(self.keys));
        m.insert("base".into(), json!(self.base.label()));
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
            procedures: [REG_READ_ONLY, REG_READ_WRITE, REG_RANGE]
                .map(|name| {
                    self.base
                        .apply(stmts(ProcedureDef::new(name)).body(body(name)))
                })
                .into(),
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
/// The op kind of an append (to a slot).
const APPEND: i64 = WRITE;

/// Lists of unique elements: an append takes the next position of its
/// slot's counter and inserts `(k, pos, e)`; a read scans list `k`.
pub struct ListAppend {
    keys: u64,
    base: BaseSet,
    appends_committed: Arc<AtomicU64>,
    slots: Arc<Slots>,
}

/// Appends issued per list slot, shared by the clients: the list a reader
/// of a slot reads is `slot + K * (issued / MAX_LIST_LEN)` (where the
/// appends go is decided in the engine, by the slot's counter).
struct Slots(Vec<AtomicU64>);

impl Slots {
    fn new(keys: u64) -> Slots {
        Slots((0..keys).map(|_| AtomicU64::new(0)).collect())
    }

    /// The key a read of `slot` reads now.
    fn read_key(&self, slot: usize) -> i64 {
        let issued = self.0[slot].load(Ordering::Relaxed);
        list_key(slot as i64, self.0.len() as i64, issued as i64)
    }

    /// Counts an append issued to `slot`.
    fn append(&self, slot: usize) {
        self.0[slot].fetch_add(1, Ordering::Relaxed);
    }

    fn reset(&self) {
        for n in &self.0 {
            n.store(0, Ordering::Relaxed);
        }
    }
}

/// The list of slot `slot` (of `slots`) after `before` appends to it.
fn list_key(slot: i64, slots: i64, before: i64) -> i64 {
    slot + slots * (before / MAX_LIST_LEN as i64)
}

/// The element the `i`-th append of attempt `attempt_id` appends: unique
/// in the run and fresh for every attempt (at most four appends a call).
fn element(attempt_id: u64, i: usize) -> Value {
    debug_assert!(i < 4);
    Value::Int(((attempt_id << 2) | i as u64) as i64)
}

/// Runs an `append_read` or `read_only` call: `(READ, list key, _)` reads
/// list `k`; `(APPEND, slot, _)` appends a fresh element to `slot`'s list,
/// as one alkaline subtransaction when the call is BASE. Returns each
/// read's length.
async fn run_list_ops(
    ctx: &mut ProcCtx,
    args: &[Value],
    what: &str,
    slots: i64,
) -> brine_core::Result<Vec<Value>> {
    if !args.len().is_multiple_of(3) || args.is_empty() {
        return Err(Error::Arity {
            what: format!("procedure `{what}` (kind, key, value triples)"),
            expected: 3,
            got: args.len(),
        });
    }
    let attempt = ctx.txn_id().id;
    let mut appends = 0usize;
    let mut out = Vec::new();
    for op in args.chunks(3) {
        let key = op[1]
            .as_int()
            .ok_or_else(|| Error::type_mismatch("list key or slot", "INT", op[1].kind()))?;
        match op[0].as_int() {
            Some(READ) => {
                let r = ctx.exec("r", vec![Value::Int(key)]).await?;
                out.push(Value::Int(r.rows.len() as i64));
            }
            Some(APPEND) if (0..slots).contains(&key) && appends < 4 => {
                let e = element(attempt, appends);
                appends += 1;
                ctx.begin_alkaline()?;
                // The exclusive lock on the counter comes first: appends
                // to one list queue here, never deadlock on an upgrade.
                ctx.exec("inc", vec![e.clone(), Value::Int(key)]).await?;
                let n = ctx
                    .exec("n", vec![Value::Int(key)])
                    .await?
                    .scalar()
                    .and_then(Value::as_int)
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| {
                        Error::Internal(format!("list-append: slot {key} has no counter row"))
                    })?;
                let k = list_key(key, slots, n - 1);
                let pos = (n - 1) % MAX_LIST_LEN as i64;
                ctx.exec("a", vec![Value::Int(k), Value::Int(pos), e])
                    .await?;
                ctx.end_alkaline().await?;
            }
            Some(APPEND) => {
                return Err(Error::Internal(format!(
                    "list-append: slot {key} out of 0..{slots}, or more than 4 appends in a call"
                )))
            }
            _ => {
                return Err(Error::type_mismatch(
                    "operation kind (0 read, 1 append)",
                    "INT 0..=1",
                    op[0].kind(),
                ))
            }
        }
    }
    Ok(out)
}

impl ListAppend {
    /// With the default BASE set (`append_read`; it matters only under
    /// `salt`).
    pub fn new(keys: u64) -> Result<ListAppend> {
        check_keys(keys)?;
        Ok(ListAppend {
            keys,
            base: BaseSet::of(&LIST_APPEND_BASE_CAPABLE),
            appends_committed: Arc::new(AtomicU64::new(0)),
            slots: Arc::new(Slots::new(keys)),
        })
    }

    /// The procedures that run as BASE transactions under Salt.
    pub fn with_base(mut self, base: BaseSet) -> ListAppend {
        self.base = base;
        self
    }
}

impl Workload for ListAppend {
    fn name(&self) -> &'static str {
        "list-append"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("keys".into(), json!(self.keys));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        vec![(LA_APPEND_READ, 0.8), (LA_READ_ONLY, 0.2)]
    }

    fn application(&self) -> Application {
        let stmts = |p: ProcedureDef| {
            p.statement("r", "SELECT pos, e FROM la WHERE k = $k")
                .statement(
                    "inc",
                    "UPDATE la_count SET n = n + 1, last = $e WHERE s = $s",
                )
                .statement("n", "SELECT n FROM la_count WHERE s = $s")
                .statement("a", "INSERT INTO la (k, pos, e) VALUES ($k, $pos, $e)")
        };
        let slots = self.keys as i64;
        let body = move |name: &'static str| {
            move |mut ctx: ProcCtx, args: Vec<Value>| async move {
                run_list_ops(&mut ctx, &args, name, slots).await
            }
        };
        Application {
            name: "list-append".into(),
            ddl: "CREATE TABLE la (k INT, pos INT, e INT, PRIMARY KEY (k, pos, e)) PARTITION BY (k);\n\
                  CREATE TABLE la_count (s INT, n INT NOT NULL, last INT, PRIMARY KEY (s)) PARTITION BY (s);"
                .into(),
            procedures: [LA_APPEND_READ, LA_READ_ONLY]
                .map(|name| self.base.apply(stmts(ProcedureDef::new(name)).body(body(name))))
                .into(),
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        // Lists start empty; every slot's counter at 0.
        self.appends_committed.store(0, Ordering::Relaxed);
        self.slots.reset();
        Box::pin(load_rows(cluster, "la_count", self.keys, |i| {
            vec![Value::Int(i as i64), Value::Int(0), Value::Null]
        }))
    }

    fn client(&self, _index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(ListAppendClient {
            rng,
            slots: self.slots.clone(),
            pending_appends: 0,
            appends_committed: self.appends_committed.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let expected = self.appends_committed.load(Ordering::Relaxed) as i64;
            let rows = read_scalar(cluster, "SELECT COUNT(*) FROM la").await?;
            let counted = read_scalar(cluster, "SELECT SUM(n) FROM la_count").await?;
            if rows.as_int() == Some(expected) && counted.as_int() == Some(expected) {
                Ok(())
            } else {
                Err(BenchError::Invariant(format!(
                    "list-append: {expected} appends committed, but the table holds {rows} elements \
                     and the slots counted {counted}"
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
                    self.slots.append(slot);
                    args.extend(op(APPEND, slot as i64, Value::Null));
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
        // Where the engine puts the n-th append of a slot.
        let keys: Vec<i64> = (1..=3 * MAX_LIST_LEN as i64)
            .map(|n| list_key(2, 4, n - 1))
            .collect();
        assert!(keys[..MAX_LIST_LEN as usize].iter().all(|&k| k == 2));
        assert!(keys[MAX_LIST_LEN as usize..2 * MAX_LIST_LEN as usize]
            .iter()
            .all(|&k| k == 6));
        assert_eq!(keys.last(), Some(&10));
        // Readers follow the appends issued to a slot.
        let w = ListAppend::new(4).unwrap();
        let mut clients = [
            w.client(0, SmallRng::seed_from_u64(1)),
            w.client(1, SmallRng::seed_from_u64(2)),
        ];
        let mut read_keys = std::collections::HashSet::new();
        for i in 0..4_000 {
            let r = clients[i % 2].next();
            for (kind, key) in ops(&r) {
                if kind == APPEND {
                    assert!((0..4).contains(&key), "appends name a slot");
                } else {
                    read_keys.insert(key);
                }
            }
        }
        assert!(read_keys.len() > 4, "reads moved on to fresh lists");
        for slot in 0..4 {
            let issued = w.slots.0[slot].load(Ordering::Relaxed) as i64;
            assert_eq!(w.slots.read_key(slot), list_key(slot as i64, 4, issued));
        }
    }

    #[test]
    fn elements_are_fresh_per_attempt() {
        let mut seen = std::collections::HashSet::new();
        for attempt in 1..100u64 {
            for i in 0..4 {
                assert!(seen.insert(element(attempt, i)));
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
