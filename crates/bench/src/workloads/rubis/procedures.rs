//! RUBiS's database transactions as brine procedures: 17 read-only, 5 that
//! write.
//!
//! ```text
//!  read-only                       statements (P: one partition, B: broadcast)
//!   browse_categories              categories (B)
//!   browse_regions                 regions (B)
//!   browse_categories_in_region    region (P), categories (B)
//!   search_items_by_category       items by (category, id >= from) (B)
//!   search_items_by_region         items by (region, category, id >= from) (B)
//!   view_item                      item | old_item, MAX(bid) (P), seller (P)
//!   view_bid_history               item name (P), bids (P), bidders (P each)
//!   view_user_info                 user (P), comments (P), authors (P each)
//!   authenticate                   user by nickname (B)
//!   put_bid_form                   item, MAX(bid), COUNT(*) bids (P), seller (P)
//!   buy_now_form                   item (P), seller (P)
//!   put_comment_form               to-user (P), item name (P)
//!   select_category_to_sell        categories (B)
//!   about_me_user                  user (P), comments (P), authors (P each)
//!   about_me_bids                  bids by user (B), their items (P each)
//!   about_me_bought                buy_now by buyer (B), item names (P each)
//!   about_me_sold                  items, old_items by seller (B)
//!  writing
//!   store_bid                      item: nb_of_bids++, max_bid (P), bid (P)
//!   store_buy_now                  item: quantity -= qty (P), buy_now (P)
//!   store_comment                  user: rating += r (P), comment (P)
//!   register_user                  nickname free? (B), region (P), user (P)
//!   register_item                  seller's region (P), item (P)
//! ```
//!
//! The writers touch one partition each except the two registrations:
//! bids and buy-now rows live with their item, comments with the rated
//! user (see `schema`).
//!
//! **Write before read.** Where RUBiS reads an item (or user) row and then
//! updates it, the update comes first and the read after, in the same
//! transaction (as TPC-C's procedures do): the values read are the same,
//! but the write lock is taken at once rather than a read lock upgraded
//! later, an upgrade on which two bids on one item would deadlock.
//!
//! Legitimate refusals are user aborts (rolled back, counted as such):
//! buying more than is left ([`SOLD_OUT`]), bidding on or buying an item
//! that is no longer for sale ([`NOT_FOR_SALE`]), a wrong password, a
//! taken nickname.

use std::collections::BTreeSet;

use brine_cluster::{Application, ProcCtx, ProcedureDef, QueryResult};
use brine_core::{Decimal, Error, Result, Row, Value};

use super::schema::DDL;
use super::*;
use crate::workloads::base::BaseSet;

/// The user-abort message of a buy-now that asks for more than is left.
pub const SOLD_OUT: &str = "not enough items left";
/// The user-abort message of a bid or buy-now on an item not for sale.
pub const NOT_FOR_SALE: &str = "item is not for sale";
pub const BAD_PASSWORD: &str = "wrong nickname or password";
pub const NICKNAME_TAKEN: &str = "nickname already taken";

/// Items a search page shows (RUBiS's default `nbOfItems`; the statements
/// spell it as a literal, which a broadcast's merge needs).
pub const PAGE_SIZE: i64 = 25;

/// The columns a page about one item shows.
const ITEM_COLS: &str = "id, name, description, initial_price, quantity, reserve_price, \
    buy_now, nb_of_bids, max_bid, start_date, end_date, seller, category";
/// Where the seller is in `ITEM_COLS`.
const ITEM_SELLER: usize = 11;

fn arg(args: &[Value], i: usize, what: &str) -> Result<Value> {
    args.get(i).cloned().ok_or_else(|| Error::Arity {
        what: format!("procedure `{what}`"),
        expected: i + 1,
        got: args.len(),
    })
}

fn int_arg(args: &[Value], i: usize, what: &str) -> Result<i64> {
    let v = arg(args, i, what)?;
    v.as_int()
        .ok_or_else(|| Error::type_mismatch(format!("argument {i} of `{what}`"), "INT", v.kind()))
}

fn int_at(row: &Row, i: usize, what: &str) -> Result<i64> {
    let v = row
        .get(i)
        .ok_or_else(|| Error::Internal(format!("rubis: {what} has no column {i}")))?;
    v.as_int()
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "INT", v.kind()))
}

fn decimal_at(row: &Row, i: usize, what: &str) -> Result<Decimal> {
    let v = row
        .get(i)
        .ok_or_else(|| Error::Internal(format!("rubis: {what} has no column {i}")))?;
    v.as_decimal()
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "DECIMAL", v.kind()))
}

fn count(q: &QueryResult) -> Value {
    Value::Int(q.len() as i64)
}

/// The distinct values of column `col` of `rows`, in order, at most `max`.
fn distinct(rows: &[Row], col: usize, max: usize) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    rows.iter()
        .filter_map(|r| r.get(col).and_then(Value::as_int))
        .filter(|v| seen.insert(*v))
        .take(max)
        .map(Value::Int)
        .collect()
}

/// Nicknames of users `ids`, one point read each (RUBiS's pages show
/// bidders' and authors' nicknames: a join there).
async fn nicknames(ctx: &mut ProcCtx, statement: &str, ids: Vec<Value>) -> Result<usize> {
    let mut found = 0;
    for id in ids {
        found += ctx.exec(statement, vec![id]).await?.len();
    }
    Ok(found)
}

/// Reads an item from `items`, else from `old_items`.
async fn item_or_old(
    ctx: &mut ProcCtx,
    active: &str,
    old: &str,
    id: &Value,
) -> Result<Option<Row>> {
    let q = ctx.exec(active, vec![id.clone()]).await?;
    if let Some(r) = q.rows.into_iter().next() {
        return Ok(Some(r));
    }
    Ok(ctx
        .exec(old, vec![id.clone()])
        .await?
        .rows
        .into_iter()
        .next())
}

const CATEGORIES_SQL: &str = "SELECT id, name FROM categories";
const NICKNAME_SQL: &str = "SELECT nickname FROM users WHERE id = $u";
const USER_SQL: &str = "SELECT firstname, lastname, nickname, email, rating, creation_date, \
    region FROM users WHERE id = $u";
const COMMENTS_SQL: &str = "SELECT id, from_user_id, item_id, rating, c_date, text \
    FROM comments WHERE to_user_id = $u";

fn item_sql(table: &str) -> String {
    format!("SELECT {ITEM_COLS} FROM {table} WHERE id = $i")
}

fn browse_categories() -> ProcedureDef {
    ProcedureDef::new(BROWSE_CATEGORIES)
        .statement("categories", CATEGORIES_SQL)
        .body(|mut ctx, _args| async move {
            let q = ctx.exec("categories", vec![]).await?;
            Ok(vec![count(&q)])
        })
}

fn browse_regions() -> ProcedureDef {
    ProcedureDef::new(BROWSE_REGIONS)
        .statement("regions", "SELECT id, name FROM regions")
        .body(|mut ctx, _args| async move {
            let q = ctx.exec("regions", vec![]).await?;
            Ok(vec![count(&q)])
        })
}

fn browse_categories_in_region() -> ProcedureDef {
    ProcedureDef::new(BROWSE_CATEGORIES_IN_REGION)
        .statement("region", "SELECT name FROM regions WHERE id = $r")
        .statement("categories", CATEGORIES_SQL)
        .body(|mut ctx, args| async move {
            let r = arg(&args, 0, BROWSE_CATEGORIES_IN_REGION)?;
            ctx.exec("region", vec![r]).await?;
            let q = ctx.exec("categories", vec![]).await?;
            Ok(vec![count(&q)])
        })
}

fn search_items_by_category() -> ProcedureDef {
    ProcedureDef::new(SEARCH_ITEMS_BY_CATEGORY)
        .statement(
            "items",
            "SELECT id, name, initial_price, max_bid, nb_of_bids, end_date FROM items \
             WHERE category = $c AND id >= $from AND end_date >= $now LIMIT 25",
        )
        .body(|mut ctx, args| async move {
            let what = SEARCH_ITEMS_BY_CATEGORY;
            let v = (0..3).map(|i| arg(&args, i, what)).collect::<Result<_>>()?;
            let q = ctx.exec("items", v).await?;
            Ok(vec![count(&q)])
        })
}

fn search_items_by_region() -> ProcedureDef {
    ProcedureDef::new(SEARCH_ITEMS_BY_REGION)
        .statement(
            "items",
            "SELECT id, name, initial_price, max_bid, nb_of_bids, end_date FROM items \
             WHERE region = $r AND category = $c AND id >= $from AND end_date >= $now LIMIT 25",
        )
        .body(|mut ctx, args| async move {
            let what = SEARCH_ITEMS_BY_REGION;
            let v = (0..4).map(|i| arg(&args, i, what)).collect::<Result<_>>()?;
            let q = ctx.exec("items", v).await?;
            Ok(vec![count(&q)])
        })
}

fn view_item() -> ProcedureDef {
    ProcedureDef::new(VIEW_ITEM)
        .statement("item", item_sql("items"))
        .statement("old_item", item_sql("old_items"))
        .statement("max_bid", "SELECT MAX(bid) FROM bids WHERE item_id = $i")
        .statement("seller", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let i = arg(&args, 0, VIEW_ITEM)?;
            let Some(row) = item_or_old(&mut ctx, "item", "old_item", &i).await? else {
                return Ok(vec![Value::Null]);
            };
            let max = ctx.exec("max_bid", vec![i.clone()]).await?;
            let seller = int_at(&row, ITEM_SELLER, "item")?;
            ctx.exec("seller", vec![Value::Int(seller)]).await?;
            Ok(vec![i, max.scalar().cloned().unwrap_or(Value::Null)])
        })
}

fn view_bid_history() -> ProcedureDef {
    ProcedureDef::new(VIEW_BID_HISTORY)
        .statement("item_name", "SELECT name FROM items WHERE id = $i")
        .statement("old_item_name", "SELECT name FROM old_items WHERE id = $i")
        .statement(
            "bids",
            "SELECT id, user_id, bid, max_bid, qty, bid_date FROM bids WHERE item_id = $i \
             ORDER BY id DESC",
        )
        .statement("bidder", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let i = arg(&args, 0, VIEW_BID_HISTORY)?;
            if item_or_old(&mut ctx, "item_name", "old_item_name", &i)
                .await?
                .is_none()
            {
                return Ok(vec![Value::Null]);
            }
            let bids = ctx.exec("bids", vec![i]).await?;
            nicknames(&mut ctx, "bidder", distinct(&bids.rows, 1, usize::MAX)).await?;
            Ok(vec![count(&bids)])
        })
}

/// A user's page: the user, the comments they received, their authors.
async fn user_page(ctx: &mut ProcCtx, u: Value) -> Result<Vec<Value>> {
    ctx.exec("user", vec![u.clone()]).await?;
    let comments = ctx.exec("comments", vec![u]).await?;
    nicknames(ctx, "author", distinct(&comments.rows, 1, usize::MAX)).await?;
    Ok(vec![count(&comments)])
}

fn view_user_info() -> ProcedureDef {
    ProcedureDef::new(VIEW_USER_INFO)
        .statement("user", USER_SQL)
        .statement("comments", COMMENTS_SQL)
        .statement("author", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let u = arg(&args, 0, VIEW_USER_INFO)?;
            user_page(&mut ctx, u).await
        })
}

fn authenticate() -> ProcedureDef {
    ProcedureDef::new(AUTHENTICATE)
        .statement(
            "by_nickname",
            "SELECT id, password FROM users WHERE nickname = $n",
        )
        .body(|mut ctx, args| async move {
            let n = arg(&args, 0, AUTHENTICATE)?;
            let pw = arg(&args, 1, AUTHENTICATE)?;
            let q = ctx.exec("by_nickname", vec![n]).await?;
            match q.first() {
                Some(r) if r.get(1) == Some(&pw) => Ok(vec![Value::Int(int_at(r, 0, "user")?)]),
                _ => Err(ctx.abort(BAD_PASSWORD)),
            }
        })
}

fn put_bid_form() -> ProcedureDef {
    ProcedureDef::new(PUT_BID_FORM)
        .statement("item", item_sql("items"))
        .statement("max_bid", "SELECT MAX(bid) FROM bids WHERE item_id = $i")
        .statement("bid_count", "SELECT COUNT(*) FROM bids WHERE item_id = $i")
        .statement("seller", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let i = arg(&args, 0, PUT_BID_FORM)?;
            let item = ctx.exec("item", vec![i.clone()]).await?;
            let Some(row) = item.first() else {
                return Ok(vec![Value::Null]);
            };
            let seller = int_at(row, ITEM_SELLER, "item")?;
            ctx.exec("max_bid", vec![i.clone()]).await?;
            let n = ctx.exec("bid_count", vec![i]).await?;
            ctx.exec("seller", vec![Value::Int(seller)]).await?;
            Ok(vec![n.scalar().cloned().unwrap_or(Value::Null)])
        })
}

fn buy_now_form() -> ProcedureDef {
    ProcedureDef::new(BUY_NOW_FORM)
        .statement("item", item_sql("items"))
        .statement("seller", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let i = arg(&args, 0, BUY_NOW_FORM)?;
            let item = ctx.exec("item", vec![i]).await?;
            let Some(row) = item.first() else {
                return Ok(vec![Value::Null]);
            };
            let seller = int_at(row, ITEM_SELLER, "item")?;
            ctx.exec("seller", vec![Value::Int(seller)]).await?;
            Ok(vec![Value::Int(seller)])
        })
}

fn put_comment_form() -> ProcedureDef {
    ProcedureDef::new(PUT_COMMENT_FORM)
        .statement("to_user", NICKNAME_SQL)
        .statement("item_name", "SELECT name FROM items WHERE id = $i")
        .statement("old_item_name", "SELECT name FROM old_items WHERE id = $i")
        .body(|mut ctx, args| async move {
            let to = arg(&args, 0, PUT_COMMENT_FORM)?;
            let i = arg(&args, 1, PUT_COMMENT_FORM)?;
            let q = ctx.exec("to_user", vec![to]).await?;
            item_or_old(&mut ctx, "item_name", "old_item_name", &i).await?;
            Ok(vec![count(&q)])
        })
}

fn select_category_to_sell() -> ProcedureDef {
    ProcedureDef::new(SELECT_CATEGORY_TO_SELL)
        .statement("categories", CATEGORIES_SQL)
        .body(|mut ctx, _args| async move {
            let q = ctx.exec("categories", vec![]).await?;
            Ok(vec![count(&q)])
        })
}

fn about_me_user() -> ProcedureDef {
    ProcedureDef::new(ABOUT_ME_USER)
        .statement("user", USER_SQL)
        .statement("comments", COMMENTS_SQL)
        .statement("author", NICKNAME_SQL)
        .body(|mut ctx, args| async move {
            let u = arg(&args, 0, ABOUT_ME_USER)?;
            user_page(&mut ctx, u).await
        })
}

/// Items about-me shows per list (RUBiS shows them all; a bound keeps a
/// busy bidder's page from reading without end).
pub const ABOUT_ME_ITEMS: usize = 25;

fn about_me_bids() -> ProcedureDef {
    ProcedureDef::new(ABOUT_ME_BIDS)
        .statement(
            "bids",
            "SELECT item_id, bid, max_bid FROM bids WHERE user_id = $u",
        )
        .statement("item", item_sql("items"))
        .statement("old_item", item_sql("old_items"))
        .body(|mut ctx, args| async move {
            let u = arg(&args, 0, ABOUT_ME_BIDS)?;
            let bids = ctx.exec("bids", vec![u]).await?;
            for i in distinct(&bids.rows, 0, ABOUT_ME_ITEMS) {
                item_or_old(&mut ctx, "item", "old_item", &i).await?;
            }
            Ok(vec![count(&bids)])
        })
}

fn about_me_bought() -> ProcedureDef {
    ProcedureDef::new(ABOUT_ME_BOUGHT)
        .statement(
            "bought",
            "SELECT item_id, qty, bn_date FROM buy_now WHERE buyer_id = $u",
        )
        .statement("item_name", "SELECT name FROM items WHERE id = $i")
        .statement("old_item_name", "SELECT name FROM old_items WHERE id = $i")
        .body(|mut ctx, args| async move {
            let u = arg(&args, 0, ABOUT_ME_BOUGHT)?;
            let bought = ctx.exec("bought", vec![u]).await?;
            for i in distinct(&bought.rows, 0, ABOUT_ME_ITEMS) {
                item_or_old(&mut ctx, "item_name", "old_item_name", &i).await?;
            }
            Ok(vec![count(&bought)])
        })
}

fn about_me_sold() -> ProcedureDef {
    ProcedureDef::new(ABOUT_ME_SOLD)
        .statement(
            "selling",
            "SELECT id, name, max_bid, nb_of_bids, end_date FROM items WHERE seller = $u",
        )
        .statement(
            "sold",
            "SELECT id, name, max_bid, nb_of_bids, end_date FROM old_items WHERE seller = $u",
        )
        .body(|mut ctx, args| async move {
            let u = arg(&args, 0, ABOUT_ME_SOLD)?;
            let selling = ctx.exec("selling", vec![u.clone()]).await?;
            let sold = ctx.exec("sold", vec![u]).await?;
            Ok(vec![count(&selling), count(&sold)])
        })
}

/// Procedures `--base` may name: the two writers of the hot item rows.
/// Each is BASE-ified (Salt; both by default) as an acceptance that does
/// everything to the item row (its checks, the only legitimate aborts,
/// included) followed by the insert of the bid or purchase as a
/// single-statement subtransaction, so a popular item's row is held for
/// the first subtransaction only. Salt Isolation keeps the item counted
/// without its bid from every ACID transaction and from the check. Under
/// `acid` and `callas` the marks do nothing.
pub const BASE_CAPABLE: [&str; 2] = [STORE_BID, STORE_BUY_NOW];

/// store_bid(user, item, bid_id, bid, max_bid, qty, now).
fn store_bid() -> ProcedureDef {
    ProcedureDef::new(STORE_BID)
        .statement(
            "count_bid",
            "UPDATE items SET nb_of_bids = nb_of_bids + 1 WHERE id = $i",
        )
        .statement("item_max", "SELECT max_bid FROM items WHERE id = $i")
        .statement("raise_max", "UPDATE items SET max_bid = $b WHERE id = $i")
        .statement(
            "insert_bid",
            "INSERT INTO bids (item_id, id, user_id, qty, bid, max_bid, bid_date) \
             VALUES ($i, $id, $u, $q, $b, $m, $now)",
        )
        .body(|mut ctx, args| async move {
            let w = STORE_BID;
            let u = arg(&args, 0, w)?;
            let i = arg(&args, 1, w)?;
            let id = arg(&args, 2, w)?;
            let b = arg(&args, 3, w)?;
            let bid = b.as_decimal().ok_or_else(|| {
                Error::type_mismatch(format!("argument 3 of `{w}`"), "DECIMAL", b.kind())
            })?;
            let m = arg(&args, 4, w)?;
            let q = arg(&args, 5, w)?;
            let now = arg(&args, 6, w)?;
            // The write lock first: two bids on one item must not both
            // hold a read lock they then want to upgrade.
            ctx.begin_alkaline()?;
            if ctx.exec("count_bid", vec![i.clone()]).await?.affected == 0 {
                return Err(ctx.abort(NOT_FOR_SALE));
            }
            let cur = ctx.exec("item_max", vec![i.clone()]).await?;
            let row = cur
                .first()
                .ok_or_else(|| Error::Internal(format!("rubis: item {i} vanished")))?;
            let max = decimal_at(row, 0, "item max_bid")?;
            if crate::workloads::decimal_cmp(bid, max) == Some(std::cmp::Ordering::Greater) {
                ctx.exec("raise_max", vec![b.clone(), i.clone()]).await?;
            }
            ctx.end_alkaline().await?;
            ctx.exec("insert_bid", vec![i, id.clone(), u, q, b, m, now])
                .await?;
            Ok(vec![id])
        })
}

/// store_buy_now(buyer, item, buy_now_id, qty, now).
fn store_buy_now() -> ProcedureDef {
    ProcedureDef::new(STORE_BUY_NOW)
        .statement(
            "take",
            "UPDATE items SET quantity = quantity - $q WHERE id = $i",
        )
        .statement("left", "SELECT quantity FROM items WHERE id = $i")
        .statement("close", "UPDATE items SET end_date = $now WHERE id = $i")
        .statement(
            "insert_buy_now",
            "INSERT INTO buy_now (item_id, id, buyer_id, qty, bn_date) \
             VALUES ($i, $id, $b, $q, $now)",
        )
        .body(|mut ctx, args| async move {
            let w = STORE_BUY_NOW;
            let buyer = arg(&args, 0, w)?;
            let i = arg(&args, 1, w)?;
            let id = arg(&args, 2, w)?;
            let q = arg(&args, 3, w)?;
            let now = arg(&args, 4, w)?;
            if int_arg(&args, 3, w)? < 1 {
                return Err(Error::Internal(format!("rubis {w}: quantity {q} < 1")));
            }
            ctx.begin_alkaline()?;
            if ctx.exec("take", vec![q.clone(), i.clone()]).await?.affected == 0 {
                return Err(ctx.abort(NOT_FOR_SALE));
            }
            let left = ctx.exec("left", vec![i.clone()]).await?;
            let row = left
                .first()
                .ok_or_else(|| Error::Internal(format!("rubis: item {i} vanished")))?;
            let left = int_at(row, 0, "item quantity")?;
            if left < 0 {
                // Rolled back: the quantity is restored.
                return Err(ctx.abort(SOLD_OUT));
            }
            if left == 0 {
                // RUBiS closes the auction of an item sold out.
                ctx.exec("close", vec![now.clone(), i.clone()]).await?;
            }
            ctx.end_alkaline().await?;
            ctx.exec("insert_buy_now", vec![i, id.clone(), buyer, q, now])
                .await?;
            Ok(vec![id])
        })
}

/// store_comment(from, to, item, comment_id, rating, now, text).
fn store_comment() -> ProcedureDef {
    ProcedureDef::new(STORE_COMMENT)
        .statement(
            "rate",
            "UPDATE users SET rating = rating + $r WHERE id = $to",
        )
        .statement(
            "insert_comment",
            "INSERT INTO comments (to_user_id, id, from_user_id, item_id, rating, c_date, text) \
             VALUES ($to, $id, $from, $i, $r, $now, $text)",
        )
        .body(|mut ctx, args| async move {
            let w = STORE_COMMENT;
            let from = arg(&args, 0, w)?;
            let to = arg(&args, 1, w)?;
            let i = arg(&args, 2, w)?;
            let id = arg(&args, 3, w)?;
            let r = arg(&args, 4, w)?;
            let now = arg(&args, 5, w)?;
            let text = arg(&args, 6, w)?;
            if ctx
                .exec("rate", vec![r.clone(), to.clone()])
                .await?
                .affected
                == 0
            {
                return Err(Error::Internal(format!("rubis {w}: no user {to}")));
            }
            ctx.exec(
                "insert_comment",
                vec![to, id.clone(), from, i, r, now, text],
            )
            .await?;
            Ok(vec![id])
        })
}

/// register_user(id, nickname, password, region, now).
fn register_user() -> ProcedureDef {
    ProcedureDef::new(REGISTER_USER)
        .statement("by_nickname", "SELECT id FROM users WHERE nickname = $n")
        .statement("region", "SELECT id FROM regions WHERE id = $r")
        .statement(
            "insert_user",
            "INSERT INTO users (id, firstname, lastname, nickname, password, email, rating, \
             balance, creation_date, region) \
             VALUES ($id, $first, $last, $n, $pw, $email, $rating, $balance, $now, $r)",
        )
        .body(|mut ctx, args| async move {
            let w = REGISTER_USER;
            let id = arg(&args, 0, w)?;
            let n = arg(&args, 1, w)?;
            let pw = arg(&args, 2, w)?;
            let r = arg(&args, 3, w)?;
            let now = arg(&args, 4, w)?;
            if !ctx.exec("by_nickname", vec![n.clone()]).await?.is_empty() {
                return Err(ctx.abort(NICKNAME_TAKEN));
            }
            if ctx.exec("region", vec![r.clone()]).await?.is_empty() {
                return Err(Error::Internal(format!("rubis {w}: no region {r}")));
            }
            let uid = int_arg(&args, 0, w)?;
            ctx.exec(
                "insert_user",
                vec![
                    id.clone(),
                    Value::str(&format!("Great{uid}")),
                    Value::str(&format!("User{uid}")),
                    n,
                    pw,
                    Value::str(&format!("Great{uid}.User{uid}@rubis.com")),
                    Value::Int(0),
                    Value::Decimal(Decimal::new(0, 2)),
                    now,
                    r,
                ],
            )
            .await?;
            Ok(vec![id])
        })
}

/// register_item(id, seller, category, initial_price, quantity, buy_now,
/// now, end).
fn register_item() -> ProcedureDef {
    ProcedureDef::new(REGISTER_ITEM)
        .statement("seller_region", "SELECT region FROM users WHERE id = $s")
        .statement(
            "insert_item",
            "INSERT INTO items (id, name, description, initial_price, quantity, \
             initial_quantity, reserve_price, buy_now, nb_of_bids, max_bid, start_date, \
             end_date, seller, category, region) \
             VALUES ($id, $name, $descr, $price, $qty, $qty, $reserve, $buy_now, $nb, $max, $now, \
             $end, $s, $c, $r)",
        )
        .body(|mut ctx, args| async move {
            let w = REGISTER_ITEM;
            let id = arg(&args, 0, w)?;
            let seller = arg(&args, 1, w)?;
            let c = arg(&args, 2, w)?;
            let price = arg(&args, 3, w)?;
            let qty = arg(&args, 4, w)?;
            let buy_now = arg(&args, 5, w)?;
            let now = arg(&args, 6, w)?;
            let end = arg(&args, 7, w)?;
            let q = ctx.exec("seller_region", vec![seller.clone()]).await?;
            let region = int_at(
                q.first()
                    .ok_or_else(|| Error::Internal(format!("rubis {w}: no user {seller}")))?,
                0,
                "seller",
            )?;
            let iid = int_arg(&args, 0, w)?;
            ctx.exec(
                "insert_item",
                vec![
                    id.clone(),
                    Value::str(&format!("RUBiS registered item #{iid}")),
                    Value::str("registered during the run"),
                    price.clone(),
                    qty,
                    price,
                    buy_now,
                    Value::Int(0),
                    Value::Decimal(Decimal::new(0, 2)),
                    now,
                    end,
                    seller,
                    c,
                    Value::Int(region),
                ],
            )
            .await?;
            Ok(vec![id])
        })
}

/// The application: schema and every procedure, read-only ones first.
pub fn application(base: &BaseSet) -> Application {
    Application {
        name: "rubis".into(),
        ddl: DDL.into(),
        procedures: [
            browse_categories(),
            browse_regions(),
            browse_categories_in_region(),
            search_items_by_category(),
            search_items_by_region(),
            view_item(),
            view_bid_history(),
            view_user_info(),
            authenticate(),
            put_bid_form(),
            buy_now_form(),
            put_comment_form(),
            select_category_to_sell(),
            about_me_user(),
            about_me_bids(),
            about_me_bought(),
            about_me_sold(),
            store_bid(),
            store_buy_now(),
            store_comment(),
            register_user(),
            register_item(),
        ]
        .into_iter()
        .map(|p| base.apply(p))
        .collect(),
    }
}
