//! Every bound of the transport, with its default, in one place.
//!
//! # What it guarantees
//!
//! A configuration that passes `validate` has every bound non-zero and
//! consistent (an outbound byte budget that can hold at least one maximal
//! frame, a frame limit that fits the 4-byte length prefix), so no limit can
//! be hit by a well-formed exchange in a way that hangs. The worst-case
//! memory a server holds is roughly
//! `max_connections * (max_frame_bytes + outbound_queue_bytes)
//!  + max_connections * max_in_flight_per_connection * (decoded request size)`.

use std::time::Duration;

use crate::error::NetError;
use crate::frame::LENGTH_PREFIX_BYTES;
use crate::wire::{ENVELOPE_HEADER_BYTES, MAX_NAME_BYTES};

/// Default largest frame payload: 16 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Bounds of a [`crate::Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once (handshaking ones included). Excess
    /// connections get a "server full" reject and are closed. Default 1024.
    pub max_connections: usize,
    /// Largest frame payload accepted or sent. Default 16 MiB.
    pub max_frame_bytes: usize,
    /// Time from accept to a complete, valid hello. Default 5 s.
    pub handshake_timeout: Duration,
    /// A connection with no bytes received and no request in flight for
    /// this long is closed; `None` keeps idle connections forever (they are
    /// still bounded by `max_connections`). Default 10 min.
    pub idle_timeout: Option<Duration>,
    /// A frame must arrive whole within this time of its first byte
    /// (slowloris bound). Default 30 s.
    pub frame_read_timeout: Duration,
    /// A batch of queued replies (up to 256 KiB, or one larger frame) not
    /// written within this time closes the connection: the peer is not
    /// reading. Default 10 s.
    pub write_timeout: Duration,
    /// Requests of one connection being handled at once; when reached, the
    /// server stops reading that connection until one finishes. Default 256.
    pub max_in_flight_per_connection: usize,
    /// Reply frames queued for one connection; a peer whose queue
    /// overflows is disconnected. Default 1024.
    pub outbound_queue_frames: usize,
    /// Reply bytes queued for one connection; overflowing also disconnects.
    /// Must be at least `max_frame_bytes`. Default 64 MiB.
    pub outbound_queue_bytes: usize,
    /// On shutdown, how long in-flight requests may take to finish before
    /// their connections are closed regardless. Default 10 s.
    pub shutdown_grace: Duration,
    /// Listen backlog: connections the kernel queues before `accept`.
    /// Default 1024.
    pub accept_backlog: u32,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_connections: 1024,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Some(Duration::from_secs(10 * 60)),
            frame_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            max_in_flight_per_connection: 256,
            outbound_queue_frames: 1024,
            outbound_queue_bytes: 64 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(10),
            accept_backlog: 1024,
        }
    }
}

impl ServerConfig {
    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |reason: String| {
            Err(NetError::Config {
                what: "server",
                reason,
            })
        };
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".into());
        }
        if self.max_in_flight_per_connection == 0 || self.outbound_queue_frames == 0 {
            return bad(
                "max_in_flight_per_connection and outbound_queue_frames must be at least 1".into(),
            );
        }
        validate_frame_limit("server", self.max_frame_bytes)?;
        if self.outbound_queue_bytes < self.max_frame_bytes {
            return bad(format!(
                "outbound_queue_bytes ({}) must be at least max_frame_bytes ({}) so one \
                 maximal reply fits",
                self.outbound_queue_bytes, self.max_frame_bytes
            ));
        }
        validate_durations(
            "server",
            &[
                ("handshake_timeout", self.handshake_timeout),
                ("frame_read_timeout", self.frame_read_timeout),
                ("write_timeout", self.write_timeout),
                (
                    "idle_timeout",
                    self.idle_timeout.unwrap_or(Duration::from_secs(1)),
                ),
            ],
        )
    }
}

/// Bounds of a [`crate::Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The name (role) sent in the hello, for the server's logs; at most 255
    /// bytes. Default "brine-client".
    pub name: String,
    /// One TCP connect attempt. Default 5 s.
    pub connect_timeout: Duration,
    /// From connected to the server's accept. Default 5 s.
    pub handshake_timeout: Duration,
    /// Connection attempts per (re)connect before giving up with
    /// [`NetError::Unreachable`]. Default 3.
    pub connect_attempts: u32,
    /// Wait after the first failed attempt; doubles after each further one
    /// up to `reconnect_backoff_max`. Default 50 ms.
    pub reconnect_backoff_initial: Duration,
    /// Default 1 s.
    pub reconnect_backoff_max: Duration,
    /// From sending a request to its reply, once connected. Default 30 s.
    pub request_timeout: Duration,
    /// Largest frame payload sent or accepted. Default 16 MiB.
    pub max_frame_bytes: usize,
    /// A reply frame must arrive whole within this time of its first byte.
    /// Default 30 s.
    pub frame_read_timeout: Duration,
    /// A request frame not written within this time drops the connection:
    /// the server is not reading. Default 10 s.
    pub write_timeout: Duration,
    /// Requests awaiting replies at once, over all tasks sharing the
    /// client; further requests wait (within their timeout). Default 1024.
    pub max_in_flight: usize,
    /// Request frames queued for the writer. Default 1024.
    pub outbound_queue_frames: usize,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            name: "brine-client".into(),
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            connect_attempts: 3,
            reconnect_backoff_initial: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            frame_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            max_in_flight: 1024,
            outbound_queue_frames: 1024,
        }
    }
}

impl ClientConfig {
    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |reason: String| {
            Err(NetError::Config {
                what: "client",
                reason,
            })
        };
        if self.name.len() > MAX_NAME_BYTES {
            return bad(format!(
                "name is {} bytes, the maximum is {MAX_NAME_BYTES}",
                self.name.len()
            ));
        }
        if self.connect_attempts == 0 || self.max_in_flight == 0 || self.outbound_queue_frames == 0
        {
            return bad(
                "connect_attempts, max_in_flight and outbound_queue_frames must be at least 1"
                    .into(),
            );
        }
        validate_frame_limit("client", self.max_frame_bytes)?;
        validate_durations(
            "client",
            &[
                ("connect_timeout", self.connect_timeout),
                ("handshake_timeout", self.handshake_timeout),
                ("request_timeout", self.request_timeout),
                ("frame_read_timeout", self.frame_read_timeout),
                ("write_timeout", self.write_timeout),
            ],
        )
    }
}

fn validate_frame_limit(what: &'static str, max_frame_bytes: usize) -> Result<(), NetError> {
    let max_prefix = u32::MAX as usize;
    if max_frame_bytes <= ENVELOPE_HEADER_BYTES || max_frame_bytes > max_prefix {
        return Err(NetError::Config {
            what,
            reason: format!(
                "max_frame_bytes ({max_frame_bytes}) must be above the {ENVELOPE_HEADER_BYTES}-byte \
                 envelope header and fit the {LENGTH_PREFIX_BYTES}-byte length prefix"
            ),
        });
    }
    Ok(())
}

fn validate_durations(what: &'static str, items: &[(&str, Duration)]) -> Result<(), NetError> {
    match items.iter().find(|(_, d)| d.is_zero()) {
        Some((name, _)) => Err(NetError::Config {
            what,
            reason: format!("{name} must be longer than zero"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(ServerConfig::default().validate().is_ok());
        assert!(ClientConfig::default().validate().is_ok());
    }

    #[test]
    fn inconsistent_bounds_are_rejected_with_a_reason() {
        let config = ServerConfig {
            outbound_queue_bytes: 1024,
            ..ServerConfig::default()
        };
        let err = config.validate().expect_err("queue smaller than a frame");
        assert!(err.to_string().contains("outbound_queue_bytes"), "{err}");
        let config = ClientConfig {
            name: "x".repeat(300),
            ..ClientConfig::default()
        };
        assert!(config.validate().is_err());
    }
}
