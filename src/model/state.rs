//! The durable shape of a table's state: what icepack remembers between restarts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::base::clock::UnixMillis;
pub use crate::model::task::Maintenance;
use crate::model::task::{MidSizedFiles, Rewrite, Task, Trigger};

/// Small files waiting for a compaction, in aggregate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCounts {
    pub files: u64,
    pub bytes: u64,
    /// Event time of the oldest pending file, if any file is pending.
    pub oldest_event_millis: Option<UnixMillis>,
    pub newest_event_millis: Option<UnixMillis>,
}

impl PendingCounts {
    /// The counts of a set of logged files, with their per-partition breakdown.
    pub fn aggregate<'a>(
        files: impl IntoIterator<Item = &'a FileEntry>,
    ) -> (PendingCounts, BTreeMap<String, PartitionCounts>) {
        let mut counts = PendingCounts::default();
        let mut partitions: BTreeMap<String, PartitionCounts> = BTreeMap::new();
        for file in files {
            if file.source == FileSource::Unconfirmed {
                continue;
            }
            counts.add_file(file.size, file.event_millis);
            let partition = partitions.entry(file.partition.clone()).or_default();
            partition.add_file(file.size, file.event_millis);
            if file.source == FileSource::Metadata {
                partition.metadata_files += 1;
                partition.metadata_bytes = partition.metadata_bytes.saturating_add(file.size);
            }
        }
        (counts, partitions)
    }

    pub fn add_file(&mut self, bytes: u64, event_millis: UnixMillis) {
        self.files += 1;
        // Sizes come from events and the engine's output: a sum saturates, never overflows.
        self.bytes = self.bytes.saturating_add(bytes);
        self.oldest_event_millis = Some(
            self.oldest_event_millis
                .map_or(event_millis, |oldest| oldest.min(event_millis)),
        );
        self.newest_event_millis = Some(
            self.newest_event_millis
                .map_or(event_millis, |newest| newest.max(event_millis)),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.files == 0
    }
}

/// Pending small files of one partition (`k=v/...` path, empty for unpartitioned tables).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCounts {
    pub files: u64,
    pub bytes: u64,
    /// Of `files`, those known from Iceberg metadata rather than from events.
    #[serde(default)]
    pub metadata_files: u64,
    /// Their bytes (a run's still-small output is one of them).
    #[serde(default)]
    pub metadata_bytes: u64,
    /// Event time of the partition's oldest pending file (max-wait is judged per partition).
    #[serde(default)]
    pub oldest_event_millis: Option<UnixMillis>,
    /// Event time of the partition's newest pending file (the settle window); `None` in state
    /// written before it was kept.
    #[serde(default)]
    pub newest_event_millis: Option<UnixMillis>,
    /// The sum of the pending files' event times in seconds: how long they have waited, together
    /// (a run's worth); 0 in state written before it was kept.
    #[serde(default)]
    pub event_seconds_sum: i64,
}

impl PartitionCounts {
    pub fn add_file(&mut self, bytes: u64, event_millis: UnixMillis) {
        self.files += 1;
        // Sizes come from events and the engine's output: a sum saturates, never overflows.
        self.bytes = self.bytes.saturating_add(bytes);
        self.oldest_event_millis = Some(
            self.oldest_event_millis
                .map_or(event_millis, |oldest| oldest.min(event_millis)),
        );
        self.newest_event_millis = Some(
            self.newest_event_millis
                .map_or(event_millis, |newest| newest.max(event_millis)),
        );
        self.event_seconds_sum = self
            .event_seconds_sum
            .saturating_add(event_millis.div_euclid(1000));
    }

    /// How long the pending files have waited, together, in file-seconds, counting only what a
    /// run can fix: one file per partition stays (the output), so a file alone is worth nothing.
    pub fn fixable_waited_file_seconds(&self, now: UnixMillis) -> f64 {
        if self.files < 2 {
            return 0.0;
        }
        let files = self.files as f64;
        let waited = if self.event_seconds_sum != 0 {
            files * now.div_euclid(1000) as f64 - self.event_seconds_sum as f64
        } else {
            // State from before the sum was kept: as if every file were the oldest.
            self.oldest_event_millis
                .map_or(0.0, |oldest| files * (now - oldest) as f64 / 1000.0)
        };
        waited.max(0.0) * (files - 1.0) / files
    }
}

/// Where icepack learned of a pending file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSource {
    /// An S3 event, not yet confirmed by the committed metadata.
    #[default]
    Events,
    /// The table's committed metadata (a run's or a reconcile's truth).
    Metadata,
    /// Announced by an S3 event, then absent from the metadata a run or a reconcile read after
    /// it: uploaded but not committed (a failed attempt's outputs, a writer's failed commit, a
    /// speculative task's leftovers), or not yet (a slow writer). It counts toward no threshold
    /// — a run could not rewrite it — and waits for the metadata, not for events: a later read
    /// that has it makes it pending again, one after the grace without it drops it.
    Unconfirmed,
}

/// One table's durable record (the `tables` column family). It is rewritten with every change
/// of the table (each group of events that counts files for it), so a field at its default is
/// left out and reads back as that default: a table that never ran stores its counters only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableState {
    pub pending: PendingCounts,
    /// Sequence number the next counted file gets; files are logged under it.
    pub next_file_seq: u64,
    /// The files a compaction run in flight has taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunRecord>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub consecutive_failures: u32,
    /// After a failure, no run starts before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_millis: Option<UnixMillis>,
    /// The partition spec as last read from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_spec: Option<Vec<crate::model::partition::PartitionField>>,
    /// When the pending state was last rebuilt from the committed metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_truth_millis: Option<UnixMillis>,
    /// Files taken by successful runs that stopped being pending (lifetime count): with the
    /// pending and claimed files, every file ever counted.
    #[serde(default, skip_serializing_if = "is_default")]
    pub compacted_files: u64,
    /// The table's own sort order as last read from its metadata (`None`: never read); an
    /// `auto` table sorts by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_order: Option<crate::model::strategy::TableOrder>,
    /// The table's manifests: known from the metadata, and announced by events since.
    #[serde(default, skip_serializing_if = "is_default")]
    pub manifests: ManifestCounts,
    /// `remove_orphan_files` runs of the table.
    #[serde(default, skip_serializing_if = "is_default")]
    pub orphans: OrphanRuns,
    /// The table's delete files (merge-on-read): known from the metadata, announced since.
    #[serde(default, skip_serializing_if = "is_default")]
    pub deletes: DeleteCounts,
    /// Sequence number of the next run kept in the table's history.
    #[serde(default, skip_serializing_if = "is_default")]
    pub next_run_seq: u64,
    /// Files announced but absent from the last metadata read ([`FileSource::Unconfirmed`]).
    #[serde(default, skip_serializing_if = "UnconfirmedFiles::is_empty")]
    pub unconfirmed: UnconfirmedFiles,
    /// Rewrites in a row that rewrote nothing: the table backs off as after failures.
    #[serde(default, skip_serializing_if = "is_default")]
    pub empty_runs: u32,
    /// How long the table's recent rewrites took: its measured run cost.
    #[serde(default, skip_serializing_if = "RunCosts::is_empty")]
    pub run_costs: RunCosts,
    /// A run changed the table's files since its statistics were last computed
    /// (`compute_statistics`): a `compute_statistics` run follows when nothing else is due.
    #[serde(default, skip_serializing_if = "is_default")]
    pub statistics_due: bool,
}

/// Whether a field is at its default: a stored row leaves it out.
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The logged files waiting for the metadata to confirm them ([`FileSource::Unconfirmed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnconfirmedFiles {
    pub files: u64,
    pub oldest_event_millis: Option<UnixMillis>,
}

impl UnconfirmedFiles {
    pub fn is_empty(&self) -> bool {
        self.files == 0
    }

    /// Those of a file log.
    pub fn of<'a>(files: impl IntoIterator<Item = &'a FileEntry>) -> UnconfirmedFiles {
        let mut unconfirmed = UnconfirmedFiles::default();
        for file in files
            .into_iter()
            .filter(|file| file.source == FileSource::Unconfirmed)
        {
            unconfirmed.files += 1;
            unconfirmed.oldest_event_millis = Some(
                unconfirmed
                    .oldest_event_millis
                    .map_or(file.event_millis, |oldest| oldest.min(file.event_millis)),
            );
        }
        unconfirmed
    }
}

/// The durations of a table's last [`RunCosts::KEPT`] rewrites that succeeded at their first
/// attempt (a retried run's duration holds its retry waits): what a run costs the table's engine,
/// whatever it rewrites, for the cost pacing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCosts {
    pub recent_millis: Vec<u64>,
}

impl RunCosts {
    pub const KEPT: usize = 5;

    pub fn is_empty(&self) -> bool {
        self.recent_millis.is_empty()
    }

    pub fn record(&mut self, duration_millis: u64) {
        self.recent_millis.push(duration_millis);
        let excess = self.recent_millis.len().saturating_sub(Self::KEPT);
        self.recent_millis.drain(..excess);
    }

    /// The median of the recent durations (the lower middle of an even count): one slow run,
    /// a cold start or a loaded engine, does not move it.
    pub fn median_millis(&self) -> Option<u64> {
        let mut sorted = self.recent_millis.clone();
        sorted.sort_unstable();
        sorted.get(sorted.len().saturating_sub(1) / 2).copied()
    }
}

/// When a merge-on-read table is due by its delete files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteThresholds {
    pub files: Option<u64>,
    /// Deleted rows per million rows (`delete_ratio_threshold` × 10⁶).
    pub ratio_ppm: Option<u64>,
}

impl DeleteThresholds {
    pub fn is_on(&self) -> bool {
        self.files.is_some() || self.ratio_ppm.is_some()
    }
}

/// A table's position and equality delete files, and the rows they delete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteCounts {
    pub position_files: u64,
    pub equality_files: u64,
    /// Rows the delete files hold, and rows of the data files, as last read.
    pub deleted_rows: u64,
    pub data_rows: u64,
    /// Delete files announced by S3 events written after that read.
    pub since_read: u64,
    pub read_millis: Option<UnixMillis>,
    /// The last merge of the position deletes (`rewrite_position_delete_files`) failed: the
    /// table's deletes are applied by a data rewrite instead until the next read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merge_failed: bool,
}

impl DeleteCounts {
    pub fn files(&self) -> u64 {
        self.position_files + self.equality_files + self.since_read
    }

    /// Deleted rows per million rows, as last read.
    pub fn ratio_ppm(&self) -> u64 {
        (self.deleted_rows as u128 * 1_000_000)
            .checked_div(self.data_rows as u128)
            .unwrap_or(0) as u64
    }

    /// Whether the table is due by its deletes.
    pub fn due(&self, thresholds: &DeleteThresholds) -> bool {
        thresholds.files.is_some_and(|files| self.files() >= files)
            || thresholds
                .ratio_ppm
                .is_some_and(|ratio| self.deleted_rows > 0 && self.ratio_ppm() >= ratio)
    }
}

/// When orphan files were last looked for, and what was found and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanRuns {
    /// When the last successful `remove_orphan_files` run (dry or not) started.
    pub last_run_millis: Option<UnixMillis>,
    /// The first run of a table is a dry run: it lists what would be removed.
    pub dry_run_done: bool,
    /// Orphan files the last dry run found, and the last real run removed.
    pub found: Option<u64>,
    pub removed: Option<u64>,
    /// When the last failed run started, if it failed after the last success: the next run
    /// waits a period from then, as from a success (a failure is told, never retried at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_millis: Option<UnixMillis>,
}

impl OrphanRuns {
    /// When the next run is due, with runs `every` milliseconds apart: a period after the last
    /// run, successful or failed; at once if none ever ran.
    pub fn next_run_millis(&self, every: i64) -> UnixMillis {
        self.last_run_millis
            .max(self.failed_millis)
            .map_or(UnixMillis::MIN, |last| last.saturating_add(every))
    }
}

/// A table's manifest files (`metadata/*.avro`, not the snapshots' manifest lists).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestCounts {
    /// In the current snapshot, as the last read of the metadata found them.
    pub known: u64,
    /// New manifests announced by S3 events written after that read.
    pub since_read: u64,
    /// When that read was (`None`: never read).
    pub read_millis: Option<UnixMillis>,
    /// How many the last `rewrite_manifests` left: a table is not rewritten again until half
    /// of `max_manifests` more have been added to it.
    pub left_by_rewrite: u64,
}

impl ManifestCounts {
    pub fn total(&self) -> u64 {
        self.known + self.since_read
    }

    /// Whether the table is due for `rewrite_manifests` at `max` manifests.
    pub fn due(&self, max: u64) -> bool {
        self.total() > max.max(self.left_by_rewrite + max.div_ceil(2))
    }
}

/// The files a run took when it started: every logged file with a sequence number below `upto_seq`.
/// Files counted later stay pending for the next run.
///
/// Stored in the form of every earlier release ([`StoredClaim`]): the task as flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredClaim", into = "StoredClaim")]
pub struct Claim {
    pub run_id: String,
    pub trigger: Trigger,
    pub started_millis: UnixMillis,
    pub upto_seq: u64,
    pub counts: PendingCounts,
    pub partitions: BTreeMap<String, PartitionCounts>,
    /// What the run does. A [`Task::ReadOrder`] goes with [`Trigger::ReadOrder`] (that is how it
    /// is stored).
    pub task: Task,
    /// The run's nonce (random, from the operating system): frames the engine's output so that
    /// nothing a table holds can pass for a result, and names the run's Spark Connect session.
    /// Kept here so that a run recovered after a restart is read with the nonce it started with.
    /// Empty in a claim made by an earlier release.
    pub nonce: String,
}

impl Claim {
    /// Whether its outcome counts like a run's ([`Task::is_run`]).
    pub fn is_run(&self) -> bool {
        self.task.is_run()
    }
}

/// A [`Claim`] as the store keeps it, unchanged since before tasks were one enum: a claim
/// written by any release reads back, and one written now reads in an earlier release.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredClaim {
    run_id: String,
    trigger: Trigger,
    started_millis: UnixMillis,
    upto_seq: u64,
    counts: PendingCounts,
    partitions: BTreeMap<String, PartitionCounts>,
    /// The partitions the run rewrites (empty: the whole table) and its `min-input-files`.
    #[serde(default)]
    rewrite_partitions: Vec<String>,
    #[serde(default)]
    min_input_files: u64,
    /// `false` for a read or maintenance.
    #[serde(default = "yes")]
    rewrite: bool,
    #[serde(default)]
    joins_mid_sized: bool,
    /// Empty with `joins_mid_sized`: every partition of the run.
    #[serde(default)]
    joining_partitions: Vec<String>,
    /// Bin-pack for a claim made before strategies existed.
    #[serde(default)]
    strategy: crate::model::strategy::RunStrategy,
    #[serde(default)]
    maintenance: Option<Maintenance>,
    #[serde(default)]
    apply_deletes: bool,
    #[serde(default)]
    nonce: String,
}

impl From<StoredClaim> for Claim {
    fn from(stored: StoredClaim) -> Claim {
        let task = match (stored.maintenance, stored.rewrite, stored.trigger) {
            (Some(maintenance), _, _) => Task::Maintenance(maintenance),
            (None, false, Trigger::ReadOrder) => Task::ReadOrder,
            (None, false, _) => Task::Reconcile,
            (None, true, _) => Task::Rewrite(Rewrite {
                partitions: stored.rewrite_partitions,
                min_input_files: stored.min_input_files,
                mid_sized: MidSizedFiles::from_stored(
                    stored.joins_mid_sized,
                    stored.joining_partitions,
                ),
                strategy: stored.strategy,
                apply_deletes: stored.apply_deletes,
            }),
        };
        Claim {
            run_id: stored.run_id,
            trigger: stored.trigger,
            started_millis: stored.started_millis,
            upto_seq: stored.upto_seq,
            counts: stored.counts,
            partitions: stored.partitions,
            task,
            nonce: stored.nonce,
        }
    }
}

impl From<Claim> for StoredClaim {
    fn from(claim: Claim) -> StoredClaim {
        let maintenance = claim.task.maintenance();
        // Not a rewrite: the fields a rewrite would set keep their defaults.
        let (rewrite, options) = match claim.task {
            Task::Rewrite(options) => (true, options),
            _ => (false, Rewrite::whole_table()),
        };
        let (joins_mid_sized, joining_partitions) = options.mid_sized.to_stored();
        StoredClaim {
            run_id: claim.run_id,
            trigger: claim.trigger,
            started_millis: claim.started_millis,
            upto_seq: claim.upto_seq,
            counts: claim.counts,
            partitions: claim.partitions,
            rewrite_partitions: options.partitions,
            min_input_files: options.min_input_files,
            rewrite,
            joins_mid_sized,
            joining_partitions,
            strategy: options.strategy,
            maintenance,
            apply_deletes: options.apply_deletes,
            nonce: claim.nonce,
        }
    }
}

fn yes() -> bool {
    true
}

/// How the last run of a table ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub trigger: Trigger,
    pub started_millis: UnixMillis,
    pub finished_millis: UnixMillis,
    pub claimed_files: u64,
    pub claimed_bytes: u64,
    pub succeeded: bool,
    pub failure_class: Option<crate::model::report::FailureClass>,
    /// Short and secret-free.
    pub error: Option<String>,
    pub result: Option<crate::model::report::RewriteResult>,
    /// Output files of the run whose own ObjectCreated events are (or will be) ignored.
    pub output_files: u64,
    pub duration_millis: u64,
    pub attempts: u32,
    /// `binpack`, `sort` or `zorder`; `None` in a record made before strategies existed.
    #[serde(default)]
    pub strategy: Option<String>,
    /// `rewrite_manifests` (`None`: a data rewrite).
    #[serde(default)]
    pub maintenance: Option<Maintenance>,
    /// A `rewrite_manifests` run's manifests before and after.
    #[serde(default)]
    pub manifests: Option<(u64, u64)>,
    /// A `remove_orphan_files` run's orphan files: found (a dry run) or removed.
    #[serde(default)]
    pub orphan_files: Option<u64>,
    /// A `rewrite_position_delete_files` run's delete files rewritten and added.
    #[serde(default)]
    pub delete_rewrite: Option<(u64, u64)>,
    /// A `compute_statistics` run's statistics files written (table and partition statistics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics_files: Option<u64>,
    /// The partitions the run rewrote (empty: the whole table).
    #[serde(default)]
    pub partitions: Vec<String>,
    /// What failed after the run's rewrite committed (the run succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_failed: Option<crate::model::report::MaintenanceFailure>,
    /// Which engine ran it, and why that one (`None`: a run of an earlier release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on: Option<crate::model::report::RanOn>,
    /// The partitions a successful run was asked for and did not rewrite, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<crate::model::report::LeftPartition>,
}

/// A table's state with its per-partition breakdown, as loaded from the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSnapshot {
    pub state: TableState,
    pub partitions: BTreeMap<String, PartitionCounts>,
}

/// A counted file (the `files` column family, keyed by table and sequence number).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    pub event_millis: UnixMillis,
    pub partition: String,
    #[serde(default)]
    pub source: FileSource,
}

/// What is remembered of an object key to recognise duplicates (the `seen` column family).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenEntry {
    pub table: String,
    pub first_seen_millis: UnixMillis,
    /// The file's sequence number in the table's log; `None` for a compaction's own output.
    #[serde(default)]
    pub seq: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::strategy::RunStrategy;

    /// A claim as an earlier release stored it, with the task's flags `flags`.
    fn stored(trigger: &str, flags: &str) -> String {
        format!(
            r#"{{"run_id":"r1","trigger":"{trigger}","started_millis":5,"upto_seq":7,"counts":{{"files":3,"bytes":30,"oldest_event_millis":1}},"partitions":{{}}{flags},"nonce":"n"}}"#
        )
    }

    #[test]
    fn a_table_that_never_ran_stores_its_counters_only() {
        let mut state = TableState {
            next_file_seq: 1,
            ..TableState::default()
        };
        state.pending.add_file(4096, 1_714_564_800_000);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(
            json,
            r#"{"pending":{"files":1,"bytes":4096,"oldest_event_millis":1714564800000,"newest_event_millis":1714564800000},"next_file_seq":1}"#
        );
        assert_eq!(serde_json::from_str::<TableState>(&json).unwrap(), state);
    }

    #[test]
    fn a_row_of_an_earlier_release_with_every_field_written_reads_back_the_same() {
        let earlier = r#"{"pending":{"files":2,"bytes":10,"oldest_event_millis":5,"newest_event_millis":9},"next_file_seq":7,"claim":null,"last_run":null,"consecutive_failures":0,"next_attempt_millis":null,"partition_spec":null,"last_truth_millis":null,"compacted_files":0,"table_order":null,"manifests":{"known":0,"since_read":0,"read_millis":null,"left_by_rewrite":0},"orphans":{"last_run_millis":null,"dry_run_done":false,"found":null,"removed":null},"deletes":{"position_files":0,"equality_files":0,"deleted_rows":0,"data_rows":0,"since_read":0,"read_millis":null},"next_run_seq":0}"#;
        let state: TableState = serde_json::from_str(earlier).unwrap();
        assert_eq!(state.pending.files, 2);
        assert_eq!(state.next_file_seq, 7);
        assert_eq!(
            state,
            TableState {
                pending: state.pending.clone(),
                next_file_seq: 7,
                ..TableState::default()
            }
        );
        // Written again in the short form, and read back the same.
        let again = serde_json::to_string(&state).unwrap();
        assert!(again.len() < earlier.len() / 3, "{again}");
        assert_eq!(serde_json::from_str::<TableState>(&again).unwrap(), state);
    }

    #[test]
    fn a_table_that_ran_keeps_every_field_it_has() {
        let state = TableState {
            next_file_seq: 3,
            consecutive_failures: 2,
            next_attempt_millis: Some(11),
            last_truth_millis: Some(12),
            compacted_files: 40,
            manifests: ManifestCounts {
                known: 3,
                ..ManifestCounts::default()
            },
            orphans: OrphanRuns {
                dry_run_done: true,
                ..OrphanRuns::default()
            },
            deletes: DeleteCounts {
                position_files: 1,
                ..DeleteCounts::default()
            },
            next_run_seq: 5,
            empty_runs: 1,
            statistics_due: true,
            ..TableState::default()
        };
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(serde_json::from_str::<TableState>(&json).unwrap(), state);
    }

    #[test]
    fn claims_of_earlier_releases_read_back_as_their_task() {
        let rewrite = |json: &str| serde_json::from_str::<Claim>(json).unwrap();
        // Before strategies, partitions and maintenance existed: a bin-pack of the whole table.
        let oldest = rewrite(&stored("files", ""));
        assert_eq!(oldest.trigger, Trigger::Files);
        assert_eq!(oldest.task, Task::Rewrite(Rewrite::whole_table()));
        let partial = rewrite(&stored(
            "partition",
            r#","rewrite_partitions":["d=1","d=2"],"min_input_files":2,"rewrite":true,"joins_mid_sized":true,"joining_partitions":["d=1"],"strategy":{"sort":"id"},"apply_deletes":true"#,
        ));
        assert_eq!(
            partial.task,
            Task::Rewrite(Rewrite {
                partitions: vec!["d=1".into(), "d=2".into()],
                min_input_files: 2,
                mid_sized: MidSizedFiles::In(vec!["d=1".into()]),
                strategy: RunStrategy::Sort(Some("id".into())),
                apply_deletes: true,
            })
        );
        let everywhere = rewrite(&stored("manual", r#","joins_mid_sized":true"#));
        assert_eq!(
            everywhere.task.rewrite().unwrap().mid_sized,
            MidSizedFiles::Everywhere
        );
        // A manual reconcile stored the manual run's options beside `rewrite: false`.
        let reconcile = rewrite(&stored(
            "reconcile",
            r#","min_input_files":2,"rewrite":false,"joins_mid_sized":true,"apply_deletes":true"#,
        ));
        assert_eq!(reconcile.task, Task::Reconcile);
        assert!(!reconcile.is_run());
        let order = rewrite(&stored("read_order", r#","rewrite":false"#));
        assert_eq!(order.task, Task::ReadOrder);
        assert!(order.is_run());
        let orphans = rewrite(&stored(
            "remove_orphan_files",
            r#","rewrite":false,"maintenance":{"remove_orphans":{"dry_run":true}}"#,
        ));
        assert_eq!(
            orphans.task,
            Task::Maintenance(Maintenance::RemoveOrphans { dry_run: true })
        );
        let manifests = rewrite(&stored(
            "rewrite_manifests",
            r#","rewrite":false,"maintenance":"rewrite_manifests""#,
        ));
        assert_eq!(
            manifests.task,
            Task::Maintenance(Maintenance::RewriteManifests)
        );
        // A trigger no release wrote is refused with its name, not read as something else.
        let unknown = serde_json::from_str::<Claim>(&stored("sometimes", "")).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown trigger `sometimes`"),
            "{unknown}"
        );
    }

    #[test]
    fn a_claim_is_stored_in_the_earlier_form_and_reads_back_the_same() {
        let claims = [
            (Trigger::MaxWait, Task::Rewrite(Rewrite::whole_table())),
            (
                Trigger::Partition,
                Task::Rewrite(Rewrite {
                    partitions: vec!["d=1".into()],
                    min_input_files: 2,
                    mid_sized: MidSizedFiles::In(vec!["d=1".into()]),
                    strategy: RunStrategy::Zorder(vec!["a".into(), "b".into()]),
                    apply_deletes: true,
                }),
            ),
            (Trigger::Reconcile, Task::Reconcile),
            (Trigger::ReadOrder, Task::ReadOrder),
            (
                Trigger::RemoveOrphans,
                Task::Maintenance(Maintenance::RemoveOrphans { dry_run: false }),
            ),
            (
                Trigger::Deletes,
                Task::Maintenance(Maintenance::RewritePositionDeletes),
            ),
        ];
        for (trigger, task) in claims {
            let claim = Claim {
                run_id: "r1".into(),
                trigger,
                started_millis: 5,
                upto_seq: 7,
                counts: PendingCounts::default(),
                partitions: BTreeMap::new(),
                task: task.clone(),
                nonce: "n".into(),
            };
            let json = serde_json::to_value(&claim).unwrap();
            assert_eq!(json["trigger"], trigger.as_str());
            assert_eq!(json["rewrite"], task.rewrites_data(), "{json}");
            assert_eq!(json["maintenance"].is_null(), task.maintenance().is_none());
            assert_eq!(serde_json::from_value::<Claim>(json).unwrap(), claim);
        }
    }
}
