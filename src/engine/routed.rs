//! One engine per run, by the table's `engine`: Spark, the native engine, or `auto` — the native
//! engine for the runs it can do, Spark for the others. What the native engine can do is known
//! in part before a run (the task: a bin-pack or sorted rewrite, `remove_orphan_files`,
//! `rewrite_manifests` or a reconcile of a table in a REST, Glue or JDBC catalog) and in part only from
//! the table's metadata (an equality delete on an optional column applying to an input, format
//! v3, a run over `[native] max_run_mb`): such a run goes to Spark then, and the run history says
//! why.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use super::native::{
    catalog_kind, ExpireRequest, MaintenanceTask, MidSizedFiles, NativeEngine, NativeError,
    NativeMaintenance, NativeTask, OrphanRequest, RowOrder,
};
use super::spark::SparkEngine;
use super::{Engine, EngineRun, PlannedRun, RanOn, RunTask};
use crate::config::{CatalogConfig, Config, EngineChoice, TableSpec};
use crate::runs::report::{FailureClass, ReportSummary, RunOutcome};
use crate::runs::settings::CompactionSettings;
use crate::runs::strategy::{RunStrategy, Strategy};
use crate::runs::task::{Maintenance, Task};

/// What a run recorded as the native engine's says.
pub const NATIVE: &str = "native";

/// What the native engine is asked to do for a run.
enum NativeJob {
    /// A rewrite, or a read of the table (a reconcile).
    Rewrite(NativeTask),
    /// A procedure, then the table read (what settlement reads after any run).
    Maintenance(Box<MaintenanceTask>, NativeTask),
}

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

    /// The native engine's job for a run, or why the native engine cannot run it (known
    /// before reading the table).
    fn native_job(&self, task: &RunTask) -> Result<NativeJob, String> {
        let ticket = &task.ticket;
        if let Task::Maintenance(maintenance) = &ticket.task {
            let procedure = match maintenance {
                Maintenance::RemoveOrphans { dry_run } => {
                    NativeMaintenance::RemoveOrphans(OrphanRequest {
                        older_than_millis: ticket.started_millis
                            - task.spec.orphan_older_than_hours as i64 * 3_600_000,
                        dry_run: *dry_run,
                    })
                }
                Maintenance::RewriteManifests => NativeMaintenance::RewriteManifests,
                other => return Err(format!("{} is a Spark procedure", other.as_str())),
            };
            let (catalog_name, catalog) = self.native_catalog(&task.spec)?;
            return Ok(NativeJob::Maintenance(
                Box::new(MaintenanceTask {
                    catalog_name,
                    catalog,
                    table: task.spec.table.clone(),
                    procedure,
                    deadline: Instant::now() + task.timeout,
                    run_id: ticket.run_id.clone(),
                }),
                self.native_task(task)?,
            ));
        }
        self.native_task(task).map(NativeJob::Rewrite)
    }

    /// The table's catalog section, if the native engine reaches its kind of catalog.
    fn native_catalog(&self, spec: &TableSpec) -> Result<(String, CatalogConfig), String> {
        let config = self.config();
        let catalog = config
            .catalogs
            .get(&spec.catalog)
            .ok_or_else(|| format!("no [catalogs.{}] section", spec.catalog))?;
        catalog_kind(catalog)?;
        Ok((spec.catalog.clone(), catalog.clone()))
    }

    /// The native engine's rewrite or read for a run, or why the native engine cannot run it
    /// (known before reading the table).
    fn native_task(&self, task: &RunTask) -> Result<NativeTask, String> {
        let ticket = &task.ticket;
        let rewrite = match &ticket.task {
            // The table read after the procedure, as after Spark's.
            Task::Maintenance(
                Maintenance::RemoveOrphans { .. } | Maintenance::RewriteManifests,
            ) => None,
            Task::Maintenance(maintenance) => {
                return Err(format!("{} is a Spark procedure", maintenance.as_str()));
            }
            Task::ReadOrder => return Err("reading the table's sort order is Spark's".into()),
            Task::Rewrite(rewrite) if matches!(rewrite.strategy, RunStrategy::Zorder(_)) => {
                return Err(format!(
                    "the native engine bin-packs and sorts; {} is Spark's",
                    rewrite.strategy.name()
                ));
            }
            Task::Rewrite(rewrite) => Some(rewrite),
            Task::Reconcile => None,
        };
        let spec = &task.spec;
        if let Some(reason) = spark_only_run_setting(spec) {
            return Err(reason);
        }
        let (catalog_name, catalog) = self.native_catalog(spec)?;
        Ok(NativeTask {
            catalog_name,
            catalog,
            table: spec.table.clone(),
            partitions: ticket.partitions().to_vec(),
            joining: rewrite.map_or(MidSizedFiles::Nowhere, |rewrite| rewrite.mid_sized.clone()),
            small_file_bytes: spec.thresholds.small_file_bytes,
            target_file_bytes: spec.target_file_bytes,
            min_input_files: rewrite.map_or(spec.min_input_files, |rewrite| {
                rewrite.min_input_files_or(spec.min_input_files)
            }),
            apply_deletes: rewrite.is_some_and(|rewrite| rewrite.apply_deletes),
            order: match rewrite.map(|rewrite| &rewrite.strategy) {
                Some(RunStrategy::Sort(None)) => RowOrder::Table,
                Some(RunStrategy::Sort(Some(order))) => RowOrder::Given(order.clone()),
                _ => RowOrder::AsRead,
            },
            partial_progress: crate::table::policy::commits_per_group(
                spec.partial_progress,
                ticket.last_failure,
            ),
            // After a rewrite, as Spark's job runs it: snapshots older than the table's hours
            // before the run started.
            expire: rewrite
                .and(spec.expire_snapshots_older_than_hours)
                .map(|hours| ExpireRequest {
                    older_than_millis: ticket.started_millis - hours as i64 * 3_600_000,
                    retain_last: spec
                        .expire_snapshots_retain_last
                        .map(|retain| retain.min(u32::MAX as u64) as u32),
                }),
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
        job: NativeJob,
    ) -> Result<RunOutcome, String> {
        let started = Instant::now();
        let result = match job {
            NativeJob::Maintenance(maintenance, read) => {
                match native.maintain(*maintenance).await {
                    Ok(done) => native.read(read).await.map(|report| {
                        let mut summary = ReportSummary::from(report);
                        done.describe(&mut summary);
                        summary
                    }),
                    Err(error) => Err(error),
                }
            }
            NativeJob::Rewrite(native_task) if task.ticket.task.rewrites_data() => {
                native.run(native_task).await.map(ReportSummary::from)
            }
            NativeJob::Rewrite(native_task) => {
                native.read(native_task).await.map(ReportSummary::from)
            }
        };
        let duration_millis = started.elapsed().as_millis() as u64;
        match result {
            Ok(report) => Ok(RunOutcome::Success {
                report,
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
fn spark_only_run_setting(spec: &TableSpec) -> Option<String> {
    if spec.where_filter.is_some() {
        return Some("a table's `where` filter is Spark SQL".into());
    }
    if !spec.rewrite_options.is_empty() {
        return Some("rewrite_data_files `options` are Spark's".into());
    }
    None
}

/// The first of a table's settings that asks for runs only Spark does (z-order and `auto`,
/// statistics, and [`spark_only_run_setting`]), as the reason
/// a table with `engine = "native"` is refused; `None` when the native engine does all of them.
pub fn spark_only_setting(spec: &TableSpec) -> Option<String> {
    if !matches!(spec.strategy, Strategy::Binpack | Strategy::Sort(_)) {
        return Some(format!(
            "strategy = \"{}\" is Spark's (the native engine bin-packs and sorts)",
            spec.strategy.name()
        ));
    }
    if spec.compute_statistics {
        return Some(
            "compute_table_stats and compute_partition_stats (`compute_statistics`) are Spark procedures"
                .into(),
        );
    }
    spark_only_run_setting(spec)
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
        let why = match self.native_job(task) {
            Ok(job) => match Self::run_native(native, task, job).await {
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
        if let (Some(_), true, Ok(NativeJob::Maintenance(..))) = (
            &self.native,
            choice != EngineChoice::Spark,
            self.native_job(task),
        ) {
            return PlannedRun {
                ran_on: Self::on_native(&format!("engine = \"{}\"", choice.as_str())),
                plan: Err(format!(
                    "{} rewrites no data: there is no plan to show",
                    task.ticket
                        .task
                        .maintenance()
                        .map_or("the run", |maintenance| maintenance.as_str())
                )),
            };
        }
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
mod tests;
