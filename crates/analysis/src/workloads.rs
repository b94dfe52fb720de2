//! What the analysis knows about the built-in workloads beyond their
//! declared statements: the notes their bodies justify, the groups the
//! sources chose, and the rollback microbenchmark of seed 000 section
//! 4.6.6 (not yet a runnable workload).
//!
//! Notes describe the bodies in `crates/bench/src/workloads/`; if a body
//! changes, its notes must follow (the Callas runtime rejects a statement
//! whose rank is below the current piece's, so a stale note shows up as
//! an error, not as a silent anomaly).

use std::collections::HashMap;

use brine_core::Catalog;

use crate::elia::EliaPlan;
use crate::error::Result;
use crate::spec::{specs_from_sources, ProcNotes, ProcSource, ProcSpec};

/// The specs of `procs` (declared by application `app` with schema `ddl`),
/// each with the notes the analysis keeps for it, if any.
pub fn specs_with_notes(
    app: &str,
    ddl: &str,
    procs: &[ProcSource],
) -> Result<(Catalog, Vec<ProcSpec>)> {
    let notes: Vec<Option<ProcNotes>> = procs.iter().map(|p| notes_of(app, p)).collect();
    specs_from_sources(ddl, procs, |name| {
        procs
            .iter()
            .position(|p| p.name == name)
            .and_then(|i| notes[i].as_ref())
    })
}

/// Operation partitioning of application `app` (schema `ddl`,
/// procedures `procs`) with the notes the analysis keeps for it: what the
/// Elia runtime calls. `weights` as in [`crate::elia_plan`] (e.g. a
/// workload's `mix()`; empty: 1 each).
pub fn elia_plan_for(
    app: &str,
    ddl: &str,
    procs: &[ProcSource],
    weights: &HashMap<String, f64>,
) -> Result<EliaPlan> {
    let (_, specs) = specs_with_notes(app, ddl, procs)?;
    crate::elia::elia_plan(&specs, weights)
}

/// The notes of `proc`: those its application declares, else those the
/// analysis keeps for a built-in workload's.
pub fn notes_of(app: &str, proc: &ProcSource) -> Option<ProcNotes> {
    proc.notes.clone().or_else(|| notes(app, &proc.name))
}

/// Notes for procedure `proc` of application `app`, if the analysis has
/// any: the body's (order, loops, rollbacks, counters) and its arguments'
/// names for operation partitioning ([`arguments`]).
pub fn notes(app: &str, proc: &str) -> Option<ProcNotes> {
    let body = body_notes(app, proc);
    match arguments(app, proc) {
        None => body,
        Some((names, not_args)) => {
            let mut n = body.unwrap_or_default().args(names);
            for (statement, placeholder) in not_args {
                n = n.not_arg(statement, placeholder);
            }
            Some(n)
        }
    }
}

/// What the bodies justify about statement order, loops, rollbacks and
/// counters.
fn body_notes(app: &str, proc: &str) -> Option<ProcNotes> {
    match (app, proc) {
        ("tpcc", "new_order") => Some(
            // crates/bench/src/workloads/tpcc/procedures.rs, new_order():
            // items first (a missing item is the 1% user rollback), stock
            // per line, the inserts keyed by the order id taken from the
            // district counter. The statements are declared in the order
            // the body runs them, which `--tpcc-order` chooses; so is
            // payment's, which needs no notes.
            ProcNotes::new()
                .looped(&["item"])
                .looped(&["stock", "update_stock"])
                .looped(&["insert_line"])
                .rollback("item")
                .unique_key("insert_order", "bump_district")
                .unique_key("insert_new_order", "bump_district")
                .unique_key("insert_line", "bump_district"),
        ),
        // The body repeats every statement once per district.
        ("tpcc", "delivery") => Some(ProcNotes::new().looped(&[
            "oldest_new_order",
            "delete_new_order",
            "set_carrier",
            "order_customer",
            "stamp_lines",
            "sum_lines",
            "credit_customer",
        ])),
        ("tpcc", "stock_level") => Some(ProcNotes::new().looped(&["stock"])),
        ("ticket", "create_order") => Some(
            // crates/bench/src/workloads/ticket/procedures.rs,
            // create_order(): the cart and its items (checks that may roll
            // back), the cart deleted, the order inserted, each seat sold
            // with its order item, then the counters of each category and
            // of the event, hot rows last; a counter that cannot sell rolls
            // back.
            ProcNotes::new()
                .order(&[
                    "cart",
                    "items",
                    "delete_items",
                    "delete_cart",
                    "insert_order",
                    "sell_seat",
                    "insert_item",
                    "sell_category",
                    "sell_event",
                ])
                .looped(&["sell_seat", "insert_item"])
                .looped(&["sell_category"])
                .rollback("cart")
                .rollback("items")
                .rollback("sell_seat")
                .rollback("sell_category")
                .rollback("sell_event"),
        ),
        ("ticket", "reserve_seats") => Some(
            // reserve_seats(): a stale cart first (its seats released one
            // by one, then its items and it), the category's price (no
            // such category rolls back), then per seat: held if still free
            // (else the user abort "seat taken", undoing everything) and
            // its cart item; the cart last.
            ProcNotes::new()
                .looped(&["release_seat"])
                .looped(&["hold_seat", "insert_item"])
                .rollback("release_seat")
                .rollback("price")
                .rollback("hold_seat"),
        ),
        ("ticket", "pay") => Some(
            // pay(): the order (missing, already paid or a wrong amount
            // rolls back), the payment, the order marked paid.
            ProcNotes::new().rollback("order").rollback("mark_paid"),
        ),
        ("ticket", "issue_tickets") => Some(
            // issue_tickets(): the order (must be paid), its items, one
            // ticket per seat, the order marked ticketed.
            ProcNotes::new()
                .looped(&["insert_ticket"])
                .rollback("order")
                .rollback("mark_ticketed"),
        ),
        ("ticket", "delete_order") => Some(
            // delete_order(): per order, the order (missing rolls back),
            // its items, its tickets, payment, items and itself; then each
            // seat sold -> free; then the counters of each category and of
            // the event (guards that a correct run never trips roll back).
            ProcNotes::new()
                .looped(&[
                    "order",
                    "items",
                    "delete_tickets",
                    "delete_payment",
                    "delete_items",
                    "delete_order",
                ])
                .looped(&["unsell_seat"])
                .looped(&["restore_category"])
                .rollback("order")
                .rollback("unsell_seat")
                .rollback("restore_category")
                .rollback("restore_event"),
        ),
        ("callas_rollback", rollback_micro::PROC) => Some(rollback_micro::notes()),
        // crates/bench/src/workloads/checking.rs, run_ops(): each procedure
        // runs its arguments' operations in their order, any of its
        // statements any number of times (a range read before a write, a
        // write before a read). Without the note the analysis assumed
        // declaration order, so the range read, declared last, ended the
        // piece where it ran while the body went on to write: the
        // transaction's locks there became nexus locks mid-body, and two
        // such transactions could each come to depend on the other (a
        // commit-dependency cycle, broken only by the wait timeout).
        ("register", _) => Some(ProcNotes::new().looped(&["r", "w", "rr"])),
        // run_list_ops(): the same, an append being `inc`, `n`, `a`.
        ("list-append", _) => Some(ProcNotes::new().looped(&["r", "inc", "n", "a"])),
        // crates/bench/src/workloads/rubis/procedures.rs: a nickname per
        // bidder or comment author (`nicknames`), an item (or the closed
        // auction it became, `item_or_old`) per item of a user's page.
        ("rubis", "view_bid_history") => Some(ProcNotes::new().looped(&["bidder"])),
        ("rubis", "view_user_info" | "about_me_user") => Some(ProcNotes::new().looped(&["author"])),
        ("rubis", "about_me_bids") => Some(ProcNotes::new().looped(&["item", "old_item"])),
        ("rubis", "about_me_bought") => {
            Some(ProcNotes::new().looped(&["item_name", "old_item_name"]))
        }
        // User aborts: a wrong password, an item no longer for sale (or
        // sold out once taken), a nickname taken.
        ("rubis", "authenticate" | "register_user") => {
            Some(ProcNotes::new().rollback("by_nickname"))
        }
        ("rubis", "store_bid") => Some(ProcNotes::new().rollback("count_bid")),
        ("rubis", "store_buy_now") => Some(ProcNotes::new().rollback("take").rollback("left")),
        ("tpcw", proc) => tpcw_notes(proc),
        _ => None,
    }
}

/// crates/bench/src/workloads/tpcw/procedures.rs: the listings read an
/// author per listed item (`read_authors`); the other loops are a row per
/// related item, per order address, per cart or order line. A cart that
/// does not exist and an empty cart are the user aborts.
fn tpcw_notes(proc: &str) -> Option<ProcNotes> {
    let notes = ProcNotes::new();
    Some(match proc {
        "do_subject_search" | "do_title_search" | "get_new_products" | "get_best_sellers" => {
            notes.looped(&["author"])
        }
        "do_author_search" => notes.looped(&["items"]).looped(&["author"]),
        "get_related" => notes.looped(&["thumbnail"]),
        "get_most_recent_order" => notes.looped(&["address", "country"]).looped(&["item"]),
        "get_cart" => notes.looped(&["item"]),
        "do_cart" => notes.rollback("touch_cart"),
        "do_buy_confirm" | "do_buy_confirm_address" => notes
            .looped(&["take_stock", "item", "restock"])
            .looped(&["insert_line"])
            .rollback("cart_lines"),
        _ => return None,
    })
}

/// A procedure's argument names in call order, and the `(statement,
/// placeholder)` pairs where a placeholder of an argument's name is not
/// that argument ([`ProcNotes::args`], [`ProcNotes::not_arg`]).
type Arguments = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

/// The arguments of the built-in procedures (operation partitioning,
/// seed 004 section 3.1: "map input parameters to the used query
/// parameters"). Each list was checked against the body (which value
/// each `ctx.exec` passes for each placeholder, in the statement's
/// parameter order: first appearance) and against the call site that
/// builds the arguments (`input.rs`). A name no placeholder uses is
/// harmless; a placeholder wrongly taken for an argument is not, so
/// every statement where `$x` receives anything but argument `x` is
/// listed as an exception.
pub fn arguments(app: &str, proc: &str) -> Option<Arguments> {
    match app {
        "tpcw" => tpcw_arguments(proc),
        "rubis" => rubis_arguments(proc),
        _ => None,
    }
}

/// crates/bench/src/workloads/tpcw/procedures.rs and input.rs
/// (`TpcwClient::queue`).
fn tpcw_arguments(proc: &str) -> Option<Arguments> {
    const NONE: &[(&str, &str)] = &[];
    Some(match proc {
        // customer by $c (a.v(0)).
        "get_name" | "get_user_name" => (&["c"], NONE),
        // item by $i; its author's id ($a) comes from the item row.
        "get_book" => (&["i"], NONE),
        // customer by uname $u; address and country ids are read.
        "get_customer" | "get_password" | "get_most_recent_order" => (&["u"], NONE),
        // items by subject $s; authors' ids are read.
        "do_subject_search" | "get_new_products" => (&["s"], NONE),
        // title prefix bounds $lo, $hi (a range: no equality).
        "do_title_search" => (&["lo", "hi"], NONE),
        // authors by last name $l; `items` takes each author's id as $a.
        "do_author_search" => (&["l"], NONE),
        // recent_lines: ol_o_id > $lo (a.v(1)); items by subject $s (a.v(0)).
        "get_best_sellers" => (&["s", "lo"], NONE),
        // related by $i; `thumbnail` runs once per related item, whose id
        // it passes as $i.
        "get_related" => (&["i"], &[("thumbnail", "i")]),
        // cart lines by $sc; each line's item id is $i (read).
        "get_cart" => (&["sc"], NONE),
        // admin_update(i, cost, image, thumb, now, lo): update_item binds
        // $cost..$now to a.v(1..=4), $i to a.int(0); the related ids are
        // computed.
        "admin_update" => (&["i", "cost", "image", "thumb", "now", "lo"], NONE),
        "create_empty_cart" => (&["sc", "now"], NONE),
        // do_cart(sc, i, qty, now): every statement takes $sc = a.v(0),
        // $i = a.v(1), $q = a.int(2), $now = a.v(3).
        "do_cart" => (&["sc", "i", "q", "now"], NONE),
        // refresh_session(c, now): $now = a.timestamp(1), $exp computed.
        "refresh_session" => (&["c", "now"], NONE),
        // The customer row (17 columns, `load::customer_row`, insert_customer's
        // placeholders in order), then the address row (7,
        // `load::address_row`, insert_address's).
        "create_new_customer" => (
            &[
                "c", "uname", "passwd", "fname", "lname", "addr", "phone", "email", "since",
                "last", "login", "exp", "disc", "bal", "ytd", "birth", "data", "id", "s1", "s2",
                "city", "state", "zip", "co",
            ],
            NONE,
        ),
        // buy_confirm(sc, c, o, now, ship_type, cx_type, cx_num, cx_name,
        // cx_expire, cx_auth_id, cx_co_id): insert_order and insert_xact
        // take $date = now (arg 3), $ship = a.v(4), $type..$auth =
        // a.v(5..=9), $co = a.v(10); every item id, quantity, line number
        // and amount is computed.
        "do_buy_confirm" => (
            &[
                "sc", "c", "o", "date", "ship", "type", "num", "name", "expire", "auth", "co",
            ],
            NONE,
        ),
        // ... then the new address row (args 11..18): insert_address's
        // $co is the address's country (arg 17), not cx_co_id (arg 10).
        "do_buy_confirm_address" => (
            &[
                "sc", "c", "o", "date", "ship", "type", "num", "name", "expire", "auth", "co",
                "id", "s1", "s2", "city", "state", "zip", "_",
            ],
            &[("insert_address", "co")],
        ),
        _ => return None,
    })
}

/// crates/bench/src/workloads/rubis/procedures.rs and input.rs
/// (`RubisClient::transaction`).
fn rubis_arguments(proc: &str) -> Option<Arguments> {
    const NONE: &[(&str, &str)] = &[];
    Some(match proc {
        "browse_categories" | "browse_regions" | "select_category_to_sell" => (&[], NONE),
        "browse_categories_in_region" => (&["r"], NONE),
        "search_items_by_category" => (&["c", "from", "now"], NONE),
        "search_items_by_region" => (&["r", "c", "from", "now"], NONE),
        // item / old item / bids by $i; the seller's or bidders' ids ($u)
        // are read.
        "view_item" | "view_bid_history" | "put_bid_form" | "buy_now_form" => (&["i"], NONE),
        // user and comments by $u; `author` runs once per comment author,
        // whose id it passes as $u.
        "view_user_info" | "about_me_user" => (&["u"], &[("author", "u")]),
        // by_nickname $n; the password is compared in the body.
        "authenticate" => (&["n", "pw"], NONE),
        // put_comment_form(to, item): to_user reads the nickname of $u = to.
        "put_comment_form" => (&["u", "i"], NONE),
        // bids / buy-nows / items by user $u; their items' ids are read.
        "about_me_bids" | "about_me_bought" | "about_me_sold" => (&["u"], NONE),
        // store_bid(user, item, bid_id, bid, max_bid, qty, now).
        "store_bid" => (&["u", "i", "id", "b", "m", "q", "now"], NONE),
        // store_buy_now(buyer, item, id, qty, now): insert_buy_now's $b is
        // the buyer.
        "store_buy_now" => (&["b", "i", "id", "q", "now"], NONE),
        // store_comment(from, to, item, id, rating, now, text).
        "store_comment" => (&["from", "to", "i", "id", "r", "now", "text"], NONE),
        // register_user(id, nickname, password, region, now).
        "register_user" => (&["id", "n", "pw", "r", "now"], NONE),
        // register_item(id, seller, category, price, qty, buy_now, now,
        // end): insert_item's $reserve is the price, $r the region read.
        "register_item" => (
            &["id", "s", "c", "price", "qty", "buy_now", "now", "end"],
            NONE,
        ),
        _ => return None,
    })
}

/// The groups the sources report for an application (seed 000 section
/// 4.6.1: TPC-C's tool-chosen grouping).
pub fn default_groups(app: &str) -> Option<Vec<Vec<&'static str>>> {
    match app {
        "tpcc" => Some(vec![
            vec!["new_order", "payment"],
            vec!["delivery"],
            vec!["order_status", "stock_level"],
        ]),
        _ => None,
    }
}

/// The rollback microbenchmark of seed 000 section 4.6.6: tables A, B and
/// C of ten rows; one transaction of eleven operations. Operations 1-2
/// check and update row i of A, 3-4 of B, 5-6 of C (operation 5's check
/// may fail and roll the transaction back); 7-11 update rows private to
/// the instance. The seed does not say where the private rows live; they
/// must be five separately ranked objects for the chopping it reports, so
/// here they are five tables P1..P5 keyed by client. Their updates are
/// plain assignments: the analysis cannot know the rows are private.
pub mod rollback_micro {
    use super::*;

    pub const APP: &str = "callas_rollback";
    pub const PROC: &str = "rollback11";

    pub const DDL: &str = "
CREATE TABLE a (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE b (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE c (id INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p1 (client INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p2 (client INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p3 (client INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p4 (client INT PRIMARY KEY, val INT NOT NULL);
CREATE TABLE p5 (client INT PRIMARY KEY, val INT NOT NULL);
";

    /// The transaction's statements, in execution order.
    pub fn source() -> ProcSource {
        let mut statements = Vec::new();
        for t in ["a", "b", "c"] {
            statements.push((
                format!("check_{t}"),
                format!("SELECT val FROM {t} WHERE id = $i"),
            ));
            statements.push((
                format!("update_{t}"),
                format!("UPDATE {t} SET val = $v WHERE id = $i"),
            ));
        }
        for k in 1..=5 {
            statements.push((
                format!("private_{k}"),
                format!("UPDATE p{k} SET val = $v WHERE client = $c"),
            ));
        }
        ProcSource {
            name: PROC.into(),
            statements,
            reorderings: Vec::new(),
            notes: None,
        }
    }

    /// Operation 5 (the check on C) may roll back.
    pub fn notes() -> ProcNotes {
        ProcNotes::new().rollback("check_c")
    }
}
