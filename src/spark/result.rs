//! Reading what a run's statements returned: spark-sql's text output cut into one result per
//! statement by the run's own frame, each result read by what its statement is (the rewrite's
//! counts, its outputs, the truth ...), and, when a run failed, a class and a short excerpt with
//! no secrets in it.
//!
//! The frame: before each statement spark-sql runs `SELECT '<nonce>:<i>' AS icepack_frame`, and
//! `SELECT '<nonce>:end' ...` after the last, `<nonce>` random per run (kept in the run's claim).
//! A statement's result is what spark-sql printed between its marker and the next; a statement
//! whose next marker never came did not run to its end. Nothing a table holds — column names,
//! property keys, comments, paths — can make a marker without the nonce, so nothing in a table
//! can open, close or imitate a result. Paths are read from JSON objects, one a row, so a path
//! holding a tab or a newline stays one path. Spark Connect's results are structured and come
//! one per statement: they never go through this text.

use std::collections::HashMap;

pub use crate::run::{
    split_object_path, DeleteRead, FailureClass, MaintenanceFailure, ManifestRewrite, RewriteResult,
};

use super::sql::{Statement, StatementKind, SORT_ORDER_PROPERTY};

/// The alias of the frame's marker statements.
pub const FRAME_COLUMN: &str = "icepack_frame";

/// What the statements of a successful run (or of a run whose rewrite committed) told.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    pub result: RewriteResult,
    /// Paths (`s3://bucket/key`) of the data files the run's replace snapshots added.
    pub output_files: Vec<String>,
    /// The partition spec, from `DESCRIBE TABLE`.
    pub spec: Option<Vec<crate::partitions::PartitionField>>,
    /// The table's small data files after the run: (path, size). `None` when not reported.
    pub truth: Option<Vec<(String, u64)>>,
    /// Data files committed since the run began.
    pub committed: Vec<String>,
    /// The table's sort order, from its `sort-order` property (`None`: not read).
    pub table_order: Option<crate::strategy::TableOrder>,
    /// Manifests in the table's current snapshot after the run (`None`: not read).
    pub manifest_count: Option<u64>,
    /// `rewrite_manifests`' result, for a run that called it.
    pub manifests: Option<ManifestRewrite>,
    /// `remove_orphan_files`' result: the files it removed (or, dry, would remove).
    pub orphan_files: Option<u64>,
    /// The table's delete files after the run (`None`: not read).
    pub deletes: Option<DeleteRead>,
    /// `rewrite_position_delete_files`' result: delete files rewritten and added.
    pub delete_rewrite: Option<(u64, u64)>,
    /// The statistics files `compute_table_stats` and `compute_partition_stats` wrote (`None`:
    /// neither was called).
    pub statistics_files: Option<u64>,
    /// A statement after the rewrite's commit that failed (snapshot expiry, a read, the
    /// deadline): the rewrite stands, this is reported beside it.
    pub maintenance_failed: Option<MaintenanceFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the run returned no rewrite_data_files result")]
    NoResult,
    #[error("rewrite_data_files result has no row")]
    NoRow,
    #[error("rewrite_data_files result column {column} is not a number: `{value}`")]
    NotANumber { column: String, value: String },
}

/// One statement's result: its column names and rows, every value as text (`NULL` for null).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultSet {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl ResultSet {
    /// One statement's output as spark-sql prints it (header on): a header line, then a line a
    /// row, cells separated by tabs.
    pub fn from_text(text: &str) -> ResultSet {
        let mut set = SectionBuilder::default();
        for line in text.lines() {
            set.push(line);
        }
        set.finish()
    }
}

/// Builds one statement's result from its lines: the first is the header.
#[derive(Debug, Default)]
struct SectionBuilder {
    columns: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
}

impl SectionBuilder {
    fn push(&mut self, line: &str) {
        let cells = line.split('\t').map(str::to_string);
        match &self.columns {
            None => self.columns = Some(cells.map(|cell| cell.trim().to_string()).collect()),
            Some(_) => self.rows.push(cells.collect()),
        }
    }

    fn finish(self) -> ResultSet {
        ResultSet {
            columns: self.columns.unwrap_or_default(),
            rows: self.rows,
        }
    }
}

/// What a run's statements returned, each with what the statement is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatementResults {
    /// The statements that ran to their end, in order.
    pub results: Vec<(StatementKind, ResultSet)>,
    /// The statement that had begun and did not end (it failed, or the run was cut off in it).
    pub unfinished: Option<StatementKind>,
}

/// The statements spark-sql is given for `statements`: each after its marker, and the end marker.
pub fn framed_statements(nonce: &str, statements: &[Statement]) -> Vec<String> {
    let marker = |label: &str| format!("SELECT '{nonce}:{label}' AS {FRAME_COLUMN}");
    let mut framed = Vec::with_capacity(statements.len() * 2 + 1);
    for (index, statement) in statements.iter().enumerate() {
        framed.push(marker(&index.to_string()));
        framed.push(statement.sql.clone());
    }
    framed.push(marker("end"));
    framed
}

/// A new per-run nonce: 128 bits from the operating system's generator, as hex.
pub fn new_nonce() -> String {
    crate::run::random_hex(16)
}

/// Reads spark-sql's stdout as it streams, cut by the run's frame ([`framed_statements`]) into
/// one result per statement. Memory is the size of the results, whatever the output's length;
/// what is printed outside the frame is not kept.
#[derive(Debug)]
pub struct FramedStdout {
    nonce: String,
    kinds: Vec<StatementKind>,
    /// The index of the marker that comes next.
    next: usize,
    /// The statement whose output is being read, and that output so far.
    current: Option<(StatementKind, SectionBuilder)>,
    /// The last line read, held back: before a marker it is the marker's own header.
    held: Option<String>,
    results: Vec<(StatementKind, ResultSet)>,
    ended: bool,
    partial_line: Vec<u8>,
}

impl FramedStdout {
    pub fn new(nonce: &str, statements: &[Statement]) -> FramedStdout {
        FramedStdout {
            nonce: nonce.to_string(),
            kinds: statements.iter().map(|statement| statement.kind).collect(),
            next: 0,
            current: None,
            held: None,
            results: Vec::new(),
            ended: false,
            partial_line: Vec::new(),
        }
    }

    /// Takes the next bytes of the stream (lines may span calls).
    pub fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = bytes.iter().position(|byte| *byte == b'\n') {
            let (line, rest) = bytes.split_at(newline);
            bytes = &rest[1..];
            if self.partial_line.is_empty() {
                self.push_line(&String::from_utf8_lossy(line));
            } else {
                let mut whole = std::mem::take(&mut self.partial_line);
                whole.extend_from_slice(line);
                self.push_line(&String::from_utf8_lossy(&whole));
            }
        }
        self.partial_line.extend_from_slice(bytes);
    }

    /// Whether `line` is the marker that comes next: `<nonce>:<next>`, or `<nonce>:end` after
    /// the last statement.
    fn is_next_marker(&self, line: &str) -> bool {
        let Some(label) = line
            .strip_prefix(self.nonce.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
        else {
            return false;
        };
        !self.ended
            && !self.nonce.is_empty()
            && if self.next == self.kinds.len() {
                label == "end"
            } else {
                label == self.next.to_string()
            }
    }

    fn push_line(&mut self, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.is_next_marker(line) {
            let held = self.held.take();
            if let Some((kind, mut section)) = self.current.take() {
                // The line before a marker is the marker statement's header.
                if let Some(held) = held.filter(|held| held.trim() != FRAME_COLUMN) {
                    section.push(&held);
                }
                self.results.push((kind, section.finish()));
            }
            match self.kinds.get(self.next) {
                Some(kind) => self.current = Some((*kind, SectionBuilder::default())),
                None => self.ended = true,
            }
            self.next += 1;
            return;
        }
        if let Some((_, section)) = self.current.as_mut() {
            if let Some(held) = self.held.take() {
                section.push(&held);
            }
            self.held = Some(line.to_string());
        }
    }

    /// The results of the statements that ran to their end, and the one cut off, if any.
    pub fn finish(mut self) -> StatementResults {
        if !self.partial_line.is_empty() {
            let last = std::mem::take(&mut self.partial_line);
            self.push_line(&String::from_utf8_lossy(&last));
        }
        let unfinished = match (&self.current, self.ended) {
            (_, true) => None,
            (Some((kind, _)), false) => Some(*kind),
            // Not even the first marker: the run ended before its first statement.
            (None, false) => self.kinds.first().copied(),
        };
        StatementResults {
            results: self.results,
            unfinished,
        }
    }
}

/// The results of the whole framed stdout of a run of `statements` (see [`FramedStdout`]).
pub fn framed_results(nonce: &str, statements: &[Statement], stdout: &str) -> StatementResults {
    let mut reader = FramedStdout::new(nonce, statements);
    reader.push(stdout.as_bytes());
    reader.finish()
}

/// The results of the statements of one kind, in order. A statement that printed nothing at all
/// (not even a header, which spark-sql prints for every query) told nothing.
fn sets_of(
    results: &[(StatementKind, ResultSet)],
    kind: StatementKind,
) -> impl Iterator<Item = &ResultSet> {
    results
        .iter()
        .filter(move |(of, set)| *of == kind && !(set.columns.is_empty() && set.rows.is_empty()))
        .map(|(_, set)| set)
}

fn first_of(results: &[(StatementKind, ResultSet)], kind: StatementKind) -> Option<&ResultSet> {
    sets_of(results, kind).next()
}

/// The JSON objects of a result's rows (icepack's own reads select one `to_json` a row); a row
/// that is not one is not read.
fn json_rows<'a, T: serde::de::DeserializeOwned>(
    set: &'a ResultSet,
) -> impl Iterator<Item = T> + 'a {
    set.rows
        .iter()
        .filter_map(|row| serde_json::from_str(row.first()?.trim()).ok())
}

/// A data file's path, and the snapshot that added or removed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct FileRow {
    #[serde(default)]
    pub snapshot_id: Option<i64>,
    pub path: String,
    #[serde(default)]
    pub size: Option<u64>,
}

/// A `replace` snapshot and its summary's counts (absent when the summary has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct ReplaceSnapshot {
    pub snapshot_id: i64,
    #[serde(default)]
    pub rewritten_data_files: Option<u64>,
    #[serde(default)]
    pub added_data_files: Option<u64>,
    #[serde(default)]
    pub rewritten_bytes: Option<u64>,
}

/// The `replace` snapshots a recovery read, and the data files they removed.
pub fn replace_snapshots(
    results: &[(StatementKind, ResultSet)],
) -> (Vec<ReplaceSnapshot>, Vec<FileRow>) {
    let snapshots = sets_of(results, StatementKind::ReplaceSnapshots)
        .flat_map(json_rows)
        .collect();
    let removed = sets_of(results, StatementKind::RemovedFiles)
        .flat_map(json_rows)
        .collect();
    (snapshots, removed)
}

/// The run's own `replace` snapshots among those a recovery read: those that removed one of
/// the run's claimed files (bucket, key), whatever their commit time. A claimed file another
/// writer's rewrite removed is compacted all the same; no claimed file, no snapshot of the run.
pub fn own_replace_snapshots(
    snapshots: &[ReplaceSnapshot],
    removed: &[FileRow],
    claimed: &std::collections::HashSet<(String, String)>,
) -> Vec<i64> {
    let own: std::collections::BTreeSet<i64> = removed
        .iter()
        .filter(|row| {
            split_object_path(&row.path).is_some_and(|(bucket, key)| {
                claimed.contains(&(bucket.to_string(), key.to_string()))
            })
        })
        .filter_map(|row| row.snapshot_id)
        .collect();
    snapshots
        .iter()
        .map(|snapshot| snapshot.snapshot_id)
        .filter(|id| own.contains(id))
        .collect()
}

/// A recovery's results with only the run's own `replace` snapshots (and their outputs) kept:
/// what a run that committed would have reported.
pub fn keep_own_snapshots(
    results: Vec<(StatementKind, ResultSet)>,
    own: &[i64],
) -> Vec<(StatementKind, ResultSet)> {
    let owned = |row: &Vec<String>| {
        row.first()
            .and_then(|cell| serde_json::from_str::<serde_json::Value>(cell.trim()).ok())
            .and_then(|value| value.get("snapshot_id")?.as_i64())
            .is_some_and(|id| own.contains(&id))
    };
    results
        .into_iter()
        .map(|(kind, mut set)| {
            if matches!(
                kind,
                StatementKind::ReplaceSnapshots
                    | StatementKind::RemovedFiles
                    | StatementKind::Outputs
            ) {
                set.rows.retain(owned);
            }
            (kind, set)
        })
        .collect()
}

/// A run's report from its statements' results, each read by what its statement is.
pub fn report_from_results(
    results: &[(StatementKind, ResultSet)],
) -> Result<RunReport, ParseError> {
    let truth = first_of(results, StatementKind::Truth).map(|set| {
        json_rows::<FileRow>(set)
            .filter_map(|row| Some((row.path, row.size?)))
            .filter(|(path, _)| path.contains("://"))
            .collect::<Vec<_>>()
    });
    let committed: Vec<String> = sets_of(results, StatementKind::Committed)
        .flat_map(json_rows::<FileRow>)
        .map(|row| row.path)
        .filter(|path| path.contains("://"))
        .collect();
    let result = match rewrite_from_results(results) {
        Ok(result) => result,
        // A reconcile or maintenance rewrites no data: its truth is its result.
        Err(ParseError::NoResult) if truth.is_some() => RewriteResult::default(),
        Err(error) => return Err(error),
    };
    let number = |set: &ResultSet, index: usize| -> Option<u64> {
        set.rows.first()?.get(index)?.trim().parse().ok()
    };
    let named = |set: &ResultSet, column: &str| -> Option<u64> {
        let index = set.columns.iter().position(|name| name == column)?;
        number(set, index)
    };
    Ok(RunReport {
        result,
        output_files: sets_of(results, StatementKind::Outputs)
            .flat_map(json_rows::<FileRow>)
            .map(|row| row.path)
            .filter(|path| path.contains("://"))
            .collect(),
        spec: first_of(results, StatementKind::PartitionSpec).map(partitioning),
        truth,
        committed,
        table_order: first_of(results, StatementKind::SortOrder).map(table_order),
        manifest_count: first_of(results, StatementKind::Manifests).and_then(|set| number(set, 0)),
        manifests: first_of(results, StatementKind::ManifestRewrite).and_then(|set| {
            Some(ManifestRewrite {
                rewritten_manifests_count: named(set, "rewritten_manifests_count")?,
                added_manifests_count: named(set, "added_manifests_count").unwrap_or(0),
            })
        }),
        orphan_files: first_of(results, StatementKind::OrphanRemoval).map(|set| {
            // Local paths read `file:/...`: every non-empty row is a file.
            set.rows
                .iter()
                .filter(|row| row.first().is_some_and(|cell| !cell.trim().is_empty()))
                .count() as u64
        }),
        deletes: first_of(results, StatementKind::Deletes).and_then(|set| {
            Some(DeleteRead {
                position_files: number(set, 0)?,
                equality_files: number(set, 1)?,
                deleted_rows: number(set, 2)?,
                data_rows: number(set, 3)?,
            })
        }),
        delete_rewrite: first_of(results, StatementKind::PositionDeleteRewrite).map(|set| {
            (
                named(set, "rewritten_delete_files_count").unwrap_or(0),
                named(set, "added_delete_files_count").unwrap_or(0),
            )
        }),
        statistics_files: statistics_files(results),
        maintenance_failed: None,
    })
}

/// The statistics files the statistics procedures wrote: their one row holds the file's path,
/// `NULL` when there was nothing to compute (a table without a snapshot). `None` when neither
/// procedure was called.
fn statistics_files(results: &[(StatementKind, ResultSet)]) -> Option<u64> {
    let mut called = false;
    let mut written = 0;
    for kind in [
        StatementKind::TableStatistics,
        StatementKind::PartitionStatistics,
    ] {
        for set in sets_of(results, kind) {
            called = true;
            written += set
                .rows
                .iter()
                .filter(|row| {
                    row.first().is_some_and(|cell| {
                        let cell = cell.trim();
                        !cell.is_empty() && cell != "NULL" && cell.contains('/')
                    })
                })
                .count() as u64;
        }
    }
    called.then_some(written)
}

/// The partition spec of a `DESCRIBE TABLE` result. Its partitioning section ends the output: a
/// spec with a transform as `# Partitioning` and only `Part N` rows after it; a spec of identity
/// fields only as `# Partition Information`, a `# col_name` header and one row a field, each a
/// column of the table (Spark prints it so). One that a column's comment prints, with more rows
/// after it or naming no column, is a comment.
fn partitioning(set: &ResultSet) -> Vec<crate::partitions::PartitionField> {
    let first = |row: &Vec<String>| row.first().map(|cell| cell.trim().to_string());
    let start = set.rows.iter().rposition(|row| {
        matches!(
            first(row).as_deref(),
            Some("# Partitioning") | Some("# Partition Information")
        )
    });
    let Some(start) = start else {
        return Vec::new();
    };
    let after = &set.rows[start + 1..];
    let well_formed = if first(&set.rows[start]).as_deref() == Some("# Partitioning") {
        after
            .iter()
            .all(|row| first(row).is_some_and(|cell| cell.starts_with("Part ")))
    } else {
        let columns: Vec<String> = set
            .rows
            .iter()
            .map_while(|row| first(row).filter(|cell| !cell.is_empty() && !cell.starts_with('#')))
            .collect();
        after.len() > 1
            && first(&after[0]).as_deref() == Some("# col_name")
            && after[1..]
                .iter()
                .all(|row| first(row).is_some_and(|cell| columns.contains(&cell)))
    };
    if !well_formed {
        return Vec::new();
    }
    // The columns' types (the rows before the first blank or `#` one) type the fields' values
    // in a run's partition filter; a field without one is left out of it (wider, never narrower).
    let types: std::collections::HashMap<String, String> = set
        .rows
        .iter()
        .map_while(|row| {
            let name = first(row).filter(|cell| !cell.is_empty() && !cell.starts_with('#'))?;
            Some((
                name,
                row.get(1).map(|cell| cell.trim().to_ascii_lowercase()),
            ))
        })
        .filter_map(|(name, data_type)| Some((name, data_type.filter(|t| !t.is_empty())?)))
        .collect();
    crate::partitions::describe_from_rows(&set.rows[start..])
        .into_iter()
        .map(|field| crate::partitions::PartitionField {
            source_type: field
                .source_type
                .clone()
                .or_else(|| types.get(&field.source).cloned()),
            ..field
        })
        .collect()
}

/// The sort order in the one property `SHOW TBLPROPERTIES t ('sort-order')` returns: its value
/// is everything after the key (spark-sql prints a value holding a newline on several lines).
fn table_order(set: &ResultSet) -> crate::strategy::TableOrder {
    let mut lines = set.rows.iter().map(|row| row.join("\t"));
    let value = lines
        .next()
        .and_then(|first| {
            first
                .strip_prefix(SORT_ORDER_PROPERTY)
                .and_then(|rest| rest.strip_prefix('\t'))
                .map(str::to_string)
        })
        .map(|first| {
            std::iter::once(first)
                .chain(lines)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let value = value.trim();
    // Spark answers a missing property with a message in the value's place.
    let absent = value.is_empty()
        || (value.starts_with("Table ")
            && value.ends_with(&format!("does not have property: {SORT_ORDER_PROPERTY}")));
    if absent {
        crate::strategy::TableOrder::Unsorted
    } else {
        crate::strategy::TableOrder::Sorted(value.to_string())
    }
}

/// The value of `column` in the first row of the first result set that has that column.
pub fn first_value<'a>(sets: &'a [ResultSet], column: &str) -> Option<&'a str> {
    sets.iter().find_map(|set| {
        let index = set.columns.iter().position(|name| name == column)?;
        set.rows.first()?.get(index).map(String::as_str)
    })
}

/// The rewrite's counts: the sum over every `rewrite_data_files` result (a run whose quiet
/// partitions are rewritten apart from the others has two), or, for a run recovered from the
/// table's metadata, over its own `replace` snapshots' summaries.
fn rewrite_from_results(
    results: &[(StatementKind, ResultSet)],
) -> Result<RewriteResult, ParseError> {
    let mut total = RewriteResult::default();
    let mut found = false;
    for set in sets_of(results, StatementKind::Rewrite) {
        let one = rewrite_result(set)?;
        found = true;
        total.rewritten_data_files_count += one.rewritten_data_files_count;
        total.added_data_files_count += one.added_data_files_count;
        total.rewritten_bytes_count += one.rewritten_bytes_count;
        total.failed_data_files_count += one.failed_data_files_count;
        total.removed_delete_files_count += one.removed_delete_files_count;
    }
    for snapshot in
        sets_of(results, StatementKind::ReplaceSnapshots).flat_map(json_rows::<ReplaceSnapshot>)
    {
        found = true;
        total.rewritten_data_files_count += snapshot.rewritten_data_files.unwrap_or(0);
        total.added_data_files_count += snapshot.added_data_files.unwrap_or(0);
        total.rewritten_bytes_count += snapshot.rewritten_bytes.unwrap_or(0);
    }
    if found {
        Ok(total)
    } else {
        Err(ParseError::NoResult)
    }
}

/// The column that opens `rewrite_data_files`' result, wherever a release prints it.
const REWRITE_COUNT_COLUMN: &str = "rewritten_data_files_count";

/// One `rewrite_data_files` result row, read by column name. The header is the line of the
/// procedure's own result that names its count (a release printed a line before it).
fn rewrite_result(set: &ResultSet) -> Result<RewriteResult, ParseError> {
    let lines: Vec<&Vec<String>> = std::iter::once(&set.columns).chain(&set.rows).collect();
    let header_index = lines
        .iter()
        .position(|line| line.iter().any(|cell| cell.trim() == REWRITE_COUNT_COLUMN))
        .unwrap_or(0);
    let header = lines[header_index];
    let row = lines.get(header_index + 1).ok_or(ParseError::NoRow)?;
    let values: HashMap<&str, &str> = header
        .iter()
        .map(|name| name.trim())
        .zip(row.iter().map(String::as_str))
        .collect();
    let number = |column: &str| -> Result<u64, ParseError> {
        match values.get(column) {
            None => Ok(0),
            Some(value) => value.trim().parse().map_err(|_| ParseError::NotANumber {
                column: column.to_string(),
                value: value.to_string(),
            }),
        }
    };
    Ok(RewriteResult {
        rewritten_data_files_count: number("rewritten_data_files_count")?,
        added_data_files_count: number("added_data_files_count")?,
        rewritten_bytes_count: number("rewritten_bytes_count")?,
        failed_data_files_count: number("failed_data_files_count")?,
        removed_delete_files_count: number("removed_delete_files_count")?,
    })
}

/// Classifies a finished engine run that did not succeed. `oom_killed` alone is unreliable: only
/// with exit code 137 does it mean the kernel killed the container for memory.
pub fn classify_failure(
    exit_code: i64,
    oom_killed: bool,
    timed_out: bool,
    stderr: &str,
) -> FailureClass {
    if timed_out {
        return FailureClass::Timeout;
    }
    if (exit_code == 137 && oom_killed) || stderr.contains("java.lang.OutOfMemoryError") {
        return FailureClass::OutOfMemory;
    }
    if stderr.contains("CommitStateUnknownException") {
        return FailureClass::CommitStateUnknown;
    }
    if stderr.contains("ValidationException")
        || stderr.contains("CommitFailedException")
        || stderr.contains("found new delete for replaced data file")
    {
        return FailureClass::CommitConflict;
    }
    FailureClass::Other
}

/// A failure as a Spark Connect server reports it: the error class (condition), the SQLSTATE,
/// and the JVM exception classes (most specific first), from the gRPC status' `ErrorInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerError {
    /// `OPERATION_CANCELED`, `TABLE_OR_VIEW_NOT_FOUND` ...; the exception's class when the error
    /// has no condition (Iceberg's exceptions).
    pub error_class: String,
    pub sql_state: Option<String>,
    /// `org.apache.iceberg.exceptions.ValidationException`, its superclasses ...
    pub exception_classes: Vec<String>,
    pub message: String,
    /// Whether the server could not be reached or the connection broke (gRPC `UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED`, `UNKNOWN` transport errors), rather than a statement failing.
    pub transport: bool,
}

impl ServerError {
    /// One line for excerpts: `[CLASS] (SQLSTATE) message`, at most `max_chars`.
    pub fn describe(&self, max_chars: usize) -> String {
        let mut text = String::new();
        if !self.error_class.is_empty() && !self.message.contains(&self.error_class) {
            text.push_str(&format!("[{}] ", self.error_class));
        }
        if let Some(state) = &self.sql_state {
            text.push_str(&format!("(SQLSTATE {state}) "));
        }
        text.push_str(self.message.lines().next().unwrap_or(""));
        if text.chars().count() > max_chars {
            text = text
                .chars()
                .take(max_chars.saturating_sub(1))
                .collect::<String>()
                + "…";
        }
        text
    }

    fn is_a(&self, class_name: &str) -> bool {
        let matches = |name: &str| name == class_name || name.ends_with(&format!(".{class_name}"));
        matches(&self.error_class) || self.exception_classes.iter().any(|name| matches(name))
    }
}

/// Classifies a server-reported failure from its structure: exception classes, error class and
/// SQLSTATE (class `53`: insufficient resources), never from log text.
pub fn classify_server_error(error: &ServerError) -> FailureClass {
    if error.transport {
        return FailureClass::EngineUnavailable;
    }
    if error.error_class == "OPERATION_CANCELED" || error.sql_state.as_deref() == Some("HY008") {
        return FailureClass::Timeout;
    }
    if error.is_a("OutOfMemoryError")
        || error.is_a("SparkOutOfMemoryError")
        || error.error_class.starts_with("UNABLE_TO_ACQUIRE_MEMORY")
        || error
            .sql_state
            .as_deref()
            .is_some_and(|state| state.starts_with("53"))
    {
        return FailureClass::OutOfMemory;
    }
    if error.is_a("CommitStateUnknownException") {
        return FailureClass::CommitStateUnknown;
    }
    if error.is_a("ValidationException") || error.is_a("CommitFailedException") {
        return FailureClass::CommitConflict;
    }
    FailureClass::Other
}

/// The most telling lines of a failed run's stderr (error and exception lines, else the tail),
/// at most `max_chars`, with every secret replaced by `***`.
pub fn failure_excerpt(stderr: &str, secrets: &[String], max_chars: usize) -> String {
    let telling: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            (line.contains("Exception") || line.contains("Error") || line.starts_with("ERROR"))
                && !line.starts_with("at ")
        })
        .collect();
    let chosen: Vec<&str> = if telling.is_empty() {
        stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    } else {
        let mut unique: Vec<&str> = Vec::new();
        for line in telling.into_iter().rev() {
            if !unique.contains(&line) {
                unique.push(line);
            }
            if unique.len() == 4 {
                break;
            }
        }
        unique.into_iter().rev().collect()
    };
    let mut excerpt = redact(&chosen.join("\n"), secrets);
    if excerpt.chars().count() > max_chars {
        excerpt = excerpt
            .chars()
            .take(max_chars.saturating_sub(1))
            .collect::<String>()
            + "…";
    }
    excerpt
}

/// The one redaction rule ([`crate::redact::redact`]): known secrets and visible ones hidden.
pub use crate::redact::redact;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::TableOrder;

    const NONCE: &str = "5f1c0ae4b2d94e17a0c3b6d8e9f01234";

    fn statements(kinds: &[StatementKind]) -> Vec<Statement> {
        kinds
            .iter()
            .map(|kind| Statement::new(*kind, format!("-- {}", kind.as_str())))
            .collect()
    }

    /// What spark-sql prints for a framed run whose statements printed `outputs` in turn; the
    /// end marker only when `ended`.
    fn printed(outputs: &[&str], ended: bool) -> String {
        let mut text = String::from("some log line on stdout\n");
        for (index, output) in outputs.iter().enumerate() {
            text.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:{index}\n{output}"));
        }
        if ended {
            text.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:end\n"));
        }
        text
    }

    fn report_of(kinds: &[StatementKind], outputs: &[&str]) -> Result<RunReport, ParseError> {
        let read = framed_results(NONCE, &statements(kinds), &printed(outputs, true));
        assert_eq!(read.unfinished, None);
        report_from_results(&read.results)
    }

    const REWRITE: &str = "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\tfailed_data_files_count\tremoved_delete_files_count\n40\t2\t36508\t0\t0\n";

    fn json_file(path: &str, size: Option<u64>) -> String {
        match size {
            Some(size) => serde_json::json!({"path": path, "size": size}).to_string(),
            None => serde_json::json!({"snapshot_id": 7, "path": path}).to_string(),
        }
    }

    #[test]
    fn each_statement_is_read_for_what_it_is() {
        use StatementKind::*;
        let outputs = format!(
            "icepack_output_file\n{}\n{}\n",
            json_file("s3://lake/w/t/data/part=a/00000-1.parquet", None),
            json_file("s3://lake/w/t/data/part=b/00000-2.parquet", None)
        );
        let truth = format!(
            "icepack_truth_file\n{}\n{}\n",
            json_file("s3://lake/w/t/data/part=a/x.parquet", Some(1200)),
            json_file("s3://lake/w/t/data/part=b/y.parquet", Some(800))
        );
        let committed = format!(
            "icepack_committed_file\n{}\n",
            serde_json::json!({"path": "s3://lake/w/t/data/part=a/00000-1.parquet"})
        );
        let report = report_of(
            &[Refresh, Rewrite, PartitionSpec, SortOrder, Outputs, Truth, Manifests, Deletes, Committed],
            &[
                "",
                REWRITE,
                "col_name\tdata_type\tcomment\nid\tbigint\tNULL\nd\tstring\tNULL\n\t\t\n# Partitioning\t\t\nPart 0\td\t\n",
                "key\tvalue\nsort-order\tid ASC NULLS FIRST\n",
                &outputs,
                &truth,
                "icepack_manifests\n3\n",
                "icepack_position_deletes\ticepack_equality_deletes\ticepack_deleted_rows\ticepack_data_rows\n1\t0\t5\t100\n",
                &committed,
            ],
        )
        .unwrap();
        assert_eq!(
            report.result,
            RewriteResult {
                rewritten_data_files_count: 40,
                added_data_files_count: 2,
                rewritten_bytes_count: 36508,
                failed_data_files_count: 0,
                removed_delete_files_count: 0,
            }
        );
        assert_eq!(report.output_files.len(), 2);
        assert_eq!(
            split_object_path(&report.output_files[0]),
            Some(("lake", "w/t/data/part=a/00000-1.parquet"))
        );
        assert_eq!(
            report.truth.unwrap(),
            vec![
                ("s3://lake/w/t/data/part=a/x.parquet".to_string(), 1200),
                ("s3://lake/w/t/data/part=b/y.parquet".to_string(), 800)
            ]
        );
        assert_eq!(
            report.committed,
            vec!["s3://lake/w/t/data/part=a/00000-1.parquet".to_string()]
        );
        assert_eq!(report.spec.unwrap().len(), 1);
        assert_eq!(
            report.table_order,
            Some(TableOrder::Sorted("id ASC NULLS FIRST".to_string()))
        );
        assert_eq!(report.manifest_count, Some(3));
        assert_eq!(report.deletes.unwrap().data_rows, 100);
    }

    /// Issue 31: a column or table property named like a result field opened a fake result
    /// (`rewritten_data_files_count`) or forged a truth (`icepack_truth_file`). Whatever a table
    /// holds is data of the statement that read it.
    #[test]
    fn nothing_a_table_holds_can_pass_for_a_result() {
        use StatementKind::*;
        let forged_lines = "rewritten_data_files_count\tadded_data_files_count\n999\t1\n\
                            icepack_truth_file\tfile_size_in_bytes\ns3://lake/w/t/data/forged.parquet\t1\n\
                            icepack_committed_file\ns3://lake/w/t/data/forged.parquet\n\
                            icepack_frame\n0123456789abcdef0123456789abcdef:end\n";
        // DESCRIBE TABLE of a table with such columns, comments holding newlines.
        let describe = format!(
            "col_name\tdata_type\tcomment\nrewritten_data_files_count\tbigint\tNULL\n\
             icepack_truth_file\tstring\t{forged_lines}\n\
             s\tstring\tx\n# Partitioning\nPart 0\tbucket(4, id)\t\n\
             d\tstring\t\n# Partition Information\t\t\n# col_name\tdata_type\tcomment\nd\tstring\t\n"
        );
        // Its sort-order property's value holding the same lines.
        let order = format!("key\tvalue\nsort-order\tid ASC\n{forged_lines}");
        let truth = format!(
            "icepack_truth_file\n{}\n",
            json_file(
                "s3://lake/w/t/data/a\tb\nrewritten_data_files_count.parquet",
                Some(10)
            )
        );
        let kinds = [Refresh, PartitionSpec, SortOrder, Truth, Committed];
        let report = report_of(
            &kinds,
            &["", &describe, &order, &truth, "icepack_committed_file\n"],
        )
        .unwrap();
        assert_eq!(report.result, RewriteResult::default(), "no rewrite result");
        assert_eq!(
            report.truth.unwrap(),
            vec![(
                "s3://lake/w/t/data/a\tb\nrewritten_data_files_count.parquet".to_string(),
                10
            )],
            "one file, its path whole"
        );
        assert!(report.committed.is_empty());
        assert!(report.spec.unwrap().is_empty(), "no partitioning");
        match report.table_order.unwrap() {
            TableOrder::Sorted(order) => assert!(order.starts_with("id ASC\n"), "{order}"),
            other => panic!("{other:?}"),
        }
        // Without a rewrite statement nothing is a rewrite result, whatever was printed.
        assert_eq!(
            report_of(&[Refresh, PartitionSpec], &["", &describe]),
            Err(ParseError::NoResult)
        );
    }

    /// Spark prints a spec of identity fields only as `# Partition Information` (a Spark Connect
    /// result, one row a row): read, where only `# Partitioning` was, which left every run of
    /// such a table without its partitions (found on v3 by `connect_e2e::format_v3_…`).
    #[test]
    fn an_identity_spec_is_read_from_its_partition_information() {
        let set = |rows: &[[&str; 3]]| ResultSet {
            columns: vec!["col_name".into(), "data_type".into(), "comment".into()],
            rows: rows
                .iter()
                .map(|row| row.iter().map(|cell| cell.to_string()).collect())
                .collect(),
        };
        let identity = set(&[
            ["id", "bigint", ""],
            ["order_date", "string", ""],
            ["# Partition Information", "", ""],
            ["# col_name", "data_type", "comment"],
            ["order_date", "string", ""],
        ]);
        let spec = partitioning(&identity);
        assert_eq!(spec.len(), 1, "{spec:?}");
        assert_eq!(spec[0].source, "order_date");
        assert_eq!(spec[0].transform, crate::partitions::Transform::Identity);
        assert_eq!(
            spec[0].source_type.as_deref(),
            Some("string"),
            "typed for the run's filter"
        );
        // Not a column of the table, or rows after it: a comment's text.
        let forged = set(&[
            ["id", "bigint", ""],
            ["# Partition Information", "", ""],
            ["# col_name", "data_type", "comment"],
            ["region", "string", ""],
        ]);
        assert!(partitioning(&forged).is_empty());
        let followed = set(&[
            ["id", "bigint", ""],
            ["# Partition Information", "", ""],
            ["# col_name", "data_type", "comment"],
            ["id", "bigint", ""],
            ["more", "", ""],
        ]);
        assert!(partitioning(&followed).is_empty());
    }

    #[test]
    fn a_statement_whose_end_never_came_is_not_read() {
        use StatementKind::*;
        let kinds = statements(&[Refresh, Rewrite, Truth, ExpireSnapshots]);
        let truth = format!(
            "icepack_truth_file\n{}\n",
            json_file("s3://lake/t/a.parquet", Some(5))
        );
        // Cut off inside the truth read: the rewrite ended, the truth did not.
        let cut = printed(&["", REWRITE, &truth], false);
        let read = framed_results(NONCE, &kinds, &cut);
        assert_eq!(read.unfinished, Some(Truth));
        assert_eq!(
            read.results
                .iter()
                .map(|(kind, _)| *kind)
                .collect::<Vec<_>>(),
            [Refresh, Rewrite]
        );
        // Failed in the expiry: everything before it ended.
        let failed = printed(&["", REWRITE, &truth, ""], false);
        let read = framed_results(NONCE, &kinds, &failed);
        assert_eq!(read.unfinished, Some(ExpireSnapshots));
        let report = report_from_results(&read.results).unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 40);
        assert_eq!(report.truth.unwrap().len(), 1);
        // Nothing framed at all (spark-sql failed to start): the first statement did not end.
        let read = framed_results(NONCE, &kinds, "Error: no such option\n");
        assert_eq!(read.unfinished, Some(Refresh));
        assert!(read.results.is_empty());
        // Another run's nonce is data.
        let other = printed(&["", REWRITE, &truth, ""], true)
            .replace(NONCE, "0123456789abcdef0123456789abcdef");
        assert!(framed_results(NONCE, &kinds, &other).results.is_empty());
    }

    #[test]
    fn the_sort_order_is_its_property_whole_and_absent_is_unsorted() {
        let order = |text: &str| table_order(&ResultSet::from_text(text));
        assert_eq!(
            order("key\tvalue\nsort-order\tid ASC NULLS FIRST, ts DESC NULLS LAST\n"),
            TableOrder::Sorted("id ASC NULLS FIRST, ts DESC NULLS LAST".to_string())
        );
        assert_eq!(
            order(
                "key\tvalue\nsort-order\tTable lakehouse.a.b does not have property: sort-order\n"
            ),
            TableOrder::Unsorted
        );
        assert_eq!(order("key\tvalue\n"), TableOrder::Unsorted);
        // Spark Connect: one row, the value in one cell.
        let structured = ResultSet {
            columns: vec!["key".to_string(), "value".to_string()],
            rows: vec![vec!["sort-order".to_string(), "`a\tb` ASC".to_string()]],
        };
        assert_eq!(
            table_order(&structured),
            TableOrder::Sorted("`a\tb` ASC".to_string())
        );
    }

    #[test]
    fn two_rewrites_are_summed() {
        use StatementKind::*;
        let report = report_of(
            &[Rewrite, Rewrite, Outputs],
            &[
                "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n3\t1\t300\n",
                "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n2\t1\t900\n",
                "icepack_output_file\n",
            ],
        )
        .unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 5);
        assert_eq!(report.result.added_data_files_count, 2);
        assert_eq!(report.result.rewritten_bytes_count, 1200);
    }

    #[test]
    fn older_and_reordered_columns_parse() {
        let report = report_of(
            &[StatementKind::Rewrite],
            &["Response code\nadded_data_files_count\trewritten_data_files_count\n1\t7\n"],
        )
        .unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 7);
        assert_eq!(report.result.added_data_files_count, 1);
        assert_eq!(report.result.rewritten_bytes_count, 0);
        assert!(report.output_files.is_empty());
    }

    #[test]
    fn a_no_op_is_a_valid_result() {
        let report = report_of(
            &[StatementKind::Rewrite, StatementKind::Outputs],
            &[
                "rewritten_data_files_count\tadded_data_files_count\n0\t0\n",
                "icepack_output_file\n",
            ],
        )
        .unwrap();
        assert_eq!(report.result, RewriteResult::default());
    }

    #[test]
    fn missing_or_broken_results_are_errors() {
        use StatementKind::*;
        assert_eq!(report_of(&[Refresh], &[""]), Err(ParseError::NoResult));
        assert_eq!(
            report_of(&[Rewrite], &["rewritten_data_files_count\n"]),
            Err(ParseError::NoRow)
        );
        assert!(matches!(
            report_of(&[Rewrite], &["rewritten_data_files_count\nNULL\n"]),
            Err(ParseError::NotANumber { .. })
        ));
    }

    #[test]
    fn the_runs_own_replace_snapshots_are_those_that_removed_its_files() {
        let snapshot = |id: i64, rewritten: u64| ReplaceSnapshot {
            snapshot_id: id,
            rewritten_data_files: Some(rewritten),
            added_data_files: Some(1),
            rewritten_bytes: Some(rewritten * 100),
        };
        // 1: the run's (it removed two claimed files, one under s3a://); 2: another writer's
        // rewrite of other files committed at the same time; 3: removed nothing read.
        let snapshots = [snapshot(1, 3), snapshot(2, 9), snapshot(3, 4)];
        let removed = |id: i64, path: &str| FileRow {
            snapshot_id: Some(id),
            path: path.to_string(),
            size: None,
        };
        let rows = [
            removed(1, "s3://lake/t/data/a.parquet"),
            removed(1, "s3a://lake/t/data/b.parquet"),
            removed(1, "s3://lake/t/data/old-output.parquet"),
            removed(2, "s3://lake/t/data/other.parquet"),
        ];
        let claimed: std::collections::HashSet<(String, String)> = [
            ("lake".to_string(), "t/data/a.parquet".to_string()),
            ("lake".to_string(), "t/data/b.parquet".to_string()),
            ("lake".to_string(), "t/data/late.parquet".to_string()),
        ]
        .into();
        assert_eq!(own_replace_snapshots(&snapshots, &rows, &claimed), [1]);
        assert!(own_replace_snapshots(&snapshots, &rows, &Default::default()).is_empty());
        assert!(own_replace_snapshots(&snapshots[1..], &rows, &claimed).is_empty());

        // As a recovery reads them: only the run's own snapshot and outputs are kept, and the
        // counts are its summary's.
        let json = |value: serde_json::Value| vec![value.to_string()];
        let results = vec![
            (
                StatementKind::ReplaceSnapshots,
                ResultSet {
                    columns: vec!["icepack_replace_snapshot".to_string()],
                    rows: vec![
                        json(serde_json::json!({"snapshot_id": 1, "rewritten_data_files": 3, "added_data_files": 1, "rewritten_bytes": 300})),
                        json(serde_json::json!({"snapshot_id": 2, "rewritten_data_files": 9, "added_data_files": 1, "rewritten_bytes": 900})),
                    ],
                },
            ),
            (
                StatementKind::RemovedFiles,
                ResultSet {
                    columns: vec!["icepack_removed_file".to_string()],
                    rows: rows
                        .iter()
                        .map(|row| json(serde_json::json!({"snapshot_id": row.snapshot_id, "path": row.path})))
                        .collect(),
                },
            ),
            (
                StatementKind::Outputs,
                ResultSet {
                    columns: vec!["icepack_output_file".to_string()],
                    rows: vec![
                        json(serde_json::json!({"snapshot_id": 1, "path": "s3://lake/t/data/out-1.parquet"})),
                        json(serde_json::json!({"snapshot_id": 2, "path": "s3://lake/t/data/out-2.parquet"})),
                    ],
                },
            ),
        ];
        let (read_snapshots, read_removed) = replace_snapshots(&results);
        assert_eq!(read_snapshots.len(), 2);
        assert_eq!(read_removed.len(), 4);
        let own = own_replace_snapshots(&read_snapshots, &read_removed, &claimed);
        let report = report_from_results(&keep_own_snapshots(results, &own)).unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 3);
        assert_eq!(report.result.rewritten_bytes_count, 300);
        assert_eq!(report.output_files, ["s3://lake/t/data/out-1.parquet"]);
    }

    #[test]
    fn results_of_any_size_stream_through() {
        use StatementKind::*;
        let kinds = statements(&[Rewrite, Truth, Committed]);
        let mut stdout = printed(
            &["rewritten_data_files_count\tadded_data_files_count\n100000\t10\n"],
            false,
        );
        stdout.push_str(&format!("{FRAME_COLUMN}\n{NONCE}:1\nicepack_truth_file\n"));
        for index in 0..100_000 {
            stdout.push_str(&json_file(
                &format!("s3://lake/w/t/data/part-{index:06}.parquet"),
                Some(1000 + index),
            ));
            stdout.push('\n');
        }
        stdout.push_str(&format!(
            "{FRAME_COLUMN}\n{NONCE}:2\nicepack_committed_file\n{}\n{FRAME_COLUMN}\n{NONCE}:end",
            serde_json::json!({"path": "s3://lake/w/t/data/new.parquet"})
        ));
        // Fed in odd-sized chunks, lines split across them; the last line without its newline.
        let mut reader = FramedStdout::new(NONCE, &kinds);
        for chunk in stdout.as_bytes().chunks(4093) {
            reader.push(chunk);
        }
        let read = reader.finish();
        assert_eq!(read.unfinished, None);
        let report = report_from_results(&read.results).unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 100_000);
        let truth = report.truth.unwrap();
        assert_eq!(truth.len(), 100_000);
        assert_eq!(
            truth[99_999],
            (
                "s3://lake/w/t/data/part-099999.parquet".to_string(),
                100_999
            )
        );
        assert_eq!(
            report.committed,
            vec!["s3://lake/w/t/data/new.parquet".to_string()]
        );
    }

    proptest::proptest! {
        /// No text without the run's nonce is ever a result, whatever it holds.
        #[test]
        fn text_without_the_nonce_is_never_a_result(text in "(?s).{0,600}") {
            use StatementKind::*;
            let kinds = statements(&[Rewrite, Truth, Committed]);
            let read = framed_results(NONCE, &kinds, &text);
            proptest::prop_assert!(read.results.is_empty());
            proptest::prop_assert_eq!(read.unfinished, Some(Rewrite));
        }

        /// Whatever a statement prints (a table's values) stays that statement's: the others are
        /// read as they were printed.
        #[test]
        fn what_a_statement_prints_stays_its_own(text in "[a-z_:0-9{}\"\t\n]{0,400}") {
            use StatementKind::*;
            let kinds = statements(&[Rewrite, PartitionSpec, Committed]);
            let committed = format!(
                "icepack_committed_file\n{}\n",
                serde_json::json!({"path": "s3://lake/t/data/a.parquet"})
            );
            let read = framed_results(
                NONCE,
                &kinds,
                &printed(&[REWRITE, &format!("col_name\tdata_type\tcomment\n{text}\n"), &committed], true),
            );
            proptest::prop_assert_eq!(
                read.results.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
                vec![Rewrite, PartitionSpec, Committed]
            );
            let report = report_from_results(&read.results).unwrap();
            proptest::prop_assert_eq!(report.result.rewritten_data_files_count, 40);
            proptest::prop_assert_eq!(report.committed, vec!["s3://lake/t/data/a.parquet".to_string()]);
        }
    }

    #[test]
    fn the_frame_surrounds_every_statement() {
        let framed = framed_statements(
            NONCE,
            &statements(&[StatementKind::Refresh, StatementKind::Rewrite]),
        );
        assert_eq!(
            framed,
            [
                format!("SELECT '{NONCE}:0' AS icepack_frame"),
                "-- refresh_table".to_string(),
                format!("SELECT '{NONCE}:1' AS icepack_frame"),
                "-- rewrite_data_files".to_string(),
                format!("SELECT '{NONCE}:end' AS icepack_frame"),
            ]
        );
        let nonce = new_nonce();
        assert_eq!(nonce.len(), 32);
        assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(nonce, new_nonce());
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(
            classify_failure(137, true, false, ""),
            FailureClass::OutOfMemory
        );
        assert_eq!(
            classify_failure(137, false, false, "Killed"),
            FailureClass::Other,
            "137 without OOMKilled"
        );
        assert_eq!(
            classify_failure(0, true, false, ""),
            FailureClass::Other,
            "OOMKilled without 137"
        );
        assert_eq!(
            classify_failure(
                1,
                false,
                false,
                "java.lang.OutOfMemoryError: Java heap space"
            ),
            FailureClass::OutOfMemory
        );
        assert_eq!(classify_failure(1, false, true, ""), FailureClass::Timeout);
        assert_eq!(
            classify_failure(1, false, false, "org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new delete for replaced data file"),
            FailureClass::CommitConflict
        );
        assert_eq!(
            classify_failure(
                1,
                false,
                false,
                "org.apache.iceberg.exceptions.CommitStateUnknownException: x"
            ),
            FailureClass::CommitStateUnknown
        );
        assert!(!FailureClass::CommitStateUnknown.is_retryable());
        assert!(!FailureClass::Timeout.is_retryable());
    }

    #[test]
    fn server_errors_are_classified_by_class_and_state() {
        let error = |class: &str, state: Option<&str>, classes: &[&str]| ServerError {
            error_class: class.to_string(),
            sql_state: state.map(str::to_string),
            exception_classes: classes.iter().map(|name| name.to_string()).collect(),
            message: "it failed".to_string(),
            transport: false,
        };
        assert_eq!(
            classify_server_error(&error("OPERATION_CANCELED", Some("HY008"), &[])),
            FailureClass::Timeout
        );
        assert_eq!(
            classify_server_error(&error(
                "org.apache.iceberg.exceptions.ValidationException",
                None,
                &[
                    "org.apache.iceberg.exceptions.ValidationException",
                    "java.lang.RuntimeException"
                ]
            )),
            FailureClass::CommitConflict
        );
        assert_eq!(
            classify_server_error(&error(
                "org.apache.spark.SparkException",
                None,
                &["org.apache.iceberg.exceptions.CommitStateUnknownException"]
            )),
            FailureClass::CommitStateUnknown
        );
        assert_eq!(
            classify_server_error(&error("UNABLE_TO_ACQUIRE_MEMORY", Some("53200"), &[])),
            FailureClass::OutOfMemory
        );
        assert_eq!(
            classify_server_error(&error("TABLE_OR_VIEW_NOT_FOUND", Some("42P01"), &[])),
            FailureClass::Other
        );
        let mut down = error("", None, &[]);
        down.transport = true;
        assert_eq!(
            classify_server_error(&down),
            FailureClass::EngineUnavailable
        );
        let long = ServerError {
            message: "x".repeat(500),
            ..error("TABLE_OR_VIEW_NOT_FOUND", Some("42P01"), &[])
        };
        let line = long.describe(100);
        assert!(
            line.starts_with("[TABLE_OR_VIEW_NOT_FOUND] (SQLSTATE 42P01) x"),
            "{line}"
        );
        assert_eq!(line.chars().count(), 100);
    }

    #[test]
    fn a_value_is_found_by_its_column() {
        let set = |columns: &[&str], row: &[&str]| ResultSet {
            columns: columns.iter().map(|name| name.to_string()).collect(),
            rows: vec![row.iter().map(|cell| cell.to_string()).collect()],
        };
        let sets = [
            set(&["icepack_output_file"], &["s3://b/k"]),
            set(&["icepack_replace_snapshots", "x"], &["2", "3"]),
        ];
        assert_eq!(first_value(&sets, "icepack_replace_snapshots"), Some("2"));
        assert_eq!(first_value(&sets, "x"), Some("3"));
        assert_eq!(first_value(&sets, "missing"), None);
    }

    #[test]
    fn statistics_files_are_counted_from_their_procedures_rows_only() {
        let set = |columns: &[&str], rows: &[&str]| ResultSet {
            columns: columns.iter().map(|name| name.to_string()).collect(),
            rows: rows.iter().map(|cell| vec![cell.to_string()]).collect(),
        };
        let truth = (StatementKind::Truth, set(&["icepack_truth_file"], &[]));
        let written = report_from_results(&[
            (
                StatementKind::TableStatistics,
                set(&["statistics_file"], &["s3://b/t/metadata/1-stats.puffin"]),
            ),
            (
                StatementKind::PartitionStatistics,
                set(&["partition_statistics_file"], &["NULL"]),
            ),
            truth.clone(),
        ])
        .unwrap();
        assert_eq!(written.statistics_files, Some(1));
        // A table's column named like the procedure's output is no statistics file.
        let imitated = report_from_results(&[
            (
                StatementKind::Truth,
                set(&["statistics_file"], &["s3://b/t/x.puffin"]),
            ),
            truth,
        ])
        .unwrap();
        assert_eq!(imitated.statistics_files, None);
    }

    #[test]
    fn excerpts_are_short_telling_and_secret_free() {
        let stderr = "INFO starting\n24/05/01 ERROR SparkSQLDriver: Failed in [CALL ...]\norg.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: a.b (key AKIASECRETKEY123)\n\tat org.apache.iceberg.Foo(Foo.java:1)\n";
        let excerpt = failure_excerpt(stderr, &["AKIASECRETKEY123".to_string()], 500);
        assert!(excerpt.contains("NoSuchTableException"));
        assert!(!excerpt.contains("AKIASECRETKEY123"));
        assert!(excerpt.contains("***"));
        assert!(!excerpt.contains("Foo.java"));
        assert!(failure_excerpt(&"x".repeat(5000), &[], 100).chars().count() <= 100);
    }
}
