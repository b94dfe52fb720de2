//! Scenario tests: every file under `testdata/` is a script of lock-table
//! steps with the expected result, wakeups and table dump after each.
//! Regenerate expected output with `REWRITE=1 cargo test -p brine-lock`, then
//! read the diff: a wrong expected file is a defect.
//!
//! Commands (keys: `key=k1`, `key=1.2` for multi-column, `max` = Value::Max;
//! default `table=1 index=0`; txns `txn=t3` with `ts=` on first use, default
//! ts = the number):
//!
//! - `new [policy=wait-die|detect|timeout] [timeout-ms=N] [max-waiters=N] [max-deps=N]`
//! - `acquire txn= key= class=acid|alkaline|saline|nexusG access=read|write [now=ms] [gated] [local]`
//!   (`gated`: `acquire_gated`, opened by `ungate`, or with `local` too
//!   as soon as it is ready;
//!   readiness changes print as `gate: ...`)
//! - `ungate ticket=N`
//! - `range txn= [lo=|lo-ex=] [hi=|hi-ex=] class= [access=range-read|write]`
//! - `release txn= key=|lo,hi access=`, `release-all txn=`, `cancel txn=`,
//!   `staged txn=` (Salt: the txn begins releasing its locks in stages)
//! - `downgrade txn= from= to= [key=|lo,hi]`, `release-class txn= class=`
//!   (classes also `memberG`, Callas' running-transaction class)
//! - `dep txn= [key=] on= [on-key=]`
//! - `fork txn= key= alias= [ts=]` (Salt: the txn's saline locks on the
//!   key move to a holder of their own, `LockTable::fork_hold`)
//! - `protect txn= [ts=]` (the txn can no longer roll back: Callas `chop`, `sc`)
//! - `expire now=ms`, `print`, `stats`

use brine_core::{Access, IndexId, Key, LockTarget, TableId, TxnId, Value};
use brine_lock::{
    Acquire, DeadlockPolicy, GateOpens, LockClass, LockConfig, LockTable, Mode, StandardCompat,
    Ticket, Wakeup,
};
use datadriven::TestCase;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Harness {
    table: LockTable,
    ts: HashMap<u64, u64>,
    base: Instant,
    clock_ms: u64,
}

fn config(policy: DeadlockPolicy) -> LockConfig {
    LockConfig {
        policy,
        wait_timeout: Duration::from_millis(100),
        max_waiters_per_key: 16,
        max_deps_per_txn: 16,
    }
}

fn parse_key(s: &str) -> Key {
    Key::new(s.split('.').map(|p| {
        if p == "max" {
            Value::Max
        } else if let Ok(i) = p.parse::<i64>() {
            Value::Int(i)
        } else {
            Value::str(p)
        }
    }))
}

fn parse_class(s: &str) -> LockClass {
    match s {
        "acid" => LockClass::Acid,
        "alkaline" => LockClass::Alkaline,
        "saline" => LockClass::Saline,
        other => match (
            other.strip_prefix("nexus").and_then(|g| g.parse().ok()),
            other.strip_prefix("member").and_then(|g| g.parse().ok()),
        ) {
            (Some(g), _) => LockClass::Nexus(g),
            (_, Some(g)) => LockClass::Member(g),
            _ => panic!("unknown class {other}"),
        },
    }
}

fn parse_access(s: &str) -> Access {
    match s {
        "read" => Access::Read,
        "write" => Access::Write,
        "range-read" => Access::RangeRead,
        other => panic!("unknown access {other}"),
    }
}

impl Harness {
    fn new(policy: DeadlockPolicy) -> Harness {
        Harness {
            table: LockTable::new(config(policy), Arc::new(StandardCompat)),
            ts: HashMap::new(),
            base: Instant::now(),
            clock_ms: 0,
        }
    }

    fn txn(&mut self, tc: &mut TestCase, arg: &str, ts_arg: Option<&str>) -> TxnId {
        let name: String = tc.take_arg(arg).expect("txn argument");
        let id: u64 = name
            .strip_prefix('t')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("txn names look like t7, got {name}"));
        let given: Option<u64> = ts_arg.and_then(|a| tc.try_take_arg(a).expect("ts"));
        let ts = match given {
            Some(ts) => {
                self.ts.insert(id, ts);
                ts
            }
            None => *self.ts.entry(id).or_insert(id),
        };
        TxnId { ts, id }
    }

    fn now(&mut self, tc: &mut TestCase) -> Instant {
        if let Some(ms) = tc.try_take_arg::<u64>("now").expect("now") {
            self.clock_ms = ms;
        }
        self.base + Duration::from_millis(self.clock_ms)
    }

    fn space(tc: &mut TestCase) -> (TableId, IndexId) {
        let table: u32 = tc.try_take_arg("table").expect("table").unwrap_or(1);
        let index: u32 = tc.try_take_arg("index").expect("index").unwrap_or(0);
        (TableId(table), IndexId(index))
    }

    /// `key_arg=K` for a point, else `lo=/lo-ex=` and `hi=/hi-ex=` for a range
    /// (absent = unbounded). None if neither is present.
    fn target(tc: &mut TestCase, key_arg: &str) -> Option<LockTarget> {
        let (table, index) = Self::space(tc);
        if let Some(k) = tc.try_take_arg::<String>(key_arg).expect("key") {
            return Some(LockTarget::Point {
                table,
                index,
                key: parse_key(&k),
            });
        }
        if key_arg != "key" {
            return None;
        }
        let mut bound = |inc: &str, exc: &str| -> Option<Bound<Key>> {
            if let Some(k) = tc.try_take_arg::<String>(inc).expect("bound") {
                Some(Bound::Included(parse_key(&k)))
            } else {
                tc.try_take_arg::<String>(exc)
                    .expect("bound")
                    .map(|k| Bound::Excluded(parse_key(&k)))
            }
        };
        let lo = bound("lo", "lo-ex");
        let hi = bound("hi", "hi-ex");
        if lo.is_none() && hi.is_none() && !tc.take_flag("all").expect("all") {
            return None;
        }
        Some(LockTarget::Range {
            table,
            index,
            lo: lo.unwrap_or(Bound::Unbounded),
            hi: hi.unwrap_or(Bound::Unbounded),
        })
    }

    fn run(&mut self, tc: &mut TestCase) -> String {
        let mut out = String::new();
        let mut wakeups = Vec::new();
        let mut dump = true;
        match tc.directive.as_str() {
            "new" => {
                let policy = match tc
                    .try_take_arg::<String>("policy")
                    .expect("policy")
                    .as_deref()
                {
                    None | Some("detect") => DeadlockPolicy::Detect,
                    Some("wait-die") => DeadlockPolicy::WaitDie,
                    Some("timeout") => DeadlockPolicy::TimeoutOnly,
                    Some(p) => panic!("unknown policy {p}"),
                };
                let mut cfg = config(policy);
                if let Some(ms) = tc.try_take_arg::<u64>("timeout-ms").expect("timeout") {
                    cfg.wait_timeout = Duration::from_millis(ms);
                }
                if let Some(n) = tc.try_take_arg("max-waiters").expect("max-waiters") {
                    cfg.max_waiters_per_key = n;
                }
                if let Some(n) = tc.try_take_arg("max-deps").expect("max-deps") {
                    cfg.max_deps_per_txn = n;
                }
                *self = Harness::new(policy);
                self.table = LockTable::new(cfg, Arc::new(StandardCompat));
                out.push_str("ok\n");
                dump = false;
            }
            "acquire" | "range" => {
                let txn = self.txn(tc, "txn", Some("ts"));
                let target = Self::target(tc, "key").expect("acquire needs key= or lo=/hi=");
                let class = parse_class(&tc.take_arg::<String>("class").expect("class"));
                let default_access = if tc.directive == "range" {
                    "range-read"
                } else {
                    "read"
                };
                let access = parse_access(
                    &tc.try_take_arg::<String>("access")
                        .expect("access")
                        .unwrap_or_else(|| default_access.to_string()),
                );
                let now = self.now(tc);
                let mode = Mode::new(class, access);
                let gated = tc.take_flag("gated").expect("gated");
                let local = tc.take_flag("local").expect("local");
                let opens = if local {
                    GateOpens::WhenReady
                } else {
                    GateOpens::OnUngate
                };
                let res = if gated {
                    self.table
                        .acquire_gated(txn, &target, mode, opens, now, &mut wakeups)
                } else {
                    self.table.acquire(txn, &target, mode, now, &mut wakeups)
                };
                let line = match res {
                    Ok(Acquire::Granted { newly: true }) => "granted".to_string(),
                    Ok(Acquire::Granted { newly: false }) => "granted (already held)".to_string(),
                    Ok(Acquire::Waiting(t)) => format!("waiting {t}"),
                    Ok(Acquire::Abort(cause)) => format!("abort {}", cause.as_str()),
                    Err(e) => format!("error: {e}"),
                };
                out.push_str(&format!("{line}\n"));
            }
            "ungate" => {
                let ticket = Ticket(tc.take_arg("ticket").expect("ticket"));
                let was = self.table.ungate(ticket, &mut wakeups);
                out.push_str(&format!("was gated: {was}\n"));
            }
            "release" => {
                let txn = self.txn(tc, "txn", None);
                let target = Self::target(tc, "key").expect("release needs a target");
                let access = parse_access(&tc.take_arg::<String>("access").expect("access"));
                self.table.release(txn, &target, access, &mut wakeups);
            }
            "release-all" => {
                let txn = self.txn(tc, "txn", None);
                let outcome = self.table.release_all(txn, &mut wakeups);
                out.push_str(&format!("{outcome:?}\n"));
            }
            "staged" => {
                let txn = self.txn(tc, "txn", None);
                self.table.begin_staged_release(txn, &mut wakeups);
            }
            "protect" => {
                let txn = self.txn(tc, "txn", Some("ts"));
                self.table.protect(txn, &mut wakeups);
            }
            "cancel" => {
                let txn = self.txn(tc, "txn", None);
                self.table.cancel_waits(txn, &mut wakeups);
            }
            "downgrade" => {
                let txn = self.txn(tc, "txn", None);
                let from = parse_class(&tc.take_arg::<String>("from").expect("from"));
                let to = parse_class(&tc.take_arg::<String>("to").expect("to"));
                match Self::target(tc, "key") {
                    Some(t) => self.table.downgrade(txn, &t, from, to, &mut wakeups),
                    None => self.table.downgrade_all(txn, from, to, &mut wakeups),
                }
            }
            "release-class" => {
                let txn = self.txn(tc, "txn", None);
                let class = parse_class(&tc.take_arg::<String>("class").expect("class"));
                let gone = self.table.release_class(txn, class, &mut wakeups);
                out.push_str(&format!("gone: {gone:?}\n"));
            }
            "dep" => {
                let txn = self.txn(tc, "txn", None);
                let on = self.txn(tc, "on", None);
                let target = Self::target(tc, "key");
                let on_target = Self::target(tc, "on-key");
                if let Err(e) =
                    self.table
                        .add_release_dependency(txn, target.as_ref(), on, on_target.as_ref())
                {
                    out.push_str(&format!("error: {e}\n"));
                }
            }
            "fork" => {
                let txn = self.txn(tc, "txn", None);
                let target = Self::target(tc, "key").expect("key");
                let alias = self.txn(tc, "alias", Some("ts"));
                let moved = self.table.fork_hold(txn, &target, alias);
                out.push_str(&format!("moved: {moved}\n"));
            }
            "expire" => {
                let now = self.now(tc);
                self.table.expire(now, &mut wakeups);
            }
            "print" => {}
            "stats" => {
                out.push_str(&format!("{}\n", self.table.stats()));
                out.push_str(&format!(
                    "waiting_requests={} keys_with_waiters={} txns={}\n",
                    self.table.waiting_requests(),
                    self.table.keys_with_waiters(),
                    self.table.txn_count()
                ));
                dump = false;
            }
            other => panic!("unknown command {other}"),
        }
        if let Err(e) = tc.expect_empty() {
            panic!("unused arguments: {e}");
        }
        for w in &wakeups {
            let line = match w {
                Wakeup::Granted { txn, ticket } => format!("wakeup: granted {txn} {ticket}"),
                Wakeup::Aborted { txn, ticket, cause } => {
                    format!("wakeup: aborted {txn} {ticket} {}", cause.as_str())
                }
                Wakeup::Released { txn } => format!("wakeup: released {txn}"),
            };
            out.push_str(&line);
            out.push('\n');
        }
        let mut changes = Vec::new();
        self.table.take_gate_changes(&mut changes);
        for (txn, ticket, ready) in changes {
            let state = if ready { "ready" } else { "not ready" };
            out.push_str(&format!("gate: {txn} {ticket} {state}\n"));
        }
        if let Err(e) = self.table.check_invariants() {
            panic!(
                "invariant violated after `{}`: {e}\n{}",
                tc.directive, self.table
            );
        }
        if dump {
            out.push_str(&self.table.to_string());
        }
        out
    }
}

#[test]
fn scenarios() {
    datadriven::walk(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata"), |f| {
        let mut h = Harness::new(DeadlockPolicy::Detect);
        f.run(|tc| h.run(tc));
    });
}
