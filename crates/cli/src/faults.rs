//! Faults for tests: `brine bench --loss P --cut NODES@FROM-UNTIL
//! --reorder P --duplicate P`, the embedded link's faults (`brine_cluster::FaultConfig`),
//! begun by the benchmark once its data is loaded; and `brine cut`, a
//! network partition between the processes of a running cluster.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::node::{read_file, NodeError};

/// `brine cut`.
#[derive(Args, Debug)]
pub struct CutArgs {
    /// The cluster file.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// The nodes cut off from the others (comma-separated ids).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<u32>,
    /// How long the cut lasts, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub for_ms: u64,
}

/// Cuts `--nodes` off from the rest of the cluster at every node's
/// transport (`brine_client::Client::cut`).
pub async fn cut(args: &CutArgs) -> Result<(), NodeError> {
    let file = read_file(&args.cluster)?;
    if let Some(n) = args.nodes.iter().find(|n| file.address(**n).is_err()) {
        return Err(NodeError::Config(format!(
            "--nodes: the cluster has no node {n}"
        )));
    }
    if args.nodes.len() >= file.nodes.len() {
        return Err(NodeError::Config(
            "--nodes: name fewer nodes than the cluster has (the others are the other side)".into(),
        ));
    }
    let client = brine_client::Client::new(&file)?;
    client
        .cut(&args.nodes, Duration::from_millis(args.for_ms))
        .await?;
    println!(
        "nodes {:?} cut off from the others for {} ms",
        args.nodes, args.for_ms
    );
    Ok(())
}

/// `brine bench`'s faults of the embedded link.
#[derive(Args, Debug, Default)]
pub struct LinkFaultArgs {
    /// Faults of the embedded link (seeded by --seed): the chance that a
    /// message between two nodes is lost, from the start of the warm-up
    /// (the data is loaded) to the end of the measured interval (the
    /// checks run without faults). An attempt a participant does not
    /// answer is aborted and runs again (`unreachable` aborts); decisions
    /// are sent until acknowledged.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub loss: f64,

    /// Faults of the embedded link: nodes cut off from the others, as
    /// `NODE[,NODE...]@FROM-UNTIL` in milliseconds after the warm-up began
    /// (e.g. `1@2000-4000`). Repeat for several.
    #[arg(long = "cut", value_name = "CUT")]
    pub cuts: Vec<String>,
    /// Faults of the embedded link: the chance that a message between two
    /// nodes is held back up to 2 ms, so later ones on the same pair
    /// overtake it (as two requests on brine's transport may).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub reorder: f64,
    /// Faults of the embedded link: the chance that a decision (commit,
    /// abort, release) between two nodes arrives twice, its copy up to
    /// 2 ms later (as a resend whose first copy also arrived). Statements
    /// are never duplicated: brine never resends one.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub duplicate: f64,
}

/// `--loss`, `--cut`, `--reorder` and `--duplicate` as the link's faults,
/// begun by the benchmark once its data is loaded.
pub fn fault_config(args: &LinkFaultArgs) -> Result<brine_cluster::FaultConfig, String> {
    let LinkFaultArgs {
        loss,
        ref cuts,
        reorder,
        duplicate,
    } = *args;
    for (flag, p) in [
        ("--loss", loss),
        ("--reorder", reorder),
        ("--duplicate", duplicate),
    ] {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("{flag} {p}: a chance between 0 and 1"));
        }
    }
    let cuts = cuts
        .iter()
        .map(|c| {
            parse_cut(c)
                .map_err(|e| format!("--cut {c}: {e} (expected NODE[,NODE...]@FROM-UNTIL, in ms)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(brine_cluster::FaultConfig {
        loss,
        loss_from: std::time::Duration::ZERO,
        loss_until: None,
        cuts,
        on_demand: true,
        reorder,
        reorder_window: std::time::Duration::from_millis(2),
        duplicate,
    })
}

/// `NODE[,NODE...]@FROM-UNTIL` (milliseconds).
fn parse_cut(text: &str) -> Result<brine_cluster::Cut, String> {
    let (nodes, window) = text.split_once('@').ok_or("no `@`")?;
    let (from, until) = window.split_once('-').ok_or("no `-` in the interval")?;
    let ms = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map(std::time::Duration::from_millis)
            .map_err(|_| format!("`{s}` is not a number of milliseconds"))
    };
    let side = nodes
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<u32>()
                .map(brine_core::NodeId)
                .map_err(|_| format!("`{n}` is not a node number"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (from, until) = (ms(from)?, ms(until)?);
    if until <= from {
        return Err("the interval ends before it begins".into());
    }
    Ok(brine_cluster::Cut { side, from, until })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(
        loss: f64,
        cuts: &[String],
        reorder: f64,
        duplicate: f64,
    ) -> Result<brine_cluster::FaultConfig, String> {
        fault_config(&LinkFaultArgs {
            loss,
            cuts: cuts.to_vec(),
            reorder,
            duplicate,
        })
    }

    #[test]
    fn fault_flags_parse_and_bad_ones_say_why() {
        let f = config(
            0.02,
            &["1,2@100-250".to_string(), "0@5-6".to_string()],
            0.1,
            0.05,
        )
        .unwrap();
        assert_eq!(f.loss, 0.02);
        assert!(f.on_demand && !f.is_none());
        assert_eq!(
            f.cuts[0].side,
            [brine_core::NodeId(1), brine_core::NodeId(2)]
        );
        assert_eq!(f.cuts[0].from, std::time::Duration::from_millis(100));
        assert_eq!(f.cuts[0].until, std::time::Duration::from_millis(250));
        assert_eq!((f.reorder, f.duplicate), (0.1, 0.05));
        assert!(config(0.0, &[], 0.0, 0.0).unwrap().is_none());
        assert!(!config(0.0, &[], 0.5, 0.0).unwrap().is_none());
        assert!(!config(0.0, &[], 0.0, 0.5).unwrap().is_none());
        let e = config(0.0, &[], 2.0, 0.0).expect_err("reorder 2");
        assert!(e.contains("--reorder 2"), "{e}");
        let e = config(0.0, &[], 0.0, -1.0).expect_err("duplicate -1");
        assert!(e.contains("--duplicate -1"), "{e}");
        for (loss, cut, needle) in [
            (1.5, "", "between 0 and 1"),
            (0.0, "1-100-200", "no `@`"),
            (0.0, "1@100", "no `-`"),
            (0.0, "x@1-2", "`x` is not a node number"),
            (0.0, "1@5-2", "ends before it begins"),
        ] {
            let cuts: Vec<String> = (!cut.is_empty())
                .then(|| cut.to_string())
                .into_iter()
                .collect();
            let e = config(loss, &cuts, 0.0, 0.0).expect_err(cut);
            assert!(e.contains(needle), "{cut}: {e}");
        }
    }
}
