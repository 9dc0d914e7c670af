//! Run-time settings of one server process. `main.rs` fills them from flags and
//! `EVI_SERVER_*` variables; tests and the benchmark build them directly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use evi_shared::api::{Capabilities, Registration};
use evi_shared::limits;

/// The SQLite database's file name inside the data folder.
pub const DB_FILE: &str = "evi-server.sqlite3";

/// Limits the server enforces and advertises in `GET /api/v1/capabilities`.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_batch_bytes: u64,
    pub max_blob_bytes: u64,
    pub max_page_records: u32,
    pub max_page_bytes: u64,
    /// Most devices in one page of `GET /devices`: an account may hold
    /// many, and one answer stays small whatever their number.
    pub max_page_devices: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_batch_bytes: limits::DEFAULT_MAX_BATCH_BYTES,
            max_blob_bytes: limits::DEFAULT_MAX_BLOB_BYTES,
            max_page_records: limits::DEFAULT_MAX_PAGE_RECORDS,
            max_page_bytes: limits::DEFAULT_MAX_PAGE_BYTES,
            max_page_devices: limits::DEFAULT_MAX_PAGE_DEVICES,
        }
    }
}

/// Attempts allowed per minute (token buckets that refill continuously and
/// start full); see [`crate::ratelimit`] for who shares which bucket.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// Register and login attempts from one client address.
    pub per_ip_per_minute: u32,
    /// Failed logins for one user from one address; wrong old passwords
    /// given by one device.
    pub per_user_per_minute: u32,
    /// Failed logins for one user from all addresses together.
    pub per_user_total_per_minute: u32,
    /// Long-poll waits (`GET /records/wait`) begun by one device: a client
    /// that loops without waiting is held to this.
    pub waits_per_device_per_minute: u32,
    /// Pairing slots one account opens, and pairing calls without a token
    /// (reading an offer, joining) one address makes (`--pair-rate`): slots
    /// cannot flood the server, nor can slot numbers be swept.
    pub pair_per_minute: u32,
    /// Most buckets held at once (each well under 200 bytes, so about 10 MB
    /// at the default): past it, the buckets touched longest ago are dropped.
    pub max_keys: usize,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            per_ip_per_minute: 60,
            per_user_per_minute: 10,
            per_user_total_per_minute: 100,
            waits_per_device_per_minute: 300,
            pair_per_minute: 10,
            max_keys: 50_000,
        }
    }
}

/// Pairing slots (see [`crate::routes::pairing`]).
#[derive(Debug, Clone, Copy)]
pub struct Pairing {
    /// How long a slot lives (`--pair-ttl`): the time the new device has to
    /// type the code.
    pub ttl: Duration,
}

impl Default for Pairing {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(evi_shared::limits::DEFAULT_PAIR_TTL_SECS),
        }
    }
}

/// Long-poll waits (`GET /records/wait`, see [`crate::waiters`]).
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// Waits held at once, all users together: past it, 503 with
    /// `Retry-After`.
    pub max_waiters: usize,
    /// Waits held at once for one user (a few devices each hold one): past
    /// it, 429, so one account cannot take every slot.
    pub max_per_user: usize,
    /// Longest wait a client may ask for.
    pub max_secs: u32,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            max_waiters: 4096,
            max_per_user: 32,
            max_secs: 60,
        }
    }
}

/// How long the server waits on a client (see [`crate::listen`]).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For a request's whole header, from when the connection waits for it.
    pub header: Duration,
    /// For the next byte of a request body.
    pub body: Duration,
    /// For any byte to move on a connection while no handler runs.
    pub idle: Duration,
    /// For the whole body of a request that has shown no valid token,
    /// counted from its header (see [`crate::deadline`]).
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(30),
            body: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            request: Duration::from_secs(30),
        }
    }
}

/// How many connections the server holds and how much of a header it reads
/// (see [`crate::connlimit`]). [`crate::fdlimit::fit`] lowers the totals to
/// what the descriptor limit allows.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    /// Connections held at once, all clients together.
    pub max_total: usize,
    /// Connections held at once from one address (off behind a proxy,
    /// with `trust_forwarded_for`).
    pub max_per_address: usize,
    /// Largest request header (431 past it, measured once parsed: see
    /// [`crate::listen`]); at least 8 KiB. It also bounds hyper's read
    /// buffer, which a header fills to about twice it before hyper itself
    /// refuses it, and is the most hyper reads from a socket at once, so it paces
    /// uploads too: 64 KiB, not a tighter 16, because a 60 MB blob took up
    /// to twice as long through 16 KiB reads (hyper's own default, ~400 KB,
    /// let 2,000 unfinished headers hold 767 MB).
    pub max_header_bytes: usize,
    /// Authenticated requests one account has in flight at once, waits
    /// included (see [`crate::inflight`]); past it, 429. It bounds what a
    /// valid token may hold, since a token lifts the body deadline.
    pub max_requests_per_user: usize,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            max_total: 8192,
            max_per_address: 64,
            max_header_bytes: 64 * 1024,
            max_requests_per_user: 64,
        }
    }
}

/// The URL clients reach this server at (`--public-url`): requests for any
/// other host are refused, so a web page that points its own name at this
/// server (DNS rebinding) gets nothing from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// As given, without a trailing `/`: what error messages point to.
    pub url: String,
    /// Lowercase host (IPv6 in brackets, as in a `Host` header).
    pub host: String,
    /// The explicit port, or the scheme's (80, 443).
    pub port: u16,
}

impl PublicUrl {
    /// `http://HOST[:PORT][/PATH]` or `https://…`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let uri: axum::http::Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
        let port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(format!("{s:?} needs http:// or https://")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{s:?} names no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "{s:?}: a public URL holds no user name or password"
            ));
        }
        Ok(Self {
            url: s.trim_end_matches('/').to_owned(),
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(port),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Holds `evi-server.sqlite3`, `bodies/` and `blobs/`; nothing is
    /// written elsewhere.
    pub data_dir: PathBuf,
    /// Who may create an account, when given at start (`--registration`):
    /// the server then stores it in the database, where every replica,
    /// `evi-server invite` and `evi-server admin registration` read and
    /// change it. `None`: what the database holds ([`Registration::Invite`]
    /// if nothing).
    pub registration: Option<Registration>,
    pub metrics_listen: Option<SocketAddr>,
    /// Per-user cap on stored bytes: bodies, blobs and the rows that index
    /// them (see [`crate::store::record_cost`]); `None` is unlimited.
    pub quota_bytes: Option<u64>,
    pub limits: Limits,
    pub rate_limits: RateLimits,
    pub waits: Waits,
    pub pairing: Pairing,
    /// Take the client address from the last `X-Forwarded-For` entry (only
    /// behind a reverse proxy that sets it), for rate limiting.
    pub trust_forwarded_for: bool,
    pub timeouts: Timeouts,
    pub connections: Connections,
    /// Where clients reach this server; when set, the `Host` of every API
    /// request must name it.
    pub public_url: Option<PublicUrl>,
    /// The descriptor limit as [`crate::fdlimit::fit`] found and raised it,
    /// when the binary ran it (the start lines report it).
    pub fd_limit: Option<crate::fdlimit::Fitted>,
    /// A test hook (see [`crate::fault`]); always `None` in a build without
    /// the `test-hooks` feature.
    pub fault: Option<crate::fault::Fault>,
    /// `postgres://…` (`--database`): the metadata goes there instead of
    /// the SQLite file in the data folder. Holds the password: never log it
    /// (see [`crate::store::postgres::describe`]).
    pub database: Option<String>,
    /// Most connections this process holds to `database`.
    pub database_pool_size: usize,
    /// Where bodies and blobs go (`--store`, see [`crate::storage`]):
    /// `None` for the data folder.
    pub store: Option<String>,
    /// How long a pack a compaction replaced stays after the records were
    /// pointed off it (`--compaction-grace-secs`, see
    /// [`crate::bodies::compact`]); `None`: [`Config::compaction_grace`].
    pub compaction_grace: Option<Duration>,
    /// How long a key rotation may stay unfinished from its begin before
    /// the server abandons it (`--rotation-ttl-secs`, see
    /// [`crate::rotation::expire`]): a staging account holds up to a
    /// second copy of its account's data, so one never committed must not
    /// hold it for good.
    pub rotation_ttl: Duration,
    /// How old a multipart upload in the bucket may grow unfinished before
    /// any replica aborts it as one a stopped server left
    /// (`--upload-ttl-secs`, see [`crate::storage::uploads`]).
    pub upload_ttl: Duration,
}

/// [`Config::rotation_ttl`] unless set: a week.
pub const ROTATION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl Config {
    pub fn new(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            registration: None,
            metrics_listen: None,
            quota_bytes: None,
            limits: Limits::default(),
            rate_limits: RateLimits::default(),
            waits: Waits::default(),
            pairing: Pairing::default(),
            trust_forwarded_for: false,
            timeouts: Timeouts::default(),
            connections: Connections::default(),
            public_url: None,
            fd_limit: None,
            fault: None,
            database: None,
            database_pool_size: crate::store::postgres::DEFAULT_POOL_SIZE,
            store: None,
            compaction_grace: None,
            rotation_ttl: ROTATION_TTL,
            upload_ttl: crate::storage::uploads::UPLOAD_TTL,
        }
    }

    /// The grace a replaced pack gets: as set, or by default none on the
    /// embedded store (one process, whose own pulls the compaction waits
    /// for) and [`crate::bodies::readers::MAX_WAIT`] on a database
    /// replicas may share (their pulls cannot be seen from here; that is
    /// as long as a compaction waits for its own).
    pub fn compaction_grace(&self) -> Duration {
        self.compaction_grace.unwrap_or(match self.database {
            None => Duration::ZERO,
            Some(_) => crate::bodies::readers::MAX_WAIT,
        })
    }

    /// What `GET /capabilities` says, with the registration mode the
    /// database holds now.
    pub fn capabilities(&self, registration: Registration) -> Capabilities {
        Capabilities {
            max_batch_bytes: self.limits.max_batch_bytes,
            max_blob_bytes: self.limits.max_blob_bytes,
            max_page_records: self.limits.max_page_records,
            max_page_bytes: self.limits.max_page_bytes,
            registration,
            frames: true,
            known_entries: true,
            damage_reports: true,
            stream_pull: true,
            max_wait_secs: self.waits.max_secs,
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join(DB_FILE)
    }

    /// `--store` parsed; `None` for the data folder.
    pub fn store_url(
        &self,
    ) -> Result<Option<crate::storage::StoreUrl>, crate::storage::StoreUrlError> {
        self.store.as_deref().map(str::parse).transpose()
    }

    /// The folder that holds `bodies/` and `blobs/`: a `file://` store's,
    /// else the data folder (with an `s3://` store nothing is put there).
    pub fn store_dir(&self) -> PathBuf {
        match self.store_url() {
            Ok(Some(crate::storage::StoreUrl::Folder(root))) => root,
            _ => self.data_dir.clone(),
        }
    }

    pub fn blobs_dir(&self) -> PathBuf {
        self.store_dir().join("blobs")
    }

    /// The pack files of record bodies (see [`crate::bodies::packs`]).
    pub fn bodies_dir(&self) -> PathBuf {
        self.store_dir().join("bodies")
    }
}
