//! Through a real SQS server: messages per second icepack's pollers consume (count, commit,
//! delete) from a queue on a local SQS server (moto and/or ElasticMQ, started here), beside a
//! bare aws-sdk-sqs ReceiveMessage + DeleteMessageBatch loop with the same concurrency on the
//! same server, runs alternating, median of the repeats.
//!
//!   cargo bench --bench sqs [-- --server moto|elasticmq|both --messages N --repeats N --rtt-ms N
//!                               --pollers 1,2,4 --side both|icepack|bare]
//!
//! Needs `moto_server` on PATH (installed by `make deps`) or ICEPACK_TEST_MOTO_SERVER; ElasticMQ
//! needs ICEPACK_TEST_ELASTICMQ_CLASSPATH (`deploy/local/elasticmq.sh --env`, exported). The
//! default is both servers when that is set, moto alone otherwise. `--messages` defaults to 500
//! on moto and 5,000 on ElasticMQ (which is faster); ElasticMQ's JVM is warmed up first by one
//! unmeasured bare run. `--rtt-ms N` adds N ms before every SQS call of both sides (a server
//! across a network). `--side icepack` runs icepack's pollers alone (no ratio): what to run
//! under `perf record` to see where icepack's time goes.

mod common;
#[path = "../tests/integration/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use futures::future::join_all;
use icepack::base::clock::SystemClock;
use icepack::config::Config;
use icepack::intake::poller::{PolledQueue, PollerSettings, SqsPoller};
use icepack::intake::queue::{FailedEntry, Queue, QueueError, Receipt, ReceivedMessage};
use icepack::store::RocksStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use common::*;
use support::elasticmq::DEFAULT_JAVA_OPTIONS;
use support::{ElasticMq, Moto, QueueServer, SqsEndpoint};

async fn fill(client: &Client, queue_url: &str, messages: u64, offset: u64) {
    let chunks: Vec<u64> = (0..messages.div_ceil(10)).collect();
    for group in chunks.chunks(16) {
        join_all(group.iter().map(|chunk| {
            let entries: Vec<SendMessageBatchRequestEntry> = (0..10)
                .map(|n| chunk * 10 + n)
                .filter(|n| *n < messages)
                .map(|n| {
                    SendMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .message_body(format!(
                            r#"{{"Records":[{}]}}"#,
                            s3_record((n % 100) as usize, offset + n, 1024)
                        ))
                        .build()
                        .unwrap()
                })
                .collect();
            client
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
        }))
        .await
        .into_iter()
        .for_each(|sent| {
            sent.unwrap();
        });
    }
}

/// icepack's queue with the time its pollers spend inside SQS calls added up: the rest of a
/// cycle is icepack's own (count, synced commit, actor hops).
struct TimedQueue {
    queue: icepack::intake::queue::SqsQueue,
    nanos_in_calls: Arc<AtomicU64>,
}

/// A round trip added before every SQS call of both sides (`--rtt-ms`), to stand for a server
/// across a network (SQS in a region answers in milliseconds, a local server in microseconds).
static ADDED_RTT_MILLIS: AtomicU64 = AtomicU64::new(0);

async fn network_round_trip() {
    let millis = ADDED_RTT_MILLIS.load(Ordering::Relaxed);
    if millis > 0 {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
}

impl TimedQueue {
    async fn timed<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let started = Instant::now();
        network_round_trip().await;
        let result = call.await;
        self.nanos_in_calls
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }
}

#[async_trait::async_trait]
impl Queue for TimedQueue {
    async fn receive(
        &self,
        max_messages: i32,
        wait_time_seconds: i32,
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.timed(
            self.queue
                .receive(max_messages, wait_time_seconds, visibility_timeout_seconds),
        )
        .await
    }

    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        self.timed(self.queue.delete(receipts)).await
    }

    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.timed(
            self.queue
                .extend_visibility(receipts, visibility_timeout_seconds),
        )
        .await
    }
}

/// CPU seconds this process has used (user + system), all threads.
fn process_cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// icepack's pollers over a RocksDB-backed pipeline; seconds until `messages` are deleted, and
/// the share of the pollers' time spent inside SQS calls.
async fn icepack_consume(
    server: &SqsEndpoint,
    queue_url: &str,
    messages: u64,
    pollers: usize,
) -> (f64, f64) {
    let work = tempfile::tempdir().unwrap();
    let config = Config::from_toml_str(&config_toml(100, "")).unwrap();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let pipeline = pipeline(&config, store, None);
    let nanos_in_calls = Arc::new(AtomicU64::new(0));
    let queue: Arc<dyn Queue> = Arc::new(TimedQueue {
        queue: server.sqs_queue(queue_url).await,
        nanos_in_calls: nanos_in_calls.clone(),
    });
    let health = icepack::intake::queue::QueueHealth::named("bench");
    let shutdown = CancellationToken::new();
    let stopped = TaskTracker::new();
    stopped.close();
    let started = Instant::now();
    for _ in 0..pollers {
        actix::Actor::start(SqsPoller::new(
            PolledQueue {
                queue: queue.clone(),
                health: health.clone(),
            },
            pipeline.router.clone(),
            PollerSettings {
                max_messages: 10,
                wait_time_seconds: 1,
                visibility_timeout_seconds: 60,
            },
            shutdown.clone(),
            stopped.token(),
            pipeline.metrics.clone(),
            Arc::new(SystemClock),
        ));
    }
    while health.messages_deleted.load(Ordering::Relaxed) < messages {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let in_calls = nanos_in_calls.load(Ordering::Relaxed) as f64 / 1e9 / (elapsed * pollers as f64);
    shutdown.cancel();
    stopped.wait().await;
    (elapsed, in_calls.min(1.0))
}

/// The bare loop: receive up to 10, delete them in one batch; seconds until `messages` are gone
/// (taken when the last delete returns, as for icepack: not when every loop's last long poll of
/// an empty queue has timed out too, which would add up to a wait time to the figure).
async fn bare_consume(client: &Client, queue_url: &str, messages: u64, loops: usize) -> f64 {
    let deleted = Arc::new(AtomicU64::new(0));
    let finished_nanos = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    join_all((0..loops).map(|_| {
        let client = client.clone();
        let deleted = deleted.clone();
        let finished_nanos = finished_nanos.clone();
        let queue_url = queue_url.to_string();
        async move {
            while deleted.load(Ordering::Relaxed) < messages {
                network_round_trip().await;
                let received = client
                    .receive_message()
                    .queue_url(&queue_url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1)
                    .visibility_timeout(60)
                    .send()
                    .await
                    .unwrap();
                let entries: Vec<DeleteMessageBatchRequestEntry> = received
                    .messages()
                    .iter()
                    .enumerate()
                    .map(|(n, message)| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .receipt_handle(message.receipt_handle().unwrap())
                            .build()
                            .unwrap()
                    })
                    .collect();
                if entries.is_empty() {
                    continue;
                }
                let count = entries.len() as u64;
                network_round_trip().await;
                let answer = client
                    .delete_message_batch()
                    .queue_url(&queue_url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .unwrap();
                let failed = answer.failed().len() as u64;
                assert_eq!(
                    failed,
                    0,
                    "the server refused deletes: {:?}",
                    answer.failed()
                );
                if deleted.fetch_add(count, Ordering::Relaxed) + count >= messages {
                    finished_nanos
                        .fetch_max(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
            }
        }
    }))
    .await;
    finished_nanos.load(Ordering::Relaxed) as f64 / 1e9
}

/// icepack's pollers and the bare loop (or one side, `--side`) with each count of `--pollers`
/// (1, 2 and 4) on `server`, alternating; prints the medians.
async fn compare(server: &SqsEndpoint, name: &str, messages: u64, repeats: usize, warm_up: bool) {
    let (icepack_side, bare_side) = match arg("--side").as_deref() {
        None | Some("both") => (true, true),
        Some("icepack") => (true, false),
        Some("bare") => (false, true),
        Some(other) => panic!("--side both|icepack|bare, not {other}"),
    };
    let poller_counts: Vec<usize> = arg("--pollers")
        .map(|list| {
            list.split(',')
                .map(|count| count.parse().expect("--pollers 1,2,4"))
                .collect()
        })
        .unwrap_or_else(|| vec![1, 2, 4]);
    let client = server.sqs().await;
    let mut offset = 0;
    if warm_up {
        let queue_url = server.create_queue(&support::unique("bench")).await;
        fill(&client, &queue_url, messages, offset).await;
        offset += messages;
        bare_consume(&client, &queue_url, messages, 4).await;
    }
    let rtt = ADDED_RTT_MILLIS.load(Ordering::Relaxed);
    println!(
        "SQS consumption on {name}: {messages} messages (one S3 record each), median of {repeats}, runs alternating{}",
        if rtt > 0 { format!(", {rtt} ms added before every call") } else { String::new() }
    );
    println!(
        "{:>8} {:>15} {:>15} {:>9} {:>14} {:>13} {:>10}",
        "pollers",
        "icepack msg/s",
        "bare msg/s",
        "ratio",
        "in SQS calls",
        "icepack CPU",
        "bare CPU"
    );
    for pollers in poller_counts {
        let mut ours = Vec::new();
        let mut bare = Vec::new();
        let mut ratios = Vec::new();
        let mut in_calls = Vec::new();
        let mut our_cpu = Vec::new();
        let mut bare_cpu = Vec::new();
        for _ in 0..repeats {
            // A fresh queue per run: a receive abandoned at a poller's stop may still take
            // messages sent after it (they come back after the visibility timeout).
            let mut icepack_rate = f64::NAN;
            if icepack_side {
                let queue_url = server.create_queue(&support::unique("bench")).await;
                fill(&client, &queue_url, messages, offset).await;
                offset += messages;
                let cpu = process_cpu_seconds();
                let (seconds, share) = icepack_consume(server, &queue_url, messages, pollers).await;
                our_cpu.push((process_cpu_seconds() - cpu) / seconds);
                icepack_rate = messages as f64 / seconds;
                in_calls.push(share);
                ours.push(icepack_rate);
            }
            if bare_side {
                let queue_url = server.create_queue(&support::unique("bench")).await;
                fill(&client, &queue_url, messages, offset).await;
                offset += messages;
                let cpu = process_cpu_seconds();
                let seconds = bare_consume(&client, &queue_url, messages, pollers).await;
                bare_cpu.push((process_cpu_seconds() - cpu) / seconds);
                let bare_rate = messages as f64 / seconds;
                bare.push(bare_rate);
                if icepack_side {
                    ratios.push(icepack_rate / bare_rate);
                }
            }
        }
        println!(
            "{:>8} {:>15.0} {:>15.0} {:>9.2} {:>13.0}% {:>13.2} {:>10.2}",
            pollers,
            median(&mut ours),
            median(&mut bare),
            median(&mut ratios),
            median(&mut in_calls) * 100.0,
            median(&mut our_cpu),
            median(&mut bare_cpu)
        );
    }
}

fn main() {
    let full = full_run();
    let messages: Option<u64> = arg("--messages").map(|value| value.parse().expect("--messages N"));
    let repeats: usize = arg("--repeats")
        .map(|value| value.parse().expect("--repeats N"))
        .unwrap_or(if full { 3 } else { 1 });
    let (on_moto, on_elasticmq) = match arg("--server").as_deref() {
        Some("moto") => (true, false),
        Some("elasticmq") => (false, true),
        Some("both") => (true, true),
        Some(other) => panic!("--server moto|elasticmq|both, not {other}"),
        None => (true, ElasticMq::available("the SQS benchmark")),
    };
    if let Some(rtt) = arg("--rtt-ms") {
        ADDED_RTT_MILLIS.store(rtt.parse().expect("--rtt-ms N"), Ordering::Relaxed);
    }
    let system = actix::System::new();
    system.block_on(async move {
        if on_moto {
            let moto = Moto::start().await;
            let messages = messages.unwrap_or(if full { 500 } else { 60 });
            compare(&moto, Moto::NAME, messages, repeats, false).await;
        }
        if on_elasticmq {
            let elasticmq =
                ElasticMq::start_with_java_options(support::free_port(), DEFAULT_JAVA_OPTIONS)
                    .await;
            let messages = messages.unwrap_or(if full { 5_000 } else { 60 });
            compare(&elasticmq, ElasticMq::NAME, messages, repeats, full).await;
        }
    });
}
