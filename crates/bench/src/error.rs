//! The errors a benchmark run can end with. Each one says what failed and
//! what the user can do about it; none of them is a panic in disguise.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    /// A command-line option or benchmark specification that cannot run.
    #[error("invalid benchmark option: {0}")]
    Config(String),
    /// The cluster refused to start, load or answer.
    #[error("{context}: {source}")]
    Cluster {
        context: String,
        #[source]
        source: brine_core::Error,
    },
    /// A procedure call failed for a reason other than contention (a user
    /// abort or exhausted retries are counted, not fatal): the workload or
    /// the engine is wrong, and measuring further would measure the bug.
    #[error("procedure `{procedure}` failed: {source}")]
    Call {
        procedure: String,
        #[source]
        source: brine_core::Error,
    },
    /// A workload invariant did not hold after (or during) the run.
    #[error("invariant violated: {0}")]
    Invariant(String),
    /// Writing a report file failed.
    #[error("cannot write `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A report that the rho x nu plot cannot draw (`report::plot`).
    #[error("cannot plot the report: {0}")]
    Plot(String),
    /// Something in the driver itself went wrong (a client task panicked, a
    /// histogram could not be built).
    #[error("benchmark driver error: {0}")]
    Internal(String),
}

impl BenchError {
    /// Wraps a cluster error with what the driver was doing.
    pub fn cluster(context: impl Into<String>) -> impl FnOnce(brine_core::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Cluster { context, source }
    }
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
