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
//! Hot path, per statement: one resume; the statement's name as a number;
//! its result built with Lua's C API under one lock (a write's is shared);
//! no callback into Rust. Per call: garbage is collected between calls,
//! not during them (`Vm::collect_between_calls`).

use std::sync::Arc;

use brine_cluster::ProcCtx;
use brine_cluster::QueryResult;
use brine_core::{Decimal, Error, Result, Value};
use mlua::{Function, Lua, MultiValue, UserData, UserDataMethods};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

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
        m.add_meta_function(MM::Add, |lua, (a, b): (mlua::Value, mlua::Value)| {
            let d = dec_of(&a)?.checked_add(dec_of(&b)?).ok_or_else(overflow)?;
            to_lua(lua, &Value::Decimal(d))
        });
        m.add_meta_function(MM::Sub, |lua, (a, b): (mlua::Value, mlua::Value)| {
            let d = dec_of(&a)?.checked_sub(dec_of(&b)?).ok_or_else(overflow)?;
            to_lua(lua, &Value::Decimal(d))
        });
        m.add_meta_function(MM::Mul, |lua, (a, b): (mlua::Value, mlua::Value)| {
            let d = dec_of(&a)?.checked_mul(dec_of(&b)?).ok_or_else(overflow)?;
            to_lua(lua, &Value::Decimal(d))
        });
        m.add_meta_method(MM::Unm, |lua, d, ()| {
            to_lua(lua, &Value::Decimal(Decimal::new(-d.0.units, d.0.scale)))
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
        Value::Timestamp(t) => Boxed::get(lua, BoxedKey::Timestamp(*t), || Ts(*t))?,
        Value::Decimal(d) => Boxed::get(lua, BoxedKey::Decimal(d.units, d.scale), || Dec(*d))?,
        Value::Str(s) => mlua::Value::String(lua.create_string(s.as_bytes())?),
    })
}

/// What a decimal or timestamp is, exactly (a decimal's scale included:
/// `1.5` and `1.50` print differently).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum BoxedKey {
    Decimal(i64, u8),
    Timestamp(i64),
}

/// The decimals and timestamps a state has made, by value. Either is an
/// immutable userdata (no method changes it, and Lua cannot give a
/// userdata fields), so one object per value serves every use. Rows and
/// sums then make no new userdata once their values have been seen: each
/// mlua userdata has a finalizer, and running the finalizers of a call's
/// garbage was most of what collecting it cost.
#[derive(Default)]
struct Boxed(FxHashMap<BoxedKey, mlua::AnyUserData>);

impl Boxed {
    /// Values kept, at most: past it the map starts again.
    const MAX: usize = 4096;

    fn get<T: UserData + Send + 'static>(
        lua: &Lua,
        key: BoxedKey,
        make: impl FnOnce() -> T,
    ) -> mlua::Result<mlua::Value> {
        let Some(mut boxed) = lua.app_data_mut::<Boxed>() else {
            return lua.create_userdata(make()).map(mlua::Value::UserData);
        };
        if let Some(u) = boxed.0.get(&key) {
            return Ok(mlua::Value::UserData(u.clone()));
        }
        if boxed.0.len() >= Self::MAX {
            boxed.0.clear();
        }
        let u = lua.create_userdata(make())?;
        boxed.0.insert(key, u.clone());
        Ok(mlua::Value::UserData(u))
    }
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

/// The rows of a result, and whether to wrap them as
/// `{rows = ..., affected = n}` or give the first row alone.
enum Shape {
    Result(u64),
    Row,
}

/// The most decimals and timestamps one `build` passes on Lua's stack
/// (which holds at most a million values); a result with more is built a
/// row at a time.
const MAX_BOXED: usize = 8192;

/// Builds `rows` as Lua tables with Lua's C API, under one lock of the
/// state and without a reference per value: integers, strings and NULL
/// are pushed as they are; decimals and timestamps, which are mlua
/// userdata, are made first and passed in as the call's arguments.
fn build(lua: &Lua, rows: &[&[Value]], shape: Shape) -> mlua::Result<mlua::Table> {
    let mut boxed = MultiValue::new();
    let values = rows.iter().flat_map(|row| row.iter());
    for v in values.filter(|v| matches!(v, Value::Decimal(_) | Value::Timestamp(_))) {
        // Too many to pass on Lua's stack at once: a row at a time (a
        // single row never has this many).
        if let (true, Shape::Result(affected)) = (boxed.len() == MAX_BOXED, &shape) {
            let tables = rows
                .iter()
                .map(|row| build(lua, &[row], Shape::Row))
                .collect::<mlua::Result<Vec<_>>>()?;
            return lua.create_table_from([
                (
                    "rows",
                    mlua::Value::Table(lua.create_sequence_from(tables)?),
                ),
                ("affected", mlua::Value::Integer(*affected as i64)),
            ]);
        }
        boxed.push_back(to_lua(lua, v)?);
    }
    let n_boxed = boxed.len() as i32;
    // SAFETY: `f` runs in protected mode on a stack holding the `n_boxed`
    // userdata at 1..=n_boxed, with LUA_MINSTACK (20) free slots, of which
    // it uses at most 4; it holds no Rust value that needs dropping, so a
    // Lua error (out of memory) unwinding through it leaks nothing. It
    // leaves exactly one value, the table.
    unsafe {
        lua.exec_raw::<mlua::Table>(boxed, |state| {
            use mlua::ffi;
            let mut next_boxed = 1;
            let mut push_row = |row: &[Value]| {
                ffi::lua_createtable(state, row.len() as i32, 0);
                for (j, v) in row.iter().enumerate() {
                    match v {
                        Value::Null | Value::Max => {
                            ffi::lua_pushlightuserdata(state, std::ptr::null_mut())
                        }
                        Value::Int(i) => ffi::lua_pushinteger(state, *i),
                        Value::Str(s) => {
                            ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
                        }
                        Value::Decimal(_) | Value::Timestamp(_) => {
                            ffi::lua_pushvalue(state, next_boxed);
                            next_boxed += 1;
                        }
                    }
                    ffi::lua_rawseti(state, -2, j as ffi::lua_Integer + 1);
                }
            };
            match shape {
                Shape::Row => push_row(rows.first().copied().unwrap_or_default()),
                Shape::Result(affected) => {
                    ffi::lua_createtable(state, 0, 2);
                    ffi::lua_createtable(state, rows.len() as i32, 0);
                    for (i, row) in rows.iter().enumerate() {
                        push_row(row);
                        ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
                    }
                    ffi::lua_setfield(state, -2, c"rows".as_ptr());
                    ffi::lua_pushinteger(state, affected as ffi::lua_Integer);
                    ffi::lua_setfield(state, -2, c"affected".as_ptr());
                }
            }
            if n_boxed > 0 {
                ffi::lua_replace(state, 1);
                ffi::lua_settop(state, 1);
            }
        })
    }
}

/// A statement's result as a Lua table, `{rows = {...}, affected = n}`.
/// A result without rows (every write's) is one of `shared`'s, when
/// given, rather than a table made per statement.
pub fn result_table(
    lua: &Lua,
    r: &QueryResult,
    shared: Option<&SharedResults>,
) -> mlua::Result<mlua::Table> {
    if let Some(shared) = shared {
        if let Some(t) = shared.without_rows(r) {
            return Ok(t.clone());
        }
    }
    let rows: Vec<&[Value]> = r.rows.iter().map(Vec::as_slice).collect();
    build(lua, &rows, Shape::Result(r.affected))
}

/// The results of statements that return no rows, made once per state:
/// `{rows = {}, affected = n}` for small `n`. Bodies share them, so they
/// are read-only: each is an empty table whose fields are read through
/// `__index`, and whose assignments (to `rows`, `affected`, or the rows
/// table) raise an error, so no body's writes can reach another's
/// results.
pub struct SharedResults {
    /// By affected count, from 0.
    by_affected: Vec<mlua::Table>,
}

impl SharedResults {
    /// Results shared for affected counts up to this.
    const MAX_AFFECTED: u64 = 16;

    pub fn new(lua: &Lua) -> mlua::Result<SharedResults> {
        let by_affected = lua
            .load(format!(
                "local function read_only() error(\"a statement's result is read-only\", 2) end
local no_rows = setmetatable({{}}, {{ __newindex = read_only, __metatable = false }})
local out = {{}}
for n = 0, {max} do
  out[n + 1] = setmetatable({{}}, {{
    __index = {{ rows = no_rows, affected = n }},
    __newindex = read_only,
    __metatable = false,
  }})
end
return out",
                max = Self::MAX_AFFECTED
            ))
            .set_name("=brine")
            .eval::<Vec<mlua::Table>>()?;
        Ok(SharedResults { by_affected })
    }

    fn without_rows(&self, r: &QueryResult) -> Option<&mlua::Table> {
        if !r.rows.is_empty() || r.affected > Self::MAX_AFFECTED {
            return None;
        }
        self.by_affected.get(r.affected as usize)
    }
}

pub fn row_table(lua: &Lua, row: &[Value]) -> mlua::Result<mlua::Table> {
    build(lua, &[row], Shape::Row)
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

/// The body's functions, as requests to the engine (`request`). A
/// statement's name travels as its number in the state's list of
/// statement names (`ids`, given to the chunk), so the engine reads an
/// integer rather than a string per statement; a name no procedure
/// declares travels as itself, for the engine's error.
fn prelude() -> String {
    use request::*;
    format!(
        "local ids = ...
local yield = coroutine.yield
function exec(name, ...) return yield({EXEC}, ids[name] or name, ...) end
function one(name, ...) return yield({ONE}, ids[name] or name, ...) end
function abort(reason) yield({ABORT}, tostring(reason)) end
function begin_sub() yield({BEGIN_SUB}) end
function end_sub() yield({END_SUB}) end
"
    )
}

/// The globals every state has: `decimal`, `NULL`, `timestamp`.
pub fn install(lua: &Lua) -> mlua::Result<()> {
    lua.set_app_data(Boxed::default());
    let g = lua.globals();
    g.set(
        "decimal",
        lua.create_function(|lua, v: mlua::Value| to_lua(lua, &Value::Decimal(dec_of(&v)?)))?,
    )?;
    g.set("NULL", mlua::Value::NULL)?;
    g.set(
        "timestamp",
        lua.create_function(|lua, micros: i64| to_lua(lua, &Value::Timestamp(micros)))?,
    )?;
    Ok(())
}

/// The functions a body calls (`exec`, `one`, `abort`, `begin_sub`,
/// `end_sub`), for a state whose statement names are `statements`
/// (numbered from 1 in requests).
fn install_requests(lua: &Lua, statements: &[String]) -> mlua::Result<()> {
    let ids = lua.create_table_from(
        statements
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i as i64 + 1)),
    )?;
    lua.load(prelude()).set_name("=brine").call(ids)
}

/// One request a body yielded, answered: the values to resume it with,
/// or the error that ends the call.
async fn answer(
    lua: &Lua,
    shared: &SharedResults,
    statements: &[String],
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
            let named = it.next();
            let borrowed;
            let name: &str = match &named {
                Some(mlua::Value::Integer(id)) => usize::try_from(*id - 1)
                    .ok()
                    .and_then(|i| statements.get(i))
                    .ok_or_else(|| bad("an unknown statement number"))?,
                // Borrowed from Lua, not copied: the string lives in the
                // yielded values until the statement is answered.
                Some(mlua::Value::String(s)) => {
                    borrowed = s.to_str().map_err(lua_err)?;
                    &borrowed
                }
                _ => return Err(bad("a statement without its name")),
            };
            let args = it.map(|v| from_lua(&v)).collect::<mlua::Result<Vec<_>>>();
            let args = args.map_err(|e| Error::Internal(format!("statement `{name}`: {e}")))?;
            let r = ctx.exec(name, args).await?;
            let v = if op == request::EXEC {
                mlua::Value::Table(result_table(lua, &r, Some(shared)).map_err(lua_err)?)
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

/// The globals bodies use most, made locals of their chunk (so upvalues
/// of the function in it): an upvalue is an index where a global is a
/// lookup by name in `_ENV` at every use.
pub const BODY_LOCALS: &str = "exec, one, abort, begin_sub, end_sub, decimal, timestamp, NULL, \
     ipairs, pairs, next, error, assert, tostring, tonumber, type, select, table, string, math";

/// `chunk` with `names` (globals, comma-separated) as its locals, on its
/// first line (so its line numbers are unchanged).
pub fn with_locals(names: &str, chunk: &str) -> String {
    format!("local {names} = {names}; {chunk}")
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
    /// The names of the statements it declares.
    pub statements: Vec<String>,
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
        with_locals(BODY_LOCALS, &function_chunk(self.line, &params, &text))
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
    bodies: FxHashMap<String, Function>,
    thread: Option<mlua::Thread>,
    /// The results of statements without rows.
    shared: SharedResults,
    /// The heap size at which the state is collected before its next
    /// call ([`Vm::collect_between_calls`]).
    gc_limit: usize,
}

/// The most garbage a body state holds before it is collected between
/// calls (less when its live heap is small, see `collect_between_calls`).
const GC_SLACK: usize = 1 << 20;

impl Vm {
    fn new(
        file: &str,
        sources: &[BodySource],
        statements: &[String],
    ) -> std::result::Result<Vm, String> {
        let lua = new_state();
        // Collected between calls (`collect_between_calls`); Lua's own
        // collector only as a backstop for a call that makes garbage
        // without end, when the heap is ten times what was live.
        lua.gc_inc(1000, 0, 0);
        install(&lua).map_err(|e| e.to_string())?;
        install_requests(&lua, statements).map_err(|e| e.to_string())?;
        let mut bodies = FxHashMap::default();
        for s in sources {
            bodies.insert(s.procedure.clone(), compile(&lua, file, &s.chunk())?);
        }
        let shared = SharedResults::new(&lua).map_err(|e| e.to_string())?;
        Ok(Vm {
            lua,
            bodies,
            thread: None,
            shared,
            gc_limit: 0,
        })
    }

    /// A call's garbage is collected before a later call starts, when it
    /// has grown past `gc_limit`, rather than by the collector's steps
    /// inside calls: a body runs inside a transaction, with its locks
    /// held, and a collection between calls holds none. It also costs
    /// less: the live heap (the compiled bodies, mostly) is marked once
    /// per `GC_SLACK` of garbage, where the generational collector marked
    /// its young objects every few calls.
    fn collect_between_calls(&mut self) {
        if self.lua.used_memory() > self.gc_limit {
            // A collection's error is a finalizer's; bodies have none.
            let _ = self.lua.gc_collect();
            // Below the backstop's threshold (ten times live), so that
            // collections happen here, between calls.
            let live = self.lua.used_memory();
            self.gc_limit = live + (live * 8).clamp(GC_SLACK / 16, GC_SLACK);
        }
    }
}

/// The most idle states kept.
const POOL_MAX: usize = 256;

/// Runs the bodies of one application.
pub struct Bodies {
    file: String,
    sources: Vec<BodySource>,
    /// Every statement name any body declares, sorted: requests number
    /// them from 1 (`install_requests`).
    statements: Vec<String>,
    pool: Mutex<Vec<Vm>>,
}

impl Bodies {
    /// Compiles every body once: an error is the file's and line's.
    pub fn new(file: &str, sources: Vec<BodySource>) -> std::result::Result<Arc<Bodies>, String> {
        let mut statements: Vec<String> = sources
            .iter()
            .flat_map(|s| s.statements.iter().cloned())
            .collect();
        statements.sort_unstable();
        statements.dedup();
        let vm = Vm::new(file, &sources, &statements)?;
        Ok(Arc::new(Bodies {
            file: file.to_string(),
            sources,
            statements,
            pool: Mutex::new(vec![vm]),
        }))
    }

    fn take(&self) -> Result<Vm> {
        let pooled = self.pool.lock().pop();
        if let Some(mut vm) = pooled {
            vm.collect_between_calls();
            return Ok(vm);
        }
        Vm::new(&self.file, &self.sources, &self.statements).map_err(Error::Internal)
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
                input = answer(&vm.lua, &vm.shared, &self.statements, &mut ctx, yielded).await?;
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
