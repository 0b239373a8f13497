//! The first run on a Spark Connect server without the cold start: a fresh server answers the
//! probe's `SELECT 1` within seconds, but the first run on it then paid for loading the Iceberg
//! catalog, its FileIO and the JIT (23 s, against about 2 s for the runs after it: issue 46).
//!
//! When the runner reaches a server it has not warmed up yet — at start, after a probe that did
//! not reach it (a reconnect), and when the server's `spark.app.id` changed between two probes
//! (a restart) — it loads each catalog the configuration's Spark tables use, and one table of
//! each, through the session settings a run gives its session and with read-only statements
//! only ([`statements`]): no table is written. It runs on a thread of its own, within
//! [`WARM_UP_DEADLINE`]; nothing waits for it (runs and readiness go on meanwhile), and a
//! failure is logged, without the catalog's secrets, and changes nothing else. Which table warms
//! which catalog ([`tables_to_warm`]), when to warm up ([`WarmState`]) and how much time each
//! table gets ([`time_for_next`]) are pure.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::command::spark_conf;
use super::connect::{ConnectRunner, ConnectSettings};
use super::runner::{SparkJob, SparkRunner};
use super::sql::{CompactionSql, SqlTask, Statement, StatementKind};
use crate::config::{Config, TableSpec};

/// The whole warm-up's deadline, all catalogs together: what is not warmed by then is left to
/// the first run.
pub const WARM_UP_DEADLINE: Duration = Duration::from_secs(120);

/// Below this much time left a table is not started (a statement on a cold server takes seconds).
const LEAST_TIME_PER_TABLE: Duration = Duration::from_secs(5);

/// Catalogs warmed at most: the first warms the JVM (classes, JIT) for all; each further one
/// only its own catalog.
pub const MAX_CATALOGS: usize = 16;

/// A configured table that warms its catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmUpTable {
    pub catalog: String,
    /// `namespace.table`, as configured (validated identifiers).
    pub table: String,
}

/// One table per catalog that runs may take to Spark, in the order of the configuration: a
/// table always compacted by Spark (`engine = "spark"`) before one that only may be
/// (`engine = "auto"`); tables of the native engine never. At most [`MAX_CATALOGS`].
pub fn tables_to_warm(specs: &[TableSpec]) -> Vec<WarmUpTable> {
    use crate::config::EngineChoice;
    let mut chosen: Vec<(WarmUpTable, EngineChoice)> = Vec::new();
    for spec in specs.iter().filter(|spec| spec.engine.uses_spark()) {
        let known = chosen
            .iter()
            .position(|(table, _)| table.catalog == spec.catalog);
        match known {
            Some(index) => {
                let (table, engine) = &mut chosen[index];
                if *engine != EngineChoice::Spark && spec.engine == EngineChoice::Spark {
                    table.table = spec.table.clone();
                    *engine = spec.engine;
                }
            }
            None if chosen.len() < MAX_CATALOGS => chosen.push((
                WarmUpTable {
                    catalog: spec.catalog.clone(),
                    table: spec.table.clone(),
                },
                spec.engine,
            )),
            None => {}
        }
    }
    chosen.into_iter().map(|(table, _)| table).collect()
}

/// What warms a catalog and the path of a run, reading only: the statements of a reconcile of
/// the table (icepack's own read-only check of it), which are the reads a run makes around its
/// rewrite — `REFRESH TABLE` (the catalog, its FileIO, the table's metadata), `DESCRIBE`, the
/// sort order, the small files, the manifests, the delete files and what was committed lately,
/// through Iceberg's metadata tables — with a size bound of 0, so that no file is listed back;
/// then one row of the table (Iceberg's Parquet reader, which the rewrite reads its input with).
/// No procedure: a no-op `rewrite_data_files` (`where => 'false'`) made no measurable difference
/// to the first run (BENCHMARKS.md §5). `now_millis` bounds the committed-files read to the last
/// minutes.
pub fn statements(
    table: &WarmUpTable,
    now_millis: crate::base::clock::UnixMillis,
) -> Vec<Statement> {
    let reconcile = CompactionSql {
        catalog: table.catalog.clone(),
        table: table.table.clone(),
        target_file_bytes: 0,
        partial_progress: false,
        where_filter: None,
        expire_snapshots_older_than_hours: None,
        run_started_millis: now_millis,
        small_file_bytes: 0,
        task: SqlTask::Read,
        committed_since_millis: now_millis,
        extra_options: BTreeMap::new(),
        orphan_older_than_hours: 0,
        orphan_prefix_listing: false,
        partition_statistics: false,
        expire_snapshots_retain_last: None,
    };
    let mut statements = reconcile.statement_list();
    statements.push(Statement::new(
        StatementKind::Other,
        format!("SELECT * FROM {}.{} LIMIT 1", table.catalog, table.table),
    ));
    statements
}

/// The time the next table gets: what is left of the deadline, or `None` when that is too little
/// to start one.
pub fn time_for_next(deadline: Duration, elapsed: Duration) -> Option<Duration> {
    deadline
        .checked_sub(elapsed)
        .filter(|left| *left >= LEAST_TIME_PER_TABLE)
}

/// Which server the runner is warmed up for: a probe's outcome in, whether to warm up out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WarmState {
    /// The `spark.app.id` of the server warmed up (or being warmed up); `None` before the first
    /// probe that reached one, and after a probe that did not.
    warmed_for: Option<String>,
}

/// How a server that does not say its `spark.app.id` is known.
const UNNAMED_SERVER: &str = "(a server without spark.app.id)";

impl WarmState {
    /// A probe reached the server `server` (its `spark.app.id`): whether to warm it up now.
    pub fn answered(&mut self, server: Option<&str>) -> bool {
        let server = server.unwrap_or(UNNAMED_SERVER);
        if self.warmed_for.as_deref() == Some(server) {
            return false;
        }
        self.warmed_for = Some(server.to_string());
        true
    }

    /// A probe did not reach the server: the next that does warms up again (it may be another
    /// server, or one that restarted).
    pub fn unreachable(&mut self) {
        self.warmed_for = None;
    }
}

/// How a warm-up went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WarmUpReport {
    /// The server's `spark.app.id`, if it said.
    pub server: Option<String>,
    /// `catalog.namespace.table` of each table loaded, and how long it took.
    pub loaded: Vec<(String, u64)>,
    /// Tables that could not be loaded, and why (secret-free).
    pub failed: Vec<(String, String)>,
    /// Tables left to the first run: the deadline came first.
    pub skipped: Vec<String>,
    pub millis: u64,
}

/// A table to warm with, and the settings a run of its catalog gives its session (they hold the
/// catalog's secrets: this is neither `Debug` nor logged).
struct Target {
    table: WarmUpTable,
    conf: BTreeMap<String, String>,
}

/// The warm-up of a connect runner: its tables, its state, the reports of its warm-ups.
pub struct WarmUp {
    targets: Mutex<Vec<Target>>,
    state: Mutex<WarmState>,
    reports: watch::Sender<Option<WarmUpReport>>,
}

impl Default for WarmUp {
    fn default() -> Self {
        WarmUp {
            targets: Mutex::new(Vec::new()),
            state: Mutex::new(WarmState::default()),
            reports: watch::channel(None).0,
        }
    }
}

impl WarmUp {
    /// The warm-up with `tables`, each given its catalog's settings from `config` (a table whose
    /// catalog is not configured is left out: its runs fail before reaching Spark).
    pub fn new(config: &Config, tables: Vec<WarmUpTable>) -> WarmUp {
        let warm_up = WarmUp::default();
        *warm_up.targets.lock().expect("warm-up targets") = targets(config, tables);
        warm_up
    }

    /// A reload: the catalogs' settings as runs now get them (tables stay those of the start; a
    /// removed one fails its next warm-up, harmlessly).
    pub fn reconfigure(&self, config: &Config) {
        let mut targets = self.targets.lock().expect("warm-up targets");
        let tables = targets.drain(..).map(|target| target.table).collect();
        *targets = self::targets(config, tables);
    }

    /// The tables warmed with.
    pub fn tables(&self) -> Vec<WarmUpTable> {
        self.targets
            .lock()
            .expect("warm-up targets")
            .iter()
            .map(|target| target.table.clone())
            .collect()
    }

    /// The last warm-up's report, as each one ends.
    pub fn reports(&self) -> watch::Receiver<Option<WarmUpReport>> {
        self.reports.subscribe()
    }

    /// The probe did not reach the server.
    pub fn server_unreachable(&self) {
        self.state.lock().expect("warm-up state").unreachable();
    }

    /// The probe reached the server `server` (`spark.app.id`): a server not warmed up yet is,
    /// on a thread of its own (the probe, and whatever runs, go on).
    pub fn server_answered(self: &Arc<Self>, settings: &ConnectSettings, server: Option<String>) {
        if !self
            .state
            .lock()
            .expect("warm-up state")
            .answered(server.as_deref())
        {
            return;
        }
        let jobs: Vec<(WarmUpTable, SparkJob)> = self
            .targets
            .lock()
            .expect("warm-up targets")
            .iter()
            .map(|target| (target.table.clone(), job(target)))
            .collect();
        if jobs.is_empty() {
            debug!("no Spark table configured: nothing to warm the Spark Connect server up with");
            return;
        }
        let (warm_up, settings) = (self.clone(), settings.clone());
        let spawned = std::thread::Builder::new()
            .name("icepack-warm-up".to_string())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        warn!(%error, "cannot warm the Spark Connect server up: no runtime");
                        return;
                    }
                };
                let report = runtime.block_on(warm_up_server(settings, server, jobs));
                warm_up.reports.send_replace(Some(report));
            });
        if let Err(error) = spawned {
            warn!(%error, "cannot warm the Spark Connect server up: no thread");
        }
    }
}

fn targets(config: &Config, tables: Vec<WarmUpTable>) -> Vec<Target> {
    tables
        .into_iter()
        .filter_map(|table| {
            let catalog = config.catalogs.get(&table.catalog)?;
            Some(Target {
                conf: spark_conf(&config.spark, &table.catalog, catalog),
                table,
            })
        })
        .collect()
}

/// A job of the warm-up statements on the target's table, with the settings a run has.
fn job(target: &Target) -> SparkJob {
    SparkJob {
        run_id: format!("warm-up-{}", target.table.catalog),
        table: target.table.table.clone(),
        catalog: target.table.catalog.clone(),
        statements: statements(
            &target.table,
            crate::base::clock::Clock::now_millis(&crate::base::clock::SystemClock),
        ),
        nonce: super::result::new_nonce(),
        conf: target.conf.clone(),
        options: Vec::new(),
        recovery: Vec::new(),
        claimed: Default::default(),
        attempt: 1,
        env: Vec::new(),
        timeout: WARM_UP_DEADLINE,
    }
}

/// Loads each table through a runner of its own (its own channel, on this thread's runtime),
/// one after the other, within [`WARM_UP_DEADLINE`].
async fn warm_up_server(
    settings: ConnectSettings,
    server: Option<String>,
    jobs: Vec<(WarmUpTable, SparkJob)>,
) -> WarmUpReport {
    let endpoint = settings.endpoint.shown();
    info!(%endpoint, server = server.as_deref().unwrap_or("unnamed"), catalogs = jobs.len(), "warming the Spark Connect server up: loading each catalog and one of its tables, read-only");
    let runner = ConnectRunner::new(settings);
    let started = Instant::now();
    let mut report = WarmUpReport {
        server,
        ..WarmUpReport::default()
    };
    for (table, mut job) in jobs {
        let name = format!("{}.{}", table.catalog, table.table);
        let Some(time) = time_for_next(WARM_UP_DEADLINE, started.elapsed()) else {
            report.skipped.push(name);
            continue;
        };
        job.timeout = time;
        let loading = Instant::now();
        let failure = match runner.run(&job).await {
            Ok(output) => output.error.map(|error| {
                if output.timed_out {
                    format!("the deadline ({} s) passed", time.as_secs())
                } else {
                    error.describe(300)
                }
            }),
            Err(error) => Some(error.to_string()),
        };
        let millis = loading.elapsed().as_millis() as u64;
        match failure {
            None => {
                info!(catalog = %table.catalog, table = %table.table, millis, "warm-up: the catalog and the table's metadata are loaded");
                report.loaded.push((name, millis));
            }
            Some(error) => {
                let error = crate::base::redact::hide_secrets(&crate::base::redact::redact(
                    &error,
                    &job.secrets(),
                ));
                warn!(catalog = %table.catalog, table = %table.table, millis, %error, "warm-up: cannot load the table; the first run on the server may be slow, nothing else changes");
                report.failed.push((name, error));
            }
        }
    }
    report.millis = started.elapsed().as_millis() as u64;
    if !report.skipped.is_empty() {
        warn!(%endpoint, deadline_secs = WARM_UP_DEADLINE.as_secs(), skipped = ?report.skipped, "warm-up: the deadline passed; the first run of those catalogs loads them");
    }
    info!(%endpoint, loaded = report.loaded.len(), failed = report.failed.len(), skipped = report.skipped.len(), millis = report.millis, "the Spark Connect server is warmed up");
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(toml: &str) -> Vec<TableSpec> {
        Config::from_toml_str(toml).unwrap().table_specs()
    }

    const CATALOGS: &str = r#"
[catalogs.lakehouse]
impl = "org.apache.iceberg.rest.RESTCatalog"
uri = "http://127.0.0.1:1"
warehouse = "s3://lake/warehouse"
[catalogs.lakehouse.properties]
"s3.secret-access-key" = "very-secret-key"
[catalogs.other]
impl = "org.apache.iceberg.jdbc.JdbcCatalog"
uri = "jdbc:sqlite:file:/tmp/c.db"
warehouse = "s3://lake/other"
"#;

    fn table(name: &str, catalog: &str, engine: &str) -> String {
        format!(
            "[[tables]]\ntable = \"{name}\"\ncatalog = \"{catalog}\"\nbucket = \"lake\"\nprefix = \"{name}/\"\nengine = \"{engine}\"\n"
        )
    }

    fn warm(catalog: &str, table: &str) -> WarmUpTable {
        WarmUpTable {
            catalog: catalog.to_string(),
            table: table.to_string(),
        }
    }

    #[test]
    fn one_spark_table_warms_each_catalog_first_one_always_on_spark() {
        let toml = [
            CATALOGS.to_string(),
            table("a.native_only", "lakehouse", "native"),
            table("a.maybe", "lakehouse", "auto"),
            table("a.orders", "lakehouse", "spark"),
            table("a.events", "lakehouse", "spark"),
            table("b.first", "other", "spark"),
            table("b.second", "other", "auto"),
        ]
        .concat();
        assert_eq!(
            tables_to_warm(&specs(&toml)),
            vec![warm("lakehouse", "a.orders"), warm("other", "b.first")]
        );
        // Only tables that may go to Spark warm a catalog; `auto` when nothing else does.
        let toml = [
            CATALOGS.to_string(),
            table("a.native_only", "lakehouse", "native"),
            table("b.maybe", "other", "auto"),
        ]
        .concat();
        assert_eq!(
            tables_to_warm(&specs(&toml)),
            vec![warm("other", "b.maybe")]
        );
        assert!(tables_to_warm(&[]).is_empty());
    }

    #[test]
    fn at_most_max_catalogs_are_warmed() {
        let mut toml = String::new();
        for index in 0..MAX_CATALOGS + 3 {
            toml.push_str(&format!(
                "[catalogs.c{index}]\nimpl = \"org.apache.iceberg.rest.RESTCatalog\"\nuri = \"http://127.0.0.1:1\"\nwarehouse = \"s3://lake/c{index}\"\n"
            ));
        }
        for index in 0..MAX_CATALOGS + 3 {
            toml.push_str(&table(
                &format!("a.t{index}"),
                &format!("c{index}"),
                "spark",
            ));
        }
        let tables = tables_to_warm(&specs(&toml));
        assert_eq!(tables.len(), MAX_CATALOGS);
        assert_eq!(
            tables[0],
            warm("c0", "a.t0"),
            "in the configuration's order"
        );
    }

    #[test]
    fn the_statements_are_a_reconciles_reads_listing_no_file_and_never_write() {
        let now = 1_714_564_800_000;
        let statements = statements(&warm("lakehouse", "a.orders"), now);
        assert_eq!(statements[0].sql, "REFRESH TABLE lakehouse.a.orders");
        for statement in &statements {
            let verb = statement.sql.split_whitespace().next().unwrap();
            assert!(
                ["REFRESH", "DESCRIBE", "SHOW", "SELECT"].contains(&verb),
                "{}",
                statement.sql
            );
            assert!(
                statement.sql.contains("lakehouse.a.orders"),
                "{}",
                statement.sql
            );
        }
        let kinds: Vec<StatementKind> = statements.iter().map(|statement| statement.kind).collect();
        for kind in [
            StatementKind::PartitionSpec,
            StatementKind::SortOrder,
            StatementKind::Truth,
            StatementKind::Manifests,
            StatementKind::Deletes,
            StatementKind::Committed,
        ] {
            assert!(kinds.contains(&kind), "a run's read {kind:?}: {kinds:?}");
        }
        let truth = statements
            .iter()
            .find(|statement| statement.kind == StatementKind::Truth)
            .unwrap();
        assert!(
            truth.sql.ends_with("file_size_in_bytes < 0"),
            "{}",
            truth.sql
        );
        assert_eq!(
            statements.last().unwrap().sql,
            "SELECT * FROM lakehouse.a.orders LIMIT 1"
        );
    }

    #[test]
    fn a_server_is_warmed_once_until_it_changes_or_is_lost() {
        let mut state = WarmState::default();
        assert!(state.answered(Some("local-1")), "the first server reached");
        assert!(!state.answered(Some("local-1")), "the same server again");
        assert!(
            state.answered(Some("local-2")),
            "a server restarted between two probes"
        );
        assert!(!state.answered(Some("local-2")));
        state.unreachable();
        assert!(state.answered(Some("local-2")), "reconnected");
        // A server that does not say its id: once, and again after a reconnect.
        let mut state = WarmState::default();
        assert!(state.answered(None));
        assert!(!state.answered(None));
        state.unreachable();
        assert!(state.answered(None));
    }

    #[test]
    fn a_table_starts_only_with_time_left_before_the_deadline() {
        let deadline = Duration::from_secs(120);
        assert_eq!(
            time_for_next(deadline, Duration::ZERO),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            time_for_next(deadline, Duration::from_secs(100)),
            Some(Duration::from_secs(20)),
            "what is left of the deadline, not a table's share"
        );
        assert_eq!(time_for_next(deadline, Duration::from_secs(116)), None);
        assert_eq!(time_for_next(deadline, Duration::from_secs(500)), None);
    }

    #[tokio::test]
    async fn a_warm_up_that_fails_is_reported_and_logged_without_secrets() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let config = Config::from_toml_str(&format!(
            "{CATALOGS}{}",
            table("a.orders", "lakehouse", "spark")
        ))
        .unwrap();
        let warm_up = Arc::new(WarmUp::new(&config, vec![warm("lakehouse", "a.orders")]));
        let mut reports = warm_up.reports();
        let settings = super::super::connect::settings(
            &format!("sc://127.0.0.1:{port}"),
            false,
            None,
            Duration::from_secs(3),
        )
        .unwrap();
        // Off the caller: it returns at once, the report comes from the warm-up's thread.
        warm_up.server_answered(&settings, Some("local-1".to_string()));
        let report = tokio::time::timeout(
            Duration::from_secs(60),
            reports.wait_for(|report| report.is_some()),
        )
        .await
        .expect("a report within the connect timeout")
        .unwrap()
        .clone()
        .unwrap();
        assert_eq!(report.server.as_deref(), Some("local-1"));
        assert!(report.loaded.is_empty() && report.skipped.is_empty());
        let (table, error) = &report.failed[0];
        assert_eq!(table, "lakehouse.a.orders");
        assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
        assert!(!error.contains("very-secret-key"), "{error}");
    }

    #[test]
    fn targets_get_the_runs_catalog_settings_and_follow_a_reload() {
        let config = Config::from_toml_str(&format!(
            "{CATALOGS}{}",
            table("a.orders", "lakehouse", "spark")
        ))
        .unwrap();
        let warm_up = WarmUp::new(
            &config,
            vec![warm("lakehouse", "a.orders"), warm("gone", "x.y")],
        );
        assert_eq!(
            warm_up.tables(),
            vec![warm("lakehouse", "a.orders")],
            "a catalog not configured is left out"
        );
        let job = job(&warm_up.targets.lock().unwrap()[0]);
        assert_eq!(
            job.conf,
            spark_conf(&config.spark, "lakehouse", &config.catalogs["lakehouse"]),
            "the settings a run of the catalog has"
        );
        assert!(job.secrets().contains(&"very-secret-key".to_string()));
        let reloaded =
            Config::from_toml_str(&CATALOGS.replace("very-secret-key", "rotated-secret-key"))
                .unwrap();
        warm_up.reconfigure(&reloaded);
        let target = &warm_up.targets.lock().unwrap()[0];
        assert_eq!(
            target.conf["spark.sql.catalog.lakehouse.s3.secret-access-key"],
            "rotated-secret-key"
        );
    }
}
