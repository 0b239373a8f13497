//! When is a table due for compaction? Pure decisions over pending counts and an injected time.

use serde::Serialize;

use std::collections::BTreeMap;

use crate::base::clock::UnixMillis;
pub use crate::model::policy::{
    DueReason, Pacing, PacingMode, PacingSpec, RewriteRule, RunCostSource, Thresholds,
    WARM_RUN_COST_MILLIS,
};
use crate::model::report::FailureClass;
use crate::model::state::{PartitionCounts, PendingCounts};

/// The first threshold crossed, checked in the order files, bytes, max-wait — on the table's
/// totals only (see [`table_decision`] for the decision that also looks at partitions).
pub fn due_reason(
    pending: &PendingCounts,
    thresholds: &Thresholds,
    now: UnixMillis,
) -> Option<DueReason> {
    if pending.files == 0 {
        return None;
    }
    if pending.files >= thresholds.min_files {
        return Some(DueReason::Files);
    }
    if pending.bytes >= thresholds.min_total_bytes {
        return Some(DueReason::Bytes);
    }
    match max_wait_deadline(pending, thresholds) {
        Some(deadline) if now >= deadline => Some(DueReason::MaxWait),
        _ => None,
    }
}

/// Why a table whose thresholds are crossed still waits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Wait {
    /// Files are still landing: a run now would leave the rest of the burst for another.
    Settling,
    /// The files a run would fix have not waited long enough, together, to be worth its cost.
    Cost {
        waited_file_hours: f64,
        worth_file_hours: f64,
    },
    /// The run would fix fewer files than make it worth its cost.
    Files { fixable: u64, worth_files: u64 },
}

/// Whether to start a run, why, and which partitions it should rewrite.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    NotDue,
    /// Thresholds are crossed, but no partition has enough to rewrite: a run would rewrite nothing.
    NothingToRewrite(DueReason),
    /// Thresholds are crossed; the run waits (see [`Pacing`]) until `until` at the latest, unless
    /// more files make it worth it sooner.
    Waiting {
        reason: DueReason,
        wait: Wait,
        until: UnixMillis,
    },
    Due {
        reason: DueReason,
        /// The partitions worth rewriting (paths; `""` for an unpartitioned table).
        partitions: Vec<String>,
        min_input_files: u64,
        /// Those of them that have gone quiet (and the riders): their mid-sized files (up to
        /// Iceberg's default floor, three quarters of the target) join the rewrite; the other
        /// partitions' small files only are rewritten.
        joining: Vec<String>,
    },
}

/// The table's decision: its totals crossing a threshold, or one partition reaching
/// `min_input_files`, or a partition waiting `max_wait` — and only when at least one partition
/// has two small files or more. The run then takes every such partition (its fixed cost is paid
/// once), after the settle window and once the files it fixes are worth its cost; a partition
/// past max-wait starts it at once.
pub fn table_decision(
    pending: &PendingCounts,
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    rule: &RewriteRule,
    pacing: &Pacing,
    now: UnixMillis,
) -> Decision {
    let waited_long = |partition: &PartitionCounts| max_wait_ready(partition, thresholds, now);
    // Every partition a run can improve: one file alone cannot be (a run's earlier output, a
    // late file in an old partition), and it counts toward no threshold until files join it
    // (A table configured with `min_input_files = 1` rewrites single files too.)
    let least = 2.min(rule.min_input_files).max(1);
    // A partition gone quiet is complete: its small files may merge into its mid-sized outputs
    // (Iceberg's own floor), and one whose last file is alone rides along while it is recent.
    let quiet = |counts: &PartitionCounts| {
        pacing.quiet_millis > 0
            && counts
                .newest_event_millis
                .is_some_and(|newest| now >= newest.saturating_add(pacing.quiet_millis))
    };
    // A partition's fragments wait until what they merge into is no longer small, for half of
    // max-wait at most.
    let filled = |counts: &PartitionCounts| {
        fragments_filled(counts, thresholds, pacing)
            || counts.oldest_event_millis.is_some_and(|oldest| {
                now >= oldest.saturating_add(fragment_wait_millis(thresholds))
            })
    };
    // A partition holding one still-small output waits for enough new data to merge into it.
    let ripe_output = |counts: &PartitionCounts| {
        counts.metadata_files != 1
            || counts
                .bytes
                .saturating_sub(counts.metadata_bytes)
                .saturating_mul(100)
                >= counts.metadata_bytes.saturating_mul(pacing.remerge_percent)
            || quiet(counts)
            || waited_long(counts)
    };
    let ripe = |counts: &PartitionCounts| {
        (filled(counts) || quiet(counts) || waited_long(counts)) && ripe_output(counts)
    };
    let worth: Vec<(&String, &PartitionCounts)> = partitions
        .iter()
        .filter(|(_, counts)| counts.files >= least && ripe(counts))
        .collect();
    // Their totals decide files and bytes; max-wait is judged per partition below. (A table
    // whose partitions are not known yet — state from before partitions were kept — goes by
    // its own totals.)
    let fixable = if partitions.is_empty() {
        pending.clone()
    } else {
        let mut fixable = PendingCounts {
            oldest_event_millis: pending.oldest_event_millis,
            newest_event_millis: pending.newest_event_millis,
            ..PendingCounts::default()
        };
        for (_, counts) in &worth {
            fixable.files += counts.files;
            fixable.bytes = fixable.bytes.saturating_add(counts.bytes);
        }
        fixable
    };
    let totals =
        due_reason(&fixable, thresholds, now).filter(|reason| *reason != DueReason::MaxWait);
    let overdue = partitions.values().any(waited_long);
    let reason = totals
        .or_else(|| {
            worth
                .iter()
                .any(|(_, partition)| partition.files >= rule.min_input_files)
                .then_some(DueReason::Partition)
        })
        .or_else(|| overdue.then_some(DueReason::MaxWait));
    let Some(reason) = reason else {
        return Decision::NotDue;
    };
    let min_input_files = rule.min_input_files_for(reason);
    // Paced, a run takes every partition it can improve (its fixed cost is paid once); without
    // pacing, those the rewrite rule finds worth it and those past max-wait.
    let selected: Vec<(&String, &PartitionCounts)> = if pacing.mode != PacingMode::Off {
        worth.clone()
    } else {
        worth
            .iter()
            .filter(|(_, counts)| {
                rule.worth_rewriting(counts, min_input_files) || waited_long(counts)
            })
            .copied()
            .collect()
    };
    if selected.is_empty() {
        return Decision::NothingToRewrite(reason);
    }
    // A partition past max-wait starts the run at once: no rule waits past it. Before, the
    // settle window, and in the cost mode the run's worth, hold the run back — never past the
    // next partition's max-wait.
    if !overdue {
        if let Some((wait, until)) = pacing_wait(&worth, pacing, now) {
            let until = match next_max_wait_deadline(partitions, thresholds, now) {
                Some(deadline) => until.min(deadline),
                None => until,
            };
            return Decision::Waiting {
                reason,
                wait,
                until,
            };
        }
    }
    // A partition below `min_input_files` must be rewritten too: the run's goes down to 2.
    let min_input_files = if selected
        .iter()
        .all(|(_, counts)| rule.worth_rewriting(counts, min_input_files))
    {
        min_input_files
    } else {
        2.min(min_input_files)
    };
    // A quiet partition whose last file is alone rides along, to merge into its mid-sized
    // outputs: an earlier run's still-small output while it is recent (its partition has just
    // closed), a file that landed alone (late data into a partition closed long ago) only once
    // it has waited max-wait — by then more late files may have joined it, and the partition's
    // outputs are read again once for all of them instead of once a file.
    let recent = thresholds.max_wait_millis.unwrap_or(2 * 3_600_000);
    let riders: Vec<&String> = partitions
        .iter()
        .filter(|(_, counts)| least == 2 && counts.files == 1 && quiet(counts))
        .filter(|(_, counts)| {
            if counts.metadata_files == 1 {
                counts
                    .newest_event_millis
                    .is_some_and(|newest| now < newest.saturating_add(recent))
            } else {
                counts
                    .oldest_event_millis
                    .is_some_and(|oldest| now >= oldest.saturating_add(recent))
            }
        })
        .map(|(path, _)| path)
        .collect();
    let mut joining: Vec<String> = selected
        .iter()
        .filter(|(_, counts)| quiet(counts))
        .map(|(path, _)| *path)
        .chain(riders.iter().copied())
        .cloned()
        .collect();
    joining.sort();
    let min_input_files = if riders.is_empty() {
        min_input_files
    } else {
        2.min(min_input_files)
    };
    let mut paths: Vec<String> = selected
        .into_iter()
        .map(|(path, _)| path)
        .chain(riders)
        .cloned()
        .collect();
    paths.sort();
    Decision::Due {
        reason,
        partitions: paths,
        min_input_files,
        joining,
    }
}

/// Whether a run commits per partition group (partial progress: one commit per file group, so
/// that a conflict in one group does not throw the others' work away): as the table's
/// `partial_progress` says when it is set; unset, only when the table's last run lost to a
/// commit conflict (`last_failure`, the class of the last run when it failed). A table without
/// concurrent writers keeps one snapshot per run; one whose writers just won a race retries in
/// groups, and the groups the writers did not touch commit.
pub fn commits_per_group(setting: Option<bool>, last_failure: Option<FailureClass>) -> bool {
    setting.unwrap_or(last_failure == Some(FailureClass::CommitConflict))
}

/// Whether a partition's small files hold `fragment_percent` of a small file's size (always, with
/// the rule off).
fn fragments_filled(counts: &PartitionCounts, thresholds: &Thresholds, pacing: &Pacing) -> bool {
    counts.bytes.saturating_mul(100)
        >= thresholds
            .small_file_bytes
            .saturating_mul(pacing.fragment_percent)
}

/// How long a partition's fragments wait to fill: half of max-wait (an hour with it off).
fn fragment_wait_millis(thresholds: &Thresholds) -> i64 {
    thresholds
        .max_wait_millis
        .map_or(3_600_000, |max_wait| max_wait / 2)
}

/// The pending files of partitions (of two files or more) still waiting to fill.
pub fn filling_files(
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    pacing: &Pacing,
    now: UnixMillis,
) -> u64 {
    partitions
        .values()
        .filter(|partition| {
            partition.files >= 2
                && !fragments_filled(partition, thresholds, pacing)
                && partition.oldest_event_millis.is_some_and(|oldest| {
                    now < oldest.saturating_add(fragment_wait_millis(thresholds))
                })
                && !(pacing.quiet_millis > 0
                    && partition
                        .newest_event_millis
                        .is_some_and(|newest| now >= newest.saturating_add(pacing.quiet_millis)))
        })
        .map(|partition| partition.files)
        .sum()
}

/// When the next partition (of two files or more) waiting to fill stops waiting, if that is
/// still ahead: the accumulator wakes then, with or without new events.
pub fn next_fragment_deadline(
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    pacing: &Pacing,
    now: UnixMillis,
) -> Option<UnixMillis> {
    partitions
        .values()
        .filter(|partition| {
            partition.files >= 2 && !fragments_filled(partition, thresholds, pacing)
        })
        .filter_map(|partition| partition.oldest_event_millis)
        .map(|oldest| oldest.saturating_add(fragment_wait_millis(thresholds)))
        .filter(|deadline| *deadline > now)
        .min()
}

/// When the next partition (of two files or more) goes quiet, if that is still ahead: a quiet
/// partition is complete, so fragments and a lone still-small output waiting for more data stop
/// waiting then — the accumulator wakes to see it, with or without new events.
pub fn next_quiet_deadline(
    partitions: &BTreeMap<String, PartitionCounts>,
    pacing: &Pacing,
    now: UnixMillis,
) -> Option<UnixMillis> {
    if pacing.quiet_millis <= 0 {
        return None;
    }
    partitions
        .values()
        .filter(|partition| partition.files >= 2)
        .filter_map(|partition| partition.newest_event_millis)
        .map(|newest| newest.saturating_add(pacing.quiet_millis))
        .filter(|deadline| *deadline > now)
        .min()
}

/// The next moment a table's decision (`decision`, made at `now`) can change without new events,
/// if any is ahead: a partition reaching max-wait, its fragments' wait ending, a partition going
/// quiet, or the end of a timed wait (a wait only more files end has no time of its own). The
/// accumulator wakes then.
pub fn next_wake(
    decision: &Decision,
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    pacing: &Pacing,
    now: UnixMillis,
) -> Option<UnixMillis> {
    let deadline = [
        next_max_wait_deadline(partitions, thresholds, now),
        next_fragment_deadline(partitions, thresholds, pacing, now),
        next_quiet_deadline(partitions, pacing, now),
    ]
    .into_iter()
    .flatten()
    .min();
    match decision {
        Decision::Waiting { until, .. } if *until < UnixMillis::MAX => {
            Some(deadline.map_or(*until, |at| at.min(*until)))
        }
        _ => deadline,
    }
}

/// Why and until when a run over these partitions waits, if it does.
fn pacing_wait(
    worth: &[(&String, &PartitionCounts)],
    pacing: &Pacing,
    now: UnixMillis,
) -> Option<(Wait, UnixMillis)> {
    if pacing.settle_millis > 0 {
        let newest = worth
            .iter()
            .filter_map(|(_, counts)| counts.newest_event_millis)
            .max();
        let oldest = worth
            .iter()
            .filter_map(|(_, counts)| counts.oldest_event_millis)
            .min();
        if let (Some(newest), Some(oldest)) = (newest, oldest) {
            let until = newest
                .saturating_add(pacing.settle_millis)
                .min(oldest.saturating_add(pacing.settle_max_millis));
            if now < until {
                return Some((Wait::Settling, until));
            }
        }
    }
    if pacing.mode != PacingMode::Cost {
        return None;
    }
    let fixable: u64 = worth.iter().map(|(_, counts)| counts.files - 1).sum();
    if pacing.file_fix_value_millis > 0 && fixable < pacing.worth_files() {
        // Only more files make it worth it (or max-wait).
        return Some((
            Wait::Files {
                fixable,
                worth_files: pacing.worth_files(),
            },
            UnixMillis::MAX,
        ));
    }
    if pacing.file_hour_cost_millis == 0 {
        return None;
    }
    let worth_file_seconds = pacing.worth_file_seconds();
    let waited: f64 = worth
        .iter()
        .map(|(_, counts)| counts.fixable_waited_file_seconds(now))
        .sum();
    if waited >= worth_file_seconds {
        return None;
    }
    // Waiting grows by one file-second a second for each file a run would fix.
    let seconds = ((worth_file_seconds - waited) / fixable.max(1) as f64).ceil() as i64;
    Some((
        Wait::Cost {
            waited_file_hours: waited / 3600.0,
            worth_file_hours: worth_file_seconds / 3600.0,
        },
        now.saturating_add(seconds.max(1).saturating_mul(1000)),
    ))
}

/// Whether a partition has waited `max_wait` with at least two small files.
pub fn max_wait_ready(
    partition: &PartitionCounts,
    thresholds: &Thresholds,
    now: UnixMillis,
) -> bool {
    match (thresholds.max_wait_millis, partition.oldest_event_millis) {
        (Some(max_wait), Some(oldest)) => {
            partition.files >= 2 && now >= oldest.saturating_add(max_wait)
        }
        _ => false,
    }
}

/// When the next partition (of two files or more) reaches max-wait, if that is still ahead.
pub fn next_max_wait_deadline(
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    now: UnixMillis,
) -> Option<UnixMillis> {
    let max_wait = thresholds.max_wait_millis?;
    partitions
        .values()
        .filter(|partition| partition.files >= 2)
        .filter_map(|partition| partition.oldest_event_millis)
        .map(|oldest| oldest.saturating_add(max_wait))
        .filter(|deadline| *deadline > now)
        .min()
}

/// When the max-wait threshold will fire for the files pending now, if it is enabled and any are.
pub fn max_wait_deadline(pending: &PendingCounts, thresholds: &Thresholds) -> Option<UnixMillis> {
    if pending.files == 0 {
        return None;
    }
    let max_wait = thresholds.max_wait_millis?;
    pending
        .oldest_event_millis
        .map(|oldest| oldest.saturating_add(max_wait))
}

#[cfg(test)]
mod tests;
