//! Each statement's result read by what the statement is: the rewrite's counts, its outputs and
//! replace snapshots, the truth, the spec and sort order, manifests, deletes, statistics.

use std::collections::HashMap;

use super::super::sql::{StatementKind, SORT_ORDER_PROPERTY};
use super::{
    split_object_path, DeleteRead, ManifestRewrite, ParseError, ResultSet, RewriteResult, RunReport,
};

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
pub(super) fn partitioning(set: &ResultSet) -> Vec<crate::table::partitions::PartitionField> {
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
    crate::table::partitions::describe_from_rows(&set.rows[start..])
        .into_iter()
        .map(|field| crate::table::partitions::PartitionField {
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
pub(super) fn table_order(set: &ResultSet) -> crate::model::strategy::TableOrder {
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
        crate::model::strategy::TableOrder::Unsorted
    } else {
        crate::model::strategy::TableOrder::Sorted(value.to_string())
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
