//! `brine bench app --app FILE`: an application file's `[bench]` as a
//! workload. Its Lua loads the data (`setup`), makes each call's
//! arguments (`args`), judges each call's result (`expect`) and checks
//! the data after the run (`check`).

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brine_bench::error::{BenchError, Result};
use brine_bench::workload::{BoxFuture, ClientGen, TxnRequest, Workload};
use brine_cluster::{Application, CallOutcome, Cluster, Txn};
use brine_core::{Row, Value};
use mlua::{Function, Lua, MultiValue};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value as Json};

use crate::file::{AppFile, BenchSpec, Chunk};
use crate::lua::{self, from_lua, install, result_table, row_table, values_of};

/// The globals a benchmark's Lua uses most, as its chunks' locals
/// ([`lua::with_locals`]).
const BENCH_LOCALS: &str = "random, decimal, timestamp, NULL, ipairs, pairs, next, error, \
     assert, tostring, tonumber, type, select, table, string, math";

/// `c` as the body of `function(<params>)`, at its line.
fn function_chunk(params: &str, c: &Chunk) -> String {
    lua::with_locals(BENCH_LOCALS, &lua::function_chunk(c.line, params, &c.text))
}

/// Rows `setup` inserted, by table, in the order tables were first used.
#[derive(Default)]
struct Inserted(Vec<(String, Vec<Row>)>);

/// A client's random numbers, for `random(lo, hi)`.
struct Dice(SmallRng);

fn bench_globals(lua: &Lua) -> mlua::Result<()> {
    install(lua)?;
    lua.globals().set(
        "random",
        lua.create_function(|lua, (lo, hi): (i64, i64)| {
            if lo > hi {
                return Err(mlua::Error::runtime(format!("random({lo}, {hi}): lo > hi")));
            }
            let mut dice = lua
                .app_data_mut::<Dice>()
                .ok_or_else(|| mlua::Error::runtime("random outside a client"))?;
            Ok(dice.0.gen_range(lo..=hi))
        })?,
    )?;
    lua.globals().set(
        "insert",
        lua.create_function(|lua, (table, row): (String, mlua::Table)| {
            let n = row.raw_len();
            let values = (1..=n)
                .map(|i| from_lua(&row.raw_get(i)?))
                .collect::<mlua::Result<Row>>()?;
            let mut ins = lua
                .app_data_mut::<Inserted>()
                .ok_or_else(|| mlua::Error::runtime("insert outside setup"))?;
            match ins.0.iter_mut().find(|(t, _)| *t == table) {
                Some((_, rows)) => rows.push(values),
                None => ins.0.push((table, vec![values])),
            }
            Ok(())
        })?,
    )?;
    Ok(())
}

/// Compiles every chunk of `spec` (errors name the file and line).
pub fn compile_all(file: &str, spec: &BenchSpec) -> std::result::Result<(), String> {
    let lua = lua::new_state();
    bench_globals(&lua).map_err(|e| e.to_string())?;
    let chunks = spec
        .setup
        .iter()
        .chain(spec.check.iter())
        .chain(spec.client.iter())
        .map(|c| ("", c))
        .chain(spec.args.iter().map(|(_, c)| ("", c)))
        .chain(spec.expect.iter().map(|(_, c)| ("result", c)));
    for (params, c) in chunks {
        lua::compile(&lua, file, &function_chunk(params, c))?;
    }
    Ok(())
}

/// What the clients' `expect` (or their `violation(...)`) found wrong.
#[derive(Default)]
struct Violations {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Violations {
    fn record(&self, what: String) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock();
        if first.len() < QUOTED {
            first.push(what);
        }
    }
}

/// An application file's benchmark.
pub struct AppWorkload {
    app: Application,
    file: String,
    spec: BenchSpec,
    /// Names given `'static` once: procedures, then the application.
    names: FxHashMap<String, &'static str>,
    app_name: &'static str,
    violations: Arc<Violations>,
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

impl AppWorkload {
    /// The workload of `app`, which must have a `[bench]` table.
    pub fn new(app: AppFile) -> Result<AppWorkload> {
        let spec = app.bench.ok_or_else(|| {
            BenchError::Config(format!(
                "{}: no [bench] table: say what `brine bench` runs (docs/apps.md)",
                app.file
            ))
        })?;
        let names = app
            .application
            .procedures
            .iter()
            .map(|p| (p.name.clone(), leak(&p.name)))
            .collect();
        Ok(AppWorkload {
            app_name: leak(&app.application.name),
            app: app.application,
            file: app.file,
            spec,
            names,
            violations: Arc::default(),
        })
    }

    /// Loads `path` and makes its workload.
    pub fn open(path: &std::path::Path) -> Result<AppWorkload> {
        let app = crate::load(path).map_err(|e| BenchError::Config(e.to_string()))?;
        AppWorkload::new(app)
    }

    fn name_of(&self, procedure: &str) -> &'static str {
        self.names.get(procedure).copied().unwrap_or("?")
    }
}

fn lua_failed(what: &str, e: &mlua::Error) -> BenchError {
    match lua::engine_error(e) {
        Ok(engine) => BenchError::Invariant(format!("{what}: {engine}")),
        Err(message) => BenchError::Invariant(format!("{what}: {message}")),
    }
}

impl Workload for AppWorkload {
    fn name(&self) -> &'static str {
        self.app_name
    }

    fn params(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("app".into(), json!(self.file));
        m
    }

    fn mix(&self) -> Vec<(&'static str, f64)> {
        let total: f64 = self.spec.mix.iter().map(|(_, w)| w).sum();
        self.spec
            .mix
            .iter()
            .map(|(n, w)| (self.name_of(n), w / total))
            .collect()
    }

    fn application(&self) -> Application {
        self.app.clone()
    }

    fn load<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.violations.count.store(0, Ordering::Relaxed);
            self.violations.first.lock().clear();
            let Some(setup) = &self.spec.setup else {
                return Ok(());
            };
            let lua = lua::new_state();
            bench_globals(&lua).map_err(|e| lua_failed("setup", &e))?;
            lua.set_app_data(Inserted::default());
            lua.set_app_data(Dice(SmallRng::seed_from_u64(0)));
            let f = lua::compile(&lua, &self.file, &function_chunk("", setup))
                .map_err(BenchError::Config)?;
            f.call::<()>(()).map_err(|e| lua_failed("setup", &e))?;
            let inserted = lua.remove_app_data::<Inserted>().unwrap_or_default();
            for (table, rows) in inserted.0 {
                for chunk in rows.chunks(10_000) {
                    cluster.load(&table, chunk.to_vec()).await.map_err(|e| {
                        BenchError::Config(format!("{}: setup: table `{table}`: {e}", self.file))
                    })?;
                }
            }
            Ok(())
        })
    }

    /// The file's checks are the user's to make valid on any data the
    /// application can reach (they run before the run too, with
    /// `--check`): a run may start from what an earlier one left.
    fn reuse<'a>(&'a self, _cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.violations.count.store(0, Ordering::Relaxed);
            self.violations.first.lock().clear();
            Ok(())
        })
    }

    fn client(&self, index: u32, rng: SmallRng) -> Box<dyn ClientGen> {
        Box::new(AppClient::new(self, index, rng))
    }

    fn check<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let wrong = self.violations.count.load(Ordering::Relaxed);
            if wrong > 0 {
                return Err(BenchError::Invariant(format!(
                    "{wrong} calls' results were wrong ([bench] expect or violation(); first: {})",
                    self.violations.first.lock().join("; ")
                )));
            }
            let Some(check) = &self.spec.check else {
                return Ok(());
            };
            run_check(&self.file, check, cluster).await
        })
    }

    fn metrics(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert(
            "expect_failures".into(),
            json!(self.violations.count.load(Ordering::Relaxed)),
        );
        m
    }

    fn elia_routes(&self) -> Option<brine_cluster::protocols::elia::Routes> {
        let weights = self.spec.mix.iter().map(|(n, w)| (n.clone(), *w)).collect();
        brine_cluster::protocols::elia::Routes::analyzed(
            &self.app.name,
            &self.app.ddl,
            &self.app.procedures,
            &weights,
        )
        .ok()
    }
}

/// One client: its own Lua state with the argument makers and the
/// result judges compiled (or the client's own `next` and `observe`).
struct AppClient {
    lua: Lua,
    /// `[bench] client`'s functions: the session drives the calls.
    session: Option<(Function, Option<Function>)>,
    names: FxHashMap<String, &'static str>,
    /// The procedures' names as Lua strings, made once for `observe`.
    lua_names: FxHashMap<&'static str, mlua::String>,
    rng: SmallRng,
    /// `(procedure, cumulative share)`.
    mix: Vec<(&'static str, f64)>,
    args: FxHashMap<&'static str, Function>,
    expect: FxHashMap<&'static str, Function>,
    violations: Arc<Violations>,
}

/// How many violations a run quotes.
const QUOTED: usize = 3;

impl AppClient {
    fn new(w: &AppWorkload, index: u32, mut rng: SmallRng) -> AppClient {
        let lua = lua::new_state();
        let compiled = |params: &str, c: &Chunk| -> Option<Function> {
            match lua::compile(&lua, &w.file, &function_chunk(params, c)) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::error!("{e}");
                    None
                }
            }
        };
        if let Err(e) = bench_globals(&lua) {
            tracing::error!("{}: {e}", w.file);
        }
        lua.set_app_data(w.violations.clone());
        let violation = lua.create_function(|lua, what: String| {
            if let Some(v) = lua.app_data_ref::<Arc<Violations>>() {
                v.record(what);
            }
            Ok(())
        });
        if let Ok(f) = violation {
            let _ = lua.globals().set("violation", f);
        }
        let _ = lua.globals().set("client", index);
        lua.set_app_data(Dice(SmallRng::seed_from_u64(rng.gen())));
        let mut acc = 0.0;
        let mix = w
            .mix()
            .into_iter()
            .map(|(n, s)| {
                acc += s;
                (n, acc)
            })
            .collect();
        let args = w
            .spec
            .args
            .iter()
            .filter_map(|(n, c)| Some((w.name_of(n), compiled("", c)?)))
            .collect();
        let expect = w
            .spec
            .expect
            .iter()
            .filter_map(|(n, c)| Some((w.name_of(n), compiled("result", c)?)))
            .collect();
        let session = w.spec.client.as_ref().and_then(|c| {
            let run = lua
                .load(lua::with_locals(
                    BENCH_LOCALS,
                    &lua::at_line(c.line, &c.text),
                ))
                .set_name(format!("={}", w.file))
                .exec()
                .and_then(|()| {
                    let g = lua.globals();
                    Ok((
                        g.get::<Function>("next_call")?,
                        g.get::<Option<Function>>("observe")?,
                    ))
                });
            run.map_err(|e| tracing::error!("[bench] client: {e}")).ok()
        });
        let lua_names = w
            .names
            .values()
            .filter_map(|&n| Some((n, lua.create_string(n).ok()?)))
            .collect();
        AppClient {
            lua,
            session,
            names: w.names.clone(),
            lua_names,
            rng,
            mix,
            args,
            expect,
            violations: w.violations.clone(),
        }
    }
}

impl ClientGen for AppClient {
    fn next(&mut self) -> TxnRequest {
        if let Some((next, _)) = &self.session {
            return match next
                .call::<(mlua::String, Option<mlua::Table>)>(())
                .and_then(|(p, args)| {
                    let args = match args {
                        Some(t) => values_of(MultiValue::from_vec(vec![mlua::Value::Table(t)]))?,
                        None => Vec::new(),
                    };
                    let p = p.to_str()?;
                    let procedure = self.names.get(&*p).copied();
                    Ok((procedure.unwrap_or_else(|| leak(&p)), args))
                }) {
                Ok((procedure, args)) => TxnRequest { procedure, args },
                Err(e) => {
                    // The call then fails, naming the error.
                    tracing::error!("[bench] client: next_call(): {e}");
                    TxnRequest {
                        procedure: "?",
                        args: Vec::new(),
                    }
                }
            };
        }
        let x: f64 = self.rng.gen();
        let procedure = self
            .mix
            .iter()
            .find(|(_, upto)| x < *upto)
            .or(self.mix.last())
            .map_or("?", |(n, _)| *n);
        let args = match self.args.get(procedure) {
            None => Vec::new(),
            Some(f) => match f.call::<MultiValue>(()).and_then(values_of) {
                Ok(v) => v,
                Err(e) => {
                    // The call then fails on its arity, naming the procedure.
                    tracing::error!(procedure, "[bench.args]: {e}");
                    vec![Value::Null; 64]
                }
            },
        };
        TxnRequest { procedure, args }
    }

    fn observe(&mut self, procedure: &'static str, outcome: &brine_core::Result<CallOutcome>) {
        if let Some((_, Some(observe))) = &self.session {
            let seen = match outcome {
                Ok(o) => row_table(&self.lua, &o.values).map(|t| (Some(t), None)),
                Err(e) => Ok((None, Some(e.to_string()))),
            };
            let name = match self.lua_names.get(procedure) {
                Some(n) => Ok(n.clone()),
                None => self.lua.create_string(procedure),
            };
            if let Err(e) = seen.and_then(|(r, e)| observe.call::<()>((name?, r, e))) {
                tracing::error!("[bench] client: observe(): {e}");
            }
        }
        let (Some(f), Ok(o)) = (self.expect.get(procedure), outcome) else {
            return;
        };
        let verdict = row_table(&self.lua, &o.values)
            .and_then(|t| f.call::<Option<String>>(t))
            .unwrap_or_else(|e| Some(format!("[bench.expect] failed: {e}")));
        if let Some(wrong) = verdict {
            self.violations.record(format!("{procedure}: {wrong}"));
        }
    }
}

/// The interactive transaction a check's queries run in.
struct CheckTxn(Arc<tokio::sync::Mutex<Option<Txn>>>);
struct CheckCluster(Cluster);

async fn run_check(file: &str, check: &Chunk, cluster: &Cluster) -> Result<()> {
    let lua = lua::new_state();
    let setup = || -> mlua::Result<()> {
        install(&lua)?;
        let g = lua.globals();
        g.set(
            "query",
            lua.create_async_function(|lua, (sql, args): (String, MultiValue)| async move {
                let txn = lua
                    .app_data_ref::<CheckTxn>()
                    .map(|t| t.0.clone())
                    .ok_or_else(|| mlua::Error::runtime("query outside the check"))?;
                let args = args
                    .iter()
                    .map(from_lua)
                    .collect::<mlua::Result<Vec<_>>>()?;
                let mut guard = txn.lock().await;
                let t = guard
                    .as_mut()
                    .ok_or_else(|| mlua::Error::runtime("the check's transaction ended"))?;
                let r = t.execute(&sql, args).await.map_err(mlua::Error::external)?;
                result_table(&lua, &r, None)
            })?,
        )?;
        g.set(
            "call",
            lua.create_async_function(|lua, (name, args): (String, MultiValue)| async move {
                let cluster = lua
                    .app_data_ref::<CheckCluster>()
                    .map(|c| c.0.clone())
                    .ok_or_else(|| mlua::Error::runtime("call outside the check"))?;
                let args = args
                    .iter()
                    .map(from_lua)
                    .collect::<mlua::Result<Vec<_>>>()?;
                let o = cluster
                    .client()
                    .call(&name, args)
                    .await
                    .map_err(mlua::Error::external)?;
                row_table(&lua, &o.values)
            })?,
        )?;
        g.set(
            "fail",
            lua.create_function(|_, message: String| -> mlua::Result<()> {
                Err(mlua::Error::external(brine_core::Error::Constraint(
                    message,
                )))
            })?,
        )?;
        Ok(())
    };
    setup().map_err(|e| lua_failed("check", &e))?;
    let txn = Arc::new(tokio::sync::Mutex::new(Some(cluster.client().begin())));
    lua.set_app_data(CheckTxn(txn.clone()));
    lua.set_app_data(CheckCluster(cluster.clone()));
    let f = lua::compile(&lua, file, &function_chunk("", check)).map_err(BenchError::Config)?;
    let outcome = f.call_async::<()>(()).await;
    let txn = txn.lock().await.take();
    match outcome {
        Ok(()) => {
            if let Some(t) = txn {
                t.commit()
                    .await
                    .map_err(|e| BenchError::Invariant(format!("check: commit: {e}")))?;
            }
            Ok(())
        }
        Err(e) => {
            if let Some(t) = txn {
                t.abort().await;
            }
            Err(match lua::engine_error(&e) {
                Ok(brine_core::Error::Constraint(m)) => {
                    BenchError::Invariant(format!("{file}: check: {m}"))
                }
                Ok(engine) => BenchError::Invariant(format!("{file}: check: {engine}")),
                Err(message) => BenchError::Invariant(format!("check: {message}")),
            })
        }
    }
}
