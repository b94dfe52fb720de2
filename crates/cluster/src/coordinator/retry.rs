//! One call's attempts, the same loop for every protocol: a fresh
//! transaction id of the call's age per attempt, the count of its
//! victims, the retry bound and the randomized backoff ([`Retries`]); and
//! the engine's own call, an ACID transaction ([`run_acid`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use brine_core::{AbortCause, Error, Result, TxnId, Value};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

use super::{abort, commit, ProcCtx, RetryPolicy, Shared, TxnState};
use crate::protocol::Call;

/// One call's attempts.
pub struct Retries<'a> {
    shared: &'a Shared,
    attempt: u32,
    /// The call's age: every attempt's id carries it, so a retried
    /// transaction ages and wait-die cannot starve it.
    ts: Option<u64>,
}

impl<'a> Retries<'a> {
    pub fn new(shared: &'a Shared) -> Self {
        Retries {
            shared,
            attempt: 0,
            ts: None,
        }
    }

    /// Begins the next attempt; its number (from 1).
    pub fn begin(&mut self) -> u32 {
        self.attempt += 1;
        self.attempt
    }

    /// The attempt just begun goes on instead (it did not end: Salt's
    /// failed commit round, handled as a victim on its next turn).
    pub fn resume(&mut self) {
        self.attempt -= 1;
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether another attempt is allowed after this one.
    pub fn within_bound(&self) -> bool {
        self.attempt < self.shared.retry.max_attempts
    }

    /// A fresh transaction id of the call's age, for the attempt.
    pub fn new_txn(&mut self) -> TxnId {
        let txn = self.shared.new_txn(self.ts);
        self.ts = Some(txn.ts);
        txn
    }

    /// The attempt was a concurrency-control victim (`cause`): counts it
    /// and, within the retry bound, backs off before the next attempt
    /// (`seed`: the attempt's id, which draws its wait); past the bound,
    /// the error the call ends with.
    pub async fn victim(&self, cause: AbortCause, seed: u64) -> Result<()> {
        self.shared.counters.count_abort(cause);
        if !self.within_bound() {
            return Err(Error::RetriesExhausted {
                attempts: self.attempt,
                last: cause,
            });
        }
        self.shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        backoff(&self.shared.retry, self.attempt, self.shared.seed ^ seed).await;
        Ok(())
    }

    /// A victim part of a call that can no longer give up (a piece after
    /// a committed one, a subtransaction of an accepted BASE transaction),
    /// run again for the `n`th time: counts it and backs off, unbounded.
    pub async fn rerun(shared: &Shared, cause: AbortCause, n: u32, seed: u64) {
        shared.counters.count_abort(cause);
        shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        backoff(&shared.retry, n, shared.seed ^ seed).await;
    }

    /// The call committed at this attempt: counts it, tells whoever waits
    /// for acceptance, and makes the call's outcome.
    pub fn committed(
        &self,
        txn: TxnId,
        procedure: &str,
        values: Vec<Value>,
        on_accept: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> CallOutcome {
        let attempt = self.attempt;
        tracing::debug!(%txn, procedure, attempt, "committed");
        self.shared.counters.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = on_accept {
            let _ = tx.send(());
        }
        CallOutcome {
            values,
            attempts: attempt,
        }
    }

    /// The call ended with the body's own error (a user abort).
    pub fn failed(&self, e: &Error) {
        if matches!(e, Error::UserAbort(_)) {
            self.shared
                .counters
                .user_aborts
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs a call as the engine's ACID transaction: attempts, retries of
/// concurrency-control victims (bounded, with backoff), commit.
pub async fn run_acid(call: Call<'_>) -> Result<CallOutcome> {
    let Call {
        shared,
        node,
        proc,
        args,
        on_accept,
        ..
    } = call;
    let mut tries = Retries::new(shared);
    loop {
        let attempt = tries.begin();
        let txn = tries.new_txn();
        let state = Arc::new(Mutex::new(TxnState::begin(shared, txn, Some(proc))));
        let ctx = ProcCtx::new(shared.clone(), node, Some(proc.clone()), state.clone());
        let body_result = (proc.body)(ctx, args.clone()).await;
        let doomed = state.lock().doomed;
        let cause = match (body_result, doomed) {
            (Ok(values), None) => match commit(shared, node, &state).await {
                Ok(()) => return Ok(tries.committed(txn, &proc.name, values, on_accept)),
                Err(Error::Aborted(cause)) => cause,
                Err(e) => return Err(e),
            },
            (_, Some(cause)) => {
                abort(shared, node, &state).await;
                cause
            }
            (Err(e), None) => {
                abort(shared, node, &state).await;
                tracing::debug!(%txn, procedure = %proc.name, attempt, "aborted: {e}");
                shared.counters.user_aborts.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        tracing::debug!(%txn, procedure = %proc.name, attempt, cause = cause.as_str(), "concurrency-control abort");
        tries.victim(cause, txn.id).await?;
    }
}

pub async fn backoff(policy: &RetryPolicy, attempt: u32, seed: u64) {
    if attempt <= 1 {
        tokio::task::yield_now().await;
        return;
    }
    let exp = policy
        .backoff_base
        .saturating_mul(1u32 << (attempt - 2).min(16))
        .min(policy.backoff_max);
    // The attempt goes into the draw: callers that retry under one id (a
    // chopped transaction's piece, an accepted BASE transaction's
    // subtransaction) would otherwise draw the same fraction every time.
    let draw = seed ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let wait = SmallRng::seed_from_u64(draw).gen_range(Duration::ZERO..=exp);
    tokio::time::sleep(wait).await;
}

/// A completed call: the procedure's result and how many attempts it took.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    pub values: Vec<Value>,
    pub attempts: u32,
}
