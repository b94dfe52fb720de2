//! One accepted connection on the server, from handshake to close.
//!
//! # What it guarantees
//!
//! - **Bounded memory per connection.** About one frame (at most
//!   `max_frame_bytes` plus the rest of the last read) is buffered on the
//!   way in; at most
//!   `max_in_flight_per_connection` requests are being handled (the reader
//!   stops reading when all slots are taken, so TCP pushes back on the
//!   client); at most `outbound_queue_frames` frames and
//!   `outbound_queue_bytes` bytes of replies wait to be written.
//! - **A peer that does not read is dropped, not buffered for.** Replies
//!   are queued without waiting: when the queue overflows, or a batch of
//!   replies is not written within `write_timeout`, the connection is
//!   closed.
//! - **One bad request does not cost the connection.** A request whose body
//!   does not decode gets an error reply for its id and the connection goes
//!   on; a handler that panics gets its request an error reply. Only an
//!   unreadable envelope header or broken framing closes the connection,
//!   since the stream can no longer be trusted.
//! - **Every close has one logged reason** and one counter bump
//!   (`Closer`).
//! - **Shutdown is graceful, then bounded.** On drain the reader stops,
//!   handlers in flight finish and their replies are written, then the
//!   write side is closed; the server's hard stop cuts all of it short.
//!
//! ```text
//!   socket ──> FrameReader ──> envelope ──┬─ not a request / unreadable ──> close
//!              (idle, slowloris,          ├─ body does not decode ──> error reply ─┐
//!               size bounds)              │                                        │
//!                     ▲                   ▼ in-flight slot (waits: backpressure)    │
//!                     │              handler task ──> response / error reply ──────┤
//!                     │                                                            ▼
//!                     └── close <── overflow ── outbound queue (frames, bytes) ── writer ──> socket
//!                                                                   (write timeout)
//! ```

use std::any::type_name;
use std::fmt::Display;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};

use crate::config::ServerConfig;
use crate::frame::{FrameCodec, FrameError, FrameReader};
use crate::handler::Handler;
use crate::handshake;
use crate::stats::{Cause, Counters};
use crate::wire::{Envelope, Kind, RemoteError, RemoteErrorKind, ENVELOPE_HEADER_BYTES};

/// Largest batch of queued replies written before one flush.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

/// Longest message in an error reply; keeps error frames small whatever
/// produced the message.
const ERROR_MESSAGE_BYTES_MAX: usize = 1024;

/// What every connection of one server shares.
pub(crate) struct Shared<H> {
    pub handler: H,
    pub config: ServerConfig,
    pub counters: Arc<Counters>,
    /// Stop reading new requests, finish those in flight, close.
    pub drain: CancellationToken,
    /// Close now (the shutdown grace ran out, or the server was dropped).
    pub hard_stop: CancellationToken,
}

/// Serves one connection until it closes. Never panics on peer input.
pub(crate) async fn serve<Req, Resp, H>(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared<H>>)
where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
    H: Handler<Req, Resp>,
{
    let config = &shared.config;
    let (mut reader, mut writer) = crate::frame::handshake_halves(
        stream,
        &peer,
        config.frame_read_timeout,
        config.max_frame_bytes,
    );

    let hello = tokio::select! {
        biased;
        _ = shared.drain.cancelled() => return,
        hello = handshake::server_accept(
            &mut reader,
            &mut writer,
            config.handshake_timeout,
            config.write_timeout,
        ) => hello,
    };
    let hello = match hello {
        Ok(hello) => hello,
        Err(reason) => {
            shared.counters.handshake_failed();
            info!(%peer, %reason, "handshake failed; closing");
            return;
        }
    };
    debug!(%peer, name = %hello.name, "connection accepted");
    reader.set_max_frame_bytes(config.max_frame_bytes);
    reader.set_idle_timeout(config.idle_timeout);

    let closer = Arc::new(Closer {
        kill: shared.hard_stop.child_token(),
        fired: AtomicBool::new(false),
        peer,
    });
    let (tx, rx) = mpsc::channel(config.outbound_queue_frames);
    let outbound = Outbound {
        tx,
        queued_bytes: Arc::new(AtomicUsize::new(0)),
        queued_bytes_max: config.outbound_queue_bytes,
        frames_max: config.outbound_queue_frames,
        closer: closer.clone(),
    };
    let queued_bytes = outbound.queued_bytes.clone();
    tokio::join!(
        read_requests::<Req, Resp, H>(reader, outbound, &shared, &closer),
        write_replies(writer, rx, queued_bytes, &shared, &closer),
    );
    debug!(%peer, name = %hello.name, "connection closed");
}

/// Closes a connection once, for one logged and counted reason.
struct Closer {
    kill: CancellationToken,
    fired: AtomicBool,
    peer: SocketAddr,
}

impl Closer {
    fn close(&self, counters: &Counters, cause: Cause, reason: impl Display) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            counters.closed(cause);
            match cause {
                Cause::Idle | Cause::Io => info!(peer = %self.peer, %reason, "closing connection"),
                Cause::SlowPeer | Cause::Protocol => {
                    warn!(peer = %self.peer, %reason, "closing connection")
                }
            }
        }
        self.kill.cancel();
    }

    async fn killed(&self) {
        self.kill.cancelled().await
    }
}

/// The bounded reply queue of one connection; pushing never waits.
#[derive(Clone)]
struct Outbound {
    tx: mpsc::Sender<Bytes>,
    queued_bytes: Arc<AtomicUsize>,
    queued_bytes_max: usize,
    frames_max: usize,
    closer: Arc<Closer>,
}

impl Outbound {
    /// Queues a reply frame; closes the connection if the peer has let its
    /// queue overflow. Waiting here instead would let a client that never
    /// reads park handler tasks and their replies in memory indefinitely.
    fn push(&self, frame: Bytes, counters: &Counters) {
        let len = frame.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::AcqRel) + len;
        if queued > self.queued_bytes_max {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.closer.close(
                counters,
                Cause::SlowPeer,
                format_args!(
                    "peer is not reading its replies: {queued} bytes would be queued, limit {}",
                    self.queued_bytes_max
                ),
            );
            return;
        }
        match self.tx.try_send(frame) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                self.closer.close(
                    counters,
                    Cause::SlowPeer,
                    format_args!(
                        "peer is not reading its replies: {} reply frames already queued",
                        self.frames_max
                    ),
                );
            }
            // The writer is gone, so the connection is closing already.
            Err(TrySendError::Closed(_)) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            }
        }
    }
}

async fn read_requests<Req, Resp, H>(
    mut reader: FrameReader<OwnedReadHalf>,
    outbound: Outbound,
    shared: &Arc<Shared<H>>,
    closer: &Arc<Closer>,
) where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
    H: Handler<Req, Resp>,
{
    let config = &shared.config;
    let counters = &shared.counters;
    let slots = Arc::new(Semaphore::new(config.max_in_flight_per_connection));
    let handlers = TaskTracker::new();
    loop {
        // Take the slot before reading: with every slot busy the socket is
        // left unread and TCP flow control slows the client down.
        let slot = tokio::select! {
            biased;
            _ = closer.killed() => return,
            _ = shared.drain.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let item = tokio::select! {
            biased;
            _ = closer.killed() => return,
            _ = shared.drain.cancelled() => break,
            item = reader.next() => item,
        };
        let frame = match item {
            None => {
                debug!(peer = %closer.peer, "peer closed its side; finishing requests in flight");
                break;
            }
            Some(Ok(frame)) => frame.freeze(),
            Some(Err(FrameError::IdleTimeout { after })) => {
                // `slot` is ours; any other busy slot is a request in flight.
                let busy = config
                    .max_in_flight_per_connection
                    .saturating_sub(slots.available_permits() + 1);
                if busy > 0 || outbound.queued_bytes.load(Ordering::Acquire) > 0 {
                    continue;
                }
                closer.close(
                    counters,
                    Cause::Idle,
                    format_args!("idle for {after:?} with no request in flight"),
                );
                return;
            }
            Some(Err(FrameError::Io(e))) => {
                closer.close(counters, Cause::Io, format_args!("reading failed: {e}"));
                return;
            }
            Some(Err(e)) => {
                closer.close(counters, Cause::Protocol, e);
                return;
            }
        };
        let envelope = match Envelope::decode(frame) {
            Ok(envelope) => envelope,
            Err(e) => {
                closer.close(
                    counters,
                    Cause::Protocol,
                    format_args!("unreadable envelope: {e}"),
                );
                return;
            }
        };
        if envelope.kind != Kind::Request {
            closer.close(
                counters,
                Cause::Protocol,
                format_args!(
                    "client sent a {:?} envelope (id {}); clients may only send requests",
                    envelope.kind, envelope.id
                ),
            );
            return;
        }
        counters.request();
        match envelope.decode_body::<Req>() {
            Ok(req) => {
                handlers.spawn(
                    handle_one::<Req, Resp, H>(
                        shared.clone(),
                        req,
                        envelope.id,
                        slot,
                        outbound.clone(),
                    )
                    .in_current_span(),
                );
            }
            Err(e) => {
                counters.undecodable_request();
                let message = format!(
                    "request {} does not decode as {}: {e}",
                    envelope.id,
                    type_name::<Req>()
                );
                debug!(peer = %closer.peer, %message, "answering with an error");
                let frame = error_frame(
                    envelope.id,
                    RemoteErrorKind::BadRequest,
                    &message,
                    config.max_frame_bytes,
                );
                outbound.push(frame, counters);
                drop(slot);
            }
        }
    }
    // No more requests will be read: let those in flight answer. Our
    // `outbound` goes away on return, so the writer ends once the last
    // handler has queued its reply.
    handlers.close();
    tokio::select! {
        _ = handlers.wait() => {}
        _ = closer.killed() => {}
    }
}

async fn handle_one<Req, Resp, H>(
    shared: Arc<Shared<H>>,
    req: Req,
    id: u64,
    slot: OwnedSemaphorePermit,
    outbound: Outbound,
) where
    Req: Send + 'static,
    Resp: Serialize + Send + 'static,
    H: Handler<Req, Resp>,
{
    let max_frame_bytes = shared.config.max_frame_bytes;
    let answer = AssertUnwindSafe(shared.handler.handle(req)).catch_unwind();
    let answer = tokio::select! {
        biased;
        _ = outbound.closer.killed() => return,
        answer = answer => answer,
    };
    let frame = match answer {
        Ok(resp) => match Envelope::encode(Kind::Response, id, &resp) {
            Ok(frame) if frame.len() <= max_frame_bytes => frame,
            Ok(frame) => {
                let message = format!(
                    "response of {} bytes exceeds the maximum frame size of {max_frame_bytes} bytes; \
                     ask for less per request (a narrower range or fewer columns)",
                    frame.len()
                );
                error!(peer = %outbound.closer.peer, id, %message, "cannot send response");
                error_frame(id, RemoteErrorKind::Internal, &message, max_frame_bytes)
            }
            Err(e) => {
                let message = format!("response does not encode as {}: {e}", type_name::<Resp>());
                error!(peer = %outbound.closer.peer, id, %message, "cannot send response");
                error_frame(id, RemoteErrorKind::Internal, &message, max_frame_bytes)
            }
        },
        Err(panic) => {
            shared.counters.handler_panic();
            let message = match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
                (Some(s), _) => format!("handler panicked: {s}"),
                (_, Some(s)) => format!("handler panicked: {s}"),
                _ => "handler panicked".to_owned(),
            };
            error!(peer = %outbound.closer.peer, id, %message, "request failed");
            error_frame(id, RemoteErrorKind::Internal, &message, max_frame_bytes)
        }
    };
    outbound.push(frame, &shared.counters);
    drop(slot);
}

/// An error envelope for `id`, its message cut to fit the frame limit.
fn error_frame(id: u64, kind: RemoteErrorKind, message: &str, max_frame_bytes: usize) -> Bytes {
    // Room for the envelope header, the kind tag and the string's length.
    let room = max_frame_bytes.saturating_sub(ENVELOPE_HEADER_BYTES + 8);
    let mut end = message.len().min(ERROR_MESSAGE_BYTES_MAX).min(room);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let body = RemoteError {
        kind,
        message: message[..end].to_owned(),
    };
    // Encoding a two-field struct into a Vec cannot fail in practice; if it
    // did, a header-only error envelope still tells the client this id
    // failed.
    Envelope::encode(Kind::Error, id, &body).unwrap_or_else(|_| {
        let mut header = vec![Kind::Error as u8];
        header.extend_from_slice(&id.to_be_bytes());
        Bytes::from(header)
    })
}

async fn write_replies<H>(
    mut sink: FramedWrite<OwnedWriteHalf, FrameCodec>,
    mut rx: mpsc::Receiver<Bytes>,
    queued_bytes: Arc<AtomicUsize>,
    shared: &Shared<H>,
    closer: &Closer,
) {
    let write_timeout = shared.config.write_timeout;
    let counters = &shared.counters;
    loop {
        let first = tokio::select! {
            biased;
            _ = closer.killed() => return,
            first = rx.recv() => first,
        };
        let Some(first) = first else { break };
        let mut batch_bytes = first.len();
        let written = tokio::select! {
            biased;
            _ = closer.killed() => return,
            written = tokio::time::timeout(write_timeout, async {
                sink.feed(first).await?;
                while batch_bytes < WRITE_BATCH_BYTES_MAX {
                    let Ok(next) = rx.try_recv() else { break };
                    batch_bytes += next.len();
                    sink.feed(next).await?;
                }
                sink.flush().await
            }) => written,
        };
        let queued_before = queued_bytes.fetch_sub(batch_bytes, Ordering::AcqRel);
        debug_assert!(
            queued_before >= batch_bytes,
            "wrote {batch_bytes} bytes but only {queued_before} were accounted as queued"
        );
        match written {
            Ok(Ok(())) => {}
            Ok(Err(FrameError::Io(e))) => {
                closer.close(
                    counters,
                    Cause::Io,
                    format_args!("writing replies failed: {e}"),
                );
                return;
            }
            Ok(Err(e)) => {
                // Replies are size-checked before they are queued.
                closer.close(
                    counters,
                    Cause::Protocol,
                    format_args!("cannot frame a reply: {e}"),
                );
                return;
            }
            Err(_) => {
                closer.close(
                    counters,
                    Cause::SlowPeer,
                    format_args!(
                        "peer is not reading its replies: a batch of replies was not written within \
                         {write_timeout:?}"
                    ),
                );
                return;
            }
        }
    }
    // Every reply is written: half-close so the client sees a clean end.
    tokio::select! {
        biased;
        _ = closer.killed() => {}
        _ = tokio::time::timeout(write_timeout, sink.close()) => {}
    }
}
