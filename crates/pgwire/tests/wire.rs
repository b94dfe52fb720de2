//! PostgreSQL clients against an in-process cluster behind the listener:
//! tokio-postgres for the protocol as drivers speak it, a raw socket for
//! input no driver would send.
//!
//! Waits observe state (a parked statement, a closed socket), never time.

mod common;

use std::time::Duration;

use brine_cluster::{Application, Cluster, DeadlockPolicy, ProcedureDef};
use brine_core::{Decimal, Value};
use brine_pgwire::{PgServer, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const DDL: &str = "
CREATE TABLE account (
    id INT NOT NULL,
    owner VARCHAR(32) NOT NULL,
    balance DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE TABLE history (
    hid INT DEFAULT unique_rowid() PRIMARY KEY,
    aid INT NOT NULL,
    delta INT NOT NULL,
    mtime TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
";

fn procedures() -> Vec<ProcedureDef> {
    vec![
        ProcedureDef::new("deposit")
            .statement(
                "bump",
                "UPDATE account SET balance = balance + $amount WHERE id = $id",
            )
            .body(|mut ctx, args| async move {
                let r = ctx.exec("bump", args).await?;
                if r.affected == 0 {
                    return Err(ctx.abort("no such account"));
                }
                Ok(vec![])
            }),
        ProcedureDef::new("total")
            .statement("sum", "SELECT SUM(balance) FROM account")
            .statement("count", "SELECT COUNT(*) FROM account")
            .body(|mut ctx, _args| async move {
                let sum = ctx.exec("sum", vec![]).await?;
                let count = ctx.exec("count", vec![]).await?;
                let mut out = sum.rows.into_iter().next().unwrap_or_default();
                out.extend(count.rows.into_iter().next().unwrap_or_default());
                Ok(out)
            }),
    ]
}

/// A two-node cluster with accounts 1..=4 holding 100.00 each, and the
/// listener in front of it.
async fn start() -> (Cluster, PgServer) {
    let mut config = common::four_partitions();
    config.lock.policy = DeadlockPolicy::WaitDie;
    // Long, so a statement waiting for a lock waits for its holder's end
    // rather than for the backstop.
    config.lock.wait_timeout = Duration::from_secs(30);
    let app = Application {
        name: "pgwire-test".into(),
        ddl: DDL.into(),
        procedures: procedures(),
    };
    let cluster = Cluster::start(config, app).expect("cluster starts");
    let rows = (1..=4)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::str(&format!("owner{i}")),
                Value::Decimal(Decimal::new(10_000, 2)),
            ]
        })
        .collect();
    cluster.load("account", rows).await.expect("load");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server =
        PgServer::start(listener, cluster.clone(), ServerConfig::default()).expect("listen");
    (cluster, server)
}

/// A connected client; the connection's task is returned so a test can
/// cut the connection.
async fn connect(server: &PgServer) -> (Client, tokio::task::JoinHandle<()>) {
    let port = server.local_addr().port();
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=tester dbname=brine"),
        NoTls,
    )
    .await
    .expect("connects");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// The text values of a simple query's rows.
async fn text_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .expect(sql)
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

async fn balance(client: &Client, id: i64) -> String {
    let rows = text_rows(
        client,
        &format!("SELECT balance FROM account WHERE id = {id}"),
    )
    .await;
    rows[0][0].clone().expect("a balance")
}

/// A `numeric` read in binary format, as its decimal text.
#[derive(Debug, PartialEq)]
struct Numeric(String);

impl<'a> FromSql<'a> for Numeric {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let word = |i: usize| i16::from_be_bytes([raw[2 * i], raw[2 * i + 1]]);
        let (n, weight, sign, dscale) = (word(0) as usize, word(1) as i32, word(2), word(3) as i32);
        // Value = sum of digit * 10000^(weight - i), printed with dscale.
        let mut units: i128 = 0;
        for i in 0..n {
            let exp = 4 * (weight - i as i32) + dscale;
            let d = i128::from(word(4 + i));
            units += if exp >= 0 {
                d * 10i128.pow(exp as u32)
            } else {
                d / 10i128.pow((-exp) as u32)
            };
        }
        let p = 10i128.pow(dscale as u32);
        let s = if dscale > 0 {
            format!("{}.{:0w$}", units / p, units % p, w = dscale as usize)
        } else {
            units.to_string()
        };
        Ok(Numeric(if sign == 0x4000 { format!("-{s}") } else { s }))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_queries_read_and_write() {
    let (_cluster, server) = start().await;
    let (c, _conn) = connect(&server).await;
    c.batch_execute("INSERT INTO account (id, owner, balance) VALUES (10, 'ten', 5.25)")
        .await
        .expect("insert");
    assert_eq!(
        text_rows(&c, "SELECT id, owner, balance FROM account WHERE id = 10").await,
        vec![vec![
            Some("10".into()),
            Some("ten".into()),
            Some("5.25".into())
        ]]
    );
    // Several statements in one query run in order.
    let msgs = c
        .simple_query(
            "UPDATE account SET balance = balance + 1 WHERE id = 10; SELECT COUNT(*) FROM account",
        )
        .await
        .expect("two statements");
    let completions: Vec<u64> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(completions, vec![1, 1]);
    assert_eq!(balance(&c, 10).await, "6.25");
    assert!(text_rows(&c, "SELECT version()").await[0][0]
        .as_deref()
        .is_some_and(|v| v.starts_with("PostgreSQL 16.0 (brine")));
    assert_eq!(
        text_rows(&c, "SHOW transaction_isolation").await,
        vec![vec![Some("serializable".into())]]
    );
    c.batch_execute("SET application_name = 'wire-test'")
        .await
        .expect("set");
    assert_eq!(
        text_rows(&c, "SHOW application_name").await,
        vec![vec![Some("wire-test".into())]]
    );
    assert_eq!(
        text_rows(&c, "SELECT 1").await,
        vec![vec![Some("1".into())]]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_bind_parameters() {
    let (_cluster, server) = start().await;
    let (c, _conn) = connect(&server).await;
    let select = c
        .prepare("SELECT id, owner, balance FROM account WHERE id = $1")
        .await
        .expect("prepare");
    assert_eq!(select.params(), &[Type::INT8]);
    let types: Vec<Type> = select.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(types, vec![Type::INT8, Type::VARCHAR, Type::NUMERIC]);
    // Results come back in binary format.
    let row = c.query_one(&select, &[&2i64]).await.expect("row 2");
    assert_eq!(row.get::<_, i64>(0), 2);
    assert_eq!(row.get::<_, String>(1), "owner2");
    assert_eq!(row.get::<_, Numeric>(2), Numeric("100.00".into()));

    // Parameters numbered out of order, a numeric sent as text.
    let update = c
        .prepare_typed(
            "UPDATE account SET balance = $2 WHERE id = $1",
            &[Type::INT8, Type::TEXT],
        )
        .await
        .expect("prepare update");
    let n = c
        .execute(&update, &[&3i64, &"42.50"])
        .await
        .expect("update");
    assert_eq!(n, 1);
    assert_eq!(balance(&c, 3).await, "42.50");

    let insert = c
        .prepare("INSERT INTO account (id, owner, balance) VALUES ($1, $2, 0)")
        .await
        .expect("prepare insert");
    assert_eq!(
        c.execute(&insert, &[&20i64, &"twenty"])
            .await
            .expect("insert"),
        1
    );
    let dup = c.execute(&insert, &[&20i64, &"again"]).await.unwrap_err();
    assert_eq!(code(&dup), "23505", "{dup}");

    // A parameter that is not a number for an INT column.
    let bad = c
        .prepare_typed("SELECT owner FROM account WHERE id = $1", &[Type::TEXT])
        .await
        .expect("prepare");
    let e = c.query(&bad, &[&"abc"]).await.unwrap_err();
    assert_eq!(code(&e), "22P02", "{e}");
    // Errors at Parse: unknown table, unknown column, bad syntax.
    assert_eq!(
        code(
            &c.prepare("SELECT * FROM nope WHERE id = 1")
                .await
                .unwrap_err()
        ),
        "42P01"
    );
    assert_eq!(
        code(
            &c.prepare("SELECT nope FROM account WHERE id = 1")
                .await
                .unwrap_err()
        ),
        "42703"
    );
    assert_eq!(code(&c.prepare("SELEKT 1").await.unwrap_err()), "42601");
    // The connection still serves.
    assert_eq!(
        c.query_one(&select, &[&1i64])
            .await
            .expect("row 1")
            .get::<_, i64>(0),
        1
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_or_roll_back() {
    let (_cluster, server) = start().await;
    let (mut a, _ca) = connect(&server).await;
    let (b, _cb) = connect(&server).await;

    let tx = a.transaction().await.expect("begin");
    tx.execute("UPDATE account SET balance = 1 WHERE id = 1", &[])
        .await
        .expect("update 1");
    tx.execute(
        "INSERT INTO account (id, owner, balance) VALUES (30, 'thirty', 3)",
        &[],
    )
    .await
    .expect("insert 30");
    tx.commit().await.expect("commit");
    assert_eq!(balance(&b, 1).await, "1.00");
    assert_eq!(balance(&b, 30).await, "3.00");

    let tx = a.transaction().await.expect("begin");
    tx.execute("UPDATE account SET balance = 2 WHERE id = 1", &[])
        .await
        .expect("update 1");
    tx.execute(
        "INSERT INTO account (id, owner, balance) VALUES (31, 'x', 3)",
        &[],
    )
    .await
    .expect("insert 31");
    tx.rollback().await.expect("rollback");
    assert_eq!(balance(&b, 1).await, "1.00");
    assert!(text_rows(&b, "SELECT id FROM account WHERE id = 31")
        .await
        .is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_runs_a_procedure() {
    let (_cluster, server) = start().await;
    let (c, _conn) = connect(&server).await;
    assert_eq!(
        text_rows(&c, "CALL total()").await,
        vec![vec![Some("400.00".into()), Some("4".into())]]
    );
    let deposit = c
        .prepare_typed("CALL deposit($1, $2)", &[Type::INT8, Type::INT8])
        .await
        .expect("prepare call");
    c.execute(&deposit, &[&5i64, &2i64]).await.expect("deposit");
    // A procedure that returns nothing answers no row.
    assert!(text_rows(&c, "CALL deposit(0, 2)").await.is_empty());
    assert_eq!(balance(&c, 2).await, "105.00");
    c.batch_execute("CALL deposit(1.50, 2)")
        .await
        .expect("literal args");
    assert_eq!(balance(&c, 2).await, "106.50");
    // The procedure's own abort, and an unknown procedure.
    let e = c.batch_execute("CALL deposit(1, 99)").await.unwrap_err();
    assert_eq!(code(&e), "P0001", "{e}");
    let e = c.batch_execute("CALL nope()").await.unwrap_err();
    assert_eq!(code(&e), "42883", "{e}");
    // A CALL is a transaction of its own. In a block that has run nothing
    // (drivers open one before every command) it commits at once, and
    // the block may then only end; after a statement it is refused.
    c.batch_execute("BEGIN").await.expect("begin");
    c.batch_execute("CALL deposit(1, 2)")
        .await
        .expect("a call opening the block");
    let e = c
        .batch_execute("SELECT balance FROM account WHERE id = 2")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25001", "{e}");
    c.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(balance(&c, 2).await, "107.50", "the call had committed");
    c.batch_execute("BEGIN").await.expect("begin");
    text_rows(&c, "SELECT balance FROM account WHERE id = 2").await;
    let e = c.batch_execute("CALL total()").await.unwrap_err();
    assert_eq!(code(&e), "0A000", "{e}");
    c.batch_execute("ROLLBACK").await.expect("rollback");
    // DEALLOCATE, as drivers send it after a failed transaction.
    let stmt = c
        .prepare("SELECT balance FROM account WHERE id = $1")
        .await
        .expect("prepare");
    c.batch_execute("DEALLOCATE ALL")
        .await
        .expect("deallocate all");
    c.batch_execute("DEALLOCATE PREPARE some_name")
        .await
        .expect("deallocate one");
    drop(stmt);
    assert_eq!(balance(&c, 2).await, "107.50");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_transactions_get_serialization_failure() {
    let (_cluster, server) = start().await;
    let (older, _co) = connect(&server).await;
    let (younger, _cy) = connect(&server).await;
    older.batch_execute("BEGIN").await.expect("older begins");
    younger
        .batch_execute("BEGIN")
        .await
        .expect("younger begins");
    older
        .batch_execute("UPDATE account SET balance = 7 WHERE id = 1")
        .await
        .expect("older locks row 1");
    // Wait-die: the younger transaction asking for the older one's lock
    // is aborted at once.
    let e = younger
        .batch_execute("UPDATE account SET balance = 8 WHERE id = 1")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "40001", "{e}");
    // Its session is failed until it ends the transaction.
    let e = younger.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    younger.batch_execute("ROLLBACK").await.expect("rollback");
    older.batch_execute("COMMIT").await.expect("older commits");
    assert_eq!(balance(&younger, 1).await, "7.00");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_fails_the_transaction_until_rollback() {
    let (_cluster, server) = start().await;
    let (c, _conn) = connect(&server).await;
    c.batch_execute("BEGIN; UPDATE account SET balance = 0 WHERE id = 4")
        .await
        .expect("begin and update");
    let e = c
        .batch_execute("SELECT * FROM nope WHERE id = 1")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42P01", "{e}");
    let e = c
        .query("SELECT balance FROM account WHERE id = $1", &[&4i64])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    // COMMIT of a failed transaction rolls it back, as in PostgreSQL.
    let msgs = c.simple_query("COMMIT").await.expect("commit ends it");
    assert!(matches!(
        msgs.last(),
        Some(SimpleQueryMessage::CommandComplete(_))
    ));
    assert_eq!(balance(&c, 4).await, "100.00");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_that_does_not_prepare_fails_the_transaction() {
    let (_cluster, server) = start().await;
    let (c, _conn) = connect(&server).await;
    // Outside a transaction a failed Parse costs only itself.
    let e = c.prepare("garbage").await.unwrap_err();
    assert_eq!(code(&e), "42601", "{e}");
    assert_eq!(balance(&c, 3).await, "100.00");
    // Inside one, it fails the transaction (extended protocol: Parse is
    // the failing message, before any Bind or Execute), and the write
    // before it is rolled back.
    c.batch_execute("BEGIN; UPDATE account SET balance = 0 WHERE id = 3")
        .await
        .expect("begin and update");
    let e = c.prepare("garbage").await.unwrap_err();
    assert_eq!(code(&e), "42601", "{e}");
    let e = c
        .query("SELECT balance FROM account WHERE id = $1", &[&3i64])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    let e = c
        .batch_execute("SELECT balance FROM account WHERE id = 3")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    // So does a Parse of a statement brine refuses (an unknown table).
    c.batch_execute("ROLLBACK; BEGIN; UPDATE account SET balance = 0 WHERE id = 3")
        .await
        .expect("a fresh transaction");
    let e = c
        .prepare("SELECT * FROM nope WHERE id = $1")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "42P01", "{e}");
    let e = c
        .batch_execute("SELECT balance FROM account WHERE id = 3")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    c.batch_execute("ROLLBACK").await.expect("rollback ends it");
    assert_eq!(balance(&c, 3).await, "100.00");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_frees_its_locks() {
    let (cluster, server) = start().await;
    let (waiter, _cw) = connect(&server).await;
    let (holder, holder_conn) = connect(&server).await;
    // The waiter is older, so under wait-die it waits for the holder.
    waiter.batch_execute("BEGIN").await.expect("waiter begins");
    holder
        .batch_execute("BEGIN; UPDATE account SET balance = 1 WHERE id = 2")
        .await
        .expect("holder locks row 2");
    let waiting = tokio::spawn(async move {
        waiter
            .batch_execute("UPDATE account SET balance = 2 WHERE id = 2")
            .await
            .map(|()| waiter)
    });
    // Observe the waiter parked behind the holder's lock.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let parked: usize = cluster
            .status()
            .await
            .expect("status")
            .iter()
            .map(|p| p.parked_statements)
            .sum();
        if parked > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter never parked"
        );
        tokio::task::yield_now().await;
    }
    // The holder's client vanishes mid-transaction.
    holder_conn.abort();
    drop(holder);
    let waiter = waiting
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    waiter
        .batch_execute("COMMIT")
        .await
        .expect("waiter commits");
    assert_eq!(balance(&waiter, 2).await, "2.00");
    server.stop().await;
    cluster
        .locks_released(Duration::from_secs(10))
        .await
        .expect("no lock outlives its connection");
}

/// A startup message for user `tester`, database `brine`.
fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196_608i32.to_be_bytes()); // protocol 3.0
    for s in ["user", "tester", "database", "brine"] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    msg.extend(body);
    msg
}

/// Reads until the server closes the connection; returns what it sent.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_hurts_only_its_connection() {
    let (_cluster, server) = start().await;
    let addr = server.local_addr();
    let (c, _conn) = connect(&server).await;
    c.batch_execute("BEGIN; UPDATE account SET balance = 9 WHERE id = 3")
        .await
        .expect("a transaction open meanwhile");

    // Garbage instead of a startup message.
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(b"GET / HTTP/1.1\r\nHost: brine\r\n\r\n")
        .await
        .expect("write");
    read_to_close(&mut raw).await;

    // A proper startup, then a message type that does not exist.
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(&startup()).await.expect("startup");
    raw.write_all(&[b'!', 0, 0, 0, 8, 1, 2, 3, 4])
        .await
        .expect("write");
    let answer = read_to_close(&mut raw).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("08P01"), "an error for the client: {text:?}");

    // A startup, then a truncated Bind and the socket closed mid-message.
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(&startup()).await.expect("startup");
    raw.write_all(&[b'B', 0, 0, 1, 0, 0]).await.expect("write");
    drop(raw);

    // The open transaction and new clients carry on.
    c.batch_execute("COMMIT").await.expect("commit");
    let (d, _cd) = connect(&server).await;
    assert_eq!(balance(&d, 3).await, "9.00");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_ends_only_its_connection() {
    let (cluster, server) = start().await;
    // A second listener on the same cluster, with a small message bound.
    let small = PgServer::start(
        TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        cluster.clone(),
        ServerConfig {
            message_bytes_max: 64 << 10,
            ..ServerConfig::default()
        },
    )
    .expect("listen");
    let mut raw = TcpStream::connect(small.local_addr())
        .await
        .expect("connect");
    raw.write_all(&startup()).await.expect("startup");
    // A query claiming 1 MiB, of which 256 KiB arrive: past the bound the
    // server answers 54000 and closes (the client may see only the reset).
    let (mut rd, mut wr) = raw.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&[b'Q', 0, 0x10, 0, 4]).await;
        let _ = wr.write_all(&vec![b'x'; 256 << 10]).await;
        wr
    });
    let mut seen = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), rd.read_to_end(&mut seen)).await;
    assert!(ended.is_ok(), "the server ends the connection");
    drop(writer.await);
    // Other connections, on either listener, carry on.
    let (c, _conn) = connect(&small).await;
    assert_eq!(balance(&c, 1).await, "100.00");
    small.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_row_inserts_run_as_one_statement_with_generated_keys() {
    let (_cluster, server) = start().await;
    let (client, _task) = connect(&server).await;
    let n = client
        .execute(
            "INSERT INTO history (aid, delta) VALUES (1, 10), (2, -5), (3, 7)",
            &[],
        )
        .await
        .expect("a multi-row insert");
    assert_eq!(n, 3);

    // With parameters, inside a block: rolled back as a whole.
    client.batch_execute("BEGIN").await.unwrap();
    let n = client
        .execute(
            "INSERT INTO history (aid, delta) VALUES ($1, $2), ($3, $4)",
            &[&4i64, &1i64, &5i64, &2i64],
        )
        .await
        .expect("parameters across rows");
    assert_eq!(n, 2);
    client.batch_execute("ROLLBACK").await.unwrap();

    // One bad row fails the statement, and none of its rows stays.
    let e = client
        .execute(
            "INSERT INTO account (id, owner, balance) VALUES (10, 'new', 1), (1, 'dup', 1)",
            &[],
        )
        .await
        .expect_err("account 1 exists");
    assert_eq!(code(&e), "23505", "{e}");
    assert!(text_rows(&client, "SELECT id FROM account WHERE id = 10")
        .await
        .is_empty());

    let rows = text_rows(&client, "SELECT hid, aid, mtime FROM history").await;
    let mut aids: Vec<_> = rows.iter().map(|r| r[1].clone().unwrap()).collect();
    aids.sort();
    assert_eq!(aids, ["1", "2", "3"], "the rolled-back rows are gone");
    let mut hids: Vec<_> = rows.iter().map(|r| r[0].clone().unwrap()).collect();
    hids.sort();
    hids.dedup();
    assert_eq!(hids.len(), 3, "every row got its own key: {rows:?}");
    assert!(
        rows.iter().all(|r| r[2].is_some()),
        "mtime defaults to now: {rows:?}"
    );
}
