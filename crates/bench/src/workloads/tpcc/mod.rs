//! TPC-C (revision 5.11): the nine tables, the five transactions, the
//! standard mix and the consistency conditions, on brine's SQL subset.
//!
//! ```text
//!  Tpcc::new(warehouses, scale, mix).with_base(--base)
//!    application()  schema::DDL + procedures::{new_order, payment,
//!                   order_status, delivery, stock_level}; those in
//!                   --base (default new_order,payment) are BASE (Salt)
//!    load()         load: clause 4.3 data, generated on the blocking pool
//!                   per (warehouse, job), loaded in batches
//!    client(i)      input::TpccClient: terminal of warehouse i mod W + 1,
//!                   mix 45/43/4/4/4 (or --mix salt), NURand inputs;
//!                   delivery handed to its warehouse's queue (deferred,
//!                   clause 2.7.2; one driver worker per warehouse) or run
//!                   by the terminal (--delivery inline)
//!    check()        check: clause 3.3.2 conditions 1-10 and 12
//!    metrics()      new_order_per_min (tpmC-style, not an audited result)
//! ```
//!
//! What it guarantees: data and inputs follow the clauses cited in each
//! module; every table is partitioned by its warehouse column, so a
//! transaction is single-partition unless it touches a remote warehouse
//! (1% of order lines, 15% of payments); at serializable the consistency
//! conditions hold after any run (`--check` fails loudly otherwise).
//! Deviations from the spec (no keying/think time, replicated ITEM, the
//! reduced `small` scale) are
//! listed in `docs/workloads/tpcc.md`.

pub mod check;
pub mod input;
pub mod load;
pub mod procedures;
pub mod random;
pub mod schema;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brine_cluster::{Application, Cluster, Isolation};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::{json, Map, Value as Json};

use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, Workload};
use crate::workloads::base::BaseSet;
use input::TpccClient;
use random::Constants;

pub const NEW_ORDER: &str = "new_order";
pub const PAYMENT: &str = "payment";
pub const ORDER_STATUS: &str = "order_status";
pub const DELIVERY: &str = "delivery";
pub const STOCK_LEVEL: &str = "stock_level";
/// The five transactions, in the order of `Mix::weights`.
pub const PROCEDURES: [&str; 5] = [NEW_ORDER, PAYMENT, ORDER_STATUS, DELIVERY, STOCK_LEVEL];
/// The procedures BASE-ified by default: the two the sources BASE-ified
/// (seed 000 section 3.6.1).
pub const DEFAULT_BASE: [&str; 2] = [NEW_ORDER, PAYMENT];

pub const DEFAULT_WAREHOUSES: i64 = 2;
/// A bound on the option; memory bounds it first (~430 MB per standard
/// warehouse).
pub const MAX_WAREHOUSES: i64 = 1_000;

/// Database size per warehouse. `standard` is clause 4.3's; the others are
/// reduced, non-standard sizes for quick tests, clearly labelled as such in
/// every report (`scale` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub name: &'static str,
    /// ITEM rows, and STOCK rows per warehouse (100,000).
    pub items: i64,
    /// Customers per district (3,000); also the initial orders per district.
    pub customers_per_district: i64,
    /// Undelivered initial orders per district, the last ones (900).
    pub new_orders_per_district: i64,
}

impl Scale {
    pub const STANDARD: Scale = Scale {
        name: "standard",
        items: 100_000,
        customers_per_district: 3_000,
        new_orders_per_district: 900,
    };
    /// Non-standard: 1% of the items, 100 customers and orders per district
    /// (30 of them new), for tests and smoke runs.
    pub const SMALL: Scale = Scale {
        name: "small",
        items: 1_000,
        customers_per_district: 100,
        new_orders_per_district: 30,
    };

    pub fn by_name(name: &str) -> Result<Scale> {
        match name {
            "standard" => Ok(Scale::STANDARD),
            "small" => Ok(Scale::SMALL),
            other => Err(BenchError::Config(format!(
                "--tpcc-scale: unknown scale `{other}` (expected standard or small)"
            ))),
        }
    }

    /// Distinct last names in a district: the first min(1000, customers)
    /// customers get names 0..999 in order (clause 4.3.2.3); run-time
    /// lookups draw NURand over the names that exist.
    pub fn last_names(&self) -> i64 {
        self.customers_per_district.min(1_000)
    }

    /// The first initially undelivered order (2,101 at standard scale).
    pub fn first_new_order(&self) -> i64 {
        self.customers_per_district - self.new_orders_per_district + 1
    }

    fn validate(&self) -> Result<()> {
        if self.items < 1
            || self.customers_per_district < 1
            || !(0..=self.customers_per_district).contains(&self.new_orders_per_district)
        {
            return Err(BenchError::Config(format!(
                "tpcc scale `{}` is inconsistent: {self:?}",
                self.name
            )));
        }
        Ok(())
    }
}

/// The transaction mix: relative weights of new-order, payment,
/// order-status, delivery and stock-level (normalized by their sum).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    pub name: &'static str,
    pub weights: [f64; 5],
}

impl Mix {
    /// Clause 5.2.3's minimums with new-order taking the rest.
    pub const STANDARD: Mix = Mix {
        name: "standard",
        weights: [45.0, 43.0, 4.0, 4.0, 4.0],
    };
    /// The mix Salt and Callas report (43.5/43.5/4.35/4.35/4.35; the shares
    /// sum to 100.05 and are normalized).
    pub const SALT: Mix = Mix {
        name: "salt",
        weights: [43.5, 43.5, 4.35, 4.35, 4.35],
    };

    pub fn by_name(name: &str) -> Result<Mix> {
        match name {
            "standard" => Ok(Mix::STANDARD),
            "salt" => Ok(Mix::SALT),
            other => Err(BenchError::Config(format!(
                "--mix: unknown mix `{other}` (expected standard or salt)"
            ))),
        }
    }

    fn cumulative(&self) -> [f64; 5] {
        let mut acc = 0.0;
        self.weights.map(|w| {
            acc += w;
            acc
        })
    }
}

/// Counters of the current run, shared with every client.
#[derive(Default)]
pub struct RunState {
    constants: Mutex<Option<Constants>>,
    /// When loading finished: the driver starts its clock right after.
    loaded_at: Mutex<Option<Instant>>,
    /// The driver's (warm-up, measured) intervals, when known.
    window: Option<(Duration, Duration)>,
    new_orders: AtomicU64,
    new_orders_in_window: AtomicU64,
    new_order_rollbacks: AtomicU64,
    deliveries: AtomicU64,
    districts_skipped: AtomicU64,
}

impl RunState {
    /// True if now is inside the measured interval.
    fn in_window(&self) -> bool {
        let (Some((warmup, duration)), Ok(Some(t0))) =
            (self.window, self.loaded_at.lock().map(|g| *g))
        else {
            return false;
        };
        let e = t0.elapsed();
        e >= warmup && e < warmup + duration
    }
}

pub struct Tpcc {
    warehouses: i64,
    scale: Scale,
    mix: Mix,
    base: BaseSet,
    delivery: Delivery,
    order: procedures::StatementOrder,
    stock_level: Isolation,
    run: Arc<RunState>,
}

/// How a terminal runs delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Clause 2.7.2: the terminal queues the request and goes on; one
    /// worker per warehouse serves its queue in order, so deliveries of a
    /// warehouse never contend with each other. Delivery's latency is from
    /// queueing to completion. The default.
    Deferred,
    /// The terminal runs delivery itself, like the other four (concurrent
    /// deliveries of a warehouse contend for the same oldest new orders).
    Inline,
}

impl Delivery {
    pub fn by_name(name: &str) -> Result<Delivery> {
        match name {
            "deferred" => Ok(Delivery::Deferred),
            "inline" => Ok(Delivery::Inline),
            other => Err(BenchError::Config(format!(
                "--delivery: unknown mode `{other}` (expected deferred or inline)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Delivery::Deferred => "deferred",
            Delivery::Inline => "inline",
        }
    }
}

impl Tpcc {
    pub fn new(warehouses: i64, scale: Scale, mix: Mix) -> Result<Tpcc> {
        if !(1..=MAX_WAREHOUSES).contains(&warehouses) {
            return Err(BenchError::Config(format!(
                "--warehouses must be between 1 and {MAX_WAREHOUSES}"
            )));
        }
        scale.validate()?;
        if mix.weights.iter().any(|w| !w.is_finite() || *w < 0.0)
            || mix.weights.iter().sum::<f64>() <= 0.0
        {
            return Err(BenchError::Config(format!(
                "tpcc mix `{}` needs non-negative weights with a positive sum",
                mix.name
            )));
        }
        Ok(Tpcc {
            warehouses,
            scale,
            mix,
            base: BaseSet::of(&DEFAULT_BASE),
            delivery: Delivery::Deferred,
            order: procedures::StatementOrder::HotLast,
            stock_level: Isolation::ReadCommitted,
            run: Arc::new(RunState::default()),
        })
    }

    /// Which procedures are BASE under Salt (default: new_order, payment;
    /// `BaseSet::none()` for the all-ACID application). Under `acid` the
    /// choice changes nothing.
    pub fn with_base(mut self, base: BaseSet) -> Tpcc {
        self.base = base;
        self
    }

    /// How terminals run delivery (default: deferred, clause 2.7.2).
    pub fn with_delivery(mut self, delivery: Delivery) -> Tpcc {
        self.delivery = delivery;
        self
    }

    /// Where new-order and payment take the hot rows (default: last).
    pub fn with_order(mut self, order: procedures::StatementOrder) -> Tpcc {
        self.order = order;
        self
    }

    /// The isolation stock-level needs (default: read committed, the
    /// level clause 3.4.1 requires of it; serializable holds its scan's
    /// read locks, on up to 200 stock rows, to its end). It runs at the
    /// weaker of this and the cluster's level; the other four always run
    /// at the cluster's.
    pub fn with_stock_level_isolation(mut self, isolation: Isolation) -> Tpcc {
        self.stock_level = isolation;
        self
    }

    /// Tells the workload the driver's warm-up and measured durations, so
    /// that `new_order_per_min` counts the new orders completed in the
    /// measured interval (the driver starts its clock as `load` returns).
    /// Without it the rate is taken over the whole run.
    pub fn with_measure_window(mut self, warmup: Duration, duration: Duration) -> Tpcc {
        if let Some(run) = Arc::get_mut(&mut self.run) {
            run.window = Some((warmup, duration));
        }
        self
    }

    pub fn warehouses(&self) -> i64 {
        self.warehouses
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// The NURand constants of the current run (after `load`).
    pub fn constants(&self) -> Option<Constants> {
        self.run.constants.lock().ok().and_then(|g| *g)
    }

    /// Runs the consistency check and returns what it found (without
    /// failing on violations; `Workload::check` fails).
    pub async fn find_violations(&self, cluster: &Cluster) -> Result<check::Findings> {
        check::check(cluster, self.warehouses).await
    }

    /// The client generator of terminal `index` (what `Workload::client`
    /// returns, with its concrete type).
    pub fn terminal(&self, index: u32, rng: SmallRng) -> TpccClient {
        let constants = self.constants().unwrap_or_else(|| {
            // Before any load (tests of input generation only).
            Constants::draw(&mut SmallRng::seed_from_u64(0))
        });
        let i = i64::from(index);
        TpccClient {
            rng,
            warehouses: self.warehouses,
            home_w: i % self.warehouses + 1,
            stock_level_d: (i / self.warehouses) % schema::DISTRICTS + 1,
            scale: self.scale,
            constants,
            cumulative: self.mix.cumulative(),
            history_base: (i + 1) << 32,
            history_seq: 0,
            run: self.run.clone(),
            defer_delivery: self.delivery == Delivery::Deferred,
        }
    }
}

impl Workload for Tpcc {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("warehouses".into(), json!(self.warehouses));
        m.insert("scale".into(), json!(self.scale.name));
        m.insert("mix".into(), json!(self.mix.name));
        m.insert("base".into(), json!(self.base.label()));
        m.insert("delivery".into(), json!(self.delivery.name()));
        m.insert("order".into(), json!(self.order.name()));
        m.insert(
            "stock_level_isolation".into(),
            json!(self.stock_level.to_string()),
        );
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let total: f64 = self.mix.weights.iter().sum();
        PROCEDURES
            .iter()
            .zip(self.mix.weights)
            .map(|(&p, w)| (p, w / total))
            .collect()
    }

    fn application(&self) -> Application {
        procedures::application(&self.base, self.order, self.stock_level)
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let r = &self.run;
            for c in [
                &r.new_orders,
                &r.new_orders_in_window,
                &r.new_order_rollbacks,
                &r.deliveries,
                &r.districts_skipped,
            ] {
                c.store(0, Ordering::Relaxed);
            }
            let seed = cluster.config().seed;
            let constants = Constants::draw(&mut SmallRng::seed_from_u64(seed ^ 0xC0_C0));
            if let Ok(mut g) = r.constants.lock() {
                *g = Some(constants);
            }
            let started = Instant::now();
            load::load(
                cluster,
                self.warehouses,
                load::GenParams {
                    scale: self.scale,
                    seed,
                    constants,
                    now_us: input::now_us(),
                },
            )
            .await?;
            tracing::info!(
                warehouses = self.warehouses,
                scale = self.scale.name,
                load_ms = started.elapsed().as_millis() as u64,
                "tpcc loaded"
            );
            if let Ok(mut g) = r.loaded_at.lock() {
                *g = Some(Instant::now());
            }
            Ok(())
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(self.terminal(index, rng))
    }

    fn deferred_queues(&self) -> usize {
        match self.delivery {
            Delivery::Deferred => usize::try_from(self.warehouses).unwrap_or(0),
            Delivery::Inline => 0,
        }
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            check::check_or_fail(cluster, self.warehouses)
                .await
                .map(|_| ())
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let r = &self.run;
        let mut m = Map::new();
        let new_orders = r.new_orders.load(Ordering::Relaxed);
        let per_min = match (r.window, r.loaded_at.lock().ok().and_then(|g| *g)) {
            (Some((_, d)), _) if !d.is_zero() => {
                r.new_orders_in_window.load(Ordering::Relaxed) as f64 * 60.0 / d.as_secs_f64()
            }
            (_, Some(t0)) if t0.elapsed() > Duration::ZERO => {
                new_orders as f64 * 60.0 / t0.elapsed().as_secs_f64()
            }
            _ => 0.0,
        };
        m.insert(
            "new_order_per_min".into(),
            json!((per_min * 10.0).round() / 10.0),
        );
        m.insert(
            "new_order_per_min_note".into(),
            json!("tpmC-style, not an audited TPC result"),
        );
        m.insert("new_orders_committed".into(), json!(new_orders));
        m.insert(
            "new_order_rollbacks".into(),
            json!(r.new_order_rollbacks.load(Ordering::Relaxed)),
        );
        m.insert(
            "deliveries".into(),
            json!(r.deliveries.load(Ordering::Relaxed)),
        );
        m.insert(
            "delivery_districts_skipped".into(),
            json!(r.districts_skipped.load(Ordering::Relaxed)),
        );
        m
    }
}
