//! Initial data (clause 4.3.3.1), generated in parallel and loaded in
//! batches.
//!
//! ```text
//!  item template (once) ─┐
//!  jobs per warehouse:   ├─ spawn_blocking, at most `cores` in flight ─► rows
//!   core  (warehouse, district, customer, history)                      │
//!   orders (orders, order_line, new_order)                               ▼
//!   stock (stock, item copy)                    in job order: Cluster::load in batches
//! ```
//!
//! Every job draws from its own RNG seeded by (seed, warehouse, job), so
//! the data is a function of the seed whatever the thread timing.

use std::collections::VecDeque;
use std::sync::Arc;

use brine_cluster::Cluster;
use brine_core::{Decimal, Row, Value};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::random::{
    astring, data_with_original, decimal, last_name, nstring, nurand, vstr, zip, Constants,
    A_C_LAST,
};
use super::schema::*;
use super::Scale;
use crate::error::{BenchError, Result};

/// Rows per `Cluster::load` call.
const LOAD_BATCH: usize = 50_000;

/// What every generation job needs to know.
#[derive(Clone, Copy, Debug)]
pub struct GenParams {
    pub scale: Scale,
    pub seed: u64,
    pub constants: Constants,
    /// The load's "current date and time", microseconds since the epoch.
    pub now_us: i64,
}

/// The tables a job produced, in load order.
pub type Tables = Vec<(&'static str, Vec<Row>)>;

/// One unit of parallel generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// WAREHOUSE, DISTRICT, CUSTOMER and HISTORY of one warehouse.
    Core(i64),
    /// ORDER, ORDER_LINE and NEW_ORDER of one warehouse.
    Orders(i64),
    /// STOCK and the warehouse's copy of ITEM.
    Stock(i64),
}

impl Job {
    fn rng(self, seed: u64) -> SmallRng {
        let (w, k) = match self {
            Job::Core(w) => (w, 1u64),
            Job::Orders(w) => (w, 2),
            Job::Stock(w) => (w, 3),
        };
        SmallRng::seed_from_u64(mix(mix(seed ^ 0x7470_6363) ^ w as u64) ^ k)
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Every job of a database of `warehouses` warehouses.
pub fn jobs(warehouses: i64) -> Vec<Job> {
    (1..=warehouses)
        .flat_map(|w| [Job::Core(w), Job::Stock(w), Job::Orders(w)])
        .collect()
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

/// The ITEM rows (clause 4.3.3.1) with `i_w_id` left as 0: each
/// warehouse's copy replaces it. Strings are shared between copies.
pub fn item_template(p: &GenParams) -> Vec<Row> {
    let mut rng = SmallRng::seed_from_u64(mix(p.seed ^ 0x6974_656d));
    (1..=p.scale.items)
        .map(|i| {
            vec![
                int(0),
                int(i),
                int(rng.gen_range(1..=10_000)),
                vstr(astring(&mut rng, 14, 24)),
                decimal(&mut rng, 100, 10_000, 2),
                vstr(data_with_original(&mut rng)),
            ]
        })
        .collect()
}

/// Generates one job's rows.
pub fn generate(job: Job, p: &GenParams, items: &[Row]) -> Tables {
    let mut rng = job.rng(p.seed);
    match job {
        Job::Core(w) => core(w, p, &mut rng),
        Job::Orders(w) => orders(w, p, &mut rng),
        Job::Stock(w) => stock(w, p, &mut rng, items),
    }
}

fn address(rng: &mut SmallRng, row: &mut Row) {
    row.push(vstr(astring(rng, 10, 20)));
    row.push(vstr(astring(rng, 10, 20)));
    row.push(vstr(astring(rng, 10, 20)));
    row.push(vstr(astring(rng, 2, 2)));
    row.push(vstr(zip(rng)));
}

fn core(w: i64, p: &GenParams, rng: &mut SmallRng) -> Tables {
    let s = p.scale;
    let mut wrow = vec![int(w), vstr(astring(rng, 6, 10))];
    address(rng, &mut wrow);
    wrow.push(decimal(rng, 0, 2_000, 4));
    // W_YTD = 300,000.00 at full scale: the sum of its districts' D_YTD,
    // which is customers x 10.00 each (consistency condition 1).
    let d_ytd_cents = s.customers_per_district * 1_000;
    wrow.push(money(d_ytd_cents * DISTRICTS));

    let per_district = s.customers_per_district as usize;
    let mut districts = Vec::with_capacity(DISTRICTS as usize);
    let mut customers = Vec::with_capacity(per_district * DISTRICTS as usize);
    let mut history = Vec::with_capacity(per_district * DISTRICTS as usize);
    let since = Value::Timestamp(p.now_us);
    for d in 1..=DISTRICTS {
        let mut drow = vec![int(w), int(d), vstr(astring(rng, 6, 10))];
        address(rng, &mut drow);
        drow.push(decimal(rng, 0, 2_000, 4));
        drow.push(money(d_ytd_cents));
        drow.push(int(s.customers_per_district + 1));
        districts.push(drow);
        for c in 1..=s.customers_per_district {
            // Clause 4.3.2.3: the first 1,000 customers get the names 0..999
            // in order, the rest NURand(255, 0, 999) with C_LOAD.
            let name = if c <= s.last_names() {
                last_name(c - 1)
            } else {
                last_name(nurand(rng, A_C_LAST, p.constants.c_last_load, 0, 999))
            };
            let mut crow = vec![
                int(w),
                int(d),
                int(c),
                vstr(astring(rng, 8, 16)),
                Value::str("OE"),
                vstr(name),
            ];
            crow.push(vstr(astring(rng, 10, 20)));
            crow.push(vstr(astring(rng, 10, 20)));
            crow.push(vstr(astring(rng, 10, 20)));
            crow.push(vstr(astring(rng, 2, 2)));
            crow.push(vstr(zip(rng)));
            crow.push(vstr(nstring(rng, 16, 16)));
            crow.push(since.clone());
            crow.push(Value::str(if rng.gen_range(0..10) == 0 {
                "BC"
            } else {
                "GC"
            }));
            crow.push(money(5_000_000));
            crow.push(decimal(rng, 0, 5_000, 4));
            crow.push(money(-1_000));
            crow.push(money(1_000));
            crow.push(int(1));
            crow.push(int(0));
            crow.push(vstr(astring(rng, 300, 500)));
            customers.push(crow);
            history.push(vec![
                int(w),
                int(d),
                int(c),
                int(c),
                int(d),
                int(w),
                since.clone(),
                money(1_000),
                vstr(astring(rng, 12, 24)),
            ]);
        }
    }
    vec![
        (WAREHOUSE, vec![wrow]),
        (DISTRICT, districts),
        (CUSTOMER, customers),
        (HISTORY, history),
    ]
}

fn orders(w: i64, p: &GenParams, rng: &mut SmallRng) -> Tables {
    let s = p.scale;
    let n = s.customers_per_district;
    let first_new = s.first_new_order();
    let entry = Value::Timestamp(p.now_us);
    let mut orders = Vec::with_capacity((n * DISTRICTS) as usize);
    let mut lines = Vec::with_capacity((n * DISTRICTS * 10) as usize);
    let mut new_orders = Vec::with_capacity((s.new_orders_per_district * DISTRICTS) as usize);
    for d in 1..=DISTRICTS {
        // O_C_ID is a random permutation of the customers (clause 4.3.3.1).
        let mut perm: Vec<i64> = (1..=n).collect();
        perm.shuffle(rng);
        for (o, &c) in (1..=n).zip(&perm) {
            let delivered = o < first_new;
            let ol_cnt = rng.gen_range(5..=15);
            orders.push(vec![
                int(w),
                int(d),
                int(o),
                int(c),
                entry.clone(),
                if delivered {
                    int(rng.gen_range(1..=10))
                } else {
                    Value::Null
                },
                int(ol_cnt),
                int(1),
            ]);
            for number in 1..=ol_cnt {
                lines.push(vec![
                    int(w),
                    int(d),
                    int(o),
                    int(number),
                    int(rng.gen_range(1..=s.items)),
                    int(w),
                    if delivered {
                        entry.clone()
                    } else {
                        Value::Null
                    },
                    int(5),
                    if delivered {
                        money(0)
                    } else {
                        decimal(rng, 1, 999_999, 2)
                    },
                    vstr(astring(rng, 24, 24)),
                ]);
            }
            if !delivered {
                new_orders.push(vec![int(w), int(d), int(o)]);
            }
        }
    }
    vec![
        (ORDERS, orders),
        (ORDER_LINE, lines),
        (NEW_ORDER, new_orders),
    ]
}

fn stock(w: i64, p: &GenParams, rng: &mut SmallRng, items: &[Row]) -> Tables {
    let stock = (1..=p.scale.items)
        .map(|i| {
            let mut row = Vec::with_capacity(COLUMNS_STOCK);
            row.push(int(w));
            row.push(int(i));
            row.push(int(rng.gen_range(10..=100)));
            for _ in 0..DISTRICTS {
                row.push(vstr(astring(rng, 24, 24)));
            }
            row.push(int(0));
            row.push(int(0));
            row.push(int(0));
            row.push(vstr(data_with_original(rng)));
            row
        })
        .collect();
    let item = items
        .iter()
        .map(|t| {
            let mut row = t.clone();
            row[0] = int(w);
            row
        })
        .collect();
    vec![(STOCK, stock), (ITEM, item)]
}

/// Loads one job's tables, in batches.
async fn load_tables(cluster: &Cluster, tables: Tables) -> Result<()> {
    for (table, rows) in tables {
        let mut it = rows.into_iter();
        loop {
            let batch: Vec<Row> = it.by_ref().take(LOAD_BATCH).collect();
            if batch.is_empty() {
                break;
            }
            cluster
                .load(table, batch)
                .await
                .map_err(BenchError::cluster(format!("loading tpcc table `{table}`")))?;
        }
    }
    Ok(())
}

/// Generates and loads the whole database: generation jobs run on the
/// blocking pool, at most one per core ahead of the loader.
pub async fn load(cluster: &Cluster, warehouses: i64, p: GenParams) -> Result<()> {
    let items = tokio::task::spawn_blocking(move || Arc::new(item_template(&p)))
        .await
        .map_err(|e| BenchError::Internal(format!("tpcc item generation failed: {e}")))?;
    let ahead = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut pending = VecDeque::new();
    let mut jobs = jobs(warehouses).into_iter();
    loop {
        while pending.len() < ahead {
            let Some(job) = jobs.next() else { break };
            let items = items.clone();
            pending.push_back((
                job,
                tokio::task::spawn_blocking(move || generate(job, &p, &items)),
            ));
        }
        let Some((job, handle)) = pending.pop_front() else {
            break;
        };
        let tables = handle
            .await
            .map_err(|e| BenchError::Internal(format!("tpcc generation of {job:?} failed: {e}")))?;
        load_tables(cluster, tables).await?;
    }
    Ok(())
}
