//! Errors as PostgreSQL reports them: a SQLSTATE code that drivers act on
//! (retry loops look for 40001) and a message a person can act on.
//!
//! [`sqlstate`] is the one place where a brine error gets its code; the
//! table is repeated in docs/pgwire.md.

use brine_core::Error;
use pgwire::error::{ErrorInfo, PgWireError};

/// An error (or, with a notice severity, a notice) for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    pub severity: &'static str,
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl SqlError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        SqlError {
            severity: "ERROR",
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// A notice or warning: reported, and the statement goes on.
    pub fn notice(severity: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        SqlError {
            severity,
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// An error that ends the connection.
    pub fn fatal(code: &'static str, message: impl Into<String>) -> Self {
        SqlError {
            severity: "FATAL",
            code,
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// 25P02: what every statement but COMMIT and ROLLBACK gets after an
    /// error inside a transaction.
    pub fn in_failed_transaction() -> Self {
        SqlError::new(
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block",
        )
    }

    pub fn info(&self) -> ErrorInfo {
        let mut info = ErrorInfo::new(
            self.severity.to_string(),
            self.code.to_string(),
            self.message.clone(),
        );
        info.hint = self.hint.clone();
        info
    }
}

impl From<Error> for SqlError {
    fn from(e: Error) -> Self {
        let code = sqlstate(&e);
        let hint = match &e {
            Error::Aborted(_) | Error::RetriesExhausted { .. } => {
                Some("the transaction may be retried from its start".to_string())
            }
            _ => None,
        };
        SqlError {
            severity: "ERROR",
            code,
            message: e.to_string(),
            hint,
        }
    }
}

impl From<SqlError> for PgWireError {
    fn from(e: SqlError) -> Self {
        PgWireError::UserError(Box::new(e.info()))
    }
}

/// The SQLSTATE of a brine error.
pub fn sqlstate(e: &Error) -> &'static str {
    match e {
        // Concurrency control chose this transaction as a victim: it did
        // nothing wrong, and drivers' retry loops retry on 40001.
        Error::Aborted(_) | Error::RetriesExhausted { .. } => "40001",
        Error::DuplicateKey { .. } => "23505",
        Error::NotNull { .. } => "23502",
        Error::OutOfRange(_) => "22003",
        Error::TooLong { .. } => "22001",
        Error::DuplicateColumn { .. } => "42701",
        Error::UnknownTable(_) => "42P01",
        Error::UnknownColumn { .. } => "42703",
        Error::UnknownProcedure(_) => "42883",
        // The planner words every refusal of SQL outside the subset
        // (brine_sql's crate docs) as "unsupported ...".
        Error::Sql(m) if m.starts_with("unsupported") => "0A000",
        Error::Sql(_) => "42601",
        Error::Arity { .. } => "42601",
        Error::Type { .. } => "42804",
        Error::Constraint(_) => "23000",
        Error::UserAbort(_) => "P0001",
        Error::Transport(_) => "08006",
        Error::Bound(_) => "54000",
        Error::TxnState(_) => "25000",
        // At run time these are "not in this configuration" (an
        // interactive write under a replicated protocol).
        Error::Config(_) => "0A000",
        Error::Schema(_) => "42P16",
        Error::Storage(_) => "58030",
        Error::Corrupt { .. } => "XX001",
        Error::UndeclaredStatement { .. } | Error::Internal(_) => "XX000",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brine_core::AbortCause;

    fn code(e: Error) -> &'static str {
        sqlstate(&e)
    }

    #[test]
    fn concurrency_aborts_are_serialization_failures() {
        assert_eq!(code(Error::Aborted(AbortCause::WaitDie)), "40001");
        assert_eq!(code(Error::Aborted(AbortCause::Deadlock)), "40001");
        assert_eq!(
            code(Error::RetriesExhausted {
                attempts: 3,
                last: AbortCause::LockTimeout
            }),
            "40001"
        );
    }

    #[test]
    fn duplicate_key_is_unique_violation() {
        assert_eq!(
            code(Error::DuplicateKey {
                table: "t".into(),
                key: "(1)".into()
            }),
            "23505"
        );
    }

    #[test]
    fn unknown_names() {
        assert_eq!(code(Error::UnknownTable("t".into())), "42P01");
        assert_eq!(
            code(Error::UnknownColumn {
                table: "t".into(),
                column: "c".into()
            }),
            "42703"
        );
        assert_eq!(code(Error::UnknownProcedure("p".into())), "42883");
    }

    #[test]
    fn syntax_and_unsupported() {
        assert_eq!(code(Error::Sql("cannot parse `x`: ...".into())), "42601");
        assert_eq!(code(Error::Sql("unsupported: joins".into())), "0A000");
        assert_eq!(
            code(Error::Sql("unsupported statement `CREATE ...`".into())),
            "0A000"
        );
    }

    #[test]
    fn types_and_arity() {
        assert_eq!(code(Error::type_mismatch("p", "INT", "STRING")), "42804");
        assert_eq!(
            code(Error::Arity {
                what: "p".into(),
                expected: 2,
                got: 1
            }),
            "42601"
        );
        assert_eq!(
            code(Error::OutOfRange("7 overflows column".into())),
            "22003"
        );
        assert_eq!(code(Error::Constraint("x".into())), "23000");
    }

    #[test]
    fn data_errors_have_postgres_codes() {
        let (table, column) = ("t".to_string(), "c".to_string());
        assert_eq!(
            code(Error::NotNull {
                table: table.clone(),
                column: column.clone()
            }),
            "23502"
        );
        assert_eq!(
            code(Error::TooLong {
                table: table.clone(),
                column: column.clone(),
                max_len: 4,
                len: 5
            }),
            "22001"
        );
        assert_eq!(code(Error::DuplicateColumn { table, column }), "42701");
        // Planner refusals of SQL outside the subset.
        for m in [
            "unsupported: ORDER BY must follow the order of the index ...",
            "unsupported: cannot update primary-key column `id` ...",
            "unsupported: qualified or unusual name `public.t` ...",
        ] {
            assert_eq!(code(Error::Sql(m.into())), "0A000", "{m}");
        }
    }

    #[test]
    fn user_abort_is_raise_exception() {
        assert_eq!(code(Error::UserAbort("insufficient funds".into())), "P0001");
    }

    #[test]
    fn transport_is_connection_failure() {
        assert_eq!(code(Error::Transport("node 1 unreachable".into())), "08006");
    }

    #[test]
    fn the_rest() {
        assert_eq!(code(Error::Bound("b".into())), "54000");
        assert_eq!(code(Error::TxnState("s".into())), "25000");
        assert_eq!(code(Error::Config("c".into())), "0A000");
        assert_eq!(code(Error::Schema("s".into())), "42P16");
        assert_eq!(code(Error::Storage("s".into())), "58030");
        assert_eq!(
            code(Error::Corrupt {
                file: "f".into(),
                offset: 0,
                reason: "r".into()
            }),
            "XX001"
        );
        assert_eq!(code(Error::Internal("i".into())), "XX000");
        assert_eq!(
            code(Error::UndeclaredStatement {
                procedure: "p".into(),
                statement: "s".into()
            }),
            "XX000"
        );
    }

    #[test]
    fn retryable_errors_carry_a_hint() {
        let e = SqlError::from(Error::Aborted(AbortCause::WaitDie));
        assert!(e.hint.is_some());
        assert_eq!(e.severity, "ERROR");
    }
}
