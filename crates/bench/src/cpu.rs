//! How busy this process's threads were during a point's measured
//! interval, so a result says whether the machine's cores, rather than
//! locks or the link, were the limit.
//!
//! Read from Linux's per-thread scheduler statistics
//! (`/proc/self/task/<tid>/schedstat`, nanoseconds on a core, and
//! `comm`, the thread's name). Elsewhere, or if `/proc` cannot be read,
//! a point simply has no `cpu` figures.
//!
//! Threads are grouped by name with a trailing `-<number>` dropped
//! (`brine-wal-3` counts as `brine-wal`). A thread that exits during the
//! interval takes its time with it; the runtime's threads live as long as
//! the process, so this only loses the odd short-lived helper.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::recorder::round2;

/// Time on a core so far, per live thread of this process.
#[derive(Clone, Debug, Default)]
pub struct CpuSample {
    /// tid -> (group name, ns on a core)
    threads: BTreeMap<u32, (String, u64)>,
}

/// One group of threads over an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadGroupCpu {
    /// Cores' worth of time the group ran: 1.0 is one core all along.
    pub busy_cores: f64,
    /// Threads of the group that ran at all in the interval.
    pub threads: u32,
}

/// This process's use of the machine's cores over an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuPoint {
    /// Cores the machine offers this process.
    pub cores: u32,
    /// Cores' worth of time all its threads ran, together.
    pub busy_cores: f64,
    /// The same per thread group, by name.
    pub by_thread: BTreeMap<String, ThreadGroupCpu>,
}

impl CpuSample {
    /// The current sample, or `None` where per-thread times are not
    /// available.
    pub fn now() -> Option<CpuSample> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        let mut threads = BTreeMap::new();
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            // A thread may exit between the listing and the reads.
            let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let Some(ns) = parse_schedstat(&stat) else {
                continue;
            };
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            threads.insert(tid, (group_name(name.trim()).to_string(), ns));
        }
        Some(CpuSample { threads })
    }

    /// What ran between `earlier` and this sample, `seconds` apart.
    pub fn since(&self, earlier: &CpuSample, seconds: f64) -> Option<CpuPoint> {
        if seconds <= 0.0 {
            return None;
        }
        let mut ns_by_group: BTreeMap<&str, (u64, u32)> = BTreeMap::new();
        for (tid, (name, ns)) in &self.threads {
            let before = earlier.threads.get(tid).map_or(0, |(_, ns)| *ns);
            let ran = ns.saturating_sub(before);
            if ran == 0 {
                continue;
            }
            let g = ns_by_group.entry(name.as_str()).or_default();
            g.0 += ran;
            g.1 += 1;
        }
        let cores_of = |ns: u64| round2(ns as f64 / 1e9 / seconds);
        let total: u64 = ns_by_group.values().map(|(ns, _)| ns).sum();
        Some(CpuPoint {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            busy_cores: cores_of(total),
            by_thread: ns_by_group
                .into_iter()
                .map(|(name, (ns, threads))| {
                    let group = ThreadGroupCpu {
                        busy_cores: cores_of(ns),
                        threads,
                    };
                    (name.to_string(), group)
                })
                .collect(),
        })
    }
}

impl CpuPoint {
    /// `1.62 of 2 cores (brine-worker 0.98 on 1 thread, brine-link 0.61, ...)`,
    /// busiest group first.
    pub fn line(&self) -> String {
        let mut groups: Vec<_> = self.by_thread.iter().collect();
        groups.sort_by(|a, b| b.1.busy_cores.total_cmp(&a.1.busy_cores));
        let parts: Vec<String> = groups
            .into_iter()
            .map(|(name, g)| {
                let on = if g.threads == 1 {
                    "1 thread".to_string()
                } else {
                    format!("{} threads", g.threads)
                };
                format!("{name} {:.2} on {on}", g.busy_cores)
            })
            .collect();
        format!(
            "{:.2} of {} cores busy ({})",
            self.busy_cores,
            self.cores,
            parts.join(", ")
        )
    }
}

/// The first field of a `schedstat` line: nanoseconds spent on a core.
fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// `brine-wal-3` -> `brine-wal`; names without a numeric suffix as they
/// are; an empty name as `?`.
fn group_name(comm: &str) -> &str {
    if comm.is_empty() {
        return "?";
    }
    match comm.rsplit_once('-') {
        Some((head, tail))
            if !head.is_empty() && !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) =>
        {
            head
        }
        _ => comm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(threads: &[(u32, &str, u64)]) -> CpuSample {
        CpuSample {
            threads: threads
                .iter()
                .map(|&(tid, name, ns)| (tid, (name.to_string(), ns)))
                .collect(),
        }
    }

    #[test]
    fn numbered_threads_share_a_group_and_other_names_keep_theirs() {
        assert_eq!(group_name("brine-wal-3"), "brine-wal");
        assert_eq!(group_name("brine-worker"), "brine-worker");
        assert_eq!(group_name("tokio-runtime-w"), "tokio-runtime-w");
        assert_eq!(group_name("-7"), "-7");
        assert_eq!(group_name(""), "?");
    }

    #[test]
    fn schedstat_gives_its_first_field() {
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat("garbage"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn an_interval_counts_what_each_group_ran_in_it() {
        let before = sample(&[(1, "brine-worker", 1_000_000_000), (2, "brine-link", 0)]);
        let after = sample(&[
            (1, "brine-worker", 2_900_000_000),
            (2, "brine-link", 500_000_000),
            // Started during the interval: all of its time counts.
            (3, "brine-wal", 100_000_000),
            // Did not run: not counted as a thread of its group.
            (4, "brine", 0),
        ]);
        let p = after.since(&before, 2.0).expect("a positive interval");
        assert_eq!(p.busy_cores, 1.25);
        assert_eq!(
            p.by_thread["brine-worker"],
            ThreadGroupCpu {
                busy_cores: 0.95,
                threads: 1
            }
        );
        assert_eq!(p.by_thread["brine-link"].busy_cores, 0.25);
        assert_eq!(p.by_thread["brine-wal"].busy_cores, 0.05);
        assert!(!p.by_thread.contains_key("brine"));
        assert!(p.line().starts_with("1.25 of "));
        assert!(p
            .line()
            .contains("(brine-worker 0.95 on 1 thread, brine-link 0.25"));
        assert!(after.since(&before, 0.0).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_busy_thread_shows_in_a_live_sample() {
        let before = CpuSample::now().expect("/proc/self/task is readable on Linux");
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = CpuSample::now().expect("/proc/self/task is readable on Linux");
        let p = after
            .since(&before, started.elapsed().as_secs_f64())
            .expect("a positive interval");
        // The spinning thread ran for most of the interval, on any machine
        // that gives this test a core at all; the bound leaves room for a
        // busy CI host.
        assert!(p.busy_cores > 0.1, "{p:?}");
    }
}
