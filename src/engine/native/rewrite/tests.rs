use super::*;

fn properties(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

#[test]
fn small_inputs_are_read_many_at_a_time_and_large_ones_at_the_floor() {
    let mib = 1024 * 1024;
    assert_eq!(read_concurrency([1_000u64; 24].into_iter(), 2), 16);
    assert_eq!(read_concurrency([8 * mib].into_iter(), 2), 8);
    assert_eq!(
        read_concurrency([mib, 64 * mib].into_iter(), 2),
        2,
        "the largest decides"
    );
    assert_eq!(read_concurrency([512 * mib].into_iter(), 2), 2);
    assert_eq!(read_concurrency(std::iter::empty(), 2), 16);
    assert_eq!(read_concurrency([0u64].into_iter(), 0), 16);
    assert_eq!(
        read_concurrency([512 * mib].into_iter(), 0),
        1,
        "never below one"
    );
    assert_eq!(
        read_concurrency([1_000u64].into_iter(), 32),
        32,
        "the floor wins"
    );
}

#[test]
fn write_properties_follow_the_table() {
    let column = parquet::schema::types::ColumnPath::from("id");
    let defaults = writer_properties(&HashMap::new()).unwrap();
    assert_eq!(
        defaults.compression(&column),
        Compression::ZSTD(ZstdLevel::try_new(3).unwrap())
    );
    assert_eq!(defaults.max_row_group_bytes(), Some(128 * 1024 * 1024));
    assert_eq!(defaults.dictionary_page_size_limit(), 2 * 1024 * 1024);
    let snappy = writer_properties(&properties(&[
        ("write.parquet.compression-codec", "SNAPPY"),
        ("write.parquet.row-group-size-bytes", "8388608"),
        ("write.parquet.page-size-bytes", "65536"),
        ("write.parquet.bloom-filter-enabled.column.id", "true"),
    ]))
    .unwrap();
    assert_eq!(snappy.compression(&column), Compression::SNAPPY);
    assert_eq!(snappy.max_row_group_bytes(), Some(8 * 1024 * 1024));
    assert_eq!(snappy.data_page_size_limit(), 65_536);
    assert!(snappy.bloom_filter_properties(&column).is_some());
    let gzip = writer_properties(&properties(&[
        ("write.parquet.compression-codec", "gzip"),
        ("write.parquet.compression-level", "9"),
    ]))
    .unwrap();
    assert_eq!(
        gzip.compression(&column),
        Compression::GZIP(GzipLevel::try_new(9).unwrap())
    );
}

#[test]
fn hostile_write_properties_are_refused_not_panicked_on() {
    for (key, value) in [
        ("write.parquet.row-group-size-bytes", "0"),
        ("write.parquet.page-row-limit", "-1"),
        ("write.parquet.dict-size-bytes", "lots"),
        ("write.parquet.compression-codec", "lzo"),
        ("write.parquet.compression-level", "99"),
        ("write.parquet.bloom-filter-fpp.column.id", "2"),
    ] {
        let mut table = properties(&[(key, value)]);
        if key == "write.parquet.compression-level" {
            table.insert(
                "write.parquet.compression-codec".to_string(),
                "gzip".to_string(),
            );
        }
        assert!(
            matches!(writer_properties(&table), Err(NativeError::InvalidInput(_))),
            "{key} = {value}"
        );
    }
}

#[test]
fn a_file_is_filled_up_to_the_target_then_rolls() {
    let fill = |bytes, rows| Some(FileFill { bytes, rows });
    assert_eq!(
        fit(None, None, 1000, 5000),
        Fit {
            rows: PROBE_ROWS,
            then_roll: false
        },
        "a first file probes how large rows are"
    );
    assert_eq!(
        fit(fill(100, 10), None, 1000, 50),
        Fit {
            rows: 50,
            then_roll: false
        },
        "50 rows of 10 bytes fit in 900"
    );
    assert_eq!(
        fit(fill(800, 80), None, 1000, 50),
        Fit {
            rows: 20,
            then_roll: true
        },
        "20 rows fill it"
    );
    assert_eq!(
        fit(fill(995, 99), None, 1000, 50),
        Fit {
            rows: 0,
            then_roll: true
        },
        "full: roll before writing"
    );
    assert_eq!(
        fit(fill(1200, 100), None, 1000, 50),
        Fit {
            rows: 0,
            then_roll: true
        },
        "past the target (a batch larger than it): roll"
    );
    assert_eq!(
        fit(None, fill(990, 99), 1000, 250),
        Fit {
            rows: 100,
            then_roll: true
        },
        "a new file sized by the last one"
    );
    assert_eq!(
        fit(None, fill(5000, 1), 1000, 250),
        Fit {
            rows: 1,
            then_roll: true
        },
        "a row larger than the target still goes somewhere"
    );
    assert_eq!(
        fit(fill(0, 10), None, 1000, 50).rows,
        50,
        "nothing measured yet"
    );
}

#[test]
fn outputs_go_under_the_data_location() {
    assert_eq!(
        data_location(&HashMap::new(), "s3://lake/t/"),
        "s3://lake/t/data"
    );
    assert_eq!(
        data_location(
            &properties(&[("write.data.path", "s3://other/data/")]),
            "s3://lake/t"
        ),
        "s3://other/data"
    );
}

/// parquet-mr's `VersionParser` (the pattern of `VersionParser.FORMAT`, matched whole) and
/// `CorruptStatistics.shouldIgnoreStatistics`: statistics of string and binary columns are
/// used when `created_by` parses and its application is not an old parquet-mr.
#[test]
fn created_by_is_what_parquet_mr_parses() {
    let format =
        regex::Regex::new(r"^(.*?)\s+version\s*(?:([^(]*?)\s*(?:\(\s*build\s?([^)]*?)\s*\))?)?$")
            .unwrap();
    let parsed = |created_by: &str| {
        format.captures(created_by).map(|captures| {
            (
                captures.get(1).map_or("", |m| m.as_str()).to_string(),
                captures.get(2).map_or("", |m| m.as_str()).to_string(),
            )
        })
    };
    assert_eq!(
        parsed(CREATED_BY),
        Some(("icepack".to_string(), env!("CARGO_PKG_VERSION").to_string()))
    );
    assert_eq!(
        parsed("parquet-mr version 1.13.1 (build db4183109d5b734ec5930d870cdae161e408ddba)")
            .unwrap()
            .0,
        "parquet-mr"
    );
    assert_eq!(
        parsed("icepack 0.1.0 (iceberg-rust)"),
        None,
        "the form readers ignored"
    );
    let properties = writer_properties(&HashMap::new()).unwrap();
    assert_eq!(properties.created_by(), CREATED_BY);
}
