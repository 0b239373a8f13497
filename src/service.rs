//! Wiring: builds the actor pipeline (router and one accumulator per table) over a state store.
//! Shared by `icepack run` and `icepack replay`, so both count through exactly the same path.

use std::sync::Arc;

use actix::{Actor, Addr};
use futures::future::join_all;

use crate::accumulator::Accumulator;
use crate::actors::accumulator::TableAccumulatorActor;
use crate::actors::messages::GetStatus;
use crate::actors::router::IntakeRouter;
use crate::clock::Clock;
use crate::config::TableSpec;
use crate::status::StatusReport;
use crate::store::{StateStore, StoreError};

pub struct Pipeline {
    pub tables: Arc<Vec<TableSpec>>,
    pub router: Addr<IntakeRouter>,
    pub accumulators: Vec<Addr<TableAccumulatorActor>>,
}

/// Loads every table's state and starts its actors; must run inside an actix system.
pub fn start_pipeline(
    tables: Vec<TableSpec>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    dedup_retention_days: i64,
) -> Result<Pipeline, StoreError> {
    let tables = Arc::new(tables);
    let mut accumulators = Vec::with_capacity(tables.len());
    for spec in tables.iter() {
        let accumulator = Accumulator::load(Arc::new(spec.clone()), store.as_ref())?;
        accumulators
            .push(TableAccumulatorActor::new(accumulator, store.clone(), clock.clone()).start());
    }
    let router = IntakeRouter::new(
        tables.clone(),
        accumulators.clone(),
        store,
        clock,
        dedup_retention_days,
    )
    .start();
    Ok(Pipeline {
        tables,
        router,
        accumulators,
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
}
