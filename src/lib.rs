//! icepack keeps Apache Iceberg tables healthy: it counts the small files S3 event notifications
//! announce, per table and durably, and compacts a table when its thresholds are crossed.

pub mod accumulator;
#[cfg(feature = "service")]
pub mod actors;
pub mod backoff;
pub mod board;
#[cfg(feature = "service")]
pub mod bridge;
pub mod clock;
pub mod compaction;
pub mod config;
pub mod connect_endpoint;
#[cfg(feature = "service")]
pub mod control;
pub mod engine;
pub mod event;
pub mod failpoint;
#[cfg(feature = "service")]
pub mod http;
pub mod intake;
pub mod listing;
#[cfg(feature = "service")]
pub mod metrics;
pub mod notify;
pub mod partitions;
pub mod policy;
pub mod pool;
pub mod queue;
pub mod readiness;
pub mod redact;
pub mod routing;
pub mod run;
pub mod scheduler;
pub mod series;
#[cfg(feature = "service")]
pub mod service;
pub mod simulate;
pub mod spark;
pub mod sql_text;
pub mod state;
pub mod status;
pub mod store;
pub mod strategy;
pub mod table_map;
pub mod task;
#[cfg(all(feature = "service", any(test, feature = "testing")))]
#[doc(hidden)]
pub mod testing;
#[cfg(feature = "service")]
pub mod web;
