//! Whether the service is ready, and if not why: a pure function of what the state store's gate,
//! every polled queue, the engine probe and the pipeline's actors report at one moment. `/readyz`
//! gathers the observation and answers 503 with the problems this returns.

use std::time::Duration;

use crate::base::clock::{format_rfc3339, UnixMillis};
use crate::engine::EngineHealth;
use crate::intake::queue::QueueSnapshot;
use crate::store::StoreHealth;

/// What readiness is decided from.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub store: StoreHealth,
    pub engine: EngineHealth,
    /// How recent each queue's last successful receive must be; `None` when nothing polls
    /// (one-shot commands, tests).
    pub queue_window: Option<Duration>,
    /// Every queue being polled, as the registry has it.
    pub queues: Vec<QueueSnapshot>,
    /// Actors of the pipeline whose mailbox is closed, by what they are.
    pub actors_down: Vec<String>,
}

/// Why the service is not ready; empty when it is.
pub fn problems(observed: &Observation, now: UnixMillis) -> Vec<String> {
    let mut problems = Vec::new();
    for actor in &observed.actors_down {
        problems.push(format!("actor stopped: {actor}"));
    }
    let store = &observed.store;
    if !store.writable {
        problems.push(format!(
            "the state store refuses writes since {} ({}); receiving is paused, {} probe(s) so far",
            format_rfc3339(store.since_millis),
            store.error.as_deref().unwrap_or("a commit failed"),
            store.probes
        ));
    }
    for queue in &observed.queues {
        if queue.pollers_lost > 0 {
            problems.push(format!(
                "queue {}: {} of its {} poller(s) stopped unexpectedly (a restart starts them again)",
                queue.queue, queue.pollers_lost, queue.pollers
            ));
        }
    }
    if let Some(window) = observed.queue_window {
        if observed.queues.is_empty() {
            problems.push("no queue is polled yet".to_string());
        }
        // While the store refuses writes no queue is received from on purpose: that is the
        // store's problem, already reported.
        if store.writable {
            for queue in &observed.queues {
                problems.extend(queue_problem(queue, window, now));
            }
        }
    }
    let engine = &observed.engine;
    if engine.answering == Some(false) {
        problems.push(format!(
            "the Spark engine ({}) does not answer: {}",
            engine.engine,
            engine.error.as_deref().unwrap_or("no answer")
        ));
    }
    problems
}

/// A queue not reached within `window`: since its last successful receive, or since its pollers
/// started when it has never been reached (until then it is not ready either).
pub fn queue_problem(queue: &QueueSnapshot, window: Duration, now: UnixMillis) -> Option<String> {
    let reference = queue.last_receive_millis.unwrap_or(queue.since_millis);
    let stale = now - reference > window.as_millis() as i64;
    // The last error says why only when it came after the last success.
    let last_error = queue
        .last_error
        .as_ref()
        .filter(|error| {
            queue
                .last_receive_millis
                .is_none_or(|last| error.at_millis >= last)
        })
        .map(|error| format!(" (last error: {}: {})", error.operation, error.message))
        .unwrap_or_default();
    let seconds = window.as_secs();
    match (queue.last_receive_millis, stale) {
        (Some(_), false) => None,
        (Some(_), true) => Some(format!(
            "queue {}: no successful receive in the last {seconds} s{last_error}",
            queue.queue
        )),
        (None, false) => Some(format!(
            "queue {} has not been reached yet{last_error}",
            queue.queue
        )),
        (None, true) => Some(format!(
            "queue {} has not been reached yet: no successful receive in the {seconds} s since its pollers started{last_error}",
            queue.queue
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::queue::LastError;

    const START: UnixMillis = 1_714_564_800_000;
    const WINDOW: Duration = Duration::from_secs(60);

    fn queue(name: &str, last_receive: Option<UnixMillis>) -> QueueSnapshot {
        QueueSnapshot {
            queue: name.to_string(),
            tenant: None,
            since_millis: START,
            pollers: 2,
            pollers_lost: 0,
            last_receive_millis: last_receive,
            last_error: None,
            messages_received: 0,
            messages_deleted: 0,
            messages_invalid: 0,
            delete_failures: 0,
            errors: Default::default(),
        }
    }

    fn observing(queues: Vec<QueueSnapshot>) -> Observation {
        Observation {
            queue_window: Some(WINDOW),
            queues,
            ..Observation::default()
        }
    }

    fn unreachable(at_millis: UnixMillis) -> Option<LastError> {
        Some(LastError {
            operation: "ReceiveMessage",
            message: "AWS.SimpleQueueService.NonExistentQueue".to_string(),
            at_millis,
        })
    }

    #[test]
    fn of_two_queues_only_the_stale_one_is_named_with_its_last_error() {
        let now = START + 600_000;
        let mut stale = queue("landing-b", Some(now - 90_000));
        stale.last_error = unreachable(now - 5_000);
        let observed = observing(vec![queue("landing-a", Some(now - 2_000)), stale]);
        assert_eq!(
            problems(&observed, now),
            ["queue landing-b: no successful receive in the last 60 s (last error: ReceiveMessage: AWS.SimpleQueueService.NonExistentQueue)"]
        );
    }

    #[test]
    fn fresh_queues_are_no_problem_and_an_error_before_the_last_receive_is_not_shown() {
        let now = START + 600_000;
        let mut recovered = queue("landing-b", Some(now - 90_000));
        recovered.last_error = unreachable(now - 100_000);
        assert!(problems(
            &observing(vec![
                queue("landing-a", Some(now - 59_000)),
                queue("landing-b", Some(now - 1))
            ]),
            now
        )
        .is_empty());
        assert_eq!(
            problems(&observing(vec![recovered]), now),
            ["queue landing-b: no successful receive in the last 60 s"]
        );
    }

    #[test]
    fn a_removed_queue_is_not_reported() {
        let now = START + 600_000;
        // landing-b was stale; a reload removed it, so the registry no longer has it.
        let before = observing(vec![
            queue("landing-a", Some(now - 1_000)),
            queue("landing-b", Some(START)),
        ]);
        assert_eq!(problems(&before, now).len(), 1);
        let after = observing(vec![queue("landing-a", Some(now - 1_000))]);
        assert!(problems(&after, now).is_empty());
    }

    #[test]
    fn a_queue_never_reached_is_not_ready_and_says_so_after_the_grace() {
        let mut never = queue("landing-a", None);
        never.last_error = unreachable(START + 1_000);
        let observed = observing(vec![never]);
        assert_eq!(
            problems(&observed, START + 10_000),
            ["queue landing-a has not been reached yet (last error: ReceiveMessage: AWS.SimpleQueueService.NonExistentQueue)"]
        );
        assert_eq!(
            problems(&observed, START + 61_000),
            ["queue landing-a has not been reached yet: no successful receive in the 60 s since its pollers started (last error: ReceiveMessage: AWS.SimpleQueueService.NonExistentQueue)"]
        );
        assert_eq!(
            problems(&observing(Vec::new()), START),
            ["no queue is polled yet"]
        );
    }

    #[test]
    fn a_closed_store_pauses_receiving_and_is_the_one_queue_problem() {
        let now = START + 600_000;
        let mut observed = observing(vec![queue("landing-a", Some(START))]);
        observed.store = StoreHealth {
            writable: false,
            since_millis: START + 100_000,
            error: Some("No space left on device".to_string()),
            probes: 3,
        };
        assert_eq!(
            problems(&observed, now),
            ["the state store refuses writes since 2024-05-01T12:01:40.000Z (No space left on device); receiving is paused, 3 probe(s) so far"]
        );
    }

    #[test]
    fn stopped_actors_lost_pollers_and_a_silent_engine_are_named() {
        let now = START + 1_000;
        let mut lost = queue("landing-a", Some(now));
        lost.pollers_lost = 1;
        let observed = Observation {
            actors_down: vec!["the intake router".to_string()],
            engine: EngineHealth {
                engine: "connect sc://spark:15002".to_string(),
                answering: Some(false),
                error: Some("connection refused".to_string()),
                ..EngineHealth::default()
            },
            ..observing(vec![lost])
        };
        assert_eq!(
            problems(&observed, now),
            [
                "actor stopped: the intake router",
                "queue landing-a: 1 of its 2 poller(s) stopped unexpectedly (a restart starts them again)",
                "the Spark engine (connect sc://spark:15002) does not answer: connection refused",
            ]
        );
        let nothing_polls = Observation {
            queue_window: None,
            ..Observation::default()
        };
        assert!(problems(&nothing_polls, now).is_empty());
    }
}
