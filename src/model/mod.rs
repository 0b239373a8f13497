//! The vocabulary every layer above speaks, with no behaviour that needs another layer: what a
//! run does and why ([`task`]), its strategies ([`strategy`]), what it reports whatever engine ran
//! it ([`report`]), a table's durable state ([`state`]) and small-files series ([`series`]) as the
//! store keeps them, a partition spec's fields ([`partition`]), and the thresholds and pacing a
//! table is configured with ([`policy`]). Below `config` and `store`, which read and write these
//! types, and above `base` only.

pub mod partition;
pub mod policy;
pub mod preview;
pub mod report;
pub mod series;
pub mod state;
pub mod strategy;
pub mod task;
