//! From a claimed table to a Spark job: the statements, the command line, the environment passed
//! through, the deadline, and the runner chosen by configuration.

use std::sync::Arc;
use std::time::Duration;

use crate::accumulator::{ClaimTicket, FailureBackoff};
use crate::config::{Config, SparkConfig, SparkRunnerKind, TableSpec};
use crate::partitions::where_for_partitions;
use crate::spark::command::{spark_conf, spark_sql_options};
use crate::spark::connect::{self, ConnectRunner};
use crate::spark::docker::{DockerRunner, DockerSettings};
use crate::spark::process::ProcessRunner;
pub use crate::spark::runner::instance_id;
use crate::spark::runner::{SparkJob, SparkRunner};
use crate::spark::sql::CompactionSql;

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

    /// The job that compacts a claimed table.
    pub fn job(&self, spec: &TableSpec, ticket: &ClaimTicket) -> SparkJob {
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
        let catalog = &self.config.catalogs[&spec.catalog];
        SparkJob {
            run_id: ticket.run_id.clone(),
            table: spec.table.clone(),
            catalog: spec.catalog.clone(),
            statements: sql.statement_list(),
            // A claim of an earlier release has none: a run started now frames with a new one.
            nonce: if ticket.nonce.is_empty() {
                crate::spark::result::new_nonce()
            } else {
                ticket.nonce.clone()
            },
            conf: spark_conf(&self.config.spark, &spec.catalog, catalog),
            options: spark_sql_options(&self.config.spark),
            recovery: sql.recovery_statement_list(),
            claimed: Default::default(),
            attempt: 1,
            env: passed_through_env(&self.config.spark),
            timeout: self.timeout,
        }
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
            .and_then(|spec| where_for_partitions(spec, partitions))
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
            nonce: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".to_string(),
            upto_seq: 4,
        };
        let job = settings.job(&spec, &ticket);
        let sql = |job: &SparkJob| -> Vec<String> {
            job.statements
                .iter()
                .map(|statement| statement.sql.clone())
                .collect()
        };
        let statements = sql(&job).join(";\n");
        assert!(statements.contains("CALL lakehouse.system.rewrite_data_files(table => 'a.orders'"));
        assert!(statements.contains("'min-input-files', '4'"));
        // Only small files are rewritten (64 MiB by default), unless a partition went quiet.
        assert!(
            statements.contains("'min-file-size-bytes', '67108864'"),
            "{statements}"
        );
        let quiet = settings.job(
            &spec,
            &ClaimTicket {
                joins_mid_sized: true,
                ..ticket.clone()
            },
        );
        assert!(!sql(&quiet).join(";").contains("min-file-size-bytes"));
        // Of two partitions, one quiet: its mid-sized files join in a rewrite of its own, the
        // other's are not read again.
        let day = |day: &str| format!("d={day}");
        let partitioned = ClaimTicket {
            partitions: vec![day("2024-05-01"), day("2024-05-02")],
            spec: Some(vec![crate::partitions::PartitionField {
                name: "d".to_string(),
                source: "d".to_string(),
                transform: crate::partitions::Transform::Identity,
            }]),
            joins_mid_sized: true,
            joining_partitions: vec![day("2024-05-01")],
            ..ticket.clone()
        };
        let rewrites: Vec<String> = sql(&settings.job(&spec, &partitioned))
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
            let statements = sql(&settings.job(&spec, &ticket)).join(";");
            assert_eq!(statements.matches("rewrite_data_files").count(), 1);
            assert!(!statements.contains("min-file-size-bytes"), "{statements}");
        }
        let committed = sql(&job)
            .into_iter()
            .find(|statement| statement.contains("icepack_committed_file"))
            .unwrap();
        assert!(
            committed.ends_with("committed_at >= TIMESTAMP '2024-05-01 11:40:00.000')"),
            "committed files reported from the grace before the claim, less the clock margin: {committed}"
        );
        assert_eq!(
            job.nonce, ticket.nonce,
            "the claim's nonce: a recovered run is read as it was framed"
        );
        assert!(job.env.is_empty(), "unset variables are not passed");
        assert_eq!(job.timeout, Duration::from_secs(3600));
    }
}
