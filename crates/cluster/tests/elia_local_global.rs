//! Why brine runs every L/G call as a global (seed 004 section 6: RUBiS's
//! bids, "partitioned by both user id and item id ... if both parameters
//! route to the same server, the operation is considered local").
//!
//! A bid raises its item's maximum (read, then write) and counts itself
//! on its user. Partitioned by user and item, it is L/G. Run the seed's way
//! (`Mutation::EliaLocalLG`), a bid whose user and item share a server
//! raises the maximum there only; a bid on the same item by a user
//! elsewhere runs globally over a replica without that raise, and its
//! update lowers the maximum again everywhere: the high bid is lost. brine
//! runs every L/G call globally, and every replica ends with each item's
//! true maximum.

use std::time::Duration;

use brine_cluster::protocols::elia::{Class, Elia, EliaOptions, Routes};
use brine_cluster::{
    Application, Cluster, ClusterConfig, LinkConfig, Mutation, Placement, ProcedureDef,
};
use brine_core::{Error, Value};

const SERVERS: u32 = 3;
const ITEMS: i64 = 3;
const USERS: i64 = 9;

fn app() -> Application {
    let bid = ProcedureDef::new("bid")
        .statement("max", "SELECT max_bid FROM items WHERE id = $i")
        .statement("raise", "UPDATE items SET max_bid = $b WHERE id = $i")
        .statement("count", "UPDATE users SET bids = bids + 1 WHERE id = $u")
        .body(|mut ctx, args| async move {
            // bid(u, i, b)
            let q = ctx.exec("max", vec![args[1].clone()]).await?;
            let max = q.first().and_then(|r| r[0].as_int()).unwrap_or(0);
            if args[2].as_int().unwrap_or(0) > max {
                ctx.exec("raise", vec![args[2].clone(), args[1].clone()])
                    .await?;
            }
            ctx.exec("count", vec![args[0].clone()]).await?;
            Ok(vec![])
        });
    let max_at = ProcedureDef::new("max_at")
        .statement("max", "SELECT max_bid FROM items WHERE id = $i")
        .body(|mut ctx, args| async move {
            let q = ctx.exec("max", vec![args[0].clone()]).await?;
            Ok(q.first().map(|r| r.to_vec()).unwrap_or_default())
        });
    Application {
        name: "auction".into(),
        ddl: "CREATE TABLE items (id INT, max_bid INT NOT NULL, PRIMARY KEY (id));
              CREATE TABLE users (id INT, bids INT NOT NULL, PRIMARY KEY (id));"
            .into(),
        procedures: vec![bid, max_at],
    }
}

/// Bids on every item by every user, amounts rising then falling so that
/// low bids follow high ones; returns what every replica holds as each
/// item's maximum, and the true maxima.
async fn auction(mutation: Option<Mutation>) -> Result<(Vec<Vec<i64>>, Vec<i64>), Error> {
    let config = ClusterConfig {
        nodes: SERVERS,
        partitions_per_node: 1,
        placement: Placement::Colocated,
        protocol: "elia".into(),
        link: LinkConfig {
            delay_us: 50,
            jitter_us: 0,
        },
        mutation,
        elia: EliaOptions {
            routes: Routes::new().with("bid", Class::LocalGlobal, &[0, 1]).with(
                "max_at",
                Class::Local,
                &[1],
            ),
        },
        ..ClusterConfig::default()
    };
    let c = Cluster::start(config, app())?;
    c.load(
        "items",
        (0..ITEMS)
            .map(|i| vec![Value::Int(i), Value::Int(0)])
            .collect(),
    )
    .await?;
    c.load(
        "users",
        (0..USERS)
            .map(|u| vec![Value::Int(u), Value::Int(0)])
            .collect(),
    )
    .await?;
    let mut truth = vec![0i64; ITEMS as usize];
    for round in 0..6i64 {
        let mut calls = Vec::new();
        for u in 0..USERS {
            for i in 0..ITEMS {
                // A user on the item's own server bids high; the others low.
                let b = if u % i64::from(SERVERS) == i % i64::from(SERVERS) {
                    1_000 + round * 10 + u
                } else {
                    round * 10 + u
                };
                truth[i as usize] = truth[i as usize].max(b);
                let client = c.client();
                calls.push(tokio::spawn(async move {
                    client
                        .call("bid", vec![Value::Int(u), Value::Int(i), Value::Int(b)])
                        .await
                }));
            }
        }
        for call in calls {
            call.await.expect("bid task")?;
        }
    }
    let elia = c.protocol().as_any().downcast_ref::<Elia>().expect("elia");
    elia.conveyor().settled(Duration::from_secs(10)).await?;
    let mut replicas = Vec::new();
    for server in 0..i64::from(SERVERS) {
        let mut maxima = Vec::new();
        for i in 0..ITEMS {
            let v = c
                .client()
                .call("max_at", vec![Value::Int(i), Value::Int(server)])
                .await?;
            maxima.push(v.values.first().and_then(Value::as_int).unwrap_or(-1));
        }
        replicas.push(maxima);
    }
    Ok((replicas, truth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_global_calls_run_globally_and_keep_every_maximum() -> Result<(), Error> {
    let (replicas, truth) = auction(None).await?;
    for (server, maxima) in replicas.iter().enumerate() {
        assert_eq!(maxima, &truth, "server {server}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locally_as_the_seed_has_it_a_high_bid_is_lost() -> Result<(), Error> {
    let (replicas, truth) = auction(Some(Mutation::EliaLocalLG)).await?;
    assert!(
        replicas.iter().any(|m| m != &truth),
        "every replica kept every maximum: {replicas:?} (truth {truth:?})"
    );
    Ok(())
}
