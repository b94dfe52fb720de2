//! The write-ahead log with real files: group commit, rotation, torn tails,
//! corruption in the middle, checkpoints and partition recovery.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use brine_core::{Error, TableId, TxnId, Value};
use brine_storage::recovery::recover_partition;
use brine_storage::wal::record::{encode_outcome, RedoWriter};
use brine_storage::wal::segment::list_segments;
use brine_storage::wal::{
    read_log, CrashSwitch, Log, LogConfig, LogPosition, ReadOptions, Record, RecordKind,
};

fn config(dir: &Path, segment_bytes: u64) -> LogConfig {
    LogConfig {
        dir: dir.to_path_buf(),
        log_id: 7,
        segment_bytes,
        group_commit_window: Duration::ZERO,
        max_batch_bytes: 1 << 20,
        replicas: None,
    }
}

fn txn(i: u64) -> TxnId {
    TxnId { ts: i, id: i }
}

/// Appends `n` commit records of one row each, waiting for all to be
/// durable; returns how many acks arrived.
fn append_commits(log: &Log, from: u64, n: u64) -> u64 {
    let acks = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    for i in from..from + n {
        let acks = acks.clone();
        let tx = tx.clone();
        log.append_then(
            RecordKind::Commit,
            |buf| {
                brine_storage::wal::codec::put_txn(buf, txn(i));
                let mut w = RedoWriter::start(buf);
                w.put(buf, TableId(0), &[Value::Int(i as i64), Value::str("x")]);
                w.finish(buf);
            },
            Box::new(move |r| {
                assert!(r.is_ok());
                acks.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(());
            }),
        )
        .expect("append");
    }
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(30)).expect("ack");
    }
    acks.load(Ordering::SeqCst)
}

fn read_all(dir: &Path) -> brine_core::Result<(Vec<Record>, brine_storage::wal::LogEnd)> {
    let mut out = Vec::new();
    let end = read_log(
        dir,
        ReadOptions {
            from: LogPosition::default(),
            allow_missing_prefix: false,
            repair: true,
            log_id: 7,
        },
        |_, h, payload| {
            out.push(Record::decode(h.kind, h.version, payload).expect("decodes"));
            Ok(())
        },
    )?;
    Ok((out, end))
}

#[test]
fn group_commit_acks_only_durable_records_and_reads_back() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let log = Log::open(
        config(dir.path(), 1 << 20),
        LogPosition::default(),
        Arc::new(CrashSwitch::never(1)),
    )
    .expect("open");
    assert_eq!(append_commits(&log, 0, 200), 200);
    log.append(RecordKind::Outcome, |b| encode_outcome(b, txn(1), true))
        .expect("append");
    let end = log.position();
    log.close();
    let stats = log.stats();
    assert_eq!(stats.records, 201);
    assert!(stats.fsyncs >= 1 && stats.fsyncs <= 201);
    let (recs, got) = read_all(dir.path()).expect("reads");
    assert_eq!(recs.len(), 201);
    assert_eq!(got.position, end);
    assert_eq!(got.torn_bytes, 0);
    assert!(matches!(recs[5], Record::Commit { txn: t, .. } if t == txn(5)));
}

#[test]
fn segments_rotate_and_chain() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let log = Log::open(
        config(dir.path(), 2048),
        LogPosition::default(),
        Arc::new(CrashSwitch::never(1)),
    )
    .expect("open");
    for k in 0..20 {
        append_commits(&log, k * 10, 10);
    }
    log.close();
    let segs = list_segments(dir.path()).expect("list");
    assert!(segs.len() > 3, "{} segments", segs.len());
    let (recs, _) = read_all(dir.path()).expect("reads");
    assert_eq!(recs.len(), 200);
    // A missing middle segment is a gap, refused.
    std::fs::remove_file(&segs[1].1).expect("rm");
    let e = read_all(dir.path()).expect_err("gap refused");
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("does not continue"), "{e}");
}

fn write_log(dir: &Path, n: u64) -> LogPosition {
    let log = Log::open(
        config(dir, 1 << 20),
        LogPosition::default(),
        Arc::new(CrashSwitch::never(1)),
    )
    .expect("open");
    append_commits(&log, 0, n);
    let end = log.position();
    log.close();
    end
}

#[test]
fn torn_tail_is_truncated() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let end = write_log(dir.path(), 50);
    let (_, seg) = list_segments(dir.path())
        .expect("list")
        .pop()
        .expect("segment");
    let len = std::fs::metadata(&seg).expect("meta").len();
    // Cut the last record in half: a torn write.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open");
    f.set_len(len - 10).expect("truncate");
    let (recs, got) = read_all(dir.path()).expect("torn tail is not an error");
    assert_eq!(recs.len(), 49);
    assert!(got.torn_bytes > 0);
    assert!(got.position.lsn < end.lsn);
    // Repaired: reading again finds a clean end.
    let (recs, again) = read_all(dir.path()).expect("reads");
    assert_eq!((recs.len(), again.torn_bytes), (49, 0));

    // Garbage appended after the last record is a torn tail too.
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes.extend_from_slice(&[0xAB; 40]);
    std::fs::write(&seg, &bytes).expect("write");
    let (recs, got) = read_all(dir.path()).expect("garbage tail truncated");
    assert_eq!((recs.len(), got.torn_bytes), (49, 40));
}

#[test]
fn corrupt_middle_record_is_refused() {
    let dir = tempfile::tempdir().expect("tmpdir");
    write_log(dir.path(), 50);
    let (_, seg) = list_segments(dir.path())
        .expect("list")
        .pop()
        .expect("segment");
    let mut bytes = std::fs::read(&seg).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&seg, &bytes).expect("write");
    let e = read_all(dir.path()).expect_err("corruption refused");
    match &e {
        Error::Corrupt { reason, .. } => {
            assert!(reason.contains("corrupt in the middle"), "{e}")
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    // Refusing changed nothing: the file is intact for inspection.
    assert_eq!(std::fs::read(&seg).expect("read"), bytes);
}

#[test]
fn crash_switch_stops_acks_and_leaves_a_recoverable_log() {
    for k in 1..40 {
        let dir = tempfile::tempdir().expect("tmpdir");
        let switch = Arc::new(CrashSwitch::at_step(k, k));
        let log = Log::open(
            config(dir.path(), 1024),
            LogPosition::default(),
            switch.clone(),
        )
        .expect("open");
        let acked = Arc::new(AtomicU64::new(0));
        for i in 0..60u64 {
            let acked = acked.clone();
            let r = log.append_then(
                RecordKind::Commit,
                |buf| {
                    brine_storage::wal::codec::put_txn(buf, txn(i));
                    RedoWriter::start(buf).finish(buf);
                },
                Box::new(move |r| {
                    if r.is_ok() {
                        acked.fetch_max(i + 1, Ordering::SeqCst);
                    }
                }),
            );
            // After the crash appends fail: the log is down.
            assert!(r.is_ok() || switch.is_crashed());
            if i % 7 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        switch.crash_now();
        log.wake();
        log.join();
        let acked = acked.load(Ordering::SeqCst);
        let (recs, _) = read_all(dir.path()).expect("recoverable after crash");
        // Every acknowledged record survived (records are acked in order).
        assert!(
            recs.len() as u64 >= acked,
            "k={k}: {} < {acked}",
            recs.len()
        );
    }
}

#[test]
fn partition_recovery_replays_commits_and_keeps_prepares_in_doubt() {
    let dir = tempfile::tempdir().expect("tmpdir");
    let catalog = Arc::new(
        brine_sql::parse_schema(
            "CREATE TABLE t (id INT NOT NULL, v VARCHAR(8), PRIMARY KEY (id)) PARTITION BY (id);",
        )
        .expect("schema"),
    );
    let log = Log::open(
        LogConfig {
            log_id: 0,
            ..config(dir.path(), 1 << 20)
        },
        LogPosition::default(),
        Arc::new(CrashSwitch::never(1)),
    )
    .expect("open");
    append_commits(&log, 0, 10);
    let prepare = |t: u64, id: i64| {
        move |buf: &mut Vec<u8>| {
            brine_storage::wal::codec::put_txn(buf, txn(t));
            brine_storage::wal::codec::put_u32(buf, 3);
            let mut w = RedoWriter::start(buf);
            w.put(buf, TableId(0), &[Value::Int(id), Value::str("p")]);
            w.finish(buf);
        }
    };
    log.append(RecordKind::Prepare, prepare(100, 100))
        .expect("append");
    log.append(RecordKind::Prepare, prepare(101, 101))
        .expect("append");
    log.append(RecordKind::Prepare, prepare(102, 102))
        .expect("append");
    log.append(RecordKind::Outcome, |b| encode_outcome(b, txn(100), true))
        .expect("append");
    log.append(RecordKind::Outcome, |b| encode_outcome(b, txn(101), false))
        .expect("append");
    log.close();
    let mut rec = recover_partition(dir.path(), &catalog, 0).expect("recovers");
    assert_eq!(rec.store.len(TableId(0)), 11);
    assert_eq!(rec.in_doubt.len(), 1);
    assert_eq!(rec.in_doubt[0].txn, txn(102));
    let decided: std::collections::HashSet<TxnId> = [txn(102)].into_iter().collect();
    assert_eq!(rec.resolve(&decided).expect("resolves"), (1, 0));
    assert_eq!(rec.store.len(TableId(0)), 12);
    rec.store.check_consistency().expect("consistent");

    // A checkpoint of the recovered store, then recovery from it alone.
    let bytes = rec
        .store
        .encode_checkpoint(0, rec.end, &[], &Default::default());
    std::fs::write(
        brine_storage::checkpoint::checkpoint_path(dir.path(), rec.end.lsn),
        bytes,
    )
    .expect("write");
    let again = recover_partition(dir.path(), &catalog, 0).expect("recovers from checkpoint");
    assert_eq!(again.store.len(TableId(0)), 12);
    assert_eq!(again.stats.checkpoint_lsn, rec.end.lsn);
    assert_eq!(again.stats.records, 0);
}

/// A log with replicas (`LogConfig::replicas`): a batch written and
/// fsynced here is not durable (its waiters wait, the durable lsn stays
/// behind) until its replicas say a quorum has it; then its waiters run.
#[test]
fn a_replicated_batch_is_durable_once_its_replicas_say_so() {
    use brine_storage::wal::{Replicas, Replicate, Waiter};
    /// Holds every batch it is given, to let it go when told.
    #[derive(Default)]
    struct Held(parking_lot::Mutex<Vec<(Vec<u8>, u64, Waiter)>>);
    impl Replicate for Held {
        fn replicate(&self, batch: Vec<u8>, end: u64, done: Waiter) {
            self.0.lock().push((batch, end, done));
        }
        fn checkpoint(&self, lsn: u64, bytes: Vec<u8>, done: Waiter) {
            self.0.lock().push((bytes, lsn, done));
        }
    }
    let dir = tempfile::tempdir().expect("tmp");
    let held = Arc::new(Held::default());
    let log = Log::open(
        LogConfig {
            replicas: Some(Replicas(held.clone())),
            ..config(dir.path(), 1 << 20)
        },
        LogPosition::default(),
        Arc::new(CrashSwitch::never(1)),
    )
    .expect("open");
    let (tx, rx) = mpsc::channel();
    let lsn = log
        .append_then(
            RecordKind::Commit,
            |buf| brine_storage::wal::codec::put_txn(buf, txn(1)),
            Box::new(move |r| tx.send(r.is_ok()).expect("send")),
        )
        .expect("append");
    // The writer hands the batch over once it is on disk here.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while held.0.lock().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no batch replicated");
        std::thread::yield_now();
    }
    assert!(
        rx.try_recv().is_err(),
        "acknowledged before its replicas had it"
    );
    assert!(
        log.durable_lsn() < lsn,
        "durable before its replicas had it"
    );
    let (batch, end, done) = held.0.lock().remove(0);
    assert!(
        !batch.is_empty() && end >= lsn,
        "{} bytes to {end}",
        batch.len()
    );
    done(Ok(()));
    assert!(rx
        .recv_timeout(Duration::from_secs(30))
        .expect("acknowledged"));
    assert_eq!(log.durable_lsn(), end);
    log.close();
}
