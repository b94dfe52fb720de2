//! The Conveyor Belt across processes: one `brine server` per server, the
//! token a message from each server's process to the next.
//!
//! ```text
//!  server p's process                         server p+1's process
//!  visit (the visit lock held):
//!    apply the carried updates p lacks,
//!      in token order; clear p's bits
//!    run the snapshot of p's queue; carry
//!      their updates, pending at every other
//!  pass ── Token {epoch, hop, sequence, carried} ══ TCP ══► accept: Taken
//!          (retried until Taken or Stale;                    (a hop seen
//!           never skipped)                                    twice: Taken)
//!
//!  a server starts (or restarts) ── Join ──► server 0: regenerate
//!    regenerate: Fence{epoch+1} at every server (each waits for its visit
//!      to end, then drops any token of an older epoch) -> the updates each
//!      holds; a token of the new epoch carrying every update some server
//!      lacks, pending at exactly those servers; started at server 0
//! ```
//!
//! What it guarantees, with no acknowledged global lost:
//! - An update is pending at a server until that server applied it (its
//!   bit), so a server that was down gets, once it is back, every update
//!   the token carried past it: the ring waits for it (a token is passed
//!   to the next server only, never around it).
//! - A server's process that dies holding the token (or in the middle of
//!   receiving it) takes the token with it. Its acknowledged globals are in
//!   its log. When it restarts it joins, and joining regenerates the token
//!   from every server's update rows: the new token carries each update to
//!   the servers that lack it, whatever the lost token carried.
//! - Fencing: every server adopts the new epoch (after its visit in
//!   progress ended) before the new token exists, and drops a token of an
//!   older epoch; so no two tokens run visits at once, and the servers'
//!   held updates that the new token is built from are final.
//! - One proposer, server 0, so epochs never collide: a server that asks
//!   to join waits for server 0, as every global waits for every server.
//!
//! Globals wait while a server is down (as a 2PC participant does); local
//! and commutative operations at the live servers go on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use brine_core::{Error, NodeId, Result, Value};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::conveyor::{self, slot, Conveyor, Update};
use super::log;
use super::run::How;
use crate::coordinator::{CallOutcome, Shared};
use crate::procedure::PreparedProc;
use crate::protocol::Mutation;
use crate::remote::{PeerClient, WireRequest, WireResponse};

/// How long an empty token waits at a server with no global queued
/// before it moves on (a global queued meanwhile ends the wait).
const IDLE_PAUSE: Duration = Duration::from_millis(2);
/// The longest pause between two tries to reach a peer.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a joining server's request waits for server 0's regeneration.
const JOIN_WAIT: Duration = Duration::from_secs(600);
/// The most servers a ring has (one bit each in `Carried::pending`).
pub const MAX_SERVERS: u32 = 64;

/// The token as it crosses processes.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Token {
    epoch: u64,
    /// Passes within the epoch: a delivery seen twice is taken once.
    hop: u64,
    /// The last update number given.
    sequence: u64,
    /// In token order.
    carried: Vec<Carried>,
}

/// An update the token carries: its row's fields, and the servers that
/// have not applied it yet (bit s for server s).
#[derive(Debug, Serialize, Deserialize)]
struct Carried {
    seq: u64,
    origin: u32,
    pending: u64,
    body: String,
}

/// Elia's messages between processes (`WireRequest::Protocol`).
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum RingMsg {
    Token(Token),
    /// Adopt `epoch` once the visit in progress ended; answer the updates
    /// held.
    Fence {
        epoch: u64,
    },
    /// The rows of these updates.
    Rows {
        seqs: Vec<u64>,
    },
    /// To server 0: a server (re)started; regenerate the token.
    Join,
    /// Run this call here, placed as `how` says (forwarded by the process
    /// the client reached).
    Call {
        procedure: String,
        args: Vec<Value>,
        how: How,
    },
    Status,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum RingAnswer {
    Taken,
    /// The token is of an older epoch than the server's.
    Stale {
        epoch: u64,
    },
    /// The server restarted and waits for its regeneration.
    Joining,
    /// Held update numbers, as inclusive ranges.
    Fenced {
        held: Vec<(u64, u64)>,
    },
    Refused {
        epoch: u64,
    },
    Rows(Vec<log::Row>),
    Joined,
    Called(Result<(Vec<Value>, u32)>),
    Status(RingStatus),
}

/// What a server's replica holds of the updates, for `Ring::settled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingStatus {
    epoch: u64,
    joining: bool,
    held: u64,
    sum: u64,
    last: u64,
}

struct State {
    epoch: u64,
    last_hop: u64,
    /// Restarted, not fenced by a regeneration yet: takes no token.
    joining: bool,
}

/// The cluster's prepared procedures, by name.
type Procedures = Arc<HashMap<String, Arc<PreparedProc>>>;

/// One process's part of the ring.
pub struct Ring {
    /// The server this process is (`None`: it hosts none, and forwards
    /// every call).
    me: Option<u32>,
    servers: u32,
    peers: HashMap<NodeId, Arc<PeerClient>>,
    conveyor: Arc<Conveyor>,
    attached: OnceLock<(Weak<Shared>, Procedures)>,
    state: Mutex<State>,
    /// Held from a token's arrival until its globals ended.
    visit: tokio::sync::Mutex<()>,
    /// Update numbers this server's replica holds.
    held: Mutex<HashSet<u64>>,
    /// Set once `held` is read from the replica.
    loaded: tokio::sync::watch::Sender<bool>,
    regenerating: tokio::sync::Mutex<()>,
}

fn ranges(held: &HashSet<u64>) -> Vec<(u64, u64)> {
    let mut seqs: Vec<u64> = held.iter().copied().collect();
    seqs.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for q in seqs {
        match out.last_mut() {
            Some((_, b)) if *b + 1 == q => *b = q,
            _ => out.push((q, q)),
        }
    }
    out
}

/// Warns about a peer that cannot be reached at most once a second.
struct Patience {
    backoff: Duration,
    warned: Option<Instant>,
}

impl Patience {
    fn new() -> Patience {
        Patience {
            backoff: Duration::from_millis(5),
            warned: None,
        }
    }

    async fn wait(&mut self, what: impl FnOnce() -> String) {
        if self
            .warned
            .is_none_or(|w| w.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!("elia: {}", what());
            self.warned = Some(Instant::now());
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }
}

impl Ring {
    pub fn new(
        me: Option<u32>,
        servers: u32,
        peers: HashMap<NodeId, Arc<PeerClient>>,
        conveyor: Arc<Conveyor>,
    ) -> Ring {
        conveyor.driven_elsewhere();
        Ring {
            me,
            servers,
            peers,
            conveyor,
            attached: OnceLock::new(),
            state: Mutex::new(State {
                epoch: 0,
                last_hop: 0,
                joining: true,
            }),
            visit: tokio::sync::Mutex::new(()),
            held: Mutex::new(HashSet::new()),
            loaded: tokio::sync::watch::Sender::new(false),
            regenerating: tokio::sync::Mutex::new(()),
        }
    }

    /// The server this process is.
    pub fn me(&self) -> Option<u32> {
        self.me
    }

    /// Whether this process is server `server`.
    pub fn hosts(&self, server: u32) -> bool {
        self.me == Some(server)
    }

    /// The cluster is built: a server's process joins the ring.
    pub fn attach(self: &Arc<Self>, shared: &Arc<Shared>, procedures: &Procedures) {
        if self
            .attached
            .set((Arc::downgrade(shared), procedures.clone()))
            .is_err()
        {
            return;
        }
        if let Some(me) = self.me {
            tokio::spawn(self.clone().join(me));
        }
    }

    pub(super) fn attached(&self) -> Result<(Arc<Shared>, &Procedures)> {
        let (shared, procs) = self
            .attached
            .get()
            .ok_or_else(|| Error::Transport("elia: this server is starting".into()))?;
        let shared = shared
            .upgrade()
            .ok_or_else(|| Error::Transport("elia: this server is shutting down".into()))?;
        Ok((shared, procs))
    }

    fn others(&self, me: u32) -> u64 {
        let all = if self.servers >= 64 {
            u64::MAX
        } else {
            (1u64 << self.servers) - 1
        };
        all & !(1u64 << me)
    }

    /// Sends `msg` to server `server`'s process (never this one's).
    pub(super) async fn ask(
        &self,
        server: u32,
        msg: &RingMsg,
        timeout: Option<Duration>,
    ) -> Result<RingAnswer> {
        let peer = self
            .peers
            .get(&NodeId(server))
            .ok_or_else(|| Error::Config(format!("elia: no address for server {server}")))?;
        let bytes = postcard::to_allocvec(msg)
            .map_err(|e| Error::Internal(format!("elia: encoding a message: {e}")))?;
        let req = WireRequest::Protocol { bytes };
        let answer = match timeout {
            Some(t) => peer.request_with_timeout(req, t).await,
            None => peer.request(req).await,
        };
        match answer {
            Ok(WireResponse::Protocol(Ok(bytes))) => postcard::from_bytes(&bytes)
                .map_err(|e| Error::Transport(format!("elia: server {server}'s answer: {e}"))),
            Ok(WireResponse::Protocol(Err(e))) | Ok(WireResponse::Refused(e)) => Err(e),
            Ok(other) => Err(Error::Transport(format!(
                "elia: server {server} answered {other:?}"
            ))),
            Err(e) => Err(Error::Transport(format!(
                "elia: server {server} at {}: {e}",
                peer.addr()
            ))),
        }
    }

    /// Serves a message of another process (but a call: `Elia::serve`).
    pub(super) async fn handle(self: &Arc<Self>, msg: RingMsg) -> Result<RingAnswer> {
        let me = self
            .me
            .ok_or_else(|| Error::Config("elia: this process is no server".into()))?;
        match msg {
            RingMsg::Token(t) => Ok(self.accept(t)),
            RingMsg::Fence { epoch } => Ok(self.fence(epoch).await),
            RingMsg::Rows { seqs } => {
                let (shared, _) = self.attached()?;
                let st = self.conveyor.log(&shared)?;
                Ok(RingAnswer::Rows(log::rows(&shared, &st, me, &seqs).await?))
            }
            RingMsg::Join if me == 0 => {
                self.regenerate().await?;
                Ok(RingAnswer::Joined)
            }
            RingMsg::Join => Err(Error::Config(format!(
                "elia: server {me} was asked to regenerate the token; server 0 does"
            ))),
            RingMsg::Status => Ok(RingAnswer::Status(self.status())),
            RingMsg::Call { .. } => Err(Error::Internal(
                "elia: a forwarded call reached the ring".into(),
            )),
        }
    }

    /// A token arrives: taken (and visited) unless stale or seen before.
    fn accept(self: &Arc<Self>, token: Token) -> RingAnswer {
        let mut st = self.state.lock();
        if st.joining {
            return RingAnswer::Joining;
        }
        if token.epoch < st.epoch {
            return RingAnswer::Stale { epoch: st.epoch };
        }
        if token.epoch == st.epoch && token.hop <= st.last_hop {
            return RingAnswer::Taken;
        }
        st.epoch = token.epoch;
        st.last_hop = token.hop;
        drop(st);
        tokio::spawn(self.clone().visit(token));
        RingAnswer::Taken
    }

    /// Lines 11-21 of Algorithm 2 at this server, then the pass (with one
    /// server, the token comes straight back).
    async fn visit(self: Arc<Self>, mut token: Token) {
        let Some(me) = self.me else { return };
        loop {
            let Ok((shared, _)) = self.attached() else {
                return;
            };
            let visit = self.visit.lock().await;
            if self.state.lock().epoch > token.epoch {
                // Fenced before the visit began: the regenerated token
                // carries what this one did.
                return;
            }
            if self.apply(&shared, me, &mut token).await {
                self.conveyor.number_from(token.sequence);
                let appended = self.conveyor.run_turn(&shared, me).await;
                let others = self.others(me);
                for u in appended {
                    match log::Body::of(&u).json() {
                        Ok(body) => {
                            self.held.lock().insert(u.seq);
                            token.carried.push(Carried {
                                seq: u.seq,
                                origin: me,
                                pending: others,
                                body,
                            });
                        }
                        Err(e) => {
                            tracing::error!(seq = u.seq, "elia: an update not carried: {e}")
                        }
                    }
                }
                token.sequence = token.sequence.max(self.conveyor.sequence());
            }
            drop(visit);
            drop(shared);
            match self.pass(token).await {
                Some(back) => token = back,
                None => return,
            }
        }
    }

    /// Applies the carried updates this replica lacks, in token order, and
    /// clears its bits; false if it could not (its own globals then wait
    /// for the next visit: running them over a replica that lacks an
    /// earlier update would break token order).
    async fn apply(&self, shared: &Arc<Shared>, me: u32, token: &mut Token) -> bool {
        let bit = 1u64 << me;
        let Ok((_, procedures)) = self.attached() else {
            return false;
        };
        let mut due: Vec<Arc<Update>> = Vec::new();
        {
            let held = self.held.lock();
            for c in token.carried.iter().filter(|c| c.pending & bit != 0) {
                if held.contains(&c.seq) {
                    continue;
                }
                match log::decode(c.seq, c.origin, &c.body, procedures) {
                    Ok(u) => due.push(Arc::new(u)),
                    Err(e) => {
                        tracing::error!(seq = c.seq, "elia: a carried update: {e}");
                        return false;
                    }
                }
            }
        }
        if shared.mutation == Some(Mutation::EliaOutOfOrder) {
            due.reverse();
        }
        let mut ok = true;
        for batch in due.chunks(conveyor::APPLY_BATCH) {
            let refs: Vec<&Arc<Update>> = batch.iter().collect();
            if let Err(e) = conveyor::apply(shared, &self.conveyor, me, &refs).await {
                tracing::error!(
                    server = me,
                    "elia: applying the token's updates failed: {e}"
                );
                ok = false;
                break;
            }
            self.held.lock().extend(batch.iter().map(|u| u.seq));
        }
        let held = self.held.lock();
        for c in &mut token.carried {
            if held.contains(&c.seq) {
                c.pending &= !bit;
            }
        }
        token.carried.retain(|c| c.pending != 0);
        ok
    }

    /// Line 22: the token to the next server, retried until it is taken
    /// there (or a regeneration made it stale); the token back if this is
    /// the only server.
    async fn pass(&self, mut token: Token) -> Option<Token> {
        let me = self.me?;
        if token.carried.is_empty() && !self.conveyor.queued(me) {
            self.conveyor.queued_within(IDLE_PAUSE).await;
        }
        token.hop += 1;
        let next = (me + 1) % self.servers;
        if next == me {
            self.state.lock().last_hop = token.hop;
            tokio::task::yield_now().await;
            return Some(token);
        }
        let epoch = token.epoch;
        let msg = RingMsg::Token(token);
        let mut patience = Patience::new();
        loop {
            if self.state.lock().epoch > epoch {
                return None;
            }
            let why = match self.ask(next, &msg, None).await {
                Ok(RingAnswer::Taken) => {
                    if let Ok((shared, _)) = self.attached() {
                        shared.counters.protocol.add(slot::TOKEN_HOPS, 1);
                    }
                    return None;
                }
                Ok(RingAnswer::Stale { .. }) => return None,
                Ok(RingAnswer::Joining) => format!("server {next} is joining the ring"),
                Ok(other) => format!("server {next} answered the token with {other:?}"),
                Err(e) => e.to_string(),
            };
            patience
                .wait(|| format!("the token waits for server {next}: {why}"))
                .await;
        }
    }

    /// Adopts `epoch` once the visit in progress (if any) ended; the
    /// updates this replica holds.
    async fn fence(&self, epoch: u64) -> RingAnswer {
        let mut loaded = self.loaded.subscribe();
        let _ = loaded.wait_for(|l| *l).await;
        {
            let mut st = self.state.lock();
            if epoch <= st.epoch {
                return RingAnswer::Refused { epoch: st.epoch };
            }
            st.epoch = epoch;
            st.last_hop = 0;
        }
        let _visit = self.visit.lock().await;
        self.state.lock().joining = false;
        RingAnswer::Fenced {
            held: ranges(&self.held.lock()),
        }
    }

    /// Server 0: a token of a new epoch from every server's rows (see the
    /// module's header). Waits for every server.
    async fn regenerate(self: &Arc<Self>) -> Result<()> {
        let _one = self.regenerating.lock().await;
        let (shared, _) = self.attached()?;
        let n = self.servers;
        let mut proposal = self.state.lock().epoch + 1;
        'propose: loop {
            let mut holders: BTreeMap<u64, u64> = BTreeMap::new();
            for s in 0..n {
                let answer = if self.hosts(s) {
                    self.fence(proposal).await
                } else {
                    let mut patience = Patience::new();
                    loop {
                        match self.ask(s, &RingMsg::Fence { epoch: proposal }, None).await {
                            Ok(a) => break a,
                            Err(e) => {
                                patience
                                    .wait(|| {
                                        format!("token regeneration waits for server {s}: {e}")
                                    })
                                    .await
                            }
                        }
                    }
                };
                match answer {
                    RingAnswer::Fenced { held } => {
                        for (a, b) in held {
                            for q in a..=b {
                                *holders.entry(q).or_default() |= 1u64 << s;
                            }
                        }
                    }
                    RingAnswer::Refused { epoch } => {
                        proposal = epoch + 1;
                        continue 'propose;
                    }
                    other => {
                        return Err(Error::Transport(format!(
                            "elia: server {s} answered a fence with {other:?}"
                        )))
                    }
                }
            }
            let all = self.others(0) | 1;
            // Each update some server lacks, from its lowest holder.
            let mut wanted: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            for (&q, &mask) in &holders {
                if mask != all {
                    wanted.entry(mask.trailing_zeros()).or_default().push(q);
                }
            }
            let mut carried = Vec::new();
            for (holder, seqs) in wanted {
                let rows = if self.hosts(holder) {
                    let st = self.conveyor.log(&shared)?;
                    log::rows(&shared, &st, holder, &seqs).await
                } else {
                    match self.ask(holder, &RingMsg::Rows { seqs }, None).await {
                        Ok(RingAnswer::Rows(rows)) => Ok(rows),
                        Ok(other) => Err(Error::Transport(format!("{other:?}"))),
                        Err(e) => Err(e),
                    }
                };
                let rows = match rows {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(
                            "elia: token regeneration: rows of server {holder}: {e}; starting over"
                        );
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        proposal += 1;
                        continue 'propose;
                    }
                };
                for (seq, origin, body) in rows {
                    let pending = all & !holders.get(&seq).copied().unwrap_or(0);
                    carried.push(Carried {
                        seq,
                        origin,
                        pending,
                        body,
                    });
                }
            }
            carried.sort_by_key(|c| c.seq);
            let sequence = holders
                .keys()
                .next_back()
                .copied()
                .unwrap_or(0)
                .max(self.conveyor.sequence());
            shared.counters.protocol.add(slot::REGENERATIONS, 1);
            tracing::info!(
                epoch = proposal,
                carried = carried.len(),
                sequence,
                "elia: token regenerated"
            );
            let token = Token {
                epoch: proposal,
                hop: 1,
                sequence,
                carried,
            };
            match self.accept(token) {
                RingAnswer::Taken => return Ok(()),
                other => {
                    return Err(Error::Internal(format!(
                        "elia: the regenerated token was not taken here: {other:?}"
                    )))
                }
            }
        }
    }

    /// A server's process starts: it reads what its replica holds (after
    /// its log's recovery), then joins (a regeneration by server 0).
    async fn join(self: Arc<Self>, me: u32) {
        let Ok((shared, _)) = self.attached() else {
            return;
        };
        shared.wait_ready().await;
        let mut patience = Patience::new();
        loop {
            let loaded = async {
                let st = self.conveyor.log(&shared)?;
                log::held(&shared, &st, me).await
            }
            .await;
            match loaded {
                Ok(rows) => {
                    let last = rows.iter().map(|r| r.0).max().unwrap_or(0);
                    self.held.lock().extend(rows.iter().map(|r| r.0));
                    self.conveyor.resume_numbering(last);
                    break;
                }
                Err(e) => {
                    patience
                        .wait(|| format!("server {me} reading its update rows: {e}"))
                        .await
                }
            }
        }
        drop(shared);
        self.loaded.send_replace(true);
        let mut patience = Patience::new();
        loop {
            let joined = if me == 0 {
                self.regenerate().await
            } else {
                match self.ask(0, &RingMsg::Join, Some(JOIN_WAIT)).await {
                    Ok(RingAnswer::Joined) => Ok(()),
                    Ok(other) => Err(Error::Transport(format!("{other:?}"))),
                    Err(e) => Err(e),
                }
            };
            match joined {
                Ok(()) => {
                    tracing::info!(server = me, "elia: joined the ring");
                    return;
                }
                Err(e) => {
                    patience
                        .wait(|| format!("server {me} waits to join the ring: {e}"))
                        .await
                }
            }
        }
    }

    fn status(&self) -> RingStatus {
        let st = self.state.lock();
        let held = self.held.lock();
        RingStatus {
            epoch: st.epoch,
            joining: st.joining,
            held: held.len() as u64,
            sum: held.iter().fold(0u64, |a, &q| a.wrapping_add(q)),
            last: held.iter().copied().max().unwrap_or(0),
        }
    }

    /// Waits until every server holds the same updates, twice in a row
    /// (call it when no call runs). An error after `within`.
    pub async fn settled(&self, within: Duration) -> Result<()> {
        let until = Instant::now() + within;
        let mut before: Option<Vec<RingStatus>> = None;
        loop {
            let mut now = Vec::with_capacity(self.servers as usize);
            for s in 0..self.servers {
                let status = if self.hosts(s) {
                    Ok(self.status())
                } else {
                    match self.ask(s, &RingMsg::Status, None).await {
                        Ok(RingAnswer::Status(x)) => Ok(x),
                        Ok(other) => Err(Error::Transport(format!("{other:?}"))),
                        Err(e) => Err(e),
                    }
                };
                match status {
                    Ok(x) => now.push(x),
                    Err(e) => {
                        tracing::debug!("elia: settling: server {s}: {e}");
                        break;
                    }
                }
            }
            let agree = now.len() == self.servers as usize
                && now.iter().all(|x| {
                    !x.joining && (x.held, x.sum, x.last) == (now[0].held, now[0].sum, now[0].last)
                });
            if agree && before.as_ref() == Some(&now) {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(Error::Internal(format!(
                    "elia: the replicas have not converged after {} s: {now:?}",
                    within.as_secs_f64()
                )));
            }
            before = Some(now);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs a call at server `server`'s process, which the client did not
    /// reach.
    pub(super) async fn forward(
        &self,
        server: u32,
        procedure: &str,
        args: Vec<Value>,
        how: How,
    ) -> Result<CallOutcome> {
        let msg = RingMsg::Call {
            procedure: procedure.to_string(),
            args,
            how,
        };
        match self.ask(server, &msg, None).await {
            Ok(RingAnswer::Called(r)) => {
                r.map(|(values, attempts)| CallOutcome { values, attempts })
            }
            Ok(other) => Err(Error::Transport(format!(
                "elia: server {server} answered a call with {other:?}"
            ))),
            Err(Error::Transport(m)) => Err(Error::Transport(format!(
                "{m} (the call's outcome unknown)"
            ))),
            Err(e) => Err(e),
        }
    }
}
