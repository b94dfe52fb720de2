//! Log records: the frame every record travels in, the record kinds, and the
//! payloads of the kinds this version writes. `docs/storage.md` is the
//! reference; this file is its implementation.
//!
//! ```text
//!  frame (24-byte header, then payload):
//!   0  len      u32  payload length in bytes
//!   4  crc      u32  crc32c over bytes 8..24 of the header and the payload
//!   8  lsn      u64  the frame's own position in the log (bytes since lsn 0)
//!  16  prev_crc u32  crc of the previous frame: the checksum chain
//!  20  kind     u8   RecordKind
//!  21  version  u8   payload version of that kind (1 today)
//!  22  flags    u16  0; reserved
//! ```
//!
//! Because a frame carries its own lsn and its predecessor's crc, a reader
//! can tell a valid frame found anywhere in a file from garbage, which is how
//! it tells a torn tail (nothing valid after the bad frame) from corruption
//! in the middle (a valid frame after it).

use std::ops::Bound;

use brine_core::{IndexId, Key, LockTarget, Row, TableId, TxnId};

use super::codec::{put_txn, put_u16, put_u32, put_u8, DecodeError, DecodeResult, Decoder};

pub const FRAME_HEADER_LEN: usize = 24;
/// Largest payload of one frame. Bulk loads are split below it.
pub const MAX_PAYLOAD_LEN: usize = 64 << 20;
/// Payload version this build writes for every kind.
pub const VERSION: u8 = 1;

/// What a record is. Values are stable on disk: add, never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// A single-partition transaction committed here: txn + redo.
    Commit = 1,
    /// A 2PC participant prepared (logged before voting yes): txn,
    /// coordinator node + redo.
    Prepare = 2,
    /// The outcome of a transaction this partition prepared: txn + commit?
    Outcome = 3,
    /// A coordinator's commit decision (only commits are logged: presumed
    /// abort): txn + participants.
    Decision = 4,
    /// Bulk-loaded rows (outside any transaction): redo only.
    Load = 5,
    /// History recording: the version a transaction left each key it
    /// wrote at (`crate::KeyVersion`); written just before its Commit or
    /// Prepare record, and valid only if it committed.
    Versions = 6,
    /// Salt: what an alkaline subtransaction ran at this partition (the
    /// results of its statements, and for the first one the procedure and
    /// its arguments); written just before the subtransaction's Commit or
    /// Prepare record, and valid only if that subtransaction committed.
    BaseContext = 16,
    /// Salt: the BASE transaction finished (unforced; written when its
    /// locks are released).
    BaseEnd = 17,
    /// Mediator, in a partition's own version log: versions stamped with
    /// their timestamps (native puts and write-backs).
    MediatorVersions = 32,
    /// Mediator, in a coordinator's commit log: a transaction's commit
    /// timestamp and write set, forced before its write-back.
    MediatorCommit = 33,
    /// Mediator: that transaction's write-back finished (unforced).
    MediatorDone = 34,
}

impl RecordKind {
    pub fn from_u8(v: u8) -> Option<RecordKind> {
        Some(match v {
            1 => RecordKind::Commit,
            2 => RecordKind::Prepare,
            3 => RecordKind::Outcome,
            4 => RecordKind::Decision,
            5 => RecordKind::Load,
            6 => RecordKind::Versions,
            16 => RecordKind::BaseContext,
            17 => RecordKind::BaseEnd,
            32 => RecordKind::MediatorVersions,
            33 => RecordKind::MediatorCommit,
            34 => RecordKind::MediatorDone,
            _ => return None,
        })
    }
}

/// One row change to redo: the after-image, or a delete.
#[derive(Clone, Debug, PartialEq)]
pub enum RedoOp {
    Put {
        table: TableId,
        row: Row,
    },
    Delete {
        table: TableId,
        key: Key,
    },
    /// An update of one row, column by column: the values of the columns
    /// the transaction set (as it left them) and the total delta of those
    /// it only incremented (`SET c = c + e`). Logged instead of a whole
    /// after-image where several running transactions may change one row
    /// (Callas' Runtime Pipelining): an image would carry, or lose, the
    /// others' changes, whichever commits first, while a column another
    /// sets after it waits for it (that one depends on it), and deltas
    /// commute. Applied once: a checkpoint holds only the rows as
    /// committed before its position, so every record after it is new.
    Update {
        table: TableId,
        key: Key,
        set: Vec<(usize, brine_core::Value)>,
        add: Vec<(usize, brine_core::Value)>,
    },
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Commit {
        txn: TxnId,
        redo: Vec<RedoOp>,
    },
    Prepare {
        txn: TxnId,
        coordinator: u32,
        redo: Vec<RedoOp>,
    },
    Outcome {
        txn: TxnId,
        commit: bool,
    },
    Decision {
        txn: TxnId,
        participants: Vec<u32>,
    },
    Load {
        redo: Vec<RedoOp>,
    },
    BaseContext(BaseContext),
    BaseEnd {
        owner: TxnId,
    },
    Versions {
        txn: TxnId,
        versions: Vec<crate::KeyVersion>,
    },
}

/// Salt: one statement's result, as this partition produced it (a
/// broadcast statement's parts are merged at replay).
#[derive(Clone, Debug, PartialEq)]
pub struct BaseEntry {
    /// Position of the statement in the BASE transaction.
    pub seq: u32,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    pub affected: u64,
}

/// Salt: the context of a BASE transaction at one partition: what its
/// alkaline subtransaction `sub` ran here, or (in a checkpoint) what its
/// committed subtransactions ran here so far.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseContext {
    pub sub: TxnId,
    pub owner: TxnId,
    /// The procedure and its arguments (logged with the first statement).
    pub intro: Option<(String, Vec<brine_core::Value>)>,
    pub entries: Vec<BaseEntry>,
    /// The rows it wrote here, by primary key: saline-locked until the BASE
    /// transaction ends, and locked again after a restart until it does
    /// (an older log without them decodes with none).
    pub locked: Vec<(TableId, Key)>,
    /// What it read here and did not write, and kept locked: keys of any
    /// index (a point read) and intervals of one (a range read). Likewise
    /// saline-locked (so no ACID transaction overwrites, or inserts into,
    /// what the BASE transaction's later steps rely on), and read-locked
    /// again after a restart (a log from before 2026-11-27 has none).
    pub read: Vec<LockTarget>,
    /// When the run records a history: what it read and wrote here, each
    /// part an encoded list of the history's operations (opaque to the
    /// log), so a roll-forward's record holds what committed here even
    /// after this partition moved or restarted (a log from before
    /// 2026-11-28 has none).
    pub recorded: Vec<Vec<u8>>,
}

impl BaseContext {
    /// Adds what `other` (a later subtransaction of the same owner) ran.
    pub fn absorb(&mut self, other: BaseContext) {
        if self.intro.is_none() {
            self.intro = other.intro;
        }
        self.entries.extend(other.entries);
        self.locked.extend(other.locked);
        self.read.extend(other.read);
        self.recorded.extend(other.recorded);
    }
}

/// Encodes a BaseContext payload.
pub fn encode_base_context(buf: &mut Vec<u8>, c: &BaseContext) {
    put_txn(buf, c.sub);
    put_txn(buf, c.owner);
    match &c.intro {
        Some((name, args)) => {
            put_u8(buf, 1);
            super::codec::put_bytes(buf, name.as_bytes());
            super::codec::put_values(buf, args);
        }
        None => put_u8(buf, 0),
    }
    put_u32(buf, c.entries.len() as u32);
    for e in &c.entries {
        put_u32(buf, e.seq);
        super::codec::put_u64(buf, e.affected);
        put_u16(buf, e.columns.len() as u16);
        for col in &e.columns {
            super::codec::put_bytes(buf, col.as_bytes());
        }
        put_u32(buf, e.rows.len() as u32);
        for r in &e.rows {
            super::codec::put_values(buf, r);
        }
    }
    put_u32(buf, c.locked.len() as u32);
    for (table, key) in &c.locked {
        put_u32(buf, table.0);
        super::codec::put_values(buf, key.values());
    }
    put_u32(buf, c.read.len() as u32);
    for target in &c.read {
        put_target(buf, target);
    }
    put_u32(buf, c.recorded.len() as u32);
    for part in &c.recorded {
        super::codec::put_bytes(buf, part);
    }
}

/// A lock target: `0` table, index, key (a point); or `1` table, index,
/// and its two bounds, each `0` unbounded, `1` included or `2` excluded,
/// then its key (a range).
fn put_target(buf: &mut Vec<u8>, target: &LockTarget) {
    let put_bound = |buf: &mut Vec<u8>, b: &Bound<Key>| match b {
        Bound::Unbounded => put_u8(buf, 0),
        Bound::Included(k) => {
            put_u8(buf, 1);
            super::codec::put_values(buf, k.values());
        }
        Bound::Excluded(k) => {
            put_u8(buf, 2);
            super::codec::put_values(buf, k.values());
        }
    };
    match target {
        LockTarget::Point { table, index, key } => {
            put_u8(buf, 0);
            put_u32(buf, table.0);
            put_u32(buf, index.0);
            super::codec::put_values(buf, key.values());
        }
        LockTarget::Range {
            table,
            index,
            lo,
            hi,
        } => {
            put_u8(buf, 1);
            put_u32(buf, table.0);
            put_u32(buf, index.0);
            put_bound(buf, lo);
            put_bound(buf, hi);
        }
    }
}

fn target(d: &mut Decoder<'_>) -> DecodeResult<LockTarget> {
    let bound = |d: &mut Decoder<'_>| -> DecodeResult<Bound<Key>> {
        Ok(match d.u8("bound")? {
            0 => Bound::Unbounded,
            1 => Bound::Included(d.bound_key()?),
            2 => Bound::Excluded(d.bound_key()?),
            b => return Err(DecodeError(format!("bad bound tag {b}"))),
        })
    };
    let kind = d.u8("lock target")?;
    let table = TableId(d.u32("table")?);
    let index = IndexId(d.u32("index")?);
    Ok(match kind {
        0 => LockTarget::Point {
            table,
            index,
            key: d.key()?,
        },
        1 => LockTarget::Range {
            table,
            index,
            lo: bound(d)?,
            hi: bound(d)?,
        },
        k => return Err(DecodeError(format!("bad lock target tag {k}"))),
    })
}

/// Decodes a BaseContext payload that fills `d` (a log record's, or one
/// sent alone), as written by [`encode_base_context`] or, without its
/// locked rows or without the rows it read, before.
pub fn decode_base_context(d: &mut Decoder<'_>) -> DecodeResult<BaseContext> {
    decode_base_context_in(d, None)
}

/// Decodes a BaseContext payload followed by more (a checkpoint's list):
/// `row_lists` says how many lists it was written with after its entries
/// (0: none; 1: its locked rows; 2: those and the rows it read; 3: those
/// and its recorded operations).
pub fn decode_base_context_in(
    d: &mut Decoder<'_>,
    row_lists: Option<u8>,
) -> DecodeResult<BaseContext> {
    let sub = d.txn()?;
    let owner = d.txn()?;
    let intro = match d.u8("intro flag")? {
        0 => None,
        1 => {
            let name = std::str::from_utf8(d.bytes("procedure")?)
                .map_err(|e| DecodeError(format!("procedure name is not utf-8: {e}")))?
                .to_string();
            Some((name, d.row()?))
        }
        f => return Err(DecodeError(format!("bad intro flag {f}"))),
    };
    let n = d.u32("entries")? as usize;
    let mut entries = Vec::with_capacity(n.min(1 << 12));
    for _ in 0..n {
        let seq = d.u32("seq")?;
        let affected = d.u64("affected")?;
        let ncols = d.u16("columns")? as usize;
        let mut columns = Vec::with_capacity(ncols);
        for _ in 0..ncols {
            columns.push(
                std::str::from_utf8(d.bytes("column")?)
                    .map_err(|e| DecodeError(format!("column name is not utf-8: {e}")))?
                    .to_string(),
            );
        }
        let nrows = d.u32("rows")? as usize;
        let mut rows = Vec::with_capacity(nrows.min(1 << 12));
        for _ in 0..nrows {
            rows.push(d.row()?);
        }
        entries.push(BaseEntry {
            seq,
            columns,
            rows,
            affected,
        });
    }
    // Written since 2026-11-27; a context logged before has none.
    let more = |d: &Decoder<'_>, list: u8| row_lists.map_or(!d.is_empty(), |n| n > list);
    let mut locked = Vec::new();
    if more(d, 0) {
        let n = d.u32("locked rows")? as usize;
        locked.reserve(n.min(1 << 12));
        for _ in 0..n {
            let table = TableId(d.u32("table")?);
            locked.push((table, d.key()?));
        }
    }
    let mut read = Vec::new();
    if more(d, 1) {
        let n = d.u32("read targets")? as usize;
        read.reserve(n.min(1 << 12));
        for _ in 0..n {
            read.push(target(d)?);
        }
    }
    let mut recorded = Vec::new();
    if more(d, 2) {
        let n = d.u32("recorded parts")? as usize;
        recorded.reserve(n.min(1 << 12));
        for _ in 0..n {
            recorded.push(d.bytes("recorded operations")?.to_vec());
        }
    }
    Ok(BaseContext {
        sub,
        owner,
        intro,
        entries,
        locked,
        read,
        recorded,
    })
}

/// Redo op tags inside a redo list.
const OP_DELETE: u8 = 0;
const OP_PUT: u8 = 1;
const OP_UPDATE: u8 = 2;

/// Appends one put to a redo list being encoded (the count is patched by
/// [`RedoWriter::finish`]).
pub struct RedoWriter {
    count_at: usize,
    count: u32,
}

impl RedoWriter {
    /// Starts a redo list at the end of `buf`.
    pub fn start(buf: &mut Vec<u8>) -> RedoWriter {
        let count_at = buf.len();
        put_u32(buf, 0);
        RedoWriter { count_at, count: 0 }
    }

    pub fn put(&mut self, buf: &mut Vec<u8>, table: TableId, row: &[brine_core::Value]) {
        put_u8(buf, OP_PUT);
        put_u32(buf, table.0);
        super::codec::put_values(buf, row);
        self.count += 1;
    }

    pub fn delete(&mut self, buf: &mut Vec<u8>, table: TableId, key: &Key) {
        put_u8(buf, OP_DELETE);
        put_u32(buf, table.0);
        super::codec::put_values(buf, key.values());
        self.count += 1;
    }

    pub fn update(
        &mut self,
        buf: &mut Vec<u8>,
        table: TableId,
        key: &Key,
        set: &[(usize, brine_core::Value)],
        add: &[(usize, brine_core::Value)],
    ) {
        put_u8(buf, OP_UPDATE);
        put_u32(buf, table.0);
        super::codec::put_values(buf, key.values());
        for columns in [set, add] {
            put_u16(buf, columns.len() as u16);
            for (c, v) in columns {
                put_u16(buf, *c as u16);
                super::codec::put_value(buf, v);
            }
        }
        self.count += 1;
    }

    /// Forgets the last entry (the caller truncated its bytes).
    pub fn forget_last(&mut self) {
        self.count = self.count.saturating_sub(1);
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn finish(self, buf: &mut [u8]) {
        buf[self.count_at..self.count_at + 4].copy_from_slice(&self.count.to_le_bytes());
    }
}

/// Decodes a redo list (as written by [`RedoWriter`]).
pub fn decode_redo(d: &mut Decoder<'_>) -> DecodeResult<Vec<RedoOp>> {
    let n = d.u32("redo count")? as usize;
    // Bounded by the payload: each op takes at least 7 bytes.
    let mut ops = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let tag = d.u8("redo op")?;
        let table = TableId(d.u32("redo table")?);
        ops.push(match tag {
            OP_PUT => RedoOp::Put {
                table,
                row: d.row()?,
            },
            OP_DELETE => RedoOp::Delete {
                table,
                key: d.key()?,
            },
            OP_UPDATE => {
                let key = d.key()?;
                let mut columns = || -> DecodeResult<Vec<(usize, brine_core::Value)>> {
                    let n = d.u16("redo columns")? as usize;
                    (0..n)
                        .map(|_| Ok((d.u16("redo column")? as usize, d.value()?)))
                        .collect()
                };
                let set = columns()?;
                let add = columns()?;
                RedoOp::Update {
                    table,
                    key,
                    set,
                    add,
                }
            }
            t => return Err(DecodeError(format!("unknown redo op {t}"))),
        });
    }
    Ok(ops)
}

/// Encodes the payload of a Versions record.
pub fn encode_versions(buf: &mut Vec<u8>, txn: TxnId, versions: &[crate::KeyVersion]) {
    put_txn(buf, txn);
    put_u32(buf, versions.len() as u32);
    for v in versions {
        put_u32(buf, v.table.0);
        super::codec::put_values(buf, v.key.values());
        super::codec::put_u64(buf, v.state.version);
        put_u8(buf, v.state.deleted as u8);
    }
}

pub(crate) fn decode_versions(d: &mut Decoder<'_>) -> DecodeResult<Vec<crate::KeyVersion>> {
    let n = d.u32("versions")? as usize;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        out.push(crate::KeyVersion {
            table: TableId(d.u32("table")?),
            key: d.key()?,
            state: crate::VerState {
                version: d.u64("version")?,
                deleted: d.u8("deleted")? != 0,
            },
        });
    }
    Ok(out)
}

/// Encodes the payload of an Outcome record.
pub fn encode_outcome(buf: &mut Vec<u8>, txn: TxnId, commit: bool) {
    put_txn(buf, txn);
    put_u8(buf, commit as u8);
}

/// Encodes the payload of a Decision record.
pub fn encode_decision(buf: &mut Vec<u8>, txn: TxnId, participants: &[u32]) {
    put_txn(buf, txn);
    put_u16(buf, participants.len() as u16);
    for &p in participants {
        put_u32(buf, p);
    }
}

impl Record {
    /// Decodes a payload of `kind` at `version`. Unknown kinds or versions
    /// are errors (a newer build wrote this log).
    pub fn decode(kind: u8, version: u8, payload: &[u8]) -> DecodeResult<Record> {
        let Some(kind) = RecordKind::from_u8(kind) else {
            return Err(DecodeError(format!(
                "unknown record kind {kind} (written by a newer version of brine?)"
            )));
        };
        if version != VERSION {
            return Err(DecodeError(format!(
                "record kind {kind:?} has version {version}; this build reads version {VERSION}"
            )));
        }
        let mut d = Decoder::new(payload);
        let rec = match kind {
            RecordKind::Commit => Record::Commit {
                txn: d.txn()?,
                redo: decode_redo(&mut d)?,
            },
            RecordKind::Prepare => Record::Prepare {
                txn: d.txn()?,
                coordinator: d.u32("coordinator")?,
                redo: decode_redo(&mut d)?,
            },
            RecordKind::Outcome => Record::Outcome {
                txn: d.txn()?,
                commit: d.u8("outcome")? != 0,
            },
            RecordKind::Decision => {
                let txn = d.txn()?;
                let n = d.u16("participants")? as usize;
                let mut participants = Vec::with_capacity(n);
                for _ in 0..n {
                    participants.push(d.u32("participant")?);
                }
                Record::Decision { txn, participants }
            }
            RecordKind::Load => Record::Load {
                redo: decode_redo(&mut d)?,
            },
            RecordKind::BaseContext => Record::BaseContext(decode_base_context(&mut d)?),
            RecordKind::BaseEnd => Record::BaseEnd { owner: d.txn()? },
            RecordKind::Versions => Record::Versions {
                txn: d.txn()?,
                versions: decode_versions(&mut d)?,
            },
            // Mediator's records live in its own logs, which it reads.
            RecordKind::MediatorVersions
            | RecordKind::MediatorCommit
            | RecordKind::MediatorDone => {
                return Err(DecodeError(format!(
                    "a {kind:?} record belongs in Mediator's logs, not the engine's"
                )))
            }
        };
        if !d.is_empty() {
            return Err(DecodeError(format!(
                "{} trailing bytes after a {kind:?} record",
                payload.len() - d.position()
            )));
        }
        Ok(rec)
    }
}

/// The fields of a frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub crc: u32,
    pub lsn: u64,
    pub prev_crc: u32,
    pub kind: u8,
    pub version: u8,
}

impl FrameHeader {
    pub fn parse(b: &[u8]) -> Option<FrameHeader> {
        if b.len() < FRAME_HEADER_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&b[8..16]);
        Some(FrameHeader {
            len: u32_at(0),
            crc: u32_at(4),
            lsn: u64::from_le_bytes(lsn),
            prev_crc: u32_at(16),
            kind: b[20],
            version: b[21],
        })
    }
}

/// The crc of a frame: header bytes 8..24, then the payload.
pub fn frame_crc(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header[8..FRAME_HEADER_LEN]), payload)
}

/// Reserves a frame header at the end of `buf`; returns where it starts.
pub fn begin_frame(buf: &mut Vec<u8>) -> usize {
    let at = buf.len();
    buf.resize(at + FRAME_HEADER_LEN, 0);
    at
}

/// Fills in the header of the frame started at `at` (payload = the rest of
/// `buf`) and returns its crc.
pub fn seal_frame(buf: &mut [u8], at: usize, lsn: u64, prev_crc: u32, kind: RecordKind) -> u32 {
    let len = (buf.len() - at - FRAME_HEADER_LEN) as u32;
    let (head, payload) = buf[at..].split_at_mut(FRAME_HEADER_LEN);
    head[0..4].copy_from_slice(&len.to_le_bytes());
    head[8..16].copy_from_slice(&lsn.to_le_bytes());
    head[16..20].copy_from_slice(&prev_crc.to_le_bytes());
    head[20] = kind as u8;
    head[21] = VERSION;
    head[22] = 0;
    head[23] = 0;
    let crc = frame_crc(head, payload);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use brine_core::Value;

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        let at = begin_frame(&mut buf);
        put_txn(&mut buf, TxnId { ts: 1, id: 2 });
        put_u32(&mut buf, 7);
        let mut w = RedoWriter::start(&mut buf);
        w.put(&mut buf, TableId(0), &[Value::Int(1), Value::str("a")]);
        w.delete(&mut buf, TableId(1), &Key::new([Value::Int(5)]));
        w.update(
            &mut buf,
            TableId(2),
            &Key::new([Value::Int(6)]),
            &[(2, Value::str("b"))],
            &[(1, Value::Int(-3))],
        );
        w.finish(&mut buf);
        let crc = seal_frame(&mut buf, at, 100, 42, RecordKind::Prepare);
        let h = FrameHeader::parse(&buf).unwrap();
        assert_eq!((h.lsn, h.prev_crc, h.crc), (100, 42, crc));
        assert_eq!(frame_crc(&buf[..24], &buf[24..]), crc);
        let rec = Record::decode(h.kind, h.version, &buf[24..]).unwrap();
        assert_eq!(
            rec,
            Record::Prepare {
                txn: TxnId { ts: 1, id: 2 },
                coordinator: 7,
                redo: vec![
                    RedoOp::Put {
                        table: TableId(0),
                        row: vec![Value::Int(1), Value::str("a")]
                    },
                    RedoOp::Delete {
                        table: TableId(1),
                        key: Key::new([Value::Int(5)])
                    },
                    RedoOp::Update {
                        table: TableId(2),
                        key: Key::new([Value::Int(6)]),
                        set: vec![(2, Value::str("b"))],
                        add: vec![(1, Value::Int(-3))]
                    }
                ]
            }
        );
    }

    /// A BASE context keeps the rows it locked across the log, and one
    /// logged before they were written decodes with none.
    #[test]
    fn base_contexts_round_trip_with_their_locked_rows() {
        let c = BaseContext {
            sub: TxnId { ts: 1, id: 3 },
            owner: TxnId { ts: 1, id: 1 },
            intro: Some(("transfer".into(), vec![Value::Int(4)])),
            entries: vec![BaseEntry {
                seq: 0,
                columns: vec!["n".into()],
                rows: vec![vec![Value::Int(9)]],
                affected: 1,
            }],
            locked: vec![(TableId(2), Key::new([Value::Int(7), Value::str("x")]))],
            read: vec![
                LockTarget::Point {
                    table: TableId(1),
                    index: IndexId(1),
                    key: Key::new([Value::str("a")]),
                },
                LockTarget::Range {
                    table: TableId(1),
                    index: IndexId::PRIMARY,
                    lo: Bound::Included(Key::new([Value::Int(3)])),
                    hi: Bound::Included(Key::new([Value::Int(3), Value::Max])),
                },
            ],
            recorded: vec![b"[]".to_vec(), b"[1]".to_vec()],
        };
        let mut buf = Vec::new();
        encode_base_context(&mut buf, &c);
        let back = decode_base_context(&mut Decoder::new(&buf)).unwrap();
        assert_eq!(back, c);
        // Before 2026-11-28, the payload ended after the rows it read.
        let mut unrecorded = Vec::new();
        encode_base_context(
            &mut unrecorded,
            &BaseContext {
                recorded: vec![],
                ..c.clone()
            },
        );
        unrecorded.truncate(unrecorded.len() - 4);
        let back = decode_base_context(&mut Decoder::new(&unrecorded)).unwrap();
        assert_eq!((&back.read, back.recorded.len()), (&c.read, 0));
        unrecorded.push(0xff);
        let mut d = Decoder::new(&unrecorded);
        let back = decode_base_context_in(&mut d, Some(2)).unwrap();
        assert_eq!(
            (back.read.len(), back.recorded.len(), d.is_empty()),
            (2, 0, false)
        );
        // Earlier, after the locked rows.
        let mut locked_only = Vec::new();
        encode_base_context(
            &mut locked_only,
            &BaseContext {
                read: vec![],
                recorded: vec![],
                ..c.clone()
            },
        );
        locked_only.truncate(locked_only.len() - 8);
        let back = decode_base_context(&mut Decoder::new(&locked_only)).unwrap();
        assert_eq!((&back.locked, &back.read), (&c.locked, &vec![]));
        // Before that, after the entries.
        let mut old = Vec::new();
        encode_base_context(
            &mut old,
            &BaseContext {
                locked: vec![],
                read: vec![],
                recorded: vec![],
                ..c.clone()
            },
        );
        old.truncate(old.len() - 12);
        let back = decode_base_context(&mut Decoder::new(&old)).unwrap();
        assert_eq!(back.locked, vec![], "a context from before has none");
        assert_eq!(back.entries, c.entries);
        // In a list, what follows is not taken for rows.
        old.push(0xff);
        let mut d = Decoder::new(&old);
        let back = decode_base_context_in(&mut d, Some(0)).unwrap();
        assert_eq!((back.locked.len(), d.is_empty()), (0, false));
        locked_only.push(0xff);
        let mut d = Decoder::new(&locked_only);
        let back = decode_base_context_in(&mut d, Some(1)).unwrap();
        assert_eq!(
            (back.locked.len(), back.read.len(), d.is_empty()),
            (1, 0, false)
        );
    }

    #[test]
    fn unknown_kinds_and_versions_are_refused() {
        assert!(Record::decode(99, 1, &[])
            .unwrap_err()
            .0
            .contains("unknown record kind"));
        assert!(Record::decode(3, 2, &[]).unwrap_err().0.contains("version"));
    }
}
