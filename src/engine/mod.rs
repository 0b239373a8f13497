//! The engine seam: what a run means, whatever engine runs it. The pool hands an [`Engine`] a
//! [`RunTask`] — the table's spec and the claim's ticket (its partitions as paths, strategy,
//! sizes, what maintenance), the time left to its deadline and the claim's files on demand —
//! and gets back the engine-neutral [`RunOutcome`] with the engine that ran it. SQL, spark-sql's
//! output, exit codes and SQLSTATEs stay the Spark engine's business ([`spark`]); the JVM-free
//! engine ([`native`]) reads and writes the table itself; [`routed`] picks one per run
//! (`engine = "native" | "spark" | "auto"`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::config::TableSpec;
use crate::model::report::RunOutcome;
pub use crate::model::report::{ClaimedFileReader, ClaimedFiles, RanOn};
use crate::table::accumulator::ClaimTicket;

pub mod health;
#[cfg(feature = "service")]
pub mod native;
#[cfg(feature = "service")]
pub mod routed;
pub mod spark;

pub use health::{spawn_probe, EngineHealth, EngineHealthCell, PROBE_INTERVAL};

/// One run for an engine: the claimed table as icepack knows it.
#[derive(Debug, Clone)]
pub struct RunTask {
    pub spec: Arc<TableSpec>,
    pub ticket: ClaimTicket,
    /// What is left of the run's deadline (all of it for a new run).
    pub timeout: Duration,
    /// The claim's files (bucket, key), read from the state only when an engine asks.
    pub claimed: ClaimedFiles,
}

/// A recovered run that left no trace of its outcome: its files are pending again.
pub const LEFT_NO_OUTCOME: &str =
    "the run was interrupted by a restart and left no outcome to read; its files are pending again";

/// What an engine says a run would do, before it runs: which engine would run it and why, and
/// the plan it read from the table, or why there is none.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub ran_on: RanOn,
    pub plan: Result<crate::model::preview::EnginePlan, String>,
}

/// A run's end as an engine reports it.
#[derive(Debug, Clone)]
pub struct EngineRun {
    pub outcome: RunOutcome,
    pub ran_on: RanOn,
}

/// An engine: runs tasks to their end, finds the end of a run a previous process started, and
/// says whether it answers.
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// What status and logs show: `docker IMAGE`, `native`, `native, else docker IMAGE`.
    fn describe(&self) -> String;

    /// Runs the task to its end (retrying what is worth it), whatever the task holds: a task it
    /// cannot prepare is a failed run (`invalid_input`), never a panic.
    async fn run(&self, task: &RunTask) -> EngineRun;

    /// The end of a run a previous icepack process started (`task.timeout`: what is left of
    /// its deadline), decided from what the engine or the table kept of it.
    async fn recover(&self, task: &RunTask) -> EngineRun;

    /// What a run of `task` would do, read from the table without writing anything. An engine
    /// that plans only as it runs (Spark's `rewrite_data_files`) says so.
    async fn plan(&self, _task: &RunTask) -> PlannedRun {
        PlannedRun {
            ran_on: RanOn {
                engine: self.describe(),
                detail: String::new(),
            },
            plan: Err(format!(
                "{} plans a run only as it runs it",
                self.describe()
            )),
        }
    }

    /// Whether the engine answers now (a warm-up for a long-lived one). Secret-free.
    async fn probe(&self) -> Result<(), String>;

    /// A reload changed the settings: runs started from now on use them.
    fn reconfigure(&self, _settings: &crate::runs::settings::CompactionSettings) {}

    /// Run ids of this deployment's runs the engine still holds; removes nothing.
    async fn leftover_runs(&self) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    /// Removes a left-over run's traces.
    async fn discard(&self, _run_id: &str) -> Result<(), String> {
        Ok(())
    }
}
