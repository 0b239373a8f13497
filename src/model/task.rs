//! What a run does and why it started: one [`Task`] and one [`Trigger`], carried from the claim
//! that starts a run (`model::state::Claim`) through the pool and the engines to the record of how it
//! ended (`model::state::RunRecord`), the status, the alerts and the log.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::strategy::RunStrategy;

/// Why a run started. Its name ([`Trigger::as_str`]) is what claims and run records store and
/// what the status, the page, the alerts and the log say; the names are those of every earlier
/// release, so stored claims and records keep reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// The table's small files reached `min_files`.
    Files,
    /// Their bytes reached `min_bytes`.
    Bytes,
    /// One partition's small files reached `min_files` (`partition_thresholds`).
    Partition,
    /// The oldest pending file has waited `max_wait`.
    MaxWait,
    /// Asked for: `POST /v1/tables/{table}/compact`, `icepack compact`.
    Manual,
    /// The table's delete files are due (`[deletes]`), with no compaction due.
    Deletes,
    /// A read of the table's metadata: periodic (`reconcile_every`), confirming files a read did
    /// not find yet, or asked for (`icepack compact --reconcile`).
    Reconcile,
    /// The read of an `auto` table's sort order, which its first run waits for.
    ReadOrder,
    /// Too many manifests (`max_manifests`), or asked for.
    RewriteManifests,
    /// Orphan removal on its schedule (`orphan_every`), or asked for.
    RemoveOrphans,
    /// A run changed the table (`compute_statistics`), or asked for.
    ComputeStatistics,
}

impl Trigger {
    /// Every trigger, in the order of [`Trigger::as_str`]'s table.
    pub const ALL: [Trigger; 11] = [
        Trigger::Files,
        Trigger::Bytes,
        Trigger::Partition,
        Trigger::MaxWait,
        Trigger::Manual,
        Trigger::Deletes,
        Trigger::Reconcile,
        Trigger::ReadOrder,
        Trigger::RewriteManifests,
        Trigger::RemoveOrphans,
        Trigger::ComputeStatistics,
    ];

    /// The maintenance tasks `POST /v1/tables/{table}/maintenance/{task}` starts.
    pub const REQUESTABLE_MAINTENANCE: [Trigger; 3] = [
        Trigger::RewriteManifests,
        Trigger::RemoveOrphans,
        Trigger::ComputeStatistics,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Files => "files",
            Trigger::Bytes => "bytes",
            Trigger::Partition => "partition",
            Trigger::MaxWait => "max_wait",
            Trigger::Manual => "manual",
            Trigger::Deletes => "deletes",
            Trigger::Reconcile => "reconcile",
            Trigger::ReadOrder => "read_order",
            Trigger::RewriteManifests => "rewrite_manifests",
            Trigger::RemoveOrphans => "remove_orphan_files",
            Trigger::ComputeStatistics => "compute_statistics",
        }
    }

    /// The trigger named `name` ([`Trigger::as_str`]).
    pub fn parse(name: &str) -> Option<Trigger> {
        Trigger::ALL
            .into_iter()
            .find(|trigger| trigger.as_str() == name)
    }

    /// The trigger a claim or run record stored as `name`: [`Trigger::parse`], and the name
    /// earlier releases gave a run that merged delete files (the task's, not the reason's).
    fn from_stored(name: &str) -> Option<Trigger> {
        match name {
            "rewrite_position_delete_files" => Some(Trigger::Deletes),
            _ => Trigger::parse(name),
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Trigger {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Trigger {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Trigger::from_stored(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown trigger `{}`",
                name.chars().take(64).collect::<String>().escape_debug()
            ))
        })
    }
}

/// What a run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// Rewrites the table's small data files.
    Rewrite(Rewrite),
    /// Reads the table's metadata (its partition spec and its files: the truth) and rewrites
    /// nothing.
    Reconcile,
    /// Reads an `auto` table's sort order (and the truth) and rewrites nothing; its runs follow
    /// once the order is known.
    ReadOrder,
    /// A maintenance procedure instead of a data rewrite.
    Maintenance(Maintenance),
}

impl Task {
    /// Whether its outcome counts like a run's (a failure backs the table off): a data rewrite,
    /// maintenance, or the read of the order an `auto` table's runs wait for — not a reconcile.
    pub fn is_run(&self) -> bool {
        !matches!(self, Task::Reconcile)
    }

    /// The data rewrite, when the task is one.
    pub fn rewrite(&self) -> Option<&Rewrite> {
        match self {
            Task::Rewrite(rewrite) => Some(rewrite),
            _ => None,
        }
    }

    /// The maintenance procedure, when the task is one.
    pub fn maintenance(&self) -> Option<Maintenance> {
        match self {
            Task::Maintenance(maintenance) => Some(*maintenance),
            _ => None,
        }
    }

    /// Whether the run rewrites data files.
    pub fn rewrites_data(&self) -> bool {
        matches!(self, Task::Rewrite(_))
    }

    /// Whether the run only reads the table (a reconcile or an order read).
    pub fn is_read(&self) -> bool {
        matches!(self, Task::Reconcile | Task::ReadOrder)
    }
}

/// A data rewrite's options, decided when the run is claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The partitions to rewrite (empty: the whole table).
    pub partitions: Vec<String>,
    /// `min-input-files` of the run (0: the table's own).
    pub min_input_files: u64,
    /// Where mid-sized files join the rewrite (only small files elsewhere).
    pub mid_sized: MidSizedFiles,
    /// Bin-pack, sort or z-order.
    pub strategy: RunStrategy,
    /// The rewrite applies the table's delete files (it is due by them, or asked for with
    /// `[deletes]` on).
    pub apply_deletes: bool,
}

impl Rewrite {
    /// The run's `min-input-files`: its own, else the table's (`table`).
    pub fn min_input_files_or(&self, table: u64) -> u64 {
        if self.min_input_files > 0 {
            self.min_input_files
        } else {
            table
        }
    }

    /// A bin-pack of small files over the whole table, with the table's `min-input-files`.
    pub fn whole_table() -> Rewrite {
        Rewrite {
            partitions: Vec::new(),
            min_input_files: 0,
            mid_sized: MidSizedFiles::Nowhere,
            strategy: RunStrategy::Binpack,
            apply_deletes: false,
        }
    }
}

/// Which partitions' mid-sized files (between the small-file floor and Iceberg's default floor,
/// three quarters of the target) join a rewrite: a partition that went quiet gets its
/// mid-sized files merged too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MidSizedFiles {
    /// Small files only.
    #[default]
    Nowhere,
    /// Every partition of the run (a manual run, a claim of an earlier release).
    Everywhere,
    /// These partitions only.
    In(Vec<String>),
}

impl MidSizedFiles {
    /// Mid-sized files join in these partitions; none: nowhere.
    pub fn only_in(partitions: Vec<String>) -> MidSizedFiles {
        if partitions.is_empty() {
            MidSizedFiles::Nowhere
        } else {
            MidSizedFiles::In(partitions)
        }
    }

    /// From a claim's stored form: whether mid-sized files join, and where (empty: everywhere).
    pub fn from_stored(joins: bool, partitions: Vec<String>) -> MidSizedFiles {
        match (joins, partitions.is_empty()) {
            (false, _) => MidSizedFiles::Nowhere,
            (true, true) => MidSizedFiles::Everywhere,
            (true, false) => MidSizedFiles::In(partitions),
        }
    }

    /// The stored form ([`MidSizedFiles::from_stored`]).
    pub fn to_stored(&self) -> (bool, Vec<String>) {
        match self {
            MidSizedFiles::Nowhere => (false, Vec::new()),
            MidSizedFiles::Everywhere => (true, Vec::new()),
            MidSizedFiles::In(partitions) => (true, partitions.clone()),
        }
    }

    /// Whether mid-sized files join anywhere.
    pub fn any(&self) -> bool {
        !matches!(self, MidSizedFiles::Nowhere)
    }

    /// Whether `partition`'s mid-sized files join.
    pub fn joins_in(&self, partition: &str) -> bool {
        match self {
            MidSizedFiles::Nowhere => false,
            MidSizedFiles::Everywhere => true,
            MidSizedFiles::In(partitions) => partitions.iter().any(|p| p == partition),
        }
    }
}

/// Maintenance a run does instead of rewriting data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Maintenance {
    /// `rewrite_manifests`: merges the table's manifests.
    RewriteManifests,
    /// `remove_orphan_files`: deletes files no snapshot references (older than the limit);
    /// a dry run lists them only.
    RemoveOrphans { dry_run: bool },
    /// `rewrite_position_delete_files`: merges position delete files (and drops dangling ones)
    /// when they are few rows against the data, cheaper than rewriting the data.
    RewritePositionDeletes,
    /// `compute_table_stats` (Puffin NDV sketches) and `compute_partition_stats`, after a run
    /// that changed the table's files (`compute_statistics`). Its failure is told and never
    /// backs the table off: the run before it committed, and the next one tries again.
    ComputeStatistics,
}

impl Maintenance {
    /// One of each task (a dry run of orphan removal is the same task).
    pub const ALL: [Maintenance; 4] = [
        Maintenance::RewriteManifests,
        Maintenance::RemoveOrphans { dry_run: false },
        Maintenance::RewritePositionDeletes,
        Maintenance::ComputeStatistics,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Maintenance::RewriteManifests => "rewrite_manifests",
            Maintenance::RemoveOrphans { .. } => "remove_orphan_files",
            Maintenance::RewritePositionDeletes => "rewrite_position_delete_files",
            Maintenance::ComputeStatistics => "compute_statistics",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trigger_reads_back_by_its_stored_name() {
        for trigger in Trigger::ALL {
            let stored = serde_json::to_string(&trigger).unwrap();
            assert_eq!(stored, format!("\"{}\"", trigger.as_str()));
            assert_eq!(serde_json::from_str::<Trigger>(&stored).unwrap(), trigger);
            assert_eq!(Trigger::parse(trigger.as_str()), Some(trigger));
        }
        // The names every earlier release stored.
        for name in [
            "files",
            "bytes",
            "partition",
            "max_wait",
            "manual",
            "deletes",
            "reconcile",
            "read_order",
            "rewrite_manifests",
            "remove_orphan_files",
            "compute_statistics",
        ] {
            assert_eq!(Trigger::parse(name).map(Trigger::as_str), Some(name));
        }
        // A merge of delete files was stored under its task's name; its reason was the deletes.
        assert_eq!(
            serde_json::from_str::<Trigger>("\"rewrite_position_delete_files\"").unwrap(),
            Trigger::Deletes
        );
        let unknown = serde_json::from_str::<Trigger>("\"compact\\u0000\"").unwrap_err();
        assert!(unknown.to_string().contains("unknown trigger"), "{unknown}");
    }

    #[test]
    fn mid_sized_files_keep_their_stored_form() {
        for mid_sized in [
            MidSizedFiles::Nowhere,
            MidSizedFiles::Everywhere,
            MidSizedFiles::In(vec!["day=1".into()]),
        ] {
            let (joins, partitions) = mid_sized.to_stored();
            assert_eq!(MidSizedFiles::from_stored(joins, partitions), mid_sized);
        }
        // Partitions named without joining (never stored so) mean nothing joins.
        assert_eq!(
            MidSizedFiles::from_stored(false, vec!["day=1".into()]),
            MidSizedFiles::Nowhere
        );
        assert!(MidSizedFiles::In(vec!["a".into()]).joins_in("a"));
        assert!(!MidSizedFiles::In(vec!["a".into()]).joins_in("b"));
        assert!(MidSizedFiles::Everywhere.joins_in("b"));
    }

    #[test]
    fn only_a_reconcile_is_not_a_run() {
        assert!(!Task::Reconcile.is_run());
        assert!(Task::ReadOrder.is_run());
        assert!(Task::Rewrite(Rewrite::whole_table()).is_run());
        for maintenance in Maintenance::ALL {
            assert!(Task::Maintenance(maintenance).is_run());
        }
    }
}
