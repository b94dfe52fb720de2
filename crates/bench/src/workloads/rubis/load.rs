//! Initial data, modelled on RUBiS's database generator (`initDB`), loaded
//! in batches.
//!
//! ```text
//!  categories, regions          (fixed lists)
//!  ratings  <- one comment per old item, to its seller (pass 1, cheap)
//!  users    1..=U               rating = sum of the comments they received
//!  items    1..=I        + their bids
//!  old_items I+1..=I+O   + their bids + one comment each
//! ```
//!
//! Every row (and every item's bids) draws from an RNG seeded by (seed,
//! table, id), so the data is a function of the seed whatever the batch
//! boundaries, and the tests can regenerate any row. Generation of the next
//! batch runs on the blocking pool while the current one loads.
//!
//! Id spaces: loaded ids are below [`RUN_ID_BASE`]; ids made at run time by
//! client `c` are `(c + 1) * RUN_ID_BASE + seq` (see `input`), so they never
//! collide with each other or with loaded ones.

use std::sync::Arc;

use brine_cluster::Cluster;
use brine_core::{Decimal, Row, Value};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::schema::*;
use super::Scale;
use crate::error::{BenchError, Result};

/// Items (and users) per generated batch.
const BATCH: i64 = 10_000;

/// Loaded ids are below this; run-time ids are multiples of it plus a
/// sequence number.
pub const RUN_ID_BASE: i64 = 1 << 40;

/// Loaded bid ids of item `i` are `i * BIDS_PER_ITEM_ID + k`.
const BIDS_PER_ITEM_ID: i64 = 256;

/// The comment ratings RUBiS's generator draws from.
pub const RATINGS: [i64; 5] = [-5, -3, 0, 3, 5];

/// Microseconds per day.
pub const DAY_US: i64 = 86_400_000_000;

/// The 20 categories of RUBiS's default database (its `ebay_simple_categories.txt`).
pub const CATEGORY_NAMES: [&str; 20] = [
    "Antiques & Art",
    "Books",
    "Business, Office & Industrial",
    "Clothing & Accessories",
    "Coins",
    "Collectibles",
    "Computers",
    "Consumer Electronics",
    "Dolls & Bears",
    "Home & Garden",
    "Jewelry, Gems & Watches",
    "Movies & Television",
    "Music",
    "Photo",
    "Pottery & Glass",
    "Sports",
    "Stamps",
    "Tickets & Travel",
    "Toys & Hobbies",
    "Everything Else",
];

/// Regions (RUBiS's default database has 62, "AZ--Phoenix" and so on).
pub const REGION_COUNT: i64 = 62;

/// What every generation step needs to know.
#[derive(Clone, Copy, Debug)]
pub struct GenParams {
    pub scale: Scale,
    pub seed: u64,
    /// The load's "now", microseconds since the epoch.
    pub now_us: i64,
}

/// The tables a batch produced, in load order.
pub type Tables = Vec<(&'static str, Vec<Row>)>;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The RNG of row `id` of stream `tag`.
fn rng(seed: u64, tag: u64, id: i64) -> SmallRng {
    SmallRng::seed_from_u64(mix(mix(seed ^ 0x0072_7562_6973 ^ tag) ^ id as u64))
}

const TAG_ITEM: u64 = 1;
const TAG_BIDS: u64 = 2;
const TAG_COMMENT: u64 = 3;

fn int(v: i64) -> Value {
    Value::Int(v)
}

pub fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

fn text(rng: &mut SmallRng, min: usize, max: usize) -> Value {
    const WORDS: [&str; 8] = [
        "vintage", "mint", "rare", "boxed", "classic", "used", "signed", "new",
    ];
    let len = rng.gen_range(min..=max);
    let mut s = String::with_capacity(len + 8);
    while s.len() < len {
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
        s.push(' ');
    }
    s.truncate(len);
    Value::str(&s)
}

/// The region of user `id` (RUBiS assigns regions round robin).
pub fn region_of(user: i64) -> i64 {
    (user - 1).rem_euclid(REGION_COUNT) + 1
}

/// The nickname and password of user `id` (RUBiS: `user<id>` / `password<id>`).
pub fn nickname(user: i64) -> String {
    format!("user{user}")
}

pub fn password(user: i64) -> String {
    format!("password{user}")
}

/// The seller of item `id`: the first draw of the item's RNG.
fn draw_seller(rng: &mut SmallRng, s: &Scale) -> i64 {
    rng.gen_range(1..=s.users)
}

/// The seller of item `id` (active or old).
pub fn seller_of(p: &GenParams, id: i64) -> i64 {
    draw_seller(&mut rng(p.seed, TAG_ITEM, id), &p.scale)
}

/// Item `id` (old when `id > scale.items`) and its bids.
pub fn item(p: &GenParams, id: i64) -> (Row, Vec<Row>) {
    let s = &p.scale;
    let old = id > s.items;
    let mut r = rng(p.seed, TAG_ITEM, id);
    let seller = draw_seller(&mut r, s);
    let category = r.gen_range(1..=CATEGORY_NAMES.len() as i64);
    let initial_cents = r.gen_range(100..=10_000);
    // RUBiS: most items are single; some are lots of up to 10.
    let quantity = if r.gen_range(0..10) < 8 {
        1
    } else {
        r.gen_range(2..=10)
    };
    let reserve_cents = if r.gen_range(0..10) < 4 {
        initial_cents + r.gen_range(100..=1_000)
    } else {
        0
    };
    let buy_now_cents = if r.gen_range(0..10) < 1 {
        initial_cents + r.gen_range(1_000..=5_000)
    } else {
        0
    };
    let duration = r.gen_range(1..=7) * DAY_US;
    let (start, end) = if old {
        let end = p.now_us - r.gen_range(1..=30) * DAY_US;
        (end - duration, end)
    } else {
        let start = p.now_us - r.gen_range(0..DAY_US);
        (start, start + duration)
    };
    let name = Value::str(&format!("RUBiS automatically generated item #{id}"));
    let description = text(&mut r, 20, 60);

    let mut br = rng(p.seed, TAG_BIDS, id);
    let nb = br.gen_range(0..=s.max_bids_per_item);
    let mut bid_cents = initial_cents;
    let mut bids = Vec::with_capacity(nb as usize);
    for k in 0..nb {
        bid_cents += br.gen_range(1..=10) * 100;
        let bidder = br.gen_range(1..=s.users);
        bids.push(vec![
            int(id),
            int(id * BIDS_PER_ITEM_ID + k),
            int(bidder),
            int(1),
            money(bid_cents),
            money(bid_cents + br.gen_range(0..=10) * 100),
            Value::Timestamp(start + k),
        ]);
    }
    let max_bid = if nb > 0 { bid_cents } else { 0 };
    let row = vec![
        int(id),
        name,
        description,
        money(initial_cents),
        int(quantity),
        int(quantity),
        money(reserve_cents),
        money(buy_now_cents),
        int(nb),
        money(max_bid),
        Value::Timestamp(start),
        Value::Timestamp(end),
        int(seller),
        int(category),
        int(region_of(seller)),
    ];
    (row, bids)
}

/// The comment left on old item `id`: to its seller, from a random user.
pub fn comment(p: &GenParams, id: i64) -> Row {
    let mut r = rng(p.seed, TAG_COMMENT, id);
    let from = r.gen_range(1..=p.scale.users);
    let rating = RATINGS[r.gen_range(0..RATINGS.len())];
    let date = p.now_us - r.gen_range(1..=30) * DAY_US;
    vec![
        int(seller_of(p, id)),
        int(id),
        int(from),
        int(id),
        int(rating),
        Value::Timestamp(date),
        text(&mut r, 20, 60),
    ]
}

/// Every user's rating: the sum of the loaded comments they received
/// (index `user - 1`).
pub fn ratings(p: &GenParams) -> Vec<i64> {
    let s = &p.scale;
    let mut out = vec![0i64; s.users as usize];
    for id in s.items + 1..=s.items + s.old_items {
        let c = comment(p, id);
        if let (Some(to), Some(rating)) = (c[0].as_int(), c[4].as_int()) {
            if let Some(slot) = out.get_mut((to - 1) as usize) {
                *slot += rating;
            }
        }
    }
    out
}

/// User `id`.
pub fn user(p: &GenParams, id: i64, rating: i64) -> Row {
    vec![
        int(id),
        Value::str(&format!("Great{id}")),
        Value::str(&format!("User{id}")),
        Value::str(&nickname(id)),
        Value::str(&password(id)),
        Value::str(&format!("Great{id}.User{id}@rubis.com")),
        int(rating),
        money(0),
        Value::Timestamp(p.now_us),
        int(region_of(id)),
    ]
}

/// One unit of generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    Users(i64, i64),
    /// Items (active or old, by id) with their bids, and old items'
    /// comments.
    Items(i64, i64),
}

/// The batches of the whole database, in load order.
pub fn batches(s: &Scale) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut push = |n: i64, first: i64, f: fn(i64, i64) -> Batch| {
        let mut lo = first;
        while lo < first + n {
            let hi = (lo + BATCH).min(first + n);
            out.push(f(lo, hi));
            lo = hi;
        }
    };
    push(s.users, 1, Batch::Users);
    push(s.items + s.old_items, 1, Batch::Items);
    out
}

/// Generates one batch's rows (ids `lo..hi`).
pub fn generate(batch: Batch, p: &GenParams, ratings: &[i64]) -> Tables {
    match batch {
        Batch::Users(lo, hi) => vec![(
            USERS,
            (lo..hi)
                .map(|id| user(p, id, ratings.get((id - 1) as usize).copied().unwrap_or(0)))
                .collect(),
        )],
        Batch::Items(lo, hi) => {
            let mut items = Vec::new();
            let mut old = Vec::new();
            let mut bids = Vec::new();
            let mut comments = Vec::new();
            for id in lo..hi {
                let (row, b) = item(p, id);
                bids.extend(b);
                if id > p.scale.items {
                    old.push(row);
                    comments.push(comment(p, id));
                } else {
                    items.push(row);
                }
            }
            vec![
                (ITEMS, items),
                (OLD_ITEMS, old),
                (BIDS, bids),
                (COMMENTS, comments),
            ]
        }
    }
}

/// The fixed tables.
pub fn fixed() -> Tables {
    let categories = CATEGORY_NAMES
        .iter()
        .zip(1..)
        .map(|(name, id)| vec![int(id), Value::str(name)])
        .collect();
    let regions = (1..=REGION_COUNT)
        .map(|id| vec![int(id), Value::str(&format!("Region {id}"))])
        .collect();
    vec![(CATEGORIES, categories), (REGIONS, regions)]
}

async fn load_tables(cluster: &Cluster, tables: Tables) -> Result<()> {
    for (table, rows) in tables {
        if rows.is_empty() {
            continue;
        }
        cluster
            .load(table, rows)
            .await
            .map_err(BenchError::cluster(format!(
                "loading rubis table `{table}`"
            )))?;
    }
    Ok(())
}

/// Generates and loads the whole database; the next batch is generated on
/// the blocking pool while the current one loads.
pub async fn load(cluster: &Cluster, p: GenParams) -> Result<()> {
    load_tables(cluster, fixed()).await?;
    let ratings = tokio::task::spawn_blocking(move || Arc::new(ratings(&p)))
        .await
        .map_err(|e| BenchError::Internal(format!("rubis rating generation failed: {e}")))?;
    let spawn = |b: Batch| {
        let ratings = ratings.clone();
        tokio::task::spawn_blocking(move || generate(b, &p, &ratings))
    };
    let mut batches = batches(&p.scale).into_iter();
    let mut next = batches.next().map(|b| (b, spawn(b)));
    while let Some((b, handle)) = next.take() {
        let tables = handle
            .await
            .map_err(|e| BenchError::Internal(format!("rubis generation of {b:?} failed: {e}")))?;
        next = batches.next().map(|b| (b, spawn(b)));
        load_tables(cluster, tables).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn params(scale: Scale) -> GenParams {
        GenParams {
            scale,
            seed: 7,
            now_us: 1_000 * DAY_US,
        }
    }

    #[test]
    fn generated_data_has_the_scale_sizes_and_keeps_the_checks() {
        let p = params(Scale::SMALL);
        let s = p.scale;
        let ratings = ratings(&p);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        let mut widths: HashMap<&str, usize> = HashMap::new();
        let mut bids_of: HashMap<i64, (i64, i64)> = HashMap::new();
        let mut items: Vec<Row> = Vec::new();
        let mut received: HashMap<i64, i64> = HashMap::new();
        let mut bid_ids = HashSet::new();
        for (table, rows) in fixed().into_iter().chain(
            batches(&s)
                .into_iter()
                .flat_map(|b| generate(b, &p, &ratings)),
        ) {
            *counts.entry(table).or_default() += rows.len();
            for r in &rows {
                assert_eq!(*widths.entry(table).or_insert(r.len()), r.len(), "{table}");
                match table {
                    BIDS => {
                        let e = bids_of.entry(r[0].as_int().unwrap_or(0)).or_default();
                        e.0 += 1;
                        e.1 =
                            e.1.max(r[4].as_decimal().and_then(|d| d.units_at(2)).unwrap_or(0));
                        assert!(bid_ids.insert(r[1].clone()));
                    }
                    ITEMS | OLD_ITEMS => items.push(r.clone()),
                    COMMENTS => {
                        *received.entry(r[0].as_int().unwrap_or(0)).or_default() +=
                            r[4].as_int().unwrap_or(0)
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(counts[CATEGORIES], CATEGORY_NAMES.len());
        assert_eq!(counts[REGIONS], REGION_COUNT as usize);
        assert_eq!(counts[USERS] as i64, s.users);
        assert_eq!(counts[ITEMS] as i64, s.items);
        assert_eq!(counts[OLD_ITEMS] as i64, s.old_items);
        assert_eq!(counts[COMMENTS] as i64, s.old_items);
        assert!(!counts.contains_key(BUY_NOW));
        // Bids: uniform in 0..=max per item, so about max/2 on average.
        let per_item = counts[BIDS] as f64 / (s.items + s.old_items) as f64;
        let mean = s.max_bids_per_item as f64 / 2.0;
        assert!((per_item - mean).abs() < 0.5, "{per_item} bids per item");
        assert_eq!(widths[USERS], COLUMNS_USERS);
        assert_eq!(widths[ITEMS], COLUMNS_ITEMS);
        assert_eq!(widths[OLD_ITEMS], COLUMNS_ITEMS);
        assert_eq!(widths[BIDS], COLUMNS_BIDS);
        assert_eq!(widths[COMMENTS], COLUMNS_COMMENTS);
        // The generated database satisfies what the check checks.
        for r in &items {
            let id = r[0].as_int().unwrap_or(0);
            let (n, max) = bids_of.get(&id).copied().unwrap_or((0, 0));
            assert_eq!(r[8].as_int(), Some(n), "item {id}");
            assert_eq!(r[9].as_decimal().and_then(|d| d.units_at(2)), Some(max));
            assert_eq!(r[4], r[5]);
            assert_eq!(r[14].as_int(), Some(region_of(r[12].as_int().unwrap_or(0))));
        }
        for (i, r) in ratings.iter().enumerate() {
            assert_eq!(received.get(&(i as i64 + 1)).copied().unwrap_or(0), *r);
        }
    }

    #[test]
    fn rows_depend_on_the_seed_only() {
        let p = params(Scale::SMALL);
        assert_eq!(item(&p, 17), item(&p, 17));
        assert_eq!(comment(&p, 600), comment(&p, 600));
        let q = GenParams { seed: 8, ..p };
        assert_ne!(item(&p, 17).0, item(&q, 17).0);
    }

    #[test]
    fn every_scale_is_within_the_id_spaces() {
        for s in [Scale::SMALL, Scale::STANDARD, Scale::FULL] {
            assert!((s.items + s.old_items) * BIDS_PER_ITEM_ID < RUN_ID_BASE);
            assert!(s.max_bids_per_item < BIDS_PER_ITEM_ID);
        }
    }
}
