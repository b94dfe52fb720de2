//! PostgreSQL's wire protocol in front of one brine node: psql and
//! PostgreSQL drivers (libpq, psycopg, JDBC, tokio-postgres, ...) run
//! brine's SQL, interactive transactions and procedure calls.
//!
//! ```text
//!  client ──TCP──► server.rs   listener, bounds, one task per connection
//!                    │ messages (the `pgwire` crate decodes and encodes)
//!                    ▼
//!                  handler.rs  startup, simple and extended query protocols
//!                    │ command.rs: SQL text -> Command (catalog.rs answers
//!                    │             pg_catalog and version() itself)
//!                    ▼
//!                  session.rs  Idle / Open(Txn) / Failed; autocommit
//!                    │
//!                    ▼
//!  brine_cluster::Client of the node: begin() -> Txn::execute / commit /
//!  abort, and call(procedure, args), the same paths the node serves to
//!  brine's own clients (crates/cluster/src/remote/service.rs)
//! ```
//!
//! What it guarantees:
//! * A statement outside BEGIN is a transaction of its own, committed
//!   before its answer (and retried, bounded, while concurrency control
//!   picks it as a victim). Inside BEGIN, statements share one brine
//!   transaction; after an error the session is failed (25P02) until
//!   ROLLBACK or COMMIT, and the brine transaction is already aborted.
//! * A concurrency-control abort that reaches the client is SQLSTATE
//!   40001, so drivers' retry loops retry it ([`sqlstate::sqlstate`] maps
//!   every brine error).
//! * A connection that ends, for whatever reason, aborts its open
//!   transaction before its task ends: no lock outlives its client.
//! * Bad input (malformed messages, unknown statements, wrong parameters)
//!   gets an error on that connection only.
//!
//! The reference for users is docs/pgwire.md.

mod catalog;
mod command;
mod handler;
mod server;
mod session;
pub mod sqlstate;
mod values;

pub use server::{serve, PgServer, ServerConfig};

/// The PostgreSQL version brine reports: clients choose their catalog
/// queries and features by it.
pub const SERVER_VERSION: &str = "16.0";
/// [`SERVER_VERSION`] as `server_version_num`.
pub const SERVER_VERSION_NUM: &str = "160000";

/// The `server_version` parameter sent at startup.
pub(crate) fn server_version_text() -> String {
    format!("{SERVER_VERSION} (brine {})", env!("CARGO_PKG_VERSION"))
}
