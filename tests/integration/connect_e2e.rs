//! The `connect` runner on the real stack: S3 notifications from moto → icepack → a warm Spark
//! Connect server (Spark 4.0 + Iceberg) compacting real Iceberg tables, on `local[2]` and on a
//! standalone Spark cluster; exactly one rewrite per run, fresh metadata on a long-lived server,
//! two tables at once, a server that goes away and comes back, a deadline that interrupts. What
//! the tests on a warm server share is `support::warm_stack`.

use crate::support;

use std::time::Duration;

use icepack::engine::spark::connect::ConnectRunner;
use icepack::engine::spark::runner::{judge, SparkRunner};
use icepack::runs::report::FailureClass;
use support::connect::{job, job_of, runner, value, Cluster, ConnectServer, Gate};
use support::spark::Lakehouse;
use support::warm_stack::*;
use support::{get_text, measure, wait_until, wait_until_or, Icepack, Landing, Moto};

/// The scenario both masters run: two tables due at once compacted through separate sessions,
/// each rewrite exactly once, the data unchanged, the state settled; then a writer commits more
/// files to the first table and its next run (on the same long-lived server) compacts them too.
pub(crate) async fn compaction_through_a_warm_server(master: Option<&str>) {
    let stack = Stack::start(master).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let tables = [
        stack.table("lakehouse", "analytics.orders"),
        stack.table("lakehouse2", "analytics.events"),
    ];

    let mut before = Vec::new();
    for table in &tables {
        let mut setup = create(table);
        setup.extend(inserts(&table.qualified(), 0, 12));
        table.sql(writer, &setup).await;
        let facts = table.sql(writer, &facts(&table.qualified())).await;
        assert_eq!(value(&facts, "data_files"), "12");
        before.push(facts);
    }

    let mut icepack = Icepack::with_config(&config(
        moto,
        queue_url,
        bucket,
        &server.url,
        "",
        &tables.iter().collect::<Vec<_>>(),
    ));
    let run = icepack.spawn_run("");
    let mut runs = Vec::new();
    for table in &tables {
        let status = run_after(&icepack, table.name, "").await;
        assert_eq!(
            status["last_run"]["outcome"],
            "success",
            "{status}\n{}\n{}",
            icepack.log(run),
            server.log()
        );
        assert_eq!(status["last_run"]["rewritten_data_files"], 12, "{status}");
        assert_eq!(status["last_run"]["added_data_files"], 1, "{status}");
        runs.push(status["last_run"].clone());
    }
    // Two slots, two tables: the runs overlapped (separate sessions at the same time).
    let (first, second) = (&runs[0], &runs[1]);
    let overlap = first["started_at"].as_str() < second["finished_at"].as_str()
        && second["started_at"].as_str() < first["finished_at"].as_str();
    assert!(overlap, "runs at the same time: {first} {second}");
    for (index, table) in tables.iter().enumerate() {
        let after = table.sql(writer, &facts(&table.qualified())).await;
        assert_eq!(value(&after, "data_files"), "1", "{}", table.name);
        assert_eq!(
            value(&after, "row_count"),
            value(&before[index], "row_count")
        );
        assert_eq!(value(&after, "checksum"), value(&before[index], "checksum"));
        assert_eq!(
            value(&after, "replace_snapshots"),
            "1",
            "{}: the CALL ran exactly once",
            table.name
        );
    }
    wait_until("the queue to drain", Duration::from_secs(60), || async {
        (moto.queue_depth(queue_url).await == 0).then_some(())
    })
    .await;
    for table in &tables {
        let status = table_status(&icepack, table.name);
        assert_eq!(
            status["pending_files"], 1,
            "only the output is left: {status}"
        );
        assert_eq!(status["due"], false);
    }

    // The server has the table cached from the run; a writer commits 12 more. A run after them
    // reads what is committed, not the cached table: it rewrites the new files. Where the
    // threshold falls among the commits decides how many: a run that read the table while the
    // writer still committed leaves those committed after its read pending, fewer than
    // min_files, and they wait for more (max_wait is off); those whose commits came after the
    // run's own read of the result wait unconfirmed, for the next read of the metadata. Either
    // way icepack then accounts for exactly the table's data files.
    let orders = &tables[0];
    let writes_began = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    orders
        .sql(writer, &inserts(&orders.qualified(), 100, 12))
        .await;
    let after = wait_until_or(
        "a run to compact the new commits, and the state to settle on the table's files",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, orders.name);
            let (writer, writes_began) = (&writer, &writes_began);
            async move {
                let last = &status["last_run"];
                let compacted = last["started_at"].as_str()? >= writes_began.as_str()
                    && last["outcome"] == "success"
                    // The cached table had one data file: two or more are the new commits.
                    && last["rewritten_data_files"].as_u64()? >= 2;
                let settled = status["in_flight_run"].is_null() && status["due"] == false;
                if !(compacted && settled) {
                    return None;
                }
                let after = orders.sql(writer, &facts(&orders.qualified())).await;
                let data_files = value(&after, "data_files").parse::<u64>().ok();
                let accounted =
                    status["pending_files"].as_u64()? + status["unconfirmed_files"].as_u64()?;
                (data_files == Some(accounted)).then_some(after)
            }
        },
        || {
            format!(
                "status: {}\nicepack's log, last lines:\n{}",
                table_status(&icepack, orders.name),
                support::tail(&icepack.log(run), 60)
            )
        },
    )
    .await;
    assert_eq!(value(&after, "row_count"), "120");
    assert!(icepack.terminate(run).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_warm_server_on_local_spark_compacts_exactly_once_and_sees_fresh_commits() {
    if !connect_available(
        "a_warm_server_on_local_spark_compacts_exactly_once_and_sees_fresh_commits",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    compaction_through_a_warm_server(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_server_on_a_standalone_cluster_compacts_through_its_executors() {
    if !connect_available("a_server_on_a_standalone_cluster_compacts_through_its_executors") {
        return;
    }
    let _alone = HEAVY.write().await;
    let cluster = Cluster::start();
    compaction_through_a_warm_server(Some(&cluster.master)).await;
    assert!(
        cluster.worker_log().contains("Asked to launch executor"),
        "the work ran on the cluster's worker:\n{}",
        cluster.worker_log()
    );
}

/// Server unreachable: runs fail as `engine_unavailable` within seconds while counting goes on;
/// once it answers, the table is compacted after its back-off. A deadline interrupts a
/// statement by its tag; a failing statement is classified from its error class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn an_unreachable_server_fails_fast_and_recovers_and_a_deadline_interrupts() {
    if !connect_available("an_unreachable_server_fails_fast_and_recovers_and_a_deadline_interrupts")
    {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.orders");
    let mut setup = create(&table);
    setup.extend(inserts(&table.qualified(), 0, 12));
    table.sql(writer, &setup).await;

    // A deadline: the statement is interrupted on the server and the run says so.
    let slow = job(
        table.catalog,
        &table.lakehouse,
        &["SELECT count(*) AS n FROM range(0, 1000000000000)".to_string()],
        Duration::from_secs(4),
    );
    let started = std::time::Instant::now();
    let output = writer.run(&slow).await.unwrap();
    assert!(output.timed_out, "{output:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let (class, excerpt) = judge(&output, &slow).unwrap_err();
    assert_eq!(class, FailureClass::Timeout);
    assert!(excerpt.contains("1 operation(s) interrupted"), "{excerpt}");
    // A statement that fails is classified from the server's error class.
    let missing_job = job(
        table.catalog,
        &table.lakehouse,
        &["SELECT * FROM lakehouse.analytics.no_such_table".to_string()],
        Duration::from_secs(60),
    );
    let missing = writer.run(&missing_job).await.unwrap();
    let (class, excerpt) = judge(&missing, &missing_job).unwrap_err();
    assert_eq!(class, FailureClass::Other);
    assert!(excerpt.contains("TABLE_OR_VIEW_NOT_FOUND"), "{excerpt}");

    // icepack reaches the server through a gate that is closed: nothing listens.
    let mut gate = Gate::closed(server.port);
    let gate_url = format!("sc://127.0.0.1:{}", gate.port);
    let http = format!("127.0.0.1:{}", support::free_port());
    let mut icepack = Icepack::with_config(&config(
        moto,
        queue_url,
        bucket,
        &gate_url,
        &http,
        &[&table],
    ));
    let run = icepack.spawn_run("");
    // The engine probe tells: not ready, the metric at 0, status naming the engine.
    let client = reqwest::Client::new();
    let readyz = wait_until(
        "/readyz to name the engine",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            let url = format!("http://{http}/readyz");
            async move {
                let body = client.get(url).send().await.ok()?.text().await.ok()?;
                body.contains("Spark engine").then_some(body)
            }
        },
    )
    .await;
    assert!(
        readyz.contains(&format!("connect sc://127.0.0.1:{}", gate.port)),
        "{readyz}"
    );
    let metrics = get_text(&format!("http://{http}/metrics")).await;
    assert!(
        metrics.contains("icepack_engine_up{engine=\"connect sc://127.0.0.1:"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("icepack_engine_up{") && line.ends_with(" 0")),
        "{metrics}"
    );
    let failed = run_after(&icepack, table.name, "").await;
    assert_eq!(failed["last_run"]["outcome"], "failure", "{failed}");
    assert_eq!(
        failed["last_run"]["failure_class"], "engine_unavailable",
        "{failed}"
    );
    assert!(
        failed["last_run"]["duration_ms"].as_u64().unwrap() < 10_000,
        "fails within seconds: {failed}"
    );
    // Nothing forgotten, and counting goes on while the engine is away.
    wait_until(
        "the 12 files to be counted",
        Duration::from_secs(60),
        || async { (icepack.pending_files(table.name) >= 12).then_some(()) },
    )
    .await;
    table
        .sql(writer, &inserts(&table.qualified(), 100, 3))
        .await;
    wait_until(
        "the new files to be counted",
        Duration::from_secs(60),
        || async { (icepack.pending_files(table.name) >= 15).then_some(()) },
    )
    .await;

    let opened = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    gate.open().await;
    let recovered = run_after(&icepack, table.name, &opened).await;
    let engine = wait_until(
        "the probe to find the engine",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            let url = format!("http://{http}/v1/tables");
            async move {
                let status: serde_json::Value =
                    client.get(url).send().await.ok()?.json().await.ok()?;
                (status["engine"]["answering"] == true).then_some(status["engine"].clone())
            }
        },
    )
    .await;
    assert!(engine["error"].is_null(), "{engine}");
    assert_eq!(
        recovered["last_run"]["outcome"],
        "success",
        "{recovered}\n{}",
        icepack.log(run)
    );
    assert_eq!(
        recovered["last_run"]["rewritten_data_files"], 15,
        "{recovered}"
    );
    let after = table.sql(writer, &facts(&table.qualified())).await;
    assert_eq!(value(&after, "data_files"), "1");
    assert_eq!(value(&after, "replace_snapshots"), "1");
    assert!(icepack.terminate(run).await.success());

    // Freshness, step by step: a session that has read the table, a writer's commits since, and
    // the compaction on that session rewrites them too (its first statement refreshes).
    let compactor = runner(&server.url);
    let count = format!(
        "SELECT count(*) AS data_files FROM {}.files",
        table.qualified()
    );
    let warm = table.sql(&compactor, std::slice::from_ref(&count)).await;
    assert_eq!(value(&warm, "data_files"), "1");
    table
        .sql(writer, &inserts(&table.qualified(), 200, 3))
        .await;
    let now = chrono::Utc::now().timestamp_millis();
    let statements = icepack::engine::spark::sql::CompactionSql {
        catalog: table.catalog.to_string(),
        table: table.name.to_string(),
        target_file_bytes: 512 * 1024 * 1024,
        partial_progress: false,
        where_filter: None,
        expire_snapshots_older_than_hours: None,
        run_started_millis: now,
        small_file_bytes: 64 * 1024 * 1024,
        task: icepack::engine::spark::sql::SqlTask::Rewrite(
            icepack::engine::spark::sql::SqlRewrite {
                calls: vec![icepack::engine::spark::sql::RewriteCall {
                    min_file_size_bytes: None,
                    partition_filter: None,
                }],
                strategy: icepack::runs::strategy::RunStrategy::Binpack,
                min_input_files: 2,
                apply_deletes: None,
            },
        ),
        committed_since_millis: now,
        extra_options: Default::default(),
        orphan_older_than_hours: 72,
        orphan_prefix_listing: false,
        partition_statistics: false,
        expire_snapshots_retain_last: None,
    };
    let compaction = job_of(
        table.catalog,
        &table.lakehouse,
        statements.statement_list(),
        Duration::from_secs(120),
    );
    let output = compactor.run(&compaction).await.unwrap();
    let report = judge(&output, &compaction).expect("the compaction succeeds");
    assert_eq!(report.result.rewritten_data_files_count, 4, "{report:?}");
    assert_eq!(report.truth.map(|truth| truth.len()), Some(1));

    // icepack restarted while a run was in flight: the run's session sent the rewrite and the
    // process died. Recovering it reads the table's metadata: its `replace` snapshot is the one
    // that removed the run's claimed files, whatever the clocks.
    table
        .sql(writer, &inserts(&table.qualified(), 300, 3))
        .await;
    let files = table
        .sql(
            writer,
            &[format!(
                "SELECT file_path AS path FROM {}.files",
                table.qualified()
            )],
        )
        .await;
    let claimed: Vec<(String, String)> = files[0]
        .rows
        .iter()
        .filter_map(|row| icepack::runs::report::split_object_path(&row[0]))
        .map(|(bucket, key)| (bucket.to_string(), key.to_string()))
        .collect();
    assert_eq!(claimed.len(), 4, "{files:?}");
    let started = chrono::Utc::now().timestamp_millis();
    let run_sql = icepack::engine::spark::sql::CompactionSql {
        run_started_millis: started,
        committed_since_millis: started,
        ..statements
    };
    let mut interrupted = job_of(
        table.catalog,
        &table.lakehouse,
        run_sql.statement_list(),
        Duration::from_secs(120),
    );
    interrupted.recovery = run_sql.recovery_statement_list();
    interrupted.claimed = icepack::engine::spark::runner::ClaimedFiles::listed(claimed.clone());
    let mut sent = interrupted.clone();
    sent.statements.truncate(2); // REFRESH, the rewrite: then icepack died.
    assert_eq!(
        sent.statements[1].kind,
        icepack::engine::spark::sql::StatementKind::Rewrite
    );
    compactor.run(&sent).await.unwrap();
    let recovered = compactor
        .recover(&interrupted)
        .await
        .expect("the server answers")
        .expect("the run's commit is found");
    let report = judge(&recovered, &interrupted).expect("a committed run");
    assert_eq!(report.result.rewritten_data_files_count, 4, "{report:?}");
    assert_eq!(report.output_files.len(), 1, "{report:?}");
    assert_eq!(report.truth.map(|truth| truth.len()), Some(1));
    // A run whose files no rewrite removed left no commit, however recent the rewrites.
    let mut other = interrupted.clone();
    other.claimed = icepack::engine::spark::runner::ClaimedFiles::listed(vec![(
        claimed[0].0.clone(),
        "warehouse/never-written.parquet".to_string(),
    )]);
    assert!(compactor.recover(&other).await.unwrap().is_none());
}

/// The warm-up (issue 46) on the process's shared server, through `icepack run` and a gate: at
/// start the connect runner loads each catalog of the configured Spark tables and one table of
/// it, read-only — icepack's log names the catalog and table loaded, the server's log has
/// Iceberg loading that table — and the table gains no snapshot and no metadata version; a
/// catalog whose configured table does not exist fails its warm-up with a warning, and nothing
/// else (the other table's run then succeeds); the server lost and reached again is warmed up
/// again; a secret setting of the catalog is in no log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn the_runner_warms_each_catalog_up_read_only_at_start_and_after_a_reconnect() {
    if !connect_available(
        "the_runner_warms_each_catalog_up_read_only_at_start_and_after_a_reconnect",
    ) {
        return;
    }
    const SECRET: &str = "warm-up-secret-4711";
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let mut warm = stack.table("warm_up_a", "analytics.warm");
    // A property Iceberg ignores, secret by its name.
    warm.lakehouse
        .catalog
        .properties
        .insert("icepack-test.token".to_string(), SECRET.to_string());
    let missing = stack.table("warm_up_b", "analytics.never_created");
    let mut setup = create(&warm);
    setup.extend(inserts(&warm.qualified(), 0, 3));
    warm.sql(writer, &setup).await;
    let metadata = |table: &Table| {
        let table = table.qualified();
        vec![
            format!("REFRESH TABLE {table}"),
            format!("SELECT concat_ws(',', collect_list(CAST(snapshot_id AS STRING))) AS snapshots FROM {table}.snapshots"),
            format!("SELECT count(*) AS metadata_versions FROM {table}.metadata_log_entries"),
        ]
    };
    let before = warm.sql(writer, &metadata(&warm)).await;
    let loaded_by_server = |log: &str| {
        log.matches(&format!("Table loaded by catalog: {}", warm.qualified()))
            .count()
    };
    let loaded_before = loaded_by_server(&server.log());

    let mut gate = Gate::closed(server.port);
    gate.open().await;
    let mut icepack = Icepack::with_config(&config(
        moto,
        queue_url,
        bucket,
        &format!("sc://127.0.0.1:{}", gate.port),
        "",
        &[&warm, &missing],
    ));
    let run = icepack.spawn_run("");
    let warmed_up = |times: usize| {
        let icepack = &icepack;
        async move {
            wait_until_or(
                &format!("warm-up number {times} to end"),
                Duration::from_secs(180),
                || async {
                    let log = icepack.log(run);
                    (log.matches("the Spark Connect server is warmed up").count() >= times)
                        .then_some(log)
                },
                || support::tail(&icepack.log(run), 40),
            )
            .await
        }
    };
    let log = warmed_up(1).await;
    let line = |needle: &str, catalog: &str| {
        log.lines()
            .find(|line| line.contains(needle) && line.contains(&format!("catalog={catalog} ")))
            .unwrap_or_else(|| panic!("no line with {needle:?} for {catalog}:\n{log}"))
            .to_string()
    };
    let loaded = line(
        "warm-up: the catalog and the table's metadata are loaded",
        warm.catalog,
    );
    assert!(loaded.contains(&format!("table={}", warm.name)), "{loaded}");
    let failed = line("warm-up: cannot load the table", missing.catalog);
    assert!(failed.contains("WARN"), "{failed}");
    assert!(failed.contains("TABLE_OR_VIEW_NOT_FOUND"), "{failed}");
    assert!(
        log.contains("loaded=1 failed=1 skipped=0"),
        "{}",
        support::tail(&log, 20)
    );
    assert!(
        loaded_by_server(&server.log()) > loaded_before,
        "the server's log has Iceberg loading {}",
        warm.qualified()
    );
    assert_eq!(
        warm.sql(writer, &metadata(&warm)).await,
        before,
        "no snapshot, no metadata version"
    );

    // Lost, then reached again: warmed up again (the probe runs every 30 s).
    gate.close();
    wait_until(
        "the probe to lose the server",
        Duration::from_secs(90),
        || async {
            icepack
                .log(run)
                .contains("the engine does not answer")
                .then_some(())
        },
    )
    .await;
    gate.open().await;
    let log = warmed_up(2).await;
    assert_eq!(warm.sql(writer, &metadata(&warm)).await, before);

    // A failed warm-up changes nothing for runs: the table, due at 10 files, is compacted (a
    // run that starts while the writer still commits may find too few files committed to
    // rewrite; a later one compacts them).
    warm.sql(writer, &inserts(&warm.qualified(), 100, 7)).await;
    wait_until(
        "a run to compact the table",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, warm.name);
            async move {
                let last = &status["last_run"];
                (last["outcome"] == "success" && last["rewritten_data_files"].as_u64()? >= 2)
                    .then_some(())
            }
        },
    )
    .await;
    let log = icepack.log(run) + &log;
    assert!(!log.contains(SECRET), "a catalog secret in the log");
    assert!(icepack.terminate(run).await.success());
}

/// Figures for BENCHMARKS.md §5, not a pass/fail check: threshold crossed → run settled for each
/// runner, and for the native engine (in icepack's process), on identical tables (12 small files
/// each), alternating, `ICEPACK_BENCH_ROUNDS` rounds (3 by default; the median is printed), and
/// the first run through a server that just started.
/// `deploy/local/with-stack.sh cargo test --release --test integration -- --ignored --nocapture
/// connect_e2e::measure_runners_threshold_to_settled`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: run it by name with --ignored --nocapture"]
async fn measure_runners_threshold_to_settled() {
    if !connect_available("measure_runners_threshold_to_settled") {
        return;
    }
    let _alone = HEAVY.write().await;
    let rounds: usize = std::env::var("ICEPACK_BENCH_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(3);
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = ConnectServer::start(None);
    let writer = runner(&server.url);
    const NAMES: [&str; 5] = [
        "analytics.t0",
        "analytics.t1",
        "analytics.t2",
        "analytics.t3",
        "analytics.t4",
    ];
    struct Kind {
        name: &'static str,
        tables: Vec<Table>,
        icepack: Icepack,
        run: usize,
        seconds: Vec<f64>,
    }
    let mut kinds = Vec::new();
    for (name, catalog) in [
        ("connect", "cat_connect"),
        ("docker", "cat_docker"),
        ("process", "cat_process"),
        ("native", "cat_native"),
    ] {
        let Landing {
            queue_url, bucket, ..
        } = moto.landing(5).await;
        let tables: Vec<Table> = NAMES[..rounds.min(NAMES.len())]
            .iter()
            .map(|table| Table::new(&dir.path().join(name), &moto, &bucket, catalog, table))
            .collect();
        let spark = match name {
            "connect" => format!(
                "[spark]\nrunner = \"connect\"\nconnect_url = \"{}\"\n",
                server.url
            ),
            "docker" => tables[0].lakehouse.docker_spark_toml(),
            "process" => Lakehouse::process_spark_toml(),
            // The native engine runs in icepack's process: a spark-sql that cannot start.
            _ => "[spark]\nrunner = \"process\"\nspark_sql = \"/nonexistent/spark-sql\"\n"
                .to_string(),
        };
        let mut toml = config_with(
            &moto,
            &queue_url,
            &bucket,
            &spark,
            "",
            &tables.iter().collect::<Vec<_>>(),
        );
        toml = toml.replace("min_files = 10", "min_files = 12");
        if name == "native" {
            toml = toml.replace("min_files = 12", "min_files = 12\nengine = \"native\"");
        }
        let mut icepack = Icepack::with_config(&toml);
        let run = icepack.spawn_run("");
        kinds.push(Kind {
            name,
            tables,
            icepack,
            run,
            seconds: Vec::new(),
        });
    }
    let due_at = |log: &str, table: &str| {
        log.lines()
            .find(|line| {
                line.contains("table is due for compaction")
                    && line.contains(&format!("table={table} "))
            })
            .and_then(|line| line.split_whitespace().next())
            .and_then(|stamp| chrono::DateTime::parse_from_rfc3339(stamp).ok())
    };
    for round in 0..rounds.min(NAMES.len()) {
        for kind in &mut kinds {
            let table = &kind.tables[round];
            let mut setup = create(table);
            setup.extend(inserts(&table.qualified(), 0, 12));
            table.sql(&writer, &setup).await;
            let status = run_after(&kind.icepack, table.name, "").await;
            assert_eq!(
                status["last_run"]["outcome"],
                "success",
                "{}: {status}\n{}",
                kind.name,
                kind.icepack.log(kind.run)
            );
            let finished = chrono::DateTime::parse_from_rfc3339(
                status["last_run"]["finished_at"].as_str().unwrap(),
            )
            .unwrap();
            let due = due_at(&kind.icepack.log(kind.run), table.name).expect("the due line");
            let seconds = (finished - due).num_milliseconds() as f64 / 1000.0;
            eprintln!("FIGURES round {round} {}: threshold crossed → run settled {seconds:.2} s (run {} ms)", kind.name, status["last_run"]["duration_ms"]);
            kind.seconds.push(seconds);
        }
    }
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    // Where a warm run's time goes, statement by statement (the connect runner's debug lines).
    for line in kinds[0].icepack.log(kinds[0].run).lines() {
        if line.contains("statement answered") {
            eprintln!(
                "FIGURES connect {}",
                line.split("statement answered").nth(1).unwrap_or("").trim()
            );
        }
    }
    let connect = median(&kinds[0].seconds);
    let docker = median(&kinds[1].seconds);
    let process = median(&kinds[2].seconds);
    let native = median(&kinds[3].seconds);
    eprintln!(
        "FIGURES threshold crossed → run settled, median of {}: connect {connect:.2} s, docker {docker:.2} s, process {process:.2} s, native {native:.2} s; connect/docker {:.3}, connect/process {:.3}, native/connect {:.3}, native/process {:.3}",
        kinds[0].seconds.len(),
        connect / docker,
        connect / process,
        native / connect,
        native / process
    );
    assert!(
        kinds[3]
            .icepack
            .log(kinds[3].run)
            .contains("native run committed"),
        "the native kind ran on the native engine"
    );
    for kind in &mut kinds {
        assert!(kind.icepack.terminate(kind.run).await.success());
    }

    // The first run through a server that just started (icepack's warm-up probe runs first).
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;
    let started = std::time::Instant::now();
    let fresh = ConnectServer::start(None);
    let server_start = started.elapsed().as_secs_f64();
    let table = Table::new(
        &dir.path().join("fresh"),
        &moto,
        &bucket,
        "cat_fresh",
        "analytics.first",
    );
    let http = format!("127.0.0.1:{}", support::free_port());
    let toml = config(&moto, &queue_url, &bucket, &fresh.url, &http, &[&table])
        .replace("min_files = 10", "min_files = 12");
    let mut icepack = Icepack::with_config(&toml);
    let run = icepack.spawn_run("");
    let mut setup = create(&table);
    setup.extend(inserts(&table.qualified(), 0, 12));
    table.sql(&writer, &setup).await;
    let status = run_after(&icepack, table.name, "").await;
    assert_eq!(status["last_run"]["outcome"], "success", "{status}");
    let finished =
        chrono::DateTime::parse_from_rfc3339(status["last_run"]["finished_at"].as_str().unwrap())
            .unwrap();
    let due = due_at(&icepack.log(run), table.name).expect("the due line");
    let engine: serde_json::Value = reqwest::get(format!("http://{http}/v1/tables"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    eprintln!(
        "FIGURES fresh Spark Connect server: started in {server_start:.1} s; warm-up probe {} ms; first run threshold crossed → settled {:.2} s (run {} ms)",
        engine["engine"]["probe_millis"],
        (finished - due).num_milliseconds() as f64 / 1000.0,
        status["last_run"]["duration_ms"]
    );
    assert!(icepack.terminate(run).await.success());
}

/// A case of [`measure_engines_threshold_to_settled`]: the case's files in one commit, then one
/// more file in a partition of its own (`part = 'trigger'`: one file, never rewritten) that
/// crosses the table's threshold (`files() + 1`) once the case's files are committed, so every
/// engine rewrites exactly the case's files.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum FigureCase {
    /// 24 tiny files (5 rows each) in one partition, one commit.
    Tiny,
    /// 200 files of about 1 MiB (incompressible) in 10 partitions, one commit.
    Wide,
}

impl FigureCase {
    pub(crate) fn letter(self) -> &'static str {
        match self {
            FigureCase::Tiny => "a",
            FigureCase::Wide => "b",
        }
    }

    /// The files the run rewrites.
    pub(crate) fn files(self) -> u32 {
        match self {
            FigureCase::Tiny => 24,
            FigureCase::Wide => 200,
        }
    }

    pub(crate) fn statements(self, table: &Table) -> Vec<String> {
        let table_name = table.qualified();
        match self {
            // One commit of 24 tasks, a file each (24 commits took the writer ~28 s a table).
            FigureCase::Tiny => vec![
                format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                format!(
                    "CREATE TABLE {table_name} (id BIGINT, part STRING, amount DOUBLE) \
                     USING iceberg PARTITIONED BY (part) \
                     TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
                ),
                format!(
                    "INSERT INTO {table_name} SELECT /*+ REPARTITION(24) */ id, 'a', id * 1.5 FROM range(120)"
                ),
                format!("INSERT INTO {table_name} VALUES (0, 'trigger', 0.0)"),
            ],
            // 20 tasks, each writing one file into each of 10 partitions.
            FigureCase::Wide => vec![
                format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                format!(
                    "CREATE TABLE {table_name} (id BIGINT, part STRING, a BINARY, b BINARY, c BINARY, d BINARY) \
                     USING iceberg PARTITIONED BY (part) \
                     TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
                ),
                format!(
                    "INSERT INTO {table_name} SELECT /*+ REPARTITION(20) */ id, concat('p', CAST(id % 10 AS STRING)), \
                     unhex(sha2(CAST(id AS STRING), 512)), unhex(sha2(CAST(id + 1 AS STRING), 512)), \
                     unhex(sha2(CAST(id + 2 AS STRING), 512)), unhex(sha2(CAST(id + 3 AS STRING), 512)) \
                     FROM range(800000)"
                ),
                format!("INSERT INTO {table_name} VALUES (0, 'trigger', X'00', X'00', X'00', X'00')"),
            ],
        }
    }
}

/// Figures for issue 32's cases (a) and (b) (BENCHMARKS.md §5, no assertion on time): threshold
/// crossed → run settled (from the log's "table is due", which comes after the settle window,
/// to the run's `finished_at`) through `icepack run` for the native engine and the three Spark
/// runners (connect on a warm server, docker, process), each on its own queue, bucket and JDBC
/// catalog, on identical tables written by the same Spark Connect writer, alternating (the
/// order rotates every round); and iceberg-go's `iceberg compact run` on a fifth identical table
/// (a command per run, no events: its figure is the command's wall time) when
/// `ICEPACK_BENCH_ICEBERG_GO` names its binary. `ICEPACK_FIGURES_CASES` (`a`, `b`),
/// `ICEPACK_BENCH_ROUNDS` (5), `ICEPACK_FIGURES_ENGINES` (all of native, connect, docker,
/// process, iceberg-go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: bench/engines.sh a,b, or deploy/local/with-stack.sh cargo test --release --test integration -- --ignored --nocapture connect_e2e::measure_engines"]
async fn measure_engines_threshold_to_settled() {
    let cases: Vec<FigureCase> = [FigureCase::Tiny, FigureCase::Wide]
        .into_iter()
        .filter(|case| measure::case_selected(case.letter()))
        .collect();
    if cases.is_empty() || !connect_available("measure_engines_threshold_to_settled") {
        return;
    }
    let _alone = HEAVY.write().await;
    let rounds = measure::rounds(5);
    let engines = std::env::var("ICEPACK_FIGURES_ENGINES")
        .unwrap_or_else(|_| "native,connect,docker,process,iceberg-go".to_string());
    let iceberg_go = std::env::var("ICEPACK_BENCH_ICEBERG_GO").ok();
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = ConnectServer::start(None);
    let writer = runner(&server.url);
    struct Kind {
        name: &'static str,
        /// Per case and round.
        tables: Vec<Vec<Table>>,
        /// `icepack run` and its process index; none for iceberg-go.
        icepack: Option<(Icepack, usize)>,
        /// Per case: the figure of every round, and the run's own duration.
        seconds: Vec<Vec<(f64, f64)>>,
    }
    let mut kinds = Vec::new();
    for name in ["native", "connect", "docker", "process", "iceberg-go"] {
        if !engines.split(',').any(|engine| engine.trim() == name) {
            continue;
        }
        if name == "iceberg-go" && iceberg_go.is_none() {
            eprintln!("FIGURES iceberg-go left out: ICEPACK_BENCH_ICEBERG_GO does not name its `iceberg` binary");
            continue;
        }
        let catalog: &'static str =
            Box::leak(format!("cat_{}", name.replace('-', "_")).into_boxed_str());
        let Landing {
            queue_url, bucket, ..
        } = moto.landing(5).await;
        let tables: Vec<Vec<Table>> = cases
            .iter()
            .map(|case| {
                (0..rounds)
                    .map(|round| {
                        let table: &'static str = Box::leak(
                            format!("analytics.{}{round}", case.letter()).into_boxed_str(),
                        );
                        Table::new(&dir.path().join(name), &moto, &bucket, catalog, table)
                    })
                    .collect()
            })
            .collect();
        let icepack = if name == "iceberg-go" {
            None
        } else {
            let spark = match name {
                "connect" => format!(
                    "[spark]\nrunner = \"connect\"\nconnect_url = \"{}\"\n",
                    server.url
                ),
                "docker" => tables[0][0].lakehouse.docker_spark_toml(),
                "process" => Lakehouse::process_spark_toml(),
                // The native engine runs in icepack's process: a spark-sql that cannot start.
                _ => "[spark]\nrunner = \"process\"\nspark_sql = \"/nonexistent/spark-sql\"\n"
                    .to_string(),
            };
            let all: Vec<&Table> = tables.iter().flatten().collect();
            let mut toml = config_with(&moto, &queue_url, &bucket, &spark, "", &all);
            for (case, tables) in cases.iter().zip(&tables) {
                for table in tables {
                    toml = toml.replace(
                        &format!("table = \"{}\"\n", table.name),
                        &format!(
                            "table = \"{}\"\nmin_files = {}\nmin_input_files = 2\n",
                            table.name,
                            case.files() + 1
                        ),
                    );
                }
            }
            // Files land before the commit that makes them live: the shipped pacing ("settle")
            // holds a due table until no file has landed for the settle window, so the run finds
            // the files committed. The log says "due" once that wait is over. 10 s: a loaded
            // writer left gaps over 3 s between the files of one commit.
            toml = toml.replace(
                "pacing = false                           # runs at the thresholds (the pacing has its own test)\n",
                "pacing = \"settle\"\nsettle_seconds = 10\n",
            );
            assert!(toml.contains("settle_seconds = 10"), "{toml}");
            if name == "native" {
                toml = toml.replace("min_files = 10\n", "min_files = 10\nengine = \"native\"\n");
            }
            let mut icepack = Icepack::with_config(&toml);
            let run = icepack.spawn_run("");
            Some((icepack, run))
        };
        kinds.push(Kind {
            name,
            tables,
            icepack,
            seconds: vec![Vec::new(); cases.len()],
        });
    }
    let due_at = |log: &str, table: &str| {
        log.lines()
            .find(|line| {
                line.contains("table is due for compaction")
                    && line.contains(&format!("table={table} "))
            })
            .and_then(|line| line.split_whitespace().next())
            .and_then(|stamp| chrono::DateTime::parse_from_rfc3339(stamp).ok())
    };
    for round in 0..rounds {
        for (index, case) in cases.iter().enumerate() {
            for turn in 0..kinds.len() {
                let count = kinds.len();
                let kind = &mut kinds[(turn + round) % count];
                let table = &kind.tables[index][round];
                let written = std::time::Instant::now();
                table.sql(&writer, &case.statements(table)).await;
                let written = written.elapsed().as_secs_f64();
                let (figure, run_seconds, note) = match &kind.icepack {
                    Some((icepack, run)) => {
                        let status = run_after(icepack, table.name, "").await;
                        assert_eq!(
                            status["last_run"]["outcome"],
                            "success",
                            "{}: {status}\n{}",
                            kind.name,
                            icepack.log(*run)
                        );
                        assert_eq!(
                            status["last_run"]["rewritten_data_files"],
                            case.files(),
                            "{}: the run rewrote the case's files: {status}",
                            kind.name
                        );
                        let finished = chrono::DateTime::parse_from_rfc3339(
                            status["last_run"]["finished_at"].as_str().unwrap(),
                        )
                        .unwrap();
                        let due = due_at(&icepack.log(*run), table.name).expect("the due line");
                        let run_ms = status["last_run"]["duration_ms"].as_f64().unwrap_or(0.0);
                        (
                            (finished - due).num_milliseconds() as f64 / 1000.0,
                            run_ms / 1000.0,
                            format!(
                                "threshold crossed → run settled (run {run_ms} ms, engine {}, rewrote {} files into {})",
                                status["last_run"]["engine"],
                                status["last_run"]["rewritten_data_files"],
                                status["last_run"]["added_data_files"]
                            ),
                        )
                    }
                    None => {
                        let binary = iceberg_go.as_deref().unwrap();
                        let database = table.lakehouse.catalog_dir.join("catalog.db");
                        let mut command = std::process::Command::new(binary);
                        command
                            .args([
                                "--catalog",
                                "sql",
                                "--catalog-name",
                                table.catalog,
                                "--sql-driver",
                                "sqliteshim",
                                "--sql-dialect",
                                "sqlite",
                                "--uri",
                                &format!("file:{}?_pragma=busy_timeout(10000)", database.display()),
                                "compact",
                                "run",
                                table.name,
                                "--target-file-size",
                                &(512u64 * 1024 * 1024).to_string(),
                            ])
                            .env("AWS_S3_ENDPOINT", &moto.endpoint);
                        let measured = measure::run_measured(&mut command, "");
                        assert!(
                            measured.status.success(),
                            "iceberg compact run failed:\n{}\n{}",
                            measured.stdout,
                            measured.stderr
                        );
                        let files = table
                            .sql(
                                &writer,
                                &[
                                    format!("REFRESH TABLE {}", table.qualified()),
                                    format!(
                                        "SELECT count(*) AS data_files FROM {}.files",
                                        table.qualified()
                                    ),
                                    format!(
                                        "SELECT count(*) AS replace_snapshots FROM {}.snapshots WHERE operation = 'replace'",
                                        table.qualified()
                                    ),
                                ],
                            )
                            .await;
                        (
                            measured.wall_seconds,
                            measured.wall_seconds,
                            format!(
                                "`iceberg compact run` command (CPU {:.2} s, peak RSS {} MiB; {} data files after, {} replace snapshot(s))",
                                measured.cpu_seconds,
                                measured.peak_rss_kib / 1024,
                                value(&files, "data_files"),
                                value(&files, "replace_snapshots")
                            ),
                        )
                    }
                };
                eprintln!(
                    "FIGURES ({}) round {round} {}: {figure:.2} s {note}; table written in {written:.1} s",
                    case.letter(),
                    kind.name
                );
                kind.seconds[index].push((figure, run_seconds));
                if *case == FigureCase::Wide {
                    // moto keeps objects in memory: the table's files go once measured.
                    table
                        .sql(
                            &writer,
                            &[format!("DROP TABLE {} PURGE", table.qualified())],
                        )
                        .await;
                }
            }
        }
    }
    for (index, case) in cases.iter().enumerate() {
        let medians: Vec<(&str, f64, f64)> = kinds
            .iter()
            .map(|kind| {
                let figures: Vec<f64> = kind.seconds[index].iter().map(|pair| pair.0).collect();
                let runs: Vec<f64> = kind.seconds[index].iter().map(|pair| pair.1).collect();
                (kind.name, measure::median(&figures), measure::median(&runs))
            })
            .collect();
        let line: Vec<String> = medians
            .iter()
            .map(|(name, figure, run)| format!("{name} {figure:.2} s (run {run:.2} s)"))
            .collect();
        eprintln!(
            "FIGURES ({}) median of {rounds}: {}",
            case.letter(),
            line.join(", ")
        );
        let of = |name: &str| {
            medians
                .iter()
                .find(|entry| entry.0 == name)
                .map(|entry| entry.1)
        };
        if let (Some(native), Some(connect)) = (of("native"), of("connect")) {
            eprintln!(
                "FIGURES ({}) native/connect {:.3}",
                case.letter(),
                native / connect
            );
        }
    }
    for kind in &mut kinds {
        if let Some((icepack, run)) = &mut kind.icepack {
            if kind.name == "native" {
                assert!(icepack.log(*run).contains("native run committed"));
            }
            assert!(icepack.terminate(*run).await.success());
        }
    }
}

/// How a server meets its first run in [`measure_first_run_on_a_fresh_server`].
#[derive(Clone, Copy, PartialEq)]
enum FirstRun {
    /// The probe's `SELECT 1` only (icepack before issue 46).
    Probed,
    /// The probe, then the runner's warm-up (its catalog and table loaded, read-only).
    WarmedUp,
}

impl FirstRun {
    fn name(self) -> &'static str {
        match self {
            FirstRun::Probed => "without warm-up",
            FirstRun::WarmedUp => "with warm-up",
        }
    }
}

/// Figures for BENCHMARKS.md §5 (issue 46), not a pass/fail check: the first run on a Spark
/// Connect server that just started against the runs after it, with the connect runner's
/// warm-up and without it. Each round starts a fresh server twice (the two kinds alternate,
/// their order rotating), probes it as the service does at start (and, with the warm-up, waits
/// for the warm-up's report), then runs icepack's Spark engine (the run's statements, session
/// and settings, as the pool would) on a table of 24 tiny files, then on `LATER` more such
/// tables. The tables are written beforehand by the process's shared server, each kind in a
/// JDBC catalog of its own, so the fresh server has read nothing before. `ICEPACK_BENCH_ROUNDS`
/// (3). `deploy/local/with-stack.sh cargo test --release --test integration -- --ignored
/// --nocapture --exact connect_e2e::measure_first_run_on_a_fresh_server`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: run it by name with --ignored --nocapture"]
async fn measure_first_run_on_a_fresh_server() {
    use icepack::engine::spark::warm_up::{tables_to_warm, WarmUp};
    use icepack::engine::Engine;
    const LATER: usize = 3;
    const NAMES: [&str; LATER + 1] = [
        "analytics.a0",
        "analytics.a1",
        "analytics.a2",
        "analytics.a3",
    ];
    if !connect_available("measure_first_run_on_a_fresh_server") {
        return;
    }
    let _alone = HEAVY.write().await;
    // Where each run's time goes: the runner's per-statement lines and the warm-up's, on stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            "icepack::engine::spark::connect=debug,icepack::engine::spark::warm_up=info",
        )
        .with_writer(std::io::stderr)
        .try_init();
    let rounds = measure::rounds(3);
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let writer = runner(&ConnectServer::shared().url);
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;
    // Per kind: the first run's seconds (wall, the run's own), the later runs', the warm-up's.
    let mut first: Vec<(FirstRun, f64)> = Vec::new();
    let mut later: Vec<(FirstRun, f64)> = Vec::new();
    let mut warm_ups: Vec<f64> = Vec::new();
    for round in 0..rounds {
        let kinds = if round % 2 == 0 {
            [FirstRun::Probed, FirstRun::WarmedUp]
        } else {
            [FirstRun::WarmedUp, FirstRun::Probed]
        };
        for kind in kinds {
            let catalog: &'static str = Box::leak(
                format!(
                    "cat_{}_{round}",
                    if kind == FirstRun::Probed {
                        "cold"
                    } else {
                        "warm"
                    }
                )
                .into_boxed_str(),
            );
            let tables: Vec<Table> = NAMES
                .iter()
                .map(|name| Table::new(dir.path(), &moto, &bucket, catalog, name))
                .collect();
            for table in &tables {
                table
                    .sql(&writer, &FigureCase::Tiny.statements(table))
                    .await;
            }
            let toml = config(
                &moto,
                &queue_url,
                &bucket,
                "sc://127.0.0.1:1",
                "",
                &tables.iter().collect::<Vec<_>>(),
            )
            .replace(
                "@STATE_DIR@",
                &dir.path().join("state").display().to_string(),
            );
            let started = std::time::Instant::now();
            let server = ConnectServer::start(None);
            let server_start = started.elapsed().as_secs_f64();
            let config = std::sync::Arc::new(
                icepack::config::Config::from_toml_str(
                    &toml.replace("sc://127.0.0.1:1", &server.url),
                )
                .unwrap(),
            );
            let specs = config.table_specs();
            let mut runner = ConnectRunner::new(
                icepack::engine::spark::connect::settings(
                    &server.url,
                    false,
                    None,
                    Duration::from_secs(10),
                )
                .unwrap(),
            );
            if kind == FirstRun::WarmedUp {
                runner = runner.with_warm_up(WarmUp::new(&config, tables_to_warm(&specs)));
            }
            let runner = std::sync::Arc::new(runner);
            let mut reports = runner.warm_ups();
            let engine = icepack::engine::spark::SparkEngine::new(
                runner.clone(),
                icepack::runs::settings::CompactionSettings::from_config(config.clone()),
            );
            let probing = std::time::Instant::now();
            engine.probe().await.expect("the fresh server answers");
            let probe = probing.elapsed().as_secs_f64();
            let warm_up = if kind == FirstRun::WarmedUp {
                let report = reports
                    .wait_for(|report| report.is_some())
                    .await
                    .unwrap()
                    .clone()
                    .unwrap();
                assert_eq!(report.loaded.len(), 1, "{report:?}");
                let seconds = probing.elapsed().as_secs_f64() - probe;
                warm_ups.push(seconds);
                format!(
                    ", warm-up {seconds:.2} s (its report: {} ms)",
                    report.millis
                )
            } else {
                String::new()
            };
            eprintln!(
                "FIGURES round {round} {}: server started in {server_start:.1} s, probe {probe:.2} s{warm_up}",
                kind.name()
            );
            for (index, spec) in specs.iter().enumerate() {
                let task = icepack::engine::RunTask {
                    spec: std::sync::Arc::new(spec.clone()),
                    ticket: icepack::table::accumulator::ClaimTicket {
                        run_id: format!("{}-{round}-{index}", catalog.replace('_', "-")),
                        trigger: icepack::runs::task::Trigger::Files,
                        started_millis: chrono::Utc::now().timestamp_millis(),
                        files: 25,
                        bytes: 25 * 1024,
                        spec: None,
                        task: icepack::runs::task::Task::Rewrite(icepack::runs::task::Rewrite {
                            min_input_files: 2,
                            ..icepack::runs::task::Rewrite::whole_table()
                        }),
                        nonce: icepack::engine::spark::result::new_nonce(),
                        upto_seq: 25,
                        last_failure: None,
                    },
                    timeout: Duration::from_secs(600),
                    claimed: Default::default(),
                };
                let running = std::time::Instant::now();
                let ran = engine.run(&task).await;
                let wall = running.elapsed().as_secs_f64();
                let icepack::runs::report::RunOutcome::Success {
                    report,
                    duration_millis,
                    ..
                } = &ran.outcome
                else {
                    panic!(
                        "{}: {:?}\n{}",
                        spec.table,
                        ran.outcome,
                        support::tail(&server.log(), 40)
                    );
                };
                assert_eq!(
                    report.result.rewritten_data_files_count,
                    FigureCase::Tiny.files() as u64,
                    "{report:?}"
                );
                let which = if index == 0 { "first" } else { "later" };
                eprintln!(
                    "FIGURES round {round} {}: {which} run {wall:.2} s (the run's own {:.2} s), {} files rewritten into {}",
                    kind.name(),
                    *duration_millis as f64 / 1000.0,
                    report.result.rewritten_data_files_count,
                    report.result.added_data_files_count
                );
                if index == 0 {
                    first.push((kind, wall));
                } else {
                    later.push((kind, wall));
                }
            }
            drop(engine);
            drop(server);
        }
    }
    let of = |runs: &[(FirstRun, f64)], kind: FirstRun| -> Vec<f64> {
        runs.iter()
            .filter(|(which, _)| *which == kind)
            .map(|(_, seconds)| *seconds)
            .collect()
    };
    let later_all: Vec<f64> = later.iter().map(|(_, seconds)| *seconds).collect();
    let later_median = measure::median(&later_all);
    for kind in [FirstRun::Probed, FirstRun::WarmedUp] {
        let firsts = of(&first, kind);
        eprintln!(
            "FIGURES {}: first run median {:.2} s (each: {:?}), later runs median {:.2} s ({} runs); first / later {:.2}",
            kind.name(),
            measure::median(&firsts),
            firsts.iter().map(|seconds| format!("{seconds:.2}")).collect::<Vec<_>>(),
            measure::median(&of(&later, kind)),
            of(&later, kind).len(),
            measure::median(&firsts) / later_median
        );
    }
    eprintln!(
        "FIGURES warm-up median {:.2} s of {}; later runs, both kinds, median {later_median:.2} s of {}",
        measure::median(&warm_ups),
        warm_ups.len(),
        later_all.len()
    );
}

/// The connection breaks while the rewrite runs (a gate between icepack and the server cuts it):
/// the run's outcome is read from the table's metadata once the server answers again — success
/// with the counts of the committed `replace` snapshot, or a failure when none committed — never
/// assumed; either way the table ends compacted with its data intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_connection_lost_during_the_rewrite_is_decided_from_the_metadata() {
    if !connect_available("a_connection_lost_during_the_rewrite_is_decided_from_the_metadata") {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.orders");
    // 150 partitions of 2 small files: a rewrite of 150 file groups takes seconds, the cut
    // falls 1.5 s after the run started (its CALL is sent within a few hundred ms).
    let insert = |offset: i64| {
        format!(
            "INSERT INTO {} SELECT id + {offset}, concat('d', lpad(CAST(id % 150 AS STRING), 3, '0')), id * 1.5 FROM range(0, 150)",
            table.qualified()
        )
    };
    table
        .sql(
            writer,
            &[
                "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
                format!("CREATE TABLE {} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg PARTITIONED BY (order_date)", table.qualified()),
                insert(0),
                insert(1000),
            ],
        )
        .await;
    let before = table.sql(writer, &facts(&table.qualified())).await;
    assert_eq!(value(&before, "data_files"), "300");

    let mut gate = Gate::closed(server.port);
    gate.open().await;
    let gate_url = format!("sc://127.0.0.1:{}", gate.port);
    let toml = config(moto, queue_url, bucket, &gate_url, "", &[&table])
        .replace("min_files = 10", "min_files = 300")
        .replace("\nbucket = ", "\nmin_input_files = 2\nbucket = ")
        .replace("max_concurrent = 2", "max_concurrent = 1");
    let mut icepack = Icepack::with_config(&toml);
    let run = icepack.spawn_run("");
    wait_until("the run to start", Duration::from_secs(120), || {
        let status = table_status(&icepack, table.name);
        async move { (!status["in_flight_run"].is_null()).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    gate.close();
    tokio::time::sleep(Duration::from_secs(1)).await;
    gate.open().await;
    let decided = run_after(&icepack, table.name, "").await;
    let log = icepack.log(run);
    assert!(
        log.contains("reading its outcome from the table's metadata"),
        "the cut fell after the CALL was sent: {decided}\n{log}"
    );
    let replaced: u64 = value(
        &table.sql(writer, &facts(&table.qualified())).await,
        "replace_snapshots",
    )
    .parse()
    .unwrap();
    let last = &decided["last_run"];
    eprintln!(
        "FIGURES connection cut mid-rewrite: outcome {} ({} replace snapshot(s) committed)",
        last["outcome"], replaced
    );
    if last["outcome"] == "success" {
        assert!(
            replaced >= 1,
            "success only with a committed rewrite: {decided}"
        );
        assert!(
            last["rewritten_data_files"].as_u64().unwrap() > 0,
            "{decided}"
        );
        assert!(
            log.contains("the rewrite committed (read from the table's metadata)"),
            "{log}"
        );
        assert_eq!(
            last["maintenance_failed"]["class"], "engine_unavailable",
            "the broken connection is noted beside the committed rewrite: {decided}"
        );
    } else {
        assert_eq!(last["failure_class"], "engine_unavailable", "{decided}");
        assert!(
            last["error"]
                .as_str()
                .unwrap()
                .contains("shows no rewrite of the run's"),
            "{decided}"
        );
        assert_eq!(
            replaced, 0,
            "a failure only without a committed rewrite: {decided}"
        );
    }
    // Either way the table ends compacted, its data intact.
    let after = wait_until(
        "the table to be compacted",
        Duration::from_secs(600),
        || {
            let writer = &writer;
            let table = &table;
            async move {
                let after = table.sql(writer, &facts(&table.qualified())).await;
                (value(&after, "data_files") == "150").then_some(after)
            }
        },
    )
    .await;
    assert_eq!(value(&after, "row_count"), value(&before, "row_count"));
    assert_eq!(value(&after, "checksum"), value(&before, "checksum"));
    assert!(icepack.terminate(run).await.success());
}
