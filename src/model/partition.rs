//! A table's partition spec as icepack keeps it: each field's name (as data file paths carry it),
//! its source column and transform.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    Identity,
    Year,
    Month,
    Day,
    Hour,
    /// bucket, truncate, void ...: no predicate is derived from it.
    Other(String),
}

/// One field of a partition spec: the name it has in data file paths, its source column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionField {
    pub name: String,
    pub source: String,
    pub transform: Transform,
    /// The source column's type as `DESCRIBE TABLE` prints it (`bigint`, `string`, `date`,
    /// `decimal(10,2)` ...); `None` when the source is no top-level column, or the spec was
    /// kept by a release that read no types. A field pins a filter only when its type is known:
    /// an unchecked literal could fail to cast and fail the whole statement (ANSI mode) or
    /// select nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<String>,
}
