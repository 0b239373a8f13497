//! Whether the state store takes writes. After a failed commit intake stops receiving (messages
//! stay in the queue, their receive counts do not climb towards the dead-letter queue), the
//! router probes the store with back-off, and receiving resumes when a probe commit succeeds.

use serde::Serialize;
use tokio::sync::watch;

use crate::base::clock::UnixMillis;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// `false` from a failed commit until a probe commit succeeds.
    pub writable: bool,
    /// When it last changed (0: never).
    pub since_millis: UnixMillis,
    /// What the failed commit or the last failed probe said; `None` while writable.
    pub error: Option<String>,
    /// Probes since it became unwritable.
    pub probes: u64,
}

impl Default for StoreHealth {
    fn default() -> Self {
        StoreHealth {
            writable: true,
            since_millis: 0,
            error: None,
            probes: 0,
        }
    }
}

/// The shared view of [`StoreHealth`]; pollers wait on it.
#[derive(Debug)]
pub struct StoreGate {
    health: watch::Sender<StoreHealth>,
}

impl Default for StoreGate {
    fn default() -> Self {
        StoreGate {
            health: watch::Sender::new(StoreHealth::default()),
        }
    }
}

impl StoreGate {
    pub fn get(&self) -> StoreHealth {
        self.health.borrow().clone()
    }

    pub fn is_writable(&self) -> bool {
        self.health.borrow().writable
    }

    /// A commit failed: closes the gate. Returns whether it was open.
    pub fn close(&self, error: &str, now: UnixMillis) -> bool {
        let mut was_open = false;
        self.health.send_modify(|health| {
            was_open = health.writable;
            if health.writable {
                health.writable = false;
                health.since_millis = now;
                health.probes = 0;
            }
            health.error = Some(error.to_string());
        });
        was_open
    }

    /// A probe failed: the gate stays closed.
    pub fn probe_failed(&self, error: &str) {
        self.health.send_modify(|health| {
            health.probes += 1;
            health.error = Some(error.to_string());
        });
    }

    /// A probe commit succeeded: opens the gate.
    pub fn open(&self, now: UnixMillis) {
        self.health.send_modify(|health| {
            *health = StoreHealth {
                writable: true,
                since_millis: now,
                error: None,
                probes: health.probes + 1,
            }
        });
    }

    /// Waits until the store takes writes (at once when it does).
    pub async fn writable(&self) {
        let mut receiver = self.health.subscribe();
        // The sender lives as long as `self`: the wait cannot fail while it is borrowed.
        let _ = receiver.wait_for(|health| health.writable).await;
    }

    /// Waits until the store refuses writes (at once when it does).
    pub async fn refusing(&self) {
        let mut receiver = self.health.subscribe();
        let _ = receiver.wait_for(|health| !health.writable).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_gate_holds_waiters_until_it_opens() {
        let gate = std::sync::Arc::new(StoreGate::default());
        assert!(gate.is_writable());
        assert!(gate.close("No space left on device", 10));
        assert!(!gate.close("still full", 11), "closed already");
        assert_eq!(gate.get().since_millis, 10);
        assert_eq!(gate.get().error.as_deref(), Some("still full"));
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.writable().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        gate.probe_failed("full");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        gate.open(20);
        waiter.await.unwrap();
        let health = gate.get();
        assert!(health.writable && health.error.is_none());
        assert_eq!((health.since_millis, health.probes), (20, 2));
    }

    #[tokio::test]
    async fn a_wait_for_refusal_ends_when_the_gate_closes() {
        let gate = std::sync::Arc::new(StoreGate::default());
        let refused = tokio::spawn({
            let gate = gate.clone();
            async move { gate.refusing().await }
        });
        tokio::task::yield_now().await;
        assert!(!refused.is_finished(), "the store takes writes");
        gate.close("No space left on device", 10);
        refused.await.unwrap();
        // Closed already: at once.
        gate.refusing().await;
    }
}
