//! The HTTP hardening every listener of icepack's shares (the API and the page, the MinIO
//! bridge): connections served with a deadline for a request's headers, a guard that refuses a
//! rebound `Host` on a loopback listener and a browser's mutation from another site before any
//! handler runs and reads a body whole within its deadline and limit, and a constant-time bearer
//! token check. Below every layer that serves HTTP, so the intake's bridge and ops' API use it
//! alike.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;
use tracing::warn;

/// How long a client may take to send a request's headers; also how long a kept-alive
/// connection may stay idle. A client that trickles its headers holds no connection longer.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's whole body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves HTTP/1.1 connections until the process ends: a client has `header_timeout` to send a
/// request's headers (the router's [`guard_request`] layer bounds the body).
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: Duration,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: the next accept may work once some close.
                warn!(%error, "cannot accept an HTTP connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            if let Err(error) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "HTTP connection ended");
            }
        });
    }
}

/// What every request of a listener is checked against before a handler runs.
#[derive(Debug, Clone, Copy)]
pub struct RequestGuard {
    /// Whether the listener is on a loopback address: then `Host` must name a loopback host.
    pub loopback: bool,
    /// The largest body read, within `body_timeout`.
    pub body_limit: usize,
    pub body_timeout: Duration,
}

impl RequestGuard {
    /// Why the request is refused before any handler sees it; `None` when it may go on.
    ///
    /// - On a loopback listener, a `Host` that names anything but a loopback host is a page of
    ///   another site whose name was rebound to 127.0.0.1 (DNS rebinding): refused, reads too.
    /// - A mutation whose `Sec-Fetch-Site` is not `same-origin` (or `none`: typed by the user),
    ///   or whose `Origin` is not the listener's own, was sent by a browser from another site —
    ///   a `text/plain` POST needs no preflight: refused, token or not. Clients other than
    ///   browsers send neither header.
    pub fn refusal(&self, method: &Method, headers: &HeaderMap) -> Option<&'static str> {
        let host = headers
            .get(header::HOST)
            .map(|host| host.to_str().unwrap_or(""));
        if self.loopback && host.is_some_and(|host| !is_loopback_host(host)) {
            return Some("the Host header does not name this loopback listener (DNS rebinding?)");
        }
        let mutation = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if mutation && is_cross_site(headers, host) {
            return Some("a browser's request from another site may not change anything here");
        }
        None
    }
}

/// Whether a `Host` header names a loopback host: `localhost` (and `*.localhost`), an address in
/// 127.0.0.0/8 or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(bracketed) = host.strip_prefix('[') {
        match bracketed.split_once(']') {
            Some((address, "")) => address,
            Some((address, port)) if is_port(port.strip_prefix(':').unwrap_or("x")) => address,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        }
    };
    if let Ok(address) = name.parse::<std::net::IpAddr>() {
        return address.is_loopback();
    }
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// Whether a browser says the request comes from another site than the one it is sent to.
fn is_cross_site(headers: &HeaderMap, host: Option<&str>) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return true;
        }
    }
    match headers.get(header::ORIGIN) {
        None => false,
        Some(origin) => {
            let authority = origin
                .to_str()
                .ok()
                .and_then(|origin| origin.split_once("://"))
                .map(|(_, authority)| authority);
            !matches!((authority, host), (Some(authority), Some(host)) if authority.eq_ignore_ascii_case(host))
        }
    }
}

/// The layer every request of a listener goes through: [`RequestGuard::refusal`] answers 403,
/// and the body is read whole within the guard's deadline (408) and limit (413) before the
/// handler runs.
pub async fn guard_request(
    State(guard): State<RequestGuard>,
    request: Request,
    next: Next,
) -> Response {
    let refuse = |status: StatusCode, message: &str| {
        (status, Json(json!({"error": message}))).into_response()
    };
    if let Some(refusal) = guard.refusal(request.method(), request.headers()) {
        warn!(method = %request.method(), path = %request.uri().path(), refusal, "request refused");
        return refuse(StatusCode::FORBIDDEN, refusal);
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(guard.body_timeout, read_body(body, guard.body_limit)).await {
        Err(_) => refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        ),
        Ok(Err(BodyError::TooLarge)) => refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        ),
        Ok(Err(BodyError::Broken)) => refuse(
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        ),
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

enum BodyError {
    TooLarge,
    Broken,
}

/// Reads a body whole, refusing it past `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<Vec<u8>, BodyError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyError::Broken)?;
        if bytes.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Whether the request carries `Authorization: Bearer <token>`, compared in constant time.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or("");
    constant_time_equal(presented.as_bytes(), token.as_bytes())
}

fn constant_time_equal(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use axum::routing::post;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    const LOOPBACK: RequestGuard = RequestGuard {
        loopback: true,
        body_limit: 16,
        body_timeout: Duration::from_secs(5),
    };

    #[test]
    fn loopback_hosts_are_told_from_other_names() {
        for host in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "127.8.9.10:1",
            "localhost",
            "LOCALHOST:9464",
            "localhost.:9464",
            "icepack.localhost:9464",
            "[::1]:9464",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example:9464",
            "evil.example",
            "localhost.evil.example:9464",
            "10.0.0.5:9464",
            "[::2]:9464",
            "[::1]x",
            "127.0.0.1:9464:1",
            "127.0.0.1.evil.example",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    /// Issue 31 item 6: what a page of another site can make the operator's browser send is
    /// refused; the page served here, other clients and reads of a right `Host` go on.
    #[test]
    fn cross_site_mutations_and_rebound_hosts_are_refused() {
        let post = Method::POST;
        let host = ("host", "127.0.0.1:9464");
        // What evil.example's page sends with a text/plain POST (no preflight).
        let cross_site = headers(&[
            host,
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
            ("content-type", "text/plain"),
        ]);
        assert!(LOOPBACK.refusal(&post, &cross_site).is_some());
        // An older browser: Origin only; a sandboxed frame: Origin null; a page on another port.
        for origin in ["http://evil.example", "null", "http://127.0.0.1:3000"] {
            let map = headers(&[host, ("origin", origin)]);
            assert!(LOOPBACK.refusal(&post, &map).is_some(), "{origin}");
        }
        for site in ["cross-site", "same-site"] {
            let map = headers(&[host, ("sec-fetch-site", site)]);
            assert!(LOOPBACK.refusal(&post, &map).is_some(), "{site}");
        }
        // With a token too: nothing cross-site changes anything.
        let with_token = RequestGuard {
            loopback: false,
            ..LOOPBACK
        };
        assert!(with_token.refusal(&post, &cross_site).is_some());
        // Reads are not mutations (a browser does not let the page read the answer).
        assert_eq!(LOOPBACK.refusal(&Method::GET, &cross_site), None);
        // The page itself, curl, the CLI.
        let same_origin = headers(&[
            host,
            ("origin", "http://127.0.0.1:9464"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(LOOPBACK.refusal(&post, &same_origin), None);
        assert_eq!(LOOPBACK.refusal(&post, &headers(&[host])), None);
        assert_eq!(LOOPBACK.refusal(&post, &HeaderMap::new()), None);
        // DNS rebinding: evil.example now resolves to 127.0.0.1, the browser says so in Host.
        let rebound = headers(&[
            ("host", "evil.example:9464"),
            ("origin", "http://evil.example:9464"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(LOOPBACK.refusal(&post, &rebound).is_some());
        assert!(LOOPBACK
            .refusal(&Method::GET, &headers(&[("host", "evil.example:9464")]))
            .is_some());
        // A listener on another address is reached by any name (a Service, an ingress).
        assert_eq!(
            with_token.refusal(&Method::GET, &headers(&[("host", "icepack.internal:9464")])),
            None
        );
    }

    /// A listener with the guard in front of a route that counts its calls.
    async fn guarded(
        header_timeout: Duration,
        body_timeout: Duration,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let guard = RequestGuard {
            body_timeout,
            ..LOOPBACK
        };
        let app = Router::new()
            .route(
                "/mutate",
                post(move |body: axum::body::Bytes| async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    format!("{} bytes", body.len())
                }),
            )
            .layer(axum::middleware::from_fn_with_state(guard, guard_request));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve_connections(listener, app, header_timeout));
        (address, calls)
    }

    /// Sends `request` as it is and reads what comes back until the server closes, within 10 s.
    async fn exchange(address: SocketAddr, request: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection in time")
            .unwrap_or_default();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn the_guard_answers_before_the_handler_and_bounds_slow_clients() {
        let (address, calls) =
            guarded(Duration::from_millis(300), Duration::from_millis(300)).await;
        let host = format!("127.0.0.1:{}", address.port());
        let answer = exchange(
            address,
            &format!(
                "POST /mutate HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n\
                 Sec-Fetch-Site: cross-site\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\
                 Connection: close\r\n\r\nhi"
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let answer = exchange(
            address,
            "GET /mutate HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "no handler ran");
        let answer = exchange(
            address,
            &format!(
                "POST /mutate HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\
                 Sec-Fetch-Site: same-origin\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
            ),
        )
        .await;
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("2 bytes"),
            "{answer}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Over the body limit: 413, the handler never runs.
        let answer = exchange(
            address,
            &format!(
                "POST /mutate HTTP/1.1\r\nHost: {host}\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{}",
                "x".repeat(17)
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        // A body that never arrives: 408 at the body deadline.
        let answer = exchange(
            address,
            &format!("POST /mutate HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10\r\n\r\nhalf"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        // Headers that never end: the connection is closed at the header deadline.
        let started = std::time::Instant::now();
        let answer = exchange(
            address,
            &format!("GET /mutate HTTP/1.1\r\nHost: {host}\r\n"),
        )
        .await;
        assert!(!answer.contains("200"), "{answer}");
        println!("an unfinished header was cut after {:?}", started.elapsed());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
