//! Faults on the link: seeded trials of the bank workload while messages
//! between nodes are lost at random and one node is cut off from the
//! others for a while (`FaultConfig`), on a paused single-threaded runtime
//! with a delayed, jittered link on its clock (`LinkClock::Runtime`), so a
//! failing trial replays from its seed (`BRINE_FAULT_SEED`; the first seed
//! is run twice and must give the same trial).
//!
//! After each trial, with the faults over: no lock is left held (every
//! transaction a lost message left undecided was resolved: decisions are
//! resent until acknowledged), the total of the balances holds, and the
//! history checker finds no anomaly at serializable in the recorded
//! history, whose last transaction reads every balance: a transfer
//! acknowledged but lost, or applied at one partition only, would show
//! there as a read of a version that is not the last committed one.
//! An attempt a participant did not answer is aborted
//! (`AbortCause::Unreachable`) and runs again; a call that still fails is
//! not acknowledged.

mod common;
mod crash_common;
mod salt_common;

use std::time::Duration;

use brine_check::Level;
use brine_cluster::{
    Application, Cluster, ClusterConfig, Cut, DeadlockPolicy, FaultConfig, Isolation, LinkClock,
    LinkConfig,
};
use brine_core::{NodeId, Value};
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;

const ACCOUNTS: i64 = 12;
const CLIENTS: u64 = 6;
const CALLS: usize = 30;

/// What one trial saw.
#[derive(Debug, Default, PartialEq, Eq)]
struct Trial {
    acknowledged: usize,
    /// Calls that failed on a fault (after their retries).
    failed: usize,
    /// Attempts aborted because a participant did not answer.
    unreachable: u64,
    lost: u64,
    cut: u64,
    duplicated: u64,
}

/// The workload of a trial: the bank's ACID transfers (`acid`), or Salt's
/// BASE transfer (seed 000 Fig. 3.1: debit, then credit, each an alkaline
/// subtransaction; a ledger row per credit) under `salt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bank {
    Acid,
    Base,
}

/// Each account's opening balance (Salt's kv rows hold whole units).
const OPENING: i64 = 100;

impl Bank {
    async fn start(self, config: ClusterConfig) -> Cluster {
        match self {
            Bank::Acid => bank_with(config, ACCOUNTS).await,
            Bank::Base => {
                let app = Application {
                    name: "salt-faults".into(),
                    ddl: "CREATE TABLE kv (k INT NOT NULL, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);
                          CREATE TABLE ledger (id INT NOT NULL, amt INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);"
                        .into(),
                    procedures: vec![salt_common::fig_3_1_transfer(None)],
                };
                let c = Cluster::start(config, app).expect("start");
                let rows = (1..=ACCOUNTS)
                    .map(|k| vec![Value::Int(k), Value::Int(OPENING)])
                    .collect();
                c.load("kv", rows).await.expect("load");
                c
            }
        }
    }

    /// A transfer of `amount` from `a` to `b`; `id` names its ledger row.
    fn args(self, a: i64, b: i64, amount: i64, id: i64) -> Vec<Value> {
        match self {
            Bank::Acid => vec![Value::Int(a), Value::Int(b), money(amount)],
            Bank::Base => vec![
                Value::Int(a),
                Value::Int(b),
                Value::Int(amount),
                Value::Int(id),
            ],
        }
    }

    /// The total of the balances, read by one ACID transaction.
    async fn total(self, c: &Cluster) -> Value {
        match self {
            Bank::Acid => total(c).await,
            Bank::Base => {
                let mut t = c.client().begin();
                let r = t
                    .execute("SELECT v FROM kv WHERE k >= $lo", vec![Value::Int(1)])
                    .await
                    .expect("read");
                t.commit().await.expect("commit");
                Value::Int(r.rows.iter().map(|row| salt_common::int(&row[0])).sum())
            }
        }
    }

    fn opening_total(self) -> Value {
        match self {
            Bank::Acid => money(OPENING * ACCOUNTS),
            Bank::Base => Value::Int(OPENING * ACCOUNTS),
        }
    }

    /// The level its history is checked at.
    fn level(self) -> Level {
        match self {
            Bank::Acid => Level::Serializable,
            Bank::Base => Level::Salt,
        }
    }
}

fn trial(seed: u64, protocol: &str, bank: Bank) -> Trial {
    let dir = tempfile::tempdir().expect("tmp");
    let history = dir.path().join("h.jsonl");
    let rt = paused_runtime();
    rt.block_on(async {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut config = config(Isolation::Serializable, DeadlockPolicy::WaitDie);
        config.nodes = 3;
        config.partitions_per_node = 1;
        config.protocol = protocol.into();

        config.seed = seed;
        config.history = Some(history.clone());
        config.link = LinkConfig {
            delay_us: 100,
            jitter_us: 50,
        };
        config.link_clock = LinkClock::Runtime;
        // From the end of the load on, messages are lost at random for
        // 400 ms, and one node is cut off from the others for a while
        // within that.
        let from = Duration::from_millis(rng.gen_range(5..40));
        config.faults = FaultConfig {
            loss: 0.01,
            loss_from: Duration::ZERO,
            loss_until: Some(Duration::from_millis(400)),
            cuts: vec![Cut {
                side: vec![NodeId(rng.gen_range(0..3))],
                from,
                until: from + Duration::from_millis(rng.gen_range(20..200)),
            }],
            on_demand: true,
            // Some messages are overtaken by later ones on the same pair,
            // as requests on brine's transport may be.
            reorder: 0.02,
            reorder_window: Duration::from_millis(2),
            // Some decisions arrive twice, the copy later (a resend whose
            // first copy also arrived).
            duplicate: 0.02,
        };
        let c = bank.start(config).await;
        c.begin_faults();
        let mut tasks = Vec::new();
        for k in 0..CLIENTS {
            let client = c.client();
            let mut rng = SmallRng::seed_from_u64(seed ^ (k << 32));
            tasks.push(tokio::spawn(async move {
                let (mut acked, mut failed) = (0, 0);
                for i in 0..CALLS {
                    let a = rng.gen_range(1..=ACCOUNTS);
                    let b = rng.gen_range(1..=ACCOUNTS);
                    let id = (k * CALLS as u64 + i as u64) as i64;
                    let args = bank.args(a, b, rng.gen_range(1..=50), id);
                    let r = client.call("transfer", args).await;
                    match r {
                        Ok(_) => acked += 1,
                        Err(brine_core::Error::UserAbort(_)) => {}
                        Err(_) => failed += 1,
                    }
                }
                (acked, failed)
            }));
        }
        let mut t = Trial::default();
        for task in tasks {
            let (a, f) = task.await.expect("client");
            t.acknowledged += a;
            t.failed += f;
        }
        // The faults are over: whatever a lost message left undecided
        // was settled (decisions are sent until acknowledged).
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.locks_released(Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(
            bank.total(&c).await,
            bank.opening_total(),
            "seed {seed}: the balances' total"
        );
        t.unreachable = c.stats().aborts_unreachable;
        t.lost = c.fault_stats().lost.load(Ordering::Relaxed);
        t.cut = c.fault_stats().cut.load(Ordering::Relaxed);
        t.duplicated = c.fault_stats().duplicated.load(Ordering::Relaxed);
        c.flush_history().expect("flush");
        let h = brine_check::read_file(&history).expect("history");
        let report = brine_check::check(&h.txns, bank.level());
        assert!(report.valid, "seed {seed}: {:?}", report.anomalies);
        t
    })
}

/// Runs the trials of `protocol`: `BRINE_FAULT_TRIALS` of them (default
/// `default`), or the one `BRINE_FAULT_SEED` names.
fn trials(protocol: &str, bank: Bank, default: u64) {
    let mut sum = Trial::default();
    let seeds = crash_common::seeds("BRINE_FAULT_TRIALS", default, "BRINE_FAULT_SEED");
    let n = seeds.clone().count();
    for seed in seeds {
        let t = trial(seed, protocol, bank);
        if sum == Trial::default() {
            // Replayable: the same seed, the same faults and outcomes.
            assert_eq!(trial(seed, protocol, bank), t, "seed {seed} replayed");
        }
        sum.acknowledged += t.acknowledged;
        sum.failed += t.failed;
        sum.unreachable += t.unreachable;
        sum.lost += t.lost;
        sum.cut += t.cut;
        sum.duplicated += t.duplicated;
    }
    eprintln!(
        "fault trials ({protocol}): {n} trials, {} transfers acknowledged, {} attempts aborted \
         on a participant that did not answer, {} calls failed on a fault, {} messages lost at \
         random, {} lost to cuts, {} decisions duplicated",
        sum.acknowledged, sum.unreachable, sum.failed, sum.lost, sum.cut, sum.duplicated
    );
    // The faults must have been felt, or the trials prove nothing.
    assert!(
        sum.lost > 0 && sum.cut > 0 && sum.unreachable > 0 && sum.duplicated > 0,
        "{sum:?}"
    );
    assert!(sum.acknowledged > 0, "{sum:?}");
}

#[test]
fn acid_keeps_every_acknowledged_transfer_through_lost_messages_and_partitions() {
    trials("acid", Bank::Acid, 12);
}

#[test]
fn salt_keeps_every_acknowledged_transfer_through_lost_messages_and_partitions() {
    trials("salt", Bank::Base, 12);
}

/// Callas with every procedure in one `2pl` group (no grouping given):
/// nexus locks, and their releases sent until acknowledged like every
/// decision. (Runtime Pipelining under faults is not covered yet: the
/// bank's transfer runs one statement twice without declaring a loop, so
/// the pipelining analysis refuses it.)
#[test]
fn callas_keeps_every_acknowledged_transfer_through_lost_messages_and_partitions() {
    trials("callas", Bank::Acid, 12);
}
