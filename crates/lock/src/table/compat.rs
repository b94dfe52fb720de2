//! Lock modes and the compatibility role: which (class, access) pairs of two
//! different transactions may be granted on overlapping targets at once.
//!
//! The lock table never interprets classes itself; it asks a
//! [`Compatibility`] and only that. Protocols that need another matrix plug in
//! their own implementation.

use brine_core::Access;
use std::fmt;

/// The family a lock belongs to. Each protocol picks one per request.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum LockClass {
    /// Plain two-phase-locking ACID lock (also Salt's ACID transactions).
    Acid,
    /// Salt: lock of a running alkaline subtransaction.
    Alkaline,
    /// Salt: what an alkaline lock becomes when its subtransaction commits;
    /// held until the BASE transaction ends.
    Saline,
    /// Callas: nexus lock of the given transaction group.
    Nexus(u32),
    /// Callas: the in-group lock of a running transaction of the given
    /// group under plain 2PL (or of a running piece): shared/exclusive
    /// against every lock except its own group's nexus locks, with which it
    /// shares. At commit it becomes that group's nexus lock.
    Member(u32),
}

impl fmt::Display for LockClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockClass::Acid => write!(f, "acid"),
            LockClass::Alkaline => write!(f, "alkaline"),
            LockClass::Saline => write!(f, "saline"),
            LockClass::Nexus(g) => write!(f, "nexus{g}"),
            LockClass::Member(g) => write!(f, "member{g}"),
        }
    }
}

/// What a lock request asks for: a class and an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode {
    pub class: LockClass,
    pub access: Access,
}

impl Mode {
    pub fn new(class: LockClass, access: Access) -> Mode {
        Mode { class, access }
    }

    /// True if holding `self` makes a request for `other` by the same
    /// transaction on the same target redundant: same class, and an access at
    /// least as strong (`Write` > `RangeRead` > `Read`).
    pub fn covers(self, other: Mode) -> bool {
        fn strength(a: Access) -> u8 {
            match a {
                Access::Read => 0,
                Access::RangeRead => 1,
                Access::Write => 2,
            }
        }
        self.class == other.class && strength(self.access) >= strength(other.access)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let access = match self.access {
            Access::Read => "R",
            Access::RangeRead => "RR",
            Access::Write => "W",
        };
        write!(f, "{}:{access}", self.class)
    }
}

/// The compatibility role.
///
/// Contract: `compatible(held, req)` answers whether a request `req` of one
/// transaction may be granted while *another* transaction holds (or waits
/// ahead with) `held` on an overlapping target. Locks of the same transaction
/// never conflict and are not asked about. The answer must be a pure function
/// of its arguments (the table caches nothing, but it asks in any order and
/// relies on the same answer every time). Implementations are shared across
/// partitions, hence `Send + Sync`.
pub trait Compatibility: Send + Sync {
    fn compatible(&self, held: Mode, req: Mode) -> bool;
}

/// The compatibility used by every protocol in DESIGN 4.1:
///
/// - ACID among ACID: shared/exclusive; all reads (including range reads)
///   share, a write conflicts with everything.
/// - Salt (ACID, alkaline, saline): seed 000 Table 3.2 exactly, with
///   `RangeRead` treated as `Read`.
/// - Nexus: same group always compatible; different groups conflict unless
///   both read. Against any non-nexus class (ACID, and, conservatively, the
///   Salt classes, which a Callas deployment does not mix) the other class is
///   treated as a group of its own: conflict unless both read.
/// - Member (a running Callas transaction's in-group lock): compatible with
///   its own group's nexus locks; against everything else, including other
///   members of its group, shared/exclusive.
#[derive(Clone, Copy, Debug, Default)]
pub struct StandardCompat;

/// Salt's Table 3.2, indexed by `salt_index`: ACID-R, ACID-W, alka-R,
/// alka-W, saline-R, saline-W. Y = true.
const SALT: [[bool; 6]; 6] = [
    //  AR     AW     KR     KW     SR     SW
    [true, false, true, false, true, false],    // ACID-R
    [false, false, false, false, false, false], // ACID-W
    [true, false, true, false, true, true],     // alka-R
    [false, false, false, false, true, true],   // alka-W
    [true, false, true, true, true, true],      // saline-R
    [false, false, true, true, true, true],     // saline-W
];

fn salt_index(m: Mode) -> Option<usize> {
    let class = match m.class {
        LockClass::Acid => 0,
        LockClass::Alkaline => 1,
        LockClass::Saline => 2,
        LockClass::Nexus(_) | LockClass::Member(_) => return None,
    };
    Some(class * 2 + usize::from(!m.access.is_read()))
}

impl Compatibility for StandardCompat {
    fn compatible(&self, held: Mode, req: Mode) -> bool {
        match (salt_index(held), salt_index(req)) {
            (Some(h), Some(r)) => SALT[h][r],
            _ => {
                use LockClass::{Member, Nexus};
                let same_group = match (held.class, req.class) {
                    (Nexus(a), Nexus(b)) | (Nexus(a), Member(b)) | (Member(a), Nexus(b)) => a == b,
                    _ => false,
                };
                same_group || (held.access.is_read() && req.access.is_read())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockClass::*;

    fn m(class: LockClass, access: Access) -> Mode {
        Mode::new(class, access)
    }

    /// DESIGN 4.1 table, written out row by row as in the document.
    #[test]
    fn salt_table_matches_design_exactly() {
        let order = [
            m(Acid, Access::Read),
            m(Acid, Access::Write),
            m(Alkaline, Access::Read),
            m(Alkaline, Access::Write),
            m(Saline, Access::Read),
            m(Saline, Access::Write),
        ];
        let expected = [
            "YNYNYN", // ACID-R
            "NNNNNN", // ACID-W
            "YNYNYY", // alka-R
            "NNNNYY", // alka-W
            "YNYYYY", // saline-R
            "NNYYYY", // saline-W
        ];
        let c = StandardCompat;
        for (i, row) in expected.iter().enumerate() {
            for (j, cell) in row.chars().enumerate() {
                let want = cell == 'Y';
                assert_eq!(
                    c.compatible(order[i], order[j]),
                    want,
                    "held {} req {}",
                    order[i],
                    order[j]
                );
                // The table is symmetric.
                assert_eq!(c.compatible(order[j], order[i]), want);
            }
        }
    }

    #[test]
    fn range_read_is_treated_as_read() {
        let c = StandardCompat;
        for held in [Acid, Alkaline, Saline] {
            for req in [Acid, Alkaline, Saline] {
                for other in [Access::Read, Access::Write] {
                    assert_eq!(
                        c.compatible(m(held, Access::RangeRead), m(req, other)),
                        c.compatible(m(held, Access::Read), m(req, other))
                    );
                    assert_eq!(
                        c.compatible(m(held, other), m(req, Access::RangeRead)),
                        c.compatible(m(held, other), m(req, Access::Read))
                    );
                }
            }
        }
    }

    #[test]
    fn acid_is_shared_exclusive() {
        let c = StandardCompat;
        assert!(c.compatible(m(Acid, Access::Read), m(Acid, Access::Read)));
        assert!(c.compatible(m(Acid, Access::RangeRead), m(Acid, Access::Read)));
        assert!(c.compatible(m(Acid, Access::RangeRead), m(Acid, Access::RangeRead)));
        assert!(!c.compatible(m(Acid, Access::Write), m(Acid, Access::Read)));
        assert!(!c.compatible(m(Acid, Access::Read), m(Acid, Access::Write)));
        assert!(!c.compatible(m(Acid, Access::RangeRead), m(Acid, Access::Write)));
        assert!(!c.compatible(m(Acid, Access::Write), m(Acid, Access::Write)));
    }

    #[test]
    fn nexus_same_group_always_compatible_different_groups_only_reads() {
        let c = StandardCompat;
        let all = [Access::Read, Access::RangeRead, Access::Write];
        for a in all {
            for b in all {
                assert!(c.compatible(m(Nexus(1), a), m(Nexus(1), b)));
                let both_read = a.is_read() && b.is_read();
                assert_eq!(c.compatible(m(Nexus(1), a), m(Nexus(2), b)), both_read);
                // ACID is a group of its own.
                assert_eq!(c.compatible(m(Nexus(1), a), m(Acid, b)), both_read);
                assert_eq!(c.compatible(m(Acid, a), m(Nexus(1), b)), both_read);
            }
        }
    }

    #[test]
    fn member_shares_only_with_its_own_groups_nexus_locks() {
        let c = StandardCompat;
        let all = [Access::Read, Access::RangeRead, Access::Write];
        for a in all {
            for b in all {
                let both_read = a.is_read() && b.is_read();
                assert!(c.compatible(m(Nexus(1), a), m(Member(1), b)));
                assert!(c.compatible(m(Member(1), a), m(Nexus(1), b)));
                // In-group 2PL among running transactions of one group.
                assert_eq!(c.compatible(m(Member(1), a), m(Member(1), b)), both_read);
                assert_eq!(c.compatible(m(Member(1), a), m(Member(2), b)), both_read);
                assert_eq!(c.compatible(m(Nexus(2), a), m(Member(1), b)), both_read);
                assert_eq!(c.compatible(m(Acid, a), m(Member(1), b)), both_read);
                assert_eq!(c.compatible(m(Member(1), a), m(Acid, b)), both_read);
            }
        }
    }

    #[test]
    fn covers_needs_same_class_and_stronger_access() {
        assert!(m(Acid, Access::Write).covers(m(Acid, Access::Read)));
        assert!(m(Acid, Access::Read).covers(m(Acid, Access::Read)));
        assert!(m(Acid, Access::RangeRead).covers(m(Acid, Access::Read)));
        assert!(!m(Acid, Access::Read).covers(m(Acid, Access::Write)));
        assert!(!m(Alkaline, Access::Write).covers(m(Saline, Access::Read)));
    }
}
