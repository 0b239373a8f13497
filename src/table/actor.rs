//! The table accumulator actor: the single writer of one table's state. It counts what the router
//! stages, asks the executor pool for a run when the table is due, claims the pending files when a
//! slot is free, and settles the table when the run ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler,
    Message, SpawnHandle, WrapFuture,
};
use tracing::{error, info, warn};

use crate::base::clock::Clock;
use crate::intake::routing::TableIndex;
use crate::messages::{
    Claimed, Counted, Forget, GetStatus, NotClaimed, RecoverRun, Reload, RequestCompaction,
    RunFinished, Settle, Stage, StartRun, Tick, UpdateSpec,
};
use crate::model::report::RunOutcome;
use crate::model::task::Trigger;
use crate::ops::status::table_status;
use crate::runs::executor::CompactionPool;
use crate::store::{StateStore, StoreError};
use crate::table::accumulator::{
    object_keys, prepare_settlement, Accumulator, FailureBackoff, Settlement, SettlementStale,
    Staged,
};
use crate::table::board::{StatusBoard, TableSummary};
use crate::table::handle::SlotCell;
use crate::table::policy::DueReason;
use crate::table::waker::{WakeAt, Waker};

/// How long a settlement that could not be committed waits before it is tried again.
const SETTLE_RETRY: Duration = Duration::from_secs(5);

/// A settlement as its preparation off the actor ended (`None`: the run holds no claim).
type PreparedSettlement = Result<Option<Settlement>, StoreError>;

/// Work that must wait until the batch being staged is settled (a run's start or end: rare).
#[allow(clippy::large_enum_variant)]
enum Deferred {
    Start(StartRun),
    Finish(RunFinished),
}

pub struct TableAccumulatorActor {
    index: TableIndex,
    accumulator: Accumulator,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    /// `None`: count only, never compact.
    pool: Option<Addr<CompactionPool>>,
    backoff: FailureBackoff,
    timer: Option<SpawnHandle>,
    reported_due: Option<DueReason>,
    deferred: VecDeque<Deferred>,
    /// When this actor started: the first periodic reconcile counts from here.
    started_millis: i64,
    /// `false` once a reload removed the table: it counts nothing new and asks for no runs.
    active: bool,
    /// A commit of this actor's that changes `seen` entries (a settled run, a forget) may have
    /// happened after the router looked the next group's keys up: the next [`Stage`] looks its
    /// keys up again instead of using the router's answers.
    lookups_stale: bool,
    /// A run's settlement is being prepared on the blocking pool (the table goes on counting).
    preparing: bool,
    /// A prepared settlement, applied as soon as no change is being committed.
    prepared: Option<(Arc<RunFinished>, PreparedSettlement)>,
    /// The sequence numbers the next settlement reserves, at least (the last one needed more).
    reserve_hint: Option<u64>,
    /// Status requests that wait for the settlement in progress (a status read after a run's
    /// end shows it settled, as `icepack compact` expects).
    settled_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Where the table's summary is published at every evaluation (listing, tenants, metrics).
    board: Option<Arc<StatusBoard>>,
    /// The table's slot, when this accumulator may stop for idleness ([`crate::table::handle`]).
    slot: Option<Idling>,
    /// Messages received through the table's handle.
    received: u64,
    /// Replies in flight that are not atomic (a status, a forget): no stopping before they end.
    busy: usize,
    /// The table's state is read from the store when this actor starts, on its own thread (a
    /// lazy start: whoever sent the first message does not wait for the read).
    load_on_start: bool,
    /// The pool was asked for a run and has not started it (nor ended the table's run, which
    /// makes it ignore requests): its start must find this actor.
    asked: bool,
}

/// How an accumulator stops when its table is idle.
struct Idling {
    cell: Arc<SlotCell>,
    after: Duration,
    waker: Option<Addr<Waker>>,
    live: prometheus_client::metrics::gauge::Gauge,
    /// The check armed, and the messages received when it was.
    timer: Option<(SpawnHandle, u64)>,
    /// The slot granted the stop: this accumulator handles nothing more.
    retired: bool,
}

/// The accumulator's own check whether its table has been idle long enough to stop.
#[derive(Message)]
#[rtype(result = "()")]
struct Retire;

impl TableAccumulatorActor {
    pub fn new(
        index: TableIndex,
        accumulator: Accumulator,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        pool: Option<Addr<CompactionPool>>,
        backoff: FailureBackoff,
    ) -> Self {
        let started_millis = clock.now_millis();
        TableAccumulatorActor {
            index,
            accumulator,
            store,
            clock,
            pool,
            backoff,
            timer: None,
            reported_due: None,
            started_millis,
            deferred: VecDeque::new(),
            active: true,
            lookups_stale: false,
            preparing: false,
            prepared: None,
            reserve_hint: None,
            settled_waiters: Vec::new(),
            board: None,
            slot: None,
            received: 0,
            busy: 0,
            asked: false,
            load_on_start: false,
        }
    }

    /// Reads the table's state from the store as it starts (it holds [`Accumulator::unloaded`]
    /// until then); a read that fails stops it, and the supervisor starts it again.
    pub fn loading_on_start(mut self) -> Self {
        self.load_on_start = true;
        self
    }

    /// Counts the first periodic reconcile of a table never read from `millis` (the pipeline's
    /// start) rather than from this actor's.
    pub fn started_at(mut self, millis: i64) -> Self {
        self.started_millis = self.started_millis.min(millis);
        self
    }

    /// Stops once its table has been idle for `idle_after` (`None`: never), leaving `cell`
    /// empty and telling `waker` when the table's scheduled work is due; `live` counts the
    /// accumulators running.
    pub fn in_slot(
        mut self,
        cell: Arc<SlotCell>,
        idle_after: Option<Duration>,
        waker: Option<Addr<Waker>>,
        live: prometheus_client::metrics::gauge::Gauge,
    ) -> Self {
        self.slot = idle_after.map(|after| Idling {
            cell,
            after,
            waker,
            live,
            timer: None,
            retired: false,
        });
        self
    }

    /// A restarted accumulator: a commit its predecessor sent may still land, so its first
    /// [`Stage`] looks the keys up itself.
    pub fn restarted(mut self) -> Self {
        self.lookups_stale = true;
        self
    }

    /// Publishes the table's summary to `board` at every evaluation.
    pub fn publishing_to(mut self, board: Arc<StatusBoard>) -> Self {
        self.board = Some(board);
        self
    }

    /// Whether the current configuration has the table (a restarted accumulator of a removed
    /// table counts nothing new and asks for no runs).
    pub fn with_active(mut self, active: bool) -> Self {
        self.active = active;
        self
    }

    fn table(&self) -> &str {
        &self.accumulator.spec().table
    }

    /// Checks the thresholds, asks for a run when due, arms the timer for the next moment
    /// something changes by itself (max-wait reached, back-off over), and the check for
    /// idleness when the table has nothing to do.
    fn evaluate(&mut self, ctx: &mut Context<Self>) {
        self.decide(ctx);
        self.arm_retire(ctx);
    }

    /// Whether this accumulator may stop now: its table at rest, nothing asked of the pool,
    /// nothing in flight.
    fn may_retire(&self) -> bool {
        self.slot.is_some()
            && !self.asked
            && self.busy == 0
            && !self.preparing
            && self.prepared.is_none()
            && self.deferred.is_empty()
            && self.settled_waiters.is_empty()
            && self.accumulator.at_rest(self.clock.now_millis())
    }

    /// Arms the idleness check, unless it is armed already or the table has work.
    fn arm_retire(&mut self, ctx: &mut Context<Self>) {
        if !self.may_retire() {
            return;
        }
        let received = self.received;
        if let Some(slot) = self.slot.as_mut().filter(|slot| slot.timer.is_none()) {
            slot.timer = Some((ctx.notify_later(Retire, slot.after), received));
        }
    }

    fn decide(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_millis();
        let due = self.accumulator.due(now);
        if due != self.reported_due {
            let pending = &self.accumulator.snapshot().state.pending;
            match due {
                Some(reason) => info!(
                    table = %self.table(),
                    reason = reason.as_str(),
                    pending_files = pending.files,
                    pending_bytes = pending.bytes,
                    "table is due for compaction"
                ),
                None => info!(table = %self.table(), "table is no longer due"),
            }
            self.reported_due = due;
        }
        if let Some(board) = &self.board {
            board.publish(
                self.table(),
                TableSummary::of(self.accumulator.snapshot(), due.is_some()),
            );
        }
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if self.accumulator.claim().is_some() || !self.active {
            return;
        }
        let step = self.accumulator.next_step(now, self.started_millis);
        if let Some(trigger) = step.maintenance {
            if self.ask(trigger, true) {
                return;
            }
        }
        if let Some(reason) = step.compaction {
            self.ask(Trigger::from(reason), false);
        }
        let wake_at = step.wake_at;
        if let Some(wake_at) = wake_at {
            let delay = Duration::from_millis(wake_at.saturating_sub(now).max(0) as u64);
            self.timer = Some(ctx.notify_later(Tick, delay));
        }
    }

    /// Asks the pool for a run (again: the pool ignores a request of a table that waits or runs
    /// already). `asked` only keeps the accumulator from stopping before the pool's answer.
    /// `false` when it counts only.
    fn ask(&mut self, trigger: Trigger, force: bool) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        self.asked = true;
        pool.do_send(RequestCompaction {
            table: self.index,
            trigger,
            force,
        });
        true
    }

    /// Whether a run's end is being settled (or waits to be).
    fn settling(&self) -> bool {
        self.preparing
            || self.prepared.is_some()
            || self
                .deferred
                .iter()
                .any(|deferred| matches!(deferred, Deferred::Finish(_)))
    }

    /// Answers the status requests that waited for a settlement, once none is in progress.
    fn answer_settled_waiters(&mut self) {
        if !self.settling() {
            for waiter in self.settled_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Carries on with what waited: a prepared settlement first, then runs' starts and ends, in
    /// order — none while a change is being committed or a settlement is being prepared.
    fn run_deferred(&mut self, ctx: &mut Context<Self>) {
        if self.accumulator.has_staged_change() || self.preparing {
            return;
        }
        if let Some((finished, prepared)) = self.prepared.take() {
            self.apply_settlement(finished, prepared, ctx);
            return;
        }
        while !self.accumulator.has_staged_change() && !self.preparing {
            match self.deferred.pop_front() {
                Some(Deferred::Start(start)) => self.start_run(start, ctx),
                Some(Deferred::Finish(finished)) => self.finish_run(finished, ctx),
                None => break,
            }
        }
    }

    /// Claims the pending files for the run and commits the claim before the engine may start.
    /// Until the claim is settled the pool holds the table's slot and ignores its requests; the
    /// evaluation after it (claimed or not) asks again if the table is still due.
    fn start_run(&mut self, start: StartRun, ctx: &mut Context<Self>) {
        let Some(pool) = self.pool.clone() else {
            return;
        };
        let now = self.clock.now_millis();
        let index = self.index;
        if !self.active {
            pool.do_send(NotClaimed {
                table: index,
                run_id: start.run_id,
            });
            return;
        }
        let Some((ops, ticket)) =
            self.accumulator
                .begin_claim(&start.run_id, start.trigger, now, start.force)
        else {
            pool.do_send(NotClaimed {
                table: index,
                run_id: start.run_id,
            });
            self.evaluate(ctx);
            return;
        };
        let store = self.store.clone();
        let commit = async move { tokio::task::spawn_blocking(move || store.commit(ops)).await };
        ctx.wait(commit.into_actor(self).map(move |result, actor, ctx| {
            let committed = matches!(result, Ok(Ok(())));
            actor.accumulator.settle(committed);
            if committed {
                info!(table = %actor.table(), run_id = %ticket.run_id, files = ticket.files, bytes = ticket.bytes, trigger = %ticket.trigger, "claimed pending files for a run");
                pool.do_send(Claimed { table: index, ticket });
            } else {
                error!(table = %actor.table(), run_id = %ticket.run_id, result = ?result.map(|inner| inner.err()), "cannot commit the claim; the run does not start");
                pool.do_send(NotClaimed { table: index, run_id: ticket.run_id });
            }
            actor.evaluate(ctx);
        }));
    }

    /// Settles the table from the run's outcome, in two steps so that a settlement of any size
    /// never holds up the intake: prepared on the blocking pool from the table as it is now —
    /// reading the file log and rebuilding it from the truth — while this actor goes on staging
    /// what the router brings, then applied here with what was counted meanwhile and committed
    /// (the only part the intake waits for). Retried until it is durable.
    fn finish_run(&mut self, finished: RunFinished, ctx: &mut Context<Self>) {
        let finished = Arc::new(finished);
        let spec = self.accumulator.spec_arc();
        let store = self.store.clone();
        let now = self.clock.now_millis();
        let backoff = self.backoff;
        let reserve = self
            .accumulator
            .settlement_reserve(&finished.outcome)
            .max(self.reserve_hint.take().unwrap_or(0));
        let base = self.accumulator.begin_settlement(reserve);
        self.preparing = true;
        let preparing = finished.clone();
        let prepare = async move {
            tokio::task::spawn_blocking(move || {
                prepare_settlement(
                    &spec,
                    &base,
                    store.as_ref(),
                    &preparing.run_id,
                    &preparing.outcome,
                    preparing.ran_on.as_ref(),
                    now,
                    backoff,
                )
            })
            .await
            .map_err(|error| StoreError::Read(format!("the settlement task failed: {error}")))
            .and_then(|prepared| prepared)
        };
        ctx.spawn(prepare.into_actor(self).map(move |prepared, actor, ctx| {
            actor.preparing = false;
            actor.prepared = Some((finished, prepared));
            actor.run_deferred(ctx);
        }));
    }

    /// Applies a prepared settlement with what the table counted meanwhile and commits it; the
    /// table handles nothing else until the commit is done.
    fn apply_settlement(
        &mut self,
        finished: Arc<RunFinished>,
        prepared: PreparedSettlement,
        ctx: &mut Context<Self>,
    ) {
        let settlement = match prepared {
            Ok(Some(settlement)) => settlement,
            Ok(None) => {
                self.accumulator.abort_settlement();
                warn!(table = %self.table(), run_id = %finished.run_id, "outcome of a run that holds no claim; ignored");
                self.evaluate(ctx);
                self.run_deferred(ctx);
                return self.answer_settled_waiters();
            }
            Err(error) => {
                self.accumulator.abort_settlement();
                error!(table = %self.table(), run_id = %finished.run_id, %error, "cannot settle the run; retrying");
                ctx.notify_later(RunFinished::clone(&finished), SETTLE_RETRY);
                self.evaluate(ctx);
                self.run_deferred(ctx);
                return self.answer_settled_waiters();
            }
        };
        let now = self.clock.now_millis();
        let (mut ops, change) = match self.accumulator.finish_settlement(settlement, now) {
            Ok(applied) => applied,
            Err(stale) => {
                // The state was replaced (a reload) or the files counted meanwhile took numbers
                // the rebuilt log needs: prepared again, from the table as it is now.
                info!(table = %self.table(), run_id = %finished.run_id, ?stale, "the table changed under the run's settlement; settling it again");
                if let SettlementStale::Reserve(needed) = stale {
                    self.reserve_hint = Some(needed);
                }
                self.deferred
                    .push_front(Deferred::Finish(RunFinished::clone(&finished)));
                return self.run_deferred(ctx);
            }
        };
        let mut sampler = self.accumulator.sampler();
        crate::table::accumulator::sample_commit(
            &mut sampler,
            &self.accumulator.spec().table,
            &mut ops,
            now,
        );
        let store = self.store.clone();
        let commit = async move { tokio::task::spawn_blocking(move || store.commit(ops)).await };
        ctx.wait(commit.into_actor(self).map(move |result, actor, ctx| {
            // The settlement may have written `seen` entries (the run's own outputs).
            actor.lookups_stale = true;
            match result {
                Ok(Ok(())) => {
                    actor.accumulator.adopt(change);
                    actor.accumulator.set_sampler(sampler);
                    let state = &actor.accumulator.snapshot().state;
                    match &finished.outcome {
                        RunOutcome::Success { report, .. } => info!(
                            table = %actor.table(),
                            run_id = %finished.run_id,
                            rewritten = report.result.rewritten_data_files_count,
                            added = report.result.added_data_files_count,
                            pending_files = state.pending.files,
                            "run settled: claimed files compacted"
                        ),
                        RunOutcome::Failure { class, .. } => warn!(
                            table = %actor.table(),
                            run_id = %finished.run_id,
                            class = class.as_str(),
                            pending_files = state.pending.files,
                            consecutive_failures = state.consecutive_failures,
                            next_attempt = ?state.next_attempt_millis.map(crate::base::clock::format_rfc3339),
                            "run settled: files pending again, backing off"
                        ),
                    }
                }
                failed => {
                    error!(table = %actor.table(), run_id = %finished.run_id, result = ?failed.map(|inner| inner.err()), "cannot commit the run's settlement; retrying");
                    ctx.notify_later(RunFinished::clone(&finished), SETTLE_RETRY);
                }
            }
            actor.evaluate(ctx);
            actor.run_deferred(ctx);
            actor.answer_settled_waiters();
        }));
    }
}

impl Actor for TableAccumulatorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(slot) = &self.slot {
            slot.live.inc();
            slot.cell.enter(&self.accumulator.spec().table);
        }
        if self.load_on_start {
            self.load_on_start = false;
            match Accumulator::load(self.accumulator.spec_arc(), self.store.as_ref()) {
                Ok(loaded) => self.accumulator = loaded,
                Err(error) => {
                    error!(table = %self.table(), %error, "cannot read the table's state to start its accumulator; the supervisor tries again");
                    return ctx.stop();
                }
            }
        }
        if let (Some(ticket), Some(pool)) = (self.accumulator.claim_ticket(), &self.pool) {
            info!(table = %self.table(), run_id = %ticket.run_id, "a run was in flight when icepack stopped; recovering it");
            pool.do_send(RecoverRun {
                table: self.index,
                ticket,
            });
        }
        self.evaluate(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if let Some(slot) = &self.slot {
            slot.live.dec();
            if !slot.retired {
                slot.cell.leave();
            }
        }
    }
}

/// Every message sent through the table's handle: counted, then handled as itself.
macro_rules! counted {
    ($($message:ty),* $(,)?) => {$(
        impl Handler<Counted<$message>> for TableAccumulatorActor {
            type Result = <Self as Handler<$message>>::Result;

            fn handle(
                &mut self,
                Counted(message): Counted<$message>,
                ctx: &mut Context<Self>,
            ) -> Self::Result {
                self.received += 1;
                <Self as Handler<$message>>::handle(self, message, ctx)
            }
        }
    )*};
}

counted!(
    Stage,
    Settle,
    StartRun,
    RunFinished,
    Tick,
    UpdateSpec,
    Forget,
    Reload,
    GetStatus
);
#[cfg(test)]
counted!(Crash, Idleness);

impl Handler<Retire> for TableAccumulatorActor {
    type Result = ();

    /// Stops when the table stayed idle through the whole check (no message received since it
    /// was armed) and the slot grants it: every message sent through the handle was received.
    fn handle(&mut self, _message: Retire, ctx: &mut Context<Self>) {
        let Some(armed) = self.slot.as_mut().and_then(|slot| slot.timer.take()) else {
            return;
        };
        if !self.may_retire() {
            return;
        }
        let received = self.received;
        let Some(slot) = self.slot.as_mut() else {
            return;
        };
        if armed.1 != received || !slot.cell.retire(&ctx.address(), received) {
            return self.arm_retire(ctx);
        }
        slot.retired = true;
        let slot = &self.slot.as_ref().expect("the slot just granted the stop");
        let wake_at = self
            .accumulator
            .scheduled_at(self.started_millis)
            .filter(|_| self.active && self.pool.is_some());
        if let (Some(at), Some(waker)) = (wake_at, &slot.waker) {
            waker.do_send(WakeAt {
                table: self.index,
                at,
            });
        }
        crate::table::handle::log_retired(self.table(), wake_at);
        ctx.stop();
    }
}

impl Handler<Stage> for TableAccumulatorActor {
    /// Atomic: nothing else (a run's start, a settle) is handled while the keys are looked up.
    type Result = AtomicResponse<Self, Result<Staged, StoreError>>;

    /// Staging is pure computation on the router's answers; only when they may be stale (or
    /// missing) are the keys looked up, on the blocking pool.
    fn handle(&mut self, message: Stage, _ctx: &mut Context<Self>) -> Self::Result {
        if crate::base::failpoint::accumulator_panics(self.table()) {
            panic!(
                "failpoint accumulator.stage_panic: an invariant of {} does not hold",
                self.table()
            );
        }
        let answers = message.seen.filter(|_| !self.lookups_stale);
        self.lookups_stale = false;
        let candidates = message.candidates;
        if let Some(seen) = answers {
            let now = self.clock.now_millis();
            let staged = self.accumulator.stage_looked_up(candidates, seen, now);
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(staged))));
        }
        let store = self.store.clone();
        let lookup = async move {
            tokio::task::spawn_blocking(move || {
                let seen = store.seen(&object_keys(&candidates));
                (candidates, seen)
            })
            .await
            .map_err(|error| StoreError::Read(error.to_string()))
        };
        AtomicResponse::new(Box::pin(lookup.into_actor(self).map(
            |looked_up, actor, _ctx| {
                let staged = looked_up.and_then(|(candidates, seen)| {
                    let now = actor.clock.now_millis();
                    Ok(actor.accumulator.stage_looked_up(candidates, seen?, now))
                });
                staged.inspect_err(
                    |error| warn!(table = %actor.table(), %error, "cannot stage records"),
                )
            },
        )))
    }
}

impl Handler<Settle> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: Settle, ctx: &mut Context<Self>) {
        self.accumulator.settle(message.committed);
        self.run_deferred(ctx);
        self.evaluate(ctx);
    }
}

impl Handler<StartRun> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: StartRun, ctx: &mut Context<Self>) {
        self.asked = false;
        self.deferred.push_back(Deferred::Start(message));
        self.run_deferred(ctx);
    }
}

impl Handler<RunFinished> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: RunFinished, ctx: &mut Context<Self>) {
        // The pool ignored what this actor asked while it ran the table (a request made as the
        // claim was being committed): nothing it was asked waits for a start now.
        self.asked = false;
        self.deferred.push_back(Deferred::Finish(message));
        self.run_deferred(ctx);
    }
}

impl Handler<Tick> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, _message: Tick, ctx: &mut Context<Self>) {
        self.timer = None;
        self.evaluate(ctx);
    }
}

impl Handler<UpdateSpec> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: UpdateSpec, ctx: &mut Context<Self>) {
        if self.active != message.active {
            info!(
                table = %self.table(),
                pending_files = self.accumulator.snapshot().state.pending.files,
                "{}",
                if message.active { "table is configured again" } else { "table removed from the configuration: its state is kept, no more runs" }
            );
        }
        self.accumulator.set_spec(message.spec);
        self.active = message.active;
        self.reported_due = None;
        self.evaluate(ctx);
    }
}

impl Handler<Forget> for TableAccumulatorActor {
    type Result = actix::ResponseActFuture<Self, Result<crate::store::ForgetSummary, String>>;

    fn handle(&mut self, _message: Forget, _ctx: &mut Context<Self>) -> Self::Result {
        let refusal = if self.active {
            Some("the table is configured: remove it from the configuration and reload first")
        } else if self.accumulator.claim().is_some() {
            Some("the table has a run in flight: wait until it ends")
        } else if self.accumulator.has_staged_change()
            || !self.deferred.is_empty()
            || self.preparing
            || self.prepared.is_some()
        {
            Some("the table has a change being committed: try again")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            return Box::pin(actix::fut::ready(Err(refusal.to_string())));
        }
        let store = self.store.clone();
        let spec = self.accumulator.spec_arc();
        self.busy += 1;
        let forget = async move {
            tokio::task::spawn_blocking(move || {
                let summary = store.forget_table(&spec.table)?;
                Ok::<_, StoreError>((summary, Accumulator::load(spec, store.as_ref())?))
            })
            .await
        };
        Box::pin(forget.into_actor(self).map(|result, actor, ctx| {
            actor.busy -= 1;
            actor.arm_retire(ctx);
            // Even a forget that failed may have deleted some of the `seen` entries.
            actor.lookups_stale = true;
            match result {
                Ok(Ok((summary, fresh))) => {
                    info!(table = %actor.table(), ?summary, "forgot the table's stored state");
                    actor.accumulator = fresh;
                    actor.reported_due = None;
                    Ok(summary)
                }
                Ok(Err(error)) => Err(error.to_string()),
                Err(error) => Err(error.to_string()),
            }
        }))
    }
}

impl Handler<Reload> for TableAccumulatorActor {
    /// Atomic: nothing this actor commits (a run's settlement, a claim) lands between the read of
    /// the stored state and its adoption — such a state would be older than the one in memory
    /// (a settled claim restored). The store recovery that reloads has paused the intake anyway.
    type Result = AtomicResponse<Self, Result<(), StoreError>>;

    /// The durable state replaces the one in memory. A claim found there that this actor never
    /// adopted (its commit reported failed, yet it reached the disk) is recovered like one found
    /// at start-up: the pool learns of it and settles it. A settlement being prepared meanwhile
    /// is prepared again from the adopted state.
    fn handle(&mut self, _message: Reload, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let spec = self.accumulator.spec_arc();
        let load = async move {
            tokio::task::spawn_blocking(move || Accumulator::load(spec, store.as_ref()))
                .await
                .map_err(|error| StoreError::Read(error.to_string()))?
        };
        AtomicResponse::new(Box::pin(load.into_actor(self).map(|loaded, actor, ctx| {
            let fresh = loaded?;
            if actor.accumulator.has_staged_change() {
                return Err(StoreError::Unavailable(
                    "a change is being committed; reload again".to_string(),
                ));
            }
            let unknown_claim = actor.accumulator.claim().is_none() && fresh.claim().is_some();
            if fresh.snapshot() != actor.accumulator.snapshot() {
                warn!(table = %actor.table(), "the stored state differs from the one in memory after a failed commit; the stored one is used");
            }
            actor.accumulator = fresh;
            actor.reported_due = None;
            if unknown_claim {
                if let (Some(ticket), Some(pool)) = (actor.accumulator.claim_ticket(), &actor.pool) {
                    info!(table = %actor.table(), run_id = %ticket.run_id, "a claim reported failed reached the store; recovering its run");
                    pool.do_send(RecoverRun {
                        table: actor.index,
                        ticket,
                    });
                }
            }
            actor.evaluate(ctx);
            Ok(())
        })))
    }
}

/// Tests: what keeps the accumulator from stopping.
#[cfg(test)]
#[derive(Debug, actix::Message)]
#[rtype(result = "String")]
pub struct Idleness;

#[cfg(test)]
impl Handler<Idleness> for TableAccumulatorActor {
    type Result = String;

    fn handle(&mut self, _message: Idleness, _ctx: &mut Context<Self>) -> String {
        format!(
            "asked {} busy {} preparing {} prepared {} deferred {} waiters {} at_rest {} received {} armed {:?}",
            self.asked,
            self.busy,
            self.preparing,
            self.prepared.is_some(),
            self.deferred.len(),
            self.settled_waiters.len(),
            self.accumulator.at_rest(self.clock.now_millis()),
            self.received,
            self.slot.as_ref().map(|slot| slot.timer.as_ref().map(|timer| timer.1)),
        )
    }
}

/// Tests: the accumulator panics, as a violated invariant would.
#[cfg(test)]
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub struct Crash;

#[cfg(test)]
impl Handler<Crash> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, _message: Crash, _ctx: &mut Context<Self>) {
        panic!("an invariant of {} does not hold (test)", self.table());
    }
}

impl Handler<GetStatus> for TableAccumulatorActor {
    type Result = actix::ResponseActFuture<Self, crate::ops::status::TableStatus>;

    /// The table as it is, once a run's end being settled is settled (the intake goes on).
    fn handle(&mut self, _message: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        let settled = self.settling().then(|| {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            self.settled_waiters.push(sender);
            receiver
        });
        let wait = async move {
            if let Some(settled) = settled {
                let _ = settled.await;
            }
        };
        self.busy += 1;
        Box::pin(wait.into_actor(self).map(|(), actor, ctx| {
            actor.busy -= 1;
            actor.arm_retire(ctx);
            table_status(
                actor.accumulator.spec(),
                actor.accumulator.snapshot(),
                actor.clock.now_millis(),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::{FakeClock, TokioClock};
    use crate::config::TableSpec;
    use crate::store::MemoryStore;
    use crate::table::accumulator::Candidate;
    use crate::table::policy::Thresholds;

    const BACKOFF: FailureBackoff = FailureBackoff {
        initial_millis: 60_000,
        max_millis: 3_600_000,
    };

    fn spec() -> Arc<TableSpec> {
        Arc::new(TableSpec::for_tests(
            "n.t",
            "b",
            "t/",
            Thresholds {
                small_file_bytes: 100,
                min_files: 10,
                min_total_bytes: 1_000,
                max_wait_millis: Some(60_000),
            },
        ))
    }

    /// A table's actor on its own (no pool: it counts and settles, never starts a run).
    fn unpooled(
        accumulator: Accumulator,
        store: &Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
    ) -> TableAccumulatorActor {
        TableAccumulatorActor::new(0, accumulator, store.clone(), clock, None, BACKOFF)
    }

    #[actix::test]
    async fn max_wait_is_enforced_by_the_timer_without_new_events() {
        // Tokio's time stands still until the test moves it; the actor reads that same time.
        tokio::time::pause();
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let clock = TokioClock::starting_at(1_000_000);
        let accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let actor = unpooled(accumulator, &store, Arc::new(clock)).start();
        let mut staged = actor
            .send(Stage {
                candidates: ["t/a.parquet", "t/b.parquet"]
                    .map(|key| Candidate {
                        bucket: "b".to_string(),
                        key: key.to_string(),
                        size: 5,
                        event_millis: 1_000_000,
                        partition: String::new(),
                        kind: Default::default(),
                    })
                    .to_vec(),
                seen: None,
            })
            .await
            .unwrap()
            .unwrap();
        store.commit(std::mem::take(&mut staged.ops)).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();
        assert!(!actor.send(GetStatus).await.unwrap().due);

        // Nothing arrives: the timer the settle armed fires at max_wait (the files landed at
        // 1_000_000, the clock's start), not a millisecond before.
        tokio::time::advance(Duration::from_millis(59_999)).await;
        assert!(!actor.send(GetStatus).await.unwrap().due);
        tokio::time::advance(Duration::from_millis(1)).await;
        let status = actor.send(GetStatus).await.unwrap();
        assert!(status.due);
        assert_eq!(status.due_reason, Some("max_wait"));
        assert_eq!(status.pending_files, 2);
    }

    /// The series follows the table's commits: files counted raise it (claimed ones still wait),
    /// a run's settlement, committed off the actor, brings it down; a point a minute.
    #[actix::test]
    async fn the_series_rises_with_counted_files_and_falls_when_a_run_settles() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let clock = FakeClock::new(1_000_020_000);
        let mut accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let staged = accumulator
            .stage(
                vec![candidate("t/a.parquet"), candidate("t/b.parquet")],
                store.as_ref(),
                clock.now_millis(),
            )
            .unwrap();
        store.commit(staged.ops).unwrap();
        accumulator.settle(true);
        clock.advance(Duration::from_secs(60));
        let (ops, _) = accumulator
            .begin_claim("run-1", Trigger::Manual, clock.now_millis(), true)
            .unwrap();
        store.commit(ops).unwrap();
        accumulator.settle(true);
        let actor = unpooled(accumulator, &store, Arc::new(clock.clone())).start();
        clock.advance(Duration::from_secs(60));
        actor
            .send(RunFinished {
                run_id: "run-1".to_string(),
                ran_on: None,
                outcome: RunOutcome::Success {
                    report: Default::default(),
                    duration_millis: 5,
                    attempts: 1,
                },
            })
            .await
            .unwrap();
        actor.send(GetStatus).await.unwrap();
        let levels: Vec<(i64, u64)> = store
            .series("n.t")
            .unwrap()
            .minutes
            .into_iter()
            .map(|(minute, sample)| (minute, sample.0))
            .collect();
        let first = 1_000_020_000 / 60_000;
        // The claim moved the files, they still wait: no point for it.
        assert_eq!(levels, [(first, 2), (first + 2, 0)]);
    }

    fn candidate(key: &str) -> Candidate {
        Candidate {
            bucket: "b".to_string(),
            key: key.to_string(),
            size: 5,
            event_millis: 1_000_000,
            partition: String::new(),
            kind: Default::default(),
        }
    }

    /// The router's answers are used as they are, unless a commit of the accumulator's own may
    /// have changed the `seen` entries since (here: it was restarted, and its predecessor's
    /// commit may still land); then it looks the keys up itself.
    #[actix::test]
    async fn stale_lookups_are_made_again_and_fresh_ones_are_trusted() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let seen = |key: &str| crate::store::Op::PutSeen {
            bucket: "b".to_string(),
            key: key.to_string(),
            entry: crate::model::state::SeenEntry {
                table: "n.t".to_string(),
                first_seen_millis: 1,
                seq: None,
            },
        };
        store.commit(vec![seen("t/old.parquet")]).unwrap();
        let clock = FakeClock::new(1_000_000);
        let accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let actor = unpooled(accumulator, &store, Arc::new(clock))
            .restarted()
            .start();
        let staged = actor
            .send(Stage {
                candidates: vec![candidate("t/old.parquet"), candidate("t/new.parquet")],
                seen: Some(vec![false, false]),
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            staged.duplicate_positions,
            [0],
            "looked up again: old is known"
        );
        store.commit(staged.ops).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();

        // Nothing of its own changed `seen` since: the answers are not read again (the store
        // knows this key, the answer given says otherwise, and the answer is what counts).
        store.commit(vec![seen("t/elsewhere.parquet")]).unwrap();
        let staged = actor
            .send(Stage {
                candidates: vec![candidate("t/elsewhere.parquet")],
                seen: Some(vec![false]),
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(staged.num_counted, 1, "the answer as it was given");
        store.commit(staged.ops).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();
        assert_eq!(actor.send(GetStatus).await.unwrap().pending_files, 2);
    }

    #[actix::test]
    async fn the_timer_fires_on_its_own_at_the_deadline() {
        use crate::base::clock::SystemClock;
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let now = SystemClock.now_millis();
        let accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let actor = unpooled(accumulator, &store, Arc::new(SystemClock)).start();
        // The file's event is 300 ms short of the 60 s max-wait.
        let mut staged = actor
            .send(Stage {
                candidates: ["t/a.parquet", "t/b.parquet"]
                    .map(|key| Candidate {
                        bucket: "b".to_string(),
                        key: key.to_string(),
                        size: 5,
                        event_millis: now - 60_000 + 300,
                        partition: String::new(),
                        kind: Default::default(),
                    })
                    .to_vec(),
                seen: None,
            })
            .await
            .unwrap()
            .unwrap();
        store.commit(std::mem::take(&mut staged.ops)).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();
        assert!(!actor.send(GetStatus).await.unwrap().due);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !actor.send(GetStatus).await.unwrap().due {
            assert!(
                std::time::Instant::now() < deadline,
                "the max-wait timer never fired"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A run's outcome with a truth read: `keys` in bucket `lake`, 10 bytes each.
    fn truthful(keys: &[String]) -> RunOutcome {
        RunOutcome::Success {
            report: crate::model::report::ReportSummary {
                truth: Some(
                    keys.iter()
                        .map(|key| (format!("s3://lake/{key}"), 10))
                        .collect(),
                ),
                ..Default::default()
            },
            duration_millis: 5,
            attempts: 1,
        }
    }

    /// Two tables behind a router, their accumulators on worker threads as in the service; table
    /// `n.a` (under `a/`) holds `files` counted files claimed by run `r`. Counts only.
    fn two_tables_with_a_claim(
        files: usize,
    ) -> (
        Arc<RacingStore>,
        Vec<String>,
        Arc<crate::table::handle::TableHandles>,
        actix::Addr<crate::intake::router::IntakeRouter>,
        crate::table::workers::Workers,
    ) {
        use crate::config::Config;
        const NOW: i64 = 1_714_564_800_000;
        let racing = Arc::new(RacingStore::new());
        let store: Arc<dyn StateStore> = racing.clone();
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"n.a\"\nbucket = \"lake\"\nprefix = \"a/\"\n\
             [[tables]]\ntable = \"n.b\"\nbucket = \"lake\"\nprefix = \"b/\"\n",
        )
        .unwrap();
        let specs: Vec<Arc<TableSpec>> = config.table_specs().into_iter().map(Arc::new).collect();
        let keys: Vec<String> = (0..files)
            .map(|index| format!("a/data/f{index}.parquet"))
            .collect();
        let mut a = Accumulator::load(specs[0].clone(), store.as_ref()).unwrap();
        for chunk in keys.chunks(10_000) {
            let candidates = chunk
                .iter()
                .map(|key| Candidate {
                    bucket: "lake".to_string(),
                    key: key.clone(),
                    size: 10,
                    event_millis: NOW - 3_600_000,
                    partition: String::new(),
                    kind: Default::default(),
                })
                .collect();
            let staged = a.stage(candidates, store.as_ref(), NOW).unwrap();
            store.commit(staged.ops).unwrap();
            a.settle(true);
        }
        let (ops, _) = a.begin_claim("r", Trigger::Files, NOW, true).unwrap();
        store.commit(ops).unwrap();
        a.settle(true);
        let b = Accumulator::load(specs[1].clone(), store.as_ref()).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(FakeClock::new(NOW + 60_000));
        let workers = crate::table::workers::Workers::start(2);
        let addresses = [a, b]
            .into_iter()
            .enumerate()
            .map(|(index, accumulator)| {
                let spec = accumulator.spec_arc();
                let addr = workers.start_accumulator(
                    index,
                    TableAccumulatorActor::new(
                        index,
                        accumulator,
                        store.clone(),
                        clock.clone(),
                        None,
                        BACKOFF,
                    ),
                );
                crate::table::handle::TableHandle::fixed(index, spec, addr)
            })
            .collect();
        let map = Arc::new(crate::table::handle::TableHandles::new(
            specs,
            addresses,
            config.tenant_specs(),
        ));
        let router = crate::intake::router::IntakeRouter::new(
            map.clone(),
            store.clone(),
            clock,
            14,
            Arc::new(crate::ops::metrics::Metrics::default()),
        )
        .start();
        (racing, keys, map, router, workers)
    }

    /// Issue 31 item 8: while table `n.a` settles a run whose truth read has 100,000 files, a
    /// batch with a record for it and a batch for `n.b` only arrive. Both are counted once —
    /// `n.b`'s while the settlement is still being prepared (its read of `n.a`'s file log is held
    /// until then, at most 2 s: the old actor held the table, and the router's group with it, all
    /// along) — and the claim is settled with the new file pending beside the truth. The times
    /// are printed.
    #[actix::test]
    async fn another_tables_intake_does_not_wait_for_a_large_settlement() {
        use crate::intake::router::tests::message;
        use crate::messages::Ingest;
        const FILES: usize = 100_000;
        let (store, keys, map, router, _workers) = two_tables_with_a_claim(FILES);
        *store.hold_file_reads.lock().unwrap() =
            Some(Box::new(|events: &RacingEvents| events.released));
        let started = std::time::Instant::now();
        map.accumulator(0).do_send(RunFinished {
            run_id: "r".to_string(),
            ran_on: None,
            outcome: truthful(&keys),
        });
        let timed = |messages| {
            let report = router.send(Ingest { messages });
            async move {
                let report = report.await.unwrap().unwrap();
                (report, started.elapsed())
            }
        };
        let only_b = async {
            let counted = timed(vec![message("2", &["b/data/x.parquet"])]).await;
            let claimed = store.load_table("n.a").unwrap().state.claim.is_some();
            store.release();
            (counted, claimed)
        };
        let ((with_a, a_waited), ((only_b, b_waited), still_claimed)) =
            futures::join!(timed(vec![message("1", &["a/data/new.parquet"])]), only_b,);
        assert_eq!(with_a.summary.counted, 1);
        assert_eq!(only_b.summary.counted, 1);
        assert!(
            still_claimed,
            "n.b's batch was counted before n.a's run settled"
        );
        // The status waits for the settlement in progress.
        let status = map.accumulator(0).send(GetStatus).await.unwrap();
        let settled = started.elapsed();
        println!(
            "settling {FILES} files took {settled:?}; meanwhile a batch for the settling table \
             was counted after {a_waited:?}, one for another table after {b_waited:?}"
        );
        assert_eq!(
            status.pending_files,
            FILES as u64 + 1,
            "the truth plus the new file"
        );
        assert!(store.load_table("n.a").unwrap().state.claim.is_none());
        assert_eq!(
            map.accumulator(1)
                .send(GetStatus)
                .await
                .unwrap()
                .pending_files,
            1
        );
        let files = store.files("n.a").unwrap();
        assert_eq!(files.len(), FILES + 1);
        assert!(files
            .iter()
            .any(|(_, file)| file.key == "a/data/new.parquet"));
    }

    /// A memory store that holds a read open until something else happened (or `HOLD` passed),
    /// to put a race's steps in the order a test wants: a table's load returns only once a
    /// settlement committed meanwhile; a settlement's read of the file log goes on only once the
    /// condition it was armed with holds.
    struct RacingStore {
        inner: MemoryStore,
        hold_loads: std::sync::atomic::AtomicBool,
        hold_file_reads: std::sync::Mutex<Option<HeldUntil>>,
        events: std::sync::Mutex<RacingEvents>,
        changed: std::sync::Condvar,
    }

    /// When a held read goes on.
    type HeldUntil = Box<dyn Fn(&RacingEvents) -> bool + Send>;

    #[derive(Default)]
    struct RacingEvents {
        loads: u32,
        settlement_commits: u32,
        /// The tables a commit logged a file of.
        files_committed: std::collections::BTreeSet<String>,
        load_held: bool,
        file_read_held: bool,
        /// The test let held reads go on.
        released: bool,
    }

    impl RacingStore {
        const HOLD: Duration = Duration::from_secs(2);

        fn new() -> Self {
            RacingStore {
                inner: MemoryStore::new(),
                hold_loads: Default::default(),
                hold_file_reads: Default::default(),
                events: Default::default(),
                changed: Default::default(),
            }
        }

        /// Waits until `done` holds, at most `HOLD`.
        fn wait_for(&self, done: impl Fn(&RacingEvents) -> bool) {
            let events = self.events.lock().unwrap();
            let _ = self
                .changed
                .wait_timeout_while(events, Self::HOLD, |events| !done(events))
                .unwrap();
        }

        /// Lets the reads held until a release go on.
        fn release(&self) {
            self.events.lock().unwrap().released = true;
            self.changed.notify_all();
        }

        /// Waits (in a test's task) until `held` says a read is held, at most 10 s.
        async fn until_held(&self, held: impl Fn(&RacingEvents) -> bool) {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !held(&self.events.lock().unwrap()) {
                assert!(std::time::Instant::now() < deadline, "the read is held");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    impl StateStore for RacingStore {
        fn load_table(
            &self,
            table: &str,
        ) -> Result<crate::model::state::TableSnapshot, StoreError> {
            let snapshot = self.inner.load_table(table)?;
            if self
                .hold_loads
                .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let commits = {
                    let mut events = self.events.lock().unwrap();
                    events.load_held = true;
                    events.settlement_commits
                };
                self.wait_for(|events| events.settlement_commits > commits);
            }
            self.events.lock().unwrap().loads += 1;
            self.changed.notify_all();
            Ok(snapshot)
        }
        fn seen(&self, objects: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
            self.inner.seen(objects)
        }
        fn seen_entries(
            &self,
            objects: &[(&str, &str)],
        ) -> Result<Vec<Option<crate::model::state::SeenEntry>>, StoreError> {
            self.inner.seen_entries(objects)
        }
        fn commit(&self, ops: Vec<crate::store::Op>) -> Result<(), StoreError> {
            let settles = ops.iter().any(|op| {
                matches!(op, crate::store::Op::PutTable { state, .. } if state.claim.is_none() && state.last_run.is_some())
            });
            let logged: Vec<String> = ops
                .iter()
                .filter_map(|op| match op {
                    crate::store::Op::PutFile { table, .. } => Some(table.clone()),
                    _ => None,
                })
                .collect();
            self.inner.commit(ops)?;
            let mut events = self.events.lock().unwrap();
            events.settlement_commits += u32::from(settles);
            events.files_committed.extend(logged);
            self.changed.notify_all();
            Ok(())
        }
        fn purge_seen_before(
            &self,
            cutoff: crate::base::clock::UnixMillis,
        ) -> Result<crate::store::PurgeSummary, StoreError> {
            self.inner.purge_seen_before(cutoff)
        }
        fn files(
            &self,
            table: &str,
        ) -> Result<Vec<(u64, crate::model::state::FileEntry)>, StoreError> {
            let held = self.hold_file_reads.lock().unwrap().take();
            if let Some(until) = held {
                self.events.lock().unwrap().file_read_held = true;
                self.wait_for(until);
            }
            self.inner.files(table)
        }
        fn runs(
            &self,
            table: &str,
        ) -> Result<Vec<(u64, crate::model::state::RunRecord)>, StoreError> {
            self.inner.runs(table)
        }
        fn series(&self, table: &str) -> Result<crate::model::series::Series, StoreError> {
            self.inner.series(table)
        }
        fn forget_table(&self, table: &str) -> Result<crate::store::ForgetSummary, StoreError> {
            self.inner.forget_table(table)
        }
        fn recover(&self) -> Result<(), StoreError> {
            self.inner.recover()
        }
    }

    /// Issue 31 item 8: a run ends and the store recovery's reload comes at the same moment, in
    /// either order; the claim the run held is settled and stays settled (a reload that read the
    /// state before the settlement committed used to adopt it after, restoring the claim).
    #[actix::test]
    async fn a_reload_racing_a_runs_end_never_restores_its_claim() {
        for reload_first in [true, false] {
            let store = Arc::new(RacingStore::new());
            let shared: Arc<dyn StateStore> = store.clone();
            let clock = FakeClock::new(1_000_000);
            let mut accumulator = Accumulator::load(spec(), shared.as_ref()).unwrap();
            let staged = accumulator
                .stage(
                    vec![candidate("t/a.parquet"), candidate("t/b.parquet")],
                    shared.as_ref(),
                    clock.now_millis(),
                )
                .unwrap();
            shared.commit(staged.ops).unwrap();
            accumulator.settle(true);
            let (ops, _) = accumulator
                .begin_claim("run-1", Trigger::Manual, clock.now_millis(), true)
                .unwrap();
            shared.commit(ops).unwrap();
            accumulator.settle(true);
            let actor = unpooled(accumulator, &shared, Arc::new(clock)).start();
            let finished = RunFinished {
                run_id: "run-1".to_string(),
                ran_on: None,
                outcome: RunOutcome::Success {
                    report: Default::default(),
                    duration_millis: 5,
                    attempts: 1,
                },
            };
            let reload = if reload_first {
                store
                    .hold_loads
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                let reload = actor.send(Reload);
                store.until_held(|events| events.load_held).await;
                actor.do_send(finished);
                reload
            } else {
                let loads = store.events.lock().unwrap().loads;
                *store.hold_file_reads.lock().unwrap() =
                    Some(Box::new(move |events: &RacingEvents| events.loads > loads));
                actor.do_send(finished);
                store.until_held(|events| events.file_read_held).await;
                actor.send(Reload)
            };
            reload.await.unwrap().unwrap();
            let status = actor.send(GetStatus).await.unwrap();
            assert!(
                status.in_flight_run.is_none(),
                "reload first: {reload_first}: the claim came back: {status:?}"
            );
            assert_eq!((status.pending_files, status.compacted_files), (0, 2));
            assert!(shared.load_table("n.t").unwrap().state.claim.is_none());
        }
    }
}
