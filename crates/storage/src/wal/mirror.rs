//! A replica's copy of a log directory (issue 39): the batches and
//! checkpoints its group committed, written in the log's own format, so
//! that the replica that takes a partition over recovers from its copy
//! exactly as a restarted node recovers from its log.
//!
//! ```text
//!  apply_batch(frames):  already here, same chain crc ──► nothing to write
//!                        starts inside the copy ───────► cut the copy there
//!                                                        (a tail no quorum had)
//!                        starts past its end ──────────► the log restarted:
//!                                                        older segments go
//!                        then append (synced with the replica's compaction:
//!                        its raft log holds the batch durable until then);
//!                        `applied` = its end
//!  apply_checkpoint:     written whole (tmp, fsync, rename); segments wholly
//!                        before it and older checkpoints go
//!  image() / restore():  the newest checkpoint and the segments after it, up
//!                        to `applied`, for a replica the group's log no
//!                        longer reaches; a marker (`applied` alone) for a
//!                        replica's own compaction, the files being on disk
//!  settle():             cut the copy at `applied` before the partition
//!                        recovers from it (what lies beyond was never
//!                        committed: the writer of a former leader put it
//!                        there)
//! ```
//!
//! Frames carry their lsn and chain crc, so a batch says where it goes and
//! a batch already in the copy is recognised by the crc of its last frame.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use brine_core::{Error, Result};

use super::reader::{read_log, ReadOptions};
use super::record::{FrameHeader, FRAME_HEADER_LEN};
use super::segment::{
    create_segment, io_err, list_segments, segment_path, sync_dir, SegmentHeader,
    SEGMENT_HEADER_LEN,
};
use super::writer::LogPosition;
use crate::checkpoint::{checkpoint_path, list_checkpoints, tmp_checkpoint_path};

/// Image tags: a marker holds `applied` alone, an image the files too.
const MARKER: u8 = b'M';
const IMAGE: u8 = b'I';

/// The segment the copy appends to.
struct Tail {
    file: File,
    start: u64,
    len: u64,
}

/// One replica's copy of one log.
pub struct Mirror {
    dir: PathBuf,
    log_id: u32,
    segment_bytes: u64,
    /// Where the frames in the directory end.
    end: LogPosition,
    /// Where what the group committed ends (never beyond `end`).
    applied: LogPosition,
    tail: Option<Tail>,
}

/// Where the checkpoint in `bytes` stands in the log (its header fields).
pub fn checkpoint_position(bytes: &[u8]) -> Option<LogPosition> {
    let lsn = u64::from_le_bytes(bytes.get(16..24)?.try_into().ok()?);
    let crc = u32::from_le_bytes(bytes.get(24..28)?.try_into().ok()?);
    Some(LogPosition { lsn, crc })
}

/// The position a batch starts at and the one it ends at, from its frames.
fn span(frames: &[u8]) -> Result<(LogPosition, LogPosition, u64)> {
    let bad = |why: &str| Error::Storage(format!("a replicated log batch {why}"));
    let first = FrameHeader::parse(frames).ok_or_else(|| bad("holds no frame"))?;
    let start = LogPosition {
        lsn: first.lsn,
        crc: first.prev_crc,
    };
    let mut at = 0usize;
    let mut end = start;
    let mut last_lsn = start.lsn;
    while at < frames.len() {
        let h = FrameHeader::parse(&frames[at..]).ok_or_else(|| bad("ends inside a frame"))?;
        if h.lsn != end.lsn || h.prev_crc != end.crc {
            return Err(bad("does not chain its frames"));
        }
        let len = FRAME_HEADER_LEN + h.len as usize;
        if at + len > frames.len() {
            return Err(bad("ends inside a frame"));
        }
        last_lsn = h.lsn;
        end = LogPosition {
            lsn: h.lsn + len as u64,
            crc: h.crc,
        };
        at += len;
    }
    Ok((start, end, last_lsn))
}

impl Mirror {
    /// Opens the copy in `dir` (creating it), finding where its frames end.
    pub fn open(dir: &Path, log_id: u32, segment_bytes: u64) -> Result<Mirror> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
        let from = match list_checkpoints(dir)?.last() {
            Some((_, path)) => {
                let mut head = [0u8; 28];
                File::open(path)
                    .and_then(|mut f| f.read_exact(&mut head))
                    .map_err(|e| io_err("reading", path, e))?;
                checkpoint_position(&head).unwrap_or_default()
            }
            None => LogPosition::default(),
        };
        let opts = ReadOptions {
            from,
            allow_missing_prefix: true,
            repair: true,
            log_id,
        };
        let end = read_log(dir, opts, |_, _, _| Ok(()))?.position;
        Ok(Mirror {
            dir: dir.to_path_buf(),
            log_id,
            segment_bytes,
            end,
            applied: LogPosition::default(),
            tail: None,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the committed part of the copy ends.
    pub fn applied(&self) -> LogPosition {
        self.applied
    }

    /// Where the frames in the directory end.
    pub fn end(&self) -> LogPosition {
        self.end
    }

    /// A batch of frames the group committed.
    pub fn apply_batch(&mut self, frames: &[u8]) -> Result<()> {
        let (start, end, last_lsn) = span(frames)?;
        if end.lsn <= self.end.lsn && self.holds(last_lsn, end.crc)? {
            self.applied = end;
            return Ok(());
        }
        if start.lsn < self.end.lsn {
            self.cut(start)?;
        } else if start.lsn > self.end.lsn || start.crc != self.end.crc {
            // The log went on from a checkpoint this copy missed (its node
            // restarted): what the copy holds is superseded.
            self.drop_segments(|_| true)?;
            self.end = start;
        }
        self.append(frames)?;
        self.end = end;
        self.applied = end;
        Ok(())
    }

    /// A batch the group committed that the log's own writer already put
    /// in this directory (this replica leads): nothing to write.
    pub fn written(&mut self, frames: &[u8]) -> Result<()> {
        let (_, end, _) = span(frames)?;
        self.tail = None;
        if end.lsn > self.end.lsn {
            self.end = end;
        }
        self.applied = end;
        Ok(())
    }

    /// A checkpoint the group committed (the bytes of a `.ckpt` file).
    pub fn apply_checkpoint(&mut self, bytes: &[u8]) -> Result<()> {
        let pos = checkpoint_position(bytes)
            .ok_or_else(|| Error::Storage("a replicated checkpoint is too short".into()))?;
        if list_checkpoints(&self.dir)?
            .last()
            .is_some_and(|(lsn, _)| *lsn >= pos.lsn)
        {
            return Ok(()); // applied again after a restart
        }
        if pos.lsn > self.end.lsn {
            self.drop_segments(|_| true)?;
            self.end = pos;
        }
        install_checkpoint(&self.dir, pos.lsn, bytes)?;
        if pos.lsn > self.applied.lsn {
            self.applied = pos;
        }
        Ok(())
    }

    /// Cuts whatever the directory holds beyond `applied`.
    pub fn settle(&mut self) -> Result<()> {
        if self.end.lsn > self.applied.lsn {
            self.cut(self.applied)?;
        }
        Ok(())
    }

    /// `applied` alone: a replica's own compaction point.
    pub fn marker(&self) -> Vec<u8> {
        let mut out = vec![MARKER];
        out.extend_from_slice(&self.applied.lsn.to_le_bytes());
        out.extend_from_slice(&self.applied.crc.to_le_bytes());
        out
    }

    /// The copy up to `applied`: its newest checkpoint and the segments
    /// after it.
    pub fn image(&self) -> Result<Vec<u8>> {
        let mut out = self.marker();
        out[0] = IMAGE;
        let put = |out: &mut Vec<u8>, name: &str, data: &[u8]| {
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend_from_slice(data);
        };
        let base = match list_checkpoints(&self.dir)?.last() {
            Some((lsn, path)) if *lsn <= self.applied.lsn => {
                let data = std::fs::read(path).map_err(|e| io_err("reading", path, e))?;
                put(&mut out, &file_name(path), &data);
                *lsn
            }
            _ => 0,
        };
        let segments = list_segments(&self.dir)?;
        for (i, (start, path)) in segments.iter().enumerate() {
            let next = segments.get(i + 1).map_or(u64::MAX, |s| s.0);
            if next <= base || *start >= self.applied.lsn {
                continue;
            }
            let mut data = std::fs::read(path).map_err(|e| io_err("reading", path, e))?;
            let keep = SEGMENT_HEADER_LEN as u64 + (self.applied.lsn - start);
            data.truncate(keep.min(data.len() as u64) as usize);
            put(&mut out, &file_name(path), &data);
        }
        Ok(out)
    }

    /// Takes back a marker or an image.
    pub fn restore(&mut self, image: &[u8]) -> Result<()> {
        let bad = || Error::Storage("a replica image is damaged".into());
        let (&tag, rest) = image.split_first().ok_or_else(bad)?;
        let mut r = rest;
        let mut take = |n: usize| -> Result<&[u8]> {
            if r.len() < n {
                return Err(bad());
            }
            let (head, tail) = r.split_at(n);
            r = tail;
            Ok(head)
        };
        let applied = LogPosition {
            lsn: u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad())?),
            crc: u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?),
        };
        if tag == MARKER {
            self.applied = applied;
            return Ok(());
        }
        if tag != IMAGE {
            return Err(bad());
        }
        self.tail = None;
        self.drop_segments(|_| true)?;
        for (_, path) in list_checkpoints(&self.dir)? {
            std::fs::remove_file(&path).map_err(|e| io_err("deleting", &path, e))?;
        }
        while let Ok(n) = take(4) {
            let n = u32::from_le_bytes(n.try_into().map_err(|_| bad())?) as usize;
            let name = std::str::from_utf8(take(n)?)
                .map_err(|_| bad())?
                .to_string();
            if name.contains('/') || name.starts_with('.') {
                return Err(bad());
            }
            let len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad())?) as usize;
            let data = take(len)?;
            let path = self.dir.join(&name);
            let mut f = File::create(&path).map_err(|e| io_err("creating", &path, e))?;
            f.write_all(data)
                .and_then(|_| f.sync_all())
                .map_err(|e| io_err("writing", &path, e))?;
        }
        sync_dir(&self.dir)?;
        let mut fresh = Mirror::open(&self.dir, self.log_id, self.segment_bytes)?;
        fresh.applied = applied;
        *self = fresh;
        Ok(())
    }

    /// Whether the frame at `lsn` is in the copy with crc `crc` (a frame
    /// before the oldest segment is in a checkpoint: committed, so held).
    fn holds(&self, lsn: u64, crc: u32) -> Result<bool> {
        let segments = list_segments(&self.dir)?;
        let Some((start, path)) = segments.iter().rev().find(|(s, _)| *s <= lsn) else {
            return Ok(true);
        };
        let mut head = [0u8; FRAME_HEADER_LEN];
        let read = File::open(path).and_then(|mut f| {
            f.seek(SeekFrom::Start(SEGMENT_HEADER_LEN as u64 + (lsn - start)))?;
            f.read_exact(&mut head)
        });
        Ok(read.is_ok() && FrameHeader::parse(&head).is_some_and(|h| h.lsn == lsn && h.crc == crc))
    }

    /// Cuts the copy at `pos` (a frame boundary inside it).
    fn cut(&mut self, pos: LogPosition) -> Result<()> {
        self.tail = None;
        self.drop_segments(|start| start >= pos.lsn && start > 0)?;
        if let Some((start, path)) = list_segments(&self.dir)?.last() {
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| io_err("opening", path, e))?;
            f.set_len(SEGMENT_HEADER_LEN as u64 + pos.lsn.saturating_sub(*start))
                .and_then(|_| f.sync_all())
                .map_err(|e| io_err("cutting", path, e))?;
        }
        self.end = pos;
        if self.applied.lsn > pos.lsn {
            self.applied = pos;
        }
        Ok(())
    }

    fn drop_segments(&mut self, which: impl Fn(u64) -> bool) -> Result<()> {
        self.tail = None;
        for (start, path) in list_segments(&self.dir)? {
            if which(start) {
                std::fs::remove_file(&path).map_err(|e| io_err("deleting", &path, e))?;
            }
        }
        sync_dir(&self.dir)
    }

    fn append(&mut self, frames: &[u8]) -> Result<()> {
        if self.tail.is_none() {
            self.tail = Some(self.open_tail()?);
        }
        let tail = self.tail.as_mut().expect("opened");
        let path = segment_path(&self.dir, tail.start);
        tail.file
            .write_all(frames)
            .map_err(|e| io_err("appending to", &path, e))?;
        tail.len += frames.len() as u64;
        if tail.len >= self.segment_bytes {
            // The next batch starts a segment; this one is complete.
            tail.file
                .sync_data()
                .map_err(|e| io_err("syncing", &path, e))?;
            self.tail = None;
        }
        Ok(())
    }

    /// Makes everything the copy holds durable. Batches are written
    /// unsynced: the replica's raft log already holds them durable, and
    /// gives them again after a crash; the copy is synced before that log
    /// drops them (the replica's compaction, `marker`).
    pub fn sync(&self) -> Result<()> {
        match &self.tail {
            Some(t) => t
                .file
                .sync_data()
                .map_err(|e| io_err("syncing", &segment_path(&self.dir, t.start), e)),
            None => Ok(()),
        }
    }

    /// The segment that ends where the copy ends, or a new one there.
    fn open_tail(&self) -> Result<Tail> {
        if let Some((start, path)) = list_segments(&self.dir)?.last() {
            let len = std::fs::metadata(path)
                .map_err(|e| io_err("reading", path, e))?
                .len();
            if *start <= self.end.lsn
                && len == SEGMENT_HEADER_LEN as u64 + (self.end.lsn - start)
                && len < self.segment_bytes
            {
                let file = OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|e| io_err("opening", path, e))?;
                return Ok(Tail {
                    file,
                    start: *start,
                    len,
                });
            }
        }
        let header = SegmentHeader {
            log_id: self.log_id,
            start_lsn: self.end.lsn,
            prev_crc: self.end.crc,
        };
        let (file, _) = create_segment(&self.dir, header)?;
        Ok(Tail {
            file,
            start: self.end.lsn,
            len: SEGMENT_HEADER_LEN as u64,
        })
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Writes checkpoint `bytes` at `lsn` into `dir` whole (tmp, fsync,
/// rename), then deletes the segments wholly before it (never the newest)
/// and the older checkpoints.
pub fn install_checkpoint(dir: &Path, lsn: u64, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_checkpoint_path(dir, lsn);
    let fin = checkpoint_path(dir, lsn);
    let mut f = File::create(&tmp).map_err(|e| io_err("creating", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_err("writing", &tmp, e))?;
    std::fs::rename(&tmp, &fin).map_err(|e| io_err("renaming", &tmp, e))?;
    sync_dir(dir)?;
    let segments = list_segments(dir)?;
    for w in segments.windows(2) {
        if w[1].0 <= lsn {
            std::fs::remove_file(&w[0].1).map_err(|e| io_err("deleting", &w[0].1, e))?;
        }
    }
    for (old, path) in list_checkpoints(dir)? {
        if old < lsn {
            std::fs::remove_file(&path).map_err(|e| io_err("deleting", &path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::{begin_frame, seal_frame, RecordKind};

    /// A batch of frames with `payloads`, from `at`; returns it and where
    /// it ends.
    fn batch(at: LogPosition, payloads: &[&str]) -> (Vec<u8>, LogPosition) {
        let mut buf = Vec::new();
        let mut pos = at;
        for p in payloads {
            let from = begin_frame(&mut buf);
            buf.extend_from_slice(p.as_bytes());
            let crc = seal_frame(&mut buf, from, pos.lsn, pos.crc, RecordKind::Commit);
            pos = LogPosition {
                lsn: pos.lsn + (buf.len() - from) as u64,
                crc,
            };
        }
        (buf, pos)
    }

    /// The payloads the log in `dir` holds, in order.
    fn read(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let from = list_checkpoints(dir)
            .expect("listed")
            .last()
            .map(|(_, p)| checkpoint_position(&std::fs::read(p).expect("read")).expect("pos"))
            .unwrap_or_default();
        let opts = ReadOptions {
            from,
            allow_missing_prefix: true,
            repair: false,
            log_id: 7,
        };
        read_log(dir, opts, |_, _, payload| {
            out.push(String::from_utf8_lossy(payload).into_owned());
            Ok(())
        })
        .expect("a valid log");
        out
    }

    /// A checkpoint file's bytes at `pos` (its header is what the copy
    /// reads).
    fn checkpoint(pos: LogPosition) -> Vec<u8> {
        let mut b = b"BRINECKP".to_vec();
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&pos.lsn.to_le_bytes());
        b.extend_from_slice(&pos.crc.to_le_bytes());
        b.extend_from_slice(b"rows");
        b
    }

    #[test]
    fn a_copy_holds_the_committed_batches_across_segments_and_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mirror::open(dir.path(), 7, 100).expect("opened");
        let mut pos = LogPosition::default();
        let mut expected = Vec::new();
        for i in 0..12 {
            let words = [format!("a{i}"), format!("b{i}")];
            let (frames, end) = batch(pos, &[&words[0], &words[1]]);
            m.apply_batch(&frames).expect("applied");
            expected.extend(words);
            pos = end;
        }
        assert!(list_segments(dir.path()).expect("listed").len() > 2);
        assert_eq!(read(dir.path()), expected);
        assert_eq!((m.end(), m.applied()), (pos, pos));
        let m = Mirror::open(dir.path(), 7, 100).expect("reopened");
        assert_eq!(m.end(), pos);
    }

    #[test]
    fn a_tail_no_quorum_had_is_replaced_and_batches_applied_again_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mirror::open(dir.path(), 7, 1 << 20).expect("opened");
        let (a, after_a) = batch(LogPosition::default(), &["a"]);
        let (b, _) = batch(after_a, &["b-never-committed", "b2"]);
        m.apply_batch(&a).expect("applied");
        // A former leader's writer put `b` there; the group committed `c`.
        m.apply_batch(&b).expect("applied");
        let (c, after_c) = batch(after_a, &["c"]);
        m.apply_batch(&c).expect("applied");
        assert_eq!(read(dir.path()), vec!["a", "c"]);
        // Applied again after a restart: recognised, nothing written.
        m.apply_batch(&a).expect("applied again");
        m.apply_batch(&c).expect("applied again");
        assert_eq!(read(dir.path()), vec!["a", "c"]);
        assert_eq!(m.applied(), after_c);
        // Beyond what the group applied: cut before the copy is used.
        let (d, _) = batch(after_c, &["d-uncommitted"]);
        m.apply_batch(&d).expect("written");
        m.restore(&{
            let mut marker = vec![MARKER];
            marker.extend_from_slice(&after_c.lsn.to_le_bytes());
            marker.extend_from_slice(&after_c.crc.to_le_bytes());
            marker
        })
        .expect("marker");
        m.settle().expect("settled");
        assert_eq!(read(dir.path()), vec!["a", "c"]);
    }

    #[test]
    fn checkpoints_drop_what_they_cover_and_an_image_rebuilds_the_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mirror::open(dir.path(), 7, 64).expect("opened");
        let mut pos = LogPosition::default();
        for i in 0..6 {
            let (frames, end) = batch(pos, &[&format!("x{i}")]);
            m.apply_batch(&frames).expect("applied");
            pos = end;
        }
        let at = pos;
        m.apply_checkpoint(&checkpoint(at)).expect("installed");
        let (frames, end) = batch(at, &["after"]);
        m.apply_batch(&frames).expect("applied");
        let segments = list_segments(dir.path()).expect("listed");
        assert!(
            segments.iter().all(|(s, _)| *s + 64 > at.lsn),
            "{segments:?}"
        );
        assert_eq!(read(dir.path()), vec!["after"]);
        let other = tempfile::tempdir().expect("tempdir");
        let mut copy = Mirror::open(other.path(), 7, 64).expect("opened");
        copy.restore(&m.image().expect("image")).expect("restored");
        assert_eq!(read(other.path()), vec!["after"]);
        assert_eq!((copy.end(), copy.applied()), (end, end));
        // It follows on from there.
        let (next, _) = batch(end, &["next"]);
        copy.apply_batch(&next).expect("applied");
        assert_eq!(read(other.path()), vec!["after", "next"]);
        // A log that restarted past this copy's end (at a checkpoint it
        // did not get) supersedes what the copy holds.
        let (jump, _) = batch(
            LogPosition {
                lsn: 10_000,
                crc: 9,
            },
            &["restarted"],
        );
        copy.apply_batch(&jump).expect("applied");
        let opts = ReadOptions {
            from: LogPosition {
                lsn: 10_000,
                crc: 9,
            },
            allow_missing_prefix: true,
            repair: false,
            log_id: 7,
        };
        let mut seen = Vec::new();
        read_log(other.path(), opts, |_, _, p| {
            seen.push(p.to_vec());
            Ok(())
        })
        .expect("valid");
        assert_eq!(seen, vec![b"restarted".to_vec()]);
    }
}
