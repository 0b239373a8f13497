//! One engine per run, by the table's `engine`: Spark, the native engine, or `auto` — the native
//! engine for the runs it can do, Spark for the others. What the native engine can do is known
//! in part before a run (the task: a bin-pack rewrite or a reconcile of a table in a REST or JDBC
//! catalog) and in part only from the table's metadata (an equality delete on an optional column
//! applying to an input, format v3, a run over `[native] max_run_mb`): such a run goes to Spark then, and the run history says
//! why.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use super::native::{catalog_kind, MidSizedFiles, NativeEngine, NativeError, NativeTask};
use super::spark::SparkEngine;
use super::{Engine, EngineRun, PlannedRun, RanOn, RunTask};
use crate::config::{Config, EngineChoice, TableSpec};
use crate::runs::report::{FailureClass, ReportSummary, RunOutcome};
use crate::runs::settings::CompactionSettings;
use crate::runs::strategy::{RunStrategy, Strategy};
use crate::runs::task::Task;

/// What a run recorded as the native engine's says.
pub const NATIVE: &str = "native";

/// The engines of a deployment and the choice of each table.
pub struct RoutedEngine {
    /// `None` when no table may use Spark (`engine = "native"` everywhere): then no `[spark]`
    /// is needed, and none is probed.
    spark: Option<SparkEngine>,
    /// `None` when no table may use the native engine.
    native: Option<NativeEngine>,
    config: Mutex<Arc<Config>>,
}

impl RoutedEngine {
    pub fn new(
        spark: Option<SparkEngine>,
        native: Option<NativeEngine>,
        config: Arc<Config>,
    ) -> RoutedEngine {
        RoutedEngine {
            spark,
            native,
            config: Mutex::new(config),
        }
    }

    fn config(&self) -> Arc<Config> {
        self.config.lock().expect("routed engine's config").clone()
    }

    /// The native engine's task for a run, or why the native engine cannot run it (known
    /// before reading the table).
    fn native_task(&self, task: &RunTask) -> Result<NativeTask, String> {
        let ticket = &task.ticket;
        let rewrite = match &ticket.task {
            Task::Maintenance(maintenance) => {
                return Err(format!("{} is a Spark procedure", maintenance.as_str()));
            }
            Task::ReadOrder => return Err("reading the table's sort order is Spark's".into()),
            Task::Rewrite(rewrite) if !matches!(rewrite.strategy, RunStrategy::Binpack) => {
                return Err(format!(
                    "the native engine bin-packs; {} is Spark's",
                    rewrite.strategy.name()
                ));
            }
            Task::Rewrite(rewrite) => Some(rewrite),
            Task::Reconcile => None,
        };
        let spec = &task.spec;
        if let Some(reason) = spark_only_run_setting(spec, rewrite.is_some()) {
            return Err(reason);
        }
        let config = self.config();
        let catalog = config
            .catalogs
            .get(&spec.catalog)
            .ok_or_else(|| format!("no [catalogs.{}] section", spec.catalog))?;
        catalog_kind(catalog)?;
        Ok(NativeTask {
            catalog_name: spec.catalog.clone(),
            catalog: catalog.clone(),
            table: spec.table.clone(),
            partitions: ticket.partitions().to_vec(),
            joining: rewrite.map_or(MidSizedFiles::Nowhere, |rewrite| rewrite.mid_sized.clone()),
            small_file_bytes: spec.thresholds.small_file_bytes,
            target_file_bytes: spec.target_file_bytes,
            min_input_files: rewrite.map_or(spec.min_input_files, |rewrite| {
                rewrite.min_input_files_or(spec.min_input_files)
            }),
            apply_deletes: rewrite.is_some_and(|rewrite| rewrite.apply_deletes),
            partial_progress: crate::table::policy::commits_per_group(
                spec.partial_progress,
                ticket.last_failure,
            ),
            deadline: Instant::now() + task.timeout,
            run_id: ticket.run_id.clone(),
            committed_since_millis: crate::table::accumulator::committed_since_millis(
                ticket.started_millis,
            ),
        })
    }

    /// Runs the task on the native engine: `Err(reason)` when it turned out, from the table,
    /// to be one for another engine.
    async fn run_native(
        native: &NativeEngine,
        task: &RunTask,
        native_task: NativeTask,
    ) -> Result<RunOutcome, String> {
        let started = Instant::now();
        let result = if task.ticket.task.rewrites_data() {
            native.run(native_task).await
        } else {
            native.read(native_task).await
        };
        let duration_millis = started.elapsed().as_millis() as u64;
        match result {
            Ok(report) => Ok(RunOutcome::Success {
                report: ReportSummary::from(report),
                duration_millis,
                attempts: 1,
            }),
            Err(error) if error.needs_another_engine() => Err(error.to_string()),
            Err(error) => Ok(failure_of(&error, duration_millis)),
        }
    }

    fn on_native(reason: &str) -> RanOn {
        RanOn {
            engine: NATIVE.to_string(),
            detail: reason.to_string(),
        }
    }

    /// The run on Spark, `why` it went there; a failure when no table may use Spark.
    async fn run_spark(&self, task: &RunTask, why: String) -> EngineRun {
        match &self.spark {
            Some(spark) => {
                let mut ended = spark.run(task).await;
                ended.ran_on.detail = format!("{} ({why})", ended.ran_on.detail);
                ended
            }
            None => EngineRun {
                outcome: RunOutcome::Failure {
                    class: FailureClass::EngineUnavailable,
                    excerpt: format!("no Spark engine is configured for this run: {why}"),
                    duration_millis: 0,
                    attempts: 1,
                },
                ran_on: RanOn {
                    engine: super::spark::SPARK.to_string(),
                    detail: why,
                },
            },
        }
    }
}

/// The first of a table's settings that makes its runs (`rewrite`: its rewrites, else its
/// reads) Spark's, as the reason; `None` when the native engine does all they ask.
fn spark_only_run_setting(spec: &TableSpec, rewrite: bool) -> Option<String> {
    if spec.where_filter.is_some() {
        return Some("a table's `where` filter is Spark SQL".into());
    }
    if !spec.rewrite_options.is_empty() {
        return Some("rewrite_data_files `options` are Spark's".into());
    }
    if rewrite && spec.expire_snapshots_older_than_hours.is_some() {
        return Some(
            "expire_snapshots after the rewrite (`expire_snapshots_older_than_hours`) is a Spark procedure"
                .into(),
        );
    }
    None
}

/// The first of a table's settings that asks for runs only Spark does (a strategy but bin-pack,
/// maintenance procedures — `rewrite_position_delete_files` among a deletes-due table's runs —
/// and [`spark_only_run_setting`]), as the reason
/// a table with `engine = "native"` is refused; `None` when the native engine does all of them.
pub fn spark_only_setting(spec: &TableSpec) -> Option<String> {
    if !matches!(spec.strategy, Strategy::Binpack) {
        return Some(format!(
            "strategy = \"{}\" is Spark's (the native engine bin-packs)",
            spec.strategy.name()
        ));
    }
    if spec.max_manifests.is_some() {
        return Some("rewrite_manifests (`max_manifests`) is a Spark procedure".into());
    }
    if spec.remove_orphans_every_millis.is_some() {
        return Some(
            "remove_orphan_files (`remove_orphans_every_hours`) is a Spark procedure".into(),
        );
    }
    if spec.deletes.is_on() {
        // A table due by its deletes gets a data rewrite (native) only with equality deletes or
        // many deleted rows; otherwise the cheaper `rewrite_position_delete_files`.
        return Some(
            "rewrite_position_delete_files (`delete_file_threshold`, `delete_ratio_threshold`: a table due by a few position deletes) is a Spark procedure"
                .into(),
        );
    }
    if spec.compute_statistics {
        return Some(
            "compute_table_stats and compute_partition_stats (`compute_statistics`) are Spark procedures"
                .into(),
        );
    }
    spark_only_run_setting(spec, true)
}

/// A native failure as settlement and alerts know it.
fn failure_of(error: &NativeError, duration_millis: u64) -> RunOutcome {
    let class = match error {
        NativeError::InvalidInput(_) => FailureClass::InvalidInput,
        other => other.class(),
    };
    RunOutcome::Failure {
        class,
        excerpt: error.to_string(),
        duration_millis,
        attempts: 1,
    }
}

#[async_trait]
impl Engine for RoutedEngine {
    fn describe(&self) -> String {
        match (&self.native, &self.spark) {
            (Some(_), Some(spark)) => format!("native, else {}", spark.describe()),
            (Some(_), None) => NATIVE.to_string(),
            (None, Some(spark)) => spark.describe(),
            (None, None) => "none".to_string(),
        }
    }

    async fn run(&self, task: &RunTask) -> EngineRun {
        let choice = task.spec.engine;
        if choice == EngineChoice::Spark {
            return self.run_spark(task, "engine = \"spark\"".to_string()).await;
        }
        let Some(native) = &self.native else {
            return self
                .run_spark(task, "the native engine is not running".to_string())
                .await;
        };
        let why = match self.native_task(task) {
            Ok(native_task) => match Self::run_native(native, task, native_task).await {
                Ok(outcome) => {
                    return EngineRun {
                        outcome,
                        ran_on: Self::on_native(&format!("engine = \"{}\"", choice.as_str())),
                    }
                }
                Err(reason) => reason,
            },
            Err(reason) => reason,
        };
        if choice == EngineChoice::Auto {
            return self.run_spark(task, format!("auto: {why}")).await;
        }
        EngineRun {
            outcome: RunOutcome::Failure {
                class: FailureClass::InvalidInput,
                excerpt: format!(
                    "the native engine cannot run this, and the table's engine is \"native\": {why}"
                ),
                duration_millis: 0,
                attempts: 1,
            },
            ran_on: Self::on_native(&why),
        }
    }

    async fn plan(&self, task: &RunTask) -> PlannedRun {
        let choice = task.spec.engine;
        let on_spark = |why: String, plan: Result<_, String>| PlannedRun {
            ran_on: RanOn {
                engine: super::spark::SPARK.to_string(),
                detail: why,
            },
            plan,
        };
        let native_task = self.native_task(task);
        // The native planner reads the table for either engine where it can: Spark's
        // `rewrite_data_files` bin-packs by the same rules.
        let preview = match (&self.native, &native_task) {
            (Some(native), Ok(native_task)) => Some(native.plan(native_task.clone()).await),
            _ => None,
        };
        let spark_plan = |preview: Option<Result<_, NativeError>>, why: &str| match preview {
            Some(Ok(plan)) => Ok(plan),
            Some(Err(error)) => Err(format!(
                "Spark plans the run only as it runs it; the native planner: {error}"
            )),
            None => Err(format!(
                "Spark plans the run only as it runs it (the native planner cannot read it: {why})"
            )),
        };
        if choice == EngineChoice::Spark {
            let why = match &native_task {
                Err(reason) => reason.clone(),
                Ok(_) => "the native engine is not running".to_string(),
            };
            return on_spark("engine = \"spark\"".to_string(), spark_plan(preview, &why));
        }
        if self.native.is_none() {
            let why = "the native engine is not running".to_string();
            return on_spark(why.clone(), spark_plan(preview, &why));
        }
        let why = match (native_task, preview) {
            (Err(reason), _) => reason,
            (Ok(_), Some(Err(error))) if error.needs_another_engine() => error.to_string(),
            (Ok(_), Some(result)) => {
                return PlannedRun {
                    ran_on: Self::on_native(&format!("engine = \"{}\"", choice.as_str())),
                    plan: result.map_err(|error| error.to_string()),
                }
            }
            (Ok(_), None) => "the native engine is not running".to_string(),
        };
        if choice == EngineChoice::Auto {
            return on_spark(
                format!("auto: {why}"),
                Err(format!("Spark plans the run only as it runs it ({why})")),
            );
        }
        PlannedRun {
            ran_on: Self::on_native(&why),
            plan: Err(format!(
                "the native engine cannot run this, and the table's engine is \"native\": {why}"
            )),
        }
    }

    async fn recover(&self, task: &RunTask) -> EngineRun {
        // The native engine's commits carry the run id: the metadata says whether it committed.
        if let (Some(native), true) = (&self.native, task.spec.engine.uses_native()) {
            if let Ok(native_task) = self.native_task(task) {
                let started = Instant::now();
                match native.recover(native_task).await {
                    Ok(Some(report)) => {
                        return EngineRun {
                            outcome: RunOutcome::Success {
                                report: report.into(),
                                duration_millis: started.elapsed().as_millis() as u64,
                                attempts: 1,
                            },
                            ran_on: Self::on_native("recovered from the table's metadata"),
                        }
                    }
                    Ok(None) if !task.spec.engine.uses_spark() => {
                        return EngineRun {
                            outcome: RunOutcome::Failure {
                                class: FailureClass::Other,
                                excerpt: "the run was interrupted by a restart before it committed; its files are pending again".to_string(),
                                duration_millis: started.elapsed().as_millis() as u64,
                                attempts: 1,
                            },
                            ran_on: Self::on_native("recovered from the table's metadata"),
                        }
                    }
                    Ok(None) => {}
                    Err(error) => {
                        return EngineRun {
                            outcome: failure_of(&error, started.elapsed().as_millis() as u64),
                            ran_on: Self::on_native("recovering from the table's metadata"),
                        }
                    }
                }
            }
        }
        match &self.spark {
            Some(spark) => spark.recover(task).await,
            None => EngineRun {
                outcome: RunOutcome::Failure {
                    class: FailureClass::Other,
                    excerpt: super::LEFT_NO_OUTCOME.to_string(),
                    duration_millis: 0,
                    attempts: 1,
                },
                ran_on: Self::on_native("recovering"),
            },
        }
    }

    fn reconfigure(&self, settings: &CompactionSettings) {
        if let Some(spark) = &self.spark {
            spark.reconfigure(settings);
        }
        *self.config.lock().expect("routed engine's config") = settings.config.clone();
    }

    async fn probe(&self) -> Result<(), String> {
        match &self.spark {
            Some(spark) => spark.probe().await,
            // In the process: it answers whenever icepack does.
            None => Ok(()),
        }
    }

    async fn leftover_runs(&self) -> Result<Vec<String>, String> {
        match &self.spark {
            Some(spark) => spark.leftover_runs().await,
            None => Ok(Vec::new()),
        }
    }

    async fn discard(&self, run_id: &str) -> Result<(), String> {
        match &self.spark {
            Some(spark) => spark.discard(run_id).await,
            None => Ok(()),
        }
    }
}

/// The engines the configuration asks for, each table's run going to its `engine`: Spark when
/// some table may use it (or none is configured), the native engine when some table may. Fails
/// when a table's `engine = "native"` names a catalog the native engine cannot commit to, or the
/// native engine cannot start.
pub fn engine_from_config(config: &Arc<Config>) -> Result<Arc<dyn Engine>, String> {
    use super::native::NativeLimits;
    use crate::config::EngineChoice;
    use crate::engine::spark::job::runner_for_tables;
    let specs = config.table_specs();
    for spec in specs
        .iter()
        .filter(|spec| spec.engine == EngineChoice::Native)
    {
        let catalog = config
            .catalogs
            .get(&spec.catalog)
            .ok_or_else(|| format!("table {}: no [catalogs.{}]", spec.table, spec.catalog))?;
        catalog_kind(catalog).map_err(|reason| {
            format!(
                "table {} has engine = \"native\", but its catalog {}: {reason}",
                spec.table, spec.catalog
            )
        })?;
        if let Some(reason) = spark_only_setting(spec) {
            return Err(format!(
                "table {} has engine = \"native\", but {reason}: use engine = \"auto\" (with a [spark] section) or \"spark\"",
                spec.table
            ));
        }
    }
    let settings = CompactionSettings::from_config(config.clone());
    // Without the list of tables, as the settings keep it.
    let kept = settings.config.clone();
    let spark = (specs.is_empty() || specs.iter().any(|spec| spec.engine.uses_spark()))
        .then(|| SparkEngine::new(runner_for_tables(config, &specs), settings));
    let native = if specs.iter().any(|spec| spec.engine.uses_native()) {
        let bounds = &config.native;
        Some(
            NativeEngine::new(NativeLimits {
                max_concurrent_runs: bounds.max_concurrent_runs.as_usize(),
                threads: bounds.threads.as_usize(),
                max_run_bytes: bounds.max_run_mb.get().saturating_mul(1024 * 1024),
                ..NativeLimits::default()
            })
            .map_err(|error| error.to_string())?,
        )
    } else {
        None
    };
    Ok(Arc::new(RoutedEngine::new(spark, native, kept)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::spark::SparkEngine;
    use crate::runs::task::{Rewrite, Trigger};
    use crate::table::accumulator::ClaimTicket;
    use crate::testing::stand_in_runner::StandInRunner;

    const CONFIG: &str = r#"
[catalogs.lakehouse]
impl = "org.apache.iceberg.rest.RESTCatalog"
uri = "http://127.0.0.1:1"
warehouse = "s3://lake/warehouse"

[catalogs.glue]
impl = "org.apache.iceberg.aws.glue.GlueCatalog"
warehouse = "s3://lake/warehouse"

[[tables]]
table = "a.orders"
bucket = "lake"
prefix = "orders/"
engine = "auto"

[[tables]]
table = "a.events"
bucket = "lake"
prefix = "events/"
catalog = "glue"
engine = "auto"

[[tables]]
table = "a.native"
bucket = "lake"
prefix = "native/"
engine = "native"
"#;

    fn config() -> Arc<Config> {
        Arc::new(Config::from_toml_str(CONFIG).unwrap())
    }

    fn task(table: &str, ticket: ClaimTicket) -> RunTask {
        let spec = config()
            .table_specs()
            .into_iter()
            .find(|spec| spec.table == table)
            .unwrap();
        RunTask {
            spec: Arc::new(spec),
            ticket,
            timeout: std::time::Duration::from_secs(60),
            claimed: Default::default(),
        }
    }

    fn rewrite() -> ClaimTicket {
        ClaimTicket {
            run_id: "r1".to_string(),
            trigger: Trigger::Files,
            started_millis: 1_714_564_800_000,
            files: 4,
            bytes: 40,
            spec: None,
            task: Task::Rewrite(Rewrite {
                partitions: vec!["d=2024-05-01".to_string(), "d=2024-05-02".to_string()],
                min_input_files: 2,
                mid_sized: MidSizedFiles::In(vec!["d=2024-05-01".to_string()]),
                strategy: RunStrategy::Binpack,
                apply_deletes: false,
            }),
            nonce: String::new(),
            upto_seq: 4,
            last_failure: None,
        }
    }

    /// `rewrite()` with its rewrite changed by `change`.
    fn rewriting(change: impl FnOnce(&mut Rewrite)) -> ClaimTicket {
        let mut ticket = rewrite();
        if let Task::Rewrite(rewrite) = &mut ticket.task {
            change(rewrite);
        }
        ticket
    }

    fn engines(spark: bool) -> RoutedEngine {
        let config = config();
        let spark = spark.then(|| {
            SparkEngine::new(
                Arc::new(StandInRunner::succeeding(3)),
                CompactionSettings::from_config(config.clone()),
            )
        });
        let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
        RoutedEngine::new(spark, Some(native), config)
    }

    #[test]
    fn a_bin_pack_of_a_rest_table_is_the_native_engines_with_the_runs_own_terms() {
        let routed = engines(true);
        let native = routed.native_task(&task("a.orders", rewrite())).unwrap();
        assert_eq!(native.table, "a.orders");
        assert_eq!(native.catalog_name, "lakehouse");
        assert_eq!(native.partitions, rewrite().partitions());
        assert_eq!(
            native.joining,
            MidSizedFiles::In(vec!["d=2024-05-01".to_string()])
        );
        assert_eq!(native.min_input_files, 2);
        assert_eq!(native.small_file_bytes, 64 * 1024 * 1024);
        assert_eq!(native.run_id, "r1");
        // A reconcile reads the table: the native engine's too.
        let reconcile = ClaimTicket {
            trigger: Trigger::Reconcile,
            task: Task::Reconcile,
            ..rewrite()
        };
        assert!(routed.native_task(&task("a.orders", reconcile)).is_ok());
    }

    #[test]
    fn what_the_native_engine_cannot_do_is_refused_with_the_reason() {
        let routed = engines(true);
        let refused = |table: &str, ticket: ClaimTicket| {
            routed.native_task(&task(table, ticket)).unwrap_err()
        };
        let sorted =
            rewriting(|rewrite| rewrite.strategy = RunStrategy::Sort(Some("id".to_string())));
        assert!(refused("a.orders", sorted).contains("bin-packs"));
        let manifests = ClaimTicket {
            task: Task::Maintenance(crate::table::state::Maintenance::RewriteManifests),
            ..rewrite()
        };
        assert!(refused("a.orders", manifests).contains("rewrite_manifests"));
        let statistics = ClaimTicket {
            task: Task::Maintenance(crate::table::state::Maintenance::ComputeStatistics),
            ..rewrite()
        };
        assert!(refused("a.orders", statistics).contains("compute_statistics is a Spark procedure"));
        let order = ClaimTicket {
            trigger: Trigger::ReadOrder,
            task: Task::ReadOrder,
            ..rewrite()
        };
        assert!(refused("a.orders", order).contains("sort order"));
        assert!(refused("a.events", rewrite()).contains("Glue"));
    }

    #[test]
    fn a_run_due_by_its_deletes_is_the_native_engines() {
        let routed = engines(true);
        let deletes = rewriting(|rewrite| rewrite.apply_deletes = true);
        let native = routed
            .native_task(&task("a.orders", deletes))
            .expect("a data rewrite applying deletes is native");
        assert!(native.apply_deletes);
    }

    #[tokio::test]
    async fn auto_sends_what_the_native_engine_cannot_do_to_spark_and_says_why() {
        let routed = engines(true);
        let sorted =
            rewriting(|rewrite| rewrite.strategy = RunStrategy::Sort(Some("id".to_string())));
        let ended = routed.run(&task("a.orders", sorted)).await;
        assert!(
            matches!(ended.outcome, RunOutcome::Success { .. }),
            "{ended:?}"
        );
        assert_eq!(ended.ran_on.engine, "spark");
        assert!(
            ended
                .ran_on
                .detail
                .contains("auto: the native engine bin-packs"),
            "{:?}",
            ended.ran_on
        );
        let ended = routed.run(&task("a.events", rewrite())).await;
        assert_eq!(ended.ran_on.engine, "spark");
        assert!(ended.ran_on.detail.contains("Glue"), "{:?}", ended.ran_on);
    }

    #[tokio::test]
    async fn a_native_table_never_goes_to_spark() {
        let routed = engines(true);
        let sorted =
            rewriting(|rewrite| rewrite.strategy = RunStrategy::Sort(Some("id".to_string())));
        let ended = routed.run(&task("a.native", sorted)).await;
        assert_eq!(ended.ran_on.engine, "native");
        match ended.outcome {
            RunOutcome::Failure { class, excerpt, .. } => {
                assert_eq!(class, FailureClass::InvalidInput);
                assert!(excerpt.contains("bin-packs"), "{excerpt}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// `CONFIG` with one more table, `a.extra` of `engine`, with `keys`.
    fn config_with(engine: &str, keys: &str) -> Arc<Config> {
        let text = format!("{CONFIG}\n[[tables]]\ntable = \"a.extra\"\nbucket = \"lake\"\nprefix = \"extra/\"\nengine = \"{engine}\"\n{keys}\n");
        Arc::new(Config::from_toml_str(&text).unwrap())
    }

    fn extra_task(config: &Arc<Config>, ticket: ClaimTicket) -> RunTask {
        let spec = config
            .table_specs()
            .into_iter()
            .find(|spec| spec.table == "a.extra")
            .unwrap();
        RunTask {
            spec: Arc::new(spec),
            ticket,
            timeout: std::time::Duration::from_secs(60),
            claimed: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_rewrite_followed_by_expire_snapshots_is_sparks_and_never_skips_the_expiry() {
        let expiring = "expire_snapshots_older_than_hours = 24";
        let config = config_with("auto", expiring);
        let spark = SparkEngine::new(
            Arc::new(StandInRunner::succeeding(3)),
            CompactionSettings::from_config(config.clone()),
        );
        let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
        let routed = RoutedEngine::new(Some(spark), Some(native), config.clone());
        let ended = routed.run(&extra_task(&config, rewrite())).await;
        assert_eq!(ended.ran_on.engine, "spark", "{:?}", ended.ran_on);
        assert!(
            ended.ran_on.detail.contains("auto: expire_snapshots"),
            "{:?}",
            ended.ran_on
        );
        // A read expires nothing: still the native engine's.
        let reconcile = ClaimTicket {
            trigger: Trigger::Reconcile,
            task: Task::Reconcile,
            ..rewrite()
        };
        assert!(routed.native_task(&extra_task(&config, reconcile)).is_ok());

        // `engine = "native"`: the run fails with the reason rather than leave snapshots unexpired.
        let config = config_with("native", expiring);
        let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
        let routed = RoutedEngine::new(None, Some(native), config.clone());
        let ended = routed.run(&extra_task(&config, rewrite())).await;
        assert_eq!(ended.ran_on.engine, "native");
        match ended.outcome {
            RunOutcome::Failure { class, excerpt, .. } => {
                assert_eq!(class, FailureClass::InvalidInput);
                assert!(excerpt.contains("expire_snapshots"), "{excerpt}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_native_table_asking_for_what_only_spark_does_is_refused_at_start_with_the_key() {
        for (keys, named) in [
            (
                "strategy = \"sort\"\nsort_order = \"id\"",
                "strategy = \"sort\"",
            ),
            ("strategy = \"auto\"", "strategy = \"auto\""),
            ("max_manifests = 100", "max_manifests"),
            (
                "remove_orphans_every_hours = 24",
                "remove_orphans_every_hours",
            ),
            ("delete_file_threshold = 10", "delete_file_threshold"),
            ("compute_statistics = true", "compute_statistics"),
            (
                "expire_snapshots_older_than_hours = 24",
                "expire_snapshots_older_than_hours",
            ),
            ("where = \"id > 0\"", "`where`"),
            (
                "options = { \"max-file-group-size-bytes\" = \"1\" }",
                "`options`",
            ),
        ] {
            let refusal = engine_from_config(&config_with("native", keys))
                .err()
                .unwrap_or_else(|| panic!("{keys}: accepted"));
            assert!(
                refusal.contains("a.extra") && refusal.contains(named),
                "{keys}: {refusal}"
            );
            // The same table with `auto` sends those runs to Spark.
            assert!(
                engine_from_config(&config_with("auto", keys)).is_ok(),
                "{keys}"
            );
        }
        assert!(engine_from_config(&config_with("native", "min_files = 20")).is_ok());
    }

    #[test]
    fn a_native_table_in_a_catalog_it_cannot_commit_to_is_refused_at_start() {
        let text = format!("{CONFIG}\n[[tables]]\ntable = \"a.glued\"\nbucket = \"lake\"\nprefix = \"glued/\"\ncatalog = \"glue\"\nengine = \"native\"\n");
        let config = Arc::new(Config::from_toml_str(&text).unwrap());
        let refusal = engine_from_config(&config).err().unwrap();
        assert!(
            refusal.contains("a.glued") && refusal.contains("Glue"),
            "{refusal}"
        );
        // Only native tables: no Spark engine to probe, nothing else needed.
        let native_only = Arc::new(
            Config::from_toml_str(
                "[[tables]]\ntable = \"a.b\"\nbucket = \"lake\"\nprefix = \"b/\"\nengine = \"native\"\n[catalogs.lakehouse]\nuri = \"http://127.0.0.1:1\"\n",
            )
            .unwrap(),
        );
        assert_eq!(
            engine_from_config(&native_only).unwrap().describe(),
            "native"
        );
    }
}
