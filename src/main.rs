//! The `icepack` command line: run the service, check a configuration, replay events, show status.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use tracing::{error, info, warn};

use icepack::actors::executor::StopDispatching;
use icepack::actors::messages::{CompactNow, Ingest, WaitIdle};
use icepack::actors::notifier::{sinks_from_config, Flush, Notifier};
use icepack::clock::{Clock, SystemClock};
use icepack::compaction::{runner_from_config, CompactionSettings};
use icepack::config::Config;
use icepack::control::{control_channel, sqs_connector, Control};
use icepack::http::{self, ApiState};
use icepack::intake::{InboundMessage, IntakeSummary};
use icepack::metrics::Metrics;
use icepack::notify::delivery::DeliveryPolicy;
use icepack::queue::SqsQueue;
use icepack::run::RunOutcome;
use icepack::service::{start_pipeline, Compaction};
use icepack::status::{render_status_text, table_status, StatusReport};
use icepack::store::{RocksStore, StateStore};

#[derive(Debug, Parser)]
#[command(
    name = "icepack",
    version,
    about = "Compacts small files of Apache Iceberg tables as S3 events announce them"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service: poll SQS, count small files per table, compact and maintain due tables,
    /// notify, and serve the HTTP API and the operator's page.
    Run {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
    },
    /// Validate a configuration file; exit 0 when valid.
    CheckConfig {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
    },
    /// Count SQS message bodies from a file (one per line, `-` for stdin) through the service's path.
    Replay {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// Only count: never start a compaction.
        #[arg(long)]
        no_compact: bool,
        /// Path of the events file, or `-` for stdin.
        events: String,
    },
    /// Compact one table now, whatever its thresholds; prints the outcome as JSON.
    Compact {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// `namespace.table` as configured.
        table: String,
    },
    /// Rebuild tables' pending state from their Iceberg metadata (all tables, or one).
    Reconcile {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// `namespace.table` as configured; all tables when absent.
        table: Option<String>,
    },
    /// Compare compaction policies on an ingestion trace with a simulated clock: icepack's (the real
    /// accumulator and decision code), the reference workflow's, and a fixed schedule.
    Simulate(SimulateArgs),
    /// Forward MinIO bucket-notification webhooks (POST /minio) to the configured SQS queue.
    Bridge {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// Address to listen on, e.g. 0.0.0.0:9465.
        #[arg(long, default_value = "127.0.0.1:9465")]
        listen: std::net::SocketAddr,
    },
    /// Delete the stored state of a table removed from the configuration (through the running
    /// service's API when it answers, else in the state directory).
    Forget {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// `namespace.table`, no longer in the configuration.
        table: String,
    },
    /// Show each table's pending small files and whether it is due.
    Status {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// The run history of this table (`namespace.table`), newest first, instead.
        #[arg(long, value_name = "TABLE")]
        runs: Option<String>,
    },
}

/// A panic is a bug (an invariant did not hold): it goes to the log with its place, as an error,
/// before the default report on stderr. The actor it happened in is restarted by its supervisor.
fn log_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let place = info
            .location()
            .map(|location| format!("{}:{}", location.file(), location.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|message| message.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(%place, %message, "a bug: a panic (please report it with this line)");
        default(info);
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    log_panics();
    if let Err(error) = icepack::failpoint::setup() {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Run { config } => run(&config),
        Command::CheckConfig { config } => check_config(&config),
        Command::Replay {
            config,
            no_compact,
            events,
        } => replay(&config, &events, !no_compact),
        Command::Compact { config, table } => compact(&config, &table),
        Command::Bridge { config, listen } => bridge(&config, listen),
        Command::Reconcile { config, table } => reconcile(&config, table.as_deref()),
        Command::Simulate(args) => simulate(args),
        Command::Status {
            config,
            json,
            runs: Some(table),
        } => run_history(&config, &table, json),
        Command::Status { config, json, .. } => status(&config, json),
        Command::Forget { config, table } => forget(&config, &table),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load_config(path: &Path) -> Result<Config> {
    Config::load(path).with_context(|| format!("invalid configuration {}", path.display()))
}

fn check_config(path: &Path) -> Result<()> {
    let config = load_config(path)?;
    println!(
        "{}: valid, {} table(s), {} tenant(s), {} queue(s)",
        path.display(),
        config.tables.len(),
        config.tenant_specs().len(),
        config.queues().len()
    );
    Ok(())
}

fn open_store(config: &Config) -> Result<Arc<dyn StateStore>> {
    let store = RocksStore::open(&config.service.state_dir)?;
    Ok(Arc::new(store))
}

fn run(path: &Path) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    if config.tables.is_empty() {
        warn!("no [[tables]] configured: every record will be ignored as unrouted");
    }
    let store = open_store(&config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let system = actix::System::new();
    system.block_on(async move {
        let metrics = Arc::new(Metrics::default());
        let compaction = compaction(&config, true);
        icepack::engine::spawn_probe(
            compaction.runner.clone(),
            metrics.engine.clone(),
            clock.clone(),
            icepack::engine::PROBE_INTERVAL,
        );
        let (pipeline, notifier) =
            notifying_pipeline(&config, store, clock.clone(), metrics.clone(), compaction)?;
        let (control_handle, control_requests) = control_channel();
        if !config.service.http_listen.is_empty() {
            let address: std::net::SocketAddr = config.service.http_listen.parse()?;
            let state = ApiState {
                pipeline: pipeline.clone(),
                metrics: metrics.clone(),
                clock: clock.clone(),
                token: std::env::var("ICEPACK_API_TOKEN").ok().filter(|token| !token.is_empty()),
                loopback: address.ip().is_loopback(),
                queue_window: Some(Duration::from_secs(
                    (3 * (config.sqs.wait_time_seconds as u64 + 15)).max(60),
                )),
                control: Some(control_handle),
            };
            http::serve(address, state)
                .await
                .with_context(|| format!("cannot listen on service.http_listen {address}"))?;
        }
        let control = Control::start(
            path.to_path_buf(),
            config.clone(),
            pipeline.clone(),
            Some(notifier.clone()),
            sqs_connector(),
            metrics.clone(),
            clock.clone(),
        )
        .await;
        icepack::service::release_freed_memory();
        info!(
            tables = pipeline.map().num_active(),
            tenants = pipeline.map().tenants().count(),
            queues = control.num_queues(),
            pollers = control.num_pollers(),
            state_dir = %config.service.state_dir.display(),
            "icepack is running (SIGHUP reloads the configuration)"
        );
        let stop_control = control.serve(control_requests);
        wait_for_signal().await;
        info!("shutting down: polling stops, the batch in flight is committed; runs in flight are recovered at the next start");
        if !icepack::control::stop(stop_control, Duration::from_secs(120)).await {
            error!(
                "the batch in flight did not finish within 120 s; its messages stay in the queue"
            );
        }
        let grace = Duration::from_secs(config.service.shutdown_timeout_seconds as u64);
        pipeline.pool.do_send(StopDispatching);
        match tokio::time::timeout(grace, pipeline.pool.send(WaitIdle)).await {
            Ok(_) => info!("no run in flight"),
            Err(_) => warn!(
                grace_secs = grace.as_secs(),
                "runs still in flight are left running; the next start recovers them"
            ),
        }
        if !notifier.send(Flush(grace)).await.unwrap_or(false) {
            warn!("some notifications were not sent before the shutdown deadline");
        }
        info!("stopped");
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => info!("SIGTERM received"),
        _ = interrupt.recv() => info!("SIGINT received"),
    }
}

/// The pipeline over the store, with a notifier built from the configuration.
fn notifying_pipeline(
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
    let pipeline = start_pipeline(store, clock, compaction, metrics, Some(notifier.clone()))?;
    Ok((pipeline, notifier))
}

/// The pipeline of a one-shot command (`compact`, `reconcile`): its own metrics, no engine probe.
fn one_shot_pipeline(
    config: &Arc<Config>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
) -> Result<(icepack::service::Pipeline, actix::Addr<Notifier>)> {
    notifying_pipeline(
        config,
        store,
        clock,
        Arc::new(Metrics::default()),
        compaction(config, true),
    )
}

/// Runs `trigger` (`manual` or `reconcile`) on one table now and waits until its settlement is
/// committed; returns how it went and the table's status after it.
async fn run_now(
    pipeline: &icepack::service::Pipeline,
    index: usize,
    trigger: &str,
) -> Result<(
    Result<icepack::actors::messages::RunResult, String>,
    icepack::status::TableStatus,
)> {
    let result = pipeline
        .pool
        .send(CompactNow {
            table: index,
            trigger: trigger.to_string(),
        })
        .await
        .context("executor pool stopped")?;
    let _ = pipeline.pool.send(WaitIdle).await;
    // The accumulator answers once it has committed the settlement.
    let status = pipeline
        .accumulator(index)
        .send(icepack::actors::messages::GetStatus)
        .await?;
    Ok((result, status))
}

/// The configuration is shared with the pipeline (not copied: it may hold thousands of tables).
fn compaction(config: &Arc<Config>, enabled: bool) -> Compaction {
    Compaction {
        settings: CompactionSettings::from_config(config.clone()),
        runner: runner_from_config(config),
        enabled,
    }
}

fn replay(path: &Path, events: &str, compact: bool) -> Result<()> {
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
            store,
            clock,
            compaction(&config, compact),
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
const REPLAY_BATCH: usize = 10;

async fn ingest(
    router: &actix::Addr<icepack::actors::router::IntakeRouter>,
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
        if let icepack::intake::Verdict::Keep { error } = verdict {
            warn!(message = %id, %error, "invalid message");
        }
    }
    summary.merge(&report.summary);
    Ok(())
}

fn compact(path: &Path, table: &str) -> Result<()> {
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
        let (result, _) = run_now(&pipeline, index, "manual").await?;
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

/// `icepack simulate`: the trace, the run cost model and the output.
#[derive(clap::Args, Debug)]
struct SimulateArgs {
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Tables of the generated `bursty` trace.
    #[arg(long, default_value_t = 5)]
    tables: usize,
    #[arg(long, default_value_t = 3)]
    days: u32,
    /// Average small files per table and day of the `bursty` trace (busier by day).
    #[arg(long, default_value_t = 240)]
    files_per_day: u32,
    /// The generated trace: `bursty` (day/night, bursts, daily partitions) or `mixed` (a
    /// streaming writer, an 8-writer micro-batch, an hourly ETL job, CDC with late data, a quiet
    /// table).
    #[arg(long, default_value = "bursty", value_parser = ["bursty", "mixed"])]
    workload: String,
    /// Share of runs that fail.
    #[arg(long, default_value_t = 0.1)]
    failure_rate: f64,
    #[arg(long, default_value_t = 15)]
    schedule_minutes: i64,
    /// A run's fixed cost in seconds (a JVM and a session per run: ~90; a warm Spark Connect
    /// server: ~1).
    #[arg(long, default_value_t = 90.0)]
    run_base_seconds: f64,
    /// A run's cost per GiB it rewrites, in seconds.
    #[arg(long, default_value_t = 60.0)]
    seconds_per_gib: f64,
    /// icepack's pacing (`[defaults]` keys of the same names; its run cost is
    /// `--run-base-seconds`): what fixing one small file is worth, in engine seconds (0: off).
    #[arg(long, default_value_t = 8.0)]
    file_fix_value_seconds: f64,
    /// What a small file waiting an hour costs, in engine seconds (0: off).
    #[arg(long, default_value_t = 40.0)]
    file_hour_cost_seconds: f64,
    /// A due table waits until no file landed for this long (0: off), at most five times as
    /// long after its oldest pending file.
    #[arg(long, default_value_t = 60)]
    settle_seconds: i64,
    /// A partition with no new file for this long merges its last small files into its
    /// mid-sized outputs (0: never).
    #[arg(long, default_value_t = 15)]
    quiet_partition_minutes: i64,
    /// A partition holding one still-small output joins a run once its new files hold this
    /// share of the output's bytes, in percent (0: at once).
    #[arg(long, default_value_t = 0)]
    remerge_new_data_percent: u64,
    /// icepack without pacing: runs at the thresholds (as before issue 17).
    #[arg(long)]
    no_pacing: bool,
    /// A trace file (`seconds,table,size_bytes[,partition]` per line; table a name or an
    /// index) instead of a generated one.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the plot here (SVG): pending small files and cumulative compute over time.
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn simulate(args: SimulateArgs) -> Result<()> {
    use icepack::simulate::*;
    let SimulateArgs {
        seed,
        tables,
        days,
        files_per_day,
        workload,
        failure_rate,
        schedule_minutes,
        run_base_seconds,
        seconds_per_gib,
        file_fix_value_seconds,
        file_hour_cost_seconds,
        settle_seconds,
        quiet_partition_minutes,
        remerge_new_data_percent,
        no_pacing,
        trace: trace_path,
        svg,
    } = args;
    if !(0.0..=1.0).contains(&failure_rate) || schedule_minutes < 1 || tables == 0 {
        bail!("--failure-rate must be within 0..1, --schedule-minutes and --tables at least 1");
    }
    if !(run_base_seconds >= 0.0
        && seconds_per_gib >= 0.0
        && file_fix_value_seconds >= 0.0
        && file_hour_cost_seconds >= 0.0
        && settle_seconds >= 0
        && quiet_partition_minutes >= 0)
    {
        bail!("--run-base-seconds, --seconds-per-gib and the pacing flags must not be negative");
    }
    let (trace, source) = match &trace_path {
        Some(path) => (
            read_trace(
                &std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?,
            )
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?,
            path.display().to_string(),
        ),
        None if workload == "mixed" => (
            generate_mixed_trace(seed, days),
            format!("mixed workload, seed {seed}"),
        ),
        None => (
            generate_trace(seed, tables, days, files_per_day),
            format!("bursty workload, seed {seed}"),
        ),
    };
    if trace.arrivals.is_empty() {
        bail!("{source}: the trace has no files");
    }
    let scenario = Scenario {
        failure_rate,
        schedule_minutes,
        seed,
        run_base_millis: (run_base_seconds * 1000.0) as i64,
        seconds_per_gib,
        pacing: if no_pacing {
            icepack::policy::Pacing::OFF
        } else {
            icepack::policy::Pacing {
                run_cost_millis: (run_base_seconds * 1000.0) as u64,
                file_fix_value_millis: (file_fix_value_seconds * 1000.0) as u64,
                file_hour_cost_millis: (file_hour_cost_seconds * 1000.0) as u64,
                settle_millis: settle_seconds * 1000,
                settle_max_millis: settle_seconds * 5000,
                quiet_millis: quiet_partition_minutes * 60_000,
                remerge_percent: remerge_new_data_percent,
            }
        },
        ..Scenario::default()
    };
    let reports = [
        simulate_icepack(&trace, &scenario),
        simulate_reference(&trace, &scenario),
        simulate_schedule(&trace, &scenario),
    ];
    let gib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0 * 1024.0);
    let thresholds = &scenario.thresholds;
    let pacing = if no_pacing {
        "off".to_string()
    } else {
        format!("a fixed file worth {file_fix_value_seconds} s, a small file-hour {file_hour_cost_seconds} s, settle {settle_seconds} s, a partition quiet after {quiet_partition_minutes} min, an output merged again with {remerge_new_data_percent}% new data")
    };
    println!(
        "trace: {} files, {:.1} GiB over {} tables ({}: {source}); thresholds {} files / {} MiB / {} min, min-input-files {}, failure rate {failure_rate}; a run costs {run_base_seconds} s + {seconds_per_gib} s/GiB; icepack's pacing: {pacing}\n",
        trace.arrivals.len(),
        gib(trace.bytes()),
        trace.tables.len(),
        trace.tables.join(", "),
        thresholds.min_files,
        thresholds.min_total_bytes / (1024 * 1024),
        thresholds.max_wait_millis.map_or(0, |millis| millis / 60_000),
        scenario.rule.min_input_files,
    );
    println!(
        "{:<10} {:>6} {:>11} {:>7} {:>12} {:>6} {:>12} {:>12} {:>12} {:>11} {:>12} {:>12}",
        "policy",
        "runs",
        "empty runs",
        "failed",
        "GiB rewrit.",
        "WA",
        "compute s",
        "max pending",
        "mean pending",
        "left small",
        "p50 latency",
        "p99 latency"
    );
    let minutes =
        |value: Option<f64>| value.map_or("-".to_string(), |value| format!("{value:.0} min"));
    for report in &reports {
        println!(
            "{:<10} {:>6} {:>11} {:>7} {:>12.2} {:>6.2} {:>12.0} {:>12} {:>12.1} {:>11} {:>12} {:>12}",
            report.policy,
            report.runs,
            report.empty_runs,
            report.failed_runs,
            gib(report.bytes_rewritten),
            report.write_amplification,
            report.compute_seconds,
            report.max_pending_files,
            report.mean_pending_files,
            report.left_small,
            minutes(report.latency_p50_minutes),
            minutes(report.latency_p99_minutes)
        );
    }
    if let Some(svg) = svg {
        std::fs::write(&svg, render_svg(&reports))
            .with_context(|| format!("cannot write {}", svg.display()))?;
        println!("\nplot: {}", svg.display());
    }
    println!("{}", serde_json::to_string(&reports)?);
    Ok(())
}

fn reconcile(path: &Path, only: Option<&str>) -> Result<()> {
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
            let (result, status) = run_now(&pipeline, index, "reconcile").await?;
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

fn bridge(path: &Path, listen: std::net::SocketAddr) -> Result<()> {
    let config = load_config(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let queue = Arc::new(SqsQueue::connect(&config.sqs).await);
        let token = std::env::var("ICEPACK_BRIDGE_TOKEN").ok().filter(|token| !token.is_empty());
        tokio::select! {
            served = icepack::bridge::serve(listen, queue, token) => served.with_context(|| format!("cannot serve on {listen}")),
            _ = wait_for_signal() => Ok(()),
        }
    })
}

fn forget(path: &Path, table: &str) -> Result<()> {
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

fn status_from_service(config: &Config) -> Option<serde_json::Value> {
    if config.service.http_listen.is_empty() {
        return None;
    }
    let url = format!("http://{}/v1/tables", config.service.http_listen);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let response = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        response
            .error_for_status()
            .ok()?
            .json::<serde_json::Value>()
            .await
            .ok()
    })
}

/// A table's run history from the state directory (a point-in-time view: the service may run).
fn run_history(path: &Path, table: &str, json: bool) -> Result<()> {
    let config = load_config(path)?;
    if !config.table_specs().iter().any(|spec| spec.table == table) {
        bail!("table {table} is not configured in {}", path.display());
    }
    let state_dir = &config.service.state_dir;
    let runs: Vec<icepack::status::LastRun> = if state_dir.join("CURRENT").exists() {
        let store = RocksStore::open_read_only(state_dir)?;
        store
            .runs(table)?
            .iter()
            .rev()
            .map(|(_, run)| icepack::status::run_status(run))
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
            run.failure_class.map_or(String::new(), |class| format!(
                "{class}: {}",
                run.error.as_deref().unwrap_or("")
            )),
        );
    }
    Ok(())
}

fn status(path: &Path, json: bool) -> Result<()> {
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
