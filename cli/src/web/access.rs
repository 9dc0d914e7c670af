//! Who may read the viewer, and what every answer carries.
//!
//! Transcripts are private, and a web page the user opens elsewhere can make
//! their browser send requests here. So:
//!
//! - bound to loopback, the viewer answers only requests whose `Host` is a
//!   loopback name or address (a DNS-rebinding page has its own host name);
//! - bound to any other address, every request must carry the random token
//!   `evi web` printed, in the URL (`?token=`) or in the cookie the first
//!   such page load sets (`HttpOnly`, `SameSite=Strict`);
//! - a request that changes something (the pull button's POST) must come from
//!   this origin (`Origin` equal to the `Host` it was sent to) and carry the
//!   per-run CSRF token of the page (`X-Evi-Csrf`);
//! - every answer carries a strict Content-Security-Policy (scripts only from
//!   this origin, no inline script or style, Trusted Types with no policy so
//!   no string can ever become HTML), `nosniff`, no referrer, no framing.

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;

/// Policy of every page and answer. `require-trusted-types-for` makes
/// Chromium throw on any assignment of a string to an HTML sink, so even a
/// bug in the page's script cannot turn transcript text into markup.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    frame-ancestors 'none'; form-action 'none'; \
    require-trusted-types-for 'script'; trusted-types 'none'";

/// Name of the cookie that carries the access token.
const COOKIE: &str = "evi_web_token";

/// Header the page sends its CSRF token in.
pub const CSRF_HEADER: &str = "x-evi-csrf";

/// What this run of the viewer lets through.
#[derive(Debug, Clone)]
pub struct Access {
    /// Required on every request when not bound to loopback.
    pub token: Option<String>,
    /// Required on every POST.
    pub csrf: String,
}

/// 32 random bytes as hex.
pub fn random_token() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(std::io::Error::other)?;
    Ok(hex::encode(b))
}

/// Equal without telling how long a prefix matched.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether a `Host` header names this machine's loopback.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn query_token(uri: &axum::http::Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
}

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Checks a request against [`Access`], then adds the safety headers to
/// whatever answers it.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let mut set_cookie = None;
    let checked = check(&state, &req, &mut set_cookie);
    let mut resp = match checked {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    let h = resp.headers_mut();
    let put = |h: &mut HeaderMap, name: HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    put(h, header::CONTENT_SECURITY_POLICY, CSP);
    put(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    put(h, header::REFERRER_POLICY, "no-referrer");
    put(h, header::X_FRAME_OPTIONS, "DENY");
    put(
        h,
        HeaderName::from_static("cross-origin-opener-policy"),
        "same-origin",
    );
    put(
        h,
        HeaderName::from_static("cross-origin-resource-policy"),
        "same-origin",
    );
    put(h, header::CACHE_CONTROL, "no-store");
    if let Some(c) = set_cookie.and_then(|c: String| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, c);
    }
    resp
}

fn check(state: &AppState, req: &Request, set_cookie: &mut Option<String>) -> Result<(), ApiError> {
    let access = &state.inner.access;
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    match &access.token {
        None if !loopback_host(host) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "bad_host",
                format!(
                    "this viewer answers only to loopback host names, not `{host}` \
                     (a defence against DNS rebinding)"
                ),
            )
            .hinted(format!("open {}", state.inner.url)));
        }
        None => {}
        Some(token) => {
            let from_query = query_token(req.uri()).filter(|t| same(t, token));
            let from_cookie = cookie_token(headers).filter(|t| same(t, token));
            if from_query.is_none() && from_cookie.is_none() {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "token_required",
                    "this viewer is reachable from other machines, so every request must \
                     carry the token `evi web` printed",
                )
                .hinted("open the URL with `?token=…` that `evi web` printed when it started"));
            }
            if from_query.is_some() && from_cookie.is_none() {
                *set_cookie = Some(format!(
                    "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                ));
            }
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
        let own = format!("http://{host}");
        if origin != Some(own.as_str()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf",
                "refused: the request does not come from this viewer's own page",
            ));
        }
        let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !csrf.is_some_and(|c| same(c, &access.csrf)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf",
                "refused: the request lacks this page's CSRF token",
            )
            .hinted("reload the page (a restarted `evi web` has a new token)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in [
            "127.0.0.1:7878",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "127.1.2.3",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example:7878",
            "10.0.0.1:7878",
            "[::2]:1",
            "",
            "localhost.evil:1",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
    }

    #[test]
    fn tokens() {
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; evi_web_token=t0k"),
        );
        assert_eq!(cookie_token(&h), Some("t0k"));
        let uri: axum::http::Uri = "/?session=x&token=abc".parse().unwrap();
        assert_eq!(query_token(&uri), Some("abc"));
        assert_eq!(random_token().unwrap().len(), 64);
    }
}
