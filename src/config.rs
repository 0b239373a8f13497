//! Configuration: built-in defaults < TOML file < `ICEPACK_<SECTION>__<KEY>` environment variables.
//!
//! Unknown keys are errors, and every error names the key it is about. AWS credentials never come
//! from here: the standard AWS provider chain supplies them.

use std::collections::HashSet;
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
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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

impl Default for TableDefaults {
    fn default() -> Self {
        TableDefaults {
            small_file_mb: default_small_file_mb(),
            min_files: default_min_files(),
            min_total_mb: default_min_total_mb(),
            target_file_mb: default_target_file_mb(),
            max_wait_minutes: default_max_wait_minutes(),
            file_suffixes: default_file_suffixes(),
        }
    }
}

/// One `[[tables]]` entry: where a table's files land, and its threshold overrides.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
        let mut seen_names = HashSet::new();
        let mut seen_locations = std::collections::HashMap::new();
        for (index, table) in self.tables.iter().enumerate() {
            let key = format!("tables[{index}]");
            table.validate(&key)?;
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
        self.tables
            .iter()
            .map(|table| table.resolve(&self.defaults))
            .collect()
    }
}

impl ServiceConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.state_dir.as_os_str().is_empty() {
            return invalid("service.state_dir: must not be empty");
        }
        if self.dedup_retention_days < 1 {
            return invalid(format!(
                "service.dedup_retention_days: must be at least 1, got {}",
                self.dedup_retention_days
            ));
        }
        Ok(())
    }
}

impl SqsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if !is_http_url(&self.queue_url) {
            return invalid(format!(
                "sqs.queue_url: expected an http(s) queue URL, got `{}`",
                self.queue_url
            ));
        }
        if self.region.trim().is_empty() {
            return invalid("sqs.region: must not be empty");
        }
        if !self.endpoint_url.is_empty() && !is_http_url(&self.endpoint_url) {
            return invalid(format!(
                "sqs.endpoint_url: expected an http(s) URL or nothing, got `{}`",
                self.endpoint_url
            ));
        }
        check_range("sqs.wait_time_seconds", self.wait_time_seconds, 0, 20)?;
        check_range("sqs.max_messages", self.max_messages, 1, 10)?;
        check_range(
            "sqs.visibility_timeout_seconds",
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
        let optional = [
            ("small_file_mb", self.small_file_mb),
            ("min_files", self.min_files),
            ("min_total_mb", self.min_total_mb),
            ("target_file_mb", self.target_file_mb),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                check_positive(&format!("{key}.{name}"), value)?;
            }
        }
        if let Some(minutes) = self.max_wait_minutes {
            check_not_negative(&format!("{key}.max_wait_minutes"), minutes)?;
        }
        if let Some(suffixes) = &self.file_suffixes {
            check_suffixes(&format!("{key}.file_suffixes"), suffixes)?;
        }
        Ok(())
    }

    fn resolve(&self, defaults: &TableDefaults) -> TableSpec {
        let mib = |value: i64| value as u64 * MIB;
        let max_wait_minutes = self.max_wait_minutes.unwrap_or(defaults.max_wait_minutes);
        TableSpec {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            thresholds: Thresholds {
                small_file_bytes: mib(self.small_file_mb.unwrap_or(defaults.small_file_mb)),
                min_files: self.min_files.unwrap_or(defaults.min_files) as u64,
                min_total_bytes: mib(self.min_total_mb.unwrap_or(defaults.min_total_mb)),
                max_wait_millis: (max_wait_minutes > 0).then_some(max_wait_minutes * 60_000),
            },
            target_file_bytes: mib(self.target_file_mb.unwrap_or(defaults.target_file_mb)),
            file_suffixes: self
                .file_suffixes
                .clone()
                .unwrap_or_else(|| defaults.file_suffixes.clone()),
        }
    }
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
    fn wrong_type_names_the_key() {
        let message = error_of("[defaults]\nmin_files = \"ten\"\n");
        assert!(message.contains("defaults.min_files"), "{message}");
    }
}
