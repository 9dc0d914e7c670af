//! Running the `git` command in one checkout: the user's own git, with
//! their credentials, hooks and config, so a handoff fetches and pushes the
//! way they would by hand. Every call names what it ran when it fails.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::GitError;

/// The oldest git this drives: `git add --pathspec-from-file` is 2.26.
pub const MIN_GIT: (u32, u32) = (2, 26);

/// `git` run in one directory.
#[derive(Debug, Clone)]
pub struct Git {
    pub dir: PathBuf,
    /// Extra environment (a temporary index) for every call.
    env: Vec<(String, PathBuf)>,
}

/// Checks that `git` is there and new enough.
pub fn check_git() -> Result<(), GitError> {
    let out = Command::new("git")
        .arg("--version")
        .output()
        .map_err(|e| GitError::Missing(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let version = text
        .strip_prefix("git version ")
        .and_then(|v| {
            let mut n = v.split(|c: char| !c.is_ascii_digit());
            Some((n.next()?.parse().ok()?, n.next()?.parse().ok()?))
        })
        .ok_or_else(|| GitError::Missing(format!("`git --version` said {text:?}")))?;
    if version < MIN_GIT {
        return Err(GitError::TooOld(text));
    }
    Ok(())
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            env: Vec::new(),
        }
    }

    /// The same checkout, with `GIT_INDEX_FILE` set to `index`.
    pub fn with_index(&self, index: &Path) -> Self {
        let mut g = self.clone();
        g.env.push(("GIT_INDEX_FILE".into(), index.to_owned()));
        g
    }

    fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new("git");
        // Status and diff would otherwise refresh the index behind the
        // user's back; pathspecs are paths, never patterns.
        c.arg("--no-optional-locks")
            .arg("--literal-pathspecs")
            .args(args)
            .current_dir(&self.dir)
            .env("LC_ALL", "C");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn describe<S: AsRef<OsStr>>(args: &[S]) -> String {
        let words: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        format!("git {}", words.join(" "))
    }

    /// Runs `git args` with `input` on stdin; its stdout, or the failure.
    pub fn run_with<S: AsRef<OsStr>>(&self, args: &[S], input: &[u8]) -> Result<Vec<u8>, GitError> {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| GitError::Missing(e.to_string()))?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().map_err(|e| GitError::Io {
            context: Self::describe(args),
            source: e,
        })?;
        // A git that exits early closes its stdin: its own error says why.
        let _ = writer.join();
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(GitError::Failed {
                command: Self::describe(args),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            })
        }
    }

    /// Runs `git args`; its stdout.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Vec<u8>, GitError> {
        self.run_with(args, &[])
    }

    /// [`Git::run`] as trimmed text.
    pub fn text<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String, GitError> {
        Ok(String::from_utf8_lossy(&self.run(args)?).trim().to_owned())
    }

    /// Whether `git args` succeeds (for questions git answers by exit code).
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> bool {
        self.command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `git args` with its stdout appended to `out`, at most `budget`
    /// bytes: past that git is stopped and the answer is
    /// [`GitError::TooLarge`] (`what` names the part). Bytes written.
    pub fn run_into<S: AsRef<OsStr>, W: Write>(
        &self,
        args: &[S],
        out: &mut W,
        budget: u64,
        what: &str,
    ) -> Result<u64, GitError> {
        let io = |source| GitError::Io {
            context: Self::describe(args),
            source,
        };
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| GitError::Missing(e.to_string()))?;
        let mut stderr = child.stderr.take().expect("piped");
        let errs = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr.read_to_end(&mut s);
            s
        });
        let stdout = child.stdout.take().expect("piped");
        let n = io::copy(&mut stdout.take(budget + 1), out).map_err(io)?;
        if n > budget {
            let _ = child.kill();
            let _ = child.wait();
            return Err(GitError::TooLarge {
                what: what.to_owned(),
            });
        }
        let status = child.wait().map_err(io)?;
        let stderr = errs.join().unwrap_or_default();
        if !status.success() {
            return Err(GitError::Failed {
                command: Self::describe(args),
                stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
                stdout: String::new(),
            });
        }
        Ok(n)
    }
}
