use super::*;
use std::sync::Mutex;

/// Plays back canned engine results.
struct Scripted(Mutex<Vec<Result<EngineOutput, EngineError>>>);

#[async_trait]
impl SparkRunner for Scripted {
    async fn run(&self, _job: &SparkJob) -> Result<EngineOutput, EngineError> {
        self.0.lock().unwrap().remove(0)
    }
    fn engine(&self) -> String {
        "scripted".to_string()
    }
}

fn job() -> SparkJob {
    SparkJob {
        run_id: "r1".to_string(),
        table: "a.b".to_string(),
        catalog: "lakehouse".to_string(),
        statements: vec![
            Statement::new(StatementKind::Refresh, "REFRESH TABLE lakehouse.a.b"),
            Statement::new(
                StatementKind::Rewrite,
                "CALL lakehouse.system.rewrite_data_files(table => 'a.b')",
            ),
            Statement::new(StatementKind::Truth, "SELECT ..."),
            Statement::new(
                StatementKind::ExpireSnapshots,
                "CALL lakehouse.system.expire_snapshots(table => 'a.b')",
            ),
        ],
        nonce: "00112233445566778899aabbccddeeff".to_string(),
        conf: BTreeMap::new(),
        options: Vec::new(),
        recovery: Vec::new(),
        claimed: ClaimedFiles::default(),
        attempt: 1,
        env: vec![(
            "AWS_SECRET_ACCESS_KEY".to_string(),
            "s3cr3tvalue".to_string(),
        )],
        timeout: Duration::from_secs(60),
    }
}

fn ok_output() -> EngineOutput {
    EngineOutput::rewrite_printed("rewritten_data_files_count\tadded_data_files_count\n12\t1\n")
}

fn failed(stderr: &str) -> EngineOutput {
    EngineOutput {
        exit_code: 1,
        stderr: stderr.to_string(),
        ..EngineOutput::default()
    }
}

#[tokio::test]
async fn a_conflict_is_retried_and_then_succeeds() {
    let runner = Scripted(Mutex::new(vec![
            Ok(failed("org.apache.iceberg.exceptions.ValidationException: found new delete for replaced data file")),
            Ok(ok_output()),
        ]));
    let outcome = execute(&runner, &job(), 2, Duration::from_millis(1)).await;
    match outcome {
        RunOutcome::Success {
            report, attempts, ..
        } => {
            assert_eq!(attempts, 2);
            assert_eq!(report.result.rewritten_data_files_count, 12);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_spark_connect_deadline_is_a_timeout_with_what_the_interrupt_answered() {
    let output = EngineOutput {
        timed_out: true,
        interrupted: Some("1 operation(s) interrupted on sc://spark:15002".to_string()),
        unfinished: Some(StatementKind::Rewrite),
        ..EngineOutput::default()
    };
    let (class, excerpt) = judge(&output, &job()).unwrap_err();
    assert_eq!(class, FailureClass::Timeout);
    assert_eq!(
            excerpt,
            "deadline passed; the run's operations were interrupted: 1 operation(s) interrupted on sc://spark:15002"
        );
    assert_eq!(output.exit_code, 0, "no process exit is made up");
}

#[tokio::test]
async fn commit_state_unknown_and_timeouts_are_not_retried() {
    let runner = Scripted(Mutex::new(vec![Ok(failed(
        "CommitStateUnknownException: lost",
    ))]));
    let outcome = execute(&runner, &job(), 3, Duration::from_millis(1)).await;
    assert!(matches!(
        outcome,
        RunOutcome::Failure {
            class: FailureClass::CommitStateUnknown,
            attempts: 1,
            ..
        }
    ));
    let runner = Scripted(Mutex::new(vec![Ok(EngineOutput {
        timed_out: true,
        exit_code: 137,
        ..EngineOutput::default()
    })]));
    let outcome = execute(&runner, &job(), 3, Duration::from_millis(1)).await;
    assert!(matches!(
        outcome,
        RunOutcome::Failure {
            class: FailureClass::Timeout,
            attempts: 1,
            ..
        }
    ));
}

#[tokio::test]
async fn an_unavailable_engine_fails_after_all_attempts_without_leaking_secrets() {
    let runner = Scripted(Mutex::new(vec![
        Err(EngineError::Unavailable(
            "no socket (key s3cr3tvalue)".to_string(),
        )),
        Err(EngineError::Unavailable(
            "no socket (key s3cr3tvalue)".to_string(),
        )),
    ]));
    match execute(&runner, &job(), 2, Duration::from_millis(1)).await {
        RunOutcome::Failure {
            class,
            excerpt,
            attempts,
            ..
        } => {
            assert_eq!(class, FailureClass::EngineUnavailable);
            assert_eq!(attempts, 2);
            assert!(!excerpt.contains("s3cr3tvalue"), "{excerpt}");
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 31 item 5: what a failed run reports (its excerpt, which the run history, status,
/// the page and alerts show) and what the log says of its command line hide the Azure shared
/// key, the GCS private key and the JDBC URI's password, as they hide the S3 keys.
#[tokio::test]
async fn a_failure_hides_azure_gcs_and_jdbc_secrets() {
    let mut job = job();
    job.conf = BTreeMap::from([
        (
            "spark.sql.catalog.lakehouse.uri".to_string(),
            "jdbc:postgresql://db/catalog?user=ice&password=JDBCPW".to_string(),
        ),
        (
            "spark.sql.catalog.lakehouse.adls.auth.shared-key.account.key".to_string(),
            "AZUREKEY==".to_string(),
        ),
        (
            "spark.sql.catalog.lakehouse.fs.gs.auth.service.account.private.key".to_string(),
            "GCSPRIVATEKEY".to_string(),
        ),
    ]);
    let described = job.describe();
    let stderr = "ERROR SparkSQLDriver: Failed in [CALL ...]\n\
             org.postgresql.util.PSQLException: FATAL: password authentication failed for jdbc:postgresql://db/catalog?user=ice&password=JDBCPW\n\
             java.lang.IllegalArgumentException: Invalid account key AZUREKEY== (GCSPRIVATEKEY)\n";
    let runner = Scripted(Mutex::new(vec![Ok(failed(stderr))]));
    let RunOutcome::Failure { excerpt, .. } =
        execute(&runner, &job, 1, Duration::from_millis(1)).await
    else {
        panic!("the run fails");
    };
    for secret in ["JDBCPW", "AZUREKEY", "GCSPRIVATEKEY", "s3cr3tvalue"] {
        assert!(
            !excerpt.contains(secret),
            "{secret} in the excerpt: {excerpt}"
        );
        assert!(
            !described.contains(secret),
            "{secret} described: {described}"
        );
    }
    assert!(excerpt.contains("PSQLException"), "{excerpt}");
    assert!(
        described.contains("--properties-file <secrets file>"),
        "{described}"
    );
}

#[test]
fn the_instance_id_is_kept_in_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("state");
    let first = instance_id(&fresh);
    assert_eq!(first.len(), 16);
    assert_eq!(instance_id(&fresh), first, "kept");
    let other = dir.path().join("other");
    assert_ne!(instance_id(&other), first, "random per deployment");
    // A directory of an earlier release keeps the id its containers carry.
    let earlier = dir.path().join("earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(earlier.join("CURRENT"), "MANIFEST-000001\n").unwrap();
    assert_eq!(instance_id(&earlier), legacy_instance_id(&earlier));
    assert_eq!(
        std::fs::read_to_string(earlier.join(INSTANCE_ID_FILE))
            .unwrap()
            .trim(),
        legacy_instance_id(&earlier)
    );
}

#[test]
fn oom_with_137_is_out_of_memory() {
    let output = EngineOutput {
        exit_code: 137,
        oom_killed: true,
        ..EngineOutput::default()
    };
    assert_eq!(
        judge(&output, &job()).unwrap_err().0,
        FailureClass::OutOfMemory
    );
}

#[test]
fn success_without_a_result_is_a_failure() {
    let output = EngineOutput::completed(Vec::new());
    assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
    let output = EngineOutput::rewrite_printed("nothing");
    assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
    // Exit 0, but the run's frame never ended: a statement did not finish (here the rewrite).
    let output = EngineOutput {
        unfinished: Some(StatementKind::Rewrite),
        ..EngineOutput::completed(Vec::new())
    };
    assert_eq!(judge(&output, &job()).unwrap_err().0, FailureClass::Other);
    // ... after the rewrite returned: the rewrite stands, the read that did not end is noted.
    let output = EngineOutput {
        unfinished: Some(StatementKind::Truth),
        ..ok_output()
    };
    let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
    assert_eq!(failed.step, "truth_read");
}

/// The run of issue 31: the CALL committed and printed its result, the outputs and the
/// truth; `expire_snapshots` then failed and spark-sql exited 1.
fn committed_then(stderr: &str, unfinished: StatementKind) -> EngineOutput {
    let truth = ResultSet {
        columns: vec!["icepack_truth_file".to_string()],
        rows: vec![vec![
            serde_json::json!({"path": "s3://lake/t/data/small.parquet", "size": 10}).to_string(),
        ]],
    };
    EngineOutput {
        exit_code: 1,
        stderr: stderr.to_string(),
        unfinished: Some(unfinished),
        results: vec![
            (StatementKind::Refresh, ResultSet::default()),
            (
                StatementKind::Rewrite,
                ResultSet::from_text("rewritten_data_files_count\tadded_data_files_count\n4\t1\n"),
            ),
            (StatementKind::Truth, truth),
        ],
        ..EngineOutput::default()
    }
}

#[test]
fn a_failure_after_the_rewrite_returned_is_a_note_on_a_success() {
    let output = committed_then(
            "ERROR SparkSQLDriver: Failed in [CALL lakehouse.system.expire_snapshots(...)]\norg.apache.iceberg.exceptions.RuntimeIOException: cannot delete s3://lake/t/metadata/snap-1.avro (key s3cr3tvalue)",
            StatementKind::ExpireSnapshots,
        );
    let report = judge(&output, &job()).expect("the rewrite committed");
    assert_eq!(report.result.rewritten_data_files_count, 4);
    assert_eq!(
        report.truth,
        Some(vec![("s3://lake/t/data/small.parquet".to_string(), 10)]),
        "the truth the run read settles its pending files"
    );
    let failed = report.maintenance_failed.expect("the failed step is noted");
    assert_eq!(failed.step, "expire_snapshots");
    assert_eq!(failed.class, FailureClass::Other);
    assert!(
        failed.excerpt.contains("RuntimeIOException"),
        "{}",
        failed.excerpt
    );
    assert!(
        !failed.excerpt.contains("s3cr3tvalue"),
        "{}",
        failed.excerpt
    );

    // The deadline passed in the expiry: a timeout of that step, the rewrite stands.
    let output = EngineOutput {
        timed_out: true,
        exit_code: 137,
        ..committed_then("", StatementKind::ExpireSnapshots)
    };
    let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
    assert_eq!(failed.class, FailureClass::Timeout);

    // Spark Connect: the server's error on the expiry.
    let output = EngineOutput {
        error: Some(ServerError {
            error_class: "org.apache.iceberg.exceptions.CommitFailedException".to_string(),
            message: "expire failed".to_string(),
            ..ServerError::default()
        }),
        ..committed_then("", StatementKind::ExpireSnapshots)
    };
    let failed = judge(&output, &job()).unwrap().maintenance_failed.unwrap();
    assert_eq!(failed.class, FailureClass::CommitConflict);
}

#[test]
fn a_failure_before_every_rewrite_returned_is_a_failed_run() {
    // The rewrite itself failed: nothing of it returned.
    let mut output = committed_then(
            "org.apache.iceberg.exceptions.ValidationException: found new delete for replaced data file",
            StatementKind::Rewrite,
        );
    output.results.truncate(1);
    assert_eq!(
        judge(&output, &job()).unwrap_err().0,
        FailureClass::CommitConflict
    );
    // Two rewrites (quiet partitions apart), the second failed: not committed as a whole.
    let mut two = job();
    two.statements.insert(
        2,
        Statement::new(
            StatementKind::Rewrite,
            "CALL lakehouse.system.rewrite_data_files(table => 'a.b')",
        ),
    );
    let output = committed_then("java.lang.IllegalStateException: x", StatementKind::Rewrite);
    assert_eq!(judge(&output, &two).unwrap_err().0, FailureClass::Other);
}

#[tokio::test]
async fn a_committed_run_is_not_retried_for_a_failed_step_after_it() {
    let runner = Scripted(Mutex::new(vec![Ok(committed_then(
        "org.apache.iceberg.exceptions.CommitFailedException: expire",
        StatementKind::ExpireSnapshots,
    ))]));
    match execute(&runner, &job(), 3, Duration::from_millis(1)).await {
        RunOutcome::Success {
            report, attempts, ..
        } => {
            assert_eq!(attempts, 1, "the rewrite is not run again");
            assert_eq!(
                report.maintenance_failed.unwrap().class,
                FailureClass::CommitConflict
            );
        }
        other => panic!("{other:?}"),
    }
}
