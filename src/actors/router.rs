//! The intake router actor: routes each batch's records to their tables' accumulators and commits
//! everything the batch changed in one synced write, before any message of it may be deleted.
//!
//! Batches are handled one at a time, so an accumulator never holds more than one staged change.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler, WrapFuture,
};
use futures::future::join_all;
use tracing::{debug, info, warn};

use super::accumulator::TableAccumulatorActor;
use super::messages::{Ingest, IngestReport, IntakeError, Settle, Stage};
use crate::clock::Clock;
use crate::config::TableSpec;
use crate::failpoint;
use crate::intake::plan_batch;
use crate::metrics::Metrics;
use crate::routing::{IgnoreReason, Router};
use crate::store::StateStore;

const PURGE_INTERVAL: Duration = Duration::from_secs(3600);

pub struct IntakeRouter {
    router: Router,
    tables: Arc<Vec<TableSpec>>,
    accumulators: Vec<Addr<TableAccumulatorActor>>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    dedup_retention_millis: i64,
    metrics: Arc<Metrics>,
}

impl IntakeRouter {
    pub fn new(
        tables: Arc<Vec<TableSpec>>,
        accumulators: Vec<Addr<TableAccumulatorActor>>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        dedup_retention_days: i64,
        metrics: Arc<Metrics>,
    ) -> Self {
        assert_eq!(tables.len(), accumulators.len());
        IntakeRouter {
            router: Router::new(&tables),
            tables,
            accumulators,
            store,
            clock,
            dedup_retention_millis: dedup_retention_days * 24 * 3600 * 1000,
            metrics,
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

impl Handler<Ingest> for IntakeRouter {
    type Result = AtomicResponse<Self, Result<IngestReport, IntakeError>>;

    fn handle(&mut self, message: Ingest, _ctx: &mut Context<Self>) -> Self::Result {
        let plan = plan_batch(&message.messages, &self.router, &self.tables);
        let involved: Vec<(usize, Addr<TableAccumulatorActor>)> = plan
            .candidates
            .keys()
            .map(|&table| (table, self.accumulators[table].clone()))
            .collect();
        let tables = self.tables.clone();
        let store = self.store.clone();
        let mut candidates = plan.candidates;
        let mut summary = plan.summary;
        let verdicts = plan.verdicts;
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();

        let work = async move {
            let staging = join_all(involved.iter().map(|(table, accumulator)| {
                let candidates = candidates.remove(table).unwrap_or_default();
                accumulator.send(Stage { candidates })
            }))
            .await;

            let mut ops = Vec::new();
            let mut failure = None;
            let mut counted_per_table = Vec::new();
            for ((table, _), staged) in involved.iter().zip(staging) {
                match staged {
                    Ok(Ok(staged)) => {
                        counted_per_table.push((*table, staged.num_counted));
                        summary.counted += staged.num_counted;
                        summary.ignored.duplicate += staged.num_duplicates;
                        ops.extend(staged.ops);
                    }
                    Ok(Err(error)) => failure = Some(IntakeError::Store(error)),
                    Err(_) => {
                        failure = Some(IntakeError::AccumulatorGone(tables[*table].table.clone()))
                    }
                }
            }

            let outcome = match failure {
                Some(error) => Err(error),
                None if ops.is_empty() => Ok(()),
                None => {
                    failpoint::hit("intake.before_commit");
                    let num_ops = ops.len();
                    let committed = tokio::task::spawn_blocking(move || store.commit(ops))
                        .await
                        .map_err(|error| IntakeError::CommitTask(error.to_string()))
                        .and_then(|result| result.map_err(IntakeError::Store));
                    if committed.is_ok() {
                        debug!(num_ops, "batch committed");
                        failpoint::hit("intake.after_commit");
                    }
                    committed
                }
            };
            let committed = outcome.is_ok();
            for (_, accumulator) in &involved {
                accumulator.do_send(Settle { committed });
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
                            .add(&[("table", &tables[table].table)], counted);
                    }
                }
                for reason in IgnoreReason::ALL {
                    let ignored = summary.ignored.get(reason);
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
            outcome.map(|()| IngestReport { verdicts, summary })
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|result, _, _| result)))
    }
}
