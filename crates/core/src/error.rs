//! The one error type users see. Every variant carries enough context to act
//! on; none of them is a panic in disguise.

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the concurrency control aborted a transaction. Aborts of these kinds
/// are retried by the coordinator (bounded), and counted by cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AbortCause {
    /// Wait-die: a younger transaction asked for a lock an older one holds.
    WaitDie,
    /// The wait-for graph of a partition had a cycle and this was the victim.
    Deadlock,
    /// The lock wait exceeded the timeout (cross-partition backstop).
    LockTimeout,
    /// Aborted because another participant of its 2PC voted no.
    Cascade,
    /// An optimistic protocol's commit-time validation found a conflict
    /// (Mediator: with a transaction that committed since, or with a
    /// native put).
    Validation,
    /// A participant did not answer a statement or a vote (the message or
    /// its answer was lost, or the node is cut off): the transaction was
    /// aborted everywhere and may run again.
    Unreachable,
}

impl AbortCause {
    pub fn as_str(self) -> &'static str {
        match self {
            AbortCause::WaitDie => "wait_die",
            AbortCause::Deadlock => "deadlock",
            AbortCause::LockTimeout => "lock_timeout",
            AbortCause::Cascade => "cascade",
            AbortCause::Validation => "validation",
            AbortCause::Unreachable => "unreachable",
        }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Serialize, Deserialize)]
pub enum Error {
    #[error("SQL error: {0}")]
    Sql(String),
    #[error("schema error: {0}")]
    Schema(String),
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    #[error("unknown column `{column}` in table `{table}`")]
    UnknownColumn { table: String, column: String },
    #[error("unknown procedure `{0}`")]
    UnknownProcedure(String),
    #[error("procedure `{procedure}` has no declared statement `{statement}`")]
    UndeclaredStatement {
        procedure: String,
        statement: String,
    },
    #[error("wrong number of arguments for {what}: expected {expected}, got {got}")]
    Arity {
        what: String,
        expected: usize,
        got: usize,
    },
    #[error("type mismatch for {what}: expected {expected}, got {got}")]
    Type {
        what: String,
        expected: String,
        got: String,
    },
    #[error("duplicate key in table `{table}`: {key}")]
    DuplicateKey { table: String, key: String },
    #[error("constraint violated: {0}")]
    Constraint(String),
    #[error("transaction aborted by the user: {0}")]
    UserAbort(String),
    #[error("transaction aborted by concurrency control ({})", .0.as_str())]
    Aborted(AbortCause),
    #[error("gave up after {attempts} attempts; last abort: {}", .last.as_str())]
    RetriesExhausted { attempts: u32, last: AbortCause },
    #[error("a bound was exceeded: {0}")]
    Bound(String),
    #[error("transaction is no longer active: {0}")]
    TxnState(String),
    #[error("transport error: {0}")]
    Transport(String),
    #[error("configuration error: {0}")]
    Config(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// An I/O failure of the write-ahead log, a checkpoint or the data
    /// directory; the message names the file and the operation.
    #[error("storage error: {0}")]
    Storage(String),
    /// A log or checkpoint failed validation somewhere other than the torn
    /// tail of the newest log segment: recovery refuses to guess.
    #[error("corrupt {file} at byte {offset}: {reason}")]
    Corrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    // The variants below are data errors that PostgreSQL clients tell
    // apart by SQLSTATE (not-null 23502, out of range 22003, too long
    // 22001, duplicate column 42701), so each is a kind of its own rather
    // than a phrase inside `Constraint`, `Type` or `Sql` that a message
    // match would have to find. They come last so that the variants above
    // keep their serialized positions.
    /// A NULL where a NOT NULL column would store it: left out of an
    /// INSERT, given as NULL, or computed (`c = c + NULL`).
    #[error("null value in column `{column}` of table `{table}` violates its NOT NULL constraint")]
    NotNull { table: String, column: String },
    /// A number outside what its type holds: more integer digits than a
    /// DECIMAL's precision allows, an integer literal beyond 64 bits, or
    /// arithmetic (`+ - *`, a SUM) that overflows.
    #[error("numeric value out of range: {0}")]
    OutOfRange(String),
    /// A string with more characters than its `VARCHAR(n)` / `CHAR(n)`
    /// column holds.
    #[error(
        "value too long for column `{table}.{column}` (at most {max_len} characters, got {len})"
    )]
    TooLong {
        table: String,
        column: String,
        max_len: u32,
        len: usize,
    },
    /// A column named twice where a statement lists columns (INSERT's
    /// column list, CREATE TABLE).
    #[error("column `{column}` of table `{table}` is given twice")]
    DuplicateColumn { table: String, column: String },
}

impl Error {
    /// Concurrency-control aborts: the transaction did nothing wrong and may be
    /// retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Aborted(_))
    }

    pub fn type_mismatch(
        what: impl Into<String>,
        expected: impl ToString,
        got: impl ToString,
    ) -> Self {
        Error::Type {
            what: what.into(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }
}
