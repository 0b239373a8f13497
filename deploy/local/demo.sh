#!/usr/bin/env bash
# The local demo: a real S3 + SQS server (moto), real S3 event notifications, a micro-batch writer
# landing small files, and icepack counting them per table until the table is due.
# Cleans up after itself; exits 0 only when icepack counted every file and reported the table due.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n\033[1;36m==> %s\033[0m\n' "$*"; }
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

step "installing dependencies (first run only)"
./deploy/local/install-deps.sh

step "building icepack"
cargo build --quiet --bin icepack
icepack="${CARGO_TARGET_DIR:-target}/debug/icepack"

step "starting a local S3 + SQS server (moto)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
moto_server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fs "$endpoint/moto-api/" >/dev/null 2>&1 && break; sleep 0.1; done

bucket=lakehouse-data
prefix=warehouse/analytics/customer_orders/
queue_url=$(python3 deploy/local/demo_stack.py --endpoint "$endpoint" setup --bucket "$bucket" --queue s3-parquet-landing-queue --prefix "$prefix")
echo "bucket s3://$bucket/$prefix notifies $queue_url"

export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
cat >"$work/icepack.toml" <<TOML
[service]
state_dir = "$work/state"

[sqs]
queue_url = "$queue_url"
endpoint_url = "$endpoint"
wait_time_seconds = 1

[defaults]
min_files = 10

[[tables]]
table = "analytics.customer_orders"
bucket = "$bucket"
prefix = "$prefix"
TOML

step "starting icepack"
"$icepack" run --config "$work/icepack.toml" >"$work/icepack.log" 2>&1 &
icepack_pid=$!
pids+=("$icepack_pid")

pending() { "$icepack" status --config "$work/icepack.toml" --json | python3 -c 'import json,sys; t=json.load(sys.stdin)["tables"][0]; print(t["pending_files"], t["due"], t["due_reason"])'; }
total=0
for batch in 1 2 3; do
  step "micro-batch $batch lands 4 small files"
  python3 deploy/local/demo_stack.py --endpoint "$endpoint" write --bucket "$bucket" --prefix "$prefix" --batch "$batch" --count 4
  total=$((total + 4))
  for _ in $(seq 150); do
    read -r files due reason < <(pending)
    [ "$files" -ge "$total" ] && break
    sleep 0.2
  done
  "$icepack" status --config "$work/icepack.toml"
done

step "icepack's view"
grep -E "table is due" "$work/icepack.log" | sed -e 's/^/  log: /' || true
kill -TERM "$icepack_pid"
wait "$icepack_pid"
read -r files due reason < <(pending)
if [ "$files" -eq "$total" ] && [ "$due" = "True" ]; then
  printf '\n\033[1;32mOK\033[0m: %s small files counted once each; the table is due (%s).\n' "$files" "$reason"
else
  printf '\n\033[1;31mFAILED\033[0m: expected %s pending files and a due table, got %s %s\n' "$total" "$files" "$due"
  tail -n 30 "$work/icepack.log"
  exit 1
fi
