//! Errors of the analysis: every one names the procedure or group at fault.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AnalysisError {
    #[error("cannot parse the application's schema: {0}")]
    Schema(#[source] brine_core::Error),
    #[error("procedure `{procedure}`, statement `{statement}`: {source}")]
    Statement {
        procedure: String,
        statement: String,
        #[source]
        source: brine_core::Error,
    },
    #[error("procedure `{procedure}`: {msg}")]
    Notes { procedure: String, msg: String },
    #[error("group names unknown procedure `{name}` (known: {known})")]
    UnknownProcedure { name: String, known: String },
    #[error("procedure `{0}` is named twice in one group")]
    DuplicateProcedure(String),
    #[error("operation partitioning: {0}")]
    Elia(String),
    #[error("internal analysis error: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, AnalysisError>;
