//! Values, rows and keys.
//!
//! `Value` has a total order so that keys sort the same way everywhere: in
//! storage, in the lock table and in range predicates. Integers and decimals
//! compare numerically with each other; otherwise values order by kind
//! (`Null < numbers < strings < timestamps`), which only matters for
//! malformed mixes that the type checker already rejects.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Fixed-point decimal: `units / 10^scale`. Money columns are
/// `DECIMAL(p, 2)`, so arithmetic is exact.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct Decimal {
    pub units: i64,
    pub scale: u8,
}

const POW10: [i64; 19] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
];

impl Decimal {
    pub const MAX_SCALE: u8 = 18;
    /// The most digits a DECIMAL column holds: an i64 holds any 18.
    pub const MAX_PRECISION: u8 = 18;

    pub fn new(units: i64, scale: u8) -> Self {
        debug_assert!(scale <= Self::MAX_SCALE);
        Decimal { units, scale }
    }

    /// Units at a larger (or equal) scale, or `None` on overflow.
    pub fn units_at(self, scale: u8) -> Option<i64> {
        if scale >= self.scale {
            self.units
                .checked_mul(*POW10.get((scale - self.scale) as usize)?)
        } else {
            // Rounds toward zero; callers that narrow a scale decide whether
            // that is acceptable (casting a parameter to a column's scale).
            Some(self.units / POW10[(self.scale - scale) as usize])
        }
    }

    pub fn checked_add(self, other: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(other.scale);
        Some(Decimal::new(
            self.units_at(scale)?.checked_add(other.units_at(scale)?)?,
            scale,
        ))
    }

    pub fn checked_sub(self, other: Decimal) -> Option<Decimal> {
        self.checked_add(Decimal::new(other.units.checked_neg()?, other.scale))
    }

    /// The product at the larger of the two scales, rounded half away
    /// from zero (-0.07 * 0.50 = -0.0350 is -0.04), as PostgreSQL rounds a
    /// numeric into a column of that scale.
    pub fn checked_mul(self, other: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(other.scale);
        let wide = (self.units as i128) * (other.units as i128);
        // The exact product has scale self.scale + other.scale; bring it
        // to `scale`. Both scales are at most 18, so `drop` is too and
        // 10^drop fits an i128; |wide| < 2^126, so adding half of it
        // cannot overflow.
        let drop = (self.scale + other.scale - scale) as u32;
        let div = 10i128.pow(drop);
        let half = div / 2;
        let v = if wide >= 0 {
            (wide + half) / div
        } else {
            (wide - half) / div
        };
        Some(Decimal::new(i64::try_from(v).ok()?, scale))
    }

    fn cmp_num(self, other: Decimal) -> Ordering {
        let scale = self.scale.max(other.scale);
        match (self.units_at(scale), other.units_at(scale)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Overflow at the common scale: compare as floats, which is exact
            // enough to order values this far apart.
            _ => self.to_f64().total_cmp(&other.to_f64()),
        }
    }

    pub fn to_f64(self) -> f64 {
        self.units as f64 / POW10[self.scale as usize] as f64
    }

    /// Parses `-12.345` style literals.
    pub fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (neg, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int, frac) = match digits.split_once('.') {
            Some((i, f)) => (i, f),
            None => (digits, ""),
        };
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > Self::MAX_SCALE as usize
        {
            return None;
        }
        let mut units: i64 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            units = units.checked_mul(10)?.checked_add((b - b'0') as i64)?;
        }
        Some(Decimal::new(
            if neg { -units } else { units },
            frac.len() as u8,
        ))
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.units);
        }
        let p = POW10[self.scale as usize];
        let sign = if self.units < 0 { "-" } else { "" };
        let abs = self.units.unsigned_abs();
        write!(
            f,
            "{sign}{}.{:0width$}",
            abs / p as u64,
            abs % p as u64,
            width = self.scale as usize
        )
    }
}

impl fmt::Debug for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A column value.
#[derive(Clone, Serialize, Deserialize)]
pub enum Value {
    Null,
    Int(i64),
    Decimal(Decimal),
    Str(Arc<str>),
    /// Microseconds since the Unix epoch.
    Timestamp(i64),
    /// A sentinel greater than every other value. It expresses the upper
    /// bound of a key prefix (`(w, d, MAX)` is above every key starting with
    /// `(w, d)`), in ranges and range locks. It is never stored: type checks
    /// reject it.
    Max,
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "INT",
            Value::Decimal(_) => "DECIMAL",
            Value::Str(_) => "STRING",
            Value::Timestamp(_) => "TIMESTAMP",
            Value::Max => "MAX",
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_decimal(&self) -> Option<Decimal> {
        match self {
            Value::Decimal(d) => Some(*d),
            Value::Int(v) => Some(Decimal::new(*v, 0)),
            _ => None,
        }
    }

    /// A numeric value as f64, for reports; `None` for non-numbers.
    pub fn to_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Decimal(d) => Some(d.to_f64()),
            _ => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Int(_) | Value::Decimal(_) => 1,
            Value::Str(_) => 2,
            Value::Timestamp(_) => 3,
            Value::Max => 255,
        }
    }

    /// A stable hash used by partitioning functions. Stable across processes
    /// and versions (it is part of where data lives), so it is written out
    /// here rather than taken from `std`'s randomized hasher.
    pub fn stable_hash(&self) -> u64 {
        fn mix(mut x: u64) -> u64 {
            // splitmix64 finalizer
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        }
        match self {
            Value::Null => 0,
            Value::Int(v) => mix(*v as u64),
            Value::Decimal(d) => mix(d.units as u64 ^ ((d.scale as u64) << 56)),
            Value::Timestamp(t) => mix(*t as u64 ^ 0x5555),
            Value::Max => u64::MAX,
            Value::Str(s) => {
                // FNV-1a
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in s.bytes() {
                    h ^= b as u64;
                    h = h.wrapping_mul(0x100_0000_01b3);
                }
                mix(h)
            }
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Str(a), Value::Str(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            (Value::Decimal(a), Value::Decimal(b)) => a.cmp_num(*b),
            (Value::Int(a), Value::Decimal(b)) => Decimal::new(*a, 0).cmp_num(*b),
            (Value::Decimal(a), Value::Int(b)) => a.cmp_num(Decimal::new(*b, 0)),
            (Value::Null, Value::Null) | (Value::Max, Value::Max) => Ordering::Equal,
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must agree with Eq: Int(1) == Decimal(1.00), so numbers hash by
        // their normalized form.
        match self {
            Value::Null => 0u8.hash(state),
            Value::Int(v) => (1u8, *v, 0u8).hash(state),
            Value::Decimal(d) => {
                let mut units = d.units;
                let mut scale = d.scale;
                while scale > 0 && units % 10 == 0 {
                    units /= 10;
                    scale -= 1;
                }
                (1u8, units, scale).hash(state)
            }
            Value::Str(s) => (2u8, s).hash(state),
            Value::Timestamp(t) => (3u8, *t).hash(state),
            Value::Max => 255u8.hash(state),
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Decimal(d) => write!(f, "{d}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Timestamp(t) => write!(f, "ts:{t}"),
            Value::Max => write!(f, "MAX"),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write!(f, "{s}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::str(v)
    }
}

impl From<Decimal> for Value {
    fn from(v: Decimal) -> Self {
        Value::Decimal(v)
    }
}

/// A row: one value per column, in the table's column order.
pub type Row = Vec<Value>;

/// A key: the values of an index's columns (primary key or secondary index),
/// in index order. Most keys have at most four columns, so they live inline.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Key(pub SmallVec<[Value; 4]>);

impl Key {
    pub fn new(values: impl IntoIterator<Item = Value>) -> Key {
        Key(values.into_iter().collect())
    }

    pub fn values(&self) -> &[Value] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The smallest key above every key that starts with `prefix`, for use
    /// as an inclusive upper bound: `prefix` followed by `Value::Max`.
    pub fn prefix_upper(prefix: &[Value]) -> Key {
        Key(prefix
            .iter()
            .cloned()
            .chain(std::iter::once(Value::Max))
            .collect())
    }

    /// True if `prefix` is a prefix of this key.
    pub fn starts_with(&self, prefix: &[Value]) -> bool {
        self.0.len() >= prefix.len() && self.0[..prefix.len()] == *prefix
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{v:?}")?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_parse_and_display_round_trip() {
        for s in ["0", "1.50", "-0.05", "12345.678"] {
            let d = Decimal::parse(s).expect(s);
            assert_eq!(d.to_string(), s);
        }
        assert!(Decimal::parse("1.2.3").is_none());
        assert!(Decimal::parse("abc").is_none());
        assert!(Decimal::parse("").is_none());
    }

    #[test]
    fn numbers_compare_across_int_and_decimal() {
        let one = Value::Int(1);
        let one_dec = Value::Decimal(Decimal::new(100, 2));
        assert_eq!(one, one_dec);
        assert!(Value::Decimal(Decimal::new(150, 2)) > one);
        assert!(Value::Null < one);
        assert!(one < Value::str("a"));
        let k = Key::new([Value::Int(1), Value::Int(2), Value::str("z")]);
        assert!(k < Key::prefix_upper(&[Value::Int(1), Value::Int(2)]));
        assert!(k > Key::new([Value::Int(1), Value::Int(2)]));
        assert!(
            Key::new([Value::Int(1), Value::Int(3)])
                > Key::prefix_upper(&[Value::Int(1), Value::Int(2)])
        );
    }

    #[test]
    fn decimal_arithmetic_is_exact() {
        let a = Decimal::parse("10.05").unwrap();
        let b = Decimal::parse("0.1").unwrap();
        assert_eq!(a.checked_add(b).unwrap().to_string(), "10.15");
        assert_eq!(a.checked_sub(b).unwrap().to_string(), "9.95");
        assert_eq!(
            a.checked_mul(Decimal::new(2, 0)).unwrap().to_string(),
            "20.10"
        );
        assert!(Decimal::new(i64::MAX, 0)
            .checked_add(Decimal::new(1, 0))
            .is_none());
    }

    #[test]
    fn decimal_products_round_half_away_from_zero() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        let mul = |a: &str, b: &str| d(a).checked_mul(d(b)).unwrap().to_string();
        // -0.0350 at scale 2: PostgreSQL's numeric(p,2) stores -0.04.
        assert_eq!(mul("-0.07", "0.50"), "-0.04");
        assert_eq!(mul("0.07", "0.50"), "0.04");
        assert_eq!(mul("0.07", "-0.50"), "-0.04");
        // Below half rounds toward zero, above half away from it.
        assert_eq!(mul("0.0825", "1.0825"), "0.0893");
        assert_eq!(mul("-0.0825", "1.0825"), "-0.0893");
        assert_eq!(mul("0.13", "0.50"), "0.07");
        assert_eq!(mul("0.11", "0.30"), "0.03");
        assert_eq!(mul("-0.11", "0.30"), "-0.03");
        // Exact products are untouched, at the larger scale.
        assert_eq!(mul("4.50", "-2"), "-9.00");
        assert_eq!(mul("0.000000000000000001", "0.5"), "0.000000000000000001");
        assert!(Decimal::new(i64::MAX, 0)
            .checked_mul(Decimal::new(2, 0))
            .is_none());
    }

    #[test]
    fn stable_hash_is_stable() {
        assert_eq!(Value::Int(7).stable_hash(), Value::Int(7).stable_hash());
        assert_ne!(Value::Int(7).stable_hash(), Value::Int(8).stable_hash());
        assert_eq!(Value::str("x").stable_hash(), Value::str("x").stable_hash());
    }
}
