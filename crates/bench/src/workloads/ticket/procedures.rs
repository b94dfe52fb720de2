//! The eleven procedures of the booking flow.
//!
//! ```text
//!  browse_events()                          list the events (static rows)
//!  view_event(event)                        the event and its categories with prices
//!  lookup_customer(email)                   log in: customer id by e-mail
//!  list_free_seats(category, from)         up to 12 free seats of a category from a seat id on
//!  reserve_seats(cart, customer, event, category, stale_cart, seat...)
//!                                           replace the visitor's stale cart (if any),
//!                                           hold the seats, fill a new cart
//!  view_cart(cart)                          the cart and its items
//!  create_order(cart, order, customer, event)   <- the hot one ("checkout"),
//!                                           BASE under Salt (see `create_order`)
//!      read cart and items, clear the cart (items and cart deleted); INSERT
//!      order; per seat: held -> sold, INSERT order item; per category:
//!      counters free -= n, sold += n; event counters (free, sold, orders, revenue)
//!  pay(order, amount)                       INSERT payment (= order total); order paid
//!  issue_tickets(order)                     INSERT one ticket per seat; order ticketed
//!  view_order(order)                        the order, its items and tickets
//!  delete_order(event, order...)            administrative: per order, seats sold -> free,
//!                                           tickets, payment, items and order deleted;
//!                                           then counters restored
//! ```
//!
//! Every statement the flow runs is a point or key-prefix statement; seats
//! are touched in the order the caller gives (clients sort them), counters
//! always category (ascending id) before event, so create-order and
//! delete-order never deadlock on the counters.
//!
//! User aborts are the application's answers ("seat taken", "no such
//! cart"); the session counts them. A broken invariant that a statement
//! can see (a counter that would go negative, a sold seat not in its order)
//! is `Error::Internal`, which stops a benchmark run: it is a bug.

use std::collections::BTreeMap;

use brine_cluster::{ProcCtx, ProcedureDef, QueryResult};

use crate::workloads::base::BaseSet;
use brine_core::{Error, Result, Row, Value};

use super::schema::{money, ORDER_PAID, ORDER_PLACED, ORDER_TICKETED};

pub const BROWSE_EVENTS: &str = "browse_events";
pub const VIEW_EVENT: &str = "view_event";
pub const LOOKUP_CUSTOMER: &str = "lookup_customer";
pub const LIST_FREE_SEATS: &str = "list_free_seats";
pub const RESERVE_SEATS: &str = "reserve_seats";
pub const VIEW_CART: &str = "view_cart";
pub const CREATE_ORDER: &str = "create_order";
pub const PAY: &str = "pay";
pub const ISSUE_TICKETS: &str = "issue_tickets";
pub const VIEW_ORDER: &str = "view_order";
pub const DELETE_ORDER: &str = "delete_order";

/// Every procedure, in booking-flow order.
pub const ALL: [&str; 11] = [
    BROWSE_EVENTS,
    VIEW_EVENT,
    LOOKUP_CUSTOMER,
    LIST_FREE_SEATS,
    RESERVE_SEATS,
    VIEW_CART,
    CREATE_ORDER,
    PAY,
    ISSUE_TICKETS,
    VIEW_ORDER,
    DELETE_ORDER,
];

/// Prefix of the user abort of a reservation that lost a seat to another
/// customer: the one user abort the session model expects.
pub const SEAT_TAKEN: &str = "seat taken";

/// Most seats one cart may hold.
pub const MAX_SEATS_PER_CART: usize = 8;
/// Seats one listing shows. A literal LIMIT: a broadcast SELECT (seats of
/// a category live on every partition) cannot take its limit as a parameter.
pub const LIST_LIMIT: i64 = 12;
/// Most orders one delete_order call deletes.
pub const MAX_DELETE_BATCH: usize = 64;

// Statements shared by several procedures.
const CART: &str = "SELECT customer_id, event_id, seats, total FROM cart WHERE cart_id = $cart";
const CART_ITEMS: &str =
    "SELECT seat_id, category_id, price FROM cart_item WHERE cart_id = $cart ORDER BY seat_id";
const DELETE_CART_ITEMS: &str = "DELETE FROM cart_item WHERE cart_id = $cart";
const DELETE_CART: &str = "DELETE FROM cart WHERE cart_id = $cart";
const ORDER: &str = "SELECT customer_id, seats, total, status FROM orders WHERE order_id = $order";
const ORDER_ITEMS: &str =
    "SELECT seat_id, category_id, price FROM order_item WHERE order_id = $order ORDER BY seat_id";
const RELEASE_SEAT: &str = "UPDATE seat SET status = 0, cart_id = NULL \
     WHERE seat_id = $seat AND status = 1 AND cart_id = $cart";

/// Procedures `--base` may name: create-order, the one the sources
/// BASE-ified (seed 000 section 3.6.1, the default), and delete-order,
/// brine's steady-state device, the next most contended (both write the
/// hot counters). The others have no alkaline blocks or handlers;
/// BASE-ifying them would need both (a reservation that loses its third
/// seat must release the first two).
pub const BASE_CAPABLE: [&str; 2] = [CREATE_ORDER, DELETE_ORDER];

/// The procedure definitions; those in `base` are BASE procedures.
pub fn procedures(base: &BaseSet) -> Vec<ProcedureDef> {
    let all = vec![
        ProcedureDef::new(BROWSE_EVENTS)
            .statement(
                "events",
                "SELECT event_id, name, venue, starts_at FROM event ORDER BY event_id LIMIT 20",
            )
            .body(|mut ctx, args| async move { browse_events(&mut ctx, args).await }),
        ProcedureDef::new(VIEW_EVENT)
            .statement(
                "event",
                "SELECT name, venue, starts_at FROM event WHERE event_id = $event",
            )
            .statement(
                "categories",
                "SELECT category_id, name, price, capacity, first_seat FROM category \
                 WHERE event_id = $event ORDER BY category_id",
            )
            .body(|mut ctx, args| async move { view_event(&mut ctx, args).await }),
        ProcedureDef::new(LOOKUP_CUSTOMER)
            .statement(
                "by_email",
                "SELECT customer_id, name FROM customer WHERE email = $email",
            )
            .body(|mut ctx, args| async move { lookup_customer(&mut ctx, args).await }),
        ProcedureDef::new(LIST_FREE_SEATS)
            .statement(
                "free",
                format!(
                    "SELECT seat_id, row_no, seat_no FROM seat \
                     WHERE category_id = $category AND status = 0 AND seat_id >= $from \
                     ORDER BY seat_id LIMIT {LIST_LIMIT}"
                ),
            )
            .body(|mut ctx, args| async move { list_free_seats(&mut ctx, args).await }),
        ProcedureDef::new(RESERVE_SEATS)
            .statement("stale_items", CART_ITEMS)
            .statement("release_seat", RELEASE_SEAT)
            .statement("delete_items", DELETE_CART_ITEMS)
            .statement("delete_cart", DELETE_CART)
            .statement(
                "price",
                "SELECT price FROM category WHERE event_id = $event AND category_id = $category",
            )
            .statement(
                "hold_seat",
                "UPDATE seat SET status = 1, cart_id = $cart \
                 WHERE seat_id = $seat AND status = 0 AND category_id = $category",
            )
            .statement(
                "insert_item",
                "INSERT INTO cart_item (cart_id, seat_id, category_id, price) \
                 VALUES ($cart, $seat, $category, $price)",
            )
            .statement(
                "insert_cart",
                "INSERT INTO cart (cart_id, customer_id, event_id, seats, total) \
                 VALUES ($cart, $customer, $event, $seats, $total)",
            )
            .body(|mut ctx, args| async move { reserve_seats(&mut ctx, args).await }),
        ProcedureDef::new(VIEW_CART)
            .statement("cart", CART)
            .statement("items", CART_ITEMS)
            .body(|mut ctx, args| async move { view_cart(&mut ctx, args).await }),
        ProcedureDef::new(CREATE_ORDER)
            .statement("cart", CART)
            .statement("items", CART_ITEMS)
            .statement(
                "insert_order",
                "INSERT INTO orders (order_id, customer_id, event_id, seats, total, status) \
                 VALUES ($order, $customer, $event, $seats, $total, 0)",
            )
            .statement(
                "sell_seat",
                "UPDATE seat SET status = 2, cart_id = NULL, order_id = $order \
                 WHERE seat_id = $seat AND status = 1 AND cart_id = $cart",
            )
            .statement(
                "insert_item",
                "INSERT INTO order_item (order_id, seat_id, category_id, price) \
                 VALUES ($order, $seat, $category, $price)",
            )
            .statement(
                "sell_category",
                "UPDATE category_counters \
                 SET free_count = free_count - $n, sold_count = sold_count + $n \
                 WHERE event_id = $event AND category_id = $category AND free_count >= $n",
            )
            .statement(
                "sell_event",
                "UPDATE event_counters \
                 SET free_count = free_count - $n, sold_count = sold_count + $n, \
                     order_count = order_count + 1, revenue = revenue + $total \
                 WHERE event_id = $event AND free_count >= $n",
            )
            .statement("delete_items", DELETE_CART_ITEMS)
            .statement("delete_cart", DELETE_CART)
            .body(|mut ctx, args| async move { create_order(&mut ctx, args).await }),
        ProcedureDef::new(PAY)
            .statement("order", ORDER)
            .statement(
                "insert_payment",
                "INSERT INTO payment (order_id, amount, method) VALUES ($order, $amount, 'card')",
            )
            .statement(
                "mark_paid",
                "UPDATE orders SET status = 1 WHERE order_id = $order AND status = 0",
            )
            .body(|mut ctx, args| async move { pay(&mut ctx, args).await }),
        ProcedureDef::new(ISSUE_TICKETS)
            .statement("order", ORDER)
            .statement("items", ORDER_ITEMS)
            .statement(
                "insert_ticket",
                "INSERT INTO ticket (order_id, seat_id, code) VALUES ($order, $seat, $code)",
            )
            .statement(
                "mark_ticketed",
                "UPDATE orders SET status = 2 WHERE order_id = $order AND status = 1",
            )
            .body(|mut ctx, args| async move { issue_tickets(&mut ctx, args).await }),
        ProcedureDef::new(VIEW_ORDER)
            .statement("order", ORDER)
            .statement("items", ORDER_ITEMS)
            .statement(
                "tickets",
                "SELECT seat_id, code FROM ticket WHERE order_id = $order ORDER BY seat_id",
            )
            .body(|mut ctx, args| async move { view_order(&mut ctx, args).await }),
        ProcedureDef::new(DELETE_ORDER)
            .statement("order", ORDER)
            .statement("items", ORDER_ITEMS)
            .statement(
                "delete_tickets",
                "DELETE FROM ticket WHERE order_id = $order",
            )
            .statement(
                "delete_payment",
                "DELETE FROM payment WHERE order_id = $order",
            )
            .statement(
                "delete_items",
                "DELETE FROM order_item WHERE order_id = $order",
            )
            .statement("delete_order", "DELETE FROM orders WHERE order_id = $order")
            .statement(
                "unsell_seat",
                "UPDATE seat SET status = 0, order_id = NULL \
                 WHERE seat_id = $seat AND status = 2 AND order_id = $order",
            )
            .statement(
                "restore_category",
                "UPDATE category_counters \
                 SET free_count = free_count + $n, sold_count = sold_count - $n \
                 WHERE event_id = $event AND category_id = $category AND sold_count >= $n",
            )
            .statement(
                "restore_event",
                "UPDATE event_counters \
                 SET free_count = free_count + $n, sold_count = sold_count - $n, \
                     order_count = order_count - $orders, revenue = revenue - $total \
                 WHERE event_id = $event AND sold_count >= $n",
            )
            .body(|mut ctx, args| async move { delete_order(&mut ctx, args).await }),
    ];
    all.into_iter().map(|p| base.apply(p)).collect()
}

// ---- argument and result helpers ----

fn expect_args(args: &[Value], n: usize, what: &str) -> Result<()> {
    if args.len() != n {
        return Err(Error::Arity {
            what: what.into(),
            expected: n,
            got: args.len(),
        });
    }
    Ok(())
}

fn int_arg(args: &[Value], i: usize, what: &str) -> Result<i64> {
    match args.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        Some(other) => Err(Error::type_mismatch(
            format!("argument {} of {what}", i + 1),
            "INT",
            other.kind(),
        )),
        None => Err(Error::Arity {
            what: what.into(),
            expected: i + 1,
            got: args.len(),
        }),
    }
}

/// Cents of a money argument (INT or DECIMAL with at most two decimals).
fn money_arg(args: &[Value], i: usize, what: &str) -> Result<i64> {
    let v = args.get(i).ok_or_else(|| Error::Arity {
        what: what.into(),
        expected: i + 1,
        got: args.len(),
    })?;
    v.as_decimal()
        .filter(|d| d.scale <= 2)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| {
            Error::type_mismatch(
                format!("argument {} of {what}", i + 1),
                "DECIMAL(_,2)",
                v.kind(),
            )
        })
}

fn col_int(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| Error::Internal(format!("ticket: {what} is not an INT")))
}

fn col_cents(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i)
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| Error::Internal(format!("ticket: {what} is not a money value")))
}

fn add_cents(a: i64, b: i64, what: &str) -> Result<i64> {
    a.checked_add(b)
        .ok_or_else(|| Error::Internal(format!("ticket: {what} overflows")))
}

/// Requires a write to have touched exactly one row; anything else means
/// the data broke an invariant the procedure relies on.
fn exactly_one(r: &QueryResult, what: impl FnOnce() -> String) -> Result<()> {
    if r.affected == 1 {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "ticket: {} (affected {} rows, expected 1)",
            what(),
            r.affected
        )))
    }
}

/// One seat of a cart or an order: (seat, category, price in cents).
type Item = (i64, i64, i64);

fn items_of(q: &QueryResult, what: &str) -> Result<Vec<Item>> {
    q.rows
        .iter()
        .map(|r| {
            Ok((
                col_int(r, 0, what)?,
                col_int(r, 1, what)?,
                col_cents(r, 2, what)?,
            ))
        })
        .collect()
}

/// Seats per category, ascending by category id (the counter lock order).
fn per_category(items: &[Item]) -> BTreeMap<i64, i64> {
    let mut m = BTreeMap::new();
    for &(_, category, _) in items {
        *m.entry(category).or_insert(0) += 1;
    }
    m
}

// ---- the procedures ----

async fn browse_events(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    expect_args(&args, 0, "procedure `browse_events()`")?;
    let events = ctx.exec("events", vec![]).await?;
    events
        .rows
        .iter()
        .map(|r| col_int(r, 0, "event.event_id").map(Value::Int))
        .collect()
}

/// Returns the category ids and prices, flattened.
async fn view_event(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `view_event(event)`";
    expect_args(&args, 1, WHAT)?;
    let event = int_arg(&args, 0, WHAT)?;
    if ctx.exec("event", vec![Value::Int(event)]).await?.is_empty() {
        return Err(ctx.abort(format!("no event {event}")));
    }
    let cats = ctx.exec("categories", vec![Value::Int(event)]).await?;
    let mut out = Vec::with_capacity(cats.len() * 2);
    for r in &cats.rows {
        out.push(Value::Int(col_int(r, 0, "category.category_id")?));
        out.push(money(col_cents(r, 2, "category.price")?));
    }
    Ok(out)
}

async fn lookup_customer(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    expect_args(&args, 1, "procedure `lookup_customer(email)`")?;
    let email = args[0].clone();
    let found = ctx.exec("by_email", vec![email.clone()]).await?;
    match found.first() {
        Some(r) => Ok(vec![Value::Int(col_int(r, 0, "customer.customer_id")?)]),
        None => Err(ctx.abort(format!("no customer with e-mail {email}"))),
    }
}

/// Returns the ids of up to `LIST_LIMIT` free seats of the category, from
/// seat id `from` on, ascending.
async fn list_free_seats(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `list_free_seats(category, from)`";
    expect_args(&args, 2, WHAT)?;
    let category = int_arg(&args, 0, WHAT)?;
    let from = int_arg(&args, 1, WHAT)?;
    let free = ctx
        .exec("free", vec![Value::Int(category), Value::Int(from)])
        .await?;
    free.rows
        .iter()
        .map(|r| col_int(r, 0, "seat.seat_id").map(Value::Int))
        .collect()
}

/// Releases a cart's holds and deletes it. A cart that no longer exists is
/// not an error (the visitor's stale cart may be gone already).
async fn release_cart(ctx: &mut ProcCtx, cart: i64) -> Result<()> {
    let items = ctx.exec("stale_items", vec![Value::Int(cart)]).await?;
    for (seat, _, _) in items_of(&items, "cart_item")? {
        let r = ctx
            .exec("release_seat", vec![Value::Int(seat), Value::Int(cart)])
            .await?;
        exactly_one(&r, || {
            format!("seat {seat} in cart {cart} is not held by it")
        })?;
    }
    ctx.exec("delete_items", vec![Value::Int(cart)]).await?;
    ctx.exec("delete_cart", vec![Value::Int(cart)]).await?;
    Ok(())
}

/// Returns `[cart, seats, total]`.
async fn reserve_seats(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str =
        "procedure `reserve_seats(cart, customer, event, category, stale_cart, seat...)`";
    if args.len() < 6 {
        return Err(Error::Arity {
            what: WHAT.into(),
            expected: 6,
            got: args.len(),
        });
    }
    let cart = int_arg(&args, 0, WHAT)?;
    let customer = int_arg(&args, 1, WHAT)?;
    let event = int_arg(&args, 2, WHAT)?;
    let category = int_arg(&args, 3, WHAT)?;
    let stale = int_arg(&args, 4, WHAT)?;
    let seats = (5..args.len())
        .map(|i| int_arg(&args, i, WHAT))
        .collect::<Result<Vec<i64>>>()?;
    if seats.len() > MAX_SEATS_PER_CART {
        return Err(Error::Bound(format!(
            "reserve_seats: {} seats, at most {MAX_SEATS_PER_CART} per cart",
            seats.len()
        )));
    }
    if stale != 0 {
        release_cart(ctx, stale).await?;
    }
    let price = ctx
        .exec("price", vec![Value::Int(event), Value::Int(category)])
        .await?;
    let Some(row) = price.first() else {
        return Err(ctx.abort(format!("no category {category} in event {event}")));
    };
    let price = col_cents(row, 0, "category.price")?;
    let mut total = 0i64;
    for &seat in &seats {
        let r = ctx
            .exec(
                "hold_seat",
                vec![Value::Int(cart), Value::Int(seat), Value::Int(category)],
            )
            .await?;
        if r.affected != 1 {
            return Err(ctx.abort(format!("{SEAT_TAKEN}: seat {seat} is not free")));
        }
        ctx.exec(
            "insert_item",
            vec![
                Value::Int(cart),
                Value::Int(seat),
                Value::Int(category),
                money(price),
            ],
        )
        .await?;
        total = add_cents(total, price, "cart total")?;
    }
    ctx.exec(
        "insert_cart",
        vec![
            Value::Int(cart),
            Value::Int(customer),
            Value::Int(event),
            Value::Int(seats.len() as i64),
            money(total),
        ],
    )
    .await?;
    Ok(vec![
        Value::Int(cart),
        Value::Int(seats.len() as i64),
        money(total),
    ])
}

/// Returns `[seats, total]`.
async fn view_cart(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `view_cart(cart)`";
    expect_args(&args, 1, WHAT)?;
    let cart = int_arg(&args, 0, WHAT)?;
    let head = ctx.exec("cart", vec![Value::Int(cart)]).await?;
    let Some(row) = head.first() else {
        return Err(ctx.abort(format!("no cart {cart}")));
    };
    let total = col_cents(row, 3, "cart.total")?;
    let items = ctx.exec("items", vec![Value::Int(cart)]).await?;
    Ok(vec![Value::Int(items.len() as i64), money(total)])
}

/// Turns a cart into an order. Returns `[order, seats, total]`.
///
/// BASE-ified (Salt; `--base create_order`, the default) as:
///
/// ```text
///  A1 (acceptance): cart; owner/event checks; items; delete items; delete cart
///  insert order                       -- each line below is a
///  per seat: held -> sold; insert order item     single-statement
///  per category: free -= n, sold += n  <- hot    alkaline subtransaction
///  event: free -= n, sold += n, ...    <- hot
/// ```
///
/// The first subtransaction holds every check that may legitimately fail
/// (no cart, not the customer's, other event, empty): they abort before
/// acceptance with nothing written. It also consumes the cart, so the cart
/// is turned into an order at most once even if two calls name it. After
/// it nothing can fail but a broken invariant (a seat not held by the cart,
/// a counter that would go negative), so no handler is needed. The hot
/// counter rows are touched by single-statement subtransactions: with
/// Salt's local-transaction optimization their alkaline locks last one
/// statement, not the whole distributed order. Salt Isolation keeps the
/// half-made order (seats sold, counters not yet updated) from every ACID
/// transaction, the invariant check included. Under `acid` the marks do
/// nothing; the cart is deleted first rather than last, which changes no
/// effect (the cart is the session's own) and no contention.
async fn create_order(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `create_order(cart, order, customer, event)`";
    expect_args(&args, 4, WHAT)?;
    let cart = int_arg(&args, 0, WHAT)?;
    let order = int_arg(&args, 1, WHAT)?;
    let customer = int_arg(&args, 2, WHAT)?;
    let event = int_arg(&args, 3, WHAT)?;

    ctx.begin_alkaline()?;
    let head = ctx.exec("cart", vec![Value::Int(cart)]).await?;
    let Some(row) = head.first() else {
        return Err(ctx.abort(format!("no cart {cart}")));
    };
    let owner = col_int(row, 0, "cart.customer_id")?;
    if owner != customer {
        return Err(ctx.abort(format!(
            "cart {cart} belongs to customer {owner}, not {customer}"
        )));
    }
    let cart_event = col_int(row, 1, "cart.event_id")?;
    if cart_event != event {
        return Err(ctx.abort(format!(
            "cart {cart} holds seats of event {cart_event}, not {event}"
        )));
    }
    let items = items_of(
        &ctx.exec("items", vec![Value::Int(cart)]).await?,
        "cart_item",
    )?;
    if items.is_empty() {
        return Err(ctx.abort(format!("cart {cart} is empty")));
    }
    ctx.exec("delete_items", vec![Value::Int(cart)]).await?;
    ctx.exec("delete_cart", vec![Value::Int(cart)]).await?;
    ctx.end_alkaline().await?;

    let n = items.len() as i64;
    let mut total = 0i64;
    for &(_, _, price) in &items {
        total = add_cents(total, price, "order total")?;
    }
    ctx.exec(
        "insert_order",
        vec![
            Value::Int(order),
            Value::Int(customer),
            Value::Int(event),
            Value::Int(n),
            money(total),
        ],
    )
    .await?;
    for &(seat, category, price) in &items {
        let r = ctx
            .exec(
                "sell_seat",
                vec![Value::Int(order), Value::Int(seat), Value::Int(cart)],
            )
            .await?;
        exactly_one(&r, || {
            format!("seat {seat} of cart {cart} is not held by it")
        })?;
        ctx.exec(
            "insert_item",
            vec![
                Value::Int(order),
                Value::Int(seat),
                Value::Int(category),
                money(price),
            ],
        )
        .await?;
    }
    // The hot rows last (under ACID, held for the shortest time), category
    // before event, ascending (delete_order takes them in the same order).
    for (category, k) in per_category(&items) {
        let r = ctx
            .exec(
                "sell_category",
                vec![Value::Int(k), Value::Int(event), Value::Int(category)],
            )
            .await?;
        exactly_one(&r, || {
            format!("category {category} counters cannot sell {k} more seats")
        })?;
    }
    let r = ctx
        .exec(
            "sell_event",
            vec![Value::Int(n), money(total), Value::Int(event)],
        )
        .await?;
    exactly_one(&r, || {
        format!("event {event} counters cannot sell {n} more seats")
    })?;
    Ok(vec![Value::Int(order), Value::Int(n), money(total)])
}

/// Pays an order in full. Returns `[order]`.
async fn pay(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `pay(order, amount)`";
    expect_args(&args, 2, WHAT)?;
    let order = int_arg(&args, 0, WHAT)?;
    let amount = money_arg(&args, 1, WHAT)?;
    let head = ctx.exec("order", vec![Value::Int(order)]).await?;
    let Some(row) = head.first() else {
        return Err(ctx.abort(format!("no order {order}")));
    };
    let total = col_cents(row, 2, "orders.total")?;
    let status = col_int(row, 3, "orders.status")?;
    if status != ORDER_PLACED {
        return Err(ctx.abort(format!("order {order} is already paid")));
    }
    if amount != total {
        return Err(ctx.abort(format!(
            "payment of {} for order {order} does not match its total {}",
            money(amount),
            money(total)
        )));
    }
    ctx.exec("insert_payment", vec![Value::Int(order), money(amount)])
        .await?;
    let r = ctx.exec("mark_paid", vec![Value::Int(order)]).await?;
    exactly_one(&r, || {
        format!("order {order} changed state while being paid")
    })?;
    Ok(vec![Value::Int(order)])
}

/// Issues one ticket per seat of a paid order. Returns `[tickets]`.
async fn issue_tickets(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `issue_tickets(order)`";
    expect_args(&args, 1, WHAT)?;
    let order = int_arg(&args, 0, WHAT)?;
    let head = ctx.exec("order", vec![Value::Int(order)]).await?;
    let Some(row) = head.first() else {
        return Err(ctx.abort(format!("no order {order}")));
    };
    if col_int(row, 3, "orders.status")? != ORDER_PAID {
        return Err(ctx.abort(format!(
            "order {order} is not paid, or its tickets were issued"
        )));
    }
    let items = items_of(
        &ctx.exec("items", vec![Value::Int(order)]).await?,
        "order_item",
    )?;
    for &(seat, _, _) in &items {
        ctx.exec(
            "insert_ticket",
            vec![
                Value::Int(order),
                Value::Int(seat),
                Value::str(&format!("FT-{order:x}-{seat}")),
            ],
        )
        .await?;
    }
    let r = ctx.exec("mark_ticketed", vec![Value::Int(order)]).await?;
    exactly_one(&r, || {
        format!("order {order} changed state while ticketing")
    })?;
    Ok(vec![Value::Int(items.len() as i64)])
}

/// Returns `[status, seats, tickets]`.
async fn view_order(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `view_order(order)`";
    expect_args(&args, 1, WHAT)?;
    let order = int_arg(&args, 0, WHAT)?;
    let head = ctx.exec("order", vec![Value::Int(order)]).await?;
    let Some(row) = head.first() else {
        return Err(ctx.abort(format!("no order {order}")));
    };
    let status = col_int(row, 3, "orders.status")?;
    let items = ctx.exec("items", vec![Value::Int(order)]).await?;
    let tickets = ctx.exec("tickets", vec![Value::Int(order)]).await?;
    Ok(vec![
        Value::Int(status),
        Value::Int(items.len() as i64),
        Value::Int(tickets.len() as i64),
    ])
}

/// The administrative delete: cancels the given orders (any state),
/// returns their seats to sale and restores the counters. Returns
/// `[orders, seats]`.
///
/// BASE-ified (Salt; only with `--base ...,delete_order`) as:
///
/// ```text
///  A1 (acceptance): per order: order (missing -> abort); items; delete
///                   tickets, payment, items, order
///  per seat: sold -> free                 -- each line below is a
///  per category: free += n, sold -= n  <- hot   single-statement
///  event: free += n, sold -= n, ...    <- hot   alkaline subtransaction
/// ```
///
/// As in create-order, the only legitimate failure (no such order) is in
/// the first subtransaction, which also consumes the orders; after it only
/// a broken invariant can fail. Under ACID the same statements run in the
/// same order, in one transaction.
async fn delete_order(ctx: &mut ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
    const WHAT: &str = "procedure `delete_order(event, order...)`";
    if args.len() < 2 {
        return Err(Error::Arity {
            what: WHAT.into(),
            expected: 2,
            got: args.len(),
        });
    }
    let event = int_arg(&args, 0, WHAT)?;
    let orders = (1..args.len())
        .map(|i| int_arg(&args, i, WHAT))
        .collect::<Result<Vec<i64>>>()?;
    if orders.len() > MAX_DELETE_BATCH {
        return Err(Error::Bound(format!(
            "delete_order: {} orders, at most {MAX_DELETE_BATCH} per call",
            orders.len()
        )));
    }
    // Alkaline 1, the acceptance: every order checked and consumed (a
    // missing one aborts with nothing written), so an order is deleted at
    // most once even if two calls name it.
    ctx.begin_alkaline()?;
    let mut seats: Vec<(i64, i64, i64)> = Vec::new();
    let mut revenue = 0i64;
    for &order in &orders {
        let head = ctx.exec("order", vec![Value::Int(order)]).await?;
        let Some(row) = head.first() else {
            return Err(ctx.abort(format!("no order {order}")));
        };
        let total = col_cents(row, 2, "orders.total")?;
        let status = col_int(row, 3, "orders.status")?;
        if !(ORDER_PLACED..=ORDER_TICKETED).contains(&status) {
            return Err(Error::Internal(format!(
                "ticket: order {order} has unknown status {status}"
            )));
        }
        let items = items_of(
            &ctx.exec("items", vec![Value::Int(order)]).await?,
            "order_item",
        )?;
        seats.extend(
            items
                .iter()
                .map(|&(seat, category, _)| (order, seat, category)),
        );
        revenue = add_cents(revenue, total, "deleted revenue")?;
        for stmt in [
            "delete_tickets",
            "delete_payment",
            "delete_items",
            "delete_order",
        ] {
            ctx.exec(stmt, vec![Value::Int(order)]).await?;
        }
    }
    ctx.end_alkaline().await?;
    let mut freed: BTreeMap<i64, i64> = BTreeMap::new();
    for &(order, seat, category) in &seats {
        let r = ctx
            .exec("unsell_seat", vec![Value::Int(seat), Value::Int(order)])
            .await?;
        exactly_one(&r, || format!("seat {seat} is not sold in order {order}"))?;
        *freed.entry(category).or_insert(0) += 1;
    }
    let seats = seats.len() as i64;
    for (category, k) in freed {
        let r = ctx
            .exec(
                "restore_category",
                vec![Value::Int(k), Value::Int(event), Value::Int(category)],
            )
            .await?;
        exactly_one(&r, || {
            format!("category {category} counters cannot return {k} seats")
        })?;
    }
    let r = ctx
        .exec(
            "restore_event",
            vec![
                Value::Int(seats),
                Value::Int(orders.len() as i64),
                money(revenue),
                Value::Int(event),
            ],
        )
        .await?;
    exactly_one(&r, || {
        format!("event {event} counters cannot return {seats} seats")
    })?;
    Ok(vec![Value::Int(orders.len() as i64), Value::Int(seats)])
}
