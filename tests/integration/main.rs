//! The integration tests, one binary: `support` (moto, ElasticMQ, the REST catalog, Spark, the
//! browser, icepack as a process) is compiled once, and the tests of every module share the
//! harness's threads, the process's Spark Connect server and one link. A module a subject; run
//! one with `cargo test --test integration MODULE::` (TESTING.md). The command-line contract
//! (`tests/cli.rs`) stays a binary of its own: it is built without fault points.

mod support;

mod bridge;
mod compaction_e2e;
mod connect_e2e;
mod crash_loop;
mod deletes;
mod equality_deletes;
mod format_v3;
mod intake_sqs;
mod maintenance;
mod native_catalogs;
mod native_engine;
mod native_maintenance;
mod operator_page;
mod pacing;
mod partition_transforms;
mod service_http;
mod sqs_servers;
mod strategies;
mod tenants;
mod thresholds;
mod truthful_e2e;
