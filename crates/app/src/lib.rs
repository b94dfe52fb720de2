//! Applications from a file: a user's application without recompiling
//! brine.
//!
//! ```text
//!  app.toml ──parse (file.rs)──► schema, procedures (declared statements,
//!     │                          typed parameters, Lua bodies, analysis
//!     │                          notes, BASE marks), [bench]
//!     │  every body compiled, every statement prepared against the schema:
//!     │  an error names the file and line, and nothing is half-loaded
//!     ▼
//!  Application (brine_cluster) ── bodies run by lua.rs: a pool of Lua
//!     │                             states; exec() yields a request that
//!     │                             the engine answers
//!     ▼
//!  AppWorkload (bench.rs): `brine bench app --app FILE`, `brine server`
//!                          and `brine cluster up` with the same file
//! ```
//!
//! Why Lua (through `mlua`): its bodies run as coroutines, so a statement
//! the body executes is a yield while the engine's own future is awaited,
//! with no thread per call; Lua 5.4 is small, fast to start and well known; and
//! `mlua` is maintained and builds Lua from source (`vendored`), needing
//! only the C compiler every Rust toolchain on Linux links with. Rhai, the
//! pure-Rust alternative, cannot suspend a script on an `await`, so each
//! call would hold a thread while its statements run.
//!
//! The file's format is in `docs/apps.md`.

mod bench;
mod error;
mod file;
mod lua;

pub use bench::AppWorkload;
pub use error::AppError;
pub use file::{AppFile, BenchSpec};

/// Reads and checks the application in `path`.
pub fn load(path: &std::path::Path) -> Result<AppFile, AppError> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    AppFile::parse(&path.display().to_string(), &text)
}
