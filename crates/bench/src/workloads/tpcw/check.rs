//! Consistency checks of a TPC-W database after a run (`--check`). The
//! spec defines none beyond ACID tests; these are the invariants its
//! transactions keep, read with interactive transactions once the clients
//! stopped.
//!
//! | # | invariant                                                          |
//! |---|--------------------------------------------------------------------|
//! | 1 | I_STOCK >= 0, and I_STOCK = initial - (quantities ordered in the run) + 21 x restocks, for some 0 <= restocks <= lines ordered |
//! | 2 | O_ID unique; every order has at least one line; every line has its order |
//! | 3 | every order has exactly one CC_XACTS row, CX_XACT_AMT = O_TOTAL; no payment without its order |
//! | 4 | every cart line belongs to an existing cart, names an item, SCL_QTY > 0 |
//! | 5 | C_UNAME unique; customers' and orders' addresses exist             |

use std::collections::{HashMap, HashSet};

use brine_cluster::Cluster;
use brine_core::{Row, Value};

use super::{RunState, Scale};
use crate::error::{BenchError, Result};
use crate::workloads::tpcc::check::read_rows;

/// How many violations the error quotes.
const QUOTED: usize = 5;

/// What the check found.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<String>,
    pub count: usize,
    pub rows_read: usize,
    /// Orders placed during the run (found in the database).
    pub run_orders: usize,
}

impl Findings {
    fn fail(&mut self, invariant: u32, msg: String) {
        self.count += 1;
        if self.violations.len() < QUOTED {
            self.violations
                .push(format!("invariant {invariant}: {msg}"));
        }
    }
}

fn int(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i).and_then(Value::as_int).ok_or_else(|| {
        BenchError::Internal(format!("tpcw check: {what}: column {i} is not an INT"))
    })
}

fn cents(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i)
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| {
            BenchError::Internal(format!("tpcw check: {what}: column {i} is not a DECIMAL"))
        })
}

async fn all(cluster: &Cluster, f: &mut Findings, sql: &str) -> Result<Vec<Row>> {
    let rows = read_rows(cluster, sql, vec![]).await?;
    f.rows_read += rows.len();
    Ok(rows)
}

/// Checks every invariant.
pub async fn check(cluster: &Cluster, scale: Scale, run: &RunState) -> Result<Findings> {
    let mut f = Findings::default();
    let initial = run
        .initial_stock
        .lock()
        .map(|g| g.clone())
        .unwrap_or_default();

    let addresses: HashSet<i64> = all(cluster, &mut f, "SELECT addr_id FROM address")
        .await?
        .iter()
        .map(|r| int(r, 0, "address"))
        .collect::<Result<_>>()?;
    let mut unames = HashSet::new();
    for r in all(
        cluster,
        &mut f,
        "SELECT c_id, c_uname, c_addr_id FROM customer",
    )
    .await?
    {
        let c = int(&r, 0, "customer")?;
        if !unames.insert(r.get(1).cloned()) {
            f.fail(
                5,
                format!("customer {c}: user name {:?} taken twice", r.get(1)),
            );
        }
        let a = int(&r, 2, "customer")?;
        if !addresses.contains(&a) {
            f.fail(5, format!("customer {c}: address {a} does not exist"));
        }
    }

    // Orders: (customer, id) -> total.
    let mut orders: HashMap<(i64, i64), i64> = HashMap::new();
    let mut ids = HashSet::new();
    for r in all(
        cluster,
        &mut f,
        "SELECT o_c_id, o_id, o_total, o_bill_addr_id, o_ship_addr_id FROM orders",
    )
    .await?
    {
        let (c, o) = (int(&r, 0, "orders")?, int(&r, 1, "orders")?);
        if !ids.insert(o) {
            f.fail(2, format!("order id {o} used twice"));
        }
        for col in [3, 4] {
            let a = int(&r, col, "orders")?;
            if !addresses.contains(&a) {
                f.fail(5, format!("order {o}: address {a} does not exist"));
            }
        }
        if o > scale.orders() {
            f.run_orders += 1;
        }
        orders.insert((c, o), cents(&r, 2, "orders")?);
    }

    let mut with_lines = HashSet::new();
    let mut ordered: HashMap<i64, (i64, i64)> = HashMap::new(); // item -> (qty, lines)
    for r in all(
        cluster,
        &mut f,
        "SELECT ol_c_id, ol_o_id, ol_i_id, ol_qty FROM order_line",
    )
    .await?
    {
        let key = (int(&r, 0, "order_line")?, int(&r, 1, "order_line")?);
        if !orders.contains_key(&key) {
            f.fail(2, format!("order line of missing order {key:?}"));
        }
        with_lines.insert(key);
        if key.1 > scale.orders() {
            let e = ordered.entry(int(&r, 2, "order_line")?).or_default();
            e.0 += int(&r, 3, "order_line")?;
            e.1 += 1;
        }
    }
    for key in orders.keys().filter(|k| !with_lines.contains(k)) {
        f.fail(2, format!("order {key:?} has no lines"));
    }

    let mut paid = HashSet::new();
    for r in all(
        cluster,
        &mut f,
        "SELECT cx_c_id, cx_o_id, cx_xact_amt FROM cc_xacts",
    )
    .await?
    {
        let key = (int(&r, 0, "cc_xacts")?, int(&r, 1, "cc_xacts")?);
        let amount = cents(&r, 2, "cc_xacts")?;
        match orders.get(&key) {
            None => f.fail(3, format!("payment of missing order {key:?}")),
            Some(&total) if total != amount => f.fail(
                3,
                format!("order {key:?}: total {total} cents but paid {amount}"),
            ),
            Some(_) => {}
        }
        paid.insert(key);
    }
    for key in orders.keys().filter(|k| !paid.contains(k)) {
        f.fail(3, format!("order {key:?} has no cc_xacts row"));
    }

    let mut items = HashSet::new();
    for r in all(cluster, &mut f, "SELECT i_id, i_stock FROM item").await? {
        let (i, stock) = (int(&r, 0, "item")?, int(&r, 1, "item")?);
        items.insert(i);
        if stock < 0 {
            f.fail(1, format!("item {i}: stock {stock} is negative"));
        }
        let Some(&start) = usize::try_from(i - 1).ok().and_then(|k| initial.get(k)) else {
            f.fail(1, format!("item {i} was not loaded"));
            continue;
        };
        let (qty, lines) = ordered.get(&i).copied().unwrap_or_default();
        let restocked = stock - start + qty;
        if restocked % 21 != 0 || !(0..=21 * lines).contains(&restocked) {
            f.fail(
                1,
                format!(
                    "item {i}: stock {stock} is not {start} - {qty} ordered + 21 x (0..={lines}) restocks"
                ),
            );
        }
    }

    let carts: HashSet<i64> = all(cluster, &mut f, "SELECT sc_id FROM shopping_cart")
        .await?
        .iter()
        .map(|r| int(r, 0, "shopping_cart"))
        .collect::<Result<_>>()?;
    for r in all(
        cluster,
        &mut f,
        "SELECT scl_sc_id, scl_i_id, scl_qty FROM shopping_cart_line",
    )
    .await?
    {
        let (sc, i, q) = (
            int(&r, 0, "shopping_cart_line")?,
            int(&r, 1, "shopping_cart_line")?,
            int(&r, 2, "shopping_cart_line")?,
        );
        if !carts.contains(&sc) {
            f.fail(4, format!("cart line ({sc}, {i}) of a missing cart"));
        }
        if !items.contains(&i) || q <= 0 {
            f.fail(
                4,
                format!("cart line ({sc}, {i}): item missing or quantity {q}"),
            );
        }
    }
    Ok(f)
}

/// [`check`], failing with the first violations quoted.
pub async fn check_or_fail(cluster: &Cluster, scale: Scale, run: &RunState) -> Result<Findings> {
    let f = check(cluster, scale, run).await?;
    if f.count > 0 {
        return Err(BenchError::Invariant(format!(
            "tpcw: {} violation(s), e.g. {}",
            f.count,
            f.violations.join("; ")
        )));
    }
    Ok(f)
}

/// Every row `sql` returns, read after a run (for tests and tools).
pub async fn read_rows_all(cluster: &Cluster, sql: &str) -> Result<Vec<Row>> {
    read_rows(cluster, sql, vec![]).await
}
