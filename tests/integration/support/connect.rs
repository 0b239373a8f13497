//! A warm Spark for the `connect` runner's tests: a Spark Connect server (Spark 4.0 with Iceberg,
//! `deploy/local/spark-connect.sh`) on `local[2]` or on a standalone cluster started from the
//! same distribution, a gate in front of a server to take it away and give it back, and SQL
//! through the server with icepack's own runner.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use icepack::engine::spark::command::spark_conf;
use icepack::engine::spark::connect::{self, ConnectRunner};
use icepack::engine::spark::result::ResultSet;
use icepack::engine::spark::runner::{judge, SparkJob, SparkRunner};
use icepack::engine::spark::sql::{Statement, StatementKind};

use super::spark::Lakehouse;
use super::{free_port, AWS_ENV};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/local/spark-connect.sh")
}

fn run_script(args: &[&str]) -> String {
    let mut command = Command::new(script());
    command
        .args(args)
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        // A server outlives no test process: the script stops it once this process is gone
        // (the shared server is never dropped).
        .env("ICEPACK_CONNECT_OWNER_PID", std::process::id().to_string());
    for (name, value) in AWS_ENV {
        command.env(name, value);
    }
    let output = command
        .output()
        .expect("deploy/local/spark-connect.sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "spark-connect.sh {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A Spark Connect server of the test's own, stopped on drop.
pub struct ConnectServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub url: String,
}

impl ConnectServer {
    /// Starts a server (waits until it listens); `master` is Spark's, `local[2]` by default.
    pub fn start(master: Option<&str>) -> ConnectServer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut args = vec![
            "start".to_string(),
            dir.path().display().to_string(),
            port.to_string(),
        ];
        args.extend(master.map(str::to_string));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_script(&args);
        ConnectServer {
            dir,
            port,
            url: format!("sc://127.0.0.1:{port}"),
        }
    }

    /// The server every test of this process shares (on `local[2]`), started by the first
    /// that asks and stopped when the process ends. A server takes about 9 s to start and a
    /// GiB of memory, and runs each job in a session of its own (its catalogs, its settings),
    /// so tests need one of their own only to change its master or stop it.
    pub fn shared() -> &'static ConnectServer {
        static SHARED: std::sync::OnceLock<ConnectServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| ConnectServer::start(None))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("connect.log")).unwrap_or_default()
    }
}

impl Drop for ConnectServer {
    fn drop(&mut self) {
        run_script(&["stop", &self.dir.path().display().to_string()]);
    }
}

/// A standalone Spark cluster (a master and a worker), stopped on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub master: String,
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let out = run_script(&[
            "cluster-start",
            &dir.path().display().to_string(),
            &port.to_string(),
        ]);
        let master = out
            .lines()
            .find_map(|line| line.strip_prefix("MASTER="))
            .expect("the master's URL")
            .to_string();
        Cluster { dir, master }
    }

    /// The worker's log: which applications ran executors on it.
    pub fn worker_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        run_script(&["cluster-stop", &self.dir.path().display().to_string()]);
    }
}

/// A TCP gate to a server: open, connections are forwarded; closed, nothing listens (refused)
/// and the connections through it are cut, as when the server goes away.
pub struct Gate {
    pub port: u16,
    open: Arc<AtomicBool>,
    generation: Arc<std::sync::atomic::AtomicU64>,
    target: u16,
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl Gate {
    pub fn closed(target: u16) -> Gate {
        Gate {
            port: free_port(),
            open: Arc::new(AtomicBool::new(false)),
            generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            target,
            listener: None,
        }
    }

    pub async fn open(&mut self) {
        if self.listener.is_some() {
            return;
        }
        self.open.store(true, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        let (target, open, generation) = (self.target, self.open.clone(), self.generation.clone());
        self.listener = Some(tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let (open, generation) = (open.clone(), generation.clone());
                let born = generation.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    let cut = async {
                        while open.load(Ordering::SeqCst)
                            && generation.load(Ordering::SeqCst) == born
                        {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut => {}
                    }
                });
            }
        }));
    }

    pub fn close(&mut self) {
        self.open.store(false, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.close();
    }
}

/// icepack's connect runner on `url` (no token, 10 s to reach the server).
pub fn runner(url: &str) -> ConnectRunner {
    ConnectRunner::new(connect::settings(url, false, None, Duration::from_secs(10)).unwrap())
}

/// A job of `statements` (SQL of a test, not a run's) on the lakehouse's catalog (named
/// `catalog`), the settings icepack would give.
pub fn job(
    catalog: &str,
    lakehouse: &Lakehouse,
    statements: &[String],
    timeout: Duration,
) -> SparkJob {
    let statements: Vec<Statement> = statements
        .iter()
        .map(|sql| Statement::new(StatementKind::Other, sql.clone()))
        .collect();
    job_of(catalog, lakehouse, statements, timeout)
}

/// A job of a run's `statements` on the lakehouse's catalog (named `catalog`).
pub fn job_of(
    catalog: &str,
    lakehouse: &Lakehouse,
    statements: Vec<Statement>,
    timeout: Duration,
) -> SparkJob {
    SparkJob {
        run_id: super::unique("sql"),
        table: "setup".to_string(),
        catalog: catalog.to_string(),
        statements,
        nonce: icepack::engine::spark::result::new_nonce(),
        conf: spark_conf(&Default::default(), catalog, &lakehouse.catalog),
        options: Vec::new(),
        recovery: Vec::new(),
        claimed: Default::default(),
        attempt: 1,
        env: Vec::new(),
        timeout,
    }
}

/// Runs statements through the server on the catalog `catalog` (as icepack's runner does);
/// panics on a failure.
pub async fn sql(
    runner: &ConnectRunner,
    catalog: &str,
    lakehouse: &Lakehouse,
    statements: &[String],
) -> Vec<ResultSet> {
    run(
        runner,
        job(catalog, lakehouse, statements, Duration::from_secs(600)),
    )
    .await
}

/// Runs a job of a test's statements through the server; panics on a failure.
pub async fn run(runner: &ConnectRunner, job: SparkJob) -> Vec<ResultSet> {
    let output = runner
        .run(&job)
        .await
        .expect("the Spark Connect server answers");
    if let Err((class, excerpt)) = judge_statements(&output, &job) {
        let statements: Vec<&str> = job.statements.iter().map(|s| s.sql.as_str()).collect();
        panic!("statements failed ({class:?}): {excerpt}\n{statements:?}");
    }
    output.results.into_iter().map(|(_, set)| set).collect()
}

fn judge_statements(
    output: &icepack::engine::spark::runner::EngineOutput,
    job: &SparkJob,
) -> Result<(), (icepack::runs::report::FailureClass, String)> {
    match &output.error {
        None => Ok(()),
        Some(_) => judge(output, job).map(|_| ()),
    }
}

/// The value of `column` in the first row of the result set that has it.
pub fn value(results: &[ResultSet], column: &str) -> String {
    icepack::engine::spark::result::first_value(results, column)
        .unwrap_or_else(|| panic!("no {column} in {results:?}"))
        .to_string()
}
