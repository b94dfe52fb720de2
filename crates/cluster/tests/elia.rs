//! Elia's Conveyor Belt on the seed's online store (seed 004 section 3.2,
//! Figure 1): carts are created and filled by local operations routed by
//! cart id; an order takes stock (written by every order, read by every
//! add) and is global. Orders at every server leave every replica with
//! the same stock; a cart lives only at its own server; the counters show
//! which calls went through the token.

use std::time::Duration;

use brine_check::Level;
use brine_cluster::protocols::elia::{Elia, EliaOptions};
use brine_cluster::{Cluster, ClusterConfig, LinkConfig, Mutation, Placement};
use brine_core::{Error, Value};

mod elia_common;
use elia_common::{app, int, routes, ITEMS, SERVERS, STOCK};

async fn store(delay_us: u64) -> Cluster {
    store_under("elia", delay_us).await
}

async fn store_under(protocol: &str, delay_us: u64) -> Cluster {
    store_with(protocol, delay_us, |_| {}).await
}

async fn store_with(
    protocol: &str,
    delay_us: u64,
    tune: impl FnOnce(&mut ClusterConfig),
) -> Cluster {
    let mut config = ClusterConfig {
        nodes: SERVERS,
        partitions_per_node: 1,
        placement: Placement::Colocated,
        protocol: protocol.into(),
        link: LinkConfig {
            delay_us,
            jitter_us: 0,
        },
        elia: EliaOptions { routes: routes() },
        ..ClusterConfig::default()
    };
    tune(&mut config);
    let c = Cluster::start(config, app()).expect("cluster starts");
    let rows = (0..ITEMS)
        .map(|i| vec![Value::Int(i), Value::Int(STOCK)])
        .collect();
    c.load("stock", rows).await.expect("load");
    c
}

fn elia(c: &Cluster) -> &Elia {
    c.protocol()
        .as_any()
        .downcast_ref::<Elia>()
        .expect("the elia protocol")
}

async fn call(c: &Cluster, proc: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    c.client().call(proc, args).await.map(|o| o.values)
}

/// One shopper: cart `cart` created, `n` items added (one of each item
/// `cart + k`), ordered.
async fn shop(c: Cluster, cart: i64, n: i64) -> Result<(), Error> {
    call(&c, "create", vec![Value::Int(cart), Value::Int(cart)]).await?;
    for k in 0..n {
        let item = (cart + k) % ITEMS;
        call(
            &c,
            "add",
            vec![Value::Int(cart), Value::Int(item), Value::Int(1 + k)],
        )
        .await?;
    }
    call(&c, "order", vec![Value::Int(cart)]).await?;
    Ok(())
}

/// `carts` shoppers of `n` items each, at once; returns what the orders
/// took, item by item.
async fn shop_all(c: &Cluster, carts: i64, n: i64) -> Result<Vec<i64>, Error> {
    shop_all_from(c, 0, carts, n).await
}

/// As `shop_all`, carts numbered from `first`; what the orders took by
/// item (carts `first..first + carts`).
async fn shop_all_from(c: &Cluster, first: i64, carts: i64, n: i64) -> Result<Vec<i64>, Error> {
    let shoppers: Vec<_> = (first..first + carts)
        .map(|cart| tokio::spawn(shop(c.clone(), cart, n)))
        .collect();
    for s in shoppers {
        s.await.expect("shopper")?;
    }
    let mut taken = vec![0i64; ITEMS as usize];
    for cart in first..first + carts {
        for k in 0..n {
            taken[((cart + k) % ITEMS) as usize] += 1 + k;
        }
    }
    Ok(taken)
}

/// Every server's replica has the stock the orders left.
async fn assert_stock_everywhere(c: &Cluster, taken: &[i64]) -> Result<(), Error> {
    for server in 0..SERVERS {
        for item in 0..ITEMS {
            let v = call(
                c,
                "stock_at",
                vec![Value::Int(item), Value::Int(i64::from(server))],
            )
            .await?;
            assert_eq!(
                v.first().map(int),
                Some(STOCK - taken[item as usize]),
                "item {item} at server {server}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_everywhere_leave_every_replica_with_one_stock() -> Result<(), Error> {
    let c = store(50).await;
    let (carts, n) = (60, 3);
    let taken = shop_all(&c, carts, n).await?;
    elia(&c).conveyor().settled(Duration::from_secs(10)).await?;
    assert_stock_everywhere(&c, &taken).await?;
    // A cart's lines are local: only its own server has them.
    for cart in [0i64, 1, 2, 7] {
        for server in 0..i64::from(SERVERS) {
            let v = call(&c, "lines_at", vec![Value::Int(cart), Value::Int(server)]).await?;
            let expect = if cart.rem_euclid(i64::from(SERVERS)) == server {
                n
            } else {
                0
            };
            assert_eq!(v.first().map(int), Some(expect), "cart {cart} at {server}");
        }
    }
    let stats = c.stats();
    let counter = |name: &str| stats.counter(name);
    assert_eq!(counter("global_calls"), carts as u64);
    assert_eq!(
        counter("local_calls"),
        (carts * (1 + n)) as u64 + u64::from(SERVERS) * ITEMS as u64 + 4 * 3
    );
    // Every order's update applied at every other server.
    assert_eq!(
        counter("updates_applied"),
        carts as u64 * u64::from(SERVERS - 1)
    );
    assert!(counter("token_turns") > 0);
    Ok(())
}

/// The baselines of seed 004 section 7.2 on the same cluster: with read
/// replicas every write runs at the primary and reaches every replica in
/// commit order (so a cart's lines are everywhere); centralized, one
/// server holds and runs everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_keep_one_stock() -> Result<(), Error> {
    let (carts, n) = (30, 2);
    let c = store_under("read-replicas", 50).await;
    let taken = shop_all(&c, carts, n).await?;
    elia(&c).conveyor().settled(Duration::from_secs(10)).await?;
    assert_stock_everywhere(&c, &taken).await?;
    for server in 0..i64::from(SERVERS) {
        let v = call(&c, "lines_at", vec![Value::Int(5), Value::Int(server)]).await?;
        assert_eq!(v.first().map(int), Some(n), "cart 5 at {server}");
    }
    let stats = c.stats();
    // Writers (create, add, order) at the primary; reads where they came.
    assert_eq!(stats.counter("global_calls"), (carts * (2 + n)) as u64);
    assert_eq!(
        stats.counter("updates_applied"),
        (carts * (2 + n)) as u64 * u64::from(SERVERS - 1)
    );
    // Read-your-writes: a client's read at its own replica sees the
    // writes it made at the primary a moment ago.
    for k in 0..20u32 {
        let client = c.client_numbered(k);
        let cart = Value::Int(1_000 + i64::from(k));
        let item = Value::Int(i64::from(k) % ITEMS);
        client
            .call("create", vec![cart.clone(), cart.clone()])
            .await?;
        client
            .call("add", vec![cart.clone(), item, Value::Int(1)])
            .await?;
        let seen = client
            .call("lines_at", vec![cart, Value::Int(0)])
            .await?
            .values;
        assert_eq!(seen.first().map(int), Some(1), "client {k}");
    }
    let c = store_under("central", 0).await;
    let taken = shop_all(&c, carts, n).await?;
    assert_stock_everywhere(&c, &taken).await?;
    Ok(())
}

/// A run's history under `elia`, checked at serializable. A replica's
/// replay of a global is not a transaction of the history: the versions it
/// installs are named by the global's own, so a read at any server names
/// the global it read from.
async fn store_history(mutation: Option<Mutation>) -> Result<brine_check::Report, Error> {
    let path = std::env::temp_dir().join(format!(
        "brine-elia-{}-{}.jsonl",
        std::process::id(),
        mutation.is_some()
    ));
    let c = store_with("elia", 50, |config| {
        config.history = Some(path.clone());
        config.mutation = mutation;
    })
    .await;
    // Two rounds of shoppers: the second's adds read stock the first's
    // orders wrote at other servers.
    for round in 0..2 {
        shop_all_from(&c, round * 100, 45, 2).await?;
    }
    elia(&c).conveyor().settled(Duration::from_secs(10)).await?;
    c.flush_history()?;
    let h = brine_check::read_file(&path).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::remove_file(&path).ok();
    assert!(h.txns.len() > 300, "{} transactions", h.txns.len());
    Ok(brine_check::check(&h.txns, Level::Serializable))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_are_serializable() -> Result<(), Error> {
    let report = store_history(None).await?;
    assert!(report.valid, "{}", report.render(5));
    Ok(())
}

/// Applying the token's updates in reverse order at each server makes two
/// replicas apply conflicting orders in different orders: the checker
/// must see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_out_of_token_order_are_caught() -> Result<(), Error> {
    let report = store_history(Some(Mutation::EliaOutOfOrder)).await?;
    assert!(
        !report.valid,
        "the checker missed updates out of token order"
    );
    Ok(())
}

/// An interactive transaction reads (partition 0's replica) but may not
/// write: a write there would reach one replica only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_writes_are_refused() -> Result<(), Error> {
    let c = store(0).await;
    let mut t = c.client().begin();
    let r = t
        .execute("SELECT qty FROM stock WHERE item = $i", vec![Value::Int(1)])
        .await?;
    assert_eq!(r.first().and_then(|r| r.first()).map(int), Some(STOCK));
    let w = t
        .execute(
            "UPDATE stock SET qty = 0 WHERE item = $i",
            vec![Value::Int(1)],
        )
        .await;
    assert!(
        matches!(w, Err(Error::Config(ref m)) if m.contains("may only read")),
        "{w:?}"
    );
    t.abort().await;
    Ok(())
}

#[test]
fn a_route_for_an_unknown_procedure_is_refused() {
    let config = ClusterConfig {
        nodes: 2,
        partitions_per_node: 1,
        protocol: "elia".into(),
        elia: EliaOptions {
            routes: routes().with(
                "checkout",
                brine_cluster::protocols::elia::Class::Global,
                &[],
            ),
        },
        ..ClusterConfig::default()
    };
    match Cluster::start(config, app()) {
        Err(Error::Config(m)) => assert!(m.contains("`checkout`"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started with a route for no procedure"),
    }
}

#[test]
fn elia_needs_one_partition_per_node() {
    let config = ClusterConfig {
        nodes: 2,
        partitions_per_node: 2,
        protocol: "elia".into(),
        ..ClusterConfig::default()
    };
    match Cluster::start(config, app()) {
        Err(Error::Config(m)) => assert!(m.contains("partitions-per-node"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started with two partitions per node"),
    }
}
