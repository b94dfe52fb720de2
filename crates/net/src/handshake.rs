//! The versioned handshake, both sides of it.
//!
//! # What it guarantees
//!
//! - Nothing but a hello is read before the handshake completes, and it is
//!   read under the small handshake frame limit, so garbage (an HTTP
//!   request, random bytes) is refused after at most 4 header bytes or one
//!   small frame.
//! - A peer that speaks the wrong version, or sends a frame that is not a
//!   hello, hears why in a reject frame before the server closes; a peer
//!   whose bytes are not even a frame is closed without an answer.
//! - Neither side waits forever: the callers bound the whole exchange with
//!   their handshake timeout.
//!
//! ```text
//!   client                                server
//!     | --- hello "BRINE" v name -------->  |
//!     |                                     |  magic ok, version == ours?
//!     | <-- accept v ---------------------  |  yes: envelopes may follow
//!     | <-- reject "reason" + FIN --------  |  no:  close
//! ```

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::FramedWrite;

use crate::error::NetError;
use crate::frame::{FrameCodec, FrameReader};
use crate::wire::{HandshakeReply, Hello, PROTOCOL_VERSION};

/// Server side: reads the hello, answers accept or reject. `Err` carries
/// the reason for the log; a reject frame has already been sent when one
/// was due.
pub(crate) async fn server_accept<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FramedWrite<W, FrameCodec>,
    handshake_timeout: Duration,
    write_timeout: Duration,
) -> Result<Hello, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let frame = match tokio::time::timeout(handshake_timeout, reader.next()).await {
        Err(_) => return Err(format!("no complete hello within {handshake_timeout:?}")),
        Ok(None) => return Err("peer closed the connection before its hello".into()),
        Ok(Some(Err(e))) => return Err(format!("not a hello frame: {e}")),
        Ok(Some(Ok(frame))) => frame,
    };
    let refusal = match Hello::decode(&frame) {
        Err(e) => e.to_string(),
        Ok(hello) if hello.version != PROTOCOL_VERSION => format!(
            "protocol version {} not supported, server speaks {PROTOCOL_VERSION}",
            hello.version
        ),
        Ok(hello) => {
            let accept = HandshakeReply::Accept {
                version: PROTOCOL_VERSION,
            };
            return match tokio::time::timeout(write_timeout, writer.send(accept.encode())).await {
                Ok(Ok(())) => Ok(hello),
                Ok(Err(e)) => Err(format!("sending accept failed: {e}")),
                Err(_) => Err(format!("sending accept took over {write_timeout:?}")),
            };
        }
    };
    send_reject(writer, &refusal, write_timeout).await;
    Err(refusal)
}

/// Sends a reject frame and half-closes, best effort and bounded in time:
/// the connection is being dropped whatever happens.
pub(crate) async fn send_reject<W>(
    writer: &mut FramedWrite<W, FrameCodec>,
    reason: &str,
    write_timeout: Duration,
) where
    W: AsyncWrite + Unpin,
{
    let reject = HandshakeReply::Reject {
        reason: reason.to_owned(),
    };
    let _ = tokio::time::timeout(write_timeout, async {
        writer.send(reject.encode()).await?;
        writer.close().await
    })
    .await;
}

/// Client side: sends the hello and reads the answer. The caller bounds
/// it with the handshake timeout.
pub(crate) async fn client_hello<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FramedWrite<W, FrameCodec>,
    name: &str,
    addr: &str,
) -> Result<(), NetError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let failed = |reason: String| NetError::Handshake {
        addr: addr.to_owned(),
        reason,
    };
    let hello = Hello {
        version: PROTOCOL_VERSION,
        name: name.to_owned(),
    }
    .encode()
    .map_err(|e| failed(e.to_string()))?;
    writer
        .send(hello)
        .await
        .map_err(|e| failed(format!("sending the hello failed: {e}")))?;
    let frame = match reader.next().await {
        None => {
            return Err(failed(
                "the server closed the connection without answering the hello".into(),
            ))
        }
        Some(Err(e)) => return Err(failed(format!("reading the server's answer: {e}"))),
        Some(Ok(frame)) => frame,
    };
    match HandshakeReply::decode(&frame) {
        Err(e) => Err(failed(format!("unreadable answer to the hello: {e}"))),
        Ok(HandshakeReply::Accept { version }) if version != PROTOCOL_VERSION => {
            Err(NetError::VersionMismatch {
                addr: addr.to_owned(),
                ours: PROTOCOL_VERSION,
                theirs: version,
            })
        }
        Ok(HandshakeReply::Accept { .. }) => Ok(()),
        Ok(HandshakeReply::Reject { reason }) => Err(NetError::Rejected {
            addr: addr.to_owned(),
            reason,
        }),
    }
}
