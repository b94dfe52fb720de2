//! Mediator across processes: its partition messages ([`MediatorMsg`])
//! and the TSO's ([`TsoMsg`]) as bytes (postcard), without their reply
//! paths; the answer comes back as bytes and is delivered to the reply the
//! sender holds.
//!
//! ```text
//!  coordinator's process                        serving process
//!  MediatorMsg{.., reply} ─► encode_partition ─► WireMsg::Protocol ─► decode_partition
//!    reply.send(T) ◄─ WireAnswer(bytes) ◄─ WireResponse::Protocol ◄─ answer(T) as bytes
//!  TsoMsg (TsoHandle::Remote) ─► encode_tso ─► WireRequest::Protocol ─► node 0: serve_tso
//! ```

use brine_core::{Error, Result, Row};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::kv::{Item, KvOp};
use super::partition::MediatorMsg;
use super::service::TsoMsg;
use super::store::Ts;
use crate::link::Link;
use crate::message::Reply;
use crate::protocol::{WireAnswer, WireAnswering};

/// A partition message without its reply.
#[derive(Serialize, Deserialize)]
enum PartitionRequest {
    Get {
        item: Item,
    },
    Put {
        op: KvOp,
    },
    TxGet {
        item: Item,
        ts: Ts,
        fence: bool,
    },
    Check {
        items: Vec<(Item, Ts)>,
        ts: Ts,
        fence: bool,
    },
    Fence {
        ts: Ts,
    },
    WriteBack {
        writes: Vec<(Item, Row)>,
        ts: Ts,
    },
    Collect {
        oldest: Ts,
    },
}

/// A TSO message without its reply.
#[derive(Serialize, Deserialize)]
enum TsoRequest {
    Begin,
    TryCommit {
        start: Ts,
        node: u32,
        writes: Vec<Item>,
        checked: Vec<(Item, Ts)>,
    },
    Committed {
        commit: Ts,
        start: Ts,
    },
    Aborted {
        commit: Ts,
        start: Ts,
    },
    Ended {
        start: Ts,
    },
    Oldest,
    Unresolved,
    Status {
        commit: Ts,
    },
    Epoch,
    Drained {
        node: u32,
        epoch: Ts,
    },
    Restarted {
        node: u32,
        logged: Vec<Ts>,
    },
    Stop,
}

fn to_bytes<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|e| Error::Internal(format!("Mediator wire encoding: {e}")))
}

fn from_bytes<T: DeserializeOwned>(b: &[u8]) -> Result<T> {
    postcard::from_bytes(b)
        .map_err(|e| Error::Transport(format!("a Mediator message that does not decode: {e}")))
}

/// Delivers the answer's bytes to `reply`.
fn answer<T: DeserializeOwned + Send + 'static>(reply: Reply<T>) -> WireAnswer {
    Box::new(move |bytes| {
        reply.send(from_bytes(&bytes)?);
        Ok(())
    })
}

/// A message that is answered by nothing.
fn no_answer() -> WireAnswer {
    Box::new(|_| Ok(()))
}

/// A reply at the serving node, and the future of its answer as bytes.
fn local_reply<T: Serialize + Send + 'static>(
    link: &Link,
    node: brine_core::NodeId,
) -> (Reply<T>, WireAnswering) {
    let (reply, rx) = Reply::channel(link, node, node);
    let answer = Box::pin(async move {
        let v = rx.await.map_err(|_| {
            Error::Transport("a Mediator partition dropped its answer (shutting down?)".into())
        })?;
        to_bytes(&v)
    });
    (reply, answer)
}

pub fn encode_partition(msg: MediatorMsg) -> Result<(Vec<u8>, WireAnswer)> {
    let (req, ans) = match msg {
        MediatorMsg::Get { item, reply } => (PartitionRequest::Get { item }, answer(reply)),
        MediatorMsg::Put { op, reply } => (PartitionRequest::Put { op }, answer(reply)),
        MediatorMsg::TxGet {
            item,
            ts,
            fence,
            reply,
        } => (PartitionRequest::TxGet { item, ts, fence }, answer(reply)),
        MediatorMsg::Check {
            items,
            ts,
            fence,
            reply,
        } => (PartitionRequest::Check { items, ts, fence }, answer(reply)),
        MediatorMsg::Fence { ts, reply } => (PartitionRequest::Fence { ts }, answer(reply)),
        MediatorMsg::WriteBack { writes, ts, reply } => {
            (PartitionRequest::WriteBack { writes, ts }, answer(reply))
        }
        MediatorMsg::Collect { oldest } => (PartitionRequest::Collect { oldest }, no_answer()),
    };
    Ok((to_bytes(&req)?, ans))
}

pub fn decode_partition(
    link: &Link,
    node: brine_core::NodeId,
    bytes: &[u8],
) -> Result<(MediatorMsg, WireAnswering)> {
    Ok(match from_bytes(bytes)? {
        PartitionRequest::Get { item } => {
            let (reply, a) = local_reply(link, node);
            (MediatorMsg::Get { item, reply }, a)
        }
        PartitionRequest::Put { op } => {
            let (reply, a) = local_reply(link, node);
            (MediatorMsg::Put { op, reply }, a)
        }
        PartitionRequest::TxGet { item, ts, fence } => {
            let (reply, a) = local_reply(link, node);
            (
                MediatorMsg::TxGet {
                    item,
                    ts,
                    fence,
                    reply,
                },
                a,
            )
        }
        PartitionRequest::Check { items, ts, fence } => {
            let (reply, a) = local_reply(link, node);
            (
                MediatorMsg::Check {
                    items,
                    ts,
                    fence,
                    reply,
                },
                a,
            )
        }
        PartitionRequest::Fence { ts } => {
            let (reply, a) = local_reply(link, node);
            (MediatorMsg::Fence { ts, reply }, a)
        }
        PartitionRequest::WriteBack { writes, ts } => {
            let (reply, a) = local_reply(link, node);
            (MediatorMsg::WriteBack { writes, ts, reply }, a)
        }
        PartitionRequest::Collect { oldest } => (
            MediatorMsg::Collect { oldest },
            Box::pin(async { Ok(Vec::new()) }),
        ),
    })
}

pub fn encode_tso(msg: TsoMsg) -> Result<(Vec<u8>, WireAnswer)> {
    let (req, ans) = match msg {
        TsoMsg::Begin { reply } => (TsoRequest::Begin, answer(reply)),
        TsoMsg::TryCommit {
            start,
            node,
            writes,
            checked,
            reply,
        } => (
            TsoRequest::TryCommit {
                start,
                node,
                writes,
                checked,
            },
            answer(reply),
        ),
        TsoMsg::Committed { commit, start } => {
            (TsoRequest::Committed { commit, start }, no_answer())
        }
        TsoMsg::Aborted { commit, start } => (TsoRequest::Aborted { commit, start }, no_answer()),
        TsoMsg::Ended { start } => (TsoRequest::Ended { start }, no_answer()),
        TsoMsg::Oldest { reply } => (TsoRequest::Oldest, answer(reply)),
        TsoMsg::Unresolved { reply } => (TsoRequest::Unresolved, answer(reply)),
        TsoMsg::Status { commit, reply } => (TsoRequest::Status { commit }, answer(reply)),
        TsoMsg::Epoch { reply } => (TsoRequest::Epoch, answer(reply)),
        TsoMsg::Drained { node, epoch } => (TsoRequest::Drained { node, epoch }, no_answer()),
        TsoMsg::Restarted {
            node,
            logged,
            reply,
        } => (TsoRequest::Restarted { node, logged }, answer(reply)),
        TsoMsg::Stop => (TsoRequest::Stop, no_answer()),
    };
    Ok((to_bytes(&req)?, ans))
}

/// Serves a TSO request from another process with the TSO this process
/// hosts (`tso`: its queue).
pub async fn serve_tso(
    link: &Link,
    node: brine_core::NodeId,
    tso: &mpsc::UnboundedSender<TsoMsg>,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let gone = || Error::Transport("the TSO stopped".into());
    let (msg, a): (TsoMsg, Option<WireAnswering>) = match from_bytes(bytes)? {
        TsoRequest::Begin => {
            let (reply, a) = local_reply(link, node);
            (TsoMsg::Begin { reply }, Some(a))
        }
        TsoRequest::TryCommit {
            start,
            node: coordinator,
            writes,
            checked,
        } => {
            let (reply, a) = local_reply(link, node);
            (
                TsoMsg::TryCommit {
                    start,
                    node: coordinator,
                    writes,
                    checked,
                    reply,
                },
                Some(a),
            )
        }
        TsoRequest::Committed { commit, start } => (TsoMsg::Committed { commit, start }, None),
        TsoRequest::Aborted { commit, start } => (TsoMsg::Aborted { commit, start }, None),
        TsoRequest::Ended { start } => (TsoMsg::Ended { start }, None),
        TsoRequest::Oldest => {
            let (reply, a) = local_reply(link, node);
            (TsoMsg::Oldest { reply }, Some(a))
        }
        TsoRequest::Unresolved => {
            let (reply, a) = local_reply(link, node);
            (TsoMsg::Unresolved { reply }, Some(a))
        }
        TsoRequest::Status { commit } => {
            let (reply, a) = local_reply(link, node);
            (TsoMsg::Status { commit, reply }, Some(a))
        }
        TsoRequest::Epoch => {
            let (reply, a) = local_reply(link, node);
            (TsoMsg::Epoch { reply }, Some(a))
        }
        TsoRequest::Drained { node, epoch } => (TsoMsg::Drained { node, epoch }, None),
        TsoRequest::Restarted { node: n, logged } => {
            let (reply, a) = local_reply(link, node);
            (
                TsoMsg::Restarted {
                    node: n,
                    logged,
                    reply,
                },
                Some(a),
            )
        }
        TsoRequest::Stop => (TsoMsg::Stop, None),
    };
    tso.send(msg).map_err(|_| gone())?;
    match a {
        Some(a) => a.await,
        None => Ok(Vec::new()),
    }
}
