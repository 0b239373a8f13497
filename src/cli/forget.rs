//! `icepack forget`: a removed table's stored state deleted, with the service stopped.

use super::*;

pub(crate) fn forget(path: &Path, table: &str) -> Result<()> {
    let config = load_config(path)?;
    if config
        .tables
        .iter()
        .any(|configured| configured.table == table)
    {
        bail!(
            "table {table} is configured in {}: remove it from [[tables]] (and reload) first",
            path.display()
        );
    }
    if !config.service.http_listen.is_empty() {
        let url = format!(
            "http://{}/v1/tables/{table}/forget",
            config.service.http_listen
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let answer = runtime.block_on(async {
            let mut request = reqwest::Client::new()
                .post(&url)
                .timeout(Duration::from_secs(30));
            if let Ok(token) = std::env::var("ICEPACK_API_TOKEN") {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.ok()?;
            let status = response.status();
            Some((status, response.text().await.unwrap_or_default()))
        });
        if let Some((status, body)) = answer {
            if status.is_success() {
                println!("{body}");
                return Ok(());
            }
            bail!("the running service refused ({status}): {body}");
        }
    }
    let store = RocksStore::open(&config.service.state_dir)
        .context("`forget` needs the state directory when the service does not answer")?;
    let summary = store.forget_table(table)?;
    println!(
        "{}",
        serde_json::json!({"table": table, "forgotten": summary})
    );
    Ok(())
}
