//! The application files shipped in `apps/`, run by `brine bench app`:
//! they pass their checks, and their checks catch a broken body.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BRINE: &str = env!("CARGO_BIN_EXE_brine");

fn app(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps")
        .join(name)
}

fn bench(file: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["bench", "app", "--app"];
    let f = file.to_str().expect("utf-8 path");
    args.push(f);
    args.extend([
        "--duration",
        "1",
        "--warmup",
        "0",
        "--clients",
        "8",
        "--check",
    ]);
    args.extend(extra);
    Command::new(BRINE)
        .args(&args)
        .output()
        .expect("running brine")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `file` with `from` replaced by `to`, written beside a temp dir.
fn broken(file: &Path, from: &str, to: &str, dir: &Path) -> PathBuf {
    let s = std::fs::read_to_string(file).expect("reading the app");
    assert!(s.contains(from), "{from}");
    let out = dir.join(file.file_name().expect("a file name"));
    std::fs::write(&out, s.replacen(from, to, 1)).expect("writing");
    out
}

#[test]
fn ticketing_as_a_file_passes_its_check_under_acid_salt_and_its_callas_grouping() {
    let o = bench(
        &app("ticket.toml"),
        &["--compare", "acid,salt,callas@checkout"],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    // acid at wait-die and detection, salt, and the file's grouping.
    assert_eq!(out.matches("check: passed").count(), 4, "{out}");
    assert!(out.contains("callas@checkout"), "{out}");
}

#[test]
fn the_ticketing_check_catches_an_order_that_skips_the_event_counters() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = broken(
        &app("ticket.toml"),
        "if exec(\"sell_event\", n, total, event).affected ~= 1 then",
        "if false then",
        dir.path(),
    );
    let o = bench(&file, &[]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    // The check's counters, or the box office's guard on them first.
    assert!(
        out.contains("event counters are") || out.contains("event 1 counters cannot return"),
        "{out}"
    );
}

#[test]
fn bank_as_a_file_keeps_its_total_and_catches_a_lost_credit() {
    let o = bench(&app("bank.toml"), &["--compare", "acid,salt"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = broken(
        &app("bank.toml"),
        "local credited = exec(\"add\", amount, dst).affected == 1",
        "local credited = true",
        dir.path(),
    );
    let o = bench(&file, &[]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    // A total read during the run, or the check's at its end.
    assert!(
        out.contains("total: total ") || out.contains("the total is"),
        "{out}"
    );
}

#[test]
fn a_bad_file_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = broken(
        &app("bank.toml"),
        "statements.sum = \"SELECT SUM(balance) FROM account\"",
        "statements.sum = \"SELECT SUM(balance) FROM acount\"",
        dir.path(),
    );
    let o = bench(&file, &[]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("bank.toml:40:") && out.contains("acount"),
        "{out}"
    );
}
