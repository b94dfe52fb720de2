//! The application file: TOML, with Lua bodies in its strings.
//!
//! ```toml
//! name = "bank"
//! schema = """
//! CREATE TABLE account (id INT, balance DECIMAL(12,2) NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
//! """
//!
//! [procedure.deposit]
//! params = ["id INT", "amount DECIMAL"]
//! statements.add = "UPDATE account SET balance = balance + $amount WHERE id = $id"
//! body = """
//! local r = exec("add", amount, id)
//! if r.affected ~= 1 then abort("no account " .. id) end
//! """
//! ```
//!
//! Loading checks everything before anything runs: the schema parses,
//! every statement prepares against it, every body compiles, every name a
//! note or the mix gives is declared. The first error is returned with its
//! file and line; nothing is half-loaded.

use std::sync::Arc;

use brine_analysis::ProcNotes;
use brine_cluster::{Application, Isolation, ProcedureDef};
use brine_core::Error;
use indexmap::IndexMap;
use serde::Deserialize;
use toml::Spanned;

use crate::error::AppError;
use crate::lua::{Bodies, BodySource};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    name: Spanned<String>,
    schema: Spanned<String>,
    #[serde(default)]
    procedure: IndexMap<String, Spanned<RawProc>>,
    #[serde(default)]
    bench: Option<Spanned<RawBench>>,
    /// Label -> a Callas grouping (`name:mechanism=proc,proc;...`), run
    /// as `callas@LABEL`.
    #[serde(default)]
    groupings: IndexMap<String, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProc {
    /// `"name TYPE"`, in call order; the last may be `"name... TYPE"`:
    /// any number of arguments, a list in the body.
    #[serde(default)]
    params: Vec<Spanned<String>>,
    statements: IndexMap<String, Spanned<String>>,
    body: Spanned<String>,
    /// A BASE procedure (Salt): `begin_sub()` / `end_sub()` in its body
    /// mark its alkaline subtransactions.
    #[serde(default)]
    base: bool,
    /// The isolation it needs, if weaker than the cluster's.
    #[serde(default)]
    isolation: Option<Spanned<String>>,
    // What the analyses cannot read off the statements (ProcNotes).
    #[serde(default)]
    order: Option<Vec<String>>,
    #[serde(default)]
    loops: Vec<Vec<String>>,
    #[serde(default)]
    rollbacks: Vec<String>,
    #[serde(default)]
    unique_keys: Vec<(String, String)>,
    #[serde(default)]
    independent: Vec<(String, String)>,
    /// The parameters operation partitioning may route by (default: all).
    #[serde(default)]
    partition_args: Option<Vec<String>>,
    #[serde(default)]
    not_args: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBench {
    /// Procedure name -> share of the calls.
    mix: IndexMap<String, f64>,
    /// Lua run once at load: `insert(table, {values...})`.
    #[serde(default)]
    setup: Option<Spanned<String>>,
    /// Procedure name -> Lua returning a call's arguments (`random(lo,
    /// hi)`, `client`, `clients` available).
    #[serde(default)]
    args: IndexMap<String, Spanned<String>>,
    /// Procedure name -> Lua given `result` (the values the call
    /// returned): returns nil, or a string saying what is wrong.
    #[serde(default)]
    expect: IndexMap<String, Spanned<String>>,
    /// Lua run after the run: `query(sql, ...)`, `call(procedure, ...)`,
    /// `fail(message)`.
    #[serde(default)]
    check: Option<Spanned<String>>,
    /// Lua run once per client, defining `next()` (the next call: its
    /// procedure and arguments) and optionally `observe(procedure,
    /// result, err)`: a client with a state of its own (a session),
    /// instead of the mix and `args`.
    #[serde(default)]
    client: Option<Spanned<String>>,
}

/// A Lua chunk of the file and where it starts.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub line: usize,
    pub text: String,
}

/// What `brine bench app` runs: the mix and the Lua that loads data,
/// makes arguments and checks the result.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    pub mix: Vec<(String, f64)>,
    pub setup: Option<Chunk>,
    pub args: Vec<(String, Chunk)>,
    pub expect: Vec<(String, Chunk)>,
    pub check: Option<Chunk>,
    pub client: Option<Chunk>,
}

/// A loaded application.
pub struct AppFile {
    /// The file's path, as errors name it.
    pub file: String,
    pub application: Application,
    /// Each procedure's parameter names, in call order (a variadic last
    /// one as `name...`).
    pub params: Vec<(String, Vec<String>)>,
    pub bench: Option<BenchSpec>,
    /// Callas groupings by label (`callas@LABEL`).
    pub groupings: Vec<(String, brine_cluster::Grouping)>,
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The line a string value's content starts on (after `"""` and the
/// newline that may follow it).
fn content_line(text: &str, span: std::ops::Range<usize>) -> usize {
    let token = &text[span.start.min(text.len())..span.end.min(text.len())];
    let line = line_of(text, span.start);
    let multi = token.starts_with("\"\"\"") || token.starts_with("'''");
    if multi && (token[3..].starts_with('\n') || token[3..].starts_with("\r\n")) {
        line + 1
    } else {
        line
    }
}

const TYPES: [&str; 4] = ["INT", "DECIMAL", "TEXT", "TIMESTAMP"];

fn lua_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            s,
            "and"
                | "break"
                | "do"
                | "else"
                | "elseif"
                | "end"
                | "false"
                | "for"
                | "function"
                | "goto"
                | "if"
                | "in"
                | "local"
                | "nil"
                | "not"
                | "or"
                | "repeat"
                | "return"
                | "then"
                | "true"
                | "until"
                | "while"
        )
}

impl AppFile {
    /// Parses and checks `text`, the contents of `file`.
    pub fn parse(file: &str, text: &str) -> Result<AppFile, AppError> {
        let at = |span: std::ops::Range<usize>, message: String| AppError::At {
            file: file.to_string(),
            line: line_of(text, span.start),
            message,
        };
        let raw: RawApp = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => at(span, e.message().to_string()),
            None => AppError::File {
                file: file.to_string(),
                message: e.to_string(),
            },
        })?;
        let name = raw.name.get_ref().trim().to_string();
        if name.is_empty() {
            return Err(at(
                raw.name.span(),
                "the application's name is empty".into(),
            ));
        }
        let schema = raw.schema.get_ref().clone();
        let catalog = brine_sql::parse_schema(&schema)
            .map_err(|e| at(raw.schema.span(), format!("schema: {e}")))?;
        if raw.procedure.is_empty() {
            return Err(AppError::File {
                file: file.to_string(),
                message: "no [procedure.NAME] table: an application needs a procedure".into(),
            });
        }
        let mut sources = Vec::new();
        let mut defs = Vec::new();
        let mut params_of = Vec::new();
        let mut arities = Vec::new();
        for (pname, spanned) in &raw.procedure {
            let p = spanned.get_ref();
            let here =
                |message: String| at(spanned.span(), format!("procedure `{pname}`: {message}"));
            if !lua_name(pname) {
                return Err(here("its name must be a Lua identifier".into()));
            }
            let mut params = Vec::new();
            let mut variadic = None;
            for (i, param) in p.params.iter().enumerate() {
                let words: Vec<&str> = param.get_ref().split_whitespace().collect();
                let name = |n: &str| match n.strip_suffix("...") {
                    Some(v) if i + 1 == p.params.len() => lua_name(v),
                    Some(_) => false,
                    None => lua_name(n),
                };
                let ok = match words.as_slice() {
                    [n, t] => name(n) && TYPES.contains(&t.to_ascii_uppercase().as_str()),
                    [n] => name(n),
                    _ => false,
                };
                if !ok {
                    return Err(at(
                        param.span(),
                        format!(
                            "procedure `{pname}`: parameter {:?}: write \"name TYPE\" (the last may be \"name... TYPE\") with TYPE one of {}",
                            param.get_ref(),
                            TYPES.join(", ")
                        ),
                    ));
                }
                let n = words[0].trim_end_matches("...");
                if params.iter().any(|p| p == n) {
                    return Err(at(
                        param.span(),
                        format!("procedure `{pname}`: parameter `{n}` twice"),
                    ));
                }
                if words[0].ends_with("...") {
                    variadic = Some(n.to_string());
                } else {
                    params.push(n.to_string());
                }
            }
            let mut def = ProcedureDef::new(pname.clone());
            for (sname, sql) in &p.statements {
                brine_sql::prepare(&catalog, sql.get_ref()).map_err(|e| {
                    at(
                        sql.span(),
                        format!("procedure `{pname}`, statement `{sname}`: {e}"),
                    )
                })?;
                def = def.statement(sname.clone(), sql.get_ref().clone());
            }
            let declared = |n: &str| p.statements.contains_key(n);
            let names = p
                .order
                .iter()
                .flatten()
                .chain(p.loops.iter().flatten())
                .chain(&p.rollbacks)
                .chain(p.unique_keys.iter().flat_map(|(a, b)| [a, b]))
                .chain(p.independent.iter().flat_map(|(a, b)| [a, b]))
                .chain(p.not_args.iter().map(|(s, _)| s));
            for n in names {
                if !declared(n) {
                    return Err(here(format!(
                        "a note names statement `{n}`, which it does not declare"
                    )));
                }
            }
            if let Some(args) = &p.partition_args {
                if let Some(a) = args.iter().find(|a| !params.contains(a)) {
                    return Err(here(format!(
                        "partition_args names `{a}`, which is no parameter"
                    )));
                }
            }
            if p.base {
                def = def.base();
            }
            if let Some(iso) = &p.isolation {
                let level: Isolation = iso
                    .get_ref()
                    .parse()
                    .map_err(|e: Error| at(iso.span(), format!("procedure `{pname}`: {e}")))?;
                def = def.isolation(level);
            }
            def.notes = Some(notes(p, &params));
            sources.push(BodySource {
                procedure: pname.clone(),
                params: params.clone(),
                variadic: variadic.clone(),
                line: content_line(text, p.body.span()),
                text: p.body.get_ref().clone(),
                statements: p.statements.keys().cloned().collect(),
            });
            arities.push((params.len(), variadic.is_some()));
            params.extend(variadic.map(|v| format!("{v}...")));
            params_of.push((pname.clone(), params));
            defs.push(def);
        }
        let bodies = Bodies::new(file, sources).map_err(|message| AppError::File {
            file: file.to_string(),
            message,
        })?;
        let procedures = defs
            .into_iter()
            .zip(&arities)
            .map(|(def, &(fixed, variadic))| with_body(def, fixed, variadic, &bodies))
            .collect();
        let bench = match &raw.bench {
            None => None,
            Some(b) => Some(bench_spec(file, text, b, &params_of)?),
        };
        let mut groupings = Vec::new();
        for (label, spec) in &raw.groupings {
            let g = brine_cluster::Grouping::parse(spec.get_ref())
                .map_err(|e| at(spec.span(), format!("grouping `{label}`: {e}")))?;
            let known = |n: &str| params_of.iter().any(|(p, _)| p == n);
            if let Some(n) = g
                .groups
                .iter()
                .flat_map(|g| g.procedures.iter())
                .find(|n| !known(n))
            {
                return Err(at(
                    spec.span(),
                    format!("grouping `{label}`: no procedure `{n}`"),
                ));
            }
            groupings.push((label.clone(), g));
        }
        Ok(AppFile {
            file: file.to_string(),
            application: Application {
                name,
                ddl: schema,
                procedures,
            },
            params: params_of,
            bench,
            groupings,
        })
    }
}

fn notes(p: &RawProc, params: &[String]) -> ProcNotes {
    let mut n = ProcNotes::new();
    n.order = p.order.clone();
    n.loops = p.loops.clone();
    n.rollbacks = p.rollbacks.clone();
    n.unique_keys = p.unique_keys.clone();
    n.independent = p.independent.clone();
    let routable = p.partition_args.as_ref();
    n.args = Some(
        params
            .iter()
            .map(|a| match routable {
                Some(r) if !r.contains(a) => "_".to_string(),
                _ => a.clone(),
            })
            .collect(),
    );
    n.not_args = p.not_args.clone();
    n
}

/// `def` with its Lua body, run from `bodies`, checking the arity first.
/// `fixed` arguments, or at least that many if the last is `variadic`.
fn with_body(
    def: ProcedureDef,
    fixed: usize,
    variadic: bool,
    bodies: &Arc<Bodies>,
) -> ProcedureDef {
    // Shared, not copied per call: the closure runs on every call.
    let (bodies, name): (_, Arc<str>) = (bodies.clone(), Arc::from(def.name.as_str()));
    def.body(move |ctx, args| {
        let (bodies, name) = (bodies.clone(), name.clone());
        async move {
            if args.len() < fixed || (!variadic && args.len() > fixed) {
                return Err(Error::Arity {
                    what: format!("procedure `{name}`"),
                    expected: fixed,
                    got: args.len(),
                });
            }
            bodies.run(&name, ctx, args).await
        }
    })
}

fn bench_spec(
    file: &str,
    text: &str,
    b: &Spanned<RawBench>,
    params: &[(String, Vec<String>)],
) -> Result<BenchSpec, AppError> {
    let raw = b.get_ref();
    let at = |span: std::ops::Range<usize>, message: String| AppError::At {
        file: file.to_string(),
        line: line_of(text, span.start),
        message,
    };
    let known = |n: &str| params.iter().any(|(p, _)| p == n);
    if raw.mix.is_empty() {
        return Err(at(b.span(), "[bench]: the mix is empty".into()));
    }
    for (n, w) in &raw.mix {
        if !known(n) {
            return Err(at(b.span(), format!("[bench] mix: no procedure `{n}`")));
        }
        if !(w.is_finite() && *w >= 0.0) {
            return Err(at(
                b.span(),
                format!("[bench] mix: `{n}`'s share must be a number >= 0"),
            ));
        }
    }
    if raw.mix.values().sum::<f64>() <= 0.0 {
        return Err(at(b.span(), "[bench] mix: the shares add up to 0".into()));
    }
    let chunk = |s: &Spanned<String>| Chunk {
        line: content_line(text, s.span()),
        text: s.get_ref().clone(),
    };
    let named = |m: &IndexMap<String, Spanned<String>>, what: &str| {
        m.iter()
            .map(|(n, s)| {
                if known(n) {
                    Ok((n.clone(), chunk(s)))
                } else {
                    Err(at(s.span(), format!("[bench] {what}: no procedure `{n}`")))
                }
            })
            .collect::<Result<Vec<_>, AppError>>()
    };
    let spec = BenchSpec {
        mix: raw.mix.iter().map(|(n, w)| (n.clone(), *w)).collect(),
        setup: raw.setup.as_ref().map(chunk),
        args: named(&raw.args, "args")?,
        expect: named(&raw.expect, "expect")?,
        check: raw.check.as_ref().map(chunk),
        client: raw.client.as_ref().map(chunk),
    };
    // Every chunk compiles now, not at the first call.
    crate::bench::compile_all(file, &spec).map_err(|message| AppError::File {
        file: file.to_string(),
        message,
    })?;
    for (n, _) in &spec.mix {
        if spec.client.is_none()
            && !spec.args.iter().any(|(a, _)| a == n)
            && params.iter().any(|(p, ps)| p == n && !ps.is_empty())
        {
            return Err(at(
                b.span(),
                format!("[bench] mix: `{n}` takes arguments, but [bench.args] has no `{n}`"),
            ));
        }
    }
    Ok(spec)
}
