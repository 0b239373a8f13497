use super::*;
use crate::base::clock::FakeClock;
use crate::config::Config;
use crate::engine::spark::runner::{EngineError, EngineOutput, SparkJob, SparkRunner};
use crate::intake::batch::InboundMessage;
use crate::messages::{GetStatus, Ingest};
use crate::service::{start_pipeline, Compaction, Pipeline};
use crate::store::{MemoryStore, StateStore};
use crate::testing::stand_in_runner::StandInRunner;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// A runner whose runs end only when the test says so; counts how many were started, and
/// for which tables.
#[derive(Default)]
struct Gated {
    started: AtomicU32,
    tables: Mutex<Vec<String>>,
    release: Mutex<Vec<oneshot::Sender<EngineOutput>>>,
}

#[async_trait]
impl SparkRunner for Gated {
    async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
        let (sender, receiver) = oneshot::channel();
        self.release.lock().unwrap().push(sender);
        self.tables.lock().unwrap().push(job.table.clone());
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(receiver.await.unwrap_or_default())
    }
    fn engine(&self) -> String {
        "test".to_string()
    }
}

fn body(keys: std::ops::Range<u32>) -> String {
    let records: Vec<String> = keys
            .map(|key| format!(r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"t/data/{key}.parquet","size":10}}}}}}"#))
            .collect();
    format!(r#"{{"Records":[{}]}}"#, records.join(","))
}

async fn ingest(pipeline: &Pipeline, keys: std::ops::Range<u32>) {
    pipeline
        .router
        .send(Ingest {
            messages: vec![InboundMessage {
                id: "m".to_string(),
                body: body(keys),
            }],
        })
        .await
        .unwrap()
        .unwrap();
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn tenant_config(last_tenant: &str) -> Arc<Config> {
    let mut text = "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 1\n[spark]\nretry_attempts = 1\nmax_concurrent = 1\n[tenants.a]\n[tenants.b]\nweight = 3\n"
            .to_string();
    for (table, tenant) in [("n.t1", "a"), ("n.t2", "a"), ("n.t3", last_tenant)] {
        let prefix = table.trim_start_matches("n.");
        text.push_str(&format!(
                "[[tables]]\ntable = \"{table}\"\nbucket = \"lake\"\nprefix = \"{prefix}/\"\ntenant = \"{tenant}\"\n"
            ));
    }
    Arc::new(Config::from_toml_str(&text).unwrap())
}

#[actix::test]
async fn a_reload_reorders_the_line_and_drops_removed_tables() {
    let runner = Arc::new(Gated::default());
    let config = tenant_config("a");
    let pipeline = pipeline_of(config, runner.clone());
    let record = |table: &str| {
        format!(
            r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{table}/data/f.parquet","size":10}}}}}}"#
        )
    };
    for (asked, table) in ["t1", "t2", "t3"].into_iter().enumerate() {
        pipeline
            .router
            .send(Ingest {
                messages: vec![InboundMessage {
                    id: table.to_string(),
                    body: format!(r#"{{"Records":[{}]}}"#, record(table)),
                }],
            })
            .await
            .unwrap()
            .unwrap();
        // The accumulators run on different worker threads: each table's request reaches
        // the pool before the next table becomes due, so the line's order is the tables'.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
            if pool.running.len() + pool.waiting.len() > asked {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{table} asks for a run"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    wait_for("t1's run", || runner.tables.lock().unwrap().len() == 1).await;
    let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
    assert_eq!(pool.waiting, [1, 2], "t2 then t3, both tenant a's");

    // t3 moves to tenant b (weight 3): it no longer waits behind t2 in a's line.
    let report = pipeline.apply(&tenant_config("b")).await.unwrap();
    assert_eq!(report.changed, ["n.t3"]);
    let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
    assert_eq!(
        pool.waiting,
        [2, 1],
        "b, three times a's weight, goes first"
    );

    // t2 leaves the configuration: out of the line, and its state stays.
    let mut without_t2 = (*tenant_config("b")).clone();
    without_t2.tables.retain(|table| table.table != "n.t2");
    let report = pipeline.apply(&Arc::new(without_t2)).await.unwrap();
    assert_eq!(report.removed, ["n.t2"]);
    let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
    assert_eq!(pool.waiting, [2]);
    assert_eq!(
        pipeline
            .accumulator(1)
            .send(GetStatus)
            .await
            .unwrap()
            .pending_files,
        1
    );

    let done = || {
        EngineOutput::rewrite_printed("rewritten_data_files_count\tadded_data_files_count\n1\t1\n")
    };
    let _ = runner.release.lock().unwrap().remove(0).send(done());
    wait_for("t3's run", || runner.tables.lock().unwrap().len() == 2).await;
    let _ = runner.release.lock().unwrap().remove(0).send(done());
    pipeline.pool.send(WaitIdle).await.unwrap();
    assert_eq!(
        *runner.tables.lock().unwrap(),
        ["n.t1", "n.t3"],
        "t2 never ran"
    );
}

/// Issue 15 as a new user tried it: tenants `a` (5 tables) and `b` (1), one slot, all due at
/// once. `a`'s first run takes the slot; `b`'s table runs next, not after `a`'s second.
#[actix::test]
async fn with_one_slot_the_other_tenants_table_runs_second() {
    let mut text = "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 1\n[spark]\nretry_attempts = 1\nmax_concurrent = 1\n[tenants.a]\n[tenants.b]\n"
            .to_string();
    let tables = [
        ("a1", "a"),
        ("a2", "a"),
        ("a3", "a"),
        ("a4", "a"),
        ("a5", "a"),
        ("b", "b"),
    ];
    for (prefix, tenant) in tables {
        text.push_str(&format!(
                "[[tables]]\ntable = \"n.{prefix}\"\nbucket = \"lake\"\nprefix = \"{prefix}/\"\ntenant = \"{tenant}\"\n"
            ));
    }
    let config = Arc::new(Config::from_toml_str(&text).unwrap());
    let runner = Arc::new(Gated::default());
    let pipeline = pipeline_of(config, runner.clone());
    let records: Vec<String> = tables
            .iter()
            .map(|(prefix, _)| format!(r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{prefix}/data/f.parquet","size":10}}}}}}"#))
            .collect();
    pipeline
        .router
        .send(Ingest {
            messages: vec![InboundMessage {
                id: "m".to_string(),
                body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
            }],
        })
        .await
        .unwrap()
        .unwrap();
    let done = || {
        EngineOutput::rewrite_printed("rewritten_data_files_count\tadded_data_files_count\n1\t1\n")
    };
    for started in 1..=tables.len() {
        wait_for("the next run", || {
            runner.tables.lock().unwrap().len() == started
        })
        .await;
        let pool = pipeline.pool.send(GetPoolStatus).await.unwrap();
        assert_eq!(pool.running.len(), 1, "one slot");
        let _ = runner.release.lock().unwrap().remove(0).send(done());
    }
    pipeline.pool.send(WaitIdle).await.unwrap();
    let mut order = runner.tables.lock().unwrap().clone();
    // The tables became due in the same settle, on different worker threads: which of `a`'s
    // asked first is up to the threads; `b` runs second either way.
    assert_eq!(order[1], "n.b", "{order:?}");
    order.remove(1);
    order.sort();
    assert_eq!(order, ["n.a1", "n.a2", "n.a3", "n.a4", "n.a5"]);
}

fn pipeline(runner: Arc<dyn SparkRunner>) -> Pipeline {
    let config = Config::from_toml_str(
            "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 3\n[spark]\nretry_attempts = 1\n[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\n",
        )
        .unwrap();
    pipeline_of(Arc::new(config), runner)
}

/// A compacting pipeline of `config` on a memory store, its runs going to `runner`.
fn pipeline_of(config: Arc<Config>, runner: Arc<dyn SparkRunner>) -> Pipeline {
    pipeline_on(Arc::new(MemoryStore::new()), config, runner)
}

/// The same on `store`, whose tables' state is loaded at start.
fn pipeline_on(
    store: Arc<MemoryStore>,
    config: Arc<Config>,
    runner: Arc<dyn SparkRunner>,
) -> Pipeline {
    start_pipeline(
        config.table_specs(),
        store,
        Arc::new(FakeClock::new(1_714_564_800_000)),
        Compaction::spark(CompactionSettings::from_config(config), runner, true),
        Arc::new(Metrics::default()),
        None,
    )
    .unwrap()
}

/// A `days(ts)` table as its last run read it.
fn daily_table_state() -> crate::model::state::TableState {
    crate::model::state::TableState {
        partition_spec: Some(vec![crate::table::partitions::PartitionField {
            name: "ts_day".to_string(),
            source: "ts".to_string(),
            transform: crate::table::partitions::Transform::Day,
            source_type: Some("timestamp".to_string()),
        }]),
        table_order: Some(crate::model::strategy::TableOrder::Unsorted),
        ..Default::default()
    }
}

fn two_file_config() -> Arc<Config> {
    Arc::new(
            Config::from_toml_str(
                "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 2\n[spark]\nretry_attempts = 1\n[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\n",
            )
            .unwrap(),
        )
}

/// Issue 31: two objects under `ts_day=%2B262142-12-31/` (chrono's last day) of a `days(ts)`
/// table. Building the run's filter added a day to it and panicked in the executor pool:
/// `/healthz` 500, no table compacted again. The day cannot be expressed: the run goes over
/// the whole table, and the pool serves on.
#[actix::test]
async fn a_day_past_the_last_one_widens_the_run_instead_of_stopping_the_pool() {
    let store = Arc::new(MemoryStore::new());
    store
        .commit(vec![crate::store::Op::PutTable {
            table: "n.t".to_string(),
            state: daily_table_state(),
        }])
        .unwrap();
    let statements: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = statements.clone();
    let runner = Arc::new(StandInRunner {
        on_start: Box::new(move |job: &SparkJob| {
            seen.lock()
                .unwrap()
                .extend(job.statements.iter().map(|statement| statement.sql.clone()))
        }),
        ..StandInRunner::succeeding(4)
    });
    let pipeline = pipeline_on(store, two_file_config(), runner);
    let record = |key: &str| {
        format!(
            r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{key}","size":10}}}}}}"#
        )
    };
    let keys = [
        "t/data/ts_day%3D%252B262142-12-31/a.parquet",
        "t/data/ts_day%3D%252B262142-12-31/b.parquet",
        "t/data/ts_day%3D2024-05-01/c.parquet",
        "t/data/ts_day%3D2024-05-01/d.parquet",
    ];
    let records: Vec<String> = keys.iter().map(|key| record(key)).collect();
    pipeline
        .router
        .send(Ingest {
            messages: vec![InboundMessage {
                id: "m".to_string(),
                body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
            }],
        })
        .await
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = pipeline.accumulator(0).send(GetStatus).await;
        if let Ok(status) = status {
            if status.last_run.is_some() {
                assert_eq!(status.last_run.unwrap().outcome, "success");
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never ended; down: {:?}",
            pipeline.singletons_down()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        pipeline.singletons_down().is_empty(),
        "{:?}",
        pipeline.singletons_down()
    );
    let statements = statements.lock().unwrap().clone();
    let rewrite = statements
        .iter()
        .find(|statement| statement.contains("rewrite_data_files"))
        .unwrap();
    assert!(!rewrite.contains("where =>"), "the whole table: {rewrite}");
    pipeline.pool.send(WaitIdle).await.unwrap();
}

/// Issue 31, item 3: 5,000 identity partitions of two small files each, through intake,
/// the policy and the pool. Its partitions made one filter no command line took; they now
/// reach the engine in a few `rewrite_data_files` calls, each partition in one of them.
#[actix::test]
async fn five_thousand_partitions_of_two_files_each_run_in_a_few_calls() {
    let store = Arc::new(MemoryStore::new());
    store
        .commit(vec![crate::store::Op::PutTable {
            table: "n.t".to_string(),
            state: crate::model::state::TableState {
                partition_spec: Some(vec![crate::table::partitions::PartitionField {
                    name: "customer".to_string(),
                    source: "customer".to_string(),
                    transform: crate::table::partitions::Transform::Identity,
                    source_type: Some("string".to_string()),
                }]),
                table_order: Some(crate::model::strategy::TableOrder::Unsorted),
                ..Default::default()
            },
        }])
        .unwrap();
    let statements: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = statements.clone();
    let runner = Arc::new(StandInRunner {
        on_start: Box::new(move |job: &SparkJob| {
            seen.lock()
                .unwrap()
                .extend(job.statements.iter().map(|statement| statement.sql.clone()))
        }),
        ..StandInRunner::succeeding(10_000)
    });
    let pipeline = pipeline_on(store, two_file_config(), runner);
    let record = |customer: u32, file: u32| {
        format!(
            r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"t/data/customer%3Dcustomer-{customer:06}/{file}.parquet","size":10}}}}}}"#
        )
    };
    let messages: Vec<InboundMessage> = (0..10u32)
        .map(|message| {
            let records: Vec<String> = (message * 500..(message + 1) * 500)
                .flat_map(|customer| [record(customer, 0), record(customer, 1)])
                .collect();
            InboundMessage {
                id: format!("m{message}"),
                body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
            }
        })
        .collect();
    pipeline
        .router
        .send(Ingest { messages })
        .await
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Ok(status) = pipeline.accumulator(0).send(GetStatus).await {
            if status.last_run.is_some() {
                break status;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never ended; down: {:?}",
            pipeline.singletons_down()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.last_run.unwrap().outcome, "success");
    let statements = statements.lock().unwrap().clone();
    let rewrites: Vec<&String> = statements
        .iter()
        .filter(|statement| statement.contains("rewrite_data_files"))
        .collect();
    assert!(
        (2..=crate::engine::spark::sql::MAX_REWRITE_CALLS).contains(&rewrites.len()),
        "{} calls",
        rewrites.len()
    );
    let mut named = std::collections::HashMap::<&str, usize>::new();
    for rewrite in &rewrites {
        for (at, _) in rewrite.match_indices("customer-") {
            *named.entry(&rewrite[at..at + 15]).or_default() += 1;
        }
    }
    assert_eq!(named.len(), 5_000);
    assert!(named.values().all(|count| *count == 1));
    pipeline.pool.send(WaitIdle).await.unwrap();
}

/// The same claim stored by a process that stopped mid-run: recovered at start, it panicked
/// again at every start. It is settled now, and the pool serves on.
#[actix::test]
async fn a_stored_claim_with_a_day_past_the_last_one_is_recovered_and_settled() {
    let store = Arc::new(MemoryStore::new());
    let partition = "ts_day=%2B262142-12-31".to_string();
    let file = |name: &str| crate::model::state::FileEntry {
        bucket: "lake".to_string(),
        key: format!("t/data/{partition}/{name}.parquet"),
        size: 10,
        event_millis: 1_714_564_700_000,
        partition: partition.clone(),
        source: crate::model::state::FileSource::Events,
    };
    let claim = crate::model::state::Claim {
        run_id: "run-before-the-restart".to_string(),
        trigger: crate::model::task::Trigger::Files,
        started_millis: 1_714_564_790_000,
        upto_seq: 2,
        counts: crate::model::state::PendingCounts::default(),
        partitions: BTreeMap::new(),
        task: crate::model::task::Task::Rewrite(crate::model::task::Rewrite {
            partitions: vec![partition.clone()],
            min_input_files: 2,
            ..crate::model::task::Rewrite::whole_table()
        }),
        nonce: String::new(),
    };
    store
        .commit(vec![
            crate::store::Op::PutTable {
                table: "n.t".to_string(),
                state: crate::model::state::TableState {
                    next_file_seq: 2,
                    claim: Some(claim),
                    ..daily_table_state()
                },
            },
            crate::store::Op::PutFile {
                table: "n.t".to_string(),
                seq: 0,
                entry: file("a"),
            },
            crate::store::Op::PutFile {
                table: "n.t".to_string(),
                seq: 1,
                entry: file("b"),
            },
        ])
        .unwrap();
    let runner = Arc::new(Gated::default());
    let pipeline = pipeline_on(store, two_file_config(), runner.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Ok(status) = pipeline.accumulator(0).send(GetStatus).await {
            if status.last_run.is_some() {
                break status;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the recovered run never settled; down: {:?}",
            pipeline.singletons_down()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        pipeline.singletons_down().is_empty(),
        "{:?}",
        pipeline.singletons_down()
    );
    assert_eq!(
        status.last_run.unwrap().failure_class,
        Some("other"),
        "interrupted by the restart, no trace left: settled as any such run"
    );
    assert_eq!(status.pending_files, 2, "its files are pending again");
}

/// A panic while preparing one table's run (a bug something in its claim set off) or while
/// reading its outcome fails that run as `invalid_input`; the pool serves the other tables,
/// `/healthz` stays ok, and the failing table's next run names no partitions.
#[cfg(feature = "failpoints")]
#[actix::test]
async fn a_panic_preparing_or_finishing_a_run_fails_that_run_only() {
    let mut text = "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 1\n[spark]\nretry_attempts = 1\nmax_concurrent = 1\nfailure_backoff_initial_seconds = 1\n".to_string();
    for table in ["prepare_panics", "finish_panics", "healthy"] {
        text.push_str(&format!(
            "[[tables]]\ntable = \"n.{table}\"\nbucket = \"lake\"\nprefix = \"{table}/\"\n"
        ));
    }
    let config = Arc::new(Config::from_toml_str(&text).unwrap());
    let started: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = started.clone();
    let runner = Arc::new(StandInRunner {
        on_start: Box::new(move |job: &SparkJob| seen.lock().unwrap().push(job.table.clone())),
        ..StandInRunner::succeeding(1)
    });
    fail::cfg("executor.prepare_panic", "return(n.prepare_panics)").unwrap();
    fail::cfg("executor.finish_panic", "return(n.finish_panics)").unwrap();
    let pipeline = pipeline_of(config, runner);
    let record = |key: &str| {
        format!(
            r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{key}","size":10}}}}}}"#
        )
    };
    let records: Vec<String> = ["prepare_panics", "finish_panics", "healthy"]
        .iter()
        .map(|table| record(&format!("{table}/data/d%3D1/f.parquet")))
        .collect();
    pipeline
        .router
        .send(Ingest {
            messages: vec![InboundMessage {
                id: "m".to_string(),
                body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
            }],
        })
        .await
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut classes = Vec::new();
    loop {
        classes.clear();
        for table in 0..3 {
            let status = pipeline.accumulator(table).send(GetStatus).await.unwrap();
            classes.push(status.last_run.map(|run| (run.outcome, run.failure_class)));
        }
        if classes.iter().all(Option::is_some) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{classes:?}; down: {:?}",
            pipeline.singletons_down()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fail::remove("executor.finish_panic");
    assert_eq!(
        classes,
        [
            Some(("failure", Some("invalid_input"))),
            Some(("failure", Some("invalid_input"))),
            Some(("success", None)),
        ]
    );
    assert!(
        pipeline.singletons_down().is_empty(),
        "{:?}",
        pipeline.singletons_down()
    );
    let started = started.lock().unwrap().clone();
    assert!(
        !started.contains(&"n.prepare_panics".to_string()),
        "{started:?}"
    );
    fail::remove("executor.prepare_panic");
    pipeline.pool.send(WaitIdle).await.unwrap();
}

#[actix::test]
async fn one_run_per_table_and_intake_goes_on_while_it_runs() {
    let runner = Arc::new(Gated::default());
    let pipeline = pipeline(runner.clone());
    ingest(&pipeline, 0..3).await;
    wait_for("the run to start", || {
        runner.started.load(Ordering::SeqCst) == 1
    })
    .await;
    // More crossings while the run is in flight: counted at once, no second run.
    ingest(&pipeline, 3..6).await;
    ingest(&pipeline, 6..9).await;
    let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
    assert_eq!(
        status.pending_files, 6,
        "files landing during the run are counted and stay pending"
    );
    assert_eq!(status.in_flight_run.as_ref().unwrap().claimed_files, 3);
    assert_eq!(
        runner.started.load(Ordering::SeqCst),
        1,
        "exactly one run for the table"
    );

    let done =
        EngineOutput::rewrite_printed("rewritten_data_files_count\tadded_data_files_count\n3\t1\n");
    runner
        .release
        .lock()
        .unwrap()
        .remove(0)
        .send(done.clone())
        .unwrap();
    // The 6 files that landed during the run make the table due again: the next run claims them.
    wait_for("the next run", || {
        runner.started.load(Ordering::SeqCst) == 2
    })
    .await;
    let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
    assert_eq!(status.last_run.as_ref().unwrap().outcome, "success");
    assert_eq!(status.in_flight_run.as_ref().unwrap().claimed_files, 6);
    runner.release.lock().unwrap().remove(0).send(done).unwrap();
    pipeline.pool.send(WaitIdle).await.unwrap();
}

/// Found by the soak benchmark: a run's start deferred behind an intake batch being committed
/// was followed by a second request the pool dropped (the table still counted as running),
/// and the table stayed due with nobody to run it. Under continuous intake every due table
/// must keep getting runs.
#[actix::test]
async fn a_table_under_continuous_intake_keeps_getting_runs() {
    let pipeline = pipeline(Arc::new(StandInRunner::succeeding(3)));
    futures::future::join_all((0..4u32).map(|sender| {
        let pipeline = pipeline.clone();
        async move {
            for batch in 0..150u32 {
                let key = sender * 10_000 + batch;
                ingest(&pipeline, key..key + 1).await;
            }
        }
    }))
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        pipeline.pool.send(WaitIdle).await.unwrap();
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        if !status.due && status.in_flight_run.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the table is due with nobody running it: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 31: the rewrite committed and printed its result, its outputs and the truth (one
/// small file: its own output); `expire_snapshots` then failed and spark-sql exited 1. That
/// was a failed run that kept the 4 compacted files pending (5 once the output's own event
/// came), run after run. It is a success with the failed expiry noted beside it.
#[actix::test]
async fn a_rewrite_that_committed_settles_when_a_later_statement_fails() {
    let config = Config::from_toml_str(
            "[defaults]\npacing = false\nmax_wait_minutes = 0\nmin_files = 4\n[spark]\nretry_attempts = 1\n[[tables]]\ntable = \"n.t\"\nbucket = \"lake\"\nprefix = \"t/\"\nexpire_snapshots_older_than_hours = 24\n",
        )
        .unwrap();
    let stand_in = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/expiry-fails-spark-sql.sh"
    );
    let pipeline = pipeline_of(
        Arc::new(config),
        Arc::new(crate::engine::spark::process::ProcessRunner::new(stand_in)),
    );
    ingest(&pipeline, 0..4).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
        if status.last_run.is_some() && status.in_flight_run.is_none() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never settled: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let run = status.last_run.as_ref().unwrap();
    assert_eq!(run.outcome, "success", "{run:?}");
    assert_eq!(run.rewritten_data_files, Some(4));
    let failed = run
        .maintenance_failed
        .as_ref()
        .expect("the expiry's failure is noted");
    assert_eq!(failed.step, "expire_snapshots");
    assert_eq!(failed.class, FailureClass::Other);
    assert!(failed.excerpt.contains("RuntimeIOException"), "{failed:?}");
    assert_eq!(status.consecutive_failures, 0);
    assert_eq!(
        status.pending_files, 1,
        "the truth's one small file (the run's output), not the 4 compacted ones"
    );
    // The output's own event, arriving now, is that same file.
    let output_event = r#"{"Records":[{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"lake"},"object":{"key":"t/data/compacted-00000.parquet","size":40}}}]}"#;
    pipeline
        .router
        .send(Ingest {
            messages: vec![InboundMessage {
                id: "output".to_string(),
                body: output_event.to_string(),
            }],
        })
        .await
        .unwrap()
        .unwrap();
    let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
    assert_eq!(status.pending_files, 1);
}

#[actix::test]
async fn a_failed_run_is_not_retried_on_every_new_event() {
    let runner = Arc::new(Gated::default());
    let pipeline = pipeline(runner.clone());
    ingest(&pipeline, 0..3).await;
    wait_for("the run to start", || {
        runner.started.load(Ordering::SeqCst) == 1
    })
    .await;
    let failed = EngineOutput {
        exit_code: 1,
        stderr: "NoSuchTableException: n.t".to_string(),
        ..EngineOutput::default()
    };
    runner
        .release
        .lock()
        .unwrap()
        .remove(0)
        .send(failed)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pipeline
        .accumulator(0)
        .send(GetStatus)
        .await
        .unwrap()
        .last_run
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the failure never settled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for batch in 0..5 {
        ingest(&pipeline, 10 + batch * 3..13 + batch * 3).await;
    }
    let status = pipeline.accumulator(0).send(GetStatus).await.unwrap();
    assert_eq!(
        status.pending_files, 18,
        "the failed run's files are pending again, with the new ones"
    );
    assert_eq!(status.consecutive_failures, 1);
    assert!(status.next_attempt_time.is_some());
    assert_eq!(
        runner.started.load(Ordering::SeqCst),
        1,
        "back-off: new events start no run"
    );
}
