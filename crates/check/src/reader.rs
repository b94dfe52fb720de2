//! Streaming reader of history files.
//!
//! A history is read line by line from any [`BufRead`], so a file of a
//! million transactions never has to fit in memory as one string. The
//! first non-empty line must be a [`Header`] whose `brine_history` is
//! [`FORMAT_VERSION`]; every later non-empty line is one [`TxnRecord`].
//! A malformed line is an error naming its line number and what is wrong
//! with it; nothing is skipped silently.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::history::{Header, TxnRecord, FORMAT_VERSION};

/// Why a history could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot open history file {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read line {line} of the history: {source}")]
    Io {
        line: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the history is empty (expected a header line {{\"brine_history\":{FORMAT_VERSION},...}})"
    )]
    Empty,
    #[error("line {line}: malformed header: {message}")]
    BadHeader { line: u64, message: String },
    #[error(
        "line {line}: history format version {found} is not supported (this checker reads version {FORMAT_VERSION})"
    )]
    Version { line: u64, found: u64 },
    #[error("line {line}: malformed transaction record: {message}")]
    BadRecord { line: u64, message: String },
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ReadError>,
    },
    #[error("{path}: a history of {found}, where {first} has one of {expected}: histories of different runs do not merge")]
    Mismatch {
        path: PathBuf,
        first: PathBuf,
        found: String,
        expected: String,
    },
    #[error("cannot list the history directory {path}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the history directory {0} holds no *.jsonl file")]
    NoFiles(PathBuf),
}

/// A whole history in memory: its header and records in file order.
#[derive(Clone, Debug)]
pub struct History {
    pub header: Header,
    pub txns: Vec<TxnRecord>,
}

/// Reads records one at a time after the header.
pub struct HistoryReader<R> {
    input: R,
    header: Header,
    line_no: u64,
    buf: String,
}

impl<R: BufRead> HistoryReader<R> {
    /// Reads and checks the header line.
    pub fn new(mut input: R) -> Result<Self, ReadError> {
        let mut buf = String::new();
        let mut line_no = 0;
        loop {
            buf.clear();
            line_no += 1;
            let n = input.read_line(&mut buf).map_err(|source| ReadError::Io {
                line: line_no,
                source,
            })?;
            if n == 0 {
                return Err(ReadError::Empty);
            }
            if !buf.trim().is_empty() {
                break;
            }
        }
        let header = parse_header(buf.trim(), line_no)?;
        Ok(HistoryReader {
            input,
            header,
            line_no,
            buf,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next record, `None` at the end of the input.
    pub fn next_record(&mut self) -> Result<Option<TxnRecord>, ReadError> {
        loop {
            self.buf.clear();
            self.line_no += 1;
            let n = self
                .input
                .read_line(&mut self.buf)
                .map_err(|source| ReadError::Io {
                    line: self.line_no,
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            let line = self.buf.trim();
            if line.is_empty() {
                continue;
            }
            return serde_json::from_str::<TxnRecord>(line)
                .map(Some)
                .map_err(|e| ReadError::BadRecord {
                    line: self.line_no,
                    message: json_message(&e),
                });
        }
    }

    /// Reads every remaining record. A record of an attempt already read
    /// supersedes it (a node across processes records a commit as of
    /// unknown outcome before it sends it, then its end).
    pub fn read_all(mut self) -> Result<History, ReadError> {
        let mut txns = Vec::new();
        let mut at: std::collections::HashMap<u64, usize> = Default::default();
        while let Some(r) = self.next_record()? {
            supersede(&mut txns, &mut at, r);
        }
        Ok(History {
            header: self.header,
            txns,
        })
    }
}

/// serde_json's message without its "at line 1 column N" (every record is
/// one line; the file line is in the error already).
fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&suffix) {
        Some(m) => format!("{m} (column {})", e.column()),
        None => text,
    }
}

fn parse_header(line: &str, line_no: u64) -> Result<Header, ReadError> {
    let json: serde_json::Value = serde_json::from_str(line).map_err(|e| ReadError::BadHeader {
        line: line_no,
        message: e.to_string(),
    })?;
    // Check the version before the other fields so a future format gets the
    // message that matters.
    match json.get("brine_history").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        Some(found) => {
            return Err(ReadError::Version {
                line: line_no,
                found,
            })
        }
        None => {
            return Err(ReadError::BadHeader {
                line: line_no,
                message: "the first line must be a header with a numeric `brine_history` field \
                          (is this a history file?)"
                    .into(),
            })
        }
    }
    serde_json::from_value(json).map_err(|e| ReadError::BadHeader {
        line: line_no,
        message: json_message(&e),
    })
}

/// Reads a whole history from a string (tests, small files).
pub fn read_str(text: &str) -> Result<History, ReadError> {
    HistoryReader::new(text.as_bytes())?.read_all()
}

/// Adds `r` to `txns`, in place of an earlier record of the same attempt
/// (`at`: where each attempt's record is).
///
/// A partition's record of an orphan it aborted (`orphan`) joins the
/// attempt's record instead: its undone writes are added, and an `unknown`
/// outcome becomes `aborted`, whichever of the two comes first.
fn supersede(
    txns: &mut Vec<TxnRecord>,
    at: &mut std::collections::HashMap<u64, usize>,
    r: TxnRecord,
) {
    let Some(&i) = at.get(&r.id) else {
        at.insert(r.id, txns.len());
        txns.push(r);
        return;
    };
    let old = std::mem::replace(&mut txns[i], r);
    let (new, old) = (&mut txns[i], old);
    if !(new.orphan || old.orphan) {
        return;
    }
    let (mut full, part) = if new.orphan && !old.orphan {
        (old, new.clone())
    } else {
        (new.clone(), old)
    };
    for op in part.ops {
        if !full.ops.contains(&op) {
            full.ops.push(op);
        }
    }
    if full.outcome == crate::Outcome::Unknown || full.orphan {
        full.outcome = crate::Outcome::Aborted;
    }
    full.orphan &= part.orphan;
    *new = full;
}

/// Reads a history file, or every `*.jsonl` file of a directory as one
/// history (the nodes of a cluster each record the transactions they
/// coordinate, in files of their own): their headers must name the same
/// workload, protocol and isolation; the records are taken in file-name
/// order, a later record of an attempt superseding an earlier one.
pub fn read_path(path: &Path) -> Result<History, ReadError> {
    if !path.is_dir() {
        return read_file(path);
    }
    let list = |source| ReadError::List {
        path: path.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(list)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(list)?;
    files.retain(|f| f.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    let Some(first) = files.first().cloned() else {
        return Err(ReadError::NoFiles(path.to_path_buf()));
    };
    let in_file = |f: &Path| {
        let f = f.to_path_buf();
        move |e| ReadError::InFile {
            path: f,
            source: Box::new(e),
        }
    };
    let mut merged = read_file(&first).map_err(in_file(&first))?;
    let run = |h: &Header| format!("{} under {} at {}", h.workload, h.protocol, h.isolation);
    let mut at: std::collections::HashMap<u64, usize> = merged
        .txns
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, i))
        .collect();
    for f in &files[1..] {
        let h = read_file(f).map_err(in_file(f))?;
        if run(&h.header) != run(&merged.header) {
            return Err(ReadError::Mismatch {
                path: f.clone(),
                first: first.clone(),
                found: run(&h.header),
                expected: run(&merged.header),
            });
        }
        for r in h.txns {
            supersede(&mut merged.txns, &mut at, r);
        }
    }
    Ok(merged)
}

/// Reads a whole history file.
pub fn read_file(path: &Path) -> Result<History, ReadError> {
    let file = File::open(path).map_err(|source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    HistoryReader::new(BufReader::with_capacity(1 << 16, file))?.read_all()
}

/// Writes a history as JSON lines (the inverse of the reader; used by the
/// generator and tests).
pub fn write_history<W: std::io::Write>(out: &mut W, history: &History) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, &history.header)?;
    out.write_all(b"\n")?;
    for t in &history.txns {
        serde_json::to_writer(&mut *out, t)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    const HEADER: &str =
        r#"{"brine_history":1,"workload":"w","protocol":"acid","isolation":"serializable"}"#;

    #[test]
    fn reads_header_and_records() {
        let text = format!(
            "{HEADER}\n\n{}\n",
            r#"{"id":1,"ts":1,"class":"acid","outcome":"committed","start_us":0,"end_us":1,"ops":[{"op":"r","t":"a","k":[1],"v":0}]}"#
        );
        let h = read_str(&text).map_err(|e| e.to_string());
        assert!(h.as_ref().is_ok_and(|h| h.txns.len() == 1), "{h:?}");
    }

    fn record(id: u64, outcome: &str) -> String {
        format!(
            r#"{{"id":{id},"ts":1,"class":"acid","outcome":"{outcome}","start_us":0,"end_us":1,"ops":[{{"op":"r","t":"a","k":[1],"v":0}}]}}"#
        )
    }

    /// A node records a commit as of unknown outcome before it sends it,
    /// then its end: the end supersedes it, in the first one's place.
    #[test]
    fn a_later_record_of_an_attempt_supersedes_the_earlier() {
        let text = format!(
            "{HEADER}\n{}\n{}\n{}\n",
            record(1, "unknown"),
            record(2, "aborted"),
            record(1, "committed")
        );
        let h = read_str(&text).expect("reads");
        let seen: Vec<(u64, Outcome)> = h.txns.iter().map(|t| (t.id, t.outcome)).collect();
        assert_eq!(seen, [(1, Outcome::Committed), (2, Outcome::Aborted)]);
    }

    /// A partition's record of an orphan it aborted joins the attempt's
    /// own record, whichever comes first: its undone write is added and
    /// an unknown outcome becomes aborted; alone it stands for the
    /// attempt.
    #[test]
    fn an_orphan_record_joins_the_attempt_s_own() {
        let orphan = |id: u64| {
            format!(
                r#"{{"id":{id},"ts":1,"class":"acid","outcome":"aborted","orphan":true,"start_us":0,"end_us":1,"ops":[{{"op":"w","t":"b","k":[2],"v":7,"prev":0,"kind":"update"}}]}}"#
            )
        };
        for lines in [
            [record(1, "unknown"), orphan(1)],
            [orphan(1), record(1, "unknown")],
        ] {
            let text = format!("{HEADER}\n{}\n{}\n{}\n", lines[0], lines[1], orphan(2));
            let h = read_str(&text).expect("reads");
            let seen: Vec<(u64, Outcome, usize, bool)> = h
                .txns
                .iter()
                .map(|t| (t.id, t.outcome, t.ops.len(), t.orphan))
                .collect();
            assert_eq!(
                seen,
                [
                    (1, Outcome::Aborted, 2, false),
                    (2, Outcome::Aborted, 1, true)
                ],
                "{lines:?}"
            );
        }
    }

    /// A directory is one history of its files, which must be of one run.
    #[test]
    fn a_directory_reads_as_one_history_of_one_run() {
        let dir = std::env::temp_dir().join(format!("brine-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let write = |name: &str, header: &str, records: &[String]| {
            let text = format!("{header}\n{}\n", records.join("\n"));
            std::fs::write(dir.join(name), text).expect("written");
        };
        write(
            "node-0.jsonl",
            HEADER,
            &[record(1, "unknown"), record(2, "committed")],
        );
        write(
            "node-1.jsonl",
            HEADER,
            &[record(1, "committed"), record(3, "aborted")],
        );
        std::fs::write(dir.join("notes.txt"), "not a history").expect("written");
        let h = read_path(&dir).expect("reads");
        let seen: Vec<(u64, Outcome)> = h.txns.iter().map(|t| (t.id, t.outcome)).collect();
        assert_eq!(
            seen,
            [
                (1, Outcome::Committed),
                (2, Outcome::Committed),
                (3, Outcome::Aborted)
            ]
        );
        let other = HEADER.replace("acid", "salt");
        write("node-2.jsonl", &other, &[record(4, "committed")]);
        let e = read_path(&dir).map(|_| ()).map_err(|e| e.to_string());
        assert!(
            matches!(&e, Err(m) if m.contains("do not merge") && m.contains("under salt")),
            "{e:?}"
        );
        std::fs::remove_dir_all(&dir).expect("removed");
        let e = read_path(&dir).map(|_| ()).map_err(|e| e.to_string());
        assert!(matches!(&e, Err(m) if m.contains("cannot open")), "{e:?}");
    }

    #[test]
    fn errors_name_the_line() {
        let text = format!("{HEADER}\n{{\"id\":1}}\n");
        let e = read_str(&text).map(|_| ()).map_err(|e| e.to_string());
        assert!(
            matches!(&e, Err(m) if m.starts_with("line 2: malformed transaction record")),
            "{e:?}"
        );
        let e = read_str("").map(|_| ()).map_err(|e| e.to_string());
        assert!(matches!(&e, Err(m) if m.contains("empty")), "{e:?}");
        let e = read_str(r#"{"brine_history":7,"workload":"w","protocol":"p","isolation":"i"}"#)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(matches!(&e, Err(m) if m.contains("version 7")), "{e:?}");
        let e = read_str("not json").map(|_| ()).map_err(|e| e.to_string());
        assert!(
            matches!(&e, Err(m) if m.starts_with("line 1: malformed header")),
            "{e:?}"
        );
        let e = read_str(r#"{"x":1}"#)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(matches!(&e, Err(m) if m.contains("brine_history")), "{e:?}");
    }
}
