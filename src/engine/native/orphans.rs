//! `remove_orphan_files` in the native engine: the files under a table's location that no
//! snapshot, no metadata file and no statistics file of the table names, older than a cutoff,
//! found by listing the location through the table's own storage (S3 `ListObjectsV2`, a local
//! directory) and deleted (S3 `DeleteObjects`), or only counted and named in a dry run.
//!
//! What is reachable is what Iceberg's Java `DeleteOrphanFiles` action counts as reachable: the
//! live data and delete files of every manifest of every snapshot, those manifests, every
//! snapshot's manifest list, the current metadata file and every earlier one its log names (and
//! their logs, back to the first that is gone), `version-hint.text`, and the table's statistics
//! and partition statistics files. As in Java, hidden files and directories (a name starting
//! with `_` or `.`, except a partition directory of a field named so) are never orphans, a file
//! written at or after the cutoff is never one (a writer's upload in flight), and a file whose
//! path matches a reachable one but under another scheme or bucket stops the run before anything
//! is deleted (Java's `PrefixMismatchMode.ERROR`): the listing and the metadata disagree on where
//! the table is, and deleting would be a guess.
//!
//! Paths compare as Java compares them by default: `s3a://` and `s3n://` are `s3://`, and a local
//! path is the same file as `file:`, `file://` or bare.

use std::collections::HashSet;

use futures::StreamExt;
use iceberg::spec::{ManifestFile, SnapshotRef, TableMetadata};

use super::catalog::LoadedTable;
use super::storage::ListedFile;
use super::table::manifest_list;
use super::NativeError;
use crate::base::clock::UnixMillis;

/// Manifest lists and manifests read at once.
const READS: usize = 16;

/// Orphan paths a run names in its log (a dry run's list); the count holds them all.
pub const NAMED_ORPHANS: usize = 100;

/// What a `remove_orphan_files` run is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanRequest {
    /// Files last written before this time may be orphans; later ones never are.
    pub older_than_millis: UnixMillis,
    /// Count and name the orphans, delete nothing.
    pub dry_run: bool,
}

/// What a `remove_orphan_files` run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// Files listed under the table's location.
    pub listed: u64,
    /// Files reachable from the table's metadata.
    pub reachable: u64,
    /// Orphans older than the cutoff: deleted, or (dry run) to be deleted.
    pub orphans: Vec<String>,
    /// Orphans younger than the cutoff, kept.
    pub young: u64,
    /// Hidden files, never orphans.
    pub hidden: u64,
    pub dry_run: bool,
    /// Metadata objects read to find what is reachable (manifest lists, manifests, earlier
    /// metadata files, and the look-ups of whether those exist): on S3, one request each or
    /// more (a large manifest is read in ranges).
    pub metadata_reads: u64,
}

/// The paths a table's metadata reaches, as they compare.
#[derive(Debug, Default)]
pub struct Reachable {
    /// Scheme, authority and path.
    paths: HashSet<String>,
    /// The path alone (no scheme, no bucket): to catch a location the metadata names otherwise.
    bare: HashSet<String>,
    /// Metadata objects read to find them.
    reads: u64,
}

impl Reachable {
    pub fn insert(&mut self, path: &str) {
        let (full, bare) = normalized(path);
        self.paths.insert(full);
        self.bare.insert(bare);
    }

    pub fn contains(&self, path: &str) -> bool {
        self.paths.contains(&normalized(path).0)
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }
}

/// A path as it compares: (`scheme://authority/path`, `/path`).
fn normalized(path: &str) -> (String, String) {
    if let Some((bucket, key)) = crate::model::report::split_object_path(path) {
        return (format!("s3://{bucket}/{key}"), format!("/{key}"));
    }
    let local = match path.strip_prefix("file://") {
        Some(rest) => rest,
        None => path.strip_prefix("file:").unwrap_or(path),
    };
    // A local file system folds repeated separators; S3 keys do not.
    let mut folded = String::with_capacity(local.len());
    for part in local.split('/').filter(|part| !part.is_empty()) {
        folded.push('/');
        folded.push_str(part);
    }
    (format!("file://{folded}"), folded)
}

/// Whether `path`, under the table's `location`, is hidden: a name on its way down from the
/// location starts with `_` or `.`, and is not a partition directory of one of the table's
/// `partition_fields` (`_bucket=3`).
fn hidden(location: &str, path: &str, partition_fields: &HashSet<String>) -> bool {
    let relative = path
        .strip_prefix(location.trim_end_matches('/'))
        .unwrap_or(path);
    let names: Vec<&str> = relative
        .split('/')
        .filter(|name| !name.is_empty())
        .collect();
    names.iter().enumerate().any(|(at, name)| {
        let directory = at + 1 < names.len();
        let is_partition = directory
            && name
                .split_once('=')
                .is_some_and(|(field, _)| partition_fields.contains(field));
        (name.starts_with('_') || name.starts_with('.')) && !is_partition
    })
}

/// The orphans among `listed`, with what was kept and why: pure, from the listing and what the
/// metadata reaches. `Err` when a listed file matches a reachable path under another scheme or
/// bucket (nothing may be deleted then).
pub fn find_orphans(
    location: &str,
    listed: Vec<ListedFile>,
    reachable: &Reachable,
    partition_fields: &HashSet<String>,
    request: OrphanRequest,
) -> Result<OrphanReport, NativeError> {
    let mut report = OrphanReport {
        listed: listed.len() as u64,
        reachable: reachable.len() as u64,
        dry_run: request.dry_run,
        metadata_reads: reachable.reads,
        ..OrphanReport::default()
    };
    for file in listed {
        let (full, bare) = normalized(&file.path);
        if reachable.paths.contains(&full) {
            continue;
        }
        if hidden(location, &file.path, partition_fields) {
            report.hidden += 1;
            continue;
        }
        if reachable.bare.contains(&bare) {
            return Err(NativeError::InvalidInput(format!(
                "{} is not in the table's metadata, but its path is, under another scheme or \
                 bucket: the listing and the metadata disagree on where the table is; nothing \
                 was deleted",
                crate::base::redact::hide_secrets(&file.path)
            )));
        }
        if file.modified_millis >= request.older_than_millis {
            report.young += 1;
            continue;
        }
        report.orphans.push(file.path);
    }
    report.orphans.sort();
    Ok(report)
}

/// Every path the table's metadata reaches (see the module's note).
pub async fn reachable(table: &LoadedTable) -> Result<Reachable, NativeError> {
    let metadata = &table.metadata;
    let mut reachable = Reachable::default();
    reachable.insert(&table.metadata_location);
    reachable.insert(&format!(
        "{}/metadata/version-hint.text",
        metadata.location().trim_end_matches('/')
    ));
    for file in metadata.statistics_iter() {
        reachable.insert(&file.statistics_path);
    }
    for file in metadata.partition_statistics_iter() {
        reachable.insert(&file.statistics_path);
    }
    earlier_metadata(table, &mut reachable).await?;
    let mut found = Reachable::default();
    let reads = snapshot_files(table, metadata.snapshots(), |path| found.insert(path)).await?;
    reachable.paths.extend(found.paths);
    reachable.bare.extend(found.bare);
    reachable.reads += reads;
    Ok(reachable)
}

/// Every file `snapshots` of the table read — their manifest lists, the manifests those name,
/// and the live data and delete files of those manifests — each passed to `found` (a manifest's
/// files once per manifest, though snapshots share it). The objects read: the lists and the
/// manifests.
pub async fn snapshot_files<'a>(
    table: &LoadedTable,
    snapshots: impl Iterator<Item = &'a SnapshotRef>,
    mut found: impl FnMut(&str),
) -> Result<u64, NativeError> {
    let snapshots: Vec<SnapshotRef> = snapshots.cloned().collect();
    for snapshot in &snapshots {
        found(snapshot.manifest_list());
    }
    // Each list's new manifests kept as it is read, the list dropped: a table of many snapshots
    // lists most manifests again in every snapshot (1,000 appends: half a million entries).
    let mut lists = futures::stream::iter(snapshots)
        .map(|snapshot| async move { manifest_list(table, &snapshot).await })
        .buffer_unordered(READS);
    let mut lists_read = 0usize;
    let mut seen = HashSet::new();
    let mut manifests: Vec<ManifestFile> = Vec::new();
    while let Some(list) = lists.next().await {
        lists_read += 1;
        for file in list?.entries() {
            if seen.insert(file.manifest_path.clone()) {
                manifests.push(file.clone());
            }
        }
    }
    drop(seen);
    for file in &manifests {
        found(&file.manifest_path);
    }
    let reads = (lists_read + manifests.len()) as u64;
    // Each manifest once, its paths kept and its entries dropped: a table of many snapshots
    // shares most manifests between them.
    let mut files = futures::stream::iter(manifests)
        .map(|file| async move {
            let manifest = file
                .load_manifest(&table.file_io)
                .await
                .map_err(|error| super::storage_error("reading a manifest", error))?;
            Ok::<_, NativeError>(
                manifest
                    .entries()
                    .iter()
                    .filter(|entry| entry.is_alive())
                    .map(|entry| entry.file_path().to_string())
                    .collect::<Vec<_>>(),
            )
        })
        .buffer_unordered(READS);
    while let Some(paths) = files.next().await {
        for path in paths? {
            found(&path);
        }
    }
    Ok(reads)
}

/// The metadata files the current one's log names, and those their logs name, back to the
/// first that is gone (Java's `ReachableFileUtil.metadataFileLocations`, recursive).
async fn earlier_metadata(
    table: &LoadedTable,
    reachable: &mut Reachable,
) -> Result<(), NativeError> {
    let mut seen: HashSet<String> = HashSet::from([table.metadata_location.clone()]);
    let mut log: Vec<String> = table
        .metadata
        .metadata_log()
        .iter()
        .map(|entry| entry.metadata_file.clone())
        .collect();
    loop {
        for file in &log {
            reachable.insert(file);
        }
        // The oldest of the log's files that still exists, as Java's
        // `findFirstExistingPrevFile`.
        let mut oldest = None;
        for file in &log {
            if !seen.insert(file.clone()) {
                continue;
            }
            reachable.reads += 1;
            let exists =
                table.file_io.exists(file).await.map_err(|error| {
                    super::storage_error("reading an earlier metadata file", error)
                })?;
            if exists {
                oldest = Some(file.clone());
                break;
            }
        }
        let Some(oldest) = oldest else {
            return Ok(());
        };
        reachable.reads += 1;
        let earlier = TableMetadata::read_from(&table.file_io, &oldest)
            .await
            .map_err(|error| super::storage_error("reading an earlier metadata file", error))?;
        log = earlier
            .metadata_log()
            .iter()
            .map(|entry| entry.metadata_file.clone())
            .filter(|file| !seen.contains(file))
            .collect();
    }
}

/// The names of every partition field of every spec the table has had.
pub fn partition_field_names(metadata: &TableMetadata) -> HashSet<String> {
    metadata
        .partition_specs_iter()
        .flat_map(|spec| spec.fields().iter().map(|field| field.name.clone()))
        .collect()
}

#[cfg(test)]
#[path = "orphans/tests.rs"]
mod tests;
