//! Durable table state behind a narrow trait: RocksDB in the service, memory in unit tests.
//!
//! Every logical change is one list of [`Op`]s committed atomically and synced to disk before
//! anything depending on it (an SQS delete) happens.

mod gate;
mod memory;
#[cfg(feature = "service")]
mod rocks;

pub use gate::{StoreGate, StoreHealth};
pub use memory::MemoryStore;
#[cfg(feature = "service")]
pub use rocks::RocksStore;

/// The RocksDB store's column families.
#[cfg(feature = "service")]
pub const FAMILIES: [&str; 7] = rocks::cf::ALL;

use crate::base::clock::UnixMillis;
use crate::model::state::{FileEntry, PartitionCounts, SeenEntry, TableSnapshot, TableState};

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("state directory {path} is in use by another icepack process (its RocksDB LOCK is held); stop that process or point service.state_dir elsewhere")]
    Locked { path: String },
    #[error("state store at {path}: {message}")]
    Open { path: String, message: String },
    #[error("state store write failed: {0}")]
    Write(String),
    #[error("state store read failed: {0}")]
    Read(String),
    #[error("state store holds a value it cannot decode under {key}: {message}")]
    Corrupt { key: String, message: String },
    #[error("state store is open read-only")]
    ReadOnly,
    #[error("state store unavailable: {0}")]
    Unavailable(String),
}

/// What [`StateStore::forget_table`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ForgetSummary {
    /// Whether the table had a state record.
    pub table_state: bool,
    /// Partition records removed.
    pub partitions: u64,
    /// Entries of the counted-file log removed.
    pub files: u64,
    /// Remembered object keys removed (those whose [`SeenEntry::table`] is the table).
    pub seen_keys: u64,
}

/// What [`StateStore::purge_seen_before`] did. A purge reads only the time index of the remembered
/// keys up to the cutoff, so `examined` — its whole work — follows the keys past the retention, not
/// the keys remembered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PurgeSummary {
    /// Entries of the time index read: keys first seen before the cutoff, and stale entries.
    pub examined: u64,
    /// Remembered keys forgotten (with their index entries).
    pub purged: u64,
    /// Keys past the retention kept because their file is still pending or claimed (it is in its
    /// table's counted-file log): a later purge looks at them again.
    pub kept_in_log: u64,
    /// Index entries of a key since remembered again under another first-seen time, removed.
    pub stale: u64,
}

/// One change to the durable state.
// Ops live only between staging and the commit; boxing the table state would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    PutTable {
        table: String,
        state: TableState,
    },
    PutPartition {
        table: String,
        partition: String,
        counts: PartitionCounts,
    },
    DeletePartition {
        table: String,
        partition: String,
    },
    /// Remembers an object key, and indexes it by its first-seen time for the purge.
    PutSeen {
        bucket: String,
        key: String,
        entry: SeenEntry,
    },
    PutFile {
        table: String,
        seq: u64,
        entry: FileEntry,
    },
    DeleteFile {
        table: String,
        seq: u64,
    },
    /// Deletes the table's logged files with a sequence number below `seq`.
    DeleteFilesBelow {
        table: String,
        seq: u64,
    },
    /// Keeps a finished run in the table's history under its sequence number.
    PutRun {
        table: String,
        seq: u64,
        record: crate::model::state::RunRecord,
    },
    /// Drops the table's runs with a sequence number below `seq` (the history's bound).
    DeleteRunsBelow {
        table: String,
        seq: u64,
    },
    /// A point of the table's small-files series, at `slot` minutes or hours since the epoch.
    PutSample {
        table: String,
        resolution: crate::model::series::Resolution,
        slot: i64,
        sample: crate::model::series::Sample,
    },
    /// Drops the table's points of one resolution before `slot` (the series' retention).
    DeleteSamplesBelow {
        table: String,
        resolution: crate::model::series::Resolution,
        slot: i64,
    },
}

impl Op {
    /// A change to `table`'s series, as an op of the commit it joins.
    pub fn series(table: &str, write: crate::model::series::SeriesWrite) -> Op {
        use crate::model::series::SeriesWrite;
        match write {
            SeriesWrite::Put {
                resolution,
                slot,
                sample,
            } => Op::PutSample {
                table: table.to_string(),
                resolution,
                slot,
                sample,
            },
            SeriesWrite::DeleteBelow { resolution, slot } => Op::DeleteSamplesBelow {
                table: table.to_string(),
                resolution,
                slot,
            },
        }
    }
}

/// The state store every component talks to.
pub trait StateStore: Send + Sync + 'static {
    /// A table's state and partitions; the default (empty) state for a table never seen.
    fn load_table(&self, table: &str) -> Result<TableSnapshot, StoreError>;

    /// For each (bucket, key), whether it was counted before.
    fn seen(&self, objects: &[(&str, &str)]) -> Result<Vec<bool>, StoreError>;

    /// For each (bucket, key), what is remembered of it.
    fn seen_entries(&self, objects: &[(&str, &str)]) -> Result<Vec<Option<SeenEntry>>, StoreError>;

    /// Applies all ops atomically and syncs them to disk before returning.
    fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError>;

    /// Forgets the object keys first seen before `cutoff`, except those of files still pending or
    /// claimed: a file whose [`SeenEntry::seq`] is in its table's counted-file log is remembered
    /// until it leaves the log (compacted, or dropped by a truth read), so a late redelivery of it
    /// stays a duplicate. Reads only the keys first seen before `cutoff` (a time index), in steps
    /// that each hold commits back for a moment only.
    fn purge_seen_before(&self, cutoff: UnixMillis) -> Result<PurgeSummary, StoreError>;

    /// The counted-file log of a table, in sequence order.
    fn files(&self, table: &str) -> Result<Vec<(u64, FileEntry)>, StoreError>;

    /// A table's run history, oldest first.
    fn runs(&self, table: &str) -> Result<Vec<(u64, crate::model::state::RunRecord)>, StoreError>;

    /// A table's small-files series, both resolutions, oldest first.
    fn series(&self, table: &str) -> Result<crate::model::series::Series, StoreError>;

    /// Deletes everything kept about a table: its state, partitions, counted-file log, and the
    /// remembered object keys counted for it. Synced before returning. Returns what was removed.
    ///
    /// Other tables are untouched, whatever their names share with this one (`a.b` never takes
    /// `a.bc` or `a.b.c` with it). An admin operation: finding the table's remembered keys reads
    /// the whole time index of remembered keys. Later commits may write the table again: one still fed events is
    /// counted afresh.
    fn forget_table(&self, table: &str) -> Result<ForgetSummary, StoreError>;

    /// Whether a failed write left the store refusing every operation until [`Self::recover`].
    fn needs_recovery(&self) -> bool {
        false
    }

    /// Makes the store usable again after failed writes (RocksDB: reopened, so nothing of a
    /// failed write is read back from memory) and proves it with a synced probe write. Fails
    /// while the disk still refuses writes; call again later.
    fn recover(&self) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests;
