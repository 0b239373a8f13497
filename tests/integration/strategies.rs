//! Rewrite strategies on the real stack: `sort` and `auto` order a run's outputs by the table's
//! sort order, `auto` bin-packs a table without one.

use crate::support;
use crate::support::warm_stack::*;

use icepack::engine::spark::connect::ConnectRunner;
use support::connect::value;
use support::Icepack;

/// Data files of a table with the range of their `id` column: (path, lower, upper).
async fn id_ranges(table: &Table, writer: &ConnectRunner) -> Vec<(String, i64, i64)> {
    let results = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {}", table.qualified()),
                format!(
                    "SELECT file_path AS ranged_file, readable_metrics.id.lower_bound AS lo, \
                     readable_metrics.id.upper_bound AS hi FROM {}.files",
                    table.qualified()
                ),
            ],
        )
        .await;
    let files = results
        .iter()
        .find(|set| set.columns.first().map(String::as_str) == Some("ranged_file"))
        .expect("the files query answers");
    let mut ranges: Vec<(String, i64, i64)> = files
        .rows
        .iter()
        .map(|row| {
            (
                row[0].clone(),
                row[1].parse().unwrap(),
                row[2].parse().unwrap(),
            )
        })
        .collect();
    ranges.sort_by_key(|(_, lower, _)| *lower);
    ranges
}

/// Whether no two files' ranges overlap (each file ends before the next one starts).
fn disjoint(ranges: &[(String, i64, i64)]) -> bool {
    ranges.windows(2).all(|pair| pair[0].2 < pair[1].1)
}

/// Issue 18's rewrite strategies on the real stack: `sort` with a configured order and `auto` on
/// a table with a sort order write output files whose id ranges do not overlap; `auto` on a
/// table without one bin-packs (and its outputs do overlap: the check tells the two apart).
/// `auto` reads the table's order before its first run; status shows it and each run's strategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn sort_and_auto_strategies_order_the_outputs_and_auto_bin_packs_an_unsorted_table() {
    if !connect_available(
        "sort_and_auto_strategies_order_the_outputs_and_auto_bin_packs_an_unsorted_table",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let explicit = stack.table("explicit", "analytics.explicit");
    let ordered = stack.table("ordered", "analytics.ordered");
    let plain = stack.table("plain", "analytics.plain");
    for table in [&explicit, &ordered, &plain] {
        let mut statements = vec![
            format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
            format!(
                "CREATE TABLE {} (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part)",
                table.qualified()
            ),
        ];
        if table.name == ordered.name {
            statements.push(format!(
                "ALTER TABLE {} WRITE ORDERED BY id",
                table.qualified()
            ));
        }
        table.sql(writer, &statements).await;
    }
    // Due at 6 files below 1 MiB; outputs of 2 MiB, so ~3.5 MiB of input makes two or more.
    let config = config(
        moto,
        queue_url,
        bucket,
        &server.url,
        "",
        &[&explicit, &ordered, &plain],
    )
    .replace("min_files = 10\n", "min_files = 6\nsmall_file_mb = 1\ntarget_file_mb = 2\n")
    .replace(
        "table = \"analytics.explicit\"\n",
        "table = \"analytics.explicit\"\nstrategy = \"sort\"\nsort_order = \"id DESC NULLS LAST\"\n",
    )
    .replace(
        "table = \"analytics.ordered\"\n",
        "table = \"analytics.ordered\"\nstrategy = \"auto\"\n",
    )
    .replace(
        "table = \"analytics.plain\"\n",
        "table = \"analytics.plain\"\nstrategy = \"auto\"\n",
    );
    assert_eq!(config.matches("strategy = ").count(), 3, "{config}");
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // Six commits a table, each of ids spread over the whole range (each file spans it).
    let started = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let rows = 4_000;
    for table in [&explicit, &ordered, &plain] {
        let commits: Vec<String> = (0..6)
            .map(|commit| {
                format!(
                    "INSERT INTO {} SELECT /*+ COALESCE(1) */ (id * 7919) % 1000003, 'a', \
                     sha2(CAST(id AS STRING), 512) || sha2(CAST(id * 31 AS STRING), 512) \
                     FROM range({}, {})",
                    table.qualified(),
                    commit * rows,
                    (commit + 1) * rows
                )
            })
            .collect();
        table.sql(writer, &commits).await;
        let before = id_ranges(table, writer).await;
        assert_eq!(before.len(), 6, "{before:?}");
        assert!(!disjoint(&before), "the written files overlap: {before:?}");
    }

    for (table, strategy, sorted) in [
        (&explicit, "sort", true),
        (&ordered, "sort", true),
        (&plain, "binpack", false),
    ] {
        let status = run_after(&icepack, table.name, &started).await;
        let last = &status["last_run"];
        assert_eq!(
            last["outcome"],
            "success",
            "{status}\n{}",
            context(&icepack)
        );
        assert_eq!(last["strategy"], strategy, "{}: {status}", table.name);
        assert_eq!(last["rewritten_data_files"], 6, "{status}");
        let after = id_ranges(table, writer).await;
        assert!(
            after.len() >= 2,
            "{}: several outputs: {after:?}",
            table.name
        );
        assert_eq!(
            disjoint(&after),
            sorted,
            "{} ({strategy}): output ranges {after:?}",
            table.name
        );
        let facts = table
            .sql(
                writer,
                &[format!(
                    "SELECT count(*) AS row_count FROM {}",
                    table.qualified()
                )],
            )
            .await;
        assert_eq!(value(&facts, "row_count"), (6 * rows).to_string());
    }
    // `auto` read each table's order before its run; the explicit sort needed none.
    let orders: Vec<serde_json::Value> = [&explicit, &ordered, &plain]
        .iter()
        .map(|table| table_status(&icepack, table.name)["table_sort_order"].clone())
        .collect();
    assert_eq!(orders[1], "id ASC NULLS FIRST", "{orders:?}");
    assert_eq!(orders[2], "", "{orders:?}");
    assert_eq!(table_status(&icepack, ordered.name)["strategy"], "auto");
    assert!(icepack.terminate(run).await.success());
}
