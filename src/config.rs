//! Configuration: built-in defaults < TOML file < `ICEPACK_<SECTION>__<KEY>` environment variables.
//!
//! Unknown keys are errors, and every error names the key it is about. AWS credentials never come
//! from here: the standard AWS provider chain supplies them.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::policy::Thresholds;

const MIB: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error("{0}")]
    Invalid(String),
}

/// The whole configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub service: ServiceConfig,
    #[serde(default)]
    pub sqs: SqsConfig,
    #[serde(default)]
    pub defaults: TableDefaults,
    #[serde(default)]
    pub tables: Vec<TableConfig>,
    /// Iceberg catalogs by Spark catalog name; tables name theirs (`lakehouse` by default).
    #[serde(default = "default_catalogs")]
    pub catalogs: BTreeMap<String, CatalogConfig>,
    #[serde(default)]
    pub spark: SparkConfig,
    #[serde(default)]
    pub slack: SlackConfig,
    /// Generic JSON webhooks (schema `icepack.run/v1`) for other chat or paging tools.
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
    /// Teams sharing this deployment. Empty: one implicit tenant, [`DEFAULT_TENANT`], fed by `[sqs]`.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantConfig>,
}

/// The tenant every table belongs to when no `[tenants]` are configured.
pub const DEFAULT_TENANT: &str = "default";

/// One `[tenants.<name>]`: a team's queues, alert channels, share of the run slots and defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's own SQS queues, each polled by its own poller actors. None: its buckets'
    /// notifications arrive on the shared `[sqs]` queue.
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// The tenant's Slack channel (gets only this tenant's runs).
    pub slack: Option<SlackConfig>,
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
    /// Runs of this tenant at the same time; the pool size (`spark.max_concurrent`) by default.
    pub max_concurrent_runs: Option<i64>,
    /// Share of the run slots when tenants compete (weighted round-robin).
    #[serde(default = "default_weight")]
    pub weight: i64,
    /// Threshold defaults for the tenant's tables, over `[defaults]`.
    #[serde(default)]
    pub defaults: TenantDefaults,
}

fn default_weight() -> i64 {
    1
}

/// `[[tenants.<name>.queues]]`: receive settings other than these come from `[sqs]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    pub queue_url: String,
    /// `sqs.region` by default.
    pub region: Option<String>,
    /// `sqs.endpoint_url` by default.
    pub endpoint_url: Option<String>,
    /// `sqs.pollers` by default.
    pub pollers: Option<i64>,
}

/// A tenant's threshold defaults: each key falls back to `[defaults]`. (A table's own keys have
/// the same shape and are checked the same way.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantDefaults {
    pub small_file_mb: Option<i64>,
    pub min_files: Option<i64>,
    pub min_total_mb: Option<i64>,
    pub target_file_mb: Option<i64>,
    pub max_wait_minutes: Option<i64>,
    pub file_suffixes: Option<Vec<String>>,
    pub pacing: Option<bool>,
    pub run_cost_seconds: Option<i64>,
    pub file_fix_value_seconds: Option<i64>,
    pub file_hour_cost_seconds: Option<i64>,
    pub settle_seconds: Option<i64>,
    pub settle_max_seconds: Option<i64>,
    pub quiet_partition_minutes: Option<i64>,
    pub remerge_new_data_percent: Option<i64>,
    pub strategy: Option<String>,
    pub max_manifests: Option<i64>,
    pub remove_orphans_every_hours: Option<i64>,
    pub orphan_older_than_hours: Option<i64>,
    pub delete_file_threshold: Option<i64>,
}

/// A tenant with its settings resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    pub name: String,
    /// The tenant's own Slack channel and webhooks (deployment-wide ones are not listed here).
    pub slack: Option<SlackConfig>,
    pub webhooks: Vec<WebhookConfig>,
    pub max_concurrent_runs: usize,
    pub weight: u32,
}

/// A queue to poll, and whose it is (`None`: the shared `[sqs]` queue).
#[derive(Debug, Clone)]
pub struct QueueSpec {
    pub tenant: Option<String>,
    pub sqs: SqsConfig,
}

/// Slack incoming webhook; enabled when the variable named by `webhook_url_env` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// Name of the environment variable holding the webhook URL (a secret: never in this file).
    #[serde(default = "default_slack_url_env")]
    pub webhook_url_env: String,
    #[serde(default = "default_slack_channel")]
    pub channel: String,
    #[serde(default = "default_notify_on")]
    pub notify_on: Vec<EventKind>,
}

fn default_slack_url_env() -> String {
    "SLACK_WEBHOOK_URL".to_string()
}

fn default_slack_channel() -> String {
    "#lakehouse-alerts".to_string()
}

fn default_notify_on() -> Vec<EventKind> {
    vec![EventKind::Success, EventKind::Failure]
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            webhook_url_env: default_slack_url_env(),
            channel: default_slack_channel(),
            notify_on: default_notify_on(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Name of the environment variable holding the URL.
    pub url_env: String,
    #[serde(default = "default_notify_on")]
    pub notify_on: Vec<EventKind>,
}

fn check_env_name(key: &str, name: &str, hint: &str) -> Result<(), ConfigError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        invalid(format!(
            "{key}: `{}` is not an environment variable name{hint}",
            name.escape_debug()
        ))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// RocksDB directory holding every table's durable state.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// How long an object key is remembered to recognise redelivered events. At least the queue's
    /// message retention (14 days at most on SQS).
    #[serde(default = "default_dedup_retention_days")]
    pub dedup_retention_days: i64,
    /// Metrics, health and the status API; loopback unless set otherwise. Empty disables it.
    #[serde(default = "default_http_listen")]
    pub http_listen: String,
    /// On SIGTERM, how long runs in flight may go on before icepack exits (they are recovered at
    /// the next start), and how long notifications may take to go out.
    #[serde(default = "default_shutdown_timeout_seconds")]
    pub shutdown_timeout_seconds: i64,
    /// Threads the table accumulators run on (table `i` on thread `i % n`); 0: one per core.
    #[serde(default = "default_worker_threads")]
    pub worker_threads: i64,
    /// Runs kept per table in its durable history (`GET /v1/tables/{table}/runs`).
    #[serde(default = "default_run_history")]
    pub run_history: i64,
}

fn default_worker_threads() -> i64 {
    0
}

fn default_run_history() -> i64 {
    50
}

/// More worker threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: i64 = 1024;

fn default_http_listen() -> String {
    "127.0.0.1:9464".to_string()
}

fn default_shutdown_timeout_seconds() -> i64 {
    30
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("data/state")
}

fn default_dedup_retention_days() -> i64 {
    14
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            state_dir: default_state_dir(),
            dedup_retention_days: default_dedup_retention_days(),
            http_listen: default_http_listen(),
            shutdown_timeout_seconds: default_shutdown_timeout_seconds(),
            worker_threads: default_worker_threads(),
            run_history: default_run_history(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqsConfig {
    #[serde(default = "default_queue_url")]
    pub queue_url: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// LocalStack, MinIO, ElasticMQ or another local endpoint; empty for AWS.
    #[serde(default)]
    pub endpoint_url: String,
    #[serde(default = "default_wait_time_seconds")]
    pub wait_time_seconds: i64,
    #[serde(default = "default_max_messages")]
    pub max_messages: i64,
    #[serde(default = "default_visibility_timeout_seconds")]
    pub visibility_timeout_seconds: i64,
    /// Concurrent receive loops on the queue; their batches share each state commit.
    #[serde(default = "default_pollers")]
    pub pollers: i64,
}

fn default_pollers() -> i64 {
    2
}

fn default_queue_url() -> String {
    "https://sqs.us-east-1.amazonaws.com/123456789012/s3-parquet-landing-queue".to_string()
}

fn default_region() -> String {
    "us-east-1".to_string()
}

fn default_wait_time_seconds() -> i64 {
    20
}

fn default_max_messages() -> i64 {
    10
}

fn default_visibility_timeout_seconds() -> i64 {
    300
}

impl Default for SqsConfig {
    fn default() -> Self {
        SqsConfig {
            queue_url: default_queue_url(),
            region: default_region(),
            endpoint_url: String::new(),
            wait_time_seconds: default_wait_time_seconds(),
            max_messages: default_max_messages(),
            visibility_timeout_seconds: default_visibility_timeout_seconds(),
            pollers: default_pollers(),
        }
    }
}

/// Threshold defaults; every key may be overridden per table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDefaults {
    #[serde(default = "default_small_file_mb")]
    pub small_file_mb: i64,
    #[serde(default = "default_min_files")]
    pub min_files: i64,
    #[serde(default = "default_min_total_mb")]
    pub min_total_mb: i64,
    #[serde(default = "default_target_file_mb")]
    pub target_file_mb: i64,
    /// 0 disables the time threshold.
    #[serde(default = "default_max_wait_minutes")]
    pub max_wait_minutes: i64,
    #[serde(default = "default_file_suffixes")]
    pub file_suffixes: Vec<String>,
    /// Pacing (docs/design.md, "Pacing"): when a due table's run starts. `false`: a run as
    /// soon as a threshold is crossed, of the partitions the rewrite rule finds worth it.
    #[serde(default = "yes")]
    pub pacing: bool,
    /// What one run costs on the engine whatever it rewrites, in seconds (~90 for a container
    /// or spark-submit, ~1 for a warm Spark Connect server).
    #[serde(default = "default_run_cost_seconds")]
    pub run_cost_seconds: i64,
    /// What fixing one small file is worth, in engine seconds: a run waits for
    /// `run_cost_seconds / this` files it can fix (0: no such wait).
    #[serde(default = "default_file_fix_value_seconds")]
    pub file_fix_value_seconds: i64,
    /// What one small file waiting an hour costs, in engine seconds: a run waits until the
    /// files it fixes have waited, together, `run_cost_seconds / this` hours (0: no such wait).
    #[serde(default = "default_file_hour_cost_seconds")]
    pub file_hour_cost_seconds: i64,
    /// A due table waits until no file has landed for this long (0: off) ...
    #[serde(default = "default_settle_seconds")]
    pub settle_seconds: i64,
    /// ... but not past this long after the oldest pending file landed.
    #[serde(default = "default_settle_max_seconds")]
    pub settle_max_seconds: i64,
    /// A partition with no new file for this long is complete: its last small files merge
    /// into its mid-sized outputs (0: never).
    #[serde(default = "default_quiet_partition_minutes")]
    pub quiet_partition_minutes: i64,
    /// A partition holding one still-small output of an earlier run joins a run once its new
    /// files hold this share of the output's bytes, in percent (0: at once), or it is quiet or
    /// past max-wait.
    #[serde(default = "default_remerge_new_data_percent")]
    pub remerge_new_data_percent: i64,
    /// How runs rewrite: `binpack`, `sort`, `zorder` or `auto` (sort a table that has a sort
    /// order, bin-pack the others). `sort_order` is per table.
    #[serde(default = "default_strategy")]
    pub strategy: String,
    /// Run `rewrite_manifests` when a table has more manifests than this, counted from their
    /// own S3 events and the metadata (0: off).
    #[serde(default)]
    pub max_manifests: i64,
    /// Run `remove_orphan_files` this often (0: off); the first run of a table is a dry run.
    #[serde(default)]
    pub remove_orphans_every_hours: i64,
    /// Never remove files younger than this (at least 24: a running writer's files are not
    /// orphans yet).
    #[serde(default = "default_orphan_older_than_hours")]
    pub orphan_older_than_hours: i64,
    /// A table with this many delete files (merge-on-read) is due; its run applies them (0: off).
    #[serde(default)]
    pub delete_file_threshold: i64,
    /// A table whose deleted rows are this share of its rows (0 < x <= 1) is due (absent: off).
    #[serde(default)]
    pub delete_ratio_threshold: Option<f64>,
}

fn default_orphan_older_than_hours() -> i64 {
    72
}

/// Below this, `orphan_older_than_hours` is refused.
const MIN_ORPHAN_AGE_HOURS: i64 = 24;

fn default_strategy() -> String {
    "binpack".to_string()
}

fn yes() -> bool {
    true
}

fn default_run_cost_seconds() -> i64 {
    90
}

fn default_file_fix_value_seconds() -> i64 {
    8
}

fn default_file_hour_cost_seconds() -> i64 {
    40
}

fn default_settle_seconds() -> i64 {
    60
}

fn default_settle_max_seconds() -> i64 {
    300
}

fn default_quiet_partition_minutes() -> i64 {
    15
}

fn default_remerge_new_data_percent() -> i64 {
    0
}

fn default_small_file_mb() -> i64 {
    64
}

fn default_min_files() -> i64 {
    10
}

fn default_min_total_mb() -> i64 {
    256
}

fn default_target_file_mb() -> i64 {
    512
}

fn default_max_wait_minutes() -> i64 {
    120
}

fn default_file_suffixes() -> Vec<String> {
    vec![".parquet".to_string()]
}

impl TableDefaults {
    /// The pacing of a table that sets none of its keys.
    pub fn pacing(&self) -> crate::policy::Pacing {
        TableConfig::default().pacing(self, &TenantDefaults::default())
    }
}

impl Default for TableDefaults {
    fn default() -> Self {
        TableDefaults {
            small_file_mb: default_small_file_mb(),
            min_files: default_min_files(),
            min_total_mb: default_min_total_mb(),
            target_file_mb: default_target_file_mb(),
            max_wait_minutes: default_max_wait_minutes(),
            file_suffixes: default_file_suffixes(),
            pacing: true,
            run_cost_seconds: default_run_cost_seconds(),
            file_fix_value_seconds: default_file_fix_value_seconds(),
            file_hour_cost_seconds: default_file_hour_cost_seconds(),
            settle_seconds: default_settle_seconds(),
            settle_max_seconds: default_settle_max_seconds(),
            quiet_partition_minutes: default_quiet_partition_minutes(),
            remerge_new_data_percent: default_remerge_new_data_percent(),
            strategy: default_strategy(),
            max_manifests: 0,
            remove_orphans_every_hours: 0,
            orphan_older_than_hours: default_orphan_older_than_hours(),
            delete_file_threshold: 0,
            delete_ratio_threshold: None,
        }
    }
}

/// One `[[tables]]` entry: where a table's files land, and its threshold overrides.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `namespace.table` in the Iceberg catalog (nested namespaces allowed: `a.b.table`).
    pub table: String,
    pub bucket: String,
    pub prefix: String,
    pub small_file_mb: Option<i64>,
    pub min_files: Option<i64>,
    pub min_total_mb: Option<i64>,
    pub target_file_mb: Option<i64>,
    pub max_wait_minutes: Option<i64>,
    pub file_suffixes: Option<Vec<String>>,
    /// Spark catalog holding the table; `lakehouse` by default.
    pub catalog: Option<String>,
    /// `min-input-files` of `rewrite_data_files`; `min_files` by default.
    pub min_input_files: Option<i64>,
    /// A filter for `rewrite_data_files(where => ...)`, e.g. `order_date >= '2024-01-01'`.
    #[serde(rename = "where")]
    pub where_filter: Option<String>,
    /// `partial-progress.enabled`: commit file groups as they finish.
    pub partial_progress: Option<bool>,
    /// Run `expire_snapshots` after a successful rewrite, for snapshots older than this.
    pub expire_snapshots_older_than_hours: Option<i64>,
    /// Rebuild the pending state from the table's metadata this often, events or not (off).
    pub reconcile_every_hours: Option<i64>,
    /// The `[tenants.<name>]` owning the table; required when tenants are configured.
    pub tenant: Option<String>,
    pub pacing: Option<bool>,
    pub run_cost_seconds: Option<i64>,
    pub file_fix_value_seconds: Option<i64>,
    pub file_hour_cost_seconds: Option<i64>,
    pub settle_seconds: Option<i64>,
    pub settle_max_seconds: Option<i64>,
    pub quiet_partition_minutes: Option<i64>,
    pub remerge_new_data_percent: Option<i64>,
    /// `binpack`, `sort`, `zorder` or `auto`; the tenant's, else `[defaults]`, by default.
    pub strategy: Option<String>,
    /// For `sort`: `col1 DESC NULLS LAST, col2` (the table's own order when left out); for
    /// `zorder`: `zorder(col1, col2)`.
    pub sort_order: Option<String>,
    /// Further `rewrite_data_files` options (`max-file-group-size-bytes`,
    /// `shuffle-partitions-per-file`, ...); icepack's own keys are refused.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// `rewrite_manifests` past this many manifests; the tenant's, else `[defaults]`, by default.
    pub max_manifests: Option<i64>,
    pub remove_orphans_every_hours: Option<i64>,
    pub orphan_older_than_hours: Option<i64>,
    /// `retain_last` of the `expire_snapshots` follow-up (Iceberg's default: 1).
    pub expire_snapshots_retain_last: Option<i64>,
    pub delete_file_threshold: Option<i64>,
    pub delete_ratio_threshold: Option<f64>,
}

/// Options of `rewrite_data_files` that icepack sets from its own keys.
const OWNED_REWRITE_OPTIONS: [&str; 4] = [
    "target-file-size-bytes",
    "min-input-files",
    "min-file-size-bytes",
    "partial-progress.enabled",
];

/// Which outcomes a sink wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Success,
    Failure,
}

/// A table with every default applied: what the rest of icepack works with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub table: String,
    pub bucket: String,
    pub prefix: String,
    pub thresholds: Thresholds,
    pub target_file_bytes: u64,
    pub file_suffixes: Vec<String>,
    pub catalog: String,
    pub min_input_files: u64,
    pub where_filter: Option<String>,
    pub partial_progress: bool,
    pub expire_snapshots_older_than_hours: Option<u64>,
    pub reconcile_every_millis: Option<i64>,
    pub tenant: String,
    /// When a due table's run starts: its cost against the files it fixes, the settle window.
    pub pacing: crate::policy::Pacing,
    pub strategy: crate::strategy::Strategy,
    /// `options` of the table's `[[tables]]` entry.
    pub rewrite_options: BTreeMap<String, String>,
    /// `rewrite_manifests` past this many manifests (`None`: off).
    pub max_manifests: Option<u64>,
    /// `remove_orphan_files` this often (`None`: off), for files older than the hours.
    pub remove_orphans_every_millis: Option<i64>,
    pub orphan_older_than_hours: u64,
    pub expire_snapshots_retain_last: Option<u64>,
    /// Due by delete files: their number, or deleted rows per million rows (`None`: off).
    pub deletes: DeleteThresholds,
    /// Runs kept in the table's history (`service.run_history`).
    pub run_history: u64,
}

pub use crate::state::DeleteThresholds;

impl TableSpec {
    pub fn rewrite_rule(&self) -> crate::policy::RewriteRule {
        crate::policy::RewriteRule {
            min_input_files: self.min_input_files,
            target_file_bytes: self.target_file_bytes,
        }
    }

    /// `min-file-size-bytes` of a run: the files it may rewrite. The small files icepack counts,
    /// and no larger ones — an output that is no longer small is not rewritten again and again —
    /// unless a partition has gone quiet (`joins_mid_sized`): then Iceberg's default (three
    /// quarters of the target, `None`), so its last small files merge into its mid-sized
    /// outputs instead of staying small. `None` too when the small-file size is not below the
    /// target (Iceberg requires the floor below it).
    pub fn rewrite_floor_bytes(&self, joins_mid_sized: bool) -> Option<u64> {
        let small = self.thresholds.small_file_bytes;
        (!joins_mid_sized && small < self.target_file_bytes).then_some(small)
    }

    /// A spec with compaction defaults, for tests and benchmarks.
    #[doc(hidden)]
    pub fn for_tests(table: &str, bucket: &str, prefix: &str, thresholds: Thresholds) -> TableSpec {
        TableSpec {
            table: table.to_string(),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            thresholds,
            target_file_bytes: 512 * MIB,
            file_suffixes: vec![".parquet".to_string()],
            catalog: DEFAULT_CATALOG.to_string(),
            min_input_files: thresholds.min_files,
            where_filter: None,
            partial_progress: false,
            expire_snapshots_older_than_hours: None,
            reconcile_every_millis: None,
            tenant: DEFAULT_TENANT.to_string(),
            pacing: crate::policy::Pacing::OFF,
            strategy: crate::strategy::Strategy::Binpack,
            rewrite_options: BTreeMap::new(),
            max_manifests: None,
            remove_orphans_every_millis: None,
            orphan_older_than_hours: default_orphan_older_than_hours() as u64,
            expire_snapshots_retain_last: None,
            deletes: DeleteThresholds::default(),
            run_history: default_run_history() as u64,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            service: ServiceConfig::default(),
            sqs: SqsConfig::default(),
            defaults: TableDefaults::default(),
            tables: Vec::new(),
            catalogs: default_catalogs(),
            spark: SparkConfig::default(),
            slack: SlackConfig::default(),
            webhooks: Vec::new(),
            tenants: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Reads the TOML file and the `ICEPACK_*` environment, then validates the result.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Missing(path.to_path_buf()));
        }
        Self::from_figment(Figment::new().merge(Toml::file(path)).merge(env_provider()))
    }

    /// Parses TOML text (no environment): for tests and tools.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Self::from_figment(Figment::new().merge(Toml::string(text)))
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(describe_figment_error)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every section; the first problem found is reported with the key it is about.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.service.validate()?;
        self.sqs.validate()?;
        self.defaults.validate()?;
        for (name, catalog) in &self.catalogs {
            catalog.validate(name)?;
        }
        self.spark.validate()?;
        const URL_HINT: &str = " (the URL itself never goes in this file)";
        check_env_name(
            "slack.webhook_url_env",
            &self.slack.webhook_url_env,
            URL_HINT,
        )?;
        for (index, webhook) in self.webhooks.iter().enumerate() {
            check_env_name(
                &format!("webhooks[{index}].url_env"),
                &webhook.url_env,
                URL_HINT,
            )?;
        }
        for (name, tenant) in &self.tenants {
            tenant.validate(name, &self.sqs)?;
        }
        let mut queue_owners = std::collections::HashMap::new();
        for queue in self.queues() {
            let owner = queue.tenant.as_deref().unwrap_or("the shared [sqs] queue");
            if let Some(other) = queue_owners.insert(queue.sqs.queue_url.clone(), owner.to_string())
            {
                return invalid(format!(
                    "tenants.{owner}.queues: queue `{}` is also configured for {other}; a queue is polled once",
                    queue.sqs.queue_url
                ));
            }
        }
        let mut seen_names = HashSet::new();
        let mut seen_locations = std::collections::HashMap::new();
        for (index, table) in self.tables.iter().enumerate() {
            let key = format!("tables[{index}]");
            table.validate(&key)?;
            match (&table.tenant, self.tenants.is_empty()) {
                (None, false) => {
                    return invalid(format!(
                        "{key}.tenant: required when [tenants] are configured (one of: {})",
                        self.tenants.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                }
                (Some(tenant), true) if tenant != DEFAULT_TENANT => {
                    return invalid(format!(
                        "{key}.tenant: no [tenants.{tenant}] section is configured"
                    ))
                }
                (Some(tenant), false) if !self.tenants.contains_key(tenant) => {
                    return invalid(format!(
                        "{key}.tenant: no [tenants.{tenant}] section is configured"
                    ))
                }
                _ => {}
            }
            let no_overrides = TenantDefaults::default();
            let tenant_defaults = table
                .tenant
                .as_ref()
                .and_then(|tenant| self.tenants.get(tenant))
                .map_or(&no_overrides, |tenant| &tenant.defaults);
            table
                .strategy(&self.defaults, tenant_defaults)
                .map_err(|reason| ConfigError::Invalid(format!("{key}: {reason}")))?;
            let catalog = table.catalog.as_deref().unwrap_or(DEFAULT_CATALOG);
            if !self.catalogs.contains_key(catalog) {
                return invalid(format!(
                    "{key}.catalog: no [catalogs.{catalog}] section is configured"
                ));
            }
            if !seen_names.insert(table.table.as_str()) {
                return invalid(format!(
                    "{key}.table: table `{}` is configured twice",
                    table.table
                ));
            }
            if let Some(other) = seen_locations.insert(
                (table.bucket.as_str(), table.prefix.as_str()),
                table.table.as_str(),
            ) {
                return invalid(format!(
                    "{key}.prefix: tables `{other}` and `{}` have the same bucket `{}` and prefix `{}`",
                    table.table, table.bucket, table.prefix
                ));
            }
        }
        Ok(())
    }

    /// Every configured table with the defaults applied, in configuration order.
    pub fn table_specs(&self) -> Vec<TableSpec> {
        let no_overrides = TenantDefaults::default();
        self.tables
            .iter()
            .map(|table| {
                let tenant = table.tenant.as_deref().unwrap_or(DEFAULT_TENANT);
                let overrides = self
                    .tenants
                    .get(tenant)
                    .map_or(&no_overrides, |tenant| &tenant.defaults);
                TableSpec {
                    run_history: self.service.run_history as u64,
                    ..table.resolve(&self.defaults, overrides, tenant)
                }
            })
            .collect()
    }

    /// Every tenant with its settings resolved; the implicit [`DEFAULT_TENANT`] when none are
    /// configured.
    pub fn tenant_specs(&self) -> Vec<TenantSpec> {
        let pool_size = self.spark.max_concurrent as usize;
        if self.tenants.is_empty() {
            return vec![TenantSpec {
                name: DEFAULT_TENANT.to_string(),
                slack: None,
                webhooks: Vec::new(),
                max_concurrent_runs: pool_size,
                weight: 1,
            }];
        }
        self.tenants
            .iter()
            .map(|(name, tenant)| TenantSpec {
                name: name.clone(),
                slack: tenant.slack.clone(),
                webhooks: tenant.webhooks.clone(),
                max_concurrent_runs: tenant
                    .max_concurrent_runs
                    .map_or(pool_size, |runs| runs as usize),
                weight: tenant.weight as u32,
            })
            .collect()
    }

    /// The queues to poll: every tenant's own, and the shared `[sqs]` queue when no tenants are
    /// configured or some tenant has no queue of its own.
    pub fn queues(&self) -> Vec<QueueSpec> {
        let mut queues = Vec::new();
        if self.tenants.is_empty() || self.tenants.values().any(|t| t.queues.is_empty()) {
            queues.push(QueueSpec {
                tenant: None,
                sqs: self.sqs.clone(),
            });
        }
        for (name, tenant) in &self.tenants {
            for queue in &tenant.queues {
                queues.push(QueueSpec {
                    tenant: Some(name.clone()),
                    sqs: queue.resolve(&self.sqs),
                });
            }
        }
        queues
    }
}

impl QueueConfig {
    fn resolve(&self, shared: &SqsConfig) -> SqsConfig {
        SqsConfig {
            queue_url: self.queue_url.clone(),
            region: self.region.clone().unwrap_or_else(|| shared.region.clone()),
            endpoint_url: self
                .endpoint_url
                .clone()
                .unwrap_or_else(|| shared.endpoint_url.clone()),
            pollers: self.pollers.unwrap_or(shared.pollers),
            ..shared.clone()
        }
    }
}

/// Tenant names end up in metric labels, URLs and log fields: kept plain.
pub fn validate_tenant_name(name: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a valid tenant name (1-64 letters, digits, `_` and `-`, starting with a letter or digit)",
            name.escape_debug()
        ))
    }
}

impl TenantConfig {
    fn validate(&self, name: &str, shared: &SqsConfig) -> Result<(), ConfigError> {
        let key = format!("tenants.{name}");
        validate_tenant_name(name)
            .map_err(|reason| ConfigError::Invalid(format!("{key}: {reason}")))?;
        for (index, queue) in self.queues.iter().enumerate() {
            queue
                .resolve(shared)
                .validate_as(&format!("{key}.queues[{index}]"))?;
        }
        const URL_HINT: &str = " (the URL itself never goes in this file)";
        if let Some(slack) = &self.slack {
            check_env_name(
                &format!("{key}.slack.webhook_url_env"),
                &slack.webhook_url_env,
                URL_HINT,
            )?;
        }
        for (index, webhook) in self.webhooks.iter().enumerate() {
            check_env_name(
                &format!("{key}.webhooks[{index}].url_env"),
                &webhook.url_env,
                URL_HINT,
            )?;
        }
        if let Some(runs) = self.max_concurrent_runs {
            check_range(&format!("{key}.max_concurrent_runs"), runs, 1, 256)?;
        }
        check_range(&format!("{key}.weight"), self.weight, 1, 100)?;
        self.defaults.validate(&format!("{key}.defaults"))
    }
}

impl TenantDefaults {
    /// Checks the keys set, each named under `key` (`tenants.x.defaults`, `tables[3]`).
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        for (field, value) in [
            ("small_file_mb", self.small_file_mb),
            ("min_files", self.min_files),
            ("min_total_mb", self.min_total_mb),
            ("target_file_mb", self.target_file_mb),
        ] {
            if let Some(value) = value {
                check_positive(&format!("{key}.{field}"), value)?;
            }
        }
        for (field, value) in [
            ("max_wait_minutes", self.max_wait_minutes),
            ("run_cost_seconds", self.run_cost_seconds),
            ("file_fix_value_seconds", self.file_fix_value_seconds),
            ("file_hour_cost_seconds", self.file_hour_cost_seconds),
            ("settle_seconds", self.settle_seconds),
            ("settle_max_seconds", self.settle_max_seconds),
            ("quiet_partition_minutes", self.quiet_partition_minutes),
            ("remerge_new_data_percent", self.remerge_new_data_percent),
            ("max_manifests", self.max_manifests),
            (
                "remove_orphans_every_hours",
                self.remove_orphans_every_hours,
            ),
        ] {
            if let Some(value) = value {
                check_not_negative(&format!("{key}.{field}"), value)?;
            }
        }
        if let Some(hours) = self.orphan_older_than_hours {
            check_orphan_age(&format!("{key}.orphan_older_than_hours"), hours)?;
        }
        if let Some(files) = self.delete_file_threshold {
            check_not_negative(&format!("{key}.delete_file_threshold"), files)?;
        }
        if let Some(suffixes) = &self.file_suffixes {
            check_suffixes(&format!("{key}.file_suffixes"), suffixes)?;
        }
        if let Some(strategy) = &self.strategy {
            check_strategy_name(&format!("{key}.strategy"), strategy)?;
        }
        Ok(())
    }
}

impl ServiceConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.state_dir.as_os_str().is_empty() {
            return invalid("service.state_dir: must not be empty");
        }
        check_range("service.run_history", self.run_history, 1, 10_000)?;
        if !self.http_listen.is_empty() && self.http_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return invalid(format!(
                "service.http_listen: expected an address such as 127.0.0.1:9464, got `{}`",
                self.http_listen
            ));
        }
        check_not_negative(
            "service.shutdown_timeout_seconds",
            self.shutdown_timeout_seconds,
        )?;
        if self.dedup_retention_days < 1 {
            return invalid(format!(
                "service.dedup_retention_days: must be at least 1, got {}",
                self.dedup_retention_days
            ));
        }
        if !(0..=MAX_WORKER_THREADS).contains(&self.worker_threads) {
            return invalid(format!(
                "service.worker_threads: must be 0 (one per core) to {MAX_WORKER_THREADS}, got {}",
                self.worker_threads
            ));
        }
        Ok(())
    }
}

impl SqsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as("sqs")
    }

    fn validate_as(&self, key: &str) -> Result<(), ConfigError> {
        if !is_http_url(&self.queue_url) || self.queue_url.chars().any(char::is_whitespace) {
            return invalid(format!(
                "{key}.queue_url: expected an http(s) queue URL, got `{}`",
                self.queue_url.escape_debug()
            ));
        }
        if self.region.trim().is_empty() {
            return invalid(format!("{key}.region: must not be empty"));
        }
        if !self.endpoint_url.is_empty() && !is_http_url(&self.endpoint_url) {
            return invalid(format!(
                "{key}.endpoint_url: expected an http(s) URL or nothing, got `{}`",
                self.endpoint_url.escape_debug()
            ));
        }
        check_range(
            &format!("{key}.wait_time_seconds"),
            self.wait_time_seconds,
            0,
            20,
        )?;
        check_range(&format!("{key}.max_messages"), self.max_messages, 1, 10)?;
        check_range(&format!("{key}.pollers"), self.pollers, 1, 64)?;
        check_range(
            &format!("{key}.visibility_timeout_seconds"),
            self.visibility_timeout_seconds,
            1,
            43_200,
        )?;
        Ok(())
    }
}

impl TableDefaults {
    fn validate(&self) -> Result<(), ConfigError> {
        check_positive("defaults.small_file_mb", self.small_file_mb)?;
        check_positive("defaults.min_files", self.min_files)?;
        check_positive("defaults.min_total_mb", self.min_total_mb)?;
        check_positive("defaults.target_file_mb", self.target_file_mb)?;
        check_not_negative("defaults.max_wait_minutes", self.max_wait_minutes)?;
        for (field, value) in [
            ("run_cost_seconds", self.run_cost_seconds),
            ("file_fix_value_seconds", self.file_fix_value_seconds),
            ("file_hour_cost_seconds", self.file_hour_cost_seconds),
            ("settle_seconds", self.settle_seconds),
            ("settle_max_seconds", self.settle_max_seconds),
            ("quiet_partition_minutes", self.quiet_partition_minutes),
            ("remerge_new_data_percent", self.remerge_new_data_percent),
            ("max_manifests", self.max_manifests),
            (
                "remove_orphans_every_hours",
                self.remove_orphans_every_hours,
            ),
        ] {
            check_not_negative(&format!("defaults.{field}"), value)?;
        }
        check_orphan_age(
            "defaults.orphan_older_than_hours",
            self.orphan_older_than_hours,
        )?;
        check_not_negative("defaults.delete_file_threshold", self.delete_file_threshold)?;
        if let Some(ratio) = self.delete_ratio_threshold {
            check_ratio("defaults.delete_ratio_threshold", ratio)?;
        }
        check_strategy_name("defaults.strategy", &self.strategy)?;
        check_suffixes("defaults.file_suffixes", &self.file_suffixes)
    }
}

impl TableConfig {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        validate_table_identifier(&self.table)
            .map_err(|reason| ConfigError::Invalid(format!("{key}.table: {reason}")))?;
        validate_bucket(&self.bucket)
            .map_err(|reason| ConfigError::Invalid(format!("{key}.bucket: {reason}")))?;
        if self.prefix.starts_with('/') {
            return invalid(format!(
                "{key}.prefix: S3 keys do not start with `/`, got `{}`",
                self.prefix
            ));
        }
        if self.prefix.split('/').any(|segment| segment == "..") {
            return invalid(format!(
                "{key}.prefix: must not contain `..` segments, got `{}`",
                self.prefix
            ));
        }
        TenantDefaults {
            small_file_mb: self.small_file_mb,
            min_files: self.min_files,
            min_total_mb: self.min_total_mb,
            target_file_mb: self.target_file_mb,
            max_wait_minutes: self.max_wait_minutes,
            file_suffixes: self.file_suffixes.clone(),
            pacing: self.pacing,
            run_cost_seconds: self.run_cost_seconds,
            file_fix_value_seconds: self.file_fix_value_seconds,
            file_hour_cost_seconds: self.file_hour_cost_seconds,
            settle_seconds: self.settle_seconds,
            settle_max_seconds: self.settle_max_seconds,
            quiet_partition_minutes: self.quiet_partition_minutes,
            remerge_new_data_percent: self.remerge_new_data_percent,
            strategy: self.strategy.clone(),
            max_manifests: self.max_manifests,
            remove_orphans_every_hours: self.remove_orphans_every_hours,
            orphan_older_than_hours: self.orphan_older_than_hours,
            delete_file_threshold: self.delete_file_threshold,
        }
        .validate(key)?;
        if let Some(ratio) = self.delete_ratio_threshold {
            check_ratio(&format!("{key}.delete_ratio_threshold"), ratio)?;
        }
        if let Some(retain) = self.expire_snapshots_retain_last {
            check_positive(&format!("{key}.expire_snapshots_retain_last"), retain)?;
        }
        for (option, value) in &self.options {
            let well_formed = !option.is_empty()
                && option.len() <= 128
                && option
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !well_formed {
                return invalid(format!(
                    "{key}.options: `{}` is not an option name of rewrite_data_files (lower case, digits, `-`, `.`)",
                    option.escape_debug()
                ));
            }
            if OWNED_REWRITE_OPTIONS.contains(&option.as_str()) {
                return invalid(format!(
                    "{key}.options.{option}: set by icepack from the table's own keys (target_file_mb, min_input_files, small_file_mb, partial_progress)"
                ));
            }
            if value.is_empty() || value.len() > 1024 || value.chars().any(char::is_control) {
                return invalid(format!(
                    "{key}.options.{option}: must be one line of 1 to 1024 characters"
                ));
            }
        }
        if let Some(files) = self.min_input_files {
            check_positive(&format!("{key}.min_input_files"), files)?;
        }
        if let Some(hours) = self.expire_snapshots_older_than_hours {
            check_positive(&format!("{key}.expire_snapshots_older_than_hours"), hours)?;
        }
        if let Some(hours) = self.reconcile_every_hours {
            check_positive(&format!("{key}.reconcile_every_hours"), hours)?;
        }
        if let Some(filter) = &self.where_filter {
            if filter.trim().is_empty()
                || filter.chars().any(char::is_control)
                || filter.len() > 4096
            {
                return invalid(format!(
                    "{key}.where: must be a one-line filter expression of at most 4096 characters"
                ));
            }
        }
        if let Some(catalog) = &self.catalog {
            if !crate::sql_text::is_safe_identifier(catalog) {
                return invalid(format!(
                    "{key}.catalog: `{}` is not a valid catalog name",
                    catalog.escape_debug()
                ));
            }
        }
        Ok(())
    }

    /// The table's pacing: its keys, else the tenant's, else `[defaults]`.
    fn pacing(&self, defaults: &TableDefaults, tenant: &TenantDefaults) -> crate::policy::Pacing {
        if !self.pacing.or(tenant.pacing).unwrap_or(defaults.pacing) {
            return crate::policy::Pacing::OFF;
        }
        let millis = |table: Option<i64>, tenant: Option<i64>, default: i64, unit: i64| {
            table.or(tenant).unwrap_or(default).saturating_mul(unit)
        };
        crate::policy::Pacing {
            run_cost_millis: millis(
                self.run_cost_seconds,
                tenant.run_cost_seconds,
                defaults.run_cost_seconds,
                1000,
            ) as u64,
            file_fix_value_millis: millis(
                self.file_fix_value_seconds,
                tenant.file_fix_value_seconds,
                defaults.file_fix_value_seconds,
                1000,
            ) as u64,
            file_hour_cost_millis: millis(
                self.file_hour_cost_seconds,
                tenant.file_hour_cost_seconds,
                defaults.file_hour_cost_seconds,
                1000,
            ) as u64,
            settle_millis: millis(
                self.settle_seconds,
                tenant.settle_seconds,
                defaults.settle_seconds,
                1000,
            ),
            settle_max_millis: millis(
                self.settle_max_seconds,
                tenant.settle_max_seconds,
                defaults.settle_max_seconds,
                1000,
            ),
            quiet_millis: millis(
                self.quiet_partition_minutes,
                tenant.quiet_partition_minutes,
                defaults.quiet_partition_minutes,
                60_000,
            ),
            remerge_percent: millis(
                self.remerge_new_data_percent,
                tenant.remerge_new_data_percent,
                defaults.remerge_new_data_percent,
                1,
            ) as u64,
        }
    }

    /// The table's strategy with its sort order: its key, else the tenant's, else `[defaults]`.
    fn strategy(
        &self,
        defaults: &TableDefaults,
        tenant: &TenantDefaults,
    ) -> Result<crate::strategy::Strategy, String> {
        let name = self
            .strategy
            .as_deref()
            .or(tenant.strategy.as_deref())
            .unwrap_or(&defaults.strategy);
        crate::strategy::Strategy::parse(name, self.sort_order.as_deref())
    }

    /// Applies the tenant's defaults, then `[defaults]`, to every key the table leaves out.
    fn resolve(
        &self,
        defaults: &TableDefaults,
        tenant: &TenantDefaults,
        tenant_name: &str,
    ) -> TableSpec {
        let mib = |value: i64| value as u64 * MIB;
        let max_wait_minutes = self
            .max_wait_minutes
            .or(tenant.max_wait_minutes)
            .unwrap_or(defaults.max_wait_minutes);
        let min_files = self
            .min_files
            .or(tenant.min_files)
            .unwrap_or(defaults.min_files);
        TableSpec {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            thresholds: Thresholds {
                small_file_bytes: mib(self
                    .small_file_mb
                    .or(tenant.small_file_mb)
                    .unwrap_or(defaults.small_file_mb)),
                min_files: min_files as u64,
                min_total_bytes: mib(self
                    .min_total_mb
                    .or(tenant.min_total_mb)
                    .unwrap_or(defaults.min_total_mb)),
                max_wait_millis: (max_wait_minutes > 0).then_some(max_wait_minutes * 60_000),
            },
            target_file_bytes: mib(self
                .target_file_mb
                .or(tenant.target_file_mb)
                .unwrap_or(defaults.target_file_mb)),
            file_suffixes: self
                .file_suffixes
                .clone()
                .or_else(|| tenant.file_suffixes.clone())
                .unwrap_or_else(|| defaults.file_suffixes.clone()),
            catalog: self
                .catalog
                .clone()
                .unwrap_or_else(|| DEFAULT_CATALOG.to_string()),
            min_input_files: self.min_input_files.unwrap_or(min_files) as u64,
            where_filter: self.where_filter.clone(),
            partial_progress: self.partial_progress.unwrap_or(false),
            expire_snapshots_older_than_hours: self
                .expire_snapshots_older_than_hours
                .map(|hours| hours as u64),
            reconcile_every_millis: self.reconcile_every_hours.map(|hours| hours * 3_600_000),
            tenant: tenant_name.to_string(),
            pacing: self.pacing(defaults, tenant),
            strategy: self
                .strategy(defaults, tenant)
                .expect("the strategy is validated with the configuration"),
            rewrite_options: self.options.clone(),
            max_manifests: on_when_positive(
                self.max_manifests,
                tenant.max_manifests,
                defaults.max_manifests,
            ),
            remove_orphans_every_millis: on_when_positive(
                self.remove_orphans_every_hours,
                tenant.remove_orphans_every_hours,
                defaults.remove_orphans_every_hours,
            )
            .map(|hours| hours as i64 * 3_600_000),
            orphan_older_than_hours: self
                .orphan_older_than_hours
                .or(tenant.orphan_older_than_hours)
                .unwrap_or(defaults.orphan_older_than_hours)
                as u64,
            expire_snapshots_retain_last: self
                .expire_snapshots_retain_last
                .map(|retain| retain as u64),
            run_history: default_run_history() as u64,
            deletes: DeleteThresholds {
                files: on_when_positive(
                    self.delete_file_threshold,
                    tenant.delete_file_threshold,
                    defaults.delete_file_threshold,
                ),
                ratio_ppm: self
                    .delete_ratio_threshold
                    .or(defaults.delete_ratio_threshold)
                    .map(|ratio| (ratio * 1_000_000.0).round() as u64),
            },
        }
    }
}

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

fn default_catalog_impl() -> String {
    "org.apache.iceberg.rest.RESTCatalog".to_string()
}

fn default_warehouse() -> String {
    "s3://lakehouse-data/warehouse".to_string()
}

fn default_io_impl() -> String {
    "org.apache.iceberg.aws.s3.S3FileIO".to_string()
}

fn default_catalogs() -> BTreeMap<String, CatalogConfig> {
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
    fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = format!("catalogs.{name}");
        if !crate::sql_text::is_safe_identifier(name) {
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
            if !crate::sql_text::is_safe_conf_key(property) {
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
    pub timeout_minutes: i64,
    /// Size of the executor pool: runs at the same time.
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: i64,
    /// Attempts within one run (the reference: 2, 15 s apart); only retryable failures are retried.
    #[serde(default = "default_retry_attempts")]
    pub retry_attempts: i64,
    #[serde(default = "default_retry_interval_seconds")]
    pub retry_interval_seconds: i64,
    /// After a failed run the table waits this long before the next, doubling up to the maximum.
    #[serde(default = "default_failure_backoff_initial_seconds")]
    pub failure_backoff_initial_seconds: i64,
    #[serde(default = "default_failure_backoff_max_seconds")]
    pub failure_backoff_max_seconds: i64,
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
    pub connect_timeout_seconds: i64,
}

fn default_connect_timeout_seconds() -> i64 {
    10
}

fn default_runner() -> SparkRunnerKind {
    SparkRunnerKind::Docker
}

fn default_image() -> String {
    "apache/spark:3.5.1".to_string()
}

fn default_spark_sql() -> String {
    "/opt/spark/bin/spark-sql".to_string()
}

fn default_packages() -> Vec<String> {
    [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.5.2",
        "org.apache.hadoop:hadoop-aws:3.3.4",
        "com.amazonaws:aws-java-sdk-bundle:1.12.262",
    ]
    .map(str::to_string)
    .to_vec()
}

fn default_env() -> Vec<String> {
    [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
    ]
    .map(str::to_string)
    .to_vec()
}

fn default_timeout_minutes() -> i64 {
    60
}

fn default_max_concurrent() -> i64 {
    2
}

fn default_retry_attempts() -> i64 {
    2
}

fn default_retry_interval_seconds() -> i64 {
    15
}

fn default_failure_backoff_initial_seconds() -> i64 {
    60
}

fn default_failure_backoff_max_seconds() -> i64 {
    3600
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
        }
    }
}

impl SparkConfig {
    fn validate(&self) -> Result<(), ConfigError> {
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
            if !crate::sql_text::is_safe_conf_key(key) {
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
        if !self.network.is_empty() && !crate::sql_text::is_safe_conf_key(&self.network) {
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
        check_positive("spark.timeout_minutes", self.timeout_minutes)?;
        check_range("spark.max_concurrent", self.max_concurrent, 1, 256)?;
        check_range("spark.retry_attempts", self.retry_attempts, 1, 10)?;
        check_not_negative("spark.retry_interval_seconds", self.retry_interval_seconds)?;
        check_positive(
            "spark.failure_backoff_initial_seconds",
            self.failure_backoff_initial_seconds,
        )?;
        if self.failure_backoff_max_seconds < self.failure_backoff_initial_seconds {
            return invalid(format!(
                "spark.failure_backoff_max_seconds: must be at least failure_backoff_initial_seconds ({}), got {}",
                self.failure_backoff_initial_seconds, self.failure_backoff_max_seconds
            ));
        }
        check_range(
            "spark.connect_timeout_seconds",
            self.connect_timeout_seconds,
            1,
            600,
        )?;
        if !self.connect_token_env.is_empty() {
            check_env_name("spark.connect_token_env", &self.connect_token_env, "")?;
        }
        if self.runner == SparkRunnerKind::Connect || !self.connect_url.is_empty() {
            crate::connect_endpoint::ConnectEndpoint::parse(&self.connect_url, self.connect_tls)
                .map_err(|error| ConfigError::Invalid(format!("spark.connect_url: {error}")))?;
        }
        Ok(())
    }
}

fn is_class_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                && !part.starts_with(|c: char| c.is_ascii_digit())
        })
}

/// `namespace.table`: two or more dot-separated parts of ASCII letters, digits and `_`, not starting
/// with a digit. Strict on purpose: the identifier ends up in SQL and in container labels.
pub fn validate_table_identifier(identifier: &str) -> Result<(), String> {
    let parts: Vec<&str> = identifier.split('.').collect();
    if parts.len() < 2 {
        return Err(format!(
            "expected `namespace.table`, got `{}`",
            identifier.escape_debug()
        ));
    }
    for part in parts {
        let valid = !part.is_empty()
            && part.len() <= 128
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!(
                "`{}` is not a valid identifier: each part of `namespace.table` is letters, digits and `_`, not starting with a digit",
                identifier.escape_debug()
            ));
        }
    }
    Ok(())
}

fn validate_bucket(bucket: &str) -> Result<(), String> {
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a valid S3 bucket name (3-63 lowercase letters, digits, `-` and `.`)",
            bucket.escape_debug()
        ))
    }
}

fn is_http_url(text: &str) -> bool {
    text.starts_with("https://") || text.starts_with("http://")
}

fn check_positive(key: &str, value: i64) -> Result<(), ConfigError> {
    if value <= 0 {
        return invalid(format!("{key}: must be greater than 0, got {value}"));
    }
    Ok(())
}

fn check_not_negative(key: &str, value: i64) -> Result<(), ConfigError> {
    if value < 0 {
        return invalid(format!("{key}: must be 0 or more, got {value}"));
    }
    Ok(())
}

fn check_range(key: &str, value: i64, low: i64, high: i64) -> Result<(), ConfigError> {
    if value < low || value > high {
        return invalid(format!(
            "{key}: must be between {low} and {high}, got {value}"
        ));
    }
    Ok(())
}

/// A key that is off at 0: the table's value, else the tenant's, else `[defaults]` (validated
/// not negative).
fn on_when_positive(table: Option<i64>, tenant: Option<i64>, default: i64) -> Option<u64> {
    Some(table.or(tenant).unwrap_or(default))
        .filter(|value| *value > 0)
        .map(|value| value as u64)
}

fn check_ratio(key: &str, ratio: f64) -> Result<(), ConfigError> {
    if ratio > 0.0 && ratio <= 1.0 {
        Ok(())
    } else {
        invalid(format!(
            "{key}: a share of the table's rows above 0 and at most 1 (Iceberg's default is 0.3), got {ratio}"
        ))
    }
}

fn check_orphan_age(key: &str, hours: i64) -> Result<(), ConfigError> {
    if hours >= MIN_ORPHAN_AGE_HOURS {
        Ok(())
    } else {
        invalid(format!(
            "{key}: at least {MIN_ORPHAN_AGE_HOURS} hours (a running writer's files are not orphans yet), got {hours}"
        ))
    }
}

fn check_strategy_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if crate::strategy::STRATEGY_NAMES.contains(&name) {
        Ok(())
    } else {
        invalid(format!(
            "{key}: must be one of {}, got `{}`",
            crate::strategy::STRATEGY_NAMES.join(", "),
            name.escape_debug()
        ))
    }
}

fn check_suffixes(key: &str, suffixes: &[String]) -> Result<(), ConfigError> {
    if suffixes.is_empty() || suffixes.iter().any(|suffix| suffix.is_empty()) {
        return invalid(format!("{key}: must list at least one non-empty suffix"));
    }
    Ok(())
}

fn invalid<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(message.into()))
}

/// `ICEPACK_SQS__QUEUE_URL=...` sets `sqs.queue_url`. Only variables with a `__` section separator
/// are configuration, so `ICEPACK_API_TOKEN` and friends stay out of it.
fn env_provider() -> Env {
    Env::prefixed("ICEPACK_")
        .filter(|key| key.as_str().contains("__"))
        .split("__")
}

fn describe_figment_error(error: figment::Error) -> ConfigError {
    let messages: Vec<String> = error
        .into_iter()
        .map(|error| {
            let key = error.path.join(".");
            let source = error
                .metadata
                .as_ref()
                .map(|metadata| format!(" (from {})", metadata.name))
                .unwrap_or_default();
            let key = if key.is_empty() {
                String::new()
            } else {
                format!("{key}: ")
            };
            format!("{key}{}{source}", error.kind)
        })
        .collect();
    ConfigError::Invalid(messages.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [service]
        state_dir = "data/state"

        [sqs]
        queue_url = "https://sqs.us-east-1.amazonaws.com/123456789012/s3-parquet-landing-queue"

        [[tables]]
        table = "analytics.customer_orders"
        bucket = "lakehouse-data"
        prefix = "warehouse/analytics/customer_orders/"

        [[tables]]
        table = "analytics.events"
        bucket = "lakehouse-data"
        prefix = "warehouse/analytics/events/"
        min_files = 3
        max_wait_minutes = 0
    "#;

    fn error_of(text: &str) -> String {
        Config::from_toml_str(text).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_the_reference_blueprint() {
        let config = Config::from_toml_str(EXAMPLE).unwrap();
        let specs = config.table_specs();
        let orders = &specs[0].thresholds;
        assert_eq!(orders.small_file_bytes, 64 * MIB);
        assert_eq!(orders.min_files, 10);
        assert_eq!(orders.min_total_bytes, 256 * MIB);
        assert_eq!(orders.max_wait_millis, Some(120 * 60_000));
        assert_eq!(specs[0].target_file_bytes, 512 * MIB);
        assert_eq!(specs[0].file_suffixes, vec![".parquet".to_string()]);
        assert_eq!(config.sqs.wait_time_seconds, 20);
        assert_eq!(config.sqs.max_messages, 10);
        assert_eq!(config.sqs.visibility_timeout_seconds, 300);
        assert_eq!(config.service.dedup_retention_days, 14);
    }

    #[test]
    fn strategies_resolve_table_then_tenant_then_defaults_and_bad_ones_are_named() {
        let table = |extra: &str| {
            format!("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n{extra}")
        };
        let spec = |text: &str| Config::from_toml_str(text).unwrap().table_specs().remove(0);
        assert_eq!(
            spec(&table("")).strategy,
            crate::strategy::Strategy::Binpack
        );
        assert_eq!(
            spec(&format!("[defaults]\nstrategy = \"auto\"\n{}", table(""))).strategy,
            crate::strategy::Strategy::Auto
        );
        let sorted = spec(&format!(
            "[defaults]\nstrategy = \"auto\"\n{}",
            table("strategy = \"sort\"\nsort_order = \"ts desc, id\"\noptions = { \"shuffle-partitions-per-file\" = \"4\" }\n")
        ));
        assert_eq!(
            sorted.strategy.for_run(None),
            Some(crate::strategy::RunStrategy::Sort(Some(
                "ts DESC, id".to_string()
            )))
        );
        assert_eq!(sorted.rewrite_options["shuffle-partitions-per-file"], "4");
        let tenant = spec(
            "[tenants.t]\n[tenants.t.defaults]\nstrategy = \"zorder\"\n[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\ntenant = \"t\"\nsort_order = \"zorder(x, y)\"\n",
        );
        assert_eq!(
            tenant.strategy,
            crate::strategy::Strategy::Zorder(vec!["x".to_string(), "y".to_string()])
        );
        for (text, named) in [
            (
                format!("[defaults]\nstrategy = \"fastest\"\n{}", table("")),
                "defaults.strategy",
            ),
            (table("strategy = \"Sort\"\n"), "tables[0].strategy"),
            (
                table("strategy = \"zorder\"\n"),
                "tables[0]: strategy = \"zorder\" needs sort_order",
            ),
            (table("sort_order = \"id\"\n"), "sort_order needs strategy"),
            (
                table("strategy = \"sort\"\nsort_order = \"id'); DROP TABLE x; --\"\n"),
                "tables[0]: sort_order",
            ),
            (
                table("options = { \"min-input-files\" = \"2\" }\n"),
                "tables[0].options.min-input-files: set by icepack",
            ),
            (
                table("options = { \"Rewrite All\" = \"true\" }\n"),
                "tables[0].options: `Rewrite All`",
            ),
            (
                table("options = { \"rewrite-all\" = \"\" }\n"),
                "tables[0].options.rewrite-all",
            ),
            (
                table("orphan_older_than_hours = 12\n"),
                "tables[0].orphan_older_than_hours: at least 24 hours",
            ),
            (
                format!("[defaults]\norphan_older_than_hours = 1\n{}", table("")),
                "defaults.orphan_older_than_hours",
            ),
            (
                table("remove_orphans_every_hours = -1\n"),
                "tables[0].remove_orphans_every_hours",
            ),
            (table("max_manifests = -3\n"), "tables[0].max_manifests"),
            (
                table("delete_ratio_threshold = 1.5\n"),
                "tables[0].delete_ratio_threshold",
            ),
            (
                table("expire_snapshots_retain_last = 0\n"),
                "tables[0].expire_snapshots_retain_last",
            ),
        ] {
            let message = error_of(&text);
            assert!(message.contains(named), "{named}: {message}");
        }
    }

    #[test]
    fn per_table_overrides_apply() {
        let specs = Config::from_toml_str(EXAMPLE).unwrap().table_specs();
        assert_eq!(specs[1].thresholds.min_files, 3);
        assert_eq!(specs[1].thresholds.max_wait_millis, None);
    }

    #[test]
    fn unknown_key_is_named() {
        let message = error_of("[sqs]\nqueue_urll = \"x\"\n");
        assert!(message.contains("queue_urll"), "{message}");
        let message = error_of(
            "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\ncolour = 1\n",
        );
        assert!(message.contains("colour"), "{message}");
        let message = error_of("[nonsense]\nx = 1\n");
        assert!(message.contains("nonsense"), "{message}");
    }

    #[test]
    fn missing_table_field_is_named() {
        let message = error_of("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\n");
        assert!(message.contains("prefix"), "{message}");
    }

    #[test]
    fn same_bucket_and_prefix_twice_is_rejected() {
        let message = error_of(
            "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n[[tables]]\ntable = \"a.c\"\nbucket = \"bkt\"\nprefix = \"p/\"\n",
        );
        assert!(message.contains("tables[1].prefix"), "{message}");
        assert!(
            message.contains("a.b") && message.contains("a.c"),
            "{message}"
        );
    }

    #[test]
    fn worker_threads_default_to_one_per_core_and_are_bounded() {
        assert_eq!(Config::from_toml_str("").unwrap().service.worker_threads, 0);
        let config = Config::from_toml_str(
            "[service]
worker_threads = 3
",
        )
        .unwrap();
        assert_eq!(config.service.worker_threads, 3);
        for wrong in ["-1", "1025"] {
            let message = error_of(&format!(
                "[service]
worker_threads = {wrong}
"
            ));
            assert!(message.contains("service.worker_threads"), "{message}");
        }
    }

    #[test]
    fn zero_and_negative_thresholds_are_rejected() {
        assert!(error_of("[defaults]\nmin_files = 0\n").contains("defaults.min_files"));
        assert!(error_of("[defaults]\nsmall_file_mb = -5\n").contains("defaults.small_file_mb"));
        assert!(
            error_of("[defaults]\nmax_wait_minutes = -1\n").contains("defaults.max_wait_minutes")
        );
        let message = error_of(
            "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\nmin_total_mb = 0\n",
        );
        assert!(message.contains("tables[0].min_total_mb"), "{message}");
    }

    #[test]
    fn malformed_table_identifiers_are_rejected() {
        for bad in [
            "orders", "a..b", "a.b;drop", "a.b'c", "1a.b", "a. b", "a.b-c", "",
        ] {
            let text =
                format!("[[tables]]\ntable = \"{bad}\"\nbucket = \"bkt\"\nprefix = \"p/\"\n");
            let message = error_of(&text);
            assert!(message.contains("tables[0].table"), "{bad}: {message}");
        }
        assert!(validate_table_identifier("db.schema.table_1").is_ok());
    }

    #[test]
    fn sqs_limits_are_checked() {
        assert!(error_of("[sqs]\nmax_messages = 11\n").contains("sqs.max_messages"));
        assert!(error_of("[sqs]\nwait_time_seconds = 21\n").contains("sqs.wait_time_seconds"));
        assert!(error_of("[sqs]\nqueue_url = \"my-queue\"\n").contains("sqs.queue_url"));
    }

    #[test]
    fn compaction_settings_have_the_reference_defaults() {
        let config = Config::from_toml_str(EXAMPLE).unwrap();
        let catalog = &config.catalogs["lakehouse"];
        assert_eq!(catalog.catalog_impl, "org.apache.iceberg.rest.RESTCatalog");
        assert_eq!(catalog.uri, "http://iceberg-rest:8181");
        assert_eq!(catalog.io_impl, "org.apache.iceberg.aws.s3.S3FileIO");
        assert_eq!(config.spark.runner, SparkRunnerKind::Docker);
        assert_eq!(config.spark.image, "apache/spark:3.5.1");
        assert_eq!(config.spark.packages.len(), 3);
        assert_eq!(
            (
                config.spark.retry_attempts,
                config.spark.retry_interval_seconds
            ),
            (2, 15)
        );
        let specs = config.table_specs();
        assert_eq!(specs[0].catalog, "lakehouse");
        assert_eq!(specs[0].min_input_files, 10);
        assert_eq!(
            specs[1].min_input_files, 3,
            "min_input_files follows the table's min_files"
        );
        assert!(!specs[0].partial_progress);
    }

    #[test]
    fn compaction_settings_are_validated() {
        let table = "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n";
        assert!(error_of(&format!("{table}catalog = \"other\"\n")).contains("tables[0].catalog"));
        assert!(error_of(&format!("{table}where = \"a = 1\\nb\"\n")).contains("tables[0].where"));
        assert!(
            error_of("[catalogs.lakehouse]\nimpl = \"x y\"\n").contains("catalogs.lakehouse.impl")
        );
        assert!(
            error_of("[catalogs.lakehouse]\nproperties = { \"a=b\" = \"c\" }\n")
                .contains("catalogs.lakehouse.properties")
        );
        assert!(error_of("[spark]\nrunner = \"ssh\"\n").contains("spark.runner"));
        assert!(error_of("[spark]\nmax_concurrent = 0\n").contains("spark.max_concurrent"));
        assert!(error_of("[spark]\npackages = [\"a:b\"]\n").contains("spark.packages"));
        assert!(error_of("[spark]\nconf = { \"x y\" = \"1\" }\n").contains("spark.conf"));
        assert!(error_of("[spark]\nenv = [\"lower\"]\n").contains("spark.env"));
        assert!(error_of("[spark]\nbinds = [\"relative:/x\"]\n").contains("spark.binds"));
        let ok = format!("[catalogs.other]\nimpl = \"org.apache.iceberg.jdbc.JdbcCatalog\"\nwarehouse = \"s3://b/w\"\n{table}catalog = \"other\"\nwhere = \"dt >= '2024-01-01'\"\n");
        let config = Config::from_toml_str(&ok).unwrap();
        assert!(
            !config.catalogs.contains_key("lakehouse"),
            "naming catalogs replaces the default one"
        );
        assert_eq!(
            config.table_specs()[0].where_filter.as_deref(),
            Some("dt >= '2024-01-01'")
        );
    }

    const TENANTS: &str = r##"
        [sqs]
        region = "eu-west-1"
        pollers = 3

        [tenants.analytics]
        weight = 3
        max_concurrent_runs = 1
        defaults = { min_files = 5, max_wait_minutes = 30 }
        slack = { webhook_url_env = "ANALYTICS_SLACK_URL", channel = "#analytics" }
        [[tenants.analytics.queues]]
        queue_url = "http://localhost:4566/000000000000/analytics-landing"
        pollers = 1

        [tenants.billing]
        [[tenants.billing.queues]]
        queue_url = "http://localhost:4566/000000000000/billing-landing"
        region = "us-east-2"

        [[tables]]
        table = "analytics.events"
        bucket = "analytics-lake"
        prefix = "events/"
        tenant = "analytics"
        min_files = 8

        [[tables]]
        table = "analytics.sessions"
        bucket = "analytics-lake"
        prefix = "sessions/"
        tenant = "analytics"

        [[tables]]
        table = "billing.invoices"
        bucket = "billing-lake"
        prefix = "invoices/"
        tenant = "billing"
    "##;

    #[test]
    fn without_tenants_there_is_one_implicit_tenant_on_the_shared_queue() {
        let config = Config::from_toml_str(EXAMPLE).unwrap();
        let tenants = config.tenant_specs();
        assert_eq!(tenants.len(), 1);
        assert_eq!(tenants[0].name, DEFAULT_TENANT);
        assert_eq!(tenants[0].max_concurrent_runs, 2, "the whole pool");
        assert!(config
            .table_specs()
            .iter()
            .all(|t| t.tenant == DEFAULT_TENANT));
        let queues = config.queues();
        assert_eq!(queues.len(), 1);
        assert_eq!(queues[0].tenant, None);
        assert_eq!(queues[0].sqs.queue_url, config.sqs.queue_url);
    }

    #[test]
    fn tenants_bring_their_queues_limits_and_defaults() {
        let config = Config::from_toml_str(TENANTS).unwrap();
        let tenants = config.tenant_specs();
        let names: Vec<&str> = tenants.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["analytics", "billing"]);
        assert_eq!((tenants[0].weight, tenants[0].max_concurrent_runs), (3, 1));
        assert_eq!((tenants[1].weight, tenants[1].max_concurrent_runs), (1, 2));
        assert_eq!(tenants[0].slack.as_ref().unwrap().channel, "#analytics");
        assert!(tenants[1].slack.is_none());

        let queues = config.queues();
        assert_eq!(
            queues.len(),
            2,
            "every tenant has its own: the shared queue is not polled"
        );
        assert_eq!(queues[0].tenant.as_deref(), Some("analytics"));
        assert_eq!(queues[0].sqs.pollers, 1);
        assert_eq!(queues[0].sqs.region, "eu-west-1", "from [sqs]");
        assert_eq!(queues[1].sqs.region, "us-east-2");
        assert_eq!(queues[1].sqs.pollers, 3, "from [sqs]");

        let specs = config.table_specs();
        assert_eq!(specs[0].tenant, "analytics");
        assert_eq!(
            specs[0].thresholds.min_files, 8,
            "the table's own value wins"
        );
        assert_eq!(
            specs[1].thresholds.min_files, 5,
            "then the tenant's default"
        );
        assert_eq!(specs[1].min_input_files, 5);
        assert_eq!(specs[1].thresholds.max_wait_millis, Some(30 * 60_000));
        assert_eq!(specs[2].thresholds.min_files, 10, "then [defaults]");
    }

    #[test]
    fn a_tenant_without_queues_is_fed_by_the_shared_queue() {
        let text = TENANTS.replace(
            "[[tenants.billing.queues]]\n        queue_url = \"http://localhost:4566/000000000000/billing-landing\"\n        region = \"us-east-2\"",
            "",
        );
        let config = Config::from_toml_str(&text).unwrap();
        let queues = config.queues();
        assert_eq!(queues.len(), 2);
        assert_eq!(queues[0].tenant, None);
    }

    #[test]
    fn tenant_mistakes_are_named() {
        let untenanted = TENANTS.replace("tenant = \"billing\"\n", "");
        assert!(error_of(&untenanted).contains("tables[2].tenant: required"));
        let unknown = TENANTS.replace("tenant = \"billing\"", "tenant = \"biling\"");
        assert!(error_of(&unknown).contains("no [tenants.biling] section"));
        assert!(error_of(&format!("{TENANTS}\n[tenants.\"bad name\"]\n"))
            .contains("not a valid tenant name"));
        assert!(error_of(&TENANTS.replace("weight = 3", "weight = 0"))
            .contains("tenants.analytics.weight"));
        assert!(
            error_of(&TENANTS.replace("max_concurrent_runs = 1", "max_concurrent_runs = 0"))
                .contains("tenants.analytics.max_concurrent_runs")
        );
        assert!(error_of(&TENANTS.replace("min_files = 5", "min_files = 0"))
            .contains("tenants.analytics.defaults.min_files"));
        assert!(error_of(
            &TENANTS.replace("\"ANALYTICS_SLACK_URL\"", "\"https://hooks.slack.com/x\"")
        )
        .contains("tenants.analytics.slack.webhook_url_env"));
        let same_queue = TENANTS.replace("billing-landing", "analytics-landing");
        let message = error_of(&same_queue);
        assert!(
            message.contains("also configured for analytics"),
            "{message}"
        );
        let bad_queue = TENANTS.replace(
            "http://localhost:4566/000000000000/billing-landing",
            "billing",
        );
        assert!(error_of(&bad_queue).contains("tenants.billing.queues[0].queue_url"));
        let lonely = EXAMPLE.replace("min_files = 3", "min_files = 3\ntenant = \"x\"");
        assert!(error_of(&lonely).contains("tables[1].tenant: no [tenants.x]"));
    }

    #[test]
    fn wrong_type_names_the_key() {
        let message = error_of("[defaults]\nmin_files = \"ten\"\n");
        assert!(message.contains("defaults.min_files"), "{message}");
    }
}
