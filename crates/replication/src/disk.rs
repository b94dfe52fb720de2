//! A replica's raft state on disk: what raft requires to survive a
//! restart (its log entries, its term and vote, the voters, and the image
//! the compacted prefix of the log stands for), in one directory.
//!
//! ```text
//!  entries   records [len u32 · crc32c u32 · Entry (protobuf)], appended and
//!            fsynced before the replica acknowledges them; an append that
//!            starts inside the log truncates the file there first (raft
//!            replaced a tail no quorum had); a torn last record is cut off
//!            at open
//!  state     term, vote, commit · voters · learners (rewritten: tmp, fsync,
//!            rename) whenever the term, the vote or the voters change
//!  snapshot  the latest image and its index, term and voters (rewritten
//!            the same way); compaction then rewrites `entries` without the
//!            prefix
//! ```
//!
//! The commit index is written only along with a term or vote change: a
//! restarted replica may think less is committed than was, and learns the
//! rest from its leader (raft allows it: commit is never ahead of the log).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot};

use crate::{ReplicationError, Result};

fn io(what: &str, path: &Path, e: std::io::Error) -> ReplicationError {
    ReplicationError::Disk(format!("{what} {}: {e}", path.display()))
}

/// What a replica's directory held when it was opened.
pub(crate) struct Restored {
    pub hard: HardState,
    pub conf: Option<ConfState>,
    pub snapshot: Option<Snapshot>,
    pub entries: Vec<Entry>,
}

/// The files of one replica's raft state.
pub(crate) struct DiskLog {
    dir: PathBuf,
    entries: File,
    /// File offset of each entry the file holds, from `first` on.
    offsets: Vec<u64>,
    first: u64,
    len: u64,
    /// The term and vote last written.
    written: (u64, u64),
}

const RECORD_HEADER: usize = 8;

impl DiskLog {
    /// Opens (or creates) the state in `dir`; what it held comes back.
    pub fn open(dir: &Path) -> Result<(DiskLog, Restored)> {
        std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
        let snapshot = match read_file(&dir.join("snapshot"))? {
            Some(bytes) => Some(
                Snapshot::parse_from_bytes(&bytes)
                    .map_err(|e| ReplicationError::Disk(format!("snapshot: {e}")))?,
            ),
            None => None,
        };
        let (hard, conf) = match read_file(&dir.join("state"))? {
            Some(bytes) => decode_state(&bytes)?,
            None => (HardState::default(), None),
        };
        let path = dir.join("entries");
        let data = read_file(&path)?.unwrap_or_default();
        let floor = snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
        let mut entries: Vec<Entry> = Vec::new();
        let mut offsets = Vec::new();
        let mut at = 0usize;
        while data.len() - at >= RECORD_HEADER {
            let len = u32::from_le_bytes(data[at..at + 4].try_into().expect("4")) as usize;
            let crc = u32::from_le_bytes(data[at + 4..at + 8].try_into().expect("4"));
            let Some(body) = data.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
                break; // torn: the last append did not finish
            };
            if crc32c::crc32c(body) != crc {
                break;
            }
            let e = Entry::parse_from_bytes(body)
                .map_err(|e| ReplicationError::Disk(format!("log entry: {e}")))?;
            // Records of an appended-over tail were truncated away; what
            // the snapshot covers is skipped.
            if e.index > floor {
                if let Some(last) = entries.last() {
                    if e.index != last.index + 1 {
                        return Err(ReplicationError::Disk(format!(
                            "{}: entry {} follows entry {}",
                            path.display(),
                            e.index,
                            last.index
                        )));
                    }
                }
                offsets.push(at as u64);
                entries.push(e);
            }
            at += RECORD_HEADER + len;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io("opening", &path, e))?;
        file.set_len(at as u64)
            .map_err(|e| io("truncating", &path, e))?;
        file.sync_all().map_err(|e| io("syncing", &path, e))?;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0))
            .map_err(|e| io("seeking", &path, e))?;
        let first = entries.first().map_or(floor + 1, |e| e.index);
        let written = (hard.term, hard.vote);
        Ok((
            DiskLog {
                dir: dir.to_path_buf(),
                entries: file,
                offsets,
                first,
                len: at as u64,
                written,
            },
            Restored {
                hard,
                conf,
                snapshot,
                entries,
            },
        ))
    }

    /// Appends `entries` (consecutive), replacing the log from the first
    /// one's index on, and syncs.
    pub fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        let path = self.dir.join("entries");
        let keep = head.index.saturating_sub(self.first) as usize;
        if keep < self.offsets.len() {
            let cut = self.offsets[keep];
            self.entries
                .set_len(cut)
                .map_err(|e| io("truncating", &path, e))?;
            use std::io::Seek;
            self.entries
                .seek(std::io::SeekFrom::Start(cut))
                .map_err(|e| io("seeking", &path, e))?;
            self.offsets.truncate(keep);
            self.len = cut;
        }
        if self.offsets.is_empty() {
            self.first = head.index;
        }
        let mut buf = Vec::new();
        for e in entries {
            let body = e
                .write_to_bytes()
                .map_err(|e| ReplicationError::Disk(format!("encoding an entry: {e}")))?;
            self.offsets.push(self.len + buf.len() as u64);
            buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            buf.extend_from_slice(&body);
        }
        self.entries
            .write_all(&buf)
            .map_err(|e| io("appending to", &path, e))?;
        self.entries
            .sync_data()
            .map_err(|e| io("syncing", &path, e))?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Writes the term, vote and commit if the term or vote changed.
    pub fn hard_state(&mut self, hs: &HardState, conf: &ConfState) -> Result<()> {
        if (hs.term, hs.vote) == self.written {
            return Ok(());
        }
        self.state(hs, conf)
    }

    /// Writes the hard state and the voters.
    pub fn state(&mut self, hs: &HardState, conf: &ConfState) -> Result<()> {
        write_atomic(&self.dir, "state", &encode_state(hs, conf))?;
        self.written = (hs.term, hs.vote);
        Ok(())
    }

    /// Keeps `snapshot` as the image of the log up to its index, and drops
    /// the entries it covers.
    pub fn snapshot(&mut self, snapshot: &Snapshot, rest: &[Entry]) -> Result<()> {
        let bytes = snapshot
            .write_to_bytes()
            .map_err(|e| ReplicationError::Disk(format!("encoding a snapshot: {e}")))?;
        write_atomic(&self.dir, "snapshot", &bytes)?;
        self.rewrite(snapshot.get_metadata().index + 1, rest)
    }

    /// Rewrites the entries file with `rest` alone (starting at `first`).
    fn rewrite(&mut self, first: u64, rest: &[Entry]) -> Result<()> {
        let path = self.dir.join("entries");
        let tmp = self.dir.join("entries.tmp");
        let mut f = File::create(&tmp).map_err(|e| io("creating", &tmp, e))?;
        let mut offsets = Vec::with_capacity(rest.len());
        let mut buf = Vec::new();
        for e in rest {
            let body = e
                .write_to_bytes()
                .map_err(|e| ReplicationError::Disk(format!("encoding an entry: {e}")))?;
            offsets.push(buf.len() as u64);
            buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            buf.extend_from_slice(&body);
        }
        f.write_all(&buf).map_err(|e| io("writing", &tmp, e))?;
        f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("renaming", &tmp, e))?;
        sync_dir(&self.dir)?;
        let mut file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io("opening", &path, e))?;
        file.flush().map_err(|e| io("opening", &path, e))?;
        self.entries = file;
        self.offsets = offsets;
        self.first = rest.first().map_or(first, |e| e.index);
        self.len = buf.len() as u64;
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("reading", path, e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing", dir, e))
}

/// Writes `name` in `dir` whole or not at all.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut f = File::create(&tmp).map_err(|e| io("creating", &tmp, e))?;
    f.write_all(bytes).map_err(|e| io("writing", &tmp, e))?;
    f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming", &tmp, e))?;
    sync_dir(dir)
}

fn put_ids(out: &mut Vec<u8>, ids: &[u64]) {
    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

fn encode_state(hs: &HardState, conf: &ConfState) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    for v in [hs.term, hs.vote, hs.commit] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_ids(&mut out, &conf.voters);
    put_ids(&mut out, &conf.learners);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode_state(b: &[u8]) -> Result<(HardState, Option<ConfState>)> {
    let bad = || ReplicationError::Disk("the replica's state file is damaged".into());
    if b.len() < 4 {
        return Err(bad());
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(bad());
    }
    let mut r = Fields { body, at: 0 };
    let hs = HardState {
        term: r.u64().ok_or_else(bad)?,
        vote: r.u64().ok_or_else(bad)?,
        commit: r.u64().ok_or_else(bad)?,
        ..HardState::default()
    };
    let voters = r.ids().ok_or_else(bad)?;
    let learners = r.ids().ok_or_else(bad)?;
    Ok((hs, Some(ConfState::from((voters, learners)))))
}

/// Reads the state file's fields in order.
struct Fields<'a> {
    body: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let v = self.body.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(v)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }

    fn ids(&mut self) -> Option<Vec<u64>> {
        let n = u32::from_le_bytes(self.take::<4>()?) as usize;
        (0..n).map(|_| self.u64()).collect()
    }
}
