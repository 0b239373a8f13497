//! MinIO has no SQS notification target, only webhooks: the bridge accepts MinIO's bucket
//! notification webhook (`POST /minio`) and forwards each event, unchanged, as an SQS message to
//! the configured queue, where icepack's poller reads it like any S3 notification. A body that is
//! not an S3 notification is refused (400); a queue that cannot be reached answers 503, so MinIO
//! keeps the event and retries.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use tracing::{debug, info, warn};

use crate::event::parse_message;
use crate::queue::SqsQueue;

#[derive(Clone)]
struct BridgeState {
    queue: Arc<SqsQueue>,
    /// `ICEPACK_BRIDGE_TOKEN`: MinIO's webhook `auth_token`, sent as a bearer token.
    token: Option<String>,
}

pub fn router(queue: Arc<SqsQueue>, token: Option<String>) -> Router {
    Router::new()
        .route("/minio", post(forward))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(BridgeState { queue, token })
}

/// Serves until the process ends.
pub async fn serve(
    address: SocketAddr,
    queue: Arc<SqsQueue>,
    token: Option<String>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    info!(address = %listener.local_addr()?, "MinIO webhook bridge up: POST /minio");
    axum::serve(listener, router(queue, token)).await
}

async fn forward(
    State(state): State<BridgeState>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    if let Some(token) = &state.token {
        if !crate::http::bearer_matches(&headers, token) {
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
