//! A table's accumulator handle: every message to the table's accumulator goes through it, and it
//! starts the accumulator when the table has something to do.
//!
//! An idle table has no live actor: an accumulator whose table has nothing pending, claimed or
//! due for `service.idle_table_seconds` stops, its state in the store and its summary on the
//! board; the next message for the table (an event's record, a run's start, an API call, the
//! [`Waker`] for its scheduled work) starts one again from the stored state.
//!
//! The single-writer rule holds across these lives: at most one live accumulator per table. The
//! slot's lock orders the three ways a slot changes — a start (empty → live, by whoever sends
//! first), a retirement (live → empty, asked by the accumulator itself) and a restart after a
//! panic (down → live, by the supervisor) — and every message sent through the handle is
//! counted under it. An accumulator retires only when it has taken every message sent to it and
//! has no work in flight, so nothing is ever dropped with its mailbox, and the next one starts
//! from a store its predecessor no longer writes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use actix::dev::ToEnvelope;
use actix::{Addr, Handler, MailboxError, Message};
use tracing::debug;

use crate::base::clock::Clock;
use crate::config::TableSpec;
use crate::intake::routing::TableIndex;
use crate::messages::Counted;
use crate::ops::metrics::Metrics;
use crate::runs::executor::CompactionPool;
use crate::store::StateStore;
use crate::table::accumulator::{Accumulator, FailureBackoff};
use crate::table::actor::TableAccumulatorActor;
use crate::table::waker::Waker;
use crate::table::workers::Workers;

/// What starts a table's accumulator: shared by every handle of a pipeline.
pub struct Starter {
    pub workers: Arc<Workers>,
    pub store: Arc<dyn StateStore>,
    pub clock: Arc<dyn Clock>,
    /// `None`: the accumulators count only.
    pub pool: Option<Addr<CompactionPool>>,
    pub backoff: FailureBackoff,
    /// `None`: accumulators never stop for idleness.
    pub idle_after: Option<Duration>,
    /// When the pipeline started: a table never read counts its periodic reconcile from here,
    /// however often its accumulator stopped and started since.
    pub started_millis: i64,
    pub waker: Option<Addr<Waker>>,
    pub metrics: Arc<Metrics>,
}

impl Starter {
    /// The accumulator of the table in `cell`, from its loaded state.
    fn actor(
        &self,
        cell: &Arc<SlotCell>,
        accumulator: Accumulator,
        active: bool,
    ) -> TableAccumulatorActor {
        TableAccumulatorActor::new(
            cell.index,
            accumulator,
            self.store.clone(),
            self.clock.clone(),
            self.pool.clone(),
            self.backoff,
        )
        .with_active(active)
        .started_at(self.started_millis)
        .in_slot(
            cell.clone(),
            self.idle_after,
            self.waker.clone(),
            self.metrics.accumulators_live.clone(),
        )
    }
}

/// One table's slot: its live accumulator (if any) and what starting one needs.
pub struct SlotCell {
    index: TableIndex,
    inner: Mutex<Slot>,
    /// Accumulators of the table handling messages now (started, not retired or stopped):
    /// never more than one; checked at every start, and by the tests.
    writers: AtomicU32,
    most_writers: AtomicU32,
    /// Whether the slot holds an accumulator's address (`Slot::addr` is `Some`), readable
    /// without the lock: the supervisor's scan of every slot passes over an empty one (an idle
    /// table) with one load instead of a lock. Written under the lock with `addr`.
    occupied: AtomicBool,
}

struct Slot {
    addr: Option<Addr<TableAccumulatorActor>>,
    /// The table's settings now (a reload updates them here too): what the next start uses.
    spec: Arc<TableSpec>,
    active: bool,
    /// Messages sent through the handle to the live accumulator; it may retire only once it
    /// has received as many.
    sent: u64,
}

impl SlotCell {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new(index: TableIndex, slot: Slot) -> SlotCell {
        let slot_addr_is_some = slot.addr.is_some();
        SlotCell {
            index,
            inner: Mutex::new(slot),
            writers: AtomicU32::new(0),
            most_writers: AtomicU32::new(0),
            occupied: AtomicBool::new(slot_addr_is_some),
        }
    }

    /// Puts `addr` in the slot (held locked by the caller), or empties it.
    fn occupy(&self, slot: &mut Slot, addr: Option<Addr<TableAccumulatorActor>>) {
        self.occupied.store(addr.is_some(), Ordering::SeqCst);
        slot.addr = addr;
    }

    /// An accumulator of the table started handling messages: `false` (and an error logged)
    /// if another one is still doing so, which the slot's protocol rules out.
    pub fn enter(&self, table: &str) -> bool {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_writers.fetch_max(writers, Ordering::SeqCst);
        if writers > 1 {
            tracing::error!(
                table,
                writers,
                "two accumulators of one table handle messages (a bug)"
            );
        }
        writers == 1
    }

    /// An accumulator of the table stopped without retiring (the end of the process).
    pub fn leave(&self) {
        let _ = self
            .writers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |writers| {
                writers.checked_sub(1)
            });
    }

    /// The accumulator at `addr`, having received `received` messages through the handle, asks
    /// to stop: granted — the slot is empty from now on, and the caller must stop — only when it
    /// is the slot's live accumulator and has received every message sent to it.
    pub fn retire(&self, addr: &Addr<TableAccumulatorActor>, received: u64) -> bool {
        let mut slot = self.lock();
        if slot.addr.as_ref() != Some(addr) || slot.sent != received {
            return false;
        }
        self.occupy(&mut slot, None);
        slot.sent = 0;
        self.leave();
        true
    }
}

/// The pipeline's tables ([`TableMap`](crate::table::map::TableMap)), each with the handle of its
/// accumulator.
pub type TableHandles = crate::table::map::TableMap<TableHandle>;

/// A table's accumulator, started when needed: what the table map holds for each slot.
#[derive(Clone)]
pub struct TableHandle {
    cell: Arc<SlotCell>,
    /// `None`: the accumulator was started elsewhere and is never started here (tests).
    starter: Option<Arc<Starter>>,
}

impl TableHandle {
    /// A table with no live accumulator: the first message starts one.
    pub fn idle(
        index: TableIndex,
        spec: Arc<TableSpec>,
        active: bool,
        starter: Arc<Starter>,
    ) -> TableHandle {
        TableHandle {
            cell: Arc::new(SlotCell::new(
                index,
                Slot {
                    addr: None,
                    spec,
                    active,
                    sent: 0,
                },
            )),
            starter: Some(starter),
        }
    }

    /// A table whose accumulator starts now from `accumulator` (its loaded state).
    pub fn started(
        index: TableIndex,
        accumulator: Accumulator,
        starter: Arc<Starter>,
    ) -> TableHandle {
        let handle = TableHandle::idle(index, accumulator.spec_arc(), true, starter.clone());
        let actor = starter.actor(&handle.cell, accumulator, true);
        let addr = starter.workers.start_accumulator(index, actor);
        handle.cell.occupy(&mut handle.cell.lock(), Some(addr));
        handle
    }

    /// An accumulator started by the caller, never stopped or started here (tests).
    pub fn fixed(
        index: TableIndex,
        spec: Arc<TableSpec>,
        addr: Addr<TableAccumulatorActor>,
    ) -> TableHandle {
        TableHandle {
            cell: Arc::new(SlotCell::new(
                index,
                Slot {
                    addr: Some(addr),
                    spec,
                    active: true,
                    sent: 0,
                },
            )),
            starter: None,
        }
    }

    /// The live accumulator, started now if the table has none (it reads the stored state as it
    /// starts); `None` only for an accumulator started elsewhere ([`TableHandle::fixed`]).
    fn live(&self, slot: &mut Slot) -> Option<Addr<TableAccumulatorActor>> {
        if let Some(addr) = &slot.addr {
            return Some(addr.clone());
        }
        let starter = self.starter.as_ref()?;
        // It reads the table's state on its own worker thread as it starts: the sender (the
        // router, the pool, the API) does not wait for the read. Restarted: a commit of its
        // predecessor's changed `seen` entries after the router looked the next group's keys up.
        let actor = starter
            .actor(
                &self.cell,
                Accumulator::unloaded(slot.spec.clone()),
                slot.active,
            )
            .loading_on_start()
            .restarted();
        let addr = starter.workers.start_accumulator(self.cell.index, actor);
        self.cell.occupy(slot, Some(addr.clone()));
        slot.sent = 0;
        Some(addr)
    }

    /// Sends `message` to the table's accumulator (starting it if the table has none) and
    /// answers with its reply.
    pub fn send<M>(&self, message: M) -> impl Future<Output = Result<M::Result, MailboxError>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TableAccumulatorActor: Handler<Counted<M>>,
        <TableAccumulatorActor as actix::Actor>::Context:
            ToEnvelope<TableAccumulatorActor, Counted<M>>,
    {
        let request = {
            let mut slot = self.cell.lock();
            self.live(&mut slot).map(|addr| {
                slot.sent += 1;
                addr.send(Counted(message))
            })
        };
        async move {
            match request {
                Some(request) => request.await,
                None => Err(MailboxError::Closed),
            }
        }
    }

    /// Sends `message` to the table's live accumulator and answers with its reply; `None` when
    /// the table has none (nothing is started for it).
    pub fn send_if_live<M>(
        &self,
        message: M,
    ) -> Option<impl Future<Output = Result<M::Result, MailboxError>>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TableAccumulatorActor: Handler<Counted<M>>,
        <TableAccumulatorActor as actix::Actor>::Context:
            ToEnvelope<TableAccumulatorActor, Counted<M>>,
    {
        let mut slot = self.cell.lock();
        let addr = slot.addr.clone()?;
        slot.sent += 1;
        Some(addr.send(Counted(message)))
    }

    /// Sends `message` to the table's accumulator (starting it if the table has none), without
    /// waiting for a reply.
    pub fn do_send<M>(&self, message: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TableAccumulatorActor: Handler<Counted<M>>,
        <TableAccumulatorActor as actix::Actor>::Context:
            ToEnvelope<TableAccumulatorActor, Counted<M>>,
    {
        let mut slot = self.cell.lock();
        if let Some(addr) = self.live(&mut slot) {
            slot.sent += 1;
            addr.do_send(Counted(message));
        }
    }

    /// Whether the table's accumulator is down: it stopped without retiring (a panic), and the
    /// supervisor has not restarted it yet.
    pub fn is_down(&self) -> bool {
        // An empty slot (an idle table) is not down; the supervisor visits every slot.
        if !self.cell.occupied.load(Ordering::SeqCst) {
            return false;
        }
        self.cell
            .lock()
            .addr
            .as_ref()
            .is_some_and(|addr| !addr.connected())
    }

    /// Whether messages reach the table's accumulator (a live one, or one started for them).
    pub fn connected(&self) -> bool {
        !self.is_down()
    }

    /// Whether the table has a live accumulator now.
    pub fn is_live(&self) -> bool {
        self.cell.lock().addr.is_some()
    }

    /// The supervisor's restart of a down accumulator, from `accumulator` (the stored state):
    /// `false` when the slot is no longer down (it was started meanwhile).
    pub fn restart(&self, mut accumulator: Accumulator) -> bool {
        let Some(starter) = &self.starter else {
            return false;
        };
        let mut slot = self.cell.lock();
        if slot.addr.as_ref().is_none_or(|addr| addr.connected()) {
            return false;
        }
        accumulator.set_spec(slot.spec.clone());
        // The accumulator that panicked handles nothing more (its mailbox is closed).
        self.cell.writers.store(0, Ordering::SeqCst);
        let actor = starter
            .actor(&self.cell, accumulator, slot.active)
            .restarted();
        let addr = starter.workers.start_accumulator(self.cell.index, actor);
        self.cell.occupy(&mut slot, Some(addr));
        slot.sent = 0;
        true
    }

    /// A reload: the table's settings and whether the configuration has it. A live accumulator
    /// hears it now; the next one to start reads it from here.
    pub fn update(&self, spec: Arc<TableSpec>, active: bool) {
        let mut slot = self.cell.lock();
        slot.spec = spec.clone();
        slot.active = active;
        if let Some(addr) = slot.addr.clone() {
            slot.sent += 1;
            addr.do_send(Counted(crate::messages::UpdateSpec { spec, active }));
        }
    }

    /// The most accumulators of the table that handled messages at once (1 unless a bug).
    pub fn most_writers(&self) -> u32 {
        self.cell.most_writers.load(Ordering::SeqCst)
    }

    /// The table's settings when it has no live accumulator (its status is read from the store
    /// then, without starting one).
    pub fn resting_spec(&self) -> Option<Arc<TableSpec>> {
        let slot = self.cell.lock();
        slot.addr.is_none().then(|| slot.spec.clone())
    }
}

/// Logs a retirement (at debug level: with many tables they are many).
pub(crate) fn log_retired(table: &str, wake_at: Option<i64>) {
    debug!(table, wake_at = ?wake_at.map(crate::base::clock::format_rfc3339), "table idle: its accumulator stops until the table has something to do");
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use crate::base::clock::FakeClock;
    use crate::config::Config;
    use crate::engine::spark::result::ResultSet;
    use crate::engine::spark::runner::{EngineError, EngineOutput, SparkJob, SparkRunner};
    use crate::engine::spark::sql::StatementKind;
    use crate::intake::router::tests::message;
    use crate::messages::{GetPoolStatus, GetStatus, Ingest, Tick, WaitIdle};
    use crate::ops::metrics::Metrics;
    use crate::runs::settings::CompactionSettings;
    use crate::service::{start_pipeline_idling, Compaction, Pipeline};
    use crate::store::MemoryStore;
    use crate::testing::stand_in_runner::rewrite_output;

    const NOW: i64 = 1_714_564_800_000;
    const IDLE: Duration = Duration::from_millis(40);

    fn config(extra: &str, tables: &[&str]) -> Arc<Config> {
        let mut text = format!(
            "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 2\n{extra}\n[spark]\nretry_attempts = 1\n"
        );
        for table in tables {
            text.push_str(&format!(
                "[[tables]]\ntable = \"n.{table}\"\nbucket = \"lake\"\nprefix = \"{table}/\"\n"
            ));
        }
        Arc::new(Config::from_toml_str(&text).unwrap())
    }

    /// Succeeds at once: a rewrite of two files, or a read that finds no small file.
    struct Recording(Arc<Mutex<Vec<String>>>);

    #[async_trait::async_trait]
    impl SparkRunner for Recording {
        async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
            let rewrite = job
                .statements
                .iter()
                .any(|statement| statement.sql.contains("rewrite_data_files"));
            self.0
                .lock()
                .unwrap()
                .push(if rewrite { "rewrite" } else { "read" }.to_string());
            Ok(if rewrite {
                rewrite_output(2)
            } else {
                EngineOutput::completed(vec![(StatementKind::Truth, ResultSet::from_text("row"))])
            })
        }

        fn engine(&self) -> String {
            "stand-in".to_string()
        }
    }

    /// A compacting pipeline whose accumulators stop after [`IDLE`]; what its runs were
    /// (`rewrite`, `read`) is recorded.
    fn pipeline(
        store: Arc<MemoryStore>,
        clock: Arc<FakeClock>,
        config: Arc<Config>,
    ) -> (Pipeline, Arc<Mutex<Vec<String>>>) {
        let runs: Arc<Mutex<Vec<String>>> = Arc::default();
        let pipeline = start_pipeline_idling(
            config.table_specs(),
            store,
            clock,
            Compaction::spark(
                CompactionSettings::from_config(config),
                Arc::new(Recording(runs.clone())),
                true,
            ),
            Arc::new(Metrics::default()),
            None,
            Some(IDLE),
        )
        .unwrap();
        (pipeline, runs)
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "waited for {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Whether the table's accumulator stops within 20 s.
    async fn stops(handle: &super::TableHandle) -> bool {
        let start = Instant::now();
        while handle.is_live() {
            if start.elapsed() > Duration::from_secs(20) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    fn live(pipeline: &Pipeline) -> Vec<bool> {
        let map = pipeline.map();
        (0..map.len())
            .map(|table| map.accumulator(table).is_live())
            .collect()
    }

    #[actix::test]
    async fn an_idle_table_keeps_no_accumulator_until_it_has_something_to_do() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(FakeClock::new(NOW));
        let (pipeline, triggers) = pipeline(store, clock, config("", &["a", "b"]));
        assert_eq!(live(&pipeline), [false, false], "nothing to do at start");
        assert_eq!(pipeline.metrics.accumulators_live.get(), 0);
        // A status is read from the store: it starts nothing.
        let status = pipeline.table_status(0).await.unwrap();
        assert_eq!((status.table.as_str(), status.pending_files), ("n.a", 0));
        assert_eq!(live(&pipeline), [false, false]);

        // A record starts the table's accumulator; a pending file keeps it.
        let ingest = |id: &str, key: &str| {
            pipeline.router.send(Ingest {
                messages: vec![message(id, &[key])],
            })
        };
        assert_eq!(
            ingest("1", "a/1.parquet")
                .await
                .unwrap()
                .unwrap()
                .summary
                .counted,
            1
        );
        assert_eq!(live(&pipeline), [true, false]);
        tokio::time::sleep(IDLE * 3).await;
        assert_eq!(live(&pipeline), [true, false], "a pending file is work");

        // The second file makes it due: it runs, settles, and — idle again — stops.
        ingest("2", "a/2.parquet").await.unwrap().unwrap();
        wait_for("the run and the stop", || live(&pipeline) == [false, false]).await;
        assert_eq!(*triggers.lock().unwrap(), ["rewrite"]);
        assert_eq!(pipeline.metrics.accumulators_live.get(), 0);
        let status = pipeline.table_status(0).await.unwrap();
        assert_eq!((status.pending_files, status.compacted_files), (0, 2));
        assert_eq!(
            pipeline.summaries(&pipeline.map())[0].1.pending_files,
            0,
            "the board keeps the last summary"
        );

        // Its state is the stored one when it starts again: a redelivered record stays counted
        // once, a new one counts.
        let again = ingest("1", "a/1.parquet").await.unwrap().unwrap();
        assert_eq!(again.summary.ignored.duplicate, 1);
        ingest("3", "a/3.parquet").await.unwrap().unwrap();
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        assert_eq!((status.pending_files, status.compacted_files), (1, 2));
        assert_eq!(pipeline.map().accumulator(0).most_writers(), 1);
    }

    #[actix::test]
    async fn the_waker_starts_an_idle_table_when_its_scheduled_work_is_due() {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(FakeClock::new(NOW));
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"n.a\"\nbucket = \"lake\"\nprefix = \"a/\"\nreconcile_every_hours = 1\n",
        )
        .unwrap();
        let (pipeline, triggers) = pipeline(store, clock.clone(), Arc::new(config));
        assert_eq!(live(&pipeline), [false]);
        assert_eq!(
            pipeline
                .waker
                .send(crate::table::waker::Waiting)
                .await
                .unwrap(),
            1,
            "its first reconcile, an hour after the start"
        );
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(triggers.lock().unwrap().is_empty(), "not yet");
        clock.advance(Duration::from_secs(3_601));
        wait_for("the scheduled reconcile", || {
            !triggers.lock().unwrap().is_empty()
        })
        .await;
        assert_eq!(*triggers.lock().unwrap(), ["read"]);
        wait_for("the stop after it", || live(&pipeline) == [false]).await;
        // The next one is an hour after this read.
        assert_eq!(
            pipeline
                .waker
                .send(crate::table::waker::Waiting)
                .await
                .unwrap(),
            1
        );
    }

    /// The single-writer rule across lazy starts, idle stops, runs, reloads that remove and
    /// bring back a table, status reads and a panic: in random interleavings (seeded), no table
    /// ever has two accumulators handling messages, no message is lost (every batch is
    /// answered, every counted file is pending or compacted, none twice), and at the end every
    /// idle table has stopped.
    #[actix::test]
    async fn one_writer_per_table_through_starts_stops_runs_reloads_and_restarts() {
        for seed in 0..12u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let store = Arc::new(MemoryStore::new());
            let clock = Arc::new(FakeClock::new(NOW));
            let both = config("", &["a", "b"]);
            let only_a = config("", &["a"]);
            let (pipeline, _) = pipeline(store, clock, both.clone());
            let mut counted = [0u64; 2];
            let mut b_configured = true;
            for step in 0..80 {
                let table = rng.usize(0..2);
                let name = ["a", "b"][table];
                match rng.u32(0..10) {
                    0..=3 => {
                        let key = format!("{name}/{seed}-{step}.parquet");
                        let report = pipeline
                            .router
                            .send(Ingest {
                                messages: vec![message(&format!("{step}"), &[&key])],
                            })
                            .await
                            .unwrap()
                            .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
                        counted[table] += report.summary.counted;
                        if table == 1 {
                            assert_eq!(report.summary.counted, u64::from(b_configured));
                        }
                    }
                    4 => {
                        pipeline.table_status(table).await.unwrap();
                    }
                    5 => {
                        pipeline
                            .map()
                            .accumulator(table)
                            .send(GetStatus)
                            .await
                            .unwrap();
                    }
                    6 => pipeline.map().accumulator(table).do_send(Tick),
                    7 => {
                        let next = if b_configured { &only_a } else { &both };
                        pipeline.apply(next).await.unwrap();
                        b_configured = !b_configured;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(rng.u64(0..60))).await,
                }
            }
            pipeline.pool.send(WaitIdle).await.unwrap();
            // A panic, and the supervisor's restart from the stored state.
            pipeline
                .map()
                .accumulator(0)
                .do_send(crate::table::actor::Crash);
            wait_for("the restart", || {
                pipeline.metrics.accumulator_restarts.get() == 1
            })
            .await;
            pipeline.pool.send(WaitIdle).await.unwrap();
            assert!(pipeline
                .pool
                .send(GetPoolStatus)
                .await
                .unwrap()
                .running
                .is_empty());
            for (table, counted) in counted.iter().enumerate() {
                let handle = pipeline.map().accumulator(table);
                let status = pipeline.table_status(table).await.unwrap();
                assert_eq!(
                    status.pending_files + status.compacted_files,
                    *counted,
                    "seed {seed} table {table}: {status:?}"
                );
                if status.pending_files == 0 {
                    if !stops(&handle).await {
                        let sent = handle.cell.lock().sent;
                        let flags = handle.send(crate::table::actor::Idleness).await;
                        panic!(
                            "seed {seed}: idle table {table} did not stop ({sent} sent): {flags:?}"
                        );
                    }
                } else {
                    assert!(handle.is_live(), "a pending file keeps the accumulator");
                }
                assert_eq!(handle.most_writers(), 1, "seed {seed} table {table}");
            }
        }
    }
}
