//! The native engine's `remove_orphan_files` scan (issue 50) over a large table: `--snapshots`
//! snapshots (1,000) of `--files` data files each (100: 100,000 files), every snapshot's manifest
//! list naming every manifest before it (as appends leave them), written with Iceberg in Rust on
//! the local disk behind Iceberg's JDBC catalog on SQLite; the data files are empty files, and 1%
//! more are orphans older than the cutoff. Prints the time of the scan (the metadata walk, the
//! listing, the comparison) as a dry run, the peak resident memory it added, the metadata
//! objects it read and the listing's size — from which the S3 requests of the same table follow:
//! one GET a metadata object, one `ListObjectsV2` per 1,000 files.
//!
//!   cargo bench --bench orphans [-- --snapshots N --files N]
//!
//! Without `--bench` (the CI smoke): 50 snapshots of 20 files.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, ManifestListWriter, ManifestWriterBuilder,
    NestedField, Operation, PrimitiveType, Schema, Snapshot, Struct, Summary, TableMetadataBuilder,
    Type, UnboundPartitionSpec, MAIN_BRANCH,
};
use iceberg::{MetadataLocation, TableCreation};
use icepack::config::CatalogConfig;
use icepack::engine::native::{
    MaintenanceReport, MaintenanceTask, NativeEngine, NativeLimits, NativeMaintenance,
    OrphanRequest,
};

use common::*;

/// Peak resident memory of this process in KiB (Linux `VmHWM`).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resets the peak to the current resident memory (Linux, `clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Writes the table: `snapshots` appends of `files` empty data files each; returns the catalog.
async fn write_table(dir: &std::path::Path, snapshots: usize, files: usize) -> CatalogConfig {
    let warehouse = format!("file://{}/warehouse", dir.display());
    let location = format!("{warehouse}/analytics/events");
    let data_dir = dir.join("warehouse/analytics/events/data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let schema = Schema::builder()
        .with_fields(vec![NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        )
        .into()])
        .build()
        .unwrap();
    let creation = TableCreation::builder()
        .name("events".to_string())
        .location(location.clone())
        .schema(schema.clone())
        .partition_spec(UnboundPartitionSpec::builder().build())
        .properties(HashMap::new())
        .format_version(iceberg::spec::FormatVersion::V2)
        .build();
    let mut metadata = TableMetadataBuilder::from_table_creation(creation)
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    let file_io = FileIO::new_with_fs();
    let spec = metadata.default_partition_spec().as_ref().clone();
    let mut manifests = Vec::new();
    let mut parent = None;
    for snapshot_index in 0..snapshots {
        let snapshot_id = snapshot_index as i64 + 1;
        let sequence = metadata.last_sequence_number() + 1;
        let path = format!("{location}/metadata/m-{snapshot_index}.avro");
        let mut writer = ManifestWriterBuilder::new(
            file_io.new_output(&path).unwrap(),
            Some(snapshot_id),
            Arc::new(schema.clone()),
            spec.clone(),
        )
        .build_v2_data();
        for file in 0..files {
            let name = format!("{snapshot_index:05}-{file:04}.parquet");
            std::fs::write(data_dir.join(&name), b"").unwrap();
            let data_file = DataFileBuilder::default()
                .content(DataContentType::Data)
                .file_path(format!("{location}/data/{name}"))
                .file_format(DataFileFormat::Parquet)
                .file_size_in_bytes(1024)
                .record_count(10)
                .partition(Struct::empty())
                .partition_spec_id(spec.spec_id())
                .build()
                .unwrap();
            writer.add_file(data_file, sequence).unwrap();
        }
        let mut manifest = writer.write_manifest_file().await.unwrap();
        // What the manifest list assigns it, as later lists carry it.
        manifest.sequence_number = sequence;
        manifest.min_sequence_number = sequence;
        manifests.push(manifest);
        let list_path = format!("{location}/metadata/snap-{snapshot_id}.avro");
        let mut list = ManifestListWriter::v2(
            file_io
                .new_output(&list_path)
                .unwrap()
                .writer()
                .await
                .unwrap(),
            snapshot_id,
            parent,
            sequence,
        );
        list.add_manifests(manifests.iter().cloned()).unwrap();
        list.close().await.unwrap();
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(sequence)
            .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::new(),
            })
            .with_schema_id(metadata.current_schema_id())
            .build();
        metadata = TableMetadataBuilder::new_from_metadata(metadata, None)
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        parent = Some(snapshot_id);
    }
    let metadata_location = MetadataLocation::new_with_metadata(&location, &metadata);
    metadata
        .write_to(&file_io, &metadata_location)
        .await
        .unwrap();
    let database = dir.join("catalog.db");
    let pool = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&database)
            .create_if_missing(true),
    )
    .await
    .unwrap();
    sqlx::query(
        "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, \
         table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, \
         metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), \
         iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name))",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO iceberg_tables VALUES ('lakehouse', 'analytics', 'events', ?, NULL, 'TABLE')",
    )
    .bind(metadata_location.to_string())
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    CatalogConfig {
        catalog_impl: "org.apache.iceberg.jdbc.JdbcCatalog".to_string(),
        uri: format!("jdbc:sqlite:{}", database.display()),
        warehouse,
        io_impl: "org.apache.iceberg.hadoop.HadoopFileIO".to_string(),
        s3_endpoint: String::new(),
        properties: Default::default(),
    }
}

fn main() {
    let full = full_run();
    let snapshots: usize = arg("--snapshots")
        .map(|value| value.parse().unwrap())
        .unwrap_or(if full { 1000 } else { 50 });
    let files: usize = arg("--files")
        .map(|value| value.parse().unwrap())
        .unwrap_or(if full { 100 } else { 20 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let catalog = runtime.block_on(write_table(dir.path(), snapshots, files));
    println!(
        "orphans: a table of {snapshots} snapshots x {files} files written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // 1% more files than the table's: orphans, two days old.
    let orphans = (snapshots * files).div_ceil(100);
    let two_days_ago = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
    let data_dir = dir.path().join("warehouse/analytics/events/data");
    for orphan in 0..orphans {
        let path = data_dir.join(format!("orphan-{orphan:06}.parquet"));
        std::fs::write(&path, b"").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
    }
    let engine = NativeEngine::new(NativeLimits::default()).unwrap();
    let task = MaintenanceTask {
        catalog_name: "lakehouse".to_string(),
        catalog,
        table: "analytics.events".to_string(),
        procedure: NativeMaintenance::RemoveOrphans(OrphanRequest {
            older_than_millis: chrono::Utc::now().timestamp_millis() - 24 * 3_600_000,
            dry_run: true,
        }),
        deadline: std::time::Instant::now() + Duration::from_secs(3600),
        run_id: "bench".to_string(),
    };
    reset_peak();
    let before = rss_kib();
    let started = Instant::now();
    let report = match runtime.block_on(engine.maintain(task)).unwrap() {
        MaintenanceReport::Orphans(report) => report,
        other => panic!("{other:?}"),
    };
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_kib();
    assert_eq!(
        report.orphans.len(),
        orphans,
        "every planted orphan, no other"
    );
    println!(
        "orphans: scan (dry run) of {} listed files, {} reachable paths: {seconds:.2} s, \
         {} orphans found; {} metadata objects read; peak RSS +{} MiB over {} MiB; \
         on S3 that is {} GETs and {} ListObjectsV2 pages",
        report.listed,
        report.reachable,
        report.orphans.len(),
        report.metadata_reads,
        peak.saturating_sub(before) / 1024,
        before / 1024,
        report.metadata_reads + 1,
        report.listed.div_ceil(1000),
    );
}
