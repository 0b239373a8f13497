//! Running Iceberg's `rewrite_data_files` in Apache Spark: the statements and command line (pure),
//! reading the result (pure), and the engines that run it (Docker Engine API, local process,
//! Spark Connect).

pub mod command;
#[cfg(feature = "service")]
pub mod connect;
#[cfg(feature = "service")]
pub mod docker;
#[cfg(feature = "service")]
pub mod process;
pub mod result;
pub mod runner;
pub mod sql;
