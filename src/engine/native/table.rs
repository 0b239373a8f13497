//! A table as one run sees it: its loaded metadata, the manifests of its current snapshot with
//! their entries, and what the plan, the validation and the report read from them (live data and
//! delete files, totals, small files, files committed since a time). Manifests are immutable
//! files: a run reads each once ([`ManifestCache`]), however often it reloads the table.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, Datum, Manifest, ManifestContentType,
    ManifestEntryRef, ManifestFile, ManifestList, PartitionSpec, PrimitiveLiteral, Schema,
    Snapshot, SnapshotRef, Struct, MAIN_BRANCH,
};

use super::catalog::LoadedTable;
use super::plan::{DataFileFacts, DeleteFileFacts, DeleteKind, PartitionValues};
use super::NativeError;
use crate::model::report::DeleteRead;

/// Manifests read at once.
const MANIFEST_READS: usize = 16;

/// The reserved field id of a position delete file's `file_path` column.
const DELETE_FILE_PATH_FIELD_ID: i32 = 2_147_483_546;

/// Manifests already read in this run, by path.
#[derive(Default)]
pub struct ManifestCache(Mutex<HashMap<String, Arc<Manifest>>>);

impl ManifestCache {
    async fn load(
        &self,
        file: &ManifestFile,
        table: &LoadedTable,
    ) -> Result<Arc<Manifest>, NativeError> {
        if let Some(manifest) = self
            .0
            .lock()
            .expect("manifest cache")
            .get(&file.manifest_path)
        {
            return Ok(manifest.clone());
        }
        let manifest = Arc::new(
            file.load_manifest(&table.file_io)
                .await
                .map_err(|error| super::storage_error("reading a manifest", error))?,
        );
        self.0
            .lock()
            .expect("manifest cache")
            .insert(file.manifest_path.clone(), manifest.clone());
        Ok(manifest)
    }
}

/// A manifest of the current snapshot with its entries.
#[derive(Clone)]
pub struct LoadedManifest {
    pub file: ManifestFile,
    pub manifest: Arc<Manifest>,
}

/// A table and its current snapshot's manifests.
pub struct TableState {
    pub table: LoadedTable,
    pub snapshot: Option<SnapshotRef>,
    pub manifests: Vec<LoadedManifest>,
}

/// A table's files in numbers (the snapshot summary's `total-*` values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileTotals {
    pub data_files: u64,
    pub records: u64,
    pub files_size: u64,
    pub delete_files: u64,
    pub position_deletes: u64,
    pub equality_deletes: u64,
}

impl TableState {
    /// Reads the manifests of the table's `main` snapshot.
    pub async fn read(
        table: LoadedTable,
        cache: &ManifestCache,
    ) -> Result<TableState, NativeError> {
        let snapshot = table.metadata.snapshot_for_ref(MAIN_BRANCH).cloned();
        let Some(current) = &snapshot else {
            return Ok(TableState {
                table,
                snapshot,
                manifests: Vec::new(),
            });
        };
        let list = manifest_list(&table, current).await?;
        let manifests = futures::stream::iter(list.entries().iter().cloned())
            .map(|file| {
                let table = &table;
                async move {
                    let manifest = cache.load(&file, table).await?;
                    Ok::<_, NativeError>(LoadedManifest { file, manifest })
                }
            })
            .buffered(MANIFEST_READS)
            .try_collect()
            .await?;
        Ok(TableState {
            table,
            snapshot,
            manifests,
        })
    }

    /// Live entries (added or existing) with their manifest.
    fn live_entries(
        &self,
        content: ManifestContentType,
    ) -> impl Iterator<Item = (&LoadedManifest, &ManifestEntryRef)> {
        self.manifests
            .iter()
            .filter(move |loaded| loaded.file.content == content)
            .flat_map(|loaded| {
                loaded
                    .manifest
                    .entries()
                    .iter()
                    .filter(|entry| entry.is_alive())
                    .map(move |entry| (loaded, entry))
            })
    }

    /// The live data files as the plan sees them; files not in Parquet are marked so.
    pub fn data_facts(&self) -> Vec<(DataFileFacts, bool)> {
        self.live_entries(ManifestContentType::Data)
            .filter(|(_, entry)| entry.content_type() == DataContentType::Data)
            .map(|(loaded, entry)| {
                let metadata = loaded.manifest.metadata();
                let facts = DataFileFacts {
                    path: entry.file_path().to_string(),
                    size_bytes: entry.file_size_in_bytes(),
                    record_count: entry.record_count(),
                    spec_id: metadata.partition_spec().spec_id(),
                    partition: partition_values(
                        metadata.partition_spec(),
                        metadata.schema(),
                        entry.data_file().partition(),
                    )
                    .unwrap_or_else(|| unreadable_partition(entry.data_file().partition())),
                    data_sequence_number: entry.sequence_number().unwrap_or(0),
                };
                (facts, entry.file_format() == DataFileFormat::Parquet)
            })
            .collect()
    }

    /// What the plan knows of a rewrite's output: a file of spec `spec_id` with the data sequence
    /// number it is committed with.
    pub fn output_facts(&self, spec_id: i32, file: &DataFile, sequence: i64) -> DataFileFacts {
        let metadata = &self.table.metadata;
        let partition = metadata
            .partition_spec_by_id(spec_id)
            .and_then(|spec| partition_values(spec, metadata.current_schema(), file.partition()))
            .unwrap_or_else(|| unreadable_partition(file.partition()));
        DataFileFacts {
            path: file.file_path().to_string(),
            size_bytes: file.file_size_in_bytes(),
            record_count: file.record_count(),
            spec_id,
            partition,
            data_sequence_number: sequence,
        }
    }

    /// The live delete files (position, equality and deletion vectors as position deletes).
    pub fn delete_facts(&self) -> Vec<DeleteFileFacts> {
        self.live_entries(ManifestContentType::Deletes)
            .filter_map(|(loaded, entry)| {
                let kind = match entry.content_type() {
                    DataContentType::PositionDeletes => DeleteKind::Position,
                    DataContentType::EqualityDeletes => DeleteKind::Equality,
                    DataContentType::Data => return None,
                };
                let metadata = loaded.manifest.metadata();
                let data_file = entry.data_file();
                let bound = |bounds: &HashMap<i32, Datum>| match bounds
                    .get(&DELETE_FILE_PATH_FIELD_ID)
                    .map(|datum| datum.literal())
                {
                    Some(PrimitiveLiteral::String(path)) => Some(path.clone()),
                    _ => None,
                };
                Some(DeleteFileFacts {
                    path: entry.file_path().to_string(),
                    kind,
                    spec_id: metadata.partition_spec().spec_id(),
                    partition: partition_values(
                        metadata.partition_spec(),
                        metadata.schema(),
                        data_file.partition(),
                    )
                    .unwrap_or_else(|| unreadable_partition(data_file.partition())),
                    spec_unpartitioned: metadata.partition_spec().is_unpartitioned(),
                    data_sequence_number: entry.sequence_number().unwrap_or(0),
                    referenced_data_file: data_file.referenced_data_file(),
                    referenced_path_bounds: bound(data_file.lower_bounds())
                        .zip(bound(data_file.upper_bounds())),
                    size_bytes: entry.file_size_in_bytes(),
                    record_count: entry.record_count(),
                    native_refusal: (kind == DeleteKind::Equality)
                        .then(|| {
                            equality_refusal(
                                self.table.metadata.current_schema(),
                                &data_file.equality_ids().unwrap_or_default(),
                            )
                        })
                        .flatten(),
                    equality_ids: data_file.equality_ids().unwrap_or_default(),
                })
            })
            .collect()
    }

    pub fn live_data_paths(&self) -> HashSet<&str> {
        self.live_entries(ManifestContentType::Data)
            .map(|(_, entry)| entry.file_path())
            .collect()
    }

    /// The live entry of a data file and the manifest that lists it.
    pub fn data_entry(&self, path: &str) -> Option<(&LoadedManifest, &ManifestEntryRef)> {
        self.live_entries(ManifestContentType::Data)
            .find(|(_, entry)| entry.file_path() == path)
    }

    pub fn totals(&self) -> FileTotals {
        let mut totals = FileTotals::default();
        for (_, entry) in self.live_entries(ManifestContentType::Data) {
            totals.data_files += 1;
            totals.records += entry.record_count();
            totals.files_size += entry.file_size_in_bytes();
        }
        for (_, entry) in self.live_entries(ManifestContentType::Deletes) {
            totals.delete_files += 1;
            totals.files_size += entry.file_size_in_bytes();
            match entry.content_type() {
                DataContentType::PositionDeletes => totals.position_deletes += entry.record_count(),
                DataContentType::EqualityDeletes => totals.equality_deletes += entry.record_count(),
                DataContentType::Data => {}
            }
        }
        totals
    }

    /// Data files below `small_file_bytes`, as (path, size): what icepack counts as pending.
    pub fn small_files(&self, small_file_bytes: u64) -> Vec<(String, u64)> {
        self.live_entries(ManifestContentType::Data)
            .filter(|(_, entry)| entry.file_size_in_bytes() < small_file_bytes)
            .map(|(_, entry)| (entry.file_path().to_string(), entry.file_size_in_bytes()))
            .collect()
    }

    /// The delete files and rows, as the Spark engine's deletes read reports them.
    pub fn delete_read(&self) -> DeleteRead {
        let mut read = DeleteRead::default();
        for (_, entry) in self.live_entries(ManifestContentType::Deletes) {
            match entry.content_type() {
                DataContentType::PositionDeletes => read.position_files += 1,
                DataContentType::EqualityDeletes => read.equality_files += 1,
                DataContentType::Data => continue,
            }
            read.deleted_rows += entry.record_count();
        }
        read.data_rows = self
            .live_entries(ManifestContentType::Data)
            .map(|(_, entry)| entry.record_count())
            .sum();
        read
    }

    /// Data and delete files added by any snapshot committed at or after `since_millis` (those
    /// still reachable: an expired snapshot's additions are not listed). Delete files too: a
    /// file that S3 events announced as data (its writer names delete files like data files) is
    /// committed and not among the data files, so the settlement drops it from the pending
    /// files at once, as Spark's read of `all_entries` does.
    pub async fn committed_since(
        &self,
        since_millis: i64,
        cache: &ManifestCache,
    ) -> Result<Vec<String>, NativeError> {
        let mut paths = Vec::new();
        let mut seen = HashSet::new();
        // A streaming writer commits often: the lists of its snapshots are read at once.
        let table = &self.table;
        let recent: Vec<SnapshotRef> = table
            .metadata
            .snapshots()
            .filter(|snapshot| snapshot.timestamp_ms() >= since_millis)
            .cloned()
            .collect();
        let lists: Vec<ManifestList> = futures::stream::iter(recent.clone())
            .map(|snapshot| async move { manifest_list(table, &snapshot).await })
            .buffered(MANIFEST_READS)
            .try_collect()
            .await?;
        for (snapshot, list) in recent.iter().zip(lists) {
            for file in list.entries() {
                if file.added_snapshot_id != snapshot.snapshot_id() || !file.has_added_files() {
                    continue;
                }
                let manifest = cache.load(file, &self.table).await?;
                for entry in manifest.entries() {
                    if entry.status() == iceberg::spec::ManifestStatus::Added
                        && entry.snapshot_id() == Some(snapshot.snapshot_id())
                        && seen.insert(entry.file_path().to_string())
                    {
                        paths.push(entry.file_path().to_string());
                    }
                }
            }
        }
        Ok(paths)
    }

    /// The replace snapshots this run committed, found by the run id in their summary.
    pub fn snapshots_of_run(&self, run_id: &str) -> Vec<SnapshotRef> {
        self.table
            .metadata
            .snapshots()
            .filter(|snapshot| {
                snapshot
                    .summary()
                    .additional_properties
                    .get(super::snapshot::RUN_ID_PROPERTY)
                    .is_some_and(|id| id == run_id)
            })
            .cloned()
            .collect()
    }
}

/// The manifest list of one of the table's snapshots.
pub async fn manifest_list(
    table: &LoadedTable,
    snapshot: &Snapshot,
) -> Result<ManifestList, NativeError> {
    if snapshot.encryption_key_id().is_some() {
        return Err(NativeError::Unsupported(
            "the table's manifest lists are encrypted".to_string(),
        ));
    }
    let bytes = table
        .file_io
        .new_input(snapshot.manifest_list())
        .map_err(|error| super::storage_error("reading a manifest list", error))?
        .read()
        .await
        .map_err(|error| super::storage_error("reading a manifest list", error))?;
    ManifestList::parse_with_version(&bytes, table.metadata.format_version())
        .map_err(|error| super::storage_error("reading a manifest list", error))
}

/// A partition's (field name, value) pairs as Iceberg's Java writers render them in paths
/// (`human.rs`), or `None` when the values do not fit the spec (hostile or corrupt metadata). A
/// spec whose fields are all `void` is unpartitioned, as in Java: its files sit directly under
/// the data location, and icepack names their partition `""`.
pub fn partition_values(
    spec: &PartitionSpec,
    schema: &Schema,
    data: &Struct,
) -> Option<PartitionValues> {
    if spec.is_unpartitioned() {
        return Some(Vec::new());
    }
    let partition_type = spec.partition_type(schema).ok()?;
    let types = partition_type.fields();
    if types.len() != spec.fields().len() || data.fields().len() != spec.fields().len() {
        return None;
    }
    spec.fields()
        .iter()
        .zip(types)
        .enumerate()
        .map(|(index, (field, field_type))| {
            let primitive = field_type.field_type.as_primitive_type()?;
            let value = match data[index].as_ref() {
                Some(literal) => Some(literal.as_primitive_literal()?),
                None => None,
            };
            if let Some(literal) = &value {
                if !primitive.compatible(literal) {
                    return None;
                }
            }
            Some((
                field.name.clone(),
                super::human::human_string(&field.transform, primitive, value.as_ref())?,
            ))
        })
        .collect()
}

/// A partition that cannot be rendered still groups apart from every readable one.
fn unreadable_partition(data: &Struct) -> PartitionValues {
    vec![("\u{0}unreadable".to_string(), format!("{:?}", data))]
}

/// Why the native engine cannot apply an equality delete on `equality_ids`, if it cannot:
/// iceberg-rust's reader turns each deleted row into `column != value`, which drops the rows
/// where the column is null as well, so every equality column must be a required top-level
/// primitive of the current schema (as Flink's upsert sink makes them: its key columns).
pub fn equality_refusal(schema: &iceberg::spec::Schema, equality_ids: &[i32]) -> Option<String> {
    if equality_ids.is_empty() {
        return Some("an equality delete file without equality field ids".to_string());
    }
    for id in equality_ids {
        let Some(field) = schema.as_struct().field_by_id(*id) else {
            return Some(format!(
                "equality field id {id} is not a top-level column of the table's current schema"
            ));
        };
        if !field.field_type.is_primitive() {
            return Some(format!(
                "equality column `{}` is not a primitive column",
                field.name.escape_debug()
            ));
        }
        if !field.required {
            return Some(format!(
                "equality column `{}` is optional: iceberg-rust's reader would also drop the rows where it is null",
                field.name.escape_debug()
            ));
        }
    }
    None
}
