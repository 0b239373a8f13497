//! The operator's page at `/`: one HTML file, a script and a style sheet, compiled into the
//! binary (no CDN, nothing built at run time). The script reads the JSON API; it sends the API
//! token, which the person types in, only on the mutating calls.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("web/index.html");
const SCRIPT: &str = include_str!("web/app.js");
const STYLE: &str = include_str!("web/style.css");

/// Scripts and connections only from the service itself; no framing.
const POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                      frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        for asset in [INDEX, SCRIPT, STYLE] {
            assert!(!asset.contains("http://") || asset.contains("http://www.w3.org/2000/svg"));
            assert!(!asset.contains("https://"), "no CDN");
        }
        assert!(INDEX.contains("/assets/app.js") && INDEX.contains("/assets/style.css"));
        // Every value is set as text.
        assert!(!SCRIPT.contains("innerHTML"));
    }
}
