//! Callas' rules at the partition: each grouped transaction's group; which
//! columns it used on each row and range ([`NexusUses`]), so same-group
//! dependencies are declared only on real conflicts; member locks that
//! become the group's nexus locks at a piece's end or commit, and go in
//! the nexus release order ([`Owned`], without saline dependencies: a
//! chopped transaction's pieces own their locks like Salt's
//! subtransactions); Runtime Pipelining's cascading aborts and the
//! statements held here for another transaction's rank.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;

use brine_core::{AbortCause, Access, Error, LockNeed, Result, TxnId};
use brine_lock::{LockClass, Mode};
use brine_sql::QueryResult;
use brine_storage::wal::record::BaseContext;

use super::nexus_uses::{ColUse, NexusUses};
use super::{CallasMsg, CallasStmt};

use crate::partition::{now, Contexts, Ending, Owned, Partition, Prepared, Rules, Stmt};
use crate::protocols::gather;

/// Callas' state at one partition.
pub struct CallasRules {
    owned: Owned,
    /// `Mutation::ExactCallasDeps`: dependencies only between accesses to
    /// exactly the same row or range (checker validation only).
    exact: bool,
    /// The group of each transaction (lock owner) running here in one,
    /// until its nexus locks are released.
    groups: HashMap<TxnId, u32>,
    /// Runtime Pipelining: for each uncommitted transaction, the
    /// same-group transactions that accessed rows it wrote here (they saw
    /// or overwrote its uncommitted state): its abort is theirs.
    dependants: HashMap<TxnId, SmallVec<[TxnId; 2]>>,
    /// Transactions aborted here by such a cascade, until their
    /// coordinator ends them (every later statement and vote fails).
    cascaded: HashSet<TxnId>,
    /// Which columns each grouped transaction read, wrote and incremented
    /// on each row and range it locked here, so dependencies are declared
    /// only on real (column-level) conflicts, as the analysis assumes,
    /// including those between a scan and the rows in its range.
    nexus: NexusUses,
    /// Runtime Pipelining: 1 + the highest rank of a piece each
    /// transaction (lock owner) ended here, while it runs here.
    reached: HashMap<TxnId, u32>,
    /// Runtime Pipelining: each transaction's pieces here, while it runs
    /// here (see [`PiecesHere`]).
    pieces: HashMap<TxnId, PiecesHere>,
    /// Statements held for another transaction's rank
    /// (`CallasStmt::after_rank`), in arrival order, and those let go, to
    /// be run next.
    held: Vec<(Stmt, Instant)>,
    ready: VecDeque<Stmt>,
    /// With a log: what each running piece of an `sc` transaction ran
    /// here, logged when it commits or prepares, so recovery can roll
    /// the transaction forward (`sc.rs`, "After a crash").
    contexts: Contexts,
    /// Across processes: `sc` transactions fenced here by a roll-forward
    /// (`gather::OpenContexts`), and the fence: their pieces' statements
    /// sent before it are refused.
    fences: HashMap<TxnId, u64>,
    /// The group of each grouped procedure, for the rows of open `sc`
    /// transactions locked again after a restart (`started`).
    procedure_groups: std::sync::Arc<std::collections::HashMap<String, u32>>,
}

/// A Runtime Pipelining transaction's pieces at one partition: the one
/// with statements here that has not ended here, and how many have ended
/// here. So a piece ends here once, whichever comes first: its `EndPiece`,
/// its last statement (`CallasStmt::ends_piece`), or a statement of a
/// later piece (`CallasStmt::piece`); what comes later is ignored and
/// never turns a later piece's locks into nexus locks.
#[derive(Clone, Copy, Default)]
struct PiecesHere {
    open: Option<(u32, Option<u32>)>,
    ended: u32,
}

/// How far a transaction got here, for the statements held for it.
#[derive(Clone, Copy)]
enum Reach {
    /// It ended a piece of this rank minus one.
    Rank(u32),
    /// It ended here: whatever waits for it goes on.
    Ended,
}

/// What the statement's coordinator told Callas' rules about it.
fn words(stmt: &Stmt) -> CallasStmt {
    stmt.ext
        .as_deref()
        .and_then(|e| e.downcast_ref::<CallasStmt>())
        .copied()
        .unwrap_or_default()
}

impl CallasRules {
    pub fn new(exact: bool) -> CallasRules {
        CallasRules {
            owned: Owned::new(false),
            exact,
            groups: HashMap::default(),
            dependants: HashMap::default(),
            cascaded: HashSet::default(),
            nexus: NexusUses::default(),
            reached: HashMap::default(),
            pieces: HashMap::default(),
            held: Vec::new(),
            ready: VecDeque::new(),
            contexts: Contexts::default(),
            fences: HashMap::default(),
            procedure_groups: Default::default(),
        }
    }

    /// The group of each grouped procedure (by name).
    pub fn with_procedure_groups(
        mut self,
        groups: std::sync::Arc<std::collections::HashMap<String, u32>>,
    ) -> CallasRules {
        self.procedure_groups = groups;
        self
    }

    /// Whether `txn` ended a piece of rank `>= rank` here.
    fn reached(&self, txn: TxnId, rank: u32) -> bool {
        self.reached.get(&txn).is_some_and(|&r| r > rank)
    }
}

/// `txn` holds nothing here any more.
fn forget(p: &mut Partition<CallasRules>, txn: TxnId) {
    p.rules.groups.remove(&txn);
    p.rules.fences.remove(&txn);
    p.rules.nexus.forget_txn(txn);
    // Ended here: what waited for its rank here goes on.
    p.rules.reached.remove(&txn);
    p.rules.pieces.remove(&txn);
    let_go_held(p, txn, Reach::Ended);
}

/// Lets go, to be run next, the statements held for a rank of `txn` it
/// has reached.
fn let_go_held(p: &mut Partition<CallasRules>, txn: TxnId, reach: Reach) {
    if p.rules.held.is_empty() {
        return;
    }
    let mut i = 0;
    while i < p.rules.held.len() {
        let passed = match (words(&p.rules.held[i].0).after_rank, reach) {
            (Some((t, _)), Reach::Ended) => t == txn,
            (Some((t, r)), Reach::Rank(reached)) => t == txn && r < reached,
            (None, _) => false,
        };
        if passed {
            let_go(p, i);
        } else {
            i += 1;
        }
    }
}

/// Lets the `i`th held statement go.
fn let_go(p: &mut Partition<CallasRules>, i: usize) {
    let (stmt, since) = p.rules.held.remove(i);
    let ns = now().saturating_duration_since(since).as_nanos() as u64;
    p.counters.protocol.add(super::RANK_HOLD_NS, ns);
    p.rules.ready.push_back(stmt);
}

/// Runtime Pipelining: a piece of `owner` ended here (its last statement
/// ran here, or its coordinator said so): its member locks become nexus
/// locks, and its rank (if any) counts as reached here.
fn end_piece(p: &mut Partition<CallasRules>, owner: TxnId, rank: Option<u32>) {
    let Some(&g) = p.rules.groups.get(&owner) else {
        return;
    };
    p.locks.downgrade_all(
        owner,
        LockClass::Member(g),
        LockClass::Nexus(g),
        &mut p.wakeups,
    );
    if let Some(r) = rank {
        let reached = p.rules.reached.entry(owner).or_default();
        *reached = (*reached).max(r + 1);
        let reached = *reached;
        let_go_held(p, owner, Reach::Rank(reached));
    }
}

/// Runtime Pipelining: piece `piece` (of rank `rank`) of `owner` ended
/// here, unless it (or a later one) already did.
fn piece_ended(p: &mut Partition<CallasRules>, owner: TxnId, piece: u32, rank: Option<u32>) {
    if !p.rules.groups.contains_key(&owner) {
        // It ended here (a late message).
        return;
    }
    let here = p.rules.pieces.entry(owner).or_default();
    if piece < here.ended {
        return;
    }
    here.ended = piece + 1;
    if here.open.is_some_and(|(open, _)| open <= piece) {
        here.open = None;
    }
    end_piece(p, owner, rank);
}

/// Runtime Pipelining: a statement of piece `piece` of `owner` arrived:
/// the piece it had open here, if earlier, has ended.
fn piece_opened(p: &mut Partition<CallasRules>, owner: TxnId, (piece, rank): (u32, Option<u32>)) {
    let here = p.rules.pieces.entry(owner).or_default();
    if piece < here.ended {
        return;
    }
    if let Some((open, open_rank)) = here.open.filter(|(open, _)| *open < piece) {
        piece_ended(p, owner, open, open_rank);
    }
    p.rules.pieces.entry(owner).or_default().open = Some((piece, rank));
}

/// Runtime Pipelining, after a blind increment that ends its row's part of
/// the piece (`CallasStmt::end_row`): the member locks on the rows it
/// wrote become the group's nexus locks, for a transaction that has done
/// nothing to the row but increment it (and read it), as at the end of the
/// piece.
fn end_incremented_rows(p: &mut Partition<CallasRules>, stmt: &Stmt) {
    let LockClass::Member(g) = stmt.lock.class else {
        return;
    };
    let owner = stmt.owner;
    for i in 0..p.needs.len() {
        if p.needs[i].access != Access::Write {
            continue;
        }
        let (write, add) = p
            .rules
            .nexus
            .on(&p.needs[i].target)
            .iter()
            .filter(|u| u.txn == owner)
            .fold((0, 0), |(w, a), u| (w | u.write, a | u.add));
        let only_added = write == 0 && add != 0;
        if only_added {
            let target = p.needs[i].target.clone();
            p.locks.downgrade(
                owner,
                &target,
                LockClass::Member(g),
                LockClass::Nexus(g),
                &mut p.wakeups,
            );
        }
    }
}

/// After a member lock on `target` was granted: the same-group
/// transactions with nexus locks there, or on a row or range that overlaps
/// it (`NexusUses`), that this access depends on, column by column (it
/// read or overwrote what they wrote, or scanned a row they inserted or
/// deleted; at serializable also: it wrote what they read, or inserted or
/// deleted a row in a range they scanned; read committed ignores
/// anti-dependencies, DESIGN 4.4). Those whose writes are uncommitted
/// (Runtime Pipelining) take this transaction down if they abort.
fn member_granted(p: &mut Partition<CallasRules>, stmt: &mut Stmt, need: &LockNeed, g: u32) {
    let owner = stmt.owner;
    let mine = ColUse::of(owner, stmt.txn, stmt.plan.access());
    let serializable = stmt.lock.serializable;
    let ranges = !p.rules.exact;
    let rules = &mut p.rules;
    let (groups, store, dependants) = (&rules.groups, &p.store, &mut rules.dependants);
    rules
        .nexus
        .for_each_conflict(&need.target, &mine, ranges, |u, c| {
            if groups.get(&u.txn) != Some(&g) || !(c.sees || (serializable && c.overwrites_read)) {
                return;
            }
            if !stmt.after.contains(&u.txn) {
                stmt.after.push(u.txn);
            }
            if c.sees && store.has_writes(u.txn) {
                let ds = dependants.entry(u.txn).or_default();
                if !ds.contains(&owner) {
                    ds.push(owner);
                }
            }
        });
    rules.nexus.record(&need.target, mine);
}

impl gather::GatherRules for CallasRules {
    fn fencing(&mut self) -> (&mut HashMap<TxnId, u64>, &Contexts) {
        (&mut self.fences, &self.contexts)
    }
}

/// The context of piece `txn` to log with its commit or prepare, with the
/// rows it wrote here and what it read and keeps locked.
fn logged_context(p: &mut Partition<CallasRules>, txn: TxnId) -> Option<BaseContext> {
    let CallasRules {
        contexts, owned, ..
    } = &mut p.rules;
    contexts.take_logged(txn, &p.store, owned)
}

/// With a log, the rows the open `sc` transactions' committed pieces
/// wrote or read here are locked again after a restart, before anything
/// else runs: as their group's nexus locks, held by their owners, who are
/// protected (they cannot roll back). Their locks died with the process,
/// and without them a transaction of another group could see a chopped
/// transaction's intermediate state until its roll-forward or its end.
/// Their uses are recorded as of every column, so a same-group
/// transaction that meets them depends on them (the release order). They
/// go with the owner's end here: its commit or abort, from its
/// coordinator, its roll-forward, or a restarted coordinator that found
/// its end logged.
fn relock_open_contexts(p: &mut Partition<CallasRules>) {
    let Some(wal) = &p.wal else {
        return;
    };
    let mut relocked = 0u64;
    for c in wal.open_contexts(|_| true) {
        let group = c
            .intro
            .as_ref()
            .and_then(|(name, _)| p.rules.procedure_groups.get(name))
            .copied();
        let Some(g) = group else {
            tracing::error!(partition = p.id.0, owner = %c.owner, "an open chopped transaction's context names no procedure of a group: its rows are not locked again");
            continue;
        };
        for (target, access) in crate::partition::locked_again(&c) {
            let mode = Mode {
                class: LockClass::Nexus(g),
                access,
            };
            if p.lock_again(c.owner, &target, mode, "an open chopped transaction") {
                let write = if access == Access::Write { u64::MAX } else { 0 };
                let used = ColUse {
                    txn: c.owner,
                    piece: c.sub,
                    read: u64::MAX,
                    write,
                    add: 0,
                    rows: access == Access::Write,
                };
                p.rules.nexus.record(&target, used);
                relocked += 1;
            }
        }
        p.rules.groups.insert(c.owner, g);
        p.locks.protect(c.owner, &mut p.wakeups);
    }
    p.locked_again_after_restart(
        super::RELOCKED,
        relocked,
        "open chopped transactions",
        "nexus",
    );
}

impl Rules for CallasRules {
    fn owned(&mut self) -> Option<&mut Owned> {
        Some(&mut self.owned)
    }

    fn owned_ref(&self) -> Option<&Owned> {
        Some(&self.owned)
    }

    /// `owner` holds nothing here any more.
    fn forget(p: &mut Partition<Self>, owner: TxnId) {
        forget(p, owner);
    }

    fn arrive(p: &mut Partition<Self>, stmt: &Stmt) -> Result<()> {
        if p.rules.cascaded.contains(&stmt.owner) {
            return Err(Error::Aborted(AbortCause::Cascade));
        }
        if gather::fenced_off(p, stmt) {
            return Err(Error::Aborted(AbortCause::Unreachable));
        }
        if let LockClass::Member(g) = stmt.lock.class {
            p.rules.groups.insert(stmt.owner, g);
        }
        if let Some(piece) = words(stmt).piece {
            piece_opened(p, stmt.owner, piece);
        }
        Ok(())
    }

    fn admit(p: &mut Partition<Self>, stmt: Stmt) -> Option<Stmt> {
        match words(&stmt).after_rank {
            Some((t, r)) if !p.rules.reached(t, r) => {
                p.counters.protocol.add(super::RANK_HOLDS, 1);
                p.rules.held.push((stmt, now()));
                None
            }
            _ => Some(stmt),
        }
    }

    fn next_ready(p: &mut Partition<Self>) -> Option<Stmt> {
        p.rules.ready.pop_front()
    }

    fn granted(p: &mut Partition<Self>, stmt: &mut Stmt, need: &LockNeed, short: bool) -> bool {
        if let LockClass::Member(g) = stmt.lock.class {
            if words(stmt).track {
                member_granted(p, stmt, need, g);
            }
        }
        let dirty = p.owned_granted(stmt, need, short);
        stmt.dirty |= dirty;
        dirty
    }

    fn executed(p: &mut Partition<Self>, stmt: &Stmt) {
        let w = words(stmt);
        if w.end_row && w.track {
            end_incremented_rows(p, stmt);
        }
        if let Some(r) = w.ends_piece {
            match w.piece {
                Some((piece, _)) => piece_ended(p, stmt.owner, piece, Some(r)),
                None => end_piece(p, stmt.owner, Some(r)),
            }
        }
    }

    /// With a log, a dependant prepares once every transaction whose
    /// uncommitted writes it saw here ended here: their commit records
    /// then come before its prepare record, and recovery, which applies
    /// them in log order, rebuilds a row they both wrote as the later one
    /// left it (its redo is that row as it left it, `redo.rs`).
    fn prepare_waits(p: &Partition<Self>, txn: TxnId) -> bool {
        p.wal.is_some()
            && p.rules
                .dependants
                .iter()
                .any(|(u, ds)| ds.contains(&txn) && p.store.has_writes(*u))
    }

    fn finishing(p: &mut Partition<Self>, stmt: &Stmt, result: &Result<QueryResult>) {
        // Only pieces of chopped transactions run as subtransactions.
        if let (Some(_), Some(_), Ok(r)) = (&p.wal, stmt.sub, result) {
            p.rules.contexts.note(stmt, r);
        }
    }

    fn prepare(p: &mut Partition<Self>, txn: TxnId) -> Prepared {
        if p.rules.cascaded.remove(&txn) {
            p.rules.contexts.forget(txn);
            Prepared::Refuse
        } else {
            Prepared::Go {
                context: logged_context(p, txn),
            }
        }
    }

    fn commit_context(p: &mut Partition<Self>, txn: TxnId) -> Option<BaseContext> {
        logged_context(p, txn)
    }

    fn started(p: &mut Partition<Self>) {
        relock_open_contexts(p);
    }

    fn committed(p: &mut Partition<Self>, txn: TxnId) {
        p.rules.dependants.remove(&txn);
    }

    /// Undoes `txn` here. Under Runtime Pipelining every same-group
    /// transaction that saw or overwrote its uncommitted writes here (and,
    /// in turn, theirs) aborts here with it: all their changes are undone
    /// together, newest first, their waiting statements fail, their locks
    /// go, and whatever they send here next fails until their coordinator
    /// ends them.
    fn undo(p: &mut Partition<Self>, txn: TxnId) {
        let mut closure: Vec<TxnId> = Vec::new();
        let mut stack = vec![txn];
        while let Some(t) = stack.pop() {
            for d in p.rules.dependants.remove(&t).unwrap_or_default() {
                if d != txn
                    && !closure.contains(&d)
                    && !p.rules.cascaded.contains(&d)
                    && p.rules.groups.contains_key(&d)
                {
                    closure.push(d);
                    stack.push(d);
                }
            }
        }
        if closure.is_empty() {
            p.store.abort(txn);
            return;
        }
        closure.push(txn);
        p.store.abort_all(&closure);
        closure.pop();
        for d in closure {
            tracing::debug!(partition = p.id.0, %d, cause = %txn, "cascading abort");
            if let Some(parked) = p.parked.remove(&d) {
                p.locks.cancel_waits(d, &mut p.wakeups);
                parked
                    .stmt
                    .reply
                    .send(Err(Error::Aborted(AbortCause::Cascade)));
            }
            Self::ending(p, d);
            p.counters.aborts.fetch_add(1, Ordering::Relaxed);
            p.counters.count_victim(AbortCause::Cascade);
            forget(p, d);
            let _ = p.release_all(d);
            p.rules.cascaded.insert(d);
        }
    }

    fn aborted(p: &mut Partition<Self>, txn: TxnId) {
        p.rules.cascaded.remove(&txn);
        p.rules.contexts.forget(txn);
    }

    /// Fails the statement `owner` has held here, if any (it ended).
    fn ending(p: &mut Partition<Self>, owner: TxnId) {
        if let Some(i) = p.rules.held.iter().position(|(h, _)| h.owner == owner) {
            let (stmt, _) = p.rules.held.remove(i);
            stmt.reply.send(Err(Error::Aborted(AbortCause::Cascade)));
        }
    }

    /// A transaction that commits keeping its locks (`Ending::Keep`) keeps
    /// them as its group's nexus locks until the release order lets them
    /// go (`Release`), and so does every committed piece of a chopped one;
    /// a rolled-back piece's locks go (the nexus locks of the pieces
    /// before it stay), and with them what it was recorded to have used,
    /// on those rows too (`NexusUses::forget_piece`); a transaction that
    /// keeps nothing (nothing to wait for), or aborts, lets them go now.
    fn end_locks(p: &mut Partition<Self>, txn: TxnId, ending: Ending, commit: bool) {
        let owner = ending.owner(txn);
        if let (Some(wal), false) = (&mut p.wal, matches!(ending, Ending::Sub { .. })) {
            // The transaction ended (its coordinator logged the end of a
            // chopped one first): what its pieces logged here is closed.
            wal.context_end(owner);
        }
        let Some(&g) = p.rules.groups.get(&owner) else {
            // The default group: strict two-phase locking.
            if ending == Ending::Release {
                let _ = p.release_all(txn);
            }
            return;
        };
        match ending {
            Ending::Sub { .. } if !commit => {
                p.locks
                    .release_class(owner, LockClass::Member(g), &mut p.wakeups);
                p.rules.nexus.forget_piece(owner, txn);
            }
            Ending::Sub { .. } | Ending::Keep if commit => {
                p.locks.downgrade_all(
                    owner,
                    LockClass::Member(g),
                    LockClass::Nexus(g),
                    &mut p.wakeups,
                );
            }
            Ending::Release | Ending::Keep | Ending::Sub { .. } => {
                forget(p, owner);
                let _ = p.release_all(txn);
            }
        }
    }

    fn message(p: &mut Partition<Self>, msg: Box<dyn Any + Send>) -> Result<()> {
        let msg = match msg.downcast::<gather::OpenContexts>() {
            Ok(open) => {
                gather::answer(p, *open);
                return Ok(());
            }
            Err(msg) => msg
                .downcast::<CallasMsg>()
                .map_err(|_| Error::Internal("a message Callas' rules do not know".into()))?,
        };
        match *msg {
            CallasMsg::EndPiece { owner, piece, rank } => piece_ended(p, owner, piece, rank),
            CallasMsg::RankGo { txn, after } => {
                if let Some(i) = p
                    .rules
                    .held
                    .iter()
                    .position(|(h, _)| h.owner == txn && words(h).after_rank == Some(after))
                {
                    let_go(p, i);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use brine_core::Value;
    use tokio::sync::oneshot;

    use super::*;
    use crate::message::{Executed, PartitionMsg};
    use crate::partition::harness::{first_value as value, txn, Harness, How};

    /// Sends `sql` for `t`, a Runtime Pipelining statement of group 1 in
    /// piece `piece` (of the same rank); the answer comes on the receiver.
    fn execute(
        h: &Harness,
        t: TxnId,
        sql: &str,
        k: i64,
        piece: u32,
    ) -> oneshot::Receiver<Result<Executed>> {
        let words = CallasStmt {
            track: true,
            piece: Some((piece, Some(piece))),
            ..CallasStmt::default()
        };
        let how = How {
            class: LockClass::Member(1),
            sub: None,
            ext: Some(Arc::new(words)),
        };
        h.execute(t, sql, k, how)
    }

    fn end_piece(h: &Harness, owner: TxnId, piece: u32) {
        let msg = CallasMsg::EndPiece {
            owner,
            piece,
            rank: Some(piece),
        };
        h.send(PartitionMsg::Protocol(Box::new(msg)));
    }

    /// Across processes a piece's `EndPiece` may arrive after the next
    /// piece's first statement. That statement ends the piece here itself,
    /// and the late `EndPiece` leaves the later piece's member locks as
    /// they are: a same-group transaction reads what the ended piece
    /// wrote, and waits for what the open one wrote.
    #[tokio::test]
    async fn a_late_end_piece_leaves_the_next_piece_s_locks() -> Result<()> {
        let h = Harness::kv(CallasRules::new(false), 2).await?;
        let (t1, t2) = (txn(1), txn(2));
        let set = "UPDATE kv SET v = 7 WHERE k = $1";
        execute(&h, t1, set, 1, 0).await.expect("answered")?;
        // Piece 1 begins; its `EndPiece` for piece 0 is late.
        execute(&h, t1, set, 2, 1).await.expect("answered")?;
        end_piece(&h, t1, 0);
        let get = "SELECT v FROM kv WHERE k = $1";
        let read = execute(&h, t2, get, 1, 0).await.expect("answered")?;
        assert_eq!(read.after, vec![t1], "t2 read t1's ended piece");
        assert_eq!(value(read), Some(Value::Int(7)));
        let waiting = execute(&h, t2, get, 2, 0);
        assert_eq!(
            h.status().await.parked_statements,
            1,
            "piece 1 of t1 is still open here: t2 waits for its member lock"
        );
        end_piece(&h, t1, 1);
        let read = waiting.await.expect("answered")?;
        assert_eq!(value(read), Some(Value::Int(7)));
        Ok(())
    }

    /// After a restart, what an open `sc` transaction's committed piece
    /// wrote and read here is locked again, as its group's nexus locks:
    /// another group's write of either waits for the transaction's end
    /// (before, the chopped transaction's intermediate state was open to
    /// other groups until its roll-forward), a row it did not touch does
    /// not, and its end lets them go.
    #[tokio::test]
    async fn rows_an_open_chopped_transaction_used_stay_locked_after_a_restart() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Storage(e.to_string()))?;
        let groups: std::collections::HashMap<String, u32> = [("p".to_string(), 1)].into();
        let rules = || CallasRules::new(false).with_procedure_groups(Arc::new(groups.clone()));
        let h = Harness::durable_kv(rules(), 4, dir.path()).await?;
        let (owner, piece) = (txn(10), txn(11));
        let call: crate::message::Intro = Some(Arc::new(("p".to_string(), Vec::new())));
        let in_piece = |seq| How {
            class: LockClass::Member(1),
            sub: Some(crate::partition::harness::sub_stmt(owner, seq)),
            ext: Some(Arc::new(CallasStmt {
                track: true,
                ..CallasStmt::default()
            })),
        };
        let get = "SELECT v FROM kv WHERE k = $1";
        let set = "UPDATE kv SET v = 7 WHERE k = $1";
        h.execute_in_call(piece, get, 1, in_piece(0), call.clone())
            .await
            .expect("answered")?;
        h.execute_in_call(piece, set, 2, in_piece(1), call)
            .await
            .expect("answered")?;
        h.ask(|reply| PartitionMsg::Commit {
            txn: piece,
            ending: Ending::Sub { owner },
            decided: false,
            reply,
        })
        .await?;
        h.crash().await;

        let h = Harness::durable_kv(rules(), 0, dir.path()).await?;
        // Of another group, older: they wait rather than die.
        let other = |id, k| {
            let how = How {
                class: LockClass::Member(2),
                sub: None,
                ext: None,
            };
            h.execute(txn(id), set, k, how)
        };
        let (of_read, of_written) = (other(1, 1), other(2, 2));
        other(3, 3).await.expect("answered")?;
        assert_eq!(
            h.status().await.parked_statements,
            2,
            "the writes of what it read and wrote wait"
        );
        h.ask(|reply| PartitionMsg::Abort {
            txn: owner,
            ending: Ending::Release,
            reply,
        })
        .await;
        for waited in [of_read, of_written] {
            waited.await.expect("answered")?;
        }
        Ok(())
    }
}
