//! [`SparkRunner`] through the Docker Engine API (bollard): one uniquely named, labelled container
//! per run, environment passed without ever being logged, an own deadline after which the
//! container is killed, logs collected, and the container removed on every path.
//!
//! While the job runs, the runner follows the container's logs to their end instead of blocking
//! in `POST /containers/{id}/wait`: podman's compat wait busy-polls a whole core for the length of
//! the run, following logs costs nothing. The exit code and OOM flag are then read by inspection.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{
    Config, CreateContainerOptions, InspectContainerOptions, KillContainerOptions,
    ListContainersOptions, LogOutput, LogsOptions, RemoveContainerOptions, StartContainerOptions,
    UploadToContainerOptions,
};
use bollard::errors::Error as DockerError;
use bollard::models::HostConfig;
use bollard::Docker;
use futures::StreamExt;
use tracing::{debug, info, warn};

use super::command::secret_properties;
use super::result::FramedStdout;
use super::runner::{
    instance_id, keep_tail, EngineError, EngineOutput, SparkJob, SparkRunner, LABEL_INSTANCE,
    LABEL_MANAGED, LABEL_RUN_ID, LABEL_TABLE,
};

/// Where a run's statements, secret settings and passed-through variables are put inside its
/// container (never in its configuration, which `docker inspect` shows): uploaded before it
/// starts.
const SECRETS_DIR: &str = "/tmp";
const SECRETS_FILE: &str = "icepack-secrets.properties";
const ENV_FILE: &str = "icepack-run.env";
/// The run's statements, for `spark-sql -f` (a command line could not hold every statement of a
/// run), uploaded beside the settings.
const STATEMENTS_FILE: &str = "icepack-statements.sql";

/// The variables as a file `sh` sources: `export NAME='value'`, values single-quoted.
fn env_file(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(name, value)| format!("export {name}='{}'\n", value.replace('\'', "'\\''")))
        .collect()
}

#[derive(Debug, Clone)]
pub struct DockerSettings {
    pub image: String,
    pub spark_sql: String,
    /// Network mode; the engine's default when empty.
    pub network: String,
    pub binds: Vec<String>,
    /// The deployment's state directory: it keeps the id its containers are labelled with.
    pub state_dir: std::path::PathBuf,
}

pub struct DockerRunner {
    settings: DockerSettings,
    instance: std::sync::OnceLock<String>,
}

impl DockerRunner {
    pub fn new(settings: DockerSettings) -> Self {
        DockerRunner {
            settings,
            instance: std::sync::OnceLock::new(),
        }
    }

    /// The value of this deployment's instance label (read or made on first use).
    fn instance(&self) -> &str {
        self.instance
            .get_or_init(|| instance_id(&self.settings.state_dir))
    }

    /// Connects per call: a daemon that comes back after an outage is found again.
    fn connect(&self) -> Result<Docker, EngineError> {
        Docker::connect_with_local_defaults()
            .map(|docker| docker.with_timeout(Duration::from_secs(120)))
            .map_err(|error| {
                EngineError::Unavailable(format!("cannot reach the container engine: {error}"))
            })
    }
}

/// `icepack-<table>-<run id>`, within Docker's name alphabet.
pub fn container_name(table: &str, run_id: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    format!("icepack-{}-{}", clean(table), clean(run_id))
}

/// A tar archive (ustar) of regular files, mode 0644, for the archive upload API.
fn tar_of_files(files: &[(&str, String)]) -> Vec<u8> {
    let mut archive = Vec::new();
    for (name, contents) in files {
        archive.extend(tar_entry(name, contents.as_bytes()));
    }
    archive.resize(archive.len() + 1024, 0);
    archive
}

/// One file's ustar header and its contents, padded to 512 bytes.
fn tar_entry(name: &str, contents: &[u8]) -> Vec<u8> {
    fn octal(field: &mut [u8], value: u64) {
        let width = field.len() - 1;
        let text = format!("{value:0width$o}");
        field[..width].copy_from_slice(text.as_bytes());
    }
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut header[100..108], 0o644);
    octal(&mut header[108..116], 0);
    octal(&mut header[116..124], 0);
    octal(&mut header[124..136], contents.len() as u64);
    octal(&mut header[136..148], 0);
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let checksum: u64 = header.iter().map(|byte| *byte as u64).sum();
    header[148..155].copy_from_slice(format!("{checksum:06o}\0").as_bytes());
    let mut entry = header.to_vec();
    entry.extend_from_slice(contents);
    entry.resize(entry.len().div_ceil(512) * 512, 0);
    entry
}

fn unavailable(what: &str, error: DockerError) -> EngineError {
    EngineError::Unavailable(format!("{what}: {error}"))
}

fn is_not_found(error: &DockerError) -> bool {
    matches!(
        error,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Reads a container's logs (to their end when `follow`): stdout into the statements' results
/// (whatever its length), the end of stderr.
async fn collect_logs(
    docker: &Docker,
    name: &str,
    follow: bool,
    stdout: &mut FramedStdout,
    stderr: &mut Vec<u8>,
) {
    let mut logs = docker.logs(
        name,
        Some(LogsOptions::<String> {
            follow,
            stdout: true,
            stderr: true,
            tail: "all".to_string(),
            ..Default::default()
        }),
    );
    while let Some(item) = logs.next().await {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                stdout.push(&message)
            }
            Ok(LogOutput::StdErr { message }) => keep_tail(stderr, &message),
            Ok(LogOutput::StdIn { .. }) => {}
            Err(error) => {
                debug!(container = name, %error, "log stream ended");
                break;
            }
        }
    }
}

/// The exit code and OOM flag of a stopped container, waiting briefly for it to stop.
async fn stopped_state(docker: &Docker, name: &str) -> Result<(i64, bool), EngineError> {
    for _ in 0..100 {
        let inspected = docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .map_err(|error| unavailable("cannot inspect the container", error))?;
        let state = inspected.state.unwrap_or_default();
        if state.running != Some(true) {
            return Ok((
                state.exit_code.unwrap_or(-1),
                state.oom_killed.unwrap_or(false),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(EngineError::Unavailable(format!(
        "container {name} is still running after its output ended"
    )))
}

/// Returns once the container has exited (or is gone), looking every two seconds.
async fn until_exited(docker: &Docker, name: &str) {
    use bollard::models::ContainerStateStatusEnum as Status;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        match docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
        {
            Ok(inspected) => {
                let state = inspected.state.unwrap_or_default();
                if matches!(state.status, Some(Status::EXITED | Status::DEAD)) {
                    return;
                }
            }
            Err(error) if is_not_found(&error) => return,
            Err(_) => {}
        }
    }
}

/// Containers, running or not, carrying every one of these `key=value` labels.
async fn list_labelled(
    docker: &Docker,
    labels: Vec<String>,
) -> Result<Vec<bollard::models::ContainerSummary>, EngineError> {
    docker
        .list_containers(Some(ListContainersOptions::<String> {
            all: true,
            filters: HashMap::from([("label".to_string(), labels)]),
            ..Default::default()
        }))
        .await
        .map_err(|error| unavailable("cannot list containers", error))
}

async fn remove(docker: &Docker, name: &str) {
    match docker
        .remove_container(
            name,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await
    {
        Ok(()) => info!(container = name, "container removed"),
        Err(error) if is_not_found(&error) => {}
        Err(error) => warn!(container = name, %error, "cannot remove the container"),
    }
}

/// The exit code and OOM flag of a container that is no longer running; `None` while it runs
/// (or cannot be inspected).
async fn exited_state(docker: &Docker, name: &str) -> Option<(i64, bool)> {
    use bollard::models::ContainerStateStatusEnum as Status;
    let inspected = docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
        .ok()?;
    let state = inspected.state.unwrap_or_default();
    matches!(state.status, Some(Status::EXITED | Status::DEAD)).then(|| {
        (
            state.exit_code.unwrap_or(-1),
            state.oom_killed.unwrap_or(false),
        )
    })
}

/// What an exited container left: its whole logs and its exit, read whatever the deadline — it
/// ended on its own, before anyone killed it.
async fn collect_exited(
    docker: &Docker,
    name: &str,
    job: &SparkJob,
    (exit_code, oom_killed): (i64, bool),
) -> EngineOutput {
    let mut stdout = FramedStdout::new(&job.nonce, &job.statements);
    let mut stderr = Vec::new();
    collect_logs(docker, name, false, &mut stdout, &mut stderr).await;
    let read = stdout.finish();
    EngineOutput {
        exit_code,
        results: read.results,
        unfinished: read.unfinished,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        error: None,
        oom_killed,
        timed_out: false,
        interrupted: None,
    }
}

/// Follows a started container to its end or the deadline, then reads its state. A container
/// found exited at the deadline ended on its own: it is read, not judged a timeout.
async fn follow_to_end(
    docker: &Docker,
    name: &str,
    job: &SparkJob,
    timeout: Duration,
) -> Result<EngineOutput, EngineError> {
    let fresh = || FramedStdout::new(&job.nonce, &job.statements);
    let mut stdout = fresh();
    let mut stderr = Vec::new();
    let finished = tokio::time::timeout(timeout, async {
        let complete = {
            let logs = collect_logs(docker, name, true, &mut stdout, &mut stderr);
            tokio::pin!(logs);
            tokio::select! {
                () = &mut logs => true,
                // A followed log can outlive its container (one that exited as the logs
                // attached, as podman has it): once it has ended, the stream gets a moment to
                // drain, else the whole log is read again.
                () = until_exited(docker, name) => {
                    tokio::time::timeout(Duration::from_secs(5), &mut logs).await.is_ok()
                }
            }
        };
        if !complete {
            stdout = fresh();
            stderr.clear();
            collect_logs(docker, name, false, &mut stdout, &mut stderr).await;
        }
    })
    .await;
    let (exit_code, oom_killed, timed_out) = match finished {
        Ok(()) => {
            let (exit_code, oom_killed) = stopped_state(docker, name).await?;
            (exit_code, oom_killed, false)
        }
        Err(_) => {
            if let Some(exited) = exited_state(docker, name).await {
                info!(
                    container = name,
                    "the container ended by itself as its deadline passed"
                );
                return Ok(collect_exited(docker, name, job, exited).await);
            }
            warn!(
                container = name,
                timeout_secs = timeout.as_secs(),
                "deadline passed: killing the container"
            );
            if let Err(error) = docker
                .kill_container(name, None::<KillContainerOptions<String>>)
                .await
            {
                if !is_not_found(&error) {
                    warn!(container = name, %error, "cannot kill the container");
                }
            }
            (137, false, true)
        }
    };
    let read = stdout.finish();
    Ok(EngineOutput {
        exit_code,
        results: read.results,
        unfinished: read.unfinished,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        error: None,
        oom_killed,
        timed_out,
        interrupted: None,
    })
}

#[async_trait]
impl SparkRunner for DockerRunner {
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
        let docker = self.connect()?;
        let name = container_name(&job.table, &job.run_id);
        // Inside the image spark-sql reads its own spark-defaults.conf unless given a file.
        let secrets = secret_properties(&job.conf, "");
        let secrets_path = format!("{SECRETS_DIR}/{SECRETS_FILE}");
        // The passed-through variables (AWS keys ...) come from a file sourced by `sh` before
        // spark-sql starts, not from the container's Env.
        let mut cmd = Vec::new();
        if !job.env.is_empty() {
            cmd.extend([
                "/bin/sh".to_string(),
                "-c".to_string(),
                format!(". {SECRETS_DIR}/{ENV_FILE} && exec \"$@\""),
                "icepack-run".to_string(),
            ]);
        }
        cmd.push(self.settings.spark_sql.clone());
        cmd.extend(job.command_line(
            secrets.as_ref().map(|_| secrets_path.as_str()),
            &format!("{SECRETS_DIR}/{STATEMENTS_FILE}"),
        ));
        let labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_TABLE.to_string(), job.table.clone()),
            (LABEL_RUN_ID.to_string(), job.run_id.clone()),
            (LABEL_INSTANCE.to_string(), self.instance().to_string()),
        ]);
        let config = Config {
            image: Some(self.settings.image.clone()),
            cmd: Some(cmd),
            env: None,
            labels: Some(labels),
            tty: Some(false),
            host_config: Some(HostConfig {
                network_mode: (!self.settings.network.is_empty())
                    .then(|| self.settings.network.clone()),
                binds: (!self.settings.binds.is_empty()).then(|| self.settings.binds.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: name.clone(),
            platform: None,
        };
        if let Err(error) = docker.create_container(Some(options), config).await {
            return Err(if is_not_found(&error) {
                EngineError::Unavailable(format!(
                    "image {} not found: build it (deploy/spark/) or pull it first",
                    self.settings.image
                ))
            } else {
                unavailable("cannot create the container", error)
            });
        }
        debug!(container = %name, image = %self.settings.image, "container created");
        let mut files = vec![(STATEMENTS_FILE, job.statements_file())];
        if let Some(contents) = secrets {
            files.push((SECRETS_FILE, contents));
        }
        if !job.env.is_empty() {
            files.push((ENV_FILE, env_file(&job.env)));
        }
        let upload = docker
            .upload_to_container(
                &name,
                Some(UploadToContainerOptions {
                    path: SECRETS_DIR.to_string(),
                    no_overwrite_dir_non_dir: String::new(),
                }),
                tar_of_files(&files).into(),
            )
            .await;
        if let Err(error) = upload {
            remove(&docker, &name).await;
            return Err(unavailable(
                "cannot put the run's settings into the container",
                error,
            ));
        }
        if let Err(error) = docker
            .start_container(&name, None::<StartContainerOptions<String>>)
            .await
        {
            remove(&docker, &name).await;
            return Err(unavailable("cannot start the container", error));
        }
        let output = follow_to_end(&docker, &name, job, job.timeout).await;
        remove(&docker, &name).await;
        output
    }

    async fn recover(&self, job: &SparkJob) -> Result<Option<EngineOutput>, EngineError> {
        let docker = self.connect()?;
        let found = list_labelled(&docker, vec![format!("{LABEL_RUN_ID}={}", job.run_id)]).await?;
        let Some(summary) = found.into_iter().next() else {
            return Ok(None);
        };
        let Some(name) = summary.names.and_then(|names| names.into_iter().next()) else {
            return Ok(None);
        };
        let name = name.trim_start_matches('/').to_string();
        // Stopped between create and start: nothing ran, and the settings may not all be in the
        // container yet. The run starts afresh, in a container of its own.
        // (`configured`: podman's name for a container created and not started yet.)
        if matches!(summary.state.as_deref(), Some("created" | "configured")) {
            info!(container = %name, "the run's container never started; starting the run now");
            remove(&docker, &name).await;
            return self.run(job).await.map(Some);
        }
        // Ended while icepack was down, maybe long past its deadline: what it left is its outcome.
        if let Some(exited) = exited_state(&docker, &name).await {
            info!(container = %name, "the run's container ended while icepack was down; reading what it left");
            let output = collect_exited(&docker, &name, job, exited).await;
            remove(&docker, &name).await;
            return Ok(Some(output));
        }
        let output = follow_to_end(&docker, &name, job, job.timeout).await;
        remove(&docker, &name).await;
        output.map(Some)
    }

    fn engine(&self) -> String {
        format!("docker {}", self.settings.image)
    }

    async fn probe(&self) -> Result<(), EngineError> {
        let docker = self.connect()?;
        docker
            .ping()
            .await
            .map_err(|error| unavailable("the container engine does not answer", error))?;
        Ok(())
    }

    async fn leftover_runs(&self) -> Result<Vec<String>, EngineError> {
        let docker = self.connect()?;
        let found = list_labelled(
            &docker,
            vec![
                format!("{LABEL_MANAGED}=true"),
                format!("{LABEL_INSTANCE}={}", self.instance()),
            ],
        )
        .await?;
        Ok(found
            .into_iter()
            .filter_map(|summary| {
                summary
                    .labels
                    .and_then(|labels| labels.get(LABEL_RUN_ID).cloned())
            })
            .collect())
    }

    async fn discard(&self, run_id: &str) -> Result<(), EngineError> {
        let docker = self.connect()?;
        let found = list_labelled(&docker, vec![format!("{LABEL_RUN_ID}={run_id}")]).await?;
        for summary in found {
            if let Some(id) = summary.id {
                remove(&docker, &id).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_are_unique_per_run_and_valid() {
        assert_eq!(
            container_name("analytics.orders", "20240501T120000-ab12"),
            "icepack-analytics.orders-20240501T120000-ab12"
        );
        assert_eq!(container_name("a.b", "x/y z"), "icepack-a.b-x-y-z");
    }

    #[test]
    fn the_settings_archive_is_a_valid_tar() {
        let archive = tar_of_files(&[("icepack-secrets.properties", "a=b\n".to_string())]);
        assert_eq!(archive.len(), 512 * 4);
        let checksum: u64 = archive[..512]
            .iter()
            .enumerate()
            .map(|(index, byte)| {
                if (148..156).contains(&index) {
                    32
                } else {
                    *byte as u64
                }
            })
            .sum();
        let written = std::str::from_utf8(&archive[148..154]).unwrap();
        assert_eq!(u64::from_str_radix(written, 8).unwrap(), checksum);
        assert_eq!(&archive[512..516], b"a=b\n");
        assert_eq!(
            std::str::from_utf8(&archive[124..135]).unwrap(),
            "00000000004"
        );
        let two = tar_of_files(&[("a", "x".to_string()), ("b", "y".repeat(600))]);
        assert_eq!(two.len(), 512 * (2 + 1 + 2) + 1024);
        assert_eq!(&two[1024..1025], b"b");
    }

    #[test]
    fn variables_are_sourced_from_a_file_whatever_their_value() {
        let file = env_file(&[
            (
                "AWS_SECRET_ACCESS_KEY".to_string(),
                "it's $HOME `x`".to_string(),
            ),
            ("AWS_REGION".to_string(), "us-east-1".to_string()),
        ]);
        let output = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                &format!("{file}printf '%s|%s' \"$AWS_SECRET_ACCESS_KEY\" \"$AWS_REGION\""),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "it's $HOME `x`|us-east-1"
        );
    }

    #[tokio::test]
    async fn an_unreachable_engine_is_reported_as_unavailable() {
        // Tests in this binary share the environment; this is the only one touching DOCKER_HOST.
        std::env::set_var("DOCKER_HOST", "unix:///nonexistent/icepack/docker.sock");
        let runner = DockerRunner::new(DockerSettings {
            image: "localhost/none:1".to_string(),
            spark_sql: "/opt/spark/bin/spark-sql".to_string(),
            network: String::new(),
            binds: Vec::new(),
            state_dir: tempfile::tempdir().unwrap().path().join("state"),
        });
        let job = SparkJob {
            run_id: "r".to_string(),
            table: "a.b".to_string(),
            catalog: "lakehouse".to_string(),
            statements: vec![crate::engine::spark::sql::Statement::new(
                crate::engine::spark::sql::StatementKind::Other,
                "SELECT 1",
            )],
            nonce: crate::engine::spark::result::new_nonce(),
            conf: Default::default(),
            options: Vec::new(),
            recovery: Vec::new(),
            claimed: Default::default(),
            attempt: 1,
            env: Vec::new(),
            timeout: Duration::from_secs(5),
        };
        let error = runner.run(&job).await.unwrap_err();
        assert!(error.to_string().contains("engine unavailable"), "{error}");
    }
}
