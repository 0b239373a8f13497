//! Whether the engine answers: a probe when the service starts (for a warm engine, its warm-up:
//! a fresh Spark Connect server's first statement takes seconds) and then at an interval.
//! `/readyz`, the metrics and `icepack status` read what the last probe found.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{info, warn};

use super::Engine;
use crate::base::clock::{format_rfc3339, Clock};

/// Between two probes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// The engine as the last probe found it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EngineHealth {
    /// `connect sc://host:15002`, `docker IMAGE`, `process PATH`.
    pub engine: String,
    /// `None` until the first probe has ended.
    pub answering: Option<bool>,
    pub checked_at: Option<String>,
    pub probe_millis: Option<u64>,
    /// Short and secret-free.
    pub error: Option<String>,
}

/// Shared between the probe and its readers.
#[derive(Debug, Default)]
pub struct EngineHealthCell(Mutex<EngineHealth>);

impl EngineHealthCell {
    pub fn get(&self) -> EngineHealth {
        self.0.lock().expect("engine health").clone()
    }

    pub fn set(&self, health: EngineHealth) {
        *self.0.lock().expect("engine health") = health;
    }
}

/// Probes now and then every `interval`, for as long as the runtime runs.
pub fn spawn_probe(
    engine_to_probe: Arc<dyn Engine>,
    cell: Arc<EngineHealthCell>,
    clock: Arc<dyn Clock>,
    interval: Duration,
) {
    let engine = engine_to_probe.describe();
    cell.set(EngineHealth {
        engine: engine.clone(),
        ..EngineHealth::default()
    });
    tokio::spawn(async move {
        let mut answered_before: Option<bool> = None;
        loop {
            let started = Instant::now();
            // What the engine said is shown (status, the page, logs): without the secrets it shows.
            let result = engine_to_probe
                .probe()
                .await
                .map_err(|error| crate::base::redact::hide_secrets(&error.to_string()));
            let health = EngineHealth {
                engine: engine.clone(),
                answering: Some(result.is_ok()),
                checked_at: Some(format_rfc3339(clock.now_millis())),
                probe_millis: Some(started.elapsed().as_millis() as u64),
                error: result.as_ref().err().cloned(),
            };
            match (&result, answered_before) {
                (Ok(()), Some(true)) => {}
                (Ok(()), _) => {
                    info!(%engine, probe_ms = health.probe_millis, "the engine answers")
                }
                (Err(error), Some(false)) => {
                    tracing::debug!(%engine, %error, "the engine still does not answer")
                }
                (Err(error), _) => warn!(%engine, %error, "the engine does not answer"),
            }
            answered_before = Some(result.is_ok());
            cell.set(health);
            tokio::time::sleep(interval).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::engine::{EngineRun, RunTask};
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flaky(AtomicBool);

    #[async_trait]
    impl Engine for Flaky {
        fn describe(&self) -> String {
            "connect sc://h:1".to_string()
        }
        async fn run(&self, _: &RunTask) -> EngineRun {
            unreachable!()
        }
        async fn recover(&self, _: &RunTask) -> EngineRun {
            unreachable!()
        }
        async fn probe(&self) -> Result<(), String> {
            if self.0.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("engine unavailable: refused".to_string())
            }
        }
    }

    #[tokio::test]
    async fn the_last_probe_is_what_readers_see() {
        let runner = Arc::new(Flaky(AtomicBool::new(false)));
        let cell = Arc::new(EngineHealthCell::default());
        spawn_probe(
            runner.clone(),
            cell.clone(),
            Arc::new(FakeClock::new(1_714_564_800_000)),
            Duration::from_millis(20),
        );
        let wait_for = |answering: bool| {
            let cell = cell.clone();
            async move {
                for _ in 0..200 {
                    if cell.get().answering == Some(answering) {
                        return cell.get();
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("no probe found answering = {answering}: {:?}", cell.get());
            }
        };
        let down = wait_for(false).await;
        assert_eq!(down.engine, "connect sc://h:1");
        assert_eq!(down.error.as_deref(), Some("engine unavailable: refused"));
        assert_eq!(down.checked_at.as_deref(), Some("2024-05-01T12:00:00.000Z"));
        runner.0.store(true, Ordering::SeqCst);
        let up = wait_for(true).await;
        assert_eq!(up.error, None);
    }
}
