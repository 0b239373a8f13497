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
mod tests;
