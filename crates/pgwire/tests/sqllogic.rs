//! brine's SQL conformance suite: the sqllogictest files under
//! `tests/slt/`, run over the PostgreSQL wire protocol.
//!
//! ```text
//!  tests/slt/NAME.ddl ──Application::ddl──► Cluster::start (2 nodes x 2 partitions)
//!                                               ▲
//!  tests/slt/NAME.slt ──records──► Runner ──tokio-postgres──► PgServer
//!                                   (AsyncDB = Brine below)
//! ```
//!
//! # Why the schema is a companion file
//!
//! brine has no DDL at run time: a cluster's tables are those of its
//! application's DDL, parsed once when the cluster starts, and
//! `CREATE TABLE` over the wire is refused like any statement outside the
//! subset (`errors.slt` checks that). So each `NAME.slt` has a `NAME.ddl`
//! beside it, given verbatim as the `Application`'s `ddl`, and runs
//! against a cluster of its own started from it: files share no state, and
//! a record's expected result depends only on the records above it in its
//! file.
//!
//! # How results are compared
//!
//! * Every record is sent with `simple_query`, PostgreSQL's simple
//!   protocol, so values come back as the server's text: `12.50`, not a
//!   decimal re-printed by the client. One statement per record: the
//!   result of a multi-statement string is that of its last statement.
//! * NULL is written `NULL`, the empty string `(empty)` (sqllogictest's
//!   conventions), so neither can pass for the other.
//! * Column type characters come from the types the server reports for
//!   the query's columns (its RowDescription, asked for with a Parse and
//!   Describe of the same text once the query has run; describing has no
//!   effect on the session): `I` for `int2`/`int4`/`int8`, `R` for
//!   `numeric`/`float4`/`float8`, `T` for everything else (`text`,
//!   `varchar`, `timestamp`). They are checked strictly: `query IT`
//!   fails on a result of types `IR` or of three columns.
//! * `statement count N` compares the command tag's row count (INSERT,
//!   UPDATE, DELETE).
//! * `statement error (SQLSTATE)` compares the SQLSTATE; `statement error
//!   REGEX` matches the error's text, `<SQLSTATE>: <message>` (the
//!   server's message as it sent it).
//!
//! Every record of every file runs, so one failure does not hide the
//! next; the test fails at the end listing each failed record with its
//! file, line, and the diff of expected and actual.
//!
//! # What the records expect
//!
//! PostgreSQL's behaviour, for what brine's subset accepts, and brine's
//! documented refusals (`crates/sql/src/lib.rs`, `docs/pgwire.md`) for
//! what it does not:
//! * Where brine deliberately and documentedly differs from PostgreSQL,
//!   the record expects brine's behaviour under a comment `# brine
//!   differs from PostgreSQL: ...` naming the documentation.
//! * Where both refuse a statement but with different SQLSTATEs, the
//!   record matches the message, and a comment gives PostgreSQL's code.
//! * A known bug is a record of the right behaviour under `# BUG(brine):
//!   ...` and `skipif brine`, so it is skipped. So is a record of
//!   PostgreSQL's behaviour where brine documentedly differs and means to
//!   follow one day (`# brine differs from PostgreSQL: ...` with `skipif
//!   brine`, listed under docs/pgwire.md's "Not supported yet").
//!   `BRINE_SLT_KNOWN_BUGS=1` runs those records too, to see which are
//!   fixed. A fixed record leaves the state the records after it expect.
//!
//! # Schemas brine refuses
//!
//! A `.ddl` that brine refuses stops its file, so what brine's DDL refuses
//! is checked by tests of its own below (one, for now: a UNIQUE that
//! leaves out the partitioning column).
//!
//! Adding a case is adding records to a file, or a new `NAME.slt` with
//! its `NAME.ddl`. Nothing here waits for time: records run one after
//! another on one connection, and no file runs two transactions at once.

mod common;

use std::path::{Path, PathBuf};

use brine_cluster::{Application, Cluster, ClusterConfig};
use brine_pgwire::{PgServer, ServerConfig};
use sqllogictest::{
    strict_column_validator, AsyncDB, Condition, DBOutput, DefaultColumnType, Record, Runner,
};
use tokio::net::TcpListener;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// An error as the runner matches it: the server's SQLSTATE and message
/// (tokio-postgres' own `Display` says only "db error").
#[derive(Debug)]
struct WireError {
    code: Option<String>,
    text: String,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.text),
            None => f.write_str(&self.text),
        }
    }
}

impl std::error::Error for WireError {}

impl From<tokio_postgres::Error> for WireError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => WireError {
                code: Some(db.code().code().to_string()),
                text: db.message().to_string(),
            },
            None => WireError {
                code: None,
                text: format!("{e:?}"),
            },
        }
    }
}

/// One connection to the listener, as the sqllogictest runner drives it.
struct Brine {
    client: Client,
    connection: tokio::task::JoinHandle<()>,
}

impl Brine {
    async fn connect(port: u16) -> Result<Brine, WireError> {
        let (client, conn) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=slt dbname=brine"),
            NoTls,
        )
        .await?;
        let connection = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Brine { client, connection })
    }

    /// The type characters of `sql`'s result columns, from the server's
    /// description of them.
    async fn column_types(&self, sql: &str) -> Result<Vec<DefaultColumnType>, WireError> {
        let stmt = self.client.prepare(sql).await?;
        Ok(stmt
            .columns()
            .iter()
            .map(|c| type_char(c.type_()))
            .collect())
    }
}

fn type_char(ty: &Type) -> DefaultColumnType {
    if *ty == Type::INT2 || *ty == Type::INT4 || *ty == Type::INT8 {
        DefaultColumnType::Integer
    } else if *ty == Type::NUMERIC || *ty == Type::FLOAT4 || *ty == Type::FLOAT8 {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn cell(v: Option<&str>) -> String {
    match v {
        None => "NULL".to_string(),
        Some("") => "(empty)".to_string(),
        Some(s) => s.to_string(),
    }
}

#[async_trait::async_trait]
impl AsyncDB for Brine {
    type Error = WireError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, Self::Error> {
        let messages = self.client.simple_query(sql).await?;
        let mut has_rows = false;
        let mut rows = Vec::new();
        let mut count = 0;
        for m in messages {
            match m {
                SimpleQueryMessage::RowDescription(_) => {
                    has_rows = true;
                    rows.clear();
                }
                SimpleQueryMessage::Row(r) => {
                    rows.push((0..r.len()).map(|i| cell(r.get(i))).collect());
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        if !has_rows {
            return Ok(DBOutput::StatementComplete(count));
        }
        let types = self.column_types(sql).await?;
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {
        self.connection.abort();
    }

    fn engine_name(&self) -> &str {
        // `skipif brine` marks the records of known bugs (see the header);
        // without the name they run, to see which bugs are fixed.
        if std::env::var_os("BRINE_SLT_KNOWN_BUGS").is_some() {
            ""
        } else {
            "brine"
        }
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        err.code.clone()
    }
}

fn slt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt")
}

/// The `.slt` files of the suite, in name order.
fn slt_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(slt_dir())
        .expect("tests/slt exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

/// A cluster started from `ddl`, with the listener in front of it.
async fn start(name: &str, ddl: String) -> (Cluster, PgServer) {
    let config = common::four_partitions();
    let app = Application {
        name: format!("slt-{name}"),
        ddl,
        procedures: Vec::new(),
    };
    let cluster = Cluster::start(config, app)
        .unwrap_or_else(|e| panic!("{name}.ddl: the cluster does not start: {e}"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server =
        PgServer::start(listener, cluster.clone(), ServerConfig::default()).expect("listen");
    (cluster, server)
}

/// What the records of the suite came to.
#[derive(Default)]
struct Tally {
    /// Statement and query records, known bugs included.
    records: usize,
    /// Records marked `skipif brine`.
    known_bugs: usize,
    /// Each failed record, with its file, line and diff.
    failures: Vec<String>,
}

fn is_known_bug(record: &Record<DefaultColumnType>) -> bool {
    let conditions = match record {
        Record::Statement { conditions, .. } | Record::Query { conditions, .. } => conditions,
        _ => return false,
    };
    conditions
        .iter()
        .any(|c| matches!(c, Condition::SkipIf { label } if label == "brine"))
}

/// Runs every record of one file against a cluster of its own.
async fn run_file(path: &Path, tally: &mut Tally) {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a file name")
        .to_string();
    let ddl_path = path.with_extension("ddl");
    let ddl = std::fs::read_to_string(&ddl_path).unwrap_or_else(|e| {
        panic!(
            "{}: every .slt file needs its schema beside it: {e}",
            ddl_path.display()
        )
    });
    let records = match sqllogictest::parse_file::<DefaultColumnType>(path) {
        Ok(r) => r,
        Err(e) => {
            tally.failures.push(format!("{}: {e}", path.display()));
            return;
        }
    };
    let (_cluster, server) = start(&name, ddl).await;
    let port = server.local_addr().port();
    let mut runner = Runner::new(move || Brine::connect(port));
    runner.with_column_validator(strict_column_validator);
    for record in records {
        if matches!(record, Record::Statement { .. } | Record::Query { .. }) {
            tally.records += 1;
            tally.known_bugs += usize::from(is_known_bug(&record));
        }
        if let Err(e) = runner.run_async(record).await {
            tally.failures.push(e.display(false).to_string());
        }
    }
    runner.shutdown_async().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_conformance() {
    let files = slt_files();
    assert!(
        !files.is_empty(),
        "no .slt files in {}",
        slt_dir().display()
    );
    let mut tally = Tally::default();
    for file in &files {
        run_file(file, &mut tally).await;
    }
    assert!(
        tally.failures.is_empty(),
        "{} of {} records failed:\n\n{}",
        tally.failures.len(),
        tally.records,
        tally.failures.join("\n")
    );
    eprintln!(
        "{} records in {} files passed ({} of them skipped for brine: known bugs \
         and documented differences)",
        tally.records,
        files.len(),
        tally.known_bugs
    );
}

/// A UNIQUE constraint or index must include the table's partitioning
/// column, since a partition checks uniqueness among its own rows only:
/// the cluster refuses to start on a schema that has one which does not,
/// as PostgreSQL refuses it for a partitioned table. (The suite's own
/// schemas put the partitioning column in their unique constraints.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_constraint_without_the_partitioning_column_is_refused() {
    for (ddl, index) in [
        (
            "CREATE TABLE person (id INT PRIMARY KEY, email VARCHAR(40) UNIQUE);",
            "`person_unique_0` on (email)",
        ),
        (
            "CREATE TABLE person (org INT, id INT, email TEXT, PRIMARY KEY (org, id)) \
             PARTITION BY (org);
             CREATE UNIQUE INDEX person_email ON person (id, email);",
            "`person_email` on (id, email)",
        ),
    ] {
        let app = Application {
            name: "slt-refused".into(),
            ddl: ddl.into(),
            procedures: Vec::new(),
        };
        let e = match Cluster::start(ClusterConfig::default(), app) {
            Ok(_) => panic!("a cluster started on {ddl}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(index), "{e}");
        assert!(e.contains("must include the partitioning column"), "{e}");
    }
}
