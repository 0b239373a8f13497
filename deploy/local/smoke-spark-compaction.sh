#!/usr/bin/env bash
# End-to-end smoke test of the Spark/Iceberg compaction stack, without Docker or AWS:
#   moto_server (S3) on 127.0.0.1 + Iceberg JDBC catalog on a SQLite file + spark-sql
#   running create / 20 inserts / rewrite_data_files / SELECT from the .files table.
#
#   deploy/local/smoke-spark-compaction.sh [container|host|both]   (default both)
#
# container: runs localhost/icepack-spark:3.5 through the Docker Engine API served by
#            podman (deploy/local/podman-service.sh), with curl --unix-socket:
#            POST /containers/create, /start, /wait, GET /logs, DELETE.
# host:      runs the host Spark from deploy/local/spark-dist.sh with --jars.
# Builds/loads what is missing (spark-dist.sh, build-image-rootfs.sh). Starts its own
# moto_server and (if not already running) its own podman service; stops what it started.
#
# Env: ICEPACK_CACHE_DIR (default ~/.cache/icepack/spark), ICEPACK_IMAGE,
#      ICEPACK_SMOKE_DIR (scratch, default $ICEPACK_CACHE_DIR/smoke), ICEPACK_SMOKE_INSERTS (20)
set -euo pipefail

MODE="${1:-both}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/spark}"
IMAGE="${ICEPACK_IMAGE:-localhost/icepack-spark:3.5}"
SMOKE="${ICEPACK_SMOKE_DIR:-$CACHE/smoke}"
INSERTS="${ICEPACK_SMOKE_INSERTS:-20}"
SOCK_DIR="$SMOKE/podman"
BUCKET=icepack-smoke
CATALOG=lakehouse

log() { echo "[smoke] $*" >&2; }
mkdir -p "$SMOKE"

# ---------------------------------------------------------------- cleanup
MOTO_PID=""
STARTED_PODMAN=0
CONTAINER_ID=""
cleanup() {
  set +e
  if [[ -n "$CONTAINER_ID" ]]; then
    curl -s -o /dev/null --unix-socket "$SOCK_DIR/podman.sock" -X DELETE "http://d/containers/$CONTAINER_ID?force=true"
  fi
  if [[ -n "$MOTO_PID" ]]; then kill "$MOTO_PID" 2>/dev/null; wait "$MOTO_PID" 2>/dev/null; fi
  if [[ $STARTED_PODMAN == 1 ]]; then "$HERE/podman-service.sh" stop "$SOCK_DIR"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- prerequisites
if ! command -v moto_server >/dev/null 2>&1; then
  log "pip install moto[server]"
  python3 -m pip install -q 'moto[server]' >&2
fi
eval "$("$HERE/spark-dist.sh" --env)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- moto (S3)
PORT="$(free_port)"
log "moto_server on 127.0.0.1:$PORT"
moto_server -H 127.0.0.1 -p "$PORT" >"$SMOKE/moto.log" 2>&1 &
MOTO_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
curl -sf -o /dev/null -X PUT "http://127.0.0.1:$PORT/$BUCKET" || { log "cannot create bucket"; exit 1; }

export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1

# ---------------------------------------------------------------- the SQL job
write_sql() { # file
  {
    echo "CREATE NAMESPACE IF NOT EXISTS $CATALOG.ns;"
    echo "CREATE TABLE $CATALOG.ns.t (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part);"
    for i in $(seq 1 "$INSERTS"); do
      echo "INSERT INTO $CATALOG.ns.t VALUES ($i, 'a', 'row $i a'), ($((i + 1000)), 'b', 'row $i b');"
    done
    echo "SELECT count(*) AS files_before FROM $CATALOG.ns.t.files;"
    echo "CALL $CATALOG.system.rewrite_data_files(table => 'ns.t', strategy => 'binpack', options => map('target-file-size-bytes','536870912','min-input-files','5'));"
    echo "SELECT partition, file_path, file_format, record_count, file_size_in_bytes FROM $CATALOG.ns.t.files ORDER BY file_path;"
  } >"$1"
}

# spark-sql arguments: everything but the jars and the SQL file
spark_args() { # catalog_db_path
  local db="$1"
  printf '%s\n' \
    --master 'local[2]' \
    --conf spark.sql.catalogImplementation=in-memory \
    --conf spark.ui.enabled=false \
    --conf spark.sql.cli.print.header=true \
    --conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions \
    --conf "spark.sql.catalog.$CATALOG=org.apache.iceberg.spark.SparkCatalog" \
    --conf "spark.sql.catalog.$CATALOG.catalog-impl=org.apache.iceberg.jdbc.JdbcCatalog" \
    --conf "spark.sql.catalog.$CATALOG.uri=jdbc:sqlite:$db" \
    --conf "spark.sql.catalog.$CATALOG.jdbc.journal_mode=WAL" \
    --conf "spark.sql.catalog.$CATALOG.jdbc.busy_timeout=10000" \
    --conf "spark.sql.catalog.$CATALOG.jdbc.schema-version=V1" \
    --conf "spark.sql.catalog.$CATALOG.warehouse=s3://$BUCKET/warehouse" \
    --conf "spark.sql.catalog.$CATALOG.io-impl=org.apache.iceberg.aws.s3.S3FileIO" \
    --conf "spark.sql.catalog.$CATALOG.s3.endpoint=http://127.0.0.1:$PORT" \
    --conf "spark.sql.catalog.$CATALOG.s3.path-style-access=true" \
    --conf "spark.sql.catalog.$CATALOG.client.region=$AWS_REGION"
}

check_output() { # stdout_file label
  local out="$1" label="$2"
  if ! grep -q '^rewritten_data_files_count' "$out"; then
    log "$label: no rewrite_data_files result header in stdout"; return 1
  fi
  local row
  row="$(grep -A1 '^rewritten_data_files_count' "$out" | tail -1)"
  log "$label: rewrite_data_files -> $row"
  local rewritten added
  rewritten="$(cut -f1 <<<"$row")"; added="$(cut -f2 <<<"$row")"
  [[ "$rewritten" == "$((INSERTS * 2))" && "$added" == 2 ]] || { log "$label: unexpected counts"; return 1; }
}

RESULT=0

# ---------------------------------------------------------------- host run
run_host() {
  local dir="$SMOKE/host"
  rm -rf "$dir"; mkdir -p "$dir/catalog"
  write_sql "$dir/job.sql"
  mapfile -t args < <(spark_args "$dir/catalog/catalog.db")
  log "host: spark-sql (SPARK_HOME=$SPARK_HOME)"
  printf '%q ' "$SPARK_HOME/bin/spark-sql" --jars "$ICEPACK_SPARK_JARS" "${args[@]}" -f "$dir/job.sql" >"$dir/cmdline.txt"
  local t0=$SECONDS
  (cd "$dir" && SPARK_LOCAL_IP=127.0.0.1 "$SPARK_HOME/bin/spark-sql" --jars "$ICEPACK_SPARK_JARS" "${args[@]}" -f "$dir/job.sql" \
    >"$dir/stdout" 2>"$dir/stderr") || { log "host: spark-sql failed, see $dir/stderr"; tail -30 "$dir/stderr" >&2; RESULT=1; return; }
  log "host: spark-sql took $((SECONDS - t0)) s (stdout $dir/stdout, stderr $dir/stderr)"
  check_output "$dir/stdout" host || RESULT=1
}

# ---------------------------------------------------------------- container run (Docker Engine API)
api() { # method path [json-body]  -> body on stdout, fails on HTTP >= 400
  local method="$1" path="$2" body="${3:-}"
  local args=(-sS --unix-socket "$SOCK_DIR/podman.sock" -X "$method" -w '\n%{http_code}')
  [[ -n "$body" ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
  local resp code
  resp="$(curl "${args[@]}" "http://d$path")"
  code="${resp##*$'\n'}"; resp="${resp%$'\n'*}"
  if ((code >= 400)); then log "API $method $path -> $code: $resp"; return 1; fi
  printf '%s' "$resp"
}

run_container() {
  if ! "$HERE/podman-service.sh" status "$SOCK_DIR" >/dev/null 2>&1; then
    "$HERE/podman-service.sh" start "$SOCK_DIR" >/dev/null
    STARTED_PODMAN=1
  fi
  "$HERE/../spark/build-image-rootfs.sh" "$IMAGE" >/dev/null
  local dir="$SMOKE/container"
  rm -rf "$dir"; mkdir -p "$dir/catalog" "$dir/job"
  chmod 777 "$dir/catalog"   # the official apache/spark image runs as uid 185
  write_sql "$dir/job/job.sql"
  mapfile -t args < <(spark_args /catalog/catalog.db)
  local cmd_json body
  cmd_json="$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \
    /opt/spark/bin/spark-sql "${args[@]}" -f /job/job.sql)"
  body="$(python3 - "$IMAGE" "$cmd_json" "$dir" <<'PY'
import json, os, sys
image, cmd, d = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
print(json.dumps({
  "Image": image,
  "Cmd": cmd,
  "Env": [f"AWS_ACCESS_KEY_ID={os.environ['AWS_ACCESS_KEY_ID']}",
          f"AWS_SECRET_ACCESS_KEY={os.environ['AWS_SECRET_ACCESS_KEY']}",
          f"AWS_REGION={os.environ['AWS_REGION']}",
          "SPARK_LOCAL_IP=127.0.0.1"],
  "WorkingDir": "/opt/spark/work-dir",
  "Labels": {"icepack.smoke": "1"},
  "HostConfig": {"NetworkMode": "host",
                 "Binds": [f"{d}/catalog:/catalog:rw", f"{d}/job:/job:ro"]},
}))
PY
)"
  printf '%s\n' "$body" >"$dir/create.json"   # for reference: the exact API request body
  local t0=$SECONDS
  CONTAINER_ID="$(api POST /containers/create "$body" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Id"])')"
  api POST "/containers/$CONTAINER_ID/start" >/dev/null
  log "container: started ${CONTAINER_ID:0:12}"
  # Follow the logs until the container exits, THEN call /wait (which returns at once).
  # Do not block in POST /containers/{id}/wait while the job runs: podman 4.3's compat
  # wait handler busy-polls and burns ~1 CPU core in the service for the whole run
  # (on 2 cores that doubled spark-sql's run time). logs?follow=true costs nothing.
  # Logs are multiplexed (Tty=false): 8-byte frame headers, stream 1 = stdout, 2 = stderr.
  curl -sS --unix-socket "$SOCK_DIR/podman.sock" \
    "http://d/containers/$CONTAINER_ID/logs?stdout=true&stderr=true&follow=true" \
    | python3 -c '
import sys, struct
data = sys.stdin.buffer.read(); i = 0
out = {1: open(sys.argv[1], "wb"), 2: open(sys.argv[2], "wb")}
while i + 8 <= len(data):
    stream, size = data[i], struct.unpack(">I", data[i+4:i+8])[0]
    out.get(stream, out[2]).write(data[i+8:i+8+size]); i += 8 + size
' "$dir/stdout" "$dir/stderr"
  local wait_json code
  wait_json="$(api POST "/containers/$CONTAINER_ID/wait?condition=not-running")"
  code="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["StatusCode"])' "$wait_json")"
  log "container: exit code $code after $((SECONDS - t0)) s (create+start+run+logs)"
  api DELETE "/containers/$CONTAINER_ID?force=true" >/dev/null
  CONTAINER_ID=""
  if [[ "$code" != 0 ]]; then log "container: spark-sql failed, see $dir/stderr"; tail -30 "$dir/stderr" >&2; RESULT=1; return; fi
  check_output "$dir/stdout" container || RESULT=1
}

case "$MODE" in
  host) run_host ;;
  container) run_container ;;
  both) run_container; run_host ;;
  *) echo "usage: $0 [container|host|both]" >&2; exit 2 ;;
esac

if [[ $RESULT == 0 ]]; then log "OK"; else log "FAILED"; fi
exit "$RESULT"
