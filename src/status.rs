//! What `icepack status` shows about a table, computed from its state and the current time.

use serde::Serialize;

use crate::clock::{format_rfc3339, UnixMillis};
use crate::config::TableSpec;
use crate::policy::due_reason;
use crate::state::TableSnapshot;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    pub tables: Vec<TableStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableStatus {
    pub table: String,
    pub pending_files: u64,
    pub pending_bytes: u64,
    pub oldest_pending_event_time: Option<String>,
    pub due: bool,
    pub due_reason: Option<&'static str>,
    pub partitions: Vec<PartitionStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    pub partition: String,
    pub files: u64,
    pub bytes: u64,
}

pub fn table_status(spec: &TableSpec, snapshot: &TableSnapshot, now: UnixMillis) -> TableStatus {
    let pending = &snapshot.state.pending;
    let reason = due_reason(pending, &spec.thresholds, now);
    TableStatus {
        table: spec.table.clone(),
        pending_files: pending.files,
        pending_bytes: pending.bytes,
        oldest_pending_event_time: pending
            .oldest_event_millis
            .filter(|_| pending.files > 0)
            .map(format_rfc3339),
        due: reason.is_some(),
        due_reason: reason.map(|reason| reason.as_str()),
        partitions: snapshot
            .partitions
            .iter()
            .filter(|(_, counts)| counts.files > 0)
            .map(|(partition, counts)| PartitionStatus {
                partition: partition.clone(),
                files: counts.files,
                bytes: counts.bytes,
            })
            .collect(),
    }
}

impl StatusReport {
    /// A plain-text table for people.
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "{:<40} {:>8} {:>12} {:<26} {}\n",
            "TABLE", "FILES", "BYTES", "OLDEST PENDING EVENT", "DUE"
        );
        for table in &self.tables {
            out.push_str(&format!(
                "{:<40} {:>8} {:>12} {:<26} {}\n",
                table.table,
                table.pending_files,
                table.pending_bytes,
                table.oldest_pending_event_time.as_deref().unwrap_or("-"),
                match table.due_reason {
                    Some(reason) => format!("yes ({reason})"),
                    None => "no".to_string(),
                }
            ));
            for partition in &table.partitions {
                let name = if partition.partition.is_empty() {
                    "(unpartitioned)"
                } else {
                    partition.partition.as_str()
                };
                out.push_str(&format!(
                    "  {:<38} {:>8} {:>12}\n",
                    name, partition.files, partition.bytes
                ));
            }
        }
        out
    }
}
