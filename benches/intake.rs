//! Intake ceiling: S3 records per second through parse → route → accumulate → synced RocksDB
//! commit, in process, beside the same number of bare synced RocksDB writes of the same sizes
//! (the storage limit on this disk).
//!
//!   cargo bench --bench intake [-- --records N --repeats N --tables 1,100 --pollers 1,32 --hot N]
//!
//! `--hot N`: the records go to N of the configured tables only (skewed intake); all of them
//! otherwise.
//!
//! Batches are what SQS hands a poller: 10 messages of one S3 record each. `pollers` batches are in
//! flight at once (concurrent receive loops); batches that wait while a commit is in flight share
//! the next one (group commit).
//!
//! `lookup`, `stage`, `commit`: the share of the wall time each step of the groups took (from
//! `icepack_intake_step_duration_seconds`), which says where the time goes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use icepack::config::Config;
use icepack::messages::Ingest;

use common::*;

struct Figures {
    records_per_sec: f64,
    bare_records_per_sec: f64,
    records_per_commit: f64,
    /// Share of the wall time spent in the synced writes.
    writing_share: f64,
    /// RocksDB write-batch entries and bytes per record: what each record costs the writes.
    ops_per_record: f64,
    bytes_per_record: f64,
    /// Share of the wall time in each step of the groups (`icepack_intake_step_duration_seconds`:
    /// lookup, stage, commit); one group is in flight at a time, so they add up to nearly all.
    step_shares: [f64; 3],
}

/// The summed seconds of each intake step, from the pipeline's metrics.
fn step_seconds(metrics: &icepack::ops::metrics::Metrics) -> [f64; 3] {
    let text = metrics.render(&[]);
    icepack::ops::metrics::INTAKE_STEPS.map(|step| {
        let prefix = format!("icepack_intake_step_duration_seconds_sum{{step=\"{step}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|value| value.parse().ok())
            .expect("the intake steps' histogram is exported")
    })
}

fn measure(tables: usize, hot: usize, pollers: usize, records: u64, seed: u64) -> Figures {
    let work = tempfile::tempdir().unwrap();
    let config = Config::from_toml_str(&config_toml(tables, "")).unwrap();
    let batches = Arc::new(batches(records, hot, 10, seed));
    let store = Arc::new(WeighingStore::open(&work.path().join("state")));
    let system = actix::System::new();
    let (elapsed, steps) = system.block_on({
        let store = store.clone();
        async move {
            let pipeline = pipeline(&config, store, None);
            let next = Arc::new(AtomicUsize::new(0));
            let started = Instant::now();
            join_all((0..pollers).map(|_| {
                let router = pipeline.router.clone();
                let batches = batches.clone();
                let next = next.clone();
                async move {
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(batch) = batches.get(at) else { break };
                        let report = router
                            .send(Ingest {
                                messages: batch.clone(),
                            })
                            .await
                            .expect("router answers")
                            .expect("batch committed");
                        assert_eq!(report.summary.counted, batch.len() as u64);
                    }
                }
            }))
            .await;
            (started.elapsed(), step_seconds(&pipeline.metrics))
        }
    });
    let commits = store.commits.lock().unwrap().clone();
    let writing = store.write_micros.load(Ordering::Relaxed) as f64 / 1e6;
    let bare = bare_synced_writes(&work.path().join("bare"), &commits);
    Figures {
        records_per_sec: records as f64 / elapsed.as_secs_f64(),
        bare_records_per_sec: records as f64 / bare.as_secs_f64(),
        records_per_commit: records as f64 / commits.len() as f64,
        writing_share: writing / elapsed.as_secs_f64(),
        ops_per_record: commits.iter().map(|(ops, _)| *ops as f64).sum::<f64>() / records as f64,
        bytes_per_record: commits.iter().map(|(_, bytes)| *bytes as f64).sum::<f64>()
            / records as f64,
        step_shares: steps.map(|seconds| seconds / elapsed.as_secs_f64()),
    }
}

fn main() {
    let full = full_run();
    let records: u64 = arg("--records")
        .map(|value| value.parse().expect("--records N"))
        .unwrap_or(if full { 100_000 } else { 2_000 });
    let repeats: usize = arg("--repeats")
        .map(|value| value.parse().expect("--repeats N"))
        .unwrap_or(if full { 3 } else { 1 });
    let list = |name: &str, default: &[usize]| -> Vec<usize> {
        arg(name)
            .map(|value| {
                value
                    .split(',')
                    .map(|n| n.parse().expect("a comma-separated list of numbers"))
                    .collect()
            })
            .unwrap_or_else(|| default.to_vec())
    };
    let pollers = list("--pollers", if full { &[1, 8, 32] } else { &[4] });
    let tables_list = list("--tables", &[1, 100, 10_000]);
    let hot: usize = arg("--hot").map_or(0, |value| value.parse().expect("--hot N"));
    println!(
        "intake ceiling: {records} records (10 messages × 1 record per batch), median of {repeats}; \
         bare = the same number of synced RocksDB writes of the same sizes"
    );
    println!(
        "{:>7} {:>9} {:>8} {:>14} {:>16} {:>9} {:>15} {:>15} {:>11} {:>12} {:>7} {:>7} {:>7}",
        "tables",
        "to tables",
        "pollers",
        "records/s",
        "bare records/s",
        "ratio",
        "records/commit",
        "in writes",
        "ops/record",
        "bytes/record",
        "lookup",
        "stage",
        "commit"
    );
    for &tables in &tables_list {
        let to = if hot == 0 { tables } else { hot.min(tables) };
        for &pollers in &pollers {
            let mut rates = Vec::new();
            let mut bare = Vec::new();
            let mut ratios = Vec::new();
            let mut per_commit = Vec::new();
            let mut writing = Vec::new();
            let mut ops = Vec::new();
            let mut bytes = Vec::new();
            let mut steps: [Vec<f64>; 3] = Default::default();
            for repeat in 0..repeats {
                let figures = measure(tables, to, pollers, records, 7 + repeat as u64);
                rates.push(figures.records_per_sec);
                bare.push(figures.bare_records_per_sec);
                ratios.push(figures.records_per_sec / figures.bare_records_per_sec);
                per_commit.push(figures.records_per_commit);
                writing.push(figures.writing_share * 100.0);
                ops.push(figures.ops_per_record);
                bytes.push(figures.bytes_per_record);
                for (all, share) in steps.iter_mut().zip(figures.step_shares) {
                    all.push(share * 100.0);
                }
            }
            let [lookup, stage, commit] = steps.map(|mut shares| median(&mut shares));
            println!(
                "{:>7} {:>9} {:>8} {:>14.0} {:>16.0} {:>9.2} {:>15.1} {:>14.0}% {:>11.2} {:>12.0} {:>6.0}% {:>6.0}% {:>6.0}%",
                tables,
                to,
                pollers,
                median(&mut rates),
                median(&mut bare),
                median(&mut ratios),
                median(&mut per_commit),
                median(&mut writing),
                median(&mut ops),
                median(&mut bytes),
                lookup,
                stage,
                commit
            );
        }
    }
}
