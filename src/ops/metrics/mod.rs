//! Process metrics through `prometheus-client`: typed label sets and families for what the actors
//! count, a histogram of run durations, and at scrape time a collector of what is read rather
//! than counted (queues, engine, store, per-table gauges) plus the standard `process_*` metrics.
//! The exposition is OpenMetrics text, which Prometheus scrapes as it is.

mod process;
pub mod series;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::intake::queue::QueueSnapshot;
use crate::model::report::FailureClass;
use crate::model::state::Maintenance;

pub use process::ProcessSample;
pub use series::TableSeries;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The kind label of a run that rewrites data files (maintenance runs carry their task's name).
pub const REWRITE_KIND: &str = "rewrite_data_files";

/// A table's series, or (no `table`) its tenant's for the tables without their own
/// ([`series::TableSeries`]). `sum by (tenant)` adds both up without counting a run twice.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct TableLabels {
    pub table: Option<String>,
    pub tenant: String,
}

impl EncodeLabelSet for TableLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        if let Some(table) = &self.table {
            ("table", table.as_str()).encode(encoder.encode_label())?;
        }
        ("tenant", self.tenant.as_str()).encode(encoder.encode_label())
    }
}

/// A run's series: its table (or tenant) and what it did (`rewrite_data_files` or a maintenance
/// task).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct RunLabels {
    pub at: TableLabels,
    pub kind: &'static str,
}

impl EncodeLabelSet for RunLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.at.encode(encoder)?;
        ("kind", self.kind).encode(encoder.encode_label())
    }
}

/// A failed run's series: its table (or tenant), what it did and why it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FailedRunLabels {
    pub at: TableLabels,
    pub kind: &'static str,
    pub class: &'static str,
}

impl EncodeLabelSet for FailedRunLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.at.encode(encoder)?;
        ("kind", self.kind).encode(encoder.encode_label())?;
        ("class", self.class).encode(encoder.encode_label())
    }
}

/// A step that failed after a run's rewrite committed: its table (or tenant) and why it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct MaintenanceFailureLabels {
    pub at: TableLabels,
    pub class: &'static str,
}

impl EncodeLabelSet for MaintenanceFailureLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.at.encode(encoder)?;
        ("class", self.class).encode(encoder.encode_label())
    }
}

/// A run duration's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// A step of an intake group's series ([`Metrics::intake_steps`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
}

/// The steps of an intake group, in order: looking its object keys up, staging its records in
/// their tables' accumulators (starting those of idle tables), and its synced commit.
pub const INTAKE_STEPS: [&str; 3] = ["lookup", "stage", "commit"];

/// Why records were not counted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// A notification sink's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

impl SinkLabels {
    pub fn new(sink: &str) -> Self {
        SinkLabels {
            sink: sink.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueErrorLabels {
    operation: &'static str,
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: String,
}

/// A family described on every scrape, with or without series: `prometheus-client` leaves an
/// empty family out, and a family that appears only after its first event makes a fresh
/// process's exposition say less than it exports (the dashboard check scrapes one).
#[derive(Debug)]
struct Described<M>(M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// The run-duration buckets, in seconds: a warm engine's seconds up to a cold hour.
const RUN_DURATION_BUCKETS: [f64; 9] = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

fn run_duration_histogram() -> Histogram {
    Histogram::new(RUN_DURATION_BUCKETS)
}

/// The intake steps' buckets, in seconds: a memtable's half millisecond up to a stalled disk.
const INTAKE_STEP_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

fn intake_step_histogram() -> Histogram {
    Histogram::new(INTAKE_STEP_BUCKETS)
}

/// Every kind label a run can carry (a removed table's series are dropped for each).
fn run_kinds() -> impl Iterator<Item = &'static str> {
    std::iter::once(REWRITE_KIND).chain(Maintenance::ALL.iter().map(|task| task.as_str()))
}

/// Every metric icepack exposes, shared by the actors that move them.
#[derive(Debug)]
pub struct Metrics {
    /// The families below, registered once; [`Metrics::render`] adds what is read at scrape time.
    registry: Registry,
    /// Every polled queue's counters and reachability, by queue ([`crate::intake::queue::QueueRegistry`]).
    pub queues: crate::intake::queue::QueueRegistry,
    pub records_counted: Family<TableLabels, Counter>,
    pub records_ignored: Family<ReasonLabels, Counter>,
    pub commit_failures: Counter,
    /// Synced state commits of intake groups (each may carry several batches).
    pub state_commits: Counter,
    /// How long each step of an intake group took ([`INTAKE_STEPS`]): where intake time goes.
    pub intake_steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    pub runs_started: Family<RunLabels, Counter>,
    pub runs_succeeded: Family<RunLabels, Counter>,
    pub runs_failed: Family<FailedRunLabels, Counter>,
    /// Steps after a committed rewrite that failed (snapshot expiry, a read, the deadline): the
    /// run counts as succeeded.
    pub maintenance_failures: Family<MaintenanceFailureLabels, Counter>,
    pub run_duration: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    pub notifications_sent: Family<SinkLabels, Counter>,
    pub notification_failures: Family<SinkLabels, Counter>,
    pub notifications_dropped: Family<SinkLabels, Counter>,
    /// Unix millis of the last failed state commit (0: none).
    pub last_commit_failure_millis: AtomicU64,
    pub last_commit_success_millis: AtomicU64,
    /// What the engine probe found last ([`crate::engine`]).
    pub engine: Arc<crate::engine::EngineHealthCell>,
    /// Whether the state store takes writes; pollers wait on it ([`crate::store::StoreGate`]).
    pub store: crate::store::StoreGate,
    /// Times the store was made writable again after failed commits.
    pub store_recoveries: Counter,
    /// Tables whose accumulator is down (stopped, not restarted yet), with since when.
    accumulators_down: Mutex<BTreeMap<String, i64>>,
    /// Accumulators restarted by the supervisor.
    pub accumulator_restarts: Counter,
    /// Tables whose accumulator runs now (an idle table has none).
    pub accumulators_live: prometheus_client::metrics::gauge::Gauge,
    /// Which tables have series of their own (`[metrics]`); the others count into their tenant's.
    series: RwLock<Arc<TableSeries>>,
    /// Every table's summary as its accumulator last published it: what the listing, the
    /// tenants' sums and the gauges read without asking every accumulator.
    pub board: Arc<crate::table::board::StatusBoard>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::default(),
            queues: crate::intake::queue::QueueRegistry::default(),
            records_counted: Family::default(),
            records_ignored: Family::default(),
            commit_failures: Counter::default(),
            state_commits: Counter::default(),
            intake_steps: Family::new_with_constructor(intake_step_histogram),
            runs_started: Family::default(),
            runs_succeeded: Family::default(),
            runs_failed: Family::default(),
            maintenance_failures: Family::default(),
            run_duration: Family::new_with_constructor(run_duration_histogram),
            notifications_sent: Family::default(),
            notification_failures: Family::default(),
            notifications_dropped: Family::default(),
            last_commit_failure_millis: AtomicU64::new(0),
            last_commit_success_millis: AtomicU64::new(0),
            engine: Arc::default(),
            store: crate::store::StoreGate::default(),
            store_recoveries: Counter::default(),
            accumulators_down: Mutex::default(),
            accumulator_restarts: Counter::default(),
            accumulators_live: Default::default(),
            series: RwLock::new(Arc::new(TableSeries::default())),
            board: Arc::default(),
        };
        metrics.register();
        metrics
    }
}

/// Per-table values read at scrape time.
#[derive(Debug, Clone)]
pub struct TableGauges {
    pub table: String,
    pub tenant: String,
    pub pending_files: u64,
    pub pending_bytes: u64,
    pub due: bool,
    pub run_in_flight: bool,
    pub consecutive_failures: u32,
}

pub type SharedMetrics = Arc<Metrics>;

/// A counter's value for a label set (0 when the series does not exist).
pub fn count<S>(family: &Family<S, Counter>, labels: &S) -> u64
where
    S: Clone + std::hash::Hash + Eq,
{
    family.get(labels).map_or(0, |counter| counter.get())
}

impl Metrics {
    /// Registers the counted families (each registry entry shares its atomics with the field).
    fn register(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "icepack_records_counted",
            "Small files counted, by tenant (and table for [metrics] tables).",
            Described(self.records_counted.clone()),
        );
        registry.register(
            "icepack_records_ignored",
            "Records not counted, by reason.",
            Described(self.records_ignored.clone()),
        );
        registry.register(
            "icepack_state_commits",
            "Synced state commits of intake (one per group of batches).",
            self.state_commits.clone(),
        );
        registry.register(
            "icepack_state_commit_failures",
            "Failed synced state commits.",
            self.commit_failures.clone(),
        );
        registry.register(
            "icepack_accumulator_restarts",
            "Table accumulators restarted from the stored state after they stopped (a bug).",
            self.accumulator_restarts.clone(),
        );
        registry.register(
            "icepack_accumulators_live",
            "Tables whose accumulator runs now; an idle table keeps none (service.idle_table_seconds).",
            self.accumulators_live.clone(),
        );
        registry.register(
            "icepack_state_recoveries",
            "Times the state store was made writable again after failed commits.",
            self.store_recoveries.clone(),
        );
        registry.register(
            "icepack_runs_started",
            "Compaction and maintenance runs started, by tenant (and table for [metrics] tables) and kind.",
            Described(self.runs_started.clone()),
        );
        registry.register(
            "icepack_runs_succeeded",
            "Compaction and maintenance runs that succeeded, by tenant (and table for [metrics] tables) and kind.",
            Described(self.runs_succeeded.clone()),
        );
        registry.register(
            "icepack_runs_failed",
            "Compaction and maintenance runs that failed, by tenant (and table for [metrics] tables), kind and failure class.",
            Described(self.runs_failed.clone()),
        );
        registry.register(
            "icepack_maintenance_failures",
            "Steps after a committed rewrite that failed (snapshot expiry, a metadata read, the deadline), by tenant (and table for [metrics] tables) and failure class; the run itself succeeded.",
            Described(self.maintenance_failures.clone()),
        );
        for step in INTAKE_STEPS {
            // Every step's series from the start: a fresh process exports what it will.
            let _ = self.intake_steps.get_or_create(&StepLabels { step });
        }
        registry.register_with_unit(
            "icepack_intake_step_duration",
            "Duration of each step of an intake group (the batches committed together): lookup (the object keys), stage (the records in their tables' accumulators, idle ones started) and commit (the synced state write).",
            Unit::Seconds,
            Described(self.intake_steps.clone()),
        );
        registry.register_with_unit(
            "icepack_run_duration",
            "Duration of compaction runs, by outcome.",
            Unit::Seconds,
            Described(self.run_duration.clone()),
        );
        registry.register(
            "icepack_notifications_sent",
            "Notifications delivered, by sink.",
            Described(self.notifications_sent.clone()),
        );
        registry.register(
            "icepack_notification_failures",
            "Notifications given up on, by sink.",
            Described(self.notification_failures.clone()),
        );
        registry.register(
            "icepack_notifications_dropped",
            "Notifications dropped because the sink's queue was full, by sink.",
            Described(self.notifications_dropped.clone()),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
    }

    /// Which tables have series of their own from now on (start-up and every reload). A table
    /// that loses its own series leaves the exposition ([`Metrics::forget_table`] it); what it
    /// counts from now on goes to its tenant's series.
    pub fn set_series(&self, series: TableSeries) {
        *self.series.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(series);
    }

    /// The selection in force.
    pub fn series(&self) -> Arc<TableSeries> {
        self.series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The labels a table's counts go to: its own, or its tenant's.
    pub fn table_labels(&self, table: &str, tenant: &str) -> TableLabels {
        TableLabels {
            table: self.series().own(table).then(|| table.to_string()),
            tenant: tenant.to_string(),
        }
    }

    /// A reload removed the table (or moved it to another tenant, or took its own series
    /// away): its own counted series go, so a dashboard shows no table that is not configured
    /// and label sets do not pile up. Its tenant's series keep what it counted into them.
    pub fn forget_table(&self, table: &str, tenant: &str) {
        self.forget(TableLabels {
            table: Some(table.to_string()),
            tenant: tenant.to_string(),
        });
    }

    /// A tenant a reload removed: its aggregate series go.
    pub fn forget_tenant(&self, tenant: &str) {
        self.forget(TableLabels {
            table: None,
            tenant: tenant.to_string(),
        });
    }

    /// Removes every counted series of `at`.
    fn forget(&self, at: TableLabels) {
        self.records_counted.remove(&at);
        for class in FailureClass::ALL {
            self.maintenance_failures.remove(&MaintenanceFailureLabels {
                at: at.clone(),
                class: class.as_str(),
            });
        }
        for kind in run_kinds() {
            let run = RunLabels {
                at: at.clone(),
                kind,
            };
            self.runs_started.remove(&run);
            self.runs_succeeded.remove(&run);
            for class in FailureClass::ALL {
                self.runs_failed.remove(&FailedRunLabels {
                    at: at.clone(),
                    kind,
                    class: class.as_str(),
                });
            }
        }
    }

    /// A table's accumulator is down; returns whether it was up until now.
    pub fn accumulator_down(&self, table: &str, now: i64) -> bool {
        let mut down = self
            .accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.contains_key(table) {
            return false;
        }
        down.insert(table.to_string(), now);
        true
    }

    pub fn accumulator_up(&self, table: &str) {
        self.accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(table);
    }

    /// Tables whose accumulator is down, with since when.
    pub fn accumulators_down(&self) -> Vec<(String, i64)> {
        self.accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(table, since)| (table.clone(), *since))
            .collect()
    }

    /// The whole exposition ([`CONTENT_TYPE`]): the counted families, then what this scrape reads
    /// (queues, engine, store, the tables' gauges given), then `# EOF`.
    pub fn render(&self, tables: &[TableGauges]) -> String {
        let engine = self.engine.get();
        let scrape = Scrape {
            queues: self.queues.snapshot(),
            engine: engine
                .answering
                .map(|answering| (engine.engine, answering, engine.probe_millis.unwrap_or(0))),
            writable: self.store.is_writable(),
            accumulators_down: self.accumulators_down().len() as u64,
            tenants: series::by_tenant(tables)
                .into_iter()
                .map(|(tenant, sums)| (tenant.to_string(), sums))
                .collect(),
            tables: self.series().pick(tables).into_iter().cloned().collect(),
            tables_due: tables.iter().filter(|table| table.due).count() as u64,
        };
        let mut per_scrape = Registry::default();
        per_scrape.register_collector(Box::new(scrape));
        let mut out = String::new();
        // Writing into a String cannot fail; the encoders return fmt::Result for other writers.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &per_scrape))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

/// What one scrape reads rather than counts, encoded after the registered families.
#[derive(Debug)]
struct Scrape {
    queues: Vec<QueueSnapshot>,
    /// The engine's description, whether it answered its last probe and how long that took.
    engine: Option<(String, bool, u64)>,
    writable: bool,
    accumulators_down: u64,
    /// Every tenant's tables added up.
    tenants: Vec<(String, series::TenantGauges)>,
    /// The tables whose own gauges this scrape exports ([`TableSeries::pick`]).
    tables: Vec<TableGauges>,
    /// Tables due, of all.
    tables_due: u64,
}

/// Encodes one family of series read now: a descriptor, then a value per label set.
fn family<S, M>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    series: impl IntoIterator<Item = (S, M)>,
) -> Result<(), std::fmt::Error>
where
    S: EncodeLabelSet,
    M: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    value.encode(encoder.encode_descriptor(name, help, None, value.metric_type())?)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let encoder = &mut encoder;
        single(
            encoder,
            "icepack_up",
            "1 while the process runs.",
            ConstGauge::new(1i64),
        )?;
        if let Some((engine, answering, probe_millis)) = &self.engine {
            let labels = || EngineLabels {
                engine: engine.clone(),
            };
            family(
                encoder,
                "icepack_engine_up",
                "1 when the Spark engine answered its last probe.",
                MetricType::Gauge,
                [(labels(), ConstGauge::new(i64::from(*answering)))],
            )?;
            family(
                encoder,
                "icepack_engine_probe_seconds",
                "How long the last engine probe took.",
                MetricType::Gauge,
                [(labels(), ConstGauge::new(*probe_millis as f64 / 1000.0))],
            )?;
        }
        self.encode_queues(encoder)?;
        single(
            encoder,
            "icepack_state_writable",
            "1 while the state store takes writes; 0 from a failed commit until a probe succeeds (receiving is paused).",
            ConstGauge::new(i64::from(self.writable)),
        )?;
        single(
            encoder,
            "icepack_accumulators_down",
            "Table accumulators stopped and not restarted yet.",
            ConstGauge::new(self.accumulators_down),
        )?;
        self.encode_tenants(encoder)?;
        let tables = |value: fn(&TableGauges) -> u64| {
            self.tables.iter().map(move |table| {
                (
                    TableLabels {
                        table: Some(table.table.clone()),
                        tenant: table.tenant.clone(),
                    },
                    ConstGauge::new(value(table)),
                )
            })
        };
        family(
            encoder,
            "icepack_table_pending_files",
            "Pending small files, by table ([metrics] tables and worst_tables).",
            MetricType::Gauge,
            tables(|t| t.pending_files),
        )?;
        family(
            encoder,
            "icepack_table_pending_bytes",
            "Bytes of pending small files, by table ([metrics] tables and worst_tables).",
            MetricType::Gauge,
            tables(|t| t.pending_bytes),
        )?;
        family(
            encoder,
            "icepack_table_due",
            "1 when the table is due for compaction ([metrics] tables and worst_tables).",
            MetricType::Gauge,
            tables(|t| u64::from(t.due)),
        )?;
        family(
            encoder,
            "icepack_table_run_in_flight",
            "1 while a compaction of the table runs ([metrics] tables and worst_tables).",
            MetricType::Gauge,
            tables(|t| u64::from(t.run_in_flight)),
        )?;
        family(
            encoder,
            "icepack_table_consecutive_failures",
            "Failed runs in a row, by table ([metrics] tables and worst_tables).",
            MetricType::Gauge,
            tables(|t| u64::from(t.consecutive_failures)),
        )?;
        single(
            encoder,
            "icepack_tables_due",
            "Tables due for compaction.",
            ConstGauge::new(self.tables_due),
        )
    }
}

impl Scrape {
    /// Every tenant's sums, whatever `[metrics]` exports by table.
    fn encode_tenants(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let tenants = |value: fn(&series::TenantGauges) -> u64| {
            self.tenants.iter().map(move |(tenant, sums)| {
                (
                    TenantLabels {
                        tenant: tenant.clone(),
                    },
                    ConstGauge::new(value(sums)),
                )
            })
        };
        family(
            encoder,
            "icepack_tenant_tables",
            "Configured tables, by tenant.",
            MetricType::Gauge,
            tenants(|t| t.tables),
        )?;
        family(
            encoder,
            "icepack_tenant_pending_files",
            "Pending small files of the tenant's tables.",
            MetricType::Gauge,
            tenants(|t| t.pending_files),
        )?;
        family(
            encoder,
            "icepack_tenant_pending_bytes",
            "Bytes of pending small files of the tenant's tables.",
            MetricType::Gauge,
            tenants(|t| t.pending_bytes),
        )?;
        family(
            encoder,
            "icepack_tenant_tables_due",
            "The tenant's tables due for compaction.",
            MetricType::Gauge,
            tenants(|t| t.tables_due),
        )?;
        family(
            encoder,
            "icepack_tenant_runs_in_flight",
            "Compactions of the tenant's tables running.",
            MetricType::Gauge,
            tenants(|t| t.runs_in_flight),
        )?;
        family(
            encoder,
            "icepack_tenant_tables_failing",
            "The tenant's tables whose last run failed.",
            MetricType::Gauge,
            tenants(|t| t.tables_failing),
        )
    }

    /// The per-queue series, labelled by queue; a queue a reload removed has none.
    fn encode_queues(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counters = |value: fn(&QueueSnapshot) -> u64| {
            self.queues.iter().map(move |queue| {
                (
                    QueueLabels {
                        queue: queue.queue.clone(),
                    },
                    ConstCounter::new(value(queue)),
                )
            })
        };
        family(
            encoder,
            "icepack_sqs_messages_received",
            "SQS messages received, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_received),
        )?;
        family(
            encoder,
            "icepack_sqs_messages_deleted",
            "SQS messages deleted after their counts were durable, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_deleted),
        )?;
        family(
            encoder,
            "icepack_sqs_messages_invalid",
            "SQS messages left in the queue because they (or a record) could not be parsed, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_invalid),
        )?;
        family(
            encoder,
            "icepack_sqs_delete_failures",
            "Messages the queue refused to delete, by queue.",
            MetricType::Counter,
            counters(|queue| queue.delete_failures),
        )?;
        family(
            encoder,
            "icepack_sqs_last_receive_timestamp_seconds",
            "Unix time of the queue's last successful receive (0: not reached since start-up), by queue.",
            MetricType::Gauge,
            self.queues.iter().map(|queue| {
                (
                    QueueLabels {
                        queue: queue.queue.clone(),
                    },
                    ConstGauge::new(queue.last_receive_millis.unwrap_or(0) as f64 / 1000.0),
                )
            }),
        )?;
        family(
            encoder,
            "icepack_sqs_errors",
            "SQS calls that failed, by operation and queue.",
            MetricType::Counter,
            self.queues.iter().flat_map(|queue| {
                queue.errors.iter().map(|(operation, count)| {
                    (
                        QueueErrorLabels {
                            operation,
                            queue: queue.queue.clone(),
                        },
                        ConstCounter::new(*count),
                    )
                })
            }),
        )
    }
}

#[cfg(test)]
mod tests;
