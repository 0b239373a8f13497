//! Configuration: built-in defaults < TOML file < `ICEPACK_<SECTION>__<KEY>` environment variables.
//!
//! Unknown keys are errors, and every error names the key it is about. AWS credentials never come
//! from here: the standard AWS provider chain supplies them.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::model::policy::{PacingMode, Thresholds};

pub mod connect_endpoint;
mod metrics;
mod native;
mod notify;
mod pacing;
mod service;
mod spark;
mod tables;
mod tenants;
mod values;

pub use metrics::*;
pub use native::*;
pub use notify::*;
pub use pacing::*;
pub use service::*;
pub use spark::*;
pub use tables::*;
pub use tenants::*;
pub use values::*;

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
    /// Settings of every table, under its tenant's and its own.
    #[serde(default)]
    pub defaults: TableSettings,
    #[serde(default)]
    pub tables: Vec<TableConfig>,
    /// Iceberg catalogs by Spark catalog name; tables name theirs (`lakehouse` by default).
    #[serde(default = "default_catalogs")]
    pub catalogs: BTreeMap<String, CatalogConfig>,
    #[serde(default)]
    pub spark: SparkConfig,
    /// The JVM-free engine's bounds (tables choose it with `engine`).
    #[serde(default)]
    pub native: NativeConfig,
    /// Which tables have series of their own on `/metrics` (tenants' always).
    #[serde(default)]
    pub metrics: MetricsConfig,
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

impl Default for Config {
    fn default() -> Self {
        Config {
            service: ServiceConfig::default(),
            sqs: SqsConfig::default(),
            defaults: TableSettings::default(),
            tables: Vec::new(),
            catalogs: default_catalogs(),
            spark: SparkConfig::default(),
            native: NativeConfig::default(),
            metrics: MetricsConfig::default(),
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
        self.defaults.validate("defaults")?;
        for (name, catalog) in &self.catalogs {
            catalog.validate(name)?;
        }
        self.spark.validate()?;
        self.metrics.validate(&self.tables)?;
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
            let no_overrides = TableSettings::default();
            let tenant_defaults = table
                .tenant
                .as_ref()
                .and_then(|tenant| self.tenants.get(tenant))
                .map_or(&no_overrides, |tenant| &tenant.defaults);
            let settings = table.merged(&self.defaults, tenant_defaults);
            table
                .strategy(&settings)
                .map_err(|reason| ConfigError::Invalid(format!("{key}: {reason}")))?;
            let pacing = settings.pacing.unwrap_or_default();
            let max_wait = settings
                .max_wait_minutes
                .unwrap_or_else(default_max_wait_minutes);
            if pacing == PacingMode::Cost && max_wait.get() == 0 {
                return invalid(format!(
                    "{key}.pacing: \"cost\" waits for a run to be worth its cost, never past max_wait_minutes, which is 0 (off) for this table: set max_wait_minutes, or use pacing \"settle\""
                ));
            }
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

    /// What a running service keeps of its configuration: all but the list of tables, whose
    /// resolved specs the table map holds once the pipeline has them. The parsed list is most of
    /// a large configuration (about 0.9 KiB a table: 90 MB at 100,000 tables), so the engines,
    /// the pool and the control loop keep this and not the file's whole parse.
    pub fn without_tables(&self) -> Config {
        // Every field by name: a new one must be decided on here.
        let Config {
            service,
            sqs,
            defaults,
            tables: _,
            catalogs,
            spark,
            native,
            metrics,
            slack,
            webhooks,
            tenants,
        } = self;
        Config {
            service: service.clone(),
            sqs: sqs.clone(),
            defaults: defaults.clone(),
            tables: Vec::new(),
            catalogs: catalogs.clone(),
            spark: spark.clone(),
            native: native.clone(),
            metrics: metrics.clone(),
            slack: slack.clone(),
            webhooks: webhooks.clone(),
            tenants: tenants.clone(),
        }
    }

    /// Every configured table with the defaults applied, in configuration order.
    pub fn table_specs(&self) -> Vec<TableSpec> {
        let no_overrides = TableSettings::default();
        self.tables
            .iter()
            .map(|table| {
                let tenant = table.tenant.as_deref().unwrap_or(DEFAULT_TENANT);
                let overrides = self
                    .tenants
                    .get(tenant)
                    .map_or(&no_overrides, |tenant| &tenant.defaults);
                let mut spec = table.resolve(&self.defaults, overrides, tenant);
                spec.run_history = self.service.run_history.get();
                spec.pacing.estimated_run_cost_millis =
                    self.estimated_run_cost_seconds(&spec) * 1000;
                spec
            })
            .collect()
    }

    /// What a run of the table costs before one is measured (the cost pacing's estimate): a
    /// warm engine's when its rewrites go to the native engine (in icepack's process, no JVM to
    /// start), else the Spark runner's. (`auto` is judged by the table's keys; its catalog may
    /// still send its runs to Spark, whose cost the first measured run then brings.)
    fn estimated_run_cost_seconds(&self, spec: &TableSpec) -> u64 {
        let native = match spec.engine {
            EngineChoice::Native => true,
            EngineChoice::Auto => {
                matches!(spec.strategy, crate::model::strategy::Strategy::Binpack)
                    && spec.where_filter.is_none()
                    && spec.rewrite_options.is_empty()
                    && spec.expire_snapshots_older_than_hours.is_none()
            }
            EngineChoice::Spark => false,
        };
        if native {
            WARM_RUN_COST_SECONDS
        } else {
            self.spark.runner.run_cost_seconds()
        }
    }

    /// Every tenant with its settings resolved; the implicit [`DEFAULT_TENANT`] when none are
    /// configured.
    pub fn tenant_specs(&self) -> Vec<TenantSpec> {
        let pool_size = self.spark.max_concurrent.as_usize();
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
                max_concurrent_runs: tenant.max_concurrent_runs.map_or(pool_size, Int::as_usize),
                weight: tenant.weight.as_u32(),
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

fn is_http_url(text: &str) -> bool {
    text.starts_with("https://") || text.starts_with("http://")
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
            let key = key_of(&error.path);
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
            // A secret setting's value is not repeated (figment's message quotes what it found).
            let kind = if crate::base::redact::is_secret_name(&key) {
                match &error.kind {
                    figment::error::Kind::InvalidType(_, expected)
                    | figment::error::Kind::InvalidValue(_, expected) => {
                        format!("invalid value, expected {expected}")
                    }
                    figment::error::Kind::Message(_) => "invalid value".to_string(),
                    other => other.to_string(),
                }
            } else {
                crate::base::redact::hide_secrets(&error.kind.to_string())
            };
            format!("{key}{kind}{source}")
        })
        .collect();
    ConfigError::Invalid(messages.join("; "))
}

/// A figment path as the validation names keys: `tables[0].min_files`, not `tables.0.min_files`.
fn key_of(path: &[String]) -> String {
    let mut key = String::new();
    for segment in path {
        if segment.parse::<usize>().is_ok() {
            key.push_str(&format!("[{segment}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}

#[cfg(test)]
mod tests;
