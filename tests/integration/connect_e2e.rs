//! The `connect` runner on the real stack: S3 notifications from moto → icepack → a warm Spark
//! Connect server (Spark 4.0 + Iceberg) compacting real Iceberg tables, on `local[2]` and on a
//! standalone Spark cluster; exactly one rewrite per run, fresh metadata on a long-lived server,
//! two tables at once, a server that goes away and comes back, a deadline that interrupts.

use crate::support;

use std::time::Duration;

use icepack::run::FailureClass;
use icepack::spark::connect::ConnectRunner;
use icepack::spark::runner::{judge, SparkRunner};
use support::connect::{job, job_of, runner, sql, value, Cluster, ConnectServer, Gate};
use support::spark::{stack_available, Lakehouse};
use support::{get_text, measure, wait_until, Icepack, Landing, Moto};

/// Two cores: the tests on the shared server run two at a time (the harness's threads), a test
/// that starts JVMs of its own (a cluster, a browser, the measurements) runs alone.
static HEAVY: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn connect_available(test: &str) -> bool {
    stack_available(test)
}

/// A test's table in a catalog of its own: SQLite's JDBC catalog cannot take two commits at once
/// from two connections (`SQLITE_BUSY_SNAPSHOT`), which a real catalog does.
struct Table {
    catalog: &'static str,
    name: &'static str,
    lakehouse: Lakehouse,
}

impl Table {
    fn new(
        dir: &std::path::Path,
        moto: &Moto,
        bucket: &str,
        catalog: &'static str,
        name: &'static str,
    ) -> Table {
        let dir = dir.join(catalog);
        std::fs::create_dir_all(&dir).unwrap();
        Table {
            catalog,
            name,
            lakehouse: Lakehouse::new(&dir, &moto.endpoint, bucket),
        }
    }

    fn qualified(&self) -> String {
        format!("{}.{}", self.catalog, self.name)
    }

    async fn sql(
        &self,
        writer: &icepack::spark::connect::ConnectRunner,
        statements: &[String],
    ) -> Vec<icepack::spark::result::ResultSet> {
        sql(writer, self.catalog, &self.lakehouse, statements).await
    }
}

/// What every test here starts with: moto with a notifying bucket, a Spark Connect server (the
/// process's shared one, or one of its own on `master`), and a writer session on it.
struct Stack {
    moto: Moto,
    queue_url: String,
    bucket: String,
    dir: tempfile::TempDir,
    server: Server,
    writer: ConnectRunner,
}

/// The shared server, or a server of the test's own (stopped with the test).
enum Server {
    Shared(&'static ConnectServer),
    Own(ConnectServer),
}

impl std::ops::Deref for Server {
    type Target = ConnectServer;

    fn deref(&self) -> &ConnectServer {
        match self {
            Server::Shared(server) => server,
            Server::Own(server) => server,
        }
    }
}

impl Stack {
    async fn start(master: Option<&str>) -> Stack {
        let moto = Moto::start().await;
        let Landing {
            queue_url, bucket, ..
        } = moto.landing(5).await;
        let server = match master {
            None => Server::Shared(ConnectServer::shared()),
            Some(master) => Server::Own(ConnectServer::start(Some(master))),
        };
        let writer = runner(&server.url);
        Stack {
            moto,
            queue_url,
            bucket,
            dir: tempfile::tempdir().unwrap(),
            server,
            writer,
        }
    }

    fn parts(&self) -> (&Moto, &str, &str, &ConnectServer, &ConnectRunner) {
        (
            &self.moto,
            &self.queue_url,
            &self.bucket,
            &self.server,
            &self.writer,
        )
    }

    /// A table in the stack's bucket, in a catalog of its own name.
    fn table(&self, catalog: &'static str, name: &'static str) -> Table {
        Table::new(self.dir.path(), &self.moto, &self.bucket, catalog, name)
    }

    /// For the pacing tests: a table `(id, part, payload)` partitioned by `part`, created, and a
    /// configuration with cost pacing — due at 3 files, files below 1 MiB small, outputs aiming
    /// at 8 MiB, a warm server's run cost (1 s), the count and time rules off — and `keys`.
    async fn paced_table(&self, name: &'static str, keys: &str) -> (Table, String) {
        let table = self.table("lakehouse", name);
        table
            .sql(
                &self.writer,
                &[
                    format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                    format!(
                        "CREATE TABLE {} (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part)",
                        table.qualified()
                    ),
                ],
            )
            .await;
        let config = config(
            &self.moto,
            &self.queue_url,
            &self.bucket,
            &self.server.url,
            "",
            &[&table],
        )
        .replace(
            "pacing = false                           # runs at the thresholds (the pacing has its own test)\n",
            "pacing = \"cost\"\n",
        )
        // Cost pacing waits at most max-wait: two hours, longer than any of these tests.
        .replace("max_wait_minutes = 0\n", "max_wait_minutes = 120\n")
        .replace(
            "min_files = 10\n",
            &format!(
                "min_files = 3\nsmall_file_mb = 1\ntarget_file_mb = 8\nrun_cost_seconds = 1\n\
                 file_fix_value_seconds = 0\nfile_hour_cost_seconds = 0\n{keys}"
            ),
        );
        assert!(!config.contains("pacing = false"), "{config}");
        (table, config)
    }
}

fn inserts(table: &str, first_batch: i64, count: i64) -> Vec<String> {
    (first_batch..first_batch + count)
        .map(|batch| {
            let rows: Vec<String> = (0..5)
                .map(|row| {
                    let id = batch * 5 + row;
                    format!("({id}, '2024-05-0{}', {}.25)", 1 + id % 3, id * 3)
                })
                .collect();
            // One task, one data file per commit (local[2] would split five rows in two).
            format!(
                "INSERT INTO {table} SELECT /*+ COALESCE(1) */ * FROM VALUES {}",
                rows.join(", ")
            )
        })
        .collect()
}

fn create(table: &Table) -> Vec<String> {
    vec![
        format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
        format!(
            "CREATE TABLE {} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg",
            table.qualified()
        ),
    ]
}

/// Rows, checksum, data files and `replace` snapshots of a table (as committed now: the
/// server's session caches table metadata).
fn facts(table: &str) -> Vec<String> {
    vec![
        format!("REFRESH TABLE {table}"),
        format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {table}"),
        format!("SELECT count(*) AS data_files FROM {table}.files"),
        format!("SELECT count(*) AS replace_snapshots FROM {table}.snapshots WHERE operation = 'replace'"),
    ]
}

fn table_status(icepack: &Icepack, table: &str) -> serde_json::Value {
    icepack.status()["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["table"] == table)
        .cloned()
        .unwrap()
}

fn config(
    moto: &Moto,
    queue_url: &str,
    bucket: &str,
    connect_url: &str,
    http_listen: &str,
    tables: &[&Table],
) -> String {
    let spark = format!(
        "[spark]\nrunner = \"connect\"\nconnect_url = \"{connect_url}\"\nconnect_timeout_seconds = 5\n"
    );
    config_with(moto, queue_url, bucket, &spark, http_listen, tables)
}

fn config_with(
    moto: &Moto,
    queue_url: &str,
    bucket: &str,
    spark: &str,
    http_listen: &str,
    tables: &[&Table],
) -> String {
    // One section per catalog, however many of the tables share it.
    let catalogs: std::collections::BTreeMap<&str, String> = tables
        .iter()
        .map(|table| {
            (
                table.catalog,
                table.lakehouse.catalog_toml_named(table.catalog),
            )
        })
        .collect();
    let catalogs: Vec<String> = catalogs.into_values().collect();
    let tables: Vec<String> = tables
        .iter()
        .map(|table| {
            let short = table.name.split('.').nth(1).unwrap();
            format!(
                "[[tables]]\ntable = \"{}\"\ncatalog = \"{}\"\nbucket = \"{bucket}\"\nprefix = \"warehouse/analytics/{short}/\"\n",
                table.name, table.catalog
            )
        })
        .collect();
    format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = "{http_listen}"

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout_seconds = 60

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 10

{catalogs}
{spark}
max_concurrent = 2
timeout_minutes = 10
retry_attempts = 1
failure_backoff_initial_seconds = 2
failure_backoff_max_seconds = 4

{tables}
"#,
        endpoint = moto.endpoint,
        catalogs = catalogs.join("\n"),
        tables = tables.join("\n"),
    )
}

/// The table's last run once it has one that started at or after `after` (RFC 3339).
async fn run_after(icepack: &Icepack, table: &str, after: &str) -> serde_json::Value {
    let after = after.to_string();
    wait_until(
        &format!("a run of {table} after {after}"),
        Duration::from_secs(300),
        || {
            let status = table_status(icepack, table);
            let after = after.clone();
            async move {
                let started = status["last_run"]["started_at"].as_str()?.to_string();
                (started.as_str() >= after.as_str()).then_some(status)
            }
        },
    )
    .await
}

/// The table's last run once it has a successful one that started at or after `after`. A run
/// that starts while a writer still commits may lose the race for SQLite's JDBC catalog (one
/// commit at a time across connections); it backs off and the next one runs.
async fn success_after(icepack: &Icepack, table: &str, after: &str) -> serde_json::Value {
    let after = after.to_string();
    wait_until(
        &format!("a successful run of {table} after {after}"),
        Duration::from_secs(300),
        || {
            let status = table_status(icepack, table);
            let after = after.clone();
            async move {
                let last = &status["last_run"];
                let started = last["started_at"].as_str()? >= after.as_str();
                (started && last["outcome"] == "success").then_some(status)
            }
        },
    )
    .await
}

/// The scenario both masters run: two tables due at once compacted through separate sessions,
/// each rewrite exactly once, the data unchanged, the state settled; then a writer commits more
/// files to the first table and its next run (on the same long-lived server) compacts them too.
async fn compaction_through_a_warm_server(master: Option<&str>) {
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

    // The server has the table cached from the run; a writer commits 12 more. However the
    // threshold falls among those commits, the table ends compacted: runs read what is committed.
    let orders = &tables[0];
    orders
        .sql(writer, &inserts(&orders.qualified(), 100, 12))
        .await;
    let after = wait_until(
        "the new commits to be compacted",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, orders.name);
            let writer = &writer;
            async move {
                let settled = status["in_flight_run"].is_null()
                    && status["due"] == false
                    && status["pending_files"] == 1;
                if !settled {
                    return None;
                }
                let after = orders.sql(writer, &facts(&orders.qualified())).await;
                (value(&after, "data_files") == "1").then_some(after)
            }
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

    let opened = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
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
    let statements = icepack::spark::sql::CompactionSql {
        catalog: table.catalog.to_string(),
        table: table.name.to_string(),
        target_file_bytes: 512 * 1024 * 1024,
        partial_progress: false,
        where_filter: None,
        expire_snapshots_older_than_hours: None,
        run_started_millis: now,
        small_file_bytes: 64 * 1024 * 1024,
        task: icepack::spark::sql::SqlTask::Rewrite(icepack::spark::sql::SqlRewrite {
            calls: vec![icepack::spark::sql::RewriteCall {
                min_file_size_bytes: None,
                partition_filter: None,
            }],
            strategy: icepack::strategy::RunStrategy::Binpack,
            min_input_files: 2,
            apply_deletes: None,
        }),
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
        .filter_map(|row| icepack::run::split_object_path(&row[0]))
        .map(|(bucket, key)| (bucket.to_string(), key.to_string()))
        .collect();
    assert_eq!(claimed.len(), 4, "{files:?}");
    let started = chrono::Utc::now().timestamp_millis();
    let run_sql = icepack::spark::sql::CompactionSql {
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
    interrupted.claimed = icepack::spark::runner::ClaimedFiles::listed(claimed.clone());
    let mut sent = interrupted.clone();
    sent.statements.truncate(2); // REFRESH, the rewrite: then icepack died.
    assert_eq!(
        sent.statements[1].kind,
        icepack::spark::sql::StatementKind::Rewrite
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
    other.claimed = icepack::spark::runner::ClaimedFiles::listed(vec![(
        claimed[0].0.clone(),
        "warehouse/never-written.parquet".to_string(),
    )]);
    assert!(compactor.recover(&other).await.unwrap().is_none());
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
enum FigureCase {
    /// 24 tiny files (5 rows each) in one partition, one commit.
    Tiny,
    /// 200 files of about 1 MiB (incompressible) in 10 partitions, one commit.
    Wide,
}

impl FigureCase {
    fn letter(self) -> &'static str {
        match self {
            FigureCase::Tiny => "a",
            FigureCase::Wide => "b",
        }
    }

    /// The files the run rewrites.
    fn files(self) -> u32 {
        match self {
            FigureCase::Tiny => 24,
            FigureCase::Wide => 200,
        }
    }

    fn statements(self, table: &Table) -> Vec<String> {
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

/// A commit of one data file of `rows` rows into partition `part`: a hash per row, which Parquet
/// cannot squeeze, so a few commits make a file past the small-file size.
fn insert_into(table: &str, part: &str, first_id: i64, rows: i64) -> String {
    format!(
        "INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, '{part}', sha2(CAST(id AS STRING), 512) || sha2(CAST(id * 7919 AS STRING), 512) \
         FROM range({first_id}, {})",
        first_id + rows
    )
}

/// Rows and `replace` snapshots of the paced table (as committed now).
fn paced_facts(table: &str) -> Vec<String> {
    vec![
        format!("REFRESH TABLE {table}"),
        format!("SELECT count(*) AS row_count FROM {table}"),
        format!("SELECT count(*) AS replace_snapshots FROM {table}.snapshots WHERE operation = 'replace'"),
    ]
}

/// The table's data files: (path, bytes, partition value).
async fn data_files(table: &Table, writer: &ConnectRunner) -> Vec<(String, u64, String)> {
    let results = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {}", table.qualified()),
                format!(
                    "SELECT file_path, file_size_in_bytes, partition.part AS part FROM {}.files",
                    table.qualified()
                ),
            ],
        )
        .await;
    let files = results
        .iter()
        .find(|set| set.columns.first().map(String::as_str) == Some("file_path"))
        .expect("the files query answers");
    files
        .rows
        .iter()
        .map(|row| (row[0].clone(), row[1].parse().unwrap(), row[2].clone()))
        .collect()
}

/// Issue 17's pacing on the real stack: a burst of commits crossing the threshold in its middle
/// is one run (the settle window); a mid-sized output (past the small-file size) is not
/// rewritten by a later run that compacts new files of its own partition while that partition
/// still receives them; once the partition has gone quiet, its last small file rides along with
/// another partition's run and merges into the mid-sized output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn pacing_a_burst_is_one_run_and_mid_sized_outputs_wait_for_their_partition() {
    if !connect_available(
        "pacing_a_burst_is_one_run_and_mid_sized_outputs_wait_for_their_partition",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (_, _, _, server, writer) = stack.parts();
    // A run waits for 15 quiet seconds (at most 2 min); a partition is quiet after a minute;
    // no fragment rule: this test is about the settle and the tiers.
    let (table, config) = stack
        .paced_table(
            "analytics.paced",
            "fragment_fill_percent = 0\nsettle_seconds = 15\nsettle_max_seconds = 120\n\
             quiet_partition_minutes = 1\n",
        )
        .await;
    let name = table.qualified();
    assert!(config.contains("settle_seconds = 15"));
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // 1. Six commits one after another into part=a: the threshold (3) is crossed at the third;
    //    the run waits for the burst to end and takes all six.
    let started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let rows = 4_000;
    let burst: Vec<String> = (0..6)
        .map(|commit| insert_into(&name, "a", commit * rows, rows))
        .collect();
    table.sql(writer, &burst).await;
    let first = run_after(&icepack, table.name, &started).await;
    assert_eq!(
        first["last_run"]["outcome"],
        "success",
        "{first}\n{}",
        context(&icepack)
    );
    assert_eq!(
        first["last_run"]["rewritten_data_files"], 6,
        "one run took the whole burst: {first}"
    );
    let files = data_files(&table, writer).await;
    assert_eq!(files.len(), 1, "{files:?}");
    let (mid_sized, mid_bytes, _) = files[0].clone();
    assert!(
        mid_bytes >= 1024 * 1024,
        "the burst's output is mid-sized (at least the 1 MiB small-file size): {mid_bytes} bytes"
    );
    // Nothing else runs while the partition is quiet: exactly one rewrite for the burst.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let once = table.sql(writer, &paced_facts(&name)).await;
    assert_eq!(
        value(&once, "replace_snapshots"),
        "1",
        "{}",
        context(&icepack)
    );

    // 2. Three more commits into part=a: its next run rewrites them, not the mid-sized output
    //    (the partition still receives files).
    let second_started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let more: Vec<String> = (6..9)
        .map(|commit| insert_into(&name, "a", commit * rows, rows / 4))
        .collect();
    table.sql(writer, &more).await;
    let second = run_after(&icepack, table.name, &second_started).await;
    // Its output is known from the metadata as of this run: quiet a minute from now.
    let settled = std::time::Instant::now();
    assert_eq!(
        second["last_run"]["outcome"],
        "success",
        "{second}\n{}",
        context(&icepack)
    );
    assert_eq!(
        second["last_run"]["rewritten_data_files"], 3,
        "only the new small files: {second}"
    );
    let files = data_files(&table, writer).await;
    assert!(
        files.iter().any(|(path, _, _)| *path == mid_sized),
        "the mid-sized output is not rewritten again: {files:?}"
    );
    assert_eq!(files.len(), 2, "{files:?}");

    // 3. A minute later part=a is quiet. Three commits into part=b make a run that also takes
    //    part=a's last small file together with the mid-sized output it can now join: two
    //    rewrites in one run (part=b with the small-file floor, part=a with Iceberg's), whose
    //    counts are summed.
    tokio::time::sleep(Duration::from_secs(65).saturating_sub(settled.elapsed())).await;
    let third_started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let other: Vec<String> = (9..12)
        .map(|commit| insert_into(&name, "b", commit * rows, rows / 4))
        .collect();
    table.sql(writer, &other).await;
    let third = run_after(&icepack, table.name, &third_started).await;
    assert_eq!(
        third["last_run"]["outcome"],
        "success",
        "{third}\n{}",
        context(&icepack)
    );
    assert_eq!(
        third["last_run"]["rewritten_data_files"], 5,
        "part=b's three, and part=a's small file with its mid-sized output: {third}"
    );
    let files = data_files(&table, writer).await;
    let in_a: Vec<_> = files.iter().filter(|(_, _, part)| part == "a").collect();
    assert_eq!(in_a.len(), 1, "part=a is one file now: {files:?}");
    assert!(
        !files.iter().any(|(path, _, _)| *path == mid_sized),
        "{files:?}"
    );
    let end = table.sql(writer, &paced_facts(&name)).await;
    assert_eq!(
        value(&end, "row_count"),
        (6 * rows + 6 * (rows / 4)).to_string(),
        "no row lost or doubled"
    );
    assert!(icepack.terminate(run).await.success());
}

/// Issue 17's fragment rule on the real stack, at a warm server's run cost (where it is on by
/// default): small files due by count wait until together they hold a small file's worth, so
/// the run that takes them leaves a file that is no longer small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn fragments_wait_until_their_output_is_no_longer_small() {
    if !connect_available("fragments_wait_until_their_output_is_no_longer_small") {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (_, _, _, server, writer) = stack.parts();
    // A run costs 1 s, so fragment_fill_percent is 100 by default; no settle, nothing goes
    // quiet during the test.
    let (table, config) = stack
        .paced_table(
            "analytics.filling",
            "settle_seconds = 0\nquiet_partition_minutes = 30\n",
        )
        .await;
    let name = table.qualified();
    assert!(config.contains("run_cost_seconds = 1") && !config.contains("fragment_fill"));
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // 1. One commit at a time. From the third the table is due by files, but while its files
    //    hold less than 1 MiB together no run starts.
    let rows = 800;
    let mut commits = 0;
    let mut held_back = 0;
    loop {
        table
            .sql(writer, &[insert_into(&name, "a", commits * rows, rows)])
            .await;
        commits += 1;
        let status = wait_until(
            &format!("commit {commits} counted"),
            Duration::from_secs(60),
            || {
                let status = table_status(&icepack, table.name);
                async move {
                    (status["pending_files"].as_i64() == Some(commits)
                        || !status["in_flight_run"].is_null()
                        || !status["last_run"].is_null())
                    .then_some(status)
                }
            },
        )
        .await;
        if !status["last_run"].is_null() || !status["in_flight_run"].is_null() {
            let claimed = [&status["in_flight_run"], &status["last_run"]]
                .iter()
                .find_map(|run| run["claimed_bytes"].as_u64())
                .unwrap_or(0);
            assert!(
                claimed >= 1024 * 1024,
                "a run started before the files held a small file's worth: {status}\n{}",
                context(&icepack)
            );
            break;
        }
        let bytes = status["pending_bytes"].as_u64().unwrap_or(0);
        if bytes >= 1024 * 1024 {
            break;
        }
        if commits >= 3 {
            // Due by files: a run would start within milliseconds of the batch.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let status = table_status(&icepack, table.name);
            assert!(
                status["last_run"].is_null() && status["in_flight_run"].is_null(),
                "{commits} files of {bytes} bytes wait to fill: {status}"
            );
            assert_eq!(status["explain"]["filling_files"], commits, "{status}");
            held_back += 1;
        }
        assert!(commits < 60, "the files never reached 1 MiB: {status}");
    }
    assert!(
        held_back > 0,
        "the rule held a due table back at least once"
    );

    // 2. The commit that fills it starts the run, which takes every file; its output is not
    //    small. (A run that loses the race for SQLite's catalog to the writer's last commit
    //    backs off and the next one runs.)
    let done = success_after(&icepack, table.name, "").await;
    assert_eq!(done["last_run"]["rewritten_data_files"], commits, "{done}");
    let files = data_files(&table, writer).await;
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].1 >= 1024 * 1024,
        "the output is not small: {files:?}"
    );
    assert!(icepack.terminate(run).await.success());
}

/// Data files of a table with the range of their `id` column: (path, lower, upper).
async fn id_ranges(table: &Table, writer: &ConnectRunner) -> Vec<(String, i64, i64)> {
    let results = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {}", table.qualified()),
                format!(
                    "SELECT file_path AS ranged_file, readable_metrics.id.lower_bound AS lo, \
                     readable_metrics.id.upper_bound AS hi FROM {}.files",
                    table.qualified()
                ),
            ],
        )
        .await;
    let files = results
        .iter()
        .find(|set| set.columns.first().map(String::as_str) == Some("ranged_file"))
        .expect("the files query answers");
    let mut ranges: Vec<(String, i64, i64)> = files
        .rows
        .iter()
        .map(|row| {
            (
                row[0].clone(),
                row[1].parse().unwrap(),
                row[2].parse().unwrap(),
            )
        })
        .collect();
    ranges.sort_by_key(|(_, lower, _)| *lower);
    ranges
}

/// Whether no two files' ranges overlap (each file ends before the next one starts).
fn disjoint(ranges: &[(String, i64, i64)]) -> bool {
    ranges.windows(2).all(|pair| pair[0].2 < pair[1].1)
}

/// Issue 18's rewrite strategies on the real stack: `sort` with a configured order and `auto` on
/// a table with a sort order write output files whose id ranges do not overlap; `auto` on a
/// table without one bin-packs (and its outputs do overlap: the check tells the two apart).
/// `auto` reads the table's order before its first run; status shows it and each run's strategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn sort_and_auto_strategies_order_the_outputs_and_auto_bin_packs_an_unsorted_table() {
    if !connect_available(
        "sort_and_auto_strategies_order_the_outputs_and_auto_bin_packs_an_unsorted_table",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let explicit = stack.table("explicit", "analytics.explicit");
    let ordered = stack.table("ordered", "analytics.ordered");
    let plain = stack.table("plain", "analytics.plain");
    for table in [&explicit, &ordered, &plain] {
        let mut statements = vec![
            format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
            format!(
                "CREATE TABLE {} (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part)",
                table.qualified()
            ),
        ];
        if table.name == ordered.name {
            statements.push(format!(
                "ALTER TABLE {} WRITE ORDERED BY id",
                table.qualified()
            ));
        }
        table.sql(writer, &statements).await;
    }
    // Due at 6 files below 1 MiB; outputs of 2 MiB, so ~3.5 MiB of input makes two or more.
    let config = config(
        moto,
        queue_url,
        bucket,
        &server.url,
        "",
        &[&explicit, &ordered, &plain],
    )
    .replace("min_files = 10\n", "min_files = 6\nsmall_file_mb = 1\ntarget_file_mb = 2\n")
    .replace(
        "table = \"analytics.explicit\"\n",
        "table = \"analytics.explicit\"\nstrategy = \"sort\"\nsort_order = \"id DESC NULLS LAST\"\n",
    )
    .replace(
        "table = \"analytics.ordered\"\n",
        "table = \"analytics.ordered\"\nstrategy = \"auto\"\n",
    )
    .replace(
        "table = \"analytics.plain\"\n",
        "table = \"analytics.plain\"\nstrategy = \"auto\"\n",
    );
    assert_eq!(config.matches("strategy = ").count(), 3, "{config}");
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // Six commits a table, each of ids spread over the whole range (each file spans it).
    let started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let rows = 4_000;
    for table in [&explicit, &ordered, &plain] {
        let commits: Vec<String> = (0..6)
            .map(|commit| {
                format!(
                    "INSERT INTO {} SELECT /*+ COALESCE(1) */ (id * 7919) % 1000003, 'a', \
                     sha2(CAST(id AS STRING), 512) || sha2(CAST(id * 31 AS STRING), 512) \
                     FROM range({}, {})",
                    table.qualified(),
                    commit * rows,
                    (commit + 1) * rows
                )
            })
            .collect();
        table.sql(writer, &commits).await;
        let before = id_ranges(table, writer).await;
        assert_eq!(before.len(), 6, "{before:?}");
        assert!(!disjoint(&before), "the written files overlap: {before:?}");
    }

    for (table, strategy, sorted) in [
        (&explicit, "sort", true),
        (&ordered, "sort", true),
        (&plain, "binpack", false),
    ] {
        let status = run_after(&icepack, table.name, &started).await;
        let last = &status["last_run"];
        assert_eq!(
            last["outcome"],
            "success",
            "{status}\n{}",
            context(&icepack)
        );
        assert_eq!(last["strategy"], strategy, "{}: {status}", table.name);
        assert_eq!(last["rewritten_data_files"], 6, "{status}");
        let after = id_ranges(table, writer).await;
        assert!(
            after.len() >= 2,
            "{}: several outputs: {after:?}",
            table.name
        );
        assert_eq!(
            disjoint(&after),
            sorted,
            "{} ({strategy}): output ranges {after:?}",
            table.name
        );
        let facts = table
            .sql(
                writer,
                &[format!(
                    "SELECT count(*) AS row_count FROM {}",
                    table.qualified()
                )],
            )
            .await;
        assert_eq!(value(&facts, "row_count"), (6 * rows).to_string());
    }
    // `auto` read each table's order before its run; the explicit sort needed none.
    let orders: Vec<serde_json::Value> = [&explicit, &ordered, &plain]
        .iter()
        .map(|table| table_status(&icepack, table.name)["table_sort_order"].clone())
        .collect();
    assert_eq!(orders[1], "id ASC NULLS FIRST", "{orders:?}");
    assert_eq!(orders[2], "", "{orders:?}");
    assert_eq!(table_status(&icepack, ordered.name)["strategy"], "auto");
    assert!(icepack.terminate(run).await.success());
}

/// Issue 18's `rewrite_manifests` on the real stack: every commit adds a manifest; their own S3
/// events (`metadata/*-m*.avro`, not the `snap-*.avro` manifest lists) make the table due past
/// `max_manifests`, with no data compaction due; the run merges them and the count drops, the
/// data untouched; status follows the count from the metadata and the events after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops() {
    if !connect_available(
        "many_manifests_from_their_events_lead_to_rewrite_manifests_and_the_count_drops",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.manifested");
    let name = table.qualified();
    table.sql(writer, &create(&table)).await;
    // No data compaction: 100 small files would be needed. More than 5 manifests: maintenance.
    let config = config(moto, queue_url, bucket, &server.url, "", &[&table])
        .replace("min_files = 10\n", "min_files = 100\nmax_manifests = 5\n");
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    let manifest_count = |results: &[icepack::spark::result::ResultSet]| -> u64 {
        value(results, "manifest_count").parse().unwrap()
    };
    let counts = vec![
        format!("REFRESH TABLE {name}"),
        format!("SELECT count(*) AS manifest_count FROM {name}.manifests"),
        format!("SELECT count(*) AS row_count FROM {name}"),
        format!("SELECT count(*) AS data_files FROM {name}.files"),
    ];
    let started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    table.sql(writer, &inserts(&name, 0, 8)).await;
    let before = table.sql(writer, &counts).await;
    assert!(manifest_count(&before) >= 6, "{before:?}");

    let status = success_after(&icepack, table.name, &started).await;
    let last = &status["last_run"];
    assert_eq!(
        last["task"],
        "rewrite_manifests",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["trigger"], "rewrite_manifests", "{status}");
    assert!(
        last["manifests_before"].as_u64().unwrap() > 5,
        "due past max_manifests: {status}"
    );
    assert!(
        last["manifests_after"].as_u64().unwrap() <= 3,
        "merged (commits may land after the run): {status}"
    );
    assert!(last["rewritten_data_files"].is_null(), "{status}");

    // The data is untouched: the same rows and data files, none of them rewritten.
    let after = table.sql(writer, &counts).await;
    assert!(
        manifest_count(&after) < manifest_count(&before),
        "{after:?}"
    );
    assert_eq!(value(&after, "row_count"), "40");
    assert_eq!(value(&after, "data_files"), "8");
    // Status counts the manifests as the metadata has them once the last events are in.
    let expected = manifest_count(&after);
    wait_until(
        "status counting the table's manifests",
        Duration::from_secs(60),
        || {
            let manifests = table_status(&icepack, table.name)["manifests"].as_u64();
            async move { (manifests == Some(expected)).then_some(()) }
        },
    )
    .await;
    assert_eq!(table_status(&icepack, table.name)["pending_files"], 8);
    let (status_ok, _, _) = icepack.command(&["status"]);
    assert!(status_ok, "the text status renders the maintenance fields");
    assert!(icepack.terminate(run).await.success());
}

/// Issue 18's `remove_orphan_files` on the real stack, on a table in a local warehouse (a file's
/// age is its modification time, which a test can set; S3 servers stamp uploads with now): the
/// schedule's first run is a dry run that finds the planted orphan older than the limit and
/// removes nothing; the next run (started over HTTP) removes it and keeps a fresh orphan, which a
/// writer still committing could own, and every file the table references.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn remove_orphan_files_lists_first_then_removes_only_old_orphans() {
    if !connect_available("remove_orphan_files_lists_first_then_removes_only_old_orphans") {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let mut table = stack.table("lakehouse", "analytics.orphaned");
    let warehouse = stack.dir.path().join("local-warehouse");
    std::fs::create_dir_all(&warehouse).unwrap();
    table.lakehouse.catalog.warehouse = format!("file://{}", warehouse.display());
    table.lakehouse.catalog.io_impl = "org.apache.iceberg.hadoop.HadoopFileIO".to_string();
    table.lakehouse.catalog.s3_endpoint = String::new();
    let name = table.qualified();
    table.sql(writer, &create(&table)).await;
    table.sql(writer, &inserts(&name, 0, 3)).await;

    // Two files no snapshot references: one written four days ago, one just now.
    let data_dir = warehouse.join("analytics/orphaned/data");
    assert!(data_dir.is_dir(), "{}", data_dir.display());
    let old = data_dir.join("00000-0-orphan-old.parquet");
    let fresh = data_dir.join("00000-0-orphan-fresh.parquet");
    for path in [&old, &fresh] {
        std::fs::write(path, b"left behind by a failed writer").unwrap();
    }
    let four_days_ago = std::time::SystemTime::now() - Duration::from_secs(4 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(four_days_ago)
        .unwrap();

    let http = format!("127.0.0.1:{}", support::free_port());
    let config = config(moto, queue_url, bucket, &server.url, &http, &[&table]).replace(
        "min_files = 10\n",
        "min_files = 100\nremove_orphans_every_hours = 24\n",
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());
    let orphan_run = |icepack: &Icepack, dry_run: bool| {
        let status = table_status(icepack, table.name);
        let last = status["last_run"].clone();
        (last["task"] == "remove_orphan_files" && last["dry_run"] == dry_run).then_some(status)
    };

    // 1. Never run: due at once, and a dry run.
    let status = wait_until("the dry run", Duration::from_secs(300), || {
        let found = orphan_run(&icepack, true);
        async move { found }
    })
    .await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(status["last_run"]["orphan_files"], 1, "{status}");
    assert_eq!(status["orphans"]["found_by_dry_run"], 1, "{status}");
    assert_eq!(status["orphans"]["next_is_dry_run"], false, "{status}");
    assert!(old.exists() && fresh.exists(), "a dry run removes nothing");

    // 2. The next run, asked for over HTTP: the old orphan goes, the fresh one stays.
    let (answer, body) = ask_maintenance(&http, table.name, "remove_orphan_files").await;
    assert_eq!(answer, 202, "{body}");
    let status = wait_until("the removal", Duration::from_secs(300), || {
        let found = orphan_run(&icepack, false);
        async move { found }
    })
    .await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(status["last_run"]["orphan_files"], 1, "{status}");
    assert_eq!(status["orphans"]["removed"], 1, "{status}");
    assert!(!old.exists(), "the old orphan is removed");
    assert!(fresh.exists(), "a file younger than 72 h is kept");
    let facts = table
        .sql(
            writer,
            &[format!("SELECT count(*) AS row_count FROM {name}")],
        )
        .await;
    assert_eq!(
        value(&facts, "row_count"),
        "15",
        "every referenced file is kept"
    );
    let (unknown, body) = ask_maintenance(&http, table.name, "vacuum").await;
    assert_eq!(unknown, 404, "{body}");
    assert!(icepack.terminate(run).await.success());
}

/// Issue 18's delete files on the real stack: a merge-on-read table (format v2) gets position
/// deletes from `DELETE` statements; their own S3 events (`...-deletes.parquet`) make it due at
/// `delete_file_threshold` with no compaction due; the run rewrites the data files that carry
/// deletes, applying them, and drops the delete files; the rows are those the deletes left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn position_deletes_from_their_events_are_applied_by_a_run_due_by_deletes() {
    if !connect_available("position_deletes_from_their_events_are_applied_by_a_run_due_by_deletes")
    {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.deleted");
    let name = table.qualified();
    create_merge_on_read(&table, writer, 2).await;
    table.sql(writer, &inserts(&name, 0, 4)).await;
    let config = config(moto, queue_url, bucket, &server.url, "", &[&table]).replace(
        "min_files = 10\n",
        "min_files = 100\ndelete_file_threshold = 6\n",
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // Six DELETEs of one row each, each writing a position delete file.
    let started = icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let deletes: Vec<String> = [1, 4, 7, 10, 13, 16]
        .iter()
        .map(|id| format!("DELETE FROM {name} WHERE id = {id}"))
        .collect();
    table.sql(writer, &deletes).await;
    let before = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
                format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {name}"),
            ],
        )
        .await;
    // Iceberg 1.10 keeps one delete file per data file (a later DELETE of the same file
    // replaces it): six written, one per touched data file live.
    assert!(
        value(&before, "delete_files").parse::<u64>().unwrap() >= 1,
        "{before:?}"
    );
    assert_eq!(value(&before, "row_count"), "14");

    // A run that starts while the last DELETE commits may lose the race (see success_after, and
    // Iceberg's check for deletes added meanwhile): the next one runs.
    let status = success_after(&icepack, table.name, &started).await;
    let last = &status["last_run"];
    assert_eq!(
        last["trigger"],
        "deletes",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["task"], "rewrite_data_files", "{status}");
    let after = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
                format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {name}"),
            ],
        )
        .await;
    let detail = table
        .sql(
            writer,
            &[
                format!("SELECT data_file.content AS c, data_file.file_path AS p, data_file.record_count AS n, sequence_number FROM {name}.entries WHERE status < 2"),
                format!("SELECT snapshot_id, operation, summary FROM {name}.snapshots"),
            ],
        )
        .await;
    assert_eq!(
        value(&after, "delete_files"),
        "0",
        "the deletes are applied: {after:?}\n{detail:?}\n{status}"
    );
    assert_eq!(
        value(&after, "row_count"),
        "14",
        "rows unchanged by the run"
    );
    assert_eq!(value(&after, "checksum"), value(&before, "checksum"));
    let deletes = &table_status(&icepack, table.name)["deletes"];
    assert_eq!(deletes["position_files"], 0, "{deletes}");
    assert_eq!(deletes["due"], false, "{deletes}");
    assert!(icepack.terminate(run).await.success());
}

/// `table` as `create` makes it, of format `version`, deleting by merge-on-read (delete files
/// beside the data rather than data rewritten).
async fn create_merge_on_read(table: &Table, writer: &ConnectRunner, version: u8) {
    let name = table.qualified();
    table
        .sql(
            writer,
            &[
                format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                format!(
                    "CREATE TABLE {name} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg \
                     TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = 'merge-on-read')"
                ),
            ],
        )
        .await;
}

/// Issue 20: the operator's page in a real browser (headless Chromium) against a running service
/// with real runs: a table compacted through Spark, one whose runs fail (its Iceberg table does
/// not exist), one with a few small files below its threshold. What a person would see: the
/// rows and their outcomes, the failure's class, the filter, a table's chart with its run
/// marked and its history, the tenants; no token anywhere; screenshots for the README.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn the_operator_page_in_a_real_browser_shows_tables_runs_failures_and_the_chart() {
    let test = "the_operator_page_in_a_real_browser_shows_tables_runs_failures_and_the_chart";
    if !connect_available(test) || !support::browser::available(test) {
        return;
    }
    use support::browser::{count, element, rendered, screenshot};
    let _alone = HEAVY.write().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let orders = stack.table("lakehouse", "analytics.orders");
    let clicks = stack.table("clicks", "analytics.clicks");
    let refunds = stack.table("refunds", "analytics.refunds");
    let mut setup = create(&orders);
    setup.extend(inserts(&orders.qualified(), 0, 12));
    orders.sql(writer, &setup).await;
    let mut setup = create(&clicks);
    setup.extend(inserts(&clicks.qualified(), 0, 3));
    clicks.sql(writer, &setup).await;

    let port = support::free_port();
    let mut icepack = Icepack::with_config(&config(
        moto,
        queue_url,
        bucket,
        &server.url,
        &format!("127.0.0.1:{port}"),
        &[&orders, &clicks, &refunds],
    ));
    icepack.env = vec![("ICEPACK_API_TOKEN".to_string(), "PAGETOKEN".to_string())];
    let run = icepack.spawn_run("");
    // Small files announced for a table the catalog does not have: its runs fail.
    for n in 0..10 {
        moto.put_object(
            bucket,
            &format!("warehouse/analytics/refunds/data/0000{n}-0-x.parquet"),
            1024,
        )
        .await;
    }
    let compacted = success_after(&icepack, orders.name, "").await;
    let failed = wait_until(
        "a failed run of analytics.refunds",
        Duration::from_secs(120),
        || {
            let status = table_status(&icepack, refunds.name);
            async move { (status["last_run"]["outcome"] == "failure").then_some(status) }
        },
    )
    .await;
    let class = failed["last_run"]["failure_class"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the clicks to be counted", Duration::from_secs(60), || {
        let status = table_status(&icepack, clicks.name);
        async move { (status["pending_files"] == 3).then_some(()) }
    })
    .await;

    let base = format!("http://127.0.0.1:{port}");
    let overview = rendered(&format!("{base}/#/"));
    assert_eq!(
        count(&overview, "tr", "data-table="),
        3,
        "three rows:\n{overview}"
    );
    let row = |dom: &str, table: &str| {
        element(dom, "tr", &format!("data-table=\"{table}\""))
            .unwrap_or_else(|| panic!("no row of {table}:\n{overview}"))
            .to_string()
    };
    let orders_row = row(&overview, orders.name);
    assert!(orders_row.contains("pill ok"), "{orders_row}");
    let refunds_row = row(&overview, refunds.name);
    assert!(
        refunds_row.contains("failing") && refunds_row.contains(&format!(">{class}<")),
        "the failure's class on its row: {refunds_row}"
    );
    let clicks_row = row(&overview, clicks.name);
    assert!(
        clicks_row.contains(">3<") && clicks_row.contains(">never<"),
        "{clicks_row}"
    );
    // Read-only without the token: the page never has it, and asks for it.
    assert!(overview.contains("API token"), "{overview}");

    // The server filters: only the failing table.
    let failing = rendered(&format!("{base}/#/?state=failing"));
    assert_eq!(count(&failing, "tr", "data-table="), 1, "{failing}");
    assert!(element(&failing, "tr", refunds.name).is_some(), "{failing}");

    // A table: its chart with the run marked, its history, and the button that needs the token.
    let page = rendered(&format!("{base}/#/table/{}", orders.name));
    let chart = element(&page, "div", "id=\"chart\"").expect("a chart");
    let run_id = compacted["last_run"]["run_id"].as_str().unwrap();
    assert!(chart.contains("class=\"line\""), "{chart}");
    assert!(
        chart.contains(&format!("data-run=\"{run_id}\"")) && chart.contains("run-ok"),
        "the run marked on the chart: {chart}"
    );
    let history = element(&page, "table", "id=\"runs\"").expect("the run history");
    assert!(history.contains(">success<"), "{history}");
    let compact = element(&page, "button", "data-action=\"Compact now\"").expect("the button");
    assert!(compact.contains("disabled"), "{compact}");
    let failed_page = rendered(&format!("{base}/#/table/{}", refunds.name));
    let history = element(&failed_page, "table", "id=\"runs\"").expect("the run history");
    assert!(history.contains(&format!(">{class}<")), "{history}");
    assert!(
        element(&failed_page, "div", "id=\"chart\"").is_some_and(|chart| chart.contains("run-bad")),
        "{failed_page}"
    );

    let tenants = rendered(&format!("{base}/#/tenants"));
    let tenant = element(&tenants, "table", "id=\"tenants\"").expect("the tenants");
    assert!(tenant.contains(">default<"), "{tenant}");

    for (what, dom) in [
        ("the overview", &overview),
        ("a table", &page),
        ("the tenants", &tenants),
    ] {
        assert!(!dom.contains("PAGETOKEN"), "the token in {what}");
    }
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("icepack-page");
    std::fs::create_dir_all(&shots).unwrap();
    screenshot(
        &format!("{base}/#/"),
        &shots.join("overview.png"),
        1400,
        560,
    );
    screenshot(
        &format!("{base}/#/table/{}", orders.name),
        &shots.join("table.png"),
        1400,
        900,
    );
    eprintln!("screenshots of the page: {}", shots.display());
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}

/// The current metadata of `name` as JSON: the newest entry of its metadata log (the current file
/// is the last), read from moto.
async fn current_metadata(table: &Table, writer: &ConnectRunner, moto: &Moto) -> serde_json::Value {
    let name = table.qualified();
    let read = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {name}"),
                format!(
                    "SELECT file AS metadata_file FROM {name}.metadata_log_entries \
                     ORDER BY timestamp DESC LIMIT 1"
                ),
            ],
        )
        .await;
    let path = value(&read, "metadata_file");
    let (bucket, key) =
        icepack::run::split_object_path(&path).unwrap_or_else(|| panic!("not an S3 path: {path}"));
    serde_json::from_slice(&moto.get_object(bucket, key).await).unwrap()
}

/// Whether `metadata` lists a file of `list` (`statistics`, `partition-statistics`) for its
/// current snapshot.
fn statistics_of_current_snapshot(metadata: &serde_json::Value, list: &str) -> bool {
    let current = &metadata["current-snapshot-id"];
    metadata[list].as_array().is_some_and(|files| {
        files
            .iter()
            .any(|file| &file["snapshot-id"] == current && file["statistics-path"].is_string())
    })
}

/// The table's run history, newest first, from the HTTP API.
async fn runs_of(http: &str, table: &str) -> Vec<serde_json::Value> {
    support::get_json(&format!("http://{http}/v1/tables/{table}/runs")).await["runs"]
        .as_array()
        .unwrap()
        .clone()
}

/// Issue 33 items 3 and 5, format v3 on Spark 4.0 with Iceberg 1.10, two tables on one Spark
/// Connect server and one icepack:
/// - `lineage`, v3 merge-on-read: its small files are sorted (`strategy = "sort"`) into one,
///   `expire_snapshots` after it without a failure note, the rows, checksum,
///   format and every row's lineage (`_row_id`, `_last_updated_sequence_number`) unchanged; then
///   `compute_statistics` writes its Puffin statistics for the current snapshot; DELETEs write
///   deletion vectors (Puffin files), counted from their S3 events; the run due by them merges
///   them, what the metadata then has is counted, the lineage unchanged.
///   Then `rewrite_manifests` and `remove_orphan_files` (a dry run, listing the S3 location
///   through the table's FileIO) succeed on it, keeping the rows, the lineage and a fresh file.
/// - `upgraded`, v2, `engine = "auto"`, partitioned: bin-packed by the native engine, its
///   statistics (table and partition) computed by Spark with the reason; upgraded to v3 while
///   icepack watches it, its next run goes to Spark because the native engine writes v2 only,
///   succeeds, and leaves the pending files the table's own (not the partition statistics,
///   Parquet in its metadata directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn format_v3_tables_keep_their_lineage_count_their_vectors_and_take_an_upgrade() {
    let test = "format_v3_tables_keep_their_lineage_count_their_vectors_and_take_an_upgrade";
    if !connect_available(test) {
        return;
    }
    let _shared = HEAVY.read().await;
    let started = std::time::Instant::now();
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let table = stack.table("lakehouse", "analytics.lineage");
    let name = table.qualified();
    create_merge_on_read(&table, writer, 3).await;
    let upgraded = stack.table("upgrading", "analytics.upgraded");
    let upgraded_name = upgraded.qualified();
    upgraded
        .sql(
            writer,
            &[
                format!(
                    "CREATE NAMESPACE IF NOT EXISTS {}.analytics",
                    upgraded.catalog
                ),
                format!(
                    "CREATE TABLE {upgraded_name} (id BIGINT, order_date STRING, amount DOUBLE) \
                     USING iceberg PARTITIONED BY (order_date) \
                     TBLPROPERTIES ('format-version' = '2', 'write.distribution-mode' = 'none')"
                ),
            ],
        )
        .await;
    // The upgraded table's rows: twelve files in one partition, in one commit (SQLite's JDBC
    // catalog takes one commit at a time across processes, and the native engine commits from
    // icepack's: a writer committing file after file would race it).
    let twelve_files = |first_id: i64| -> Vec<String> {
        let rows: Vec<String> = (first_id..first_id + 60)
            .map(|id| format!("({id}, '2024-05-01', {}.25)", id * 3))
            .collect();
        vec![format!(
            "INSERT INTO {upgraded_name} SELECT /*+ REPARTITION(12) */ * FROM VALUES {}",
            rows.join(", ")
        )]
    };
    let lineage = |name: &str| {
        vec![
            format!("REFRESH TABLE {name}"),
            format!(
                "SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum, \
                 sum(hash(id, _row_id, _last_updated_sequence_number)) AS lineage, \
                 count(DISTINCT _row_id) AS row_ids FROM {name}"
            ),
            format!("SELECT count(*) AS data_files FROM {name}.files WHERE content = 0"),
            format!("SELECT count(*) AS delete_files FROM {name}.delete_files"),
            format!("SHOW TBLPROPERTIES {name} ('format-version')"),
        ]
    };
    let http = format!("127.0.0.1:{}", support::free_port());
    let config = config(
        moto,
        queue_url,
        bucket,
        &server.url,
        &http,
        &[&table, &upgraded],
    )
    .replace(
        "min_files = 10\n",
        "min_files = 10\ndelete_file_threshold = 3\n",
    )
    .replace(
        "table = \"analytics.lineage\"\n",
        "table = \"analytics.lineage\"\nstrategy = \"sort\"\nsort_order = \"id\"\n\
             compute_statistics = true\nexpire_snapshots_older_than_hours = 1\n",
    )
    .replace(
        "table = \"analytics.upgraded\"\n",
        "table = \"analytics.upgraded\"\nengine = \"auto\"\ncompute_statistics = true\n",
    );
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());
    // The last run of `table` once it is `task`, started at or after `after`, and none is in flight.
    let settled = |table: &'static str, task: &'static str, after: String| {
        let icepack = &icepack;
        async move {
            wait_until(
                &format!("a {task} run of {table} after {after}"),
                Duration::from_secs(300),
                || {
                    let status = table_status(icepack, table);
                    let after = after.clone();
                    async move {
                        let last = &status["last_run"];
                        let started = last["started_at"].as_str()? >= after.as_str();
                        let idle = status["in_flight_run"].is_null();
                        (started && idle && last["task"] == task).then_some(status)
                    }
                },
            )
            .await
        }
    };
    let now = || icepack::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());

    let writing = now();
    table.sql(writer, &inserts(&name, 0, 12)).await;
    let written = upgraded
        .sql(
            writer,
            &[
                twelve_files(0).remove(0),
                format!("SELECT count(*) AS data_files FROM {upgraded_name}.files"),
            ],
        )
        .await;
    assert_eq!(value(&written, "data_files"), "12", "{written:?}");
    let before = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&before, "row_count"), "60", "{before:?}");
    assert_eq!(
        value(&before, "row_ids"),
        "60",
        "every row has its id: {before:?}"
    );
    assert_eq!(value(&before, "data_files"), "12", "{before:?}");
    // A run that starts while the last INSERTs commit rewrites what is committed (or nothing,
    // below min-input-files): the table is compacted once runs have rewritten all twelve; the
    // statistics of what they left follow.
    wait_until(
        "the twelve files rewritten",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, table.name);
            async move { (status["compacted_files"].as_u64()? >= 12).then_some(()) }
        },
    )
    .await;
    let status = settled(table.name, "compute_statistics", writing.clone()).await;
    assert_eq!(
        status["last_run"]["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(
        status["last_run"]["statistics_files"], 1,
        "table statistics (unpartitioned): {status}"
    );
    let compacted = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&compacted, "data_files"), "1", "{compacted:?}");
    assert_eq!(value(&compacted, "checksum"), value(&before, "checksum"));
    assert_eq!(
        value(&compacted, "lineage"),
        value(&before, "lineage"),
        "row ids and their sequence numbers survive the sort: {before:?} {compacted:?}"
    );
    assert!(
        format!("{compacted:?}").contains("\"3\""),
        "still format v3: {compacted:?}"
    );
    let metadata = current_metadata(&table, writer, moto).await;
    assert!(
        statistics_of_current_snapshot(&metadata, "statistics"),
        "NDV sketches for the current snapshot: {}",
        metadata["statistics"]
    );
    let history = runs_of(&http, table.name).await;
    let rewrites: Vec<&serde_json::Value> = history
        .iter()
        .filter(|run| {
            run["task"] == "rewrite_data_files" && run["rewritten_data_files"].as_u64() > Some(0)
        })
        .collect();
    assert!(!rewrites.is_empty(), "{history:?}");
    for rewrite in &rewrites {
        assert_eq!(rewrite["strategy"], "sort", "{rewrite}");
        assert!(
            rewrite["maintenance_failed"].is_null(),
            "expire_snapshots ran on v3: {rewrite}"
        );
    }

    // The upgraded table: its v2 files bin-packed by the native engine, its statistics by Spark.
    let status = settled(upgraded.name, "compute_statistics", writing.clone()).await;
    let history = runs_of(&http, upgraded.name).await;
    let native = history
        .iter()
        .find(|run| run["task"] == "rewrite_data_files" && run["outcome"] == "success")
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(native["engine"], "native", "{native}");
    let last = &status["last_run"];
    assert_eq!(
        last["outcome"],
        "success",
        "{status}\n{}",
        context(&icepack)
    );
    assert_eq!(last["engine"], "spark", "{last}");
    assert!(
        last["engine_detail"]
            .as_str()
            .unwrap()
            .contains("auto: compute_statistics is a Spark procedure"),
        "{last}"
    );
    assert_eq!(
        last["statistics_files"], 2,
        "table and partition statistics: {last}"
    );
    let metadata = current_metadata(&upgraded, writer, moto).await;
    assert!(
        statistics_of_current_snapshot(&metadata, "statistics"),
        "{metadata}"
    );
    assert!(
        statistics_of_current_snapshot(&metadata, "partition-statistics"),
        "{}",
        metadata["partition-statistics"]
    );
    assert_eq!(metadata["format-version"], 2);

    // Upgraded to v3 while icepack watches it; twelve more files: the native engine writes v2
    // only, so the run goes to Spark and says why.
    let upgrading = now();
    upgraded
        .sql(
            writer,
            &[format!(
                "ALTER TABLE {upgraded_name} SET TBLPROPERTIES ('format-version' = '3')"
            )],
        )
        .await;
    upgraded.sql(writer, &twelve_files(60)).await;
    let status = settled(upgraded.name, "compute_statistics", upgrading.clone()).await;
    let history = runs_of(&http, upgraded.name).await;
    let after_upgrade: Vec<&serde_json::Value> = history
        .iter()
        .filter(|run| run["started_at"].as_str().unwrap() >= upgrading.as_str())
        .collect();
    let routed = after_upgrade
        .iter()
        .find(|run| run["task"] == "rewrite_data_files" && run["outcome"] == "success")
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(routed["engine"], "spark", "{routed}");
    assert!(
        routed["engine_detail"]
            .as_str()
            .unwrap()
            .contains("format version"),
        "the reason: {routed}"
    );
    assert_eq!(status["last_run"]["outcome"], "success", "{status}");
    let facts = upgraded
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {upgraded_name}"),
                format!("SELECT count(*) AS row_count, count(DISTINCT id) AS ids, sum(id) AS id_sum FROM {upgraded_name}"),
                format!("SELECT count(*) AS data_files FROM {upgraded_name}.files WHERE content = 0"),
                format!("SHOW TBLPROPERTIES {upgraded_name} ('format-version')"),
            ],
        )
        .await;
    assert_eq!(value(&facts, "row_count"), "120", "{facts:?}");
    assert_eq!(value(&facts, "ids"), "120", "{facts:?}");
    assert_eq!(
        value(&facts, "id_sum"),
        (0..120).sum::<i64>().to_string(),
        "{facts:?}"
    );
    assert!(
        format!("{facts:?}").contains("\"3\""),
        "now format v3: {facts:?}"
    );
    let metadata = current_metadata(&upgraded, writer, moto).await;
    assert_eq!(metadata["format-version"], 3);
    assert!(
        statistics_of_current_snapshot(&metadata, "partition-statistics"),
        "{}\n{:?}",
        metadata["partition-statistics"],
        runs_of(&http, upgraded.name).await,
    );

    // Three DELETEs on `lineage`: deletion vectors (one live per data file, each replacing the
    // last), three Puffin uploads whose events make the table due by its deletes.
    let deleting = now();
    let deletes: Vec<String> = [2, 22, 42]
        .iter()
        .map(|id| format!("DELETE FROM {name} WHERE id = {id}"))
        .collect();
    table.sql(writer, &deletes).await;
    let deleted = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&deleted, "row_count"), "57", "{deleted:?}");
    assert!(
        value(&deleted, "delete_files").parse::<u64>().unwrap() >= 1,
        "a deletion vector is live: {deleted:?}"
    );
    // Few deleted rows (3 of 60): the run merges delete files (`rewrite_position_delete_files`);
    // a v3 table already holds one deletion vector a data file, so what is left is read back
    // from the metadata, and the events counted meanwhile are settled by it.
    // It changed the table when it rewrote or added a delete file: its statistics follow.
    let history = wait_until(
        "the deletes' run (and its statistics, if it changed the table)",
        Duration::from_secs(300),
        || {
            let idle = table_status(&icepack, table.name)["in_flight_run"].is_null();
            let http = http.clone();
            let deleting = deleting.clone();
            async move {
                let history = runs_of(&http, table.name).await;
                let since: Vec<&serde_json::Value> = history
                    .iter()
                    .filter(|run| run["started_at"].as_str() >= Some(deleting.as_str()))
                    .collect();
                let merged = since.iter().find(|run| {
                    run["task"] == "rewrite_position_delete_files" && run["outcome"] == "success"
                })?;
                let changed = merged["delete_files_rewritten"].as_u64() > Some(0)
                    || merged["delete_files_added"].as_u64() > Some(0);
                let computed = since.iter().any(|run| run["task"] == "compute_statistics");
                (idle && (computed || !changed)).then_some(history)
            }
        },
    )
    .await;
    let merged = history
        .iter()
        .find(|run| {
            run["task"] == "rewrite_position_delete_files"
                && run["started_at"].as_str().unwrap() >= deleting.as_str()
        })
        .unwrap_or_else(|| panic!("{history:?}\n{}", context(&icepack)));
    assert_eq!(merged["outcome"], "success", "{merged}");
    let after = table.sql(writer, &lineage(&name)).await;
    let live: u64 = value(&after, "delete_files").parse().unwrap();
    assert!(
        live <= 1,
        "at most one deletion vector a data file: {after:?}"
    );
    assert_eq!(value(&after, "row_count"), "57");
    assert_eq!(value(&after, "checksum"), value(&deleted, "checksum"));
    assert_eq!(
        value(&after, "lineage"),
        value(&deleted, "lineage"),
        "lineage survives the deletes' run"
    );
    let deletes = &table_status(&icepack, table.name)["deletes"];
    assert_eq!(deletes["position_files"], live, "{deletes}");
    assert_eq!(deletes["announced_since_read"], 0, "{deletes}");
    assert_eq!(deletes["due"], false, "{deletes}");
    // The upgraded table's pending files are its own small data files (the output), not the
    // partition statistics its runs wrote into its metadata directory as Parquet.
    let status = table_status(&icepack, upgraded.name);
    assert_eq!(
        status["pending_files"].as_u64(),
        value(&facts, "data_files").parse::<u64>().ok(),
        "{status}"
    );
    assert_eq!(status["unconfirmed_files"], 0, "{status}");

    // Manifests and orphans on v3, asked for over HTTP: `rewrite_manifests` keeps every row and
    // its lineage; `remove_orphan_files` (the table's first: a dry run) lists the table's S3
    // location through its FileIO (`prefix_listing`), where Hadoop has no file system for `s3`,
    // and keeps a fresh file no snapshot references (younger than `orphan_older_than_hours`).
    let fresh_orphan = format!(
        "warehouse/analytics/{}/data/never-committed.parquet",
        table.name.rsplit('.').next().unwrap()
    );
    moto.put_object(bucket, &fresh_orphan, 64).await;
    for task in ["rewrite_manifests", "remove_orphan_files"] {
        let asked = now();
        let (answer, body) = ask_maintenance(&http, table.name, task).await;
        assert_eq!(answer, 202, "{task}: {body}");
        let status = settled(table.name, task, asked).await;
        let last = &status["last_run"];
        assert_eq!(
            last["outcome"],
            "success",
            "{task} on v3: {status}\n{}",
            context(&icepack)
        );
        if task == "remove_orphan_files" {
            assert_eq!(last["dry_run"], true, "{last}");
            assert_eq!(last["orphan_files"], 0, "the fresh file is kept: {last}");
            assert!(status["orphans"]["last_failed_at"].is_null(), "{status}");
            assert_eq!(status["orphans"]["next_is_dry_run"], false, "{status}");
        }
    }
    assert_eq!(moto.get_object(bucket, &fresh_orphan).await.len(), 64);
    let maintained = table.sql(writer, &lineage(&name)).await;
    assert_eq!(value(&maintained, "row_count"), "57", "{maintained:?}");
    assert_eq!(value(&maintained, "checksum"), value(&deleted, "checksum"));
    assert_eq!(
        value(&maintained, "lineage"),
        value(&deleted, "lineage"),
        "lineage survives rewrite_manifests"
    );
    assert!(icepack.terminate(run).await.success());
    println!(
        "FIGURES format v3: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// `POST /v1/tables/{table}/maintenance/{task}` on icepack's HTTP surface at `http`: the answer's
/// status and body.
async fn ask_maintenance(http: &impl std::fmt::Display, table: &str, task: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!(
            "http://{http}/v1/tables/{table}/maintenance/{task}"
        ))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}
