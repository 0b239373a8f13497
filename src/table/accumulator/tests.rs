//! The pure accumulator's tests: counting, claims, runs and their settlement, truth reads.

use super::*;
use crate::store::MemoryStore;
use crate::table::policy::Thresholds;

fn spec() -> Arc<TableSpec> {
    Arc::new(spec_waiting_at_most(60_000))
}

/// The table of `spec()` (100-byte small files, due at 3 files or 1,000 bytes), with its max-wait.
fn spec_waiting_at_most(max_wait_millis: i64) -> TableSpec {
    TableSpec::for_tests(
        "n.t",
        "b",
        "t/",
        Thresholds {
            small_file_bytes: 100,
            min_files: 3,
            min_total_bytes: 1_000,
            max_wait_millis: Some(max_wait_millis),
        },
    )
}

fn candidate(key: &str, size: u64, event_millis: i64, partition: &str) -> Candidate {
    Candidate {
        bucket: "b".to_string(),
        key: key.to_string(),
        size,
        event_millis,
        partition: partition.to_string(),
        kind: Default::default(),
    }
}

fn stage_and_commit(
    accumulator: &mut Accumulator,
    store: &MemoryStore,
    candidates: Vec<Candidate>,
    now: i64,
) -> Staged {
    let mut staged = accumulator.stage(candidates, store, now).unwrap();
    let committed = store.commit(std::mem::take(&mut staged.ops)).is_ok();
    accumulator.settle(committed);
    staged
}

#[test]
fn counts_files_bytes_times_and_partitions() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=1/a.parquet", 10, 500, "d=1"),
            candidate("t/data/d=2/b.parquet", 20, 300, "d=2"),
            candidate("t/data/d=1/c.parquet", 30, 900, "d=1"),
        ],
        1_000,
    );
    assert_eq!(staged.num_counted, 3);
    let pending = &accumulator.snapshot().state.pending;
    assert_eq!((pending.files, pending.bytes), (3, 60));
    assert_eq!(pending.oldest_event_millis, Some(300));
    assert_eq!(pending.newest_event_millis, Some(900));
    assert_eq!(
        accumulator.snapshot().partitions["d=1"],
        PartitionCounts {
            files: 2,
            bytes: 40,
            oldest_event_millis: Some(500),
            newest_event_millis: Some(900),
            ..Default::default()
        }
    );
    assert_eq!(
        accumulator.snapshot().partitions["d=2"],
        PartitionCounts {
            files: 1,
            bytes: 20,
            oldest_event_millis: Some(300),
            newest_event_millis: Some(300),
            ..Default::default()
        }
    );
    assert_eq!(
        accumulator.decision(1_000),
        Decision::NotDue,
        "3 files, but only 2 of them can be improved (min_files 3)"
    );

    let reloaded = Accumulator::load(spec(), &store).unwrap();
    assert_eq!(reloaded.snapshot(), accumulator.snapshot());
    assert_eq!(store.files("n.t").unwrap().len(), 3);
}

#[test]
fn duplicates_in_a_batch_and_across_batches_count_once() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/a.parquet", 10, 1, ""),
            candidate("t/a.parquet", 10, 2, ""),
        ],
        10,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (1, 1));
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/a.parquet", 10, 3, "")],
        10,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 1));
    assert!(staged.ops.is_empty());
    assert_eq!(accumulator.snapshot().state.pending.files, 1);
}

#[test]
fn a_failed_commit_changes_nothing_and_a_retry_counts_once() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    store.fail_commits(true);
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/a.parquet", 10, 1, "")],
        10,
    );
    assert_eq!(accumulator.snapshot().state.pending.files, 0);
    assert!(!accumulator.has_staged_change());
    store.fail_commits(false);
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/a.parquet", 10, 1, "")],
        10,
    );
    assert_eq!(staged.num_counted, 1);
    assert_eq!(accumulator.snapshot().state.pending.files, 1);
    assert_eq!(
        store.files("n.t").unwrap()[0].0,
        0,
        "sequence numbers are not burnt by failures"
    );
}

#[test]
fn future_event_times_are_clamped_so_max_wait_still_fires() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/a.parquet", 10, 99_999_999, ""),
            candidate("t/b.parquet", 10, 99_999_999, ""),
        ],
        1_000,
    );
    assert_eq!(accumulator.next_deadline(1_000), Some(61_000));
    assert_eq!(
        accumulator.next_deadline(61_000),
        None,
        "past deadlines are the decision's"
    );
    assert_eq!(accumulator.due(60_999), None);
    assert_eq!(accumulator.due(61_000), Some(DueReason::MaxWait));
}

#[test]
fn the_accumulator_wakes_when_a_filling_partition_goes_quiet() {
    let mut spec = spec_waiting_at_most(3_600_000);
    spec.pacing = crate::table::policy::PacingSpec {
        mode: crate::table::policy::PacingMode::Cost,
        fragment_percent: Some(100),
        quiet_millis: 900_000,
        ..crate::table::policy::PacingSpec::OFF
    };
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(Arc::new(spec), &store).unwrap();
    // Three files of 10 bytes: due by files, but together a tenth of a small file, so they
    // wait to fill — until the partition goes quiet 15 minutes later (before their half of
    // max-wait, 30 minutes), when the accumulator wakes without an event.
    let files = (0..3)
        .map(|i| candidate(&format!("t/d=1/{i}.parquet"), 10, 0, "d=1"))
        .collect();
    stage_and_commit(&mut accumulator, &store, files, 0);
    assert_eq!(accumulator.due(899_999), None);
    assert_eq!(accumulator.next_deadline(0), Some(900_000));
    assert_eq!(accumulator.due(900_000), Some(DueReason::Files));
}

fn success(outputs: &[&str]) -> RunOutcome {
    RunOutcome::Success {
        report: crate::model::report::ReportSummary {
            result: crate::model::report::RewriteResult {
                rewritten_data_files_count: 3,
                added_data_files_count: 1,
                ..Default::default()
            },
            output_files: outputs.iter().map(|key| format!("s3://b/{key}")).collect(),
            ..Default::default()
        },
        duration_millis: 5,
        attempts: 1,
    }
}

fn failure() -> RunOutcome {
    RunOutcome::Failure {
        class: crate::model::report::FailureClass::Other,
        excerpt: "NoSuchTableException".to_string(),
        duration_millis: 5,
        attempts: 2,
    }
}

const BACKOFF: FailureBackoff = FailureBackoff {
    initial_millis: 60_000,
    max_millis: 3_600_000,
};

fn claim_and_commit(
    accumulator: &mut Accumulator,
    store: &MemoryStore,
    run_id: &str,
    now: i64,
) -> ClaimTicket {
    let (ops, ticket) = accumulator
        .begin_claim(run_id, Trigger::Files, now, true)
        .expect("no run in flight");
    store.commit(ops).unwrap();
    accumulator.settle(true);
    ticket
}

fn finish(
    accumulator: &mut Accumulator,
    store: &MemoryStore,
    run_id: &str,
    outcome: &RunOutcome,
    now: i64,
) {
    let (ops, change) = settle_run(
        accumulator.spec(),
        accumulator.snapshot(),
        store,
        run_id,
        outcome,
        None,
        now,
        BACKOFF,
    )
    .unwrap()
    .expect("the claim is this run's");
    store.commit(ops).unwrap();
    accumulator.adopt(change);
}

#[test]
fn files_landing_during_a_run_stay_pending_after_its_success() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let first: Vec<Candidate> = (0..3)
        .map(|i| candidate(&format!("t/data/d=1/{i}.parquet"), 10, 100, "d=1"))
        .collect();
    stage_and_commit(&mut accumulator, &store, first, 1_000);
    let ticket = claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    assert_eq!((ticket.files, ticket.bytes), (3, 30));
    assert_eq!(accumulator.snapshot().state.pending.files, 0);
    assert!(
        accumulator
            .begin_claim("run-2", Trigger::Files, 2_000, true)
            .is_none(),
        "one run per table"
    );

    // During the run: a writer lands a file, and the run's own output is announced too.
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/d=2/late.parquet", 7, 2_500, "d=2")],
        2_500,
    );
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/d=1/out-1.parquet", 20, 2_600, "d=1")],
        2_600,
    );
    assert_eq!(accumulator.snapshot().state.pending.files, 2);

    finish(
        &mut accumulator,
        &store,
        "run-1",
        &success(&[
            "t/data/d=1/out-1.parquet",
            "t/data/d=1/out-2.parquet",
            "elsewhere/x.parquet",
        ]),
        3_000,
    );
    let state = &accumulator.snapshot().state;
    assert_eq!(
        state.pending.files, 1,
        "only the late file: the output is not a pending small file"
    );
    assert_eq!(state.pending.bytes, 7);
    assert_eq!(state.pending.oldest_event_millis, Some(2_500));
    assert!(state.claim.is_none());
    let record = state.last_run.as_ref().unwrap();
    assert!(record.succeeded);
    assert_eq!(record.claimed_files, 3);
    assert_eq!(record.output_files, 2);
    assert_eq!(
        accumulator.snapshot().partitions.keys().collect::<Vec<_>>(),
        vec!["d=2"]
    );
    assert_eq!(store.files("n.t").unwrap().len(), 1);

    // The second output's event arrives after the run: a duplicate.
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/d=1/out-2.parquet", 20, 2_700, "d=1")],
        3_100,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 1));
    assert_eq!(
        Accumulator::load(spec(), &store).unwrap().snapshot(),
        accumulator.snapshot(),
        "durable"
    );
}

/// Issue 15 part 5: a claimed or pending file's key outlives the dedup retention, so a late
/// redelivery of it is still a duplicate; once the run took the claimed files out of the log,
/// their keys are forgotten like any other.
#[test]
fn the_keys_of_pending_and_claimed_files_outlive_the_retention() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let files = ["t/data/a.parquet", "t/data/b.parquet", "t/data/c.parquet"];
    let arrivals = |keys: &[&str]| -> Vec<Candidate> {
        keys.iter().map(|key| candidate(key, 10, 900, "")).collect()
    };
    stage_and_commit(&mut accumulator, &store, arrivals(&files[..2]), 1_000);
    claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    stage_and_commit(&mut accumulator, &store, arrivals(&files[2..]), 3_000);

    // Every key is past the retention: the two claimed and the pending one stay.
    let purged = store.purge_seen_before(1_000_000).unwrap();
    assert_eq!((purged.purged, purged.kept_in_log), (0, 3));
    let staged = stage_and_commit(&mut accumulator, &store, arrivals(&files), 1_000_001);
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 3));
    assert_eq!(accumulator.snapshot().state.pending.files, 1);

    finish(&mut accumulator, &store, "run-1", &success(&[]), 1_000_002);
    let purged = store.purge_seen_before(2_000_000).unwrap();
    assert_eq!((purged.purged, purged.kept_in_log), (2, 1));
    let staged = stage_and_commit(&mut accumulator, &store, arrivals(&files), 2_000_001);
    assert_eq!(
        staged.duplicate_positions,
        vec![2],
        "the compacted files' keys are forgotten, the pending one's is not"
    );
}

#[test]
fn a_failed_run_gives_its_files_back_and_backs_off() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/a.parquet", 10, 100, ""),
            candidate("t/data/b.parquet", 10, 200, ""),
        ],
        1_000,
    );
    claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/c.parquet", 10, 2_100, "")],
        2_100,
    );
    finish(&mut accumulator, &store, "run-1", &failure(), 3_000);
    let state = &accumulator.snapshot().state;
    assert_eq!(state.pending.files, 3, "nothing forgotten");
    assert_eq!(state.pending.oldest_event_millis, Some(100));
    assert_eq!(state.consecutive_failures, 1);
    assert_eq!(state.next_attempt_millis, Some(63_000));
    assert!(!accumulator.may_start_run(62_999));
    assert!(accumulator.may_start_run(63_000));
    assert_eq!(
        state.last_run.as_ref().unwrap().error.as_deref(),
        Some("NoSuchTableException")
    );

    claim_and_commit(&mut accumulator, &store, "run-2", 63_000);
    finish(&mut accumulator, &store, "run-2", &failure(), 64_000);
    assert_eq!(
        accumulator.snapshot().state.next_attempt_millis,
        Some(64_000 + 120_000),
        "doubling"
    );
    claim_and_commit(&mut accumulator, &store, "run-3", 200_000);
    finish(&mut accumulator, &store, "run-3", &success(&[]), 201_000);
    assert_eq!(accumulator.snapshot().state.consecutive_failures, 0);
    assert_eq!(accumulator.snapshot().state.next_attempt_millis, None);
    assert_eq!(accumulator.snapshot().state.pending.files, 0);
}

/// A run that failed as `invalid_input` (its claim could not be prepared, or its outcome not
/// read) is not replayed as it was: the table's next run names no partition, so whatever its
/// claim named is not met again. Its files were given back, as for any failure.
#[test]
fn the_run_after_a_lost_race_knows_it_and_the_one_after_a_success_does_not() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let land = |accumulator: &mut Accumulator, from: u64, now: i64| {
        let files: Vec<Candidate> = (from..from + 4)
            .map(|index| candidate(&format!("t/data/d=0/{index}.parquet"), 10, now, "d=0"))
            .collect();
        stage_and_commit(accumulator, &store, files, now);
    };
    land(&mut accumulator, 0, 1_000);
    let first = claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    assert_eq!(first.last_failure, None);
    let lost = RunOutcome::Failure {
        class: crate::model::report::FailureClass::CommitConflict,
        excerpt: "delete file applies to input".to_string(),
        duration_millis: 5,
        attempts: 1,
    };
    finish(&mut accumulator, &store, "run-1", &lost, 3_000);
    let retry = claim_and_commit(&mut accumulator, &store, "run-2", 100_000);
    assert_eq!(
        retry.last_failure,
        Some(crate::model::report::FailureClass::CommitConflict)
    );
    assert!(crate::table::policy::commits_per_group(
        None,
        retry.last_failure
    ));
    finish(&mut accumulator, &store, "run-2", &success(&[]), 101_000);
    land(&mut accumulator, 10, 102_000);
    let after = claim_and_commit(&mut accumulator, &store, "run-3", 103_000);
    assert_eq!(after.last_failure, None, "the success ended the streak");
}

#[test]
fn after_an_invalid_input_failure_the_next_run_names_no_partitions() {
    let due_run = |class: crate::model::report::FailureClass| {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(spec(), &store).unwrap();
        let files: Vec<Candidate> = (0..4)
            .map(|index| {
                let partition = format!("d={}", index % 2);
                candidate(
                    &format!("t/data/{partition}/{index}.parquet"),
                    10,
                    100,
                    &partition,
                )
            })
            .collect();
        stage_and_commit(&mut accumulator, &store, files, 1_000);
        let (ops, first) = accumulator
            .begin_claim("run-1", Trigger::Files, 200_000, false)
            .expect("due: past twice its max-wait");
        store.commit(ops).unwrap();
        accumulator.settle(true);
        assert_eq!(first.partitions(), ["d=0", "d=1"]);
        let failed = RunOutcome::Failure {
            class,
            excerpt: "preparing the run failed unexpectedly".to_string(),
            duration_millis: 0,
            attempts: 1,
        };
        finish(&mut accumulator, &store, "run-1", &failed, 201_000);
        assert_eq!(accumulator.snapshot().state.pending.files, 4, "given back");
        let (_, next) = accumulator
            .begin_claim("run-2", Trigger::Files, 1_000_000, false)
            .expect("due again after the back-off");
        next
    };
    let next = due_run(crate::model::report::FailureClass::InvalidInput);
    assert!(next.partitions().is_empty(), "{:?}", next.task);
    assert!(!matches!(
        next.task.rewrite().unwrap().mid_sized,
        MidSizedFiles::In(_)
    ));
    let next = due_run(crate::model::report::FailureClass::Other);
    assert_eq!(
        next.partitions(),
        ["d=0", "d=1"],
        "other failures retry the same run"
    );
}

fn truthful_success(truth: &[(&str, u64)], committed: &[&str]) -> RunOutcome {
    RunOutcome::Success {
        report: crate::model::report::ReportSummary {
            result: crate::model::report::RewriteResult {
                rewritten_data_files_count: 12,
                added_data_files_count: 1,
                ..Default::default()
            },
            output_files: vec!["s3://b/t/data/d=1/out.parquet".to_string()],
            spec: Some(vec![crate::table::partitions::PartitionField {
                name: "d".to_string(),
                source: "d".to_string(),
                transform: crate::table::partitions::Transform::Identity,
                source_type: Some("int".to_string()),
            }]),
            truth: Some(
                truth
                    .iter()
                    .map(|(key, size)| (format!("s3://b/{key}"), *size))
                    .collect(),
            ),
            committed: committed
                .iter()
                .map(|key| format!("s3://b/{key}"))
                .collect(),
            table_order: Some(crate::model::strategy::TableOrder::Unsorted),
            ..Default::default()
        },
        duration_millis: 5,
        attempts: 1,
    }
}

/// File sizes come from events and the engine's output: sizes that add up past `u64::MAX` (two
/// files of 16 EiB in the truth) saturate the counts instead of overflowing in the settlement.
#[test]
fn sizes_past_the_largest_number_saturate_the_counts() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/d=1/a.parquet", 10, 100, "d=1")],
        1_000,
    );
    claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    let outcome = truthful_success(
        &[
            ("t/data/d=1/a.parquet", u64::MAX),
            ("t/data/d=1/b.parquet", u64::MAX),
        ],
        &[],
    );
    finish(&mut accumulator, &store, "run-1", &outcome, 3_000);
    let state = &accumulator.snapshot().state;
    assert_eq!(state.pending.files, 2);
    assert_eq!(state.pending.bytes, u64::MAX);
    assert_eq!(accumulator.snapshot().partitions["d=1"].bytes, u64::MAX);
}

#[test]
fn after_a_run_the_pending_files_are_the_truth_plus_what_is_still_on_its_way() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    // Claimed, announced more than the grace before the run reads the metadata: a (committed
    // then, rewritten), b (left in a partition not worth rewriting), orphan (never committed).
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=1/a.parquet", 10, 100, "d=1"),
            candidate("t/data/d=2/b.parquet", 10, 100, "d=2"),
            candidate("t/data/d=1/orphan.parquet", 10, 100, "d=1"),
        ],
        1_000,
    );
    let claimed_at = RECONCILE_GRACE_MILLIS + 2_000;
    claim_and_commit(&mut accumulator, &store, "run-1", claimed_at);
    // During the run: c (committed, then rewritten by the run), d (its writer still committing),
    // and the run's own output.
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=1/c.parquet", 10, claimed_at + 100, "d=1"),
            candidate("t/data/d=3/d.parquet", 10, claimed_at + 200, "d=3"),
            candidate("t/data/d=1/out.parquet", 40, claimed_at + 300, "d=1"),
        ],
        claimed_at + 300,
    );
    let outcome = truthful_success(
        &[
            ("t/data/d=1/out.parquet", 40),
            ("t/data/d=2/b.parquet", 10),
            ("t/data/d=4/old.parquet", 7),
        ],
        &["t/data/d=1/c.parquet", "t/data/d=1/out.parquet"],
    );
    finish(
        &mut accumulator,
        &store,
        "run-1",
        &outcome,
        claimed_at + 1_000,
    );
    let mut pending: Vec<(String, crate::model::state::FileSource)> = store
        .files("n.t")
        .unwrap()
        .into_iter()
        .map(|(_, file)| (file.key, file.source))
        .collect();
    pending.sort();
    use crate::model::state::FileSource::{Events, Metadata};
    assert_eq!(
        pending,
        vec![
            ("t/data/d=1/out.parquet".to_string(), Metadata),
            ("t/data/d=2/b.parquet".to_string(), Events),
            ("t/data/d=3/d.parquet".to_string(), Events),
            ("t/data/d=4/old.parquet".to_string(), Metadata),
        ],
        "a and c were rewritten, the orphan was never committed; the run's still-small output \
         is known from the metadata though its event came first"
    );
    let snapshot = accumulator.snapshot();
    assert_eq!(snapshot.state.pending.files, 4);
    assert_eq!(snapshot.partitions["d=4"].metadata_files, 1);
    assert_eq!(snapshot.partitions["d=1"].metadata_files, 1);
    assert!(snapshot.state.partition_spec.is_some());
    assert_eq!(snapshot.state.last_truth_millis, Some(claimed_at + 1_000));
    assert_eq!(
        Accumulator::load(spec(), &store).unwrap().snapshot(),
        snapshot,
        "durable"
    );
    // Late events of truth files and committed files are duplicates.
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=4/old.parquet", 7, claimed_at + 1_100, "d=4"),
            candidate("t/data/d=1/c.parquet", 10, claimed_at + 1_100, "d=1"),
        ],
        claimed_at + 1_100,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 2));
}

#[test]
fn a_slow_writer_across_a_claim_stays_pending_and_is_not_counted_as_compacted() {
    const MINUTE: i64 = 60_000;
    let claimed_at = 10 * 60 * MINUTE;
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    // Announced 20 minutes before the claim and never committed: an aborted write.
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate(
            "t/data/d=1/orphan.parquet",
            10,
            claimed_at - 20 * MINUTE,
            "d=1",
        )],
        claimed_at - 20 * MINUTE,
    );
    // Announced two minutes before the claim: a (committed, then rewritten by the run) and
    // slow (uploaded, its writer still committing when the run reads the metadata).
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=1/a.parquet", 10, claimed_at - 2 * MINUTE, "d=1"),
            candidate("t/data/d=2/slow.parquet", 7, claimed_at - 2 * MINUTE, "d=2"),
        ],
        claimed_at - 2 * MINUTE,
    );
    let ticket = claim_and_commit(&mut accumulator, &store, "run-1", claimed_at);
    assert_eq!(ticket.files, 3);
    let outcome = truthful_success(
        &[("t/data/d=1/out.parquet", 40)],
        &["t/data/d=1/a.parquet", "t/data/d=1/out.parquet"],
    );
    finish(
        &mut accumulator,
        &store,
        "run-1",
        &outcome,
        claimed_at + MINUTE,
    );
    let keys = |store: &MemoryStore| -> Vec<String> {
        let mut keys: Vec<String> = store
            .files("n.t")
            .unwrap()
            .into_iter()
            .map(|(_, file)| file.key)
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&store),
        vec!["t/data/d=1/out.parquet", "t/data/d=2/slow.parquet"],
        "slow is still on its way; a was rewritten; the orphan is past the grace"
    );
    let snapshot = accumulator.snapshot();
    assert_eq!(
        snapshot.state.compacted_files, 2,
        "a and the orphan left; slow did not"
    );
    // slow is not in the table yet: it waits for the metadata, counting toward no threshold
    // (a run could not rewrite it), and is read again once its grace is over.
    assert_eq!(
        (snapshot.state.pending.files, snapshot.state.pending.bytes),
        (1, 40)
    );
    assert!(!snapshot.partitions.contains_key("d=2"));
    assert_eq!(
        snapshot.state.unconfirmed,
        crate::model::state::UnconfirmedFiles {
            files: 1,
            oldest_event_millis: Some(claimed_at - 2 * MINUTE)
        }
    );
    assert_eq!(
        accumulator.unconfirmed_read_at(),
        Some(claimed_at + MINUTE + RECONCILE_GRACE_MILLIS),
        "a grace after the last read"
    );

    // Its writer commits; the next run finds it in the metadata: still one file, counted once.
    claim_and_commit(&mut accumulator, &store, "run-2", claimed_at + 3 * MINUTE);
    let outcome = truthful_success(
        &[
            ("t/data/d=1/out.parquet", 40),
            ("t/data/d=2/slow.parquet", 7),
        ],
        &["t/data/d=2/slow.parquet"],
    );
    finish(
        &mut accumulator,
        &store,
        "run-2",
        &outcome,
        claimed_at + 4 * MINUTE,
    );
    assert_eq!(
        keys(&store),
        vec!["t/data/d=1/out.parquet", "t/data/d=2/slow.parquet"]
    );
    let snapshot = accumulator.snapshot();
    assert_eq!(snapshot.state.compacted_files, 2);
    assert_eq!(
        (snapshot.state.pending.files, snapshot.state.pending.bytes),
        (2, 47)
    );
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate(
            "t/data/d=2/slow.parquet",
            7,
            claimed_at + 5 * MINUTE,
            "d=2",
        )],
        claimed_at + 5 * MINUTE,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 1));
}

/// Issue 18: new manifests announced by events count toward `max_manifests` once each (not
/// a redelivered event, not one written before the last read of the metadata) and are never
/// pending; the read of a `rewrite_manifests` run sets the count, and the table is due again
/// only once half of `max_manifests` more have been added to what the rewrite left.
#[test]
fn manifests_are_counted_from_events_and_reset_by_the_metadata() {
    const MINUTE: i64 = 60_000;
    let mut with_max = (*spec()).clone();
    with_max.max_manifests = Some(4);
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(Arc::new(with_max), &store).unwrap();
    let manifest = |name: &str, at: i64| Candidate {
        kind: FileKind::Manifest,
        ..candidate(&format!("t/metadata/{name}-m0.avro"), 7_000, at, "")
    };
    let five: Vec<Candidate> = (0..5).map(|n| manifest(&format!("m{n}"), MINUTE)).collect();
    let mut again = five.clone();
    again.truncate(1);
    let staged = stage_and_commit(&mut accumulator, &store, five, MINUTE);
    assert_eq!(staged.num_counted, 5);
    let staged = stage_and_commit(&mut accumulator, &store, again, MINUTE);
    assert_eq!(
        (staged.num_counted, staged.num_duplicates),
        (0, 1),
        "redelivered"
    );
    let state = &accumulator.snapshot().state;
    assert_eq!((state.manifests.total(), state.pending.files), (5, 0));
    assert!(accumulator.manifests_due());
    assert_eq!(accumulator.due(MINUTE), None, "no data file is pending");

    // The run: rewrite_manifests, then the reads; six manifests were there, one is left.
    let (ops, ticket) = accumulator
        .begin_claim("run-m", Trigger::RewriteManifests, 2 * MINUTE, true)
        .unwrap();
    assert_eq!(
        ticket.task,
        Task::Maintenance(Maintenance::RewriteManifests)
    );
    store.commit(ops).unwrap();
    accumulator.settle(true);
    let mut outcome = truthful_success(&[], &[]);
    if let RunOutcome::Success { report, .. } = &mut outcome {
        report.result = Default::default();
        report.output_files.clear();
        report.manifest_count = Some(1);
    }
    finish(&mut accumulator, &store, "run-m", &outcome, 3 * MINUTE);
    let state = &accumulator.snapshot().state;
    assert_eq!(state.manifests.total(), 1);
    let last = state.last_run.clone().unwrap();
    assert_eq!(
        (last.succeeded, last.maintenance, last.manifests),
        (true, Some(Maintenance::RewriteManifests), Some((5, 1)))
    );
    assert!(!accumulator.manifests_due());

    // The run's own output (written before its read) is known; four new ones make it due.
    let staged = stage_and_commit(
        &mut accumulator,
        &store,
        vec![manifest("out", 2 * MINUTE + 30_000)],
        4 * MINUTE,
    );
    assert_eq!((staged.num_counted, staged.num_duplicates), (0, 1));
    let new: Vec<Candidate> = (0..4)
        .map(|n| manifest(&format!("n{n}"), 5 * MINUTE))
        .collect();
    stage_and_commit(&mut accumulator, &store, new, 5 * MINUTE);
    assert_eq!(accumulator.snapshot().state.manifests.total(), 5);
    assert!(accumulator.manifests_due());

    // A rewrite that fails (issue 50) is told and never backs the table off: a compaction due
    // meanwhile runs at once, and the rewrite is asked again only once the table has gained
    // half of `max_manifests` more, not over and over.
    let (ops, _) = accumulator
        .begin_claim("run-m2", Trigger::RewriteManifests, 6 * MINUTE, true)
        .unwrap();
    store.commit(ops).unwrap();
    accumulator.settle(true);
    finish(&mut accumulator, &store, "run-m2", &failure(), 7 * MINUTE);
    let state = &accumulator.snapshot().state;
    assert_eq!(
        (state.consecutive_failures, state.next_attempt_millis),
        (0, None)
    );
    assert!(state.last_run.as_ref().unwrap().failure_class.is_some());
    assert!(!accumulator.manifests_due());
    assert!(accumulator.may_start_run(7 * MINUTE));
    let more: Vec<Candidate> = (0..2)
        .map(|n| manifest(&format!("p{n}"), 8 * MINUTE))
        .collect();
    stage_and_commit(&mut accumulator, &store, more, 8 * MINUTE);
    assert!(
        !accumulator.manifests_due(),
        "two more: half of four is not more"
    );
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![manifest("p2", 9 * MINUTE)],
        9 * MINUTE,
    );
    assert!(accumulator.manifests_due());
}

/// Issue 33 item 5: with `compute_statistics`, a run that changed the table's files makes its
/// statistics due; the `compute_statistics` run (Spark's procedures, then the usual reads)
/// records the files it wrote and ends that. Its failure is recorded and ends it too, without
/// backing the table off. A run that rewrote nothing, or a table without the key, asks for none.
#[test]
fn a_run_that_changed_the_table_makes_its_statistics_due_once() {
    const MINUTE: i64 = 60_000;
    let store = MemoryStore::new();
    let mut with_statistics = (*spec()).clone();
    with_statistics.compute_statistics = true;
    let mut accumulator = Accumulator::load(Arc::new(with_statistics), &store).unwrap();
    /// Three files land and a run claims them, rewriting `rewritten` files.
    fn rewrite(
        accumulator: &mut Accumulator,
        store: &MemoryStore,
        run_id: &str,
        at: i64,
        rewritten: u64,
    ) {
        let files: Vec<Candidate> = ["a", "b", "c"]
            .iter()
            .map(|name| candidate(&format!("t/data/{run_id}{name}.parquet"), 10, at, ""))
            .collect();
        stage_and_commit(accumulator, store, files, at);
        claim_and_commit(accumulator, store, run_id, at);
        let mut outcome = truthful_success(&[], &[]);
        if let RunOutcome::Success { report, .. } = &mut outcome {
            report.result.rewritten_data_files_count = rewritten;
        }
        finish(accumulator, store, run_id, &outcome, at + 1);
    }
    rewrite(&mut accumulator, &store, "r1-", MINUTE, 3);
    assert!(
        accumulator.statistics_due(),
        "the rewrite changed the table"
    );
    assert!(!accumulator.at_rest(MINUTE + 2), "a run is still to come");

    let (ops, ticket) = accumulator
        .begin_claim("s1", Trigger::ComputeStatistics, 2 * MINUTE, true)
        .unwrap();
    assert_eq!(
        ticket.task,
        Task::Maintenance(Maintenance::ComputeStatistics)
    );
    store.commit(ops).unwrap();
    accumulator.settle(true);
    let mut outcome = truthful_success(&[], &[]);
    if let RunOutcome::Success { report, .. } = &mut outcome {
        report.result = Default::default();
        report.output_files.clear();
        report.statistics_files = Some(2);
    }
    finish(&mut accumulator, &store, "s1", &outcome, 2 * MINUTE + 1);
    let state = &accumulator.snapshot().state;
    let last = state.last_run.clone().unwrap();
    assert_eq!(
        (last.succeeded, last.maintenance, last.statistics_files),
        (true, Some(Maintenance::ComputeStatistics), Some(2))
    );
    assert!(
        !accumulator.statistics_due(),
        "computed for what the run left"
    );
    assert!(!state.statistics_due);

    // A rewrite that rewrote nothing changed nothing.
    rewrite(&mut accumulator, &store, "r2-", 3 * MINUTE, 0);
    assert!(!accumulator.statistics_due());

    // A failed statistics run is told and recorded, and holds nothing back.
    rewrite(&mut accumulator, &store, "r3-", 20 * MINUTE, 3);
    assert!(accumulator.statistics_due());
    let (ops, _) = accumulator
        .begin_claim("s2", Trigger::ComputeStatistics, 21 * MINUTE, true)
        .unwrap();
    store.commit(ops).unwrap();
    accumulator.settle(true);
    finish(&mut accumulator, &store, "s2", &failure(), 21 * MINUTE + 1);
    let state = &accumulator.snapshot().state;
    let last = state.last_run.clone().unwrap();
    assert_eq!(
        (last.succeeded, last.maintenance),
        (false, Some(Maintenance::ComputeStatistics))
    );
    assert_eq!(state.consecutive_failures, 0, "no back-off: {state:?}");
    assert_eq!(state.next_attempt_millis, None);
    assert!(!accumulator.statistics_due(), "not again and again");
    assert!(accumulator.may_start_run(21 * MINUTE + 2));

    // Without the key, a changing run asks for no statistics.
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    rewrite(&mut accumulator, &store, "r4-", MINUTE, 3);
    assert!(!accumulator.statistics_due());
    assert!(!accumulator.snapshot().state.statistics_due);
}

/// Issue 33 item 4: a writer that names its delete files like data files (no `-deletes`) has
/// them counted as small data files from their events; the next read of the metadata, which
/// lists data files only, has none of them: they stop counting toward any threshold, and the
/// table's deletes are what the metadata counts.
#[test]
fn a_delete_file_named_like_data_is_corrected_by_the_next_read() {
    const MINUTE: i64 = 60_000;
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let landed = vec![
        candidate("t/data/d=1/20261204_data-1.parquet", 10, MINUTE, "d=1"),
        candidate("t/data/d=1/20261204_delete-1.parquet", 10, MINUTE, "d=1"),
        candidate("t/data/d=1/20261204_delete-2.parquet", 10, MINUTE, "d=1"),
    ];
    stage_and_commit(&mut accumulator, &store, landed, MINUTE);
    assert_eq!(
        accumulator.snapshot().state.pending.files,
        3,
        "all taken for data"
    );
    assert_eq!(accumulator.due(MINUTE), Some(DueReason::Files));

    let (ops, _) = accumulator
        .begin_claim("read-1", Trigger::Reconcile, 3 * MINUTE, true)
        .unwrap();
    store.commit(ops).unwrap();
    accumulator.settle(true);
    let mut read = truthful_success(&[("t/data/d=1/20261204_data-1.parquet", 10)], &[]);
    if let RunOutcome::Success { report, .. } = &mut read {
        report.result = Default::default();
        report.output_files.clear();
        report.deletes = Some(crate::model::report::DeleteRead {
            position_files: 2,
            equality_files: 0,
            deleted_rows: 2,
            data_rows: 100,
        });
    }
    finish(&mut accumulator, &store, "read-1", &read, 3 * MINUTE + 1);
    let state = &accumulator.snapshot().state;
    assert_eq!(state.pending.files, 1, "the data file only: {state:?}");
    assert_eq!(
        state.unconfirmed.files, 2,
        "the delete files count toward nothing"
    );
    assert_eq!(state.deletes.position_files, 2, "counted as what they are");
    assert_eq!(accumulator.due(3 * MINUTE + 2), None);
}

/// Issue 18: `remove_orphan_files` on its schedule: due at once when it never ran, its first
/// run a dry run, the next ones real; each success moves the schedule, a failure does not.
#[test]
fn orphan_removal_starts_with_a_dry_run_and_follows_its_schedule() {
    const HOUR: i64 = 3_600_000;
    let mut scheduled = (*spec()).clone();
    scheduled.remove_orphans_every_millis = Some(24 * HOUR);
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(Arc::new(scheduled), &store).unwrap();
    assert_eq!(accumulator.next_orphan_run(), Some(UnixMillis::MIN));
    let orphan_run = |accumulator: &mut Accumulator, run_id: &str, at: i64, found: u64| {
        let (ops, ticket) = accumulator
            .begin_claim(run_id, Trigger::RemoveOrphans, at, true)
            .unwrap();
        store.commit(ops).unwrap();
        accumulator.settle(true);
        let mut outcome = truthful_success(&[], &[]);
        if let RunOutcome::Success { report, .. } = &mut outcome {
            report.result = Default::default();
            report.output_files.clear();
            report.orphan_files = Some(found);
        }
        finish(accumulator, &store, run_id, &outcome, at + 1_000);
        ticket
    };
    let first = orphan_run(&mut accumulator, "o-1", 10 * HOUR, 3);
    assert_eq!(
        first.task,
        Task::Maintenance(Maintenance::RemoveOrphans { dry_run: true })
    );
    let orphans = accumulator.snapshot().state.orphans;
    assert_eq!((orphans.found, orphans.removed), (Some(3), None));
    assert_eq!(accumulator.next_orphan_run(), Some(34 * HOUR));

    // A failed run (a Spark that cannot list the table's location, say) is told and waits for
    // its next period; it never backs the table off, so compactions go on, and it is not asked
    // again and again.
    let (ops, _) = accumulator
        .begin_claim("o-2", Trigger::RemoveOrphans, 34 * HOUR, true)
        .unwrap();
    store.commit(ops).unwrap();
    accumulator.settle(true);
    finish(
        &mut accumulator,
        &store,
        "o-2",
        &failure(),
        34 * HOUR + 1_000,
    );
    assert_eq!(accumulator.next_orphan_run(), Some(58 * HOUR));
    assert!(accumulator.may_start_run(34 * HOUR + 1_000));
    let state = &accumulator.snapshot().state;
    assert_eq!(
        (state.consecutive_failures, state.next_attempt_millis),
        (0, None)
    );
    assert_eq!(state.orphans.failed_millis, Some(34 * HOUR));
    assert_eq!(state.orphans.last_run_millis, Some(10 * HOUR));
    assert!(state.last_run.as_ref().unwrap().failure_class.is_some());
    // A compaction due meanwhile runs at once.
    stage_and_commit(
        &mut accumulator,
        &store,
        (0..3)
            .map(|n| candidate(&format!("t/data/{n}.parquet"), 50, 34 * HOUR, ""))
            .collect(),
        34 * HOUR + 2_000,
    );
    assert!(accumulator.due(34 * HOUR + 2_000).is_some());

    // A run asked for before the period (over HTTP) that succeeds clears the failure.
    let second = orphan_run(&mut accumulator, "o-3", 35 * HOUR, 3);
    assert_eq!(
        second.task.maintenance(),
        Some(Maintenance::RemoveOrphans { dry_run: false })
    );
    let state = &accumulator.snapshot().state;
    assert_eq!(
        (state.orphans.found, state.orphans.removed),
        (Some(3), Some(3))
    );
    assert_eq!(state.last_run.as_ref().unwrap().orphan_files, Some(3));
    assert_eq!(accumulator.next_orphan_run(), Some(59 * HOUR));
}

/// Issue 18: delete files from events make a table due at `delete_file_threshold`; its run
/// rewrites the data applying them when the counts are unknown, equality deletes exist or
/// many rows are deleted, and merges position deletes alone when few rows are.
#[test]
fn a_table_due_by_deletes_gets_the_cheaper_fix() {
    let mut deleting = (*spec()).clone();
    deleting.deletes = crate::config::DeleteThresholds {
        files: Some(3),
        ratio_ppm: None,
    };
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(Arc::new(deleting), &store).unwrap();
    let delete = |n: u32| Candidate {
        kind: FileKind::Delete,
        ..candidate(&format!("t/data/0000{n}-deletes.parquet"), 900, 1_000, "")
    };
    stage_and_commit(&mut accumulator, &store, vec![delete(1), delete(2)], 1_000);
    assert!(!accumulator.deletes_due());
    stage_and_commit(&mut accumulator, &store, vec![delete(3)], 1_000);
    assert!(accumulator.deletes_due());
    assert_eq!(
        accumulator.snapshot().state.pending.files,
        0,
        "never pending"
    );
    let plan = |accumulator: &mut Accumulator,
                counts: Option<crate::model::state::DeleteCounts>| {
        if let Some(counts) = counts {
            accumulator.snapshot.state.deletes = counts;
        }
        accumulator.deletes_plan(RunStrategy::Binpack)
    };
    let unknown = plan(&mut accumulator, None);
    let applies = |plan: &RunPlan| {
        plan.task
            .rewrite()
            .is_some_and(|rewrite| rewrite.apply_deletes)
    };
    assert!(applies(&unknown));
    assert_eq!(unknown.trigger, Trigger::Deletes);
    let read = crate::model::state::DeleteCounts {
        position_files: 3,
        deleted_rows: 10,
        data_rows: 1_000,
        read_millis: Some(2_000),
        ..Default::default()
    };
    let few = plan(&mut accumulator, Some(read));
    assert_eq!(
        few.task,
        Task::Maintenance(Maintenance::RewritePositionDeletes)
    );
    let many = plan(
        &mut accumulator,
        Some(crate::model::state::DeleteCounts {
            deleted_rows: 400,
            ..read
        }),
    );
    assert!(applies(&many));
    let equality = plan(
        &mut accumulator,
        Some(crate::model::state::DeleteCounts {
            equality_files: 1,
            ..read
        }),
    );
    assert!(applies(&equality));

    // A merge that fails (issue 50) never backs the table off: the next run applies the deletes
    // in a data rewrite instead, until a read of the table starts over.
    plan(&mut accumulator, Some(read));
    let (ops, ticket) = accumulator
        .begin_claim("merge-1", Trigger::Deletes, 3_000, true)
        .unwrap();
    assert_eq!(
        ticket.task,
        Task::Maintenance(Maintenance::RewritePositionDeletes)
    );
    store.commit(ops).unwrap();
    accumulator.settle(true);
    finish(&mut accumulator, &store, "merge-1", &failure(), 4_000);
    let state = &accumulator.snapshot().state;
    assert_eq!(
        (state.consecutive_failures, state.next_attempt_millis),
        (0, None)
    );
    assert!(state.deletes.merge_failed);
    assert!(accumulator.may_start_run(4_000));
    assert!(applies(&plan(&mut accumulator, None)), "a data rewrite now");
    // A native table's deletes are always applied by a data rewrite: it does not merge them.
    let mut native = (*accumulator.spec).clone();
    native.engine = crate::config::EngineChoice::Native;
    let mut native = Accumulator::load(Arc::new(native), &MemoryStore::new()).unwrap();
    assert!(applies(&plan(&mut native, Some(read))));
}

/// Issue 20: every settled run joins the table's history; it keeps `run_history` runs, the
/// newest, failures with their class.
/// The series is sampled from the table's own new state in a commit, not another table's.
#[test]
fn a_commit_is_sampled_from_the_tables_own_state() {
    let state = |files: u64| TableState {
        pending: PendingCounts {
            files,
            bytes: files * 10,
            ..PendingCounts::default()
        },
        ..TableState::default()
    };
    let mut sampler = Sampler::default();
    let mut ops = vec![
        Op::PutTable {
            table: "other".to_string(),
            state: state(9),
        },
        Op::PutTable {
            table: "t".to_string(),
            state: state(4),
        },
    ];
    sample_commit(&mut sampler, "t", &mut ops, 120_000);
    assert_eq!(
        ops.last(),
        Some(&Op::PutSample {
            table: "t".to_string(),
            resolution: crate::model::series::Resolution::Minute,
            slot: 2,
            sample: crate::model::series::Sample(4, 40, 4),
        })
    );
    let mut without = vec![Op::DeleteFile {
        table: "t".to_string(),
        seq: 1,
    }];
    sample_commit(&mut sampler, "t", &mut without, 130_000);
    assert_eq!(without.len(), 1);
}

#[test]
fn settled_runs_make_a_bounded_history() {
    let mut bounded = (*spec()).clone();
    bounded.run_history = 3;
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(Arc::new(bounded), &store).unwrap();
    for n in 0..5 {
        let file = candidate(&format!("t/data/f{n}.parquet"), 10, n * 1_000, "");
        stage_and_commit(&mut accumulator, &store, vec![file], n * 1_000);
        let run_id = format!("run-{n}");
        claim_and_commit(&mut accumulator, &store, &run_id, n * 1_000 + 10);
        let outcome = if n == 3 { failure() } else { success(&[]) };
        finish(&mut accumulator, &store, &run_id, &outcome, n * 1_000 + 20);
    }
    let history: Vec<(u64, String, bool)> = store
        .runs("n.t")
        .unwrap()
        .into_iter()
        .map(|(seq, run)| (seq, run.run_id, run.succeeded))
        .collect();
    assert_eq!(
        history,
        vec![
            (2, "run-2".to_string(), true),
            (3, "run-3".to_string(), false),
            (4, "run-4".to_string(), true),
        ]
    );
}

#[test]
fn a_table_whose_manifests_do_not_merge_is_not_rewritten_over_and_over() {
    let counts = crate::model::state::ManifestCounts {
        known: 30,
        since_read: 0,
        read_millis: Some(0),
        left_by_rewrite: 30,
    };
    assert!(!counts.due(20), "30 are left by the rewrite itself");
    let more = |since_read| crate::model::state::ManifestCounts {
        since_read,
        ..counts
    };
    assert!(!more(10).due(20));
    assert!(
        more(11).due(20),
        "half of max_manifests more since the rewrite"
    );
    let fresh = crate::model::state::ManifestCounts {
        known: 20,
        ..Default::default()
    };
    assert!(!fresh.due(20), "20 is not more than 20");
    assert!(crate::model::state::ManifestCounts { known: 21, ..fresh }.due(20));
}

/// Issue 18: an `auto` table icepack has never read starts with a read of its sort order
/// (a reconcile: nothing rewritten, nothing lost); its runs then sort if it has an order
/// and bin-pack if not, and a failed read waits out the back-off like a failed run.
#[test]
fn an_auto_table_reads_its_order_first_then_sorts_or_bin_packs() {
    const MINUTE: i64 = 60_000;
    let auto_spec = || {
        let mut spec = (*spec()).clone();
        spec.strategy = crate::model::strategy::Strategy::Auto;
        Arc::new(spec)
    };
    let read_with = |order: Option<crate::model::strategy::TableOrder>| {
        let mut outcome = truthful_success(
            &[
                ("t/data/d=1/a.parquet", 10),
                ("t/data/d=1/b.parquet", 10),
                ("t/data/d=1/c.parquet", 10),
            ],
            &[],
        );
        if let RunOutcome::Success { report, .. } = &mut outcome {
            report.result = Default::default();
            report.output_files.clear();
            report.table_order = order;
        }
        outcome
    };
    for (order, expected) in [
        (
            crate::model::strategy::TableOrder::Sorted("id ASC NULLS FIRST".to_string()),
            RunStrategy::Sort(None),
        ),
        (
            crate::model::strategy::TableOrder::Unsorted,
            RunStrategy::Binpack,
        ),
    ] {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(auto_spec(), &store).unwrap();
        let files = ["a", "b", "c"]
            .map(|name| candidate(&format!("t/data/d=1/{name}.parquet"), 10, MINUTE, "d=1"));
        stage_and_commit(&mut accumulator, &store, files.to_vec(), MINUTE);
        let now = 2 * MINUTE;

        // The table is due; its first claim is the read of its order.
        let (ops, read) = accumulator
            .begin_claim("read-1", Trigger::Files, now, false)
            .unwrap();
        assert_eq!(
            (read.trigger, &read.task),
            (Trigger::ReadOrder, &Task::ReadOrder)
        );
        store.commit(ops).unwrap();
        accumulator.settle(true);
        // A failed read: the files stay pending, and the table backs off.
        finish(&mut accumulator, &store, "read-1", &failure(), now);
        let state = &accumulator.snapshot().state;
        assert_eq!((state.pending.files, state.table_order.clone()), (3, None));
        assert!(state.next_attempt_millis.is_some_and(|at| at > now));
        assert!(!accumulator.may_start_run(now));

        let later = now + 10 * MINUTE;
        assert!(accumulator.may_start_run(later));
        let (ops, read) = accumulator
            .begin_claim("read-2", Trigger::Files, later, false)
            .unwrap();
        assert_eq!(read.task, Task::ReadOrder);
        store.commit(ops).unwrap();
        accumulator.settle(true);
        finish(
            &mut accumulator,
            &store,
            "read-2",
            &read_with(Some(order.clone())),
            later,
        );
        let state = &accumulator.snapshot().state;
        assert_eq!(
            state.pending.files, 3,
            "a read rewrites nothing and keeps every file"
        );
        assert_eq!(state.table_order, Some(order.clone()));
        assert!(state.next_attempt_millis.is_none());

        // The run follows, with the strategy the order calls for.
        let (_, run) = accumulator
            .begin_claim("run-1", Trigger::Files, later, false)
            .unwrap();
        assert_eq!(run.task.rewrite().unwrap().strategy, expected, "{order:?}");
    }
}

#[test]
fn a_file_known_from_the_metadata_and_gone_from_it_is_not_kept_by_the_grace() {
    const MINUTE: i64 = 60_000;
    let reconciled_at = 10 * 60 * MINUTE;
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    // A reconcile finds m, committed long ago without an event.
    let (ops, _) = accumulator
        .begin_claim("reconcile-1", Trigger::Reconcile, reconciled_at, true)
        .unwrap();
    store.commit(ops).unwrap();
    accumulator.settle(true);
    let outcome = truthful_success(&[("t/data/d=1/m.parquet", 10)], &[]);
    finish(
        &mut accumulator,
        &store,
        "reconcile-1",
        &outcome,
        reconciled_at,
    );
    assert_eq!(accumulator.snapshot().state.pending.files, 1);
    // Five minutes later a run rewrites it: m is not in the truth, and (committed before the
    // window) not among the committed files either; it is gone all the same.
    claim_and_commit(
        &mut accumulator,
        &store,
        "run-1",
        reconciled_at + 5 * MINUTE,
    );
    let outcome = truthful_success(
        &[("t/data/d=1/out.parquet", 40)],
        &["t/data/d=1/out.parquet"],
    );
    finish(
        &mut accumulator,
        &store,
        "run-1",
        &outcome,
        reconciled_at + 6 * MINUTE,
    );
    let keys: Vec<String> = store
        .files("n.t")
        .unwrap()
        .into_iter()
        .map(|(_, file)| file.key)
        .collect();
    assert_eq!(keys, vec!["t/data/d=1/out.parquet"]);
    assert_eq!(accumulator.snapshot().state.compacted_files, 1);
}

#[test]
fn a_stale_outcome_changes_nothing() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/a.parquet", 10, 100, "")],
        1_000,
    );
    claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    assert!(settle_run(
        accumulator.spec(),
        accumulator.snapshot(),
        &store,
        "run-0",
        &failure(),
        None,
        3_000,
        BACKOFF
    )
    .unwrap()
    .is_none());
}

#[test]
fn backoff_doubles_up_to_its_cap() {
    let delays: Vec<i64> = (1..=8).map(|n| BACKOFF.delay_millis(n) / 60_000).collect();
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60]);
}

mod interleavings {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Arrive(u8),
        Claim,
        Succeed,
        Fail,
        CommitFails(u8),
        /// A purge with every key past the retention.
        Purge,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => any::<u8>().prop_map(Step::Arrive),
            1 => Just(Step::Claim),
            1 => Just(Step::Succeed),
            1 => Just(Step::Fail),
            1 => any::<u8>().prop_map(Step::CommitFails),
            1 => Just(Step::Purge),
        ]
    }

    proptest! {
        /// Pending + claimed never loses or duplicates a file, whatever arrives, runs, fails or
        /// is purged past the retention (a pending or claimed file's key is never forgotten,
        /// so its redelivery stays a duplicate; a compacted one's is, and it counts afresh);
        /// with the compacted count, every file ever counted is accounted for once.
        #[test]
        fn pending_plus_claimed_is_exactly_the_uncompacted_files(steps in prop::collection::vec(step(), 1..60)) {
            let store = MemoryStore::new();
            let mut accumulator = Accumulator::load(spec(), &store).unwrap();
            let mut expected: std::collections::BTreeSet<String> = Default::default();
            let mut claimed: std::collections::BTreeSet<String> = Default::default();
            // Compacted keys still remembered, and how many files were compacted in all.
            let mut compacted: std::collections::BTreeSet<String> = Default::default();
            let mut num_compacted = 0;
            let mut run = 0;
            for (now, step) in steps.into_iter().enumerate() {
                let now = now as i64 * 1_000 + 1_000_000;
                match step {
                    Step::Arrive(n) => {
                        let key = format!("t/data/{}.parquet", n % 32);
                        stage_and_commit(&mut accumulator, &store, vec![candidate(&key, 1 + n as u64, now, "")], now);
                        if !compacted.contains(&key) && !claimed.contains(&key) {
                            expected.insert(key);
                        }
                    }
                    Step::CommitFails(n) => {
                        store.fail_commits(true);
                        stage_and_commit(&mut accumulator, &store, vec![candidate(&format!("t/data/x{n}.parquet"), 1, now, "")], now);
                        store.fail_commits(false);
                    }
                    Step::Claim => {
                        run += 1;
                        if let Some((ops, _)) = accumulator.begin_claim(&format!("run-{run}"), Trigger::Files, now, true) {
                            store.commit(ops).unwrap();
                            accumulator.settle(true);
                            claimed.append(&mut expected);
                        }
                    }
                    Step::Succeed | Step::Fail => {
                        let Some(claim) = accumulator.claim().cloned() else { continue };
                        let outcome = if matches!(step, Step::Succeed) { success(&[]) } else { failure() };
                        finish(&mut accumulator, &store, &claim.run_id, &outcome, now);
                        if matches!(step, Step::Succeed) {
                            num_compacted += claimed.len() as u64;
                            compacted.append(&mut claimed);
                        } else {
                            expected.append(&mut claimed);
                        }
                    }
                    Step::Purge => {
                        let purged = store.purge_seen_before(now + 1).unwrap();
                        prop_assert_eq!(purged.kept_in_log, (expected.len() + claimed.len()) as u64);
                        compacted.clear();
                    }
                }
                let state = &accumulator.snapshot().state;
                prop_assert_eq!(state.pending.files, expected.len() as u64);
                prop_assert_eq!(state.claim.as_ref().map_or(0, |claim| claim.counts.files), claimed.len() as u64);
                let logged: std::collections::BTreeSet<String> = store.files("n.t").unwrap().into_iter().map(|(_, file)| file.key).collect();
                let uncompacted: std::collections::BTreeSet<String> = expected.union(&claimed).cloned().collect();
                prop_assert_eq!(logged, uncompacted);
                prop_assert_eq!(state.compacted_files, num_compacted);
                let reloaded = Accumulator::load(spec(), &store).unwrap();
                prop_assert_eq!(reloaded.snapshot(), accumulator.snapshot());
            }
        }
    }
}

mod truth_reads {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const MINUTE: i64 = 60_000;
    const CLAIMED_AT: i64 = 24 * 60 * MINUTE;

    /// A data file of the simulated table, with absolute times: when its event came (`None`:
    /// it never sent one), when its writer committed it (after the upload; `None`: not yet,
    /// or never) and when it was removed after that (rewritten by the run, deleted).
    #[derive(Debug, Clone)]
    struct WorldFile {
        key: String,
        partition: String,
        size: u64,
        announced: Option<i64>,
        committed: Option<i64>,
        removed: Option<i64>,
    }

    impl WorldFile {
        /// In the table's committed metadata at `time`.
        fn live_at(&self, time: i64) -> bool {
            self.committed.is_some_and(|committed| committed <= time)
                && self.removed.is_none_or(|removed| removed > time)
        }
    }

    #[derive(Debug, Clone)]
    struct World {
        files: Vec<WorldFile>,
        /// A reconcile this long before the claim, if any (it knows some files from metadata).
        earlier_reconcile_minutes: Option<i64>,
        run_minutes: i64,
        rewrite: bool,
        output_size: u64,
    }

    fn world() -> impl Strategy<Value = World> {
        // Minutes: times meet the grace's edge exactly. Half of the files announced within
        // 20 minutes before the claim, committing and removed soon: where the grace decides.
        let announced = (
            prop_oneof![-20i64..0, -50i64..=30],
            prop::option::of(prop_oneof![0i64..=5, 0i64..=30]),
            prop::option::of(prop_oneof![0i64..=5, 0i64..=30]),
            1u64..100,
            0u8..3,
        );
        let metadata_only = (-180i64..=30, prop::option::of(0i64..=60), 1u64..100, 0u8..3);
        (
            prop::collection::vec(announced, 0..16),
            prop::collection::vec(metadata_only, 0..6),
            prop::option::of(1i64..=40),
            0i64..=30,
            any::<bool>(),
            1u64..200,
        )
            .prop_map(
                |(
                    announced,
                    metadata_only,
                    earlier_reconcile_minutes,
                    run_minutes,
                    rewrite,
                    output_size,
                )| {
                    let mut files = Vec::new();
                    for (index, (offset, commit_delay, remove_delay, size, partition)) in
                        announced.into_iter().enumerate()
                    {
                        // Announced at the latest when the run reads the metadata.
                        let offset = if offset > run_minutes {
                            offset % (run_minutes + 1)
                        } else {
                            offset
                        };
                        let announced = CLAIMED_AT + offset * MINUTE;
                        let committed = commit_delay.map(|delay| announced + delay * MINUTE);
                        files.push(WorldFile {
                            key: format!("t/data/d={partition}/e{index}.parquet"),
                            partition: format!("d={partition}"),
                            size,
                            announced: Some(announced),
                            committed,
                            removed: committed
                                .zip(remove_delay)
                                .map(|(committed, delay)| committed + delay * MINUTE),
                        });
                    }
                    for (index, (offset, remove_delay, size, partition)) in
                        metadata_only.into_iter().enumerate()
                    {
                        let committed = CLAIMED_AT + offset * MINUTE;
                        files.push(WorldFile {
                            key: format!("t/data/d={partition}/m{index}.parquet"),
                            partition: format!("d={partition}"),
                            size,
                            announced: None,
                            committed: Some(committed),
                            removed: remove_delay.map(|delay| committed + delay * MINUTE),
                        });
                    }
                    World {
                        files,
                        earlier_reconcile_minutes,
                        run_minutes,
                        rewrite,
                        output_size,
                    }
                },
            )
    }

    /// The report of a truth read at `time` for a claim made at `started`: the small files
    /// live then, and the files committed since the report's window began.
    fn report_at(files: &[WorldFile], started: i64, time: i64) -> RunOutcome {
        let since = committed_since_millis(started);
        let truth: Vec<(&str, u64)> = files
            .iter()
            .filter(|file| file.live_at(time) && file.size < 100)
            .map(|file| (file.key.as_str(), file.size))
            .collect();
        let committed: Vec<&str> = files
            .iter()
            .filter(|file| {
                file.committed
                    .is_some_and(|committed| since <= committed && committed <= time)
            })
            .map(|file| file.key.as_str())
            .collect();
        truthful_success(&truth, &committed)
    }

    fn announce(accumulator: &mut Accumulator, store: &MemoryStore, files: &[&WorldFile]) {
        for file in files {
            let at = file.announced.expect("announced");
            stage_and_commit(
                accumulator,
                store,
                vec![candidate(&file.key, file.size, at, &file.partition)],
                at,
            );
        }
    }

    fn logged(store: &MemoryStore) -> BTreeSet<String> {
        store
            .files("n.t")
            .unwrap()
            .into_iter()
            .map(|(_, file)| file.key)
            .collect()
    }

    proptest! {
        /// After a truth read: every file the metadata has is pending; every file announced
        /// within the grace (or after the claim) whose writer has not committed yet is pending;
        /// nothing else is — not a removed file, not an orphan past the grace, not a file known
        /// from the metadata and gone from it. A claimed file counts as compacted only when it
        /// left the pending files, and the pending counts are the sums over the pending files.
        #[test]
        fn a_truth_read_keeps_the_live_files_and_the_writers_still_committing(mut world in world()) {
            let store = MemoryStore::new();
            let mut accumulator = Accumulator::load(spec(), &store).unwrap();
            let read_at = CLAIMED_AT + world.run_minutes * MINUTE;
            // The run's own output, committed when it finished (a reconcile writes none).
            if world.rewrite {
                world.files.push(WorldFile {
                    key: "t/data/d=0/out.parquet".to_string(),
                    partition: "d=0".to_string(),
                    size: world.output_size,
                    announced: None,
                    committed: Some(read_at),
                    removed: None,
                });
            }
            let mut by_announcement: Vec<&WorldFile> = world.files.iter().filter(|file| file.announced.is_some()).collect();
            by_announcement.sort_by_key(|file| file.announced);
            let between = |from: i64, to: i64| -> Vec<&WorldFile> {
                by_announcement.iter().copied().filter(|file| file.announced >= Some(from) && file.announced < Some(to)).collect()
            };

            let mut announced_from = i64::MIN;
            if let Some(minutes) = world.earlier_reconcile_minutes {
                let at = CLAIMED_AT - minutes * MINUTE;
                announce(&mut accumulator, &store, &between(announced_from, at));
                claim_and_reconcile(&mut accumulator, &store, at, &report_at(&world.files, at, at));
                announced_from = at;
            }
            announce(&mut accumulator, &store, &between(announced_from, CLAIMED_AT));
            let trigger = if world.rewrite { Trigger::Files } else { Trigger::Reconcile };
            let (ops, _) = accumulator.begin_claim("run-1", trigger, CLAIMED_AT, true).expect("no run in flight");
            store.commit(ops).unwrap();
            accumulator.settle(true);
            let claimed = logged(&store);
            let compacted_before = accumulator.snapshot().state.compacted_files;
            announce(&mut accumulator, &store, &between(CLAIMED_AT, i64::MAX));
            finish(&mut accumulator, &store, "run-1", &report_at(&world.files, CLAIMED_AT, read_at), read_at);

            let pending = logged(&store);
            for file in &world.files {
                let in_truth = file.live_at(read_at) && file.size < 100;
                let writer_still_committing = file.announced.is_some_and(|announced| {
                    announced >= read_at - RECONCILE_GRACE_MILLIS || announced >= CLAIMED_AT
                }) && file.committed.is_none_or(|committed| committed > read_at);
                let is_pending = pending.contains(&file.key);
                if in_truth {
                    prop_assert!(is_pending, "a live small file is lost: {:?}", file);
                } else if writer_still_committing {
                    prop_assert!(is_pending, "a file within the grace, not committed yet, is dropped: {:?}", file);
                } else {
                    prop_assert!(!is_pending, "removed, orphaned past the grace, or not small, yet pending: {:?}", file);
                }
            }
            let known: BTreeSet<String> = world.files.iter().map(|file| file.key.clone()).collect();
            prop_assert!(pending.is_subset(&known), "nothing is invented");

            let compacted = accumulator.snapshot().state.compacted_files - compacted_before;
            let left = claimed.difference(&pending).count() as u64;
            prop_assert_eq!(compacted, if world.rewrite { left } else { 0 }, "compacted: the claimed files that left the pending files, and only those");

            // The pending counts are the sums over the pending files, as the world has them.
            let entries: Vec<FileEntry> = store.files("n.t").unwrap().into_iter().map(|(_, entry)| entry).collect();
            let by_key: BTreeMap<&str, &WorldFile> = world.files.iter().map(|file| (file.key.as_str(), file)).collect();
            let mut partitions: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
            for entry in &entries {
                let file = by_key[entry.key.as_str()];
                prop_assert_eq!((entry.size, &entry.partition), (file.size, &file.partition));
                if entry.source == FileSource::Unconfirmed {
                    // Claimed, announced before the read, and not in the table it read: it waits
                    // for the metadata, counting toward nothing.
                    prop_assert!(!(file.live_at(read_at) && file.size < 100), "{:?}", file);
                    prop_assert!(file.announced.is_some_and(|at| at < CLAIMED_AT), "{:?}", file);
                    continue;
                }
                let counts = partitions.entry(entry.partition.clone()).or_default();
                counts.0 += 1;
                counts.1 += entry.size;
                counts.2 += u64::from(entry.source == FileSource::Metadata);
            }
            let snapshot = accumulator.snapshot();
            let counted: Vec<&FileEntry> = entries.iter().filter(|entry| entry.source != FileSource::Unconfirmed).collect();
            prop_assert_eq!(snapshot.state.pending.files, counted.len() as u64);
            prop_assert_eq!(snapshot.state.pending.bytes, counted.iter().map(|entry| entry.size).sum::<u64>());
            prop_assert_eq!(snapshot.state.unconfirmed.files, (entries.len() - counted.len()) as u64);
            let recorded: BTreeMap<String, (u64, u64, u64)> = snapshot
                .partitions
                .iter()
                .map(|(partition, counts)| (partition.clone(), (counts.files, counts.bytes, counts.metadata_files)))
                .collect();
            prop_assert_eq!(recorded, partitions);
            let reloaded = Accumulator::load(spec(), &store).unwrap();
            prop_assert_eq!(reloaded.snapshot(), snapshot, "durable");

            // Late events of everything announced or in the metadata count nothing again.
            let late: Vec<Candidate> = world
                .files
                .iter()
                .filter(|file| file.announced.is_some() || (file.live_at(read_at) && file.size < 100))
                .map(|file| candidate(&file.key, file.size, read_at, &file.partition))
                .collect();
            let staged = stage_and_commit(&mut accumulator, &store, late, read_at);
            prop_assert_eq!(staged.num_counted, 0);
        }
    }

    fn claim_and_reconcile(
        accumulator: &mut Accumulator,
        store: &MemoryStore,
        at: i64,
        outcome: &RunOutcome,
    ) {
        let (ops, _) = accumulator
            .begin_claim("reconcile-0", Trigger::Reconcile, at, true)
            .expect("no run in flight");
        store.commit(ops).unwrap();
        accumulator.settle(true);
        finish(accumulator, store, "reconcile-0", outcome, at);
    }
}

#[test]
fn a_table_measures_its_run_cost_from_its_first_attempt_successes() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let mut run = |number: u32, outcome: RunOutcome| {
        let files = (0..3)
            .map(|i| candidate(&format!("t/data/d=1/{number}-{i}.parquet"), 10, 0, "d=1"))
            .collect();
        stage_and_commit(&mut accumulator, &store, files, 1_000);
        let run_id = format!("run-{number}");
        claim_and_commit(&mut accumulator, &store, &run_id, 2_000);
        finish(&mut accumulator, &store, &run_id, &outcome, 3_000);
        accumulator.snapshot().state.run_costs.clone()
    };
    let took = |millis: u64, attempts: u32| match success(&[]) {
        RunOutcome::Success { report, .. } => RunOutcome::Success {
            report,
            duration_millis: millis,
            attempts,
        },
        other => other,
    };
    assert_eq!(run(1, took(40_000, 1)).median_millis(), Some(40_000));
    // A retried run's duration holds its retry waits, a failure rewrote nothing: neither counts.
    assert_eq!(run(2, took(95_000, 2)).recent_millis, vec![40_000]);
    assert_eq!(run(3, failure()).recent_millis, vec![40_000]);
    for (number, millis) in [(4, 1_000), (5, 2_000), (6, 3_000), (7, 900_000)] {
        run(number, took(millis, 1));
    }
    // The median of the last five: one slow run does not move it.
    let costs = run(8, took(1_500, 1));
    assert_eq!(
        costs.recent_millis,
        vec![1_000, 2_000, 3_000, 900_000, 1_500]
    );
    assert_eq!(costs.median_millis(), Some(2_000));
    // Kept in the table's durable record.
    let reloaded = Accumulator::load(spec(), &store).unwrap();
    assert_eq!(reloaded.snapshot().state.run_costs, costs);
}

/// Issue 31 item 8: what a table counts while its run's settlement is prepared off the actor
/// ends as if it had been counted right after the settlement. A file the truth has, a file
/// committed and gone since, the run's own output: not pending twice, not pending when gone;
/// any other file: pending; a manifest announced before the settlement's read of the metadata:
/// in that read already. For a run with a truth read, one without, and a failed one.
#[test]
fn files_counted_while_a_settlement_is_prepared_end_as_if_counted_after_it() {
    let claimed_at = RECONCILE_GRACE_MILLIS + 2_000;
    let settled_at = claimed_at + 1_000;
    let mut with_truth = truthful_success(
        &[
            ("t/data/d=1/a.parquet", 10),
            ("t/data/d=2/t1.parquet", 8),
            ("t/data/d=1/out.parquet", 40),
        ],
        &["t/data/d=1/gone.parquet", "t/data/d=1/out.parquet"],
    );
    if let RunOutcome::Success { report, .. } = &mut with_truth {
        report.manifest_count = Some(2);
    }
    let meanwhile = || {
        let mut manifest = candidate("t/metadata/early.avro", 1, settled_at - 10, "");
        manifest.kind = FileKind::Manifest;
        let mut late_manifest = candidate("t/metadata/late.avro", 1, settled_at + 10, "");
        late_manifest.kind = FileKind::Manifest;
        vec![
            candidate("t/data/d=3/new.parquet", 10, settled_at - 50, "d=3"),
            candidate("t/data/d=2/t1.parquet", 8, settled_at - 40, "d=2"),
            candidate("t/data/d=1/gone.parquet", 9, settled_at - 30, "d=1"),
            candidate("t/data/d=1/out.parquet", 40, settled_at - 20, "d=1"),
            manifest,
            late_manifest,
        ]
    };
    for outcome in [with_truth, success(&["t/data/d=1/out.parquet"]), failure()] {
        let world = || {
            let store = MemoryStore::new();
            let mut accumulator = Accumulator::load(spec(), &store).unwrap();
            stage_and_commit(
                &mut accumulator,
                &store,
                vec![
                    candidate("t/data/d=1/a.parquet", 10, 100, "d=1"),
                    candidate("t/data/d=2/b.parquet", 10, 100, "d=2"),
                ],
                1_000,
            );
            claim_and_commit(&mut accumulator, &store, "run-1", claimed_at);
            stage_and_commit(
                &mut accumulator,
                &store,
                vec![candidate(
                    "t/data/d=2/c.parquet",
                    10,
                    claimed_at + 100,
                    "d=2",
                )],
                claimed_at + 100,
            );
            (store, accumulator)
        };
        // As before: settled, then counted.
        let (after_store, mut after) = world();
        finish(&mut after, &after_store, "run-1", &outcome, settled_at);
        stage_and_commit(&mut after, &after_store, meanwhile(), settled_at);
        // Counted while the settlement is prepared from the table as it was at the run's end.
        let (store, mut accumulator) = world();
        let base = accumulator.begin_settlement(accumulator.settlement_reserve(&outcome));
        stage_and_commit(&mut accumulator, &store, meanwhile(), settled_at);
        let settlement = prepare_settlement(
            &spec(),
            &base,
            &store,
            "run-1",
            &outcome,
            None,
            settled_at,
            BACKOFF,
        )
        .unwrap()
        .unwrap();
        let (ops, change) = accumulator
            .finish_settlement(settlement, settled_at)
            .unwrap();
        store.commit(ops).unwrap();
        accumulator.adopt(change);

        let logged = |store: &MemoryStore| {
            let files = store.files("n.t").unwrap();
            for (seq, file) in &files {
                let seen = store.seen_entries(&[(&file.bucket, &file.key)]).unwrap();
                assert_eq!(seen[0].as_ref().unwrap().seq, Some(*seq), "{file:?}");
            }
            let mut files: Vec<_> = files
                .into_iter()
                .map(|(_, file)| (file.key, file.size, file.source, file.partition))
                .collect();
            files.sort();
            files
        };
        let (expected, state) = (after.snapshot(), accumulator.snapshot());
        assert_eq!(logged(&store), logged(&after_store), "{outcome:?}");
        assert_eq!(state.state.pending, expected.state.pending, "{outcome:?}");
        assert_eq!(state.partitions, expected.partitions, "{outcome:?}");
        assert_eq!(
            state.state.manifests, expected.state.manifests,
            "{outcome:?}"
        );
        assert_eq!(state.state.last_run, expected.state.last_run, "{outcome:?}");
        assert_eq!(state.state.compacted_files, expected.state.compacted_files);
        assert!(state.state.claim.is_none());
        assert_eq!(
            Accumulator::load(spec(), &store).unwrap().snapshot(),
            state,
            "durable"
        );
        let output = store
            .seen_entries(&[("b", "t/data/d=1/out.parquet")])
            .unwrap();
        let expected_output = after_store
            .seen_entries(&[("b", "t/data/d=1/out.parquet")])
            .unwrap();
        assert_eq!(
            output[0].as_ref().map(|entry| entry.seq.is_some()),
            expected_output[0].as_ref().map(|entry| entry.seq.is_some()),
        );
    }
}

/// A settlement prepared from a state that was replaced meanwhile, or whose rebuilt log needs
/// numbers the files counted meanwhile took, is not applied: it is prepared again.
#[test]
fn a_stale_settlement_is_refused() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/a.parquet", 10, 100, "")],
        1_000,
    );
    claim_and_commit(&mut accumulator, &store, "run-1", 2_000);
    let outcome = truthful_success(
        &[
            ("t/data/a.parquet", 10),
            ("t/data/x.parquet", 10),
            ("t/data/y.parquet", 10),
        ],
        &[],
    );
    // Too small a reserve: the new file takes a number the rebuilt log uses.
    let base = accumulator.begin_settlement(1);
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate("t/data/new.parquet", 10, 2_500, "")],
        2_500,
    );
    let prepared = || {
        prepare_settlement(
            &spec(),
            &base,
            &store,
            "run-1",
            &outcome,
            None,
            3_000,
            BACKOFF,
        )
        .unwrap()
        .unwrap()
    };
    assert_eq!(
        accumulator
            .finish_settlement(prepared(), 3_000)
            .unwrap_err(),
        SettlementStale::Reserve(3)
    );
    // No settlement in progress (a reload replaced the state): refused too.
    assert_eq!(
        accumulator
            .finish_settlement(prepared(), 3_000)
            .unwrap_err(),
        SettlementStale::Replaced
    );
}

/// Issue 33: files uploaded and never committed (a failed attempt's outputs, a writer's failed
/// commit) kept a table due, and runs claimed them again and again, rewriting nothing, for the
/// writers' grace. After one read of the metadata they count toward nothing, their events are
/// duplicates, a run that rewrote nothing backs the table off, and once their grace is over one
/// read drops them.
#[test]
fn files_never_committed_do_not_keep_a_table_due_after_one_read() {
    const MINUTE: i64 = 60_000;
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let claimed_at = RECONCILE_GRACE_MILLIS + 10 * MINUTE;
    // One real small file and four leftovers of a failed attempt, announced just before.
    let ghosts: Vec<String> = (0..4)
        .map(|i| format!("t/data/d=1/attempt-{i}.parquet"))
        .collect();
    let mut landed = vec![candidate(
        "t/data/d=1/real.parquet",
        10,
        claimed_at - MINUTE,
        "d=1",
    )];
    landed.extend(
        ghosts
            .iter()
            .map(|key| candidate(key, 10, claimed_at - MINUTE, "d=1")),
    );
    stage_and_commit(&mut accumulator, &store, landed, claimed_at - MINUTE);
    // And one just uploaded when the run claims it: its writer is most likely committing.
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![candidate(
            "t/data/d=1/fresh.parquet",
            10,
            claimed_at - 5_000,
            "d=1",
        )],
        claimed_at - 5_000,
    );
    assert!(accumulator.due(claimed_at).is_some());
    claim_and_commit(&mut accumulator, &store, "run-1", claimed_at);
    // The run rewrites nothing (one real file is not worth it); the metadata has the real file
    // and none of the leftovers.
    let nothing = match truthful_success(&[("t/data/d=1/real.parquet", 10)], &[]) {
        RunOutcome::Success {
            mut report,
            duration_millis,
            attempts,
        } => {
            report.result = Default::default();
            report.output_files.clear();
            report.left = vec![crate::model::report::LeftPartition {
                partition: Some("d=1".to_string()),
                reason: "1 small files of 10 bytes: fewer than min_input_files".to_string(),
            }];
            RunOutcome::Success {
                report,
                duration_millis,
                attempts,
            }
        }
        other => other,
    };
    let read_at = claimed_at + 20_000;
    finish(&mut accumulator, &store, "run-1", &nothing, read_at);
    let state = accumulator.snapshot().state.clone();
    assert_eq!(
        state.pending.files, 2,
        "the real file, and the fresh one still pending"
    );
    assert_eq!(
        state.unconfirmed.files, 4,
        "the leftovers wait for the metadata"
    );
    assert_eq!(state.empty_runs, 1);
    let run = state.last_run.as_ref().unwrap();
    assert!(run.succeeded);
    assert_eq!(
        run.left[0].partition.as_deref(),
        Some("d=1"),
        "the run's record says which partition it left, and why"
    );
    assert!(
        !accumulator.may_start_run(read_at + 1),
        "a run that rewrote nothing backs the table off"
    );
    assert_ne!(
        accumulator.due(read_at + 1),
        Some(DueReason::Files),
        "the leftovers count toward no threshold (min_files 3)"
    );
    // Their events again (at-least-once delivery): duplicates.
    let again: Vec<Candidate> = ghosts
        .iter()
        .map(|key| candidate(key, 10, read_at, "d=1"))
        .collect();
    assert_eq!(
        stage_and_commit(&mut accumulator, &store, again, read_at).num_counted,
        0
    );
    // Once their grace is over, one read drops what the table still lacks.
    let read_again = accumulator.unconfirmed_read_at().unwrap();
    assert_eq!(read_again, read_at + RECONCILE_GRACE_MILLIS);
    let (ops, _) = accumulator
        .begin_claim("reconcile-1", Trigger::Reconcile, read_again, true)
        .expect("no run in flight");
    store.commit(ops).unwrap();
    accumulator.settle(true);
    finish(
        &mut accumulator,
        &store,
        "reconcile-1",
        &truthful_success(&[("t/data/d=1/real.parquet", 10)], &[]),
        read_again + MINUTE,
    );
    let state = &accumulator.snapshot().state;
    assert_eq!(state.unconfirmed.files, 0);
    assert_eq!(state.pending.files, 1, "fresh was never committed either");
    assert_eq!(accumulator.unconfirmed_read_at(), None);
}

/// Issue 33: icepack knows its own attempts' outputs. A native run killed before its commit
/// leaves its Parquet files uploaded (`icepack-{run id}-…`); their events arrive, the next run
/// claims them, and the metadata read after it does not have them. However fresh their events,
/// they are dropped, not kept pending for a writer that will never commit them.
#[test]
fn an_abandoned_attempts_outputs_never_stay_pending() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    let claimed_at = RECONCILE_GRACE_MILLIS + 600_000;
    let abandoned = "t/data/d=1/icepack-run-0-1f2e3d4c-00000.parquet";
    stage_and_commit(
        &mut accumulator,
        &store,
        vec![
            candidate("t/data/d=1/a.parquet", 10, claimed_at - 9_000, "d=1"),
            candidate("t/data/d=1/b.parquet", 10, claimed_at - 8_000, "d=1"),
            candidate(abandoned, 10, claimed_at - 2_000, "d=1"),
        ],
        claimed_at - 2_000,
    );
    claim_and_commit(&mut accumulator, &store, "run-1", claimed_at);
    // The run merged a and b into its own output; the table has that output alone.
    let merged = truthful_success(
        &[("t/data/d=1/icepack-run-1-00aa11bb-00000.parquet", 20)],
        &["t/data/d=1/a.parquet", "t/data/d=1/b.parquet"],
    );
    finish(
        &mut accumulator,
        &store,
        "run-1",
        &merged,
        claimed_at + 3_000,
    );
    let state = &accumulator.snapshot().state;
    assert_eq!(state.pending.files, 1, "the run's committed output only");
    assert_eq!(state.unconfirmed.files, 0, "the abandoned output is gone");
    let keys: Vec<String> = store
        .files(&spec().table)
        .unwrap()
        .into_iter()
        .map(|(_, file)| file.key)
        .collect();
    assert!(!keys.iter().any(|key| key == abandoned), "{keys:?}");
}

#[test]
fn a_preview_is_the_claim_a_run_would_take_and_claims_nothing() {
    let store = MemoryStore::new();
    let mut accumulator = Accumulator::load(spec(), &store).unwrap();
    // Two files: not due yet; the preview is a manual run over the whole table.
    let files = |range: std::ops::Range<usize>| -> Vec<Candidate> {
        range
            .map(|index| {
                let partition = format!("d={}", index % 2);
                candidate(
                    &format!("t/data/{partition}/{index}.parquet"),
                    10,
                    100,
                    &partition,
                )
            })
            .collect()
    };
    stage_and_commit(&mut accumulator, &store, files(0..2), 1_000);
    let (ticket, due) = accumulator.preview(2_000).expect("no run in flight");
    assert!(!due);
    assert_eq!(ticket.trigger, Trigger::Manual);
    assert!(ticket.partitions().is_empty(), "{:?}", ticket.task);
    assert_eq!(ticket.files, 2);

    // Due (past twice its max-wait): the preview is the due run, the ticket `begin_claim`
    // hands the pool.
    stage_and_commit(&mut accumulator, &store, files(2..4), 3_000);
    let before = accumulator.snapshot().clone();
    let (preview, due) = accumulator.preview(200_000).unwrap();
    assert!(due);
    assert_eq!(accumulator.snapshot(), &before, "a preview changes nothing");
    assert!(!accumulator.has_staged_change());
    let (ops, claimed) = accumulator
        .begin_claim("run-1", Trigger::Files, 200_000, false)
        .unwrap();
    assert_eq!(claimed.partitions(), ["d=0", "d=1"]);
    assert_eq!(
        ClaimTicket {
            run_id: claimed.run_id.clone(),
            nonce: claimed.nonce.clone(),
            ..preview
        },
        claimed
    );
    store.commit(ops).unwrap();
    accumulator.settle(true);
    assert_eq!(accumulator.preview(201_000), None, "a run is in flight");
}
