//! Binary encoding of values, keys, rows and transaction ids for the log and
//! checkpoints. Little-endian, length-prefixed, no padding; every decoder
//! call is bounds-checked, so garbage input is an error, never a panic.
//!
//! ```text
//!  value := tag u8 . body      0 NULL | 1 INT i64 | 2 DECIMAL i64 u8
//!                              3 STR u32 len, utf-8 | 4 TIMESTAMP i64
//!  row   := u16 n . value^n    key := u16 n . value^n
//!  txn   := ts u64 . id u64
//! ```

use brine_core::{Decimal, Key, Row, TxnId, Value};
use std::sync::Arc;

/// A decoding failure: what was expected and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

pub type DecodeResult<T> = Result<T, DecodeError>;

pub fn put_u8(buf: &mut Vec<u8>, v: u8) {
    buf.push(v);
}

pub fn put_u16(buf: &mut Vec<u8>, v: u16) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    put_u32(buf, b.len() as u32);
    buf.extend_from_slice(b);
}

pub fn put_txn(buf: &mut Vec<u8>, t: TxnId) {
    put_u64(buf, t.ts);
    put_u64(buf, t.id);
}

pub fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => put_u8(buf, 0),
        Value::Int(i) => {
            put_u8(buf, 1);
            put_i64(buf, *i);
        }
        Value::Decimal(d) => {
            put_u8(buf, 2);
            put_i64(buf, d.units);
            put_u8(buf, d.scale);
        }
        Value::Str(s) => {
            put_u8(buf, 3);
            put_bytes(buf, s.as_bytes());
        }
        Value::Timestamp(t) => {
            put_u8(buf, 4);
            put_i64(buf, *t);
        }
        // Never in a row (type checks reject it), so a row's decoder
        // refuses it; a lock interval's bound may hold it (`bound_key`).
        Value::Max => put_u8(buf, 255),
    }
}

pub fn put_values(buf: &mut Vec<u8>, vs: &[Value]) {
    put_u16(buf, vs.len() as u16);
    for v in vs {
        put_value(buf, v);
    }
}

/// A bounds-checked cursor over an encoded buffer.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(DecodeError(format!(
                "{what}: needs {n} bytes at offset {}, only {} left",
                self.pos,
                self.buf.len().saturating_sub(self.pos)
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> DecodeResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> DecodeResult<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &str) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &str) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn i64(&mut self, what: &str) -> DecodeResult<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    pub fn bytes(&mut self, what: &str) -> DecodeResult<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    pub fn txn(&mut self) -> DecodeResult<TxnId> {
        Ok(TxnId {
            ts: self.u64("txn ts")?,
            id: self.u64("txn id")?,
        })
    }

    pub fn value(&mut self) -> DecodeResult<Value> {
        match self.u8("value tag")? {
            0 => Ok(Value::Null),
            1 => Ok(Value::Int(self.i64("int")?)),
            2 => {
                let units = self.i64("decimal units")?;
                let scale = self.u8("decimal scale")?;
                if scale > Decimal::MAX_SCALE {
                    return Err(DecodeError(format!("decimal scale {scale} out of range")));
                }
                Ok(Value::Decimal(Decimal::new(units, scale)))
            }
            3 => {
                let b = self.bytes("string")?;
                let s = std::str::from_utf8(b)
                    .map_err(|e| DecodeError(format!("string is not utf-8: {e}")))?;
                Ok(Value::Str(Arc::from(s)))
            }
            4 => Ok(Value::Timestamp(self.i64("timestamp")?)),
            t => Err(DecodeError(format!("unknown value tag {t}"))),
        }
    }

    pub fn row(&mut self) -> DecodeResult<Row> {
        let n = self.u16("row arity")? as usize;
        let mut row = Vec::with_capacity(n);
        for _ in 0..n {
            row.push(self.value()?);
        }
        Ok(row)
    }

    pub fn key(&mut self) -> DecodeResult<Key> {
        self.key_with(false)
    }

    /// A lock interval's bound: a key whose values may include
    /// `Value::Max` (a prefix's upper end).
    pub fn bound_key(&mut self) -> DecodeResult<Key> {
        self.key_with(true)
    }

    fn key_with(&mut self, max: bool) -> DecodeResult<Key> {
        let n = self.u16("key arity")? as usize;
        let mut vs = Vec::with_capacity(n);
        for _ in 0..n {
            if max && self.buf.get(self.pos) == Some(&255) {
                self.u8("value tag")?;
                vs.push(Value::Max);
            } else {
                vs.push(self.value()?);
            }
        }
        Ok(Key::new(vs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let row: Row = vec![
            Value::Null,
            Value::Int(-7),
            Value::Decimal(Decimal::new(12345, 2)),
            Value::str("héllo"),
            Value::Timestamp(1_700_000_000_000_000),
        ];
        let mut buf = Vec::new();
        put_values(&mut buf, &row);
        put_txn(&mut buf, TxnId { ts: 3, id: 9 });
        let mut d = Decoder::new(&buf);
        assert_eq!(d.row(), Ok(row));
        assert_eq!(d.txn(), Ok(TxnId { ts: 3, id: 9 }));
        assert!(d.is_empty());
    }

    #[test]
    fn garbage_is_an_error() {
        for bytes in [
            &[9u8][..],
            &[3, 255, 255, 255, 255],
            &[2, 1, 2],
            &[3, 2, 0, 0, 0, 0xff, 0xfe],
        ] {
            assert!(Decoder::new(bytes).value().is_err(), "{bytes:?}");
        }
    }
}
