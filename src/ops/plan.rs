//! `icepack plan TABLE` and `GET /v1/tables/{table}/plan`: what the table's next run would do,
//! without writing anything. The table's state says what the run would be asked (the claim a run
//! would take now, claiming nothing); the engine says who would run it and reads its plan from
//! the table; the table's measured runs say how long it should take.

use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::UnixMillis;
use crate::config::TableSpec;
use crate::engine::{ClaimedFiles, Engine, RunTask};
use crate::model::preview::{expected_duration, RunPreview};
use crate::model::task::Task;
use crate::store::{StateStore, StoreError};
use crate::table::accumulator::Accumulator;

/// The deadline a planning read gets: it reads the table's metadata, no data file.
const PLAN_TIMEOUT: Duration = Duration::from_secs(120);

/// Why there is no preview.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("a run of the table is in flight: its plan is the run's")]
    RunInFlight,
    #[error("cannot read the table's state: {0}")]
    Store(#[from] StoreError),
}

/// What `spec`'s next run would do, from its state in `store` and `engine`'s plan at `now`.
pub async fn preview(
    spec: Arc<TableSpec>,
    store: Arc<dyn StateStore>,
    engine: &dyn Engine,
    now: UnixMillis,
) -> Result<RunPreview, PreviewError> {
    let (ticket, due, runs) = {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || {
            let accumulator = Accumulator::load(spec.clone(), store.as_ref())?;
            let runs: Vec<_> = store
                .runs(&spec.table)?
                .into_iter()
                .map(|(_, run)| run)
                .collect();
            Ok::<_, PreviewError>((accumulator.preview(now), runs))
        })
        .await
        .map_err(|_| PreviewError::Store(StoreError::Read("the state read stopped".into())))?
        .map(|(preview, runs)| preview.map(|(ticket, due)| (ticket, due, runs)))?
        .ok_or(PreviewError::RunInFlight)?
    };
    let task_name = match &ticket.task {
        Task::Rewrite(rewrite) => rewrite.strategy.name().to_string(),
        Task::Reconcile => "reconcile".to_string(),
        Task::ReadOrder => "read_sort_order".to_string(),
        Task::Maintenance(maintenance) => maintenance.as_str().to_string(),
    };
    let partitions = ticket.partitions().to_vec();
    let trigger = ticket.trigger.as_str().to_string();
    let planned = engine
        .plan(&RunTask {
            spec: spec.clone(),
            ticket,
            timeout: PLAN_TIMEOUT,
            claimed: ClaimedFiles::listed(Vec::new()),
        })
        .await;
    let (plan, unplanned) = match planned.plan {
        Ok(plan) => (Some(plan), None),
        Err(why) => (None, Some(why)),
    };
    let input_bytes = plan.as_ref().map_or(0, |plan| plan.input_bytes());
    let expected = plan
        .as_ref()
        .filter(|plan| !plan.groups.is_empty())
        .and_then(|_| expected_duration(input_bytes, &planned.ran_on.engine, &runs));
    Ok(RunPreview {
        table: spec.table.clone(),
        due,
        trigger,
        task: task_name,
        partitions,
        engine: planned.ran_on.engine,
        engine_detail: planned.ran_on.detail,
        input_files: plan.as_ref().map_or(0, |plan| plan.input_files()),
        input_bytes,
        expected_output_files: plan.as_ref().map_or(0, |plan| plan.expected_output_files()),
        plan,
        unplanned,
        expected_duration_millis: expected.as_ref().map(|(millis, _)| *millis),
        expected_duration_basis: expected.map(|(_, basis)| basis),
    })
}

/// The preview as `icepack plan` prints it.
pub fn render_text(preview: &RunPreview) -> String {
    let mut text = String::new();
    let line = |text: &mut String, line: String| {
        text.push_str(&line);
        text.push('\n');
    };
    line(
        &mut text,
        format!(
            "{}: {} run ({}){}",
            preview.table,
            preview.task,
            preview.trigger,
            if preview.due {
                ", due now"
            } else {
                "; not due: what `icepack compact` would do"
            }
        ),
    );
    line(
        &mut text,
        format!(
            "  partitions: {}",
            if preview.partitions.is_empty() {
                "the whole table".to_string()
            } else {
                preview.partitions.join(", ")
            }
        ),
    );
    line(
        &mut text,
        format!(
            "  engine: {}{}",
            preview.engine,
            if preview.engine_detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", preview.engine_detail)
            }
        ),
    );
    match &preview.plan {
        Some(plan) => {
            line(
                &mut text,
                format!(
                    "  {} group(s): {} files, {} bytes in; about {} files out{}",
                    plan.groups.len(),
                    preview.input_files,
                    preview.input_bytes,
                    preview.expected_output_files,
                    plan.snapshot_id
                        .map(|id| format!(" (snapshot {id})"))
                        .unwrap_or_default()
                ),
            );
            for group in &plan.groups {
                line(
                    &mut text,
                    format!(
                        "    {}: {} files, {} bytes -> ~{} file(s){}",
                        group.partition,
                        group.files,
                        group.bytes,
                        group.expected_output_files,
                        if group.position_deletes_applied > 0 {
                            format!(
                                ", {} position delete file(s) applied",
                                group.position_deletes_applied
                            )
                        } else {
                            String::new()
                        }
                    ),
                );
            }
            for left in &plan.left {
                line(&mut text, format!("  left: {left}"));
            }
        }
        None => line(
            &mut text,
            format!(
                "  not planned: {}",
                preview.unplanned.as_deref().unwrap_or("no plan")
            ),
        ),
    }
    match (
        preview.expected_duration_millis,
        &preview.expected_duration_basis,
    ) {
        (Some(millis), Some(basis)) => line(
            &mut text,
            format!(
                "  expected duration: {:.1} s ({basis})",
                millis as f64 / 1e3
            ),
        ),
        _ => line(
            &mut text,
            "  expected duration: unknown (no measured run of this engine yet)".to_string(),
        ),
    }
    text
}
