//! The client: one connection shared by any number of tasks, requests
//! correlated with replies by id, reconnection on demand.
//!
//! # What it guarantees
//!
//! - **Correlation.** Every request gets a fresh id (unique for the
//!   client's lifetime); a reply completes exactly the request with its id.
//!   A reply that arrives after its request timed out or was cancelled is
//!   dropped, never handed to another request.
//! - **No request waits forever.** Each request is bounded by its timeout.
//!   When the connection is lost (EOF, reset, bad frame, write stall), every
//!   request in flight on it fails at once with
//!   [`NetError::ConnectionLost`] saying why; requests are not retried,
//!   since the server may have carried them out.
//! - **Reconnection is lazy and bounded.** The next request after a loss
//!   reconnects: at most `connect_attempts` attempts with exponential
//!   backoff, one reconnect at a time however many tasks are waiting, and
//!   tasks that queued behind a failed reconnect get its error rather than
//!   starting their own. A server that answered and refused (wrong version,
//!   full) is not retried.
//! - **Bounded.** At most `max_in_flight` requests await replies; further
//!   callers wait for a slot within their timeout.
//!
//! ```text
//!   task ─┐                                  ┌─> writer task ──> socket
//!   task ─┼─ request(req): id, pending[id] ──┤
//!   task ─┘        ▲                         └── (bounded queue)
//!                  │ oneshot
//!   pending[id] <──┴── reader task <── socket   (EOF/error: fail all pending)
//! ```

use std::any::type_name;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, Instrument};

use crate::config::ClientConfig;
use crate::error::NetError;
use crate::frame::{FrameCodec, FrameReader};
use crate::handshake;
use crate::wire::{Envelope, Kind, RemoteError, RemoteErrorKind};

/// A client for a server speaking `Req` -> `Resp`. Cheap to clone; clones
/// share the connection.
pub struct Client<Req, Resp> {
    inner: Arc<Inner>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for Client<Req, Resp> {
    fn clone(&self) -> Self {
        Client {
            inner: self.inner.clone(),
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> std::fmt::Debug for Client<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &*self.inner.addr.read())
            .field("connected", &self.is_connected())
            .finish()
    }
}

struct Inner {
    /// Where the server is; [`Client::set_addr`] moves it (a node
    /// replaced by a machine at another address).
    addr: parking_lot::RwLock<String>,
    config: ClientConfig,
    /// The connection requests use; the fast path takes only this lock.
    current: parking_lot::Mutex<Option<Arc<Conn>>>,
    /// Held while reconnecting, so there is one reconnect at a time; holds
    /// the last failed reconnect and when it failed.
    reconnect: tokio::sync::Mutex<Option<(Instant, NetError)>>,
    next_id: AtomicU64,
    in_flight: Semaphore,
    /// Until when the client is cut off from its server (`Client::cut_for`).
    cut_until: parking_lot::Mutex<Option<Instant>>,
}

/// One established connection. Dropping the last `Conn` ends its writer,
/// which half-closes the socket.
struct Conn {
    tx: mpsc::Sender<Bytes>,
    pending: Arc<Pending>,
}

/// Requests awaiting replies on one connection, and whether it is lost.
struct Pending {
    state: parking_lot::Mutex<PendingState>,
    lost: CancellationToken,
}

#[derive(Default)]
struct PendingState {
    waiters: HashMap<u64, oneshot::Sender<Result<Envelope, NetError>>>,
    /// Set once, with the first reason the connection was lost.
    lost_because: Option<NetError>,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            state: parking_lot::Mutex::new(PendingState::default()),
            lost: CancellationToken::new(),
        }
    }

    fn register(&self, id: u64) -> Result<oneshot::Receiver<Result<Envelope, NetError>>, NetError> {
        let mut state = self.state.lock();
        if let Some(lost) = &state.lost_because {
            return Err(lost.clone());
        }
        let (tx, rx) = oneshot::channel();
        let previous = state.waiters.insert(id, tx);
        debug_assert!(previous.is_none(), "request id {id} reused");
        Ok(rx)
    }

    /// Hands a reply to its waiter; false if nobody waits for `id`.
    fn complete(&self, id: u64, reply: Envelope) -> bool {
        let waiter = self.state.lock().waiters.remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(Ok(reply));
                true
            }
            None => false,
        }
    }

    fn forget(&self, id: u64) {
        self.state.lock().waiters.remove(&id);
    }

    /// Marks the connection lost and fails every waiter with `error`.
    fn fail_all(&self, error: NetError) {
        let (waiters, error) = {
            let mut state = self.state.lock();
            let error = state.lost_because.get_or_insert(error).clone();
            (std::mem::take(&mut state.waiters), error)
        };
        if !waiters.is_empty() {
            debug!(requests = waiters.len(), %error, "failing requests in flight");
        }
        for (_, tx) in waiters {
            let _ = tx.send(Err(error.clone()));
        }
        self.lost.cancel();
    }

    fn lost_error(&self, addr: &str) -> NetError {
        self.state
            .lock()
            .lost_because
            .clone()
            .unwrap_or_else(|| NetError::ConnectionLost {
                addr: addr.to_owned(),
                reason: "the connection's tasks ended".into(),
            })
    }

    fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}

/// Removes a request's waiter when the request ends early (timeout or the
/// caller dropped the future), so its late reply is recognised as stale.
struct ForgetOnDrop<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.pending.forget(self.id);
    }
}

impl<Req, Resp> Client<Req, Resp> {
    pub fn addr(&self) -> String {
        self.inner.addr.read().clone()
    }

    /// The server moved to `addr`: the connection is dropped (the
    /// requests in flight on it fail as on a lost connection) and the
    /// next request connects there.
    pub fn set_addr(&self, addr: &str) {
        let old = std::mem::replace(&mut *self.inner.addr.write(), addr.to_owned());
        if old == addr {
            return;
        }
        if let Some(conn) = self.inner.current.lock().take() {
            conn.pending.fail_all(NetError::ConnectionLost {
                addr: old,
                reason: format!("the server moved to {addr}"),
            });
        }
    }

    /// Cuts the client off from its server for `d`, as a network partition
    /// would (fault tests, `brine cut`): the connection is dropped, the
    /// requests in flight on it fail, and every request until then fails
    /// at once with [`NetError::Cut`], as one to an unreachable server
    /// would; afterwards the next request connects again.
    pub fn cut_for(&self, d: Duration) {
        *self.inner.cut_until.lock() = Some(Instant::now() + d);
        if let Some(conn) = self.inner.current.lock().take() {
            conn.pending.fail_all(NetError::Cut { addr: self.addr() });
        }
    }

    /// The error of a request while the client is cut off.
    fn cut_off(&self) -> Option<NetError> {
        let mut until = self.inner.cut_until.lock();
        match *until {
            Some(t) if Instant::now() < t => Some(NetError::Cut { addr: self.addr() }),
            Some(_) => {
                *until = None;
                None
            }
            None => None,
        }
    }

    /// Whether a connection is established and not known to be lost.
    pub fn is_connected(&self) -> bool {
        self.inner
            .current
            .lock()
            .as_ref()
            .is_some_and(|conn| !conn.pending.is_lost())
    }
}

impl<Req, Resp> Client<Req, Resp>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    /// A client for `addr` ("host:port"). Does not connect: the first
    /// request does.
    pub fn new(addr: impl Into<String>, config: ClientConfig) -> Result<Self, NetError> {
        config.validate()?;
        let in_flight = Semaphore::new(config.max_in_flight);
        Ok(Client {
            inner: Arc::new(Inner {
                addr: parking_lot::RwLock::new(addr.into()),
                config,
                current: parking_lot::Mutex::new(None),
                reconnect: tokio::sync::Mutex::new(None),
                next_id: AtomicU64::new(1),
                in_flight,
                cut_until: parking_lot::Mutex::new(None),
            }),
            _types: PhantomData,
        })
    }

    /// A client for `addr`, connected and past the handshake, so a wrong
    /// address or version shows up here rather than at the first request.
    pub async fn connect(addr: impl Into<String>, config: ClientConfig) -> Result<Self, NetError> {
        let client = Client::new(addr, config)?;
        client.connection().await?;
        Ok(client)
    }

    /// Sends `req` and waits for its reply, within the configured
    /// `request_timeout` (plus the time to connect, if needed).
    pub async fn request(&self, req: Req) -> Result<Resp, NetError> {
        self.request_with_timeout(req, self.inner.config.request_timeout)
            .await
    }

    /// [`Client::request`] with its own timeout. `timeout` runs from when a
    /// connection is available; connecting has its own bounds
    /// (`connect_attempts` x (`connect_timeout` + `handshake_timeout`) plus
    /// backoff).
    pub async fn request_with_timeout(
        &self,
        req: Req,
        timeout: Duration,
    ) -> Result<Resp, NetError> {
        if let Some(cut) = self.cut_off() {
            return Err(cut);
        }
        let inner = &*self.inner;
        let addr = &self.addr();
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = Envelope::encode(Kind::Request, id, &req).map_err(|e| NetError::Encode {
            what: type_name::<Req>(),
            reason: e.to_string(),
        })?;
        if frame.len() > inner.config.max_frame_bytes {
            return Err(NetError::FrameTooLarge {
                what: "request",
                len: frame.len(),
                max: inner.config.max_frame_bytes,
            });
        }
        let conn = self.connection().await?;
        let exchange = async {
            let _slot = inner
                .in_flight
                .acquire()
                .await
                .map_err(|_| conn.pending.lost_error(addr))?;
            let reply = conn.pending.register(id)?;
            let _forget = ForgetOnDrop {
                pending: &conn.pending,
                id,
            };
            conn.tx
                .send(frame)
                .await
                .map_err(|_| conn.pending.lost_error(addr))?;
            reply.await.map_err(|_| conn.pending.lost_error(addr))?
        };
        let reply = match tokio::time::timeout(timeout, exchange).await {
            Ok(reply) => reply?,
            Err(_) => {
                return Err(NetError::Timeout {
                    addr: addr.clone(),
                    id,
                    after: timeout,
                })
            }
        };
        match reply.kind {
            Kind::Response => reply.decode_body::<Resp>().map_err(|e| NetError::Decode {
                addr: addr.clone(),
                id,
                expected: type_name::<Resp>(),
                reason: e.0,
            }),
            Kind::Error => {
                let remote = reply
                    .decode_body::<RemoteError>()
                    .unwrap_or_else(|e| RemoteError {
                        kind: RemoteErrorKind::Internal,
                        message: format!("(the error reply itself does not decode: {e})"),
                    });
                Err(NetError::Remote {
                    addr: addr.clone(),
                    id,
                    kind: remote.kind,
                    message: remote.message,
                })
            }
            // The reader never forwards requests; kept total for safety.
            Kind::Request => Err(NetError::Decode {
                addr: addr.clone(),
                id,
                expected: type_name::<Resp>(),
                reason: "got a request envelope instead of a reply".into(),
            }),
        }
    }

    /// The live connection, reconnecting if there is none.
    async fn connection(&self) -> Result<Arc<Conn>, NetError> {
        if let Some(conn) = self.live_connection() {
            return Ok(conn);
        }
        let asked_at = Instant::now();
        let mut last_failure = self.inner.reconnect.lock().await;
        // Another task may have reconnected while we waited for the lock.
        if let Some(conn) = self.live_connection() {
            return Ok(conn);
        }
        // A reconnect that failed while we waited answers for us too:
        // retrying at once would multiply attempts and backoff by the number
        // of waiting tasks.
        if let Some((failed_at, error)) = &*last_failure {
            if *failed_at >= asked_at {
                return Err(error.clone());
            }
        }
        match self.connect_with_retries().await {
            Ok(conn) => {
                *self.inner.current.lock() = Some(conn.clone());
                *last_failure = None;
                Ok(conn)
            }
            Err(error) => {
                *last_failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// The current connection unless it is lost; a lost one is let go.
    fn live_connection(&self) -> Option<Arc<Conn>> {
        let mut current = self.inner.current.lock();
        match &*current {
            Some(conn) if !conn.pending.is_lost() => Some(conn.clone()),
            Some(_) => {
                *current = None;
                None
            }
            None => None,
        }
    }

    async fn connect_with_retries(&self) -> Result<Arc<Conn>, NetError> {
        let config = &self.inner.config;
        let mut backoff = config.reconnect_backoff_initial;
        let mut attempt = 1;
        loop {
            match self.connect_once().await {
                Ok(conn) => return Ok(conn),
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) if attempt >= config.connect_attempts => {
                    return Err(NetError::Unreachable {
                        addr: self.addr(),
                        attempts: attempt,
                        last: Box::new(e),
                    })
                }
                Err(e) => {
                    debug!(addr = %self.addr(), attempt, error = %e, ?backoff, "connect failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.reconnect_backoff_max);
                    attempt += 1;
                }
            }
        }
    }

    async fn connect_once(&self) -> Result<Arc<Conn>, NetError> {
        let config = &self.inner.config;
        let addr = &self.addr();
        let stream =
            match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr.as_str()))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    return Err(NetError::Connect {
                        addr: addr.clone(),
                        source: Arc::new(e),
                    })
                }
                Err(_) => {
                    return Err(NetError::ConnectTimeout {
                        addr: addr.clone(),
                        after: config.connect_timeout,
                    })
                }
            };
        let local = stream.local_addr().ok();
        let (mut reader, mut writer) = crate::frame::handshake_halves(
            stream,
            &addr,
            config.frame_read_timeout,
            config.max_frame_bytes,
        );
        let hello = handshake::client_hello(&mut reader, &mut writer, &config.name, addr);
        match tokio::time::timeout(config.handshake_timeout, hello).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(NetError::Handshake {
                    addr: addr.clone(),
                    reason: format!(
                        "no answer to the hello within {:?}",
                        config.handshake_timeout
                    ),
                })
            }
        }
        reader.set_max_frame_bytes(config.max_frame_bytes);
        debug!(%addr, ?local, "connected");

        let pending = Arc::new(Pending::new());
        let (tx, rx) = mpsc::channel(config.outbound_queue_frames);
        let span = info_span!("brine_net_client", %addr, ?local);
        tokio::spawn(read_replies(reader, pending.clone(), addr.clone()).instrument(span.clone()));
        tokio::spawn(
            write_requests(
                writer,
                rx,
                pending.clone(),
                addr.clone(),
                config.write_timeout,
            )
            .instrument(span),
        );
        Ok(Arc::new(Conn { tx, pending }))
    }
}

async fn read_replies(mut reader: FrameReader<OwnedReadHalf>, pending: Arc<Pending>, addr: String) {
    let reason = loop {
        let item = tokio::select! {
            biased;
            _ = pending.lost.cancelled() => return,
            item = reader.next() => item,
        };
        let envelope = match item {
            None => break "the server closed the connection".to_owned(),
            Some(Err(e)) => break format!("reading replies failed: {e}"),
            Some(Ok(frame)) => match Envelope::decode(frame.freeze()) {
                Ok(envelope) => envelope,
                Err(e) => break format!("unreadable reply envelope: {e}"),
            },
        };
        if envelope.kind == Kind::Request {
            break format!("the server sent a request envelope (id {})", envelope.id);
        }
        let id = envelope.id;
        if !pending.complete(id, envelope) {
            debug!(
                id,
                "reply for a request no longer waiting (timed out or cancelled); dropped"
            );
        }
    };
    debug!(%reason, "connection lost");
    pending.fail_all(NetError::ConnectionLost { addr, reason });
}

async fn write_requests(
    mut sink: FramedWrite<OwnedWriteHalf, FrameCodec>,
    mut rx: mpsc::Receiver<Bytes>,
    pending: Arc<Pending>,
    addr: String,
    write_timeout: Duration,
) {
    loop {
        let frame = tokio::select! {
            biased;
            _ = pending.lost.cancelled() => return,
            frame = rx.recv() => frame,
        };
        let Some(frame) = frame else { break };
        let written = tokio::select! {
            biased;
            _ = pending.lost.cancelled() => return,
            written = tokio::time::timeout(write_timeout, sink.send(frame)) => written,
        };
        let reason = match written {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => format!("writing a request failed: {e}"),
            Err(_) => {
                format!("a request was not written within {write_timeout:?} (server not reading)")
            }
        };
        pending.fail_all(NetError::ConnectionLost { addr, reason });
        return;
    }
    // The client dropped this connection, so no request is waiting on it:
    // half-close, give the server a moment to close its side, then stop the
    // reader whatever the server does.
    let _ = tokio::time::timeout(write_timeout, sink.close()).await;
    tokio::select! {
        _ = pending.lost.cancelled() => {}
        _ = tokio::time::sleep(write_timeout) => {}
    }
    pending.fail_all(NetError::ConnectionLost {
        addr,
        reason: "the client closed the connection".into(),
    });
}
