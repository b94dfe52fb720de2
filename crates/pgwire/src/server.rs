//! The listener and each connection's loop: accepting under a bound,
//! startup, reading messages under their bounds, handing them to the
//! connection's handlers, and ending the connection cleanly whatever the
//! client does.
//!
//! ```text
//!  accept ─► permit? ─no──► FATAL 53300, close
//!              │yes
//!              ▼
//!  startup (SSL refused, StartupMessage; 30 s at most)
//!              ▼
//!  loop: next message ─► pgwire::process_message ─► Conn (handler.rs)
//!          │ undecodable or over 16 MiB ─► FATAL 08P01 / 54000, close
//!          │ idle 60 s inside a transaction ─► FATAL 25P03, close
//!          │ server stopping ─► FATAL 57P01, close
//!          └ end of stream
//!  then: the session's transaction is aborted (locks freed)
//! ```
//!
//! Every failure is confined to its connection: the task that serves it
//! ends, the listener and the other connections go on.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use brine_cluster::Cluster;
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use pgwire::api::NoopHandler;
use pgwire::error::ErrorInfo;
use pgwire::messages::PgWireBackendMessage;
use pgwire::tokio::server::{negotiate_tls, process_error, process_message, MaybeTls};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_util::codec::{Framed, FramedParts};

use crate::handler::Conn;
use crate::sqlstate::SqlError;

/// The listener's bounds.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Connections served at once; one more is refused with 53300.
    pub connections_max: usize,
    /// The largest message a client may send (bytes read for one message).
    pub message_bytes_max: usize,
    /// Time to complete startup (SSL negotiation and StartupMessage).
    pub startup_timeout: Duration,
    /// A connection silent this long inside a transaction is closed and
    /// its transaction aborted, so a vanished client holds no locks.
    pub idle_in_transaction_timeout: Duration,
    /// How long `stop` waits for connections to end before dropping them.
    pub stop_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            connections_max: 1_024,
            message_bytes_max: 16 << 20,
            startup_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(60),
            stop_grace: Duration::from_secs(10),
        }
    }
}

/// A running listener (see [`PgServer::start`]).
pub struct PgServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl PgServer {
    /// Binds `addr` and serves `cluster` on it (in a task of the current
    /// runtime).
    pub async fn bind(
        addr: SocketAddr,
        cluster: Cluster,
        config: ServerConfig,
    ) -> io::Result<PgServer> {
        PgServer::start(TcpListener::bind(addr).await?, cluster, config)
    }

    /// Serves `cluster` on `listener` in a task of the current runtime.
    pub fn start(
        listener: TcpListener,
        cluster: Cluster,
        config: ServerConfig,
    ) -> io::Result<PgServer> {
        let local_addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, cluster, config, async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        Ok(PgServer {
            local_addr,
            stop,
            task,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, ends every connection (aborting its open
    /// transaction) and waits for them, `stop_grace` at most.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves `cluster` to PostgreSQL clients on `listener` until `shutdown`
/// completes; then ends every connection (aborting its open transaction)
/// and returns.
pub async fn serve(
    listener: TcpListener,
    cluster: Cluster,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let config = Arc::new(config);
    let permits = Arc::new(Semaphore::new(config.connections_max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            // Reap finished connections so the set stays small.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (cluster, config, stop) = (cluster.clone(), config.clone(), stop_rx.clone());
                        conns.spawn(async move {
                            connection(tcp, peer, cluster, &config, stop).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        conns.spawn(refuse(tcp, SqlError::fatal(
                            "53300",
                            format!("sorry, too many clients already ({} connections)", config.connections_max),
                        )));
                    }
                },
                Err(e) => {
                    // Out of file descriptors and the like: wait a little
                    // rather than spin.
                    tracing::warn!("accepting a PostgreSQL connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    let _ = stop_tx.send(true);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(config.stop_grace, drain)
        .await
        .is_err()
    {
        // Dropping a session aborts its transaction in the background.
        conns.shutdown().await;
    }
}

/// Answers a connection over the bound with an error and closes it.
async fn refuse(mut tcp: TcpStream, e: SqlError) {
    let mut buf = BytesMut::new();
    if PgWireBackendMessage::ErrorResponse(e.info().into())
        .encode(&mut buf)
        .is_ok()
    {
        let _ = tcp.write_all(&buf).await;
    }
    let _ = tcp.shutdown().await;
}

type Socket =
    Framed<Counted, pgwire::tokio::server::PgWireMessageServerCodec<Arc<crate::handler::Parsed>>>;

/// Serves one connection to its end.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    cluster: Cluster,
    config: &ServerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let read = Arc::new(AtomicUsize::new(0));
    let negotiated = tokio::time::timeout(config.startup_timeout, negotiate_tls(tcp, None)).await;
    let framed = match negotiated {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(e)) => {
            tracing::debug!(%peer, "PostgreSQL connection failed in SSL negotiation: {e}");
            return;
        }
    };
    // Count the bytes read for each message (see `Counted`).
    let parts = framed.into_parts();
    let mut counted = FramedParts::new(
        Counted {
            inner: parts.io,
            read: read.clone(),
            max: config.message_bytes_max,
            out: Vec::new(),
            hold: true,
        },
        parts.codec,
    );
    counted.read_buf = parts.read_buf;
    counted.write_buf = parts.write_buf;
    let mut socket: Socket = Framed::from_parts(counted);

    let conn = Arc::new(Conn::new(cluster));
    let noop = Arc::new(NoopHandler);
    let startup_until = tokio::time::Instant::now() + config.startup_timeout;
    loop {
        let started = !matches!(
            pgwire::api::ClientInfo::state(&socket),
            pgwire::api::PgWireConnectionState::AwaitingStartup
                | pgwire::api::PgWireConnectionState::AuthenticationInProgress
        );
        // Replies go out when the client has nothing more queued for us
        // (PostgreSQL's rule: flush before waiting to read), so a
        // pipelined Bind/Execute/Sync is answered in one write, not one
        // per message.
        if !(started && whole_message_buffered(socket.read_buffer()))
            && flush_now(&mut socket).await.is_err()
        {
            break;
        }
        let deadline = if !started {
            Some(startup_until)
        } else if conn.in_transaction().await {
            Some(tokio::time::Instant::now() + config.idle_in_transaction_timeout)
        } else {
            None
        };
        let next = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, socket.next())
                    .await
                    .map_err(|_| ()),
                None => Ok(socket.next().await),
            }
        };
        let msg = tokio::select! {
            _ = stop.changed() => {
                end(&mut socket, SqlError::fatal("57P01", "terminating connection: the brine node is stopping")).await;
                break;
            }
            msg = next => msg,
        };
        read.store(0, Ordering::Relaxed);
        match msg {
            Ok(Some(Ok(msg))) => {
                let extended = msg.is_extended_query();
                let result = process_message(
                    msg,
                    &mut socket,
                    conn.clone(),
                    conn.clone(),
                    conn.clone(),
                    noop.clone(),
                    noop.clone(),
                )
                .await;
                if let Err(e) = result {
                    if process_error(&mut socket, e, extended).await.is_err() {
                        break;
                    }
                }
            }
            Ok(Some(Err(e))) => {
                let err = match &e {
                    pgwire::error::PgWireError::IoError(io)
                        if io.kind() == io::ErrorKind::InvalidData =>
                    {
                        SqlError::fatal("54000", io.to_string())
                    }
                    pgwire::error::PgWireError::IoError(_) => break,
                    other => SqlError::fatal("08P01", format!("invalid frontend message: {other}")),
                };
                tracing::debug!(%peer, "closing a PostgreSQL connection: {}", err.message);
                end(&mut socket, err).await;
                break;
            }
            Ok(None) => break,
            Err(()) if started => {
                end(
                    &mut socket,
                    SqlError::fatal(
                        "25P03",
                        format!(
                            "terminating connection due to idle-in-transaction timeout ({} s); the transaction was aborted",
                            config.idle_in_transaction_timeout.as_secs()
                        ),
                    ),
                )
                .await;
                break;
            }
            Err(()) => break,
        }
    }
    conn.close().await;
}

/// Sends a last error and closes the socket.
async fn end(socket: &mut Socket, e: SqlError) {
    let info: ErrorInfo = e.info();
    socket.get_mut().hold = false;
    let _ = socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await;
    let _ = socket.close().await;
}

/// Writes out every reply held so far.
async fn flush_now(socket: &mut Socket) -> io::Result<()> {
    socket.get_mut().hold = false;
    let flushed = socket.flush().await;
    socket.get_mut().hold = true;
    flushed.map_err(|e| io::Error::other(e.to_string()))
}

/// Whether `buf` starts with a whole frontend message (a type byte, then
/// a length that counts itself): then the server reads it without
/// waiting, and its replies may wait too.
fn whole_message_buffered(buf: &[u8]) -> bool {
    match buf.get(1..5) {
        Some(len) => {
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            buf.len() > len
        }
        None => false,
    }
}

/// Replies held beyond this many bytes are written out without waiting
/// for the flush (a large result streams rather than piling up).
const HELD_MAX: usize = 64 * 1024;

/// The connection's transport, counting the bytes read since the last
/// whole message: a message that would exceed `max` fails the read, so a
/// client cannot make the server buffer a huge message (the protocol
/// allows 1 GiB). While `hold` is set, writes collect in `out` and a
/// flush writes nothing; `flush_now` sends them (at most `HELD_MAX` bytes
/// wait).
struct Counted {
    inner: MaybeTls,
    read: Arc<AtomicUsize>,
    max: usize,
    out: Vec<u8>,
    hold: bool,
}

impl Counted {
    /// Writes `out` to the socket.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.out.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let n = buf.filled().len() - before;
            let total = self.read.fetch_add(n, Ordering::Relaxed) + n;
            if total > self.max {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "message larger than {} bytes; split it (brine's bound per message)",
                        self.max
                    ),
                )));
            }
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.out.len() + buf.len() > HELD_MAX {
            match this.poll_drain(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            if buf.len() > HELD_MAX {
                return Pin::new(&mut this.inner).poll_write(cx, buf);
            }
        }
        this.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.hold {
            return Poll::Ready(Ok(()));
        }
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::whole_message_buffered;

    #[test]
    fn replies_wait_only_while_a_whole_message_is_queued() {
        // Sync: 'S', length 4 (the length counts itself).
        let sync = [b'S', 0, 0, 0, 4];
        assert!(whole_message_buffered(&sync));
        let mut two = sync.to_vec();
        two.extend_from_slice(&sync);
        assert!(whole_message_buffered(&two));
        assert!(!whole_message_buffered(&[]));
        assert!(!whole_message_buffered(&sync[..3]), "a cut header");
        // Query 'Q' of length 9 with only 3 of its 5 body bytes here.
        assert!(!whole_message_buffered(&[
            b'Q', 0, 0, 0, 9, b's', b'e', b'l'
        ]));
    }
}
