//! Roll-forward after a crash: the accepted BASE transactions that had not
//! finished are run again from their logged contexts.

use std::sync::Arc;

use brine_check::{Op, TxnClass};
use brine_core::NodeId;
use brine_sql::QueryResult;
use parking_lot::Mutex;

use super::base::{run_base, BaseState};
use super::SaltOptions;
use crate::coordinator::{Shared, TxnState};
use crate::procedure::PreparedProc;
use crate::protocol::Call;

/// Rolls forward, after a crash, the accepted BASE transactions that had
/// not finished (seed 000 section 3.4.2): each body is run again with the
/// logged results of its committed subtransactions' statements replayed,
/// not re-executed, and the rest executed live, under the transaction's
/// original owner id (so its contexts and end records stay one). Runs
/// before the cluster accepts new work. When the run records a history,
/// each is recorded with what its committed subtransactions did (logged
/// with their contexts at the partitions: its coordinator may have missed
/// their answers, and a partition may have restarted or moved since), and
/// then what its roll-forward does.
pub(super) async fn roll_forward(
    shared: &Arc<Shared>,
    node: NodeId,
    procedures: &std::collections::HashMap<String, Arc<PreparedProc>>,
    unfinished: Vec<brine_storage::wal::record::BaseContext>,
    opts: SaltOptions,
) {
    let mut tasks = Vec::new();
    for c in unfinished {
        let Some((name, args)) = c.intro.clone() else {
            tracing::error!(owner = %c.owner, "BASE context without its procedure: cannot roll forward");
            continue;
        };
        let Some(proc) = procedures.get(&name).cloned() else {
            tracing::error!(owner = %c.owner, "unknown procedure `{name}`: cannot roll forward");
            continue;
        };
        tracing::info!(
            owner = %c.owner,
            "rolling forward {name}({args:?}) from {} logged statement result(s)",
            c.entries.len()
        );
        let mut recorded = crate::partition::recorded_ops(&c);
        recorded.sort_by_key(Op::sub);
        let mut b = BaseState::new(opts);
        b.accepted = true;
        b.intro = Some(Arc::new((name, args.clone())));
        for e in c.entries {
            b.recovered.entry(e.seq).or_default().push(QueryResult {
                columns: e.columns.into(),
                rows: e.rows,
                affected: e.affected,
            });
        }
        // Its saline locks were lost with the crash; its end record goes
        // to every partition that may hold part of its context.
        b.touched = (0..shared.partitions.len())
            .map(|p| (p, u32::MAX))
            .collect();
        let mut st = TxnState::new(c.owner);
        st.rec = shared.history.as_ref().map(|h| {
            let mut rec = h.begin(Some(&proc.name));
            rec.class = TxnClass::Base;
            rec.ops = std::mem::take(&mut recorded);
            rec
        });
        st.ext = Some(Box::new(b));
        let state = Arc::new(Mutex::new(st));
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let owner = c.owner;
            let call = Call {
                shared: &shared,
                node,
                proc: &proc,
                args,
                on_accept: None,
                session: None,
            };
            match run_base(call, opts, Some(state)).await {
                Ok(_) => tracing::info!(%owner, "BASE transaction rolled forward"),
                Err(e) => {
                    tracing::warn!(%owner, "BASE transaction rolled forward, ending with: {e}")
                }
            }
        }));
    }
    for t in tasks {
        if let Err(e) = t.await {
            tracing::error!("a roll-forward task failed: {e}");
        }
    }
}
