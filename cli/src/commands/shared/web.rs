//! Where the web viewer is, and opening it.

use crate::commands::Ctx;
use crate::commands::shared::warn;
use crate::config::DEFAULT_WEB_URL;

/// The web UI's base URL: `[web] url` when it has a host, else the default.
pub fn web_url(ctx: &Ctx) -> String {
    match ctx.config.web.url.as_deref() {
        Some(u) if has_host(u) => u.trim_end_matches('/').to_owned(),
        Some(u) => {
            warn(&format!(
                "[web] url = {u:?} has no host; using {DEFAULT_WEB_URL}"
            ));
            DEFAULT_WEB_URL.to_owned()
        }
        None => DEFAULT_WEB_URL.to_owned(),
    }
}

fn has_host(u: &str) -> bool {
    reqwest::Url::parse(u).is_ok_and(|u| u.host_str().is_some_and(|h| !h.is_empty()))
}

/// Opens `url` in the desktop's browser; a failure is only a warning (the
/// URL is printed anyway).
pub fn open_browser(url: &str) {
    if let Err(e) = crate::desktop::open_in_background(url) {
        warn(&format!("cannot open a browser: {e}; open {url}"));
    }
}
