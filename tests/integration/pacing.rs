//! Pacing on the real stack (issue 17): a burst is one run, mid-sized outputs wait for their
//! partition to close, fragments wait until what they merge into is no longer small. Through
//! icepack and the process's shared Spark Connect server.

use crate::support;
use crate::support::warm_stack::*;

use std::time::Duration;

use icepack::engine::spark::connect::ConnectRunner;
use support::connect::value;
use support::{wait_until, Icepack};

/// A commit of one data file of `rows` rows into partition `part`: a hash per row, which Parquet
/// cannot squeeze, so a few commits make a file past the small-file size.
fn insert_into(table: &str, part: &str, first_id: i64, rows: i64) -> String {
    format!(
        "INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, '{part}', sha2(CAST(id AS STRING), 512) || sha2(CAST(id * 7919 AS STRING), 512) \
         FROM range({first_id}, {})",
        first_id + rows
    )
}

/// Rows and `replace` snapshots of the paced table (as committed now).
fn paced_facts(table: &str) -> Vec<String> {
    vec![
        format!("REFRESH TABLE {table}"),
        format!("SELECT count(*) AS row_count FROM {table}"),
        format!("SELECT count(*) AS replace_snapshots FROM {table}.snapshots WHERE operation = 'replace'"),
    ]
}

/// The table's data files: (path, bytes, partition value).
async fn data_files(table: &Table, writer: &ConnectRunner) -> Vec<(String, u64, String)> {
    let results = table
        .sql(
            writer,
            &[
                format!("REFRESH TABLE {}", table.qualified()),
                format!(
                    "SELECT file_path, file_size_in_bytes, partition.part AS part FROM {}.files",
                    table.qualified()
                ),
            ],
        )
        .await;
    let files = results
        .iter()
        .find(|set| set.columns.first().map(String::as_str) == Some("file_path"))
        .expect("the files query answers");
    files
        .rows
        .iter()
        .map(|row| (row[0].clone(), row[1].parse().unwrap(), row[2].clone()))
        .collect()
}

/// Issue 17's pacing on the real stack: a burst of commits crossing the threshold in its middle
/// is one run (the settle window); a mid-sized output (past the small-file size) is not
/// rewritten by a later run that compacts new files of its own partition while that partition
/// still receives them; once the partition has gone quiet, its last small file rides along with
/// another partition's run and merges into the mid-sized output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn pacing_a_burst_is_one_run_and_mid_sized_outputs_wait_for_their_partition() {
    if !connect_available(
        "pacing_a_burst_is_one_run_and_mid_sized_outputs_wait_for_their_partition",
    ) {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (_, _, _, server, writer) = stack.parts();
    // A run waits for 15 quiet seconds (at most 2 min); a partition is quiet after a minute;
    // no fragment rule: this test is about the settle and the tiers.
    let (table, config) = stack
        .paced_table(
            "analytics.paced",
            "fragment_fill_percent = 0\nsettle_seconds = 15\nsettle_max_seconds = 120\n\
             quiet_partition_minutes = 1\n",
        )
        .await;
    let name = table.qualified();
    assert!(config.contains("settle_seconds = 15"));
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // 1. Six commits one after another into part=a: the threshold (3) is crossed at the third;
    //    the run waits for the burst to end and takes all six.
    let started = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let rows = 4_000;
    let burst: Vec<String> = (0..6)
        .map(|commit| insert_into(&name, "a", commit * rows, rows))
        .collect();
    table.sql(writer, &burst).await;
    let first = run_after(&icepack, table.name, &started).await;
    assert_eq!(
        first["last_run"]["outcome"],
        "success",
        "{first}\n{}",
        context(&icepack)
    );
    assert_eq!(
        first["last_run"]["rewritten_data_files"], 6,
        "one run took the whole burst: {first}"
    );
    let files = data_files(&table, writer).await;
    assert_eq!(files.len(), 1, "{files:?}");
    let (mid_sized, mid_bytes, _) = files[0].clone();
    assert!(
        mid_bytes >= 1024 * 1024,
        "the burst's output is mid-sized (at least the 1 MiB small-file size): {mid_bytes} bytes"
    );
    // Nothing else runs while the partition is quiet: exactly one rewrite for the burst.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let once = table.sql(writer, &paced_facts(&name)).await;
    assert_eq!(
        value(&once, "replace_snapshots"),
        "1",
        "{}",
        context(&icepack)
    );

    // 2. Three more commits into part=a: its next run rewrites them, not the mid-sized output
    //    (the partition still receives files).
    let second_started =
        icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let more: Vec<String> = (6..9)
        .map(|commit| insert_into(&name, "a", commit * rows, rows / 4))
        .collect();
    table.sql(writer, &more).await;
    let second = run_after(&icepack, table.name, &second_started).await;
    // Its output is known from the metadata as of this run: quiet a minute from now.
    let settled = std::time::Instant::now();
    assert_eq!(
        second["last_run"]["outcome"],
        "success",
        "{second}\n{}",
        context(&icepack)
    );
    assert_eq!(
        second["last_run"]["rewritten_data_files"], 3,
        "only the new small files: {second}"
    );
    let files = data_files(&table, writer).await;
    assert!(
        files.iter().any(|(path, _, _)| *path == mid_sized),
        "the mid-sized output is not rewritten again: {files:?}"
    );
    assert_eq!(files.len(), 2, "{files:?}");

    // 3. A minute later part=a is quiet. Three commits into part=b make a run that also takes
    //    part=a's last small file together with the mid-sized output it can now join: two
    //    rewrites in one run (part=b with the small-file floor, part=a with Iceberg's), whose
    //    counts are summed.
    tokio::time::sleep(Duration::from_secs(65).saturating_sub(settled.elapsed())).await;
    let third_started = icepack::base::clock::format_rfc3339(chrono::Utc::now().timestamp_millis());
    let other: Vec<String> = (9..12)
        .map(|commit| insert_into(&name, "b", commit * rows, rows / 4))
        .collect();
    table.sql(writer, &other).await;
    let third = run_after(&icepack, table.name, &third_started).await;
    assert_eq!(
        third["last_run"]["outcome"],
        "success",
        "{third}\n{}",
        context(&icepack)
    );
    assert_eq!(
        third["last_run"]["rewritten_data_files"], 5,
        "part=b's three, and part=a's small file with its mid-sized output: {third}"
    );
    let files = data_files(&table, writer).await;
    let in_a: Vec<_> = files.iter().filter(|(_, _, part)| part == "a").collect();
    assert_eq!(in_a.len(), 1, "part=a is one file now: {files:?}");
    assert!(
        !files.iter().any(|(path, _, _)| *path == mid_sized),
        "{files:?}"
    );
    let end = table.sql(writer, &paced_facts(&name)).await;
    assert_eq!(
        value(&end, "row_count"),
        (6 * rows + 6 * (rows / 4)).to_string(),
        "no row lost or doubled"
    );
    assert!(icepack.terminate(run).await.success());
}

/// Issue 17's fragment rule on the real stack, at a warm server's run cost (where it is on by
/// default): small files due by count wait until together they hold a small file's worth, so
/// the run that takes them leaves a file that is no longer small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn fragments_wait_until_their_output_is_no_longer_small() {
    if !connect_available("fragments_wait_until_their_output_is_no_longer_small") {
        return;
    }
    let _shared = HEAVY.read().await;
    let stack = Stack::start(None).await;
    let (_, _, _, server, writer) = stack.parts();
    // A run costs 1 s, so fragment_fill_percent is 100 by default; no settle, nothing goes
    // quiet during the test.
    let (table, config) = stack
        .paced_table(
            "analytics.filling",
            "settle_seconds = 0\nquiet_partition_minutes = 30\n",
        )
        .await;
    let name = table.qualified();
    assert!(config.contains("run_cost_seconds = 1") && !config.contains("fragment_fill"));
    let mut icepack = Icepack::with_config(&config);
    let run = icepack.spawn_run("");
    let context = |icepack: &Icepack| format!("{}\n{}", icepack.log(run), server.log());

    // 1. One commit at a time. From the third the table is due by files, but while its files
    //    hold less than 1 MiB together no run starts.
    let rows = 800;
    let mut commits = 0;
    let mut held_back = 0;
    loop {
        table
            .sql(writer, &[insert_into(&name, "a", commits * rows, rows)])
            .await;
        commits += 1;
        let status = wait_until(
            &format!("commit {commits} counted"),
            Duration::from_secs(60),
            || {
                let status = table_status(&icepack, table.name);
                async move {
                    (status["pending_files"].as_i64() == Some(commits)
                        || !status["in_flight_run"].is_null()
                        || !status["last_run"].is_null())
                    .then_some(status)
                }
            },
        )
        .await;
        if !status["last_run"].is_null() || !status["in_flight_run"].is_null() {
            let claimed = [&status["in_flight_run"], &status["last_run"]]
                .iter()
                .find_map(|run| run["claimed_bytes"].as_u64())
                .unwrap_or(0);
            assert!(
                claimed >= 1024 * 1024,
                "a run started before the files held a small file's worth: {status}\n{}",
                context(&icepack)
            );
            break;
        }
        let bytes = status["pending_bytes"].as_u64().unwrap_or(0);
        if bytes >= 1024 * 1024 {
            break;
        }
        if commits >= 3 {
            // Due by files: a run would start within milliseconds of the batch.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let status = table_status(&icepack, table.name);
            assert!(
                status["last_run"].is_null() && status["in_flight_run"].is_null(),
                "{commits} files of {bytes} bytes wait to fill: {status}"
            );
            assert_eq!(status["explain"]["filling_files"], commits, "{status}");
            held_back += 1;
        }
        assert!(commits < 60, "the files never reached 1 MiB: {status}");
    }
    assert!(
        held_back > 0,
        "the rule held a due table back at least once"
    );

    // 2. The commit that fills it starts the run, which takes every file; its output is not
    //    small. (A run that loses the race for SQLite's catalog to the writer's last commit
    //    backs off and the next one runs.)
    let done = success_after(&icepack, table.name, "").await;
    assert_eq!(done["last_run"]["rewritten_data_files"], commits, "{done}");
    let files = data_files(&table, writer).await;
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].1 >= 1024 * 1024,
        "the output is not small: {files:?}"
    );
    assert!(icepack.terminate(run).await.success());
}
