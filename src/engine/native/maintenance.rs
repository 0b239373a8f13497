//! Table maintenance in the native engine: a procedure on one table, in the engine's runtime and
//! run slots as a compaction, bounded by its deadline: `remove_orphan_files` (`orphans.rs`) and
//! `rewrite_manifests` (`manifests.rs`). The table read after it is the routed engine's, as
//! after any run.

use std::time::Instant;

use tracing::{info, warn};

use super::manifests::{self, ManifestsReport};
use super::orphans::{self, OrphanReport, OrphanRequest};
use super::{connect, storage, storage_error, NativeEngine, NativeError, RunContext};
use crate::config::CatalogConfig;
use crate::model::report::{ManifestRewrite, ReportSummary};

/// A maintenance run of the native engine: one table, one procedure.
#[derive(Debug, Clone)]
pub struct MaintenanceTask {
    /// The catalog's name (Iceberg's JDBC catalog keys its rows by it).
    pub catalog_name: String,
    pub catalog: CatalogConfig,
    /// `namespace.table`.
    pub table: String,
    pub procedure: NativeMaintenance,
    /// The run stops here (before deleting, or between deletions).
    pub deadline: Instant,
    pub run_id: String,
}

/// The maintenance the native engine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeMaintenance {
    RemoveOrphans(OrphanRequest),
    RewriteManifests,
}

/// What a native maintenance run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenanceReport {
    Orphans(OrphanReport),
    Manifests(ManifestsReport),
}

impl MaintenanceReport {
    /// Adds what the procedure did to the report of the table read after it.
    pub fn describe(&self, summary: &mut ReportSummary) {
        match self {
            MaintenanceReport::Orphans(orphans) => {
                summary.orphan_files = Some(orphans.orphans.len() as u64);
            }
            MaintenanceReport::Manifests(manifests) => {
                summary.manifests = Some(ManifestRewrite {
                    rewritten_manifests_count: manifests.replaced,
                    added_manifests_count: manifests.created,
                });
            }
        }
    }
}

impl NativeEngine {
    /// Runs a maintenance procedure, waiting for a slot first; as a compaction, it goes on in
    /// the engine's runtime to its end (or its deadline) even if the caller stops waiting.
    pub async fn maintain(&self, task: MaintenanceTask) -> Result<MaintenanceReport, NativeError> {
        let _slot =
            self.slots.clone().acquire_owned().await.map_err(|_| {
                NativeError::Other("the native engine is shutting down".to_string())
            })?;
        let context = self.context().await;
        let (table, run_id) = (task.table.clone(), task.run_id.clone());
        let started = Instant::now();
        let result = self
            .handle()
            .spawn(async move {
                let deadline = tokio::time::Instant::from_std(task.deadline);
                match tokio::time::timeout_at(deadline, maintain(context, task)).await {
                    Ok(result) => result,
                    Err(_) => Err(NativeError::Timeout(
                        "the maintenance run's deadline passed".to_string(),
                    )),
                }
            })
            .await
            .map_err(|error| NativeError::Other(format!("the native maintenance stopped: {error}")))
            .and_then(|result| result);
        match &result {
            Ok(MaintenanceReport::Orphans(report)) => info!(
                table = %table,
                run = %run_id,
                dry_run = report.dry_run,
                listed = report.listed,
                reachable = report.reachable,
                orphans = report.orphans.len(),
                young = report.young,
                hidden = report.hidden,
                millis = started.elapsed().as_millis() as u64,
                "native remove_orphan_files done"
            ),
            Ok(MaintenanceReport::Manifests(report)) => info!(
                table = %table,
                run = %run_id,
                replaced = report.replaced,
                created = report.created,
                kept = report.kept,
                entries = report.entries,
                millis = started.elapsed().as_millis() as u64,
                "native rewrite_manifests done"
            ),
            Err(error) => {
                warn!(table = %table, run = %run_id, class = error.class().as_str(), "native maintenance failed: {error}")
            }
        }
        result
    }
}

/// A maintenance procedure, from loading the table to its end.
async fn maintain(
    context: RunContext,
    task: MaintenanceTask,
) -> Result<MaintenanceReport, NativeError> {
    let catalog = connect(&context, &task.catalog_name, &task.catalog, &task.table).await?;
    let table = catalog.load().await?;
    if !storage::supported_location(table.metadata.location()) {
        return Err(NativeError::Unsupported(
            "the table's location is not on S3 or a local disk".to_string(),
        ));
    }
    match task.procedure {
        NativeMaintenance::RemoveOrphans(request) => {
            let reachable = orphans::reachable(&table).await?;
            let location = table.metadata.location().trim_end_matches('/');
            let listed = table
                .storage
                .list(location)
                .await
                .map_err(|error| storage_error("listing the table's location", error))?;
            let report = orphans::find_orphans(
                location,
                listed,
                &reachable,
                &orphans::partition_field_names(&table.metadata),
                request,
            )?;
            for path in report.orphans.iter().take(orphans::NAMED_ORPHANS) {
                info!(
                    table = %task.table,
                    run = %task.run_id,
                    dry_run = request.dry_run,
                    "orphan file {path:?}"
                );
            }
            if !request.dry_run && !report.orphans.is_empty() {
                let failed = table
                    .storage
                    .delete_files(&report.orphans)
                    .await
                    .map_err(|error| storage_error("deleting orphan files", error))?;
                if let Some((path, why)) = failed.first() {
                    return Err(NativeError::Storage(crate::base::redact::hide_secrets(
                        &format!(
                            "{} of {} orphan files were not deleted (the first, {path:?}: {why})",
                            failed.len(),
                            report.orphans.len()
                        ),
                    )));
                }
            }
            Ok(MaintenanceReport::Orphans(report))
        }
        NativeMaintenance::RewriteManifests => Ok(MaintenanceReport::Manifests(
            manifests::rewrite_manifests(catalog.as_ref(), &task.run_id).await?,
        )),
    }
}
