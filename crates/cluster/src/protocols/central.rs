//! `central`: the centralized baseline of seed 004 section 7.2. Every row
//! in partition 0 (server 0) and every call run there as the engine's
//! ACID transaction, whatever node the client reached; the other servers
//! hold nothing and do nothing. With one server per node it is "a standard
//! single server" beside Elia's full replicas, on the same cluster and in
//! the same run.

use std::any::Any;

use brine_core::{NodeId, Result};
use futures::future::BoxFuture;

use crate::coordinator::{run_acid, CallOutcome};
use crate::message::LockSpec;
use crate::protocol::{Call, Isolation, Layout, Protocol};

#[derive(Debug, Default)]
pub struct Central;

impl Protocol for Central {
    fn name(&self) -> &'static str {
        "central"
    }

    fn lock_spec(&self, isolation: Isolation) -> LockSpec {
        LockSpec::acid(isolation)
    }

    fn layout(&self) -> Layout {
        Layout::Central
    }

    fn run<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<CallOutcome>> {
        Box::pin(async move {
            // A client at another site crosses to server 0 and back (where
            // a topology places clients).
            let servers = call.shared.partitions.len() as u32;
            let site = crate::topology::client_site(call.node, call.session, servers);
            let link = call.shared.link.clone();
            let run = run_acid(Call {
                node: NodeId(0),
                ..call
            });
            link.client_trip(site, 0, run).await
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
