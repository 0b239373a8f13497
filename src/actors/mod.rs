//! The actors: thin shells that move messages between the plain components.
//!
//! SQS poller → intake router → one table accumulator per table → compaction executor pool → notifier;
//! the supervisor restarts a table's accumulator that stopped. An idle table has no live
//! accumulator: its handle starts one when the table has something to do, the waker when its
//! scheduled work is due.

pub mod accumulator;
pub mod executor;
pub mod handle;
pub mod messages;
pub mod notifier;
pub mod poller;
pub mod router;
pub mod supervisor;
pub mod waker;
pub mod workers;

/// The pipeline's tables, each with the handle of its accumulator.
pub type TableMap = crate::table_map::TableMap<handle::TableHandle>;
