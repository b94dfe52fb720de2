//! Interactive transactions of remote clients (`WireRequest::Begin` ..
//! `Commit`/`Abort`), kept by session id and aborted when idle too long.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use brine_core::{Error, Result};

use crate::client::Txn;
use crate::cluster::Cluster;

/// At most this many interactive transactions open per node.
const SESSIONS_MAX: usize = 10_000;
/// An interactive transaction idle this long is aborted.
pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Interactive transactions of remote clients, by session id. A session's
/// transaction is taken out while a statement runs, so a second concurrent
/// statement of the same session is refused instead of interleaved.
#[derive(Default)]
pub(super) struct Sessions {
    open: parking_lot::Mutex<HashMap<u64, Session>>,
    next: std::sync::atomic::AtomicU64,
}

struct Session {
    txn: Option<Txn>,
    last_used: Instant,
}

impl Sessions {
    pub(super) fn begin(&self, cluster: &Cluster) -> Result<u64> {
        let mut open = self.open.lock();
        if open.len() >= SESSIONS_MAX {
            return Err(Error::Bound(format!(
                "{SESSIONS_MAX} interactive transactions are open on this node; commit or abort some first"
            )));
        }
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        open.insert(
            id,
            Session {
                txn: Some(cluster.client().begin()),
                last_used: Instant::now(),
            },
        );
        Ok(id)
    }

    pub(super) fn take(&self, id: u64) -> Result<Txn> {
        let mut open = self.open.lock();
        let s = open.get_mut(&id).ok_or_else(|| unknown_session(id))?;
        s.last_used = Instant::now();
        s.txn.take().ok_or_else(|| {
            Error::TxnState(format!(
                "session {id} is already running a statement; wait for its answer"
            ))
        })
    }

    pub(super) fn put_back(&self, id: u64, txn: Txn) {
        if let Some(s) = self.open.lock().get_mut(&id) {
            s.last_used = Instant::now();
            s.txn = Some(txn);
        }
        // Reaped meanwhile: dropping the transaction aborts it.
    }

    pub(super) fn end(&self, id: u64) -> Result<Txn> {
        let mut open = self.open.lock();
        match open.get_mut(&id) {
            None => Err(unknown_session(id)),
            Some(s) if s.txn.is_none() => Err(Error::TxnState(format!(
                "session {id} is running a statement; wait for its answer"
            ))),
            Some(_) => open
                .remove(&id)
                .and_then(|s| s.txn)
                .ok_or_else(|| unknown_session(id)),
        }
    }

    pub(super) fn reap(&self) -> usize {
        let mut open = self.open.lock();
        let before = open.len();
        // Dropping an idle session's transaction aborts it.
        open.retain(|_, s| s.txn.is_none() || s.last_used.elapsed() < SESSION_IDLE_TIMEOUT);
        before - open.len()
    }

    pub(super) fn open(&self) -> usize {
        self.open.lock().len()
    }
}

fn unknown_session(id: u64) -> Error {
    Error::TxnState(format!(
        "no open transaction with session {id} (it ended, or was aborted after {} s idle)",
        SESSION_IDLE_TIMEOUT.as_secs()
    ))
}
