//! Reading a log back: every segment and frame is validated (header
//! checksums, segment continuity, each frame's lsn, crc and chain link).
//!
//! ```text
//!  segments in lsn order ──► header ok? contiguous with the previous? ──► frames
//!  frame bad at offset o:
//!     a valid frame exists after o ───────────────► Error::Corrupt (refuse)
//!     nothing valid after o, newest segment ──────► torn tail: truncate at o
//!     nothing valid after o, older segment ───────► Error::Corrupt (it was
//!                                                   fsynced before the next began)
//!  newest segment's header torn (crash during rotation) ► delete that file
//! ```
//!
//! "Valid after o" means a frame whose header holds exactly the lsn its
//! position implies and whose crc matches: garbage almost never does, so a
//! hit is proof that intact records follow the damage, i.e. the damage is
//! not the torn end of the last write.

use std::path::{Path, PathBuf};

use brine_core::{Error, Result};

use super::record::{frame_crc, FrameHeader, FRAME_HEADER_LEN, MAX_PAYLOAD_LEN};
use super::segment::{io_err, list_segments, SegmentHeader, SEGMENT_HEADER_LEN};
use super::writer::LogPosition;

/// How to read a log.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions {
    /// Frames below this lsn are validated but not passed on (they are in
    /// the checkpoint).
    pub from: LogPosition,
    /// Segments may start after `from` (decision logs, whose old segments
    /// are deleted at restart, have no checkpoint).
    pub allow_missing_prefix: bool,
    /// Truncate a torn tail (and delete a newest segment with a torn
    /// header) so the next writer starts from a clean end.
    pub repair: bool,
    /// Expected log id in segment headers.
    pub log_id: u32,
}

/// Where the valid log ends, and what was cut off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogEnd {
    pub position: LogPosition,
    /// Bytes cut from the torn tail (0 if the log ended cleanly).
    pub torn_bytes: u64,
    pub segments: usize,
    /// Frames passed to the callback.
    pub records: u64,
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        file: path.display().to_string(),
        offset,
        reason: reason.into(),
    }
}

/// Checks the frame at `off`; `Err` says why it is not valid.
fn check_frame(
    data: &[u8],
    off: usize,
    lsn: u64,
    prev_crc: Option<u32>,
) -> std::result::Result<FrameHeader, String> {
    let Some(h) = FrameHeader::parse(&data[off..]) else {
        return Err(format!(
            "incomplete frame header ({} bytes left)",
            data.len() - off
        ));
    };
    if h.lsn != lsn {
        return Err(format!(
            "frame says lsn {}, its position is lsn {lsn}",
            h.lsn
        ));
    }
    let len = h.len as usize;
    if len > MAX_PAYLOAD_LEN {
        return Err(format!("frame length {len} exceeds the limit"));
    }
    let end = off + FRAME_HEADER_LEN + len;
    if end > data.len() {
        return Err(format!(
            "frame of {len} bytes runs past the end of the file"
        ));
    }
    let crc = frame_crc(
        &data[off..off + FRAME_HEADER_LEN],
        &data[off + FRAME_HEADER_LEN..end],
    );
    if crc != h.crc {
        return Err(format!(
            "checksum mismatch (stored {:08x}, computed {crc:08x})",
            h.crc
        ));
    }
    if let Some(p) = prev_crc {
        if h.prev_crc != p {
            return Err(format!(
                "checksum chain broken (frame links to {:08x}, previous frame is {p:08x})",
                h.prev_crc
            ));
        }
    }
    Ok(h)
}

/// Reads the log in `dir`, calling `f(lsn, header, payload)` for every
/// valid frame at or after `opts.from.lsn`, in order.
pub fn read_log(
    dir: &Path,
    opts: ReadOptions,
    mut f: impl FnMut(u64, &FrameHeader, &[u8]) -> Result<()>,
) -> Result<LogEnd> {
    let segments = list_segments(dir)?;
    let mut out = LogEnd {
        position: opts.from,
        ..LogEnd::default()
    };
    let mut prev_end: Option<LogPosition> = None;
    let n = segments.len();
    for (i, (name_lsn, path)) in segments.iter().enumerate() {
        let last = i + 1 == n;
        let data = std::fs::read(path).map_err(|e| io_err("reading", path, e))?;
        let header = match SegmentHeader::decode(&data) {
            Ok(h) => h,
            Err(why) if last && data.len() <= SEGMENT_HEADER_LEN => {
                // Crash while a new segment was being started: nothing in it
                // was ever acknowledged.
                if opts.repair {
                    std::fs::remove_file(path).map_err(|e| io_err("deleting", path, e))?;
                }
                out.torn_bytes += data.len() as u64;
                let _ = why;
                break;
            }
            Err(why) => return Err(corrupt(path, 0, why)),
        };
        if header.start_lsn != *name_lsn || header.log_id != opts.log_id {
            return Err(corrupt(
                path,
                0,
                format!(
                    "segment header says log {} at lsn {}, expected log {} at lsn {name_lsn}",
                    header.log_id, header.start_lsn, opts.log_id
                ),
            ));
        }
        match prev_end {
            Some(p) => {
                if header.start_lsn != p.lsn || header.prev_crc != p.crc {
                    return Err(corrupt(
                        path,
                        0,
                        format!(
                            "segment does not continue the previous one (starts at lsn {} linking {:08x}; previous ends at lsn {} with {:08x})",
                            header.start_lsn, header.prev_crc, p.lsn, p.crc
                        ),
                    ));
                }
            }
            None => {
                if header.start_lsn > opts.from.lsn && !opts.allow_missing_prefix {
                    return Err(corrupt(
                        path,
                        0,
                        format!(
                            "the oldest segment starts at lsn {} but recovery needs the log from lsn {}: segments are missing",
                            header.start_lsn, opts.from.lsn
                        ),
                    ));
                }
                if header.start_lsn == opts.from.lsn && header.prev_crc != opts.from.crc {
                    return Err(corrupt(
                        path,
                        0,
                        format!(
                            "segment links to {:08x} but the checkpoint ends the chain with {:08x}",
                            header.prev_crc, opts.from.crc
                        ),
                    ));
                }
            }
        }
        out.segments += 1;
        let mut off = SEGMENT_HEADER_LEN;
        let mut pos = LogPosition {
            lsn: header.start_lsn,
            crc: header.prev_crc,
        };
        while off < data.len() {
            match check_frame(&data, off, pos.lsn, Some(pos.crc)) {
                Ok(h) => {
                    let end = off + FRAME_HEADER_LEN + h.len as usize;
                    if pos.lsn >= opts.from.lsn {
                        f(pos.lsn, &h, &data[off + FRAME_HEADER_LEN..end])?;
                        out.records += 1;
                    } else if pos.lsn + (end - off) as u64 > opts.from.lsn {
                        return Err(corrupt(
                            path,
                            off as u64,
                            format!(
                                "the checkpoint's lsn {} falls inside a frame",
                                opts.from.lsn
                            ),
                        ));
                    }
                    pos = LogPosition {
                        lsn: pos.lsn + (end - off) as u64,
                        crc: h.crc,
                    };
                    off = end;
                }
                Err(why) => {
                    if let Some(later) = valid_frame_after(&data, off, header.start_lsn) {
                        return Err(corrupt(
                            path,
                            off as u64,
                            format!(
                                "record at lsn {} is damaged ({why}) but a valid record follows at byte {later}: the log is corrupt in the middle, refusing to recover from it",
                                pos.lsn
                            ),
                        ));
                    }
                    if !last {
                        return Err(corrupt(
                            path,
                            off as u64,
                            format!(
                                "record at lsn {} is damaged ({why}) in a segment that is not the newest (it was synced before the next one began)",
                                pos.lsn
                            ),
                        ));
                    }
                    // Torn tail: the end of the last write, never acknowledged.
                    out.torn_bytes += (data.len() - off) as u64;
                    if opts.repair {
                        truncate(path, off as u64)?;
                    }
                    break;
                }
            }
        }
        prev_end = Some(pos);
        out.position = pos;
    }
    if let Some(p) = prev_end {
        if p.lsn < opts.from.lsn {
            return Err(Error::Corrupt {
                file: dir.display().to_string(),
                offset: 0,
                reason: format!(
                    "the log ends at lsn {} before the checkpoint's lsn {}",
                    p.lsn, opts.from.lsn
                ),
            });
        }
    }
    Ok(out)
}

/// Offset of a valid frame after `off`, if any.
fn valid_frame_after(data: &[u8], off: usize, seg_start: u64) -> Option<usize> {
    let mut o = off + 1;
    while o + FRAME_HEADER_LEN <= data.len() {
        let lsn = seg_start + (o - SEGMENT_HEADER_LEN) as u64;
        // Cheap filter first: the lsn field must match the position.
        if data[o + 8..o + 16] == lsn.to_le_bytes() && check_frame(data, o, lsn, None).is_ok() {
            return Some(o);
        }
        o += 1;
    }
    None
}

fn truncate(path: &PathBuf, len: u64) -> Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_err("opening", path, e))?;
    f.set_len(len)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_err("truncating the torn tail of", path, e))
}
