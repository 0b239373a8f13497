//! One back-off for everything that tries a peer again: the SQS pollers and the router's store
//! probe (exponential with full jitter, so many pollers do not retry in step), notifier
//! deliveries (doubling), Spark run retries (a constant interval, `spark.retry_interval_seconds`)
//! and accumulator restarts (doubling from the count of recent restarts).
//!
//! A table's persisted failure back-off (`table::accumulator::FailureBackoff`) is not one of these: it
//! is part of the durable state and survives a restart.

use std::time::Duration;

/// The waits between tries: attempt `n` (from 0) waits `min(max, base × 2ⁿ)`; jittered, a random
/// time between `base / 2` and that, so a failing peer is not hammered in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    jitter: bool,
    attempt: u32,
}

impl Backoff {
    /// Exponential with full jitter.
    pub fn jittered(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            jitter: true,
            attempt: 0,
        }
    }

    /// `base`, `2 × base`, `4 × base`, … up to `max`.
    pub fn doubling(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            jitter: false,
            attempt: 0,
        }
    }

    /// The same wait every time.
    pub fn constant(interval: Duration) -> Self {
        Backoff::doubling(interval, interval)
    }

    /// The longest wait of attempt `attempt` (from 0), without jitter.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max)
    }

    /// The wait before the next try, given a uniform random number in `[0, 1)` (unused without
    /// jitter).
    pub fn next_delay_with(&mut self, random_unit: f64) -> Duration {
        let ceiling = self.ceiling(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        if !self.jitter {
            return ceiling;
        }
        let floor = (self.base / 2).min(ceiling);
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

    /// Delays handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jittered_grows_to_its_ceiling_and_resets() {
        let mut backoff = Backoff::jittered(Duration::from_secs(1), Duration::from_secs(60));
        let ceilings: Vec<u64> = (0..8)
            .map(|_| backoff.next_delay_with(1.0).as_secs())
            .collect();
        assert_eq!(ceilings, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.next_delay_with(0.0), Duration::from_millis(500));
        assert_eq!(backoff.attempts(), 9);
        backoff.reset();
        assert_eq!(backoff.next_delay_with(1.0), Duration::from_secs(1));
    }

    #[test]
    fn doubling_and_constant_ignore_the_random_number() {
        let mut doubling = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(5));
        let waits: Vec<u64> = [0.0, 0.9, 0.5, 0.1]
            .into_iter()
            .map(|unit| doubling.next_delay_with(unit).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 5]);
        let mut constant = Backoff::constant(Duration::from_millis(300));
        for _ in 0..40 {
            assert_eq!(constant.next_delay(), Duration::from_millis(300));
        }
    }

    #[test]
    fn the_ceiling_of_a_late_attempt_does_not_overflow() {
        let backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(backoff.ceiling(0), Duration::from_secs(1));
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(60));
        let huge = Backoff::doubling(Duration::MAX / 2, Duration::MAX);
        assert_eq!(huge.ceiling(40), Duration::MAX);
    }
}
