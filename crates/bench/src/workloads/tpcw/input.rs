//! One emulated browser (EB): a customer's session that draws web
//! interactions from the mix and runs each one's transactions in turn.
//!
//! ```text
//!  next():  pending empty? draw an interaction (cumulative weights),
//!           queue its 1-3 transactions (Interaction::transactions)
//!           pop the first pending transaction
//!  observe(): session state follows outcomes (a new customer's id after
//!           registration commits, the cart forgotten when its creation
//!           failed, counters of orders and empty-cart buys)
//! ```
//!
//! Client `i` is the session of customer `i + 1` until it registers a new
//! customer (buy-request, `1 - RETURNING` of the time). New ids (orders,
//! customers, addresses, carts) come from the run's shared counters.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use brine_cluster::CallOutcome;
use brine_core::{Decimal, Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;

use super::load::{address_row, customer_row};
use super::procedures::EMPTY_CART;
use super::schema::{digsyl, CC_TYPES, COUNTRIES, SHIP_TYPES, SUBJECTS};
use super::*;
use crate::workload::{ClientGen, TxnRequest};

/// Share of buy-requests by a returning customer (the rest register).
pub const RETURNING: f64 = 0.8;
/// Share of buy-confirms that ship to a new address.
pub const SHIP_TO_NEW_ADDRESS: f64 = 0.05;
/// Orders best-sellers looks at (clause 2.5.3: the 3,333 most recent).
pub const BEST_SELLER_ORDERS: i64 = 3_333;
/// Orders admin-confirm looks at for related items (clause 2.16: 10,000).
pub const ADMIN_ORDERS: i64 = 10_000;
/// Largest quantity a cart line gets.
pub const MAX_QTY: i64 = 10;

pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub struct TpcwClient {
    rng: SmallRng,
    scale: Scale,
    cumulative: [f64; 14],
    run: Arc<RunState>,
    pending: VecDeque<TxnRequest>,
    c_id: i64,
    /// The server this session's client sits at (see `RunState::servers`).
    site: i64,
    registering: Option<i64>,
    cart: Option<i64>,
    /// Items this session believes are in its cart.
    cart_items: BTreeSet<i64>,
}

fn req(procedure: &'static str, args: Vec<Value>) -> TxnRequest {
    TxnRequest { procedure, args }
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

/// The customer of client `index`'s session: `i + servers` (for
/// `i = index mod customers`), which routes to the client's own server
/// (`c mod servers = index mod servers`), so calls routed by the customer
/// go where the client is. The last `servers` sessions wrap around to the
/// ids below `servers` (and `customers` for 0): distinct for distinct
/// clients up to the number of customers (`Workload::validate_clients`
/// refuses more), on their own server when `customers` is a multiple of
/// `servers`.
fn session_customer(index: u32, customers: i64, servers: i64) -> i64 {
    let i = i64::from(index) % customers;
    let servers = servers.min(customers);
    let c = i + servers;
    if c < customers || (c == customers && servers == customers) {
        c
    } else {
        let wrapped = c - customers;
        if wrapped == 0 {
            customers
        } else {
            wrapped
        }
    }
}

impl TpcwClient {
    pub fn new(index: u32, rng: SmallRng, scale: Scale, mix: &Mix, run: Arc<RunState>) -> Self {
        let servers = run.servers.load(Ordering::Relaxed).max(1);
        TpcwClient {
            rng,
            scale,
            cumulative: mix.cumulative(),
            run: run.clone(),
            pending: VecDeque::new(),
            c_id: session_customer(index, scale.customers, servers),
            site: i64::from(index) % servers,
            registering: None,
            cart: None,
            cart_items: BTreeSet::new(),
        }
    }

    /// Draws a web interaction from the mix.
    pub fn draw(&mut self) -> Interaction {
        let total = self.cumulative[13];
        let x = self.rng.gen_range(0.0..total);
        let k = self.cumulative.iter().position(|&c| x < c).unwrap_or(13);
        Interaction::ALL[k]
    }

    fn item(&mut self) -> i64 {
        self.rng.gen_range(1..=self.scale.items)
    }

    fn subject(&mut self) -> Value {
        Value::str(SUBJECTS[self.rng.gen_range(0..SUBJECTS.len())])
    }

    fn uname(&self) -> Value {
        Value::str(&digsyl(self.c_id))
    }

    /// The id of the order placed next, minus `window`: "the `window`
    /// most recent orders" are those with a larger id.
    fn recent(&self, window: i64) -> Value {
        int(self.run.next_o_id.load(Ordering::Relaxed) - 1 - window)
    }

    /// A new id of this session's site (`values::site_id`).
    fn site_id(&self, counter: &std::sync::atomic::AtomicI64) -> i64 {
        crate::workloads::values::site_id(
            counter,
            self.run.servers.load(Ordering::Relaxed),
            self.site,
        )
    }

    /// The session's cart, created first if it has none.
    fn ensure_cart(&mut self, now: i64) -> i64 {
        match self.cart {
            Some(sc) => sc,
            None => {
                let sc = self.site_id(&self.run.next_sc_id);
                self.pending
                    .push_back(req(CREATE_EMPTY_CART, vec![int(sc), Value::Timestamp(now)]));
                self.cart = Some(sc);
                self.cart_items.clear();
                sc
            }
        }
    }

    fn add_to_cart(&mut self, sc: i64, now: i64) {
        let i = self.item();
        let q = self.rng.gen_range(1..=MAX_QTY);
        self.cart_items.insert(i);
        self.pending.push_back(req(
            DO_CART,
            vec![int(sc), int(i), int(q), Value::Timestamp(now)],
        ));
    }

    /// Queues the transactions of `interaction`.
    pub fn queue(&mut self, interaction: Interaction) {
        let now = now_us();
        match interaction {
            Interaction::Home => {
                let i = self.item();
                self.pending.push_back(req(GET_NAME, vec![int(self.c_id)]));
                self.pending.push_back(req(GET_RELATED, vec![int(i)]));
            }
            Interaction::NewProducts => {
                let s = self.subject();
                self.pending.push_back(req(GET_NEW_PRODUCTS, vec![s]));
            }
            Interaction::BestSellers => {
                let s = self.subject();
                let lo = self.recent(BEST_SELLER_ORDERS);
                self.pending.push_back(req(GET_BEST_SELLERS, vec![s, lo]));
            }
            Interaction::ProductDetail | Interaction::AdminRequest => {
                let i = self.item();
                self.pending.push_back(req(GET_BOOK, vec![int(i)]));
            }
            Interaction::SearchRequest => {
                let i = self.item();
                self.pending.push_back(req(GET_RELATED, vec![int(i)]));
            }
            Interaction::SearchResult => match self.rng.gen_range(0..3) {
                0 => {
                    let a = self.rng.gen_range(1..=self.scale.authors());
                    self.pending
                        .push_back(req(DO_AUTHOR_SEARCH, vec![Value::str(&digsyl(a))]));
                }
                1 => {
                    let prefix = digsyl(self.item());
                    self.pending.push_back(req(
                        DO_TITLE_SEARCH,
                        vec![Value::str(&prefix), Value::str(&format!("{prefix}~"))],
                    ));
                }
                _ => {
                    let s = self.subject();
                    self.pending.push_back(req(DO_SUBJECT_SEARCH, vec![s]));
                }
            },
            Interaction::ShoppingCart => {
                let sc = self.ensure_cart(now);
                if !self.cart_items.is_empty() && self.rng.gen_bool(0.3) {
                    // Change (or remove, 0) the quantity of a line.
                    let k = self.rng.gen_range(0..self.cart_items.len());
                    let i = self.cart_items.iter().nth(k).copied().unwrap_or(1);
                    let q = self.rng.gen_range(0..=MAX_QTY);
                    if q == 0 {
                        self.cart_items.remove(&i);
                    }
                    self.pending.push_back(req(
                        DO_CART,
                        vec![int(sc), int(i), int(q), Value::Timestamp(now)],
                    ));
                } else {
                    self.add_to_cart(sc, now);
                }
                self.pending.push_back(req(GET_CART, vec![int(sc)]));
            }
            Interaction::CustomerRegistration => {
                let u = self.uname();
                self.pending.push_back(req(GET_CUSTOMER, vec![u]));
            }
            Interaction::BuyRequest => {
                if self.rng.gen_bool(RETURNING) {
                    let u = self.uname();
                    self.pending.push_back(req(GET_PASSWORD, vec![u]));
                    self.pending.push_back(req(
                        REFRESH_SESSION,
                        vec![int(self.c_id), Value::Timestamp(now)],
                    ));
                } else {
                    let c = self.site_id(&self.run.next_c_id);
                    let addr = self.run.next_addr_id.fetch_add(1, Ordering::Relaxed);
                    let mut args = customer_row(&mut self.rng, c, addr, now);
                    args.extend(address_row(&mut self.rng, addr));
                    self.registering = Some(c);
                    self.pending.push_back(req(CREATE_NEW_CUSTOMER, args));
                }
                let sc = self.ensure_cart(now);
                self.pending.push_back(req(GET_CART, vec![int(sc)]));
            }
            Interaction::BuyConfirm => {
                let sc = self.ensure_cart(now);
                if self.cart_items.is_empty() {
                    self.add_to_cart(sc, now);
                }
                let o = self.run.next_o_id.fetch_add(1, Ordering::Relaxed);
                let mut args = vec![
                    int(sc),
                    int(self.c_id),
                    int(o),
                    Value::Timestamp(now),
                    Value::str(SHIP_TYPES[self.rng.gen_range(0..SHIP_TYPES.len())]),
                    Value::str(CC_TYPES[self.rng.gen_range(0..CC_TYPES.len())]),
                    Value::str(&crate::workloads::tpcc::random::nstring(
                        &mut self.rng,
                        16,
                        16,
                    )),
                    Value::str(&format!("customer {}", self.c_id)),
                    Value::Timestamp(now + 365 * 86_400_000_000),
                    Value::str(&crate::workloads::tpcc::random::astring(
                        &mut self.rng,
                        15,
                        15,
                    )),
                    int(self.rng.gen_range(1..=COUNTRIES)),
                ];
                let name = if self.rng.gen_bool(SHIP_TO_NEW_ADDRESS) {
                    let addr = self.run.next_addr_id.fetch_add(1, Ordering::Relaxed);
                    args.extend(address_row(&mut self.rng, addr));
                    DO_BUY_CONFIRM_ADDRESS
                } else {
                    DO_BUY_CONFIRM
                };
                self.pending.push_back(req(name, args));
                // The buy empties the cart; the session starts a new one.
                self.cart = None;
                self.cart_items.clear();
            }
            Interaction::OrderInquiry => {
                self.pending
                    .push_back(req(GET_USER_NAME, vec![int(self.c_id)]));
            }
            Interaction::OrderDisplay => {
                let u = self.uname();
                self.pending.push_back(req(GET_PASSWORD, vec![u.clone()]));
                self.pending.push_back(req(GET_MOST_RECENT_ORDER, vec![u]));
            }
            Interaction::AdminConfirm => {
                let i = self.item();
                let cost = self.rng.gen_range(100..=999_999);
                let lo = self.recent(ADMIN_ORDERS);
                self.pending.push_back(req(
                    ADMIN_UPDATE,
                    vec![
                        int(i),
                        Value::Decimal(Decimal::new(cost, 2)),
                        Value::str(&format!("img{}/image_{i}.gif", i % 100)),
                        Value::str(&format!("img{}/thumb_{i}.gif", i % 100)),
                        Value::Timestamp(now),
                        lo,
                    ],
                ));
                self.pending.push_back(req(GET_BOOK, vec![int(i)]));
            }
        }
    }
}

impl ClientGen for TpcwClient {
    fn next(&mut self) -> TxnRequest {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return r;
            }
            let i = self.draw();
            self.run.interactions.fetch_add(1, Ordering::Relaxed);
            self.queue(i);
        }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        match (procedure, outcome) {
            (CREATE_NEW_CUSTOMER, Ok(_)) => {
                if let Some(c) = self.registering.take() {
                    self.c_id = c;
                }
            }
            (CREATE_NEW_CUSTOMER, Err(_)) => self.registering = None,
            (CREATE_EMPTY_CART, Err(_)) => {
                // Its queued cart operations abort (no such cart).
                self.cart = None;
                self.cart_items.clear();
            }
            (DO_BUY_CONFIRM | DO_BUY_CONFIRM_ADDRESS, Ok(_)) => {
                self.run.orders.fetch_add(1, Ordering::Relaxed);
            }
            (DO_BUY_CONFIRM | DO_BUY_CONFIRM_ADDRESS, Err(Error::UserAbort(m)))
                if m == EMPTY_CART =>
            {
                self.run.empty_cart_buys.fetch_add(1, Ordering::Relaxed);
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
    fn interactions_follow_the_mix() {
        for mix in [Mix::BROWSING, Mix::SHOPPING, Mix::ORDERING] {
            let mut c = TpcwClient::new(
                0,
                SmallRng::seed_from_u64(3),
                Scale::SMALL,
                &mix,
                Arc::new(RunState::default()),
            );
            let n = 200_000;
            let mut counts = [0usize; 14];
            for _ in 0..n {
                let i = c.draw();
                counts[Interaction::ALL.iter().position(|&x| x == i).unwrap()] += 1;
            }
            for (k, w) in mix.weights.iter().enumerate() {
                let got = counts[k] as f64 * 100.0 / n as f64;
                assert!((got - w).abs() < 0.35, "{} {k}: {got} vs {w}", mix.name);
            }
        }
    }

    #[test]
    fn every_interaction_queues_its_transactions() {
        let mut c = TpcwClient::new(
            4,
            SmallRng::seed_from_u64(9),
            Scale::SMALL,
            &Mix::SHOPPING,
            Arc::new(RunState::default()),
        );
        assert_eq!(c.c_id, 5);
        for i in Interaction::ALL {
            c.pending.clear();
            c.queue(i);
            assert!((1..=4).contains(&c.pending.len()), "{i:?}");
            let known: Vec<&str> = i.transactions().iter().map(|t| t.0).collect();
            for r in &c.pending {
                assert!(
                    known.contains(&r.procedure)
                        || [CREATE_EMPTY_CART, DO_CART].contains(&r.procedure),
                    "{i:?} ran {}",
                    r.procedure
                );
            }
        }
    }

    #[test]
    fn sessions_get_distinct_customers_of_their_site() {
        for (customers, servers) in [(288, 3), (288, 1), (100, 7), (10, 13)] {
            let cs: Vec<i64> = (0..customers as u32)
                .map(|i| session_customer(i, customers, servers))
                .collect();
            let mut sorted = cs.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len() as i64, customers, "{customers}/{servers}");
            assert!(cs.iter().all(|&c| (1..=customers).contains(&c)));
            if customers % servers == 0 {
                for (i, &c) in cs.iter().enumerate() {
                    assert_eq!(c % servers, i as i64 % servers, "client {i}");
                }
            }
        }
    }
}
