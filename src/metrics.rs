//! Process metrics in the Prometheus text format: counters and a histogram kept in atomics, and
//! gauges computed at scrape time. Hand-rolled: a few dozen series do not need a framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::queue::QueueSnapshot;

/// Label names and values of one series.
type LabelSet = Vec<(&'static str, String)>;

/// Bucket counts, sum and count of one histogram series.
type HistogramSeries = (Vec<u64>, f64, u64);

/// A counter family: one value per label set.
#[derive(Debug, Default)]
pub struct CounterVec {
    values: Mutex<BTreeMap<LabelSet, u64>>,
}

impl CounterVec {
    pub fn add(&self, labels: &[(&'static str, &str)], by: u64) {
        let key: Vec<(&'static str, String)> = labels
            .iter()
            .map(|(name, value)| (*name, value.to_string()))
            .collect();
        *self.values.lock().unwrap().entry(key).or_insert(0) += by;
    }

    pub fn inc(&self, labels: &[(&'static str, &str)]) {
        self.add(labels, 1);
    }

    pub fn get(&self, labels: &[(&'static str, &str)]) -> u64 {
        let key: Vec<(&'static str, String)> = labels
            .iter()
            .map(|(name, value)| (*name, value.to_string()))
            .collect();
        self.values.lock().unwrap().get(&key).copied().unwrap_or(0)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (labels, value) in self.values.lock().unwrap().iter() {
            let _ = writeln!(out, "{name}{} {value}", format_labels(labels));
        }
    }
}

/// A histogram of seconds with fixed buckets, one series per label set.
#[derive(Debug)]
pub struct HistogramVec {
    bounds: Vec<f64>,
    series: Mutex<BTreeMap<LabelSet, HistogramSeries>>,
}

impl HistogramVec {
    pub fn new(bounds: &[f64]) -> Self {
        HistogramVec {
            bounds: bounds.to_vec(),
            series: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn observe(&self, labels: &[(&'static str, &str)], value: f64) {
        let key: Vec<(&'static str, String)> = labels
            .iter()
            .map(|(name, value)| (*name, value.to_string()))
            .collect();
        let mut series = self.series.lock().unwrap();
        let (buckets, sum, count) = series
            .entry(key)
            .or_insert_with(|| (vec![0; self.bounds.len()], 0.0, 0));
        for (bucket, bound) in buckets.iter_mut().zip(&self.bounds) {
            if value <= *bound {
                *bucket += 1;
            }
        }
        *sum += value;
        *count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (labels, (buckets, sum, count)) in self.series.lock().unwrap().iter() {
            for (bucket, bound) in buckets.iter().zip(&self.bounds) {
                let mut with_le = labels.clone();
                with_le.push(("le", format!("{bound}")));
                let _ = writeln!(out, "{name}_bucket{} {bucket}", format_labels(&with_le));
            }
            let mut with_le = labels.clone();
            with_le.push(("le", "+Inf".to_string()));
            let _ = writeln!(out, "{name}_bucket{} {count}", format_labels(&with_le));
            let _ = writeln!(out, "{name}_sum{} {sum}", format_labels(labels));
            let _ = writeln!(out, "{name}_count{} {count}", format_labels(labels));
        }
    }
}

fn format_labels(labels: &[(&'static str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label(value)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every metric icepack exposes, shared by the actors that move them.
#[derive(Debug)]
pub struct Metrics {
    /// Every polled queue's counters and reachability, by queue ([`crate::queue::QueueRegistry`]).
    pub queues: crate::queue::QueueRegistry,
    pub records_counted: CounterVec,
    pub records_ignored: CounterVec,
    pub commit_failures: AtomicU64,
    /// Synced state commits of intake groups (each may carry several batches).
    pub state_commits: AtomicU64,
    pub runs_started: CounterVec,
    pub runs_succeeded: CounterVec,
    pub runs_failed: CounterVec,
    pub run_duration: HistogramVec,
    pub notifications_sent: CounterVec,
    pub notification_failures: CounterVec,
    pub notifications_dropped: CounterVec,
    /// Unix millis of the last failed state commit (0: none).
    pub last_commit_failure_millis: AtomicU64,
    pub last_commit_success_millis: AtomicU64,
    /// What the engine probe found last ([`crate::engine`]).
    pub engine: Arc<crate::engine::EngineHealthCell>,
    /// Whether the state store takes writes; pollers wait on it ([`crate::store::StoreGate`]).
    pub store: crate::store::StoreGate,
    /// Times the store was made writable again after failed commits.
    pub store_recoveries: AtomicU64,
    /// Tables whose accumulator is down (stopped, not restarted yet), with since when.
    accumulators_down: std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
    /// Accumulators restarted by the supervisor.
    pub accumulator_restarts: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            queues: crate::queue::QueueRegistry::default(),
            records_counted: CounterVec::default(),
            records_ignored: CounterVec::default(),
            commit_failures: AtomicU64::new(0),
            state_commits: AtomicU64::new(0),
            runs_started: CounterVec::default(),
            runs_succeeded: CounterVec::default(),
            runs_failed: CounterVec::default(),
            run_duration: HistogramVec::new(&[
                5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
            ]),
            notifications_sent: CounterVec::default(),
            notification_failures: CounterVec::default(),
            notifications_dropped: CounterVec::default(),
            last_commit_failure_millis: AtomicU64::new(0),
            last_commit_success_millis: AtomicU64::new(0),
            engine: Arc::default(),
            store: crate::store::StoreGate::default(),
            store_recoveries: AtomicU64::new(0),
            accumulators_down: Default::default(),
            accumulator_restarts: AtomicU64::new(0),
        }
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

impl Metrics {
    /// A table's accumulator is down; returns whether it was up until now.
    pub fn accumulator_down(&self, table: &str, now: i64) -> bool {
        let mut down = self
            .accumulators_down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if down.contains_key(table) {
            return false;
        }
        down.insert(table.to_string(), now);
        true
    }

    pub fn accumulator_up(&self, table: &str) {
        self.accumulators_down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(table);
    }

    /// Tables whose accumulator is down, with since when.
    pub fn accumulators_down(&self) -> Vec<(String, i64)> {
        self.accumulators_down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(table, since)| (table.clone(), *since))
            .collect()
    }

    /// The whole exposition, counters first, then the per-table gauges.
    pub fn render(&self, tables: &[TableGauges]) -> String {
        let mut out = String::new();
        let plain = |out: &mut String, name: &str, help: &str, kind: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        plain(
            &mut out,
            "icepack_up",
            "1 while the process runs.",
            "gauge",
            1,
        );
        let engine = self.engine.get();
        if let Some(answering) = engine.answering {
            let labels = format_labels(&[("engine", engine.engine.clone())]);
            let _ = writeln!(
                out,
                "# HELP icepack_engine_up 1 when the Spark engine answered its last probe.\n# TYPE icepack_engine_up gauge\nicepack_engine_up{labels} {}",
                u8::from(answering)
            );
            let _ = writeln!(
                out,
                "# HELP icepack_engine_probe_seconds How long the last engine probe took.\n# TYPE icepack_engine_probe_seconds gauge\nicepack_engine_probe_seconds{labels} {}",
                engine.probe_millis.unwrap_or(0) as f64 / 1000.0
            );
        }
        self.render_queues(&mut out);
        self.records_counted.render(
            &mut out,
            "icepack_records_counted_total",
            "Small files counted, by table.",
        );
        self.records_ignored.render(
            &mut out,
            "icepack_records_ignored_total",
            "Records not counted, by reason.",
        );
        plain(
            &mut out,
            "icepack_state_commits_total",
            "Synced state commits of intake (one per group of batches).",
            "counter",
            self.state_commits.load(Ordering::Relaxed),
        );
        plain(
            &mut out,
            "icepack_state_commit_failures_total",
            "Failed synced state commits.",
            "counter",
            self.commit_failures.load(Ordering::Relaxed),
        );
        plain(
            &mut out,
            "icepack_state_writable",
            "1 while the state store takes writes; 0 from a failed commit until a probe succeeds (receiving is paused).",
            "gauge",
            u64::from(self.store.is_writable()),
        );
        plain(
            &mut out,
            "icepack_accumulator_restarts_total",
            "Table accumulators restarted from the stored state after they stopped (a bug).",
            "counter",
            self.accumulator_restarts.load(Ordering::Relaxed),
        );
        plain(
            &mut out,
            "icepack_accumulators_down",
            "Table accumulators stopped and not restarted yet.",
            "gauge",
            self.accumulators_down().len() as u64,
        );
        plain(
            &mut out,
            "icepack_state_recoveries_total",
            "Times the state store was made writable again after failed commits.",
            "counter",
            self.store_recoveries.load(Ordering::Relaxed),
        );
        self.runs_started.render(
            &mut out,
            "icepack_runs_started_total",
            "Compaction runs started, by table.",
        );
        self.runs_succeeded.render(
            &mut out,
            "icepack_runs_succeeded_total",
            "Compaction runs that succeeded, by table.",
        );
        self.runs_failed.render(
            &mut out,
            "icepack_runs_failed_total",
            "Compaction runs that failed, by table and failure class.",
        );
        self.run_duration.render(
            &mut out,
            "icepack_run_duration_seconds",
            "Duration of compaction runs, by outcome.",
        );
        self.notifications_sent.render(
            &mut out,
            "icepack_notifications_sent_total",
            "Notifications delivered, by sink.",
        );
        self.notification_failures.render(
            &mut out,
            "icepack_notification_failures_total",
            "Notifications given up on, by sink.",
        );
        self.notifications_dropped.render(
            &mut out,
            "icepack_notifications_dropped_total",
            "Notifications dropped because the sink's queue was full, by sink.",
        );
        let gauge =
            |out: &mut String, name: &str, help: &str, value: &dyn Fn(&TableGauges) -> u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
                for table in tables {
                    let _ = writeln!(
                        out,
                        "{name}{{table=\"{}\",tenant=\"{}\"}} {}",
                        escape_label(&table.table),
                        escape_label(&table.tenant),
                        value(table)
                    );
                }
            };
        gauge(
            &mut out,
            "icepack_table_pending_files",
            "Pending small files, by table.",
            &|t| t.pending_files,
        );
        gauge(
            &mut out,
            "icepack_table_pending_bytes",
            "Bytes of pending small files, by table.",
            &|t| t.pending_bytes,
        );
        gauge(
            &mut out,
            "icepack_table_due",
            "1 when the table is due for compaction.",
            &|t| t.due as u64,
        );
        gauge(
            &mut out,
            "icepack_table_run_in_flight",
            "1 while a compaction of the table runs.",
            &|t| t.run_in_flight as u64,
        );
        gauge(
            &mut out,
            "icepack_table_consecutive_failures",
            "Failed runs in a row, by table.",
            &|t| t.consecutive_failures as u64,
        );
        plain(
            &mut out,
            "icepack_tables_due",
            "Tables due for compaction.",
            "gauge",
            tables.iter().filter(|t| t.due).count() as u64,
        );
        out
    }

    /// The per-queue series, labelled by queue; a queue a reload removed has none.
    fn render_queues(&self, out: &mut String) {
        let queues = self.queues.snapshot();
        let family = |out: &mut String,
                      name: &str,
                      help: &str,
                      kind: &str,
                      value: &dyn Fn(&QueueSnapshot) -> String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for queue in &queues {
                let _ = writeln!(
                    out,
                    "{name}{{queue=\"{}\"}} {}",
                    escape_label(&queue.queue),
                    value(queue)
                );
            }
        };
        family(
            out,
            "icepack_sqs_messages_received_total",
            "SQS messages received, by queue.",
            "counter",
            &|queue| queue.messages_received.to_string(),
        );
        family(
            out,
            "icepack_sqs_messages_deleted_total",
            "SQS messages deleted after their counts were durable, by queue.",
            "counter",
            &|queue| queue.messages_deleted.to_string(),
        );
        family(
            out,
            "icepack_sqs_messages_invalid_total",
            "SQS messages left in the queue because they (or a record) could not be parsed, by queue.",
            "counter",
            &|queue| queue.messages_invalid.to_string(),
        );
        family(
            out,
            "icepack_sqs_delete_failures_total",
            "Messages the queue refused to delete, by queue.",
            "counter",
            &|queue| queue.delete_failures.to_string(),
        );
        family(
            out,
            "icepack_sqs_last_receive_timestamp_seconds",
            "Unix time of the queue's last successful receive (0: not reached since start-up), by queue.",
            "gauge",
            &|queue| {
                format!(
                    "{}",
                    queue.last_receive_millis.unwrap_or(0) as f64 / 1000.0
                )
            },
        );
        let _ = writeln!(
            out,
            "# HELP icepack_sqs_errors_total SQS calls that failed, by operation and queue.\n# TYPE icepack_sqs_errors_total counter"
        );
        for queue in &queues {
            for (operation, count) in &queue.errors {
                let labels = format_labels(&[
                    ("operation", operation.to_string()),
                    ("queue", queue.queue.clone()),
                ]);
                let _ = writeln!(out, "icepack_sqs_errors_total{labels} {count}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_types_labels_and_histogram_buckets() {
        let metrics = Metrics::default();
        let landing = metrics
            .queues
            .register("http://sqs/1/landing", "landing", None, 2, 0);
        landing.received(3, 1_714_564_800_250);
        landing.failed(
            &crate::queue::QueueError {
                operation: "DeleteMessageBatch",
                message: "throttled".to_string(),
                detail: String::new(),
            },
            1_714_564_801_000,
        );
        metrics
            .queues
            .register("http://sqs/1/removed", "removed", None, 2, 0);
        metrics.queues.retain(|url| !url.ends_with("removed"));
        metrics.records_ignored.inc(&[("reason", "large_file")]);
        metrics
            .runs_failed
            .inc(&[("table", "a.b"), ("class", "timeout")]);
        metrics
            .run_duration
            .observe(&[("outcome", "success")], 12.0);
        let text = metrics.render(&[TableGauges {
            table: "a.\"b".to_string(),
            tenant: "default".to_string(),
            pending_files: 7,
            pending_bytes: 70,
            due: true,
            run_in_flight: false,
            consecutive_failures: 0,
        }]);
        assert!(text.contains("# TYPE icepack_sqs_messages_received_total counter\nicepack_sqs_messages_received_total{queue=\"landing\"} 3\n"));
        assert!(text.contains("icepack_sqs_messages_deleted_total{queue=\"landing\"} 0\n"));
        assert!(text.contains(
            "icepack_sqs_errors_total{operation=\"DeleteMessageBatch\",queue=\"landing\"} 1\n"
        ));
        assert!(text.contains(
            "icepack_sqs_last_receive_timestamp_seconds{queue=\"landing\"} 1714564800.25\n"
        ));
        assert!(!text.contains("removed"), "a removed queue has no series");
        assert!(text.contains("icepack_records_ignored_total{reason=\"large_file\"} 1"));
        assert!(text.contains("icepack_runs_failed_total{table=\"a.b\",class=\"timeout\"} 1"));
        assert!(
            text.contains("icepack_run_duration_seconds_bucket{outcome=\"success\",le=\"5\"} 0")
        );
        assert!(
            text.contains("icepack_run_duration_seconds_bucket{outcome=\"success\",le=\"15\"} 1")
        );
        assert!(
            text.contains("icepack_run_duration_seconds_bucket{outcome=\"success\",le=\"+Inf\"} 1")
        );
        assert!(
            text.contains("icepack_table_pending_files{table=\"a.\\\"b\",tenant=\"default\"} 7")
        );
        assert!(text.contains("icepack_tables_due 1"));
    }
}
