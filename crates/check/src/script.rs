//! A compact notation for hand-made histories (tests and docs).
//!
//! One transaction per line, in file order; `#` starts a comment line.
//!
//! ```text
//! t1 [committed|aborted|unknown] [acid|base|group] [rc] [proc=NAME] [cl=N]: OP OP ...
//! ```
//!
//! The outcome defaults to committed and the class to acid; `rc` marks a
//! transaction that ran at read committed in a run at a stronger level;
//! `cl=N` names the client that ran it (sessions). The id is the
//! number after `t`; `ts` equals the id; line `n` runs from `10n` to
//! `10n+5` microseconds. Operations (no spaces inside one):
//!
//! * `r(KEY,V)`: point read of KEY observing version V.
//! * `w(KEY,P>V)`, `ins(KEY,P>V)`, `del(KEY,P>V)`: update, insert, delete
//!   installing V over P. Secondary index changes follow as `,iN=OLD>NEW`
//!   where OLD/NEW are index keys or `-` (no row).
//! * `rr(RANGE|SEEN,SEEN...)`: range read. RANGE is `[TABLE:][iN/]LO..HI`
//!   with `*` for unbounded and a leading `>`/`<` for an excluded bound
//!   (`>a..<c`); SEEN is `KEY@V`, with a trailing `!` for a tombstone.
//! * a trailing `[r=C.C;w=C;add]` gives the op's columns (positions):
//!   read, written, and whether the writes are blind increments.
//! * a trailing `#N` puts the op in alkaline subtransaction N.
//!
//! KEY is `[TABLE:]C1.C2...` (table `t` by default); a component that
//! parses as an integer is an INT, anything else a VARCHAR.

use std::ops::Bound;

use brine_core::{Key, Value};

use crate::history::{
    Cols, Header, IndexChange, Op, Outcome, Seen, TxnClass, TxnRecord, WriteKind, FORMAT_VERSION,
};
use crate::reader::History;

/// The default table of the notation.
pub const DEFAULT_TABLE: &str = "t";

/// Parses a script into a history (with a default header).
pub fn parse(text: &str) -> Result<History, String> {
    let mut txns = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let rec = parse_txn(line, txns.len() as u64)
            .map_err(|e| format!("script line {}: {e}: {line}", n + 1))?;
        txns.push(rec);
    }
    Ok(History {
        header: header("script"),
        txns,
    })
}

/// A header for generated and hand-made histories.
pub fn header(workload: &str) -> Header {
    Header {
        brine_history: FORMAT_VERSION,
        workload: workload.into(),
        protocol: "acid".into(),
        isolation: "serializable".into(),
        config: serde_json::Map::new(),
    }
}

fn parse_txn(line: &str, pos: u64) -> Result<TxnRecord, String> {
    let (head, body) = line.split_once(':').ok_or("expected `tN ...: ops`")?;
    let mut words = head.split_whitespace();
    let name = words.next().ok_or("missing transaction name")?;
    let id: u64 = name
        .trim_start_matches(['t', 'T'])
        .parse()
        .map_err(|_| format!("bad transaction name {name:?} (expected t<number>)"))?;
    let mut rec = TxnRecord {
        id,
        ts: id,
        procedure: None,
        class: TxnClass::Acid,
        group: None,
        outcome: Outcome::Committed,
        accepted: false,
        read_committed: false,
        client: None,
        two_phase: false,
        orphan: false,
        start_us: pos * 10,
        end_us: pos * 10 + 5,
        ops: Vec::new(),
    };
    for w in words {
        match w {
            "committed" | "ok" => rec.outcome = Outcome::Committed,
            "aborted" | "abort" => rec.outcome = Outcome::Aborted,
            "unknown" | "info" => rec.outcome = Outcome::Unknown,
            "acid" => rec.class = TxnClass::Acid,
            "base" => rec.class = TxnClass::Base,
            "group" => rec.class = TxnClass::Group,
            "rc" => rec.read_committed = true,
            _ => {
                if let Some(p) = w.strip_prefix("proc=") {
                    rec.procedure = Some(p.to_string());
                } else if let Some(c) = w.strip_prefix("cl=") {
                    let c = c.parse().map_err(|_| format!("bad client {c:?}"))?;
                    rec.client = Some(c);
                } else {
                    return Err(format!("unknown word {w:?}"));
                }
            }
        }
    }
    for tok in body.split_whitespace() {
        rec.ops.push(parse_op(tok)?);
    }
    Ok(rec)
}

fn parse_op(tok: &str) -> Result<Op, String> {
    let (tok, sub) = match tok.rsplit_once('#') {
        Some((t, s)) if t.ends_with(')') || t.ends_with(']') => (
            t,
            Some(
                s.parse::<u32>()
                    .map_err(|_| format!("bad subtransaction {s:?}"))?,
            ),
        ),
        _ => (tok, None),
    };
    let (tok, cols) = match tok.strip_suffix(']').and_then(|t| t.rsplit_once('[')) {
        Some((t, c)) => (t, Some(Box::new(parse_cols(c)?))),
        None => (tok, None),
    };
    let mut op = parse_bare_op(tok, sub)?;
    *op.cols_mut() = cols;
    Ok(op)
}

/// `r=1.2;w=3;add`: the columns read, the columns written, increments.
fn parse_cols(s: &str) -> Result<Cols, String> {
    let mut cols = Cols::default();
    let list = |l: &str| -> Result<Vec<u16>, String> {
        l.split('.')
            .filter(|c| !c.is_empty())
            .map(|c| c.parse().map_err(|_| format!("bad column {c:?}")))
            .collect()
    };
    for part in s.split(';').filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("r", l)) => cols.r = list(l)?,
            Some(("w", l)) => cols.w = list(l)?,
            None if part == "add" => cols.add = true,
            _ => return Err(format!("bad column detail {part:?} (r=C.C;w=C;add)")),
        }
    }
    Ok(cols)
}

fn parse_bare_op(tok: &str, sub: Option<u32>) -> Result<Op, String> {
    let (name, args) = tok
        .strip_suffix(')')
        .and_then(|t| t.split_once('('))
        .ok_or_else(|| format!("bad op {tok:?} (expected name(args))"))?;
    match name {
        "r" => {
            let (k, v) = args.split_once(',').ok_or("r(KEY,V)")?;
            let (table, key) = parse_key(k);
            Ok(Op::Read {
                table,
                key,
                version: parse_version(v)?,
                sub,
                cols: None,
            })
        }
        "w" | "ins" | "del" => {
            let mut parts = args.split(',');
            let (table, key) = parse_key(parts.next().unwrap_or(""));
            let pv = parts.next().ok_or("w(KEY,P>V)")?;
            let (p, v) = pv.split_once('>').ok_or("expected P>V")?;
            let mut ix = Vec::new();
            for part in parts {
                let (i, change) = part
                    .strip_prefix('i')
                    .and_then(|p| p.split_once('='))
                    .ok_or_else(|| format!("bad index change {part:?} (expected iN=OLD>NEW)"))?;
                let (old, new) = change.split_once('>').ok_or("expected OLD>NEW")?;
                let opt = |s: &str| (s != "-").then(|| parse_components(s));
                ix.push(IndexChange {
                    index: i.parse().map_err(|_| format!("bad index {i:?}"))?,
                    old: opt(old),
                    new: opt(new),
                });
            }
            let kind = match name {
                "ins" => WriteKind::Insert,
                "del" => WriteKind::Delete,
                _ => WriteKind::Update,
            };
            Ok(Op::Write {
                table,
                key,
                version: parse_version(v)?,
                prev: parse_version(p)?,
                kind,
                ix,
                sub,
                cols: None,
            })
        }
        "rr" => {
            let (range, seen) = args.split_once('|').unwrap_or((args, ""));
            let (table, range) = match range.split_once(':') {
                Some((t, r)) => (t.to_string(), r),
                None => (DEFAULT_TABLE.to_string(), range),
            };
            let (index, range) = match range.split_once('/') {
                Some((i, r)) => (
                    i.trim_start_matches('i')
                        .parse::<u32>()
                        .map_err(|_| format!("bad index {i:?}"))?,
                    r,
                ),
                None => (0, range),
            };
            let (lo, hi) = range.split_once("..").ok_or("expected LO..HI")?;
            let lo = parse_bound(lo, '>');
            let hi = parse_bound(hi, '<');
            let mut rows = Vec::new();
            for s in seen.split(',').filter(|s| !s.is_empty()) {
                let (s, deleted) = match s.strip_suffix('!') {
                    Some(s) => (s, true),
                    None => (s, false),
                };
                let (k, v) = s.split_once('@').ok_or("seen rows are KEY@V")?;
                rows.push(Seen {
                    key: parse_components(k),
                    version: parse_version(v)?,
                    deleted,
                });
            }
            Ok(Op::RangeRead {
                table,
                index,
                lo: Box::new(lo),
                hi: Box::new(hi),
                seen: rows,
                sub,
                cols: None,
            })
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

fn parse_version(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("bad version {s:?}"))
}

fn parse_bound(s: &str, excl: char) -> Bound<Key> {
    if s == "*" {
        Bound::Unbounded
    } else if let Some(k) = s.strip_prefix(excl) {
        Bound::Excluded(parse_components(k))
    } else {
        Bound::Included(parse_components(s))
    }
}

fn parse_key(s: &str) -> (String, Key) {
    match s.split_once(':') {
        Some((t, k)) => (t.to_string(), parse_components(k)),
        None => (DEFAULT_TABLE.to_string(), parse_components(s)),
    }
}

fn parse_components(s: &str) -> Key {
    Key::new(s.split('.').map(|c| {
        if c == "MAX" {
            Value::Max
        } else if let Ok(i) = c.parse::<i64>() {
            Value::Int(i)
        } else {
            Value::str(c)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_op() -> Result<(), String> {
        let h = parse(
            "# comment\n\
             t1 base proc=transfer cl=3: r(x,0) w(acct:1.2,0>5,i1=->a)#2 del(y,3>4) \
             rr(acct:i1/>a..*|1.2@5,3@7!)\n\
             t2 aborted: ins(z,0>9)",
        )?;
        assert_eq!(h.txns.len(), 2);
        assert_eq!(h.txns[0].class, TxnClass::Base);
        assert_eq!(h.txns[0].client, Some(3));
        assert_eq!(h.txns[1].client, None);
        assert_eq!(h.txns[0].ops.len(), 4);
        assert!(
            matches!(&h.txns[0].ops[1], Op::Write { sub: Some(2), ix, .. } if ix.len() == 1 && ix[0].old.is_none())
        );
        assert!(
            matches!(&h.txns[0].ops[3], Op::RangeRead { index: 1, lo, hi, seen, .. }
                if matches!(**lo, Bound::Excluded(_)) && matches!(**hi, Bound::Unbounded)
                    && seen.len() == 2 && seen[1].deleted)
        );
        assert_eq!(h.txns[1].outcome, Outcome::Aborted);
        assert!(parse("t1: q(x)").is_err());
        assert!(parse("x1: r(x,0)").is_err());
        assert!(parse("t1 cl=a: r(x,0)").is_err());
        Ok(())
    }
}
