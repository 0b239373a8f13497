//! What each polled queue reports about itself — messages received and deleted, failed calls, its
//! last successful receive and last error — under a label an operator recognises: the queue's name
//! from its URL, longer only where two configured queues share it, never the URL's credentials.
//! `/metrics`, `/readyz` and the status API read it; a queue a reload removes leaves it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::QueueError;
use crate::base::clock::UnixMillis;

/// The longest error text kept per queue (an SDK error with its context can run long).
const MAX_ERROR_CHARS: usize = 300;

/// A failed call to a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    pub operation: &'static str,
    pub message: String,
    pub at_millis: UnixMillis,
}

/// One queue's counters and reachability, shared by its pollers.
#[derive(Debug, Default)]
pub struct QueueHealth {
    label: Mutex<String>,
    pub messages_received: AtomicU64,
    pub messages_deleted: AtomicU64,
    /// Left in the queue because they (or a record) could not be parsed.
    pub messages_invalid: AtomicU64,
    /// Counted messages the queue refused to delete.
    pub delete_failures: AtomicU64,
    /// Failed calls by operation.
    errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Unix millis of the last successful receive (0: none yet).
    last_receive_millis: AtomicU64,
    last_error: Mutex<Option<LastError>>,
    /// Pollers that stopped while nobody stopped their queue (a panic).
    pollers_lost: AtomicU64,
}

impl QueueHealth {
    /// A queue not registered anywhere (tests, benchmarks, one-shot pollers).
    pub fn named(label: &str) -> Arc<QueueHealth> {
        Arc::new(QueueHealth {
            label: Mutex::new(label.to_string()),
            ..QueueHealth::default()
        })
    }

    pub fn label(&self) -> String {
        self.label.lock().expect("queue label").clone()
    }

    /// A receive succeeded with `count` messages.
    pub fn received(&self, count: usize, now: UnixMillis) {
        self.last_receive_millis
            .store(now.max(0) as u64, Ordering::Relaxed);
        self.messages_received
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// A call failed.
    pub fn failed(&self, error: &QueueError, now: UnixMillis) {
        *self
            .errors
            .lock()
            .expect("queue errors")
            .entry(error.operation)
            .or_insert(0) += 1;
        let mut message: String = error.message.chars().take(MAX_ERROR_CHARS).collect();
        if message.len() < error.message.len() {
            message.push('…');
        }
        *self.last_error.lock().expect("queue last error") = Some(LastError {
            operation: error.operation,
            message,
            at_millis: now,
        });
    }

    /// Failed calls of `operation` so far.
    pub fn errors(&self, operation: &str) -> u64 {
        self.errors
            .lock()
            .expect("queue errors")
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    pub fn poller_lost(&self) {
        self.pollers_lost.fetch_add(1, Ordering::Relaxed);
    }

    pub fn pollers_lost(&self) -> u64 {
        self.pollers_lost.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<LastError> {
        self.last_error.lock().expect("queue last error").clone()
    }

    pub fn last_receive_millis(&self) -> Option<UnixMillis> {
        match self.last_receive_millis.load(Ordering::Relaxed) {
            0 => None,
            millis => Some(millis as UnixMillis),
        }
    }
}

/// One registered queue as a reader sees it at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSnapshot {
    pub queue: String,
    pub tenant: Option<String>,
    /// When its pollers were first started: the grace for a first receive counts from here.
    pub since_millis: UnixMillis,
    pub pollers: u32,
    pub pollers_lost: u64,
    pub last_receive_millis: Option<UnixMillis>,
    pub last_error: Option<LastError>,
    pub messages_received: u64,
    pub messages_deleted: u64,
    pub messages_invalid: u64,
    pub delete_failures: u64,
    pub errors: BTreeMap<&'static str, u64>,
}

#[derive(Debug)]
struct Registered {
    tenant: Option<String>,
    since_millis: UnixMillis,
    pollers: u32,
    health: Arc<QueueHealth>,
}

/// The queues being polled, by URL (the URL itself is never shown).
#[derive(Debug, Default)]
pub struct QueueRegistry {
    queues: Mutex<BTreeMap<String, Registered>>,
}

impl QueueRegistry {
    /// Registers a queue whose `pollers` pollers start now. A queue registered again (its pollers
    /// restarted with new settings) keeps its counters, its first start and its last receive.
    pub fn register(
        &self,
        url: &str,
        label: &str,
        tenant: Option<String>,
        pollers: u32,
        now: UnixMillis,
    ) -> Arc<QueueHealth> {
        let mut queues = self.queues.lock().expect("queue registry");
        let registered = queues.entry(url.to_string()).or_insert_with(|| Registered {
            tenant: None,
            since_millis: now,
            pollers,
            health: Arc::new(QueueHealth::default()),
        });
        registered.tenant = tenant;
        registered.pollers = pollers;
        registered.health.pollers_lost.store(0, Ordering::Relaxed);
        *registered.health.label.lock().expect("queue label") = label.to_string();
        registered.health.clone()
    }

    /// Forgets every queue whose URL `keep` refuses: a reload removed it.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.queues
            .lock()
            .expect("queue registry")
            .retain(|url, _| keep(url));
    }

    /// Gives the registered queues the labels of `labels` (by URL), as a reload computed them.
    pub fn relabel(&self, labels: &BTreeMap<String, String>) {
        for (url, registered) in self.queues.lock().expect("queue registry").iter() {
            if let Some(label) = labels.get(url) {
                *registered.health.label.lock().expect("queue label") = label.clone();
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queues.lock().expect("queue registry").is_empty()
    }

    /// Every registered queue, by label.
    pub fn snapshot(&self) -> Vec<QueueSnapshot> {
        let mut snapshots: Vec<QueueSnapshot> = self
            .queues
            .lock()
            .expect("queue registry")
            .values()
            .map(|registered| {
                let health = &registered.health;
                QueueSnapshot {
                    queue: health.label(),
                    tenant: registered.tenant.clone(),
                    since_millis: registered.since_millis,
                    pollers: registered.pollers,
                    pollers_lost: health.pollers_lost(),
                    last_receive_millis: health.last_receive_millis(),
                    last_error: health.last_error(),
                    messages_received: health.messages_received.load(Ordering::Relaxed),
                    messages_deleted: health.messages_deleted.load(Ordering::Relaxed),
                    messages_invalid: health.messages_invalid.load(Ordering::Relaxed),
                    delete_failures: health.delete_failures.load(Ordering::Relaxed),
                    errors: health.errors.lock().expect("queue errors").clone(),
                }
            })
            .collect();
        snapshots.sort_by(|a, b| a.queue.cmp(&b.queue));
        snapshots
    }
}

/// A label per queue URL: the URL's last path segment (an SQS queue's name); where two URLs share
/// it, more of the path (`123456789012/landing`); then the host as well; then a number. Never the
/// scheme, user information or query of the URL.
pub fn queue_labels<'a>(urls: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let candidates: BTreeMap<&str, Vec<String>> = urls
        .into_iter()
        .map(|url| (url, label_candidates(url)))
        .collect();
    // How many path segments (from the end) each label takes, 1 first.
    let mut level: BTreeMap<&str, usize> = candidates.keys().map(|url| (*url, 0)).collect();
    loop {
        let labels: Vec<(&str, &String)> = candidates
            .iter()
            .map(|(url, options)| (*url, &options[level[url]]))
            .collect();
        let mut uses: HashMap<&String, usize> = HashMap::new();
        for (_, label) in &labels {
            *uses.entry(*label).or_insert(0) += 1;
        }
        let mut longer = false;
        for (url, label) in &labels {
            if uses[label] > 1 && level[url] + 1 < candidates[url].len() {
                *level.get_mut(url).expect("every url has a level") += 1;
                longer = true;
            }
        }
        if !longer {
            break;
        }
    }
    let mut labels = BTreeMap::new();
    let mut taken: HashMap<String, usize> = HashMap::new();
    for (url, options) in &candidates {
        let label = &options[level[url]];
        let seen = taken.entry(label.clone()).or_insert(0);
        *seen += 1;
        let label = if *seen == 1 {
            label.clone()
        } else {
            format!("{label}#{seen}")
        };
        labels.insert(url.to_string(), label);
    }
    labels
}

/// The labels a URL can have, shortest first: 1, 2, … path segments, then host and path.
fn label_candidates(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    // `user:password@host`: only the host.
    let host = authority.rsplit('@').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    let mut candidates: Vec<String> = (1..=segments.len())
        .map(|count| segments[segments.len() - count..].join("/"))
        .collect();
    if !host.is_empty() {
        candidates.push(
            std::iter::once(host)
                .chain(segments.iter().copied())
                .collect::<Vec<_>>()
                .join("/"),
        );
    }
    if candidates.is_empty() {
        candidates.push("queue".to_string());
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(urls: &[&str]) -> Vec<String> {
        let labels = queue_labels(urls.iter().copied());
        urls.iter().map(|url| labels[*url].clone()).collect()
    }

    #[test]
    fn a_queue_is_labelled_by_its_name_and_longer_only_where_names_collide() {
        assert_eq!(
            labels(&[
                "https://sqs.eu-west-1.amazonaws.com/111111111111/landing-a",
                "https://sqs.eu-west-1.amazonaws.com/111111111111/landing-b",
            ]),
            ["landing-a", "landing-b"]
        );
        assert_eq!(
            labels(&[
                "https://sqs.eu-west-1.amazonaws.com/111111111111/landing",
                "https://sqs.eu-west-1.amazonaws.com/222222222222/landing",
                "https://sqs.eu-west-1.amazonaws.com/222222222222/other",
            ]),
            ["111111111111/landing", "222222222222/landing", "other"]
        );
        assert_eq!(
            labels(&[
                "https://sqs.eu-west-1.amazonaws.com/111111111111/landing",
                "https://sqs.us-east-1.amazonaws.com/111111111111/landing",
            ]),
            [
                "sqs.eu-west-1.amazonaws.com/111111111111/landing",
                "sqs.us-east-1.amazonaws.com/111111111111/landing"
            ]
        );
    }

    #[test]
    fn credentials_queries_and_schemes_never_reach_a_label() {
        let label = labels(&[
            "https://user:SECRET@sqs.local/1/landing?token=SECRET2",
            "http://sqs.other/1/landing",
        ]);
        assert_eq!(label, ["sqs.local/1/landing", "sqs.other/1/landing"]);
        assert!(label.iter().all(|label| !label.contains("SECRET")));
        // The same host and path under two schemes: numbered.
        assert_eq!(
            labels(&["http://h/1/q", "https://h/1/q"]),
            ["h/1/q", "h/1/q#2"]
        );
        assert_eq!(labels(&["memory://"]), ["queue"]);
    }

    #[test]
    fn a_queue_registered_again_keeps_its_counters_and_a_removed_one_leaves() {
        let registry = QueueRegistry::default();
        let health = registry.register("u1", "landing-a", None, 2, 1_000);
        health.received(3, 2_000);
        registry.register("u2", "landing-b", Some("b".to_string()), 1, 1_500);
        let again = registry.register("u1", "111/landing-a", None, 4, 9_000);
        assert!(Arc::ptr_eq(&health, &again));
        let snapshot = registry.snapshot();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(snapshot[0].queue, "111/landing-a");
        assert_eq!(snapshot[0].since_millis, 1_000, "the first start stays");
        assert_eq!(snapshot[0].pollers, 4);
        assert_eq!(snapshot[0].messages_received, 3);
        assert_eq!(snapshot[0].last_receive_millis, Some(2_000));
        registry.retain(|url| url != "u1");
        assert_eq!(registry.snapshot().len(), 1);
        assert_eq!(registry.snapshot()[0].queue, "landing-b");
        assert_eq!(registry.snapshot()[0].tenant.as_deref(), Some("b"));
    }

    #[test]
    fn the_last_error_is_kept_short() {
        let health = QueueHealth::named("q");
        health.failed(
            &QueueError {
                operation: "ReceiveMessage",
                message: "é".repeat(1_000),
                detail: String::new(),
            },
            5,
        );
        let error = health.last_error().unwrap();
        assert_eq!(error.message.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(error.message.ends_with('…'));
        assert_eq!((error.operation, error.at_millis), ("ReceiveMessage", 5));
        assert_eq!(health.errors("ReceiveMessage"), 1);
    }
}
