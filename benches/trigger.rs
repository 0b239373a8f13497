//! Trigger latency: from sending the batch whose event makes a table due to the runner being
//! called for that table (engine start excluded), p50/p99 over many tables; once with the intake
//! otherwise idle, once while other tables take a continuous flood of events, and once while a
//! reload (`Pipeline::apply`) adds 10,000 tables: one trigger every 2 ms from a thread of its own,
//! the figures over the triggers sent while the reload ran (`--reload-only`: that case alone).
//!
//!   cargo bench --bench trigger [-- --tables N --idle-tables N --reload-tables N --repeats N --reload-only]
//!
//! `--idle-tables N`: N more tables configured that get no event (the rest of a large fleet).
//!
//! The path measured: parse and route, stage, the synced intake commit, the accumulator's decision,
//! the pool's dispatch, the claim's synced commit, building the job, the runner's `run`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use icepack::config::Config;
use icepack::engine::spark::runner::{EngineOutput, SparkJob};
use icepack::intake::batch::InboundMessage;
use icepack::messages::Ingest;
use icepack::store::RocksStore;
use icepack::testing::stand_in_runner::StandInRunner;
use tokio::sync::mpsc;

use common::*;

fn message(id: u64, body: String) -> InboundMessage {
    InboundMessage {
        id: id.to_string(),
        body,
    }
}

/// Tables `0..tables` get 9 small files each (not due at min_files = 10); returns the last
/// message id used.
async fn nine_files_each(pipeline: &icepack::service::Pipeline, tables: usize) -> u64 {
    let mut id = 0;
    for table in 0..tables {
        let messages = (0..9)
            .map(|file| {
                id += 1;
                message(
                    id,
                    format!(r#"{{"Records":[{}]}}"#, s3_record(table, file, 1024)),
                )
            })
            .collect();
        pipeline
            .router
            .send(Ingest { messages })
            .await
            .unwrap()
            .unwrap();
    }
    id
}

/// `tables` tables get 9 files each (not due at min_files = 10), then one table at a time its
/// 10th; returns the latencies in milliseconds.
fn measure(tables: usize, idle: usize, under_load: bool) -> Vec<f64> {
    let work = tempfile::tempdir().unwrap();
    // The flood goes to tables of its own, with thresholds it never reaches.
    let flood_tables = 100;
    let mut toml = config_toml(
        tables,
        "[defaults]\npacing = false\nmin_files = 10\n[spark]\nmax_concurrent = 4\nretry_attempts = 1\n",
    );
    // Tables that get no event: the rest of a large fleet.
    for table in 0..idle {
        toml.push_str(&format!(
            "[[tables]]\ntable = \"idle.t{table}\"\nbucket = \"idle\"\nprefix = \"warehouse/t{table}/\"\n"
        ));
    }
    for table in 0..flood_tables {
        toml.push_str(&format!(
            "[[tables]]\ntable = \"flood.t{table}\"\nbucket = \"flood\"\nprefix = \"warehouse/t{table}/\"\nmin_files = 100000000\nmin_total_mb = 100000000\nmax_wait_minutes = 100000\n"
        ));
    }
    let config = Config::from_toml_str(&toml).unwrap();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let (runner, mut started) = noting_runner();
    let system = actix::System::new();
    system.block_on(async move {
        let pipeline = pipeline(&config, store, Some(runner));
        let mut id = nine_files_each(&pipeline, tables).await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut flood = Vec::new();
        if under_load {
            for poller in 0..4u64 {
                let router = pipeline.router.clone();
                let stop = stop.clone();
                flood.push(tokio::spawn(async move {
                    let mut file = poller << 40;
                    while !stop.load(Ordering::Relaxed) {
                        let messages = (0..10)
                            .map(|_| {
                                file += 1;
                                let body = s3_record(fastrand::usize(..flood_tables), file, 1024)
                                    .replace("\"name\":\"lake\"", "\"name\":\"flood\"");
                                message(file, format!(r#"{{"Records":[{body}]}}"#))
                            })
                            .collect();
                        router.send(Ingest { messages }).await.unwrap().unwrap();
                    }
                }));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut latencies = Vec::with_capacity(tables);
        for table in 0..tables {
            id += 1;
            let body = format!(r#"{{"Records":[{}]}}"#, s3_record(table, 9, 1024));
            let sent = Instant::now();
            pipeline
                .router
                .send(Ingest {
                    messages: vec![message(id, body)],
                })
                .await
                .unwrap()
                .unwrap();
            let (started_table, at) = started.recv().await.expect("a run starts");
            assert_eq!(started_table, format!("bench.t{table}"));
            latencies.push(at.duration_since(sent).as_secs_f64() * 1000.0);
        }
        stop.store(true, Ordering::Relaxed);
        for task in flood {
            task.await.unwrap();
        }
        latencies
    })
}

/// One table after another gets its 10th file, every 2 ms from a thread of its own (events
/// arrive whatever icepack is doing), while `Pipeline::apply` adds `added` new tables; returns
/// the latencies of the triggers sent while the reload ran, and how long the reload took (ms).
fn measure_during_reload(fed: usize, added: usize) -> (Vec<f64>, f64) {
    let work = tempfile::tempdir().unwrap();
    let extra = "[defaults]\npacing = false\nmin_files = 10\n[spark]\nmax_concurrent = 4\nretry_attempts = 1\n";
    let config = Config::from_toml_str(&config_toml(fed, extra)).unwrap();
    let mut bigger = config_toml(fed, extra);
    for table in 0..added {
        bigger.push_str(&format!(
            "[[tables]]\ntable = \"added.t{table}\"\nbucket = \"added\"\nprefix = \"warehouse/t{table}/\"\n"
        ));
    }
    // Parsed beforehand: a reload parses off the actors' thread already (§7).
    let bigger = Arc::new(Config::from_toml_str(&bigger).unwrap());
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let (runner, mut started) = noting_runner();
    let system = actix::System::new();
    system.block_on(async move {
        let pipeline = pipeline(&config, store, Some(runner));
        nine_files_each(&pipeline, fed).await;
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let router = pipeline.router.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut sent = Vec::new();
                for table in 0..fed {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let body = format!(r#"{{"Records":[{}]}}"#, s3_record(table, 9, 1024));
                    sent.push(Instant::now());
                    router.do_send(Ingest {
                        messages: vec![message(1_000_000 + table as u64, body)],
                    });
                    std::thread::sleep(Duration::from_millis(2));
                }
                sent
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let began = Instant::now();
        pipeline.apply(&bigger).await.expect("the reload applies");
        let ended = Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.store(true, Ordering::Relaxed);
        let sent = tokio::task::spawn_blocking(move || sampler.join().unwrap())
            .await
            .unwrap();
        let mut starts = std::collections::HashMap::new();
        while starts.len() < sent.len() {
            let (table, at) = tokio::time::timeout(Duration::from_secs(30), started.recv())
                .await
                .expect("every trigger starts a run")
                .expect("a run starts");
            starts.insert(table, at);
        }
        let latencies = sent
            .iter()
            .enumerate()
            .filter(|(_, at)| **at >= began && **at <= ended)
            .map(|(table, at)| {
                let start = starts[&format!("bench.t{table}")];
                start.duration_since(*at).as_secs_f64() * 1000.0
            })
            .collect();
        (
            latencies,
            ended.duration_since(began).as_secs_f64() * 1000.0,
        )
    })
}

fn main() {
    let full = full_run();
    let tables: usize = arg("--tables")
        .map(|value| value.parse().expect("--tables N"))
        .unwrap_or(if full { 1_000 } else { 20 });
    let idle: usize =
        arg("--idle-tables").map_or(0, |value| value.parse().expect("--idle-tables N"));
    println!(
        "trigger latency: event that makes a table due → runner called, {tables} tables (and {idle} \
         more configured that get no event)"
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9}",
        "intake", "p50 ms", "p99 ms", "max ms"
    );
    let reload_only = std::env::args().any(|arg| arg == "--reload-only");
    for under_load in [false, true].into_iter().filter(|_| !reload_only) {
        let mut latencies = measure(tables, idle, under_load);
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{:<26} {:>9.2} {:>9.2} {:>9.2}",
            if under_load {
                "flooded (4 pollers)"
            } else {
                "idle"
            },
            quantile(&latencies, 0.5),
            quantile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(f64::NAN)
        );
    }
    let added: usize = arg("--reload-tables")
        .map(|value| value.parse().expect("--reload-tables N"))
        .unwrap_or(if full { 10_000 } else { 200 });
    let repeats: usize = arg("--repeats")
        .map(|value| value.parse().expect("--repeats N"))
        .unwrap_or(if full { 3 } else { 1 });
    // Enough tables fed for a trigger every 2 ms through the whole reload.
    let fed = if full { 3_000 } else { 200 };
    let mut latencies = Vec::new();
    let mut reload_ms = Vec::new();
    for _ in 0..repeats {
        let (during, took) = measure_during_reload(fed, added);
        latencies.extend(during);
        reload_ms.push(took);
    }
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{:<26} {:>9.2} {:>9.2} {:>9.2}   ({} triggers sent during {} reloads adding {added} tables, reload median {:.0} ms)",
        format!("reload (+{added} tables)"),
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(f64::NAN),
        latencies.len(),
        repeats,
        median(&mut reload_ms)
    );
}

/// A runner that notes when each run starts (table, instant) and ends it at once as a failure
/// (the table backs off; harmless).
fn noting_runner() -> (
    Arc<StandInRunner>,
    mpsc::UnboundedReceiver<(String, Instant)>,
) {
    let (sender, started) = mpsc::unbounded_channel();
    let sender = Mutex::new(sender);
    let runner = Arc::new(StandInRunner {
        delay: Duration::ZERO,
        output: EngineOutput {
            exit_code: 1,
            stderr: "benchmark runner".to_string(),
            ..EngineOutput::default()
        },
        on_start: Box::new(move |job: &SparkJob| {
            let _ = sender
                .lock()
                .unwrap()
                .send((job.table.clone(), Instant::now()));
        }),
    });
    (runner, started)
}
