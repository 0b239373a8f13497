//! From a claimed table to a Spark job: the statements, the command line, the environment passed
//! through, the deadline, and the runner chosen by configuration.

use std::sync::Arc;
use std::time::Duration;

use crate::accumulator::{ClaimTicket, FailureBackoff};
use crate::config::{Config, SparkConfig, SparkRunnerKind, TableSpec};
use crate::partitions::partition_filters;
use crate::spark::command::{spark_conf, spark_sql_options};
use crate::spark::connect::{self, ConnectRunner};
use crate::spark::docker::{DockerRunner, DockerSettings};
use crate::spark::process::ProcessRunner;
pub use crate::spark::runner::instance_id;
use crate::spark::runner::{SparkJob, SparkRunner};
use crate::spark::sql::CompactionSql;

/// Why a claimed run's job cannot be prepared: the run fails as `invalid_input`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("the table's catalog `{0}` is not configured")]
    UnknownCatalog(String),
    #[error("preparing the run failed unexpectedly: {0}")]
    Panicked(String),
}

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
    pub fn from_config(config: Arc<Config>) -> Self {
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

    /// The job of a claimed run, or why there is none. What a claim carries came from object
    /// keys (its partitions) and the engine's output (its spec): the job is built totally, and a
    /// panic while building it — a bug — is caught here and refuses this one run instead of
    /// stopping the executor pool with it.
    pub fn prepare(
        &self,
        spec: &TableSpec,
        ticket: &ClaimTicket,
    ) -> Result<SparkJob, PrepareError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.job(spec, ticket)))
            .unwrap_or_else(|panic| Err(PrepareError::Panicked(panic_message(panic.as_ref()))))
    }

    /// The job that compacts a claimed table.
    fn job(&self, spec: &TableSpec, ticket: &ClaimTicket) -> Result<SparkJob, PrepareError> {
        if crate::failpoint::prepare_panics(&spec.table) {
            panic!(
                "failpoint executor.prepare_panic: preparing {} panicked",
                spec.table
            );
        }
        let catalog = self
            .config
            .catalogs
            .get(&spec.catalog)
            .ok_or_else(|| PrepareError::UnknownCatalog(spec.catalog.clone()))?;
        let (joins_mid_sized, partition_filter, joining_filter) = rewrite_filters(ticket);
        let sql = CompactionSql {
            catalog: spec.catalog.clone(),
            table: spec.table.clone(),
            target_file_bytes: spec.target_file_bytes,
            min_file_size_bytes: spec.rewrite_floor_bytes(joins_mid_sized),
            min_input_files: if ticket.min_input_files > 0 {
                ticket.min_input_files
            } else {
                spec.min_input_files
            },
            partial_progress: spec.partial_progress,
            where_filter: spec.where_filter.clone(),
            expire_snapshots_older_than_hours: spec.expire_snapshots_older_than_hours,
            run_started_millis: ticket.started_millis,
            small_file_bytes: spec.thresholds.small_file_bytes,
            partition_filter,
            joining_filter,
            rewrite: ticket.rewrite,
            committed_since_millis: crate::accumulator::committed_since_millis(
                ticket.started_millis,
            ),
            strategy: ticket.strategy.clone(),
            extra_options: spec.rewrite_options.clone(),
            maintenance: ticket.maintenance,
            orphan_older_than_hours: spec.orphan_older_than_hours,
            expire_snapshots_retain_last: spec.expire_snapshots_retain_last,
            apply_deletes: ticket.apply_deletes.then_some(spec.deletes.ratio_ppm),
        };
        Ok(SparkJob {
            run_id: ticket.run_id.clone(),
            table: spec.table.clone(),
            catalog: spec.catalog.clone(),
            statements: sql.statement_list(),
            conf: spark_conf(&self.config.spark, &spec.catalog, catalog),
            options: spark_sql_options(&self.config.spark),
            recovery: sql.recovery_statement_list(),
            env: passed_through_env(&self.config.spark),
            timeout: self.timeout,
        })
    }
}

/// Whether the (first) rewrite lets mid-sized files join, the partitions it is limited to, and
/// those a second rewrite with Iceberg's default floor takes: when only some of the run's
/// partitions have gone quiet, their mid-sized files join and the others' are not read again.
/// One rewrite when all or none join, or when the partitions cannot be named in a filter.
fn rewrite_filters(ticket: &ClaimTicket) -> (bool, Option<String>, Option<String>) {
    let filter = |partitions: &[String]| {
        ticket
            .spec
            .as_deref()
            .and_then(|spec| partition_filters(spec, partitions, usize::MAX))
            .map(|filters| filters.join(" OR "))
    };
    let whole = filter(&ticket.partitions);
    if !ticket.joins_mid_sized || ticket.joining_partitions.is_empty() {
        return (ticket.joins_mid_sized, whole, None);
    }
    let (joining, staying): (Vec<String>, Vec<String>) = ticket
        .partitions
        .iter()
        .cloned()
        .partition(|partition| ticket.joining_partitions.contains(partition));
    if staying.is_empty() || joining.is_empty() {
        return (true, whole, None);
    }
    match (filter(&staying), filter(&joining)) {
        (Some(staying), Some(joining)) => (false, Some(staying), Some(joining)),
        _ => (true, whole, None),
    }
}

pub fn failure_backoff(spark: &SparkConfig) -> FailureBackoff {
    FailureBackoff {
        initial_millis: spark.failure_backoff_initial_seconds.millis(1000),
        max_millis: spark.failure_backoff_max_seconds.millis(1000),
    }
}

/// The configured variables that are set here, by name; values go to the engine only.
fn passed_through_env(spark: &SparkConfig) -> Vec<(String, String)> {
    spark
        .env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect()
}

/// The runner the configuration asks for.
pub fn runner_from_config(config: &Config) -> Arc<dyn SparkRunner> {
    let spark = &config.spark;
    match spark.runner {
        SparkRunnerKind::Connect => {
            let token = (!spark.connect_token_env.is_empty())
                .then(|| std::env::var(&spark.connect_token_env).ok())
                .flatten();
            let settings = connect::settings(
                &spark.connect_url,
                spark.connect_tls,
                token,
                spark.connect_timeout_seconds.seconds(),
            )
            .expect("spark.connect_url is validated with the configuration");
            Arc::new(ConnectRunner::new(settings))
        }
        SparkRunnerKind::Docker => Arc::new(DockerRunner::new(DockerSettings {
            image: spark.image.clone(),
            spark_sql: spark.spark_sql.clone(),
            network: spark.network.clone(),
            binds: spark.binds.clone(),
            state_dir: config.service.state_dir.clone(),
        })),
        SparkRunnerKind::Process => Arc::new(ProcessRunner::new(spark.spark_sql.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_names_its_table_catalog_and_options() {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"a.orders\"\nbucket = \"lake\"\nprefix = \"w/\"\nmin_input_files = 4\n[spark]\nenv = [\"ICEPACK_TEST_UNSET_VARIABLE\"]\n",
        )
        .unwrap();
        let spec = config.table_specs().remove(0);
        let settings = CompactionSettings::from_config(Arc::new(config));
        let ticket = ClaimTicket {
            run_id: "r1".to_string(),
            trigger: "files".to_string(),
            started_millis: 1_714_564_800_000,
            files: 4,
            bytes: 4,
            partitions: Vec::new(),
            min_input_files: 4,
            spec: None,
            rewrite: true,
            joins_mid_sized: false,
            joining_partitions: Vec::new(),
            strategy: crate::strategy::RunStrategy::Binpack,
            maintenance: None,
            apply_deletes: false,
        };
        let job = settings.prepare(&spec, &ticket).unwrap();
        let statements = job.statements.join(";\n");
        assert!(statements.contains("CALL lakehouse.system.rewrite_data_files(table => 'a.orders'"));
        assert!(statements.contains("'min-input-files', '4'"));
        // Only small files are rewritten (64 MiB by default), unless a partition went quiet.
        assert!(
            statements.contains("'min-file-size-bytes', '67108864'"),
            "{statements}"
        );
        let quiet = settings
            .prepare(
                &spec,
                &ClaimTicket {
                    joins_mid_sized: true,
                    ..ticket.clone()
                },
            )
            .unwrap();
        assert!(!quiet.statements.join(";").contains("min-file-size-bytes"));
        // Of two partitions, one quiet: its mid-sized files join in a rewrite of its own, the
        // other's are not read again.
        let day = |day: &str| format!("d={day}");
        let partitioned = ClaimTicket {
            partitions: vec![day("2024-05-01"), day("2024-05-02")],
            spec: Some(vec![crate::partitions::PartitionField {
                name: "d".to_string(),
                source: "d".to_string(),
                transform: crate::partitions::Transform::Identity,
                source_type: Some("date".to_string()),
            }]),
            joins_mid_sized: true,
            joining_partitions: vec![day("2024-05-01")],
            ..ticket.clone()
        };
        let rewrites: Vec<String> = settings
            .prepare(&spec, &partitioned)
            .unwrap()
            .statements
            .into_iter()
            .filter(|statement| statement.contains("rewrite_data_files"))
            .collect();
        assert_eq!(rewrites.len(), 2, "{rewrites:?}");
        let (open, closed) = (&rewrites[0], &rewrites[1]);
        assert!(open.contains("'min-file-size-bytes', '67108864'"), "{open}");
        assert!(
            open.contains("2024-05-02") && !open.contains("2024-05-01"),
            "{open}"
        );
        assert!(!closed.contains("min-file-size-bytes"), "{closed}");
        assert!(
            closed.contains("2024-05-01") && !closed.contains("2024-05-02"),
            "{closed}"
        );
        // All of them quiet (or the partitions not known): one rewrite, mid-sized files joining.
        for ticket in [
            ClaimTicket {
                joining_partitions: partitioned.partitions.clone(),
                ..partitioned.clone()
            },
            ClaimTicket {
                spec: None,
                ..partitioned.clone()
            },
        ] {
            let statements = settings
                .prepare(&spec, &ticket)
                .unwrap()
                .statements
                .join(";");
            assert_eq!(statements.matches("rewrite_data_files").count(), 1);
            assert!(!statements.contains("min-file-size-bytes"), "{statements}");
        }
        let committed = job
            .statements
            .iter()
            .find(|statement| statement.contains("icepack_committed_file"))
            .unwrap();
        assert!(
            committed.ends_with("committed_at >= TIMESTAMP '2024-05-01 11:40:00.000')"),
            "committed files reported from the grace before the claim, less the clock margin: {committed}"
        );
        assert!(job.env.is_empty(), "unset variables are not passed");
        assert_eq!(job.timeout, Duration::from_secs(3600));
    }

    /// A claim naming a catalog the configuration does not have (a reload removed it) is
    /// refused, not a panic of the pool.
    #[test]
    fn a_claim_that_cannot_be_prepared_is_refused() {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"a.orders\"\nbucket = \"lake\"\nprefix = \"w/\"\n",
        )
        .unwrap();
        let mut spec = config.table_specs().remove(0);
        spec.catalog = "gone".to_string();
        let settings = CompactionSettings::from_config(Arc::new(config));
        let ticket = ClaimTicket {
            run_id: "r1".to_string(),
            trigger: "files".to_string(),
            started_millis: 1_714_564_800_000,
            files: 2,
            bytes: 2,
            partitions: Vec::new(),
            min_input_files: 2,
            spec: None,
            rewrite: true,
            joins_mid_sized: false,
            joining_partitions: Vec::new(),
            strategy: crate::strategy::RunStrategy::Binpack,
            maintenance: None,
            apply_deletes: false,
        };
        assert_eq!(
            settings.prepare(&spec, &ticket).unwrap_err(),
            PrepareError::UnknownCatalog("gone".to_string())
        );
    }
}
