//! A client's booking session: a state machine walked one call at a time
//! (`next` issues the current step, `observe` moves to the next one,
//! carrying the customer, seats, cart and order ids between calls).
//!
//! ```text
//!  [delete_order(batch)]  when `delete_batch` finished orders are waiting
//!        v
//!  browse_events -> view_event -> lookup_customer -> list_free_seats
//!        ^                                            |  10%: just looking -> end
//!        |                      too few seats / taken |  (re-list, at most 3 times)
//!        |                                            v
//!        |        end <- abandon (p) <- view_cart <- reserve_seats
//!        |                                  v
//!        +--- end <- view_order <- issue_tickets <- pay <- create_order
//! ```
//!
//! Choices: the customer is uniform over the customers; the category is
//! uniform over the two; seats wanted 1 (25%), 2 (45%), 3 (15%), 4 (15%);
//! the listing starts at a uniform seat of the category and the visitor
//! takes the first seats it shows. An abandoned cart keeps its seats held
//! until this client's next reservation replaces it (the cart belongs to
//! the visitor's browser session, as a shop's cart does). Every finished
//! order (whatever step the session reached after create-order) joins a
//! queue; once `delete_batch` are queued, the client acts as the box
//! office and deletes them in one delete_order before its next session.
//! That keeps the hall in a steady state (see docs/workloads/ticketing.md).
//!
//! Cart and order ids are made by the client (`(client + 1) << 32 | seq`),
//! standing in for the auto-increment ids of the original application,
//! which hold no lock until commit.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use brine_cluster::CallOutcome;
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;

use super::procedures::{
    BROWSE_EVENTS, CREATE_ORDER, DELETE_ORDER, ISSUE_TICKETS, LIST_FREE_SEATS, LOOKUP_CUSTOMER,
    PAY, RESERVE_SEATS, SEAT_TAKEN, VIEW_CART, VIEW_EVENT, VIEW_ORDER,
};
use super::schema::{customer_email, money, Hall, CATEGORIES, EVENT_ID};
use super::{RunCounters, TicketParams};
use crate::workload::{ClientGen, TxnRequest};

/// Share of sessions, in percent, that list seats and leave.
pub const LOOK_ONLY_PERCENT: u32 = 10;
/// Seats wanted: cumulative percent thresholds for 1, 2, 3 and 4 seats.
const SEATS_WANTED_CUMULATIVE: [(u32, usize); 4] = [(25, 1), (70, 2), (85, 3), (100, 4)];
/// Mean seats wanted, for the documented mix.
pub const MEAN_SEATS_WANTED: f64 = 0.25 + 0.45 * 2.0 + 0.15 * 3.0 + 0.15 * 4.0;
/// Listings a session tries before it gives up on reserving.
const MAX_LISTINGS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    DeleteOrders,
    Browse,
    ViewEvent,
    Login,
    ListSeats,
    Reserve,
    ViewCart,
    CreateOrder,
    Pay,
    IssueTickets,
    ViewOrder,
}

pub struct Session {
    rng: SmallRng,
    params: TicketParams,
    hall: Hall,
    run: Arc<RunCounters>,
    /// `(client + 1) << 32`: the high bits of this client's ids.
    id_base: i64,
    next_seq: i64,
    step: Step,
    // The current session.
    customer: i64,
    category: usize,
    wanted: usize,
    listings: u32,
    offered: Vec<i64>,
    cart: Option<i64>,
    order: Option<(i64, i64)>,
    // Across sessions.
    stale_cart: Option<i64>,
    finished_orders: Vec<i64>,
}

impl Session {
    pub fn new(index: u32, rng: SmallRng, params: TicketParams, run: Arc<RunCounters>) -> Self {
        let mut s = Session {
            rng,
            hall: params.hall(),
            params,
            run,
            id_base: (i64::from(index) + 1) << 32,
            next_seq: 0,
            step: Step::Browse,
            customer: 0,
            category: 0,
            wanted: 1,
            listings: 0,
            offered: Vec::new(),
            cart: None,
            order: None,
            stale_cart: None,
            finished_orders: Vec::new(),
        };
        s.start_session();
        s
    }

    fn fresh_id(&mut self) -> i64 {
        self.next_seq += 1;
        self.id_base | self.next_seq
    }

    fn start_session(&mut self) {
        self.run.sessions.fetch_add(1, Ordering::Relaxed);
        self.customer = self.rng.gen_range(1..=self.params.customers as i64);
        self.category = self.rng.gen_range(0..CATEGORIES.len());
        let roll = self.rng.gen_range(0..100);
        self.wanted = SEATS_WANTED_CUMULATIVE
            .iter()
            .find(|(p, _)| roll < *p)
            .map_or(1, |&(_, n)| n);
        self.listings = 0;
        self.offered.clear();
        self.cart = None;
        self.order = None;
        self.step = Step::Browse;
    }

    fn end_session(&mut self) {
        if self.finished_orders.len() >= self.params.delete_batch as usize {
            self.step = Step::DeleteOrders;
        } else {
            self.start_session();
        }
    }

    fn unexpected(&self, procedure: &str, e: &Error) {
        self.run.unexpected_aborts.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut q) = self.run.first_unexpected.lock() {
            if q.len() < 3 {
                q.push(format!("{procedure}: {e}"));
            }
        }
    }

    /// Re-lists seats, or ends the session after too many listings.
    fn list_again(&mut self) {
        if self.listings < MAX_LISTINGS {
            self.step = Step::ListSeats;
        } else {
            self.run.gave_up_reserving.fetch_add(1, Ordering::Relaxed);
            self.end_session();
        }
    }

    fn finish_order(&mut self) {
        if let Some((order, _)) = self.order.take() {
            if self.rng.gen_range(0..100) < self.params.delete_percent {
                self.finished_orders.push(order);
            }
        }
        self.end_session();
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_int)
}

impl ClientGen for Session {
    fn next(&mut self) -> TxnRequest {
        let (procedure, args) = match self.step {
            Step::DeleteOrders => {
                let mut args = vec![Value::Int(EVENT_ID)];
                args.extend(self.finished_orders.iter().map(|&o| Value::Int(o)));
                (DELETE_ORDER, args)
            }
            Step::Browse => (BROWSE_EVENTS, vec![]),
            Step::ViewEvent => (VIEW_EVENT, vec![Value::Int(EVENT_ID)]),
            Step::Login => (
                LOOKUP_CUSTOMER,
                vec![Value::str(&customer_email(self.customer))],
            ),
            Step::ListSeats => {
                self.listings += 1;
                let first = self.hall.first_seat(self.category);
                let from = first + self.rng.gen_range(0..self.hall.seats_per_category as i64);
                (
                    LIST_FREE_SEATS,
                    vec![Value::Int(CATEGORIES[self.category].id), Value::Int(from)],
                )
            }
            Step::Reserve => {
                let cart = self.fresh_id();
                self.cart = Some(cart);
                let mut args = vec![
                    Value::Int(cart),
                    Value::Int(self.customer),
                    Value::Int(EVENT_ID),
                    Value::Int(CATEGORIES[self.category].id),
                    Value::Int(self.stale_cart.unwrap_or(0)),
                ];
                args.extend(
                    self.offered
                        .iter()
                        .take(self.wanted)
                        .map(|&s| Value::Int(s)),
                );
                (RESERVE_SEATS, args)
            }
            Step::ViewCart => (VIEW_CART, vec![Value::Int(self.cart.unwrap_or(0))]),
            Step::CreateOrder => {
                let order = self.fresh_id();
                self.order = Some((order, 0));
                (
                    CREATE_ORDER,
                    vec![
                        Value::Int(self.cart.unwrap_or(0)),
                        Value::Int(order),
                        Value::Int(self.customer),
                        Value::Int(EVENT_ID),
                    ],
                )
            }
            Step::Pay => {
                let (order, total) = self.order.unwrap_or((0, 0));
                (PAY, vec![Value::Int(order), money(total)])
            }
            Step::IssueTickets => (
                ISSUE_TICKETS,
                vec![Value::Int(self.order.map_or(0, |o| o.0))],
            ),
            Step::ViewOrder => (VIEW_ORDER, vec![Value::Int(self.order.map_or(0, |o| o.0))]),
        };
        TxnRequest { procedure, args }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        let r = &self.run;
        let values = match outcome {
            Ok(o) => Some(&o.values),
            Err(Error::UserAbort(reason)) if reason.starts_with(SEAT_TAKEN) => {
                r.seat_taken.fetch_add(1, Ordering::Relaxed);
                None
            }
            // Gave up after the retry bound: the call did nothing.
            Err(Error::RetriesExhausted { .. }) => None,
            Err(e) => {
                self.unexpected(procedure, e);
                None
            }
        };
        match (self.step, values) {
            (Step::DeleteOrders, Some(v)) => {
                r.orders_deleted
                    .fetch_add(self.finished_orders.len() as u64, Ordering::Relaxed);
                r.delete_calls.fetch_add(1, Ordering::Relaxed);
                let _ = v;
                self.finished_orders.clear();
                self.start_session();
            }
            (Step::DeleteOrders, None) => {
                // An unexpected answer would repeat forever: drop the batch
                // (the abort was counted and fails --check). A call that
                // gave up is tried again after the next session.
                if !matches!(outcome, Err(Error::RetriesExhausted { .. })) {
                    self.finished_orders.clear();
                }
                self.start_session();
            }
            (Step::Browse, Some(_)) => self.step = Step::ViewEvent,
            (Step::ViewEvent, Some(_)) => self.step = Step::Login,
            (Step::Login, Some(v)) => match int(v.first()) {
                Some(id) => {
                    self.customer = id;
                    self.step = Step::ListSeats;
                }
                None => self.end_session(),
            },
            (Step::ListSeats, Some(v)) => {
                if self.listings == 1 && self.rng.gen_range(0..100) < LOOK_ONLY_PERCENT {
                    r.look_only.fetch_add(1, Ordering::Relaxed);
                    self.end_session();
                    return;
                }
                self.offered = v.iter().filter_map(Value::as_int).collect();
                if self.offered.len() >= self.wanted {
                    self.step = Step::Reserve;
                } else {
                    self.list_again();
                }
            }
            (Step::ListSeats, None) => self.list_again(),
            (Step::Reserve, Some(_)) => {
                self.stale_cart = None;
                r.carts_filled.fetch_add(1, Ordering::Relaxed);
                self.step = Step::ViewCart;
            }
            (Step::Reserve, None) => {
                self.cart = None;
                self.list_again();
            }
            (Step::ViewCart, Some(_)) => {
                if self.rng.gen_range(0..100) < self.params.abandon_percent {
                    r.carts_abandoned.fetch_add(1, Ordering::Relaxed);
                    self.stale_cart = self.cart.take();
                    self.end_session();
                } else {
                    self.step = Step::CreateOrder;
                }
            }
            (Step::CreateOrder, Some(v)) => {
                r.orders_created.fetch_add(1, Ordering::Relaxed);
                let total = v
                    .get(2)
                    .and_then(Value::as_decimal)
                    .and_then(|d| d.units_at(2));
                match (self.order, total) {
                    (Some((order, _)), Some(total)) => {
                        self.order = Some((order, total));
                        self.cart = None;
                        self.step = Step::Pay;
                    }
                    _ => self.end_session(),
                }
            }
            (Step::CreateOrder, None) | (Step::ViewCart, None) => {
                // The cart is still there: it is stale now.
                self.order = None;
                self.stale_cart = self.cart.take();
                self.end_session();
            }
            (Step::Pay, Some(_)) => {
                r.orders_paid.fetch_add(1, Ordering::Relaxed);
                self.step = Step::IssueTickets;
            }
            (Step::IssueTickets, Some(_)) => {
                r.orders_ticketed.fetch_add(1, Ordering::Relaxed);
                self.step = Step::ViewOrder;
            }
            (Step::Pay | Step::IssueTickets | Step::ViewOrder, _) => self.finish_order(),
            (Step::Browse | Step::ViewEvent | Step::Login, None) => self.end_session(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::ticket::procedures::LIST_LIMIT;
    use crate::workloads::ticket::Ticket;
    use crate::Workload;
    use rand::SeedableRng;

    fn ok(values: Vec<Value>) -> brine_core::Result<CallOutcome> {
        Ok(CallOutcome {
            values,
            attempts: 1,
        })
    }

    /// Answers every call as a cooperative server would, and returns the
    /// procedures called in order.
    fn walk(s: &mut dyn ClientGen, calls: usize) -> Vec<&'static str> {
        let mut seen = Vec::new();
        for _ in 0..calls {
            let req = s.next();
            let values = match req.procedure {
                LOOKUP_CUSTOMER => vec![Value::Int(7)],
                LIST_FREE_SEATS => (0..LIST_LIMIT).map(Value::Int).collect(),
                CREATE_ORDER => vec![req.args[1].clone(), Value::Int(2), money(16_000)],
                _ => vec![],
            };
            seen.push(req.procedure);
            s.observe(req.procedure, &ok(values));
        }
        seen
    }

    #[test]
    fn sessions_walk_the_booking_flow_and_delete_in_batches() -> crate::Result<()> {
        let w = Ticket::new(TicketParams {
            abandon_percent: 0,
            delete_batch: 2,
            ..TicketParams::default()
        })?;
        let mut s = w.client(0, SmallRng::seed_from_u64(3));
        let seen = walk(s.as_mut(), 400);
        assert_eq!(&seen[..3], &[BROWSE_EVENTS, VIEW_EVENT, LOOKUP_CUSTOMER]);
        // A completed session runs the eleven steps in order.
        let full = [
            BROWSE_EVENTS,
            VIEW_EVENT,
            LOOKUP_CUSTOMER,
            LIST_FREE_SEATS,
            RESERVE_SEATS,
            VIEW_CART,
            CREATE_ORDER,
            PAY,
            ISSUE_TICKETS,
            VIEW_ORDER,
        ];
        assert!(seen.windows(full.len()).any(|w| w == full), "{seen:?}");
        let creates = seen.iter().filter(|p| **p == CREATE_ORDER).count();
        let deletes = seen.iter().filter(|p| **p == DELETE_ORDER).count();
        assert!(creates > 10, "{creates}");
        assert!(
            deletes * 2 <= creates && deletes * 2 + 2 >= creates,
            "{deletes} {creates}"
        );
        Ok(())
    }

    #[test]
    fn the_box_office_deletes_the_given_share_of_orders() -> crate::Result<()> {
        let deletes = |delete_percent| -> crate::Result<(usize, usize)> {
            let w = Ticket::new(TicketParams {
                abandon_percent: 0,
                delete_batch: 1,
                delete_percent,
                ..TicketParams::default()
            })?;
            let mut s = w.client(0, SmallRng::seed_from_u64(9));
            let seen = walk(s.as_mut(), 2_000);
            let count = |p: &str| seen.iter().filter(|q| **q == p).count();
            Ok((count(CREATE_ORDER), count(DELETE_ORDER)))
        };
        let (creates, none) = deletes(0)?;
        assert!(creates > 100, "{creates}");
        assert_eq!(none, 0, "no order is deleted at 0%");
        let (creates, half) = deletes(50)?;
        assert!(
            half * 3 > creates && half * 3 < creates * 2,
            "{half} deletes of {creates} orders at 50%"
        );
        let (creates, all) = deletes(100)?;
        assert!(all + 1 >= creates && all <= creates, "{all} {creates}");
        Ok(())
    }

    #[test]
    fn ids_are_unique_per_client_and_carts_flow_into_orders() -> crate::Result<()> {
        let w = Ticket::new(TicketParams::default())?;
        let mut s = w.client(5, SmallRng::seed_from_u64(1));
        let mut cart = None;
        let mut ids = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let req = s.next();
            match req.procedure {
                RESERVE_SEATS => {
                    cart = req.args[0].as_int();
                    assert!(ids.insert(cart), "cart id reused");
                    assert_eq!(cart.map(|c| c >> 32), Some(6));
                    let seats = req.args.len() - 5;
                    assert!((1..=4).contains(&seats), "{seats}");
                }
                CREATE_ORDER => {
                    assert_eq!(req.args[0].as_int(), cart, "create_order of another cart");
                    assert!(ids.insert(req.args[1].as_int()), "order id reused");
                }
                _ => {}
            }
            let values = match req.procedure {
                LOOKUP_CUSTOMER => vec![Value::Int(1)],
                LIST_FREE_SEATS => (0..LIST_LIMIT).map(Value::Int).collect(),
                CREATE_ORDER => vec![req.args[1].clone(), Value::Int(1), money(4_500)],
                _ => vec![],
            };
            s.observe(req.procedure, &ok(values));
        }
        Ok(())
    }

    #[test]
    fn an_abandoned_cart_is_replaced_by_the_next_reservation() -> crate::Result<()> {
        let w = Ticket::new(TicketParams {
            abandon_percent: 100,
            ..TicketParams::default()
        })?;
        let mut s = w.client(0, SmallRng::seed_from_u64(2));
        let mut last_cart = 0;
        let mut replaced = 0;
        for _ in 0..200 {
            let req = s.next();
            if req.procedure == RESERVE_SEATS {
                let stale = req.args[4].as_int().unwrap_or(-1);
                if last_cart != 0 {
                    assert_eq!(stale, last_cart);
                    replaced += 1;
                }
                last_cart = req.args[0].as_int().unwrap_or(0);
            }
            assert_ne!(req.procedure, CREATE_ORDER, "every cart is abandoned");
            let values = match req.procedure {
                LOOKUP_CUSTOMER => vec![Value::Int(1)],
                LIST_FREE_SEATS => (0..LIST_LIMIT).map(Value::Int).collect(),
                _ => vec![],
            };
            s.observe(req.procedure, &ok(values));
        }
        assert!(replaced > 5, "{replaced}");
        Ok(())
    }
}
