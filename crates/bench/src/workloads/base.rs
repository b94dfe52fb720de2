//! BASE-ification shared by the workloads (Salt, DESIGN 4.3; seed 000
//! chapter 3, seed 001).
//!
//! ```text
//!  --base new_order,payment   ──► BaseSet ──► ProcedureDef::new(..).base()
//!                                              (only for listed procedures)
//!  body:  ctx.begin_alkaline()? ; statements ; ctx.end_alkaline().await?
//!         ├─ under `acid`, or without .base(): marks do nothing, the body
//!         │  is one ACID transaction
//!         └─ under `salt`: each block is one alkaline subtransaction, each
//!            statement outside a block a single-statement one
//! ```
//!
//! What it guarantees: one procedure definition serves both protocols, so
//! `--compare acid,salt` runs the same application code; which procedures
//! are BASE is a workload option, validated against the workload's own
//! procedure names.
//!
//! Writing a block with a handler (the seed's `try ... catch`):
//!
//! ```ignore
//! let r: Result<()> = async {
//!     ctx.begin_alkaline()?;
//!     ctx.exec("credit", args).await?;
//!     ctx.end_alkaline().await
//! }
//! .await;
//! if let Err(e) = r {
//!     let e = handler_error(e)?; // concurrency-control aborts propagate
//!     // ... compensating subtransaction ...
//! }
//! ```

use std::collections::BTreeSet;

use brine_cluster::ProcedureDef;
use brine_core::Error;

use crate::error::{BenchError, Result};

/// Hands an error caught by an alkaline block's handler back to the
/// handler, unless it is a concurrency-control abort: those belong to the
/// runtime (under `acid` the whole transaction is retried; under `salt`
/// the runtime retries the subtransaction and never shows them to the
/// body), so the handler must re-raise them rather than compensate.
pub fn handler_error(e: Error) -> brine_core::Result<Error> {
    if e.is_retryable() {
        Err(e)
    } else {
        Ok(e)
    }
}

/// The set of a workload's procedures that are BASE-ified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaseSet {
    names: BTreeSet<&'static str>,
}

impl BaseSet {
    /// No procedure is BASE: the ACID application.
    pub fn none() -> BaseSet {
        BaseSet::default()
    }

    /// Exactly `names`.
    pub fn of(names: &[&'static str]) -> BaseSet {
        BaseSet {
            names: names.iter().copied().collect(),
        }
    }

    /// Parses `--base LIST`: procedure names of `known`, comma-separated,
    /// or `none`, or `all` (every procedure in `known`). Unknown names are
    /// an error that lists the known ones.
    pub fn parse(list: &str, known: &[&'static str]) -> Result<BaseSet> {
        let list = list.trim();
        match list {
            "none" => return Ok(BaseSet::none()),
            "all" => return Ok(BaseSet::of(known)),
            _ => {}
        }
        let mut names = BTreeSet::new();
        for item in list.split(',') {
            let t = item.trim();
            if t.is_empty() {
                return Err(BenchError::Config(format!(
                    "--base: empty item in `{list}` (expected procedure names like {}, or none, or all)",
                    known.join(",")
                )));
            }
            match known.iter().find(|k| **k == t) {
                Some(k) => {
                    names.insert(*k);
                }
                None => {
                    return Err(BenchError::Config(format!(
                        "--base: unknown procedure `{t}` (known: {}; or none, or all)",
                        known.join(", ")
                    )))
                }
            }
        }
        Ok(BaseSet { names })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The BASE procedures, sorted (for reports).
    pub fn names(&self) -> Vec<&'static str> {
        self.names.iter().copied().collect()
    }

    /// Marks `def` BASE if it is in the set.
    pub fn apply(&self, def: ProcedureDef) -> ProcedureDef {
        if self.contains(&def.name) {
            def.base()
        } else {
            def
        }
    }

    /// For the report's parameters: `"none"` or the comma-separated names.
    pub fn label(&self) -> String {
        if self.names.is_empty() {
            "none".into()
        } else {
            self.names().join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: [&str; 3] = ["a", "b", "c"];

    #[test]
    fn parses_lists_none_and_all() -> Result<()> {
        assert_eq!(BaseSet::parse("b, a", &KNOWN)?.names(), vec!["a", "b"]);
        assert!(BaseSet::parse("none", &KNOWN)?.is_empty());
        assert_eq!(BaseSet::parse("all", &KNOWN)?.names(), KNOWN.to_vec());
        assert_eq!(BaseSet::parse("c", &KNOWN)?.label(), "c");
        assert_eq!(BaseSet::none().label(), "none");
        Ok(())
    }

    #[test]
    fn rejects_unknown_and_empty_names() {
        let e = BaseSet::parse("a,zz", &KNOWN).unwrap_err().to_string();
        assert!(e.contains("zz") && e.contains("known"), "{e}");
        assert!(BaseSet::parse("a,,b", &KNOWN).is_err());
        assert!(BaseSet::parse("", &KNOWN).is_err());
    }

    #[test]
    fn marks_only_listed_procedures() {
        let set = BaseSet::of(&["a"]);
        assert!(set.apply(ProcedureDef::new("a")).base);
        assert!(!set.apply(ProcedureDef::new("b")).base);
    }

    #[test]
    fn handlers_never_see_concurrency_control_aborts() {
        let cc = Error::Aborted(brine_core::AbortCause::Deadlock);
        assert!(handler_error(cc).is_err());
        assert!(handler_error(Error::Internal("x".into())).is_ok());
    }
}
