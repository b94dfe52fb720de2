//! Property tests: for random procedure sets and any mix of refinements,
//! every chopping satisfies GR1 and GR2, respects every dependency the
//! declarations imply (recomputed here from the generated operations, not
//! taken from the spec), puts every remaining C-edge inside one rank; the
//! safe mode is rollback-safe; classic chopping leaves no SC-cycle.

use std::collections::BTreeSet;
use std::sync::Arc;

use brine_core::TableId;
use brine_sql::StatementKind;
use proptest::prelude::*;

use crate::classic::{classic_chopping, find_sc_cycle, two_of_each};
use crate::conflict::{judge, Verdict};
use crate::safe::is_rollback_safe;
use crate::spec::Counter;
use crate::{analyze_group, check_chopping, Access, Op, OpRef, ProcSpec, Refinements};

const TABLES: u32 = 4;
const COLUMNS: usize = 4;

#[derive(Clone, Debug)]
struct GenOp {
    table: u32,
    kind: u8,
    cols: BTreeSet<usize>,
    rollback: bool,
    unique: bool,
}

#[derive(Clone, Debug)]
struct GenProc {
    ops: Vec<GenOp>,
    /// `(j, i)` candidates: op j independent of read i (kept if valid).
    independent: Vec<(usize, usize)>,
    /// A loop over `[a, a + len)` (kept if in range).
    looped: Option<(usize, usize)>,
}

fn gen_op() -> impl Strategy<Value = GenOp> {
    (
        0..TABLES,
        0u8..5,
        proptest::collection::btree_set(1..COLUMNS, 1..3),
        proptest::bool::weighted(0.15),
        proptest::bool::weighted(0.3),
    )
        .prop_map(|(table, kind, cols, rollback, unique)| GenOp {
            table,
            kind,
            cols,
            rollback,
            unique,
        })
}

fn gen_proc() -> impl Strategy<Value = GenProc> {
    (
        proptest::collection::vec(gen_op(), 1..8),
        proptest::collection::vec((0usize..8, 0usize..8), 0..3),
        proptest::option::weighted(0.3, (0usize..8, 1usize..4)),
    )
        .prop_map(|(ops, independent, looped)| GenProc {
            ops,
            independent,
            looped,
        })
}

fn names() -> Arc<[String]> {
    (0..COLUMNS).map(|c| format!("c{c}")).collect()
}

/// kind 0: SELECT cols; 1: UPDATE SET cols = $; 2: blind increment of
/// cols; 3: INSERT; 4: DELETE. Column 0 is the key.
fn to_op(i: usize, g: &GenOp) -> Op {
    let all: BTreeSet<usize> = (0..COLUMNS).collect();
    let key = BTreeSet::from([0]);
    let (kind, read, written, blind) = match g.kind {
        0 => (
            StatementKind::Select,
            g.cols.union(&key).copied().collect(),
            BTreeSet::new(),
            false,
        ),
        1 => (StatementKind::Update, key.clone(), g.cols.clone(), false),
        2 => (
            StatementKind::Update,
            g.cols.union(&key).copied().collect(),
            g.cols.clone(),
            true,
        ),
        3 => (StatementKind::Insert, key.clone(), all.clone(), false),
        _ => (StatementKind::Delete, key.clone(), all.clone(), false),
    };
    Op {
        name: format!("s{i}"),
        access: Access {
            table: TableId(g.table),
            table_name: format!("t{}", g.table).into(),
            column_names: names(),
            kind,
            read,
            written,
            blind_increment: blind,
            point: true,
        },
        selection: Default::default(),
        param_args: Vec::new(),
        rollback: g.rollback,
        unique_key: (g.unique && kind != StatementKind::Select).then_some(Counter {
            table: TableId(TABLES),
            column: 1,
        }),
    }
}

/// The spec, and the dependencies the declarations imply, recomputed
/// independently: reads steer every later op unless declared independent;
/// same-table overlapping ops keep their order; loop bodies both ways.
fn build(p: &GenProc, name: &str) -> (ProcSpec, Vec<(usize, usize)>, Vec<Vec<usize>>) {
    let ops: Vec<Op> = p.ops.iter().enumerate().map(|(i, g)| to_op(i, g)).collect();
    let n = ops.len();
    let independent: Vec<(usize, usize)> = p
        .independent
        .iter()
        .copied()
        .filter(|&(j, i)| j < n && i < j && ops[i].access.is_read())
        .collect();
    let loops: Vec<Vec<usize>> = p
        .looped
        .iter()
        .filter(|(a, _)| *a < n)
        .map(|&(a, len)| (a..(a + len).min(n)).collect())
        .collect();
    let mut expected = Vec::new();
    for j in 0..n {
        for i in 0..j {
            let (a, b) = (&ops[i].access, &ops[j].access);
            let same_data = a.table == b.table
                && (a
                    .written
                    .iter()
                    .any(|c| b.read.contains(c) || b.written.contains(c))
                    || b.written.iter().any(|c| a.read.contains(c)));
            if (a.is_read() && !independent.contains(&(j, i))) || same_data {
                expected.push((i, j));
            }
        }
    }
    let spec = ProcSpec::new(name, ops, &independent, loops.clone()).expect("spec");
    (spec, expected, loops)
}

fn refinements() -> impl Strategy<Value = Refinements> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(a, b, c, d)| {
        Refinements {
            column_level: a,
            commutative: b,
            runtime_uniqueness: c,
            larger_first: d,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn choppings_satisfy_gr1_gr2_and_dependencies(
        procs in proptest::collection::vec(gen_proc(), 1..4),
        r in refinements(),
    ) {
        let built: Vec<_> = procs.iter().enumerate().map(|(k, p)| build(p, &format!("p{k}"))).collect();
        let specs: Vec<&ProcSpec> = built.iter().map(|(s, _, _)| s).collect();
        let res = analyze_group(&specs, r).expect("analysis succeeds");
        let a = &res.rp;
        for (p, (s, expected, loops)) in built.iter().enumerate() {
            let c = &a.choppings[p];
            let rank = |i: usize| a.op_rank(OpRef { proc: p, op: i });
            prop_assert_eq!(check_chopping(s, c, rank, false), Ok(()));
            // GR1 and GR2 directly: one rank per piece, increasing.
            let mut last = None;
            for piece in &c.pieces {
                let rs: BTreeSet<usize> = piece.ops.iter().filter_map(|&o| rank(o)).collect();
                prop_assert!(rs.len() <= 1, "GR1: {:?}", rs);
                if let Some(&r0) = rs.first() {
                    if let Some(l) = last {
                        prop_assert!(l < r0, "GR2");
                    }
                    last = Some(r0);
                }
            }
            // Every implied dependency runs forwards.
            for &(i, j) in expected {
                let (Some(x), Some(y)) = (c.locate(i), c.locate(j)) else {
                    return Err(TestCaseError::fail("op missing"));
                };
                let same_loop = loops.iter().any(|l| l.contains(&i) && l.contains(&j));
                prop_assert!(x < y || (same_loop && x.0 == y.0), "dep {}->{} in {:?}", i, j, c);
            }
            // Loop bodies share a piece.
            for l in loops {
                let pieces: BTreeSet<usize> = l.iter().filter_map(|&o| c.locate(o).map(|x| x.0)).collect();
                prop_assert_eq!(pieces.len(), 1);
            }
            // Safe mode: rollbacks in the first piece, GR2 kept.
            let safe = &res.safe[p];
            prop_assert!(is_rollback_safe(s, safe));
            prop_assert_eq!(check_chopping(s, safe, rank, true), Ok(()));
        }
        // Every conflict between any two ops of the group is inside a rank.
        for (p, sp) in specs.iter().enumerate() {
            for (q, sq) in specs.iter().enumerate() {
                for (i, oi) in sp.ops.iter().enumerate() {
                    for (j, oj) in sq.ops.iter().enumerate() {
                        if let Verdict::Conflict { .. } = judge(oi, oj, r) {
                            let ri = a.op_rank(OpRef { proc: p, op: i });
                            prop_assert!(ri.is_some());
                            prop_assert_eq!(ri, a.op_rank(OpRef { proc: q, op: j }));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn classic_chopping_is_rollback_safe_and_sc_cycle_free(
        procs in proptest::collection::vec(gen_proc(), 1..4),
        r in refinements(),
    ) {
        let built: Vec<_> = procs.iter().enumerate().map(|(k, p)| build(p, &format!("p{k}"))).collect();
        let specs: Vec<&ProcSpec> = built.iter().map(|(s, _, _)| s).collect();
        let c = classic_chopping(&specs, r);
        for (s, ch) in specs.iter().zip(&c) {
            prop_assert!(is_rollback_safe(s, ch));
            // Contiguous pieces in program order.
            let flat: Vec<usize> = ch.pieces.iter().flat_map(|p| p.ops.iter().copied()).collect();
            prop_assert_eq!(flat, (0..s.ops.len()).collect::<Vec<_>>());
        }
        prop_assert_eq!(find_sc_cycle(&specs, &c, &two_of_each(specs.len()), r, false), None);
    }
}
