//! When is a table due for compaction? Pure decisions over pending counts and an injected time.

use std::time::Duration;

use serde::Serialize;

use crate::clock::UnixMillis;
use crate::state::PendingCounts;

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
    MaxWait,
}

impl DueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DueReason::Files => "files",
            DueReason::Bytes => "bytes",
            DueReason::MaxWait => "max_wait",
        }
    }
}

/// The first threshold crossed, checked in the order files, bytes, max-wait.
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
