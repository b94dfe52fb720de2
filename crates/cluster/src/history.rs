//! Recording a run's history for the isolation checker.
//!
//! ```text
//!  partition: execute_recorded -> ops (versions read / installed) in the reply
//!  coordinator: TxnState.rec collects the ops of every statement
//!  commit / abort ends the attempt -> TxnRecord -> channel -> writer thread
//!                                                      -> JSON lines file
//! ```
//!
//! Every attempt that ran at least one statement is recorded once, when its
//! outcome is known at the coordinator: committed, aborted, or unknown (the
//! commit's fate could not be learned). The file format is
//! `brine_check::history` (docs/history-format.md). Serializing and writing
//! happen on the writer thread, off the transactions' path; a transaction
//! pays for collecting its ops and one channel send.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use brine_check::{Header, Op, Outcome, Seen, TxnClass, TxnRecord};
use brine_core::access::key_in_range;
use brine_core::{Error, Key, Result, TxnId};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

enum Msg {
    Record(Box<TxnRecord>),
    /// Flush everything sent so far; answer with the records written.
    Flush(Sender<io::Result<u64>>),
}

/// Where a cluster's history goes.
pub struct HistorySink {
    out: Output,
    t0: Instant,
    path: PathBuf,
}

/// How a sink writes its records.
enum Output {
    /// Through a channel to a writer thread, off the transactions' path.
    Buffered {
        tx: Sender<Msg>,
        writer: Mutex<Option<JoinHandle<()>>>,
    },
    /// A node's history across processes: each record goes to the file
    /// (to the kernel) before the call that made it goes on, and a commit
    /// is recorded as of unknown outcome before it is sent
    /// ([`HistorySink::provisional`]), so a SIGKILL loses no transaction
    /// whose writes others may read. With the records written so far.
    Direct(Mutex<(File, u64)>),
}

/// What an attempt collects while it runs, when the run records.
#[derive(Clone)]
pub struct TxnRecording {
    procedure: Option<String>,
    start: Instant,
    pub ops: Vec<Op>,
    /// `Base` for a Salt BASE transaction (whose ops carry `sub`).
    pub class: TxnClass,
    /// BASE: its first alkaline subtransaction committed.
    pub accepted: bool,
    /// It ran at read committed in a run at a stronger level
    /// (`ProcedureDef::isolation`).
    pub read_committed: bool,
    /// The client that ran it, for the checker's per-client order (set by
    /// the protocols that promise it: Mediator).
    pub client: Option<u64>,
}

impl HistorySink {
    /// Creates `path` (truncating it), writes the header line and starts
    /// the writer thread.
    pub fn create(path: &Path, header: &Header) -> Result<HistorySink> {
        let io_err = |e: io::Error| {
            Error::Config(format!("cannot write history file {}: {e}", path.display()))
        };
        let file = File::create(path).map_err(io_err)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        serde_json::to_writer(&mut out, header)
            .map_err(|e| Error::Internal(format!("encoding the history header: {e}")))?;
        out.write_all(b"\n").map_err(io_err)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let shown = path.display().to_string();
        let writer = std::thread::Builder::new()
            .name("brine-history".into())
            .spawn(move || write_loop(rx, out, shown))
            .map_err(|e| Error::Internal(format!("cannot start the history writer: {e}")))?;
        Ok(HistorySink {
            out: Output::Buffered {
                tx,
                writer: Mutex::new(Some(writer)),
            },
            t0: Instant::now(),
            path: path.to_path_buf(),
        })
    }

    /// Creates `path` (which must not exist: a restarted node writes a
    /// file of its own) and writes the header line; every record is then
    /// written at once (`Output::Direct`), a later record of an attempt
    /// superseding an earlier one.
    pub fn create_direct(path: &Path, header: &Header) -> Result<HistorySink> {
        let io_err = |e: io::Error| {
            Error::Config(format!("cannot write history file {}: {e}", path.display()))
        };
        let mut file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_err)?;
        let mut line = serde_json::to_vec(header)
            .map_err(|e| Error::Internal(format!("encoding the history header: {e}")))?;
        line.push(b'\n');
        file.write_all(&line).map_err(io_err)?;
        Ok(HistorySink {
            out: Output::Direct(Mutex::new((file, 0))),
            t0: Instant::now(),
            path: path.to_path_buf(),
        })
    }

    /// Before a commit is sent: records the attempt as of unknown outcome,
    /// in a sink that writes directly (a node's, across processes), so a
    /// crash before its end is recorded leaves its writes named. Its end
    /// supersedes it.
    /// `two_phase`: the commit is decided by the coordinator's decision
    /// log, which settles the record if the node dies before its end
    /// ([`HistorySink::settle_earlier_runs`]).
    pub fn provisional(&self, txn: TxnId, rec: &TxnRecording, two_phase: bool) {
        if !matches!(self.out, Output::Direct(_)) || rec.ops.is_empty() {
            return;
        }
        let mut record = self.record(txn, rec.clone(), Outcome::Unknown);
        record.two_phase = two_phase;
        self.write_direct(&record);
    }

    /// A restarted node's sink: the records its earlier runs (`earlier`:
    /// their files, in order) left of unknown outcome whose commit was
    /// decided in two phases are recorded again with the outcome
    /// `decided` gives (the node's decision log: committed, or under
    /// presumed abort aborted; `None`: not known), superseding them. An
    /// attempt cut off by the node's death otherwise stays unknown, and
    /// where a pipelined transaction wrote over its uncommitted write
    /// (Callas' Runtime Pipelining) the checker could not tell that its
    /// write was undone. Returns how many it settled.
    pub fn settle_earlier_runs(
        &self,
        earlier: &[PathBuf],
        decided: impl Fn(TxnId) -> Option<Outcome>,
    ) -> Result<usize> {
        let mut last: std::collections::HashMap<u64, TxnRecord> = Default::default();
        for f in earlier {
            let h = brine_check::read_file(f).map_err(|e| {
                Error::Config(format!(
                    "reading the earlier history file {}: {e}",
                    f.display()
                ))
            })?;
            for r in h.txns {
                last.insert(r.id, r);
            }
        }
        let mut settled = 0;
        let mut ids: Vec<u64> = last.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let r = &last[&id];
            if r.outcome != Outcome::Unknown || !r.two_phase {
                continue;
            }
            if let Some(outcome) = decided(TxnId { ts: r.ts, id }) {
                let mut r = r.clone();
                r.outcome = outcome;
                r.two_phase = false;
                self.write_direct(&r);
                settled += 1;
            }
        }
        Ok(settled)
    }

    fn write_direct(&self, record: &TxnRecord) {
        let Output::Direct(direct) = &self.out else {
            return;
        };
        let mut line = match serde_json::to_vec(record) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("history file {}: {e}", self.path.display());
                return;
            }
        };
        line.push(b'\n');
        let mut d = direct.lock();
        match d.0.write_all(&line) {
            Ok(()) => d.1 += 1,
            Err(e) => tracing::error!("history file {}: {e}", self.path.display()),
        }
    }

    fn record(&self, txn: TxnId, rec: TxnRecording, outcome: Outcome) -> TxnRecord {
        let us = |t: Instant| t.saturating_duration_since(self.t0).as_micros() as u64;
        TxnRecord {
            id: txn.id,
            ts: txn.ts,
            procedure: rec.procedure,
            class: rec.class,
            group: None,
            outcome,
            accepted: rec.accepted,
            client: rec.client,
            two_phase: false,
            orphan: false,
            read_committed: rec.read_committed,
            start_us: us(rec.start),
            end_us: us(Instant::now()),
            ops: rec.ops,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts collecting an attempt's operations.
    pub fn begin(&self, procedure: Option<&str>) -> Box<TxnRecording> {
        Box::new(TxnRecording {
            procedure: procedure.map(str::to_owned),
            start: Instant::now(),
            ops: Vec::new(),
            class: TxnClass::Acid,
            accepted: false,
            read_committed: false,
            client: None,
        })
    }

    /// Records an ended attempt. Attempts that ran no statement are skipped.
    pub fn end(&self, txn: TxnId, rec: TxnRecording, outcome: Outcome) {
        if rec.ops.is_empty() {
            return;
        }
        self.emit(self.record(txn, rec, outcome));
    }

    fn emit(&self, record: TxnRecord) {
        match &self.out {
            // The writer only goes away with the sink.
            Output::Buffered { tx, .. } => {
                let _ = tx.send(Msg::Record(Box::new(record)));
            }
            Output::Direct(_) => self.write_direct(&record),
        }
    }

    /// Records the writes undone of a part of a transaction that aborted
    /// while the transaction went on (a Salt subtransaction rolled back,
    /// or fenced before a roll-forward) as an aborted attempt of its own,
    /// `part` being the part's id: a later write of another transaction
    /// can lie over such a write (on other columns), and the checker must
    /// know whose it was.
    pub fn aborted_part(&self, part: TxnId, ops: Vec<Op>) {
        self.undone(part, ops, false);
    }

    /// A partition aborted `txn`, whose coordinator was lost, undoing
    /// `undone`: recorded as an orphan record, which joins the attempt's
    /// own (`brine_check::reader`), or stands for it where the coordinator
    /// never recorded it.
    pub fn orphan_aborted(&self, txn: TxnId, undone: Vec<Op>) {
        self.undone(txn, undone, true);
    }

    /// An aborted record of `id` whose ops are the writes undone.
    fn undone(&self, id: TxnId, ops: Vec<Op>, orphan: bool) {
        if ops.is_empty() {
            return;
        }
        let mut rec = self.begin(None);
        rec.ops = ops;
        let mut record = self.record(id, *rec, Outcome::Aborted);
        record.orphan = orphan;
        self.emit(record);
    }

    /// Waits until everything recorded so far is in the file; returns the
    /// number of transactions written.
    pub fn flush(&self) -> Result<u64> {
        let writer = match &self.out {
            Output::Buffered { tx, .. } => tx,
            Output::Direct(direct) => return Ok(direct.lock().1),
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        writer
            .send(Msg::Flush(tx))
            .map_err(|_| Error::Internal("the history writer stopped".into()))?;
        rx.recv()
            .map_err(|_| Error::Internal("the history writer stopped".into()))?
            .map_err(|e| {
                Error::Config(format!(
                    "cannot write history file {}: {e}",
                    self.path.display()
                ))
            })
    }
}

impl Drop for HistorySink {
    fn drop(&mut self) {
        if let Output::Buffered { tx, writer } = &mut self.out {
            // Close the channel so the writer drains, flushes and exits.
            let (dead, _) = crossbeam_channel::bounded(0);
            drop(std::mem::replace(tx, dead));
            if let Some(h) = writer.lock().take() {
                let _ = h.join();
            }
        }
    }
}

fn write_loop(rx: Receiver<Msg>, mut out: BufWriter<File>, path: String) {
    let mut written = 0u64;
    let mut failed: Option<io::Error> = None;
    for msg in rx {
        match msg {
            Msg::Record(rec) => {
                if failed.is_some() {
                    continue;
                }
                let r = serde_json::to_writer(&mut out, &*rec)
                    .map_err(io::Error::other)
                    .and_then(|()| out.write_all(b"\n"));
                match r {
                    Ok(()) => written += 1,
                    Err(e) => {
                        tracing::error!("history file {path}: {e}; recording stops");
                        failed = Some(e);
                    }
                }
            }
            Msg::Flush(answer) => {
                let r = match &failed {
                    Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    None => out.flush().map(|()| written),
                };
                let _ = answer.send(r);
            }
        }
    }
    if let Err(e) = out.flush() {
        tracing::error!("history file {path}: {e}");
    }
}

impl crate::Cluster {
    /// A restarted node recording its history: settles what its earlier
    /// runs (`earlier`: their history files, in order) left of unknown
    /// outcome and decided in two phases, from its decision log
    /// (`HistorySink::settle_earlier_runs`). Returns how many it settled.
    pub fn settle_earlier_history(&self, earlier: &[PathBuf]) -> Result<usize> {
        let (Some(h), Some(book)) = (
            &self.shared().history,
            self.shared().wal.as_ref().and_then(|w| w.book.as_deref()),
        ) else {
            return Ok(0);
        };
        h.settle_earlier_runs(earlier, |txn| {
            Some(match book.ask(txn) {
                crate::remote::Inquiry::Committed => brine_check::Outcome::Committed,
                crate::remote::Inquiry::Aborted => brine_check::Outcome::Aborted,
                crate::remote::Inquiry::Undecided => return None,
            })
        })
    }
}

/// Merges what the partitions of one broadcast statement recorded into
/// what the statement observed as a whole.
///
/// Each partition scanned the same interval of its own slice of the table,
/// so their range reads (at most one per partition) are one range read of
/// the statement, over the interval every partition observed completely:
/// when LIMIT stopped partitions at different keys, the interval ends at
/// the earliest stop, and rows seen beyond it become point reads (they
/// were observed, but the absence of others there was not). For a
/// secondary index the rows' index keys are not recorded, so a stopped
/// broadcast keeps only the point reads. Writes pass through unchanged.
pub fn merge_broadcast(parts: Vec<Vec<Op>>) -> Vec<Op> {
    let mut out = Vec::new();
    let mut ranges = Vec::new();
    for part in parts {
        for op in part {
            match op {
                Op::RangeRead { .. } => ranges.push(op),
                other => out.push(other),
            }
        }
    }
    let mut ranges = ranges.into_iter();
    let Some(Op::RangeRead {
        table,
        index,
        mut lo,
        mut hi,
        mut seen,
        sub,
        cols,
    }) = ranges.next()
    else {
        return out;
    };
    let mut same_bounds = true;
    for r in ranges {
        let Op::RangeRead {
            lo: l,
            hi: h,
            seen: s,
            ..
        } = r
        else {
            continue;
        };
        if l != lo || h != hi {
            same_bounds = false;
            if lower_is_tighter(&l, &lo) {
                lo = l;
            }
            if upper_is_tighter(&h, &hi) {
                hi = h;
            }
        }
        seen.extend(s);
    }
    if !same_bounds {
        let (inside, outside): (Vec<Seen>, Vec<Seen>) = seen
            .into_iter()
            .partition(|s| index == 0 && key_in_range(&s.key, &lo, &hi));
        out.extend(outside.into_iter().map(|s| Op::Read {
            table: table.clone(),
            key: s.key,
            version: s.version,
            sub,
            cols: cols.clone(),
        }));
        if index != 0 {
            return out;
        }
        seen = inside;
    }
    out.push(Op::RangeRead {
        table,
        index,
        lo,
        hi,
        seen,
        sub,
        cols,
    });
    out
}

/// `a` excludes more of the low end than `b`.
fn lower_is_tighter(a: &Bound<Key>, b: &Bound<Key>) -> bool {
    match (a, b) {
        (_, Bound::Unbounded) => !matches!(a, Bound::Unbounded),
        (Bound::Unbounded, _) => false,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y))
            if x != y =>
        {
            x > y
        }
        (Bound::Excluded(_), Bound::Included(_)) => true,
        _ => false,
    }
}

/// `a` excludes more of the high end than `b`.
fn upper_is_tighter(a: &Bound<Key>, b: &Bound<Key>) -> bool {
    match (a, b) {
        (_, Bound::Unbounded) => !matches!(a, Bound::Unbounded),
        (Bound::Unbounded, _) => false,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y))
            if x != y =>
        {
            x < y
        }
        (Bound::Excluded(_), Bound::Included(_)) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brine_core::Value;

    /// A restarted node settles the two-phase commits its earlier run
    /// left of unknown outcome from its decision log; one-round ones and
    /// those whose end was recorded stay as they were.
    #[test]
    fn a_restarted_node_settles_its_earlier_run_s_unknown_commits() {
        let dir = tempfile::tempdir().expect("dir");
        let header = Header {
            brine_history: brine_check::history::FORMAT_VERSION,
            workload: "w".into(),
            protocol: "acid".into(),
            isolation: "serializable".into(),
            config: Default::default(),
        };
        let txn = |id: u64| TxnId { ts: id, id };
        let write = |v: u64| Op::Write {
            table: "t".into(),
            key: key(v as i64),
            version: v,
            prev: 0,
            kind: brine_check::WriteKind::Update,
            ix: Vec::new(),
            cols: None,
            sub: None,
        };
        let earlier = dir.path().join("node-1-1.jsonl");
        let before = HistorySink::create_direct(&earlier, &header).expect("sink");
        for (id, two_phase) in [(1, true), (2, false), (3, true), (4, true)] {
            let mut rec = before.begin(None);
            rec.ops = vec![write(id)];
            before.provisional(txn(id), &rec, two_phase);
            if id == 3 {
                before.end(txn(id), *rec, Outcome::Committed);
            }
        }
        drop(before);
        let now =
            HistorySink::create_direct(&dir.path().join("node-1-2.jsonl"), &header).expect("sink");
        let settled = now
            .settle_earlier_runs(&[earlier], |t| match t.id {
                1 => Some(Outcome::Aborted),
                3 => Some(Outcome::Aborted),
                _ => None,
            })
            .expect("settled");
        assert_eq!(
            settled, 1,
            "only the unknown two-phase commit it can decide"
        );
        let h = brine_check::reader::read_path(dir.path()).expect("reads");
        let seen: Vec<(u64, Outcome, usize)> = h
            .txns
            .iter()
            .map(|t| (t.id, t.outcome, t.ops.len()))
            .collect();
        assert_eq!(
            seen,
            [
                (1, Outcome::Aborted, 1),
                (2, Outcome::Unknown, 1),
                (3, Outcome::Committed, 1),
                (4, Outcome::Unknown, 1)
            ]
        );
    }

    fn key(i: i64) -> Key {
        Key::new([Value::Int(i)])
    }

    fn rr(lo: Bound<Key>, hi: Bound<Key>, seen: &[i64]) -> Op {
        Op::RangeRead {
            table: "t".into(),
            index: 0,
            lo: Box::new(lo),
            hi: Box::new(hi),
            seen: seen
                .iter()
                .map(|&k| Seen {
                    key: key(k),
                    version: 0,
                    deleted: false,
                })
                .collect(),
            sub: None,
            cols: None,
        }
    }

    #[test]
    fn a_full_broadcast_scan_is_one_range_read_of_every_row() {
        let all = (Bound::Included(key(0)), Bound::Included(key(9)));
        let merged = merge_broadcast(vec![
            vec![rr(all.0.clone(), all.1.clone(), &[0, 2, 4])],
            vec![rr(all.0.clone(), all.1.clone(), &[1, 3])],
        ]);
        assert_eq!(merged, vec![rr(all.0, all.1, &[0, 2, 4, 1, 3])]);
    }

    #[test]
    fn a_stopped_broadcast_scan_claims_only_what_every_partition_covered() {
        let lo = Bound::Included(key(0));
        let merged = merge_broadcast(vec![
            vec![rr(lo.clone(), Bound::Included(key(4)), &[0, 2, 4])],
            vec![rr(lo.clone(), Bound::Included(key(3)), &[1, 3])],
        ]);
        assert_eq!(merged.len(), 2);
        assert!(matches!(&merged[0], Op::Read { key: k, .. } if *k == key(4)));
        assert_eq!(merged[1], rr(lo, Bound::Included(key(3)), &[0, 2, 1, 3]));
    }

    #[test]
    fn bound_tightness() {
        let inc = |i| Bound::Included(key(i));
        let exc = |i| Bound::Excluded(key(i));
        assert!(upper_is_tighter(&inc(3), &Bound::Unbounded));
        assert!(upper_is_tighter(&exc(3), &inc(3)));
        assert!(upper_is_tighter(&inc(2), &exc(3)));
        assert!(!upper_is_tighter(&inc(3), &inc(3)));
        assert!(lower_is_tighter(&exc(3), &inc(3)));
        assert!(lower_is_tighter(&inc(4), &exc(3)));
        assert!(!lower_is_tighter(&Bound::Unbounded, &inc(0)));
    }
}
