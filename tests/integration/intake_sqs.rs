//! Intake against a real SQS + S3 server (moto on 127.0.0.1): real PutObject calls fire real S3
//! notifications into a queue with a dead-letter queue, and `icepack run` counts them. The tests
//! that need no S3 events (dead-letter redrive, the server down and back) also run against
//! ElasticMQ, a second SQS server (`*_on_moto` / `*_on_elasticmq` over one body).

use crate::support;

use std::collections::BTreeSet;
#[cfg(feature = "failpoints")]
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use icepack::store::{RocksStore, StateStore};

use support::{
    free_port, tail, unique, wait_until, wait_until_or, ElasticMq, Icepack, Landing, Moto,
    QueueServer, SqsEndpoint,
};

const TABLE: &str = "analytics.customer_orders";
const PREFIX: &str = "warehouse/analytics/customer_orders/";

fn config(
    server: &SqsEndpoint,
    queue_url: &str,
    bucket: &str,
    visibility_timeout_seconds: u32,
) -> String {
    format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""

[sqs]
queue_url = "{queue_url}"
region = "us-east-1"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
max_messages = 10
visibility_timeout_seconds = {visibility_timeout_seconds}

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
small_file_mb = 1
min_files = 10
max_wait_minutes = 0     # the events carry 2024 times: keep these tables from becoming due

[[tables]]
table = "{TABLE}"
bucket = "{bucket}"
prefix = "{PREFIX}"

[[tables]]
table = "analytics.customer_orders_archive"
bucket = "{bucket}"
prefix = "{PREFIX}archive/"
"#,
        endpoint = server.endpoint
    )
}

/// `/readyz` of the service on `port`: its status and body, `None` while it does not answer.
async fn readyz(http: reqwest::Client, port: u16) -> Option<(u16, String)> {
    let response = http
        .get(format!("http://127.0.0.1:{port}/readyz"))
        .send()
        .await
        .ok()?;
    Some((
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    ))
}

fn record(bucket: &str, key: &str, size: u64) -> String {
    format!(
        r#"{{"eventVersion":"2.1","eventSource":"aws:s3","eventTime":"2024-05-01T12:00:00.000Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"{bucket}"}},"object":{{"key":"{key}","size":{size}}}}}}}"#
    )
}

#[tokio::test]
async fn s3_notifications_are_counted_once_and_deleted() {
    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(3).await;

    for index in 0..6 {
        moto.put_object(
            &bucket,
            &format!(
                "{PREFIX}data/order_date=2024-05-0{}/part {index}+x.parquet",
                index % 2
            ),
            100 + index,
        )
        .await;
    }
    // The same object written again: a duplicate event, counted once.
    moto.put_object(
        &bucket,
        &format!("{PREFIX}data/order_date=2024-05-00/part 0+x.parquet"),
        100,
    )
    .await;
    moto.put_object(&bucket, &format!("{PREFIX}metadata/v1.metadata.json"), 10)
        .await;
    moto.put_object(
        &bucket,
        &format!("{PREFIX}data/big.parquet"),
        1024 * 1024 + 1,
    )
    .await;
    moto.put_object(&bucket, "elsewhere/x.parquet", 10).await;
    moto.put_object(&bucket, &format!("{PREFIX}archive/data/a.parquet"), 10)
        .await;

    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, 30));
    let run = icepack.spawn_run("");
    let drained = tokio::time::timeout(
        Duration::from_secs(60),
        wait_until("the queue to drain", Duration::from_secs(60), || async {
            (moto.queue_depth(&queue_url).await == 0).then_some(())
        }),
    )
    .await;
    assert!(drained.is_ok(), "queue not drained:\n{}", icepack.log(run));

    let status = icepack.status();
    let tables = status["tables"].as_array().unwrap();
    let orders = &tables[0];
    assert_eq!(orders["table"], TABLE);
    assert_eq!(orders["pending_files"], 6, "{status}");
    assert_eq!(orders["pending_bytes"], (100..106).sum::<u64>());
    assert_eq!(orders["due"], false);
    let partitions = orders["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 2);
    assert_eq!(partitions[0]["partition"], "order_date=2024-05-00");
    assert_eq!(partitions[0]["files"], 3);
    assert_eq!(tables[1]["pending_files"], 1, "longest prefix wins");

    let exit = icepack.terminate(run).await;
    assert!(
        exit.success(),
        "SIGTERM must exit 0: {exit:?}\n{}",
        icepack.log(run)
    );
    assert_eq!(
        icepack.pending_files(TABLE),
        6,
        "state survives the restart"
    );
}

#[tokio::test]
async fn a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue_on_moto() {
    a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue::<Moto>().await;
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue_on_elasticmq() {
    a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue::<ElasticMq>().await;
}

async fn a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue<S: QueueServer>() {
    let Some(moto) =
        S::start_for("a_malformed_message_is_kept_and_moves_to_the_dead_letter_queue").await
    else {
        return;
    };
    let queue = unique("landing");
    let bucket = unique("lake");
    let (queue_url, dlq_url) = moto.create_queue_with_dlq(&queue, 2).await;
    moto.send(&queue_url, "this is not json").await;
    // One bad record among good ones: the good ones count once however often it is redelivered.
    let mixed = format!(
        r#"{{"Records":[{},{{"eventVersion":"3.0"}},{}]}}"#,
        record(&bucket, &format!("{PREFIX}data/one.parquet"), 10),
        record(&bucket, &format!("{PREFIX}data/three.parquet"), 30)
    );
    moto.send(&queue_url, &mixed).await;

    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, 1));
    let run = icepack.spawn_run("");
    let dead = wait_until(
        "both bad messages in the dead-letter queue",
        Duration::from_secs(90),
        || async { (moto.queue_depth(&dlq_url).await == 2).then_some(()) },
    )
    .await;
    let _: () = dead;
    assert_eq!(moto.queue_depth(&queue_url).await, 0);
    let bodies = moto.receive_bodies(&dlq_url).await;
    assert!(
        bodies.iter().any(|body| body == "this is not json"),
        "{bodies:?}"
    );
    assert!(icepack.terminate(run).await.success());
    assert_eq!(
        icepack.pending_files(TABLE),
        2,
        "the good records of the mixed message, once"
    );
    let log = icepack.log(run);
    assert!(log.contains("invalid message left in the queue"), "{log}");
}

#[cfg(feature = "failpoints")]
#[tokio::test]
async fn killed_after_the_commit_before_the_delete_does_not_count_twice() {
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 5).await;
    let body = format!(
        r#"{{"Records":[{},{},{}]}}"#,
        record(&bucket, &format!("{PREFIX}data/a.parquet"), 1),
        record(&bucket, &format!("{PREFIX}data/b.parquet"), 2),
        record(&bucket, &format!("{PREFIX}data/c.parquet"), 3)
    );
    moto.send(&queue_url, &body).await;

    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, 1));
    let crashed = icepack.spawn_run("poller.before_delete=return");
    let status = icepack.wait_exit(crashed, Duration::from_secs(60)).await;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{}",
        icepack.log(crashed)
    );
    assert_eq!(
        icepack.pending_files(TABLE),
        3,
        "the commit happened before the crash"
    );
    assert_eq!(
        moto.queue_depth(&queue_url).await,
        1,
        "the message was not deleted"
    );

    let run = icepack.spawn_run("");
    wait_until(
        "the redelivered message to be deleted",
        Duration::from_secs(60),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert!(icepack.terminate(run).await.success());
    assert_eq!(
        icepack.pending_files(TABLE),
        3,
        "redelivery counted nothing twice"
    );
}

#[cfg(feature = "failpoints")]
#[tokio::test]
async fn killed_before_the_commit_counts_exactly_once_after_redelivery() {
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 5).await;
    let body = format!(
        r#"{{"Records":[{},{}]}}"#,
        record(&bucket, &format!("{PREFIX}data/a.parquet"), 1),
        record(&bucket, &format!("{PREFIX}data/b.parquet"), 2)
    );
    moto.send(&queue_url, &body).await;

    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, 1));
    let crashed = icepack.spawn_run("intake.before_commit=return");
    let status = icepack.wait_exit(crashed, Duration::from_secs(60)).await;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{}",
        icepack.log(crashed)
    );
    assert_eq!(icepack.pending_files(TABLE), 0, "nothing was committed");

    let run = icepack.spawn_run("");
    wait_until(
        "the redelivered message to be counted and deleted",
        Duration::from_secs(60),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert!(icepack.terminate(run).await.success());
    assert_eq!(icepack.pending_files(TABLE), 2);
}

/// The two crash tests above and the unwritable-state test below arm the binary's fault points.
#[cfg(not(feature = "failpoints"))]
#[test]
fn fault_point_tests_need_the_failpoints_feature() {
    support::fault_point_tests_left_out(
        "intake_sqs: killed_after_the_commit_*, killed_before_the_commit_*, \
         an_unwritable_state_directory_*",
    );
}

#[tokio::test]
async fn a_second_process_on_the_same_state_directory_fails_at_once() {
    let moto = Moto::start().await;
    let queue = unique("landing");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 5).await;
    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, "lake-bucket", 30));
    let first = icepack.spawn_run("");
    wait_until(
        "the first process to hold the state",
        Duration::from_secs(30),
        || async {
            icepack
                .log(first)
                .contains("icepack is running")
                .then_some(())
        },
    )
    .await;
    let second = icepack.spawn_run("");
    let status = icepack.wait_exit(second, Duration::from_secs(10)).await;
    assert!(!status.success());
    let log = icepack.log(second);
    assert!(log.contains("in use by another icepack process"), "{log}");
    // status still works while `run` holds the directory
    assert_eq!(icepack.pending_files(TABLE), 0);
    assert!(icepack.terminate(first).await.success());
}

#[tokio::test]
async fn the_queue_server_down_backs_off_without_a_busy_loop_and_intake_resumes_when_it_is_back_on_moto(
) {
    the_queue_server_down_backs_off_without_a_busy_loop_and_intake_resumes_when_it_is_back::<Moto>(
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn the_queue_server_down_backs_off_without_a_busy_loop_and_intake_resumes_when_it_is_back_on_elasticmq(
) {
    the_queue_server_down_backs_off_without_a_busy_loop_and_intake_resumes_when_it_is_back::<
        ElasticMq,
    >()
    .await;
}

async fn the_queue_server_down_backs_off_without_a_busy_loop_and_intake_resumes_when_it_is_back<
    S: QueueServer,
>() {
    if !S::available("the_queue_server_down_backs_off_*") {
        return;
    }
    // Nothing listens on this port: every receive fails.
    let dead_port = free_port();
    let toml = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""
[sqs]
queue_url = "http://127.0.0.1:{dead_port}/{account}/nowhere"
endpoint_url = "http://127.0.0.1:{dead_port}"
wait_time_seconds = 1
pollers = 1
[[tables]]
table = "{TABLE}"
bucket = "lake-bucket"
prefix = "{PREFIX}"
"#,
        account = support::ACCOUNT
    );
    let mut icepack = Icepack::with_config(&toml);
    let started = std::time::Instant::now();
    let run = icepack.spawn_run("");
    // It keeps trying, backing off longer each time. Every failure after the first waits at
    // least the back-off's floor (half a second): n failures take (n - 1) × 0.5 s or more,
    // however loaded the machine (a busy loop makes thousands a second). The log is read before
    // the time is taken, so no failure after the reading is set against it.
    let failures = |log: &str| log.matches("cannot receive from the queue").count();
    wait_until_or(
        "three failed receives",
        Duration::from_secs(90),
        || async { (failures(&icepack.log(run)) >= 3).then_some(()) },
        || tail(&icepack.log(run), 20),
    )
    .await;
    let log = icepack.log(run);
    let elapsed = started.elapsed();
    let failed = failures(&log);
    assert!(
        (failed - 1) as f64 * 0.5 <= elapsed.as_secs_f64(),
        "a back-off, not a busy loop: {failed} failures in {elapsed:?}\n{log}"
    );
    let attempts: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("backing off before polling again"))
        .filter_map(|line| line.split("attempt=").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(
        attempts.get(..2),
        Some(&["1", "2"][..]),
        "the back-off grows from failure to failure:\n{log}"
    );
    assert_eq!(icepack.pending_files(TABLE), 0);

    // The server comes up (a fresh one: the queue is created again) and gets an event: the poller
    // finds it after its back-off, counts it and deletes it.
    let mut server = S::start_on(dead_port).await;
    let event = |name: &str| {
        format!(
            r#"{{"Records":[{}]}}"#,
            record("lake-bucket", &format!("{PREFIX}data/{name}.parquet"), 10)
        )
    };
    let queue_url = server.create_queue("nowhere").await;
    server.send(&queue_url, &event("after-outage")).await;
    wait_until(
        "the event after the outage to be counted",
        Duration::from_secs(90),
        || async { (icepack.pending_files(TABLE) == 1).then_some(()) },
    )
    .await;
    wait_until(
        "its message to be deleted",
        Duration::from_secs(30),
        || async { (server.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;

    // Down again while the poller long-polls, and back on the same port: it backs off anew, then
    // resumes (the back-off was reset by the successful receives).
    let failures_before = icepack
        .log(run)
        .matches("cannot receive from the queue")
        .count();
    server.stop();
    wait_until(
        "receives to fail again",
        Duration::from_secs(30),
        || async {
            let log = icepack.log(run);
            (log.matches("cannot receive from the queue").count() >= failures_before + 2)
                .then_some(())
        },
    )
    .await;
    server.restart().await;
    let queue_url = server.create_queue("nowhere").await;
    server.send(&queue_url, &event("after-second-outage")).await;
    wait_until(
        "the event after the second outage to be counted",
        Duration::from_secs(90),
        || async { (icepack.pending_files(TABLE) == 2).then_some(()) },
    )
    .await;
    wait_until(
        "its message to be deleted",
        Duration::from_secs(30),
        || async { (server.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}

/// The announced delay of the last back-off in a run's log (`delay_ms` of "backing off before
/// polling again").
fn last_back_off(log: &str) -> Option<Duration> {
    log.lines()
        .filter(|line| line.contains("backing off before polling again"))
        .filter_map(|line| line.split("delay_ms=").nth(1))
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .map(Duration::from_millis)
        .next_back()
}

/// SIGTERM while the poller backs off from a queue server that is down (the port closed): the
/// process exits 0 at once, not when the back-off ends (up to a minute, past Kubernetes' 30 s
/// grace; with `shutdown_timeout_seconds = 5` it took the 25 s left of a 26 s back-off). The
/// signal comes as the log announces a back-off of 20 s or more (from about 30 s in): waiting
/// it out could not pass the 15 s bound.
#[tokio::test]
async fn sigterm_during_a_back_off_exits_at_once() {
    let dead_port = free_port();
    let toml = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""
shutdown_timeout_seconds = 5
[sqs]
queue_url = "http://127.0.0.1:{dead_port}/{account}/nowhere"
endpoint_url = "http://127.0.0.1:{dead_port}"
wait_time_seconds = 20
pollers = 1
[[tables]]
table = "{TABLE}"
bucket = "lake-bucket"
prefix = "{PREFIX}"
"#,
        account = support::ACCOUNT
    );
    let mut icepack = Icepack::with_config(&toml);
    let run = icepack.spawn_run("");
    let back_off = wait_until_or(
        "a back-off of 20 s or more",
        Duration::from_secs(300),
        || async {
            last_back_off(&icepack.log(run)).filter(|delay| *delay >= Duration::from_secs(20))
        },
        || tail(&icepack.log(run), 20),
    )
    .await;
    let signalled = std::time::Instant::now();
    icepack.signal(run, libc::SIGTERM);
    let status = icepack.wait_exit(run, Duration::from_secs(90)).await;
    let took = signalled.elapsed();
    let log = icepack.log(run);
    assert!(status.success(), "SIGTERM must exit 0: {status:?}\n{log}");
    assert!(
        took < Duration::from_secs(15),
        "exited {took:?} after SIGTERM during a back-off of {back_off:?}\n{}",
        tail(&log, 20)
    );
    eprintln!("FIGURES exit {took:?} after SIGTERM during a back-off of {back_off:?}");
    assert!(log.contains("shutting down"), "{log}");
    assert_eq!(icepack.pending_files(TABLE), 0);
}

/// SIGTERM while the poller long-polls an empty queue (20 s a receive): the process exits at
/// once, and the batch it received before was counted and deleted.
#[tokio::test]
async fn sigterm_during_a_long_poll_exits_at_once() {
    let moto = Moto::start().await;
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&unique("landing"), 5).await;
    let bucket = unique("lake");
    let toml = config(&moto, &queue_url, &bucket, 30)
        .replace("wait_time_seconds = 1", "wait_time_seconds = 20");
    let mut icepack = Icepack::with_config(&toml);
    let run = icepack.spawn_run("");
    moto.send(
        &queue_url,
        &format!(
            r#"{{"Records":[{}]}}"#,
            record(&bucket, &format!("{PREFIX}data/a.parquet"), 10)
        ),
    )
    .await;
    // The next receive starts as soon as a batch is handed on: once it is deleted, the poller
    // waits on an empty queue.
    wait_until(
        "the message to be counted and deleted",
        Duration::from_secs(60),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    let signalled = std::time::Instant::now();
    icepack.signal(run, libc::SIGTERM);
    let status = icepack.wait_exit(run, Duration::from_secs(60)).await;
    let took = signalled.elapsed();
    let log = icepack.log(run);
    assert!(status.success(), "SIGTERM must exit 0: {status:?}\n{log}");
    assert!(
        took < Duration::from_secs(10),
        "exited {took:?} after SIGTERM during a 20 s long poll\n{}",
        tail(&log, 20)
    );
    assert_eq!(icepack.pending_files(TABLE), 1);
}

/// The state directory stops taking writes (a full or read-only disk, injected at the store's
/// write): nothing is deleted from the queue, the error is clear, `/readyz` fails; once writes
/// work again the redelivered message is counted once and `/readyz` recovers.
#[cfg(feature = "failpoints")]
#[tokio::test]
async fn an_unwritable_state_directory_deletes_nothing_and_fails_readiness() {
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    let (queue_url, _dlq) = moto.create_queue_with_dlq(&queue, 100).await;
    let port = free_port();
    let toml = config(&moto, &queue_url, &bucket, 2).replace(
        "http_listen = \"\"",
        &format!("http_listen = \"127.0.0.1:{port}\""),
    );
    let mut icepack = Icepack::with_config(&toml);
    let disk_full = icepack.state_dir().with_file_name("disk-full");
    std::fs::write(&disk_full, "").unwrap();
    let run = icepack.spawn_run(&format!(
        "store.write_error=return({})",
        disk_full.display()
    ));
    let http = reqwest::Client::new();
    let readyz = |http: reqwest::Client| readyz(http, port);

    moto.send(
        &queue_url,
        &format!(
            r#"{{"Records":[{}]}}"#,
            record(&bucket, &format!("{PREFIX}data/a.parquet"), 10)
        ),
    )
    .await;
    let (status, body) = wait_until("/readyz to fail", Duration::from_secs(30), || {
        let http = http.clone();
        async move {
            readyz(http).await.filter(|(status, body)| {
                *status == 503 && body.contains("state store refuses writes")
            })
        }
    })
    .await;
    assert_eq!(status, 503);
    assert!(body.contains("state"), "{body}");
    let log = icepack.log(run);
    assert!(log.contains("No space left on device"), "{log}");
    // Nothing is deleted while writes fail: the store is probed three times (a back-off of
    // seconds), and the message is still in the queue.
    wait_until(
        "three failed probes of the store",
        Duration::from_secs(60),
        || {
            let http = http.clone();
            async move {
                let (_, body) = readyz(http).await?;
                let probes: u32 = body
                    .split(" probe(s) so far")
                    .next()?
                    .rsplit(' ')
                    .next()?
                    .parse()
                    .ok()?;
                (probes >= 3).then_some(())
            }
        },
    )
    .await;
    assert_eq!(moto.queue_depth(&queue_url).await, 1, "nothing deleted");
    assert_eq!(icepack.pending_files(TABLE), 0);

    // Writes work again: the redelivered message is counted once, deleted, and /readyz is happy.
    std::fs::remove_file(&disk_full).unwrap();
    wait_until(
        "the message to be counted and deleted",
        Duration::from_secs(60),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert_eq!(icepack.pending_files(TABLE), 1);
    // The store's problem leaves /readyz (the engine's may stay where no container engine runs).
    wait_until("/readyz to drop the store", Duration::from_secs(30), || {
        let http = http.clone();
        async move {
            readyz(http)
                .await
                .filter(|(_, body)| !body.contains("state store"))
        }
    })
    .await;
    assert!(icepack.terminate(run).await.success());
}

/// A size-limited tmpfs mounted for one test (as root) and unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u32) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount(8) runs");
        assert!(
            mounted.success(),
            "this test needs root to mount a {size_mib} MiB tmpfs (a real full disk); run it as root"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Keeps the filesystem full, as another writer to the same volume would: a thread appends
    /// to one file whenever space appears (RocksDB frees some when it reopens) until the
    /// returned guard is dropped, which deletes the file.
    fn keep_full(&self) -> Filler {
        use std::io::Write;
        let path = self.path().join("filler");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut file = std::fs::File::create(&path).unwrap();
        let fill = move |file: &mut std::fs::File| {
            let block = vec![0u8; 64 << 10];
            while file.write_all(&block).is_ok() {}
            while file.write_all(&[0u8]).is_ok() {}
        };
        fill(&mut file);
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    fill(&mut file);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        Filler {
            path,
            stop,
            thread: Some(thread),
        }
    }
}

struct Filler {
    path: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A real full disk: the state directory on a 24 MiB tmpfs, filled while messages arrive, for
/// longer than `maxReceiveCount × visibility timeout`. The process does not abort (RocksDB's own
/// LOG is what aborted it, in Debian's build with assertions), pollers stop receiving and the
/// store is probed; once space is freed every object is counted exactly once, and the
/// dead-letter queue stays empty.
///
/// Only what holds whatever the interleaving is asserted. A commit may still land after the
/// fill (from what RocksDB's log had preallocated) and its batch be deleted after `/readyz`
/// reports the store, so the queue's depth at that moment says nothing exact about what follows
/// (it failed a loaded machine once: 23 messages where it had read 9 + 15). What must hold: no
/// message deleted whose records were not committed — checked key by key against the store once
/// the process has stopped (a deleted message never comes back, so its records are there only
/// if its own batch committed them); nothing dead-lettered; every object counted exactly once;
/// and no message sent while the store refused writes deleted before the store took writes
/// again (the log says when it did).
#[tokio::test]
async fn a_full_disk_pauses_intake_without_aborting_and_nothing_reaches_the_dead_letter_queue() {
    const VISIBILITY_SECONDS: u32 = 5;
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    // Two receives and a message is dead-lettered; the outage lasts longer than 2 × 5 s. The
    // visibility timeout leaves a loaded machine (the suite runs in parallel) time to count and
    // delete a batch after the recovery: a batch deleted late is received a third time.
    let (queue_url, dlq_url) = moto.create_queue_with_dlq(&queue, 2).await;
    let disk = Tmpfs::mount(24);
    let port = free_port();
    let state_dir = disk.path().join("state");
    let toml = config(&moto, &queue_url, &bucket, VISIBILITY_SECONDS)
        .replace("min_files = 10", "min_files = 1000")
        .replace("@STATE_DIR@", &state_dir.display().to_string())
        .replace(
            "http_listen = \"\"",
            &format!("http_listen = \"127.0.0.1:{port}\""),
        );
    let mut icepack = Icepack::with_config(&toml);
    let run = icepack.spawn_run("");
    let http = reqwest::Client::new();
    let readyz = |http: reqwest::Client| readyz(http, port);
    let send = |from: usize, to: usize| {
        let moto = &moto;
        let queue_url = &queue_url;
        let bucket = &bucket;
        async move {
            for n in from..to {
                let records: Vec<String> = (0..5)
                    .map(|r| record(bucket, &format!("{PREFIX}data/{n}-{r}.parquet"), 10))
                    .collect();
                moto.send(
                    queue_url,
                    &format!(r#"{{"Records":[{}]}}"#, records.join(",")),
                )
                .await;
            }
        }
    };
    send(0, 10).await;
    wait_until(
        "the first messages to be counted",
        Duration::from_secs(60),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;

    let filler = disk.keep_full();
    let outage = std::time::Instant::now();
    send(10, 20).await;
    let (_, body) = wait_until(
        "/readyz to report the store",
        Duration::from_secs(30),
        || {
            let http = http.clone();
            async move {
                readyz(http)
                    .await
                    .filter(|(status, body)| *status == 503 && body.contains("refuses writes"))
            }
        },
    )
    .await;
    assert!(body.contains("receiving is paused"), "{body}");
    // More messages while the disk stays full, past two visibility timeouts: the waits pace the
    // outage (its length is what the dead-letter queue would show), no assertion hangs on them.
    for wave in 0..3 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        send(20 + wave * 5, 25 + wave * 5).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(outage.elapsed() > Duration::from_secs(2 * VISIBILITY_SECONDS as u64 + 1));
    assert_eq!(moto.queue_depth(&dlq_url).await, 0, "nothing dead-lettered");
    // The 15 messages sent after /readyz reported the store can only be deleted after a commit,
    // and none passes the closed gate until a probe opens it, which the log tells (read after
    // the depth, so a reopening before the depth was read is in it). The test's own messages
    // are the only ones, so the depth cannot grow after the last wave.
    let depth = moto.queue_depth(&queue_url).await;
    let reopened = icepack.log(run).contains("takes writes again");
    if reopened {
        eprintln!("the store took writes again during the outage (RocksDB freed space the filler had not taken yet): the messages sent meanwhile may have been counted and deleted");
    } else {
        assert!(
            depth >= 15,
            "nothing sent while the store refused writes is deleted: {depth} messages in the queue\n{}",
            icepack.log(run)
        );
    }
    assert!(
        icepack.children_alive(run),
        "icepack survives the full disk:\n{}",
        icepack.log(run)
    );

    drop(filler);
    wait_until(
        "every message to be counted and deleted",
        Duration::from_secs(120),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    // The store's problem leaves /readyz (the engine's may stay where no container engine runs).
    let (_, body) = wait_until("/readyz to drop the store", Duration::from_secs(30), || {
        let http = http.clone();
        async move {
            readyz(http)
                .await
                .filter(|(_, body)| !body.contains("refuses writes"))
        }
    })
    .await;
    assert!(!body.contains("state store"), "{body}");
    assert_eq!(
        moto.queue_depth(&dlq_url).await,
        0,
        "nothing dead-lettered:\n{}",
        icepack.log(run)
    );
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
    let log = icepack.log(run);
    assert!(log.contains("receiving is paused"), "{log}");
    assert!(log.contains("takes writes again"), "{log}");

    // Every message was deleted (none is in either queue): the records of each, and nothing
    // else, are in the store, each once.
    let sent: BTreeSet<String> = (0..35)
        .flat_map(|n| (0..5).map(move |r| format!("{PREFIX}data/{n}-{r}.parquet")))
        .collect();
    let store = RocksStore::open_read_only(&state_dir).unwrap();
    let logged: Vec<String> = store
        .files(TABLE)
        .unwrap()
        .into_iter()
        .map(|(_, file)| file.key)
        .collect();
    let counted: BTreeSet<String> = logged.iter().cloned().collect();
    assert_eq!(logged.len(), counted.len(), "no object counted twice");
    let missing: Vec<&String> = sent.difference(&counted).collect();
    assert!(
        missing.is_empty(),
        "deleted without their records committed: {missing:?}\n{log}"
    );
    assert_eq!(counted, sent, "only the objects sent are counted");
    let objects: Vec<(&str, &str)> = sent
        .iter()
        .map(|key| (bucket.as_str(), key.as_str()))
        .collect();
    let seen = store.seen_entries(&objects).unwrap();
    assert!(
        seen.iter()
            .all(|entry| entry.as_ref().is_some_and(|entry| entry.table == TABLE)),
        "every object remembered as counted for its table"
    );
    drop(store);
    let status = icepack.status();
    let pending: u64 = status["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|table| table["pending_files"].as_u64().unwrap())
        .sum();
    assert_eq!(pending, 35 * 5, "every object counted exactly once");
}

/// One table's accumulator panics whenever it stages records (a fault point standing in for a
/// violated invariant), under load, with one message per receive: the other table's messages are
/// counted and deleted meanwhile, the supervisor restarts the broken one (again and again, backing
/// off), and once the fault is gone its messages are counted, each exactly once.
#[cfg(feature = "failpoints")]
#[tokio::test]
async fn a_panicking_accumulator_is_restarted_and_holds_up_no_other_table() {
    const ARCHIVE: &str = "analytics.customer_orders_archive";
    let moto = Moto::start().await;
    let queue = unique("landing");
    let bucket = unique("lake");
    let (queue_url, dlq_url) = moto.create_queue_with_dlq(&queue, 100).await;
    let port = free_port();
    let toml = config(&moto, &queue_url, &bucket, 2)
        .replace("min_files = 10", "min_files = 1000")
        .replace("max_messages = 10", "max_messages = 1")
        .replace(
            "http_listen = \"\"",
            &format!("http_listen = \"127.0.0.1:{port}\""),
        );
    let mut icepack = Icepack::with_config(&toml);
    let broken = icepack.state_dir().with_file_name("broken");
    std::fs::write(&broken, "").unwrap();
    let run = icepack.spawn_run(&format!(
        "accumulator.stage_panic=return({ARCHIVE}@{})",
        broken.display()
    ));
    let restarts = |http: reqwest::Client| async move {
        let body = http
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.lines()
            .find_map(|line| line.strip_prefix("icepack_accumulator_restarts_total "))
            .and_then(|value| value.trim().parse::<u64>().ok())
    };
    let http = reqwest::Client::new();
    for n in 0..20 {
        let orders: Vec<String> = (0..3)
            .map(|r| record(&bucket, &format!("{PREFIX}data/{n}-{r}.parquet"), 10))
            .collect();
        moto.send(
            &queue_url,
            &format!(r#"{{"Records":[{}]}}"#, orders.join(",")),
        )
        .await;
        if n % 2 == 0 {
            let archived = record(&bucket, &format!("{PREFIX}archive/{n}.parquet"), 10);
            moto.send(&queue_url, &format!(r#"{{"Records":[{archived}]}}"#))
                .await;
        }
    }
    wait_until(
        "the other table's messages to be counted and deleted",
        Duration::from_secs(90),
        || async { (moto.queue_depth(&queue_url).await == 10).then_some(()) },
    )
    .await;
    wait_until(
        "restarts of the broken accumulator",
        Duration::from_secs(30),
        || {
            let http = http.clone();
            async move { restarts(http).await.filter(|count| *count >= 2) }
        },
    )
    .await;

    std::fs::remove_file(&broken).unwrap();
    wait_until(
        "the broken table's messages to be counted and deleted",
        Duration::from_secs(120),
        || async { (moto.queue_depth(&queue_url).await == 0).then_some(()) },
    )
    .await;
    assert_eq!(moto.queue_depth(&dlq_url).await, 0);
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
    assert_eq!(icepack.pending_files(TABLE), 60, "each once");
    assert_eq!(
        icepack.pending_files(ARCHIVE),
        10,
        "each once, after the restarts"
    );
    let log = icepack.log(run);
    assert!(log.contains("a bug: a panic"), "{log}");
    assert!(log.contains("restarted from the stored state"), "{log}");
}
