//! Wiring: builds the actor pipeline (router, one accumulator per table, executor pool) over a
//! state store. Shared by `run`, `replay` and `compact`, so all count and compact through exactly
//! the same path.

use std::sync::Arc;

use actix::{Actor, Addr};
use futures::future::join_all;

use crate::accumulator::Accumulator;
use crate::actors::accumulator::TableAccumulatorActor;
use crate::actors::executor::{CompactionPool, RegisterTables};
use crate::actors::messages::GetStatus;
use crate::actors::notifier::Notifier;
use crate::actors::router::IntakeRouter;
use crate::clock::Clock;
use crate::compaction::CompactionSettings;
use crate::config::TableSpec;
use crate::metrics::Metrics;
use crate::spark::runner::SparkRunner;
use crate::status::StatusReport;
use crate::store::{StateStore, StoreError};

#[derive(Clone)]
pub struct Pipeline {
    pub tables: Arc<Vec<Arc<TableSpec>>>,
    pub router: Addr<IntakeRouter>,
    pub accumulators: Vec<Addr<TableAccumulatorActor>>,
    pub pool: Addr<CompactionPool>,
    pub metrics: Arc<Metrics>,
}

/// How the pipeline compacts.
pub struct Compaction {
    pub settings: CompactionSettings,
    pub runner: Arc<dyn SparkRunner>,
    /// `false`: tables are counted and reported due, never compacted.
    pub enabled: bool,
}

/// Loads every table's state and starts its actors; must run inside an actix system.
pub fn start_pipeline(
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    compaction: Compaction,
    metrics: Arc<Metrics>,
    notifier: Option<Addr<Notifier>>,
) -> Result<Pipeline, StoreError> {
    let config = compaction.settings.config.clone();
    // One copy of each table's spec, shared by the router, the pool and its accumulator.
    let tables: Arc<Vec<Arc<TableSpec>>> =
        Arc::new(config.table_specs().into_iter().map(Arc::new).collect());
    let backoff = compaction.settings.backoff;
    let pool = CompactionPool::new(
        compaction.settings,
        tables.clone(),
        compaction.runner,
        clock.clone(),
        compaction.enabled,
        metrics.clone(),
        notifier,
    )
    .start();
    let mut accumulators = Vec::with_capacity(tables.len());
    for (index, spec) in tables.iter().enumerate() {
        let accumulator = Accumulator::load(spec.clone(), store.as_ref())?;
        accumulators.push(
            TableAccumulatorActor::new(
                index,
                accumulator,
                store.clone(),
                clock.clone(),
                Some(pool.clone()),
                backoff,
            )
            .start(),
        );
    }
    pool.do_send(RegisterTables(accumulators.clone()));
    let router = IntakeRouter::new(
        tables.clone(),
        accumulators.clone(),
        store,
        clock,
        config.service.dedup_retention_days,
        metrics.clone(),
    )
    .start();
    Ok(Pipeline {
        tables,
        router,
        accumulators,
        pool,
        metrics,
    })
}

impl Pipeline {
    /// Every table's status as its accumulator sees it.
    pub async fn status(&self) -> StatusReport {
        let statuses = join_all(self.accumulators.iter().map(|actor| actor.send(GetStatus))).await;
        StatusReport {
            tables: statuses.into_iter().filter_map(Result::ok).collect(),
        }
    }

    pub fn table_index(&self, table: &str) -> Option<usize> {
        self.tables.iter().position(|spec| spec.table == table)
    }
}

/// Gives the heap pages freed after start-up back to the system. Parsing a configuration of
/// thousands of tables leaves megabytes of freed, fragmented heap that glibc keeps otherwise.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the OS; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
