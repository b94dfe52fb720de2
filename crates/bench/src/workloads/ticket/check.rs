//! The ticketing invariants, checked on a snapshot of every table read in
//! one serializable transaction after a run.
//!
//! ```text
//!  seats      every seat is free (no cart, no order), held by exactly one
//!             existing cart (and listed in it), or sold in exactly one
//!             existing order (and listed in it); no seat is in two carts
//!             or two orders ("no seat sold twice")
//!  carts      item count and total agree with the items; items carry the
//!             category's price
//!  orders     item count and total agree with the items
//!  counters   per category: free = seats free or held, sold = seats sold,
//!             free + sold = capacity = seats of the category;
//!             event: free and sold are the categories' sums, order count
//!             is the number of orders, revenue the sum of order totals
//!  payments   exactly the paid (and ticketed) orders have a payment, and
//!             it equals the order's total
//!  tickets    exactly the ticketed orders have tickets, one per seat
//! ```
//!
//! The counters count *unsold* seats as free: a cart's hold is provisional
//! and only create-order (and delete-order) move seats between free and
//! sold, so the counters everyone shares are written by those two alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use brine_cluster::Cluster;
use brine_core::{Row, Value};

use super::schema::{
    Hall, CATEGORIES, EVENT_ID, ORDER_PAID, ORDER_PLACED, ORDER_TICKETED, SEAT_FREE, SEAT_HELD,
    SEAT_SOLD,
};
use crate::error::{BenchError, Result};

/// How many violations are quoted in the error.
const QUOTED: usize = 8;

/// The queries of the snapshot, in reading order.
const QUERIES: [&str; 11] = [
    "SELECT seat_id, category_id, status, cart_id, order_id FROM seat",
    "SELECT cart_id, seats, total FROM cart",
    "SELECT cart_id, seat_id, category_id, price FROM cart_item",
    "SELECT order_id, seats, total, status FROM orders",
    "SELECT order_id, seat_id, category_id, price FROM order_item",
    "SELECT order_id, amount FROM payment",
    "SELECT order_id, seat_id FROM ticket",
    "SELECT category_id, free_count, sold_count FROM category_counters",
    "SELECT category_id, price, capacity, first_seat FROM category",
    "SELECT event_id, free_count, sold_count, order_count, revenue FROM event_counters",
    "SELECT event_id FROM event",
];

/// Every table's rows, as the queries above return them.
pub struct Snapshot {
    tables: Vec<Vec<Row>>,
}

impl Snapshot {
    /// Reads every table in one transaction (retried if it is a
    /// concurrency-control victim, which after a run it should not be).
    pub async fn read(cluster: &Cluster) -> Result<Snapshot> {
        let client = cluster.client();
        let mut last = String::new();
        for _ in 0..20 {
            let mut txn = client.begin();
            let mut tables = Vec::with_capacity(QUERIES.len());
            let mut failed = None;
            for sql in QUERIES {
                match txn.execute(sql, vec![]).await {
                    Ok(q) => tables.push(q.rows),
                    Err(e) => {
                        failed = Some((sql, e));
                        break;
                    }
                }
            }
            match failed {
                None => match txn.commit().await {
                    Ok(()) => return Ok(Snapshot { tables }),
                    Err(e) if e.is_retryable() => last = e.to_string(),
                    Err(e) => {
                        return Err(BenchError::cluster("ticket check: committing the snapshot")(e))
                    }
                },
                Some((_, e)) if e.is_retryable() => {
                    txn.abort().await;
                    last = e.to_string();
                }
                Some((sql, e)) => {
                    txn.abort().await;
                    return Err(BenchError::cluster(format!("ticket check: `{sql}`"))(e));
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(BenchError::Internal(format!(
            "ticket check: the snapshot kept aborting after the run: {last}"
        )))
    }

    /// Checks every invariant; `Err(BenchError::Invariant)` quotes the first
    /// violations and counts them all.
    pub fn verify(&self, hall: Hall) -> Result<()> {
        let v = self.violations(hall);
        if v.is_empty() {
            return Ok(());
        }
        let quoted: Vec<&str> = v.iter().take(QUOTED).map(String::as_str).collect();
        Err(BenchError::Invariant(format!(
            "ticket: {} violation(s): {}",
            v.len(),
            quoted.join("; ")
        )))
    }

    /// Every violation found, as a sentence each.
    pub fn violations(&self, hall: Hall) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(e) = self.check(hall, &mut out) {
            out.push(e);
        }
        out
    }

    fn table(&self, i: usize) -> &[Row] {
        self.tables.get(i).map_or(&[], Vec::as_slice)
    }

    fn check(&self, hall: Hall, out: &mut Vec<String>) -> Result<(), String> {
        // ---- read and type every row ----
        struct Seat {
            category: i64,
            status: i64,
            cart: Option<i64>,
            order: Option<i64>,
        }
        let mut seats: BTreeMap<i64, Seat> = BTreeMap::new();
        for r in self.table(0) {
            seats.insert(
                int(r, 0, "seat.seat_id")?,
                Seat {
                    category: int(r, 1, "seat.category_id")?,
                    status: int(r, 2, "seat.status")?,
                    cart: opt_int(r, 3, "seat.cart_id")?,
                    order: opt_int(r, 4, "seat.order_id")?,
                },
            );
        }
        let mut carts: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        for r in self.table(1) {
            carts.insert(
                int(r, 0, "cart.cart_id")?,
                (int(r, 1, "cart.seats")?, cents(r, 2, "cart.total")?),
            );
        }
        // (cart or order, seat) -> (category, price)
        let items = |t: usize, what: &str| -> Result<Vec<(i64, i64, i64, i64)>, String> {
            self.table(t)
                .iter()
                .map(|r| {
                    Ok((
                        int(r, 0, what)?,
                        int(r, 1, what)?,
                        int(r, 2, what)?,
                        cents(r, 3, what)?,
                    ))
                })
                .collect()
        };
        let cart_items = items(2, "cart_item")?;
        let mut orders: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
        for r in self.table(3) {
            orders.insert(
                int(r, 0, "orders.order_id")?,
                (
                    int(r, 1, "orders.seats")?,
                    cents(r, 2, "orders.total")?,
                    int(r, 3, "orders.status")?,
                ),
            );
        }
        let order_items = items(4, "order_item")?;
        let mut payments: BTreeMap<i64, i64> = BTreeMap::new();
        for r in self.table(5) {
            payments.insert(
                int(r, 0, "payment.order_id")?,
                cents(r, 1, "payment.amount")?,
            );
        }
        let mut tickets: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        for r in self.table(6) {
            tickets
                .entry(int(r, 0, "ticket.order_id")?)
                .or_default()
                .insert(int(r, 1, "ticket.seat_id")?);
        }
        let mut counters: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        for r in self.table(7) {
            counters.insert(
                int(r, 0, "category_counters.category_id")?,
                (
                    int(r, 1, "category_counters.free_count")?,
                    int(r, 2, "category_counters.sold_count")?,
                ),
            );
        }
        let mut categories: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
        for r in self.table(8) {
            categories.insert(
                int(r, 0, "category.category_id")?,
                (
                    cents(r, 1, "category.price")?,
                    int(r, 2, "category.capacity")?,
                    int(r, 3, "category.first_seat")?,
                ),
            );
        }

        // ---- seats against carts and orders ----
        let mut in_carts: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &(cart, seat, _, _) in &cart_items {
            in_carts.entry(seat).or_default().push(cart);
        }
        let mut in_orders: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &(order, seat, _, _) in &order_items {
            in_orders.entry(seat).or_default().push(order);
        }
        if seats.len() as u64 != hall.total_seats() {
            out.push(format!(
                "the hall has {} seats, expected {}",
                seats.len(),
                hall.total_seats()
            ));
        }
        for (&id, s) in &seats {
            let carts_of = in_carts.get(&id).map_or(&[][..], Vec::as_slice);
            let orders_of = in_orders.get(&id).map_or(&[][..], Vec::as_slice);
            if carts_of.len() > 1 {
                out.push(format!(
                    "seat {id} is in {} carts {carts_of:?}",
                    carts_of.len()
                ));
            }
            if orders_of.len() > 1 {
                out.push(format!("seat {id} is sold twice, in orders {orders_of:?}"));
            }
            let ok = match (s.status, s.cart, s.order) {
                (SEAT_FREE, None, None) => carts_of.is_empty() && orders_of.is_empty(),
                (SEAT_HELD, Some(c), None) => {
                    carts.contains_key(&c) && carts_of == [c] && orders_of.is_empty()
                }
                (SEAT_SOLD, None, Some(o)) => {
                    orders.contains_key(&o) && orders_of == [o] && carts_of.is_empty()
                }
                _ => false,
            };
            if !ok {
                out.push(format!(
                    "seat {id} has status {} (cart {:?}, order {:?}) but is listed in carts {carts_of:?} and orders {orders_of:?}",
                    s.status, s.cart, s.order
                ));
            }
            let expected_category = hall.category_of(id).map(|k| CATEGORIES[k].id);
            if expected_category != Some(s.category) {
                out.push(format!(
                    "seat {id} is in category {}, expected {expected_category:?}",
                    s.category
                ));
            }
        }
        for &(cart, seat, _, _) in &cart_items {
            if !carts.contains_key(&cart) {
                out.push(format!(
                    "cart item of seat {seat} belongs to no cart ({cart})"
                ));
            }
            if !seats.contains_key(&seat) {
                out.push(format!(
                    "cart {cart} holds seat {seat}, which does not exist"
                ));
            }
        }
        for &(order, seat, _, _) in &order_items {
            if !orders.contains_key(&order) {
                out.push(format!(
                    "order item of seat {seat} belongs to no order ({order})"
                ));
            }
            if !seats.contains_key(&seat) {
                out.push(format!(
                    "order {order} sold seat {seat}, which does not exist"
                ));
            }
        }

        // ---- carts and orders against their items ----
        let sums = |list: &[(i64, i64, i64, i64)], what: &str, out: &mut Vec<String>| {
            let mut m: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
            for &(owner, seat, category, price) in list {
                let e = m.entry(owner).or_insert((0, 0));
                e.0 += 1;
                e.1 += price;
                match categories.get(&category) {
                    Some(&(p, _, _)) if p == price => {}
                    _ => out.push(format!(
                        "{what} {owner} has seat {seat} of category {category} at {price} cents, not the category's price"
                    )),
                }
                if seats.get(&seat).map(|s| s.category) != Some(category) {
                    out.push(format!(
                        "{what} {owner} lists seat {seat} under category {category}, which is not the seat's"
                    ));
                }
            }
            m
        };
        let cart_sums = sums(&cart_items, "cart", out);
        for (&cart, &(n, total)) in &carts {
            let got = cart_sums.get(&cart).copied().unwrap_or((0, 0));
            if got != (n, total) || n == 0 {
                out.push(format!(
                    "cart {cart} says {n} seats for {total} cents, its items are {} seats for {} cents",
                    got.0, got.1
                ));
            }
        }
        let order_sums = sums(&order_items, "order", out);
        for (&order, &(n, total, status)) in &orders {
            let got = order_sums.get(&order).copied().unwrap_or((0, 0));
            if got != (n, total) || n == 0 {
                out.push(format!(
                    "order {order} says {n} seats for {total} cents, its items are {} seats for {} cents",
                    got.0, got.1
                ));
            }
            // ---- payments and tickets ----
            let paid = payments.get(&order).copied();
            match status {
                ORDER_PLACED if paid.is_some() => {
                    out.push(format!("order {order} is unpaid but has a payment"))
                }
                ORDER_PAID | ORDER_TICKETED if paid != Some(total) => out.push(format!(
                    "order {order} totals {total} cents but its payment is {paid:?}"
                )),
                ORDER_PLACED | ORDER_PAID | ORDER_TICKETED => {}
                other => out.push(format!("order {order} has unknown status {other}")),
            }
            let issued = tickets.get(&order);
            if status == ORDER_TICKETED {
                let sold: BTreeSet<i64> = order_items
                    .iter()
                    .filter(|i| i.0 == order)
                    .map(|i| i.1)
                    .collect();
                if issued != Some(&sold) {
                    out.push(format!(
                        "order {order} is ticketed for seats {sold:?} but has tickets {issued:?}"
                    ));
                }
            } else if issued.is_some() {
                out.push(format!(
                    "order {order} has tickets but status {status} (not ticketed)"
                ));
            }
        }
        for (&order, &amount) in &payments {
            if !orders.contains_key(&order) {
                out.push(format!(
                    "payment of {amount} cents for missing order {order}"
                ));
            }
        }
        for order in tickets.keys() {
            if !orders.contains_key(order) {
                out.push(format!("tickets for missing order {order}"));
            }
        }

        // ---- counters ----
        let (mut free_sum, mut sold_sum) = (0i64, 0i64);
        for (k, c) in CATEGORIES.iter().enumerate() {
            let of_cat = seats.values().filter(|s| s.category == c.id);
            let (mut free, mut held, mut sold) = (0i64, 0i64, 0i64);
            for s in of_cat {
                match s.status {
                    SEAT_FREE => free += 1,
                    SEAT_HELD => held += 1,
                    SEAT_SOLD => sold += 1,
                    _ => {}
                }
            }
            let capacity = hall.seats_per_category as i64;
            match categories.get(&c.id) {
                Some(&(price, cap, first))
                    if price == c.price_cents && cap == capacity && first == hall.first_seat(k) => {}
                other => out.push(format!(
                    "category {} is {other:?} (price cents, capacity, first seat), expected ({}, {capacity}, {})",
                    c.id,
                    c.price_cents,
                    hall.first_seat(k)
                )),
            }
            match counters.get(&c.id) {
                Some(&(f, s)) => {
                    if f != free + held || s != sold || f + s != capacity {
                        out.push(format!(
                            "category {} counters say {f} free, {s} sold; its seats are {free} free + {held} held, {sold} sold, of {capacity}",
                            c.id
                        ));
                    }
                    free_sum += f;
                    sold_sum += s;
                }
                None => out.push(format!("category {} has no counters", c.id)),
            }
        }
        let event_rows = self.table(9);
        if event_rows.len() != 1 || self.table(10).len() != 1 {
            out.push(format!(
                "expected one event with one counters row, found {} events and {} counter rows",
                self.table(10).len(),
                event_rows.len()
            ));
        }
        for r in event_rows {
            let id = int(r, 0, "event_counters.event_id")?;
            let got = (
                int(r, 1, "event_counters.free_count")?,
                int(r, 2, "event_counters.sold_count")?,
                int(r, 3, "event_counters.order_count")?,
                cents(r, 4, "event_counters.revenue")?,
            );
            let revenue: i64 = orders.values().map(|o| o.1).sum();
            let want = (free_sum, sold_sum, orders.len() as i64, revenue);
            if id != EVENT_ID || got != want {
                out.push(format!(
                    "event {id} counters (free, sold, orders, revenue cents) are {got:?}, expected {want:?}"
                ));
            }
        }
        Ok(())
    }
}

fn int(r: &Row, i: usize, what: &str) -> Result<i64, String> {
    r.get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| format!("{what} is not an INT: {:?}", r.get(i)))
}

fn opt_int(r: &Row, i: usize, what: &str) -> Result<Option<i64>, String> {
    match r.get(i) {
        Some(Value::Null) => Ok(None),
        _ => int(r, i, what).map(Some),
    }
}

fn cents(r: &Row, i: usize, what: &str) -> Result<i64, String> {
    r.get(i)
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| format!("{what} is not a money value: {:?}", r.get(i)))
}
