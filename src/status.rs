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
    /// The run in flight, if any: the files it claimed are not in `pending_files`.
    pub in_flight_run: Option<InFlightRun>,
    pub last_run: Option<LastRun>,
    pub consecutive_failures: u32,
    /// After failures, no run starts before this time.
    pub next_attempt_time: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InFlightRun {
    pub run_id: String,
    pub trigger: String,
    pub started_at: String,
    pub claimed_files: u64,
    pub claimed_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastRun {
    pub run_id: String,
    pub trigger: String,
    pub outcome: &'static str,
    pub failure_class: Option<&'static str>,
    pub error: Option<String>,
    pub started_at: String,
    pub finished_at: String,
    pub duration_ms: u64,
    pub attempts: u32,
    pub claimed_files: u64,
    pub claimed_bytes: u64,
    pub rewritten_data_files: Option<u64>,
    pub added_data_files: Option<u64>,
    pub rewritten_bytes: Option<u64>,
    pub output_files: u64,
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
        in_flight_run: snapshot.state.claim.as_ref().map(|claim| InFlightRun {
            run_id: claim.run_id.clone(),
            trigger: claim.trigger.clone(),
            started_at: format_rfc3339(claim.started_millis),
            claimed_files: claim.counts.files,
            claimed_bytes: claim.counts.bytes,
        }),
        last_run: snapshot.state.last_run.as_ref().map(|run| LastRun {
            run_id: run.run_id.clone(),
            trigger: run.trigger.clone(),
            outcome: if run.succeeded { "success" } else { "failure" },
            failure_class: run.failure_class.map(|class| class.as_str()),
            error: run.error.clone(),
            started_at: format_rfc3339(run.started_millis),
            finished_at: format_rfc3339(run.finished_millis),
            duration_ms: run.duration_millis,
            attempts: run.attempts,
            claimed_files: run.claimed_files,
            claimed_bytes: run.claimed_bytes,
            rewritten_data_files: run.result.map(|result| result.rewritten_data_files_count),
            added_data_files: run.result.map(|result| result.added_data_files_count),
            rewritten_bytes: run.result.map(|result| result.rewritten_bytes_count),
            output_files: run.output_files,
        }),
        consecutive_failures: snapshot.state.consecutive_failures,
        next_attempt_time: snapshot.state.next_attempt_millis.map(format_rfc3339),
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
            if let Some(run) = &table.in_flight_run {
                out.push_str(&format!(
                    "  run in flight: {} ({}), started {}, {} files / {} bytes claimed\n",
                    run.run_id, run.trigger, run.started_at, run.claimed_files, run.claimed_bytes
                ));
            }
            if let Some(run) = &table.last_run {
                let detail = match (
                    run.rewritten_data_files,
                    run.added_data_files,
                    run.failure_class,
                ) {
                    (Some(rewritten), Some(added), _) => {
                        format!("{rewritten} files rewritten into {added}")
                    }
                    (_, _, Some(class)) => {
                        format!("{class}: {}", run.error.as_deref().unwrap_or(""))
                    }
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "  last run: {} {} at {} in {} ms, {}\n",
                    run.run_id, run.outcome, run.finished_at, run.duration_ms, detail
                ));
            }
            if let Some(next) = &table.next_attempt_time {
                out.push_str(&format!(
                    "  backing off after {} failure(s): next run not before {}\n",
                    table.consecutive_failures, next
                ));
            }
        }
        out
    }
}
