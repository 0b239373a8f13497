use super::*;
use crate::base::clock::{Clock, FakeClock};
use crate::config::Config;
use crate::engine::spark::job::runner_from_config;
use crate::intake::queue::{FailedEntry, MemoryQueue, QueueError, ReceivedMessage};
use crate::runs::settings::CompactionSettings;
use crate::service::{start_pipeline, Compaction, Pipeline};
use crate::store::MemoryStore;
use async_trait::async_trait;
use std::time::Instant;
use tokio_util::task::TaskTracker;

fn body(keys: &[&str]) -> String {
    let records: Vec<String> = keys
            .iter()
            .map(|key| {
                format!(
                    r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"t/data/{key}","size":10}}}}}}"#
                )
            })
            .collect();
    format!(r#"{{"Records":[{}]}}"#, records.join(","))
}

fn pipeline(store: Arc<MemoryStore>) -> Pipeline {
    let config =
        Config::from_toml_str("[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\n")
            .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FakeClock::new(1_714_564_800_000));
    let settings = CompactionSettings::from_config(Arc::new(config.clone()));
    let runner = runner_from_config(&config);
    start_pipeline(
        config.table_specs(),
        store,
        clock,
        Compaction::spark(settings, runner, false),
        Arc::new(Metrics::default()),
        None,
    )
    .unwrap()
}

fn start_poller(
    queue: Arc<dyn Queue>,
    pipeline: &Pipeline,
) -> (Arc<QueueHealth>, CancellationToken, TaskTracker) {
    start_poller_with(
        queue,
        pipeline,
        PollerSettings {
            max_messages: 10,
            wait_time_seconds: 1,
            visibility_timeout_seconds: 30,
        },
        Arc::new(crate::base::clock::SystemClock),
    )
}

fn start_poller_with(
    queue: Arc<dyn Queue>,
    pipeline: &Pipeline,
    settings: PollerSettings,
    clock: Arc<dyn Clock>,
) -> (Arc<QueueHealth>, CancellationToken, TaskTracker) {
    let shutdown = CancellationToken::new();
    let stopped = TaskTracker::new();
    stopped.close();
    let health = QueueHealth::named("landing");
    let poller = SqsPoller::new(
        PolledQueue {
            queue,
            health: health.clone(),
        },
        pipeline.router.clone(),
        settings,
        shutdown.clone(),
        stopped.token(),
        pipeline.metrics.clone(),
        clock,
    );
    poller.start();
    (health, shutdown, stopped)
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn pending_files(pipeline: &Pipeline) -> u64 {
    pipeline.status().await.tables[0].pending_files
}

#[actix::test]
async fn counted_messages_are_deleted_and_invalid_ones_kept() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(MemoryQueue::new());
    let good = queue.push(body(&["a.parquet", "b.parquet"]));
    queue.push("garbage");
    let (health, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("the good message to be deleted", || {
        queue.deleted_ids() == vec![good.clone()]
    })
    .await;
    assert_eq!(pending_files(&pipeline).await, 2);
    assert_eq!(health.messages_invalid.load(Ordering::Relaxed), 1);
    assert_eq!(health.messages_received.load(Ordering::Relaxed), 2);
    assert!(health.last_receive_millis().is_some());
    assert_eq!(
        queue.num_in_flight(),
        1,
        "the invalid message waits for redelivery"
    );
    shutdown.cancel();
    stopped.wait().await;
    assert_eq!(health.pollers_lost(), 0, "stopped, not lost");
}

#[actix::test]
async fn a_failed_commit_deletes_nothing_and_redelivery_counts_once() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(MemoryQueue::new());
    queue.push(body(&["a.parquet", "b.parquet"]));
    store.fail_commits(true);
    let (_, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("a commit failure", || {
        pipeline.metrics.commit_failures.get() >= 1
    })
    .await;
    assert!(queue.deleted_ids().is_empty());
    assert_eq!(pending_files(&pipeline).await, 0);
    store.fail_commits(false);
    queue.expire_in_flight();
    wait_for("the redelivered message to be deleted", || {
        queue.deleted_ids().len() == 1
    })
    .await;
    assert_eq!(pending_files(&pipeline).await, 2);
    shutdown.cancel();
    stopped.wait().await;
}

/// Refuses to delete the first entry of every batch, as SQS does with a stale receipt handle.
struct RefusingFirstDelete(MemoryQueue);

#[async_trait]
impl Queue for RefusingFirstDelete {
    async fn receive(
        &self,
        max: i32,
        wait: i32,
        visibility: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.0.receive(max, wait, visibility).await
    }
    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        let mut failed = vec![FailedEntry {
            id: receipts[0].id.clone(),
            code: "ReceiptHandleIsInvalid".to_string(),
            message: "stale".to_string(),
        }];
        failed.extend(self.0.delete(&receipts[1..]).await?);
        Ok(failed)
    }
    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.0.extend_visibility(receipts, visibility).await
    }
}

#[actix::test]
async fn a_partially_failed_delete_is_counted_and_harmless() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(RefusingFirstDelete(MemoryQueue::new()));
    queue.0.push(body(&["a.parquet"]));
    queue.0.push(body(&["b.parquet"]));
    let (health, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("a refused delete", || {
        health.delete_failures.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(health.messages_deleted.load(Ordering::Relaxed), 1);
    assert_eq!(pending_files(&pipeline).await, 2);
    shutdown.cancel();
    stopped.wait().await;
    assert_eq!(
        store.num_commits(),
        1,
        "both messages were committed in one write"
    );
}

/// Deletes slowly, and notes whether a receive was in progress while a delete was.
#[derive(Default)]
struct SlowDelete {
    queue: MemoryQueue,
    deleting: std::sync::atomic::AtomicBool,
    receiving: std::sync::atomic::AtomicU32,
    received_while_deleting: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Queue for SlowDelete {
    async fn receive(
        &self,
        max: i32,
        wait: i32,
        visibility: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.receiving.fetch_add(1, Ordering::SeqCst);
        let received = self.queue.receive(max, wait, visibility).await;
        self.receiving.fetch_sub(1, Ordering::SeqCst);
        received
    }
    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        self.deleting.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        if self.receiving.load(Ordering::SeqCst) > 0 {
            self.received_while_deleting.store(true, Ordering::SeqCst);
        }
        let failed = self.queue.delete(receipts).await;
        self.deleting.store(false, Ordering::SeqCst);
        failed
    }
    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.queue.extend_visibility(receipts, visibility).await
    }
}

#[actix::test]
async fn the_next_receive_does_not_wait_for_the_delete_and_stopping_does() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(SlowDelete::default());
    queue.queue.push(body(&["a.parquet"]));
    let (_, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("a receive while the first batch is deleted", || {
        queue.received_while_deleting.load(Ordering::SeqCst)
    })
    .await;
    wait_for("the first delete", || queue.queue.deleted_ids().len() == 1).await;

    // A stop while a delete is in progress: the poller reports stopped only after it.
    queue.queue.push(body(&["b.parquet"]));
    wait_for("the second delete to begin", || {
        queue.deleting.load(Ordering::SeqCst)
    })
    .await;
    shutdown.cancel();
    stopped.wait().await;
    assert_eq!(
        queue.queue.deleted_ids().len(),
        2,
        "deleted before stopping"
    );
    assert_eq!(pending_files(&pipeline).await, 2);
}

#[actix::test]
async fn the_next_batch_is_received_while_one_is_counted() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(MemoryQueue::new());
    store.hold_commits(true);
    queue.push(body(&["a.parquet"]));
    let (health, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("the first batch's commit", || store.num_held_commits() == 1).await;

    // The first batch is in its commit: the poller receives the next one meanwhile.
    queue.push(body(&["b.parquet"]));
    wait_for("the second batch received", || {
        health.messages_received.load(Ordering::Relaxed) == 2
    })
    .await;
    assert_eq!(
        store.num_commits(),
        0,
        "the first batch is still being counted"
    );
    assert!(
        queue.deleted_ids().is_empty(),
        "nothing deleted before its commit"
    );

    // A stop while both are in flight: the poller reports stopped once both are deleted.
    shutdown.cancel();
    store.hold_commits(false);
    stopped.wait().await;
    assert_eq!(queue.deleted_ids().len(), 2, "deleted before stopping");
    assert_eq!(pending_files(&pipeline).await, 2);
}

#[actix::test]
async fn receive_errors_back_off() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store);
    let queue = Arc::new(MemoryQueue::new());
    queue.fail_next_receives(2);
    queue.push(body(&["a.parquet"]));
    let started = Instant::now();
    let (health, shutdown, stopped) = start_poller(queue.clone(), &pipeline);
    wait_for("the message after two failures", || {
        queue.deleted_ids().len() == 1
    })
    .await;
    assert_eq!(health.errors("ReceiveMessage"), 2);
    assert_eq!(
        health.last_error().map(|error| error.message),
        Some("injected failure".to_string())
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "two back-offs of at least 0.5 s each"
    );
    shutdown.cancel();
    stopped.wait().await;
}

fn long_polling() -> PollerSettings {
    PollerSettings {
        max_messages: 10,
        wait_time_seconds: 20,
        visibility_timeout_seconds: 30,
    }
}

fn paused_clock() -> Arc<dyn Clock> {
    Arc::new(crate::base::clock::TokioClock::starting_at(
        1_714_564_800_000,
    ))
}

#[test]
fn failures_back_off_longer_each_time_and_anything_else_starts_afresh() {
    let mut backoff = receive_backoff();
    for attempt in 0..10 {
        let pause = pause_before_next_cycle(CycleOutcome::Failed, long_polling(), &mut backoff);
        assert!(
            pause >= Duration::from_millis(500) && pause <= backoff.ceiling(attempt),
            "attempt {attempt}: {pause:?}"
        );
    }
    assert_eq!(
        backoff.ceiling(10),
        Duration::from_secs(60),
        "a minute at most"
    );
    for outcome in [
        CycleOutcome::Processed,
        CycleOutcome::StoreRefused,
        CycleOutcome::Empty,
    ] {
        pause_before_next_cycle(CycleOutcome::Failed, long_polling(), &mut backoff);
        assert_eq!(
            pause_before_next_cycle(outcome, long_polling(), &mut backoff),
            Duration::ZERO,
            "{outcome:?}: at once"
        );
        assert_eq!(backoff.attempts(), 0, "{outcome:?} resets the back-off");
    }
    let short_polling = PollerSettings {
        wait_time_seconds: 0,
        ..long_polling()
    };
    assert_eq!(
        pause_before_next_cycle(CycleOutcome::Empty, short_polling, &mut backoff),
        SHORT_POLL_PAUSE,
        "short polling that found nothing does not spin"
    );
}

/// Receives fail, the poller backs off; the shutdown during a back-off stops it at once, on
/// tokio's paused clock: the stop takes no time at all, where waiting the back-off out took
/// what was left of it (never less than half a second).
#[actix::test]
async fn a_shutdown_during_a_back_off_ends_it_at_once() {
    tokio::time::pause();
    let pipeline = pipeline(Arc::new(MemoryStore::new()));
    let queue = Arc::new(MemoryQueue::new());
    queue.fail_next_receives(u32::MAX);
    let (health, shutdown, stopped) =
        start_poller_with(queue.clone(), &pipeline, long_polling(), paused_clock());
    // After the fourth failure the poller waits between half a second and 8 s.
    wait_for("four failed receives", || {
        health.errors("ReceiveMessage") == 4
    })
    .await;
    let asked = tokio::time::Instant::now();
    shutdown.cancel();
    stopped.wait().await;
    assert!(
        asked.elapsed() < Duration::from_millis(50),
        "stopped {:?} after the shutdown: the back-off was waited out",
        asked.elapsed()
    );
    assert_eq!(health.errors("ReceiveMessage"), 4, "no receive after it");
    assert_eq!(health.pollers_lost(), 0, "stopped, not lost");
}

/// A 20 s long poll on an empty queue is abandoned at the shutdown (its messages, had any
/// come, would have stayed in the queue); the batch received before it was counted and
/// deleted.
#[actix::test]
async fn a_shutdown_during_a_long_poll_ends_it_at_once() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(MemoryQueue::new());
    let first = queue.push(body(&["a.parquet"]));
    let (_, shutdown, stopped) =
        start_poller_with(queue.clone(), &pipeline, long_polling(), paused_clock());
    wait_for("the first batch to be deleted", || {
        queue.deleted_ids() == vec![first.clone()]
    })
    .await;
    // Nothing else comes: the next receive waits for messages, 20 s at a time.
    let asked = tokio::time::Instant::now();
    shutdown.cancel();
    stopped.wait().await;
    assert!(
        asked.elapsed() < Duration::from_millis(50),
        "stopped {:?} after the shutdown: the long poll was waited out",
        asked.elapsed()
    );
    assert_eq!(pending_files(&pipeline).await, 1);
}

/// A batch arrives at the very moment the shutdown comes (the receive and the shutdown are
/// ready together): it is counted and deleted before the poller stops, not left to come
/// back after its visibility timeout.
struct ArrivingWithTheShutdown {
    queue: MemoryQueue,
    shutdown: CancellationToken,
    receiving: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Queue for ArrivingWithTheShutdown {
    async fn receive(
        &self,
        max: i32,
        _wait: i32,
        visibility: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.receiving.store(true, Ordering::SeqCst);
        self.shutdown.cancelled().await;
        self.queue.receive(max, 0, visibility).await
    }
    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        self.queue.delete(receipts).await
    }
    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.queue.extend_visibility(receipts, visibility).await
    }
}

#[actix::test]
async fn a_batch_received_as_the_shutdown_comes_is_counted_and_deleted() {
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let shutdown = CancellationToken::new();
    let queue = Arc::new(ArrivingWithTheShutdown {
        queue: MemoryQueue::new(),
        shutdown: shutdown.clone(),
        receiving: Default::default(),
    });
    let id = queue.queue.push(body(&["a.parquet", "b.parquet"]));
    let stopped = TaskTracker::new();
    stopped.close();
    SqsPoller::new(
        PolledQueue {
            queue: queue.clone(),
            health: QueueHealth::named("landing"),
        },
        pipeline.router.clone(),
        long_polling(),
        shutdown.clone(),
        stopped.token(),
        pipeline.metrics.clone(),
        Arc::new(crate::base::clock::SystemClock),
    )
    .start();
    wait_for("the receive", || queue.receiving.load(Ordering::SeqCst)).await;
    shutdown.cancel();
    stopped.wait().await;
    assert_eq!(
        queue.queue.deleted_ids(),
        vec![id],
        "deleted before stopping"
    );
    assert_eq!(pending_files(&pipeline).await, 2);
}

/// Never answers a delete, as a server that takes connections and hangs.
struct HangingDelete(MemoryQueue);

#[async_trait]
impl Queue for HangingDelete {
    async fn receive(
        &self,
        max: i32,
        wait: i32,
        visibility: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.0.receive(max, wait, visibility).await
    }
    async fn delete(&self, _: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        std::future::pending().await
    }
    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.0.extend_visibility(receipts, visibility).await
    }
}

/// The batch is committed, its delete hangs, the shutdown comes: the poller gives the delete
/// its grace and stops; the message stays in the queue (counted, it is a duplicate when it
/// comes back).
#[actix::test]
async fn a_delete_the_queue_does_not_answer_holds_the_stop_up_for_its_grace_only() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::new());
    let pipeline = pipeline(store.clone());
    let queue = Arc::new(HangingDelete(MemoryQueue::new()));
    queue.0.push(body(&["a.parquet"]));
    let (health, shutdown, stopped) =
        start_poller_with(queue.clone(), &pipeline, long_polling(), paused_clock());
    wait_for("the batch's commit", || store.num_commits() == 1).await;
    let asked = tokio::time::Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(600), stopped.wait())
        .await
        .expect("the stop does not wait for a delete that never ends");
    assert!(
        asked.elapsed() <= QUEUE_GRACE_AFTER_SHUTDOWN + Duration::from_millis(50),
        "stopped {:?} after the shutdown",
        asked.elapsed()
    );
    assert!(queue.0.deleted_ids().is_empty());
    assert_eq!(health.delete_failures.load(Ordering::Relaxed), 1);
    assert_eq!(pending_files(&pipeline).await, 1);
}

/// A bug in the queue client: every receive panics.
struct PanickingQueue;

#[async_trait]
impl Queue for PanickingQueue {
    async fn receive(&self, _: i32, _: i32, _: i32) -> Result<Vec<ReceivedMessage>, QueueError> {
        panic!("a bug in the queue client")
    }
    async fn delete(&self, _: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        Ok(Vec::new())
    }
    async fn extend_visibility(
        &self,
        _: &[Receipt],
        _: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        Ok(Vec::new())
    }
}

#[actix::test]
async fn a_poller_that_panics_is_counted_as_lost() {
    let pipeline = pipeline(Arc::new(MemoryStore::new()));
    let (health, _shutdown, stopped) = start_poller(Arc::new(PanickingQueue), &pipeline);
    // actix stops an actor whose task panicked as it drops it: `stopped` runs.
    stopped.wait().await;
    assert_eq!(health.pollers_lost(), 1);
}
