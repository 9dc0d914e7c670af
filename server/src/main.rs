//! The `evi-server` binary: parses flags (each also an `EVI_SERVER_*`
//! variable), sets up logging, and calls into the library.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use evi_server::Config;
use evi_server::config::{Limits, RateLimits};
use evi_shared::api::Registration;

#[derive(Parser)]
#[command(
    name = "evi-server",
    version,
    about = "Stores end-to-end encrypted eVi sync records and blobs."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to serve the API on (port 0 picks a free one; the bound
    /// address is printed as the first line of stdout).
    #[arg(long, env = "EVI_SERVER_LISTEN", default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// Folder for the database and blob files [default: $XDG_DATA_HOME/evi-server or ~/.local/share/evi-server]
    #[arg(long, env = "EVI_SERVER_DATA", global = true)]
    data: Option<PathBuf>,
    #[arg(
        long,
        env = "EVI_SERVER_REGISTRATION",
        value_enum,
        default_value = "invite"
    )]
    registration: RegistrationArg,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default).
    #[arg(long, env = "EVI_SERVER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    #[arg(
        long,
        env = "EVI_SERVER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Per-user storage quota in bytes (off by default).
    #[arg(long, env = "EVI_SERVER_QUOTA_BYTES")]
    quota_bytes: Option<u64>,
    #[arg(long, env = "EVI_SERVER_MAX_BATCH_BYTES", default_value_t = Limits::default().max_batch_bytes)]
    max_batch_bytes: u64,
    #[arg(long, env = "EVI_SERVER_MAX_BLOB_BYTES", default_value_t = Limits::default().max_blob_bytes)]
    max_blob_bytes: u64,
    #[arg(long, env = "EVI_SERVER_MAX_PAGE_RECORDS", default_value_t = Limits::default().max_page_records)]
    max_page_records: u32,
    #[arg(long, env = "EVI_SERVER_MAX_PAGE_BYTES", default_value_t = Limits::default().max_page_bytes)]
    max_page_bytes: u64,
    /// Register/login attempts per minute from one address.
    #[arg(long, env = "EVI_SERVER_AUTH_RATE_PER_IP", default_value_t = RateLimits::default().per_ip_per_minute)]
    auth_rate_per_ip: u32,
    /// Register/login attempts per minute for one user name.
    #[arg(long, env = "EVI_SERVER_AUTH_RATE_PER_USER", default_value_t = RateLimits::default().per_user_per_minute)]
    auth_rate_per_user: u32,
    /// Rate-limit by the last X-Forwarded-For address (only behind a proxy that sets it).
    #[arg(long, env = "EVI_SERVER_TRUST_FORWARDED_FOR")]
    trust_forwarded_for: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Print a one-time invite code for `--registration invite`.
    Invite,
}

#[derive(Clone, Copy, ValueEnum)]
enum RegistrationArg {
    Open,
    Invite,
    Closed,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("evi-server");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/share/evi-server")
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    let filter: Targets = std::env::var("EVI_SERVER_LOG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| "info".parse().expect("valid filter"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(fmt.with_ansi(false))
            .with(filter)
            .init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(fmt.json())
            .with(filter)
            .init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let mut config = Config::new(cli.data.unwrap_or_else(default_data_dir));
    config.registration = match cli.registration {
        RegistrationArg::Open => Registration::Open,
        RegistrationArg::Invite => Registration::Invite,
        RegistrationArg::Closed => Registration::Closed,
    };
    config.metrics_listen = cli.metrics_listen;
    config.quota_bytes = cli.quota_bytes;
    config.limits = Limits {
        max_batch_bytes: cli.max_batch_bytes,
        max_blob_bytes: cli.max_blob_bytes,
        max_page_records: cli.max_page_records.max(1),
        max_page_bytes: cli.max_page_bytes.max(1),
    };
    config.rate_limits = RateLimits {
        per_ip_per_minute: cli.auth_rate_per_ip.max(1),
        per_user_per_minute: cli.auth_rate_per_user.max(1),
    };
    config.trust_forwarded_for = cli.trust_forwarded_for;

    let result = match cli.command {
        Some(Command::Invite) => evi_server::create_invite(&config).await.map(|code| {
            println!("{code}");
        }),
        None => run(cli.listen, config).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("evi-server: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(listen: SocketAddr, config: Config) -> anyhow::Result<()> {
    use std::io::Write;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    // First stdout line: lets scripts and tests use port 0 without polling.
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    evi_server::serve(listener, config, shutdown_signal()).await
}
