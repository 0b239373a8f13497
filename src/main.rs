//! The `icepack` command line: run the service, check a configuration, replay events, show status.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use cli::bridge::bridge;
use cli::check_config;
use cli::compact::{compact, reconcile};
use cli::forget::forget;
use cli::replay::replay;
use cli::run::run;
use cli::simulate::{simulate, SimulateArgs};
use cli::status::{run_history, status};

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
    /// Show what a table's next run would do, writing nothing: its partitions, file groups, files
    /// and bytes in, files expected out, deletes applied, the engine and why, and the expected
    /// duration from its measured runs (from the running service when it answers).
    Plan {
        #[arg(long, env = "ICEPACK_CONFIG")]
        config: PathBuf,
        /// `namespace.table` as configured.
        table: String,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
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
    Simulate(Box<SimulateArgs>),
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

/// A command that prints for a reader (`icepack status | head`) ends as Unix tools do when the
/// reader goes away — quietly, by SIGPIPE — instead of panicking in `println!` and reporting a
/// bug. Only for commands that print and talk to no server: Rust ignores SIGPIPE so that a
/// closed socket is an error to handle, which the service, the bridge and the commands that
/// reach S3, SQS or a catalog rely on.
fn end_quietly_when_the_reader_goes(command: &Command) {
    if matches!(
        command,
        Command::Simulate(_) | Command::Status { .. } | Command::CheckConfig { .. }
    ) {
        // SAFETY: called before any other thread starts; it restores the signal's default
        // disposition and installs no handler.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    end_quietly_when_the_reader_goes(&cli.command);
    init_logging(cli.log_format);
    log_panics();
    if let Err(error) = icepack::base::failpoint::setup() {
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
        Command::Plan {
            config,
            table,
            json,
        } => cli::plan::plan(&config, &table, json),
        Command::Bridge { config, listen } => bridge(&config, listen),
        Command::Reconcile { config, table } => reconcile(&config, table.as_deref()),
        Command::Simulate(args) => simulate(*args),
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
