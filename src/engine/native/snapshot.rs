//! The `replace` snapshot of a rewrite, built from iceberg's public pieces on a base (the table
//! as loaded for this attempt):
//!
//! - the outputs in new manifests (one per partition spec), `ADDED` with the *starting*
//!   snapshot's sequence number as their data sequence number (Iceberg's
//!   `use-starting-sequence-number`: equality deletes committed during the run still apply to
//!   them, as to the rows they replace); their file sequence number is the new snapshot's;
//! - every data manifest that lists an input rewritten: inputs as `DELETED`, its other live files
//!   as `EXISTING` (snapshot id and sequence numbers kept), entries deleted earlier dropped;
//!   every other manifest carried over untouched;
//! - every delete manifest that lists a delete file the rewrite made dangling
//!   (`plan::dangling_deletes`): those entries as `DELETED`, its other live files as `EXISTING`;
//! - a manifest list, and the summary: `operation=replace`, what was added and removed, the
//!   `total-*` values counted from the manifests, and `icepack.run-id`, by which a recovery
//!   finds the run's commits in the metadata.

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataContentType, DataFile, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestStatus, ManifestWriter, ManifestWriterBuilder, Operation, Snapshot, Summary,
    MAIN_BRANCH,
};

use super::table::{FileTotals, TableState};
use super::NativeError;

/// Manifests written at once.
pub const MANIFEST_WRITES: usize = 16;

/// A manifest of the new snapshot: carried over from the base, or to be written at its path.
enum Manifest {
    Kept(ManifestFile),
    Write(String, ManifestWriter),
}

/// The summary key naming the icepack run that committed a snapshot.
pub const RUN_ID_PROPERTY: &str = "icepack.run-id";

/// A snapshot written (manifests and list) but not committed yet.
pub struct StagedReplace {
    pub snapshot: Snapshot,
    /// Delete files it removes (dangling after the rewrite).
    pub removed_delete_files: u64,
    /// Its manifests and manifest list: removed when the commit does not happen.
    pub written: Vec<String>,
}

/// What a rewrite adds and removes, in numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    pub added_files: u64,
    pub added_records: u64,
    pub added_bytes: u64,
    pub removed_files: u64,
    pub removed_records: u64,
    pub removed_bytes: u64,
    pub changed_partitions: u64,
    /// Delete files removed (dangling after the rewrite), their bytes, and by kind the files
    /// and the deletes they held.
    pub removed_delete_files: u64,
    pub removed_delete_bytes: u64,
    pub removed_position_delete_files: u64,
    pub removed_position_deletes: u64,
    pub removed_equality_delete_files: u64,
    pub removed_equality_deletes: u64,
}

/// The summary of a replace snapshot, as Iceberg's Java writer fills it.
pub fn replace_summary(
    change: &ChangeCounts,
    before: &FileTotals,
    run_id: &str,
) -> HashMap<String, String> {
    let after = FileTotals {
        data_files: before
            .data_files
            .saturating_add(change.added_files)
            .saturating_sub(change.removed_files),
        records: before
            .records
            .saturating_add(change.added_records)
            .saturating_sub(change.removed_records),
        files_size: before
            .files_size
            .saturating_add(change.added_bytes)
            .saturating_sub(change.removed_bytes)
            .saturating_sub(change.removed_delete_bytes),
        delete_files: before
            .delete_files
            .saturating_sub(change.removed_delete_files),
        position_deletes: before
            .position_deletes
            .saturating_sub(change.removed_position_deletes),
        equality_deletes: before
            .equality_deletes
            .saturating_sub(change.removed_equality_deletes),
    };
    // As Java's `SnapshotSummary`: each count only when it is not zero.
    let removed_deletes = [
        ("removed-delete-files", change.removed_delete_files),
        (
            "removed-position-delete-files",
            change.removed_position_delete_files,
        ),
        ("removed-position-deletes", change.removed_position_deletes),
        (
            "removed-equality-delete-files",
            change.removed_equality_delete_files,
        ),
        ("removed-equality-deletes", change.removed_equality_deletes),
    ]
    .into_iter()
    .filter(|(_, count)| *count > 0);
    [
        ("added-data-files", change.added_files),
        ("deleted-data-files", change.removed_files),
        ("added-records", change.added_records),
        ("deleted-records", change.removed_records),
        ("added-files-size", change.added_bytes),
        (
            "removed-files-size",
            change
                .removed_bytes
                .saturating_add(change.removed_delete_bytes),
        ),
        ("changed-partition-count", change.changed_partitions),
        ("total-records", after.records),
        ("total-files-size", after.files_size),
        ("total-data-files", after.data_files),
        ("total-delete-files", after.delete_files),
        ("total-position-deletes", after.position_deletes),
        ("total-equality-deletes", after.equality_deletes),
    ]
    .into_iter()
    .chain(removed_deletes)
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .chain([(RUN_ID_PROPERTY.to_string(), run_id.to_string())])
    .collect()
}

/// Where the table's metadata files go: `write.metadata.path`, else `{location}/metadata`.
pub fn metadata_directory(base: &TableState) -> String {
    let metadata = &base.table.metadata;
    metadata
        .properties()
        .get("write.metadata.path")
        .filter(|path| !path.is_empty())
        .map(|path| path.trim_end_matches('/').to_string())
        .unwrap_or_else(|| format!("{}/metadata", metadata.location().trim_end_matches('/')))
}

/// A snapshot id the table does not have yet (positive, as Java's are).
pub fn new_snapshot_id(base: &TableState) -> i64 {
    loop {
        let id = fastrand::i64(1..i64::MAX);
        if base.table.metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Writes the manifests and manifest list of a replace snapshot on `base` that removes `inputs`
/// and adds `outputs` (each with its partition spec id), and removes the delete files `deletes`
/// (dangling after the rewrite; one no longer live in `base` is left alone).
pub async fn stage_replace(
    base: &TableState,
    inputs: &HashSet<String>,
    deletes: &HashSet<String>,
    outputs: &[(i32, DataFile)],
    starting_sequence_number: i64,
    run_id: &str,
    attempt: u32,
) -> Result<StagedReplace, NativeError> {
    let metadata = &base.table.metadata;
    let file_io = &base.table.file_io;
    let snapshot_id = new_snapshot_id(base);
    let directory = metadata_directory(base);
    let nonce = format!("{:016x}", fastrand::u64(..));
    let mut written = Vec::new();
    let result = async {
        let mut manifests: Vec<Manifest> = Vec::new();
        let mut change = ChangeCounts::default();
        let mut partitions: HashSet<(i32, Vec<Option<iceberg::spec::Literal>>)> = HashSet::new();

        // The outputs: one manifest per spec.
        let mut by_spec: std::collections::BTreeMap<i32, Vec<&DataFile>> = Default::default();
        for (spec_id, file) in outputs {
            by_spec.entry(*spec_id).or_default().push(file);
        }
        for (spec_id, files) in by_spec {
            let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
                NativeError::Other(format!(
                    "the table lost partition spec {spec_id} during the run"
                ))
            })?;
            let path = format!("{directory}/{nonce}-m{}.avro", manifests.len());
            let output = file_io
                .new_output(&path)
                .map_err(|error| super::storage_error("creating a manifest", error))?;
            let mut writer = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                metadata.current_schema().clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data();
            for file in files {
                change.added_files += 1;
                change.added_records = change.added_records.saturating_add(file.record_count());
                change.added_bytes = change.added_bytes.saturating_add(file.file_size_in_bytes());
                partitions.insert((spec_id, file.partition().fields().to_vec()));
                writer
                    .add_file(file.clone(), starting_sequence_number)
                    .map_err(|error| {
                        NativeError::Other(format!("cannot list an output: {error}"))
                    })?;
            }
            manifests.push(Manifest::Write(path, writer));
        }

        // The base's manifests: rewritten where they list an input, else carried over.
        let mut found = 0usize;
        for loaded in &base.manifests {
            let removing = match loaded.file.content {
                ManifestContentType::Data => inputs,
                ManifestContentType::Deletes => deletes,
            };
            let lists_input = loaded
                .manifest
                .entries()
                .iter()
                .any(|entry| entry.is_alive() && removing.contains(entry.file_path()));
            if !lists_input {
                manifests.push(Manifest::Kept(loaded.file.clone()));
                continue;
            }
            let data = loaded.file.content == ManifestContentType::Data;
            let manifest_metadata = loaded.manifest.metadata();
            let path = format!("{directory}/{nonce}-m{}.avro", manifests.len());
            let output = file_io
                .new_output(&path)
                .map_err(|error| super::storage_error("creating a manifest", error))?;
            let builder = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                manifest_metadata.schema().clone(),
                manifest_metadata.partition_spec().clone(),
            );
            let mut writer = if data {
                builder.build_v2_data()
            } else {
                builder.build_v2_deletes()
            };
            let spec_id = manifest_metadata.partition_spec().spec_id();
            for entry in loaded.manifest.entries() {
                if entry.status() == ManifestStatus::Deleted {
                    continue;
                }
                let sequence = entry.sequence_number().ok_or_else(|| {
                    NativeError::InvalidInput(format!(
                        "manifest entry of {} has no sequence number",
                        entry.file_path()
                    ))
                })?;
                let file_sequence = entry.file_sequence_number.or(Some(sequence));
                let data_file = entry.data_file().clone();
                let outcome = if !data && deletes.contains(entry.file_path()) {
                    change.removed_delete_files += 1;
                    let (files, deletes) = match entry.content_type() {
                        DataContentType::EqualityDeletes => (
                            &mut change.removed_equality_delete_files,
                            &mut change.removed_equality_deletes,
                        ),
                        _ => (
                            &mut change.removed_position_delete_files,
                            &mut change.removed_position_deletes,
                        ),
                    };
                    *files += 1;
                    *deletes = deletes.saturating_add(entry.record_count());
                    change.removed_delete_bytes = change
                        .removed_delete_bytes
                        .saturating_add(entry.file_size_in_bytes());
                    writer.add_delete_file(data_file, sequence, file_sequence)
                } else if data && inputs.contains(entry.file_path()) {
                    found += 1;
                    change.removed_files += 1;
                    change.removed_records =
                        change.removed_records.saturating_add(entry.record_count());
                    change.removed_bytes = change
                        .removed_bytes
                        .saturating_add(entry.file_size_in_bytes());
                    partitions.insert((spec_id, data_file.partition().fields().to_vec()));
                    writer.add_delete_file(data_file, sequence, file_sequence)
                } else {
                    let added_by = entry.snapshot_id().unwrap_or(loaded.file.added_snapshot_id);
                    writer.add_existing_file(data_file, added_by, sequence, file_sequence)
                };
                outcome.map_err(|error| {
                    NativeError::Other(format!("cannot rewrite a manifest entry: {error}"))
                })?;
            }
            manifests.push(Manifest::Write(path, writer));
        }
        if found != inputs.len() {
            return Err(NativeError::CommitConflict(format!(
                "{} of the run's {} inputs are no longer live in the table",
                inputs.len() - found.min(inputs.len()),
                inputs.len()
            )));
        }
        // Written at once, in the list's order: a rewrite of many small files touches as many
        // small manifests, each a round trip to the store. What a failure cleans up from here on.
        written.extend(manifests.iter().filter_map(|manifest| match manifest {
            Manifest::Write(path, _) => Some(path.clone()),
            Manifest::Kept(_) => None,
        }));
        let manifests: Vec<ManifestFile> = futures::stream::iter(manifests)
            .map(|manifest| async move {
                match manifest {
                    Manifest::Kept(file) => Ok(file),
                    Manifest::Write(_, writer) => writer
                        .write_manifest_file()
                        .await
                        .map_err(|error| super::storage_error("writing a manifest", error)),
                }
            })
            .buffered(MANIFEST_WRITES)
            .try_collect()
            .await?;
        change.changed_partitions = partitions.len() as u64;

        let list_path = format!("{directory}/snap-{snapshot_id}-{attempt}-{nonce}.avro");
        written.push(list_path.clone());
        let snapshot = replace_snapshot(
            base,
            snapshot_id,
            list_path,
            manifests,
            replace_summary(&change, &base.totals(), run_id),
        )
        .await?;
        Ok((snapshot, change.removed_delete_files))
    }
    .await;
    match result {
        Ok((snapshot, removed_delete_files)) => Ok(StagedReplace {
            snapshot,
            removed_delete_files,
            written,
        }),
        Err(error) => {
            remove_files(file_io, &written).await;
            Err(error)
        }
    }
}

/// The `replace` snapshot `snapshot_id` on `base` (its parent: `main`'s head; the next sequence
/// number; a time after every snapshot's) with its manifest list, `manifests`, written at
/// `list_path`.
pub async fn replace_snapshot(
    base: &TableState,
    snapshot_id: i64,
    list_path: String,
    manifests: Vec<ManifestFile>,
    summary: HashMap<String, String>,
) -> Result<Snapshot, NativeError> {
    let metadata = &base.table.metadata;
    let sequence_number = metadata.last_sequence_number() + 1;
    let list_output = base
        .table
        .file_io
        .new_output(&list_path)
        .map_err(|error| super::storage_error("creating the manifest list", error))?;
    let parent = metadata
        .snapshot_for_ref(MAIN_BRANCH)
        .map(|snapshot| snapshot.snapshot_id());
    let mut list = ManifestListWriter::v2(
        list_output
            .writer()
            .await
            .map_err(|error| super::storage_error("writing the manifest list", error))?,
        snapshot_id,
        parent,
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())
        .map_err(|error| NativeError::Other(format!("cannot list the manifests: {error}")))?;
    list.close()
        .await
        .map_err(|error| super::storage_error("writing the manifest list", error))?;
    let last_timestamp = metadata
        .snapshots()
        .map(|snapshot| snapshot.timestamp_ms())
        .max()
        .unwrap_or(0)
        .max(metadata.last_updated_ms());
    Ok(Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(
            chrono::Utc::now()
                .timestamp_millis()
                .max(last_timestamp + 1),
        )
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation: Operation::Replace,
            additional_properties: summary,
        })
        .with_schema_id(metadata.current_schema_id())
        .build())
}

/// Deletes files that never became part of the table (best effort: what stays is an orphan for
/// `remove_orphan_files`).
pub async fn remove_files(file_io: &iceberg::io::FileIO, paths: &[String]) {
    for path in paths {
        if let Err(error) = file_io.delete(path).await {
            tracing::warn!(file = %path, error = %error, "could not delete a file the run wrote and did not commit");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_a_catalog_wrote_at_the_limit_saturate_instead_of_overflowing() {
        // The previous snapshot's summary is the catalog's text: its totals may be anything.
        let change = ChangeCounts {
            added_files: 1,
            added_records: 300,
            added_bytes: 5_000,
            removed_files: 2,
            removed_records: 300,
            removed_bytes: 6_000,
            changed_partitions: 1,
            ..ChangeCounts::default()
        };
        let before = FileTotals {
            data_files: u64::MAX,
            records: u64::MAX,
            files_size: u64::MAX,
            delete_files: 0,
            position_deletes: 0,
            equality_deletes: 0,
        };
        let summary = replace_summary(&change, &before, "run");
        assert_eq!(summary["total-data-files"], (u64::MAX - 2).to_string());
        assert_eq!(summary["total-records"], (u64::MAX - 300).to_string());
        assert_eq!(summary["total-files-size"], (u64::MAX - 6_000).to_string());
    }

    #[test]
    fn the_summary_counts_the_change_and_the_totals_after_it() {
        let change = ChangeCounts {
            added_files: 1,
            added_records: 300,
            added_bytes: 5_000,
            removed_files: 24,
            removed_records: 300,
            removed_bytes: 38_000,
            changed_partitions: 1,
            ..ChangeCounts::default()
        };
        let before = FileTotals {
            data_files: 30,
            records: 1_000,
            files_size: 60_000,
            delete_files: 2,
            position_deletes: 7,
            equality_deletes: 0,
        };
        let summary = replace_summary(&change, &before, "20240501T120000Z-abc123");
        let get = |key: &str| summary[key].as_str();
        assert_eq!(get("added-data-files"), "1");
        assert_eq!(get("deleted-data-files"), "24");
        assert_eq!(get("added-records"), "300");
        assert_eq!(get("deleted-records"), "300");
        assert_eq!(get("added-files-size"), "5000");
        assert_eq!(get("removed-files-size"), "38000");
        assert_eq!(get("changed-partition-count"), "1");
        assert_eq!(get("total-data-files"), "7");
        assert_eq!(get("total-records"), "1000");
        assert_eq!(get("total-files-size"), "27000");
        assert_eq!(get("total-delete-files"), "2");
        assert_eq!(get("total-position-deletes"), "7");
        assert_eq!(get("total-equality-deletes"), "0");
        assert_eq!(get(RUN_ID_PROPERTY), "20240501T120000Z-abc123");
        assert!(!summary.contains_key("removed-delete-files"));
    }

    /// Dangling deletes removed with the rewrite: counted as Java's `SnapshotSummary`
    /// counts removed delete files, their bytes in `removed-files-size`, the totals after.
    #[test]
    fn removed_delete_files_are_counted_in_the_summary() {
        let change = ChangeCounts {
            added_files: 1,
            removed_files: 6,
            removed_bytes: 6_000,
            removed_delete_files: 3,
            removed_position_delete_files: 2,
            removed_position_deletes: 3,
            removed_equality_delete_files: 1,
            removed_equality_deletes: 1,
            removed_delete_bytes: 800,
            ..ChangeCounts::default()
        };
        let before = FileTotals {
            data_files: 10,
            records: 100,
            files_size: 20_000,
            delete_files: 5,
            position_deletes: 9,
            equality_deletes: 1,
        };
        let summary = replace_summary(&change, &before, "run");
        let get = |key: &str| summary[key].as_str();
        assert_eq!(get("removed-delete-files"), "3");
        assert_eq!(get("removed-position-delete-files"), "2");
        assert_eq!(get("removed-position-deletes"), "3");
        assert_eq!(get("removed-equality-delete-files"), "1");
        assert_eq!(get("removed-equality-deletes"), "1");
        assert_eq!(get("removed-files-size"), "6800");
        assert_eq!(get("total-delete-files"), "2");
        assert_eq!(get("total-position-deletes"), "6");
        assert_eq!(get("total-equality-deletes"), "0");
        assert_eq!(get("total-files-size"), "13200");
    }
}
