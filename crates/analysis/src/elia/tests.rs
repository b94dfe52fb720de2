//! Operation partitioning: the seed's examples (section 3.1's createCart
//! and doCart, Figure 1's online store), each rule of the classification
//! on a small case, and the classes of TPC-W and RUBiS from their real
//! declarations.

use std::collections::HashMap;

use brine_bench::workloads::{rubis, tpcw};
use brine_bench::Workload;

use super::{elia_plan, EliaPlan, OpClass, Search};
use crate::spec::Bound;
use crate::workloads;
use crate::{AnalysisError, ProcNotes, ProcSource, ProcSpec};

/// A procedure from `(name, SQL)` pairs.
fn proc(name: &str, statements: &[(&str, &str)]) -> ProcSource {
    ProcSource {
        name: name.into(),
        statements: statements
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect(),
        reorderings: Vec::new(),
        notes: None,
    }
}

/// Specs of `procs` over `ddl`, each with the arguments `args` gives.
fn specs(ddl: &str, procs: &[(ProcSource, ProcNotes)]) -> Vec<ProcSpec> {
    let catalog = brine_sql::parse_schema(ddl).expect("schema");
    procs
        .iter()
        .map(|(p, n)| ProcSpec::from_source(&catalog, p, n).expect("spec"))
        .collect()
}

fn plan(specs: &[ProcSpec]) -> EliaPlan {
    elia_plan(specs, &HashMap::new()).expect("plan")
}

/// `(class, parameter names)` of procedure `name`.
fn class(plan: &EliaPlan, name: &str) -> (OpClass, Vec<String>) {
    let p = plan.proc(name).expect("procedure");
    (p.class, p.param_names.clone())
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn args(v: &[&str]) -> ProcNotes {
    ProcNotes::new().args(v)
}

/// Seed 004 section 3.1: SHOPPING_CARTS with ID and I_ID; createCart
/// inserts a cart, doCart sets a quantity by (ID, I_ID).
const CARTS: &str = "
CREATE TABLE shopping_carts (id INT, i_id INT, qty INT NOT NULL, PRIMARY KEY (id, i_id));
";

fn carts() -> Vec<ProcSpec> {
    specs(
        CARTS,
        &[
            (
                proc(
                    "create_cart",
                    &[(
                        "insert",
                        "INSERT INTO shopping_carts (id, i_id, qty) VALUES ($sid, 0, 0)",
                    )],
                ),
                args(&["sid"]),
            ),
            (
                proc(
                    "do_cart",
                    &[(
                        "set_qty",
                        "UPDATE shopping_carts SET qty = $q WHERE id = $sid AND i_id = $iid",
                    )],
                ),
                args(&["sid", "iid", "q"]),
            ),
        ],
    )
}

#[test]
fn create_cart_and_do_cart_conflict_until_both_are_partitioned_by_cart_id() {
    let sp = carts();
    let sets: Vec<_> = sp.iter().map(super::rw_sets).collect();
    // createCart's write entry: <every column, id = sid ∧ i_id = 0 ∧ qty = 0>.
    let w = &sets[0].writes[0];
    assert_eq!(w.columns.len(), 3);
    assert!(w.condition.contains(&(0, super::Term::Arg(0))));
    // doCart's: <qty, id = sid ∧ i_id = iid> (qty is set: not a condition).
    let d = &sets[1].writes[0];
    assert_eq!(d.columns.iter().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(
        d.condition,
        vec![(0, super::Term::Arg(0)), (1, super::Term::Arg(1))]
    );
    let conflicts = super::conflicts::detect(&sp, &sets);
    let c = conflicts
        .iter()
        .find(|c| (c.t, c.t2) == (0, 1))
        .expect("createCart/doCart conflict");
    assert!(c
        .clauses
        .iter()
        .any(|cl| cl.kind == super::Kind::WriteWrite));
    // Removed when both are partitioned by the cart id, not otherwise.
    assert!(!c.remains(&[0], &[0]));
    assert!(c.remains(&[0], &[1]));
    assert!(c.remains(&[], &[0]));
    // The search finds exactly that, and both are local.
    let p = plan(&sp);
    assert_eq!(class(&p, "create_cart"), (OpClass::Local, names(&["sid"])));
    assert_eq!(class(&p, "do_cart"), (OpClass::Local, names(&["sid"])));
    assert_eq!(p.remaining_pairs, 0);
    assert_eq!(p.cost, 0.0);
    assert!(matches!(p.search, Search::Exhaustive { .. }));
}

/// Seed 004 section 3.2, Figure 1: create a cart, add an item if the
/// stock allows, order the cart (its items leave the stock).
const STORE: &str = "
CREATE TABLE stock (item INT PRIMARY KEY, qty INT NOT NULL);
CREATE TABLE carts (id INT PRIMARY KEY, open INT NOT NULL);
CREATE TABLE cart_items (cart INT, item INT, amount INT NOT NULL, PRIMARY KEY (cart, item));
";

fn store() -> Vec<(ProcSource, ProcNotes)> {
    vec![
        (
            proc(
                "create",
                &[("insert", "INSERT INTO carts (id, open) VALUES ($c, 1)")],
            ),
            args(&["c"]),
        ),
        (
            proc(
                "add",
                &[
                    ("cart", "SELECT open FROM carts WHERE id = $c"),
                    ("stock", "SELECT qty FROM stock WHERE item = $i"),
                    (
                        "insert",
                        "INSERT INTO cart_items (cart, item, amount) VALUES ($c, $i, $a)",
                    ),
                ],
            ),
            args(&["c", "i", "a"]),
        ),
        (
            proc(
                "order",
                &[
                    (
                        "items",
                        "SELECT item, amount FROM cart_items WHERE cart = $c",
                    ),
                    // One per cart item: $i and $a come from `items`.
                    ("take", "UPDATE stock SET qty = qty - $a WHERE item = $i"),
                    ("clear", "DELETE FROM cart_items WHERE cart = $c"),
                    ("close", "UPDATE carts SET open = 0 WHERE id = $c"),
                ],
            ),
            args(&["c"]),
        ),
    ]
}

#[test]
fn online_store_creates_and_adds_locally_and_orders_globally() {
    let p = plan(&specs(STORE, &store()));
    // Create conflicts only with add and order on its own cart.
    assert_eq!(class(&p, "create"), (OpClass::Local, names(&["c"])));
    // Add reads the stock that orders of other carts write: it only reads
    // from remote operations, so it stays local.
    assert_eq!(class(&p, "add"), (OpClass::Local, names(&["c"])));
    // Order writes stock rows other orders write and adds read.
    let (c, by) = class(&p, "order");
    assert_eq!((c, by), (OpClass::Global, names(&["c"])));
    let reasons = &p.proc("order").expect("order").reasons;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("order.take writes stock.qty, which add.stock reads")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("another order.take") && r.contains("on any row")),
        "{reasons:?}"
    );
    let s = p.summary();
    assert_eq!(
        (s.local, s.global, s.commutative, s.local_global),
        (2, 1, 0, 0)
    );
    assert!((s.share_global - 1.0 / 3.0).abs() < 1e-9);
}

const COUNTERS: &str = "
CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL);
CREATE TABLE config (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL);
CREATE TABLE log (id INT PRIMARY KEY, msg VARCHAR(20) NOT NULL);
";

#[test]
fn a_self_conflict_is_removed_by_the_parameter_it_binds_and_kept_on_a_literal_row() {
    let p = plan(&specs(
        COUNTERS,
        &[
            (
                proc(
                    "bump",
                    &[("bump", "UPDATE counters SET n = n + 1 WHERE id = $k")],
                ),
                args(&["k"]),
            ),
            (
                proc(
                    "bump_one",
                    &[("bump", "UPDATE counters SET n = n + 1 WHERE id = 1")],
                ),
                args(&[]),
            ),
        ],
    ));
    // Two bumps of one key conflict; partitioned by it they meet on one
    // server. But bump_one's row 1 is anyone's: bump conflicts with it
    // (k may be 1), and two bump_ones always conflict. Every row bump
    // touches is then written by globals only: it runs at any server
    // (its parameter dropped, `run_anywhere`).
    assert_eq!(class(&p, "bump"), (OpClass::Global, names(&[])));
    assert_eq!(class(&p, "bump_one"), (OpClass::Global, names(&[])));
    let r = &p.proc("bump_one").expect("bump_one").reasons;
    assert!(
        r.iter()
            .any(|r| r.contains("bump_one.bump and another bump_one.bump both write counters.n")),
        "{r:?}"
    );
    // Alone, bump is local by its key.
    let p = plan(&specs(
        COUNTERS,
        &[(
            proc(
                "bump",
                &[("bump", "UPDATE counters SET n = n + 1 WHERE id = $k")],
            ),
            args(&["k"]),
        )],
    ));
    assert_eq!(class(&p, "bump"), (OpClass::Local, names(&["k"])));
}

#[test]
fn two_literals_on_one_column_make_a_clause_unsatisfiable() {
    let p = plan(&specs(
        COUNTERS,
        &[
            (
                proc("one", &[("w", "UPDATE counters SET n = 0 WHERE id = 1")]),
                args(&[]),
            ),
            (
                proc("two", &[("r", "SELECT n FROM counters WHERE id = 2")]),
                args(&[]),
            ),
        ],
    ));
    // one conflicts with itself (row 1, twice) but never with two (row 2).
    assert_eq!(p.conflicting_pairs, 1);
    assert_eq!(class(&p, "one").0, OpClass::Global);
    assert_eq!(class(&p, "two").0, OpClass::Commutative);
}

#[test]
fn read_only_over_immutable_and_write_only_never_read_are_commutative() {
    let p = plan(&specs(
        COUNTERS,
        &[
            (
                proc("lookup", &[("r", "SELECT name FROM config WHERE id = $k")]),
                args(&["k"]),
            ),
            (
                proc(
                    "log",
                    &[("w", "INSERT INTO log (id, msg) VALUES ($id, $msg)")],
                ),
                args(&["id", "msg"]),
            ),
            (
                proc(
                    "bump",
                    &[("bump", "UPDATE counters SET n = n + 1 WHERE id = $k")],
                ),
                args(&["k"]),
            ),
        ],
    ));
    // Nobody writes config; nobody reads log, and two inserts insert
    // fresh keys (the module's assumption): no conflict at all.
    assert_eq!(class(&p, "lookup"), (OpClass::Commutative, names(&[])));
    assert_eq!(class(&p, "log"), (OpClass::Commutative, names(&[])));
    assert_eq!(class(&p, "bump"), (OpClass::Local, names(&["k"])));
    let s = p.summary();
    assert_eq!((s.commutative, s.local, s.read_only), (2, 1, 1));
}

#[test]
fn a_non_equality_predicate_is_ignored_for_partitioning() {
    let sp = specs(
        COUNTERS,
        &[
            (
                proc(
                    "scan",
                    &[(
                        "r",
                        "SELECT id, n FROM counters WHERE id >= $lo AND id < $hi",
                    )],
                ),
                args(&["lo", "hi"]),
            ),
            (
                proc(
                    "bump",
                    &[("bump", "UPDATE counters SET n = n + 1 WHERE id = $k")],
                ),
                args(&["k"]),
            ),
        ],
    );
    // The range binds no column by equality: the scan may read any row.
    assert!(sp[0].ops[0].selection.equalities.is_empty());
    let p = plan(&sp);
    assert_eq!(class(&p, "scan"), (OpClass::Local, names(&[])));
    // bump writes what a scan anywhere reads; no local writes its rows,
    // so it runs at any server.
    assert_eq!(class(&p, "bump"), (OpClass::Global, names(&[])));
    let r = &p.proc("bump").expect("bump").reasons;
    assert!(
        r.iter().any(|r| r
            == "bump.bump writes counters.n, which scan.r reads, with no column bound by both"),
        "{r:?}"
    );
}

/// A bid touches its user's row and its item's row: two entities.
const AUCTION: &str = "
CREATE TABLE users (id INT PRIMARY KEY, bids INT NOT NULL);
CREATE TABLE items (id INT PRIMARY KEY, bids INT NOT NULL);
";

#[test]
fn a_procedure_needing_two_parameters_is_local_global() {
    let p = plan(&specs(
        AUCTION,
        &[
            (
                proc(
                    "bid",
                    &[
                        ("user", "UPDATE users SET bids = bids + 1 WHERE id = $u"),
                        ("item", "UPDATE items SET bids = bids + 1 WHERE id = $i"),
                    ],
                ),
                args(&["u", "i"]),
            ),
            (
                proc(
                    "user_page",
                    &[("r", "SELECT bids FROM users WHERE id = $u")],
                ),
                args(&["u"]),
            ),
            (
                proc(
                    "item_page",
                    &[("r", "SELECT bids FROM items WHERE id = $i")],
                ),
                args(&["i"]),
            ),
        ],
    ));
    // By u alone, two bids on one item on two servers both write it (and
    // item_page reads it); by i alone, the same on users. By both, local
    // when they route together.
    assert_eq!(class(&p, "bid"), (OpClass::LocalGlobal, names(&["u", "i"])));
    assert_eq!(p.proc("bid").expect("bid").params, vec![0, 1]);
    assert_eq!(class(&p, "user_page"), (OpClass::Local, names(&["u"])));
    assert_eq!(class(&p, "item_page"), (OpClass::Local, names(&["i"])));
    let r = &p.proc("bid").expect("bid").reasons;
    assert!(
        r.iter()
            .any(|r| r.starts_with("when $u and $i route apart")),
        "{r:?}"
    );
    assert_eq!(p.summary().local_global, 1);
    // A read-only procedure never takes a pair: it is never global.
    let p = plan(&specs(
        AUCTION,
        &[
            (
                proc(
                    "both_pages",
                    &[
                        ("user", "SELECT bids FROM users WHERE id = $u"),
                        ("item", "SELECT bids FROM items WHERE id = $i"),
                    ],
                ),
                args(&["u", "i"]),
            ),
            (
                proc(
                    "bump_user",
                    &[("w", "UPDATE users SET bids = bids + 1 WHERE id = $u")],
                ),
                args(&["u"]),
            ),
            (
                proc(
                    "bump_item",
                    &[("w", "UPDATE items SET bids = bids + 1 WHERE id = $i")],
                ),
                args(&["i"]),
            ),
        ],
    ));
    assert_eq!(class(&p, "both_pages").0, OpClass::Local);
    assert_eq!(p.proc("both_pages").expect("page").params.len(), 1);
}

#[test]
fn placeholders_bind_arguments_by_name_unless_declared_otherwise() {
    let src = proc(
        "page",
        &[
            ("user", "SELECT bids FROM users WHERE id = $u"),
            // Run once per friend: $u is a friend's id, read elsewhere.
            ("friend", "SELECT bids FROM users WHERE id = $u"),
        ],
    );
    let sp = specs(
        AUCTION,
        &[(src.clone(), args(&["u"]).not_arg("friend", "$u"))],
    );
    assert_eq!(sp[0].ops[0].selection.equalities, vec![(0, Bound::Arg(0))]);
    assert_eq!(
        sp[0].ops[1].selection.equalities,
        vec![(0, Bound::Computed("$u".into()))]
    );
    // Undeclared: every placeholder is computed.
    let sp = specs(AUCTION, &[(src.clone(), ProcNotes::new())]);
    assert!(!sp[0].args_declared);
    assert!(matches!(
        sp[0].ops[0].selection.equalities[0].1,
        Bound::Computed(_)
    ));
    // Mistakes in the declaration are errors that name the procedure.
    let catalog = brine_sql::parse_schema(AUCTION).expect("schema");
    for (notes, msg) in [
        (args(&["u", "u"]), "declared twice"),
        (args(&["$u"]), "without `$`"),
        (args(&["u"]).not_arg("nope", "u"), "undeclared statement"),
        (args(&["u"]).not_arg("user", "x"), "no argument is named"),
        (args(&["u", "x"]).not_arg("user", "x"), "no placeholder"),
    ] {
        let e = ProcSpec::from_source(&catalog, &src, &notes).expect_err(msg);
        assert!(
            matches!(&e, AnalysisError::Notes { procedure, msg: m } if procedure == "page" && m.contains(msg)),
            "{e}"
        );
    }
    // Weights must be sane.
    let sp = specs(AUCTION, &[(src, args(&["u"]))]);
    let bad = HashMap::from([("page".to_string(), -1.0)]);
    assert!(matches!(elia_plan(&sp, &bad), Err(AnalysisError::Elia(_))));
    let unknown = HashMap::from([("nope".to_string(), 1.0)]);
    assert!(matches!(
        elia_plan(&sp, &unknown),
        Err(AnalysisError::Elia(_))
    ));
}

/// The specs of a built-in workload, with the analysis's notes, and its
/// mix's weights.
fn workload(w: &dyn Workload) -> (Vec<ProcSpec>, HashMap<String, f64>) {
    let app = w.application();
    // Not `ProcedureDef::source()`: that builds the library's
    // `ProcSource`, not this test build's.
    let procs: Vec<ProcSource> = app
        .procedures
        .iter()
        .map(|p| ProcSource {
            name: p.name.clone(),
            statements: p.statements.clone(),
            reorderings: Vec::new(),
            notes: None,
        })
        .collect();
    let specs = workloads::specs_with_notes(&app.name, &app.ddl, &procs)
        .expect("specs")
        .1;
    let weights = w
        .mix()
        .into_iter()
        .map(|(p, s)| (p.to_string(), s))
        .collect();
    (specs, weights)
}

fn tpcw() -> (Vec<ProcSpec>, HashMap<String, f64>) {
    let w = tpcw::Tpcw::new(tpcw::Scale::SMALL, tpcw::Mix::SHOPPING).expect("tpcw");
    workload(&w)
}

fn rubis() -> (Vec<ProcSpec>, HashMap<String, f64>) {
    let w = rubis::Rubis::new(rubis::Scale::SMALL, rubis::Mix::BIDDING).expect("rubis");
    workload(&w)
}

#[test]
fn the_mixes_weigh_procedures_as_their_interactions_call_them() {
    for (specs, weights, read_only, lo, hi) in [
        // TPC-W shopping: 12.4% of the calls write (do_cart in 11.6% of
        // interactions, each of which also runs get_cart; the rest are
        // pages of 1-2 reads). Seed 004 counts 73% read-only operations
        // for Elia's own decomposition; see docs/results/elia-classes.md.
        {
            let (s, w) = tpcw();
            (s, w, tpcw::READ_ONLY.as_slice(), 0.87, 0.88)
        },
        // RUBiS bidding: 15% writes (seed 004: 85% read-only).
        {
            let (s, w) = rubis();
            (s, w, rubis::READ_ONLY.as_slice(), 0.845, 0.855)
        },
    ] {
        let total: f64 = weights.values().sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert_eq!(weights.len(), specs.len());
        let ro: f64 = weights
            .iter()
            .filter(|(p, _)| read_only.contains(&p.as_str()))
            .map(|(_, w)| w)
            .sum();
        assert!((lo..hi).contains(&ro), "read-only share {ro}");
        let plan = elia_plan(&specs, &weights).expect("plan");
        assert!((plan.summary().share_read_only - ro).abs() < 1e-9);
        assert_eq!(plan.summary().read_only, read_only.len());
    }
}

#[test]
fn tpcw_classes_from_its_declarations() {
    let (specs, weights) = tpcw();
    assert!(specs.iter().all(|s| s.args_declared));
    let p = elia_plan(&specs, &weights).expect("plan");
    assert!(
        matches!(p.search, Search::Exhaustive { .. }),
        "{:?}",
        p.search
    );
    let expect = [
        // The cart's row and lines, all by $sc (procedures.rs do_cart,
        // create_empty_cart, get_cart); buy-confirm reads and clears the
        // lines by $sc too, so partitioning it by $sc keeps them local.
        ("do_cart", OpClass::Local, &["sc"][..]),
        ("create_empty_cart", OpClass::Local, &["sc"]),
        ("get_cart", OpClass::Local, &["sc"]),
        // Customer row by $c: refresh writes c_login/c_expiration, which
        // only a new customer's insert (same $c) also writes.
        ("refresh_session", OpClass::Local, &["c"]),
        // Reads names only a new customer's insert (a global) writes: it
        // runs wherever its client is.
        ("get_name", OpClass::Local, &[]),
        // Reads only item columns nobody writes (i_id, i_title, i_a_id,
        // i_subject) and immutable authors.
        ("do_title_search", OpClass::Commutative, &[]),
        ("do_subject_search", OpClass::Commutative, &[]),
        ("do_author_search", OpClass::Commutative, &[]),
        // Takes stock of items it reads from the cart (computed ids):
        // two buys anywhere may write one item row.
        ("do_buy_confirm", OpClass::Global, &["sc"]),
        ("do_buy_confirm_address", OpClass::Global, &["sc"]),
        // Writes item columns that get_related reads for computed ids;
        // touches no local row, so it runs at its client's server.
        ("admin_update", OpClass::Global, &[]),
        // get_customer/get_password read customers by uname: a new
        // customer's row is read by servers that do not route by c_id. It
        // keeps $c: refresh_session (local by $c) writes its row too.
        ("create_new_customer", OpClass::Global, &["c"]),
    ];
    for (name, c, by) in expect {
        assert_eq!(class(&p, name), (c, names(by)), "{name}");
    }
    let s = p.summary();
    assert_eq!(
        (
            s.local,
            s.global,
            s.commutative,
            s.local_global,
            s.read_only,
            s.total
        ),
        (13, 4, 3, 0, 13, 20)
    );
    let r = &p.proc("do_buy_confirm").expect("buy").reasons;
    assert!(
        r.iter().any(|r| r
            .contains("do_buy_confirm.take_stock writes item.i_stock, which get_book.item reads")),
        "{r:?}"
    );
}

#[test]
fn rubis_classes_from_its_declarations() {
    let (specs, weights) = rubis();
    assert!(specs.iter().all(|s| s.args_declared));
    // Only authenticate's password is never a placeholder (the body
    // compares it).
    let unused: Vec<(&str, Vec<&str>)> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.unused_args()))
        .filter(|(_, u)| !u.is_empty())
        .collect();
    assert_eq!(unused, vec![("authenticate", vec!["pw"])]);
    let p = elia_plan(&specs, &weights).expect("plan");
    assert!(
        matches!(p.search, Search::Exhaustive { .. }),
        "{:?}",
        p.search
    );
    let expect = [
        // Categories and regions are never written.
        ("browse_categories", OpClass::Commutative, &[][..]),
        ("browse_categories_in_region", OpClass::Commutative, &[]),
        // The item and its bids (procedures.rs view_item), the user and
        // the comments about them: every writer of those rows is global,
        // so these pages run wherever their client is.
        ("view_item", OpClass::Local, &[][..]),
        ("put_bid_form", OpClass::Local, &[]),
        ("view_user_info", OpClass::Local, &[]),
        // A bid writes nb_of_bids and max_bid, which the searches read
        // for items found by category or region: any row. No local
        // procedure writes what it touches: it runs at its client's
        // server, at the token.
        ("store_bid", OpClass::Global, &[]),
        ("store_buy_now", OpClass::Global, &[]),
        // New users' nicknames are read by id by every page that shows a
        // seller, bidder or author (computed ids).
        ("register_user", OpClass::Global, &[]),
    ];
    for (name, c, by) in expect {
        assert_eq!(class(&p, name), (c, names(by)), "{name}");
    }
    let s = p.summary();
    assert_eq!(
        (
            s.local,
            s.global,
            s.commutative,
            s.local_global,
            s.read_only,
            s.total
        ),
        (13, 5, 4, 0, 17, 22)
    );
}

#[test]
fn the_report_shows_classes_parameters_and_table_1() {
    let (specs, weights) = tpcw();
    let text = elia_plan(&specs, &weights).expect("plan").render();
    assert!(text.contains("in the form of seed 004 Table 1"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("do_cart")
            && l.contains(" L ")
            && l.contains("sc (#0)")),
        "{text}"
    );
    // Without a mix every procedure weighs 1.
    let p = elia_plan(&specs, &HashMap::new()).expect("plan");
    assert!(p.render().contains("weights 1 each"));
    assert!((p.summary().share_read_only - 13.0 / 20.0).abs() < 1e-9);
}
