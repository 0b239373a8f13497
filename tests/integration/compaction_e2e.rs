//! Compaction end to end on the real stack: an Iceberg table on the local S3 server (in Iceberg's
//! REST catalog server, with a client credential; one test on a JDBC catalog on SQLite), Spark
//! appending small batches, S3 notifications through SQS into icepack, the threshold firing, and
//! the Docker runner compacting through the Docker Engine API (podman).

use crate::support;

use std::time::Duration;

use icepack::testing::http_receiver::Receiver;
use support::spark::{icepack_containers, row_with, stack_available, Lakehouse};
use support::{unique, wait_until, Icepack, Landing, Moto};

const TABLE: &str = "analytics.orders";
const MISSING: &str = "analytics.missing";
/// The REST catalog's OAuth2 client credential (`client_id:client_secret`).
const CATALOG_SECRET: &str = "catalog-secret-5521";
const CATALOG_CREDENTIAL: &str = "icepack-e2e:catalog-secret-5521";

/// `count` commits of a few rows each, every one a small data file (Spark runs with one task).
fn inserts(first_batch: i64, count: i64) -> Vec<String> {
    (first_batch..first_batch + count)
        .map(|batch| {
            let rows: Vec<String> = (0..5)
                .map(|row| {
                    let id = batch * 5 + row;
                    format!("({id}, '2024-05-0{}', {}.25)", 1 + id % 3, id * 3)
                })
                .collect();
            format!("INSERT INTO lakehouse.{TABLE} VALUES {}", rows.join(", "))
        })
        .collect()
}

fn create_table() -> Vec<String> {
    vec![
        "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string(),
        format!("CREATE TABLE lakehouse.{TABLE} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg"),
    ]
}

fn table_facts() -> String {
    format!(
        "SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM lakehouse.{TABLE};\nSELECT count(*) AS data_files FROM lakehouse.{TABLE}.files;"
    )
}

/// Prints (never asserts) how long it took from the table becoming due to its container running.
fn print_trigger_latency(log: &str) {
    let time_of = |needle: &str| {
        log.lines()
            .find(|line| line.contains(needle))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|stamp| chrono::DateTime::parse_from_rfc3339(stamp).ok())
    };
    if let (Some(due), Some(created)) = (
        time_of(&format!("table is due for compaction table={TABLE}")),
        time_of("container created container=icepack-analytics.orders"),
    ) {
        eprintln!(
            "FIGURES threshold crossed → container created: {} ms",
            (created - due).num_milliseconds()
        );
    }
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

fn config(moto: &Moto, queue_url: &str, bucket: &str, lakehouse: &Lakehouse) -> String {
    format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout_seconds = 60

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0

{catalog}
{spark}
timeout_minutes = 10
max_concurrent = 2
retry_attempts = 2
retry_interval_seconds = 1

[[tables]]
table = "{TABLE}"
bucket = "{bucket}"
prefix = "warehouse/analytics/orders/"
min_files = 12

[[tables]]
table = "{MISSING}"
bucket = "{bucket}"
prefix = "warehouse/analytics/missing/"
min_files = 2
"#,
        endpoint = moto.endpoint,
        catalog = lakehouse.catalog_toml(),
        spark = lakehouse.docker_spark_toml(),
    )
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_due_table_is_compacted_in_a_container_and_its_state_settles() {
    if !stack_available("a_due_table_is_compacted_in_a_container_and_its_state_settles") {
        return;
    }
    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;

    let dir = tempfile::tempdir().unwrap();
    // The reference's catalog: Iceberg's REST catalog, here with an OAuth2 client credential
    // (exchanged at the server's token endpoint) that must never come out of icepack.
    let lakehouse = Lakehouse::rest(
        dir.path(),
        &moto.endpoint,
        &bucket,
        &[("credential", CATALOG_CREDENTIAL)],
    )
    .await;

    // A micro-batch writer: 12 commits of a few rows, each one small data file.
    let mut statements = create_table();
    statements.extend(inserts(0, 12));
    let before = lakehouse.sql(&(statements.join(";\n") + ";\n" + &table_facts()));
    let rows_before = row_with(&before, "checksum");
    assert_eq!(row_with(&before, "data_files")["data_files"], "12");

    // A second table the catalog does not know: its run fails and its files stay pending.
    moto.put_object(&bucket, "warehouse/analytics/missing/data/a.parquet", 100)
        .await;
    moto.put_object(&bucket, "warehouse/analytics/missing/data/b.parquet", 100)
        .await;

    let hook = Receiver::start().await;
    let config = config(&moto, &queue_url, &bucket, &lakehouse)
        + "\n[[webhooks]]\nurl_env = \"TEST_HOOK_URL\"\nnotify_on = [\"success\", \"failure\"]\n";
    let mut icepack = Icepack::with_config(&config);
    icepack.env = vec![("TEST_HOOK_URL".to_string(), hook.url("/hook"))];
    let run = icepack.spawn_run("");

    let orders = wait_until("the compaction to settle", Duration::from_secs(300), || {
        let status = table_status(&icepack, TABLE);
        async move { status["last_run"].is_object().then_some(status) }
    })
    .await;
    let last_run = &orders["last_run"];
    assert_eq!(
        last_run["outcome"],
        "success",
        "{orders}\n{}",
        icepack.log(run)
    );
    assert_eq!(last_run["trigger"], "files");
    assert_eq!(last_run["claimed_files"], 12);
    assert_eq!(last_run["rewritten_data_files"], 12);
    assert_eq!(last_run["added_data_files"], 1);
    assert_eq!(last_run["output_files"], 1);

    // The run's own output file fires an event too: once the queue is drained it has not counted.
    wait_until("the queue to drain", Duration::from_secs(60), || async {
        (moto.queue_depth(&queue_url).await == 0).then_some(())
    })
    .await;
    let orders = table_status(&icepack, TABLE);
    // Settled from the committed metadata: the table's one small file now is the run's output
    // (5 KB, far below 64 MB), and it does not make the table due by itself.
    assert_eq!(orders["pending_files"], 1, "{orders}");
    assert_eq!(orders["partitions"][0]["files"], 1);
    assert!(orders["last_truth_time"].is_string());
    assert_eq!(orders["due"], false);
    assert!(orders["in_flight_run"].is_null());

    // The failing table: state kept, failure recorded, back-off instead of a new run per event.
    let missing = wait_until(
        "the failing run to settle",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, MISSING);
            async move { status["last_run"].is_object().then_some(status) }
        },
    )
    .await;
    assert_eq!(missing["last_run"]["outcome"], "failure", "{missing}");
    assert_eq!(missing["last_run"]["failure_class"], "other");
    assert_eq!(
        missing["last_run"]["attempts"], 2,
        "retried once within the run"
    );
    assert!(
        missing["last_run"]["error"]
            .as_str()
            .unwrap()
            .contains("missing"),
        "{missing}"
    );
    assert_eq!(missing["pending_files"], 2, "pending state preserved");
    assert_eq!(missing["consecutive_failures"], 1);
    assert!(missing["next_attempt_time"].is_string());
    moto.put_object(&bucket, "warehouse/analytics/missing/data/c.parquet", 100)
        .await;
    wait_until(
        "the new file to be counted",
        Duration::from_secs(30),
        || async { (table_status(&icepack, MISSING)["pending_files"] == 3).then_some(()) },
    )
    .await;
    let missing_again = table_status(&icepack, MISSING);
    assert_eq!(
        missing_again["last_run"]["run_id"], missing["last_run"]["run_id"],
        "no new run before the back-off ends"
    );
    assert!(missing_again["in_flight_run"].is_null());

    // Both runs were reported; the catalog's credential (which the runs got through their
    // properties file) is in no alert, status or log line.
    wait_until("both alerts", Duration::from_secs(30), || async {
        (hook.received().len() >= 2).then_some(())
    })
    .await;
    let status = icepack.status().to_string();
    assert!(icepack.terminate(run).await.success());
    let alerts: Vec<String> = hook
        .received()
        .iter()
        .map(|request| request.body.to_string())
        .collect();
    assert!(
        alerts
            .iter()
            .any(|alert| alert.contains("compaction_succeeded")),
        "{alerts:?}"
    );
    for (what, text) in [
        ("the alerts", alerts.join("\n")),
        ("the status", status),
        ("icepack's log", icepack.log(run)),
    ] {
        assert!(!text.is_empty(), "{what} is empty");
        assert!(
            !text.contains(CATALOG_SECRET),
            "the catalog credential leaked into {what}:\n{text}"
        );
    }
    assert!(
        icepack_containers(&icepack.state_dir()).await.is_empty(),
        "no container is left behind"
    );
    print_trigger_latency(&icepack.log(run));

    // The data: fewer files, same rows, same checksum.
    let after = lakehouse.sql(&table_facts());
    assert_eq!(row_with(&after, "data_files")["data_files"], "1");
    assert_eq!(row_with(&after, "checksum"), rows_before);
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_run_in_flight_when_icepack_dies_is_recovered_and_manual_runs_use_the_process_runner() {
    if !stack_available(
        "a_run_in_flight_when_icepack_dies_is_recovered_and_manual_runs_use_the_process_runner",
    ) {
        return;
    }
    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;
    let dir = tempfile::tempdir().unwrap();
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[]).await;
    let mut statements = create_table();
    statements.extend(inserts(0, 12));
    let before = lakehouse.sql(&(statements.join(";\n") + ";\n" + &table_facts()));

    let mut icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, &lakehouse));
    let first = icepack.spawn_run("");
    wait_until("a run in flight with its container", Duration::from_secs(120), || {
        let in_flight = table_status(&icepack, TABLE)["in_flight_run"].is_object();
        let state_dir = icepack.state_dir();
        async move { (in_flight && !icepack_containers(&state_dir).await.is_empty()).then_some(()) }
    })
    .await;
    let killed = icepack.kill(first).await;
    assert!(!killed.success());
    let claimed = table_status(&icepack, TABLE);
    assert_eq!(claimed["in_flight_run"]["claimed_files"], 12, "{claimed}");

    let second = icepack.spawn_run("");
    let orders = wait_until(
        "the recovered run to settle",
        Duration::from_secs(300),
        || {
            let status = table_status(&icepack, TABLE);
            async move { status["last_run"].is_object().then_some(status) }
        },
    )
    .await;
    assert_eq!(
        orders["last_run"]["outcome"],
        "success",
        "{orders}\n{}",
        icepack.log(second)
    );
    assert_eq!(
        orders["last_run"]["run_id"], claimed["in_flight_run"]["run_id"],
        "the same run, recovered"
    );
    assert_eq!(orders["last_run"]["rewritten_data_files"], 12);
    assert!(
        icepack.log(second).contains("recovering it"),
        "{}",
        icepack.log(second)
    );
    wait_until("the queue to drain", Duration::from_secs(60), || async {
        (moto.queue_depth(&queue_url).await == 0).then_some(())
    })
    .await;
    assert_eq!(
        table_status(&icepack, TABLE)["pending_files"],
        1,
        "nothing lost, nothing counted twice: the output is the one small file left"
    );
    assert!(icepack_containers(&icepack.state_dir()).await.is_empty());

    // Three more commits: pending, not due. A manual run compacts them now, with a local spark-sql.
    lakehouse.sql(&(inserts(12, 3).join(";\n") + ";"));
    wait_until("four pending files", Duration::from_secs(60), || async {
        (table_status(&icepack, TABLE)["pending_files"] == 4).then_some(())
    })
    .await;
    assert!(icepack.terminate(second).await.success());
    let spark_sql = format!(
        "{}/bin/spark-sql",
        support::spark::env("ICEPACK_TEST_SPARK_HOME")
    );
    let jars = format!("[{}]", support::spark::env("ICEPACK_TEST_SPARK_JARS"));
    let (ok, stdout, stderr) = icepack.command_with_env(
        &["compact", TABLE],
        &[
            ("ICEPACK_SPARK__RUNNER", "process"),
            ("ICEPACK_SPARK__SPARK_SQL", &spark_sql),
            ("ICEPACK_SPARK__JARS", &jars),
            ("SPARK_LOCAL_IP", "127.0.0.1"),
        ],
    );
    assert!(ok, "{stdout}\n{stderr}");
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["trigger"], "manual");
    assert_eq!(result["claimed_files"], 4);
    assert_eq!(result["run"]["outcome"], "success");
    assert_eq!(
        result["run"]["report"]["result"]["rewritten_data_files_count"],
        4
    );
    let orders = table_status(&icepack, TABLE);
    assert_eq!(orders["pending_files"], 1, "the new output: {orders}");
    assert_eq!(orders["last_run"]["trigger"], "manual");

    let after = lakehouse.sql(&table_facts());
    assert_eq!(row_with(&after, "data_files")["data_files"], "1");
    let rows_before = row_with(&before, "checksum");
    assert_ne!(
        row_with(&after, "checksum"),
        rows_before,
        "three batches were added since"
    );
    assert_eq!(row_with(&after, "row_count")["row_count"], "75");
}

/// Figures for the notes and BENCHMARKS.md, not a pass/fail check: the Docker runner's whole run
/// (container create → logs → inspect → remove) against a bare host spark-sql of the same CALL on
/// an identical table. `deploy/local/with-stack.sh cargo test --test integration -- --ignored --nocapture
/// compaction_e2e::measure_docker_runner_against_bare_spark_sql`
#[tokio::test]
#[ignore = "a measurement, not a check: run it by name with --ignored --nocapture"]
async fn measure_docker_runner_against_bare_spark_sql() {
    if !stack_available("measure_docker_runner_against_bare_spark_sql") {
        return;
    }
    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;
    let dir = tempfile::tempdir().unwrap();
    let lakehouse = Lakehouse::new(dir.path(), &moto.endpoint, &bucket);
    let mut statements = create_table();
    statements.extend(inserts(0, 12));
    statements.push(format!("CREATE TABLE lakehouse.analytics.orders_copy USING iceberg AS SELECT * FROM lakehouse.{TABLE} WHERE false"));
    statements.extend(
        inserts(0, 12)
            .into_iter()
            .map(|insert| insert.replace(TABLE, "analytics.orders_copy")),
    );
    lakehouse.sql(&(statements.join(";\n") + ";"));

    let call = |table: &str| {
        format!("CALL lakehouse.system.rewrite_data_files(table => '{table}', strategy => 'binpack', options => map('min-input-files', '2', 'target-file-size-bytes', '536870912'));")
    };
    let started = std::time::Instant::now();
    let bare = lakehouse.sql(&call("analytics.orders_copy"));
    let bare_seconds = started.elapsed().as_secs_f64();
    assert_eq!(
        row_with(&bare, "rewritten_data_files_count")["rewritten_data_files_count"],
        "12"
    );

    let icepack = Icepack::with_config(&config(&moto, &queue_url, &bucket, &lakehouse));
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = icepack.command(&["compact", TABLE]);
    let icepack_seconds = started.elapsed().as_secs_f64();
    assert!(ok, "{stdout}\n{stderr}");
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let run_seconds = result["run"]["duration_millis"].as_f64().unwrap() / 1000.0;
    eprintln!(
        "FIGURES bare spark-sql CALL: {bare_seconds:.1} s; icepack compact (docker runner) whole command: {icepack_seconds:.1} s, run: {run_seconds:.1} s; ratio run/bare: {:.2}",
        run_seconds / bare_seconds
    );
}

/// The container engine's socket is gone when the table becomes due: the run fails as
/// `engine_unavailable`, the files stay pending and counting goes on; once the socket is back
/// (after the back-off) the next run compacts the table.
#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn runs_fail_as_engine_unavailable_while_the_socket_is_gone_and_resume_when_it_returns() {
    if !stack_available(
        "runs_fail_as_engine_unavailable_while_the_socket_is_gone_and_resume_when_it_returns",
    ) {
        return;
    }
    let engine = std::env::var("DOCKER_HOST").expect("with-stack.sh sets DOCKER_HOST");
    let engine_socket = engine.trim_start_matches("unix://").to_string();
    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(5).await;
    let dir = tempfile::tempdir().unwrap();
    let lakehouse = Lakehouse::new(dir.path(), &moto.endpoint, &bucket);
    let mut statements = create_table();
    statements.extend(inserts(0, 12));
    let before = lakehouse.sql(&(statements.join(";\n") + ";\n" + &table_facts()));
    let rows_before = row_with(&before, "checksum");

    // The socket icepack is given does not exist yet.
    let socket = dir.path().join("engine.sock");
    let config = config(&moto, &queue_url, &bucket, &lakehouse)
        .replace("retry_attempts = 2", "retry_attempts = 1")
        .replace(
            "retry_interval_seconds = 1",
            "retry_interval_seconds = 1\nfailure_backoff_initial_seconds = 5\nfailure_backoff_max_seconds = 5",
        );
    let mut icepack = Icepack::with_config(&config);
    icepack.env.push((
        "DOCKER_HOST".to_string(),
        format!("unix://{}", socket.display()),
    ));
    let run = icepack.spawn_run("");

    let failed = wait_until("the run to fail", Duration::from_secs(120), || {
        let status = table_status(&icepack, TABLE);
        async move { status["last_run"].is_object().then_some(status) }
    })
    .await;
    assert_eq!(failed["last_run"]["outcome"], "failure", "{failed}");
    assert_eq!(
        failed["last_run"]["failure_class"], "engine_unavailable",
        "{failed}"
    );
    assert_eq!(failed["pending_files"], 12, "the files stay pending");

    // Counting goes on while the engine is away.
    moto.put_object(&bucket, "warehouse/analytics/orders/data/late.parquet", 100)
        .await;
    wait_until(
        "the new file to be counted",
        Duration::from_secs(30),
        || async { (table_status(&icepack, TABLE)["pending_files"] == 13).then_some(()) },
    )
    .await;

    // The engine comes back at the same path; the next attempt after the back-off compacts.
    std::os::unix::fs::symlink(&engine_socket, &socket).unwrap();
    let settled = wait_until("a successful run", Duration::from_secs(300), || {
        let status = table_status(&icepack, TABLE);
        async move { (status["last_run"]["outcome"] == "success").then_some(status) }
    })
    .await;
    assert_eq!(settled["last_run"]["rewritten_data_files"], 12, "{settled}");
    assert_eq!(settled["consecutive_failures"], 0);
    assert!(icepack.terminate(run).await.success());
    let after = lakehouse.sql(&table_facts());
    assert_eq!(row_with(&after, "data_files")["data_files"], "1");
    assert_eq!(row_with(&after, "checksum"), rows_before);
}

/// Against the real engine, without Spark: a missing image is reported clearly as an unavailable
/// engine; a container past its deadline is killed and removed, and the run says it timed out.
#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn a_missing_image_fails_clearly_and_a_container_past_its_deadline_is_killed_and_removed() {
    if !stack_available(
        "a_missing_image_fails_clearly_and_a_container_past_its_deadline_is_killed_and_removed",
    ) {
        return;
    }
    use icepack::engine::spark::docker::{DockerRunner, DockerSettings};
    use icepack::engine::spark::runner::{EngineError, SparkJob, SparkRunner};
    use icepack::engine::spark::sql::{Statement, StatementKind};
    let state = tempfile::tempdir().unwrap();
    // Each job is one statement; its shell prints that statement's output in the run's frame.
    const NONCE: &str = "0123456789abcdef0123456789abcdef";
    let framed = |output: &str| {
        format!("printf 'icepack_frame\\n{NONCE}:0\\n'; {output}; printf 'icepack_frame\\n{NONCE}:end\\n'")
    };
    let job = |run_id: &str, args: &[&str], timeout: Duration| SparkJob {
        run_id: run_id.to_string(),
        table: TABLE.to_string(),
        catalog: "lakehouse".to_string(),
        statements: vec![Statement::new(StatementKind::Other, "SELECT 1")],
        nonce: NONCE.to_string(),
        conf: Default::default(),
        options: args.iter().map(|arg| arg.to_string()).collect(),
        recovery: Vec::new(),
        claimed: Default::default(),
        attempt: 1,
        env: Vec::new(),
        timeout,
    };

    let missing = DockerRunner::new(DockerSettings {
        image: "localhost/icepack-no-such-image:0".to_string(),
        spark_sql: "/bin/true".to_string(),
        network: "host".to_string(),
        binds: Vec::new(),
        state_dir: state.path().to_path_buf(),
    });
    match missing
        .run(&job(&unique("run"), &[], Duration::from_secs(30)))
        .await
    {
        Err(EngineError::Unavailable(message)) => {
            assert!(message.contains("not found"), "{message}")
        }
        other => panic!("expected an unavailable engine, got {other:?}"),
    }

    // A shell that prints the run's settings file and then hangs stands in for a Spark job that
    // hangs; its secret setting is in that file, not in the container's configuration.
    let hanging = std::sync::Arc::new(DockerRunner::new(DockerSettings {
        image: std::env::var("ICEPACK_TEST_SPARK_IMAGE").unwrap(),
        spark_sql: "/bin/sh".to_string(),
        network: "host".to_string(),
        binds: Vec::new(),
        state_dir: state.path().to_path_buf(),
    }));
    let hanging_script = format!(
        "{}; exec sleep 600",
        framed("echo icepack_output_file; cat /tmp/icepack-secrets.properties; echo \"env=$AWS_SECRET_ACCESS_KEY\"")
    );
    let mut hanging_job = job(
        &unique("run"),
        &["-c", &hanging_script],
        Duration::from_secs(8),
    );
    hanging_job.conf.insert(
        "spark.sql.catalog.lakehouse.s3.secret-access-key".to_string(),
        "planted-secret-4711".to_string(),
    );
    hanging_job.conf.insert(
        "spark.sql.catalog.lakehouse.uri".to_string(),
        "http://rest:8181".to_string(),
    );
    hanging_job.env.push((
        "AWS_SECRET_ACCESS_KEY".to_string(),
        "planted-env-secret-0815".to_string(),
    ));
    let started = std::time::Instant::now();
    let run = tokio::spawn({
        let hanging = hanging.clone();
        async move { hanging.run(&hanging_job).await }
    });
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let container = loop {
        if let Some(name) = icepack_containers(state.path()).await.into_iter().next() {
            break name;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the container appears"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let inspected = docker
        .inspect_container(container.trim_start_matches('/'), None)
        .await
        .unwrap();
    let inspected = serde_json::to_string(&inspected).unwrap();
    assert!(inspected.contains("spark.sql.catalog.lakehouse.uri=http://rest:8181"));
    assert!(!inspected.contains("planted-secret-4711"), "{inspected}");
    assert!(
        !inspected.contains("planted-env-secret-0815"),
        "{inspected}"
    );
    let output = run.await.unwrap().expect("the engine answers");
    assert!(output.timed_out, "{output:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        output.results[0].1.rows,
        vec![
            vec![
                "spark.sql.catalog.lakehouse.s3.secret-access-key=planted-secret-4711".to_string()
            ],
            vec!["env=planted-env-secret-0815".to_string()],
        ],
        "the run reads its secrets from the uploaded files"
    );
    assert!(
        icepack_containers(state.path()).await.is_empty(),
        "the container is removed"
    );

    // icepack stopped between creating a run's container and starting it: recovering that run
    // starts it afresh (the planted container would print something else) and removes the stale one.
    use icepack::engine::spark::runner::{LABEL_INSTANCE, LABEL_MANAGED, LABEL_RUN_ID};
    let instance = icepack::engine::spark::job::instance_id(state.path());
    let stale_run = unique("run");
    let stale = format!("icepack-stale-{stale_run}");
    docker
        .create_container(
            Some(bollard::container::CreateContainerOptions {
                name: stale.clone(),
                platform: None,
            }),
            bollard::container::Config {
                image: std::env::var("ICEPACK_TEST_SPARK_IMAGE").ok(),
                cmd: Some(vec![
                    "/bin/sh".to_string(),
                    "-c".to_string(),
                    framed("echo icepack_output_file; echo stale"),
                ]),
                labels: Some(std::collections::HashMap::from([
                    (LABEL_MANAGED.to_string(), "true".to_string()),
                    (LABEL_RUN_ID.to_string(), stale_run.clone()),
                    (LABEL_INSTANCE.to_string(), instance),
                ])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let fresh_script = framed("echo icepack_output_file; echo fresh");
    let fresh = job(&stale_run, &["-c", &fresh_script], Duration::from_secs(30));
    let recovered = hanging
        .recover(&fresh)
        .await
        .expect("the engine answers")
        .expect("the run is found");
    assert_eq!(recovered.exit_code, 0, "{recovered:?}");
    assert_eq!(recovered.results[0].1.rows, vec![vec!["fresh".to_string()]]);
    assert!(
        icepack_containers(state.path()).await.is_empty(),
        "the stale container and the run's own are removed"
    );

    // Issue 31: the run's container ended successfully while icepack was down, past the run's
    // deadline: no time is left to wait (the pool gives a second at least; reading a Spark
    // run's megabytes of log can take longer). It is read as it ended, not judged a timeout.
    let ended_run = unique("run");
    let ended = format!("icepack-ended-{ended_run}");
    let script = format!(
        "{}; i=0; while [ $i -lt 300000 ]; do echo \"INFO spark log line $i of a long run, padded to look like one ...............\" >&2; i=$((i+1)); done",
        framed("echo icepack_output_file; echo done")
    );
    docker
        .create_container(
            Some(bollard::container::CreateContainerOptions {
                name: ended.clone(),
                platform: None,
            }),
            bollard::container::Config {
                image: std::env::var("ICEPACK_TEST_SPARK_IMAGE").ok(),
                cmd: Some(vec!["/bin/sh".to_string(), "-c".to_string(), script]),
                labels: Some(std::collections::HashMap::from([
                    (LABEL_MANAGED.to_string(), "true".to_string()),
                    (LABEL_RUN_ID.to_string(), ended_run.clone()),
                    (
                        LABEL_INSTANCE.to_string(),
                        icepack::engine::spark::job::instance_id(state.path()),
                    ),
                ])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    docker
        .start_container(
            &ended,
            None::<bollard::container::StartContainerOptions<String>>,
        )
        .await
        .unwrap();
    wait_until("the container to end", Duration::from_secs(120), || {
        let docker = docker.clone();
        let ended = ended.clone();
        async move {
            let state = docker.inspect_container(&ended, None).await.ok()?.state?;
            (state.running == Some(false) && state.exit_code.is_some()).then_some(())
        }
    })
    .await;
    let past_deadline = job(&ended_run, &[], Duration::ZERO);
    let recovered = hanging
        .recover(&past_deadline)
        .await
        .expect("the engine answers")
        .expect("the run is found");
    assert!(!recovered.timed_out, "{:?}", recovered.unfinished);
    assert_eq!(recovered.exit_code, 0);
    assert_eq!(recovered.results[0].1.rows, vec![vec!["done".to_string()]]);
    assert!(
        icepack_containers(state.path()).await.is_empty(),
        "the ended container is removed"
    );
}
