//! TPC-C's random functions (clauses 2.1.5, 2.1.6, 4.3.2): uniform
//! integers, NURand, the last-name syllables, a-strings and n-strings, and
//! the run-time constants C.

use std::sync::Arc;

use brine_core::{Decimal, Value};
use rand::Rng;

/// The ten syllables of clause 4.3.2.3, indexed by digit.
pub const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// `A` of NURand for C_LAST, C_ID and OL_I_ID (clause 2.1.6).
pub const A_C_LAST: i64 = 255;
pub const A_C_ID: i64 = 1023;
pub const A_OL_I_ID: i64 = 8191;

/// The constants C of NURand (clause 2.1.6): one per field, chosen at
/// random once per run. `c_last_load` shaped the loaded last names;
/// `c_last_run` is used by the clients and differs from it as 2.1.6.1
/// requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Constants {
    pub c_last_load: i64,
    pub c_last_run: i64,
    pub c_id: i64,
    pub ol_i_id: i64,
}

impl Constants {
    /// Draws the constants: C_LAST at run time differs from the load value
    /// by a delta in 65..=119 other than 96 and 112 (clause 2.1.6.1).
    pub fn draw(rng: &mut impl Rng) -> Constants {
        let c_last_load = rng.gen_range(0..=A_C_LAST);
        let c_last_run = loop {
            let c = rng.gen_range(0..=A_C_LAST);
            if delta_is_valid(c_last_load, c) {
                break c;
            }
        };
        Constants {
            c_last_load,
            c_last_run,
            c_id: rng.gen_range(0..=A_C_ID),
            ol_i_id: rng.gen_range(0..=A_OL_I_ID),
        }
    }
}

/// Clause 2.1.6.1's rule for the C_LAST constants of load and run.
pub fn delta_is_valid(c_load: i64, c_run: i64) -> bool {
    let delta = (c_load - c_run).abs();
    (65..=119).contains(&delta) && delta != 96 && delta != 112
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
pub fn nurand(rng: &mut impl Rng, a: i64, c: i64, x: i64, y: i64) -> i64 {
    debug_assert!(x <= y);
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
}

/// The last name of number `n` in 0..=999: three syllables, one per digit.
pub fn last_name(n: i64) -> String {
    debug_assert!((0..=999).contains(&n));
    let n = n.clamp(0, 999) as usize;
    let mut s = String::with_capacity(15);
    s.push_str(SYLLABLES[n / 100]);
    s.push_str(SYLLABLES[n / 10 % 10]);
    s.push_str(SYLLABLES[n % 10]);
    s
}

const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A random alphanumeric string of length uniform in `min..=max` (an
/// "a-string" of clause 4.3.2.2).
pub fn astring(rng: &mut impl Rng, min: usize, max: usize) -> String {
    let len = rng.gen_range(min..=max);
    (0..len)
        .map(|_| ALNUM[rng.gen_range(0..ALNUM.len())] as char)
        .collect()
}

/// A random string of digits of length uniform in `min..=max`.
pub fn nstring(rng: &mut impl Rng, min: usize, max: usize) -> String {
    let len = rng.gen_range(min..=max);
    (0..len)
        .map(|_| char::from(b'0' + rng.gen_range(0..10u8)))
        .collect()
}

/// A zip code: four random digits then "11111" (clause 4.3.2.7).
pub fn zip(rng: &mut impl Rng) -> String {
    let mut s = nstring(rng, 4, 4);
    s.push_str("11111");
    s
}

/// I_DATA / S_DATA: an a-string of 26..=50 characters; in 10% of rows
/// "ORIGINAL" is written at a random position (clause 4.3.3.1).
pub fn data_with_original(rng: &mut impl Rng) -> String {
    let mut s = astring(rng, 26, 50);
    if rng.gen_range(0..10) == 0 {
        let at = rng.gen_range(0..=s.len() - 8);
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

/// A value string.
pub fn vstr(s: String) -> Value {
    Value::Str(Arc::from(s))
}

/// A decimal of `scale` uniform between `lo` and `hi` units inclusive.
pub fn decimal(rng: &mut impl Rng, lo: i64, hi: i64, scale: u8) -> Value {
    Value::Decimal(Decimal::new(rng.gen_range(lo..=hi), scale))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = SmallRng::seed_from_u64(3);
        let c = Constants::draw(&mut rng);
        let mut hits = vec![0u32; 3001];
        for _ in 0..100_000 {
            let v = nurand(&mut rng, A_C_ID, c.c_id, 1, 3000);
            assert!((1..=3000).contains(&v), "{v}");
            hits[v as usize] += 1;
        }
        let max = hits.iter().copied().max().unwrap_or(0);
        // Uniform would put ~33 on each; NURand concentrates.
        assert!(max > 100, "not skewed: max {max}");
        for _ in 0..10_000 {
            let v = nurand(&mut rng, A_OL_I_ID, c.ol_i_id, 1, 100_000);
            assert!((1..=100_000).contains(&v));
            let v = nurand(&mut rng, A_C_LAST, c.c_last_run, 0, 999);
            assert!((0..=999).contains(&v));
            // Reduced scales use a smaller range with the same A.
            let v = nurand(&mut rng, A_OL_I_ID, c.ol_i_id, 1, 1000);
            assert!((1..=1000).contains(&v));
        }
    }

    #[test]
    fn run_constant_respects_the_delta_rule() {
        for seed in 0..200 {
            let c = Constants::draw(&mut SmallRng::seed_from_u64(seed));
            assert!(delta_is_valid(c.c_last_load, c.c_last_run), "{c:?}");
            assert!((0..=A_C_LAST).contains(&c.c_last_run));
        }
        assert!(!delta_is_valid(0, 96));
        assert!(!delta_is_valid(200, 88));
        assert!(delta_is_valid(10, 75));
    }

    #[test]
    fn last_names_follow_the_syllables() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn strings_have_their_lengths() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut originals = 0;
        for _ in 0..1000 {
            let s = astring(&mut rng, 8, 16);
            assert!((8..=16).contains(&s.len()));
            assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(zip(&mut rng).len(), 9);
            let d = data_with_original(&mut rng);
            assert!((26..=50).contains(&d.len()));
            originals += usize::from(d.contains("ORIGINAL"));
        }
        assert!((50..=150).contains(&originals), "{originals}");
    }
}
