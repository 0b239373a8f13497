//! What `icepack status` shows about a table, computed from its state and the current time.

use serde::Serialize;

use crate::base::clock::{format_rfc3339, UnixMillis};
use crate::config::TableSpec;
use crate::model::state::TableSnapshot;
use crate::table::policy::{table_decision, Decision};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatusReportJson {
    pub tables: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    pub tables: Vec<TableStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableStatus {
    pub table: String,
    pub tenant: String,
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
    /// When the pending state was last rebuilt from the table's committed metadata.
    pub last_truth_time: Option<String>,
    /// Thresholds are crossed but no partition has enough small files to rewrite (with the
    /// pacing off: the rewrite rule's `min_input_files`; files alone in a partition never count).
    pub nothing_to_rewrite: bool,
    /// Files successful runs took off the pending list since the table was first seen.
    pub compacted_files: u64,
    /// Files announced by events but absent from the last metadata read (not committed, or not
    /// yet): they count toward no threshold and wait for the metadata.
    pub unconfirmed_files: u64,
    /// Rewrites in a row that rewrote nothing (the table backs off as after failures).
    pub empty_runs: u32,
    /// Which threshold is nearest to firing, and how far each one is.
    pub explain: Explain,
    /// The configured strategy (`binpack`, `sort`, `zorder`, `auto`) and the table's own sort
    /// order as last read (`null`: not read yet, `""`: unsorted).
    pub strategy: &'static str,
    pub table_sort_order: Option<String>,
    /// Which engine runs the table's runs: `spark`, `native` or `auto` (each run's own is in
    /// `last_run.engine` and the run history).
    pub engine: &'static str,
    /// Manifests known from the metadata plus those announced since, and `max_manifests`
    /// (`null`: `rewrite_manifests` is off).
    pub manifests: u64,
    pub max_manifests: Option<u64>,
    /// `remove_orphan_files`: when it last ran, the next one, and the files found by the dry
    /// run and removed by the last real one (`null` when off and never run).
    pub orphans: Option<OrphanStatus>,
    /// Delete files (merge-on-read) as last read plus those announced since, and the share of
    /// rows they delete (`null` when no threshold is set and none were read).
    pub deletes: Option<DeleteStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteStatus {
    pub position_files: u64,
    pub equality_files: u64,
    pub announced_since_read: u64,
    /// Rows the delete files hold, against the data files' rows.
    pub deleted_rows: u64,
    pub data_rows: u64,
    pub file_threshold: Option<u64>,
    /// `delete_ratio_threshold` in rows per million.
    pub ratio_threshold_ppm: Option<u64>,
    pub due: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrphanStatus {
    pub every_hours: Option<i64>,
    pub older_than_hours: u64,
    pub last_run_at: Option<String>,
    /// When the last run that failed started, if none succeeded since.
    pub last_failed_at: Option<String>,
    pub next_run_at: Option<String>,
    /// The next run only lists what it would remove.
    pub next_is_dry_run: bool,
    pub found_by_dry_run: Option<u64>,
    pub removed: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explain {
    /// `files`, `bytes` or `max_wait`: the threshold closest to firing (largest share reached).
    pub nearest: Option<&'static str>,
    pub files: ThresholdDistance,
    pub bytes: ThresholdDistance,
    /// `None` when the time threshold is disabled.
    pub max_wait: Option<ThresholdDistance>,
    /// Pending files alone in their partition (a run's earlier output, a late file): a run
    /// cannot improve them by themselves, so they count toward no threshold until files join.
    pub alone_files: u64,
    /// Pending files of partitions whose small files wait to hold a small file's worth
    /// together (`fragment_fill_percent`), for half of max-wait at most: no threshold counts
    /// them until then.
    pub filling_files: u64,
    /// Why a table whose thresholds are crossed has not started its run yet.
    pub waiting: Option<WaitingStatus>,
    /// The table's pacing: `settle` (the default), `cost` or `off`.
    pub pacing: &'static str,
    /// With `pacing = "cost"`: the run cost its rules weigh, and where it comes from.
    pub run_cost: Option<RunCostStatus>,
}

/// A run held back by the pacing: `settling` (files still landing), `files` (the run would fix
/// fewer files than its cost is worth) or `cost` (the files it would fix have not waited
/// `worth_file_hours` together yet), until `until` at the latest; `text` says it in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingStatus {
    #[serde(flatten)]
    pub wait: crate::table::policy::Wait,
    pub until: String,
    pub text: String,
}

impl WaitingStatus {
    pub fn new(wait: crate::table::policy::Wait, until: UnixMillis) -> WaitingStatus {
        use crate::table::policy::Wait;
        let until = format_rfc3339(until);
        let text = match wait {
            Wait::Settling => format!("settling (files still landing) until {until}"),
            Wait::Files {
                fixable,
                worth_files,
            } => format!(
                "waiting for cost: {fixable} of {worth_files} files' worth, at the latest {until}"
            ),
            Wait::Cost {
                waited_file_hours,
                worth_file_hours,
            } => format!(
                "waiting for cost: {waited_file_hours:.2} of {worth_file_hours:.2} file-hours' worth, at the latest {until}"
            ),
        };
        WaitingStatus { wait, until, text }
    }
}

/// The run cost a cost-paced table weighs: `run_cost_seconds`, its measured runs, or the
/// runner's estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCostStatus {
    pub seconds: f64,
    pub source: crate::table::policy::RunCostSource,
}

/// How far one threshold is: `value` of `threshold` (seconds for max-wait), `remaining` to go.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThresholdDistance {
    pub value: u64,
    pub threshold: u64,
    pub remaining: u64,
    /// Share of the threshold reached, 0.0 to 1.0.
    pub reached: f64,
}

impl Eq for Explain {}

fn distance(value: u64, threshold: u64) -> ThresholdDistance {
    ThresholdDistance {
        value,
        threshold,
        remaining: threshold.saturating_sub(value),
        reached: if threshold == 0 {
            1.0
        } else {
            (value as f64 / threshold as f64).min(1.0)
        },
    }
}

pub fn explain(spec: &TableSpec, snapshot: &TableSnapshot, now: UnixMillis) -> Explain {
    let pending = &snapshot.state.pending;
    let thresholds = &spec.thresholds;
    let files = distance(pending.files, thresholds.min_files);
    let bytes = distance(pending.bytes, thresholds.min_total_bytes);
    let max_wait = thresholds.max_wait_millis.map(|max_wait| {
        let age = pending
            .oldest_event_millis
            .filter(|_| pending.files > 0)
            .map(|oldest| (now - oldest).max(0) / 1000)
            .unwrap_or(0) as u64;
        distance(age, (max_wait / 1000) as u64)
    });
    let mut candidates = vec![("files", files.reached), ("bytes", bytes.reached)];
    if let Some(wait) = &max_wait {
        if pending.files > 0 {
            candidates.push(("max_wait", wait.reached));
        }
    }
    let nearest = candidates
        .into_iter()
        .filter(|(_, reached)| *reached > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(name, _)| name);
    let pacing = spec.pacing.for_state(&snapshot.state);
    let waiting = match table_decision(
        pending,
        &snapshot.partitions,
        thresholds,
        &spec.rewrite_rule(),
        &pacing,
        now,
    ) {
        Decision::Waiting { wait, until, .. } => Some(WaitingStatus::new(wait, until)),
        _ => None,
    };
    Explain {
        nearest,
        files,
        bytes,
        max_wait,
        alone_files: snapshot
            .partitions
            .values()
            .filter(|counts| counts.files == 1)
            .count() as u64,
        filling_files: crate::table::policy::filling_files(
            &snapshot.partitions,
            thresholds,
            &pacing,
            now,
        ),
        waiting,
        pacing: spec.pacing.mode.as_str(),
        run_cost: (spec.pacing.mode == crate::table::policy::PacingMode::Cost).then(|| {
            let (millis, source) = spec
                .pacing
                .run_cost(snapshot.state.run_costs.median_millis());
            RunCostStatus {
                seconds: millis as f64 / 1000.0,
                source,
            }
        }),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InFlightRun {
    pub run_id: String,
    pub trigger: crate::model::task::Trigger,
    pub started_at: String,
    pub claimed_files: u64,
    pub claimed_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastRun {
    pub run_id: String,
    pub trigger: crate::model::task::Trigger,
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
    /// How the run rewrote: `binpack`, `sort` or `zorder` (`null` for a read).
    pub strategy: Option<String>,
    /// `rewrite_data_files` or the maintenance the run did (`rewrite_manifests`).
    pub task: &'static str,
    /// A `rewrite_manifests` run's manifests before and after.
    pub manifests_before: Option<u64>,
    pub manifests_after: Option<u64>,
    /// The partitions the run rewrote (empty: the whole table).
    pub partitions: Vec<String>,
    /// A `rewrite_position_delete_files` run's delete files rewritten and added.
    pub delete_files_rewritten: Option<u64>,
    pub delete_files_added: Option<u64>,
    /// A `remove_orphan_files` run's orphan files, and whether it was a dry run.
    pub orphan_files: Option<u64>,
    pub dry_run: Option<bool>,
    /// A `compute_statistics` run's statistics files written (table and partition statistics).
    pub statistics_files: Option<u64>,
    /// A successful run's step after its commit that failed: `{step, class, excerpt}`.
    pub maintenance_failed: Option<crate::model::report::MaintenanceFailure>,
    /// `spark` or `native` (`null`: a run of an earlier release), and how and why that engine.
    pub engine: Option<String>,
    pub engine_detail: Option<String>,
    /// The partitions a successful run was asked for and did not rewrite:
    /// `[{partition, reason}]` (no `partition`: the whole table).
    pub left: Vec<crate::model::report::LeftPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    pub partition: String,
    pub files: u64,
    pub bytes: u64,
    /// Of `files`: announced by S3 events since the last truth, and known from the metadata.
    pub from_events: u64,
    pub from_metadata: u64,
}

/// One run as status and the run history show it.
pub fn run_status(run: &crate::model::state::RunRecord) -> LastRun {
    LastRun {
        run_id: run.run_id.clone(),
        trigger: run.trigger,
        outcome: if run.succeeded { "success" } else { "failure" },
        failure_class: run.failure_class.map(|class| class.as_str()),
        // Runs recorded before a secret was recognised as one still show it hidden.
        error: run.error.as_deref().map(crate::base::redact::hide_secrets),
        started_at: format_rfc3339(run.started_millis),
        finished_at: format_rfc3339(run.finished_millis),
        duration_ms: run.duration_millis,
        attempts: run.attempts,
        claimed_files: run.claimed_files,
        claimed_bytes: run.claimed_bytes,
        strategy: run.strategy.clone(),
        task: run
            .maintenance
            .map_or("rewrite_data_files", |maintenance| maintenance.as_str()),
        manifests_before: run.manifests.map(|(before, _)| before),
        manifests_after: run.manifests.map(|(_, after)| after),
        orphan_files: run.orphan_files,
        statistics_files: run.statistics_files,
        partitions: run.partitions.clone(),
        delete_files_rewritten: run.delete_rewrite.map(|(rewritten, _)| rewritten),
        delete_files_added: run.delete_rewrite.map(|(_, added)| added),
        dry_run: match run.maintenance {
            Some(crate::model::state::Maintenance::RemoveOrphans { dry_run }) => Some(dry_run),
            _ => None,
        },
        rewritten_data_files: run.result.map(|result| result.rewritten_data_files_count),
        added_data_files: run.result.map(|result| result.added_data_files_count),
        rewritten_bytes: run.result.map(|result| result.rewritten_bytes_count),
        output_files: run.output_files,
        maintenance_failed: run.maintenance_failed.clone(),
        engine: run.ran_on.as_ref().map(|ran_on| ran_on.engine.clone()),
        engine_detail: run.ran_on.as_ref().map(|ran_on| ran_on.detail.clone()),
        left: run.left.clone(),
    }
}

pub fn table_status(spec: &TableSpec, snapshot: &TableSnapshot, now: UnixMillis) -> TableStatus {
    let pending = &snapshot.state.pending;
    let decision = table_decision(
        pending,
        &snapshot.partitions,
        &spec.thresholds,
        &spec.rewrite_rule(),
        &spec.pacing.for_state(&snapshot.state),
        now,
    );
    let reason = match &decision {
        Decision::Due { reason, .. } => Some(*reason),
        _ => None,
    };
    TableStatus {
        table: spec.table.clone(),
        tenant: spec.tenant.clone(),
        strategy: spec.strategy.name(),
        manifests: snapshot.state.manifests.total(),
        max_manifests: spec.max_manifests,
        deletes: {
            let deletes = snapshot.state.deletes;
            (spec.deletes.is_on() || deletes.read_millis.is_some()).then(|| DeleteStatus {
                position_files: deletes.position_files,
                equality_files: deletes.equality_files,
                announced_since_read: deletes.since_read,
                deleted_rows: deletes.deleted_rows,
                data_rows: deletes.data_rows,
                file_threshold: spec.deletes.files,
                ratio_threshold_ppm: spec.deletes.ratio_ppm,
                due: spec.deletes.is_on() && deletes.due(&spec.deletes),
            })
        },
        orphans: {
            let runs = snapshot.state.orphans;
            (spec.remove_orphans_every_millis.is_some()
                || runs.last_run_millis.is_some()
                || runs.failed_millis.is_some())
            .then(|| OrphanStatus {
                every_hours: spec
                    .remove_orphans_every_millis
                    .map(|every| every / 3_600_000),
                older_than_hours: spec.orphan_older_than_hours,
                last_run_at: runs.last_run_millis.map(format_rfc3339),
                last_failed_at: runs.failed_millis.map(format_rfc3339),
                next_run_at: spec.remove_orphans_every_millis.map(|every| {
                    let last = runs.last_run_millis.max(runs.failed_millis);
                    format_rfc3339(last.map_or(now, |last| last.saturating_add(every)))
                }),
                next_is_dry_run: !runs.dry_run_done,
                found_by_dry_run: runs.found,
                removed: runs.removed,
            })
        },
        engine: spec.engine.as_str(),
        unconfirmed_files: snapshot.state.unconfirmed.files,
        empty_runs: snapshot.state.empty_runs,
        table_sort_order: snapshot
            .state
            .table_order
            .as_ref()
            .map(|order| match order {
                crate::model::strategy::TableOrder::Unsorted => String::new(),
                crate::model::strategy::TableOrder::Sorted(order) => order.clone(),
            }),
        pending_files: pending.files,
        compacted_files: snapshot.state.compacted_files,
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
                from_events: counts.files - counts.metadata_files.min(counts.files),
                from_metadata: counts.metadata_files,
            })
            .collect(),
        in_flight_run: snapshot.state.claim.as_ref().map(|claim| InFlightRun {
            run_id: claim.run_id.clone(),
            trigger: claim.trigger,
            started_at: format_rfc3339(claim.started_millis),
            claimed_files: claim.counts.files,
            claimed_bytes: claim.counts.bytes,
        }),
        last_run: snapshot.state.last_run.as_ref().map(run_status),
        consecutive_failures: snapshot.state.consecutive_failures,
        next_attempt_time: snapshot.state.next_attempt_millis.map(format_rfc3339),
        last_truth_time: snapshot.state.last_truth_millis.map(format_rfc3339),
        nothing_to_rewrite: matches!(decision, Decision::NothingToRewrite(_)),
        explain: explain(spec, snapshot, now),
    }
}

/// A plain-text table for people, from the JSON document (local or from the service's API).
pub fn render_status_text(report: &serde_json::Value) -> String {
    let text = |value: &serde_json::Value| {
        value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| "-".to_string())
    };
    let number = |value: &serde_json::Value| value.as_u64().unwrap_or(0);
    let mut out = String::new();
    let engine = &report["engine"];
    if engine.is_object() {
        let state = match engine["answering"].as_bool() {
            Some(true) => format!(
                "answering (probe {} ms at {})",
                number(&engine["probe_millis"]),
                text(&engine["checked_at"])
            ),
            Some(false) => format!(
                "NOT answering at {}: {}",
                text(&engine["checked_at"]),
                text(&engine["error"])
            ),
            None => "not probed yet".to_string(),
        };
        out.push_str(&format!("engine: {} {state}\n\n", text(&engine["engine"])));
    }
    let queues = report["queues"]
        .as_array()
        .filter(|queues| !queues.is_empty());
    for queue in queues.into_iter().flatten() {
        out.push_str(&format!(
            "queue {}: last receive {}, {} received, {} deleted, {} left invalid\n",
            text(&queue["queue"]),
            text(&queue["last_receive_at"]),
            number(&queue["messages_received"]),
            number(&queue["messages_deleted"]),
            number(&queue["messages_invalid"])
        ));
        if let Some(problem) = queue["problem"].as_str() {
            out.push_str(&format!("  NOT READY: {problem}\n"));
        }
    }
    if queues.is_some() {
        out.push('\n');
    }
    out.push_str(&format!(
        "{:<40} {:>8} {:>12} {:<26} {}\n",
        "TABLE", "FILES", "BYTES", "OLDEST PENDING EVENT", "DUE"
    ));
    for table in report["tables"].as_array().into_iter().flatten() {
        let due = match table["due_reason"].as_str() {
            Some(reason) => format!("yes ({reason})"),
            None => "no".to_string(),
        };
        out.push_str(&format!(
            "{:<40} {:>8} {:>12} {:<26} {}\n",
            text(&table["table"]),
            number(&table["pending_files"]),
            number(&table["pending_bytes"]),
            text(&table["oldest_pending_event_time"]),
            due
        ));
        for partition in table["partitions"].as_array().into_iter().flatten() {
            let name = partition["partition"]
                .as_str()
                .filter(|name| !name.is_empty())
                .unwrap_or("(unpartitioned)");
            out.push_str(&format!(
                "  {:<38} {:>8} {:>12}   {} from events, {} from metadata\n",
                name,
                number(&partition["files"]),
                number(&partition["bytes"]),
                number(&partition["from_events"]),
                number(&partition["from_metadata"])
            ));
        }
        if let Some(nearest) = table["explain"]["nearest"].as_str() {
            let detail = &table["explain"][nearest];
            out.push_str(&format!(
                "  nearest threshold: {nearest}, {} of {} ({:.0}%)\n",
                number(&detail["value"]),
                number(&detail["threshold"]),
                detail["reached"].as_f64().unwrap_or(0.0) * 100.0
            ));
        }
        if let Some(waiting) = table["explain"]["waiting"]["text"].as_str() {
            out.push_str(&format!("  waiting: {waiting}\n"));
        }
        if let Some(seconds) = table["explain"]["run_cost"]["seconds"].as_f64() {
            out.push_str(&format!(
                "  cost pacing: a run costs {seconds:.1} s ({})\n",
                text(&table["explain"]["run_cost"]["source"])
            ));
        }
        let alone = number(&table["explain"]["alone_files"]);
        if alone > 0 {
            out.push_str(&format!(
                "  {alone} file(s) alone in their partition: no threshold counts them until files join\n"
            ));
        }
        let filling = number(&table["explain"]["filling_files"]);
        if filling > 0 {
            out.push_str(&format!(
                "  {filling} small file(s) wait to hold a small file's worth in their partition (at most half of max-wait): no threshold counts them yet\n"
            ));
        }
        let run = &table["in_flight_run"];
        if run.is_object() {
            out.push_str(&format!(
                "  run in flight: {} ({}), started {}, {} files / {} bytes claimed\n",
                text(&run["run_id"]),
                text(&run["trigger"]),
                text(&run["started_at"]),
                number(&run["claimed_files"]),
                number(&run["claimed_bytes"])
            ));
        }
        let last = &table["last_run"];
        if last.is_object() {
            let detail = if last["outcome"] == "success" {
                format!(
                    "{} files rewritten into {}",
                    number(&last["rewritten_data_files"]),
                    number(&last["added_data_files"])
                )
            } else {
                format!("{}: {}", text(&last["failure_class"]), text(&last["error"]))
            };
            out.push_str(&format!(
                "  last run: {} {} at {} in {} ms, {}\n",
                text(&last["run_id"]),
                text(&last["outcome"]),
                text(&last["finished_at"]),
                number(&last["duration_ms"]),
                detail
            ));
        }
        if let Some(tenant) = table["tenant"]
            .as_str()
            .filter(|tenant| *tenant != "default")
        {
            out.push_str(&format!("  tenant: {tenant}\n"));
        }
        if let Some(position) = table["queue_position"].as_u64() {
            let wait = table["expected_wait_seconds"]
                .as_u64()
                .map(|seconds| format!(", expected to start in about {seconds} s"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  waiting for a run slot: {} ahead of it{wait}\n",
                position
            ));
        }
        if table["next_attempt_time"].is_string() {
            out.push_str(&format!(
                "  backing off after {} failure(s): next run not before {}\n",
                number(&table["consecutive_failures"]),
                text(&table["next_attempt_time"])
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_shows_each_queue_and_why_one_is_not_ready() {
        let report = serde_json::json!({
            "tables": [],
            "queues": [
                {"queue": "landing-a", "last_receive_at": "2024-05-01T12:00:00.000Z",
                 "messages_received": 5, "messages_deleted": 4, "messages_invalid": 1, "problem": null},
                {"queue": "landing-b", "last_receive_at": null, "messages_received": 0,
                 "messages_deleted": 0, "messages_invalid": 0,
                 "problem": "queue landing-b has not been reached yet"},
            ],
        });
        let text = render_status_text(&report);
        assert!(text.starts_with(
            "queue landing-a: last receive 2024-05-01T12:00:00.000Z, 5 received, 4 deleted, 1 left invalid\n\
             queue landing-b: last receive -, 0 received, 0 deleted, 0 left invalid\n  \
             NOT READY: queue landing-b has not been reached yet\n\nTABLE"
        ), "{text}");
    }

    /// A run recorded before its secret was recognised as one (a JDBC URI's password) shows it
    /// hidden in status, the run history and the page.
    #[test]
    fn an_older_runs_error_is_shown_without_its_secrets() {
        let run = crate::model::state::RunRecord {
            run_id: "r".to_string(),
            trigger: crate::model::task::Trigger::Manual,
            started_millis: 0,
            finished_millis: 1,
            claimed_files: 2,
            claimed_bytes: 3,
            succeeded: false,
            failure_class: None,
            error: Some(
                "PSQLException at jdbc:postgresql://db/c?user=u&password=JDBCPW: refused"
                    .to_string(),
            ),
            result: None,
            output_files: 0,
            duration_millis: 1,
            attempts: 1,
            strategy: None,
            maintenance: None,
            manifests: None,
            orphan_files: None,
            delete_rewrite: None,
            statistics_files: None,
            maintenance_failed: None,
            left: vec![crate::model::report::LeftPartition {
                partition: Some("d=1".to_string()),
                reason: "no live data file".to_string(),
            }],
            ran_on: None,
            partitions: Vec::new(),
        };
        let shown = run_status(&run).error.unwrap();
        assert_eq!(
            shown,
            "PSQLException at jdbc:postgresql://db/c?user=u&password=*** refused"
        );
        assert_eq!(
            run_status(&run).left,
            run.left,
            "the partitions a run left, with why"
        );
    }
}
