//! From a bucket's events to durable counts: the event shapes ([`event`]: S3, SNS, EventBridge,
//! MinIO), the queue behind a trait ([`queue`]: SQS, in memory), which table a record is for
//! ([`routing`]), a batch classified and planned ([`batch`]), and the actors that carry it: the
//! [`poller`] receives and deletes, the [`router`] stages each record with its table's accumulator
//! and commits the batch in one synced write. [`bridge`] turns MinIO webhooks into SQS messages.

pub mod batch;
#[cfg(feature = "service")]
pub mod bridge;
pub mod event;
#[cfg(feature = "service")]
pub mod poller;
pub mod queue;
#[cfg(feature = "service")]
pub mod router;
pub mod routing;
