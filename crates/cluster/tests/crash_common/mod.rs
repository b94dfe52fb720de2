//! Shared by the crash trials (`durability.rs`, `salt_crash.rs`,
//! `mediator_crash.rs`, `elia_crash.rs`): where trials keep their data,
//! the runtimes they run on, and where their power cuts fell.
#![allow(dead_code)]

use std::path::PathBuf;

/// A directory for trial data: tmpfs when there is one (the same files and
/// fsync calls, without the disk's latency, so hundreds of trials stay
/// fast).
pub fn fast_root() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(&shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tmpdir")
}

/// A two-worker runtime (`multi`), or the single-threaded simulator.
pub fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut b = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all().build().expect("runtime")
}

/// How many trials to run: `var` from the environment, else `default`.
pub fn trials(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The trials' seeds: the one `seed_var` names (rerunning the trial a
/// failure names), else 1 to `trials(trials_var, default)`.
pub fn seeds(trials_var: &str, default: u64, seed_var: &str) -> std::ops::RangeInclusive<u64> {
    match std::env::var(seed_var) {
        Ok(s) => {
            let n: u64 = s
                .parse()
                .unwrap_or_else(|_| panic!("{seed_var}: a number, not `{s}`"));
            n..=n
        }
        Err(_) => 1..=trials(trials_var, default),
    }
}

/// Where the trials' power cuts fell: the step of the log each hit, or
/// "after the run" when none did.
#[derive(Debug, Default)]
pub struct Hits(pub std::collections::BTreeMap<String, usize>);

impl Hits {
    pub fn record(&mut self, hit: Option<brine_storage::wal::StepKind>) {
        let k = hit.map_or("after the run".to_string(), |h| format!("{h:?}"));
        *self.0.entry(k).or_default() += 1;
    }

    /// Trials whose power was cut inside the run.
    pub fn mid_run(&self) -> usize {
        self.0
            .iter()
            .filter(|(k, _)| k.as_str() != "after the run")
            .map(|(_, n)| n)
            .sum()
    }
}
