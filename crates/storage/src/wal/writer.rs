//! The log writer: producers append frames to a shared buffer; one thread
//! per log writes and fsyncs them in batches (group commit) and then runs
//! the waiters of everything the fsync made durable.
//!
//! ```text
//!  producer (partition actor / coordinators)         writer thread
//!   lock pending ─ encode frame into pending.buf      wait for data (condvar)
//!                  (lsn, chain crc assigned here)     [optional window: wait up to
//!                  push (end lsn, waiter)              `group_commit_window` or until
//!   unlock; wake the writer if it sleeps               `max_batch_bytes` are pending]
//!   ... keeps executing other transactions ...        swap pending.buf with its own
//!                                                     write(batch); fdatasync
//!                                                     durable_lsn = end of batch
//!                                                     run waiters (send commit acks)
//!                                                     install queued checkpoints
//!                                                     rotate the segment if full
//! ```
//!
//! Guarantees: a waiter runs with `Ok` only after every byte up to its lsn
//! is on stable storage (fdatasync returned); frames reach the file in lsn
//! order; the lock on the pending buffer is held by the writer only to swap
//! buffers, never across I/O. After an I/O error the log is *failed*: every
//! waiter and every later append gets the error (the node must restart and
//! recover, as after a crash). After a crash injected by the
//! [`CrashSwitch`](super::fault::CrashSwitch) no waiter ever runs.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use brine_core::{Error, Result};
use parking_lot::{Condvar, Mutex};

use super::fault::{CrashSwitch, StepKind, TornRng};
use super::record::{begin_frame, seal_frame, RecordKind, FRAME_HEADER_LEN, MAX_PAYLOAD_LEN};
use super::segment::{
    create_segment, io_err, list_segments, segment_path, sync_dir, SegmentHeader,
    SEGMENT_HEADER_LEN,
};
use crate::checkpoint::{checkpoint_path, list_checkpoints, tmp_checkpoint_path};

/// Runs once the lsn it waits for is durable (or the log failed).
pub type Waiter = Box<dyn FnOnce(Result<()>) + Send>;

/// Copies a log's batches to its other replicas (a replication group):
/// `done` runs once a quorum of them has the batch, in batch order. Until
/// then the batch's waiters wait, and the log's durable lsn stays behind.
pub trait Replicate: Send + Sync {
    /// `batch` holds the frames up to lsn `end`, durable here.
    fn replicate(&self, batch: Vec<u8>, end: u64, done: Waiter);
    /// A checkpoint at `lsn` (the bytes of its file), after the batch that
    /// reaches `lsn`: installed at every replica, this one included, once
    /// a quorum has it; `done` runs then (a checkpoint no quorum has must
    /// not replace the log a former leader's copy would need).
    fn checkpoint(&self, lsn: u64, bytes: Vec<u8>, done: Waiter);
    /// `done` runs once every replica that can be reached has applied
    /// what the group committed so far (a clean stop: every copy complete).
    fn settle(&self, done: Waiter) {
        done(Ok(()))
    }
}

/// A log's [`Replicate`], if it has replicas.
#[derive(Clone)]
pub struct Replicas(pub Arc<dyn Replicate>);

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replicas")
    }
}

/// Settings of one log.
#[derive(Clone, Debug)]
pub struct LogConfig {
    pub dir: PathBuf,
    /// Partition id or coordinator node id; written into segment headers.
    pub log_id: u32,
    /// A segment is closed and a new one started once it holds this much.
    pub segment_bytes: u64,
    /// How long the writer may wait for more records before writing a
    /// batch, when the previous batch held more than one record (0: write
    /// whatever is pending as soon as the previous fsync ends, which
    /// already batches under load).
    pub group_commit_window: Duration,
    /// A batch is written at once when this much is pending, window or not.
    pub max_batch_bytes: usize,
    /// The log's other replicas: a batch is durable once a quorum has it.
    pub replicas: Option<Replicas>,
}

/// Where a log ends: the next frame's lsn and the chain crc before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPosition {
    pub lsn: u64,
    pub crc: u32,
}

/// Counters of one log, read without locking.
#[derive(Debug, Default)]
pub struct LogStats {
    pub fsyncs: AtomicU64,
    pub bytes: AtomicU64,
    pub records: AtomicU64,
    pub waiters: AtomicU64,
    pub rotations: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Batches handed to the log's replicas (`LogConfig::replicas`).
    pub replicated: AtomicU64,
}

/// A copy of [`LogStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStatsSnapshot {
    pub fsyncs: u64,
    pub bytes: u64,
    pub records: u64,
    pub waiters: u64,
    pub rotations: u64,
    pub checkpoints: u64,
    pub replicated: u64,
}

impl LogStatsSnapshot {
    pub fn add(&mut self, o: &LogStatsSnapshot) {
        self.fsyncs += o.fsyncs;
        self.bytes += o.bytes;
        self.records += o.records;
        self.waiters += o.waiters;
        self.rotations += o.rotations;
        self.checkpoints += o.checkpoints;
        self.replicated += o.replicated;
    }

    pub fn since(&self, before: &LogStatsSnapshot) -> LogStatsSnapshot {
        LogStatsSnapshot {
            fsyncs: self.fsyncs.saturating_sub(before.fsyncs),
            bytes: self.bytes.saturating_sub(before.bytes),
            records: self.records.saturating_sub(before.records),
            waiters: self.waiters.saturating_sub(before.waiters),
            rotations: self.rotations.saturating_sub(before.rotations),
            checkpoints: self.checkpoints.saturating_sub(before.checkpoints),
            replicated: self.replicated.saturating_sub(before.replicated),
        }
    }
}

enum Job {
    Checkpoint {
        lsn: u64,
        bytes: Vec<u8>,
        done: Waiter,
    },
}

struct Pending {
    buf: Vec<u8>,
    records: u64,
    waiters: Vec<(u64, Waiter)>,
    jobs: Vec<Job>,
    end: LogPosition,
    /// The writer sleeps waiting for any work.
    idle: bool,
    /// The writer waits out the group-commit window.
    windowing: bool,
    closed: bool,
    failed: Option<Error>,
}

struct Inner {
    pending: Mutex<Pending>,
    cv: Condvar,
    durable: AtomicU64,
    stats: LogStats,
    crash: Arc<CrashSwitch>,
    config: LogConfig,
}

/// One write-ahead log. Dropping it lets the writer finish what is pending
/// and stop; [`Log::close`] also waits for that.
pub struct Log {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Log({})", self.inner.config.dir.display())
    }
}

impl Log {
    /// Starts a log whose next frame is at `start`: creates a new segment
    /// there (replacing a file of that name: recovery has already read and
    /// checkpointed everything before `start`) and the writer thread.
    pub fn open(config: LogConfig, start: LogPosition, crash: Arc<CrashSwitch>) -> Result<Log> {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| io_err("creating log directory", &config.dir, e))?;
        let header = SegmentHeader {
            log_id: config.log_id,
            start_lsn: start.lsn,
            prev_crc: start.crc,
        };
        let (file, path) = create_segment(&config.dir, header)?;
        let inner = Arc::new(Inner {
            pending: Mutex::new(Pending {
                buf: Vec::with_capacity(64 << 10),
                records: 0,
                waiters: Vec::new(),
                jobs: Vec::new(),
                end: start,
                idle: false,
                windowing: false,
                closed: false,
                failed: None,
            }),
            cv: Condvar::new(),
            durable: AtomicU64::new(start.lsn),
            stats: LogStats::default(),
            crash: crash.clone(),
            config: config.clone(),
        });
        let writer = Writer {
            inner: inner.clone(),
            file,
            path,
            seg_start: start.lsn,
            seg_len: SEGMENT_HEADER_LEN as u64,
            synced_len: SEGMENT_HEADER_LEN as u64,
            rng: TornRng::new(
                crash.seed() ^ u64::from(config.log_id).wrapping_mul(0x1234_5678_9abc),
            ),
        };
        let thread = std::thread::Builder::new()
            .name(format!("brine-wal-{}", config.log_id))
            .spawn(move || writer.run())
            .map_err(|e| Error::Storage(format!("cannot start the log writer thread: {e}")))?;
        Ok(Log {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn config(&self) -> &LogConfig {
        &self.inner.config
    }

    /// The position after the last appended frame.
    pub fn position(&self) -> LogPosition {
        self.inner.pending.lock().end
    }

    /// The log takes no more records: it failed (an I/O error) or its
    /// machine crashed (simulated power loss).
    pub fn is_down(&self) -> bool {
        self.inner.crash.is_crashed() || self.inner.pending.lock().failed.is_some()
    }

    /// Everything below this lsn is on stable storage.
    pub fn durable_lsn(&self) -> u64 {
        self.inner.durable.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> LogStatsSnapshot {
        let s = &self.inner.stats;
        LogStatsSnapshot {
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            records: s.records.load(Ordering::Relaxed),
            waiters: s.waiters.load(Ordering::Relaxed),
            rotations: s.rotations.load(Ordering::Relaxed),
            checkpoints: s.checkpoints.load(Ordering::Relaxed),
            replicated: s.replicated.load(Ordering::Relaxed),
        }
    }

    /// Appends one frame whose payload `encode` writes; returns the lsn
    /// after it. The frame becomes durable with a later batch.
    pub fn append(&self, kind: RecordKind, encode: impl FnOnce(&mut Vec<u8>)) -> Result<u64> {
        let mut p = self.inner.pending.lock();
        let end = Self::append_locked(&mut p, kind, encode)?;
        self.wake_locked(&p);
        Ok(end)
    }

    /// Appends one frame and runs `waiter` once it is durable. On an
    /// error the waiter is run with it too.
    pub fn append_then(
        &self,
        kind: RecordKind,
        encode: impl FnOnce(&mut Vec<u8>),
        waiter: Waiter,
    ) -> Result<u64> {
        let mut p = self.inner.pending.lock();
        match Self::append_locked(&mut p, kind, encode) {
            Ok(end) => {
                p.waiters.push((end, waiter));
                self.wake_locked(&p);
                Ok(end)
            }
            Err(e) => {
                drop(p);
                waiter(Err(e.clone()));
                Err(e)
            }
        }
    }

    fn append_locked(
        p: &mut Pending,
        kind: RecordKind,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<u64> {
        if let Some(e) = &p.failed {
            return Err(e.clone());
        }
        if p.closed {
            return Err(Error::Storage("the log is closed".into()));
        }
        let at = begin_frame(&mut p.buf);
        encode(&mut p.buf);
        let payload = p.buf.len() - at - FRAME_HEADER_LEN;
        if payload > MAX_PAYLOAD_LEN {
            p.buf.truncate(at);
            return Err(Error::Bound(format!(
                "a {kind:?} log record of {payload} bytes exceeds the {MAX_PAYLOAD_LEN}-byte limit"
            )));
        }
        let lsn = p.end.lsn;
        let crc = seal_frame(&mut p.buf, at, lsn, p.end.crc, kind);
        p.end = LogPosition {
            lsn: lsn + (FRAME_HEADER_LEN + payload) as u64,
            crc,
        };
        p.records += 1;
        Ok(p.end.lsn)
    }

    fn wake_locked(&self, p: &Pending) {
        if p.idle || (p.windowing && p.buf.len() >= self.inner.config.max_batch_bytes) {
            self.inner.cv.notify_one();
        }
    }

    /// Runs `waiter` once everything below `lsn` is durable: at once (on
    /// this thread) if it already is, unless the log is replicated (then a
    /// quorum of its group confirms it, with an entry of its own).
    pub fn when_durable(&self, lsn: u64, waiter: Waiter) {
        // A replicated log confirms through its group even what is durable
        // already: a replica that no longer leads (another took over while
        // it was cut off) must not acknowledge a read of its stale state.
        let replicated = self.inner.config.replicas.is_some();
        if self.durable_lsn() >= lsn && !replicated {
            waiter(Ok(()));
            return;
        }
        let mut p = self.inner.pending.lock();
        if let Some(e) = &p.failed {
            let e = e.clone();
            drop(p);
            waiter(Err(e));
            return;
        }
        // Re-checked under the lock: the writer publishes durability before
        // it takes the lock to collect the next waiters.
        if self.durable_lsn() >= lsn && !replicated {
            drop(p);
            waiter(Ok(()));
            return;
        }
        p.waiters.push((lsn, waiter));
        self.wake_locked(&p);
    }

    /// Queues a checkpoint taken at `lsn` (every frame below it is
    /// reflected in `bytes`). The writer installs it once the log is durable
    /// up to `lsn`, then deletes the segments and checkpoints it makes
    /// unnecessary; `done` runs after that.
    pub fn checkpoint(&self, lsn: u64, bytes: Vec<u8>, done: Waiter) {
        let mut p = self.inner.pending.lock();
        if let Some(e) = &p.failed {
            let e = e.clone();
            drop(p);
            done(Err(e));
            return;
        }
        p.jobs.push(Job::Checkpoint { lsn, bytes, done });
        self.inner.cv.notify_one();
    }

    /// `done` runs once the log's replicas all applied what their group
    /// committed so far (at once without replicas).
    pub fn settle_replicas(&self, done: Waiter) {
        match &self.inner.config.replicas {
            Some(Replicas(to)) => to.settle(done),
            None => done(Ok(())),
        }
    }

    /// Wakes the writer (after the crash switch fired, so it notices).
    pub fn wake(&self) {
        let _p = self.inner.pending.lock();
        self.inner.cv.notify_all();
    }

    /// Lets the writer finish what is pending and waits for it to stop.
    pub fn close(&self) {
        {
            let mut p = self.inner.pending.lock();
            p.closed = true;
            self.inner.cv.notify_all();
        }
        self.join();
    }

    /// Waits for the writer thread to end (after `close` or a crash).
    pub fn join(&self) {
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let mut p = self.inner.pending.lock();
        p.closed = true;
        self.inner.cv.notify_all();
    }
}

/// Why the writer stopped doing I/O.
enum Stop {
    Crashed,
    Io(Error),
}

struct Writer {
    inner: Arc<Inner>,
    file: File,
    path: PathBuf,
    seg_start: u64,
    /// Bytes written to the current segment file, header included.
    seg_len: u64,
    /// Of those, the ones an fsync made durable.
    synced_len: u64,
    rng: TornRng,
}

impl Writer {
    fn step(&self, kind: StepKind) -> std::result::Result<(), Stop> {
        if self.inner.crash.step(kind) {
            Err(Stop::Crashed)
        } else {
            Ok(())
        }
    }

    fn run(mut self) {
        let mut batch: Vec<u8> = Vec::with_capacity(64 << 10);
        let mut waiters: Vec<(u64, Waiter)> = Vec::new();
        let mut jobs: Vec<Job> = Vec::new();
        let window = self.inner.config.group_commit_window;
        let max_batch = self.inner.config.max_batch_bytes;
        // The window is waited only when the previous batch held more than
        // one record: with a single committer there is nobody to wait for.
        let mut last_records = 0u64;
        loop {
            let (end, records, failed) = {
                let mut p = self.inner.pending.lock();
                loop {
                    if self.inner.crash.is_crashed() {
                        drop(p);
                        self.power_loss();
                        return;
                    }
                    if !p.buf.is_empty() || !p.waiters.is_empty() || !p.jobs.is_empty() {
                        break;
                    }
                    if p.closed {
                        return;
                    }
                    p.idle = true;
                    self.inner.cv.wait(&mut p);
                    p.idle = false;
                }
                if !window.is_zero() && p.failed.is_none() && last_records > 1 {
                    let deadline = Instant::now() + window;
                    while p.buf.len() < max_batch && !p.closed && !self.inner.crash.is_crashed() {
                        p.windowing = true;
                        let timed_out = self.inner.cv.wait_until(&mut p, deadline).timed_out();
                        p.windowing = false;
                        if timed_out {
                            break;
                        }
                    }
                    // The power may have gone while waiting: nothing more
                    // becomes durable (what the cut caused must not either).
                    if self.inner.crash.is_crashed() {
                        drop(p);
                        self.power_loss();
                        return;
                    }
                }
                std::mem::swap(&mut p.buf, &mut batch);
                std::mem::swap(&mut p.waiters, &mut waiters);
                std::mem::swap(&mut p.jobs, &mut jobs);
                let records = std::mem::take(&mut p.records);
                last_records = records;
                (p.end.lsn, records, p.failed.clone())
            };
            let result = match failed {
                Some(e) => Err(Stop::Io(e)),
                None => self.write_batch(&batch, records),
            };
            let replicas = self.inner.config.replicas.clone();
            if let (Ok(()), Some(Replicas(to))) = (&result, replicas) {
                // Durable once a quorum of the replicas has it too: its
                // waiters run then, in batch order.
                let waiting = std::mem::take(&mut waiters);
                let inner = self.inner.clone();
                self.inner.stats.replicated.fetch_add(1, Ordering::Relaxed);
                self.inner
                    .stats
                    .waiters
                    .fetch_add(waiting.len() as u64, Ordering::Relaxed);
                // Handed over whole (the writer takes a fresh buffer).
                let handed = std::mem::replace(&mut batch, Vec::with_capacity(64 << 10));
                to.replicate(
                    handed,
                    end,
                    Box::new(move |r: Result<()>| {
                        if r.is_ok() {
                            inner.durable.fetch_max(end, Ordering::AcqRel);
                        }
                        for (_, w) in waiting {
                            w(r.clone());
                        }
                    }),
                );
            }
            batch.clear();
            match result {
                Ok(()) if self.inner.config.replicas.is_some() => {}
                Ok(()) => {
                    self.inner.durable.store(end, Ordering::Release);
                    self.inner
                        .stats
                        .waiters
                        .fetch_add(waiters.len() as u64, Ordering::Relaxed);
                    for (lsn, w) in waiters.drain(..) {
                        debug_assert!(lsn <= end, "waiter beyond the written batch");
                        w(Ok(()));
                    }
                }
                Err(Stop::Crashed) => {
                    self.power_loss();
                    return;
                }
                Err(Stop::Io(e)) => {
                    self.fail(e, &mut waiters, &mut jobs);
                    continue;
                }
            }
            for job in jobs.drain(..) {
                let Job::Checkpoint { lsn, bytes, done } = job;
                if let Some(Replicas(to)) = &self.inner.config.replicas {
                    to.checkpoint(lsn, bytes, done);
                    continue;
                }
                match self.install_checkpoint(lsn, &bytes) {
                    Ok(()) => {
                        self.inner.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                        done(Ok(()));
                    }
                    Err(Stop::Crashed) => {
                        self.power_loss();
                        return;
                    }
                    Err(Stop::Io(e)) => done(Err(e)),
                }
            }
            if self.seg_len >= self.inner.config.segment_bytes {
                match self.rotate(end) {
                    Ok(()) => {}
                    Err(Stop::Crashed) => {
                        self.power_loss();
                        return;
                    }
                    Err(Stop::Io(e)) => {
                        self.fail(e, &mut waiters, &mut jobs);
                    }
                }
            }
        }
    }

    /// Marks the log failed and answers everything with the error.
    fn fail(&mut self, e: Error, waiters: &mut Vec<(u64, Waiter)>, jobs: &mut Vec<Job>) {
        log_failure(&e);
        {
            let mut p = self.inner.pending.lock();
            if p.failed.is_none() {
                p.failed = Some(e.clone());
            }
            p.buf.clear();
        }
        for (_, w) in waiters.drain(..) {
            w(Err(e.clone()));
        }
        for Job::Checkpoint { done, .. } in jobs.drain(..) {
            done(Err(e.clone()));
        }
    }

    fn write_batch(&mut self, batch: &[u8], records: u64) -> std::result::Result<(), Stop> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.inner.crash.step(StepKind::Write) {
            // Torn: a random prefix of the batch reached the file.
            let n = self.rng.upto(batch.len() as u64) as usize;
            let _ = self.file.write_all(&batch[..n]);
            self.seg_len += n as u64;
            return Err(Stop::Crashed);
        }
        self.file
            .write_all(batch)
            .map_err(|e| Stop::Io(io_err("appending to", &self.path, e)))?;
        self.seg_len += batch.len() as u64;
        self.step(StepKind::Sync)?;
        self.file
            .sync_data()
            .map_err(|e| Stop::Io(io_err("syncing", &self.path, e)))?;
        self.synced_len = self.seg_len;
        let s = &self.inner.stats;
        s.fsyncs.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(batch.len() as u64, Ordering::Relaxed);
        s.records.fetch_add(records, Ordering::Relaxed);
        Ok(())
    }

    /// Closes the (synced) current segment and starts the next at `end`.
    fn rotate(&mut self, end: u64) -> std::result::Result<(), Stop> {
        let crc = self.inner.pending.lock().end_crc_at(end);
        let Some(crc) = crc else {
            debug_assert!(false, "no frame boundary at the end of the batch");
            return Ok(());
        };
        let dir = self.inner.config.dir.clone();
        self.step(StepKind::Rotate)?;
        let path = segment_path(&dir, end);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| Stop::Io(io_err("creating segment", &path, e)))?;
        self.file = file;
        self.path = path;
        self.seg_start = end;
        self.seg_len = 0;
        self.synced_len = 0;
        let header = SegmentHeader {
            log_id: self.inner.config.log_id,
            start_lsn: end,
            prev_crc: crc,
        }
        .encode();
        self.step(StepKind::Rotate)?;
        self.file
            .write_all(&header)
            .map_err(|e| Stop::Io(io_err("writing segment header", &self.path, e)))?;
        self.seg_len = SEGMENT_HEADER_LEN as u64;
        self.step(StepKind::Rotate)?;
        self.file
            .sync_data()
            .map_err(|e| Stop::Io(io_err("syncing", &self.path, e)))?;
        self.synced_len = self.seg_len;
        self.step(StepKind::Rotate)?;
        sync_dir(&dir).map_err(Stop::Io)?;
        self.inner.stats.rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn install_checkpoint(&mut self, lsn: u64, bytes: &[u8]) -> std::result::Result<(), Stop> {
        let dir = self.inner.config.dir.clone();
        let tmp = tmp_checkpoint_path(&dir, lsn);
        let fin = checkpoint_path(&dir, lsn);
        self.step(StepKind::Checkpoint)?;
        let mut f = File::create(&tmp).map_err(|e| Stop::Io(io_err("creating", &tmp, e)))?;
        f.write_all(bytes)
            .map_err(|e| Stop::Io(io_err("writing", &tmp, e)))?;
        self.step(StepKind::Checkpoint)?;
        f.sync_all()
            .map_err(|e| Stop::Io(io_err("syncing", &tmp, e)))?;
        self.step(StepKind::Checkpoint)?;
        std::fs::rename(&tmp, &fin).map_err(|e| Stop::Io(io_err("renaming", &tmp, e)))?;
        self.step(StepKind::Checkpoint)?;
        sync_dir(&dir).map_err(Stop::Io)?;
        // Segments wholly below the checkpoint are no longer needed; the
        // current one always stays.
        let segs = list_segments(&dir).map_err(Stop::Io)?;
        for w in segs.windows(2) {
            let (start, path) = (&w[0].0, &w[0].1);
            if w[1].0 <= lsn && *start != self.seg_start {
                self.step(StepKind::Checkpoint)?;
                std::fs::remove_file(path).map_err(|e| Stop::Io(io_err("deleting", path, e)))?;
            }
        }
        for (old, path) in list_checkpoints(&dir).map_err(Stop::Io)? {
            if old < lsn {
                self.step(StepKind::Checkpoint)?;
                std::fs::remove_file(&path).map_err(|e| Stop::Io(io_err("deleting", &path, e)))?;
            }
        }
        Ok(())
    }

    /// Simulated power loss: the current segment keeps its synced bytes
    /// and a random prefix of the rest, whose last bytes may be garbage.
    fn power_loss(&mut self) {
        let unsynced = self.seg_len.saturating_sub(self.synced_len);
        let keep = self.synced_len + self.rng.upto(unsynced);
        let _ = self.file.set_len(keep);
        let kept_unsynced = keep - self.synced_len;
        if kept_unsynced > 0 && self.rng.upto(1) == 1 {
            let n = kept_unsynced.min(1 + self.rng.upto(15));
            let garbage: Vec<u8> = (0..n).map(|_| self.rng.next_u64() as u8).collect();
            use std::os::unix::fs::FileExt;
            let _ = self.file.write_at(&garbage, keep - n);
        }
        let _ = self.file.sync_all();
        // The machine is "down": nothing is acknowledged any more, and
        // whoever waits learns that now rather than never.
        let crashed = Error::Storage("the log writer crashed (simulated power loss)".into());
        let (waiters, jobs) = {
            let mut p = self.inner.pending.lock();
            p.failed = Some(crashed.clone());
            p.buf.clear();
            (std::mem::take(&mut p.waiters), std::mem::take(&mut p.jobs))
        };
        for (_, w) in waiters {
            w(Err(crashed.clone()));
        }
        for Job::Checkpoint { done, .. } in jobs {
            done(Err(crashed.clone()));
        }
    }
}

impl Pending {
    /// The chain crc at `lsn` if `lsn` is the current end (nothing was
    /// appended since); rotation happens only at such a point.
    fn end_crc_at(&self, lsn: u64) -> Option<u32> {
        if self.end.lsn == lsn {
            Some(self.end.crc)
        } else {
            // The first pending frame starts at `lsn` and carries the crc.
            super::record::FrameHeader::parse(&self.buf)
                .filter(|h| h.lsn == lsn)
                .map(|h| h.prev_crc)
        }
    }
}

/// An I/O failure of the log must never be silent.
fn log_failure(e: &Error) {
    tracing::error!("write-ahead log failed; no further commits on this log: {e}");
}
