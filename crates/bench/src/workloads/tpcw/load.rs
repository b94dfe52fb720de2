//! Initial data (clause 4.7), generated on the blocking pool and loaded in
//! batches.
//!
//! ```text
//!  jobs, each with its own RNG seeded by (seed, job):
//!    Catalog    country, author, item      ─┐ spawn_blocking, all at once
//!    Customers  address, customer           ├──────────────────────────► rows
//!    Orders     orders, order_line, cc_xacts┘   in job order: Cluster::load
//! ```
//!
//! Sizes follow `Scale`: NUM_ITEMS items, NUM_ITEMS / 4 authors, 92
//! countries, NUM_CUSTOMERS customers, twice as many addresses, 0.9 x
//! NUM_CUSTOMERS orders of 1-5 lines each with one CC_XACTS row; carts
//! start empty. Every value is a function of the seed.

use brine_cluster::Cluster;
use brine_core::{Decimal, Row, Value};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::schema::*;
use super::Scale;
use crate::error::{BenchError, Result};
use crate::workloads::tpcc::random::{astring, nstring, vstr};

/// Rows per `Cluster::load` call.
const LOAD_BATCH: usize = 50_000;
/// Microseconds per day.
const DAY_US: i64 = 86_400_000_000;

/// What every generation job needs to know.
#[derive(Clone, Copy, Debug)]
pub struct GenParams {
    pub scale: Scale,
    pub seed: u64,
    /// The load's "current date and time", microseconds since the epoch.
    pub now_us: i64,
}

/// The tables a job produced, in load order.
pub type Tables = Vec<(&'static str, Vec<Row>)>;

/// One unit of parallel generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    Catalog,
    Customers,
    Orders,
}

pub const JOBS: [Job; 3] = [Job::Catalog, Job::Customers, Job::Orders];

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

fn ts(us: i64) -> Value {
    Value::Timestamp(us)
}

/// Generates one job's rows.
pub fn generate(job: Job, p: &GenParams) -> Tables {
    let k = match job {
        Job::Catalog => 1,
        Job::Customers => 2,
        Job::Orders => 3,
    };
    let mut rng = SmallRng::seed_from_u64(mix(mix(p.seed ^ 0x7470_6377) ^ k));
    match job {
        Job::Catalog => catalog(p, &mut rng),
        Job::Customers => customers(p, &mut rng),
        Job::Orders => orders(p, &mut rng),
    }
}

fn catalog(p: &GenParams, rng: &mut SmallRng) -> Tables {
    let s = p.scale;
    let countries = (1..=COUNTRIES)
        .map(|co| {
            vec![
                int(co),
                vstr(format!("Country-{co}")),
                Value::Decimal(Decimal::new(rng.gen_range(1_000..=10_000_000), 6)),
                vstr(astring(rng, 3, 18)),
            ]
        })
        .collect();
    let authors = (1..=s.authors())
        .map(|a| {
            vec![
                int(a),
                vstr(astring(rng, 3, 20)),
                vstr(digsyl(a)),
                vstr(astring(rng, 1, 20)),
                ts(p.now_us - rng.gen_range(3_650..=36_500) * DAY_US),
                vstr(astring(rng, 125, 500)),
            ]
        })
        .collect();
    let items = (1..=s.items)
        .map(|i| {
            let pub_date = p.now_us - rng.gen_range(1..=25_000) * DAY_US;
            let srp = rng.gen_range(100..=999_999);
            let cost = srp - srp * rng.gen_range(0..=50) / 100;
            // Clause 4.7.1: the first NUM_AUTHORS items have distinct
            // authors, the rest random ones.
            let author = if i <= s.authors() {
                i
            } else {
                rng.gen_range(1..=s.authors())
            };
            let mut row = vec![
                int(i),
                // DigSyl first so that title searches find a prefix.
                vstr(format!("{} {}", digsyl(i), astring(rng, 14, 40))),
                int(author),
                ts(pub_date),
                vstr(astring(rng, 14, 60)),
                Value::str(SUBJECTS[rng.gen_range(0..SUBJECTS.len())]),
                vstr(astring(rng, 100, 500)),
            ];
            let mut related = Vec::with_capacity(5);
            while related.len() < 5 {
                let r = rng.gen_range(1..=s.items);
                if r != i && !related.contains(&r) {
                    related.push(r);
                }
            }
            row.extend(related.into_iter().map(int));
            row.push(vstr(format!("img{}/thumb_{i}.gif", i % 100)));
            row.push(vstr(format!("img{}/image_{i}.gif", i % 100)));
            row.push(money(srp));
            row.push(money(cost));
            row.push(ts(pub_date + rng.gen_range(1..=30) * DAY_US));
            row.push(int(rng.gen_range(10..=30)));
            row.push(vstr(nstring(rng, 13, 13)));
            row.push(int(rng.gen_range(20..=9_999)));
            row.push(Value::str(BACKINGS[rng.gen_range(0..BACKINGS.len())]));
            row.push(vstr(format!(
                "{}x{}x{}",
                rng.gen_range(1..=9_999),
                rng.gen_range(1..=9_999),
                rng.gen_range(1..=9_999)
            )));
            row
        })
        .collect();
    vec![(COUNTRY, countries), (AUTHOR, authors), (ITEM, items)]
}

/// An ADDRESS row (clause 4.7.1).
pub fn address_row(rng: &mut impl Rng, addr_id: i64) -> Row {
    vec![
        int(addr_id),
        vstr(astring(rng, 15, 40)),
        vstr(astring(rng, 15, 40)),
        vstr(astring(rng, 4, 30)),
        vstr(astring(rng, 2, 20)),
        vstr(astring(rng, 5, 10)),
        int(rng.gen_range(1..=COUNTRIES)),
    ]
}

fn customers(p: &GenParams, rng: &mut SmallRng) -> Tables {
    let s = p.scale;
    let addresses = (1..=s.addresses()).map(|a| address_row(rng, a)).collect();
    let customers = (1..=s.customers)
        .map(|c| {
            let addr = rng.gen_range(1..=s.addresses());
            customer_row(rng, c, addr, p.now_us)
        })
        .collect();
    vec![(ADDRESS, addresses), (CUSTOMER, customers)]
}

/// A CUSTOMER row (clause 4.7.1): C_UNAME = DigSyl(C_ID), C_PASSWD its
/// lower case.
pub fn customer_row(rng: &mut impl Rng, c_id: i64, addr_id: i64, now_us: i64) -> Row {
    let uname = digsyl(c_id);
    let since = now_us - rng.gen_range(1..=730) * DAY_US;
    vec![
        int(c_id),
        vstr(uname.clone()),
        vstr(uname.to_lowercase()),
        vstr(astring(rng, 8, 15)),
        vstr(astring(rng, 8, 15)),
        int(addr_id),
        vstr(nstring(rng, 9, 16)),
        vstr(format!("{uname}@{}.com", astring(rng, 2, 9))),
        ts(since),
        ts(since + rng.gen_range(0..=60) * DAY_US),
        ts(now_us),
        ts(now_us + 7_200_000_000),
        Value::Decimal(Decimal::new(rng.gen_range(0..=50), 2)),
        money(0),
        money(rng.gen_range(0..=99_999)),
        ts(now_us - rng.gen_range(5_000..=36_000) * DAY_US),
        vstr(astring(rng, 100, 500)),
    ]
}

fn orders(p: &GenParams, rng: &mut SmallRng) -> Tables {
    let s = p.scale;
    let n = s.orders();
    let mut orders = Vec::with_capacity(n as usize);
    let mut lines = Vec::with_capacity(n as usize * 3);
    let mut xacts = Vec::with_capacity(n as usize);
    for o in 1..=n {
        let c = rng.gen_range(1..=s.customers);
        let date = p.now_us - rng.gen_range(1..=60) * DAY_US;
        let sub = rng.gen_range(1_000..=999_999);
        let tax = sub * 825 / 10_000;
        let count = rng.gen_range(1..=5);
        let total = sub + tax + 300 + 100 * count;
        orders.push(vec![
            int(c),
            int(o),
            ts(date),
            money(sub),
            money(tax),
            money(total),
            Value::str(SHIP_TYPES[rng.gen_range(0..SHIP_TYPES.len())]),
            ts(date + rng.gen_range(0..=7) * DAY_US),
            int(rng.gen_range(1..=s.addresses())),
            int(rng.gen_range(1..=s.addresses())),
            Value::str(STATUSES[rng.gen_range(0..STATUSES.len())]),
        ]);
        let mut items: Vec<i64> = (0..count).map(|_| rng.gen_range(1..=s.items)).collect();
        items.sort_unstable();
        items.dedup();
        items.shuffle(rng);
        for (l, i) in (1..).zip(items) {
            lines.push(vec![
                int(c),
                int(o),
                int(l),
                int(i),
                int(rng.gen_range(1..=300)),
                Value::Decimal(Decimal::new(rng.gen_range(0..=30), 2)),
                vstr(astring(rng, 20, 100)),
            ]);
        }
        xacts.push(vec![
            int(c),
            int(o),
            Value::str(CC_TYPES[rng.gen_range(0..CC_TYPES.len())]),
            vstr(nstring(rng, 16, 16)),
            vstr(astring(rng, 14, 30)),
            ts(p.now_us + rng.gen_range(10..=730) * DAY_US),
            vstr(astring(rng, 15, 15)),
            money(total),
            ts(date),
            int(rng.gen_range(1..=COUNTRIES)),
        ]);
    }
    vec![(ORDERS, orders), (ORDER_LINE, lines), (CC_XACTS, xacts)]
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
                .map_err(BenchError::cluster(format!("loading tpcw table `{table}`")))?;
        }
    }
    Ok(())
}

/// Generates and loads the whole database; returns every item's initial
/// I_STOCK (index i_id - 1), for the stock check.
pub async fn load(cluster: &Cluster, p: GenParams) -> Result<Vec<i64>> {
    let handles: Vec<_> = JOBS
        .into_iter()
        .map(|job| (job, tokio::task::spawn_blocking(move || generate(job, &p))))
        .collect();
    let mut stock = Vec::new();
    for (job, handle) in handles {
        let tables = handle
            .await
            .map_err(|e| BenchError::Internal(format!("tpcw generation of {job:?} failed: {e}")))?;
        for (table, rows) in &tables {
            if *table == ITEM {
                stock = rows
                    .iter()
                    .map(|r| r[ITEM_STOCK].as_int().unwrap_or(0))
                    .collect();
            }
        }
        load_tables(cluster, tables).await?;
    }
    Ok(stock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn generated_data_has_the_scale_sizes() {
        let s = Scale::SMALL;
        let p = GenParams {
            scale: s,
            seed: 7,
            now_us: 1_000_000 * DAY_US,
        };
        let mut counts: HashMap<&str, usize> = HashMap::new();
        let mut width: HashMap<&str, usize> = HashMap::new();
        let mut tables = HashMap::new();
        for job in JOBS {
            for (t, rows) in generate(job, &p) {
                counts.insert(t, rows.len());
                for r in &rows {
                    assert_eq!(*width.entry(t).or_insert(r.len()), r.len(), "{t}");
                }
                tables.insert(t, rows);
            }
        }
        assert_eq!(counts[COUNTRY], COUNTRIES as usize);
        assert_eq!(counts[AUTHOR] as i64, s.authors());
        assert_eq!(counts[ITEM] as i64, s.items);
        assert_eq!(counts[CUSTOMER] as i64, s.customers);
        assert_eq!(counts[ADDRESS] as i64, s.addresses());
        assert_eq!(counts[ORDERS] as i64, s.orders());
        assert_eq!(counts[CC_XACTS] as i64, s.orders());
        let lines = counts[ORDER_LINE] as i64;
        assert!((s.orders()..=5 * s.orders()).contains(&lines));
        assert_eq!(width[COUNTRY], COLUMNS_COUNTRY);
        assert_eq!(width[ADDRESS], COLUMNS_ADDRESS);
        assert_eq!(width[CUSTOMER], COLUMNS_CUSTOMER);
        assert_eq!(width[AUTHOR], COLUMNS_AUTHOR);
        assert_eq!(width[ITEM], COLUMNS_ITEM);
        assert_eq!(width[ORDERS], COLUMNS_ORDERS);
        assert_eq!(width[ORDER_LINE], COLUMNS_ORDER_LINE);
        assert_eq!(width[CC_XACTS], COLUMNS_CC_XACTS);
        // Unique user names; stock in the spec's 10..=30.
        let unames: HashSet<_> = tables[CUSTOMER].iter().map(|r| r[1].clone()).collect();
        assert_eq!(unames.len() as i64, s.customers);
        assert!(tables[ITEM]
            .iter()
            .all(|r| (10..=30).contains(&r[ITEM_STOCK].as_int().unwrap())));
        // Deterministic.
        assert_eq!(generate(Job::Catalog, &p), generate(Job::Catalog, &p));
    }
}
