//! The subcommands of `icepack`, one file each, and what they share: loading the configuration,
//! opening the store, waiting for a signal, building a pipeline for one-shot commands.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use anyhow::{bail, Context as _, Result};
use tracing::{error, info, warn};

use icepack::base::clock::{Clock, SystemClock};
use icepack::config::Config;
use icepack::engine::routed::engine_from_config;
use icepack::intake::batch::{InboundMessage, IntakeSummary};
use icepack::intake::queue::SqsQueue;
use icepack::messages::{CompactNow, Ingest, WaitIdle};
use icepack::ops::control::{control_channel, sqs_connector, Control};
use icepack::ops::http::{self, ApiState};
use icepack::ops::metrics::Metrics;
use icepack::ops::notifier::{sinks_from_config, Flush, Notifier};
use icepack::ops::notify::delivery::DeliveryPolicy;
use icepack::ops::status::{render_status_text, table_status, StatusReport};
use icepack::runs::executor::StopDispatching;
use icepack::runs::report::RunOutcome;
use icepack::runs::settings::CompactionSettings;
use icepack::service::{start_pipeline, Compaction};
use icepack::store::{RocksStore, StateStore};

pub(crate) mod bridge;
pub(crate) mod compact;
pub(crate) mod forget;
pub(crate) mod plan;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod simulate;
pub(crate) mod status;

pub(crate) fn load_config(path: &Path) -> Result<Config> {
    Config::load(path).with_context(|| format!("invalid configuration {}", path.display()))
}

pub(crate) fn check_config(path: &Path) -> Result<()> {
    let config = load_config(path)?;
    // Tables on the native engine name catalogs it can commit to.
    engine_from_config(&Arc::new(config.clone())).map_err(anyhow::Error::msg)?;
    println!(
        "{}: valid, {} table(s), {} tenant(s), {} queue(s)",
        path.display(),
        config.tables.len(),
        config.tenant_specs().len(),
        config.queues().len()
    );
    Ok(())
}

pub(crate) fn open_store(config: &Config) -> Result<Arc<dyn StateStore>> {
    let store = RocksStore::open(&config.service.state_dir)?;
    Ok(Arc::new(store))
}

pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => info!("SIGTERM received"),
        _ = interrupt.recv() => info!("SIGINT received"),
    }
}

/// The pipeline over the store, with a notifier built from the configuration.
pub(crate) fn notifying_pipeline(
    config: &Arc<Config>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    compaction: Compaction,
) -> Result<(icepack::service::Pipeline, actix::Addr<Notifier>)> {
    let notifier = Notifier::new(
        sinks_from_config(config),
        DeliveryPolicy::default(),
        metrics.clone(),
    )
    .start();
    let pipeline = start_pipeline(
        config.table_specs(),
        store,
        clock,
        compaction,
        metrics,
        Some(notifier.clone()),
    )?;
    Ok((pipeline, notifier))
}

/// The pipeline of a one-shot command (`compact`, `reconcile`): its own metrics, no engine probe.
pub(crate) fn one_shot_pipeline(
    config: &Arc<Config>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
) -> Result<(icepack::service::Pipeline, actix::Addr<Notifier>)> {
    notifying_pipeline(
        config,
        store,
        clock,
        Arc::new(Metrics::default()),
        compaction(config, true)?,
    )
}

/// Runs `trigger` (`Manual` or `Reconcile`) on one table now and waits until its settlement is
/// committed; returns how it went and the table's status after it.
pub(crate) async fn run_now(
    pipeline: &icepack::service::Pipeline,
    index: usize,
    trigger: icepack::runs::task::Trigger,
) -> Result<(
    Result<icepack::messages::RunResult, String>,
    icepack::ops::status::TableStatus,
)> {
    let result = pipeline
        .pool
        .send(CompactNow {
            table: index,
            trigger,
        })
        .await
        .context("executor pool stopped")?;
    let _ = pipeline.pool.send(WaitIdle).await;
    // The accumulator answers once it has committed the settlement.
    let status = pipeline
        .accumulator(index)
        .send(icepack::messages::GetStatus)
        .await?;
    Ok((result, status))
}

/// The configuration is shared with the pipeline (not copied: it may hold thousands of tables).
pub(crate) fn compaction(config: &Arc<Config>, enabled: bool) -> Result<Compaction> {
    Ok(Compaction {
        settings: CompactionSettings::from_config(config.clone()),
        engine: engine_from_config(config).map_err(anyhow::Error::msg)?,
        enabled,
    })
}
