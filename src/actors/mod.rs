//! The actors: thin shells that move messages between the plain components.
//!
//! SQS poller → intake router → one table accumulator per table.

pub mod accumulator;
pub mod messages;
pub mod poller;
pub mod router;
