//! The TSO as a service: one task owning the oracle ([`Tso`]), on a node
//! of its own, answering coordinators over the link; it ticks the global
//! clock by Delta and collects its ring periodically.

use std::time::Duration;

use brine_core::NodeId;
use tokio::sync::mpsc;

use super::kv::Item;
use super::store::Ts;
use super::tso::{Refusal, Tso, TsoConfig};
use crate::link::Link;
use crate::message::Reply;

/// How often the clock ticks and the ring is collected.
const TICK: Duration = Duration::from_millis(10);

/// A transaction's start: its timestamp and the oracle's state it needs
/// (transactions serialized before it, still writing back).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Begun {
    pub start: Ts,
    pub pending: Vec<(Ts, Vec<Item>)>,
}

/// Requests to the TSO.
pub enum TsoMsg {
    Begin {
        reply: Reply<Begun>,
    },
    TryCommit {
        start: Ts,
        writes: Vec<Item>,
        checked: Vec<(Item, Ts)>,
        reply: Reply<Result<Ts, Refusal>>,
    },
    /// The transaction serialized at `commit` wrote back.
    Committed {
        commit: Ts,
        start: Ts,
    },
    /// It failed after serialization (a native conflict).
    Aborted {
        commit: Ts,
        start: Ts,
    },
    /// A transaction that never asked to commit ended.
    Ended {
        start: Ts,
    },
    /// The oldest snapshot still in use (`Tso::oldest_active`).
    Oldest {
        reply: Reply<Ts>,
    },
    /// The commits serialized whose end the TSO has not heard of (commit
    /// and start timestamps): the helper's candidates.
    Unresolved {
        reply: Reply<Vec<(Ts, Ts)>>,
    },
    /// The status of the commit serialized at `commit` (`None`: no longer
    /// in the ring, so complete).
    Status {
        commit: Ts,
        reply: Reply<Option<super::tso::Status>>,
    },
    /// The TSO stops (operations, and tests of an unreachable TSO): every
    /// later request goes unanswered.
    Stop,
}

/// How long a transaction may hold its snapshot: past this, the TSO gives
/// up on it (`Tso::expire`), so versions can be collected; its later gets
/// and its commit are refused as too old.
pub const SNAPSHOT_LIFETIME: Duration = Duration::from_secs(10);

/// The way to the TSO.
#[derive(Clone)]
pub struct TsoHandle {
    route: Route,
    node: NodeId,
    link: Link,
}

/// Where the TSO runs.
#[derive(Clone)]
enum Route {
    /// In this process: its queue.
    Local(mpsc::UnboundedSender<TsoMsg>),
    /// In another process (node 0's, across processes), over the network.
    Remote(std::sync::Arc<crate::remote::PeerClient>),
}

impl TsoHandle {
    /// Starts the TSO on `node`, its clock above `after` (the newest
    /// timestamp recovery found).
    pub fn spawn(
        link: &Link,
        node: NodeId,
        config: TsoConfig,
        after: Ts,
        lifetime: Duration,
    ) -> TsoHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut tso = Tso::new(config);
        tso.resume(after);
        tokio::spawn(run(tso, rx, lifetime));
        TsoHandle {
            route: Route::Local(tx),
            node,
            link: link.clone(),
        }
    }

    /// The TSO another process hosts (`node`, reached through `peer`).
    pub fn remote(
        link: &Link,
        node: NodeId,
        peer: std::sync::Arc<crate::remote::PeerClient>,
    ) -> TsoHandle {
        TsoHandle {
            route: Route::Remote(peer),
            node,
            link: link.clone(),
        }
    }

    pub fn link(&self) -> Link {
        self.link.clone()
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The TSO's queue, if this process hosts it.
    pub fn local(&self) -> Option<&mpsc::UnboundedSender<TsoMsg>> {
        match &self.route {
            Route::Local(tx) => Some(tx),
            Route::Remote(_) => None,
        }
    }

    /// Sends a message from node `from` (no answer). A TSO that went away
    /// no longer listens: its reply, if any, is dropped.
    pub fn send(&self, from: NodeId, msg: TsoMsg) {
        match &self.route {
            Route::Local(tx) => {
                let tx = tx.clone();
                self.link.send(from, self.node, move || {
                    let _ = tx.send(msg);
                });
            }
            Route::Remote(peer) => {
                let (bytes, answer) = match super::wire::encode_tso(msg) {
                    Ok(encoded) => encoded,
                    Err(e) => {
                        tracing::error!("a TSO message: {e}");
                        return;
                    }
                };
                let peer = peer.clone();
                tokio::spawn(async move {
                    let req = crate::remote::WireRequest::Protocol { bytes };
                    match peer.request(req).await {
                        Ok(crate::remote::WireResponse::Protocol(Ok(bytes))) => {
                            if let Err(e) = answer(bytes) {
                                tracing::error!("the TSO's answer: {e}");
                            }
                        }
                        Ok(other) => tracing::warn!("the TSO: {other:?}"),
                        Err(e) => tracing::warn!("the TSO at {}: {e}", peer.addr()),
                    }
                });
            }
        }
    }

    /// Asks from node `from` and awaits the answer.
    pub async fn ask<T: Send + 'static>(
        &self,
        from: NodeId,
        make: impl FnOnce(Reply<T>) -> TsoMsg,
    ) -> brine_core::Result<T> {
        let (reply, rx) = Reply::channel(&self.link, self.node, from);
        self.send(from, make(reply));
        rx.await
            .map_err(|_| {
                brine_core::Error::Transport(format!(
                    "Mediator: the TSO (node {}) did not answer: it is down or unreachable; native gets and puts still run, transactions cannot begin or commit",
                    self.node.0
                ))
            })
    }
}

async fn run(mut tso: Tso<Item>, mut rx: mpsc::UnboundedReceiver<TsoMsg>, lifetime: Duration) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // Starts in timestamp order with when they were given, to expire the
    // transactions that outlive `lifetime`.
    let mut begun: std::collections::VecDeque<(tokio::time::Instant, Ts)> = Default::default();
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(TsoMsg::Stop) | None => break,
                Some(msg) => handle(&mut tso, msg, &mut begun),
            },
            _ = tick.tick() => {
                tso.tick();
                let now = tokio::time::Instant::now();
                let mut expired_below = None;
                while let Some(&(at, start)) = begun.front() {
                    if !tso.is_active(start) {
                        begun.pop_front();
                        continue;
                    }
                    if now.duration_since(at) < lifetime {
                        break;
                    }
                    begun.pop_front();
                    expired_below = Some(start + 1);
                }
                if let Some(before) = expired_below {
                    let n = tso.expire(before);
                    if n > 0 {
                        tracing::warn!(transactions = n, "Mediator: transactions outlived their snapshot ({lifetime:?}) and were given up");
                    }
                }
                tso.collect();
            }
        }
    }
}

fn handle(
    tso: &mut Tso<Item>,
    msg: TsoMsg,
    begun: &mut std::collections::VecDeque<(tokio::time::Instant, Ts)>,
) {
    match msg {
        TsoMsg::Begin { reply } => {
            let start = tso.begin();
            begun.push_back((tokio::time::Instant::now(), start));
            let pending = tso.pending_before(start);
            reply.send(Begun { start, pending });
        }
        TsoMsg::TryCommit {
            start,
            writes,
            checked,
            reply,
        } => reply.send(tso.try_commit(start, writes.iter(), &checked)),
        TsoMsg::Committed { commit, start } => {
            tso.commit(commit);
            tso.end(start);
        }
        TsoMsg::Aborted { commit, start } => {
            tso.abort(commit);
            tso.end(start);
        }
        TsoMsg::Ended { start } => tso.end(start),
        TsoMsg::Oldest { reply } => reply.send(tso.oldest_active()),
        TsoMsg::Unresolved { reply } => reply.send(tso.unresolved(Ts::MAX)),
        TsoMsg::Status { commit, reply } => reply.send(tso.status(commit)),
        TsoMsg::Stop => {}
    }
}
