//! Multi-tenancy on the local stack: two tenants with their own buckets, SQS queues (fed by real
//! S3 notifications from moto) and Slack receivers; one floods the executor pool, the other still
//! gets the next slot. And live reloads of the table map: tables added, changed, removed (state
//! kept) and forgotten; broken configurations refused while the service runs on.
//!
//! Runs use the process runner with a stand-in spark-sql (tests/fixtures/logging-spark-sql.sh)
//! that logs which table it compacts and when; the fairness is the pool's, whatever Spark does.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use icepack::testing::http_receiver::Receiver;
use support::{free_port, get_json, get_text, unique, wait_until, Icepack, Moto};

fn stand_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logging-spark-sql.sh")
}

/// (event, epoch millis, table) of every run start and end the stand-in logged.
fn runs(log: &Path) -> Vec<(String, u64, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            Some((
                parts.next()?.to_string(),
                parts.next()?.parse().ok()?,
                parts.next()?.to_string(),
            ))
        })
        .collect()
}

/// `None` while the service is not up yet.
async fn try_json(url: &str) -> Option<serde_json::Value> {
    reqwest::get(url).await.ok()?.json().await.ok()
}

#[tokio::test]
async fn a_flooding_tenant_does_not_starve_another_and_alerts_stay_with_their_tenant() {
    let moto = Moto::start().await;
    let queue_a = unique("tenant-a");
    let queue_b = unique("tenant-b");
    let (url_a, _) = moto.create_queue_with_dlq(&queue_a, 5).await;
    let (url_b, _) = moto.create_queue_with_dlq(&queue_b, 5).await;
    let bucket_a = unique("lake-a");
    let bucket_b = unique("lake-b");
    moto.create_bucket_notifying(&bucket_a, &queue_a).await;
    moto.create_bucket_notifying(&bucket_b, &queue_b).await;
    let slack_a = Receiver::start().await;
    let slack_b = Receiver::start().await;
    let port = free_port();
    let mut tables = String::new();
    for index in 0..50 {
        tables.push_str(&format!(
            "[[tables]]\ntable = \"team_a.t{index:02}\"\nbucket = \"{bucket_a}\"\nprefix = \"t{index:02}/\"\ntenant = \"a\"\n\n"
        ));
    }
    let config = format!(
        r##"
[service]
state_dir = "@STATE_DIR@"
http_listen = "127.0.0.1:{port}"
shutdown_timeout_seconds = 5

[sqs]
endpoint_url = "{endpoint}"
wait_time_seconds = 1
pollers = 1

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 1

[spark]
runner = "process"
spark_sql = "{spark_sql}"
max_concurrent = 2
retry_attempts = 1

[tenants.a]
slack = {{ webhook_url_env = "TENANT_A_SLACK", channel = "#team-a" }}
[[tenants.a.queues]]
queue_url = "{url_a}"

[tenants.b]
slack = {{ webhook_url_env = "TENANT_B_SLACK", channel = "#team-b" }}
[[tenants.b.queues]]
queue_url = "{url_b}"

{tables}
[[tables]]
table = "team_b.orders"
bucket = "{bucket_b}"
prefix = "orders/"
tenant = "b"
"##,
        endpoint = moto.endpoint,
        spark_sql = stand_in().display(),
    );
    let mut icepack = Icepack::with_config(&config);
    let log = icepack.dir.path().join("runs.log");
    icepack.env = vec![
        ("STANDIN_LOG".to_string(), log.display().to_string()),
        ("STANDIN_SECONDS".to_string(), "1".to_string()),
        ("TENANT_A_SLACK".to_string(), slack_a.url("/hooks/a")),
        ("TENANT_B_SLACK".to_string(), slack_b.url("/hooks/b")),
        // A deployment-wide Slack would get every tenant's runs; not set here.
        ("SLACK_WEBHOOK_URL".to_string(), String::new()),
    ];
    let run = icepack.spawn_run("");
    let base = format!("http://127.0.0.1:{port}");

    // Tenant A: 50 tables due at once (one small file each), through its own bucket and queue.
    for index in 0..50 {
        moto.put_object(&bucket_a, &format!("t{index:02}/data/f.parquet"), 100)
            .await;
    }
    wait_until(
        "tenant a's backlog in the pool's line",
        Duration::from_secs(60),
        || async {
            let tenants = try_json(&format!("{base}/v1/tenants")).await?;
            let a = tenants["tenants"]
                .as_array()?
                .iter()
                .find(|tenant| tenant["tenant"] == "a")?
                .clone();
            (a["runs_waiting"].as_u64()? >= 30).then_some(())
        },
    )
    .await;
    let a_started_before_b = runs(&log)
        .iter()
        .filter(|(event, _, _)| event == "start")
        .count();

    // Tenant B: one due table, while a's backlog still waits.
    moto.put_object(&bucket_b, "orders/data/f.parquet", 100)
        .await;
    let b_started = wait_until("tenant b's run", Duration::from_secs(60), || async {
        runs(&log)
            .iter()
            .find(|(event, _, table)| event == "start" && table == "team_b.orders")
            .map(|(_, at, _)| *at)
    })
    .await;
    let starts: Vec<(u64, String)> = runs(&log)
        .into_iter()
        .filter(|(event, _, _)| event == "start")
        .map(|(_, at, table)| (at, table))
        .collect();
    let a_between = starts
        .iter()
        .skip(a_started_before_b)
        .take_while(|(_, table)| table != "team_b.orders")
        .count();
    // B's table is counted within a poll (~1 s) and then takes the next free slot: in that time
    // at most one round of A's runs (2 slots, 1 s each) may start. A FIFO pool would start the 30+
    // tables waiting ahead of it first.
    assert!(
        a_between <= 2,
        "{a_between} runs of tenant a started after b's file landed and before b's run: {starts:?}"
    );
    let a_waiting = starts
        .iter()
        .filter(|(at, table)| *at > b_started && table.starts_with("team_a."))
        .count();
    let total_a = starts
        .iter()
        .filter(|(_, table)| table.starts_with("team_a."))
        .count();
    assert!(
        total_a < 50 || a_waiting > 0,
        "b ran after a's whole backlog"
    );

    // The status API shows the line: positions and expected waits of a's tables, per-tenant sums.
    let tables = get_json(&format!("{base}/v1/tables")).await;
    let waiting: Vec<&serde_json::Value> = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|table| table["queue_position"].is_u64())
        .collect();
    assert!(
        !waiting.is_empty(),
        "a's backlog is still in line: {tables}"
    );
    assert!(waiting.iter().all(|table| table["tenant"] == "a"));
    assert!(
        waiting
            .iter()
            .any(|table| table["expected_wait_seconds"].is_u64()),
        "runs have ended, so waits are estimated: {waiting:?}"
    );
    let tenants = get_json(&format!("{base}/v1/tenants")).await;
    let a = &tenants["tenants"][0];
    assert_eq!(a["tenant"], "a");
    assert_eq!(a["tables"], 50);
    assert_eq!(tenants["tenants"][1]["tables"], 1);

    // Each tenant's Slack gets its own runs, and only those.
    wait_until("b's alert", Duration::from_secs(30), || async {
        (!slack_b.received().is_empty()).then_some(())
    })
    .await;
    wait_until("a's alerts", Duration::from_secs(30), || async {
        (slack_a.received().len() >= 3).then_some(())
    })
    .await;
    for message in slack_b.received() {
        let text = message.body.to_string();
        assert!(text.contains("team_b.orders"), "{text}");
        assert!(!text.contains("team_a."), "a's run on b's channel: {text}");
        assert_eq!(message.body["channel"], "#team-b");
    }
    for message in slack_a.received() {
        let text = message.body.to_string();
        assert!(text.contains("team_a."), "{text}");
        assert!(!text.contains("team_b."), "b's run on a's channel: {text}");
        assert_eq!(message.body["channel"], "#team-a");
    }
    let metrics = get_text(&format!("{base}/metrics")).await;
    assert!(
        metrics
            .contains("icepack_runs_succeeded_total{tenant=\"b\",kind=\"rewrite_data_files\"} 1"),
        "{metrics}"
    );
    icepack.terminate(run).await;
}

fn reload_config(port: u16, endpoint: &str, queue_url: &str, bucket: &str, tables: &str) -> String {
    format!(
        r##"
[service]
state_dir = "@STATE_DIR@"
http_listen = "127.0.0.1:{port}"
shutdown_timeout_seconds = 5

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
pollers = 1

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 100

[metrics]
tables = ["*"]                           # every table's own series, so that removal shows

[spark]
runner = "process"
spark_sql = "{spark_sql}"
retry_attempts = 1
{tables}"##,
        spark_sql = stand_in().display(),
    )
    .replace("@BUCKET@", bucket)
}

fn table(name: &str, min_files: u32) -> String {
    format!(
        "\n[[tables]]\ntable = \"{name}\"\nbucket = \"@BUCKET@\"\nprefix = \"{}/\"\nmin_files = {min_files}\n",
        name.replace('.', "/")
    )
}

#[tokio::test]
async fn reloads_add_change_and_remove_tables_and_refuse_broken_files() {
    let moto = Moto::start().await;
    let queue = unique("reload");
    let (queue_url, _) = moto.create_queue_with_dlq(&queue, 5).await;
    let bucket = unique("lake-reload");
    moto.create_bucket_notifying(&bucket, &queue).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let write = |icepack: &Icepack, tables: &str| {
        let text = reload_config(port, &moto.endpoint, &queue_url, &bucket, tables).replace(
            "@STATE_DIR@",
            &icepack.dir.path().join("state").display().to_string(),
        );
        std::fs::write(&icepack.config, text).unwrap();
    };
    let first = format!("{}{}", table("ns.kept", 100), table("ns.removed", 100));
    let mut icepack = Icepack::with_config(&reload_config(
        port,
        &moto.endpoint,
        &queue_url,
        &bucket,
        &first,
    ));
    icepack.env = vec![("ICEPACK_API_TOKEN".to_string(), "reload-token".to_string())];
    let run = icepack.spawn_run("");
    let pending = |table: &'static str| {
        let base = base.clone();
        async move {
            let tables = try_json(&format!("{base}/v1/tables")).await?;
            tables["tables"]
                .as_array()?
                .iter()
                .find(|entry| entry["table"] == table)
                .and_then(|entry| entry["pending_files"].as_u64())
        }
    };
    moto.put_object(&bucket, "ns/kept/data/1.parquet", 10).await;
    for index in 0..3 {
        moto.put_object(&bucket, &format!("ns/removed/data/{index}.parquet"), 10)
            .await;
    }
    wait_until("both tables counted", Duration::from_secs(60), || async {
        (pending("ns.kept").await? == 1 && pending("ns.removed").await? == 3).then_some(())
    })
    .await;

    let http = reqwest::Client::new();
    let reload = |token: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/reload");
        async move {
            let response = http.post(url).bearer_auth(token).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        }
    };

    // Add one table, change one's threshold, remove one.
    write(
        &icepack,
        &format!("{}{}", table("ns.kept", 40), table("ns.added", 100)),
    );
    assert_eq!(reload("wrong").await.0, 401, "the token is required");
    let (status, answer) = reload("reload-token").await;
    assert_eq!(status, 200, "{answer}");
    let report = &answer["report"];
    assert_eq!(report["added"], serde_json::json!(["ns.added"]));
    assert_eq!(report["changed"], serde_json::json!(["ns.kept"]));
    assert_eq!(report["removed"], serde_json::json!(["ns.removed"]));
    let tables = get_json(&format!("{base}/v1/tables")).await;
    let names: Vec<&str> = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["table"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ns.kept", "ns.added"]);
    let metrics = get_text(&format!("{base}/metrics")).await;
    assert!(
        metrics.contains("icepack_records_counted_total{table=\"ns.kept\",tenant=\"default\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("ns.removed"),
        "a removed table leaves /metrics, its counters too: {metrics}"
    );
    assert_eq!(
        tables["tables"][0]["explain"]["files"]["threshold"], 40,
        "the new threshold applies at once"
    );

    // The added table counts; the removed one no longer does.
    moto.put_object(&bucket, "ns/added/data/1.parquet", 10)
        .await;
    moto.put_object(&bucket, "ns/removed/data/late.parquet", 10)
        .await;
    wait_until(
        "the added table counted",
        Duration::from_secs(60),
        || async { (pending("ns.added").await? == 1).then_some(()) },
    )
    .await;

    // A broken file is refused, over the API and on SIGHUP; the service runs on with the old map.
    std::fs::write(
        &icepack.config,
        std::fs::read_to_string(&icepack.config)
            .unwrap()
            .replace("min_files = 40", "min_files = 0"),
    )
    .unwrap();
    let (status, answer) = reload("reload-token").await;
    assert_eq!(status, 422, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("tables[0].min_files"), "{error}");
    icepack.signal(run, libc::SIGHUP);
    wait_until(
        "the refused SIGHUP reload in the log",
        Duration::from_secs(20),
        || async {
            icepack
                .log(run)
                .contains("configuration reload refused")
                .then_some(())
        },
    )
    .await;
    assert_eq!(pending("ns.added").await, Some(1));
    assert_eq!(
        get_json(&format!("{base}/v1/tables/ns.kept")).await["explain"]["files"]["threshold"],
        40
    );
    moto.put_object(&bucket, "ns/added/data/2.parquet", 10)
        .await;
    wait_until("counting goes on", Duration::from_secs(60), || async {
        (pending("ns.added").await? == 2).then_some(())
    })
    .await;

    // The removed table comes back (SIGHUP) with its stored state: 3 files, not 4 (the late file
    // landed while it was removed and was not counted).
    write(
        &icepack,
        &format!(
            "{}{}{}",
            table("ns.kept", 40),
            table("ns.added", 100),
            table("ns.removed", 100)
        ),
    );
    icepack.signal(run, libc::SIGHUP);
    wait_until(
        "the removed table back",
        Duration::from_secs(20),
        || async { (pending("ns.removed").await? == 3).then_some(()) },
    )
    .await;

    // Removed again and forgotten through the running service: its state is gone.
    write(
        &icepack,
        &format!("{}{}", table("ns.kept", 40), table("ns.added", 100)),
    );
    assert_eq!(reload("reload-token").await.0, 200);
    let (ok, stdout, stderr) = icepack.command(&["forget", "ns.kept"]);
    assert!(!ok && stderr.contains("is configured"), "{stdout}{stderr}");
    let (ok, stdout, stderr) = icepack.command(&["forget", "ns.removed"]);
    assert!(ok, "{stdout}{stderr}");
    let forgotten: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(forgotten["forgotten"]["files"], 3, "{forgotten}");
    write(
        &icepack,
        &format!(
            "{}{}{}",
            table("ns.kept", 40),
            table("ns.added", 100),
            table("ns.removed", 100)
        ),
    );
    assert_eq!(reload("reload-token").await.0, 200);
    assert_eq!(pending("ns.removed").await, Some(0));
    assert_eq!(pending("ns.kept").await, Some(1), "other tables untouched");
    icepack.terminate(run).await;
}

fn two_queue_config(
    port: u16,
    endpoint: &str,
    live_url: &str,
    missing_url: Option<&str>,
) -> String {
    let missing = missing_url
        .map(|url| {
            format!(
                "[tenants.b]\n[[tenants.b.queues]]\nqueue_url = \"{url}\"\n\n[[tables]]\ntable = \"team_b.orders\"\nbucket = \"lake-b\"\nprefix = \"orders/\"\ntenant = \"b\"\n"
            )
        })
        .unwrap_or_default();
    format!(
        r##"
[service]
state_dir = "@STATE_DIR@"
http_listen = "127.0.0.1:{port}"
shutdown_timeout_seconds = 5

[sqs]
endpoint_url = "{endpoint}"
wait_time_seconds = 1
pollers = 1

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
min_files = 100

[spark]
runner = "process"
spark_sql = "{spark_sql}"

[tenants.a]
[[tenants.a.queues]]
queue_url = "{live_url}"

[[tables]]
table = "team_a.orders"
bucket = "lake-a"
prefix = "orders/"
tenant = "a"

{missing}"##,
        spark_sql = stand_in().display(),
    )
}

/// Readiness per queue: of two tenants' queues one does not exist on the server. `/readyz` names
/// that one, with the error its receives get, while the other's messages are counted and deleted;
/// `/metrics` and `/v1/tables` say the same by queue. A reload that removes the missing queue
/// takes it out of readiness and the metrics: the service is ready.
#[tokio::test]
async fn readiness_names_the_queue_that_cannot_be_reached_until_a_reload_removes_it() {
    let moto = Moto::start().await;
    let live = unique("landing-live");
    let (live_url, _) = moto.create_queue_with_dlq(&live, 5).await;
    // Never created: every receive fails with QueueDoesNotExist.
    let missing = unique("landing-missing");
    let missing_url = format!("{}/{}/{missing}", moto.endpoint, support::ACCOUNT);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut icepack = Icepack::with_config(&two_queue_config(
        port,
        &moto.endpoint,
        &live_url,
        Some(&missing_url),
    ));
    let run = icepack.spawn_run("");
    moto.send(
        &live_url,
        r#"{"Records":[{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"lake-a"},"object":{"key":"orders/data/a.parquet","size":1024}}}]}"#,
    )
    .await;

    let readyz = || async {
        let response = reqwest::get(format!("{base}/readyz")).await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.json::<serde_json::Value>().await.ok()?))
    };
    let problems = wait_until(
        "/readyz naming the missing queue with its error, and the live queue's message counted",
        Duration::from_secs(60),
        || async {
            let (status, body) = readyz().await?;
            let problems: Vec<String> = body["problems"]
                .as_array()?
                .iter()
                .filter_map(|problem| problem.as_str().map(str::to_string))
                .collect();
            let tables = try_json(&format!("{base}/v1/tables/team_a.orders")).await?;
            (status == 503
                && problems.len() == 1
                && problems[0].contains("(last error: ReceiveMessage: ")
                && tables["pending_files"] == 1)
                .then_some(problems)
        },
    )
    .await;
    assert!(
        problems[0].starts_with(&format!("queue {missing} has not been reached yet")),
        "{problems:?}"
    );
    assert!(!problems[0].contains(&live), "{problems:?}");

    // The message is deleted after its count is durable, so `pending_files` can be seen first.
    let deleted = format!("icepack_sqs_messages_deleted_total{{queue=\"{live}\"}} 1\n");
    let metrics = wait_until(
        "the live queue's message deleted",
        Duration::from_secs(30),
        || async {
            let metrics = reqwest::get(format!("{base}/metrics"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            metrics.contains(&deleted).then_some(metrics)
        },
    )
    .await;
    for expected in [
        format!("icepack_sqs_messages_received_total{{queue=\"{live}\"}} 1\n"),
        format!("icepack_sqs_messages_received_total{{queue=\"{missing}\"}} 0\n"),
        format!("icepack_sqs_last_receive_timestamp_seconds{{queue=\"{missing}\"}} 0.0\n"),
        format!("icepack_sqs_errors_total{{operation=\"ReceiveMessage\",queue=\"{missing}\"}} "),
    ] {
        assert!(
            metrics.contains(&expected),
            "no `{expected}` in:\n{metrics}"
        );
    }
    assert!(
        !metrics.contains(&format!("operation=\"ReceiveMessage\",queue=\"{live}\"")),
        "the live queue had no failed receive:\n{metrics}"
    );
    let queues = get_json(&format!("{base}/v1/tables")).await["queues"].clone();
    assert_eq!(queues.as_array().unwrap().len(), 2, "{queues}");
    let by_name = |name: &str| {
        queues
            .as_array()
            .unwrap()
            .iter()
            .find(|queue| queue["queue"] == name)
            .cloned()
            .unwrap()
    };
    assert!(by_name(&live)["problem"].is_null(), "{queues}");
    assert!(by_name(&live)["last_receive_at"].is_string(), "{queues}");
    assert_eq!(by_name(&missing)["tenant"], "b", "{queues}");
    assert_eq!(
        by_name(&missing)["last_error"]["operation"],
        "ReceiveMessage",
        "{queues}"
    );
    assert!(by_name(&missing)["problem"].is_string(), "{queues}");

    // The missing queue is removed by a reload: it leaves readiness and the metrics.
    std::fs::write(
        &icepack.config,
        two_queue_config(port, &moto.endpoint, &live_url, None).replace(
            "@STATE_DIR@",
            &icepack.dir.path().join("state").display().to_string(),
        ),
    )
    .unwrap();
    let reloaded = reqwest::Client::new()
        .post(format!("{base}/v1/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(reloaded.status().as_u16(), 200);
    let (status, body) = readyz().await.unwrap();
    assert_eq!((status, &body), (200, &serde_json::json!({"ready": true})));
    let metrics = get_text(&format!("{base}/metrics")).await;
    assert!(!metrics.contains(&missing), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "icepack_sqs_messages_deleted_total{{queue=\"{live}\"}} 1\n"
        )),
        "{metrics}"
    );
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}
