use super::*;

#[test]
fn errors_are_classified_as_settlement_knows_them() {
    assert_eq!(
        NativeError::CommitConflict("x".into()).class(),
        FailureClass::CommitConflict
    );
    assert_eq!(
        NativeError::CommitStateUnknown("x".into()).class(),
        FailureClass::CommitStateUnknown
    );
    assert_eq!(
        NativeError::Timeout("x".into()).class(),
        FailureClass::Timeout
    );
    assert_eq!(
        NativeError::CatalogUnavailable("x".into()).class(),
        FailureClass::EngineUnavailable
    );
    assert_eq!(
        NativeError::InvalidInput("x".into()).class(),
        FailureClass::Other
    );
    assert!(NativeError::Unsupported("deletes".into()).needs_another_engine());
    assert!(NativeError::RunTooLarge {
        input_bytes: 2,
        limit_bytes: 1
    }
    .needs_another_engine());
    assert!(!NativeError::CommitConflict("x".into()).needs_another_engine());
}

#[test]
fn a_report_becomes_the_spark_paths_summary() {
    let report = NativeReport {
        result: RewriteResult {
            rewritten_data_files_count: 24,
            added_data_files_count: 1,
            rewritten_bytes_count: 38_000,
            ..RewriteResult::default()
        },
        output_files: vec!["s3://lake/t/data/a.parquet".to_string()],
        snapshot_ids: vec![7],
        spec: vec![PartitionField {
            name: "ts_day".to_string(),
            source: "ts".to_string(),
            transform: Transform::Day,
            source_type: Some("timestamp".to_string()),
        }],
        left: Vec::new(),
        truth: vec![("s3://lake/t/data/a.parquet".to_string(), 5_000)],
        committed: vec!["s3://lake/t/data/a.parquet".to_string()],
        manifest_count: 3,
        deletes: DeleteRead::default(),
        maintenance_failed: Some(MaintenanceFailure {
            step: "expire_snapshots".to_string(),
            class: FailureClass::Other,
            excerpt: "gc.enabled is false".to_string(),
        }),
    };
    let summary = ReportSummary::from(report.clone());
    assert_eq!(summary.maintenance_failed, report.maintenance_failed);
    assert_eq!(summary.result, report.result);
    assert_eq!(summary.output_files, report.output_files);
    assert_eq!(summary.spec, Some(report.spec));
    assert_eq!(summary.truth, Some(report.truth));
    assert_eq!(summary.committed, report.committed);
    assert_eq!(summary.manifest_count, Some(3));
}
