//! Client scenarios: reconnection, failure of requests in flight, timeouts,
//! and servers that answer the handshake badly.

mod common;

use std::time::Duration;

use brine_net::{Client, ClientConfig, NetError, ServerConfig, Shutdown};
use common::*;
use futures::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reconnects_after_the_server_restarts_on_the_same_port() {
    let first = start(ServerConfig::default()).await;
    let addr = first.local_addr();
    let client: Client<Req, Resp> = Client::connect(
        addr.to_string(),
        ClientConfig {
            connect_attempts: 3,
            reconnect_backoff_initial: Duration::from_millis(20),
            ..client_config()
        },
    )
    .await
    .expect("connects");
    assert_eq!(
        client.request(Req::Add(1, 2)).await.expect("add"),
        Resp::Sum(3)
    );

    assert_eq!(first.shutdown().await, Shutdown::Graceful);
    wait_until("the client notices the closed connection", || {
        let connected = client.is_connected();
        async move { !connected }
    })
    .await;

    // Nobody listens: bounded attempts, then a clear error.
    let started = Instant::now();
    let err = client
        .request(Req::Add(1, 1))
        .await
        .expect_err("server down");
    match &err {
        NetError::Unreachable { attempts, last, .. } => {
            assert_eq!(*attempts, 3);
            assert!(matches!(**last, NetError::Connect { .. }), "{last}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&addr.to_string()),
        "names the address: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let second = brine_net::Server::bind(addr, ServerConfig::default(), handle)
        .await
        .expect("rebinds the same port");
    assert_eq!(
        client.request(Req::Add(2, 3)).await.expect("add"),
        Resp::Sum(5)
    );
    assert!(client.is_connected());
    assert_eq!(second.stats().connections_accepted_total, 1);
}

/// A server replaced by one at another address (`Client::set_addr`): the
/// connection to the old one is dropped and the next request goes to the
/// new one; the same address again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_its_server_to_another_address() {
    let old = start(ServerConfig::default()).await;
    let new = start(ServerConfig::default()).await;
    let client: Client<Req, Resp> = Client::connect(old.local_addr().to_string(), client_config())
        .await
        .expect("connects");
    assert_eq!(
        client.request(Req::Add(1, 2)).await.expect("add"),
        Resp::Sum(3)
    );
    let to = new.local_addr().to_string();
    client.set_addr(&to);
    assert_eq!(client.addr(), to);
    assert!(!client.is_connected(), "the old connection is dropped");
    assert_eq!(
        client.request(Req::Add(2, 2)).await.expect("add"),
        Resp::Sum(4)
    );
    client.set_addr(&to);
    assert!(
        client.is_connected(),
        "the same address keeps the connection"
    );
    assert_eq!(new.stats().connections_accepted_total, 1);
    assert_eq!(old.stats().connections_accepted_total, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_fails_every_request_in_flight_then_reconnects() {
    let server = start(ServerConfig::default()).await;
    let addr = server.local_addr();
    let client = connect(addr).await;
    let hung: Vec<_> = (0..5)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.request(Req::Hang).await })
        })
        .collect();
    wait_for_stats(&server, "all five are in flight", |s| s.requests_total == 5).await;

    // Dropping the server closes its connections at once.
    let started = Instant::now();
    drop(server);
    for result in join_all(hung).await {
        let err = result.expect("joined").expect_err("never answered");
        match &err {
            NetError::ConnectionLost { addr: lost, reason } => {
                assert_eq!(lost, &addr.to_string());
                assert!(!reason.is_empty());
            }
            other => panic!("expected ConnectionLost, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed fast, not by request timeout"
    );

    let _restarted = brine_net::Server::bind(addr, ServerConfig::default(), handle)
        .await
        .expect("rebinds");
    assert_eq!(
        client.request(Req::Add(4, 4)).await.expect("add"),
        Resp::Sum(8)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_fails_that_request_and_drops_its_late_reply() {
    let server = start(ServerConfig::default()).await;
    let client: Client<Req, Resp> = Client::connect(
        server.local_addr().to_string(),
        ClientConfig {
            request_timeout: Duration::from_millis(100),
            ..client_config()
        },
    )
    .await
    .expect("connects");

    let started = Instant::now();
    let err = client
        .request(Req::SleepMs(400))
        .await
        .expect_err("too slow");
    match &err {
        NetError::Timeout { after, .. } => assert_eq!(*after, Duration::from_millis(100)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));

    // Let the late reply arrive; it must not be taken for another answer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resp = client
        .request_with_timeout(Req::Echo("next".into()), PATIENCE)
        .await
        .expect("same connection still works");
    assert_eq!(resp, Resp::Echo("next".into()));
    assert_eq!(server.stats().connections_accepted_total, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_fails_before_it_is_sent() {
    let server = start(ServerConfig::default()).await;
    let client: Client<Req, Resp> = Client::connect(
        server.local_addr().to_string(),
        ClientConfig {
            max_frame_bytes: 1024,
            ..client_config()
        },
    )
    .await
    .expect("connects");
    let err = client
        .request(Req::Echo("x".repeat(2000)))
        .await
        .expect_err("too big");
    assert!(
        matches!(
            err,
            NetError::FrameTooLarge {
                what: "request",
                max: 1024,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        client.request(Req::Add(1, 1)).await.expect("add"),
        Resp::Sum(2)
    );
    assert_eq!(server.stats().requests_total, 1);
}

/// A fake server that answers every connection's hello with `answer`.
async fn fake_server(answer: Vec<u8>) -> std::net::SocketAddr {
    let listener = TcpListener::bind(localhost()).await.expect("binds");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut hello = [0u8; 64];
                let _ = stream.read(&mut hello).await;
                let _ = stream.write_all(&answer).await;
                let _ = stream.shutdown().await;
                let _ = stream.read(&mut hello).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_handshake_answers_are_clear_errors() {
    init_tracing();
    let mut reject = vec![0x01];
    reject.extend_from_slice(b"protocol version 1 not supported, server speaks 2");
    let addr = fake_server(frame(&reject)).await;
    let err = Client::<Req, Resp>::connect(addr.to_string(), client_config())
        .await
        .expect_err("rejected");
    match &err {
        NetError::Rejected { reason, .. } => {
            assert_eq!(reason, "protocol version 1 not supported, server speaks 2")
        }
        other => panic!("expected Rejected, got {other:?}"),
    }

    let addr = fake_server(frame(&[0x00, 0x00, 0x02])).await;
    let err = Client::<Req, Resp>::connect(addr.to_string(), client_config())
        .await
        .expect_err("wrong version accepted");
    assert!(
        matches!(
            err,
            NetError::VersionMismatch {
                ours: 1,
                theirs: 2,
                ..
            }
        ),
        "not retried, names both versions: {err}"
    );

    let addr = fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()).await;
    let err = Client::<Req, Resp>::connect(addr.to_string(), client_config())
        .await
        .expect_err("garbage answer");
    assert!(
        matches!(&err, NetError::Unreachable { last, .. }
            if matches!(**last, NetError::Handshake { .. })),
        "{err}"
    );
}
