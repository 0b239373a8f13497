//! What the executor pool takes from the configuration for its runs: how many at once, their
//! attempts, deadline and back-off, and the configuration the engines prepare them from (a reload
//! replaces it, [`crate::engine::Engine::reconfigure`]).

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, SparkConfig};
use crate::table::accumulator::FailureBackoff;

/// Longest panic message kept in a run's failure.
const PANIC_MESSAGE_CHARS: usize = 300;

/// A caught panic's message, shortened.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|message| message.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    message.chars().take(PANIC_MESSAGE_CHARS).collect()
}

/// Everything the executor pool needs from the configuration.
#[derive(Debug, Clone)]
pub struct CompactionSettings {
    pub config: Arc<Config>,
    pub max_concurrent: usize,
    pub attempts: u32,
    pub retry_interval: Duration,
    pub timeout: Duration,
    pub backoff: FailureBackoff,
}

impl CompactionSettings {
    /// The settings of `config`; they keep all of it but its list of tables
    /// ([`Config::without_tables`]): runs read their table's spec from the table map.
    pub fn from_config(config: Arc<Config>) -> Self {
        let config = Arc::new(config.without_tables());
        let spark = &config.spark;
        CompactionSettings {
            max_concurrent: spark.max_concurrent.as_usize(),
            attempts: spark.retry_attempts.as_u32(),
            retry_interval: spark.retry_interval_seconds.seconds(),
            timeout: Duration::from_secs(spark.timeout_minutes.get() * 60),
            backoff: failure_backoff(spark),
            config,
        }
    }
}

/// How long a table waits after failed runs, growing from the first failure to the cap.
pub fn failure_backoff(spark: &SparkConfig) -> FailureBackoff {
    FailureBackoff {
        initial_millis: spark.failure_backoff_initial_seconds.millis(1000),
        max_millis: spark.failure_backoff_max_seconds.millis(1000),
    }
}
