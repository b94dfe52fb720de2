//! One connection's session: its transaction, in PostgreSQL's three
//! states, and its settings. It runs classified commands against the
//! node's cluster and knows nothing of the wire.
//!
//! ```text
//!            BEGIN                      error in a statement
//!   Idle ───────────────► Open(Txn) ─────────────────────────► Failed
//!    ▲  ◄───────────────    │  (the brine transaction is aborted    │
//!    │   COMMIT / ROLLBACK  │   at once: its locks go free)         │
//!    └──────────────────────┴───────── COMMIT / ROLLBACK ◄──────────┘
//!
//!   Idle: each statement is a transaction of its own (autocommit),
//!         retried while concurrency control picks it as a victim.
//!   Failed: every statement but COMMIT / ROLLBACK gets 25P02.
//! ```
//!
//! A session that ends (the client disconnected, the server stops)
//! aborts its open transaction before it goes, so no lock outlives its
//! connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use brine_cluster::{Client, Cluster, Isolation, Txn};
use brine_core::{Error, Value};
use brine_sql::{Plan, StatementKind};
use pgwire::api::results::Tag;
use pgwire::api::Type;
use pgwire::messages::response::TransactionStatus;

use crate::command::{result_fields, CallArg, Command};
use crate::sqlstate::SqlError;
use crate::values::pg_type_of_value;

/// What a statement returns.
#[derive(Debug)]
pub enum Reply {
    Rows {
        fields: Vec<(String, Type)>,
        rows: Vec<Vec<Value>>,
        /// The command tag's word (`SELECT`, `SHOW`, `CALL`); the row
        /// count is added when it is sent.
        tag: &'static str,
    },
    Done(Tag),
}

/// A reply with the notices and warnings that go before it.
#[derive(Debug)]
pub struct Answer {
    pub reply: Reply,
    pub notices: Vec<SqlError>,
}

impl Answer {
    fn done(tag: Tag) -> Answer {
        Answer {
            reply: Reply::Done(tag),
            notices: Vec::new(),
        }
    }

    fn notice(mut self, n: SqlError) -> Answer {
        self.notices.push(n);
        self
    }
}

enum State {
    Idle,
    Open(Txn),
    Failed,
}

/// One client's session (see the module's documentation).
pub struct Session {
    cluster: Cluster,
    client: Client,
    state: State,
    /// Values given with SET (and the client's startup parameters), by
    /// lowercased name; SHOW reads them before the defaults.
    settings: BTreeMap<String, String>,
    /// The open block has run a statement (a CALL may no longer run in
    /// it), or has run a CALL, which committed on its own (a statement may
    /// no longer run in it).
    block: Block,
}

/// What the open transaction block has run (see `Session::block`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Block {
    #[default]
    Empty,
    Statements,
    Calls,
}

impl Session {
    pub fn new(cluster: Cluster, startup: &BTreeMap<String, String>) -> Session {
        let client = cluster.client();
        let settings = startup
            .iter()
            .filter(|(k, _)| k.as_str() == "application_name")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Session {
            cluster,
            client,
            state: State::Idle,
            settings,
            block: Block::Empty,
        }
    }

    /// The status a ReadyForQuery message reports.
    pub fn status(&self) -> TransactionStatus {
        match self.state {
            State::Idle => TransactionStatus::Idle,
            State::Open(_) => TransactionStatus::Transaction,
            State::Failed => TransactionStatus::Error,
        }
    }

    pub fn in_transaction(&self) -> bool {
        !matches!(self.state, State::Idle)
    }

    /// Records an error the session met outside [`Session::run`] (a
    /// parameter that did not decode, a statement that did not prepare):
    /// inside a transaction it fails the transaction, as any error there
    /// does.
    pub async fn fail(&mut self, e: SqlError) -> SqlError {
        self.fail_transaction().await;
        e
    }

    /// Fails an open transaction: it is aborted at the cluster (its locks
    /// freed) and every statement but COMMIT and ROLLBACK gets 25P02 until
    /// it ends. A failed one stays failed; outside one nothing changes.
    pub async fn fail_transaction(&mut self) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Open(txn) => {
                self.state = State::Failed;
                txn.abort().await;
            }
            State::Failed => self.state = State::Failed,
            State::Idle => {}
        }
    }

    /// Ends the session: an open transaction is aborted (its locks freed)
    /// before this returns.
    pub async fn close(&mut self) {
        if let State::Open(txn) = std::mem::replace(&mut self.state, State::Idle) {
            txn.abort().await;
        }
        self.state = State::Idle;
    }

    /// Runs one command. `params` are the client's parameters by position
    /// (`$1` first), already decoded to the types the command wants.
    pub async fn run(&mut self, cmd: &Command, params: Vec<Value>) -> Result<Answer, SqlError> {
        if matches!(self.state, State::Failed)
            && !matches!(cmd, Command::Commit | Command::Rollback | Command::Empty)
        {
            return Err(SqlError::in_failed_transaction());
        }
        match cmd {
            Command::Empty => Ok(Answer::done(Tag::new(""))),
            Command::Begin { isolation } => self.begin(*isolation),
            Command::Commit => self.commit().await,
            Command::Rollback => Ok(self.rollback().await),
            Command::SetIsolation { isolation } => {
                let a = Answer::done(Tag::new("SET"));
                match self.check_isolation(*isolation) {
                    Ok(Some(n)) => Ok(a.notice(n)),
                    Ok(None) => Ok(a),
                    Err(e) => Err(self.fail(e).await),
                }
            }
            Command::Set { name, value } => match self.set(name, value) {
                Ok(a) => Ok(a),
                Err(e) => Err(self.fail(e).await),
            },
            Command::Reset { name } => {
                match name {
                    Some(n) => self.settings.remove(n.as_str()),
                    None => {
                        self.settings.clear();
                        None
                    }
                };
                Ok(Answer::done(Tag::new("RESET")))
            }
            Command::Show { name } => match self.show(name) {
                Ok(v) => Ok(Answer {
                    reply: Reply::Rows {
                        fields: vec![(name.clone(), Type::TEXT)],
                        rows: vec![vec![Value::str(&v)]],
                        tag: "SHOW",
                    },
                    notices: Vec::new(),
                }),
                Err(e) => Err(self.fail(e).await),
            },
            Command::Rows(rows) => Ok(Answer {
                reply: Reply::Rows {
                    fields: rows.fields.clone(),
                    rows: rows.rows.clone(),
                    tag: "SELECT",
                },
                notices: Vec::new(),
            }),
            Command::Call { procedure, args } => self.call(procedure, args, params).await,
            Command::Deallocate { name } => Ok(Answer::done(Tag::new(match name {
                Some(_) => "DEALLOCATE",
                None => "DEALLOCATE ALL",
            }))),
            Command::Statement { plan, .. } => {
                let r = self
                    .statements(cmd, &params)
                    .await?
                    .pop()
                    .unwrap_or_default();
                Ok(Answer {
                    reply: match plan.kind() {
                        StatementKind::Select => Reply::Rows {
                            fields: result_fields(plan, self.cluster.catalog()),
                            rows: r.rows,
                            tag: "SELECT",
                        },
                        StatementKind::Insert => Reply::Done(
                            Tag::new("INSERT")
                                .with_oid(0)
                                .with_rows(r.affected as usize),
                        ),
                        StatementKind::Update => {
                            Reply::Done(Tag::new("UPDATE").with_rows(r.affected as usize))
                        }
                        StatementKind::Delete => {
                            Reply::Done(Tag::new("DELETE").with_rows(r.affected as usize))
                        }
                    },
                    notices: Vec::new(),
                })
            }
            Command::InsertRows(_) => {
                let results = self.statements(cmd, &params).await?;
                let rows = results.iter().map(|r| r.affected as usize).sum();
                Ok(Answer::done(Tag::new("INSERT").with_oid(0).with_rows(rows)))
            }
        }
    }

    /// Runs the statements of `cmd` in the open transaction, or together
    /// as one transaction of their own.
    async fn statements(
        &mut self,
        cmd: &Command,
        params: &[Value],
    ) -> Result<Vec<brine_sql::QueryResult>, SqlError> {
        let mut batch = Vec::new();
        for (plan, order) in cmd.statements() {
            let mut args = Vec::with_capacity(order.len());
            for &at in order {
                match params.get(at) {
                    Some(v) => args.push(v.clone()),
                    None => {
                        let e =
                            SqlError::new("42P02", format!("there is no parameter ${}", at + 1));
                        return Err(self.fail(e).await);
                    }
                }
            }
            batch.push((plan.clone(), args));
        }
        let txn = match &mut self.state {
            State::Open(_) if self.block == Block::Calls => {
                let e = SqlError::new(
                    "25001",
                    "this transaction block ran a CALL, which committed on its own: end the block (COMMIT) before running statements",
                );
                return Err(self.fail(e).await);
            }
            State::Open(txn) => txn,
            _ => {
                return match self.autocommit(batch).await {
                    Ok(results) => Ok(results),
                    Err(e) => Err(self.statement_failed(e).await),
                }
            }
        };
        self.block = Block::Statements;
        match run_all(txn, batch).await {
            Ok(results) => Ok(results),
            Err(e) => Err(self.statement_failed(e).await),
        }
    }

    fn begin(&mut self, isolation: Option<Isolation>) -> Result<Answer, SqlError> {
        let notice = self.check_isolation(isolation)?;
        let mut a = Answer::done(Tag::new("BEGIN"));
        if let Some(n) = notice {
            a = a.notice(n);
        }
        if matches!(self.state, State::Open(_)) {
            return Ok(a.notice(SqlError::notice(
                "WARNING",
                "25001",
                "there is already a transaction in progress",
            )));
        }
        self.state = State::Open(self.client.begin());
        self.block = Block::Empty;
        Ok(a)
    }

    async fn commit(&mut self) -> Result<Answer, SqlError> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Open(txn) => txn
                .commit()
                .await
                .map(|()| Answer::done(Tag::new("COMMIT")))
                .map_err(SqlError::from),
            // PostgreSQL ends a failed transaction on COMMIT, and says so.
            State::Failed => Ok(Answer::done(Tag::new("ROLLBACK"))),
            State::Idle => Ok(Answer::done(Tag::new("COMMIT")).notice(no_transaction())),
        }
    }

    async fn rollback(&mut self) -> Answer {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Open(txn) => {
                txn.abort().await;
                let a = Answer::done(Tag::new("ROLLBACK"));
                if self.block == Block::Calls {
                    return a.notice(SqlError::notice(
                        "WARNING",
                        "01000",
                        "the CALLs of this block had committed on their own: ROLLBACK did not undo them",
                    ));
                }
                a
            }
            State::Failed => Answer::done(Tag::new("ROLLBACK")),
            State::Idle => Answer::done(Tag::new("ROLLBACK")).notice(no_transaction()),
        }
    }

    /// A statement of an open transaction failed: the transaction is
    /// aborted now (its locks go free) and the session is failed until
    /// the client ends it. Outside a transaction the autocommit already
    /// ended it.
    async fn statement_failed(&mut self, e: Error) -> SqlError {
        if let State::Open(txn) = std::mem::replace(&mut self.state, State::Failed) {
            discard(txn, &e).await;
        } else {
            self.state = State::Idle;
        }
        e.into()
    }

    /// Statements as one transaction of their own, retried (with the
    /// cluster's retry policy) while concurrency control aborts it: the
    /// client has seen nothing of it yet.
    async fn autocommit(
        &self,
        batch: Vec<(Arc<Plan>, Vec<Value>)>,
    ) -> Result<Vec<brine_sql::QueryResult>, Error> {
        let policy = &self.cluster.config().retry;
        let max = policy.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            let mut txn = self.client.begin();
            let outcome = match run_all(&mut txn, batch.iter().cloned()).await {
                Ok(results) => txn.commit().await.map(|()| results),
                Err(e) => {
                    discard(txn, &e).await;
                    Err(e)
                }
            };
            match outcome {
                Err(Error::Aborted(cause)) if attempt >= max => {
                    return Err(Error::RetriesExhausted {
                        attempts: attempt,
                        last: cause,
                    })
                }
                Err(Error::Aborted(_)) => {
                    backoff(policy, attempt).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn call(
        &mut self,
        procedure: &str,
        args: &[CallArg],
        params: Vec<Value>,
    ) -> Result<Answer, SqlError> {
        // A call is a transaction of its own. Drivers that open a block
        // before every command (psycopg, JDBC without autocommit) may CALL
        // in a block that has run nothing else; the call commits at once,
        // and the block may then only end.
        if matches!(self.state, State::Open(_)) {
            if self.block == Block::Statements {
                let e = SqlError::new(
                    "0A000",
                    format!("CALL {procedure} runs as a transaction of its own and cannot run inside BEGIN ... COMMIT after other statements"),
                )
                .with_hint("end the transaction first, then CALL");
                return Err(self.fail(e).await);
            }
            self.block = Block::Calls;
        }
        let mut values = Vec::with_capacity(args.len());
        for a in args {
            values.push(match a {
                CallArg::Literal(v) => v.clone(),
                CallArg::Param(i) => params.get(*i).cloned().ok_or_else(|| {
                    SqlError::new("42P02", format!("there is no parameter ${}", i + 1))
                })?,
            });
        }
        let outcome = self.client.call(procedure, values).await?;
        if outcome.values.is_empty() {
            // Like a PostgreSQL procedure without OUT parameters: no row.
            return Ok(Answer::done(Tag::new("CALL")));
        }
        let fields = outcome
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("result{}", i + 1), pg_type_of_value(v)))
            .collect();
        Ok(Answer {
            reply: Reply::Rows {
                fields,
                rows: vec![outcome.values],
                tag: "CALL",
            },
            notices: Vec::new(),
        })
    }

    /// The cluster runs every transaction at its own level: a weaker
    /// level asked for gets the stronger one (with a notice), a stronger
    /// one is an error.
    fn check_isolation(&self, asked: Option<Isolation>) -> Result<Option<SqlError>, SqlError> {
        let runs = self.cluster.config().isolation;
        match (asked, runs) {
            (None, _) => Ok(None),
            (Some(a), r) if a == r => Ok(None),
            (Some(Isolation::ReadCommitted), Isolation::Serializable) => Ok(Some(SqlError::notice(
                "NOTICE",
                "00000",
                "this brine cluster runs every transaction at serializable, which is stronger than read committed",
            ))),
            (Some(a), r) => Err(SqlError::new(
                "0A000",
                format!(
                    "this brine cluster runs transactions at {}; {} is not available",
                    level_name(r),
                    level_name(a)
                ),
            )
            .with_hint("the isolation level is the cluster file's `isolation`")),
        }
    }

    fn set(&mut self, name: &str, value: &str) -> Result<Answer, SqlError> {
        let a = Answer::done(Tag::new("SET"));
        let lower = value.to_ascii_lowercase();
        match name {
            "client_encoding" | "names"
                if !matches!(lower.as_str(), "utf8" | "utf-8" | "unicode" | "default") =>
            {
                return Err(SqlError::new(
                    "0A000",
                    format!("brine speaks UTF8 only, not {value}"),
                ));
            }
            "transaction_isolation" | "default_transaction_isolation" => {
                let asked = match lower.as_str() {
                    "serializable" | "repeatable read" => Some(Isolation::Serializable),
                    "read committed" | "read uncommitted" => Some(Isolation::ReadCommitted),
                    "default" => None,
                    _ => {
                        return Err(SqlError::new(
                            "22023",
                            format!("invalid value for parameter \"{name}\": \"{value}\""),
                        ))
                    }
                };
                if let Some(n) = self.check_isolation(asked)? {
                    return Ok(a.notice(n));
                }
                return Ok(a);
            }
            "standard_conforming_strings" if lower != "on" => {
                return Err(SqlError::new(
                    "0A000",
                    "brine's strings are always standard conforming",
                ))
            }
            _ => {}
        }
        if lower == "default" {
            self.settings.remove(name);
        } else {
            self.settings.insert(name.to_string(), value.to_string());
        }
        if HARMLESS_SETTINGS.contains(&name) {
            Ok(a)
        } else {
            Ok(a.notice(SqlError::notice(
                "NOTICE",
                "00000",
                format!("brine accepts the setting \"{name}\" but it changes nothing"),
            )))
        }
    }

    fn show(&self, name: &str) -> Result<String, SqlError> {
        let lower = name.to_ascii_lowercase();
        if let Some(v) = self.settings.get(&lower) {
            return Ok(v.clone());
        }
        let isolation = level_name(self.cluster.config().isolation).to_string();
        Ok(match lower.as_str() {
            "server_version" => crate::SERVER_VERSION.to_string(),
            "server_version_num" => crate::SERVER_VERSION_NUM.to_string(),
            "transaction_isolation" | "default_transaction_isolation" => isolation,
            "standard_conforming_strings" | "integer_datetimes" => "on".into(),
            "client_encoding" | "server_encoding" => "UTF8".into(),
            "datestyle" => "ISO, MDY".into(),
            "timezone" => "UTC".into(),
            "search_path" => "public".into(),
            "max_identifier_length" => "63".into(),
            "transaction_read_only" | "default_transaction_read_only" | "is_superuser" => {
                "off".into()
            }
            "application_name" => String::new(),
            "brine.protocol" => self.cluster.protocol().name().to_string(),
            _ => {
                return Err(SqlError::new(
                    "42704",
                    format!("unrecognized configuration parameter \"{name}\""),
                ))
            }
        })
    }
}

/// Settings that change nothing a client could notice in brine, so SET
/// takes them silently (drivers and pools send them on every connection).
const HARMLESS_SETTINGS: &[&str] = &[
    "application_name",
    "client_encoding",
    "names",
    "datestyle",
    "timezone",
    "extra_float_digits",
    "search_path",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "client_min_messages",
    "intervalstyle",
    "bytea_output",
    "standard_conforming_strings",
];

fn level_name(i: Isolation) -> &'static str {
    match i {
        Isolation::Serializable => "serializable",
        Isolation::ReadCommitted => "read committed",
    }
}

fn no_transaction() -> SqlError {
    SqlError::notice("WARNING", "25P01", "there is no transaction in progress")
}

/// Ends a transaction whose statement failed. A concurrency-control
/// victim is doomed, and committing a doomed transaction aborts it and
/// counts the abort under its cause; any other error is the client's
/// abort.
/// Runs statements in `txn` in order, up to the first that fails.
async fn run_all(
    txn: &mut Txn,
    batch: impl IntoIterator<Item = (Arc<Plan>, Vec<Value>)>,
) -> Result<Vec<brine_sql::QueryResult>, Error> {
    let mut results = Vec::new();
    for (plan, args) in batch {
        results.push(txn.execute_plan(plan, args).await?);
    }
    Ok(results)
}

async fn discard(txn: Txn, e: &Error) {
    if matches!(e, Error::Aborted(_)) {
        let _ = txn.commit().await;
    } else {
        txn.abort().await;
    }
}

/// The cluster's retry policy's pause before attempt `attempt + 1`: the
/// first retry only yields, later ones back off exponentially to the cap.
async fn backoff(policy: &brine_cluster::RetryPolicy, attempt: u32) {
    if attempt <= 1 {
        tokio::task::yield_now().await;
        return;
    }
    let factor = 1u32 << (attempt - 2).min(16);
    let pause: Duration = policy
        .backoff_base
        .saturating_mul(factor)
        .min(policy.backoff_max);
    tokio::time::sleep(pause).await;
}
