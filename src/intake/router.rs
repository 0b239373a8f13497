//! The intake router actor: routes each batch's records to their tables' accumulators and commits
//! everything the batch changed in one synced write, before any message of it may be deleted.
//!
//! Batches that arrive while a commit is in flight wait and then go together in the next one
//! (group commit): several pollers share each fsync. One group is in flight at a time, so an
//! accumulator never holds more than one staged change.
//!
//! A failed commit closes the store gate ([`crate::store::StoreGate`]): pollers stop receiving,
//! batches already received are answered with the error (their messages come back later), and
//! the router probes the store with back-off. When a probe commit succeeds every accumulator
//! reloads its table from the store, then the gate opens and receiving resumes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::{BTreeMap, VecDeque};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, ResponseFuture, WrapFuture};
use futures::future::join_all;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::base::backoff::Backoff;
use crate::base::clock::Clock;
use crate::base::failpoint;
use crate::intake::batch::{
    object_keys, plan_batch, Candidate, InboundMessage, IntakePlan, IntakeSummary, Verdict,
};
use crate::intake::routing::{IgnoreReason, Router, TableIndex};
use crate::messages::{Ingest, IngestReport, IntakeError, Reload, SetTableMap, Settle, Stage};
use crate::ops::metrics::{Metrics, ReasonLabels, StepLabels};
use crate::store::{StateStore, StoreError};
use crate::table::handle::TableHandles;

const PURGE_INTERVAL: Duration = Duration::from_secs(3600);
/// A store writable this long after a recovery probes from the shortest back-off when it fails.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How often the router looks whether a write elsewhere (a claim, a settlement) failed.
const STORE_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// A group stops taking waiting batches at this many messages (bounds one write batch's size).
const MAX_GROUP_MESSAGES: usize = 2_000;

pub struct IntakeRouter {
    router: Router,
    map: Arc<TableHandles>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    dedup_retention_millis: i64,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Waiting>,
    committing: bool,
    /// Between probes of a store that failed a commit.
    probe_backoff: Backoff,
    probing: bool,
    /// When the store last became writable again: a failure soon after goes on with the
    /// back-off reached instead of starting over.
    recovered_millis: Option<i64>,
}

impl IntakeRouter {
    pub fn new(
        map: Arc<TableHandles>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        dedup_retention_days: u64,
        metrics: Arc<Metrics>,
    ) -> Self {
        IntakeRouter {
            router: Router::from_entries(map.active().map(|(index, spec)| (index, spec.as_ref()))),
            map,
            store,
            clock,
            dedup_retention_millis: i64::try_from(
                dedup_retention_days.saturating_mul(24 * 3600 * 1000),
            )
            .unwrap_or(i64::MAX),
            metrics,
            waiting: VecDeque::new(),
            committing: false,
            probe_backoff: Backoff::jittered(Duration::from_secs(1), Duration::from_secs(30)),
            probing: false,
            recovered_millis: None,
        }
    }

    /// A commit failed: receiving pauses and the store is probed until it takes writes again.
    fn store_failed(&mut self, error: &str, ctx: &mut Context<Self>) {
        if self.metrics.store.close(error, self.clock.now_millis()) {
            warn!(%error, "a state commit failed: receiving is paused while the store is probed");
        }
        if !self.probing {
            self.probing = true;
            let now = self.clock.now_millis();
            if self
                .recovered_millis
                .is_none_or(|at| now - at > STABLE_AFTER.as_millis() as i64)
            {
                self.probe_backoff.reset();
            }
            self.schedule_probe(ctx);
        }
    }

    fn schedule_probe(&mut self, ctx: &mut Context<Self>) {
        let delay = self.probe_backoff.next_delay();
        ctx.run_later(delay, |router, ctx| router.probe(ctx));
    }

    /// Reopens the store and commits a probe; on success every accumulator reloads its table
    /// from the store before receiving resumes.
    fn probe(&mut self, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        let map = self.map.clone();
        let probe = async move {
            tokio::task::spawn_blocking(move || store.recover())
                .await
                .map_err(|error| StoreError::Write(error.to_string()))??;
            // An idle table has nothing in memory to correct: only live accumulators reload.
            let live: Vec<_> = (0..map.len())
                .filter_map(|table| Some((table, map.accumulator(table).send_if_live(Reload)?)))
                .collect();
            let (tables, reloads): (Vec<_>, Vec<_>) = live.into_iter().unzip();
            for (table, reloaded) in tables.into_iter().zip(join_all(reloads).await) {
                match reloaded {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => return Err(error),
                    // A stopped accumulator has nothing in memory to correct.
                    Err(_) => debug!(table = %map.spec(table).table, "no accumulator to reload"),
                }
            }
            Ok::<(), StoreError>(())
        };
        ctx.spawn(probe.into_actor(self).map(|probed, router, ctx| match probed {
            Ok(()) => {
                router.probing = false;
                router.recovered_millis = Some(router.clock.now_millis());
                router.metrics.store.open(router.clock.now_millis());
                router
                    .metrics
                    .store_recoveries
                    .inc();
                info!("the state store takes writes again: receiving resumes");
                router.start_group(ctx);
            }
            Err(error) => {
                let error = error.to_string();
                router.metrics.store.probe_failed(&error);
                warn!(%error, attempts = router.metrics.store.get().probes, "the state store still refuses writes");
                router.schedule_probe(ctx);
            }
        }));
    }

    /// Forgets object keys older than the retention, except those of files still pending or
    /// claimed, off the actor thread.
    fn purge_seen(&self) {
        let store = self.store.clone();
        let cutoff = self.clock.now_millis() - self.dedup_retention_millis;
        tokio::task::spawn_blocking(move || match store.purge_seen_before(cutoff) {
            Ok(summary) if summary.examined == 0 => {}
            Ok(summary) => info!(
                purged = summary.purged,
                kept_in_log = summary.kept_in_log,
                stale = summary.stale,
                "forgot object keys older than the dedup retention (those of pending or claimed \
                 files are kept)"
            ),
            Err(error) => warn!(%error, "cannot purge old object keys"),
        });
    }
}

impl Actor for IntakeRouter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.purge_seen();
        ctx.run_interval(PURGE_INTERVAL, |router, _ctx| router.purge_seen());
        ctx.run_interval(STORE_CHECK_INTERVAL, |router, ctx| {
            if router.store.needs_recovery() && !router.probing {
                router.store_failed("a write to the state store failed", ctx);
            }
        });
    }
}

impl Handler<SetTableMap> for IntakeRouter {
    type Result = ();

    /// Batches already planned go on with their tables; the next ones are routed by the new map.
    fn handle(&mut self, message: SetTableMap, _ctx: &mut Context<Self>) {
        self.router = Router::from_entries(
            message
                .0
                .active()
                .map(|(index, spec)| (index, spec.as_ref())),
        );
        self.map = message.0;
    }
}

impl Handler<Ingest> for IntakeRouter {
    type Result = ResponseFuture<Result<IngestReport, IntakeError>>;

    fn handle(&mut self, message: Ingest, ctx: &mut Context<Self>) -> Self::Result {
        let (reply, report) = oneshot::channel();
        // Parsed and routed at once: while a commit is in flight, the next group gets ready.
        let plan = plan_batch(&message.messages, &self.router, self.map.specs());
        self.waiting.push_back(Waiting {
            messages: message.messages,
            plan,
            reply,
        });
        self.start_group(ctx);
        Box::pin(async move {
            report
                .await
                .unwrap_or_else(|_| Err(IntakeError::CommitTask("the router stopped".into())))
        })
    }
}

/// Where a batch's report goes.
type Reply = oneshot::Sender<Result<IngestReport, IntakeError>>;

/// A batch waiting for the next group commit, and where its report goes.
struct Waiting {
    messages: Vec<InboundMessage>,
    plan: IntakePlan,
    reply: Reply,
}

/// One batch inside a group: its verdicts, its summary, and its candidates' places in the
/// per-table lists (to attribute duplicates back to it).
struct Member {
    reply: Reply,
    verdicts: Vec<Verdict>,
    summary: IntakeSummary,
    /// Kept to plan the batch again when another batch's table fails the group.
    messages: Vec<InboundMessage>,
}

/// How a group ended, for the router.
#[derive(Default)]
struct GroupOutcome {
    /// The commit's error, when the write itself failed.
    failed_commit: Option<StoreError>,
    /// Batches that had nothing to do with the tables that failed: they go in the next group.
    retry: Vec<(Vec<InboundMessage>, Reply)>,
}

impl IntakeRouter {
    /// Starts the next group commit unless one is in flight: every batch waiting is staged and
    /// committed in one synced write (group commit), so concurrent pollers share each fsync.
    fn start_group(&mut self, ctx: &mut Context<Self>) {
        if self.committing || self.waiting.is_empty() {
            return;
        }
        if !self.metrics.store.is_writable() {
            // Nothing is staged while the store refuses writes: the messages come back later.
            let error = IntakeError::Store(StoreError::Unavailable(
                "receiving is paused until the state store takes writes again".to_string(),
            ));
            for waiting in self.waiting.drain(..) {
                let _ = waiting.reply.send(Err(error.clone()));
            }
            return;
        }
        self.committing = true;
        let mut members = Vec::new();
        // Per table: the candidates of every batch of the group, and which batch each came from.
        let mut per_table: BTreeMap<TableIndex, (Vec<Candidate>, Vec<usize>)> = BTreeMap::new();
        let mut num_messages = 0;
        while num_messages < MAX_GROUP_MESSAGES {
            let Some(waiting) = self.waiting.pop_front() else {
                break;
            };
            num_messages += waiting.messages.len();
            let plan = waiting.plan;
            let origin = members.len();
            for (table, candidates) in plan.candidates {
                let (all, origins) = per_table.entry(table).or_default();
                origins.extend(std::iter::repeat_n(origin, candidates.len()));
                all.extend(candidates);
            }
            members.push(Member {
                reply: waiting.reply,
                verdicts: plan.verdicts,
                summary: plan.summary,
                messages: waiting.messages,
            });
        }
        let work = commit_group(
            members,
            per_table,
            self.map.clone(),
            self.store.clone(),
            self.clock.clone(),
            self.metrics.clone(),
        );
        ctx.spawn(work.into_actor(self).map(|outcome, router, ctx| {
            router.committing = false;
            if let Some(error) = outcome.failed_commit {
                router.store_failed(&error.to_string(), ctx);
            }
            // Planned again (by the current map), ahead of the batches that came since.
            for (messages, reply) in outcome.retry.into_iter().rev() {
                let plan = plan_batch(&messages, &router.router, router.map.specs());
                router.waiting.push_front(Waiting {
                    messages,
                    plan,
                    reply,
                });
            }
            router.start_group(ctx);
        }));
    }
}

/// Stages a group's candidates in their accumulators, commits all their ops in one synced write,
/// settles the accumulators and answers every batch of the group.
///
/// When a table cannot stage (its accumulator is gone, or its state cannot be read) only the
/// batches with records for it fail; nothing of the group is committed, and the other batches
/// are handed back to go in the next group, so one broken table never holds up the others.
async fn commit_group(
    mut members: Vec<Member>,
    per_table: BTreeMap<TableIndex, (Vec<Candidate>, Vec<usize>)>,
    map: Arc<TableHandles>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) -> GroupOutcome {
    // Every object key of the group in one multi-get, off the actor threads: the accumulators'
    // staging then reads nothing. No commit of this router's is in flight meanwhile (one group at
    // a time); an accumulator whose own commits may have changed the answers looks its keys up
    // again (see `Stage::seen`).
    let steps = StepTimer::start(&metrics);
    let looked_up = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let seen = {
                let objects: Vec<(&str, &str)> = per_table
                    .values()
                    .flat_map(|(candidates, _)| object_keys(candidates))
                    .collect();
                store.seen(&objects)
            };
            (per_table, seen)
        })
        .await
    };
    let steps = steps.done("lookup");
    let (per_table, seen) = match looked_up {
        Ok((per_table, seen)) => (per_table, seen),
        Err(error) => {
            // The lookup task panicked and took the group's candidates: nothing was staged.
            let error =
                IntakeError::CommitTask(format!("the lookup of object keys failed: {error}"));
            for member in members {
                let _ = member.reply.send(Err(error.clone()));
            }
            return GroupOutcome::default();
        }
    };
    let mut involved = Vec::with_capacity(per_table.len());
    let mut staging = Vec::with_capacity(per_table.len());
    match seen {
        Ok(seen) => {
            let mut seen = seen.into_iter();
            for (table, (candidates, origins)) in per_table {
                let answers = seen.by_ref().take(candidates.len()).collect();
                staging.push(map.accumulator(table).send(Stage {
                    candidates,
                    seen: Some(answers),
                }));
                involved.push((table, origins));
            }
        }
        Err(error) => {
            // The store cannot be read: no table can stage; the batches without records go on.
            warn!(%error, "cannot look up the group's object keys");
            let involved: Vec<_> = per_table
                .into_iter()
                .map(|(table, (_, origins))| (table, origins))
                .collect();
            let failed = involved
                .iter()
                .map(|(table, _)| (*table, IntakeError::Store(error.clone())))
                .collect();
            return fail_tables(members, &involved, failed, &map);
        }
    }
    let staging = join_all(staging).await;
    let steps = steps.done("stage");

    let mut ops = Vec::new();
    let mut failed_tables = Vec::new();
    let mut counted_per_table = Vec::new();
    for ((table, origins), staged) in involved.iter().zip(staging) {
        match staged {
            Ok(Ok(staged)) => {
                counted_per_table.push((*table, staged.num_counted));
                let mut duplicates = staged.duplicate_positions.iter().peekable();
                for (position, &origin) in origins.iter().enumerate() {
                    let summary = &mut members[origin].summary;
                    if duplicates.next_if_eq(&&position).is_some() {
                        summary.ignored.duplicate += 1;
                    } else {
                        summary.counted += 1;
                    }
                }
                ops.extend(staged.ops);
            }
            Ok(Err(error)) => failed_tables.push((*table, IntakeError::Store(error))),
            Err(_) => failed_tables.push((
                *table,
                IntakeError::AccumulatorGone(map.spec(*table).table.clone()),
            )),
        }
    }
    if !failed_tables.is_empty() {
        return fail_tables(members, &involved, failed_tables, &map);
    }
    let outcome = if ops.is_empty() {
        Ok(())
    } else {
        failpoint::crash_point!("intake.before_commit");
        let num_ops = ops.len();
        let committed = tokio::task::spawn_blocking(move || store.commit(ops))
            .await
            .map_err(|error| IntakeError::CommitTask(error.to_string()))
            .and_then(|result| result.map_err(IntakeError::Store));
        steps.done("commit");
        if committed.is_ok() {
            debug!(num_ops, batches = members.len(), "group committed");
            metrics.state_commits.inc();
            failpoint::crash_point!("intake.after_commit");
        }
        committed
    };
    let committed = outcome.is_ok();
    let failed_commit = match &outcome {
        Err(IntakeError::Store(error)) => Some(error.clone()),
        _ => None,
    };
    for (table, _) in &involved {
        map.accumulator(*table).do_send(Settle { committed });
    }
    let now = clock.now_millis().max(0) as u64;
    if committed {
        metrics
            .last_commit_success_millis
            .store(now, Ordering::Relaxed);
        for (table, counted) in counted_per_table {
            if counted > 0 {
                metrics
                    .records_counted
                    .get_or_create(
                        &metrics.table_labels(&map.spec(table).table, &map.spec(table).tenant),
                    )
                    .inc_by(counted);
            }
        }
        for reason in IgnoreReason::ALL {
            let ignored: u64 = members
                .iter()
                .map(|member| member.summary.ignored.get(reason))
                .sum();
            if ignored > 0 {
                metrics
                    .records_ignored
                    .get_or_create(&ReasonLabels {
                        reason: reason.as_str(),
                    })
                    .inc_by(ignored);
            }
        }
    } else {
        metrics.commit_failures.inc();
        metrics
            .last_commit_failure_millis
            .store(now, Ordering::Relaxed);
    }
    for member in members {
        let answer = match &outcome {
            Ok(()) => Ok(IngestReport {
                verdicts: member.verdicts,
                summary: member.summary,
            }),
            Err(error) => Err(error.clone()),
        };
        // A batch whose poller is gone is simply redelivered later.
        let _ = member.reply.send(answer);
    }
    GroupOutcome {
        failed_commit,
        retry: Vec::new(),
    }
}

/// Times the steps of an intake group one after the other into
/// [`Metrics::intake_steps`].
struct StepTimer<'a> {
    metrics: &'a Metrics,
    since: Instant,
}

impl<'a> StepTimer<'a> {
    fn start(metrics: &'a Metrics) -> Self {
        StepTimer {
            metrics,
            since: Instant::now(),
        }
    }

    /// `step` ended now: its duration is observed, and the next step starts.
    fn done(self, step: &'static str) -> Self {
        let now = Instant::now();
        self.metrics
            .intake_steps
            .get_or_create(&StepLabels { step })
            .observe(now.duration_since(self.since).as_secs_f64());
        StepTimer {
            metrics: self.metrics,
            since: now,
        }
    }
}

/// Some tables could not stage: their batches fail, every staged change is dropped, the other
/// batches go back for the next group.
fn fail_tables(
    members: Vec<Member>,
    involved: &[(TableIndex, Vec<usize>)],
    failed_tables: Vec<(TableIndex, IntakeError)>,
    map: &TableHandles,
) -> GroupOutcome {
    let mut errors: Vec<Option<IntakeError>> = (0..members.len()).map(|_| None).collect();
    for (table, error) in &failed_tables {
        warn!(table = %map.spec(*table).table, %error, "the table cannot stage its records: only the batches with records for it fail");
        let origins = involved
            .iter()
            .find(|(involved_table, _)| involved_table == table)
            .map(|(_, origins)| origins.as_slice())
            .unwrap_or_default();
        for &origin in origins {
            errors[origin].get_or_insert_with(|| error.clone());
        }
    }
    for (table, _) in involved {
        if !failed_tables.iter().any(|(failed, _)| failed == table) {
            map.accumulator(*table).do_send(Settle { committed: false });
        }
    }
    let mut retry = Vec::new();
    for (member, error) in members.into_iter().zip(errors) {
        match error {
            Some(error) => {
                let _ = member.reply.send(Err(error));
            }
            None => retry.push((member.messages, member.reply)),
        }
    }
    GroupOutcome {
        failed_commit: None,
        retry,
    }
}

/// Also the supervisor's tests: a two-table pipeline (`n.a` under `a/`, `n.b` under `b/`) on a
/// memory store, and messages of records under those prefixes.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::config::Config;
    use crate::engine::spark::job::runner_from_config;
    use crate::intake::batch::InboundMessage;
    use crate::runs::settings::CompactionSettings;
    use crate::service::{start_pipeline, Compaction, Pipeline};
    use crate::store::MemoryStore;

    pub(crate) fn message(id: &str, keys: &[&str]) -> InboundMessage {
        let records: Vec<String> = keys
            .iter()
            .map(|key| {
                format!(
                    r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{key}","size":10}}}}}}"#
                )
            })
            .collect();
        InboundMessage {
            id: id.to_string(),
            body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
        }
    }

    const NOW: i64 = 1_714_564_800_000;

    pub(crate) fn pipeline(store: Arc<MemoryStore>) -> Pipeline {
        pipeline_at(store, NOW)
    }

    fn pipeline_at(store: Arc<MemoryStore>, now: i64) -> Pipeline {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"n.a\"\nbucket = \"lake\"\nprefix = \"a/\"\n\
             [[tables]]\ntable = \"n.b\"\nbucket = \"lake\"\nprefix = \"b/\"\n",
        )
        .unwrap();
        let settings = CompactionSettings::from_config(Arc::new(config.clone()));
        let runner = runner_from_config(&config);
        start_pipeline(
            config.table_specs(),
            store,
            Arc::new(FakeClock::new(now)),
            Compaction::spark(settings, runner, false),
            Arc::new(Metrics::default()),
            None,
        )
        .unwrap()
    }

    #[actix::test]
    async fn batches_waiting_during_a_commit_share_the_next_one_and_get_their_own_reports() {
        let store = Arc::new(MemoryStore::new());
        let pipeline = pipeline(store.clone());
        let batches = vec![
            vec![message("1", &["a/data/1.parquet", "b/data/1.parquet"])],
            vec![message("2", &["a/data/2.parquet"]), message("3", &["x/y"])],
            // The same object as batch 2's (redelivered through another poller): counted once.
            vec![message("4", &["a/data/2.parquet", "b/data/2.parquet"])],
            vec![message("5", &["not json"])],
        ];
        let reports = join_all(batches.into_iter().map(|messages| {
            pipeline.router.send(Ingest {
                messages: messages.clone(),
            })
        }))
        .await;
        let reports: Vec<IngestReport> = reports
            .into_iter()
            .map(|report| report.unwrap().unwrap())
            .collect();
        let counted: Vec<u64> = reports.iter().map(|r| r.summary.counted).collect();
        let duplicates: Vec<u64> = reports
            .iter()
            .map(|r| r.summary.ignored.duplicate)
            .collect();
        assert_eq!(counted, vec![2, 1, 1, 0]);
        assert_eq!(duplicates, vec![0, 0, 1, 0]);
        assert_eq!(reports[1].verdicts.len(), 2);
        assert_eq!(reports[1].summary.ignored.unrouted, 1);
        assert_eq!(reports[0].verdicts, vec![Verdict::Delete]);
        // The first batch went alone (nothing was waiting); the three others waited and shared one.
        assert_eq!(pipeline.metrics.state_commits.get(), 2);
        // Each group's steps were timed, once a group.
        let text = pipeline.metrics.render(&[]);
        for step in crate::ops::metrics::INTAKE_STEPS {
            let count =
                format!("icepack_intake_step_duration_seconds_count{{step=\"{step}\"}} 2\n");
            assert!(text.contains(&count), "no `{count}` in:\n{text}");
        }
        let status = pipeline.status().await;
        let pending: Vec<u64> = status.tables.iter().map(|t| t.pending_files).collect();
        assert_eq!(pending, vec![2, 2]);
    }

    #[actix::test]
    async fn a_failed_group_commit_fails_every_batch_of_the_group() {
        let store = Arc::new(MemoryStore::new());
        let pipeline = pipeline(store.clone());
        store.fail_commits(true);
        let reports = join_all((0..3).map(|n| {
            pipeline.router.send(Ingest {
                messages: vec![message(&n.to_string(), &[&format!("a/data/{n}.parquet")])],
            })
        }))
        .await;
        assert!(reports
            .into_iter()
            .all(|report| matches!(report, Ok(Err(IntakeError::Store(_))))));
        assert!(
            !pipeline.metrics.store.is_writable(),
            "the failed commit closed the gate"
        );
        let refused = pipeline
            .router
            .send(Ingest {
                messages: vec![message("8", &["a/data/8.parquet"])],
            })
            .await
            .unwrap();
        assert!(
            matches!(refused, Err(IntakeError::Store(StoreError::Unavailable(_)))),
            "nothing is staged while the store refuses writes: {refused:?}"
        );
        store.fail_commits(false);
        // The next probe (after the back-off's first delay) finds the store writable again.
        let opened = std::time::Instant::now();
        while !pipeline.metrics.store.is_writable() {
            assert!(opened.elapsed() < Duration::from_secs(10), "the gate opens");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(pipeline.metrics.store_recoveries.get(), 1);
        let report = pipeline
            .router
            .send(Ingest {
                messages: vec![message("9", &["a/data/0.parquet"])],
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            report.summary.counted, 1,
            "nothing of the failed group was kept"
        );
        assert_eq!(pipeline.status().await.tables[0].pending_files, 1);
    }

    /// Issue 15 part 5, through the router: a service started again past the dedup retention
    /// purges at start; the key of a file still pending survives it, so a late redelivery of the
    /// file is still a duplicate, while an old key of no pending file is forgotten.
    #[actix::test]
    async fn a_pending_files_key_survives_the_purge_past_the_retention() {
        use crate::model::state::SeenEntry;
        use crate::store::Op;
        let store = Arc::new(MemoryStore::new());
        let first = pipeline(store.clone());
        let ingest = |pipeline: &Pipeline, id: &str| {
            pipeline.router.send(Ingest {
                messages: vec![message(id, &["a/data/1.parquet"])],
            })
        };
        let report = ingest(&first, "1").await.unwrap().unwrap();
        assert_eq!(report.summary.counted, 1);
        // A compaction's output remembered at the same time: no file of the log.
        store
            .commit(vec![Op::PutSeen {
                bucket: "lake".to_string(),
                key: "a/data/out.parquet".to_string(),
                entry: SeenEntry {
                    table: "n.a".to_string(),
                    first_seen_millis: NOW,
                    seq: None,
                },
            }])
            .unwrap();

        let later = NOW + 15 * 24 * 3600 * 1000;
        let second = pipeline_at(store.clone(), later);
        let started = std::time::Instant::now();
        while store.seen(&[("lake", "a/data/out.parquet")]).unwrap()[0] {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the purge at start forgets the output's key"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let report = ingest(&second, "1").await.unwrap().unwrap();
        assert_eq!(
            (report.summary.counted, report.summary.ignored.duplicate),
            (0, 1),
            "the pending file's key outlived the retention"
        );
        assert_eq!(second.status().await.tables[0].pending_files, 1);
    }
}
