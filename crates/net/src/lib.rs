//! brine's TCP transport: typed request/response over length-delimited
//! frames, with a bound on everything a peer can make the other side hold.
//!
//! # What it guarantees
//!
//! - **Typed, correlated, concurrent.** A [`Server`] is generic over a
//!   request type, a response type (any serde types) and a [`Handler`]; a
//!   [`Client`] is shared by any number of tasks, each awaiting its own
//!   reply, matched by request id. Several requests run at once per
//!   connection and are answered in completion order.
//! - **Versioned.** Every connection starts with a handshake (magic,
//!   protocol version, peer name); a peer of another version is refused with
//!   a reason naming both versions ([`wire`]).
//! - **Bounded.** Frame size, connections, requests in flight per
//!   connection, queued replies per connection, and the time for a
//!   handshake, a frame, a write, an idle connection and a request all have
//!   limits ([`ServerConfig`], [`ClientConfig`]). Hitting one closes the one
//!   offending connection with a logged reason (or fails the one request
//!   with a typed [`NetError`]); it never panics, never allocates without
//!   bound, and the server keeps serving everyone else.
//! - **Robust to bad input.** Garbage, oversized or truncated frames and
//!   unreadable envelopes close that connection; a request body that does
//!   not decode (say, a variant from a newer client) is answered with an
//!   error for its id and the connection goes on.
//! - **Graceful shutdown.** [`Server::shutdown`] stops accepting, lets
//!   requests in flight finish within a grace period, then closes.
//!
//! # How a request flows
//!
//! ```text
//!            Client (shared by tasks)                         Server
//!   request(req) ─┐                                 accept ── over max_connections? ──> reject "server full"
//!   request(req) ─┼─> id, pending[id]                  │
//!   request(req) ─┘        │                           ▼ one task per connection
//!                          ▼                     handshake: "BRINE" v1 name ──> accept | reject "why"
//!                    writer task ══ frames ══TCP═══>  FrameReader: size, slowloris, idle bounds
//!                                                      │ envelope {kind, id, body}
//!                                                      ├── body does not decode ──> error reply(id)
//!                                                      ▼ in-flight slot (full: stop reading)
//!                                                   Handler::handle(req), concurrently
//!                                                      │ response(id) / error(id)
//!                                                      ▼
//!                    reader task <══ frames ══TCP═══ bounded reply queue ──> writer (write timeout)
//!                          │                                 overflow: close the slow peer
//!                          ▼
//!              pending[id] completes request(req)
//! ```
//!
//! # Modules
//!
//! - `frame`: length-delimited frames with size and time bounds.
//! - [`wire`]: the handshake and envelope formats (the bytes inside frames).
//! - `handshake`: both sides of the version handshake.
//! - `connection`: one server connection from handshake to close.
//! - `server`: accepting within the connection bound; shutdown.
//! - `client`: the shared, reconnecting client.
//! - `config`, `error`, `stats`: bounds and defaults, errors, counters.
//!
//! # Example
//!
//! ```no_run
//! use brine_net::{Client, ClientConfig, Server, ServerConfig};
//!
//! # async fn example() -> Result<(), brine_net::NetError> {
//! let server = Server::bind(
//!     "127.0.0.1:0".parse().expect("valid address"),
//!     ServerConfig::default(),
//!     |n: u64| async move { n + 1 },
//! )
//! .await?;
//! let client: Client<u64, u64> =
//!     Client::connect(server.local_addr().to_string(), ClientConfig::default()).await?;
//! assert_eq!(client.request(41).await?, 42);
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod client;
mod config;
mod connection;
mod error;
mod frame;
mod handler;
mod handshake;
mod server;
mod stats;
pub mod wire;

pub use client::Client;
pub use config::{ClientConfig, ServerConfig, DEFAULT_MAX_FRAME_BYTES};
pub use error::NetError;
pub use handler::Handler;
pub use server::{Server, Shutdown, REJECTING_CONNECTIONS_MAX, REJECT_LINGER};
pub use stats::ServerStats;
pub use wire::{RemoteError, RemoteErrorKind, PROTOCOL_VERSION};
