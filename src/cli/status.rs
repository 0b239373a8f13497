//! `icepack status`: from the running service's API, or from the state directory.

use super::*;

/// The running service's status of every table, asked a page of [`icepack::ops::listing::MAX_LIMIT`]
/// tables at a time (one request for 100,000 tables would take longer than a status should
/// wait for its first answer); `None` when no service answers.
pub(crate) fn status_from_service(config: &Config) -> Option<serde_json::Value> {
    if config.service.http_listen.is_empty() {
        return None;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let mut report: Option<serde_json::Value> = None;
        let mut tables: Vec<serde_json::Value> = Vec::new();
        loop {
            let url = format!(
                "http://{}/v1/tables?offset={}&limit={}",
                config.service.http_listen,
                tables.len(),
                icepack::ops::listing::MAX_LIMIT
            );
            let mut page = client
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .ok()?
                .error_for_status()
                .ok()?
                .json::<serde_json::Value>()
                .await
                .ok()?;
            let got = match page.get_mut("tables").map(serde_json::Value::take) {
                Some(serde_json::Value::Array(got)) => got,
                _ => return None,
            };
            let matched = page.get("matched").and_then(serde_json::Value::as_u64)?;
            let empty = got.is_empty();
            tables.extend(got);
            report.get_or_insert(page);
            if empty || tables.len() as u64 >= matched {
                break;
            }
        }
        let mut report = report?;
        report["tables"] = serde_json::Value::Array(tables);
        for paging in ["offset", "limit"] {
            if let Some(fields) = report.as_object_mut() {
                fields.remove(paging);
            }
        }
        Some(report)
    })
}

/// A table's run history from the state directory (a point-in-time view: the service may run).
pub(crate) fn run_history(path: &Path, table: &str, json: bool) -> Result<()> {
    let config = load_config(path)?;
    if !config.table_specs().iter().any(|spec| spec.table == table) {
        bail!("table {table} is not configured in {}", path.display());
    }
    let state_dir = &config.service.state_dir;
    let runs: Vec<icepack::ops::status::LastRun> = if state_dir.join("CURRENT").exists() {
        let store = RocksStore::open_read_only(state_dir)?;
        store
            .runs(table)?
            .iter()
            .rev()
            .map(|(_, run)| icepack::ops::status::run_status(run))
            .collect()
    } else {
        Vec::new()
    };
    if json {
        println!("{}", serde_json::json!({"table": table, "runs": runs}));
        return Ok(());
    }
    println!(
        "{:<26} {:<20} {:<8} {:<9} {:>9} {:>9}  error",
        "started", "task/trigger", "outcome", "duration", "files in", "files out"
    );
    for run in &runs {
        println!(
            "{:<26} {:<20} {:<8} {:>8.1}s {:>9} {:>9}  {}",
            run.started_at,
            format!("{}/{}", run.task, run.trigger),
            run.outcome,
            run.duration_ms as f64 / 1000.0,
            run.rewritten_data_files
                .map_or("-".to_string(), |n| n.to_string()),
            run.added_data_files
                .map_or("-".to_string(), |n| n.to_string()),
            match (&run.failure_class, &run.maintenance_failed) {
                (Some(class), _) => format!("{class}: {}", run.error.as_deref().unwrap_or("")),
                (None, Some(failed)) => format!(
                    "{} failed after the commit ({}): {}",
                    failed.step,
                    failed.class.as_str(),
                    failed.excerpt
                ),
                (None, None) if !run.left.is_empty() => format!(
                    "left {} due: {}",
                    run.left.len(),
                    run.left
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                (None, None) => String::new(),
            },
        );
    }
    Ok(())
}

pub(crate) fn status(path: &Path, json: bool) -> Result<()> {
    let config = load_config(path)?;
    let specs = config.table_specs();
    if specs.is_empty() {
        bail!("no tables configured in {}", path.display());
    }
    if let Some(report) = status_from_service(&config) {
        if json {
            println!("{report}");
        } else {
            print!("{}", render_status_text(&report));
        }
        return Ok(());
    }
    let now = SystemClock.now_millis();
    let state_dir = &config.service.state_dir;
    let report = if state_dir.join("CURRENT").exists() {
        let store = RocksStore::open_read_only(state_dir)?;
        let mut tables = Vec::new();
        for spec in &specs {
            tables.push(table_status(spec, &store.load_table(&spec.table)?, now));
        }
        StatusReport { tables }
    } else {
        StatusReport {
            tables: specs
                .iter()
                .map(|spec| table_status(spec, &Default::default(), now))
                .collect(),
        }
    };
    let report = serde_json::to_value(&report)?;
    if json {
        println!("{report}");
    } else {
        print!("{}", render_status_text(&report));
    }
    Ok(())
}
