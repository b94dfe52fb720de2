//! brine's benchmark driver and workloads.
//!
//! ```text
//!  brine bench <workload> ──► BenchSpec + [Workload variants]
//!        │
//!        ▼ driver::run_bench: per point a fresh embedded cluster, loaded
//!  closed-loop clients (tokio tasks) ── Client::call ──► cluster
//!        │ per-client Recorder (HDR histograms per procedure)
//!        ▼
//!  report::BenchReport ──► table (stdout) and JSON (DESIGN section 7)
//! ```
//!
//! What it guarantees: protocols and client counts are compared on freshly
//! loaded data with identical seeded request streams, in one process; every
//! result carries the topology and the measured link delay; a workload's
//! invariant can be checked after each point (`--check`).

pub mod cpu;
pub mod driver;
pub mod durability;
pub mod error;
pub mod list;
pub mod recorder;
pub mod report;
pub mod spec;
pub mod workload;
pub mod workloads;

pub use driver::{run_bench, run_point};
pub use error::{BenchError, Result};
pub use report::{render_point, BenchReport, PointResult};
pub use spec::BenchSpec;
pub use workload::{ClientGen, TxnRequest, Workload};
