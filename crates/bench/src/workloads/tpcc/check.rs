//! The consistency conditions of clause 3.3.2, checked after a run.
//!
//! Checked: conditions 1-10 and 12 (all but 11, which holds only before
//! any delivery has run). Each warehouse's tables are read with
//! interactive transactions once the clients stopped; every violation
//! found is collected and the first few are quoted in the error.
//!
//! | # | condition, per warehouse / district / customer                      |
//! |---|--------------------------------------------------------------------|
//! | 1 | W_YTD = sum(D_YTD)                                                  |
//! | 2 | D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)                          |
//! | 3 | max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER)                  |
//! | 4 | sum(O_OL_CNT) = count(ORDER_LINE)                                   |
//! | 5 | O_CARRIER_ID is null iff the order has a NEW_ORDER row              |
//! | 6 | O_OL_CNT = count of the order's lines                               |
//! | 7 | OL_DELIVERY_D is null iff its order's O_CARRIER_ID is null          |
//! | 8 | W_YTD = sum(H_AMOUNT) of the warehouse                              |
//! | 9 | D_YTD = sum(H_AMOUNT) of the district                               |
//! |10 | C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT) of the customer|
//! |12 | C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT)                |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use brine_cluster::Cluster;
use brine_core::{Row, Value};

use super::schema::DISTRICTS;
use crate::error::{BenchError, Result};

/// How many violations the error quotes.
const QUOTED: usize = 5;

/// Reads rows with a fresh interactive transaction (retried if it is a
/// concurrency-control victim, which nothing should cause after a run).
pub async fn read_rows(cluster: &Cluster, sql: &str, args: Vec<Value>) -> Result<Vec<Row>> {
    let client = cluster.client();
    let mut last = None;
    // For as long as a partition may take to move to another node (a
    // failover, or a hand-over back home: `docs/replication.md`).
    let until = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut pause = Duration::from_millis(5);
    let again =
        |e: &brine_core::Error| e.is_retryable() || matches!(e, brine_core::Error::Transport(_));
    while tokio::time::Instant::now() < until {
        let mut txn = client.begin();
        match txn.execute(sql, args.clone()).await {
            Ok(q) => match txn.commit().await {
                Ok(()) => return Ok(q.rows),
                // A read that wrote nothing runs again whatever became of
                // its commit (its partition moved under it).
                Err(e) if again(&e) => last = Some(e),
                Err(e) => return Err(BenchError::cluster(format!("committing `{sql}`"))(e)),
            },
            Err(e) if again(&e) => {
                txn.abort().await;
                last = Some(e);
            }
            Err(e) => return Err(BenchError::cluster(format!("running `{sql}`"))(e)),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
    Err(BenchError::Internal(format!(
        "`{sql}` kept aborting after the run: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

fn int(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i).and_then(Value::as_int).ok_or_else(|| {
        BenchError::Internal(format!("tpcc check: {what}: column {i} is not an INT"))
    })
}

/// Money in cents.
fn cents(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i)
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| {
            BenchError::Internal(format!("tpcc check: {what}: column {i} is not a DECIMAL"))
        })
}

fn is_null(row: &Row, i: usize) -> bool {
    row.get(i).is_none_or(Value::is_null)
}

fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<String>,
    pub count: usize,
    /// Rows read, for the record.
    pub rows_read: usize,
}

impl Findings {
    /// Counts a violation of `condition`, quoting the first few.
    pub(crate) fn fail(&mut self, condition: u32, msg: String) {
        self.count += 1;
        if self.violations.len() < QUOTED {
            self.violations
                .push(format!("condition {condition}: {msg}"));
        }
    }
}

type CustomerKey = (i64, i64, i64);

/// Checks every condition over warehouses `1..=warehouses`.
pub async fn check(cluster: &Cluster, warehouses: i64) -> Result<Findings> {
    let mut f = Findings::default();
    // Per customer: sum of delivered line amounts; and sum of payments,
    // gathered from every warehouse's history (remote payments are stored
    // with the paying warehouse).
    let mut delivered: HashMap<CustomerKey, i64> = HashMap::new();
    let mut paid: HashMap<CustomerKey, i64> = HashMap::new();
    for w in 1..=warehouses {
        let wv = Value::Int(w);
        let wh = read_rows(
            cluster,
            "SELECT w_ytd FROM warehouse WHERE w_id = $w",
            vec![wv.clone()],
        )
        .await?;
        let w_ytd = match wh.first() {
            Some(r) => cents(r, 0, "warehouse")?,
            None => {
                f.fail(1, format!("warehouse {w} is missing"));
                continue;
            }
        };
        let districts = read_rows(
            cluster,
            "SELECT d_id, d_ytd, d_next_o_id FROM district WHERE d_w_id = $w",
            vec![wv.clone()],
        )
        .await?;
        if districts.len() != DISTRICTS as usize {
            f.fail(
                1,
                format!("warehouse {w} has {} districts", districts.len()),
            );
        }
        let d_ytd_sum: i64 = districts
            .iter()
            .map(|r| cents(r, 1, "district"))
            .sum::<Result<i64>>()?;
        if w_ytd != d_ytd_sum {
            f.fail(
                1,
                format!(
                    "warehouse {w}: W_YTD {} != sum(D_YTD) {}",
                    money(w_ytd),
                    money(d_ytd_sum)
                ),
            );
        }
        let mut w_history = 0i64;
        for drow in &districts {
            let d = int(drow, 0, "district")?;
            let d_ytd = cents(drow, 1, "district")?;
            let next_o_id = int(drow, 2, "district")?;
            let args = vec![wv.clone(), Value::Int(d)];
            let orders = read_rows(
                cluster,
                "SELECT o_id, o_c_id, o_carrier_id, o_ol_cnt FROM orders \
                 WHERE o_w_id = $w AND o_d_id = $d",
                args.clone(),
            )
            .await?;
            let new_orders: BTreeSet<i64> = read_rows(
                cluster,
                "SELECT no_o_id FROM new_order WHERE no_w_id = $w AND no_d_id = $d",
                args.clone(),
            )
            .await?
            .iter()
            .map(|r| int(r, 0, "new_order"))
            .collect::<Result<_>>()?;
            let lines = read_rows(
                cluster,
                "SELECT ol_o_id, ol_amount, ol_delivery_d FROM order_line \
                 WHERE ol_w_id = $w AND ol_d_id = $d",
                args.clone(),
            )
            .await?;
            let history = read_rows(
                cluster,
                "SELECT h_c_w_id, h_c_d_id, h_c_id, h_amount FROM history \
                 WHERE h_w_id = $w AND h_d_id = $d",
                args.clone(),
            )
            .await?;
            f.rows_read += orders.len() + new_orders.len() + lines.len() + history.len();

            // Condition 2.
            let max_o = orders
                .iter()
                .map(|r| int(r, 0, "orders"))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .max()
                .unwrap_or(0);
            if max_o != next_o_id - 1 {
                f.fail(
                    2,
                    format!(
                        "district ({w}, {d}): D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
                        next_o_id - 1
                    ),
                );
            }
            if let (Some(&lo), Some(&hi)) = (new_orders.first(), new_orders.last()) {
                if hi != next_o_id - 1 {
                    f.fail(
                        2,
                        format!(
                            "district ({w}, {d}): D_NEXT_O_ID - 1 = {} but max(NO_O_ID) = {hi}",
                            next_o_id - 1
                        ),
                    );
                }
                // Condition 3.
                if hi - lo + 1 != new_orders.len() as i64 {
                    f.fail(
                        3,
                        format!(
                            "district ({w}, {d}): max(NO_O_ID) - min(NO_O_ID) + 1 = {} but {} NEW_ORDER rows",
                            hi - lo + 1,
                            new_orders.len()
                        ),
                    );
                }
            }

            // Lines per order, and whether each is delivered.
            let mut per_order: BTreeMap<i64, (i64, i64, usize)> = BTreeMap::new();
            for r in &lines {
                let e = per_order.entry(int(r, 0, "order_line")?).or_default();
                e.0 += 1;
                e.1 += cents(r, 1, "order_line")?;
                e.2 += usize::from(is_null(r, 2));
            }
            // Conditions 4-7.
            let mut ol_cnt_sum = 0i64;
            for r in &orders {
                let o = int(r, 0, "orders")?;
                let c = int(r, 1, "orders")?;
                let undelivered = is_null(r, 2);
                let ol_cnt = int(r, 3, "orders")?;
                ol_cnt_sum += ol_cnt;
                if undelivered != new_orders.contains(&o) {
                    f.fail(
                        5,
                        format!(
                            "order ({w}, {d}, {o}): O_CARRIER_ID {} but {} NEW_ORDER row",
                            if undelivered { "null" } else { "set" },
                            if new_orders.contains(&o) { "a" } else { "no" }
                        ),
                    );
                }
                let (n, amount, null_dates) = per_order.get(&o).copied().unwrap_or_default();
                if n != ol_cnt {
                    f.fail(
                        6,
                        format!("order ({w}, {d}, {o}): O_OL_CNT {ol_cnt} but {n} lines"),
                    );
                }
                let expect_null = if undelivered { n as usize } else { 0 };
                if null_dates != expect_null {
                    f.fail(
                        7,
                        format!(
                            "order ({w}, {d}, {o}): O_CARRIER_ID {} but {null_dates} of {n} lines have no OL_DELIVERY_D",
                            if undelivered { "null" } else { "set" }
                        ),
                    );
                }
                if !undelivered {
                    *delivered.entry((w, d, c)).or_default() += amount;
                }
            }
            if ol_cnt_sum != lines.len() as i64 {
                f.fail(
                    4,
                    format!(
                        "district ({w}, {d}): sum(O_OL_CNT) = {ol_cnt_sum} but {} ORDER_LINE rows",
                        lines.len()
                    ),
                );
            }
            // Conditions 8 and 9 (and payments per customer for 10).
            let mut d_history = 0i64;
            for r in &history {
                let amount = cents(r, 3, "history")?;
                d_history += amount;
                let key = (
                    int(r, 0, "history")?,
                    int(r, 1, "history")?,
                    int(r, 2, "history")?,
                );
                *paid.entry(key).or_default() += amount;
            }
            w_history += d_history;
            if d_ytd != d_history {
                f.fail(
                    9,
                    format!(
                        "district ({w}, {d}): D_YTD {} != sum(H_AMOUNT) {}",
                        money(d_ytd),
                        money(d_history)
                    ),
                );
            }
        }
        if w_ytd != w_history {
            f.fail(
                8,
                format!(
                    "warehouse {w}: W_YTD {} != sum(H_AMOUNT) {}",
                    money(w_ytd),
                    money(w_history)
                ),
            );
        }
    }
    // Conditions 10 and 12, per customer.
    for w in 1..=warehouses {
        for d in 1..=DISTRICTS {
            let customers = read_rows(
                cluster,
                "SELECT c_id, c_balance, c_ytd_payment FROM customer \
                 WHERE c_w_id = $w AND c_d_id = $d",
                vec![Value::Int(w), Value::Int(d)],
            )
            .await?;
            f.rows_read += customers.len();
            for r in &customers {
                let c = int(r, 0, "customer")?;
                let balance = cents(r, 1, "customer")?;
                let ytd = cents(r, 2, "customer")?;
                let got = delivered.get(&(w, d, c)).copied().unwrap_or(0);
                let pay = paid.get(&(w, d, c)).copied().unwrap_or(0);
                if balance != got - pay {
                    f.fail(
                        10,
                        format!(
                            "customer ({w}, {d}, {c}): C_BALANCE {} != delivered {} - paid {}",
                            money(balance),
                            money(got),
                            money(pay)
                        ),
                    );
                }
                if balance + ytd != got {
                    f.fail(
                        12,
                        format!(
                            "customer ({w}, {d}, {c}): C_BALANCE + C_YTD_PAYMENT {} != delivered {}",
                            money(balance + ytd),
                            money(got)
                        ),
                    );
                }
            }
        }
    }
    Ok(f)
}

/// Runs the check and turns violations into an error.
pub async fn check_or_fail(cluster: &Cluster, warehouses: i64) -> Result<Findings> {
    let f = check(cluster, warehouses).await?;
    if f.count > 0 {
        return Err(BenchError::Invariant(format!(
            "tpcc: {} consistency violation(s) of clause 3.3.2; first: {}",
            f.count,
            f.violations.join("; ")
        )));
    }
    Ok(f)
}
