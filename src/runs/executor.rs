//! The compaction executor pool's actor: a bounded number of Spark runs at a time, at most one per
//! table, started in the fair order of [`crate::runs::scheduler`]. The bookkeeping (slots, the line,
//! who hears what) is [`crate::runs::pool::PoolCore`]; this shell carries out its effects, runs the
//! engine off the intake path (counting goes on while Spark works), and reports each run's end
//! (metrics, notification, log).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, ResponseActFuture,
    WrapFuture,
};
use tokio::sync::oneshot;
use tracing::{info, warn, Instrument};

use crate::base::clock::{Clock, UnixMillis};
use crate::engine::{ClaimedFileReader, ClaimedFiles, Engine, RanOn, RunTask};
use crate::intake::routing::TableIndex;
use crate::messages::{
    AccumulatorRestarted, Claimed, CompactNow, GetPoolStatus, NotClaimed, RecoverRun,
    RequestCompaction, RunFinished, RunResult, SetTableMap, StartRun, WaitIdle,
};
use crate::model::report::{FailureClass, RunOutcome};
use crate::model::strategy::RunStrategy;
use crate::ops::metrics::{
    FailedRunLabels, MaintenanceFailureLabels, Metrics, OutcomeLabels, RunLabels, REWRITE_KIND,
};
use crate::ops::notifier::{Notifier, Notify};
use crate::ops::notify::RunEvent;
use crate::runs::pool::{Effect, PoolCore};
use crate::runs::settings::CompactionSettings;
use crate::store::StateStore;
use crate::table::accumulator::ClaimTicket;

/// Notifications carry counts, not the list of output files.
fn strip_output_files(outcome: &RunOutcome) -> RunOutcome {
    let mut outcome = outcome.clone();
    if let RunOutcome::Success { report, .. } = &mut outcome {
        *report = report.without_file_lists();
    }
    outcome
}

/// A run's outcome; a panic while the run went on or its output was read (a bug something in the
/// engine's output set off) fails the run as `invalid_input` instead of stopping the pool.
async fn outcome_or_invalid(run: impl std::future::Future<Output = RunOutcome>) -> RunOutcome {
    use futures::FutureExt;
    let started = std::time::Instant::now();
    std::panic::AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| RunOutcome::Failure {
            class: FailureClass::InvalidInput,
            excerpt: format!(
                "finishing the run failed unexpectedly: {}",
                crate::runs::settings::panic_message(panic.as_ref())
            ),
            duration_millis: started.elapsed().as_millis() as u64,
            attempts: 1,
        })
}

/// How long after start-up containers of unknown runs are cleaned up: every table has reported
/// its in-flight run by then.
const LEFTOVER_SWEEP_DELAY: Duration = Duration::from_secs(10);

/// A claim's files, read from the table's file log on the blocking pool when an engine asks
/// (to tell the run's own commit after a lost connection or a restart: rare).
struct StoredClaimedFiles {
    store: Arc<dyn StateStore>,
    table: String,
    upto_seq: u64,
}

#[async_trait::async_trait]
impl ClaimedFileReader for StoredClaimedFiles {
    async fn claimed_files(&self) -> Result<Vec<(String, String)>, String> {
        let store = self.store.clone();
        let table = self.table.clone();
        let upto_seq = self.upto_seq;
        tokio::task::spawn_blocking(move || {
            store.files(&table).map(|files| {
                files
                    .into_iter()
                    .filter(|(seq, _)| *seq < upto_seq)
                    .map(|(_, file)| (file.bucket, file.key))
                    .collect()
            })
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
    }
}

pub struct CompactionPool {
    settings: CompactionSettings,
    engine: Arc<dyn Engine>,
    /// Which engine ran each table's last run, until its outcome is delivered to the table.
    ran_on: HashMap<TableIndex, RanOn>,
    /// Read for a run's claimed files only ([`StoredClaimedFiles`]).
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    core: PoolCore<crate::table::handle::TableHandle>,
    /// Whoever waits for a manual run of a table ([`Effect::Answer`] answers them all).
    manual: HashMap<TableIndex, Vec<oneshot::Sender<Result<RunResult, String>>>>,
    idle_waiters: Vec<oneshot::Sender<()>>,
    /// `false` (replay --no-compact): no left-over sweep either.
    enabled: bool,
    metrics: Arc<Metrics>,
    notifier: Option<Addr<Notifier>>,
}

impl CompactionPool {
    pub fn new(
        settings: CompactionSettings,
        engine: Arc<dyn Engine>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        enabled: bool,
        metrics: Arc<Metrics>,
        notifier: Option<Addr<Notifier>>,
    ) -> Self {
        CompactionPool {
            core: PoolCore::new(settings.max_concurrent, clock.clone(), enabled),
            settings,
            engine,
            ran_on: HashMap::new(),
            store,
            clock,
            manual: HashMap::new(),
            idle_waiters: Vec::new(),
            enabled,
            metrics,
            notifier,
        }
    }

    /// Carries out what the pool's bookkeeping decided, in order.
    fn apply(&mut self, effects: Vec<Effect>, ctx: &mut Context<Self>) {
        for effect in effects {
            match effect {
                Effect::Start {
                    table,
                    run_id,
                    trigger,
                    force,
                } => self.core.map().accumulator(table).do_send(StartRun {
                    run_id,
                    trigger,
                    force,
                }),
                Effect::Recover { table, ticket } => self.recover(table, ticket, ctx),
                Effect::Deliver {
                    table,
                    run_id,
                    outcome,
                } => {
                    let ran_on = self.ran_on.remove(&table);
                    self.core.map().accumulator(table).do_send(RunFinished {
                        run_id,
                        outcome,
                        ran_on,
                    })
                }
                Effect::Answer { table, answer } => {
                    for waiter in self.manual.remove(&table).unwrap_or_default() {
                        let _ = waiter.send(answer.clone());
                    }
                }
                Effect::Idle => {
                    for waiter in self.idle_waiters.drain(..) {
                        let _ = waiter.send(());
                    }
                }
            }
        }
    }

    /// A run ended: the bookkeeping first (its slot, the accumulator, a manual waiter), then
    /// its report.
    fn finish(
        &mut self,
        table: TableIndex,
        ticket: ClaimTicket,
        outcome: RunOutcome,
        ctx: &mut Context<Self>,
    ) {
        let connected = self.core.map().accumulator(table).connected();
        if !connected {
            warn!(table = %self.core.map().spec(table).table, run_id = %ticket.run_id, "the table's accumulator is down: the run's outcome waits for its restart");
        }
        let (started_millis, effects) =
            self.core.finish(table, &ticket, outcome.clone(), connected);
        self.report(table, &ticket, &outcome, started_millis);
        self.apply(effects, ctx);
    }

    /// Metrics, notification and log of a run's end. A reconcile (a read) is logged only.
    fn report(
        &self,
        table: TableIndex,
        ticket: &ClaimTicket,
        outcome: &RunOutcome,
        started_millis: UnixMillis,
    ) {
        let spec = self.core.map().spec(table).clone();
        let run_id = &ticket.run_id;
        let duration_millis = match outcome {
            RunOutcome::Success {
                duration_millis, ..
            }
            | RunOutcome::Failure {
                duration_millis, ..
            } => *duration_millis,
        };
        let rewrite = !ticket.task.is_read();
        let kind = run_kind(ticket);
        if rewrite {
            let duration_seconds = duration_millis as f64 / 1000.0;
            let outcome_label = match outcome.failure_class() {
                None => {
                    if let Some(failed) = outcome.maintenance_failed() {
                        self.metrics
                            .maintenance_failures
                            .get_or_create(&MaintenanceFailureLabels {
                                at: self.metrics.table_labels(&spec.table, &spec.tenant),
                                class: failed.class.as_str(),
                            })
                            .inc();
                    }
                    self.metrics
                        .runs_succeeded
                        .get_or_create(&RunLabels {
                            at: self.metrics.table_labels(&spec.table, &spec.tenant),
                            kind,
                        })
                        .inc();
                    "success"
                }
                Some(class) => {
                    self.metrics
                        .runs_failed
                        .get_or_create(&FailedRunLabels {
                            at: self.metrics.table_labels(&spec.table, &spec.tenant),
                            kind,
                            class: class.as_str(),
                        })
                        .inc();
                    "failure"
                }
            };
            self.metrics
                .run_duration
                .get_or_create(&OutcomeLabels {
                    outcome: outcome_label,
                })
                .observe(duration_seconds);
        }
        if let Some(notifier) = self.notifier.as_ref().filter(|_| rewrite) {
            let catalog = self.settings.config.catalogs.get(&spec.catalog);
            notifier.do_send(Notify(RunEvent {
                table: spec.table.clone(),
                tenant: spec.tenant.clone(),
                run_id: run_id.clone(),
                catalog: spec.catalog.clone(),
                catalog_impl: catalog
                    .map(|catalog| catalog.catalog_impl.clone())
                    .unwrap_or_default(),
                trigger: ticket.trigger,
                strategy: ticket
                    .task
                    .rewrite()
                    .map_or(RunStrategy::Binpack.name(), |rewrite| {
                        rewrite.strategy.name()
                    })
                    .to_string(),
                maintenance: ticket.task.maintenance(),
                started_millis,
                finished_millis: self.clock.now_millis(),
                target_file_bytes: spec.target_file_bytes,
                claimed_files: ticket.files,
                claimed_bytes: ticket.bytes,
                outcome: strip_output_files(outcome),
                ran_on: self.ran_on.get(&table).cloned(),
            }));
        }
        match outcome {
            RunOutcome::Success { report, .. } => match &report.maintenance_failed {
                None => info!(
                    table = %spec.table,
                    run_id = %run_id,
                    rewritten = report.result.rewritten_data_files_count,
                    added = report.result.added_data_files_count,
                    rewritten_bytes = report.result.rewritten_bytes_count,
                    duration_ms = duration_millis,
                    "compaction succeeded"
                ),
                Some(failed) => warn!(
                    table = %spec.table,
                    run_id = %run_id,
                    rewritten = report.result.rewritten_data_files_count,
                    added = report.result.added_data_files_count,
                    rewritten_bytes = report.result.rewritten_bytes_count,
                    duration_ms = duration_millis,
                    step = %failed.step,
                    class = failed.class.as_str(),
                    error = %failed.excerpt,
                    "compaction succeeded; a step after its commit failed"
                ),
            },
            RunOutcome::Failure {
                class,
                excerpt,
                attempts,
                ..
            } => warn!(
                table = %spec.table,
                run_id = %run_id,
                class = class.as_str(),
                attempts,
                duration_ms = duration_millis,
                error = %excerpt,
                "compaction failed; pending files kept"
            ),
        }
    }

    /// The task of a claimed run: `timeout` is what is left of its deadline.
    fn task(&self, table: TableIndex, ticket: &ClaimTicket, timeout: Duration) -> RunTask {
        let spec = self.core.map().spec(table).clone();
        RunTask {
            claimed: ClaimedFiles::new(Arc::new(StoredClaimedFiles {
                store: self.store.clone(),
                table: spec.table.clone(),
                upto_seq: ticket.upto_seq,
            })),
            spec,
            ticket: ticket.clone(),
            timeout,
        }
    }

    /// Runs `run` for a table and finishes it: a panic inside is the run's failure
    /// (`invalid_input`), never the pool's.
    fn spawn_run(
        &mut self,
        table: TableIndex,
        ticket: ClaimTicket,
        run: impl std::future::Future<Output = crate::engine::EngineRun> + 'static,
        ctx: &mut Context<Self>,
    ) {
        let span = {
            let spec = self.core.map().spec(table);
            tracing::info_span!("run", table = %spec.table, tenant = %spec.tenant, run_id = %ticket.run_id)
        };
        let ran_on = Arc::new(std::sync::Mutex::new(None));
        let noted = ran_on.clone();
        let outcome = outcome_or_invalid(async move {
            let ended = run.await;
            *noted.lock().expect("ran on") = Some(ended.ran_on);
            ended.outcome
        });
        ctx.spawn(outcome.instrument(span).into_actor(self).map(
            move |outcome, pool: &mut Self, ctx| {
                if let Some(ran_on) = ran_on.lock().expect("ran on").take() {
                    pool.ran_on.insert(table, ran_on);
                }
                pool.finish(table, ticket, outcome, ctx)
            },
        ));
    }

    /// Finds the end of a run the pool did not start (its engine may still run it, or have
    /// left its output), within what is left of the run's timeout.
    fn recover(&mut self, table: TableIndex, ticket: ClaimTicket, ctx: &mut Context<Self>) {
        let elapsed =
            Duration::from_millis((self.clock.now_millis() - ticket.started_millis).max(0) as u64);
        let timeout = self
            .settings
            .timeout
            .saturating_sub(elapsed)
            .max(Duration::from_secs(1));
        let task = self.task(table, &ticket, timeout);
        let engine = self.engine.clone();
        self.spawn_run(
            table,
            ticket,
            async move { engine.recover(&task).await },
            ctx,
        );
    }

    /// Removes containers of runs nobody claims (their claim was settled, or never committed).
    fn sweep_leftovers(&mut self, ctx: &mut Context<Self>) {
        let engine = self.engine.clone();
        let known = self.core.running_runs();
        ctx.spawn(
            async move {
                match engine.leftover_runs().await {
                    Ok(runs) => {
                        for run_id in runs.into_iter().filter(|run_id| !known.contains(run_id)) {
                            info!(%run_id, "removing the container of a run no table claims");
                            if let Err(error) = engine.discard(&run_id).await {
                                warn!(%run_id, %error, "cannot remove a left-over run");
                            }
                        }
                    }
                    Err(error) => warn!(%error, "cannot look for left-over runs"),
                }
            }
            .into_actor(self),
        );
    }
}

impl Actor for CompactionPool {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.enabled {
            ctx.run_later(LEFTOVER_SWEEP_DELAY, |pool, ctx| pool.sweep_leftovers(ctx));
        }
    }
}

impl Handler<SetTableMap> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: SetTableMap, ctx: &mut Context<Self>) {
        let effects = self.core.set_map(message.0);
        self.apply(effects, ctx);
    }
}

/// A reload changed the Spark settings: runs started from now on use them.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetSettings(pub CompactionSettings);

impl Handler<SetSettings> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: SetSettings, ctx: &mut Context<Self>) {
        self.engine.reconfigure(&message.0);
        self.settings = message.0;
        let effects = self.core.set_max_concurrent(self.settings.max_concurrent);
        self.apply(effects, ctx);
    }
}

impl Handler<RequestCompaction> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: RequestCompaction, ctx: &mut Context<Self>) {
        let effects = self
            .core
            .request(message.table, message.trigger, message.force);
        self.apply(effects, ctx);
    }
}

/// The `kind` label of a run's metrics: `rewrite_data_files` or the maintenance it does.
fn run_kind(ticket: &ClaimTicket) -> &'static str {
    ticket
        .task
        .maintenance()
        .map_or(REWRITE_KIND, |maintenance| maintenance.as_str())
}

impl Handler<Claimed> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: Claimed, ctx: &mut Context<Self>) {
        let table = message.table;
        let ticket = message.ticket;
        let spec = self.core.map().spec(table).clone();
        if !ticket.task.is_read() {
            self.metrics
                .runs_started
                .get_or_create(&RunLabels {
                    at: self.metrics.table_labels(&spec.table, &spec.tenant),
                    kind: run_kind(&ticket),
                })
                .inc();
        }
        let task = self.task(table, &ticket, self.settings.timeout);
        let engine = self.engine.clone();
        let run = async move {
            let ended = engine.run(&task).await;
            if crate::base::failpoint::finish_panics(&task.spec.table) {
                panic!(
                    "failpoint executor.finish_panic: reading the outcome of {} panicked",
                    task.spec.table
                );
            }
            ended
        };
        self.spawn_run(table, ticket, run, ctx);
    }
}

impl Handler<NotClaimed> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: NotClaimed, ctx: &mut Context<Self>) {
        let effects = self.core.not_claimed(message.table, &message.run_id);
        self.apply(effects, ctx);
    }
}

impl Handler<AccumulatorRestarted> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: AccumulatorRestarted, ctx: &mut Context<Self>) {
        let table = message.table;
        if let Some(run_id) = self
            .core
            .running_run(table)
            .filter(|run_id| message.claimed_run.as_deref() != Some(*run_id))
        {
            warn!(table = %self.core.map().spec(table).table, %run_id, "the run's start was lost with the table's accumulator; its slot is free again");
        }
        let effects = self
            .core
            .accumulator_restarted(table, message.claimed_run.as_deref());
        self.apply(effects, ctx);
    }
}

impl Handler<RecoverRun> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: RecoverRun, ctx: &mut Context<Self>) {
        let effects = self.core.recover(message.table, message.ticket);
        self.apply(effects, ctx);
    }
}

impl Handler<CompactNow> for CompactionPool {
    type Result = ResponseActFuture<Self, Result<RunResult, String>>;

    fn handle(&mut self, message: CompactNow, ctx: &mut Context<Self>) -> Self::Result {
        let (sender, receiver) = oneshot::channel();
        match self.core.compact_now(message.table, message.trigger) {
            Ok(effects) => {
                self.manual.entry(message.table).or_default().push(sender);
                self.apply(effects, ctx);
            }
            Err(refusal) => {
                let _ = sender.send(Err(refusal));
            }
        }
        Box::pin(
            async move {
                receiver
                    .await
                    .unwrap_or_else(|_| Err("the executor pool stopped".to_string()))
            }
            .into_actor(self),
        )
    }
}

/// Shutting down: start no more runs (those in flight go on).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopDispatching;

impl Handler<StopDispatching> for CompactionPool {
    type Result = ();

    fn handle(&mut self, _message: StopDispatching, ctx: &mut Context<Self>) {
        let effects = self.core.stop_dispatching();
        self.apply(effects, ctx);
    }
}

impl Handler<WaitIdle> for CompactionPool {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _message: WaitIdle, ctx: &mut Context<Self>) -> Self::Result {
        let (sender, receiver) = oneshot::channel();
        self.idle_waiters.push(sender);
        if self.core.is_idle() {
            self.apply(vec![Effect::Idle], ctx);
        }
        Box::pin(
            async move {
                let _ = receiver.await;
            }
            .into_actor(self),
        )
    }
}

impl Handler<GetPoolStatus> for CompactionPool {
    type Result = actix::MessageResult<GetPoolStatus>;

    fn handle(&mut self, _message: GetPoolStatus, _ctx: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.core.status())
    }
}

#[cfg(test)]
mod tests;
