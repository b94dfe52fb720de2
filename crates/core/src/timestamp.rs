//! TIMESTAMP values in PostgreSQL's text form, both ways.
//!
//! A `Value::Timestamp` is microseconds since the Unix epoch, UTC, in the
//! proleptic Gregorian calendar. Its text is PostgreSQL's ISO output,
//! `YYYY-MM-DD HH:MM:SS[.ffffff]` (fractional digits only when not zero,
//! trailing zeros dropped). The SQL planner reads a quoted literal with
//! [`parse`] and the wire protocol reads text parameters and writes result
//! values with it, so a timestamp reads back as it was written whichever
//! way it came in.

use std::fmt;

pub const US_PER_DAY: i64 = 86_400_000_000;

/// The wall clock as a TIMESTAMP (`now()`): microseconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// `YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]`, optionally with `T` for the space
/// and a `Z`, `+00` or `+00:00` zone (UTC is the only zone brine has), as
/// microseconds since the Unix epoch. `None` if it is not of that form, or
/// names no real time of day (hour 24, minute 60), or is out of range.
/// Seconds may be 60 (a leap second, read as the next minute's first, as
/// PostgreSQL reads it).
pub fn parse(s: &str) -> Option<i64> {
    let t = s.trim();
    let t = t
        .strip_suffix('Z')
        .or_else(|| t.strip_suffix("+00:00"))
        .or_else(|| t.strip_suffix("+00"))
        .unwrap_or(t);
    let (date, time) = match t.split_once([' ', 'T']) {
        Some((d, tm)) => (d, Some(tm)),
        None => (t, None),
    };
    let num = |x: &str| -> Option<i64> {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        x.parse().ok()
    };
    let mut dp = date.splitn(3, '-');
    let (y, m, d) = (num(dp.next()?)?, num(dp.next()?)?, num(dp.next()?)?);
    if !(1..=12).contains(&m) || !(1..=days_in_month(y, m)).contains(&d) {
        return None;
    }
    let mut us = days_from_civil(y, m, d).checked_mul(US_PER_DAY)?;
    if let Some(time) = time {
        let (hms, frac) = match time.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (time, None),
        };
        let mut tp = hms.splitn(3, ':');
        let (h, mi, sec) = (
            num(tp.next()?)?,
            num(tp.next()?)?,
            tp.next().map_or(Some(0), num)?,
        );
        if !(0..24).contains(&h) || !(0..60).contains(&mi) || !(0..=60).contains(&sec) {
            return None;
        }
        let frac_us = match frac {
            Some(f) if f.len() <= 6 => num(f)? * 10i64.pow(6 - f.len() as u32),
            Some(_) => return None,
            None => 0,
        };
        us = us.checked_add(((h * 60 + mi) * 60 + sec) * 1_000_000 + frac_us)?;
    }
    Some(us)
}

/// A timestamp in PostgreSQL's text output (`2024-03-01 12:00:00.5`).
pub struct Text(pub i64);

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(US_PER_DAY);
        let in_day = self.0.rem_euclid(US_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let secs = in_day / 1_000_000;
        let frac = in_day % 1_000_000;
        write!(
            f,
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )?;
        if frac != 0 {
            let digits = format!("{frac:06}");
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        Ok(())
    }
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        for s in [
            "1970-01-01 00:00:00",
            "2000-01-01 00:00:00",
            "2024-02-29 23:59:59.5",
            "1969-12-31 23:59:59.000001",
            "2024-03-01 12:00:00",
        ] {
            let us = parse(s).expect(s);
            assert_eq!(Text(us).to_string(), s);
        }
    }

    #[test]
    fn reads_postgres_input_forms() {
        let noon = 1_709_294_400_000_000;
        assert_eq!(parse("2024-03-01 12:00:00"), Some(noon));
        assert_eq!(parse("2024-03-01T12:00:00Z"), Some(noon));
        assert_eq!(parse("2024-03-01 12:00:00+00:00"), Some(noon));
        assert_eq!(parse("2024-03-01 12:00"), Some(noon));
        assert_eq!(parse(" 2024-03-01 12:00:00.25 "), Some(noon + 250_000));
        assert_eq!(parse("2000-01-01"), Some(946_684_800_000_000));
        assert_eq!(parse("1970-01-01 00:00:00.0015"), Some(1_500));
    }

    #[test]
    fn refuses_what_is_not_a_time() {
        for s in [
            "",
            "2024",
            "2024-13-01",
            "2023-02-29",
            "2024-04-31",
            "2024-03-01 24:00:00",
            "2024-03-01 12:60:00",
            "2024-03-01 12:00:00.1234567",
            "2024-03-01 12:00:00.",
            "2024-03-01 12:+1:00",
            "2024-03-01 12:00:00+01",
            "yesterday",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
    }
}
