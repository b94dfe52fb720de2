//! The embedded link's faults from the command line (`brine bench --loss`,
//! `--cut`, `--reorder`), as a user meets them. Short debug runs; what is
//! asserted is that the checks pass and the faults happened.

use std::process::Command;

const BRINE: &str = env!("CARGO_BIN_EXE_brine");

/// Issue 38: brine's transport forwards each request on a task of its own,
/// so two requests from one node to one partition may arrive in either
/// order. Runtime Pipelining sends a piece's end and the next piece's
/// statements as two such requests; with messages held back at random on
/// the embedded link (`--reorder`), pipelined TPC-C still passes its
/// consistency checks. (When a late piece end turned the next piece's
/// member locks into nexus locks, this run failed with duplicate order ids
/// in 4 tries of 4; with the fix it passed 4 of 4.)
#[test]
fn pipelined_tpcc_passes_its_checks_with_messages_reordered() {
    let out = Command::new(BRINE)
        .args(["bench", "tpcc", "--protocol", "callas"])
        .args(["--grouping", "orders:rp=new_order,payment"])
        .args(["--warehouses", "1", "--tpcc-scale", "small", "--nodes", "3"])
        .args(["--clients", "16", "--duration", "4", "--warmup", "0"])
        .args(["--reorder", "0.5", "--check"])
        .output()
        .expect("running brine");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("check: passed"), "{text}");
    let held = text
        .lines()
        .find_map(|l| l.strip_prefix("faults: "))
        .and_then(|l| l.split(" to cuts, ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        held.is_some_and(|n| n > 0),
        "messages were held back: {text}"
    );
}
