use super::report::{partitioning, table_order};
use super::*;
use crate::engine::spark::sql::{Statement, StatementKind};
use crate::model::strategy::TableOrder;

const NONCE: &str = "5f1c0ae4b2d94e17a0c3b6d8e9f01234";

fn statements(kinds: &[StatementKind]) -> Vec<Statement> {
    kinds
        .iter()
        .map(|kind| Statement::new(*kind, format!("-- {}", kind.as_str())))
        .collect()
}

/// What spark-sql prints for a framed run whose statements printed `outputs` in turn; the
/// end marker only when `ended`.
fn printed(outputs: &[&str], ended: bool) -> String {
    let mut text = String::from("some log line on stdout\n");
    for (index, output) in outputs.iter().enumerate() {
        text.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:{index}\n{output}"));
    }
    if ended {
        text.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:end\n"));
    }
    text
}

fn report_of(kinds: &[StatementKind], outputs: &[&str]) -> Result<RunReport, ParseError> {
    let read = framed_results(NONCE, &statements(kinds), &printed(outputs, true));
    assert_eq!(read.unfinished, None);
    report_from_results(&read.results)
}

const REWRITE: &str = "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\tfailed_data_files_count\tremoved_delete_files_count\n40\t2\t36508\t0\t0\n";

fn json_file(path: &str, size: Option<u64>) -> String {
    match size {
        Some(size) => serde_json::json!({"path": path, "size": size}).to_string(),
        None => serde_json::json!({"snapshot_id": 7, "path": path}).to_string(),
    }
}

#[test]
fn each_statement_is_read_for_what_it_is() {
    use StatementKind::*;
    let outputs = format!(
        "icepack_output_file\n{}\n{}\n",
        json_file("s3://lake/w/t/data/part=a/00000-1.parquet", None),
        json_file("s3://lake/w/t/data/part=b/00000-2.parquet", None)
    );
    let truth = format!(
        "icepack_truth_file\n{}\n{}\n",
        json_file("s3://lake/w/t/data/part=a/x.parquet", Some(1200)),
        json_file("s3://lake/w/t/data/part=b/y.parquet", Some(800))
    );
    let committed = format!(
        "icepack_committed_file\n{}\n",
        serde_json::json!({"path": "s3://lake/w/t/data/part=a/00000-1.parquet"})
    );
    let report = report_of(
        &[Refresh, Rewrite, PartitionSpec, SortOrder, Outputs, Truth, Manifests, Deletes, Committed],
        &[
            "",
            REWRITE,
            "col_name\tdata_type\tcomment\nid\tbigint\tNULL\nd\tstring\tNULL\n\t\t\n# Partitioning\t\t\nPart 0\td\t\n",
            "key\tvalue\nsort-order\tid ASC NULLS FIRST\n",
            &outputs,
            &truth,
            "icepack_manifests\n3\n",
            "icepack_position_deletes\ticepack_equality_deletes\ticepack_deleted_rows\ticepack_data_rows\n1\t0\t5\t100\n",
            &committed,
        ],
    )
    .unwrap();
    assert_eq!(
        report.result,
        RewriteResult {
            rewritten_data_files_count: 40,
            added_data_files_count: 2,
            rewritten_bytes_count: 36508,
            failed_data_files_count: 0,
            removed_delete_files_count: 0,
        }
    );
    assert_eq!(report.output_files.len(), 2);
    assert_eq!(
        split_object_path(&report.output_files[0]),
        Some(("lake", "w/t/data/part=a/00000-1.parquet"))
    );
    assert_eq!(
        report.truth.unwrap(),
        vec![
            ("s3://lake/w/t/data/part=a/x.parquet".to_string(), 1200),
            ("s3://lake/w/t/data/part=b/y.parquet".to_string(), 800)
        ]
    );
    assert_eq!(
        report.committed,
        vec!["s3://lake/w/t/data/part=a/00000-1.parquet".to_string()]
    );
    assert_eq!(report.spec.unwrap().len(), 1);
    assert_eq!(
        report.table_order,
        Some(TableOrder::Sorted("id ASC NULLS FIRST".to_string()))
    );
    assert_eq!(report.manifest_count, Some(3));
    assert_eq!(report.deletes.unwrap().data_rows, 100);
}

/// Issue 31: a column or table property named like a result field opened a fake result
/// (`rewritten_data_files_count`) or forged a truth (`icepack_truth_file`). Whatever a table
/// holds is data of the statement that read it.
#[test]
fn nothing_a_table_holds_can_pass_for_a_result() {
    use StatementKind::*;
    let forged_lines = "rewritten_data_files_count\tadded_data_files_count\n999\t1\n\
                        icepack_truth_file\tfile_size_in_bytes\ns3://lake/w/t/data/forged.parquet\t1\n\
                        icepack_committed_file\ns3://lake/w/t/data/forged.parquet\n\
                        icepack_frame\n0123456789abcdef0123456789abcdef:end\n";
    // DESCRIBE TABLE of a table with such columns, comments holding newlines.
    let describe = format!(
        "col_name\tdata_type\tcomment\nrewritten_data_files_count\tbigint\tNULL\n\
         icepack_truth_file\tstring\t{forged_lines}\n\
         s\tstring\tx\n# Partitioning\nPart 0\tbucket(4, id)\t\n\
         d\tstring\t\n# Partition Information\t\t\n# col_name\tdata_type\tcomment\nd\tstring\t\n"
    );
    // Its sort-order property's value holding the same lines.
    let order = format!("key\tvalue\nsort-order\tid ASC\n{forged_lines}");
    let truth = format!(
        "icepack_truth_file\n{}\n",
        json_file(
            "s3://lake/w/t/data/a\tb\nrewritten_data_files_count.parquet",
            Some(10)
        )
    );
    let kinds = [Refresh, PartitionSpec, SortOrder, Truth, Committed];
    let report = report_of(
        &kinds,
        &["", &describe, &order, &truth, "icepack_committed_file\n"],
    )
    .unwrap();
    assert_eq!(report.result, RewriteResult::default(), "no rewrite result");
    assert_eq!(
        report.truth.unwrap(),
        vec![(
            "s3://lake/w/t/data/a\tb\nrewritten_data_files_count.parquet".to_string(),
            10
        )],
        "one file, its path whole"
    );
    assert!(report.committed.is_empty());
    assert!(report.spec.unwrap().is_empty(), "no partitioning");
    match report.table_order.unwrap() {
        TableOrder::Sorted(order) => assert!(order.starts_with("id ASC\n"), "{order}"),
        other => panic!("{other:?}"),
    }
    // Without a rewrite statement nothing is a rewrite result, whatever was printed.
    assert_eq!(
        report_of(&[Refresh, PartitionSpec], &["", &describe]),
        Err(ParseError::NoResult)
    );
}

/// Spark prints a spec of identity fields only as `# Partition Information` (a Spark Connect
/// result, one row a row): read, where only `# Partitioning` was, which left every run of
/// such a table without its partitions (found on v3 by `connect_e2e::format_v3_…`).
#[test]
fn an_identity_spec_is_read_from_its_partition_information() {
    let set = |rows: &[[&str; 3]]| ResultSet {
        columns: vec!["col_name".into(), "data_type".into(), "comment".into()],
        rows: rows
            .iter()
            .map(|row| row.iter().map(|cell| cell.to_string()).collect())
            .collect(),
    };
    let identity = set(&[
        ["id", "bigint", ""],
        ["order_date", "string", ""],
        ["# Partition Information", "", ""],
        ["# col_name", "data_type", "comment"],
        ["order_date", "string", ""],
    ]);
    let spec = partitioning(&identity);
    assert_eq!(spec.len(), 1, "{spec:?}");
    assert_eq!(spec[0].source, "order_date");
    assert_eq!(
        spec[0].transform,
        crate::table::partitions::Transform::Identity
    );
    assert_eq!(
        spec[0].source_type.as_deref(),
        Some("string"),
        "typed for the run's filter"
    );
    // Not a column of the table, or rows after it: a comment's text.
    let forged = set(&[
        ["id", "bigint", ""],
        ["# Partition Information", "", ""],
        ["# col_name", "data_type", "comment"],
        ["region", "string", ""],
    ]);
    assert!(partitioning(&forged).is_empty());
    let followed = set(&[
        ["id", "bigint", ""],
        ["# Partition Information", "", ""],
        ["# col_name", "data_type", "comment"],
        ["id", "bigint", ""],
        ["more", "", ""],
    ]);
    assert!(partitioning(&followed).is_empty());
}

#[test]
fn a_statement_whose_end_never_came_is_not_read() {
    use StatementKind::*;
    let kinds = statements(&[Refresh, Rewrite, Truth, ExpireSnapshots]);
    let truth = format!(
        "icepack_truth_file\n{}\n",
        json_file("s3://lake/t/a.parquet", Some(5))
    );
    // Cut off inside the truth read: the rewrite ended, the truth did not.
    let cut = printed(&["", REWRITE, &truth], false);
    let read = framed_results(NONCE, &kinds, &cut);
    assert_eq!(read.unfinished, Some(Truth));
    assert_eq!(
        read.results
            .iter()
            .map(|(kind, _)| *kind)
            .collect::<Vec<_>>(),
        [Refresh, Rewrite]
    );
    // Failed in the expiry: everything before it ended.
    let failed = printed(&["", REWRITE, &truth, ""], false);
    let read = framed_results(NONCE, &kinds, &failed);
    assert_eq!(read.unfinished, Some(ExpireSnapshots));
    let report = report_from_results(&read.results).unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 40);
    assert_eq!(report.truth.unwrap().len(), 1);
    // Nothing framed at all (spark-sql failed to start): the first statement did not end.
    let read = framed_results(NONCE, &kinds, "Error: no such option\n");
    assert_eq!(read.unfinished, Some(Refresh));
    assert!(read.results.is_empty());
    // Another run's nonce is data.
    let other = printed(&["", REWRITE, &truth, ""], true)
        .replace(NONCE, "0123456789abcdef0123456789abcdef");
    assert!(framed_results(NONCE, &kinds, &other).results.is_empty());
}

#[test]
fn the_sort_order_is_its_property_whole_and_absent_is_unsorted() {
    let order = |text: &str| table_order(&ResultSet::from_text(text));
    assert_eq!(
        order("key\tvalue\nsort-order\tid ASC NULLS FIRST, ts DESC NULLS LAST\n"),
        TableOrder::Sorted("id ASC NULLS FIRST, ts DESC NULLS LAST".to_string())
    );
    assert_eq!(
        order("key\tvalue\nsort-order\tTable lakehouse.a.b does not have property: sort-order\n"),
        TableOrder::Unsorted
    );
    assert_eq!(order("key\tvalue\n"), TableOrder::Unsorted);
    // Spark Connect: one row, the value in one cell.
    let structured = ResultSet {
        columns: vec!["key".to_string(), "value".to_string()],
        rows: vec![vec!["sort-order".to_string(), "`a\tb` ASC".to_string()]],
    };
    assert_eq!(
        table_order(&structured),
        TableOrder::Sorted("`a\tb` ASC".to_string())
    );
}

#[test]
fn two_rewrites_are_summed() {
    use StatementKind::*;
    let report = report_of(
        &[Rewrite, Rewrite, Outputs],
        &[
            "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n3\t1\t300\n",
            "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n2\t1\t900\n",
            "icepack_output_file\n",
        ],
    )
    .unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 5);
    assert_eq!(report.result.added_data_files_count, 2);
    assert_eq!(report.result.rewritten_bytes_count, 1200);
}

#[test]
fn older_and_reordered_columns_parse() {
    let report = report_of(
        &[StatementKind::Rewrite],
        &["Response code\nadded_data_files_count\trewritten_data_files_count\n1\t7\n"],
    )
    .unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 7);
    assert_eq!(report.result.added_data_files_count, 1);
    assert_eq!(report.result.rewritten_bytes_count, 0);
    assert!(report.output_files.is_empty());
}

#[test]
fn a_no_op_is_a_valid_result() {
    let report = report_of(
        &[StatementKind::Rewrite, StatementKind::Outputs],
        &[
            "rewritten_data_files_count\tadded_data_files_count\n0\t0\n",
            "icepack_output_file\n",
        ],
    )
    .unwrap();
    assert_eq!(report.result, RewriteResult::default());
}

#[test]
fn missing_or_broken_results_are_errors() {
    use StatementKind::*;
    assert_eq!(report_of(&[Refresh], &[""]), Err(ParseError::NoResult));
    assert_eq!(
        report_of(&[Rewrite], &["rewritten_data_files_count\n"]),
        Err(ParseError::NoRow)
    );
    assert!(matches!(
        report_of(&[Rewrite], &["rewritten_data_files_count\nNULL\n"]),
        Err(ParseError::NotANumber { .. })
    ));
}

#[test]
fn the_runs_own_replace_snapshots_are_those_that_removed_its_files() {
    let snapshot = |id: i64, rewritten: u64| ReplaceSnapshot {
        snapshot_id: id,
        rewritten_data_files: Some(rewritten),
        added_data_files: Some(1),
        rewritten_bytes: Some(rewritten * 100),
    };
    // 1: the run's (it removed two claimed files, one under s3a://); 2: another writer's
    // rewrite of other files committed at the same time; 3: removed nothing read.
    let snapshots = [snapshot(1, 3), snapshot(2, 9), snapshot(3, 4)];
    let removed = |id: i64, path: &str| FileRow {
        snapshot_id: Some(id),
        path: path.to_string(),
        size: None,
    };
    let rows = [
        removed(1, "s3://lake/t/data/a.parquet"),
        removed(1, "s3a://lake/t/data/b.parquet"),
        removed(1, "s3://lake/t/data/old-output.parquet"),
        removed(2, "s3://lake/t/data/other.parquet"),
    ];
    let claimed: std::collections::HashSet<(String, String)> = [
        ("lake".to_string(), "t/data/a.parquet".to_string()),
        ("lake".to_string(), "t/data/b.parquet".to_string()),
        ("lake".to_string(), "t/data/late.parquet".to_string()),
    ]
    .into();
    assert_eq!(own_replace_snapshots(&snapshots, &rows, &claimed), [1]);
    assert!(own_replace_snapshots(&snapshots, &rows, &Default::default()).is_empty());
    assert!(own_replace_snapshots(&snapshots[1..], &rows, &claimed).is_empty());

    // As a recovery reads them: only the run's own snapshot and outputs are kept, and the
    // counts are its summary's.
    let json = |value: serde_json::Value| vec![value.to_string()];
    let results = vec![
        (
            StatementKind::ReplaceSnapshots,
            ResultSet {
                columns: vec!["icepack_replace_snapshot".to_string()],
                rows: vec![
                    json(
                        serde_json::json!({"snapshot_id": 1, "rewritten_data_files": 3, "added_data_files": 1, "rewritten_bytes": 300}),
                    ),
                    json(
                        serde_json::json!({"snapshot_id": 2, "rewritten_data_files": 9, "added_data_files": 1, "rewritten_bytes": 900}),
                    ),
                ],
            },
        ),
        (
            StatementKind::RemovedFiles,
            ResultSet {
                columns: vec!["icepack_removed_file".to_string()],
                rows: rows
                    .iter()
                    .map(|row| {
                        json(serde_json::json!({"snapshot_id": row.snapshot_id, "path": row.path}))
                    })
                    .collect(),
            },
        ),
        (
            StatementKind::Outputs,
            ResultSet {
                columns: vec!["icepack_output_file".to_string()],
                rows: vec![
                    json(
                        serde_json::json!({"snapshot_id": 1, "path": "s3://lake/t/data/out-1.parquet"}),
                    ),
                    json(
                        serde_json::json!({"snapshot_id": 2, "path": "s3://lake/t/data/out-2.parquet"}),
                    ),
                ],
            },
        ),
    ];
    let (read_snapshots, read_removed) = replace_snapshots(&results);
    assert_eq!(read_snapshots.len(), 2);
    assert_eq!(read_removed.len(), 4);
    let own = own_replace_snapshots(&read_snapshots, &read_removed, &claimed);
    let report = report_from_results(&keep_own_snapshots(results, &own)).unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 3);
    assert_eq!(report.result.rewritten_bytes_count, 300);
    assert_eq!(report.output_files, ["s3://lake/t/data/out-1.parquet"]);
}

#[test]
fn results_of_any_size_stream_through() {
    use StatementKind::*;
    let kinds = statements(&[Rewrite, Truth, Committed]);
    let mut stdout = printed(
        &["rewritten_data_files_count\tadded_data_files_count\n100000\t10\n"],
        false,
    );
    stdout.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:1\nicepack_truth_file\n"));
    for index in 0..100_000 {
        stdout.push_str(&json_file(
            &format!("s3://lake/w/t/data/part-{index:06}.parquet"),
            Some(1000 + index),
        ));
        stdout.push('\n');
    }
    stdout.push_str(&format!(
        "{FRAME_COLUMN}\n{NONCE}:2\nicepack_committed_file\n{}\n{FRAME_COLUMN}\n{NONCE}:end",
        serde_json::json!({"path": "s3://lake/w/t/data/new.parquet"})
    ));
    // Fed in odd-sized chunks, lines split across them; the last line without its newline.
    let mut reader = FramedStdout::new(NONCE, &kinds);
    for chunk in stdout.as_bytes().chunks(4093) {
        reader.push(chunk);
    }
    let read = reader.finish();
    assert_eq!(read.unfinished, None);
    let report = report_from_results(&read.results).unwrap();
    assert_eq!(report.result.rewritten_data_files_count, 100_000);
    let truth = report.truth.unwrap();
    assert_eq!(truth.len(), 100_000);
    assert_eq!(
        truth[99_999],
        (
            "s3://lake/w/t/data/part-099999.parquet".to_string(),
            100_999
        )
    );
    assert_eq!(
        report.committed,
        vec!["s3://lake/w/t/data/new.parquet".to_string()]
    );
}

proptest::proptest! {
    /// No text without the run's nonce is ever a result, whatever it holds.
    #[test]
    fn text_without_the_nonce_is_never_a_result(text in "(?s).{0,600}") {
        use StatementKind::*;
        let kinds = statements(&[Rewrite, Truth, Committed]);
        let read = framed_results(NONCE, &kinds, &text);
        proptest::prop_assert!(read.results.is_empty());
        proptest::prop_assert_eq!(read.unfinished, Some(Rewrite));
    }

    /// Whatever a statement prints (a table's values) stays that statement's: the others are
    /// read as they were printed.
    #[test]
    fn what_a_statement_prints_stays_its_own(text in "[a-z_:0-9{}\"\t\n]{0,400}") {
        use StatementKind::*;
        let kinds = statements(&[Rewrite, PartitionSpec, Committed]);
        let committed = format!(
            "icepack_committed_file\n{}\n",
            serde_json::json!({"path": "s3://lake/t/data/a.parquet"})
        );
        let read = framed_results(
            NONCE,
            &kinds,
            &printed(&[REWRITE, &format!("col_name\tdata_type\tcomment\n{text}\n"), &committed], true),
        );
        proptest::prop_assert_eq!(
            read.results.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
            vec![Rewrite, PartitionSpec, Committed]
        );
        let report = report_from_results(&read.results).unwrap();
        proptest::prop_assert_eq!(report.result.rewritten_data_files_count, 40);
        proptest::prop_assert_eq!(report.committed, vec!["s3://lake/t/data/a.parquet".to_string()]);
    }
}

#[test]
fn the_frame_surrounds_every_statement() {
    let framed = framed_statements(
        NONCE,
        &statements(&[StatementKind::Refresh, StatementKind::Rewrite]),
    );
    assert_eq!(
        framed,
        [
            format!("SELECT '{NONCE}:0' AS icepack_frame"),
            "-- refresh_table".to_string(),
            format!("SELECT '{NONCE}:1' AS icepack_frame"),
            "-- rewrite_data_files".to_string(),
            format!("SELECT '{NONCE}:end' AS icepack_frame"),
        ]
    );
    let nonce = new_nonce();
    assert_eq!(nonce.len(), 32);
    assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(nonce, new_nonce());
}

#[test]
fn failures_are_classified() {
    assert_eq!(
        classify_failure(137, true, false, ""),
        FailureClass::OutOfMemory
    );
    assert_eq!(
        classify_failure(137, false, false, "Killed"),
        FailureClass::Other,
        "137 without OOMKilled"
    );
    assert_eq!(
        classify_failure(0, true, false, ""),
        FailureClass::Other,
        "OOMKilled without 137"
    );
    assert_eq!(
        classify_failure(
            1,
            false,
            false,
            "java.lang.OutOfMemoryError: Java heap space"
        ),
        FailureClass::OutOfMemory
    );
    assert_eq!(classify_failure(1, false, true, ""), FailureClass::Timeout);
    assert_eq!(
        classify_failure(1, false, false, "org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new delete for replaced data file"),
        FailureClass::CommitConflict
    );
    assert_eq!(
        classify_failure(
            1,
            false,
            false,
            "org.apache.iceberg.exceptions.CommitStateUnknownException: x"
        ),
        FailureClass::CommitStateUnknown
    );
    assert!(!FailureClass::CommitStateUnknown.is_retryable());
    assert!(!FailureClass::Timeout.is_retryable());
}

#[test]
fn server_errors_are_classified_by_class_and_state() {
    let error = |class: &str, state: Option<&str>, classes: &[&str]| ServerError {
        error_class: class.to_string(),
        sql_state: state.map(str::to_string),
        exception_classes: classes.iter().map(|name| name.to_string()).collect(),
        message: "it failed".to_string(),
        transport: false,
    };
    assert_eq!(
        classify_server_error(&error("OPERATION_CANCELED", Some("HY008"), &[])),
        FailureClass::Timeout
    );
    assert_eq!(
        classify_server_error(&error(
            "org.apache.iceberg.exceptions.ValidationException",
            None,
            &[
                "org.apache.iceberg.exceptions.ValidationException",
                "java.lang.RuntimeException"
            ]
        )),
        FailureClass::CommitConflict
    );
    assert_eq!(
        classify_server_error(&error(
            "org.apache.spark.SparkException",
            None,
            &["org.apache.iceberg.exceptions.CommitStateUnknownException"]
        )),
        FailureClass::CommitStateUnknown
    );
    assert_eq!(
        classify_server_error(&error("UNABLE_TO_ACQUIRE_MEMORY", Some("53200"), &[])),
        FailureClass::OutOfMemory
    );
    assert_eq!(
        classify_server_error(&error("TABLE_OR_VIEW_NOT_FOUND", Some("42P01"), &[])),
        FailureClass::Other
    );
    let mut down = error("", None, &[]);
    down.transport = true;
    assert_eq!(
        classify_server_error(&down),
        FailureClass::EngineUnavailable
    );
    let long = ServerError {
        message: "x".repeat(500),
        ..error("TABLE_OR_VIEW_NOT_FOUND", Some("42P01"), &[])
    };
    let line = long.describe(100);
    assert!(
        line.starts_with("[TABLE_OR_VIEW_NOT_FOUND] (SQLSTATE 42P01) x"),
        "{line}"
    );
    assert_eq!(line.chars().count(), 100);
}

#[test]
fn a_value_is_found_by_its_column() {
    let set = |columns: &[&str], row: &[&str]| ResultSet {
        columns: columns.iter().map(|name| name.to_string()).collect(),
        rows: vec![row.iter().map(|cell| cell.to_string()).collect()],
    };
    let sets = [
        set(&["icepack_output_file"], &["s3://b/k"]),
        set(&["icepack_replace_snapshots", "x"], &["2", "3"]),
    ];
    assert_eq!(first_value(&sets, "icepack_replace_snapshots"), Some("2"));
    assert_eq!(first_value(&sets, "x"), Some("3"));
    assert_eq!(first_value(&sets, "missing"), None);
}

#[test]
fn statistics_files_are_counted_from_their_procedures_rows_only() {
    let set = |columns: &[&str], rows: &[&str]| ResultSet {
        columns: columns.iter().map(|name| name.to_string()).collect(),
        rows: rows.iter().map(|cell| vec![cell.to_string()]).collect(),
    };
    let truth = (StatementKind::Truth, set(&["icepack_truth_file"], &[]));
    let written = report_from_results(&[
        (
            StatementKind::TableStatistics,
            set(&["statistics_file"], &["s3://b/t/metadata/1-stats.puffin"]),
        ),
        (
            StatementKind::PartitionStatistics,
            set(&["partition_statistics_file"], &["NULL"]),
        ),
        truth.clone(),
    ])
    .unwrap();
    assert_eq!(written.statistics_files, Some(1));
    // A table's column named like the procedure's output is no statistics file.
    let imitated = report_from_results(&[
        (
            StatementKind::Truth,
            set(&["statistics_file"], &["s3://b/t/x.puffin"]),
        ),
        truth,
    ])
    .unwrap();
    assert_eq!(imitated.statistics_files, None);
}

#[test]
fn excerpts_are_short_telling_and_secret_free() {
    let stderr = "INFO starting\n24/05/01 ERROR SparkSQLDriver: Failed in [CALL ...]\norg.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: a.b (key AKIASECRETKEY123)\n\tat org.apache.iceberg.Foo(Foo.java:1)\n";
    let excerpt = failure_excerpt(stderr, &["AKIASECRETKEY123".to_string()], 500);
    assert!(excerpt.contains("NoSuchTableException"));
    assert!(!excerpt.contains("AKIASECRETKEY123"));
    assert!(excerpt.contains("***"));
    assert!(!excerpt.contains("Foo.java"));
    assert!(failure_excerpt(&"x".repeat(5000), &[], 100).chars().count() <= 100);
}
