//! A small EDN (extensible data notation) writer and reader: enough for
//! Jepsen/Elle histories (maps, vectors, lists, sets, keywords, strings,
//! integers, nil, booleans, symbols). Not a general EDN implementation:
//! no floats, characters, tagged literals or metadata.

use std::fmt;

use thiserror::Error;

/// An EDN value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edn {
    Nil,
    Bool(bool),
    Int(i64),
    Str(String),
    /// Without the leading colon.
    Keyword(String),
    Symbol(String),
    Vector(Vec<Edn>),
    List(Vec<Edn>),
    Set(Vec<Edn>),
    /// Entries in written order.
    Map(Vec<(Edn, Edn)>),
}

impl Edn {
    pub fn kw(s: &str) -> Edn {
        Edn::Keyword(s.to_string())
    }

    /// The value of keyword key `k` in a map.
    pub fn get(&self, k: &str) -> Option<&Edn> {
        match self {
            Edn::Map(entries) => entries
                .iter()
                .find(|(key, _)| matches!(key, Edn::Keyword(s) if s == k))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

impl fmt::Display for Edn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(f: &mut fmt::Formatter<'_>, open: &str, items: &[Edn], close: &str) -> fmt::Result {
            f.write_str(open)?;
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{x}")?;
            }
            f.write_str(close)
        }
        match self {
            Edn::Nil => f.write_str("nil"),
            Edn::Bool(b) => write!(f, "{b}"),
            Edn::Int(i) => write!(f, "{i}"),
            Edn::Str(s) => {
                f.write_str("\"")?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        '\r' => f.write_str("\\r")?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("\"")
            }
            Edn::Keyword(k) => write!(f, ":{k}"),
            Edn::Symbol(s) => f.write_str(s),
            Edn::Vector(v) => seq(f, "[", v, "]"),
            Edn::List(v) => seq(f, "(", v, ")"),
            Edn::Set(v) => seq(f, "#{", v, "}"),
            Edn::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k} {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// A syntax error with the line it is on.
#[derive(Debug, Error, PartialEq)]
#[error("EDN line {line}: {message}")]
pub struct EdnError {
    pub line: usize,
    pub message: String,
}

/// Parses every top-level value of `text`.
pub fn parse_all(text: &str) -> Result<Vec<Edn>, EdnError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    let mut out = Vec::new();
    loop {
        p.skip_ws();
        if p.pos >= p.s.len() {
            return Ok(out);
        }
        out.push(p.value(0)?);
    }
}

/// Nesting bound: deeper input is rejected rather than overflowing the stack.
const DEPTH_MAX: usize = 128;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> EdnError {
        let upto = self.pos.min(self.s.len());
        EdnError {
            line: 1 + self.s[..upto].iter().filter(|&&b| b == b'\n').count(),
            message: message.into(),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(&b) = self.s.get(self.pos) {
            if b.is_ascii_whitespace() || b == b',' {
                self.pos += 1;
            } else if b == b';' {
                while self.s.get(self.pos).is_some_and(|&b| b != b'\n') {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Edn, EdnError> {
        if depth > DEPTH_MAX {
            return Err(self.err("nesting too deep"));
        }
        self.skip_ws();
        let Some(&b) = self.s.get(self.pos) else {
            return Err(self.err("unexpected end of input"));
        };
        match b {
            b'[' => {
                self.pos += 1;
                Ok(Edn::Vector(self.items(b']', depth)?))
            }
            b'(' => {
                self.pos += 1;
                Ok(Edn::List(self.items(b')', depth)?))
            }
            b'{' => {
                self.pos += 1;
                let items = self.items(b'}', depth)?;
                if items.len() % 2 != 0 {
                    return Err(self.err("a map needs an even number of forms"));
                }
                let mut it = items.into_iter();
                let mut entries = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    entries.push((k, v));
                }
                Ok(Edn::Map(entries))
            }
            b'#' if self.s.get(self.pos + 1) == Some(&b'{') => {
                self.pos += 2;
                Ok(Edn::Set(self.items(b'}', depth)?))
            }
            b'"' => self.string(),
            b']' | b')' | b'}' => Err(self.err(format!("unexpected `{}`", b as char))),
            _ => self.atom(),
        }
    }

    fn items(&mut self, close: u8, depth: usize) -> Result<Vec<Edn>, EdnError> {
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            match self.s.get(self.pos) {
                None => return Err(self.err(format!("missing `{}`", close as char))),
                Some(&b) if b == close => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(_) => out.push(self.value(depth + 1)?),
            }
        }
    }

    fn string(&mut self) -> Result<Edn, EdnError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Err(self.err("unterminated string"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(Edn::Str(out)),
                '\\' => {
                    let e = self.text[self.pos..].chars().next();
                    self.pos += e.map_or(0, char::len_utf8);
                    out.push(match e {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some('"') => '"',
                        Some('\\') => '\\',
                        other => return Err(self.err(format!("unsupported escape {other:?}"))),
                    });
                }
                c => out.push(c),
            }
        }
    }

    fn atom(&mut self) -> Result<Edn, EdnError> {
        let start = self.pos;
        while let Some(&b) = self.s.get(self.pos) {
            if b.is_ascii_whitespace() || b",;[](){}\"".contains(&b) {
                break;
            }
            self.pos += 1;
        }
        let tok = &self.text[start..self.pos];
        if tok.is_empty() {
            return Err(self.err("unexpected character"));
        }
        if let Some(k) = tok.strip_prefix(':') {
            if k.is_empty() {
                return Err(self.err("empty keyword"));
            }
            return Ok(Edn::Keyword(k.to_string()));
        }
        match tok {
            "nil" => return Ok(Edn::Nil),
            "true" => return Ok(Edn::Bool(true)),
            "false" => return Ok(Edn::Bool(false)),
            _ => {}
        }
        let first = tok.as_bytes()[0];
        let numeric = first.is_ascii_digit()
            || ((first == b'-' || first == b'+')
                && tok.len() > 1
                && tok.as_bytes()[1].is_ascii_digit());
        if numeric {
            let digits = tok.strip_suffix('N').unwrap_or(tok);
            return digits
                .parse::<i64>()
                .map(Edn::Int)
                .map_err(|_| self.err(format!("unsupported number {tok:?} (integers only)")));
        }
        Ok(Edn::Symbol(tok.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_values() -> Result<(), EdnError> {
        let v = Edn::Map(vec![
            (Edn::kw("type"), Edn::kw("ok")),
            (
                Edn::kw("value"),
                Edn::Vector(vec![
                    Edn::Vector(vec![Edn::kw("r"), Edn::Str("a \"q\"\n".into()), Edn::Nil]),
                    Edn::List(vec![Edn::Int(-3), Edn::Bool(true), Edn::Symbol("x".into())]),
                    Edn::Set(vec![Edn::Int(1)]),
                ]),
            ),
        ]);
        let text = v.to_string();
        assert_eq!(parse_all(&text)?, vec![v]);
        Ok(())
    }

    #[test]
    fn errors_are_reported_not_panics() {
        for bad in ["[1 2", "{:a}", "\"abc", "]", "[1.5]", "\"\\q\"", ":"] {
            assert!(parse_all(bad).is_err(), "{bad}");
        }
        let deep = "[".repeat(1000);
        assert!(parse_all(&deep).is_err());
        let e = parse_all("[1]\n[2\n").err().map(|e| e.line);
        assert_eq!(e, Some(3));
        assert_eq!(
            parse_all("; c\n1N, 2").ok(),
            Some(vec![Edn::Int(1), Edn::Int(2)])
        );
    }
}
