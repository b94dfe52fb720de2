//! The one role a server's user plays: answering requests.

use std::future::Future;

/// Turns a request into a response.
///
/// # Contract
///
/// The server calls `handle` once per request that decoded, from its own
/// task, so calls for one connection and across connections run
/// concurrently, up to `max_in_flight_per_connection` per connection; replies
/// go out in completion order, correlated by request id, not in arrival
/// order. The returned future may be dropped before it completes: when its
/// connection is closed (peer gone, peer too slow, protocol violation) or
/// when a shutdown's grace period runs out, so it must not leave shared
/// state half-updated across an `.await`. A handler that panics is caught:
/// the caller gets an `Internal` error reply for that id and the connection
/// goes on. Application-level failures belong in `Resp` (e.g. a
/// `Result<T, AppError>`), which the transport does not interpret. A handler
/// that never completes holds one in-flight slot until its connection
/// closes; there is no per-request timeout on the server side.
///
/// Any `Fn(Req) -> impl Future<Output = Resp>` closure is a handler.
pub trait Handler<Req, Resp>: Send + Sync + 'static {
    fn handle(&self, req: Req) -> impl Future<Output = Resp> + Send;
}

impl<Req, Resp, F, Fut> Handler<Req, Resp> for F
where
    F: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Resp> + Send,
{
    fn handle(&self, req: Req) -> impl Future<Output = Resp> + Send {
        self(req)
    }
}
