//! Wiring: builds the actor pipeline (router, one accumulator per table, executor pool) over a
//! state store, and applies a new configuration's table map to it while it runs. Shared by `run`,
//! `replay` and `compact`, so all count and compact through exactly the same path.
//!
//! The accumulators run on worker threads of their own ([`Workers`], one per core by default),
//! table `i` always on worker `i % n`: staging a group's tables goes on in parallel, and a busy
//! table never holds up the router, the pollers, the timers or the HTTP API, which stay on the
//! system's thread. Each table still has exactly one accumulator, its state's only writer.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix::{Actor, Addr};
use futures::future::join_all;

use crate::base::clock::Clock;
use crate::config::{Config, TableSpec};
use crate::engine::spark::runner::SparkRunner;
use crate::intake::router::IntakeRouter;
use crate::intake::routing::TableIndex;
use crate::messages::{GetStatus, SetTableMap};
use crate::ops::listing::{Row, TableQuery};
use crate::ops::metrics::Metrics;
use crate::ops::notifier::Notifier;
use crate::ops::status::{StatusReport, TableStatus};
use crate::runs::executor::{CompactionPool, SetSettings};
use crate::runs::settings::CompactionSettings;
use crate::store::{StateStore, StoreError};
use crate::table::accumulator::Accumulator;
use crate::table::board::TableSummary;
use crate::table::handle::TableHandles;
use crate::table::handle::{Starter, TableHandle};
use crate::table::map::plan_changes;
use crate::table::supervisor::AccumulatorSupervisor;
use crate::table::waker::{WakeAt, Waker};

impl Pipeline {
    /// The state store (for reads such as the run history).
    pub fn store(&self) -> Arc<dyn StateStore> {
        self.store.clone()
    }
}

#[derive(Clone)]
pub struct Pipeline {
    map: Arc<RwLock<Arc<TableHandles>>>,
    pub router: Addr<IntakeRouter>,
    pub pool: Addr<CompactionPool>,
    pub supervisor: Addr<AccumulatorSupervisor>,
    pub metrics: Arc<Metrics>,
    pub waker: Addr<Waker>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    starter: Arc<Starter>,
    /// The pool's engine, asked for plans (`GET /v1/tables/{table}/plan`).
    engine: Arc<dyn crate::engine::Engine>,
}

pub use crate::table::workers::Workers;

/// How the pipeline compacts.
pub struct Compaction {
    pub settings: CompactionSettings,
    pub engine: Arc<dyn crate::engine::Engine>,
    /// `false`: tables are counted and reported due, never compacted.
    pub enabled: bool,
}

impl Compaction {
    /// Every run on Spark through `runner` (tests and benchmarks give a stand-in).
    pub fn spark(
        settings: CompactionSettings,
        runner: Arc<dyn SparkRunner>,
        enabled: bool,
    ) -> Compaction {
        Compaction {
            engine: Arc::new(crate::engine::spark::SparkEngine::new(
                runner,
                settings.clone(),
            )),
            settings,
            enabled,
        }
    }
}

/// Loads the state of every table of `tables` (the configuration's [`Config::table_specs`]) and
/// starts the actors (an accumulator for each table that has something to do); must run inside
/// an actix system.
pub fn start_pipeline(
    tables: Vec<TableSpec>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    compaction: Compaction,
    metrics: Arc<Metrics>,
    notifier: Option<Addr<Notifier>>,
) -> Result<Pipeline, StoreError> {
    let idle_after = match compaction.settings.config.service.idle_table_seconds.get() {
        0 => None,
        seconds => Some(Duration::from_secs(seconds)),
    };
    start_pipeline_idling(
        tables, store, clock, compaction, metrics, notifier, idle_after,
    )
}

/// [`start_pipeline`] with accumulators stopping after `idle_after` of idleness (`None`: never)
/// whatever the configuration says (tests and benchmarks use shorter ones than a second).
pub fn start_pipeline_idling(
    tables: Vec<TableSpec>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    compaction: Compaction,
    metrics: Arc<Metrics>,
    notifier: Option<Addr<Notifier>>,
    idle_after: Option<Duration>,
) -> Result<Pipeline, StoreError> {
    let config = compaction.settings.config.clone();
    let backoff = compaction.settings.backoff;
    let engine = compaction.engine.clone();
    let pool = CompactionPool::new(
        compaction.settings,
        compaction.engine,
        store.clone(),
        clock.clone(),
        compaction.enabled,
        metrics.clone(),
        notifier,
    )
    .start();
    let workers = Arc::new(
        Workers::start(config.service.worker_threads.as_usize())
            .publishing_to(metrics.board.clone()),
    );
    let map = Arc::new(RwLock::new(Arc::new(TableHandles::default())));
    let waker = Waker::new(map.clone(), clock.clone()).start();
    let starter = Arc::new(Starter {
        workers,
        store: store.clone(),
        clock: clock.clone(),
        pool: Some(pool.clone()),
        backoff,
        idle_after,
        started_millis: clock.now_millis(),
        waker: Some(waker.clone()),
        metrics: metrics.clone(),
    });
    // One copy of each table's spec, shared by the router, the pool and its accumulator.
    let specs: Vec<_> = tables.into_iter().map(Arc::new).collect();
    let mut handles = Vec::with_capacity(specs.len());
    for (index, spec) in specs.iter().enumerate() {
        let accumulator = Accumulator::load(spec.clone(), store.as_ref())?;
        handles.push(handle_of(&starter, index, accumulator));
    }
    let table_map = Arc::new(TableHandles::new(specs, handles, config.tenant_specs()));
    *map.write().expect("table map lock") = table_map.clone();
    pool.do_send(SetTableMap(table_map.clone()));
    let router = IntakeRouter::new(
        table_map,
        store.clone(),
        clock.clone(),
        config.service.dedup_retention_days.get(),
        metrics.clone(),
    )
    .start();
    let supervisor = AccumulatorSupervisor::new(
        map.clone(),
        store.clone(),
        clock.clone(),
        pool.clone(),
        metrics.clone(),
    )
    .start();
    Ok(Pipeline {
        map,
        router,
        pool,
        supervisor,
        metrics,
        waker,
        store,
        clock,
        starter,
        engine,
    })
}

/// The handle of a table with this loaded state: a table at rest gets no accumulator (its
/// summary goes on the board, its scheduled work to the waker); any other starts one now.
fn handle_of(starter: &Arc<Starter>, index: TableIndex, accumulator: Accumulator) -> TableHandle {
    let now = starter.clock.now_millis();
    if starter.idle_after.is_none() || !accumulator.at_rest(now) {
        return TableHandle::started(index, accumulator, starter.clone());
    }
    starter.metrics.board.publish(
        &accumulator.spec().table,
        TableSummary::of(accumulator.snapshot(), false),
    );
    if let (Some(at), Some(waker), Some(_)) = (
        accumulator.scheduled_at(starter.started_millis),
        &starter.waker,
        &starter.pool,
    ) {
        waker.do_send(WakeAt { table: index, at });
    }
    TableHandle::idle(index, accumulator.spec_arc(), true, starter.clone())
}

/// Requests joined at once when many tables are asked for their status: one join of 100,000
/// requests spent 11.7 s waking and polling its futures (`FuturesUnordered`), joins of this
/// size one after the other 0.73 s (BENCHMARKS.md §3, "100,000 tables").
const STATUS_CHUNK: usize = 512;

/// The statuses of the tables at `indices`, in that order (a table whose accumulator is down is
/// left out): a live accumulator's own; an idle table's read from the store (a chunk's in one
/// blocking task), not started for it.
async fn statuses_of(
    map: &TableHandles,
    indices: &[usize],
    store: &Arc<dyn StateStore>,
    clock: &Arc<dyn Clock>,
) -> Vec<TableStatus> {
    let mut statuses = Vec::with_capacity(indices.len());
    for chunk in indices.chunks(STATUS_CHUNK) {
        let handles: Vec<TableHandle> = chunk.iter().map(|&index| map.accumulator(index)).collect();
        let resting: Vec<Option<Arc<TableSpec>>> =
            handles.iter().map(TableHandle::resting_spec).collect();
        let asked = join_all(handles.iter().zip(&resting).map(|(handle, resting)| {
            let request = resting.is_none().then(|| handle.send(GetStatus));
            async move {
                match request {
                    Some(request) => request.await.ok(),
                    None => None,
                }
            }
        }));
        let specs: Vec<_> = resting.iter().flatten().cloned().collect();
        let (store, clock) = (store.clone(), clock.clone());
        // A chunk of live tables only (one table's status, mostly) needs no blocking task.
        let read = async move {
            if specs.is_empty() {
                return Vec::new();
            }
            tokio::task::spawn_blocking(move || {
                let now = clock.now_millis();
                specs
                    .iter()
                    .map(|spec| {
                        let snapshot = store.load_table(&spec.table).ok()?;
                        Some(crate::ops::status::table_status(spec, &snapshot, now))
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default()
        };
        let (asked, read) = futures::join!(asked, read);
        let mut read = read.into_iter();
        for (asked, resting) in asked.into_iter().zip(&resting) {
            let status = match resting {
                Some(_) => read.next().flatten(),
                None => asked,
            };
            statuses.extend(status);
        }
    }
    statuses
}

/// A page of the table listing ([`Pipeline::list`]).
#[derive(Debug)]
pub struct Listing {
    /// The page's tables, in the query's order.
    pub tables: Vec<TableStatus>,
    /// Tables matching the filters, across all pages.
    pub matched: usize,
    /// Every table listed before filtering.
    pub total: usize,
    pub offset: usize,
    pub limit: Option<usize>,
}

/// What a reload changed in the table map.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MapReport {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    pub tables: usize,
    pub tenants: usize,
}

impl Pipeline {
    /// The pipeline's singletons that are down: nothing restarts them, the process must be
    /// restarted (`/healthz` fails).
    pub fn singletons_down(&self) -> Vec<&'static str> {
        let mut down = Vec::new();
        if !self.router.connected() {
            down.push("the intake router");
        }
        if !self.pool.connected() {
            down.push("the executor pool");
        }
        if !self.supervisor.connected() {
            down.push("the accumulator supervisor");
        }
        down
    }

    /// The current table map.
    pub fn map(&self) -> Arc<TableHandles> {
        self.map.read().expect("table map lock").clone()
    }

    /// Every configured table's status as its accumulator sees it, in slot order.
    pub async fn status(&self) -> StatusReport {
        let map = self.map();
        let indices: Vec<usize> = map.active().map(|(index, _)| index).collect();
        StatusReport {
            tables: statuses_of(&map, &indices, &self.store, &self.clock).await,
        }
    }

    /// Every table of `map` with its summary from the board, in the map's order: no
    /// accumulator is asked.
    pub fn summaries(&self, map: &TableHandles) -> Vec<(usize, TableSummary)> {
        self.metrics.board.read(
            map.active()
                .map(|(index, spec)| (index, spec.table.as_str())),
        )
    }

    /// A page of the table listing: filtered, sorted and paged from the board's summaries
    /// (no accumulator asked), then only the page's tables asked for their full status.
    pub async fn list(&self, query: &TableQuery) -> Listing {
        let map = self.map();
        let rows: Vec<Row<'_>> = self
            .summaries(&map)
            .into_iter()
            .map(|(index, summary)| {
                let spec = map.spec(index);
                Row {
                    index,
                    table: &spec.table,
                    tenant: &spec.tenant,
                    summary,
                }
            })
            .collect();
        let page = query.select(rows);
        let indices: Vec<usize> = page.tables.iter().map(|row| row.index).collect();
        let tables = statuses_of(&map, &indices, &self.store, &self.clock).await;
        Listing {
            tables,
            matched: page.matched,
            total: page.total,
            offset: page.offset,
            limit: page.limit,
        }
    }

    /// The pipeline's actors whose mailbox has closed (a panic, or a stop nobody asked for), by
    /// what they are; the accumulators of removed tables are not counted.
    pub fn actors_down(&self) -> Vec<String> {
        /// Accumulators named one by one; the rest are counted.
        const NAMED: usize = 10;
        let mut down: Vec<String> = self
            .singletons_down()
            .into_iter()
            .map(str::to_string)
            .collect();
        let map = self.map();
        let stopped: Vec<&str> = map
            .active()
            .filter(|(index, _)| map.accumulator(*index).is_down())
            .map(|(_, spec)| spec.table.as_str())
            .collect();
        for table in stopped.iter().take(NAMED) {
            down.push(format!(
                "the accumulator of table {table} (the supervisor restarts it from the stored state)"
            ));
        }
        if stopped.len() > NAMED {
            down.push(format!(
                "the accumulators of {} more tables",
                stopped.len() - NAMED
            ));
        }
        down
    }

    /// The slot of a configured table.
    pub fn table_index(&self, table: &str) -> Option<usize> {
        self.map().active_index_of(table)
    }

    pub fn accumulator(&self, table: usize) -> TableHandle {
        self.map().accumulator(table)
    }

    /// What the table's next run would do, writing nothing (`None`: no such active table).
    pub async fn preview(
        &self,
        table: &str,
    ) -> Option<Result<crate::model::preview::RunPreview, crate::ops::plan::PreviewError>> {
        let map = self.map();
        let spec = map.spec(map.active_index_of(table)?).clone();
        Some(
            crate::ops::plan::preview(
                spec,
                self.store.clone(),
                self.engine.as_ref(),
                self.clock.now_millis(),
            )
            .await,
        )
    }

    /// One table's status, without starting an idle table's accumulator.
    pub async fn table_status(&self, table: usize) -> Option<TableStatus> {
        statuses_of(&self.map(), &[table], &self.store, &self.clock)
            .await
            .pop()
    }

    /// Applies a new (validated) configuration's tables, tenants and Spark settings: new tables
    /// start counting, removed ones stop (state kept), changed thresholds apply at once. Must run
    /// inside the actix system. Reloads must not run concurrently (the caller serialises them).
    ///
    /// Comparing the maps, loading the new tables' states (10,000 on a large reload) and starting
    /// their accumulators on the workers happen on the blocking pool: intake, timers and the API
    /// go on meanwhile.
    pub async fn apply(&self, config: &Arc<Config>) -> Result<MapReport, StoreError> {
        let current = self.map();
        let (changes, started) = {
            let (current, config) = (current.clone(), config.clone());
            let (store, starter) = (self.store.clone(), self.starter.clone());
            tokio::task::spawn_blocking(move || {
                let changes = plan_changes(&current, config.table_specs());
                // Every new table is loaded before anything starts or changes: a failure leaves
                // the running map as is.
                let loaded = changes
                    .added
                    .iter()
                    .map(|spec| Accumulator::load(spec.clone(), store.as_ref()))
                    .collect::<Result<Vec<_>, _>>()?;
                let started: Vec<_> = loaded
                    .into_iter()
                    .enumerate()
                    .map(|(offset, accumulator)| {
                        handle_of(&starter, current.len() + offset, accumulator)
                    })
                    .collect();
                Ok::<_, StoreError>((changes, started))
            })
            .await
            .map_err(|error| StoreError::Read(error.to_string()))??
        };
        let next = Arc::new(current.apply(&changes, started, config.tenant_specs()));
        // The pool first: a table a reload brings back asks for runs as soon as its accumulator
        // hears it is configured again, and the pool must know it is by then.
        self.pool
            .do_send(SetSettings(CompactionSettings::from_config(config.clone())));
        self.pool.do_send(SetTableMap(next.clone()));
        for &index in &changes.changed {
            next.accumulator(index)
                .update(next.spec(index).clone(), true);
        }
        for &index in &changes.removed {
            next.accumulator(index)
                .update(next.spec(index).clone(), false);
        }
        self.router.do_send(SetTableMap(next.clone()));
        *self.map.write().expect("table map lock") = next.clone();
        let names = |indices: &[usize]| -> Vec<String> {
            indices
                .iter()
                .map(|&index| next.spec(index).table.clone())
                .collect()
        };
        Ok(MapReport {
            added: changes
                .added
                .iter()
                .map(|spec| spec.table.clone())
                .collect(),
            changed: names(&changes.changed),
            removed: names(&changes.removed),
            tables: next.num_active(),
            tenants: next.tenants().count(),
        })
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
