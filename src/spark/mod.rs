//! Running Iceberg's `rewrite_data_files` in Apache Spark: the statements and command line (pure),
//! reading the result (pure), and the engines that run it (Docker Engine API, local process,
//! Spark Connect).

pub mod command;
pub mod connect;
pub mod docker;
pub mod process;
pub mod result;
pub mod runner;
pub mod sql;
