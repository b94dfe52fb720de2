//! History recording format and isolation checking.
//!
//! ```text
//!   run (--history FILE) ──► history.jsonl ──► reader ──► checker ──► Report
//!                                   │                        (G0 G1a G1b G1c
//!                                   └──► elle (EDN) ──► Elle   G-single G-nonadjacent
//!                                                              G2 salt session-order)
//! ```
//!
//! * [`history`]: the file format (the contract with the recorder).
//! * [`reader`]: streaming, line-numbered parsing of history files.
//! * [`checker`]: Adya's direct serialization graph and the anomaly search
//!   (and the per-client session order).
//! * [`timestamps`]: prevs derived from version ids, for runs whose header
//!   orders versions by timestamp (multi-versioned stores).
//! * [`chains`]: Salt's search for chains of BASE reads (chain-wr edges).
//! * [`columns`]: column-level checking (each column of a row an item).
//! * [`elle`], [`edn`]: export to Jepsen/Elle EDN histories and a reader
//!   for them.
//! * [`gen`]: seeded generator of large valid histories (tests, benchmark).
//! * [`script`]: a compact text notation for hand-made histories.

pub mod chains;
pub mod checker;
pub mod columns;
pub mod command;
pub mod cycles;
pub mod edn;
pub mod elle;
pub mod gen;
pub mod history;
pub mod reader;
pub mod report;
pub mod script;
pub mod timestamps;

pub use checker::check;
pub use columns::check_columns;
pub use history::{Cols, Header, IndexChange, Op, Outcome, Seen, TxnClass, TxnRecord, WriteKind};
pub use reader::{read_file, read_str, History, HistoryReader, ReadError};
pub use report::{Anomaly, AnomalyClass, EdgeInfo, EdgeKind, Level, Report};

/// Checks a whole history at `level`, as its header asks: with
/// `config.versions: "timestamp"` the version ids order each key's
/// versions and the recorded prevs of installed writes are replaced
/// ([`crate::timestamps`]); per column where its run declared
/// dependencies per column (Callas' Runtime Pipelining,
/// [`crate::columns::wants_columns`]), per row otherwise.
pub fn check_history(history: &History, level: Level) -> Report {
    check_history_at(
        history,
        level,
        crate::columns::wants_columns(&history.header),
    )
}

/// [`check_history`], per column or per row as `per_column` says.
pub fn check_history_at(history: &History, level: Level, per_column: bool) -> Report {
    let txns = crate::timestamps::prepared(history);
    if per_column {
        let names = crate::columns::column_names(&history.header);
        crate::check_columns(&txns, level, &names)
    } else {
        crate::check(&txns, level)
    }
}
