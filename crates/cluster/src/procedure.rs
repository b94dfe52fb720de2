//! Procedures: named transaction templates with declared statements.
//!
//! A procedure is the unit of work and of analysis (as in VoltDB, H-Store and
//! Calvin): its statements are declared up front, so analyses can read their
//! access descriptors, and its body may execute only those. The body is an
//! async Rust closure, deterministic given its arguments and statement
//! results, and may be run more than once (retries after a
//! concurrency-control abort).
//!
//! ```ignore
//! ProcedureDef::new("deposit")
//!     .statement("bump", "UPDATE account SET balance = balance + $amt WHERE id = $id")
//!     .body(|mut ctx, args| async move {
//!         ctx.exec("bump", vec![args[1].clone(), args[0].clone()]).await?;
//!         Ok(vec![])
//!     })
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use brine_core::{Catalog, Error, Result, Value};
use brine_sql::Plan;

use crate::coordinator::ProcCtx;
use crate::protocol::Isolation;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A procedure body: given a context and the call's arguments, executes
/// declared statements and returns the procedure's result values.
pub type ProcBody = Arc<dyn Fn(ProcCtx, Vec<Value>) -> BoxFuture<Result<Vec<Value>>> + Send + Sync>;

#[derive(Clone)]
pub struct ProcedureDef {
    pub name: String,
    /// `(statement name, SQL)`, in declaration order.
    pub statements: Vec<(String, String)>,
    pub body: ProcBody,
    /// A BASE procedure (Salt): its body marks alkaline subtransactions
    /// with `ProcCtx::begin_alkaline` / `end_alkaline`. Under `acid` the
    /// marks are ignored and the whole body is one ACID transaction.
    pub base: bool,
    /// A single-key operation that a protocol with native operations
    /// (Mediator) runs natively: never aborted, no transaction. Elsewhere
    /// a transaction like any other.
    pub native: bool,
    /// Other bodies of the same procedure that run its statements in
    /// another order (see [`ProcedureDef::reordered`]).
    pub reorderings: Vec<Reordering>,
    /// The isolation the procedure needs, if less than the cluster's: it
    /// runs at the weaker of the two (see [`ProcedureDef::isolation`]).
    pub isolation: Option<Isolation>,
    /// What the static analyses need to know of the body beyond its
    /// statements (loops, rollbacks, partitioning arguments), when the
    /// application declares it (an application file; the built-in
    /// workloads' notes are kept by `brine_analysis::workloads`).
    pub notes: Option<brine_analysis::ProcNotes>,
}

/// A body equivalent to a procedure's own (same arguments, results and
/// effects) that runs the statements in another order. Callas' analysis
/// (seed 002 section 6.1, "identifies better performing subtransaction
/// orderings") chooses, per Runtime Pipelining group, the order whose
/// chopping runs best; every other protocol runs the procedure's own body.
/// The sources' tool rewrites the code; brine's bodies are Rust, so the
/// author writes the orders the body can take and the analysis chooses.
#[derive(Clone)]
pub struct Reordering {
    /// Shown where the choice is reported (`brine analyze`, the log).
    pub name: String,
    /// Every declared statement once, in the order this body runs them.
    pub order: Vec<String>,
    pub body: ProcBody,
}

impl std::fmt::Debug for Reordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reordering")
            .field("name", &self.name)
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

impl ProcedureDef {
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let missing = name.clone();
        ProcedureDef {
            name,
            statements: Vec::new(),
            base: false,
            native: false,
            reorderings: Vec::new(),
            isolation: None,
            notes: None,
            body: Arc::new(move |_, _| {
                let missing = missing.clone();
                Box::pin(async move {
                    Err(Error::Internal(format!(
                        "procedure `{missing}` has no body"
                    )))
                })
            }),
        }
    }

    /// Marks the procedure BASE (Salt). See [`ProcedureDef::base`] field.
    pub fn base(mut self) -> Self {
        self.base = true;
        self
    }

    /// Marks the procedure a native single-key operation (Mediator). See
    /// [`ProcedureDef::native`] field.
    pub fn native(mut self) -> Self {
        self.native = true;
        self
    }

    /// The procedure needs no more than `isolation`: it runs at the weaker
    /// of this and the cluster's level, never at a stronger one. TPC-C's
    /// stock-level needs only read committed (clause 3.4.1: Level 1
    /// isolation relative to every other transaction), and its long scan
    /// then holds no read lock past each statement. A recorded history
    /// marks its attempts (`rc`), so the checker does not hold it to the
    /// run's level. Under Callas every transaction runs at the cluster's
    /// level: its analysis, group dependencies and chopping assume one
    /// level for all.
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = Some(isolation);
        self
    }

    pub fn statement(mut self, name: impl Into<String>, sql: impl Into<String>) -> Self {
        self.statements.push((name.into(), sql.into()));
        self
    }

    pub fn body<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ProcCtx, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Value>>> + Send + 'static,
    {
        self.body = Arc::new(move |ctx, args| Box::pin(f(ctx, args)));
        self
    }

    /// Offers `body`, which runs the declared statements in `order` and is
    /// otherwise equivalent to this procedure's body, as a [`Reordering`]
    /// named `name`. Checked when the procedure is prepared: `order` names
    /// every declared statement exactly once.
    pub fn reordered(mut self, name: impl Into<String>, order: &[&str], body: ProcBody) -> Self {
        self.reorderings.push(Reordering {
            name: name.into(),
            order: order.iter().map(|s| s.to_string()).collect(),
            body,
        });
        self
    }

    /// What the static analysis reads of the procedure: its statements and
    /// its reorderings' orders.
    pub fn source(&self) -> brine_analysis::ProcSource {
        brine_analysis::ProcSource {
            name: self.name.clone(),
            statements: self.statements.clone(),
            reorderings: self
                .reorderings
                .iter()
                .map(|r| (r.name.clone(), r.order.clone()))
                .collect(),
            notes: self.notes.clone(),
        }
    }

    /// Checks every reordering's order against the declared statements.
    fn check_reorderings(&self) -> Result<()> {
        for r in &self.reorderings {
            let bad = |msg: String| {
                Err(Error::Schema(format!(
                    "procedure `{}`, reordering `{}`: {msg}",
                    self.name, r.name
                )))
            };
            for (i, name) in r.order.iter().enumerate() {
                if !self.statements.iter().any(|(n, _)| n == name) {
                    return bad(format!("names undeclared statement `{name}`"));
                }
                if r.order[..i].contains(name) {
                    return bad(format!("names statement `{name}` twice"));
                }
            }
            if let Some((missing, _)) = self.statements.iter().find(|(n, _)| !r.order.contains(n)) {
                return bad(format!("leaves out statement `{missing}`"));
            }
        }
        Ok(())
    }
}

/// A procedure with its statements prepared against the catalog.
pub struct PreparedProc {
    pub name: String,
    pub base: bool,
    /// See [`ProcedureDef::native`].
    pub native: bool,
    /// See [`ProcedureDef::isolation`].
    pub isolation: Option<Isolation>,
    pub statements: HashMap<String, Arc<Plan>>,
    pub statement_order: Vec<String>,
    pub body: ProcBody,
}

impl PreparedProc {
    pub fn prepare(catalog: &Catalog, def: ProcedureDef) -> Result<PreparedProc> {
        def.check_reorderings()?;
        let mut statements = HashMap::new();
        let mut statement_order = Vec::new();
        for (name, sql) in &def.statements {
            let plan = brine_sql::prepare(catalog, sql).map_err(|e| {
                Error::Sql(format!("procedure `{}`, statement `{name}`: {e}", def.name))
            })?;
            if statements.insert(name.clone(), Arc::new(plan)).is_some() {
                return Err(Error::Schema(format!(
                    "procedure `{}` declares statement `{name}` twice",
                    def.name
                )));
            }
            statement_order.push(name.clone());
        }
        Ok(PreparedProc {
            name: def.name,
            base: def.base,
            native: def.native,
            isolation: def.isolation,
            statements,
            statement_order,
            body: def.body,
        })
    }

    /// The level the procedure runs at in a cluster at `cluster`.
    pub fn isolation_in(&self, cluster: Isolation) -> Isolation {
        self.isolation.map_or(cluster, |i| i.min(cluster))
    }

    pub fn plan(&self, statement: &str) -> Result<&Arc<Plan>> {
        self.statements
            .get(statement)
            .ok_or_else(|| Error::UndeclaredStatement {
                procedure: self.name.clone(),
                statement: statement.to_string(),
            })
    }
}

/// An application: a schema and its procedures.
#[derive(Clone, Default)]
pub struct Application {
    pub name: String,
    pub ddl: String,
    pub procedures: Vec<ProcedureDef>,
}
