//! evi-server: stores opaque, end-to-end encrypted records and blobs per user.
//!
//! [`router`] builds the HTTP API over an [`AppState`]; [`serve`] opens the
//! data folder and runs the API (and, if configured, the metrics listener)
//! until the shutdown future resolves, then finishes requests in flight.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use evi_shared::api::Registration;
use tokio::net::TcpListener;

pub mod admin;
pub mod auth;
pub mod backup;
pub mod blobs;
pub mod bodies;
pub mod config;
pub mod connlimit;
pub mod crosssite;
pub mod datalock;
pub mod deadline;
pub mod device_name;
pub mod disk_usage;
pub mod error;
pub mod fault;
pub mod fdlimit;
pub mod flood;
pub mod inflight;
pub mod keyproof;
pub mod listen;
pub mod metrics;
pub mod migrate;
pub mod openapi;
pub mod passwords;
pub mod private;
pub mod ratelimit;
pub mod rotation;
pub mod routes;
pub mod storage;
pub mod store;
pub mod waiters;
pub mod worker;

pub use config::Config;

use crate::blobs::BlobStore;
use crate::bodies::BodyStore;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::store::Store;
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;

/// Body limit for the small JSON calls (everything but push and blob upload).
const SMALL_BODY_BYTES: usize = 1024 * 1024;

pub struct Shared {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub bodies: Arc<dyn BodyStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub passwords: auth::Passwords,
    pub limiter: RateLimiter,
    pub metrics: Arc<Metrics>,
    pub waiters: Arc<waiters::Waiters>,
    /// Authenticated requests being handled, per account.
    pub inflight: Arc<inflight::InFlight>,
    /// Connections held on the API listener.
    pub connections: Arc<connlimit::ConnLimiter>,
    pub refusals: Arc<flood::Refusals>,
    /// Rewrites body packs after a forget (see [`bodies::compact`]).
    pub compactor: Arc<bodies::compact::Compactor>,
    /// Deletes blobs no record refers to any more (see [`blobs::collect`]).
    pub blob_collector: Arc<blobs::collect::Collector>,
    /// The bucket bodies and blobs go to, when `--store` names one: its
    /// abandoned multipart uploads are swept (see [`storage::uploads`]).
    pub bucket: Option<storage::Bucket>,
    /// Held for as long as this state lives (see [`datalock`]); `None` for
    /// a state built from parts by [`AppState::new`].
    _data_lock: Option<datalock::DataLock>,
}

/// What every handler can reach; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// Locks the data folder for this process (a second server on it is
    /// refused with a [`datalock::DataLockError`]), opens (creating if
    /// needed) the SQLite store under `config.data_dir` and the body and
    /// blob stores `--store` names (see [`storage`]), and sweeps old orphan
    /// packs (bodies of a push that crashed before its commit).
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        private::dir(&config.data_dir)
            .with_context(|| format!("cannot create data folder {}", config.data_dir.display()))?;
        // Before anything in the folder is touched, the sweep above all.
        // Replicas on one Postgres database may share the folder (its
        // bodies and blobs): there no lock, and the sweeps keep whatever is
        // young enough to be another replica's work under way.
        let lock = match config.database {
            None => Some(datalock::DataLock::acquire(&config.data_dir)?),
            Some(_) => None,
        };
        // SQLite gives its -wal and -shm files the mode of the database
        // file: 0600 from the start. What an older server left gets closed.
        private::close_data_folder(&config.data_dir).with_context(|| {
            format!(
                "cannot make the data folder {} private (0700, files 0600)",
                config.data_dir.display()
            )
        })?;
        let (store, pg): (Arc<dyn Store>, _) = match &config.database {
            Some(url) => {
                let pg = PgStore::open(url, config.database_pool_size).await?;
                // Not on a database an `evi-server migrate` is still filling.
                migrate::record::refuse_unfinished(&pg).await?;
                tracing::info!(database = %pg.target(), pool_size = config.database_pool_size, "using Postgres");
                (Arc::new(pg.clone()), Some(pg))
            }
            None => {
                private::file(&config.db_path()).with_context(|| {
                    format!("cannot create database {}", config.db_path().display())
                })?;
                let store = SqliteStore::open(&config.db_path()).with_context(|| {
                    format!("cannot open database {}", config.db_path().display())
                })?;
                (Arc::new(store), None)
            }
        };
        if let Some(mode) = config.registration {
            store.set_registration(mode).await?;
        }
        let stores = storage::open_stores(&config).await?;
        let state = Self::from_parts(config, store, stores, lock);
        if let Some(pg) = pg {
            // Commits and revocations through other replicas wake the
            // waits parked here; failed logins count across replicas.
            store::postgres::listen::spawn(&pg, state.waiters.clone());
            state
                .limiter
                .share_failures(Arc::new(store::postgres::failures::PgFailures::new(pg)));
        }
        state.sweep_orphan_packs().await?;
        if let Some(bucket) = &state.bucket {
            storage::uploads::sweep(bucket, state.config.upload_ttl).await;
        }
        // What a key rotation retired before a crash or a stop goes now.
        rotation::purge(&state).await;
        rotation::expire(&state).await;
        // What a forget listed before a crash or a stop is rewritten now.
        state.compactor.wake();
        state.blob_collector.wake();
        Ok(state)
    }

    /// Who may create an account now: what the database holds (set by the
    /// `--registration` of the last start, or `evi-server admin
    /// registration`), [`Registration::Invite`] if nothing.
    pub async fn registration(&self) -> Result<Registration, store::StoreError> {
        Ok(self
            .store
            .registration()
            .await?
            .unwrap_or(Registration::Invite))
    }

    /// Deletes the packs no record points at that are older than
    /// [`bodies::ORPHAN_MIN_AGE`]; logs how many went and how many stay.
    async fn sweep_orphan_packs(&self) -> anyhow::Result<()> {
        // Packs listed before the rows are read: a pack is referenced from
        // its commit on, so no listed pack can gain its first row unseen.
        let packs = self.bodies.list_packs().await?;
        if packs.is_empty() {
            return Ok(());
        }
        let referenced = self.store.referenced_packs().await?;
        let swept = bodies::sweep_orphans(
            &*self.bodies,
            packs,
            &referenced,
            std::time::SystemTime::now(),
        )
        .await?;
        if swept.removed > 0 {
            tracing::info!(
                removed = swept.removed,
                "removed orphan body packs left by an interrupted push"
            );
        }
        if swept.young > 0 {
            tracing::info!(
                kept = swept.young,
                min_age_secs = bodies::ORPHAN_MIN_AGE.as_secs(),
                "kept unreferenced body packs younger than the sweep's minimum age \
                 (a push may still commit them; a later start removes them if not)"
            );
        }
        Ok(())
    }

    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        bodies: Arc<dyn BodyStore>,
        blobs: Arc<dyn BlobStore>,
    ) -> Self {
        let stores = storage::Stores {
            bodies,
            blobs,
            bucket: None,
        };
        Self::from_parts(config, store, stores, None)
    }

    fn from_parts(
        config: Config,
        store: Arc<dyn Store>,
        stores: storage::Stores,
        data_lock: Option<datalock::DataLock>,
    ) -> Self {
        let storage::Stores {
            bodies,
            blobs,
            bucket,
        } = stores;
        Self(Arc::new(Shared {
            _data_lock: data_lock,
            limiter: RateLimiter::new(config.rate_limits.clone()),
            waiters: waiters::Waiters::new(config.waits),
            inflight: inflight::InFlight::new(config.connections.max_requests_per_user),
            connections: connlimit::ConnLimiter::new(
                config.connections.max_total,
                // Behind a proxy every connection is the proxy's.
                (!config.trust_forwarded_for).then_some(config.connections.max_per_address),
            ),
            refusals: Arc::new(flood::Refusals::new()),
            compactor: bodies::compact::Compactor::new(
                store.clone(),
                bodies.clone(),
                config.fault,
                config.compaction_grace(),
            ),
            blob_collector: blobs::collect::Collector::new(
                store.clone(),
                blobs.clone(),
                config.fault,
            ),
            config,
            store,
            bodies,
            blobs,
            bucket,
            passwords: auth::Passwords::new(),
            metrics: Arc::new(Metrics::new()),
        }))
    }
}

pub fn router(state: AppState) -> Router {
    use routes::{accounts, blobs, devices, meta, pairing, records};
    let batch_limit = usize::try_from(state.config.limits.max_batch_bytes).unwrap_or(usize::MAX);
    let api = Router::new()
        .route("/capabilities", get(meta::capabilities))
        .route("/status", get(meta::status))
        .route("/openapi.json", get(openapi::serve_doc))
        .route("/register", post(accounts::register))
        .route("/login", post(accounts::login))
        .route("/password", post(accounts::change_password))
        .route(
            "/key-check",
            get(accounts::get_key_check).put(accounts::put_key_check),
        )
        .route("/devices", get(devices::list))
        .route("/devices/{id}", axum::routing::delete(devices::revoke))
        .route(
            "/records",
            get(records::pull)
                .post(records::push)
                .layer(DefaultBodyLimit::max(batch_limit)),
        )
        .route("/records/known", post(records::known))
        .route("/records/damaged", post(records::damaged))
        .route("/records/wait", get(routes::wait::wait))
        .route("/pair", post(pairing::open))
        .route("/pair/{slot}", get(pairing::offer).delete(pairing::close))
        .route("/pair/{slot}/join", post(pairing::join))
        .route("/pair/{slot}/wait", get(pairing::wait))
        .route("/pair/{slot}/device", post(pairing::device))
        .route("/pair/{slot}/reply", post(pairing::reply))
        .route("/rotation", post(routes::rotation::begin))
        .route("/rotation/commit", post(routes::rotation::commit))
        .route("/blobs/missing", post(blobs::missing))
        .route("/blobs/purge", post(blobs::purge))
        // Upload bodies are streamed with their own limit.
        .route(
            "/blobs/{name}",
            get(blobs::get)
                .put(blobs::put)
                .layer(DefaultBodyLimit::disable()),
        );
    Router::new()
        .route("/healthz", get(meta::healthz))
        .nest(evi_shared::api::API_PREFIX, api)
        .fallback(blobs::fallback)
        .layer(DefaultBodyLimit::max(SMALL_BODY_BYTES))
        .layer(axum::middleware::from_fn(error::json_shape))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crosssite::check_host,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

/// Runs the server on `listener` until `shutdown` resolves, then stops
/// accepting and waits for requests in flight.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_state(listener, AppState::open(config).await?, shutdown).await
}

/// [`serve`] with the data folder already open (the binary opens it before
/// it announces its address, so "listening on" means ready).
pub async fn serve_state(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    log_start(&state.config, state.registration().await?);
    let metrics_listen = state.config.metrics_listen;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics_task = match metrics_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr).await.map_err(|e| {
                anyhow::anyhow!("cannot listen for metrics on {addr} (--metrics-listen): {e}")
            })?;
            tracing::info!(addr = %l.local_addr()?, "metrics listening");
            let app = Router::new()
                .route("/metrics", get(metrics::serve_metrics))
                .with_state(state.clone());
            let mut rx = stop_rx.clone();
            let options = listen::Options {
                // A scraper or two, never the public.
                connections: connlimit::ConnLimiter::new(METRICS_CONNECTIONS, None),
                ..listen_options(&state)
            };
            Some(tokio::spawn(listen::serve(l, app, options, async move {
                let _ = rx.wait_for(|s| *s).await;
            })))
        }
        None => None,
    };
    tracing::info!(addr = %listener.local_addr()?, "listening");
    let options = listen_options(&state);
    let waiters = state.waiters.clone();
    let refusals = state.refusals.clone();
    let mut rx = stop_rx.clone();
    let flood_lines = tokio::spawn(async move {
        let mut tick = tokio::time::interval(flood::INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => refusals.log_if_due(),
                _ = rx.wait_for(|s| *s) => break,
            }
        }
    });
    let expiring = {
        let state = state.clone();
        let every = rotation::expire_every(state.config.rotation_ttl);
        every_until_stopped(every, stop_rx.clone(), move || {
            let state = state.clone();
            async move { rotation::expire(&state).await }
        })
    };
    let sweeping = state.bucket.clone().map(|bucket| {
        let ttl = state.config.upload_ttl;
        every_until_stopped(
            storage::uploads::sweep_every(ttl),
            stop_rx.clone(),
            move || {
                let bucket = bucket.clone();
                async move { storage::uploads::sweep(&bucket, ttl).await }
            },
        )
    });
    listen::serve(listener, router(state), options, async move {
        shutdown.await;
        tracing::info!("shutting down: finishing requests in flight");
        // Parked long polls answer now instead of holding the stop up.
        waiters.close();
        let _ = stop_tx.send(true);
    })
    .await;
    if let Some(t) = metrics_task {
        t.await?;
    }
    flood_lines.await?;
    expiring.await?;
    if let Some(t) = sweeping {
        t.await?;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Runs `round` every `every`, the first one `every` after now, until the
/// server stops (a round under way finishes first).
fn every_until_stopped<F, Fut>(
    every: std::time::Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    round: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            // Decided before the round runs: the select's borrow of `stop`
            // must not live across it.
            let due = tokio::select! {
                _ = tick.tick() => true,
                _ = stop.wait_for(|s| *s) => false,
            };
            if !due {
                break;
            }
            round().await;
        }
    })
}

/// Connections the metrics listener holds at once.
const METRICS_CONNECTIONS: usize = 16;

fn listen_options(state: &AppState) -> listen::Options {
    listen::Options {
        timeouts: state.config.timeouts,
        max_header_bytes: state.config.connections.max_header_bytes,
        connections: state.connections.clone(),
        refusals: state.refusals.clone(),
    }
}

/// The first log lines of a run: what this process serves and with which
/// settings, so an operator can check them without reading the unit file.
fn log_start(config: &Config, registration: Registration) {
    let data = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
    let l = &config.limits;
    let quota = config
        .quota_bytes
        .map_or_else(|| "none".to_owned(), |q| q.to_string());
    let public_url = config
        .public_url
        .as_ref()
        .map_or("none", |p| p.url.as_str());
    tracing::info!(
        version = %env!("CARGO_PKG_VERSION"),
        data = %data.display(),
        registration = %registration,
        max_batch_bytes = l.max_batch_bytes,
        max_blob_bytes = l.max_blob_bytes,
        max_page_records = l.max_page_records,
        max_page_bytes = l.max_page_bytes,
        quota_bytes = %quota,
        auth_rate_per_ip = config.rate_limits.per_ip_per_minute,
        auth_rate_per_user = config.rate_limits.per_user_per_minute,
        auth_rate_per_user_total = config.rate_limits.per_user_total_per_minute,
        trust_forwarded_for = config.trust_forwarded_for,
        public_url = %public_url,
        store = %config.store.as_deref().unwrap_or("data-folder"),
        header_timeout_secs = config.timeouts.header.as_secs(),
        body_timeout_secs = config.timeouts.body.as_secs(),
        idle_timeout_secs = config.timeouts.idle.as_secs(),
        request_timeout_secs = config.timeouts.request.as_secs(),
        max_connections = config.connections.max_total,
        max_connections_per_ip = config.connections.max_per_address,
        max_header_bytes = config.connections.max_header_bytes,
        max_waiters = config.waits.max_waiters,
        max_wait_secs = config.waits.max_secs,
        pair_ttl_secs = config.pairing.ttl.as_secs(),
        pair_rate = config.rate_limits.pair_per_minute,
        "starting evi-server"
    );
    if registration == Registration::Open {
        tracing::warn!(
            "registration is open: anyone who can reach this server may create an account; \
             use --registration invite (codes from `evi-server invite`) unless only you can reach it"
        );
    }
    if let Some(f) = &config.fd_limit {
        fdlimit::log(f, config);
    }
}

/// Why [`create_invite`] made no code.
#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    /// The data folder holds no database: most likely a mistyped `--data`, or
    /// a server that never ran there. A code stored in a new database would be
    /// one the real server never sees.
    #[error("no evi-server database in {} (no {} there)", .folder.display(), config::DB_FILE)]
    NoDatabase { folder: PathBuf },
    /// Registration is closed: the server accepts no codes.
    #[error("registration is closed: this server accepts no new accounts, with or without a code")]
    Closed,
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// A new invite: the code (only its hash is stored) and the registration
/// mode the database holds, which says whether anyone needs it.
pub struct Invite {
    pub code: String,
    pub registration: Registration,
}

/// The store of the server's own `--database` or data folder, never
/// creating a database: a command run on the server machine (`invite`,
/// `admin`) that wrote into a new one would change nothing the server sees.
pub async fn open_existing_store(config: &Config) -> Result<Arc<dyn Store>, InviteError> {
    if let Some(url) = &config.database {
        return Ok(Arc::new(
            PgStore::open(url, 1).await.map_err(anyhow::Error::from)?,
        ));
    }
    let db = config.db_path();
    if !db.is_file() {
        return Err(InviteError::NoDatabase {
            folder: std::path::absolute(&config.data_dir)
                .unwrap_or_else(|_| config.data_dir.clone()),
        });
    }
    Ok(Arc::new(SqliteStore::open(&db).map_err(|e| {
        anyhow::anyhow!("cannot open database {}: {e}", db.display())
    })?))
}

/// Creates a one-time invite code in the server's database, usable until
/// `expires_at` (or for ever), unless registration is closed.
pub async fn create_invite(
    config: &Config,
    expires_at: Option<i64>,
) -> Result<Invite, InviteError> {
    let store = open_existing_store(config).await?;
    let registration = store
        .registration()
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the registration mode: {e}"))?
        .unwrap_or(Registration::Invite);
    if registration == Registration::Closed {
        return Err(InviteError::Closed);
    }
    let (code, hash) = auth::new_invite()?;
    store
        .create_invite(hash, chrono::Utc::now().timestamp(), expires_at)
        .await
        .map_err(|e| anyhow::anyhow!("cannot store the invite code: {e}"))?;
    Ok(Invite { code, registration })
}
