#!/usr/bin/env bash
# Demo micro-batch writer: creates lakehouse.demo.events (REST catalog, warehouse on MinIO) if
# needed, then INSERTs a small batch every WRITER_INTERVAL_SECONDS. Every INSERT lands one or a
# few small Parquet files under s3://lakehouse-data/warehouse/demo/events/data/, whose MinIO
# notifications reach icepack through icepack-bridge and ElasticMQ.
#
# Runs in the Spark + Iceberg image (deploy/spark/Dockerfile) with AWS_* = the MinIO keys.
set -euo pipefail

SPARK_SQL="${SPARK_SQL:-/opt/spark/bin/spark-sql}"
INTERVAL="${WRITER_INTERVAL_SECONDS:-5}"
ROWS="${WRITER_ROWS_PER_BATCH:-50}"
BATCHES="${WRITER_BATCHES:-0}"          # 0: forever

CONF=(
  --master "local[1]"
  --conf spark.ui.enabled=false
  --conf spark.sql.catalogImplementation=in-memory
  --conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions
  --conf spark.sql.catalog.lakehouse=org.apache.iceberg.spark.SparkCatalog
  --conf spark.sql.catalog.lakehouse.catalog-impl=org.apache.iceberg.rest.RESTCatalog
  --conf spark.sql.catalog.lakehouse.uri="${ICEBERG_REST_URI:-http://iceberg-rest:8181}"
  --conf spark.sql.catalog.lakehouse.warehouse="${WAREHOUSE:-s3://lakehouse-data/warehouse}"
  --conf spark.sql.catalog.lakehouse.io-impl=org.apache.iceberg.aws.s3.S3FileIO
  --conf spark.sql.catalog.lakehouse.s3.endpoint="${S3_ENDPOINT:-http://minio:9000}"
  --conf spark.sql.catalog.lakehouse.s3.path-style-access=true
  --conf spark.sql.catalog.lakehouse.client.region="${AWS_REGION:-us-east-1}"
)

log() { echo "[writer] $(date -u +%FT%TZ) $*"; }

until "$SPARK_SQL" "${CONF[@]}" -e "
  CREATE NAMESPACE IF NOT EXISTS lakehouse.demo;
  CREATE TABLE IF NOT EXISTS lakehouse.demo.events (
    id BIGINT, event_time TIMESTAMP, kind STRING, payload STRING)
  USING iceberg PARTITIONED BY (days(event_time))
  TBLPROPERTIES ('write.target-file-size-bytes'='134217728');"; do
  log "catalog or storage not ready yet; retrying in 10 s"
  sleep 10
done
log "table lakehouse.demo.events ready"

batch=0
while ((BATCHES == 0 || batch < BATCHES)); do
  batch=$((batch + 1))
  # One spark-sql per batch, like a micro-batch job: each INSERT commits one snapshot with a
  # small file per partition touched.
  if "$SPARK_SQL" "${CONF[@]}" -e "
    INSERT INTO lakehouse.demo.events
    SELECT id + ${batch} * 1000000, current_timestamp(),
           element_at(array('click', 'view', 'buy'), CAST(id % 3 AS INT) + 1),
           sha2(CAST(rand() AS STRING), 256)
    FROM range(${ROWS});" >/dev/null; then
    log "batch ${batch}: ${ROWS} rows"
  else
    log "batch ${batch} failed (will go on)"
  fi
  sleep "$INTERVAL"
done
