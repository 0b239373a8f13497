//! Memory: resident memory of a pipeline with many configured tables idle, and after a million
//! pending files spread over them. Each figure comes from a fresh child process (this binary
//! re-executed), so allocations of one measurement do not hide in another's. Then the hourly
//! `seen` purge over a million remembered keys, 1% of them past the retention: through the time
//! index, against the full scan and decode of `seen` that the purge did before the index.
//!
//!   cargo bench --bench memory [-- --tables N --pending N --seen-keys N]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use icepack::actors::messages::Ingest;
use icepack::config::Config;
use icepack::intake::InboundMessage;
use icepack::state::SeenEntry;
use icepack::store::{Op, RocksStore, StateStore};

use common::*;

/// In the child: start a pipeline with `tables` tables, print the RSS idle and after `pending`
/// files (100 records per message, 10 messages per batch, 8 batches in flight).
fn child(tables: usize, pending: u64) {
    let work = tempfile::tempdir().unwrap();
    let at_start = rss_kib();
    let toml = config_toml(
        tables,
        "[defaults]\npacing = false\nmin_files = 100000000\nmin_total_mb = 100000000\nmax_wait_minutes = 100000\n",
    );
    let config = Config::from_toml_str(&toml).unwrap();
    drop(toml);
    // Only to tell what the parsed configuration keeps from what its parsing left freed.
    icepack::service::release_freed_memory();
    let configured = rss_kib();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let system = actix::System::new();
    system.block_on(async move {
        let before = rss_kib();
        let started = Instant::now();
        let pipeline = pipeline(&config, store, None);
        // Every accumulator has started once the status of all tables comes back.
        let status = pipeline.status().await;
        assert_eq!(status.tables.len(), tables);
        drop(status);
        // What `icepack run` does once its pipeline is up.
        icepack::service::release_freed_memory();
        let startup = started.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = rss_kib();
        let mut file = 0u64;
        let mut batches = Vec::new();
        while file < pending {
            let messages: Vec<InboundMessage> = (0..10)
                .map(|message| {
                    let records: Vec<String> = (0..100)
                        .map(|_| {
                            file += 1;
                            s3_record(fastrand::usize(..tables), file, 1024 * 1024)
                        })
                        .collect();
                    InboundMessage {
                        id: format!("{file}-{message}"),
                        body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
                    }
                })
                .collect();
            batches.push(Ingest { messages });
            if batches.len() == 8 || file >= pending {
                let sent = batches.drain(..).map(|batch| pipeline.router.send(batch));
                for report in join_all(sent).await {
                    report.unwrap().unwrap();
                }
            }
        }
        let status = pipeline.status().await;
        let counted: u64 = status.tables.iter().map(|table| table.pending_files).sum();
        assert_eq!(counted, file);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let loaded = rss_kib();
        println!(
            "CHILD {before} {idle} {loaded} {} {counted} {}",
            startup.as_millis(),
            configured - at_start
        );
    });
}

/// In the child: a store remembering `keys` object keys, the first 1% of them first seen long
/// ago; prints the time of a full scan and decode of `seen` (what the purge read before the time
/// index), of the purge, and of a second purge (which finds nothing new, only the first's
/// deletions not yet compacted away).
fn purge_child(keys: u64) {
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("state");
    let store = RocksStore::open(&path).unwrap();
    let expired = keys / 100;
    let mut ops = Vec::new();
    for file in 0..keys {
        let first_seen_millis = if file < expired {
            file as i64
        } else {
            1_000_000_000 + file as i64
        };
        ops.push(Op::PutSeen {
            bucket: "lake".to_string(),
            key: format!(
                "warehouse/t{}/data/dt=2024-05-01/00000-{file}-5a1f7c52-2d4e-4f0a-9a63-0c2b9d6e{file:08}.parquet",
                file % 100
            ),
            entry: SeenEntry {
                table: format!("bench.t{}", file % 100),
                first_seen_millis,
                seq: None,
            },
        });
        if ops.len() == 10_000 {
            store.commit(std::mem::take(&mut ops)).unwrap();
        }
    }
    store.commit(ops).unwrap();

    let reader = rocksdb::DB::open_cf_for_read_only(
        &rocksdb::Options::default(),
        &path,
        icepack::store::FAMILIES,
        false,
    )
    .unwrap();
    let seen = reader.cf_handle("seen").unwrap();
    let started = Instant::now();
    let mut scanned = 0;
    for item in reader.iterator_cf(seen, rocksdb::IteratorMode::Start) {
        let (_, value) = item.unwrap();
        let entry: SeenEntry = serde_json::from_slice(&value).unwrap();
        scanned += u64::from(entry.first_seen_millis >= 0);
    }
    let scan = started.elapsed();
    assert_eq!(scanned, keys);
    drop(reader);
    let started = Instant::now();
    let first = store.purge_seen_before(1_000_000_000).unwrap();
    let purge = started.elapsed();
    assert_eq!(first.purged, expired);
    let started = Instant::now();
    let second = store.purge_seen_before(1_000_000_000).unwrap();
    let again = started.elapsed();
    assert_eq!(second.examined, 0);
    println!(
        "PURGE {keys} {expired} {} {} {} {}",
        scan.as_micros(),
        purge.as_micros(),
        first.examined,
        again.as_micros()
    );
}

fn run_purge_child(keys: u64) -> Vec<u64> {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--purge-child", &keys.to_string()])
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("PURGE "))
        .unwrap_or_else(|| {
            panic!(
                "child failed: {}\n{stdout}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    line.split(' ').map(|n| n.parse().unwrap()).collect()
}

struct ChildFigures {
    before: u64,
    idle: u64,
    loaded: u64,
    startup_ms: u64,
    counted: u64,
    config: u64,
}

fn run_child(tables: usize, pending: u64) -> ChildFigures {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--child", &tables.to_string(), &pending.to_string()])
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("CHILD "))
        .unwrap_or_else(|| {
            panic!(
                "child failed: {}\n{stdout}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let numbers: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
    ChildFigures {
        before: numbers[0],
        idle: numbers[1],
        loaded: numbers[2],
        startup_ms: numbers[3],
        counted: numbers[4],
        config: numbers[5],
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--child") {
        child(args[at + 1].parse().unwrap(), args[at + 2].parse().unwrap());
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "--purge-child") {
        purge_child(args[at + 1].parse().unwrap());
        return;
    }
    let full = full_run();
    let tables: usize = arg("--tables")
        .map(|value| value.parse().expect("--tables N"))
        .unwrap_or(if full { 10_000 } else { 500 });
    let pending: u64 = arg("--pending")
        .map(|value| value.parse().expect("--pending N"))
        .unwrap_or(if full { 1_000_000 } else { 10_000 });
    let seen_keys: u64 = arg("--seen-keys")
        .map(|value| value.parse().expect("--seen-keys N"))
        .unwrap_or(if full { 1_000_000 } else { 20_000 });

    let one = run_child(1, 0);
    let many = run_child(tables, 0);
    let loaded = run_child(tables, pending);
    let per_table = (many.idle as f64 - one.idle as f64) / (tables - 1) as f64;
    println!("memory (resident, KiB), each row a fresh process over RocksDB");
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        "", "process", "config", "pipeline", "start-up ms"
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        "1 table, idle",
        one.idle,
        one.config,
        one.idle - one.before,
        one.startup_ms
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        format!("{tables} tables, idle"),
        many.idle,
        many.config,
        many.idle - many.before,
        many.startup_ms
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12}",
        format!("{tables} tables, {} pending files", loaded.counted),
        loaded.loaded,
        loaded.config,
        loaded.loaded - loaded.before
    );
    println!(
        "per idle table: {per_table:.2} KiB of process ({tables} tables − 1 table, / {}), of which \
         {:.2} KiB the parsed configuration and {:.2} KiB the pipeline (actor, state, routing)",
        tables - 1,
        (many.config as f64 - one.config as f64) / (tables - 1) as f64,
        ((many.idle - many.before) as f64 - (one.idle - one.before) as f64) / (tables - 1) as f64
    );
    println!(
        "per pending file: {:.1} bytes (pending − idle, same process)",
        (loaded.loaded as f64 - loaded.idle as f64) * 1024.0 / loaded.counted as f64
    );

    let purge = run_purge_child(seen_keys);
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!(
        "seen purge, {} remembered keys, {} past the retention (fresh process, RocksDB):",
        purge[0], purge[1]
    );
    println!(
        "  before the time index (full scan and decode of `seen`, its reads only): {:>9.1} ms",
        ms(purge[2])
    );
    println!(
        "  purge through the time index ({} index entries read):      {:>9.1} ms ({:.3} of the scan)",
        purge[4],
        ms(purge[3]),
        purge[3] as f64 / purge[2] as f64
    );
    println!(
        "  the next purge (nothing new past the retention):                {:>9.1} ms",
        ms(purge[5])
    );
}
