//! Sorted runs: a group's rows written in the table's sort order or a configured `sort_order`,
//! as Spark's `sort` strategy writes them. A group is sorted in memory, so a sorted run's groups
//! hold at most [`MAX_SORT_GROUP_BYTES`] of input (each group's outputs are sorted within, as
//! Spark's groups are; a larger run makes more groups, whose ranges may overlap), and a single
//! file over that refuses the run for Spark. Sorting by a transform (`bucket`, `truncate`,
//! `day(ts)`) or a nested column is refused too, with the reason; z-order stays Spark's.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{SchemaRef, SortOptions};
use iceberg::spec::{NullOrder, SortDirection, TableMetadata, Transform};

use super::plan::{Plan, PlanRequest};
use super::NativeError;
use crate::model::strategy::SortOrder;

/// Input bytes of a sorted run's group at most: its rows are sorted in memory (as Arrow they
/// take several times their Parquet bytes).
pub const MAX_SORT_GROUP_BYTES: u64 = 128 * 1024 * 1024;

/// How a run orders the rows it writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RowOrder {
    /// As read: a bin-pack.
    #[default]
    AsRead,
    /// By the table's own sort order.
    Table,
    /// By a table's configured `sort_order`: `col [ASC|DESC] [NULLS FIRST|NULLS LAST], ...`.
    Given(String),
}

/// How a group's rows are sorted: the columns (positions in the table's current schema) with
/// their direction and nulls, and the table's sort order id when the order is the table's (the
/// outputs then carry it, as Java's writers set it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKeys {
    pub columns: Vec<(usize, SortOptions)>,
    pub sort_order_id: Option<i32>,
}

/// A run's plan request with its groups bounded for an in-memory sort, after checking that the
/// native engine can sort by `order` at all.
pub fn bounded(
    request: PlanRequest,
    order: &RowOrder,
    metadata: &TableMetadata,
) -> Result<PlanRequest, NativeError> {
    if sort_keys(order, metadata)?.is_none() {
        return Ok(request);
    }
    Ok(PlanRequest {
        max_group_bytes: MAX_SORT_GROUP_BYTES,
        ..request
    })
}

/// Refuses a sorted run with a group over [`MAX_SORT_GROUP_BYTES`] (a single large file).
pub fn check_groups(order: &RowOrder, plan: &Plan) -> Result<(), NativeError> {
    if *order == RowOrder::AsRead {
        return Ok(());
    }
    match plan
        .groups
        .iter()
        .find(|group| group.input_bytes() > MAX_SORT_GROUP_BYTES)
    {
        Some(group) => Err(NativeError::Unsupported(format!(
            "a sorted group of {} bytes ({}) is over the {MAX_SORT_GROUP_BYTES} bytes the native engine sorts in memory",
            group.input_bytes(),
            group.describe(),
        ))),
        None => Ok(()),
    }
}

/// The sort keys of `order` on the table, `None` for a bin-pack; refused for another engine
/// when the native engine cannot sort so: no table order, a transform, a nested column.
pub fn sort_keys(
    order: &RowOrder,
    metadata: &TableMetadata,
) -> Result<Option<SortKeys>, NativeError> {
    let schema = metadata.current_schema();
    let fields = schema.as_struct().fields();
    let keys = match order {
        RowOrder::AsRead => return Ok(None),
        RowOrder::Table => {
            let table_order = metadata.default_sort_order();
            if table_order.is_unsorted() {
                return Err(NativeError::Unsupported(
                    "a sort by the table's order, and the table has none".to_string(),
                ));
            }
            let mut columns = Vec::new();
            for field in &table_order.fields {
                if field.transform != Transform::Identity {
                    return Err(NativeError::Unsupported(format!(
                        "the table's sort order sorts by {} of a column: the native engine sorts by columns",
                        field.transform
                    )));
                }
                let index = fields
                    .iter()
                    .position(|column| column.id == field.source_id)
                    .ok_or_else(|| {
                        NativeError::Unsupported(format!(
                            "the table's sort order names field {}, not a top-level column",
                            field.source_id
                        ))
                    })?;
                columns.push((
                    index,
                    SortOptions {
                        descending: field.direction == SortDirection::Descending,
                        nulls_first: field.null_order == NullOrder::First,
                    },
                ));
            }
            SortKeys {
                columns,
                sort_order_id: i32::try_from(table_order.order_id).ok(),
            }
        }
        RowOrder::Given(text) => {
            let parsed = SortOrder::parse(text).map_err(NativeError::InvalidInput)?;
            let mut columns = Vec::new();
            for (column, descending, nulls_last) in parsed.terms() {
                let index = fields
                    .iter()
                    .position(|field| field.name == column)
                    .ok_or_else(|| {
                        NativeError::Unsupported(format!(
                            "sort_order column `{}` is not a top-level column of the table",
                            column.escape_debug()
                        ))
                    })?;
                columns.push((
                    index,
                    SortOptions {
                        descending,
                        nulls_first: !nulls_last,
                    },
                ));
            }
            SortKeys {
                columns,
                sort_order_id: None,
            }
        }
    };
    Ok(Some(keys))
}

/// `batches` as one batch sorted by `keys` (a stable sort: rows with equal keys keep their
/// order).
pub fn sorted(
    batches: &[RecordBatch],
    target: &SchemaRef,
    keys: &SortKeys,
) -> Result<RecordBatch, NativeError> {
    let all = arrow_select::concat::concat_batches(target, batches)
        .map_err(|error| NativeError::Other(format!("joining a group's rows: {error}")))?;
    let columns: Vec<arrow_ord::sort::SortColumn> = keys
        .columns
        .iter()
        .map(|(index, options)| arrow_ord::sort::SortColumn {
            values: Arc::clone(all.column(*index)),
            options: Some(*options),
        })
        .collect();
    let indices = arrow_ord::sort::lexsort_to_indices(&columns, None)
        .map_err(|error| NativeError::Unsupported(format!("sorting a group's rows: {error}")))?;
    arrow_select::take::take_record_batch(&all, &indices)
        .map_err(|error| NativeError::Other(format!("ordering a group's rows: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array, StringArray};

    /// The test table's metadata, its sort orders replaced by `orders` (default: the last).
    fn metadata(orders: &str, default: i64) -> TableMetadata {
        let text = super::super::testdata::METADATA_V2
            .replace(
                r#""sort-orders": [{"order-id": 0, "fields": []}]"#,
                &format!(r#""sort-orders": [{orders}]"#),
            )
            .replace(
                r#""default-sort-order-id": 0"#,
                &format!(r#""default-sort-order-id": {default}"#),
            );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_tables_order_and_a_configured_one_become_sort_keys() {
        let table = metadata(
            r#"{"order-id": 0, "fields": []}, {"order-id": 1, "fields": [
                {"transform": "identity", "source-id": 3, "direction": "asc", "null-order": "nulls-last"},
                {"transform": "identity", "source-id": 1, "direction": "desc", "null-order": "nulls-first"}]}"#,
            1,
        );
        let keys = sort_keys(&RowOrder::Table, &table).unwrap().unwrap();
        assert_eq!(
            keys.sort_order_id,
            Some(1),
            "outputs carry the table's order id"
        );
        assert_eq!(
            keys.columns,
            [
                (
                    2,
                    SortOptions {
                        descending: false,
                        nulls_first: false
                    }
                ),
                (
                    0,
                    SortOptions {
                        descending: true,
                        nulls_first: true
                    }
                ),
            ]
        );
        let given = sort_keys(&RowOrder::Given("region DESC, id".to_string()), &table)
            .unwrap()
            .unwrap();
        assert_eq!(given.sort_order_id, None);
        assert_eq!(
            given.columns,
            [
                (
                    2,
                    SortOptions {
                        descending: true,
                        nulls_first: false
                    }
                ),
                (
                    0,
                    SortOptions {
                        descending: false,
                        nulls_first: true
                    }
                ),
            ],
            "Spark's defaults: ascending, nulls first when ascending and last when descending"
        );
        assert_eq!(sort_keys(&RowOrder::AsRead, &table).unwrap(), None);
    }

    #[test]
    fn what_the_native_engine_cannot_sort_by_is_refused_with_the_reason() {
        let unsorted = metadata(r#"{"order-id": 0, "fields": []}"#, 0);
        let refusal = |order: &RowOrder, table: &TableMetadata| match sort_keys(order, table) {
            Err(NativeError::Unsupported(reason)) => reason,
            other => panic!("{other:?}"),
        };
        assert!(refusal(&RowOrder::Table, &unsorted).contains("has none"));
        let by_day = metadata(
            r#"{"order-id": 1, "fields": [{"transform": "day", "source-id": 2, "direction": "asc", "null-order": "nulls-first"}]}"#,
            1,
        );
        assert!(refusal(&RowOrder::Table, &by_day).contains("sorts by day"));
        assert!(
            refusal(&RowOrder::Given("nested.field".to_string()), &unsorted)
                .contains("not a top-level column")
        );
        assert!(matches!(
            sort_keys(&RowOrder::Given("id SIDEWAYS".to_string()), &unsorted),
            Err(NativeError::InvalidInput(_))
        ));
    }

    #[test]
    fn rows_are_sorted_across_batches_by_every_key_with_nulls_placed() {
        let schema: SchemaRef = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, false),
            arrow_schema::Field::new("region", arrow_schema::DataType::Utf8, true),
        ]));
        let batch = |ids: Vec<i64>, regions: Vec<Option<&str>>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(StringArray::from(regions)),
                ],
            )
            .unwrap()
        };
        let batches = [
            batch(vec![3, 1, 2], vec![Some("eu"), None, Some("us")]),
            batch(vec![5, 4], vec![Some("eu"), None]),
        ];
        let keys = SortKeys {
            columns: vec![
                (
                    1,
                    SortOptions {
                        descending: false,
                        nulls_first: false,
                    },
                ),
                (
                    0,
                    SortOptions {
                        descending: true,
                        nulls_first: false,
                    },
                ),
            ],
            sort_order_id: None,
        };
        let all = sorted(&batches, &schema, &keys).unwrap();
        let ids = all.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(
            ids.values(),
            &[5, 3, 2, 4, 1],
            "eu, us, then nulls; id descending within"
        );
        assert_eq!(all.column(1).null_count(), 2);
    }
}
