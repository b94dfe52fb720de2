//! RUBiS's consistency conditions, checked after a run.
//!
//! RUBiS states none; these are the ones its transactions keep, each read
//! with interactive transactions once the clients stopped (whole tables,
//! by broadcast scans). Every violation is counted and the first few are
//! quoted in the error.
//!
//! | # | condition                                                          |
//! |---|--------------------------------------------------------------------|
//! | 1 | an item's nb_of_bids = count of its bids                           |
//! | 2 | an item's max_bid = max of its bids' amounts (0.00 without bids)   |
//! | 3 | quantity >= 0 and initial_quantity = quantity + sum(buy_now.qty)   |
//! | 4 | a user's rating = sum of the ratings of the comments they received |
//! | 5 | ids unique: items and old items together, bids, buy-nows, comments,|
//! |   | users' nicknames; every bid and buy-now is of an existing item,    |
//! |   | every comment is to an existing user                               |

use std::collections::{BTreeMap, HashMap, HashSet};

use brine_cluster::Cluster;
use brine_core::{Row, Value};

use crate::error::{BenchError, Result};
use crate::workloads::tpcc::check::read_rows;
/// What the check found (as TPC-C's: the violations, quoting the first
/// few, and the rows read).
pub use crate::workloads::tpcc::check::Findings;

fn int(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i).and_then(Value::as_int).ok_or_else(|| {
        BenchError::Internal(format!("rubis check: {what}: column {i} is not an INT"))
    })
}

fn cents(row: &Row, i: usize, what: &str) -> Result<i64> {
    row.get(i)
        .and_then(Value::as_decimal)
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| {
            BenchError::Internal(format!("rubis check: {what}: column {i} is not a DECIMAL"))
        })
}

#[derive(Default)]
struct ItemBids {
    count: i64,
    max_cents: i64,
}

/// Checks every condition.
pub async fn check(cluster: &Cluster) -> Result<Findings> {
    let mut f = Findings::default();
    let item_cols = "SELECT id, nb_of_bids, max_bid, quantity, initial_quantity FROM";
    let items = read_rows(cluster, &format!("{item_cols} items"), vec![]).await?;
    let old = read_rows(cluster, &format!("{item_cols} old_items"), vec![]).await?;
    let bids = read_rows(cluster, "SELECT item_id, id, bid FROM bids", vec![]).await?;
    let buys = read_rows(cluster, "SELECT item_id, id, qty FROM buy_now", vec![]).await?;
    let users = read_rows(cluster, "SELECT id, rating, nickname FROM users", vec![]).await?;
    let comments = read_rows(
        cluster,
        "SELECT to_user_id, id, rating FROM comments",
        vec![],
    )
    .await?;
    f.rows_read = items.len() + old.len() + bids.len() + buys.len() + users.len() + comments.len();

    // Condition 5: unique ids.
    let mut unique = |condition: u32, what: &str, rows: &[Row], col: usize| -> Result<()> {
        let mut seen = HashSet::with_capacity(rows.len());
        for r in rows {
            let v = r.get(col).cloned().unwrap_or(Value::Null);
            if !seen.insert(v.clone()) {
                f.fail(condition, format!("{what} {v} appears twice"));
            }
        }
        Ok(())
    };
    let all_items: Vec<Row> = items.iter().chain(old.iter()).cloned().collect();
    unique(5, "item id", &all_items, 0)?;
    unique(5, "bid id", &bids, 1)?;
    unique(5, "buy-now id", &buys, 1)?;
    unique(5, "comment id", &comments, 1)?;
    unique(5, "user id", &users, 0)?;
    unique(5, "nickname", &users, 2)?;

    // Conditions 1 and 2.
    let mut per_item: HashMap<i64, ItemBids> = HashMap::new();
    for b in &bids {
        let e = per_item.entry(int(b, 0, "bids")?).or_default();
        e.count += 1;
        e.max_cents = e.max_cents.max(cents(b, 2, "bids")?);
    }
    let mut bought: HashMap<i64, i64> = HashMap::new();
    for b in &buys {
        *bought.entry(int(b, 0, "buy_now")?).or_default() += int(b, 2, "buy_now")?;
    }
    let mut item_ids = HashSet::with_capacity(all_items.len());
    for r in &all_items {
        let id = int(r, 0, "items")?;
        item_ids.insert(id);
        let nb = int(r, 1, "items")?;
        let max = cents(r, 2, "items")?;
        let (count, max_bid) = per_item.get(&id).map_or((0, 0), |b| (b.count, b.max_cents));
        if nb != count {
            f.fail(1, format!("item {id}: nb_of_bids {nb} but {count} bids"));
        }
        if max != max_bid {
            f.fail(
                2,
                format!("item {id}: max_bid {max} cents but its highest bid is {max_bid} cents"),
            );
        }
        // Condition 3.
        let q = int(r, 3, "items")?;
        let initial = int(r, 4, "items")?;
        let sold = bought.get(&id).copied().unwrap_or(0);
        if q < 0 {
            f.fail(3, format!("item {id}: quantity {q} is negative"));
        }
        if initial != q + sold {
            f.fail(
                3,
                format!("item {id}: offered {initial} but {q} left and {sold} bought"),
            );
        }
    }
    for id in per_item.keys().chain(bought.keys()) {
        if !item_ids.contains(id) {
            f.fail(
                5,
                format!("bids or buy-nows of item {id}, which does not exist"),
            );
        }
    }

    // Condition 4.
    let mut received: BTreeMap<i64, i64> = BTreeMap::new();
    for c in &comments {
        *received.entry(int(c, 0, "comments")?).or_default() += int(c, 2, "comments")?;
    }
    let mut user_ids = HashSet::with_capacity(users.len());
    for u in &users {
        let id = int(u, 0, "users")?;
        user_ids.insert(id);
        let rating = int(u, 1, "users")?;
        let sum = received.get(&id).copied().unwrap_or(0);
        if rating != sum {
            f.fail(
                4,
                format!("user {id}: rating {rating} but the comments received sum to {sum}"),
            );
        }
    }
    for id in received.keys() {
        if !user_ids.contains(id) {
            f.fail(5, format!("comments to user {id}, who does not exist"));
        }
    }
    Ok(f)
}

/// [`check`], failing with the violations quoted.
pub async fn check_or_fail(cluster: &Cluster) -> Result<Findings> {
    let f = check(cluster).await?;
    if f.count > 0 {
        return Err(BenchError::Invariant(format!(
            "rubis: {} violations of the consistency conditions ({} rows read), e.g.: {}",
            f.count,
            f.rows_read,
            f.violations.join("; ")
        )));
    }
    Ok(f)
}
