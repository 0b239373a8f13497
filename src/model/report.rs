//! What a run of a table's maintenance reports, whatever engine ran it: its outcome, the
//! rewrite's counts, why it failed. The durable state and the pure accumulator use these types
//! and nothing of the engines; the engines produce them.

use serde::{Deserialize, Serialize};

/// A run id: UTC start time and a random suffix, e.g. `20240501T120000Z-3fa2c1`.
pub fn new_run_id(now: crate::base::clock::UnixMillis) -> String {
    let time = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(now)
        .map(|time| time.format("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_else(|| now.to_string());
    format!("{time}-{:06x}", fastrand::u32(..0x100_0000))
}

/// `bytes` random bytes from the operating system's generator, as hex: a per-run nonce that no
/// table writer can guess from what icepack shows (run ids use a fast, predictable generator).
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    if getrandom::fill(&mut buffer).is_err() {
        // No operating system generator: a process-seeded one is better than none.
        buffer.iter_mut().for_each(|byte| *byte = fastrand::u8(..));
    }
    buffer.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The end of a compaction run.
// One a run, moved a few times: the size of a success's report costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RunOutcome {
    Success {
        report: ReportSummary,
        duration_millis: u64,
        attempts: u32,
    },
    Failure {
        class: FailureClass,
        /// Short, secret-free.
        excerpt: String,
        duration_millis: u64,
        attempts: u32,
    },
}

/// How the names of the data files icepack's own engine writes begin (`icepack-{run id}-…`):
/// such a file is committed by its run or never, so one that a metadata read after the run does
/// not find is an abandoned attempt's output, never a pending small file.
pub const OUTPUT_FILE_PREFIX: &str = "icepack-";

/// Whether `key` names a data file icepack's own engine wrote ([`OUTPUT_FILE_PREFIX`]).
pub fn is_own_output(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with(OUTPUT_FILE_PREFIX))
}

/// Which engine ran a run, and why that one: status, the run history, the page and alerts say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RanOn {
    /// `spark` or `native`.
    pub engine: String,
    /// How it runs (`docker IMAGE`, `native`), and for a routed run why this engine.
    pub detail: String,
}

/// What a successful run reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSummary {
    pub result: RewriteResult,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Vec<crate::model::partition::PartitionField>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<Vec<(String, u64)>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub committed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_order: Option<crate::model::strategy::TableOrder>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<ManifestRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes: Option<DeleteRead>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_rewrite: Option<(u64, u64)>,
    /// The statistics files `compute_table_stats` and `compute_partition_stats` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics_files: Option<u64>,
    /// A step after the rewrite's commit that failed (snapshot expiry, a read of the metadata,
    /// the deadline): the run succeeded, this is reported beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_failed: Option<MaintenanceFailure>,
    /// The partitions the run was asked for and did not rewrite, and why: a run that leaves a
    /// due table due says so (status, history, page, notifications). At most [`LEFT_KEPT`]
    /// and one entry counting the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<LeftPartition>,
}

/// How many left partitions a report keeps by name.
pub const LEFT_KEPT: usize = 20;

/// A partition a run was asked for and did not rewrite, with why; `partition` is `None` for the
/// table as a whole (a whole-table run that rewrote nothing) and for the entry that counts the
/// partitions past [`LEFT_KEPT`]. Short and secret-free: a partition name and the plan's reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftPartition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for LeftPartition {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.partition {
            Some(partition) if partition.is_empty() => {
                write!(formatter, "(unpartitioned): {}", self.reason)
            }
            Some(partition) => write!(formatter, "{partition}: {}", self.reason),
            None => write!(formatter, "{}", self.reason),
        }
    }
}

/// What failed after a run's rewrite committed: the rewrite stands (its files are compacted, its
/// outputs known); the step's failure is reported on its own, never as a failed rewrite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceFailure {
    /// The step: `expire_snapshots`, `rewrite_position_delete_files`, `truth_read` ...
    pub step: String,
    pub class: FailureClass,
    /// Short, secret-free.
    pub excerpt: String,
}

impl ReportSummary {
    /// The counts only: what notifications and command output carry.
    pub fn without_file_lists(&self) -> ReportSummary {
        ReportSummary {
            result: self.result,
            manifest_count: self.manifest_count,
            manifests: self.manifests,
            orphan_files: self.orphan_files,
            deletes: self.deletes,
            delete_rewrite: self.delete_rewrite,
            statistics_files: self.statistics_files,
            maintenance_failed: self.maintenance_failed.clone(),
            ..ReportSummary::default()
        }
    }
}

impl RunOutcome {
    pub fn failure_class(&self) -> Option<FailureClass> {
        match self {
            RunOutcome::Success { .. } => None,
            RunOutcome::Failure { class, .. } => Some(*class),
        }
    }

    /// What failed after a successful run's rewrite committed, if anything.
    pub fn maintenance_failed(&self) -> Option<&MaintenanceFailure> {
        match self {
            RunOutcome::Success { report, .. } => report.maintenance_failed.as_ref(),
            RunOutcome::Failure { .. } => None,
        }
    }
}

/// `rewrite_data_files`' result; columns were added over Iceberg releases, so absent ones are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteResult {
    pub rewritten_data_files_count: u64,
    pub added_data_files_count: u64,
    pub rewritten_bytes_count: u64,
    pub failed_data_files_count: u64,
    pub removed_delete_files_count: u64,
}

/// The delete files of a table as its metadata has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRead {
    pub position_files: u64,
    pub equality_files: u64,
    pub deleted_rows: u64,
    pub data_rows: u64,
}

/// `rewrite_manifests`' result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRewrite {
    pub rewritten_manifests_count: u64,
    pub added_manifests_count: u64,
}

/// Why a run failed, as operators act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// A concurrent writer changed the files being rewritten; a later retry usually succeeds.
    CommitConflict,
    /// The commit may or may not have happened; never retried blindly.
    CommitStateUnknown,
    OutOfMemory,
    Timeout,
    /// No container engine, image missing, spark-sql not found.
    EngineUnavailable,
    /// The claim could not be made into a job, or the run's outcome not read: something in what
    /// it carries (from object keys, the engine's output) broke the code that prepares or
    /// finishes it. Never retried with the same claim: the table's next run names no partitions.
    InvalidInput,
    Other,
}

impl FailureClass {
    pub const ALL: [FailureClass; 7] = [
        FailureClass::CommitConflict,
        FailureClass::CommitStateUnknown,
        FailureClass::OutOfMemory,
        FailureClass::Timeout,
        FailureClass::EngineUnavailable,
        FailureClass::InvalidInput,
        FailureClass::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::CommitConflict => "commit_conflict",
            FailureClass::CommitStateUnknown => "commit_state_unknown",
            FailureClass::OutOfMemory => "out_of_memory",
            FailureClass::Timeout => "timeout",
            FailureClass::EngineUnavailable => "engine_unavailable",
            FailureClass::InvalidInput => "invalid_input",
            FailureClass::Other => "other",
        }
    }

    /// Whether another attempt within the same run is worth it.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureClass::CommitConflict | FailureClass::EngineUnavailable | FailureClass::Other
        )
    }
}

/// Splits `s3://bucket/key` (also `s3a://`, `s3n://`) into bucket and key.
pub fn split_object_path(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("s3://")
        .or_else(|| path.strip_prefix("s3a://"))
        .or_else(|| path.strip_prefix("s3n://"))?;
    let (bucket, key) = rest.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_carry_the_time_and_differ() {
        let first = new_run_id(1_714_564_800_000);
        assert!(first.starts_with("20240501T120000Z-"), "{first}");
        assert_ne!(first, new_run_id(1_714_564_800_000));
    }
}

/// Reads the object keys (bucket, key) of the files a run claimed, for an engine that must tell
/// the run's own commit among the table's snapshots (after a lost connection or a restart).
#[async_trait::async_trait]
pub trait ClaimedFileReader: Send + Sync {
    async fn claimed_files(&self) -> Result<Vec<(String, String)>, String>;
}

/// The claimed files of a job, read only when needed; none known by default.
#[derive(Clone, Default)]
pub struct ClaimedFiles(Option<std::sync::Arc<dyn ClaimedFileReader>>);

impl ClaimedFiles {
    pub fn new(reader: std::sync::Arc<dyn ClaimedFileReader>) -> ClaimedFiles {
        ClaimedFiles(Some(reader))
    }

    /// Claimed files known up front.
    pub fn listed(files: Vec<(String, String)>) -> ClaimedFiles {
        struct Listed(Vec<(String, String)>);
        #[async_trait::async_trait]
        impl ClaimedFileReader for Listed {
            async fn claimed_files(&self) -> Result<Vec<(String, String)>, String> {
                Ok(self.0.clone())
            }
        }
        ClaimedFiles::new(std::sync::Arc::new(Listed(files)))
    }

    /// The claimed files' (bucket, key)s; empty when none are known.
    pub async fn read(&self) -> Result<std::collections::HashSet<(String, String)>, String> {
        match &self.0 {
            None => Ok(Default::default()),
            Some(reader) => Ok(reader.claimed_files().await?.into_iter().collect()),
        }
    }
}

impl std::fmt::Debug for ClaimedFiles {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(if self.0.is_some() {
            "ClaimedFiles(read when needed)"
        } else {
            "ClaimedFiles(none)"
        })
    }
}
