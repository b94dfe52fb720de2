//! Checkpoints: a consistent snapshot of one partition's committed rows at
//! a log position, plus the transactions prepared there and not yet
//! decided (with their redo), so recovery starts at the checkpoint's lsn and
//! every older log segment can be deleted.
//!
//! ```text
//!  file <lsn, 20 digits>.ckpt (written as .ckpt.tmp, fsynced, renamed):
//!   magic "BRINECKP" . format u32 . log id u32 . lsn u64 . chain crc u32
//!   u32 tables; per table: name (u32 len, utf-8) . columns u16 . rows u64 . row^rows
//!   u32 in-doubt; per txn: txn . coordinator u32 . redo list
//!   (format 2) u32 BASE contexts; per context: committed u8 . BaseContext payload
//!   (format 3: each context with its locked rows; format 4: and the rows
//!   it read; format 6: and its recorded operations)
//!   crc32c of everything above, u32
//! ```
//!
//! The partition actor encodes a checkpoint between two messages, so the
//! snapshot and `lsn` agree: every frame below `lsn` is reflected (commits
//! applied, prepared transactions listed as in doubt) and none above. The
//! log writer installs it only after the log is durable up to `lsn`.

use std::path::{Path, PathBuf};

use brine_core::{Catalog, Error, Result, TxnId};

use crate::wal::codec::{put_bytes, put_txn, put_u16, put_u32, put_u64, put_values, Decoder};
use crate::wal::record::{
    decode_base_context_in, decode_redo, decode_versions, encode_base_context, encode_versions,
    BaseContext, RedoOp,
};
use crate::wal::segment::io_err;
use crate::wal::writer::LogPosition;
use crate::PartitionStore;

pub const CHECKPOINT_MAGIC: &[u8; 8] = b"BRINECKP";
/// Format 2 adds the Salt BASE contexts, format 3 their locked rows,
/// format 4 the rows they read, format 5 the recorded versions of the
/// keys (of a run that records a history) and of each in-doubt
/// transaction's writes, format 6 the BASE contexts' recorded operations;
/// formats 1 to 5 are still read.
pub const CHECKPOINT_FORMAT: u32 = 6;

pub fn checkpoint_path(dir: &Path, lsn: u64) -> PathBuf {
    dir.join(format!("{lsn:020}.ckpt"))
}

pub fn tmp_checkpoint_path(dir: &Path, lsn: u64) -> PathBuf {
    dir.join(format!("{lsn:020}.ckpt.tmp"))
}

/// Installed checkpoints in `dir`, oldest first.
pub fn list_checkpoints(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err("listing", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_err("listing", dir, e))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".ckpt")) else {
            continue;
        };
        if stem.len() == 20 {
            if let Ok(lsn) = stem.parse::<u64>() {
                out.push((lsn, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A transaction prepared at the partition and not decided at checkpoint
/// time (or at the end of the log, during recovery).
#[derive(Clone, Debug, PartialEq)]
pub struct InDoubt {
    pub txn: TxnId,
    pub coordinator: u32,
    pub redo: Vec<RedoOp>,
    /// The versions its writes installed (a run that records a history).
    pub versions: Vec<crate::KeyVersion>,
}

impl PartitionStore {
    /// Encodes a checkpoint of the committed state at `pos`, listing the
    /// prepared transactions `in_doubt` (txn, coordinator node) with their
    /// redo taken from the current state.
    pub fn encode_checkpoint(
        &self,
        log_id: u32,
        pos: LogPosition,
        in_doubt: &[(TxnId, u32)],
        base: &BaseContexts,
    ) -> Vec<u8> {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(CHECKPOINT_MAGIC);
        put_u32(&mut buf, CHECKPOINT_FORMAT);
        put_u32(&mut buf, log_id);
        put_u64(&mut buf, pos.lsn);
        put_u32(&mut buf, pos.crc);
        let tables = self.catalog.tables();
        put_u32(&mut buf, tables.len() as u32);
        let mut count_at = vec![0usize; tables.len()];
        let mut counts = vec![0u64; tables.len()];
        // Rows arrive grouped by table, in table order.
        let mut current: Option<usize> = None;
        let open_table = |buf: &mut Vec<u8>, t: usize, count_at: &mut Vec<usize>| {
            let def = &tables[t];
            put_bytes(buf, def.name.as_bytes());
            put_u16(buf, def.columns.len() as u16);
            count_at[t] = buf.len();
            put_u64(buf, 0);
        };
        self.for_each_committed_row(|table, row| {
            let t = table.0 as usize;
            while current.is_none_or(|c| c < t) {
                let next = current.map_or(0, |c| c + 1);
                open_table(&mut buf, next, &mut count_at);
                current = Some(next);
            }
            put_values(&mut buf, row);
            counts[t] += 1;
        });
        let mut next = current.map_or(0, |c| c + 1);
        while next < tables.len() {
            open_table(&mut buf, next, &mut count_at);
            next += 1;
        }
        for (t, &at) in count_at.iter().enumerate() {
            buf[at..at + 8].copy_from_slice(&counts[t].to_le_bytes());
        }
        put_u32(&mut buf, in_doubt.len() as u32);
        for &(txn, coordinator) in in_doubt {
            put_txn(&mut buf, txn);
            put_u32(&mut buf, coordinator);
            self.encode_redo(txn, &mut buf);
            encode_versions(&mut buf, txn, &self.versions_of(txn));
        }
        put_u32(&mut buf, (base.open.len() + base.pending.len()) as u32);
        for c in base.open.values() {
            crate::wal::codec::put_u8(&mut buf, 1);
            encode_base_context(&mut buf, c);
        }
        for c in base.pending.values() {
            crate::wal::codec::put_u8(&mut buf, 0);
            encode_base_context(&mut buf, c);
        }
        let versions = self.committed_versions();
        put_u64(&mut buf, versions.iter().map(|m| m.len() as u64).sum());
        for (t, map) in versions.iter().enumerate() {
            for (key, state) in map {
                put_u32(&mut buf, t as u32);
                put_values(&mut buf, key.values());
                put_u64(&mut buf, state.version);
                crate::wal::codec::put_u8(&mut buf, state.deleted as u8);
            }
        }
        let crc = crc32c::crc32c(&buf);
        put_u32(&mut buf, crc);
        buf
    }
}

/// Salt's BASE contexts at a partition: `open` by owner (committed
/// subtransactions of BASE transactions that have not ended), `pending` by
/// subtransaction (prepared here, not yet decided).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BaseContexts {
    pub open: std::collections::BTreeMap<TxnId, BaseContext>,
    pub pending: std::collections::BTreeMap<TxnId, BaseContext>,
}

impl BaseContexts {
    /// `c` committed here: fold it into its owner's open context.
    pub fn commit(&mut self, c: BaseContext) {
        match self.open.get_mut(&c.owner) {
            Some(o) => o.absorb(c),
            None => {
                self.open.insert(c.owner, c);
            }
        }
    }

    /// The pending context of subtransaction `sub` was decided.
    pub fn decide(&mut self, sub: TxnId, commit: bool) {
        if let Some(c) = self.pending.remove(&sub) {
            if commit {
                self.commit(c);
            }
        }
    }

    /// The BASE transaction `owner` ended.
    pub fn end(&mut self, owner: TxnId) {
        self.open.remove(&owner);
        self.pending.retain(|_, c| c.owner != owner);
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.pending.is_empty()
    }
}

/// A checkpoint read back.
pub struct LoadedCheckpoint {
    pub position: LogPosition,
    pub store: PartitionStore,
    pub in_doubt: Vec<InDoubt>,
    pub base: BaseContexts,
}

/// Reads and validates a checkpoint file into a fresh store.
pub fn load_checkpoint(
    path: &Path,
    catalog: &std::sync::Arc<Catalog>,
    log_id: u32,
) -> Result<LoadedCheckpoint> {
    let data = std::fs::read(path).map_err(|e| io_err("reading", path, e))?;
    let bad = |offset: usize, reason: String| Error::Corrupt {
        file: path.display().to_string(),
        offset: offset as u64,
        reason,
    };
    if data.len() < 32 || &data[..8] != CHECKPOINT_MAGIC {
        return Err(bad(0, "not a brine checkpoint".into()));
    }
    let body = &data[..data.len() - 4];
    let mut stored = [0u8; 4];
    stored.copy_from_slice(&data[data.len() - 4..]);
    if crc32c::crc32c(body) != u32::from_le_bytes(stored) {
        return Err(bad(data.len() - 4, "checkpoint checksum mismatch".into()));
    }
    let mut d = Decoder::new(&body[8..]);
    let res = (|| -> std::result::Result<LoadedCheckpoint, String> {
        let e = |x: crate::wal::codec::DecodeError| x.0;
        let format = d.u32("format").map_err(e)?;
        if !(1..=CHECKPOINT_FORMAT).contains(&format) {
            return Err(format!(
                "checkpoint format {format}; this build reads formats 1 to {CHECKPOINT_FORMAT}"
            ));
        }
        let id = d.u32("log id").map_err(e)?;
        if id != log_id {
            return Err(format!("checkpoint of log {id}, expected {log_id}"));
        }
        let position = LogPosition {
            lsn: d.u64("lsn").map_err(e)?,
            crc: d.u32("crc").map_err(e)?,
        };
        let mut store = PartitionStore::new(catalog.clone());
        let ntables = d.u32("tables").map_err(e)? as usize;
        if ntables != catalog.tables().len() {
            return Err(format!(
                "checkpoint has {ntables} tables, the schema has {}",
                catalog.tables().len()
            ));
        }
        for def in catalog.tables() {
            let name = d.bytes("table name").map_err(e)?;
            let cols = d.u16("columns").map_err(e)? as usize;
            if name != def.name.as_bytes() || cols != def.columns.len() {
                return Err(format!(
                    "checkpoint table `{}` with {cols} columns does not match schema table `{}` with {} columns",
                    String::from_utf8_lossy(name),
                    def.name,
                    def.columns.len()
                ));
            }
            let rows = d.u64("rows").map_err(e)?;
            for _ in 0..rows {
                let row = d.row().map_err(e)?;
                store
                    .load(def.id, row)
                    .map_err(|x| format!("row of `{}`: {x}", def.name))?;
            }
        }
        let n = d.u32("in-doubt count").map_err(e)? as usize;
        let mut in_doubt = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let txn = d.txn().map_err(e)?;
            let coordinator = d.u32("coordinator").map_err(e)?;
            let ops = decode_redo(&mut d).map_err(e)?;
            let versions = if format >= 5 {
                // Its own txn id first, as a Versions record has it.
                d.txn().map_err(e)?;
                decode_versions(&mut d).map_err(e)?
            } else {
                Vec::new()
            };
            in_doubt.push(InDoubt {
                txn,
                coordinator,
                redo: ops,
                versions,
            });
        }
        let mut base = BaseContexts::default();
        if format >= 2 {
            let n = d.u32("BASE contexts").map_err(e)? as usize;
            for _ in 0..n {
                let committed = d.u8("committed").map_err(e)? != 0;
                // The lists after a context's entries: none in format 2,
                // its locked rows from 3, the rows it read from 4, its
                // recorded operations from 6.
                let lists = match format {
                    2 => 0,
                    3 => 1,
                    4 | 5 => 2,
                    _ => 3,
                };
                let c = decode_base_context_in(&mut d, Some(lists)).map_err(e)?;
                if committed {
                    base.open.insert(c.owner, c);
                } else {
                    base.pending.insert(c.sub, c);
                }
            }
        }
        if format >= 5 {
            let n = d.u64("versions").map_err(e)?;
            let mut kept = Vec::with_capacity(n.min(1 << 16) as usize);
            for _ in 0..n {
                kept.push(crate::KeyVersion {
                    table: brine_core::TableId(d.u32("table").map_err(e)?),
                    key: d.key().map_err(e)?,
                    state: crate::VerState {
                        version: d.u64("version").map_err(e)?,
                        deleted: d.u8("deleted").map_err(e)? != 0,
                    },
                });
            }
            store.apply_versions(kept);
        }
        if !d.is_empty() {
            return Err("trailing bytes in checkpoint".into());
        }
        Ok(LoadedCheckpoint {
            position,
            store,
            in_doubt,
            base,
        })
    })();
    res.map_err(|why| bad(0, why))
}
