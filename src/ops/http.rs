//! The HTTP surface: `/metrics` (Prometheus), `/healthz`, `/readyz`, the status API (tables and
//! tenants), and its mutating calls — a manual compaction, a configuration reload, forgetting a
//! removed table's state — which need the bearer token when one is set. Every listener (this
//! one and the bridge's) refuses strangers before a handler runs: a `Host` that does not name
//! a loopback listener (DNS rebinding), a mutation a browser sends from another site, a client
//! slower than the header and body deadlines.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tracing::{info, warn};

use crate::base::clock::Clock;
use crate::intake::queue::QueueSnapshot;
use crate::messages::{Forget, GetPoolStatus, RequestCompaction};
use crate::ops::listing::TableQuery;
use crate::ops::metrics::{Metrics, TableGauges};
use crate::ops::readiness::{self, Observation};
use crate::ops::status::TableStatus;
use crate::runs::task::Trigger;
use crate::service::Pipeline;

#[derive(Clone)]
pub struct ApiState {
    pub pipeline: Pipeline,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    /// `ICEPACK_API_TOKEN`; never logged.
    pub token: Option<String>,
    /// Whether the listener is on a loopback address.
    pub loopback: bool,
    /// How recent each queue's last successful receive must be for `/readyz`; `None` when
    /// nothing polls.
    pub queue_window: Option<Duration>,
    /// Reloads; `None` when nothing can be reloaded (tests, one-shot commands).
    pub control: Option<crate::ops::control::ControlHandle>,
}

pub fn router(state: ApiState) -> Router {
    let guard = RequestGuard {
        loopback: state.loopback,
        body_limit: API_BODY_LIMIT,
        body_timeout: BODY_READ_TIMEOUT,
    };
    Router::new()
        .route("/", get(crate::ops::web::index))
        .route("/assets/app.js", get(crate::ops::web::script))
        .route("/assets/style.css", get(crate::ops::web::style))
        .route("/v1/ui", get(ui))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/tables", get(tables))
        .route("/v1/tables/{table}", get(table))
        .route("/v1/tables/{table}/runs", get(runs))
        .route("/v1/tables/{table}/series", get(series))
        .route("/v1/tables/{table}/compact", post(compact))
        .route("/v1/tables/{table}/forget", post(forget))
        .route("/v1/tables/{table}/maintenance/{task}", post(maintain))
        .route("/v1/tenants", get(tenants))
        .route("/v1/reload", post(reload))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(guard, guard_request))
}

/// Binds the listener: fails fast when the address is taken, before anything else starts.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}

/// Serves the API on a bound listener in the background.
pub fn serve(listener: tokio::net::TcpListener, state: ApiState) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() && state.token.is_none() {
        warn!(%bound, "the HTTP listener is not on loopback and ICEPACK_API_TOKEN is not set: mutating calls are refused");
    }
    info!(%bound, "HTTP listener up: /metrics /healthz /readyz /v1/tables /v1/tenants");
    tokio::spawn(serve_connections(
        listener,
        router(state),
        HEADER_READ_TIMEOUT,
    ));
    Ok(bound)
}

/// How long a client may take to send a request's headers; also how long a kept-alive
/// connection may stay idle. A client that trickles its headers holds no connection longer.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's whole body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest body the API reads: none of its calls takes one.
const API_BODY_LIMIT: usize = 64 * 1024;

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

/// The executor pool's view (empty if the pool stopped).
async fn pool_status(state: &ApiState) -> crate::messages::PoolStatus {
    state
        .pipeline
        .pool
        .send(GetPoolStatus)
        .await
        .unwrap_or_default()
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let map = state.pipeline.map();
    let gauges: Vec<TableGauges> = state
        .pipeline
        .summaries(&map)
        .into_iter()
        .map(|(index, summary)| {
            let spec = map.spec(index);
            TableGauges {
                table: spec.table.clone(),
                tenant: spec.tenant.clone(),
                pending_files: summary.pending_files,
                pending_bytes: summary.pending_bytes,
                due: summary.due,
                run_in_flight: summary.running,
                consecutive_failures: summary.consecutive_failures,
            }
        })
        .collect();
    (
        [(header::CONTENT_TYPE, crate::ops::metrics::CONTENT_TYPE)],
        state.metrics.render(&gauges),
    )
        .into_response()
}

/// Alive unless a singleton of the pipeline is gone (nothing but a process restart brings back
/// the router or the executor pool).
async fn healthz(State(state): State<ApiState>) -> Response {
    let down = state.pipeline.singletons_down();
    if down.is_empty() {
        "ok\n".into_response()
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{} stopped: restart the process\n", down.join(", ")),
        )
            .into_response()
    }
}

async fn readyz(State(state): State<ApiState>) -> Response {
    let observed = Observation {
        store: state.metrics.store.get(),
        engine: state.metrics.engine.get(),
        queue_window: state.queue_window,
        queues: state.metrics.queues.snapshot(),
        actors_down: state.pipeline.actors_down(),
    };
    let problems = readiness::problems(&observed, state.clock.now_millis());
    if problems.is_empty() {
        (StatusCode::OK, Json(json!({"ready": true}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "problems": problems})),
        )
            .into_response()
    }
}

/// Every polled queue as `/v1/tables` shows it, with its readiness problem (`null`: none).
fn queues_json(state: &ApiState, queues: &[QueueSnapshot]) -> Vec<serde_json::Value> {
    let now = state.clock.now_millis();
    queues
        .iter()
        .map(|queue| {
            json!({
                "queue": queue.queue,
                "tenant": queue.tenant,
                "pollers": queue.pollers,
                "pollers_lost": queue.pollers_lost,
                "last_receive_at": queue.last_receive_millis.map(crate::base::clock::format_rfc3339),
                "last_error": queue.last_error.as_ref().map(|error| json!({
                    "operation": error.operation,
                    "message": error.message,
                    "at": crate::base::clock::format_rfc3339(error.at_millis),
                })),
                "messages_received": queue.messages_received,
                "messages_deleted": queue.messages_deleted,
                "messages_invalid": queue.messages_invalid,
                "delete_failures": queue.delete_failures,
                "errors": queue.errors,
                "problem": state
                    .queue_window
                    .and_then(|window| readiness::queue_problem(queue, window, now)),
            })
        })
        .collect()
}

/// Adds the executor pool's view: where each table waits for a run slot (0: next), and how long
/// until it starts at the recent pace (`null` before any run ended).
async fn with_queue_positions(
    state: &ApiState,
    statuses: Vec<TableStatus>,
) -> Vec<serde_json::Value> {
    let pool = pool_status(state).await;
    let estimates = pool.queue_estimates();
    let map = state.pipeline.map();
    statuses
        .into_iter()
        .map(|status| {
            let estimate = map
                .active_index_of(&status.table)
                .and_then(|index| estimates.get(&index));
            let mut value = serde_json::to_value(&status).unwrap_or_default();
            value["queue_position"] = json!(estimate.map(|(position, _)| position));
            value["expected_wait_seconds"] = json!(estimate
                .and_then(|(_, wait)| *wait)
                .map(|millis| millis / 1000));
            value
        })
        .collect()
}

/// What `/v1/tenants` adds up for one tenant.
#[derive(Default)]
struct TenantSums {
    tables: usize,
    pending_files: u64,
    pending_bytes: u64,
    due_tables: usize,
    tables_failing: usize,
    runs_waiting: usize,
    runs_in_flight: usize,
    recent_failures: Vec<serde_json::Value>,
}

/// Per tenant: its tables, pending backlog, due tables, runs waiting and in flight, and its
/// latest failed runs. One pass over the tables and the pool, whatever the number of tenants.
async fn tenants(State(state): State<ApiState>) -> Response {
    let pool = pool_status(&state).await;
    let map = state.pipeline.map();
    let mut sums: HashMap<&str, TenantSums> = map
        .tenants()
        .map(|tenant| (tenant.name.as_str(), TenantSums::default()))
        .collect();
    for (index, summary) in state.pipeline.summaries(&map) {
        if let Some(sums) = sums.get_mut(map.spec(index).tenant.as_str()) {
            sums.tables += 1;
            sums.pending_files = sums.pending_files.saturating_add(summary.pending_files);
            sums.pending_bytes = sums.pending_bytes.saturating_add(summary.pending_bytes);
            sums.due_tables += usize::from(summary.due);
            sums.tables_failing += usize::from(summary.consecutive_failures > 0);
        }
    }
    for &table in &pool.waiting {
        if let Some(sums) = sums.get_mut(map.spec(table).tenant.as_str()) {
            sums.runs_waiting += 1;
        }
    }
    for (table, _, _) in &pool.running {
        if let Some(sums) = sums.get_mut(map.spec(*table).tenant.as_str()) {
            sums.runs_in_flight += 1;
        }
    }
    for failure in &pool.recent_failures {
        if let Some(sums) = sums.get_mut(failure.tenant.as_str()) {
            sums.recent_failures.push(json!({
                "table": failure.table,
                "run_id": failure.run_id,
                "class": failure.class,
                "finished_at": crate::base::clock::format_rfc3339(failure.finished_millis),
            }));
        }
    }
    let tenants: Vec<serde_json::Value> = map
        .tenants()
        .map(|tenant| {
            let sums = sums.remove(tenant.name.as_str()).unwrap_or_default();
            json!({
                "tenant": tenant.name,
                "weight": tenant.weight,
                "max_concurrent_runs": tenant.max_concurrent_runs,
                "tables": sums.tables,
                "pending_files": sums.pending_files,
                "pending_bytes": sums.pending_bytes,
                "due_tables": sums.due_tables,
                "tables_failing": sums.tables_failing,
                "runs_waiting": sums.runs_waiting,
                "runs_in_flight": sums.runs_in_flight,
                "recent_failures": sums.recent_failures,
            })
        })
        .collect();
    Json(json!({"tenants": tenants})).into_response()
}

/// Reloads the configuration file: 200 with what changed, 422 with why nothing did.
async fn reload(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    if let Err(refused) = authorize(&state, &headers) {
        return *refused;
    }
    let Some(control) = &state.control else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "this process cannot reload"})),
        )
            .into_response();
    };
    match control.reload().await {
        Ok(report) => Json(json!({"reloaded": true, "report": report})).into_response(),
        Err(reason) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"reloaded": false, "error": reason})),
        )
            .into_response(),
    }
}

/// Deletes the stored state of a table the configuration no longer has.
async fn forget(
    State(state): State<ApiState>,
    Path(table): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = authorize(&state, &headers) {
        return *refused;
    }
    let map = state.pipeline.map();
    let Some(index) = map.index_of(&table) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("this process has never known table {table}; with the service stopped, `icepack forget` works on the state directory")})),
        )
            .into_response();
    };
    match map.accumulator(index).send(Forget).await {
        Ok(Ok(summary)) => {
            info!(%table, ?summary, "table state forgotten over HTTP");
            Json(json!({"table": table, "forgotten": summary})).into_response()
        }
        Ok(Err(reason)) => (StatusCode::CONFLICT, Json(json!({"error": reason}))).into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "the table's accumulator stopped"})),
        )
            .into_response(),
    }
}

/// Every table, or the page of them the query asks for (`?tenant=&q=&state=&sort=&order=&offset=&limit=`).
async fn tables(State(state): State<ApiState>, query: Query<TableQuery>) -> Response {
    let Query(query) = query;
    // Refused before every table's status is asked for.
    if let Err(reason) = query.validate() {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": reason}))).into_response();
    }
    let page = state.pipeline.list(&query).await;
    let map = state.pipeline.map();
    let engine = state.metrics.engine.get();
    let removed: Vec<&str> = (0..map.len())
        .filter(|&index| !map.is_active(index))
        .map(|index| map.spec(index).table.as_str())
        .collect();
    Json(json!({
        "now": crate::base::clock::format_rfc3339(state.clock.now_millis()),
        "total": page.total,
        "matched": page.matched,
        "offset": page.offset,
        "limit": page.limit,
        "tables": with_queue_positions(&state, page.tables).await,
        "engine": (!engine.engine.is_empty()).then_some(engine),
        "queues": queues_json(&state, &state.metrics.queues.snapshot()),
        "removed": removed,
    }))
    .into_response()
}

/// What the page may offer: `token` (mutating calls need the API token), `open` (a loopback
/// listener without a token takes them) or `refused` (no token on a non-loopback listener).
async fn ui(State(state): State<ApiState>) -> Response {
    let mutations = match (&state.token, state.loopback) {
        (Some(_), _) => "token",
        (None, true) => "open",
        (None, false) => "refused",
    };
    Json(json!({"mutations": mutations})).into_response()
}

/// One table: its accumulator is asked (an idle table's state is read from the store), not every
/// table's.
async fn table(State(state): State<ApiState>, Path(table): Path<String>) -> Response {
    let Some(index) = state.pipeline.table_index(&table) else {
        return not_found(&table);
    };
    let Some(status) = state.pipeline.table_status(index).await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "the table's accumulator stopped"})),
        )
            .into_response();
    };
    match with_queue_positions(&state, vec![status]).await.pop() {
        Some(status) => Json(status).into_response(),
        None => not_found(&table),
    }
}

/// Reads what the store keeps of a configured table off the async threads: 404 for a table not
/// configured, 503 naming `what` when the store cannot be read.
async fn read_table<T: Send + 'static>(
    state: &ApiState,
    table: &str,
    what: &str,
    read: impl FnOnce(&dyn crate::store::StateStore, &str) -> Result<T, crate::store::StoreError>
        + Send
        + 'static,
) -> Result<T, Response> {
    if state.pipeline.table_index(table).is_none() {
        return Err(not_found(table));
    }
    let store = state.pipeline.store();
    let name = table.to_string();
    match tokio::task::spawn_blocking(move || read(store.as_ref(), &name)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": format!("cannot read the {what}: {error}")})),
        )
            .into_response()),
        Err(_) => Err(StatusCode::INTERNAL_SERVER_ERROR.into_response()),
    }
}

/// A table's run history, newest first (`service.run_history` runs at most).
async fn runs(State(state): State<ApiState>, Path(table): Path<String>) -> Response {
    match read_table(&state, &table, "run history", |store, name| {
        store.runs(name)
    })
    .await
    {
        Ok(runs) => {
            let runs: Vec<crate::ops::status::LastRun> = runs
                .iter()
                .rev()
                .map(|(_, run)| crate::ops::status::run_status(run))
                .collect();
            Json(json!({"table": table, "runs": runs})).into_response()
        }
        Err(response) => response,
    }
}

/// A table's small files over time (pending plus claimed by a run in flight), oldest first:
/// each hour's highest level beyond the last 24 hours, then a point a minute where it changed.
async fn series(State(state): State<ApiState>, Path(table): Path<String>) -> Response {
    let series = match read_table(&state, &table, "series", |store, name| store.series(name)).await
    {
        Ok(series) => series,
        Err(response) => return response,
    };
    let points: Vec<serde_json::Value> = series
        .points()
        .into_iter()
        .map(|point| {
            json!({
                "at": crate::base::clock::format_rfc3339(point.at_millis),
                "files": point.files,
                "bytes": point.bytes,
                "peak_files": point.peak_files,
            })
        })
        .collect();
    Json(json!({
        "table": table,
        "now": crate::base::clock::format_rfc3339(state.clock.now_millis()),
        "minutes_kept": crate::table::series::MINUTES_KEPT,
        "hours_kept": crate::table::series::HOURS_KEPT,
        "points": points,
    }))
    .into_response()
}

fn not_found(table: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": format!("table {table} is not configured")})),
    )
        .into_response()
}

/// Mutating calls: with a token set, `Authorization: Bearer <token>` is required; without one,
/// only a loopback listener accepts them.
fn authorize(state: &ApiState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let refuse = |status: StatusCode, message: &str| {
        Box::new((status, Json(json!({"error": message}))).into_response())
    };
    match &state.token {
        Some(token) if bearer_matches(headers, token) => Ok(()),
        Some(_) => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required",
        )),
        None if state.loopback => Ok(()),
        None => Err(refuse(
            StatusCode::FORBIDDEN,
            "set ICEPACK_API_TOKEN to allow mutating calls on a non-loopback listener",
        )),
    }
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

/// Starts a maintenance task of a table now (its first `remove_orphan_files` is a dry run).
async fn maintain(
    State(state): State<ApiState>,
    Path((table, task)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let requestable = Trigger::REQUESTABLE_MAINTENANCE;
    let Some(trigger) = requestable
        .into_iter()
        .find(|trigger| trigger.as_str() == task)
    else {
        if let Err(refused) = authorize(&state, &headers) {
            return *refused;
        }
        let names: Vec<&str> = requestable.iter().map(|trigger| trigger.as_str()).collect();
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no maintenance task `{}`; one of: {}", task.escape_debug(), names.join(", "))})),
        )
            .into_response();
    };
    request_run(state, table, headers, trigger).await
}

async fn compact(
    State(state): State<ApiState>,
    Path(table): Path<String>,
    headers: HeaderMap,
) -> Response {
    request_run(state, table, headers, Trigger::Manual).await
}

/// Asks the pool for a forced run of `table` with `trigger`, unless one is in flight.
async fn request_run(
    state: ApiState,
    table: String,
    headers: HeaderMap,
    trigger: Trigger,
) -> Response {
    if let Err(refused) = authorize(&state, &headers) {
        return *refused;
    }
    let Some(index) = state.pipeline.table_index(&table) else {
        return not_found(&table);
    };
    let pool = pool_status(&state).await;
    if let Some((_, run_id, _)) = pool
        .running
        .iter()
        .find(|(running, _, _)| *running == index)
    {
        return (
            StatusCode::CONFLICT,
            Json(json!({"error": "a run is in flight", "run_id": run_id})),
        )
            .into_response();
    }
    state.pipeline.pool.do_send(RequestCompaction {
        table: index,
        trigger,
        force: true,
    });
    info!(%table, %trigger, "run requested over HTTP");
    (
        StatusCode::ACCEPTED,
        Json(json!({"table": table, "accepted": true, "runs_in_flight": pool.running.len(), "tables_waiting": pool.waiting.len()})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
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
