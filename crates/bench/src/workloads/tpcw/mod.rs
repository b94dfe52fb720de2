//! TPC-W (version 1.8): the ten tables, the database transactions behind
//! the fourteen web interactions, the three mixes and consistency checks,
//! on brine's SQL subset.
//!
//! ```text
//!  Tpcw::new(scale, mix)
//!    application()  schema::DDL + procedures: 20 transactions, 13 read-only
//!                   (the count of seed 004's TPC-W, Elia's reference code);
//!                   .with_base(--base): the buy-confirms BASE under Salt
//!    load()         load: clause 4.7 data at --scale small|standard
//!    client(i)      input::TpcwClient: one emulated browser (EB) session of
//!                   customer i + 1; draws a web interaction from the mix
//!                   and runs its 1-3 transactions one after the other
//!    check()        check: stock, orders/lines/payments, carts, unique ids
//!    metrics()      web interactions, orders placed, empty-cart buys
//! ```
//!
//! What it guarantees: data follows clause 4.7 at the scale's sizes;
//! customer and cart transactions are single-partition (partitioning in
//! `schema`); at serializable the checks of `check` hold after any run.
//! Deviations from the spec are listed in `docs/workloads/tpcw.md`.

pub mod check;
pub mod input;
pub mod load;
pub mod procedures;
pub mod schema;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use brine_cluster::{Application, Cluster};
use rand::rngs::SmallRng;
use serde_json::{json, Map, Value as Json};

use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, Workload};
use crate::workloads::base::BaseSet;
use input::TpcwClient;

// The 20 database transactions: 13 read-only ...
pub const GET_NAME: &str = "get_name";
pub const GET_BOOK: &str = "get_book";
pub const GET_CUSTOMER: &str = "get_customer";
pub const DO_SUBJECT_SEARCH: &str = "do_subject_search";
pub const DO_TITLE_SEARCH: &str = "do_title_search";
pub const DO_AUTHOR_SEARCH: &str = "do_author_search";
pub const GET_NEW_PRODUCTS: &str = "get_new_products";
pub const GET_BEST_SELLERS: &str = "get_best_sellers";
pub const GET_RELATED: &str = "get_related";
pub const GET_USER_NAME: &str = "get_user_name";
pub const GET_PASSWORD: &str = "get_password";
pub const GET_MOST_RECENT_ORDER: &str = "get_most_recent_order";
pub const GET_CART: &str = "get_cart";
// ... and 7 that write.
pub const ADMIN_UPDATE: &str = "admin_update";
pub const CREATE_EMPTY_CART: &str = "create_empty_cart";
pub const DO_CART: &str = "do_cart";
pub const REFRESH_SESSION: &str = "refresh_session";
pub const CREATE_NEW_CUSTOMER: &str = "create_new_customer";
pub const DO_BUY_CONFIRM: &str = "do_buy_confirm";
pub const DO_BUY_CONFIRM_ADDRESS: &str = "do_buy_confirm_address";

pub const READ_ONLY: [&str; 13] = [
    GET_NAME,
    GET_BOOK,
    GET_CUSTOMER,
    DO_SUBJECT_SEARCH,
    DO_TITLE_SEARCH,
    DO_AUTHOR_SEARCH,
    GET_NEW_PRODUCTS,
    GET_BEST_SELLERS,
    GET_RELATED,
    GET_USER_NAME,
    GET_PASSWORD,
    GET_MOST_RECENT_ORDER,
    GET_CART,
];
pub const UPDATING: [&str; 7] = [
    ADMIN_UPDATE,
    CREATE_EMPTY_CART,
    DO_CART,
    REFRESH_SESSION,
    CREATE_NEW_CUSTOMER,
    DO_BUY_CONFIRM,
    DO_BUY_CONFIRM_ADDRESS,
];

/// Database size (clause 4.3: NUM_ITEMS a power of ten times 1,000 and
/// NUM_CUSTOMERS = 2,880 x NUM_EBS; the other tables follow clause 4.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub name: &'static str,
    pub items: i64,
    pub customers: i64,
}

impl Scale {
    /// 10,000 items and 10 emulated browsers' customers (28,800): a legal
    /// TPC-W size that loads in seconds (docs/workloads/tpcw.md).
    pub const STANDARD: Scale = Scale {
        name: "standard",
        items: 10_000,
        customers: 28_800,
    };
    /// Non-standard: 1,000 items and a tenth of one EB's customers, for
    /// tests and smoke runs.
    pub const SMALL: Scale = Scale {
        name: "small",
        items: 1_000,
        customers: 288,
    };

    pub fn by_name(name: &str) -> Result<Scale> {
        match name {
            "standard" => Ok(Scale::STANDARD),
            "small" => Ok(Scale::SMALL),
            other => Err(BenchError::Config(format!(
                "--scale: unknown scale `{other}` (expected small or standard)"
            ))),
        }
    }

    /// NUM_ADDRESSES = 2 x NUM_CUSTOMERS.
    pub fn addresses(&self) -> i64 {
        2 * self.customers
    }
    /// NUM_AUTHORS = 0.25 x NUM_ITEMS.
    pub fn authors(&self) -> i64 {
        (self.items / 4).max(1)
    }
    /// NUM_ORDERS = 0.9 x NUM_CUSTOMERS.
    pub fn orders(&self) -> i64 {
        self.customers * 9 / 10
    }
}

/// The fourteen web interactions (clause 2), in the order of `Mix::weights`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interaction {
    Home,
    NewProducts,
    BestSellers,
    ProductDetail,
    SearchRequest,
    SearchResult,
    ShoppingCart,
    CustomerRegistration,
    BuyRequest,
    BuyConfirm,
    OrderInquiry,
    OrderDisplay,
    AdminRequest,
    AdminConfirm,
}

impl Interaction {
    pub const ALL: [Interaction; 14] = [
        Interaction::Home,
        Interaction::NewProducts,
        Interaction::BestSellers,
        Interaction::ProductDetail,
        Interaction::SearchRequest,
        Interaction::SearchResult,
        Interaction::ShoppingCart,
        Interaction::CustomerRegistration,
        Interaction::BuyRequest,
        Interaction::BuyConfirm,
        Interaction::OrderInquiry,
        Interaction::OrderDisplay,
        Interaction::AdminRequest,
        Interaction::AdminConfirm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Interaction::Home => "home",
            Interaction::NewProducts => "new_products",
            Interaction::BestSellers => "best_sellers",
            Interaction::ProductDetail => "product_detail",
            Interaction::SearchRequest => "search_request",
            Interaction::SearchResult => "search_result",
            Interaction::ShoppingCart => "shopping_cart",
            Interaction::CustomerRegistration => "customer_registration",
            Interaction::BuyRequest => "buy_request",
            Interaction::BuyConfirm => "buy_confirm",
            Interaction::OrderInquiry => "order_inquiry",
            Interaction::OrderDisplay => "order_display",
            Interaction::AdminRequest => "admin_request",
            Interaction::AdminConfirm => "admin_confirm",
        }
    }

    /// The transactions the interaction runs, with the expected number of
    /// calls of each (a branch taken with probability p counts p), in the
    /// steady state of a session (it has a cart with lines when it buys;
    /// its cart is created by the shopping-cart interaction after a buy).
    /// `input::TpcwClient` runs exactly these; `Tpcw::mix` weighs them.
    pub fn transactions(self) -> &'static [(&'static str, f64)] {
        use input::{RETURNING, SHIP_TO_NEW_ADDRESS};
        match self {
            Interaction::Home => &[(GET_NAME, 1.0), (GET_RELATED, 1.0)],
            Interaction::NewProducts => &[(GET_NEW_PRODUCTS, 1.0)],
            Interaction::BestSellers => &[(GET_BEST_SELLERS, 1.0)],
            Interaction::ProductDetail => &[(GET_BOOK, 1.0)],
            Interaction::SearchRequest => &[(GET_RELATED, 1.0)],
            Interaction::SearchResult => &[
                (DO_AUTHOR_SEARCH, 1.0 / 3.0),
                (DO_TITLE_SEARCH, 1.0 / 3.0),
                (DO_SUBJECT_SEARCH, 1.0 / 3.0),
            ],
            Interaction::ShoppingCart => &[(DO_CART, 1.0), (GET_CART, 1.0)],
            Interaction::CustomerRegistration => &[(GET_CUSTOMER, 1.0)],
            Interaction::BuyRequest => &[
                (GET_PASSWORD, RETURNING),
                (REFRESH_SESSION, RETURNING),
                (CREATE_NEW_CUSTOMER, 1.0 - RETURNING),
                (GET_CART, 1.0),
            ],
            Interaction::BuyConfirm => &[
                (DO_BUY_CONFIRM, 1.0 - SHIP_TO_NEW_ADDRESS),
                (DO_BUY_CONFIRM_ADDRESS, SHIP_TO_NEW_ADDRESS),
                (CREATE_EMPTY_CART, 1.0),
            ],
            Interaction::OrderInquiry => &[(GET_USER_NAME, 1.0)],
            Interaction::OrderDisplay => &[(GET_PASSWORD, 1.0), (GET_MOST_RECENT_ORDER, 1.0)],
            Interaction::AdminRequest => &[(GET_BOOK, 1.0)],
            Interaction::AdminConfirm => &[(ADMIN_UPDATE, 1.0), (GET_BOOK, 1.0)],
        }
    }
}

/// A web-interaction mix (clause 5.2.1.2), percentages in the order of
/// `Interaction::ALL`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    pub name: &'static str,
    pub weights: [f64; 14],
}

impl Mix {
    pub const BROWSING: Mix = Mix {
        name: "browsing",
        weights: [
            29.00, 11.00, 11.00, 21.00, 12.00, 11.00, 2.00, 0.82, 0.75, 0.69, 0.30, 0.25, 0.10,
            0.09,
        ],
    };
    pub const SHOPPING: Mix = Mix {
        name: "shopping",
        weights: [
            16.00, 5.00, 5.00, 17.00, 20.00, 17.00, 11.60, 3.00, 2.60, 1.20, 0.75, 0.66, 0.10, 0.09,
        ],
    };
    pub const ORDERING: Mix = Mix {
        name: "ordering",
        weights: [
            9.12, 0.46, 0.46, 12.35, 14.53, 13.08, 13.53, 12.86, 12.73, 10.18, 0.25, 0.22, 0.12,
            0.11,
        ],
    };

    pub fn by_name(name: &str) -> Result<Mix> {
        match name {
            "browsing" => Ok(Mix::BROWSING),
            "shopping" => Ok(Mix::SHOPPING),
            "ordering" => Ok(Mix::ORDERING),
            other => Err(BenchError::Config(format!(
                "--mix: unknown tpcw mix `{other}` (expected browsing, shopping or ordering)"
            ))),
        }
    }

    pub(crate) fn cumulative(&self) -> [f64; 14] {
        let mut acc = 0.0;
        self.weights.map(|w| {
            acc += w;
            acc
        })
    }

    /// Expected share of calls per procedure (sums to 1).
    pub fn procedure_shares(&self) -> Vec<(&'static str, f64)> {
        let mut shares: Vec<(&'static str, f64)> = READ_ONLY
            .iter()
            .chain(&UPDATING)
            .map(|&p| (p, 0.0))
            .collect();
        for (i, w) in Interaction::ALL.iter().zip(self.weights) {
            for &(p, n) in i.transactions() {
                if let Some(s) = shares.iter_mut().find(|(q, _)| *q == p) {
                    s.1 += w * n;
                }
            }
        }
        let total: f64 = shares.iter().map(|s| s.1).sum();
        shares.iter_mut().for_each(|s| s.1 /= total);
        shares
    }

    /// Expected share of calls that may write.
    pub fn write_share(&self) -> f64 {
        self.procedure_shares()
            .iter()
            .filter(|(p, _)| UPDATING.contains(p))
            .map(|s| s.1)
            .sum()
    }
}

/// Id counters and counts of the current run, shared with every client.
/// New orders, customers, addresses and carts take ids from here, above
/// the loaded ones, so ids are unique and increase in time (a customer's
/// most recent order is its largest `o_id`).
#[derive(Default)]
pub struct RunState {
    pub(crate) next_o_id: AtomicI64,
    pub(crate) next_c_id: AtomicI64,
    pub(crate) next_addr_id: AtomicI64,
    pub(crate) next_sc_id: AtomicI64,
    /// The cluster's servers (nodes), learned at load: client `i` sits at
    /// site `i mod servers` and makes its new carts and customers there.
    pub(crate) servers: AtomicI64,
    /// I_STOCK of every item after load (index i_id - 1), for the check.
    pub(crate) initial_stock: Mutex<Vec<i64>>,
    pub(crate) interactions: AtomicU64,
    pub(crate) orders: AtomicU64,
    pub(crate) empty_cart_buys: AtomicU64,
}

pub struct Tpcw {
    scale: Scale,
    mix: Mix,
    base: BaseSet,
    run: Arc<RunState>,
}

impl Tpcw {
    pub fn new(scale: Scale, mix: Mix) -> Result<Tpcw> {
        if scale.items < 10 || scale.customers < 10 {
            return Err(BenchError::Config(format!(
                "tpcw scale `{}` is too small: {scale:?}",
                scale.name
            )));
        }
        Ok(Tpcw {
            scale,
            mix,
            base: BaseSet::of(&procedures::BASE_CAPABLE),
            run: Arc::new(RunState::default()),
        })
    }

    /// Which procedures are BASE under Salt (default: both buy-confirms;
    /// `BaseSet::none()` for the all-ACID application). Under `acid` and
    /// `callas` the choice changes nothing.
    pub fn with_base(mut self, base: BaseSet) -> Tpcw {
        self.base = base;
        self
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// Runs the checks and returns what they found (`Workload::check`
    /// fails on any violation).
    pub async fn find_violations(&self, cluster: &Cluster) -> Result<check::Findings> {
        check::check(cluster, self.scale, &self.run).await
    }

    /// The session of client `index` (what `Workload::client` returns).
    pub fn session(&self, index: u32, rng: SmallRng) -> TpcwClient {
        TpcwClient::new(index, rng, self.scale, &self.mix, self.run.clone())
    }
}

impl Workload for Tpcw {
    fn name(&self) -> &'static str {
        "tpcw"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("scale".into(), json!(self.scale.name));
        m.insert("items".into(), json!(self.scale.items));
        m.insert("customers".into(), json!(self.scale.customers));
        m.insert("mix".into(), json!(self.mix.name));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        self.mix.procedure_shares()
    }

    fn application(&self) -> Application {
        procedures::application(&self.base)
    }

    fn validate_clients(&self, clients: u32) -> Result<()> {
        if i64::from(clients) > self.scale.customers {
            return Err(BenchError::Config(format!(
                "tpcw: {clients} clients but only {} customers at scale `{}`: each client \
                 is the session of one customer (use fewer clients or --scale standard)",
                self.scale.customers, self.scale.name
            )));
        }
        Ok(())
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let r = &self.run;
            let s = self.scale;
            r.next_o_id.store(s.orders() + 1, Ordering::Relaxed);
            r.next_c_id.store(s.customers + 1, Ordering::Relaxed);
            r.next_addr_id.store(s.addresses() + 1, Ordering::Relaxed);
            r.next_sc_id.store(1, Ordering::Relaxed);
            r.servers
                .store(i64::from(cluster.config().nodes.max(1)), Ordering::Relaxed);
            for c in [&r.interactions, &r.orders, &r.empty_cart_buys] {
                c.store(0, Ordering::Relaxed);
            }
            let started = Instant::now();
            let stock = load::load(
                cluster,
                load::GenParams {
                    scale: s,
                    seed: cluster.config().seed,
                    now_us: input::now_us(),
                },
            )
            .await?;
            if let Ok(mut g) = r.initial_stock.lock() {
                *g = stock;
            }
            tracing::info!(
                scale = s.name,
                load_ms = started.elapsed().as_millis() as u64,
                "tpcw loaded"
            );
            Ok(())
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(self.session(index, rng))
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            check::check_or_fail(cluster, self.scale, &self.run)
                .await
                .map(|_| ())
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let r = &self.run;
        let mut m = Map::new();
        m.insert(
            "web_interactions".into(),
            json!(r.interactions.load(Ordering::Relaxed)),
        );
        m.insert(
            "orders_placed".into(),
            json!(r.orders.load(Ordering::Relaxed)),
        );
        m.insert(
            "empty_cart_buys".into(),
            json!(r.empty_cart_buys.load(Ordering::Relaxed)),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_are_the_spec_percentages() {
        for mix in [Mix::BROWSING, Mix::SHOPPING, Mix::ORDERING] {
            let sum: f64 = mix.weights.iter().sum();
            assert!((sum - 100.0).abs() < 0.011, "{} sums to {sum}", mix.name);
            let shares = mix.procedure_shares();
            assert_eq!(shares.len(), 20);
            assert!((shares.iter().map(|s| s.1).sum::<f64>() - 1.0).abs() < 1e-9);
        }
        // Writes grow from browsing to ordering.
        let (b, s, o) = (
            Mix::BROWSING.write_share(),
            Mix::SHOPPING.write_share(),
            Mix::ORDERING.write_share(),
        );
        assert!(b < s && s < o, "{b} {s} {o}");
        assert!((0.02..0.05).contains(&b), "browsing {b}");
        assert!((0.10..0.20).contains(&s), "shopping {s}");
        assert!((0.25..0.40).contains(&o), "ordering {o}");
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(matches!(Mix::by_name("odd"), Err(BenchError::Config(_))));
        assert!(matches!(Scale::by_name("huge"), Err(BenchError::Config(_))));
        let w = Tpcw::new(Scale::SMALL, Mix::SHOPPING).unwrap();
        assert!(w.validate_clients(288).is_ok());
        assert!(matches!(
            w.validate_clients(289),
            Err(BenchError::Config(m)) if m.contains("288 customers")
        ));
    }

    #[test]
    fn twenty_transactions_thirteen_read_only() {
        let app = procedures::application(&BaseSet::none());
        assert_eq!(app.procedures.len(), 20);
        for p in &app.procedures {
            assert!(
                READ_ONLY.contains(&p.name.as_str()) || UPDATING.contains(&p.name.as_str()),
                "{}",
                p.name
            );
            assert!(!p.statements.is_empty(), "{} declares no statement", p.name);
        }
        // A read-only transaction declares only SELECTs.
        for p in app
            .procedures
            .iter()
            .filter(|p| READ_ONLY.contains(&p.name.as_str()))
        {
            for (n, sql) in &p.statements {
                assert!(sql.trim_start().starts_with("SELECT"), "{}.{n}", p.name);
            }
        }
    }
}
