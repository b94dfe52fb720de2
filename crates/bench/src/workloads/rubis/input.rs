//! A RUBiS client session: user `index mod U + 1`, drawing requests from
//! the mix and running each request's transactions one after another.
//!
//! Inputs follow RUBiS's client emulator where it has them (items and
//! users drawn uniformly, searches of a random category and region, one
//! page of `procedures::PAGE_SIZE` items); ids of rows made at run time come from the
//! client's own id space (`load::RUN_ID_BASE`), so they are unique without
//! coordination.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use brine_cluster::CallOutcome;
use brine_core::{Error, Value};
use rand::rngs::SmallRng;
use rand::Rng;

use super::load::{self, money, CATEGORY_NAMES, DAY_US, RATINGS, REGION_COUNT, RUN_ID_BASE};
use super::procedures::SOLD_OUT;
use super::*;
use crate::workload::{ClientGen, TxnRequest};

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub struct RubisClient {
    rng: SmallRng,
    scale: Scale,
    cumulative: [f64; 18],
    /// The user this session acts as.
    user: i64,
    /// Ids made by this client are `id_base + seq`.
    id_base: i64,
    seq: i64,
    /// The rest of the current request's transactions.
    pending: VecDeque<TxnRequest>,
    run: Arc<RunState>,
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

impl RubisClient {
    pub fn new(
        index: u32,
        rng: SmallRng,
        scale: Scale,
        cumulative: [f64; 18],
        run: Arc<RunState>,
    ) -> RubisClient {
        RubisClient {
            rng,
            scale,
            cumulative,
            user: i64::from(index) % scale.users + 1,
            id_base: (i64::from(index) + 1) * RUN_ID_BASE,
            seq: 0,
            pending: VecDeque::new(),
            run,
        }
    }

    fn fresh_id(&mut self) -> i64 {
        self.seq += 1;
        self.id_base + self.seq
    }

    fn item(&mut self) -> i64 {
        self.rng.gen_range(1..=self.scale.items)
    }

    /// An item, active or old (pages about a closed auction are shown too).
    fn any_item(&mut self) -> i64 {
        self.rng
            .gen_range(1..=self.scale.items + self.scale.old_items)
    }

    fn other_user(&mut self) -> i64 {
        self.rng.gen_range(1..=self.scale.users)
    }

    fn category(&mut self) -> i64 {
        self.rng.gen_range(1..=CATEGORY_NAMES.len() as i64)
    }

    /// The request drawn next, by its index in `REQUESTS`.
    pub fn draw_request(&mut self) -> usize {
        let total = self.cumulative[self.cumulative.len() - 1];
        let x = self.rng.gen_range(0.0..total);
        self.cumulative
            .iter()
            .position(|&c| x < c)
            .unwrap_or(self.cumulative.len() - 1)
    }

    /// The call of transaction `procedure` with this session's inputs.
    pub fn transaction(&mut self, procedure: &'static str) -> TxnRequest {
        let now = Value::Timestamp(now_us());
        let me = int(self.user);
        let args = match procedure {
            BROWSE_CATEGORIES | BROWSE_REGIONS | SELECT_CATEGORY_TO_SELL => vec![],
            BROWSE_CATEGORIES_IN_REGION => vec![int(self.rng.gen_range(1..=REGION_COUNT))],
            SEARCH_ITEMS_BY_CATEGORY => {
                let c = self.category();
                let from = self.item();
                vec![int(c), int(from), now]
            }
            SEARCH_ITEMS_BY_REGION => {
                let r = self.rng.gen_range(1..=REGION_COUNT);
                let c = self.category();
                // Few items per (region, category): the first page.
                vec![int(r), int(c), int(1), now]
            }
            VIEW_ITEM | VIEW_BID_HISTORY => vec![int(self.any_item())],
            VIEW_USER_INFO => vec![int(self.other_user())],
            AUTHENTICATE => vec![
                Value::str(&load::nickname(self.user)),
                Value::str(&load::password(self.user)),
            ],
            PUT_BID_FORM | BUY_NOW_FORM => vec![int(self.item())],
            PUT_COMMENT_FORM => {
                let to = self.other_user();
                vec![int(to), int(self.any_item())]
            }
            ABOUT_ME_USER | ABOUT_ME_BIDS | ABOUT_ME_BOUGHT | ABOUT_ME_SOLD => vec![me],
            STORE_BID => {
                let i = self.item();
                let id = self.fresh_id();
                let bid = self.rng.gen_range(100..=20_000);
                let max = bid + self.rng.gen_range(0..=10) * 100;
                vec![me, int(i), int(id), money(bid), money(max), int(1), now]
            }
            STORE_BUY_NOW => {
                let i = self.item();
                let id = self.fresh_id();
                vec![me, int(i), int(id), int(1), now]
            }
            STORE_COMMENT => {
                let to = self.other_user();
                let i = self.any_item();
                let id = self.fresh_id();
                let r = RATINGS[self.rng.gen_range(0..RATINGS.len())];
                vec![
                    me,
                    int(to),
                    int(i),
                    int(id),
                    int(r),
                    now,
                    Value::str("a comment left during the run"),
                ]
            }
            REGISTER_USER => {
                let id = self.fresh_id();
                vec![
                    int(id),
                    Value::str(&load::nickname(id)),
                    Value::str(&load::password(id)),
                    int(self.rng.gen_range(1..=REGION_COUNT)),
                    now,
                ]
            }
            REGISTER_ITEM => {
                let id = self.fresh_id();
                let c = self.category();
                let price = self.rng.gen_range(100..=10_000);
                let qty = self.rng.gen_range(1..=5);
                let buy_now = if self.rng.gen_range(0..10) == 0 {
                    price * 2
                } else {
                    0
                };
                let t = now_us();
                let end = t + self.rng.gen_range(1..=7) * DAY_US;
                vec![
                    int(id),
                    me,
                    int(c),
                    money(price),
                    int(qty),
                    money(buy_now),
                    Value::Timestamp(t),
                    Value::Timestamp(end),
                ]
            }
            other => unreachable!("rubis: no inputs for `{other}`"),
        };
        TxnRequest { procedure, args }
    }
}

impl ClientGen for RubisClient {
    fn next(&mut self) -> TxnRequest {
        if let Some(t) = self.pending.pop_front() {
            return t;
        }
        let r = REQUESTS[self.draw_request()];
        self.run.requests.fetch_add(1, Ordering::Relaxed);
        let mut calls: VecDeque<TxnRequest> =
            r.transactions.iter().map(|t| self.transaction(t)).collect();
        let first = calls.pop_front();
        self.pending = calls;
        // Every request runs at least one transaction (tested).
        first.unwrap_or_else(|| self.transaction(BROWSE_CATEGORIES))
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        let r = &self.run;
        let counter = match (procedure, outcome) {
            (STORE_BID, Ok(_)) => &r.bids,
            (STORE_BUY_NOW, Ok(_)) => &r.buy_nows,
            (STORE_BUY_NOW, Err(Error::UserAbort(m))) if m == SOLD_OUT => &r.sold_out,
            (STORE_COMMENT, Ok(_)) => &r.comments,
            (REGISTER_USER, Ok(_)) => &r.users_registered,
            (REGISTER_ITEM, Ok(_)) => &r.items_registered,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_transaction_has_inputs_and_requests_follow_the_mix() {
        let w = Rubis::new(Scale::SMALL, Mix::BIDDING).expect("rubis");
        let mut c = w.session(3, SmallRng::seed_from_u64(1));
        assert_eq!(c.user, 4);
        for p in READ_ONLY.iter().chain(WRITING.iter()) {
            assert_eq!(c.transaction(p).procedure, *p);
        }
        let mut drawn = [0u32; 18];
        let n = 200_000;
        for _ in 0..n {
            drawn[c.draw_request()] += 1;
        }
        let total: f64 = Mix::BIDDING.weights.iter().sum();
        for (i, w) in Mix::BIDDING.weights.iter().enumerate() {
            let got = f64::from(drawn[i]) / f64::from(n);
            assert!((got - w / total).abs() < 0.01, "request {i}: {got}");
        }
        // Browsing never draws a writing request.
        let b = Rubis::new(Scale::SMALL, Mix::BROWSING).expect("rubis");
        let mut c = b.session(0, SmallRng::seed_from_u64(2));
        for _ in 0..10_000 {
            let t = c.next();
            assert!(READ_ONLY.contains(&t.procedure), "{}", t.procedure);
        }
    }

    #[test]
    fn run_time_ids_are_unique_per_client() {
        let w = Rubis::new(Scale::SMALL, Mix::BIDDING).expect("rubis");
        let mut a = w.session(0, SmallRng::seed_from_u64(1));
        let mut b = w.session(1, SmallRng::seed_from_u64(1));
        let ia = a.fresh_id();
        let ib = b.fresh_id();
        assert_ne!(ia, ib);
        assert!(ia >= RUN_ID_BASE && ib >= RUN_ID_BASE);
    }
}
