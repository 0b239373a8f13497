//! [`SparkRunner`] as a local child process: `spark-sql` (or `spark-submit`) on a host with Spark,
//! also how runs reach an existing cluster through `spark.master`.

use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::command::secret_properties;
use super::result::{FramedStdout, StatementResults};
use super::runner::{
    keep_tail, EngineError, EngineOutput, SparkJob, SparkRunner, MAX_STREAM_BYTES,
};

pub struct ProcessRunner {
    spark_sql: String,
}

impl ProcessRunner {
    pub fn new(spark_sql: impl Into<String>) -> Self {
        ProcessRunner {
            spark_sql: spark_sql.into(),
        }
    }
}

/// Reads a stream to its end, handing each chunk to `sink`.
async fn drain(mut stream: impl AsyncRead + Unpin, mut sink: impl FnMut(&[u8])) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => sink(&buffer[..read]),
        }
    }
}

/// Reads a stream to its end, keeping only its last `MAX_STREAM_BYTES`.
async fn read_tail(stream: impl AsyncRead + Unpin) -> String {
    let mut kept: Vec<u8> = Vec::new();
    drain(stream, |bytes| keep_tail(&mut kept, bytes)).await;
    if kept.len() > MAX_STREAM_BYTES {
        kept.drain(..kept.len() - MAX_STREAM_BYTES);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Reads spark-sql's stdout to its end into the statements' results, whatever its length.
async fn read_results(
    stream: impl AsyncRead + Unpin,
    mut reader: FramedStdout,
) -> StatementResults {
    drain(stream, |bytes| reader.push(bytes)).await;
    reader.finish()
}

/// The `spark-defaults.conf` spark-submit would read when no properties file is given.
fn spark_defaults(spark_sql: &str) -> String {
    let conf_dir = std::env::var_os("SPARK_CONF_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("SPARK_HOME").map(std::path::PathBuf::from);
            home.or_else(|| {
                std::path::Path::new(spark_sql)
                    .parent()
                    .and_then(|bin| bin.parent())
                    .map(std::path::Path::to_path_buf)
            })
            .map(|home| home.join("conf"))
        });
    conf_dir
        .and_then(|dir| std::fs::read_to_string(dir.join("spark-defaults.conf")).ok())
        .unwrap_or_default()
}

/// Writes the run's secret settings into a file only this user can read; `None` without secrets.
fn write_secret_properties(
    job: &SparkJob,
    scratch: &std::path::Path,
    spark_sql: &str,
) -> Result<Option<String>, EngineError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(contents) = secret_properties(&job.conf, &spark_defaults(spark_sql)) else {
        return Ok(None);
    };
    let path = scratch.join("icepack-secrets.properties");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .map_err(|error| {
            EngineError::Unavailable(format!("cannot write the run's properties file: {error}"))
        })?;
    Ok(Some(path.display().to_string()))
}

/// Writes the run's statements into a file only this user can read (they name tables and
/// partitions), for `spark-sql -f`: a command line could not hold every statement of a run.
fn write_statements(job: &SparkJob, scratch: &std::path::Path) -> Result<String, EngineError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = scratch.join("icepack-statements.sql");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(job.statements_file().as_bytes()))
        .map_err(|error| {
            EngineError::Unavailable(format!("cannot write the run's statements file: {error}"))
        })?;
    Ok(path.display().to_string())
}

#[async_trait]
impl SparkRunner for ProcessRunner {
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
        let scratch = tempfile::tempdir().map_err(|error| {
            EngineError::Unavailable(format!("cannot create a scratch directory: {error}"))
        })?;
        let properties = write_secret_properties(job, scratch.path(), &self.spark_sql)?;
        let statements = write_statements(job, scratch.path())?;
        let mut command = Command::new(&self.spark_sql);
        command
            .args(job.command_line(properties.as_deref(), &statements))
            .envs(job.env.iter().map(|(name, value)| (name, value)))
            .current_dir(scratch.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: prctl and setpgid are async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // Own process group, so a deadline kills the JVM and everything it started; and die
                // with icepack: a run nobody waits for must not commit behind its back.
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|error| {
            EngineError::Unavailable(format!("cannot start {}: {error}", self.spark_sql))
        })?;
        let stdout = tokio::spawn(read_results(
            child.stdout.take().expect("piped stdout"),
            FramedStdout::new(&job.nonce, &job.statements),
        ));
        let stderr = tokio::spawn(read_tail(child.stderr.take().expect("piped stderr")));
        let (exit_code, timed_out) = match tokio::time::timeout(job.timeout, child.wait()).await {
            Ok(Ok(status)) => (
                status.code().map(i64::from).unwrap_or_else(|| {
                    128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0) as i64
                }),
                false,
            ),
            Ok(Err(error)) => {
                return Err(EngineError::Unavailable(format!(
                    "cannot wait for spark-sql: {error}"
                )))
            }
            Err(_) => {
                if let Some(pid) = child.id() {
                    // SAFETY: signalling our own child's process group.
                    unsafe {
                        libc::killpg(pid as i32, libc::SIGKILL);
                    }
                }
                let _ = child.kill().await;
                (137, true)
            }
        };
        let read = stdout.await.unwrap_or_default();
        Ok(EngineOutput {
            exit_code,
            results: read.results,
            unfinished: read.unfinished,
            stderr: stderr.await.unwrap_or_default(),
            error: None,
            oom_killed: false,
            timed_out,
            interrupted: None,
        })
    }

    fn engine(&self) -> String {
        format!("process {}", self.spark_sql)
    }

    async fn probe(&self) -> Result<(), EngineError> {
        use std::os::unix::fs::PermissionsExt;
        let found = std::path::Path::new(&self.spark_sql)
            .metadata()
            .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0);
        match found {
            Ok(true) => Ok(()),
            _ if !self.spark_sql.contains('/') => Ok(()), // found on PATH at run time
            Ok(false) => Err(EngineError::Unavailable(format!(
                "{} is not executable",
                self.spark_sql
            ))),
            Err(error) => Err(EngineError::Unavailable(format!(
                "{}: {error}",
                self.spark_sql
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::spark::sql::{Statement, StatementKind};
    use std::collections::BTreeMap;
    use std::time::Duration;

    const NONCE: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";

    /// A job whose "spark-sql" is `/bin/sh` running `script` (`-c script` as the options), its
    /// statements being of `kinds`.
    fn job_of(script: &str, timeout: Duration, kinds: &[StatementKind]) -> SparkJob {
        SparkJob {
            run_id: "r".to_string(),
            table: "a.b".to_string(),
            catalog: "lakehouse".to_string(),
            statements: kinds
                .iter()
                .map(|kind| Statement::new(*kind, "SELECT 1"))
                .collect(),
            nonce: NONCE.to_string(),
            conf: BTreeMap::new(),
            options: vec!["-c".to_string(), script.to_string()],
            recovery: Vec::new(),
            claimed: Default::default(),
            attempt: 1,
            env: vec![("ICEPACK_TEST_VALUE".to_string(), "42".to_string())],
            timeout,
        }
    }

    fn job(script: &str, timeout: Duration) -> SparkJob {
        job_of(script, timeout, &[StatementKind::Outputs])
    }

    /// Shell that prints statement `index`'s marker (`end` after the last).
    fn marker(index: &str) -> String {
        format!("printf 'icepack_frame\\n{NONCE}:{index}\\n'; ")
    }

    #[tokio::test]
    async fn results_exit_code_and_env_reach_the_caller() {
        let runner = ProcessRunner::new("/bin/sh");
        let output = runner
            .run(&job(
                &format!(
                    "{}echo icepack_output_file; echo '{{\"path\":\"s3://b/k-'$ICEPACK_TEST_VALUE'\"}}'; {}echo err >&2; exit 3",
                    marker("0"),
                    marker("end")
                ),
                Duration::from_secs(10),
            ))
            .await
            .unwrap();
        assert_eq!(output.exit_code, 3);
        assert_eq!(output.results.len(), 1);
        assert_eq!(output.unfinished, None);
        assert_eq!(
            output.results[0],
            (
                StatementKind::Outputs,
                crate::engine::spark::result::ResultSet {
                    columns: vec!["icepack_output_file".to_string()],
                    rows: vec![vec![r#"{"path":"s3://b/k-42"}"#.to_string()]],
                }
            )
        );
        assert_eq!(output.stderr, "err\n");
        assert!(!output.timed_out);
    }

    #[tokio::test]
    async fn a_truth_of_100_000_files_is_read_whole() {
        let runner = ProcessRunner::new("/bin/sh");
        let script = format!(
            "{}printf 'rewritten_data_files_count\\tadded_data_files_count\\n100000\\t40\\n'; \
             {}echo icepack_truth_file; \
             seq 1 100000 | sed 's|.*|{{\"path\":\"s3://lake/warehouse/t/data/part-&.parquet\",\"size\":2048}}|'; \
             {}printf 'icepack_committed_file\\n{{\"path\":\"s3://lake/warehouse/t/data/last.parquet\"}}\\n'; {}",
            marker("0"),
            marker("1"),
            marker("2"),
            marker("end"),
        );
        let job = job_of(
            &script,
            Duration::from_secs(60),
            &[
                StatementKind::Rewrite,
                StatementKind::Truth,
                StatementKind::Committed,
            ],
        );
        let output = runner.run(&job).await.unwrap();
        let report = crate::engine::spark::runner::judge(&output, &job).unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 100_000);
        let truth = report.truth.unwrap();
        assert_eq!(truth.len(), 100_000);
        assert_eq!(truth[0].0, "s3://lake/warehouse/t/data/part-1.parquet");
        assert_eq!(truth[99_999].1, 2048);
        assert_eq!(
            report.committed.len(),
            1,
            "the section after the truth is read too"
        );
    }

    #[tokio::test]
    async fn secret_settings_stay_off_the_command_line() {
        let out = tempfile::tempdir().unwrap();
        let fake = out.path().join("spark-sql");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/cmdline > {dir}/cmdline\n\
                 while [ $# -gt 0 ]; do if [ \"$1\" = --properties-file ]; then cp \"$2\" {dir}/props; stat -c %a \"$2\" > {dir}/mode; fi; shift; done\n\
                 echo rewritten_data_files_count; echo 0\n",
                dir = out.path().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut job = job("", Duration::from_secs(10));
        job.options.clear();
        job.conf = BTreeMap::from([
            (
                "spark.sql.catalog.lakehouse.uri".to_string(),
                "http://rest:8181".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.s3.secret-access-key".to_string(),
                "hunter22-value".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.token".to_string(),
                "tok=en:value".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.adls.auth.shared-key.account.key".to_string(),
                "AZUREKEY==".to_string(),
            ),
            (
                "spark.sql.catalog.lakehouse.jdbc.uri".to_string(),
                "jdbc:postgresql://db/c?user=u&password=JDBCPW".to_string(),
            ),
        ]);
        let output = ProcessRunner::new(fake.display().to_string())
            .run(&job)
            .await
            .unwrap();
        assert_eq!(output.exit_code, 0);
        let cmdline = std::fs::read_to_string(out.path().join("cmdline")).unwrap();
        assert!(
            cmdline.contains("spark.sql.catalog.lakehouse.uri=http://rest:8181"),
            "{cmdline}"
        );
        for secret in ["hunter22-value", "tok=en", "AZUREKEY", "JDBCPW"] {
            assert!(!cmdline.contains(secret), "{secret}: {cmdline}");
        }
        let props = std::fs::read_to_string(out.path().join("props")).unwrap();
        assert!(
            props.contains("spark.sql.catalog.lakehouse.s3.secret-access-key=hunter22-value"),
            "{props}"
        );
        assert!(
            props.contains("spark.sql.catalog.lakehouse.token=tok\\=en\\:value")
                || props.contains("spark.sql.catalog.lakehouse.token=tok=en:value"),
            "{props}"
        );
        assert!(
            props.contains("AZUREKEY==") && props.contains("JDBCPW"),
            "{props}"
        );
        assert_eq!(
            std::fs::read_to_string(out.path().join("mode"))
                .unwrap()
                .trim(),
            "600"
        );
    }

    /// A run's statements can be longer than a command line takes (Linux refuses one argument
    /// over 128 KiB with "Argument list too long"): spark-sql reads them from a file only its
    /// user can read.
    #[tokio::test]
    async fn statements_of_any_length_reach_spark_sql_through_a_file() {
        let out = tempfile::tempdir().unwrap();
        let fake = out.path().join("spark-sql");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -f ]; then wc -c < \"$2\" > {dir}/bytes; stat -c %a \"$2\" > {dir}/mode; fi; shift; done\n\
                 echo rewritten_data_files_count; echo 0\n",
                dir = out.path().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut job = job("", Duration::from_secs(10));
        job.options.clear();
        let long = format!("SELECT '{}'", "x".repeat(300_000));
        job.statements = vec![
            Statement::new(StatementKind::Other, long),
            Statement::new(StatementKind::Other, "SELECT 1"),
        ];
        let output = ProcessRunner::new(fake.display().to_string())
            .run(&job)
            .await
            .unwrap();
        assert_eq!(output.exit_code, 0, "{}", output.stderr);
        let read = |name: &str| std::fs::read_to_string(out.path().join(name)).unwrap();
        assert_eq!(
            read("bytes").trim(),
            job.statements_file().len().to_string()
        );
        assert!(job.statements_file().len() > 300_000);
        assert_eq!(read("mode").trim(), "600");
    }

    #[tokio::test]
    async fn the_deadline_kills_the_whole_process_group() {
        let runner = ProcessRunner::new("/bin/sh");
        let started = std::time::Instant::now();
        let output = runner
            .run(&job(
                "sleep 30 & sleep 30; echo icepack_output_file; echo s3://never/x",
                Duration::from_millis(300),
            ))
            .await
            .unwrap();
        assert!(output.timed_out);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(output.results.is_empty());
    }

    #[tokio::test]
    async fn a_missing_executable_is_an_unavailable_engine() {
        let runner = ProcessRunner::new("/nonexistent/spark-sql");
        let error = runner
            .run(&job("", Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(error
            .to_string()
            .contains("cannot start /nonexistent/spark-sql"));
    }
}
