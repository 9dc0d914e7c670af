//! The page: one HTML file, one script, one style sheet and an icon, built
//! into the binary, so the viewer works offline and loads nothing from
//! elsewhere. The HTML carries this run's CSRF token for the pull button;
//! it is hex, so it needs no escaping.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const ICON: &str = include_str!("assets/icon.svg");

/// Marker in `index.html` replaced by the CSRF token.
const CSRF_MARK: &str = "{{csrf}}";

/// `index.html` for a run whose CSRF token is `csrf`.
pub fn index_html(csrf: &str) -> String {
    debug_assert!(csrf.bytes().all(|b| b.is_ascii_hexdigit()));
    INDEX.replace(CSRF_MARK, csrf)
}

fn typed(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

pub async fn index(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        state.inner.index_html.clone(),
    )
        .into_response()
}

pub async fn app_js() -> Response {
    typed("text/javascript; charset=utf-8", APP_JS)
}

pub async fn app_css() -> Response {
    typed("text/css; charset=utf-8", APP_CSS)
}

pub async fn icon() -> Response {
    typed("image/svg+xml", ICON)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script builds every node with `createElement` and `textContent`;
    /// none of these sinks may appear (Trusted Types would also make them
    /// throw in Chromium).
    #[test]
    fn script_has_no_html_sinks() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setAttribute('on",
            "srcdoc",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
    }

    #[test]
    fn page_has_no_inline_script_or_style() {
        let html = index_html("ab12");
        assert!(html.contains("content=\"ab12\""));
        assert!(!html.contains("<script>") && !html.contains("style="));
        assert!(!html.contains("<style"));
    }
}
