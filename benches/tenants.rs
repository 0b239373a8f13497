//! Tenants at scale: start-up time and resident memory of a deployment of many tenants, each with
//! its own queue and poller, and what live reloads of its configuration cost. Queues are in
//! memory (long-polling like SQS), served through the `Connector` `Control` opens queues with;
//! the state is a RocksDB store. Each figure set comes from a fresh child process (this binary
//! re-executed), so one measurement's allocations do not hide in another's.
//!
//!   cargo bench --bench tenants [-- --tenants N --tables-per-tenant N]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use icepack::base::clock::{Clock, SystemClock};
use icepack::config::{Config, SqsConfig};
use icepack::intake::queue::{
    FailedEntry, MemoryQueue, Queue, QueueError, Receipt, ReceivedMessage,
};
use icepack::messages::Ingest;
use icepack::ops::control::{Connector, Control, ReloadReport};
use icepack::service::{release_freed_memory, Pipeline};
use icepack::store::RocksStore;

use common::*;

/// Tenants added by reload (c) and removed by reload (d).
const CHANGED_TENANTS: usize = 10;
/// Messages pushed to each checked queue after the reloads.
const CHECK_MESSAGES: usize = 5;

// ---------------------------------------------------------------------------------------------
// Live heap: resident memory also holds freed heap that glibc cannot give back (fragmentation),
// and freed heap one step leaves is reused by the next; the bytes allocated and not yet freed
// tell what each step keeps. Counted only in the children that measure it (an atomic add per
// allocation would slow the timed ones).

struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

fn count(bytes: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to the system allocator unchanged; only the sizes are counted.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            count(layout.size() as isize);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            count(layout.size() as isize);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(pointer, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Rust heap allocated and not freed, in KiB (RocksDB's C++ allocations are not counted).
fn live_heap_kib() -> f64 {
    LIVE_BYTES.load(Ordering::Relaxed) as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// Queues

/// A [`MemoryQueue`] (it long-polls like SQS) that counts the receives in progress, to tell when
/// every poller is polling.
struct LongPollQueue {
    inner: MemoryQueue,
    /// Receive calls in progress over every queue (a poller that is polling has one).
    receiving: Arc<AtomicUsize>,
}

impl LongPollQueue {
    fn push(&self, body: String) {
        self.inner.push(body);
    }
}

/// Counts a receive in progress until it returns or is abandoned (a poller told to stop).
struct Receiving<'a>(&'a AtomicUsize);

impl<'a> Receiving<'a> {
    fn enter(count: &'a AtomicUsize) -> Receiving<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Receiving(count)
    }
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Queue for LongPollQueue {
    async fn receive(
        &self,
        max_messages: i32,
        wait_time_seconds: i32,
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let _receiving = Receiving::enter(&self.receiving);
        self.inner
            .receive(max_messages, wait_time_seconds, visibility_timeout_seconds)
            .await
    }

    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        self.inner.delete(receipts).await
    }

    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        self.inner
            .extend_visibility(receipts, visibility_timeout_seconds)
            .await
    }
}

/// Every queue by URL, created on first use; what the connector hands to `Control`.
#[derive(Default)]
struct Queues {
    by_url: Mutex<HashMap<String, Arc<LongPollQueue>>>,
    receiving: Arc<AtomicUsize>,
}

impl Queues {
    fn get(&self, url: &str) -> Arc<LongPollQueue> {
        self.by_url
            .lock()
            .unwrap()
            .entry(url.to_string())
            .or_insert_with(|| {
                Arc::new(LongPollQueue {
                    inner: MemoryQueue::new(),
                    receiving: self.receiving.clone(),
                })
            })
            .clone()
    }

    /// Pollers waiting in a receive right now.
    fn polling(&self) -> usize {
        self.receiving.load(Ordering::SeqCst)
    }

    fn connector(self: &Arc<Self>) -> Connector {
        let queues = self.clone();
        Arc::new(move |sqs: &SqsConfig| {
            let queue: Arc<dyn Queue> = queues.get(&sqs.queue_url);
            Box::pin(async move { queue })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

fn tenant_name(tenant: usize) -> String {
    format!("tenant-{tenant:04}")
}

fn queue_url(tenant: usize) -> String {
    format!("http://127.0.0.1:1/000000000000/{}", tenant_name(tenant))
}

fn bucket(tenant: usize) -> String {
    format!("lake-{}", tenant_name(tenant))
}

fn table_name(tenant: usize, table: usize) -> String {
    format!("tenant_{tenant:04}.t{table}")
}

/// The tenant whose first table's threshold reload (b) changes.
fn changed_tenant(tenants: usize) -> usize {
    tenants / 2
}

/// A configuration of `tenants`, each with its own queue (one poller), bucket and
/// `per_tenant` tables; `min_files` overrides the threshold of one table when given.
fn config_text(
    state_dir: &Path,
    tenants: Range<usize>,
    per_tenant: usize,
    all_tenants: usize,
    min_files: Option<i64>,
) -> String {
    let mut toml = format!(
        "[service]\nstate_dir = \"{}\"\nhttp_listen = \"\"\n\n\
         [defaults]\npacing = false\nmin_files = 100000000\nmin_total_mb = 100000000\nmax_wait_minutes = 100000\n\n",
        state_dir.display()
    );
    for tenant in tenants.clone() {
        for table in 0..per_tenant {
            toml.push_str(&format!(
                "[[tables]]\ntable = \"{}\"\nbucket = \"{}\"\nprefix = \"warehouse/t{table}/\"\ntenant = \"{}\"\n",
                table_name(tenant, table),
                bucket(tenant),
                tenant_name(tenant)
            ));
            if let (Some(min_files), true) = (min_files, table == 0) {
                if tenant == changed_tenant(all_tenants) {
                    toml.push_str(&format!("min_files = {min_files}\n"));
                }
            }
        }
    }
    for tenant in tenants {
        let name = tenant_name(tenant);
        toml.push_str(&format!(
            "\n[tenants.{name}]\n[[tenants.{name}.queues]]\nqueue_url = \"{}\"\npollers = 1\n",
            queue_url(tenant)
        ));
    }
    toml
}

/// One S3 record for `table` of `tenant` (the shared record, in the tenant's bucket).
fn tenant_record(tenant: usize, table: usize, file: u64) -> String {
    let bucket = bucket(tenant);
    s3_record(table, file, 1024 * 1024)
        .replace(r#""name":"lake""#, &format!(r#""name":"{bucket}""#))
        .replace("arn:aws:s3:::lake", &format!("arn:aws:s3:::{bucket}"))
}

// ---------------------------------------------------------------------------------------------
// The measurement (in a child process)

/// Resident memory (KiB) once freed heap is given back (as `icepack run` does after start-up)
/// and the actors have settled, and the live heap (KiB) then.
async fn settled() -> (f64, f64) {
    release_freed_memory();
    tokio::time::sleep(Duration::from_millis(300)).await;
    release_freed_memory();
    (rss_kib() as f64, live_heap_kib())
}

/// `<name>_rss_kib` and `<name>_heap_kib`.
fn memory_figures(name: &str, (rss, heap): (f64, f64)) {
    figure(&format!("{name}_rss_kib"), rss);
    figure(&format!("{name}_heap_kib"), heap);
}

/// The difference of two [`settled`] figures.
fn minus((rss, heap): (f64, f64), (rss_before, heap_before): (f64, f64)) -> (f64, f64) {
    (rss - rss_before, heap - heap_before)
}

/// Waits until `done`; panics after `timeout`. Returns the time waited.
async fn wait_until(what: &str, timeout: Duration, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    started.elapsed()
}

fn figure(name: &str, value: impl std::fmt::Display) {
    println!("FIG {name} {value}");
}

/// The figures of one reload, or the medians of repeated ones (and the spread of their time).
fn reload_figures(case: &str, reloads: &[Reload]) {
    let of = |value: fn(&Reload) -> f64| -> Vec<f64> {
        let mut values: Vec<f64> = reloads.iter().map(value).collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        values
    };
    let mut reload_ms = of(|reload| reload.reload_ms);
    figure(&format!("{case}_reload_ms"), median(&mut reload_ms));
    if reloads.len() > 1 {
        figure(&format!("{case}_reload_min_ms"), reload_ms[0]);
        figure(
            &format!("{case}_reload_max_ms"),
            reload_ms[reload_ms.len() - 1],
        );
    }
    figure(
        &format!("{case}_applied_ms"),
        median(&mut of(|reload| reload.applied_ms)),
    );
    figure(
        &format!("{case}_stall_ms"),
        median(&mut of(|reload| reload.stall_ms)),
    );
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The longest time the actix thread did not get to a 1 ms ticker: how long everything on it
/// (pollers, router, accumulators) stood still.
struct StallMeter {
    stop: Rc<Cell<bool>>,
    longest: Rc<Cell<Duration>>,
    ticker: tokio::task::JoinHandle<()>,
}

impl StallMeter {
    async fn start() -> StallMeter {
        let stop = Rc::new(Cell::new(false));
        let longest = Rc::new(Cell::new(Duration::ZERO));
        let ticker = {
            let (stop, longest) = (stop.clone(), longest.clone());
            tokio::task::spawn_local(async move {
                let mut last = Instant::now();
                while !stop.get() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let now = Instant::now();
                    longest.set(longest.get().max(now - last));
                    last = now;
                }
            })
        };
        // The ticker runs before what it measures starts.
        tokio::time::sleep(Duration::from_millis(5)).await;
        longest.set(Duration::ZERO);
        StallMeter {
            stop,
            longest,
            ticker,
        }
    }

    async fn finish(self) -> Duration {
        self.stop.set(true);
        self.ticker.await.unwrap();
        self.longest.get()
    }
}

/// One timed reload.
struct Reload {
    report: ReloadReport,
    /// `Control::reload`.
    reload_ms: f64,
    /// Until the router routes by the new map.
    applied_ms: f64,
    /// The longest the actix thread stood still meanwhile.
    stall_ms: f64,
    began: Instant,
}

/// Reloads and waits until the router routes by the new map (an empty batch it answers after
/// the map: no commit).
async fn timed_reload(control: &mut Control, pipeline: &Pipeline) -> Reload {
    let meter = StallMeter::start().await;
    let began = Instant::now();
    let report = control.reload().await.expect("the reload is accepted");
    let reloaded = began.elapsed();
    pipeline
        .router
        .send(Ingest {
            messages: Vec::new(),
        })
        .await
        .unwrap()
        .unwrap();
    let applied = began.elapsed();
    Reload {
        report,
        reload_ms: millis(reloaded),
        applied_ms: millis(applied),
        stall_ms: millis(meter.finish().await),
        began,
    }
}

/// Pending files of each of `tenants`' tables, in that order.
async fn pending_of(pipeline: &Pipeline, tenants: &[usize]) -> Vec<u64> {
    let status = pipeline.status().await;
    tenants
        .iter()
        .map(|&tenant| {
            let name = tenant_name(tenant);
            status
                .tables
                .iter()
                .filter(|table| table.tenant == name)
                .map(|table| table.pending_files)
                .sum()
        })
        .collect()
}

/// Start-up of `tenants` × `per_tenant` tables; with `reloads`, then the reloads and the intake
/// check. Prints `FIG name value` lines.
fn child(tenants: usize, per_tenant: usize, reloads: bool) {
    let tables = tenants * per_tenant;
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("icepack.toml");
    let state_dir = work.path().join("state");
    let write_config = |range: Range<usize>, min_files: Option<i64>| {
        let text = config_text(&state_dir, range, per_tenant, tenants, min_files);
        std::fs::write(&path, text).unwrap();
    };
    write_config(0..tenants, None);
    figure(
        "config_bytes",
        std::fs::metadata(&path).unwrap().len() as f64,
    );
    release_freed_memory();
    let at_start = (rss_kib() as f64, live_heap_kib());

    // 1. Start-up: configuration, pipeline, pollers.
    let started = Instant::now();
    let config = Arc::new(Config::load(&path).expect("the configuration is valid"));
    figure("config_parse_ms", millis(started.elapsed()));
    assert_eq!(config.tables.len(), tables);
    assert_eq!(config.tenants.len(), tenants);
    release_freed_memory();
    let configured = (rss_kib() as f64, live_heap_kib());
    memory_figures("config", minus(configured, at_start));
    let store = Arc::new(RocksStore::open(&state_dir).unwrap());

    let control_path = path.clone();
    let reload_path = path.clone();
    let system = actix::System::new();
    system.block_on(async move {
        let before = settled().await;
        let started = Instant::now();
        let pipeline = shared_pipeline(&config, store, None);
        // The pipeline is up once the status of all tables comes back (an idle table's is read from
        // the store: it has no accumulator).
        let status = pipeline.status().await;
        assert_eq!(status.tables.len(), tables);
        figure("pipeline_start_ms", millis(started.elapsed()));
        drop(status);
        let with_pipeline = settled().await;
        memory_figures("pipeline", minus(with_pipeline, before));

        let queues = Arc::new(Queues::default());
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let started = Instant::now();
        let mut control = Control::start(
            control_path,
            config.clone(),
            pipeline.clone(),
            None,
            queues.connector(),
            pipeline.metrics.clone(),
            clock,
        )
        .await;
        figure("control_start_ms", millis(started.elapsed()));
        assert_eq!(control.num_queues(), tenants);
        assert_eq!(control.num_pollers(), tenants);
        // Started: every poller waits in its queue's receive.
        wait_until("every poller to poll", Duration::from_secs(120), || {
            queues.polling() == tenants
        })
        .await;
        figure("pollers_start_ms", millis(started.elapsed()));
        drop(config);
        let with_pollers = settled().await;
        memory_figures("pollers", minus(with_pollers, with_pipeline));
        memory_figures("idle", with_pollers);
        if !reloads {
            return;
        }

        // 2. Reloads.
        let changed = changed_tenant(tenants);
        let mut reloads = Vec::new();
        let mut load_ms = Vec::new();
        for _ in 0..5 {
            write_config(0..tenants, None);
            // What loading and validating alone take, of the reload.
            let started = Instant::now();
            drop(Config::load(&reload_path).unwrap());
            load_ms.push(millis(started.elapsed()));
            let reload = timed_reload(&mut control, &pipeline).await;
            let report = &reload.report;
            assert!(report.map.added.is_empty() && report.map.changed.is_empty());
            assert!(report.map.removed.is_empty() && report.queues_started.is_empty());
            assert!(report.queues_stopped.is_empty() && report.restart_required.is_empty());
            assert_eq!(report.map.tables, tables);
            reloads.push(reload);
        }
        figure("a_load_ms", median(&mut load_ms));
        reload_figures("a", &reloads);
        memory_figures("a", settled().await);

        let mut min_files = 0;
        let mut reloads = Vec::new();
        for round in 0..5 {
            min_files = 5_000 + round;
            write_config(0..tenants, Some(min_files));
            let reload = timed_reload(&mut control, &pipeline).await;
            let report = &reload.report;
            assert_eq!(report.map.changed, vec![table_name(changed, 0)]);
            assert!(report.map.added.is_empty() && report.map.removed.is_empty());
            assert!(report.queues_started.is_empty() && report.queues_stopped.is_empty());
            reloads.push(reload);
        }
        reload_figures("b", &reloads);
        memory_figures("b", settled().await);

        let all = 0..tenants + CHANGED_TENANTS;
        write_config(all.clone(), Some(min_files));
        let reload = timed_reload(&mut control, &pipeline).await;
        let report = &reload.report;
        assert_eq!(report.map.added.len(), CHANGED_TENANTS * per_tenant);
        assert!(report.map.changed.is_empty() && report.map.removed.is_empty());
        assert_eq!(report.queues_started.len(), CHANGED_TENANTS);
        assert_eq!(report.map.tenants, tenants + CHANGED_TENANTS);
        wait_until("the new pollers to poll", Duration::from_secs(60), || {
            queues.polling() == tenants + CHANGED_TENANTS
        })
        .await;
        figure("c_polling_ms", millis(reload.began.elapsed()));
        reload_figures("c", &[reload]);
        memory_figures("c", settled().await);

        // At least one original tenant stays.
        let kept = CHANGED_TENANTS.min(tenants - 1)..tenants + CHANGED_TENANTS;
        let removed = kept.start;
        write_config(kept.clone(), Some(min_files));
        let reload = timed_reload(&mut control, &pipeline).await;
        let report = &reload.report;
        assert_eq!(report.map.removed.len(), removed * per_tenant);
        assert!(report.map.added.is_empty());
        assert_eq!(report.queues_stopped.len(), removed);
        assert!(report.queues_started.is_empty());
        let expected_polling = kept.len();
        wait_until("the removed pollers to stop", Duration::from_secs(60), || {
            queues.polling() == expected_polling
        })
        .await;
        figure("d_stopped_ms", millis(reload.began.elapsed()));
        figure("d_removed_tables", report.map.removed.len());
        reload_figures("d", &[reload]);
        memory_figures("d", settled().await);
        assert_eq!(pipeline.status().await.tables.len(), kept.len() * per_tenant);

        // 3. Intake after the reloads: an added tenant and a kept one count what their queues
        // bring; a removed tenant's queue is no longer polled.
        let added = tenants;
        let original = tenants - 1;
        let started = Instant::now();
        let mut file = 0;
        for tenant in [added, original] {
            let queue = queues.get(&queue_url(tenant));
            for message in 0..CHECK_MESSAGES {
                file += 1;
                queue.push(format!(
                    r#"{{"Records":[{}]}}"#,
                    tenant_record(tenant, message % per_tenant, file)
                ));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let counted = pending_of(&pipeline, &[added, original]).await;
            if counted == [CHECK_MESSAGES as u64; 2] {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after the reloads, {counted:?} files counted of [{CHECK_MESSAGES}, {CHECK_MESSAGES}]"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for tenant in [added, original] {
            let queue = queues.get(&queue_url(tenant));
            wait_until("the counted messages' deletion", Duration::from_secs(10), || {
                queue.inner.deleted_ids().len() == CHECK_MESSAGES
            })
            .await;
        }
        figure("intake_ms", millis(started.elapsed()));
        if removed > 0 {
            let gone = queues.get(&queue_url(0));
            file += 1;
            gone.push(format!(r#"{{"Records":[{}]}}"#, tenant_record(0, 0, file)));
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                (gone.inner.num_visible(), gone.inner.num_in_flight()),
                (1, 0),
                "a removed tenant's queue is still polled"
            );
        }
        figure("intake_ok", 1);
    });
}

// ---------------------------------------------------------------------------------------------
// The parent: runs the children, prints the figures.

/// One child's figures; with `heap`, a child that counts the live heap (its timings are not used).
fn run_child(tenants: usize, per_tenant: usize, reloads: bool, heap: bool) -> HashMap<String, f64> {
    let started = Instant::now();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--child",
            &tenants.to_string(),
            &per_tenant.to_string(),
            if reloads { "reloads" } else { "start-up" },
            if heap { "heap" } else { "plain" },
        ])
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        panic!(
            "child ({tenants} × {per_tenant}) failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut figures: HashMap<String, f64> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("FIG "))
        .map(|line| {
            let (name, value) = line.split_once(' ').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect();
    figures.insert("child_s".to_string(), started.elapsed().as_secs_f64());
    figures
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--child") {
        if args[at + 4] == "heap" {
            COUNTING.store(true, Ordering::SeqCst);
        }
        child(
            args[at + 1].parse().unwrap(),
            args[at + 2].parse().unwrap(),
            args[at + 3] == "reloads",
        );
        return;
    }
    let full = full_run();
    let tenants: usize = arg("--tenants")
        .map(|value| value.parse().expect("--tenants N"))
        .unwrap_or(if full { 1_000 } else { 20 });
    let per_tenant: usize = arg("--tables-per-tenant")
        .map(|value| value.parse().expect("--tables-per-tenant N"))
        .unwrap_or(if full { 10 } else { 5 });
    assert!(
        tenants >= 2 && per_tenant >= 1,
        "at least 2 tenants of 1 table"
    );
    let tables = tenants * per_tenant;

    // Timings and resident memory from plain children, the live heap from counting ones.
    let measure = |tenants: usize, per_tenant: usize, reloads: bool| {
        let mut figures = run_child(tenants, per_tenant, reloads, false);
        let counted = run_child(tenants, per_tenant, reloads, true);
        for (name, value) in counted {
            if name.ends_with("_heap_kib") {
                figures.insert(name, value);
            } else if name == "child_s" {
                figures.insert("heap_child_s".to_string(), value);
            }
        }
        figures
    };
    let one = measure(1, 1, false);
    let many = measure(tenants, per_tenant, true);
    assert_eq!(many["intake_ok"], 1.0);

    let mib = |kib: f64| kib / 1024.0;
    println!(
        "tenants at scale: one queue (in memory, long-polling like SQS) and one poller per tenant, \
         RocksDB state; each row a fresh process"
    );
    println!(
        "{:>7} {:>7} {:>15} {:>17} {:>16} {:>12} {:>13}",
        "tenants",
        "tables",
        "config_parse_ms",
        "pipeline_start_ms",
        "pollers_start_ms",
        "rss_idle_MiB",
        "heap_idle_MiB"
    );
    for (figures, tenants, tables) in [(&one, 1, 1), (&many, tenants, tables)] {
        println!(
            "{:>7} {:>7} {:>15.1} {:>17.1} {:>16.1} {:>12.1} {:>13.1}",
            tenants,
            tables,
            figures["config_parse_ms"],
            figures["pipeline_start_ms"],
            figures["pollers_start_ms"],
            mib(figures["idle_rss_kib"]),
            mib(figures["idle_heap_kib"]),
        );
    }
    println!(
        "config file {:.0} KiB; Control::start returned after {:.1} ms, all {tenants} pollers \
         were polling {:.1} ms after it began",
        many["config_bytes"] / 1024.0,
        many["control_start_ms"],
        many["pollers_start_ms"]
    );
    println!();
    println!(
        "memory each start-up step adds, MiB (rss: resident after malloc_trim; heap: Rust heap \
         allocated and not freed)"
    );
    println!(
        "{:>7} {:>7} {:>11} {:>13} {:>12} {:>12} {:>14} {:>13}",
        "tenants",
        "tables",
        "config_rss",
        "pipeline_rss",
        "pollers_rss",
        "config_heap",
        "pipeline_heap",
        "pollers_heap"
    );
    for (figures, tenants, tables) in [(&one, 1, 1), (&many, tenants, tables)] {
        println!(
            "{:>7} {:>7} {:>11.2} {:>13.2} {:>12.2} {:>12.2} {:>14.2} {:>13.2}",
            tenants,
            tables,
            mib(figures["config_rss_kib"]),
            mib(figures["pipeline_rss_kib"]),
            mib(figures["pollers_rss_kib"]),
            mib(figures["config_heap_kib"]),
            mib(figures["pipeline_heap_kib"]),
            mib(figures["pollers_heap_kib"]),
        );
    }
    // Per table and per tenant: the many-tenant row − the 1-table row.
    let extra = |name: &str| many[name] - one[name];
    let per_table =
        |step: &str, kind: &str| extra(&format!("{step}_{kind}_kib")) / (tables - 1) as f64;
    let per_tenant_kib = |kind: &str| extra(&format!("pollers_{kind}_kib")) / (tenants - 1) as f64;
    println!(
        "KiB/table (configuration with its tenant's share + pipeline: spec, handle, board \
         summary, routing; an idle table has no actor): rss {:.2} ({:.2} + {:.2}), heap {:.2} ({:.2} + {:.2}); \
         KiB/tenant (queue + 1 poller): rss {:.2}, heap {:.2}; whole process: {:.2} KiB rss per \
         table ({tables}-table row − 1-table row, / {} tables or / {} tenants)",
        per_table("config", "rss") + per_table("pipeline", "rss"),
        per_table("config", "rss"),
        per_table("pipeline", "rss"),
        per_table("config", "heap") + per_table("pipeline", "heap"),
        per_table("config", "heap"),
        per_table("pipeline", "heap"),
        per_tenant_kib("rss"),
        per_tenant_kib("heap"),
        extra("idle_rss_kib") / (tables - 1) as f64,
        tables - 1,
        tenants - 1
    );
    println!();
    let added = CHANGED_TENANTS * per_tenant;
    let removed = many["d_removed_tables"];
    println!(
        "reloads of the {tenants}-tenant configuration (reload: Control::reload, load + validate + \
         apply; applied: until the router routes by the new map; stall: the longest the actix \
         thread, its pollers and actors, stood still meanwhile); memory after each"
    );
    println!(
        "{:<42} {:>10} {:>14} {:>11} {:>9} {:>8} {:>9}  notes",
        "change", "reload_ms", "(min-max)", "applied_ms", "stall_ms", "rss_MiB", "heap_MiB"
    );
    let spread = |case: &str| {
        many.get(&format!("{case}_reload_min_ms"))
            .map(|min| format!("({min:.1}-{:.1})", many[&format!("{case}_reload_max_ms")]))
            .unwrap_or_default()
    };
    let rows = [
        (
            "(a) nothing changed (median of 5)".to_string(),
            "a",
            format!(
                "Config::load of the file alone: {:.1} ms (median)",
                many["a_load_ms"]
            ),
        ),
        (
            "(b) one table's threshold (median of 5)".to_string(),
            "b",
            String::new(),
        ),
        (
            format!("(c) +{added} tables in {CHANGED_TENANTS} new tenants"),
            "c",
            format!(
                "the {CHANGED_TENANTS} new pollers polled {:.1} ms after the reload began",
                many["c_polling_ms"]
            ),
        ),
        (
            format!(
                "(d) −{removed} tables ({} tenants removed)",
                CHANGED_TENANTS.min(tenants - 1)
            ),
            "d",
            format!(
                "their pollers had stopped {:.1} ms after the reload began",
                many["d_stopped_ms"]
            ),
        ),
    ];
    for (label, key, notes) in rows {
        println!(
            "{:<42} {:>10.1} {:>14} {:>11.1} {:>9.1} {:>8.1} {:>9.1}  {notes}",
            label,
            many[&format!("{key}_reload_ms")],
            spread(key),
            many[&format!("{key}_applied_ms")],
            many[&format!("{key}_stall_ms")],
            mib(many[&format!("{key}_rss_kib")]),
            mib(many[&format!("{key}_heap_kib")]),
        );
    }
    println!(
        "intake after the reloads: {CHECK_MESSAGES} messages on an added tenant's queue and \
         {CHECK_MESSAGES} on a kept tenant's were counted and deleted within {:.1} ms; a message \
         on a removed tenant's queue stayed there (its poller is gone)",
        many["intake_ms"]
    );
    println!(
        "(children took {:.1} s and {:.1} s; counting the heap, {:.1} s and {:.1} s)",
        one["child_s"], many["child_s"], one["heap_child_s"], many["heap_child_s"]
    );
}
