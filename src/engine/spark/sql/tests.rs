use super::*;

fn sql() -> CompactionSql {
    CompactionSql {
        catalog: "lakehouse".to_string(),
        table: "analytics.customer_orders".to_string(),
        target_file_bytes: 536_870_912,
        partial_progress: false,
        where_filter: None,
        expire_snapshots_older_than_hours: None,
        run_started_millis: 1_714_564_800_000,
        small_file_bytes: 64 * 1024 * 1024,
        task: SqlTask::Rewrite(rewrite()),
        committed_since_millis: 1_714_564_800_000,
        extra_options: BTreeMap::new(),
        orphan_older_than_hours: 72,
        orphan_prefix_listing: false,
        partition_statistics: true,
        expire_snapshots_retain_last: None,
    }
}

fn rewrite() -> SqlRewrite {
    SqlRewrite {
        calls: vec![RewriteCall {
            min_file_size_bytes: None,
            partition_filter: None,
        }],
        strategy: RunStrategy::Binpack,
        min_input_files: 10,
        apply_deletes: None,
    }
}

/// `sql()` with a rewrite of its own.
fn rewriting(rewrite: SqlRewrite) -> CompactionSql {
    CompactionSql {
        task: SqlTask::Rewrite(rewrite),
        ..sql()
    }
}

#[test]
fn a_run_due_by_deletes_applies_them_or_merges_position_deletes() {
    let applying = rewriting(SqlRewrite {
        apply_deletes: Some(DeleteThresholds {
            ratio_ppm: Some(250_000),
        }),
        ..rewrite()
    })
    .statements();
    assert!(applying.contains("'delete-file-threshold', '1', 'delete-ratio-threshold', '0.25', 'min-input-files', '10', 'remove-dangling-deletes', 'true'"), "{applying}");
    assert!(applying.contains("'536870912'));\nCALL lakehouse.system.rewrite_position_delete_files(table => 'analytics.customer_orders', options => map('rewrite-all', 'true'));\nDESCRIBE"), "{applying}");
    assert!(!sql().statements().contains("rewrite_position_delete_files"));
    let merging = CompactionSql {
        task: SqlTask::Maintenance(Maintenance::RewritePositionDeletes),
        ..sql()
    }
    .statement_list()
    .into_iter()
    .map(|statement| statement.sql)
    .collect::<Vec<_>>();
    assert_eq!(
        merging[1],
        "CALL lakehouse.system.rewrite_position_delete_files(table => 'analytics.customer_orders')"
    );
    assert!(sql()
        .statement_list()
        .into_iter()
        .map(|statement| statement.sql)
        .collect::<Vec<_>>()
        .iter()
        .any(|s| s.starts_with("SELECT count_if(content = 1) AS icepack_position_deletes")));
}

#[test]
fn a_statistics_run_computes_table_and_partition_statistics_then_reads_the_table() {
    let statistics = |partition_statistics| {
        CompactionSql {
            task: SqlTask::Maintenance(Maintenance::ComputeStatistics),
            partition_statistics,
            ..sql()
        }
        .statement_list()
    };
    let partitioned = statistics(true);
    let kinds: Vec<StatementKind> = partitioned.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds[..4],
        [
            StatementKind::Refresh,
            StatementKind::TableStatistics,
            StatementKind::PartitionStatistics,
            StatementKind::PartitionSpec
        ]
    );
    assert_eq!(
        partitioned[1].sql,
        "CALL lakehouse.system.compute_table_stats(table => 'analytics.customer_orders')"
    );
    assert_eq!(
        partitioned[2].sql,
        "CALL lakehouse.system.compute_partition_stats(table => 'analytics.customer_orders')"
    );
    assert!(
        kinds.contains(&StatementKind::Truth),
        "the run reads the truth"
    );
    assert!(!kinds.contains(&StatementKind::Rewrite));
    let unpartitioned = statistics(false);
    assert!(unpartitioned
        .iter()
        .all(|s| s.kind != StatementKind::PartitionStatistics));
    assert!(unpartitioned
        .iter()
        .any(|s| s.kind == StatementKind::TableStatistics));
    assert!(!sql().statements().contains("compute_"));
}

#[test]
fn orphans_older_than_the_limit_are_removed_or_listed_and_expiry_keeps_retain_last() {
    let orphans = |dry_run| {
        CompactionSql {
            task: SqlTask::Maintenance(Maintenance::RemoveOrphans { dry_run }),
            ..sql()
        }
        .statement_list()
        .into_iter()
        .map(|statement| statement.sql)
        .collect::<Vec<_>>()
    };
    assert_eq!(
            orphans(true)[1],
            "CALL lakehouse.system.remove_orphan_files(table => 'analytics.customer_orders', older_than => TIMESTAMP '2024-04-28 12:00:00.000', dry_run => true)"
        );
    assert!(orphans(false)[1].ends_with("dry_run => false)"));
    let listed_by_prefix = CompactionSql {
        task: SqlTask::Maintenance(Maintenance::RemoveOrphans { dry_run: false }),
        orphan_prefix_listing: true,
        ..sql()
    }
    .statements();
    assert!(
        listed_by_prefix.contains("dry_run => false, prefix_listing => true)"),
        "{listed_by_prefix}"
    );
    let expiring = CompactionSql {
        expire_snapshots_older_than_hours: Some(168),
        expire_snapshots_retain_last: Some(5),
        ..sql()
    }
    .statements();
    assert!(
        expiring.contains("older_than => TIMESTAMP '2024-04-24 12:00:00.000', retain_last => 5)"),
        "{expiring}"
    );
}

#[test]
fn a_manifest_run_rewrites_manifests_not_data_and_reads_the_count() {
    let statements = CompactionSql {
        task: SqlTask::Maintenance(Maintenance::RewriteManifests),
        ..sql()
    }
    .statement_list()
    .into_iter()
    .map(|statement| statement.sql)
    .collect::<Vec<_>>();
    assert_eq!(
        statements[1],
        "CALL lakehouse.system.rewrite_manifests(table => 'analytics.customer_orders')"
    );
    assert!(!statements.iter().any(|s| s.contains("rewrite_data_files")));
    assert!(statements.contains(
        &"SELECT count(*) AS icepack_manifests FROM lakehouse.analytics.customer_orders.manifests"
            .to_string()
    ));
    assert!(sql()
        .statement_list()
        .into_iter()
        .map(|statement| statement.sql)
        .collect::<Vec<_>>()
        .iter()
        .any(|s| s.contains("AS icepack_manifests")));
}

#[test]
fn a_sort_or_zorder_run_passes_its_order_quoted_and_extra_options_join_icepacks() {
    let sorted = CompactionSql {
        extra_options: BTreeMap::from([(
            "shuffle-partitions-per-file".to_string(),
            "4".to_string(),
        )]),
        ..rewriting(SqlRewrite {
            strategy: RunStrategy::Sort(Some("event_ts DESC NULLS LAST, id".to_string())),
            ..rewrite()
        })
    }
    .statements();
    assert!(sorted.contains(
            "rewrite_data_files(table => 'analytics.customer_orders', strategy => 'sort', sort_order => 'event_ts DESC NULLS LAST, id', options => map('min-input-files', '10', 'shuffle-partitions-per-file', '4', 'target-file-size-bytes', '536870912'));"
        ), "{sorted}");
    let own_order = rewriting(SqlRewrite {
        strategy: RunStrategy::Sort(None),
        ..rewrite()
    })
    .statements();
    assert!(
        own_order.contains("strategy => 'sort', options => map("),
        "the table's own order: {own_order}"
    );
    let zorder = rewriting(SqlRewrite {
        strategy: RunStrategy::Zorder(vec!["lat".to_string(), "lon".to_string()]),
        ..rewrite()
    })
    .statements();
    assert!(
        zorder.contains("strategy => 'sort', sort_order => 'zorder(lat, lon)', options"),
        "{zorder}"
    );
}

#[test]
fn every_read_of_the_table_reads_its_properties_for_the_sort_order() {
    let run = sql()
        .statement_list()
        .into_iter()
        .map(|statement| statement.sql)
        .collect::<Vec<_>>();
    let reconcile = CompactionSql {
        task: SqlTask::Read,
        ..sql()
    }
    .statement_list()
    .into_iter()
    .map(|statement| statement.sql)
    .collect::<Vec<_>>();
    let recovery = sql()
        .recovery_statement_list()
        .into_iter()
        .map(|statement| statement.sql)
        .collect::<Vec<_>>();
    for statements in [run, reconcile, recovery] {
        assert!(
            statements.iter().any(|statement| statement
                == "SHOW TBLPROPERTIES lakehouse.analytics.customer_orders ('sort-order')"),
            "{statements:?}"
        );
    }
}

#[test]
fn the_call_is_the_reference_workflows() {
    let statements = sql().statements();
    assert!(statements.starts_with("REFRESH TABLE lakehouse.analytics.customer_orders;\nCALL lakehouse.system.rewrite_data_files("), "{statements}");
    assert!(
            statements.contains(
                "'536870912'));\nDESCRIBE TABLE lakehouse.analytics.customer_orders;\nSHOW TBLPROPERTIES lakehouse.analytics.customer_orders ('sort-order');\nSELECT"
            ),
            "{statements}"
        );
    assert!(statements.contains(
            "CALL lakehouse.system.rewrite_data_files(table => 'analytics.customer_orders', strategy => 'binpack', options => map('min-input-files', '10', 'target-file-size-bytes', '536870912'));"
        ), "{statements}");
    assert!(statements.contains("FROM lakehouse.analytics.customer_orders.entries"));
    assert!(
        statements.contains("committed_at >= TIMESTAMP '2024-05-01 11:55:00.000'"),
        "{statements}"
    );
    assert!(!statements.contains("expire_snapshots"));
    assert!(statements.contains("SELECT to_json(named_struct('path', file_path, 'size', file_size_in_bytes)) AS icepack_truth_file FROM lakehouse.analytics.customer_orders.files WHERE content = 0 AND file_size_in_bytes < 67108864"), "{statements}");
    assert!(
        statements.contains(
            "AS icepack_committed_file FROM lakehouse.analytics.customer_orders.all_entries"
        ),
        "{statements}"
    );
}

#[test]
fn a_lost_connection_reads_the_outcome_from_the_metadata() {
    let recovery = sql().recovery_statement_list();
    let kinds: Vec<StatementKind> = recovery.iter().map(|statement| statement.kind).collect();
    assert_eq!(
        kinds[..3],
        [
            StatementKind::Refresh,
            StatementKind::ReplaceSnapshots,
            StatementKind::RemovedFiles
        ]
    );
    // The replace snapshots of an hour before the run began, whatever the clocks say: which
    // are the run's is for the files they removed to tell.
    assert_eq!(
            recovery[1].sql,
            "SELECT to_json(named_struct('snapshot_id', snapshot_id, 'rewritten_data_files', CAST(summary['deleted-data-files'] AS BIGINT), 'added_data_files', CAST(summary['added-data-files'] AS BIGINT), 'rewritten_bytes', CAST(summary['removed-files-size'] AS BIGINT))) AS icepack_replace_snapshot FROM lakehouse.analytics.customer_orders.snapshots WHERE operation = 'replace' AND committed_at >= TIMESTAMP '2024-05-01 11:00:00.000'"
        );
    assert_eq!(
            recovery[2].sql,
            "SELECT DISTINCT to_json(named_struct('snapshot_id', snapshot_id, 'path', data_file.file_path)) AS icepack_removed_file FROM lakehouse.analytics.customer_orders.all_entries WHERE status = 2 AND snapshot_id IN (SELECT snapshot_id FROM lakehouse.analytics.customer_orders.snapshots WHERE operation = 'replace' AND committed_at >= TIMESTAMP '2024-05-01 11:00:00.000')"
        );
    assert!(
        !recovery
            .iter()
            .any(|statement| statement.sql.starts_with("CALL")),
        "reads only"
    );
    for kind in [
        StatementKind::Outputs,
        StatementKind::Truth,
        StatementKind::Committed,
    ] {
        assert!(kinds.contains(&kind), "{kind:?}");
    }
    assert!(CompactionSql {
        task: SqlTask::Read,
        ..sql()
    }
    .recovery_statement_list()
    .is_empty());
}

#[test]
fn every_statement_says_what_it_is() {
    let statements = CompactionSql {
        expire_snapshots_older_than_hours: Some(24),
        ..rewriting(SqlRewrite {
            calls: vec![
                RewriteCall {
                    min_file_size_bytes: Some(64 * 1024 * 1024),
                    partition_filter: Some("`d` = '2024-05-01'".to_string()),
                },
                RewriteCall {
                    min_file_size_bytes: None,
                    partition_filter: Some("`d` = '2024-05-02'".to_string()),
                },
            ],
            ..rewrite()
        })
    }
    .statement_list();
    let kinds: Vec<StatementKind> = statements.iter().map(|statement| statement.kind).collect();
    use StatementKind::*;
    assert_eq!(
        kinds,
        [
            Refresh,
            Rewrite,
            Rewrite,
            PartitionSpec,
            SortOrder,
            Outputs,
            Truth,
            Manifests,
            Deletes,
            Committed,
            ExpireSnapshots
        ]
    );
    // The reads of paths select one JSON object a row: a path is read whole, whatever it holds.
    for statement in statements
        .iter()
        .filter(|statement| matches!(statement.kind, Outputs | Truth | Committed))
    {
        assert!(
            statement.sql.contains("to_json(named_struct("),
            "{}",
            statement.sql
        );
    }
    assert_eq!(
        statements[4].sql,
        "SHOW TBLPROPERTIES lakehouse.analytics.customer_orders ('sort-order')"
    );
}

#[test]
fn partition_and_user_filters_combine_and_reconcile_rewrites_nothing() {
    let statements = CompactionSql {
        where_filter: Some("amount > 0".to_string()),
        ..rewriting(SqlRewrite {
            calls: vec![RewriteCall {
                min_file_size_bytes: None,
                partition_filter: Some("`d` = '2024-05-01'".to_string()),
            }],
            ..rewrite()
        })
    }
    .statements();
    assert!(
        statements.contains(r"where => '(amount > 0) AND (`d` = \'2024-05-01\')'"),
        "{statements}"
    );
    let reconcile = CompactionSql {
        task: SqlTask::Read,
        ..sql()
    }
    .statements();
    assert!(!reconcile.contains("rewrite_data_files"));
    assert!(reconcile.contains("icepack_truth_file") && reconcile.starts_with("REFRESH TABLE"));
}

#[test]
fn options_where_and_follow_ups() {
    let statements = CompactionSql {
        partial_progress: true,
        where_filter: Some("order_date >= '2024-05-01'".to_string()),
        expire_snapshots_older_than_hours: Some(24),
        ..sql()
    }
    .statements();
    assert!(statements.contains("'partial-progress.enabled', 'true'"));
    assert!(
        statements.contains(r"where => 'order_date >= \'2024-05-01\''"),
        "{statements}"
    );
    assert!(statements.contains(
            "CALL lakehouse.system.expire_snapshots(table => 'analytics.customer_orders', older_than => TIMESTAMP '2024-04-30 12:00:00.000')"
        ), "{statements}");
}

#[test]
fn hostile_values_stay_inside_their_literal() {
    for hostile in [
        "x'); DROP TABLE lakehouse.a.b; --",
        "x\\'); DROP TABLE t; --",
        "a\nCALL lakehouse.system.remove_orphan_files(table => 'a.b')",
        "\\",
        "'",
    ] {
        let quoted = quote_string(hostile);
        assert!(quoted.starts_with('\'') && quoted.ends_with('\''));
        assert!(!quoted.contains('\n'));
        // Every quote inside is escaped: an unescaped one would end the literal early.
        let inner = &quoted[1..quoted.len() - 1];
        let mut escaped = false;
        for c in inner.chars() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else {
                assert_ne!(c, '\'', "unescaped quote in {quoted}");
            }
        }
        assert!(!escaped, "dangling backslash in {quoted}");
    }
}

#[test]
fn identifiers_and_conf_keys_are_checked() {
    assert!(is_safe_identifier("lakehouse"));
    assert!(!is_safe_identifier("lake house"));
    assert!(!is_safe_identifier("x;drop"));
    assert!(is_safe_conf_key(
        "spark.sql.catalog.lakehouse.s3.path-style-access"
    ));
    assert!(!is_safe_conf_key("a=b"));
    assert!(!is_safe_conf_key("a b"));
}
