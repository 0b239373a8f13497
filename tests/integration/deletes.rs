//! Merge-on-read tables on the real stack: position deletes counted from their S3 events make a
//! table due, and its run applies them.

use crate::support;
use crate::support::warm_stack::*;

use support::connect::value;
use support::Icepack;

/// Issue 18's delete files on the real stack: a merge-on-read table (format v2) gets position
/// deletes from `DELETE` statements; their own S3 events (`...-deletes.parquet`) make it due at
/// `delete_file_threshold` with no compaction due; the run rewrites the data files that carry
/// deletes, applying them, and drops the delete files; the rows are those the deletes left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn position_deletes_from_their_events_are_applied_by_a_run_due_by_deletes() {
    if !connect_available("position_deletes_from_their_events_are_applied_by_a_run_due_by_deletes")
    {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.deleted");
    let name = table.qualified();
    create_merge_on_read(&table, writer, 2).await;
    table.sql(writer, &inserts(&name, 0, 4)).await;
    let config = config(moto, queue_url, bucket, &server.url, "", &[&table]).replace(
        "min_files = 10\n",
        "min_files = 100\ndelete_file_threshold = 6\n",
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // Six DELETEs of one row each, each writing a position delete file.
    let started = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let deletes: Vec<String> = [1, 4, 7, 10, 13, 16]
        .iter()
        .map(|id| format!("DELETE FROM {name} WHERE id = {id}"))
        .collect();
    table.sql(writer, &deletes).await;
    let before = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
                format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {name}"),
            ],
        )
        .await;
    // Iceberg 1.10 keeps one delete file per data file (a later DELETE of the same file
    // replaces it): six written, one per touched data file live.
    assert!(
        value(&before, "delete_files").parse::<u64>().unwrap() >= 1,
        "{before:?}"
    );
    assert_eq!(value(&before, "row_count"), "14");

    // A run that starts while the last DELETE commits may lose the race (see success_after, and
    // Iceberg's check for deletes added meanwhile): the next one runs.
    let status = success_after(&icepack, table.name, &started).await;
    let last = &status["last_run"];
    assert_eq!(
        last["trigger"],
        "deletes",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["task"], "rewrite_data_files", "{status}");
    let after = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
                format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {name}"),
            ],
        )
        .await;
    let detail = table
        .sql(
            writer,
            &[
                format!("SELECT data_file.content AS c, data_file.file_path AS p, data_file.record_count AS n, sequence_number FROM {name}.entries WHERE status < 2"),
                format!("SELECT snapshot_id, operation, summary FROM {name}.snapshots"),
            ],
        )
        .await;
    assert_eq!(
        value(&after, "delete_files"),
        "0",
        "the deletes are applied: {after:?}\n{detail:?}\n{status}"
    );
    assert_eq!(
        value(&after, "row_count"),
        "14",
        "rows unchanged by the run"
    );
    assert_eq!(value(&after, "checksum"), value(&before, "checksum"));
    let deletes = &table_status(&icepack, table.name)["deletes"];
    assert_eq!(deletes["position_files"], 0, "{deletes}");
    assert_eq!(deletes["due"], false, "{deletes}");
    assert!(icepack.terminate(run).await.success());
}
