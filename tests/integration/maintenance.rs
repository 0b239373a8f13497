//! Table maintenance on the real stack: `rewrite_manifests` when manifests pile up (counted from
//! their own S3 events), `remove_orphan_files` dry run first, then only old orphans.

use crate::support;
use crate::support::warm_stack::*;

use std::time::Duration;

use support::connect::value;
use support::{wait_until, Icepack};

/// Issue 18's `rewrite_manifests` on the real stack: every commit adds a manifest; their own S3
/// events (`metadata/*-m*.avro`, not the `snap-*.avro` manifest lists) make the table due past
/// `max_manifests`, with no data compaction due; the run merges them and the count drops, the
/// data untouched; status follows the count from the metadata and the events after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops() {
    if !connect_available(
        "many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops",
    ) {
        return;
    }
    many_manifests_lead_to_rewrite_manifests_on("spark").await;
}

/// The same with `engine = "native"` (issue 50): icepack's own manifest rewrite, and Spark reads
/// the table it left (its `manifests` and `files` tables, its rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn native_many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops() {
    if !connect_available(
        "native_many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops",
    ) {
        return;
    }
    many_manifests_lead_to_rewrite_manifests_on("native").await;
}

async fn many_manifests_lead_to_rewrite_manifests_on(engine: &str) {
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.manifested");
    let name = table.qualified();
    table.sql(writer, &create(&table)).await;
    // No data compaction: 100 small files would be needed. More than 5 manifests: maintenance.
    let config = config(moto, queue_url, bucket, &server.url, "", &[&table]).replace(
        "min_files = 10\n",
        &format!("min_files = 100\nmax_manifests = 5\nengine = \"{engine}\"\n"),
    );
    let mut icepack = Icepack::with_config(&config);

    let manifest_count = |results: &[icepack::engine::spark::result::ResultSet]| -> u64 {
        value(results, "manifest_count").parse().unwrap()
    };
    let counts = vec![
        format!("REFRESH TABLE {name}"),
        format!("SELECT count(*) AS manifest_count FROM {name}.manifests"),
        format!("SELECT count(*) AS row_count FROM {name}"),
        format!("SELECT count(*) AS data_files FROM {name}.files"),
    ];
    let started = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    // The commits land before icepack starts (their events wait in the queue): SQLite's JDBC
    // catalog cannot take a commit from a second connection (the native engine's) while Spark's
    // writer holds a read of it (`SQLITE_BUSY_SNAPSHOT`), which a real catalog can.
    table.sql(writer, &inserts(&name, 0, 8)).await;
    let before = table.sql(writer, &counts).await;
    assert!(manifest_count(&before) >= 6, "{before:?}");
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    let status = success_after(&icepack, table.name, &started).await;
    let last = &status["last_run"];
    assert_eq!(
        last["task"],
        "rewrite_manifests",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["trigger"], "rewrite_manifests", "{status}");
    assert_eq!(last["engine"], engine, "{status}");
    assert!(
        last["manifests_before"].as_u64().unwrap() > 5,
        "due past max_manifests: {status}"
    );
    assert!(
        last["manifests_after"].as_u64().unwrap() <= 3,
        "merged (commits may land after the run): {status}"
    );
    assert!(last["rewritten_data_files"].is_null(), "{status}");

    // The data is untouched: the same rows and data files, none of them rewritten.
    let after = table.sql(writer, &counts).await;
    assert!(
        manifest_count(&after) < manifest_count(&before),
        "{after:?}"
    );
    assert_eq!(value(&after, "row_count"), "40");
    assert_eq!(value(&after, "data_files"), "8");
    // Status counts the manifests as the metadata has them once the last events are in.
    let expected = manifest_count(&after);
    wait_until(
        "status counting the table's manifests",
        Duration::from_secs(60),
        || {
            let manifests = table_status(&icepack, table.name)["manifests"].as_u64();
            async move { (manifests == Some(expected)).then_some(()) }
        },
    )
    .await;
    assert_eq!(table_status(&icepack, table.name)["pending_files"], 8);
    let (status_ok, _, _) = icepack.command(&["status"]);
    assert!(status_ok, "the text status renders the maintenance fields");
    assert!(icepack.terminate(run).await.success());
}

/// Issue 18's `remove_orphan_files` on the real stack, on a table in a local warehouse (a file's
/// age is its modification time, which a test can set; S3 servers stamp uploads with now): the
/// schedule's first run is a dry run that finds the planted orphan older than the limit and
/// removes nothing; the next run (started over HTTP) removes it and keeps a fresh orphan, which a
/// writer still committing could own, and every file the table references. Spark's procedure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn remove_orphan_files_lists_first_then_removes_only_old_orphans() {
    if !connect_available("remove_orphan_files_lists_first_then_removes_only_old_orphans") {
        return;
    }
    remove_orphan_files_lists_first_then_removes_only_old_orphans_on("spark").await;
}

/// The same with `engine = "native"` (issue 50): icepack's own listing and deletion, through the
/// run's claim, settlement and status as Spark's procedure. (S3: `native_maintenance::`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn native_remove_orphan_files_lists_first_then_removes_only_old_orphans() {
    if !connect_available("native_remove_orphan_files_lists_first_then_removes_only_old_orphans") {
        return;
    }
    remove_orphan_files_lists_first_then_removes_only_old_orphans_on("native").await;
}

async fn remove_orphan_files_lists_first_then_removes_only_old_orphans_on(engine: &str) {
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let mut table = stack.table("lakehouse", "analytics.orphaned");
    let warehouse = stack.dir.path().join("local-warehouse");
    std::fs::create_dir_all(&warehouse).unwrap();
    table.lakehouse.catalog.warehouse = format!("file://{}", warehouse.display());
    table.lakehouse.catalog.io_impl = "org.apache.iceberg.hadoop.HadoopFileIO".to_string();
    table.lakehouse.catalog.s3_endpoint = String::new();
    let name = table.qualified();
    table.sql(writer, &create(&table)).await;
    table.sql(writer, &inserts(&name, 0, 3)).await;

    // Two files no snapshot references: one written four days ago, one just now.
    let data_dir = warehouse.join("analytics/orphaned/data");
    assert!(data_dir.is_dir(), "{}", data_dir.display());
    let old = data_dir.join("00000-0-orphan-old.parquet");
    let fresh = data_dir.join("00000-0-orphan-fresh.parquet");
    for path in [&old, &fresh] {
        std::fs::write(path, b"left behind by a failed writer").unwrap();
    }
    let four_days_ago = std::time::SystemTime::now() - Duration::from_secs(4 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(four_days_ago)
        .unwrap();

    let http = format!("127.0.0.1:{}", support::free_port());
    let config = config(moto, queue_url, bucket, &server.url, &http, &[&table]).replace(
        "min_files = 10\n",
        &format!("min_files = 100\nremove_orphans_every_hours = 24\nengine = \"{engine}\"\n"),
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());
    let orphan_run = |icepack: &Icepack, dry_run: bool| {
        let status = table_status(icepack, table.name);
        let last = status["last_run"].clone();
        (last["task"] == "remove_orphan_files" && last["dry_run"] == dry_run).then_some(status)
    };

    // 1. Never run: due at once, and a dry run.
    let status = wait_until("the dry run", Duration::from_secs(300), || {
        let found = orphan_run(&icepack, true);
        async move { found }
    })
    .await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(status["last_run"]["orphan_files"], 1, "{status}");
    assert_eq!(status["last_run"]["engine"], engine, "{status}");
    assert_eq!(status["orphans"]["found_by_dry_run"], 1, "{status}");
    assert_eq!(status["orphans"]["next_is_dry_run"], false, "{status}");
    assert!(old.exists() && fresh.exists(), "a dry run removes nothing");

    // 2. The next run, asked for over HTTP: the old orphan goes, the fresh one stays.
    let (answer, body) = ask_maintenance(&http, table.name, "remove_orphan_files").await;
    assert_eq!(answer, 202, "{body}");
    let status = wait_until("the removal", Duration::from_secs(300), || {
        let found = orphan_run(&icepack, false);
        async move { found }
    })
    .await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(status["last_run"]["orphan_files"], 1, "{status}");
    assert_eq!(status["orphans"]["removed"], 1, "{status}");
    assert!(!old.exists(), "the old orphan is removed");
    assert!(fresh.exists(), "a file younger than 72 h is kept");
    let facts = table
        .sql(
            writer,
            &[format!("SELECT count(*) AS row_count FROM {name}")],
        )
        .await;
    assert_eq!(
        value(&facts, "row_count"),
        "15",
        "every referenced file is kept"
    );
    let (unknown, body) = ask_maintenance(&http, table.name, "vacuum").await;
    assert_eq!(unknown, 404, "{body}");
    assert!(icepack.terminate(run).await.success());
}
