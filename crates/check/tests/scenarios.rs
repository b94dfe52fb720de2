//! Scenario tests: every file under `testdata/` is a list of hand-made
//! histories (in the notation of `brine_check::script`) with the report the
//! checker must produce. Regenerate expected output with
//! `REWRITE=1 cargo test -p brine-check --test scenarios`, then read the
//! diff: a wrong expected report is a defect.
//!
//! Directives:
//!
//! - `check [level=read-committed|snapshot-isolation|serializable|salt]
//!   [versions=timestamp]`: the report (level serializable by default)
//!   with every witness; `versions=timestamp` sets the header switch
//!   (`config.versions`), so version ids order each key's versions.
//! - `elle [model=rw-register|list-append]`: the EDN export.
//! - `json`: the history file itself (JSON lines).

use brine_check::elle::{self, ElleModel};
use brine_check::{check_history, script, Level};
use datadriven::TestCase;

fn run(tc: &mut TestCase) -> String {
    let mut history = match script::parse(&tc.input) {
        Ok(h) => h,
        Err(e) => return format!("error: {e}\n"),
    };
    match tc.directive.as_str() {
        "check" => {
            let level = tc
                .try_take_arg::<String>("level")
                .ok()
                .flatten()
                .unwrap_or_else(|| "serializable".into());
            let level: Level = match level.parse() {
                Ok(l) => l,
                Err(e) => return format!("error: {e}\n"),
            };
            if let Ok(Some(v)) = tc.try_take_arg::<String>("versions") {
                history.header.config.insert("versions".into(), v.into());
            }
            check_history(&history, level).render(usize::MAX)
        }
        "elle" => {
            let model = tc
                .try_take_arg::<String>("model")
                .ok()
                .flatten()
                .unwrap_or_else(|| "rw-register".into());
            let model: ElleModel = match model.parse() {
                Ok(m) => m,
                Err(e) => return format!("error: {e}\n"),
            };
            let mut out = Vec::new();
            if let Err(e) = elle::export(&history.txns, model, &mut out) {
                return format!("error: {e}\n");
            }
            String::from_utf8_lossy(&out).into_owned()
        }
        "json" => {
            let mut out = Vec::new();
            if let Err(e) = brine_check::reader::write_history(&mut out, &history) {
                return format!("error: {e}\n");
            }
            String::from_utf8_lossy(&out).into_owned()
        }
        other => format!("error: unknown directive {other:?}\n"),
    }
}

#[test]
fn scenarios() {
    datadriven::walk(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata"),
        |f| {
            f.run(run);
        },
    );
}
