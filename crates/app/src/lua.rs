//! The Lua side: values across the boundary, the functions a body may
//! call, and a pool of Lua states that run the bodies.
//!
//! ```text
//!  a call of procedure p ──► take a state from the pool (or build one)
//!     body_p(args...) as a coroutine, resumed by Bodies::run:
//!       exec("stmt", ...) yields (EXEC, "stmt", ...) ──► ProcCtx::exec
//!       ◄── resumed with the result table
//!       an engine error (an abort above all): the coroutine is dropped
//!     its return values ──► Vec<Value>; the state back to the pool
//! ```
//!
//! A body sees: its parameters as locals; `exec(name, ...)` (a result
//! table `{rows = {{...}, ...}, affected = n}`),
//! `one(name, ...)` (the first row, or nil), `abort(reason)`,
//! `begin_sub()` / `end_sub()` (Salt's alkaline subtransactions),
//! `decimal("12.50")`, `timestamp(micros)` and `NULL`. The engine's error
//! is the call's, unchanged, so the engine retries the call as it would
//! a compiled one's.
//!
//! Hot path: one resume per statement, a table per result row; no
//! callback into Rust, no lock.

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

/// A statement's result as a Lua table. A result without rows (every
/// write's) shares `no_rows`, when given, rather than making an empty
/// table per statement: it must be read-only ([`read_only_empty`]).
pub fn result_table(
    lua: &Lua,
    r: &QueryResult,
    no_rows: Option<&mlua::Table>,
) -> mlua::Result<mlua::Table> {
    // Sized for its two fields: no rehash as they go in.
    let t = lua.create_table_with_capacity(0, 2)?;
    match no_rows {
        Some(empty) if r.rows.is_empty() => t.raw_set("rows", empty)?,
        _ => {
            let rows = lua.create_table_with_capacity(r.rows.len(), 0)?;
            for (i, row) in r.rows.iter().enumerate() {
                rows.raw_set(i + 1, row_table(lua, row)?)?;
            }
            t.raw_set("rows", rows)?;
        }
    }
    t.raw_set("affected", r.affected)?;
    Ok(t)
}

/// An empty table no body can add to: assignments to it raise an error
/// (so sharing it between results cannot leak one body's rows into
/// another's).
pub fn read_only_empty(lua: &Lua) -> mlua::Result<mlua::Table> {
    lua.load(
        "return setmetatable({}, {
            __newindex = function() error(\"a statement's result rows are read-only\", 2) end,
            __metatable = false,
        })",
    )
    .set_name("=brine")
    .eval()
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

/// What a body asks of the engine: it yields `(request, ...)` and is
/// resumed with the answer by `Bodies::run`, which owns the call's
/// context. An engine error ends the call there and then: the coroutine
/// is dropped, never resumed, so nothing unwinds through Lua.
mod request {
    pub const EXEC: i64 = 1;
    pub const ONE: i64 = 2;
    pub const ABORT: i64 = 3;
    pub const BEGIN_SUB: i64 = 4;
    pub const END_SUB: i64 = 5;
}

/// The body's functions, as requests to the engine (`request`).
fn prelude() -> String {
    use request::*;
    format!(
        "local yield = coroutine.yield
function exec(name, ...) return yield({EXEC}, name, ...) end
function one(name, ...) return yield({ONE}, name, ...) end
function abort(reason) yield({ABORT}, tostring(reason)) end
function begin_sub() yield({BEGIN_SUB}) end
function end_sub() yield({END_SUB}) end
"
    )
}

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
    if engine {
        lua.load(prelude()).set_name("=brine").exec()?;
    }
    Ok(())
}

/// One request a body yielded, answered: the values to resume it with,
/// or the error that ends the call.
async fn answer(
    lua: &Lua,
    no_rows: &mlua::Table,
    ctx: &mut ProcCtx,
    yielded: MultiValue,
) -> Result<MultiValue> {
    let bad = |what: &str| {
        Error::Internal(format!("a body yielded {what}, not a request to the engine (exec inside a coroutine of its own?)"))
    };
    let mut it = yielded.into_iter();
    let op = match it.next() {
        Some(mlua::Value::Integer(op)) => op,
        _ => return Err(bad("a value")),
    };
    let lua_err = |e: mlua::Error| Error::Internal(e.to_string());
    match op {
        request::EXEC | request::ONE => {
            let name = match it.next() {
                Some(mlua::Value::String(s)) => s.to_str().map_err(lua_err)?.to_string(),
                _ => return Err(bad("a statement without its name")),
            };
            let args = it.map(|v| from_lua(&v)).collect::<mlua::Result<Vec<_>>>();
            let args = args.map_err(|e| Error::Internal(format!("statement `{name}`: {e}")))?;
            let r = ctx.exec(&name, args).await?;
            let v = if op == request::EXEC {
                mlua::Value::Table(result_table(lua, &r, Some(no_rows)).map_err(lua_err)?)
            } else {
                match r.rows.first() {
                    Some(row) => mlua::Value::Table(row_table(lua, row).map_err(lua_err)?),
                    None => mlua::Value::Nil,
                }
            };
            Ok(MultiValue::from_vec(vec![v]))
        }
        request::ABORT => {
            let reason = match it.next() {
                Some(mlua::Value::String(s)) => s.to_string_lossy(),
                _ => String::new(),
            };
            Err(Error::UserAbort(reason))
        }
        request::BEGIN_SUB => ctx.begin_alkaline().map(|()| MultiValue::new()),
        request::END_SUB => ctx.end_alkaline().await.map(|()| MultiValue::new()),
        _ => Err(bad("an unknown request")),
    }
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
        let mut params = self.params.join(", ");
        let mut text = self.text.clone();
        if let Some(v) = &self.variadic {
            params.push_str(if params.is_empty() { "..." } else { ", ..." });
            text = format!("local {v} = {{...}} {text}");
        }
        function_chunk(self.line, &params, &text)
    }
}

/// `text` placed at line `line` of its file, so Lua's line numbers are
/// the file's.
pub fn at_line(line: usize, text: &str) -> String {
    format!("{}{text}", "\n".repeat(line.saturating_sub(1)))
}

/// `return function(<params>) <text> end`, `text` at line `line`.
pub fn function_chunk(line: usize, params: &str, text: &str) -> String {
    at_line(line, &format!("return function({params}) {text}\nend"))
}

/// Compiles `chunk` (a `return function ... end`) in `lua`: the function.
pub fn compile(lua: &Lua, file: &str, chunk: &str) -> std::result::Result<Function, String> {
    lua.load(chunk)
        .set_name(format!("={file}"))
        .eval::<Function>()
        .map_err(|e| e.to_string())
}

/// One Lua state with every body compiled, and the coroutine its calls
/// run in (reset for each call, not made anew).
struct Vm {
    lua: Lua,
    bodies: HashMap<String, Function>,
    thread: Option<mlua::Thread>,
    /// The rows of every result without any (`read_only_empty`).
    no_rows: mlua::Table,
}

impl Vm {
    fn new(file: &str, sources: &[BodySource]) -> std::result::Result<Vm, String> {
        let lua = new_state();
        install(&lua, true).map_err(|e| e.to_string())?;
        let mut bodies = HashMap::new();
        for s in sources {
            bodies.insert(s.procedure.clone(), compile(&lua, file, &s.chunk())?);
        }
        let no_rows = read_only_empty(&lua).map_err(|e| e.to_string())?;
        Ok(Vm {
            lua,
            bodies,
            thread: None,
            no_rows,
        })
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

    /// Runs `procedure`'s body for one call: its coroutine resumed with
    /// each request's answer until it returns (or the engine ends it).
    pub async fn run(
        &self,
        procedure: &str,
        mut ctx: ProcCtx,
        args: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let mut vm = self.take()?;
        let internal = |e: mlua::Error| Error::Internal(format!("procedure `{procedure}`: {e}"));
        let body = vm
            .bodies
            .get(procedure)
            .cloned()
            .ok_or_else(|| Error::UnknownProcedure(procedure.to_string()))?;
        let thread = match vm.thread.take() {
            Some(t) if t.reset(body.clone()).is_ok() => Ok(t),
            _ => vm.lua.create_thread(body),
        };
        let out = async {
            let thread = thread.as_ref().map_err(|e| internal(e.clone()))?;
            let mut input = args
                .iter()
                .map(|v| to_lua(&vm.lua, v))
                .collect::<mlua::Result<MultiValue>>()
                .map_err(internal)?;
            loop {
                // The engine's errors never cross into Lua (`answer`): an
                // error here is the body's own (a bug, `error(...)`).
                let yielded = thread.resume::<MultiValue>(input).map_err(internal)?;
                if thread.status() != mlua::ThreadStatus::Resumable {
                    return values_of(yielded).map_err(internal);
                }
                input = answer(&vm.lua, &vm.no_rows, &mut ctx, yielded).await?;
            }
        }
        .await;
        vm.thread = thread.ok();
        let mut pool = self.pool.lock();
        if pool.len() < POOL_MAX {
            pool.push(vm);
        }
        out
    }
}
