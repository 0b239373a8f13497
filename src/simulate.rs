//! A policy simulator: drives the real accumulator and decision code on a simulated clock through
//! an ingestion trace, beside the reference workflow's policy and a fixed schedule, and reports
//! runs, wasted runs, failures, bytes rewritten, pending small files and landing-to-compaction
//! latency. Nothing here sleeps: time is the trace's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::accumulator::{
    committed_since_millis, settle_run, Accumulator, Candidate, FailureBackoff,
};
use crate::config::TableSpec;
use crate::policy::{Pacing, RewriteRule, Thresholds};
use crate::run::FailureClass;
use crate::run::{ReportSummary, RunOutcome};
use crate::state::{FileEntry, FileSource, PartitionCounts};
use crate::store::{MemoryStore, StateStore};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const MIB: u64 = 1024 * 1024;

/// One small file landing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub at_millis: i64,
    pub table: usize,
    pub size: u64,
    pub partition: String,
}

/// An ingestion trace: the files landing, in time order, and the tables' names (indexed by
/// [`Arrival::table`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub arrivals: Vec<Arrival>,
    pub tables: Vec<String>,
}

impl Trace {
    fn new(mut arrivals: Vec<Arrival>, tables: Vec<String>) -> Trace {
        arrivals.sort_by_key(|arrival| arrival.at_millis);
        Trace { arrivals, tables }
    }

    /// Every byte that landed.
    pub fn bytes(&self) -> u64 {
        self.arrivals.iter().map(|arrival| arrival.size).sum()
    }
}

/// A bursty day/night trace: busier from 08:00 to 20:00, occasional bursts, daily partitions.
pub fn generate_trace(seed: u64, tables: usize, days: u32, files_per_day: u32) -> Trace {
    Trace::new(
        generate_arrivals(seed, tables, days, files_per_day),
        (0..tables).map(|table| format!("t{table}")).collect(),
    )
}

fn generate_arrivals(seed: u64, tables: usize, days: u32, files_per_day: u32) -> Vec<Arrival> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut arrivals = Vec::new();
    for table in 0..tables {
        for hour in 0..(days as i64 * 24) {
            let day_hour = hour % 24;
            let weight = if (8..20).contains(&day_hour) {
                1.6
            } else {
                0.4
            };
            let burst = if rng.f64() < 0.05 { 6.0 } else { 1.0 };
            let expected = files_per_day as f64 / 24.0 * weight * burst;
            let count = (expected + rng.f64() * 2.0 - 1.0).round().max(0.0) as u32;
            for _ in 0..count {
                let at_millis = hour * HOUR + rng.i64(0..HOUR);
                // Log-uniform between 64 KiB and 16 MiB.
                let size = (64.0 * 1024.0 * (256.0f64).powf(rng.f64())) as u64;
                arrivals.push(Arrival {
                    at_millis,
                    table,
                    size,
                    partition: format!("dt={}", hour / 24),
                });
            }
        }
    }
    arrivals
}

/// Five tables of the writers a lakehouse has, over `days`:
/// - `streaming`: a streaming writer committing one 0.5–4 MiB file a minute into hourly partitions;
/// - `microbatch`: eight writers committing together every 5 minutes, 0.25–8 MiB each, daily
///   partitions;
/// - `etl`: an hourly job writing 40–120 files of 8–60 MiB within two minutes, daily partitions;
/// - `cdc`: a change stream, a 1–6 MiB file every 2 minutes, 10% of them late into one of the
///   last 7 days' partitions;
/// - `quiet`: a handful of small files a day.
pub fn generate_mixed_trace(seed: u64, days: u32) -> Trace {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut arrivals = Vec::new();
    let mut land = |at_millis: i64, table: usize, size: u64, partition: String| {
        arrivals.push(Arrival {
            at_millis,
            table,
            size,
            partition,
        })
    };
    let mib = |rng: &mut fastrand::Rng, low: f64, high: f64| -> u64 {
        (MIB as f64 * (low + (high - low) * rng.f64())) as u64
    };
    let minutes = days as i64 * 24 * 60;
    for minute in 0..minutes {
        let at = minute * MINUTE;
        let (hour, day) = (minute / 60, minute / (24 * 60));
        land(
            at + rng.i64(0..MINUTE),
            0,
            mib(&mut rng, 0.5, 4.0),
            format!("hour={hour}"),
        );
        if minute % 5 == 0 {
            for _ in 0..8 {
                let size = mib(&mut rng, 0.25, 8.0);
                land(at + rng.i64(0..20_000), 1, size, format!("dt={day}"));
            }
        }
        if minute % 60 == 7 {
            for _ in 0..rng.u32(40..=120) {
                let size = mib(&mut rng, 8.0, 60.0);
                land(at + rng.i64(0..2 * MINUTE), 2, size, format!("dt={day}"));
            }
        }
        if minute % 2 == 0 {
            let late = rng.f64() < 0.1;
            let partition_day = if late {
                (day - rng.i64(1..=7)).max(0)
            } else {
                day
            };
            let size = mib(&mut rng, 1.0, 6.0);
            land(
                at + rng.i64(0..MINUTE),
                3,
                size,
                format!("dt={partition_day}"),
            );
        }
        if rng.f64() < 4.0 / (24.0 * 60.0) {
            let size = mib(&mut rng, 0.1, 2.0);
            land(at, 4, size, format!("dt={day}"));
        }
    }
    Trace::new(
        arrivals,
        ["streaming", "microbatch", "etl", "cdc", "quiet"]
            .map(str::to_string)
            .to_vec(),
    )
}

/// Reads a trace: one `seconds,table,size_bytes[,partition]` line per file (`#` comments). The
/// table is a name (`orders`, letters, digits and `_`) or, when every line gives a number, an
/// index.
pub fn read_trace(text: &str) -> Result<Trace, String> {
    let mut arrivals = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parse = |index: usize, what: &str| -> Result<f64, String> {
            fields
                .get(index)
                .and_then(|field| field.parse::<f64>().ok())
                .ok_or_else(|| format!("line {}: {what} is not a number", number + 1))
        };
        let label = fields.get(1).copied().unwrap_or_default();
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "line {}: table `{}` is not a name (letters, digits, `_`) or an index",
                number + 1,
                label.escape_debug()
            ));
        }
        let seconds = parse(0, "seconds")?;
        let size = parse(2, "size_bytes")?;
        if seconds < 0.0 || size < 0.0 {
            return Err(format!(
                "line {}: seconds and size_bytes must not be negative",
                number + 1
            ));
        }
        let index = match labels.iter().position(|known| known == label) {
            Some(index) => index,
            None => {
                labels.push(label.to_string());
                labels.len() - 1
            }
        };
        arrivals.push(Arrival {
            at_millis: (seconds * 1000.0) as i64,
            table: index,
            size: size as u64,
            partition: fields
                .get(3)
                .map(|partition| partition.to_string())
                .unwrap_or_default(),
        });
    }
    // Indices as given when every table is a number, else names in order of first appearance.
    let numbers: Option<Vec<usize>> = labels.iter().map(|label| label.parse().ok()).collect();
    let tables = match numbers {
        Some(numbers) => {
            for arrival in &mut arrivals {
                arrival.table = numbers[arrival.table];
            }
            let count = numbers.iter().max().map_or(0, |max| max + 1);
            (0..count).map(|table| format!("t{table}")).collect()
        }
        None => labels,
    };
    Ok(Trace::new(arrivals, tables))
}

/// What the policies share.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub thresholds: Thresholds,
    pub rule: RewriteRule,
    /// A run takes this long plus `seconds_per_gib` per GiB claimed.
    pub run_base_millis: i64,
    pub seconds_per_gib: f64,
    pub failure_rate: f64,
    pub backoff: FailureBackoff,
    pub schedule_minutes: i64,
    pub seed: u64,
    /// icepack's pacing (its run cost is the model's, `run_base_millis`, unless set otherwise).
    pub pacing: Pacing,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            thresholds: Thresholds {
                small_file_bytes: 64 * MIB,
                min_files: 10,
                min_total_bytes: 256 * MIB,
                max_wait_millis: Some(120 * MINUTE),
            },
            rule: RewriteRule {
                min_input_files: 10,
                target_file_bytes: 512 * MIB,
            },
            run_base_millis: 90_000,
            seconds_per_gib: 60.0,
            failure_rate: 0.1,
            backoff: FailureBackoff {
                initial_millis: MINUTE,
                max_millis: HOUR,
            },
            schedule_minutes: 15,
            seed: 7,
            // icepack's default pacing, with the model's run cost.
            pacing: Pacing {
                run_cost_millis: 90_000,
                ..crate::config::TableDefaults::default().pacing()
            },
        }
    }
}

/// The figures of one policy on one trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyReport {
    pub policy: String,
    /// Every byte that landed (the same for every policy on a trace).
    pub bytes_ingested: u64,
    pub runs: u64,
    /// Runs that rewrote nothing (no partition had enough small files).
    pub empty_runs: u64,
    pub failed_runs: u64,
    pub bytes_rewritten: u64,
    pub max_pending_files: u64,
    pub mean_pending_files: f64,
    /// Files landed but never compacted by the end of the trace.
    pub left_small: u64,
    pub latency_p50_minutes: Option<f64>,
    pub latency_p99_minutes: Option<f64>,
    /// Modelled compute of every run started, failed ones included: `run_base_millis` plus
    /// `seconds_per_gib` per GiB the run takes (what a user pays for).
    pub compute_seconds: f64,
    /// GiB rewritten per GiB ingested.
    pub write_amplification: f64,
    /// Pending small files over time: (millis, files).
    #[serde(skip)]
    pub series: Vec<(i64, u64)>,
    /// Cumulative modelled compute over time: (millis, seconds), a point per run started.
    #[serde(skip)]
    pub compute_series: Vec<(i64, f64)>,
}

/// Tracks pending files over time, latencies and run counts.
#[derive(Default)]
struct Meter {
    report: PolicyReport,
    last_time: i64,
    pending: u64,
    weighted: f64,
    latencies: Vec<i64>,
}

impl Meter {
    fn started(trace: &[Arrival]) -> Meter {
        let mut meter = Meter::default();
        meter.report.bytes_ingested = trace.iter().map(|arrival| arrival.size).sum();
        meter
    }

    /// A run taking `bytes` starts at `now`: its modelled duration, counted as compute.
    fn run_started(&mut self, now: i64, scenario: &Scenario, bytes: u64) -> i64 {
        let millis = run_millis(scenario, bytes);
        self.report.compute_seconds += millis as f64 / 1000.0;
        self.report
            .compute_series
            .push((now, self.report.compute_seconds));
        millis
    }

    fn set_pending(&mut self, now: i64, pending: u64) {
        self.weighted += self.pending as f64 * (now - self.last_time).max(0) as f64;
        self.last_time = now;
        self.pending = pending;
        self.report.max_pending_files = self.report.max_pending_files.max(pending);
        if self.report.series.last().map(|(_, last)| *last) != Some(pending) {
            self.report.series.push((now, pending));
        }
    }

    fn finish(mut self, name: &str, end: i64, left_small: u64) -> PolicyReport {
        self.set_pending(end, self.pending);
        self.report.policy = name.to_string();
        self.report.mean_pending_files = if end > 0 {
            self.weighted / end as f64
        } else {
            0.0
        };
        self.report.left_small = left_small;
        self.report.write_amplification = if self.report.bytes_ingested > 0 {
            self.report.bytes_rewritten as f64 / self.report.bytes_ingested as f64
        } else {
            0.0
        };
        self.latencies.sort_unstable();
        let quantile = |q: f64| -> Option<f64> {
            (!self.latencies.is_empty()).then(|| {
                let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
                self.latencies[index] as f64 / MINUTE as f64
            })
        };
        self.report.latency_p50_minutes = quantile(0.5);
        self.report.latency_p99_minutes = quantile(0.99);
        self.report
    }
}

fn run_millis(scenario: &Scenario, bytes: u64) -> i64 {
    scenario.run_base_millis
        + (bytes as f64 / (1024.0 * MIB as f64) * scenario.seconds_per_gib * 1000.0) as i64
}

/// A file waiting in a simple (non-icepack) model.
#[derive(Debug, Clone)]
struct SimpleFile {
    arrived: i64,
    size: u64,
    partition: String,
    /// A compaction's output (still small): rewritten again later, but no landing latency.
    output: bool,
}

/// What a run of `rewrite_data_files` with `min-input-files` and Iceberg's default
/// `min-file-size-bytes` (three quarters of the target) does to a table's small files and
/// mid-sized ones: per partition, when the candidates are `min-input-files` or more, or two
/// holding a target file's worth, they are all rewritten. Returns the rewritten files and the
/// kept ones.
fn rewrite(rule: &RewriteRule, files: Vec<SimpleFile>) -> (Vec<SimpleFile>, Vec<SimpleFile>) {
    let mut by_partition: BTreeMap<String, PartitionCounts> = BTreeMap::new();
    for file in &files {
        let counts = by_partition.entry(file.partition.clone()).or_default();
        counts.files += 1;
        counts.bytes += file.size;
    }
    files.into_iter().partition(|file| {
        rule.worth_rewriting(&by_partition[&file.partition], rule.min_input_files)
    })
}

/// The files a rewrite of one partition's `bytes` leaves: target-sized pieces.
fn outputs_of(bytes: u64, target_file_bytes: u64) -> Vec<u64> {
    let pieces = bytes.div_ceil(target_file_bytes.max(1)).max(1);
    (0..pieces).map(|_| bytes / pieces).collect()
}

/// icepack: the real accumulator, decisions, claims and settlements, per table.
pub fn simulate_icepack(trace: &Trace, scenario: &Scenario) -> PolicyReport {
    let (tables, names, trace) = (trace.tables.len(), &trace.tables, &trace.arrivals);
    let store = Arc::new(MemoryStore::new());
    let mut rng = fastrand::Rng::with_seed(scenario.seed);
    let mut meter = Meter::started(trace);
    let specs: Vec<Arc<TableSpec>> = names
        .iter()
        .map(|name| {
            let mut spec = TableSpec::for_tests(
                &format!("sim.{name}"),
                "lake",
                &format!("{name}/"),
                scenario.thresholds,
            );
            spec.min_input_files = scenario.rule.min_input_files;
            spec.target_file_bytes = scenario.rule.target_file_bytes;
            spec.pacing = scenario.pacing;
            Arc::new(spec)
        })
        .collect();
    let mut accumulators: Vec<Accumulator> = specs
        .iter()
        .map(|spec| Accumulator::load(spec.clone(), store.as_ref()).unwrap())
        .collect();
    // Per table: (run id, finishes at, succeeds, the small files it rewrites, the mid-sized
    // files joining them per partition).
    type Flight = Option<(String, i64, bool, Vec<FileEntry>, Vec<(String, u64)>)>;
    let mut in_flight: Vec<Flight> = vec![None; tables];
    // The tables' mid-sized files (outputs from the small-file size up to Iceberg's floor),
    // which icepack does not track: a run's `min-file-size-bytes` lets some of them join.
    let mut mid_sized: Vec<Vec<(String, u64)>> = vec![Vec::new(); tables];
    let end = trace.last().map_or(0, |last| last.at_millis) + 6 * HOUR;
    let mut next_arrival = 0;
    let mut now = 0;
    let mut run_number = 0u64;
    let total_pending = |accumulators: &[Accumulator]| -> u64 {
        accumulators
            .iter()
            .map(|a| {
                a.snapshot().state.pending.files + a.claim().map_or(0, |claim| claim.counts.files)
            })
            .sum()
    };
    while now <= end {
        // Arrivals up to now, one batch per table.
        let mut batches: HashMap<usize, Vec<Candidate>> = HashMap::new();
        while next_arrival < trace.len() && trace[next_arrival].at_millis <= now {
            let arrival = &trace[next_arrival];
            batches.entry(arrival.table).or_default().push(Candidate {
                bucket: "lake".to_string(),
                key: format!(
                    "{}/data/{}/f{next_arrival}.parquet",
                    names[arrival.table], arrival.partition
                ),
                size: arrival.size,
                event_millis: arrival.at_millis,
                partition: arrival.partition.clone(),
                kind: Default::default(),
            });
            next_arrival += 1;
        }
        for (table, candidates) in batches {
            let accumulator = &mut accumulators[table];
            let mut staged = accumulator.stage(candidates, store.as_ref(), now).unwrap();
            store.commit(std::mem::take(&mut staged.ops)).unwrap();
            accumulator.settle(true);
        }
        for table in 0..tables {
            // Runs ending now.
            if let Some((run_id, finishes, succeeds, rewritten, joining)) = in_flight[table].clone()
            {
                if finishes <= now {
                    let accumulator = &mut accumulators[table];
                    let outcome = if succeeds {
                        meter.report.bytes_rewritten +=
                            rewritten.iter().map(|file| file.size).sum::<u64>();
                        meter.report.bytes_rewritten +=
                            joining.iter().map(|(_, size)| size).sum::<u64>();
                        mid_sized[table].retain(|file| !joining.contains(file));
                        meter.latencies.extend(
                            rewritten
                                .iter()
                                .filter(|file| file.source == FileSource::Events)
                                .map(|file| now - file.event_millis),
                        );
                        RunOutcome::Success {
                            report: truth_after_run(
                                accumulator,
                                store.as_ref(),
                                &run_id,
                                (&rewritten, &joining),
                                &mut mid_sized[table],
                                scenario,
                            ),
                            duration_millis: 0,
                            attempts: 1,
                        }
                    } else {
                        meter.report.failed_runs += 1;
                        RunOutcome::Failure {
                            class: FailureClass::Other,
                            excerpt: String::new(),
                            duration_millis: 0,
                            attempts: 1,
                        }
                    };
                    let (ops, change) = settle_run(
                        accumulator.spec(),
                        accumulator.snapshot(),
                        store.as_ref(),
                        &run_id,
                        &outcome,
                        now,
                        scenario.backoff,
                    )
                    .unwrap()
                    .unwrap();
                    store.commit(ops).unwrap();
                    accumulator.adopt(change);
                    in_flight[table] = None;
                }
            }
            // Runs starting now.
            let accumulator = &mut accumulators[table];
            if in_flight[table].is_none()
                && accumulator.may_start_run(now)
                && accumulator.due(now).is_some()
            {
                run_number += 1;
                let run_id = format!("run-{run_number}");
                let upto = accumulator.snapshot().state.next_file_seq;
                if let Some((ops, ticket)) = accumulator.begin_claim(&run_id, "", now, false) {
                    store.commit(ops).unwrap();
                    accumulator.settle(true);
                    meter.report.runs += 1;
                    let claimed: Vec<FileEntry> = store
                        .files(&accumulator.spec().table)
                        .unwrap()
                        .into_iter()
                        .filter(|(seq, file)| {
                            *seq < upto && ticket.partitions.contains(&file.partition)
                        })
                        .map(|(_, file)| file)
                        .collect();
                    let spec = accumulator.spec();
                    let floor = spec
                        .rewrite_floor_bytes(ticket.joins_mid_sized)
                        .unwrap_or(spec.target_file_bytes / 4 * 3);
                    let joinable: Vec<(String, u64)> = mid_sized[table]
                        .iter()
                        .filter(|(partition, size)| {
                            *size < floor && ticket.partitions.contains(partition)
                        })
                        .cloned()
                        .collect();
                    // A partition's group is rewritten with `min-input-files` candidates.
                    let mut candidates: HashMap<&str, u64> = HashMap::new();
                    for partition in claimed
                        .iter()
                        .map(|file| file.partition.as_str())
                        .chain(joinable.iter().map(|(partition, _)| partition.as_str()))
                    {
                        *candidates.entry(partition).or_default() += 1;
                    }
                    let enough = |partition: &str| {
                        candidates.get(partition).copied().unwrap_or(0)
                            >= ticket.min_input_files.max(1)
                    };
                    let rewritten: Vec<FileEntry> = claimed
                        .iter()
                        .filter(|file| enough(&file.partition))
                        .cloned()
                        .collect();
                    let joining: Vec<(String, u64)> = joinable
                        .iter()
                        .filter(|(partition, _)| enough(partition))
                        .cloned()
                        .collect();
                    let bytes = rewritten.iter().map(|file| file.size).sum::<u64>()
                        + joining.iter().map(|(_, size)| size).sum::<u64>();
                    let succeeds = rng.f64() >= scenario.failure_rate;
                    in_flight[table] = Some((
                        run_id,
                        now + meter.run_started(now, scenario, bytes),
                        succeeds,
                        rewritten,
                        joining,
                    ));
                }
            }
        }
        meter.set_pending(now, total_pending(&accumulators));
        now += MINUTE;
    }
    let left = total_pending(&accumulators);
    meter.finish("icepack", end, left)
}

/// The committed metadata after a successful simulated run, as the real run would report it: the
/// claimed files of partitions it did not rewrite, plus each rewritten partition's outputs (its
/// small files and the mid-sized ones joining them, in target-sized files) when they are
/// themselves small — mid-sized ones go to `mid_sized`; everything else already pending stays
/// as it is. Committed
/// since the report's window began: the outputs, and the rewritten files whose writer committed
/// in it (a simulated writer commits as it uploads, at the file's event time).
fn truth_after_run(
    accumulator: &Accumulator,
    store: &dyn StateStore,
    run_id: &str,
    (rewritten, joining): (&[FileEntry], &[(String, u64)]),
    mid_sized: &mut Vec<(String, u64)>,
    scenario: &Scenario,
) -> ReportSummary {
    let spec = accumulator.spec();
    let claim = accumulator.claim().expect("a run in flight has a claim");
    let rewritten_keys: std::collections::HashSet<&str> =
        rewritten.iter().map(|file| file.key.as_str()).collect();
    let mut truth: Vec<(String, u64)> = store
        .files(&spec.table)
        .unwrap()
        .into_iter()
        .filter(|(seq, file)| *seq < claim.upto_seq && !rewritten_keys.contains(file.key.as_str()))
        .map(|(_, file)| (format!("s3://{}/{}", file.bucket, file.key), file.size))
        .collect();
    let mut outputs: BTreeMap<&str, u64> = BTreeMap::new();
    for file in rewritten {
        *outputs.entry(file.partition.as_str()).or_default() += file.size;
    }
    for (partition, size) in joining {
        *outputs.entry(partition.as_str()).or_default() += size;
    }
    let since = committed_since_millis(claim.started_millis);
    let mut committed: Vec<String> = rewritten
        .iter()
        .filter(|file| file.event_millis >= since)
        .map(|file| format!("s3://{}/{}", file.bucket, file.key))
        .collect();
    for (partition, bytes) in outputs {
        let pieces = outputs_of(bytes, spec.target_file_bytes);
        for (piece, size) in pieces.into_iter().enumerate() {
            let path = format!(
                "s3://{}/{}data/{partition}/{run_id}-{piece}.parquet",
                spec.bucket, spec.prefix
            );
            if size < scenario.thresholds.small_file_bytes {
                truth.push((path.clone(), size));
            } else if size < spec.target_file_bytes / 4 * 3 {
                mid_sized.push((partition.to_string(), size));
            }
            committed.push(path);
        }
    }
    ReportSummary {
        truth: Some(truth),
        committed,
        ..ReportSummary::default()
    }
}

/// The reference workflow: counts files and bytes only (max-wait ignored), one execution at a
/// time (arrivals during a run wait), a success resets the counters whatever the rewrite left,
/// a failure keeps them and the next event fires a new run.
pub fn simulate_reference(trace: &Trace, scenario: &Scenario) -> PolicyReport {
    simulate_simple(trace, scenario, "reference", None)
}

/// A fixed schedule: every `schedule_minutes`, each table with pending files gets a run.
pub fn simulate_schedule(trace: &Trace, scenario: &Scenario) -> PolicyReport {
    simulate_simple(
        trace,
        scenario,
        "schedule",
        Some(scenario.schedule_minutes * MINUTE),
    )
}

fn simulate_simple(
    trace: &Trace,
    scenario: &Scenario,
    name: &str,
    every: Option<i64>,
) -> PolicyReport {
    let (tables, trace) = (trace.tables.len(), &trace.arrivals);
    let mut rng = fastrand::Rng::with_seed(scenario.seed);
    let mut meter = Meter::started(trace);
    // What is really small in the table, what the policy's counters say, what a run holds.
    let mut small: Vec<Vec<SimpleFile>> = vec![Vec::new(); tables];
    // Mid-sized outputs (small-file size up to Iceberg's floor): candidates of later rewrites.
    let mut mid_sized: Vec<Vec<SimpleFile>> = vec![Vec::new(); tables];
    let floor = scenario.rule.target_file_bytes / 4 * 3;
    let mut counted: Vec<(u64, u64)> = vec![(0, 0); tables];
    let mut running: Vec<Option<(i64, bool)>> = vec![None; tables];
    let mut waiting: Vec<Vec<SimpleFile>> = vec![Vec::new(); tables];
    let end = trace.last().map_or(0, |last| last.at_millis) + 6 * HOUR;
    let mut next_arrival = 0;
    let mut now = 0;
    while now <= end {
        let mut fire = vec![false; tables];
        while next_arrival < trace.len() && trace[next_arrival].at_millis <= now {
            let arrival = &trace[next_arrival];
            waiting[arrival.table].push(SimpleFile {
                arrived: arrival.at_millis,
                size: arrival.size,
                partition: arrival.partition.clone(),
                output: false,
            });
            next_arrival += 1;
        }
        for table in 0..tables {
            if let Some((finishes, succeeds)) = running[table] {
                if finishes > now {
                    continue;
                }
                running[table] = None;
                if succeeds {
                    let mut candidates = std::mem::take(&mut small[table]);
                    candidates.append(&mut mid_sized[table]);
                    let (rewritten, kept) = rewrite(&scenario.rule, candidates);
                    let (kept_small, kept_mid): (Vec<SimpleFile>, Vec<SimpleFile>) = kept
                        .into_iter()
                        .partition(|file| file.size < scenario.thresholds.small_file_bytes);
                    mid_sized[table] = kept_mid;
                    if rewritten.is_empty() {
                        meter.report.empty_runs += 1;
                    }
                    meter.report.bytes_rewritten +=
                        rewritten.iter().map(|file| file.size).sum::<u64>();
                    meter.latencies.extend(
                        rewritten
                            .iter()
                            .filter(|file| !file.output)
                            .map(|file| now - file.arrived),
                    );
                    small[table] = kept_small;
                    // Each rewritten partition gets target-sized outputs; a small one is a small
                    // file too, a mid-sized one a candidate of later rewrites.
                    let mut outputs: BTreeMap<String, u64> = BTreeMap::new();
                    for file in &rewritten {
                        *outputs.entry(file.partition.clone()).or_default() += file.size;
                    }
                    for (partition, bytes) in outputs {
                        for size in outputs_of(bytes, scenario.rule.target_file_bytes) {
                            let output = SimpleFile {
                                arrived: now,
                                size,
                                partition: partition.clone(),
                                output: true,
                            };
                            if size < scenario.thresholds.small_file_bytes {
                                small[table].push(output);
                            } else if size < floor {
                                mid_sized[table].push(output);
                            }
                        }
                    }
                    if every.is_none() {
                        counted[table] = (0, 0);
                    }
                } else {
                    meter.report.failed_runs += 1;
                    fire[table] = every.is_none() && !waiting[table].is_empty();
                }
            }
            // Intake (blocked while a run goes in the reference).
            let arrivals = std::mem::take(&mut waiting[table]);
            let had_events = !arrivals.is_empty();
            for file in arrivals {
                counted[table].0 += 1;
                counted[table].1 += file.size;
                small[table].push(file);
            }
            let start = match every {
                None => {
                    (had_events || fire[table])
                        && (counted[table].0 >= scenario.thresholds.min_files
                            || counted[table].1 >= scenario.thresholds.min_total_bytes)
                }
                Some(every) => now % every == 0 && !small[table].is_empty(),
            };
            if start && running[table].is_none() {
                meter.report.runs += 1;
                // What the run will rewrite (nothing lands in a table while its run goes).
                let mut candidates = small[table].clone();
                candidates.extend(mid_sized[table].iter().cloned());
                let bytes = rewrite(&scenario.rule, candidates)
                    .0
                    .iter()
                    .map(|file| file.size)
                    .sum();
                running[table] = Some((
                    now + meter.run_started(now, scenario, bytes),
                    rng.f64() >= scenario.failure_rate,
                ));
            }
        }
        let pending: u64 = small.iter().map(|files| files.len() as u64).sum::<u64>()
            + waiting.iter().map(|files| files.len() as u64).sum::<u64>();
        meter.set_pending(now, pending);
        now += MINUTE;
    }
    let left = small.iter().map(|files| files.len() as u64).sum();
    meter.finish(name, end, left)
}

/// An SVG chart, one line per policy: pending small files over time above, cumulative modelled
/// compute below.
pub fn render_svg(reports: &[PolicyReport]) -> String {
    let (width, panel, margin) = (960.0, 300.0, 50.0);
    let end = reports
        .iter()
        .flat_map(|report| report.series.last().map(|(t, _)| *t))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let height = 2.0 * panel + margin;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let pending: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|report| {
            report
                .series
                .iter()
                .map(|(t, files)| (*t as f64, *files as f64))
                .collect()
        })
        .collect();
    let compute: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|report| {
            let mut points = vec![(0.0, 0.0)];
            points.extend(
                report
                    .compute_series
                    .iter()
                    .map(|(t, s)| (*t as f64, *s / 3600.0)),
            );
            points.push((end, report.compute_seconds / 3600.0));
            points
        })
        .collect();
    let names: Vec<&str> = reports
        .iter()
        .map(|report| report.policy.as_str())
        .collect();
    svg.push_str(&svg_panel(
        "Pending small files over time (all tables)",
        0.0,
        (width, panel, margin),
        end,
        &names,
        &pending,
    ));
    svg.push_str(&svg_panel(
        "Cumulative modelled compute (hours)",
        panel,
        (width, panel, margin),
        end,
        &names,
        &compute,
    ));
    svg.push_str("</svg>\n");
    svg
}

/// One panel of [`render_svg`]: lines of (millis, value) points, an hour axis, the top value.
fn svg_panel(
    title: &str,
    top_y: f64,
    (width, height, margin): (f64, f64, f64),
    end: f64,
    names: &[&str],
    lines: &[Vec<(f64, f64)>],
) -> String {
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let top = lines
        .iter()
        .flatten()
        .map(|(_, value)| *value)
        .fold(0.0f64, f64::max)
        .max(1.0);
    let (bottom, plot_top) = (top_y + height - margin / 2.0, top_y + margin);
    let mut svg = format!(
        "<text x=\"{margin}\" y=\"{}\" font-size=\"14\">{title}</text>\n<line x1=\"{margin}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>\n<line x1=\"{margin}\" y1=\"{plot_top}\" x2=\"{margin}\" y2=\"{bottom}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\">hours</text>\n<text x=\"5\" y=\"{}\">{top:.0}</text>\n",
        top_y + 20.0,
        width - margin,
        width - margin - 30.0,
        bottom + 16.0,
        plot_top + 4.0
    );
    for hour in (0..=(end / HOUR as f64) as i64).step_by(24) {
        let x = margin + (hour * HOUR) as f64 / end * (width - 2.0 * margin);
        svg.push_str(&format!(
            "<text x=\"{x:.0}\" y=\"{}\">{hour}</text>\n",
            bottom + 16.0
        ));
    }
    for (index, points) in lines.iter().enumerate() {
        let points: Vec<String> = points
            .iter()
            .map(|(t, value)| {
                let x = margin + t / end * (width - 2.0 * margin);
                let y = bottom - value / top * (bottom - plot_top);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let colour = colours[index % colours.len()];
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\" points=\"{}\"/>\n",
            points.join(" ")
        ));
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{}</text>\n",
            width - margin - 120.0,
            plot_top + 16.0 * index as f64,
            names.get(index).copied().unwrap_or_default()
        ));
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_figures() {
        let trace = generate_trace(3, 2, 2, 60);
        let scenario = Scenario::default();
        let first = simulate_icepack(&trace, &scenario);
        let second = simulate_icepack(&trace, &scenario);
        assert_eq!(
            (first.runs, first.failed_runs, first.bytes_rewritten),
            (second.runs, second.failed_runs, second.bytes_rewritten)
        );
        assert!(first.runs > 0);
    }

    #[test]
    fn icepack_starts_no_empty_run_and_forgets_nothing() {
        let trace = generate_trace(11, 3, 3, 40);
        let scenario = Scenario::default();
        let icepack = simulate_icepack(&trace, &scenario);
        let reference = simulate_reference(&trace, &scenario);
        assert_eq!(icepack.empty_runs, 0);
        // Every file is either compacted (a latency recorded) or still pending at the end.
        assert!(icepack.latency_p50_minutes.is_some());
        assert!(reference.runs > 0);
        let svg = render_svg(&[icepack, reference]);
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    }

    #[test]
    fn traces_read_from_csv_with_indices_or_names() {
        let trace = read_trace("# seconds,table,size\n60,0,1000,dt=1\n0,1,2000\n").unwrap();
        assert_eq!(
            trace.arrivals[0],
            Arrival {
                at_millis: 0,
                table: 1,
                size: 2000,
                partition: String::new()
            }
        );
        assert_eq!(trace.arrivals[1].partition, "dt=1");
        assert_eq!(trace.tables, ["t0", "t1"]);
        assert!(read_trace("x,0,1").unwrap_err().contains("line 1"));

        let named = read_trace("0,orders,10\n5,events,20,day=1\n9,orders,30\n").unwrap();
        assert_eq!(named.tables, ["orders", "events"]);
        let tables: Vec<usize> = named.arrivals.iter().map(|arrival| arrival.table).collect();
        assert_eq!(tables, [0, 1, 0]);
        assert_eq!(named.bytes(), 60);
        let error = read_trace("0,orders,10\n1,or ders,1\n").unwrap_err();
        assert!(
            error.contains("line 2") && error.contains("or ders"),
            "{error}"
        );
        assert!(read_trace("0,orders,-1\n")
            .unwrap_err()
            .contains("negative"));
    }

    #[test]
    fn compute_and_write_amplification_follow_the_run_cost_model() {
        let trace = generate_trace(5, 2, 1, 120);
        let mut scenario = Scenario {
            failure_rate: 0.0,
            ..Scenario::default()
        };
        let report = simulate_reference(&trace, &scenario);
        assert_eq!(report.bytes_ingested, trace.bytes());
        let gib = |bytes: u64| bytes as f64 / (1024.0 * MIB as f64);
        // Every run costs the base; a reference run takes everything counted, at least what it
        // rewrote.
        assert!(report.compute_seconds >= report.runs as f64 * 90.0);
        assert!(
            report.compute_seconds
                >= report.runs as f64 * 90.0 + gib(report.bytes_rewritten) * 60.0 - 1.0
        );
        assert!(
            (report.write_amplification - gib(report.bytes_rewritten) / gib(trace.bytes())).abs()
                < 1e-9
        );
        assert_eq!(
            report.compute_series.last().map(|(_, seconds)| *seconds),
            Some(report.compute_seconds)
        );
        // A warm engine: the fixed cost per run is one second instead of 90.
        scenario.run_base_millis = 1_000;
        let warm = simulate_reference(&trace, &scenario);
        assert!(warm.compute_seconds < report.compute_seconds);
    }

    #[test]
    fn the_mixed_trace_has_its_five_writers() {
        let trace = generate_mixed_trace(1, 1);
        assert_eq!(
            trace.tables,
            ["streaming", "microbatch", "etl", "cdc", "quiet"]
        );
        let count = |table: usize| trace.arrivals.iter().filter(|a| a.table == table).count();
        assert_eq!(count(0), 1440, "one file a minute");
        assert_eq!(count(1), 8 * 288, "eight writers every five minutes");
        assert!((24 * 40..=24 * 120).contains(&count(2)), "{}", count(2));
        assert_eq!(count(3), 720);
        assert!(trace
            .arrivals
            .windows(2)
            .all(|w| w[0].at_millis <= w[1].at_millis));
        // Late CDC data lands in earlier days' partitions (from the second day on).
        let two_days = generate_mixed_trace(1, 3);
        assert!(two_days
            .arrivals
            .iter()
            .any(|a| a.table == 3 && a.partition != format!("dt={}", a.at_millis / (24 * HOUR))));
    }
}
