//! The table accumulator actor: the single writer of one table's state. It counts what the router
//! stages, asks the executor pool for a run when the table is due, claims the pending files when a
//! slot is free, and settles the table when the run ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler, SpawnHandle,
    WrapFuture,
};
use tracing::{error, info, warn};

use super::executor::CompactionPool;
use super::messages::{
    Claimed, Forget, GetStatus, NotClaimed, RecoverRun, Reload, RequestCompaction, RunFinished,
    Settle, Stage, StartRun, Tick, UpdateSpec,
};
use crate::accumulator::{object_keys, settle_run, Accumulator, FailureBackoff, Staged};
use crate::clock::Clock;
use crate::policy::DueReason;
use crate::routing::TableIndex;
use crate::run::RunOutcome;
use crate::status::table_status;
use crate::store::{StateStore, StoreError};

/// How long a settlement that could not be committed waits before it is tried again.
const SETTLE_RETRY: Duration = Duration::from_secs(5);

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
}

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
        }
    }

    /// A restarted accumulator: a commit its predecessor sent may still land, so its first
    /// [`Stage`] looks the keys up itself.
    pub fn restarted(mut self) -> Self {
        self.lookups_stale = true;
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

    /// Checks the thresholds, asks for a run when due, and arms the timer for the next moment
    /// something changes by itself (max-wait reached, back-off over).
    fn evaluate(&mut self, ctx: &mut Context<Self>) {
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
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if self.accumulator.claim().is_some() || !self.active {
            return;
        }
        // A periodic reconcile, when its time has come and no run is due.
        let reconcile_at = self.accumulator.spec().reconcile_every_millis.map(|every| {
            let state = &self.accumulator.snapshot().state;
            state.last_truth_millis.unwrap_or(self.started_millis) + every
        });
        if let (Some(at), None) = (reconcile_at, due) {
            if now >= at && self.ask("reconcile", true) {
                return;
            }
        }
        // With no compaction due: a run for the table's delete files, else `rewrite_manifests`
        // when it has too many manifests.
        let maintenance = if self.accumulator.deletes_due() {
            Some(crate::accumulator::DELETES_TRIGGER)
        } else if self.accumulator.manifests_due() {
            Some(crate::state::Maintenance::RewriteManifests.as_str())
        } else {
            None
        }
        .filter(|_| due.is_none());
        let manifests_due = maintenance.is_some();
        if let Some(trigger) = maintenance {
            if self.accumulator.may_start_run(now) && self.ask(trigger, true) {
                return;
            }
        }
        // `remove_orphan_files` on its schedule, when nothing else is due.
        let orphans_at = self.accumulator.next_orphan_run();
        if let (Some(at), None, false) = (orphans_at, due, manifests_due) {
            if now >= at
                && self.accumulator.may_start_run(now)
                && self.ask(crate::accumulator::REMOVE_ORPHANS_TRIGGER, true)
            {
                return;
            }
        }
        let wake_at = match due {
            None if manifests_due => self.accumulator.next_attempt(),
            None if orphans_at.is_some_and(|at| now >= at) => self.accumulator.next_attempt(),
            Some(reason) if self.accumulator.may_start_run(now) => {
                self.ask(reason.as_str(), false);
                None
            }
            Some(_) => self.accumulator.next_attempt(),
            None => self.accumulator.next_deadline(now),
        };
        let wake_at = [
            wake_at,
            reconcile_at.filter(|_| due.is_none()),
            orphans_at.filter(|at| *at > now),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(wake_at) = wake_at {
            let delay = Duration::from_millis(wake_at.saturating_sub(now).max(0) as u64);
            self.timer = Some(ctx.notify_later(Tick, delay));
        }
    }

    /// Asks the pool for a run (again: the pool ignores a request of a table that waits or runs
    /// already, so this actor keeps no "asked" flag). `false` when it counts only.
    fn ask(&self, trigger: &str, force: bool) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        pool.do_send(RequestCompaction {
            table: self.index,
            trigger: trigger.to_string(),
            force,
        });
        true
    }

    fn run_deferred(&mut self, ctx: &mut Context<Self>) {
        while !self.accumulator.has_staged_change() {
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
                .begin_claim(&start.run_id, &start.trigger, now, start.force)
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

    /// Settles the table from the run's outcome and commits it; retried until it is durable.
    fn finish_run(&mut self, finished: RunFinished, ctx: &mut Context<Self>) {
        let spec = self.accumulator.spec_arc();
        let snapshot = self.accumulator.snapshot().clone();
        let store = self.store.clone();
        let now = self.clock.now_millis();
        let backoff = self.backoff;
        let run_id = finished.run_id.clone();
        let outcome = finished.outcome.clone();
        let mut sampler = self.accumulator.sampler();
        let settle = async move {
            tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
                match settle_run(
                    &spec,
                    &snapshot,
                    store.as_ref(),
                    &run_id,
                    &outcome,
                    now,
                    backoff,
                )? {
                    Some((mut ops, change)) => {
                        crate::accumulator::sample_commit(&mut sampler, &spec.table, &mut ops, now);
                        store.commit(ops)?;
                        Ok(Some((change, sampler)))
                    }
                    None => Ok(None),
                }
            })
            .await
        };
        ctx.wait(settle.into_actor(self).map(move |result, actor, ctx| {
            // The settlement may have written `seen` entries (the run's own outputs).
            actor.lookups_stale = true;
            match result {
                Ok(Ok(Some((change, sampler)))) => {
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
                            next_attempt = ?state.next_attempt_millis.map(crate::clock::format_rfc3339),
                            "run settled: files pending again, backing off"
                        ),
                    }
                }
                Ok(Ok(None)) => warn!(table = %actor.table(), run_id = %finished.run_id, "outcome of a run that holds no claim; ignored"),
                failed => {
                    error!(table = %actor.table(), run_id = %finished.run_id, result = ?failed.map(|inner| inner.err()), "cannot settle the run; retrying");
                    ctx.notify_later(finished, SETTLE_RETRY);
                }
            }
            actor.evaluate(ctx);
        }));
    }
}

impl Actor for TableAccumulatorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let (Some(ticket), Some(pool)) = (self.accumulator.claim_ticket(), &self.pool) {
            info!(table = %self.table(), run_id = %ticket.run_id, "a run was in flight when icepack stopped; recovering it");
            pool.do_send(RecoverRun {
                table: self.index,
                ticket,
            });
        }
        self.evaluate(ctx);
    }
}

impl Handler<Stage> for TableAccumulatorActor {
    /// Atomic: nothing else (a run's start, a settle) is handled while the keys are looked up.
    type Result = AtomicResponse<Self, Result<Staged, StoreError>>;

    /// Staging is pure computation on the router's answers; only when they may be stale (or
    /// missing) are the keys looked up, on the blocking pool.
    fn handle(&mut self, message: Stage, _ctx: &mut Context<Self>) -> Self::Result {
        if crate::failpoint::accumulator_panics(self.table()) {
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
        self.deferred.push_back(Deferred::Start(message));
        self.run_deferred(ctx);
    }
}

impl Handler<RunFinished> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: RunFinished, ctx: &mut Context<Self>) {
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
        } else if self.accumulator.has_staged_change() || !self.deferred.is_empty() {
            Some("the table has a change being committed: try again")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            return Box::pin(actix::fut::ready(Err(refusal.to_string())));
        }
        let store = self.store.clone();
        let spec = self.accumulator.spec_arc();
        let forget = async move {
            tokio::task::spawn_blocking(move || {
                let summary = store.forget_table(&spec.table)?;
                Ok::<_, StoreError>((summary, Accumulator::load(spec, store.as_ref())?))
            })
            .await
        };
        Box::pin(forget.into_actor(self).map(|result, actor, _ctx| {
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
    type Result = actix::ResponseActFuture<Self, Result<(), StoreError>>;

    /// The durable state replaces the one in memory. A claim found there that this actor never
    /// adopted (its commit reported failed, yet it reached the disk) is recovered like one found
    /// at start-up: the pool learns of it and settles it.
    fn handle(&mut self, _message: Reload, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let spec = self.accumulator.spec_arc();
        let load = async move {
            tokio::task::spawn_blocking(move || Accumulator::load(spec, store.as_ref()))
                .await
                .map_err(|error| StoreError::Read(error.to_string()))?
        };
        Box::pin(load.into_actor(self).map(|loaded, actor, ctx| {
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
        }))
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
    type Result = actix::MessageResult<GetStatus>;

    fn handle(&mut self, _message: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(table_status(
            self.accumulator.spec(),
            self.accumulator.snapshot(),
            self.clock.now_millis(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulator::Candidate;
    use crate::clock::{FakeClock, TokioClock};
    use crate::config::TableSpec;
    use crate::policy::Thresholds;
    use crate::store::MemoryStore;

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
            .begin_claim("run-1", "manual", clock.now_millis(), true)
            .unwrap();
        store.commit(ops).unwrap();
        accumulator.settle(true);
        let actor = unpooled(accumulator, &store, Arc::new(clock.clone())).start();
        clock.advance(Duration::from_secs(60));
        actor
            .send(RunFinished {
                run_id: "run-1".to_string(),
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
            entry: crate::state::SeenEntry {
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
        use crate::clock::SystemClock;
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
}
