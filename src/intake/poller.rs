//! The SQS poller actor: receives batches, hands them to the intake router, and deletes a message
//! only once the router reports its effects durable. Errors back off exponentially; nothing here
//! crashes the process. While the state store refuses writes the poller does not receive at all:
//! a message received then could only come back, one receive closer to the dead-letter queue.
//! What a poller sees of its queue (receives, deletes, failed calls, the last success and error)
//! goes to the queue's [`QueueHealth`], which `/metrics` and `/readyz` read by queue.
//!
//! A batch's delete runs beside the next receive: once a batch is durable, deleting it is the
//! only work left for it, so the poller does not wait for the round trip before receiving again.
//! At most one delete is outstanding per poller (the next batch's delete waits for it), a failed
//! one makes the next cycle back off, and the poller stops only after it has finished.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler,
    Message, WrapFuture,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, error, info, warn};

use crate::base::backoff::Backoff;
use crate::base::clock::Clock;
use crate::base::failpoint;
use crate::intake::batch::{InboundMessage, Verdict};
use crate::intake::queue::{Queue, QueueHealth, Receipt};
use crate::intake::router::IntakeRouter;
use crate::messages::{Ingest, IntakeError};
use crate::ops::metrics::Metrics;

/// How the poller talks to its queue.
#[derive(Debug, Clone, Copy)]
pub struct PollerSettings {
    pub max_messages: i32,
    pub wait_time_seconds: i32,
    pub visibility_timeout_seconds: i32,
}

/// A queue and where its pollers report on it.
#[derive(Clone)]
pub struct PolledQueue {
    pub queue: Arc<dyn Queue>,
    pub health: Arc<QueueHealth>,
}

pub struct SqsPoller {
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    backoff: Backoff,
    /// Held while the poller runs: its queue's tracker waits for every poller's to be dropped.
    running: Option<TaskTrackerToken>,
    /// The last batch's delete, running beside the next receive.
    deleting: Option<Deleting>,
}

/// A batch's delete in progress; it resolves to whether every call succeeded.
type Deleting = tokio::task::JoinHandle<bool>;

impl SqsPoller {
    pub fn new(
        polled: PolledQueue,
        router: Addr<IntakeRouter>,
        settings: PollerSettings,
        shutdown: CancellationToken,
        running: TaskTrackerToken,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        SqsPoller {
            polled,
            router,
            settings,
            shutdown,
            metrics,
            clock,
            backoff: Backoff::jittered(Duration::from_secs(1), Duration::from_secs(60)),
            running: Some(running),
            deleting: None,
        }
    }

    /// Stops once the outstanding delete (if any) has finished: a counted message is deleted
    /// before the poller reports itself stopped.
    fn stop_after_delete(&mut self, ctx: &mut Context<Self>) {
        match self.deleting.take() {
            Some(deleting) => {
                ctx.wait(
                    async move {
                        let _ = deleting.await;
                    }
                    .into_actor(self)
                    .map(|_, _, ctx| ctx.stop()),
                );
            }
            None => ctx.stop(),
        }
    }

    fn after_cycle(&mut self, outcome: CycleOutcome, ctx: &mut Context<Self>) {
        if self.shutdown.is_cancelled() || outcome == CycleOutcome::ShuttingDown {
            self.stop_after_delete(ctx);
            return;
        }
        match outcome {
            CycleOutcome::Processed | CycleOutcome::StoreRefused => {
                self.backoff.reset();
                ctx.notify(PollOnce);
            }
            CycleOutcome::Empty => {
                self.backoff.reset();
                if self.settings.wait_time_seconds == 0 {
                    // Short polling with nothing to do: do not spin.
                    ctx.notify_later(PollOnce, Duration::from_secs(1));
                } else {
                    ctx.notify(PollOnce);
                }
            }
            CycleOutcome::Failed => {
                let delay = self.backoff.next_delay();
                warn!(
                    queue = %self.polled.health.label(),
                    attempt = self.backoff.attempts(),
                    delay_ms = delay.as_millis() as u64,
                    "backing off before polling again"
                );
                ctx.notify_later(PollOnce, delay);
            }
            CycleOutcome::ShuttingDown => unreachable!("handled above"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CycleOutcome {
    Processed,
    /// The batch was not counted because the store refuses writes: the next cycle waits for it.
    StoreRefused,
    Empty,
    Failed,
    ShuttingDown,
}

#[derive(Debug, Message)]
#[rtype(result = "()")]
struct PollOnce;

impl Actor for SqsPoller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        info!(
            queue = %self.polled.health.label(),
            max_messages = self.settings.max_messages,
            wait_time_seconds = self.settings.wait_time_seconds,
            "polling the queue"
        );
        ctx.notify(PollOnce);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        info!(queue = %self.polled.health.label(), "poller stopped");
        self.running.take();
    }
}

/// A poller dropped while nobody stopped its queue has panicked: its queue is polled by one
/// poller less, and `/readyz` says so.
impl Drop for SqsPoller {
    fn drop(&mut self) {
        if !self.shutdown.is_cancelled() {
            error!(queue = %self.polled.health.label(), "a poller stopped unexpectedly");
            self.polled.health.poller_lost();
        }
    }
}

impl Handler<PollOnce> for SqsPoller {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _message: PollOnce, _ctx: &mut Context<Self>) -> Self::Result {
        let cycle = poll_cycle(
            self.polled.clone(),
            self.router.clone(),
            self.settings,
            self.shutdown.clone(),
            self.metrics.clone(),
            self.clock.clone(),
            self.deleting.take(),
        );
        AtomicResponse::new(Box::pin(cycle.into_actor(self).map(
            |(outcome, deleting), poller, ctx| {
                poller.deleting = deleting;
                poller.after_cycle(outcome, ctx)
            },
        )))
    }
}

/// One receive → ingest → delete round; the delete is left running (returned), and the previous
/// round's (`previous`) is waited for before this one's starts.
async fn poll_cycle(
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    previous: Option<Deleting>,
) -> (CycleOutcome, Option<Deleting>) {
    let counted = receive_and_count(
        polled.clone(),
        router,
        settings,
        shutdown,
        metrics,
        clock.clone(),
    )
    .await;
    let deletable = match counted {
        Counted::Deletable(receipts) => receipts,
        Counted::Done(outcome) => return (outcome, previous),
    };
    // One delete outstanding: the previous batch's finishes before this one's starts.
    let previous_deleted = match previous {
        Some(previous) => previous.await.unwrap_or(false),
        None => true,
    };
    let outcome = if previous_deleted {
        CycleOutcome::Processed
    } else {
        CycleOutcome::Failed
    };
    let deleting =
        (!deletable.is_empty()).then(|| actix::spawn(delete_counted(polled, clock, deletable)));
    (outcome, deleting)
}

/// What counting a batch leaves: receipts to delete, or the cycle's outcome.
enum Counted {
    Deletable(Vec<Receipt>),
    Done(CycleOutcome),
}

/// Receive, then count durably: what may be deleted.
async fn receive_and_count(
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
) -> Counted {
    use Counted::Done;
    if shutdown.is_cancelled() {
        return Done(CycleOutcome::ShuttingDown);
    }
    let PolledQueue { queue, health } = polled;
    if !metrics.store.is_writable() {
        info!("the state store refuses writes: receiving is paused");
        tokio::select! {
            _ = metrics.store.writable() => info!("the state store takes writes again: receiving resumes"),
            _ = shutdown.cancelled() => return Done(CycleOutcome::ShuttingDown),
        }
    }
    let received = tokio::select! {
        received = queue.receive(settings.max_messages, settings.wait_time_seconds, settings.visibility_timeout_seconds) => received,
        // Nothing received yet is lost by abandoning the call: messages stay in the queue.
        _ = shutdown.cancelled() => return Done(CycleOutcome::ShuttingDown),
    };
    let messages = match received {
        Ok(messages) => messages,
        Err(error) => {
            health.failed(&error, clock.now_millis());
            warn!(queue = %health.label(), %error, "cannot receive from the queue");
            return Done(CycleOutcome::Failed);
        }
    };
    health.received(messages.len(), clock.now_millis());
    if messages.is_empty() {
        return Done(CycleOutcome::Empty);
    }
    let receipts: Vec<Receipt> = messages.iter().map(Receipt::from).collect();
    let inbound: Vec<InboundMessage> = messages
        .iter()
        .map(|message| InboundMessage {
            id: message.id.clone(),
            body: message.body.clone(),
        })
        .collect();

    // Keep the batch hidden while it is being counted, however long the commit takes.
    let extend_every = Duration::from_secs((settings.visibility_timeout_seconds as u64 / 2).max(1));
    let ingest = router.send(Ingest { messages: inbound });
    tokio::pin!(ingest);
    let report = loop {
        tokio::select! {
            report = &mut ingest => break report,
            _ = tokio::time::sleep(extend_every) => {
                match queue.extend_visibility(&receipts, settings.visibility_timeout_seconds).await {
                    Ok(failed) if failed.is_empty() => debug!(num_messages = receipts.len(), "extended visibility"),
                    Ok(failed) => warn!(queue = %health.label(), num_failed = failed.len(), "cannot extend visibility of some messages; they may be redelivered and will not be counted twice"),
                    Err(error) => {
                        health.failed(&error, clock.now_millis());
                        warn!(queue = %health.label(), %error, "cannot extend visibility; messages may be redelivered and will not be counted twice")
                    }
                }
            }
        }
    };
    let report = match report {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => {
            error!(%error, num_messages = receipts.len(), "cannot count the batch durably; no message of it is deleted");
            if !metrics.store.is_writable() {
                return Done(CycleOutcome::StoreRefused);
            }
            // One table's accumulator is being restarted: the batch comes back after its
            // visibility timeout; no reason to hold up the other tables' messages.
            if matches!(error, IntakeError::AccumulatorGone(_)) {
                return Done(CycleOutcome::Processed);
            }
            return Done(CycleOutcome::Failed);
        }
        Err(error) => {
            error!(%error, "intake router unavailable; no message deleted");
            return Done(CycleOutcome::Failed);
        }
    };

    failpoint::crash_point!("poller.before_delete");
    let mut deletable = Vec::new();
    for ((message, receipt), verdict) in messages.iter().zip(receipts).zip(&report.verdicts) {
        match verdict {
            Verdict::Delete => deletable.push(receipt),
            Verdict::Keep { error } => {
                health.messages_invalid.fetch_add(1, Ordering::Relaxed);
                warn!(
                    queue = %health.label(),
                    message_id = %message.id,
                    receive_count = message.receive_count,
                    %error,
                    "invalid message left in the queue; its redrive policy moves it to the dead-letter queue"
                );
            }
        }
    }
    debug!(
        messages = report.summary.messages,
        counted = report.summary.counted,
        "batch counted"
    );
    Counted::Deletable(deletable)
}

/// Deletes counted messages, ten a call; whether every call went through.
async fn delete_counted(
    polled: PolledQueue,
    clock: Arc<dyn Clock>,
    deletable: Vec<Receipt>,
) -> bool {
    let PolledQueue { queue, health } = polled;
    let mut ok = true;
    for chunk in deletable.chunks(10) {
        match queue.delete(chunk).await {
            Ok(failed) => {
                health
                    .messages_deleted
                    .fetch_add((chunk.len() - failed.len()) as u64, Ordering::Relaxed);
                for entry in failed {
                    health.delete_failures.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        queue = %health.label(),
                        message_id = %entry.id,
                        code = %entry.code,
                        reason = %entry.message,
                        "queue refused to delete a counted message; a redelivery will not be counted twice"
                    );
                }
            }
            Err(error) => {
                health
                    .delete_failures
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                health.failed(&error, clock.now_millis());
                warn!(queue = %health.label(), %error, "cannot delete counted messages; a redelivery will not be counted twice");
                ok = false;
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
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
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\n",
        )
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
            PollerSettings {
                max_messages: 10,
                wait_time_seconds: 1,
                visibility_timeout_seconds: 30,
            },
            shutdown.clone(),
            stopped.token(),
            pipeline.metrics.clone(),
            Arc::new(crate::base::clock::SystemClock),
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

    /// A bug in the queue client: every receive panics.
    struct PanickingQueue;

    #[async_trait]
    impl Queue for PanickingQueue {
        async fn receive(
            &self,
            _: i32,
            _: i32,
            _: i32,
        ) -> Result<Vec<ReceivedMessage>, QueueError> {
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
}
