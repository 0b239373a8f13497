//! `rewrite_manifests` in the native engine: the data manifests of the table's current
//! partition spec rewritten as Iceberg's `RewriteManifests` action does — their live entries
//! clustered by partition (in partition order, so each manifest's partition bounds are narrow
//! and a query's partition filter skips most manifests) into manifests of about the table's
//! `commit.manifest.target-size-bytes` (8 MiB by default), every entry `EXISTING` with its
//! snapshot id and sequence numbers kept; delete manifests and those of older specs are carried
//! over. One `replace` snapshot with the same files (`manifests-created`, `-kept`, `-replaced`,
//! `entries-processed` in its summary, the totals unchanged). A commit that loses a race is done
//! again on the table as it is then, at most [`super::COMMIT_ATTEMPTS`] times.

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataFile, FormatVersion, ManifestContentType, ManifestFile, ManifestWriterBuilder, Snapshot,
    MAIN_BRANCH,
};

use super::catalog::{CommitError, TableCatalog};
use super::snapshot::{
    metadata_directory, new_snapshot_id, remove_files, replace_snapshot, MANIFEST_WRITES,
};
use super::table::{partition_values, ManifestCache, TableState};
use super::{NativeError, COMMIT_ATTEMPTS};

/// The table property with the size manifests are written to, and Iceberg's default for it.
const TARGET_SIZE_PROPERTY: &str = "commit.manifest.target-size-bytes";
const TARGET_SIZE_DEFAULT: u64 = 8 * 1024 * 1024;

/// What a manifest rewrite did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestsReport {
    /// Manifests replaced and written (0 and 0: nothing to rewrite).
    pub replaced: u64,
    pub created: u64,
    /// Manifests carried over (delete manifests, older specs').
    pub kept: u64,
    /// Live entries rewritten.
    pub entries: u64,
    pub snapshot_id: Option<i64>,
}

/// One live data file of a rewritten manifest, with what its entry keeps.
struct Entry {
    key: String,
    file: DataFile,
    snapshot_id: i64,
    sequence: i64,
    file_sequence: Option<i64>,
}

/// Rewrites the table's data manifests (see the module's note) and commits.
pub async fn rewrite_manifests(
    catalog: &dyn TableCatalog,
    run_id: &str,
) -> Result<ManifestsReport, NativeError> {
    let cache = ManifestCache::default();
    let mut last_conflict = String::new();
    for attempt in 1..=COMMIT_ATTEMPTS {
        let base = TableState::read(catalog.load().await?, &cache).await?;
        if base.table.metadata.format_version() != FormatVersion::V2 {
            return Err(NativeError::Unsupported(format!(
                "rewrite_manifests of a format version {} table is Spark's (the native engine writes v2 manifests)",
                base.table.metadata.format_version()
            )));
        }
        let Some((snapshot, written, report)) = stage(&base, run_id, attempt).await? else {
            return Ok(ManifestsReport::default());
        };
        match catalog.commit(&base.table, snapshot).await {
            Ok(_) => return Ok(report),
            Err(CommitError::Conflict(message)) => {
                remove_files(&base.table.file_io, &written).await;
                last_conflict = message;
            }
            Err(CommitError::StateUnknown(message)) => {
                // Its files may be the table's now: kept (an orphan at worst).
                return Err(NativeError::CommitStateUnknown(message));
            }
            Err(CommitError::Failed(error)) => {
                remove_files(&base.table.file_io, &written).await;
                return Err(error);
            }
        }
    }
    Err(NativeError::CommitConflict(format!(
        "the table changed under {COMMIT_ATTEMPTS} attempts: {last_conflict}"
    )))
}

/// The manifests and manifest list of the rewrite on `base`, written; `None` when there is
/// nothing to rewrite (no snapshot, or fewer than two manifests of the current spec).
async fn stage(
    base: &TableState,
    run_id: &str,
    attempt: u32,
) -> Result<Option<(Snapshot, Vec<String>, ManifestsReport)>, NativeError> {
    let metadata = &base.table.metadata;
    if metadata.snapshot_for_ref(MAIN_BRANCH).is_none() {
        return Ok(None);
    }
    let spec = metadata.default_partition_spec();
    let (rewritten, kept): (Vec<_>, Vec<_>) = base.manifests.iter().partition(|loaded| {
        loaded.file.content == ManifestContentType::Data
            && loaded.file.partition_spec_id == spec.spec_id()
    });
    if rewritten.len() < 2 {
        return Ok(None);
    }
    let schema = metadata.current_schema();
    let mut entries = Vec::new();
    let mut bytes = 0u64;
    for loaded in &rewritten {
        bytes = bytes.saturating_add(loaded.file.manifest_length.max(0) as u64);
        for entry in loaded
            .manifest
            .entries()
            .iter()
            .filter(|entry| entry.is_alive())
        {
            let sequence = entry.sequence_number().ok_or_else(|| {
                NativeError::InvalidInput(format!(
                    "manifest entry of {} has no sequence number",
                    entry.file_path()
                ))
            })?;
            let values =
                partition_values(spec, schema, entry.data_file().partition()).ok_or_else(|| {
                    NativeError::InvalidInput(format!(
                        "the partition values of {} do not fit the table's spec",
                        entry.file_path()
                    ))
                })?;
            let partition: Vec<String> = values
                .into_iter()
                .map(|(field, value)| format!("{field}={value}"))
                .collect();
            entries.push(Entry {
                key: format!("{}\u{0}{}", partition.join("/"), entry.file_path()),
                file: entry.data_file().clone(),
                snapshot_id: entry.snapshot_id().unwrap_or(loaded.file.added_snapshot_id),
                sequence,
                file_sequence: entry.file_sequence_number.or(Some(sequence)),
            });
        }
    }
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    // Entries a manifest holds: the target size over the entries' average size in the
    // manifests read (as Java estimates it).
    let target = metadata
        .properties()
        .get(TARGET_SIZE_PROPERTY)
        .and_then(|value| value.parse::<u64>().ok())
        .filter(|size| *size > 0)
        .unwrap_or(TARGET_SIZE_DEFAULT);
    let average = (bytes / (entries.len().max(1) as u64)).max(1);
    let per_manifest = ((target / average).max(1)) as usize;

    let file_io = &base.table.file_io;
    let snapshot_id = new_snapshot_id(base);
    let directory = metadata_directory(base);
    let nonce = format!("{:016x}", fastrand::u64(..));
    let mut written = Vec::new();
    let result = async {
        let mut writers = Vec::new();
        for (index, chunk) in entries.chunks(per_manifest).enumerate() {
            let path = format!("{directory}/{nonce}-m{index}.avro");
            let output = file_io
                .new_output(&path)
                .map_err(|error| super::storage_error("creating a manifest", error))?;
            let mut writer = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                schema.clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data();
            for entry in chunk {
                writer
                    .add_existing_file(
                        entry.file.clone(),
                        entry.snapshot_id,
                        entry.sequence,
                        entry.file_sequence,
                    )
                    .map_err(|error| {
                        NativeError::Other(format!("cannot rewrite a manifest entry: {error}"))
                    })?;
            }
            written.push(path);
            writers.push(writer);
        }
        let created: Vec<ManifestFile> = futures::stream::iter(writers)
            .map(|writer| async move {
                writer
                    .write_manifest_file()
                    .await
                    .map_err(|error| super::storage_error("writing a manifest", error))
            })
            .buffered(MANIFEST_WRITES)
            .try_collect()
            .await?;
        let report = ManifestsReport {
            replaced: rewritten.len() as u64,
            created: created.len() as u64,
            kept: kept.len() as u64,
            entries: entries.len() as u64,
            snapshot_id: Some(snapshot_id),
        };
        let list_path = format!("{directory}/snap-{snapshot_id}-{attempt}-{nonce}.avro");
        written.push(list_path.clone());
        let manifests = created
            .into_iter()
            .chain(kept.iter().map(|loaded| loaded.file.clone()))
            .collect();
        let snapshot = replace_snapshot(
            base,
            snapshot_id,
            list_path,
            manifests,
            summary(&report, base, run_id),
        )
        .await?;
        Ok((snapshot, report))
    }
    .await;
    match result {
        Ok((snapshot, report)) => Ok(Some((snapshot, written, report))),
        Err(error) => {
            remove_files(file_io, &written).await;
            Err(error)
        }
    }
}

/// The summary of a manifest rewrite, as Java's `BaseRewriteManifests` fills it: the manifest
/// counts, the entries processed, the unchanged totals.
fn summary(report: &ManifestsReport, base: &TableState, run_id: &str) -> HashMap<String, String> {
    let totals = base.totals();
    [
        ("manifests-created", report.created),
        ("manifests-kept", report.kept),
        ("manifests-replaced", report.replaced),
        ("entries-processed", report.entries),
        ("total-records", totals.records),
        ("total-files-size", totals.files_size),
        ("total-data-files", totals.data_files),
        ("total-delete-files", totals.delete_files),
        ("total-position-deletes", totals.position_deletes),
        ("total-equality-deletes", totals.equality_deletes),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .chain([(
        super::snapshot::RUN_ID_PROPERTY.to_string(),
        run_id.to_string(),
    )])
    .collect()
}
