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
//!
//! The shutdown ends every wait of a poller at once: a back-off, a long poll (nothing is lost by
//! abandoning it: the messages stay in the queue), the pause while the store refuses writes. A
//! batch already received is still counted and then deleted; once the shutdown has come its
//! delete gets [`QUEUE_GRACE_AFTER_SHUTDOWN`], so that a queue that does not answer holds up no
//! exit past it (a counted message left in the queue comes back after its visibility timeout
//! and is not counted twice), and the end of its count never waits for a visibility extension.

use std::collections::VecDeque;
use std::future::Future;
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

/// How long the delete of a batch already counted may still take once the shutdown has come.
/// Against a server that answers, a delete takes milliseconds; one that accepts connections and
/// never answers would hold the exit up for the SDK's attempts and timeouts (a minute and more),
/// past Kubernetes' grace.
pub const QUEUE_GRACE_AFTER_SHUTDOWN: Duration = Duration::from_secs(5);

/// Between two receives of short polling (`wait_time_seconds = 0`) that found nothing.
const SHORT_POLL_PAUSE: Duration = Duration::from_secs(1);

/// The waits after failed receives: from about a second, doubling to a minute, jittered so that
/// many pollers do not retry in step.
fn receive_backoff() -> Backoff {
    Backoff::jittered(Duration::from_secs(1), Duration::from_secs(60))
}

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
            backoff: receive_backoff(),
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

    /// Asks for the next cycle, which begins with the pause this one's outcome calls for: the
    /// pause is a wait of the cycle, which the shutdown ends like every other (a timer armed
    /// for a message would not hear it, and hold the stop up for a whole back-off).
    fn after_cycle(&mut self, outcome: CycleOutcome, ctx: &mut Context<Self>) {
        if self.shutdown.is_cancelled() || outcome == CycleOutcome::ShuttingDown {
            self.stop_after_in_flight(ctx);
            return;
        }
        let pause = pause_before_next_cycle(outcome, self.settings, &mut self.backoff);
        if outcome == CycleOutcome::Failed {
            warn!(
                queue = %self.polled.health.label(),
                attempt = self.backoff.attempts(),
                delay_ms = pause.as_millis() as u64,
                "backing off before polling again"
            );
        }
        ctx.notify(PollOnce { pause });
    }
}

/// How long the next cycle waits before it receives, after a cycle that ended with `outcome`:
/// a failure backs off (longer each time, up to the back-off's ceiling), short polling that
/// found nothing waits a moment instead of spinning, anything else goes on at once and starts
/// the back-off afresh.
fn pause_before_next_cycle(
    outcome: CycleOutcome,
    settings: PollerSettings,
    backoff: &mut Backoff,
) -> Duration {
    match outcome {
        CycleOutcome::Failed => backoff.next_delay(),
        CycleOutcome::Empty if settings.wait_time_seconds == 0 => {
            backoff.reset();
            SHORT_POLL_PAUSE
        }
        CycleOutcome::Processed
        | CycleOutcome::StoreRefused
        | CycleOutcome::Empty
        | CycleOutcome::ShuttingDown => {
            backoff.reset();
            Duration::ZERO
        }
    }
}

/// Waits `pause`, unless the shutdown comes first: whether the whole pause was waited.
async fn pause_unless_shutdown(pause: Duration, shutdown: &CancellationToken) -> bool {
    if pause.is_zero() {
        return !shutdown.is_cancelled();
    }
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = shutdown.cancelled() => false,
    }
}

/// A call to the queue for a batch already received: its result, or `None` when the shutdown
/// came and the call did not end within [`QUEUE_GRACE_AFTER_SHUTDOWN`] of it.
async fn within_grace_after_shutdown<T>(
    shutdown: &CancellationToken,
    call: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(call);
    tokio::select! {
        // A call that ended is used even if the shutdown came at the same moment.
        biased;
        result = &mut call => return Some(result),
        _ = shutdown.cancelled() => {}
    }
    tokio::time::timeout(QUEUE_GRACE_AFTER_SHUTDOWN, call)
        .await
        .ok()
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

/// Runs a cycle: a pause (ended early by the shutdown), then a receive.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct PollOnce {
    pause: Duration,
}

impl Actor for SqsPoller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        info!(
            queue = %self.polled.health.label(),
            max_messages = self.settings.max_messages,
            wait_time_seconds = self.settings.wait_time_seconds,
            "polling the queue"
        );
        ctx.notify(PollOnce {
            pause: Duration::ZERO,
        });
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

    fn handle(&mut self, message: PollOnce, _ctx: &mut Context<Self>) -> Self::Result {
        let cycle = poll_cycle(
            message.pause,
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

/// One cycle: wait out the pause the last one asked for (unless the shutdown comes), learn what
/// the batches handed on earlier came to (waiting for the oldest while [`BATCHES_IN_FLIGHT`] are
/// still going), receive a batch, and hand it on to be counted and deleted beside the next cycle.
#[allow(clippy::too_many_arguments)]
async fn poll_cycle(
    pause: Duration,
    polled: PolledQueue,
    router: Addr<IntakeRouter>,
    settings: PollerSettings,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    mut in_flight: VecDeque<InFlight>,
) -> (CycleOutcome, VecDeque<InFlight>) {
    if !pause_unless_shutdown(pause, &shutdown).await {
        return (CycleOutcome::ShuttingDown, in_flight);
    }
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
        polled, router, settings, shutdown, clock, metrics, messages,
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
        // A batch that arrived is counted even if the shutdown came at the same moment.
        biased;
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
    shutdown: CancellationToken,
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
            if delete_counted(polled, clock, &shutdown, deletable).await {
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
                let extend = queue.extend_visibility(&receipts, settings.visibility_timeout_seconds);
                tokio::pin!(extend);
                let extended = tokio::select! {
                    // Counted while the queue took its time to answer the extension: what
                    // follows (the delete, or a stop) does not wait for that answer.
                    report = &mut ingest => break report,
                    extended = &mut extend => extended,
                };
                match extended {
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

/// Deletes counted messages, ten a call; whether every call went through. Once the shutdown has
/// come, a call the queue does not answer within [`QUEUE_GRACE_AFTER_SHUTDOWN`] is given up.
async fn delete_counted(
    polled: PolledQueue,
    clock: Arc<dyn Clock>,
    shutdown: &CancellationToken,
    deletable: Vec<Receipt>,
) -> bool {
    let PolledQueue { queue, health } = polled;
    let mut ok = true;
    let mut chunks = deletable.chunks(10);
    while let Some(chunk) = chunks.next() {
        let Some(deleted) = within_grace_after_shutdown(shutdown, queue.delete(chunk)).await else {
            // The queue does not answer, and the process is stopping: the rest is left too.
            let left = chunk.len() + chunks.map(<[Receipt]>::len).sum::<usize>();
            health
                .delete_failures
                .fetch_add(left as u64, Ordering::Relaxed);
            warn!(
                queue = %health.label(),
                num_messages = left,
                grace_ms = QUEUE_GRACE_AFTER_SHUTDOWN.as_millis() as u64,
                "the queue did not answer a delete of counted messages within the shutdown's grace; they come back after their visibility timeout and will not be counted twice"
            );
            return false;
        };
        match deleted {
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
