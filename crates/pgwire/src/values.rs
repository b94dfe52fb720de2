//! brine's values on the wire: the PostgreSQL type of each brine type, a
//! value's text and binary encodings in result rows, and parameters
//! decoded back into brine values.
//!
//! ```text
//!  DataType::Int        <-> int8       (int2, int4 accepted as parameters)
//!  DataType::Decimal    <-> numeric    (float4, float8 accepted as parameters)
//!  DataType::Str        <-> text, or varchar when it has a maximum length
//!  DataType::Timestamp  <-> timestamp  (microseconds, UTC)
//! ```
//!
//! Hot path: every result value and every parameter passes through here,
//! once per row and column; encoding writes into the row's buffer without
//! allocating for integers and strings.

use brine_core::{timestamp, DataType, Decimal, Value};
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;

use crate::sqlstate::SqlError;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// The PostgreSQL type of a brine column type.
pub fn pg_type(ty: &DataType) -> Type {
    match ty {
        DataType::Int => Type::INT8,
        DataType::Decimal { .. } => Type::NUMERIC,
        DataType::Str { max_len: Some(_) } => Type::VARCHAR,
        DataType::Str { max_len: None } => Type::TEXT,
        DataType::Timestamp => Type::TIMESTAMP,
    }
}

/// The PostgreSQL type of a value whose column is not known (a
/// procedure's results): by its kind; NULL is text.
pub fn pg_type_of_value(v: &Value) -> Type {
    match v {
        Value::Int(_) => Type::INT8,
        Value::Decimal(_) => Type::NUMERIC,
        Value::Timestamp(_) => Type::TIMESTAMP,
        Value::Null | Value::Str(_) | Value::Max => Type::TEXT,
    }
}

/// Appends one field of a `DataRow`: its length, then `v` encoded as
/// `ty` in text or binary format (NULL: length -1 and nothing else).
pub fn encode_field(
    buf: &mut BytesMut,
    v: &Value,
    ty: &Type,
    binary: bool,
) -> Result<(), SqlError> {
    if v.is_null() {
        buf.put_i32(-1);
        return Ok(());
    }
    let at = buf.len();
    buf.put_i32(0);
    if binary {
        encode_binary(buf, v, ty)?;
    } else {
        encode_text(buf, v);
    }
    let len = i32::try_from(buf.len() - at - 4)
        .map_err(|_| SqlError::new("54000", "a value is larger than 2 GiB"))?;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// PostgreSQL's text output of a value (NULL excluded).
pub fn encode_text(buf: &mut BytesMut, v: &Value) {
    use std::fmt::Write;
    struct Out<'a>(&'a mut BytesMut);
    impl Write for Out<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.put_slice(s.as_bytes());
            Ok(())
        }
    }
    let mut out = Out(buf);
    // Writing into a buffer cannot fail.
    let _ = match v {
        Value::Null => Ok(()),
        Value::Int(i) => write!(out, "{i}"),
        Value::Decimal(d) => write!(out, "{d}"),
        Value::Str(s) => out.write_str(s),
        Value::Timestamp(us) => write!(out, "{}", timestamp::Text(*us)),
        Value::Max => out.write_str("MAX"),
    };
}

fn encode_binary(buf: &mut BytesMut, v: &Value, ty: &Type) -> Result<(), SqlError> {
    let mismatch = || {
        SqlError::new(
            "XX000",
            format!("a {} value cannot be sent as {}", v.kind(), ty.name()),
        )
    };
    match (v, ty) {
        (Value::Int(i), t) if *t == Type::INT8 => buf.put_i64(*i),
        (Value::Int(i), t) if *t == Type::NUMERIC => encode_numeric(buf, Decimal::new(*i, 0)),
        (Value::Decimal(d), t) if *t == Type::NUMERIC => encode_numeric(buf, *d),
        (Value::Decimal(d), t) if *t == Type::INT8 && d.scale == 0 => buf.put_i64(d.units),
        (Value::Timestamp(us), t) if *t == Type::TIMESTAMP => {
            buf.put_i64(us.checked_sub(PG_EPOCH_OFFSET_US).ok_or_else(mismatch)?)
        }
        (Value::Str(s), t) if is_textual(t) => buf.put_slice(s.as_bytes()),
        // Text and unknown columns (catalog answers, NULL-typed results)
        // carry any value as its text.
        (v, t) if is_textual(t) => encode_text(buf, v),
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn is_textual(t: &Type) -> bool {
    *t == Type::TEXT
        || *t == Type::VARCHAR
        || *t == Type::BPCHAR
        || *t == Type::NAME
        || *t == Type::UNKNOWN
}

/// PostgreSQL's binary `numeric`: digit count, weight of the first
/// base-10000 digit, sign, display scale, then the digits.
fn encode_numeric(buf: &mut BytesMut, d: Decimal) {
    let scale = u32::from(d.scale);
    let abs = d.units.unsigned_abs();
    let p = 10u64.pow(scale);
    let (int, frac) = (abs / p, abs % p);
    // Base-10000 digits of the integer part, most significant first.
    let mut int_digits: Vec<i16> = Vec::new();
    let mut n = int;
    while n > 0 {
        int_digits.push((n % 10_000) as i16);
        n /= 10_000;
    }
    int_digits.reverse();
    // The fraction, padded right to a multiple of four decimal digits.
    let frac_groups = scale.div_ceil(4);
    let mut frac_scaled = u128::from(frac) * 10u128.pow(frac_groups * 4 - scale);
    let mut frac_digits = vec![0i16; frac_groups as usize];
    for slot in frac_digits.iter_mut().rev() {
        *slot = (frac_scaled % 10_000) as i16;
        frac_scaled /= 10_000;
    }
    let mut weight = int_digits.len() as i16 - 1;
    let mut digits: Vec<i16> = int_digits.into_iter().chain(frac_digits).collect();
    // Leading zero digits move the weight; trailing ones are dropped.
    let leading = digits.iter().take_while(|&&g| g == 0).count();
    digits.drain(..leading);
    weight -= leading as i16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    buf.put_i16(digits.len() as i16);
    buf.put_i16(weight);
    buf.put_u16(if d.units < 0 { 0x4000 } else { 0 });
    buf.put_u16(d.scale.into());
    for g in digits {
        buf.put_i16(g);
    }
}

/// Reads a binary `numeric` parameter.
fn decode_numeric(b: &[u8]) -> Result<Decimal, SqlError> {
    let bad = || SqlError::new("22P03", "malformed binary numeric parameter");
    let word = |i: usize| -> Result<u16, SqlError> {
        b.get(i * 2..i * 2 + 2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]))
            .ok_or_else(bad)
    };
    let ndigits = word(0)? as usize;
    let weight = word(1)? as i16 as i32;
    let sign = word(2)?;
    let dscale = word(3)?;
    if b.len() != 8 + 2 * ndigits {
        return Err(bad());
    }
    if sign == 0xC000 || sign & !0x4000 != 0 {
        return Err(SqlError::new(
            "22P03",
            "NaN and infinite numerics are not brine values",
        ));
    }
    if dscale > u16::from(Decimal::MAX_SCALE) {
        return Err(SqlError::new(
            "22003",
            format!(
                "numeric parameter with {dscale} fractional digits (at most {})",
                Decimal::MAX_SCALE
            ),
        ));
    }
    let overflow = || SqlError::new("22003", "numeric parameter out of brine's range");
    let mut units: i128 = 0;
    for i in 0..ndigits {
        let g = i128::from(word(4 + i)?);
        if g >= 10_000 {
            return Err(bad());
        }
        // The digit's place in units of 10^-dscale.
        let exp = 4 * (weight - i as i32) + i32::from(dscale);
        let term = if exp >= 0 {
            10i128
                .checked_pow(exp as u32)
                .and_then(|p| g.checked_mul(p))
                .ok_or_else(overflow)?
        } else {
            // Digits past the display scale: PostgreSQL sends none, but a
            // hand-made message might; they are cut as a cast would.
            g / 10i128.checked_pow((-exp) as u32).unwrap_or(i128::MAX)
        };
        units = units.checked_add(term).ok_or_else(overflow)?;
    }
    if sign == 0x4000 {
        units = -units;
    }
    let units = i64::try_from(units).map_err(|_| overflow())?;
    Ok(Decimal::new(units, dscale as u8))
}

/// What a parameter should become: a column's type, or anything (a
/// procedure's argument, read the way `brine call` reads its arguments).
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Column(&'a DataType),
    Any,
}

/// Decodes one parameter of a Bind message. `sent` is the type the client
/// declared (None: it left the choice to the server), `binary` its format.
pub fn decode_param(
    bytes: Option<&[u8]>,
    binary: bool,
    sent: Option<&Type>,
    target: Target<'_>,
) -> Result<Value, SqlError> {
    let Some(bytes) = bytes else {
        return Ok(Value::Null);
    };
    if binary {
        decode_binary(bytes, sent, target)
    } else {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| SqlError::new("22021", "a text parameter is not valid UTF-8"))?;
        decode_text(text, sent, target)
    }
}

fn decode_text(s: &str, sent: Option<&Type>, target: Target<'_>) -> Result<Value, SqlError> {
    let as_int = |s: &str| {
        s.trim().parse::<i64>().map(Value::Int).map_err(|_| {
            SqlError::new(
                "22P02",
                format!("invalid input syntax for type bigint: \"{s}\""),
            )
        })
    };
    let as_decimal = |s: &str| {
        Decimal::parse(s).map(Value::Decimal).ok_or_else(|| {
            SqlError::new(
                "22P02",
                format!("invalid input syntax for type numeric: \"{s}\""),
            )
        })
    };
    match target {
        Target::Column(DataType::Int) => as_int(s),
        Target::Column(DataType::Decimal { .. }) => as_decimal(s),
        Target::Column(DataType::Str { .. }) => Ok(Value::str(s)),
        Target::Column(DataType::Timestamp) => parse_timestamp(s).map(Value::Timestamp),
        Target::Any => match sent {
            Some(t) if *t == Type::INT2 || *t == Type::INT4 || *t == Type::INT8 => as_int(s),
            Some(t) if *t == Type::NUMERIC || *t == Type::FLOAT4 || *t == Type::FLOAT8 => {
                as_decimal(s)
            }
            Some(t) if *t == Type::TIMESTAMP || *t == Type::TIMESTAMPTZ => {
                parse_timestamp(s).map(Value::Timestamp)
            }
            Some(t) if is_textual(t) => Ok(Value::str(s)),
            _ => Ok(guess(s)),
        },
    }
}

/// An untyped argument as `brine call` reads it: an integer, a decimal
/// (with a point), or text.
pub fn guess(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return Value::Int(i);
    }
    if s.contains('.') {
        if let Some(d) = Decimal::parse(s) {
            return Value::Decimal(d);
        }
    }
    Value::str(s)
}

fn decode_binary(b: &[u8], sent: Option<&Type>, target: Target<'_>) -> Result<Value, SqlError> {
    let Some(sent) = sent else {
        return Err(SqlError::new(
            "42P18",
            "a binary parameter needs its type declared in Parse (brine cannot tell its type otherwise)",
        ));
    };
    let wrong_len = || {
        SqlError::new(
            "22P03",
            format!("binary {} parameter of {} bytes", sent.name(), b.len()),
        )
    };
    let fixed = |n: usize| -> Result<&[u8], SqlError> {
        if b.len() == n {
            Ok(b)
        } else {
            Err(wrong_len())
        }
    };
    let v = if *sent == Type::INT2 {
        let w = fixed(2)?;
        Value::Int(i16::from_be_bytes([w[0], w[1]]).into())
    } else if *sent == Type::INT4 {
        let w = fixed(4)?;
        Value::Int(i32::from_be_bytes([w[0], w[1], w[2], w[3]]).into())
    } else if *sent == Type::INT8 {
        let w: [u8; 8] = fixed(8)?.try_into().map_err(|_| wrong_len())?;
        Value::Int(i64::from_be_bytes(w))
    } else if *sent == Type::NUMERIC {
        Value::Decimal(decode_numeric(b)?)
    } else if *sent == Type::FLOAT4 || *sent == Type::FLOAT8 {
        let f = if *sent == Type::FLOAT4 {
            let w: [u8; 4] = fixed(4)?.try_into().map_err(|_| wrong_len())?;
            f64::from(f32::from_be_bytes(w))
        } else {
            let w: [u8; 8] = fixed(8)?.try_into().map_err(|_| wrong_len())?;
            f64::from_be_bytes(w)
        };
        let d = Decimal::parse(&format!("{f}")).ok_or_else(|| {
            SqlError::new(
                "22003",
                format!("{f} is not a brine decimal (at most 18 digits)"),
            )
        })?;
        Value::Decimal(d)
    } else if *sent == Type::TIMESTAMP || *sent == Type::TIMESTAMPTZ {
        let w: [u8; 8] = fixed(8)?.try_into().map_err(|_| wrong_len())?;
        let us = i64::from_be_bytes(w)
            .checked_add(PG_EPOCH_OFFSET_US)
            .ok_or_else(wrong_len)?;
        Value::Timestamp(us)
    } else if is_textual(sent) {
        let s = std::str::from_utf8(b)
            .map_err(|_| SqlError::new("22021", "a text parameter is not valid UTF-8"))?;
        // Text sent for a typed column is read as that type's input.
        return decode_text(s, Some(sent), target);
    } else {
        return Err(SqlError::new(
            "42804",
            format!("brine has no values of type {}", sent.name()),
        ));
    };
    Ok(v)
}

/// A timestamp's text (see `brine_core::timestamp::parse`, the one reader
/// of it the planner shares) as microseconds since the Unix epoch;
/// anything else is PostgreSQL's invalid_datetime_format.
pub fn parse_timestamp(s: &str) -> Result<i64, SqlError> {
    timestamp::parse(s).ok_or_else(|| {
        SqlError::new(
            "22007",
            format!("invalid input syntax for type timestamp: \"{s}\""),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_roundtrip(units: i64, scale: u8) {
        let d = Decimal::new(units, scale);
        let mut buf = BytesMut::new();
        encode_numeric(&mut buf, d);
        let back = decode_numeric(&buf).expect("decodes");
        assert_eq!((back.units, back.scale), (units, scale), "{d}");
    }

    #[test]
    fn numeric_binary_roundtrips() {
        for (u, s) in [
            (0, 0),
            (0, 2),
            (1, 0),
            (-1, 0),
            (12345, 2),
            (-12345, 2),
            (10_000, 0),
            (100_000_000, 4),
            (5, 5),
            (i64::MAX, 0),
            (i64::MIN + 1, 18),
            (123_456_789, 9),
        ] {
            numeric_roundtrip(u, s);
        }
    }

    #[test]
    fn numeric_binary_matches_postgres_layout() {
        // 123.45: digits [123, 4500], weight 0, dscale 2.
        let mut buf = BytesMut::new();
        encode_numeric(&mut buf, Decimal::new(12345, 2));
        assert_eq!(
            &buf[..],
            &[0, 2, 0, 0, 0, 0, 0, 2, 0, 123, 0x11, 0x94][..],
            "ndigits 2, weight 0, sign +, dscale 2, 123, 4500"
        );
    }

    #[test]
    fn timestamps_roundtrip_through_text() {
        for s in [
            "1970-01-01 00:00:00",
            "2000-01-01 00:00:00",
            "2024-02-29 23:59:59.5",
            "1969-12-31 23:59:59.000001",
        ] {
            let us = parse_timestamp(s).expect(s);
            assert_eq!(timestamp::Text(us).to_string(), s);
        }
        assert_eq!(parse_timestamp("2000-01-01").unwrap(), PG_EPOCH_OFFSET_US);
        assert!(parse_timestamp("2000-13-01").is_err());
    }

    #[test]
    fn text_parameters_take_their_column_type() {
        let int = DataType::Int;
        assert_eq!(
            decode_param(Some(b"42"), false, None, Target::Column(&int)).unwrap(),
            Value::Int(42)
        );
        let e = decode_param(Some(b"x"), false, None, Target::Column(&int)).unwrap_err();
        assert_eq!(e.code, "22P02");
        assert_eq!(guess("10.50"), Value::Decimal(Decimal::new(1050, 2)));
        assert_eq!(guess("abc"), Value::str("abc"));
    }

    #[test]
    fn binary_parameters_follow_the_declared_type() {
        let int = DataType::Int;
        let v = decode_param(
            Some(&7i32.to_be_bytes()),
            true,
            Some(&Type::INT4),
            Target::Column(&int),
        )
        .unwrap();
        assert_eq!(v, Value::Int(7));
        let e = decode_param(Some(&[1, 2, 3]), true, Some(&Type::INT8), Target::Any).unwrap_err();
        assert_eq!(e.code, "22P03");
        let e = decode_param(Some(&[1]), true, Some(&Type::BOOL), Target::Any).unwrap_err();
        assert_eq!(e.code, "42804");
    }
}
