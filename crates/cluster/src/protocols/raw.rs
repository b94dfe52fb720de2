//! `raw` ("raw ops", seed 001 section 7, Fig. 10): every statement takes
//! its locks for its own duration only, as if each were a transaction of
//! its own; one commit round ends the call. No isolation and no atomicity
//! against concurrent work (a rollback restores rows others may have
//! written since), so invariants may break: it is the upper bound of what
//! the workload's operations reach with maximum concurrency, measured,
//! never trusted.

use std::any::Any;

use crate::message::LockSpec;
use crate::protocol::{Isolation, Protocol};

/// Every lock held for one statement only.
#[derive(Debug, Default)]
pub struct Raw;

impl Protocol for Raw {
    fn name(&self) -> &'static str {
        "raw"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec {
            short_reads: true,
            short_writes: true,
            ..LockSpec::acid(isolation)
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
