//! `evi sync watch --install` / `--uninstall`: the watcher as a user
//! service that starts at login and restarts after a failure.
//!
//! - Linux: a systemd user unit in `$XDG_CONFIG_HOME/systemd/user/` (else
//!   `~/.config/systemd/user/`), enabled with `systemctl --user enable --now`;
//! - macOS: a launchd agent in `~/Library/LaunchAgents/`, loaded with
//!   `launchctl load -w`;
//! - elsewhere: the command to run at login, printed.
//!
//! One service per eVi home: its name carries a short hash of the home's
//! absolute path, and the service sets `EVI_HOME` to it. The files hold no
//! secret (the token stays in the home's `sync/`).
//!
//! The service runs an installed `evi`, never one in a cargo build folder
//! (`target/release/evi`), which `cargo clean` deletes and the next build
//! replaces under it: this binary if it is not in one, else the first `evi`
//! on PATH that is not (`cargo install --path cli` puts one in
//! `~/.cargo/bin`), else nothing is written and the command says how to
//! install it.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{require_sync, warn};

/// Where and what a service manager is told.
struct Service {
    /// The unit's or agent's name, without extension.
    name: String,
    file: PathBuf,
    text: String,
    /// Run after writing, to enable and start it.
    enable: Vec<Vec<String>>,
    /// Run before removing, to stop and disable it.
    disable: Vec<Vec<String>>,
}

fn home_dir() -> Result<PathBuf, CommandError> {
    std::env::home_dir().ok_or_else(|| user_error("cannot find your home folder: set HOME"))
}

/// The home's absolute path and its short hash.
fn identity(ctx: &Ctx) -> Result<(PathBuf, String), CommandError> {
    let home = std::path::absolute(ctx.home.root())?;
    let hash = hex::encode(&sha2::Sha256::digest(home.as_os_str().as_encoded_bytes())[..4]);
    Ok((home, hash))
}

fn current_exe() -> Result<PathBuf, CommandError> {
    std::env::current_exe().map_err(|e| user_error(format!("cannot find this evi binary: {e}")))
}

/// Whether `exe` (resolved through links) is in a build folder: a cargo
/// profile folder (`.fingerprint` beside it, or beside its `deps/`), or
/// any folder under a `CACHEDIR.TAG`, which marks what may be deleted at
/// any time (cargo puts one in `target/`).
fn in_build_folder(exe: &Path) -> bool {
    let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_owned());
    let Some(dir) = exe.parent() else {
        return false;
    };
    let profile = [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .any(|d| d.join(".fingerprint").is_dir());
    profile || dir.ancestors().any(|d| d.join("CACHEDIR.TAG").is_file())
}

/// The first executable `evi` on PATH outside any build folder.
fn installed_evi() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("evi"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                && !in_build_folder(p)
        })
}

/// The binary the service runs (see the module docs), saying on stderr
/// which one when it is not this one.
fn exe() -> Result<PathBuf, CommandError> {
    let this = current_exe()?;
    if !in_build_folder(&this) {
        return Ok(this);
    }
    let Some(installed) = installed_evi() else {
        return Err(user_error(format!(
            "this evi is in a build folder ({}), which `cargo clean` deletes and the next \
             build replaces: a service running it would break",
            this.display()
        ))
        .hinted(
            "install evi first: `cargo install --path cli` (into ~/.cargo/bin, which must be \
             on PATH), then run `evi sync watch --install` again",
        ));
    };
    eprintln!(
        "the service runs {} (the evi on PATH), not this build's {}",
        installed.display(),
        this.display()
    );
    let theirs = Command::new(&installed)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let ours = concat!("evi ", env!("CARGO_PKG_VERSION"));
    if theirs.as_deref() != Some(ours) {
        warn(&format!(
            "{} is {}, this one is {ours}: `cargo install --path cli` updates it",
            installed.display(),
            theirs
                .filter(|v| !v.is_empty())
                .map_or_else(|| "of an unknown version".to_owned(), |v| format!("`{v}`"))
        ));
    }
    Ok(installed)
}

/// The service of this home, running `exe`.
fn service(ctx: &Ctx, exe: &Path) -> Result<Option<Service>, CommandError> {
    let (home, hash) = identity(ctx)?;
    if cfg!(target_os = "macos") {
        let name = format!("org.evi.sync-watch.{hash}");
        let file = home_dir()?
            .join("Library/LaunchAgents")
            .join(format!("{name}.plist"));
        let log = home_dir()?
            .join("Library/Logs")
            .join(format!("evi-sync-watch-{hash}.log"));
        let file_s = file.display().to_string();
        return Ok(Some(Service {
            text: launchd_agent(&name, exe, &home, &log),
            enable: vec![vec![
                "launchctl".into(),
                "load".into(),
                "-w".into(),
                file_s.clone(),
            ]],
            disable: vec![vec![
                "launchctl".into(),
                "unload".into(),
                "-w".into(),
                file_s,
            ]],
            name,
            file,
        }));
    }
    if cfg!(target_os = "linux") {
        let name = format!("evi-sync-watch-{hash}");
        let dir = match std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => home_dir()?.join(".config"),
        };
        let unit = format!("{name}.service");
        let systemctl = |args: &[&str]| {
            let mut v = vec!["systemctl".to_owned(), "--user".to_owned()];
            v.extend(args.iter().map(|s| s.to_string()));
            v
        };
        return Ok(Some(Service {
            file: dir.join("systemd/user").join(&unit),
            text: systemd_unit(exe, &home),
            enable: vec![
                systemctl(&["daemon-reload"]),
                systemctl(&["enable", "--now", &unit]),
            ],
            disable: vec![systemctl(&["disable", "--now", &unit])],
            name,
        }));
    }
    Ok(None)
}

/// A value for a systemd unit line: quoted, with `%` and `$` not taken as
/// specifiers or variables.
fn systemd_quote(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    format!("\"{escaped}\"")
}

fn systemd_unit(exe: &Path, home: &Path) -> String {
    format!(
        "[Unit]\n\
         Description=evi sync watch for the eVi home {home_text}\n\
         \n\
         [Service]\n\
         Type=simple\n\
         Environment={env}\n\
         ExecStart={exe} sync watch\n\
         Restart=on-failure\n\
         RestartSec=10\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        home_text = home.display().to_string().replace('%', "%%"),
        env = systemd_quote(&format!("EVI_HOME={}", home.display())),
        exe = systemd_quote(&exe.display().to_string()),
    )
}

fn xml(s: &str) -> String {
    html_escape::encode_text(s).into_owned()
}

fn launchd_agent(name: &str, exe: &Path, home: &Path, log: &Path) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{name}</string>
  <key>ProgramArguments</key>
  <array>
    <string>{exe}</string>
    <string>sync</string>
    <string>watch</string>
  </array>
  <key>EnvironmentVariables</key>
  <dict>
    <key>EVI_HOME</key>
    <string>{home}</string>
  </dict>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <true/>
  <key>StandardErrorPath</key>
  <string>{log}</string>
</dict>
</plist>
"#,
        name = xml(name),
        exe = xml(&exe.display().to_string()),
        home = xml(&home.display().to_string()),
        log = xml(&log.display().to_string()),
    )
}

fn shown(cmd: &[String]) -> String {
    cmd.join(" ")
}

/// Runs `cmd`; its failure as a message.
fn run(cmd: &[String]) -> Result<(), String> {
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", cmd[0]))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "`{}` failed: {}",
        shown(cmd),
        err.lines().next().unwrap_or("no message")
    ))
}

pub fn install(ctx: &Ctx, enable: bool) -> CommandResult {
    require_sync(ctx, "evi sync watch")?;
    let exe = exe()?;
    let Some(s) = service(ctx, &exe)? else {
        let (home, _) = identity(ctx)?;
        println!("no service manager this evi knows on this system; run this at login:");
        println!("  EVI_HOME={} {} sync watch", home.display(), exe.display());
        return Ok(());
    };
    if let Some(dir) = s.file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| user_error(format!("cannot create {}: {e}", dir.display())))?;
    }
    crate::fsutil::replace_file(&s.file, s.text.as_bytes())
        .map_err(|e| user_error(format!("cannot write {}: {e}", s.file.display())))?;
    println!("wrote {} ({})", s.file.display(), s.name);
    if !enable {
        println!("enable it with:");
        for c in &s.enable {
            println!("  {}", shown(c));
        }
        return Ok(());
    }
    for c in &s.enable {
        if let Err(why) = run(c) {
            let rest: Vec<String> = s.enable.iter().map(|c| shown(c)).collect();
            return Err(user_error(format!(
                "the service file is written, but enabling it failed: {why}"
            ))
            .hinted(format!("run `{}` in your login session", rest.join(" && "))));
        }
    }
    println!("enabled and started: it runs `evi sync watch` at every login");
    Ok(())
}

pub fn uninstall(ctx: &Ctx) -> CommandResult {
    // Only the service's name and file matter here, not what it runs.
    let Some(s) = service(ctx, &current_exe()?)? else {
        println!("no service manager this evi knows on this system: nothing was installed");
        return Ok(());
    };
    if !s.file.exists() {
        println!(
            "no service is installed for this home ({} does not exist)",
            s.file.display()
        );
        return Ok(());
    }
    // A unit that is not loaded (a manager not running) is still removed.
    let mut stop_failed = None;
    for c in &s.disable {
        if let Err(why) = run(c) {
            stop_failed = Some(why);
        }
    }
    std::fs::remove_file(&s.file)
        .map_err(|e| user_error(format!("cannot remove {}: {e}", s.file.display())))?;
    println!("removed {}", s.file.display());
    if let Some(why) = stop_failed {
        warn(&format!(
            "could not stop it ({why}); a watcher it started runs until you stop it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cargo_profile_folder_is_a_build_folder() {
        let root = tempfile::tempdir().unwrap();
        let release = root.path().join("target/release");
        std::fs::create_dir_all(release.join(".fingerprint")).unwrap();
        std::fs::create_dir_all(release.join("deps")).unwrap();
        assert!(in_build_folder(&release.join("evi")));
        assert!(in_build_folder(&release.join("deps/evi-0123")));
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        assert!(!in_build_folder(&bin.join("evi")));
        std::fs::write(root.path().join("CACHEDIR.TAG"), "Signature: x\n").unwrap();
        assert!(in_build_folder(&bin.join("evi")));
    }

    #[test]
    fn unit_values_are_quoted_and_specifiers_escaped() {
        let unit = systemd_unit(Path::new("/opt/my evi/evi"), Path::new("/home/p%t/.evi$x"));
        assert!(
            unit.contains("ExecStart=\"/opt/my evi/evi\" sync watch\n"),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=\"EVI_HOME=/home/p%%t/.evi$$x\"\n"),
            "{unit}"
        );
    }

    #[test]
    fn the_agent_names_the_home_and_escapes_it() {
        let plist = launchd_agent(
            "org.evi.sync-watch.abcd",
            Path::new("/usr/local/bin/evi"),
            Path::new("/Users/a&b/.evi"),
            Path::new("/Users/a&b/Library/Logs/x.log"),
        );
        assert!(
            plist.contains("<string>/Users/a&amp;b/.evi</string>"),
            "{plist}"
        );
        assert!(plist.contains("<key>RunAtLoad</key>\n  <true/>"));
        // Every element opened is closed (a plist is XML).
        for tag in ["plist", "dict", "array"] {
            assert_eq!(
                plist.matches(&format!("<{tag}")).count(),
                plist.matches(&format!("</{tag}>")).count(),
                "{tag}"
            );
        }
    }
}
