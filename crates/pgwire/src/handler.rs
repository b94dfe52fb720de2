//! The protocol's handlers for one connection: startup, the simple query
//! protocol (a query string of statements), and the extended one (Parse,
//! Bind, Describe, Execute, Sync). They turn messages into classified
//! commands for the connection's [`Session`] and its answers into
//! messages; the session owns every decision about transactions.
//!
//! ```text
//!  Query(text) ──split──classify──► Session::run ──► RowDescription, DataRow*,
//!                                                     CommandComplete | ErrorResponse
//!  Parse ──classify (plan prepared)──► statement store
//!  Bind ──(pgwire keeps the portal)
//!  Describe ──► ParameterDescription / RowDescription from the plan
//!  Execute ──decode parameters──► Session::run ──► DataRow*, CommandComplete
//!  Sync ──► ReadyForQuery with the session's status (I, T or E)
//! ```
//!
//! A CALL's result columns are only known once it ran, so a Describe of a
//! CALL portal runs it and keeps the answer for the Execute that follows
//! (within the same Sync); a Describe of a CALL statement (not yet bound)
//! answers NoData.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use brine_cluster::Cluster;
use brine_core::Value;
use bytes::BytesMut;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_execution_response, send_query_response, ExtendedQueryHandler, SimpleQueryHandler,
};
use pgwire::api::results::{
    DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo, QueryResponse,
    Response,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, Type, DEFAULT_NAME, METADATA_DATABASE,
    METADATA_USER,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::{
    Close, CloseComplete, Parse, ParseComplete, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL,
    TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery, TransactionStatus};
use pgwire::messages::startup::Startup;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::command::{self, classify, split, Command, Context};
use crate::session::{Answer, Reply, Session};
use crate::sqlstate::SqlError;
use crate::values::{decode_param, encode_field, Target};

/// At most this many named prepared statements per connection.
pub const PREPARED_STATEMENTS_MAX: usize = 10_000;

/// A statement as the extended protocol keeps it.
#[derive(Debug)]
pub struct Parsed {
    pub command: Command,
}

/// Classifies SQL text for the statement store.
pub struct Classifier {
    cluster: Cluster,
}

#[async_trait]
impl QueryParser for Classifier {
    type Statement = Arc<Parsed>;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Self::Statement>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let parts = split(sql)?;
        let command = match parts.as_slice() {
            [] => Command::Empty,
            [one] => classify(one, &context(&self.cluster, client))?,
            _ => {
                return Err(SqlError::new(
                    "42601",
                    "cannot insert multiple commands into a prepared statement",
                )
                .into())
            }
        };
        Ok(Arc::new(Parsed { command }))
    }
}

fn context<'a, C: ClientInfo>(cluster: &'a Cluster, client: &'a C) -> Context<'a> {
    Context {
        catalog: cluster.catalog(),
        user: client
            .metadata()
            .get(METADATA_USER)
            .map_or("brine", String::as_str),
        database: client
            .metadata()
            .get(METADATA_DATABASE)
            .map_or("brine", String::as_str),
    }
}

/// A CALL run by a Describe of its portal, waiting for its Execute.
struct Stashed {
    portal: String,
    statement: String,
    parameters: Vec<Option<bytes::Bytes>>,
    answer: Result<Answer, SqlError>,
}

/// The handlers of one connection (see the module's documentation).
pub struct Conn {
    cluster: Cluster,
    parser: Arc<Classifier>,
    session: tokio::sync::Mutex<Session>,
    /// Names of this connection's named prepared statements (bounded).
    named: parking_lot::Mutex<HashSet<String>>,
    /// Statements DEALLOCATE named (a simple query, which cannot reach the
    /// statement store): removed from it at the next Parse or Close.
    deallocated: parking_lot::Mutex<Vec<String>>,
    stash: parking_lot::Mutex<Option<Stashed>>,
}

impl Conn {
    /// Removes the statements DEALLOCATE named from `store` (see
    /// `Conn::deallocated`).
    fn forget_deallocated<S: PortalStore>(&self, store: &S) {
        for gone in std::mem::take(&mut *self.deallocated.lock()) {
            store.rm_statement(&gone);
        }
    }

    pub fn new(cluster: Cluster) -> Conn {
        Conn {
            session: tokio::sync::Mutex::new(Session::new(cluster.clone(), &BTreeMap::new())),
            parser: Arc::new(Classifier {
                cluster: cluster.clone(),
            }),
            cluster,
            named: Default::default(),
            deallocated: Default::default(),
            stash: Default::default(),
        }
    }

    /// Whether the session holds a transaction (open or failed).
    pub async fn in_transaction(&self) -> bool {
        self.session.lock().await.in_transaction()
    }

    /// Ends the session, aborting its transaction.
    pub async fn close(&self) {
        self.stash.lock().take();
        self.session.lock().await.close().await;
    }

    /// Decodes a portal's parameters into brine values for its command.
    fn params(&self, portal: &Portal<Arc<Parsed>>) -> Result<Vec<Value>, SqlError> {
        let stmt = &portal.statement;
        let cmd = &stmt.statement.command;
        let needed = cmd.param_count().max(stmt.parameter_types.len());
        if portal.parameters.len() != needed {
            return Err(SqlError::new(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {needed}",
                    portal.parameters.len(),
                    stmt.id
                ),
            ));
        }
        let inferred = cmd.param_types();
        portal
            .parameters
            .iter()
            .enumerate()
            .map(|(i, bytes)| {
                // The type the client declared, else, for a binary value,
                // the one it was told (which says how to read the bytes).
                // Text the client did not type is read as `brine call`
                // reads an argument: pgbench's `CALL p(:n)` sends "42"
                // for a parameter it was told is text.
                let binary = is_binary(&portal.parameter_format, i);
                let sent = stmt
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| binary.then(|| inferred.get(i).cloned()).flatten());
                decode_param(bytes.as_deref(), binary, sent.as_ref(), target(cmd, i)).map_err(|e| {
                    SqlError {
                        message: format!("parameter ${}: {}", i + 1, e.message),
                        ..e
                    }
                })
            })
            .collect()
    }

    /// Runs a portal's command: decodes its parameters, then runs it in
    /// the session (a decoding error fails an open transaction too).
    async fn run_portal(&self, portal: &Portal<Arc<Parsed>>) -> Result<Answer, SqlError> {
        let mut session = self.session.lock().await;
        match self.params(portal) {
            Ok(params) => {
                session
                    .run(&portal.statement.statement.command, params)
                    .await
            }
            Err(_) if session.status() == TransactionStatus::Error => {
                Err(SqlError::in_failed_transaction())
            }
            Err(e) => Err(session.fail(e).await),
        }
    }
}

/// What parameter `i` of `cmd` should decode to.
fn target(cmd: &Command, i: usize) -> Target<'_> {
    cmd.statements()
        .find_map(|(plan, order)| {
            let j = order.iter().position(|&at| at == i)?;
            plan.params().get(j)
        })
        .map_or(Target::Any, |p| Target::Column(&p.ty))
}

/// Whether value `i` travels in binary format (a malformed format list
/// reads as text rather than failing).
fn is_binary(f: &Format, i: usize) -> bool {
    match f {
        Format::UnifiedBinary => true,
        Format::UnifiedText => false,
        Format::Individual(codes) => codes.get(i) == Some(&1),
    }
}

fn fields(cols: &[(String, Type)], format: &Format) -> Vec<FieldInfo> {
    cols.iter()
        .enumerate()
        .map(|(i, (name, ty))| {
            let f = if is_binary(format, i) {
                FieldFormat::Binary
            } else {
                FieldFormat::Text
            };
            FieldInfo::new(name.clone(), None, None, ty.clone(), f)
        })
        .collect()
}

/// The result columns a command will have, where they are known before
/// it runs.
fn described_columns(cmd: &Command, cluster: &Cluster) -> Vec<(String, Type)> {
    match cmd {
        Command::Statement { plan, .. } => command::result_fields(plan, cluster.catalog()),
        Command::Rows(rows) => rows.fields.clone(),
        Command::Show { name } => vec![(name.clone(), Type::TEXT)],
        _ => Vec::new(),
    }
}

/// An answer as a pgwire response, its rows encoded in `format`.
fn response(answer: Answer, format: &Format) -> PgWireResult<Response> {
    match answer.reply {
        Reply::Done(tag) => Ok(Response::Execution(tag)),
        Reply::Rows {
            fields: cols,
            rows,
            tag,
        } => {
            let info = Arc::new(fields(&cols, format));
            let mut encoded = Vec::with_capacity(rows.len());
            for row in rows {
                // A row must match its description, or the client would
                // misread every field after the first mismatch.
                if row.len() != cols.len() {
                    return Err(SqlError::new(
                        "XX000",
                        format!(
                            "a result row of {} values for {} columns",
                            row.len(),
                            cols.len()
                        ),
                    )
                    .into());
                }
                let mut buf = BytesMut::with_capacity(16 * row.len());
                for (i, v) in row.iter().enumerate() {
                    let ty = cols.get(i).map_or(&Type::TEXT, |c| &c.1);
                    encode_field(&mut buf, v, ty, is_binary(format, i))?;
                }
                encoded.push(Ok(DataRow::new(buf, row.len() as i16)));
            }
            let mut q = QueryResponse::new(info, futures::stream::iter(encoded));
            q.set_command_tag(tag);
            Ok(Response::Query(q))
        }
    }
}

async fn send_notices<C>(client: &mut C, notices: &[SqlError]) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for n in notices {
        client
            .feed(PgWireBackendMessage::NoticeResponse(n.info().into()))
            .await?;
    }
    Ok(())
}

#[async_trait]
impl StartupHandler for Conn {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // brine asks for no password: the listener belongs on the same
        // trusted network as the node's own port.
        let PgWireFrontendMessage::Startup(startup) = message else {
            return Ok(());
        };
        start(client, &startup).await?;
        let settings: BTreeMap<String, String> = client
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        *self.session.lock().await = Session::new(self.cluster.clone(), &settings);
        Ok(())
    }
}

async fn start<C>(client: &mut C, startup: &Startup) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    protocol_negotiation(client, startup).await?;
    save_startup_parameters_to_metadata(client, startup);
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = crate::server_version_text();
    params.date_style = "ISO, MDY".into();
    params.is_superuser = false;
    finish_authentication(client, &params).await
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let mut session = self.session.lock().await;
        let outcome = async {
            let parts = split(&query.query)?;
            if parts.is_empty() {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
                return Ok(());
            }
            // Statements run in order; the first error ends the query.
            for part in parts {
                let cmd = match classify(part, &context(&self.cluster, client)) {
                    Ok(c) => c,
                    Err(e) => return Err(session.fail(e).await.into()),
                };
                if let Command::Deallocate { name } = &cmd {
                    let mut named = self.named.lock();
                    let names: Vec<String> = match name {
                        Some(n) => named.take(n).into_iter().collect(),
                        None => named.drain().collect(),
                    };
                    self.deallocated.lock().extend(names);
                }
                let answer = session.run(&cmd, Vec::new()).await?;
                send_notices(client, &answer.notices).await?;
                match response(answer, &Format::UnifiedText)? {
                    Response::Query(mut q) => send_query_response(client, &mut q, true).await?,
                    Response::Execution(tag) => send_execution_response(client, tag).await?,
                    _ => {}
                }
            }
            Ok::<(), PgWireError>(())
        }
        .await;
        if let Err(e) = outcome {
            let info: pgwire::error::ErrorInfo = e.into();
            client
                .feed(PgWireBackendMessage::ErrorResponse(info.into()))
                .await?;
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        let status = session.status();
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_query` above handles the whole query.
        Err(SqlError::new("XX000", "simple queries are handled by on_query").into())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = Arc<Parsed>;
    type QueryParser = Classifier;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.forget_deallocated(client.portal_store());
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        let full = message.name.is_some() && {
            let named = self.named.lock();
            !named.contains(&name) && named.len() >= PREPARED_STATEMENTS_MAX
        };
        let types: Vec<Option<Type>> = message
            .type_oids
            .iter()
            .map(|&oid| Type::from_oid(oid))
            .collect();
        let parsed = if full {
            Err(SqlError::new(
                "54000",
                format!("{PREPARED_STATEMENTS_MAX} prepared statements on this connection; close some first"),
            )
            .into())
        } else {
            self.parser.parse_sql(client, &message.query, &types).await
        };
        // A Parse that fails (a statement that does not prepare) fails an
        // open transaction, as any error inside one does in PostgreSQL:
        // later statements get 25P02 until it ends.
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.session.lock().await.fail_transaction().await;
                return Err(e);
            }
        };
        if message.name.is_some() {
            self.named.lock().insert(name.clone());
        }
        client
            .portal_store()
            .put_statement(Arc::new(StoredStatement::new(name, parsed, types)));
        client
            .send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.forget_deallocated(client.portal_store());
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                client.portal_store().rm_statement(name);
                self.named.lock().remove(name);
            }
            TARGET_TYPE_BYTE_PORTAL => client.portal_store().rm_portal(name),
            _ => {}
        }
        client
            .send(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A CALL described but never executed ran all the same; its
        // answer is dropped here.
        self.stash.lock().take();
        let status = self.session.lock().await.status();
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cmd = &target.statement.command;
        let inferred = cmd.param_types();
        let n = inferred.len().max(target.parameter_types.len());
        // A type the client declared stands; the others are inferred.
        let params = (0..n)
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| inferred.get(i).cloned())
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        let cols = described_columns(cmd, &self.cluster);
        Ok(DescribeStatementResponse::new(
            params,
            fields(&cols, &Format::UnifiedText),
        ))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cmd = &portal.statement.statement.command;
        if !matches!(cmd, Command::Call { .. }) {
            let cols = described_columns(cmd, &self.cluster);
            return Ok(DescribePortalResponse::new(fields(
                &cols,
                &portal.result_column_format,
            )));
        }
        let answer = self.run_portal(portal).await;
        let cols = match &answer {
            Ok(Answer {
                reply: Reply::Rows { fields: cols, .. },
                ..
            }) => cols.clone(),
            Ok(_) => Vec::new(),
            Err(e) => return Err(e.clone().into()),
        };
        *self.stash.lock() = Some(Stashed {
            portal: portal.name.clone(),
            statement: portal.statement.id.clone(),
            parameters: portal.parameters.clone(),
            answer,
        });
        Ok(DescribePortalResponse::new(fields(
            &cols,
            &portal.result_column_format,
        )))
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if matches!(portal.statement.statement.command, Command::Empty) {
            return Ok(Response::EmptyQuery);
        }
        let stashed = {
            let mut stash = self.stash.lock();
            match stash.as_ref() {
                Some(s)
                    if s.portal == portal.name
                        && s.statement == portal.statement.id
                        && s.parameters == portal.parameters =>
                {
                    stash.take().map(|s| s.answer)
                }
                _ => None,
            }
        };
        let answer = match stashed {
            Some(a) => a,
            None => self.run_portal(portal).await,
        }?;
        send_notices(client, &answer.notices).await?;
        response(answer, &portal.result_column_format)
    }
}

/// A describe response with no parameters and no columns, for tests of
/// the helpers above.
#[cfg(test)]
mod tests {
    use super::*;
    use pgwire::api::results::DescribeResponse;

    #[test]
    fn malformed_format_lists_read_as_text() {
        let f = Format::Individual(vec![1]);
        assert!(is_binary(&f, 0));
        assert!(!is_binary(&f, 5));
        assert!(DescribePortalResponse::new(Vec::new()).is_no_data());
    }
}
