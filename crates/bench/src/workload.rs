//! The contract between the driver and a workload.
//!
//! ```text
//!  driver, per measured point (fresh cluster, fresh data):
//!    Cluster::start(config, workload.application())
//!    workload.load(&cluster)            -- initial data; resets run counters
//!      (or, on a running cluster that holds the data already:
//!       workload.reuse(&cluster)        -- resets run counters; then, with
//!       workload.check(&cluster)           --check, the data is checked first)
//!    for each client i: workload.client(i, seeded rng) -> ClientGen
//!        loop { req = gen.next(); outcome = call(req); gen.observe(..) }
//!          (or, if gen.defer(req) = Some(q): hand req to queue q, go on)
//!    for each deferred queue q: a worker calls its requests in order
//!    workload.check(&cluster)           -- with --check: invariants hold?
//!    workload.metrics()                 -- workload-specific counters
//! ```
//!
//! A workload never times anything and never decides when to stop: the
//! driver owns the clock. It owns what is called, with which arguments, and
//! what a correct outcome is.

use std::future::Future;
use std::pin::Pin;

use brine_cluster::{Application, CallOutcome, Cluster};
use brine_core::Value;
use rand::rngs::SmallRng;
use serde_json::{Map, Value as Json};

use crate::error::Result;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One transaction a client is about to run.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnRequest {
    pub procedure: &'static str,
    pub args: Vec<Value>,
}

/// A closed-loop client's source of transactions. Owned by one client task;
/// its randomness comes only from the RNG it was created with, so a run's
/// request streams are reproducible from the seed.
pub trait ClientGen: Send {
    /// The next transaction to run.
    fn next(&mut self) -> TxnRequest;

    /// Sees the outcome of the call just made (every call, warm-up
    /// included), e.g. to check a read against an invariant.
    fn observe(&mut self, _procedure: &'static str, _outcome: &brine_core::Result<CallOutcome>) {}

    /// The queue this request is handed to instead of being run by this
    /// client (TPC-C clause 2.7's deferred delivery), or `None` to run it
    /// here. Queue numbers are below `Workload::deferred_queues`.
    fn defer(&self, _request: &TxnRequest) -> Option<usize> {
        None
    }

    /// The calls a deferred request's worker makes for it, concurrently
    /// (TPC-C clause 2.7.4.2 lets delivery commit one district at a time).
    /// The worker (which owns a generator of its own,
    /// used only for this and `observe`) records one call of the request's procedure when all have
    /// ended: values concatenated, attempts the largest. Default: the
    /// request itself.
    fn split_deferred(&self, request: &TxnRequest) -> Vec<TxnRequest> {
        vec![request.clone()]
    }
}

/// A benchmark workload: schema, procedures, data and request mix.
pub trait Workload: Send + Sync {
    /// The name used on the command line and in reports (`micro`, `bank`).
    fn name(&self) -> &'static str;

    /// Parameters of this workload instance (`{"rows": 1000}`), copied into
    /// the report's `config` and into every result row.
    fn params(&self) -> Map<String, Json>;

    /// Procedure names and the share of the mix each gets, for the report.
    fn mix(&self) -> Vec<(&'static str, f64)>;

    /// The schema and procedures.
    fn application(&self) -> Application;

    /// Loads the initial data into a freshly started cluster. Called once
    /// per measured point; also starts a new run, so run counters reset here.
    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>>;

    /// Starts a run on the data the cluster already holds instead of
    /// loading it (`brine bench --cluster` with `--load if-empty` finding
    /// the tables full, or `--load never`): resets the run counters as
    /// `load` does. The data an earlier run left must be valid input for
    /// this run's requests and its check; a workload that cannot promise
    /// that (a check counting this run's commits, keys it inserts that a
    /// second run would insert again) refuses, which is the default.
    fn reuse<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        let name = self.name();
        Box::pin(async move {
            Err(crate::BenchError::Config(format!(
                "workload `{name}` cannot run on data an earlier run left (its requests or its \
                 check assume the data its own load wrote): run it on a cluster with empty tables \
                 (e.g. `brine cluster up` on a new --dir)"
            )))
        })
    }

    /// The transaction source of client `index`.
    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen>;

    /// Refuses a client count the workload cannot serve (e.g. more
    /// sessions than customers), before the cluster starts. Default: any.
    fn validate_clients(&self, _clients: u32) -> Result<()> {
        Ok(())
    }

    /// Checks the workload's invariants after the run, once every client
    /// has stopped. The default checks nothing.
    fn check<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// How many deferred-execution queues the driver runs (each served, in
    /// order, by one worker of its own); 0 when no request is deferred.
    /// A client hands a deferred request over and goes on at once; the
    /// worker's call is recorded with its latency counted from the hand-over.
    fn deferred_queues(&self) -> usize {
        0
    }

    /// The routes `elia` runs this workload's procedures by, when none are
    /// given (`--elia-routes`). Default: what operation partitioning
    /// chooses for the application, each procedure weighted by its share
    /// of the mix (`None` if the analysis cannot run on it).
    fn elia_routes(&self) -> Option<brine_cluster::protocols::elia::Routes> {
        let app = self.application();
        let weights = self
            .mix()
            .into_iter()
            .map(|(name, w)| (name.to_string(), w))
            .collect();
        brine_cluster::protocols::elia::Routes::analyzed(
            &app.name,
            &app.ddl,
            &app.procedures,
            &weights,
        )
        .map_err(|e| tracing::warn!("{e}"))
        .ok()
    }

    /// Workload-specific counters of the current run, for the report.
    fn metrics(&self) -> Map<String, Json> {
        Map::new()
    }
}
