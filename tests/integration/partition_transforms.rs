//! Every partition transform, compacted natively on tables Spark wrote (issue 46): tables
//! partitioned by `hours(ts)`, `months(ts)` and `years(ts)` from the start (hours and months
//! before 1970 too, whose ordinals are negative), and one partitioned by `bucket`, `truncate` and
//! the identity of a timestamp (a value with `:` and `+` in its path). And evolved specs (issue
//! 48): `days(ts)` to `hours(ts)` (files of the first spec holding rows of several hours),
//! `identity(region)` to `bucket(4, region)`, and `region` dropped (unpartitioned): files of older
//! specs are moved into the current spec, as Java's `rewrite_data_files` moves them. A run names
//! its partitions as icepack does, from the data files' keys (`intake::routing::partition_of`);
//! the native engine must find them in the metadata, rewrite every small file, and Spark and
//! PyIceberg must read the same rows afterwards, find every row in the partition its own transforms
//! (`system.hours`, `system.bucket`, ...) give, and accept the table in its own
//! `rewrite_data_files` and `expire_snapshots`; position deletes Spark wrote on the hourly table
//! are applied and leave with the files they name. A run asked for a partition the table does not
//! have rewrites nothing and says why. And the files the native engine writes carry a
//! `created_by` parquet-mr parses: a string predicate prunes their row groups.

use crate::support;

use std::collections::BTreeSet;

use icepack::engine::native::{NativeEngine, NativeLimits, NativeTask};
use support::pyiceberg::{crc_statement, pyiceberg_checksum};
use support::spark::{fixture_output, native_task, printed, row_with, stack_available, Lakehouse};
use support::{unique, Moto};

const TOKEN: &str = "transforms-catalog-token-8812";

/// A table of the test: its DDL's partitioning, and per commit the rows' timestamp and region.
struct Table {
    name: &'static str,
    partitioned_by: &'static str,
    /// Each commit writes three rows at this timestamp, in this region.
    commits: Vec<(&'static str, &'static str)>,
    /// Statements between the first `split` commits and the rest (a spec change).
    evolve: Option<(usize, &'static str)>,
    /// The partitions Spark's keys name, as icepack would count them.
    partitions: usize,
    /// A merge-on-read `DELETE` after the commits: position delete files the run applies and
    /// then removes (they name only files it rewrote).
    delete: Option<&'static str>,
    /// Commits before this one write their rows an hour apart (a file of the first spec then
    /// holds rows of several partitions of an hourly one).
    spread_until: usize,
    /// The current spec's partition of a row, in Iceberg's Spark functions (the oracle).
    current_partition: &'static str,
    /// True where a row's `_partition` is what Java's transforms give it.
    placed: &'static str,
}

impl Table {
    fn current_spec(&self) -> u32 {
        u32::from(self.evolve.is_some())
    }
}

fn tables() -> Vec<Table> {
    let four = |times: [&'static str; 2]| -> Vec<(&'static str, &'static str)> {
        times
            .iter()
            .flat_map(|time| std::iter::repeat_n((*time, "eu"), 4))
            .collect()
    };
    vec![
        Table {
            name: "by_hour",
            partitioned_by: "hours(ts)",
            commits: four(["2026-11-01 10:05:00", "1969-12-31 23:30:00"]),
            evolve: None,
            partitions: 2,
            delete: Some("DELETE FROM lakehouse.analytics.by_hour WHERE id IN (1, 42)"),
            spread_until: 0,
            current_partition: "lakehouse.system.hours(ts)",
            placed: "_partition.ts_hour = lakehouse.system.hours(ts)",
        },
        Table {
            name: "by_month",
            partitioned_by: "months(ts)",
            commits: four(["2026-11-01 10:05:00", "1969-12-15 08:00:00"]),
            evolve: None,
            partitions: 2,
            delete: None,
            spread_until: 0,
            current_partition: "lakehouse.system.months(ts)",
            placed: "_partition.ts_month = lakehouse.system.months(ts)",
        },
        Table {
            name: "by_year",
            partitioned_by: "years(ts)",
            commits: four(["2026-11-01 10:05:00", "1969-06-01 00:00:00"]),
            evolve: None,
            partitions: 2,
            delete: None,
            spread_until: 0,
            current_partition: "lakehouse.system.years(ts)",
            placed: "_partition.ts_year = lakehouse.system.years(ts)",
        },
        Table {
            name: "evolved",
            partitioned_by: "days(ts)",
            commits: [
                four(["2026-11-01 10:05:00", "2026-11-02 11:00:00"]),
                four(["2026-11-01 10:05:00", "2026-11-01 11:45:00"]),
            ]
            .concat(),
            evolve: Some((
                8,
                "ALTER TABLE lakehouse.analytics.evolved REPLACE PARTITION FIELD ts_day WITH hours(ts)",
            )),
            partitions: 4,
            delete: None,
            spread_until: 8,
            current_partition: "lakehouse.system.hours(ts)",
            placed: "_partition.ts_hour = lakehouse.system.hours(ts) AND _partition.ts_day IS NULL",
        },
        Table {
            name: "by_value",
            partitioned_by: "bucket(4, region), truncate(2, region), ts",
            commits: [
                std::iter::repeat_n(("2026-11-01 10:05:00.5", "eu west"), 3).collect::<Vec<_>>(),
                std::iter::repeat_n(("2026-11-01 10:05:00.5", "us"), 3).collect(),
            ]
            .concat(),
            evolve: None,
            partitions: 2,
            delete: None,
            spread_until: 0,
            current_partition: "lakehouse.system.bucket(4, region), lakehouse.system.truncate(2, region), ts",
            placed: "_partition.region_bucket = lakehouse.system.bucket(4, region) \
                     AND _partition.region_trunc = lakehouse.system.truncate(2, region) \
                     AND _partition.ts = ts",
        },
        Table {
            name: "rebucketed",
            partitioned_by: "region",
            commits: ["eu", "us", "eu", "us", "eu", "us", "eu", "us"]
                .into_iter()
                .map(|region| ("2026-11-01 10:05:00", region))
                .collect(),
            evolve: Some((
                4,
                "ALTER TABLE lakehouse.analytics.rebucketed REPLACE PARTITION FIELD region WITH bucket(4, region)",
            )),
            partitions: 4,
            delete: None,
            spread_until: 0,
            current_partition: "lakehouse.system.bucket(4, region)",
            placed: "_partition.region_bucket_4 = lakehouse.system.bucket(4, region) AND _partition.region IS NULL",
        },
        Table {
            name: "unpartitioned_now",
            partitioned_by: "region",
            commits: ["eu", "us", "eu", "us", "eu", "us", "eu", "us"]
                .into_iter()
                .map(|region| ("2026-11-01 10:05:00", region))
                .collect(),
            evolve: Some((
                4,
                "ALTER TABLE lakehouse.analytics.unpartitioned_now DROP PARTITION FIELD region",
            )),
            partitions: 3,
            delete: None,
            spread_until: 0,
            // One partition: the same value for every row (not a literal, which Spark folds).
            current_partition: "_spec_id * 0",
            placed: "_partition.region IS NULL",
        },
    ]
}

fn statements(table: &Table) -> Vec<String> {
    let mut statements = vec![format!(
        "CREATE TABLE lakehouse.analytics.{} (id BIGINT, region STRING, ts TIMESTAMP, amount DOUBLE) \
         USING iceberg PARTITIONED BY ({}) \
         TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')",
        table.name, table.partitioned_by
    )];
    for (index, (time, region)) in table.commits.iter().enumerate() {
        if let Some((at, statement)) = table.evolve {
            if index == at {
                statements.push(statement.to_string());
            }
        }
        let rows: Vec<String> = (0..3)
            .map(|row| {
                let id = index * 10 + row;
                let hours = if index < table.spread_until { row } else { 0 };
                format!("({id}, '{region}', TIMESTAMP '{time}' + INTERVAL {hours} HOURS, {id}.5)")
            })
            .collect();
        statements.push(format!(
            "INSERT INTO lakehouse.analytics.{} VALUES {}",
            table.name,
            rows.join(", ")
        ));
    }
    statements.extend(table.delete.map(str::to_string));
    statements
}

/// Rows, id sum and a hash of every row as Spark reads the table.
fn checksum_statement(table: &str, suffix: &str) -> String {
    format!(
        "SELECT count(*) AS rows_{suffix}, sum(id) AS ids_{suffix}, \
         sum(CAST(xxhash64(id, region, ts, amount) AS DECIMAL(38,0))) AS hash_{suffix} \
         FROM lakehouse.analytics.{table}"
    )
}

/// The files a run of every small file writes, by Spark's own transforms: one a partition of the
/// current spec among the rows of older specs (grouped together, moved to the current spec), and
/// one a partition among the current spec's rows.
fn outputs_statement(table: &Table) -> String {
    let distinct = |condition: &str| {
        format!(
            "(SELECT count(DISTINCT {}) FROM lakehouse.analytics.{} WHERE _spec_id {condition} {})",
            table.current_partition,
            table.name,
            table.current_spec()
        )
    };
    format!(
        "SELECT {} + {} AS outputs_{}",
        distinct("<>"),
        distinct("="),
        table.name
    )
}

/// Rows whose file's partition is not what Java's transforms give them, files of an older spec,
/// and the current spec's partitions among the rows.
fn placement_statement(table: &Table) -> String {
    format!(
        "SELECT count(*) AS misplaced FROM lakehouse.analytics.{name} WHERE NOT coalesce({placed}, false);\n\
         SELECT count(*) AS older_spec_files FROM lakehouse.analytics.{name}.files WHERE spec_id <> {spec};\n\
         SELECT count(DISTINCT {partition}) AS partitions_now FROM lakehouse.analytics.{name};",
        name = table.name,
        placed = table.placed,
        spec = table.current_spec(),
        partition = table.current_partition,
    )
}

fn checksum(stdout: &str, suffix: &str) -> Vec<String> {
    let row = row_with(stdout, &format!("rows_{suffix}"));
    ["rows", "ids", "hash"]
        .iter()
        .map(|column| row[&format!("{column}_{suffix}")].clone())
        .collect()
}

/// The partition paths of the table's data files, as icepack names them from their S3 keys.
fn partitions_from_keys(lakehouse: &Lakehouse, table: &str) -> BTreeSet<String> {
    let files = lakehouse.sql(&format!(
        "SELECT file_path FROM lakehouse.analytics.{table}.files"
    ));
    files
        .lines()
        .skip(1)
        .map(|path| {
            let at = path.find("/data/").expect("a data file's key") + 1;
            icepack::intake::routing::partition_of("", &path[at..])
        })
        .collect()
}

fn task(lakehouse: &Lakehouse, table: &str, partitions: &[String]) -> NativeTask {
    native_task(&lakehouse.catalog, table, partitions.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test --test integration partition_transforms:: -- --include-ignored"]
async fn every_time_transform_and_an_evolved_spec_are_compacted_natively() {
    if !stack_available("every_time_transform_and_an_evolved_spec_are_compacted_natively") {
        return;
    }
    let moto = Moto::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bucket = unique("transforms");
    moto.create_bucket_notifying(&bucket, &unique("unused"))
        .await;
    let lakehouse = Lakehouse::rest(dir.path(), &moto.endpoint, &bucket, &[("token", TOKEN)]).await;
    let tables = tables();
    let mut setup = vec!["CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics".to_string()];
    for table in &tables {
        setup.extend(statements(table));
        setup.push(checksum_statement(table.name, table.name));
        setup.push(outputs_statement(table));
    }
    let before = lakehouse.sql(&(setup.join(";\n") + ";"));
    let engine = NativeEngine::new(NativeLimits::default()).unwrap();

    for table in &tables {
        let expected = checksum(&before, table.name);
        let outputs: u64 = row_with(&before, &format!("outputs_{}", table.name))
            [&format!("outputs_{}", table.name)]
            .parse()
            .unwrap();
        let delete_files = |stdout: &str| row_with(stdout, "delete_files")["delete_files"].clone();
        let deletes_before = delete_files(&lakehouse.sql(&format!(
            "SELECT count(*) AS delete_files FROM lakehouse.analytics.{}.delete_files",
            table.name
        )));
        let partitions: Vec<String> = partitions_from_keys(&lakehouse, table.name)
            .into_iter()
            .collect();
        assert_eq!(
            partitions.len(),
            table.partitions,
            "{}: {partitions:?}",
            table.name
        );
        // The plan (`icepack plan`) reads what the run then does.
        let planned = engine
            .plan(task(&lakehouse, table.name, &partitions))
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", table.name));
        let report = engine
            .run(task(&lakehouse, table.name, &partitions))
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", table.name));
        assert_eq!(
            (planned.input_files(), planned.input_bytes()),
            (
                report.result.rewritten_data_files_count,
                report.result.rewritten_bytes_count
            ),
            "{}: the plan's inputs are the run's",
            table.name
        );
        assert_eq!(
            planned
                .groups
                .iter()
                .map(|group| group.position_deletes_applied)
                .sum::<u64>(),
            report.result.removed_delete_files_count,
            "{}: the plan names the deletes the run applies",
            table.name
        );
        if table.evolve.is_none() {
            assert_eq!(
                planned.expected_output_files(),
                report.result.added_data_files_count,
                "{}",
                table.name
            );
        }
        println!(
            "{}: partitions {partitions:?}: {} files into {}",
            table.name,
            report.result.rewritten_data_files_count,
            report.result.added_data_files_count
        );
        assert_eq!(
            report.result.rewritten_data_files_count,
            table.commits.len() as u64,
            "{}: every small file of the partitions its keys name is rewritten; left: {:?}",
            table.name,
            report.left
        );
        assert_eq!(
            report.result.added_data_files_count, outputs,
            "{}: one output a partition of the current spec (older specs' rows apart)",
            table.name
        );
        assert!(report.left.is_empty(), "{}: {:?}", table.name, report.left);
        let after = lakehouse.sql(&format!(
            "{};\nSELECT count(*) AS files_after FROM lakehouse.analytics.{name}.data_files;\n\
             SELECT count(*) AS delete_files FROM lakehouse.analytics.{name}.delete_files;\n{};\n{}",
            checksum_statement(table.name, "after"),
            crc_statement(&format!("analytics.{}", table.name)),
            placement_statement(table),
            name = table.name
        ));
        let value = |column: &str| row_with(&after, column)[column].clone();
        assert_eq!(
            (value("misplaced"), value("older_spec_files")),
            ("0".to_string(), "0".to_string()),
            "{}: every row in the current spec's partition Spark computes for it",
            table.name
        );
        if table.delete.is_some() {
            assert_ne!(
                deletes_before, "0",
                "{}: Spark wrote position deletes",
                table.name
            );
        }
        assert_eq!(
            report.result.removed_delete_files_count.to_string(),
            deletes_before,
            "{}: the position deletes of the rewritten files leave with them",
            table.name
        );
        assert_eq!(delete_files(&after), "0", "{}", table.name);
        assert_eq!(
            checksum(&after, "after"),
            expected,
            "{}: Spark reads the same rows",
            table.name
        );
        assert_eq!(value("files_after"), outputs.to_string());
        assert_eq!(
            pyiceberg_checksum(&lakehouse, TOKEN, &format!("analytics.{}", table.name)),
            (value("crc_rows"), value("crc_sum")),
            "{}: PyIceberg reads the rows Spark reads",
            table.name
        );
        // The outputs sit where Spark would have put them: their keys name the partitions.
        let keys_after = partitions_from_keys(&lakehouse, table.name);
        assert_eq!(
            keys_after.len().to_string(),
            value("partitions_now"),
            "{}: the outputs' keys {keys_after:?}",
            table.name
        );
        if table.evolve.is_none() {
            assert_eq!(
                keys_after,
                partitions.iter().cloned().collect(),
                "{}: the outputs' keys",
                table.name
            );
        }
    }

    // Spark's own maintenance accepts what the native engine wrote.
    for table in tables.iter().filter(|table| table.evolve.is_some()) {
        let spark_after = lakehouse.sql(&format!(
            "CALL lakehouse.system.rewrite_data_files(table => 'analytics.{name}', options => map('min-input-files', '2', 'rewrite-all', 'true'));\n\
             CALL lakehouse.system.expire_snapshots(table => 'analytics.{name}', older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1);\n\
             {};",
            checksum_statement(table.name, "final"),
            name = table.name
        ));
        assert_eq!(
            checksum(&spark_after, "final"),
            checksum(&before, table.name),
            "{}: Spark's rewrite and expiry over the native output keep every row",
            table.name
        );
    }

    // A run asked for a partition the table does not have (the integer iceberg-rust renders an
    // hour as) rewrites nothing, and says why.
    let more: Vec<String> = statements(&tables[0]).into_iter().skip(1).collect();
    lakehouse.sql(&(more.join(";\n") + ";"));
    let report = engine
        .run(task(
            &lakehouse,
            "by_hour",
            &[
                "ts_hour=499450".to_string(),
                "ts_hour=2026-11-01-10".to_string(),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        report.result.rewritten_data_files_count, 5,
        "4 new + 1 output: {report:?}"
    );
    assert_eq!(report.left.len(), 1, "{:?}", report.left);
    assert_eq!(report.left[0].partition.as_deref(), Some("ts_hour=499450"));
    assert!(
        report.left[0].reason.contains("no live data file"),
        "{}",
        report.left[0].reason
    );

    // parquet-mr reads the statistics of the native outputs: a predicate on the string column
    // outside a file's values skips its row group (with the dictionary and bloom filters off,
    // only the statistics can).
    let outputs = report.output_files.clone();
    assert!(!outputs.is_empty());
    let key = outputs[0]
        .strip_prefix(&format!("s3://{bucket}/"))
        .expect("an output in the warehouse bucket");
    let local = dir.path().join("output.parquet");
    std::fs::write(&local, moto.get_object(&bucket, key).await).unwrap();
    let kept = |value: &str| row_groups_kept(&local, "region", value);
    let (created_by, statistics, matching) = kept("eu");
    assert!(created_by.starts_with("icepack version "), "{created_by}");
    assert!(
        statistics,
        "parquet-mr keeps the string column's statistics"
    );
    assert_eq!(matching, 1, "the row group holds `eu`");
    assert_eq!(
        kept("zz").2,
        0,
        "a value past the maximum prunes the row group"
    );
    assert_eq!(
        kept("aa").2,
        0,
        "a value below the minimum prunes the row group"
    );
}

/// parquet-mr's own reader (Spark 3.5's jars) on a local Parquet file: the file's `created_by`,
/// whether the column's statistics were kept, and how many row groups remain for `column =
/// value` with only the statistics filter on (`tests/fixtures/RowGroupFilter.java`).
fn row_groups_kept(file: &std::path::Path, column: &str, value: &str) -> (String, bool, u64) {
    let spark_home = support::spark::env("ICEPACK_TEST_SPARK_HOME");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/RowGroupFilter.java"
    );
    let stdout = fixture_output(
        std::process::Command::new("java")
            .arg("-cp")
            .arg(format!("{spark_home}/jars/*"))
            .arg(source)
            .arg(file)
            .args([column, value]),
        "RowGroupFilter.java",
    );
    let field = |name: &str| printed(&stdout, name);
    (
        field("created_by"),
        field("statistics") == "present",
        field("kept").parse().unwrap(),
    )
}
