//! The cost of durability: runs the same points with `--durability none`
//! and `wal` in one process and reports the ratio, plus each point's log
//! statistics (fsync rate, group-commit batch size).
//!
//! ```text
//!  for mode in --durability none,wal:     run_bench(spec with that mode)
//!     each wal point: a fresh data directory (temporary unless --data-dir),
//!                     removed after the point unless --keep-data
//!  merge: series "acid+none", "acid+wal"; ratios "acid+wal/acid+none"
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_cluster::{Cluster, DurabilityMode, WalStats};
use serde::Serialize;
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::recorder::round2;
use crate::report::{BenchReport, PointResult};
use crate::workload::Workload;
use crate::BenchSpec;

/// Log statistics of one measured interval.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WalPoint {
    /// fsyncs of every log (partition and decision logs) in the interval.
    pub fsyncs: u64,
    pub fsyncs_per_s: f64,
    /// Records per fsync: the group-commit batch size.
    pub records_per_fsync: f64,
    pub bytes_per_fsync: f64,
    /// Of the fsyncs, those of the coordinators' decision logs.
    pub decision_fsyncs: u64,
    /// Checkpoints installed in the interval.
    pub checkpoints: u64,
}

impl WalPoint {
    pub fn from_delta(d: &WalStats, seconds: f64) -> WalPoint {
        let t = d.total();
        let per = |x: u64| {
            if t.fsyncs > 0 {
                round2(x as f64 / t.fsyncs as f64)
            } else {
                0.0
            }
        };
        WalPoint {
            fsyncs: t.fsyncs,
            fsyncs_per_s: if seconds > 0.0 {
                round2(t.fsyncs as f64 / seconds)
            } else {
                0.0
            },
            records_per_fsync: per(t.records),
            bytes_per_fsync: per(t.bytes),
            decision_fsyncs: d.decisions.fsyncs,
            checkpoints: t.checkpoints,
        }
    }
}

/// Where a durable point keeps its files: a fresh directory, removed when
/// the guard drops unless the run keeps its data.
pub struct PointData {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
    keep: bool,
}

impl PointData {
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for PointData {
    fn drop(&mut self) {
        if !self.keep && self._temp.is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

static POINT_SEQ: AtomicU64 = AtomicU64::new(0);

/// Gives `config` a fresh data directory when it is durable: a new
/// subdirectory of `--data-dir`, or a temporary directory. `None` when the
/// config keeps everything in memory.
pub fn point_data(config: &mut brine_cluster::ClusterConfig) -> Result<Option<PointData>> {
    let d = &mut config.durability;
    if d.mode != DurabilityMode::Wal {
        return Ok(None);
    }
    let keep = d.keep_data;
    let n = POINT_SEQ.fetch_add(1, Ordering::Relaxed);
    let data = match &d.data_dir {
        Some(base) => {
            let path = base.join(format!("point-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).map_err(|source| BenchError::Io {
                path: path.display().to_string(),
                source,
            })?;
            PointData {
                path,
                _temp: None,
                keep,
            }
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("brine-wal-")
                .tempdir()
                .map_err(|source| BenchError::Io {
                    path: std::env::temp_dir().display().to_string(),
                    source,
                })?;
            let path = t.path().to_path_buf();
            if keep {
                let kept = t.keep();
                PointData {
                    path: kept,
                    _temp: None,
                    keep: true,
                }
            } else {
                PointData {
                    path,
                    _temp: Some(t),
                    keep: false,
                }
            }
        }
    };
    d.data_dir = Some(data.path.clone());
    Ok(Some(data))
}

/// The cluster's log statistics, or zeros without a log.
pub fn wal_snapshot(cluster: &Cluster) -> Option<WalStats> {
    cluster.wal_stats()
}

/// Runs every point once per durability mode and merges the reports: the
/// series of mode `m` is `<protocol>+<m>`, and ratios compare each series
/// with the first protocol at the first mode.
/// A durability mode as reports name it: `none`, `wal`, or `wal-3r` with
/// three replicas of every log.
pub fn durability_label(mode: DurabilityMode, replicas: u32) -> String {
    if replicas > 1 {
        format!("{mode}-{replicas}r")
    } else {
        mode.to_string()
    }
}

pub async fn run_bench_durability(
    spec: &BenchSpec,
    workloads: &[Arc<dyn Workload>],
    modes: &[(DurabilityMode, u32)],
    mut on_point: impl FnMut(&PointResult),
) -> Result<BenchReport> {
    if modes.is_empty() {
        return Err(BenchError::Config("no durability mode to run".into()));
    }
    let name = workloads
        .first()
        .map(|w| w.name())
        .ok_or_else(|| BenchError::Config("no workload to run".into()))?;
    let nprot = spec.protocols.len();
    let mut results = Vec::new();
    let mut config = None;
    for (mi, &(mode, replicas)) in modes.iter().enumerate() {
        let mut s = spec.clone();
        s.cluster.durability.mode = mode;
        // A running cluster's replicas are its cluster file's.
        if s.remote.is_none() {
            s.cluster.durability.replicas = replicas;
        }
        let report = crate::run_bench(&s, workloads, &mut on_point).await?;
        if config.is_none() {
            config = Some(report.config.clone());
        }
        for mut r in report.results {
            r.protocol_index += mi * nprot;
            results.push(r);
        }
    }
    let mut config = config.unwrap_or_default();
    config.insert(
        "durability".into(),
        json!(modes
            .iter()
            .map(|&(m, r)| durability_label(m, r))
            .collect::<Vec<_>>()),
    );
    config.insert(
        "group_commit_window_us".into(),
        json!(spec.cluster.durability.group_commit_window.as_micros() as u64),
    );
    Ok(BenchReport::with_baseline(
        name,
        config,
        results,
        spec.baseline,
    ))
}
