//! The JVM-free engine: compacts an Iceberg table's small data files inside icepack's process,
//! with Apache Iceberg in Rust (iceberg 0.10) reading the metadata and data files and writing the
//! outputs, and icepack building the `replace` snapshot and committing it to the catalog itself.
//!
//! A run ([`NativeEngine::run`]):
//! 1. loads the table from its catalog (REST, Glue or JDBC: `catalog.rs`) and reads the manifests of its
//!    current snapshot (`table.rs`): the plan works from the metadata, never from icepack's counts;
//! 2. plans (`plan.rs`, pure): the run's partitions, their small files (and mid-sized ones where
//!    the run says so), per partition of the current spec and for older specs together,
//!    bin-packed into file groups ([`MAX_GROUP_BYTES`]);
//!    a partition where a delete file applies that the engine cannot apply (an equality delete on
//!    an optional column) is refused as [`NativeError::Unsupported`] (so are format v1 and v3
//!    tables, files not in Parquet, and runs over `max_run_bytes`);
//! 3. rewrites each group (`rewrite.rs`): reads with the current schema, the position and
//!    equality deletes that apply to its inputs applied, writes Parquet files of the target size
//!    (measured on the files written) in the table's current partition spec (rows of older specs' files moved to
//!    the partition their values give) with the table's write properties, and checks that the
//!    rows written are the rows read;
//! 4. commits one `replace` snapshot (`snapshot.rs`, driven by `run.rs`) — one per group with
//!    partial progress — with
//!    the starting snapshot's sequence number as the outputs' data sequence number. On a conflict
//!    it reloads and commits again only while every input is still live and no position delete
//!    committed since the start applies to an input (`plan::validate_rewrite`), at most
//!    [`COMMIT_ATTEMPTS`] times; then `commit_conflict`;
//! 5. reports what icepack's settlement needs ([`NativeReport`], the Spark path's
//!    `runs::report::ReportSummary`), read from the metadata after the commit.
//!
//! [`NativeEngine::plan`] plans the same way and writes nothing (`icepack plan`).
//!
//! Outputs of a failed or timed-out run never become live: they are deleted, best effort, and
//! what a crash (kill -9) leaves is an orphan for `remove_orphan_files`; a commit whose outcome is
//! unknown keeps its files. [`NativeEngine::recover`] decides a run's outcome from the metadata:
//! its replace snapshots carry `icepack.run-id` in their summary.
//!
//! Bounds: runs at once (a semaphore), threads (the engine's own tokio runtime, so a run never
//! occupies the actors' threads), and bytes read per run ([`NativeLimits`]). The deadline applies
//! to reading and writing; a commit that started finishes (bounded by the catalog's timeouts), so
//! a deadline never leaves a commit half-known.

mod catalog;
mod expire;
mod glue;
mod human;
mod jdbc;
mod maintenance;
mod manifests;
mod orphans;
mod plan;
mod rest;
mod rewrite;
mod run;
mod sigv4;
mod snapshot;
mod sort;
mod storage;
mod table;
#[cfg(test)]
mod testdata;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_config::SdkConfig;
use iceberg::spec::{DataFile, FormatVersion, Transform as IcebergTransform};
use thiserror::Error;
use tokio::sync::{OnceCell, Semaphore};
use tracing::{info, warn};

pub use catalog::{catalog_kind, CatalogKind};
pub use expire::{ExpireReport, ExpireRequest};
pub use maintenance::{MaintenanceReport, MaintenanceTask, NativeMaintenance};
pub use manifests::ManifestsReport;
pub use orphans::{OrphanReport, OrphanRequest};
pub use plan::MidSizedFiles;
pub use sort::RowOrder;

use crate::base::clock::UnixMillis;
use crate::config::CatalogConfig;
use crate::model::preview::{EnginePlan, GroupPreview};
use crate::model::report::{
    DeleteRead, FailureClass, LeftPartition, MaintenanceFailure, ReportSummary, RewriteResult,
    LEFT_KEPT,
};
use crate::table::partitions::{PartitionField, Transform};
use catalog::{CommitError, TableCatalog};
use plan::{DataFileFacts, FileGroup, PlanError, PlanRequest};
use rewrite::{OutputLog, WriteSettings};
#[cfg(test)]
use run::execute_on;
use run::{execute, KeptOutputs, Tally};
use table::{ManifestCache, TableState};

/// Writers' clocks differ from icepack's: snapshots this much older than the window still count
/// as committed in it (as the Spark engine's query reads them).
const CLOCK_MARGIN_MILLIS: i64 = 5 * 60 * 1000;

/// Input bytes of one file group at most: `rewrite_data_files`' `max-file-group-size-bytes`
/// default (100 GiB). A group is read and written as a stream, so its size costs no memory; what
/// bounds a run is [`NativeLimits::max_run_bytes`].
const MAX_GROUP_BYTES: u64 = 100 * 1024 * 1024 * 1024;

/// Attempts at committing one rewrite (the first and the retries after conflicts).
pub const COMMIT_ATTEMPTS: u32 = 4;

/// What a native run is asked to do: engine-neutral, no SQL.
#[derive(Debug, Clone)]
pub struct NativeTask {
    /// The catalog's name (Iceberg's JDBC catalog keys its rows by it).
    pub catalog_name: String,
    pub catalog: CatalogConfig,
    /// `namespace.table`.
    pub table: String,
    /// Partition paths as icepack knows them (`ts_day=2024-05-01/region=eu`, `""` for an
    /// unpartitioned table); empty: the whole table.
    pub partitions: Vec<String>,
    /// Where mid-sized files join the small ones (partitions gone quiet).
    pub joining: MidSizedFiles,
    /// Files strictly smaller than this are small files.
    pub small_file_bytes: u64,
    pub target_file_bytes: u64,
    pub min_input_files: u64,
    /// A run due by its deletes: every data file a delete applies to is rewritten too.
    pub apply_deletes: bool,
    /// How the outputs' rows are ordered.
    pub order: RowOrder,
    /// One commit per group instead of one for the run.
    pub partial_progress: bool,
    /// `expire_snapshots` after the rewrite, as the table configures it.
    pub expire: Option<ExpireRequest>,
    /// Reading and writing stop here; a commit that started finishes.
    pub deadline: Instant,
    pub run_id: String,
    /// The report lists the data files committed since this time.
    pub committed_since_millis: UnixMillis,
}

/// What a native run did, as icepack's settlement needs it (see [`ReportSummary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeReport {
    pub result: RewriteResult,
    /// The data files the run's snapshots added.
    pub output_files: Vec<String>,
    /// The run's `replace` snapshots (one, or one per group with partial progress).
    pub snapshot_ids: Vec<i64>,
    /// The table's current partition spec.
    pub spec: Vec<PartitionField>,
    /// The table's small data files after the run: (path, size).
    pub truth: Vec<(String, u64)>,
    /// Data and delete files committed by any snapshot since the task's
    /// `committed_since_millis`.
    pub committed: Vec<String>,
    /// Manifests of the current snapshot.
    pub manifest_count: u64,
    pub deletes: DeleteRead,
    /// The partitions the run was asked for and did not rewrite, with why (at most
    /// [`LEFT_KEPT`]; a whole-table run that rewrote nothing: one entry for the table).
    pub left: Vec<LeftPartition>,
    /// A step after the rewrite's commit that failed (`expire_snapshots`); the run succeeded.
    pub maintenance_failed: Option<MaintenanceFailure>,
}

impl From<NativeReport> for ReportSummary {
    fn from(report: NativeReport) -> ReportSummary {
        ReportSummary {
            result: report.result,
            output_files: report.output_files,
            spec: Some(report.spec),
            truth: Some(report.truth),
            committed: report.committed,
            manifest_count: Some(report.manifest_count),
            deletes: Some(report.deletes),
            left: report.left,
            maintenance_failed: report.maintenance_failed,
            ..ReportSummary::default()
        }
    }
}

/// Why a native run failed. Messages are short and carry no secret.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NativeError {
    /// The run needs an engine that can do what this one cannot (deletes, format v3 ...).
    #[error("not for the native engine: {0}")]
    Unsupported(String),
    /// The run reads more than `max_run_bytes`: it goes to Spark when one is configured.
    #[error(
        "the run would read {input_bytes} bytes, over the native engine's limit of {limit_bytes}"
    )]
    RunTooLarge { input_bytes: u64, limit_bytes: u64 },
    /// The table, its metadata or the catalog section is not what it must be.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("catalog unavailable: {0}")]
    CatalogUnavailable(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("commit conflict: {0}")]
    CommitConflict(String),
    #[error("commit state unknown: {0}")]
    CommitStateUnknown(String),
    #[error("deadline passed: {0}")]
    Timeout(String),
    #[error("{0}")]
    Other(String),
}

impl NativeError {
    /// The class settlement and alerts know.
    pub fn class(&self) -> FailureClass {
        match self {
            NativeError::CommitConflict(_) => FailureClass::CommitConflict,
            NativeError::CommitStateUnknown(_) => FailureClass::CommitStateUnknown,
            NativeError::Timeout(_) => FailureClass::Timeout,
            NativeError::CatalogUnavailable(_) => FailureClass::EngineUnavailable,
            NativeError::Unsupported(_)
            | NativeError::RunTooLarge { .. }
            | NativeError::InvalidInput(_)
            | NativeError::Storage(_)
            | NativeError::Other(_) => FailureClass::Other,
        }
    }

    /// Whether the run should go to another engine (Spark) rather than be retried here.
    pub fn needs_another_engine(&self) -> bool {
        matches!(
            self,
            NativeError::Unsupported(_) | NativeError::RunTooLarge { .. }
        )
    }
}

impl From<PlanError> for NativeError {
    fn from(error: PlanError) -> NativeError {
        NativeError::Unsupported(error.to_string())
    }
}

/// An iceberg error as a short, secret-free message.
fn storage_error(what: &str, error: iceberg::Error) -> NativeError {
    let text: String = crate::base::redact::hide_secrets(&format!("{what}: {error}"))
        .chars()
        .take(600)
        .collect();
    match error.kind() {
        iceberg::ErrorKind::FeatureUnsupported => NativeError::Unsupported(text),
        _ => NativeError::Storage(text),
    }
}

/// How much the engine may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeLimits {
    /// Runs at once; more wait for a slot.
    pub max_concurrent_runs: usize,
    /// Worker threads of the engine's runtime.
    pub threads: usize,
    /// A run whose inputs hold more bytes is refused ([`NativeError::RunTooLarge`]).
    pub max_run_bytes: u64,
    /// Data files one run reads at once, at least: more when they are small
    /// (`rewrite::read_concurrency`).
    pub read_concurrency: usize,
}

impl Default for NativeLimits {
    fn default() -> Self {
        NativeLimits {
            max_concurrent_runs: 2,
            threads: std::thread::available_parallelism()
                .map(|cores| cores.get().min(4))
                .unwrap_or(2),
            max_run_bytes: 2 * 1024 * 1024 * 1024,
            read_concurrency: 2,
        }
    }
}

/// The engine: its runtime, its run slots, and what runs share (the AWS configuration and the
/// HTTP client of REST catalogs).
pub struct NativeEngine {
    runtime: Option<tokio::runtime::Runtime>,
    slots: Arc<Semaphore>,
    limits: NativeLimits,
    aws: Arc<OnceCell<SdkConfig>>,
    http: reqwest::Client,
}

impl Drop for NativeEngine {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime waits for its threads, which an async caller must not do.
            runtime.shutdown_background();
        }
    }
}

/// What one run needs of the engine.
#[derive(Clone)]
struct RunContext {
    aws: SdkConfig,
    http: reqwest::Client,
    runtime: iceberg::Runtime,
    limits: NativeLimits,
}

impl NativeEngine {
    pub fn new(limits: NativeLimits) -> Result<NativeEngine, NativeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(limits.threads.max(1))
            .thread_name("icepack-native")
            .enable_all()
            .build()
            .map_err(|error| {
                NativeError::Other(format!("cannot start the native engine's threads: {error}"))
            })?;
        Ok(NativeEngine {
            runtime: Some(runtime),
            slots: Arc::new(Semaphore::new(limits.max_concurrent_runs.max(1))),
            limits,
            aws: Arc::new(OnceCell::new()),
            http: rest::http_client()?,
        })
    }

    fn handle(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the engine")
    }

    async fn context(&self) -> RunContext {
        let aws = self.aws.clone();
        let aws = self
            .handle()
            .spawn(async move { aws.get_or_init(storage::load_aws_config).await.clone() })
            .await
            .expect("loading the AWS configuration does not panic");
        RunContext {
            aws,
            http: self.http.clone(),
            runtime: iceberg::Runtime::new(self.handle()),
            limits: self.limits,
        }
    }

    /// Runs a compaction, waiting for a slot first. The run goes on in the engine's runtime even
    /// if the caller stops waiting, so that it always ends clean (committed, or its outputs gone).
    pub async fn run(&self, task: NativeTask) -> Result<NativeReport, NativeError> {
        let _slot =
            self.slots.clone().acquire_owned().await.map_err(|_| {
                NativeError::Other("the native engine is shutting down".to_string())
            })?;
        let context = self.context().await;
        let log = OutputLog::default();
        let keep = KeptOutputs::default();
        let started = Instant::now();
        let table = task.table.clone();
        let run_id = task.run_id.clone();
        let joined = self
            .handle()
            .spawn({
                let (log, keep) = (log.clone(), keep.clone());
                async move { execute(context, task, log, keep).await }
            })
            .await;
        let result = match joined {
            Ok(result) => result,
            Err(error) => {
                // A panic inside the run: what it wrote and did not (maybe) commit is removed.
                warn!(table = %table, run = %run_id, "native run stopped: {error}");
                Err(NativeError::Other(format!(
                    "the native run stopped: {error}"
                )))
            }
        };
        match &result {
            Ok(report) => info!(
                table = %table,
                run = %run_id,
                rewritten = report.result.rewritten_data_files_count,
                added = report.result.added_data_files_count,
                millis = started.elapsed().as_millis() as u64,
                "native run committed"
            ),
            Err(error) => {
                warn!(table = %table, run = %run_id, class = error.class().as_str(), "native run failed: {error}")
            }
        }
        result
    }

    /// The table as its metadata has it, rewriting nothing (a reconcile): its partition spec,
    /// small files, files committed since the task's window began, manifests and deletes.
    pub async fn read(&self, task: NativeTask) -> Result<NativeReport, NativeError> {
        let context = self.context().await;
        self.handle()
            .spawn(async move {
                let catalog =
                    connect(&context, &task.catalog_name, &task.catalog, &task.table).await?;
                let cache = ManifestCache::default();
                build_report(catalog.as_ref(), &cache, &task, Tally::default()).await
            })
            .await
            .map_err(|error| NativeError::Other(format!("the native read stopped: {error}")))?
    }

    /// What a run of `task` would rewrite, read from the table as its catalog has it now;
    /// writes nothing and takes no run slot.
    pub async fn plan(&self, task: NativeTask) -> Result<EnginePlan, NativeError> {
        let context = self.context().await;
        self.handle()
            .spawn(async move {
                let catalog =
                    connect(&context, &task.catalog_name, &task.catalog, &task.table).await?;
                let cache = ManifestCache::default();
                let state = TableState::read(catalog.load().await?, &cache).await?;
                preview_on(&task, &state, &context.limits)
            })
            .await
            .map_err(|error| NativeError::Other(format!("the native plan stopped: {error}")))?
    }

    /// What a run committed, from the metadata alone (a run icepack lost track of: a restart,
    /// a crash): `None` when none of its snapshots is in the table, so nothing became live.
    pub async fn recover(&self, task: NativeTask) -> Result<Option<NativeReport>, NativeError> {
        let context = self.context().await;
        self.handle()
            .spawn(async move { recover_run(context, task).await })
            .await
            .map_err(|error| NativeError::Other(format!("the native recovery stopped: {error}")))?
    }
}

async fn connect(
    context: &RunContext,
    catalog_name: &str,
    catalog: &CatalogConfig,
    table: &str,
) -> Result<Box<dyn TableCatalog>, NativeError> {
    let kind = catalog_kind(catalog).map_err(NativeError::Unsupported)?;
    Ok(match kind {
        CatalogKind::Rest => Box::new(
            rest::RestTableCatalog::connect(
                context.http.clone(),
                context.aws.clone(),
                catalog,
                table,
            )
            .await?,
        ),
        CatalogKind::Glue => Box::new(glue::GlueTableCatalog::connect(
            context.http.clone(),
            &context.aws,
            catalog,
            table,
        )?),
        CatalogKind::JdbcSqlite | CatalogKind::JdbcPostgres => Box::new(
            jdbc::JdbcTableCatalog::connect(kind, &context.aws, catalog_name, catalog, table)
                .await?,
        ),
    })
}

/// Format v2 only: v1 has no sequence numbers to keep, v3's row lineage is not written here.
fn check_format(state: &TableState) -> Result<(), NativeError> {
    match state.table.metadata.format_version() {
        FormatVersion::V2 => {}
        other => {
            return Err(NativeError::Unsupported(format!(
                "format version {other} tables are compacted by Spark (the native engine writes v2)"
            )))
        }
    }
    if !storage::supported_location(state.table.metadata.location()) {
        return Err(NativeError::Unsupported(format!(
            "the table's location is not on S3 or a local disk ({})",
            state
                .table
                .metadata
                .location()
                .split("://")
                .next()
                .unwrap_or_default()
        )));
    }
    Ok(())
}

/// The plan of `task` on the table as `state` has it, refused as a run refuses it: a delete the
/// engine cannot apply on an input, an input not in Parquet, more input bytes than the engine takes. A run and
/// a preview (`icepack plan`) plan through here alike.
fn plan_on(
    task: &NativeTask,
    state: &TableState,
    limits: &NativeLimits,
) -> Result<(PlanRequest, plan::Plan), NativeError> {
    let (data_files, parquet): (Vec<DataFileFacts>, Vec<bool>) =
        state.data_facts().into_iter().unzip();
    let not_parquet: HashSet<&str> = data_files
        .iter()
        .zip(&parquet)
        .filter(|(_, parquet)| !**parquet)
        .map(|(file, _)| file.path.as_str())
        .collect();
    let request = PlanRequest {
        partitions: task.partitions.clone(),
        mid_sized: task.joining.clone(),
        small_file_bytes: task.small_file_bytes,
        target_file_bytes: task.target_file_bytes,
        min_input_files: task.min_input_files,
        max_group_bytes: MAX_GROUP_BYTES,
        output_spec_id: state.table.metadata.default_partition_spec_id(),
        with_deletes: task.apply_deletes,
    };
    let request = sort::bounded(request, &task.order, &state.table.metadata)?;
    let plan = plan::plan(&request, &data_files, &state.delete_facts())?;
    if let Some(file) = plan
        .groups
        .iter()
        .flat_map(|group| &group.files)
        .find(|file| not_parquet.contains(file.path.as_str()))
    {
        return Err(NativeError::Unsupported(format!(
            "data file {} is not Parquet",
            file.path
        )));
    }
    sort::check_groups(&task.order, &plan)?;
    if plan.input_bytes() > limits.max_run_bytes {
        return Err(NativeError::RunTooLarge {
            input_bytes: plan.input_bytes(),
            limit_bytes: limits.max_run_bytes,
        });
    }
    Ok((request, plan))
}

/// What a run of `task` would rewrite on the table as `state` has it: its groups (with the
/// position deletes each applies and the files it should make) and what it would leave.
fn preview_on(
    task: &NativeTask,
    state: &TableState,
    limits: &NativeLimits,
) -> Result<EnginePlan, NativeError> {
    check_format(state)?;
    let Some(snapshot) = state.snapshot.as_ref() else {
        return Ok(EnginePlan::default());
    };
    let (_, plan) = plan_on(task, state, limits)?;
    let deletes = state.delete_facts();
    let groups = plan
        .groups
        .iter()
        .map(|group| GroupPreview {
            partition: if group.repartition {
                group.describe()
            } else {
                group.partition_path()
            },
            files: group.files.len() as u64,
            bytes: group.input_bytes(),
            expected_output_files: group
                .input_bytes()
                .div_ceil(task.target_file_bytes.max(1))
                .max(1),
            position_deletes_applied: deletes
                .iter()
                .filter(|delete| delete.kind == plan::DeleteKind::Position)
                .filter(|delete| {
                    group
                        .files
                        .iter()
                        .any(|file| plan::delete_applies(delete, file))
                })
                .count() as u64,
        })
        .collect();
    Ok(EnginePlan {
        snapshot_id: Some(snapshot.snapshot_id()),
        groups,
        left: left_partitions(&plan.left),
    })
}

/// The report, from the table as it is after the run.
async fn build_report(
    catalog: &dyn TableCatalog,
    cache: &ManifestCache,
    task: &NativeTask,
    tally: Tally,
) -> Result<NativeReport, NativeError> {
    let state = TableState::read(catalog.load().await?, cache).await?;
    Ok(NativeReport {
        left: tally.left,
        maintenance_failed: tally.maintenance_failed,
        result: tally.result,
        output_files: tally.outputs,
        snapshot_ids: tally.snapshots,
        spec: current_spec(&state),
        truth: state.small_files(task.small_file_bytes),
        committed: state
            .committed_since(task.committed_since_millis - CLOCK_MARGIN_MILLIS, cache)
            .await?,
        manifest_count: state.manifests.len() as u64,
        deletes: state.delete_read(),
    })
}

/// The plan's left partitions as a report carries them: the first [`LEFT_KEPT`], and a last entry
/// that counts the others.
fn left_partitions(left: &[(Option<String>, plan::LeftReason)]) -> Vec<LeftPartition> {
    let mut kept: Vec<LeftPartition> = left
        .iter()
        .take(LEFT_KEPT)
        .map(|(partition, reason)| LeftPartition {
            partition: partition.clone(),
            reason: reason.to_string(),
        })
        .collect();
    if left.len() > LEFT_KEPT {
        kept.push(LeftPartition {
            partition: None,
            reason: format!("and {} more partitions", left.len() - LEFT_KEPT),
        });
    }
    kept
}

/// The table's current partition spec as icepack's partitions module names its fields.
fn current_spec(state: &TableState) -> Vec<PartitionField> {
    let metadata = &state.table.metadata;
    let schema = metadata.current_schema();
    metadata
        .default_partition_spec()
        .fields()
        .iter()
        .map(|field| {
            let source = schema
                .name_by_field_id(field.source_id)
                .unwrap_or(field.name.as_str())
                .to_string();
            let transform = match field.transform {
                IcebergTransform::Identity => Transform::Identity,
                IcebergTransform::Year => Transform::Year,
                IcebergTransform::Month => Transform::Month,
                IcebergTransform::Day => Transform::Day,
                IcebergTransform::Hour => Transform::Hour,
                IcebergTransform::Bucket(buckets) => {
                    Transform::Other(format!("bucket({buckets}, {source})"))
                }
                IcebergTransform::Truncate(width) => {
                    Transform::Other(format!("truncate({width}, {source})"))
                }
                other => Transform::Other(format!("{other}({source})")),
            };
            PartitionField {
                name: field.name.clone(),
                source_type: schema
                    .field_by_id(field.source_id)
                    .and_then(|source| spark_type_name(&source.field_type)),
                source,
                transform,
            }
        })
        .collect()
}

/// A primitive Iceberg type as Spark's `DESCRIBE` names it (what a Spark run's filters check
/// partition values against); `None` for nested types.
fn spark_type_name(field_type: &iceberg::spec::Type) -> Option<String> {
    use iceberg::spec::{PrimitiveType, Type};
    let Type::Primitive(primitive) = field_type else {
        return None;
    };
    Some(match primitive {
        PrimitiveType::Boolean => "boolean".to_string(),
        PrimitiveType::Int => "int".to_string(),
        PrimitiveType::Long => "bigint".to_string(),
        PrimitiveType::Float => "float".to_string(),
        PrimitiveType::Double => "double".to_string(),
        PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        PrimitiveType::Date => "date".to_string(),
        PrimitiveType::Timestamp | PrimitiveType::TimestampNs => "timestamp_ntz".to_string(),
        PrimitiveType::Timestamptz | PrimitiveType::TimestamptzNs => "timestamp".to_string(),
        PrimitiveType::String => "string".to_string(),
        _ => return None,
    })
}

async fn recover_run(
    context: RunContext,
    task: NativeTask,
) -> Result<Option<NativeReport>, NativeError> {
    let catalog = connect(&context, &task.catalog_name, &task.catalog, &task.table).await?;
    let cache = ManifestCache::default();
    let state = TableState::read(catalog.load().await?, &cache).await?;
    let snapshots = state.snapshots_of_run(&task.run_id);
    if snapshots.is_empty() {
        return Ok(None);
    }
    let mut tally = Tally::default();
    let number = |summary: &iceberg::spec::Summary, key: &str| {
        summary
            .additional_properties
            .get(key)
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for snapshot in &snapshots {
        let summary = snapshot.summary();
        tally.result.rewritten_data_files_count += number(summary, "deleted-data-files");
        tally.result.added_data_files_count += number(summary, "added-data-files");
        tally.result.rewritten_bytes_count += number(summary, "removed-files-size");
        tally.snapshots.push(snapshot.snapshot_id());
    }
    let own: HashSet<i64> = tally.snapshots.iter().copied().collect();
    for snapshot in state
        .table
        .metadata
        .snapshots()
        .filter(|snapshot| own.contains(&snapshot.snapshot_id()))
    {
        let list = table::manifest_list(&state.table, snapshot).await?;
        for file in list.entries() {
            if file.added_snapshot_id != snapshot.snapshot_id() || !file.has_added_files() {
                continue;
            }
            let manifest = file
                .load_manifest(&state.table.file_io)
                .await
                .map_err(|error| storage_error("reading a manifest", error))?;
            tally.outputs.extend(
                manifest
                    .entries()
                    .iter()
                    .filter(|entry| entry.status() == iceberg::spec::ManifestStatus::Added)
                    .map(|entry| entry.file_path().to_string()),
            );
        }
    }
    build_report(catalog.as_ref(), &cache, &task, tally)
        .await
        .map(Some)
}

#[cfg(test)]
#[path = "unit_tests.rs"]
mod unit_tests;
