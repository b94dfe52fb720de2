//! The message protocol between coordinators and partitions.
//!
//! One protocol, whatever the carrier: the in-process carrier moves these
//! values through channels (via the simulated [`Link`]); a TCP carrier would
//! frame the same requests and correlate replies by id. Every request that
//! expects an answer carries a [`Reply`], which sends the answer back over the
//! same link.

use std::sync::Arc;

use brine_check::Op;
use brine_core::{NodeId, Result, Row, TableId, TxnId, Value};
use brine_lock::LockClass;
use brine_sql::{Plan, QueryResult};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::link::Link;
use crate::partition::Ending;

/// How a statement's locks are taken: the lock class (decided by the
/// transaction's protocol) and the durations of the isolation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSpec {
    pub class: LockClass,
    /// Read and range-read locks are released when the statement ends
    /// (read-committed: S = {R, W}, L = {W}).
    pub short_reads: bool,
    /// Range reads lock the whole scanned interval (serializable).
    pub serializable: bool,
    /// DELIBERATELY UNSAFE, for validating the isolation checker only:
    /// write locks are released when the statement ends, so other
    /// transactions see (and overwrite) uncommitted writes. Never set by a
    /// real protocol; see `Mutation`.
    pub short_writes: bool,
    /// Reads of rows by primary key take the write lock at once (the
    /// row is written later in the same transaction; no upgrade to
    /// deadlock on: Callas' Runtime Pipelining sets it, see
    /// `Placed::write_first`).
    #[serde(default)]
    pub for_update: bool,
}

impl LockSpec {
    /// Strict two-phase locking at `isolation`: ACID locks, reads held to
    /// the end only at serializable.
    pub fn acid(isolation: crate::protocol::Isolation) -> LockSpec {
        use crate::protocol::Isolation;
        LockSpec {
            class: LockClass::Acid,
            short_reads: isolation == Isolation::ReadCommitted,
            serializable: isolation == Isolation::Serializable,
            short_writes: false,
            for_update: false,
        }
    }
}

/// What a protocol adds to a statement for its rules at the partition
/// (Callas: how Runtime Pipelining places it), which only those rules read.
/// Across processes the protocol encodes it (`Protocol::encode_ext`).
pub type StmtExt = Option<Arc<dyn std::any::Any + Send + Sync>>;

/// A statement's answer: its result and, when the run records a history,
/// what it read and wrote (empty otherwise).
#[derive(Debug, Serialize, Deserialize)]
pub struct Executed {
    pub result: QueryResult,
    #[serde(with = "as_json")]
    pub ops: Vec<Op>,
    /// The statement accessed a row that another transaction wrote and
    /// has not released (Salt: a read-after-write dependency).
    pub dirty: bool,
    /// Transactions the statement turned out to depend on (Callas:
    /// same-group transactions holding nexus locks on rows it accessed in
    /// a conflicting way).
    #[serde(default)]
    pub after: Vec<TxnId>,
}

/// The call a statement belongs to (procedure and arguments), sent with a
/// durable call's first statement and logged with its first
/// subtransaction (Salt: durable acceptance).
pub type Intro = Option<Arc<(String, Vec<Value>)>>;

/// What a statement of a subtransaction adds to `Execute`: its writes are
/// the subtransaction's (`Execute.txn`), its locks its owner's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubStmt {
    /// Owner of the locks, which outlive the subtransaction (Salt: the
    /// BASE transaction; Callas: the chopped transaction).
    pub owner: TxnId,
    /// Position of the statement in the owner (program order), for staged
    /// release (Salt's write-after-read rule).
    pub seq: u32,
    /// The statement is a whole subtransaction on one partition: commit
    /// (or roll back) as soon as it has run (Salt's local-transaction
    /// optimization; Callas' `chop` pieces).
    pub autocommit: bool,
    /// The previous subtransaction of `owner`, which ran on this
    /// partition only and whose statements all succeeded, commits here
    /// before this statement runs, instead of in a round of its own
    /// (Salt's local-transaction optimization for longer ones).
    pub commit_first: Option<TxnId>,
    /// `owner` can no longer roll back (Salt: it was accepted; Callas
    /// `chop` and `sc`: a piece of it that wrote committed); the partition
    /// protects it in its lock table (`LockTable::protect`) before the
    /// statement's locks are requested, so it is never the victim of a
    /// transaction that waits for its earlier locks.
    #[serde(default)]
    pub protect: bool,
    /// Salt: the alkaline subtransaction's number in its BASE transaction,
    /// which tags its operations in a recorded history (0 for Callas'
    /// pieces, whose operations carry no such tag).
    #[serde(default)]
    pub no: u32,
}

impl PartitionMsg {
    /// A second copy of a decision (a commit, abort or release), answered
    /// to nobody: what the link's faults deliver when they duplicate one
    /// (`FaultConfig::duplicate`). `None` for anything else.
    pub fn duplicate(&self) -> Option<PartitionMsg> {
        Some(match self {
            PartitionMsg::Commit {
                txn,
                ending,
                decided,
                ..
            } => PartitionMsg::Commit {
                txn: *txn,
                ending: *ending,
                decided: *decided,
                reply: Reply::nobody(),
            },
            PartitionMsg::Abort { txn, ending, .. } => PartitionMsg::Abort {
                txn: *txn,
                ending: *ending,
                reply: Reply::nobody(),
            },
            PartitionMsg::Release {
                owner,
                stages,
                lasting,
                ..
            } => PartitionMsg::Release {
                owner: *owner,
                stages: stages.clone(),
                lasting: *lasting,
                reply: Reply::nobody(),
            },
            _ => return None,
        })
    }
}

/// A participant's vote in the first phase of two-phase commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Vote {
    /// Prepared: will commit or abort as told.
    Yes,
    /// Wrote nothing here; already released everything; skip phase two.
    ReadOnly,
    /// Cannot commit (the transaction was aborted here).
    No,
}

/// One partition's part of the cluster's wait-for graph.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WaitGraph {
    /// `(a, b)`: `a` waits for `b`.
    pub edges: Vec<(TxnId, TxnId)>,
    /// Transactions with requests waiting here (all begun by the look's
    /// start), and whether each of those requests conflicts with no
    /// holder (they could be granted ahead of the queue).
    pub waiting: Vec<(TxnId, bool)>,
    /// Those of `waiting` that can no longer roll back
    /// (`LockTable::protect`): a victim only when a cycle has no other.
    pub protected: Vec<TxnId>,
}

/// A snapshot of a partition for `status` and tests.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PartitionStatus {
    pub rows_per_table: Vec<usize>,
    pub parked_statements: usize,
    pub active_txns: usize,
    /// Transactions the lock table still keeps state for (locks, waits,
    /// dependencies or protection); 0 once every transaction ended.
    #[serde(default)]
    pub lock_txns: usize,
}

pub enum PartitionMsg {
    Execute {
        txn: TxnId,
        plan: Arc<Plan>,
        params: Vec<Value>,
        lock: LockSpec,
        /// Set for a statement of a subtransaction.
        sub: Option<SubStmt>,
        /// With a log: the procedure and its arguments, sent with a
        /// durable call's first statement and logged with its first
        /// subtransaction (Salt: durable acceptance).
        call: Intro,
        /// The protocol's own words for its rules here.
        ext: StmtExt,
        /// Salt: the statement spans partitions and is its ACID
        /// transaction's first; it waits gated here (holding nothing, see
        /// `LockTable::acquire_gated`) until it is ungated.
        gate: Option<Gate>,
        reply: Reply<Result<Executed>>,
    },
    /// The gated statement of `txn` was ready at every partition it spans
    /// (or failed at one): from now on it waits and runs as any other
    /// statement.
    Ungate {
        txn: TxnId,
    },
    /// `ending`: what becomes of the transaction's locks. `hold`: a
    /// participant where the transaction wrote nothing votes `ReadOnly` but
    /// keeps its locks until phase two (Runtime Pipelining: the decision
    /// waits for the transactions it depends on, which its locks must not
    /// outlive).
    Prepare {
        txn: TxnId,
        ending: Ending,
        hold: bool,
        reply: Reply<Vote>,
    },
    /// Commit; for a single-participant transaction this is the only commit
    /// message (one round).
    Commit {
        txn: TxnId,
        ending: Ending,
        /// Phase two of two-phase commit (the participant prepared): the
        /// decision is durable and must be delivered, however long it
        /// takes. A one-round commit (false) that cannot be delivered has
        /// an unknown outcome and is never resent.
        decided: bool,
        /// `Err`: a participant in another process refused it (it restarted
        /// since the transaction ran there): the outcome is unknown, and
        /// sending it again changes nothing.
        reply: Reply<Result<()>>,
    },
    /// Answered with the writes `txn` had made here, when the run records
    /// a history (`PartitionStore::undone_writes`): the coordinator
    /// records those whose statement's answer it never got.
    Abort {
        txn: TxnId,
        ending: Ending,
        reply: Reply<Vec<brine_check::Op>>,
    },
    /// The coordinator lets the locks `owner` kept go (Salt: its saline
    /// locks, at the BASE transaction's end; Callas: its nexus locks, in
    /// the nexus order), in stages, in order (see [`ReleaseStage`]), each
    /// lock when its release-order dependencies allow; a stage starts once
    /// the one before it released everything. Answered once the last stage
    /// is done.
    Release {
        owner: TxnId,
        stages: Vec<ReleaseStage>,
        /// Sent until a partition that restarted since has it (Salt's end
        /// of an accepted BASE transaction: the restarted partition holds
        /// its rows locked again until then, `SaltRules::started`). Any
        /// other release to a process that died counts as delivered: its
        /// locks died with it.
        lasting: bool,
        reply: Reply<()>,
    },
    /// A message of the protocol's own for its rules here
    /// (`Rules::message`; Callas: a piece ended, a rank hold may go).
    /// Across processes the protocol encodes it
    /// (`Protocol::encode_message`).
    Protocol(Box<dyn std::any::Any + Send>),
    /// `owner` can no longer roll back (Salt: it was accepted; Callas
    /// `chop` and `sc`: a piece of it that wrote committed); it is
    /// protected in the lock table (`LockTable::protect`).
    Protect {
        owner: TxnId,
    },
    /// The node whose transaction ids carry `coordinator` (the id's top
    /// byte) restarted: abort every transaction of its previous run that
    /// is not prepared here (nobody will finish it), and answer the ones
    /// that are (in doubt: their outcome is in that node's decision log).
    AbortOrphans {
        coordinator: u32,
        reply: Reply<Vec<TxnId>>,
    },
    Load {
        table: TableId,
        rows: Vec<Row>,
        reply: Reply<Result<()>>,
    },
    Status {
        reply: Reply<PartitionStatus>,
    },
    /// The partition's part of the wait-for graph (see `deadlock`): its
    /// transactions whose requests waiting here all began by `began_by`
    /// (the moment the detector's look began), and the edges from them and
    /// from transactions releasing behind release-order dependencies.
    /// `nudge`, if any, is the detector's doorbell: rung once, when the
    /// lock table next records something that may close a cycle through
    /// another partition (`LockTable::wait_for_changes`).
    WaitGraph {
        began_by: std::time::Instant,
        nudge: Option<Nudge>,
        reply: Reply<WaitGraph>,
    },
    /// The cluster-wide detector chose `victim` to break a deadlock: its
    /// request that conflicts with no holder is granted ahead of the queue
    /// (`pass`), or its waiting requests here are aborted (cause:
    /// deadlock).
    BreakDeadlock {
        victim: TxnId,
        pass: bool,
    },
    /// Full structural check of the partition's store (every secondary
    /// index entry matches a row and vice versa). O(rows): for tests and
    /// `--check`, never the hot path.
    Verify {
        reply: Reply<Result<()>>,
    },
}

/// One stage of a `Release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseStage {
    /// The locks taken by statements at positions `<= upto`.
    Upto(u32),
    /// Every lock, but the owner's end is not recorded here (its context
    /// stays in the log: a BASE transaction that gave up, which recovery
    /// rolls forward).
    AllKept,
    /// Every lock, and the owner ends here.
    End,
}

/// Who ungates a gated statement at a partition.
pub enum Gate {
    /// The partition, as soon as it could grant it: for a statement whose
    /// locks end with it (a read under read committed), which never holds
    /// one partition while it waits at another, but whose waiting request
    /// must not hold up the accepted BASE transactions it waits for.
    Local,
    /// Its coordinator (`Ungate`), once every partition could grant it at
    /// once; the partition tells it through this.
    Coordinated(GateNotice),
}

/// Where a partition tells a gated statement's coordinator, as often as it
/// changes, whether the statement could be granted there now (`index`:
/// which of the statement's partitions this is).
pub struct GateNotice {
    pub index: usize,
    tx: tokio::sync::mpsc::UnboundedSender<(usize, bool)>,
    from: NodeId,
    to: NodeId,
    link: Link,
}

impl GateNotice {
    /// A notice from node `from` (the partition's) to node `to` (the
    /// coordinator's), reporting into `tx`.
    pub fn new(
        link: &Link,
        from: NodeId,
        to: NodeId,
        index: usize,
        tx: tokio::sync::mpsc::UnboundedSender<(usize, bool)>,
    ) -> GateNotice {
        GateNotice {
            index,
            tx,
            from,
            to,
            link: link.clone(),
        }
    }

    pub fn send(&self, ready: bool) {
        let (tx, index) = (self.tx.clone(), self.index);
        // A coordinator that went away no longer needs it.
        self.link.send(self.from, self.to, move || {
            let _ = tx.send((index, ready));
        });
    }
}

/// The cluster's deadlock detector's doorbell at one partition (`index`:
/// which of the detector's partitions this is): the partition rings it,
/// over the link like any message, when a look may find a new cycle.
pub struct Nudge {
    index: usize,
    tx: tokio::sync::mpsc::UnboundedSender<usize>,
    from: NodeId,
    to: NodeId,
    link: Link,
}

impl Nudge {
    /// A doorbell from node `from` (the partition's) to node `to` (the
    /// detector's), ringing into `tx`.
    pub fn new(
        link: &Link,
        from: NodeId,
        to: NodeId,
        index: usize,
        tx: tokio::sync::mpsc::UnboundedSender<usize>,
    ) -> Nudge {
        Nudge {
            index,
            tx,
            from,
            to,
            link: link.clone(),
        }
    }

    pub fn ring(self) {
        let Nudge {
            index,
            tx,
            from,
            to,
            link,
        } = self;
        // A detector that went away (shutdown) no longer listens.
        link.send(from, to, move || {
            let _ = tx.send(index);
        });
    }
}

/// The way back to whoever sent a request, over the same link.
pub struct Reply<T>(Option<ReplyPath<T>>);

struct ReplyPath<T> {
    tx: oneshot::Sender<T>,
    from: NodeId,
    to: NodeId,
    link: Link,
}

impl<T: Send + 'static> Reply<T> {
    /// A reply path from node `from` (the partition's) to node `to` (the
    /// requester's), and the receiver the requester awaits.
    pub fn channel(link: &Link, from: NodeId, to: NodeId) -> (Reply<T>, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        let path = ReplyPath {
            tx,
            from,
            to,
            link: link.clone(),
        };
        (Reply(Some(path)), rx)
    }

    /// An answer nobody waits for: sending it sends nothing.
    pub fn nobody() -> Reply<T> {
        Reply(None)
    }

    pub fn send(self, value: T) {
        let Some(ReplyPath { tx, from, to, link }) = self.0 else {
            return;
        };
        // A requester that went away (shutdown) no longer needs the answer.
        link.send(from, to, move || {
            let _ = tx.send(value);
        });
    }
}

/// A recorded history's operations between processes: as their JSON (the
/// history file's own form), inside the wire's binary encoding, which
/// cannot carry the history's self-describing forms (tagged operations,
/// keys of any scalar); `[]` when the run records nothing.
pub mod as_json {
    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&serde_json::to_string(v).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        serde_json::from_str(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement's recorded operations cross processes (a node whose
    /// partitions record a history): the wire's binary encoding carries
    /// them as their JSON, keys of any scalar and tombstones included.
    #[test]
    fn recorded_operations_cross_the_wire() {
        use brine_core::{Decimal, Key, Value};
        let ops = vec![
            Op::Read {
                table: "account".into(),
                key: Key::new([Value::Int(7), Value::str("x")]),
                version: 1 << 50,
                sub: Some(2),
                cols: None,
            },
            Op::RangeRead {
                table: "account".into(),
                index: 0,
                lo: Box::new(std::ops::Bound::Included(Key::new([Value::Decimal(
                    Decimal::new(1234, 2),
                )]))),
                hi: Box::new(std::ops::Bound::Unbounded),
                seen: vec![brine_check::Seen {
                    key: Key::new([Value::Int(8)]),
                    version: 3,
                    deleted: true,
                }],
                sub: None,
                cols: None,
            },
        ];
        let executed = Executed {
            result: QueryResult::affected(1),
            ops: ops.clone(),
            dirty: true,
            after: Vec::new(),
        };
        let bytes = postcard::to_allocvec(&executed).expect("encodes");
        let back: Executed = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(back.ops, ops);
        assert!(back.dirty);
        let none = Executed {
            ops: Vec::new(),
            ..back
        };
        let back: Executed =
            postcard::from_bytes(&postcard::to_allocvec(&none).expect("encodes")).expect("decodes");
        assert!(back.ops.is_empty());
    }
}
