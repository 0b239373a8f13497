#!/bin/sh
# One-shot setup of the demo's MinIO (runs in the minio/mc image): the warehouse bucket, and a
# bucket notification sending every new .parquet object under warehouse/ to the webhook target
# ICEPACK (configured on the minio service: http://icepack-bridge:9465/minio).
# Idempotent: safe to run on every `docker compose up`.
set -eu

: "${MINIO_URL:=http://minio:9000}"
: "${BUCKET:=lakehouse-data}"
: "${TARGET_ARN:=arn:minio:sqs::ICEPACK:webhook}"

i=0
until mc alias set local "$MINIO_URL" "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null 2>&1; do
  i=$((i + 1))
  [ "$i" -lt 30 ] || { echo "minio-init: MinIO at $MINIO_URL did not answer" >&2; exit 1; }
  sleep 2
done

mc mb --ignore-existing "local/$BUCKET"

if mc event ls "local/$BUCKET" "$TARGET_ARN" 2>/dev/null | grep -q 'put'; then
  echo "minio-init: notification on $BUCKET -> $TARGET_ARN already there"
else
  mc event add "local/$BUCKET" "$TARGET_ARN" --event put --prefix warehouse/ --suffix .parquet
fi
mc event ls "local/$BUCKET"
echo "minio-init: done"
