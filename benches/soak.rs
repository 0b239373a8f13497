//! Soak: sustained ingestion with compactions running, in one process over RocksDB; prints the
//! resident memory, open file descriptors and progress every interval, and the drift after the
//! warm-up. Runs are a stand-in that takes 300 ms and succeeds (the state side of a compaction:
//! claim, settle, file log trimming), so this measures icepack, not Spark.
//!
//!   cargo bench --bench soak [-- --seconds N --rate RECORDS_PER_SEC]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use icepack::config::Config;
use icepack::intake::batch::InboundMessage;
use icepack::messages::{GetPoolStatus, Ingest};
use icepack::store::RocksStore;
use icepack::testing::stand_in_runner::{rewrite_output, StandInRunner};

use common::*;

fn main() {
    if let Ok(filter) = std::env::var("ICEPACK_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let full = full_run();
    let seconds: u64 = arg("--seconds")
        .map(|value| value.parse().expect("--seconds N"))
        .unwrap_or(if full { 300 } else { 6 });
    let rate: u64 = arg("--rate")
        .map(|value| value.parse().expect("--rate N"))
        .unwrap_or(2_000);
    let tables = 50;
    let work = tempfile::tempdir().unwrap();
    let config = Config::from_toml_str(&config_toml(
        tables,
        "[defaults]\npacing = false\nmin_files = 20\n[spark]\nmax_concurrent = 2\n",
    ))
    .unwrap();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let runs = Arc::new(AtomicU64::new(0));
    let runner = Arc::new(StandInRunner {
        delay: Duration::from_millis(300),
        output: rewrite_output(20),
        on_start: Box::new({
            let runs = runs.clone();
            move |_| {
                runs.fetch_add(1, Ordering::Relaxed);
            }
        }),
    });
    let system = actix::System::new();
    system.block_on(async move {
        let pipeline = pipeline(&config, store, Some(runner));
        println!(
            "soak: {rate} records/s over {tables} tables for {seconds} s, runs of 300 ms (2 at a time)"
        );
        println!(
            "{:>8} {:>12} {:>10} {:>8} {:>14} {:>8} {:>8} {:>9}",
            "seconds", "records", "RSS KiB", "fds", "runs started", "running", "waiting", "failing"
        );
        let started = Instant::now();
        let mut file = 0u64;
        let mut samples = Vec::new();
        let report_every = Duration::from_secs((seconds / 10).max(1));
        let mut next_report = started;
        // One batch of 10 messages every 10 / rate seconds.
        let mut ticker = tokio::time::interval(Duration::from_micros(10_000_000 / rate));
        while started.elapsed() < Duration::from_secs(seconds) {
            ticker.tick().await;
            let messages: Vec<InboundMessage> = (0..10)
                .map(|_| {
                    file += 1;
                    InboundMessage {
                        id: file.to_string(),
                        body: format!(
                            r#"{{"Records":[{}]}}"#,
                            s3_record(fastrand::usize(..tables), file, 4096)
                        ),
                    }
                })
                .collect();
            pipeline
                .router
                .send(Ingest { messages })
                .await
                .unwrap()
                .unwrap();
            if Instant::now() >= next_report {
                let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
                let tables_now = pipeline.status().await.tables;
                let failing = tables_now
                    .iter()
                    .filter(|table| table.consecutive_failures > 0)
                    .count();
                // Due, not failing, no run in flight, not in the pool's line: nobody will run it.
                let stuck: Vec<&str> = tables_now
                    .iter()
                    .enumerate()
                    .filter(|(index, table)| {
                        table.due
                            && table.consecutive_failures == 0
                            && table.in_flight_run.is_none()
                            && !pool.waiting.contains(index)
                            && !pool.running.iter().any(|(running, _, _)| running == index)
                    })
                    .map(|(_, table)| table.table.as_str())
                    .collect();
                if !stuck.is_empty() {
                    eprintln!("due but idle: {stuck:?}");
                }
                let sample = (
                    started.elapsed().as_secs(),
                    file,
                    rss_kib(),
                    open_fds(),
                    runs.load(Ordering::Relaxed),
                );
                println!(
                    "{:>8} {:>12} {:>10} {:>8} {:>14} {:>8} {:>8} {:>9}",
                    sample.0,
                    sample.1,
                    sample.2,
                    sample.3,
                    sample.4,
                    pool.running.len(),
                    pool.waiting.len(),
                    failing
                );
                samples.push(sample);
                next_report += report_every;
            }
        }
        // Drift after the warm-up (the first fifth of the samples).
        let warm = samples.len() / 5;
        let after: Vec<_> = samples[warm..].to_vec();
        let rss_min = after.iter().map(|s| s.2).min().unwrap_or(0);
        let rss_max = after.iter().map(|s| s.2).max().unwrap_or(0);
        let fds_min = after.iter().map(|s| s.3).min().unwrap_or(0);
        let fds_max = after.iter().map(|s| s.3).max().unwrap_or(0);
        println!(
            "after warm-up: RSS {rss_min}–{rss_max} KiB (spread {:.1}%), open fds {fds_min}–{fds_max}; {} records, {} runs",
            (rss_max - rss_min) as f64 * 100.0 / rss_min.max(1) as f64,
            file,
            runs.load(Ordering::Relaxed)
        );
    });
}
