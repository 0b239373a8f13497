//! Crash loop: objects land in the local S3 server (their notifications go to SQS, some objects
//! are written twice) while icepack runs and is killed with SIGKILL at random moments, some during
//! compaction runs, and restarted each time. At the end every object must be counted exactly once:
//! pending + claimed + compacted = the objects put, none lost, none double-counted.
//!
//! Runs use the process runner with a stand-in spark-sql (tests/fixtures/fake-spark-sql.sh) that
//! takes a few hundred milliseconds and fails one time in five: this test is about icepack's
//! state, not Spark. Reproducible with ICEPACK_CRASH_SEED; ICEPACK_CRASH_KILLS sets the number
//! of kills (default 100) and ICEPACK_CRASH_OBJECTS the objects (default 1500).

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use icepack::store::{RocksStore, StateStore};
use support::*;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

const TABLES: usize = 3;

fn config(moto: &Moto, queue_url: &str, bucket: &str, fake_spark: &str) -> String {
    let mut toml = format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = ""
shutdown_timeout_seconds = 5

[sqs]
queue_url = "{queue_url}"
region = "us-east-1"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
max_messages = 10
visibility_timeout_seconds = 2
pollers = 2

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
small_file_mb = 1
min_files = 12
max_wait_minutes = 600

[spark]
runner = "process"
spark_sql = "{fake_spark}"
max_concurrent = 2
retry_attempts = 1
failure_backoff_initial_seconds = 1
failure_backoff_max_seconds = 2
"#,
        endpoint = moto.endpoint
    );
    for table in 0..TABLES {
        toml.push_str(&format!(
            "\n[[tables]]\ntable = \"crash.t{table}\"\nbucket = \"{bucket}\"\nprefix = \"t{table}/\"\nmin_input_files = 4\n"
        ));
    }
    toml
}

/// Runs in flight: the stand-in's starts without an end whose process is still alive (a killed
/// icepack takes its run down with it).
fn runs_in_flight(log: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut open: HashMap<&str, i32> = HashMap::new();
    for line in text.lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next()) {
            (Some("start"), Some(pid)) => *open.entry(pid).or_default() += 1,
            (Some("end"), Some(pid)) => *open.entry(pid).or_default() -= 1,
            _ => {}
        }
    }
    open.iter()
        .filter(|(pid, count)| **count > 0 && alive(pid))
        .count()
}

/// Running (not gone, not a zombie nobody reaped).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_or_counted_twice_across_a_hundred_kills() {
    let seed = env_or("ICEPACK_CRASH_SEED", 7);
    let kills = env_or("ICEPACK_CRASH_KILLS", 100);
    let objects = env_or("ICEPACK_CRASH_OBJECTS", 1500);
    let mut rng = fastrand::Rng::with_seed(seed);

    let moto = Moto::start().await;
    let Landing {
        queue_url, bucket, ..
    } = moto.landing(1000).await;
    let fake_spark =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-spark-sql.sh");
    let mut icepack =
        Icepack::with_config(&config(&moto, &queue_url, &bucket, &path_str(&fake_spark)));
    let spark_log = icepack.state_dir().with_file_name("fake-spark.log");
    icepack
        .env
        .push(("FAKE_SPARK_LOG".to_string(), path_str(&spark_log)));

    // The writer: every object once, one in ten twice (S3 notifies both writes).
    let writer = async {
        let mut rng = fastrand::Rng::with_seed(seed + 1);
        let mut keys = Vec::new();
        for object in 0..objects {
            let key = format!(
                "t{}/data/day={}/part-{object:05}.parquet",
                rng.usize(..TABLES),
                rng.u8(1..4)
            );
            moto.put_object(&bucket, &key, 100 + rng.usize(..900)).await;
            if rng.u8(..10) == 0 {
                moto.put_object(&bucket, &key, 100).await;
            }
            keys.push(key);
            tokio::time::sleep(Duration::from_millis(rng.u64(20..120))).await;
        }
        keys
    };
    let killer = async {
        let mut kills_during_runs = 0;
        for _ in 0..kills {
            let index = icepack.spawn_run("");
            tokio::time::sleep(Duration::from_millis(rng.u64(300..2500))).await;
            if runs_in_flight(&spark_log) > 0 {
                kills_during_runs += 1;
            }
            icepack.kill(index).await;
        }
        kills_during_runs
    };
    let started = Instant::now();
    let (keys, kills_during_runs) = tokio::join!(writer, killer);

    // A last run, left alone until the queue is empty and no compaction run is in flight, then
    // stopped.
    let last = icepack.spawn_run("");
    wait_until("the queue to drain", Duration::from_secs(180), || {
        let depth = moto.queue_depth(&queue_url);
        async move { (depth.await == 0).then_some(()) }
    })
    .await;
    wait_until("the last runs to end", Duration::from_secs(60), || {
        let idle = runs_in_flight(&spark_log) == 0;
        async move { idle.then_some(()) }
    })
    .await;
    icepack.terminate(last).await;

    // The ground truth against the store.
    let store = RocksStore::open_read_only(&icepack.state_dir()).unwrap();
    let objects_by_table = keys.iter().fold(HashMap::new(), |mut counts, key| {
        *counts
            .entry(key[1..2].parse::<usize>().unwrap())
            .or_insert(0u64) += 1;
        counts
    });
    let mut lost = 0i64;
    let mut double_counted = 0i64;
    let (mut pending, mut claimed, mut compacted) = (0, 0, 0);
    for table in 0..TABLES {
        let name = format!("crash.t{table}");
        let snapshot = store.load_table(&name).unwrap();
        let logged = store.files(&name).unwrap();
        let in_claim = snapshot.state.claim.as_ref().map_or(0, |claim| {
            logged
                .iter()
                .filter(|(seq, _)| *seq < claim.upto_seq)
                .count()
        });
        let counted = logged.len() as u64 + snapshot.state.compacted_files;
        // Every file ever counted got its own sequence number below the next one (a run's
        // settlement reserves numbers for the log it rebuilds and may leave some unused), and no
        // file is in the log twice.
        assert!(
            snapshot.state.next_file_seq >= counted,
            "{name}: {} sequence numbers for {counted} files",
            snapshot.state.next_file_seq
        );
        assert!(
            logged
                .iter()
                .all(|(seq, _)| *seq < snapshot.state.next_file_seq),
            "{name}: a logged file numbered past the next number"
        );
        let numbers: std::collections::HashSet<u64> = logged.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(numbers.len(), logged.len(), "{name}: a number given twice");
        let distinct: std::collections::HashSet<&str> =
            logged.iter().map(|(_, file)| file.key.as_str()).collect();
        assert_eq!(
            distinct.len(),
            logged.len(),
            "{name}: a file is logged twice"
        );
        let truth = objects_by_table.get(&table).copied().unwrap_or(0);
        let difference = counted as i64 - truth as i64;
        if difference > 0 {
            double_counted += difference;
        } else {
            lost -= difference;
        }
        pending += logged.len() - in_claim;
        claimed += in_claim;
        compacted += snapshot.state.compacted_files;
    }
    let objects_keys: Vec<(&str, &str)> = keys
        .iter()
        .map(|key| (bucket.as_str(), key.as_str()))
        .collect();
    let unseen = store
        .seen(&objects_keys)
        .unwrap()
        .iter()
        .filter(|seen| !**seen)
        .count();
    let succeeded = std::fs::read_to_string(&spark_log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.ends_with("succeeded"))
        .count();
    println!(
        "FIGURES crash loop (seed {seed}): {objects} objects, {kills} SIGKILLs ({kills_during_runs} during a compaction run) in {:.0} s; \
         counted: pending {pending} + claimed {claimed} + compacted {compacted}; {succeeded} successful runs; \
         lost {lost}, double-counted {double_counted}, objects never seen {unseen}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!((lost, double_counted, unseen), (0, 0, 0));
    assert!(
        compacted > 0,
        "some runs must have succeeded between the kills"
    );
    assert!(
        kills_during_runs > 0,
        "the kills should have hit compaction runs too"
    );
}
