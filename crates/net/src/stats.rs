//! Counters of what a server did, readable at any time.
//!
//! # What it guarantees
//!
//! Each counter is updated once per event, at the point where the event is
//! decided (a connection closed for a cause is counted by whoever closed
//! it, exactly once), so tests and operators can wait on them instead of
//! on sleeps. Reads are a snapshot of independent relaxed counters, not a
//! consistent cut.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A snapshot of [`crate::Server::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections being served now, handshaking ones included.
    pub connections_active: usize,
    pub connections_accepted_total: u64,
    /// Turned away with "server full".
    pub connections_rejected_full_total: u64,
    /// Closed during the handshake: garbage, wrong version, timeout.
    pub handshakes_failed_total: u64,
    /// Closed because the peer did not read its replies (queue overflow or
    /// write timeout).
    pub closed_slow_peer_total: u64,
    /// Closed for a framing or envelope violation: oversized, truncated or
    /// too slowly sent frame, unreadable envelope header.
    pub closed_protocol_error_total: u64,
    pub closed_idle_total: u64,
    /// Closed because the socket failed (reset, broken pipe).
    pub closed_io_error_total: u64,
    pub requests_total: u64,
    /// Requests whose body did not decode; answered with an error reply.
    pub requests_undecodable_total: u64,
    pub handler_panics_total: u64,
}

/// Why a connection was closed before its peer was done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    SlowPeer,
    Protocol,
    Idle,
    Io,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    connections_active: AtomicUsize,
    connections_accepted_total: AtomicU64,
    connections_rejected_full_total: AtomicU64,
    handshakes_failed_total: AtomicU64,
    closed_slow_peer_total: AtomicU64,
    closed_protocol_error_total: AtomicU64,
    closed_idle_total: AtomicU64,
    closed_io_error_total: AtomicU64,
    requests_total: AtomicU64,
    requests_undecodable_total: AtomicU64,
    handler_panics_total: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn accepted(&self) {
        bump(&self.connections_accepted_total);
    }

    pub fn rejected_full(&self) {
        bump(&self.connections_rejected_full_total);
    }

    pub fn handshake_failed(&self) {
        bump(&self.handshakes_failed_total);
    }

    pub fn closed(&self, cause: Cause) {
        bump(match cause {
            Cause::SlowPeer => &self.closed_slow_peer_total,
            Cause::Protocol => &self.closed_protocol_error_total,
            Cause::Idle => &self.closed_idle_total,
            Cause::Io => &self.closed_io_error_total,
        });
    }

    pub fn request(&self) {
        bump(&self.requests_total);
    }

    pub fn undecodable_request(&self) {
        bump(&self.requests_undecodable_total);
    }

    pub fn handler_panic(&self) {
        bump(&self.handler_panics_total);
    }

    /// Counts a connection as active until the guard is dropped.
    pub fn active(&self) -> ActiveGuard<'_> {
        self.connections_active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(self)
    }

    pub fn snapshot(&self) -> ServerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ServerStats {
            connections_active: self.connections_active.load(Ordering::Relaxed),
            connections_accepted_total: get(&self.connections_accepted_total),
            connections_rejected_full_total: get(&self.connections_rejected_full_total),
            handshakes_failed_total: get(&self.handshakes_failed_total),
            closed_slow_peer_total: get(&self.closed_slow_peer_total),
            closed_protocol_error_total: get(&self.closed_protocol_error_total),
            closed_idle_total: get(&self.closed_idle_total),
            closed_io_error_total: get(&self.closed_io_error_total),
            requests_total: get(&self.requests_total),
            requests_undecodable_total: get(&self.requests_undecodable_total),
            handler_panics_total: get(&self.handler_panics_total),
        }
    }
}

pub(crate) struct ActiveGuard<'a>(&'a Counters);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.connections_active.fetch_sub(1, Ordering::Relaxed);
    }
}
