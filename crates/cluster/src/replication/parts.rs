//! Raft messages larger than a frame (the image of a large partition: its
//! checkpoint and log segments) cross between nodes in parts (issue 39).
//! A peer's sender batches small messages into requests of up to
//! [`PART_BYTES`] and cuts a larger one into parts of that size, sent in
//! order over the peer connection (`WireRequest::RaftPart`); the receiver
//! puts them together ([`Assembly`]) and delivers the whole message. A
//! part lost loses its message, which raft sends again; a message whose
//! parts stop coming is dropped after [`PART_PATIENCE`].
//!
//! ```text
//!  sender:   [m1 m2 m3] ──► Raft { msgs }            (small: one request)
//!            image (40 MiB) ──► RaftPart 0/10, 1/10, ... 9/10
//!  receiver: parts by key ──► all 10 ──► deliver(log, whole)
//! ```

use std::collections::HashMap;
use std::time::{Duration, Instant};

use brine_core::{Error, Result};
use serde::{Deserialize, Serialize};

use super::LogName;
use crate::remote::WireRequest;

/// Part `index` of `total` of one raft message of `log`, the message
/// named by `key` (`WireRequest::RaftPart`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Part {
    pub log: LogName,
    pub key: u64,
    pub index: u32,
    pub total: u32,
    pub bytes: Vec<u8>,
}

/// The most bytes of raft messages one request carries (well below the
/// transport's frame bound, 16 MiB).
pub(crate) const PART_BYTES: usize = 4 << 20;

/// How long the parts of one message may take to arrive.
pub(crate) const PART_PATIENCE: Duration = Duration::from_secs(60);

/// The requests that carry `msgs` to a peer, in order: batches of up to
/// `limit` bytes, and each message larger than that alone, in parts
/// (`key` names the message's parts: draw it at random).
pub(crate) fn requests(
    msgs: Vec<(LogName, Vec<u8>)>,
    limit: usize,
    mut key: impl FnMut() -> u64,
) -> Vec<WireRequest> {
    let limit = limit.max(1);
    let mut out = Vec::new();
    let mut batch: Vec<(LogName, Vec<u8>)> = Vec::new();
    let mut batched = 0;
    for (log, bytes) in msgs {
        if bytes.len() > limit {
            let key = key();
            let total = bytes.len().div_ceil(limit) as u32;
            tracing::info!(
                bytes = bytes.len(),
                parts = total,
                "a raft message of {log} sent in parts"
            );
            for (index, part) in bytes.chunks(limit).enumerate() {
                out.push(WireRequest::RaftPart(Part {
                    log,
                    key,
                    index: index as u32,
                    total,
                    bytes: part.to_vec(),
                }));
            }
            continue;
        }
        if batched + bytes.len() > limit && !batch.is_empty() {
            out.push(WireRequest::Raft {
                msgs: std::mem::take(&mut batch),
            });
            batched = 0;
        }
        batched += bytes.len();
        batch.push((log, bytes));
    }
    if !batch.is_empty() {
        out.push(WireRequest::Raft { msgs: batch });
    }
    out
}

/// The messages arriving in parts, by key.
#[derive(Default)]
pub(crate) struct Assembly {
    partial: parking_lot::Mutex<HashMap<u64, Partial>>,
}

struct Partial {
    log: LogName,
    parts: Vec<Option<Vec<u8>>>,
    missing: usize,
    since: Instant,
}

impl Assembly {
    /// A part of a message: the whole message once every part came,
    /// `None` before.
    pub(crate) fn add(&self, part: Part) -> Result<Option<Vec<u8>>> {
        let Part {
            log,
            key,
            index,
            total,
            bytes,
        } = part;
        if total == 0 || index >= total || total > 1 << 20 {
            return Err(Error::Transport(format!(
                "part {index} of {total} of a raft message of {log}: no such part"
            )));
        }
        let mut partial = self.partial.lock();
        partial.retain(|_, p| p.since.elapsed() < PART_PATIENCE);
        let p = partial.entry(key).or_insert_with(|| Partial {
            log,
            parts: vec![None; total as usize],
            missing: total as usize,
            since: Instant::now(),
        });
        if p.log != log || p.parts.len() != total as usize {
            partial.remove(&key);
            return Err(Error::Transport(format!(
                "parts of one raft message disagree (log {log}, {total} parts)"
            )));
        }
        if p.parts[index as usize].replace(bytes).is_none() {
            p.missing -= 1;
        }
        if p.missing > 0 {
            return Ok(None);
        }
        let p = partial.remove(&key).expect("the message being assembled");
        Ok(Some(p.parts.into_iter().flatten().flatten().collect()))
    }

    /// Messages whose parts are still coming.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.partial.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Small messages go in batches of at most the limit, a larger one
    /// alone in parts, and the parts put together give it back whole, in
    /// whatever order they come, once.
    #[test]
    fn a_large_message_goes_in_parts_and_comes_back_whole() {
        let log = LogName::Partition(3);
        let big = message(10_000, 7);
        let msgs = vec![
            (log, message(300, 1)),
            (log, message(300, 2)),
            (log, big.clone()),
            (LogName::Decisions(1), message(900, 3)),
        ];
        let mut keys = 40..;
        let reqs = requests(msgs, 1024, || keys.next().expect("a key"));
        let mut batches = Vec::new();
        let mut parts = Vec::new();
        for r in reqs {
            match r {
                WireRequest::Raft { msgs } => batches.push(msgs.len()),
                WireRequest::RaftPart(part) => {
                    assert!(part.bytes.len() <= 1024);
                    parts.push(part);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(
            batches,
            [2, 1],
            "the two small ones together, the third alone"
        );
        assert_eq!(parts.len(), 10);
        let assembly = Assembly::default();
        parts.reverse();
        let mut whole = Vec::new();
        for part in parts {
            if let Some(m) = assembly.add(part).expect("a part") {
                whole.push(m);
            }
        }
        assert_eq!(whole, [big]);
        assert_eq!(assembly.pending(), 0);
    }

    /// A part that cannot be one is refused; parts that disagree drop
    /// their message.
    #[test]
    fn bad_parts_are_refused() {
        let a = Assembly::default();
        let part = |p: u32, index: u32, total: u32| Part {
            log: LogName::Partition(p),
            key: 1,
            index,
            total,
            bytes: vec![1],
        };
        assert!(a.add(part(0, 2, 2)).is_err());
        assert!(a.add(part(0, 0, 0)).is_err());
        assert_eq!(a.add(part(0, 0, 2)).expect("first part"), None);
        assert!(a.add(part(1, 1, 2)).is_err());
        assert_eq!(a.pending(), 0, "the disagreeing message is dropped");
    }
}
