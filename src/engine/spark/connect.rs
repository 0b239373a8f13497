//! [`SparkRunner`] on a running Spark through Spark Connect: a warm JVM, local or a cluster's
//! endpoint (EMR, Databricks, Spark on Kubernetes), instead of a cold spark-sql per run.
//!
//! Each run opens a session of its own (a session's catalog instance caches table metadata, and a
//! JDBC catalog's connection can keep reading an old snapshot of its database: a reused session
//! compacted a table as it was minutes before), gives it the catalog's settings unless the
//! server already defines that catalog, sends each statement (the first one refreshes the
//! table) as one `SqlCommand`, exactly once, and releases the session. The
//! server runs commands (the `CALL`s, `DESCRIBE`) eagerly and returns their rows inline; a query
//! comes back as a relation that is executed once more for its rows. Results are read as Arrow,
//! by column name. The client's own retry policy (up to an hour of back-off for a dead server) is
//! off: icepack bounds reaching the server by `connect_timeout_seconds` and the run by its
//! deadline, after which the run's operations are interrupted by their tag. The health probe
//! also tells a server not warmed up yet (the first reached, after a reconnect, a restarted one):
//! [`super::warm_up`] then loads the configured catalogs and tables the way a run would.

use std::io::Cursor;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use spark_connect_core::client::SparkConnectClient;
use spark_connect_core::error::SparkError;
use spark_connect_core::retries::RetryPolicy;
use spark_connect_proto as proto;
use tokio::sync::OnceCell;
use tracing::{debug, info, warn};

use super::result::{
    keep_own_snapshots, own_replace_snapshots, replace_snapshots, ResultSet, ServerError,
};
use super::runner::{EngineError, EngineOutput, SparkJob, SparkRunner};
use super::sql::{Statement, StatementKind};
use super::warm_up::{WarmUp, WarmUpReport};

mod wire;
use wire::*;

/// Settings a session cannot take (static, or not Spark SQL settings): the server has its own.
const SERVER_ONLY_SETTINGS: [&str; 3] = [
    "spark.sql.extensions",
    "spark.sql.catalogImplementation",
    "spark.sql.cli.print.header",
];

/// Longest the health probe's `SELECT 1` may take (a fresh server's first statement: 7-12 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Between two tries to reach the server again after a connection broke mid-run.
const RECOVERY_POLL: Duration = Duration::from_secs(2);

/// After interrupting a run's operations, before reading the metadata: a commit in progress
/// when the interrupt arrived completes (Iceberg's commit is one atomic swap at the end).
const RECOVERY_SETTLE: Duration = Duration::from_secs(2);

/// Longest a run's interrupt may take after its deadline before the run gives up on it.
const INTERRUPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time a run recovered after a restart has to read its outcome from the table's
/// metadata, however little was left of its deadline (a fresh session's first statement takes
/// 7-12 s on a fresh server).
const RESTART_RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// What a reading of the table's metadata found of a run whose end was not seen.
enum Recovered {
    /// The run's own `replace` snapshot: the results of the recovery's reads, only the run's
    /// own snapshots and outputs kept.
    Committed(Vec<(StatementKind, ResultSet)>),
    /// No `replace` snapshot removed any of the run's claimed files: why, for the record.
    NotCommitted(String),
}

/// The Spark Connect session of a run's `attempt`, a version 4 UUID made of the run's nonce:
/// after a restart the same run's sessions are known again, so what may still run of it can be
/// interrupted. Each attempt has a session of its own (a released session's id cannot be used
/// again). A run without a nonce (claimed by an earlier release) gets a random one.
pub fn run_session_id(nonce: &str, attempt: u32) -> String {
    let hex: String = nonce
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let hex = if hex.len() >= 32 {
        let last = u16::from_str_radix(&hex[28..32], 16).unwrap_or(0);
        let attempt = u16::try_from(attempt.saturating_sub(1)).unwrap_or(u16::MAX);
        format!("{}{:04x}", &hex[..28], last.wrapping_add(attempt))
    } else {
        crate::runs::report::random_hex(16)
    };
    let mut digits: Vec<char> = hex.chars().collect();
    digits[12] = '4';
    digits[16] = match digits[16].to_digit(16).unwrap_or(0) & 0x3 {
        0 => '8',
        1 => '9',
        2 => 'a',
        _ => 'b',
    };
    let text: String = digits.into_iter().collect();
    format!(
        "{}-{}-{}-{}-{}",
        &text[..8],
        &text[8..12],
        &text[12..16],
        &text[16..20],
        &text[20..32]
    )
}

/// The tag every operation of a run carries: a deadline or a recovery interrupts them by it.
fn run_tag(job: &SparkJob) -> String {
    format!("icepack-{}", job.run_id.replace(',', "-"))
}

pub use crate::config::connect_endpoint::ConnectEndpoint;

/// What the connect runner needs.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    pub endpoint: ConnectEndpoint,
    /// Reaching the server (the first request of a run) must not take longer.
    pub connect_timeout: Duration,
}

/// What a session is given before a run's statements: the catalog's settings (only when the
/// server does not define the catalog) and session settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// `spark.sql.catalog.<name>`: whether the server or a previous run defined the catalog.
    pub catalog_key: String,
    pub catalog: Vec<(String, String)>,
    pub session: Vec<(String, String)>,
}

/// Splits a job's settings into the catalog's and the session's; the rest (spark.hadoop.*,
/// spark.ui.*, static settings) belong to the server and are not sent.
pub fn session_settings(job: &SparkJob) -> SessionSettings {
    let catalog_key = format!("spark.sql.catalog.{}", job.catalog);
    let catalog_prefix = format!("{catalog_key}.");
    let mut catalog = Vec::new();
    let mut session = Vec::new();
    for (key, value) in &job.conf {
        if *key == catalog_key || key.starts_with(&catalog_prefix) {
            catalog.push((key.clone(), value.clone()));
        } else if key.starts_with("spark.sql.")
            && !key.starts_with("spark.sql.catalog.")
            && !SERVER_ONLY_SETTINGS.contains(&key.as_str())
        {
            session.push((key.clone(), value.clone()));
        }
    }
    SessionSettings {
        catalog_key,
        catalog,
        session,
    }
}

pub struct ConnectRunner {
    settings: ConnectSettings,
    /// The channel (lazily dialled) that sessions share.
    base: OnceCell<SparkConnectClient>,
    /// What a server the probe reaches is warmed up with (nothing by default).
    warm_up: std::sync::Arc<WarmUp>,
}

/// How a statement failed.
enum Failure {
    /// The server did not answer or the connection broke, before any write was sent.
    Transport(String),
    /// The connection broke after a write (the rewrite's `CALL`) was sent: whether it committed
    /// is for the table's metadata to say.
    LostAfterWrite(String),
    /// The server ran the statement and it failed.
    Statement(ServerError),
}

impl From<SparkError> for Failure {
    fn from(error: SparkError) -> Failure {
        let server = server_error(&error);
        if server.transport {
            Failure::Transport(server.describe(400))
        } else {
            Failure::Statement(server)
        }
    }
}

/// The structure of a server's error; gRPC failures without Spark's error details are the
/// transport's (connection refused, reset, timed out).
pub fn server_error(error: &SparkError) -> ServerError {
    const CANCELLED: i32 = 1;
    const UNKNOWN: i32 = 2;
    const DEADLINE_EXCEEDED: i32 = 4;
    const INTERNAL: i32 = 13;
    const UNAVAILABLE: i32 = 14;
    let transport = error.grpc_details.is_none()
        && matches!(
            error.grpc_code,
            Some(CANCELLED | UNKNOWN | DEADLINE_EXCEEDED | INTERNAL | UNAVAILABLE) | None
        )
        && error.error_class.is_empty();
    let exception_classes = error
        .params
        .get("classes")
        .and_then(|classes| serde_json::from_str::<Vec<String>>(classes).ok())
        .unwrap_or_default();
    ServerError {
        error_class: error.error_class.clone(),
        sql_state: error.sql_state(),
        exception_classes,
        message: if error.message.is_empty() {
            error.message()
        } else {
            error.message.clone()
        },
        transport,
    }
}

impl ConnectRunner {
    pub fn new(settings: ConnectSettings) -> Self {
        ConnectRunner {
            settings,
            base: OnceCell::new(),
            warm_up: Default::default(),
        }
    }

    /// The runner that warms each server it reaches up with `warm_up`'s tables.
    pub fn with_warm_up(mut self, warm_up: WarmUp) -> Self {
        self.warm_up = std::sync::Arc::new(warm_up);
        self
    }

    /// The report of the last warm-up, as each one ends.
    pub fn warm_ups(&self) -> tokio::sync::watch::Receiver<Option<WarmUpReport>> {
        self.warm_up.reports()
    }

    /// A new session for one run, on the shared channel.
    async fn session(&self) -> Result<SparkConnectClient, EngineError> {
        let base = self
            .base
            .get_or_try_init(|| async {
                let mut client = SparkConnectClient::connect(self.settings.endpoint.channel())
                    .await
                    .map_err(|error| {
                        EngineError::Unavailable(format!(
                            "cannot set up a Spark Connect channel to {}: {}",
                            self.settings.endpoint.shown(),
                            error.message()
                        ))
                    })?;
                // icepack bounds and retries runs itself; the client's policy waits up to an hour.
                client.set_retry_policy(RetryPolicy::no_retries());
                Ok::<_, EngineError>(client)
            })
            .await?;
        Ok(base.with_new_session_id())
    }

    /// The session of the run's `attempt` ([`run_session_id`]), on a channel of its own.
    async fn run_session(
        &self,
        job: &SparkJob,
        attempt: u32,
    ) -> Result<SparkConnectClient, EngineError> {
        let mut builder = self.settings.endpoint.channel().clone();
        builder.set("session_id", &run_session_id(&job.nonce, attempt));
        let mut client = SparkConnectClient::connect(&builder)
            .await
            .map_err(|error| {
                EngineError::Unavailable(format!(
                    "cannot set up a Spark Connect channel to {}: {}",
                    self.settings.endpoint.shown(),
                    error.message()
                ))
            })?;
        client.set_retry_policy(RetryPolicy::no_retries());
        Ok(client)
    }

    /// Ends a run's session on the server (its catalog, connections, cached state), in the
    /// background and bounded: the outcome is known already.
    fn release(&self, client: SparkConnectClient) {
        tokio::spawn(async move {
            match tokio::time::timeout(INTERRUPT_TIMEOUT, client.release_session()).await {
                Ok(Ok(())) => debug!(session = client.session_id(), "session released"),
                Ok(Err(error)) => {
                    debug!(error = %server_error(&error).describe(200), "cannot release the session")
                }
                Err(_) => debug!("no answer to the session release"),
            }
        });
    }

    /// Sets the session up for the job: the catalog (unless defined) and session settings.
    async fn configure(
        &self,
        client: &SparkConnectClient,
        settings: &SessionSettings,
    ) -> Result<(), Failure> {
        let defined = get_option(client, &settings.catalog_key).await?;
        let mut pairs = settings.session.clone();
        match defined {
            Some(_) => {
                debug!(catalog = %settings.catalog_key, "catalog defined in the session or by the server")
            }
            None => pairs.extend(settings.catalog.iter().cloned()),
        }
        if !pairs.is_empty() {
            set_options(client, pairs).await?;
        }
        Ok(())
    }

    /// After the connection broke with the rewrite sent, or after a restart during the run:
    /// once the server answers (within `deadline`), stop what may still run of the run's
    /// operations (its session and tag), then read from the table's metadata whether a `replace`
    /// snapshot that removed the run's claimed files committed. Never assumed either way, and
    /// never decided by commit times.
    async fn recover_outcome(
        &self,
        lost_sessions: &[SparkConnectClient],
        job: &SparkJob,
        deadline: Instant,
        lost: &str,
    ) -> Result<Recovered, EngineError> {
        let endpoint = self.settings.endpoint.shown();
        let tag = run_tag(job);
        let mut last = lost.to_string();
        'reach: while Instant::now() < deadline {
            // The server may still be running the CALL (only the connection broke, or only
            // icepack restarted): interrupt it, so that the metadata read next is final. A
            // restarted server has nothing left.
            let mut interrupted_any = false;
            for session in lost_sessions {
                let remaining = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(
                    remaining.min(self.settings.connect_timeout),
                    session.interrupt_tag(&tag),
                )
                .await
                {
                    Ok(Ok(interrupted)) if !interrupted.is_empty() => {
                        info!(run_id = %job.run_id, operations = interrupted.len(), "interrupted what was left of the run");
                        interrupted_any = true;
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        let error = server_error(&error);
                        if error.transport {
                            last = error.describe(300);
                            tokio::time::sleep(RECOVERY_POLL).await;
                            continue 'reach;
                        }
                        // The session is gone (released, or a restarted server): nothing of
                        // the run is left in it.
                    }
                    Err(_) => continue 'reach,
                }
            }
            if interrupted_any {
                tokio::time::sleep(RECOVERY_SETTLE).await;
            }
            let client = self.session().await?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let mut results = Vec::new();
            let read = tokio::time::timeout(
                remaining,
                self.run_statements(&client, job, &job.recovery, &tag, &mut results),
            )
            .await;
            self.release(client);
            match read {
                Ok(Ok(())) => {
                    let claimed = job.claimed.read().await.map_err(|error| {
                        EngineError::Unavailable(format!(
                            "cannot read the run's claimed files to tell its commit: {error}"
                        ))
                    })?;
                    let (snapshots, removed) = replace_snapshots(&results);
                    let own = own_replace_snapshots(&snapshots, &removed, &claimed);
                    if own.is_empty() {
                        return Ok(Recovered::NotCommitted(format!(
                            "Spark Connect server {endpoint}: {lost}; the table's metadata shows no rewrite of the run's {} claimed files committed ({} replace snapshots looked at)",
                            claimed.len(),
                            snapshots.len()
                        )));
                    }
                    info!(table = %job.table, run_id = %job.run_id, snapshots = ?own, "the rewrite committed (read from the table's metadata)");
                    return Ok(Recovered::Committed(keep_own_snapshots(results, &own)));
                }
                Ok(Err(Failure::Statement(error))) => {
                    return Err(EngineError::Unavailable(format!(
                        "Spark Connect server {endpoint}: {lost}; reading the table's metadata failed: {}",
                        error.describe(300)
                    )))
                }
                Ok(Err(Failure::Transport(message) | Failure::LostAfterWrite(message))) => {
                    last = message;
                    tokio::time::sleep(RECOVERY_POLL).await;
                }
                Err(_) => break,
            }
        }
        Err(EngineError::Unavailable(format!(
            "Spark Connect server {endpoint}: {lost}, and the server did not answer again before the run's deadline ({last}); the next run reads what was committed"
        )))
    }

    /// Runs `statements` in order, each one's result added to `results` as it ends (so that a
    /// failure, or the deadline dropping this future, leaves what ran before it).
    async fn run_statements(
        &self,
        client: &SparkConnectClient,
        job: &SparkJob,
        statements: &[Statement],
        tag: &str,
        results: &mut Vec<(StatementKind, ResultSet)>,
    ) -> Result<(), Failure> {
        let settings = session_settings(job);
        match tokio::time::timeout(
            self.settings.connect_timeout,
            self.configure(client, &settings),
        )
        .await
        {
            Ok(configured) => configured?,
            Err(_) => {
                return Err(Failure::Transport(format!(
                    "no answer within {} s",
                    self.settings.connect_timeout.as_secs()
                )))
            }
        }
        let mut wrote = false;
        let sql: Vec<&str> = statements
            .iter()
            .map(|statement| statement.sql.as_str())
            .collect();
        for group in read_only_groups(&sql) {
            // Reads between two writes are independent: they run at the same time.
            let started = std::time::Instant::now();
            wrote |= group.clone().any(|index| is_write(sql[index]));
            let answers = futures::future::try_join_all(
                group
                    .clone()
                    .map(|index| execute_sql(client, sql[index], tag)),
            )
            .await
            .map_err(|failure| match failure {
                Failure::Transport(message) if wrote => Failure::LostAfterWrite(message),
                other => other,
            })?;
            debug!(
                run_id = %job.run_id,
                statements = ?group,
                kinds = ?group.clone().map(|index| statements[index].kind.as_str()).collect::<Vec<_>>(),
                millis = started.elapsed().as_millis() as u64,
                "statement answered"
            );
            results.extend(group.map(|index| statements[index].kind).zip(answers));
        }
        Ok(())
    }
}

/// The first word of a statement, upper case.
fn verb(statement: &str) -> String {
    statement
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase()
}

/// Whether a statement may change a table (a `CALL`, DDL, DML): not a query, not a refresh.
fn is_write(statement: &str) -> bool {
    !matches!(
        verb(statement).as_str(),
        "SELECT" | "WITH" | "DESCRIBE" | "SHOW" | "REFRESH"
    )
}

/// The statements in order, in groups to run at once: consecutive queries (`SELECT`, `WITH`,
/// `DESCRIBE`, `SHOW`) share a group; anything else (`CALL`, `REFRESH`, DDL) is a group of its
/// own, so a read never overlaps a write and the writes keep their order.
pub fn read_only_groups(statements: &[&str]) -> Vec<std::ops::Range<usize>> {
    let is_read = |statement: &str| {
        matches!(
            verb(statement).as_str(),
            "SELECT" | "WITH" | "DESCRIBE" | "SHOW"
        )
    };
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    for (index, statement) in statements.iter().enumerate() {
        match groups.last_mut() {
            Some(group) if is_read(statement) && is_read(statements[group.start]) => {
                group.end = index + 1
            }
            _ => groups.push(index..index + 1),
        }
    }
    groups
}

#[async_trait]
impl SparkRunner for ConnectRunner {
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
        let client = self.run_session(job, job.attempt).await?;
        let tag = run_tag(job);
        let endpoint = self.settings.endpoint.shown();
        let deadline = Instant::now() + job.timeout;
        let mut results = Vec::with_capacity(job.statements.len());
        let ran = tokio::time::timeout(
            job.timeout,
            self.run_statements(&client, job, &job.statements, &tag, &mut results),
        )
        .await;
        let unfinished = kind_after(&job.statements, results.len());
        match ran {
            Ok(Ok(())) => {
                self.release(client);
                Ok(EngineOutput::completed(results))
            }
            Ok(Err(Failure::Statement(error))) => {
                self.release(client);
                Ok(EngineOutput {
                    exit_code: 1,
                    error: Some(error),
                    results,
                    unfinished,
                    ..EngineOutput::default()
                })
            }
            Ok(Err(Failure::LostAfterWrite(message))) if !job.recovery.is_empty() => {
                warn!(table = %job.table, run_id = %job.run_id, %message, "connection lost after the rewrite was sent: reading its outcome from the table's metadata");
                let lost = format!(
                    "the connection broke in {} ({message})",
                    unfinished.map_or("the run", StatementKind::as_str)
                );
                let lost_sessions = [client];
                let recovered = self
                    .recover_outcome(&lost_sessions, job, deadline, &lost)
                    .await;
                let [client] = lost_sessions;
                self.release(client);
                match recovered {
                    // The rewrite committed: the broken connection is reported beside it.
                    Ok(Recovered::Committed(recovered)) => Ok(EngineOutput {
                        exit_code: 1,
                        error: Some(transport_error(format!(
                            "{lost}; the rewrite's commit was read from the table's metadata"
                        ))),
                        results: recovered,
                        unfinished,
                        ..EngineOutput::default()
                    }),
                    Ok(Recovered::NotCommitted(why)) => Err(EngineError::Unavailable(why)),
                    // The metadata could not be read: what the run returned before decides (every
                    // rewrite's result: committed; otherwise the engine was unavailable).
                    Err(error) => Ok(EngineOutput {
                        exit_code: 1,
                        error: Some(transport_error(error.to_string())),
                        results,
                        unfinished,
                        ..EngineOutput::default()
                    }),
                }
            }
            Ok(Err(Failure::Transport(message) | Failure::LostAfterWrite(message))) => {
                // The session may be gone with the server: the next run opens a new one.
                Err(EngineError::Unavailable(format!(
                    "Spark Connect server {endpoint}: {message}"
                )))
            }
            Err(_) => {
                warn!(table = %job.table, run_id = %job.run_id, timeout_secs = job.timeout.as_secs(), "deadline passed: interrupting the run's operations");
                let interrupted = match tokio::time::timeout(
                    INTERRUPT_TIMEOUT,
                    client.interrupt_tag(&tag),
                )
                .await
                {
                    Ok(Ok(interrupted)) => {
                        info!(run_id = %job.run_id, operations = interrupted.len(), "operations interrupted");
                        self.release(client);
                        format!("{} operation(s) interrupted", interrupted.len())
                    }
                    Ok(Err(error)) => {
                        let error = server_error(&error).describe(300);
                        warn!(run_id = %job.run_id, %error, "cannot interrupt the run's operations");
                        format!("the interrupt failed: {error}")
                    }
                    Err(_) => {
                        warn!(run_id = %job.run_id, "no answer to the interrupt");
                        "no answer to the interrupt".to_string()
                    }
                };
                Ok(EngineOutput {
                    timed_out: true,
                    interrupted: Some(format!("{interrupted} on {endpoint}")),
                    results,
                    unfinished,
                    ..EngineOutput::default()
                })
            }
        }
    }

    /// A run a previous icepack process started: its session (made of the run's nonce) may
    /// still be running it — interrupted first — and whether it committed is read from the
    /// table's metadata: the `replace` snapshot that removed the run's claimed files. `None`
    /// when nothing of it committed (and for maintenance and reconciles, which are run again).
    async fn recover(&self, job: &SparkJob) -> Result<Option<EngineOutput>, EngineError> {
        // Each attempt the run may have made had a session of its own.
        let mut lost = Vec::new();
        for attempt in 1..=job.attempt.max(1) {
            lost.push(self.run_session(job, attempt).await?);
        }
        if job.recovery.is_empty() {
            let tag = run_tag(job);
            for session in lost {
                match tokio::time::timeout(
                    self.settings.connect_timeout,
                    session.interrupt_tag(&tag),
                )
                .await
                {
                    Ok(Ok(interrupted)) if !interrupted.is_empty() => {
                        info!(run_id = %job.run_id, operations = interrupted.len(), "interrupted what was left of the run")
                    }
                    _ => {}
                }
                self.release(session);
            }
            return Ok(None);
        }
        let deadline = Instant::now() + job.timeout.max(RESTART_RECOVERY_TIMEOUT);
        let recovered = self
            .recover_outcome(&lost, job, deadline, "icepack restarted during the run")
            .await;
        for session in lost {
            self.release(session);
        }
        match recovered? {
            Recovered::Committed(results) => Ok(Some(EngineOutput::completed(results))),
            Recovered::NotCommitted(why) => {
                info!(table = %job.table, run_id = %job.run_id, %why, "the run left no commit");
                Ok(None)
            }
        }
    }

    fn engine(&self) -> String {
        format!("connect {}", self.settings.endpoint.shown())
    }

    /// `SELECT 1` on a session of its own: the server answers, and its first statement (7-12 s
    /// on a fresh server) is out of the way before a run needs it. A server not warmed up yet
    /// (its `spark.app.id` tells a restarted one) is then warmed up in the background.
    async fn probe(&self) -> Result<(), EngineError> {
        let client = match self.session().await {
            Ok(client) => client,
            Err(error) => {
                self.warm_up.server_unreachable();
                return Err(error);
            }
        };
        let unavailable = |message: String| {
            EngineError::Unavailable(format!(
                "Spark Connect server {}: {message}",
                self.settings.endpoint.shown()
            ))
        };
        let probe = async {
            let server = tokio::time::timeout(
                self.settings.connect_timeout,
                get_option(&client, "spark.app.id"),
            )
            .await
            .map_err(|_| Failure::Transport("no answer".to_string()))??;
            execute_sql(&client, "SELECT 1 AS icepack_probe", "icepack-probe").await?;
            Ok::<_, Failure>(server)
        };
        let result = tokio::time::timeout(PROBE_TIMEOUT, probe).await;
        self.release(client);
        let error = match result {
            Ok(Ok(server)) => {
                self.warm_up.server_answered(&self.settings, server);
                return Ok(());
            }
            Ok(Err(Failure::Transport(message) | Failure::LostAfterWrite(message))) => {
                unavailable(message)
            }
            Ok(Err(Failure::Statement(error))) => unavailable(error.describe(300)),
            Err(_) => unavailable(format!(
                "`SELECT 1` took longer than {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        };
        self.warm_up.server_unreachable();
        Err(error)
    }

    fn reconfigure(&self, config: &crate::config::Config) {
        self.warm_up.reconfigure(config);
    }

    fn describe(&self, job: &SparkJob) -> String {
        format!(
            "Spark Connect {}, catalog {}, <{} statements>",
            self.settings.endpoint.shown(),
            job.catalog,
            job.statements.len()
        )
    }
}

/// The settings of `[spark]` a connect runner reads, as plain values (the configuration stays
/// a leaf: this module does not import it).
pub fn settings(
    url: &str,
    tls: bool,
    token: Option<String>,
    connect_timeout: Duration,
) -> Result<ConnectSettings, String> {
    Ok(ConnectSettings {
        endpoint: ConnectEndpoint::parse(url, tls)?.with_token(token),
        connect_timeout,
    })
}

#[cfg(test)]
mod tests;
