//! The client side: the proxy task of a remote partition, which forwards
//! its partition messages to the serving node, follows the readiness of
//! statements gated there, and tracks which incarnation of that node ran
//! each open transaction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brine_core::{Error, TxnId};
use tokio::sync::mpsc;

use super::wire::{unexpected, WireGate, WireMsg, WireRequest, WireResponse};
use super::{PeerClient, Routes};
use crate::message::{Gate, GateNotice, PartitionMsg, PartitionStatus, Reply, Vote, WaitGraph};
use crate::protocol::Protocol;

/// How long a commit decision is retried against an unreachable
/// participant before it is left to that participant's recovery.
const COMMIT_RETRY_FOR: Duration = Duration::from_secs(60);

/// Starts the proxy of remote partition `partition`: messages sent into
/// the returned queue go to the peer over `client`.
pub fn spawn_proxy(
    partition: u32,
    client: Arc<PeerClient>,
    protocol: Arc<dyn Protocol>,
) -> mpsc::UnboundedSender<PartitionMsg> {
    spawn_to(partition, Target::Fixed(client), protocol)
}

/// Starts the proxy of partition `partition` of a cluster with replicated
/// logs: each message goes where `routes` says the partition is served
/// now, this process's own actor included.
pub fn spawn_routed_proxy(
    partition: u32,
    routes: Arc<Routes>,
    protocol: Arc<dyn Protocol>,
) -> mpsc::UnboundedSender<PartitionMsg> {
    spawn_to(partition, Target::Routed(routes), protocol)
}

fn spawn_to(
    partition: u32,
    target: Target,
    protocol: Arc<dyn Protocol>,
) -> mpsc::UnboundedSender<PartitionMsg> {
    let (tx, mut rx) = mpsc::unbounded_channel::<PartitionMsg>();
    let seen = Arc::new(Incarnations::default());
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let msg = match &target {
                Target::Routed(routes) => match routes.local(partition) {
                    Some(local) => {
                        let Some(msg) = moved_here(partition, &seen, msg) else {
                            continue;
                        };
                        match local.send(msg) {
                            Ok(()) => continue,
                            // Its actor stopped: the message goes by the wire.
                            Err(mpsc::error::SendError(msg)) => msg,
                        }
                    }
                    None => msg,
                },
                Target::Fixed(_) => msg,
            };
            // Each request runs on its own: the coordinator never has two
            // requests of one transaction to one partition in flight, so
            // their order cannot matter.
            tokio::spawn(forward(
                partition,
                target.clone(),
                seen.clone(),
                protocol.clone(),
                msg,
            ));
        }
    });
    tx
}

/// A message for the partition's actor in this process, which took the
/// partition over after `msg`'s transaction ran statements at the node
/// that served it before: what the wire answers at a restarted node
/// (the incarnation checks), the statements being lost unless the log
/// has their commit. A statement fails (the transaction aborts: run here,
/// it would hold locks no commit releases), a prepare votes No, a
/// one-round commit is refused (its outcome unknown); `None` when
/// answered here. Anything else goes on to the actor.
fn moved_here(partition: u32, seen: &Incarnations, msg: PartitionMsg) -> Option<PartitionMsg> {
    match msg {
        PartitionMsg::Execute { txn, reply, .. } if seen.expected(txn).is_some() => {
            reply.send(Err(Error::Transport(format!(
                "partition {partition} moved here during transaction {txn}"
            ))));
            None
        }
        PartitionMsg::Abort { txn, .. } | PartitionMsg::Commit { txn, .. }
            if seen.expected(txn).is_some()
                && !matches!(msg, PartitionMsg::Commit { decided: false, .. }) =>
        {
            seen.ended(txn);
            Some(msg)
        }
        PartitionMsg::Prepare { txn, reply, .. } if seen.expected(txn).is_some() => {
            seen.ended(txn);
            reply.send(Vote::No);
            None
        }
        PartitionMsg::Commit {
            txn,
            decided: false,
            reply,
            ..
        } if seen.expected(txn).is_some() => {
            seen.ended(txn);
            reply.send(Err(Error::Transport(format!(
                "partition {partition} moved here since the transaction ran at its previous \
                 node; whether it committed is unknown to this run (the log has it if it did)"
            ))));
            None
        }
        msg => Some(msg),
    }
}

/// Where a proxy's requests go: one node, or wherever the partition is
/// served at each request.
#[derive(Clone)]
enum Target {
    Fixed(Arc<PeerClient>),
    Routed(Arc<Routes>),
}

impl Target {
    fn client(&self, partition: u32) -> Option<Arc<PeerClient>> {
        match self {
            Target::Fixed(c) => Some(c.clone()),
            Target::Routed(r) => r.client(partition),
        }
    }

    fn addr(&self, partition: u32) -> String {
        self.client(partition)
            .map_or_else(|| "(no route)".to_string(), |c| c.addr().to_string())
    }

    /// Sends `req` to the partition's node; a failure (or a refusal: it
    /// no longer serves it) makes routed proxies ask who does.
    async fn request(
        &self,
        partition: u32,
        req: WireRequest,
    ) -> Result<WireResponse, brine_net::NetError> {
        let Some(client) = self.client(partition) else {
            return Err(brine_net::NetError::ConnectionLost {
                addr: "(no route)".into(),
                reason: format!("no node is known to serve partition {partition}"),
            });
        };
        let Target::Routed(routes) = self else {
            return client.request(req).await;
        };
        // A node that no longer serves the partition refuses before doing
        // anything, and one that is down takes nothing: the request goes
        // again, once, where the partition moved.
        let again = |r: &Result<WireResponse, brine_net::NetError>| match r {
            Ok(WireResponse::Refused(Error::Config(m))) => m.contains("does not host partition"),
            // A node restarting serves nothing yet (`brine server`); one
            // that no longer serves the partition says so.
            Ok(WireResponse::Refused(Error::Transport(m))) => {
                m.contains("is starting") || m.contains("does not host partition")
            }
            Err(
                brine_net::NetError::Connect { .. }
                | brine_net::NetError::ConnectTimeout { .. }
                | brine_net::NetError::Unreachable { .. },
            ) => true,
            _ => false,
        };
        let resend = req.clone();
        let tried = routes.serving(partition);
        let answer = client.request(req).await;
        // Against the route the request took: the new one may have been
        // announced (`Serves`) before this asks for it.
        if again(&answer) {
            routes.refresh_now(partition).await;
            if routes.serving(partition) != tried {
                if let Some(moved) = self.client(partition) {
                    return moved.request(resend).await;
                }
            }
        }
        if matches!(answer, Err(_) | Ok(WireResponse::Refused(_))) {
            routes.refresh(partition);
        }
        answer
    }
}

/// Which incarnation of the serving node ran each open transaction's
/// statements. A node that restarted lost what an open transaction did
/// there: its prepare must vote No and its one-round commit must fail,
/// never commit the statements that ran elsewhere without these.
#[derive(Default)]
struct Incarnations {
    by_txn: parking_lot::Mutex<HashMap<TxnId, u64>>,
}

/// Transactions whose end never reaches this proxy (a coordinator that
/// died) would otherwise stay; past this many the map starts over.
const INCARNATIONS_MAX: usize = 1 << 20;

impl Incarnations {
    /// Records the incarnation that ran a statement of `txn`; false if an
    /// earlier statement ran on another one.
    fn ran(&self, txn: TxnId, incarnation: u64) -> bool {
        let mut m = self.by_txn.lock();
        if m.len() >= INCARNATIONS_MAX && !m.contains_key(&txn) {
            tracing::warn!(
                "{INCARNATIONS_MAX} open transactions tracked by one proxy; starting over"
            );
            m.clear();
        }
        *m.entry(txn).or_insert(incarnation) == incarnation
    }

    fn expected(&self, txn: TxnId) -> Option<u64> {
        self.by_txn.lock().get(&txn).copied()
    }

    fn ended(&self, txn: TxnId) {
        self.by_txn.lock().remove(&txn);
    }
}

/// Answers a decision's sending (an abort, a release). Presumed abort: a
/// participant that never hears it because its process died ends the
/// transaction itself when it restarts, so it counts as delivered. One cut
/// off (`brine cut`) still runs and holds the transaction's locks: the
/// reply is dropped, and the coordinator sends the decision again
/// (`until_acked`) until the cut heals.
fn answer_decision<T: Default + Send + 'static>(
    sent: Result<WireResponse, brine_net::NetError>,
    reply: Reply<T>,
    what: &str,
    txn: TxnId,
    unreachable: &dyn Fn(&brine_net::NetError) -> Error,
    answer: impl FnOnce(WireResponse) -> T,
) {
    match sent {
        Err(e @ brine_net::NetError::Cut { .. }) => {
            tracing::debug!(%txn, "{what} not delivered yet: {}", unreachable(&e))
        }
        Err(e) => {
            tracing::warn!(%txn, "{what} not delivered: {}", unreachable(&e));
            reply.send(T::default())
        }
        Ok(r) => reply.send(answer(r)),
    }
}

async fn forward(
    partition: u32,
    client: Target,
    seen: Arc<Incarnations>,
    protocol: Arc<dyn Protocol>,
    msg: PartitionMsg,
) {
    let request = |msg: WireMsg| WireRequest::Partition { partition, msg };
    let unreachable = |e: &brine_net::NetError| {
        Error::Transport(format!(
            "partition {partition} at {}: {e}",
            client.addr(partition)
        ))
    };
    match msg {
        PartitionMsg::Execute {
            txn,
            plan,
            params,
            lock,
            sub,
            call,
            ext,
            gate,
            reply,
        } => {
            let ext = match ext.map(|e| protocol.encode_ext(&*e)).transpose() {
                Ok(ext) => ext,
                Err(e) => {
                    reply.send(Err(e));
                    return;
                }
            };
            let wire_gate = match &gate {
                None => WireGate::None,
                Some(Gate::Local) => WireGate::Local,
                Some(Gate::Coordinated(_)) => WireGate::Coordinated,
            };
            // The coordinator learns the readiness by watching it.
            let watch = match gate {
                Some(Gate::Coordinated(notice)) => Some(tokio::spawn(follow_remote_gate(
                    partition,
                    client.clone(),
                    txn,
                    notice,
                ))),
                _ => None,
            };
            let msg = WireMsg::Execute {
                txn,
                sql: plan.sql().to_string(),
                params,
                lock,
                sub,
                call: call.map(|i| (i.0.clone(), i.1.clone())),
                gate: wire_gate,
                ext,
            };
            let answer = client.request(partition, request(msg)).await;
            if let Some(w) = watch {
                w.abort();
            }
            let answer = match answer {
                Ok(WireResponse::Executed(r, incarnation)) => {
                    if seen.ran(txn, incarnation) {
                        r
                    } else {
                        Err(Error::Transport(format!(
                            "partition {partition} at {} restarted during transaction {txn}",
                            client.addr(partition)
                        )))
                    }
                }
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
        PartitionMsg::Prepare {
            txn,
            ending,
            hold,
            reply,
        } => {
            let expect = seen.expected(txn);
            let vote = match client
                .request(
                    partition,
                    request(WireMsg::Prepare {
                        txn,
                        ending,
                        hold,
                        expect,
                    }),
                )
                .await
            {
                Ok(WireResponse::Vote(v)) => v,
                Ok(other) => {
                    tracing::warn!(%txn, "prepare: {}", unexpected(&other));
                    Vote::No
                }
                Err(e) => {
                    tracing::warn!(%txn, "prepare: {}", unreachable(&e));
                    Vote::No
                }
            };
            if vote != Vote::Yes {
                // No phase two follows a read-only or No vote.
                seen.ended(txn);
            }
            reply.send(vote);
        }
        PartitionMsg::Commit {
            txn,
            ending,
            decided,
            reply,
        } => {
            let expect = seen.expected(txn);
            // A one-round commit is sent again until acknowledged
            // (`until_acked`): each send must carry the incarnation that
            // ran the transaction, or a participant that restarted and lost
            // it would acknowledge a commit of nothing. So the expectation
            // stays until the commit is answered.
            if decided {
                seen.ended(txn);
            }
            let commit = || {
                request(WireMsg::Commit {
                    txn,
                    ending,
                    decided,
                    expect,
                })
            };
            if !decided {
                // One round: sent once here; unanswered, the reply is
                // dropped and the coordinator sends it again
                // (`until_acked`), with the same expected incarnation. A
                // participant that restarted refuses it: whether it
                // committed before the crash is then unknown.
                match client.request(partition, commit()).await {
                    Ok(WireResponse::Ack) => {
                        seen.ended(txn);
                        reply.send(Ok(()))
                    }
                    Ok(other) => {
                        // Refused (a participant that restarted since the
                        // transaction ran there): the outcome is unknown,
                        // and a resend would be refused alike.
                        seen.ended(txn);
                        reply.send(Err(unexpected(&other)))
                    }
                    Err(e) => tracing::warn!(%txn, "commit outcome unknown: {}", unreachable(&e)),
                }
                return;
            }
            let started = Instant::now();
            let mut backoff = Duration::from_millis(10);
            loop {
                let failure = match client.request(partition, commit()).await {
                    Ok(WireResponse::Ack) => break,
                    // Refused: the node is restarting (or no longer hosts it).
                    Ok(other) => unexpected(&other),
                    Err(e) => unreachable(&e),
                };
                if started.elapsed() >= COMMIT_RETRY_FOR {
                    tracing::error!(%txn, "commit not delivered; the participant asks for it at its recovery: {failure}");
                    break;
                }
                tracing::warn!(%txn, "commit not delivered yet, retrying: {failure}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            reply.send(Ok(()));
        }
        PartitionMsg::Abort { txn, ending, reply } => {
            seen.ended(txn);
            let sent = client
                .request(partition, request(WireMsg::Abort { txn, ending }))
                .await;
            answer_decision(sent, reply, "abort", txn, &unreachable, |r| match r {
                WireResponse::Undone(ops) => ops,
                _ => Vec::new(),
            });
        }
        PartitionMsg::Ungate { txn } => {
            if let Err(e) = client
                .request(partition, request(WireMsg::Ungate { txn }))
                .await
            {
                tracing::warn!(%txn, "ungate not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::Protocol(msg) => {
            // The protocol encodes it (Mediator's and Callas' messages).
            // Unanswered, its reply is dropped: the sender sees the
            // partition fail.
            let (bytes, answer) = match protocol.encode_message(msg) {
                Ok(encoded) => encoded,
                Err(e) => {
                    tracing::error!(partition, "a protocol message cannot cross processes: {e}");
                    return;
                }
            };
            match client
                .request(partition, request(WireMsg::Protocol { bytes }))
                .await
            {
                Ok(WireResponse::Protocol(Ok(bytes))) => {
                    if let Err(e) = answer(bytes) {
                        tracing::error!(partition, "a protocol message's answer: {e}");
                    }
                }
                Ok(WireResponse::Protocol(Err(e))) => {
                    tracing::warn!(partition, "a protocol message failed: {e}");
                }
                Ok(other) => tracing::warn!(partition, "{}", unexpected(&other)),
                Err(e) => tracing::warn!(partition, "{}", unreachable(&e)),
            }
        }
        PartitionMsg::Protect { owner } => {
            // Lost, the protection still reaches the partition with the
            // owner's next statement there (`SubStmt::protect`).
            if let Err(e) = client
                .request(partition, request(WireMsg::Protect { owner }))
                .await
            {
                tracing::warn!(%owner, "protection not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::Release {
            owner,
            stages,
            lasting,
            reply,
        } => {
            let sent = client
                .request(partition, request(WireMsg::Release { owner, stages }))
                .await;
            match sent {
                Ok(WireResponse::Ack) => reply.send(()),
                // Not delivered until acknowledged, also where the process
                // died: the reply is dropped, and the coordinator sends the
                // release again until the partition's next incarnation has
                // it.
                Ok(other) if lasting => {
                    tracing::debug!(%owner, "release not delivered yet: {}", unexpected(&other))
                }
                Err(e) if lasting => {
                    tracing::debug!(%owner, "release not delivered yet: {}", unreachable(&e))
                }
                sent => answer_decision(sent, reply, "release", owner, &unreachable, |_| ()),
            }
        }
        PartitionMsg::Load { table, rows, reply } => {
            let answer = match client
                .request(partition, request(WireMsg::Load { table, rows }))
                .await
            {
                Ok(WireResponse::Done(r)) => r,
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
        PartitionMsg::WaitGraph {
            began_by, reply, ..
        } => {
            // A peer that cannot answer shows no waits: its cycles wait
            // for the detector's next round, or for the lock wait timeout.
            // The look's start crosses as an age (clocks of two processes
            // do not compare); the peer counts it from when it reads the
            // request, so its cut-off is later by the wire's one-way
            // latency. The detector's doorbell does not cross the wire:
            // a peer's cycles are found by the detector's periodic look.
            let age = tokio::time::Instant::now()
                .into_std()
                .saturating_duration_since(began_by);
            let older_than_us = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
            let graph = match client
                .request(partition, request(WireMsg::WaitGraph { older_than_us }))
                .await
            {
                Ok(WireResponse::WaitGraph(g)) => g,
                Ok(other) => {
                    tracing::debug!("wait graph: {}", unexpected(&other));
                    WaitGraph::default()
                }
                Err(e) => {
                    tracing::debug!("wait graph: {}", unreachable(&e));
                    WaitGraph::default()
                }
            };
            reply.send(graph);
        }
        PartitionMsg::BreakDeadlock { victim, pass } => {
            if let Err(e) = client
                .request(partition, request(WireMsg::BreakDeadlock { victim, pass }))
                .await
            {
                tracing::warn!(%victim, "deadlock victim not delivered: {}", unreachable(&e));
            }
        }
        PartitionMsg::Status { reply } => {
            let answer = match client.request(partition, request(WireMsg::Status)).await {
                Ok(WireResponse::Status(s)) => s,
                _ => PartitionStatus::default(),
            };
            reply.send(answer);
        }
        PartitionMsg::AbortOrphans { coordinator, reply } => {
            match client
                .request(partition, request(WireMsg::AbortOrphans { coordinator }))
                .await
            {
                Ok(WireResponse::Orphans(in_doubt)) => reply.send(in_doubt),
                Ok(other) => tracing::warn!("abort orphans: {}", unexpected(&other)),
                Err(e) => tracing::warn!("abort orphans: {}", unreachable(&e)),
            }
        }
        PartitionMsg::Verify { reply } => {
            let answer = match client.request(partition, request(WireMsg::Verify)).await {
                Ok(WireResponse::Done(r)) => r,
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(unreachable(&e)),
            };
            reply.send(answer);
        }
    }
}

/// The coordinator's side of a statement gated at a remote partition:
/// watches its readiness there and reports every change through `notice`,
/// until the partition says it is no longer gated (or cannot be reached;
/// then the statement's lock wait timeout ends it).
async fn follow_remote_gate(partition: u32, client: Target, txn: TxnId, notice: GateNotice) {
    loop {
        let msg = WireMsg::WatchGate { txn };
        match client
            .request(partition, WireRequest::Partition { partition, msg })
            .await
        {
            Ok(WireResponse::GateReady(Some(ready))) => notice.send(ready),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{Link, LinkConfig};
    use crate::message::ReleaseStage;
    use brine_core::NodeId;

    /// A release to a process that is gone: answered at once (its locks
    /// died with it), except the end of an accepted BASE transaction,
    /// which goes unanswered so that the coordinator sends it again until
    /// the partition's next incarnation has it.
    #[tokio::test]
    async fn an_accepted_end_is_not_delivered_to_a_dead_process() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("its address")
        };
        // Nothing listens there now.
        let config = brine_net::ClientConfig {
            connect_attempts: 1,
            ..Default::default()
        };
        let client = Arc::new(PeerClient::new(addr.to_string(), config).expect("a client"));
        let protocol = crate::protocols::by_name("salt").expect("salt");
        let link = Link::new(LinkConfig::default(), 0);
        let mut answered = Vec::new();
        for lasting in [false, true] {
            let (reply, rx) = Reply::channel(&link, NodeId(1), NodeId(0));
            let msg = PartitionMsg::Release {
                owner: TxnId { ts: 7, id: 7 },
                stages: vec![ReleaseStage::End],
                lasting,
                reply,
            };
            let seen = Arc::new(Incarnations::default());
            forward(
                0,
                Target::Fixed(client.clone()),
                seen,
                protocol.clone(),
                msg,
            )
            .await;
            answered.push(rx.await.is_ok());
        }
        assert_eq!(answered, [true, false]);
    }
}
