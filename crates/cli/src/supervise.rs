//! How `brine cluster up` keeps its processes running: a node or service
//! process that exits is started again with the same command line, after
//! a pause that grows while it keeps exiting, and the others serve on
//! meanwhile. One that exits [`MAX_QUICK_EXITS`] times within
//! [`QUICK_EXIT_WINDOW`] is given up on: the whole cluster stops with an
//! error naming it and its log. Ctrl-C or SIGTERM stops every process.
//!
//! ```text
//!  start every process (log truncated, DIR/<name>.pid written)
//!    └─► every POLL: did one exit?
//!          yes ─► RestartPolicy::exited ─► After(pause): "node 1 exited (...); restarting it
//!          │                               (restart k)", started again after the pause
//!          │                               (log appended, pid file rewritten)
//!          │                          └─► GiveUp: stop the others, error naming its log
//!  Ctrl-C / SIGTERM ─► SIGTERM to every process, 10 s each to stop, then SIGKILL
//! ```
//!
//! The processes run in a process group of their own, so a Ctrl-C in the
//! terminal reaches this supervisor only, which stops them: they are never
//! mistaken for processes that died.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::node::{wait_for_stop, NodeError};

/// How many exits within [`QUICK_EXIT_WINDOW`] make a process one that
/// cannot run: the cluster stops instead of restarting it again.
pub const MAX_QUICK_EXITS: usize = 5;
pub const QUICK_EXIT_WINDOW: Duration = Duration::from_secs(60);
/// The pause before the first restart; it doubles with each further exit
/// within the window, up to `RESTART_PAUSE_MAX`.
const RESTART_PAUSE_FIRST: Duration = Duration::from_millis(200);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(5);
/// How often the processes are looked at.
const POLL: Duration = Duration::from_millis(100);
/// How long a process may take to stop on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What to do about a process that exited.
#[derive(Debug, PartialEq, Eq)]
pub enum Restart {
    /// Start it again after `pause`; this is its `restart`-th restart.
    After { pause: Duration, restart: u32 },
    /// It exited `exits` times within the window: stop the cluster.
    GiveUp { exits: usize },
}

/// One process's exits, and whether it is restarted once more.
#[derive(Debug, Default)]
pub struct RestartPolicy {
    /// When it exited, oldest first, within the last `QUICK_EXIT_WINDOW`.
    recent: VecDeque<Instant>,
    restarts: u32,
}

impl RestartPolicy {
    /// Records an exit at `now` and says what follows it.
    pub fn exited(&mut self, now: Instant) -> Restart {
        while self
            .recent
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= QUICK_EXIT_WINDOW)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        let exits = self.recent.len();
        if exits >= MAX_QUICK_EXITS {
            return Restart::GiveUp { exits };
        }
        self.restarts += 1;
        let doublings = u32::try_from(exits - 1).unwrap_or(u32::MAX).min(16);
        let pause = RESTART_PAUSE_FIRST
            .saturating_mul(1 << doublings)
            .min(RESTART_PAUSE_MAX);
        Restart::After {
            pause,
            restart: self.restarts,
        }
    }
}

/// One process of the cluster, as `cluster up` starts it.
#[derive(Debug)]
pub struct Process {
    /// How messages name it: `node 1`, `service tso`.
    pub name: String,
    /// Its arguments after `brine server --config FILE`.
    pub role: Vec<String>,
    /// Where its output goes (appended to at each restart).
    pub log: PathBuf,
    /// Holds its pid, rewritten at each start.
    pub pid_file: PathBuf,
    /// What a restart costs it, printed at each restart (a node without a
    /// log restarts empty).
    pub restart_warning: Option<String>,
}

struct Member {
    process: Process,
    child: Option<tokio::process::Child>,
    /// Set while it waits to be started again: when, and how it exited.
    restart: Option<(Instant, u32, String)>,
    policy: RestartPolicy,
}

/// The running processes of a cluster.
pub struct Supervisor {
    exe: PathBuf,
    config: PathBuf,
    members: Vec<Member>,
}

impl Supervisor {
    /// Starts every process (`exe server --config config ROLE`), their logs
    /// truncated.
    pub fn start(
        exe: PathBuf,
        config: PathBuf,
        processes: Vec<Process>,
    ) -> Result<Supervisor, NodeError> {
        let mut members = Vec::with_capacity(processes.len());
        for process in processes {
            let child = spawn(&exe, &config, &process, false)?;
            members.push(Member {
                process,
                child: Some(child),
                restart: None,
                policy: RestartPolicy::default(),
            });
        }
        Ok(Supervisor {
            exe,
            config,
            members,
        })
    }

    /// Keeps the processes running until Ctrl-C or SIGTERM (`Ok`) or until
    /// one keeps exiting (the error); stops them all either way.
    pub async fn run(mut self) -> Result<(), NodeError> {
        let stop = wait_for_stop();
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(POLL);
        let outcome = loop {
            tokio::select! {
                // A stop asked for wins over an exit seen at the same time.
                biased;
                _ = &mut stop => break Ok(()),
                _ = tick.tick() => {}
            }
            if let Err(e) = self.look(Instant::now()) {
                break Err(e);
            }
        };
        self.stop_all().await;
        outcome
    }

    /// Notes the processes that exited and starts those whose pause ended.
    fn look(&mut self, now: Instant) -> Result<(), NodeError> {
        for m in &mut self.members {
            let name = &m.process.name;
            if let Some(child) = &mut m.child {
                let status = child.try_wait().map_err(|source| NodeError::Io {
                    context: format!("watching {name}"),
                    source,
                })?;
                if let Some(status) = status {
                    m.child = None;
                    let how = status.to_string();
                    match m.policy.exited(now) {
                        Restart::After { pause, restart } => {
                            println!("{name} exited ({how}); restarting it (restart {restart})");
                            if let Some(warning) = &m.process.restart_warning {
                                println!("warning: {warning}");
                            }
                            m.restart = Some((now + pause, restart, how));
                        }
                        Restart::GiveUp { exits } => {
                            return Err(NodeError::Config(format!(
                                "{name} exited {exits} times within {} s (last: {how}); gave up \
                                 restarting it and stopped the cluster; see {}",
                                QUICK_EXIT_WINDOW.as_secs(),
                                m.process.log.display()
                            )));
                        }
                    }
                }
            }
            if let Some((at, restart, how)) = &m.restart {
                if *at <= now {
                    note_restart(&m.process, *restart, how);
                    m.child = Some(spawn(&self.exe, &self.config, &m.process, true)?);
                    m.restart = None;
                }
            }
        }
        Ok(())
    }

    /// SIGTERM to every running process, then waits for each (killing one
    /// that takes longer than `STOP_TIMEOUT`); removes the pid files.
    async fn stop_all(&mut self) {
        for m in &self.members {
            if let Some(pid) = m.child.as_ref().and_then(|c| c.id()) {
                terminate(pid);
            }
        }
        for m in &mut self.members {
            if let Some(child) = &mut m.child {
                if tokio::time::timeout(STOP_TIMEOUT, child.wait())
                    .await
                    .is_err()
                {
                    eprintln!(
                        "{} did not stop within {} s; killing it",
                        m.process.name,
                        STOP_TIMEOUT.as_secs()
                    );
                    let _ = child.kill().await;
                }
            }
            let _ = std::fs::remove_file(&m.process.pid_file);
        }
    }
}

/// A line in the process's log where its next run's output starts.
fn note_restart(process: &Process, restart: u32, how: &str) {
    use std::io::Write;
    let line = format!(
        "--- brine cluster up: restart {restart} of {} after it exited ({how}) ---\n",
        process.name
    );
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&process.log)
    {
        let _ = log.write_all(line.as_bytes());
    }
}

/// Starts `exe server --config config ROLE`, its output in its log
/// (appended to, or truncated first), and writes its pid file.
fn spawn(
    exe: &Path,
    config: &Path,
    process: &Process,
    append: bool,
) -> Result<tokio::process::Child, NodeError> {
    let io = |context: String| move |source| NodeError::Io { context, source };
    let log_path = &process.log;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log_path)
        .map_err(io(format!("opening {}", log_path.display())))?;
    let err = log
        .try_clone()
        .map_err(io(format!("opening {}", log_path.display())))?;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("server")
        .arg("--config")
        .arg(config)
        .args(&process.role)
        .stdout(log)
        .stderr(err)
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let child = command
        .spawn()
        .map_err(io(format!("starting {}", process.name)))?;
    if let Some(pid) = child.id() {
        // Written whole, then renamed: a reader never sees half a pid.
        let tmp = process.pid_file.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&tmp, &process.pid_file))
            .map_err(io(format!("writing {}", process.pid_file.display())))?;
    }
    Ok(child)
}

fn terminate(pid: u32) {
    #[cfg(unix)]
    // SAFETY: kill(2) with a child's pid and SIGTERM has no memory effects.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_exits_now_and_then_is_restarted_every_time() {
        let mut policy = RestartPolicy::default();
        let t0 = Instant::now();
        for i in 0..20u32 {
            // One exit every 20 s: never more than 3 within a minute.
            let at = t0 + Duration::from_secs(20 * u64::from(i));
            match policy.exited(at) {
                Restart::After { restart, pause } => {
                    assert_eq!(restart, i + 1);
                    assert!(pause <= Duration::from_millis(800), "{pause:?}");
                }
                other => panic!("exit {i}: {other:?}"),
            }
        }
    }

    #[test]
    fn quick_exits_back_off_and_then_give_up() {
        let mut policy = RestartPolicy::default();
        let t0 = Instant::now();
        let mut pauses = Vec::new();
        for i in 0..MAX_QUICK_EXITS - 1 {
            match policy.exited(t0 + Duration::from_secs(i as u64)) {
                Restart::After { pause, .. } => pauses.push(pause),
                other => panic!("exit {i}: {other:?}"),
            }
        }
        assert!(
            pauses.windows(2).all(|w| w[0] < w[1]),
            "each quick exit waits longer: {pauses:?}"
        );
        assert_eq!(
            policy.exited(t0 + Duration::from_secs(MAX_QUICK_EXITS as u64)),
            Restart::GiveUp {
                exits: MAX_QUICK_EXITS
            }
        );
    }

    #[test]
    fn exits_older_than_the_window_do_not_count() {
        let mut policy = RestartPolicy::default();
        let t0 = Instant::now();
        for i in 0..MAX_QUICK_EXITS - 1 {
            assert!(matches!(
                policy.exited(t0 + Duration::from_millis(i as u64)),
                Restart::After { .. }
            ));
        }
        // The window has passed since those: this exit is the only one in it,
        // and its pause is the first one again.
        let later = t0 + QUICK_EXIT_WINDOW + Duration::from_secs(1);
        assert_eq!(
            policy.exited(later),
            Restart::After {
                pause: RESTART_PAUSE_FIRST,
                restart: MAX_QUICK_EXITS as u32
            }
        );
    }
}
