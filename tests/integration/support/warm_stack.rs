//! What the tests on a warm Spark Connect server share (issue 47: no test module imports
//! another): the stack (`Stack`, `Table`), the tables' SQL, the service's configuration, waiting
//! for a run, and the lock that runs the tests that start JVMs of their own alone — for
//! `connect_e2e`, `pacing`, `strategies`, `maintenance`, `deletes`, `operator_page` and
//! `format_v3`.

use std::time::Duration;

use icepack::engine::spark::connect::ConnectRunner;

use super::connect::{runner, sql, ConnectServer};
use super::spark::{stack_available, Lakehouse};
use super::{wait_until, Icepack, Landing, Moto};

/// Two cores: the tests on the shared server run two at a time (the harness's threads), a test
/// that starts JVMs of its own (a cluster, a browser, the measurements) runs alone.
pub(crate) static HEAVY: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub(crate) fn connect_available(test: &str) -> bool {
    stack_available(test)
}

/// A test's table in a catalog of its own: SQLite's JDBC catalog cannot take two commits at once
/// from two connections (`SQLITE_BUSY_SNAPSHOT`), which a real catalog does.
pub(crate) struct Table {
    pub(crate) catalog: &'static str,
    pub(crate) name: &'static str,
    pub(crate) lakehouse: Lakehouse,
}

impl Table {
    pub(crate) fn new(
        dir: &std::path::Path,
        moto: &Moto,
        bucket: &str,
        catalog: &'static str,
        name: &'static str,
    ) -> Table {
        let dir = dir.join(catalog);
        std::fs::create_dir_all(&dir).unwrap();
        Table {
            catalog,
            name,
            lakehouse: Lakehouse::new(&dir, &moto.endpoint, bucket),
        }
    }

    pub(crate) fn qualified(&self) -> String {
        format!("{}.{}", self.catalog, self.name)
    }

    pub(crate) async fn sql(
        &self,
        writer: &icepack::engine::spark::connect::ConnectRunner,
        statements: &[String],
    ) -> Vec<icepack::engine::spark::result::ResultSet> {
        sql(writer, self.catalog, &self.lakehouse, statements).await
    }
}

/// What every test here starts with: moto with a notifying bucket, a Spark Connect server (the
/// process's shared one, or one of its own on `master`), and a writer session on it.
pub(crate) struct Stack {
    pub(crate) moto: Moto,
    pub(crate) queue_url: String,
    pub(crate) bucket: String,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) server: Server,
    pub(crate) writer: ConnectRunner,
}

/// The shared server, or a server of the test's own (stopped with the test).
pub(crate) enum Server {
    Shared(&'static ConnectServer),
    Own(ConnectServer),
}

impl std::ops::Deref for Server {
    type Target = ConnectServer;

    fn deref(&self) -> &ConnectServer {
        match self {
            Server::Shared(server) => server,
            Server::Own(server) => server,
        }
    }
}

impl Stack {
    pub(crate) async fn start(master: Option<&str>) -> Stack {
        let moto = Moto::start().await;
        let Landing {
            queue_url, bucket, ..
        } = moto.landing(5).await;
        let server = match master {
            None => Server::Shared(ConnectServer::shared()),
            Some(master) => Server::Own(ConnectServer::start(Some(master))),
        };
        let writer = runner(&server.url);
        Stack {
            moto,
            queue_url,
            bucket,
            dir: tempfile::tempdir().unwrap(),
            server,
            writer,
        }
    }

    pub(crate) fn parts(&self) -> (&Moto, &str, &str, &ConnectServer, &ConnectRunner) {
        (
            &self.moto,
            &self.queue_url,
            &self.bucket,
            &self.server,
            &self.writer,
        )
    }

    /// A table in the stack's bucket, in a catalog of its own name.
    pub(crate) fn table(&self, catalog: &'static str, name: &'static str) -> Table {
        Table::new(self.dir.path(), &self.moto, &self.bucket, catalog, name)
    }

    /// For the pacing tests: a table `(id, part, payload)` partitioned by `part`, created, and a
    /// configuration with cost pacing — due at 3 files, files below 1 MiB small, outputs aiming
    /// at 8 MiB, a warm server's run cost (1 s), the count and time rules off — and `keys`.
    pub(crate) async fn paced_table(&self, name: &'static str, keys: &str) -> (Table, String) {
        let table = self.table("lakehouse", name);
        table
            .sql(
                &self.writer,
                &[
                    format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                    format!(
                        "CREATE TABLE {} (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part)",
                        table.qualified()
                    ),
                ],
            )
            .await;
        let config = config(
            &self.moto,
            &self.queue_url,
            &self.bucket,
            &self.server.url,
            "",
            &[&table],
        )
        .replace(
            "pacing = false                           # runs at the thresholds (the pacing has its own test)\n",
            "pacing = \"cost\"\n",
        )
        // Cost pacing waits at most max-wait: two hours, longer than any of these tests.
        .replace("max_wait_minutes = 0\n", "max_wait_minutes = 120\n")
        .replace(
            "min_files = 10\n",
            &format!(
                "min_files = 3\nsmall_file_mb = 1\ntarget_file_mb = 8\nrun_cost_seconds = 1\n\
                 file_fix_value_seconds = 0\nfile_hour_cost_seconds = 0\n{keys}"
            ),
        );
        assert!(!config.contains("pacing = false"), "{config}");
        (table, config)
    }
}

pub(crate) fn inserts(table: &str, first_batch: i64, count: i64) -> Vec<String> {
    (first_batch..first_batch + count)
        .map(|batch| {
            let rows: Vec<String> = (0..5)
                .map(|row| {
                    let id = batch * 5 + row;
                    format!("({id}, '2024-05-0{}', {}.25)", 1 + id % 3, id * 3)
                })
                .collect();
            // One task, one data file per commit (local[2] would split five rows in two).
            format!(
                "INSERT INTO {table} SELECT /*+ COALESCE(1) */ * FROM VALUES {}",
                rows.join(", ")
            )
        })
        .collect()
}

pub(crate) fn create(table: &Table) -> Vec<String> {
    vec![
        format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
        format!(
            "CREATE TABLE {} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg",
            table.qualified()
        ),
    ]
}

/// Rows, checksum, data files and `replace` snapshots of a table (as committed now: the
/// server's session caches table metadata).
pub(crate) fn facts(table: &str) -> Vec<String> {
    vec![
        format!("REFRESH TABLE {table}"),
        format!("SELECT count(*) AS row_count, sum(hash(id, order_date, amount)) AS checksum FROM {table}"),
        format!("SELECT count(*) AS data_files FROM {table}.files"),
        format!("SELECT count(*) AS replace_snapshots FROM {table}.snapshots WHERE operation = 'replace'"),
    ]
}

pub(crate) fn table_status(icepack: &Icepack, table: &str) -> serde_json::Value {
    icepack.status()["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["table"] == table)
        .cloned()
        .unwrap()
}

pub(crate) fn config(
    moto: &Moto,
    queue_url: &str,
    bucket: &str,
    connect_url: &str,
    http_listen: &str,
    tables: &[&Table],
) -> String {
    let spark = format!(
        "[spark]\nrunner = \"connect\"\nconnect_url = \"{connect_url}\"\nconnect_timeout_seconds = 5\n"
    );
    config_with(moto, queue_url, bucket, &spark, http_listen, tables)
}

pub(crate) fn config_with(
    moto: &Moto,
    queue_url: &str,
    bucket: &str,
    spark: &str,
    http_listen: &str,
    tables: &[&Table],
) -> String {
    // One section per catalog, however many of the tables share it.
    let catalogs: std::collections::BTreeMap<&str, String> = tables
        .iter()
        .map(|table| {
            (
                table.catalog,
                table.lakehouse.catalog_toml_named(table.catalog),
            )
        })
        .collect();
    let catalogs: Vec<String> = catalogs.into_values().collect();
    let tables: Vec<String> = tables
        .iter()
        .map(|table| {
            let short = table.name.split('.').nth(1).unwrap();
            format!(
                "[[tables]]\ntable = \"{}\"\ncatalog = \"{}\"\nbucket = \"{bucket}\"\nprefix = \"warehouse/analytics/{short}/\"\n",
                table.name, table.catalog
            )
        })
        .collect();
    format!(
        r#"
[service]
state_dir = "@STATE_DIR@"
http_listen = "{http_listen}"

[sqs]
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout_seconds = 60

[defaults]
pacing = false                           # runs at the thresholds (the pacing has its own test)
max_wait_minutes = 0
min_files = 10

{catalogs}
{spark}
max_concurrent = 2
timeout_minutes = 10
retry_attempts = 1
failure_backoff_initial_seconds = 2
failure_backoff_max_seconds = 4

{tables}
"#,
        endpoint = moto.endpoint,
        catalogs = catalogs.join("\n"),
        tables = tables.join("\n"),
    )
}

/// The table's last run once it has one that started at or after `after` (RFC 3339).
pub(crate) async fn run_after(icepack: &Icepack, table: &str, after: &str) -> serde_json::Value {
    let after = after.to_string();
    wait_until(
        &format!("a run of {table} after {after}"),
        Duration::from_secs(300),
        || {
            let status = table_status(icepack, table);
            let after = after.clone();
            async move {
                let started = status["last_run"]["started_at"].as_str()?.to_string();
                (started.as_str() >= after.as_str()).then_some(status)
            }
        },
    )
    .await
}

/// The table's last run once it has a successful one that started at or after `after`. A run
/// that starts while a writer still commits may lose the race for SQLite's JDBC catalog (one
/// commit at a time across connections); it backs off and the next one runs.
pub(crate) async fn success_after(
    icepack: &Icepack,
    table: &str,
    after: &str,
) -> serde_json::Value {
    let after = after.to_string();
    wait_until(
        &format!("a successful run of {table} after {after}"),
        Duration::from_secs(300),
        || {
            let status = table_status(icepack, table);
            let after = after.clone();
            async move {
                let last = &status["last_run"];
                let started = last["started_at"].as_str()? >= after.as_str();
                (started && last["outcome"] == "success").then_some(status)
            }
        },
    )
    .await
}

/// `table` as `create` makes it, of format `version`, deleting by merge-on-read (delete files
/// beside the data rather than data rewritten).
pub(crate) async fn create_merge_on_read(table: &Table, writer: &ConnectRunner, version: u8) {
    let name = table.qualified();
    table
        .sql(
            writer,
            &[
                format!("CREATE NAMESPACE IF NOT EXISTS {}.analytics", table.catalog),
                format!(
                    "CREATE TABLE {name} (id BIGINT, order_date STRING, amount DOUBLE) USING iceberg \
                     TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = 'merge-on-read')"
                ),
            ],
        )
        .await;
}

/// `POST /v1/tables/{table}/maintenance/{task}` on icepack's HTTP surface at `http`: the answer's
/// status and body.
pub(crate) async fn ask_maintenance(
    http: &impl std::fmt::Display,
    table: &str,
    task: &str,
) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!(
            "http://{http}/v1/tables/{table}/maintenance/{task}"
        ))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}
