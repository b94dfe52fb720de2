//! Mediator's upkeep at each node, beside the calls (`run.rs`): the
//! version collector and the running helper (seed 003 section 2), and,
//! durable across processes, settling this node's commits with a
//! restarted TSO (`drain`) and after this node's own restart
//! (`recover`); see `docs/mediator.md`, "Durable across processes".

use std::collections::HashMap;
use std::sync::Arc;

use brine_core::{Error, Result};

use super::partition::MediatorMsg;
use super::run::{mediator_of, write_back, write_back_parts, HELPER_ABORTED, HELPER_COMMITTED};
use super::service::TsoMsg;
use super::store::Ts;
use super::Mediator;
use crate::coordinator::Shared;
use crate::message::PartitionMsg;

/// How often the partitions collect versions and the helper looks for
/// commits left unfinished.
const COLLECT_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);

/// Every `COLLECT_PERIOD`: the helper's pass (`help`), then asks the TSO
/// for the oldest snapshot in use and tells every partition to drop the
/// versions no snapshot at or after it can read (native puts add versions
/// too, so this runs whatever the traffic). Ends when the cluster is gone.
pub(super) async fn collect_versions(shared: std::sync::Weak<Shared>, node: brine_core::NodeId) {
    let mut tick = tokio::time::interval(COLLECT_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = 0;
    let mut stuck: HashMap<Ts, tokio::time::Instant> = HashMap::new();
    let mut epoch = None;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(tso) = mediator_of(&shared).tso.clone() else {
            return;
        };
        // A TSO or a partition out of reach (its process down) is asked
        // again at the next pass.
        if let Err(e) = drain(&shared, node, &mut epoch).await {
            tracing::debug!("Mediator: settling commits for the TSO: {e}");
            continue;
        }
        if let Err(e) = help(&shared, node, &mut stuck).await {
            tracing::debug!("Mediator helper: {e}");
            continue;
        }
        let Ok(oldest) = tso.ask(node, |reply| TsoMsg::Oldest { reply }).await else {
            continue;
        };
        if oldest == last {
            continue;
        }
        last = oldest;
        for p in 0..shared.partitions.len() {
            let msg = MediatorMsg::Collect { oldest };
            shared.send(node, p, PartitionMsg::Protocol(Box::new(msg)));
        }
        mediator_of(&shared)
            .collected
            .store(oldest, std::sync::atomic::Ordering::Release);
    }
}

/// Whether commits coordinated by `node` are logged where its restart
/// finds them (durable across processes): nobody else may give one up.
fn logs_commits(m: &Mediator, node: u32) -> bool {
    node < m.logging_nodes || (m.logging_nodes > 0 && node == super::service::UNKNOWN_NODE)
}

/// Across processes, a restarted TSO lets transactions begin once every
/// node has settled the commits it had in flight when the TSO came back
/// (their ring went with it): each pass asks for the TSO's epoch; those
/// serialized before it that are not logged are abandoned (their
/// coordinators abort them), those logged are written back here (again,
/// if their coordinators do too: a write-back is idempotent), and once
/// none is left, the node says so.
async fn drain(
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    seen: &mut Option<Ts>,
) -> Result<()> {
    let m = mediator_of(shared);
    if !m.logging_node() {
        return Ok(());
    }
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    let epoch = tso.ask(node, |reply| TsoMsg::Epoch { reply }).await?;
    if *seen == Some(epoch) {
        return Ok(());
    }
    let logged = m.inflight.settle_before(epoch);
    if !logged.is_empty() {
        tracing::info!(
            commits = logged.len(),
            "Mediator: the TSO restarted; writing back the logged commits it had serialized"
        );
    }
    for (commit, parts) in logged {
        write_back_parts(shared, node, commit, parts).await?;
        logs_done(m, commit);
        m.inflight.done(commit);
    }
    if m.inflight.any_before(epoch) {
        return Ok(());
    }
    tso.send(
        node,
        TsoMsg::Drained {
            node: node.0,
            epoch,
        },
    );
    *seen = Some(epoch);
    Ok(())
}

/// How long a recovered commit's write-back waits before it says in the
/// log that a partition does not answer (it goes on trying).
const SAY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A durable node's restart across processes, before it takes calls: it
/// tells the TSO which of its commits its log holds (the TSO aborts its
/// others: they were never logged, so never written back), asking until
/// the TSO answers. Then, in the background, each logged commit is
/// written back at every partition (remote ones as they come back),
/// logged done and reported committed: until then it stays pending at
/// the TSO, so a snapshot that must see it waits for it.
pub(super) async fn recover(m: &Mediator, shared: &Arc<Shared>, node: brine_core::NodeId) {
    let (Some(logs), Some(tso)) = (&m.logs, &m.tso) else {
        return;
    };
    let resends = logs.take_resends();
    for (commit, _) in &resends {
        m.inflight.resending(*commit);
    }
    let logged: Vec<Ts> = resends.iter().map(|(c, _)| *c).collect();
    let mut pause = std::time::Duration::from_millis(10);
    let started = tokio::time::Instant::now();
    let kept = loop {
        let logged = logged.clone();
        match tso
            .ask(node, |reply| TsoMsg::Restarted {
                node: node.0,
                logged,
                reply,
            })
            .await
        {
            Ok(kept) => break kept,
            Err(e) => {
                if started.elapsed() >= SAY_AFTER {
                    tracing::warn!(
                        "Mediator: telling the TSO of this node's restart: {e}; asking again"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
    };
    if !resends.is_empty() {
        tracing::info!(
            commits = resends.len(),
            "Mediator: writing back the commits this node logged before its restart"
        );
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let m = mediator_of(&shared);
        let finishing = resends.into_iter().map(|(commit, parts)| {
            // The TSO that still holds it knows its start (a restarted
            // TSO holds none: its ring is gone).
            let start = kept.iter().find(|(c, _)| *c == commit).map(|(_, s)| *s);
            let shared = &shared;
            async move {
                let started = tokio::time::Instant::now();
                let mut pause = std::time::Duration::from_millis(10);
                let mut said = false;
                while let Err(e) = write_back_parts(shared, node, commit, parts.clone()).await {
                    if !said && started.elapsed() >= SAY_AFTER {
                        said = true;
                        tracing::warn!(
                            commit,
                            "Mediator: writing back a logged commit: {e}; trying again"
                        );
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                logs_done(m, commit);
                if let (Some(start), Some(tso)) = (start, &m.tso) {
                    tso.send(node, TsoMsg::Committed { commit, start });
                }
                m.inflight.done(commit);
            }
        });
        futures::future::join_all(finishing).await;
    });
}

/// Logs that `commit`'s write-back finished.
pub(super) fn logs_done(m: &Mediator, commit: Ts) {
    if let Some(logs) = &m.logs {
        logs.log_done(commit);
    }
}

/// How many times the helper's patience a commit that no coordinator of
/// this process holds may stay unfinished before the TSO's process aborts
/// it.
const ORPHAN_PATIENCE: u32 = 5;

/// The helper (seed 003 section 2) in the running cluster: a commit the
/// TSO serialized and has not heard the end of for the helper's patience
/// lost its coordinator (the call was dropped, or failed midway). Logged,
/// it is written back again and reported committed; not logged yet, it
/// is abandoned (its coordinator, if it is still there, aborts it) and
/// reported aborted. `stuck`: when each unresolved commit was first seen.
async fn help(
    shared: &Arc<Shared>,
    node: brine_core::NodeId,
    stuck: &mut HashMap<Ts, tokio::time::Instant>,
) -> Result<()> {
    let m = mediator_of(shared);
    let tso = m
        .tso
        .as_ref()
        .ok_or_else(|| Error::Internal("Mediator without its TSO".into()))?;
    let unresolved = tso.ask(node, |reply| TsoMsg::Unresolved { reply }).await?;
    let now = tokio::time::Instant::now();
    stuck.retain(|ts, _| unresolved.iter().any(|(c, _, _)| c == ts));
    for (commit, start, coordinator) in unresolved {
        let first = *stuck.entry(commit).or_insert(now);
        if now.duration_since(first) < m.options.helper_patience {
            continue;
        }
        match m.inflight.resolve(commit) {
            Some(Some(parts)) => {
                if let Err(e) = write_back(m, shared, node, start, commit, parts).await {
                    // A partition out of reach: again at the next pass.
                    tracing::debug!(commit, "Mediator helper: writing back: {e}");
                    continue;
                }
                m.inflight.done(commit);
                shared.counters.protocol.add(HELPER_COMMITTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: finished a logged commit its coordinator left"
                );
            }
            Some(None) => {
                tso.send(node, TsoMsg::Aborted { commit, start });
                shared.counters.protocol.add(HELPER_ABORTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: aborted a commit its coordinator left before logging it"
                );
            }
            // Not in flight here: its end is on its way to the TSO, or
            // (across processes) its coordinator's process is gone with
            // the write set. The TSO's own process gives up on it after
            // a while, so the ring and the snapshots move on; with no
            // log, what it wrote back before it died stays. A node that
            // logs its commits settles its own when it restarts (its log
            // may hold this one: `recover`), so none of its is given up.
            None if tso.local().is_some()
                && !logs_commits(m, coordinator)
                && now.duration_since(first) >= m.options.helper_patience * ORPHAN_PATIENCE =>
            {
                tso.send(node, TsoMsg::Aborted { commit, start });
                shared.counters.protocol.add(HELPER_ABORTED, 1);
                tracing::warn!(
                    commit,
                    "Mediator helper: aborted a commit no coordinator holds (its process is gone?)"
                );
            }
            None => continue,
        }
        stuck.remove(&commit);
    }
    Ok(())
}
