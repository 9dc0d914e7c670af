//! Asking the `[title] command` of config.toml for a session's title.
//!
//! eVi names sessions with a model; here the model is whatever command the
//! user configures (`llm -s '…'`, a script calling an API, a local model).
//! It runs under `sh -c` with the session's first messages on stdin
//! ([`prompt`]) and `EVI_SESSION_ID` and `EVI_HOME` set, and prints the
//! title on stdout: its first line that is not blank is taken.
//!
//! # Promises
//!
//! - The command gets at most `timeout`; then it is killed with every
//!   process it started (it runs in a process group of its own), and that
//!   is an error, as are a non-zero exit and an empty answer.
//! - Its output is read as it comes (a command that prints a lot never
//!   blocks on a full pipe), but only the first 64 KiB of stdout and 4 KiB
//!   of stderr are kept.

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};

use crate::message::{Message, one_line};
use crate::transcript::SessionTree;
use crate::transcript::line::Role;

/// Messages of the session the command reads, at most.
const PROMPT_MESSAGES: usize = 8;
/// Characters of each message it reads, at most.
const PROMPT_CHARS: usize = 1500;
const STDOUT_KEPT: usize = 64 * 1024;
const STDERR_KEPT: usize = 4 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TitleCommandError {
    #[error("the session has no user or assistant message to make a title from")]
    NothingToRead,
    #[error("`[title] timeout` is 0: the command needs at least 1 second")]
    NoTime,
    #[error("cannot read the session: {0}")]
    Read(io::Error),
    #[error("cannot start the title command `{command}`: {source}")]
    Start { command: String, source: io::Error },
    #[error("the title command `{command}` failed ({status}){}", stderr_tail(.stderr))]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("the title command `{command}` printed nothing on stdout{}", stderr_tail(.stderr))]
    Empty { command: String, stderr: String },
    #[error("the title command `{command}` did not finish within {secs} s and was stopped")]
    Timeout { command: String, secs: u64 },
    #[error("cannot run the title command `{command}`: {source}")]
    Io { command: String, source: io::Error },
}

/// `: <what it said on stderr>`, on one line, or nothing.
fn stderr_tail(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        s => format!(": {}", one_line(s, 300)),
    }
}

/// What the command reads: the first user and assistant messages of the
/// active branch, each as `role: text`, cut short.
pub fn prompt(tree: &SessionTree) -> Result<String, TitleCommandError> {
    let mut fetch = tree.fetcher();
    let mut out = String::new();
    let mut taken = 0;
    for i in tree.active_branch() {
        let e = &tree.entries[i];
        if !matches!(e.role, Role::User | Role::Assistant) {
            continue;
        }
        let raw = fetch.fetch(e.at).map_err(TitleCommandError::Read)?;
        let msg = Message::from_line(&raw);
        let text = crate::message::strip_goal(&msg.text).trim();
        if text.is_empty() {
            continue;
        }
        let mut cut: String = text.chars().take(PROMPT_CHARS).collect();
        if cut.len() < text.len() {
            cut.push('…');
        }
        out.push_str(&format!("{}: {cut}\n\n", msg.role));
        taken += 1;
        if taken == PROMPT_MESSAGES {
            break;
        }
    }
    if taken == 0 {
        return Err(TitleCommandError::NothingToRead);
    }
    Ok(out)
}

/// Runs `command` with `input` on stdin and `env` set; the first line of
/// its stdout that is not blank.
pub fn ask(
    command: &str,
    timeout: Duration,
    input: &str,
    env: &[(&str, &str)],
) -> Result<String, TitleCommandError> {
    if timeout.is_zero() {
        return Err(TitleCommandError::NoTime);
    }
    let io = |source| TitleCommandError::Io {
        command: command.to_owned(),
        source,
    };
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| TitleCommandError::Start {
            command: command.to_owned(),
            source,
        })?;
    let group = Pid::from_child(&child);
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.as_bytes().to_vec();
    // A command that does not read its stdin closes it: not an error.
    let writer = thread::spawn(move || drop(stdin.write_all(&input)));
    let stdout = keep_first(child.stdout.take().expect("piped"), STDOUT_KEPT);
    let stderr = keep_first(child.stderr.take().expect("piped"), STDERR_KEPT);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || drop(tx.send(child.wait())));
    let status = match rx.recv_timeout(timeout) {
        Ok(status) => status.map_err(io)?,
        Err(RecvTimeoutError::Timeout) => {
            let _ = kill_process_group(group, Signal::KILL);
            let _ = rx.recv();
            return Err(TitleCommandError::Timeout {
                command: command.to_owned(),
                secs: timeout.as_secs(),
            });
        }
        Err(RecvTimeoutError::Disconnected) => {
            return Err(io(io::Error::other("lost the command's exit status")));
        }
    };
    // Whatever it left running in the background would hold the pipes open.
    let _ = kill_process_group(group, Signal::KILL);
    let _ = writer.join();
    let out = stdout.join().unwrap_or_default();
    let err = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    if !status.success() {
        return Err(TitleCommandError::Failed {
            command: command.to_owned(),
            status,
            stderr: err,
        });
    }
    let text = String::from_utf8_lossy(&out);
    match text.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => Ok(line.to_owned()),
        None => Err(TitleCommandError::Empty {
            command: command.to_owned(),
            stderr: err,
        }),
    }
}

/// Reads `r` to its end on a thread of its own, keeping the first `limit`
/// bytes.
fn keep_first(mut r: impl Read + Send + 'static, limit: usize) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = limit.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        kept
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_line_it_prints_is_the_answer() {
        let got = ask(
            "read first; echo; echo \"  about $first\"; echo more",
            SECOND * 5,
            "tests\n",
            &[],
        );
        assert_eq!(got.unwrap(), "about tests");
        let got = ask(
            "echo \"$EVI_SESSION_ID\"",
            SECOND * 5,
            "",
            &[("EVI_SESSION_ID", "S1")],
        );
        assert_eq!(got.unwrap(), "S1");
    }

    #[test]
    fn failure_silence_and_slowness_are_errors() {
        let e = ask("echo oops >&2; exit 3", SECOND * 5, "", &[]).unwrap_err();
        assert!(matches!(e, TitleCommandError::Failed { .. }), "{e}");
        assert!(e.to_string().contains("exit status: 3"), "{e}");
        assert!(e.to_string().ends_with(": oops"), "{e}");
        let e = ask("cat >/dev/null; printf '\\n  \\n'", SECOND * 5, "x", &[]).unwrap_err();
        assert!(matches!(e, TitleCommandError::Empty { .. }), "{e}");
        // What it started in the background is stopped with it.
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let cmd = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
        let e = ask(&cmd, SECOND, "", &[]).unwrap_err();
        assert!(
            matches!(e, TitleCommandError::Timeout { secs: 1, .. }),
            "{e}"
        );
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        // Gone, or dead and not yet reaped by its new parent (a killed
        // process takes a moment to get there).
        let dead = || std::fs::read_to_string(&stat).map_or(true, |s| s.contains(") Z "));
        let mut waited = 0;
        while !dead() && waited < 500 {
            std::thread::sleep(Duration::from_millis(10));
            waited += 1;
        }
        assert!(dead(), "the background sleep still runs");
        assert!(matches!(
            ask("true", Duration::ZERO, "", &[]),
            Err(TitleCommandError::NoTime)
        ));
    }
}
