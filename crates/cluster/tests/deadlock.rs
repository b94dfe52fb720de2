//! The cluster's deadlock detector breaks a cycle through two partitions,
//! which neither partition's lock table sees, without the lock wait
//! timeout, and at once: the partition where the cycle closed rings the
//! detector, instead of the cycle waiting for the detector's period.
//!
//! The runtime runs on tokio's paused clock with an immediate link, so
//! "at once" is a statement about the virtual clock (deterministic), not
//! about the machine's speed.

mod common;

use std::time::Duration;

use brine_cluster::{deadlock, DeadlockPolicy, Isolation};
use brine_core::{AbortCause, Error, Value};
use common::*;

const BUMP: &str = "UPDATE account SET balance = balance + $a WHERE id = $id";

#[test]
fn a_cycle_through_two_partitions_is_broken_by_the_detector_at_once() {
    let rt = paused_runtime();
    rt.block_on(async {
        let mut config = config(Isolation::Serializable, DeadlockPolicy::Detect);
        // The backstop is out of reach: only the detector can end it.
        config.lock.wait_timeout = Duration::from_secs(3600);
        let c = bank_with(config, 4).await;
        // Accounts 1 and 2 live on different partitions (`id mod 4`).
        let mut t1 = c.client().begin();
        let mut t2 = c.client().begin();
        t1.execute(BUMP, vec![money(1), Value::Int(1)])
            .await
            .expect("t1 locks account 1");
        t2.execute(BUMP, vec![money(1), Value::Int(2)])
            .await
            .expect("t2 locks account 2");
        let before = c.stats();
        let start = tokio::time::Instant::now();
        // t1 waits at account 2's partition for t2; t2 at account 1's for
        // t1. Whichever arrives second closes the cycle.
        let a = tokio::spawn(async move {
            let r = t1.execute(BUMP, vec![money(1), Value::Int(2)]).await;
            // A victim's commit ends it and reports (and counts) the abort.
            let done = t1.commit().await;
            r.map(|_| ()).and(done)
        });
        let b = tokio::spawn(async move {
            let r = t2.execute(BUMP, vec![money(1), Value::Int(1)]).await;
            // A victim's commit ends it and reports (and counts) the abort.
            let done = t2.commit().await;
            r.map(|_| ()).and(done)
        });
        let (r1, r2) = (a.await.expect("t1's task"), b.await.expect("t2's task"));
        let took = start.elapsed();

        // The partitions copy their lock tables' counters every tick
        // (5 ms): let that happen before reading them.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let victims: Vec<_> = [&r1, &r2].into_iter().filter(|r| r.is_err()).collect();
        assert_eq!(victims.len(), 1, "exactly one victim: {r1:?} {r2:?}");
        assert_eq!(victims[0], &Err(Error::Aborted(AbortCause::Deadlock)));
        let s = c.stats().since(&before);
        assert_eq!(s.aborts_timeout, 0);
        assert_eq!(s.aborts_deadlock, 1);
        assert_eq!(s.detector_breaks, 1, "broken by the cluster's detector");
        // Rung by the partition, not found by the periodic look.
        assert!(
            took < deadlock::PERIOD,
            "the cycle lasted {took:?} of virtual time"
        );
        // The survivor's two bumps are kept, the victim's one undone.
        let one = balance(&c, 1).await;
        let two = balance(&c, 2).await;
        assert_eq!([one, two], [money(101), money(101)]);
    });
}

/// A look whose request or answer is lost sees part of the graph: it
/// breaks nothing, and the detector goes on looking. (It once stopped for
/// good at the first lost answer, leaving every later cycle to the lock
/// wait timeout.) Every message between nodes is lost for two of the
/// detector's periods; a cycle closed after that is still broken by it.
#[test]
fn the_detector_outlives_lost_messages() {
    let rt = paused_runtime();
    rt.block_on(async {
        let mut config = config(Isolation::Serializable, DeadlockPolicy::Detect);
        config.lock.wait_timeout = Duration::from_secs(3600);
        config.faults = brine_cluster::FaultConfig {
            loss: 1.0,
            loss_from: Duration::ZERO,
            loss_until: Some(deadlock::PERIOD * 2),
            cuts: Vec::new(),
            on_demand: true,
            ..Default::default()
        };
        let c = bank_with(config, 4).await;
        c.begin_faults();
        tokio::time::sleep(deadlock::PERIOD * 3).await;
        assert!(
            c.fault_stats()
                .lost
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0,
            "the detector's looks met the loss"
        );
        let (mut t1, mut t2) = (c.client().begin(), c.client().begin());
        t1.execute(BUMP, vec![money(1), Value::Int(1)])
            .await
            .expect("t1");
        t2.execute(BUMP, vec![money(1), Value::Int(2)])
            .await
            .expect("t2");
        let a = tokio::spawn(async move {
            let r = t1.execute(BUMP, vec![money(1), Value::Int(2)]).await;
            r.map(|_| ()).and(t1.commit().await)
        });
        let b = tokio::spawn(async move {
            let r = t2.execute(BUMP, vec![money(1), Value::Int(1)]).await;
            r.map(|_| ()).and(t2.commit().await)
        });
        let (r1, r2) = (a.await.expect("t1's task"), b.await.expect("t2's task"));
        let victims: Vec<_> = [&r1, &r2].into_iter().filter(|r| r.is_err()).collect();
        assert_eq!(victims.len(), 1, "exactly one victim: {r1:?} {r2:?}");
        assert_eq!(victims[0], &Err(Error::Aborted(AbortCause::Deadlock)));
    });
}

/// The detector's looks cross the simulated link like every other message
/// between nodes (it runs on node 0; a partition on node 1 is asked for
/// its wait-for graph over the link, and answers over it), so they count
/// in the link's statistics: an idle cluster under the detector still
/// sends messages, one look per period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detector_s_looks_cross_the_link() {
    let mut config = config(Isolation::Serializable, DeadlockPolicy::Detect);
    config.link.delay_us = 50;
    let c = bank_with(config, 4).await;
    let link = c.link_stats();
    let sent = || link.messages.load(std::sync::atomic::Ordering::Relaxed);
    let before = sent();
    // No transaction runs from here on: whatever crosses the link now is
    // the detector's.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sent() < before + 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "no detector message crossed the link in 10 s ({} before, {} now)",
            before,
            sent()
        );
        tokio::time::sleep(deadlock::PERIOD).await;
    }
}
