//! History recording: what a run writes for the isolation checker.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use brine_check::{Header, Op, Outcome, TxnRecord, WriteKind};
use brine_cluster::{Cluster, DeadlockPolicy, Isolation};
use brine_core::{Key, Value};
use common::*;

fn history_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("brine-history-{}-{name}.jsonl", std::process::id()))
}

fn read_history(path: &PathBuf) -> (Header, Vec<TxnRecord>) {
    let text = std::fs::read_to_string(path).expect("history file");
    let mut lines = text.lines();
    let header: Header = serde_json::from_str(lines.next().expect("header")).expect("header");
    let records = lines
        .map(|l| serde_json::from_str(l).expect("record line"))
        .collect();
    (header, records)
}

async fn recording_bank(name: &str, n: i64) -> (Cluster, PathBuf) {
    let path = history_path(name);
    let mut config = config(Isolation::Serializable, DeadlockPolicy::WaitDie);
    config.history = Some(path.clone());
    (bank_with(config, n).await, path)
}

fn account(id: i64) -> Key {
    Key::new([Value::Int(id)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_aborts_and_versions_are_recorded() {
    let (c, path) = recording_bank("basic", 8).await;
    let client = c.client();
    client
        .call("transfer", vec![Value::Int(1), Value::Int(2), money(30)])
        .await
        .expect("transfer");
    client
        .call(
            "transfer",
            vec![Value::Int(1), Value::Int(2), money(100_000)],
        )
        .await
        .expect_err("insufficient funds");
    client.call("total", vec![]).await.expect("total");
    assert_eq!(c.flush_history().unwrap(), Some(3));
    let (header, recs) = read_history(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!(header.workload, "test-bank");
    assert_eq!(header.isolation, "serializable");

    let committed = &recs[0];
    assert_eq!(committed.procedure.as_deref(), Some("transfer"));
    assert_eq!(committed.outcome, Outcome::Committed);
    let reads: Vec<(&Key, u64)> = committed
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Read { key, version, .. } => Some((key, *version)),
            _ => None,
        })
        .collect();
    assert_eq!(reads, vec![(&account(1), 0)]);
    let writes: Vec<(&Key, u64, u64)> = committed
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Write {
                key,
                version,
                prev,
                kind,
                ..
            } => {
                assert_eq!(*kind, WriteKind::Update);
                Some((key, *version, *prev))
            }
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 2);
    assert!(writes.iter().all(|(_, v, prev)| *v != 0 && *prev == 0));

    let aborted = &recs[1];
    assert_eq!(aborted.outcome, Outcome::Aborted);
    assert!(aborted.ts != committed.ts);
    // The aborted attempt read account 1 at the committed transfer's version.
    let v1 = writes.iter().find(|(k, ..)| **k == account(1)).unwrap().1;
    assert!(aborted.ops.iter().any(
        |o| matches!(o, Op::Read { key, version, .. } if *key == account(1) && *version == v1)
    ));

    // The broadcast SUM is one range read per partition: together they saw
    // every account once, account 1 at the transfer's version.
    let total = &recs[2];
    let mut seen = HashMap::new();
    for o in &total.ops {
        let Op::RangeRead { seen: s, .. } = o else {
            panic!("total only range-reads: {o:?}")
        };
        for x in s {
            assert!(seen.insert(x.key.clone(), x.version).is_none());
        }
    }
    assert_eq!(seen.len(), 8);
    assert_eq!(seen[&account(1)], v1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_committed_writes_form_one_version_chain_per_key() {
    let (c, path) = recording_bank("chains", 4).await;
    let mut tasks = Vec::new();
    for i in 0..8i64 {
        let client = c.client();
        tasks.push(tokio::spawn(async move {
            for j in 0..25i64 {
                let from = 1 + (i + j) % 4;
                let to = 1 + (i + 2 * j + 1) % 4;
                if from != to {
                    let _ = client
                        .call("transfer", vec![Value::Int(from), Value::Int(to), money(1)])
                        .await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    c.flush_history().unwrap();
    let (_, recs) = read_history(&path);
    std::fs::remove_file(&path).ok();
    // Strict 2PL: no two committed writes of a key replace the same
    // version, and every replaced version was itself committed (or 0).
    let mut committed_versions = std::collections::HashSet::from([0u64]);
    let mut replaced: HashMap<(Key, u64), u64> = HashMap::new();
    let mut writes = 0;
    for r in recs.iter().filter(|r| r.outcome == Outcome::Committed) {
        for o in &r.ops {
            if let Op::Write {
                key, version, prev, ..
            } = o
            {
                writes += 1;
                committed_versions.insert(*version);
                if let Some(other) = replaced.insert((key.clone(), *prev), r.id) {
                    // The same transaction writes each account once.
                    panic!("{prev} of {key} replaced by both t{other} and t{}", r.id);
                }
            }
        }
    }
    assert!(writes > 0);
    for (_, prev) in replaced.keys() {
        assert!(
            committed_versions.contains(prev),
            "replaced an uncommitted version {prev}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_history_path_is_a_clear_error() {
    let mut config = config(Isolation::Serializable, DeadlockPolicy::WaitDie);
    config.history = Some(PathBuf::from("/nonexistent-dir/for/brine/h.jsonl"));
    let app = brine_cluster::Application {
        name: "x".into(),
        ddl: DDL.into(),
        procedures: procedures(),
    };
    let err = Cluster::start(config, app).err().expect("start fails");
    assert!(
        err.to_string().contains("cannot write history file"),
        "{err}"
    );
}
