//! The helper (seed 003 section 2): a client that crashes after the
//! oracle serialized its transaction leaves it `Active` in the ring,
//! holding the ring's horizon back, and possibly half written back. The
//! helper resolves every such transaction older than a patience bound by
//! the log: a write set that reached the log committed (the checks passed
//! before it was logged), so it is written back again (write-backs are
//! idempotent) and the oracle hears it committed; one that did not is
//! aborted, and its writes never become visible.

use std::collections::HashMap;
use std::hash::Hash;

use super::client::Db;
use super::store::Ts;
use super::tso::Tso;

/// What a helper pass decided, by commit timestamp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub committed: Vec<Ts>,
    pub aborted: Vec<Ts>,
}

/// Resolves the transactions serialized before `before` that nobody
/// finished, from `log` (commit timestamp and write set, as appended by
/// write-back).
pub fn resolve<K: Hash + Eq + Clone, V: Clone>(
    tso: &mut Tso<K>,
    log: &[(Ts, Vec<(K, V)>)],
    db: &mut impl Db<K, V>,
    before: Ts,
) -> Resolved {
    let unresolved = tso.unresolved(before);
    if unresolved.is_empty() {
        return Resolved::default();
    }
    let logged: HashMap<Ts, &Vec<(K, V)>> = log.iter().map(|(ts, w)| (*ts, w)).collect();
    let mut r = Resolved::default();
    for (commit, start) in unresolved {
        match logged.get(&commit) {
            Some(writes) => {
                db.write_back(writes, commit);
                tso.commit(commit);
                r.committed.push(commit);
            }
            None => {
                tso.abort(commit);
                r.aborted.push(commit);
            }
        }
        tso.end(start);
    }
    r
}
