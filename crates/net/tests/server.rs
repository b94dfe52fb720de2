//! Server scenarios: the happy path, then one misbehaving peer per test,
//! each followed by a well-behaved client that must still be served.

mod common;

use std::time::Duration;

use brine_net::wire::{Envelope, Kind, RemoteError, RemoteErrorKind};
use brine_net::{Client, NetError, ServerConfig, Shutdown};
use common::*;
use futures::future::join_all;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_client_and_complete_out_of_order() {
    let server = start(ServerConfig::default()).await;
    let client = connect(server.local_addr()).await;

    let tasks = (0..32u64).map(|task| {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..25u64 {
                let resp = client.request(Req::Add(task, i)).await.expect("add");
                assert_eq!(resp, Resp::Sum(task + i), "task {task} request {i}");
                let text = format!("{task}-{i}");
                let resp = client.request(Req::Echo(text.clone())).await.expect("echo");
                assert_eq!(resp, Resp::Echo(text));
            }
        })
    });
    for joined in join_all(tasks).await {
        joined.expect("task did not panic");
    }

    // A slow request does not hold up a fast one sent after it.
    let slow = async {
        let resp = client.request(Req::SleepMs(1000)).await;
        (resp, Instant::now())
    };
    let fast = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let resp = client.request(Req::Add(1, 1)).await;
        (resp, Instant::now())
    };
    let ((slow_resp, slow_done), (fast_resp, fast_done)) = tokio::join!(slow, fast);
    assert_eq!(slow_resp.expect("slow"), Resp::Slept);
    assert_eq!(fast_resp.expect("fast"), Resp::Sum(2));
    assert!(
        fast_done < slow_done,
        "replies come back in completion order"
    );

    let stats = server.stats();
    assert_eq!(stats.connections_accepted_total, 1, "one shared connection");
    assert_eq!(stats.requests_total, 32 * 25 * 2 + 2);
    assert_eq!(server.shutdown().await, Shutdown::Graceful);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_version_is_rejected_with_the_reason() {
    let server = start(ServerConfig::default()).await;
    let mut peer = RawPeer::connect(server.local_addr()).await;
    peer.send(&frame(&hello_payload(3, "from-the-future")))
        .await;
    let reply = peer.read_frame().await.expect("a reject frame");
    assert_eq!(reply[0], 0x01, "reject tag");
    assert_eq!(
        String::from_utf8_lossy(&reply[1..]),
        "protocol version 3 not supported, server speaks 1"
    );
    peer.expect_closed().await;
    wait_for_stats(&server, "the failed handshake is counted", |s| {
        s.handshakes_failed_total == 1
    })
    .await;
    assert_serves(server.local_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_handshake_closes_the_connection() {
    let server = start(ServerConfig {
        handshake_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();

    // An HTTP request: its first 4 bytes read as a ~1.2 GB frame length.
    let mut http = RawPeer::connect(addr).await;
    http.send(b"GET / HTTP/1.1\r\nHost: brine\r\n\r\n").await;
    http.expect_closed().await;

    // A well-formed frame that is not a hello: told why, then closed.
    let mut framed = RawPeer::connect(addr).await;
    framed.send(&frame(b"HELLO there")).await;
    let reply = framed.read_frame().await.expect("a reject frame");
    assert_eq!(reply[0], 0x01);
    let reason = String::from_utf8_lossy(&reply[1..]).into_owned();
    assert!(reason.contains("not a brine handshake"), "{reason}");
    framed.expect_closed().await;

    // Random binary noise.
    let mut noise = RawPeer::connect(addr).await;
    noise
        .send(&[0xff, 0x00, 0x13, 0x37, 0xde, 0xad, 0xbe, 0xef])
        .await;
    noise.expect_closed().await;

    // A few bytes, then silence: the handshake timeout closes it.
    let mut stalled = RawPeer::connect(addr).await;
    stalled.send(&[0, 0, 0]).await;
    stalled.expect_closed().await;

    wait_for_stats(&server, "all four handshakes failed", |s| {
        s.handshakes_failed_total == 4
    })
    .await;
    assert_serves(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_header_closes_the_connection_without_reading_it() {
    let server = start(ServerConfig {
        max_frame_bytes: 1024 * 1024,
        ..ServerConfig::default()
    })
    .await;
    let mut peer = RawPeer::handshaken(server.local_addr()).await;
    // Claims 100 MiB and sends nothing more: refused on the header alone.
    peer.send(&(100u32 * 1024 * 1024).to_be_bytes()).await;
    peer.expect_closed().await;
    wait_for_stats(&server, "the protocol error is counted", |s| {
        s.closed_protocol_error_total == 1
    })
    .await;
    assert_serves(server.local_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_then_eof_closes_the_connection() {
    let server = start(ServerConfig::default()).await;
    let mut peer = RawPeer::handshaken(server.local_addr()).await;
    let request = frame(&request_payload(1, &Req::Echo("x".repeat(100))));
    peer.send(&request[..request.len() / 2]).await;
    peer.stream.shutdown().await.expect("half-close");
    peer.expect_closed().await;
    wait_for_stats(&server, "the truncated frame is counted", |s| {
        s.closed_protocol_error_total == 1
    })
    .await;
    assert_eq!(
        server.stats().requests_total,
        0,
        "no partial request handled"
    );
    assert_serves(server.local_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_frame_sent_too_slowly_is_dropped() {
    let server = start(ServerConfig {
        frame_read_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    let mut peer = RawPeer::handshaken(server.local_addr()).await;
    // Slowloris: part of a header, then nothing.
    peer.send(&[0, 0]).await;
    peer.expect_closed().await;
    wait_for_stats(&server, "the slow frame is counted", |s| {
        s.closed_protocol_error_total == 1
    })
    .await;
    assert_serves(server.local_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_body_gets_an_error_reply_and_the_connection_goes_on() {
    let server = start(ServerConfig::default()).await;
    let newer: Client<ReqV2, Resp> =
        Client::connect(server.local_addr().to_string(), client_config())
            .await
            .expect("connects");

    let err = newer
        .request(ReqV2::Frobnicate { level: 9 })
        .await
        .expect_err("the server does not know Frobnicate");
    match &err {
        NetError::Remote { kind, message, .. } => {
            assert_eq!(*kind, RemoteErrorKind::BadRequest);
            assert!(message.contains("does not decode as"), "{message}");
            assert!(
                message.contains("Req"),
                "names the expected type: {message}"
            );
        }
        other => panic!("expected a remote bad-request error, got {other:?}"),
    }
    // Same connection, a variant the server knows.
    assert_eq!(
        newer
            .request(ReqV2::Add(1, 2))
            .await
            .expect("known variant"),
        Resp::Sum(3)
    );
    let stats = server.stats();
    assert_eq!(
        stats.connections_accepted_total, 1,
        "no reconnect was needed"
    );
    assert_eq!(stats.requests_undecodable_total, 1);

    // Raw: a body of trailing garbage after a valid value is refused too,
    // answered for its id.
    let mut peer = RawPeer::handshaken(server.local_addr()).await;
    let mut payload = request_payload(77, &Req::Add(1, 1));
    payload.extend_from_slice(&[1, 2, 3]);
    peer.send(&frame(&payload)).await;
    let reply = peer.read_frame().await.expect("an error reply");
    let envelope = Envelope::decode(reply.into()).expect("readable envelope");
    assert_eq!((envelope.kind, envelope.id), (Kind::Error, 77));
    let remote: RemoteError = envelope.decode_body().expect("error body");
    assert_eq!(remote.kind, RemoteErrorKind::BadRequest);
    peer.send(&frame(&request_payload(78, &Req::Add(2, 2))))
        .await;
    let reply = peer.read_frame().await.expect("a response");
    let envelope = Envelope::decode(reply.into()).expect("readable envelope");
    assert_eq!((envelope.kind, envelope.id), (Kind::Response, 78));
    assert_eq!(envelope.decode_body::<Resp>(), Ok(Resp::Sum(4)));

    // An envelope whose header is unreadable ends the connection.
    peer.send(&frame(&[0x01, 0x02])).await;
    peer.expect_closed().await;
    wait_for_stats(&server, "the unreadable envelope is counted", |s| {
        s.closed_protocol_error_total == 1
    })
    .await;
    assert_serves(server.local_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_answers_with_an_internal_error() {
    let server = start(ServerConfig::default()).await;
    let client = connect(server.local_addr()).await;
    let err = client
        .request(Req::Panic)
        .await
        .expect_err("handler panics");
    match &err {
        NetError::Remote { kind, message, .. } => {
            assert_eq!(*kind, RemoteErrorKind::Internal);
            assert!(message.contains("asked to panic"), "{message}");
        }
        other => panic!("expected a remote internal error, got {other:?}"),
    }
    assert_eq!(
        client.request(Req::Add(2, 2)).await.expect("add"),
        Resp::Sum(4)
    );
    assert_eq!(server.stats().handler_panics_total, 1);
    assert_eq!(server.stats().connections_accepted_total, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_response_is_an_error_reply_not_a_dead_connection() {
    let server = start(ServerConfig {
        max_frame_bytes: 64 * 1024,
        ..ServerConfig::default()
    })
    .await;
    let client = connect(server.local_addr()).await;
    let err = client
        .request(Req::Big(100_000))
        .await
        .expect_err("too big");
    assert!(
        matches!(&err, NetError::Remote { kind: RemoteErrorKind::Internal, message, .. }
            if message.contains("exceeds the maximum frame size")),
        "{err}"
    );
    match client.request(Req::Big(1000)).await.expect("fits") {
        Resp::Big(bytes) => assert_eq!(bytes.len(), 1000),
        other => panic!("unexpected {other:?}"),
    }
}

/// Sends `count` requests for `reply_bytes`-byte replies and never reads.
async fn flood_without_reading(peer: &mut RawPeer, count: u64, reply_bytes: u32) {
    let mut bytes = Vec::new();
    for id in 0..count {
        bytes.extend_from_slice(&frame(&request_payload(id, &Req::Big(reply_bytes))));
    }
    // The server may close mid-write; that is the point.
    let _ = peer.stream.write_all(&bytes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_is_dropped_when_its_queue_overflows() {
    let server = start(ServerConfig {
        outbound_queue_frames: 16,
        outbound_queue_bytes: 2 * 1024 * 1024,
        max_frame_bytes: 1024 * 1024,
        write_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let mut slow = RawPeer::handshaken(addr).await;
    // 2000 x 60 KB = 120 MB of replies: far beyond socket buffers and the
    // 2 MiB queue, so the queue overflows long before the write timeout.
    flood_without_reading(&mut slow, 2000, 60_000).await;
    // Served while the slow peer is stuck.
    assert_serves(addr).await;
    wait_for_stats(&server, "the slow peer is dropped", |s| {
        s.closed_slow_peer_total == 1
    })
    .await;
    slow.expect_closed().await;
    assert_serves(addr).await;
    wait_for_stats(&server, "only the slow peer's connection is gone", |s| {
        s.connections_active == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_is_dropped_when_a_write_times_out() {
    let server = start(ServerConfig {
        write_timeout: Duration::from_millis(300),
        max_frame_bytes: 1024 * 1024,
        outbound_queue_frames: 2048,
        outbound_queue_bytes: 128 * 1024 * 1024,
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let mut slow = RawPeer::handshaken(addr).await;
    // 1000 x 60 KB = 60 MB: fits the queue, not the socket buffers of a
    // peer that never reads, so the writer stalls until its timeout.
    flood_without_reading(&mut slow, 1000, 60_000).await;
    assert_serves(addr).await;
    wait_for_stats(&server, "the stalled writer gives up", |s| {
        s.closed_slow_peer_total == 1
    })
    .await;
    slow.expect_closed().await;
    assert_serves(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_do_not_stop_a_busy_one() {
    const IDLE: usize = 2000;
    let server = start(ServerConfig {
        max_connections: IDLE + 16,
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let idle = futures::stream::iter(0..IDLE)
        .map(|_| RawPeer::handshaken(addr))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    assert_eq!(idle.len(), IDLE);
    assert_eq!(server.stats().connections_active, IDLE);

    let client = connect(addr).await;
    let started = Instant::now();
    for i in 0..100 {
        assert_eq!(
            client.request(Req::Add(i, 1)).await.expect("add"),
            Resp::Sum(i + 1)
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "100 requests took {:?}",
        started.elapsed()
    );
    assert_eq!(server.stats().connections_active, IDLE + 1);

    drop(idle);
    wait_for_stats(&server, "closed idle connections are released", |s| {
        s.connections_active == 1
    })
    .await;
    assert_eq!(server.shutdown().await, Shutdown::Graceful);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_connections_are_told_server_full() {
    let server = start(ServerConfig {
        max_connections: 4,
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(RawPeer::handshaken(addr).await);
    }
    for _ in 0..3 {
        let err = Client::<Req, Resp>::connect(addr.to_string(), client_config())
            .await
            .expect_err("no room");
        match &err {
            NetError::Rejected { reason, .. } => {
                assert!(reason.contains("server full"), "{reason}")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(server.stats().connections_rejected_full_total, 3);

    // Room again once one idle connection leaves.
    drop(idle.pop());
    wait_for_stats(&server, "a slot frees up", |s| s.connections_active == 3).await;
    assert_serves(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_closes_only_connections_with_nothing_in_flight() {
    let server = start(ServerConfig {
        idle_timeout: Some(Duration::from_millis(300)),
        ..ServerConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let mut idle = RawPeer::handshaken(addr).await;
    idle.expect_closed().await;
    wait_for_stats(&server, "the idle close is counted", |s| {
        s.closed_idle_total == 1
    })
    .await;

    // Silent for over three idle timeouts, but waiting on a reply: the
    // request is not retried, so its success shows the connection stayed.
    let client = connect(addr).await;
    assert_eq!(
        client.request(Req::SleepMs(1000)).await.expect("slow"),
        Resp::Slept
    );
    assert_eq!(server.stats().connections_accepted_total, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_requests_in_flight_finish() {
    let server = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let client = connect(addr).await;
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { client.request(Req::SleepMs(400)).await }
    });
    wait_for_stats(&server, "the request is in flight", |s| {
        s.requests_total == 1
    })
    .await;
    assert_eq!(server.shutdown().await, Shutdown::Graceful);
    assert_eq!(
        in_flight.await.expect("joined").expect("answered"),
        Resp::Slept
    );

    // The port is closed now.
    let quick = brine_net::ClientConfig {
        connect_attempts: 1,
        ..client_config()
    };
    let err = Client::<Req, Resp>::connect(addr.to_string(), quick)
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, NetError::Unreachable { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_grace_bounds_a_handler_that_never_finishes() {
    let server = start(ServerConfig {
        shutdown_grace: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let client = connect(server.local_addr()).await;
    let hung = tokio::spawn({
        let client = client.clone();
        async move { client.request(Req::Hang).await }
    });
    wait_for_stats(&server, "the request is in flight", |s| {
        s.requests_total == 1
    })
    .await;
    let started = Instant::now();
    assert_eq!(server.shutdown().await, Shutdown::GraceExpired);
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = hung.await.expect("joined").expect_err("never answered");
    assert!(matches!(err, NetError::ConnectionLost { .. }), "{err}");
}
