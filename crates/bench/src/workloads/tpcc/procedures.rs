//! The five TPC-C transactions (clause 2) as brine procedures.
//!
//! ```text
//!  new_order    w, d, c, entry_d, ol_cnt, [i_id, supply_w, qty] x ol_cnt
//!   [A] items (missing -> user abort: the 1% rollback)
//!     customer read
//!   [ ] per line, in (supply_w, i_id) order: stock read + update
//!   [ ] district: next_o_id++ then read
//!     INSERT orders, new_order, order_lines
//!     warehouse read (w_tax)
//!  payment      w, d, c_w, c_d, by_name, c_id, c_last, amount, h_date, h_id
//!   [A] customer by id or by last name (n/2 rounded up of those sorted by
//!       c_first); balance -= amount, ...; bad credit: c_data prepended
//!     district, then warehouse: ytd += amount (update, then read the names)
//!     INSERT history
//!  order_status w, d, by_name, c_id, c_last           (read-only)
//!     customer; last order by the (w, d, c, o_id) index DESC LIMIT 1; its lines
//!  delivery     w, carrier, delivery_d [, d]           (all 10 districts, one txn;
//!                                                       or district d only)
//!     per district:
//!   [ ] oldest new_order (ORDER BY LIMIT 1; none -> skip), delete it
//!     set o_carrier_id, stamp its lines, sum ol_amount, credit customer
//!  stock_level  w, d, threshold                         (read-only)
//!     d_next_o_id; lines of the last 20 orders (range on ol_o_id);
//!     distinct items; count stock rows below threshold (in procedure code)
//!
//!  [ ] an explicit alkaline block, [A] the first one (the acceptance);
//!  every other statement is, under Salt, its own single-statement
//!  alkaline subtransaction
//! ```
//!
//! **BASE-ification (Salt).** The procedures named by `--base` (default
//! new-order and payment, as seed 000 section 3.6.1 and seed 001 section 7
//! did) are BASE procedures; their bodies mark alkaline blocks, which do
//! nothing under `acid` or when the procedure is not BASE, so one body
//! serves both protocols. New-order follows seed 000 Fig. 3.5: the item
//! check first (the only legitimate abort, so it happens before
//! acceptance), the district's order id in one block, everything else in
//! small subtransactions. Payment's chopping is ours (the sources do not
//! show it): the customer block first, then the hot `ytd` increments as
//! single statements. Delivery (the third transaction of the incremental
//! experiment, `--base new_order,payment,delivery`) claims each district's
//! oldest new order in one block. Order-status and stock-level have no
//! blocks (`--base all` is the "pure BASE" upper bound). Salt Isolation
//! keeps every intermediate state from the ACID transactions, so their
//! bodies and the consistency conditions are unchanged; docs/workloads/
//! tpcc.md has the reasoning per procedure.
//!
//! Every transaction reads and writes exactly what clause 2 says and
//! returns the same values; only the order of its statements differs from
//! the clause's listing, for two-phase locking's sake:
//!
//! * **Hot rows last.** Locks are held to commit, so a row locked early is
//!   held through every later round trip. The warehouse row (written by
//!   every payment of the warehouse, read by every new order) and the
//!   district row (next_o_id, d_ytd) are therefore taken at the end:
//!   new-order reads items, customer and stock first, then takes the
//!   district (it needs O_ID before inserting), then reads W_TAX; payment
//!   updates the customer first, then the district, then the warehouse.
//!   The BASE chopping keeps this order, so the ACID baseline runs the
//!   same good order as before.
//! * **Write before read.** Where the spec reads a row and then updates it
//!   (district and warehouse in payment, district in new-order), the update
//!   comes first and the read after, in the same transaction: the values
//!   read are the same (the read sees the transaction's own write, and
//!   next_o_id is read back minus one), but the write lock is taken at once
//!   instead of a read lock to be upgraded later, an upgrade on which two
//!   payments of one warehouse would deadlock. Stock is read before it is
//!   updated (the new quantity depends on the old one and the subset has no
//!   conditional expression); lines are visited in (supply warehouse, item)
//!   order, a global order, so two new orders do not deadlock on stock.

use std::collections::BTreeSet;

use brine_cluster::{Application, Isolation, ProcCtx, ProcedureDef};
use brine_core::{Decimal, Error, Result, Row, Value};

use super::schema::{DDL, DISTRICTS};
use super::{DELIVERY, NEW_ORDER, ORDER_STATUS, PAYMENT, STOCK_LEVEL};
use crate::workloads::base::BaseSet;
use crate::workloads::values::{cell, decimal_at, first, int_at, Args};

/// Most order lines per order (clause 2.4.1.3).
pub const MAX_OL_CNT: usize = 15;
/// Orders whose lines stock-level examines (clause 2.8.2.2).
pub const STOCK_LEVEL_ORDERS: i64 = 20;
/// The user-abort message of new-order's rollback (clause 2.4.2.3).
pub const INVALID_ITEM: &str = "Item number is not valid";

fn str_at<'r>(row: &'r Row, i: usize, what: &str) -> Result<&'r str> {
    let v = cell(row, i, what)?;
    v.as_str()
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "STRING", v.kind()))
}

fn overflow(what: &str) -> Error {
    Error::Internal(format!("tpcc: decimal overflow computing {what}"))
}

/// Units of `d` at `scale` (exact for the scales used here).
fn units(d: Decimal, scale: u8, what: &str) -> Result<i64> {
    d.units_at(scale).ok_or_else(|| overflow(what))
}

/// Customer selection shared by payment and order-status: by id, or by last
/// name taking the row at position n/2 rounded up (1-based) of the
/// customers with that last name sorted by first name (clause 2.5.2.2).
async fn customer_id(
    ctx: &mut ProcCtx,
    by_name_stmt: &str,
    w: &Value,
    d: &Value,
    by_name: bool,
    c_id: &Value,
    c_last: &Value,
) -> Result<Value> {
    if !by_name {
        return Ok(c_id.clone());
    }
    let rows = ctx
        .exec(by_name_stmt, vec![w.clone(), d.clone(), c_last.clone()])
        .await?;
    let n = rows.len();
    if n == 0 {
        return Err(Error::Internal(format!(
            "tpcc: no customer named {c_last} in warehouse {w} district {d}"
        )));
    }
    let row = rows
        .rows
        .get((n - 1) / 2)
        .ok_or_else(|| Error::Internal("tpcc: customer position out of range".into()))?;
    Ok(cell(row, 0, "customer by last name")?.clone())
}

/// Where new-order and payment take the hot rows (warehouse, district).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatementOrder {
    /// Last (the default; see the module documentation): under ACID the
    /// hot locks are held through as few round trips as possible.
    HotLast,
    /// Where clause 2 lists them (and seed 000 Fig. 3.5 places them): right
    /// after new-order's item check; first in payment after the customer
    /// lookup. The order the sources BASE-ified, and under ACID the
    /// contended one (`--tpcc-order spec`).
    Spec,
}

impl StatementOrder {
    pub const ALL: [StatementOrder; 2] = [StatementOrder::HotLast, StatementOrder::Spec];

    pub fn by_name(name: &str) -> Result<StatementOrder> {
        match name {
            "hot-last" => Ok(StatementOrder::HotLast),
            "spec" => Ok(StatementOrder::Spec),
            other => Err(Error::Config(format!(
                "--tpcc-order: unknown order `{other}` (expected hot-last or spec)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StatementOrder::HotLast => "hot-last",
            StatementOrder::Spec => "spec",
        }
    }

    /// New-order's statements in the order its body runs them (loops
    /// stand for every iteration). Declared in this order: the static
    /// analysis takes declaration order as execution order, and Callas
    /// runs a chopping's pieces in it.
    fn new_order_statements(self) -> &'static [&'static str] {
        match self {
            StatementOrder::HotLast => &[
                "item",
                "customer",
                "stock",
                "update_stock",
                "bump_district",
                "district",
                "insert_order",
                "insert_new_order",
                "insert_line",
                "warehouse",
            ],
            StatementOrder::Spec => &[
                "item",
                "warehouse",
                "bump_district",
                "district",
                "customer",
                "stock",
                "update_stock",
                "insert_order",
                "insert_new_order",
                "insert_line",
            ],
        }
    }

    /// Payment's statements in the order its body runs them, as
    /// `new_order_statements`. Clause 2's order checks that the customer
    /// exists before the hot rows (`find_customer`) and reads the row
    /// again after updating it.
    fn payment_statements(self) -> &'static [&'static str] {
        match self {
            StatementOrder::HotLast => &[
                "customer_by_name",
                "pay_customer",
                "customer",
                "customer_data",
                "pay_district",
                "district",
                "pay_warehouse",
                "warehouse",
                "insert_history",
            ],
            StatementOrder::Spec => &[
                "customer_by_name",
                "find_customer",
                "pay_warehouse",
                "warehouse",
                "pay_district",
                "district",
                "pay_customer",
                "customer",
                "customer_data",
                "insert_history",
            ],
        }
    }
}

/// `def` with its statements declared in `order`, which names each of them
/// once (checked by the tests).
fn declared_in(mut def: ProcedureDef, order: &[&str]) -> ProcedureDef {
    def.statements
        .sort_by_key(|(name, _)| order.iter().position(|o| o == name).unwrap_or(order.len()));
    def
}

/// New-order's district step (Fig. 3.5 lines 4-7): the order id must be
/// unique, so increment and read form one alkaline subtransaction, whose
/// lock Salt releases as soon as it commits. Returns (d_tax, o_id).
async fn take_order_id(ctx: &mut ProcCtx, w: &Value, d: &Value) -> Result<(Decimal, i64)> {
    ctx.begin_alkaline()?;
    ctx.exec("bump_district", vec![w.clone(), d.clone()])
        .await?;
    let dist = ctx.exec("district", vec![w.clone(), d.clone()]).await?;
    ctx.end_alkaline().await?;
    let drow = first(&dist, || format!("district ({w}, {d})"))?;
    let d_tax = decimal_at(drow, 0, "district")?;
    // The row now holds next_o_id + 1: this order takes the old value.
    Ok((d_tax, int_at(drow, 1, "district")? - 1))
}

/// New-order's W_TAX (Fig. 3.5 line 3).
async fn warehouse_tax(ctx: &mut ProcCtx, w: &Value) -> Result<Decimal> {
    let wh = ctx.exec("warehouse", vec![w.clone()]).await?;
    decimal_at(first(&wh, || format!("warehouse {w}"))?, 0, "warehouse")
}

fn new_order(order: StatementOrder) -> ProcedureDef {
    let def = ProcedureDef::new(NEW_ORDER)
        .statement(
            "bump_district",
            "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $w AND d_id = $d",
        )
        .statement(
            "district",
            "SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = $w AND d_id = $d",
        )
        .statement("warehouse", "SELECT w_tax FROM warehouse WHERE w_id = $w")
        .statement(
            "customer",
            "SELECT c_discount, c_last, c_credit FROM customer \
             WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .statement(
            "insert_order",
            "INSERT INTO orders (o_w_id, o_d_id, o_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local) \
             VALUES ($w, $d, $o, $c, $entry, $cnt, $local)",
        )
        .statement(
            "insert_new_order",
            "INSERT INTO new_order (no_w_id, no_d_id, no_o_id) VALUES ($w, $d, $o)",
        )
        .statement(
            "item",
            "SELECT i_price, i_name, i_data FROM item WHERE i_w_id = $w AND i_id = $i",
        )
        .statement(
            "stock",
            "SELECT s_quantity, s_data, s_dist_01, s_dist_02, s_dist_03, s_dist_04, s_dist_05, \
             s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10 FROM stock \
             WHERE s_w_id = $w AND s_i_id = $i",
        )
        .statement(
            "update_stock",
            "UPDATE stock SET s_quantity = $q, s_ytd = s_ytd + $qty, \
             s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + $remote \
             WHERE s_w_id = $w AND s_i_id = $i",
        )
        .statement(
            "insert_line",
            "INSERT INTO order_line (ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, \
             ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info) \
             VALUES ($w, $d, $o, $n, $i, $sw, $qty, $amount, $info)",
        )
        .body(move |mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: NEW_ORDER,
            };
            let w = a.get(0)?.clone();
            let w_id = a.int(0)?;
            let d = a.get(1)?.clone();
            let d_id = a.int(1)?;
            let c = a.get(2)?.clone();
            let entry = a.get(3)?.clone();
            let ol_cnt = a.int(4)?;
            if !(1..=MAX_OL_CNT as i64).contains(&ol_cnt) || !(1..=DISTRICTS).contains(&d_id) {
                return Err(Error::Internal(format!(
                    "tpcc new_order: bad ol_cnt {ol_cnt} or district {d_id}"
                )));
            }
            let mut lines = Vec::with_capacity(ol_cnt as usize);
            for l in 0..ol_cnt as usize {
                lines.push((a.int(5 + 3 * l)?, a.int(6 + 3 * l)?, a.int(7 + 3 * l)?));
            }
            let all_local = lines.iter().all(|&(_, sw, _)| sw == w_id);

            // Items and stock are visited in (supply warehouse, item) order
            // so that concurrent new orders lock stock rows in one global
            // order.
            let mut visit: Vec<usize> = (0..lines.len()).collect();
            visit.sort_by_key(|&l| (lines[l].1, lines[l].0, l));

            // Alkaline 1, the acceptance (Fig. 3.5 line 2: "Check whether
            // all items exist. Exit otherwise."): the only legitimate
            // abort, clause 2.4.2.3's unused item id, happens here, before
            // anything is written, so under Salt the 1% rollback is an
            // abort before acceptance, and under ACID it rolls back nothing.
            ctx.begin_alkaline()?;
            let mut prices = vec![Decimal::new(0, 2); lines.len()];
            for &l in &visit {
                let item = ctx
                    .exec("item", vec![w.clone(), Value::Int(lines[l].0)])
                    .await?;
                let Some(irow) = item.first() else {
                    return Err(ctx.abort(INVALID_ITEM));
                };
                prices[l] = decimal_at(irow, 0, "item")?;
            }
            ctx.end_alkaline().await?;

            // `--tpcc-order spec`: the hot rows where clause 2.4.2.2 and
            // Fig. 3.5 (lines 3-7) take them, right after the item check.
            let mut hot = None;
            if order == StatementOrder::Spec {
                let w_tax = warehouse_tax(&mut ctx, &w).await?;
                let (d_tax, o_id) = take_order_id(&mut ctx, &w, &d).await?;
                hot = Some((w_tax, d_tax, o_id));
            }

            // Fig. 3.5 line 8: a single-statement alkaline subtransaction.
            let cust = ctx
                .exec("customer", vec![w.clone(), d.clone(), c.clone()])
                .await?;
            let c_discount = decimal_at(
                first(&cust, || format!("customer ({w}, {d}, {c})"))?,
                0,
                "customer",
            )?;

            // Fig. 3.5 line 11 ("update stock level"): one alkaline
            // subtransaction per line, because the new quantity is computed
            // from the one read and two new orders must not both read the
            // old value.
            let mut line_values: Vec<(i64, Value)> = vec![(0, Value::Null); lines.len()];
            for &l in &visit {
                let (i_id, supply_w, qty) = lines[l];
                ctx.begin_alkaline()?;
                let stock = ctx
                    .exec("stock", vec![Value::Int(supply_w), Value::Int(i_id)])
                    .await?;
                let srow = first(&stock, || format!("stock ({supply_w}, {i_id})"))?;
                let s_quantity = int_at(srow, 0, "stock")?;
                let dist_info = cell(srow, 1 + d_id as usize, "stock")?.clone();
                let new_q = if s_quantity >= qty + 10 {
                    s_quantity - qty
                } else {
                    s_quantity - qty + 91
                };
                ctx.exec(
                    "update_stock",
                    vec![
                        Value::Int(new_q),
                        Value::Int(qty),
                        Value::Int(i64::from(supply_w != w_id)),
                        Value::Int(supply_w),
                        Value::Int(i_id),
                    ],
                )
                .await?;
                ctx.end_alkaline().await?;
                let amount_cents = units(prices[l], 2, "ol_amount")?
                    .checked_mul(qty)
                    .ok_or_else(|| overflow("ol_amount"))?;
                line_values[l] = (amount_cents, dist_info);
            }

            // The district row is the hot one: under ACID take it as late
            // as possible (the default order), then the warehouse at the end.
            let (d_tax, o_id) = match hot {
                Some((_, d_tax, o_id)) => (d_tax, o_id),
                None => take_order_id(&mut ctx, &w, &d).await?,
            };
            // Fig. 3.5 lines 9-11: every insert below is a single-statement
            // alkaline subtransaction. Salt Isolation keeps the order,
            // new-order and lines invisible to ACID transactions (delivery,
            // order-status, stock-level) until the last one is in.
            let o = Value::Int(o_id);
            ctx.exec(
                "insert_order",
                vec![
                    w.clone(),
                    d.clone(),
                    o.clone(),
                    c,
                    entry,
                    Value::Int(ol_cnt),
                    Value::Int(i64::from(all_local)),
                ],
            )
            .await?;
            ctx.exec("insert_new_order", vec![w.clone(), d.clone(), o.clone()])
                .await?;
            let mut total_cents: i64 = 0;
            for (n, (&(i_id, supply_w, qty), (amount_cents, dist_info))) in
                lines.iter().zip(line_values).enumerate()
            {
                total_cents += amount_cents;
                ctx.exec(
                    "insert_line",
                    vec![
                        w.clone(),
                        d.clone(),
                        o.clone(),
                        Value::Int(n as i64 + 1),
                        Value::Int(i_id),
                        Value::Int(supply_w),
                        Value::Int(qty),
                        Value::Decimal(Decimal::new(amount_cents, 2)),
                        dist_info,
                    ],
                )
                .await?;
            }
            // The warehouse row (written by every payment) last of all
            // (Fig. 3.5 line 3 reads it first; under Salt the place of this
            // single-statement subtransaction does not matter, under ACID
            // last is best).
            let w_tax = match hot {
                Some((w_tax, _, _)) => w_tax,
                None => warehouse_tax(&mut ctx, &w).await?,
            };
            // total = sum(ol_amount) * (1 - c_discount) * (1 + w_tax + d_tax),
            // taxes and discount at scale 4; shown to the terminal only.
            let disc = units(c_discount, 4, "c_discount")?;
            let tax = units(w_tax, 4, "w_tax")? + units(d_tax, 4, "d_tax")?;
            let total =
                i128::from(total_cents) * i128::from(10_000 - disc) * i128::from(10_000 + tax)
                    / 100_000_000;
            let total = i64::try_from(total).map_err(|_| overflow("total"))?;
            Ok(vec![o, Value::Decimal(Decimal::new(total, 2))])
        });
    declared_in(def, order.new_order_statements())
}

/// Payment's `ytd += amount` on the district and the warehouse, and their
/// names: district first in the default order (every payment of the
/// warehouse writes the warehouse row: under ACID the hottest lock is taken
/// last), warehouse first in clause 2.5.2.2's. Under Salt each statement is
/// a single-statement alkaline subtransaction: the blind increments on the
/// two hot rows commit at their partition at once (local optimization),
/// and the names read afterwards never change. Returns (w_name, d_name).
async fn pay_hot_rows(
    ctx: &mut ProcCtx,
    order: StatementOrder,
    amount: &Value,
    w: &Value,
    d: &Value,
) -> Result<(String, String)> {
    let mut names = (String::new(), String::new());
    let steps = match order {
        StatementOrder::HotLast => [false, true],
        StatementOrder::Spec => [true, false],
    };
    for warehouse in steps {
        if warehouse {
            ctx.exec("pay_warehouse", vec![amount.clone(), w.clone()])
                .await?;
            let wh = ctx.exec("warehouse", vec![w.clone()]).await?;
            names.0 = str_at(first(&wh, || format!("warehouse {w}"))?, 0, "warehouse")?.to_string();
        } else {
            ctx.exec("pay_district", vec![amount.clone(), w.clone(), d.clone()])
                .await?;
            let dist = ctx.exec("district", vec![w.clone(), d.clone()]).await?;
            names.1 = str_at(
                first(&dist, || format!("district ({w}, {d})"))?,
                0,
                "district",
            )?
            .to_string();
        }
    }
    Ok(names)
}

fn payment(order: StatementOrder) -> ProcedureDef {
    let mut def = ProcedureDef::new(PAYMENT)
        .statement(
            "pay_warehouse",
            "UPDATE warehouse SET w_ytd = w_ytd + $amount WHERE w_id = $w",
        )
        .statement(
            "warehouse",
            "SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip FROM warehouse \
             WHERE w_id = $w",
        )
        .statement(
            "pay_district",
            "UPDATE district SET d_ytd = d_ytd + $amount WHERE d_w_id = $w AND d_id = $d",
        )
        .statement(
            "district",
            "SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip FROM district \
             WHERE d_w_id = $w AND d_id = $d",
        )
        .statement(
            "customer_by_name",
            "SELECT c_id FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_last = $last \
             ORDER BY c_first",
        )
        .statement(
            "pay_customer",
            "UPDATE customer SET c_balance = c_balance - $amount, \
             c_ytd_payment = c_ytd_payment + $amount, c_payment_cnt = c_payment_cnt + 1 \
             WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .statement(
            "customer",
            "SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
             c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance, c_data \
             FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .statement(
            "customer_data",
            "UPDATE customer SET c_data = $data WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .statement(
            "insert_history",
            "INSERT INTO history (h_w_id, h_d_id, h_id, h_c_id, h_c_d_id, h_c_w_id, h_date, \
             h_amount, h_data) VALUES ($w, $d, $h, $c, $cd, $cw, $date, $amount, $data)",
        )
        .body(move |mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: PAYMENT,
            };
            let w = a.get(0)?.clone();
            let d = a.get(1)?.clone();
            let c_w = a.get(2)?.clone();
            let c_d = a.get(3)?.clone();
            let by_name = a.int(4)? != 0;
            let amount = a.decimal(7)?;
            let amount_v = Value::Decimal(amount);
            let h_date = a.get(8)?.clone();
            let h_id = a.get(9)?.clone();

            // Alkaline 1, the acceptance: the customer. Its lookup is the
            // only step that can fail on its input (no such customer), and
            // its updates must be atomic (C_DATA is rewritten from the value
            // read). The customer row is not contended.
            ctx.begin_alkaline()?;
            let c = customer_id(
                &mut ctx,
                "customer_by_name",
                &c_w,
                &c_d,
                by_name,
                a.get(5)?,
                a.get(6)?,
            )
            .await?;
            // `--tpcc-order spec`: the hot rows right after the customer
            // is found (clause 2.5.2.2 takes them first), which makes the
            // lookup an alkaline subtransaction of its own.
            let mut names = None;
            if order == StatementOrder::Spec {
                let cust = ctx
                    .exec("find_customer", vec![c_w.clone(), c_d.clone(), c.clone()])
                    .await?;
                first(&cust, || format!("customer ({c_w}, {c_d}, {c})"))?;
                ctx.end_alkaline().await?;
                names = Some(pay_hot_rows(&mut ctx, order, &amount_v, &w, &d).await?);
                ctx.begin_alkaline()?;
            }
            ctx.exec(
                "pay_customer",
                vec![amount_v.clone(), c_w.clone(), c_d.clone(), c.clone()],
            )
            .await?;
            let cust = ctx
                .exec("customer", vec![c_w.clone(), c_d.clone(), c.clone()])
                .await?;
            let crow = first(&cust, || format!("customer ({c_w}, {c_d}, {c})"))?;
            if str_at(crow, 10, "customer")? == "BC" {
                // Clause 2.5.2.2: bad credit prepends the payment to C_DATA,
                // keeping the 500 leftmost characters.
                let mut data = format!("{c} {c_d} {c_w} {d} {w} {amount} | ");
                data.push_str(str_at(crow, 14, "customer")?);
                data.truncate(500);
                ctx.exec(
                    "customer_data",
                    vec![Value::str(&data), c_w.clone(), c_d.clone(), c.clone()],
                )
                .await?;
            }
            ctx.end_alkaline().await?;
            let (w_name, d_name) = match names {
                Some(n) => n,
                None => pay_hot_rows(&mut ctx, order, &amount_v, &w, &d).await?,
            };
            let h_data = format!("{w_name}    {d_name}");
            ctx.exec(
                "insert_history",
                vec![
                    w,
                    d,
                    h_id,
                    c.clone(),
                    c_d,
                    c_w,
                    h_date,
                    amount_v,
                    Value::str(&h_data),
                ],
            )
            .await?;
            Ok(vec![c])
        });
    if order == StatementOrder::Spec {
        def = def.statement(
            "find_customer",
            "SELECT c_id FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        );
    }
    declared_in(def, order.payment_statements())
}

fn order_status() -> ProcedureDef {
    ProcedureDef::new(ORDER_STATUS)
        .statement(
            "customer_by_name",
            "SELECT c_id FROM customer WHERE c_w_id = $w AND c_d_id = $d AND c_last = $last \
             ORDER BY c_first",
        )
        .statement(
            "customer",
            "SELECT c_balance, c_first, c_middle, c_last FROM customer \
             WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .statement(
            "last_order",
            "SELECT o_id, o_entry_d, o_carrier_id FROM orders \
             WHERE o_w_id = $w AND o_d_id = $d AND o_c_id = $c ORDER BY o_id DESC LIMIT 1",
        )
        .statement(
            "lines",
            "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d \
             FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id = $o",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: ORDER_STATUS,
            };
            let w = a.get(0)?.clone();
            let d = a.get(1)?.clone();
            let by_name = a.int(2)? != 0;
            let c = customer_id(
                &mut ctx,
                "customer_by_name",
                &w,
                &d,
                by_name,
                a.get(3)?,
                a.get(4)?,
            )
            .await?;
            let cust = ctx
                .exec("customer", vec![w.clone(), d.clone(), c.clone()])
                .await?;
            first(&cust, || format!("customer ({w}, {d}, {c})"))?;
            let order = ctx
                .exec("last_order", vec![w.clone(), d.clone(), c.clone()])
                .await?;
            let o_id = int_at(
                first(&order, || format!("an order of customer ({w}, {d}, {c})"))?,
                0,
                "last order",
            )?;
            let lines = ctx.exec("lines", vec![w, d, Value::Int(o_id)]).await?;
            Ok(vec![c, Value::Int(o_id), Value::Int(lines.len() as i64)])
        })
}

fn delivery() -> ProcedureDef {
    ProcedureDef::new(DELIVERY)
        // MIN(no_o_id), written as ORDER BY .. LIMIT 1 so that the range
        // lock covers only the scanned prefix of the district (up to the
        // oldest order) and new orders inserted at the top do not wait.
        .statement(
            "oldest_new_order",
            "SELECT no_o_id FROM new_order WHERE no_w_id = $w AND no_d_id = $d \
             ORDER BY no_o_id LIMIT 1",
        )
        .statement(
            "delete_new_order",
            "DELETE FROM new_order WHERE no_w_id = $w AND no_d_id = $d AND no_o_id = $o",
        )
        .statement(
            "set_carrier",
            "UPDATE orders SET o_carrier_id = $carrier WHERE o_w_id = $w AND o_d_id = $d AND o_id = $o",
        )
        .statement(
            "order_customer",
            "SELECT o_c_id FROM orders WHERE o_w_id = $w AND o_d_id = $d AND o_id = $o",
        )
        .statement(
            "stamp_lines",
            "UPDATE order_line SET ol_delivery_d = $now \
             WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id = $o",
        )
        .statement(
            "sum_lines",
            "SELECT SUM(ol_amount) FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d AND ol_o_id = $o",
        )
        .statement(
            "credit_customer",
            "UPDATE customer SET c_balance = c_balance + $amount, \
             c_delivery_cnt = c_delivery_cnt + 1 WHERE c_w_id = $w AND c_d_id = $d AND c_id = $c",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: DELIVERY,
            };
            let w = a.get(0)?.clone();
            let carrier = a.get(1)?.clone();
            let now = a.get(2)?.clone();
            // An optional fourth argument delivers that district only
            // (clause 2.7.4.2: one database transaction per district, how
            // the deferred-delivery worker runs it).
            let districts = match args.len() {
                3 => 1..=DISTRICTS,
                4 => {
                    let d = a.int(3)?;
                    if !(1..=DISTRICTS).contains(&d) {
                        return Err(Error::Bound(format!(
                            "tpcc delivery: district {d} is not between 1 and {DISTRICTS}"
                        )));
                    }
                    d..=d
                }
                got => {
                    return Err(Error::Arity {
                        what: format!("procedure `{DELIVERY}`"),
                        expected: 4,
                        got,
                    })
                }
            };
            let mut delivered = 0i64;
            // Bounded, so a bug cannot spin; each failed claim means a
            // concurrent delivery took the order.
            const MAX_CLAIM_ATTEMPTS: usize = 64;
            for d_id in districts {
                let d = Value::Int(d_id);
                // BASE (`--base ...,delivery`): claiming the oldest new
                // order is one alkaline subtransaction (find it, delete it),
                // so two deliveries never deliver the same order; the
                // statements after it are single-statement subtransactions.
                //
                // At read committed the read lock of the first statement
                // is short: a concurrent delivery may claim the same order
                // between the two statements. The delete then finds nothing,
                // and the next oldest is tried (someone else progressed).
                ctx.begin_alkaline()?;
                let mut claimed = None;
                for _ in 0..MAX_CLAIM_ATTEMPTS {
                    let oldest = ctx
                        .exec("oldest_new_order", vec![w.clone(), d.clone()])
                        .await?;
                    // Clause 2.7.4.2: a district without a new order is
                    // skipped (and reported).
                    let Some(row) = oldest.first() else { break };
                    let o = Value::Int(int_at(row, 0, "new_order")?);
                    let deleted = ctx
                        .exec("delete_new_order", vec![w.clone(), d.clone(), o.clone()])
                        .await?;
                    if deleted.affected == 1 {
                        claimed = Some(o);
                        break;
                    }
                }
                ctx.end_alkaline().await?;
                let Some(o) = claimed else { continue };
                ctx.exec(
                    "set_carrier",
                    vec![carrier.clone(), w.clone(), d.clone(), o.clone()],
                )
                .await?;
                let order = ctx
                    .exec("order_customer", vec![w.clone(), d.clone(), o.clone()])
                    .await?;
                let c = cell(first(&order, || format!("order ({w}, {d}, {o})"))?, 0, "order")?
                    .clone();
                ctx.exec(
                    "stamp_lines",
                    vec![now.clone(), w.clone(), d.clone(), o.clone()],
                )
                .await?;
                let sum = ctx
                    .exec("sum_lines", vec![w.clone(), d.clone(), o.clone()])
                    .await?;
                let amount = sum
                    .scalar()
                    .and_then(Value::as_decimal)
                    .ok_or_else(|| {
                        Error::Internal(format!("tpcc delivery: order ({w}, {d}, {o}) has no lines"))
                    })?;
                ctx.exec(
                    "credit_customer",
                    vec![Value::Decimal(amount), w.clone(), d, c],
                )
                .await?;
                delivered += 1;
            }
            Ok(vec![Value::Int(delivered)])
        })
}

fn stock_level() -> ProcedureDef {
    ProcedureDef::new(STOCK_LEVEL)
        .statement(
            "district",
            "SELECT d_next_o_id FROM district WHERE d_w_id = $w AND d_id = $d",
        )
        .statement(
            "recent_lines",
            "SELECT ol_i_id FROM order_line WHERE ol_w_id = $w AND ol_d_id = $d \
             AND ol_o_id >= $lo AND ol_o_id < $hi",
        )
        .statement(
            "stock",
            "SELECT s_quantity FROM stock WHERE s_w_id = $w AND s_i_id = $i",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: STOCK_LEVEL,
            };
            let w = a.get(0)?.clone();
            let d = a.get(1)?.clone();
            let threshold = a.int(2)?;
            let dist = ctx.exec("district", vec![w.clone(), d.clone()]).await?;
            let next = int_at(
                first(&dist, || format!("district ({w}, {d})"))?,
                0,
                "district",
            )?;
            let lines = ctx
                .exec(
                    "recent_lines",
                    vec![
                        w.clone(),
                        d,
                        Value::Int(next - STOCK_LEVEL_ORDERS),
                        Value::Int(next),
                    ],
                )
                .await?;
            let mut items = BTreeSet::new();
            for row in &lines.rows {
                items.insert(int_at(row, 0, "order_line")?);
            }
            let mut low = 0i64;
            for i in items {
                let s = ctx.exec("stock", vec![w.clone(), Value::Int(i)]).await?;
                let q = int_at(first(&s, || format!("stock ({w}, {i})"))?, 0, "stock")?;
                if q < threshold {
                    low += 1;
                }
            }
            Ok(vec![Value::Int(low)])
        })
}

/// `make(order)`, offering the bodies of the other statement orders as
/// reorderings: Callas' analysis may run one of them where its chopping
/// runs better (seed 002 section 6.1; `brine_cluster::Reordering`);
/// every other protocol runs `order`'s body.
fn reorderable(
    make: fn(StatementOrder) -> ProcedureDef,
    listed: fn(StatementOrder) -> &'static [&'static str],
    order: StatementOrder,
) -> ProcedureDef {
    let mut def = make(order);
    for other in StatementOrder::ALL.into_iter().filter(|o| *o != order) {
        def = def.reordered(other.name(), listed(other), make(other).body);
    }
    def
}

/// The schema and the five procedures; those in `base` are BASE
/// procedures (their alkaline marks matter under Salt). New-order runs
/// `order`'s body and offers the other's as a reordering; payment's two
/// bodies are not reorderings of each other (clause 2's reads the
/// customer once more, `find_customer`).
pub fn application(base: &BaseSet, order: StatementOrder, stock: Isolation) -> Application {
    Application {
        name: "tpcc".into(),
        ddl: DDL.into(),
        procedures: [
            reorderable(new_order, StatementOrder::new_order_statements, order),
            payment(order),
            order_status(),
            delivery(),
            stock_level().isolation(stock),
        ]
        .into_iter()
        .map(|p| base.apply(p))
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analysis reads declaration order as execution order: each
    /// variant declares exactly the statements its order lists, in that
    /// order.
    #[test]
    fn new_order_and_payment_declare_their_statements_in_body_order() {
        for order in StatementOrder::ALL {
            for (def, listed) in [
                (new_order(order), order.new_order_statements()),
                (payment(order), order.payment_statements()),
            ] {
                let declared: Vec<&str> = def.statements.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(declared, listed, "{} ({})", def.name, order.name());
            }
        }
    }
}
