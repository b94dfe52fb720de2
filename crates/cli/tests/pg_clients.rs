//! PostgreSQL's own clients against a live `brine server`: psql runs a
//! script (catalog, transactions committed and rolled back, CALL), and a
//! psycopg program runs bank transfers from several threads with prepared
//! statements and a retry loop on SQLSTATE 40001, keeping the total.
//!
//! psql and psycopg are not part of the Rust toolchain: without them these
//! tests say so and pass, unless `BRINE_REQUIRE_PG_CLIENTS` is set, as
//! `.ci/run` sets it after installing both.

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

/// Whether `check` runs; if not, the test may skip only when the clients
/// are not required.
fn have(what: &str, check: &mut Command) -> bool {
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
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One node serving apps/bank.toml, its data loaded, PostgreSQL's
/// protocol on a port of its own.
fn bank_node() -> Node {
    let dir = tempfile::tempdir().expect("temp dir");
    let (port, pg_port) = (free_port(), free_port());
    let app = here("../../apps/bank.toml");
    let config = dir.path().join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "workload = \"app\"\nworkload_args = [\"--app\", {:?}]\nprotocol = \"acid\"\n\
             isolation = \"serializable\"\npartitions_per_node = 2\n\n[[nodes]]\nid = 0\n\
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
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new(BRINE)
            .args(["load", "--cluster"])
            .arg(&node.config)
            .output()
            .expect("brine load");
        if o.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    // The PostgreSQL listener opens once the node is ready.
    while std::net::TcpStream::connect(("127.0.0.1", node.pg_port)).is_err() {
        assert!(Instant::now() < deadline, "no PostgreSQL listener");
        std::thread::sleep(Duration::from_millis(50));
    }
    node
}

#[test]
fn psql_lists_tables_commits_rolls_back_and_calls() {
    if !have("psql", Command::new("psql").arg("--version")) {
        return;
    }
    let node = bank_node();
    let o = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "test", "-d", "brine", "-X", "-q"])
        .args(["-p", &node.pg_port.to_string()])
        .arg("-f")
        .arg(here("tests/pg/session.sql"))
        .env("PGCONNECT_TIMEOUT", "10")
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
    if !have(
        "python3 with psycopg",
        Command::new("python3").args(["-c", "import psycopg"]),
    ) {
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
    if !have("psql", Command::new("psql").arg("--version"))
        || !have(
            "python3 with psycopg",
            Command::new("python3").args(["-c", "import psycopg"]),
        )
    {
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
    let mut psql = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "test",
            "-d",
            "brine",
            "-X",
            "-p",
            &port,
        ])
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
