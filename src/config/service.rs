//! `[service]` and `[sqs]`: the process and the queues it polls.

use super::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// RocksDB directory holding every table's durable state.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// How long an object key is remembered to recognise redelivered events. At least the queue's
    /// message retention (14 days at most on SQS).
    #[serde(default = "default_dedup_retention_days")]
    pub dedup_retention_days: Int<1, 3_650>,
    /// Metrics, health and the status API; loopback unless set otherwise. Empty disables it.
    #[serde(default = "default_http_listen")]
    pub http_listen: String,
    /// On SIGTERM, how long runs in flight may go on before icepack exits (they are recovered at
    /// the next start), and how long notifications may take to go out.
    #[serde(default = "default_shutdown_timeout_seconds")]
    pub shutdown_timeout_seconds: DaySeconds,
    /// Threads the table accumulators run on (table `i` on thread `i % n`); 0: one per core.
    /// More than 1,024 is a typo, not a machine.
    #[serde(default = "default_worker_threads")]
    pub worker_threads: Int<0, 1_024>,
    /// Runs kept per table in its durable history (`GET /v1/tables/{table}/runs`).
    #[serde(default = "default_run_history")]
    pub run_history: Int<1, 10_000>,
    /// A table with nothing pending, claimed or due for this long keeps no live accumulator: its
    /// state stays in the store and its summary on the board, and its next event, API call or
    /// scheduled work starts it again. 0: every table's accumulator runs for the life of the
    /// process.
    #[serde(default = "default_idle_table_seconds")]
    pub idle_table_seconds: DaySeconds,
}

pub(super) fn default_worker_threads() -> Int<0, 1_024> {
    Int::new(0)
}

pub(super) fn default_idle_table_seconds() -> DaySeconds {
    Int::new(300)
}

pub(super) fn default_run_history() -> Int<1, 10_000> {
    Int::new(50)
}

pub(super) fn default_http_listen() -> String {
    "127.0.0.1:9464".to_string()
}

pub(super) fn default_shutdown_timeout_seconds() -> DaySeconds {
    Int::new(30)
}

pub(super) fn default_state_dir() -> PathBuf {
    PathBuf::from("data/state")
}

pub(super) fn default_dedup_retention_days() -> Int<1, 3_650> {
    Int::new(14)
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
            idle_table_seconds: default_idle_table_seconds(),
        }
    }
}

/// SQS's own limits: a long poll of at most 20 s, at most 10 messages a receive, a visibility
/// timeout of at most 12 hours.
pub type SqsWaitSeconds = Int<0, 20>;
pub type SqsBatch = Int<1, 10>;
pub type SqsVisibilitySeconds = Int<1, 43_200>;
/// Receive loops on one queue.
pub type Pollers = Int<1, 64>;

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
    pub wait_time_seconds: SqsWaitSeconds,
    #[serde(default = "default_max_messages")]
    pub max_messages: SqsBatch,
    #[serde(default = "default_visibility_timeout_seconds")]
    pub visibility_timeout_seconds: SqsVisibilitySeconds,
    /// Concurrent receive loops on the queue; their batches share each state commit.
    #[serde(default = "default_pollers")]
    pub pollers: Pollers,
}

pub(super) fn default_pollers() -> Pollers {
    Int::new(2)
}

pub(super) fn default_queue_url() -> String {
    "https://sqs.us-east-1.amazonaws.com/123456789012/s3-parquet-landing-queue".to_string()
}

pub(super) fn default_region() -> String {
    "us-east-1".to_string()
}

pub(super) fn default_wait_time_seconds() -> SqsWaitSeconds {
    Int::new(20)
}

pub(super) fn default_max_messages() -> SqsBatch {
    Int::new(10)
}

pub(super) fn default_visibility_timeout_seconds() -> SqsVisibilitySeconds {
    Int::new(300)
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

impl ServiceConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.state_dir.as_os_str().is_empty() {
            return invalid("service.state_dir: must not be empty");
        }
        if !self.http_listen.is_empty() && self.http_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return invalid(format!(
                "service.http_listen: expected an address such as 127.0.0.1:9464, got `{}`",
                self.http_listen
            ));
        }
        Ok(())
    }
}

impl SqsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as("sqs")
    }

    pub(super) fn validate_as(&self, key: &str) -> Result<(), ConfigError> {
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
        Ok(())
    }
}
