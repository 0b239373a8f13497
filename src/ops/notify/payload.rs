//! What a run event looks like in Slack (the reference workflow's attachments: a coloured bar and
//! short fields) and in the generic JSON webhook (schema `icepack.run/v1`, documented in docs/operations.md).

use serde_json::{json, Value};

use super::RunEvent;
use crate::base::clock::format_rfc3339;
use crate::config::DEFAULT_TENANT;
use crate::model::report::RunOutcome;

const GREEN: &str = "#36a64f";
const RED: &str = "#E01E5A";
/// A run that succeeded and a step after its commit that failed.
const AMBER: &str = "#ECB22E";

fn mib(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / (1024.0 * 1024.0))
}

fn seconds(millis: u64) -> String {
    if millis >= 60_000 {
        format!("{}m {:02}s", millis / 60_000, (millis / 1000) % 60)
    } else {
        format!("{:.1} s", millis as f64 / 1000.0)
    }
}

fn field(title: &str, value: String, short: bool) -> Value {
    json!({"title": title, "value": value, "short": short})
}

/// A Slack incoming-webhook message. `channel` is ignored by app webhooks, honoured by legacy ones.
/// The tenant is shown (a "Tenant" field after "Table") unless it is the implicit one, so a
/// deployment without `[tenants]` looks as it always did.
pub fn slack(event: &RunEvent, channel: &str) -> Value {
    let mut message = match (&event.outcome, event.maintenance) {
        (
            RunOutcome::Success {
                report,
                duration_millis,
                ..
            },
            Some(maintenance),
        ) => json!({
            "text": format!(":white_check_mark: Iceberg Table Maintenance Completed: `{}` ({})", event.table, maintenance.as_str()),
            "attachments": [{
                "color": GREEN,
                "title": "Maintenance Summary",
                "fields": [
                    field("Table", format!("`{}`", event.table), true),
                    field("Run ID", format!("`{}`", event.run_id), true),
                    field("Catalog", format!("{} ({})", event.catalog, event.catalog_impl), true),
                    field("Task", maintenance.as_str().to_string(), true),
                    match maintenance {
                        crate::model::state::Maintenance::RewriteManifests => field("Manifests", manifest_effect(report), true),
                        crate::model::state::Maintenance::RemoveOrphans { dry_run: true } => field(
                            "Orphan Files",
                            format!("dry run: {} found, none removed", report.orphan_files.unwrap_or(0)),
                            true,
                        ),
                        crate::model::state::Maintenance::RemoveOrphans { dry_run: false } => field(
                            "Orphan Files",
                            format!("{} removed", report.orphan_files.unwrap_or(0)),
                            true,
                        ),
                        crate::model::state::Maintenance::ComputeStatistics => field(
                            "Statistics Files",
                            format!("{} written", report.statistics_files.unwrap_or(0)),
                            true,
                        ),
                        crate::model::state::Maintenance::RewritePositionDeletes => field(
                            "Delete Files",
                            {
                                let (rewritten, added) = report.delete_rewrite.unwrap_or_default();
                                format!("{rewritten} rewritten → {added} added")
                            },
                            true,
                        ),
                    },
                    field("Duration", seconds(*duration_millis), true),
                ],
            }],
        }),
        (
            RunOutcome::Success {
                report,
                duration_millis,
                ..
            },
            None,
        ) => json!({
            "text": format!(":white_check_mark: Iceberg Table Compaction Completed: `{}`", event.table),
            "attachments": [{
                "color": GREEN,
                "title": "Compaction Summary",
                "fields": [
                    field("Table", format!("`{}`", event.table), true),
                    field("Run ID", format!("`{}`", event.run_id), true),
                    field("Catalog", format!("{} ({})", event.catalog, event.catalog_impl), true),
                    field("Trigger", event.trigger.to_string(), true),
                    field("Strategy", event.strategy.clone(), true),
                    field("Files", format!("{} rewritten → {} added", report.result.rewritten_data_files_count, report.result.added_data_files_count), true),
                    field("Bytes Rewritten", mib(report.result.rewritten_bytes_count), true),
                    field("Duration", seconds(*duration_millis), true),
                    field("Target File Size", format!("{} MB", event.target_file_bytes / (1024 * 1024)), true),
                ],
            }],
        }),
        (
            RunOutcome::Failure {
                class,
                excerpt,
                duration_millis,
                attempts,
            },
            maintenance,
        ) => json!({
            "text": match maintenance {
                None => format!(":x: Iceberg Compaction Job Failed: `{}`", event.table),
                Some(maintenance) => format!(":x: Iceberg Maintenance Job Failed: `{}` ({})", event.table, maintenance.as_str()),
            },
            "attachments": [{
                "color": RED,
                "title": "Compaction Failure Alert",
                "fields": [
                    field("Table", format!("`{}`", event.table), true),
                    field("Run ID", format!("`{}`", event.run_id), true),
                    field("Failure Class", class.as_str().to_string(), true),
                    field("Attempts", format!("{attempts} in {}", seconds(*duration_millis)), true),
                    field("Error", format!("```{}```", excerpt.replace("```", "'''")), false),
                    field(
                        "Pending State Preserved",
                        format!("pending state preserved: {} files, {}", event.claimed_files, mib(event.claimed_bytes)),
                        false,
                    ),
                ],
            }],
        }),
    };
    if let Some(failed) = event.outcome.maintenance_failed() {
        message["text"] = json!(format!(
            ":warning: Iceberg Table Compaction Completed, `{}` failed after its commit: `{}`",
            failed.step, event.table
        ));
        message["attachments"][0]["color"] = json!(AMBER);
        if let Some(fields) = message["attachments"][0]["fields"].as_array_mut() {
            fields.push(field(
                "Maintenance Failed",
                format!(
                    "{} ({}): ```{}```",
                    failed.step,
                    failed.class.as_str(),
                    failed.excerpt.replace("```", "'''")
                ),
                false,
            ));
        }
    }
    if let (RunOutcome::Success { report, .. }, None) = (&event.outcome, event.maintenance) {
        if !report.left.is_empty() {
            if report.result.rewritten_data_files_count == 0
                && event.outcome.maintenance_failed().is_none()
            {
                message["text"] = json!(format!(
                    ":warning: Iceberg Table Compaction rewrote nothing, the table stays due: `{}`",
                    event.table
                ));
                message["attachments"][0]["color"] = json!(AMBER);
            }
            if let Some(fields) = message["attachments"][0]["fields"].as_array_mut() {
                fields.push(field("Left Due", left_lines(&report.left), false));
            }
        }
    }
    if let Some(ran_on) = &event.ran_on {
        if let Some(fields) = message["attachments"][0]["fields"].as_array_mut() {
            fields.push(field(
                "Engine",
                format!("{}: {}", ran_on.engine, ran_on.detail),
                true,
            ));
        }
    }
    if event.tenant != DEFAULT_TENANT {
        if let Some(fields) = message["attachments"][0]["fields"].as_array_mut() {
            fields.insert(1, field("Tenant", event.tenant.clone(), true));
        }
    }
    if !channel.is_empty() {
        message["channel"] = json!(channel);
    }
    message
}

/// The partitions a run left, a line each (the first five and a count of the others), their
/// names in code spans with Slack's control characters escaped: a partition name comes from an
/// S3 key, which anyone who can write to the bucket chooses.
fn left_lines(left: &[crate::model::report::LeftPartition]) -> String {
    let escape = |text: &str| {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('`', "'")
    };
    let mut lines: Vec<String> = left
        .iter()
        .take(5)
        .map(|left| match &left.partition {
            Some(partition) => format!("`{}`: {}", escape(partition), escape(&left.reason)),
            None => escape(&left.reason),
        })
        .collect();
    if left.len() > 5 {
        lines.push(format!("and {} more", left.len() - 5));
    }
    lines.join("\n")
}

/// What a `rewrite_manifests` run did: `12 rewritten → 1 added, 1 now`.
fn manifest_effect(report: &crate::model::report::ReportSummary) -> String {
    let rewrite = report.manifests.unwrap_or_default();
    let now = report
        .manifest_count
        .map(|count| format!(", {count} now"))
        .unwrap_or_default();
    format!(
        "{} rewritten → {} added{now}",
        rewrite.rewritten_manifests_count, rewrite.added_manifests_count
    )
}

/// The generic webhook document; `tenant` is always there (`default` without `[tenants]`).
pub fn webhook(event: &RunEvent) -> Value {
    let (event_name, result, failure, duration_millis, attempts) = match &event.outcome {
        RunOutcome::Success {
            report,
            duration_millis,
            attempts,
        } => (
            "compaction_succeeded",
            json!({
                "rewritten_data_files": report.result.rewritten_data_files_count,
                "added_data_files": report.result.added_data_files_count,
                "rewritten_bytes": report.result.rewritten_bytes_count,
                "failed_data_files": report.result.failed_data_files_count,
                "removed_delete_files": report.result.removed_delete_files_count,
            }),
            Value::Null,
            *duration_millis,
            *attempts,
        ),
        RunOutcome::Failure {
            class,
            excerpt,
            duration_millis,
            attempts,
        } => (
            "compaction_failed",
            Value::Null,
            json!({"class": class.as_str(), "excerpt": excerpt}),
            *duration_millis,
            *attempts,
        ),
    };
    let (event_name, result) = match (event.maintenance, &event.outcome) {
        (None, _) => (event_name, result),
        (
            Some(crate::model::state::Maintenance::RemoveOrphans { dry_run }),
            RunOutcome::Success { report, .. },
        ) => (
            "maintenance_succeeded",
            json!({"orphan_files": report.orphan_files.unwrap_or(0), "dry_run": dry_run}),
        ),
        (
            Some(crate::model::state::Maintenance::ComputeStatistics),
            RunOutcome::Success { report, .. },
        ) => (
            "maintenance_succeeded",
            json!({"statistics_files": report.statistics_files.unwrap_or(0)}),
        ),
        (Some(_), RunOutcome::Success { report, .. }) => (
            "maintenance_succeeded",
            json!({
                "rewritten_manifests": report.manifests.unwrap_or_default().rewritten_manifests_count,
                "added_manifests": report.manifests.unwrap_or_default().added_manifests_count,
                "manifests": report.manifest_count,
            }),
        ),
        (Some(_), RunOutcome::Failure { .. }) => ("maintenance_failed", result),
    };
    json!({
        "schema": "icepack.run/v1",
        "event": event_name,
        "task": event.maintenance.map_or("rewrite_data_files", |maintenance| maintenance.as_str()),
        "tenant": event.tenant,
        "table": event.table,
        "run_id": event.run_id,
        "catalog": event.catalog,
        "trigger": event.trigger,
        "strategy": event.strategy,
        "engine": event.ran_on,
        "started_at": format_rfc3339(event.started_millis),
        "finished_at": format_rfc3339(event.finished_millis),
        "duration_ms": duration_millis,
        "attempts": attempts,
        "target_file_bytes": event.target_file_bytes,
        "claimed": {"files": event.claimed_files, "bytes": event.claimed_bytes},
        "result": result,
        "left": match (&event.outcome, event.maintenance) {
            (RunOutcome::Success { report, .. }, None) => json!(report.left),
            _ => json!([]),
        },
        "failure": failure,
        "maintenance_failed": match (event.maintenance, &event.outcome) {
            // Statistics that could not be computed: a maintenance note, as a failed step after
            // a commit is (the run that changed the table committed).
            (
                Some(crate::model::state::Maintenance::ComputeStatistics),
                RunOutcome::Failure { class, excerpt, .. },
            ) => json!({
                "step": crate::model::state::Maintenance::ComputeStatistics.as_str(),
                "class": class.as_str(),
                "excerpt": excerpt,
            }),
            _ => event.outcome.maintenance_failed().map_or(Value::Null, |failed| json!({
                "step": failed.step,
                "class": failed.class.as_str(),
                "excerpt": failed.excerpt,
            })),
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::report::ReportSummary;
    use crate::model::report::{FailureClass, RewriteResult};

    pub(crate) fn event(outcome: RunOutcome) -> RunEvent {
        RunEvent {
            tenant: "default".to_string(),
            table: "analytics.orders".to_string(),
            run_id: "20240501T120000Z-abc123".to_string(),
            catalog: "lakehouse".to_string(),
            catalog_impl: "org.apache.iceberg.rest.RESTCatalog".to_string(),
            trigger: crate::model::task::Trigger::Files,
            strategy: "binpack".to_string(),
            ran_on: None,
            maintenance: None,
            started_millis: 1_714_564_800_000,
            finished_millis: 1_714_564_812_500,
            target_file_bytes: 512 * 1024 * 1024,
            claimed_files: 12,
            claimed_bytes: 3 * 1024 * 1024,
            outcome,
        }
    }

    /// Issue 33 item 5: a statistics run's files in Slack and the webhook; its failure is a
    /// `maintenance_failed` note naming the step, as a failed step after a commit is.
    #[test]
    fn a_statistics_run_tells_its_files_and_its_failure_as_a_maintenance_note() {
        let mut computed = event(RunOutcome::Success {
            report: ReportSummary {
                statistics_files: Some(2),
                ..ReportSummary::default()
            },
            duration_millis: 900,
            attempts: 1,
        });
        computed.maintenance = Some(crate::model::state::Maintenance::ComputeStatistics);
        let fields = slack(&computed, "")["attachments"][0]["fields"].to_string();
        assert!(fields.contains("2 written"), "{fields}");
        let document = webhook(&computed);
        assert_eq!(document["task"], "compute_statistics");
        assert_eq!(document["result"]["statistics_files"], 2);
        assert!(document["maintenance_failed"].is_null());
        let mut failed = event(RunOutcome::Failure {
            class: crate::model::report::FailureClass::Other,
            excerpt: "Procedure not found".to_string(),
            duration_millis: 900,
            attempts: 1,
        });
        failed.maintenance = Some(crate::model::state::Maintenance::ComputeStatistics);
        let document = webhook(&failed);
        assert_eq!(document["event"], "maintenance_failed");
        assert_eq!(document["maintenance_failed"]["step"], "compute_statistics");
        assert_eq!(document["maintenance_failed"]["class"], "other");
    }

    #[test]
    fn a_maintenance_run_names_its_task_and_its_effect() {
        let mut event = event(RunOutcome::Success {
            report: ReportSummary {
                manifests: Some(crate::model::report::ManifestRewrite {
                    rewritten_manifests_count: 12,
                    added_manifests_count: 1,
                }),
                manifest_count: Some(1),
                ..ReportSummary::default()
            },
            duration_millis: 900,
            attempts: 1,
        });
        event.maintenance = Some(crate::model::state::Maintenance::RewriteManifests);
        let message = slack(&event, "");
        assert!(message["text"]
            .as_str()
            .unwrap()
            .contains("Maintenance Completed: `analytics.orders` (rewrite_manifests)"));
        let fields = message["attachments"][0]["fields"].to_string();
        assert!(fields.contains("12 rewritten → 1 added, 1 now"), "{fields}");
        let document = webhook(&event);
        assert_eq!(document["event"], "maintenance_succeeded");
        assert_eq!(document["task"], "rewrite_manifests");
        assert_eq!(document["result"]["rewritten_manifests"], 12);
        assert_eq!(document["result"]["manifests"], 1);
        assert_eq!(
            webhook(&super::tests::event(success()))["task"],
            "rewrite_data_files"
        );
    }

    pub(crate) fn success() -> RunOutcome {
        RunOutcome::Success {
            report: ReportSummary {
                result: RewriteResult {
                    rewritten_data_files_count: 12,
                    added_data_files_count: 1,
                    rewritten_bytes_count: 3 * 1024 * 1024,
                    ..Default::default()
                },
                output_files: vec!["s3://b/k".to_string()],
                ..Default::default()
            },
            duration_millis: 12_500,
            attempts: 1,
        }
    }

    #[test]
    fn slack_success_has_the_reference_look() {
        let message = slack(&event(success()), "#lakehouse-alerts");
        assert_eq!(message["channel"], "#lakehouse-alerts");
        assert!(message["text"]
            .as_str()
            .unwrap()
            .contains("Compaction Completed: `analytics.orders`"));
        let attachment = &message["attachments"][0];
        assert_eq!(attachment["color"], GREEN);
        let fields: Vec<(&str, &str)> = attachment["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|field| {
                (
                    field["title"].as_str().unwrap(),
                    field["value"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(fields.contains(&("Files", "12 rewritten → 1 added")));
        assert!(fields.contains(&("Bytes Rewritten", "3.00 MB")));
        assert!(fields.contains(&("Duration", "12.5 s")));
        assert!(fields.contains(&("Target File Size", "512 MB")));
        assert!(fields.contains(&("Catalog", "lakehouse (org.apache.iceberg.rest.RESTCatalog)")));
        assert!(fields.contains(&("Trigger", "files")));
    }

    #[test]
    fn slack_failure_says_what_is_preserved() {
        let failure = RunOutcome::Failure {
            class: FailureClass::Timeout,
            excerpt: "deadline passed ```".to_string(),
            duration_millis: 3_600_000,
            attempts: 1,
        };
        let message = slack(&event(failure), "");
        assert!(message.get("channel").is_none());
        let attachment = &message["attachments"][0];
        assert_eq!(attachment["color"], RED);
        let text = attachment.to_string();
        assert!(
            text.contains("pending state preserved: 12 files, 3.00 MB"),
            "{text}"
        );
        assert!(text.contains("timeout"));
        assert!(text.contains("60m 00s"));
    }

    #[test]
    fn webhook_document_follows_its_schema() {
        let document = webhook(&event(success()));
        assert_eq!(document["schema"], "icepack.run/v1");
        assert_eq!(document["event"], "compaction_succeeded");
        assert_eq!(document["result"]["added_data_files"], 1);
        assert!(document["failure"].is_null());
        assert_eq!(document["started_at"], "2024-05-01T12:00:00.000Z");
    }

    fn field_titles(message: &Value) -> Vec<String> {
        message["attachments"][0]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|field| field["title"].as_str().unwrap().to_string())
            .collect()
    }

    fn failure() -> RunOutcome {
        RunOutcome::Failure {
            class: FailureClass::Timeout,
            excerpt: "deadline passed".to_string(),
            duration_millis: 1_000,
            attempts: 1,
        }
    }

    #[test]
    fn slack_shows_the_tenant_only_when_there_are_tenants() {
        for outcome in [success(), failure()] {
            let untenanted = slack(&event(outcome.clone()), "#lakehouse-alerts");
            assert!(
                !field_titles(&untenanted).iter().any(|t| t == "Tenant"),
                "the single-tenant look is unchanged"
            );
            let mut tenanted = event(outcome);
            tenanted.tenant = "analytics".to_string();
            let message = slack(&tenanted, "#analytics");
            let titles = field_titles(&message);
            assert_eq!(titles[..2], ["Table", "Tenant"]);
            let tenant_field = &message["attachments"][0]["fields"][1];
            assert_eq!(tenant_field["value"], "analytics");
            assert_eq!(
                titles.len(),
                field_titles(&untenanted).len() + 1,
                "nothing else changes"
            );
        }
    }

    /// Issue 31: a run whose rewrite committed and whose snapshot expiry then failed is a
    /// success, the failed step beside it (amber in Slack, `maintenance_failed` in the webhook).
    #[test]
    fn a_failed_step_after_the_commit_is_told_beside_the_success() {
        let mut outcome = success();
        if let RunOutcome::Success { report, .. } = &mut outcome {
            report.maintenance_failed = Some(crate::model::report::MaintenanceFailure {
                step: "expire_snapshots".to_string(),
                class: FailureClass::Other,
                excerpt: "RuntimeIOException: Failed to delete file".to_string(),
            });
        }
        let message = slack(&event(outcome.clone()), "");
        assert!(
            message["text"]
                .as_str()
                .unwrap()
                .contains("`expire_snapshots` failed after its commit"),
            "{message}"
        );
        assert_eq!(message["attachments"][0]["color"], AMBER);
        let fields = message["attachments"][0]["fields"].to_string();
        assert!(fields.contains("12 rewritten → 1 added"), "{fields}");
        assert!(
            fields.contains("expire_snapshots (other): ```RuntimeIOException"),
            "{fields}"
        );
        let document = webhook(&event(outcome));
        assert_eq!(document["event"], "compaction_succeeded");
        assert_eq!(document["result"]["rewritten_data_files"], 12);
        assert!(document["failure"].is_null());
        assert_eq!(document["maintenance_failed"]["step"], "expire_snapshots");
        assert_eq!(document["maintenance_failed"]["class"], "other");
        assert!(webhook(&event(success()))["maintenance_failed"].is_null());
        assert_eq!(
            slack(&event(success()), "")["attachments"][0]["color"],
            GREEN
        );
    }

    #[test]
    fn webhook_document_always_names_the_tenant() {
        assert_eq!(webhook(&event(success()))["tenant"], "default");
        let mut tenanted = event(failure());
        tenanted.tenant = "billing".to_string();
        let document = webhook(&tenanted);
        assert_eq!(document["tenant"], "billing");
        assert_eq!(document["event"], "compaction_failed");
    }

    /// A run asked for partitions that rewrote none of their files says so: amber in Slack, with
    /// the partitions and reasons (escaped), and `left` in the webhook.
    #[test]
    fn a_run_that_left_its_partitions_says_why() {
        let mut report = ReportSummary::default();
        report.left = vec![
            crate::model::report::LeftPartition {
                partition: Some("ts_hour=2026-11-01-10".to_string()),
                reason: "no live data file of the table is in this partition".to_string(),
            },
            crate::model::report::LeftPartition {
                partition: Some("name=<!channel>`x".to_string()),
                reason: "2 small files".to_string(),
            },
        ];
        let outcome = RunOutcome::Success {
            report,
            duration_millis: 10,
            attempts: 1,
        };
        let message = slack(&event(outcome.clone()), "");
        assert!(message["text"]
            .as_str()
            .unwrap()
            .contains("rewrote nothing"));
        assert_eq!(message["attachments"][0]["color"], AMBER);
        let fields = message["attachments"][0]["fields"].as_array().unwrap();
        let left = fields
            .iter()
            .find(|field| field["title"] == "Left Due")
            .unwrap();
        let text = left["value"].as_str().unwrap();
        assert!(text.contains("`ts_hour=2026-11-01-10`: no live data file"));
        assert!(
            text.contains("`name=&lt;!channel&gt;'x`: 2 small files"),
            "{text}"
        );
        assert!(!text.contains("<!channel>"));
        let document = webhook(&event(outcome));
        assert_eq!(document["left"][0]["partition"], "ts_hour=2026-11-01-10");
        assert_eq!(document["left"].as_array().unwrap().len(), 2);
        assert_eq!(webhook(&event(success()))["left"], json!([]));
        let plain = slack(&event(success()), "");
        assert_eq!(plain["attachments"][0]["color"], GREEN);
    }
}
