//! Which table does an S3 object belong to? Pure, and the longest matching prefix wins.

use std::collections::HashMap;

use std::borrow::Borrow;

use crate::config::TableSpec;
use crate::intake::event::S3Record;

/// Index of a table in the configured table list.
pub type TableIndex = usize;

/// Why a record was not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IgnoreReason {
    NotCreated,
    Unrouted,
    NotDataFile,
    LargeFile,
    Duplicate,
}

impl IgnoreReason {
    pub const ALL: [IgnoreReason; 5] = [
        IgnoreReason::NotCreated,
        IgnoreReason::Unrouted,
        IgnoreReason::NotDataFile,
        IgnoreReason::LargeFile,
        IgnoreReason::Duplicate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::NotCreated => "not_created",
            IgnoreReason::Unrouted => "unrouted",
            IgnoreReason::NotDataFile => "not_data_file",
            IgnoreReason::LargeFile => "large_file",
            IgnoreReason::Duplicate => "duplicate",
        }
    }
}

/// What to do with one record before duplicates are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// A small data file of this table, pending the duplicate check.
    Candidate {
        table: TableIndex,
        size: u64,
    },
    /// A new manifest of a table that runs `rewrite_manifests` (`max_manifests`).
    Manifest {
        table: TableIndex,
    },
    /// A new delete file of a table due by its deletes (`delete_file_threshold`).
    DeleteFile {
        table: TableIndex,
    },
    Ignore(IgnoreReason),
}

/// Longest-prefix routing over the configured tables.
#[derive(Debug, Clone)]
pub struct Router {
    buckets: HashMap<String, BucketRoutes>,
}

#[derive(Debug, Clone, Default)]
struct BucketRoutes {
    /// Distinct prefix lengths, longest first: a key is looked up once per length.
    lengths: Vec<usize>,
    by_prefix: HashMap<String, TableIndex>,
}

impl Router {
    pub fn new<S: Borrow<TableSpec>>(tables: &[S]) -> Router {
        Router::from_entries(
            tables
                .iter()
                .enumerate()
                .map(|(index, table)| (index, table.borrow())),
        )
    }

    /// Routes to the given tables only, each under its own index (a live map with holes).
    pub fn from_entries<'a>(tables: impl Iterator<Item = (TableIndex, &'a TableSpec)>) -> Router {
        let mut buckets: HashMap<String, BucketRoutes> = HashMap::new();
        for (index, table) in tables {
            let routes = buckets.entry(table.bucket.clone()).or_default();
            routes.by_prefix.insert(table.prefix.clone(), index);
            routes.lengths.push(table.prefix.len());
        }
        for routes in buckets.values_mut() {
            routes.lengths.sort_unstable_by(|a, b| b.cmp(a));
            routes.lengths.dedup();
        }
        Router { buckets }
    }

    /// The table whose prefix is the longest one the key starts with, in this bucket.
    pub fn route(&self, bucket: &str, key: &str) -> Option<TableIndex> {
        let routes = self.buckets.get(bucket)?;
        routes.lengths.iter().find_map(|&length| {
            key.get(..length)
                .and_then(|prefix| routes.by_prefix.get(prefix).copied())
        })
    }

    /// Applies every rule but the duplicate check, in the order the README documents.
    pub fn classify<S: Borrow<TableSpec>>(&self, tables: &[S], record: &S3Record) -> Disposition {
        if !record.is_object_created() {
            return Disposition::Ignore(IgnoreReason::NotCreated);
        }
        let Some(table) = self.route(&record.bucket, &record.key) else {
            return Disposition::Ignore(IgnoreReason::Unrouted);
        };
        let spec = tables[table].borrow();
        if spec.max_manifests.is_some() && is_manifest_key(&spec.prefix, &record.key) {
            return Disposition::Manifest { table };
        }
        if is_metadata_key(&spec.prefix, &record.key) {
            // The table's metadata directory holds no data file, whatever a file's suffix:
            // `compute_partition_stats` writes its statistics there as Parquet.
            return Disposition::Ignore(IgnoreReason::NotDataFile);
        }
        if is_delete_file_key(&record.key) {
            // Never a small data file: merging it as one would fail or, worse, be tried again
            // and again. Counted as what it is when the table is due by its deletes.
            return if spec.deletes.is_on() {
                Disposition::DeleteFile { table }
            } else {
                Disposition::Ignore(IgnoreReason::NotDataFile)
            };
        }
        if !spec
            .file_suffixes
            .iter()
            .any(|suffix| record.key.ends_with(suffix.as_str()))
        {
            return Disposition::Ignore(IgnoreReason::NotDataFile);
        }
        match record.size {
            Some(size) if size < spec.thresholds.small_file_bytes => {
                Disposition::Candidate { table, size }
            }
            _ => Disposition::Ignore(IgnoreReason::LargeFile),
        }
    }
}

/// Whether `key` is a manifest file of the table under `prefix`: an Avro file in its `metadata/`
/// directory that is not a snapshot's manifest list (`snap-*.avro`).
pub fn is_manifest_key(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .and_then(|relative| relative.strip_prefix("metadata/"))
        .is_some_and(|name| {
            !name.contains('/') && name.ends_with(".avro") && !name.starts_with("snap-")
        })
}

/// Whether `key` is in the `metadata/` directory of the table under `prefix`, where Iceberg
/// writes metadata JSON, manifest lists, manifests, and table and partition statistics
/// (`partition-stats-*.parquet`): never a data file.
pub fn is_metadata_key(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|relative| relative.starts_with("metadata/"))
}

/// Whether `key` is a delete file as Iceberg's Spark writers name them (their
/// `OutputFileFactory` has the `deletes` suffix): position and equality deletes
/// (`...-deletes.parquet`, `...-deletes.orc`, `...-deletes.avro`) and format v3's deletion
/// vectors (`...-deletes.puffin`). Writers that name them like data files (Iceberg's Flink sink,
/// and any writer icepack knows no naming of) are told apart by the metadata: a truth read lists
/// them among the files committed in its window and not among the data files (docs/compaction.md,
/// "Delete files").
pub fn is_delete_file_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    [".parquet", ".orc", ".avro", ".puffin"]
        .iter()
        .any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|stem| stem.ends_with("-deletes"))
        })
}

/// The partition path of a data file: the `k=v/...` directories between the table prefix (and
/// its `data/` directory, where Iceberg puts data files) and the file name. Empty when unpartitioned.
pub fn partition_of(prefix: &str, key: &str) -> String {
    let relative = key.strip_prefix(prefix).unwrap_or(key);
    let relative = relative.strip_prefix("data/").unwrap_or(relative);
    let Some((directories, _file)) = relative.rsplit_once('/') else {
        return String::new();
    };
    directories
        .split('/')
        .filter(|segment| {
            segment
                .split_once('=')
                .is_some_and(|(name, _)| !name.is_empty())
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::policy::Thresholds;
    use proptest::prelude::*;

    fn spec(table: &str, bucket: &str, prefix: &str) -> TableSpec {
        TableSpec::for_tests(
            table,
            bucket,
            prefix,
            Thresholds {
                small_file_bytes: 100,
                min_files: 10,
                min_total_bytes: 1000,
                max_wait_millis: None,
            },
        )
    }

    fn record(event_name: &str, bucket: &str, key: &str, size: Option<u64>) -> S3Record {
        S3Record {
            event_name: event_name.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            size,
            event_millis: 0,
            sequencer: None,
        }
    }

    #[test]
    fn delete_files_are_named_deletes() {
        assert!(is_delete_file_key(
            "w/o/data/d=1/00000-5-abc-00001-deletes.parquet"
        ));
        assert!(is_delete_file_key("w/o/data/00000-5-abc-00001-deletes.orc"));
        // Format v3's deletion vectors (Spark 4.0, Iceberg 1.10).
        assert!(is_delete_file_key(
            "w/o/data/d=1/00000-9-0f1e-00001-deletes.puffin"
        ));
        assert!(!is_delete_file_key("w/o/metadata/123-4f5e.stats"));
        assert!(!is_delete_file_key("w/o/data/00000-5-abc-00001.parquet"));
        assert!(!is_delete_file_key("w/o/data/deletes/00000.parquet"));
    }

    #[test]
    fn manifests_are_the_avro_files_of_the_metadata_directory_but_manifest_lists() {
        let prefix = "w/orders/";
        for key in [
            "w/orders/metadata/3f1c-m0.avro",
            "w/orders/metadata/0a9e2b7c-1d4e-4c8a-9a1f-7e6b5d4c3b2a-m12.avro",
        ] {
            assert!(is_manifest_key(prefix, key), "{key}");
        }
        for key in [
            "w/orders/metadata/snap-123-1-3f1c.avro",
            "w/orders/metadata/v3.metadata.json",
            "w/orders/data/x.avro",
            "w/orders/metadata/sub/x-m0.avro",
            "w/other/metadata/x-m0.avro",
        ] {
            assert!(!is_manifest_key(prefix, key), "{key}");
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let tables = vec![
            spec("a.wide", "b", "warehouse/"),
            spec("a.narrow", "b", "warehouse/sales/"),
            spec("a.other", "other", "warehouse/sales/"),
        ];
        let router = Router::new(&tables);
        assert_eq!(router.route("b", "warehouse/sales/data/f.parquet"), Some(1));
        assert_eq!(router.route("b", "warehouse/ops/data/f.parquet"), Some(0));
        assert_eq!(router.route("other", "warehouse/sales/x"), Some(2));
        assert_eq!(router.route("b", "elsewhere/f.parquet"), None);
        assert_eq!(router.route("nope", "warehouse/sales/f"), None);
    }

    /// S3 keys are literal strings: `..` is not a path step, so a key cannot climb out of one
    /// table's prefix into another's (or anywhere else) by traversal.
    #[test]
    fn traversal_in_keys_is_taken_literally() {
        let tables = vec![
            spec("a.orders", "b", "warehouse/orders/"),
            spec("a.secret", "b", "warehouse/secret/"),
        ];
        let router = Router::new(&tables);
        assert_eq!(
            router.route("b", "warehouse/orders/../secret/data/f.parquet"),
            Some(0)
        );
        assert_eq!(
            router.route("b", "warehouse/secret/../orders/f.parquet"),
            Some(1)
        );
        assert_eq!(router.route("b", "../warehouse/orders/f.parquet"), None);
        assert_eq!(router.route("b", "/warehouse/orders/f.parquet"), None);
        // Only `name=value` directories are partition directories; `..` is none.
        assert_eq!(
            partition_of(
                "warehouse/orders/",
                "warehouse/orders/data/../dt=1/f.parquet"
            ),
            "dt=1"
        );
    }

    #[test]
    fn classification_order_and_reasons() {
        let tables = vec![spec("a.t", "b", "t/")];
        let router = Router::new(&tables);
        let classify = |r: S3Record| router.classify(&tables, &r);
        assert_eq!(
            classify(record("ObjectRemoved:Delete", "b", "t/f.parquet", None)),
            Disposition::Ignore(IgnoreReason::NotCreated)
        );
        assert_eq!(
            classify(record("ObjectCreated:Put", "b", "u/f.parquet", Some(1))),
            Disposition::Ignore(IgnoreReason::Unrouted)
        );
        assert_eq!(
            classify(record("ObjectCreated:Put", "c", "t/f.parquet", Some(1))),
            Disposition::Ignore(IgnoreReason::Unrouted)
        );
        assert_eq!(
            classify(record(
                "ObjectCreated:Put",
                "b",
                "t/metadata/v1.json",
                Some(1)
            )),
            Disposition::Ignore(IgnoreReason::NotDataFile)
        );
        assert_eq!(
            classify(record("ObjectCreated:Put", "b", "t/f.parquet", Some(100))),
            Disposition::Ignore(IgnoreReason::LargeFile),
            "the small-file limit is strict"
        );
        assert_eq!(
            classify(record("ObjectCreated:Put", "b", "t/f.parquet", None)),
            Disposition::Ignore(IgnoreReason::LargeFile),
            "an unknown size is not a known small file"
        );
        assert_eq!(
            classify(record(
                "ObjectCreated:CompleteMultipartUpload",
                "b",
                "t/f.parquet",
                Some(99)
            )),
            Disposition::Candidate { table: 0, size: 99 }
        );
    }

    #[test]
    fn a_delete_file_is_never_a_small_data_file() {
        let mut deleting = spec("a.d", "b", "d/");
        deleting.deletes.files = Some(10);
        let tables = vec![spec("a.t", "b", "t/"), deleting];
        let router = Router::new(&tables);
        for name in [
            "00000-5-abc-00001-deletes.parquet",
            "00000-5-abc-00001-deletes.puffin",
        ] {
            let created = |prefix: &str| {
                record(
                    "ObjectCreated:Put",
                    "b",
                    &format!("{prefix}data/p=1/{name}"),
                    Some(10),
                )
            };
            assert_eq!(
                router.classify(&tables, &created("t/")),
                Disposition::Ignore(IgnoreReason::NotDataFile),
                "{name}: a table not due by its deletes ignores them"
            );
            assert_eq!(
                router.classify(&tables, &created("d/")),
                Disposition::DeleteFile { table: 1 },
                "{name}"
            );
        }
    }

    /// Issue 33 item 5: `compute_partition_stats` writes Parquet into the metadata directory;
    /// counted as a small data file, it kept a table's pending count above its files.
    #[test]
    fn nothing_in_the_metadata_directory_is_a_data_file() {
        let tables = vec![spec("a.t", "b", "t/")];
        let router = Router::new(&tables);
        for key in [
            "t/metadata/partition-stats-5552251490721188335-0a1b2c3d.parquet",
            "t/metadata/00001-4f5e.metadata.json",
        ] {
            assert_eq!(
                router.classify(&tables, &record("ObjectCreated:Put", "b", key, Some(10))),
                Disposition::Ignore(IgnoreReason::NotDataFile),
                "{key}"
            );
        }
        assert_eq!(
            router.classify(
                &tables,
                &record(
                    "ObjectCreated:Put",
                    "b",
                    "t/data/metadata/f.parquet",
                    Some(10)
                )
            ),
            Disposition::Candidate { table: 0, size: 10 },
            "a partition named metadata is data"
        );
    }

    #[test]
    fn partitions_come_from_key_directories() {
        assert_eq!(
            partition_of("w/t/", "w/t/data/dt=2024-01-01/h=3/f.parquet"),
            "dt=2024-01-01/h=3"
        );
        assert_eq!(partition_of("w/t/", "w/t/data/f.parquet"), "");
        assert_eq!(partition_of("w/t/", "w/t/f.parquet"), "");
        assert_eq!(
            partition_of("w/t/", "w/t/data/00001/dt=1/f.parquet"),
            "dt=1"
        );
        assert_eq!(partition_of("w/t/", "w/t/data/=x/f.parquet"), "");
    }

    proptest! {
        #[test]
        fn a_key_routes_to_at_most_one_table_and_it_is_the_longest_match(
            prefixes in prop::collection::btree_set("[ab/]{0,6}", 1..12),
            key in "[ab/]{0,10}",
        ) {
            let tables: Vec<TableSpec> = prefixes
                .iter()
                .enumerate()
                .map(|(i, prefix)| spec(&format!("n.t{i}"), "bkt", prefix))
                .collect();
            let router = Router::new(&tables);
            let matching: Vec<usize> = tables
                .iter()
                .enumerate()
                .filter(|(_, t)| key.starts_with(t.prefix.as_str()))
                .map(|(i, _)| i)
                .collect();
            let routed = router.route("bkt", &key);
            match routed {
                None => prop_assert!(matching.is_empty()),
                Some(index) => {
                    prop_assert!(matching.contains(&index));
                    let longest = matching.iter().map(|&i| tables[i].prefix.len()).max().unwrap();
                    prop_assert_eq!(tables[index].prefix.len(), longest);
                }
            }
        }
    }
}
