//! The history format: what a run records and the checker reads.
//!
//! ```text
//!  history file (JSON lines)
//!    line 1    {"brine_history":1, "workload":..., "protocol":..., ...}   Header
//!    line 2..  {"id":..,"ts":..,"proc":..,"class":..,"outcome":..,"ops":[..]}
//!                                                          one TxnRecord per
//!                                                          transaction attempt,
//!                                                          written when it ends
//! ```
//!
//! # Versions
//!
//! Every write installs a version id unique in the whole run (partitions
//! draw them from disjoint ranges). Version `0` is a key's initial state:
//! the loaded row, or "no row yet" for a key never written. A write records
//! the version it replaced (`prev`), so each key's version order is read
//! off the file exactly, without inference: the versions of a key form a
//! tree rooted at 0 whose branches are aborted writes; the committed
//! versions form its one chain. A delete installs a tombstone version, and
//! a read of an absent key reports the tombstone (or 0) it observed.
//!
//! A multi-versioned store installs versions out of order (a write at a
//! later timestamp may land before one at an earlier timestamp), so the
//! `prev` it sees at install time is not the version the write follows.
//! Such a run says so in its header (`config.versions: "timestamp"`,
//! [`Header::timestamp_versions`]): the version id itself orders a key's
//! versions, and the checker derives every installed write's `prev` from
//! the ids instead of reading it ([`crate::timestamps`]).
//!
//! # Sessions
//!
//! A record may name the client that ran it (`cl`). A client runs one
//! transaction at a time, so its records ordered by start time are its
//! session, and the checker holds every session to per-key order: no
//! operation observes a version of a key older than one an earlier
//! transaction of the same client observed (read or wrote).
//!
//! # Operations
//!
//! * `r`  point read of `(table, key)` observing `version`.
//! * `w`  write of `(table, key)` installing `version` over `prev`; `kind`
//!   is insert, update or delete; `ix` lists the secondary-index keys the
//!   row had before and has after, for every secondary index, so a range
//!   read over a secondary index can be matched against later writes.
//! * `rr` range read over index `index` (0 is the primary key) of the keys
//!   between `lo` and `hi`, observing exactly the rows in `seen` (primary
//!   key and version; tombstones in the interval are listed with
//!   `deleted: true`). `lo`/`hi` are the interval actually observed: a scan
//!   stopped early by LIMIT reports the key where it stopped as `hi`.
//!
//! # Columns
//!
//! Each operation may carry `c`, the columns it touched by position in the
//! table's definition (the header's `config.columns` names them): `r` the
//! columns a read observed (for a write, the columns the writing statement
//! read, e.g. the sources of `SET`), `w` the columns a write changed, and
//! `add` when every change was a blind increment (`SET c = c + e`), which
//! commutes with other increments of the column. Without `c` an operation
//! touched the whole row. The row-level checker ignores `c`; the
//! column-level one (`crate::columns`) checks each column as an item.
//!
//! Keys are JSON arrays of scalars: INT as a number, VARCHAR as a string,
//! NULL as null, DECIMAL as `{"dec": "12.34"}`, TIMESTAMP as `{"ts_us": n}`.

use std::fmt;
use std::ops::Bound;

use brine_core::{Decimal, Key, Value};
use serde::de::{self, Deserializer};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

/// The version id of every key's initial state.
pub const INITIAL_VERSION: u64 = 0;

/// The value of `brine_history` in the header this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of a history file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub brine_history: u32,
    pub workload: String,
    pub protocol: String,
    pub isolation: String,
    /// Free-form run configuration (clients, seed, link, ...).
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
}

/// The header's `config.versions` value of a run whose version ids are
/// timestamps (see "Versions" above).
pub const TIMESTAMP_VERSIONS: &str = "timestamp";

impl Header {
    /// Whether version ids order each key's versions (`config.versions` is
    /// `"timestamp"`): a multi-versioned store installs versions out of
    /// order, so the `prev` its writes record is not their predecessor.
    pub fn timestamp_versions(&self) -> bool {
        self.config.get("versions").and_then(|v| v.as_str()) == Some(TIMESTAMP_VERSIONS)
    }
}

/// What kind of transaction a record is, for the levels that treat kinds
/// differently (Salt: ACID readers must not see BASE transactions'
/// unfinished state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnClass {
    Acid,
    Base,
    /// A transaction of a Callas group (the group's name is in `group`).
    Group,
}

/// How a transaction attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Committed,
    Aborted,
    /// Not known (the client gave up, or a crash left it in doubt): it may
    /// or may not have committed.
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
    Insert,
    Update,
    Delete,
}

/// One transaction attempt. A retried transaction is several records with
/// the same `ts` and different `id`s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnRecord {
    /// Unique per attempt within the run.
    pub id: u64,
    /// The transaction's age (kept across retries).
    pub ts: u64,
    /// The procedure, or `None` for an interactive transaction.
    #[serde(rename = "proc", default, skip_serializing_if = "Option::is_none")]
    pub procedure: Option<String>,
    pub class: TxnClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub outcome: Outcome,
    /// For BASE transactions: the first alkaline subtransaction committed
    /// (the client was told "accepted").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
    /// It ran at read committed in a run recorded at a stronger level (a
    /// procedure that needs no more, e.g. TPC-C's stock-level, clause
    /// 3.4.1): its reads promise nothing past themselves, so the checker
    /// drops the anti-dependencies out of it (Adya's mixed-level rule: an
    /// edge binds a transaction only where its own level asks for it).
    #[serde(rename = "rc", default, skip_serializing_if = "std::ops::Not::not")]
    pub read_committed: bool,
    /// The client that ran the attempt, when the recorder names clients. A
    /// client runs one attempt at a time; its committed records in start
    /// order are a session, held to per-key order (see "Sessions" above).
    #[serde(rename = "cl", default, skip_serializing_if = "Option::is_none")]
    pub client: Option<u64>,
    /// An `unknown` record of a commit decided in two phases by its
    /// coordinator's decision log (absent: one round, or not known), so a
    /// restarted coordinator can settle it from that log.
    #[serde(rename = "2pc", default, skip_serializing_if = "std::ops::Not::not")]
    pub two_phase: bool,
    /// Written by a partition that aborted the attempt after its
    /// coordinator was lost (its process restarted): the ops are the
    /// writes that partition undid. It joins the attempt's other records
    /// (aborting an `unknown` one) instead of replacing them, and stands
    /// for the attempt where its coordinator never recorded it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphan: bool,
    /// Microseconds since the run started, at the client.
    pub start_us: u64,
    pub end_us: u64,
    pub ops: Vec<Op>,
}

/// One operation, in the order the transaction performed them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum Op {
    #[serde(rename = "r")]
    Read {
        #[serde(rename = "t")]
        table: String,
        #[serde(rename = "k", with = "key_json")]
        key: Key,
        #[serde(rename = "v")]
        version: u64,
        /// Alkaline subtransaction index within a BASE transaction.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sub: Option<u32>,
        #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
        cols: Option<Box<Cols>>,
    },
    #[serde(rename = "w")]
    Write {
        #[serde(rename = "t")]
        table: String,
        #[serde(rename = "k", with = "key_json")]
        key: Key,
        #[serde(rename = "v")]
        version: u64,
        prev: u64,
        kind: WriteKind,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ix: Vec<IndexChange>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sub: Option<u32>,
        #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
        cols: Option<Box<Cols>>,
    },
    #[serde(rename = "rr")]
    RangeRead {
        #[serde(rename = "t")]
        table: String,
        index: u32,
        /// Boxed, as `hi`: a bound holds a key inline, and most
        /// operations are point reads and writes, which would otherwise
        /// each take the size of two keys more.
        #[serde(with = "bound_json")]
        lo: Box<Bound<Key>>,
        #[serde(with = "bound_json")]
        hi: Box<Bound<Key>>,
        seen: Vec<Seen>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sub: Option<u32>,
        #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
        cols: Option<Box<Cols>>,
    },
}

/// The columns an operation touched (see "Columns" above), by position in
/// the table's definition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cols {
    /// Columns observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub r: Vec<u16>,
    /// Columns changed (writes only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub w: Vec<u16>,
    /// Every change was a blind increment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub add: bool,
}

impl Op {
    /// The alkaline subtransaction (or piece) it belongs to, if marked.
    pub fn sub(&self) -> Option<u32> {
        match self {
            Op::Read { sub, .. } | Op::Write { sub, .. } | Op::RangeRead { sub, .. } => *sub,
        }
    }

    /// Marks the operation as one of alkaline subtransaction `no` (Salt)
    /// or piece `no` (Callas' chopping).
    pub fn set_sub(&mut self, no: u32) {
        match self {
            Op::Read { sub, .. } | Op::Write { sub, .. } | Op::RangeRead { sub, .. } => {
                *sub = Some(no)
            }
        }
    }

    /// The operation's column detail, for setting it.
    pub fn cols_mut(&mut self) -> &mut Option<Box<Cols>> {
        match self {
            Op::Read { cols, .. } | Op::Write { cols, .. } | Op::RangeRead { cols, .. } => cols,
        }
    }
}

/// A row's key in one secondary index before and after a write (`None`:
/// the row did not exist before / does not exist after).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexChange {
    #[serde(rename = "i")]
    pub index: u32,
    #[serde(with = "opt_key_json")]
    pub old: Option<Key>,
    #[serde(with = "opt_key_json")]
    pub new: Option<Key>,
}

/// A row a range read observed (by primary key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    #[serde(rename = "k", with = "key_json")]
    pub key: Key,
    #[serde(rename = "v")]
    pub version: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// A value as one JSON scalar (see the module docs).
pub fn value_to_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Int(i) => json!(i),
        Value::Decimal(d) => json!({ "dec": d.to_string() }),
        Value::Str(s) => json!(s.as_ref()),
        Value::Timestamp(t) => json!({ "ts_us": t }),
        // Never stored; only bounds of prefix ranges carry it.
        Value::Max => json!({ "max": true }),
    }
}

/// The inverse of [`value_to_json`].
pub fn value_from_json(j: &serde_json::Value) -> Result<Value, String> {
    match j {
        serde_json::Value::Null => Ok(Value::Null),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .ok_or_else(|| format!("key value {n} is not a 64-bit integer")),
        serde_json::Value::String(s) => Ok(Value::Str(s.as_str().into())),
        serde_json::Value::Object(m) => {
            if let Some(d) = m.get("dec").and_then(|d| d.as_str()) {
                parse_decimal(d)
                    .map(Value::Decimal)
                    .ok_or_else(|| format!("bad decimal {d:?} in a key"))
            } else if let Some(t) = m.get("ts_us").and_then(|t| t.as_i64()) {
                Ok(Value::Timestamp(t))
            } else if m.get("max").is_some() {
                Ok(Value::Max)
            } else {
                Err(format!("unknown key value {j}"))
            }
        }
        other => Err(format!("unsupported key value {other}")),
    }
}

fn parse_decimal(s: &str) -> Option<Decimal> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let scale = u8::try_from(frac.len()).ok()?;
    if scale > Decimal::MAX_SCALE {
        return None;
    }
    let all: String = format!("{int}{frac}");
    let units: i64 = all.parse().ok()?;
    Some(Decimal::new(if neg { -units } else { units }, scale))
}

/// A key as a JSON array.
pub fn key_to_json(k: &Key) -> serde_json::Value {
    serde_json::Value::Array(k.0.iter().map(value_to_json).collect())
}

/// The inverse of [`key_to_json`].
pub fn key_from_json(j: &serde_json::Value) -> Result<Key, String> {
    match j {
        serde_json::Value::Array(items) => Ok(Key(items
            .iter()
            .map(value_from_json)
            .collect::<Result<_, _>>()?)),
        other => Err(format!("a key must be a JSON array, got {other}")),
    }
}

mod key_json {
    use super::*;

    pub fn serialize<S: Serializer>(k: &Key, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(k.0.len()))?;
        for v in k.0.iter() {
            seq.serialize_element(&value_to_json(v))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        let j = serde_json::Value::deserialize(d)?;
        key_from_json(&j).map_err(de::Error::custom)
    }
}

mod opt_key_json {
    use super::*;

    pub fn serialize<S: Serializer>(k: &Option<Key>, s: S) -> Result<S::Ok, S::Error> {
        match k {
            Some(k) => key_to_json(k).serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Key>, D::Error> {
        let j = serde_json::Value::deserialize(d)?;
        if j.is_null() {
            return Ok(None);
        }
        key_from_json(&j).map(Some).map_err(de::Error::custom)
    }
}

/// A bound as `null` (unbounded) or `{"key": [...], "incl": bool}`.
mod bound_json {
    use super::*;

    // Serde hands over the field itself, a box.
    #[allow(clippy::borrowed_box)]
    pub fn serialize<S: Serializer>(b: &Box<Bound<Key>>, s: S) -> Result<S::Ok, S::Error> {
        let j = match &**b {
            Bound::Unbounded => serde_json::Value::Null,
            Bound::Included(k) => serde_json::json!({ "key": key_to_json(k), "incl": true }),
            Bound::Excluded(k) => serde_json::json!({ "key": key_to_json(k), "incl": false }),
        };
        j.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Box<Bound<Key>>, D::Error> {
        let j = serde_json::Value::deserialize(d)?;
        if j.is_null() {
            return Ok(Box::new(Bound::Unbounded));
        }
        let key = j
            .get("key")
            .ok_or_else(|| de::Error::custom("a bound needs a `key`"))
            .and_then(|k| key_from_json(k).map_err(de::Error::custom))?;
        match j.get("incl").and_then(|b| b.as_bool()) {
            Some(true) => Ok(Box::new(Bound::Included(key))),
            Some(false) => Ok(Box::new(Bound::Excluded(key))),
            None => Err(de::Error::custom("a bound needs `incl`: true or false")),
        }
    }
}

impl fmt::Display for WriteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WriteKind::Insert => "insert",
            WriteKind::Update => "update",
            WriteKind::Delete => "delete",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(vals: &[Value]) -> Key {
        Key(vals.iter().cloned().collect())
    }

    /// A checked history holds millions of operations (more when split
    /// per column), so an operation stays small: a range read's bounds,
    /// each the size of a key, are boxed. Inline they made every
    /// operation 296 bytes, and a per-column check of a 10 s TPC-C
    /// history took 4.2 GB instead of 3.0.
    #[test]
    fn an_operation_is_under_two_keys_wide() {
        let key = std::mem::size_of::<Key>();
        let op = std::mem::size_of::<Op>();
        assert!(op < 2 * key, "Op is {op} bytes, a key {key}");
    }

    #[test]
    fn records_round_trip_through_json() {
        let rec = TxnRecord {
            id: 7,
            ts: 3,
            procedure: Some("transfer".into()),
            class: TxnClass::Acid,
            group: None,
            outcome: Outcome::Committed,
            accepted: false,
            read_committed: false,
            client: Some(4),
            two_phase: false,
            orphan: false,
            start_us: 10,
            end_us: 20,
            ops: vec![
                Op::Read {
                    table: "account".into(),
                    key: key(&[Value::Int(1)]),
                    version: 0,
                    sub: None,
                    cols: None,
                },
                Op::Write {
                    table: "c".into(),
                    key: key(&[
                        Value::Str("x".into()),
                        Value::Decimal(Decimal::new(-1234, 2)),
                    ]),
                    version: 9,
                    prev: 0,
                    kind: WriteKind::Insert,
                    ix: vec![IndexChange {
                        index: 1,
                        old: None,
                        new: Some(key(&[Value::Timestamp(5)])),
                    }],
                    sub: Some(1),
                    cols: None,
                },
                Op::RangeRead {
                    table: "account".into(),
                    index: 0,
                    lo: Box::new(Bound::Included(key(&[Value::Int(1)]))),
                    hi: Box::new(Bound::Unbounded),
                    seen: vec![Seen {
                        key: key(&[Value::Int(2)]),
                        version: 4,
                        deleted: true,
                    }],
                    sub: None,
                    cols: None,
                },
            ],
        };
        let line = serde_json::to_string(&rec).unwrap();
        assert!(line.contains(r#""dec":"-12.34""#), "{line}");
        assert!(line.contains(r#""cl":4"#), "{line}");
        let back: TxnRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, rec);
        // Without a client the field is left out, and a record without it
        // reads back as no client.
        let anonymous = TxnRecord {
            client: None,
            ..rec
        };
        let line = serde_json::to_string(&anonymous).unwrap();
        assert!(!line.contains(r#""cl""#), "{line}");
        let back: TxnRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back.client, None);
    }

    #[test]
    fn the_timestamp_switch_is_a_string_in_the_config() {
        let mut h = crate::script::header("w");
        assert!(!h.timestamp_versions());
        h.config
            .insert("versions".into(), serde_json::json!("prev"));
        assert!(!h.timestamp_versions());
        h.config.insert("versions".into(), serde_json::json!(true));
        assert!(!h.timestamp_versions());
        h.config
            .insert("versions".into(), serde_json::json!("timestamp"));
        assert!(h.timestamp_versions());
    }

    #[test]
    fn malformed_keys_are_errors() {
        assert!(key_from_json(&serde_json::json!(3)).is_err());
        assert!(key_from_json(&serde_json::json!([1.5])).is_err());
        assert!(key_from_json(&serde_json::json!([{"dec": "1.2.3"}])).is_err());
    }
}
