//! Time as a dependency: the service reads the wall clock, tests and the simulator move a fake one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch, UTC.
pub type UnixMillis = i64;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now_millis(&self) -> UnixMillis;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<AtomicI64>,
}

impl FakeClock {
    pub fn new(now: UnixMillis) -> Self {
        FakeClock {
            now: Arc::new(AtomicI64::new(now)),
        }
    }

    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }

    pub fn set(&self, now: UnixMillis) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_millis(&self) -> UnixMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// A clock that follows tokio's time, from a given start. Under `tokio::time::pause()` it moves
/// only when tokio's time does (`tokio::time::advance`, or the runtime's auto-advance when every
/// task waits), so the timers an actor arms and the time it reads agree in a test.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone)]
pub struct TokioClock {
    start_millis: UnixMillis,
    start: tokio::time::Instant,
}

#[cfg(any(test, feature = "testing"))]
impl TokioClock {
    pub fn starting_at(now: UnixMillis) -> Self {
        TokioClock {
            start_millis: now,
            start: tokio::time::Instant::now(),
        }
    }
}

#[cfg(any(test, feature = "testing"))]
impl Clock for TokioClock {
    fn now_millis(&self) -> UnixMillis {
        self.start_millis + self.start.elapsed().as_millis() as i64
    }
}

/// Parses an RFC 3339 timestamp (as S3 and EventBridge write them) into Unix milliseconds.
/// A timestamp without an offset (some S3 emulators write them) is taken as UTC.
pub fn parse_rfc3339(text: &str) -> Option<UnixMillis> {
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.timestamp_millis())
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|time| time.and_utc().timestamp_millis())
        })
}

/// Formats Unix milliseconds as RFC 3339 UTC with millisecond precision.
pub fn format_rfc3339(millis: UnixMillis) -> String {
    DateTime::<Utc>::from_timestamp_millis(millis)
        .map(|time| time.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| millis.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let millis = parse_rfc3339("2024-05-01T12:30:00.250Z").unwrap();
        assert_eq!(format_rfc3339(millis), "2024-05-01T12:30:00.250Z");
        assert_eq!(
            parse_rfc3339("2021-11-12T00:00:00Z"),
            Some(1_636_675_200_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(
            parse_rfc3339("2024-05-01T12:30:00.250000"),
            parse_rfc3339("2024-05-01T12:30:00.250Z"),
            "no offset means UTC"
        );
    }

    #[test]
    fn fake_clock_moves_only_when_told() {
        let clock = FakeClock::new(1_000);
        let shared = clock.clone();
        clock.advance(Duration::from_secs(2));
        assert_eq!(shared.now_millis(), 3_000);
        shared.set(10);
        assert_eq!(clock.now_millis(), 10);
    }
}
