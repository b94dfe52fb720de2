//! Scenario tests of the `acid` protocol: atomicity across partitions,
//! isolation levels, deadlock handling, retries.

mod common;
mod salt_common;

use std::sync::Arc;
use std::time::Duration;

use brine_cluster::{DeadlockPolicy, Isolation};
use brine_core::{AbortCause, Error, Value};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_abort_undoes_writes_on_every_partition() {
    let c = bank(8, Isolation::Serializable, DeadlockPolicy::WaitDie).await;
    // 1 and 2 live on different partitions (id mod 4).
    let err = c
        .client()
        .call("transfer", vec![Value::Int(1), Value::Int(2), money(500)])
        .await
        .unwrap_err();
    assert_eq!(err, Error::UserAbort("insufficient funds".into()));
    assert_eq!(balance(&c, 1).await, money(100));
    assert_eq!(balance(&c, 2).await, money(100));
    c.client()
        .call("transfer", vec![Value::Int(1), Value::Int(2), money(30)])
        .await
        .expect("transfer");
    assert_eq!(balance(&c, 1).await, money(70));
    assert_eq!(balance(&c, 2).await, money(130));
    assert_eq!(c.stats().user_aborts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_key_is_typed_and_rolls_back_the_transaction() {
    let c = bank(8, Isolation::Serializable, DeadlockPolicy::WaitDie).await;
    let err = c
        .client()
        .call("open", vec![Value::Int(3), Value::str("x"), money(1)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateKey { ref table, .. } if table == "account"),
        "{err:?}"
    );
    assert_eq!(
        balance(&c, 1).await,
        money(100),
        "the credit before the failed insert was undone"
    );
    c.client()
        .call("open", vec![Value::Int(9), Value::str("x"), money(1)])
        .await
        .expect("a new id is fine");
    assert_eq!(balance(&c, 9).await, money(1));
    assert_eq!(balance(&c, 1).await, money(101));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_transactions_see_their_own_writes_and_abort_cleanly() {
    let c = bank(8, Isolation::Serializable, DeadlockPolicy::WaitDie).await;
    let client = c.client();
    let mut t = client.begin();
    t.execute(
        "INSERT INTO item (grp, n, label) VALUES ($g, $n, $l)",
        vec![Value::Int(1), Value::Int(1), Value::str("a")],
    )
    .await
    .unwrap();
    let r = t
        .execute(
            "SELECT COUNT(*) FROM item WHERE grp = $g",
            vec![Value::Int(1)],
        )
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], Value::Int(1));
    t.abort().await;

    let mut t = client.begin();
    let r = t
        .execute(
            "SELECT COUNT(*) FROM item WHERE grp = $g",
            vec![Value::Int(1)],
        )
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], Value::Int(0), "the aborted insert is gone");
    t.commit().await.unwrap();
}

/// Serializable range reads lock the scanned interval: an insert into it
/// waits until the reader ends (no phantom). At read-committed the range
/// lock is short and the insert proceeds at once.
async fn insert_into_scanned_range(isolation: Isolation) -> bool {
    let c = bank(4, isolation, DeadlockPolicy::TimeoutOnly).await;
    let reader = c.client();
    let mut t = reader.begin();
    let r = t
        .execute(
            "SELECT COUNT(*) FROM item WHERE grp = $g",
            vec![Value::Int(5)],
        )
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], Value::Int(0));
    let writer = c.client();
    let insert = tokio::spawn(async move {
        writer
            .call(
                "add_item",
                vec![Value::Int(5), Value::Int(7), Value::str("new")],
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let finished_while_reader_open = insert.is_finished();
    if isolation == Isolation::Serializable {
        // Repeatable: the reader still sees no row.
        let r = t
            .execute(
                "SELECT COUNT(*) FROM item WHERE grp = $g",
                vec![Value::Int(5)],
            )
            .await
            .unwrap();
        assert_eq!(r.rows[0][0], Value::Int(0), "phantom");
    }
    t.commit().await.unwrap();
    insert
        .await
        .unwrap()
        .expect("insert commits once the reader is gone");
    finished_while_reader_open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_range_read_blocks_inserts_into_the_range() {
    assert!(!insert_into_scanned_range(Isolation::Serializable).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_range_read_does_not_block_inserts() {
    assert!(insert_into_scanned_range(Isolation::ReadCommitted).await);
}

/// Two interactive transactions lock two keys in opposite orders.
async fn opposite_order(policy: DeadlockPolicy) -> (Result<(), Error>, Result<(), Error>) {
    let c = bank(8, Isolation::Serializable, policy).await;
    let q = "UPDATE account SET balance = balance + $a WHERE id = $id";
    let mut t1 = c.client().begin();
    let mut t2 = c.client().begin();
    t1.execute(q, vec![money(1), Value::Int(1)]).await.unwrap();
    t2.execute(q, vec![money(1), Value::Int(2)]).await.unwrap();
    let h1 = tokio::spawn(async move {
        t1.execute(q, vec![money(1), Value::Int(2)]).await?;
        t1.commit().await
    });
    // Let t1 queue behind t2 first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r2 = async {
        t2.execute(q, vec![money(1), Value::Int(1)]).await?;
        t2.commit().await
    }
    .await;
    let r1 = h1.await.unwrap();
    (r1, r2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_die_kills_the_younger_transaction() {
    let (r1, r2) = opposite_order(DeadlockPolicy::WaitDie).await;
    // t1 is older: it waits; t2 is younger: it dies on its request.
    assert_eq!(r1, Ok(()));
    assert_eq!(r2, Err(Error::Aborted(AbortCause::WaitDie)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_detection_or_timeout_breaks_the_cycle() {
    // Keys 1 and 2 are on different partitions, so no single wait-for graph
    // sees the cycle: the timeout backstop must break it.
    let (r1, r2) = opposite_order(DeadlockPolicy::Detect).await;
    let aborted = [&r1, &r2]
        .iter()
        .filter(|r| {
            matches!(
                r,
                Err(Error::Aborted(
                    AbortCause::LockTimeout | AbortCause::Deadlock
                ))
            )
        })
        .count();
    assert_eq!(aborted, 1, "exactly one victim: {r1:?} {r2:?}");
    assert!(r1.is_ok() || r2.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_keep_the_total_and_lose_no_update() {
    for policy in [DeadlockPolicy::WaitDie, DeadlockPolicy::Detect] {
        let c = Arc::new(bank(6, Isolation::Serializable, policy).await);
        let mut tasks = Vec::new();
        for k in 0..16i64 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let client = c.client();
                for i in 0..40i64 {
                    let from = (k + i) % 6 + 1;
                    let to = (k * 7 + i * 3 + 1) % 6 + 1;
                    if from == to {
                        continue;
                    }
                    match client
                        .call("transfer", vec![Value::Int(from), Value::Int(to), money(1)])
                        .await
                    {
                        Ok(_) | Err(Error::UserAbort(_)) => {}
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                    client
                        .call("deposit", vec![money(1), Value::Int(to)])
                        .await
                        .expect("deposit");
                }
            }));
        }
        let mut deposits = 0i64;
        for k in 0..16i64 {
            deposits += (0..40i64)
                .filter(|i| (k + i) % 6 + 1 != (k * 7 + i * 3 + 1) % 6 + 1)
                .count() as i64;
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(total(&c).await, money(600 + deposits), "{policy:?}");
    }
}

/// Secondary indexes stay consistent with the rows under concurrent
/// updates of the indexed column, commits and aborts; index scans return
/// exactly the committed rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secondary_indexes_stay_consistent_under_concurrent_commits_and_aborts() {
    let c = Arc::new(bank(24, Isolation::Serializable, DeadlockPolicy::WaitDie).await);
    let mut tasks = Vec::new();
    for k in 0..8i64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let client = c.client();
            for i in 0..30i64 {
                let id = (k * 5 + i * 7) % 24 + 1;
                let owner = format!("owner{}", (k + i) % 3);
                let mut t = client.begin();
                let r = t
                    .execute(
                        "UPDATE account SET owner = $o WHERE id = $id",
                        vec![Value::str(&owner), Value::Int(id)],
                    )
                    .await;
                match r {
                    Ok(_) if i % 4 == 0 => t.abort().await,
                    Ok(_) => match t.commit().await {
                        Ok(()) | Err(Error::Aborted(_)) => {}
                        Err(e) => panic!("{e:?}"),
                    },
                    Err(Error::Aborted(_)) => t.abort().await,
                    Err(e) => panic!("{e:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    c.verify_storage().await.expect("indexes agree with rows");
    // Every account is found under exactly one owner through the index.
    let mut t = c.client().begin();
    let mut found = 0;
    for o in 0..7 {
        let r = t
            .execute(
                "SELECT id, owner FROM account WHERE owner = $o",
                vec![Value::str(&format!("owner{o}"))],
            )
            .await
            .unwrap();
        for row in &r.rows {
            assert_eq!(row[1], Value::str(&format!("owner{o}")));
        }
        found += r.rows.len();
    }
    t.commit().await.unwrap();
    assert_eq!(found, 24);
}

/// Whether a writer of account 1 must wait while a procedure that read it
/// is still running, when that procedure asks for `needs` in a
/// serializable cluster. The writer's wait is observed as a parked
/// statement.
async fn writer_waits_for_a_reader_needing(needs: Option<Isolation>) -> bool {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let read = Arc::new(tokio::sync::Semaphore::new(0));
    let (g, r) = (gate.clone(), read.clone());
    let mut peek = brine_cluster::ProcedureDef::new("peek")
        .statement("get", "SELECT balance FROM account WHERE id = $id")
        .body(move |mut ctx, _| {
            let (g, r) = (g.clone(), r.clone());
            async move {
                ctx.exec("get", vec![Value::Int(1)]).await?;
                r.add_permits(1);
                g.acquire().await.expect("gate").forget();
                Ok(vec![])
            }
        });
    if let Some(i) = needs {
        peek = peek.isolation(i);
    }
    let app = brine_cluster::Application {
        name: "peek".into(),
        ddl: DDL.into(),
        procedures: vec![peek],
    };
    let c =
        brine_cluster::Cluster::start(config(Isolation::Serializable, DeadlockPolicy::Detect), app)
            .expect("cluster starts");
    c.load(
        "account",
        vec![vec![Value::Int(1), Value::str("a"), money(100)]],
    )
    .await
    .expect("load");
    let client = c.client();
    let reader = tokio::spawn(async move { client.call("peek", vec![]).await });
    read.acquire().await.expect("read").forget();
    let c2 = c.clone();
    let mut writer = tokio::spawn(async move {
        let mut t = c2.client().begin();
        t.execute(
            "UPDATE account SET balance = $b WHERE id = $id",
            vec![money(5), Value::Int(1)],
        )
        .await?;
        t.commit().await
    });
    // Either the writer ends while the reader is held at its gate, or it
    // parks on the reader's lock.
    let waited = loop {
        if writer.is_finished() {
            break false;
        }
        if salt_common::parked_statements(&c).await > 0 {
            break true;
        }
        tokio::task::yield_now().await;
    };
    gate.add_permits(1);
    reader.await.unwrap().expect("the reader ends");
    (&mut writer).await.unwrap().expect("the writer ends");
    waited
}

// A procedure may need less than the cluster's level
// (`ProcedureDef::isolation`; TPC-C's stock-level needs read committed,
// clause 3.4.1): in a serializable cluster its reads then lock only while
// they run. It never runs stronger than the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_runs_at_the_weaker_of_its_level_and_the_cluster_s() {
    assert!(writer_waits_for_a_reader_needing(None).await);
    assert!(writer_waits_for_a_reader_needing(Some(Isolation::Serializable)).await);
    assert!(!writer_waits_for_a_reader_needing(Some(Isolation::ReadCommitted)).await);
}
