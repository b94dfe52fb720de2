//! Per-pair link delays between the nodes of a cluster, read from a file:
//! a geo-distributed deployment (seed 004 Table 2) or a LAN.
//!
//! ```text
//!  # seed 004 Table 2: latencies between sites, in milliseconds
//!  unit = ms           # ms or us
//!  kind = rtt          # rtt (a round trip: the one-way delay is half) or one-way
//!  sites = G J US B A
//!  G  = 20 253  92 193 314
//!  J  = 253 20 153 282 188
//!  ...                 # one row per site, one column per site
//! ```
//!
//! Node `i` is site `i` (the first sites when the cluster has fewer
//! nodes). The diagonal is the delay inside a site: between a client and
//! the server of its own site. Messages between two nodes of the table
//! take their pair's one-way delay; every other message (a node beyond the
//! table, the coordinators' own node) takes the link's uniform delay.

use std::path::Path;
use std::time::Duration;

use brine_core::{Error, Result};

/// The site (server) a client is at: its coordinator's node when that is
/// one of the `servers` (co-located placement), else one by its session,
/// so clients spread over the servers either way.
pub fn client_site(node: brine_core::NodeId, session: Option<u64>, servers: u32) -> u32 {
    if node.0 < servers {
        node.0
    } else {
        (session.unwrap_or(0) % u64::from(servers)) as u32
    }
}

/// One-way delays between sites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    sites: Vec<String>,
    one_way_us: Vec<Vec<u64>>,
}

impl Topology {
    pub fn load(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading the topology {}: {e}", path.display())))?;
        Topology::parse(&text)
            .map_err(|e| Error::Config(format!("topology {}: {e}", path.display())))
    }

    /// Every site `delay_us` from every other, `inside_us` within one.
    pub fn uniform(sites: usize, delay_us: u64, inside_us: u64) -> Topology {
        Topology {
            sites: (0..sites).map(|i| format!("s{i}")).collect(),
            one_way_us: (0..sites)
                .map(|a| {
                    (0..sites)
                        .map(|b| if a == b { inside_us } else { delay_us })
                        .collect()
                })
                .collect(),
        }
    }

    pub fn parse(text: &str) -> Result<Topology> {
        let bad = |line: usize, what: String| Error::Config(format!("line {line}: {what}"));
        let mut scale_us = 1_000f64;
        let mut halve = true;
        let mut sites: Option<Vec<String>> = None;
        let mut rows: Vec<(String, Vec<f64>, usize)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| bad(n, format!("expected `name = value`, found `{line}`")))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "unit" => {
                    scale_us = match value {
                        "ms" => 1_000.0,
                        "us" => 1.0,
                        other => return Err(bad(n, format!("unit `{other}`: ms or us"))),
                    }
                }
                "kind" => {
                    halve = match value {
                        "rtt" => true,
                        "one-way" => false,
                        other => return Err(bad(n, format!("kind `{other}`: rtt or one-way"))),
                    }
                }
                "sites" => sites = Some(value.split_whitespace().map(String::from).collect()),
                site => {
                    let delays = value
                        .split_whitespace()
                        .map(|d| {
                            d.parse::<f64>()
                                .ok()
                                .filter(|v| v.is_finite() && *v >= 0.0)
                                .ok_or_else(|| bad(n, format!("`{d}` is not a delay")))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    rows.push((site.to_string(), delays, n));
                }
            }
        }
        let sites = sites.ok_or_else(|| Error::Config("no `sites = ...` line".into()))?;
        if sites.is_empty() {
            return Err(Error::Config("`sites` names no site".into()));
        }
        let mut one_way_us = vec![Vec::new(); sites.len()];
        for (site, delays, n) in rows {
            let i = sites
                .iter()
                .position(|s| *s == site)
                .ok_or_else(|| bad(n, format!("`{site}` is not one of the sites")))?;
            if delays.len() != sites.len() {
                return Err(bad(
                    n,
                    format!("{} delays for {} sites", delays.len(), sites.len()),
                ));
            }
            let factor = if halve { 0.5 } else { 1.0 };
            one_way_us[i] = delays
                .iter()
                .map(|d| (d * scale_us * factor).round() as u64)
                .collect();
        }
        if let Some(i) = one_way_us.iter().position(Vec::is_empty) {
            return Err(Error::Config(format!("no row for site `{}`", sites[i])));
        }
        Ok(Topology { sites, one_way_us })
    }

    pub fn sites(&self) -> &[String] {
        &self.sites
    }

    /// The one-way delay between nodes `a` and `b` (`a == b`: inside a
    /// site), if both are sites of the table.
    pub fn one_way(&self, a: u32, b: u32) -> Option<Duration> {
        self.one_way_us
            .get(a as usize)?
            .get(b as usize)
            .map(|&us| Duration::from_micros(us))
    }

    /// For reports: `G-J 126.5 ms` pairs.
    pub fn describe(&self, nodes: u32) -> String {
        let n = (nodes as usize).min(self.sites.len());
        let mut out = Vec::new();
        for a in 0..n {
            for b in a..n {
                out.push(format!(
                    "{}-{} {:.1} ms",
                    self.sites[a],
                    self.sites[b],
                    self.one_way_us[a][b] as f64 / 1000.0
                ));
            }
        }
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_round_trips_and_halves_them() -> Result<()> {
        let t = Topology::parse(
            "# two sites\nunit = ms\nkind = rtt\nsites = G J\nG = 20 253\nJ = 253 20 # Japan\n",
        )?;
        assert_eq!(t.one_way(0, 1), Some(Duration::from_micros(126_500)));
        assert_eq!(t.one_way(1, 1), Some(Duration::from_millis(10)));
        assert_eq!(t.one_way(0, 2), None);
        let t = Topology::parse("unit = us\nkind = one-way\nsites = a b\na = 0 100\nb = 100 0")?;
        assert_eq!(t.one_way(1, 0), Some(Duration::from_micros(100)));
        Ok(())
    }

    #[test]
    fn bad_tables_are_refused_with_their_line() {
        for (text, says) in [
            ("G = 1", "no `sites"),
            ("sites = G J\nG = 1 2", "no row for site `J`"),
            ("sites = G\nG = 1 2", "line 2: 2 delays for 1 sites"),
            ("sites = G\nX = 1", "`X` is not one of the sites"),
            ("sites = G\nG = -4", "not a delay"),
            ("unit = s\nsites = G\nG = 1", "unit `s`"),
            ("sites = G\nG 1", "expected `name = value`"),
        ] {
            match Topology::parse(text) {
                Err(Error::Config(m)) => assert!(m.contains(says), "{text:?}: {m}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
