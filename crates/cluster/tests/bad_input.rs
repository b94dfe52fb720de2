//! Bad input gets a clear, typed error and changes nothing.

mod common;

use brine_cluster::{Application, Cluster, DeadlockPolicy, Isolation, ProcedureDef};
use brine_core::{Error, Value};
use common::*;

async fn fixture() -> Cluster {
    bank(8, Isolation::Serializable, DeadlockPolicy::WaitDie).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_procedure_is_a_typed_error() {
    let c = fixture().await;
    let before = c.stats();
    let err = c.client().call("no_such_proc", vec![]).await.unwrap_err();
    assert_eq!(err, Error::UnknownProcedure("no_such_proc".into()));
    assert_eq!(c.stats().statements, before.statements, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_argument_types_and_arity_change_nothing() {
    let c = fixture().await;
    let client = c.client();
    let err = client
        .call("deposit", vec![Value::str("lots"), Value::Int(1)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    let err = client.call("deposit", vec![money(1)]).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arity {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(balance(&c, 1).await, money(100));
    assert_eq!(total(&c).await, money(800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_sql_and_unknown_table_in_interactive_transactions() {
    let c = fixture().await;
    let mut t = c.client().begin();
    t.execute(
        "UPDATE account SET balance = balance + $a WHERE id = $id",
        vec![money(7), Value::Int(2)],
    )
    .await
    .expect("valid update");
    let err = t.execute("SELEC balance FROM", vec![]).await.unwrap_err();
    assert!(matches!(err, Error::Sql(_)), "{err:?}");
    let err = t
        .execute("SELECT x FROM nowhere WHERE id = $id", vec![Value::Int(1)])
        .await
        .unwrap_err();
    assert_eq!(err, Error::UnknownTable("nowhere".into()));
    let err = t
        .execute(
            "SELECT nope FROM account WHERE id = $id",
            vec![Value::Int(1)],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownColumn { .. }), "{err:?}");
    t.abort().await;
    assert_eq!(
        balance(&c, 2).await,
        money(100),
        "the aborted update left no trace"
    );
}

/// The error `Cluster::start` gives for a procedure declaring `sql`.
fn start_error(sql: &str) -> Error {
    let app = Application {
        name: "broken".into(),
        ddl: DDL.into(),
        procedures: vec![ProcedureDef::new("p").statement("s", sql)],
    };
    Cluster::start(
        config(Isolation::Serializable, DeadlockPolicy::WaitDie),
        app,
    )
    .err()
    .expect("must fail")
}

#[test]
fn malformed_sql_in_a_procedure_declaration_fails_at_start() {
    let err = start_error("UPDATE account SET WHERE");
    assert!(
        matches!(err, Error::Sql(ref m) if m.contains("procedure `p`")),
        "{err:?}"
    );
    let err = start_error("SELECT a FROM ghost WHERE id = $id");
    assert!(
        matches!(err, Error::Sql(ref m) if m.contains("ghost")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_statement_aborts_and_undoes_earlier_writes() {
    let c = fixture().await;
    let err = c.client().call("sneaky", vec![]).await.unwrap_err();
    assert!(
        matches!(err, Error::UndeclaredStatement { ref statement, .. } if statement == "not_declared"),
        "{err:?}"
    );
    assert_eq!(balance(&c, 1).await, money(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rows_are_refused_at_load() {
    let c = fixture().await;
    let err = c
        .load(
            "account",
            vec![vec![Value::Int(100), Value::Int(3), money(1)]],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Type { .. }), "{err:?}");
    let err = c.load("ghost", vec![]).await.unwrap_err();
    assert_eq!(err, Error::UnknownTable("ghost".into()));
}
