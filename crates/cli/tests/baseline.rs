//! The baseline policy of `brine bench` comparisons, as a user meets it:
//! the JSON a comparison writes has its ratios against the best `acid`
//! variant at each client count, and names it. Short debug runs; no
//! timing figure is asserted, only how the figures relate.

use std::process::Command;

use serde_json::Value as Json;

const BRINE: &str = env!("CARGO_BIN_EXE_brine");

/// Runs `brine bench` with `args` plus a JSON file, and reads the file.
fn bench_json(args: &[&str]) -> Json {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out.json");
    let out = Command::new(BRINE)
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&path)
        .output()
        .expect("running brine");
    assert!(
        out.status.success(),
        "brine bench {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("the JSON report");
    serde_json::from_str(&text).expect("valid JSON")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.0015 * b.abs().max(1.0)
}

fn points(report: &Json) -> &Vec<Json> {
    report["results"].as_array().expect("results")
}

fn tps(p: &Json) -> f64 {
    p["throughput_tps"].as_f64().expect("throughput")
}

/// The command, shortened: every point's ratio is against the best
/// `acid` variant at its client count, each names it, and the peak ratios
/// are against the best `acid` peak.
#[test]
fn ratios_are_against_the_best_acid_variant() {
    let report = bench_json(&[
        "ticket",
        "--compare",
        "acid,salt,callas,raw",
        "--grouping",
        "checkout:rp=create_order,delete_order",
        "--isolation",
        "read-committed",
        "--clients",
        "4,16",
        "--seats",
        "400",
        "--customers",
        "200",
        "--duration",
        "0.4",
        "--warmup",
        "0.1",
    ]);
    let variants = ["acid@wait-die", "acid@detect"];
    assert_eq!(
        report["config"]["baseline"]["of"],
        serde_json::json!(variants)
    );
    let results = points(&report);
    assert_eq!(
        results.len(),
        5 * 2,
        "four protocols, acid twice, two client counts"
    );
    for p in results {
        let protocol = p["protocol"].as_str().expect("protocol");
        match protocol {
            "acid@wait-die" => assert_eq!(p["deadlock"], "wait-die"),
            "acid@detect" => assert_eq!(p["deadlock"], "detect"),
            _ => {}
        }
        // The best acid variant at this point's client count.
        let clients = &p["clients"];
        let best = results
            .iter()
            .filter(|q| variants.contains(&q["protocol"].as_str().unwrap_or("")))
            .filter(|q| &q["clients"] == clients)
            .max_by(|a, b| tps(a).total_cmp(&tps(b)))
            .expect("acid ran at every client count");
        assert_eq!(p["baseline"], best["protocol"], "{protocol} at {clients}");
        let ratio = p["throughput_ratio_vs_baseline"].as_f64().expect("ratio");
        assert!(
            close(ratio, tps(p) / tps(best)),
            "{protocol} at {clients}: {ratio} against {} / {}",
            tps(p),
            tps(best)
        );
    }
    let peak = |name: &str| {
        results
            .iter()
            .filter(|q| {
                q["protocol"]
                    .as_str()
                    .is_some_and(|p| p == name || (name == "acid" && variants.contains(&p)))
            })
            .map(tps)
            .fold(0.0, f64::max)
    };
    for protocol in ["salt", "callas", "raw"] {
        let key = format!("{protocol}/acid");
        let ratio = report["ratios"][&key]
            .as_f64()
            .expect("a ratio per protocol");
        assert!(
            close(ratio, peak(protocol) / peak("acid")),
            "{key}: {ratio}"
        );
    }
    assert!(report["ratios"].get("acid@detect/acid").is_none());
    let chosen = report["baseline"]["peak"][0]["protocol"]
        .as_str()
        .expect("peak");
    assert!(variants.contains(&chosen));
    // Every other series' share of raw's peak.
    for series in ["acid@wait-die", "acid@detect", "salt", "callas"] {
        let share = report["raw_share"][series]
            .as_f64()
            .expect("a share of raw");
        assert!(
            close(share, peak(series) / peak("raw")),
            "{series}: {share}"
        );
    }
}

/// `--baseline acid@wait-die` pins one variant, and `--deadlock` pins every
/// protocol's handling, the baseline's with it: no variants then.
#[test]
fn a_pinned_baseline_runs_alone() {
    let common = [
        "micro",
        "--rows",
        "50",
        "--clients",
        "4",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
    ];
    let pinned = bench_json(
        &[
            &common[..],
            &["--compare", "acid,salt", "--baseline", "acid@wait-die"],
        ]
        .concat(),
    );
    assert_eq!(pinned["config"]["baseline"], "acid@wait-die");
    let names: Vec<&str> = points(&pinned)
        .iter()
        .filter_map(|p| p["protocol"].as_str())
        .collect();
    assert_eq!(names, ["acid@wait-die", "salt"]);
    assert_eq!(points(&pinned)[1]["baseline"], "acid@wait-die");
    assert!(pinned["ratios"]["salt/acid@wait-die"].is_number());
    assert_eq!(pinned["config"]["deadlock"]["salt"], "detect");

    let forced = bench_json(
        &[
            &common[..],
            &["--compare", "acid,salt", "--deadlock", "detect"],
        ]
        .concat(),
    );
    assert_eq!(forced["config"]["baseline"], "acid");
    assert_eq!(forced["config"]["deadlock"], "detect");
    assert!(points(&forced).iter().all(|p| p["deadlock"] == "detect"));
}
