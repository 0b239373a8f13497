//! Truthful table state on the real stack (Iceberg's REST catalog server): settling from the
//! table's committed metadata, per-partition decisions, and reconciliation without events.

use crate::support;

use std::time::Duration;

use support::spark::{row_with, stack_available, Lakehouse};
use support::{unique, wait_until, Icepack, Moto};

const TOKEN: &str = "catalog-token-8893";

fn table_status(icepack: &Icepack, table: &str) -> serde_json::Value {
    icepack.status()["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["table"] == table)
        .cloned()
        .unwrap()
}

fn insert(table: &str, partition_column: &str, value: &str, batch: usize) -> String {
    format!("INSERT INTO lakehouse.{table} VALUES ({batch}, '{value}', {batch}.5)").replace(
        "VALUES",
        &format!("(id, {partition_column}, amount) VALUES"),
    )
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn partitions_left_behind_stay_pending_orphans_drop_and_reconcile_heals() {
    if !stack_available("partitions_left_behind_stay_pending_orphans_drop_and_reconcile_heals") {
        return;
    }
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    let quiet_bucket = unique("quiet");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 5).await;
    moto.create_bucket_notifying(&bucket, &queue).await;
    // A bucket without notifications: its table's files are known only to the metadata.
    moto.create_bucket_notifying(&quiet_bucket, &unique("unused"))
        .await;
    let dir = tempfile::tempdir().unwrap();
    // Iceberg's REST catalog, its client authenticating with a bearer token (never shown).
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[("token", TOKEN)]).await;

    // Files failed writers uploaded and never committed, under the table's data prefix: one
    // announced three minutes ago (past the minute a committing writer gets, within the grace a
    // slow one gets: unconfirmed after the run's read — it counts toward nothing until the
    // metadata has it), one announced long ago (an orphan: dropped by the run's truth read). The
    // event times are explicit so that the outcome does not depend on how long the run takes.
    let three_minutes_ago = (chrono::Utc::now() - chrono::Duration::minutes(3))
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    for (event_time, name) in [
        (three_minutes_ago.as_str(), "fresh-orphan"),
        ("2024-05-01T12:00:00.000Z", "orphan"),
    ] {
        moto.send(
            &queue_url,
            &format!(
                r#"{{"Records":[{{"eventVersion":"2.1","eventSource":"aws:s3","eventTime":"{event_time}","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"{bucket}"}},"object":{{"key":"warehouse/analytics/orders/data/order_date=2024-05-01/{name}.parquet","size":900}}}}}}]}}"#
            ),
        )
        .await;
    }
    let mut statements = vec![
        "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
        "CREATE TABLE lakehouse.analytics.orders (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg PARTITIONED BY (order_date)".to_string(),
        "CREATE TABLE lakehouse.analytics.events (id BIGINT, day STRING, amount DOUBLE) USING iceberg PARTITIONED BY (day)".to_string(),
        format!("CREATE TABLE lakehouse.analytics.quiet (id BIGINT, day STRING, amount DOUBLE) USING iceberg LOCATION 's3://{quiet_bucket}/warehouse/analytics/quiet'"),
    ];
    // 12 small commits in one partition, 6 in another (the case seen: 18 files, 12 + 6).
    statements
        .extend((0..12).map(|batch| insert("analytics.orders", "order_date", "2024-05-01", batch)));
    statements.extend(
        (12..18).map(|batch| insert("analytics.orders", "order_date", "2024-05-02", batch)),
    );
    // 40 small files, one per partition.
    statements
        .extend((0..40).map(|day| insert("analytics.events", "day", &format!("d{day:02}"), day)));
    statements.extend((0..3).map(|batch| insert("analytics.quiet", "day", "d01", batch)));
    statements
        .push("SELECT count(*) AS orders_files FROM lakehouse.analytics.orders.files".to_string());
    let before = lakehouse.sql(&(statements.join(";\n") + ";"));
    assert_eq!(row_with(&before, "orders_files")["orders_files"], "18");

    let config = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout_seconds = 60

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 10

{catalog}
{spark}
timeout_minutes = 10
retry_attempts = 1

[[tables]]
table = "analytics.orders"
bucket = "{bucket}"
prefix = "warehouse/analytics/orders/"

[[tables]]
table = "analytics.events"
bucket = "{bucket}"
prefix = "warehouse/analytics/events/"

[[tables]]
table = "analytics.quiet"
bucket = "{quiet_bucket}"
prefix = "warehouse/analytics/quiet/"
"#,
        endpoint = moto.endpoint,
        catalog = lakehouse.catalog_toml(),
        spark = lakehouse.docker_spark_toml(),
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let orders = wait_until("the orders run to settle", Duration::from_secs(300), || {
        let status = table_status(&icepack, "analytics.orders");
        async move { status["last_run"].is_object().then_some(status) }
    })
    .await;
    assert_eq!(
        orders["last_run"]["outcome"],
        "success",
        "{orders}\n{}",
        icepack.log(run)
    );
    assert_eq!(
        orders["last_run"]["rewritten_data_files"], 12,
        "only the 12-file partition: {orders}"
    );
    assert!(
        icepack.log(run).contains("table is due for compaction"),
        "{}",
        icepack.log(run)
    );
    wait_until("the queue to drain", Duration::from_secs(60), || async {
        (moto.queue_depth(&queue_url).await == 0).then_some(())
    })
    .await;
    let orders = table_status(&icepack, "analytics.orders");
    let partitions = orders["partitions"].as_array().unwrap();
    let files_of = |partition: &str| {
        partitions
            .iter()
            .find(|entry| entry["partition"] == partition)
            .map_or(0, |entry| entry["files"].as_u64().unwrap())
    };
    assert_eq!(
        files_of("order_date=2024-05-02"),
        6,
        "the 6 files left behind are not forgotten: {orders}"
    );
    assert_eq!(
        files_of("order_date=2024-05-01"),
        1,
        "the output, a small file itself; the old orphan stopped counting: {orders}"
    );
    assert_eq!(orders["pending_files"], 7);
    assert_eq!(
        orders["unconfirmed_files"], 1,
        "the fresh orphan waits for the metadata within the grace: {orders}"
    );
    assert_eq!(
        orders["due"], false,
        "the run's own output does not make the table due"
    );
    assert!(orders["last_truth_time"].is_string());

    // 40 small files, one per partition: a file alone cannot be improved by a rewrite, so none
    // counts toward a threshold — no run that would rewrite nothing.
    let events = table_status(&icepack, "analytics.events");
    assert_eq!(events["pending_files"], 40, "{events}");
    assert_eq!(events["explain"]["alone_files"], 40, "{events}");
    assert_eq!(events["due"], false);
    assert!(
        events["last_run"].is_null() && events["in_flight_run"].is_null(),
        "{events}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let orders_again = table_status(&icepack, "analytics.orders");
    assert_eq!(
        orders_again["last_run"]["run_id"], orders["last_run"]["run_id"],
        "no run for the 6-file partition yet"
    );
    assert!(table_status(&icepack, "analytics.events")["last_run"].is_null());
    assert!(icepack.terminate(run).await.success());

    // The quiet table's files never announced themselves: reconcile finds them in the metadata.
    assert_eq!(
        table_status(&icepack, "analytics.quiet")["pending_files"],
        0
    );
    let (ok, stdout, stderr) = icepack.command(&["reconcile", "analytics.quiet"]);
    assert!(ok, "{stdout}\n{stderr}");
    let reconciled: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(reconciled["outcome"], "reconciled", "{reconciled}");
    let quiet = table_status(&icepack, "analytics.quiet");
    assert_eq!(quiet["pending_files"], 3, "{quiet}");
    assert_eq!(quiet["partitions"][0]["from_metadata"], 3);

    // The catalog token reached neither the log, the status nor the reconcile command's output.
    for (what, text) in [
        ("icepack's log", icepack.log(run)),
        ("the status", icepack.status().to_string()),
        ("reconcile's output", format!("{stdout}\n{stderr}")),
    ] {
        assert!(
            !text.contains(TOKEN),
            "the catalog token leaked into {what}:\n{text}"
        );
    }
}
