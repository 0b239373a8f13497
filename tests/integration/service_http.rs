//! The operator's surface of a running service: notifications to a real HTTP receiver standing in
//! for Slack and a webhook, `/metrics`, `/healthz`, `/readyz`, the status API and its token, the
//! CLI going through the API — and no secret anywhere in what comes out.

use crate::support;

use std::time::Duration;

use icepack::testing::http_receiver::{Receiver, Reply};
use support::{free_port, unique, wait_until, wait_until_or, Icepack, Moto};

const SECRETS: [&str; 5] = [
    "SECRETHOOK",
    "SECRETPAGER",
    "SECRETTOKEN",
    "SECRETAWSKEY123",
    "SECRETCATALOG",
];

fn record(key: &str) -> String {
    format!(
        r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake-bucket"}},"object":{{"key":"warehouse/orders/data/{key}","size":1024}}}}}}"#
    )
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(
            !text.contains(secret),
            "{secret} leaked into {what}:\n{text}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn notifications_metrics_health_and_the_api_leak_no_secret() {
    let moto = Moto::start().await;
    let queue = unique("landing");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 5).await;
    let slack = Receiver::start().await;
    let pager = Receiver::start().await;
    // Slack fails once with a 500: the notifier retries; nothing else waits for it.
    slack.script([Reply::status(500, "rollup_error")]);
    let port = free_port();
    let config = format!(
        r##"
[service]
state_dir = "@STATE_DIR@"
http_listen = "127.0.0.1:{port}"
shutdown_timeout_seconds = 10

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 2

[catalogs.lakehouse]
impl = "org.apache.iceberg.rest.RESTCatalog"
uri = "http://127.0.0.1:1/catalog"
properties = {{ "s3.secret-access-key" = "SECRETCATALOG" }}

[spark]
runner = "docker"
image = "localhost/icepack-spark:3.5"
retry_attempts = 1

[metrics]
worst_tables = 1                         # the failing table's gauges; counters by tenant

[slack]
channel = "#lakehouse-alerts"

[[webhooks]]
url_env = "TEST_PAGER_URL"
notify_on = ["failure"]

[[tables]]
table = "analytics.orders"
bucket = "lake-bucket"
prefix = "warehouse/orders/"
"##,
        endpoint = moto.endpoint
    );
    let mut icepack = Icepack::with_config(&config);
    icepack.env = vec![
        (
            "SLACK_WEBHOOK_URL".to_string(),
            slack.url("/services/T000/SECRETHOOK"),
        ),
        (
            "TEST_PAGER_URL".to_string(),
            pager.url("/pager/SECRETPAGER"),
        ),
        ("ICEPACK_API_TOKEN".to_string(), "SECRETTOKEN".to_string()),
        (
            "AWS_SECRET_ACCESS_KEY".to_string(),
            "SECRETAWSKEY123".to_string(),
        ),
        // No container engine here: the run fails as engine_unavailable, quickly.
        (
            "DOCKER_HOST".to_string(),
            "unix:///nonexistent/icepack-test/docker.sock".to_string(),
        ),
    ];
    let run = icepack.spawn_run("");
    moto.send(
        &queue_url,
        &format!(
            r#"{{"Records":[{},{}]}}"#,
            record("a.parquet"),
            record("b.parquet")
        ),
    )
    .await;

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until(
        "the failure alert on Slack and the pager",
        Duration::from_secs(60),
        || async { (slack.received().len() >= 2 && !pager.received().is_empty()).then_some(()) },
    )
    .await;
    let alert = &slack.received()[1].body;
    assert_eq!(alert["channel"], "#lakehouse-alerts");
    assert!(
        alert["text"]
            .as_str()
            .unwrap()
            .contains("Compaction Job Failed: `analytics.orders`"),
        "{alert}"
    );
    let attachment = alert["attachments"][0].to_string();
    assert!(attachment.contains("engine_unavailable"), "{attachment}");
    assert!(
        attachment.contains("pending state preserved: 2 files"),
        "{attachment}"
    );
    let page = &pager.received()[0].body;
    assert_eq!(page["schema"], "icepack.run/v1");
    assert_eq!(page["event"], "compaction_failed");
    assert_eq!(page["failure"]["class"], "engine_unavailable");
    assert_eq!(page["claimed"]["files"], 2);

    let get = |path: &str| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move {
            let response = http.get(url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    // The queue was reached and the store is writable: the one problem is the engine, whose
    // probe found no container engine behind DOCKER_HOST.
    let (status, readyz) = get("/readyz").await;
    assert_eq!(status, 503, "{readyz}");
    let readyz: serde_json::Value = serde_json::from_str(&readyz).unwrap();
    let problems = readyz["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{readyz}");
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .starts_with("the Spark engine (docker "),
        "{readyz}"
    );
    // A receiver has a notification as soon as it arrives, icepack counts it sent once the
    // answer is back: the counters are waited for, not read at one moment.
    let expected = [
        format!("icepack_sqs_messages_received_total{{queue=\"{queue}\"}} 1"),
        format!("icepack_sqs_messages_deleted_total{{queue=\"{queue}\"}} 1"),
        "icepack_records_counted_total{tenant=\"default\"} 2".to_string(),
        "icepack_runs_failed_total{tenant=\"default\",kind=\"rewrite_data_files\",class=\"engine_unavailable\"} 1".to_string(),
        "icepack_tenant_pending_files{tenant=\"default\"} 2".to_string(),
        "icepack_tenant_tables_failing{tenant=\"default\"} 1".to_string(),
        "icepack_run_duration_seconds_count{outcome=\"failure\"} 1".to_string(),
        "icepack_table_pending_files{table=\"analytics.orders\",tenant=\"default\"} 2".to_string(),
        "icepack_table_consecutive_failures{table=\"analytics.orders\",tenant=\"default\"} 1".to_string(),
        "icepack_notifications_sent_total{sink=\"slack\"} 1".to_string(),
        "icepack_notifications_sent_total{sink=\"webhook[0]\"} 1".to_string(),
    ];
    let last = std::sync::Mutex::new(String::new());
    let (expected, last_read, get_metrics) = (&expected, &last, &get);
    let metrics = wait_until_or(
        "the counters of the message, the run and its notifications",
        Duration::from_secs(30),
        || async move {
            let (status, metrics) = get_metrics("/metrics").await;
            *last_read.lock().unwrap() = metrics.clone();
            (status == 200 && expected.iter().all(|line| metrics.contains(line.as_str())))
                .then_some(metrics)
        },
        || {
            let metrics = last.lock().unwrap();
            let missing: Vec<&String> = expected
                .iter()
                .filter(|line| !metrics.contains(line.as_str()))
                .collect();
            format!("missing {missing:?} in:\n{metrics}")
        },
    )
    .await;
    let (status, tables) = get("/v1/tables").await;
    assert_eq!(status, 200);
    let tables: serde_json::Value = serde_json::from_str(&tables).unwrap();
    let orders = &tables["tables"][0];
    assert_eq!(orders["pending_files"], 2);
    assert_eq!(orders["explain"]["nearest"], "files");
    assert_eq!(orders["explain"]["files"]["remaining"], 0);
    assert_eq!(orders["last_run"]["failure_class"], "engine_unavailable");
    // The queue by its name, reached: no problem; never its URL.
    assert_eq!(tables["queues"][0]["queue"], queue.as_str(), "{tables}");
    assert!(tables["queues"][0]["problem"].is_null(), "{tables}");
    assert!(!metrics.contains(&queue_url), "{metrics}");
    assert_eq!(get("/v1/tables/analytics.orders").await.0, 200);
    // The failed run is in the table's durable history, with its class.
    let (status, runs) = get("/v1/tables/analytics.orders/runs").await;
    assert_eq!(status, 200, "{runs}");
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    assert_eq!(
        runs["runs"][0]["failure_class"], "engine_unavailable",
        "{runs}"
    );
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(get("/v1/tables/no.such/runs").await.0, 404);
    // The series: the two files counted, in a point of their minute.
    let (status, series) = get("/v1/tables/analytics.orders/series").await;
    assert_eq!(status, 200, "{series}");
    let series: serde_json::Value = serde_json::from_str(&series).unwrap();
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.last().unwrap()["files"], 2, "{series}");
    // Server-side paging and filtering, and a clear refusal of what it does not know.
    let (status, page) = get("/v1/tables?state=failing&limit=1&sort=pending_files").await;
    assert_eq!(status, 200, "{page}");
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(
        (page["total"].as_u64(), page["matched"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(page["tables"][0]["table"], "analytics.orders");
    let (status, refused) = get("/v1/tables?state=broken").await;
    assert_eq!(status, 400);
    assert!(refused.contains("due, failing"), "{refused}");
    // The page and its assets, embedded; with a token set it offers actions only with it.
    let (status, ui) = get("/v1/ui").await;
    assert_eq!((status, ui.as_str()), (200, r#"{"mutations":"token"}"#));
    let mut page_assets = String::new();
    for path in ["/", "/assets/app.js", "/assets/style.css"] {
        let (status, body) = get(path).await;
        assert_eq!(status, 200, "{path}");
        page_assets.push_str(&body);
    }
    assert!(page_assets.contains("<main id=\"view\">"), "{page_assets}");
    let rendered =
        if support::browser::available("notifications_metrics_health_and_the_api_leak_no_secret") {
            [
                support::browser::rendered(&format!("{base}/#/")),
                support::browser::rendered(&format!("{base}/#/table/analytics.orders")),
            ]
            .join("\n")
        } else {
            String::new()
        };
    assert_eq!(get("/v1/tables/analytics.nope").await.0, 404);

    // The one mutating call needs the token.
    let compact = format!("{base}/v1/tables/analytics.orders/compact");
    assert_eq!(
        http.post(&compact).send().await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        http.post(&compact)
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let accepted = http
        .post(&compact)
        .bearer_auth("SECRETTOKEN")
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status().as_u16(), 202);
    wait_until(
        "the manual run's alert",
        Duration::from_secs(30),
        || async { (slack.received().len() >= 3).then_some(()) },
    )
    .await;
    assert!(slack.received()[2]
        .body
        .to_string()
        .contains("engine_unavailable"));

    // The CLI asks the running service.
    let (ok, status_json, stderr) = icepack.command(&["status", "--json"]);
    assert!(ok, "{stderr}");
    assert!(
        status_json.contains("queue_position"),
        "status came from the API: {status_json}"
    );
    let (ok, status_text, _) = icepack.command(&["status"]);
    assert!(
        ok && status_text.contains("nearest threshold: files"),
        "{status_text}"
    );

    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
    let log = icepack.log(run);
    for (what, text) in [
        ("the log", log.as_str()),
        ("/metrics", metrics.as_str()),
        ("/v1/tables", &tables.to_string()),
        ("the page's assets", &page_assets),
        ("the page as a browser renders it", &rendered),
        ("status --json", status_json.as_str()),
        ("status", status_text.as_str()),
    ] {
        assert_no_secret(what, text);
    }
    for received in slack.received().iter().chain(pager.received().iter()) {
        assert_no_secret("a notification", &received.body.to_string());
    }
}

#[tokio::test]
async fn a_dead_slack_never_stalls_counting() {
    let moto = Moto::start().await;
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&unique("landing"), 5).await;
    let slack = Receiver::start().await;
    // Slack hangs for 20 s on every request.
    slack.script((0..10).map(|_| Reply {
        delay: Duration::from_secs(20),
        ..Reply::status(500, "")
    }));
    let config = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""
shutdown_timeout_seconds = 1
[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 1
[spark]
retry_attempts = 1
failure_backoff_initial_seconds = 1
failure_backoff_max_seconds = 1
[[tables]]
table = "analytics.orders"
bucket = "lake-bucket"
prefix = "warehouse/orders/"
"#,
        endpoint = moto.endpoint
    );
    let mut icepack = Icepack::with_config(&config);
    icepack.env = vec![
        ("SLACK_WEBHOOK_URL".to_string(), slack.url("/hook")),
        (
            "DOCKER_HOST".to_string(),
            "unix:///nonexistent/icepack-test/docker.sock".to_string(),
        ),
    ];
    let run = icepack.spawn_run("");
    for index in 0..5 {
        moto.send(
            &queue_url,
            &format!(r#"{{"Records":[{}]}}"#, record(&format!("{index}.parquet"))),
        )
        .await;
    }
    wait_until(
        "every file counted while Slack hangs",
        Duration::from_secs(30),
        || async {
            let status = icepack.status();
            let table = &status["tables"][0];
            let claimed = table["in_flight_run"]["claimed_files"]
                .as_u64()
                .unwrap_or(0);
            (table["pending_files"].as_u64().unwrap() + claimed == 5).then_some(())
        },
    )
    .await;
    // Runs go on too (the first fails at once: no engine), whenever it lands beside the counting.
    wait_until(
        "a run to fail while Slack hangs",
        Duration::from_secs(30),
        || async { icepack.log(run).contains("compaction failed").then_some(()) },
    )
    .await;
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}

/// Issue 31 item 6: on a loopback listener without a token, a page of another site open in the
/// operator's browser sends a `text/plain` POST (no preflight) — or reaches the listener through a
/// name it rebound to 127.0.0.1. Neither reloads, starts a run or reads anything; the page served
/// by the listener itself (same origin) and clients that are not browsers still may.
#[tokio::test]
async fn a_page_of_another_site_changes_nothing_and_reads_nothing() {
    let port = free_port();
    let config = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = "127.0.0.1:{port}"
shutdown_timeout_seconds = 1
[sqs]
queue_url = "http://127.0.0.1:1/123456789012/nowhere"
[spark]
retry_attempts = 1
[[tables]]
table = "analytics.orders"
bucket = "lake-bucket"
prefix = "warehouse/orders/"
"#
    );
    let mut icepack = Icepack::with_config(&config);
    icepack.env = vec![(
        "DOCKER_HOST".to_string(),
        "unix:///nonexistent/icepack-test/docker.sock".to_string(),
    )];
    let run = icepack.spawn_run("");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_until("the API to answer", Duration::from_secs(30), || {
        let request = http.get(format!("{base}/healthz"));
        async move { request.send().await.ok().map(|_| ()) }
    })
    .await;
    let cross_site = |path: &str| {
        http.post(format!("{base}{path}"))
            .header("Origin", "http://evil.example")
            .header("Sec-Fetch-Site", "cross-site")
            .header("Content-Type", "text/plain")
            .body("x")
    };
    for path in ["/v1/reload", "/v1/tables/analytics.orders/compact"] {
        let response = cross_site(path).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 403, "{path}");
    }
    let rebound = http
        .get(format!("{base}/v1/tables"))
        .header("Host", format!("evil.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 403);
    let tables: serde_json::Value = http
        .get(format!("{base}/v1/tables"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(tables["tables"][0]["last_run"].is_null(), "{tables}");
    let log = icepack.log(run);
    assert!(!log.contains("run requested over HTTP"), "{log}");
    assert!(!log.contains("configuration reloaded"), "{log}");

    // The page itself: same origin, accepted; and the run it asks for starts (and fails: no
    // engine), which is what the refused request above would have done.
    let same_origin = http
        .post(format!("{base}/v1/tables/analytics.orders/compact"))
        .header("Origin", base.as_str())
        .header("Sec-Fetch-Site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(same_origin.status().as_u16(), 202);
    wait_until("the requested run to end", Duration::from_secs(30), || {
        let request = http.get(format!("{base}/v1/tables"));
        async move {
            let tables: serde_json::Value = request.send().await.ok()?.json().await.ok()?;
            (!tables["tables"][0]["last_run"].is_null()).then_some(())
        }
    })
    .await;
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}
