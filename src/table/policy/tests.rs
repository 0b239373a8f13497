use super::*;
use proptest::prelude::*;

const MIB: u64 = 1024 * 1024;

#[test]
fn runs_commit_per_group_after_a_lost_race_unless_the_table_says() {
    assert!(!commits_per_group(None, None), "one snapshot a run");
    assert!(commits_per_group(None, Some(FailureClass::CommitConflict)));
    for other in FailureClass::ALL
        .into_iter()
        .filter(|class| *class != FailureClass::CommitConflict)
    {
        assert!(!commits_per_group(None, Some(other)), "{other:?}");
    }
    for class in [None, Some(FailureClass::CommitConflict)] {
        assert!(commits_per_group(Some(true), class));
        assert!(!commits_per_group(Some(false), class), "set, it is kept");
    }
}

fn thresholds() -> Thresholds {
    Thresholds {
        small_file_bytes: 64 * MIB,
        min_files: 10,
        min_total_bytes: 256 * MIB,
        max_wait_millis: Some(120 * 60_000),
    }
}

fn pending(files: u64, bytes: u64, oldest: Option<i64>) -> PendingCounts {
    PendingCounts {
        files,
        bytes,
        oldest_event_millis: oldest,
        newest_event_millis: oldest,
    }
}

#[test]
fn nothing_pending_is_never_due() {
    assert_eq!(
        due_reason(&pending(0, 0, None), &thresholds(), i64::MAX),
        None
    );
}

#[test]
fn files_threshold_is_inclusive() {
    assert_eq!(due_reason(&pending(9, 9, Some(0)), &thresholds(), 1), None);
    assert_eq!(
        due_reason(&pending(10, 10, Some(0)), &thresholds(), 1),
        Some(DueReason::Files)
    );
}

#[test]
fn bytes_threshold_is_inclusive() {
    assert_eq!(
        due_reason(&pending(2, 256 * MIB, Some(0)), &thresholds(), 1),
        Some(DueReason::Bytes)
    );
    assert_eq!(
        due_reason(&pending(2, 256 * MIB - 1, Some(0)), &thresholds(), 1),
        None
    );
}

#[test]
fn max_wait_fires_at_the_deadline_and_not_before() {
    let waiting = pending(1, 1, Some(1_000));
    let deadline = 1_000 + 120 * 60_000;
    assert_eq!(max_wait_deadline(&waiting, &thresholds()), Some(deadline));
    assert_eq!(due_reason(&waiting, &thresholds(), deadline - 1), None);
    assert_eq!(
        due_reason(&waiting, &thresholds(), deadline),
        Some(DueReason::MaxWait)
    );
}

#[test]
fn zero_max_wait_disables_the_time_threshold() {
    let disabled = Thresholds {
        max_wait_millis: None,
        ..thresholds()
    };
    let waiting = pending(1, 1, Some(0));
    assert_eq!(max_wait_deadline(&waiting, &disabled), None);
    assert_eq!(due_reason(&waiting, &disabled, i64::MAX), None);
}

fn partitions(counts: &[(&str, u64, u64)]) -> BTreeMap<String, PartitionCounts> {
    counts
        .iter()
        .map(|(path, files, bytes)| {
            (
                path.to_string(),
                PartitionCounts {
                    files: *files,
                    bytes: *bytes,
                    oldest_event_millis: Some(0),
                    ..Default::default()
                },
            )
        })
        .collect()
}

const RULE: RewriteRule = RewriteRule {
    min_input_files: 10,
    target_file_bytes: 512 * MIB,
};

#[test]
fn only_partitions_worth_it_are_rewritten() {
    // 12 + 6 small files and one alone: the table is due by files; without a cost model
    // only the 12-file partition is rewritten, with one every partition it can improve
    // (its cost is paid once), `min-input-files` down to 2.
    let parts = partitions(&[("d=1", 12, 12), ("d=2", 6, 6), ("d=3", 1, 1)]);
    assert_eq!(
        table_decision(
            &pending(19, 19, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            1
        ),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["d=1".to_string()],
            min_input_files: 10,
            joining: vec![]
        }
    );
    // Paced, a run takes every partition it can improve.
    let costed = Pacing {
        mode: PacingMode::Settle,
        ..Pacing::OFF
    };
    assert_eq!(
        table_decision(
            &pending(19, 19, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &costed,
            1
        ),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["d=1".to_string(), "d=2".to_string()],
            min_input_files: 2,
            joining: vec![]
        }
    );
    // The 6 left behind: not due until the partition qualifies.
    let parts = partitions(&[("d=2", 6, 6)]);
    assert_eq!(
        table_decision(
            &pending(6, 6, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            1
        ),
        Decision::NotDue
    );
    let parts = partitions(&[("d=2", 9, 9), ("d=3", 1, 1)]);
    assert_eq!(
        table_decision(
            &pending(10, 10, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &costed,
            1
        ),
        Decision::NotDue,
        "ten pending, but the one alone cannot be improved and counts toward no threshold"
    );
}

#[test]
fn one_file_in_each_of_many_partitions_starts_no_run() {
    let parts: Vec<(String, u64, u64)> = (0..40).map(|day| (format!("d={day}"), 1, 1)).collect();
    let parts = partitions(
        &parts
            .iter()
            .map(|(p, f, b)| (p.as_str(), *f, *b))
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        table_decision(
            &pending(40, 40, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            1
        ),
        Decision::NotDue
    );
}

#[test]
fn a_partition_alone_can_make_the_table_due_and_max_wait_rewrites_pairs() {
    let lax = Thresholds {
        min_files: 100,
        ..thresholds()
    };
    let parts = partitions(&[("d=1", 10, 10), ("d=2", 3, 3)]);
    assert_eq!(
        table_decision(
            &pending(13, 13, Some(0)),
            &parts,
            &lax,
            &RULE,
            &Pacing::OFF,
            1
        ),
        Decision::Due {
            reason: DueReason::Partition,
            partitions: vec!["d=1".to_string()],
            min_input_files: 10,
            joining: vec![]
        }
    );
    let parts = partitions(&[("d=1", 1, 1), ("d=2", 3, 3)]);
    let late = 120 * 60_000 + 1;
    assert_eq!(
        table_decision(
            &pending(4, 4, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            late
        ),
        Decision::Due {
            reason: DueReason::MaxWait,
            partitions: vec!["d=2".to_string()],
            min_input_files: 2,
            joining: vec![]
        }
    );
    // Two files holding a target file's worth: rewritten whatever their number.
    let parts = partitions(&[("d=1", 2, 600 * MIB)]);
    assert!(matches!(
        table_decision(
            &pending(2, 600 * MIB, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            1
        ),
        Decision::Due {
            reason: DueReason::Bytes,
            ..
        }
    ));
}

#[test]
fn max_wait_is_judged_per_partition() {
    // A stale single file in an old partition must not make every new pair a max-wait run.
    let mut parts = partitions(&[("d=old", 1, 1)]);
    parts.insert(
        "d=new".to_string(),
        PartitionCounts {
            files: 2,
            bytes: 2,
            oldest_event_millis: Some(100 * 60_000),
            ..Default::default()
        },
    );
    let now = 121 * 60_000;
    assert_eq!(
        table_decision(
            &pending(3, 3, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            now
        ),
        Decision::NotDue
    );
    assert_eq!(
        next_max_wait_deadline(&parts, &thresholds(), now),
        Some(220 * 60_000)
    );
    assert_eq!(
        table_decision(
            &pending(3, 3, Some(0)),
            &parts,
            &thresholds(),
            &RULE,
            &Pacing::OFF,
            220 * 60_000
        ),
        Decision::Due {
            reason: DueReason::MaxWait,
            partitions: vec!["d=new".to_string()],
            min_input_files: 2,
            joining: vec![]
        }
    );
    assert_eq!(
        next_max_wait_deadline(&parts, &thresholds(), 220 * 60_000),
        None,
        "no deadline in the past"
    );
}

/// The shipped pacing (`pacing = "settle"` with the default keys), resolved as a table
/// that has never run resolves it.
fn default_pacing() -> Pacing {
    crate::config::TableSettings::default()
        .pacing()
        .resolve(None)
}

#[test]
fn by_default_a_crossed_threshold_runs_once_files_stop_landing() {
    let pacing = default_pacing();
    assert_eq!(pacing.mode, PacingMode::Settle);
    let minute = 60_000;
    // Twelve small files over min_files 10, one a minute: the settle window's cap (five
    // minutes after the oldest) has passed when the tenth lands, so the run starts then.
    let twelve: Vec<i64> = (0..12).map(|i| i * minute).collect();
    let parts = BTreeMap::from([("d=1".to_string(), landed(&twelve[..10]))]);
    assert!(matches!(
        decide(&parts, &pacing, 9 * minute),
        Decision::Due {
            reason: DueReason::Files,
            ..
        }
    ));
    let parts = BTreeMap::from([("d=1".to_string(), landed(&twelve))]);
    assert!(matches!(
        decide(&parts, &pacing, 11 * minute),
        Decision::Due {
            reason: DueReason::Files,
            ..
        }
    ));
    // Twelve files at once: a minute of quiet, then the run — not the cost model's hours.
    let burst = BTreeMap::from([("d=1".to_string(), landed(&[0; 12]))]);
    assert!(matches!(
        decide(&burst, &pacing, 30_000),
        Decision::Waiting {
            wait: Wait::Settling,
            until: 60_000,
            ..
        }
    ));
    assert!(matches!(
        decide(&burst, &pacing, 60_000),
        Decision::Due { .. }
    ));
    // Three files, under every threshold: a run at max-wait, not later.
    let three = BTreeMap::from([("d=1".to_string(), landed(&[0, minute, 2 * minute]))]);
    assert_eq!(decide(&three, &pacing, 120 * minute - 1), Decision::NotDue);
    // The accumulator wakes when the partition goes quiet, then at max-wait.
    let wake = |at| next_wake(&Decision::NotDue, &three, &thresholds(), &pacing, at);
    assert_eq!(wake(10 * minute), Some(17 * minute));
    assert_eq!(wake(17 * minute), Some(120 * minute));
    assert!(matches!(
        decide(&three, &pacing, 120 * minute),
        Decision::Due {
            reason: DueReason::MaxWait,
            ..
        }
    ));
}

fn landed(times_millis: &[i64]) -> PartitionCounts {
    let mut counts = PartitionCounts::default();
    for at in times_millis {
        counts.add_file(MIB, *at);
    }
    counts
}

const PACED: Pacing = Pacing {
    mode: PacingMode::Cost,
    file_fix_value_millis: 0,
    run_cost_millis: 90_000,
    file_hour_cost_millis: 40_000,
    settle_millis: 60_000,
    settle_max_millis: 300_000,
    quiet_millis: 0,
    remerge_percent: 0,
    fragment_percent: 0,
};

fn decide(parts: &BTreeMap<String, PartitionCounts>, pacing: &Pacing, now: i64) -> Decision {
    let mut totals = PendingCounts::default();
    for counts in parts.values() {
        totals.files += counts.files;
        totals.bytes += counts.bytes;
    }
    totals.oldest_event_millis = parts.values().filter_map(|c| c.oldest_event_millis).min();
    totals.newest_event_millis = parts.values().filter_map(|c| c.newest_event_millis).max();
    table_decision(&totals, parts, &thresholds(), &RULE, pacing, now)
}

#[test]
fn a_burst_settles_into_one_run_and_a_stream_is_not_held_past_the_cap() {
    let no_cost = Pacing {
        file_hour_cost_millis: 0,
        ..PACED
    };
    // 30 files over 90 s: due from the 10th, but the run waits a minute after the last.
    let burst: Vec<i64> = (0..30).map(|i| i * 3_000).collect();
    let parts = BTreeMap::from([("d=1".to_string(), landed(&burst))]);
    assert_eq!(
        decide(&parts, &no_cost, 90_000),
        Decision::Waiting {
            reason: DueReason::Files,
            wait: Wait::Settling,
            until: 87_000 + 60_000
        }
    );
    assert!(matches!(
        decide(&parts, &no_cost, 147_000),
        Decision::Due { .. }
    ));
    // A file every 30 s: never a quiet minute, so the cap (5 min after the oldest) decides.
    let stream: Vec<i64> = (0..20).map(|i| i * 30_000).collect();
    let parts = BTreeMap::from([("d=1".to_string(), landed(&stream))]);
    assert!(matches!(
        decide(&parts, &no_cost, 290_000),
        Decision::Waiting {
            wait: Wait::Settling,
            until: 300_000,
            ..
        }
    ));
    assert!(matches!(
        decide(&parts, &no_cost, 300_000),
        Decision::Due { .. }
    ));
}

#[test]
fn a_run_waits_until_the_files_it_fixes_are_worth_its_cost() {
    let no_settle = Pacing {
        settle_millis: 0,
        ..PACED
    };
    // Worth 90 s / 40 s an hour = 2.25 file-hours. Ten files landed just now: not yet.
    let parts = BTreeMap::from([("d=1".to_string(), landed(&[0; 10]))]);
    let Decision::Waiting { wait, until, .. } = decide(&parts, &no_settle, 0) else {
        panic!("ten fresh files wait");
    };
    assert!(matches!(wait, Wait::Cost { .. }));
    // Nine of them fixable: 2.25 h * 3600 / 9 = 900 s.
    assert_eq!(until, 900_000);
    assert!(matches!(
        decide(&parts, &no_settle, 899_000),
        Decision::Waiting { .. }
    ));
    assert!(matches!(
        decide(&parts, &no_settle, 900_000),
        Decision::Due { .. }
    ));
    // Forty files: worth it sooner.
    let parts = BTreeMap::from([("d=1".to_string(), landed(&[0; 40]))]);
    assert!(matches!(
        decide(&parts, &no_settle, 208_000),
        Decision::Due { .. }
    ));
    // The cost is never weighed past max-wait: two files that are not worth a run by
    // themselves run when the first has waited max-wait, and a cost wait ends then at the
    // latest.
    let max_wait = 120 * 60_000;
    let parts = BTreeMap::from([("d=1".to_string(), landed(&[0, max_wait - 1]))]);
    assert!(matches!(
        decide(&parts, &no_settle, max_wait - 1),
        Decision::NotDue
    ));
    assert!(matches!(
        decide(&parts, &no_settle, max_wait),
        Decision::Due {
            reason: DueReason::MaxWait,
            ..
        }
    ));
    let slow = Pacing {
        run_cost_millis: 3_600_000,
        ..no_settle
    };
    let parts = BTreeMap::from([("d=1".to_string(), landed(&[0; 10]))]);
    assert!(matches!(
        decide(&parts, &slow, 0),
        Decision::Waiting { wait: Wait::Cost { .. }, until, .. } if until == max_wait
    ));
    assert!(matches!(
        decide(&parts, &slow, max_wait),
        Decision::Due { .. }
    ));
}

#[test]
fn a_still_small_output_waits_for_its_share_of_new_data() {
    let pacing = Pacing {
        file_fix_value_millis: 0,
        file_hour_cost_millis: 0,
        settle_millis: 0,
        quiet_millis: 15 * 60_000,
        remerge_percent: 50,
        fragment_percent: 0,
        ..PACED
    };
    let minute = 60_000;
    // An earlier run's 40 MiB output (known from the metadata) and ten new 1 MiB files:
    // due by files, but 10 MiB is less than half the output.
    let mut output = landed(&[10 * minute; 10]);
    output.add_file(40 * MIB, 10 * minute);
    output.metadata_files = 1;
    output.metadata_bytes = 40 * MIB;
    let parts = BTreeMap::from([("d=1".to_string(), output)]);
    assert_eq!(decide(&parts, &pacing, 20 * minute), Decision::NotDue);
    // Without the rule, the run reads the output again.
    assert!(matches!(
        decide(
            &parts,
            &Pacing {
                remerge_percent: 0,
                fragment_percent: 0,
                ..pacing
            },
            20 * minute
        ),
        Decision::Due { .. }
    ));
    // Quiet, the partition merges: so it does with twenty new files (20 MiB, half the output).
    assert!(matches!(
        decide(&parts, &pacing, 26 * minute),
        Decision::Due { .. }
    ));
    let mut more = parts["d=1"];
    for _ in 0..10 {
        more.add_file(MIB, 20 * minute);
    }
    let parts = BTreeMap::from([("d=1".to_string(), more)]);
    assert!(matches!(
        decide(&parts, &pacing, 21 * minute),
        Decision::Due { .. }
    ));
}

#[test]
fn a_quiet_partition_lets_mid_sized_files_join_and_its_last_file_rides_along() {
    let paced = Pacing {
        file_fix_value_millis: 30_000, // a run of 90 s is worth 3 fixed files
        file_hour_cost_millis: 0,
        settle_millis: 0,
        quiet_millis: 15 * 60_000,
        ..PACED
    };
    let minute = 60_000;
    // An open partition due by files; an old one whose last file, an earlier run's
    // still-small output, is alone, quiet for 20 minutes; a partition whose file is alone
    // but still receiving. Only the quiet one's mid-sized files join: the open partition's
    // are not read again because another partition closed.
    let output = PartitionCounts {
        metadata_files: 1,
        metadata_bytes: MIB,
        ..landed(&[20 * minute])
    };
    let mut parts = BTreeMap::from([
        ("h=2".to_string(), landed(&[40 * minute; 10])),
        ("h=1".to_string(), output),
        ("h=3".to_string(), landed(&[39 * minute])),
    ]);
    assert_eq!(
        decide(&parts, &paced, 40 * minute),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["h=1".to_string(), "h=2".to_string()],
            min_input_files: 2,
            joining: vec!["h=1".to_string()]
        }
    );
    // A late file alone in a partition closed long ago rides along only once it has
    // waited max-wait (120 min), not as soon as it is quiet: another late file may join
    // it, and the partition's outputs are read again once for both.
    parts.insert("h=1".to_string(), landed(&[20 * minute]));
    assert_eq!(
        decide(&parts, &paced, 40 * minute),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["h=2".to_string()],
            min_input_files: 10,
            joining: vec![]
        }
    );
    let mut later = parts.clone();
    later.insert("h=2".to_string(), landed(&[140 * minute; 10]));
    later.insert("h=3".to_string(), landed(&[139 * minute]));
    assert_eq!(
        decide(&later, &paced, 140 * minute),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["h=1".to_string(), "h=2".to_string()],
            min_input_files: 2,
            joining: vec!["h=1".to_string()]
        }
    );
    // Nothing quiet: only small files are rewritten.
    parts.remove("h=1");
    assert_eq!(
        decide(&parts, &paced, 40 * minute),
        Decision::Due {
            reason: DueReason::Files,
            partitions: vec!["h=2".to_string()],
            min_input_files: 10,
            joining: vec![]
        }
    );
    // Three files in a quiet partition are not worth a run of 90 s (2 fixable < 3) until
    // max-wait; a rider alone never starts one.
    let parts = BTreeMap::from([("h=1".to_string(), landed(&[0, 0, 0]))]);
    let lax = Thresholds {
        min_files: 3,
        ..thresholds()
    };
    let totals = PendingCounts {
        files: 3,
        bytes: 3 * MIB,
        oldest_event_millis: Some(0),
        newest_event_millis: Some(0),
    };
    assert!(matches!(
        table_decision(&totals, &parts, &lax, &RULE, &paced, 20 * minute),
        Decision::Waiting {
            wait: Wait::Files {
                fixable: 2,
                worth_files: 3
            },
            until: 7_200_000,
            ..
        }
    ));
    assert!(matches!(
        table_decision(&totals, &parts, &lax, &RULE, &paced, 120 * minute),
        Decision::Due { ref joining, .. } if joining == &["h=1"]
    ));
    let alone = BTreeMap::from([("h=1".to_string(), landed(&[0]))]);
    assert_eq!(decide(&alone, &paced, 20 * minute), Decision::NotDue);
}

#[test]
fn fragments_wait_until_their_output_is_no_longer_small_for_half_of_max_wait() {
    let filling = Pacing {
        file_fix_value_millis: 0,
        file_hour_cost_millis: 0,
        settle_millis: 0,
        fragment_percent: 100,
        ..PACED
    };
    let minute = 60_000;
    // Twelve 1 MiB files: due by files, but they would merge into a 12 MiB file, still
    // small (64 MiB), so they count toward no threshold for an hour.
    let parts = BTreeMap::from([("d=1".to_string(), landed(&[0; 12]))]);
    assert_eq!(decide(&parts, &filling, 10 * minute), Decision::NotDue);
    assert_eq!(
        filling_files(&parts, &thresholds(), &filling, 10 * minute),
        12
    );
    assert_eq!(
        filling_files(&parts, &thresholds(), &filling, 60 * minute),
        0
    );
    assert_eq!(
        next_fragment_deadline(&parts, &thresholds(), &filling, 10 * minute),
        Some(60 * minute),
        "the accumulator wakes when they stop waiting"
    );
    assert!(matches!(
        decide(&parts, &filling, 60 * minute),
        Decision::Due { ref partitions, .. } if partitions == &["d=1"]
    ));
    // A partition gone quiet is complete: its fragments stop waiting then, and the
    // accumulator wakes for it too.
    let quieting = Pacing {
        quiet_millis: 15 * 60_000,
        ..filling
    };
    assert_eq!(
        next_quiet_deadline(&parts, &quieting, 10 * minute),
        Some(15 * minute)
    );
    assert_eq!(decide(&parts, &quieting, 14 * minute), Decision::NotDue);
    assert!(matches!(
        decide(&parts, &quieting, 15 * minute),
        Decision::Due { ref partitions, .. } if partitions == &["d=1"]
    ));
    assert_eq!(next_quiet_deadline(&parts, &quieting, 15 * minute), None);
    assert_eq!(next_quiet_deadline(&parts, &filling, 10 * minute), None);
    // A small file's worth (64 files of 1 MiB) is a run at once; with the rule off, twelve.
    let full = BTreeMap::from([("d=1".to_string(), landed(&[0; 64]))]);
    assert!(matches!(
        decide(&full, &filling, minute),
        Decision::Due { .. }
    ));
    assert_eq!(
        next_fragment_deadline(&full, &thresholds(), &filling, minute),
        None
    );
    let off = Pacing {
        fragment_percent: 0,
        ..filling
    };
    assert!(matches!(decide(&parts, &off, minute), Decision::Due { .. }));
    assert_eq!(
        next_fragment_deadline(&parts, &thresholds(), &off, minute),
        None
    );
    // The default: on for a warm engine's run cost, off for a cold one.
    assert_eq!(Pacing::default_fragment_percent(1_000), 100);
    assert_eq!(Pacing::default_fragment_percent(90_000), 0);
}

/// The property tests' partitions `d=0`, `d=1`, …: for each `(files, ago)`, `files` files of
/// 1 MiB, the `i`-th landed at `file_time(ago, i)` (not before time 0).
fn partitions_of(
    parts: &[(u64, i64)],
    file_time: impl Fn(i64, i64) -> i64,
) -> BTreeMap<String, PartitionCounts> {
    parts
        .iter()
        .enumerate()
        .map(|(index, (files, ago))| {
            let times: Vec<i64> = (0..*files as i64)
                .map(|i| file_time(*ago, i).max(0))
                .collect();
            (format!("d={index}"), landed(&times))
        })
        .collect()
}

/// The property tests' pacing: a 90 s run, a file's fix worth `fix` × 30 s, a small file
/// costing `cost` × 20 s an hour, a settle of `settle` minutes (at most five times that);
/// no quiet, re-merge or fragment rule.
fn proptest_pacing(fix: u64, cost: u64, settle: i64) -> Pacing {
    Pacing {
        mode: PacingMode::Cost,
        file_fix_value_millis: fix * 30_000,
        run_cost_millis: 90_000,
        file_hour_cost_millis: cost * 20_000,
        settle_millis: settle * 60_000,
        settle_max_millis: settle * 300_000,
        quiet_millis: 0,
        remerge_percent: 0,
        fragment_percent: 0,
    }
}

proptest! {
    #[test]
    fn due_iff_some_threshold_is_crossed(files in 0u64..30, bytes in 0u64..600, oldest in 0i64..10_000, now in 0i64..20_000) {
        let thresholds = Thresholds { small_file_bytes: 100, min_files: 10, min_total_bytes: 300, max_wait_millis: Some(5_000) };
        let counts = pending(files, bytes, (files > 0).then_some(oldest));
        let expected = files > 0 && (files >= 10 || bytes >= 300 || now >= oldest + 5_000);
        prop_assert_eq!(due_reason(&counts, &thresholds, now).is_some(), expected);
    }

    #[test]
    fn later_is_never_less_due(files in 1u64..30, bytes in 0u64..600, oldest in 0i64..10_000, now in 0i64..20_000, later in 0i64..20_000) {
        let thresholds = Thresholds { small_file_bytes: 100, min_files: 10, min_total_bytes: 300, max_wait_millis: Some(5_000) };
        let counts = pending(files, bytes, Some(oldest));
        if due_reason(&counts, &thresholds, now).is_some() {
            prop_assert!(due_reason(&counts, &thresholds, now + later).is_some());
        }
    }

    #[test]
    fn a_run_rewrites_something_forgets_nothing_and_a_wait_ends(
        parts in proptest::collection::vec((0u64..6, 0i64..200), 1..6),
        now in 0i64..20_000,
        settle in 0i64..3,
        cost in 0u64..3,
        fix in 0u64..3,
    ) {
        // Partitions of 0-5 files landed 0-200 s before `now`.
        let parts = partitions_of(&parts, |ago, i| now - ago * 1000 + i * 1000);
        let pacing = Pacing { remerge_percent: 50, ..proptest_pacing(fix, cost, settle) };
        let improvable: Vec<String> = parts
            .iter()
            .filter(|(_, counts)| counts.files >= 2)
            .map(|(path, _)| path.clone())
            .collect();
        let mut at = now;
        for _ in 0..6 {
            match decide(&parts, &pacing, at) {
                Decision::Due { partitions, min_input_files, .. } => {
                    // Every partition it can improve, and only those: none rewrites nothing.
                    prop_assert_eq!(&partitions, &improvable);
                    prop_assert!(min_input_files >= 2);
                    return Ok(());
                }
                Decision::Waiting { until, .. } => {
                    prop_assert!(until > at, "a wait ends later, not now");
                    // No wait lasts past max-wait (the files landed at most 200 s
                    // before `now`, none after `now + 6 s`).
                    prop_assert!(until <= now + 6_000 + 120 * 60_000, "{until}");
                    at = until;
                }
                Decision::NotDue | Decision::NothingToRewrite(_) => return Ok(()),
            }
        }
        prop_assert!(false, "a wait with no new files ends in a run within a few steps");
    }

    #[test]
    fn no_rule_waits_past_max_wait_and_by_default_none_past_the_settle_window(
        parts in proptest::collection::vec((0u64..14, 0i64..10_800), 1..6),
        now in 0i64..20_000_000,
        cost in 0u64..3,
        fix in 0u64..3,
        fragments in proptest::bool::ANY,
        by_default in proptest::bool::ANY,
    ) {
        // Partitions of 0-13 files of 1 MiB a minute apart, the last landed up to 3 hours
        // before `now`.
        let parts = partitions_of(&parts, |ago, i| now - ago * 1000 - i * 60_000);
        let pacing = if by_default {
            default_pacing()
        } else {
            Pacing {
                fragment_percent: if fragments { 100 } else { 0 },
                ..proptest_pacing(fix, cost, 1)
            }
        };
        let max_wait = thresholds().max_wait_millis.unwrap();
        let overdue = parts
            .values()
            .any(|counts| counts.files >= 2 && counts.oldest_event_millis.unwrap() + max_wait <= now);
        let decision = decide(&parts, &pacing, now);
        if overdue {
            prop_assert!(matches!(decision, Decision::Due { .. }), "{:?}", decision);
        }
        if let Decision::Waiting { wait, until, .. } = decision {
            let first_max_wait = parts
                .values()
                .filter(|counts| counts.files >= 2)
                .map(|counts| counts.oldest_event_millis.unwrap() + max_wait)
                .min()
                .unwrap();
            prop_assert!(until <= first_max_wait, "{:?} past max-wait {}", decision, first_max_wait);
            if by_default {
                let oldest = parts.values().filter(|counts| counts.files >= 2).filter_map(|counts| counts.oldest_event_millis).min().unwrap();
                prop_assert_eq!(wait, Wait::Settling);
                prop_assert!(until <= oldest + pacing.settle_max_millis, "{:?}", decision);
            }
        }
    }

    #[test]
    fn no_file_waits_without_a_wake_up(
        parts in proptest::collection::vec((0u64..6, 0i64..10_800), 1..6),
        now in 0i64..20_000_000,
        settle in 0i64..3,
        cost in 0u64..3,
        fix in 1u64..3,
        fragments in proptest::bool::ANY,
        quiet in proptest::bool::ANY,
    ) {
        // Partitions of 0-5 files of 1 MiB, the last landed up to 3 hours before `now`; no
        // new files come. The accumulator evaluates the decision now and again only at the
        // deadlines it knows: the run must come, taking every partition of two files or
        // more that no longer waits to fill, and not later than the first moment it is due.
        let parts = partitions_of(&parts, |ago, i| now - ago * 1000 - i * 60_000);
        let pacing = Pacing {
            quiet_millis: if quiet { 15 * 60_000 } else { 0 },
            fragment_percent: if fragments { 100 } else { 0 },
            ..proptest_pacing(fix, cost, settle)
        };
        let improvable: Vec<&String> = parts
            .iter()
            .filter(|(_, counts)| counts.files >= 2)
            .map(|(path, _)| path)
            .collect();
        let mut at = now;
        for _ in 0..12 {
            let decision = decide(&parts, &pacing, at);
            let woken = next_wake(&decision, &parts, &thresholds(), &pacing, at);
            let next = match decision {
                Decision::Due { partitions, min_input_files, .. } => {
                    prop_assert!(min_input_files >= 2);
                    prop_assert!(!partitions.is_empty());
                    for path in &improvable {
                        let filling = filling_files(
                            &BTreeMap::from([((*path).clone(), parts[*path])]),
                            &thresholds(),
                            &pacing,
                            at,
                        ) > 0;
                        prop_assert_eq!(
                            partitions.contains(path),
                            !filling,
                            "{} at {}: {:?}", path, at, partitions
                        );
                    }
                    return Ok(());
                }
                Decision::Waiting { until, .. } => {
                    prop_assert!(until > at, "a wait ends later, not now");
                    prop_assert!(woken.is_some_and(|woken| woken <= until), "{:?}", woken);
                    woken.unwrap()
                }
                Decision::NotDue | Decision::NothingToRewrite(_) => {
                    prop_assert!(
                        woken.is_some() || improvable.is_empty(),
                        "files wait with no wake-up at {}: {:?}", at, parts
                    );
                    match woken {
                        Some(woken) => woken,
                        None => return Ok(()),
                    }
                }
            };
            prop_assert!(next > at);
            // Nothing becomes due between two wake-ups: none comes late (a cost wait is
            // rounded up to the second).
            prop_assert!(
                !matches!(decide(&parts, &pacing, next - 1_000), Decision::Due { .. }),
                "due before the wake-up at {}: {:?}", next, parts
            );
            at = next;
        }
        prop_assert!(false, "no run within twelve wake-ups");
    }
}
