//! Messages that cross actor boundaries.

use actix::Message;

use crate::accumulator::{Candidate, Staged};
use crate::intake::{InboundMessage, IntakeSummary, Verdict};
use crate::status::TableStatus;
use crate::store::StoreError;

/// Router → accumulator: count these candidates (duplicates excluded) and return the store ops.
/// The accumulator holds the change until [`Settle`].
#[derive(Debug, Message)]
#[rtype(result = "Result<Staged, StoreError>")]
pub struct Stage {
    pub candidates: Vec<Candidate>,
}

/// Router → accumulator: the commit carrying the staged change succeeded (or not).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Settle {
    pub committed: bool,
}

/// Re-evaluate thresholds now (sent by the accumulator's own timer, or by tests).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Tick;

/// The table's current status.
#[derive(Debug, Message)]
#[rtype(result = "TableStatus")]
pub struct GetStatus;

/// Poller (or `replay`) → router: a batch of messages to count durably.
#[derive(Debug, Message)]
#[rtype(result = "Result<IngestReport, IntakeError>")]
pub struct Ingest {
    pub messages: Vec<InboundMessage>,
}

/// What became of a batch once its effects are durable.
#[derive(Debug, Clone)]
pub struct IngestReport {
    /// One per message, in order.
    pub verdicts: Vec<Verdict>,
    pub summary: IntakeSummary,
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("table accumulator for {0} is gone")]
    AccumulatorGone(String),
    #[error("state commit task failed: {0}")]
    CommitTask(String),
}
