use super::*;

fn table(name: &str) -> TableLabels {
    TableLabels {
        table: Some(name.to_string()),
        tenant: "default".to_string(),
    }
}

#[test]
fn exposition_has_types_labels_and_histogram_buckets() {
    let metrics = Metrics::default();
    metrics.set_series(TableSeries::every_table());
    let landing = metrics
        .queues
        .register("http://sqs/1/landing", "landing", None, 2, 0);
    landing.received(3, 1_714_564_800_250);
    landing.failed(
        &crate::intake::queue::QueueError {
            operation: "DeleteMessageBatch",
            message: "throttled".to_string(),
            detail: String::new(),
        },
        1_714_564_801_000,
    );
    metrics
        .queues
        .register("http://sqs/1/removed", "removed", None, 2, 0);
    metrics.queues.retain(|url| !url.ends_with("removed"));
    metrics
        .records_ignored
        .get_or_create(&ReasonLabels {
            reason: "large_file",
        })
        .inc();
    metrics
        .runs_failed
        .get_or_create(&FailedRunLabels {
            at: metrics.table_labels("a.b", "default"),
            kind: REWRITE_KIND,
            class: "timeout",
        })
        .inc();
    metrics
        .run_duration
        .get_or_create(&OutcomeLabels { outcome: "success" })
        .observe(12.0);
    metrics.state_commits.inc_by(2);
    let text = metrics.render(&[TableGauges {
        table: "a.\"b".to_string(),
        tenant: "default".to_string(),
        pending_files: 7,
        pending_bytes: 70,
        due: true,
        run_in_flight: false,
        consecutive_failures: 0,
    }]);
    let has = |line: &str| assert!(text.contains(line), "no `{line}` in:\n{text}");
    has("# TYPE icepack_sqs_messages_received counter\nicepack_sqs_messages_received_total{queue=\"landing\"} 3\n");
    has("icepack_sqs_messages_deleted_total{queue=\"landing\"} 0\n");
    has("icepack_sqs_errors_total{operation=\"DeleteMessageBatch\",queue=\"landing\"} 1\n");
    has("icepack_sqs_last_receive_timestamp_seconds{queue=\"landing\"} 1714564800.25\n");
    assert!(!text.contains("removed"), "a removed queue has no series");
    has("icepack_records_ignored_total{reason=\"large_file\"} 1\n");
    has("icepack_runs_failed_total{table=\"a.b\",tenant=\"default\",kind=\"rewrite_data_files\",class=\"timeout\"} 1\n");
    has("icepack_state_commits_total 2\n");
    // The intake steps' series exist before any group.
    has("# UNIT icepack_intake_step_duration_seconds seconds\n");
    has("icepack_intake_step_duration_seconds_count{step=\"lookup\"} 0\n");
    has("icepack_intake_step_duration_seconds_count{step=\"commit\"} 0\n");
    has("# UNIT icepack_run_duration_seconds seconds\n");
    has("icepack_run_duration_seconds_bucket{le=\"5.0\",outcome=\"success\"} 0\n");
    has("icepack_run_duration_seconds_bucket{le=\"15.0\",outcome=\"success\"} 1\n");
    has("icepack_run_duration_seconds_bucket{le=\"+Inf\",outcome=\"success\"} 1\n");
    has("icepack_run_duration_seconds_count{outcome=\"success\"} 1\n");
    has("icepack_table_pending_files{table=\"a.\\\"b\",tenant=\"default\"} 7\n");
    has("icepack_tables_due 1\n");
    has("icepack_up 1\n");
    has("icepack_state_writable 1\n");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert_eq!(text.matches("# EOF").count(), 1);
    if std::path::Path::new("/proc/self/stat").exists() {
        has("# TYPE process_cpu_seconds counter\n");
        has("# TYPE process_resident_memory_bytes gauge\n");
    }
    // Every family is described once.
    let mut described: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    let families = described.len();
    described.sort_unstable();
    described.dedup();
    assert_eq!(described.len(), families, "a family described twice");
}

#[test]
fn a_removed_table_loses_its_counted_series_and_others_keep_theirs() {
    let metrics = Metrics::default();
    metrics.set_series(TableSeries::every_table());
    for name in ["n.gone", "n.kept"] {
        metrics
            .records_counted
            .get_or_create(&table(name))
            .inc_by(3);
        for kind in [REWRITE_KIND, "rewrite_manifests"] {
            let run = RunLabels {
                at: table(name),
                kind,
            };
            metrics.runs_started.get_or_create(&run).inc();
            metrics.runs_succeeded.get_or_create(&run).inc();
        }
        metrics
            .runs_failed
            .get_or_create(&FailedRunLabels {
                at: table(name),
                kind: "remove_orphan_files",
                class: "commit_conflict",
            })
            .inc();
    }
    metrics.forget_table("n.gone", "default");
    let text = metrics.render(&[]);
    assert!(!text.contains("n.gone"), "{text}");
    assert_eq!(count(&metrics.records_counted, &table("n.kept")), 3);
    assert_eq!(text.matches("table=\"n.kept\"").count(), 6, "{text}");
    // The same table under another tenant is another series: forgetting it leaves this one.
    metrics.forget_table("n.kept", "other");
    assert_eq!(count(&metrics.records_counted, &table("n.kept")), 3);
}

fn config(metrics: &str) -> crate::config::Config {
    let tables: String = ["a.one", "a.two", "b.one"]
        .iter()
        .enumerate()
        .map(|(index, name)| {
            format!("[[tables]]\ntable = \"{name}\"\nbucket = \"lake\"\nprefix = \"t{index}/\"\n")
        })
        .collect();
    crate::config::Config::from_toml_str(&format!(
        "[sqs]\nqueue_url = \"http://localhost:9324/000000000000/q\"\n{metrics}\n{tables}"
    ))
    .unwrap()
}

fn gauges(table: &str, tenant: &str, pending_files: u64, failures: u32) -> TableGauges {
    TableGauges {
        table: table.to_string(),
        tenant: tenant.to_string(),
        pending_files,
        pending_bytes: pending_files * 1_000,
        due: pending_files >= 10,
        run_in_flight: false,
        consecutive_failures: failures,
    }
}

#[test]
fn by_default_a_table_counts_into_its_tenant_and_listed_tables_have_their_own_series() {
    let metrics = Metrics::default();
    metrics.set_series(TableSeries::from_config(&config("")));
    for name in ["a.one", "a.two"] {
        metrics
            .records_counted
            .get_or_create(&metrics.table_labels(name, "default"))
            .inc_by(2);
        metrics
            .runs_started
            .get_or_create(&RunLabels {
                at: metrics.table_labels(name, "default"),
                kind: REWRITE_KIND,
            })
            .inc();
    }
    let text = metrics.render(&[
        gauges("a.one", "default", 12, 0),
        gauges("a.two", "default", 3, 2),
    ]);
    let has = |text: &str, line: &str| assert!(text.contains(line), "no `{line}` in:\n{text}");
    has(
        &text,
        "icepack_records_counted_total{tenant=\"default\"} 4\n",
    );
    has(
        &text,
        "icepack_runs_started_total{tenant=\"default\",kind=\"rewrite_data_files\"} 2\n",
    );
    has(
        &text,
        "icepack_tenant_pending_files{tenant=\"default\"} 15\n",
    );
    has(
        &text,
        "icepack_tenant_pending_bytes{tenant=\"default\"} 15000\n",
    );
    has(&text, "icepack_tenant_tables{tenant=\"default\"} 2\n");
    has(&text, "icepack_tenant_tables_due{tenant=\"default\"} 1\n");
    has(
        &text,
        "icepack_tenant_tables_failing{tenant=\"default\"} 1\n",
    );
    has(&text, "icepack_tables_due 1\n");
    assert!(!text.contains("table=\""), "no table's own series:\n{text}");
    // Still described, so a dashboard's families exist on a fresh process.
    has(&text, "# TYPE icepack_table_pending_files gauge\n");

    // A listed table has its own series from now on; the tenant's keep the rest.
    metrics.set_series(TableSeries::from_config(&config(
        "[metrics]\ntables = [\"a.one\"]\n",
    )));
    for name in ["a.one", "a.two"] {
        metrics
            .records_counted
            .get_or_create(&metrics.table_labels(name, "default"))
            .inc();
    }
    let text = metrics.render(&[
        gauges("a.one", "default", 12, 0),
        gauges("a.two", "default", 3, 2),
    ]);
    has(
        &text,
        "icepack_records_counted_total{table=\"a.one\",tenant=\"default\"} 1\n",
    );
    has(
        &text,
        "icepack_records_counted_total{tenant=\"default\"} 5\n",
    );
    has(
        &text,
        "icepack_table_pending_files{table=\"a.one\",tenant=\"default\"} 12\n",
    );
    assert!(!text.contains("table=\"a.two\""), "{text}");
    has(
        &text,
        "icepack_tenant_pending_files{tenant=\"default\"} 15\n",
    );
    // "*": every table.
    let all = TableSeries::from_config(&config("[metrics]\ntables = [\"*\"]\n"));
    assert!(all.own("a.two") && all.own("b.one"));
    // A tenant a reload removed: its aggregates go, a listed table's own series stay.
    metrics.forget_tenant("default");
    let text = metrics.render(&[]);
    assert!(!text.contains("tenant=\"default\"} 5"), "{text}");
    has(
        &text,
        "icepack_records_counted_total{table=\"a.one\",tenant=\"default\"} 1\n",
    );
}

#[test]
fn the_worst_tables_are_those_failing_then_with_most_pending_files() {
    let series = TableSeries::from_config(&config(
        "[metrics]\ntables = [\"a.one\"]\nworst_tables = 2\n",
    ));
    let tables = [
        gauges("a.one", "default", 0, 0),
        gauges("a.two", "default", 50, 0),
        gauges("b.one", "default", 5, 1),
        gauges("c.idle", "default", 0, 0),
        gauges("c.many", "default", 40, 0),
    ];
    let picked: Vec<&str> = series
        .pick(&tables)
        .iter()
        .map(|table| table.table.as_str())
        .collect();
    assert_eq!(picked, ["a.one", "b.one", "a.two"]);
    // Idle tables are never the worst.
    let idle = [gauges("c.idle", "default", 0, 0)];
    assert_eq!(series.pick(&idle).len(), 0);
    assert!(TableSeries::default().pick(&tables).is_empty());
}

/// Issue 34: `/metrics` at 100,000 tables in 1,000 tenants stays under 1 MiB by default
/// (every tenant with runs started, succeeded and failed, records counted, maintenance
/// failed); with `worst_tables = 20`, 100 more series. The figure is printed.
#[test]
fn the_exposition_is_bounded_by_the_tenants_not_the_tables() {
    let metrics = Metrics::default();
    let tables: Vec<TableGauges> = (0..100_000)
        .map(|index| {
            gauges(
                &format!("ns_{}.table_{index:06}", index % 1_000),
                &format!("tenant_{:04}", index % 1_000),
                (index % 37) as u64,
                u32::from(index % 1_001 == 0),
            )
        })
        .collect();
    for table in &tables {
        let at = metrics.table_labels(&table.table, &table.tenant);
        metrics.records_counted.get_or_create(&at).inc();
        let run = RunLabels {
            at: at.clone(),
            kind: REWRITE_KIND,
        };
        metrics.runs_started.get_or_create(&run).inc();
        metrics.runs_succeeded.get_or_create(&run).inc();
        metrics
            .runs_failed
            .get_or_create(&FailedRunLabels {
                at: at.clone(),
                kind: REWRITE_KIND,
                class: "commit_conflict",
            })
            .inc();
        metrics
            .maintenance_failures
            .get_or_create(&MaintenanceFailureLabels {
                at,
                class: "timeout",
            })
            .inc();
    }
    let text = metrics.render(&tables);
    let series = text.lines().filter(|line| !line.starts_with('#')).count();
    println!(
        "/metrics at 100,000 tables, 1,000 tenants: {} bytes, {series} series",
        text.len()
    );
    assert!(text.len() < 1 << 20, "{} bytes", text.len());
    assert!(series < 12_000, "{series} series");
    metrics.set_series(TableSeries {
        worst: 20,
        ..TableSeries::default()
    });
    let worst = metrics.render(&tables);
    let with_worst = worst.lines().filter(|line| !line.starts_with('#')).count();
    assert_eq!(with_worst, series + 20 * 5, "five gauges each");
}
