//! A ticketing workload modelled on the sources' description of Fusion
//! Ticket (seed 000 sections 3.6 and 4.6, seed 001 section 8, seed 002
//! section 7): one event, two categories of 10,000 seats each, the eleven
//! transactions of booking a ticket with one administrative (delete-order),
//! and a create-order ("checkout") whose instances contend on the counters
//! every order updates. It is not a port of Fusion Ticket (whose code is not
//! here): docs/workloads/ticketing.md says what is modelled and what is
//! invented.
//!
//! ```text
//!  client session (session.rs)           procedures (procedures.rs)
//!   browse -> view event -> log in  ---->  point / prefix reads
//!   -> list free seats -> reserve   ---->  seats free -> held, cart filled
//!   -> view cart -> create order    ---->  order + items, seats held -> sold,
//!                                          category_counters, event_counters  <- hot
//!   -> pay -> issue tickets -> view  ---->  payment, tickets
//!   (every delete_batch orders) delete ->  seats sold -> free, counters restored
//!  after the run (check.rs): every seat in exactly one state and place,
//!  counters = seat counts, payments = order totals, tickets = seats
//! ```
//!
//! Schema and partitioning: schema.rs.

pub mod check;
pub mod procedures;
pub mod schema;
pub mod session;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use brine_cluster::{Application, Cluster};
use rand::rngs::SmallRng;
use serde_json::{json, Map, Value as Json};

use crate::error::{BenchError, Result};
use crate::workload::{BoxFuture, ClientGen, Workload};
use crate::workloads::base::BaseSet;

pub use check::Snapshot;
pub use schema::Hall;

pub const DEFAULT_SEATS_PER_CATEGORY: u64 = 10_000;
pub const MAX_SEATS_PER_CATEGORY: u64 = 10_000_000;
pub const DEFAULT_CUSTOMERS: u64 = 10_000;
pub const MAX_CUSTOMERS: u64 = 10_000_000;
/// Share of filled carts abandoned after viewing them, in percent.
pub const DEFAULT_ABANDON_PERCENT: u32 = 15;
/// Finished orders a client collects before deleting them in one call.
pub const DEFAULT_DELETE_BATCH: u32 = 8;
/// Share of finished orders the box office deletes, in percent (all: the
/// hall stays in a steady state; fewer: it fills, and the run must end
/// before it is sold out).
pub const DEFAULT_DELETE_PERCENT: u32 = 100;

/// The workload's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TicketParams {
    pub seats_per_category: u64,
    pub customers: u64,
    pub abandon_percent: u32,
    pub delete_batch: u32,
    pub delete_percent: u32,
}

impl Default for TicketParams {
    fn default() -> Self {
        TicketParams {
            seats_per_category: DEFAULT_SEATS_PER_CATEGORY,
            customers: DEFAULT_CUSTOMERS,
            abandon_percent: DEFAULT_ABANDON_PERCENT,
            delete_batch: DEFAULT_DELETE_BATCH,
            delete_percent: DEFAULT_DELETE_PERCENT,
        }
    }
}

impl TicketParams {
    pub fn hall(&self) -> Hall {
        Hall {
            seats_per_category: self.seats_per_category,
        }
    }
}

/// Counters of the current run, shared by the sessions.
#[derive(Default)]
pub struct RunCounters {
    sessions: AtomicU64,
    look_only: AtomicU64,
    carts_filled: AtomicU64,
    carts_abandoned: AtomicU64,
    seat_taken: AtomicU64,
    gave_up_reserving: AtomicU64,
    orders_created: AtomicU64,
    orders_paid: AtomicU64,
    orders_ticketed: AtomicU64,
    orders_deleted: AtomicU64,
    delete_calls: AtomicU64,
    unexpected_aborts: AtomicU64,
    first_unexpected: Mutex<Vec<String>>,
}

impl RunCounters {
    fn reset(&self) {
        for c in [
            &self.sessions,
            &self.look_only,
            &self.carts_filled,
            &self.carts_abandoned,
            &self.seat_taken,
            &self.gave_up_reserving,
            &self.orders_created,
            &self.orders_paid,
            &self.orders_ticketed,
            &self.orders_deleted,
            &self.delete_calls,
            &self.unexpected_aborts,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        if let Ok(mut v) = self.first_unexpected.lock() {
            v.clear();
        }
    }
}

pub struct Ticket {
    params: TicketParams,
    base: BaseSet,
    run: Arc<RunCounters>,
}

impl Ticket {
    pub fn new(params: TicketParams) -> Result<Ticket> {
        let p = &params;
        if !(procedures::MAX_SEATS_PER_CART as u64..=MAX_SEATS_PER_CATEGORY)
            .contains(&p.seats_per_category)
        {
            return Err(BenchError::Config(format!(
                "--seats (per category) must be between {} and {MAX_SEATS_PER_CATEGORY}",
                procedures::MAX_SEATS_PER_CART
            )));
        }
        if !(1..=MAX_CUSTOMERS).contains(&p.customers) {
            return Err(BenchError::Config(format!(
                "--customers must be between 1 and {MAX_CUSTOMERS}"
            )));
        }
        if p.abandon_percent > 100 {
            return Err(BenchError::Config(
                "--abandon-percent must be between 0 and 100".into(),
            ));
        }
        if p.delete_percent > 100 {
            return Err(BenchError::Config(
                "--delete-percent must be between 0 and 100".into(),
            ));
        }
        if !(1..=procedures::MAX_DELETE_BATCH as u32).contains(&p.delete_batch) {
            return Err(BenchError::Config(format!(
                "the delete batch must be between 1 and {}",
                procedures::MAX_DELETE_BATCH
            )));
        }
        Ok(Ticket {
            params,
            base: BaseSet::of(&[procedures::CREATE_ORDER]),
            run: Arc::new(RunCounters::default()),
        })
    }

    /// Which procedures are BASE under Salt (default: create_order, as in
    /// the sources; `BaseSet::none()` for the all-ACID application).
    pub fn with_base(mut self, base: BaseSet) -> Ticket {
        self.base = base;
        self
    }

    /// Reads every table and checks the invariants (also `Workload::check`).
    pub async fn verify(&self, cluster: &Cluster) -> Result<()> {
        let unexpected = self.run.unexpected_aborts.load(Ordering::Relaxed);
        if unexpected > 0 {
            let quoted = self
                .run
                .first_unexpected
                .lock()
                .map(|v| v.join("; "))
                .unwrap_or_default();
            return Err(BenchError::Invariant(format!(
                "ticket: {unexpected} call(s) failed in a way the booking flow never should (first: {quoted})"
            )));
        }
        Snapshot::read(cluster).await?.verify(self.params.hall())
    }
}

impl Workload for Ticket {
    fn name(&self) -> &'static str {
        "ticket"
    }

    fn params(&self) -> Map<String, Json> {
        let p = &self.params;
        let mut m = Map::new();
        m.insert("seats_per_category".into(), json!(p.seats_per_category));
        m.insert("categories".into(), json!(schema::CATEGORIES.len()));
        m.insert("customers".into(), json!(p.customers));
        m.insert("abandon_percent".into(), json!(p.abandon_percent));
        m.insert("delete_batch".into(), json!(p.delete_batch));
        m.insert("delete_percent".into(), json!(p.delete_percent));
        m.insert("base".into(), json!(self.base.label()));
        m
    }

    /// Expected calls per session from the session model's probabilities
    /// (ignoring the rare re-listings after a lost seat), as shares.
    fn mix(&self) -> Vec<(&'static str, f64)> {
        use procedures::*;
        let look = f64::from(session::LOOK_ONLY_PERCENT) / 100.0;
        let reserve = 1.0 - look;
        let create = reserve * (1.0 - f64::from(self.params.abandon_percent) / 100.0);
        let delete = create * f64::from(self.params.delete_percent)
            / 100.0
            / f64::from(self.params.delete_batch);
        let per_session = [
            (BROWSE_EVENTS, 1.0),
            (VIEW_EVENT, 1.0),
            (LOOKUP_CUSTOMER, 1.0),
            (LIST_FREE_SEATS, 1.0),
            (RESERVE_SEATS, reserve),
            (VIEW_CART, reserve),
            (CREATE_ORDER, create),
            (PAY, create),
            (ISSUE_TICKETS, create),
            (VIEW_ORDER, create),
            (DELETE_ORDER, delete),
        ];
        let total: f64 = per_session.iter().map(|(_, n)| n).sum();
        per_session
            .into_iter()
            .map(|(p, n)| (p, (n / total * 10_000.0).round() / 10_000.0))
            .collect()
    }

    fn application(&self) -> Application {
        Application {
            name: "ticket".into(),
            ddl: schema::DDL.into(),
            procedures: procedures::procedures(&self.base),
        }
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.run.reset();
            schema::load(cluster, self.params.hall(), self.params.customers).await
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(session::Session::new(
            index,
            rng,
            self.params,
            self.run.clone(),
        ))
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.verify(cluster))
    }

    fn metrics(&self) -> Map<String, Json> {
        let r = &self.run;
        let mut m = Map::new();
        for (k, c) in [
            ("sessions", &r.sessions),
            ("look_only", &r.look_only),
            ("carts_filled", &r.carts_filled),
            ("carts_abandoned", &r.carts_abandoned),
            ("seat_taken", &r.seat_taken),
            ("gave_up_reserving", &r.gave_up_reserving),
            ("orders_created", &r.orders_created),
            ("orders_paid", &r.orders_paid),
            ("orders_ticketed", &r.orders_ticketed),
            ("orders_deleted", &r.orders_deleted),
            ("delete_calls", &r.delete_calls),
            ("unexpected_aborts", &r.unexpected_aborts),
        ] {
            m.insert(k.into(), json!(c.load(Ordering::Relaxed)));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_sums_to_one_and_create_order_is_a_minority() -> Result<()> {
        let w = Ticket::new(TicketParams::default())?;
        let mix = w.mix();
        assert_eq!(mix.len(), 11);
        let sum: f64 = mix.iter().map(|m| m.1).sum();
        assert!((sum - 1.0).abs() < 1e-3, "{sum}");
        let create = mix
            .iter()
            .find(|m| m.0 == procedures::CREATE_ORDER)
            .map_or(0.0, |m| m.1);
        assert!((0.05..0.15).contains(&create), "{create}");
        Ok(())
    }

    #[test]
    fn rejects_bad_options() {
        let bad = |f: fn(&mut TicketParams)| {
            let mut p = TicketParams::default();
            f(&mut p);
            Ticket::new(p).is_err()
        };
        assert!(bad(|p| p.seats_per_category = 1));
        assert!(bad(|p| p.customers = 0));
        assert!(bad(|p| p.abandon_percent = 101));
        assert!(bad(|p| p.delete_percent = 101));
        assert!(bad(|p| p.delete_batch = 0));
        assert!(bad(|p| p.delete_batch = 1000));
        assert!(Ticket::new(TicketParams::default()).is_ok());
    }
}
