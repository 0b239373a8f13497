//! The compaction executor pool: a bounded number of Spark runs at a time, at most one per table.
//! Due tables wait in a fair line across tenants (weighted round-robin, oldest first within a
//! tenant, never more than a tenant's `max_concurrent_runs`). Runs execute off the intake path, so
//! counting goes on while Spark works.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, ResponseActFuture,
    WrapFuture,
};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::messages::{
    AccumulatorRestarted, Claimed, CompactNow, FailureNote, GetPoolStatus, NotClaimed, PoolStatus,
    RecoverRun, RequestCompaction, RunFinished, RunResult, SetTableMap, StartRun, WaitIdle,
};
use tracing::Instrument;

use super::notifier::{Notifier, Notify};
use super::TableMap;
use crate::accumulator::ClaimTicket;
use crate::clock::Clock;
use crate::compaction::{new_run_id, CompactionSettings};
use crate::metrics::{FailedRunLabels, Metrics, OutcomeLabels, RunLabels, REWRITE_KIND};
use crate::notify::RunEvent;
use crate::routing::TableIndex;
use crate::run::FailureClass;
use crate::run::RunOutcome;
use crate::scheduler::{Scheduler, TenantLimits};
use crate::spark::runner::{execute, judge, SparkRunner};

/// Notifications carry counts, not the list of output files.
fn strip_output_files(outcome: &RunOutcome) -> RunOutcome {
    let mut outcome = outcome.clone();
    if let RunOutcome::Success { report, .. } = &mut outcome {
        *report = report.without_file_lists();
    }
    outcome
}

/// How long after start-up containers of unknown runs are cleaned up: every table has reported
/// its in-flight run by then.
const LEFTOVER_SWEEP_DELAY: Duration = Duration::from_secs(10);

/// Runs whose duration makes the median behind the expected waits.
const RECENT_RUNS: usize = 50;
/// Failed runs remembered per tenant for `/v1/tenants`.
const RECENT_FAILURES_PER_TENANT: usize = 10;

struct Slot {
    run_id: String,
    started_millis: i64,
    tenant: String,
}

/// A table waiting for a slot: its trigger and whether the run is forced.
struct Request {
    trigger: String,
    force: bool,
}

pub struct CompactionPool {
    settings: CompactionSettings,
    runner: Arc<dyn SparkRunner>,
    clock: Arc<dyn Clock>,
    /// Empty until the pipeline hands over the map (the accumulators need the pool's address).
    map: Arc<TableMap>,
    waiting: Scheduler<Request>,
    running: HashMap<TableIndex, Slot>,
    recent_runs_millis: VecDeque<u64>,
    recent_failures: HashMap<String, VecDeque<FailureNote>>,
    manual: HashMap<TableIndex, Vec<oneshot::Sender<Result<RunResult, String>>>>,
    idle_waiters: Vec<oneshot::Sender<()>>,
    /// Outcomes of runs whose accumulator was down when they ended: handed to the restarted one.
    undelivered: HashMap<TableIndex, RunFinished>,
    /// Runs whose outcome was handed over that way: the restarted accumulator's report of the
    /// claim it loaded is not a run to recover.
    handed_over: HashSet<String>,
    /// `false` (replay --no-compact): requests are noted, never run.
    enabled: bool,
    /// Accumulators start before the pool has the map (it holds their addresses): what they
    /// send before it comes waits here, and is handled once it has.
    early_requests: Vec<RequestCompaction>,
    early_recoveries: Vec<RecoverRun>,
    metrics: Arc<Metrics>,
    notifier: Option<Addr<Notifier>>,
}

impl CompactionPool {
    pub fn new(
        settings: CompactionSettings,
        runner: Arc<dyn SparkRunner>,
        clock: Arc<dyn Clock>,
        enabled: bool,
        metrics: Arc<Metrics>,
        notifier: Option<Addr<Notifier>>,
    ) -> Self {
        CompactionPool {
            settings,
            runner,
            clock,
            map: Arc::new(TableMap::default()),
            waiting: Scheduler::new(),
            running: HashMap::new(),
            recent_runs_millis: VecDeque::new(),
            recent_failures: HashMap::new(),
            manual: HashMap::new(),
            idle_waiters: Vec::new(),
            undelivered: HashMap::new(),
            handed_over: HashSet::new(),
            enabled,
            early_requests: Vec::new(),
            early_recoveries: Vec::new(),
            metrics,
            notifier,
        }
    }

    fn enqueue(
        &mut self,
        table: TableIndex,
        trigger: String,
        force: bool,
        ctx: &mut Context<Self>,
    ) {
        if self.running.contains_key(&table) || !self.map.is_active(table) {
            return;
        }
        let tenant = self.map.spec(table).tenant.clone();
        if self
            .waiting
            .push(&tenant, table, Request { trigger, force })
        {
            self.dispatch(ctx);
        }
    }

    /// Fills free slots in the scheduler's order.
    fn dispatch(&mut self, _ctx: &mut Context<Self>) {
        if !self.enabled || self.map.is_empty() {
            return;
        }
        while self.running.len() < self.settings.max_concurrent {
            let Some((tenant, table, request)) = self.waiting.next() else {
                break;
            };
            let now = self.clock.now_millis();
            let run_id = new_run_id(now);
            self.running.insert(
                table,
                Slot {
                    run_id: run_id.clone(),
                    started_millis: now,
                    tenant: tenant.to_string(),
                },
            );
            self.map.accumulator(table).do_send(StartRun {
                run_id,
                trigger: request.trigger,
                force: request.force,
            });
        }
        self.notify_idle();
    }

    /// The slot of a run is free again.
    fn release(&mut self, table: TableIndex, run_id: &str) -> Option<Slot> {
        match self.running.get(&table) {
            Some(slot) if slot.run_id == run_id => {
                let slot = self.running.remove(&table)?;
                self.waiting.finished(&slot.tenant);
                Some(slot)
            }
            _ => None,
        }
    }

    /// Keeps the scheduler's tenants in line with the map: weights and run limits.
    fn apply_tenant_limits(&mut self) {
        for tenant in self.map.tenants() {
            self.waiting.set_tenant(
                &tenant.name,
                TenantLimits {
                    weight: tenant.weight,
                    max_concurrent: tenant.max_concurrent_runs,
                },
            );
        }
    }

    fn remember_run(&mut self, spec_tenant: &str, table: &str, run_id: &str, outcome: &RunOutcome) {
        let duration = match outcome {
            RunOutcome::Success {
                duration_millis, ..
            }
            | RunOutcome::Failure {
                duration_millis, ..
            } => *duration_millis,
        };
        if self.recent_runs_millis.len() == RECENT_RUNS {
            self.recent_runs_millis.pop_front();
        }
        self.recent_runs_millis.push_back(duration);
        if let Some(class) = outcome.failure_class() {
            let failures = self
                .recent_failures
                .entry(spec_tenant.to_string())
                .or_default();
            if failures.len() == RECENT_FAILURES_PER_TENANT {
                failures.pop_front();
            }
            failures.push_back(FailureNote {
                tenant: spec_tenant.to_string(),
                table: table.to_string(),
                run_id: run_id.to_string(),
                class: class.as_str().to_string(),
                finished_millis: self.clock.now_millis(),
            });
        }
    }

    fn median_run_millis(&self) -> Option<u64> {
        let mut durations: Vec<u64> = self.recent_runs_millis.iter().copied().collect();
        durations.sort_unstable();
        durations.get(durations.len() / 2).copied()
    }

    fn notify_idle(&mut self) {
        if self.running.is_empty() && (self.waiting.is_empty() || !self.enabled) {
            for waiter in self.idle_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    fn finish(
        &mut self,
        table: TableIndex,
        run_id: String,
        ticket: ClaimTicket,
        outcome: RunOutcome,
        ctx: &mut Context<Self>,
    ) {
        let started_millis = self
            .release(table, &run_id)
            .map_or(ticket.started_millis, |slot| slot.started_millis);
        let spec = self.map.spec(table).clone();
        let duration_seconds = match &outcome {
            RunOutcome::Success {
                duration_millis, ..
            }
            | RunOutcome::Failure {
                duration_millis, ..
            } => *duration_millis as f64 / 1000.0,
        };
        // A data rewrite or maintenance counts as a run; a reconcile (a read) does not.
        let rewrite = ticket.rewrite || ticket.maintenance.is_some();
        if rewrite {
            self.remember_run(&spec.tenant, &spec.table, &run_id, &outcome);
        }
        let kind = run_kind(&ticket);
        let labels = RunLabels {
            table: spec.table.clone(),
            tenant: spec.tenant.clone(),
            kind,
        };
        match outcome.failure_class() {
            _ if !rewrite => {}
            None => {
                self.metrics.runs_succeeded.get_or_create(&labels).inc();
                self.metrics
                    .run_duration
                    .get_or_create(&OutcomeLabels { outcome: "success" })
                    .observe(duration_seconds);
            }
            Some(class) => {
                self.metrics
                    .runs_failed
                    .get_or_create(&FailedRunLabels {
                        table: labels.table,
                        tenant: labels.tenant,
                        kind,
                        class: class.as_str(),
                    })
                    .inc();
                self.metrics
                    .run_duration
                    .get_or_create(&OutcomeLabels { outcome: "failure" })
                    .observe(duration_seconds);
            }
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
                trigger: ticket.trigger.clone(),
                strategy: ticket.strategy.name().to_string(),
                maintenance: ticket.maintenance,
                started_millis,
                finished_millis: self.clock.now_millis(),
                target_file_bytes: spec.target_file_bytes,
                claimed_files: ticket.files,
                claimed_bytes: ticket.bytes,
                outcome: strip_output_files(&outcome),
            }));
        }
        match &outcome {
            RunOutcome::Success {
                report,
                duration_millis,
                ..
            } => info!(
                table = %spec.table,
                run_id = %run_id,
                rewritten = report.result.rewritten_data_files_count,
                added = report.result.added_data_files_count,
                rewritten_bytes = report.result.rewritten_bytes_count,
                duration_ms = duration_millis,
                "compaction succeeded"
            ),
            RunOutcome::Failure {
                class,
                excerpt,
                duration_millis,
                attempts,
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
        let finished = RunFinished {
            run_id: run_id.clone(),
            outcome: outcome.clone(),
        };
        let accumulator = self.map.accumulator(table);
        if accumulator.connected() {
            accumulator.do_send(finished);
        } else {
            warn!(table = %spec.table, %run_id, "the table's accumulator is down: the run's outcome waits for its restart");
            self.undelivered.insert(table, finished);
        }
        if let Some(waiters) = self.manual.remove(&table) {
            let result = RunResult {
                table: spec.table.clone(),
                run_id,
                trigger: ticket.trigger.clone(),
                claimed_files: ticket.files,
                claimed_bytes: ticket.bytes,
                outcome,
            };
            for waiter in waiters {
                let _ = waiter.send(Ok(result.clone()));
            }
        }
        self.dispatch(ctx);
    }

    /// Removes containers of runs nobody claims (their claim was settled, or never committed).
    fn sweep_leftovers(&mut self, ctx: &mut Context<Self>) {
        let runner = self.runner.clone();
        let known: HashSet<String> = self
            .running
            .values()
            .map(|slot| slot.run_id.clone())
            .collect();
        ctx.spawn(
            async move {
                match runner.leftover_runs().await {
                    Ok(runs) => {
                        for run_id in runs.into_iter().filter(|run_id| !known.contains(run_id)) {
                            info!(%run_id, "removing the container of a run no table claims");
                            if let Err(error) = runner.discard(&run_id).await {
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

    /// The first map, or a reload's: tenants' limits apply at once; removed tables leave the line
    /// (their runs in flight go on and settle).
    fn handle(&mut self, message: SetTableMap, ctx: &mut Context<Self>) {
        let previous = std::mem::replace(&mut self.map, message.0);
        self.apply_tenant_limits();
        for early in std::mem::take(&mut self.early_recoveries) {
            ctx.notify(early);
        }
        for early in std::mem::take(&mut self.early_requests) {
            ctx.notify(early);
        }
        // A waiting table moved to another tenant waits in that tenant's line from now on.
        for table in 0..previous.len().min(self.map.len()) {
            let tenant = &self.map.spec(table).tenant;
            if self.map.is_active(table) && previous.spec(table).tenant != *tenant {
                if let Some(request) = self.waiting.remove(table) {
                    self.waiting.push(tenant, table, request);
                }
            }
        }
        for table in 0..self.map.len() {
            if !self.map.is_active(table) && self.waiting.remove(table).is_some() {
                if let Some(waiters) = self.manual.remove(&table) {
                    for waiter in waiters {
                        let _ = waiter.send(Err(
                            "the table was removed from the configuration".to_string()
                        ));
                    }
                }
            }
        }
        self.dispatch(ctx);
    }
}

/// A reload changed the Spark settings: runs started from now on use them.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetSettings(pub CompactionSettings);

impl Handler<SetSettings> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: SetSettings, ctx: &mut Context<Self>) {
        self.settings = message.0;
        self.dispatch(ctx);
    }
}

impl Handler<RequestCompaction> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: RequestCompaction, ctx: &mut Context<Self>) {
        if message.table >= self.map.len() {
            self.early_requests.push(message);
            return;
        }
        self.enqueue(message.table, message.trigger, message.force, ctx);
    }
}

/// The `kind` label of a run's metrics: `rewrite_data_files` or the maintenance it does.
fn run_kind(ticket: &ClaimTicket) -> &'static str {
    ticket
        .maintenance
        .map_or(REWRITE_KIND, |maintenance| maintenance.as_str())
}

impl Handler<Claimed> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: Claimed, ctx: &mut Context<Self>) {
        let table = message.table;
        let ticket = message.ticket;
        let spec = self.map.spec(table).clone();
        let job = self.settings.job(&spec, &ticket);
        let runner = self.runner.clone();
        let attempts = self.settings.attempts;
        let retry_interval = self.settings.retry_interval;
        let run_id = ticket.run_id.clone();
        if ticket.rewrite || ticket.maintenance.is_some() {
            self.metrics
                .runs_started
                .get_or_create(&RunLabels {
                    table: spec.table.clone(),
                    tenant: spec.tenant.clone(),
                    kind: run_kind(&ticket),
                })
                .inc();
        }
        let span = tracing::info_span!("run", table = %spec.table, tenant = %spec.tenant, run_id = %run_id);
        ctx.spawn(
            async move { execute(runner.as_ref(), &job, attempts, retry_interval).await }
                .instrument(span)
                .into_actor(self)
                .map(move |outcome, pool, ctx| pool.finish(table, run_id, ticket, outcome, ctx)),
        );
    }
}

impl Handler<NotClaimed> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: NotClaimed, ctx: &mut Context<Self>) {
        self.release(message.table, &message.run_id);
        if let Some(waiters) = self.manual.remove(&message.table) {
            for waiter in waiters {
                let _ = waiter.send(Err("the table has a run in flight already".to_string()));
            }
        }
        self.dispatch(ctx);
    }
}

impl Handler<AccumulatorRestarted> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: AccumulatorRestarted, ctx: &mut Context<Self>) {
        let table = message.table;
        if let Some(finished) = self.undelivered.remove(&table) {
            if message.claimed_run.as_ref() == Some(&finished.run_id) {
                self.handed_over.insert(finished.run_id.clone());
                self.map.accumulator(table).do_send(finished);
            }
        }
        let Some(slot) = self.running.get(&table) else {
            return;
        };
        if message.claimed_run.as_ref() == Some(&slot.run_id) {
            // Claimed and running: its outcome reaches the new accumulator.
            return;
        }
        let run_id = slot.run_id.clone();
        warn!(table = %self.map.spec(table).table, %run_id, "the run's start was lost with the table's accumulator; its slot is free again");
        self.release(table, &run_id);
        if let Some(waiters) = self.manual.remove(&table) {
            for waiter in waiters {
                let _ = waiter.send(Err(
                    "the table's accumulator stopped before the run could start; try again"
                        .to_string(),
                ));
            }
        }
        self.dispatch(ctx);
    }
}

impl Handler<RecoverRun> for CompactionPool {
    type Result = ();

    fn handle(&mut self, message: RecoverRun, ctx: &mut Context<Self>) {
        if message.table >= self.map.len() {
            self.early_recoveries.push(message);
            return;
        }
        let table = message.table;
        let ticket = message.ticket;
        if self.handed_over.remove(&ticket.run_id)
            || self
                .running
                .get(&table)
                .is_some_and(|slot| slot.run_id == ticket.run_id)
        {
            // A restarted accumulator reporting the run this pool is running: nothing to recover.
            return;
        }
        let run_id = ticket.run_id.clone();
        let spec = self.map.spec(table).clone();
        self.waiting.started_outside(&spec.tenant);
        self.running.insert(
            table,
            Slot {
                run_id: run_id.clone(),
                started_millis: ticket.started_millis,
                tenant: spec.tenant.clone(),
            },
        );
        let runner = self.runner.clone();
        let mut job = self.settings.job(&spec, &ticket);
        let secrets = job.secrets();
        let elapsed =
            Duration::from_millis((self.clock.now_millis() - ticket.started_millis).max(0) as u64);
        let remaining = self
            .settings
            .timeout
            .saturating_sub(elapsed)
            .max(Duration::from_secs(1));
        job.timeout = remaining;
        let recovery = async move {
            let started = std::time::Instant::now();
            let failure = |class: FailureClass, excerpt: String| RunOutcome::Failure {
                class,
                excerpt,
                duration_millis: started.elapsed().as_millis() as u64,
                attempts: 1,
            };
            match runner.recover(&job).await {
                Ok(Some(output)) => match judge(&output, &secrets) {
                    Ok(report) => RunOutcome::Success {
                        report: report.into(),
                        duration_millis: started.elapsed().as_millis() as u64,
                        attempts: 1,
                    },
                    Err((class, excerpt)) => failure(class, excerpt),
                },
                Ok(None) => failure(
                    FailureClass::Other,
                    "the run was interrupted by a restart and left no trace; its files are pending again".to_string(),
                ),
                Err(error) => failure(FailureClass::EngineUnavailable, format!("cannot recover the run: {error}")),
            }
        };
        let run_id = ticket.run_id.clone();
        ctx.spawn(
            recovery
                .into_actor(self)
                .map(move |outcome, pool, ctx| pool.finish(table, run_id, ticket, outcome, ctx)),
        );
    }
}

impl Handler<CompactNow> for CompactionPool {
    type Result = ResponseActFuture<Self, Result<RunResult, String>>;

    fn handle(&mut self, message: CompactNow, ctx: &mut Context<Self>) -> Self::Result {
        let (sender, receiver) = oneshot::channel();
        if !self.map.is_active(message.table) {
            let _ = sender.send(Err("the table is not configured".to_string()));
        } else if self.running.contains_key(&message.table) {
            let _ = sender.send(Err("the table has a run in flight already".to_string()));
        } else {
            self.manual.entry(message.table).or_default().push(sender);
            self.enqueue(message.table, message.trigger, true, ctx);
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

    fn handle(&mut self, _message: StopDispatching, _ctx: &mut Context<Self>) {
        self.enabled = false;
        self.notify_idle();
    }
}

impl Handler<WaitIdle> for CompactionPool {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _message: WaitIdle, _ctx: &mut Context<Self>) -> Self::Result {
        let (sender, receiver) = oneshot::channel();
        self.idle_waiters.push(sender);
        self.notify_idle();
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
        actix::MessageResult(PoolStatus {
            running: self
                .running
                .iter()
                .map(|(table, slot)| (*table, slot.run_id.clone(), slot.started_millis))
                .collect(),
            waiting: self.waiting.predicted_order(),
            slots: self.settings.max_concurrent,
            median_run_millis: self.median_run_millis(),
            recent_failures: self.recent_failures.values().flatten().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::messages::{GetStatus, Ingest};
    use crate::clock::FakeClock;
    use crate::config::Config;
    use crate::intake::InboundMessage;
    use crate::service::{start_pipeline, Compaction, Pipeline};
    use crate::spark::runner::{EngineError, EngineOutput, SparkJob};
    use crate::store::MemoryStore;
    use crate::testing::stand_in_runner::StandInRunner;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// A runner whose runs end only when the test says so; counts how many were started, and
    /// for which tables.
    #[derive(Default)]
    struct Gated {
        started: AtomicU32,
        tables: Mutex<Vec<String>>,
        release: Mutex<Vec<oneshot::Sender<EngineOutput>>>,
    }

    #[async_trait]
    impl SparkRunner for Gated {
        async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
            let (sender, receiver) = oneshot::channel();
            self.release.lock().unwrap().push(sender);
            self.tables.lock().unwrap().push(job.table.clone());
            self.started.fetch_add(1, Ordering::SeqCst);
            Ok(receiver.await.unwrap_or_default())
        }
        fn engine(&self) -> String {
            "test".to_string()
        }
    }

    fn body(keys: std::ops::Range<u32>) -> String {
        let records: Vec<String> = keys
            .map(|key| format!(r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"t/data/{key}.parquet","size":10}}}}}}"#))
            .collect();
        format!(r#"{{"Records":[{}]}}"#, records.join(","))
    }

    async fn ingest(pipeline: &Pipeline, keys: std::ops::Range<u32>) {
        pipeline
            .router
            .send(Ingest {
                messages: vec![InboundMessage {
                    id: "m".to_string(),
                    body: body(keys),
                }],
            })
            .await
            .unwrap()
            .unwrap();
    }

    async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn tenant_config(last_tenant: &str) -> Arc<Config> {
        let mut text = "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 1\n[spark]\nretry_attempts = 1\nmax_concurrent = 1\n[tenants.a]\n[tenants.b]\nweight = 3\n"
            .to_string();
        for (table, tenant) in [("n.t1", "a"), ("n.t2", "a"), ("n.t3", last_tenant)] {
            let prefix = table.trim_start_matches("n.");
            text.push_str(&format!(
                "[[tables]]\ntable = \"{table}\"\nbucket = \"lake\"\nprefix = \"{prefix}/\"\ntenant = \"{tenant}\"\n"
            ));
        }
        Arc::new(Config::from_toml_str(&text).unwrap())
    }

    #[actix::test]
    async fn a_reload_reorders_the_line_and_drops_removed_tables() {
        let runner = Arc::new(Gated::default());
        let config = tenant_config("a");
        let pipeline = pipeline_of(config, runner.clone());
        let record = |table: &str| {
            format!(
                r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{table}/data/f.parquet","size":10}}}}}}"#
            )
        };
        for (asked, table) in ["t1", "t2", "t3"].into_iter().enumerate() {
            pipeline
                .router
                .send(Ingest {
                    messages: vec![InboundMessage {
                        id: table.to_string(),
                        body: format!(r#"{{"Records":[{}]}}"#, record(table)),
                    }],
                })
                .await
                .unwrap()
                .unwrap();
            // The accumulators run on different worker threads: each table's request reaches
            // the pool before the next table becomes due, so the line's order is the tables'.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
                if pool.running.len() + pool.waiting.len() > asked {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{table} asks for a run"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        wait_for("t1's run", || runner.tables.lock().unwrap().len() == 1).await;
        let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
        assert_eq!(pool.waiting, [1, 2], "t2 then t3, both tenant a's");

        // t3 moves to tenant b (weight 3): it no longer waits behind t2 in a's line.
        let report = pipeline.apply(&tenant_config("b")).await.unwrap();
        assert_eq!(report.changed, ["n.t3"]);
        let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
        assert_eq!(
            pool.waiting,
            [2, 1],
            "b, three times a's weight, goes first"
        );

        // t2 leaves the configuration: out of the line, and its state stays.
        let mut without_t2 = (*tenant_config("b")).clone();
        without_t2.tables.retain(|table| table.table != "n.t2");
        let report = pipeline.apply(&Arc::new(without_t2)).await.unwrap();
        assert_eq!(report.removed, ["n.t2"]);
        let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
        assert_eq!(pool.waiting, [2]);
        assert_eq!(
            pipeline
                .accumulator(1)
                .send(GetStatus)
                .await
                .unwrap()
                .pending_files,
            1
        );

        let done = || {
            EngineOutput::from_stdout("rewritten_data_files_count\tadded_data_files_count\n1\t1\n")
        };
        let _ = runner.release.lock().unwrap().remove(0).send(done());
        wait_for("t3's run", || runner.tables.lock().unwrap().len() == 2).await;
        let _ = runner.release.lock().unwrap().remove(0).send(done());
        pipeline.pool.send(WaitIdle).await.unwrap();
        assert_eq!(
            *runner.tables.lock().unwrap(),
            ["n.t1", "n.t3"],
            "t2 never ran"
        );
    }

    /// Issue 15 as a new user tried it: tenants `a` (5 tables) and `b` (1), one slot, all due at
    /// once. `a`'s first run takes the slot; `b`'s table runs next, not after `a`'s second.
    #[actix::test]
    async fn with_one_slot_the_other_tenants_table_runs_second() {
        let mut text = "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 1\n[spark]\nretry_attempts = 1\nmax_concurrent = 1\n[tenants.a]\n[tenants.b]\n"
            .to_string();
        let tables = [
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("a4", "a"),
            ("a5", "a"),
            ("b", "b"),
        ];
        for (prefix, tenant) in tables {
            text.push_str(&format!(
                "[[tables]]\ntable = \"n.{prefix}\"\nbucket = \"lake\"\nprefix = \"{prefix}/\"\ntenant = \"{tenant}\"\n"
            ));
        }
        let config = Arc::new(Config::from_toml_str(&text).unwrap());
        let runner = Arc::new(Gated::default());
        let pipeline = pipeline_of(config, runner.clone());
        let records: Vec<String> = tables
            .iter()
            .map(|(prefix, _)| format!(r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{prefix}/data/f.parquet","size":10}}}}}}"#))
            .collect();
        pipeline
            .router
            .send(Ingest {
                messages: vec![InboundMessage {
                    id: "m".to_string(),
                    body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
                }],
            })
            .await
            .unwrap()
            .unwrap();
        let done = || {
            EngineOutput::from_stdout("rewritten_data_files_count\tadded_data_files_count\n1\t1\n")
        };
        for started in 1..=tables.len() {
            wait_for("the next run", || {
                runner.tables.lock().unwrap().len() == started
            })
            .await;
            let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
            assert_eq!(pool.running.len(), 1, "one slot");
            let _ = runner.release.lock().unwrap().remove(0).send(done());
        }
        pipeline.pool.send(WaitIdle).await.unwrap();
        let mut order = runner.tables.lock().unwrap().clone();
        // The tables became due in the same settle, on different worker threads: which of `a`'s
        // asked first is up to the threads; `b` runs second either way.
        assert_eq!(order[1], "n.b", "{order:?}");
        order.remove(1);
        order.sort();
        assert_eq!(order, ["n.a1", "n.a2", "n.a3", "n.a4", "n.a5"]);
    }

    fn pipeline(runner: Arc<dyn SparkRunner>) -> Pipeline {
        let config = Config::from_toml_str(
            "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 3\n[spark]\nretry_attempts = 1\n[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\n",
        )
        .unwrap();
        pipeline_of(Arc::new(config), runner)
    }

    /// A compacting pipeline of `config` on a memory store, its runs going to `runner`.
    fn pipeline_of(config: Arc<Config>, runner: Arc<dyn SparkRunner>) -> Pipeline {
        start_pipeline(
            Arc::new(MemoryStore::new()),
            Arc::new(FakeClock::new(1_714_564_800_000)),
            Compaction {
                settings: CompactionSettings::from_config(config),
                runner,
                enabled: true,
            },
            Arc::new(Metrics::default()),
            None,
        )
        .unwrap()
    }

    #[actix::test]
    async fn one_run_per_table_and_intake_goes_on_while_it_runs() {
        let runner = Arc::new(Gated::default());
        let pipeline = pipeline(runner.clone());
        ingest(&pipeline, 0..3).await;
        wait_for("the run to start", || {
            runner.started.load(Ordering::SeqCst) == 1
        })
        .await;
        // More crossings while the run is in flight: counted at once, no second run.
        ingest(&pipeline, 3..6).await;
        ingest(&pipeline, 6..9).await;
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        assert_eq!(
            status.pending_files, 6,
            "files landing during the run are counted and stay pending"
        );
        assert_eq!(status.in_flight_run.as_ref().unwrap().claimed_files, 3);
        assert_eq!(
            runner.started.load(Ordering::SeqCst),
            1,
            "exactly one run for the table"
        );

        let done =
            EngineOutput::from_stdout("rewritten_data_files_count\tadded_data_files_count\n3\t1\n");
        runner
            .release
            .lock()
            .unwrap()
            .remove(0)
            .send(done.clone())
            .unwrap();
        // The 6 files that landed during the run make the table due again: the next run claims them.
        wait_for("the next run", || {
            runner.started.load(Ordering::SeqCst) == 2
        })
        .await;
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        assert_eq!(status.last_run.as_ref().unwrap().outcome, "success");
        assert_eq!(status.in_flight_run.as_ref().unwrap().claimed_files, 6);
        runner.release.lock().unwrap().remove(0).send(done).unwrap();
        pipeline.pool.send(WaitIdle).await.unwrap();
    }

    /// Found by the soak benchmark: a run's start deferred behind an intake batch being committed
    /// was followed by a second request the pool dropped (the table still counted as running),
    /// and the table stayed due with nobody to run it. Under continuous intake every due table
    /// must keep getting runs.
    #[actix::test]
    async fn a_table_under_continuous_intake_keeps_getting_runs() {
        let pipeline = pipeline(Arc::new(StandInRunner::succeeding(3)));
        futures::future::join_all((0..4u32).map(|sender| {
            let pipeline = pipeline.clone();
            async move {
                for batch in 0..150u32 {
                    let key = sender * 10_000 + batch;
                    ingest(&pipeline, key..key + 1).await;
                }
            }
        }))
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            pipeline.pool.send(WaitIdle).await.unwrap();
            let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
            if !status.due && status.in_flight_run.is_none() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the table is due with nobody running it: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[actix::test]
    async fn a_failed_run_is_not_retried_on_every_new_event() {
        let runner = Arc::new(Gated::default());
        let pipeline = pipeline(runner.clone());
        ingest(&pipeline, 0..3).await;
        wait_for("the run to start", || {
            runner.started.load(Ordering::SeqCst) == 1
        })
        .await;
        let failed = EngineOutput {
            exit_code: 1,
            stderr: "NoSuchTableException: n.t".to_string(),
            ..EngineOutput::default()
        };
        runner
            .release
            .lock()
            .unwrap()
            .remove(0)
            .send(failed)
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pipeline
            .accumulator(0)
            .send(GetStatus)
            .await
            .unwrap()
            .last_run
            .is_none()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the failure never settled"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for batch in 0..5 {
            ingest(&pipeline, 10 + batch * 3..13 + batch * 3).await;
        }
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        assert_eq!(
            status.pending_files, 18,
            "the failed run's files are pending again, with the new ones"
        );
        assert_eq!(status.consecutive_failures, 1);
        assert!(status.next_attempt_time.is_some());
        assert_eq!(
            runner.started.load(Ordering::SeqCst),
            1,
            "back-off: new events start no run"
        );
    }
}
