//! Reading what a run's statements returned, by job:
//! - [`frame`]: spark-sql's text output cut into one result per statement by the run's own
//!   frame;
//! - [`report`]: each result read by what its statement is (the rewrite's counts, its outputs,
//!   the truth ...) into the run's [`RunReport`];
//! - [`failure`]: when a run failed, a class (from spark-sql's stderr, or from a Spark Connect
//!   server's structured error) and a short excerpt with no secrets in it.
//!
//! Spark Connect's results are structured and come one per statement: they never go through the
//! frame's text, but are read into a [`RunReport`] the same way.

mod failure;
mod frame;
mod report;
#[cfg(test)]
mod tests;

pub use crate::model::report::{
    split_object_path, DeleteRead, FailureClass, MaintenanceFailure, ManifestRewrite, RewriteResult,
};
pub use failure::{classify_failure, classify_server_error, failure_excerpt, redact, ServerError};
pub use frame::{
    framed_results, framed_statements, new_nonce, FramedStdout, ResultSet, StatementResults,
    FRAME_COLUMN,
};
pub use report::{
    first_value, keep_own_snapshots, own_replace_snapshots, replace_snapshots, report_from_results,
    FileRow, ReplaceSnapshot,
};

/// What the statements of a successful run (or of a run whose rewrite committed) told.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    pub result: RewriteResult,
    /// Paths (`s3://bucket/key`) of the data files the run's replace snapshots added.
    pub output_files: Vec<String>,
    /// The partition spec, from `DESCRIBE TABLE`.
    pub spec: Option<Vec<crate::table::partitions::PartitionField>>,
    /// The table's small data files after the run: (path, size). `None` when not reported.
    pub truth: Option<Vec<(String, u64)>>,
    /// Data files committed since the run began.
    pub committed: Vec<String>,
    /// The table's sort order, from its `sort-order` property (`None`: not read).
    pub table_order: Option<crate::model::strategy::TableOrder>,
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
