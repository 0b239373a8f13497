//! The actors: thin shells that move messages between the plain components.
//!
//! SQS poller → intake router → one table accumulator per table → compaction executor pool → notifier;
//! the supervisor restarts a table's accumulator that stopped.

pub mod accumulator;
pub mod executor;
pub mod messages;
pub mod notifier;
pub mod poller;
pub mod router;
pub mod supervisor;
pub mod workers;

/// The pipeline's tables, each with the address of its accumulator.
pub type TableMap = crate::table_map::TableMap<actix::Addr<accumulator::TableAccumulatorActor>>;
