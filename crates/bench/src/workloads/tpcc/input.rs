//! Terminal input generation (clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1).
//!
//! Client `i` is a terminal of home warehouse `i mod W + 1`; its
//! stock-level district is fixed per terminal (clause 2.8.1.1) at
//! `(i / W) mod 10 + 1`. No keying or think time: a client issues its next
//! transaction as soon as the previous one completed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use brine_cluster::CallOutcome;
use brine_core::{Decimal, Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;

use super::procedures::INVALID_ITEM;
use super::random::{last_name, nurand, Constants, A_C_ID, A_C_LAST, A_OL_I_ID};
use super::schema::DISTRICTS;
use super::{RunState, Scale, DELIVERY, NEW_ORDER, ORDER_STATUS, PAYMENT, PROCEDURES, STOCK_LEVEL};
use crate::workload::{ClientGen, TxnRequest};

/// Microseconds since the epoch: the terminal's "current date and time".
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub struct TpccClient {
    pub(super) rng: SmallRng,
    pub(super) warehouses: i64,
    pub(super) home_w: i64,
    pub(super) stock_level_d: i64,
    pub(super) scale: Scale,
    pub(super) constants: Constants,
    /// Cumulative mix weights, in `PROCEDURES` order.
    pub(super) cumulative: [f64; 5],
    /// Makes history keys unique: `(index + 1) << 32 | seq`.
    pub(super) history_base: i64,
    pub(super) history_seq: i64,
    pub(super) run: Arc<RunState>,
    /// Hand delivery to the home warehouse's queue (clause 2.7.2).
    pub(super) defer_delivery: bool,
}

impl TpccClient {
    fn district(&mut self) -> i64 {
        self.rng.gen_range(1..=DISTRICTS)
    }

    /// Another warehouse than the home one, uniformly (W > 1).
    fn other_warehouse(&mut self) -> i64 {
        let o = self.rng.gen_range(1..self.warehouses);
        if o >= self.home_w {
            o + 1
        } else {
            o
        }
    }

    fn customer_id(&mut self) -> i64 {
        nurand(
            &mut self.rng,
            A_C_ID,
            self.constants.c_id,
            1,
            self.scale.customers_per_district,
        )
    }

    fn customer_last(&mut self) -> String {
        last_name(nurand(
            &mut self.rng,
            A_C_LAST,
            self.constants.c_last_run,
            0,
            self.scale.last_names() - 1,
        ))
    }

    /// Customer selection: (by_name, c_id, c_last); 60% by last name.
    fn customer(&mut self) -> [Value; 3] {
        if self.rng.gen_range(1..=100) <= 60 {
            [
                Value::Int(1),
                Value::Int(0),
                Value::str(&self.customer_last()),
            ]
        } else {
            [
                Value::Int(0),
                Value::Int(self.customer_id()),
                Value::str(""),
            ]
        }
    }

    pub fn new_order(&mut self) -> TxnRequest {
        let w = self.home_w;
        let d = self.district();
        let c = self.customer_id();
        let ol_cnt = self.rng.gen_range(5..=15i64);
        // Clause 2.4.1.4: 1% of new orders carry an unused item number as
        // their last item, which rolls them back.
        let rollback = self.rng.gen_range(1..=100) == 1;
        let mut args = vec![
            Value::Int(w),
            Value::Int(d),
            Value::Int(c),
            Value::Timestamp(now_us()),
            Value::Int(ol_cnt),
        ];
        for l in 0..ol_cnt {
            let i_id = if rollback && l == ol_cnt - 1 {
                self.scale.items + 1
            } else {
                nurand(
                    &mut self.rng,
                    A_OL_I_ID,
                    self.constants.ol_i_id,
                    1,
                    self.scale.items,
                )
            };
            // Clause 2.4.1.5: 1% of lines are supplied by a remote warehouse.
            let supply = if self.warehouses > 1 && self.rng.gen_range(1..=100) == 1 {
                self.other_warehouse()
            } else {
                w
            };
            args.push(Value::Int(i_id));
            args.push(Value::Int(supply));
            args.push(Value::Int(self.rng.gen_range(1..=10)));
        }
        TxnRequest {
            procedure: NEW_ORDER,
            args,
        }
    }

    pub fn payment(&mut self) -> TxnRequest {
        let w = self.home_w;
        let d = self.district();
        // Clause 2.5.1.2: 85% home, 15% a remote warehouse's customer.
        let (c_w, c_d) = if self.warehouses > 1 && self.rng.gen_range(1..=100) > 85 {
            (self.other_warehouse(), self.district())
        } else {
            (w, d)
        };
        let [by_name, c_id, c_last] = self.customer();
        let amount = Decimal::new(self.rng.gen_range(100..=500_000), 2);
        self.history_seq += 1;
        TxnRequest {
            procedure: PAYMENT,
            args: vec![
                Value::Int(w),
                Value::Int(d),
                Value::Int(c_w),
                Value::Int(c_d),
                by_name,
                c_id,
                c_last,
                Value::Decimal(amount),
                Value::Timestamp(now_us()),
                Value::Int(self.history_base | self.history_seq),
            ],
        }
    }

    pub fn order_status(&mut self) -> TxnRequest {
        let d = self.district();
        let [by_name, c_id, c_last] = self.customer();
        TxnRequest {
            procedure: ORDER_STATUS,
            args: vec![
                Value::Int(self.home_w),
                Value::Int(d),
                by_name,
                c_id,
                c_last,
            ],
        }
    }

    pub fn delivery(&mut self) -> TxnRequest {
        TxnRequest {
            procedure: DELIVERY,
            args: vec![
                Value::Int(self.home_w),
                Value::Int(self.rng.gen_range(1..=10)),
                Value::Timestamp(now_us()),
            ],
        }
    }

    pub fn stock_level(&mut self) -> TxnRequest {
        TxnRequest {
            procedure: STOCK_LEVEL,
            args: vec![
                Value::Int(self.home_w),
                Value::Int(self.stock_level_d),
                Value::Int(self.rng.gen_range(10..=20)),
            ],
        }
    }
}

impl ClientGen for TpccClient {
    fn next(&mut self) -> TxnRequest {
        let total = self.cumulative[4];
        let x = self.rng.gen_range(0.0..total);
        let pick = self
            .cumulative
            .iter()
            .position(|&c| x < c)
            .map_or(NEW_ORDER, |i| PROCEDURES[i]);
        match pick {
            PAYMENT => self.payment(),
            ORDER_STATUS => self.order_status(),
            DELIVERY => self.delivery(),
            STOCK_LEVEL => self.stock_level(),
            _ => self.new_order(),
        }
    }

    fn defer(&self, request: &TxnRequest) -> Option<usize> {
        (self.defer_delivery && request.procedure == DELIVERY)
            .then(|| usize::try_from(self.home_w - 1).ok())
            .flatten()
    }

    /// A deferred delivery runs as ten transactions, one per district,
    /// concurrently (clause 2.7.4.2).
    fn split_deferred(&self, request: &TxnRequest) -> Vec<TxnRequest> {
        if request.procedure != DELIVERY || request.args.len() != 3 {
            return vec![request.clone()];
        }
        (1..=DISTRICTS)
            .map(|d| {
                let mut args = request.args.clone();
                args.push(Value::Int(d));
                TxnRequest {
                    procedure: DELIVERY,
                    args,
                }
            })
            .collect()
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        let r = &self.run;
        match (procedure, outcome) {
            (NEW_ORDER, Ok(_)) => {
                r.new_orders.fetch_add(1, Ordering::Relaxed);
                if r.in_window() {
                    r.new_orders_in_window.fetch_add(1, Ordering::Relaxed);
                }
            }
            (NEW_ORDER, Err(Error::UserAbort(m))) if m == INVALID_ITEM => {
                r.new_order_rollbacks.fetch_add(1, Ordering::Relaxed);
            }
            (DELIVERY, Ok(o)) => {
                // One value per transaction the delivery ran as.
                let delivered: i64 = o.values.iter().filter_map(Value::as_int).sum();
                r.deliveries.fetch_add(1, Ordering::Relaxed);
                r.districts_skipped
                    .fetch_add((DISTRICTS - delivered).max(0) as u64, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}
