//! The `evi-server` binary: parses flags (each also an `EVI_SERVER_*`
//! variable), sets up logging, and calls into the library.

mod cli_admin;
mod cli_backup;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use evi_server::Config;
use evi_server::config::{Connections, Limits, Pairing, RateLimits, Timeouts, Waits};
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
    listen: String,
    /// Folder for the database and blob files [default: $XDG_DATA_HOME/evi-server or ~/.local/share/evi-server]
    #[arg(long, env = "EVI_SERVER_DATA", global = true)]
    data: Option<PathBuf>,
    /// Who may create an account [default: what the database holds from
    /// the last start or `evi-server admin registration`; invite at first].
    /// Stored in the database at start, where `invite`, `admin` and every
    /// replica read it.
    #[arg(long, env = "EVI_SERVER_REGISTRATION", value_enum)]
    registration: Option<RegistrationArg>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default).
    #[arg(long, env = "EVI_SERVER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Log lines on stderr as plain text or one JSON object each (level
    /// filter in EVI_SERVER_LOG, e.g. `debug` or `evi_server=debug`).
    #[arg(
        long,
        env = "EVI_SERVER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Per-user storage quota in bytes (off by default): ciphertext and blob
    /// bytes plus a fixed cost per record, entry id and blob for the rows
    /// that index them (`bytes_used` in the status shows the count).
    #[arg(long, env = "EVI_SERVER_QUOTA_BYTES")]
    quota_bytes: Option<u64>,
    /// Largest push request body in bytes, as sent (JSON or framed).
    #[arg(long, env = "EVI_SERVER_MAX_BATCH_BYTES", default_value_t = Limits::default().max_batch_bytes)]
    max_batch_bytes: u64,
    /// Largest blob upload in bytes (larger blobs travel in parts); a proxy's
    /// body limit in front must allow it.
    #[arg(long, env = "EVI_SERVER_MAX_BLOB_BYTES", default_value_t = Limits::default().max_blob_bytes)]
    max_blob_bytes: u64,
    /// Most records in one pull page.
    #[arg(long, env = "EVI_SERVER_MAX_PAGE_RECORDS", default_value_t = Limits::default().max_page_records)]
    max_page_records: u32,
    /// Most devices in one page of the device list.
    #[arg(long, env = "EVI_SERVER_MAX_PAGE_DEVICES", default_value_t = Limits::default().max_page_devices)]
    max_page_devices: u32,
    /// Most bytes in one pull page as sent, JSON or framed (a larger record
    /// still goes alone).
    #[arg(long, env = "EVI_SERVER_MAX_PAGE_BYTES", default_value_t = Limits::default().max_page_bytes)]
    max_page_bytes: u64,
    /// Register/login attempts per minute from one address.
    #[arg(long, env = "EVI_SERVER_AUTH_RATE_PER_IP", default_value_t = RateLimits::default().per_ip_per_minute)]
    auth_rate_per_ip: u32,
    /// Failed logins per minute for one user name from one address (and
    /// wrong old passwords per minute from one device).
    #[arg(long, env = "EVI_SERVER_AUTH_RATE_PER_USER", default_value_t = RateLimits::default().per_user_per_minute)]
    auth_rate_per_user: u32,
    /// Failed logins per minute for one user name from all addresses
    /// together (devices already logged in are never held up by them).
    #[arg(long, env = "EVI_SERVER_AUTH_RATE_PER_USER_TOTAL", default_value_t = RateLimits::default().per_user_total_per_minute)]
    auth_rate_per_user_total: u32,
    /// Long-poll waits (`GET /records/wait`, and pairing's `GET
    /// /pair/{slot}/wait`) held at once, all users together; past it, 503
    /// with Retry-After. Each costs a connection and
    /// a few kilobytes, no thread.
    #[arg(long, env = "EVI_SERVER_MAX_WAITERS", default_value_t = Waits::default().max_waiters)]
    max_waiters: usize,
    /// Long-poll waits held at once for one account; past it, 429.
    #[arg(long, env = "EVI_SERVER_MAX_WAITERS_PER_USER", default_value_t = Waits::default().max_per_user)]
    max_waiters_per_user: usize,
    /// Longest long-poll wait in seconds (clients ask for less; a reverse
    /// proxy's read timeout in front must be longer).
    #[arg(long, env = "EVI_SERVER_MAX_WAIT_SECS", default_value_t = Waits::default().max_secs)]
    max_wait_secs: u32,
    /// Long-poll waits one device may begin per minute.
    #[arg(long, env = "EVI_SERVER_WAIT_RATE_PER_DEVICE", default_value_t = RateLimits::default().waits_per_device_per_minute)]
    wait_rate_per_device: u32,
    /// Seconds a pairing code (`evi sync pair`) stays usable.
    #[arg(long, env = "EVI_SERVER_PAIR_TTL", default_value_t = Pairing::default().ttl.as_secs())]
    pair_ttl: u64,
    /// Pairings one account may open per minute, and pairing calls without
    /// a token (reading an offer, joining) one client address may make per
    /// minute.
    #[arg(long, env = "EVI_SERVER_PAIR_RATE", default_value_t = RateLimits::default().pair_per_minute)]
    pair_rate: u32,
    /// Seconds a client may take to send a request's whole header (counted
    /// from when the connection waits for one, so an idle kept-alive
    /// connection closes after this long too).
    #[arg(long, env = "EVI_SERVER_HEADER_TIMEOUT", default_value_t = Timeouts::default().header.as_secs())]
    header_timeout: u64,
    /// Seconds a request body may go without a byte before it is cut (408).
    #[arg(long, env = "EVI_SERVER_BODY_TIMEOUT", default_value_t = Timeouts::default().body.as_secs())]
    body_timeout: u64,
    /// Seconds a connection may go without a byte either way while no
    /// request is being handled (a client that stopped reading) before it
    /// is closed.
    #[arg(long, env = "EVI_SERVER_IDLE_TIMEOUT", default_value_t = Timeouts::default().idle.as_secs())]
    idle_timeout: u64,
    /// Seconds a request that shows no valid token may take to send its
    /// body, counted from its header however the bytes trickle (a valid
    /// token lifts it: pushes and uploads on slow links are not cut).
    #[arg(long, env = "EVI_SERVER_REQUEST_TIMEOUT", default_value_t = Timeouts::default().request.as_secs())]
    request_timeout: u64,
    /// Connections held at once, all clients together; past it, new ones
    /// get 503 and are closed. Lowered at start to what the descriptor
    /// limit (LimitNOFILE=, ulimit -n) holds, as the log says.
    #[arg(long, env = "EVI_SERVER_MAX_CONNECTIONS", default_value_t = Connections::default().max_total)]
    max_connections: usize,
    /// Connections held at once from one client address (an IPv6 /64
    /// counts as one); past it, 503. Off with --trust-forwarded-for, where
    /// every connection is the proxy's.
    #[arg(long, env = "EVI_SERVER_MAX_CONNECTIONS_PER_IP", default_value_t = Connections::default().max_per_address)]
    max_connections_per_ip: usize,
    /// Largest request header in bytes (at least 8192); past it, 431 and
    /// the connection is closed.
    #[arg(long, env = "EVI_SERVER_MAX_HEADER_BYTES", default_value_t = Connections::default().max_header_bytes)]
    max_header_bytes: usize,
    /// Requests one account may have in flight at once, long-poll waits
    /// included (a device keeps a few); past it, 429. A valid token lifts
    /// the body deadline, so this is what stops one account (or a stolen
    /// token) from trickling uploads on every connection the server holds.
    #[arg(long, env = "EVI_SERVER_MAX_REQUESTS_PER_USER", default_value_t = Connections::default().max_requests_per_user)]
    max_requests_per_user: usize,
    /// The URL clients use to reach this server, e.g. https://sync.example.org:
    /// requests for any other host are refused (421), so no web page can
    /// reach the server under a name of its own. A reverse proxy in front
    /// must pass the Host header on (Caddy does; nginx needs
    /// `proxy_set_header Host $host`).
    #[arg(long, env = "EVI_SERVER_PUBLIC_URL")]
    public_url: Option<String>,
    /// Keep accounts and record metadata in Postgres instead of the SQLite
    /// file in the data folder: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE
    /// (libpq's ?sslmode= is understood). Several replicas may share one
    /// database; migrations run at start.
    #[arg(
        long,
        env = "EVI_SERVER_DATABASE",
        global = true,
        hide_env_values = true
    )]
    database: Option<String>,
    /// Most connections this process holds to --database.
    #[arg(long, env = "EVI_SERVER_DATABASE_POOL_SIZE", default_value_t = evi_server::store::postgres::DEFAULT_POOL_SIZE)]
    database_pool_size: usize,
    /// Where record bodies and blobs go: s3://BUCKET/PREFIX (an
    /// S3-compatible bucket, set up by AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL and, for a
    /// plain-http endpoint, AWS_ALLOW_HTTP=true), or file:///PATH (a folder).
    /// [default: the data folder]
    #[arg(long, env = "EVI_SERVER_STORE", global = true)]
    store: Option<String>,
    /// Rate-limit by the last X-Forwarded-For address (only behind a proxy that sets it).
    #[arg(long, env = "EVI_SERVER_TRUST_FORWARDED_FOR")]
    trust_forwarded_for: bool,
    /// Seconds a body pack that a compaction after a forget replaced is kept
    /// once no record points at it, for pulls on other replicas that read
    /// its places before (the forgotten bodies stay until then)
    /// [default: 600 with --database, 0 without]
    #[arg(long, env = "EVI_SERVER_COMPACTION_GRACE_SECS")]
    compaction_grace_secs: Option<u64>,
    /// Seconds a key rotation may stay unfinished from its begin; then the
    /// server abandons it and deletes what it staged (the device that began
    /// it starts again). A staging account holds at most a copy of its
    /// account's data (a quarter and 8 MiB more, for what is pushed
    /// meanwhile), within the account's quota.
    #[arg(long, env = "EVI_SERVER_ROTATION_TTL_SECS", default_value_t = evi_server::config::ROTATION_TTL.as_secs())]
    rotation_ttl_secs: u64,
    /// Seconds a multipart upload to the --store bucket may stay unfinished
    /// before the server aborts it as one a stopped or killed server left
    /// (its parts would stay billed); every replica sweeps at start and
    /// every quarter of this.
    #[arg(long, env = "EVI_SERVER_UPLOAD_TTL_SECS", default_value_t = evi_server::storage::uploads::UPLOAD_TTL.as_secs())]
    upload_ttl_secs: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Print a one-time invite code for a server run with `--registration invite`.
    Invite {
        /// How long the code works if unused: 7d, 48h, 30m, 2w, or never.
        #[arg(long, default_value = "7d", value_parser = parse_expires)]
        expires: Expires,
    },
    /// The operator's account tools, against the server's --data or
    /// --database (and --store), running or not.
    Admin {
        #[command(subcommand)]
        command: cli_admin::AdminCommand,
        /// Print JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Write an archive (a tar) of the embedded server in --data (and a
    /// file:// --store) while it runs: a snapshot of the database and every
    /// body pack and blob its rows name, consistent with each other. Not
    /// for --database or an s3:// store (pg_dump and the bucket's tools).
    Backup {
        /// The archive to write (0600; written beside and renamed into place).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Replace FILE if it exists (without it, an existing FILE is refused).
        #[arg(long)]
        force: bool,
    },
    /// Make --data (absent or empty) from an archive of `evi-server backup`:
    /// unpacked and checked beside it, then renamed into place. Start the
    /// server on it afterwards.
    Restore {
        /// The archive to read.
        #[arg(short, long, value_name = "FILE")]
        input: PathBuf,
    },
    /// Copy the embedded server in --data (stopped) into Postgres and, with
    /// --to-store, its bodies and blobs into object storage; devices keep
    /// their tokens and cursors. Run it again to go on after an interruption;
    /// once it finished, the database says so and a second run is refused.
    Migrate {
        /// The Postgres database to move to: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE.
        #[arg(long, env = "EVI_SERVER_MIGRATE_TO_DATABASE", hide_env_values = true)]
        to_database: String,
        /// Where bodies and blobs go (s3://BUCKET/PREFIX or file:///PATH, as
        /// --store); without it they stay in the data folder, and the new
        /// server runs with --data on it.
        #[arg(long, env = "EVI_SERVER_MIGRATE_TO_STORE")]
        to_store: Option<String>,
    },
}

/// `--expires` of an invite: a span from now, or never.
#[derive(Clone, Copy)]
enum Expires {
    In(std::time::Duration),
    Never,
}

fn parse_expires(s: &str) -> Result<Expires, String> {
    if s == "never" {
        return Ok(Expires::Never);
    }
    evi_shared::span::parse_span(s)
        .map(Expires::In)
        .ok_or_else(|| {
            format!(
                "give a number and a unit, like {}, or never",
                evi_shared::span::SPAN_EXAMPLES
            )
        })
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RegistrationArg {
    /// Anyone who can reach the server may register.
    Open,
    /// Registering needs a one-time code from `evi-server invite`.
    Invite,
    /// No new accounts; existing ones keep working.
    Closed,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
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
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    init_logging(cli.log_format);
    let mut config = Config::new(cli.data.unwrap_or_else(default_data_dir));
    config.registration = cli.registration.map(RegistrationArg::mode);
    config.metrics_listen = cli.metrics_listen;
    config.quota_bytes = cli.quota_bytes;
    config.limits = Limits {
        max_batch_bytes: cli.max_batch_bytes,
        max_blob_bytes: cli.max_blob_bytes,
        max_page_records: cli.max_page_records.max(1),
        max_page_bytes: cli.max_page_bytes.max(1),
        max_page_devices: cli.max_page_devices.max(1),
    };
    config.rate_limits = RateLimits {
        per_ip_per_minute: cli.auth_rate_per_ip.max(1),
        per_user_per_minute: cli.auth_rate_per_user.max(1),
        per_user_total_per_minute: cli.auth_rate_per_user_total.max(1),
        waits_per_device_per_minute: cli.wait_rate_per_device.max(1),
        pair_per_minute: cli.pair_rate.max(1),
        ..RateLimits::default()
    };
    config.waits = Waits {
        max_waiters: cli.max_waiters,
        max_per_user: cli.max_waiters_per_user,
        max_secs: cli.max_wait_secs.max(1),
    };
    config.pairing = Pairing {
        ttl: std::time::Duration::from_secs(cli.pair_ttl.max(1)),
    };
    config.trust_forwarded_for = cli.trust_forwarded_for;
    config.compaction_grace = cli
        .compaction_grace_secs
        .map(std::time::Duration::from_secs);
    config.rotation_ttl = std::time::Duration::from_secs(cli.rotation_ttl_secs.max(1));
    config.upload_ttl = std::time::Duration::from_secs(cli.upload_ttl_secs.max(1));
    let secs = |s: u64| std::time::Duration::from_secs(s.max(1));
    config.timeouts = Timeouts {
        header: secs(cli.header_timeout),
        body: secs(cli.body_timeout),
        idle: secs(cli.idle_timeout),
        request: secs(cli.request_timeout),
    };
    config.connections = Connections {
        max_total: cli.max_connections.max(1),
        max_per_address: cli.max_connections_per_ip.max(1),
        max_header_bytes: cli.max_header_bytes.max(8192),
        max_requests_per_user: cli.max_requests_per_user.max(1),
    };
    if let Some(u) = &cli.public_url {
        match evi_server::config::PublicUrl::parse(u) {
            Ok(p) => config.public_url = Some(p),
            Err(e) => {
                eprintln!("evi-server: --public-url {e}");
                eprintln!("hint: for example --public-url https://sync.example.org");
                return std::process::ExitCode::from(2);
            }
        }
    }
    if let Some(url) = cli.database.filter(|u| !u.is_empty()) {
        if let Err(e) = evi_server::store::postgres::parse_url(&url) {
            eprintln!("evi-server: {e}");
            eprintln!(
                "hint: for example --database postgres://evi@db.example.org/evi \
                 (or leave it out to keep the SQLite file in the data folder)"
            );
            return std::process::ExitCode::from(2);
        }
        config.database = Some(url);
    }
    config.database_pool_size = cli.database_pool_size.max(1);
    config.store = cli.store;
    if let Err(e) = config.store_url() {
        eprintln!("evi-server: {e}");
        return std::process::ExitCode::from(2);
    }
    #[cfg(feature = "test-hooks")]
    {
        config.fault = match evi_server::fault::from_env() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("evi-server: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    }

    let result = match cli.command {
        Some(Command::Invite { expires }) => invite(&config, expires).await,
        Some(Command::Admin { command, json }) => cli_admin::run(config, command, json).await,
        Some(Command::Backup { output, force }) => cli_backup::backup(&config, output, force).await,
        Some(Command::Restore { input }) => cli_backup::restore(&config, input).await,
        Some(Command::Migrate {
            to_database,
            to_store,
        }) => migrate(&config, to_database, to_store).await,
        None => run(&cli.listen, config).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("evi-server: {}", e.message);
            if let Some(h) = e.hint {
                eprintln!("hint: {h}");
            }
            std::process::ExitCode::from(e.code)
        }
    }
}

/// `evi-server migrate`: the steps on stderr, the summary on stdout.
async fn migrate(
    config: &Config,
    to_database: String,
    to_store: Option<String>,
) -> Result<(), Failure> {
    if let Err(e) = evi_server::store::postgres::parse_url(&to_database) {
        return Err(Failure::usage(e.to_string()));
    }
    if let Some(url) = &to_store
        && let Err(e) = url.parse::<evi_server::storage::StoreUrl>()
    {
        return Err(Failure::usage(e.to_string()));
    }
    let opts = evi_server::migrate::MigrateOptions {
        data_dir: config.data_dir.clone(),
        to_database,
        to_store,
        fault: config.fault,
    };
    let report = evi_server::migrate::migrate(&opts, &|line| eprintln!("{line}"))
        .await
        .map_err(|e| {
            let f = Failure::new(e.to_string());
            match e.hint() {
                Some(h) => f.hinted(h),
                None => f,
            }
        })?;
    let c = &report.checked;
    println!(
        "moved: {} accounts, {} devices, {} records, {} entries, {} blobs; copied {} packs \
         ({} bytes) and {} blobs ({} bytes), {} packs and {} blobs were there already",
        c.rows.get("users").unwrap_or(&0),
        c.rows.get("devices").unwrap_or(&0),
        c.rows.get("records").unwrap_or(&0),
        c.rows.get("entries").unwrap_or(&0),
        c.rows.get("blobs").unwrap_or(&0),
        report.packs_copied,
        report.pack_bytes_copied,
        report.blobs_copied,
        report.blob_bytes_copied,
        report.packs_present,
        report.blobs_present,
    );
    println!(
        "verified: every table's rows counted, {} records compared, SHA-256 of {} bodies \
         ({} bytes) and {} blobs ({} bytes) match",
        c.records, c.bodies, c.body_bytes, c.blobs, c.blob_bytes
    );
    Ok(())
}

/// What the process says and returns when it gives up: 1 for a failure, 2
/// for flags that cannot work.
pub(crate) struct Failure {
    message: String,
    hint: Option<String>,
    code: u8,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            code: 1,
        }
    }
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            ..Self::new(message)
        }
    }
    fn hinted(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::new(format!("{e:#}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::new(e.to_string())
    }
}

impl RegistrationArg {
    pub(crate) fn mode(self) -> Registration {
        match self {
            Self::Open => Registration::Open,
            Self::Invite => Registration::Invite,
            Self::Closed => Registration::Closed,
        }
    }
}

/// `evi-server invite`: the code on stdout (alone, for scripts), the folder
/// it belongs to and until when it works on stderr, and a note when the
/// server's registration mode (in its database) needs no code.
async fn invite(config: &Config, expires: Expires) -> Result<(), Failure> {
    use evi_server::InviteError;
    let now = chrono::Utc::now();
    let until = match expires {
        Expires::Never => None,
        Expires::In(d) => Some(
            chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| Failure::usage("--expires is too far in the future"))?,
        ),
    };
    match evi_server::create_invite(config, until.map(|t| t.timestamp())).await {
        Ok(invite) => {
            let folder =
                std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
            if invite.registration == Registration::Open {
                eprintln!(
                    "note: registration is open: anyone who reaches the server can register \
                     without a code, so nobody needs this one; it counts once registration is \
                     invite (`evi-server admin registration invite`, or --registration invite)"
                );
            }
            let until = until.map_or_else(
                || "never expires".to_owned(),
                |t| format!("works until {}", t.format("%Y-%m-%d %H:%M UTC")),
            );
            eprintln!(
                "one-time invite code for the evi-server on {}, {until} (the new user passes \
                 it to `evi sync init --invite CODE`):",
                folder.display()
            );
            println!("{}", invite.code);
            Ok(())
        }
        Err(e @ InviteError::NoDatabase { .. }) => {
            let InviteError::NoDatabase { folder } = &e else {
                unreachable!()
            };
            let hint = format!(
                "pass the folder the server runs on (--data DIR or EVI_SERVER_DATA), \
                 or start the server there first: evi-server --data {}",
                folder.display()
            );
            Err(Failure::new(e.to_string()).hinted(hint))
        }
        Err(e @ InviteError::Closed) => Err(Failure::usage(e.to_string()).hinted(
            "to admit users with codes: `evi-server admin registration invite` \
             (or restart the server with --registration invite)",
        )),
        Err(InviteError::Other(e)) => Err(e.into()),
    }
}

/// Binds the first address `listen` (HOST:PORT, host names resolved) names
/// that can be bound.
async fn bind(listen: &str) -> Result<tokio::net::TcpListener, Failure> {
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host(listen).await {
        Ok(a) => a.collect(),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(Failure::usage(format!(
                "--listen {listen}: expected HOST:PORT, for example 127.0.0.1:8787"
            )));
        }
        Err(e) => {
            return Err(Failure::new(format!(
                "cannot resolve --listen {listen}: {e}"
            )));
        }
    };
    let mut last = None;
    for addr in addrs {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some((addr, e)),
        }
    }
    let Some((addr, e)) = last else {
        return Err(Failure::new(format!(
            "--listen {listen}: the name has no address"
        )));
    };
    if e.kind() == std::io::ErrorKind::AddrInUse {
        return Err(
            Failure::new(format!("cannot listen on {addr}: address already in use")).hinted(
                "another evi-server or another program is listening there: stop it, \
             or choose another address with --listen (port 0 picks a free one)",
            ),
        );
    }
    Err(Failure::new(format!("cannot listen on {addr}: {e}")))
}

/// A refusal to share the data folder says what to do about it.
fn open_failure(e: anyhow::Error) -> Failure {
    use evi_server::datalock::DataLockError;
    match e.downcast_ref::<DataLockError>() {
        Some(DataLockError::Held { .. }) => Failure::new(e.to_string()).hinted(
            "one evi-server per data folder: stop the other one first, \
             or give this one its own folder with --data DIR",
        ),
        _ => match e.downcast_ref::<evi_server::storage::BucketError>() {
            Some(b) => Failure::new(e.to_string()).hinted(b.hint()),
            None => match e.downcast_ref::<evi_server::migrate::record::Unfinished>() {
                Some(u) => Failure::new(e.to_string()).hinted(format!(
                    "run `evi-server migrate --data {} --to-database …` (with the same \
                     --to-store) again: it goes on where it stopped; then start the server",
                    u.folder
                )),
                None => e.into(),
            },
        },
    }
}

async fn run(listen: &str, mut config: Config) -> Result<(), Failure> {
    use std::io::Write;
    config.fd_limit = Some(evi_server::fdlimit::fit(&mut config));
    let listener = bind(listen).await?;
    let state = evi_server::AppState::open(config)
        .await
        .map_err(open_failure)?;
    // First stdout line, once the data folder is open: lets scripts and tests
    // use port 0 without polling.
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    Ok(evi_server::serve_state(listener, state, shutdown_signal()).await?)
}
