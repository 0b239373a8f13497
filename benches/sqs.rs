//! Through a real SQS server: messages per second icepack's pollers consume (count, commit,
//! delete) from a queue on the local SQS server (moto, started here), beside a bare aws-sdk-sqs
//! ReceiveMessage + DeleteMessageBatch loop with the same concurrency on the same server, runs
//! alternating, median of the repeats.
//!
//!   cargo bench --bench sqs [-- --messages N --repeats N]
//!
//! Needs `moto_server` on PATH (installed by `make deps`) or ICEPACK_TEST_MOTO_SERVER.

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use futures::future::join_all;
use icepack::actors::poller::{PolledQueue, PollerSettings, SqsPoller};
use icepack::clock::SystemClock;
use icepack::config::Config;
use icepack::store::RocksStore;
use tokio::sync::{oneshot, watch};

use common::*;
use support::Moto;

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

async fn new_queue(client: &Client) -> String {
    client
        .create_queue()
        .queue_name(support::unique("bench"))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string()
}

/// icepack's pollers over a RocksDB-backed pipeline; seconds until `messages` are deleted.
async fn icepack_consume(moto: &Moto, queue_url: &str, messages: u64, pollers: usize) -> f64 {
    let work = tempfile::tempdir().unwrap();
    let config = Config::from_toml_str(&config_toml(100, "")).unwrap();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let pipeline = pipeline(&config, store, None);
    let queue: Arc<dyn icepack::queue::Queue> = Arc::new(moto.sqs_queue(queue_url).await);
    let health = icepack::queue::QueueHealth::named("bench");
    let (shutdown_sender, shutdown) = watch::channel(false);
    let mut stopped = Vec::new();
    let started = Instant::now();
    for _ in 0..pollers {
        let (sender, receiver) = oneshot::channel();
        stopped.push(receiver);
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
            sender,
            pipeline.metrics.clone(),
            Arc::new(SystemClock),
        ));
    }
    while health.messages_deleted.load(Ordering::Relaxed) < messages {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown_sender.send(true).unwrap();
    join_all(stopped).await;
    elapsed
}

/// The bare loop: receive up to 10, delete them in one batch; seconds until `messages` are gone.
async fn bare_consume(client: &Client, queue_url: &str, messages: u64, loops: usize) -> f64 {
    let deleted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    join_all((0..loops).map(|_| {
        let client = client.clone();
        let deleted = deleted.clone();
        let queue_url = queue_url.to_string();
        async move {
            while deleted.load(Ordering::Relaxed) < messages {
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
                deleted.fetch_add(count, Ordering::Relaxed);
            }
        }
    }))
    .await;
    started.elapsed().as_secs_f64()
}

fn main() {
    let full = full_run();
    let messages: u64 = arg("--messages")
        .map(|value| value.parse().expect("--messages N"))
        .unwrap_or(if full { 500 } else { 60 });
    let repeats: usize = arg("--repeats")
        .map(|value| value.parse().expect("--repeats N"))
        .unwrap_or(if full { 3 } else { 1 });
    let system = actix::System::new();
    system.block_on(async move {
        let moto = Moto::start().await;
        let client = moto.sqs().await;
        println!(
            "SQS consumption on moto: {messages} messages (one S3 record each), median of {repeats}, runs alternating"
        );
        println!(
            "{:>8} {:>15} {:>15} {:>9}",
            "pollers", "icepack msg/s", "bare msg/s", "ratio"
        );
        let mut offset = 0;
        for pollers in [1usize, 4] {
            let mut ours = Vec::new();
            let mut bare = Vec::new();
            let mut ratios = Vec::new();
            for _ in 0..repeats {
                // A fresh queue per run: a receive abandoned at a poller's stop may still take
                // messages sent after it (they come back after the visibility timeout).
                let queue_url = new_queue(&client).await;
                fill(&client, &queue_url, messages, offset).await;
                offset += messages;
                let icepack_rate =
                    messages as f64 / icepack_consume(&moto, &queue_url, messages, pollers).await;
                let queue_url = new_queue(&client).await;
                fill(&client, &queue_url, messages, offset).await;
                offset += messages;
                let bare_rate =
                    messages as f64 / bare_consume(&client, &queue_url, messages, pollers).await;
                ours.push(icepack_rate);
                bare.push(bare_rate);
                ratios.push(icepack_rate / bare_rate);
            }
            println!(
                "{:>8} {:>15.0} {:>15.0} {:>9.2}",
                pollers,
                median(&mut ours),
                median(&mut bare),
                median(&mut ratios)
            );
        }
    });
}
