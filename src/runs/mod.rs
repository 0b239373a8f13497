//! A run, from the claim to its report: what it does and why it started ([`task`]), the rewrite
//! strategies ([`strategy`]), what it reports whatever engine ran it ([`report`]), and the
//! executor pool: the fair line for run slots ([`scheduler`]), its bookkeeping ([`pool`], pure)
//! and the actor that carries it out ([`executor`]).

#[cfg(feature = "service")]
pub mod executor;
pub mod pool;
pub mod report;
pub mod scheduler;
pub mod settings;
pub mod strategy;
pub mod task;
