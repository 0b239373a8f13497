//! Reading a spark-sql run: the procedure's result row by column name, the run's output files,
//! and, when it failed, a class and a short excerpt with no secrets in it.

use std::collections::HashMap;

pub use crate::run::{split_object_path, DeleteRead, FailureClass, ManifestRewrite, RewriteResult};

use super::sql::{
    COMMITTED_FILE_COLUMN, DELETES_COLUMN, MANIFESTS_COLUMN, OUTPUT_FILE_COLUMN, TRUTH_FILE_COLUMN,
};

/// What stdout of a successful run told.
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
    /// The table's sort order, from `SHOW TBLPROPERTIES` (`None`: not read).
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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("spark-sql printed no rewrite_data_files result")]
    NoResult,
    #[error("rewrite_data_files result has no row")]
    NoRow,
    #[error("rewrite_data_files result column {column} is not a number: `{value}`")]
    NotANumber { column: String, value: String },
}

const RESULT_MARKER: &str = "rewritten_data_files_count";

/// One statement's result: its column names and rows, every value as text (`NULL` for null).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultSet {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl ResultSet {
    fn first_column(&self) -> &str {
        self.columns.first().map(String::as_str).unwrap_or("")
    }
}

/// First columns of the result sets a run's statements print (spark-sql with
/// `spark.sql.cli.print.header=true`): `DESCRIBE TABLE`, the icepack queries, and
/// `expire_snapshots`. The rewrite's header is found by [`RESULT_MARKER`] in any position.
const KNOWN_FIRST_COLUMNS: [&str; 10] = [
    DELETES_COLUMN,
    "rewritten_delete_files_count",
    ORPHAN_FILE_COLUMN,
    "col_name",
    OUTPUT_FILE_COLUMN,
    TRUTH_FILE_COLUMN,
    COMMITTED_FILE_COLUMN,
    MANIFESTS_COLUMN,
    "deleted_data_files_count",
    "rewritten_manifests_count",
];

/// `remove_orphan_files`' one column: a file it removed (or would).
const ORPHAN_FILE_COLUMN: &str = "orphan_file_location";

/// The columns of `SHOW TBLPROPERTIES`: a header only as a whole (a table may have a column
/// named `key`, and `DESCRIBE TABLE` prints three cells a row).
const PROPERTIES_COLUMNS: [&str; 2] = ["key", "value"];

/// The table property Iceberg's Spark tables describe their sort order in (absent: unsorted).
const SORT_ORDER_PROPERTY: &str = "sort-order";

/// Reads spark-sql's stdout as it streams, into result sets: a known header line opens a set and
/// the lines after it are its rows. Memory is the size of the results, whatever the length of
/// the output; lines before the first header are not kept.
#[derive(Debug, Default)]
pub struct StdoutResults {
    sets: Vec<ResultSet>,
    partial_line: Vec<u8>,
}

impl StdoutResults {
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

    fn push_line(&mut self, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let cells: Vec<String> = line.split('\t').map(str::to_string).collect();
        let is_header = cells.iter().any(|cell| cell == RESULT_MARKER)
            || KNOWN_FIRST_COLUMNS.contains(&cells[0].trim())
            || cells.iter().map(|cell| cell.trim()).eq(PROPERTIES_COLUMNS);
        if is_header {
            self.sets.push(ResultSet {
                columns: cells.iter().map(|cell| cell.trim().to_string()).collect(),
                rows: Vec::new(),
            });
        } else if let Some(set) = self.sets.last_mut() {
            set.rows.push(cells);
        }
    }

    /// The result sets, the last line included even without its newline.
    pub fn finish(mut self) -> Vec<ResultSet> {
        if !self.partial_line.is_empty() {
            let last = std::mem::take(&mut self.partial_line);
            self.push_line(&String::from_utf8_lossy(&last));
        }
        self.sets
    }
}

/// Parses spark-sql's whole stdout (see [`StdoutResults`]).
pub fn parse_stdout(stdout: &str) -> Result<RunReport, ParseError> {
    report_from_results(&stdout_results(stdout))
}

/// The result sets of a whole stdout.
pub fn stdout_results(stdout: &str) -> Vec<ResultSet> {
    let mut results = StdoutResults::default();
    results.push(stdout.as_bytes());
    results.finish()
}

/// A run's report from its statements' result sets, each found by its column names.
pub fn report_from_results(sets: &[ResultSet]) -> Result<RunReport, ParseError> {
    let (truth, committed) = truth_from_results(sets);
    let mut report = match rewrite_from_results(sets) {
        // A reconcile rewrites nothing: its truth alone is its result.
        Err(ParseError::NoResult) if truth.is_some() => RunReport::default(),
        other => other?,
    };
    report.spec =
        set_named(sets, "col_name").map(|set| crate::partitions::describe_from_rows(&set.rows));
    report.truth = truth;
    report.committed = committed;
    report.table_order = table_order_from_results(sets);
    report.orphan_files = set_named(sets, ORPHAN_FILE_COLUMN).map(|set| {
        // Local paths read `file:/...`: every non-empty row is a file.
        set.rows
            .iter()
            .filter(|row| row.first().is_some_and(|cell| !cell.trim().is_empty()))
            .count() as u64
    });
    let number_in = |set: &ResultSet, column: &str| -> Option<u64> {
        let index = set.columns.iter().position(|name| name == column)?;
        set.rows.first()?.get(index)?.trim().parse().ok()
    };
    report.deletes = set_named(sets, DELETES_COLUMN).and_then(|set| {
        Some(DeleteRead {
            position_files: number_in(set, DELETES_COLUMN)?,
            equality_files: number_in(set, "icepack_equality_deletes")?,
            deleted_rows: number_in(set, "icepack_deleted_rows")?,
            data_rows: number_in(set, "icepack_data_rows")?,
        })
    });
    report.delete_rewrite = set_named(sets, "rewritten_delete_files_count").map(|set| {
        (
            number_in(set, "rewritten_delete_files_count").unwrap_or(0),
            number_in(set, "added_delete_files_count").unwrap_or(0),
        )
    });
    report.manifest_count =
        first_value(sets, MANIFESTS_COLUMN).and_then(|count| count.trim().parse().ok());
    report.manifests = set_named(sets, "rewritten_manifests_count").and_then(|set| {
        let number = |column: &str| -> Option<u64> {
            let index = set.columns.iter().position(|name| name == column)?;
            set.rows.first()?.get(index)?.trim().parse().ok()
        };
        Some(ManifestRewrite {
            rewritten_manifests_count: number("rewritten_manifests_count")?,
            added_manifests_count: number("added_manifests_count").unwrap_or(0),
        })
    });
    Ok(report)
}

/// The sort order among the table's properties, if they were read.
fn table_order_from_results(sets: &[ResultSet]) -> Option<crate::strategy::TableOrder> {
    let properties = sets.iter().find(|set| {
        set.columns
            .iter()
            .map(String::as_str)
            .eq(PROPERTIES_COLUMNS)
    })?;
    let order = properties
        .rows
        .iter()
        .find(|row| row.first().map(|key| key.trim()) == Some(SORT_ORDER_PROPERTY))
        .and_then(|row| row.get(1))
        .map(|order| order.trim())
        .filter(|order| !order.is_empty());
    Some(match order {
        Some(order) => crate::strategy::TableOrder::Sorted(order.to_string()),
        None => crate::strategy::TableOrder::Unsorted,
    })
}

fn set_named<'a>(sets: &'a [ResultSet], first_column: &str) -> Option<&'a ResultSet> {
    sets.iter().find(|set| set.first_column() == first_column)
}

/// The value of `column` in the first row of the first result set that has that column.
pub fn first_value<'a>(sets: &'a [ResultSet], column: &str) -> Option<&'a str> {
    sets.iter().find_map(|set| {
        let index = set.columns.iter().position(|name| name == column)?;
        set.rows.first()?.get(index).map(String::as_str)
    })
}

/// Paths in the first column of a set's rows (rows that hold no path are not files).
fn paths(set: &ResultSet) -> impl Iterator<Item = String> + '_ {
    set.rows
        .iter()
        .filter_map(|row| row.first())
        .map(|cell| cell.trim())
        .filter(|cell| cell.contains("://"))
        .map(str::to_string)
}

/// The truth and committed-files sections (a reconcile prints only these and the spec).
fn truth_from_results(sets: &[ResultSet]) -> (Option<Vec<(String, u64)>>, Vec<String>) {
    let truth = set_named(sets, TRUTH_FILE_COLUMN).map(|set| {
        set.rows
            .iter()
            .filter_map(|row| {
                let path = row.first()?.trim();
                let size = row.get(1)?.trim().parse().ok()?;
                path.contains("://").then(|| (path.to_string(), size))
            })
            .collect()
    });
    let committed = set_named(sets, COMMITTED_FILE_COLUMN)
        .map(|set| paths(set).collect())
        .unwrap_or_default();
    (truth, committed)
}

/// The rewrite's counts: the sum over every `rewrite_data_files` result (a run whose quiet
/// partitions are rewritten apart from the others has two).
fn rewrite_from_results(sets: &[ResultSet]) -> Result<RunReport, ParseError> {
    let mut rewrites = sets
        .iter()
        .filter(|set| set.columns.iter().any(|column| column == RESULT_MARKER))
        .peekable();
    if rewrites.peek().is_none() {
        return Err(ParseError::NoResult);
    }
    let mut result = RewriteResult::default();
    for set in rewrites {
        let one = rewrite_result(set)?;
        result.rewritten_data_files_count += one.rewritten_data_files_count;
        result.added_data_files_count += one.added_data_files_count;
        result.rewritten_bytes_count += one.rewritten_bytes_count;
        result.failed_data_files_count += one.failed_data_files_count;
        result.removed_delete_files_count += one.removed_delete_files_count;
    }
    let output_files = set_named(sets, OUTPUT_FILE_COLUMN)
        .map(|set| paths(set).collect())
        .unwrap_or_default();
    Ok(RunReport {
        result,
        output_files,
        ..RunReport::default()
    })
}

/// One `rewrite_data_files` result row, read by column name.
fn rewrite_result(set: &ResultSet) -> Result<RewriteResult, ParseError> {
    let row = set.rows.first().ok_or(ParseError::NoRow)?;
    let values: HashMap<&str, &str> = set
        .columns
        .iter()
        .map(String::as_str)
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

    const STDOUT: &str = "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\tfailed_data_files_count\tremoved_delete_files_count\n40\t2\t36508\t0\t0\nicepack_output_file\ns3://lake/w/t/data/part=a/00000-1.parquet\ns3://lake/w/t/data/part=b/00000-2.parquet\n";

    #[test]
    fn the_sort_order_is_read_from_the_table_properties() {
        let describe = "col_name\tdata_type\tcomment\nkey\tstring\tNULL\nid\tbigint\tNULL\n";
        let sorted = format!(
            "{describe}key\tvalue\ncurrent-snapshot-id\t42\nformat\ticeberg/parquet\nsort-order\tid ASC NULLS FIRST, ts DESC NULLS LAST\n\
             icepack_truth_file\tfile_size_in_bytes\n"
        );
        let report = parse_stdout(&sorted).unwrap();
        assert_eq!(
            report.table_order,
            Some(crate::strategy::TableOrder::Sorted(
                "id ASC NULLS FIRST, ts DESC NULLS LAST".to_string()
            ))
        );
        // A column named `key` is a row of DESCRIBE TABLE, not the properties' header.
        let spec = report.spec.unwrap_or_default();
        assert!(spec.is_empty(), "{spec:?}");
        let unsorted =
            format!("{describe}key\tvalue\nformat\ticeberg/parquet\nicepack_truth_file\tfile_size_in_bytes\n");
        assert_eq!(
            parse_stdout(&unsorted).unwrap().table_order,
            Some(crate::strategy::TableOrder::Unsorted)
        );
        let not_read = format!("{describe}icepack_truth_file\tfile_size_in_bytes\n");
        assert_eq!(parse_stdout(&not_read).unwrap().table_order, None);
    }

    #[test]
    fn the_result_row_is_read_by_column_name() {
        let report = parse_stdout(STDOUT).unwrap();
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
    }

    #[test]
    fn truth_and_committed_files_are_read() {
        let stdout = format!("{STDOUT}icepack_truth_file\tfile_size_in_bytes\ns3://lake/w/t/data/part=a/x.parquet\t1200\ns3://lake/w/t/data/part=b/y.parquet\t800\nicepack_committed_file\ns3://lake/w/t/data/part=a/00000-1.parquet\n");
        let report = parse_stdout(&stdout).unwrap();
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
        assert_eq!(
            parse_stdout(STDOUT).unwrap().truth,
            None,
            "no truth section: none reported"
        );
        assert_eq!(
            truth_from_results(&stdout_results(
                "icepack_truth_file\tfile_size_in_bytes\nicepack_committed_file\n"
            )),
            (Some(Vec::new()), Vec::new())
        );
    }

    #[test]
    fn two_rewrites_are_summed() {
        let report = parse_stdout(
            "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n3\t1\t300\nrewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n2\t1\t900\nicepack_output_file\n",
        )
        .unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 5);
        assert_eq!(report.result.added_data_files_count, 2);
        assert_eq!(report.result.rewritten_bytes_count, 1200);
    }

    #[test]
    fn older_and_reordered_columns_parse() {
        let report = parse_stdout(
            "Response code\nadded_data_files_count\trewritten_data_files_count\n1\t7\n",
        )
        .unwrap();
        assert_eq!(report.result.rewritten_data_files_count, 7);
        assert_eq!(report.result.added_data_files_count, 1);
        assert_eq!(report.result.rewritten_bytes_count, 0);
        assert!(report.output_files.is_empty());
    }

    #[test]
    fn a_no_op_is_a_valid_result() {
        let report = parse_stdout(
            "rewritten_data_files_count\tadded_data_files_count\n0\t0\nicepack_output_file\n",
        )
        .unwrap();
        assert_eq!(report.result, RewriteResult::default());
    }

    #[test]
    fn missing_or_broken_results_are_errors() {
        assert_eq!(parse_stdout(""), Err(ParseError::NoResult));
        assert_eq!(
            parse_stdout("rewritten_data_files_count\n"),
            Err(ParseError::NoRow)
        );
        assert!(matches!(
            parse_stdout("rewritten_data_files_count\nNULL\n"),
            Err(ParseError::NotANumber { .. })
        ));
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
    fn results_of_any_size_stream_through() {
        let mut stdout = String::from("rewritten_data_files_count\tadded_data_files_count\n100000\t10\nicepack_truth_file\tfile_size_in_bytes\n");
        for index in 0..100_000 {
            stdout.push_str(&format!(
                "s3://lake/w/t/data/part-{index:06}.parquet\t{}\n",
                1000 + index
            ));
        }
        stdout.push_str("icepack_committed_file\ns3://lake/w/t/data/new.parquet");
        // Fed in odd-sized chunks, lines split across them.
        let mut reader = StdoutResults::default();
        for chunk in stdout.as_bytes().chunks(4093) {
            reader.push(chunk);
        }
        let report = report_from_results(&reader.finish()).unwrap();
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
