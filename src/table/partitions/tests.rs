use super::*;
use proptest::prelude::*;

const DESCRIBE: &str = "col_name\tdata_type\tcomment\nid                  \tbigint              \t                    \nts                  \ttimestamp           \t                    \nregion              \tstring              \t                    \nd                   \tdate                \t                    \n                    \t                    \t                    \n# Partitioning      \t                    \t                    \nPart 0              \tdays(ts)            \t                    \nPart 1              \tregion              \t                    \nPart 2              \tmonths(d)           \t                    \nPart 3              \tbucket(4, id)       \t                    \n";

fn field(name: &str, source: &str, transform: Transform) -> PartitionField {
    PartitionField {
        name: name.to_string(),
        source: source.to_string(),
        transform,
        source_type: Some(
            match name {
                "region" | "p" => "string",
                "ts_hour" | "ts_day" => "timestamp",
                _ => "date",
            }
            .to_string(),
        ),
    }
}

fn typed(name: &str, source_type: &str) -> PartitionField {
    PartitionField {
        source_type: Some(source_type.to_string()),
        ..field(name, name, Transform::Identity)
    }
}

#[test]
fn the_spec_is_read_from_describe_with_its_columns_types() {
    let spec = parse_describe(DESCRIBE).unwrap();
    assert_eq!(spec[0], field("ts_day", "ts", Transform::Day));
    assert_eq!(spec[1], field("region", "region", Transform::Identity));
    assert_eq!(spec[2], field("d_month", "d", Transform::Month));
    assert_eq!(spec[3].name, "id_bucket");
    assert_eq!(spec[3].source_type.as_deref(), Some("bigint"));
    assert!(matches!(spec[3].transform, Transform::Other(_)));
    assert_eq!(
        parse_describe("col_name\tdata_type\tcomment\nid\tbigint\t\n"),
        Some(Vec::new())
    );
    assert_eq!(parse_describe("nothing"), None);
    // A source that is no top-level column has no type.
    let nested = parse_describe(
            "col_name\tdata_type\tcomment\ne\tstruct<ts:timestamp>\t\n\t\t\n# Partitioning\t\t\nPart 0\tdays(e.ts)\t\n",
        )
        .unwrap();
    assert_eq!(nested[0].source_type, None);
    // Spark prints a spec of identity fields only in another section (Spark 3.5 and
    // Iceberg 1.10, as spark-sql printed it): the same fields.
    let identity_only = parse_describe(
            "col_name\tdata_type\tcomment\nid                  \tbigint              \t                    \ncustomer            \tstring              \t                    \n# Partition Information\t                    \t                    \n# col_name          \tdata_type           \tcomment             \ncustomer            \tstring              \t                    \n",
        )
        .unwrap();
    assert_eq!(
        identity_only,
        [PartitionField {
            source_type: Some("string".to_string()),
            ..field("customer", "customer", Transform::Identity)
        }]
    );
    // A spec kept by an earlier release (no types) still reads.
    let old: PartitionField =
        serde_json::from_str(r#"{"name":"d","source":"d","transform":"identity"}"#).unwrap();
    assert_eq!(old.source_type, None);
}

#[test]
fn identity_and_time_partitions_become_exact_predicates() {
    let spec = vec![
        field("ts_day", "ts", Transform::Day),
        field("region", "region", Transform::Identity),
    ];
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-31/region=eu+west").unwrap(),
        "`ts` >= '2024-05-31' AND `ts` < '2024-06-01' AND `region` IN ('eu+west', 'eu west')",
        "`+` is a space in Iceberg's paths, itself in Hive-style ones: both are selected"
    );
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-31/region=eu%20west").unwrap(),
        "`ts` >= '2024-05-31' AND `ts` < '2024-06-01' AND `region` = 'eu west'"
    );
    let hours = vec![field("ts_hour", "ts", Transform::Hour)];
    assert_eq!(
        partition_predicate(&hours, "ts_hour=2024-05-31-23").unwrap(),
        "`ts` >= '2024-05-31 23:00:00' AND `ts` < '2024-06-01 00:00:00'"
    );
    let months = vec![field("d_month", "d", Transform::Month)];
    assert_eq!(
        partition_predicate(&months, "d_month=2024-12").unwrap(),
        "`d` >= '2024-12-01' AND `d` < '2025-01-01'"
    );
    let years = vec![field("d_year", "d", Transform::Year)];
    assert_eq!(
        partition_predicate(&years, "d_year=2024").unwrap(),
        "`d` >= '2024-01-01' AND `d` < '2025-01-01'"
    );
    let identity = vec![field("order_date", "order_date", Transform::Identity)];
    assert_eq!(
        partition_predicate(&identity, "order_date=null").unwrap(),
        "`order_date` IS NULL"
    );
    assert_eq!(
        partition_predicate(&months, "d_month=null").unwrap(),
        "`d` IS NULL"
    );
    // Iceberg writes a null and the string `null` alike.
    assert_eq!(
        partition_predicate(&[typed("p", "string")], "p=null").unwrap(),
        "(`p` IS NULL OR `p` = 'null')"
    );
    assert_eq!(
        partition_filters(
            &identity,
            &[
                "order_date=2024-05-01".to_string(),
                "order_date=2024-05-02".to_string()
            ],
            MAX
        )
        .unwrap(),
        ["(`order_date` = '2024-05-01') OR (`order_date` = '2024-05-02')"]
    );
}

const MAX: usize = 64 * 1024;

/// Issue 31: a day past chrono's last one panicked (`+262142-12-31` plus a day), in the
/// executor pool, at every start. Years past 9999 cannot be cast by every engine: the field
/// is left out, and a last bound past 9999 leaves the range open.
#[test]
fn dates_past_year_9999_widen_instead_of_panicking() {
    let days = vec![field("ts_day", "ts", Transform::Day)];
    let hours = vec![field("ts_hour", "ts", Transform::Hour)];
    for (spec, path) in [
        (&days, "ts_day=%2B262142-12-31"),
        (&days, "ts_day=+262142-12-31"),
        (&days, "ts_day=%2B10000-01-01"),
        (&days, "ts_day=-0001-01-01"),
        (&days, "ts_day=%2B99999999999999999999-01-01"),
        (&hours, "ts_hour=%2B262142-12-31-23"),
        (&hours, "ts_hour=262143-01-01-00"),
    ] {
        assert_eq!(partition_predicate(spec, path), None, "{path}");
    }
    let years = vec![field("d_year", "d", Transform::Year)];
    let months = vec![field("d_month", "d", Transform::Month)];
    for (spec, path) in [
        (&years, "d_year=10000"),
        (&years, "d_year=0"),
        (&years, "d_year=99999999999999999999999"),
        (&months, "d_month=%2B10000-01"),
        (&months, "d_month=0000-12"),
    ] {
        assert_eq!(partition_predicate(spec, path), None, "{path}");
    }
    assert_eq!(
        partition_predicate(&days, "ts_day=9999-12-31").unwrap(),
        "`ts` >= '9999-12-31'"
    );
    assert_eq!(
        partition_predicate(&hours, "ts_hour=9999-12-31-23").unwrap(),
        "`ts` >= '9999-12-31 23:00:00'"
    );
    assert_eq!(
        partition_predicate(&months, "d_month=9999-12").unwrap(),
        "`d` >= '9999-12-01'"
    );
    assert_eq!(
        partition_predicate(&years, "d_year=9999").unwrap(),
        "`d` >= '9999-01-01'"
    );
    // The other fields still pin the partition.
    let spec = vec![
        field("ts_day", "ts", Transform::Day),
        field("region", "region", Transform::Identity),
    ];
    assert_eq!(
        partition_predicate(&spec, "ts_day=%2B262142-12-31/region=eu").unwrap(),
        "`region` = 'eu'"
    );
}

#[test]
fn what_cannot_be_expressed_widens_the_predicate() {
    let spec = vec![field(
        "id_bucket",
        "id",
        Transform::Other("bucket(4, id)".to_string()),
    )];
    assert_eq!(partition_predicate(&spec, "id_bucket=3"), None);
    let void = vec![field(
        "id_null",
        "id",
        Transform::Other("void(id)".to_string()),
    )];
    assert_eq!(
        partition_predicate(&void, "id_null=null"),
        None,
        "void is null whatever id holds"
    );
    let spec = vec![
        field("ts_day", "ts", Transform::Day),
        field("region", "region", Transform::Identity),
    ];
    let day_only = "`ts` >= '2024-05-01' AND `ts` < '2024-05-02'";
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-01").as_deref(),
        Some(day_only),
        "a field left unpinned"
    );
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-01/renamed=x").as_deref(),
        Some(day_only),
        "a segment of no field is ignored"
    );
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-01/region=eu/region=us").as_deref(),
        Some(day_only),
        "a field given twice is pinned to neither value"
    );
    assert_eq!(
        partition_predicate(&spec, "ts_day=2024-05-01/region=%FF%FE").as_deref(),
        Some(day_only),
        "a value that is not UTF-8"
    );
    assert_eq!(
        partition_predicate(&spec, "ts_day=yesterday/region=eu").as_deref(),
        Some("`region` = 'eu'"),
        "malformed time value"
    );
    assert_eq!(partition_predicate(&spec, "renamed=2024-05-01"), None);
    assert_eq!(partition_predicate(&spec, ""), None);
    assert_eq!(partition_filters(&spec, &[], MAX), None);
    assert_eq!(partition_predicate(&[], "x=1"), None, "no spec known yet");
    // No type known (a spec kept by an earlier release, a nested column), or one no literal
    // is checked for: the field is left out.
    let untyped = PartitionField {
        source_type: None,
        ..field("region", "region", Transform::Identity)
    };
    assert_eq!(partition_predicate(&[untyped], "region=eu"), None);
    for float in ["float", "double", "binary", "struct<a:int>"] {
        assert_eq!(
            partition_predicate(&[typed("p", float)], "p=1.5"),
            None,
            "{float}"
        );
    }
    // One partition only the whole table selects: the whole table.
    assert_eq!(
        partition_filters(
            &spec,
            &["region=eu".to_string(), "renamed=1".to_string()],
            MAX
        ),
        None
    );
}

#[test]
fn identity_literals_are_checked_against_the_column_type() {
    let predicate = |source_type: &str, raw: &str| {
        partition_predicate(&[typed("p", source_type)], &format!("p={raw}"))
    };
    assert_eq!(predicate("int", "42").unwrap(), "`p` = 42");
    assert_eq!(
        predicate("int", "-2147483648").unwrap(),
        "`p` = -2147483648"
    );
    assert_eq!(predicate("tinyint", "300"), None, "out of the type's range");
    assert_eq!(predicate("bigint", "99999999999999999999999999"), None);
    assert_eq!(predicate("int", "abc"), None, "no integer: never cast");
    assert_eq!(predicate("int", "null").unwrap(), "`p` IS NULL");
    assert_eq!(
        predicate("bigint", "__HIVE_DEFAULT_PARTITION__").unwrap(),
        "`p` IS NULL"
    );
    assert_eq!(
        predicate("string", "__HIVE_DEFAULT_PARTITION__").unwrap(),
        "(`p` IS NULL OR `p` = '__HIVE_DEFAULT_PARTITION__')"
    );
    assert_eq!(predicate("boolean", "true").unwrap(), "`p` = true");
    assert_eq!(predicate("boolean", "yes"), None);
    assert_eq!(
        predicate("decimal(10,2)", "-12.34").unwrap(),
        "`p` = '-12.34'"
    );
    assert_eq!(predicate("decimal(4,2)", "123.4"), None, "too many digits");
    assert_eq!(
        predicate("decimal(10,2)", "1.234"),
        None,
        "too many decimals"
    );
    assert_eq!(predicate("decimal(10,2)", "1e3"), None);
    assert_eq!(
        predicate("date", "2024-02-29").unwrap(),
        "`p` = '2024-02-29'"
    );
    assert_eq!(predicate("date", "2023-02-29"), None);
    assert_eq!(predicate("date", "%2B10000-01-01"), None);
    assert_eq!(
        predicate("timestamp", "2024-05-01T12:00").unwrap(),
        "`p` = '2024-05-01 12:00:00.000000'"
    );
    assert_eq!(
        predicate("timestamp", "2024-05-01T12:00:01.5%2B02:00").unwrap(),
        "`p` = '2024-05-01 10:00:01.500000'",
        "an offset is turned into UTC, the session's time zone"
    );
    assert_eq!(
        predicate("timestamp", "2024-05-01T12:00Z").unwrap(),
        "`p` = '2024-05-01 12:00:00.000000'"
    );
    assert_eq!(predicate("timestamp_ntz", "%2B10000-01-01T00:00"), None);
    assert_eq!(predicate("timestamp", "noon"), None);
    assert_eq!(predicate("varchar(10)", "x").unwrap(), "`p` = 'x'");
}

#[test]
fn hostile_values_and_names_stay_quoted() {
    let spec = vec![PartitionField {
        source: "reg`ion".to_string(),
        ..field("region", "region", Transform::Identity)
    }];
    let predicate = partition_predicate(&spec, "region=eu%27%29%20OR%201%3D1%20--").unwrap();
    assert_eq!(predicate, r"`reg``ion` = 'eu\') OR 1=1 --'");
    let predicate = partition_predicate(&[typed("r", "string")], "r=%5C%27%3B%0ADROP").unwrap();
    assert_eq!(predicate, r"`r` = '\\\';\nDROP'");
}

#[test]
fn many_partitions_are_split_into_filters_within_the_limit() {
    let spec = vec![field("d", "d", Transform::Identity)];
    let day = |index: u32| {
        let date = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap()
            + chrono::Duration::days(index.into());
        format!("d={date}")
    };
    let paths: Vec<String> = (0..5_000).map(day).collect();
    let limit = 16 * 1024;
    let filters = partition_filters(&spec, &paths, limit).unwrap();
    assert!(filters.len() > 1, "{} filters", filters.len());
    for filter in &filters {
        assert!(filter.len() <= limit, "{}", filter.len());
    }
    // Every partition's predicate is in exactly one filter, once.
    let joined = filters.join("\n");
    for path in &paths {
        let predicate = partition_predicate(&spec, path).unwrap();
        assert_eq!(
            joined.matches(&format!("({predicate})")).count(),
            1,
            "{path}"
        );
    }
    // The same predicate once; one partition alone needs no parentheses.
    let twice = vec![day(0), day(0)];
    assert_eq!(
        partition_filters(&spec, &twice, limit).unwrap(),
        ["`d` = '2000-01-01'"]
    );
    // A predicate longer than the limit: only the whole table selects it.
    assert_eq!(partition_filters(&spec, &[day(0)], 10), None);
}

/// How Java's `LocalDate::toString` (Iceberg's day and hour values) writes a year.
fn java_year(year: i32) -> String {
    match year {
        10_000.. => format!("+{year}"),
        0.. => format!("{year:04}"),
        _ => format!("-{:04}", -year),
    }
}

/// The instant a reading's range holds (a date or a date and time literal).
fn literal_time(literal: &str) -> chrono::NaiveDateTime {
    chrono::NaiveDateTime::parse_from_str(literal, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(literal, "%Y-%m-%d")
                .map(|date| date.and_hms_opt(0, 0, 0).unwrap())
        })
        .unwrap()
}

proptest! {
    #[test]
    fn any_identity_value_is_one_literal(value in "\\PC{0,40}") {
        let spec = vec![typed("p", "string")];
        let encoded = percent_encoding::utf8_percent_encode(&value, percent_encoding::NON_ALPHANUMERIC).to_string();
        let predicate = partition_predicate(&spec, &format!("p={encoded}")).unwrap();
        if value == "null" {
            prop_assert_eq!(predicate, "(`p` IS NULL OR `p` = 'null')");
        } else {
            prop_assert_eq!(predicate, format!("`p` = {}", quote_string(&value)));
        }
    }

    /// Never narrower: whatever day, month, year or hour Iceberg writes — any date chrono
    /// knows, years past 9999 with their sign — its range holds it, or the field is left out.
    #[test]
    fn a_time_value_is_inside_its_range_or_left_out(
        days in -100_000_000i64..100_000_000,
        hour in 0u32..24,
        which in 0usize..4,
    ) {
        let Some(date) = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
            .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::days(days)))
        else {
            return Ok(());
        };
        use chrono::Datelike;
        let year = java_year(date.year());
        let (transform, value, start) = match which {
            0 => (Transform::Day, format!("{year}-{:02}-{:02}", date.month(), date.day()), date.and_hms_opt(0, 0, 0).unwrap()),
            1 => (Transform::Hour, format!("{year}-{:02}-{:02}-{hour:02}", date.month(), date.day()), date.and_hms_opt(hour, 0, 0).unwrap()),
            2 => (Transform::Month, format!("{year}-{:02}", date.month()), date.with_day(1).unwrap().and_hms_opt(0, 0, 0).unwrap()),
            _ => (Transform::Year, year.clone(), date.with_ordinal(1).unwrap().and_hms_opt(0, 0, 0).unwrap()),
        };
        let encoded = value.replace('+', "%2B");
        let reading = time_range(&transform, &path_values(&encoded).unwrap().into_iter().last().map(|value| match value { PathValue::Text(text) => text, PathValue::Null => String::new() }).unwrap());
        match reading {
            Reading::Condition(Condition::Range { low, high }) => {
                prop_assert!(YEARS.contains(&i64::from(date.year())));
                prop_assert!(literal_time(&low) <= start, "{value}: {low}");
                if let Some(high) = high {
                    prop_assert!(start < literal_time(&high), "{value}: {high}");
                }
            }
            Reading::Inexpressible => prop_assert!(!YEARS.contains(&i64::from(date.year())), "{value}"),
            other => prop_assert!(false, "{value}: {other:?}"),
        }
        let spec = vec![PartitionField { source_type: Some("timestamp".to_string()), ..field("f", "ts", transform) }];
        let _ = partition_predicate(&spec, &format!("f={encoded}"));
    }

    /// Any path, against any spec: a predicate or the whole table, never a panic.
    #[test]
    fn any_path_is_read_totally(
        path in "([a-c]=[-+%0-9A-Fa-fnul:T.Z ]{0,24}/?){0,4}",
        transforms in prop::collection::vec((0usize..6, 0usize..12), 1..4),
    ) {
        const TYPES: [&str; 12] = ["string", "int", "tinyint", "bigint", "boolean", "decimal(5,2)", "date", "timestamp", "timestamp_ntz", "double", "decimal(x)", ""];
        let spec: Vec<PartitionField> = transforms
            .iter()
            .enumerate()
            .map(|(index, (transform, source_type))| PartitionField {
                name: ["a", "b", "c"][index % 3].to_string(),
                source: format!("s{index}"),
                transform: [Transform::Identity, Transform::Year, Transform::Month, Transform::Day, Transform::Hour, Transform::Other("bucket(2, x)".to_string())][*transform].clone(),
                source_type: Some(TYPES[*source_type].to_string()).filter(|text| !text.is_empty()),
            })
            .collect();
        if let Some(predicate) = partition_predicate(&spec, &path) {
            prop_assert!(!predicate.is_empty());
            prop_assert!(!predicate.contains('\n'));
        }
        let _ = partition_filters(&spec, &[path.clone(), path], 256);
    }
}
