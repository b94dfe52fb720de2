//! The Bloom filter a TSO ring entry keeps of its transaction's write set
//! (seed 003 section 4.3): compact, and a membership test may answer yes
//! for a key that was not written (a false positive, which aborts a
//! transaction spuriously; the TSO counts them).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// A fixed-size Bloom filter over `u64` words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    bits: Vec<u64>,
    hashes: u32,
}

impl Bloom {
    /// A filter of `bits` bits (rounded up to a multiple of 64, at least
    /// 64) probed `hashes` times per key.
    pub fn new(bits: usize, hashes: u32) -> Bloom {
        Bloom {
            bits: vec![0; bits.div_ceil(64).max(1)],
            hashes: hashes.max(1),
        }
    }

    /// The filter's probes for `key`: double hashing over two seeded
    /// hashes (`DefaultHasher` is SipHash with fixed keys, so the probes
    /// are the same in every process).
    fn probes<K: Hash>(&self, key: &K) -> impl Iterator<Item = usize> + '_ {
        let hash = |seed: u64| {
            let mut h = DefaultHasher::new();
            seed.hash(&mut h);
            key.hash(&mut h);
            h.finish()
        };
        let (a, b) = (hash(0x9E37_79B9), hash(0x85EB_CA6B) | 1);
        let n = (self.bits.len() * 64) as u64;
        (0..u64::from(self.hashes)).map(move |i| (a.wrapping_add(i.wrapping_mul(b)) % n) as usize)
    }

    pub fn insert<K: Hash>(&mut self, key: &K) {
        let probes: Vec<usize> = self.probes(key).collect();
        for bit in probes {
            self.bits[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether `key` may have been inserted (never false for one that was).
    pub fn may_contain<K: Hash>(&self, key: &K) -> bool {
        self.probes(key)
            .all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_keys_are_members_and_most_others_are_not() {
        let mut b = Bloom::new(1024, 3);
        for k in 0..50u64 {
            b.insert(&k);
        }
        assert!((0..50u64).all(|k| b.may_contain(&k)));
        let false_positives = (1_000..11_000u64).filter(|k| b.may_contain(k)).count();
        // 50 keys, 1,024 bits, 3 probes: about 0.25% expected.
        assert!(false_positives < 200, "{false_positives} of 10,000");
    }

    #[test]
    fn a_tiny_filter_gives_false_positives() {
        let mut b = Bloom::new(64, 1);
        for k in 0..40u64 {
            b.insert(&k);
        }
        assert!((1_000..2_000u64).any(|k| b.may_contain(&k)));
    }
}
