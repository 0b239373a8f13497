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
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Plays back canned engine results.
    struct Scripted(Mutex<Vec<Result<EngineOutput, EngineError>>>);

    #[async_trait]
    impl SparkRunner for Scripted {
        async fn run(&self, _job: &SparkJob) -> Result<EngineOutput, EngineError> {
            self.0.lock().unwrap().remove(0)
        }
        fn engine(&self) -> String {
            "scripted".to_string()
        }
    }

    fn job() -> SparkJob {
        SparkJob {
            run_id: "r1".to_string(),
            table: "a.b".to_string(),
            catalog: "lakehouse".to_string(),
            statements: vec![
                Statement::new(StatementKind::Refresh, "REFRESH TABLE lakehouse.a.b"),
                Statement::new(
                    StatementKind::Rewrite,
                    "CALL lakehouse.system.rewrite_data_files(table => 'a.b')",
                ),
                Statement::new(StatementKind::Truth, "SELECT ..."),
                Statement::new(
                    StatementKind::ExpireSnapshots,
                    "CALL lakehouse.system.expire_snapshots(table => 'a.b')",
                ),
            ],
            nonce: "00112233445566778899aabbccddeeff".to_string(),
            conf: BTreeMap::new(),
            options: Vec::new(),
            recovery: Vec::new(),
            claimed: ClaimedFiles::default(),
            attempt: 1,
            env: vec![(
                "AWS_SECRET_ACCESS_KEY".to_string(),
                "s3cr3tvalue".to_string(),
            )],
            timeout: Duration::from_secs(60),
        }
    }

    fn ok_output() -> EngineOutput {
        EngineOutput::rewrite_printed("rewritten_data_files_count\tadded_data_files_count\n12\t1\n")
    }

    fn failed(stderr: &str) -> EngineOutput {
        EngineOutput {
            exit_code: 1,
            stderr: stderr.to_string(),
            ..EngineOutput::default()
        }
    }

    #[tokio::test]
    async fn a_conflict_is_retried_and_then_succeeds() {
        let runner = Scripted(Mutex::new(vec![
            Ok(failed("org.apache.iceberg.exceptions.ValidationException: found new delete for replaced data file")),
            Ok(ok_output()),
        ]));
        let outcome = execute(&runner, &job(), 2, Duration::from_millis(1)).await;
        match outcome {
            RunOutcome::Success {
                report, attempts, ..
            } => {
                assert_eq!(attempts, 2);
                assert_eq!(report.result.rewritten_data_files_count, 12);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spark_connect_deadline_is_a_timeout_with_what_the_interrupt_answered() {
        let output = EngineOutput {
            timed_out: true,
            interrupted: Some("1 operation(s) interrupted on sc://spark:15002".to_string()),
            unfinished: Some(StatementKind::Rewrite),
            ..EngineOutput::default()
        };
        let (class, excerpt) = judge(&output, &job()).unwrap_err();
        assert_eq!(class, FailureClass::Timeout);
        assert_eq!(
            excerpt,
            "deadline passed; the run's operations were interrupted: 1 operation(s) interrupted on sc://spark:15002"
        );
        assert_eq!(output.exit_code, 0, "no process exit is made up");
    }

    #[tokio::test]
    async fn commit_state_unknown_and_timeouts_are_not_retried() {
        let runner = Scripted(Mutex::new(vec![Ok(failed(
            "CommitStateUnknownException: lost",
        ))]));
        let outcome = execute(&runner, &job(), 3, Duration::from_millis(1)).await;
        assert!(matches!(
            outcome,
            RunOutcome::Failure {
                class: FailureClass::CommitStateUnknown,
                attempts: 1,
                ..
            }
        ));
        let runner = Scripted(Mutex::new(vec![Ok(EngineOutput {
            timed_out: true,
            exit_code: 137,
            ..EngineOutput::default()
        })]));
        let outcome = execute(&runner, &job(), 3, Duration::from_millis(1)).await;
        assert!(matches!(
            outcome,
            RunOutcome::Failure {
                class: FailureClass::Timeout,
                attempts: 1,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn an_unavailable_engine_fails_after_all_attempts_without_leaking_secrets() {
        let runner = Scripted(Mutex::new(vec![
            Err(EngineError::Unavailable(
                "no socket (key s3cr3tvalue)".to_string(),
            )),
            Err(EngineError::Unavailable(
                "no socket (key s3cr3tvalue)".to_string(),
            )),
        ]));
        match execute(&runner, &job(), 2, Duration::from_millis(1)).await {
            RunOutcome::Failure {
                class,
                excerpt,
                attempts,
                ..
            } => {
                assert_eq!(class, FailureClass::EngineUnavailable);
                assert_eq!(attempts, 2);
                assert!(!excerpt.contains("s3cr3tvalue"), "{excerpt}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Issue 31 item 5: what a failed run reports (its excerpt, which the run history, status,
    /// the page and alerts show) and what the log says of its command line hide the Azure shared
    /// key, the GCS private key and the JDBC URI's password, as they hide the S3 keys.
    #[tokio::test]
    async fn a_failure_hides_azure_gcs_and_jdbc_secrets() {
        let mut job = job();
        job.conf = BTreeMap::from([
            (
                "spark.sql.catalog.lakehouse.uri".to_string(),
                "jdbc:postgresql://db/catalog?user=ice&password=JDBCPW".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.adls.auth.shared-key.account.key".to_string(),
                "AZUREKEY==".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.fs.gs.auth.service.account.private.key".to_string(),
                "GCSPRIVATEKEY".to_string(),
            ),
        ]);
        let described = job.describe();
        let stderr = "ERROR SparkSQLDriver: Failed in [CALL ...]\n\
             org.postgresql.util.PSQLException: FATAL: password authentication failed for jdbc:postgresql://db/catalog?user=ice&password=JDBCPW\n\
             java.lang.IllegalArgumentException: Invalid account key AZUREKEY== (GCSPRIVATEKEY)\n";
        let runner = Scripted(Mutex::new(vec![Ok(failed(stderr))]));
        let RunOutcome::Failure { excerpt, .. } =
            execute(&runner, &job, 1, Duration::from_millis(1)).await
        else {
            panic!("the run fails");
        };
        for secret in ["JDBCPW", "AZUREKEY", "GCSPRIVATEKEY", "s3cr3tvalue"] {
            assert!(
                !excerpt.contains(secret),
                "{secret} in the excerpt: {excerpt}"
            );
            assert!(
                !described.contains(secret),
                "{secret} described: {described}"
            );
        }
        assert!(excerpt.contains("PSQLException"), "{excerpt}");
        assert!(
            described.contains("--properties-file <secrets file>"),
            "{described}"
        );
    }

    #[test]
    fn the_instance_id_is_kept_in_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("state");
        let first = instance_id(&fresh);
        assert_eq!(first.len(), 16);
        assert_eq!(instance_id(&fresh), first, "kept");
        let other = dir.path().join("other");
        assert_ne!(instance_id(&other), first, "random per deployment");
        // A directory of an earlier release keeps the id its containers carry.
        let earlier = dir.path().join("earlier");
        std::fs::create_dir_all(&earlier).unwrap();
        std::fs::write(earlier.join("CURRENT"), "MANIFEST-000001\n").unwrap();
        assert_eq!(instance_id(&earlier), legacy_instance_id(&earlier));
        assert_eq!(
            std::fs::read_to_string(earlier.join(INSTANCE_ID_FILE))
                .unwrap()
                .trim(),
            legacy_instance_id(&earlier)
        );
    }

    #[test]
    fn oom_with_137_is_out_of_memory() {
        let output = EngineOutput {
            exit_code: 137,
            oom_killed: true,
            ..EngineOutput::default()
        };
        assert_eq!(
            judge(&output, &job()).unwrap_err().0,
            FailureClass::OutOfMemory
        );
    }

    #[test]
    fn success_without_a_result_is_a_failure() {
        let output = EngineOutput::completed(Vec::new());
        assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
        let output = EngineOutput::rewrite_printed("nothing");
        assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
        // Exit 0, but the run's frame never ended: a statement did not finish (here the rewrite).
        let output = EngineOutput {
            unfinished: Some(StatementKind::Rewrite),
            ..EngineOutput::completed(Vec::new())
        };
        assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
        // ... after the rewrite returned: the rewrite stands, the read that did not end is noted.
        let output = EngineOutput {
            unfinished: Some(StatementKind::Truth),
            ..ok_output()
        };
        let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
        assert_eq!(failed.step, "truth_read");
    }

    /// The run of issue 31: the CALL committed and printed its result, the outputs and the
    /// truth; `expire_snapshots` then failed and spark-sql exited 1.
    fn committed_then(stderr: &str, unfinished: StatementKind) -> EngineOutput {
        let truth = ResultSet {
            columns: vec!["icepack_truth_file".to_string()],
            rows: vec![vec![
                serde_json::json!({"path": "s3://lake/t/data/small.parquet", "size": 10})
                    .to_string(),
            ]],
        };
        EngineOutput {
            exit_code: 1,
            stderr: stderr.to_string(),
            unfinished: Some(unfinished),
            results: vec![
                (StatementKind::Refresh, ResultSet::default()),
                (
                    StatementKind::Rewrite,
                    ResultSet::from_text(
                        "rewritten_data_files_count\tadded_data_files_count\n4\t1\n",
                    ),
                ),
                (StatementKind::Truth, truth),
            ],
            ..EngineOutput::default()
        }
    }

    #[test]
    fn a_failure_after_the_rewrite_returned_is_a_note_on_a_success() {
        let output = committed_then(
            "ERROR SparkSQLDriver: Failed in [CALL lakehouse.system.expire_snapshots(...)]\norg.apache.iceberg.exceptions.RuntimeIOException: cannot delete s3://lake/t/metadata/snap-1.avro (key s3cr3tvalue)",
            StatementKind::ExpireSnapshots,
        );
        let report = judge(&output, &job()).expect("the rewrite committed");
        assert_eq!(report.result.rewritten_data_files_count, 4);
        assert_eq!(
            report.truth,
            Some(vec![("s3://lake/t/data/small.parquet".to_string(), 10)]),
            "the truth the run read settles its pending files"
        );
        let failed = report.maintenance_failed.expect("the failed step is noted");
        assert_eq!(failed.step, "expire_snapshots");
        assert_eq!(failed.class, FailureClass::Other);
        assert!(
            failed.excerpt.contains("RuntimeIOException"),
            "{}",
            failed.excerpt
        );
        assert!(
            !failed.excerpt.contains("s3cr3tvalue"),
            "{}",
            failed.excerpt
        );

        // The deadline passed in the expiry: a timeout of that step, the rewrite stands.
        let output = EngineOutput {
            timed_out: true,
            exit_code: 137,
            ..committed_then("", StatementKind::ExpireSnapshots)
        };
        let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
        assert_eq!(failed.class, FailureClass::Timeout);

        // Spark Connect: the server's error on the expiry.
        let output = EngineOutput {
            error: Some(ServerError {
                error_class: "org.apache.iceberg.exceptions.CommitFailedException".to_string(),
                message: "expire failed".to_string(),
                ..ServerError::default()
            }),
            ..committed_then("", StatementKind::ExpireSnapshots)
        };
        let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
        assert_eq!(failed.class, FailureClass::CommitConflict);
    }

    #[test]
    fn a_failure_before_every_rewrite_returned_is_a_failed_run() {
        // The rewrite itself failed: nothing of it returned.
        let mut output = committed_then(
            "org.apache.iceberg.exceptions.ValidationException: found new delete for replaced data file",
            StatementKind::Rewrite,
        );
        output.results.truncate(1);
        assert_eq!(
            judge(&output, &job()).unwrap_err().0,
            FailureClass::CommitConflict
        );
        // Two rewrites (quiet partitions apart), the second failed: not committed as a whole.
        let mut two = job();
        two.statements.insert(
            2,
            Statement::new(
                StatementKind::Rewrite,
                "CALL lakehouse.system.rewrite_data_files(table => 'a.b')",
            ),
        );
        let output = committed_then("java.lang.IllegalStateException: x", StatementKind::Rewrite);
        assert_eq!(judge(&output, &two).unwrap_err().0, FailureClass::Other);
    }

    #[tokio::test]
    async fn a_committed_run_is_not_retried_for_a_failed_step_after_it() {
        let runner = Scripted(Mutex::new(vec![Ok(committed_then(
            "org.apache.iceberg.exceptions.CommitFailedException: expire",
            StatementKind::ExpireSnapshots,
        ))]));
        match execute(&runner, &job(), 3, Duration::from_millis(1)).await {
            RunOutcome::Success {
                report, attempts, ..
            } => {
                assert_eq!(attempts, 1, "the rewrite is not run again");
                assert_eq!(
                    report.maintenance_failed.unwrap().class,
                    FailureClass::CommitConflict
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
