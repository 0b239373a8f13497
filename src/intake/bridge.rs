//! MinIO has no SQS notification target, only webhooks: the bridge accepts MinIO's bucket
//! notification webhook (`POST /minio`) and forwards each event, unchanged, as an SQS message to
//! the configured queue, where icepack's poller reads it like any S3 notification. A body that is
//! not an S3 notification is refused (400); a queue that cannot be reached answers 503, so MinIO
//! keeps the event and retries. It takes events only with `ICEPACK_BRIDGE_TOKEN` (MinIO's
//! `auth_token`) unless it listens on loopback, and refuses strangers as the API does
//! ([`crate::base::http::RequestGuard`]: `Host` on loopback, browsers from another site, deadlines).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use tracing::{debug, info, warn};

use crate::intake::event::parse_message;
use crate::intake::queue::SqsQueue;

#[derive(Clone)]
struct BridgeState {
    queue: Arc<SqsQueue>,
    /// `ICEPACK_BRIDGE_TOKEN`: MinIO's webhook `auth_token`, sent as a bearer token.
    token: Option<String>,
}

/// The largest webhook body forwarded (SQS takes messages up to 1 MiB; one S3 event is ~1 KB).
const BODY_LIMIT: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("ICEPACK_BRIDGE_TOKEN is not set and {0} is not a loopback address: anyone who reaches it could post events; set the token (MinIO's webhook auth_token) or listen on 127.0.0.1")]
    TokenRequired(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// Who may post events: with a token, whoever presents it; without, only a loopback listener
/// serves (any local process may post). What it answers is said at start.
pub fn access(listen: SocketAddr, token: Option<&str>) -> Result<&'static str, BridgeError> {
    match token {
        Some(_) => Ok("events are taken with ICEPACK_BRIDGE_TOKEN as a bearer token only"),
        None if listen.ip().is_loopback() => Ok(
            "ICEPACK_BRIDGE_TOKEN is not set: events are taken from any process on this host (loopback only)",
        ),
        None => Err(BridgeError::TokenRequired(listen)),
    }
}

pub fn router(queue: Arc<SqsQueue>, token: Option<String>, loopback: bool) -> Router {
    let guard = crate::base::http::RequestGuard {
        loopback,
        body_limit: BODY_LIMIT,
        body_timeout: crate::base::http::BODY_READ_TIMEOUT,
    };
    Router::new()
        .route("/minio", post(forward))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(BridgeState { queue, token })
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::base::http::guard_request,
        ))
}

/// Checks who may post ([`access`]), binds and serves until the process ends.
pub async fn serve(
    address: SocketAddr,
    queue: Arc<SqsQueue>,
    token: Option<String>,
) -> Result<(), BridgeError> {
    let access = access(address, token.as_deref())?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| BridgeError::Listen(address, error))?;
    let bound = listener.local_addr().unwrap_or(address);
    info!(address = %bound, access, "MinIO webhook bridge up: POST /minio");
    let loopback = bound.ip().is_loopback();
    crate::base::http::serve_connections(
        listener,
        router(queue, token, loopback),
        crate::base::http::HEADER_READ_TIMEOUT,
    )
    .await;
    Ok(())
}

async fn forward(
    State(state): State<BridgeState>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    if let Some(token) = &state.token {
        if !crate::base::http::bearer_matches(&headers, token) {
            return (
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n".to_string(),
            );
        }
    }
    let Ok(body) = std::str::from_utf8(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            "the body is not UTF-8\n".to_string(),
        );
    };
    if let Err(error) = parse_message(body) {
        warn!(%error, "refused a webhook body that is not an S3 notification");
        return (StatusCode::BAD_REQUEST, format!("{error}\n"));
    }
    match state.queue.send(body).await {
        Ok(message_id) => {
            debug!(%message_id, "forwarded a MinIO notification");
            (StatusCode::OK, "forwarded\n".to_string())
        }
        Err(error) => {
            warn!(%error, "cannot forward a MinIO notification; MinIO will retry");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the queue is unavailable\n".to_string(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_token_only_a_loopback_bridge_serves() {
        let loopback: SocketAddr = "127.0.0.1:9465".parse().unwrap();
        let everywhere: SocketAddr = "0.0.0.0:9465".parse().unwrap();
        let lan: SocketAddr = "10.0.0.5:9465".parse().unwrap();
        assert!(access(loopback, None).unwrap().contains("loopback only"));
        assert!(access("[::1]:9465".parse().unwrap(), None).is_ok());
        for address in [everywhere, lan] {
            let refused = access(address, None).unwrap_err().to_string();
            assert!(
                refused.contains("ICEPACK_BRIDGE_TOKEN is not set"),
                "{refused}"
            );
            assert!(access(address, Some("t"))
                .unwrap()
                .contains("bearer token only"));
        }
    }
}
