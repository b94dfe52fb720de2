//! `acid`: strict two-phase locking with two-phase commit, the engine's
//! own transaction, and the baseline every other protocol is measured
//! against (DESIGN 4.2). Everything it does is the engine's default.

use std::any::Any;

use crate::message::LockSpec;
use crate::protocol::{Isolation, Protocol};

/// Strict two-phase locking with two-phase commit.
#[derive(Debug, Default)]
pub struct Acid;

impl Protocol for Acid {
    fn name(&self) -> &'static str {
        "acid"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
