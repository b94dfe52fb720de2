//! Bank transfers with a constant total: the invariant workload, and the
//! Salt API's worked example (seed 000 Fig. 3.1, line numbers in the code).
//!
//! ```text
//!  account(id INT PK, balance DECIMAL(12,2)), partitioned by id (id mod P)
//!  transfer(from, to, amount)   BASE (default 90% of calls)
//!      alkaline 1 (acceptance): SELECT balance (from);
//!                               if balance >= amount: UPDATE from -= amount
//!      balance < amount -> return "insufficient funds" (nothing written)
//!      alkaline 2: UPDATE to += amount
//!          on failure (no such receiver): alkaline 3: UPDATE from += amount
//!  total()                      ACID, unchanged (default 10%)
//!      SELECT SUM(balance) FROM account      -- broadcast to every partition
//! ```
//!
//! Under `acid` the alkaline marks do nothing and `transfer` is one ACID
//! transaction with the same effect; under `salt` it is a BASE transaction
//! of two alkaline subtransactions (three if the compensation runs), and
//! Salt Isolation keeps `total` from seeing a transfer half done. As in the
//! seed, an insufficient balance is not an abort: the transfer is accepted
//! and returns without moving money (`"insufficient funds"`), and a missing
//! receiver is caught and compensated (`"refunded"`), never rolled back.
//!
//! Every account starts at 1000.00 and transfers move 0.01..10.00, so an
//! insufficient balance needs an account to drift ~100 maximal transfers
//! below its start: rare. `from` and `to` are distinct and uniform, so with
//! P partitions a transfer spans two partitions with probability (P-1)/P.
//!
//! Invariants. Every `total` must equal the initial total (accounts x
//! 1000.00): the driver counts every total read and every violation. At
//! serializable a violation fails `--check`; at read-committed the sum's
//! reads hold their locks only while they run, so it may see a transfer's
//! debit without its credit (or the reverse, across partitions whose commit
//! messages arrive at different times): violations are then reported but
//! legal. At every level `--check` requires the final total (read after the
//! run) to equal the initial total, and at serializable no balance may be
//! negative.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use brine_cluster::{Application, CallOutcome, Cluster, Isolation, ProcedureDef};
use brine_core::{Decimal, Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Map, Value as Json};

use super::base::{handler_error, BaseSet};
use super::{decimal_cmp, load_rows, read_scalar};
use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, TxnRequest, Workload};

pub const DEFAULT_ACCOUNTS: u64 = 10_000;
pub const MAX_ACCOUNTS: u64 = 10_000_000;
/// Default share of `total` calls, in percent.
pub const DEFAULT_TOTAL_PERCENT: u32 = 10;
/// Initial balance of every account, in cents (1000.00).
pub const INITIAL_BALANCE_CENTS: i64 = 100_000;
/// Largest transfer, in cents (10.00).
pub const MAX_TRANSFER_CENTS: i64 = 1_000;

pub const TRANSFER: &str = "transfer";
pub const TOTAL: &str = "total";

/// `transfer`'s result: the money moved.
pub const TRANSFERRED: &str = "transferred";
/// `transfer`'s result: the sender's balance was below the amount; nothing
/// moved (Fig. 3.1 line 10).
pub const INSUFFICIENT_FUNDS: &str = "insufficient funds";
/// `transfer`'s result: crediting the receiver failed and the sender was
/// re-credited (Fig. 3.1 lines 15-18); nothing moved.
pub const REFUNDED: &str = "refunded";

/// How many wrong totals are quoted in the error message.
const QUOTED_VIOLATIONS: usize = 3;

#[derive(Default)]
struct RunCounters {
    totals_read: AtomicU64,
    total_violations: AtomicU64,
    transfers_committed: AtomicU64,
    insufficient_funds: AtomicU64,
    refunds: AtomicU64,
    first_violations: Mutex<Vec<String>>,
}

impl RunCounters {
    /// A new run starts counting from zero.
    fn reset(&self) {
        self.totals_read.store(0, Ordering::Relaxed);
        self.total_violations.store(0, Ordering::Relaxed);
        self.transfers_committed.store(0, Ordering::Relaxed);
        self.insufficient_funds.store(0, Ordering::Relaxed);
        self.refunds.store(0, Ordering::Relaxed);
        if let Ok(mut v) = self.first_violations.lock() {
            v.clear();
        }
    }
}

/// Procedures `--base` may name (`total` stays ACID, as in the seed).
pub const PROCEDURES: [&str; 1] = [TRANSFER];

pub struct Bank {
    accounts: u64,
    total_percent: u32,
    base: BaseSet,
    run: Arc<RunCounters>,
}

impl Bank {
    pub fn new(accounts: u64, total_percent: u32) -> Result<Bank> {
        if accounts < 2 {
            return Err(BenchError::Config(
                "--accounts must be at least 2: a transfer needs two accounts".into(),
            ));
        }
        if accounts > MAX_ACCOUNTS {
            return Err(BenchError::Config(format!(
                "--accounts: at most {MAX_ACCOUNTS}"
            )));
        }
        if total_percent > 100 {
            return Err(BenchError::Config(
                "--total-percent must be between 0 and 100".into(),
            ));
        }
        Ok(Bank {
            accounts,
            total_percent,
            base: BaseSet::of(&PROCEDURES),
            run: Arc::new(RunCounters::default()),
        })
    }

    /// Which procedures are BASE (default: `transfer`).
    pub fn with_base(mut self, base: BaseSet) -> Bank {
        self.base = base;
        self
    }

    /// The sum every `total` must read, in cents.
    pub fn expected_total_cents(&self) -> i64 {
        self.accounts as i64 * INITIAL_BALANCE_CENTS
    }

    /// Totals read by clients in the current run, and how many were wrong.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.run.totals_read.load(Ordering::Relaxed),
            self.run.total_violations.load(Ordering::Relaxed),
        )
    }
}

fn arg(args: &[Value], i: usize, what: &str) -> brine_core::Result<Value> {
    args.get(i).cloned().ok_or_else(|| Error::Arity {
        what: what.into(),
        expected: 3,
        got: args.len(),
    })
}

fn is_expected_total(v: Option<&Value>, expected_cents: i64) -> bool {
    match v.and_then(Value::as_decimal) {
        Some(d) => {
            decimal_cmp(d, Decimal::new(expected_cents, 2)) == Some(std::cmp::Ordering::Equal)
        }
        None => false,
    }
}

impl Workload for Bank {
    fn name(&self) -> &'static str {
        "bank"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("accounts".into(), json!(self.accounts));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let t = f64::from(self.total_percent) / 100.0;
        vec![(TOTAL, t), (TRANSFER, 1.0 - t)]
    }

    fn application(&self) -> Application {
        let transfer = ProcedureDef::new(TRANSFER)
            .statement("balance", "SELECT balance FROM account WHERE id = $id")
            .statement(
                "add",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            // Fig. 3.1 line 2, `begin BASE transaction`, is `.base()`,
            // given by `self.base` below (`--base`, default `transfer`).
            .body(|mut ctx, args| async move {
                let what = "procedure `transfer(from, to, amount)`";
                let sndr = arg(&args, 0, what)?;
                let rcvr = arg(&args, 1, what)?;
                let amt_v = arg(&args, 2, what)?;
                let amt = amt_v.as_decimal().ok_or_else(|| {
                    Error::type_mismatch("transfer amount", "DECIMAL", amt_v.kind())
                })?;
                let debit = Value::Decimal(Decimal::new(-amt.units, amt.scale));

                // Lines 3-9: the first alkaline subtransaction checks the
                // constraint and debits the sender; it is the transaction's
                // acceptance. Line 9's `catch ... return` is the runtime's
                // answer to a failure here: the call aborts before
                // acceptance and nothing has changed, so the error simply
                // propagates (`?`).
                ctx.begin_alkaline()?; // 4
                let bal = ctx
                    .exec("balance", vec![sndr.clone()]) // 5
                    .await?
                    .scalar()
                    .and_then(Value::as_decimal)
                    .ok_or_else(|| Error::Internal(format!("bank: account {sndr} not found")))?;
                let enough = decimal_cmp(bal, amt) != Some(std::cmp::Ordering::Less);
                if enough {
                    // 6
                    ctx.exec("add", vec![debit, sndr.clone()]).await?; // 7
                }
                ctx.end_alkaline().await?; // 8

                if !enough {
                    return Ok(vec![Value::str(INSUFFICIENT_FUNDS)]); // 10
                }

                // Lines 11-14: credit the receiver.
                let credited: brine_core::Result<()> = async {
                    ctx.begin_alkaline()?; // 12
                    let r = ctx.exec("add", vec![amt_v.clone(), rcvr.clone()]).await?; // 13
                    ctx.end_alkaline().await?; // 14
                    if r.affected == 1 {
                        Ok(())
                    } else {
                        // No such receiver: the update wrote nothing, so
                        // the committed (empty) subtransaction needs no
                        // undo; raise the seed's exception.
                        Err(Error::UserAbort(format!("no account {rcvr}")))
                    }
                }
                .await;
                if let Err(e) = credited {
                    // 15: `catch (Exception e)`: roll back by hand. A
                    // concurrency-control abort is the runtime's, not ours.
                    let e = handler_error(e)?;
                    tracing::debug!(%sndr, %rcvr, error = %e, "bank: refunding the sender");
                    ctx.begin_alkaline()?; // 16
                    ctx.exec("add", vec![amt_v, sndr]).await?; // 17
                    ctx.end_alkaline().await?; // 18
                    return Ok(vec![Value::str(REFUNDED)]);
                }
                Ok(vec![Value::str(TRANSFERRED)]) // 19: `end BASE transaction`
            });
        let total = ProcedureDef::new(TOTAL)
            .statement("sum", "SELECT SUM(balance) FROM account")
            .body(|mut ctx, _args| async move {
                let r = ctx.exec("sum", vec![]).await?;
                Ok(vec![r.scalar().cloned().unwrap_or(Value::Null)])
            });
        Application {
            name: "bank".into(),
            ddl: "CREATE TABLE account (id INT, balance DECIMAL(12,2) NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);"
                .into(),
            procedures: vec![self.base.apply(transfer), total],
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.run.reset();
            load_rows(cluster, "account", self.accounts, |i| {
                vec![
                    Value::Int(i as i64),
                    Value::Decimal(Decimal::new(INITIAL_BALANCE_CENTS, 2)),
                ]
            })
            .await
        })
    }

    /// Transfers move money and `total` reads it: whatever runs left,
    /// the total is the initial one, so a run may start from it.
    fn reuse<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.run.reset();
            Ok(())
        })
    }

    fn client(&self, _index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(BankClient {
            rng,
            accounts: self.accounts,
            total_percent: self.total_percent,
            expected_cents: self.expected_total_cents(),
            run: self.run.clone(),
        })
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let expected = Decimal::new(self.expected_total_cents(), 2);
            let total = read_scalar(cluster, "SELECT SUM(balance) FROM account").await?;
            if !is_expected_total(Some(&total), self.expected_total_cents()) {
                return Err(BenchError::Invariant(format!(
                    "bank: the final total is {total}, the initial total was {expected}"
                )));
            }
            if cluster.config().isolation == Isolation::Serializable {
                let (read, wrong) = self.totals();
                if wrong > 0 {
                    let quoted = self
                        .run
                        .first_violations
                        .lock()
                        .map(|v| v.join(", "))
                        .unwrap_or_default();
                    return Err(BenchError::Invariant(format!(
                        "bank: {wrong} of {read} totals read at serializable differ from {expected} (first: {quoted})"
                    )));
                }
                let min = read_scalar(cluster, "SELECT MIN(balance) FROM account").await?;
                if let Some(d) = min.as_decimal() {
                    if d.units < 0 {
                        return Err(BenchError::Invariant(format!(
                            "bank: an account has a negative balance ({min}) at serializable"
                        )));
                    }
                }
            }
            Ok(())
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let r = &self.run;
        let mut m = Map::new();
        m.insert(
            "totals_read".into(),
            json!(r.totals_read.load(Ordering::Relaxed)),
        );
        m.insert(
            "total_violations".into(),
            json!(r.total_violations.load(Ordering::Relaxed)),
        );
        m.insert(
            "transfers_committed".into(),
            json!(r.transfers_committed.load(Ordering::Relaxed)),
        );
        m.insert(
            "insufficient_funds".into(),
            json!(r.insufficient_funds.load(Ordering::Relaxed)),
        );
        m.insert(
            "transfers_refunded".into(),
            json!(r.refunds.load(Ordering::Relaxed)),
        );
        m
    }
}

struct BankClient {
    rng: SmallRng,
    accounts: u64,
    total_percent: u32,
    expected_cents: i64,
    run: Arc<RunCounters>,
}

impl ClientGen for BankClient {
    fn next(&mut self) -> TxnRequest {
        if self.rng.gen_range(0..100) < self.total_percent {
            return TxnRequest {
                procedure: TOTAL,
                args: vec![],
            };
        }
        let from = self.rng.gen_range(0..self.accounts);
        let mut to = self.rng.gen_range(0..self.accounts - 1);
        if to >= from {
            to += 1;
        }
        let cents = self.rng.gen_range(1..=MAX_TRANSFER_CENTS);
        TxnRequest {
            procedure: TRANSFER,
            args: vec![
                Value::Int(from as i64),
                Value::Int(to as i64),
                Value::Decimal(Decimal::new(cents, 2)),
            ],
        }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        let r = &self.run;
        match (procedure, outcome) {
            (TOTAL, Ok(o)) => {
                r.totals_read.fetch_add(1, Ordering::Relaxed);
                let v = o.values.first();
                if !is_expected_total(v, self.expected_cents) {
                    r.total_violations.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut q) = r.first_violations.lock() {
                        if q.len() < QUOTED_VIOLATIONS {
                            q.push(v.map_or_else(|| "no value".to_string(), |v| v.to_string()));
                        }
                    }
                }
            }
            (TRANSFER, Ok(o)) => {
                let counter = match o.values.first().and_then(Value::as_str) {
                    Some(INSUFFICIENT_FUNDS) => &r.insufficient_funds,
                    Some(REFUNDED) => &r.refunds,
                    _ => &r.transfers_committed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mix_and_arguments() -> Result<()> {
        let w = Bank::new(2, 10)?;
        let mut c = w.client(0, SmallRng::seed_from_u64(9));
        let mut totals = 0;
        for _ in 0..1000 {
            let r = c.next();
            if r.procedure == TOTAL {
                totals += 1;
                continue;
            }
            let from = r.args[0].as_int();
            let to = r.args[1].as_int();
            assert!(from != to && from.is_some() && to.is_some());
            let amount = r.args[2].as_decimal().map(|d| d.units);
            assert!(matches!(amount, Some(1..=MAX_TRANSFER_CENTS)));
        }
        assert!((50..150).contains(&totals), "{totals}");
        Ok(())
    }

    #[test]
    fn wrong_totals_are_counted() -> Result<()> {
        let w = Bank::new(10, 100)?;
        let mut c = w.client(0, SmallRng::seed_from_u64(1));
        let good = Value::Decimal(Decimal::new(1_000_000, 2));
        let also_good = Value::Decimal(Decimal::new(100_000_000, 4));
        let bad = Value::Decimal(Decimal::new(999_999, 2));
        for v in [good, also_good, bad] {
            c.observe(
                TOTAL,
                &Ok(CallOutcome {
                    values: vec![v],
                    attempts: 1,
                }),
            );
        }
        assert_eq!(w.totals(), (3, 1));
        Ok(())
    }

    #[test]
    fn rejects_bad_options() {
        assert!(Bank::new(1, 10).is_err());
        assert!(Bank::new(10, 101).is_err());
    }
}
