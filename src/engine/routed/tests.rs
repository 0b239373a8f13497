use super::*;
use crate::engine::spark::SparkEngine;
use crate::runs::task::{Rewrite, Trigger};
use crate::table::accumulator::ClaimTicket;
use crate::testing::stand_in_runner::StandInRunner;

const CONFIG: &str = r#"
[catalogs.lakehouse]
impl = "org.apache.iceberg.rest.RESTCatalog"
uri = "http://127.0.0.1:1"
warehouse = "s3://lake/warehouse"

[catalogs.hive]
impl = "org.apache.iceberg.hive.HiveCatalog"
uri = "thrift://metastore:9083"
warehouse = "s3://lake/warehouse"

[[tables]]
table = "a.orders"
bucket = "lake"
prefix = "orders/"
engine = "auto"

[[tables]]
table = "a.events"
bucket = "lake"
prefix = "events/"
catalog = "hive"
engine = "auto"

[[tables]]
table = "a.native"
bucket = "lake"
prefix = "native/"
engine = "native"
"#;

fn config() -> Arc<Config> {
    Arc::new(Config::from_toml_str(CONFIG).unwrap())
}

fn task(table: &str, ticket: ClaimTicket) -> RunTask {
    let spec = config()
        .table_specs()
        .into_iter()
        .find(|spec| spec.table == table)
        .unwrap();
    RunTask {
        spec: Arc::new(spec),
        ticket,
        timeout: std::time::Duration::from_secs(60),
        claimed: Default::default(),
    }
}

fn rewrite() -> ClaimTicket {
    ClaimTicket {
        run_id: "r1".to_string(),
        trigger: Trigger::Files,
        started_millis: 1_714_564_800_000,
        files: 4,
        bytes: 40,
        spec: None,
        task: Task::Rewrite(Rewrite {
            partitions: vec!["d=2024-05-01".to_string(), "d=2024-05-02".to_string()],
            min_input_files: 2,
            mid_sized: MidSizedFiles::In(vec!["d=2024-05-01".to_string()]),
            strategy: RunStrategy::Binpack,
            apply_deletes: false,
        }),
        nonce: String::new(),
        upto_seq: 4,
        last_failure: None,
    }
}

/// `rewrite()` with its rewrite changed by `change`.
fn rewriting(change: impl FnOnce(&mut Rewrite)) -> ClaimTicket {
    let mut ticket = rewrite();
    if let Task::Rewrite(rewrite) = &mut ticket.task {
        change(rewrite);
    }
    ticket
}

fn engines(spark: bool) -> RoutedEngine {
    let config = config();
    let spark = spark.then(|| {
        SparkEngine::new(
            Arc::new(StandInRunner::succeeding(3)),
            CompactionSettings::from_config(config.clone()),
        )
    });
    let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
    RoutedEngine::new(spark, Some(native), config)
}

#[test]
fn a_bin_pack_of_a_rest_table_is_the_native_engines_with_the_runs_own_terms() {
    let routed = engines(true);
    let native = routed.native_task(&task("a.orders", rewrite())).unwrap();
    assert_eq!(native.table, "a.orders");
    assert_eq!(native.catalog_name, "lakehouse");
    assert_eq!(native.partitions, rewrite().partitions());
    assert_eq!(
        native.joining,
        MidSizedFiles::In(vec!["d=2024-05-01".to_string()])
    );
    assert_eq!(native.min_input_files, 2);
    assert_eq!(native.small_file_bytes, 64 * 1024 * 1024);
    assert_eq!(native.run_id, "r1");
    // A reconcile reads the table: the native engine's too.
    let reconcile = ClaimTicket {
        trigger: Trigger::Reconcile,
        task: Task::Reconcile,
        ..rewrite()
    };
    assert!(routed.native_task(&task("a.orders", reconcile)).is_ok());
}

#[test]
fn what_the_native_engine_cannot_do_is_refused_with_the_reason() {
    let routed = engines(true);
    let refused =
        |table: &str, ticket: ClaimTicket| routed.native_task(&task(table, ticket)).unwrap_err();
    let zordered = rewriting(|rewrite| {
        rewrite.strategy = RunStrategy::Zorder(vec!["id".to_string(), "ts".to_string()])
    });
    assert!(refused("a.orders", zordered).contains("zorder is Spark's"));
    let positions = ClaimTicket {
        task: Task::Maintenance(crate::table::state::Maintenance::RewritePositionDeletes),
        ..rewrite()
    };
    assert!(refused("a.orders", positions).contains("rewrite_position_delete_files"));
    let statistics = ClaimTicket {
        task: Task::Maintenance(crate::table::state::Maintenance::ComputeStatistics),
        ..rewrite()
    };
    assert!(refused("a.orders", statistics).contains("compute_statistics is a Spark procedure"));
    let order = ClaimTicket {
        trigger: Trigger::ReadOrder,
        task: Task::ReadOrder,
        ..rewrite()
    };
    assert!(refused("a.orders", order).contains("sort order"));
    assert!(refused("a.events", rewrite()).contains("Hive"));
}

#[test]
fn remove_orphan_files_and_rewrite_manifests_are_the_native_engines() {
    let routed = engines(true);
    let orphans = |dry_run| ClaimTicket {
        trigger: Trigger::RemoveOrphans,
        task: Task::Maintenance(crate::table::state::Maintenance::RemoveOrphans { dry_run }),
        ..rewrite()
    };
    let job = routed.native_job(&task("a.orders", orphans(true))).unwrap();
    let NativeJob::Maintenance(maintenance, read) = job else {
        panic!("a maintenance job");
    };
    assert_eq!(maintenance.table, "a.orders");
    assert_eq!(maintenance.run_id, "r1");
    assert_eq!(read.run_id, "r1", "the table read after it");
    // The table's `orphan_older_than_hours` (72 by default) before the run started.
    assert_eq!(
        maintenance.procedure,
        NativeMaintenance::RemoveOrphans(OrphanRequest {
            older_than_millis: rewrite().started_millis - 72 * 3_600_000,
            dry_run: true,
        })
    );
    let job = routed
        .native_job(&task("a.orders", orphans(false)))
        .unwrap();
    assert!(matches!(
        job,
        NativeJob::Maintenance(ref maintenance, _)
            if matches!(
                maintenance.procedure,
                NativeMaintenance::RemoveOrphans(OrphanRequest { dry_run: false, .. })
            )
    ));
    // A catalog the native engine cannot reach: Spark's.
    assert!(routed
        .native_job(&task("a.events", orphans(false)))
        .is_err_and(|why| why.contains("Hive")));
    // So is rewrite_manifests; statistics are still Spark's.
    let manifests = ClaimTicket {
        task: Task::Maintenance(crate::table::state::Maintenance::RewriteManifests),
        ..rewrite()
    };
    assert!(matches!(
        routed.native_job(&task("a.orders", manifests)),
        Ok(NativeJob::Maintenance(ref maintenance, _))
            if maintenance.procedure == NativeMaintenance::RewriteManifests
    ));
    let statistics = ClaimTicket {
        task: Task::Maintenance(crate::table::state::Maintenance::ComputeStatistics),
        ..rewrite()
    };
    assert!(routed.native_job(&task("a.orders", statistics)).is_err());
}

#[test]
fn a_sorted_run_is_the_native_engines_in_the_tables_or_the_configured_order() {
    let routed = engines(true);
    let given =
        rewriting(|rewrite| rewrite.strategy = RunStrategy::Sort(Some("id DESC".to_string())));
    let native = routed.native_task(&task("a.orders", given)).unwrap();
    assert_eq!(native.order, RowOrder::Given("id DESC".to_string()));
    let table = rewriting(|rewrite| rewrite.strategy = RunStrategy::Sort(None));
    let native = routed.native_task(&task("a.orders", table)).unwrap();
    assert_eq!(native.order, RowOrder::Table);
    let binpack = routed.native_task(&task("a.orders", rewrite())).unwrap();
    assert_eq!(binpack.order, RowOrder::AsRead);
}

#[test]
fn a_run_due_by_its_deletes_is_the_native_engines() {
    let routed = engines(true);
    let deletes = rewriting(|rewrite| rewrite.apply_deletes = true);
    let native = routed
        .native_task(&task("a.orders", deletes))
        .expect("a data rewrite applying deletes is native");
    assert!(native.apply_deletes);
}

#[tokio::test]
async fn auto_sends_what_the_native_engine_cannot_do_to_spark_and_says_why() {
    let routed = engines(true);
    let zordered = rewriting(|rewrite| {
        rewrite.strategy = RunStrategy::Zorder(vec!["id".to_string(), "ts".to_string()])
    });
    let ended = routed.run(&task("a.orders", zordered)).await;
    assert!(
        matches!(ended.outcome, RunOutcome::Success { .. }),
        "{ended:?}"
    );
    assert_eq!(ended.ran_on.engine, "spark");
    assert!(
        ended
            .ran_on
            .detail
            .contains("auto: the native engine bin-packs and sorts"),
        "{:?}",
        ended.ran_on
    );
    let ended = routed.run(&task("a.events", rewrite())).await;
    assert_eq!(ended.ran_on.engine, "spark");
    assert!(ended.ran_on.detail.contains("Hive"), "{:?}", ended.ran_on);
}

#[tokio::test]
async fn a_native_table_never_goes_to_spark() {
    let routed = engines(true);
    let zordered = rewriting(|rewrite| {
        rewrite.strategy = RunStrategy::Zorder(vec!["id".to_string(), "ts".to_string()])
    });
    let ended = routed.run(&task("a.native", zordered)).await;
    assert_eq!(ended.ran_on.engine, "native");
    match ended.outcome {
        RunOutcome::Failure { class, excerpt, .. } => {
            assert_eq!(class, FailureClass::InvalidInput);
            assert!(excerpt.contains("bin-packs"), "{excerpt}");
        }
        other => panic!("{other:?}"),
    }
}

/// `CONFIG` with one more table, `a.extra` of `engine`, with `keys`.
fn config_with(engine: &str, keys: &str) -> Arc<Config> {
    let text = format!("{CONFIG}\n[[tables]]\ntable = \"a.extra\"\nbucket = \"lake\"\nprefix = \"extra/\"\nengine = \"{engine}\"\n{keys}\n");
    Arc::new(Config::from_toml_str(&text).unwrap())
}

fn extra_task(config: &Arc<Config>, ticket: ClaimTicket) -> RunTask {
    let spec = config
        .table_specs()
        .into_iter()
        .find(|spec| spec.table == "a.extra")
        .unwrap();
    RunTask {
        spec: Arc::new(spec),
        ticket,
        timeout: std::time::Duration::from_secs(60),
        claimed: Default::default(),
    }
}

#[test]
fn a_rewrite_followed_by_expire_snapshots_is_the_native_engines_with_the_tables_terms() {
    let config = config_with(
        "native",
        "expire_snapshots_older_than_hours = 24\nexpire_snapshots_retain_last = 3",
    );
    let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
    let routed = RoutedEngine::new(None, Some(native), config.clone());
    let task = routed.native_task(&extra_task(&config, rewrite())).unwrap();
    assert_eq!(
        task.expire,
        Some(ExpireRequest {
            older_than_millis: rewrite().started_millis - 24 * 3_600_000,
            retain_last: Some(3),
        }),
        "as Spark's job: the table's hours before the run started"
    );
    // A read expires nothing.
    let reconcile = ClaimTicket {
        trigger: Trigger::Reconcile,
        task: Task::Reconcile,
        ..rewrite()
    };
    let read = routed.native_task(&extra_task(&config, reconcile)).unwrap();
    assert_eq!(read.expire, None);
    // Without the key: no expiry.
    let config = config_with("native", "min_files = 20");
    let native = NativeEngine::new(super::super::native::NativeLimits::default()).unwrap();
    let routed = RoutedEngine::new(None, Some(native), config.clone());
    let task = routed.native_task(&extra_task(&config, rewrite())).unwrap();
    assert_eq!(task.expire, None);
}

#[test]
fn a_native_table_asking_for_what_only_spark_does_is_refused_at_start_with_the_key() {
    for (keys, named) in [
        (
            "strategy = \"zorder\"\nsort_order = \"zorder(id, ts)\"",
            "strategy = \"zorder\"",
        ),
        ("strategy = \"auto\"", "strategy = \"auto\""),
        ("compute_statistics = true", "compute_statistics"),
        ("where = \"id > 0\"", "`where`"),
        (
            "options = { \"max-file-group-size-bytes\" = \"1\" }",
            "`options`",
        ),
    ] {
        let refusal = engine_from_config(&config_with("native", keys))
            .err()
            .unwrap_or_else(|| panic!("{keys}: accepted"));
        assert!(
            refusal.contains("a.extra") && refusal.contains(named),
            "{keys}: {refusal}"
        );
        // The same table with `auto` sends those runs to Spark.
        assert!(
            engine_from_config(&config_with("auto", keys)).is_ok(),
            "{keys}"
        );
    }
    assert!(engine_from_config(&config_with("native", "min_files = 20")).is_ok());
    assert!(
        engine_from_config(&config_with("native", "remove_orphans_every_hours = 24")).is_ok(),
        "remove_orphan_files is the native engine's"
    );
    assert!(
        engine_from_config(&config_with("native", "delete_file_threshold = 10")).is_ok(),
        "a native table's deletes are applied by a data rewrite"
    );
    assert!(
        engine_from_config(&config_with(
            "native",
            "strategy = \"sort\"\nsort_order = \"id DESC\""
        ))
        .is_ok(),
        "a sort is the native engine's"
    );
}

#[test]
fn a_native_table_in_a_catalog_it_cannot_commit_to_is_refused_at_start() {
    let text = format!("{CONFIG}\n[[tables]]\ntable = \"a.glued\"\nbucket = \"lake\"\nprefix = \"glued/\"\ncatalog = \"hive\"\nengine = \"native\"\n");
    let config = Arc::new(Config::from_toml_str(&text).unwrap());
    let refusal = engine_from_config(&config).err().unwrap();
    assert!(
        refusal.contains("a.glued") && refusal.contains("Hive"),
        "{refusal}"
    );
    // Only native tables: no Spark engine to probe, nothing else needed.
    let native_only = Arc::new(
            Config::from_toml_str(
                "[[tables]]\ntable = \"a.b\"\nbucket = \"lake\"\nprefix = \"b/\"\nengine = \"native\"\n[catalogs.lakehouse]\nuri = \"http://127.0.0.1:1\"\n",
            )
            .unwrap(),
        );
    assert_eq!(
        engine_from_config(&native_only).unwrap().describe(),
        "native"
    );
}
