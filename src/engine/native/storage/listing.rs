//! Listing and batch deletion, which iceberg's `FileIO` does not do: a table's location listed
//! for `remove_orphan_files` (S3 `ListObjectsV2`, a local directory walked), and the orphans
//! deleted (S3 `DeleteObjects`, a thousand a request).

use std::collections::HashMap;

use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use iceberg::{Error, ErrorKind};

use super::{locate, s3_error, Location, ObjectStorage};

/// A file found under a location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Its path, in the scheme and form of the location listed.
    pub path: String,
    pub size: u64,
    /// When it was last written (S3: the object's `LastModified`).
    pub modified_millis: i64,
}

/// Objects one S3 `DeleteObjects` request removes at most.
const DELETE_BATCH: usize = 1000;

impl ObjectStorage {
    /// Every file under the directory `location` (S3: `ListObjectsV2`, page by page; a local
    /// directory: walked, symbolic links not followed).
    pub async fn list(&self, location: &str) -> iceberg::Result<Vec<ListedFile>> {
        let location = location.trim_end_matches('/');
        match locate(&format!("{location}/"))? {
            Location::Local => {
                let root = local_path(location).to_string();
                let prefix = location.to_string();
                tokio::task::spawn_blocking(move || list_local(&root, &prefix))
                    .await
                    .map_err(|error| {
                        Error::new(ErrorKind::Unexpected, format!("listing stopped: {error}"))
                    })?
            }
            Location::Object { .. } => {
                let (bucket, key) =
                    crate::model::report::split_object_path(location).ok_or_else(|| {
                        Error::new(
                            ErrorKind::DataInvalid,
                            format!("`{location}` names a bucket, not a directory in it"),
                        )
                    })?;
                let scheme = location.split("://").next().unwrap_or("s3");
                let prefix = format!("{key}/");
                let mut pages = self
                    .client()?
                    .list_objects_v2()
                    .bucket(bucket)
                    .prefix(&prefix)
                    .into_paginator()
                    .send();
                let mut files = Vec::new();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|error| s3_error("ListObjectsV2", location, error))?;
                    files.extend(page.contents().iter().filter_map(|object| {
                        Some(ListedFile {
                            path: format!("{scheme}://{bucket}/{}", object.key()?),
                            size: object.size().unwrap_or(0).max(0) as u64,
                            modified_millis: object
                                .last_modified()
                                .and_then(|time| time.to_millis().ok())
                                .unwrap_or(i64::MAX),
                        })
                    }));
                }
                Ok(files)
            }
        }
    }

    /// Deletes `paths` (S3: `DeleteObjects`, a thousand a request); the paths not deleted, with
    /// why. A path already gone counts as deleted.
    pub async fn delete_files(&self, paths: &[String]) -> iceberg::Result<Vec<(String, String)>> {
        let mut failed = Vec::new();
        let mut by_bucket: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
        for path in paths {
            match locate(path)? {
                Location::Local => {
                    if let Err(error) = tokio::fs::remove_file(local_path(path)).await {
                        if error.kind() != std::io::ErrorKind::NotFound {
                            failed.push((path.clone(), error.to_string()));
                        }
                    }
                }
                Location::Object { bucket, key } => {
                    by_bucket.entry(bucket).or_default().push((path, key))
                }
            }
        }
        for (bucket, objects) in by_bucket {
            for batch in objects.chunks(DELETE_BATCH) {
                let identifiers = batch
                    .iter()
                    .filter_map(|(_, key)| ObjectIdentifier::builder().key(*key).build().ok())
                    .collect();
                let delete = Delete::builder()
                    .set_objects(Some(identifiers))
                    .quiet(true)
                    .build()
                    .map_err(|error| s3_error("DeleteObjects", bucket, error))?;
                let answer = self
                    .client()?
                    .delete_objects()
                    .bucket(bucket)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|error| s3_error("DeleteObjects", bucket, error))?;
                let paths: HashMap<&str, &str> =
                    batch.iter().map(|(path, key)| (*key, *path)).collect();
                for error in answer.errors() {
                    let key = error.key().unwrap_or_default();
                    let path = paths
                        .get(key)
                        .map_or_else(|| key.to_string(), |p| p.to_string());
                    let why = error
                        .message()
                        .or(error.code())
                        .unwrap_or("no reason given")
                        .to_string();
                    failed.push((path, why));
                }
            }
        }
        Ok(failed)
    }
}

/// The file system path of a local location (`file:/x`, `file:///x`, `/x`).
fn local_path(location: &str) -> &str {
    match location.strip_prefix("file://") {
        Some(rest) => rest,
        None => location.strip_prefix("file:").unwrap_or(location),
    }
}

/// The files under the local directory `root`, named under `prefix` (the location as given).
fn list_local(root: &str, prefix: &str) -> iceberg::Result<Vec<ListedFile>> {
    let mut files = Vec::new();
    let mut directories = vec![String::new()];
    while let Some(relative) = directories.pop() {
        let directory = format!("{root}{relative}");
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            // A table with no files yet has no directory.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && relative.is_empty() => {
                return Ok(files)
            }
            Err(error) => {
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    format!("listing {directory}: {error}"),
                ))
            }
        };
        for entry in entries {
            let entry = entry.map_err(|error| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("listing {directory}: {error}"),
                )
            })?;
            // A name that is not UTF-8 cannot be one Iceberg's metadata names: left alone.
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let metadata = entry.metadata().map_err(|error| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("listing {directory}: {error}"),
                )
            })?;
            let child = format!("{relative}/{name}");
            if metadata.is_dir() {
                directories.push(child);
            } else if metadata.is_file() {
                let modified_millis = metadata
                    .modified()
                    .ok()
                    .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(i64::MAX, |since| since.as_millis() as i64);
                files.push(ListedFile {
                    path: format!("{prefix}{child}"),
                    size: metadata.len(),
                    modified_millis,
                });
            }
        }
    }
    Ok(files)
}
