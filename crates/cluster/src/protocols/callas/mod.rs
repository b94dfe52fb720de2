//! Callas: transaction groups, nexus locks and the nexus lock release
//! order (seed 000 chapter 4, seed 002; DESIGN 4.4).
//!
//! ```text
//!  call(proc in group g) ──► body: every statement locks member_g (in-group
//!      │                     2PL; shares with nexus_g), reports the same-group
//!      │                     transactions it now depends on ("after")
//!      ▼ commit, if a transaction it depends on still holds nexus locks:
//!        member_g ──► nexus_g at every participant (locks kept); else the
//!        locks go with the commit, as in 2PL
//!  client answered ──► (background) wait until every transaction it depends
//!                      on released its nexus locks ──► Release everywhere
//!                      ──► tell the transactions waiting on this one
//! ```
//!
//! A nexus lock is compatible with its own group and conflicts with other
//! groups (and the default group's ACID locks) unless both read, so no
//! transaction sees another group's uncommitted or intermediate state. The
//! release order ("if T2 depends on T1 and both are in one group, T2 cannot
//! release its nexus locks until T1 does") keeps dependency cycles from
//! spanning groups (Theorem 4.3.2); it is enforced here, across partitions,
//! because one partition sees only its own rows.
//!
//! Mechanisms inside a group:
//! - `2pl`: plain two-phase locking among the group's transactions.
//! - `chop`: every statement is a piece that commits on its own as soon as
//!   it ran (the finest chopping; transaction chopping's commit-per-piece
//!   behaviour). Its pieces' locks become nexus locks at once, so later
//!   same-group transactions go ahead while the transaction still runs.
//!   Only for procedures whose aborts all come from their first statement
//!   (rollback safety): a later piece cannot be undone.
//! - `sc`: classic transaction chopping (the SC-cycle analysis) of the
//!   group's procedures against each other; each piece, one or more
//!   statements, commits on its own like a `chop` piece (`sc.rs`).
//!
//! Procedures in no group and interactive transactions run in the default
//! group: the `acid` protocol, under ACID locks (a group of its own to
//! every nexus lock).
//!
//! Files: `grouping.rs` (groupings), `pieces.rs` (the analysis' pieces and
//! safe mode), `board.rs` (each transaction's progress, the release
//! order), `state.rs` (a transaction's state at its coordinator),
//! `run.rs` (a call: attempts, commit, `chop`), `pipeline.rs` (Runtime
//! Pipelining's piece ends and rank waits), `sc.rs` (classic chopping),
//! `partition.rs` and `nexus_uses.rs` (Callas' rules at the partition).
//!
//! User guide: `docs/callas.md`.

mod across;
mod board;
mod grouping;
mod nexus_uses;
mod partition;
mod pieces;
mod pipeline;
mod run;
mod sc;
mod state;
#[cfg(test)]
mod tests;

pub use board::{CallasRequest, Homes, NexusBoard, Progress, Seen, MAX_CHAIN};
pub use grouping::{GroupDef, Grouping, Mechanism};
pub use partition::CallasRules;
pub use pieces::{plan_pieces, Placed, ProcPieces, SafeMode, SafeModeConfig};

/// What the files of this module share.
mod prelude {
    pub use std::collections::{HashMap, HashSet};
    pub use std::fmt;
    pub use std::str::FromStr;
    pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
    pub use std::sync::Arc;
    pub use std::time::{Duration, Instant};

    pub use brine_core::{AbortCause, Error, NodeId, Result, TxnId, Value};
    pub use parking_lot::Mutex;
    pub use rustc_hash::FxHashMap;
    pub use serde::{Deserialize, Serialize};
    pub use smallvec::SmallVec;
    pub use tokio::sync::Notify;

    pub use super::board::{NexusBoard, Progress, MAX_CHAIN};
    pub use super::grouping::{Grouping, Mechanism};
    pub use super::pieces::{Placed, ProcPieces};
    pub use super::state::{state_mut, state_ref, CallasState};
    pub use super::{callas_of, Callas, CallasMsg, CallasStmt};
    pub use crate::coordinator::{
        abort, commit_keeping_after, CallOutcome, ProcCtx, Retries, Sent, Shared, TxnState,
    };
    pub use crate::message::PartitionMsg;
    pub use crate::partition::Ending;
}

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{Error, Result, TxnId, Value};
use brine_lock::DeadlockPolicy;
use brine_sql::{Plan, QueryResult};
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::{gather, Registration};
use crate::coordinator::{run_acid, CallOutcome, ProcCtx, Shared};
use crate::message::{LockSpec, PartitionMsg};
use crate::partition::{Partition, PartitionParts};
use crate::protocol::{Call, Isolation, Mutation, Protocol, Setup, Statements};
use crate::stats::{Counter, Kept};

/// `callas`: the cluster's grouping (`ClusterConfig::grouping`; none:
/// every procedure in one `2pl` group), checked against the procedures.
pub const CALLAS: Registration = Registration {
    name: "callas",
    deadlock: DeadlockPolicy::Detect,
    build: |config, procedures| {
        let grouping = match &config.grouping {
            Some(g) => {
                g.validate(procedures.iter().copied())?;
                g.clone()
            }
            None => Grouping::one_group(procedures.iter().copied()),
        };
        Ok(Arc::new(Callas {
            safe_mode: config.safe_mode,
            rank_holds: config.rank_holds,
            exact_deps: config.mutation == Some(Mutation::ExactCallasDeps),
            release_order: config.mutation != Some(Mutation::NoNexusReleaseOrder),
            ..Callas::new(grouping)
        }))
    },
};

/// The Callas protocol (DESIGN 4.4): procedures of a group run under that
/// group's mechanism and nexus locks; the rest, and interactive
/// transactions, as in `acid` (the default group).
pub struct Callas {
    pub grouping: Grouping,
    /// When a Runtime Pipelining group goes rollback-safe.
    pub safe_mode: SafeModeConfig,
    /// `ClusterConfig::rank_holds`.
    pub rank_holds: bool,
    /// `Mutation::ExactCallasDeps`: dependencies only between accesses to
    /// exactly the same row or range (checker validation only).
    exact_deps: bool,
    /// The nexus release order is kept (off only under
    /// `Mutation::NoNexusReleaseOrder`).
    release_order: bool,
    /// The pieces of each procedure of an `rp` group (Runtime Pipelining)
    /// or an `sc` group (classic chopping), planned at start.
    pieces: HashMap<String, Arc<ProcPieces>>,
    /// Which transactions still hold nexus locks, and how far each got.
    board: Arc<NexusBoard>,
    /// Across processes, the node this process is (`None`: the embedded
    /// cluster). An `sc` roll-forward there gathers its contexts from
    /// every process (`across.rs`).
    home: Option<brine_core::NodeId>,
    /// This process announced its restart (`Protocol::announced`).
    announced: Arc<tokio::sync::watch::Sender<bool>>,
    /// Roll-forwards across processes still running, for
    /// `Protocol::quiesce`.
    rolling: gather::Rolling,
    /// The engine and the procedures, for the roll-forward of a
    /// transaction given up in doubt.
    attached: std::sync::OnceLock<(std::sync::Weak<Shared>, across::Procedures)>,
}

/// The Callas protocol a Callas transaction runs under.
pub fn callas_of(shared: &Shared) -> &Callas {
    shared
        .protocol
        .as_any()
        .downcast_ref::<Callas>()
        .expect("a Callas transaction runs under the Callas protocol")
}

/// What a grouped statement tells Callas' rules at its partitions
/// (`PartitionMsg::Execute`'s `ext`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallasStmt {
    /// Track which columns the statement uses on each row, to declare
    /// same-group dependencies (groups whose mechanism uses them: `rp`,
    /// `chop`, `sc`).
    pub track: bool,
    /// Runtime Pipelining: the statement is a blind increment by primary
    /// key after which its piece neither writes its row nor reads a column
    /// of it that the group writes, so once it has run its member lock on
    /// the row becomes the group's nexus lock (as at the piece's end) if
    /// the transaction did nothing but increment that row
    /// (`Placed::ends_row`).
    pub end_row: bool,
    /// Runtime Pipelining: the statement is the last of its piece, of this
    /// rank (outside any loop; `Placed::ends_piece`), so once it has run
    /// here the piece has ended here: its member locks here become nexus
    /// locks, and statements held for its rank (`after_rank`) go on.
    pub ends_piece: Option<u32>,
    /// Runtime Pipelining: the statement's piece (number, rank). A
    /// statement of a later piece than the one its transaction has open
    /// at the partition ends that one there, as its `EndPiece` would: the
    /// coordinator sends that before the later piece's statements, but
    /// across processes a one-way message may arrive after them (or be
    /// lost).
    pub piece: Option<(u32, Option<u32>)>,
    /// Runtime Pipelining: the rank-progress wait, held here. The
    /// statement waits, before it locks anything, until the transaction
    /// named has ended a piece of at least this rank here (or ended here),
    /// or until its coordinator sends `RankGo` (the transaction reached the
    /// rank elsewhere). So a pipelined follower's statement is on its way
    /// while the transaction it follows runs, not sent after it.
    pub after_rank: Option<(TxnId, u32)>,
}

/// Callas' own messages to its rules at a partition
/// (`PartitionMsg::Protocol`). One-way: across processes they are
/// answered with nothing, once delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CallasMsg {
    /// Runtime Pipelining: piece `piece` of `owner` (of rank `rank`)
    /// ended; its piece-level (member) locks here become nexus locks. One
    /// that arrives after a statement of a later piece is ignored (that
    /// statement ended the piece here, see `CallasStmt::piece`).
    EndPiece {
        owner: TxnId,
        piece: u32,
        rank: Option<u32>,
    },
    /// Runtime Pipelining: the statement of `txn` held here for `after`
    /// (`CallasStmt::after_rank`) may go on: its coordinator saw the
    /// transaction reach the rank (or end).
    RankGo { txn: TxnId, after: (TxnId, u32) },
}

impl CallasMsg {
    pub(crate) fn send(self, shared: &Shared, node: brine_core::NodeId, p: usize) {
        shared.send(node, p, PartitionMsg::Protocol(Box::new(self)));
    }
}

/// Callas' counters. At the coordinators: times a Runtime Pipelining group
/// went rollback-safe; pieces that waited for a transaction they depend on
/// to reach their rank (or commit), and for how long; commits that waited
/// for a transaction they depend on to commit, and for how long; cycles of
/// nexus release waits (a bug if ever counted); `sc` transactions rolled
/// forward after a crash. At the partitions: rank
/// waits held there (`CallasStmt::after_rank`), and for
/// how long; rows of open `sc` transactions locked again at a restart.
const COUNTERS: &[Counter] = &[
    counter(
        "safe_mode_switches",
        Kept::Coordinator,
        SAFE_MODE_SWITCHES,
        1,
    ),
    counter("rank_waits", Kept::Coordinator, RANK_WAITS, 1),
    counter("rank_wait_us_total", Kept::Coordinator, RANK_WAIT_NS, 1000),
    counter("commit_waits", Kept::Coordinator, COMMIT_WAITS, 1),
    counter(
        "commit_wait_us_total",
        Kept::Coordinator,
        COMMIT_WAIT_NS,
        1000,
    ),
    // Cycles of nexus release waits: none in any execution (see
    // `NexusBoard::wait_in_order`); one counted here is a bug, and fails
    // `brine bench --check`.
    counter("release_cycles", Kept::Coordinator, RELEASE_CYCLES, 1),
    counter("rolled_forward", Kept::Coordinator, ROLLED_FORWARD, 1),
    counter("rank_holds", Kept::Partition, RANK_HOLDS, 1),
    counter("rank_hold_us_total", Kept::Partition, RANK_HOLD_NS, 1000),
    counter("relocked", Kept::Partition, RELOCKED, 1),
];
const SAFE_MODE_SWITCHES: usize = 0;
const RANK_WAITS: usize = 1;
const RANK_WAIT_NS: usize = 2;
const COMMIT_WAITS: usize = 3;
const COMMIT_WAIT_NS: usize = 4;
const RELEASE_CYCLES: usize = 5;
const ROLLED_FORWARD: usize = 6;
/// The first byte of Callas' messages across processes.
const CALLAS_TAG: u8 = 0;
const CONTEXTS_TAG: u8 = 1;
const RANK_HOLDS: usize = 0;
const RANK_HOLD_NS: usize = 1;
/// Rows of open `sc` transactions a restarted partition locked again
/// (`partition::relock_open_contexts`).
const RELOCKED: usize = 2;

const fn counter(name: &'static str, kept: Kept, slot: usize, divisor: u64) -> Counter {
    Counter {
        name,
        kept,
        slot,
        divisor,
    }
}

/// The statements of a grouped transaction.
pub struct GroupedStatements;

impl Statements for GroupedStatements {
    fn exec<'a>(
        &'a self,
        ctx: &'a mut ProcCtx,
        statement: &'a str,
        plan: Arc<Plan>,
        args: Vec<Value>,
    ) -> BoxFuture<'a, Result<QueryResult>> {
        Box::pin(run::exec(ctx, statement, plan, args))
    }
}

impl Protocol for Callas {
    fn name(&self) -> &'static str {
        "callas"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn start(&self, setup: &Setup<'_>) -> Result<Option<Arc<dyn Protocol>>> {
        let pieces = plan_pieces(
            &self.grouping,
            setup.app_name,
            setup.ddl,
            setup.procedures,
            self.safe_mode,
        )?;
        // Across processes, transactions homed elsewhere are mirrored
        // from their homes' boards.
        let board = match &setup.hosting {
            Some(h) => NexusBoard::multi_process(h.node, homes(h.peers.clone())),
            None => Arc::default(),
        };
        Ok(Some(Arc::new(Callas {
            safe_mode: self.safe_mode,
            rank_holds: self.rank_holds,
            exact_deps: self.exact_deps,
            release_order: self.release_order,
            pieces,
            board,
            home: setup.hosting.as_ref().map(|h| h.node),
            ..Callas::new(self.grouping.clone())
        })))
    }

    /// With a log, `sc` transactions a crash cut between two pieces are
    /// rolled forward at recovery (across processes from the contexts of
    /// every process, `across.rs`); `chop` has no roll-forward and is
    /// refused.
    fn check_deployment(&self, _multi_process: bool, durable: bool) -> Result<()> {
        if !durable {
            return Ok(());
        }
        if let Some(g) = self
            .grouping
            .groups
            .iter()
            .find(|g| g.mechanism == Mechanism::Chop)
        {
            return Err(Error::Config(format!(
                "Callas group `{}` ({}) commits its pieces one by one with durability `wal`: a \
                 crash between two of its pieces would leave the rest to be rolled forward at \
                 recovery, which `chop` does not do; run it as `sc` (rolled forward), `rp` or \
                 `2pl`, or with --durability none",
                g.name, g.mechanism
            )));
        }
        Ok(())
    }

    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        match self.grouping.group_of(&call.proc.name) {
            Some(group) => Box::pin(run::run_grouped(self, call, group)),
            None => Box::pin(run_acid(call)),
        }
    }

    /// `sc` transactions a crash cut between two pieces are rolled
    /// forward (`run::roll_forward`): in one process from this log, before
    /// the cluster takes new work; across processes from the contexts of
    /// every process, in the background (`across::recover`).
    fn recover<'a>(
        &'a self,
        shared: &'a Arc<crate::coordinator::Shared>,
        node: brine_core::NodeId,
        procedures: &'a HashMap<String, Arc<crate::procedure::PreparedProc>>,
        unfinished: Vec<brine_storage::wal::record::BaseContext>,
    ) -> BoxFuture<'a, ()> {
        if self.home.is_some() {
            across::recover(self, shared, node, Arc::new(procedures.clone()));
            return Box::pin(async {});
        }
        Box::pin(run::roll_forward(
            self, shared, node, procedures, unfinished,
        ))
    }

    /// Across processes every restart of a node with `sc` groups gathers
    /// their contexts from every process, whatever its own log holds.
    fn recovers_from_log(&self) -> bool {
        self.home.is_some()
            && self
                .grouping
                .groups
                .iter()
                .any(|g| g.mechanism == Mechanism::Sc)
    }

    fn attach(
        &self,
        shared: &Arc<Shared>,
        procedures: &Arc<HashMap<String, Arc<crate::procedure::PreparedProc>>>,
    ) {
        let _ = self
            .attached
            .set((Arc::downgrade(shared), procedures.clone()));
    }

    fn announced(&self) {
        self.announced.send_replace(true);
    }

    fn peer_restarted(
        &self,
        shared: &Arc<Shared>,
        me: brine_core::NodeId,
        peer: brine_core::NodeId,
    ) {
        across::peer_restarted(self, shared, me, peer);
    }

    /// Waits until the roll-forwards across processes are done, so a
    /// check reads no chopped transaction half done.
    fn quiesce(&self, within: std::time::Duration) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.rolling.settled(within, "Callas: chopped transactions"))
    }

    fn counters(&self) -> &'static [Counter] {
        COUNTERS
    }

    fn rules_kept(&self, stats: &crate::StatsSnapshot) -> Result<()> {
        match stats.counter("release_cycles") {
            0 => Ok(()),
            n => Err(Error::Internal(format!(
                "{n} cycle(s) of nexus release waits: the group's dependencies were not those of \
                 a serializable execution (a bug; see the log)"
            ))),
        }
    }

    fn spawn_partition(&self, parts: PartitionParts, rx: mpsc::UnboundedReceiver<PartitionMsg>) {
        let rules =
            CallasRules::new(self.exact_deps).with_procedure_groups(self.procedure_groups());
        let mut p = Partition::new(parts, rules);
        // Runtime Pipelining lets several running transactions change one
        // row: the log's redo and the checkpoints account for that.
        let pipelined = self
            .grouping
            .groups
            .iter()
            .any(|g| g.mechanism == Mechanism::Rp);
        p.store.set_shared_rows(pipelined);
        tokio::spawn(p.run(rx));
    }

    fn describe(&self, m: &mut serde_json::Map<String, serde_json::Value>) {
        m.insert("grouping".into(), self.grouping.to_string().into());
        if self
            .grouping
            .groups
            .iter()
            .any(|g| matches!(g.mechanism, Mechanism::Rp | Mechanism::Sc))
        {
            // Runtime Pipelining orders conflicts per column, and the
            // chopping analyses cut pieces by column (docs/callas.md).
            m.insert("granularity".into(), "column".into());
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// Callas' own messages (one-way), and the gathering of `sc`
    /// transactions' contexts (`gather::OpenContexts`, answered): a first
    /// byte tells them apart.
    fn encode_message(
        &self,
        msg: Box<dyn Any + Send>,
    ) -> Result<(Vec<u8>, crate::protocol::WireAnswer)> {
        let (tag, (body, answer)) = match msg.downcast::<gather::OpenContexts>() {
            Ok(open) => (CONTEXTS_TAG, gather::encode(*open)?),
            Err(msg) => (
                CALLAS_TAG,
                crate::protocol::encode_message_as("Callas", msg, |msg: CallasMsg| {
                    let bytes = postcard::to_stdvec(&msg)
                        .map_err(|e| Error::Internal(format!("a Callas message: {e}")))?;
                    let no_answer: crate::protocol::WireAnswer = Box::new(|_| Ok(()));
                    Ok((bytes, no_answer))
                })?,
            ),
        };
        let mut bytes = Vec::with_capacity(body.len() + 1);
        bytes.push(tag);
        bytes.extend_from_slice(&body);
        Ok((bytes, answer))
    }

    fn decode_message(
        &self,
        link: &crate::link::Link,
        node: brine_core::NodeId,
        bytes: &[u8],
    ) -> Result<(Box<dyn Any + Send>, crate::protocol::WireAnswering)> {
        match bytes.split_first() {
            Some((&CONTEXTS_TAG, body)) => {
                crate::protocol::decoded_message(gather::decode(link, node, body))
            }
            Some((&CALLAS_TAG, body)) => {
                let msg: CallasMsg = postcard::from_bytes(body)
                    .map_err(|e| Error::Transport(format!("a Callas message: {e}")))?;
                Ok((Box::new(msg), Box::pin(async { Ok(Vec::new()) })))
            }
            _ => Err(Error::Transport(
                "a Callas message of no kind Callas knows".into(),
            )),
        }
    }

    fn encode_ext(&self, ext: &(dyn Any + Send + Sync)) -> Result<Vec<u8>> {
        let words = ext
            .downcast_ref::<CallasStmt>()
            .ok_or_else(|| Error::Internal("statement words Callas does not know".into()))?;
        postcard::to_stdvec(words).map_err(|e| Error::Internal(format!("Callas words: {e}")))
    }

    fn decode_ext(&self, bytes: &[u8]) -> Result<crate::message::StmtExt> {
        let words: CallasStmt = postcard::from_bytes(bytes)
            .map_err(|e| Error::Internal(format!("Callas words: {e}")))?;
        Ok(Some(Arc::new(words)))
    }

    /// Watches from other processes of the transactions homed here.
    fn serve<'a>(&'a self, bytes: Vec<u8>) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move { self.board.serve(&bytes).await })
    }
}

/// How a process's board reaches the other processes' Callas: a
/// `WireRequest::Protocol` to the node.
fn homes(peers: HashMap<brine_core::NodeId, Arc<crate::remote::PeerClient>>) -> Homes {
    use crate::remote::{WireRequest, WireResponse};
    Arc::new(move |node, bytes| {
        let peer = peers.get(&node).cloned();
        Box::pin(async move {
            let peer = peer.ok_or_else(|| {
                Error::Config(format!("Callas: node {} is not in the cluster", node.0))
            })?;
            match peer.request(WireRequest::Protocol { bytes }).await {
                Ok(WireResponse::Protocol(answer)) => answer,
                Ok(other) => Err(crate::remote::unexpected(&other)),
                Err(e) => Err(Error::Transport(format!(
                    "node {} at {}: {e}",
                    node.0,
                    peer.addr()
                ))),
            }
        })
    })
}

impl Callas {
    /// Callas with `grouping` and every other setting at its default, in
    /// one process, before it starts.
    fn new(grouping: Grouping) -> Callas {
        Callas {
            grouping,
            safe_mode: SafeModeConfig::default(),
            rank_holds: false,
            exact_deps: false,
            release_order: true,
            pieces: HashMap::new(),
            board: Arc::default(),
            home: None,
            announced: Arc::new(tokio::sync::watch::Sender::new(false)),
            rolling: gather::Rolling::default(),
            attached: std::sync::OnceLock::new(),
        }
    }

    /// The group of each grouped procedure, by name.
    fn procedure_groups(&self) -> Arc<HashMap<String, u32>> {
        let mut groups = HashMap::new();
        for g in &self.grouping.groups {
            for name in &g.procedures {
                if let Some((id, _)) = self.grouping.group_of(name) {
                    groups.insert(name.clone(), id);
                }
            }
        }
        Arc::new(groups)
    }

    /// The pieces of procedure `name`, if its group is cut into pieces.
    fn pieces_of(&self, name: &str) -> Option<Arc<ProcPieces>> {
        self.pieces.get(name).cloned()
    }

    /// Whether transaction `txn` still holds nexus locks.
    fn holds(&self, txn: TxnId) -> bool {
        self.board.holds(txn)
    }
}
