//! Callas' groupings: which procedures run in which group, under which
//! mechanism (`2pl`, `chop`, `rp`, `sc`).

use super::prelude::*;

/// How a group's transactions are isolated from each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// Plain two-phase locking inside the group.
    #[serde(rename = "2pl")]
    TwoPl,
    /// Every statement a piece committed on its own (see the module doc).
    Chop,
    /// Classic transaction chopping: the SC-cycle analysis' pieces, each
    /// committed on its own (see `crate::sc`).
    Sc,
    /// Runtime Pipelining: rank-ordered pieces from the static analysis,
    /// piece-level locks, uncommitted reads inside the group with commit
    /// dependencies and cascading aborts (see the module doc).
    Rp,
}

impl FromStr for Mechanism {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "2pl" => Ok(Mechanism::TwoPl),
            "chop" => Ok(Mechanism::Chop),
            "sc" => Ok(Mechanism::Sc),
            "rp" => Ok(Mechanism::Rp),
            other => Err(Error::Config(format!(
                "unknown group mechanism `{other}` (expected 2pl, chop, sc or rp)"
            ))),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::TwoPl => "2pl",
            Mechanism::Chop => "chop",
            Mechanism::Sc => "sc",
            Mechanism::Rp => "rp",
        })
    }
}

/// One transaction group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDef {
    pub name: String,
    pub mechanism: Mechanism,
    pub procedures: Vec<String>,
    /// Runtime Pipelining: run every procedure's own body, never one of
    /// its reorderings (`rp/as-written`; the analysis's choice is the
    /// default, `crate::Reordering`).
    #[serde(default)]
    pub as_written: bool,
}

/// Which procedures run in which group. Group ids are positions + 1 (the
/// default group, ACID, has none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grouping {
    pub groups: Vec<GroupDef>,
}

impl Grouping {
    /// Parses `name:mechanism=proc,proc;name:mechanism=proc`, e.g.
    /// `orders:2pl=new_order,payment;rest:chop=delivery`; `rp/as-written`
    /// is Runtime Pipelining without reorderings.
    pub fn parse(spec: &str) -> Result<Grouping> {
        let mut groups = Vec::new();
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::Config(format!(
                    "bad group `{part}`: expected name:mechanism=procedure,procedure"
                ))
            };
            let (head, procs) = part.split_once('=').ok_or_else(bad)?;
            let (name, mechanism) = head.split_once(':').ok_or_else(bad)?;
            let procedures: Vec<String> = procs
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            if name.trim().is_empty() || procedures.is_empty() {
                return Err(bad());
            }
            let (mechanism, as_written) = match mechanism.trim().split_once('/') {
                None => (mechanism.trim(), false),
                Some((m, "as-written")) if m.trim() == "rp" => (m.trim(), true),
                Some((_, option)) => {
                    return Err(Error::Config(format!(
                        "bad group `{part}`: unknown option `/{option}` (only rp/as-written)"
                    )))
                }
            };
            groups.push(GroupDef {
                name: name.trim().to_string(),
                mechanism: mechanism.parse()?,
                procedures,
                as_written,
            });
        }
        if groups.is_empty() {
            return Err(Error::Config("a grouping needs at least one group".into()));
        }
        Ok(Grouping { groups })
    }

    /// Every one of `procedures` in one 2PL group (what `callas` runs when
    /// no grouping is given: nexus locks everywhere, no in-group gain).
    pub fn one_group<'a>(procedures: impl IntoIterator<Item = &'a str>) -> Grouping {
        Grouping::single(Mechanism::TwoPl, procedures)
    }

    /// Every one of `procedures` in one group named `all`, run by
    /// `mechanism`.
    pub fn single<'a>(
        mechanism: Mechanism,
        procedures: impl IntoIterator<Item = &'a str>,
    ) -> Grouping {
        let mut procedures: Vec<String> = procedures.into_iter().map(str::to_string).collect();
        procedures.sort();
        Grouping {
            groups: vec![GroupDef {
                name: "all".into(),
                mechanism,
                procedures,
                as_written: false,
            }],
        }
    }

    /// Checks the grouping against the application: every procedure named
    /// exists and is in one group only.
    pub fn validate<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let known: std::collections::HashSet<&str> = known.into_iter().collect();
        let mut seen = HashMap::new();
        for g in &self.groups {
            for p in &g.procedures {
                if !known.contains(p.as_str()) {
                    let mut names: Vec<&str> = known.iter().copied().collect();
                    names.sort();
                    return Err(Error::Config(format!(
                        "group `{}` names procedure `{p}`, which the application does not have (it has: {})",
                        g.name,
                        names.join(", ")
                    )));
                }
                if let Some(other) = seen.insert(p.as_str(), g.name.as_str()) {
                    return Err(Error::Config(format!(
                        "procedure `{p}` is in two groups: `{other}` and `{}`",
                        g.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The group of `procedure` (id, mechanism), `None` for the default
    /// group.
    pub fn group_of(&self, procedure: &str) -> Option<(u32, Mechanism)> {
        self.groups
            .iter()
            .position(|g| g.procedures.iter().any(|p| p == procedure))
            .map(|i| (i as u32 + 1, self.groups[i].mechanism))
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            let option = if g.as_written { "/as-written" } else { "" };
            write!(
                f,
                "{}:{}{option}={}",
                g.name,
                g.mechanism,
                g.procedures.join(",")
            )?;
        }
        Ok(())
    }
}
