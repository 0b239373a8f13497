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

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tracing::{info, warn};

use crate::base::clock::Clock;
use crate::base::http::{
    bearer_matches, guard_request, serve_connections, RequestGuard, BODY_READ_TIMEOUT,
    HEADER_READ_TIMEOUT,
};
use crate::intake::queue::QueueSnapshot;
use crate::messages::{Forget, GetPoolStatus, RequestCompaction};
use crate::model::task::Trigger;
use crate::ops::listing::TableQuery;
use crate::ops::metrics::{Metrics, TableGauges};
use crate::ops::readiness::{self, Observation};
use crate::ops::status::TableStatus;
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
        .route("/v1/tables/{table}/plan", get(plan))
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

/// The largest body the API reads: none of its calls takes one.
const API_BODY_LIMIT: usize = 64 * 1024;

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

/// What the table's next run would do, planned from the table without writing anything: 409
/// while a run is in flight (its plan is the run's).
async fn plan(State(state): State<ApiState>, Path(table): Path<String>) -> Response {
    match state.pipeline.preview(&table).await {
        None => not_found(&table),
        Some(Ok(preview)) => Json(preview).into_response(),
        Some(Err(error @ crate::ops::plan::PreviewError::RunInFlight)) => (
            StatusCode::CONFLICT,
            Json(json!({"error": error.to_string()})),
        )
            .into_response(),
        Some(Err(error)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": error.to_string()})),
        )
            .into_response(),
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
        "minutes_kept": crate::model::series::MINUTES_KEPT,
        "hours_kept": crate::model::series::HOURS_KEPT,
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
