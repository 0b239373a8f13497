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
        let sql = CompactionSql {
            catalog: spec.catalog.clone(),
            table: spec.table.clone(),
            target_file_bytes: spec.target_file_bytes,
            min_file_size_bytes: spec.rewrite_floor_bytes(ticket.joins_mid_sized),
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
            partition_filter: ticket.spec.as_deref().and_then(|partition_spec| {
                where_for_partitions(partition_spec, &ticket.partitions)
            }),
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
            conf: spark_conf(&self.config.spark, &spec.catalog, catalog),
            options: spark_sql_options(&self.config.spark),
            recovery: sql.recovery_statement_list(),
            env: passed_through_env(&self.config.spark),
            timeout: self.timeout,
        }
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
            strategy: crate::strategy::RunStrategy::Binpack,
            maintenance: None,
            apply_deletes: false,
        };
        let job = settings.job(&spec, &ticket);
        let statements = job.statements.join(";\n");
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
        assert!(!quiet.statements.join(";").contains("min-file-size-bytes"));
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
}
