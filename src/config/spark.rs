//! `[catalogs.NAME]` and `[spark]`: the Iceberg catalogs and the engine that runs maintenance.

use super::*;

/// The catalog tables use unless they name one.
pub const DEFAULT_CATALOG: &str = "lakehouse";

/// An Iceberg catalog as Spark sees it (`spark.sql.catalog.<name>.*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    /// Any Iceberg `catalog-impl` (REST, Glue, JDBC, Hadoop, Nessie ...).
    #[serde(rename = "impl", default = "default_catalog_impl")]
    pub catalog_impl: String,
    #[serde(default)]
    pub uri: String,
    #[serde(default = "default_warehouse")]
    pub warehouse: String,
    #[serde(default = "default_io_impl")]
    pub io_impl: String,
    /// For S3-compatible stores: set with path-style access.
    #[serde(default)]
    pub s3_endpoint: String,
    /// Further catalog properties (`spark.sql.catalog.<name>.<key>`).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

pub(super) fn default_catalog_impl() -> String {
    "org.apache.iceberg.rest.RESTCatalog".to_string()
}

pub(super) fn default_warehouse() -> String {
    "s3://lakehouse-data/warehouse".to_string()
}

pub(super) fn default_io_impl() -> String {
    "org.apache.iceberg.aws.s3.S3FileIO".to_string()
}

pub(super) fn default_catalogs() -> BTreeMap<String, CatalogConfig> {
    BTreeMap::from([(
        DEFAULT_CATALOG.to_string(),
        CatalogConfig {
            catalog_impl: default_catalog_impl(),
            uri: "http://iceberg-rest:8181".to_string(),
            warehouse: default_warehouse(),
            io_impl: default_io_impl(),
            s3_endpoint: String::new(),
            properties: BTreeMap::new(),
        },
    )])
}

impl CatalogConfig {
    pub(super) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = format!("catalogs.{name}");
        if !crate::base::sql_text::is_safe_identifier(name) {
            return invalid(format!(
                "{key}: `{}` is not a valid catalog name",
                name.escape_debug()
            ));
        }
        if !is_class_name(&self.catalog_impl) {
            return invalid(format!(
                "{key}.impl: `{}` is not a Java class name",
                self.catalog_impl.escape_debug()
            ));
        }
        if !is_class_name(&self.io_impl) {
            return invalid(format!(
                "{key}.io_impl: `{}` is not a Java class name",
                self.io_impl.escape_debug()
            ));
        }
        for (field, value) in [
            ("uri", &self.uri),
            ("warehouse", &self.warehouse),
            ("s3_endpoint", &self.s3_endpoint),
        ] {
            if value.chars().any(char::is_control) {
                return invalid(format!(
                    "{key}.{field}: must not contain control characters"
                ));
            }
        }
        if self.warehouse.is_empty() {
            return invalid(format!("{key}.warehouse: must not be empty"));
        }
        for (property, value) in &self.properties {
            if !crate::base::sql_text::is_safe_conf_key(property) {
                return invalid(format!(
                    "{key}.properties: `{}` is not a valid property name",
                    property.escape_debug()
                ));
            }
            if value.chars().any(char::is_control) {
                return invalid(format!(
                    "{key}.properties.{property}: must not contain control characters"
                ));
            }
        }
        Ok(())
    }
}

/// How Spark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SparkRunnerKind {
    /// A container per run through the Docker Engine API (`DOCKER_HOST`, or the local socket).
    Docker,
    /// A local `spark-sql` child process (on a host with Spark, or submitting to `master`).
    Process,
    /// A running Spark through Spark Connect (`connect_url`): a warm JVM, no start-up per run.
    Connect,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparkConfig {
    #[serde(default = "default_runner")]
    pub runner: SparkRunnerKind,
    #[serde(default = "default_image")]
    pub image: String,
    #[serde(default = "default_spark_sql")]
    pub spark_sql: String,
    /// Resolved by Spark at every run (`--packages`); bake jars into the image instead to skip it.
    #[serde(default = "default_packages")]
    pub packages: Vec<String>,
    /// Local jars (`--jars`), instead of or beside `packages`.
    #[serde(default)]
    pub jars: Vec<String>,
    /// e.g. `spark://host:7077` or `k8s://...`; Spark's default (local) when empty.
    #[serde(default)]
    pub master: String,
    /// Extra `--conf` pairs.
    #[serde(default)]
    pub conf: BTreeMap<String, String>,
    /// Docker network mode, e.g. `host`.
    #[serde(default)]
    pub network: String,
    /// Docker bind mounts, `host_path:container_path[:ro|rw]`.
    #[serde(default)]
    pub binds: Vec<String>,
    /// Environment variables passed through to Spark by name; their values are never logged.
    #[serde(default = "default_env")]
    pub env: Vec<String>,
    #[serde(default = "default_timeout_minutes")]
    pub timeout_minutes: Int<1, 10_080>,
    /// Size of the executor pool: runs at the same time.
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: Int<1, 256>,
    /// Attempts within one run (the reference: 2, 15 s apart); only retryable failures are retried.
    #[serde(default = "default_retry_attempts")]
    pub retry_attempts: Int<1, 10>,
    #[serde(default = "default_retry_interval_seconds")]
    pub retry_interval_seconds: Int<0, 3_600>,
    /// After a failed run the table waits this long before the next, doubling up to the maximum.
    #[serde(default = "default_failure_backoff_initial_seconds")]
    pub failure_backoff_initial_seconds: Int<1, 86_400>,
    #[serde(default = "default_failure_backoff_max_seconds")]
    pub failure_backoff_max_seconds: Int<1, 604_800>,
    /// The Spark Connect endpoint of the `connect` runner: `sc://host:15002[/;use_ssl=true]`.
    #[serde(default)]
    pub connect_url: String,
    /// The variable holding the endpoint's bearer token (read at start, never logged).
    #[serde(default)]
    pub connect_token_env: String,
    /// TLS to the endpoint (also the URL's `;use_ssl=true`).
    #[serde(default)]
    pub connect_tls: bool,
    /// How long reaching the server may take before a run fails as `engine_unavailable`.
    #[serde(default = "default_connect_timeout_seconds")]
    pub connect_timeout_seconds: Int<1, 600>,
    /// `remove_orphan_files` lists a table's files through its FileIO (`prefix_listing`,
    /// Iceberg 1.8 and later), so an `s3://` table needs no Hadoop file system for `s3`; `false`
    /// for an older Iceberg, which refuses the parameter.
    #[serde(default = "yes")]
    pub orphan_prefix_listing: bool,
}

fn yes() -> bool {
    true
}

pub(super) fn default_connect_timeout_seconds() -> Int<1, 600> {
    Int::new(10)
}

impl SparkRunnerKind {
    /// What one run costs on this runner whatever it rewrites, in seconds: the cost pacing's
    /// estimate before a table's own runs are measured.
    pub fn run_cost_seconds(self) -> u64 {
        match self {
            SparkRunnerKind::Connect => super::tables::WARM_RUN_COST_SECONDS,
            SparkRunnerKind::Docker | SparkRunnerKind::Process => {
                super::tables::COLD_RUN_COST_SECONDS
            }
        }
    }
}

pub(super) fn default_runner() -> SparkRunnerKind {
    SparkRunnerKind::Docker
}

pub(super) fn default_image() -> String {
    "apache/spark:3.5.1".to_string()
}

pub(super) fn default_spark_sql() -> String {
    "/opt/spark/bin/spark-sql".to_string()
}

pub(super) fn default_packages() -> Vec<String> {
    [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",
        "org.apache.hadoop:hadoop-aws:3.3.4",
        "com.amazonaws:aws-java-sdk-bundle:1.12.262",
    ]
    .map(str::to_string)
    .to_vec()
}

pub(super) fn default_env() -> Vec<String> {
    [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
    ]
    .map(str::to_string)
    .to_vec()
}

pub(super) fn default_timeout_minutes() -> Int<1, 10_080> {
    Int::new(60)
}

pub(super) fn default_max_concurrent() -> Int<1, 256> {
    Int::new(2)
}

pub(super) fn default_retry_attempts() -> Int<1, 10> {
    Int::new(2)
}

pub(super) fn default_retry_interval_seconds() -> Int<0, 3_600> {
    Int::new(15)
}

pub(super) fn default_failure_backoff_initial_seconds() -> Int<1, 86_400> {
    Int::new(60)
}

pub(super) fn default_failure_backoff_max_seconds() -> Int<1, 604_800> {
    Int::new(3600)
}

impl Default for SparkConfig {
    fn default() -> Self {
        SparkConfig {
            runner: default_runner(),
            image: default_image(),
            spark_sql: default_spark_sql(),
            packages: default_packages(),
            jars: Vec::new(),
            master: String::new(),
            conf: BTreeMap::new(),
            network: String::new(),
            binds: Vec::new(),
            env: default_env(),
            timeout_minutes: default_timeout_minutes(),
            max_concurrent: default_max_concurrent(),
            retry_attempts: default_retry_attempts(),
            retry_interval_seconds: default_retry_interval_seconds(),
            failure_backoff_initial_seconds: default_failure_backoff_initial_seconds(),
            failure_backoff_max_seconds: default_failure_backoff_max_seconds(),
            connect_url: String::new(),
            connect_token_env: String::new(),
            connect_tls: false,
            connect_timeout_seconds: default_connect_timeout_seconds(),
            orphan_prefix_listing: true,
        }
    }
}

impl SparkConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.image.trim().is_empty() || self.image.chars().any(char::is_whitespace) {
            return invalid(format!(
                "spark.image: `{}` is not an image reference",
                self.image.escape_debug()
            ));
        }
        if self.spark_sql.trim().is_empty() || self.spark_sql.chars().any(char::is_control) {
            return invalid("spark.spark_sql: must be the path of spark-sql or spark-submit");
        }
        for package in &self.packages {
            let parts: Vec<&str> = package.split(':').collect();
            let valid = parts.len() == 3
                && parts.iter().all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                });
            if !valid {
                return invalid(format!(
                    "spark.packages: `{}` is not group:artifact:version",
                    package.escape_debug()
                ));
            }
        }
        for jar in &self.jars {
            if jar.is_empty() || jar.contains(',') || jar.chars().any(char::is_control) {
                return invalid(format!(
                    "spark.jars: `{}` is not a jar path",
                    jar.escape_debug()
                ));
            }
        }
        if self
            .master
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return invalid("spark.master: must be one URL such as spark://host:7077");
        }
        for (key, value) in &self.conf {
            if !crate::base::sql_text::is_safe_conf_key(key) {
                return invalid(format!(
                    "spark.conf: `{}` is not a valid Spark property name",
                    key.escape_debug()
                ));
            }
            if value.chars().any(char::is_control) {
                return invalid(format!(
                    "spark.conf.{key}: must not contain control characters"
                ));
            }
        }
        if !self.network.is_empty() && !crate::base::sql_text::is_safe_conf_key(&self.network) {
            return invalid(format!(
                "spark.network: `{}` is not a network mode",
                self.network.escape_debug()
            ));
        }
        for bind in &self.binds {
            let parts: Vec<&str> = bind.split(':').collect();
            let valid = (2..=3).contains(&parts.len())
                && parts[0].starts_with('/')
                && parts[1].starts_with('/')
                && parts.get(2).is_none_or(|mode| matches!(*mode, "ro" | "rw"));
            if !valid {
                return invalid(format!(
                    "spark.binds: `{}` is not host_path:container_path[:ro|rw]",
                    bind.escape_debug()
                ));
            }
        }
        for name in &self.env {
            check_env_name("spark.env", name, "")?;
        }
        if self.failure_backoff_max_seconds.get() < self.failure_backoff_initial_seconds.get() {
            return invalid(format!(
                "spark.failure_backoff_max_seconds: must be at least failure_backoff_initial_seconds ({}), got {}",
                self.failure_backoff_initial_seconds, self.failure_backoff_max_seconds
            ));
        }
        if !self.connect_token_env.is_empty() {
            check_env_name("spark.connect_token_env", &self.connect_token_env, "")?;
        }
        if self.runner == SparkRunnerKind::Connect || !self.connect_url.is_empty() {
            crate::config::connect_endpoint::check_url(&self.connect_url, self.connect_tls)
                .map_err(|error| ConfigError::Invalid(format!("spark.connect_url: {error}")))?;
        }
        Ok(())
    }
}

pub(super) fn is_class_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                && !part.starts_with(|c: char| c.is_ascii_digit())
        })
}
