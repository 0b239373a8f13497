//! What a table's next run would do, planned without writing anything (`icepack plan TABLE`,
//! `GET /v1/tables/{table}/plan`): the engine that would run it and why, the file groups it would
//! rewrite, the partitions it would leave and why, and how long it should take by the table's
//! measured runs.

use serde::{Deserialize, Serialize};

use crate::model::report::LeftPartition;
use crate::model::state::RunRecord;

/// One group of files the run would rewrite together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPreview {
    /// The partition path, or what the group moves (`files of older specs 0 moved to spec 1`).
    pub partition: String,
    pub files: u64,
    pub bytes: u64,
    /// Files the group's rows should make: its input bytes over the target file size, at least
    /// one (a group moved to the current spec makes one file a partition its rows fall in, at
    /// least).
    pub expected_output_files: u64,
    /// Position delete files applied while its files are read.
    pub position_deletes_applied: u64,
}

/// The engine's plan of a run over the table as its catalog has it now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnginePlan {
    /// The snapshot the plan read (`None`: a table without one).
    pub snapshot_id: Option<i64>,
    pub groups: Vec<GroupPreview>,
    pub left: Vec<LeftPartition>,
}

impl EnginePlan {
    pub fn input_files(&self) -> u64 {
        self.groups.iter().map(|group| group.files).sum()
    }

    pub fn input_bytes(&self) -> u64 {
        self.groups.iter().map(|group| group.bytes).sum()
    }

    pub fn expected_output_files(&self) -> u64 {
        self.groups
            .iter()
            .map(|group| group.expected_output_files)
            .sum()
    }
}

/// What the next run would do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPreview {
    pub table: String,
    /// Whether the table is due now; when it is not, the preview is what a manual run
    /// (`icepack compact`) would do.
    pub due: bool,
    /// `files`, `bytes`, `max_wait`, `manual`, a maintenance task ...
    pub trigger: String,
    /// What the run does: `binpack`, `sort`, `rewrite_manifests` ...
    pub task: String,
    /// The partitions the run would be asked for (empty: the whole table).
    pub partitions: Vec<String>,
    /// The engine that would run it (`native`, `spark`) and why that one.
    pub engine: String,
    pub engine_detail: String,
    /// The plan read from the table; `None` with `unplanned` saying why (an engine that plans
    /// only as it runs, a catalog it cannot read).
    pub plan: Option<EnginePlan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unplanned: Option<String>,
    pub input_files: u64,
    pub input_bytes: u64,
    pub expected_output_files: u64,
    /// Input bytes over the throughput of the table's successful runs on the same engine.
    pub expected_duration_millis: Option<u64>,
    /// How the expected duration was reckoned (`from 4 runs at 38.2 MB/s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration_basis: Option<String>,
}

/// The duration `input_bytes` should take by the throughput of the table's successful runs on
/// `engine` that rewrote bytes, with the basis; `None` without such a run.
pub fn expected_duration(
    input_bytes: u64,
    engine: &str,
    runs: &[RunRecord],
) -> Option<(u64, String)> {
    let measured: Vec<(u64, u64)> = runs
        .iter()
        .filter(|run| run.succeeded && run.maintenance.is_none())
        .filter(|run| {
            run.ran_on
                .as_ref()
                .is_some_and(|ran_on| ran_on.engine == engine)
        })
        .filter_map(|run| {
            let bytes = run.result.as_ref()?.rewritten_bytes_count;
            (bytes > 0 && run.duration_millis > 0).then_some((bytes, run.duration_millis))
        })
        .collect();
    if measured.is_empty() {
        return None;
    }
    let bytes: u128 = measured.iter().map(|(bytes, _)| u128::from(*bytes)).sum();
    let millis: u128 = measured.iter().map(|(_, millis)| u128::from(*millis)).sum();
    let expected = (u128::from(input_bytes) * millis).div_ceil(bytes);
    let megabytes_per_second = bytes as f64 / 1e6 / (millis as f64 / 1e3);
    Some((
        u64::try_from(expected).unwrap_or(u64::MAX),
        format!(
            "from {} {engine} run{} at {megabytes_per_second:.1} MB/s",
            measured.len(),
            if measured.len() == 1 { "" } else { "s" }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::report::{RanOn, RewriteResult};
    use crate::model::task::Trigger;

    fn run(engine: &str, bytes: u64, millis: u64, succeeded: bool) -> RunRecord {
        RunRecord {
            run_id: "r".into(),
            trigger: Trigger::Files,
            started_millis: 0,
            finished_millis: millis as i64,
            claimed_files: 1,
            claimed_bytes: bytes,
            succeeded,
            failure_class: None,
            error: None,
            result: Some(RewriteResult {
                rewritten_bytes_count: bytes,
                ..RewriteResult::default()
            }),
            output_files: 1,
            duration_millis: millis,
            attempts: 1,
            strategy: None,
            maintenance: None,
            manifests: None,
            orphan_files: None,
            delete_rewrite: None,
            statistics_files: None,
            partitions: Vec::new(),
            maintenance_failed: None,
            ran_on: Some(RanOn {
                engine: engine.into(),
                detail: String::new(),
            }),
            left: Vec::new(),
        }
    }

    #[test]
    fn the_duration_follows_the_engines_measured_throughput() {
        let runs = [
            run("native", 10_000_000, 1_000, true),
            run("native", 30_000_000, 1_000, true),
            run("native", 99_000_000, 1, false),
            run("spark", 1_000_000, 10_000, true),
        ];
        let (millis, basis) = expected_duration(40_000_000, "native", &runs).unwrap();
        assert_eq!(millis, 2_000, "40 MB at 20 MB/s");
        assert_eq!(basis, "from 2 native runs at 20.0 MB/s");
        let (millis, basis) = expected_duration(1_000_000, "spark", &runs).unwrap();
        assert_eq!(millis, 10_000);
        assert_eq!(basis, "from 1 spark run at 0.1 MB/s");
        assert_eq!(expected_duration(1, "remote", &runs), None);
        assert_eq!(expected_duration(1, "native", &[]), None);
    }
}
