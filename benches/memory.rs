//! Memory: resident memory of a pipeline with many configured tables idle, and after a million
//! pending files spread over them. Each figure comes from a fresh child process (this binary
//! re-executed), so allocations of one measurement do not hide in another's. Then the hourly
//! `seen` purge over a million remembered keys, 1% of them past the retention: through the time
//! index, against the full scan and decode of `seen` that the purge did before the index. Then
//! the two per-table durable records, each in a fresh store over `--history-tables` tables: the
//! run history (`service.run_history` = 50 runs a table) and the small-files series at its worst
//! (1440 minute and 168 hourly points a table): bytes on disk after a flush and full compaction,
//! the RSS of a fresh process that reopens the store against one that opens an empty store, and
//! the time to read one table's history and series. Last, the operator page's table listing
//! (`GET /v1/tables?limit=50&sort=pending_files`: every status, select, serialize) over `--tables`
//! idle tables with 10 pending files each on average.
//!
//!   cargo bench --bench memory [-- --tables N --pending N --seen-keys N --history-tables N]
//!
//! `--history-tables 0` skips the run history and the series.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use icepack::config::Config;
use icepack::engine::spark::result::{FailureClass, RewriteResult};
use icepack::intake::batch::InboundMessage;
use icepack::messages::Ingest;
use icepack::ops::listing::TableQuery;
use icepack::service::Pipeline;
use icepack::store::{Op, RocksStore, StateStore};
use icepack::table::series::{Level, Resolution, Sample, Sampler, HOURS_KEPT, MINUTES_KEPT};
use icepack::table::state::{RunRecord, SeenEntry};

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
    let config = Arc::new(Config::from_toml_str(&toml).unwrap());
    drop(toml);
    // Only to tell what the parsed configuration keeps from what its parsing left freed.
    icepack::service::release_freed_memory();
    let configured = rss_kib();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let system = actix::System::new();
    system.block_on(async move {
        let before = rss_kib();
        let started = Instant::now();
        let pipeline = shared_pipeline(&config, store, None);
        // The pipeline is up once the status of all tables comes back (an idle table's is read from
        // the store: it has no accumulator).
        let status = pipeline.status().await;
        assert_eq!(status.tables.len(), tables);
        drop(status);
        // What `icepack run` does once its pipeline is up: it keeps the configuration without its
        // list of tables (the table map has their specs), and gives the freed heap back.
        let kept = config.without_tables();
        drop(config);
        icepack::service::release_freed_memory();
        let startup = started.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = rss_kib();
        let file = ingest(&pipeline, tables, pending).await;
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
        drop(kept);
    });
}

/// Sends `pending` files (1 MiB each) spread over `tables` tables at random: 100 records per
/// message, 10 messages per batch, 8 batches in flight. Returns how many it sent.
async fn ingest(pipeline: &Pipeline, tables: usize, pending: u64) -> u64 {
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
    file
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

/// Runs a table keeps: `service.run_history`'s default.
const RUN_HISTORY: u64 = 50;
const MINUTE_MILLIS: i64 = 60_000;
/// Random tables whose history and series are read back from a full store.
const READS: usize = 100;
/// Repetitions of the table listing.
const LISTINGS: usize = 100;
/// Repetitions of every accumulator's status, the listing's way before the board (slow).
const STATUS_ROUNDS: usize = 5;

/// Table names of the history and series stores, like a multi-tenant deployment's
/// (`tenant7.orders_1234`).
fn table_name(table: usize) -> String {
    const NAMES: [&str; 6] = [
        "orders",
        "events",
        "clicks",
        "payments",
        "sessions",
        "inventory",
    ];
    format!(
        "tenant{}.{}_{table}",
        table % 40,
        NAMES[table % NAMES.len()]
    )
}

/// A finished run as the accumulator records it: a `files` run with binpack over a few daily
/// partitions; about one in ten failed, with its class and a short error instead of a result.
fn run_record(rng: &mut fastrand::Rng, finished_millis: i64) -> RunRecord {
    let duration_millis = rng.u64(40_000..600_000);
    let started_millis = finished_millis - duration_millis as i64;
    let claimed_files = rng.u64(20..500);
    let claimed_bytes = claimed_files * rng.u64(256 * 1024..8 * 1024 * 1024);
    let day = finished_millis / 86_400_000;
    let partitions = (0..rng.i64(1..=4))
        .map(|back| format!("order_date=2024-05-{:02}", 1 + (day - back).rem_euclid(28)))
        .collect();
    let failed = rng.u8(..10) == 0;
    let (failure_class, error, result, output_files, attempts) = if failed {
        let (class, error) = if rng.bool() {
            (
                FailureClass::CommitConflict,
                "CommitFailedException: Cannot commit changes based on stale table metadata; another writer committed first",
            )
        } else {
            (
                FailureClass::Timeout,
                "the run exceeded spark.timeout_minutes (30) and was stopped; its claimed files are pending again",
            )
        };
        (
            Some(class),
            Some(error.to_string()),
            None,
            0,
            rng.u32(1..=3),
        )
    } else {
        let added = 1 + claimed_bytes / (512 << 20);
        let result = RewriteResult {
            rewritten_data_files_count: claimed_files,
            added_data_files_count: added,
            rewritten_bytes_count: claimed_bytes,
            failed_data_files_count: 0,
            removed_delete_files_count: 0,
        };
        (None, None, Some(result), added, 1)
    };
    RunRecord {
        run_id: icepack::runs::report::new_run_id(started_millis),
        trigger: icepack::runs::task::Trigger::Files,
        started_millis,
        finished_millis,
        claimed_files,
        claimed_bytes,
        succeeded: !failed,
        failure_class,
        error,
        result,
        output_files,
        duration_millis,
        attempts,
        strategy: Some("binpack".to_string()),
        maintenance: None,
        manifests: None,
        orphan_files: None,
        delete_rewrite: None,
        statistics_files: None,
        partitions,
        maintenance_failed: None,
        ran_on: None,
        left: Vec::new(),
    }
}

/// Apparent bytes of the files in a store's directory, RocksDB's LOG files left out: all of them
/// (table files, WAL, MANIFEST, OPTIONS, ...), and the table files (`*.sst`) alone.
fn store_bytes(path: &Path) -> (u64, u64) {
    let (mut total, mut sst) = (0, 0);
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let metadata = entry.metadata().unwrap();
        if !metadata.is_file() || name.starts_with("LOG") {
            continue;
        }
        total += metadata.len();
        if name.ends_with(".sst") {
            sst += metadata.len();
        }
    }
    (total, sst)
}

/// Flushes every family's memtable to table files and compacts the family fully, through RocksDB
/// itself over the closed store (`RocksStore` has neither call).
fn flush_and_compact(path: &Path) {
    let options = rocksdb::Options::default();
    let names = rocksdb::DB::list_cf(&options, path).unwrap();
    let db = rocksdb::DB::open_cf(&options, path, &names).unwrap();
    for name in &names {
        let family = db.cf_handle(name).unwrap();
        db.flush_cf(family).unwrap();
        db.compact_range_cf(family, None::<&[u8]>, None::<&[u8]>);
    }
}

/// In the child: writes every one of `tables` tables' run history (`kind` = `runs`: 50 runs) or
/// full series (`series`: a sample for each of the last 1440 minutes and 168 hours) into a fresh
/// store at `path`, closes it, flushes and compacts it. Prints the records, their keys' and
/// values' bytes as written, and the directory's bytes after the close and after the compaction
/// (all files, table files).
fn write_child(kind: &str, tables: usize, path: &Path) {
    let store = RocksStore::open(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let now = chrono::Utc::now().timestamp_millis();
    let (mut records, mut key_bytes, mut value_bytes) = (0u64, 0u64, 0u64);
    let mut ops = Vec::new();
    for table in 0..tables {
        let name = table_name(table);
        if kind == "runs" {
            for seq in 0..RUN_HISTORY {
                // A run every half hour or so, the newest just finished.
                let finished = now - (RUN_HISTORY - seq) as i64 * 30 * MINUTE_MILLIS;
                let record = run_record(&mut rng, finished);
                records += 1;
                key_bytes += name.len() as u64 + 1 + 8;
                value_bytes += serde_json::to_vec(&record).unwrap().len() as u64;
                ops.push(Op::PutRun {
                    table: name.clone(),
                    seq,
                    record,
                });
            }
        } else {
            let minute = now.div_euclid(MINUTE_MILLIS);
            let hour = now.div_euclid(60 * MINUTE_MILLIS);
            let slots = (minute - MINUTES_KEPT..minute)
                .map(|slot| (Resolution::Minute, slot))
                .chain((hour - HOURS_KEPT..hour).map(|slot| (Resolution::Hour, slot)));
            let mut files = rng.u64(..500);
            for (resolution, slot) in slots {
                // A walk between 0 and 500 small files of 1-2 MiB.
                files = files.saturating_add_signed(rng.i64(-25..=25)).min(500);
                let level = Level(files, files * rng.u64(1 << 20..2 << 20));
                // A minute's peak: files a run took within it; an hour's is its level.
                let peak = match resolution {
                    Resolution::Minute => files + rng.u64(..=20),
                    Resolution::Hour => files,
                };
                let sample = Sample::new(level, peak);
                records += 1;
                key_bytes += name.len() as u64 + 1 + 1 + 8;
                value_bytes += serde_json::to_vec(&sample).unwrap().len() as u64;
                ops.push(Op::PutSample {
                    table: name.clone(),
                    resolution,
                    slot,
                    sample,
                });
            }
        }
        if ops.len() >= 5_000 {
            store.commit(std::mem::take(&mut ops)).unwrap();
        }
    }
    store.commit(ops).unwrap();
    drop(store);
    let (closed, _) = store_bytes(path);
    flush_and_compact(path);
    let (compacted, sst) = store_bytes(path);
    println!("WRITTEN {records} {key_bytes} {value_bytes} {closed} {compacted} {sst}");
}

/// In the child: the RSS (KiB) before and after opening the store at `path`, and after reading
/// back the history and the series of `READS` random tables of `tables` (what
/// `GET /v1/tables/{t}/runs` and `/series` read); prints them, the median read times in
/// microseconds, and the runs and points read.
fn reopen_child(tables: usize, path: &Path) {
    let before = rss_kib();
    let store = RocksStore::open(path).unwrap();
    let opened = rss_kib();
    let mut rng = fastrand::Rng::with_seed(11);
    let (mut runs_micros, mut series_micros) = (Vec::new(), Vec::new());
    let (mut runs, mut points) = (0, 0);
    for _ in 0..READS {
        let name = table_name(rng.usize(..tables.max(1)));
        let started = Instant::now();
        runs += store.runs(&name).unwrap().len();
        runs_micros.push(started.elapsed().as_secs_f64() * 1e6);
        let started = Instant::now();
        points += store.series(&name).unwrap().points().len();
        series_micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let read = rss_kib();
    println!(
        "REOPEN {before} {opened} {read} {} {} {runs} {points}",
        median(&mut runs_micros),
        median(&mut series_micros)
    );
}

/// In the child: `tables` idle tables with `pending` files spread over them; prints the median,
/// over `LISTINGS` repetitions, of what `GET /v1/tables?limit=50&sort=pending_files` computes
/// (the board's summaries, the page's selection, its tables' statuses, its JSON) and of every
/// accumulator's status (what it asked before the board), in milliseconds, and the page's JSON
/// bytes.
fn listing_child(tables: usize, pending: u64) {
    let work = tempfile::tempdir().unwrap();
    let toml = config_toml(
        tables,
        "[defaults]\npacing = false\nmin_files = 100000000\nmin_total_mb = 100000000\nmax_wait_minutes = 100000\n",
    );
    let config = Config::from_toml_str(&toml).unwrap();
    let store = Arc::new(RocksStore::open(&work.path().join("state")).unwrap());
    let system = actix::System::new();
    system.block_on(async move {
        let pipeline = pipeline(&config, store, None);
        let sent = ingest(&pipeline, tables, pending).await;
        let status = pipeline.status().await;
        let counted: u64 = status.tables.iter().map(|table| table.pending_files).sum();
        assert_eq!(counted, sent);
        drop(status);
        let query = TableQuery {
            sort: Some("pending_files".into()),
            limit: Some(50),
            ..Default::default()
        };
        let (mut whole, mut statuses_only) = (Vec::new(), Vec::new());
        let mut body_bytes = 0;
        for round in 0..LISTINGS {
            let started = Instant::now();
            let page = pipeline.list(&query).await;
            let body = serde_json::to_string(&serde_json::json!({
                "total": page.total,
                "matched": page.matched,
                "offset": page.offset,
                "limit": page.limit,
                "tables": page.tables,
            }))
            .unwrap();
            whole.push(started.elapsed().as_secs_f64() * 1000.0);
            body_bytes = body.len();
            if round < STATUS_ROUNDS {
                // What the listing asked before the board: every accumulator's status.
                let started = Instant::now();
                let statuses = pipeline.status().await.tables;
                statuses_only.push(started.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(statuses.len(), tables);
            }
        }
        whole.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "LISTING {counted} {} {} {body_bytes} {}",
            quantile(&whole, 0.5),
            median(&mut statuses_only),
            quantile(&whole, 0.99)
        );
    });
}

/// Runs this binary with `args` and returns the numbers of its output line starting `prefix`.
fn run_mode(args: &[&str], prefix: &str) -> Vec<f64> {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| {
            panic!(
                "child failed: {}\n{stdout}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    line.split(' ').map(|n| n.parse().unwrap()).collect()
}

/// The run history and the series, each in its own store over `tables` tables, against an empty
/// store: bytes on disk, RSS of a fresh process reopening the store, read times.
fn history_and_series(tables: usize) {
    let work = tempfile::tempdir().unwrap();
    let n = tables.to_string();
    let empty_path = work.path().join("empty");
    let empty = run_mode(
        &["--reopen-child", &n, empty_path.to_str().unwrap()],
        "REOPEN ",
    );
    let (empty_closed, _) = store_bytes(&empty_path);
    flush_and_compact(&empty_path);
    let (empty_bytes, empty_sst) = store_bytes(&empty_path);
    println!(
        "run history ({RUN_HISTORY} runs a table) and small-files series (worst case: {MINUTES_KEPT} \
         minute + {HOURS_KEPT} hourly points a table), {tables} tables, each in a fresh RocksDB store; \
         bytes: the store directory's files without LOG (apparent sizes)"
    );
    println!(
        "{:<34} {:>10} {:>13} {:>13} {:>13} {:>13} {:>11} {:>10}",
        "",
        "records",
        "written k+v",
        "after close",
        "compacted",
        "of which sst",
        "B/table",
        "B/record"
    );
    println!(
        "{:<34} {:>10} {:>13} {empty_closed:>13} {empty_bytes:>13} {empty_sst:>13}",
        "empty store", 0, 0
    );
    let mut reopened = Vec::new();
    for (kind, label) in [("runs", "run history"), ("series", "small-files series")] {
        let path = work.path().join(kind);
        let written = run_mode(
            &["--write-child", kind, &n, path.to_str().unwrap()],
            "WRITTEN ",
        );
        let [records, keys, values, closed, compacted, sst] = written[..] else {
            panic!("six figures")
        };
        let stored = compacted - empty_bytes as f64;
        println!(
            "{label:<34} {records:>10} {:>13} {closed:>13} {compacted:>13} {sst:>13} {:>11.0} {:>10.1}",
            keys + values,
            stored / tables as f64,
            stored / records
        );
        reopened.push((
            label,
            run_mode(&["--reopen-child", &n, path.to_str().unwrap()], "REOPEN "),
        ));
    }
    println!(
        "  (B/table and B/record: compacted − empty store; written k+v: the records' keys and JSON values)"
    );
    println!(
        "RSS of a fresh process opening the store (KiB), then after reading {READS} random tables' \
         history and series:"
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>16} {:>16}",
        "", "before", "opened", "read", "opened − empty", "read − empty"
    );
    let row = |label: &str, figures: &[f64]| {
        println!(
            "{label:<34} {:>10} {:>10} {:>10} {:>16} {:>16}",
            figures[0],
            figures[1],
            figures[2],
            (figures[1] - figures[0]) - (empty[1] - empty[0]),
            (figures[2] - figures[0]) - (empty[2] - empty[0])
        )
    };
    row("empty store", &empty);
    for (label, figures) in &reopened {
        row(label, figures);
    }
    println!("  (− empty: the growth since `before`, less the empty store's)");
    let (runs, series) = (&reopened[0].1, &reopened[1].1);
    println!(
        "read one table, median of {READS} random tables: store.runs() {:.1} µs ({:.1} runs a \
         table), store.series().points() {:.1} µs ({:.1} points a table)",
        runs[3],
        runs[5] / READS as f64,
        series[4],
        series[6] / READS as f64
    );
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
    if let Some(at) = args.iter().position(|arg| arg == "--write-child") {
        write_child(
            &args[at + 1],
            args[at + 2].parse().unwrap(),
            Path::new(&args[at + 3]),
        );
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "--reopen-child") {
        reopen_child(args[at + 1].parse().unwrap(), Path::new(&args[at + 2]));
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "--listing-child") {
        listing_child(args[at + 1].parse().unwrap(), args[at + 2].parse().unwrap());
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
    let history_tables: usize = arg("--history-tables")
        .map(|value| value.parse().expect("--history-tables N"))
        .unwrap_or(if full { 10_000 } else { 50 });

    let one = run_child(1, 0);
    let many = run_child(tables, 0);
    let loaded = run_child(tables, pending);
    let per_table = (many.idle as f64 - one.idle as f64) / (tables - 1) as f64;
    println!("memory (resident, KiB), each row a fresh process over RocksDB");
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        "", "process", "config", "after parse", "start-up ms"
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        "1 table, idle",
        one.idle,
        one.config,
        one.idle as i64 - one.before as i64,
        one.startup_ms
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>12}",
        format!("{tables} tables, idle"),
        many.idle,
        many.config,
        many.idle as i64 - many.before as i64,
        many.startup_ms
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12}",
        format!("{tables} tables, {} pending files", loaded.counted),
        loaded.loaded,
        loaded.config,
        loaded.loaded as i64 - loaded.before as i64
    );
    println!(
        "per idle table: {per_table:.2} KiB of process ({tables} tables − 1 table, / {}): its spec, \
         handle, board summary and routing (an idle table has no actor); the parsed configuration \
         ({:.2} KiB a table) is freed once the pipeline is up, as `icepack run` keeps no list of tables beside the table map",
        tables - 1,
        (many.config as f64 - one.config as f64) / (tables - 1) as f64,
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
    if history_tables > 0 {
        history_and_series(history_tables);
    }
    let listed_pending = tables as u64 * 10;
    let listing = run_mode(
        &[
            "--listing-child",
            &tables.to_string(),
            &listed_pending.to_string(),
        ],
        "LISTING ",
    );
    println!(
        "table listing (GET /v1/tables?limit=50&sort=pending_files), {tables} idle tables, {} \
         pending files, {LISTINGS} times (fresh process, RocksDB):",
        listing[0]
    );
    println!(
        "  board's summaries + select + the page's statuses + JSON ({} bytes): median {:>7.2} ms, p99 {:>7.2} ms",
        listing[3], listing[1], listing[4]
    );
    println!(
        "  every accumulator's status (what the listing asked before the board): median of {STATUS_ROUNDS} {:>9.2} ms",
        listing[2]
    );
    println!(
        "series sampler in memory: {} bytes a table (size_of::<Sampler>())",
        std::mem::size_of::<Sampler>()
    );
}
