//! The SQS poller actor: receives batches, hands them to the intake router, and deletes a message
//! only once the router reports its effects durable. Errors back off exponentially; nothing here
//! crashes the process. While the state store refuses writes the poller does not receive at all:
//! a message received then could only come back, one receive closer to the dead-letter queue.
//! What a poller sees of its queue (receives, deletes, failed calls, the last success and error)
//! goes to the queue's [`QueueHealth`], which `/metrics` and `/readyz` read by queue.
//!
//! A poller is a pipeline: once a batch is received it is handed on — counted durably, then
//! deleted — and the poller receives the next one while that goes on. Against a server that
//! answers in a millisecond, the commit's fsync and the delete's round trip would otherwise sit
//! between every two receives. At most [`BATCHES_IN_FLIGHT`] batches of a poller are being
//! counted or deleted at once (the receive waits for the oldest beyond that); batches counted
//! together share one commit (the router's group commit). A batch that fails to count or
//! delete makes the next cycle back off, and the poller stops only after every batch it handed
//! on has finished, so a counted message is deleted before the poller reports itself stopped.

use std::collections::VecDeque;
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
use crate::intake::queue::{Queue, QueueHealth, Receipt, ReceivedMessage};
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
    /// Batches handed on, oldest first, being counted and then deleted beside the next receive.
    in_flight: VecDeque<InFlight>,
}

/// How many received batches of one poller may be counted or deleted at once. Batches counted
/// together share the router's group commit, and the deletes of earlier batches run beside, so
/// a poller's cycle is about its receive instead of receive + commit + delete. Four keeps the
/// commit and the deletes fed against a server that answers in a millisecond (BENCHMARKS.md §2:
/// 0.67–0.88 of the bare loop on a local ElasticMQ, against 0.63–0.69 with two and 0.56–0.67
/// with none). Each holds at most `max_messages` messages, invisible (their visibility
/// extended) until they are deleted.
pub const BATCHES_IN_FLIGHT: usize = 4;

/// A batch being counted and then deleted; it resolves to what the next cycle does about it.
type InFlight = tokio::task::JoinHandle<CycleOutcome>;

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
            in_flight: VecDeque::new(),
        }
    }

    /// Stops once every batch handed on has been counted and deleted (or has failed): a counted
    /// message is deleted before the poller reports itself stopped.
    fn stop_after_in_flight(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight.is_empty() {
            ctx.stop();
            return;
        }
        let in_flight = std::mem::take(&mut self.in_flight);
        ctx.wait(
            async move {
                for batch in in_flight {
                    let _ = batch.await;
                }
            }
            .into_actor(self)
            .map(|_, _, ctx| ctx.stop()),
        );
    }

    fn after_cycle(&mut self, outcome: CycleOutcome, ctx: &mut Context<Self>) {
        if self.shutdown.is_cancelled() || outcome == CycleOutcome::ShuttingDown {
            self.stop_after_in_flight(ctx);
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

impl CycleOutcome {
    /// The outcome that decides the next cycle when several batches ended: a failure backs off.
    fn worse(self, other: CycleOutcome) -> CycleOutcome {
        let rank = |outcome| match outcome {
            CycleOutcome::Failed => 2,
            CycleOutcome::StoreRefused => 1,
            _ => 0,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
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
            std::mem::take(&mut self.in_flight),
        );
        AtomicResponse::new(Box::pin(cycle.into_actor(self).map(
            |(outcome, in_flight), poller, ctx| {
                poller.in_flight = in_flight;
                poller.after_cycle(outcome, ctx)
            },
        )))
    }
}

/// One cycle: learn what the batches handed on earlier came to (waiting for the oldest while
/// [`BATCHES_IN_FLIGHT`] are still going), receive a batch, and hand it on to be counted and
/// deleted beside the next cycle.
async fn poll_cycle(
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    mut in_flight: VecDeque<InFlight>,
) -> (CycleOutcome, VecDeque<InFlight>) {
    let mut earlier = CycleOutcome::Processed;
    while let Some(oldest) = in_flight.front() {
        if !oldest.is_finished() && in_flight.len() < BATCHES_IN_FLIGHT {
            break;
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        // A task that panicked counted nothing it could vouch for: back off as for a failure.
        earlier = earlier.worse(oldest.await.unwrap_or(CycleOutcome::Failed));
    }
    if earlier != CycleOutcome::Processed {
        return (earlier, in_flight);
    }
    let received = receive(&polled, settings, &shutdown, &metrics, clock.as_ref()).await;
    let messages = match received {
        Ok(messages) => messages,
        Err(outcome) => return (outcome, in_flight),
    };
    in_flight.push_back(actix::spawn(count_and_delete(
        polled, router, settings, clock, metrics, messages,
    )));
    (CycleOutcome::Processed, in_flight)
}

/// Receives a batch once the store takes writes: the messages, or the cycle's outcome when
/// there are none.
async fn receive(
    polled: &PolledQueue,
    settings: PollerSettings,
    shutdown: &CancellationToken,
    metrics: &Metrics,
    clock: &dyn Clock,
) -> Result<Vec<ReceivedMessage>, CycleOutcome> {
    if shutdown.is_cancelled() {
        return Err(CycleOutcome::ShuttingDown);
    }
    let PolledQueue { queue, health } = polled;
    if !metrics.store.is_writable() {
        info!("the state store refuses writes: receiving is paused");
        tokio::select! {
            _ = metrics.store.writable() => info!("the state store takes writes again: receiving resumes"),
            _ = shutdown.cancelled() => return Err(CycleOutcome::ShuttingDown),
        }
    }
    let received = tokio::select! {
        received = queue.receive(settings.max_messages, settings.wait_time_seconds, settings.visibility_timeout_seconds) => received,
        // Nothing received yet is lost by abandoning the call: messages stay in the queue.
        _ = shutdown.cancelled() => return Err(CycleOutcome::ShuttingDown),
        // A batch handed on earlier failed its commit while this receive waited: a message
        // received now could only come back, one receive closer to the dead-letter queue.
        _ = metrics.store.refusing() => return Err(CycleOutcome::StoreRefused),
    };
    let messages = match received {
        Ok(messages) => messages,
        Err(error) => {
            health.failed(&error, clock.now_millis());
            warn!(queue = %health.label(), %error, "cannot receive from the queue");
            return Err(CycleOutcome::Failed);
        }
    };
    health.received(messages.len(), clock.now_millis());
    if messages.is_empty() {
        return Err(CycleOutcome::Empty);
    }
    Ok(messages)
}

/// Counts a received batch durably, then deletes what may be deleted: what the next cycle does
/// about it.
async fn count_and_delete(
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    messages: Vec<ReceivedMessage>,
) -> CycleOutcome {
    match count(
        &polled,
        router,
        settings,
        clock.as_ref(),
        &metrics,
        messages,
    )
    .await
    {
        Ok(deletable) if deletable.is_empty() => CycleOutcome::Processed,
        Ok(deletable) => {
            if delete_counted(polled, clock, deletable).await {
                CycleOutcome::Processed
            } else {
                CycleOutcome::Failed
            }
        }
        Err(outcome) => outcome,
    }
}

/// Counts a batch durably: the receipts that may be deleted, or the outcome when none may.
async fn count(
    polled: &PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    clock: &dyn Clock,
    metrics: &Metrics,
    messages: Vec<ReceivedMessage>,
) -> Result<Vec<Receipt>, CycleOutcome> {
    let PolledQueue { queue, health } = polled;
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
                return Err(CycleOutcome::StoreRefused);
            }
            // One table's accumulator is being restarted: the batch comes back after its
            // visibility timeout; no reason to hold up the other tables' messages.
            if matches!(error, IntakeError::AccumulatorGone(_)) {
                return Err(CycleOutcome::Processed);
            }
            return Err(CycleOutcome::Failed);
        }
        Err(error) => {
            error!(%error, "intake router unavailable; no message deleted");
            return Err(CycleOutcome::Failed);
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
    Ok(deletable)
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
