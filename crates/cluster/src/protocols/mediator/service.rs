//! The TSO as a service: one task owning the oracle ([`Tso`]), on a node
//! of its own, answering coordinators over the link; it ticks the global
//! clock by Delta and collects its ring periodically.
//!
//! Durable across processes ([`TsoDurable`]), it also survives its own
//! restart and its coordinators':
//!
//! ```text
//!  clock ──► lease file (fsync) ahead of it: a restarted TSO resumes
//!            at the lease, above every timestamp it ever handed out
//!  TSO restarts ──► epoch = its first clock; Begin waits until every
//!            node said Drained(epoch): each commit the old TSO
//!            serialized is written back (or aborted) by then, so no new
//!            snapshot misses one (the ring that listed them is gone)
//!  node N restarts ──► Restarted(N, logged): N's commits the ring holds
//!            unresolved and N's log lacks are aborted; the logged ones
//!            stay pending until N's recovery writes them back
//! ```

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

/// How far ahead of the clock one write of the lease reaches, in steps of
/// Delta: at 100 ticks a second and tens of thousands of timestamps a
/// second, a write every few tens of seconds (and 2^24 restarts before
/// the clock's 64 bits run out).
const LEASE_STEPS: Ts = 1 << 20;

/// What the TSO keeps across restarts when the cluster runs durably
/// across processes (module docs).
pub struct TsoDurable {
    /// The file holding the clock's lease.
    pub lease: std::path::PathBuf,
    /// The nodes whose coordinators log their commits (`0..nodes`).
    pub nodes: u32,
}

/// The node a commit's coordinator runs on, where the TSO was not told
/// (a commit the ring got before it knew).
pub const UNKNOWN_NODE: u32 = u32::MAX;

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
        /// The coordinator's node.
        node: u32,
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
    /// and start timestamps, coordinator's node): the helper's candidates.
    Unresolved {
        reply: Reply<Vec<(Ts, Ts, u32)>>,
    },
    /// The TSO's epoch: the clock it started at.
    Epoch {
        reply: Reply<Ts>,
    },
    /// Every commit `node` had in flight when the TSO of `epoch` started
    /// is written back or aborted.
    Drained {
        node: u32,
        epoch: Ts,
    },
    /// `node` restarted and its log holds the commits `logged` (it writes
    /// them back): its other unresolved commits are aborted. Answers the
    /// commit and start timestamps of those in `logged` the ring holds.
    Restarted {
        node: u32,
        logged: Vec<Ts>,
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
    /// timestamp recovery found) and, durable, above its lease.
    pub fn spawn(
        link: &Link,
        node: NodeId,
        config: TsoConfig,
        after: Ts,
        lifetime: Duration,
        durable: Option<TsoDurable>,
    ) -> brine_core::Result<TsoHandle> {
        let (tx, rx) = mpsc::unbounded_channel();
        let service = Service::start(config, after, lifetime, durable)?;
        tokio::spawn(service.run(rx));
        Ok(TsoHandle {
            route: Route::Local(tx),
            node,
            link: link.clone(),
        })
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

/// The clock's lease: no timestamp at or above `until` was handed out
/// by any run of the TSO.
struct Lease {
    path: std::path::PathBuf,
    until: Ts,
}

impl Lease {
    fn read(path: &std::path::Path) -> brine_core::Result<Option<Ts>> {
        match std::fs::read(path) {
            Ok(b) => {
                let bytes: [u8; 8] =
                    b.as_slice()
                        .try_into()
                        .map_err(|_| brine_core::Error::Corrupt {
                            file: path.display().to_string(),
                            offset: 0,
                            reason: format!("a TSO lease of {} bytes (8 expected)", b.len()),
                        })?;
                Ok(Some(Ts::from_le_bytes(bytes)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::durability::io("reading", path, e)),
        }
    }

    /// Moves the lease ahead once the clock has used half of it.
    fn extend(&mut self, clock: Ts, delta: Ts) -> brine_core::Result<()> {
        let reach = LEASE_STEPS * delta;
        if clock.saturating_add(reach / 2) < self.until {
            return Ok(());
        }
        let until = clock.saturating_add(reach);
        crate::durability::write_atomic(&self.path, &until.to_le_bytes())?;
        self.until = until;
        Ok(())
    }
}

/// The TSO's task state.
struct Service {
    tso: Tso<Item>,
    lifetime: Duration,
    /// Starts in timestamp order with when they were given, to expire the
    /// transactions that outlive `lifetime`.
    begun: std::collections::VecDeque<(tokio::time::Instant, Ts)>,
    lease: Option<Lease>,
    /// The clock this run started at.
    epoch: Ts,
    /// After a restart across processes: the nodes that have not said
    /// `Drained` yet; transactions begin once none is left.
    waiting: std::collections::BTreeSet<u32>,
    deferred: Vec<Reply<Begun>>,
    /// The coordinator's node of each commit serialized and unresolved.
    coordinators: std::collections::HashMap<Ts, u32>,
    ticks: u64,
}

impl Service {
    fn start(
        config: TsoConfig,
        after: Ts,
        lifetime: Duration,
        durable: Option<TsoDurable>,
    ) -> brine_core::Result<Service> {
        let mut tso = Tso::new(config);
        tso.resume(after);
        let mut waiting = std::collections::BTreeSet::new();
        let lease = match durable {
            Some(d) => {
                if let Some(until) = Lease::read(&d.lease)? {
                    // A restart: every commit the previous run serialized
                    // must be settled before a snapshot is taken.
                    tso.resume(until);
                    waiting = (0..d.nodes).collect();
                    tracing::info!(
                        clock = tso.clock(),
                        "Mediator TSO restarted above its lease; transactions begin once every node has settled the commits it had in flight"
                    );
                }
                let mut lease = Lease {
                    path: d.lease,
                    until: 0,
                };
                lease.extend(tso.clock(), tso.big_delta())?;
                Some(lease)
            }
            None => None,
        };
        Ok(Service {
            epoch: tso.clock(),
            tso,
            lifetime,
            begun: Default::default(),
            lease,
            waiting,
            deferred: Vec::new(),
            coordinators: Default::default(),
            ticks: 0,
        })
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<TsoMsg>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(TsoMsg::Stop) | None => break,
                    Some(msg) => self.handle(msg),
                },
                _ = tick.tick() => self.tick(),
            }
            if let Some(lease) = &mut self.lease {
                if let Err(e) = lease.extend(self.tso.clock(), self.tso.big_delta()) {
                    // Without a durable lease a restart could hand out a
                    // timestamp again: stop handing any out.
                    tracing::error!(
                        "Mediator TSO: cannot extend its clock's lease ({e}); stopping"
                    );
                    break;
                }
            }
        }
    }

    fn tick(&mut self) {
        self.tso.tick();
        let now = tokio::time::Instant::now();
        let mut expired_below = None;
        while let Some(&(at, start)) = self.begun.front() {
            if !self.tso.is_active(start) {
                self.begun.pop_front();
                continue;
            }
            if now.duration_since(at) < self.lifetime {
                break;
            }
            self.begun.pop_front();
            expired_below = Some(start + 1);
        }
        if let Some(before) = expired_below {
            let n = self.tso.expire(before);
            if n > 0 {
                tracing::warn!(
                    transactions = n,
                    "Mediator: transactions outlived their snapshot ({:?}) and were given up",
                    self.lifetime
                );
            }
        }
        self.tso.collect();
        self.ticks += 1;
        if self.ticks.is_multiple_of(100) {
            let tso = &self.tso;
            self.coordinators
                .retain(|c, _| tso.status(*c) == Some(super::tso::Status::Active));
        }
    }

    fn begin(&mut self, reply: Reply<Begun>) {
        let start = self.tso.begin();
        self.begun.push_back((tokio::time::Instant::now(), start));
        let pending = self.tso.pending_before(start);
        reply.send(Begun { start, pending });
    }

    fn handle(&mut self, msg: TsoMsg) {
        let tso = &mut self.tso;
        match msg {
            TsoMsg::Begin { reply } if self.waiting.is_empty() => self.begin(reply),
            TsoMsg::Begin { reply } => self.deferred.push(reply),
            TsoMsg::TryCommit {
                start,
                node,
                writes,
                checked,
                reply,
            } => {
                let r = tso.try_commit(start, writes.iter(), &checked);
                if let Ok(commit) = r {
                    self.coordinators.insert(commit, node);
                }
                reply.send(r)
            }
            TsoMsg::Committed { commit, start } => {
                tso.commit(commit);
                tso.end(start);
                self.coordinators.remove(&commit);
            }
            TsoMsg::Aborted { commit, start } => {
                tso.abort(commit);
                tso.end(start);
                self.coordinators.remove(&commit);
            }
            TsoMsg::Ended { start } => tso.end(start),
            TsoMsg::Oldest { reply } => reply.send(tso.oldest_active()),
            TsoMsg::Unresolved { reply } => {
                let coordinators = &self.coordinators;
                let node = |c: &Ts| coordinators.get(c).copied().unwrap_or(UNKNOWN_NODE);
                reply.send(
                    tso.unresolved(Ts::MAX)
                        .into_iter()
                        .map(|(c, s)| (c, s, node(&c)))
                        .collect(),
                )
            }
            TsoMsg::Status { commit, reply } => reply.send(tso.status(commit)),
            TsoMsg::Epoch { reply } => reply.send(self.epoch),
            TsoMsg::Drained { node, epoch } => {
                if epoch == self.epoch && self.waiting.remove(&node) && self.waiting.is_empty() {
                    tracing::info!(
                        "Mediator TSO: every node settled its commits; transactions begin"
                    );
                    for reply in std::mem::take(&mut self.deferred) {
                        self.begin(reply);
                    }
                }
            }
            TsoMsg::Restarted {
                node,
                logged,
                reply,
            } => {
                let mut kept = Vec::new();
                for (commit, start) in tso.unresolved(Ts::MAX) {
                    if self.coordinators.get(&commit) != Some(&node) {
                        continue;
                    }
                    if logged.contains(&commit) {
                        kept.push((commit, start));
                    } else {
                        // Never logged: it never will be.
                        tso.abort(commit);
                        tso.end(start);
                        self.coordinators.remove(&commit);
                    }
                }
                reply.send(kept)
            }
            TsoMsg::Stop => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{Link, LinkConfig};
    use brine_core::{Key, TableId, Value};

    fn item(k: i64) -> Item {
        (TableId(0), Key::new([Value::Int(k)]))
    }

    /// A durable TSO whose lease lives in `dir`, for a cluster of two
    /// logging nodes.
    fn spawn(link: &Link, dir: &std::path::Path) -> TsoHandle {
        let durable = TsoDurable {
            lease: dir.join("tso-lease"),
            nodes: 2,
        };
        TsoHandle::spawn(
            link,
            NodeId(3),
            TsoConfig::default(),
            0,
            SNAPSHOT_LIFETIME,
            Some(durable),
        )
        .expect("the TSO starts")
    }

    async fn begin(tso: &TsoHandle) -> Ts {
        tso.ask(NodeId(0), |reply| TsoMsg::Begin { reply })
            .await
            .expect("begun")
            .start
    }

    /// A restart resumes above every timestamp handed out before (the
    /// lease), and a transaction begins only once every logging node has
    /// said it settled the commits it had in flight.
    #[tokio::test]
    async fn a_restarted_tso_resumes_above_its_lease_and_waits_for_every_node() {
        let dir = tempfile::tempdir().expect("tmp");
        let link = Link::new(LinkConfig::default(), 0);
        let first = spawn(&link, dir.path());
        let before = begin(&first).await;
        let epoch = first
            .ask(NodeId(0), |reply| TsoMsg::Epoch { reply })
            .await
            .expect("epoch");
        first.send(NodeId(0), TsoMsg::Stop);

        let again = spawn(&link, dir.path());
        let epoch2 = again
            .ask(NodeId(0), |reply| TsoMsg::Epoch { reply })
            .await
            .expect("epoch");
        assert!(epoch2 > before && epoch2 > epoch, "{epoch2} after {before}");
        let (reply, mut begun) = Reply::channel(&link, NodeId(3), NodeId(0));
        again.send(NodeId(0), TsoMsg::Begin { reply });
        for node in [0, 1] {
            // What the TSO answers after a message, it handled it first
            // (one queue): the Begin is still waiting.
            again
                .ask(NodeId(0), |reply| TsoMsg::Epoch { reply })
                .await
                .expect("epoch");
            assert!(
                begun.try_recv().is_err(),
                "began before node {node} settled its commits"
            );
            // A node that settled for another epoch counts for nothing.
            again.send(
                NodeId(node),
                TsoMsg::Drained {
                    node,
                    epoch: epoch2 - 1,
                },
            );
            again.send(
                NodeId(node),
                TsoMsg::Drained {
                    node,
                    epoch: epoch2,
                },
            );
        }
        let start = begun.await.expect("began once both nodes settled").start;
        assert!(start > epoch2);
    }

    /// A restarted node's commits that its log lacks are aborted; those
    /// it logged stay pending, and the TSO answers their start.
    #[tokio::test]
    async fn a_restarted_node_s_unlogged_commits_are_aborted() {
        let dir = tempfile::tempdir().expect("tmp");
        let link = Link::new(LinkConfig::default(), 0);
        let tso = spawn(&link, dir.path());
        let mut commits = Vec::new();
        for (node, k) in [(1, 1), (1, 2), (0, 3)] {
            let start = begin(&tso).await;
            let commit = tso
                .ask(NodeId(node), |reply| TsoMsg::TryCommit {
                    start,
                    node,
                    writes: vec![item(k)],
                    checked: vec![(item(k), start)],
                    reply,
                })
                .await
                .expect("answered")
                .expect("no conflict");
            commits.push((commit, start));
        }
        let [(unlogged, _), (logged, logged_start), (other, _)] = commits[..] else {
            unreachable!()
        };
        let kept = tso
            .ask(NodeId(1), |reply| TsoMsg::Restarted {
                node: 1,
                logged: vec![logged],
                reply,
            })
            .await
            .expect("answered");
        assert_eq!(kept, vec![(logged, logged_start)]);
        let status = |commit| tso.ask(NodeId(1), move |reply| TsoMsg::Status { commit, reply });
        assert_eq!(
            status(unlogged).await.expect("status"),
            Some(super::super::Status::Aborted)
        );
        assert_eq!(
            status(logged).await.expect("status"),
            Some(super::super::Status::Active)
        );
        // Another node's commit is its own business.
        assert_eq!(
            status(other).await.expect("status"),
            Some(super::super::Status::Active)
        );
        let unresolved = tso
            .ask(NodeId(0), |reply| TsoMsg::Unresolved { reply })
            .await
            .expect("answered");
        assert_eq!(
            unresolved,
            vec![(logged, logged_start, 1), (other, unresolved[1].1, 0)]
        );
    }
}
