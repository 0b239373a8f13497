//! Iceberg format v3 on the real stack: row lineage kept, deletion vectors counted, statistics
//! computed, a v2 table upgraded while watched.

use crate::support;
use crate::support::warm_stack::*;

use std::time::Duration;

use icepack::engine::spark::connect::ConnectRunner;
use support::connect::value;
use support::{wait_until, Icepack, Moto};

/// The current metadata of `name` as JSON: the newest entry of its metadata log (the current file
/// is the last), read from moto.
async fn current_metadata(table: &Table, writer: &ConnectRunner, moto: &Moto) -> serde_json::Value {
    let name = table.qualified();
    let read = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!(
                    "SELECT file AS metadata_file FROM {name}.metadata_log_entries \
                     ORDER BY timestamp DESC LIMIT 1"
                ),
            ],
        )
        .await;
    let path = value(&read, "metadata_file");
    let (bucket, key) = icepack::runs::report::split_object_path(&path)
        .unwrap_or_else(|| panic!("not an S3 path: {path}"));
    serde_json::from_slice(&moto.get_object(bucket, key).await).unwrap()
}

/// Whether `metadata` lists a file of `list` (`statistics`, `partition-statistics`) for its
/// current snapshot.
fn statistics_of_current_snapshot(metadata: &serde_json::Value, list: &str) -> bool {
    let current = &metadata["current-snapshot-id"];
    metadata[list].as_array().is_some_and(|files| {
        files
            .iter()
            .any(|file| &file["snapshot-id"] == current && file["statistics-path"].is_string())
    })
}

/// The table's run history, newest first, from the HTTP API.
async fn runs_of(http: &str, table: &str) -> Vec<serde_json::Value> {
    support::get_json(&format!("http://{http}/v1/tables/{table}/runs")).await["runs"]
        .as_array()
        .unwrap()
        .clone()
}

/// Issue 33 items 3 and 5, format v3 on Spark 4.0 with Iceberg 1.10, two tables on one Spark
/// Connect server and one icepack:
/// - `lineage`, v3 merge-on-read: its small files are sorted (`strategy = "sort"`) into one,
///   `expire_snapshots` after it without a failure note, the rows, checksum,
///   format and every row's lineage (`_row_id`, `_last_updated_sequence_number`) unchanged; then
///   `compute_statistics` writes its Puffin statistics for the current snapshot; DELETEs write
///   deletion vectors (Puffin files), counted from their S3 events; the run due by them merges
///   them, what the metadata then has is counted, the lineage unchanged.
///   Then `rewrite_manifests` and `remove_orphan_files` (a dry run, listing the S3 location
///   through the table's FileIO) succeed on it, keeping the rows, the lineage and a fresh file.
/// - `upgraded`, v2, `engine = "auto"`, partitioned: bin-packed by the native engine, its
///   statistics (table and partition) computed by Spark with the reason; upgraded to v3 while
///   icepack watches it, its next run goes to Spark because the native engine writes v2 only,
///   succeeds, and leaves the pending files the table's own (not the partition statistics,
///   Parquet in its metadata directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn format_v3_tables_keep_their_lineage_count_their_vectors_and_take_an_upgrade() {
    let test = "format_v3_tables_keep_their_lineage_count_their_vectors_and_take_an_upgrade";
    if !connect_available(test) {
        return;
    }
    let _shared = HEAVY.read().await;
    let started = std::time::Instant::now();
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.lineage");
    let name = table.qualified();
    create_merge_on_read(&table, writer, 3).await;
    let upgraded = stack.table("upgrading", "analytics.upgraded");
    let upgraded_name = upgraded.qualified();
    upgraded
        .sql(
            writer,
            &[
                format!(
                    "CREATE NAMESPACE IF NOT EXISTS {}.analytics",
                    upgraded.catalog
                ),
                format!(
                    "CREATE TABLE {upgraded_name} (id BIGINT, order_date STRING, amount DOUBLE) \
                     USING iceberg PARTITIONED BY (order_date) \
                     TBLPROPERTIES ('format-version' = '2', 'write.distribution-mode' = 'none')"
                ),
            ],
        )
        .await;
    // The upgraded table's rows: twelve files in one partition, in one commit (SQLite's JDBC
    // catalog takes one commit at a time across processes, and the native engine commits from
    // icepack's: a writer committing file after file would race it).
    let twelve_files = |first_id: i64| -> Vec<String> {
        let rows: Vec<String> = (first_id..first_id + 60)
            .map(|id| format!("({id}, '2024-05-01', {}.25)", id * 3))
            .collect();
        vec![format!(
            "INSERT INTO {upgraded_name} SELECT /*+ REPARTITION(12) */ * FROM VALUES {}",
            rows.join(", ")
        )]
    };
    let lineage = |name: &str| {
        vec![
            format!("REFRESH TABLE {name}"),
            format!(
                "SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum, \
                 sum(hash(id, _row_id, _last_updated_sequence_number)) AS lineage, \
                 count(DISTINCT _row_id) AS row_ids FROM {name}"
            ),
            format!("SELECT count(*) AS data_files FROM {name}.files WHERE content = 0"),
            format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
            format!("SHOW TBLPROPERTIES {name} ('format-version')"),
        ]
    };
    let http = format!("127.0.0.1:{}", support::free_port());
    let config = config(
        moto,
        queue_url,
        bucket,
        &server.url,
        &http,
        &[&table, &upgraded],
    )
    .replace(
        "min_files = 10\n",
        "min_files = 10\ndelete_file_threshold = 3\n",
    )
    .replace(
        "table = \"analytics.lineage\"\n",
        "table = \"analytics.lineage\"\nstrategy = \"sort\"\nsort_order = \"id\"\n\
             compute_statistics = true\nexpire_snapshots_older_than_hours = 1\n",
    )
    .replace(
        "table = \"analytics.upgraded\"\n",
        "table = \"analytics.upgraded\"\nengine = \"auto\"\ncompute_statistics = true\n",
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());
    // The last run of `table` once it is `task`, started at or after `after`, and none is in flight.
    let settled = |table: &'static str, task: &'static str, after: String| {
        let icepack = &icepack;
        async move {
            wait_until(
                &format!("a {task} run of {table} after {after}"),
                Duration::from_secs(300),
                || {
                    let status = table_status(icepack, table);
                    let after = after.clone();
                    async move {
                        let last = &status["last_run"];
                        let started = last["started_at"].as_str()? >= after.as_str();
                        let idle = status["in_flight_run"].is_null();
                        (started && idle && last["task"] == task).then_some(status)
                    }
                },
            )
            .await
        }
    };
    let now = || icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());

    let writing = now();
    table.sql(writer, &inserts(&name, 0, 12)).await;
    let written = upgraded
        .sql(
            writer,
            &[
                twelve_files(0).remove(0),
                format!("SELECT count(*) AS data_files FROM {upgraded_name}.files"),
            ],
        )
        .await;
    assert_eq!(value(&written, "data_files"), "12", "{written:?}");
    let before = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&before, "row_count"), "60", "{before:?}");
    assert_eq!(
        value(&before, "row_ids"),
        "60",
        "every row has its id: {before:?}"
    );
    assert_eq!(value(&before, "data_files"), "12", "{before:?}");
    // A run that starts while the last INSERTs commit rewrites what is committed (or nothing,
    // below min-input-files): the table is compacted once runs have rewritten all twelve; the
    // statistics of what they left follow.
    wait_until(
        "the twelve files rewritten",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, table.name);
            async move { (status["compacted_files"].as_u64()? >= 12).then_some(()) }
        },
    )
    .await;
    let status = settled(table.name, "compute_statistics", writing.clone()).await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(
        status["last_run"]["statistics_files"], 1,
        "table statistics (unpartitioned): {status}"
    );
    let compacted = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&compacted, "data_files"), "1", "{compacted:?}");
    assert_eq!(value(&compacted, "checksum"), value(&before, "checksum"));
    assert_eq!(
        value(&compacted, "lineage"),
        value(&before, "lineage"),
        "row ids and their sequence numbers survive the sort: {before:?} {compacted:?}"
    );
    assert!(
        format!("{compacted:?}").contains("\"3\""),
        "still format v3: {compacted:?}"
    );
    let metadata = current_metadata(&table, writer, moto).await;
    assert!(
        statistics_of_current_snapshot(&metadata, "statistics"),
        "NDV sketches for the current snapshot: {}",
        metadata["statistics"]
    );
    let history = runs_of(&http, table.name).await;
    let rewrites: Vec<&serde_json::Value> = history
        .iter()
        .filter(|run| {
            run["task"] == "rewrite_data_files" && run["rewritten_data_files"].as_u64() > Some(0)
        })
        .collect();
    assert!(!rewrites.is_empty(), "{history:?}");
    for rewrite in &rewrites {
        assert_eq!(rewrite["strategy"], "sort", "{rewrite}");
        assert!(
            rewrite["maintenance_failed"].is_null(),
            "expire_snapshots ran on v3: {rewrite}"
        );
    }

    // The upgraded table: its v2 files bin-packed by the native engine, its statistics by Spark.
    let status = settled(upgraded.name, "compute_statistics", writing.clone()).await;
    let history = runs_of(&http, upgraded.name).await;
    let native = history
        .iter()
        .find(|run| run["task"] == "rewrite_data_files" && run["outcome"] == "success")
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(native["engine"], "native", "{native}");
    let last = &status["last_run"];
    assert_eq!(
        last["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["engine"], "spark", "{last}");
    assert!(
        last["engine_detail"]
            .as_str()
            .unwrap()
            .contains("auto: compute_statistics is a Spark procedure"),
        "{last}"
    );
    assert_eq!(
        last["statistics_files"], 2,
        "table and partition statistics: {last}"
    );
    let metadata = current_metadata(&upgraded, writer, moto).await;
    assert!(
        statistics_of_current_snapshot(&metadata, "statistics"),
        "{metadata}"
    );
    assert!(
        statistics_of_current_snapshot(&metadata, "partition-statistics"),
        "{}",
        metadata["partition-statistics"]
    );
    assert_eq!(metadata["format-version"], 2);

    // Upgraded to v3 while icepack watches it; twelve more files: the native engine writes v2
    // only, so the run goes to Spark and says why.
    let upgrading = now();
    upgraded
        .sql(
            writer,
            &[format!(
                "ALTER TABLE {upgraded_name} SET TBLPROPERTIES ('format-version' = '3')"
            )],
        )
        .await;
    upgraded.sql(writer, &twelve_files(60)).await;
    let status = settled(upgraded.name, "compute_statistics", upgrading.clone()).await;
    let history = runs_of(&http, upgraded.name).await;
    let after_upgrade: Vec<&serde_json::Value> = history
        .iter()
        .filter(|run| run["started_at"].as_str().unwrap() >= upgrading.as_str())
        .collect();
    let routed = after_upgrade
        .iter()
        .find(|run| run["task"] == "rewrite_data_files" && run["outcome"] == "success")
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(routed["engine"], "spark", "{routed}");
    assert!(
        routed["engine_detail"]
            .as_str()
            .unwrap()
            .contains("format version"),
        "the reason: {routed}"
    );
    assert_eq!(status["last_run"]["outcome"], "success", "{status}");
    let facts = upgraded
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {upgraded_name}"),
                format!("SELECT count(*) AS row_count, count(DISTINCT id) AS ids, sum(id) AS id_sum FROM {upgraded_name}"),
                format!("SELECT count(*) AS data_files FROM {upgraded_name}.files WHERE content = 0"),
                format!("SHOW TBLPROPERTIES {upgraded_name} ('format-version')"),
            ],
        )
        .await;
    assert_eq!(value(&facts, "row_count"), "120", "{facts:?}");
    assert_eq!(value(&facts, "ids"), "120", "{facts:?}");
    assert_eq!(
        value(&facts, "id_sum"),
        (0..120).sum::<i64>().to_string(),
        "{facts:?}"
    );
    assert!(
        format!("{facts:?}").contains("\"3\""),
        "now format v3: {facts:?}"
    );
    let metadata = current_metadata(&upgraded, writer, moto).await;
    assert_eq!(metadata["format-version"], 3);
    assert!(
        statistics_of_current_snapshot(&metadata, "partition-statistics"),
        "{}\n{:?}",
        metadata["partition-statistics"],
        runs_of(&http, upgraded.name).await,
    );

    // Three DELETEs on `lineage`: deletion vectors (one live per data file, each replacing the
    // last), three Puffin uploads whose events make the table due by its deletes.
    let deleting = now();
    let deletes: Vec<String> = [2, 22, 42]
        .iter()
        .map(|id| format!("DELETE FROM {name} WHERE id = {id}"))
        .collect();
    table.sql(writer, &deletes).await;
    let deleted = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&deleted, "row_count"), "57", "{deleted:?}");
    assert!(
        value(&deleted, "delete_files").parse::<u64>().unwrap() >= 1,
        "a deletion vector is live: {deleted:?}"
    );
    // Few deleted rows (3 of 60): the run merges delete files (`rewrite_position_delete_files`);
    // a v3 table already holds one deletion vector a data file, so what is left is read back
    // from the metadata, and the events counted meanwhile are settled by it.
    // It changed the table when it rewrote or added a delete file: its statistics follow.
    let history = wait_until(
        "the deletes' run (and its statistics, if it changed the table)",
        Duration::from_secs(300),
        || {
            let idle = table_status(&icepack, table.name)["in_flight_run"].is_null();
            let http = http.clone();
            let deleting = deleting.clone();
            async move {
                let history = runs_of(&http, table.name).await;
                let since: Vec<&serde_json::Value> = history
                    .iter()
                    .filter(|run| run["started_at"].as_str() >= Some(deleting.as_str()))
                    .collect();
                let merged = since.iter().find(|run| {
                    run["task"] == "rewrite_position_delete_files" && run["outcome"] == "success"
                })?;
                let changed = merged["delete_files_rewritten"].as_u64() > Some(0)
                    || merged["delete_files_added"].as_u64() > Some(0);
                let computed = since.iter().any(|run| run["task"] == "compute_statistics");
                (idle && (computed || !changed)).then_some(history)
            }
        },
    )
    .await;
    let merged = history
        .iter()
        .find(|run| {
            run["task"] == "rewrite_position_delete_files"
                && run["started_at"].as_str().unwrap() >= deleting.as_str()
        })
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(merged["outcome"], "success", "{merged}");
    let after = table.sql(writer, &lineage(&name)).await;
    let live: u64 = value(&after, "delete_files").parse().unwrap();
    assert!(
        live <= 1,
        "at most one deletion vector a data file: {after:?}"
    );
    assert_eq!(value(&after, "row_count"), "57");
    assert_eq!(value(&after, "checksum"), value(&deleted, "checksum"));
    assert_eq!(
        value(&after, "lineage"),
        value(&deleted, "lineage"),
        "lineage survives the deletes' run"
    );
    let deletes = &table_status(&icepack, table.name)["deletes"];
    assert_eq!(deletes["position_files"], live, "{deletes}");
    assert_eq!(deletes["announced_since_read"], 0, "{deletes}");
    assert_eq!(deletes["due"], false, "{deletes}");
    // The upgraded table's pending files are its own small data files (the output), not the
    // partition statistics its runs wrote into its metadata directory as Parquet.
    let status = table_status(&icepack, upgraded.name);
    assert_eq!(
        status["pending_files"].as_u64(),
        value(&facts, "data_files").parse::<u64>().ok(),
        "{status}"
    );
    assert_eq!(status["unconfirmed_files"], 0, "{status}");

    // Manifests and orphans on v3, asked for over HTTP: `rewrite_manifests` keeps every row and
    // its lineage; `remove_orphan_files` (the table's first: a dry run) lists the table's S3
    // location through its FileIO (`prefix_listing`), where Hadoop has no file system for `s3`,
    // and keeps a fresh file no snapshot references (younger than `orphan_older_than_hours`).
    let fresh_orphan = format!(
        "warehouse/analytics/{}/data/never-committed.parquet",
        table.name.rsplit('.').next().unwrap()
    );
    moto.put_object(bucket, &fresh_orphan, 64).await;
    for task in ["rewrite_manifests", "remove_orphan_files"] {
        let asked = now();
        let (answer, body) = ask_maintenance(&http, table.name, task).await;
        assert_eq!(answer, 202, "{task}: {body}");
        let status = settled(table.name, task, asked).await;
        let last = &status["last_run"];
        assert_eq!(
            last["outcome"],
            "success",
            "{task} on v3: {status}\n{}",
            context(&icepack)
        );
        if task == "remove_orphan_files" {
            assert_eq!(last["dry_run"], true, "{last}");
            assert_eq!(last["orphan_files"], 0, "the fresh file is kept: {last}");
            assert!(status["orphans"]["last_failed_at"].is_null(), "{status}");
            assert_eq!(status["orphans"]["next_is_dry_run"], false, "{status}");
        }
    }
    assert_eq!(moto.get_object(bucket, &fresh_orphan).await.len(), 64);
    let maintained = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&maintained, "row_count"), "57", "{maintained:?}");
    assert_eq!(value(&maintained, "checksum"), value(&deleted, "checksum"));
    assert_eq!(
        value(&maintained, "lineage"),
        value(&deleted, "lineage"),
        "lineage survives rewrite_manifests"
    );
    assert!(icepack.terminate(run).await.success());
    println!(
        "FIGURES format v3: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
