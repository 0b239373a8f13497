//! `icepack compact` and `icepack reconcile`: one run now, then exit.

use super::*;

pub(crate) fn compact(path: &Path, table: &str) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    let store = open_store(&config)
        .context("`compact` needs the state directory; stop the service first")?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let system = actix::System::new();
    let result = system.block_on(async move {
        let (pipeline, notifier) = one_shot_pipeline(&config, store, clock)?;
        let Some(index) = pipeline.table_index(table) else {
            bail!("table {table} is not configured in {}", path.display());
        };
        let (result, _) = run_now(&pipeline, index, icepack::runs::task::Trigger::Manual).await?;
        let result = result.map_err(|error| anyhow::anyhow!(error))?;
        let _ = notifier.send(Flush(Duration::from_secs(30))).await;
        Ok::<_, anyhow::Error>(result)
    })?;
    let succeeded = matches!(result.outcome, RunOutcome::Success { .. });
    println!(
        "{}",
        serde_json::json!({
            "table": result.table,
            "run_id": result.run_id,
            "trigger": result.trigger,
            "claimed_files": result.claimed_files,
            "claimed_bytes": result.claimed_bytes,
            "run": result.outcome,
        })
    );
    if !succeeded {
        bail!("the compaction of {table} failed");
    }
    Ok(())
}

pub(crate) fn reconcile(path: &Path, only: Option<&str>) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    let store = open_store(&config)
        .context("`reconcile` needs the state directory; stop the service first")?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let system = actix::System::new();
    let failed = system.block_on(async move {
        let (pipeline, _) = one_shot_pipeline(&config, store, clock)?;
        let indices: Vec<usize> = match only {
            Some(table) => vec![pipeline
                .table_index(table)
                .ok_or_else(|| anyhow::anyhow!("table {table} is not configured in {}", path.display()))?],
            None => pipeline.map().active().map(|(index, _)| index).collect(),
        };
        let mut failed = 0;
        for index in indices {
            let (result, status) = run_now(&pipeline, index, icepack::runs::task::Trigger::Reconcile).await?;
            let outcome = match &result {
                Ok(result) => match &result.outcome {
                    RunOutcome::Success { .. } => "reconciled".to_string(),
                    RunOutcome::Failure { class, excerpt, .. } => format!("failed ({}): {excerpt}", class.as_str()),
                },
                Err(error) => format!("failed: {error}"),
            };
            if !outcome.starts_with("reconciled") {
                failed += 1;
            }
            println!(
                "{}",
                serde_json::json!({"table": status.table, "outcome": outcome, "pending_files": status.pending_files, "pending_bytes": status.pending_bytes, "partitions": status.partitions})
            );
        }
        Ok::<usize, anyhow::Error>(failed)
    })?;
    if failed > 0 {
        bail!("{failed} table(s) could not be reconciled");
    }
    Ok(())
}
