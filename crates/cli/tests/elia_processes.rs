//! Elia over three `brine server` processes, one per server: the token is
//! a message between them. Servers killed with SIGKILL and restarted
//! (server 1 at any moment, server 0, which regenerates tokens, and server
//! 1 while it holds the token, which is then lost) lose no acknowledged
//! operation, the token is regenerated, and the replicas converge; local
//! operations at the live servers go on while a server is down.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brine_core::Value;

mod processes;
use processes::{
    brine, client_runtime, path, seen, spawn_server, start_loaded, wait_up, Nodes, Seen,
};

/// elia-micro's layout: item k at server k mod 3, 100 global rows.
const SERVERS: i64 = 3;
const ITEMS: i64 = 3_000;
const GLOBALS: i64 = 100;

/// One call's record: global or local, its outcome, and the phase of the
/// trial when it was sent and when it was answered.
struct Record {
    global: bool,
    seen: Seen,
    sent: u32,
    answered: u32,
}

/// Phases of the trial.
const RUNNING: u32 = 0;
const SERVER_1_DOWN: u32 = 1;

/// Waits until `count()` reaches `n`; false after `within`.
fn reaches(count: impl Fn() -> u64, n: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while count() < n {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn int_of(r: Result<brine_client::Called, brine_client::ClientError>, what: &str) -> i64 {
    match r {
        Ok(c) => c.values.first().and_then(Value::as_int).expect("an INT"),
        Err(e) => panic!("{what}: {e}"),
    }
}

fn restart(cluster: &mut Nodes, node: usize, kill: bool) {
    if kill {
        let victim = &mut cluster.children[node];
        victim.kill().expect("SIGKILL");
        victim.wait().expect("reaped");
    }
    cluster.children[node] = spawn_server(&cluster.config, cluster.dir.path(), node);
    wait_up(&cluster.config);
}

/// Transactions active at server 1's partition, as `brine status` shows
/// them.
fn active_at_1(config: &std::path::Path) -> u64 {
    let o = brine(&["status", "--cluster", path(config)]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix("1 ")?;
            let counts = rest.split("p1: ").nth(1)?;
            counts.split(" / ").nth(1)?.trim().parse().ok()
        })
        .unwrap_or(0)
}

fn node_logs(cluster: &Nodes) -> String {
    (0..SERVERS)
        .map(|n| {
            let log = std::fs::read_to_string(cluster.dir.path().join(format!("node-{n}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            format!(
                "node {n}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn acknowledged_operations_survive_servers_killed_and_the_token_regenerated() {
    use rand::{Rng, SeedableRng};
    let mut cluster = start_loaded("elia", "elia-micro", &["--op-ms", "0"]);
    let config = cluster.config.clone();
    let runtime = client_runtime();
    let client = brine_client::Client::from_file(&config).expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicU32::new(RUNNING));
    let records: Arc<Mutex<Vec<Record>>> = Arc::default();
    let globals_acked = Arc::new(AtomicU64::new(0));
    let locals_while_down = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..6u64)
        .map(|seed| {
            let (client, stop, phase, records) =
                (client.clone(), stop.clone(), phase.clone(), records.clone());
            let (globals_acked, locals_while_down) =
                (globals_acked.clone(), locals_while_down.clone());
            runtime.spawn(async move {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
                // Half the clients call globals, which wait while a server
                // is down; the other half local operations.
                let global = seed % 2 == 0;
                while !stop.load(Ordering::Relaxed) {
                    let g = Value::Int(rng.gen_range(0..GLOBALS));
                    let sent = phase.load(Ordering::Relaxed);
                    let r = if global {
                        client.call("global_op", vec![g, Value::Int(0)]).await
                    } else {
                        let k = Value::Int(rng.gen_range(0..ITEMS));
                        client.call("local_op", vec![k, g, Value::Int(0)]).await
                    };
                    let seen = seen(&r);
                    let answered = phase.load(Ordering::Relaxed);
                    match (&seen, global) {
                        (Seen::Committed, true) => {
                            globals_acked.fetch_add(1, Ordering::Relaxed);
                        }
                        (Seen::Committed, false)
                            if sent == SERVER_1_DOWN && answered == SERVER_1_DOWN =>
                        {
                            locals_while_down.fetch_add(1, Ordering::Relaxed);
                        }
                        (Seen::Committed, false) => {}
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                    records.lock().expect("records").push(Record {
                        global,
                        seen,
                        sent,
                        answered,
                    });
                }
            })
        })
        .collect();
    let acked = || globals_acked.load(Ordering::Relaxed);
    let minute = Duration::from_secs(60);

    assert!(
        reaches(acked, 200, minute),
        "globals ran: {}",
        node_logs(&cluster)
    );
    // Server 1 killed: the token waits for it; the other servers' local
    // operations go on.
    cluster.children[1].kill().expect("SIGKILL");
    cluster.children[1].wait().expect("reaped");
    phase.store(SERVER_1_DOWN, Ordering::Relaxed);
    let went_on = reaches(|| locals_while_down.load(Ordering::Relaxed), 20, minute);
    phase.store(2, Ordering::Relaxed);
    restart(&mut cluster, 1, false);
    assert!(went_on, "local operations went on while server 1 was down");
    let before = acked();
    assert!(
        reaches(acked, before + 200, minute),
        "globals ran after server 1 rejoined: {}",
        node_logs(&cluster)
    );
    // Server 0, which regenerates the token, killed and restarted at once.
    phase.store(3, Ordering::Relaxed);
    restart(&mut cluster, 0, true);
    phase.store(4, Ordering::Relaxed);
    let before = acked();
    assert!(
        reaches(acked, before + 200, minute),
        "globals ran after server 0 restarted: {}",
        node_logs(&cluster)
    );
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        runtime.block_on(t).expect("a load task");
    }

    // Server 1 killed while it holds the token for certain: a global of
    // 3 s runs in its turn there (the only transaction of the cluster),
    // so the token is lost with it. Once server 1 is back, the token is
    // regenerated and globals run again.
    let file = brine_client::ClusterFile::read(&config).expect("cluster file");
    let at_1 = brine_client::Client::single(1, &file.nodes[1].address).expect("client");
    let long = runtime.spawn(async move {
        at_1.call("global_op", vec![Value::Int(0), Value::Int(3_000)])
            .await
    });
    let running = reaches(|| active_at_1(&config), 1, minute);
    assert!(running, "the long global ran at server 1");
    restart(&mut cluster, 1, true);
    let long = seen(&runtime.block_on(long).expect("the long call's task"));
    let mut records = std::mem::take(&mut *records.lock().expect("records"));
    records.push(Record {
        global: true,
        seen: long,
        sent: 5,
        answered: 5,
    });
    for g in 0..20 {
        let r = runtime.block_on(client.call("global_op", vec![Value::Int(g), Value::Int(0)]));
        assert!(
            r.is_ok(),
            "a global after the token was lost with its holder: {r:?}\n{}",
            node_logs(&cluster)
        );
        records.push(Record {
            global: true,
            seen: Seen::Committed,
            sent: 5,
            answered: 5,
        });
    }

    let count = |global: bool, want: fn(&Seen) -> bool| {
        records
            .iter()
            .filter(|r| r.global == global && want(&r.seen))
            .count() as i64
    };
    let committed = |s: &Seen| matches!(s, Seen::Committed);
    let unknown = |s: &Seen| matches!(s, Seen::Unknown);
    let (globals, globals_unknown) = (count(true, committed), count(true, unknown));
    let (locals, locals_unknown) = (count(false, committed), count(false, unknown));
    let after_second_restart = records
        .iter()
        .filter(|r| r.sent == 4 && committed(&r.seen))
        .count();
    eprintln!(
        "globals: {globals} acknowledged, {globals_unknown} unknown; locals: {locals} \
         acknowledged, {locals_unknown} unknown; {after_second_restart} committed after the \
         second restart"
    );
    for r in records
        .iter()
        .filter(|r| matches!(r.seen, Seen::Aborted(_)))
    {
        if let Seen::Aborted(why) = &r.seen {
            eprintln!(
                "aborted (sent in phase {}, answered in {}): {why}",
                r.sent, r.answered
            );
        }
    }

    // Every replica converges on every acknowledged global (and any of
    // those whose outcome the client could not know), each applied once.
    let deadline = Instant::now() + minute;
    let mut last: Option<Vec<i64>> = None;
    let replicas = loop {
        let now: Vec<i64> = (0..SERVERS)
            .map(|s| {
                int_of(
                    runtime.block_on(client.call("globals_at", vec![Value::Int(s)])),
                    "globals_at",
                )
            })
            .collect();
        if now.iter().all(|&v| v == now[0]) && last.as_ref() == Some(&now) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas did not converge: {now:?}\n{}",
            node_logs(&cluster)
        );
        last = Some(now);
        std::thread::sleep(Duration::from_millis(200));
    };
    let g = replicas[0];
    assert!(
        g >= globals && g <= globals + globals_unknown,
        "every replica's global rows add up to {g}, but {globals} globals were acknowledged \
         and {globals_unknown} are of unknown outcome\n{}",
        node_logs(&cluster)
    );
    // Local operations' items, each at its own server.
    let items: i64 = (0..SERVERS)
        .map(|s| {
            int_of(
                runtime.block_on(client.call("items_at", vec![Value::Int(s)])),
                "items_at",
            )
        })
        .sum();
    assert!(
        items >= locals && items <= locals + locals_unknown,
        "the items add up to {items}, but {locals} local operations were acknowledged and \
         {locals_unknown} are of unknown outcome"
    );
}
