//! What `brine check` does, kept here so the `brine` binary only parses
//! flags: read the history, check it, print the summary and witnesses,
//! optionally export it to Elle, or measure the checker on a generated
//! history (`--self-bench N`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use thiserror::Error;

use crate::columns;
use crate::elle::{self, ElleModel};
use crate::gen::{generate, GenConfig};
use crate::reader::{self, ReadError};
use crate::report::Level;

/// The options of `brine check`.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    pub file: Option<PathBuf>,
    pub level: Level,
    pub export_elle: Option<(PathBuf, ElleModel)>,
    pub max_witnesses: usize,
    pub json: bool,
    /// Generate a valid history of this many transactions and time the
    /// checker on it instead of reading a file.
    pub self_bench: Option<usize>,
    pub seed: u64,
    /// Row- or column-level items; `None`: what the history's header asks
    /// for (column level for runs with Runtime Pipelining).
    pub granularity: Option<Granularity>,
}

/// What the checker treats as one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    Row,
    Column,
}

#[derive(Debug, Error)]
pub enum CommandError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot write the Elle history to {path}: {source}")]
    Export {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("no history file given (brine check FILE, or --self-bench N)")]
    NoInput,
}

/// Runs the command; `Ok(true)` when the history satisfies the level.
pub fn run<W: Write>(opts: &CheckOptions, out: &mut W) -> Result<bool, CommandError> {
    if let Some(n) = opts.self_bench {
        return self_bench(n, opts, out);
    }
    let path = opts.file.as_ref().ok_or(CommandError::NoInput)?;
    let t0 = Instant::now();
    let history = reader::read_path(path)?;
    let read_ms = t0.elapsed().as_secs_f64() * 1e3;
    let granularity = opts
        .granularity
        .unwrap_or(if columns::wants_columns(&history.header) {
            Granularity::Column
        } else {
            Granularity::Row
        });
    let t1 = Instant::now();
    let per_column = granularity == Granularity::Column;
    let report = crate::check_history_at(&history, opts.level, per_column);
    let check_ms = t1.elapsed().as_secs_f64() * 1e3;
    // A list-append export is also checked for the invariants Elle's model
    // rests on (they hold in every strictly serializable run; a history
    // with BASE transactions is not one, see docs/history-format.md).
    let mut lists = None;
    if let Some((elle_path, model)) = &opts.export_elle {
        let ops = export(&history.txns, elle_path, *model)?;
        if *model == ElleModel::ListAppend {
            lists = Some(elle::check_list_append(&ops));
        }
    }
    let lists_hold = lists.as_ref().is_none_or(|l| {
        l.ok()
            || opts.level != Level::Serializable
            || history
                .txns
                .iter()
                .any(|t| t.class != crate::TxnClass::Acid)
    });
    if opts.json {
        let mut shown = report.clone();
        shown.anomalies.truncate(opts.max_witnesses);
        serde_json::to_writer_pretty(&mut *out, &shown).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        let h = &history.header;
        writeln!(
            out,
            "history {}: workload {}, protocol {}, isolation {}, checked per {}{}",
            path.display(),
            h.workload,
            h.protocol,
            h.isolation,
            match granularity {
                Granularity::Row => "row",
                Granularity::Column => "column",
            },
            if h.timestamp_versions() {
                ", versions ordered by timestamp"
            } else {
                ""
            }
        )?;
        write!(out, "{}", report.render(opts.max_witnesses))?;
        writeln!(out, "read {read_ms:.0} ms, checked {check_ms:.0} ms")?;
        if let Some((p, m)) = &opts.export_elle {
            writeln!(
                out,
                "Elle history ({}) written to {}",
                m.name(),
                p.display()
            )?;
        }
        if let Some(l) = &lists {
            writeln!(out, "{}", l.render())?;
        }
    }
    Ok(report.valid && lists_hold)
}

fn export(
    txns: &[crate::TxnRecord],
    path: &PathBuf,
    model: ElleModel,
) -> Result<Vec<elle::ElleOp>, CommandError> {
    let err = |source| CommandError::Export {
        path: path.clone(),
        source,
    };
    let file = File::create(path).map_err(err)?;
    let mut w = BufWriter::new(file);
    let ops = elle::elle_ops(txns, model);
    elle::write_edn(&ops, &mut w).map_err(err)?;
    w.flush().map_err(err)?;
    Ok(ops)
}

/// Times generation, serialization, parsing and checking of a valid
/// history of `n` transactions.
fn self_bench<W: Write>(n: usize, opts: &CheckOptions, out: &mut W) -> Result<bool, CommandError> {
    let cfg = GenConfig {
        txns: n,
        seed: opts.seed,
        keys: 1000,
        lists: 50,
        ..GenConfig::default()
    };
    let t = Instant::now();
    let history = generate(&cfg);
    let gen_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let mut bytes = Vec::new();
    reader::write_history(&mut bytes, &history)?;
    let write_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let parsed = reader::HistoryReader::new(bytes.as_slice())?.read_all()?;
    let read_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let report = crate::check(&parsed.txns, opts.level);
    let check_ms = t.elapsed().as_secs_f64() * 1e3;
    write!(out, "{}", report.render(opts.max_witnesses))?;
    writeln!(
        out,
        "self-bench: {n} transactions (seed {}, {} keys, {} lists), {:.1} MB of JSON lines",
        opts.seed,
        cfg.keys,
        cfg.lists,
        bytes.len() as f64 / 1e6
    )?;
    writeln!(
        out,
        "  generate {gen_ms:.0} ms, serialize {write_ms:.0} ms, parse {read_ms:.0} ms, check {check_ms:.0} ms; parse+check {:.0} ms",
        read_ms + check_ms
    )?;
    Ok(report.valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(file: PathBuf, level: Level) -> CheckOptions {
        CheckOptions {
            file: Some(file),
            level,
            export_elle: None,
            max_witnesses: 10,
            json: false,
            self_bench: None,
            seed: 0,
            granularity: None,
        }
    }

    /// `brine check` follows the header's timestamp switch, per row and
    /// per column: out-of-order installs are a fork without it and a valid
    /// history with it.
    #[test]
    fn the_command_follows_the_timestamp_switch() {
        let mut h =
            crate::script::parse("t2: w(x,0>200)\nt1: w(x,0>100)\nt3: r(x,200)").expect("script");
        let dir = std::env::temp_dir();
        let path = dir.join(format!("brine-check-ts-{}.jsonl", std::process::id()));
        let write = |h: &reader::History| {
            let mut bytes = Vec::new();
            reader::write_history(&mut bytes, h).expect("write");
            std::fs::write(&path, bytes).expect("temp file");
        };
        write(&h);
        let mut out = Vec::new();
        let ok = run(&options(path.clone(), Level::SnapshotIsolation), &mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(matches!(ok, Ok(false)), "{text}");
        assert!(text.contains("fork"), "{text}");
        h.header
            .config
            .insert("versions".into(), serde_json::json!("timestamp"));
        write(&h);
        for granularity in [Granularity::Row, Granularity::Column] {
            let mut opts = options(path.clone(), Level::SnapshotIsolation);
            opts.granularity = Some(granularity);
            let mut out = Vec::new();
            let ok = run(&opts, &mut out);
            let text = String::from_utf8_lossy(&out).into_owned();
            assert!(matches!(ok, Ok(true)), "{granularity:?}: {text}");
            assert!(text.contains("versions ordered by timestamp"), "{text}");
            assert!(text.contains("level snapshot-isolation: OK"), "{text}");
        }
        let _ = std::fs::remove_file(&path);
    }
}
