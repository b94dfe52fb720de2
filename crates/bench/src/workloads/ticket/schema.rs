//! The ticketing schema, its fixed reference data and the initial load.
//!
//! ```text
//!  table               primary key            partitioned by  written by
//!  event               (event_id)             event_id        (load only)
//!  event_counters      (event_id)             event_id        create_order, delete_order   <- hot
//!  category            (event_id, category)   category_id     (load only)
//!  category_counters   (event_id, category)   category_id     create_order, delete_order   <- hot
//!  seat                (seat_id)              seat_id         reserve, create, delete
//!    index seat_by_status (category_id, status, seat_id)      list_free_seats scans it
//!  customer            (customer_id)          customer_id     (load only)
//!    index customer_by_email (email)                          lookup_customer
//!  cart / cart_item    (cart_id [, seat_id])  cart_id         reserve, create_order
//!  orders / order_item (order_id [, seat_id]) order_id        create, pay, issue, delete
//!  payment             (order_id)             order_id        pay, delete_order
//!  ticket              (order_id, seat_id)    order_id        issue_tickets, delete_order
//! ```
//!
//! Partitioning follows each table's own key, so every point statement goes
//! to one partition and nothing a session does is broadcast except the
//! listings that have no partitioning key to bind (browse, the categories
//! of an event, free seats, the e-mail lookup). A cart and its items, and an
//! order with its items, payment and tickets, each live on one partition;
//! seats spread over all partitions by id. So create-order, which touches a
//! cart, an order, its seats and the two counter rows, is a distributed
//! transaction on any cluster with more than one partition, as on the
//! sources' ten-partition MySQL Cluster.
//!
//! The counters that every create-order updates sit in rows of their own
//! (`event_counters`, `category_counters`), apart from the static rows that
//! browsing reads (`event`, `category` with its price): under two-phase
//! locking without multi-versioning a reader of a row create-order holds
//! would queue behind it, and in the sources only create-order contended.
//! Seat ids are global: category `k` (0-based) owns `k*S .. (k+1)*S` for `S`
//! seats per category.

use brine_cluster::Cluster;
use brine_core::{Decimal, Value};

use super::super::load_rows;
use crate::error::Result;

/// The one event.
pub const EVENT_ID: i64 = 1;

/// Seat states (`seat.status`).
pub const SEAT_FREE: i64 = 0;
pub const SEAT_HELD: i64 = 1;
pub const SEAT_SOLD: i64 = 2;

/// Order states (`orders.status`).
pub const ORDER_PLACED: i64 = 0;
pub const ORDER_PAID: i64 = 1;
pub const ORDER_TICKETED: i64 = 2;

/// Seats per row of the hall (only for the `row_no`/`seat_no` labels).
const SEATS_PER_ROW: u64 = 25;

/// A ticket category: id, name and price in cents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Category {
    pub id: i64,
    pub name: &'static str,
    pub price_cents: i64,
}

/// The two categories of the sources' configuration.
pub const CATEGORIES: [Category; 2] = [
    Category {
        id: 1,
        name: "stalls",
        price_cents: 8_000,
    },
    Category {
        id: 2,
        name: "balcony",
        price_cents: 4_500,
    },
];

/// The hall: how many seats each category has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hall {
    pub seats_per_category: u64,
}

impl Hall {
    /// The first seat id of category index `k` (0-based).
    pub fn first_seat(&self, k: usize) -> i64 {
        (k as u64 * self.seats_per_category) as i64
    }

    /// The category index of a seat id, if it is a seat of the hall.
    pub fn category_of(&self, seat: i64) -> Option<usize> {
        let k = usize::try_from(seat).ok()? / self.seats_per_category as usize;
        (k < CATEGORIES.len()).then_some(k)
    }

    pub fn total_seats(&self) -> u64 {
        self.seats_per_category * CATEGORIES.len() as u64
    }
}

/// Money value from cents (all money columns are `DECIMAL(_, 2)`).
pub fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

/// The e-mail of customer `id`, as `lookup_customer` is called with it.
pub fn customer_email(id: i64) -> String {
    format!("customer{id}@example.com")
}

pub const DDL: &str = "
CREATE TABLE event (
    event_id INT, name VARCHAR(64) NOT NULL, venue VARCHAR(64) NOT NULL,
    starts_at TIMESTAMP NOT NULL,
    PRIMARY KEY (event_id)
) PARTITION BY (event_id);
CREATE TABLE event_counters (
    event_id INT, free_count INT NOT NULL, sold_count INT NOT NULL,
    order_count INT NOT NULL, revenue DECIMAL(16,2) NOT NULL,
    PRIMARY KEY (event_id)
) PARTITION BY (event_id);
CREATE TABLE category (
    event_id INT, category_id INT, name VARCHAR(32) NOT NULL,
    price DECIMAL(10,2) NOT NULL, capacity INT NOT NULL, first_seat INT NOT NULL,
    PRIMARY KEY (event_id, category_id)
) PARTITION BY (category_id);
CREATE TABLE category_counters (
    event_id INT, category_id INT, free_count INT NOT NULL, sold_count INT NOT NULL,
    PRIMARY KEY (event_id, category_id)
) PARTITION BY (category_id);
CREATE TABLE seat (
    seat_id INT, event_id INT NOT NULL, category_id INT NOT NULL,
    row_no INT NOT NULL, seat_no INT NOT NULL, status INT NOT NULL,
    cart_id INT, order_id INT,
    PRIMARY KEY (seat_id)
) PARTITION BY (seat_id);
CREATE INDEX seat_by_status ON seat (category_id, status);
CREATE TABLE customer (
    customer_id INT, email VARCHAR(64) NOT NULL, name VARCHAR(64) NOT NULL,
    PRIMARY KEY (customer_id)
) PARTITION BY (customer_id);
-- Not UNIQUE: a unique index must include the partitioning column
-- (customer_id), since partitions check uniqueness only among their own
-- rows. E-mails are unique all the same: customers are only loaded, each
-- with the e-mail its id gives (customer<id>@example.com).
CREATE INDEX customer_by_email ON customer (email);
CREATE TABLE cart (
    cart_id INT, customer_id INT NOT NULL, event_id INT NOT NULL,
    seats INT NOT NULL, total DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (cart_id)
) PARTITION BY (cart_id);
CREATE TABLE cart_item (
    cart_id INT, seat_id INT, category_id INT NOT NULL, price DECIMAL(10,2) NOT NULL,
    PRIMARY KEY (cart_id, seat_id)
) PARTITION BY (cart_id);
CREATE TABLE orders (
    order_id INT, customer_id INT NOT NULL, event_id INT NOT NULL,
    seats INT NOT NULL, total DECIMAL(12,2) NOT NULL, status INT NOT NULL,
    PRIMARY KEY (order_id)
) PARTITION BY (order_id);
CREATE TABLE order_item (
    order_id INT, seat_id INT, category_id INT NOT NULL, price DECIMAL(10,2) NOT NULL,
    PRIMARY KEY (order_id, seat_id)
) PARTITION BY (order_id);
CREATE TABLE payment (
    order_id INT, amount DECIMAL(12,2) NOT NULL, method VARCHAR(16) NOT NULL,
    PRIMARY KEY (order_id)
) PARTITION BY (order_id);
CREATE TABLE ticket (
    order_id INT, seat_id INT, code VARCHAR(40) NOT NULL,
    PRIMARY KEY (order_id, seat_id)
) PARTITION BY (order_id);
";

/// Loads the event, its categories and counters, every seat (free) and
/// `customers` customers (ids `1..=customers`).
pub async fn load(cluster: &Cluster, hall: Hall, customers: u64) -> Result<()> {
    let seats = hall.seats_per_category as i64;
    let total = hall.total_seats() as i64;
    // 2026-12-31 20:00 UTC, in microseconds: only a label.
    let starts_at = Value::Timestamp(1_798_747_200_000_000);
    load_rows(cluster, "event", 1, |_| {
        vec![
            Value::Int(EVENT_ID),
            Value::str("The Magic Flute"),
            Value::str("Opera House"),
            starts_at.clone(),
        ]
    })
    .await?;
    load_rows(cluster, "event_counters", 1, |_| {
        vec![
            Value::Int(EVENT_ID),
            Value::Int(total),
            Value::Int(0),
            Value::Int(0),
            money(0),
        ]
    })
    .await?;
    let n = CATEGORIES.len() as u64;
    load_rows(cluster, "category", n, |k| {
        let c = CATEGORIES[k as usize];
        vec![
            Value::Int(EVENT_ID),
            Value::Int(c.id),
            Value::str(c.name),
            money(c.price_cents),
            Value::Int(seats),
            Value::Int(hall.first_seat(k as usize)),
        ]
    })
    .await?;
    load_rows(cluster, "category_counters", n, |k| {
        vec![
            Value::Int(EVENT_ID),
            Value::Int(CATEGORIES[k as usize].id),
            Value::Int(seats),
            Value::Int(0),
        ]
    })
    .await?;
    load_rows(cluster, "seat", hall.total_seats(), |i| {
        let k = (i / hall.seats_per_category) as usize;
        let j = i % hall.seats_per_category;
        vec![
            Value::Int(i as i64),
            Value::Int(EVENT_ID),
            Value::Int(CATEGORIES[k.min(CATEGORIES.len() - 1)].id),
            Value::Int((j / SEATS_PER_ROW) as i64 + 1),
            Value::Int((j % SEATS_PER_ROW) as i64 + 1),
            Value::Int(SEAT_FREE),
            Value::Null,
            Value::Null,
        ]
    })
    .await?;
    load_rows(cluster, "customer", customers, |i| {
        let id = i as i64 + 1;
        vec![
            Value::Int(id),
            Value::str(&customer_email(id)),
            Value::str(&format!("Customer {id}")),
        ]
    })
    .await
}
