//! From a claimed table to a Spark job: the statements, the command line, the environment passed
//! through, the deadline, and the runner chosen by configuration.

#[cfg(feature = "service")]
use std::sync::Arc;

#[cfg(feature = "service")]
use crate::config::{Config, SparkRunnerKind};
use crate::config::{SparkConfig, TableSpec};
use crate::engine::spark::command::{spark_conf, spark_sql_options};
#[cfg(feature = "service")]
use crate::engine::spark::connect::{self, ConnectRunner};
#[cfg(feature = "service")]
use crate::engine::spark::docker::{DockerRunner, DockerSettings};
#[cfg(feature = "service")]
use crate::engine::spark::process::ProcessRunner;
pub use crate::engine::spark::runner::instance_id;
use crate::engine::spark::runner::SparkJob;
#[cfg(feature = "service")]
use crate::engine::spark::runner::SparkRunner;
use crate::engine::spark::sql::{
    CompactionSql, DeleteThresholds, RewriteCall, SqlRewrite, SqlTask, MAX_REWRITE_CALLS,
    MAX_REWRITE_FILTER_BYTES,
};
use crate::runs::settings::{panic_message, CompactionSettings};
use crate::runs::task::{MidSizedFiles, Rewrite, Task};
use crate::table::accumulator::ClaimTicket;
use crate::table::partitions::partition_filters;

/// Why a claimed run's job cannot be prepared: the run fails as `invalid_input`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("the table's catalog `{0}` is not configured")]
    UnknownCatalog(String),
    #[error("preparing the run failed unexpectedly: {0}")]
    Panicked(String),
}

/// Preparing a Spark job is this engine's part of the executor pool's settings
/// ([`crate::runs::settings`]).
impl CompactionSettings {
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
        if crate::base::failpoint::prepare_panics(&spec.table) {
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
        let sql = CompactionSql {
            catalog: spec.catalog.clone(),
            table: spec.table.clone(),
            target_file_bytes: spec.target_file_bytes,
            partial_progress: crate::table::policy::commits_per_group(
                spec.partial_progress,
                ticket.last_failure,
            ),
            where_filter: spec.where_filter.clone(),
            expire_snapshots_older_than_hours: spec.expire_snapshots_older_than_hours,
            run_started_millis: ticket.started_millis,
            small_file_bytes: spec.thresholds.small_file_bytes,
            task: match &ticket.task {
                Task::Rewrite(rewrite) => SqlTask::Rewrite(SqlRewrite {
                    calls: rewrite_calls(spec, ticket, rewrite),
                    strategy: rewrite.strategy.clone(),
                    min_input_files: rewrite.min_input_files_or(spec.min_input_files),
                    apply_deletes: rewrite.apply_deletes.then_some(DeleteThresholds {
                        ratio_ppm: spec.deletes.ratio_ppm,
                    }),
                }),
                Task::Reconcile | Task::ReadOrder => SqlTask::Read,
                Task::Maintenance(maintenance) => SqlTask::Maintenance(*maintenance),
            },
            committed_since_millis: crate::table::accumulator::committed_since_millis(
                ticket.started_millis,
            ),
            extra_options: spec.rewrite_options.clone(),
            orphan_older_than_hours: spec.orphan_older_than_hours,
            orphan_prefix_listing: self.config.spark.orphan_prefix_listing,
            // A spec not read yet may be partitioned: Iceberg answers for an unpartitioned one.
            partition_statistics: ticket.spec.as_ref().is_none_or(|spec| !spec.is_empty()),
            expire_snapshots_retain_last: spec.expire_snapshots_retain_last,
        };
        Ok(SparkJob {
            run_id: ticket.run_id.clone(),
            table: spec.table.clone(),
            catalog: spec.catalog.clone(),
            statements: sql.statement_list(),
            // A claim of an earlier release has none: a run started now frames with a new one.
            nonce: if ticket.nonce.is_empty() {
                crate::engine::spark::result::new_nonce()
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
        })
    }
}

/// The run's `rewrite_data_files` calls: limited to its partitions, in filters of at most
/// [`MAX_REWRITE_FILTER_BYTES`]; when only some of its partitions have gone quiet, theirs in calls
/// of their own with Iceberg's default floor (their mid-sized files join) and the others' with the
/// small-file floor (their mid-sized files are not read again). One call over the whole table when
/// the partitions cannot be named (no spec yet, a partition no field of which can be pinned) —
/// mid-sized files joining as before — or when they need more than [`MAX_REWRITE_CALLS`] calls:
/// then mid-sized files join only if every partition of the run went quiet.
fn rewrite_calls(spec: &TableSpec, ticket: &ClaimTicket, rewrite: &Rewrite) -> Vec<RewriteCall> {
    let filters = |partitions: &[String]| {
        ticket
            .spec
            .as_deref()
            .and_then(|fields| partition_filters(fields, partitions, MAX_REWRITE_FILTER_BYTES))
    };
    let calls = |joins_mid_sized: bool, filters: Option<Vec<String>>| -> Vec<RewriteCall> {
        let min_file_size_bytes = spec.rewrite_floor_bytes(joins_mid_sized);
        match filters {
            None => vec![RewriteCall {
                min_file_size_bytes,
                partition_filter: None,
            }],
            Some(filters) => filters
                .into_iter()
                .map(|filter| RewriteCall {
                    min_file_size_bytes,
                    partition_filter: Some(filter),
                })
                .collect(),
        }
    };
    let partitions = &rewrite.partitions;
    let (joining, staying): (Vec<String>, Vec<String>) = partitions
        .iter()
        .cloned()
        .partition(|partition| rewrite.mid_sized.joins_in(partition));
    let joins_mid_sized = rewrite.mid_sized.any();
    let all_join = match &rewrite.mid_sized {
        MidSizedFiles::Nowhere => false,
        MidSizedFiles::Everywhere => true,
        MidSizedFiles::In(_) => staying.is_empty() || joining.is_empty(),
    };
    let planned = if !matches!(rewrite.mid_sized, MidSizedFiles::In(_)) {
        calls(joins_mid_sized, filters(partitions))
    } else if staying.is_empty() || joining.is_empty() {
        calls(true, filters(partitions))
    } else {
        match (filters(&staying), filters(&joining)) {
            (Some(staying), Some(joining)) => {
                let mut planned = calls(false, Some(staying));
                planned.extend(calls(true, Some(joining)));
                planned
            }
            _ => calls(true, None),
        }
    };
    if planned.len() > MAX_REWRITE_CALLS {
        return calls(all_join, None);
    }
    planned
}

/// The configured variables that are set here, by name; values go to the engine only.
fn passed_through_env(spark: &SparkConfig) -> Vec<(String, String)> {
    spark
        .env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect()
}

/// The runner the configuration asks for, without a warm-up ([`runner_for_tables`]).
#[cfg(feature = "service")]
pub fn runner_from_config(config: &Config) -> Arc<dyn SparkRunner> {
    runner_for_tables(config, &[])
}

/// The runner the configuration asks for; a connect runner warms each server it reaches up
/// with one of `specs`' Spark tables per catalog ([`super::warm_up`]).
#[cfg(feature = "service")]
pub fn runner_for_tables(config: &Config, specs: &[TableSpec]) -> Arc<dyn SparkRunner> {
    use crate::engine::spark::warm_up::{tables_to_warm, WarmUp};
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
            Arc::new(
                ConnectRunner::new(settings)
                    .with_warm_up(WarmUp::new(config, tables_to_warm(specs))),
            )
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
    use std::time::Duration;

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
            trigger: crate::runs::task::Trigger::Files,
            started_millis: 1_714_564_800_000,
            files: 4,
            bytes: 4,
            spec: None,
            task: Task::Rewrite(Rewrite {
                min_input_files: 4,
                ..Rewrite::whole_table()
            }),
            nonce: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".to_string(),
            upto_seq: 4,
            last_failure: None,
        };
        let job = settings.prepare(&spec, &ticket).unwrap();
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
        let quiet = settings
            .prepare(
                &spec,
                &with_rewrite(&ticket, |rewrite| {
                    rewrite.mid_sized = MidSizedFiles::Everywhere
                }),
            )
            .unwrap();
        assert!(!sql(&quiet).join(";").contains("min-file-size-bytes"));
        // Of two partitions, one quiet: its mid-sized files join in a rewrite of its own, the
        // other's are not read again.
        let day = |day: &str| format!("d={day}");
        let partitioned = ClaimTicket {
            spec: Some(vec![crate::table::partitions::PartitionField {
                name: "d".to_string(),
                source: "d".to_string(),
                transform: crate::table::partitions::Transform::Identity,
                source_type: Some("date".to_string()),
            }]),
            ..with_rewrite(&ticket, |rewrite| {
                rewrite.partitions = vec![day("2024-05-01"), day("2024-05-02")];
                rewrite.mid_sized = MidSizedFiles::In(vec![day("2024-05-01")]);
            })
        };
        let rewrites: Vec<String> = sql(&settings.prepare(&spec, &partitioned).unwrap())
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
            with_rewrite(&partitioned, |rewrite| {
                rewrite.mid_sized = MidSizedFiles::In(rewrite.partitions.clone())
            }),
            ClaimTicket {
                spec: None,
                ..partitioned.clone()
            },
        ] {
            let statements = sql(&settings.prepare(&spec, &ticket).unwrap()).join(";");
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

    fn settings_and_spec() -> (CompactionSettings, TableSpec) {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"a.orders\"\nbucket = \"lake\"\nprefix = \"w/\"\n",
        )
        .unwrap();
        let spec = config.table_specs().remove(0);
        (CompactionSettings::from_config(Arc::new(config)), spec)
    }

    /// A run over `partitions` of an identity-partitioned `customer` string column.
    fn customers_run(partitions: Vec<String>, joining: Vec<String>) -> ClaimTicket {
        ClaimTicket {
            run_id: "r1".to_string(),
            trigger: crate::runs::task::Trigger::Files,
            started_millis: 1_714_564_800_000,
            files: 2 * partitions.len() as u64,
            bytes: 2 * partitions.len() as u64,
            spec: Some(vec![crate::table::partitions::PartitionField {
                name: "customer".to_string(),
                source: "customer".to_string(),
                transform: crate::table::partitions::Transform::Identity,
                source_type: Some("string".to_string()),
            }]),
            task: Task::Rewrite(Rewrite {
                partitions,
                min_input_files: 2,
                mid_sized: MidSizedFiles::only_in(joining),
                ..Rewrite::whole_table()
            }),
            nonce: String::new(),
            upto_seq: 0,
            last_failure: None,
        }
    }

    /// `ticket` with its rewrite changed by `change`.
    fn with_rewrite(ticket: &ClaimTicket, change: impl FnOnce(&mut Rewrite)) -> ClaimTicket {
        let mut rewrite = ticket.task.rewrite().expect("a rewrite").clone();
        change(&mut rewrite);
        ClaimTicket {
            task: Task::Rewrite(rewrite),
            ..ticket.clone()
        }
    }

    /// The calls of a rewrite's ticket.
    fn calls_of(spec: &TableSpec, ticket: &ClaimTicket) -> Vec<RewriteCall> {
        rewrite_calls(spec, ticket, ticket.task.rewrite().expect("a rewrite"))
    }

    fn customers(range: std::ops::Range<u32>) -> Vec<String> {
        range
            .map(|index| format!("customer=customer-{index:06}"))
            .collect()
    }

    /// Issue 31: 3,000 partitions made one ~200 KB filter, a command line Linux refused
    /// ("Argument list too long"), forever. 5,000 partitions of two files each now make a few
    /// calls, each filter within the limit, every partition in exactly one of them.
    #[test]
    fn five_thousand_partitions_are_rewritten_in_calls_within_the_limit() {
        let (settings, spec) = settings_and_spec();
        let partitions = customers(0..5_000);
        let ticket = customers_run(partitions.clone(), Vec::new());
        let calls = calls_of(&spec, &ticket);
        assert!(
            (2..=MAX_REWRITE_CALLS).contains(&calls.len()),
            "{} calls",
            calls.len()
        );
        for call in &calls {
            let filter = call.partition_filter.as_ref().unwrap();
            assert!(filter.len() <= MAX_REWRITE_FILTER_BYTES, "{}", filter.len());
            assert_eq!(call.min_file_size_bytes, Some(64 * 1024 * 1024));
        }
        let job = settings.prepare(&spec, &ticket).unwrap();
        let rewrites: Vec<&String> = job
            .statements
            .iter()
            .map(|statement| &statement.sql)
            .filter(|sql| sql.contains("rewrite_data_files"))
            .collect();
        assert_eq!(rewrites.len(), calls.len());
        let named = |texts: &[&String]| {
            let mut named: std::collections::HashMap<String, Vec<usize>> = Default::default();
            for (index, text) in texts.iter().enumerate() {
                for (at, _) in text.match_indices("customer-") {
                    let value = &text[at..at + "customer-000000".len()];
                    named
                        .entry(format!("customer={value}"))
                        .or_default()
                        .push(index);
                }
            }
            named
        };
        let in_statements = named(&rewrites);
        assert_eq!(in_statements.len(), partitions.len());
        for partition in &partitions {
            assert_eq!(in_statements[partition].len(), 1, "{partition}");
        }
        // Some of them quiet: theirs with Iceberg's floor, the others' with the small-file
        // floor, each partition once.
        let joining = customers(0..2_500);
        let ticket = customers_run(partitions.clone(), joining.clone());
        let calls = calls_of(&spec, &ticket);
        assert!(calls.len() <= MAX_REWRITE_CALLS, "{}", calls.len());
        let filters: Vec<&String> = calls
            .iter()
            .map(|call| call.partition_filter.as_ref().unwrap())
            .collect();
        let in_calls = named(&filters);
        for (index, partition) in partitions.iter().enumerate() {
            assert_eq!(in_calls[partition].len(), 1, "{partition}");
            let floor = if index < 2_500 {
                None
            } else {
                Some(64 * 1024 * 1024)
            };
            let call = &calls[in_calls[partition][0]];
            assert_eq!(call.min_file_size_bytes, floor, "{partition}");
        }
    }

    /// More partitions than the calls hold: one call over the whole table; mid-sized files join
    /// only when every partition of the run went quiet.
    #[test]
    fn past_the_calls_a_run_goes_over_the_whole_table() {
        let (settings, spec) = settings_and_spec();
        let partitions = customers(0..40_000);
        let open = customers_run(partitions.clone(), Vec::new());
        assert_eq!(
            calls_of(&spec, &open),
            [RewriteCall {
                min_file_size_bytes: Some(64 * 1024 * 1024),
                partition_filter: None
            }]
        );
        let some_quiet = customers_run(partitions.clone(), customers(0..10));
        assert_eq!(
            calls_of(&spec, &some_quiet)[0].min_file_size_bytes,
            Some(64 * 1024 * 1024)
        );
        let all_quiet = customers_run(partitions.clone(), partitions.clone());
        assert_eq!(
            calls_of(&spec, &all_quiet),
            [RewriteCall {
                min_file_size_bytes: None,
                partition_filter: None
            }]
        );
        let statements = settings.prepare(&spec, &open).unwrap().statements;
        let rewrite = &statements
            .iter()
            .find(|statement| statement.sql.contains("rewrite_data_files"))
            .unwrap()
            .sql;
        assert!(!rewrite.contains("where =>"), "{rewrite}");
    }

    /// A claim naming a catalog the configuration does not have (a reload removed it) is
    /// refused, not a panic of the pool.
    #[test]
    fn a_claim_that_cannot_be_prepared_is_refused() {
        let (settings, mut spec) = settings_and_spec();
        spec.catalog = "gone".to_string();
        assert_eq!(
            settings
                .prepare(&spec, &customers_run(customers(0..2), Vec::new()))
                .unwrap_err(),
            PrepareError::UnknownCatalog("gone".to_string())
        );
    }

    /// The run of 5,000 partitions through the process runner, to a stand-in spark-sql that
    /// reads its statements the way spark-sql does (`-f`), checks that no argument of its command
    /// line is near Linux's 128 KiB limit, and answers each `rewrite_data_files` with two files
    /// per partition it names: the summed result has every partition, once.
    #[tokio::test]
    async fn a_run_over_5000_partitions_reaches_spark_sql_and_its_results_are_summed() {
        use std::os::unix::fs::PermissionsExt;
        let out = tempfile::tempdir().unwrap();
        let fake = out.path().join("spark-sql");
        std::fs::write(
            &fake,
            format!(
                r#"#!/usr/bin/env bash
longest=0
file=""
previous=""
for argument in "$@"; do
  length=$(printf '%s' "$argument" | wc -c)
  [ "$length" -gt "$longest" ] && longest=$length
  [ "$previous" = -f ] && file=$argument
  previous=$argument
done
echo "$longest" > {dir}/longest-argument
[ -n "$file" ] || {{ echo "no statements file" >&2; exit 2; }}
stat -c %a "$file" > {dir}/mode
grep -c '^CALL' "$file" > {dir}/calls
grep '^CALL' "$file" | awk '{{ print length($0) }}' | sort -n | tail -1 > {dir}/longest-call
. "{fixtures}/spark-sql-frame.sh"
statement_output() {{
  case "$1" in
    CALL*rewrite_data_files*)
      named=$(printf '%s\n' "$1" | grep -o "customer-[0-9]*" | wc -l)
      printf 'rewritten_data_files_count\tadded_data_files_count\n%d\t%d\n' $((2 * named)) "$named" ;;
  esac
}}
run_statements "$@"
"#,
                dir = out.path().display(),
                fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (settings, spec) = settings_and_spec();
        let job = settings
            .prepare(&spec, &customers_run(customers(0..5_000), Vec::new()))
            .unwrap();
        let runner = ProcessRunner::new(fake.display().to_string());
        let outcome = crate::engine::spark::runner::execute(&runner, &job, 1, Duration::ZERO).await;
        let read = |name: &str| {
            std::fs::read_to_string(out.path().join(name))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        match outcome {
            crate::runs::report::RunOutcome::Success { report, .. } => {
                assert_eq!(report.result.rewritten_data_files_count, 10_000);
                assert_eq!(report.result.added_data_files_count, 5_000);
            }
            other => panic!("{other:?}"),
        }
        let calls: usize = read("calls").parse().unwrap();
        assert!((2..=MAX_REWRITE_CALLS).contains(&calls), "{calls} calls");
        let longest_argument: usize = read("longest-argument").parse().unwrap();
        assert!(longest_argument < 4096, "{longest_argument} bytes");
        let longest_call: usize = read("longest-call").parse().unwrap();
        assert!(
            longest_call < MAX_REWRITE_FILTER_BYTES * 5 / 4,
            "{longest_call} bytes"
        );
        assert_eq!(read("mode"), "600", "the statements name tables and values");
    }

    mod claims {
        use super::*;
        use proptest::prelude::*;

        fn field() -> impl Strategy<Value = crate::table::partitions::PartitionField> {
            use crate::table::partitions::{PartitionField, Transform};
            (
                prop::sample::select(vec!["a", "b", "c", "d_day"]),
                prop::sample::select(vec![
                    Transform::Identity,
                    Transform::Year,
                    Transform::Month,
                    Transform::Day,
                    Transform::Hour,
                    Transform::Other("bucket(4, x)".to_string()),
                    Transform::Other("void(x)".to_string()),
                ]),
                prop::option::of(prop::sample::select(vec![
                    "string",
                    "int",
                    "bigint",
                    "tinyint",
                    "boolean",
                    "decimal(5,2)",
                    "date",
                    "timestamp",
                    "timestamp_ntz",
                    "double",
                    "binary",
                    "decimal(99,x)",
                ])),
                "[a-z`'\\\\ ]{1,8}",
            )
                .prop_map(|(name, transform, source_type, source)| PartitionField {
                    name: name.to_string(),
                    source,
                    transform,
                    source_type: source_type.map(str::to_string),
                })
        }

        /// What object keys put in a partition path: names of fields and not, any value.
        fn path() -> impl Strategy<Value = String> {
            prop::collection::vec(
                (
                    prop::sample::select(vec!["a", "b", "c", "d_day", "x", ""]),
                    prop_oneof![
                        "[-+%0-9A-Fa-f]{0,16}",
                        "(null|__HIVE_DEFAULT_PARTITION__|true|%2B262142-12-31|9999-12-31-23|2024-05-31|9999-12|2024|-12.5)",
                        "\\PC{0,12}",
                    ],
                ),
                0..4,
            )
            .prop_map(|segments| {
                segments
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join("/")
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Every claim, whatever its partitions and the spec its last run read, is prepared
            /// into a job within the limits — or refused — and never panics.
            #[test]
            fn every_claim_can_be_prepared_or_refused(
                fields in prop::option::of(prop::collection::vec(field(), 0..4)),
                partitions in prop::collection::vec(path(), 0..40),
                joining_mask in prop::collection::vec(any::<bool>(), 40),
                joins_mid_sized in any::<bool>(),
                rewrite in any::<bool>(),
                known_catalog in prop::bool::weighted(0.9),
                started_millis in 0i64..32_503_680_000_000,
            ) {
                let (settings, mut spec) = settings_and_spec();
                if !known_catalog {
                    spec.catalog = "gone".to_string();
                }
                let joining: Vec<String> = partitions
                    .iter()
                    .zip(&joining_mask)
                    .filter(|(_, joins)| **joins)
                    .map(|(partition, _)| partition.clone())
                    .collect();
                let ticket = ClaimTicket {
                    started_millis,
                    spec: fields,
                    task: if rewrite {
                        Task::Rewrite(Rewrite {
                            partitions,
                            min_input_files: 2,
                            mid_sized: MidSizedFiles::from_stored(joins_mid_sized, joining),
                            ..Rewrite::whole_table()
                        })
                    } else {
                        Task::Reconcile
                    },
                    ..customers_run(Vec::new(), Vec::new())
                };
                match settings.prepare(&spec, &ticket) {
                    Ok(job) => {
                        prop_assert!(known_catalog);
                        let rewrites: Vec<&String> = job
                            .statements
                            .iter()
                            .map(|statement| &statement.sql)
                            .filter(|sql| sql.contains("rewrite_data_files"))
                            .collect();
                        prop_assert_eq!(rewrites.is_empty(), !rewrite);
                        prop_assert!(rewrites.len() <= MAX_REWRITE_CALLS);
                        for call in ticket.task.rewrite().map(|_| calls_of(&spec, &ticket)).unwrap_or_default() {
                            let length = call.partition_filter.map_or(0, |filter| filter.len());
                            prop_assert!(length <= MAX_REWRITE_FILTER_BYTES);
                        }
                        for statement in &job.statements {
                            prop_assert!(!statement.sql.contains('\n'), "{}", statement.sql);
                        }
                    }
                    Err(error) => {
                        prop_assert_eq!(error, PrepareError::UnknownCatalog("gone".to_string()));
                    }
                }
            }
        }
    }
}
