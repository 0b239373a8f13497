//! The command-line contract: `check-config`, `replay` and `status` as other tools call them, and
//! `ICEPACK_FAILPOINTS`, obeyed only by a build with the `failpoints` feature.

#[path = "integration/support/mod.rs"]
mod support;

use support::Icepack;

const CONFIG: &str = r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""

[[tables]]
table = "analytics.customer_orders"
bucket = "lakehouse-data"
prefix = "warehouse/analytics/customer_orders/"
"#;

fn events() -> String {
    format!("{}/tests/fixtures/events.jsonl", env!("CARGO_MANIFEST_DIR"))
}

fn last_line_json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.lines().last().expect("no output")).unwrap()
}

#[test]
fn the_example_configurations_are_valid() {
    for (file, expected) in [
        ("icepack.toml", "2 table(s), 1 tenant(s), 1 queue(s)"),
        ("tenants.toml", "2 table(s), 2 tenant(s), 2 queue(s)"),
    ] {
        let example = format!("{}/config/{file}", env!("CARGO_MANIFEST_DIR"));
        let output = std::process::Command::new(support::binary())
            .args(["check-config", "--config", &example])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(expected), "{file}: {stdout}");
    }
    // The configuration reference shows the tenant example as it is in the file.
    let reference = std::fs::read_to_string(format!(
        "{}/docs/configuration.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let tenants = std::fs::read_to_string(format!(
        "{}/config/tenants.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let example = &tenants[tenants.find("[spark]").unwrap()..];
    assert!(
        reference.contains(example),
        "docs/configuration.md and config/tenants.toml differ"
    );
}

#[test]
fn check_config_names_the_offending_key() {
    let cases = [
        ("[sqs]\nqueue_ur = \"https://x\"\n", "queue_ur"),
        ("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\n", "prefix"),
        (
            "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n[[tables]]\ntable = \"a.c\"\nbucket = \"bkt\"\nprefix = \"p/\"\n",
            "tables[1].prefix",
        ),
        ("[defaults]\npacing = false\nmin_files = 0\n", "defaults.min_files"),
        ("[defaults]\npacing = false\nmin_total_mb = -3\n", "defaults.min_total_mb"),
        ("[[tables]]\ntable = \"orders\"\nbucket = \"bkt\"\nprefix = \"p/\"\n", "tables[0].table"),
    ];
    for (toml, key) in cases {
        let icepack = Icepack::with_config(toml);
        let (ok, _stdout, stderr) = icepack.command(&["check-config"]);
        assert!(!ok, "{toml} must be rejected");
        assert!(
            stderr.contains(key),
            "error for {toml:?} must name {key}: {stderr}"
        );
    }
    let icepack = Icepack::with_config(CONFIG);
    let (ok, stdout, stderr) = icepack.command(&["check-config"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("valid"));
}

#[test]
fn environment_overrides_the_file() {
    let icepack = Icepack::with_config(CONFIG);
    let output = std::process::Command::new(support::binary())
        .args(["check-config", "--config"])
        .arg(&icepack.config)
        .env("ICEPACK_SQS__MAX_MESSAGES", "11")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("sqs.max_messages"));
}

#[test]
fn replay_counts_every_shape_once_and_prints_a_summary() {
    let icepack = Icepack::with_config(CONFIG);
    let (ok, stdout, stderr) = icepack.command(&["replay", "--no-compact", &events()]);
    assert!(ok, "{stderr}");
    let summary = last_line_json(&stdout);
    assert_eq!(
        summary,
        serde_json::json!({
            "messages": 11,
            "invalid_messages": 2,
            "records": 13,
            "counted": 6,
            "ignored": {"not_created": 2, "unrouted": 2, "not_data_file": 1, "large_file": 1, "duplicate": 1}
        })
    );

    let status = icepack.status();
    let table = &status["tables"][0];
    assert_eq!(table["pending_files"], 6);
    assert_eq!(table["pending_bytes"], 22_000);
    assert_eq!(
        table["oldest_pending_event_time"],
        "2024-05-01T12:00:00.000Z"
    );
    assert_eq!(
        table["due"], true,
        "max-wait of 120 minutes passed long ago"
    );
    assert_eq!(table["due_reason"], "max_wait");
    assert_eq!(
        table["partitions"],
        serde_json::json!([
            {"partition": "", "files": 2, "bytes": 12000, "from_events": 2, "from_metadata": 0},
            {"partition": "order_date=2024-05-01", "files": 2, "bytes": 3000, "from_events": 2, "from_metadata": 0},
            {"partition": "order_date=2024-05-02", "files": 2, "bytes": 7000, "from_events": 2, "from_metadata": 0}
        ])
    );

    // Replaying the same events again counts nothing new.
    let (ok, stdout, stderr) = icepack.command(&["replay", "--no-compact", &events()]);
    assert!(ok, "{stderr}");
    let again = last_line_json(&stdout);
    assert_eq!(again["counted"], 0);
    assert_eq!(again["ignored"]["duplicate"], 7);
    assert_eq!(icepack.pending_files("analytics.customer_orders"), 6);
}

#[test]
fn replay_reads_stdin() {
    use std::io::Write;
    let icepack = Icepack::with_config(CONFIG);
    let mut child = std::process::Command::new(support::binary())
        .args(["replay", "--no-compact", "--config"])
        .arg(&icepack.config)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(std::fs::read(events()).unwrap().as_slice())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        last_line_json(&String::from_utf8_lossy(&output.stdout))["counted"],
        6
    );
}

/// `icepack replay --no-compact` of the fixture events with `ICEPACK_FAILPOINTS` set.
fn replay_with_failpoints(icepack: &Icepack, failpoints: &str) -> std::process::Output {
    std::process::Command::new(support::binary())
        .args(["replay", "--no-compact", "--config"])
        .arg(&icepack.config)
        .arg(events())
        .env("ICEPACK_FAILPOINTS", failpoints)
        .output()
        .unwrap()
}

/// The build `cargo build --release`, `make build` and the image make (no `failpoints` feature;
/// only the optimisation differs from this one): every fault point armed, and the replay runs as
/// if nothing were set. The test below shows the same command dying where the feature is on.
#[cfg(not(feature = "failpoints"))]
#[test]
fn without_the_failpoints_feature_icepack_failpoints_is_ignored() {
    let icepack = Icepack::with_config(CONFIG);
    let output = replay_with_failpoints(
        &icepack,
        "intake.before_commit=return;intake.after_commit=return;store.write_error=return",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    assert!(stderr.contains("ICEPACK_FAILPOINTS is ignored"), "{stderr}");
    assert_eq!(
        last_line_json(&String::from_utf8_lossy(&output.stdout))["counted"],
        6
    );
    assert_eq!(icepack.pending_files("analytics.customer_orders"), 6);
}

/// With the feature each armed point acts on the same command: a crash point kills the process
/// with SIGKILL, `store.write_error` fails the commit, a malformed entry stops the start.
#[cfg(feature = "failpoints")]
#[test]
fn with_the_failpoints_feature_armed_points_kill_the_process_and_fail_writes() {
    use std::os::unix::process::ExitStatusExt;
    const TABLE: &str = "analytics.customer_orders";
    let icepack = Icepack::with_config(CONFIG);

    let output = replay_with_failpoints(&icepack, "intake.before_commit=return");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGKILL), "{stderr}");
    assert_eq!(icepack.pending_files(TABLE), 0, "killed before the commit");

    let output = replay_with_failpoints(&icepack, "store.write_error=return");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("failpoint store.write_error"), "{stderr}");
    assert_eq!(icepack.pending_files(TABLE), 0, "the write failed");

    let output = replay_with_failpoints(&icepack, "intake.after_commit=return");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGKILL), "{stderr}");
    assert!(
        icepack.pending_files(TABLE) > 0,
        "killed after the first commit"
    );

    let output = replay_with_failpoints(&icepack, "intake.after_commit");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("`intake.after_commit` is not NAME=ACTIONS"),
        "{stderr}"
    );
}

#[test]
fn status_of_a_new_deployment_shows_empty_tables() {
    let icepack = Icepack::with_config(CONFIG);
    let status = icepack.status();
    assert_eq!(
        status,
        serde_json::json!({"tables": [{
            "table": "analytics.customer_orders",
            "tenant": "default",
            "pending_files": 0,
            "pending_bytes": 0,
            "oldest_pending_event_time": null,
            "due": false,
            "due_reason": null,
            "partitions": [],
            "in_flight_run": null,
            "last_run": null,
            "compacted_files": 0,
            "unconfirmed_files": 0,
            "empty_runs": 0,
            "consecutive_failures": 0,
            "next_attempt_time": null,
            "last_truth_time": null,
            "nothing_to_rewrite": false,
            "strategy": "binpack",
            "table_sort_order": null,
            "engine": "spark",
            "manifests": 0,
            "max_manifests": null,
            "orphans": null,
            "deletes": null,
            "explain": {
                "nearest": null,
                "files": {"value": 0, "threshold": 10, "remaining": 10, "reached": 0.0},
                "bytes": {"value": 0, "threshold": 268435456, "remaining": 268435456, "reached": 0.0},
                "max_wait": {"value": 0, "threshold": 7200, "remaining": 7200, "reached": 0.0},
                "alone_files": 0,
                "filling_files": 0,
                "waiting": null,
                "pacing": "settle",
                "run_cost": null
            }
        }]})
    );
    let (ok, stdout, _) = icepack.command(&["status"]);
    assert!(ok);
    assert!(stdout.contains("analytics.customer_orders"));
}

#[test]
fn the_run_history_of_a_new_table_is_empty_and_an_unknown_table_is_named() {
    let icepack = Icepack::with_config(CONFIG);
    let (ok, stdout, stderr) =
        icepack.command(&["status", "--json", "--runs", "analytics.customer_orders"]);
    assert!(ok, "{stderr}");
    let history: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(history["runs"], serde_json::json!([]));
    let (ok, _, stderr) = icepack.command(&["status", "--runs", "analytics.nothing"]);
    assert!(!ok);
    assert!(
        stderr.contains("table analytics.nothing is not configured"),
        "{stderr}"
    );
}

/// Issue 31: with `service.http_listen` taken, `icepack run` fails with a clear error before any
/// actor starts — it used to start the pipeline first, and its teardown then panicked in
/// `AccumulatorSupervisor::started` ("there is no reactor running").
#[tokio::test]
async fn a_taken_http_port_fails_the_start_with_a_clear_error_and_no_panic() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut icepack = Icepack::with_config(&CONFIG.replace(
        "http_listen = \"\"",
        &format!("http_listen = \"127.0.0.1:{port}\""),
    ));
    let run = icepack.spawn_run("");
    let status = icepack
        .wait_exit(run, std::time::Duration::from_secs(60))
        .await;
    let log = icepack.log(run);
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "cannot listen on service.http_listen 127.0.0.1:{port}"
        )),
        "{log}"
    );
    drop(taken);
}

/// `icepack simulate | head -1`: the reader goes away before the command writes; the command
/// ends by SIGPIPE, as Unix tools do, not with a panic reported as a bug.
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // The pipe's read end is closed before the command starts: its first write fails, always.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = std::process::Command::new(support::binary())
        .args(["simulate", "--days", "1", "--tables", "2"])
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        output.status
    );
    assert!(!stderr.contains("panic"), "{stderr}");
}
