//! The local Spark + Iceberg stack for end-to-end tests: a catalog (Iceberg's REST catalog server,
//! or a JDBC catalog on SQLite) in a test's directory, a warehouse on the moto S3 server, and SQL
//! through the test process's shared Spark Connect server to create tables and check them (the
//! runners under test use the host spark-sql and the image). Set up by
//! `deploy/local/with-stack.sh` (`make test`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use icepack::config::CatalogConfig;

/// The stdout of a fixture program the test runs (a `java` source file, PyIceberg's python),
/// which must succeed; its stderr in the failure.
pub fn fixture_output(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what} runs: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The value of the `name=value` line a fixture printed.
pub fn printed(stdout: &str, name: &str) -> String {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {stdout}"))
        .to_string()
}

/// A native run of `analytics.{table}`'s small files (below 1 MiB, two at least) in
/// `partitions`, into 128 MiB files, as the stack tests ask the native engine directly.
pub fn native_task(
    catalog: &CatalogConfig,
    table: &str,
    partitions: Vec<String>,
) -> icepack::engine::native::NativeTask {
    icepack::engine::native::NativeTask {
        catalog_name: "lakehouse".to_string(),
        catalog: catalog.clone(),
        table: format!("analytics.{table}"),
        partitions,
        joining: icepack::engine::native::MidSizedFiles::Nowhere,
        small_file_bytes: 1024 * 1024,
        target_file_bytes: 128 * 1024 * 1024,
        min_input_files: 2,
        apply_deletes: false,
        order: Default::default(),
        partial_progress: false,
        expire: None,
        deadline: std::time::Instant::now() + Duration::from_secs(600),
        run_id: icepack::runs::report::new_run_id(chrono::Utc::now().timestamp_millis()),
        committed_since_millis: chrono::Utc::now().timestamp_millis() - 3_600_000,
    }
}

/// Whether the stack is there; in CI its absence is an error, elsewhere the test is skipped.
pub fn stack_available(test: &str) -> bool {
    super::needed_here(
        test,
        std::env::var_os("ICEPACK_E2E").is_some(),
        "the local stack",
        "",
    )
}

pub fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run through deploy/local/with-stack.sh"))
}

/// An Iceberg catalog whose warehouse lives in a bucket of the test's S3 server: Iceberg's REST
/// catalog server ([`Lakehouse::rest`]) or a JDBC catalog on SQLite ([`Lakehouse::new`]).
pub struct Lakehouse {
    pub catalog_dir: PathBuf,
    pub catalog: CatalogConfig,
    pub s3_endpoint: String,
    pub bucket: String,
    /// The REST catalog server, for a REST lakehouse (killed on drop).
    pub rest: Option<RestCatalogServer>,
}

/// Iceberg's REST catalog server (`RESTCatalogServer`, deploy/local/rest-catalog.sh): a JDBC
/// catalog on SQLite behind it, S3FileIO on the test's S3 server.
pub struct RestCatalogServer {
    child: Child,
    pub uri: String,
    pub log: PathBuf,
}

impl RestCatalogServer {
    pub async fn start(dir: &Path, s3_endpoint: &str, warehouse: &str) -> RestCatalogServer {
        let port = super::free_port();
        let log = dir.join("rest-catalog.log");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/local/rest-catalog.sh");
        let child = Command::new(script)
            .arg("run")
            .arg(dir)
            .args([s3_endpoint, warehouse, &port.to_string()])
            .envs(super::AWS_ENV)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::File::options().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {script}: {error}"));
        let mut server = RestCatalogServer {
            child,
            uri: format!("http://127.0.0.1:{port}"),
            log,
        };
        let config = format!("{}/v1/config", server.uri);
        super::wait_for_answer(
            "the REST catalog server",
            &mut server.child,
            &config,
            &server.log,
            Duration::from_secs(60),
        )
        .await;
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lakehouse {
    /// A REST catalog server of its own, and the catalog section icepack and Spark use for it;
    /// `properties` are further client properties (`credential`, `token` ...).
    pub async fn rest(
        dir: &Path,
        s3_endpoint: &str,
        bucket: &str,
        properties: &[(&str, &str)],
    ) -> Lakehouse {
        let catalog_dir = dir.join("catalog");
        std::fs::create_dir_all(&catalog_dir).unwrap();
        let warehouse = format!("s3://{bucket}/warehouse");
        let server = RestCatalogServer::start(&catalog_dir, s3_endpoint, &warehouse).await;
        let mut client = BTreeMap::from([("client.region".to_string(), "us-east-1".to_string())]);
        client.extend(
            properties
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string())),
        );
        Lakehouse {
            catalog_dir,
            catalog: CatalogConfig {
                catalog_impl: "org.apache.iceberg.rest.RESTCatalog".to_string(),
                uri: server.uri.clone(),
                warehouse,
                io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
                s3_endpoint: s3_endpoint.to_string(),
                properties: client,
            },
            s3_endpoint: s3_endpoint.to_string(),
            bucket: bucket.to_string(),
            rest: Some(server),
        }
    }

    /// An AWS Glue catalog served by `glue_endpoint` (moto's Glue), as Iceberg's `GlueCatalog`
    /// reaches it (`glue.endpoint`).
    pub fn glue(dir: &Path, s3_endpoint: &str, bucket: &str, glue_endpoint: &str) -> Lakehouse {
        let catalog_dir = dir.join("catalog");
        std::fs::create_dir_all(&catalog_dir).unwrap();
        Lakehouse {
            catalog_dir,
            catalog: CatalogConfig {
                catalog_impl: "org.apache.iceberg.aws.glue.GlueCatalog".to_string(),
                uri: String::new(),
                warehouse: format!("s3://{bucket}/warehouse"),
                io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
                s3_endpoint: s3_endpoint.to_string(),
                properties: BTreeMap::from([
                    ("glue.endpoint".to_string(), glue_endpoint.to_string()),
                    ("client.region".to_string(), "us-east-1".to_string()),
                ]),
            },
            s3_endpoint: s3_endpoint.to_string(),
            bucket: bucket.to_string(),
            rest: None,
        }
    }

    /// A JDBC catalog on SQLite in `dir`.
    pub fn new(dir: &Path, s3_endpoint: &str, bucket: &str) -> Lakehouse {
        let catalog_dir = dir.join("catalog");
        std::fs::create_dir_all(&catalog_dir).unwrap();
        let catalog = CatalogConfig {
            catalog_impl: "org.apache.iceberg.jdbc.JdbcCatalog".to_string(),
            uri: format!("jdbc:sqlite:{}/catalog.db", catalog_dir.display()),
            warehouse: format!("s3://{bucket}/warehouse"),
            io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
            s3_endpoint: s3_endpoint.to_string(),
            properties: BTreeMap::from([
                ("jdbc.journal_mode".to_string(), "WAL".to_string()),
                ("jdbc.busy_timeout".to_string(), "10000".to_string()),
                ("jdbc.schema-version".to_string(), "V1".to_string()),
                ("client.region".to_string(), "us-east-1".to_string()),
            ]),
        };
        Lakehouse {
            catalog_dir,
            catalog,
            s3_endpoint: s3_endpoint.to_string(),
            bucket: bucket.to_string(),
            rest: None,
        }
    }

    /// The `[catalogs.lakehouse]` section for icepack's configuration.
    pub fn catalog_toml(&self) -> String {
        self.catalog_toml_named("lakehouse")
    }

    /// The `[catalogs.<name>]` section for icepack's configuration.
    pub fn catalog_toml_named(&self, name: &str) -> String {
        let properties: Vec<String> = self
            .catalog
            .properties
            .iter()
            .map(|(key, value)| format!("\"{key}\" = \"{value}\""))
            .collect();
        format!(
            "[catalogs.{name}]\nimpl = \"{}\"\nuri = \"{}\"\nwarehouse = \"{}\"\nio_impl = \"{}\"\ns3_endpoint = \"{}\"\nproperties = {{ {} }}\n",
            self.catalog.catalog_impl,
            self.catalog.uri,
            self.catalog.warehouse,
            self.catalog.io_impl,
            self.catalog.s3_endpoint,
            properties.join(", ")
        )
    }

    /// The `[spark]` section running the image through the Docker API, jars baked in.
    pub fn docker_spark_toml(&self) -> String {
        format!(
            "[spark]\nrunner = \"docker\"\nimage = \"{}\"\nspark_sql = \"/opt/spark/bin/spark-sql\"\npackages = []\nnetwork = \"host\"\nbinds = [\"{dir}:{dir}:rw\"]\nconf = {{ \"spark.master\" = \"local[2]\", \"spark.driver.memory\" = \"1g\" }}\nenv = [\"AWS_ACCESS_KEY_ID\", \"AWS_SECRET_ACCESS_KEY\", \"AWS_REGION\", \"SPARK_LOCAL_IP\"]\n",
            env("ICEPACK_TEST_SPARK_IMAGE"),
            dir = self.catalog_dir.display()
        )
    }

    /// The `[spark]` section running the host spark-sql as a process (jars given, nothing
    /// resolved at run time).
    pub fn process_spark_toml() -> String {
        let jars: Vec<String> = env("ICEPACK_TEST_SPARK_JARS")
            .split(',')
            .map(|jar| format!("\"{jar}\""))
            .collect();
        format!(
            "[spark]\nrunner = \"process\"\nspark_sql = \"{}/bin/spark-sql\"\npackages = []\njars = [{}]\nconf = {{ \"spark.master\" = \"local[2]\", \"spark.driver.memory\" = \"1g\" }}\nenv = [\"AWS_ACCESS_KEY_ID\", \"AWS_SECRET_ACCESS_KEY\", \"AWS_REGION\", \"SPARK_LOCAL_IP\"]\n",
            env("ICEPACK_TEST_SPARK_HOME"),
            jars.join(", ")
        )
    }

    /// Runs a script of `;`-separated statements through the test process's shared Spark
    /// Connect server ([`super::connect::ConnectServer::shared`]) on this catalog (named
    /// `lakehouse`); returns what spark-sql would print with header lines on: for each statement
    /// with a result, its column names and then its rows, tab-separated. A warm server instead of
    /// a spark-sql JVM a call: on two cores a JVM start cost 10-20 s each time.
    pub fn sql(&self, statements: &str) -> String {
        let mut job = super::connect::job(
            "lakehouse",
            self,
            &split_script(statements),
            Duration::from_secs(600),
        );
        // A literal's rows in one task, one data file an INSERT, as spark-sql on `local[1]`
        // wrote them (the server is `local[2]`).
        job.conf.insert(
            "spark.sql.leafNodeDefaultParallelism".to_string(),
            "1".to_string(),
        );
        let server = super::connect::ConnectServer::shared();
        // Callers are synchronous (some inside a runtime): the statements run on a thread of
        // their own with its own runtime, and a panic there is the caller's.
        let results = std::thread::scope(|scope| {
            let run = scope.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(super::connect::run(
                        &super::connect::runner(&server.url),
                        job,
                    ))
            });
            run.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        let mut lines = Vec::new();
        for set in results.iter().filter(|set| !set.columns.is_empty()) {
            lines.push(set.columns.join("\t"));
            lines.extend(set.rows.iter().map(|row| row.join("\t")));
        }
        lines.join("\n")
    }
}

/// The statements of a script, split at the semicolons outside quotes and back-quotes; empty ones
/// dropped.
pub fn split_script(script: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in script.chars() {
        match (quote, c) {
            (None, ';') => statements.push(std::mem::take(&mut current)),
            (None, '\'' | '"' | '`') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(open), _) if c == open => {
                quote = None;
                current.push(c);
            }
            _ => current.push(c),
        }
    }
    statements.push(current);
    statements
        .into_iter()
        .map(|statement| statement.trim().to_string())
        .filter(|statement| !statement.is_empty())
        .collect()
}

/// The first row after the header line that has `column`, as (column → value).
pub fn row_with(stdout: &str, column: &str) -> BTreeMap<String, String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.split('\t').any(|name| name == column))
        .unwrap_or_else(|| panic!("no result with column {column} in:\n{stdout}"));
    lines[at]
        .split('\t')
        .map(str::to_string)
        .zip(lines[at + 1].split('\t').map(str::to_string))
        .collect()
}

/// Containers the icepack with this state directory started that still exist (Docker API).
pub async fn icepack_containers(state_dir: &Path) -> Vec<String> {
    use bollard::container::ListContainersOptions;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    docker
        .list_containers(Some(ListContainersOptions::<String> {
            all: true,
            filters: std::collections::HashMap::from([(
                "label".to_string(),
                vec![
                    format!("{}=true", icepack::engine::spark::runner::LABEL_MANAGED),
                    format!(
                        "{}={}",
                        icepack::engine::spark::runner::LABEL_INSTANCE,
                        icepack::engine::spark::job::instance_id(state_dir)
                    ),
                ],
            )]),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|container| container.names.and_then(|names| names.into_iter().next()))
        .collect()
}
