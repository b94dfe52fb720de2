//! Length-delimited framing with bounds on size and time.
//!
//! # What it guarantees
//!
//! - A frame is a 4-byte big-endian length, then that many payload bytes.
//!   A length above the limit is an error as soon as the 4 header bytes are
//!   in, before any of the payload is read or allocated.
//! - Memory follows the bytes actually received, not the length a peer
//!   claims: the decoder never reserves the announced size up front (which
//!   is why it is written here rather than taken from `LengthDelimitedCodec`,
//!   which does). A peer that claims 16 MiB and sends 10 bytes costs 10
//!   bytes.
//! - EOF in the middle of a frame is a [`FrameError::Truncated`], not a
//!   silently dropped tail.
//! - [`FrameReader`] bounds time: a frame must arrive whole within
//!   `frame_read_timeout` of its first byte (slowloris), and a connection
//!   with no bytes at all for `idle_timeout` reports
//!   [`FrameError::IdleTimeout`]. Both are errors the caller acts on; the
//!   reader itself never closes anything.
//!
//! ```text
//!   socket bytes ──> FramedRead(FrameCodec) ──> FrameReader ──> payloads
//!                     size check on header       idle timer (buffer empty)
//!                     no up-front reserve        partial timer (buffer not empty)
//! ```

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::io::AsyncRead;
use tokio::time::{Instant, Sleep};
use tokio_util::codec::{Decoder, Encoder, FramedRead};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Why a connection's framing failed. Every variant ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("connection closed in the middle of a frame ({buffered} bytes of it received)")]
    Truncated { buffered: usize },
    #[error("frame not complete {after:?} after its first byte ({buffered} bytes received)")]
    PartialFrameTimeout { after: Duration, buffered: usize },
    #[error("no bytes received for {after:?}")]
    IdleTimeout { after: Duration },
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// The codec: 4-byte big-endian length prefix, bounded payload.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_frame_bytes: usize,
}

impl FrameCodec {
    pub fn new(max_frame_bytes: usize) -> FrameCodec {
        FrameCodec { max_frame_bytes }
    }

    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        let Some(head) = src.get(..LENGTH_PREFIX_BYTES) else {
            return Ok(None);
        };
        let mut len = [0u8; LENGTH_PREFIX_BYTES];
        len.copy_from_slice(head);
        let len = u32::from_be_bytes(len) as usize;
        if len > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                len,
                max: self.max_frame_bytes,
            });
        }
        // The header stays in the buffer until the whole frame is there, so
        // "buffer not empty" means exactly "a frame is partially received"
        // (the reader's slowloris timer relies on this).
        if src.len() < LENGTH_PREFIX_BYTES + len {
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX_BYTES);
        let frame = src.split_to(len);
        debug_assert_eq!(frame.len(), len);
        Ok(Some(frame))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, payload: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        if payload.len() > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                len: payload.len(),
                max: self.max_frame_bytes,
            });
        }
        let len = u32::try_from(payload.len()).map_err(|_| FrameError::TooLarge {
            len: payload.len(),
            max: u32::MAX as usize,
        })?;
        dst.reserve(LENGTH_PREFIX_BYTES + payload.len());
        dst.put_u32(len);
        dst.put_slice(&payload);
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Partial,
}

/// A stream of frame payloads with the idle and partial-frame timers.
///
/// A timer firing yields one error item; the stream stays usable, so a
/// caller may choose to ignore an idle timeout (e.g. while requests are in
/// flight) and keep reading.
pub struct FrameReader<R> {
    inner: FramedRead<R, FrameCodec>,
    idle_timeout: Option<Duration>,
    frame_read_timeout: Duration,
    timer: Pin<Box<Sleep>>,
    armed: Option<Phase>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(
        io: R,
        max_frame_bytes: usize,
        idle_timeout: Option<Duration>,
        frame_read_timeout: Duration,
    ) -> FrameReader<R> {
        FrameReader {
            inner: FramedRead::new(io, FrameCodec::new(max_frame_bytes)),
            idle_timeout,
            frame_read_timeout,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.inner
            .decoder_mut()
            .set_max_frame_bytes(max_frame_bytes);
    }

    pub fn set_idle_timeout(&mut self, idle_timeout: Option<Duration>) {
        self.idle_timeout = idle_timeout;
        self.armed = None;
    }
}

impl<R: AsyncRead + Unpin> Stream for FrameReader<R> {
    type Item = Result<BytesMut, FrameError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Poll::Ready(item) = this.inner.poll_next_unpin(cx) {
            this.armed = None;
            return Poll::Ready(item);
        }
        let buffered = this.inner.read_buffer().len();
        let (phase, limit) = if buffered == 0 {
            match this.idle_timeout {
                Some(limit) => (Phase::Idle, limit),
                None => {
                    this.armed = None;
                    return Poll::Pending;
                }
            }
        } else {
            (Phase::Partial, this.frame_read_timeout)
        };
        // Arm once per phase: bytes trickling in do not restart the partial
        // timer, so a frame has `frame_read_timeout` in total, not per byte.
        if this.armed != Some(phase) {
            this.timer.as_mut().reset(Instant::now() + limit);
            this.armed = Some(phase);
        }
        match this.timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                this.armed = None;
                Poll::Ready(Some(Err(match phase {
                    Phase::Idle => FrameError::IdleTimeout { after: limit },
                    Phase::Partial => FrameError::PartialFrameTimeout {
                        after: limit,
                        buffered,
                    },
                })))
            }
        }
    }
}

/// The two framed halves of a fresh connection, set up for the handshake:
/// the reader accepts only handshake-sized frames until the caller raises
/// its limit; the writer any frame up to `max_frame_bytes`.
pub(crate) fn handshake_halves(
    stream: tokio::net::TcpStream,
    peer: &dyn std::fmt::Display,
    frame_read_timeout: Duration,
    max_frame_bytes: usize,
) -> (
    FrameReader<tokio::net::tcp::OwnedReadHalf>,
    tokio_util::codec::FramedWrite<tokio::net::tcp::OwnedWriteHalf, FrameCodec>,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
    }
    let (read_half, write_half) = stream.into_split();
    let reader = FrameReader::new(
        read_half,
        crate::wire::HANDSHAKE_MAX_FRAME_BYTES,
        None,
        frame_read_timeout,
    );
    let writer = tokio_util::codec::FramedWrite::new(write_half, FrameCodec::new(max_frame_bytes));
    (reader, writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_back_to_back_frames_and_waits_for_partial_ones() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&frame(b"abc"));
        buf.extend_from_slice(&frame(b""));
        buf.extend_from_slice(&frame(b"hello")[..6]);
        assert_eq!(
            codec.decode(&mut buf).ok().flatten().as_deref(),
            Some(&b"abc"[..])
        );
        assert_eq!(
            codec.decode(&mut buf).ok().flatten().as_deref(),
            Some(&b""[..])
        );
        assert!(matches!(codec.decode(&mut buf), Ok(None)));
        assert_eq!(buf.len(), 6, "partial frame keeps its header buffered");
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(FrameError::Truncated { buffered: 6 })
        ));
    }

    #[test]
    fn oversized_header_fails_without_reserving() {
        let mut codec = FrameCodec::new(1024);
        let mut buf = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
        let before = buf.capacity();
        assert!(matches!(
            codec.decode(&mut buf),
            Err(FrameError::TooLarge { max: 1024, .. })
        ));
        assert_eq!(buf.capacity(), before);
        // Just under the limit: waits for bytes, still reserves nothing.
        let mut buf = BytesMut::from(&1024u32.to_be_bytes()[..]);
        let before = buf.capacity();
        assert!(matches!(codec.decode(&mut buf), Ok(None)));
        assert_eq!(buf.capacity(), before);
    }

    #[test]
    fn encoder_refuses_oversized_payloads() {
        let mut codec = FrameCodec::new(4);
        let mut dst = BytesMut::new();
        assert!(codec.encode(Bytes::from_static(b"1234"), &mut dst).is_ok());
        assert_eq!(&dst[..], &frame(b"1234")[..]);
        assert!(matches!(
            codec.encode(Bytes::from_static(b"12345"), &mut dst),
            Err(FrameError::TooLarge { len: 5, max: 4 })
        ));
    }

    #[tokio::test]
    async fn partial_frame_times_out_but_idle_without_limit_does_not() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(rx, 1024, None, Duration::from_millis(50));
        tx.write_all(&frame(b"whole")).await.expect("write");
        tx.write_all(&[0, 0, 0, 9, b'x']).await.expect("write");
        let first = reader.next().await;
        assert!(matches!(first, Some(Ok(ref f)) if &f[..] == b"whole"));
        let second = reader.next().await;
        assert!(
            matches!(
                second,
                Some(Err(FrameError::PartialFrameTimeout { buffered: 5, .. }))
            ),
            "{second:?}"
        );
    }

    #[tokio::test]
    async fn idle_timer_fires_only_with_an_empty_buffer() {
        let (_tx, rx) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(
            rx,
            1024,
            Some(Duration::from_millis(30)),
            Duration::from_secs(60),
        );
        assert!(matches!(
            reader.next().await,
            Some(Err(FrameError::IdleTimeout { .. }))
        ));
        // The stream stays usable after a timer item.
        assert!(matches!(
            reader.next().await,
            Some(Err(FrameError::IdleTimeout { .. }))
        ));
    }
}
