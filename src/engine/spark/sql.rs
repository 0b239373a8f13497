//! The spark-sql invocation of a compaction, built exactly as the reference workflow builds it,
//! with every identifier validated and every value quoted: nothing from an event or the
//! configuration can inject SQL, and no shell ever sees the command.

use std::collections::BTreeMap;

use crate::base::clock::{format_rfc3339, UnixMillis};
use crate::model::state::Maintenance;
use crate::model::strategy::RunStrategy;

/// What one statement of a run is. A statement's rows are read by what it is — the statement
/// icepack sent — never by the names of the columns or values in them, which a table's own
/// columns, properties and paths could imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatementKind {
    /// `REFRESH TABLE` (nothing read).
    Refresh,
    /// `rewrite_data_files`: its one result row, by column name (columns were added over releases).
    Rewrite,
    /// `rewrite_position_delete_files`, after a rewrite that applies deletes or as maintenance.
    PositionDeleteRewrite,
    ManifestRewrite,
    OrphanRemoval,
    ExpireSnapshots,
    /// `compute_table_stats`: the statistics file it wrote (a path, or none).
    TableStatistics,
    /// `compute_partition_stats`: the partition statistics file it wrote (a path, or none).
    PartitionStatistics,
    /// `DESCRIBE TABLE`: the partition spec.
    PartitionSpec,
    /// `SHOW TBLPROPERTIES t ('sort-order')`: the table's sort order.
    SortOrder,
    /// The data files the run's `replace` snapshots added (JSON rows: snapshot id, path).
    Outputs,
    /// The table's small data files (JSON rows: path, size).
    Truth,
    /// Manifests of the current snapshot (a count).
    Manifests,
    /// Delete files and rows (four counts).
    Deletes,
    /// Data files committed since a window began (JSON rows: path).
    Committed,
    /// `replace` snapshots that may be the run's (JSON rows: snapshot id and summary counts).
    ReplaceSnapshots,
    /// The data files those snapshots removed (JSON rows: snapshot id, path).
    RemovedFiles,
    /// SQL of tools and tests, not of a run.
    Other,
}

impl StatementKind {
    /// The name a failure of the statement is reported under (`expire_snapshots`, `truth_read`).
    pub fn as_str(self) -> &'static str {
        match self {
            StatementKind::Refresh => "refresh_table",
            StatementKind::Rewrite => "rewrite_data_files",
            StatementKind::PositionDeleteRewrite => "rewrite_position_delete_files",
            StatementKind::ManifestRewrite => "rewrite_manifests",
            StatementKind::OrphanRemoval => "remove_orphan_files",
            StatementKind::ExpireSnapshots => "expire_snapshots",
            StatementKind::TableStatistics => "compute_table_stats",
            StatementKind::PartitionStatistics => "compute_partition_stats",
            StatementKind::PartitionSpec => "partition_spec_read",
            StatementKind::SortOrder => "sort_order_read",
            StatementKind::Outputs => "output_files_read",
            StatementKind::Truth => "truth_read",
            StatementKind::Manifests => "manifests_read",
            StatementKind::Deletes => "deletes_read",
            StatementKind::Committed => "committed_files_read",
            StatementKind::ReplaceSnapshots => "replace_snapshots_read",
            StatementKind::RemovedFiles => "removed_files_read",
            StatementKind::Other => "other",
        }
    }
}

/// One statement of a run and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub kind: StatementKind,
    pub sql: String,
}

impl Statement {
    pub fn new(kind: StatementKind, sql: impl Into<String>) -> Statement {
        Statement {
            kind,
            sql: sql.into(),
        }
    }
}

/// The alias of the output-files read (its rows are JSON objects).
pub const OUTPUT_FILE_COLUMN: &str = "icepack_output_file";
/// The table's small data files as the committed metadata has them.
pub const TRUTH_FILE_COLUMN: &str = "icepack_truth_file";
/// Data files added by any snapshot committed since the run (or reconcile window) began.
pub const COMMITTED_FILE_COLUMN: &str = "icepack_committed_file";
/// `replace` snapshots committed since the recovery window began (a recovered run's outcome).
pub const REPLACE_SNAPSHOTS_COLUMN: &str = "icepack_replace_snapshot";
/// The data files those `replace` snapshots removed.
pub const REMOVED_FILE_COLUMN: &str = "icepack_removed_file";
/// Position delete files of the table (the first column of the deletes read).
pub const DELETES_COLUMN: &str = "icepack_position_deletes";
/// Manifests of the table's current snapshot.
pub const MANIFESTS_COLUMN: &str = "icepack_manifests";
/// The table property Iceberg's Spark tables describe their sort order in (absent: unsorted).
pub const SORT_ORDER_PROPERTY: &str = "sort-order";

/// Everything that decides one compaction's SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionSql {
    /// Spark catalog name (`lakehouse`), validated as an identifier.
    pub catalog: String,
    /// `namespace.table`, validated as identifiers.
    pub table: String,
    pub target_file_bytes: u64,
    pub partial_progress: bool,
    /// A filter expression for `rewrite_data_files(where => ...)`, passed as a quoted string.
    pub where_filter: Option<String>,
    /// `expire_snapshots(older_than => now - hours)` after the rewrite.
    pub expire_snapshots_older_than_hours: Option<u64>,
    /// When the run started: replace snapshots committed since (less a margin) are this run's.
    pub run_started_millis: UnixMillis,
    /// Files strictly smaller than this are small files (for the truth query).
    pub small_file_bytes: u64,
    /// What the statements do before they read the table.
    pub task: SqlTask,
    /// Data files committed since this time are reported (a grace window before the claim).
    pub committed_since_millis: UnixMillis,
    /// Further `rewrite_data_files` options from the configuration (never icepack's own keys).
    pub extra_options: BTreeMap<String, String>,
    /// `remove_orphan_files` removes no file younger than this.
    pub orphan_older_than_hours: u64,
    /// `remove_orphan_files` lists the table's location through its FileIO (`prefix_listing`,
    /// Iceberg 1.8 and later), not through a Hadoop file system for its scheme.
    pub orphan_prefix_listing: bool,
    /// A `compute_statistics` run computes partition statistics too (`false` for a table known
    /// to be unpartitioned, which has none).
    pub partition_statistics: bool,
    /// `retain_last` of `expire_snapshots` (`None`: Iceberg's default, 1).
    pub expire_snapshots_retain_last: Option<u64>,
}

/// What a run's statements do before they read the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlTask {
    /// `rewrite_data_files`, then the reads of the run's output and the truth.
    Rewrite(SqlRewrite),
    /// Nothing: the reads only (the spec, the sort order, the truth).
    Read,
    /// A maintenance procedure, then the reads.
    Maintenance(Maintenance),
}

/// A data rewrite's calls and options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlRewrite {
    /// The `rewrite_data_files` calls, in order (none is read as one call over the whole table
    /// with Iceberg's default floor).
    pub calls: Vec<RewriteCall>,
    /// Bin-pack, sort or z-order.
    pub strategy: RunStrategy,
    pub min_input_files: u64,
    /// The rewrite applies the table's deletes (it is due by them): `delete-file-threshold`,
    /// `delete-ratio-threshold` (when configured) and `remove-dangling-deletes`.
    pub apply_deletes: Option<DeleteThresholds>,
}

/// The thresholds of a rewrite that applies the table's delete files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteThresholds {
    /// `delete-ratio-threshold` in parts per million (`None`: Iceberg's default).
    pub ratio_ppm: Option<u64>,
}

/// One `rewrite_data_files` call of a run. A run makes several when some of its partitions
/// have gone quiet (their mid-sized files join, in calls of their own with Iceberg's default
/// floor, while the others' are not read again), and when its partitions do not fit one filter
/// ([`MAX_REWRITE_FILTER_BYTES`]); their results are summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteCall {
    /// `min-file-size-bytes`: files from this size up are not rewritten (`None`: Iceberg's
    /// default, three quarters of the target).
    pub min_file_size_bytes: Option<u64>,
    /// Limits the call to some partitions (built from the partition spec); `None`: the whole
    /// table (within the table's own `where`).
    pub partition_filter: Option<String>,
}

/// The longest partition filter one `rewrite_data_files` call gets. Spark parses, analyses and
/// optimises the filter and Iceberg evaluates it against every manifest entry it plans: a few
/// thousand `OR`ed partitions cost seconds there, and the statement must also fit what carries it
/// (a Spark Connect message; a command line, where Linux refuses a single argument over 128 KiB
/// with "Argument list too long" — spark-sql reads its statements from a file for that reason).
/// A run whose partitions do not fit makes several calls.
pub const MAX_REWRITE_FILTER_BYTES: usize = 64 * 1024;

/// The most `rewrite_data_files` calls a run makes. Each call plans the table's files again and
/// commits a snapshot of its own; a run over more partitions than this many filters hold makes
/// one call over the whole table instead, which rewrites at most some partitions that were not
/// due yet (never fewer files).
pub const MAX_REWRITE_CALLS: usize = 8;

/// Margin for clock differences between icepack and the Spark driver when finding the run's
/// replace snapshots; an older replace snapshot found by it is harmless (its files are known).
const SNAPSHOT_MARGIN_MILLIS: i64 = 5 * 60 * 1000;

/// How far before a run's start a recovery looks for `replace` snapshots. Which of them are the
/// run's is decided by the files they removed (the run's claimed files), not by their time: the
/// window only bounds the read, wide enough for any clock difference between icepack, the Spark
/// driver and the catalog.
const RECOVERY_WINDOW_MILLIS: i64 = 60 * 60 * 1000;

impl CompactionSql {
    /// The statements, `;`-separated, as `spark-sql -e` would take them (without icepack's frame).
    pub fn statements(&self) -> String {
        self.statement_list()
            .iter()
            .map(|statement| statement.sql.as_str())
            .collect::<Vec<_>>()
            .join(";\n")
            + ";"
    }

    /// The statements in order, each without its `;`, with what each one is.
    pub fn statement_list(&self) -> Vec<Statement> {
        let table_ref = format!("{}.{}", self.catalog, self.table);
        // A long-lived engine (Spark Connect) caches table metadata: compact what is committed
        // now. On a fresh spark-sql it costs nothing.
        let mut statements = vec![Statement::new(
            StatementKind::Refresh,
            format!("REFRESH TABLE {table_ref}"),
        )];
        match &self.task {
            SqlTask::Rewrite(rewrite) => statements.extend(self.rewrite_statements(rewrite)),
            SqlTask::Maintenance(maintenance) => {
                statements.extend(self.maintenance_statements(*maintenance))
            }
            SqlTask::Read => {}
        }
        // The reads (spec, order, output, truth) follow the rewrite: an engine may run them at
        // once.
        statements.extend(table_description_statements(&table_ref));
        if !matches!(self.task, SqlTask::Rewrite(_)) {
            statements.extend(self.truth_statements(&table_ref));
            return statements;
        }
        statements.push(self.own_output_statement(&table_ref));
        statements.extend(self.truth_statements(&table_ref));
        if let Some(hours) = self.expire_snapshots_older_than_hours {
            let older_than = sql_timestamp(self.run_started_millis - hours as i64 * 3_600_000);
            let retain_last = self
                .expire_snapshots_retain_last
                .map(|retain| format!(", retain_last => {retain}"))
                .unwrap_or_default();
            statements.push(Statement::new(StatementKind::ExpireSnapshots, format!(
                "CALL {catalog}.system.expire_snapshots(table => {table}, older_than => TIMESTAMP {older_than}{retain_last})",
                catalog = self.catalog,
                table = quote_string(&self.table),
                older_than = quote_string(&older_than),
            )));
        }
        statements
    }

    /// The `rewrite_data_files` calls, and the merge of position deletes after a rewrite that
    /// applied the table's deletes.
    fn rewrite_statements(&self, rewrite: &SqlRewrite) -> Vec<Statement> {
        let mut options: BTreeMap<&str, String> = self
            .extra_options
            .iter()
            .map(|(key, value)| (key.as_str(), value.clone()))
            .collect();
        options.insert("target-file-size-bytes", self.target_file_bytes.to_string());
        options.insert("min-input-files", rewrite.min_input_files.to_string());
        if self.partial_progress {
            options.insert("partial-progress.enabled", "true".to_string());
        }
        if let Some(thresholds) = rewrite.apply_deletes {
            // Any data file with a delete is worth rewriting, unless the table says otherwise.
            options
                .entry("delete-file-threshold")
                .or_insert_with(|| "1".to_string());
            if let Some(ppm) = thresholds.ratio_ppm {
                options
                    .entry("delete-ratio-threshold")
                    .or_insert_with(|| format!("{}", ppm as f64 / 1_000_000.0));
            }
            options.insert("remove-dangling-deletes", "true".to_string());
        }
        let options_with = |floor: Option<u64>| {
            let mut options = options.clone();
            if let Some(bytes) = floor {
                options.insert("min-file-size-bytes", bytes.to_string());
            }
            options
                .iter()
                .map(|(key, value)| format!("{}, {}", quote_string(key), quote_string(value)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let where_argument = |partitions: Option<&String>| {
            let filter = match (&self.where_filter, partitions) {
                (Some(user), Some(partitions)) => Some(format!("({user}) AND ({partitions})")),
                (Some(filter), None) | (None, Some(filter)) => Some(filter.clone()),
                (None, None) => None,
            };
            filter
                .map(|filter| format!(", where => {}", quote_string(&filter)))
                .unwrap_or_default()
        };
        let (strategy, sort_order) = rewrite.strategy.procedure_arguments();
        let sort_order = sort_order
            .map(|order| format!(", sort_order => {}", quote_string(&order)))
            .unwrap_or_default();
        let whole_table = [RewriteCall {
            min_file_size_bytes: None,
            partition_filter: None,
        }];
        let calls = if rewrite.calls.is_empty() {
            &whole_table[..]
        } else {
            &rewrite.calls[..]
        };
        let mut statements: Vec<Statement> = calls.iter().map(|call| Statement::new(StatementKind::Rewrite, format!(
            "CALL {catalog}.system.rewrite_data_files(table => {table}, strategy => {strategy}{sort_order}, options => map({options}){where_argument})",
            catalog = self.catalog,
            table = quote_string(&self.table),
            strategy = quote_string(strategy),
            options = options_with(call.min_file_size_bytes),
            where_argument = where_argument(call.partition_filter.as_ref()),
        ))).collect();
        if rewrite.apply_deletes.is_some() {
            // Deletes committed at or after the rewrite's starting sequence number stay beside
            // its output, referencing files it removed: rewriting the position delete files
            // drops what references nothing.
            statements.push(Statement::new(StatementKind::PositionDeleteRewrite, format!(
                "CALL {catalog}.system.rewrite_position_delete_files(table => {table}, options => map('rewrite-all', 'true'))",
                catalog = self.catalog,
                table = quote_string(&self.table),
            )));
        }
        statements
    }

    /// The maintenance procedure's calls.
    fn maintenance_statements(&self, maintenance: Maintenance) -> Vec<Statement> {
        let call = |kind: StatementKind, procedure: &str, arguments: String| {
            Statement::new(
                kind,
                format!(
                    "CALL {catalog}.system.{procedure}(table => {table}{arguments})",
                    catalog = self.catalog,
                    table = quote_string(&self.table),
                ),
            )
        };
        match maintenance {
            Maintenance::RewriteManifests => vec![call(
                StatementKind::ManifestRewrite,
                "rewrite_manifests",
                String::new(),
            )],
            Maintenance::RemoveOrphans { dry_run } => vec![call(
                StatementKind::OrphanRemoval,
                "remove_orphan_files",
                format!(
                    ", older_than => TIMESTAMP {older_than}, dry_run => {dry_run}{prefix_listing}",
                    older_than = quote_string(&sql_timestamp(
                        self.run_started_millis - self.orphan_older_than_hours as i64 * 3_600_000
                    )),
                    prefix_listing = if self.orphan_prefix_listing {
                        ", prefix_listing => true"
                    } else {
                        ""
                    },
                ),
            )],
            Maintenance::RewritePositionDeletes => vec![call(
                StatementKind::PositionDeleteRewrite,
                "rewrite_position_delete_files",
                String::new(),
            )],
            Maintenance::ComputeStatistics => {
                let mut statements = vec![call(
                    StatementKind::TableStatistics,
                    "compute_table_stats",
                    String::new(),
                )];
                if self.partition_statistics {
                    statements.push(call(
                        StatementKind::PartitionStatistics,
                        "compute_partition_stats",
                        String::new(),
                    ));
                }
                statements
            }
        }
    }

    /// What a run reads when its engine lost the connection after the rewrite was sent, or when
    /// icepack restarted during it: the `replace` snapshots committed since well before the run
    /// began, with their summaries' counts and the data files each removed — the run's own are
    /// those that removed the run's claimed files — then the usual reads. Empty for a reconcile
    /// or maintenance, which rewrite no data files.
    pub fn recovery_statement_list(&self) -> Vec<Statement> {
        if !matches!(self.task, SqlTask::Rewrite(_)) {
            return Vec::new();
        }
        let table_ref = format!("{}.{}", self.catalog, self.table);
        let replace_filter = format!(
            "operation = 'replace' AND committed_at >= TIMESTAMP {}",
            quote_string(&sql_timestamp(
                self.run_started_millis - RECOVERY_WINDOW_MILLIS
            )),
        );
        let replace_since =
            format!("SELECT snapshot_id FROM {table_ref}.snapshots WHERE {replace_filter}");
        let counted = |key: &str, field: &str| {
            format!(
                "{}, CAST(summary[{}] AS BIGINT)",
                quote_string(field),
                quote_string(key)
            )
        };
        let mut statements = vec![
            Statement::new(
                StatementKind::Refresh,
                format!("REFRESH TABLE {table_ref}"),
            ),
            Statement::new(
                StatementKind::ReplaceSnapshots,
                format!(
                    "SELECT to_json(named_struct('snapshot_id', snapshot_id, {}, {}, {})) AS {REPLACE_SNAPSHOTS_COLUMN} \
                     FROM {table_ref}.snapshots WHERE {replace_filter}",
                    counted("deleted-data-files", "rewritten_data_files"),
                    counted("added-data-files", "added_data_files"),
                    counted("removed-files-size", "rewritten_bytes"),
                ),
            ),
            Statement::new(
                StatementKind::RemovedFiles,
                format!(
                    "SELECT DISTINCT to_json(named_struct('snapshot_id', snapshot_id, 'path', data_file.file_path)) AS {REMOVED_FILE_COLUMN} \
                     FROM {table_ref}.all_entries WHERE status = 2 AND snapshot_id IN ({replace_since})"
                ),
            ),
        ];
        statements.extend(table_description_statements(&table_ref));
        statements.push(output_statement(&table_ref, &replace_since));
        statements.extend(self.truth_statements(&table_ref));
        statements
    }

    /// The data files the run's `replace` snapshots added (its output).
    fn own_output_statement(&self, table_ref: &str) -> Statement {
        let replace_since = format!(
            "SELECT snapshot_id FROM {table_ref}.snapshots WHERE operation = 'replace' \
             AND committed_at >= TIMESTAMP {since}",
            since = quote_string(&sql_timestamp(
                self.run_started_millis - SNAPSHOT_MARGIN_MILLIS
            )),
        );
        output_statement(table_ref, &replace_since)
    }

    /// The table's small data files now, and what was committed since the window began. Paths
    /// come as JSON objects, one a row, whatever characters they hold.
    fn truth_statements(&self, table_ref: &str) -> Vec<Statement> {
        let since = sql_timestamp(self.committed_since_millis - SNAPSHOT_MARGIN_MILLIS);
        vec![
            Statement::new(
                StatementKind::Truth,
                format!(
                    "SELECT to_json(named_struct('path', file_path, 'size', file_size_in_bytes)) AS {TRUTH_FILE_COLUMN} \
                     FROM {table_ref}.files WHERE content = 0 AND file_size_in_bytes < {small}",
                    small = self.small_file_bytes
                ),
            ),
            Statement::new(
                StatementKind::Manifests,
                format!("SELECT count(*) AS {MANIFESTS_COLUMN} FROM {table_ref}.manifests"),
            ),
            Statement::new(
                StatementKind::Deletes,
                format!(
                    "SELECT count_if(content = 1) AS {DELETES_COLUMN}, count_if(content = 2) AS icepack_equality_deletes, \
                     coalesce(sum(IF(content > 0, record_count, 0)), 0) AS icepack_deleted_rows, \
                     coalesce(sum(IF(content = 0, record_count, 0)), 0) AS icepack_data_rows FROM {table_ref}.files"
                ),
            ),
            Statement::new(
                StatementKind::Committed,
                format!(
                    "SELECT DISTINCT to_json(named_struct('path', data_file.file_path)) AS {COMMITTED_FILE_COLUMN} \
                     FROM {table_ref}.all_entries WHERE status = 1 AND snapshot_id IN (SELECT snapshot_id FROM {table_ref}.snapshots \
                     WHERE committed_at >= TIMESTAMP {since})",
                    since = quote_string(&since)
                ),
            ),
        ]
    }
}

/// The partition spec (`DESCRIBE TABLE`) and the sort order (the one table property).
fn table_description_statements(table_ref: &str) -> [Statement; 2] {
    [
        Statement::new(
            StatementKind::PartitionSpec,
            format!("DESCRIBE TABLE {table_ref}"),
        ),
        Statement::new(
            StatementKind::SortOrder,
            format!(
                "SHOW TBLPROPERTIES {table_ref} ({})",
                quote_string(SORT_ORDER_PROPERTY)
            ),
        ),
    ]
}

/// The data files added by the `replace` snapshots `snapshots` selects, with the snapshot of each.
fn output_statement(table_ref: &str, snapshots: &str) -> Statement {
    Statement::new(
        StatementKind::Outputs,
        format!(
            "SELECT to_json(named_struct('snapshot_id', snapshot_id, 'path', data_file.file_path)) AS {OUTPUT_FILE_COLUMN} \
             FROM {table_ref}.entries WHERE status = 1 AND snapshot_id IN ({snapshots})"
        ),
    )
}

/// A UTC time as a Spark SQL timestamp literal's text: `2024-05-01 12:00:00.000`.
fn sql_timestamp(millis: UnixMillis) -> String {
    format_rfc3339(millis).replace('T', " ").replace('Z', "")
}
pub use crate::base::sql_text::{is_safe_conf_key, is_safe_identifier, quote_string};

#[cfg(test)]
mod tests;
