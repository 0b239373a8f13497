//! The user's thresholds are a contract: through `icepack run` with the shipped pacing, real S3
//! notifications from moto, the process runner with a stand-in spark-sql
//! (tests/fixtures/logging-spark-sql.sh) and the real clock, a crossed files threshold runs once
//! files stop landing (within the settle window), and files under every threshold run at
//! max-wait — not later, whatever a run costs.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{free_port, get_json, wait_until, Icepack, Moto};

fn stand_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logging-spark-sql.sh")
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// When the stand-in logged the start of the first run of `table`, if it did.
fn first_start(log: &Path, table: &str) -> Option<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let event = parts.next()?;
            let at: u64 = parts.next()?.parse().ok()?;
            (event == "start" && parts.next()? == table).then_some(at)
        })
        .min()
}

#[tokio::test]
async fn a_crossed_threshold_runs_within_the_settle_window_and_max_wait_is_never_exceeded() {
    let moto = Moto::start().await;
    let landing = moto.landing(5).await;
    let port = free_port();
    // No pacing key: the shipped default. max-wait is shortened to its least, a minute; the
    // settle window to 2 s (at most 10 s after the oldest file).
    let config = format!(
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
min_files = 10
max_wait_minutes = 1
settle_seconds = 2
settle_max_seconds = 10

[spark]
runner = "process"
spark_sql = "{spark_sql}"
max_concurrent = 2
retry_attempts = 1

[[tables]]
table = "contract.twelve"
bucket = "{bucket}"
prefix = "twelve/"

[[tables]]
table = "contract.three"
bucket = "{bucket}"
prefix = "three/"
"##,
        queue_url = landing.queue_url,
        endpoint = moto.endpoint,
        bucket = landing.bucket,
        spark_sql = stand_in().display(),
    );
    let mut icepack = Icepack::with_config(&config);
    let log = icepack.dir.path().join("runs.log");
    icepack.env = vec![
        ("STANDIN_LOG".to_string(), log.display().to_string()),
        ("STANDIN_SECONDS".to_string(), "1".to_string()),
        ("SLACK_WEBHOOK_URL".to_string(), String::new()),
    ];
    let run = icepack.spawn_run("");
    let base = format!("http://127.0.0.1:{port}");
    wait_until("the service", Duration::from_secs(60), || async {
        reqwest::get(format!("{base}/healthz")).await.ok()?;
        Some(())
    })
    .await;

    // Three small files, under every threshold, and twelve over min_files = 10.
    let three_landed = now_millis();
    for index in 0..3 {
        moto.put_object(
            &landing.bucket,
            &format!("three/data/f{index}.parquet"),
            100,
        )
        .await;
    }
    let twelve_landed = now_millis();
    for index in 0..12 {
        moto.put_object(
            &landing.bucket,
            &format!("twelve/data/f{index}.parquet"),
            100,
        )
        .await;
    }
    let twelve_done = now_millis();

    // Twelve: counted, then settling (files stopped landing), then the run — well before
    // max-wait; the cost model (a 90 s run worth 12 fixed files) would have held it for hours.
    let twelve_started = wait_until("the twelve files' run", Duration::from_secs(50), || async {
        first_start(&log, "contract.twelve")
    })
    .await;
    assert!(
        twelve_started >= twelve_done,
        "the run started while files were still landing"
    );
    assert!(
        twelve_started < twelve_landed + 60_000,
        "not within the settle window: started {} ms after the first file",
        twelve_started - twelve_landed
    );
    assert!(
        first_start(&log, "contract.three").is_none(),
        "three files under every threshold ran before max-wait"
    );
    let status = get_json(&format!("{base}/v1/tables")).await;
    let three = status["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|table| table["table"] == "contract.three")
        .cloned()
        .unwrap();
    assert_eq!(three["pending_files"], 3, "{three}");
    assert_eq!(three["explain"]["pacing"], "settle", "{three}");

    // Three: at max-wait (a minute after the oldest file), by the accumulator's own timer, not
    // later.
    let three_started = wait_until("the three files' run", Duration::from_secs(120), || async {
        first_start(&log, "contract.three")
    })
    .await;
    assert!(
        three_started >= three_landed + 60_000,
        "ran {} ms after the oldest file, before max-wait",
        three_started - three_landed
    );
    assert!(
        three_started <= twelve_landed + 60_000 + 30_000,
        "max-wait exceeded: ran {} ms after the oldest file",
        three_started - three_landed
    );
    icepack.terminate(run).await;
}
