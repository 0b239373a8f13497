//! The configuration's tests: parsing, defaults, validation and its messages.

use super::*;

const EXAMPLE: &str = r#"
        [service]
        state_dir = "data/state"

        [sqs]
        queue_url = "https://sqs.us-east-1.amazonaws.com/123456789012/s3-parquet-landing-queue"

        [[tables]]
        table = "analytics.customer_orders"
        bucket = "lakehouse-data"
        prefix = "warehouse/analytics/customer_orders/"

        [[tables]]
        table = "analytics.events"
        bucket = "lakehouse-data"
        prefix = "warehouse/analytics/events/"
        min_files = 3
        max_wait_minutes = 0
    "#;

fn error_of(text: &str) -> String {
    Config::from_toml_str(text).unwrap_err().to_string()
}

#[test]
fn defaults_are_the_reference_blueprint() {
    let config = Config::from_toml_str(EXAMPLE).unwrap();
    let specs = config.table_specs();
    let orders = &specs[0].thresholds;
    assert_eq!(orders.small_file_bytes, 64 * MIB);
    assert_eq!(orders.min_files, 10);
    assert_eq!(orders.min_total_bytes, 256 * MIB);
    assert_eq!(orders.max_wait_millis, Some(120 * 60_000));
    assert_eq!(specs[0].target_file_bytes, 512 * MIB);
    assert_eq!(specs[0].file_suffixes, vec![".parquet".to_string()]);
    assert_eq!(config.sqs.wait_time_seconds, 20);
    assert_eq!(config.sqs.max_messages, 10);
    assert_eq!(config.sqs.visibility_timeout_seconds, 300);
    assert_eq!(config.service.dedup_retention_days, 14);
}

#[test]
fn strategies_resolve_table_then_tenant_then_defaults_and_bad_ones_are_named() {
    let table = |extra: &str| {
        format!("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n{extra}")
    };
    let spec = |text: &str| Config::from_toml_str(text).unwrap().table_specs().remove(0);
    assert_eq!(
        spec(&table("")).strategy,
        crate::model::strategy::Strategy::Binpack
    );
    assert_eq!(
        spec(&format!("[defaults]\nstrategy = \"auto\"\n{}", table(""))).strategy,
        crate::model::strategy::Strategy::Auto
    );
    let sorted = spec(&format!(
            "[defaults]\nstrategy = \"auto\"\n{}",
            table("strategy = \"sort\"\nsort_order = \"ts desc, id\"\noptions = { \"shuffle-partitions-per-file\" = \"4\" }\n")
        ));
    assert_eq!(
        sorted.strategy.for_run(None),
        Some(crate::model::strategy::RunStrategy::Sort(Some(
            "ts DESC, id".to_string()
        )))
    );
    assert_eq!(sorted.rewrite_options["shuffle-partitions-per-file"], "4");
    let tenant = spec(
            "[tenants.t]\n[tenants.t.defaults]\nstrategy = \"zorder\"\n[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\ntenant = \"t\"\nsort_order = \"zorder(x, y)\"\n",
        );
    assert_eq!(
        tenant.strategy,
        crate::model::strategy::Strategy::Zorder(vec!["x".to_string(), "y".to_string()])
    );
    for (text, named) in [
        (
            format!("[defaults]\nstrategy = \"fastest\"\n{}", table("")),
            "defaults.strategy",
        ),
        (table("strategy = \"Sort\"\n"), "tables[0].strategy"),
        (
            table("strategy = \"zorder\"\n"),
            "tables[0]: strategy = \"zorder\" needs sort_order",
        ),
        (table("sort_order = \"id\"\n"), "sort_order needs strategy"),
        (
            table("strategy = \"sort\"\nsort_order = \"id'); DROP TABLE x; --\"\n"),
            "tables[0]: sort_order",
        ),
        (
            table("options = { \"min-input-files\" = \"2\" }\n"),
            "tables[0].options.min-input-files: set by icepack",
        ),
        (
            table("options = { \"Rewrite All\" = \"true\" }\n"),
            "tables[0].options: `Rewrite All`",
        ),
        (
            table("options = { \"rewrite-all\" = \"\" }\n"),
            "tables[0].options.rewrite-all",
        ),
        (
            table("orphan_older_than_hours = 12\n"),
            "tables[0].orphan_older_than_hours: at least 24 hours",
        ),
        (
            format!("[defaults]\norphan_older_than_hours = 1\n{}", table("")),
            "defaults.orphan_older_than_hours",
        ),
        (
            table("remove_orphans_every_hours = -1\n"),
            "tables[0].remove_orphans_every_hours",
        ),
        (table("max_manifests = -3\n"), "tables[0].max_manifests"),
        (
            table("delete_ratio_threshold = 1.5\n"),
            "tables[0].delete_ratio_threshold",
        ),
        (
            table("expire_snapshots_retain_last = 0\n"),
            "tables[0].expire_snapshots_retain_last",
        ),
    ] {
        let message = error_of(&text);
        assert!(message.contains(named), "{named}: {message}");
    }
}

#[test]
fn per_table_overrides_apply() {
    let specs = Config::from_toml_str(EXAMPLE).unwrap().table_specs();
    assert_eq!(specs[1].thresholds.min_files, 3);
    assert_eq!(specs[1].thresholds.max_wait_millis, None);
}

#[test]
fn unknown_key_is_named() {
    let message = error_of("[sqs]\nqueue_urll = \"x\"\n");
    assert!(message.contains("queue_urll"), "{message}");
    let message =
        error_of("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\ncolour = 1\n");
    assert!(message.contains("colour"), "{message}");
    let message = error_of("[nonsense]\nx = 1\n");
    assert!(message.contains("nonsense"), "{message}");
}

#[test]
fn missing_table_field_is_named() {
    let message = error_of("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\n");
    assert!(message.contains("prefix"), "{message}");
}

#[test]
fn same_bucket_and_prefix_twice_is_rejected() {
    let message = error_of(
            "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n[[tables]]\ntable = \"a.c\"\nbucket = \"bkt\"\nprefix = \"p/\"\n",
        );
    assert!(message.contains("tables[1].prefix"), "{message}");
    assert!(
        message.contains("a.b") && message.contains("a.c"),
        "{message}"
    );
}

#[test]
fn worker_threads_default_to_one_per_core_and_are_bounded() {
    assert_eq!(Config::from_toml_str("").unwrap().service.worker_threads, 0);
    let config = Config::from_toml_str(
        "[service]
worker_threads = 3
",
    )
    .unwrap();
    assert_eq!(config.service.worker_threads, 3);
    for wrong in ["-1", "1025"] {
        let message = error_of(&format!(
            "[service]
worker_threads = {wrong}
"
        ));
        assert!(message.contains("service.worker_threads"), "{message}");
    }
}

#[test]
fn zero_and_negative_thresholds_are_rejected() {
    assert!(error_of("[defaults]\nmin_files = 0\n").contains("defaults.min_files"));
    assert!(error_of("[defaults]\nsmall_file_mb = -5\n").contains("defaults.small_file_mb"));
    assert!(error_of("[defaults]\nmax_wait_minutes = -1\n").contains("defaults.max_wait_minutes"));
    let message = error_of(
        "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\nmin_total_mb = 0\n",
    );
    assert!(message.contains("tables[0].min_total_mb"), "{message}");
}

#[test]
fn malformed_table_identifiers_are_rejected() {
    for bad in [
        "orders", "a..b", "a.b;drop", "a.b'c", "1a.b", "a. b", "a.b-c", "",
    ] {
        let text = format!("[[tables]]\ntable = \"{bad}\"\nbucket = \"bkt\"\nprefix = \"p/\"\n");
        let message = error_of(&text);
        assert!(message.contains("tables[0].table"), "{bad}: {message}");
    }
    assert!(validate_table_identifier("db.schema.table_1").is_ok());
}

#[test]
fn sqs_limits_are_checked() {
    assert!(error_of("[sqs]\nmax_messages = 11\n").contains("sqs.max_messages"));
    assert!(error_of("[sqs]\nwait_time_seconds = 21\n").contains("sqs.wait_time_seconds"));
    assert!(error_of("[sqs]\nqueue_url = \"my-queue\"\n").contains("sqs.queue_url"));
}

#[test]
fn compaction_settings_have_the_reference_defaults() {
    let config = Config::from_toml_str(EXAMPLE).unwrap();
    let catalog = &config.catalogs["lakehouse"];
    assert_eq!(catalog.catalog_impl, "org.apache.iceberg.rest.RESTCatalog");
    assert_eq!(catalog.uri, "http://iceberg-rest:8181");
    assert_eq!(catalog.io_impl, "org.apache.iceberg.aws.s3.S3FileIO");
    assert_eq!(config.spark.runner, SparkRunnerKind::Docker);
    assert_eq!(config.spark.image, "apache/spark:3.5.1");
    assert_eq!(config.spark.packages.len(), 3);
    assert_eq!(
        (
            config.spark.retry_attempts.get(),
            config.spark.retry_interval_seconds.get()
        ),
        (2, 15)
    );
    let specs = config.table_specs();
    assert_eq!(specs[0].catalog, "lakehouse");
    assert_eq!(specs[0].min_input_files, 10);
    assert_eq!(
        specs[1].min_input_files, 3,
        "min_input_files follows the table's min_files"
    );
    assert_eq!(
        specs[0].partial_progress, None,
        "unset: per group after a lost race"
    );
}

#[test]
fn compaction_settings_are_validated() {
    let table = "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n";
    assert!(error_of(&format!("{table}catalog = \"other\"\n")).contains("tables[0].catalog"));
    assert!(error_of(&format!("{table}where = \"a = 1\\nb\"\n")).contains("tables[0].where"));
    assert!(error_of("[catalogs.lakehouse]\nimpl = \"x y\"\n").contains("catalogs.lakehouse.impl"));
    assert!(
        error_of("[catalogs.lakehouse]\nproperties = { \"a=b\" = \"c\" }\n")
            .contains("catalogs.lakehouse.properties")
    );
    assert!(error_of("[spark]\nrunner = \"ssh\"\n").contains("spark.runner"));
    assert!(error_of("[spark]\nmax_concurrent = 0\n").contains("spark.max_concurrent"));
    assert!(error_of("[spark]\npackages = [\"a:b\"]\n").contains("spark.packages"));
    assert!(error_of("[spark]\nconf = { \"x y\" = \"1\" }\n").contains("spark.conf"));
    assert!(error_of("[spark]\nenv = [\"lower\"]\n").contains("spark.env"));
    assert!(error_of("[spark]\nbinds = [\"relative:/x\"]\n").contains("spark.binds"));
    let ok = format!("[catalogs.other]\nimpl = \"org.apache.iceberg.jdbc.JdbcCatalog\"\nwarehouse = \"s3://b/w\"\n{table}catalog = \"other\"\nwhere = \"dt >= '2024-01-01'\"\n");
    let config = Config::from_toml_str(&ok).unwrap();
    assert!(
        !config.catalogs.contains_key("lakehouse"),
        "naming catalogs replaces the default one"
    );
    assert_eq!(
        config.table_specs()[0].where_filter.as_deref(),
        Some("dt >= '2024-01-01'")
    );
}

const TENANTS: &str = r##"
        [sqs]
        region = "eu-west-1"
        pollers = 3

        [tenants.analytics]
        weight = 3
        max_concurrent_runs = 1
        defaults = { min_files = 5, max_wait_minutes = 30 }
        slack = { webhook_url_env = "ANALYTICS_SLACK_URL", channel = "#analytics" }
        [[tenants.analytics.queues]]
        queue_url = "http://localhost:4566/000000000000/analytics-landing"
        pollers = 1

        [tenants.billing]
        [[tenants.billing.queues]]
        queue_url = "http://localhost:4566/000000000000/billing-landing"
        region = "us-east-2"

        [[tables]]
        table = "analytics.events"
        bucket = "analytics-lake"
        prefix = "events/"
        tenant = "analytics"
        min_files = 8

        [[tables]]
        table = "analytics.sessions"
        bucket = "analytics-lake"
        prefix = "sessions/"
        tenant = "analytics"

        [[tables]]
        table = "billing.invoices"
        bucket = "billing-lake"
        prefix = "invoices/"
        tenant = "billing"
    "##;

#[test]
fn without_tenants_there_is_one_implicit_tenant_on_the_shared_queue() {
    let config = Config::from_toml_str(EXAMPLE).unwrap();
    let tenants = config.tenant_specs();
    assert_eq!(tenants.len(), 1);
    assert_eq!(tenants[0].name, DEFAULT_TENANT);
    assert_eq!(tenants[0].max_concurrent_runs, 2, "the whole pool");
    assert!(config
        .table_specs()
        .iter()
        .all(|t| t.tenant == DEFAULT_TENANT));
    let queues = config.queues();
    assert_eq!(queues.len(), 1);
    assert_eq!(queues[0].tenant, None);
    assert_eq!(queues[0].sqs.queue_url, config.sqs.queue_url);
}

#[test]
fn tenants_bring_their_queues_limits_and_defaults() {
    let config = Config::from_toml_str(TENANTS).unwrap();
    let tenants = config.tenant_specs();
    let names: Vec<&str> = tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["analytics", "billing"]);
    assert_eq!((tenants[0].weight, tenants[0].max_concurrent_runs), (3, 1));
    assert_eq!((tenants[1].weight, tenants[1].max_concurrent_runs), (1, 2));
    assert_eq!(tenants[0].slack.as_ref().unwrap().channel, "#analytics");
    assert!(tenants[1].slack.is_none());

    let queues = config.queues();
    assert_eq!(
        queues.len(),
        2,
        "every tenant has its own: the shared queue is not polled"
    );
    assert_eq!(queues[0].tenant.as_deref(), Some("analytics"));
    assert_eq!(queues[0].sqs.pollers, 1);
    assert_eq!(queues[0].sqs.region, "eu-west-1", "from [sqs]");
    assert_eq!(queues[1].sqs.region, "us-east-2");
    assert_eq!(queues[1].sqs.pollers, 3, "from [sqs]");

    let specs = config.table_specs();
    assert_eq!(specs[0].tenant, "analytics");
    assert_eq!(
        specs[0].thresholds.min_files, 8,
        "the table's own value wins"
    );
    assert_eq!(
        specs[1].thresholds.min_files, 5,
        "then the tenant's default"
    );
    assert_eq!(specs[1].min_input_files, 5);
    assert_eq!(specs[1].thresholds.max_wait_millis, Some(30 * 60_000));
    assert_eq!(specs[2].thresholds.min_files, 10, "then [defaults]");
}

#[test]
fn a_tenant_without_queues_is_fed_by_the_shared_queue() {
    let text = TENANTS.replace(
            "[[tenants.billing.queues]]\n        queue_url = \"http://localhost:4566/000000000000/billing-landing\"\n        region = \"us-east-2\"",
            "",
        );
    let config = Config::from_toml_str(&text).unwrap();
    let queues = config.queues();
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[0].tenant, None);
}

#[test]
fn tenant_mistakes_are_named() {
    let untenanted = TENANTS.replace("tenant = \"billing\"\n", "");
    assert!(error_of(&untenanted).contains("tables[2].tenant: required"));
    let unknown = TENANTS.replace("tenant = \"billing\"", "tenant = \"biling\"");
    assert!(error_of(&unknown).contains("no [tenants.biling] section"));
    assert!(error_of(&format!("{TENANTS}\n[tenants.\"bad name\"]\n"))
        .contains("not a valid tenant name"));
    assert!(
        error_of(&TENANTS.replace("weight = 3", "weight = 0")).contains("tenants.analytics.weight")
    );
    assert!(
        error_of(&TENANTS.replace("max_concurrent_runs = 1", "max_concurrent_runs = 0"))
            .contains("tenants.analytics.max_concurrent_runs")
    );
    assert!(error_of(&TENANTS.replace("min_files = 5", "min_files = 0"))
        .contains("tenants.analytics.defaults.min_files"));
    assert!(
        error_of(&TENANTS.replace("\"ANALYTICS_SLACK_URL\"", "\"https://hooks.slack.com/x\""))
            .contains("tenants.analytics.slack.webhook_url_env")
    );
    let same_queue = TENANTS.replace("billing-landing", "analytics-landing");
    let message = error_of(&same_queue);
    assert!(
        message.contains("also configured for analytics"),
        "{message}"
    );
    let bad_queue = TENANTS.replace(
        "http://localhost:4566/000000000000/billing-landing",
        "billing",
    );
    assert!(error_of(&bad_queue).contains("tenants.billing.queues[0].queue_url"));
    let lonely = EXAMPLE.replace("min_files = 3", "min_files = 3\ntenant = \"x\"");
    assert!(error_of(&lonely).contains("tables[1].tenant: no [tenants.x]"));
}

#[test]
fn wrong_type_names_the_key() {
    let message = error_of("[defaults]\nmin_files = \"ten\"\n");
    assert!(message.contains("defaults.min_files"), "{message}");
}

#[test]
fn cost_pacing_is_opt_in_and_follows_the_measured_run_cost_unless_set() {
    use crate::table::policy::{PacingMode, RunCostSource};
    let table = "[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n";
    let pacing = |text: &str| Config::from_toml_str(text).unwrap().table_specs()[0].pacing;
    // The default keeps the user's thresholds: no cost rule, whatever the run cost.
    let default = pacing(table);
    assert_eq!(default.mode, PacingMode::Settle);
    let resolved = default.resolve(Some(1_000));
    assert!(!resolved.weighs_cost());
    assert_eq!(resolved.fragment_percent, 0);
    assert_eq!(resolved.settle_millis, 60_000);
    // `true`, as configurations from before the modes say, is the default too; `false` is off.
    assert_eq!(
        pacing(&format!("[defaults]\npacing = true\n{table}")).mode,
        PacingMode::Settle
    );
    assert_eq!(
        pacing(&format!("[defaults]\npacing = false\n{table}")).mode,
        PacingMode::Off
    );
    assert!(error_of(&format!("[defaults]\npacing = \"fast\"\n{table}")).contains("pacing"));
    // Cost pacing: before a run is measured, the runner's estimate (a cold JVM: 90 s, fragments
    // off; Spark Connect: 2 s, fragments on); then the measured cost; `run_cost_seconds` wins.
    let cost = pacing(&format!("[defaults]\npacing = \"cost\"\n{table}"));
    assert_eq!(cost.run_cost(None), (90_000, RunCostSource::Estimated));
    assert_eq!(cost.resolve(None).fragment_percent, 0, "a cold engine");
    assert!(cost.resolve(None).weighs_cost());
    assert_eq!(cost.run_cost(Some(1_500)), (1_500, RunCostSource::Measured));
    assert_eq!(
        cost.resolve(Some(1_500)).fragment_percent,
        100,
        "measured warm"
    );
    let connect = pacing(&format!(
        "[spark]\nrunner = \"connect\"\nconnect_url = \"sc://localhost:15002\"\n[defaults]\npacing = \"cost\"\n{table}"
    ));
    assert_eq!(connect.run_cost(None), (2_000, RunCostSource::Estimated));
    assert_eq!(connect.resolve(None).fragment_percent, 100);
    // The native engine is warm whatever `[spark]` says; `auto` too for its bin-pack rewrites.
    for engine in ["native", "auto"] {
        let native = pacing(&format!(
            "[defaults]\npacing = \"cost\"\nengine = \"{engine}\"\n{table}"
        ));
        assert_eq!(
            native.run_cost(None),
            (2_000, RunCostSource::Estimated),
            "{engine}"
        );
        assert_eq!(native.resolve(None).fragment_percent, 100, "{engine}");
    }
    let sorted = pacing(&format!(
        "[defaults]\npacing = \"cost\"\nengine = \"auto\"\n{table}strategy = \"sort\"\nsort_order = \"id\"\n"
    ));
    assert_eq!(
        sorted.run_cost(None),
        (90_000, RunCostSource::Estimated),
        "Spark's"
    );
    let set = pacing(&format!(
        "[defaults]\npacing = \"cost\"\nrun_cost_seconds = 30\n{table}"
    ));
    assert_eq!(
        set.run_cost(Some(1_500)),
        (30_000, RunCostSource::Configured)
    );
    assert_eq!(
        pacing(&format!(
            "[defaults]\npacing = \"cost\"\nrun_cost_seconds = 1\nfragment_fill_percent = 0\n{table}"
        ))
        .resolve(None)
        .fragment_percent,
        0
    );
    assert_eq!(
        pacing(&format!(
            "[defaults]\npacing = \"cost\"\n{table}fragment_fill_percent = 50\n"
        ))
        .resolve(None)
        .fragment_percent,
        50,
        "per table"
    );
    // A tenant or a table opts in on its own; cost pacing needs max-wait, its bound.
    assert_eq!(
        pacing(&format!("{table}pacing = \"cost\"\n")).mode,
        PacingMode::Cost
    );
    let unbounded = error_of(&format!("{table}pacing = \"cost\"\nmax_wait_minutes = 0\n"));
    assert!(unbounded.contains("tables[0].pacing"), "{unbounded}");
    assert!(error_of(&format!("{table}fragment_fill_percent = -1\n"))
        .contains("tables[0].fragment_fill_percent"));
}

#[test]
fn a_pacing_profile_gives_the_unset_keys_and_set_keys_win_at_every_level() {
    use crate::config::PacingProfile;
    let table = |extra: &str| {
        format!("[[tables]]\ntable = \"a.b\"\nbucket = \"bkt\"\nprefix = \"p/\"\n{extra}")
    };
    let pacing = |text: &str| Config::from_toml_str(text).unwrap().table_specs()[0].pacing;
    // Without a profile, the balanced one: the built-in values.
    let balanced = pacing(&table(""));
    assert_eq!(pacing(&table("pacing_profile = \"balanced\"\n")), balanced);
    assert_eq!(balanced.settle_millis, 60_000);
    assert_eq!(balanced.settle_max_millis, 300_000);
    assert_eq!(balanced.quiet_millis, 15 * 60_000);
    assert_eq!(balanced.file_fix_value_millis, 8_000);
    assert_eq!(balanced.file_hour_cost_millis, 40_000);
    assert_eq!(balanced.remerge_percent, 0);
    assert_eq!(balanced.fragment_percent, None);
    // Each profile's values reach the table, whatever level names the profile.
    for profile in PacingProfile::ALL {
        let values = profile.values();
        let name = profile.as_str();
        for text in [
            table(&format!("pacing = \"cost\"\npacing_profile = \"{name}\"\n")),
            format!(
                "[defaults]\npacing = \"cost\"\npacing_profile = \"{name}\"\n{}",
                table("")
            ),
            format!(
                "[tenants.t]\n[tenants.t.defaults]\npacing = \"cost\"\npacing_profile = \"{name}\"\n{}tenant = \"t\"\n",
                table("")
            ),
        ] {
            let spec = pacing(&text);
            assert_eq!(spec.settle_millis, values.settle_seconds.millis(1000), "{text}");
            assert_eq!(
                spec.settle_max_millis,
                values.settle_max_seconds.millis(1000)
            );
            assert_eq!(spec.quiet_millis, values.quiet_partition_minutes.millis(60_000));
            assert_eq!(
                spec.file_fix_value_millis,
                values.file_fix_value_seconds.get() * 1000
            );
            assert_eq!(
                spec.file_hour_cost_millis,
                values.file_hour_cost_seconds.get() * 1000
            );
            assert_eq!(spec.remerge_percent, values.remerge_new_data_percent.get());
            assert_eq!(
                spec.fragment_percent,
                values.fragment_fill_percent.map(|percent| percent.get())
            );
            assert_eq!(spec.run_cost_millis, None, "the run cost is measured");
        }
    }
    // The profiles differ the way their names say.
    let (fresh, thrifty) = (
        PacingProfile::Fresh.values(),
        PacingProfile::Thrifty.values(),
    );
    assert!(fresh.settle_seconds < thrifty.settle_seconds);
    assert!(fresh.file_fix_value_seconds > thrifty.file_fix_value_seconds);
    assert!(fresh.file_hour_cost_seconds > thrifty.file_hour_cost_seconds);
    // A key set at any level wins over the profile named at any level.
    let thrifty_with_settle = pacing(&format!(
        "[defaults]\nsettle_seconds = 5\n{}",
        table("pacing_profile = \"thrifty\"\n")
    ));
    assert_eq!(thrifty_with_settle.settle_millis, 5_000);
    assert_eq!(
        thrifty_with_settle.settle_max_millis,
        thrifty.settle_max_seconds.millis(1000)
    );
    let fresh_with_fragments = pacing(&format!(
        "[defaults]\npacing_profile = \"fresh\"\n{}",
        table("fragment_fill_percent = 40\n")
    ));
    assert_eq!(fresh_with_fragments.fragment_percent, Some(40));
    assert_eq!(
        fresh_with_fragments.settle_millis,
        fresh.settle_seconds.millis(1000)
    );
    // A table's profile wins over its tenant's and [defaults]'.
    let own = pacing(&format!(
        "[defaults]\npacing_profile = \"thrifty\"\n{}",
        table("pacing_profile = \"fresh\"\n")
    ));
    assert_eq!(own.settle_millis, fresh.settle_seconds.millis(1000));
    // An unknown profile is an error naming the key and the profiles.
    let message = error_of(&table("pacing_profile = \"quick\"\n"));
    assert!(message.contains("pacing_profile"), "{message}");
    assert!(message.contains("thrifty"), "{message}");
}

/// Issue 31 item 5: an error about a secret setting names the key, never the value it found; a
/// URI's password is hidden in any error that quotes it.
#[test]
fn errors_never_repeat_a_secret_value() {
    let error = error_of("[catalogs.c]\nproperties = { \"jdbc.password\" = 73105589 }\n");
    assert!(
        error.contains("catalogs.c.properties.jdbc.password"),
        "{error}"
    );
    assert!(!error.contains("73105589"), "{error}");
    let error =
        error_of("[catalogs.c]\nproperties = { \"adls.auth.shared-key.account.key\" = 4107 }\n");
    assert!(!error.contains("4107"), "{error}");
    let error = error_of("[spark]\ntimeout_minutes = \"http://u:MINUTESPW@h\"\n");
    assert!(error.contains("spark.timeout_minutes"), "{error}");
    assert!(!error.contains("MINUTESPW"), "{error}");
}

#[test]
fn metrics_list_configured_tables_or_all_and_bound_the_worst() {
    let config = Config::from_toml_str(EXAMPLE).unwrap();
    assert!(
        config.metrics.tables.is_empty(),
        "per-table series are opt-in"
    );
    assert_eq!(config.metrics.worst_tables, 0);
    let listed = Config::from_toml_str(&format!(
        "[metrics]\ntables = [\"analytics.events\"]\nworst_tables = 10\n{EXAMPLE}"
    ))
    .unwrap();
    assert!(!listed.metrics.all_tables());
    assert!(
        Config::from_toml_str(&format!("[metrics]\ntables = [\"*\"]\n{EXAMPLE}"))
            .unwrap()
            .metrics
            .all_tables()
    );
    let unknown = error_of(&format!(
        "[metrics]\ntables = [\"analytics.event\"]\n{EXAMPLE}"
    ));
    assert!(
        unknown.contains("metrics.tables[0]") && unknown.contains("analytics.event"),
        "{unknown}"
    );
    let too_many = error_of(&format!("[metrics]\nworst_tables = 100000\n{EXAMPLE}"));
    assert!(too_many.contains("worst_tables"), "{too_many}");
}

/// Issue 35: the annotated example shows every key the configuration takes (set, or commented
/// out with its default), so that it cannot drift from the code again. Every key of a parse of
/// the example, absent ones included (serialized as null), must appear in it as `key =`.
#[test]
fn the_example_configuration_shows_every_key() {
    let read = |example: &str| {
        std::fs::read_to_string(format!("{}/{example}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let missing = unshown_keys(&read("config/icepack.toml"));
    assert!(
        missing.is_empty(),
        "config/icepack.toml does not show {missing:?}"
    );
    // The tenants' example shows what only tenants have (their defaults are [defaults]' keys).
    let missing: Vec<String> = unshown_keys(&read("config/tenants.toml"))
        .into_iter()
        .filter(|key| key.starts_with("tenants.") && !key.starts_with("tenants.*.defaults."))
        .collect();
    assert!(
        missing.is_empty(),
        "config/tenants.toml does not show {missing:?}"
    );
}

/// The keys of a parse of `text`, absent ones included (serialized as null), that `text` does
/// not show, set or in a comment, as `key =` or a section (`[key`, `.key]`).
fn unshown_keys(text: &str) -> Vec<String> {
    let config = Config::from_toml_str(text).unwrap();
    let value = serde_json::to_value(&config).unwrap();
    /// Maps whose keys are names the user chooses, not configuration keys.
    const FREE_MAPS: [&str; 5] = ["properties", "options", "conf", "catalogs", "tenants"];
    fn walk(path: &str, value: &serde_json::Value, keys: &mut Vec<String>) {
        let serde_json::Value::Object(map) = value else {
            return;
        };
        for (key, value) in map {
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match value {
                serde_json::Value::Object(_) if FREE_MAPS.contains(&key.as_str()) => {
                    keys.push(here.clone());
                    for inner in value.as_object().unwrap().values() {
                        if key == "catalogs" || key == "tenants" {
                            walk(&format!("{here}.*"), inner, keys);
                        }
                    }
                }
                serde_json::Value::Object(_) => walk(&here, value, keys),
                serde_json::Value::Array(items) if items.first().is_some_and(|i| i.is_object()) => {
                    keys.push(here.clone());
                    walk(&format!("{here}[]"), &items[0], keys);
                }
                _ => keys.push(here),
            }
        }
    }
    let mut keys = Vec::new();
    walk("", &value, &mut keys);
    assert!(keys.len() > 80, "{} keys: {keys:?}", keys.len());
    keys.into_iter()
        .filter(|key| {
            let leaf = key.rsplit('.').next().unwrap().trim_end_matches("[]");
            ![format!("{leaf} ="), format!("[{leaf}"), format!(".{leaf}]")]
                .iter()
                .any(|shown| text.contains(shown.as_str()))
        })
        .collect()
}

#[test]
fn compute_statistics_is_off_by_default_and_resolves_table_then_tenant_then_defaults() {
    let specs = Config::from_toml_str(TENANTS).unwrap().table_specs();
    assert!(specs.iter().all(|spec| !spec.compute_statistics), "off");
    let text = TENANTS
        .replace(
            "defaults = { min_files = 5, max_wait_minutes = 30 }",
            "defaults = { min_files = 5, max_wait_minutes = 30, compute_statistics = true }",
        )
        .replace(
            "tenant = \"analytics\"\n        min_files = 8",
            "tenant = \"analytics\"\n        min_files = 8\n        compute_statistics = false",
        );
    let specs = Config::from_toml_str(&text).unwrap().table_specs();
    let on: Vec<bool> = specs.iter().map(|spec| spec.compute_statistics).collect();
    assert_eq!(
        on,
        [false, true, false],
        "the table's, the tenant's, [defaults]'"
    );
    let text = format!("[defaults]\ncompute_statistics = true\n{TENANTS}");
    let specs = Config::from_toml_str(&text).unwrap().table_specs();
    assert!(specs[2].compute_statistics, "[defaults]' own");
}

#[test]
fn a_parse_error_quoting_wide_characters_is_an_error_not_a_panic() {
    // Found by the configuration fuzz target: the error's text is redacted, and the redaction
    // sliced it inside `Ќ`.
    let error = Config::from_toml_str("[defaults]\nsmall_file_mЌ= 64\n").unwrap_err();
    assert!(error.to_string().contains("small_file_m"), "{error}");
}

/// Issue 35 item 3: `[defaults]`, a tenant's `defaults` and a table take the same keys (one
/// struct), and each key falls back table → tenant → `[defaults]` → built-in, including keys a
/// tenant could not set before (`delete_ratio_threshold`); a misspelt key is refused at each
/// level with its name.
#[test]
fn every_setting_falls_back_from_table_to_tenant_to_defaults_to_built_in() {
    let text = TENANTS
        .replace(
            "defaults = { min_files = 5, max_wait_minutes = 30 }",
            "defaults = { min_files = 5, max_wait_minutes = 30, delete_ratio_threshold = 0.25, strategy = \"sort\", engine = \"native\" }",
        )
        .replace(
            "[tenants.analytics]",
            "[defaults]\nmin_files = 7\nsmall_file_mb = 32\ndelete_ratio_threshold = 0.5\nsettle_seconds = 9\n\n[tenants.analytics]",
        );
    let config = Config::from_toml_str(&text).unwrap();
    let specs = config.table_specs();
    let spec = |name: &str| specs.iter().find(|spec| spec.table == name).unwrap();
    let events = spec("analytics.events");
    let sessions = spec("analytics.sessions");
    let invoices = spec("billing.invoices");
    // min_files: the table's (8), the tenant's (5), `[defaults]`' (7).
    assert_eq!(
        [events, sessions, invoices].map(|spec| spec.thresholds.min_files),
        [8, 5, 7]
    );
    // small_file_mb: `[defaults]`' for all; target_file_mb: the built-in 512 MiB.
    assert!([events, sessions, invoices]
        .iter()
        .all(|spec| spec.thresholds.small_file_bytes == 32 * MIB
            && spec.target_file_bytes == 512 * MIB));
    assert_eq!(
        [events, invoices].map(|spec| spec.deletes.ratio_ppm),
        [Some(250_000), Some(500_000)]
    );
    assert_eq!(
        [events, invoices].map(|spec| spec.strategy.clone()),
        [
            crate::model::strategy::Strategy::Sort(None),
            crate::model::strategy::Strategy::Binpack
        ]
    );
    assert_eq!(
        [events, invoices].map(|spec| spec.engine),
        [EngineChoice::Native, EngineChoice::Spark]
    );
    assert_eq!(
        [events, invoices].map(|spec| spec.pacing.settle_millis),
        [9_000, 9_000]
    );
    for (from, to, named) in [
        ("min_files = 7", "min_file = 7", "min_file"),
        ("min_files = 5,", "min_file = 5,", "min_file"),
        ("min_files = 8", "min_file = 8", "min_file"),
    ] {
        let error = error_of(&text.replacen(from, to, 1));
        assert!(error.contains(named), "{from} → {to}: {error}");
    }
    let error = error_of(&text.replace(
        "delete_ratio_threshold = 0.25",
        "delete_ratio_threshold = 2.0",
    ));
    assert!(
        error.contains("tenants.analytics.defaults.delete_ratio_threshold"),
        "{error}"
    );
}
