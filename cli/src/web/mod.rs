//! `evi web`: a local viewer of the home's sessions, in the browser.
//!
//! It promises to be read-only but for three writes, each what a command
//! does: the pull button runs the same pull as `evi sync pull` (see
//! [`pull`]), inside the eVi home; a search brings the search index, a
//! cache, up to date as `evi sessions search` does ([`search`]); and the
//! rewind dialog undoes files eVi wrote exactly as `evi rewind SEQ` does,
//! after showing its plan ([`rewind`]), the one write outside the home. The
//! two that change what a user has (pull, rewind) are POSTs, which only
//! this viewer's own page can send ([`access`]). Everything a transcript
//! holds reaches the page as JSON data, and the page turns it into text
//! nodes only (see `assets/app.js`), under a Content-Security-Policy that
//! forbids inline script and any string-to-HTML sink ([`access`]).
//!
//! Routes: `/` (the list, and `/?session=ID` a session: the page decides),
//! its three assets, and `/api/…` ([`api`]).

mod access;
mod api;
mod assets;
mod error;
mod library;
mod pull;
mod rewind;
mod search;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use access::CSP;
use access::{Access, random_token};
use library::Library;

use crate::home::EviHome;

/// How the viewer is reached.
#[derive(Debug, Clone)]
pub struct Served {
    /// The address it is bound to.
    pub addr: SocketAddr,
    /// Set when bound to anything but loopback: every request must carry it.
    pub token: Option<String>,
}

impl Served {
    /// The URL to open: with `?token=` when one is needed.
    pub fn url(&self) -> String {
        match &self.token {
            Some(t) => format!("http://{}/?token={t}", self.addr),
            None => format!("http://{}/", self.addr),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    library: Library,
    access: Access,
    index_html: String,
    /// Where the viewer is, for messages.
    url: String,
    /// One pull at a time.
    pulling: tokio::sync::Mutex<()>,
}

/// What is needed to serve `home` on a listener bound to `addr`.
pub fn prepare(
    home: EviHome,
    config: &crate::config::Config,
    addr: SocketAddr,
) -> std::io::Result<(Router, Served)> {
    let token = (!addr.ip().is_loopback()).then(random_token).transpose()?;
    let csrf = random_token()?;
    let served = Served { addr, token };
    let state = AppState {
        inner: Arc::new(Inner {
            library: Library::new(home, config),
            access: Access {
                token: served.token.clone(),
                csrf: csrf.clone(),
            },
            index_html: assets::index_html(&csrf),
            url: served.url(),
            pulling: tokio::sync::Mutex::new(()),
        }),
    };
    Ok((router(state), served))
}

fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/health", get(api::health))
        .route("/sessions", get(api::list))
        .route("/sessions/{id}", get(api::session))
        .route("/sessions/{id}/entries/{entry}", get(api::entry))
        .route("/sessions/{id}/checkpoints", get(rewind::checkpoints))
        .route("/rewind/plan", get(rewind::plan))
        .route("/rewind", post(rewind::confirm))
        .route("/search", get(search::search))
        .route("/pull", post(api::pull))
        .fallback(|| async {
            error::ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found",
                "no such API route",
            )
        });
    Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::app_js))
        .route("/app.css", get(assets::app_css))
        .route("/icon.svg", get(assets::icon))
        .nest("/api", api)
        .fallback(|| async {
            error::ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found",
                "no such page",
            )
            .hinted("the viewer serves / and /?session=ID")
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::guard,
        ))
        .with_state(state)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
