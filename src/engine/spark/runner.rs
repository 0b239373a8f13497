//! The engine behind a narrow trait, and one compaction run on top of it: attempts, retries of
//! what is worth retrying, the result read from stdout, failures classified.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use tracing::{info, warn};

use crate::base::backoff::Backoff;

use std::collections::BTreeMap;

pub use crate::runs::report::{ReportSummary, RunOutcome};

use super::command::{command_line, describe_args, statements_file};
use super::result::{
    classify_failure, classify_server_error, failure_excerpt, framed_statements, redact,
    report_from_results, FailureClass, MaintenanceFailure, ResultSet, RunReport, ServerError,
};
use super::sql::{Statement, StatementKind};
use crate::base::redact::{is_secret_setting, secret_values};

/// Labels every container icepack starts carries (the Docker runner), to find them after a restart.
pub const LABEL_MANAGED: &str = "io.icepack.managed";
pub const LABEL_TABLE: &str = "io.icepack.table";
pub const LABEL_RUN_ID: &str = "io.icepack.run-id";
/// Which deployment (state directory) started the container: deployments sharing an engine leave
/// each other's runs alone.
pub const LABEL_INSTANCE: &str = "io.icepack.instance";

/// The file in the state directory that holds the deployment's id.
pub const INSTANCE_ID_FILE: &str = "instance-id";

/// A deployment's id (the label that tells its containers from other deployments' on a shared
/// engine), kept in its state directory: random when the directory is new; for a directory of an
/// earlier release, the id that release derived from the path (so its containers are still
/// found), then kept. `DefaultHasher` is not stable across Rust releases; the file is.
pub fn instance_id(state_dir: &std::path::Path) -> String {
    let path = state_dir.join(INSTANCE_ID_FILE);
    let valid = |id: &str| id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit());
    if let Ok(text) = std::fs::read_to_string(&path) {
        if valid(text.trim()) {
            return text.trim().to_string();
        }
    }
    let id = if state_dir.join("CURRENT").exists() {
        legacy_instance_id(state_dir)
    } else {
        format!("{:016x}", fastrand::u64(..))
    };
    let written = std::fs::create_dir_all(state_dir).and_then(|()| {
        let temporary = state_dir.join(format!("{INSTANCE_ID_FILE}.{}", std::process::id()));
        std::fs::write(&temporary, format!("{id}\n"))?;
        std::fs::rename(&temporary, &path)
    });
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.display(), "cannot keep the instance id; using one for this process only");
    }
    id
}

/// What releases before the id file derived from the state directory's absolute path.
fn legacy_instance_id(state_dir: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let absolute = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    absolute.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The most of each engine output stream kept (its end): Spark's stderr can run to megabytes.
#[cfg(feature = "service")]
pub(crate) const MAX_STREAM_BYTES: usize = 4 * 1024 * 1024;

/// Appends to a buffer that keeps only (about) its last `MAX_STREAM_BYTES`.
#[cfg(feature = "service")]
pub(crate) fn keep_tail(buffer: &mut Vec<u8>, bytes: &[u8]) {
    buffer.extend_from_slice(bytes);
    if buffer.len() > 2 * MAX_STREAM_BYTES {
        buffer.drain(..buffer.len() - MAX_STREAM_BYTES);
    }
}

/// Longest stderr excerpt sent on in a failure.
pub const EXCERPT_CHARS: usize = 1_200;

pub use crate::runs::report::{ClaimedFileReader, ClaimedFiles};

/// One compaction (or reconcile) for an engine to run: the statements, each run exactly once
/// and in order, and the Spark settings they need.
#[derive(Debug, Clone)]
pub struct SparkJob {
    pub run_id: String,
    pub table: String,
    /// The Spark catalog the statements use (its settings are the `spark.sql.catalog.<name>*` ones).
    pub catalog: String,
    pub statements: Vec<Statement>,
    /// The run's nonce, kept in its claim: it frames spark-sql's output (see
    /// [`framed_statements`]) and names the run's Spark Connect session, so a run recovered after
    /// a restart is read, and interrupted, as the run it is.
    pub nonce: String,
    /// Every setting: icepack's, the catalog's, `[spark] conf`. Secret values never reach a
    /// command line ([`is_secret_setting`]).
    pub conf: BTreeMap<String, String>,
    /// spark-sql options before the settings (`--master`, `--packages`, `--jars`).
    pub options: Vec<String>,
    /// For an engine that can lose its connection after a rewrite was sent, or a run after a
    /// restart (Spark Connect): the statements that read the run's outcome from the table's
    /// metadata instead — the `replace` snapshots, the files they removed, and the reads.
    pub recovery: Vec<Statement>,
    /// The files the run claimed: its own `replace` snapshot is the one that removed them.
    pub claimed: ClaimedFiles,
    /// Which attempt of the run this is (1 for the first; [`execute`] counts them). A job to
    /// recover: the most attempts the run may have made.
    pub attempt: u32,
    /// Passed to the engine, never logged.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

impl SparkJob {
    /// Everything that must never appear in logs or notifications.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets: Vec<String> = self
            .env
            .iter()
            .filter(|(name, _)| name != "AWS_REGION" && name != "AWS_DEFAULT_REGION")
            .map(|(_, value)| value.clone())
            .collect();
        secrets.extend(
            self.conf
                .iter()
                .flat_map(|(key, value)| secret_values(key, value)),
        );
        secrets
    }

    /// The spark-sql command line of the run, its secrets in `properties_file` (if any), its
    /// statements, framed by its nonce, in `statements_path` (written from
    /// [`SparkJob::statements_file`]).
    pub fn command_line(
        &self,
        properties_file: Option<&str>,
        statements_path: &str,
    ) -> Vec<String> {
        command_line(
            &self.options,
            &self.conf,
            &self.framed_statements(),
            properties_file,
            Some(statements_path),
        )
    }

    /// The contents of the file the run's spark-sql reads its statements from.
    pub fn statements_file(&self) -> String {
        statements_file(&self.framed_statements())
    }

    /// The statements as spark-sql runs them: each behind a marker of the run's nonce.
    fn framed_statements(&self) -> Vec<String> {
        if self.statements.is_empty() {
            Vec::new()
        } else {
            framed_statements(&self.nonce, &self.statements)
        }
    }

    /// How many `rewrite_data_files` calls the run makes.
    fn rewrites(&self) -> usize {
        self.statements
            .iter()
            .filter(|statement| statement.kind == StatementKind::Rewrite)
            .count()
    }

    /// What a log line may say about the run's spark-sql command line.
    pub fn describe(&self) -> String {
        let secrets = self
            .conf
            .iter()
            .any(|(key, value)| is_secret_setting(key, value));
        let statements = format!("<{} statements>", self.statements.len());
        describe_args(&self.command_line(secrets.then_some("<secrets file>"), &statements))
    }
}

/// How an engine run ended.
#[derive(Debug, Clone, Default)]
pub struct EngineOutput {
    /// The exit code of the run's spark-sql process or container; 0 on Spark Connect, where the
    /// run has no process of its own (its failures are in `error`, its deadline in `timed_out`).
    pub exit_code: i64,
    /// What each statement that ran to its end returned, in order, with what the statement is:
    /// spark-sql's framed stdout read to its end, or Spark Connect's Arrow results.
    pub results: Vec<(StatementKind, ResultSet)>,
    /// The statement that had begun and did not end: it failed, or the run was cut off in it.
    pub unfinished: Option<StatementKind>,
    /// The end of the engine's log stream, for failure excerpts.
    pub stderr: String,
    /// The failure as the server reported it (Spark Connect): error class, SQLSTATE, classes.
    pub error: Option<ServerError>,
    pub oom_killed: bool,
    /// The run's deadline passed: its process was killed, or its operations interrupted.
    pub timed_out: bool,
    /// Spark Connect, past the deadline: what interrupting the run's operations answered.
    pub interrupted: Option<String>,
}

impl EngineOutput {
    /// A run whose every statement ran to its end, these ones returning `results`.
    pub fn completed(results: Vec<(StatementKind, ResultSet)>) -> EngineOutput {
        EngineOutput {
            results,
            ..EngineOutput::default()
        }
    }

    /// A completed run whose rewrite printed `text` (spark-sql's header line, then rows).
    pub fn rewrite_printed(text: &str) -> EngineOutput {
        EngineOutput::completed(vec![(StatementKind::Rewrite, ResultSet::from_text(text))])
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("engine unavailable: {0}")]
    Unavailable(String),
}

#[async_trait]
pub trait SparkRunner: Send + Sync + 'static {
    /// Runs the job to its end (or its deadline) and cleans up after it on every path.
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError>;

    /// Finds the run a previous icepack process started for `job` (its run id) and waits for it
    /// (up to the job's timeout, what is left of the run's deadline) and collects it. A run whose
    /// container was created but never started has not begun: it starts now, the same run.
    /// `None` when no trace of it is left — always, for engines whose runs end with the icepack
    /// that started them (a child process, a Spark Connect session).
    async fn recover(&self, _job: &SparkJob) -> Result<Option<EngineOutput>, EngineError> {
        Ok(None)
    }

    /// Run ids of this deployment's runs that still exist; removes nothing.
    async fn leftover_runs(&self) -> Result<Vec<String>, EngineError> {
        Ok(Vec::new())
    }

    /// Removes a left-over run's traces.
    async fn discard(&self, _run_id: &str) -> Result<(), EngineError> {
        Ok(())
    }

    /// What a log line may say about how the job runs (never a secret).
    fn describe(&self, job: &SparkJob) -> String {
        job.describe()
    }

    /// The engine as status shows it: `docker IMAGE`, `process PATH`, `connect sc://HOST:PORT`.
    fn engine(&self) -> String;

    /// Whether the engine answers now (a warm-up for a long-lived one): `Ok` with nothing to
    /// report for engines that start per run and have nothing to ask.
    async fn probe(&self) -> Result<(), EngineError> {
        Ok(())
    }

    /// A reload changed the configuration (`config` holds no tables): what the runner keeps of
    /// it (a warm-up's catalog settings) follows.
    fn reconfigure(&self, _config: &crate::config::Config) {}
}

impl From<RunReport> for ReportSummary {
    fn from(report: RunReport) -> Self {
        ReportSummary {
            result: report.result,
            output_files: report.output_files,
            spec: report.spec,
            truth: report.truth,
            committed: report.committed,
            table_order: report.table_order,
            manifest_count: report.manifest_count,
            manifests: report.manifests,
            orphan_files: report.orphan_files,
            deletes: report.deletes,
            delete_rewrite: report.delete_rewrite,
            statistics_files: report.statistics_files,
            maintenance_failed: report.maintenance_failed,
            // rewrite_data_files reports no partition it left.
            left: Vec::new(),
        }
    }
}

/// Reads an engine's output into an outcome of one attempt. A run whose every rewrite returned
/// its result committed: whatever failed after it (snapshot expiry, a read, the deadline) is a
/// note on a successful run, never a failed rewrite — its files are compacted, its outputs known.
pub fn judge(output: &EngineOutput, job: &SparkJob) -> Result<RunReport, (FailureClass, String)> {
    let secrets = job.secrets();
    match failure(output, &secrets) {
        None => report_from_results(&output.results).map_err(|error| {
            let detail = format!(
                "{error}; stderr: {}",
                failure_excerpt(&output.stderr, &secrets, EXCERPT_CHARS / 2)
            );
            (FailureClass::Other, redact(&detail, &secrets))
        }),
        Some((class, excerpt)) => {
            let returned = |of: StatementKind| {
                output
                    .results
                    .iter()
                    .filter(|(kind, set)| *kind == of && !set.rows.is_empty())
                    .count()
            };
            // Every rewrite returned its result, or the table's metadata shows the run's own
            // `replace` snapshot (a recovery keeps only those).
            let committed = (job.rewrites() > 0
                && returned(StatementKind::Rewrite) == job.rewrites())
                || returned(StatementKind::ReplaceSnapshots) > 0;
            match report_from_results(&output.results) {
                Ok(mut report) if committed => {
                    report.maintenance_failed = Some(MaintenanceFailure {
                        step: output
                            .unfinished
                            .map_or("after_rewrite", StatementKind::as_str)
                            .to_string(),
                        class,
                        excerpt,
                    });
                    Ok(report)
                }
                _ => Err((class, excerpt)),
            }
        }
    }
}

/// Why a run did not end well, if it did not: its class and a short, secret-free excerpt.
fn failure(output: &EngineOutput, secrets: &[String]) -> Option<(FailureClass, String)> {
    if output.timed_out {
        let excerpt = match &output.interrupted {
            Some(interrupted) => format!(
                "deadline passed; the run's operations were interrupted: {}",
                redact(interrupted, secrets)
            ),
            None => format!(
                "deadline passed; the run was killed. {}",
                failure_excerpt(&output.stderr, secrets, EXCERPT_CHARS)
            ),
        };
        return Some((FailureClass::Timeout, excerpt));
    }
    if let Some(error) = &output.error {
        let excerpt = redact(&error.describe(EXCERPT_CHARS), secrets);
        return Some((classify_server_error(error), excerpt));
    }
    if output.exit_code == 0 {
        // Exit 0 without the last statement's end: spark-sql went on past a failure, or stopped.
        return output.unfinished.map(|kind| {
            let excerpt = failure_excerpt(&output.stderr, secrets, EXCERPT_CHARS / 2);
            (
                FailureClass::Other,
                format!(
                    "the run ended in {} without finishing it; stderr: {excerpt}",
                    kind.as_str()
                ),
            )
        });
    }
    let class = classify_failure(
        output.exit_code,
        output.oom_killed,
        output.timed_out,
        &output.stderr,
    );
    let mut excerpt = failure_excerpt(&output.stderr, secrets, EXCERPT_CHARS);
    if excerpt.is_empty() {
        excerpt = format!("spark-sql exited with code {}", output.exit_code);
    }
    Some((class, excerpt))
}

/// Runs a job with up to `attempts` tries, `retry_interval` apart, retrying only what is worth it.
pub async fn execute(
    runner: &dyn SparkRunner,
    job: &SparkJob,
    attempts: u32,
    retry_interval: Duration,
) -> RunOutcome {
    let started = Instant::now();
    let secrets = job.secrets();
    let mut retries = Backoff::constant(retry_interval);
    let mut attempt = 0;
    let mut job = job.clone();
    loop {
        attempt += 1;
        job.attempt = attempt;
        info!(table = %job.table, run_id = %job.run_id, attempt, command = %runner.describe(&job), "starting spark");
        let judged = match runner.run(&job).await {
            Ok(output) => judge(&output, &job),
            Err(error) => Err((
                FailureClass::EngineUnavailable,
                redact(&error.to_string(), &secrets),
            )),
        };
        match judged {
            Ok(report) => {
                return RunOutcome::Success {
                    report: report.into(),
                    duration_millis: started.elapsed().as_millis() as u64,
                    attempts: attempt,
                }
            }
            Err((class, excerpt)) => {
                if attempt < attempts && class.is_retryable() {
                    warn!(table = %job.table, run_id = %job.run_id, attempt, class = class.as_str(), %excerpt, "attempt failed; retrying");
                    tokio::time::sleep(retries.next_delay()).await;
                    continue;
                }
                return RunOutcome::Failure {
                    class,
                    excerpt,
                    duration_millis: started.elapsed().as_millis() as u64,
                    attempts: attempt,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests;
