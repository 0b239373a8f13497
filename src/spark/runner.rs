//! The engine behind a narrow trait, and one compaction run on top of it: attempts, retries of
//! what is worth retrying, the result read from stdout, failures classified.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use tracing::{info, warn};

use crate::backoff::Backoff;

use std::collections::BTreeMap;

pub use crate::run::{ReportSummary, RunOutcome};

use super::command::{command_line, describe_args, statements_file};
use super::result::{
    classify_failure, classify_server_error, failure_excerpt, redact, report_from_results,
    stdout_results, FailureClass, ResultSet, RunReport, ServerError,
};
use crate::redact::{is_secret_setting, secret_values};

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
pub(crate) const MAX_STREAM_BYTES: usize = 4 * 1024 * 1024;

/// Appends to a buffer that keeps only (about) its last `MAX_STREAM_BYTES`.
pub(crate) fn keep_tail(buffer: &mut Vec<u8>, bytes: &[u8]) {
    buffer.extend_from_slice(bytes);
    if buffer.len() > 2 * MAX_STREAM_BYTES {
        buffer.drain(..buffer.len() - MAX_STREAM_BYTES);
    }
}

/// Longest stderr excerpt sent on in a failure.
pub const EXCERPT_CHARS: usize = 1_200;

/// One compaction (or reconcile) for an engine to run: the statements, each run exactly once
/// and in order, and the Spark settings they need.
#[derive(Debug, Clone)]
pub struct SparkJob {
    pub run_id: String,
    pub table: String,
    /// The Spark catalog the statements use (its settings are the `spark.sql.catalog.<name>*` ones).
    pub catalog: String,
    pub statements: Vec<String>,
    /// Every setting: icepack's, the catalog's, `[spark] conf`. Secret values never reach a
    /// command line ([`is_secret_setting`]).
    pub conf: BTreeMap<String, String>,
    /// spark-sql options before the settings (`--master`, `--packages`, `--jars`).
    pub options: Vec<String>,
    /// For an engine that can lose its connection after a rewrite was sent (Spark Connect): the
    /// statements that read the run's outcome from the table's metadata instead — whether its
    /// `replace` snapshot committed (`icepack_replace_snapshots`), its counts, and the reads.
    pub recovery: Vec<String>,
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
    /// statements in `statements_path` (written from [`SparkJob::statements_file`]).
    pub fn command_line(
        &self,
        properties_file: Option<&str>,
        statements_path: &str,
    ) -> Vec<String> {
        command_line(
            &self.options,
            &self.conf,
            &self.statements,
            properties_file,
            Some(statements_path),
        )
    }

    /// The contents of the file the run's spark-sql reads its statements from.
    pub fn statements_file(&self) -> String {
        statements_file(&self.statements)
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
    pub exit_code: i64,
    /// The result sets of the statements, in order: spark-sql's stdout read to its end, or
    /// Spark Connect's Arrow results.
    pub results: Vec<ResultSet>,
    /// The end of the engine's log stream, for failure excerpts.
    pub stderr: String,
    /// The failure as the server reported it (Spark Connect): error class, SQLSTATE, classes.
    pub error: Option<ServerError>,
    pub oom_killed: bool,
    pub timed_out: bool,
}

impl EngineOutput {
    /// A successful run that printed `stdout` (spark-sql's format).
    pub fn from_stdout(stdout: &str) -> EngineOutput {
        EngineOutput {
            results: stdout_results(stdout),
            ..EngineOutput::default()
        }
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
        }
    }
}

/// Reads an engine's output into an outcome of one attempt.
pub fn judge(
    output: &EngineOutput,
    secrets: &[String],
) -> Result<RunReport, (FailureClass, String)> {
    if let Some(error) = &output.error {
        let class = if output.timed_out {
            FailureClass::Timeout
        } else {
            classify_server_error(error)
        };
        let mut excerpt = redact(&error.describe(EXCERPT_CHARS), secrets);
        if output.timed_out {
            excerpt = format!("deadline passed; the operation was interrupted. {excerpt}");
        }
        return Err((class, excerpt));
    }
    if output.exit_code == 0 && !output.timed_out {
        return report_from_results(&output.results).map_err(|error| {
            let detail = format!(
                "{error}; stderr: {}",
                failure_excerpt(&output.stderr, secrets, EXCERPT_CHARS / 2)
            );
            (FailureClass::Other, redact(&detail, secrets))
        });
    }
    let class = classify_failure(
        output.exit_code,
        output.oom_killed,
        output.timed_out,
        &output.stderr,
    );
    let mut excerpt = failure_excerpt(&output.stderr, secrets, EXCERPT_CHARS);
    if output.timed_out {
        excerpt = format!("deadline passed; the run was killed. {excerpt}");
    } else if excerpt.is_empty() {
        excerpt = format!("spark-sql exited with code {}", output.exit_code);
    }
    Err((class, excerpt))
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
    loop {
        attempt += 1;
        info!(table = %job.table, run_id = %job.run_id, attempt, command = %runner.describe(job), "starting spark");
        let judged = match runner.run(job).await {
            Ok(output) => judge(&output, &secrets),
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
            statements: vec!["x".to_string()],
            conf: BTreeMap::new(),
            options: Vec::new(),
            recovery: Vec::new(),
            env: vec![(
                "AWS_SECRET_ACCESS_KEY".to_string(),
                "s3cr3tvalue".to_string(),
            )],
            timeout: Duration::from_secs(60),
        }
    }

    fn ok_output() -> EngineOutput {
        EngineOutput::from_stdout("rewritten_data_files_count\tadded_data_files_count\n12\t1\n")
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
            judge(&output, &[]).unwrap_err().0,
            FailureClass::OutOfMemory
        );
    }

    #[test]
    fn success_without_a_result_is_a_failure() {
        let output = EngineOutput::from_stdout("nothing");
        assert_eq!(judge(&output, &[]).unwrap_err().0, FailureClass::Other);
    }
}
