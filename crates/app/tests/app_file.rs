//! Application files: what loading refuses (with the file's line), and
//! what the Lua bodies do on an embedded cluster.

use brine_app::{AppError, AppFile};
use brine_cluster::{Cluster, ClusterConfig};
use brine_core::{Decimal, Error, Value};

const GOOD: &str = r#"name = "shop"
schema = """
CREATE TABLE item (id INT, stock INT NOT NULL, price DECIMAL(8,2), PRIMARY KEY (id)) PARTITION BY (id);
"""

[procedure.buy]
params = ["id INT", "qty INT"]
statements.stock = "SELECT stock, price FROM item WHERE id = $id"
statements.take = "UPDATE item SET stock = stock - $qty WHERE id = $id"
body = """
local row = one("stock", id)
if row == nil then abort("no item " .. id) end
if row[1] < qty then abort("only " .. row[1] .. " left") end
exec("take", qty, id)
return {row[1] - qty, row[2] * qty}
"""

[procedure.price_of]
params = ["id INT"]
statements.price = "SELECT price FROM item WHERE id = $id"
body = """
local row = one("price", id)
return {row[1]}
"""

[procedure.broken]
statements.one = "SELECT stock FROM item WHERE id = $id"
body = """
local t = nil
return {t.field}
"""
"#;

fn parse(text: &str) -> Result<AppFile, AppError> {
    AppFile::parse("shop.toml", text)
}

/// The error's text, which must say `shop.toml:LINE:`.
fn refused(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("loaded a file it should refuse"),
        Err(e) => e.to_string(),
    }
}

/// `GOOD` with `from` replaced by `to` (which must occur).
fn with(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replacen(from, to, 1)
}

#[test]
fn a_good_file_loads_with_its_procedures_and_notes() {
    let f = parse(GOOD).expect("loads");
    let names: Vec<&str> = f
        .application
        .procedures
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["buy", "price_of", "broken"]);
    let buy = &f.application.procedures[0];
    let stmts: Vec<&str> = buy.statements.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(stmts, ["stock", "take"], "declaration order is kept");
    let notes = buy.notes.as_ref().expect("notes");
    assert_eq!(
        notes.args.as_deref(),
        Some(&["id".into(), "qty".into()][..])
    );
    assert!(f.bench.is_none());
}

#[test]
fn errors_name_the_line() {
    // A TOML error.
    let e = refused(&with("[procedure.price_of]", "[procedure.price_of"));
    assert!(e.starts_with("shop.toml:18:"), "{e}");
    // A statement that does not prepare: its own line.
    let e = refused(&with(
        "FROM item WHERE id = $id\"\nbody",
        "FROM nowhere WHERE id = $id\"\nbody",
    ));
    assert!(e.starts_with("shop.toml:20:") && e.contains("price"), "{e}");
    // A Lua syntax error in a body: the line of the bad token in the file.
    let e = refused(&with("exec(\"take\", qty, id)", "exec(\"take\", qty, id"));
    assert!(
        e.contains("shop.toml:14:") || e.contains("shop.toml:15:"),
        "{e}"
    );
    // An unknown key.
    let e = refused(&with(
        "params = [\"id INT\"]",
        "params = [\"id INT\"]\nretries = 3",
    ));
    assert!(e.contains("shop.toml:2") && e.contains("retries"), "{e}");
    // A note that names an undeclared statement.
    let e = refused(&with(
        "params = [\"id INT\"]",
        "params = [\"id INT\"]\nloops = [[\"nope\"]]",
    ));
    assert!(e.contains("shop.toml:") && e.contains("nope"), "{e}");
    // A parameter without a known type.
    let e = refused(&with("\"qty INT\"", "\"qty FLOAT\""));
    assert!(
        e.starts_with("shop.toml:7:") && e.contains("qty FLOAT"),
        "{e}"
    );
    // A schema that does not parse.
    let e = refused(&with("CREATE TABLE item", "CREATE TABEL item"));
    assert!(e.starts_with("shop.toml:2:") && e.contains("schema"), "{e}");
    // A [bench] mix naming no procedure.
    let bench = format!("{GOOD}\n[bench]\nmix = {{ sell = 1.0 }}\n");
    let e = refused(&bench);
    assert!(e.contains("shop.toml:") && e.contains("sell"), "{e}");
    // A [bench] chunk that does not compile.
    let bench = format!(
        "{GOOD}\n[bench]\nmix = {{ price_of = 1.0 }}\nargs.price_of = \"\"\"\nreturn {{random(0, 9)\n\"\"\"\n"
    );
    let e = refused(&bench);
    assert!(e.contains("shop.toml:") && e.contains("line 36"), "{e}");
}

async fn shop() -> Cluster {
    let f = parse(GOOD).expect("loads");
    let c = Cluster::start(ClusterConfig::default(), f.application).expect("cluster");
    let rows = (0..4)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::Int(10),
                Value::Decimal(Decimal::new(250, 2)),
            ]
        })
        .collect();
    c.load("item", rows).await.expect("load");
    c
}

/// The start of an application file with one table, `item (id, stock)`.
const STOCK: &str = r#"name = "stock"
schema = """
CREATE TABLE item (id INT, stock INT NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
"""
"#;

/// An embedded cluster running the application in `text` (as file
/// `file`), with `rows` loaded into its table `item`.
async fn started(file: &str, text: &str, rows: Vec<Vec<Value>>) -> Cluster {
    let f = AppFile::parse(file, text).expect("loads");
    let c = Cluster::start(ClusterConfig::default(), f.application).expect("cluster");
    c.load("item", rows).await.expect("load");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_run_statements_return_values_and_abort() {
    let c = shop().await;
    let client = c.client();
    let o = client
        .call("buy", vec![Value::Int(1), Value::Int(3)])
        .await
        .expect("buy");
    assert_eq!(o.values[0], Value::Int(7));
    assert_eq!(
        o.values[1].as_decimal().map(|d| d.to_string()),
        Some("7.50".into())
    );
    // abort(): a user abort, the transaction's writes gone.
    let e = client
        .call("buy", vec![Value::Int(1), Value::Int(8)])
        .await
        .expect_err("not enough");
    assert!(
        matches!(&e, Error::UserAbort(m) if m == "only 7 left"),
        "{e}"
    );
    let e = client
        .call("buy", vec![Value::Int(99), Value::Int(1)])
        .await
        .expect_err("no item");
    assert!(
        matches!(&e, Error::UserAbort(m) if m == "no item 99"),
        "{e}"
    );
    let o = client
        .call("buy", vec![Value::Int(1), Value::Int(7)])
        .await
        .expect("the rest");
    assert_eq!(o.values[0], Value::Int(0));
    // A NULL read back is Lua's NULL, and returns as NULL.
    let mut t = client.begin();
    t.execute("UPDATE item SET price = NULL WHERE id = 2", vec![])
        .await
        .expect("update");
    t.commit().await.expect("commit");
    let o = client
        .call("price_of", vec![Value::Int(2)])
        .await
        .expect("price");
    assert_eq!(o.values, [Value::Null]);
    // A bug in a body: an error naming the file's line, not a crash.
    let e = client
        .call("broken", vec![])
        .await
        .expect_err("a Lua error");
    assert!(e.to_string().contains("shop.toml:30:"), "{e}");
    // The wrong number of arguments.
    let e = client
        .call("buy", vec![Value::Int(1)])
        .await
        .expect_err("arity");
    assert!(
        matches!(
            e,
            Error::Arity {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
}

/// Calls that conflict are aborted by the engine and run again: the Lua
/// body runs again from the start, so no stock is taken twice or lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_aborted_by_concurrency_control_runs_again() {
    let c = shop().await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let client = c.client();
        tasks.spawn(async move {
            let mut bought = 0;
            let mut attempts = 0;
            for _ in 0..5 {
                if let Ok(o) = client.call("buy", vec![Value::Int(0), Value::Int(1)]).await {
                    bought += 1;
                    attempts += o.attempts;
                }
            }
            (bought, attempts)
        });
    }
    let mut bought = 0;
    let mut attempts = 0;
    while let Some(r) = tasks.join_next().await {
        let (b, a) = r.expect("task");
        bought += b;
        attempts += a;
    }
    let left = c
        .client()
        .begin()
        .execute("SELECT stock FROM item WHERE id = 0", vec![])
        .await
        .expect("read")
        .rows[0][0]
        .clone();
    eprintln!("{bought} bought in {attempts} attempts");
    assert_eq!(bought, 10, "all 10 in stock sold, the rest refused");
    assert_eq!(left, Value::Int(0));
}

/// Results without rows are shared between the statements of a body (one
/// per affected count): a body cannot write into them, their `rows` or
/// their `affected` (so nothing one body put there could show up in
/// another's result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_a_write_are_read_only_and_empty() {
    let text = STOCK.to_string()
        + r#"

[procedure.scribble]
params = ["id INT"]
statements.take = "UPDATE item SET stock = stock - 1 WHERE id = $id"
statements.read = "SELECT stock, id FROM item WHERE id = $id"
statements.all = "SELECT id, stock FROM item"
body = """
local first = exec("take", id)
local wrote = pcall(function() first.rows[1] = {99} end)
-- Nor into the result itself: a later write's result is the same table.
if pcall(function() first.affected = 7 end) then wrote = true end
if pcall(function() first.rows = {{99}} end) then wrote = true end
local second = exec("take", id)
local read = exec("read", id)
read.rows[2] = {"a result with rows is the body's own"}
-- More values than travel on Lua's stack: the same shape of result.
local all, sum = exec("all"), 0
for i, row in ipairs(all.rows) do
  if #row ~= 2 then abort("row " .. i .. " has " .. #row .. " values") end
  sum = sum + row[1]
end
local got = one("read", id)
return {wrote and 1 or 0, #second.rows, second.affected, read.rows[1][1], #read.rows,
        read.rows[1][2], #all.rows, sum, got[1], got[2], one("read", -1) == nil and 1 or 0}
"""
"#;
    let rows = (1..=3000)
        .map(|i| vec![Value::Int(i), Value::Int(10)])
        .collect();
    let c = started("scribble.toml", &text, rows).await;
    let o = c
        .client()
        .call("scribble", vec![Value::Int(1)])
        .await
        .expect("scribble");
    assert_eq!(
        o.values,
        [
            Value::Int(0),
            Value::Int(0),
            Value::Int(1),
            Value::Int(8),
            Value::Int(2),
            Value::Int(1),
            Value::Int(3000),
            Value::Int(3000 * 3001 / 2),
            Value::Int(8),
            Value::Int(1),
            Value::Int(1),
        ]
    );
}

/// Decimals keep their scale and exact arithmetic however many a body
/// makes (a state keeps one Lua value per distinct decimal, up to a bound,
/// and starts again past it), and however many one result holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decimals_keep_their_scale_and_sum_exactly() {
    let text = r#"name = "sums"
schema = """
CREATE TABLE item (id INT, price DECIMAL(8,2) NOT NULL, PRIMARY KEY (id)) PARTITION BY (id);
"""

[procedure.sums]
params = ["n INT"]
statements.price = "SELECT price FROM item WHERE id = $id"
body = """
local a, b = decimal("1.5"), decimal("1.50")
local sum = decimal("0.00")
for i = 1, n do sum = sum + decimal(i) + one("price", 1)[1] end
return {tostring(a), tostring(b), a == b and 1 or 0, tostring(-b), sum}
"""

[procedure.total]
statements.all = "SELECT id, price FROM item"
body = """
local rows, total = exec("all").rows, decimal("0.00")
for _, r in ipairs(rows) do total = total + r[2] end
return {#rows, total}
"""
"#;
    // More decimals in one result than are passed to Lua at once.
    let items = 10_000;
    let rows = (1..=items)
        .map(|i| vec![Value::Int(i), Value::Decimal(Decimal::new(125, 2))])
        .collect();
    let c = started("sums.toml", text, rows).await;
    let o = c.client().call("total", vec![]).await.expect("total");
    assert_eq!(o.values[0], Value::Int(items));
    assert_eq!(
        o.values[1].as_decimal().map(|d| d.to_string()),
        Some(Decimal::new(items * 125, 2).to_string())
    );
    for n in [3, 5000] {
        let o = c
            .client()
            .call("sums", vec![Value::Int(n)])
            .await
            .expect("sums");
        let expected = Decimal::new(n * (n + 1) / 2 * 100 + n * 125, 2);
        assert_eq!(
            o.values[..4],
            [
                Value::str("1.5"),
                Value::str("1.50"),
                Value::Int(1),
                Value::str("-1.50"),
            ]
        );
        assert_eq!(
            o.values[4].as_decimal().map(|d| d.to_string()),
            Some(expected.to_string()),
            "n = {n}"
        );
    }
}

/// A body runs only its own procedure's statements: one another
/// procedure declares, and one nobody declares, are both refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_runs_only_its_own_statements() {
    let text = STOCK.to_string()
        + r#"

[procedure.take]
params = ["id INT"]
statements.take = "UPDATE item SET stock = stock - 1 WHERE id = $id"
body = """
exec("take", id)
"""

[procedure.borrow]
params = ["id INT", "which TEXT"]
statements.read = "SELECT stock FROM item WHERE id = $id"
body = """
exec(which, id)
"""
"#;
    let c = started("own.toml", &text, vec![vec![Value::Int(1), Value::Int(5)]]).await;
    for which in ["take", "nowhere"] {
        let e = c
            .client()
            .call("borrow", vec![Value::Int(1), Value::str(which)])
            .await
            .expect_err("not its statement");
        assert!(
            matches!(&e, Error::UndeclaredStatement { statement, .. } if statement == which),
            "{which}: {e}"
        );
    }
    c.client()
        .call("borrow", vec![Value::Int(1), Value::str("read")])
        .await
        .expect("its own statement");
}
