//! Golden tests: the sources' examples, TPC-C, the rollback
//! microbenchmark, and what each refinement changes.

use brine_bench::workloads::tpcc;
use brine_bench::Workload;

use crate::classic::{classic_chopping, find_sc_cycle, two_of_each};
use crate::report::compact;
use crate::safe::{is_rollback_safe, rollback_safe};
use crate::workloads::{self, rollback_micro};
use crate::{
    analyze_group, choose_orderings, runtime_pipelining, select, specs_from_sources, AnalysisError,
    OpRef, ProcNotes, ProcSource, ProcSpec, Refinements,
};

const ABCD: &str = "
CREATE TABLE a (id INT PRIMARY KEY, v INT NOT NULL);
CREATE TABLE b (id INT PRIMARY KEY, v INT NOT NULL);
CREATE TABLE c (id INT PRIMARY KEY, v INT NOT NULL);
CREATE TABLE d (id INT PRIMARY KEY, v INT NOT NULL);
";

fn read(t: &str) -> String {
    format!("SELECT v FROM {t} WHERE id = $k")
}

fn write(t: &str) -> String {
    format!("UPDATE {t} SET v = $x WHERE id = $k")
}

/// A procedure from `R(A)`/`W(B)` shorthand.
fn proc(name: &str, ops: &[&str]) -> ProcSource {
    ProcSource {
        name: name.into(),
        statements: ops
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let t = o[2..3].to_ascii_lowercase();
                let sql = if o.starts_with('R') {
                    read(&t)
                } else {
                    write(&t)
                };
                (format!("{i}_{o}"), sql)
            })
            .collect(),
        reorderings: Vec::new(),
        notes: None,
    }
}

fn specs(ddl: &str, procs: &[ProcSource]) -> Vec<ProcSpec> {
    specs_from_sources(ddl, procs, |_| None).expect("specs").1
}

/// Table names of each piece's operations, per piece.
fn piece_tables(s: &ProcSpec, c: &crate::ProcChopping) -> Vec<Vec<String>> {
    c.pieces
        .iter()
        .map(|p| {
            let mut t: Vec<String> = p
                .ops
                .iter()
                .map(|&o| s.ops[o].access.table_name.to_string())
                .collect();
            t.dedup();
            t
        })
        .collect()
}

#[test]
fn seed_example_merges_a_and_b_into_one_rank() {
    // Seed 000 section 4.4.1: T1 reads A before writing B, T2 reads B
    // before writing A, so rank(A) <= rank(B) <= rank(A).
    let sp = specs(
        ABCD,
        &[proc("t1", &["R(A)", "W(B)"]), proc("t2", &["R(B)", "W(A)"])],
    );
    let g: Vec<&ProcSpec> = sp.iter().collect();
    for r in [Refinements::NONE, Refinements::ALL] {
        let a = runtime_pipelining(&g, r).expect("analysis");
        assert_eq!(a.ranks.len(), 1, "one rank for A and B ({r})");
        assert_eq!(a.ranks[0].len(), 2);
        for c in &a.choppings {
            assert_eq!(compact(c), "<1,2>", "{r}");
        }
    }
}

#[test]
fn figure_4_4_example() {
    // Fig. 4.4: T1 = R(A) W(B) R(B) W(C); T2 = W(C) R(B) W(A) R(D), D
    // read-only. A and B share rank 0, C is rank 1; T2's W(C) moves after
    // the rank-0 piece; R(D) depends on R(B) and comes after it.
    let sp = specs(
        ABCD,
        &[
            proc("t1", &["R(A)", "W(B)", "R(B)", "W(C)"]),
            proc("t2", &["W(C)", "R(B)", "W(A)", "R(D)"]),
        ],
    );
    let g: Vec<&ProcSpec> = sp.iter().collect();
    let a = runtime_pipelining(&g, Refinements::NONE).expect("analysis");
    let names: Vec<Vec<String>> = a
        .ranks
        .iter()
        .map(|r| r.iter().map(|&o| a.objects[o].to_string()).collect())
        .collect();
    assert_eq!(names, vec![vec!["a", "b"], vec!["c"]]);
    assert_eq!(compact(&a.choppings[0]), "<1,2,3><4>");
    assert_eq!(compact(&a.choppings[1]), "<2,3><1><4>");
    assert_eq!(a.choppings[1].pieces[2].ranks, None, "R(D) is free");
}

#[test]
fn rollback_microbenchmark_chops_into_eight_and_safe_mode_merges_three() {
    let src = rollback_micro::source();
    let notes = rollback_micro::notes();
    let (_, sp) = specs_from_sources(rollback_micro::DDL, &[src], |_| Some(&notes)).expect("specs");
    let g: Vec<&ProcSpec> = sp.iter().collect();
    for r in [Refinements::NONE, Refinements::ALL] {
        let res = analyze_group(&g, r).expect("analysis");
        let c = &res.rp.choppings[0];
        assert_eq!(compact(c), "<1,2><3,4><5,6><7><8><9><10><11>", "{r}");
        assert!(!is_rollback_safe(&sp[0], c));
        let safe = &res.safe[0];
        assert_eq!(compact(safe), "<1,2,3,4,5,6><7><8><9><10><11>", "{r}");
        assert_eq!(safe.pieces[0].ranks, Some((0, 2)));
        assert!(is_rollback_safe(&sp[0], safe));
    }
}

#[test]
fn safe_mode_is_identity_without_late_rollbacks() {
    let sp = specs(ABCD, &[proc("t", &["R(A)", "W(A)", "R(B)", "W(B)"])]);
    let g: Vec<&ProcSpec> = sp.iter().collect();
    let a = runtime_pipelining(&g, Refinements::NONE).expect("analysis");
    assert_eq!(compact(&a.choppings[0]), "<1,2><3,4>");
    assert_eq!(rollback_safe(&sp[0], &a.choppings[0]), a.choppings[0]);
}

fn tpcc_specs() -> Vec<ProcSpec> {
    let w = tpcc::Tpcc::new(
        1,
        tpcc::Scale::by_name("standard").expect("scale"),
        tpcc::Mix::by_name("standard").expect("mix"),
    )
    .expect("tpcc");
    let app = w.application();
    own_specs(
        &app.ddl,
        app.procedures.iter().map(|p| source!(p)).collect(),
    )
}

/// What the analysis reads of a `brine_cluster::ProcedureDef` (its
/// `source()`, which would be the library build's `ProcSource`, not this
/// test build's).
macro_rules! source {
    ($p:expr) => {
        ProcSource {
            name: $p.name.clone(),
            statements: $p.statements.clone(),
            reorderings: $p
                .reorderings
                .iter()
                .map(|r| (r.name.clone(), r.order.clone()))
                .collect(),
            notes: None,
        }
    };
}
use source;

/// The specs of the procedures' own bodies, with the analysis's notes for
/// TPC-C.
fn own_specs(ddl: &str, procs: Vec<ProcSource>) -> Vec<ProcSpec> {
    workloads::specs_with_notes("tpcc", ddl, &procs)
        .expect("tpcc specs")
        .1
}

#[test]
fn tpcc_new_order_alone_pipelines_order_then_order_line() {
    // Fig. 4.3(b): with the plain algorithm each table new-order writes
    // gets its own rank, and the inserts follow ORDER -> NEW_ORDER ->
    // ORDER_LINE, one piece per rank.
    let sp = tpcc_specs();
    let g = select(&sp, &["new_order"]).expect("group");
    let a = runtime_pipelining(&g, Refinements::NONE).expect("analysis");
    let ranked: Vec<String> = a
        .ranks
        .iter()
        .map(|r| a.objects[r[0]].to_string())
        .collect();
    assert_eq!(
        ranked,
        vec!["stock", "district", "orders", "new_order", "order_line"]
    );
    let c = &a.choppings[0];
    let ranked_pieces: Vec<usize> = c.pieces.iter().filter_map(|p| p.rank()).collect();
    assert_eq!(ranked_pieces, vec![0, 1, 2, 3, 4], "one piece per rank");
    let tables = piece_tables(g[0], c);
    assert_eq!(
        tables,
        vec![
            vec!["item", "customer"],
            vec!["stock"],
            vec!["district"],
            vec!["orders"],
            vec!["new_order"],
            vec!["order_line"],
            vec!["warehouse"],
        ]
    );
    // Classic chopping cannot split it: two instances conflict on every
    // table it writes.
    let classic = classic_chopping(&g, Refinements::NONE);
    assert_eq!(compact(&classic[0]), "<1><2><3,4,5,6,7,8,9><10>");
}

/// Free operations on rows the group also writes (freed by different
/// columns or commuting increments, not by distinct keys) get pieces of
/// their own, so a piece does not hold such a row through other round
/// trips; free operations on rows nobody else writes still share a piece.
#[test]
fn free_operations_on_shared_rows_end_their_piece() {
    let sp = tpcc_specs();
    let g = select(&sp, &["new_order", "payment"]).expect("group");
    let a = runtime_pipelining(
        &g,
        Refinements {
            larger_first: false,
            ..Refinements::ALL
        },
    )
    .expect("analysis");
    assert_eq!(
        piece_tables(g[0], &a.choppings[0]),
        vec![
            vec!["item"],
            // Its c_discount: columns payment's update leaves alone.
            vec!["customer"],
            vec!["stock"],
            vec!["district"],
            // Keys from the district counter: rows of this order only.
            vec!["orders", "new_order", "order_line"],
            // w_tax, beside payment's w_ytd.
            vec!["warehouse"],
        ]
    );
    assert_eq!(
        piece_tables(g[1], &a.choppings[1]),
        vec![
            vec!["customer"],
            vec!["customer"],
            // Each increment with the read of the names beside it, and the
            // district released before the warehouse is taken.
            vec!["district"],
            vec!["warehouse"],
            vec!["history"],
        ]
    );
}

#[test]
fn tpcc_new_order_refinements_free_the_inserts() {
    let sp = tpcc_specs();
    let g = select(&sp, &["new_order"]).expect("group");
    let all = runtime_pipelining(&g, Refinements::ALL).expect("analysis");
    // Keys from d_next_o_id: the inserts never meet another new-order.
    let ranked: Vec<String> = all
        .ranks
        .iter()
        .map(|r| all.objects[r[0]].to_string())
        .collect();
    assert_eq!(
        ranked,
        vec![
            "stock{s_quantity,s_ytd,s_order_cnt,s_remote_cnt}",
            "district{d_next_o_id}"
        ]
    );
    let no_unique = Refinements {
        runtime_uniqueness: false,
        ..Refinements::ALL
    };
    let a = runtime_pipelining(&g, no_unique).expect("analysis");
    assert_eq!(
        a.ranks.len(),
        5,
        "without uniqueness the inserts need ranks"
    );
}

#[test]
fn tpcc_new_order_and_payment_share_a_group_only_at_column_level() {
    let sp = tpcc_specs();
    let g = select(&sp, &["new_order", "payment"]).expect("group");
    let on = analyze_group(&g, Refinements::ALL).expect("analysis");
    assert_eq!(on.cross_cycle, None, "column-level: no C-edge between them");
    assert!(
        on.rp.conflicts.iter().all(|c| c.a.proc == c.b.proc),
        "no conflict across procedures"
    );
    let (what, off) = on.cross_cycle_compare.clone().expect("comparison");
    assert_eq!(what, "column-level off");
    let off = off.expect("table-level: an SC-cycle between new_order and payment");
    assert!(off.contains("district"), "{off}");
    let table = Refinements {
        column_level: false,
        ..Refinements::ALL
    };
    let t = analyze_group(&g, table).expect("analysis");
    assert!(t.cross_cycle.is_some());
    assert!(t.rp.conflicts.iter().any(|c| c.a.proc != c.b.proc
        && g[c.a.proc].ops[c.a.op].access.table_name.as_ref() == "district"));
}

#[test]
fn tpcc_groups_chop_and_classic_has_no_sc_cycles() {
    let sp = tpcc_specs();
    for group in workloads::default_groups("tpcc").expect("groups") {
        let g = select(&sp, &group).expect("group");
        for r in [Refinements::NONE, Refinements::ALL] {
            let res = analyze_group(&g, r).expect("analysis");
            for (s, c) in g.iter().zip(&res.safe) {
                assert!(is_rollback_safe(s, c));
            }
        }
    }
    // Delivery repeats all its statements per district: one piece.
    let d = select(&sp, &["delivery"]).expect("group");
    let a = runtime_pipelining(&d, Refinements::ALL).expect("analysis");
    assert_eq!(a.choppings[0].pieces.len(), 1);
    // Order-status and stock-level only read: no ranks at all.
    let ro = select(&sp, &["order_status", "stock_level"]).expect("group");
    let a = runtime_pipelining(&ro, Refinements::NONE).expect("analysis");
    assert!(a.ranks.is_empty());
    // Classic chopping of the whole application never leaves an SC-cycle.
    let all: Vec<&ProcSpec> = sp.iter().collect();
    for r in [Refinements::NONE, Refinements::ALL] {
        let c = classic_chopping(&all, r);
        assert_eq!(
            find_sc_cycle(&all, &c, &two_of_each(all.len()), r, false),
            None
        );
        // new_order's rollback (the item check) stays in its first piece.
        assert!(is_rollback_safe(all[0], &c[0]));
    }
}

#[test]
fn commutative_increments_need_no_rank() {
    let ddl = "CREATE TABLE w (id INT PRIMARY KEY, ytd INT NOT NULL, name VARCHAR(10) NOT NULL);
               CREATE TABLE h (id INT PRIMARY KEY, v INT NOT NULL);";
    let p = ProcSource {
        name: "pay".into(),
        statements: vec![
            (
                "bump".into(),
                "UPDATE w SET ytd = ytd + $x WHERE id = $k".into(),
            ),
            ("name".into(), "SELECT name FROM w WHERE id = $k".into()),
            (
                "hist".into(),
                "INSERT INTO h (id, v) VALUES ($i, $v)".into(),
            ),
        ],
        reorderings: Vec::new(),
        notes: None,
    };
    let sp = specs(ddl, &[p]);
    let g: Vec<&ProcSpec> = sp.iter().collect();
    let all = runtime_pipelining(&g, Refinements::ALL).expect("analysis");
    assert_eq!(all.op_rank(OpRef { proc: 0, op: 0 }), None, "bump is free");
    assert_eq!(all.ranks.len(), 1, "only h is ranked");
    let no_comm = Refinements {
        commutative: false,
        ..Refinements::ALL
    };
    let a = runtime_pipelining(&g, no_comm).expect("analysis");
    assert_eq!(a.ranks.len(), 2);
    assert!(a.op_rank(OpRef { proc: 0, op: 0 }).is_some());
}

#[test]
fn larger_first_orders_free_ranks_by_size() {
    // t writes C once and D twice, independently: larger-first ranks D
    // (two statements) before C.
    let sp = specs(ABCD, &[proc("t", &["W(C)", "W(D)", "W(D)"])]);
    let g: Vec<&ProcSpec> = sp.iter().collect();
    let on = runtime_pipelining(&g, Refinements::ALL).expect("analysis");
    assert_eq!(compact(&on.choppings[0]), "<2,3><1>");
    let off = runtime_pipelining(
        &g,
        Refinements {
            larger_first: false,
            ..Refinements::ALL
        },
    )
    .expect("analysis");
    assert_eq!(compact(&off.choppings[0]), "<1><2,3>");
}

#[test]
fn bad_notes_and_groups_are_errors_that_name_the_culprit() {
    let p = proc("t", &["R(A)", "W(B)"]);
    let notes = ProcNotes::new().rollback("nope");
    let e = specs_from_sources(ABCD, std::slice::from_ref(&p), |_| Some(&notes)).unwrap_err();
    assert!(matches!(e, AnalysisError::Notes { .. }), "{e}");
    assert!(e.to_string().contains("nope"));
    let notes = ProcNotes::new().order(&["0_R(A)"]);
    let e = specs_from_sources(ABCD, std::slice::from_ref(&p), |_| Some(&notes)).unwrap_err();
    assert!(e.to_string().contains("leaves out"), "{e}");
    let notes = ProcNotes::new().unique_key("1_W(B)", "0_R(A)");
    let e = specs_from_sources(ABCD, std::slice::from_ref(&p), |_| Some(&notes)).unwrap_err();
    assert!(e.to_string().contains("blind increment"), "{e}");
    let sp = specs(ABCD, &[p]);
    let e = select(&sp, &["t", "x"]).unwrap_err();
    assert!(matches!(e, AnalysisError::UnknownProcedure { .. }), "{e}");
    let e = select(&sp, &["t", "t"]).unwrap_err();
    assert!(matches!(e, AnalysisError::DuplicateProcedure(_)), "{e}");
}

#[test]
fn independence_notes_unlock_finer_pieces() {
    // W(B) does not use R(A): declaring it lets B rank before A when
    // another procedure needs that.
    let procs = [proc("t1", &["R(A)", "W(B)"]), proc("t2", &["R(B)", "W(A)"])];
    let notes = ProcNotes::new().independent("1_W(B)", "0_R(A)");
    let (_, sp) =
        specs_from_sources(ABCD, &procs, |n| (n == "t1").then_some(&notes)).expect("specs");
    let g: Vec<&ProcSpec> = sp.iter().collect();
    let a = runtime_pipelining(&g, Refinements::NONE).expect("analysis");
    assert_eq!(a.ranks.len(), 2);
    assert_eq!(compact(&a.choppings[0]), "<2><1>");
    assert_eq!(compact(&a.choppings[1]), "<1><2>");
}

/// Stock-level and new-order in one group: the ranks put new-order's order
/// lines before a statement its body runs earlier, so that chopping needs
/// the code reordered. The same group chopped in body order (every
/// statement depending on the ones before it) is a valid chopping whose
/// pieces run as the bodies are written.
#[test]
fn a_group_whose_ranks_contradict_a_body_is_chopped_in_body_order() {
    let sp = tpcc_specs();
    let g = select(&sp, &["stock_level", "new_order"]).expect("group");
    let r = Refinements {
        larger_first: false,
        ..Refinements::ALL
    };
    let a = analyze_group(&g, r).expect("analysis");
    assert!(
        !a.rp.choppings.iter().all(|c| c.runs_in_body_order()),
        "expected a chopping that needs reordering: {:?}",
        a.rp.choppings
    );

    let ordered: Vec<ProcSpec> = g.iter().map(|s| s.in_body_order()).collect();
    let refs: Vec<&ProcSpec> = ordered.iter().collect();
    let b = analyze_group(&refs, r).expect("analysis in body order");
    for (p, (c, safe)) in b.rp.choppings.iter().zip(&b.safe).enumerate() {
        assert!(c.runs_in_body_order(), "{c:?}");
        assert!(safe.runs_in_body_order(), "{safe:?}");
        let op_rank = |i: usize| b.rp.op_rank(OpRef { proc: p, op: i });
        crate::check_chopping(refs[p], c, op_rank, false).expect("a valid chopping");
    }
    // New-order is still cut: body order does not make it one piece.
    assert!(
        b.rp.choppings[1].pieces.len() > 1,
        "{:?}",
        b.rp.choppings[1]
    );
}

/// Seed 002 section 6.1, larger pieces first: `t` writes A, then B in a
/// loop; its reordering writes B first. Both chop into two pieces in body
/// order; the looped piece is the larger, so the reordering is chosen.
/// Without the loop the two tie and the procedure's own body stays.
#[test]
fn the_order_that_runs_the_larger_piece_first_is_chosen() {
    let mut src = proc("t", &["W(A)", "W(B)"]);
    src.reorderings = vec![("b-first".into(), vec!["1_W(B)".into(), "0_W(A)".into()])];
    let catalog = brine_sql::parse_schema(ABCD).expect("schema");
    let r = Refinements {
        larger_first: false,
        ..Refinements::ALL
    };
    for (looped, expect) in [(true, 1), (false, 0)] {
        let notes = if looped {
            ProcNotes::new().looped(&["1_W(B)"])
        } else {
            ProcNotes::new()
        };
        let cands = vec![ProcSpec::candidates(&catalog, &src, &notes).expect("candidates")];
        assert_eq!(cands[0].len(), 2);
        let choice = choose_orderings(&cands, &[], r)
            .expect("analysis")
            .expect("both orders run in body order");
        assert_eq!(choice.picks, vec![expect], "looped: {looped}");
        let chosen = &cands[0][expect];
        let c = &choice.result.rp.choppings[0];
        assert!(c.runs_in_body_order(), "{c:?}");
        let first: Vec<&str> = c.pieces[0]
            .ops
            .iter()
            .map(|&o| chosen.ops[o].name.as_str())
            .collect();
        assert_eq!(first, [if looped { "1_W(B)" } else { "0_W(A)" }]);
    }
}

/// A reordering is a program of its own: its notes keep the loops and
/// drop independences whose read now runs later; an order that leaves out
/// a statement is refused, naming the reordering.
#[test]
fn a_reordering_must_name_every_statement_once() {
    let catalog = brine_sql::parse_schema(ABCD).expect("schema");
    let mut src = proc("t", &["R(A)", "W(B)"]);
    let notes = ProcNotes::new().independent("1_W(B)", "0_R(A)");
    src.reorderings = vec![("b-first".into(), vec!["1_W(B)".into(), "0_R(A)".into()])];
    let cands = ProcSpec::candidates(&catalog, &src, &notes).expect("candidates");
    assert_eq!(cands[1].ops[0].name, "1_W(B)");
    assert!(cands[1].deps_of(1).is_empty(), "{:?}", cands[1].deps_of(1));

    src.reorderings = vec![("short".into(), vec!["1_W(B)".into()])];
    let err = ProcSpec::candidates(&catalog, &src, &notes)
        .expect_err("an order without 0_R(A)")
        .to_string();
    assert!(
        err.contains("reordering `short`") && err.contains("0_R(A)"),
        "{err}"
    );
}

/// Stock-level and new-order as written have no chopping in body order
/// (`a_group_whose_ranks_contradict_a_body_is_chopped_in_body_order`):
/// with nothing else offered
/// there is no choice, and the runtime falls back to chopping in body
/// order.
#[test]
fn no_choice_when_no_order_runs_its_chopping_in_order() {
    let sp = tpcc_specs();
    let g = select(&sp, &["stock_level", "new_order"]).expect("group");
    let cands: Vec<Vec<ProcSpec>> = g.iter().map(|s| vec![(*s).clone()]).collect();
    let r = Refinements {
        larger_first: false,
        ..Refinements::ALL
    };
    assert!(choose_orderings(&cands, &[], r)
        .expect("analysis")
        .is_none());
}

#[test]
fn too_many_combinations_of_orders_is_an_error() {
    let sp = tpcc_specs();
    let two = |s: &ProcSpec| vec![s.clone(), s.clone()];
    let cands: Vec<Vec<ProcSpec>> = (0..9).map(|i| two(&sp[i % sp.len()])).collect();
    let err = choose_orderings(&cands, &[], Refinements::ALL)
        .expect_err("512 combinations")
        .to_string();
    assert!(err.contains("more than 256"), "{err}");
}

/// TPC-C's new-order offers its other statement order. Clause 2's body
/// takes the district counter (rank 0) before the stock loop (rank 1), so
/// a new-order that depends on another at the counter waits for that
/// one's whole stock loop; the analysis chooses the reordering that runs
/// the stock loop first, as the sources' tool reorders the code. The tuned
/// body already runs it first and stays.
#[test]
fn tpcc_new_order_runs_the_stock_loop_first() {
    const ALL_FIVE: [&str; 5] = [
        "new_order",
        "payment",
        "order_status",
        "delivery",
        "stock_level",
    ];
    use tpcc::procedures::StatementOrder;
    for (order, group, expect) in [
        (
            StatementOrder::Spec,
            &["new_order", "payment"][..],
            Some("hot-last"),
        ),
        (StatementOrder::HotLast, &["new_order", "payment"][..], None),
        // Payment outside the group writes the warehouse, then the
        // district: the reordering, which takes the district before it
        // reads the warehouse, would deadlock with it.
        (StatementOrder::Spec, &["new_order"][..], None),
        (StatementOrder::HotLast, &["new_order"][..], None),
        // All five in one group: the tuned order merges the stock, the
        // district and the orders into one rank, clause 2's keeps the
        // counter a rank of its own before the stock; larger pieces first
        // prefers the stock loop early all the same.
        (StatementOrder::Spec, &ALL_FIVE[..], Some("hot-last")),
        (StatementOrder::HotLast, &ALL_FIVE[..], None),
    ] {
        let w = tpcc::Tpcc::new(
            1,
            tpcc::Scale::by_name("standard").expect("scale"),
            tpcc::Mix::by_name("standard").expect("mix"),
        )
        .expect("tpcc")
        .with_order(order);
        let app = w.application();
        let catalog = brine_sql::parse_schema(&app.ddl).expect("schema");
        let mut names = Vec::new();
        let mut cands = Vec::new();
        for p in app
            .procedures
            .iter()
            .filter(|p| group.contains(&p.name.as_str()))
        {
            let src = source!(p);
            let notes = workloads::notes("tpcc", &p.name).unwrap_or_default();
            cands.push(ProcSpec::candidates(&catalog, &src, &notes).expect("candidates"));
            names.push(src.reorderings.clone());
        }
        let all = own_specs(
            &app.ddl,
            app.procedures.iter().map(|p| source!(p)).collect(),
        );
        let outside: Vec<&ProcSpec> = all
            .iter()
            .filter(|s| !group.contains(&s.name.as_str()))
            .collect();
        let r = Refinements {
            larger_first: false,
            ..Refinements::ALL
        };
        let choice = choose_orderings(&cands, &outside, r)
            .expect("analysis")
            .expect("a choice");
        let picked = choice.picks[0]
            .checked_sub(1)
            .map(|i| names[0][i].0.as_str());
        assert_eq!(picked, expect, "{} {group:?}", order.name());
        if let Some(payment) = choice.picks.get(1) {
            assert_eq!(*payment, 0, "payment offers no reordering");
        }
        let new_order = &cands[0][choice.picks[0]];
        let chopping = &choice.result.rp.choppings[0];
        let piece_of = |name: &str| {
            let op = new_order
                .ops
                .iter()
                .position(|o| o.name == name)
                .expect("statement");
            chopping.locate(op).expect("placed")
        };
        assert_eq!(
            piece_of("stock") < piece_of("bump_district"),
            order == StatementOrder::HotLast || expect.is_some(),
            "{chopping:?}"
        );
    }
}

/// Between groups nexus locks are held as ACID locks are: a reordering
/// that swaps two statements whose tables a procedure outside the group
/// writes and touches could deadlock with it, so it is not admissible.
#[test]
fn a_reordering_keeps_its_lock_order_towards_other_groups() {
    let catalog = brine_sql::parse_schema(ABCD).expect("schema");
    let mut src = proc("t", &["W(A)", "W(B)"]);
    src.reorderings = vec![("b-first".into(), vec!["1_W(B)".into(), "0_W(A)".into()])];
    let notes = ProcNotes::new().looped(&["1_W(B)"]);
    let cands = vec![ProcSpec::candidates(&catalog, &src, &notes).expect("candidates")];
    let (_, others) = specs_from_sources(
        ABCD,
        &[
            proc("writes_a_reads_b", &["W(A)", "R(B)"]),
            proc("reads_both", &["R(A)", "R(B)"]),
            proc("elsewhere", &["W(C)", "W(D)"]),
        ],
        |_| None,
    )
    .expect("specs");
    let r = Refinements {
        larger_first: false,
        ..Refinements::ALL
    };
    for (outside, expect) in [(0, 0), (1, 1), (2, 1)] {
        assert_eq!(
            crate::order::keeps_lock_order(&cands[0][0], &cands[0][1], &[&others[outside]]),
            expect == 1,
            "{}",
            others[outside].name
        );
        let choice = choose_orderings(&cands, &[&others[outside]], r)
            .expect("analysis")
            .expect("a choice");
        assert_eq!(choice.picks, vec![expect], "{}", others[outside].name);
    }
}
