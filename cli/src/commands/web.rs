//! `evi web`: serve the local viewer (see [`crate::web`]).

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};

use clap::Args;

use super::Ctx;
use crate::command_error::{CommandResult, usage_error, user_error};
use crate::commands::shared::{open_browser, warn};

/// Where the viewer listens when neither `--listen` nor `[web] listen` says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on (default: `[web] listen` in config.toml, else
    /// 127.0.0.1:7878). Any address but loopback needs the printed token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Open the viewer in the default browser.
    #[arg(long)]
    pub open: bool,
}

fn parse_listen(text: &str) -> Result<SocketAddr, crate::command_error::CommandError> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            usage_error(format!("cannot listen on `{text}`: not an address"))
                .hinted("use HOST:PORT, for example --listen 127.0.0.1:7878")
        })
}

pub fn cmd_web(ctx: &Ctx, args: WebArgs) -> CommandResult {
    let text = args
        .listen
        .clone()
        .or_else(|| ctx.config.web.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let addr = parse_listen(&text)?;
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        let err = user_error(format!("cannot listen on {addr}: {e}"));
        if e.kind() == std::io::ErrorKind::AddrInUse {
            err.hinted(format!(
                "another `evi web` may be running: open http://{addr}/, or pick another \
                 port with --listen 127.0.0.1:0"
            ))
        } else {
            err
        }
    })?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    if let Some(why) = ctx.home.absent() {
        warn(&format!(
            "there is no eVi home at {} ({why}); the viewer shows no session",
            ctx.home.root().display()
        ));
    }
    let (router, served) = crate::web::prepare(ctx.home.clone(), &ctx.config, bound)?;
    if served.token.is_some() {
        warn(&format!(
            "evi web listens on {bound}, which other machines may reach: every request must \
             carry the token in the URL below (anyone who has that URL can read every \
             session of this home)"
        ));
    }
    let url = served.url();
    {
        // The first line of stdout is the URL, for scripts and tests.
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {url}")?;
        out.flush()?;
    }
    eprintln!(
        "serving the sessions of {} (read-only but for the pull button); Ctrl-C stops",
        ctx.home.root().display()
    );
    if args.open {
        open_browser(&url);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        crate::web::serve(listener, router, shutdown_signal()).await
    })?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
