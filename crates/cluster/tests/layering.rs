//! The engine/protocol layering (docs/architecture.md, "Engine and
//! protocols"): the engine's coordinator and partition, the protocol
//! interface and the wire vocabulary name no protocol module, so a protocol
//! depends on the engine and never the other way round; and no source file
//! of the lock table or the cluster grows past about a thousand lines.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `path` that are code (not comments).
fn code_lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with("//"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_engine_names_no_protocol_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut engine = Vec::new();
    rust_files(&src.join("coordinator"), &mut engine);
    rust_files(&src.join("partition"), &mut engine);
    for f in ["protocol.rs", "message.rs", "link.rs", "deadlock.rs"] {
        engine.push(src.join(f));
    }
    assert!(engine.len() >= 10, "engine files not found: {engine:?}");
    let mut offenders = Vec::new();
    for f in &engine {
        for line in code_lines(f) {
            if line.contains("protocols::") || line.contains("protocols;") {
                offenders.push(format!("{}: {line}", f.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

#[test]
fn no_source_file_of_the_lock_table_or_the_cluster_is_over_a_thousand_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in ["lock", "cluster"] {
        rust_files(&crates.join(c).join("src"), &mut files);
        rust_files(&crates.join(c).join("tests"), &mut files);
    }
    assert!(files.len() > 30, "sources not found: {}", files.len());
    let long: Vec<_> = files
        .iter()
        .map(|f| (fs::read_to_string(f).unwrap_or_default().lines().count(), f))
        .filter(|(n, _)| *n > 1_000)
        .map(|(n, f)| format!("{}: {n} lines", f.display()))
        .collect();
    assert!(long.is_empty(), "{long:#?}");
}
