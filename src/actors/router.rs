//! The intake router actor: routes each batch's records to their tables' accumulators and commits
//! everything the batch changed in one synced write, before any message of it may be deleted.
//!
//! Batches that arrive while a commit is in flight wait and then go together in the next one
//! (group commit): several pollers share each fsync. One group is in flight at a time, so an
//! accumulator never holds more than one staged change.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use std::collections::{BTreeMap, VecDeque};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, ResponseFuture, WrapFuture};
use futures::future::join_all;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::messages::{Ingest, IngestReport, IntakeError, SetTableMap, Settle, Stage};
use crate::accumulator::Candidate;
use crate::clock::Clock;
use crate::failpoint;
use crate::intake::{plan_batch, IntakePlan, IntakeSummary, Verdict};
use crate::metrics::Metrics;
use crate::routing::{IgnoreReason, Router, TableIndex};
use crate::store::StateStore;
use crate::table_map::TableMap;

const PURGE_INTERVAL: Duration = Duration::from_secs(3600);
/// A group stops taking waiting batches at this many messages (bounds one write batch's size).
const MAX_GROUP_MESSAGES: usize = 2_000;

pub struct IntakeRouter {
    router: Router,
    map: Arc<TableMap>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    dedup_retention_millis: i64,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Waiting>,
    committing: bool,
}

impl IntakeRouter {
    pub fn new(
        map: Arc<TableMap>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        dedup_retention_days: i64,
        metrics: Arc<Metrics>,
    ) -> Self {
        IntakeRouter {
            router: Router::from_entries(map.active().map(|(index, spec)| (index, spec.as_ref()))),
            map,
            store,
            clock,
            dedup_retention_millis: dedup_retention_days * 24 * 3600 * 1000,
            metrics,
            waiting: VecDeque::new(),
            committing: false,
        }
    }

    /// Forgets object keys older than the retention, off the actor thread.
    fn purge_seen(&self) {
        let store = self.store.clone();
        let cutoff = self.clock.now_millis() - self.dedup_retention_millis;
        tokio::task::spawn_blocking(move || match store.purge_seen_before(cutoff) {
            Ok(0) => {}
            Ok(purged) => info!(purged, "forgot object keys older than the dedup retention"),
            Err(error) => warn!(%error, "cannot purge old object keys"),
        });
    }
}

impl Actor for IntakeRouter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.purge_seen();
        ctx.run_interval(PURGE_INTERVAL, |router, _ctx| router.purge_seen());
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
            num_messages: message.messages.len(),
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

/// A batch waiting for the next group commit, and where its report goes.
struct Waiting {
    num_messages: usize,
    plan: IntakePlan,
    reply: oneshot::Sender<Result<IngestReport, IntakeError>>,
}

/// One batch inside a group: its verdicts, its summary, and its candidates' places in the
/// per-table lists (to attribute duplicates back to it).
struct Member {
    reply: oneshot::Sender<Result<IngestReport, IntakeError>>,
    verdicts: Vec<Verdict>,
    summary: IntakeSummary,
}

impl IntakeRouter {
    /// Starts the next group commit unless one is in flight: every batch waiting is staged and
    /// committed in one synced write (group commit), so concurrent pollers share each fsync.
    fn start_group(&mut self, ctx: &mut Context<Self>) {
        if self.committing || self.waiting.is_empty() {
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
            num_messages += waiting.num_messages;
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
        ctx.spawn(work.into_actor(self).map(|(), router, ctx| {
            router.committing = false;
            router.start_group(ctx);
        }));
    }
}

/// Stages a group's candidates in their accumulators, commits all their ops in one synced write,
/// settles the accumulators and answers every batch of the group.
async fn commit_group(
    mut members: Vec<Member>,
    per_table: BTreeMap<TableIndex, (Vec<Candidate>, Vec<usize>)>,
    map: Arc<TableMap>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) {
    let mut involved = Vec::with_capacity(per_table.len());
    let mut staging = Vec::with_capacity(per_table.len());
    for (table, (candidates, origins)) in per_table {
        staging.push(map.accumulator(table).send(Stage { candidates }));
        involved.push((table, origins));
    }
    let staging = join_all(staging).await;

    let mut ops = Vec::new();
    let mut failure = None;
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
            Ok(Err(error)) => failure = Some(IntakeError::Store(error)),
            Err(_) => failure = Some(IntakeError::AccumulatorGone(map.spec(*table).table.clone())),
        }
    }

    let outcome = match failure {
        Some(error) => Err(error),
        None if ops.is_empty() => Ok(()),
        None => {
            failpoint::crash_point!("intake.before_commit");
            let num_ops = ops.len();
            let committed = tokio::task::spawn_blocking(move || store.commit(ops))
                .await
                .map_err(|error| IntakeError::CommitTask(error.to_string()))
                .and_then(|result| result.map_err(IntakeError::Store));
            if committed.is_ok() {
                debug!(num_ops, batches = members.len(), "group committed");
                metrics.state_commits.fetch_add(1, Ordering::Relaxed);
                failpoint::crash_point!("intake.after_commit");
            }
            committed
        }
    };
    let committed = outcome.is_ok();
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
                metrics.records_counted.add(
                    &[
                        ("table", &map.spec(table).table),
                        ("tenant", &map.spec(table).tenant),
                    ],
                    counted,
                );
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
                    .add(&[("reason", reason.as_str())], ignored);
            }
        }
    } else {
        metrics.commit_failures.fetch_add(1, Ordering::Relaxed);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::compaction::{runner_from_config, CompactionSettings};
    use crate::config::Config;
    use crate::intake::InboundMessage;
    use crate::service::{start_pipeline, Compaction, Pipeline};
    use crate::store::MemoryStore;

    fn message(id: &str, keys: &[&str]) -> InboundMessage {
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

    fn pipeline(store: Arc<MemoryStore>) -> Pipeline {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"n.a\"\nbucket = \"lake\"\nprefix = \"a/\"\n\
             [[tables]]\ntable = \"n.b\"\nbucket = \"lake\"\nprefix = \"b/\"\n",
        )
        .unwrap();
        let settings = CompactionSettings::from_config(Arc::new(config.clone()));
        let runner = runner_from_config(&config);
        start_pipeline(
            store,
            Arc::new(FakeClock::new(1_714_564_800_000)),
            Compaction {
                settings,
                runner,
                enabled: false,
            },
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
        assert_eq!(pipeline.metrics.state_commits.load(Ordering::Relaxed), 2);
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
        store.fail_commits(false);
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
}
