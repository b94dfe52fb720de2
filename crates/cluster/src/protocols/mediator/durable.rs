//! Mediator's durability: each partition's versions and each commit's
//! write set, in logs of Mediator's own beside the engine's (the engine's
//! partition logs hold row changes in the order they were made; Mediator's
//! versions are ordered by timestamp, which a write-back can arrive out
//! of).
//!
//! ```text
//!  data dir/mediator/
//!    part-<p>/   versions log: MediatorVersions(ts, row...) per native put
//!                and per write-back, forced before the answer; checkpoints
//!                of every item's latest version
//!    commits/    commit log: MediatorCommit(ts, write set) forced before
//!                the write-back; MediatorDone(ts) once it finished
//!
//!  native put at p ──► version ──► log at p ──► durable ──► answer
//!  commit ──► checks, fences ──► MediatorCommit durable ──► write-back at
//!             each p (each durable there) ──► MediatorDone ──► TSO, client
//!  recovery: per partition, newest checkpoint + log, the newest timestamp
//!            of each item wins; then every MediatorCommit without its
//!            MediatorDone is written back again the same way (the helper:
//!            a version newer than the commit's stays); then every
//!            partition is checkpointed and the commit log emptied; the
//!            TSO's clock resumes above every recovered timestamp
//! ```
//!
//! A get is answered once the partition's log is durable up to its end,
//! so nobody acts on a version a crash could take back.
//!
//! Across processes each process logs the commits its coordinators made
//! and the versions of the partitions it hosts. Recovery writes a logged
//! commit back into the local partitions as above, and keeps it in the
//! commit log (logged again after the log is emptied) until its
//! coordinator's recovery has written it back at every partition, remote
//! ones too, over the network (`MediatorLogs::take_resends`, `upkeep.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use brine_core::{Catalog, Error, Result, Row, TableId};
use brine_storage::checkpoint::{checkpoint_path, list_checkpoints};
use brine_storage::wal::codec::{put_u32, put_u64, put_values, Decoder};
use brine_storage::wal::segment::{list_segments, sync_dir};
use brine_storage::wal::{read_log, Log, LogPosition, ReadOptions, RecordKind};

use super::kv::Item;
use super::store::Ts;
use crate::durability::{drop_before_checkpoint, io, write_atomic, WalSet};

/// Mediator's directory under the data directory.
const DIR: &str = "mediator";
const CHECKPOINT_MAGIC: &[u8; 8] = b"BRMEDCK1";

/// What Mediator's recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MediatorRecovery {
    /// Items whose latest version came back from the versions logs.
    pub items: usize,
    /// Logged commits whose write-back had finished.
    pub finished: usize,
    /// Logged commits whose write-back had not: written back again.
    pub replayed: usize,
    /// Of the replayed commits' writes, those a newer version (a native put
    /// ordered after the commit) kept out.
    pub superseded: usize,
    /// Of the replayed commits' writes, those the partition's log already
    /// held (the write-back got that far).
    pub already_written: usize,
    /// Partitions whose log had a torn tail.
    pub torn: usize,
    /// The newest timestamp recovered: every new one is above it.
    pub clock: Ts,
}

/// A commit's writes: item, row, partition.
type Writes = Vec<(Item, Row, usize)>;

/// The latest version of each item of a partition: timestamp and row.
pub type Latest = HashMap<Item, (Ts, Row)>;

/// Mediator's logs of one cluster, as recovery left them.
pub struct MediatorLogs {
    commits: Arc<Log>,
    /// Each partition's log and recovered versions, taken by its actor.
    parts: parking_lot::Mutex<Vec<Option<PartitionLog>>>,
    pub recovery: MediatorRecovery,
    /// Across processes: the recovered commits still to be written back at
    /// every partition (taken once by recovery).
    resends: parking_lot::Mutex<Vec<(Ts, Writes)>>,
}

/// One partition's versions log, held by its actor.
pub struct PartitionLog {
    log: Arc<Log>,
    /// Latest versions recovered at start (taken once by the actor).
    pub recovered: Latest,
    every: u64,
    last_checkpoint: u64,
    checkpointing: Arc<AtomicBool>,
}

fn corrupt(path: &Path, offset: u64, reason: String) -> Error {
    Error::Corrupt {
        file: path.display().to_string(),
        offset,
        reason,
    }
}

fn part_dir(root: &Path, p: u32) -> PathBuf {
    root.join(format!("part-{p}"))
}

/// Encodes versions (timestamp, table, row) as one record's payload.
fn encode_versions<'a>(
    buf: &mut Vec<u8>,
    versions: impl ExactSizeIterator<Item = (Ts, TableId, &'a Row)>,
) {
    put_u32(buf, versions.len() as u32);
    for (ts, table, row) in versions {
        put_u64(buf, ts);
        put_u32(buf, table.0);
        put_values(buf, row);
    }
}

fn decode_versions(
    d: &mut Decoder<'_>,
    catalog: &Catalog,
) -> std::result::Result<Vec<(Ts, Item, Row)>, String> {
    let e = |x: brine_storage::wal::codec::DecodeError| x.0;
    let n = d.u32("versions").map_err(e)? as usize;
    let mut out = Vec::with_capacity(n.min(1 << 12));
    for _ in 0..n {
        let ts = d.u64("timestamp").map_err(e)?;
        let table = TableId(d.u32("table").map_err(e)?);
        let row = d.row().map_err(e)?;
        let def = catalog
            .tables()
            .get(table.0 as usize)
            .ok_or_else(|| format!("table {} is not in the schema", table.0))?;
        if row.len() != def.columns.len() {
            return Err(format!(
                "a version of `{}` has {} columns, the table {}",
                def.name,
                row.len(),
                def.columns.len()
            ));
        }
        out.push((ts, (table, def.primary_key_of(&row)), row));
    }
    Ok(out)
}

/// The newest timestamp wins: a version older than the one kept is
/// dropped (`false`).
fn keep_newest(latest: &mut Latest, ts: Ts, item: Item, row: Row) -> bool {
    match latest.get(&item) {
        Some((t, _)) if *t >= ts => false,
        _ => {
            latest.insert(item, (ts, row));
            true
        }
    }
}

/// A checkpoint of a partition's latest versions, taken at `pos`.
fn encode_checkpoint<'a>(
    pos: LogPosition,
    versions: impl ExactSizeIterator<Item = (Ts, TableId, &'a Row)>,
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(1 << 12);
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    put_u64(&mut buf, pos.lsn);
    put_u32(&mut buf, pos.crc);
    encode_versions(&mut buf, versions);
    let crc = crc32c::crc32c(&buf);
    put_u32(&mut buf, crc);
    buf
}

fn load_checkpoint(path: &Path, catalog: &Catalog) -> Result<(LogPosition, Latest)> {
    let data = std::fs::read(path).map_err(|e| io("reading", path, e))?;
    if data.len() < 24 || &data[..8] != CHECKPOINT_MAGIC {
        return Err(corrupt(path, 0, "not a Mediator checkpoint".into()));
    }
    let (body, stored) = data.split_at(data.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(stored.try_into().expect("4 bytes")) {
        return Err(corrupt(
            path,
            body.len() as u64,
            "checkpoint checksum mismatch".into(),
        ));
    }
    let mut d = Decoder::new(&body[8..]);
    let e = |x: brine_storage::wal::codec::DecodeError| x.0;
    let parsed = (|| {
        let lsn = d.u64("lsn").map_err(e)?;
        let crc = d.u32("crc").map_err(e)?;
        let versions = decode_versions(&mut d, catalog)?;
        Ok::<_, String>((LogPosition { lsn, crc }, versions))
    })();
    let (pos, versions) = parsed.map_err(|r| corrupt(path, 8, r))?;
    let mut latest = Latest::with_capacity(versions.len());
    for (ts, item, row) in versions {
        keep_newest(&mut latest, ts, item, row);
    }
    Ok((pos, latest))
}

/// One partition's versions from its newest checkpoint and its log.
fn recover_partition(dir: &Path, catalog: &Catalog, p: u32) -> Result<(Latest, LogPosition, u64)> {
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let (from, mut latest) = match list_checkpoints(dir)?.pop() {
        Some((_, path)) => load_checkpoint(&path, catalog)?,
        None => (LogPosition::default(), Latest::new()),
    };
    let end = read_log(
        dir,
        ReadOptions {
            from,
            allow_missing_prefix: false,
            repair: true,
            log_id: p,
        },
        |lsn, h, payload| {
            if RecordKind::from_u8(h.kind) != Some(RecordKind::MediatorVersions) {
                return Err(corrupt(
                    dir,
                    lsn,
                    format!("record kind {} in a versions log", h.kind),
                ));
            }
            let versions = decode_versions(&mut Decoder::new(payload), catalog)
                .map_err(|r| corrupt(dir, lsn, r))?;
            for (ts, item, row) in versions {
                keep_newest(&mut latest, ts, item, row);
            }
            Ok(())
        },
    )?;
    Ok((latest, end.position, end.torn_bytes))
}

/// A logged commit: its timestamp and its writes (partition, table, row).
type Logged = BTreeMap<Ts, Vec<(u32, TableId, Row)>>;

/// The commits the commit log holds without their end, and how many ended.
fn read_commits(dir: &Path, catalog: &Catalog) -> Result<(Logged, usize, LogPosition)> {
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let mut open = Logged::new();
    let mut finished = 0;
    let end = read_log(
        dir,
        ReadOptions {
            from: LogPosition::default(),
            allow_missing_prefix: true,
            repair: true,
            log_id: 0,
        },
        |lsn, h, payload| {
            let mut d = Decoder::new(payload);
            let e = |x: brine_storage::wal::codec::DecodeError| corrupt(dir, lsn, x.0);
            match RecordKind::from_u8(h.kind) {
                Some(RecordKind::MediatorCommit) => {
                    let ts = d.u64("commit timestamp").map_err(e)?;
                    let n = d.u32("writes").map_err(e)? as usize;
                    let mut writes = Vec::with_capacity(n.min(1 << 12));
                    for _ in 0..n {
                        let p = d.u32("partition").map_err(e)?;
                        let table = TableId(d.u32("table").map_err(e)?);
                        let row = d.row().map_err(e)?;
                        if catalog.tables().get(table.0 as usize).is_none() {
                            return Err(corrupt(
                                dir,
                                lsn,
                                format!("table {} is not in the schema", table.0),
                            ));
                        }
                        writes.push((p, table, row));
                    }
                    open.insert(ts, writes);
                }
                Some(RecordKind::MediatorDone) => {
                    let ts = d.u64("commit timestamp").map_err(e)?;
                    if open.remove(&ts).is_some() {
                        finished += 1;
                    }
                }
                _ => {
                    return Err(corrupt(
                        dir,
                        lsn,
                        format!("record kind {} in a commit log", h.kind),
                    ))
                }
            }
            Ok(())
        },
    )?;
    Ok((open, finished, end.position))
}

impl MediatorLogs {
    /// Recovers Mediator's logs under `wal`'s data directory (nothing, the
    /// first time) and opens them. `across`: the cluster runs across
    /// processes, so a recovered commit may write to partitions other
    /// processes host: it stays logged to be sent to them
    /// ([`MediatorLogs::take_resends`]).
    pub fn open(
        wal: &WalSet,
        catalog: &Catalog,
        partitions: u32,
        across: bool,
    ) -> Result<MediatorLogs> {
        let root = wal.protocol_dir(DIR);
        let mut report = MediatorRecovery::default();
        let mut latest = Vec::with_capacity(partitions as usize);
        let mut ends = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let (l, end, torn) = recover_partition(&part_dir(&root, p), catalog, p)?;
            report.torn += usize::from(torn > 0);
            latest.push(l);
            ends.push(end);
        }
        // The helper: a commit logged but not finished is written back
        // again; the newest timestamp still wins at each item.
        let commits_dir = root.join("commits");
        let (open, finished, commits_end) = read_commits(&commits_dir, catalog)?;
        report.finished = finished;
        report.replayed = open.len();
        let mut resends = Vec::new();
        for (ts, writes) in open {
            if across {
                let flat: Writes = writes
                    .iter()
                    .map(|(p, table, row)| {
                        let item = (*table, catalog.table(*table).primary_key_of(row));
                        (item, row.clone(), *p as usize)
                    })
                    .collect();
                resends.push((ts, flat));
            }
            for (p, table, row) in writes {
                let part = latest.get_mut(p as usize).ok_or_else(|| {
                    corrupt(
                        &commits_dir,
                        0,
                        format!("a commit writes to partition {p} of {partitions}"),
                    )
                })?;
                let item = (table, catalog.table(table).primary_key_of(&row));
                match part.get(&item).map(|(t, _)| *t) {
                    Some(t) if t > ts => report.superseded += 1,
                    Some(t) if t == ts => report.already_written += 1,
                    _ => {
                        part.insert(item, (ts, row));
                    }
                }
            }
        }
        // Every partition checkpointed where its log ends, so the commit
        // log can go: what it promised is in the checkpoints now.
        for (p, (l, end)) in latest.iter().zip(&ends).enumerate() {
            let dir = part_dir(&root, p as u32);
            let bytes = encode_checkpoint(*end, versions_of(l));
            write_atomic(&checkpoint_path(&dir, end.lsn), &bytes)?;
            drop_before_checkpoint(&dir, end.lsn)?;
        }
        for (_, path) in list_segments(&commits_dir)? {
            std::fs::remove_file(&path).map_err(|e| io("deleting", &path, e))?;
        }
        sync_dir(&commits_dir)?;
        report.items = latest.iter().map(HashMap::len).sum();
        report.clock = latest
            .iter()
            .flat_map(|l| l.values().map(|(t, _)| *t))
            .max()
            .unwrap_or(0);
        let commits = wal.open_protocol_log(commits_dir, 0, commits_end)?;
        for (ts, writes) in &resends {
            let (tx, rx) = std::sync::mpsc::channel();
            let _ = commits.append_then(
                RecordKind::MediatorCommit,
                |buf| encode_commit(buf, *ts, writes),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
            rx.recv().map_err(|_| {
                Error::Storage(format!(
                    "the commit log stopped before commit {ts} was logged again"
                ))
            })??;
        }
        let every = wal.checkpoint_every_bytes();
        let mut parts = Vec::with_capacity(partitions as usize);
        for (p, (recovered, end)) in latest.into_iter().zip(ends).enumerate() {
            let log = wal.open_protocol_log(part_dir(&root, p as u32), p as u32, end)?;
            parts.push(Some(PartitionLog {
                log,
                recovered,
                every,
                last_checkpoint: end.lsn,
                checkpointing: Arc::new(AtomicBool::new(false)),
            }));
        }
        if report.replayed > 0 || report.items > 0 {
            tracing::info!(?report, "Mediator recovered");
        }
        Ok(MediatorLogs {
            commits,
            parts: parking_lot::Mutex::new(parts),
            recovery: report,
            resends: parking_lot::Mutex::new(resends),
        })
    }

    /// Across processes: the recovered commits to write back at every
    /// partition, then log done (once).
    pub fn take_resends(&self) -> Vec<(Ts, super::helper::PartitionWrites)> {
        std::mem::take(&mut *self.resends.lock())
            .into_iter()
            .map(|(ts, writes)| (ts, super::helper::by_partition(&writes)))
            .collect()
    }

    /// The file of the TSO's clock lease, beside Mediator's logs.
    pub fn lease_path(wal: &WalSet) -> PathBuf {
        wal.protocol_dir(DIR).join("tso-lease")
    }

    /// Partition `p`'s log, for its actor (once).
    pub fn take_partition(&self, p: usize) -> Option<PartitionLog> {
        self.parts.lock().get_mut(p).and_then(Option::take)
    }

    /// Logs a commit's write set (partition, item, row) and waits until it
    /// is durable: from then on the commit survives a crash.
    pub async fn log_commit(&self, ts: Ts, writes: &[(Item, Row, usize)]) -> Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.commits.append_then(
            RecordKind::MediatorCommit,
            |buf| encode_commit(buf, ts, writes),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await.map_err(|_| {
            Error::Storage(format!(
                "the commit log stopped before commit {ts} was durable"
            ))
        })?
    }

    /// The commit's write-back finished (unforced: recovery writing it
    /// back again changes nothing).
    pub fn log_done(&self, ts: Ts) {
        if let Err(e) = self
            .commits
            .append(RecordKind::MediatorDone, |b| put_u64(b, ts))
        {
            tracing::error!("cannot log the end of commit {ts}: {e}");
        }
    }
}

/// A commit record's payload: its timestamp and writes.
fn encode_commit(buf: &mut Vec<u8>, ts: Ts, writes: &[(Item, Row, usize)]) {
    put_u64(buf, ts);
    put_u32(buf, writes.len() as u32);
    for ((table, _), row, p) in writes {
        put_u32(buf, *p as u32);
        put_u32(buf, table.0);
        put_values(buf, row);
    }
}

fn versions_of(latest: &Latest) -> impl ExactSizeIterator<Item = (Ts, TableId, &Row)> {
    latest
        .iter()
        .map(|((table, _), (ts, row))| (*ts, *table, row))
}

impl PartitionLog {
    /// Appends versions and runs `then` once they are durable (with the
    /// error if the log failed).
    pub fn append_then<'a>(
        &self,
        versions: impl ExactSizeIterator<Item = (Ts, TableId, &'a Row)>,
        then: Box<dyn FnOnce(Result<()>) + Send>,
    ) {
        let _ = self.log.append_then(
            RecordKind::MediatorVersions,
            |b| encode_versions(b, versions),
            then,
        );
    }

    /// Runs `then` once everything logged so far is durable.
    pub fn when_durable(&self, then: Box<dyn FnOnce(Result<()>) + Send>) {
        self.log.when_durable(self.log.position().lsn, then);
    }

    /// Takes a checkpoint of `versions` (every item's latest) when enough
    /// was logged since the last one.
    pub fn maybe_checkpoint<'a>(
        &mut self,
        partition: usize,
        versions: impl FnOnce() -> Vec<(Ts, TableId, &'a Row)>,
    ) {
        if self.every == 0 || self.checkpointing.load(Ordering::Acquire) {
            return;
        }
        let pos = self.log.position();
        if pos.lsn.saturating_sub(self.last_checkpoint) < self.every {
            return;
        }
        self.checkpointing.store(true, Ordering::Release);
        let bytes = encode_checkpoint(pos, versions().into_iter());
        let flag = self.checkpointing.clone();
        self.log.checkpoint(
            pos.lsn,
            bytes,
            Box::new(move |r| {
                if let Err(e) = r {
                    tracing::error!(partition, "Mediator checkpoint failed: {e}");
                }
                flag.store(false, Ordering::Release);
            }),
        );
        self.last_checkpoint = pos.lsn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::{DurabilityConfig, DurabilityMode};
    use brine_core::{Key, Value};

    const DDL: &str = "CREATE TABLE kv (k INT, v INT NOT NULL, PRIMARY KEY (k)) PARTITION BY (k);";
    /// A commit's timestamp, and a native put's at the same partition
    /// after the commit's fence (tagged 1).
    const COMMIT: Ts = 1 << 20;
    const AFTER_FENCE: Ts = COMMIT + 256 + 1;
    const BEFORE_FENCE: Ts = COMMIT - 256 + 1;

    fn open(dir: &Path, catalog: &Arc<Catalog>) -> (Arc<WalSet>, MediatorLogs) {
        let config = DurabilityConfig {
            mode: DurabilityMode::Wal,
            data_dir: Some(dir.to_path_buf()),
            ..DurabilityConfig::default()
        };
        let (wal, _) = WalSet::open(&config, 1, 1, catalog, None).expect("engine logs");
        let logs = MediatorLogs::open(&wal, catalog, 1, false).expect("Mediator logs");
        (Arc::new(wal), logs)
    }

    fn row(k: i64, v: i64) -> Row {
        vec![Value::Int(k), Value::Int(v)]
    }

    /// Logs a commit writing k = 1 to 100 (its write-back never logged
    /// done), and a native put of k = 1 to 7 at `put_ts`; then recovers.
    fn crash_between(put_ts: Ts) -> (MediatorRecovery, Option<(Ts, Row)>) {
        let dir = tempfile::tempdir().expect("tmp");
        let catalog = Arc::new(brine_sql::parse_schema(DDL).expect("ddl"));
        let item: Item = (TableId(0), Key::new([Value::Int(1)]));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        {
            let (wal, logs) = open(dir.path(), &catalog);
            rt.block_on(logs.log_commit(COMMIT, &[(item.clone(), row(1, 100), 0)]))
                .expect("commit logged");
            let part = logs.take_partition(0).expect("partition log");
            let (tx, rx) = std::sync::mpsc::channel();
            let put = row(1, 7);
            part.append_then(
                [(put_ts, TableId(0), &put)].into_iter(),
                Box::new(move |r| tx.send(r).expect("send")),
            );
            rx.recv().expect("durable").expect("logged");
            wal.close();
        }
        let (wal, logs) = open(dir.path(), &catalog);
        let latest = logs
            .take_partition(0)
            .expect("partition log")
            .recovered
            .remove(&item);
        wal.close();
        (logs.recovery, latest)
    }

    #[test]
    fn a_replayed_commit_keeps_a_native_put_ordered_after_it() {
        let (report, latest) = crash_between(AFTER_FENCE);
        assert_eq!((report.replayed, report.superseded), (1, 1), "{report:?}");
        assert_eq!(latest, Some((AFTER_FENCE, row(1, 7))));
    }

    #[test]
    fn a_replayed_commit_overwrites_a_native_put_ordered_before_it() {
        let (report, latest) = crash_between(BEFORE_FENCE);
        assert_eq!((report.replayed, report.superseded), (1, 0), "{report:?}");
        assert_eq!(latest, Some((COMMIT, row(1, 100))));
        assert_eq!(report.clock, COMMIT);
    }
}
