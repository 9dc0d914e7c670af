//! What keeps a web page in the user's browser from using the server.
//!
//! A page may send a cross-site POST without asking first only with a
//! "simple" body type (`text/plain`, a form); anything else, such as
//! `application/json`, needs a CORS preflight, which this server never
//! grants. So every JSON body must say `application/json` (and a framed
//! push `application/vnd.evi.frames`): no page can register, log in or
//! push through a visitor's browser. And a page that points a name of its
//! own at this server (DNS rebinding) sends that name as `Host`: with a
//! public URL set, such a request is refused before any handler runs.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use crate::AppState;
use crate::error::{ApiError, echo};

/// The media type of a `Content-Type` value: lowercase, parameters off.
pub fn essence(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::CONTENT_TYPE)?;
    Some(
        v.to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase(),
    )
}

/// 415 unless the body says it is JSON.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    match essence(headers).as_deref() {
        Some("application/json") => Ok(()),
        Some(_) => Err(ApiError::unsupported_media_type(format!(
            "this call takes a JSON body with Content-Type: application/json, not {:?}",
            echo(
                headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap_or("(not text)")
            )
        ))),
        None => Err(ApiError::unsupported_media_type(
            "this call takes a JSON body with Content-Type: application/json (none was given)",
        )),
    }
}

/// `host[:port]` as (lowercase host, port), the port defaulting to
/// `default_port`; `None` if it does not parse.
fn split_host(value: &str, default_port: u16) -> Option<(String, u16)> {
    let a: axum::http::uri::Authority = value.parse().ok()?;
    Some((
        a.host().to_ascii_lowercase(),
        a.port_u16().unwrap_or(default_port),
    ))
}

/// With a public URL set, refuses (421) every request whose `Host` names
/// another host or port. `/healthz` answers whatever the host: probes of
/// a load balancer or of the machine itself use an address.
pub async fn check_host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(public) = &state.config.public_url else {
        return next.run(req).await;
    };
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    let ok = given
        .as_deref()
        .and_then(|g| split_host(g, public.port))
        .is_some_and(|(host, port)| host == public.host && port == public.port);
    if ok {
        return next.run(req).await;
    }
    ApiError::misdirected(format!(
        "this server answers at {} only, not at host {:?}: use that URL (evi sync login --server {})",
        public.url,
        echo(given.as_deref().unwrap_or("")),
        public.url
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_compare_without_case_and_with_the_default_port() {
        assert_eq!(
            split_host("Sync.Example.org", 443),
            Some(("sync.example.org".into(), 443))
        );
        assert_eq!(split_host("[::1]:8787", 80), Some(("[::1]".into(), 8787)));
        assert_eq!(split_host("a b", 80), None);
    }
}
