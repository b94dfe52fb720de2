use super::pieces::rolled_back;
use super::prelude::*;
use super::*;

#[test]
fn a_grouping_parses_prints_and_finds_groups() -> Result<()> {
    let g = Grouping::parse("orders:2pl=new_order, payment ; slow:chop=delivery")?;
    assert_eq!(
        g.to_string(),
        "orders:2pl=new_order,payment;slow:chop=delivery"
    );
    assert_eq!(g.group_of("payment"), Some((1, Mechanism::TwoPl)));
    assert_eq!(g.group_of("delivery"), Some((2, Mechanism::Chop)));
    assert_eq!(g.group_of("stock_level"), None);
    g.validate(["new_order", "payment", "delivery", "stock_level"])?;
    let g = Grouping::parse("orders: rp/as-written =new_order;rest:rp=delivery")?;
    assert!(g.groups[0].as_written && !g.groups[1].as_written);
    assert_eq!(
        g.to_string(),
        "orders:rp/as-written=new_order;rest:rp=delivery"
    );
    for bad in [
        "orders:2pl/as-written=new_order",
        "orders:rp/fast=new_order",
    ] {
        let e = Grouping::parse(bad).expect_err(bad).to_string();
        assert!(e.contains("only rp/as-written"), "{bad}: {e}");
    }
    Ok(())
}

#[test]
fn only_the_application_s_rollbacks_count_toward_safe_mode() {
    assert!(rolled_back::<()>(&Err(Error::UserAbort("no".into()))));
    assert!(!rolled_back::<()>(&Err(Error::Aborted(
        AbortCause::Cascade
    ))));
    assert!(!rolled_back::<()>(&Err(Error::Aborted(
        AbortCause::Deadlock
    ))));
    assert!(!rolled_back(&Ok(())));
}

/// The chain bound counts transactions still undecided: once the
/// ones at the bottom of a chain committed, the transactions above
/// them may pipeline again.
#[test]
fn a_chain_is_as_deep_as_its_undecided_transactions() {
    let chain: Vec<Arc<Progress>> = (0..5).map(|_| Arc::new(Progress::default())).collect();
    for w in chain.windows(2) {
        w[1].below.lock().push(w[0].clone());
    }
    assert_eq!(chain[3].uncommitted_depth(MAX_CHAIN), 4);
    assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), MAX_CHAIN, "capped");
    assert_eq!(chain[4].uncommitted_depth(8), 5);
    chain[0].decide(true);
    chain[1].decide(true);
    assert_eq!(chain[3].uncommitted_depth(MAX_CHAIN), 2);
    assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), 3);
    assert!(
        chain[1].below.lock().is_empty(),
        "an ended transaction pins nothing"
    );
    chain[4].decide(false);
    assert_eq!(chain[4].uncommitted_depth(MAX_CHAIN), 0);
}

/// Against the longest path counted the plain way, on random
/// dependency graphs with random decided transactions, for every cap.
#[test]
fn the_chain_walk_agrees_with_the_longest_path_on_random_graphs() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for _ in 0..200 {
        let n = rng.gen_range(1..30);
        let txns: Vec<Arc<Progress>> = (0..n).map(|_| Arc::new(Progress::default())).collect();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in 0..n {
            for j in 0..i {
                if rng.gen_bool(0.3) {
                    preds[i].push(j);
                    txns[i].below.lock().push(txns[j].clone());
                }
            }
        }
        let decided: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.2)).collect();
        for (t, d) in txns.iter().zip(&decided) {
            if *d {
                t.decide(true);
            }
        }
        // A decided transaction heads nothing and forgot what it
        // depended on; the others head 1 + their longest undecided
        // dependency's chain.
        let mut longest = vec![0u32; n];
        for i in 0..n {
            if !decided[i] {
                longest[i] = 1 + preds[i].iter().map(|&j| longest[j]).max().unwrap_or(0);
            }
        }
        for i in 0..n {
            for cap in [1, 2, 3, MAX_CHAIN, 5, 64] {
                assert_eq!(
                    txns[i].uncommitted_depth(cap),
                    longest[i].min(cap),
                    "transaction {i} of {n}, cap {cap}"
                );
            }
        }
    }
}

/// On a hot row every transaction depends on every one before it that
/// is still undecided: the depth is the longest chain, whichever way
/// it runs through the others, and a decided link in the middle of
/// every path shortens it.
#[test]
fn a_chain_through_many_dependencies_counts_its_longest_path() {
    let txns: Vec<Arc<Progress>> = (0..40).map(|_| Arc::new(Progress::default())).collect();
    for (i, t) in txns.iter().enumerate() {
        t.below.lock().extend(txns[..i].iter().cloned());
    }
    assert_eq!(txns[39].uncommitted_depth(64), 40);
    assert_eq!(txns[39].uncommitted_depth(MAX_CHAIN), MAX_CHAIN);
    assert_eq!(txns[2].uncommitted_depth(MAX_CHAIN), 3);
    // Only the first three undecided: a chain of three below any later one.
    for t in &txns[3..39] {
        t.decide(true);
    }
    assert_eq!(txns[39].uncommitted_depth(MAX_CHAIN), MAX_CHAIN);
    assert_eq!(txns[39].uncommitted_depth(64), 4);
    txns[1].decide(true);
    assert_eq!(txns[39].uncommitted_depth(64), 3, "39 -> 2 -> 0");
}

/// A piece that checks a row and then updates it takes the write lock
/// at the check; a read of a row no later statement of its piece
/// writes keeps its read lock.
#[test]
fn reads_of_rows_their_piece_then_writes_take_write_locks() -> Result<()> {
    use brine_analysis::workloads::rollback_micro as micro;
    let def = |statements: &[(String, String)]| {
        statements
            .iter()
            .fold(crate::ProcedureDef::new(micro::PROC), |d, (n, sql)| {
                d.statement(n.clone(), sql.clone())
            })
    };
    let source = micro::source();
    let grouping = Grouping::parse("g:rp=rollback11")?;
    let plan = |defs: &[crate::ProcedureDef]| {
        plan_pieces(
            &grouping,
            micro::APP,
            micro::DDL,
            defs,
            SafeModeConfig::default(),
        )
    };
    let pieces = plan(&[def(&source.statements)])?;
    let p = &pieces[micro::PROC];
    let first = |p: &ProcPieces, statement: &str, safe| -> Result<bool> {
        Ok(p.piece_of(statement, safe)?.write_first)
    };
    for safe in [false, true] {
        for t in ["a", "b", "c"] {
            assert!(first(p, &format!("check_{t}"), safe)?, "{t} {safe}");
            assert!(!first(p, &format!("update_{t}"), safe)?, "{t} {safe}");
        }
        assert!(!first(p, "private_1", safe)?);
    }
    // The check on C reads another key than the update writes: no.
    let mut other = source.statements.clone();
    other[5].1 = "UPDATE c SET val = $v WHERE id = $v".into();
    let pieces = plan(&[def(&other)])?;
    assert!(!first(&pieces[micro::PROC], "check_c", false)?);
    assert!(first(&pieces[micro::PROC], "check_b", false)?);
    Ok(())
}

#[test]
fn bad_groupings_are_refused_with_the_reason() {
    for (spec, needle) in [
        ("", "at least one group"),
        ("orders=new_order", "expected name:mechanism"),
        ("orders:2pl=", "expected name:mechanism"),
        ("orders:occ=new_order", "unknown group mechanism `occ`"),
    ] {
        let e = Grouping::parse(spec).expect_err(spec).to_string();
        assert!(e.contains(needle), "{spec}: {e}");
    }
    let g = Grouping::parse("a:2pl=x;b:2pl=x").expect("parses");
    let e = g.validate(["x"]).expect_err("twice").to_string();
    assert!(e.contains("in two groups"), "{e}");
    let g = Grouping::parse("a:2pl=nope").expect("parses");
    let e = g.validate(["x", "y"]).expect_err("unknown").to_string();
    assert!(e.contains("does not have (it has: x, y)"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn safe_mode_goes_on_above_the_threshold_and_probes_back_after_the_hold() {
    let m = SafeMode::new(SafeModeConfig {
        threshold_percent: 7.0,
        window: 100,
        hold: Duration::from_secs(1),
    });
    // 7 rollbacks in 100: not above the threshold.
    let switched: Vec<bool> = (0..100).map(|i| m.record(i < 7)).collect();
    assert!(!switched.contains(&true) && !m.is_safe());
    // 8 in 100: safe, once.
    let switched: Vec<bool> = (0..100).map(|i| m.record(i < 8)).collect();
    assert_eq!(switched.iter().filter(|s| **s).count(), 1);
    assert!(m.is_safe());
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(m.is_safe());
    tokio::time::advance(Duration::from_millis(2)).await;
    assert!(!m.is_safe(), "probes optimism again after the hold");
}

#[tokio::test]
async fn the_board_wakes_waiters_when_a_transaction_released() {
    let board = Arc::new(NexusBoard::default());
    let t = TxnId { ts: 1, id: 7 };
    board.register(t);
    let me = TxnId { ts: 3, id: 9 };
    board.register(me);
    let b = board.clone();
    let waiter = tokio::spawn(async move { b.wait_in_order(me, t, || panic!("no cycle")).await });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "the wait goes on until t released");
    board.released(t);
    waiter.await.expect("woken");
    // Unknown (already released) transactions do not block.
    board
        .wait_in_order(me, TxnId { ts: 2, id: 8 }, || panic!("no cycle"))
        .await;
    board.released(me);
    assert!(board.is_empty());
}

/// A cycle of release waits is a bug (no execution has one); should one
/// form, it is reported, and the rule still holds: neither transaction
/// releases before the other did.
#[tokio::test]
async fn a_cycle_of_release_waits_is_reported_and_the_waits_go_on() {
    let board = Arc::new(NexusBoard::default());
    let (a, b) = (TxnId { ts: 1, id: 1 }, TxnId { ts: 2, id: 2 });
    board.register(a);
    board.register(b);
    let (found, mut reported) = tokio::sync::mpsc::unbounded_channel();
    // Each releases once its wait ended, as `release_in_order` does.
    let release_after = |me: TxnId, on: TxnId| {
        let (board, found) = (board.clone(), found.clone());
        tokio::spawn(async move {
            board
                .wait_in_order(me, on, move || found.send(me).expect("test alive"))
                .await;
            board.released(me);
        })
    };
    let (wa, wb) = (release_after(a, b), release_after(b, a));
    let first = reported.recv().await.expect("the cycle is reported");
    assert!(first == a || first == b);
    assert!(!wa.is_finished() && !wb.is_finished(), "the waits go on");
    assert_eq!(board.len(), 2, "both keep their nexus locks");
    // Whatever ends the cycle (here: one of them let go from outside),
    // the other releases after it.
    board.released(a);
    wb.await.expect("b released after a");
    wa.await.expect("a's wait ended");
    assert!(board.is_empty());
}

/// An `sc` piece that rolls back takes its dependencies with it: those
/// noted before it opened stay, its own go (from the chain walk too).
#[test]
fn a_rolled_back_piece_s_dependencies_are_forgotten() {
    let board = Arc::new(NexusBoard::default());
    let (kept, dropped) = (TxnId { ts: 1, id: 1 }, TxnId { ts: 2, id: 2 });
    board.register(kept);
    board.register(dropped);
    let me = TxnId { ts: 3, id: 3 };
    let mut st = CallasState {
        mechanism: Mechanism::Sc,
        after: SmallVec::new(),
        deps: SmallVec::new(),
        seq: 0,
        pieces: None,
        safe: false,
        piece: None,
        piece_parts: SmallVec::new(),
        piece_ended: false,
        rank_hold: None,
        progress: board.register(me),
        sc: None,
        board: board.clone(),
    };
    st.note_after(&[kept]);
    let mark = st.after.len();
    st.note_after(&[dropped, kept]);
    assert_eq!(st.after.as_slice(), [kept, dropped]);
    assert_eq!(st.progress.below.lock().len(), 2);
    st.forget_after(mark);
    assert_eq!(st.after.as_slice(), [kept]);
    assert_eq!(st.deps.len(), 1);
    let below = st.progress.below.lock();
    assert!(below.len() == 1 && Arc::ptr_eq(&below[0], &board.get(kept).expect("kept")));
}

/// A counted cycle of release waits fails the protocol's rule check
/// (`brine bench --check` runs it), naming the count.
#[test]
fn a_counted_release_cycle_breaks_the_rules_check() {
    let callas = Callas::new(Grouping::parse("g:2pl=p").expect("grouping"));
    let mut stats = crate::StatsSnapshot::default();
    stats.protocol.insert("release_cycles", 0);
    assert!(callas.rules_kept(&stats).is_ok());
    stats.protocol.insert("release_cycles", 2);
    let e = callas.rules_kept(&stats).expect_err("broken").to_string();
    assert!(e.contains("2 cycle(s) of nexus release waits"), "{e}");
}

/// A transaction of node `node` (its coordinator's process).
fn homed(node: u64, n: u64) -> TxnId {
    TxnId {
        ts: n,
        id: (node << crate::cluster::NODE_TXN_SHIFT) + n,
    }
}

/// The boards of two processes, nodes 0 and 1, each reaching the other
/// as the home of its transactions.
fn two_processes() -> (Arc<NexusBoard>, Arc<NexusBoard>) {
    let boards: Arc<Mutex<Vec<std::sync::Weak<NexusBoard>>>> = Arc::default();
    let homes = |boards: Arc<Mutex<Vec<std::sync::Weak<NexusBoard>>>>| -> Homes {
        Arc::new(move |node: NodeId, bytes: Vec<u8>| {
            let home = boards.lock().get(node.0 as usize).and_then(|b| b.upgrade());
            Box::pin(async move {
                let home = home.ok_or_else(|| Error::Transport("no such node".into()))?;
                home.serve(&bytes).await
            })
        })
    };
    let a = NexusBoard::multi_process(NodeId(0), homes(boards.clone()));
    let b = NexusBoard::multi_process(NodeId(1), homes(boards.clone()));
    *boards.lock() = vec![Arc::downgrade(&a), Arc::downgrade(&b)];
    (a, b)
}

/// Across processes (docs/callas.md, "Across processes"): a dependency
/// homed in another process is mirrored, and the mirror shows its ranks,
/// its outcome and its release as its home's board does, so rank waits,
/// commit dependencies and the release order run against it unchanged.
#[tokio::test]
async fn a_transaction_of_another_process_is_mirrored_from_its_home() {
    let (a, b) = two_processes();
    let patience = Duration::from_secs(60);
    let (t, u) = (homed(1, 1), homed(1, 2));
    let (pt, pu) = (b.register(t), b.register(u));
    let mirror = a.get(t).expect("mirrored");
    assert!(a.holds(t) && !mirror.has_reached(0));
    pt.finished_piece(0);
    mirror.reached(0, patience).await.expect("rank 0 reached");
    assert!(!mirror.has_reached(1));
    // A commit dependency on an abort is an abort (a cascade).
    pt.decide(false);
    let e = mirror.committed(patience).await.expect_err("t aborted");
    assert!(matches!(e, Error::Aborted(AbortCause::Cascade)), "{e}");
    // The release order waits for the release at the home.
    let me = homed(0, 3);
    a.register(me);
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.wait_in_order(me, t, || panic!("no cycle")).await })
    };
    b.released(t);
    waiter.await.expect("released at its home");
    // One that committed; and one its home no longer knows, taken as
    // aborted and released.
    let mirror = a.get(u).expect("mirrored");
    pu.decide(true);
    mirror.committed(patience).await.expect("u committed");
    let unknown = a.get(homed(1, 9)).expect("mirrored");
    let e = unknown.committed(patience).await.expect_err("unknown");
    assert!(matches!(e, Error::Aborted(AbortCause::Cascade)), "{e}");
    // A transaction of this process that left the board is not mirrored.
    a.released(me);
    assert!(a.get(me).is_none() && !a.holds(me));
}

/// A home that never answers: after the decision patience the mirror
/// takes its transaction for aborted and released, so no dependant waits
/// for ever, and none commits on it.
#[tokio::test(start_paused = true)]
async fn a_mirror_whose_home_never_answers_ends_aborted() {
    let homes: Homes = Arc::new(|_, _| Box::pin(async { Err(Error::Transport("down".into())) }));
    let a = NexusBoard::multi_process(NodeId(0), homes);
    let t = homed(2, 1);
    let mirror = a.get(t).expect("mirrored");
    let e = mirror
        .committed(crate::coordinator::DECISION_PATIENCE * 2)
        .await
        .expect_err("taken as aborted");
    assert!(matches!(e, Error::Aborted(AbortCause::Cascade)), "{e}");
    assert!(mirror.seen().released);
}
