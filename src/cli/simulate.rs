//! `icepack simulate`: the compaction policy against generated traces.

use super::*;

/// `icepack simulate`: the trace, the run cost model and the output.
#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
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
    /// icepack's pacing (the `pacing` key): `settle` (the default), `cost` or `off`.
    #[arg(long, default_value = "settle", value_parser = parse_pacing)]
    pacing: icepack::table::policy::PacingMode,
    /// With `--pacing cost`: a run's cost as `run_cost_seconds` sets it; by default measured
    /// from the simulated runs (the median of a table's last five), `--run-base-seconds`
    /// before the first.
    #[arg(long)]
    run_cost_seconds: Option<f64>,
    /// The pacing flags below that are not given, by name (the `pacing_profile` key): `fresh`,
    /// `balanced` (the default) or `thrifty`.
    #[arg(long, default_value = "balanced", value_parser = parse_profile)]
    pacing_profile: icepack::config::PacingProfile,
    /// With `--pacing cost` (`[defaults]` keys of the same names): what fixing one small file
    /// is worth, in engine seconds (0: off; the profile's by default).
    #[arg(long)]
    file_fix_value_seconds: Option<f64>,
    /// What a small file waiting an hour costs, in engine seconds (0: off).
    #[arg(long)]
    file_hour_cost_seconds: Option<f64>,
    /// A due table waits until no file landed for this long (0: off) ...
    #[arg(long)]
    settle_seconds: Option<i64>,
    /// ... at most this long after its oldest pending file (five times `--settle-seconds` when
    /// only that is given).
    #[arg(long)]
    settle_max_seconds: Option<i64>,
    /// A partition with no new file for this long merges its last small files into its
    /// mid-sized outputs (0: never).
    #[arg(long)]
    quiet_partition_minutes: Option<i64>,
    /// A partition holding one still-small output joins a run once its new files hold this
    /// share of the output's bytes, in percent (0: at once).
    #[arg(long)]
    remerge_new_data_percent: Option<u64>,
    /// With `--pacing cost`: a partition's small files join a run once they hold this share
    /// of a small file's size, in percent (0: at once); the profile's by default, which for
    /// `balanced` is 100 when a run costs at most 10 s, else 0 (as the `fragment_fill_percent`
    /// key).
    #[arg(long)]
    fragment_fill_percent: Option<u64>,
    /// The same as `--pacing off`: runs at the thresholds (as before issue 17).
    #[arg(long, hide = true)]
    no_pacing: bool,
    /// A trace file (`seconds,table,size_bytes[,partition]` per line; table a name or an
    /// index) instead of a generated one.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the plot here (SVG): pending small files and cumulative compute over time.
    #[arg(long)]
    svg: Option<PathBuf>,
}

pub(crate) fn simulate(args: SimulateArgs) -> Result<()> {
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
        pacing,
        run_cost_seconds,
        pacing_profile,
        file_fix_value_seconds,
        file_hour_cost_seconds,
        settle_seconds,
        settle_max_seconds,
        quiet_partition_minutes,
        remerge_new_data_percent,
        fragment_fill_percent,
        no_pacing,
        trace: trace_path,
        svg,
    } = args;
    let profile = pacing_profile.values();
    let file_fix_value_seconds =
        file_fix_value_seconds.unwrap_or(profile.file_fix_value_seconds.get() as f64);
    let file_hour_cost_seconds =
        file_hour_cost_seconds.unwrap_or(profile.file_hour_cost_seconds.get() as f64);
    let settle_max_seconds = settle_max_seconds.unwrap_or(match settle_seconds {
        Some(seconds) => seconds.saturating_mul(5),
        None => profile.settle_max_seconds.get() as i64,
    });
    let settle_seconds = settle_seconds.unwrap_or(profile.settle_seconds.get() as i64);
    let quiet_partition_minutes =
        quiet_partition_minutes.unwrap_or(profile.quiet_partition_minutes.get() as i64);
    let remerge_new_data_percent =
        remerge_new_data_percent.unwrap_or(profile.remerge_new_data_percent.get());
    let fragment_fill_percent =
        fragment_fill_percent.or(profile.fragment_fill_percent.map(|percent| percent.get()));
    if !(0.0..=1.0).contains(&failure_rate) || schedule_minutes < 1 || tables == 0 {
        bail!("--failure-rate must be within 0..1, --schedule-minutes and --tables at least 1");
    }
    if !(run_base_seconds >= 0.0
        && seconds_per_gib >= 0.0
        && file_fix_value_seconds >= 0.0
        && file_hour_cost_seconds >= 0.0
        && settle_seconds >= 0
        && settle_max_seconds >= 0
        && quiet_partition_minutes >= 0)
    {
        bail!("--run-base-seconds, --seconds-per-gib and the pacing flags must not be negative");
    }
    let mode = if no_pacing {
        icepack::table::policy::PacingMode::Off
    } else {
        pacing
    };
    if run_cost_seconds.is_some_and(|seconds| seconds.is_nan() || seconds < 0.0) {
        bail!("--run-cost-seconds must not be negative");
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
        pacing: if mode == icepack::table::policy::PacingMode::Off {
            icepack::table::policy::PacingSpec::OFF
        } else {
            icepack::table::policy::PacingSpec {
                mode,
                run_cost_millis: run_cost_seconds.map(|seconds| (seconds * 1000.0) as u64),
                estimated_run_cost_millis: (run_base_seconds * 1000.0) as u64,
                file_fix_value_millis: (file_fix_value_seconds * 1000.0) as u64,
                file_hour_cost_millis: (file_hour_cost_seconds * 1000.0) as u64,
                settle_millis: settle_seconds.saturating_mul(1000),
                settle_max_millis: settle_max_seconds.saturating_mul(1000),
                quiet_millis: quiet_partition_minutes * 60_000,
                remerge_percent: remerge_new_data_percent,
                fragment_percent: fragment_fill_percent,
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
    let run_cost = match run_cost_seconds {
        Some(seconds) => format!("{seconds} s"),
        None => format!("measured ({run_base_seconds} s before the first)"),
    };
    let fragments = match fragment_fill_percent {
        Some(percent) => format!("{percent}%"),
        None => "by run cost 100% (<= 10 s) or 0%".to_string(),
    };
    let pacing = match mode {
        icepack::table::policy::PacingMode::Off => "off".to_string(),
        icepack::table::policy::PacingMode::Settle => format!("settle {settle_seconds} s (at most {settle_max_seconds} s), a partition quiet after {quiet_partition_minutes} min (profile {})", pacing_profile.as_str()),
        icepack::table::policy::PacingMode::Cost => format!("cost (profile {}): a run costs {run_cost}, a fixed file worth {file_fix_value_seconds} s, a small file-hour {file_hour_cost_seconds} s, settle {settle_seconds} s, a partition quiet after {quiet_partition_minutes} min, an output merged again with {remerge_new_data_percent}% new data, fragments waiting for {fragments} of a small file", pacing_profile.as_str()),
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

fn parse_pacing(name: &str) -> Result<icepack::table::policy::PacingMode, String> {
    icepack::table::policy::PacingMode::parse(name)
        .ok_or_else(|| format!("`{name}`: expected settle, cost or off"))
}

fn parse_profile(name: &str) -> Result<icepack::config::PacingProfile, String> {
    icepack::config::PacingProfile::parse(name)
        .ok_or_else(|| format!("`{name}`: expected fresh, balanced or thrifty"))
}
