//! Seeded random histories against the table's own invariant checker: no
//! conflicting grants, no lost wakeups (every waiter waits for someone), the
//! wait-die age rule, consistent indexes, gated requests never granted
//! before they are ungated. Each run ends by releasing every transaction,
//! after which the table must be empty. A failure prints the seed; rerun
//! it to reproduce.

use brine_core::{Access, IndexId, Key, LockTarget, TableId, TxnId, Value};
use brine_lock::{
    Acquire, DeadlockPolicy, GateOpens, LockClass, LockConfig, LockTable, Mode, ReleaseOutcome,
    StandardCompat, Ticket, Wakeup,
};
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(k: u64) -> Key {
    Key::new([Value::Int(k as i64)])
}

fn random_target(rng: &mut Rng) -> LockTarget {
    let (table, index) = (TableId(1), IndexId(0));
    if rng.below(4) == 0 {
        let lo = rng.below(10);
        let hi = lo + rng.below(4);
        let lo = if rng.below(2) == 0 {
            Bound::Included(key(lo))
        } else {
            Bound::Excluded(key(lo))
        };
        let hi = if rng.below(5) == 0 {
            Bound::Unbounded
        } else {
            Bound::Included(key(hi))
        };
        LockTarget::Range {
            table,
            index,
            lo,
            hi,
        }
    } else {
        LockTarget::Point {
            table,
            index,
            key: key(rng.below(10)),
        }
    }
}

fn random_mode(rng: &mut Rng, target: &LockTarget) -> Mode {
    let class = match rng.below(5) {
        0 | 1 => LockClass::Acid,
        2 => LockClass::Alkaline,
        3 => LockClass::Saline,
        _ => LockClass::Nexus(rng.below(2) as u32),
    };
    let access = match (target, rng.below(2)) {
        (_, 0) => Access::Write,
        (LockTarget::Range { .. }, _) => Access::RangeRead,
        _ => Access::Read,
    };
    Mode::new(class, access)
}

struct Model {
    /// Live transactions and the targets they asked for.
    live: Vec<TxnId>,
    asked: HashMap<TxnId, Vec<(LockTarget, Access)>>,
    waiting: HashMap<Ticket, TxnId>,
    /// Gated requests not yet ungated.
    gated: HashSet<Ticket>,
    deferred: HashSet<TxnId>,
    next_id: u64,
}

impl Model {
    fn apply(&mut self, wakeups: &[Wakeup], seed: u64) {
        for w in wakeups {
            match *w {
                Wakeup::Granted { txn, ticket } | Wakeup::Aborted { txn, ticket, .. } => {
                    let granted = matches!(w, Wakeup::Granted { .. });
                    assert!(
                        !(granted && self.gated.contains(&ticket)),
                        "seed {seed}: gated request {ticket:?} granted before it was ungated"
                    );
                    self.gated.remove(&ticket);
                    assert_eq!(
                        self.waiting.remove(&ticket),
                        Some(txn),
                        "seed {seed}: wakeup {w:?} for no wait"
                    );
                }
                Wakeup::Released { txn } => {
                    assert!(
                        self.deferred.remove(&txn),
                        "seed {seed}: Released for {txn} that was not deferred"
                    );
                }
            }
        }
    }

    /// The table dropped every wait of `txn` without a wakeup.
    fn forget_waits(&mut self, txn: TxnId) {
        let gated = &mut self.gated;
        self.waiting.retain(|t, w| {
            if *w == txn {
                gated.remove(t);
            }
            *w != txn
        });
    }

    fn is_waiting(&self, txn: TxnId) -> bool {
        self.waiting.values().any(|t| *t == txn)
    }
}

fn run(seed: u64, policy: DeadlockPolicy, steps: usize) -> brine_lock::LockStats {
    let mut rng = Rng(seed);
    let config = LockConfig {
        policy,
        wait_timeout: Duration::from_millis(50),
        max_waiters_per_key: 8,
        max_deps_per_txn: 8,
    };
    let mut table = LockTable::new(config, Arc::new(StandardCompat));
    let base = Instant::now();
    let mut clock_ms = 0u64;
    let mut m = Model {
        live: Vec::new(),
        asked: HashMap::new(),
        waiting: HashMap::new(),
        gated: HashSet::new(),
        deferred: HashSet::new(),
        next_id: 1,
    };
    for _ in 0..6 {
        let id = m.next_id;
        m.next_id += 1;
        m.live.push(TxnId { ts: id, id });
    }
    for step in 0..steps {
        let mut wakeups = Vec::new();
        let txn = m.live[rng.below(m.live.len() as u64) as usize];
        let now = base + Duration::from_millis(clock_ms);
        let before = if std::env::var("TRACE").is_ok() {
            table.to_string()
        } else {
            String::new()
        };
        let gated_before = m.gated.clone();
        let op = rng.below(23);
        match op {
            0..=9 if !m.is_waiting(txn) => {
                let target = random_target(&mut rng);
                let mode = random_mode(&mut rng, &target);
                match table.acquire(txn, &target, mode, now, &mut wakeups) {
                    Ok(Acquire::Waiting(t)) => {
                        m.waiting.insert(t, txn);
                    }
                    Ok(Acquire::Granted { .. }) | Ok(Acquire::Abort(_)) | Err(_) => {}
                }
                m.asked.entry(txn).or_default().push((target, mode.access));
            }
            10 | 11 => {
                if let Some(list) = m.asked.get(&txn) {
                    if !list.is_empty() {
                        let (t, a) = list[rng.below(list.len() as u64) as usize].clone();
                        table.release(txn, &t, a, &mut wakeups);
                    }
                }
            }
            12 => table.downgrade_all(txn, LockClass::Alkaline, LockClass::Saline, &mut wakeups),
            13 => {
                // Dependencies only on older transactions: acyclic.
                let on = m.live[rng.below(m.live.len() as u64) as usize];
                if on.id < txn.id {
                    let t = m
                        .asked
                        .get(&txn)
                        .and_then(|l| l.first())
                        .map(|x| x.0.clone());
                    let ot = m
                        .asked
                        .get(&on)
                        .and_then(|l| l.first())
                        .map(|x| x.0.clone());
                    let t = if rng.below(2) == 0 { None } else { t };
                    let ot = if rng.below(2) == 0 { None } else { ot };
                    let _ = table.add_release_dependency(txn, t.as_ref(), on, ot.as_ref());
                }
            }
            14 => {
                table.cancel_waits(txn, &mut wakeups);
                m.forget_waits(txn);
            }
            15 => {
                clock_ms += rng.below(40);
                table.expire(base + Duration::from_millis(clock_ms), &mut wakeups);
            }
            16 if !m.is_waiting(txn) && !m.asked.contains_key(&txn) => {
                let target = random_target(&mut rng);
                let mode = random_mode(&mut rng, &target);
                let protected = table.is_protected(txn);
                // A local gate opens at once when ready on arrival.
                let local = rng.below(2) == 0;
                let opens = if local {
                    GateOpens::WhenReady
                } else {
                    GateOpens::OnUngate
                };
                match table.acquire_gated(txn, &target, mode, opens, now, &mut wakeups) {
                    Ok(Acquire::Waiting(t)) => {
                        m.waiting.insert(t, txn);
                        if !protected {
                            m.gated.insert(t);
                        }
                    }
                    Ok(Acquire::Granted { .. }) => assert!(
                        local || table.is_protected(txn),
                        "seed {seed}: a gated request granted"
                    ),
                    Ok(Acquire::Abort(_)) | Err(_) => {}
                }
                m.asked.entry(txn).or_default().push((target, mode.access));
            }
            17 => {
                let mut tickets: Vec<Ticket> = m.gated.iter().copied().collect();
                tickets.sort_unstable();
                if !tickets.is_empty() {
                    let t = tickets[rng.below(tickets.len() as u64) as usize];
                    assert!(
                        table.ungate(t, &mut wakeups),
                        "seed {seed}: {t:?} was gated"
                    );
                    m.gated.remove(&t);
                }
            }
            // A transaction with a gated request is never protected.
            18 if !m
                .waiting
                .iter()
                .any(|(t, w)| *w == txn && m.gated.contains(t)) =>
            {
                table.protect(txn, &mut wakeups)
            }
            _ => {
                // End the transaction; a fresh one (same age rule: new ts) takes its place.
                let out = table.release_all(txn, &mut wakeups);
                m.forget_waits(txn);
                if out == ReleaseOutcome::Deferred {
                    m.deferred.insert(txn);
                }
                m.live.retain(|t| *t != txn);
                m.asked.remove(&txn);
                let id = m.next_id;
                m.next_id += 1;
                m.live.push(TxnId { ts: id, id });
            }
        }
        if std::env::var("TRACE").is_ok() {
            eprintln!("step {step} txn {txn} op {op} wakeups {wakeups:?}\nbefore:\n{before}after:\n{table}");
        }
        m.apply(&wakeups, seed);
        let mut changes = Vec::new();
        table.take_gate_changes(&mut changes);
        for (_, t, _) in changes {
            assert!(
                gated_before.contains(&t) || m.gated.contains(&t) || m.waiting.contains_key(&t),
                "seed {seed}: readiness reported for {t:?}, not a gated request"
            );
        }
        if let Err(e) = table.check_invariants() {
            panic!("seed {seed} policy {policy:?} step {step}: {e}\n{table}");
        }
    }
    // Drain: end every live transaction, oldest first.
    for txn in m.live.clone() {
        let mut wakeups = Vec::new();
        if table.release_all(txn, &mut wakeups) == ReleaseOutcome::Deferred {
            m.deferred.insert(txn);
        }
        m.waiting.retain(|_, t| *t != txn);
        m.apply(&wakeups, seed);
    }
    assert!(
        m.deferred.is_empty(),
        "seed {seed}: deferred releases never completed: {:?}\n{table}",
        m.deferred
    );
    assert_eq!(table.waiting_requests(), 0, "seed {seed}");
    assert_eq!(table.txn_count(), 0, "seed {seed}\n{table}");
    assert_eq!(table.to_string(), "(empty)\n", "seed {seed}");
    table.stats().clone()
}

#[test]
fn random_histories_keep_invariants() {
    for seed in 0..60 {
        for policy in [
            DeadlockPolicy::WaitDie,
            DeadlockPolicy::Detect,
            DeadlockPolicy::TimeoutOnly,
        ] {
            run(seed, policy, 400);
        }
    }
}
