//! The accumulator supervisor: a table's accumulator that stopped (a panic — an invariant it
//! asserts was violated, which is a bug — or any other end) is started again from the table's
//! durable state, in the same slot of the table map, so every holder of the map reaches the new
//! one. The other tables never notice; the batches with records for the table fail until it is
//! back and are redelivered. Restarts of a table that keeps failing back off; while a table's
//! accumulator is down, `/readyz` names it.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, WrapFuture};
use tracing::{error, info, warn};

use crate::base::backoff::Backoff;
use crate::base::clock::Clock;
use crate::intake::routing::TableIndex;
use crate::messages::AccumulatorRestarted;
use crate::ops::metrics::Metrics;
use crate::runs::executor::CompactionPool;
use crate::store::StateStore;
use crate::table::accumulator::Accumulator;
use crate::table::handle::TableHandles;

/// How often every slot is looked at.
const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Restarts of one table back off from 1 s, doubling, to 60 s.
const RESTART_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));
/// A restarted accumulator alive this long has its restart count forgotten.
const STABLE_AFTER_MILLIS: i64 = 5 * 60_000;

#[derive(Debug, Default)]
struct Restarts {
    /// Restarts in a row (each soon after the one before).
    count: u32,
    last_millis: i64,
    /// No restart before this.
    not_before_millis: i64,
    loading: bool,
}

pub struct AccumulatorSupervisor {
    map: Arc<RwLock<Arc<TableHandles>>>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    pool: Addr<CompactionPool>,
    metrics: Arc<Metrics>,
    restarts: HashMap<TableIndex, Restarts>,
}

impl AccumulatorSupervisor {
    pub fn new(
        map: Arc<RwLock<Arc<TableHandles>>>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        pool: Addr<CompactionPool>,
        metrics: Arc<Metrics>,
    ) -> Self {
        AccumulatorSupervisor {
            map,
            store,
            clock,
            pool,
            metrics,
            restarts: HashMap::new(),
        }
    }

    fn map(&self) -> Arc<TableHandles> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn check(&mut self, ctx: &mut Context<Self>) {
        let map = self.map();
        let now = self.clock.now_millis();
        for table in 0..map.len() {
            if !map.accumulator(table).is_down() {
                continue;
            }
            let name = map.spec(table).table.clone();
            let restarts = self.restarts.entry(table).or_default();
            if restarts.loading || now < restarts.not_before_millis {
                continue;
            }
            let newly_down = self.metrics.accumulator_down(&name, now);
            if newly_down {
                error!(table = %name, "the table's accumulator stopped (a bug: see the panic logged before this); restarting it from the stored state; batches with records for the table fail until then");
            }
            restarts.loading = true;
            self.restart(table, ctx);
        }
    }

    /// Loads the table's state off the actor thread, then starts its accumulator in the slot.
    fn restart(&mut self, table: TableIndex, ctx: &mut Context<Self>) {
        let map = self.map();
        let spec = map.spec(table).clone();
        let store = self.store.clone();
        let load = async move {
            tokio::task::spawn_blocking(move || Accumulator::load(spec, store.as_ref()))
                .await
                .map_err(|error| crate::store::StoreError::Read(error.to_string()))
                .and_then(|loaded| loaded)
        };
        ctx.spawn(load.into_actor(self).map(move |loaded, supervisor, _ctx| {
            let now = supervisor.clock.now_millis();
            let map = supervisor.map();
            let name = map.spec(table).table.clone();
            let restarts = supervisor.restarts.entry(table).or_default();
            restarts.loading = false;
            if now - restarts.last_millis > STABLE_AFTER_MILLIS {
                restarts.count = 0;
            }
            restarts.count += 1;
            restarts.last_millis = now;
            let delay = Backoff::doubling(RESTART_BACKOFF.0, RESTART_BACKOFF.1)
                .ceiling(restarts.count.saturating_sub(1));
            restarts.not_before_millis = now + delay.as_millis() as i64;
            let accumulator = match loaded {
                Ok(accumulator) => accumulator,
                Err(error) => {
                    warn!(table = %name, %error, "cannot load the table's state to restart its accumulator; trying again");
                    return;
                }
            };
            // The pool first: a run it started whose claim never reached the store is released
            // before the new accumulator reports the claim it has (if any).
            supervisor.pool.do_send(AccumulatorRestarted {
                table,
                claimed_run: accumulator.claim_ticket().map(|ticket| ticket.run_id),
            });
            // In the slot (which keeps the table's settings and whether it is configured), unless
            // it was started meanwhile.
            if !map.accumulator(table).restart(accumulator) {
                return;
            }
            supervisor.metrics.accumulator_up(&name);
            supervisor
                .metrics
                .accumulator_restarts
                .inc();
            info!(table = %name, restarts = restarts.count, "the table's accumulator was restarted from the stored state");
        }));
    }
}

impl Actor for AccumulatorSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(CHECK_INTERVAL, |supervisor, ctx| supervisor.check(ctx));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::intake::batch::InboundMessage;
    use crate::intake::router::tests::{message, pipeline};
    use crate::messages::{Ingest, IntakeError};
    use crate::service::Pipeline;
    use crate::store::MemoryStore;
    use crate::table::actor::Crash;

    async fn pending(pipeline: &Pipeline) -> Vec<u64> {
        let status = pipeline.status().await;
        status
            .tables
            .iter()
            .map(|table| table.pending_files)
            .collect()
    }

    #[actix::test]
    async fn a_panicked_accumulator_fails_only_its_batches_and_is_restarted_from_the_store() {
        let store = Arc::new(MemoryStore::new());
        let pipeline = pipeline(store.clone());
        let ingest = |messages: Vec<InboundMessage>| pipeline.router.send(Ingest { messages });
        ingest(vec![message("1", &["a/1.parquet", "b/1.parquet"])])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(pending(&pipeline).await, vec![1, 1]);

        pipeline.accumulator(0).do_send(Crash);
        // It panics on its worker thread (printing the backtrace can take a while).
        let crashed = std::time::Instant::now();
        while pipeline.accumulator(0).connected() {
            assert!(
                crashed.elapsed() < Duration::from_secs(10),
                "a's accumulator is gone"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The first batch goes alone; the two others wait for its commit and share the next
        // group, where the one with a record for `a` fails and the one for `b` only is handed
        // back and counted in the group after.
        let (warm, with_a, only_b) = futures::join!(
            ingest(vec![message("w", &["b/w.parquet"])]),
            ingest(vec![message("2", &["a/2.parquet", "b/2.parquet"])]),
            ingest(vec![message("3", &["b/3.parquet"])]),
        );
        assert_eq!(warm.unwrap().unwrap().summary.counted, 1);
        assert!(
            matches!(with_a.unwrap(), Err(IntakeError::AccumulatorGone(ref table)) if table == "n.a")
        );
        assert_eq!(only_b.unwrap().unwrap().summary.counted, 1);
        assert_eq!(
            pipeline.metrics.state_commits.get(),
            3,
            "the first batch, the warm-up, and the handed-back one"
        );
        let restarted = std::time::Instant::now();
        while pipeline.metrics.accumulator_restarts.get() == 0 {
            assert!(restarted.elapsed() < Duration::from_secs(10), "restarted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(pipeline.metrics.accumulators_down().is_empty());
        assert_eq!(
            pending(&pipeline).await,
            vec![1, 3],
            "a's state is the stored one; b counted on"
        );
        // The failed batch, redelivered: counted once (b's record of it was never committed).
        let report = ingest(vec![message("2", &["a/2.parquet", "b/2.parquet"])])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(report.summary.counted, 2);
        assert_eq!(pending(&pipeline).await, vec![2, 4]);
        let again = ingest(vec![message("2", &["a/2.parquet", "b/2.parquet"])])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.summary.ignored.duplicate, 2, "nothing counted twice");
    }
}
