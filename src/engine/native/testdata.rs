//! Table metadata for the native engine's unit tests: a format v2 table partitioned by day,
//! with one append snapshot on `main`.

pub const METADATA_V2: &str = r#"{
  "format-version": 2,
  "table-uuid": "5b7a0d61-2f4e-4c43-9a51-3f2f0e3c9b11",
  "location": "s3://lake/warehouse/analytics/events",
  "last-sequence-number": 3,
  "last-updated-ms": 1714564800000,
  "last-column-id": 3,
  "current-schema-id": 0,
  "schemas": [
    {"type": "struct", "schema-id": 0, "fields": [
      {"id": 1, "name": "id", "required": true, "type": "long"},
      {"id": 2, "name": "ts", "required": false, "type": "timestamptz"},
      {"id": 3, "name": "region", "required": false, "type": "string"}
    ]}
  ],
  "default-spec-id": 0,
  "partition-specs": [
    {"spec-id": 0, "fields": [
      {"name": "ts_day", "transform": "day", "source-id": 2, "field-id": 1000}
    ]}
  ],
  "last-partition-id": 1000,
  "default-sort-order-id": 0,
  "sort-orders": [{"order-id": 0, "fields": []}],
  "properties": {"write.parquet.compression-codec": "zstd"},
  "current-snapshot-id": 3051729675574597004,
  "refs": {"main": {"snapshot-id": 3051729675574597004, "type": "branch"}},
  "snapshots": [
    {"snapshot-id": 3051729675574597004, "sequence-number": 3, "timestamp-ms": 1714564800000,
     "summary": {"operation": "append"},
     "manifest-list": "s3://lake/warehouse/analytics/events/metadata/snap-3051729675574597004-1-a.avro",
     "schema-id": 0}
  ],
  "snapshot-log": [{"snapshot-id": 3051729675574597004, "timestamp-ms": 1714564800000}],
  "metadata-log": []
}"#;
