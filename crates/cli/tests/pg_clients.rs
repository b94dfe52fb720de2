//! PostgreSQL's own clients against a live `brine server`: psql runs a
//! script (catalog, transactions committed and rolled back, CALL), and a
//! psycopg program runs bank transfers from several threads with prepared
//! statements and a retry loop on SQLSTATE 40001, keeping the total; and
//! pgbench runs its built-in TPC-B-like script, unchanged, in each query
//! mode, after which every balance table sums to the history's deltas.
//!
//! psql, psycopg and pgbench are not part of the Rust toolchain: without them these
//! tests say so and pass, unless `BRINE_REQUIRE_PG_CLIENTS` is set, as
//! `.ci/run` sets it after installing them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BRINE: &str = env!("CARGO_BIN_EXE_brine");

struct Node {
    child: Child,
    _dir: tempfile::TempDir,
    config: PathBuf,
    pg_port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn here(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether every one of `clients` (psql, pgbench, psycopg) is installed;
/// if one is not, the test may skip only when the clients are not
/// required.
fn have(clients: &[&str]) -> bool {
    clients.iter().all(|&what| {
        let mut check = match what {
            "psycopg" => {
                let mut c = Command::new("python3");
                c.args(["-c", "import psycopg"]);
                c
            }
            tool => {
                let mut c = Command::new(tool);
                c.arg("--version");
                c
            }
        };
        let ok = check
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("BRINE_REQUIRE_PG_CLIENTS").is_none(),
                "{what} is required (BRINE_REQUIRE_PG_CLIENTS) but missing"
            );
            eprintln!("skipped: {what} is not installed (.ci/run installs it)");
        }
        ok
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One node serving application file `app` (relative to the repository)
/// with `extra` cluster-file lines, once its PostgreSQL listener is open.
fn app_node(app: &str, extra: &str) -> Node {
    let dir = tempfile::tempdir().expect("temp dir");
    let (port, pg_port) = (free_port(), free_port());
    let app = here(&format!("../../{app}"));
    let config = dir.path().join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "workload = \"app\"\nworkload_args = [\"--app\", {:?}]\nprotocol = \"acid\"\n\
             isolation = \"serializable\"\n{extra}\n\n[[nodes]]\nid = 0\n\
             address = \"127.0.0.1:{port}\"\npg_address = \"127.0.0.1:{pg_port}\"\n",
            app.to_str().expect("utf-8 path")
        ),
    )
    .expect("cluster file");
    let log = std::fs::File::create(dir.path().join("node.log")).expect("log");
    let child = Command::new(BRINE)
        .args(["server", "--config"])
        .arg(&config)
        .args(["--node", "0"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("brine server");
    let node = Node {
        child,
        _dir: dir,
        config,
        pg_port,
    };
    // The PostgreSQL listener opens once the node is ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", node.pg_port)).is_err() {
        assert!(Instant::now() < deadline, "no PostgreSQL listener");
        std::thread::sleep(Duration::from_millis(50));
    }
    node
}

/// One node serving apps/bank.toml, its data loaded.
fn bank_node() -> Node {
    let node = app_node("apps/bank.toml", "partitions_per_node = 2");
    let o = Command::new(BRINE)
        .args(["load", "--cluster"])
        .arg(&node.config)
        .output()
        .expect("brine load");
    assert!(o.status.success(), "{}", text(&o));
    node
}

/// psql connected to the node as user `test`, without ~/.psqlrc.
fn psql(port: u16) -> Command {
    let mut c = Command::new("psql");
    c.args(["-h", "127.0.0.1", "-U", "test", "-d", "brine", "-X"])
        .args(["-p", &port.to_string()])
        .env("PGCONNECT_TIMEOUT", "10");
    c
}

/// psql's one-value answer to `sql`.
fn psql_value(port: u16, sql: &str) -> String {
    let o = psql(port)
        .args(["-q", "-tA", "-c", sql])
        .output()
        .expect("psql");
    assert!(o.status.success(), "{sql}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn psql_lists_tables_commits_rolls_back_and_calls() {
    if !have(&["psql"]) {
        return;
    }
    let node = bank_node();
    let o = psql(node.pg_port)
        .arg("-q")
        .arg("-f")
        .arg(here("tests/pg/session.sql"))
        .output()
        .expect("psql");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("account"), "\\dt lists the table: {out}");
    assert!(out.contains("balance"), "\\d shows its columns: {out}");
    // The committed transfer moved 5.00; the rolled-back update did not stick.
    assert!(out.contains("995.00") && out.contains("1005.00"), "{out}");
    assert!(out.contains("1000.00"), "{out}");
    assert_eq!(
        out.matches("10000000.00").count(),
        2,
        "SUM and CALL total(): {out}"
    );
}

#[test]
fn psycopg_transfers_retry_on_40001_and_keep_the_total() {
    if !have(&["psycopg"]) {
        return;
    }
    let node = bank_node();
    let o = Command::new("python3")
        .arg(here("tests/pg/bank.py"))
        .args(["127.0.0.1", &node.pg_port.to_string(), "4", "50"])
        .output()
        .expect("python3");
    let out = text(&o);
    eprintln!("{out}");
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("transfers=200 ") && out.contains("total=10000000.00"),
        "{out}"
    );
}

/// Bad input over the wire while psycopg clients transfer money: garbage
/// on raw sockets, and a psql client killed in the middle of a
/// transaction that added 1.00 to an account. The others are served
/// throughout; the killed client's transaction is rolled back (the total
/// is kept to the cent).
#[test]
fn bad_clients_hurt_no_one_during_a_bank_run() {
    use std::io::{BufRead, BufReader, Write};
    if !have(&["psql", "psycopg"]) {
        return;
    }
    let node = bank_node();
    let port = node.pg_port.to_string();
    let bank = Command::new("python3")
        .arg(here("tests/pg/bank.py"))
        .args(["127.0.0.1", &port, "4", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    // Garbage: bytes that are no startup message, and a startup message
    // of a protocol version that does not exist.
    for junk in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0, 0, 0, 8, 0x7f, 0x7f, 0, 0][..],
    ] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", node.pg_port)).expect("connect");
        let _ = s.write_all(junk);
    }
    // A client that dies holding an uncommitted +1.00.
    let mut psql = psql(node.pg_port)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    let mut stdin = psql.stdin.take().expect("stdin");
    writeln!(
        stdin,
        "BEGIN;\nUPDATE account SET balance = balance + 1 WHERE id = 5000;"
    )
    .expect("writing to psql");
    let mut lines = BufReader::new(psql.stdout.take().expect("stdout")).lines();
    let updated = lines.any(|l| l.is_ok_and(|l| l.starts_with("UPDATE 1")));
    assert!(updated, "psql's UPDATE ran");
    psql.kill().expect("killing psql");
    psql.wait().expect("reaped");
    drop(stdin);
    let out = bank.wait_with_output().expect("python3");
    let out = text(&out);
    assert!(
        out.contains("transfers=1200 ") && out.contains("total=10000000.00"),
        "{out}"
    );
}

/// pgbench's TPC-B-like transaction, as pgbench sends it in its three
/// query modes and as one CALL, from four clients on the one branch of
/// scale 1 over two partitions (so two-phase commit): afterwards the
/// accounts, tellers and branches each sum to the deltas in the history
/// (pgbench's own consistency condition), one history row per
/// transaction pgbench counted.
#[test]
fn pgbench_runs_its_builtin_script_unchanged_and_the_balances_agree() {
    if !have(&["psql", "pgbench"]) {
        return;
    }
    let node = app_node(
        "apps/pgbench.toml",
        "partitions_per_node = 2\ndeadlock = \"detect\"",
    );
    let port = node.pg_port.to_string();
    let o = Command::new(here("../../apps/pgbench-load.sh"))
        .args(["127.0.0.1", &port, "1"])
        .output()
        .expect("apps/pgbench-load.sh");
    assert!(o.status.success(), "{}", text(&o));
    let mut done = 0u64;
    let runs: [&[&str]; 4] = [
        &["-M", "simple"],
        &["-M", "extended"],
        &["-M", "prepared"],
        &["-M", "prepared", "-f"],
    ];
    for mode in runs {
        let mut cmd = Command::new("pgbench");
        cmd.args(["-n", "-h", "127.0.0.1", "-U", "test", "-p", &port])
            .args(["-c", "4", "-j", "2", "-t", "25", "--max-tries", "100"])
            .args(mode);
        if mode.contains(&"-f") {
            cmd.arg(here("../../apps/pgbench-call.sql"));
        }
        let o = cmd.arg("brine").output().expect("pgbench");
        let out = text(&o);
        assert!(o.status.success(), "{mode:?}: {out}");
        assert!(out.contains("scaling factor: 1"), "{out}");
        let processed = out
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|l| l.split('/').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no transaction count: {out}"));
        assert_eq!(processed, 100, "{mode:?}: {out}");
        done += processed;
    }
    let history = psql_value(node.pg_port, "SELECT SUM(delta) FROM pgbench_history");
    for (table, column) in [
        ("pgbench_accounts", "abalance"),
        ("pgbench_tellers", "tbalance"),
        ("pgbench_branches", "bbalance"),
    ] {
        let sum = psql_value(node.pg_port, &format!("SELECT SUM({column}) FROM {table}"));
        assert_eq!(sum, history, "{table} against the history");
    }
    let rows = psql_value(node.pg_port, "SELECT COUNT(*) FROM pgbench_history");
    assert_eq!(rows, done.to_string());
}
