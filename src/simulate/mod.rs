//! A policy simulator: drives the real accumulator and decision code on a simulated clock through
//! an ingestion trace, beside the reference workflow's policy and a fixed schedule, and reports
//! runs, wasted runs, failures, bytes rewritten, pending small files and landing-to-compaction
//! latency. Nothing here sleeps: time is the trace's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::config::TableSpec;
use crate::model::report::FailureClass;
use crate::model::report::{ReportSummary, RunOutcome};
use crate::model::state::{FileEntry, FileSource, PartitionCounts};
use crate::model::task::{Rewrite, Trigger};
use crate::store::{MemoryStore, StateStore};
use crate::table::accumulator::{
    committed_since_millis, settle_run, Accumulator, Candidate, FailureBackoff,
};
use crate::table::policy::{PacingSpec, RewriteRule, Thresholds};

mod baseline;
mod svg;
mod trace;

pub use baseline::*;
pub use svg::*;
pub use trace::*;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const MIB: u64 = 1024 * 1024;

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
    /// icepack's pacing; its run cost is measured from the simulated runs (before the first,
    /// the model's `run_base_millis`) unless `run_cost_millis` sets it.
    pub pacing: PacingSpec,
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
            // icepack's default pacing, with the model's run cost as its estimate.
            pacing: PacingSpec {
                estimated_run_cost_millis: 90_000,
                ..crate::config::TableSettings::default().pacing()
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
    let mut in_flight: Vec<Option<Flight>> = vec![None; tables];
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
            if let Some(Flight {
                run_id,
                finishes,
                duration_millis,
                succeeds,
                rewritten,
                joining,
            }) = in_flight[table].clone()
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
                            duration_millis,
                            attempts: 1,
                        }
                    } else {
                        meter.report.failed_runs += 1;
                        RunOutcome::Failure {
                            class: FailureClass::Other,
                            excerpt: String::new(),
                            duration_millis,
                            attempts: 1,
                        }
                    };
                    let (ops, change) = settle_run(
                        accumulator.spec(),
                        accumulator.snapshot(),
                        store.as_ref(),
                        &run_id,
                        &outcome,
                        None,
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
                if let Some((ops, ticket)) =
                    accumulator.begin_claim(&run_id, Trigger::Files, now, false)
                {
                    store.commit(ops).unwrap();
                    accumulator.settle(true);
                    meter.report.runs += 1;
                    // A read of an `auto` table's order rewrites nothing.
                    let no_rewrite = Rewrite::whole_table();
                    let rewrite = ticket.task.rewrite().unwrap_or(&no_rewrite);
                    let claimed: Vec<FileEntry> = store
                        .files(&accumulator.spec().table)
                        .unwrap()
                        .into_iter()
                        .filter(|(seq, file)| {
                            *seq < upto && rewrite.partitions.contains(&file.partition)
                        })
                        .map(|(_, file)| file)
                        .collect();
                    // Mid-sized files join in the partitions the run lets them (all of its
                    // partitions when it names none): Iceberg's default floor there.
                    let spec = accumulator.spec();
                    let floor = |partition: &String| {
                        spec.rewrite_floor_bytes(rewrite.mid_sized.joins_in(partition))
                            .unwrap_or(spec.target_file_bytes / 4 * 3)
                    };
                    let joinable: Vec<(String, u64)> = mid_sized[table]
                        .iter()
                        .filter(|(partition, size)| {
                            rewrite.partitions.contains(partition) && *size < floor(partition)
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
                            >= rewrite.min_input_files.max(1)
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
                    let duration_millis = meter.run_started(now, scenario, bytes);
                    in_flight[table] = Some(Flight {
                        run_id,
                        finishes: now + duration_millis,
                        duration_millis: duration_millis as u64,
                        succeeds,
                        rewritten,
                        joining,
                    });
                }
            }
        }
        meter.set_pending(now, total_pending(&accumulators));
        now += MINUTE;
    }
    let left = total_pending(&accumulators);
    meter.finish("icepack", end, left)
}

/// A simulated run in flight.
#[derive(Clone)]
struct Flight {
    run_id: String,
    finishes: i64,
    /// Its modelled compute: what the real run's duration would be (the measured run cost).
    duration_millis: u64,
    succeeds: bool,
    /// The small files it rewrites.
    rewritten: Vec<FileEntry>,
    /// The mid-sized files joining them, per partition.
    joining: Vec<(String, u64)>,
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

#[cfg(test)]
mod tests;
