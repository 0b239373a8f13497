//! The policies icepack is compared with: the reference workflow's and a fixed schedule.

use super::*;

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

pub(super) fn simulate_simple(
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
