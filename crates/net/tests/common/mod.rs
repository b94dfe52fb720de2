//! Shared pieces of the transport's scenario tests: a small protocol, its
//! handler, a raw-socket peer that can misbehave, and polling helpers that
//! wait on server counters instead of sleeping.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use brine_net::wire::{Envelope, Kind};
use brine_net::{Client, ClientConfig, Server, ServerConfig, ServerStats};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Upper bound for anything a test waits for; far above every configured
/// timeout, so a loaded machine slows tests down instead of failing them.
pub const PATIENCE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Req {
    Echo(String),
    Add(u64, u64),
    SleepMs(u64),
    Big(u32),
    Panic,
    Hang,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Resp {
    Echo(String),
    Sum(u64),
    Slept,
    Big(Vec<u8>),
}

/// A newer client's request type: the same variants in the same order,
/// plus one the server has never heard of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReqV2 {
    Echo(String),
    Add(u64, u64),
    SleepMs(u64),
    Big(u32),
    Panic,
    Hang,
    Frobnicate { level: u32 },
}

pub async fn handle(req: Req) -> Resp {
    match req {
        Req::Echo(s) => Resp::Echo(s),
        Req::Add(a, b) => Resp::Sum(a.wrapping_add(b)),
        Req::SleepMs(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Resp::Slept
        }
        Req::Big(n) => Resp::Big(vec![0xAB; n as usize]),
        Req::Panic => panic!("asked to panic"),
        Req::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Resp::Slept
        }
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

pub fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

pub async fn start(config: ServerConfig) -> Server {
    init_tracing();
    Server::bind(localhost(), config, handle)
        .await
        .expect("server binds")
}

pub fn client_config() -> ClientConfig {
    ClientConfig {
        name: "test-client".into(),
        request_timeout: PATIENCE,
        ..ClientConfig::default()
    }
}

pub async fn connect(addr: SocketAddr) -> Client<Req, Resp> {
    Client::connect(addr.to_string(), client_config())
        .await
        .expect("client connects")
}

/// The server still answers a fresh, well-behaved client correctly.
pub async fn assert_serves(addr: SocketAddr) {
    let client = connect(addr).await;
    assert_eq!(
        client.request(Req::Add(40, 2)).await.expect("add"),
        Resp::Sum(42)
    );
    assert_eq!(
        client
            .request(Req::Echo("still here".into()))
            .await
            .expect("echo"),
        Resp::Echo("still here".into())
    );
}

/// Polls the server's counters until `done` holds; panics after PATIENCE.
pub async fn wait_for_stats(server: &Server, what: &str, done: impl Fn(&ServerStats) -> bool) {
    wait_until(what, || {
        let finished = done(&server.stats());
        async move { finished }
    })
    .await;
}

pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A hand-driven peer, for sending what a real client never would.
pub struct RawPeer {
    pub stream: TcpStream,
}

pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

pub fn hello_payload(version: u16, name: &str) -> Vec<u8> {
    let mut out = b"BRINE".to_vec();
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

pub fn request_payload<T: Serialize>(id: u64, req: &T) -> Vec<u8> {
    Envelope::encode(Kind::Request, id, req)
        .expect("request encodes")
        .to_vec()
}

impl RawPeer {
    pub async fn connect(addr: SocketAddr) -> RawPeer {
        let stream = TcpStream::connect(addr).await.expect("tcp connect");
        stream.set_nodelay(true).expect("nodelay");
        RawPeer { stream }
    }

    /// Connects and completes a valid handshake.
    pub async fn handshaken(addr: SocketAddr) -> RawPeer {
        let mut peer = RawPeer::connect(addr).await;
        peer.send(&frame(&hello_payload(1, "raw"))).await;
        let reply = peer.read_frame().await.expect("handshake answer");
        assert_eq!(reply, [0x00, 0x00, 0x01], "accept, version 1");
        peer
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("raw write");
    }

    /// The next frame's payload, or None at EOF / reset.
    pub async fn read_frame(&mut self) -> Option<Vec<u8>> {
        let read = async {
            let mut len = [0u8; 4];
            self.stream.read_exact(&mut len).await.ok()?;
            let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
            self.stream.read_exact(&mut payload).await.ok()?;
            Some(payload)
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("a frame or EOF within PATIENCE")
    }

    /// Asserts the server closes the connection: reads (and discards)
    /// until EOF or reset, failing after PATIENCE.
    pub async fn expect_closed(&mut self) {
        let drain = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(PATIENCE, drain)
            .await
            .expect("server closes the connection");
    }
}
