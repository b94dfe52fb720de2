//! Across processes, the contexts of a coordinator's transactions to roll
//! forward (Salt's accepted BASE transactions, Callas' chopped `sc`
//! transactions) are gathered from every partition, in whichever process
//! it is: each partition logged what the subtransactions (pieces) that
//! committed there ran, and a roll-forward needs all of it.
//!
//! ```text
//!  node N restarts ──► recover: OpenContexts { coordinator: N } to every
//!                      partition ──► merged by owner ──► roll forward
//!  N gives a transaction up in doubt (an unanswered commit) ──►
//!                      OpenContexts { owners, fence } to every partition
//!                      (each fences it first) ──► roll forward
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use brine_check::Op;
use brine_core::{Error, NodeId, Result, TxnId};
use brine_storage::wal::codec::Decoder;
use brine_storage::wal::record::{decode_base_context, encode_base_context, BaseContext};
use serde::{Deserialize, Serialize};

use crate::coordinator::Shared;
use crate::link::Link;
use crate::message::{PartitionMsg, Reply};
use crate::partition::{Contexts, Ending, Partition, Stmt};
use crate::protocol::{WireAnswer, WireAnswering};

/// What a protocol's rules keep for [`OpenContexts`] at a partition.
pub(crate) trait GatherRules: crate::partition::Rules + Sized {
    /// The fence of each transaction fenced here, and the contexts of the
    /// subtransactions running here.
    fn fencing(&mut self) -> (&mut rustc_hash::FxHashMap<TxnId, u64>, &Contexts);
}

/// Fences `owner` here at `fence`: its subtransactions older than the
/// fence that have not committed here are aborted (a statement of one
/// waiting for a lock fails), and later statements of such
/// subtransactions are refused ([`fenced_off`]). Returns the
/// subtransactions it aborted.
pub(crate) fn fence<R: GatherRules>(p: &mut Partition<R>, owner: TxnId, fence: u64) -> Vec<TxnId> {
    let (fences, contexts) = p.rules.fencing();
    let f = fences.entry(owner).or_insert(fence);
    *f = (*f).max(fence);
    let mut subs: Vec<TxnId> = contexts
        .subs_of(owner)
        .filter(|sub| sub.id < fence)
        .collect();
    if let Some(parked) = p.parked.get(&owner) {
        let sub = parked.stmt.txn;
        if sub.id < fence && !subs.contains(&sub) {
            subs.push(sub);
        }
    }
    for &sub in &subs {
        tracing::info!(partition = p.id.0, %owner, %sub, "fenced: a subtransaction of a transaction rolled forward is aborted");
        p.forget_aborted(sub);
        p.end_txn(sub, Ending::Sub { owner }, false);
    }
    subs
}

/// Whether `stmt` belongs to a subtransaction its owner's fence here
/// refuses: it was sent before its coordinator gave the transaction up,
/// and the roll-forward runs this part again if it must.
pub(crate) fn fenced_off<R: GatherRules>(p: &mut Partition<R>, stmt: &Stmt) -> bool {
    p.rules
        .fencing()
        .0
        .get(&stmt.owner)
        .is_some_and(|&fence| stmt.txn.id < fence)
}

/// A protocol's message to a partition: the contexts of the transactions
/// that have not ended there, of those `which` names, encoded
/// (`encode_base_context`). With `fence`, the partition first fences
/// those transactions (`which` names them): it aborts their
/// subtransactions with ids below it that have not committed there, and
/// refuses any statement of such a subtransaction that comes later, so a
/// request their coordinator sent before it gave up can no longer commit
/// after their contexts were read (the roll-forward's subtransactions get
/// newer ids).
pub struct OpenContexts {
    pub which: Which,
    pub fence: Option<u64>,
    pub reply: Reply<Answer>,
}

/// A partition's answer to [`OpenContexts`].
#[derive(Default, Serialize, Deserialize)]
pub struct Answer {
    /// The contexts, each encoded (`encode_base_context`), with what
    /// their committed subtransactions recorded (when the run records a
    /// history).
    contexts: Vec<Vec<u8>>,
    /// When the run records a history: the writes the fence undid, by
    /// subtransaction.
    #[serde(with = "crate::message::as_json")]
    undone: Vec<(TxnId, Vec<Op>)>,
}

/// The contexts gathered from every partition, merged by owning
/// transaction, with what their committed subtransactions recorded (when
/// the run records a history; `partition::recorded_ops`).
#[derive(Default)]
pub(crate) struct Gathered {
    pub contexts: Vec<BaseContext>,
    /// What the fence undid, by subtransaction.
    pub undone: Vec<(TxnId, Vec<Op>)>,
}

/// Whose contexts [`OpenContexts`] asks for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Which {
    /// Every transaction coordinated by node `0` (its transaction ids
    /// carry it, `NODE_TXN_SHIFT`).
    CoordinatedBy(u32),
    /// Those of [`Which::CoordinatedBy`] begun by an earlier run of the
    /// node: ids below `before`, its current run's first. A restarted
    /// node's recovery gathers these, never the transactions it runs
    /// already (rolled forward, one of them would run twice).
    EarlierRunsOf {
        node: u32,
        before: u64,
    },
    Owners(Vec<TxnId>),
}

impl Which {
    /// The transactions earlier runs of node `node` began (this run's ids
    /// start at the log's `txn_base`, above the node's).
    pub(crate) fn earlier_runs_of(shared: &crate::coordinator::Shared, node: NodeId) -> Which {
        let base = shared.wal.as_ref().map_or(0, |w| w.txn_base);
        Which::EarlierRunsOf {
            node: node.0,
            before: (u64::from(node.0) << crate::cluster::NODE_TXN_SHIFT) + base,
        }
    }

    fn picks(&self, owner: TxnId) -> bool {
        match self {
            Which::CoordinatedBy(n) => home_of(owner) == NodeId(*n),
            Which::EarlierRunsOf { node, before } => {
                home_of(owner) == NodeId(*node) && owner.id < *before
            }
            Which::Owners(owners) => owners.contains(&owner),
        }
    }
}

/// The node a transaction's coordinator runs on.
pub(crate) fn home_of(t: TxnId) -> NodeId {
    NodeId((t.id >> crate::cluster::NODE_TXN_SHIFT) as u32)
}

/// The partition's answer (its rules' `message`): a partition without a
/// log has no contexts.
pub(crate) fn answer<R: GatherRules>(p: &mut Partition<R>, msg: OpenContexts) {
    let mut undone = Vec::new();
    if let (Some(fence), Which::Owners(owners)) = (msg.fence, &msg.which) {
        for &owner in owners {
            for sub in self::fence(p, owner, fence) {
                let ops = p.store.undone_writes(sub);
                if !ops.is_empty() {
                    undone.push((sub, ops));
                }
            }
        }
    }
    let contexts = p
        .wal
        .as_ref()
        .map(|w| w.open_contexts(|owner| msg.which.picks(owner)))
        .unwrap_or_default();
    let contexts = contexts
        .iter()
        .map(|c| {
            let mut b = Vec::new();
            encode_base_context(&mut b, c);
            b
        })
        .collect();
    msg.reply.send(Answer { contexts, undone });
}

fn to_bytes<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|e| Error::Internal(format!("a contexts message: {e}")))
}

fn from_bytes<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T> {
    postcard::from_bytes(b)
        .map_err(|e| Error::Transport(format!("a contexts message that does not decode: {e}")))
}

/// The coordinator's side across processes (`Protocol::encode_message`).
pub(crate) fn encode(msg: OpenContexts) -> Result<(Vec<u8>, WireAnswer)> {
    let reply = msg.reply;
    let answer: WireAnswer = Box::new(move |bytes| {
        reply.send(from_bytes(&bytes)?);
        Ok(())
    });
    Ok((to_bytes(&(msg.which, msg.fence))?, answer))
}

/// The serving side (`Protocol::decode_message`).
pub(crate) fn decode(
    link: &Link,
    node: NodeId,
    bytes: &[u8],
) -> Result<(OpenContexts, WireAnswering)> {
    let (which, fence): (Which, Option<u64>) = from_bytes(bytes)?;
    let (reply, rx) = Reply::channel(link, node, node);
    let answering: WireAnswering = Box::pin(async move {
        let v = rx.await.map_err(|_| {
            Error::Transport(
                "a partition dropped its answer to a contexts message (shutting down?)".into(),
            )
        })?;
        to_bytes(&v)
    });
    Ok((
        OpenContexts {
            which,
            fence,
            reply,
        },
        answering,
    ))
}

/// How long a partition that does not answer is waited for before the
/// gathering says so in the log (it goes on asking).
const SAY_AFTER: Duration = Duration::from_secs(5);

/// The contexts `which` names, from every partition of the cluster,
/// merged by owner. A partition that does not answer (its process down)
/// is asked again until it does: a roll-forward from part of a context
/// would run again what the missing part records.
pub(crate) async fn gather(
    shared: &Shared,
    node: NodeId,
    which: Which,
    fence: Option<u64>,
) -> Gathered {
    let asks = (0..shared.partitions.len()).map(|p| {
        let which = which.clone();
        async move {
            let started = tokio::time::Instant::now();
            let mut pause = Duration::from_millis(10);
            let mut said = false;
            loop {
                let which = which.clone();
                let make = |reply| {
                    PartitionMsg::Protocol(Box::new(OpenContexts {
                        which,
                        fence,
                        reply,
                    }))
                };
                match tokio::time::timeout(SAY_AFTER, shared.request(node, p, make)).await {
                    Ok(Ok(encoded)) => return encoded,
                    Ok(Err(e)) if !said && started.elapsed() >= SAY_AFTER => {
                        said = true;
                        tracing::warn!(
                            partition = p,
                            "gathering the contexts of transactions to roll forward: {e}; asking again"
                        );
                    }
                    _ => {}
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    });
    let mut merged: BTreeMap<TxnId, BaseContext> = BTreeMap::new();
    let mut undone = Vec::new();
    for answer in futures::future::join_all(asks).await {
        undone.extend(answer.undone);
        for bytes in answer.contexts {
            let c = match decode_base_context(&mut Decoder::new(&bytes)) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("a logged context that does not decode: {e:?}");
                    continue;
                }
            };
            match merged.get_mut(&c.owner) {
                Some(m) => m.absorb(c),
                None => {
                    merged.insert(c.owner, c);
                }
            }
        }
    }
    Gathered {
        contexts: merged.into_values().collect(),
        undone,
    }
}

/// Roll-forwards running in the background (of transactions given up in
/// doubt, or a restarted node's), counted for `Protocol::quiesce`.
#[derive(Clone)]
pub(crate) struct Rolling(std::sync::Arc<tokio::sync::watch::Sender<usize>>);

impl Default for Rolling {
    fn default() -> Self {
        Rolling(std::sync::Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

/// One roll-forward counted by [`Rolling`], until dropped.
pub(crate) struct RollingOne(std::sync::Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for RollingOne {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Rolling {
    /// A roll-forward starts; it is over when the result is dropped.
    pub(crate) fn one(&self) -> RollingOne {
        self.0.send_modify(|n| *n += 1);
        RollingOne(self.0.clone())
    }

    /// Waits until none runs; an error naming `what` after `within`.
    pub(crate) async fn settled(&self, within: Duration, what: &str) -> Result<()> {
        let mut rolling = self.0.subscribe();
        let done = rolling.wait_for(|&n| n == 0);
        tokio::time::timeout(within, done)
            .await
            .map(drop)
            .map_err(|_| Error::Internal(format!("{what} still roll forward after {within:?}")))
    }
}

/// The contexts of `owner` (given up in doubt at its coordinator `node`)
/// from every partition, each fencing it first with a fence newer than
/// any subtransaction its given-up run sent.
pub(crate) async fn fenced(shared: &Shared, node: NodeId, owner: TxnId) -> Gathered {
    let fence = shared.new_txn(None).id;
    gather(shared, node, Which::Owners(vec![owner]), Some(fence)).await
}
