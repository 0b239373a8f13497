//! `icepack replay`: S3 event notifications from a file or stdin, counted as the service would.

use super::*;

pub(crate) fn replay(path: &Path, events: &str, compact: bool) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    let input: Box<dyn Read> = if events == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(events)
                .with_context(|| format!("cannot open events file {events}"))?,
        )
    };
    let store = open_store(&config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let system = actix::System::new();
    let summary = system.block_on(async move {
        let pipeline = start_pipeline(
            config.table_specs(),
            store,
            clock,
            compaction(&config, compact)?,
            Arc::new(Metrics::default()),
            None,
        )?;
        let mut summary = IntakeSummary::default();
        let mut batch = Vec::new();
        let mut line_number = 0u64;
        for line in BufReader::new(input).lines() {
            let line = line.context("cannot read the events file")?;
            line_number += 1;
            if line.trim().is_empty() {
                continue;
            }
            batch.push(InboundMessage {
                id: format!("line-{line_number}"),
                body: line,
            });
            if batch.len() == REPLAY_BATCH {
                ingest(&pipeline.router, std::mem::take(&mut batch), &mut summary).await?;
            }
        }
        ingest(&pipeline.router, batch, &mut summary).await?;
        if compact {
            // Every accumulator has settled (and asked for its run) once it answers; then the runs
            // the replayed events made due finish before the summary is printed.
            pipeline.status().await;
            pipeline
                .pool
                .send(WaitIdle)
                .await
                .context("executor pool stopped")?;
        }
        Ok::<IntakeSummary, anyhow::Error>(summary)
    })?;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

/// Replay groups lines as the poller groups SQS messages.
pub(crate) const REPLAY_BATCH: usize = 10;

pub(crate) async fn ingest(
    router: &actix::Addr<icepack::intake::router::IntakeRouter>,
    messages: Vec<InboundMessage>,
    summary: &mut IntakeSummary,
) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = messages.iter().map(|message| message.id.clone()).collect();
    let report = router
        .send(Ingest { messages })
        .await
        .context("intake router stopped")??;
    for (id, verdict) in ids.iter().zip(&report.verdicts) {
        if let icepack::intake::batch::Verdict::Keep { error } = verdict {
            warn!(message = %id, %error, "invalid message");
        }
    }
    summary.merge(&report.summary);
    Ok(())
}
