//! Elia survives crashes: seeded trials run shoppers on three durable
//! servers and cut the power at a random step of the write-ahead logs
//! (`CrashSwitch`), while globals are in the token, half applied, or
//! committing. After a restart from the logs every replica applies the
//! updates it lacks (`protocols/elia/log.rs`): every replica then has the
//! same stock, no order a client heard back from is lost, and none is
//! applied twice. BRINE_ELIA_CRASH_TRIALS=N runs N trials (default 40);
//! BRINE_ELIA_CRASH_SEED=N reruns one.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brine_cluster::protocols::elia::{Elia, EliaOptions};
use brine_cluster::{
    Cluster, ClusterConfig, DurabilityConfig, DurabilityMode, LinkConfig, Placement,
};
use brine_core::Value;
use brine_storage::wal::CrashSwitch;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod crash_common;
mod elia_common;
use crash_common::{fast_root, runtime, seeds, Hits};
use elia_common::{app, int, routes, ITEMS, SERVERS, STOCK};

fn config(dir: &Path, crash: Option<Arc<CrashSwitch>>) -> ClusterConfig {
    ClusterConfig {
        nodes: SERVERS,
        partitions_per_node: 1,
        placement: Placement::Colocated,
        protocol: "elia".into(),
        link: LinkConfig {
            delay_us: 20,
            jitter_us: 0,
        },
        elia: EliaOptions { routes: routes() },
        durability: DurabilityConfig {
            mode: DurabilityMode::Wal,
            data_dir: Some(dir.to_path_buf()),
            segment_bytes: 4096,
            checkpoint_every_bytes: 16 * 1024,
            crash,
            ..DurabilityConfig::default()
        },
        ..ClusterConfig::default()
    }
}

/// Item quantities one order of `cart` takes (its two lines).
fn lines(cart: i64) -> [(i64, i64); 2] {
    [(cart % ITEMS, 1), ((cart + 1) % ITEMS, 2)]
}

/// Four shoppers, each filling and ordering carts until done or the power
/// is cut; returns the carts whose order a client heard back from, and
/// every cart whose order was sent.
async fn run(c: &Cluster, switch: &Arc<CrashSwitch>) -> (Vec<i64>, Vec<i64>) {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for shopper in 0..4i64 {
        let client = c.client();
        let (acked, sent) = (acked.clone(), sent.clone());
        tasks.spawn(async move {
            for k in 0..15i64 {
                let cart = shopper * 100 + k;
                let v = Value::Int;
                if client
                    .call("create", vec![v(cart), v(shopper)])
                    .await
                    .is_err()
                {
                    return;
                }
                for (item, qty) in lines(cart) {
                    if client
                        .call("add", vec![v(cart), v(item), v(qty)])
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                sent.lock().push(cart);
                if client.call("order", vec![v(cart)]).await.is_ok() {
                    acked.lock().push(cart);
                }
            }
        });
    }
    let all_done = async { while tasks.join_next().await.is_some() {} };
    let cut = async {
        while !switch.is_crashed() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        _ = all_done => {}
        _ = cut => {}
    }
    let out = (acked.lock().clone(), sent.lock().clone());
    out
}

fn taken_by(carts: &[i64]) -> Vec<i64> {
    let mut taken = vec![0; ITEMS as usize];
    for &c in carts {
        for (item, qty) in lines(c) {
            taken[item as usize] += qty;
        }
    }
    taken
}

/// Returns how many updates the restart applied to replicas that lacked
/// them.
fn trial(root: &Path, seed: u64, hits: &mut Hits) -> u64 {
    let dir = root.join(format!("trial-{seed}"));
    let mut rng = SmallRng::seed_from_u64(seed);
    let k = rng.gen_range(1..=150);
    let switch = Arc::new(CrashSwitch::never(seed));
    let rt = runtime(true);
    let (acked, sent) = rt.block_on(async {
        let c = Cluster::start(config(&dir, Some(switch.clone())), app()).expect("start");
        let rows = (0..ITEMS)
            .map(|i| vec![Value::Int(i), Value::Int(STOCK)])
            .collect();
        c.load("stock", rows).await.expect("load");
        switch.arm(k);
        let out = tokio::time::timeout(Duration::from_secs(20), run(&c, &switch))
            .await
            .unwrap_or_else(|_| panic!("seed {seed} (k {k}): shoppers stuck; {:?}", c.stats()));
        c.crash();
        out
    });
    drop(rt);
    hits.record(switch.hit());

    let rt = runtime(true);
    let caught_up = rt.block_on(async {
        let c = Cluster::start(config(&dir, None), app())
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        tokio::time::timeout(Duration::from_secs(20), c.wait_ready())
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: recovery stuck; {:?}", c.stats()));
        let elia = c.protocol().as_any().downcast_ref::<Elia>().expect("elia");
        elia.conveyor()
            .settled(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let caught_up = c.stats().counter("updates_applied");
        let (least, most) = (taken_by(&acked), taken_by(&sent));
        let mut first: Option<Vec<i64>> = None;
        for server in 0..i64::from(SERVERS) {
            let mut stock = Vec::new();
            for item in 0..ITEMS {
                let v = c
                    .client()
                    .call("stock_at", vec![Value::Int(item), Value::Int(server)])
                    .await
                    .unwrap_or_else(|e| panic!("seed {seed}: reading stock: {e}"));
                stock.push(v.values.first().map(int).unwrap_or(-1));
            }
            for item in 0..ITEMS as usize {
                let taken = STOCK - stock[item];
                assert!(
                    least[item] <= taken && taken <= most[item],
                    "seed {seed} (k {k}): server {server} item {item}: {taken} taken, \
                     acknowledged orders took {}, all sent {} (an order lost or applied twice)",
                    least[item],
                    most[item]
                );
            }
            match &first {
                None => first = Some(stock),
                Some(f) => assert_eq!(
                    f, &stock,
                    "seed {seed} (k {k}): server {server}'s stock differs from server 0's"
                ),
            }
        }
        // New globals go on after the recovered ones.
        c.client()
            .call(
                "order",
                vec![Value::Int(acked.first().copied().unwrap_or(0))],
            )
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: an order after recovery: {e}"));
        c.close_logs();
        caught_up
    });
    let _ = std::fs::remove_dir_all(&dir);
    caught_up
}

#[test]
fn every_replica_converges_and_no_acknowledged_order_is_lost() {
    let root = fast_root();
    let mut hits = Hits::default();
    let seeds = seeds("BRINE_ELIA_CRASH_TRIALS", 40, "BRINE_ELIA_CRASH_SEED");
    let n = seeds.clone().count();
    let mut caught_up = 0;
    for seed in seeds {
        caught_up += trial(root.path(), seed, &mut hits);
    }
    eprintln!("elia crash trials: {hits:?}; updates applied by restarts: {caught_up}");
    let mid_run = hits.mid_run();
    assert!(mid_run > 0, "no trial crashed inside the run: {hits:?}");
    if n >= 20 {
        // Else the trials never cut the power with updates in flight.
        assert!(caught_up > 0, "no restart had an update to catch up on");
    }
}
