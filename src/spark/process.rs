//! [`SparkRunner`] as a local child process: `spark-sql` (or `spark-submit`) on a host with Spark,
//! also how runs reach an existing cluster through `spark.master`.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

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

/// Reads a stream to its end, keeping only its last `MAX_STREAM_BYTES`.
async fn read_tail(mut stream: impl AsyncRead + Unpin) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => keep_tail(&mut kept, &buffer[..read]),
        }
    }
    if kept.len() > MAX_STREAM_BYTES {
        kept.drain(..kept.len() - MAX_STREAM_BYTES);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[async_trait]
impl SparkRunner for ProcessRunner {
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
        let scratch = tempfile::tempdir().map_err(|error| {
            EngineError::Unavailable(format!("cannot create a scratch directory: {error}"))
        })?;
        let mut command = Command::new(&self.spark_sql);
        command
            .args(&job.args)
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
        let stdout = tokio::spawn(read_tail(child.stdout.take().expect("piped stdout")));
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
        Ok(EngineOutput {
            exit_code,
            stdout: stdout.await.unwrap_or_default(),
            stderr: stderr.await.unwrap_or_default(),
            oom_killed: false,
            timed_out,
        })
    }

    async fn recover(
        &self,
        _run_id: &str,
        _timeout: Duration,
    ) -> Result<Option<EngineOutput>, EngineError> {
        // A child dies with its parent (PR_SET_PDEATHSIG): nothing survives a restart.
        Ok(None)
    }

    async fn leftover_runs(&self) -> Result<Vec<String>, EngineError> {
        Ok(Vec::new())
    }

    async fn discard(&self, _run_id: &str) -> Result<(), EngineError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &[&str], timeout: Duration) -> SparkJob {
        SparkJob {
            run_id: "r".to_string(),
            table: "a.b".to_string(),
            args: args.iter().map(|arg| arg.to_string()).collect(),
            env: vec![("ICEPACK_TEST_VALUE".to_string(), "42".to_string())],
            timeout,
        }
    }

    #[tokio::test]
    async fn output_exit_code_and_env_reach_the_caller() {
        let runner = ProcessRunner::new("/bin/sh");
        let output = runner
            .run(&job(
                &["-c", "echo out $ICEPACK_TEST_VALUE; echo err >&2; exit 3"],
                Duration::from_secs(10),
            ))
            .await
            .unwrap();
        assert_eq!(output.exit_code, 3);
        assert_eq!(output.stdout, "out 42\n");
        assert_eq!(output.stderr, "err\n");
        assert!(!output.timed_out);
    }

    #[tokio::test]
    async fn the_deadline_kills_the_whole_process_group() {
        let runner = ProcessRunner::new("/bin/sh");
        let started = std::time::Instant::now();
        let output = runner
            .run(&job(
                &["-c", "sleep 30 & sleep 30; echo never"],
                Duration::from_millis(300),
            ))
            .await
            .unwrap();
        assert!(output.timed_out);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!output.stdout.contains("never"));
    }

    #[tokio::test]
    async fn a_missing_executable_is_an_unavailable_engine() {
        let runner = ProcessRunner::new("/nonexistent/spark-sql");
        let error = runner
            .run(&job(&[], Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(error
            .to_string()
            .contains("cannot start /nonexistent/spark-sql"));
    }
}
