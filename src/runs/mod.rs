//! A run, from the claim to its report: the executor pool, the fair line for run slots
//! ([`scheduler`]), its bookkeeping ([`pool`], pure) and the actor that carries it out
//! ([`executor`]). What a run does and why, its strategies and what it reports are the
//! vocabulary of every layer: `crate::model` (`task`, `strategy`, `report`), re-exported here.

#[cfg(feature = "service")]
pub mod executor;
pub mod pool;
pub mod scheduler;
pub mod settings;

pub use crate::model::{report, strategy, task};
