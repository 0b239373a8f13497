//! Table maintenance in the native engine (issue 50), proven on tables Spark wrote on the local
//! stack's S3 (moto) through Iceberg's REST catalog server:
//! - `remove_orphan_files` lists the table's location with `ListObjectsV2` (where Spark's own
//!   procedure needs a Hadoop file system for `s3://`), counts in a dry run, deletes only the
//!   planted orphans older than the cutoff, and keeps a fresh one, a hidden one and every file
//!   any snapshot reads;
//! - `expire_snapshots` after a native rewrite keeps the current snapshot, a tag's and a branch's,
//!   and deletes every file only the expired snapshots read, so the objects left under `data/`
//!   are exactly the files Spark's `all_data_files` names.
//!
//! PyIceberg reads every kept snapshot identically before and after; Spark reads the same rows
//! and its own maintenance runs over the table afterwards.

use crate::support;

use std::time::Duration;

use icepack::engine::native::{
    ExpireRequest, MaintenanceReport, MaintenanceTask, NativeEngine, NativeLimits,
    NativeMaintenance, NativeTask, OrphanRequest,
};
use support::pyiceberg::{crc_statement, pyiceberg_checksum, pyiceberg_snapshot_checksums};
use support::spark::{native_task, row_with, stack_available, Lakehouse};
use support::{unique, wait_until, Moto};

const TOKEN: &str = "maintenance-catalog-token-8813";

/// Six commits into two days, a row-level delete (a position delete file: merge-on-read), then
/// Spark's own compaction: the older snapshots read data files the current one no longer does.
fn history(table: &str) -> Vec<String> {
    let mut statements = vec![
        "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
        format!(
            "CREATE TABLE lakehouse.{table} (id BIGINT, region STRING, ts TIMESTAMP, amount DOUBLE) \
             USING iceberg PARTITIONED BY (days(ts)) \
             TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
        ),
    ];
    for commit in 0..6 {
        let rows: Vec<String> = (0..3)
            .map(|row| {
                let id = commit * 10 + row;
                let day = 1 + commit % 2;
                format!("({id}, 'eu', TIMESTAMP '2026-11-0{day} 10:00:00' + INTERVAL {id} MINUTES, {id}.5)")
            })
            .collect();
        statements.push(format!(
            "INSERT INTO lakehouse.{table} VALUES {}",
            rows.join(", ")
        ));
    }
    statements.push(format!("DELETE FROM lakehouse.{table} WHERE id = 11"));
    statements.push(format!(
        "CALL lakehouse.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '2'))"
    ));
    statements
}

/// A `remove_orphan_files` run's report.
async fn orphans(
    engine: &NativeEngine,
    task: MaintenanceTask,
) -> icepack::engine::native::OrphanReport {
    match engine.maintain(task).await.unwrap() {
        MaintenanceReport::Orphans(report) => report,
        other => panic!("not an orphan report: {other:?}"),
    }
}

fn maintenance(lakehouse: &Lakehouse, table: &str, request: OrphanRequest) -> MaintenanceTask {
    MaintenanceTask {
        catalog_name: "lakehouse".to_string(),
        catalog: lakehouse.catalog.clone(),
        table: table.to_string(),
        procedure: NativeMaintenance::RemoveOrphans(request),
        deadline: std::time::Instant::now() + Duration::from_secs(600),
        run_id: icepack::runs::report::new_run_id(chrono::Utc::now().timestamp_millis()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test --test integration native_maintenance:: -- --include-ignored"]
async fn native_remove_orphan_files_on_s3_deletes_only_old_orphans_and_every_snapshot_reads() {
    if !stack_available(
        "native_remove_orphan_files_on_s3_deletes_only_old_orphans_and_every_snapshot_reads",
    ) {
        return;
    }
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bucket = unique("orphans");
    moto.create_bucket_notifying(&bucket, &unique("unused"))
        .await;
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[("token", TOKEN)]).await;
    let table = "analytics.orphaned";
    let mut setup = history(table);
    setup.push(crc_statement(table));
    setup.push(format!(
        "SELECT count(*) AS snapshots FROM lakehouse.{table}.snapshots"
    ));
    let before = lakehouse.sql(&(setup.join(";\n") + ";"));
    let spark_before = row_with(&before, "crc_rows");
    assert_eq!(spark_before["crc_rows"], "17", "18 rows, one deleted");
    let snapshots_before = pyiceberg_snapshot_checksums(&lakehouse, TOKEN, table);
    assert_eq!(
        snapshots_before.len().to_string(),
        row_with(&before, "snapshots")["snapshots"],
        "PyIceberg reads every snapshot Spark lists"
    );

    // Orphans as a failed writer leaves them: a data file and a manifest, written before the
    // cutoff; a file written at the cutoff (a writer's upload in flight); a hidden one.
    let prefix = "warehouse/analytics/orphaned";
    let old = [
        format!("{prefix}/data/ts_day=2026-11-01/00000-9-orphan.parquet"),
        format!("{prefix}/metadata/orphan-m0.avro"),
    ];
    let hidden = format!("{prefix}/data/_temporary/0/part-00000.parquet");
    for key in old.iter().chain([&hidden]) {
        moto.put_object(&bucket, key, 64).await;
    }
    let old_written = moto.last_modified(&bucket, &old[1]).await.unwrap();
    // S3 stamps whole seconds: the fresh file is written again until its stamp is later.
    let fresh = format!("{prefix}/data/ts_day=2026-11-02/00000-9-in-flight.parquet");
    let cutoff = wait_until(
        "a later Last-Modified for the fresh file",
        Duration::from_secs(30),
        || {
            let (moto, bucket, fresh) = (&moto, &bucket, &fresh);
            async move {
                moto.put_object(bucket, fresh, 64).await;
                let written = moto.last_modified(bucket, fresh).await.unwrap();
                (written > old_written).then_some(written)
            }
        },
    )
    .await;
    let request = |dry_run| OrphanRequest {
        older_than_millis: cutoff,
        dry_run,
    };

    let engine = NativeEngine::new(NativeLimits::default()).unwrap();
    let dry = orphans(&engine, maintenance(&lakehouse, table, request(true))).await;
    let expected: Vec<String> = old
        .iter()
        .map(|key| format!("s3://{bucket}/{key}"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(dry.orphans, expected, "{dry:?}");
    assert!(dry.dry_run);
    assert_eq!((dry.young, dry.hidden), (1, 1), "{dry:?}");
    for key in old.iter().chain([&hidden, &fresh]) {
        assert!(
            moto.last_modified(&bucket, key).await.is_some(),
            "a dry run deletes nothing: {key}"
        );
    }

    let removed = orphans(&engine, maintenance(&lakehouse, table, request(false))).await;
    println!(
        "remove_orphan_files: {} listed, {} reachable, {} removed, {} young, {} hidden",
        removed.listed,
        removed.reachable,
        removed.orphans.len(),
        removed.young,
        removed.hidden
    );
    assert_eq!(removed.orphans, expected);
    assert_eq!(
        removed.listed, dry.listed,
        "nothing else changed in between"
    );
    for key in &old {
        assert!(
            moto.last_modified(&bucket, key).await.is_none(),
            "the old orphan is gone: {key}"
        );
    }
    for key in [&hidden, &fresh] {
        assert!(
            moto.last_modified(&bucket, key).await.is_some(),
            "kept: {key}"
        );
    }
    // A second run finds nothing more.
    let again = orphans(&engine, maintenance(&lakehouse, table, request(false))).await;
    assert!(again.orphans.is_empty(), "{again:?}");

    // Every snapshot reads as before (a file any of them needs would fail the read), Spark
    // reads the same rows, and its own maintenance runs over the table.
    assert_eq!(
        pyiceberg_snapshot_checksums(&lakehouse, TOKEN, table),
        snapshots_before
    );
    let first = &snapshots_before[0].0;
    let after = lakehouse.sql(&format!(
        "{current};\n\
         SELECT count(*) AS first_rows FROM lakehouse.{table} VERSION AS OF {first};\n\
         CALL lakehouse.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '1', 'rewrite-all', 'true'));\n\
         CALL lakehouse.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1);\n\
         SELECT count(*) AS final_rows FROM lakehouse.{table}",
        current = crc_statement(table),
    ));
    let spark_after = row_with(&after, "crc_rows");
    assert_eq!(spark_after, spark_before, "Spark reads the same rows");
    assert_eq!(
        row_with(&after, "first_rows")["first_rows"],
        snapshots_before[0].1,
        "Spark reads the oldest snapshot too"
    );
    assert_eq!(row_with(&after, "final_rows")["final_rows"], "17");
    assert_eq!(
        pyiceberg_checksum(&lakehouse, TOKEN, table),
        (
            spark_before["crc_rows"].clone(),
            spark_before["crc_sum"].clone()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test --test integration native_maintenance:: -- --include-ignored"]
async fn native_expire_snapshots_keeps_tags_and_branches_and_deletes_only_unread_files() {
    if !stack_available(
        "native_expire_snapshots_keeps_tags_and_branches_and_deletes_only_unread_files",
    ) {
        return;
    }
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bucket = unique("expiry");
    moto.create_bucket_notifying(&bucket, &unique("unused"))
        .await;
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[("token", TOKEN)]).await;
    let table = "analytics.expiring";
    // A branch from the first commit, two more commits and a tag on the third, three more on
    // `main`, then a commit on the branch.
    let insert = |batch: i64| {
        let rows: Vec<String> = (0..3)
            .map(|row| {
                let id = batch * 10 + row;
                format!(
                    "({id}, 'eu', TIMESTAMP '2026-11-01 10:00:00' + INTERVAL {id} MINUTES, {id}.5)"
                )
            })
            .collect();
        format!("INSERT INTO lakehouse.{table} VALUES {}", rows.join(", "))
    };
    let mut setup = vec![
        "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
        format!(
            "CREATE TABLE lakehouse.{table} (id BIGINT, region STRING, ts TIMESTAMP, amount DOUBLE) \
             USING iceberg PARTITIONED BY (days(ts)) TBLPROPERTIES ('format-version'='2')"
        ),
    ];
    setup.push(insert(0));
    setup.push(format!("ALTER TABLE lakehouse.{table} CREATE BRANCH dev"));
    setup.extend((1..3).map(insert));
    setup.push(format!("ALTER TABLE lakehouse.{table} CREATE TAG audit"));
    setup.extend((3..6).map(insert));
    setup.push(insert(6).replace(table, &format!("{table}.branch_dev")));
    setup.push(format!(
        "SELECT count(*) AS snapshots FROM lakehouse.{table}.snapshots"
    ));
    let before = lakehouse.sql(&(setup.join(";\n") + ";"));
    assert_eq!(row_with(&before, "snapshots")["snapshots"], "7");
    let snapshots_before = pyiceberg_snapshot_checksums(&lakehouse, TOKEN, table);
    assert_eq!(snapshots_before.len(), 7);
    let data_prefix = "warehouse/analytics/expiring/data/";
    let objects_before = moto.list_keys(&bucket, data_prefix).await.len();
    assert_eq!(objects_before, 7, "one data file a commit");

    // Every snapshot is older than the cutoff; one kept a branch.
    let engine = NativeEngine::new(NativeLimits::default()).unwrap();
    let task = NativeTask {
        expire: Some(ExpireRequest {
            older_than_millis: chrono::Utc::now().timestamp_millis() + 1,
            retain_last: Some(1),
        }),
        ..native_task(&lakehouse.catalog, "expiring", Vec::new())
    };
    let report = engine.run(task).await.unwrap();
    assert_eq!(
        report.result.rewritten_data_files_count, 6,
        "main's six files"
    );
    assert_eq!(report.maintenance_failed, None);

    let objects_after_expiry = moto.list_keys(&bucket, data_prefix).await;
    assert!(objects_after_expiry.len() < objects_before);

    // Kept: the rewrite's snapshot, the tag's, the branch's head; each reads as before.
    let snapshots_after = pyiceberg_snapshot_checksums(&lakehouse, TOKEN, table);
    assert_eq!(snapshots_after.len(), 3, "{snapshots_after:?}");
    for kept in &snapshots_after[..2] {
        assert!(
            snapshots_before.contains(kept),
            "a kept snapshot reads as before: {kept:?} in {snapshots_before:?}"
        );
    }
    let replace = report.snapshot_ids[0].to_string();
    assert!(snapshots_after
        .iter()
        .any(|(id, rows, _)| *id == replace && rows == "18"));
    let after = lakehouse.sql(&format!(
        "SELECT count(*) AS tagged_rows FROM lakehouse.{table} VERSION AS OF 'audit';\n\
         SELECT count(*) AS branch_rows FROM lakehouse.{table}.branch_dev;\n\
         SELECT count(*) AS main_rows FROM lakehouse.{table};\n\
         SELECT count(DISTINCT file_path) AS reachable_files FROM lakehouse.{table}.all_data_files;\n\
         CALL lakehouse.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '1', 'rewrite-all', 'true'));\n\
         CALL lakehouse.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1);\n\
         SELECT count(*) AS final_rows FROM lakehouse.{table}"
    ));
    assert_eq!(row_with(&after, "tagged_rows")["tagged_rows"], "9");
    assert_eq!(row_with(&after, "branch_rows")["branch_rows"], "6");
    assert_eq!(row_with(&after, "main_rows")["main_rows"], "18");
    assert_eq!(row_with(&after, "final_rows")["final_rows"], "18");
    // The data files kept snapshots read: the tag's three (the first shared with the branch),
    // the branch's own, the rewrite's output; the files only `main`'s expired snapshots read
    // (commits four to six) are gone, and nothing else is.
    let reachable: usize = row_with(&after, "reachable_files")["reachable_files"]
        .parse()
        .unwrap();
    assert_eq!(reachable, 5, "{after}");
    assert_eq!(
        objects_after_expiry.len(),
        reachable,
        "{objects_after_expiry:?}"
    );
}
