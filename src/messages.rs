//! Messages that cross actor boundaries.

use actix::Message;

use crate::intake::batch::{InboundMessage, IntakeSummary, Verdict};
use crate::intake::routing::TableIndex;
use crate::model::report::RunOutcome;
use crate::model::task::Trigger;
use crate::ops::status::TableStatus;
use crate::store::StoreError;
use crate::table::accumulator::{Candidate, ClaimTicket, Staged};

pub use crate::runs::pool::{FailureNote, PoolStatus, RunResult};

/// Any message to a table's accumulator, sent through its handle ([`crate::table::handle`]): the
/// accumulator counts what it received, and stops for idleness only once it has received every
/// message sent to it.
#[derive(Debug)]
pub struct Counted<M>(pub M);

impl<M: Message> Message for Counted<M> {
    type Result = M::Result;
}

/// Router → accumulator: count these candidates (duplicates excluded) and return the store ops.
/// The accumulator holds the change until [`Settle`].
#[derive(Debug, Message)]
#[rtype(result = "Result<Staged, StoreError>")]
pub struct Stage {
    pub candidates: Vec<Candidate>,
    /// Whether each candidate's object key has a `seen` entry, as the router looked them up for
    /// the whole group off the actor threads. `None`, or answers older than a commit of the
    /// accumulator's own that changed `seen` entries: it looks them up itself, off its thread.
    pub seen: Option<Vec<bool>>,
}

/// Router → accumulator: the commit carrying the staged change succeeded (or not).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Settle {
    pub committed: bool,
}

/// Router → accumulator, after the store was reopened: read the table's state from the store
/// again (a commit reported failed may have reached the disk after all).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), StoreError>")]
pub struct Reload;

/// Supervisor → pool: a table's accumulator was started again; `claimed_run` is the run its stored
/// state holds a claim for. A slot the pool holds for another run of the table (one whose start
/// the stopped accumulator never answered) is free again.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AccumulatorRestarted {
    pub table: TableIndex,
    pub claimed_run: Option<String>,
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

#[derive(Debug, Clone, thiserror::Error)]
pub enum IntakeError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("table accumulator for {0} is gone")]
    AccumulatorGone(String),
    #[error("state commit task failed: {0}")]
    CommitTask(String),
}

/// Accumulator → pool: this table is due (or a manual run was asked for).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RequestCompaction {
    pub table: TableIndex,
    pub trigger: Trigger,
    /// Run even when nothing is pending (manual runs).
    pub force: bool,
}

/// Pool → accumulator: a run slot is free; claim the pending files for this run.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StartRun {
    pub run_id: String,
    pub trigger: Trigger,
    pub force: bool,
}

/// Accumulator → pool: the claim is durable; start the engine.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Claimed {
    pub table: TableIndex,
    pub ticket: ClaimTicket,
}

/// Accumulator → pool: nothing was claimed for that run (nothing pending, or the claim failed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct NotClaimed {
    pub table: TableIndex,
    pub run_id: String,
}

/// Accumulator → pool, at start-up: a run of a previous process was in flight; find its end.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RecoverRun {
    pub table: TableIndex,
    pub ticket: ClaimTicket,
}

/// Pool → accumulator: the run ended; settle the table's state.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RunFinished {
    pub run_id: String,
    pub outcome: RunOutcome,
    /// Which engine ran it (`None`: the pool does not know, e.g. a run of an earlier process).
    pub ran_on: Option<crate::model::report::RanOn>,
}

/// Runs a compaction of one table now, whatever its thresholds — or, with trigger `reconcile`,
/// rebuilds its pending state from the committed metadata — and answers when it ended.
#[derive(Debug, Message)]
#[rtype(result = "Result<RunResult, String>")]
pub struct CompactNow {
    pub table: TableIndex,
    /// `Manual` or `Reconcile`.
    pub trigger: Trigger,
}

/// Answers once no run is in flight or waiting.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WaitIdle;

/// The pool's view: runs in flight and tables waiting for a slot.
#[derive(Debug, Message)]
#[rtype(result = "PoolStatus")]
pub struct GetPoolStatus;

/// A reload: the table's settings now, and whether the configuration still has it. An inactive
/// table keeps its state and its run in flight, but asks for no more runs.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UpdateSpec {
    pub spec: std::sync::Arc<crate::config::TableSpec>,
    pub active: bool,
}

/// `icepack forget`: delete everything stored about a table the configuration no longer has.
#[derive(Debug, Message)]
#[rtype(result = "Result<crate::store::ForgetSummary, String>")]
pub struct Forget;

/// A reload: the table map to work from now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetTableMap(pub std::sync::Arc<crate::table::handle::TableHandles>);
