//! Crash injection for the log writers: a switch shared by every log of a
//! cluster that stops all of them at the k-th I/O step, the way a power cut
//! stops a machine.
//!
//! ```text
//!  writer thread, before each I/O step (batch write, fsync, segment create,
//!  header sync, directory sync, checkpoint write/sync/rename, file delete):
//!     switch.step(kind) ── k-th step? ──► crashed: this step is torn (a write
//!                                         keeps a random prefix), then every
//!                                         writer simulates power loss: each
//!                                         file keeps its fsynced bytes plus a
//!                                         random prefix of the unsynced ones,
//!                                         the last few possibly garbled; no
//!                                         waiter is answered any more
//! ```
//!
//! Unsynced bytes are modelled as lost from the end: a torn region is a
//! suffix of the file (the reader's torn-tail rule assumes the same).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// Kinds of I/O step, to see which kinds crashes hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    /// Writing a group-commit batch (commit, prepare, decision records).
    Write,
    /// The fsync that makes a batch durable.
    Sync,
    /// Creating, syncing and announcing a new segment.
    Rotate,
    /// Writing, syncing and installing a checkpoint, deleting old files.
    Checkpoint,
}

/// A cluster-wide crash switch. `never()` counts steps without crashing
/// (to calibrate how many steps a scenario takes).
#[derive(Debug)]
pub struct CrashSwitch {
    steps: AtomicU64,
    crash_at: AtomicU64,
    crashed: AtomicBool,
    seed: u64,
    hit: Mutex<Option<StepKind>>,
    counts: Mutex<[u64; 4]>,
}

impl CrashSwitch {
    /// A switch that never fires by itself (`crash_now` still works).
    pub fn never(seed: u64) -> CrashSwitch {
        CrashSwitch::at_step(u64::MAX, seed)
    }

    /// A switch that fires at the `k`-th I/O step (1-based) across all
    /// logs that share it.
    pub fn at_step(k: u64, seed: u64) -> CrashSwitch {
        CrashSwitch {
            steps: AtomicU64::new(0),
            crash_at: AtomicU64::new(k),
            crashed: AtomicBool::new(false),
            seed,
            hit: Mutex::new(None),
            counts: Mutex::new([0; 4]),
        }
    }

    /// Arms the switch to fire `k` steps (1-based) from now, e.g. after a
    /// scenario's setup.
    pub fn arm(&self, k: u64) {
        self.crash_at
            .store(self.steps().saturating_add(k.max(1)), Ordering::SeqCst);
    }

    /// Crashes now: every writer stops at its next step.
    pub fn crash_now(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }

    pub fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Steps taken so far by all writers.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    /// Steps taken so far, by kind: write, sync, rotate, checkpoint.
    pub fn step_counts(&self) -> [u64; 4] {
        *self.counts.lock()
    }

    /// The kind of step the crash hit, if it was a counted step.
    pub fn hit(&self) -> Option<StepKind> {
        *self.hit.lock()
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Called before an I/O step: `true` means crashed (do not complete
    /// the step normally).
    pub fn step(&self, kind: StepKind) -> bool {
        if self.is_crashed() {
            return true;
        }
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        self.counts.lock()[kind as usize] += 1;
        if n == self.crash_at.load(Ordering::SeqCst) {
            *self.hit.lock() = Some(kind);
            self.crash_now();
            return true;
        }
        false
    }
}

/// A small deterministic generator for the torn bytes (splitmix64).
#[derive(Clone, Debug)]
pub struct TornRng(u64);

impl TornRng {
    pub fn new(seed: u64) -> Self {
        TornRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// Uniform in `0..=n`.
    pub fn upto(&mut self, n: u64) -> u64 {
        if n == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (n + 1)
    }
}
