//! The write-ahead log: checksummed, length-prefixed, chained frames in
//! segment files, written by one thread per log with group commit.
//!
//! ```text
//!  producer ──append(kind, payload)──► pending buffer ──► writer thread
//!                                                          write + fdatasync (one per batch)
//!  waiter (commit ack, yes vote) ◄──────── durable lsn ◄───┘
//!  recovery: reader ──► validated frames ──► Record::decode ──► redo
//! ```
//!
//! `docs/storage.md` documents the on-disk format. Modules: `codec` (values
//! to bytes), `record` (frames, record kinds and payloads), `segment`
//! (segment files), `writer` (group commit), `reader` (validation, torn
//! tails), `fault` (crash injection for tests).

pub mod codec;
pub mod fault;
pub mod mirror;
pub mod reader;
pub mod record;
pub mod segment;
pub mod writer;

pub use fault::{CrashSwitch, StepKind};
pub use mirror::Mirror;
pub use reader::{read_log, LogEnd, ReadOptions};
pub use record::{Record, RecordKind, RedoOp};
pub use writer::{Log, LogConfig, LogPosition, LogStatsSnapshot, Replicas, Replicate, Waiter};
