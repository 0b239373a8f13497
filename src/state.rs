//! The durable shape of a table's state: what icepack remembers between restarts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::UnixMillis;

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
    pub fn add_file(&mut self, bytes: u64, event_millis: UnixMillis) {
        self.files += 1;
        self.bytes += bytes;
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
}

/// One table's durable record (the `tables` column family).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableState {
    pub pending: PendingCounts,
    /// Sequence number the next counted file gets; files are logged under it.
    pub next_file_seq: u64,
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
}

/// What is remembered of an object key to recognise duplicates (the `seen` column family).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenEntry {
    pub table: String,
    pub first_seen_millis: UnixMillis,
}
