//! The native engine on the catalogs AWS users keep Iceberg tables in (issue 50): an AWS Glue
//! Data Catalog, served on the local stack by moto's Glue. Spark creates and writes the table
//! through Iceberg's own `GlueCatalog`; icepack's native engine compacts it, committing through
//! Glue's `UpdateTable` on the table's `VersionId`; Spark, loading the table from Glue again,
//! reads the same rows from the native engine's `replace` snapshot, and its own maintenance runs
//! over it.

use crate::support;

use icepack::engine::native::{NativeEngine, NativeLimits, NativeTask};
use support::spark::{native_task, row_with, stack_available, Lakehouse};
use support::{unique, Moto};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test --test integration native_catalogs:: -- --include-ignored"]
async fn a_glue_table_spark_wrote_is_compacted_natively_and_spark_reads_it_back() {
    if !stack_available("a_glue_table_spark_wrote_is_compacted_natively_and_spark_reads_it_back") {
        return;
    }
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bucket = unique("glued");
    moto.create_bucket_notifying(&bucket, &unique("unused"))
        .await;
    let lakehouse = Lakehouse::glue(dir.path(), &moto.endpoint, &bucket, &moto.endpoint);
    let table = "analytics.glued";
    let mut setup = vec![
        "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
        format!(
            "CREATE TABLE lakehouse.{table} (id BIGINT, region STRING, amount DOUBLE) \
             USING iceberg PARTITIONED BY (region) TBLPROPERTIES ('format-version'='2')"
        ),
    ];
    for commit in 0..6 {
        let region = if commit < 4 { "eu" } else { "us" };
        let rows: Vec<String> = (0..3)
            .map(|row| {
                let id = commit * 10 + row;
                format!("({id}, '{region}', {id}.5)")
            })
            .collect();
        setup.push(format!(
            "INSERT INTO lakehouse.{table} VALUES {}",
            rows.join(", ")
        ));
    }
    let checksum = |suffix: &str| {
        format!(
            "SELECT count(*) AS rows_{suffix}, sum(id) AS ids_{suffix}, \
             sum(CAST(xxhash64(id, region, amount) AS DECIMAL(38,0))) AS hash_{suffix} \
             FROM lakehouse.{table}"
        )
    };
    setup.push(checksum("before"));
    setup.push(format!(
        "SELECT count(*) AS files_before FROM lakehouse.{table}.files"
    ));
    let before = lakehouse.sql(&(setup.join(";\n") + ";"));
    assert_eq!(row_with(&before, "files_before")["files_before"], "6");
    let expected = row_with(&before, "rows_before");
    assert_eq!(expected["rows_before"], "18");

    let engine = NativeEngine::new(NativeLimits::default()).unwrap();
    let task = NativeTask {
        min_input_files: 2,
        ..native_task(&lakehouse.catalog, "glued", Vec::new())
    };
    let report = engine.run(task).await.unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 6);
    assert_eq!(report.result.added_data_files_count, 2, "one a region");
    let replace = report.snapshot_ids[0];

    // Spark loads the table from Glue again: the native engine's commit is what Glue names.
    let after = lakehouse.sql(&format!(
        "{};\n\
         SELECT count(*) AS files_after FROM lakehouse.{table}.files;\n\
         SELECT snapshot_id AS current_snapshot, operation AS current_operation FROM lakehouse.{table}.snapshots ORDER BY committed_at DESC LIMIT 1;\n\
         CALL lakehouse.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '1', 'rewrite-all', 'true'));\n\
         {}",
        checksum("after"),
        checksum("final"),
    ));
    let rename = |row: std::collections::BTreeMap<String, String>, from: &str| {
        row.into_iter()
            .map(|(column, value)| (column.replace(from, "before"), value))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(rename(row_with(&after, "rows_after"), "after"), expected);
    assert_eq!(row_with(&after, "files_after")["files_after"], "2");
    let current = row_with(&after, "current_snapshot");
    assert_eq!(current["current_snapshot"], replace.to_string());
    assert_eq!(current["current_operation"], "replace");
    assert_eq!(
        rename(row_with(&after, "rows_final"), "final"),
        expected,
        "Spark's own rewrite through Glue after the native commit"
    );
}
