//! RUBiS, the auction site modelled after eBay (seed 004 section 6): the
//! eight tables, the database transactions behind its client requests, the
//! bidding and browsing mixes and consistency checks, on brine's SQL
//! subset.
//!
//! ```text
//!  Rubis::new(scale, mix)
//!    application()  schema::DDL + procedures (17 read-only, 5 writing);
//!                   .with_base(--base): bid and buy-now BASE under Salt
//!    load()         load: RUBiS-like generated data, in batches
//!    client(i)      input::RubisClient: user i mod U + 1; draws a client
//!                   request from the mix and runs its transactions one
//!                   after another (a request is not atomic, as in RUBiS)
//!    check()        check: max bid / bid count vs bids, quantities vs
//!                   buy-nows, ratings vs comments, unique ids
//! ```
//!
//! What it guarantees: the data and requests follow RUBiS's (deviations in
//! `docs/workloads/rubis.md`); bids and buy-nows live on their item's
//! partition and comments on the rated user's, so every writing request but
//! the two registrations is single-partition; after any run at
//! serializable or read committed the checks hold (`--check` fails loudly
//! otherwise).

pub mod check;
pub mod input;
pub mod load;
pub mod procedures;
pub mod schema;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use brine_cluster::{Application, Cluster};
use rand::rngs::SmallRng;
use serde_json::{json, Map, Value as Json};

use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, Workload};
use crate::workloads::base::BaseSet;
use input::RubisClient;

pub const BROWSE_CATEGORIES: &str = "browse_categories";
pub const BROWSE_REGIONS: &str = "browse_regions";
pub const BROWSE_CATEGORIES_IN_REGION: &str = "browse_categories_in_region";
pub const SEARCH_ITEMS_BY_CATEGORY: &str = "search_items_by_category";
pub const SEARCH_ITEMS_BY_REGION: &str = "search_items_by_region";
pub const VIEW_ITEM: &str = "view_item";
pub const VIEW_BID_HISTORY: &str = "view_bid_history";
pub const VIEW_USER_INFO: &str = "view_user_info";
pub const AUTHENTICATE: &str = "authenticate";
pub const PUT_BID_FORM: &str = "put_bid_form";
pub const BUY_NOW_FORM: &str = "buy_now_form";
pub const PUT_COMMENT_FORM: &str = "put_comment_form";
pub const SELECT_CATEGORY_TO_SELL: &str = "select_category_to_sell";
pub const ABOUT_ME_USER: &str = "about_me_user";
pub const ABOUT_ME_BIDS: &str = "about_me_bids";
pub const ABOUT_ME_BOUGHT: &str = "about_me_bought";
pub const ABOUT_ME_SOLD: &str = "about_me_sold";
pub const STORE_BID: &str = "store_bid";
pub const STORE_BUY_NOW: &str = "store_buy_now";
pub const STORE_COMMENT: &str = "store_comment";
pub const REGISTER_USER: &str = "register_user";
pub const REGISTER_ITEM: &str = "register_item";

/// The read-only transactions (17, as seed 004's Table 1 counts).
pub const READ_ONLY: [&str; 17] = [
    BROWSE_CATEGORIES,
    BROWSE_REGIONS,
    BROWSE_CATEGORIES_IN_REGION,
    SEARCH_ITEMS_BY_CATEGORY,
    SEARCH_ITEMS_BY_REGION,
    VIEW_ITEM,
    VIEW_BID_HISTORY,
    VIEW_USER_INFO,
    AUTHENTICATE,
    PUT_BID_FORM,
    BUY_NOW_FORM,
    PUT_COMMENT_FORM,
    SELECT_CATEGORY_TO_SELL,
    ABOUT_ME_USER,
    ABOUT_ME_BIDS,
    ABOUT_ME_BOUGHT,
    ABOUT_ME_SOLD,
];
/// The transactions that write (5; the seed counts 9, see the docs).
pub const WRITING: [&str; 5] = [
    STORE_BID,
    STORE_BUY_NOW,
    STORE_COMMENT,
    REGISTER_USER,
    REGISTER_ITEM,
];

/// Database size. `standard` is RUBiS's default database (it loads in
/// about 26 s on two cores, see `docs/workloads/rubis.md`); `small` is
/// for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub name: &'static str,
    pub users: i64,
    /// Items for sale (ids `1..=items`).
    pub items: i64,
    /// Closed auctions (ids `items + 1..=items + old_items`), one comment each.
    pub old_items: i64,
    /// Bids per item are uniform in `0..=max_bids_per_item`.
    pub max_bids_per_item: i64,
}

impl Scale {
    /// RUBiS's own default database: 1M users, 33,000 items for sale,
    /// 500,000 closed auctions, ~10 bids an item (6 GB; loads in ~26 s
    /// on 2 cores).
    pub const FULL: Scale = Scale {
        name: "full",
        users: 1_000_000,
        items: 33_000,
        old_items: 500_000,
        max_bids_per_item: 20,
    };
    /// The default: RUBiS's items for sale and bids at a tenth of its
    /// users and closed auctions (every point of a sweep loads afresh).
    pub const STANDARD: Scale = Scale {
        name: "standard",
        users: 100_000,
        items: 33_000,
        old_items: 50_000,
        max_bids_per_item: 20,
    };
    pub const SMALL: Scale = Scale {
        name: "small",
        users: 1_000,
        items: 500,
        old_items: 500,
        max_bids_per_item: 6,
    };

    pub fn by_name(name: &str) -> Result<Scale> {
        match name {
            "standard" => Ok(Scale::STANDARD),
            "small" => Ok(Scale::SMALL),
            "full" => Ok(Scale::FULL),
            other => Err(BenchError::Config(format!(
                "--scale: unknown rubis scale `{other}` (expected small, standard or full)"
            ))),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.users < 1
            || self.items < 1
            || self.old_items < 0
            || !(0..256).contains(&self.max_bids_per_item)
            || self.items + self.old_items >= load::RUN_ID_BASE / 256
        {
            return Err(BenchError::Config(format!(
                "rubis scale `{}` is inconsistent: {self:?}",
                self.name
            )));
        }
        Ok(())
    }
}

/// A client request (one of RUBiS's interactions that touches the
/// database) and the transactions it runs, in order. Requests that only
/// show a static page (home, browse, register and sell forms) touch no
/// table and are left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub name: &'static str,
    pub transactions: &'static [&'static str],
}

/// Every request, in the order of `Mix::weights`.
pub const REQUESTS: [Request; 18] = [
    Request {
        name: "BrowseCategories",
        transactions: &[BROWSE_CATEGORIES],
    },
    Request {
        name: "BrowseRegions",
        transactions: &[BROWSE_REGIONS],
    },
    Request {
        name: "BrowseCategoriesInRegion",
        transactions: &[BROWSE_CATEGORIES_IN_REGION],
    },
    Request {
        name: "SearchItemsByCategory",
        transactions: &[SEARCH_ITEMS_BY_CATEGORY],
    },
    Request {
        name: "SearchItemsByRegion",
        transactions: &[SEARCH_ITEMS_BY_REGION],
    },
    Request {
        name: "ViewItem",
        transactions: &[VIEW_ITEM],
    },
    Request {
        name: "ViewBidHistory",
        transactions: &[VIEW_BID_HISTORY],
    },
    Request {
        name: "ViewUserInfo",
        transactions: &[VIEW_USER_INFO],
    },
    Request {
        name: "PutBid",
        transactions: &[AUTHENTICATE, PUT_BID_FORM],
    },
    Request {
        name: "StoreBid",
        transactions: &[STORE_BID],
    },
    Request {
        name: "BuyNow",
        transactions: &[AUTHENTICATE, BUY_NOW_FORM],
    },
    Request {
        name: "StoreBuyNow",
        transactions: &[STORE_BUY_NOW],
    },
    Request {
        name: "PutComment",
        transactions: &[AUTHENTICATE, PUT_COMMENT_FORM],
    },
    Request {
        name: "StoreComment",
        transactions: &[STORE_COMMENT],
    },
    Request {
        name: "SellItemForm",
        transactions: &[AUTHENTICATE, SELECT_CATEGORY_TO_SELL],
    },
    Request {
        name: "RegisterItem",
        transactions: &[REGISTER_ITEM],
    },
    Request {
        name: "RegisterUser",
        transactions: &[REGISTER_USER],
    },
    Request {
        name: "AboutMe",
        transactions: &[
            AUTHENTICATE,
            ABOUT_ME_USER,
            ABOUT_ME_BIDS,
            ABOUT_ME_BOUGHT,
            ABOUT_ME_SOLD,
        ],
    },
];

/// The request mix: relative weights of `REQUESTS` (normalized by their
/// sum). Each client draws requests independently from it (RUBiS's client
/// walks a Markov chain of transition tables; these weights are a flat
/// stand-in, see the docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    pub name: &'static str,
    pub weights: [f64; 18],
}

impl Mix {
    /// About 15% of the transactions write (seed 004: "a bidding mix with
    /// 15% write operations"; Table 1: 85% read-only).
    pub const BIDDING: Mix = Mix {
        name: "bidding",
        weights: [
            5.0, 2.0, 2.0, 20.0, 5.0, 20.0, 4.0, 4.0, // browse, search, view
            5.0, 9.0, // put bid, store bid
            2.0, 2.0, // buy now, store buy now
            1.0, 2.0, // put comment, store comment
            1.0, 1.5, // sell form, register item
            1.5, // register user
            2.0, // about me
        ],
    };
    /// Read-only: browsing, searching and viewing (RUBiS's browsing mix).
    pub const BROWSING: Mix = Mix {
        name: "browsing",
        weights: [
            8.0, 4.0, 4.0, 30.0, 10.0, 30.0, 7.0, 7.0, // browse, search, view
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
    };

    pub fn by_name(name: &str) -> Result<Mix> {
        match name {
            "bidding" => Ok(Mix::BIDDING),
            "browsing" => Ok(Mix::BROWSING),
            other => Err(BenchError::Config(format!(
                "--mix: unknown rubis mix `{other}` (expected bidding or browsing)"
            ))),
        }
    }

    fn cumulative(&self) -> [f64; 18] {
        let mut acc = 0.0;
        self.weights.map(|w| {
            acc += w;
            acc
        })
    }

    /// Each transaction's share of the transactions run (a request counts
    /// once per transaction it runs), in `application()` order.
    pub fn transaction_shares(&self) -> Vec<(&'static str, f64)> {
        let mut shares: Vec<(&'static str, f64)> = READ_ONLY
            .iter()
            .chain(WRITING.iter())
            .map(|&p| (p, 0.0))
            .collect();
        let mut total = 0.0;
        for (r, w) in REQUESTS.iter().zip(self.weights) {
            for t in r.transactions {
                if let Some(s) = shares.iter_mut().find(|(p, _)| p == t) {
                    s.1 += w;
                }
                total += w;
            }
        }
        if total > 0.0 {
            for s in &mut shares {
                s.1 /= total;
            }
        }
        shares
    }

    /// The share of transactions that write.
    pub fn write_share(&self) -> f64 {
        self.transaction_shares()
            .iter()
            .filter(|(p, _)| WRITING.contains(p))
            .map(|(_, s)| s)
            .sum()
    }
}

/// Counters of the current run, shared with every client.
#[derive(Default)]
pub struct RunState {
    pub bids: AtomicU64,
    pub buy_nows: AtomicU64,
    pub sold_out: AtomicU64,
    pub comments: AtomicU64,
    pub users_registered: AtomicU64,
    pub items_registered: AtomicU64,
    pub requests: AtomicU64,
}

pub struct Rubis {
    scale: Scale,
    mix: Mix,
    base: BaseSet,
    run: Arc<RunState>,
}

impl Rubis {
    pub fn new(scale: Scale, mix: Mix) -> Result<Rubis> {
        scale.validate()?;
        if mix.weights.iter().any(|w| !w.is_finite() || *w < 0.0)
            || mix.weights.iter().sum::<f64>() <= 0.0
        {
            return Err(BenchError::Config(format!(
                "rubis mix `{}` needs non-negative weights with a positive sum",
                mix.name
            )));
        }
        Ok(Rubis {
            scale,
            mix,
            base: BaseSet::of(&procedures::BASE_CAPABLE),
            run: Arc::new(RunState::default()),
        })
    }

    /// Which procedures are BASE under Salt (default: store_bid and
    /// store_buy_now; `BaseSet::none()` for the all-ACID application).
    /// Under `acid` and `callas` the choice changes nothing.
    pub fn with_base(mut self, base: BaseSet) -> Rubis {
        self.base = base;
        self
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// Runs the consistency check and returns what it found (without
    /// failing on violations; `Workload::check` fails).
    pub async fn find_violations(&self, cluster: &Cluster) -> Result<check::Findings> {
        check::check(cluster).await
    }

    /// The client generator of client `index` (what `Workload::client`
    /// returns, with its concrete type).
    pub fn session(&self, index: u32, rng: SmallRng) -> RubisClient {
        RubisClient::new(
            index,
            rng,
            self.scale,
            self.mix.cumulative(),
            self.run.clone(),
        )
    }
}

impl Workload for Rubis {
    fn name(&self) -> &'static str {
        "rubis"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("scale".into(), json!(self.scale.name));
        m.insert("mix".into(), json!(self.mix.name));
        m.insert("users".into(), json!(self.scale.users));
        m.insert("items".into(), json!(self.scale.items));
        m.insert("old_items".into(), json!(self.scale.old_items));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    /// Refuses `clients` clients if there are fewer users: each client
    /// acts as a user of its own (RUBiS's emulated sessions each log in
    /// as one user).
    fn validate_clients(&self, clients: u32) -> Result<()> {
        if i64::from(clients) > self.scale.users {
            return Err(BenchError::Config(format!(
                "rubis scale `{}` has {} users, fewer than the {clients} clients asked for \
                 (each client acts as a user of its own); use --scale standard or fewer clients",
                self.scale.name, self.scale.users
            )));
        }
        Ok(())
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        self.mix
            .transaction_shares()
            .into_iter()
            .filter(|(_, s)| *s > 0.0)
            .collect()
    }

    fn application(&self) -> Application {
        procedures::application(&self.base)
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let r = &self.run;
            for c in [
                &r.bids,
                &r.buy_nows,
                &r.sold_out,
                &r.comments,
                &r.users_registered,
                &r.items_registered,
                &r.requests,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            let started = Instant::now();
            load::load(
                cluster,
                load::GenParams {
                    scale: self.scale,
                    seed: cluster.config().seed,
                    now_us: input::now_us(),
                },
            )
            .await?;
            tracing::info!(
                scale = self.scale.name,
                load_ms = started.elapsed().as_millis() as u64,
                "rubis loaded"
            );
            Ok(())
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(self.session(index, rng))
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { check::check_or_fail(cluster).await.map(|_| ()) })
    }

    fn metrics(&self) -> Map<String, Json> {
        let r = &self.run;
        let mut m = Map::new();
        for (k, c) in [
            ("requests", &r.requests),
            ("bids_committed", &r.bids),
            ("buy_nows_committed", &r.buy_nows),
            ("buy_nows_sold_out", &r.sold_out),
            ("comments_committed", &r.comments),
            ("users_registered", &r.users_registered),
            ("items_registered", &r.items_registered),
        ] {
            m.insert(k.into(), json!(c.load(Ordering::Relaxed)));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_are_counted_as_the_seed_does() {
        let app = procedures::application(&BaseSet::none());
        assert_eq!(app.procedures.len(), READ_ONLY.len() + WRITING.len());
        for (p, name) in app
            .procedures
            .iter()
            .zip(READ_ONLY.iter().chain(WRITING.iter()))
        {
            assert_eq!(p.name, *name);
        }
        // Every transaction is run by some request.
        for name in READ_ONLY.iter().chain(WRITING.iter()) {
            assert!(
                REQUESTS.iter().any(|r| r.transactions.contains(name)),
                "{name} is run by no request"
            );
        }
    }

    #[test]
    fn search_statements_show_one_page() {
        let app = procedures::application(&BaseSet::none());
        let limit = format!("LIMIT {}", procedures::PAGE_SIZE);
        for name in [SEARCH_ITEMS_BY_CATEGORY, SEARCH_ITEMS_BY_REGION] {
            let p = app.procedures.iter().find(|p| p.name == name);
            assert!(
                p.is_some_and(|p| p.statements.iter().all(|(_, sql)| sql.contains(&limit))),
                "{name}"
            );
        }
    }

    #[test]
    fn bidding_writes_about_15_percent_and_browsing_none() {
        let w = Mix::BIDDING.write_share();
        assert!((0.14..=0.16).contains(&w), "bidding write share {w}");
        assert_eq!(Mix::BROWSING.write_share(), 0.0);
        for mix in [Mix::BIDDING, Mix::BROWSING] {
            let total: f64 = mix.transaction_shares().iter().map(|(_, s)| s).sum();
            assert!((total - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(matches!(
            Mix::by_name("selling"),
            Err(BenchError::Config(_))
        ));
        assert!(matches!(Scale::by_name("huge"), Err(BenchError::Config(_))));
        let r = Rubis::new(Scale::SMALL, Mix::BIDDING).expect("small rubis");
        assert!(r.validate_clients(1_000).is_ok());
        assert!(matches!(
            r.validate_clients(1_001),
            Err(BenchError::Config(_))
        ));
        let mut odd = Mix::BIDDING;
        odd.weights[0] = -1.0;
        assert!(Rubis::new(Scale::SMALL, odd).is_err());
    }
}
