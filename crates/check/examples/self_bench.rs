//! Times the checker on a generated valid history (the same as
//! `brine check --self-bench N`, without building the whole CLI):
//!
//! ```text
//! cargo run --release -p brine-check --example self_bench -- 100000 [seed] [level]
//! ```

use std::process::ExitCode;

use brine_check::command::{run, CheckOptions};
use brine_check::Level;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let seed = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let level: Level = match args.get(2).map(|l| l.parse()) {
        None => Level::Serializable,
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = CheckOptions {
        file: None,
        level,
        export_elle: None,
        max_witnesses: 5,
        json: false,
        self_bench: Some(n),
        seed,
        granularity: None,
    };
    match run(&opts, &mut std::io::stdout().lock()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
