//! The listener: accepts connections within the connection bound, hands
//! each to [`crate::connection`], and shuts down gracefully.
//!
//! # What it guarantees
//!
//! - At most `max_connections` connections are served at once. An excess
//!   connection is told "server full" in a reject frame and closed; at most
//!   [`REJECTING_CONNECTIONS_MAX`] of those are being turned away at once
//!   (beyond that they are closed without a word), each for at most
//!   [`REJECT_LINGER`], so a connection flood costs bounded memory.
//! - A failing `accept` (out of file descriptors, say) is logged and retried
//!   after a pause rather than spinning or stopping the server.
//! - [`Server::shutdown`] stops accepting (the port is released), lets
//!   requests in flight finish and their replies go out for at most
//!   `shutdown_grace`, then closes whatever is left. Dropping a [`Server`]
//!   without `shutdown` closes everything at once.
//!
//! ```text
//!   accept ──> slot free? ──yes──> connection::serve (own task)
//!                 │ no
//!                 └──> reject "server full" + FIN, discard its hello, close
//!
//!   shutdown(): drain ──> stop accepting ──> wait for connections ≤ grace ──> hard stop
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::codec::Encoder;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::ServerConfig;
use crate::connection::{self, Shared};
use crate::error::NetError;
use crate::frame::FrameCodec;
use crate::handler::Handler;
use crate::stats::{Counters, ServerStats};
use crate::wire::{HandshakeReply, HANDSHAKE_MAX_FRAME_BYTES};

/// Connections being turned away at once; more are closed without a reject.
pub const REJECTING_CONNECTIONS_MAX: usize = 64;

/// How long a rejected connection may linger while its reject is delivered.
pub const REJECT_LINGER: Duration = Duration::from_secs(1);

/// Pause after an `accept` failure that is not about one connection
/// (typically EMFILE), so the loop does not spin while resources are short.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Bytes of a rejected peer's input read (and discarded) before closing.
const REJECT_DRAIN_BYTES_MAX: usize = 64 * 1024;

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Every request in flight finished and was answered.
    Graceful,
    /// The grace period ran out; the remaining connections were closed with
    /// requests still in flight.
    GraceExpired,
}

/// A running server. See the module documentation for its guarantees.
pub struct Server {
    local_addr: SocketAddr,
    counters: Arc<Counters>,
    drain: CancellationToken,
    hard_stop: CancellationToken,
    connections: TaskTracker,
    accept_loop: Option<JoinHandle<()>>,
    shutdown_grace: Duration,
}

impl Server {
    /// Listens on `addr` (port 0 picks a free port; see
    /// [`Server::local_addr`]) and serves requests with `handler` until
    /// shut down or dropped.
    pub async fn bind<Req, Resp, H>(
        addr: SocketAddr,
        config: ServerConfig,
        handler: H,
    ) -> Result<Server, NetError>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        H: Handler<Req, Resp>,
    {
        config.validate()?;
        let bind_error = |e| NetError::Bind {
            addr,
            source: Arc::new(e),
        };
        let listener = listen(addr, config.accept_backlog).map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        let shutdown_grace = config.shutdown_grace;
        let drain = CancellationToken::new();
        let hard_stop = CancellationToken::new();
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(Shared {
            handler,
            config,
            counters: counters.clone(),
            drain: drain.clone(),
            hard_stop: hard_stop.clone(),
        });
        let connections = TaskTracker::new();
        let accept_loop = tokio::spawn(
            accept_loop::<Req, Resp, H>(listener, shared.clone(), connections.clone())
                .instrument(info_span!("brine_net_server", addr = %local_addr)),
        );
        info!(addr = %local_addr, "listening");
        Ok(Server {
            local_addr,
            counters,
            drain,
            hard_stop,
            connections,
            accept_loop: Some(accept_loop),
            shutdown_grace,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn stats(&self) -> ServerStats {
        self.counters.snapshot()
    }

    /// Stops accepting, lets requests in flight finish for at most the
    /// configured grace, then closes every connection. Returns once all of
    /// them are closed and the port is free.
    pub async fn shutdown(mut self) -> Shutdown {
        info!(addr = %self.local_addr, "shutting down");
        self.drain.cancel();
        if let Some(accept_loop) = self.accept_loop.take() {
            if let Err(e) = accept_loop.await {
                warn!(error = %e, "accept loop ended abnormally");
            }
        }
        self.connections.close();
        let outcome = tokio::select! {
            _ = self.connections.wait() => Shutdown::Graceful,
            _ = tokio::time::sleep(self.shutdown_grace) => {
                warn!(
                    grace = ?self.shutdown_grace,
                    connections = self.stats().connections_active,
                    "shutdown grace expired; closing connections with requests in flight"
                );
                self.hard_stop.cancel();
                self.connections.wait().await;
                Shutdown::GraceExpired
            }
        };
        info!(addr = %self.local_addr, ?outcome, "shut down");
        outcome
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.drain.cancel();
        self.hard_stop.cancel();
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("stats", &self.stats())
            .finish()
    }
}

fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // A restarted server must get its port back while the previous run's
    // connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

async fn accept_loop<Req, Resp, H>(
    listener: TcpListener,
    shared: Arc<Shared<H>>,
    connections: TaskTracker,
) where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
    H: Handler<Req, Resp>,
{
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let reject_slots = Arc::new(Semaphore::new(REJECTING_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shared.drain.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_per_connection(&e) => {
                debug!(error = %e, "accept failed for one connection");
                continue;
            }
            Err(e) => {
                warn!(error = %e, pause = ?ACCEPT_ERROR_PAUSE, "accept failed; pausing");
                tokio::select! {
                    _ = shared.drain.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        shared.counters.accepted();
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let shared = shared.clone();
                connections.spawn(
                    async move {
                        let _active = shared.counters.active();
                        connection::serve::<Req, Resp, H>(stream, peer, shared.clone()).await;
                        drop(slot);
                    }
                    .instrument(info_span!("conn", %peer)),
                );
            }
            Err(_) => {
                shared.counters.rejected_full();
                let reason = format!(
                    "server full ({} connections); try again later",
                    shared.config.max_connections
                );
                info!(%peer, %reason, "rejecting connection");
                if let Ok(reject_slot) = reject_slots.clone().try_acquire_owned() {
                    let hard_stop = shared.hard_stop.clone();
                    connections.spawn(async move {
                        tokio::select! {
                            _ = hard_stop.cancelled() => {}
                            _ = tokio::time::timeout(REJECT_LINGER, reject(stream, &reason)) => {}
                        }
                        drop(reject_slot);
                    });
                }
            }
        }
    }
    info!("stopped accepting");
}

/// Errors of `accept` that concern one incoming connection only.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    )
}

/// Tells a peer it was rejected, then reads and discards what it sent
/// (typically its hello) until it closes: closing with unread input would
/// make the kernel send a reset, which can destroy the reject before the
/// peer reads it.
async fn reject(mut stream: TcpStream, reason: &str) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut frame = BytesMut::new();
    let payload = HandshakeReply::Reject {
        reason: reason.to_owned(),
    }
    .encode();
    FrameCodec::new(HANDSHAKE_MAX_FRAME_BYTES)
        .encode(payload, &mut frame)
        .map_err(std::io::Error::other)?;
    stream.write_all(&frame).await?;
    stream.shutdown().await?;
    let mut discard = [0u8; 1024];
    let mut drained = 0;
    while drained < REJECT_DRAIN_BYTES_MAX {
        match stream.read(&mut discard).await? {
            0 => break,
            n => drained += n,
        }
    }
    Ok(())
}
