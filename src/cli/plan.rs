//! `icepack plan TABLE`: what the table's next run would do, writing nothing — from the running
//! service's API when it answers, else from the state directory and the table's catalog.

use super::*;

use icepack::model::preview::RunPreview;
use icepack::ops::plan::{preview, render_text};

pub(crate) fn plan(path: &Path, table: &str, json: bool) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    let Some(spec) = config
        .table_specs()
        .into_iter()
        .find(|spec| spec.table == table)
    else {
        bail!("table {table} is not configured in {}", path.display());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let preview = match runtime.block_on(plan_from_service(&config, table))? {
        Some(preview) => preview,
        None => {
            let state_dir = &config.service.state_dir;
            let store: Arc<dyn StateStore> = if state_dir.join("CURRENT").exists() {
                Arc::new(RocksStore::open_read_only(state_dir)?)
            } else {
                // No state yet: nothing pending, the table's plan is a manual run's.
                Arc::new(icepack::store::MemoryStore::new())
            };
            let engine = engine_from_config(&config).map_err(anyhow::Error::msg)?;
            runtime.block_on(preview(
                Arc::new(spec),
                store,
                engine.as_ref(),
                SystemClock.now_millis(),
            ))?
        }
    };
    if json {
        println!("{}", serde_json::to_string(&preview)?);
    } else {
        print!("{}", render_text(&preview));
    }
    Ok(())
}

/// The running service's plan; `None` when no service answers. A service that answers with an
/// error (a run in flight, an unreadable state) is the answer.
async fn plan_from_service(config: &Config, table: &str) -> Result<Option<RunPreview>> {
    if config.service.http_listen.is_empty() {
        return Ok(None);
    }
    let url = format!(
        "http://{}/v1/tables/{}/plan",
        config.service.http_listen,
        percent_encoding::utf8_percent_encode(table, percent_encoding::NON_ALPHANUMERIC)
    );
    let Ok(response) = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(150))
        .send()
        .await
    else {
        return Ok(None);
    };
    let status = response.status();
    if status.is_success() {
        return Ok(Some(response.json::<RunPreview>().await?));
    }
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    bail!(
        "the service answered {status}: {}",
        body.get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("no reason given")
    )
}
