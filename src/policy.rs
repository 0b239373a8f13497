//! When is a table due for compaction? Pure decisions over pending counts and an injected time.

use std::time::Duration;

use serde::Serialize;

use std::collections::BTreeMap;

use crate::clock::UnixMillis;
use crate::state::{PartitionCounts, PendingCounts};

/// A table's thresholds, in bytes and milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Files strictly smaller than this are small files.
    pub small_file_bytes: u64,
    pub min_files: u64,
    pub min_total_bytes: u64,
    /// `None` disables the time threshold.
    pub max_wait_millis: Option<i64>,
}

/// Why a table is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DueReason {
    Files,
    Bytes,
    /// One partition alone has `min_input_files` small files.
    Partition,
    MaxWait,
}

impl DueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DueReason::Files => "files",
            DueReason::Bytes => "bytes",
            DueReason::Partition => "partition",
            DueReason::MaxWait => "max_wait",
        }
    }
}

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

/// How `rewrite_data_files` decides whether a partition's file group is rewritten: enough files,
/// or at least two files holding a target file's worth of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteRule {
    pub min_input_files: u64,
    pub target_file_bytes: u64,
}

impl RewriteRule {
    /// `min-input-files` for a run with this trigger: a max-wait run rewrites any partition with
    /// two small files or more (one file cannot be improved by rewriting it alone).
    pub fn min_input_files_for(&self, reason: DueReason) -> u64 {
        match reason {
            DueReason::MaxWait => 2.min(self.min_input_files),
            _ => self.min_input_files,
        }
    }

    pub fn worth_rewriting(&self, partition: &PartitionCounts, min_input_files: u64) -> bool {
        partition.files >= min_input_files.max(1)
            || (partition.files >= 2 && partition.bytes >= self.target_file_bytes)
    }
}

/// Whether to start a run, why, and which partitions it should rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    NotDue,
    /// Thresholds are crossed, but no partition has enough to rewrite: a run would rewrite nothing.
    NothingToRewrite(DueReason),
    Due {
        reason: DueReason,
        /// The partitions worth rewriting (paths; `""` for an unpartitioned table).
        partitions: Vec<String>,
        min_input_files: u64,
    },
}

/// The table's decision: its totals crossing a threshold, or one partition reaching
/// `min_input_files`, and only when at least one partition is worth rewriting.
pub fn table_decision(
    pending: &PendingCounts,
    partitions: &BTreeMap<String, PartitionCounts>,
    thresholds: &Thresholds,
    rule: &RewriteRule,
    now: UnixMillis,
) -> Decision {
    let waited_long = |partition: &PartitionCounts| max_wait_ready(partition, thresholds, now);
    // The totals decide files and bytes; max-wait is judged per partition below.
    let totals =
        due_reason(pending, thresholds, now).filter(|reason| *reason != DueReason::MaxWait);
    let reason = totals
        .or_else(|| {
            partitions
                .values()
                .any(|partition| partition.files >= rule.min_input_files)
                .then_some(DueReason::Partition)
        })
        .or_else(|| {
            partitions
                .values()
                .any(waited_long)
                .then_some(DueReason::MaxWait)
        });
    let Some(reason) = reason else {
        return Decision::NotDue;
    };
    let min_input_files = rule.min_input_files_for(reason);
    // The partitions worth it by size, and those whose oldest file waited too long (two files or
    // more: one file alone cannot be improved).
    let worth: Vec<String> = partitions
        .iter()
        .filter(|(_, counts)| rule.worth_rewriting(counts, min_input_files) || waited_long(counts))
        .map(|(path, _)| path.clone())
        .collect();
    if worth.is_empty() {
        Decision::NothingToRewrite(reason)
    } else {
        let min_input_files = if worth_only_by_age(partitions, &worth, rule, min_input_files) {
            2.min(min_input_files)
        } else {
            min_input_files
        };
        Decision::Due {
            reason,
            partitions: worth,
            min_input_files,
        }
    }
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

/// A run that includes partitions only because they waited long enough must let
/// `rewrite_data_files` rewrite them: its `min-input-files` goes down to 2.
fn worth_only_by_age(
    partitions: &BTreeMap<String, PartitionCounts>,
    worth: &[String],
    rule: &RewriteRule,
    min_input_files: u64,
) -> bool {
    worth
        .iter()
        .any(|path| !rule.worth_rewriting(&partitions[path], min_input_files))
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

/// Exponential back-off with full jitter: attempt n waits a random time up to
/// `min(max, base * 2^n)`, never less than `base / 2` so a failing peer is not hammered.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            attempt: 0,
        }
    }

    /// The delay before the next try, given a uniform random number in `[0, 1)`.
    pub fn next_delay_with(&mut self, random_unit: f64) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let floor = self.base / 2;
        floor
            + ceiling
                .saturating_sub(floor)
                .mul_f64(random_unit.clamp(0.0, 1.0))
    }

    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(fastrand::f64())
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1024 * 1024;

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
        // 12 + 6 small files: the table is due by files, only the 12-file partition is rewritten.
        let parts = partitions(&[("d=1", 12, 12), ("d=2", 6, 6)]);
        assert_eq!(
            table_decision(&pending(18, 18, Some(0)), &parts, &thresholds(), &RULE, 1),
            Decision::Due {
                reason: DueReason::Files,
                partitions: vec!["d=1".to_string()],
                min_input_files: 10
            }
        );
        // The 6 left behind: not due until the partition qualifies.
        let parts = partitions(&[("d=2", 6, 6)]);
        assert_eq!(
            table_decision(&pending(6, 6, Some(0)), &parts, &thresholds(), &RULE, 1),
            Decision::NotDue
        );
    }

    #[test]
    fn one_file_in_each_of_many_partitions_starts_no_run() {
        let parts: Vec<(String, u64, u64)> =
            (0..40).map(|day| (format!("d={day}"), 1, 1)).collect();
        let parts = partitions(
            &parts
                .iter()
                .map(|(p, f, b)| (p.as_str(), *f, *b))
                .collect::<Vec<_>>(),
        );
        assert_eq!(
            table_decision(&pending(40, 40, Some(0)), &parts, &thresholds(), &RULE, 1),
            Decision::NothingToRewrite(DueReason::Files)
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
            table_decision(&pending(13, 13, Some(0)), &parts, &lax, &RULE, 1),
            Decision::Due {
                reason: DueReason::Partition,
                partitions: vec!["d=1".to_string()],
                min_input_files: 10
            }
        );
        let parts = partitions(&[("d=1", 1, 1), ("d=2", 3, 3)]);
        let late = 120 * 60_000 + 1;
        assert_eq!(
            table_decision(&pending(4, 4, Some(0)), &parts, &thresholds(), &RULE, late),
            Decision::Due {
                reason: DueReason::MaxWait,
                partitions: vec!["d=2".to_string()],
                min_input_files: 2
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
            table_decision(&pending(3, 3, Some(0)), &parts, &thresholds(), &RULE, now),
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
                220 * 60_000
            ),
            Decision::Due {
                reason: DueReason::MaxWait,
                partitions: vec!["d=new".to_string()],
                min_input_files: 2
            }
        );
        assert_eq!(
            next_max_wait_deadline(&parts, &thresholds(), 220 * 60_000),
            None,
            "no deadline in the past"
        );
    }

    #[test]
    fn backoff_grows_to_its_ceiling_and_resets() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let ceilings: Vec<u64> = (0..8)
            .map(|_| backoff.next_delay_with(1.0).as_secs())
            .collect();
        assert_eq!(ceilings, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.next_delay_with(0.0), Duration::from_millis(500));
        backoff.reset();
        assert_eq!(backoff.next_delay_with(1.0), Duration::from_secs(1));
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
    }
}
