//! What the subtransactions running here ran, for a roll-forward after a
//! crash: Salt's alkaline subtransactions and the pieces of Callas' `sc`
//! transactions. With a log, each statement's result joins its
//! subtransaction's context, which is logged with its commit or prepare
//! (`Rules::commit_context`, `Prepared::Go`) and stays open in the log
//! until its owner's end.

use rustc_hash::FxHashMap as HashMap;

use brine_check::Op;
use brine_core::TxnId;
use brine_sql::QueryResult;
use brine_storage::wal::record::{BaseContext, BaseEntry};

use super::Stmt;

/// The contexts of the subtransactions running here, by subtransaction,
/// and, when the run records a history, what each read and wrote here
/// (its operations, numbered with its place in its owner): logged with
/// the context, so a roll-forward's record holds what committed here even
/// after this partition restarted or moved to another node.
#[derive(Default)]
pub struct Contexts {
    running: HashMap<TxnId, BaseContext>,
    ops: HashMap<TxnId, Vec<Op>>,
}

impl Contexts {
    /// `stmt` (a statement of a subtransaction) ran with result `r`: its
    /// result (and its recorded operations) joins its subtransaction's
    /// context, and the call it belongs to, when it came with the
    /// statement, becomes the context's intro.
    pub fn note(&mut self, stmt: &Stmt, r: &QueryResult) {
        let Some(s) = stmt.sub else {
            return;
        };
        let c = self.running.entry(stmt.txn).or_insert_with(|| BaseContext {
            sub: stmt.txn,
            owner: s.owner,
            intro: None,
            entries: Vec::new(),
            locked: Vec::new(),
            read: Vec::new(),
            recorded: Vec::new(),
        });
        if let (None, Some(call)) = (&c.intro, &stmt.call) {
            c.intro = Some((call.0.clone(), call.1.clone()));
        }
        c.entries.push(BaseEntry {
            seq: s.seq,
            columns: r.columns.to_vec(),
            rows: r.rows.clone(),
            affected: r.affected,
        });
        if !stmt.ops().is_empty() {
            let ops = self.ops.entry(stmt.txn).or_default();
            ops.extend(stmt.ops().iter().cloned().map(|mut op| {
                op.set_sub(s.no);
                op
            }));
        }
    }

    /// Drops subtransaction `sub`'s context (it aborted here).
    pub fn forget(&mut self, sub: TxnId) {
        self.running.remove(&sub);
        self.ops.remove(&sub);
    }

    /// The context of subtransaction `txn`, taken to be logged with its
    /// commit or prepare, with the rows it wrote here (`store`), what it
    /// read and keeps locked (`owned`): a restarted partition locks them
    /// again for its owner; and what it recorded.
    pub fn take_logged(
        &mut self,
        txn: TxnId,
        store: &brine_storage::PartitionStore,
        owned: &super::Owned,
    ) -> Option<BaseContext> {
        let mut c = self.running.remove(&txn)?;
        if let Some(ops) = self.ops.remove(&txn) {
            match serde_json::to_vec(&ops) {
                Ok(bytes) => c.recorded.push(bytes),
                Err(e) => tracing::error!(%txn, "its recorded operations do not encode: {e}"),
            }
        }
        c.locked = store
            .write_set(txn)
            .into_iter()
            .map(|(table, key, _)| (table, key))
            .collect();
        c.read = owned.reads_kept(c.owner, txn);
        Some(c)
    }

    /// The subtransactions of `owner` with a context here.
    pub fn subs_of(&self, owner: TxnId) -> impl Iterator<Item = TxnId> + '_ {
        self.running
            .iter()
            .filter(move |(_, c)| c.owner == owner)
            .map(|(sub, _)| *sub)
    }
}

/// What an open context's subtransactions recorded here (when the run
/// records a history), in the order they ran.
pub fn recorded_ops(c: &BaseContext) -> Vec<Op> {
    let mut ops = Vec::new();
    for part in &c.recorded {
        match serde_json::from_slice::<Vec<Op>>(part) {
            Ok(o) => ops.extend(o),
            Err(e) => {
                tracing::error!(owner = %c.owner, "recorded operations that do not decode: {e}")
            }
        }
    }
    ops
}

/// What a restarted partition locks again for an open context `c`: the
/// rows it wrote (for the write; a row it also read is locked for the
/// write), and what it read and kept locked (rows and ranges).
pub fn locked_again(c: &BaseContext) -> Vec<(brine_core::LockTarget, brine_core::Access)> {
    use brine_core::{Access, IndexId, LockTarget};
    let written: std::collections::HashSet<LockTarget> = c
        .locked
        .iter()
        .map(|(table, key)| LockTarget::Point {
            table: *table,
            index: IndexId::PRIMARY,
            key: key.clone(),
        })
        .collect();
    let reads = c.read.iter().filter(|t| !written.contains(*t)).map(|t| {
        let access = match t {
            LockTarget::Point { .. } => Access::Read,
            LockTarget::Range { .. } => Access::RangeRead,
        };
        (t.clone(), access)
    });
    written
        .iter()
        .map(|t| (t.clone(), Access::Write))
        .chain(reads)
        .collect()
}

impl<R: super::Rules> super::Partition<R> {
    /// After a restart, locks `target` again for `holder` (an open
    /// context's owner, or a subtransaction of it) in `mode`; whether it
    /// was granted (a refusal is logged: nothing else holds locks yet).
    pub fn lock_again(
        &mut self,
        holder: TxnId,
        target: &brine_core::LockTarget,
        mode: brine_lock::Mode,
        what: &str,
    ) -> bool {
        let at = super::now();
        match self
            .locks
            .acquire(holder, target, mode, at, &mut self.wakeups)
        {
            Ok(brine_lock::Acquire::Granted { .. }) => true,
            other => {
                tracing::error!(partition = self.id.0, %holder, "cannot lock a row of {what} again: {other:?}");
                false
            }
        }
    }

    /// Counts (protocol counter `slot`) and logs the `rows` locked again
    /// in lock class `class` for open transactions (`what`) after a
    /// restart.
    pub fn locked_again_after_restart(&self, slot: usize, rows: u64, what: &str, class: &str) {
        if rows > 0 {
            self.counters.protocol.add(slot, rows);
            tracing::info!(
                partition = self.id.0,
                rows,
                "rows of {what} locked again ({class}) after the restart"
            );
        }
    }
}
