//! The MinIO bridge: MinIO's webhook notifications, posted over HTTP, land in the SQS queue
//! unchanged and count like any S3 notification; on moto and on ElasticMQ.

use crate::support;

use std::time::Duration;

use support::{free_port, unique, wait_until, ElasticMq, Icepack, Moto, QueueServer};

const MINIO_EVENT: &str = r#"{"EventName":"s3:ObjectCreated:Put","Key":"lakehouse-data/warehouse/analytics/customer_orders/data/00001.parquet","Records":[{"eventVersion":"2.0","eventSource":"minio:s3","awsRegion":"","eventTime":"2024-05-01T12:00:00.000Z","eventName":"s3:ObjectCreated:Put","userIdentity":{"principalId":"minio"},"requestParameters":{},"responseElements":{},"s3":{"s3SchemaVersion":"1.0","configurationId":"Config","bucket":{"name":"lakehouse-data","ownerIdentity":{"principalId":"minio"},"arn":"arn:aws:s3:::lakehouse-data"},"object":{"key":"warehouse%2Fanalytics%2Fcustomer_orders%2Fdata%2F00001.parquet","size":2048,"eTag":"x","sequencer":"17A"}}}]}"#;

#[tokio::test]
async fn minio_webhooks_reach_the_queue_and_count_on_moto() {
    minio_webhooks_reach_the_queue_and_count::<Moto>().await;
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn minio_webhooks_reach_the_queue_and_count_on_elasticmq() {
    minio_webhooks_reach_the_queue_and_count::<ElasticMq>().await;
}

async fn minio_webhooks_reach_the_queue_and_count<S: QueueServer>() {
    let Some(server) = S::start_for("minio_webhooks_reach_the_queue_and_count").await else {
        return;
    };
    let (queue_url, _dlq) = server.create_queue_with_dlq(&unique("landing"), 5).await;
    let port = free_port();
    let config = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""
[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
[[tables]]
table = "analytics.customer_orders"
bucket = "lakehouse-data"
prefix = "warehouse/analytics/customer_orders/"
"#,
        endpoint = server.endpoint
    );
    let mut icepack = Icepack::with_config(&config);
    icepack.env = vec![(
        "ICEPACK_BRIDGE_TOKEN".to_string(),
        "bridge-token".to_string(),
    )];
    let mut bridge = std::process::Command::new(support::binary())
        .args(["bridge", "--config"])
        .arg(&icepack.config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .envs(support::AWS_ENV)
        .env("ICEPACK_BRIDGE_TOKEN", "bridge-token")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/minio");
    wait_until("the bridge to listen", Duration::from_secs(20), || {
        let http = http.clone();
        let health = format!("http://127.0.0.1:{port}/healthz");
        async move { http.get(health).send().await.ok().map(|_| ()) }
    })
    .await;

    let post = |body: &'static str, token: Option<&'static str>| {
        let mut request = http.post(&url).body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        post(MINIO_EVENT, None).await,
        401,
        "MinIO's auth_token is required when set"
    );
    assert_eq!(
        post("{\"not\":\"an event\"}", Some("bridge-token")).await,
        400
    );
    assert_eq!(post(MINIO_EVENT, Some("bridge-token")).await, 200);

    let run = icepack.spawn_run("");
    wait_until(
        "the forwarded event to be counted",
        Duration::from_secs(30),
        || async { (icepack.pending_files("analytics.customer_orders") == 1).then_some(()) },
    )
    .await;
    // The message is deleted after its count is durable: wait for that too.
    wait_until(
        "the forwarded event's message to be deleted",
        Duration::from_secs(30),
        || async { (server.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert!(icepack.terminate(run).await.success());
    let _ = bridge.kill();
    let _ = bridge.wait();
}

/// Issue 31 item 6: without ICEPACK_BRIDGE_TOKEN a bridge that anyone on the network could
/// post to does not start, and says why.
#[test]
fn a_bridge_beyond_loopback_without_a_token_does_not_start() {
    let icepack =
        Icepack::with_config("[service]\nstate_dir = \"@STATE_DIR@\"\nhttp_listen = \"\"\n");
    let port = free_port();
    let mut bridge = std::process::Command::new(support::binary())
        .args(["bridge", "--config"])
        .arg(&icepack.config)
        .args(["--listen", &format!("0.0.0.0:{port}")])
        .envs(support::AWS_ENV)
        .env_remove("ICEPACK_BRIDGE_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = bridge.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = bridge.kill();
            let _ = bridge.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut bridge.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = status.unwrap_or_else(|| panic!("the bridge started: {stderr}"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ICEPACK_BRIDGE_TOKEN is not set and 0.0.0.0:"),
        "{stderr}"
    );
}
