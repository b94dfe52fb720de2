//! A node's Prometheus endpoint: `GET /metrics` in the text exposition
//! format, on its own port, served by a deliberately small HTTP/1.0
//! responder (one request per connection, bounded request size, time and
//! connection count) so a scraper, or anything else that connects, can
//! never hold the node.
//!
//! ```text
//!  scraper ── GET /metrics ──► accept (≤ MAX_SCRAPERS at once)
//!                                │ read the request head (≤ 8 KiB, ≤ 5 s)
//!                                ▼
//!                      render(): counters + histogram ──► 200 text/plain; close
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Upper bounds of the call-latency buckets, in microseconds.
const BUCKETS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000,
];
const MAX_REQUEST_BYTES: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_SCRAPERS: usize = 16;

/// Latency of the calls a node coordinated, by outcome; lock-free.
#[derive(Default)]
pub struct CallMetrics {
    buckets: [AtomicU64; BUCKETS_US.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
}

impl CallMetrics {
    pub fn record(&self, latency: Duration, ok: bool) {
        let us = latency.as_micros().min(u128::from(u64::MAX)) as u64;
        if let Some(i) = BUCKETS_US.iter().position(|&b| us <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        if ok { &self.ok } else { &self.failed }.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the histogram and the outcome counters.
    pub fn render(&self, out: &mut String, node: u32) {
        let _ = writeln!(
            out,
            "# HELP brine_call_duration_seconds Latency of calls coordinated by this node (client to answer, retries included).\n# TYPE brine_call_duration_seconds histogram"
        );
        let mut cumulative = 0;
        for (i, b) in BUCKETS_US.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "brine_call_duration_seconds_bucket{{node=\"{node}\",le=\"{}\"}} {cumulative}",
                *b as f64 / 1e6
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "brine_call_duration_seconds_bucket{{node=\"{node}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "brine_call_duration_seconds_sum{{node=\"{node}\"}} {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "brine_call_duration_seconds_count{{node=\"{node}\"}} {count}"
        );
        counter(
            out,
            "brine_calls_total",
            "Calls coordinated by this node, by outcome.",
            &[
                (
                    format!("node=\"{node}\",outcome=\"ok\""),
                    self.ok.load(Ordering::Relaxed),
                ),
                (
                    format!("node=\"{node}\",outcome=\"error\""),
                    self.failed.load(Ordering::Relaxed),
                ),
            ],
        );
    }
}

/// Appends one metric family; `kind` is `counter` or `gauge`.
pub fn family(out: &mut String, kind: &str, name: &str, help: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

pub fn counter(out: &mut String, name: &str, help: &str, samples: &[(String, u64)]) {
    family(out, "counter", name, help, samples);
}

pub fn gauge(out: &mut String, name: &str, help: &str, samples: &[(String, u64)]) {
    family(out, "gauge", name, help, samples);
}

/// Serves `GET /metrics` on `addr` until the task is dropped; `render`
/// produces the body.
pub async fn serve<F, Fut>(listener: TcpListener, render: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send,
{
    let render = Arc::new(render);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPERS));
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            // Out of descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Too many scrapers at once: close this one.
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let response = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await
            {
                Ok(Some(head))
                    if head.starts_with("GET /metrics ") || head.starts_with("GET / ") =>
                {
                    let body = render().await;
                    format!(
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                Ok(Some(_)) => {
                    let body = "not found; try GET /metrics\n";
                    format!(
                        "HTTP/1.0 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                Ok(None) => {
                    "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string()
                }
                Err(_) => {
                    tracing::debug!(%peer, "metrics request timed out");
                    return;
                }
            };
            let _ =
                tokio::time::timeout(REQUEST_TIMEOUT, stream.write_all(response.as_bytes())).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Reads up to the end of the request head; `None` if it is too long,
/// not text, or the peer closed first.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return String::from_utf8(buf).ok();
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return None;
        }
    }
}

/// Binds the metrics listener (so a bad address fails at start).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// The node's metrics in Prometheus text format.
pub(crate) async fn render_node(
    me: u32,
    cluster: &brine_cluster::Cluster,
    service: &brine_cluster::remote::NodeService,
    calls: &CallMetrics,
    server: &parking_lot::Mutex<Option<brine_net::Server>>,
) -> String {
    let mut out = String::new();
    let n = format!("node=\"{me}\"");
    let s = cluster.stats();
    calls.render(&mut out, me);
    counter(
        &mut out,
        "brine_commits_total",
        "Transactions committed by this node's coordinator.",
        &[(n.clone(), s.commits)],
    );
    counter(
        &mut out,
        "brine_retries_total",
        "Concurrency-control victims retried.",
        &[(n.clone(), s.retries)],
    );
    counter(
        &mut out,
        "brine_aborts_total",
        "Aborts by cause (user: the procedure or a constraint; the others: concurrency control).",
        &[
            (format!("{n},cause=\"wait_die\""), s.aborts_wait_die),
            (format!("{n},cause=\"deadlock\""), s.aborts_deadlock),
            (format!("{n},cause=\"lock_timeout\""), s.aborts_timeout),
            (format!("{n},cause=\"cascade\""), s.aborts_cascade),
            (format!("{n},cause=\"user\""), s.user_aborts),
        ],
    );
    counter(
        &mut out,
        "brine_base_accepted_total",
        "Salt: BASE transactions accepted.",
        &[(n.clone(), s.counter("base_accepted"))],
    );
    counter(
        &mut out,
        "brine_statements_total",
        "Statements executed by this node's partitions.",
        &[(n.clone(), s.statements)],
    );
    counter(
        &mut out,
        "brine_lock_waits_total",
        "Statements that waited for a lock at this node's partitions.",
        &[(n.clone(), s.lock_waits)],
    );
    counter(
        &mut out,
        "brine_lock_queue_bypasses_total",
        "Deadlocks broken by granting a request ahead of the queue instead of aborting one.",
        &[(n.clone(), s.queue_bypasses)],
    );
    counter(
        &mut out,
        "brine_lock_searches_cut_total",
        "Deadlock searches that gave up at their bound, leaving a cycle to the periodic detector.",
        &[(n.clone(), s.searches_cut)],
    );
    counter(
        &mut out,
        "brine_lock_detector_breaks_total",
        "Deadlocks broken at this node's partitions at the cluster detector's request (cycles through several partitions).",
        &[(n.clone(), s.detector_breaks)],
    );
    counter(
        &mut out,
        "brine_lock_wait_microseconds_total",
        "Time statements spent waiting for locks at this node's partitions.",
        &[(n.clone(), s.lock_wait_us_total)],
    );
    let by_table = cluster.locks_by_table();
    let per_table = |f: fn(&brine_cluster::cluster::TableLocks) -> u64| {
        by_table
            .iter()
            .map(|t| (format!("{n},table=\"{}\"", t.table), f(t)))
            .collect::<Vec<_>>()
    };
    counter(
        &mut out,
        "brine_table_lock_waits_total",
        "Statements that waited for a lock here, by the statement's table.",
        &per_table(|t| t.waits),
    );
    counter(
        &mut out,
        "brine_table_lock_wait_microseconds_total",
        "Their time waiting, by table.",
        &per_table(|t| t.wait_us),
    );
    counter(
        &mut out,
        "brine_table_lock_holds_total",
        "Lock holds ended here, one per transaction and table: from its first long-held lock on the table to their release.",
        &per_table(|t| t.holds),
    );
    counter(
        &mut out,
        "brine_table_lock_hold_microseconds_total",
        "Their duration, by table (divide by the holds for the mean hold time).",
        &per_table(|t| t.hold_us),
    );
    let mut rows = Vec::new();
    let mut active = Vec::new();
    let mut parked = Vec::new();
    let mut locked = Vec::new();
    for (p, st) in service.status(cluster).await.partitions {
        let l = format!("{n},partition=\"{p}\"");
        rows.push((l.clone(), st.rows_per_table.iter().sum::<usize>() as u64));
        active.push((l.clone(), st.active_txns as u64));
        locked.push((l.clone(), st.lock_txns as u64));
        parked.push((l, st.parked_statements as u64));
    }
    gauge(
        &mut out,
        "brine_partition_rows",
        "Rows stored, all tables.",
        &rows,
    );
    gauge(
        &mut out,
        "brine_partition_active_transactions",
        "Transactions holding or waiting for locks.",
        &active,
    );
    gauge(
        &mut out,
        "brine_partition_waiting_statements",
        "Statements parked behind a lock.",
        &parked,
    );
    gauge(
        &mut out,
        "brine_partition_lock_transactions",
        "Transactions the lock table keeps state for (locks, waits, release-order dependencies, protection); 0 when idle.",
        &locked,
    );
    if let Some(w) = cluster.wal_stats() {
        let t = w.total();
        counter(
            &mut out,
            "brine_wal_fsyncs_total",
            "Log flushes (fsync) of this node's partition and decision logs; the rate is the fsync rate.",
            &[(n.clone(), t.fsyncs)],
        );
        counter(
            &mut out,
            "brine_wal_bytes_total",
            "Bytes written to this node's logs.",
            &[(n.clone(), t.bytes)],
        );
        counter(
            &mut out,
            "brine_wal_records_total",
            "Records written to this node's logs.",
            &[(n.clone(), t.records)],
        );
    }
    if let Some(across) = &cluster.config().durability.across {
        crate::replicas::render_metrics(&mut out, &n, across).await;
    }
    let net = server.lock().as_ref().map(|s| s.stats());
    if let Some(st) = net {
        gauge(
            &mut out,
            "brine_connections_active",
            "Open client and peer connections.",
            &[(n.clone(), st.connections_active as u64)],
        );
        counter(
            &mut out,
            "brine_connections_accepted_total",
            "Connections accepted.",
            &[(n.clone(), st.connections_accepted_total)],
        );
        counter(
            &mut out,
            "brine_connections_rejected_full_total",
            "Connections refused at the connection bound.",
            &[(n.clone(), st.connections_rejected_full_total)],
        );
        counter(
            &mut out,
            "brine_connections_closed_total",
            "Connections the node closed, by cause.",
            &[
                (
                    format!("{n},cause=\"slow_peer\""),
                    st.closed_slow_peer_total,
                ),
                (
                    format!("{n},cause=\"protocol_error\""),
                    st.closed_protocol_error_total,
                ),
                (format!("{n},cause=\"idle\""), st.closed_idle_total),
                (format!("{n},cause=\"io_error\""), st.closed_io_error_total),
            ],
        );
        counter(
            &mut out,
            "brine_requests_total",
            "Requests received from clients and peers.",
            &[(n.clone(), st.requests_total)],
        );
        counter(
            &mut out,
            "brine_requests_undecodable_total",
            "Requests whose body did not decode.",
            &[(n, st.requests_undecodable_total)],
        );
    }
    out
}
