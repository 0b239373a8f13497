//! Apache Spark behind the seam: a run's task becomes a [`SparkJob`] (its statements and
//! settings, [`CompactionSettings::prepare`](crate::runs::settings::CompactionSettings::prepare)), a [`SparkRunner`] (a container, a
//! `spark-sql` process, a Spark Connect server) runs it, and what Spark printed or answered is
//! judged into the engine-neutral outcome. Nothing of this — SQL, exit codes, SQLSTATEs — leaves
//! this engine.
//!
//! The parts: [`job`] turns a claimed table into a job and picks the runner the configuration
//! names; [`sql`] and [`command`] write its statements and command line; [`runner`] runs a job
//! with retries and reads [`result`]s; [`docker`], [`process`] and [`connect`] are the runners
//! (the Docker Engine API, a local `spark-sql`, Spark Connect); [`warm_up`] readies a Spark
//! Connect server for its first run.

pub mod command;
#[cfg(feature = "service")]
pub mod connect;
#[cfg(feature = "service")]
pub mod docker;
pub mod job;
#[cfg(feature = "service")]
pub mod process;
pub mod result;
pub mod runner;
pub mod sql;
#[cfg(feature = "service")]
pub mod warm_up;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use tracing::warn;

use super::{Engine, EngineRun, RanOn, RunTask};
use crate::engine::spark::runner::{execute, judge, SparkJob, SparkRunner};
use crate::runs::report::{FailureClass, RunOutcome};
use crate::runs::settings::CompactionSettings;

/// What a run recorded as Spark's says.
pub const SPARK: &str = "spark";

pub struct SparkEngine {
    runner: Arc<dyn SparkRunner>,
    /// Replaced by a reload ([`Engine::reconfigure`]).
    settings: Mutex<CompactionSettings>,
}

impl SparkEngine {
    pub fn new(runner: Arc<dyn SparkRunner>, settings: CompactionSettings) -> SparkEngine {
        SparkEngine {
            runner,
            settings: Mutex::new(settings),
        }
    }

    fn settings(&self) -> CompactionSettings {
        self.settings.lock().expect("spark settings").clone()
    }

    fn ran_on(&self) -> RanOn {
        RanOn {
            engine: SPARK.to_string(),
            detail: self.runner.engine(),
        }
    }

    /// The task's job, or the failed run when it cannot be prepared (a claim naming a catalog
    /// a reload removed, a bug something in the claim sets off).
    fn job(&self, task: &RunTask) -> Result<SparkJob, Box<RunOutcome>> {
        match self.settings().prepare(&task.spec, &task.ticket) {
            Ok(mut job) => {
                job.claimed = task.claimed.clone();
                job.timeout = task.timeout;
                Ok(job)
            }
            Err(error) => {
                warn!(table = %task.spec.table, run_id = %task.ticket.run_id, %error, "the run cannot be prepared; it fails as invalid_input");
                Err(Box::new(RunOutcome::Failure {
                    class: FailureClass::InvalidInput,
                    excerpt: error.to_string(),
                    duration_millis: 0,
                    attempts: 1,
                }))
            }
        }
    }

    fn ended(&self, outcome: RunOutcome) -> EngineRun {
        EngineRun {
            outcome,
            ran_on: self.ran_on(),
        }
    }
}

#[async_trait]
impl Engine for SparkEngine {
    fn describe(&self) -> String {
        self.runner.engine()
    }

    async fn run(&self, task: &RunTask) -> EngineRun {
        let settings = self.settings();
        let outcome = match self.job(task) {
            Ok(job) => {
                execute(
                    self.runner.as_ref(),
                    &job,
                    settings.attempts,
                    settings.retry_interval,
                )
                .await
            }
            Err(failed) => *failed,
        };
        self.ended(outcome)
    }

    async fn recover(&self, task: &RunTask) -> EngineRun {
        let mut job = match self.job(task) {
            Ok(job) => job,
            Err(failed) => return self.ended(*failed),
        };
        // However many attempts the run made before the restart.
        job.attempt = self.settings().attempts;
        let started = Instant::now();
        let failure = |class: FailureClass, excerpt: String| RunOutcome::Failure {
            class,
            excerpt,
            duration_millis: started.elapsed().as_millis() as u64,
            attempts: 1,
        };
        let outcome = match self.runner.recover(&job).await {
            Ok(Some(output)) => match judge(&output, &job) {
                Ok(report) => RunOutcome::Success {
                    report: report.into(),
                    duration_millis: started.elapsed().as_millis() as u64,
                    attempts: 1,
                },
                Err((class, excerpt)) => failure(class, excerpt),
            },
            Ok(None) => failure(FailureClass::Other, super::LEFT_NO_OUTCOME.to_string()),
            Err(error) => failure(
                FailureClass::EngineUnavailable,
                crate::base::redact::redact(
                    &format!("cannot recover the run: {error}"),
                    &job.secrets(),
                ),
            ),
        };
        self.ended(outcome)
    }

    fn reconfigure(&self, settings: &CompactionSettings) {
        *self.settings.lock().expect("spark settings") = settings.clone();
        self.runner.reconfigure(&settings.config);
    }

    async fn probe(&self) -> Result<(), String> {
        self.runner.probe().await.map_err(|error| error.to_string())
    }

    async fn leftover_runs(&self) -> Result<Vec<String>, String> {
        self.runner
            .leftover_runs()
            .await
            .map_err(|error| error.to_string())
    }

    async fn discard(&self, run_id: &str) -> Result<(), String> {
        self.runner
            .discard(run_id)
            .await
            .map_err(|error| error.to_string())
    }
}
