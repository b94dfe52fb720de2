//! Where each call runs: a procedure's class (seed 004 section 3.2) and
//! its partitioning parameters, and the routing function from their values
//! to a server.
//!
//! ```text
//!  class  params      where it runs                    how
//!  C      none        the server the call reached       at once
//!  L      [k] or none server_of(args[k]), else reached  at once
//!  G      [k] or none server_of(args[k]), else reached  at the token
//!  L/G    [k1, k2]    server_of(args[k1])               at the token
//!                     (the seed's local case is unsound: see `place`)
//! ```
//!
//! The routing function is the engine's `partition_of` over the servers:
//! an integer's remainder, a hash otherwise. It is deterministic and the
//! same everywhere, so an application can generate server-specific ids
//! (ids that route to the server that made them; seed 004 section 6).

use std::collections::HashMap;
use std::fmt;

use brine_core::schema::partition_of;
use brine_core::{Error, Result, Value};

/// A procedure's operation class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Conflicts with nothing: runs wherever the call arrived.
    Commutative,
    /// Conflicts only with operations of its own server.
    Local,
    /// Runs at the token holder; its updates ride the token.
    Global,
    /// Local when its partitioning parameters route to one server, global
    /// otherwise (decided per call).
    LocalGlobal,
}

impl Class {
    pub fn short(self) -> &'static str {
        match self {
            Class::Commutative => "C",
            Class::Local => "L",
            Class::Global => "G",
            Class::LocalGlobal => "L/G",
        }
    }

    fn parse(s: &str) -> Option<Class> {
        match s.trim() {
            "C" | "c" => Some(Class::Commutative),
            "L" | "l" => Some(Class::Local),
            "G" | "g" => Some(Class::Global),
            "L/G" | "l/g" | "LG" | "lg" => Some(Class::LocalGlobal),
            _ => None,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// One procedure's class and partitioning parameters (argument indexes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub class: Class,
    pub params: Vec<usize>,
}

/// Where a call runs, and whether it waits for the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub server: u32,
    pub global: bool,
}

/// The routes of an application's procedures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    by_proc: HashMap<String, Route>,
}

impl Routes {
    pub fn new() -> Routes {
        Routes::default()
    }

    pub fn with(mut self, proc: &str, class: Class, params: &[usize]) -> Routes {
        self.by_proc.insert(
            proc.to_string(),
            Route {
                class,
                params: params.to_vec(),
            },
        );
        self
    }

    /// The procedures routed.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_proc.keys().map(String::as_str)
    }

    pub fn get(&self, proc: &str) -> Option<&Route> {
        self.by_proc.get(proc)
    }

    pub fn len(&self) -> usize {
        self.by_proc.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_proc.is_empty()
    }

    /// Parses `proc=CLASS[:k[,k2]];...`, e.g.
    /// `do_cart=L:0;do_buy_confirm=G:1;get_book=C`.
    pub fn parse(s: &str) -> Result<Routes> {
        let mut routes = Routes::new();
        for item in s.split(';').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = || {
                Error::Config(format!(
                    "elia route `{item}`: expected PROCEDURE=CLASS[:ARG[,ARG]] with CLASS one of \
                     C, L, G, L/G and ARG an argument index"
                ))
            };
            let (proc, rest) = item.split_once('=').ok_or_else(bad)?;
            let (class, params) = match rest.split_once(':') {
                Some((c, p)) => (c, p),
                None => (rest, ""),
            };
            let class = Class::parse(class).ok_or_else(bad)?;
            let params = params
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| p.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<Vec<_>>>()?;
            routes = routes.with(proc.trim(), class, &params);
        }
        routes.validate()?;
        Ok(routes)
    }

    /// Every route's parameters fit its class.
    pub fn validate(&self) -> Result<()> {
        for (name, r) in &self.by_proc {
            let ok = match r.class {
                Class::Commutative => r.params.is_empty(),
                // No parameter: it only reads what globals write
                // (replicated everywhere), so any server will do.
                Class::Local => r.params.len() <= 1,
                Class::Global => r.params.len() <= 1,
                Class::LocalGlobal => r.params.len() >= 2,
            };
            if !ok {
                return Err(Error::Config(format!(
                    "elia route of `{name}`: class {} takes {}, not {} partitioning parameters",
                    r.class,
                    match r.class {
                        Class::Commutative => "none",
                        Class::Local | Class::Global => "at most one",
                        Class::LocalGlobal => "two or more",
                    },
                    r.params.len()
                )));
            }
        }
        Ok(())
    }

    /// Where a call of `proc` with `args` runs among `servers`, when it
    /// reached server `reached`. A procedure without a route is global
    /// (the safe default: it runs in token order).
    pub fn place(&self, proc: &str, args: &[Value], servers: u32, reached: u32) -> Result<Placed> {
        self.place_as(proc, args, servers, reached, false)
    }

    /// As [`Routes::place`]; `local_lg`: an L/G call whose arguments route
    /// together runs locally, as the seed has it (`Mutation::EliaLocalLG`:
    /// unsound, for showing why brine does not).
    pub fn place_as(
        &self,
        proc: &str,
        args: &[Value],
        servers: u32,
        reached: u32,
        local_lg: bool,
    ) -> Result<Placed> {
        let Some(route) = self.by_proc.get(proc) else {
            return Ok(Placed {
                server: reached,
                global: true,
            });
        };
        let arg = |k: usize| {
            args.get(k).ok_or_else(|| Error::Arity {
                what: format!("procedure `{proc}` (its partitioning argument {k})"),
                expected: k + 1,
                got: args.len(),
            })
        };
        let server_of = |k: usize| -> Result<u32> { Ok(partition_of(arg(k)?, servers)) };
        Ok(match route.class {
            Class::Commutative => Placed {
                server: reached,
                global: false,
            },
            Class::Local => Placed {
                server: match route.params.first() {
                    Some(&k) => server_of(k)?,
                    None => reached,
                },
                global: false,
            },
            Class::Global => Placed {
                server: match route.params.first() {
                    Some(&k) => server_of(k)?,
                    None => reached,
                },
                global: true,
            },
            // Always global, at its first argument's server. The seed runs
            // it locally when its arguments route together, but then its
            // writes stay on that server while another call of the same
            // procedure, its arguments apart, runs globally elsewhere
            // over a replica without them (a lost update). Global is the
            // sound choice; the arguments are still checked.
            Class::LocalGlobal => {
                let first = server_of(route.params[0])?;
                let mut together = true;
                for &k in &route.params[1..] {
                    together &= server_of(k)? == first;
                }
                Placed {
                    server: first,
                    global: !(local_lg && together),
                }
            }
        })
    }

    /// The routes operation partitioning chose (seed 004 Algorithm 1).
    pub fn from_plan(plan: &brine_analysis::EliaPlan) -> Routes {
        use brine_analysis::OpClass;
        let mut routes = Routes::new();
        for p in &plan.procs {
            let class = match p.class {
                OpClass::Commutative => Class::Commutative,
                OpClass::Local => Class::Local,
                OpClass::Global => Class::Global,
                OpClass::LocalGlobal => Class::LocalGlobal,
            };
            let params: &[usize] = match class {
                Class::Commutative => &[],
                Class::Global => &p.params[..p.params.len().min(1)],
                _ => &p.params,
            };
            routes = routes.with(&p.name, class, params);
        }
        routes
    }

    /// The routes operation partitioning chooses for an application's
    /// procedures, each weighted by `weights` (its share of the calls; 1
    /// each when empty).
    pub fn analyzed(
        app: &str,
        ddl: &str,
        procedures: &[crate::ProcedureDef],
        weights: &HashMap<String, f64>,
    ) -> Result<Routes> {
        let sources: Vec<_> = procedures.iter().map(crate::ProcedureDef::source).collect();
        let plan = brine_analysis::workloads::elia_plan_for(app, ddl, &sources, weights)
            .map_err(|e| Error::Config(format!("elia: operation partitioning of `{app}`: {e}")))?;
        let routes = Routes::from_plan(&plan);
        routes.validate()?;
        Ok(routes)
    }

    /// `proc=CLASS:params` entries, sorted (reports).
    pub fn describe(&self) -> String {
        let mut items: Vec<String> = self
            .by_proc
            .iter()
            .map(|(n, r)| {
                let p: Vec<String> = r.params.iter().map(|k| k.to_string()).collect();
                if p.is_empty() {
                    format!("{n}={}", r.class)
                } else {
                    format!("{n}={}:{}", r.class, p.join(","))
                }
            })
            .collect();
        items.sort();
        items.join(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_place_calls() -> Result<()> {
        let r = Routes::parse("add=L:0; create=L:0; order=G:0; price=C; bid=L/G:0,1")?;
        let i = Value::Int;
        // 3 servers: an integer routes by its remainder.
        assert_eq!(
            r.place("add", &[i(7), i(1)], 3, 0)?,
            Placed {
                server: 1,
                global: false
            }
        );
        assert_eq!(
            r.place("order", &[i(5)], 3, 0)?,
            Placed {
                server: 2,
                global: true
            }
        );
        assert_eq!(
            r.place("price", &[i(5)], 3, 2)?,
            Placed {
                server: 2,
                global: false
            }
        );
        // L/G: global at the first's server, whether or not the two route
        // together (the local case would be unsound).
        let p = r.place("bid", &[i(4), i(7)], 3, 0)?;
        assert_eq!((p.server, p.global), (1, true));
        let p = r.place("bid", &[i(4), i(5)], 3, 0)?;
        assert_eq!((p.server, p.global), (1, true));
        assert!(matches!(
            r.place("bid", &[i(4)], 3, 0),
            Err(Error::Arity { .. })
        ));
        // No route: global where it arrived.
        assert!(r.place("other", &[], 3, 1)?.global);
        // A missing partitioning argument is an error, not a panic.
        assert!(matches!(
            r.place("add", &[], 3, 0),
            Err(Error::Arity { .. })
        ));
        Ok(())
    }

    #[test]
    fn bad_routes_are_refused() {
        for bad in [
            "x", "x=Q", "x=L:1,2", "x=C:1", "x=L/G:1", "x=L:a", "x=G:1,2",
        ] {
            assert!(Routes::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Routes::parse("b=G;a=L:1").map(|r| r.describe()).ok(),
            Some("a=L:1;b=G".to_string())
        );
    }
}
