//! Helpers shared by the benchmark binaries: workload generation, a pipeline over a real RocksDB
//! store, figures. Every benchmark runs a short smoke when started without `--bench` (as
//! `cargo test --all-targets` does), and the full measurement under `cargo bench`.
#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use icepack::base::clock::{Clock, SystemClock};
use icepack::config::Config;
use icepack::engine::spark::job::runner_from_config;
use icepack::engine::spark::runner::SparkRunner;
use icepack::intake::batch::InboundMessage;
use icepack::ops::metrics::Metrics;
use icepack::runs::settings::CompactionSettings;
use icepack::service::{start_pipeline, Compaction, Pipeline};
use icepack::store::{Op, PurgeSummary, RocksStore, StateStore, StoreError};
use icepack::table::state::{FileEntry, SeenEntry, TableSnapshot};

/// `true` under `cargo bench` (which passes `--bench`); a smoke run otherwise.
pub fn full_run() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The value of `--name VALUE` on the command line (after `cargo bench --bench x --`).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1).cloned())
}

/// A configuration with `tables` tables `bench.t<i>` under `warehouse/t<i>/` in bucket `lake`.
pub fn config_toml(tables: usize, extra: &str) -> String {
    let mut toml = format!("{extra}\n");
    for table in 0..tables {
        toml.push_str(&format!(
            "[[tables]]\ntable = \"bench.t{table}\"\nbucket = \"lake\"\nprefix = \"warehouse/t{table}/\"\n"
        ));
    }
    toml
}

/// Events happen now (an old event time would make tables max-wait due at once).
fn event_time() -> &'static str {
    static TIME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TIME.get_or_init(|| {
        chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    })
}

/// One S3 `ObjectCreated:Put` record as AWS writes it (all fields, about 900 bytes).
pub fn s3_record(table: usize, file: u64, size: u64) -> String {
    let time = event_time();
    format!(
        r#"{{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1","eventTime":"{time}","eventName":"ObjectCreated:Put","userIdentity":{{"principalId":"AWS:AIDAJDPLRKLG7UEXAMPLE"}},"requestParameters":{{"sourceIPAddress":"10.0.12.34"}},"responseElements":{{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"}},"s3":{{"s3SchemaVersion":"1.0","configurationId":"icepack-landing","bucket":{{"name":"lake","ownerIdentity":{{"principalId":"A3NL1KOZZKExample"}},"arn":"arn:aws:s3:::lake"}},"object":{{"key":"warehouse/t{table}/data/dt=2024-05-01/00000-{file}-5a1f7c52-2d4e-4f0a-9a63-0c2b9d6e{file:08}.parquet","size":{size},"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5{file:010}"}}}}}}"#
    )
}

/// `records` messages of one record each (what S3 sends), spread over `tables` tables at random,
/// in batches of `batch` messages (what one ReceiveMessage returns).
pub fn batches(records: u64, tables: usize, batch: usize, seed: u64) -> Vec<Vec<InboundMessage>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let messages: Vec<InboundMessage> = (0..records)
        .map(|file| InboundMessage {
            id: file.to_string(),
            body: format!(
                r#"{{"Records":[{}]}}"#,
                s3_record(
                    rng.usize(..tables),
                    file,
                    rng.u64(64 * 1024..8 * 1024 * 1024)
                )
            ),
        })
        .collect();
    messages.chunks(batch).map(|chunk| chunk.to_vec()).collect()
}

/// A pipeline over `store` with `config`, counting only (no compaction) unless a runner is given.
pub fn pipeline(
    config: &Config,
    store: Arc<dyn StateStore>,
    runner: Option<Arc<dyn SparkRunner>>,
) -> Pipeline {
    shared_pipeline(&Arc::new(config.clone()), store, runner)
}

/// The same over a configuration shared with the caller, as `icepack run` does.
#[allow(dead_code)]
pub fn shared_pipeline(
    config: &Arc<Config>,
    store: Arc<dyn StateStore>,
    runner: Option<Arc<dyn SparkRunner>>,
) -> Pipeline {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let settings = CompactionSettings::from_config(config.clone());
    let enabled = runner.is_some();
    let runner = runner.unwrap_or_else(|| runner_from_config(config));
    start_pipeline(
        config.table_specs(),
        store,
        clock,
        Compaction::spark(settings, runner, enabled),
        Arc::new(Metrics::default()),
        None,
    )
    .expect("pipeline starts")
}

/// A RocksDB store that also notes the size of every commit it writes.
pub struct WeighingStore {
    pub inner: RocksStore,
    pub commits: Mutex<Vec<(usize, usize)>>,
    /// Time spent in the synced writes, in microseconds.
    pub write_micros: std::sync::atomic::AtomicU64,
}

impl WeighingStore {
    pub fn open(path: &Path) -> WeighingStore {
        WeighingStore {
            inner: RocksStore::open(path).expect("store opens"),
            commits: Mutex::new(Vec::new()),
            write_micros: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl StateStore for WeighingStore {
    fn load_table(&self, table: &str) -> Result<TableSnapshot, StoreError> {
        self.inner.load_table(table)
    }
    fn seen(&self, objects: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
        self.inner.seen(objects)
    }
    fn seen_entries(&self, objects: &[(&str, &str)]) -> Result<Vec<Option<SeenEntry>>, StoreError> {
        self.inner.seen_entries(objects)
    }
    fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        let batch = self.inner.write_batch(ops)?;
        let weight = (batch.len(), batch.size_in_bytes());
        let started = std::time::Instant::now();
        self.inner.write_synced(batch)?;
        self.write_micros.fetch_add(
            started.elapsed().as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.commits.lock().unwrap().push(weight);
        Ok(())
    }
    fn purge_seen_before(&self, cutoff: i64) -> Result<PurgeSummary, StoreError> {
        self.inner.purge_seen_before(cutoff)
    }
    fn files(&self, table: &str) -> Result<Vec<(u64, FileEntry)>, StoreError> {
        self.inner.files(table)
    }
    fn runs(
        &self,
        table: &str,
    ) -> Result<Vec<(u64, icepack::table::state::RunRecord)>, StoreError> {
        self.inner.runs(table)
    }
    fn series(&self, table: &str) -> Result<icepack::table::series::Series, StoreError> {
        self.inner.series(table)
    }
    fn forget_table(&self, table: &str) -> Result<icepack::store::ForgetSummary, StoreError> {
        self.inner.forget_table(table)
    }
    fn needs_recovery(&self) -> bool {
        self.inner.needs_recovery()
    }
    fn recover(&self) -> Result<(), StoreError> {
        self.inner.recover()
    }
}

/// Writes batches of the given (entries, bytes) to a fresh RocksDB with the store's column
/// families, each synced, as the storage limit for the same commits; returns the time taken.
pub fn bare_synced_writes(path: &Path, commits: &[(usize, usize)]) -> Duration {
    use rocksdb::{Options, WriteBatch, WriteOptions, DB};
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    let db = DB::open_cf(&options, path, icepack::store::FAMILIES).unwrap();
    let files = db.cf_handle("files").unwrap();
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    // Keys like the store's: a long shared prefix (bucket and table path), then what varies.
    let prefix = b"lake\0warehouse/bench_table/data/dt=2024-05-01/00000-";
    let mut next_key = 0u64;
    let started = std::time::Instant::now();
    for &(entries, bytes) in commits {
        let mut batch = WriteBatch::default();
        let key_len = prefix.len() + 8;
        let per_entry = (bytes / entries.max(1)).saturating_sub(key_len + 8).max(1);
        let value = vec![b'x'; per_entry];
        for _ in 0..entries {
            let mut key = prefix.to_vec();
            key.extend_from_slice(&next_key.to_be_bytes());
            batch.put_cf(files, key, &value);
            next_key += 1;
        }
        db.write_opt(batch, &sync).unwrap();
    }
    started.elapsed()
}

/// This process's resident memory in KiB (Linux).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of this process (Linux).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// The value at quantile `q` (0..=1) of sorted `values`.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    quantile(values, 0.5)
}
