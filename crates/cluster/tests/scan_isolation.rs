//! A scan through a secondary index evaluates its filters on every row it
//! passes over, so it must lock every such row, not only those it returns.
//! Found by RUBiS's search (`category = $c AND id >= $from AND end_date >=
//! $now LIMIT 25`): a buy-now that closed an item (`end_date = now`)
//! without committing hid the item from concurrent searches, which the
//! checker reported as reads of aborted and intermediate versions (G1a,
//! G1b).
//!
//! Under wait-die the younger scan dies when it meets the writer's lock:
//! that death is the observable conflict (no timing involved).

use brine_cluster::{Application, Cluster, ClusterConfig, LinkConfig};
use brine_core::{AbortCause, Error, Value};

const DDL: &str = "CREATE TABLE items (id INT, category INT NOT NULL, quantity INT NOT NULL, end_date INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
CREATE INDEX items_by_category ON items (category, id);";

const SEARCH: &str =
    "SELECT id, quantity FROM items WHERE category = $c AND id >= $f AND end_date >= $n LIMIT 5";

async fn cluster() -> Cluster {
    let config = ClusterConfig {
        link: LinkConfig {
            delay_us: 0,
            jitter_us: 0,
        },
        ..ClusterConfig::default()
    };
    let app = Application {
        name: "scan".into(),
        ddl: DDL.into(),
        procedures: vec![],
    };
    let c = Cluster::start(config, app).expect("cluster");
    // Even ids in category 0, odd in 1; all open until 100.
    let rows = (0..40)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::Int(i % 2),
                Value::Int(10),
                Value::Int(100),
            ]
        })
        .collect();
    c.load("items", rows).await.expect("load");
    c
}

/// Runs `statement` in a transaction begun after a writer closed item 4
/// (its end date now 0, not committed); returns its outcome, then aborts
/// the writer.
async fn beside_an_uncommitted_close(
    c: &Cluster,
    statement: &str,
    args: Vec<Value>,
) -> Result<usize, Error> {
    let mut w = c.client().begin();
    w.execute(
        "UPDATE items SET end_date = 0 WHERE id = $i",
        vec![Value::Int(4)],
    )
    .await
    .expect("the writer closes item 4");
    let mut r = c.client().begin();
    let outcome = r.execute(statement, args).await;
    match &outcome {
        Ok(_) => r.commit().await.expect("commit"),
        Err(_) => r.abort().await,
    }
    w.abort().await;
    outcome.map(|q| q.rows.len().max(q.affected as usize))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_scan_by_a_secondary_index_meets_the_writer_of_a_row_it_skips() {
    let c = cluster().await;
    let args = vec![Value::Int(0), Value::Int(0), Value::Int(50)];
    let outcome = beside_an_uncommitted_close(&c, SEARCH, args.clone()).await;
    assert!(
        matches!(outcome, Err(Error::Aborted(AbortCause::WaitDie))),
        "the scan judged item 4 by its uncommitted end date: {outcome:?}"
    );
    // Once the writer is gone, item 4 is open again and returned.
    let mut r = c.client().begin();
    let q = r.execute(SEARCH, args).await.expect("scan");
    r.commit().await.expect("commit");
    let ids: Vec<i64> = q.rows.iter().filter_map(|r| r[0].as_int()).collect();
    assert_eq!(ids, vec![0, 2, 4, 6, 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_update_by_a_secondary_index_meets_the_writer_of_a_row_it_skips() {
    let c = cluster().await;
    let outcome = beside_an_uncommitted_close(
        &c,
        "UPDATE items SET quantity = 0 WHERE category = $c AND id >= $f AND end_date >= $n",
        vec![Value::Int(0), Value::Int(0), Value::Int(50)],
    )
    .await;
    assert!(
        matches!(outcome, Err(Error::Aborted(AbortCause::WaitDie))),
        "the update judged item 4 by its uncommitted end date: {outcome:?}"
    );
}
