//! The Lua side: values across the boundary, the functions a body may
//! call, and a pool of Lua states that run the bodies.
//!
//! ```text
//!  a call of procedure p ──► take a state from the pool (or build one)
//!     its context set as the state's app data
//!     body_p(args...) as a coroutine: exec("stmt", ...) awaits
//!       ProcCtx::exec; abort("why") ends it as a user abort
//!     its return values ──► Vec<Value>; the state back to the pool
//! ```
//!
//! A body sees: its parameters as locals; `exec(name, ...)` (a result
//! table `{rows = {{...}, ...}, affected = n}`),
//! `one(name, ...)` (the first row, or nil), `abort(reason)`,
//! `begin_sub()` / `end_sub()` (Salt's alkaline subtransactions),
//! `decimal("12.50")` and `NULL`. An engine error (a concurrency-control
//! abort above all) passes through the body unchanged, so the engine
//! retries the call as it would a compiled one's.

use std::collections::HashMap;
use std::sync::Arc;

use brine_cluster::ProcCtx;
use brine_cluster::QueryResult;
use brine_core::{Decimal, Error, Result, Value};
use mlua::{Function, Lua, MultiValue, UserData, UserDataMethods};
use parking_lot::Mutex;

/// A DECIMAL in Lua: exact arithmetic and comparisons with decimals and
/// integers, `tostring` as SQL prints it.
#[derive(Clone, Copy, Debug)]
pub struct Dec(pub Decimal);

fn dec_of(v: &mlua::Value) -> mlua::Result<Decimal> {
    match v {
        mlua::Value::Integer(i) => Ok(Decimal::new(*i, 0)),
        mlua::Value::UserData(u) => Ok(u.borrow::<Dec>()?.0),
        mlua::Value::String(s) => Decimal::parse(&s.to_str()?)
            .ok_or_else(|| mlua::Error::runtime(format!("not a decimal: {:?}", s.to_str()))),
        other => Err(mlua::Error::runtime(format!(
            "a decimal operation on a {}",
            other.type_name()
        ))),
    }
}

fn dec_cmp(a: Decimal, b: Decimal) -> mlua::Result<std::cmp::Ordering> {
    let scale = a.scale.max(b.scale);
    match (a.units_at(scale), b.units_at(scale)) {
        (Some(x), Some(y)) => Ok(x.cmp(&y)),
        _ => Err(mlua::Error::runtime("decimal comparison out of range")),
    }
}

fn overflow() -> mlua::Error {
    mlua::Error::runtime("decimal arithmetic out of range")
}

impl UserData for Dec {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        use mlua::MetaMethod as MM;
        m.add_meta_function(MM::Add, |_, (a, b): (mlua::Value, mlua::Value)| {
            dec_of(&a)?
                .checked_add(dec_of(&b)?)
                .map(Dec)
                .ok_or_else(overflow)
        });
        m.add_meta_function(MM::Sub, |_, (a, b): (mlua::Value, mlua::Value)| {
            dec_of(&a)?
                .checked_sub(dec_of(&b)?)
                .map(Dec)
                .ok_or_else(overflow)
        });
        m.add_meta_function(MM::Mul, |_, (a, b): (mlua::Value, mlua::Value)| {
            dec_of(&a)?
                .checked_mul(dec_of(&b)?)
                .map(Dec)
                .ok_or_else(overflow)
        });
        m.add_meta_method(MM::Unm, |_, d, ()| {
            Ok(Dec(Decimal::new(-d.0.units, d.0.scale)))
        });
        m.add_meta_function(MM::Eq, |_, (a, b): (mlua::Value, mlua::Value)| {
            Ok(dec_cmp(dec_of(&a)?, dec_of(&b)?)? == std::cmp::Ordering::Equal)
        });
        m.add_meta_function(MM::Lt, |_, (a, b): (mlua::Value, mlua::Value)| {
            Ok(dec_cmp(dec_of(&a)?, dec_of(&b)?)? == std::cmp::Ordering::Less)
        });
        m.add_meta_function(MM::Le, |_, (a, b): (mlua::Value, mlua::Value)| {
            Ok(dec_cmp(dec_of(&a)?, dec_of(&b)?)? != std::cmp::Ordering::Greater)
        });
        m.add_meta_method(MM::ToString, |_, d, ()| Ok(d.0.to_string()));
    }
}

/// A TIMESTAMP in Lua (`timestamp(microseconds since the epoch)`).
#[derive(Clone, Copy, Debug)]
pub struct Ts(pub i64);

impl UserData for Ts {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(mlua::MetaMethod::ToString, |_, t, ()| Ok(t.0.to_string()));
    }
}

/// A brine value as Lua sees it.
pub fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<mlua::Value> {
    Ok(match v {
        Value::Null | Value::Max => mlua::Value::NULL,
        Value::Int(i) => mlua::Value::Integer(*i),
        Value::Timestamp(t) => mlua::Value::UserData(lua.create_userdata(Ts(*t))?),
        Value::Decimal(d) => mlua::Value::UserData(lua.create_userdata(Dec(*d))?),
        Value::Str(s) => mlua::Value::String(lua.create_string(s.as_bytes())?),
    })
}

/// A Lua value as brine sees it: integers, strings, decimals, booleans
/// (as 0 and 1), nil and `NULL`. A float is refused unless it is whole:
/// SQL has no floating-point type here.
pub fn from_lua(v: &mlua::Value) -> mlua::Result<Value> {
    Ok(match v {
        mlua::Value::Nil => Value::Null,
        mlua::Value::LightUserData(p) if p.0.is_null() => Value::Null,
        mlua::Value::Integer(i) => Value::Int(*i),
        mlua::Value::Number(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::Int(*f as i64),
        mlua::Value::Boolean(b) => Value::Int(i64::from(*b)),
        mlua::Value::String(s) => Value::str(&s.to_str()?),
        mlua::Value::UserData(u) => match u.borrow::<Ts>() {
            Ok(t) => Value::Timestamp(t.0),
            Err(_) => Value::Decimal(u.borrow::<Dec>()?.0),
        },
        other => {
            return Err(mlua::Error::runtime(format!(
                "a {} ({other:?}) is not a SQL value: use an integer, a string, decimal(\"1.50\") or NULL",
                other.type_name()
            )))
        }
    })
}

/// A statement's result as a Lua table.
pub fn result_table(lua: &Lua, r: &QueryResult) -> mlua::Result<mlua::Table> {
    let t = lua.create_table()?;
    let rows = lua.create_table_with_capacity(r.rows.len(), 0)?;
    for (i, row) in r.rows.iter().enumerate() {
        rows.raw_set(i + 1, row_table(lua, row)?)?;
    }
    t.raw_set("rows", rows)?;
    t.raw_set("affected", r.affected)?;
    Ok(t)
}

pub fn row_table(lua: &Lua, row: &[Value]) -> mlua::Result<mlua::Table> {
    let t = lua.create_table_with_capacity(row.len(), 0)?;
    for (j, v) in row.iter().enumerate() {
        t.raw_set(j + 1, to_lua(lua, v)?)?;
    }
    Ok(t)
}

/// Values from a Lua call's results: one table is a list of values; else
/// each result is one.
pub fn values_of(results: MultiValue) -> mlua::Result<Vec<Value>> {
    let results: Vec<mlua::Value> = results.into_iter().collect();
    match results.as_slice() {
        [mlua::Value::Table(t)] => {
            let n = t.raw_len();
            (1..=n).map(|i| from_lua(&t.raw_get(i)?)).collect()
        }
        _ => results.iter().map(from_lua).collect(),
    }
}

/// The brine error inside a Lua error, if a callback raised one
/// (`exec`'s engine errors, `abort`), else the Lua error as a message.
pub fn engine_error(e: &mlua::Error) -> std::result::Result<Error, String> {
    match e {
        mlua::Error::CallbackError { cause, .. } => engine_error(cause),
        mlua::Error::WithContext { cause, .. } => engine_error(cause),
        mlua::Error::ExternalError(x) => match x.downcast_ref::<Error>() {
            Some(e) => Ok(e.clone()),
            None => Err(x.to_string()),
        },
        other => Err(other.to_string()),
    }
}

/// The context of the call a state runs, as its app data, and the
/// engine error that ended it, if one did.
struct Current {
    ctx: Arc<tokio::sync::Mutex<ProcCtx>>,
    failed: Mutex<Option<Error>>,
    /// Told when `failed` is set: the call is dropped there and then.
    stop: Arc<tokio::sync::Notify>,
}

fn current(lua: &Lua) -> mlua::Result<Arc<tokio::sync::Mutex<ProcCtx>>> {
    lua.app_data_ref::<Current>()
        .map(|c| c.ctx.clone())
        .ok_or_else(|| mlua::Error::runtime("exec outside a procedure's call"))
}

/// Keeps `e` as the call's outcome and ends the call: `Bodies::run`
/// drops the body's coroutine, which unwinds nothing. (A Lua error would
/// cost a traceback, and every concurrency-control abort comes here.)
/// The nil it returns is seen only where nothing stops the call (the
/// Lua side then raises `ENGINE`).
fn stash(lua: &Lua, e: Error) -> mlua::Result<mlua::Value> {
    match lua.app_data_ref::<Current>() {
        Some(c) => {
            *c.failed.lock() = Some(e);
            c.stop.notify_one();
            Ok(mlua::Value::Nil)
        }
        None => Err(mlua::Error::external(e)),
    }
}

/// Stashes `e` and never resumes the body: `Bodies::run` drops it. (Out
/// of a call, `e` is raised as a Lua error.)
async fn halt(lua: &Lua, e: Error) -> mlua::Result<mlua::Value> {
    let v = stash(lua, e)?;
    if lua.app_data_ref::<Current>().is_some() {
        std::future::pending::<()>().await;
    }
    Ok(v)
}

/// Values of a Lua argument list.
fn args_of(args: &MultiValue) -> mlua::Result<Vec<Value>> {
    args.iter().map(from_lua).collect()
}

/// The body's functions, over the raw callbacks: a nil from one means
/// the engine ended the call (its error stashed), raised as `ENGINE`.
const PRELUDE: &str = r#"
local raw_exec, raw_one, raw_abort, raw_begin, raw_end, ENGINE =
  __exec, __one, __abort, __begin_sub, __end_sub, __ENGINE
__exec, __one, __abort, __begin_sub, __end_sub = nil, nil, nil, nil, nil
function exec(name, ...)
  local r = raw_exec(name, ...)
  if r == nil then error(ENGINE, 0) end
  return r
end
function one(name, ...)
  local found, row = raw_one(name, ...)
  if found == nil then error(ENGINE, 0) end
  return row
end
function abort(reason)
  raw_abort(tostring(reason))
  error(ENGINE, 0)
end
function begin_sub()
  if raw_begin() == nil then error(ENGINE, 0) end
end
function end_sub()
  if raw_end() == nil then error(ENGINE, 0) end
end
"#;

/// The globals every state has: `decimal`, `NULL`, `timestamp`; with
/// `engine`, the functions a body calls (`exec`, `one`, `abort`,
/// `begin_sub`, `end_sub`).
pub fn install(lua: &Lua, engine: bool) -> mlua::Result<()> {
    let g = lua.globals();
    g.set(
        "decimal",
        lua.create_function(|_, v: mlua::Value| Ok(Dec(dec_of(&v)?)))?,
    )?;
    g.set("NULL", mlua::Value::NULL)?;
    g.set(
        "timestamp",
        lua.create_function(|_, micros: i64| Ok(Ts(micros)))?,
    )?;
    if !engine {
        return Ok(());
    }
    g.set(
        "__exec",
        lua.create_async_function(|lua, (name, args): (String, MultiValue)| async move {
            let ctx = current(&lua)?;
            let args = args_of(&args)?;
            let r = ctx.lock().await.exec(&name, args).await;
            match r {
                Ok(r) => Ok(mlua::Value::Table(result_table(&lua, &r)?)),
                Err(e) => halt(&lua, e).await,
            }
        })?,
    )?;
    g.set(
        "__one",
        lua.create_async_function(|lua, (name, args): (String, MultiValue)| async move {
            let ctx = current(&lua)?;
            let args = args_of(&args)?;
            let r = ctx.lock().await.exec(&name, args).await;
            match r {
                Ok(r) => match r.rows.first() {
                    Some(row) => Ok((
                        mlua::Value::Boolean(true),
                        mlua::Value::Table(row_table(&lua, row)?),
                    )),
                    None => Ok((mlua::Value::Boolean(true), mlua::Value::Nil)),
                },
                Err(e) => Ok((halt(&lua, e).await?, mlua::Value::Nil)),
            }
        })?,
    )?;
    g.set(
        "__abort",
        lua.create_async_function(|lua, reason: String| async move {
            halt(&lua, Error::UserAbort(reason)).await
        })?,
    )?;
    g.set(
        "__begin_sub",
        lua.create_async_function(|lua, ()| async move {
            let r = current(&lua)?.lock().await.begin_alkaline();
            match r {
                Ok(()) => Ok(mlua::Value::Boolean(true)),
                Err(e) => halt(&lua, e).await,
            }
        })?,
    )?;
    g.set(
        "__end_sub",
        lua.create_async_function(|lua, ()| async move {
            let r = current(&lua)?.lock().await.end_alkaline().await;
            match r {
                Ok(()) => Ok(mlua::Value::Boolean(true)),
                Err(e) => halt(&lua, e).await,
            }
        })?,
    )?;
    g.set("__ENGINE", lua.create_table()?)?;
    lua.load(PRELUDE).set_name("=brine").exec()?;
    Ok(())
}

/// A Lua state with the libraries bodies and benchmarks use (no io, os
/// or debug: a body touches the database only through its statements)
/// and the generational collector, which suits their short-lived tables.
pub fn new_state() -> Lua {
    use mlua::StdLib;
    let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
    let lua = Lua::new_with(libs, mlua::LuaOptions::default()).unwrap_or_else(|_| Lua::new());
    lua.gc_gen(0, 0);
    lua
}

/// A body's source: its chunk (padded so Lua's line numbers are the
/// file's) and its parameters' names.
#[derive(Clone, Debug)]
pub struct BodySource {
    pub procedure: String,
    pub params: Vec<String>,
    /// A last parameter taking the remaining arguments, as a list.
    pub variadic: Option<String>,
    /// The body's first line in the file.
    pub line: usize,
    pub text: String,
}

impl BodySource {
    /// `return function(<params>) <body> end`, its body at its line.
    fn chunk(&self) -> String {
        let mut s = "\n".repeat(self.line.saturating_sub(1));
        s.push_str("return function(");
        let mut params = self.params.clone();
        if self.variadic.is_some() {
            params.push("...".into());
        }
        s.push_str(&params.join(", "));
        s.push_str(") ");
        if let Some(v) = &self.variadic {
            s.push_str(&format!("local {v} = {{...}} "));
        }
        s.push_str(&self.text);
        s.push_str("\nend");
        s
    }
}

/// Compiles `chunk` (a `return function ... end`) in `lua`: the function.
pub fn compile(lua: &Lua, file: &str, chunk: &str) -> std::result::Result<Function, String> {
    lua.load(chunk)
        .set_name(format!("={file}"))
        .eval::<Function>()
        .map_err(|e| e.to_string())
}

/// One Lua state with every body compiled.
struct Vm {
    lua: Lua,
    bodies: HashMap<String, Function>,
}

impl Vm {
    fn new(file: &str, sources: &[BodySource]) -> std::result::Result<Vm, String> {
        let lua = new_state();
        install(&lua, true).map_err(|e| e.to_string())?;
        let mut bodies = HashMap::new();
        for s in sources {
            bodies.insert(s.procedure.clone(), compile(&lua, file, &s.chunk())?);
        }
        Ok(Vm { lua, bodies })
    }
}

/// The most idle states kept.
const POOL_MAX: usize = 256;

/// Runs the bodies of one application.
pub struct Bodies {
    file: String,
    sources: Vec<BodySource>,
    pool: Mutex<Vec<Vm>>,
}

impl Bodies {
    /// Compiles every body once: an error is the file's and line's.
    pub fn new(file: &str, sources: Vec<BodySource>) -> std::result::Result<Arc<Bodies>, String> {
        let vm = Vm::new(file, &sources)?;
        Ok(Arc::new(Bodies {
            file: file.to_string(),
            sources,
            pool: Mutex::new(vec![vm]),
        }))
    }

    fn take(&self) -> Result<Vm> {
        if let Some(vm) = self.pool.lock().pop() {
            return Ok(vm);
        }
        Vm::new(&self.file, &self.sources).map_err(Error::Internal)
    }

    /// Runs `procedure`'s body for one call.
    pub async fn run(&self, procedure: &str, ctx: ProcCtx, args: Vec<Value>) -> Result<Vec<Value>> {
        let vm = self.take()?;
        let body = vm
            .bodies
            .get(procedure)
            .cloned()
            .ok_or_else(|| Error::UnknownProcedure(procedure.to_string()))?;
        let lua_args = args
            .iter()
            .map(|v| to_lua(&vm.lua, v))
            .collect::<mlua::Result<MultiValue>>()
            .map_err(|e| Error::Internal(format!("procedure `{procedure}`: {e}")))?;
        let stop = Arc::new(tokio::sync::Notify::new());
        vm.lua.set_app_data(Current {
            ctx: Arc::new(tokio::sync::Mutex::new(ctx)),
            failed: Mutex::new(None),
            stop: stop.clone(),
        });
        let results = {
            let call = body.call_async::<MultiValue>(lua_args);
            tokio::pin!(call);
            tokio::select! {
                biased;
                // The engine ended the call: the coroutine is dropped
                // where it stands (its state is reset, the VM reusable).
                () = stop.notified() => Ok(MultiValue::new()),
                r = &mut call => r,
            }
        };
        let failed = vm
            .lua
            .remove_app_data::<Current>()
            .and_then(|c| c.failed.into_inner());
        let out = match (failed, results.and_then(values_of)) {
            // The engine's error ended the body (or the body went on after
            // one, which it cannot see: the call failed all the same).
            (Some(engine), _) => Err(engine),
            (None, Ok(values)) => Ok(values),
            (None, Err(e)) => Err(match engine_error(&e) {
                Ok(engine) => engine,
                Err(message) => Error::Internal(format!("procedure `{procedure}`: {message}")),
            }),
        };
        let mut pool = self.pool.lock();
        if pool.len() < POOL_MAX {
            pool.push(vm);
        }
        out
    }
}
