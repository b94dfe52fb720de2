//! The errors a user of the transport sees.
//!
//! # What it guarantees
//!
//! Every variant names the peer address and what was expected, so the
//! message alone says what to fix or retry: a refused connection, a
//! version mismatch (with both versions), a reply that did not decode (with
//! the expected type), a timeout (with its length). `NetError` is `Clone` so
//! one connection failure can be handed to every request waiting on it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::wire::RemoteErrorKind;

#[derive(Debug, Clone, thiserror::Error)]
pub enum NetError {
    #[error("invalid {what} configuration: {reason}")]
    Config { what: &'static str, reason: String },

    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: Arc<io::Error>,
    },

    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: Arc<io::Error>,
    },

    #[error("connecting to {addr} timed out after {after:?}")]
    ConnectTimeout { addr: String, after: Duration },

    #[error("gave up connecting to {addr} after {attempts} attempts; last error: {last}")]
    Unreachable {
        addr: String,
        attempts: u32,
        last: Box<NetError>,
    },

    #[error("handshake with {addr} failed: {reason}")]
    Handshake { addr: String, reason: String },

    #[error(
        "{addr} speaks protocol version {theirs}, this side speaks {ours}; \
         upgrade one of them"
    )]
    VersionMismatch {
        addr: String,
        ours: u16,
        theirs: u16,
    },

    #[error("{addr} rejected the connection: {reason}")]
    Rejected { addr: String, reason: String },

    #[error("connection to {addr} lost: {reason}")]
    ConnectionLost { addr: String, reason: String },

    #[error("cut off from {addr} (a network partition injected for a fault test)")]
    Cut { addr: String },

    #[error(
        "request {id} to {addr} timed out after {after:?} \
         (no reply yet; the server may still carry it out)"
    )]
    Timeout {
        addr: String,
        id: u64,
        after: Duration,
    },

    #[error(
        "{what} of {len} bytes exceeds the maximum frame size of {max} bytes; \
         nothing was sent: split it into smaller requests (fewer rows per load \
         call, fewer or shorter arguments per call)"
    )]
    FrameTooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },

    #[error("cannot encode {what} as postcard: {reason}")]
    Encode { what: &'static str, reason: String },

    #[error("reply {id} from {addr} does not decode as {expected}: {reason}")]
    Decode {
        addr: String,
        id: u64,
        expected: &'static str,
        reason: String,
    },

    #[error("{addr} answered request {id} with an error ({kind}): {message}")]
    Remote {
        addr: String,
        id: u64,
        kind: RemoteErrorKind,
        message: String,
    },
}

impl NetError {
    /// Whether connecting again may help: true for network failures, false
    /// for a server that answered and said no, or for a bad configuration.
    pub fn is_transient(&self) -> bool {
        match self {
            NetError::Connect { .. }
            | NetError::ConnectTimeout { .. }
            | NetError::Handshake { .. }
            | NetError::ConnectionLost { .. }
            | NetError::Cut { .. }
            | NetError::Timeout { .. } => true,
            NetError::Unreachable { last, .. } => last.is_transient(),
            NetError::Config { .. }
            | NetError::Bind { .. }
            | NetError::Rejected { .. }
            | NetError::VersionMismatch { .. }
            | NetError::FrameTooLarge { .. }
            | NetError::Encode { .. }
            | NetError::Decode { .. }
            | NetError::Remote { .. } => false,
        }
    }
}
