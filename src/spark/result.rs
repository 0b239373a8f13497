//! Reading a spark-sql run: the procedure's result row by column name, the run's output files,
//! and, when it failed, a class and a short excerpt with no secrets in it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::sql::{COMMITTED_FILE_COLUMN, OUTPUT_FILE_COLUMN, TRUTH_FILE_COLUMN};

/// `rewrite_data_files`' result; columns were added over Iceberg releases, so absent ones are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteResult {
    pub rewritten_data_files_count: u64,
    pub added_data_files_count: u64,
    pub rewritten_bytes_count: u64,
    pub failed_data_files_count: u64,
    pub removed_delete_files_count: u64,
}

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

/// Parses spark-sql's stdout (run with `spark.sql.cli.print.header=true`): each result set is a
/// tab-separated header line followed by its rows.
pub fn parse_stdout(stdout: &str) -> Result<RunReport, ParseError> {
    let (truth, committed) = parse_truth(stdout);
    let mut report = match parse_rewrite(stdout) {
        // A reconcile rewrites nothing: its truth alone is its result.
        Err(ParseError::NoResult) if truth.is_some() => RunReport::default(),
        other => other?,
    };
    report.spec = crate::partitions::parse_describe(stdout);
    report.truth = truth;
    report.committed = committed;
    Ok(report)
}

/// The truth and committed-files sections (a reconcile prints only these and the spec).
pub fn parse_truth(stdout: &str) -> (Option<Vec<(String, u64)>>, Vec<String>) {
    let lines: Vec<&str> = stdout.lines().collect();
    let truth = block(&lines, TRUTH_FILE_COLUMN).map(|rows| {
        rows.iter()
            .filter_map(|row| {
                let (path, size) = row.split_once('\t')?;
                Some((path.trim().to_string(), size.trim().parse().ok()?))
            })
            .collect()
    });
    let committed = block(&lines, COMMITTED_FILE_COLUMN)
        .unwrap_or_default()
        .into_iter()
        .map(|row| row.trim().to_string())
        .collect();
    (truth, committed)
}

/// The rows of the result set whose header starts with `column`: up to the next header line
/// (one holding no `://`) or the end. `None` when there is no such result set.
fn block<'a>(lines: &[&'a str], column: &str) -> Option<Vec<&'a str>> {
    let start = lines
        .iter()
        .position(|line| line.split('\t').next() == Some(column))?;
    Some(
        lines[start + 1..]
            .iter()
            .take_while(|line| line.contains("://"))
            .copied()
            .collect(),
    )
}

fn parse_rewrite(stdout: &str) -> Result<RunReport, ParseError> {
    let lines: Vec<&str> = stdout.lines().collect();
    let header_at = lines
        .iter()
        .position(|line| line.split('\t').any(|column| column == RESULT_MARKER))
        .ok_or(ParseError::NoResult)?;
    let header: Vec<&str> = lines[header_at].split('\t').collect();
    let row: Vec<&str> = lines
        .get(header_at + 1)
        .ok_or(ParseError::NoRow)?
        .split('\t')
        .collect();
    let values: HashMap<&str, &str> = header.iter().copied().zip(row.iter().copied()).collect();
    let number = |column: &str| -> Result<u64, ParseError> {
        match values.get(column) {
            None => Ok(0),
            Some(value) => value.trim().parse().map_err(|_| ParseError::NotANumber {
                column: column.to_string(),
                value: value.to_string(),
            }),
        }
    };
    let result = RewriteResult {
        rewritten_data_files_count: number("rewritten_data_files_count")?,
        added_data_files_count: number("added_data_files_count")?,
        rewritten_bytes_count: number("rewritten_bytes_count")?,
        failed_data_files_count: number("failed_data_files_count")?,
        removed_delete_files_count: number("removed_delete_files_count")?,
    };
    let mut output_files = Vec::new();
    if let Some(start) = lines.iter().position(|line| *line == OUTPUT_FILE_COLUMN) {
        for line in &lines[start + 1..] {
            if !line.contains("://") || line.contains('\t') {
                break;
            }
            output_files.push(line.trim().to_string());
        }
    }
    Ok(RunReport {
        result,
        output_files,
        ..RunReport::default()
    })
}

/// Splits `s3://bucket/key` (also `s3a://`, `s3n://`) into bucket and key.
pub fn split_object_path(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("s3://")
        .or_else(|| path.strip_prefix("s3a://"))
        .or_else(|| path.strip_prefix("s3n://"))?;
    let (bucket, key) = rest.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

/// Why a run failed, as operators act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// A concurrent writer changed the files being rewritten; a later retry usually succeeds.
    CommitConflict,
    /// The commit may or may not have happened; never retried blindly.
    CommitStateUnknown,
    OutOfMemory,
    Timeout,
    /// No container engine, image missing, spark-sql not found.
    EngineUnavailable,
    Other,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::CommitConflict => "commit_conflict",
            FailureClass::CommitStateUnknown => "commit_state_unknown",
            FailureClass::OutOfMemory => "out_of_memory",
            FailureClass::Timeout => "timeout",
            FailureClass::EngineUnavailable => "engine_unavailable",
            FailureClass::Other => "other",
        }
    }

    /// Whether another attempt within the same run is worth it.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureClass::CommitConflict | FailureClass::EngineUnavailable | FailureClass::Other
        )
    }
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

/// Replaces every occurrence of every non-trivial secret with `***`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut redacted = text.to_string();
    for secret in secrets {
        if secret.len() >= 4 {
            redacted = redacted.replace(secret.as_str(), "***");
        }
    }
    redacted
}

#[cfg(test)]
mod tests {
    use super::*;

    const STDOUT: &str = "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\tfailed_data_files_count\tremoved_delete_files_count\n40\t2\t36508\t0\t0\nicepack_output_file\ns3://lake/w/t/data/part=a/00000-1.parquet\ns3://lake/w/t/data/part=b/00000-2.parquet\n";

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
            parse_truth("icepack_truth_file\tfile_size_in_bytes\nicepack_committed_file\n"),
            (Some(Vec::new()), Vec::new())
        );
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
