//! Equality deletes applied by the native engine (issue 48), on tables Spark wrote and Iceberg's
//! own Java writer deleted from as Flink's upsert sink does (an equality delete file on the key
//! column, committed with a RowDelta: `tests/fixtures/EqualityDeletes.java`). The run rewrites
//! the small files with the deleted rows gone, keeps a row written after the delete with a
//! deleted key (Iceberg's sequence-number rule: a delete applies to older files only), removes
//! the delete file once no live file is older than it, and Spark and PyIceberg read the same
//! rows afterwards; Spark's own maintenance accepts the result. A run due by its deletes rewrites
//! exactly the files a delete reaches, whatever their size. A table whose key column is optional
//! is refused with the reason (iceberg-rust's reader would drop its null keys too).

use crate::support;

use icepack::engine::native::{NativeEngine, NativeError, NativeLimits, NativeTask};
use support::pyiceberg::{crc_statement, pyiceberg_checksum};
use support::spark::{
    env, fixture_output, native_task, printed, row_with, stack_available, Lakehouse,
};
use support::{unique, Moto};

const TOKEN: &str = "equality-catalog-token-4471";

fn create(table: &str, key: &str) -> Vec<String> {
    let mut statements = vec![format!(
        "CREATE TABLE lakehouse.analytics.{table} (id BIGINT {key}, region STRING, ts TIMESTAMP, amount DOUBLE) \
         USING iceberg PARTITIONED BY (region) \
         TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )];
    for commit in 0..8 {
        let region = if commit < 5 { "eu" } else { "us" };
        let rows: Vec<String> = (0..3)
            .map(|row| {
                let id = commit * 10 + row;
                format!("({id}, '{region}', TIMESTAMP '2026-11-01 10:00:00' + INTERVAL {id} MINUTES, {id}.5)")
            })
            .collect();
        statements.push(format!(
            "INSERT INTO lakehouse.analytics.{table} VALUES {}",
            rows.join(", ")
        ));
    }
    statements
}

/// Rows, ids and a hash of every row as Spark reads the table.
fn checksum_statement(table: &str, suffix: &str) -> String {
    format!(
        "SELECT count(*) AS rows_{suffix}, sum(id) AS ids_{suffix}, \
         sum(CAST(xxhash64(id, region, ts, amount) AS DECIMAL(38,0))) AS hash_{suffix} \
         FROM lakehouse.analytics.{table}"
    )
}

fn checksum(stdout: &str, suffix: &str) -> Vec<String> {
    let row = row_with(stdout, &format!("rows_{suffix}"));
    ["rows", "ids", "hash"]
        .iter()
        .map(|column| row[&format!("{column}_{suffix}")].clone())
        .collect()
}

/// Deletes the rows of `table` in `region` whose `id` is one of `ids` with an equality delete
/// file written and committed by Iceberg's Java writer; the commit's sequence number.
fn equality_delete(lakehouse: &Lakehouse, table: &str, region: &str, ids: &[i64]) -> i64 {
    let spark_home = env("ICEPACK_TEST_SPARK_HOME");
    let jars = env("ICEPACK_TEST_SPARK_JARS");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/EqualityDeletes.java"
    );
    let classpath = std::iter::once(format!("{spark_home}/jars/*"))
        .chain(jars.split(',').map(str::to_string))
        .collect::<Vec<_>>()
        .join(":");
    let stdout = fixture_output(
        std::process::Command::new("java")
            .arg("-cp")
            .arg(classpath)
            .arg(source)
            .arg(&lakehouse.catalog.uri)
            .arg(TOKEN)
            .arg(&lakehouse.s3_endpoint)
            .arg(format!("analytics.{table}"))
            .args(["id", region])
            .args(ids.iter().map(i64::to_string)),
        "EqualityDeletes.java",
    );
    assert_eq!(printed(&stdout, "deletes"), ids.len().to_string());
    printed(&stdout, "sequence").parse().unwrap()
}

fn task(lakehouse: &Lakehouse, table: &str) -> NativeTask {
    native_task(
        &lakehouse.catalog,
        table,
        vec!["region=eu".to_string(), "region=us".to_string()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test --test integration equality_deletes:: -- --include-ignored"]
async fn equality_deletes_are_applied_natively_and_leave_with_the_files_they_reached() {
    if !stack_available(
        "equality_deletes_are_applied_natively_and_leave_with_the_files_they_reached",
    ) {
        return;
    }
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bucket = unique("equality");
    moto.create_bucket_notifying(&bucket, &unique("unused"))
        .await;
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[("token", TOKEN)]).await;
    let mut setup = vec!["CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string()];
    setup.extend(create("upserts", "NOT NULL"));
    setup.extend(create("optional_key", ""));
    setup.extend(create("due_by_deletes", "NOT NULL"));
    lakehouse.sql(&(setup.join(";\n") + ";"));

    // An upsert of keys 1, 12 and 61: their old rows deleted by equality, as Flink writes it,
    // then key 12 written again (after the delete: it stays). Key 61 is in `us`, where the
    // delete (of partition `eu`) does not reach.
    let sequence = equality_delete(&lakehouse, "upserts", "eu", &[1, 12, 61]);
    equality_delete(&lakehouse, "optional_key", "eu", &[1]);
    equality_delete(&lakehouse, "due_by_deletes", "eu", &[2, 22]);
    let before = lakehouse.sql(&format!(
        "INSERT INTO lakehouse.analytics.upserts VALUES (12, 'eu', TIMESTAMP '2026-11-02 00:00:00', 99.5), (13, 'eu', TIMESTAMP '2026-11-02 00:00:00', 98.5);\n\
         {};\n\
         SELECT count(*) AS delete_files FROM lakehouse.analytics.upserts.delete_files WHERE content = 2;\n\
         SELECT count(*) AS files_before FROM lakehouse.analytics.upserts.data_files;\n\
         SELECT count_if(id = 1) AS key_1, count_if(id = 12) AS key_12, count_if(id = 61) AS key_61 FROM lakehouse.analytics.upserts;",
        checksum_statement("upserts", "before")
    ));
    assert_eq!(
        row_with(&before, "delete_files")["delete_files"],
        "1",
        "an equality delete file: {before}"
    );
    let keys = row_with(&before, "key_1");
    assert_eq!(
        (
            keys["key_1"].as_str(),
            keys["key_12"].as_str(),
            keys["key_61"].as_str()
        ),
        ("0", "1", "1"),
        "Spark applies the delete by its sequence number and partition"
    );
    let files_before: u64 = row_with(&before, "files_before")["files_before"]
        .parse()
        .unwrap();
    let expected = checksum(&before, "before");
    assert_eq!(expected[0], "24", "24 rows, 2 deleted, 2 written again");
    assert!(sequence > 0);

    let engine = NativeEngine::new(NativeLimits::default()).unwrap();
    let planned = engine.plan(task(&lakehouse, "upserts")).await.unwrap();
    let report = engine
        .run(task(&lakehouse, "upserts"))
        .await
        .unwrap_or_else(|error| panic!("upserts: {error}"));
    println!(
        "upserts: {} files into {}, {} delete file(s) removed",
        report.result.rewritten_data_files_count,
        report.result.added_data_files_count,
        report.result.removed_delete_files_count
    );
    assert_eq!(report.result.rewritten_data_files_count, files_before);
    assert_eq!(planned.input_files(), files_before);
    assert_eq!(
        report.result.added_data_files_count, 2,
        "one output a region"
    );
    assert_eq!(
        report.result.removed_delete_files_count, 1,
        "no live file is older than the delete in its partition: it dangles and leaves"
    );
    let after = lakehouse.sql(&format!(
        "{};\n{};\n\
         SELECT count(*) AS delete_files FROM lakehouse.analytics.upserts.delete_files;\n\
         SELECT count_if(id = 1) AS key_1, count_if(id = 12) AS key_12, count_if(id = 61) AS key_61, \
                count_if(id = 12 AND amount = 99.5) AS key_12_new FROM lakehouse.analytics.upserts;\n\
         SELECT summary['removed-equality-delete-files'] AS removed_equality FROM lakehouse.analytics.upserts.snapshots WHERE operation = 'replace';",
        checksum_statement("upserts", "after"),
        crc_statement("analytics.upserts"),
    ));
    assert_eq!(
        checksum(&after, "after"),
        expected,
        "Spark reads the same rows"
    );
    let keys = row_with(&after, "key_1");
    assert_eq!(
        (
            keys["key_1"].as_str(),
            keys["key_12"].as_str(),
            keys["key_61"].as_str(),
            keys["key_12_new"].as_str()
        ),
        ("0", "1", "1", "1"),
        "deleted rows stay deleted, the row written after the delete stays"
    );
    assert_eq!(row_with(&after, "delete_files")["delete_files"], "0");
    assert_eq!(
        row_with(&after, "removed_equality")["removed_equality"],
        "1"
    );
    let crc = row_with(&after, "crc_rows");
    assert_eq!(
        pyiceberg_checksum(&lakehouse, TOKEN, "analytics.upserts"),
        (crc["crc_rows"].clone(), crc["crc_sum"].clone()),
        "PyIceberg reads the rows Spark reads"
    );

    // Spark's own maintenance accepts what the native engine wrote.
    let spark_after = lakehouse.sql(&format!(
        "CALL lakehouse.system.rewrite_data_files(table => 'analytics.upserts', options => map('min-input-files', '2', 'rewrite-all', 'true'));\n\
         CALL lakehouse.system.expire_snapshots(table => 'analytics.upserts', older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1);\n\
         {};",
        checksum_statement("upserts", "final")
    ));
    assert_eq!(checksum(&spark_after, "final"), expected);

    // A run due by its deletes (`delete_file_threshold`): no file is small, and exactly the
    // files the delete reaches are rewritten — the older files of its partition, not the file
    // written after it, not the other partition's.
    let due = lakehouse.sql(&format!(
        "INSERT INTO lakehouse.analytics.due_by_deletes VALUES (2, 'eu', TIMESTAMP '2026-11-02 00:00:00', 97.5);\n{}",
        checksum_statement("due_by_deletes", "due")
    ));
    let report = engine
        .run(NativeTask {
            small_file_bytes: 1,
            apply_deletes: true,
            ..task(&lakehouse, "due_by_deletes")
        })
        .await
        .unwrap_or_else(|error| panic!("due_by_deletes: {error}"));
    assert_eq!(
        (
            report.result.rewritten_data_files_count,
            report.result.added_data_files_count,
            report.result.removed_delete_files_count
        ),
        (5, 1, 1),
        "the five files of `eu` older than the delete, into one; the delete leaves"
    );
    let after = lakehouse.sql(&format!(
        "{};\nSELECT count(*) AS delete_files FROM lakehouse.analytics.due_by_deletes.delete_files;\n\
         SELECT count(*) AS files FROM lakehouse.analytics.due_by_deletes.data_files;",
        checksum_statement("due_by_deletes", "after")
    ));
    assert_eq!(checksum(&after, "after"), checksum(&due, "due"));
    assert_eq!(row_with(&after, "delete_files")["delete_files"], "0");
    assert_eq!(
        row_with(&after, "files")["files"],
        "5",
        "the output, the file written after the delete and the three of `us`"
    );

    // An optional key: refused for another engine, with the reason, and nothing written.
    let error = engine
        .run(task(&lakehouse, "optional_key"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, NativeError::Unsupported(ref reason) if reason.contains("equality column `id` is optional")),
        "{error}"
    );
    assert!(error.needs_another_engine());
    let untouched = lakehouse.sql(
        "SELECT count(*) AS replaces FROM lakehouse.analytics.optional_key.snapshots WHERE operation = 'replace'",
    );
    assert_eq!(row_with(&untouched, "replaces")["replaces"], "0");
}
