//! Segment files: a log is a directory of files `<start lsn, 20 digits>.wal`,
//! each opening with a 32-byte header.
//!
//! ```text
//!  0  magic     8 bytes  "BRINEWAL"
//!  8  format    u32      1
//! 12  log id    u32      partition id (partition logs) or node id (decision logs)
//! 16  start_lsn u64      lsn of the segment's first frame
//! 24  prev_crc  u32      crc of the last frame before it (chain across files)
//! 28  hdr_crc   u32      crc32c of bytes 0..28
//! ```
//!
//! A frame at file offset `o` has lsn `start_lsn + o - 32`: lsns count log
//! bytes, not file bytes, so segment headers do not move them.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use brine_core::{Error, Result};

pub const SEGMENT_MAGIC: &[u8; 8] = b"BRINEWAL";
pub const SEGMENT_FORMAT: u32 = 1;
pub const SEGMENT_HEADER_LEN: usize = 32;
const SUFFIX: &str = ".wal";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub log_id: u32,
    pub start_lsn: u64,
    pub prev_crc: u32,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&SEGMENT_FORMAT.to_le_bytes());
        b[12..16].copy_from_slice(&self.log_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.start_lsn.to_le_bytes());
        b[24..28].copy_from_slice(&self.prev_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and validates a header; the error says what is wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<SegmentHeader, String> {
        if b.len() < SEGMENT_HEADER_LEN {
            return Err(format!(
                "segment header is {} bytes, needs {SEGMENT_HEADER_LEN}",
                b.len()
            ));
        }
        if &b[0..8] != SEGMENT_MAGIC {
            return Err("not a brine log segment (bad magic)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u32_at(28) != crc32c::crc32c(&b[0..28]) {
            return Err("segment header checksum mismatch".into());
        }
        let format = u32_at(8);
        if format != SEGMENT_FORMAT {
            return Err(format!(
                "segment format {format}; this build reads {SEGMENT_FORMAT}"
            ));
        }
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&b[16..24]);
        Ok(SegmentHeader {
            log_id: u32_at(12),
            start_lsn: u64::from_le_bytes(lsn),
            prev_crc: u32_at(24),
        })
    }
}

pub fn segment_path(dir: &Path, start_lsn: u64) -> PathBuf {
    dir.join(format!("{start_lsn:020}{SUFFIX}"))
}

/// The segments in `dir`, sorted by start lsn (from their names).
pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err("listing log directory", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_err("listing log directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(lsn) = stem.parse::<u64>() {
                out.push((lsn, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Creates the segment `header` starts in `dir` (replacing a file of that
/// name), its header written and synced, the directory synced; returns
/// it, positioned after the header.
pub fn create_segment(dir: &Path, header: SegmentHeader) -> Result<(File, PathBuf)> {
    use std::io::Write;
    let path = segment_path(dir, header.start_lsn);
    let mut file = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|e| io_err("creating segment", &path, e))?;
    file.write_all(&header.encode())
        .and_then(|_| file.sync_data())
        .map_err(|e| io_err("writing segment header", &path, e))?;
    sync_dir(dir)?;
    Ok((file, path))
}

/// An I/O error with the operation and the file in the message.
pub fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Storage(format!("{what} {}: {e}", path.display()))
}

/// Makes a directory entry change (create, rename, delete) durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err("syncing directory", dir, e))
}
