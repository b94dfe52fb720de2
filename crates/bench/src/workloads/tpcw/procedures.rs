//! The 20 database transactions behind TPC-W's 14 web interactions, as
//! brine procedures (the transactions of the spec's reference
//! implementation, `TPCW_Database`, which seed 004's Elia counts: 20, 13
//! read-only).
//!
//! ```text
//!  read-only                          writing
//!  get_name        customer           admin_update        recent lines, item
//!  get_book        item, author       create_empty_cart   INSERT cart
//!  get_customer    by uname, address, do_cart             cart time, line upsert
//!                  country                                / delete
//!  do_*_search     item index(es),    refresh_session     customer login
//!                  authors            create_new_customer INSERT address, customer
//!  get_new_products subject by date   do_buy_confirm      customer, cart lines,
//!  get_best_sellers recent lines,     (_address: also a   item stock per line,
//!                  subject's items    new ship address)   INSERT order, lines,
//!  get_related     item, 5 thumbnails                     cc_xacts; clear cart
//!  get_user_name, get_password, get_most_recent_order, get_cart
//! ```
//!
//! The subset has no joins, LIKE, GROUP BY or subqueries: a join is a read
//! per joined row in the body, grouping and top-N are Rust, title search
//! is a prefix range on `item_by_title`, the "most recent orders" of
//! best-sellers and admin-confirm are `o_id > $lo` with `$lo` from the
//! client's id counter (the spec's subquery on MAX(o_id)).
//!
//! Buy-confirm takes each item's write lock first (decrement, then read
//! the new stock and restock by 21 below 10, clause 2.7.3's rule) so two
//! buyers of one item do not deadlock on a read-lock upgrade.

use std::collections::{BTreeMap, HashMap};

use brine_cluster::{Application, ProcCtx, ProcedureDef};
use brine_core::{Decimal, Error, Result, Row, Value};

use super::schema::DDL;
use super::*;
use crate::workloads::base::BaseSet;
use crate::workloads::values::{cell, first, int_at, Args};

/// Rows a search or listing page shows (clause 2.x: 50).
pub const PAGE: usize = 50;
/// The user-abort message of a buy with an empty cart.
pub const EMPTY_CART: &str = "shopping cart is empty";
/// The user-abort message of a cart operation on a cart that does not exist.
pub const NO_CART: &str = "no such shopping cart";

fn cents_at(row: &Row, i: usize, what: &str) -> Result<i64> {
    let v = cell(row, i, what)?;
    v.as_decimal()
        .and_then(|d| d.units_at(2))
        .ok_or_else(|| Error::type_mismatch(format!("{what}, column {i}"), "DECIMAL", v.kind()))
}

fn money(cents: i64) -> Value {
    Value::Decimal(Decimal::new(cents, 2))
}

/// Reads the author of each listed item (the spec's join with AUTHOR),
/// each distinct author once; returns how many were read.
async fn read_authors(ctx: &mut ProcCtx, authors: impl Iterator<Item = i64>) -> Result<usize> {
    let mut seen = std::collections::BTreeSet::new();
    for a in authors {
        if seen.insert(a) {
            let q = ctx.exec("author", vec![Value::Int(a)]).await?;
            first(&q, || format!("author {a}"))?;
        }
    }
    Ok(seen.len())
}

const AUTHOR_BY_ID: &str = "SELECT a_fname, a_lname FROM author WHERE a_id = $a";

/// Lists `(i_id, i_title, i_a_id)` rows: sorted by title, first `PAGE`,
/// authors read; returns the item ids.
async fn list_page(ctx: &mut ProcCtx, mut rows: Vec<Row>, sort: bool) -> Result<Vec<Value>> {
    if sort {
        rows.sort_by(|a, b| {
            let key = |r: &Row| r.get(1).and_then(Value::as_str).map(str::to_string);
            key(a).cmp(&key(b))
        });
    }
    rows.truncate(PAGE);
    let authors = rows
        .iter()
        .map(|r| int_at(r, 2, "item"))
        .collect::<Result<Vec<_>>>()?;
    read_authors(ctx, authors.into_iter()).await?;
    rows.iter().map(|r| cell(r, 0, "item").cloned()).collect()
}

fn get_name() -> ProcedureDef {
    ProcedureDef::new(GET_NAME)
        .statement(
            "customer",
            "SELECT c_fname, c_lname FROM customer WHERE c_id = $c",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_NAME,
            };
            let c = a.v(0)?;
            let q = ctx.exec("customer", vec![c.clone()]).await?;
            let row = first(&q, || format!("customer {c}"))?;
            Ok(vec![
                cell(row, 0, "customer")?.clone(),
                cell(row, 1, "customer")?.clone(),
            ])
        })
}

fn get_book() -> ProcedureDef {
    ProcedureDef::new(GET_BOOK)
        .statement("item", "SELECT * FROM item WHERE i_id = $i")
        .statement("author", AUTHOR_BY_ID)
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_BOOK,
            };
            let i = a.v(0)?;
            let q = ctx.exec("item", vec![i.clone()]).await?;
            let row = first(&q, || format!("item {i}"))?;
            let author = int_at(row, 2, "item")?;
            let title = cell(row, 1, "item")?.clone();
            read_authors(&mut ctx, std::iter::once(author)).await?;
            Ok(vec![i, title])
        })
}

fn get_customer() -> ProcedureDef {
    ProcedureDef::new(GET_CUSTOMER)
        .statement(
            "customer",
            "SELECT c_id, c_passwd, c_fname, c_lname, c_addr_id, c_discount, c_balance, \
             c_ytd_pmt, c_since, c_last_login, c_email FROM customer WHERE c_uname = $u",
        )
        .statement(
            "address",
            "SELECT addr_street1, addr_city, addr_co_id FROM address WHERE addr_id = $a",
        )
        .statement("country", "SELECT co_name FROM country WHERE co_id = $co")
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_CUSTOMER,
            };
            let u = a.v(0)?;
            let q = ctx.exec("customer", vec![u.clone()]).await?;
            let row = first(&q, || format!("customer {u}"))?;
            let c = cell(row, 0, "customer")?.clone();
            let addr = cell(row, 4, "customer")?.clone();
            let q = ctx.exec("address", vec![addr.clone()]).await?;
            let co = cell(first(&q, || format!("address {addr}"))?, 2, "address")?.clone();
            ctx.exec("country", vec![co]).await?;
            Ok(vec![c])
        })
}

/// A procedure that lists, with their authors, the items `sql` finds by
/// the call's first `params` arguments (`list_page`; `sort`: by title).
fn item_list(name: &'static str, sql: &'static str, params: usize, sort: bool) -> ProcedureDef {
    ProcedureDef::new(name)
        .statement("items", sql)
        .statement("author", AUTHOR_BY_ID)
        .body(move |mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: name,
            };
            let values = (0..params).map(|i| a.v(i)).collect::<Result<Vec<_>>>()?;
            let q = ctx.exec("items", values).await?;
            list_page(&mut ctx, q.rows, sort).await
        })
}

fn do_subject_search() -> ProcedureDef {
    item_list(
        DO_SUBJECT_SEARCH,
        "SELECT i_id, i_title, i_a_id FROM item WHERE i_subject = $s",
        1,
        true,
    )
}

fn do_title_search() -> ProcedureDef {
    item_list(
        DO_TITLE_SEARCH,
        "SELECT i_id, i_title, i_a_id FROM item WHERE i_title >= $lo AND i_title < $hi \
         ORDER BY i_title LIMIT 50",
        2,
        false,
    )
}

fn do_author_search() -> ProcedureDef {
    ProcedureDef::new(DO_AUTHOR_SEARCH)
        .statement("authors", "SELECT a_id FROM author WHERE a_lname = $l")
        .statement(
            "items",
            "SELECT i_id, i_title, i_a_id FROM item WHERE i_a_id = $a",
        )
        .statement("author", AUTHOR_BY_ID)
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: DO_AUTHOR_SEARCH,
            };
            let authors = ctx.exec("authors", vec![a.v(0)?]).await?;
            let mut rows = Vec::new();
            for row in authors.rows.iter().take(PAGE) {
                let q = ctx
                    .exec("items", vec![cell(row, 0, "author")?.clone()])
                    .await?;
                rows.extend(q.rows);
            }
            list_page(&mut ctx, rows, true).await
        })
}

fn get_new_products() -> ProcedureDef {
    item_list(
        GET_NEW_PRODUCTS,
        "SELECT i_id, i_title, i_a_id FROM item WHERE i_subject = $s \
         ORDER BY i_pub_date DESC LIMIT 50",
        1,
        false,
    )
}

fn get_best_sellers() -> ProcedureDef {
    ProcedureDef::new(GET_BEST_SELLERS)
        .statement(
            "recent_lines",
            "SELECT ol_i_id, ol_qty FROM order_line WHERE ol_o_id > $lo",
        )
        .statement(
            "items",
            "SELECT i_id, i_title, i_a_id FROM item WHERE i_subject = $s",
        )
        .statement("author", AUTHOR_BY_ID)
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_BEST_SELLERS,
            };
            let lines = ctx.exec("recent_lines", vec![a.v(1)?]).await?;
            let mut sold: HashMap<i64, i64> = HashMap::new();
            for row in &lines.rows {
                *sold.entry(int_at(row, 0, "order_line")?).or_default() +=
                    int_at(row, 1, "order_line")?;
            }
            let items = ctx.exec("items", vec![a.v(0)?]).await?;
            let mut ranked = Vec::new();
            for row in items.rows {
                if let Some(&q) = sold.get(&int_at(&row, 0, "item")?) {
                    ranked.push((q, row));
                }
            }
            // Most sold first; ties by item id, for determinism.
            ranked.sort_by(|(qa, ra), (qb, rb)| {
                qb.cmp(qa).then_with(|| {
                    ra.first()
                        .and_then(Value::as_int)
                        .cmp(&rb.first().and_then(Value::as_int))
                })
            });
            list_page(
                &mut ctx,
                ranked.into_iter().map(|(_, r)| r).collect(),
                false,
            )
            .await
        })
}

const RELATED: &str =
    "SELECT i_related1, i_related2, i_related3, i_related4, i_related5 FROM item WHERE i_id = $i";

fn get_related() -> ProcedureDef {
    ProcedureDef::new(GET_RELATED)
        .statement("related", RELATED)
        .statement(
            "thumbnail",
            "SELECT i_id, i_thumbnail FROM item WHERE i_id = $i",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_RELATED,
            };
            let i = a.v(0)?;
            let q = ctx.exec("related", vec![i.clone()]).await?;
            let row = first(&q, || format!("item {i}"))?.clone();
            let mut out = Vec::with_capacity(5);
            for v in row {
                let t = ctx.exec("thumbnail", vec![v.clone()]).await?;
                first(&t, || format!("related item {v}"))?;
                out.push(v);
            }
            Ok(out)
        })
}

/// A procedure that reads one column of the `customer` row its one
/// parameter names (`sql`) and returns it.
fn customer_cell(name: &'static str, sql: &'static str) -> ProcedureDef {
    ProcedureDef::new(name)
        .statement("customer", sql)
        .body(move |mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: name,
            };
            let k = a.v(0)?;
            let q = ctx.exec("customer", vec![k.clone()]).await?;
            Ok(vec![cell(
                first(&q, || format!("customer {k}"))?,
                0,
                "customer",
            )?
            .clone()])
        })
}

fn get_user_name() -> ProcedureDef {
    customer_cell(
        GET_USER_NAME,
        "SELECT c_uname FROM customer WHERE c_id = $c",
    )
}

fn get_password() -> ProcedureDef {
    customer_cell(
        GET_PASSWORD,
        "SELECT c_passwd FROM customer WHERE c_uname = $u",
    )
}

fn get_most_recent_order() -> ProcedureDef {
    ProcedureDef::new(GET_MOST_RECENT_ORDER)
        .statement("customer", "SELECT c_id FROM customer WHERE c_uname = $u")
        .statement(
            "last_order",
            "SELECT o_id, o_date, o_sub_total, o_tax, o_total, o_ship_type, o_ship_date, \
             o_status, o_bill_addr_id, o_ship_addr_id FROM orders WHERE o_c_id = $c \
             ORDER BY o_id DESC LIMIT 1",
        )
        .statement(
            "address",
            "SELECT addr_street1, addr_city, addr_co_id FROM address WHERE addr_id = $a",
        )
        .statement("country", "SELECT co_name FROM country WHERE co_id = $co")
        .statement(
            "lines",
            "SELECT ol_i_id, ol_qty, ol_discount, ol_comments FROM order_line \
             WHERE ol_c_id = $c AND ol_o_id = $o",
        )
        .statement(
            "item",
            "SELECT i_title, i_publisher, i_cost FROM item WHERE i_id = $i",
        )
        .statement(
            "payment",
            "SELECT cx_type, cx_xact_amt, cx_auth_id FROM cc_xacts \
             WHERE cx_c_id = $c AND cx_o_id = $o",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_MOST_RECENT_ORDER,
            };
            let u = a.v(0)?;
            let q = ctx.exec("customer", vec![u.clone()]).await?;
            let c = cell(first(&q, || format!("customer {u}"))?, 0, "customer")?.clone();
            let q = ctx.exec("last_order", vec![c.clone()]).await?;
            let Some(order) = q.first() else {
                return Ok(vec![Value::Int(0), Value::Int(0)]);
            };
            let o = cell(order, 0, "order")?.clone();
            for col in [8, 9] {
                let addr = cell(order, col, "order")?.clone();
                let q = ctx.exec("address", vec![addr.clone()]).await?;
                let co = cell(first(&q, || format!("address {addr}"))?, 2, "address")?.clone();
                ctx.exec("country", vec![co]).await?;
            }
            let lines = ctx.exec("lines", vec![c.clone(), o.clone()]).await?;
            for row in &lines.rows {
                ctx.exec("item", vec![cell(row, 0, "order_line")?.clone()])
                    .await?;
            }
            ctx.exec("payment", vec![c, o.clone()]).await?;
            Ok(vec![o, Value::Int(lines.len() as i64)])
        })
}

fn get_cart() -> ProcedureDef {
    ProcedureDef::new(GET_CART)
        .statement(
            "lines",
            "SELECT scl_i_id, scl_qty FROM shopping_cart_line WHERE scl_sc_id = $sc",
        )
        .statement(
            "item",
            "SELECT i_title, i_cost, i_srp, i_backing FROM item WHERE i_id = $i",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: GET_CART,
            };
            let lines = ctx.exec("lines", vec![a.v(0)?]).await?;
            let mut total = 0i64;
            for row in &lines.rows {
                let i = cell(row, 0, "cart line")?.clone();
                let q = ctx.exec("item", vec![i.clone()]).await?;
                let cost = cents_at(first(&q, || format!("item {i}"))?, 1, "item")?;
                total += cost * int_at(row, 1, "cart line")?;
            }
            Ok(vec![Value::Int(lines.len() as i64), money(total)])
        })
}

fn admin_update() -> ProcedureDef {
    ProcedureDef::new(ADMIN_UPDATE)
        .statement(
            "recent_lines",
            "SELECT ol_o_id, ol_i_id FROM order_line WHERE ol_o_id > $lo",
        )
        .statement("related", RELATED)
        .statement(
            "update_item",
            "UPDATE item SET i_cost = $cost, i_image = $image, i_thumbnail = $thumb, \
             i_pub_date = $now, i_related1 = $r1, i_related2 = $r2, i_related3 = $r3, \
             i_related4 = $r4, i_related5 = $r5 WHERE i_id = $i",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: ADMIN_UPDATE,
            };
            let i = a.int(0)?;
            // Clause 2.16.3: the related items are those most often bought
            // together with this one in the recent orders (ties by id);
            // the current ones fill up to five.
            let lines = ctx.exec("recent_lines", vec![a.v(5)?]).await?;
            let mut by_order: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            for row in &lines.rows {
                by_order
                    .entry(int_at(row, 0, "order_line")?)
                    .or_default()
                    .push(int_at(row, 1, "order_line")?);
            }
            let mut together: BTreeMap<i64, i64> = BTreeMap::new();
            for items in by_order.values().filter(|v| v.contains(&i)) {
                for &j in items.iter().filter(|&&j| j != i) {
                    *together.entry(j).or_default() += 1;
                }
            }
            let mut ranked: Vec<(i64, i64)> = together.into_iter().collect();
            ranked.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let mut related: Vec<i64> = ranked.into_iter().map(|(j, _)| j).take(5).collect();
            let q = ctx.exec("related", vec![Value::Int(i)]).await?;
            for v in first(&q, || format!("item {i}"))? {
                let j = v.as_int().unwrap_or(i);
                if related.len() < 5 && j != i && !related.contains(&j) {
                    related.push(j);
                }
            }
            while related.len() < 5 {
                related.push(related.last().copied().unwrap_or(i));
            }
            let mut params = vec![a.v(1)?, a.v(2)?, a.v(3)?, a.v(4)?];
            params.extend(related.iter().map(|&j| Value::Int(j)));
            params.push(Value::Int(i));
            let u = ctx.exec("update_item", params).await?;
            if u.affected != 1 {
                return Err(Error::Internal(format!("tpcw admin_update: no item {i}")));
            }
            Ok(related.into_iter().map(Value::Int).collect())
        })
}

fn create_empty_cart() -> ProcedureDef {
    ProcedureDef::new(CREATE_EMPTY_CART)
        .statement(
            "insert_cart",
            "INSERT INTO shopping_cart (sc_id, sc_time) VALUES ($sc, $now)",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: CREATE_EMPTY_CART,
            };
            let sc = a.v(0)?;
            ctx.exec("insert_cart", vec![sc.clone(), a.v(1)?]).await?;
            Ok(vec![sc])
        })
}

fn do_cart() -> ProcedureDef {
    ProcedureDef::new(DO_CART)
        .statement(
            "touch_cart",
            "UPDATE shopping_cart SET sc_time = $now WHERE sc_id = $sc",
        )
        .statement(
            "line",
            "SELECT scl_qty FROM shopping_cart_line WHERE scl_sc_id = $sc AND scl_i_id = $i",
        )
        .statement(
            "insert_line",
            "INSERT INTO shopping_cart_line (scl_sc_id, scl_i_id, scl_qty) VALUES ($sc, $i, $q)",
        )
        .statement(
            "update_line",
            "UPDATE shopping_cart_line SET scl_qty = $q WHERE scl_sc_id = $sc AND scl_i_id = $i",
        )
        .statement(
            "delete_line",
            "DELETE FROM shopping_cart_line WHERE scl_sc_id = $sc AND scl_i_id = $i",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: DO_CART,
            };
            let (sc, i, qty) = (a.v(0)?, a.v(1)?, a.int(2)?);
            // The cart row first: its lock orders every operation on the
            // cart (and a missing cart gets no line).
            let t = ctx.exec("touch_cart", vec![a.v(3)?, sc.clone()]).await?;
            if t.affected == 0 {
                return Err(ctx.abort(NO_CART));
            }
            let line = ctx.exec("line", vec![sc.clone(), i.clone()]).await?;
            if qty <= 0 {
                if !line.is_empty() {
                    ctx.exec("delete_line", vec![sc, i]).await?;
                }
            } else if line.is_empty() {
                ctx.exec("insert_line", vec![sc, i, Value::Int(qty)])
                    .await?;
            } else {
                ctx.exec("update_line", vec![Value::Int(qty), sc, i])
                    .await?;
            }
            Ok(vec![Value::Int(qty.max(0))])
        })
}

fn refresh_session() -> ProcedureDef {
    ProcedureDef::new(REFRESH_SESSION)
        .statement(
            "refresh",
            "UPDATE customer SET c_login = $now, c_expiration = $exp WHERE c_id = $c",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: REFRESH_SESSION,
            };
            let now = a.timestamp(1)?;
            let u = ctx
                .exec(
                    "refresh",
                    vec![
                        Value::Timestamp(now),
                        Value::Timestamp(now + 7_200_000_000),
                        a.v(0)?,
                    ],
                )
                .await?;
            Ok(vec![Value::Int(u.affected as i64)])
        })
}

const INSERT_ADDRESS: &str = "INSERT INTO address (addr_id, addr_street1, addr_street2, \
     addr_city, addr_state, addr_zip, addr_co_id) VALUES ($id, $s1, $s2, $city, $state, $zip, $co)";

fn create_new_customer() -> ProcedureDef {
    ProcedureDef::new(CREATE_NEW_CUSTOMER)
        .statement("insert_address", INSERT_ADDRESS)
        .statement(
            "insert_customer",
            "INSERT INTO customer (c_id, c_uname, c_passwd, c_fname, c_lname, c_addr_id, \
             c_phone, c_email, c_since, c_last_login, c_login, c_expiration, c_discount, \
             c_balance, c_ytd_pmt, c_birthdate, c_data) VALUES ($c, $uname, $passwd, $fname, \
             $lname, $addr, $phone, $email, $since, $last, $login, $exp, $disc, $bal, $ytd, \
             $birth, $data)",
        )
        .body(|mut ctx, args| async move {
            let a = Args {
                values: &args,
                what: CREATE_NEW_CUSTOMER,
            };
            // Arguments: the customer row (17 columns, `load::customer_row`)
            // then the address row (7 columns, `load::address_row`).
            if args.len() != 24 {
                return Err(Error::Arity {
                    what: format!("procedure `{CREATE_NEW_CUSTOMER}`"),
                    expected: 24,
                    got: args.len(),
                });
            }
            ctx.exec("insert_address", args[17..].to_vec()).await?;
            ctx.exec("insert_customer", args[..17].to_vec()).await?;
            Ok(vec![a.v(0)?])
        })
}

/// Buy-confirm's arguments before the optional new address.
const BUY_ARGS: usize = 11;

/// Buy-confirm. BASE-ified (Salt; `--base`, by default both variants) as:
///
/// ```text
///  A1 (acceptance): customer; [new address]; cart lines (empty -> user
///                   abort); the cart cleared
///  per line: stock taken, item read, restocked below 10   <- hot items
///  order; each order line; the card payment   (single-statement each)
/// ```
///
/// The only legitimate abort (an empty cart) comes before acceptance, with
/// nothing written; the cart is consumed in the same subtransaction, so it
/// becomes an order at most once. After it nothing can fail but a broken
/// invariant. A popular item's row is held for one small subtransaction
/// of each buy instead of its whole transaction; Salt Isolation keeps the
/// half-made order (stock taken, order not yet written) from every ACID
/// transaction and from the check. Under `acid` the marks do nothing and
/// the body is the spec's transaction (the cart cleared first rather than
/// last, which changes no effect: the cart is the session's own).
fn buy_confirm(name: &'static str, new_address: bool) -> ProcedureDef {
    let mut def = ProcedureDef::new(name).statement(
        "customer",
        "SELECT c_discount, c_addr_id FROM customer WHERE c_id = $c",
    );
    if new_address {
        def = def.statement("insert_address", INSERT_ADDRESS);
    }
    def.statement(
        "cart_lines",
        "SELECT scl_i_id, scl_qty FROM shopping_cart_line WHERE scl_sc_id = $sc",
    )
    .statement(
        "clear_cart",
        "DELETE FROM shopping_cart_line WHERE scl_sc_id = $sc",
    )
    .statement(
        "take_stock",
        "UPDATE item SET i_stock = i_stock - $q WHERE i_id = $i",
    )
    .statement("item", "SELECT i_cost, i_stock FROM item WHERE i_id = $i")
    .statement(
        "restock",
        "UPDATE item SET i_stock = i_stock + 21 WHERE i_id = $i",
    )
    .statement(
        "insert_order",
        "INSERT INTO orders (o_c_id, o_id, o_date, o_sub_total, o_tax, o_total, o_ship_type, \
         o_ship_date, o_bill_addr_id, o_ship_addr_id, o_status) VALUES ($c, $o, $date, $sub, \
         $tax, $total, $ship, $ship_date, $bill, $to, $status)",
    )
    .statement(
        "insert_line",
        "INSERT INTO order_line (ol_c_id, ol_o_id, ol_id, ol_i_id, ol_qty, ol_discount, \
         ol_comments) VALUES ($c, $o, $n, $i, $q, $disc, $comments)",
    )
    .statement(
        "insert_xact",
        "INSERT INTO cc_xacts (cx_c_id, cx_o_id, cx_type, cx_num, cx_name, cx_expire, \
         cx_auth_id, cx_xact_amt, cx_xact_date, cx_co_id) VALUES ($c, $o, $type, $num, $name, \
         $expire, $auth, $amt, $date, $co)",
    )
    .body(move |mut ctx, args| async move {
        let a = Args {
            values: &args,
            what: name,
        };
        // sc, c, o, now, ship_type, cx_type, cx_num, cx_name, cx_expire,
        // cx_auth_id, cx_co_id [, address row (7)]
        let (sc, c, o) = (a.v(0)?, a.v(1)?, a.v(2)?);
        let now = a.timestamp(3)?;
        ctx.begin_alkaline()?;
        let q = ctx.exec("customer", vec![c.clone()]).await?;
        let crow = first(&q, || format!("customer {c}"))?;
        let discount = cents_at(crow, 0, "customer")?;
        let bill = cell(crow, 1, "customer")?.clone();
        let ship_to = if new_address {
            let addr = args
                .get(BUY_ARGS..BUY_ARGS + 7)
                .ok_or_else(|| Error::Arity {
                    what: format!("procedure `{name}`"),
                    expected: BUY_ARGS + 7,
                    got: args.len(),
                })?;
            ctx.exec("insert_address", addr.to_vec()).await?;
            addr[0].clone()
        } else {
            bill.clone()
        };
        let lines = ctx.exec("cart_lines", vec![sc.clone()]).await?;
        if lines.is_empty() {
            return Err(ctx.abort(EMPTY_CART));
        }
        // The cart is consumed with the acceptance: turned into an order
        // at most once.
        ctx.exec("clear_cart", vec![sc]).await?;
        ctx.end_alkaline().await?;
        // Lines come in i_id order (the key), a global order: two buys
        // take their item locks in the same order.
        let mut sub = 0i64;
        for row in &lines.rows {
            let i = cell(row, 0, "cart line")?.clone();
            let qty = int_at(row, 1, "cart line")?;
            ctx.begin_alkaline()?;
            ctx.exec("take_stock", vec![Value::Int(qty), i.clone()])
                .await?;
            let item = ctx.exec("item", vec![i.clone()]).await?;
            let irow = first(&item, || format!("item {i}"))?;
            sub += cents_at(irow, 0, "item")? * qty;
            // Clause 2.7.3: below 10 left, 21 more are ordered in.
            if int_at(irow, 1, "item")? < 10 {
                ctx.exec("restock", vec![i]).await?;
            }
            ctx.end_alkaline().await?;
        }
        let sub = sub * (100 - discount) / 100;
        let tax = sub * 825 / 10_000;
        let n = lines.len() as i64;
        let total = sub + tax + 300 + 100 * n;
        ctx.exec(
            "insert_order",
            vec![
                c.clone(),
                o.clone(),
                Value::Timestamp(now),
                money(sub),
                money(tax),
                money(total),
                a.v(4)?,
                Value::Timestamp(now + 86_400_000_000),
                bill,
                ship_to,
                Value::str("PENDING"),
            ],
        )
        .await?;
        for (number, row) in (1..).zip(&lines.rows) {
            ctx.exec(
                "insert_line",
                vec![
                    c.clone(),
                    o.clone(),
                    Value::Int(number),
                    cell(row, 0, "cart line")?.clone(),
                    cell(row, 1, "cart line")?.clone(),
                    Value::Decimal(Decimal::new(discount, 2)),
                    Value::str(&format!("order {o} line {number}")),
                ],
            )
            .await?;
        }
        ctx.exec(
            "insert_xact",
            vec![
                c,
                o.clone(),
                a.v(5)?,
                a.v(6)?,
                a.v(7)?,
                a.v(8)?,
                a.v(9)?,
                money(total),
                Value::Timestamp(now),
                a.v(10)?,
            ],
        )
        .await?;
        Ok(vec![o, money(total), Value::Int(n)])
    })
}

/// Procedures `--base` may name: the two buy-confirms, the writers of
/// the hot item rows.
pub const BASE_CAPABLE: [&str; 2] = [DO_BUY_CONFIRM, DO_BUY_CONFIRM_ADDRESS];

/// The schema and the 20 procedures; those in `base` are BASE procedures.
pub fn application(base: &BaseSet) -> Application {
    Application {
        name: "tpcw".into(),
        ddl: DDL.into(),
        procedures: [
            get_name(),
            get_book(),
            get_customer(),
            do_subject_search(),
            do_title_search(),
            do_author_search(),
            get_new_products(),
            get_best_sellers(),
            get_related(),
            get_user_name(),
            get_password(),
            get_most_recent_order(),
            get_cart(),
            admin_update(),
            create_empty_cart(),
            do_cart(),
            refresh_session(),
            create_new_customer(),
            buy_confirm(DO_BUY_CONFIRM, false),
            buy_confirm(DO_BUY_CONFIRM_ADDRESS, true),
        ]
        .into_iter()
        .map(|p| base.apply(p))
        .collect(),
    }
}
