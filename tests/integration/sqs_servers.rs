//! The SQS behaviour icepack relies on, through its own adapter (`SqsQueue` behind the `Queue`
//! trait), checked against two independent servers: moto and ElasticMQ. One server per test
//! (an ElasticMQ is a JVM start), one queue per case, the cases run concurrently.
//!
//! What the adapter promises (src/queue/sqs.rs, src/queue/mod.rs): `receive` reports
//! `ApproximateReceiveCount`; `extend_visibility` hides messages for another timeout from now;
//! `delete` and `extend_visibility` answer a batch with a bad entry by naming that entry (by its
//! message id) and doing the rest.

use crate::support;

use std::time::{Duration, Instant};

use icepack::intake::queue::{Queue, Receipt, ReceivedMessage};
use support::{unique, wait_until, ElasticMq, Moto, QueueServer, SqsEndpoint};

#[tokio::test]
async fn the_adapter_keeps_sqs_semantics_on_moto() {
    adapter_semantics::<Moto>().await;
}

#[tokio::test]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn the_adapter_keeps_sqs_semantics_on_elasticmq() {
    adapter_semantics::<ElasticMq>().await;
}

async fn adapter_semantics<S: QueueServer>() {
    let Some(server) = S::start_for("sqs_servers::adapter_semantics").await else {
        return;
    };
    tokio::join!(
        extended_visibility_holds_off_redelivery_until_it_ends(&server, S::NAME),
        a_batch_delete_with_a_bad_receipt_deletes_the_rest_and_names_it(&server, S::NAME),
        a_message_is_dead_lettered_after_exactly_max_receive_count_receives(&server, S::NAME),
    );
}

/// A receipt no server ever handed out, for batch calls with one bad entry.
fn invalid_receipt() -> Receipt {
    Receipt {
        id: "never-received".to_string(),
        receipt_handle: "not-a-receipt-handle".to_string(),
    }
}

/// Receives until `count` messages are in hand (a receive may return fewer than are visible).
async fn receive_all(
    queue: &impl Queue,
    count: usize,
    visibility_timeout_seconds: i32,
) -> Vec<ReceivedMessage> {
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.len() < count && Instant::now() < deadline {
        received.extend(
            queue
                .receive(10, 1, visibility_timeout_seconds)
                .await
                .unwrap(),
        );
    }
    assert_eq!(received.len(), count, "{received:?}");
    received
}

/// A message received with a 2 s visibility timeout and at once extended to 6 s is not redelivered
/// when the 2 s have passed, but is once the 6 s have (with `ApproximateReceiveCount` 2). The
/// extension's batch also carries an invalid receipt: reported by its id, the good one extended.
async fn extended_visibility_holds_off_redelivery_until_it_ends(server: &SqsEndpoint, name: &str) {
    let queue_url = server.create_queue(&unique("visibility")).await;
    server.send(&queue_url, "extend me").await;
    let queue = server.sqs_queue(&queue_url).await;
    let received = receive_all(&queue, 1, 2).await;
    assert_eq!(received[0].receive_count, 1, "{name}: {received:?}");
    let extended_at = Instant::now();
    let failed = queue
        .extend_visibility(&[Receipt::from(&received[0]), invalid_receipt()], 6)
        .await
        .unwrap_or_else(|error| panic!("{name}: one bad entry fails the whole batch: {error}"));
    assert_eq!(
        failed
            .iter()
            .map(|entry| entry.id.as_str())
            .collect::<Vec<_>>(),
        ["never-received"],
        "{name}: only the invalid receipt is refused, by its id: {failed:?}"
    );

    // A long poll spanning the original deadline (2 s) by 2 s: nothing comes back.
    let early = queue.receive(10, 4, 30).await.unwrap();
    assert!(
        early.is_empty(),
        "{name}: redelivered {:?} after {:?}, before the extension ended",
        early,
        extended_at.elapsed()
    );
    let redelivered = wait_until(
        "the message to come back after its extension",
        Duration::from_secs(20),
        || async {
            let messages = queue.receive(10, 1, 30).await.unwrap();
            (!messages.is_empty()).then_some(messages)
        },
    )
    .await;
    let after = extended_at.elapsed();
    assert!(
        after >= Duration::from_millis(5_500),
        "{name}: back after {after:?}, the extension was 6 s"
    );
    assert_eq!(redelivered.len(), 1, "{name}: {redelivered:?}");
    assert_eq!(redelivered[0].id, received[0].id, "{name}");
    assert_eq!(redelivered[0].body, "extend me", "{name}");
    assert_eq!(redelivered[0].receive_count, 2, "{name}: {redelivered:?}");
    let failed = queue
        .delete(&[Receipt::from(&redelivered[0])])
        .await
        .unwrap();
    assert!(failed.is_empty(), "{name}: {failed:?}");
    assert_eq!(server.queue_depth(&queue_url).await, 0, "{name}");
}

/// `DeleteMessageBatch` with an invalid receipt among three good ones: the call succeeds, the
/// three are gone (neither visible nor in flight), and the bad entry comes back by its id.
async fn a_batch_delete_with_a_bad_receipt_deletes_the_rest_and_names_it(
    server: &SqsEndpoint,
    name: &str,
) {
    let queue_url = server.create_queue(&unique("partial-delete")).await;
    for body in ["one", "two", "three"] {
        server.send(&queue_url, body).await;
    }
    let queue = server.sqs_queue(&queue_url).await;
    let received = receive_all(&queue, 3, 30).await;
    let mut receipts: Vec<Receipt> = received.iter().map(Receipt::from).collect();
    receipts.insert(1, invalid_receipt());
    let failed = queue
        .delete(&receipts)
        .await
        .unwrap_or_else(|error| panic!("{name}: one bad entry fails the whole batch: {error}"));
    assert_eq!(failed.len(), 1, "{name}: {failed:?}");
    assert_eq!(failed[0].id, "never-received", "{name}: {failed:?}");
    assert_eq!(
        failed[0].code, "ReceiptHandleIsInvalid",
        "{name}: {failed:?}"
    );
    assert_eq!(
        server.queue_depth(&queue_url).await,
        0,
        "{name}: the good entries are deleted"
    );
}

/// With `maxReceiveCount` 3 a message nobody deletes is received exactly three times (receive
/// counts 1, 2, 3), then it is in the dead-letter queue, body unchanged, and the queue is empty.
async fn a_message_is_dead_lettered_after_exactly_max_receive_count_receives(
    server: &SqsEndpoint,
    name: &str,
) {
    let (queue_url, dlq_url) = server.create_queue_with_dlq(&unique("redrive"), 3).await;
    server.send(&queue_url, "poison").await;
    let queue = server.sqs_queue(&queue_url).await;
    let mut receive_counts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while server.queue_depth(&dlq_url).await == 0 {
        assert!(
            Instant::now() < deadline,
            "{name}: not dead-lettered after receives {receive_counts:?}"
        );
        for message in queue.receive(10, 1, 1).await.unwrap() {
            assert_eq!(message.body, "poison", "{name}");
            receive_counts.push(message.receive_count);
        }
    }
    // Receives after the move find nothing: the message left the queue for good.
    assert!(queue.receive(10, 2, 1).await.unwrap().is_empty(), "{name}");
    assert_eq!(receive_counts, [1, 2, 3], "{name}: receives from the queue");
    assert_eq!(server.queue_depth(&queue_url).await, 0, "{name}");
    assert_eq!(
        server.receive_bodies(&dlq_url).await,
        ["poison"],
        "{name}: the dead-letter queue"
    );
}
