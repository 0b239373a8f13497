//! icepack keeps Apache Iceberg tables healthy: it counts the small files S3 event notifications
//! announce, per table and durably, and compacts a table when its thresholds are crossed.
//!
//! The folders are the layers (docs/architecture.md): [`intake`] turns events into counts,
//! [`table`] decides when a table is due and keeps its state, [`runs`] schedules and records
//! runs, [`engine`] does them (Spark, or the native engine in-process), [`ops`] is what operators
//! see and do; [`config`] and [`store`] serve them all, [`model`] is the vocabulary they share (a run's
//! task and report, a table's stored state), [`base`] is what every layer uses, and
//! [`service`] puts the pipeline together.

pub mod base;
pub mod config;
pub mod engine;
pub mod intake;
#[cfg(feature = "service")]
pub mod messages;
pub mod model;
pub mod ops;
pub mod runs;
#[cfg(feature = "service")]
pub mod service;
pub mod simulate;
pub mod store;
pub mod table;
#[cfg(all(feature = "service", any(test, feature = "testing")))]
#[doc(hidden)]
pub mod testing;
