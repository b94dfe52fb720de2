//! The client library of a running brine cluster (`brine server` nodes).
//!
//! ```text
//!  Client ── call(proc, args) ──────────► a node (round-robin) coordinates it
//!         ── begin() ─► Transaction ── execute(sql) / commit / abort ──► the node that began it
//!         ── status() ──────────────────► every node
//! ```
//!
//! The procedures run on the nodes, so the client needs only their names
//! and arguments. Calls are spread over the nodes; a call is sent to the
//! next node only when the first could not be reached at all (a call that
//! reached a node and then lost its connection may have committed, so it
//! is reported, never silently sent twice). An interactive transaction
//! stays on the node that began it; one left idle for a minute is aborted
//! by the node.
//!
//! ```no_run
//! # async fn example() -> Result<(), brine_client::ClientError> {
//! let client = brine_client::Client::from_file(std::path::Path::new("cluster.toml"))?;
//! let outcome = client.call("transfer", vec![1.into(), 2.into(), 10.into()]).await?;
//! let mut txn = client.begin().await?;
//! let rows = txn.execute("SELECT balance FROM account WHERE id = $1", vec![1.into()]).await?;
//! txn.commit().await?;
//! # let _ = (outcome, rows);
//! # Ok(())
//! # }
//! ```

mod file;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use brine_cluster::remote::{NodeStatus, PeerClient, WireRequest, WireResponse};
use brine_core::Value;
use brine_net::{ClientConfig, NetError};
pub use brine_sql::QueryResult;

pub use file::{ClusterFile, NodeEntry};

/// What can go wrong talking to a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cluster file `{path}`: {reason}")]
    File { path: String, reason: String },
    /// The node could not be reached, or the connection failed mid-request.
    #[error("node {node} at {address}: {source}")]
    Net {
        node: u32,
        address: String,
        #[source]
        source: NetError,
    },
    /// The cluster answered with an error (a user abort, a constraint,
    /// exhausted retries, a bad statement, ...).
    #[error(transparent)]
    Engine(#[from] brine_core::Error),
    /// An answer this client does not understand (a version mismatch).
    #[error("protocol: {0}")]
    Protocol(String),
}

/// A finished call: the procedure's result values and how many attempts
/// (concurrency-control retries + 1) it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Called {
    pub values: Vec<Value>,
    pub attempts: u32,
}

struct Node {
    id: u32,
    client: PeerClient,
}

/// A connection to a cluster (cheap to clone; share it between tasks).
#[derive(Clone)]
pub struct Client {
    nodes: Arc<Vec<Node>>,
    next: Arc<AtomicUsize>,
}

impl Client {
    /// A client of every node of the cluster file; connects lazily.
    pub fn from_file(path: &std::path::Path) -> Result<Client, ClientError> {
        Client::new(&ClusterFile::read(path)?)
    }

    pub fn new(file: &ClusterFile) -> Result<Client, ClientError> {
        let mut nodes = Vec::new();
        for n in &file.nodes {
            let client =
                PeerClient::new(n.address.clone(), ClientConfig::default()).map_err(|source| {
                    ClientError::Net {
                        node: n.id,
                        address: n.address.clone(),
                        source,
                    }
                })?;
            nodes.push(Node { id: n.id, client });
        }
        Ok(Client {
            nodes: Arc::new(nodes),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A client that sends everything to one node.
    pub fn single(node: u32, address: &str) -> Result<Client, ClientError> {
        let client =
            PeerClient::new(address.to_string(), ClientConfig::default()).map_err(|source| {
                ClientError::Net {
                    node,
                    address: address.into(),
                    source,
                }
            })?;
        Ok(Client {
            nodes: Arc::new(vec![Node { id: node, client }]),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn net_error(node: &Node, source: NetError) -> ClientError {
        ClientError::Net {
            node: node.id,
            address: node.client.addr().to_string(),
            source,
        }
    }

    /// Sends `req` to the next node; moves on only if a node could not be
    /// reached at all, so the request cannot have run there.
    async fn round_robin(
        &self,
        make: impl Fn() -> WireRequest,
    ) -> Result<(usize, WireResponse), ClientError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.nodes.len() {
            let k = (start + i) % self.nodes.len();
            let node = &self.nodes[k];
            match node.client.request(make()).await {
                Ok(r) => return Ok((k, r)),
                Err(e) if never_sent(&e) => last = Some(Client::net_error(node, e)),
                Err(e) => return Err(Client::net_error(node, e)),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Protocol("the cluster has no nodes".into())))
    }

    /// Calls a procedure; a node coordinates it (with its retries).
    pub async fn call(&self, procedure: &str, args: Vec<Value>) -> Result<Called, ClientError> {
        let (_, answer) = self
            .round_robin(|| WireRequest::Call {
                procedure: procedure.to_string(),
                args: args.clone(),
            })
            .await?;
        match answer {
            WireResponse::Called(r) => {
                let (values, attempts) = r?;
                Ok(Called { values, attempts })
            }
            other => Err(unexpected(other)),
        }
    }

    /// Begins an interactive transaction on the next node.
    pub async fn begin(&self) -> Result<Transaction, ClientError> {
        let (k, answer) = self.round_robin(|| WireRequest::Begin).await?;
        match answer {
            WireResponse::Begun(session) => Ok(Transaction {
                client: self.clone(),
                node: k,
                session,
                open: true,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Fault tests (`brine cut`): cuts nodes `side` off from the others
    /// for `d`, at every node's transport (each refuses to reach the other
    /// side until then).
    pub async fn cut(&self, side: &[u32], d: std::time::Duration) -> Result<(), ClientError> {
        for node in self.nodes.iter() {
            let inside = side.contains(&node.id);
            let peers: Vec<u32> = self
                .nodes
                .iter()
                .map(|n| n.id)
                .filter(|id| *id != node.id && side.contains(id) != inside)
                .collect();
            if peers.is_empty() {
                continue;
            }
            let req = WireRequest::Cut {
                peers,
                millis: d.as_millis() as u64,
            };
            match node.client.request(req).await {
                Ok(WireResponse::Done(r)) => r?,
                Ok(other) => return Err(unexpected(other)),
                Err(e) => return Err(Client::net_error(node, e)),
            }
        }
        Ok(())
    }

    /// Every node's status, or why it could not be had.
    pub async fn status(&self) -> Vec<(u32, Result<NodeStatus, ClientError>)> {
        let mut out = Vec::new();
        for node in self.nodes.iter() {
            let r = match node.client.request(WireRequest::NodeStatus).await {
                Ok(WireResponse::NodeStatus(s)) => Ok(s),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(Client::net_error(node, e)),
            };
            out.push((node.id, r));
        }
        out
    }
}

/// True when the request cannot have reached the node's handler.
fn never_sent(e: &NetError) -> bool {
    matches!(
        e,
        NetError::Connect { .. }
            | NetError::Cut { .. }
            | NetError::ConnectTimeout { .. }
            | NetError::Unreachable { .. }
            | NetError::Handshake { .. }
            | NetError::VersionMismatch { .. }
            | NetError::Rejected { .. }
    )
}

fn unexpected(answer: WireResponse) -> ClientError {
    match answer {
        WireResponse::Refused(e) => ClientError::Engine(e),
        other => ClientError::Protocol(format!("unexpected answer {other:?}")),
    }
}

/// An interactive transaction on one node. Statements run one at a time.
/// Dropping it without `commit` or `abort` leaves it to the node, which
/// aborts it after a minute idle.
pub struct Transaction {
    client: Client,
    node: usize,
    session: u64,
    open: bool,
}

impl Transaction {
    async fn send(&self, req: WireRequest) -> Result<WireResponse, ClientError> {
        let node = &self.client.nodes[self.node];
        node.client
            .request(req)
            .await
            .map_err(|e| Client::net_error(node, e))
    }

    /// Runs one SQL statement (`$1`, `$name` parameters bound in order of
    /// first appearance).
    pub async fn execute(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<QueryResult, ClientError> {
        let answer = self
            .send(WireRequest::Execute {
                session: self.session,
                sql: sql.to_string(),
                params,
            })
            .await?;
        match answer {
            WireResponse::Rows(r) => Ok(r?),
            other => Err(unexpected(other)),
        }
    }

    pub async fn commit(mut self) -> Result<(), ClientError> {
        self.open = false;
        match self
            .send(WireRequest::Commit {
                session: self.session,
            })
            .await?
        {
            WireResponse::Done(r) => Ok(r?),
            other => Err(unexpected(other)),
        }
    }

    pub async fn abort(mut self) -> Result<(), ClientError> {
        self.open = false;
        match self
            .send(WireRequest::Abort {
                session: self.session,
            })
            .await?
        {
            WireResponse::Done(r) => Ok(r?),
            other => Err(unexpected(other)),
        }
    }

    /// The node-side session id (for logs).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// True until `commit` or `abort` was sent.
    pub fn is_open(&self) -> bool {
        self.open
    }
}
