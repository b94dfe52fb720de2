//! The bytes inside each frame: the handshake and the envelope that wraps
//! every message after it. Pure encoding and decoding, no I/O.
//!
//! # What it guarantees
//!
//! - Decoding never panics and never allocates more than the payload it is
//!   given: every length is checked against the bytes actually present.
//! - The request id of an envelope is a fixed-size header *outside* the
//!   serde body, so a body that does not decode (an unknown enum variant from
//!   a newer peer, say) still leaves the id readable and the request can be
//!   answered with an error instead of dropping the connection.
//!
//! # Format
//!
//! Every message is one frame (the `frame` module): a 4-byte big-endian
//! payload length, then the payload. Payloads:
//!
//! ```text
//!   hello   client -> server   "BRINE" | version: u16 BE | name: UTF-8, 0..=255 bytes
//!   accept  server -> client   0x00 | version: u16 BE
//!   reject  server -> client   0x01 | reason: UTF-8           (then the server closes)
//!
//!   after accept, both ways:
//!   envelope                   kind: u8 | request id: u64 BE | body
//!     kind 0x01 request   client -> server   body = postcard(Req)
//!     kind 0x02 response  server -> client   body = postcard(Resp)
//!     kind 0x03 error     server -> client   body = postcard(RemoteError)
//! ```
//!
//! Bodies are [postcard](https://docs.rs/postcard): compact, not
//! self-describing, so `Req`/`Resp` must not rely on
//! `deserialize_any` (no `#[serde(untagged)]`, `#[serde(flatten)]`).

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The first bytes of every hello: anything else is not a brine peer.
pub const MAGIC: &[u8; 5] = b"BRINE";

/// The protocol version this build speaks. A peer with another version is
/// rejected with a reason naming both.
pub const PROTOCOL_VERSION: u16 = 1;

/// Longest peer name (role) a hello may carry.
pub const MAX_NAME_BYTES: usize = 255;

/// The frame size limit while the handshake is in progress: hello and
/// accept/reject are small, so garbage claiming a large frame is refused
/// before the real limit applies.
pub const HANDSHAKE_MAX_FRAME_BYTES: usize = 4096;

/// Bytes of an envelope before its body: kind (1) + request id (8).
pub const ENVELOPE_HEADER_BYTES: usize = 9;

const REPLY_ACCEPT: u8 = 0x00;
const REPLY_REJECT: u8 = 0x01;

/// A payload that does not follow the format above.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("not a brine handshake: expected magic {expected:?}, got {found:?}")]
    BadMagic { expected: String, found: String },
    #[error("{what} truncated: need at least {need} bytes, got {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    #[error("peer name of {len} bytes is longer than the maximum of {MAX_NAME_BYTES}")]
    NameTooLong { len: usize },
    #[error("{what} is not valid UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("unknown handshake reply tag {tag:#04x} (expected 0x00 accept or 0x01 reject)")]
    UnknownReply { tag: u8 },
    #[error(
        "unknown envelope kind {kind:#04x} (expected 0x01 request, 0x02 response or 0x03 error)"
    )]
    UnknownKind { kind: u8 },
}

/// The client's opening frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    /// Who is calling (a role or node name), for the server's logs.
    pub name: String,
}

impl Hello {
    pub fn encode(&self) -> Result<Bytes, WireError> {
        if self.name.len() > MAX_NAME_BYTES {
            return Err(WireError::NameTooLong {
                len: self.name.len(),
            });
        }
        let mut out = BytesMut::with_capacity(MAGIC.len() + 2 + self.name.len());
        out.put_slice(MAGIC);
        out.put_u16(self.version);
        out.put_slice(self.name.as_bytes());
        Ok(out.freeze())
    }

    pub fn decode(payload: &[u8]) -> Result<Hello, WireError> {
        let found = payload.get(..MAGIC.len().min(payload.len())).unwrap_or(&[]);
        if found != MAGIC {
            return Err(WireError::BadMagic {
                expected: String::from_utf8_lossy(MAGIC).into_owned(),
                found: String::from_utf8_lossy(found).into_owned(),
            });
        }
        let need = MAGIC.len() + 2;
        let Some(version) = payload.get(MAGIC.len()..need) else {
            return Err(WireError::Truncated {
                what: "hello",
                need,
                got: payload.len(),
            });
        };
        let version = u16::from_be_bytes([version[0], version[1]]);
        let name = payload.get(need..).unwrap_or(&[]);
        if name.len() > MAX_NAME_BYTES {
            return Err(WireError::NameTooLong { len: name.len() });
        }
        let name = std::str::from_utf8(name)
            .map_err(|_| WireError::NotUtf8 { what: "peer name" })?
            .to_owned();
        Ok(Hello { version, name })
    }
}

/// The server's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeReply {
    Accept { version: u16 },
    Reject { reason: String },
}

impl HandshakeReply {
    pub fn encode(&self) -> Bytes {
        match self {
            HandshakeReply::Accept { version } => {
                let mut out = BytesMut::with_capacity(3);
                out.put_u8(REPLY_ACCEPT);
                out.put_u16(*version);
                out.freeze()
            }
            HandshakeReply::Reject { reason } => {
                // Keep the frame within the handshake limit whatever the
                // reason's length; cut on a char boundary.
                let mut end = reason.len().min(HANDSHAKE_MAX_FRAME_BYTES - 1);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                let mut out = BytesMut::with_capacity(1 + end);
                out.put_u8(REPLY_REJECT);
                out.put_slice(&reason.as_bytes()[..end]);
                out.freeze()
            }
        }
    }

    pub fn decode(payload: &[u8]) -> Result<HandshakeReply, WireError> {
        match payload.split_first() {
            None => Err(WireError::Truncated {
                what: "handshake reply",
                need: 1,
                got: 0,
            }),
            Some((&REPLY_ACCEPT, rest)) => match rest.get(..2) {
                Some(v) => Ok(HandshakeReply::Accept {
                    version: u16::from_be_bytes([v[0], v[1]]),
                }),
                None => Err(WireError::Truncated {
                    what: "accept",
                    need: 3,
                    got: payload.len(),
                }),
            },
            Some((&REPLY_REJECT, rest)) => Ok(HandshakeReply::Reject {
                reason: String::from_utf8_lossy(rest).into_owned(),
            }),
            Some((&tag, _)) => Err(WireError::UnknownReply { tag }),
        }
    }
}

/// What an envelope carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request = 0x01,
    Response = 0x02,
    Error = 0x03,
}

/// One message after the handshake: its kind, the request id it belongs
/// to, and the still-encoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub kind: Kind,
    pub id: u64,
    pub body: Bytes,
}

impl Envelope {
    /// Encodes `body` with postcard behind the envelope header, in one
    /// buffer (the frame payload).
    pub fn encode<T: Serialize + ?Sized>(
        kind: Kind,
        id: u64,
        body: &T,
    ) -> Result<Bytes, BodyError> {
        let mut out = Vec::with_capacity(64);
        out.push(kind as u8);
        out.extend_from_slice(&id.to_be_bytes());
        let out = postcard::to_extend(body, out).map_err(|e| BodyError(e.to_string()))?;
        Ok(Bytes::from(out))
    }

    /// Splits a frame payload into header and body. Fails only when the
    /// header itself is unreadable; the body is not looked at.
    pub fn decode(payload: Bytes) -> Result<Envelope, WireError> {
        if payload.len() < ENVELOPE_HEADER_BYTES {
            return Err(WireError::Truncated {
                what: "envelope header",
                need: ENVELOPE_HEADER_BYTES,
                got: payload.len(),
            });
        }
        let kind = match payload[0] {
            0x01 => Kind::Request,
            0x02 => Kind::Response,
            0x03 => Kind::Error,
            kind => return Err(WireError::UnknownKind { kind }),
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&payload[1..ENVELOPE_HEADER_BYTES]);
        Ok(Envelope {
            kind,
            id: u64::from_be_bytes(id),
            body: payload.slice(ENVELOPE_HEADER_BYTES..),
        })
    }

    /// Decodes the body as `T`, strictly: trailing bytes are an error, since
    /// they mean the two sides disagree about the type.
    pub fn decode_body<T: DeserializeOwned>(&self) -> Result<T, BodyError> {
        let (value, rest) =
            postcard::take_from_bytes::<T>(&self.body).map_err(|e| BodyError(e.to_string()))?;
        if !rest.is_empty() {
            return Err(BodyError(format!(
                "{} trailing bytes after the value",
                rest.len()
            )));
        }
        Ok(value)
    }
}

/// Why a body did not encode, or did not decode as the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// The body of an error envelope: the server could not produce a response
/// for this request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct RemoteError {
    pub kind: RemoteErrorKind,
    pub message: String,
}

/// Whose fault a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteErrorKind {
    /// The request body did not decode as the server's request type
    /// (typically an unknown variant from a newer client). Not retryable
    /// as is.
    BadRequest,
    /// The server failed to produce an answer: the handler panicked, or
    /// the response did not encode or exceeded the frame limit.
    Internal,
}

impl std::fmt::Display for RemoteErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemoteErrorKind::BadRequest => "bad request",
            RemoteErrorKind::Internal => "internal server error",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        let hello = Hello {
            version: 7,
            name: "coordinator-1".into(),
        };
        let bytes = hello.encode().expect("short name");
        assert_eq!(&bytes[..5], b"BRINE");
        assert_eq!(&bytes[5..7], &[0, 7]);
        assert_eq!(Hello::decode(&bytes), Ok(hello));
    }

    #[test]
    fn hello_rejects_garbage() {
        assert!(matches!(
            Hello::decode(b"GET / HTTP/1.1"),
            Err(WireError::BadMagic { .. })
        ));
        assert!(matches!(
            Hello::decode(b""),
            Err(WireError::BadMagic { .. })
        ));
        assert!(matches!(
            Hello::decode(b"BRINE\x00"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Hello::decode(b"BRINE\x00\x01\xff\xfe"),
            Err(WireError::NotUtf8 { .. })
        ));
        let long = [b"BRINE\x00\x01".as_slice(), &[b'a'; 256]].concat();
        assert!(matches!(
            Hello::decode(&long),
            Err(WireError::NameTooLong { len: 256 })
        ));
    }

    #[test]
    fn handshake_reply_round_trips_and_bounds_reason() {
        let accept = HandshakeReply::Accept { version: 1 };
        assert_eq!(HandshakeReply::decode(&accept.encode()), Ok(accept));
        let reject = HandshakeReply::Reject {
            reason: "server full".into(),
        };
        assert_eq!(HandshakeReply::decode(&reject.encode()), Ok(reject));
        let huge = HandshakeReply::Reject {
            reason: "é".repeat(HANDSHAKE_MAX_FRAME_BYTES),
        };
        assert!(huge.encode().len() <= HANDSHAKE_MAX_FRAME_BYTES);
        assert!(matches!(
            HandshakeReply::decode(&[9]),
            Err(WireError::UnknownReply { tag: 9 })
        ));
    }

    #[test]
    fn envelope_keeps_id_readable_when_body_is_not() {
        let frame = Envelope::encode(Kind::Request, 42, &(1u8, "x")).expect("encodes");
        let env = Envelope::decode(frame).expect("header readable");
        assert_eq!((env.kind, env.id), (Kind::Request, 42));
        assert_eq!(env.decode_body::<(u8, String)>(), Ok((1, "x".into())));
        // Same bytes, wrong type: the body fails, the id does not.
        assert!(env.decode_body::<(u8, String, u64)>().is_err());
        assert!(env.decode_body::<u8>().is_err(), "trailing bytes rejected");
    }

    #[test]
    fn envelope_rejects_unreadable_headers() {
        assert!(matches!(
            Envelope::decode(Bytes::from_static(&[1, 2, 3])),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Envelope::decode(Bytes::from_static(&[7, 0, 0, 0, 0, 0, 0, 0, 1])),
            Err(WireError::UnknownKind { kind: 7 })
        ));
    }
}
