//! Fixtures shared by the Salt and Callas tests: gates a body can wait at,
//! a call running in the background, and the transfer of seed 000 Figure
//! 3.1.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use brine_cluster::{Cluster, ProcedureDef};
use brine_core::{Error, Value};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// Named gates a BASE body waits at; a test opens them.
#[derive(Clone, Default)]
pub struct Gates(Arc<Mutex<HashMap<String, Arc<Semaphore>>>>);

impl Gates {
    pub fn gate(&self, name: &str) -> Arc<Semaphore> {
        self.0
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(0)))
            .clone()
    }

    pub async fn wait(&self, name: &str) {
        self.gate(name).acquire().await.expect("gate").forget();
    }

    pub fn open(&self, name: &str) {
        self.gate(name).add_permits(1);
    }
}

/// Calls `proc` in a task of its own, so the test can look at what the
/// call waits for meanwhile.
pub fn call(
    c: &Cluster,
    proc: &'static str,
    args: Vec<Value>,
) -> tokio::task::JoinHandle<brine_core::Result<Vec<Value>>> {
    let client = c.client();
    tokio::spawn(async move { client.call(proc, args).await.map(|o| o.values) })
}

/// Statements waiting for a lock, over every partition.
pub async fn parked_statements(c: &Cluster) -> usize {
    c.status()
        .await
        .expect("status")
        .iter()
        .map(|p| p.parked_statements)
        .sum()
}

pub fn int(v: &Value) -> i64 {
    v.as_int().expect("INT")
}

/// Seed 000 Figure 3.1, line by line, over `kv(k, v)` with a `ledger(id,
/// amt)` row per credit. Arguments: sender, receiver, amount, ledger id,
/// and optionally a gate to wait at between the two subtransactions.
/// Returns 1 if the money moved, 0 if not (insufficient funds, or the
/// receiver is missing and the sender was re-credited).
pub fn fig_3_1_transfer(gates: Option<Gates>) -> ProcedureDef {
    ProcedureDef::new("transfer")
        .base()
        .statement("bal", "SELECT v FROM kv WHERE k = $id")
        .statement("add", "UPDATE kv SET v = v + $amt WHERE k = $id")
        .statement("log", "INSERT INTO ledger (id, amt) VALUES ($id, $amt)")
        .body(move |mut ctx, args| {
            let gates = gates.clone();
            async move {
                let (sndr, rcvr, amt, id) = (
                    args[0].clone(),
                    args[1].clone(),
                    int(&args[2]),
                    args[3].clone(),
                );
                let pause = args.get(4).and_then(Value::as_str).map(str::to_string);
                // 3-9: try { alkaline { read sndr; if enough, debit } } catch { return }
                let bal = async {
                    ctx.begin_alkaline()?;
                    let bal = int(&ctx.exec("bal", vec![sndr.clone()]).await?.rows[0][0]);
                    if bal >= amt {
                        ctx.exec("add", vec![Value::Int(-amt), sndr.clone()])
                            .await?;
                    }
                    ctx.end_alkaline().await?;
                    Ok::<_, Error>(bal)
                }
                .await;
                let Ok(bal) = bal else { return Ok(vec![]) };
                // 10: constraint violation
                if bal < amt {
                    return Ok(vec![Value::Int(0)]);
                }
                if let (Some(g), Some(gates)) = (pause, &gates) {
                    gates.wait(&g).await;
                }
                // 11-14: try { alkaline { credit rcvr } }
                let credited = async {
                    ctx.begin_alkaline()?;
                    let r = ctx.exec("add", vec![Value::Int(amt), rcvr.clone()]).await?;
                    if r.affected == 0 {
                        return Err(Error::UserAbort("no such receiver".into()));
                    }
                    ctx.exec("log", vec![id.clone(), Value::Int(amt)]).await?;
                    ctx.end_alkaline().await
                }
                .await;
                // 15-18: catch { alkaline { re-credit sndr } }
                if credited.is_err() {
                    ctx.begin_alkaline()?;
                    ctx.exec("add", vec![Value::Int(amt), sndr]).await?;
                    ctx.end_alkaline().await?;
                    return Ok(vec![Value::Int(0)]);
                }
                Ok(vec![Value::Int(1)])
            }
        })
}

/// Reads `k` of table `kv` in `txn`, which must die at once under
/// wait-die, not wait: the row is locked by a protected transaction (one
/// that can no longer roll back), and then aborts `txn`.
pub async fn read_dies_at_once(mut txn: brine_cluster::Txn, k: i64) {
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        txn.execute("SELECT v FROM kv WHERE k = $k", vec![Value::Int(k)]),
    )
    .await
    .expect("the reader does not wait for the protected transaction");
    assert!(
        matches!(read, Err(Error::Aborted(brine_core::AbortCause::WaitDie))),
        "the reader dies on the protected transaction's lock: {read:?}"
    );
    txn.abort().await;
}
