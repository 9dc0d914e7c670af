//! `evi sessions open ID`: the session in the web viewer, the viewer started
//! first when nothing answers at the configured URL (`[web] url`, the one
//! handoff prints).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, open_browser, resolve, scan, stdout, warn, web_url};

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// Session id or unambiguous prefix (one only on another device is
    /// passed on: the viewer offers to pull it).
    pub id: String,
    /// Print the URL only, do not start a browser.
    #[arg(long)]
    pub no_browser: bool,
}

/// How long a viewer may take to say whether it is there.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn cmd_sessions_open(ctx: &Ctx, args: OpenArgs) -> CommandResult {
    let catalog = scan(ctx)?;
    let id = match catalog.matching(&args.id).as_slice() {
        [] => args.id.clone(),
        _ => resolve(&catalog, &args.id)?.0.to_string(),
    };
    let base = web_url(ctx);
    match probe(&base) {
        Some(home) if home != ctx.home.root().display().to_string() => {
            warn(&format!(
                "the viewer at {base} serves another eVi home ({home})"
            ));
        }
        Some(_) => {}
        None => start_viewer(ctx, &base)?,
    }
    let url = format!("{base}/?session={id}");
    let mut out = stdout();
    writeln!(out, "{url}")?;
    finish(out)?;
    if !args.no_browser {
        open_browser(&url);
    }
    Ok(())
}

/// The home the viewer at `base` serves, when one answers there.
fn probe(base: &str) -> Option<String> {
    let client = crate::sync::remote::client::http_builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .ok()?;
    let v: serde_json::Value = client
        .get(format!("{base}/api/health"))
        .send()
        .ok()?
        .json()
        .ok()?;
    (v["service"] == "evi web").then(|| v["home"].as_str().unwrap_or_default().to_owned())
}

/// Starts `evi web` on the host and port of `base`, in the background (its
/// own process group, so the terminal's Ctrl-C for this command leaves it
/// running), and waits for the line it prints once it listens.
fn start_viewer(ctx: &Ctx, base: &str) -> CommandResult {
    use std::os::unix::process::CommandExt;
    let url = reqwest::Url::parse(base).map_err(|e| user_error(format!("{base}: {e}")))?;
    let host = url.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(user_error(format!(
            "no viewer answers at {base}, and it is not on this machine"
        ))
        .hinted("start `evi web` where [web] url points, or run `evi web` here"));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let listen = if host.contains(':') {
        format!("[{}]:{port}", host.trim_matches(['[', ']']))
    } else {
        format!("{host}:{port}")
    };
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["web", "--listen", &listen])
        .env("EVI_HOME", ctx.home.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| user_error(format!("cannot start `evi web`: {e}")))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    if !line.starts_with("listening on ") {
        let _ = child.wait();
        return Err(
            user_error(format!("`evi web --listen {listen}` did not start"))
                .hinted(format!("run `evi web --listen {listen}` to see why")),
        );
    }
    eprintln!(
        "started the viewer on {listen} (pid {}; it runs until stopped)",
        child.id()
    );
    Ok(())
}
