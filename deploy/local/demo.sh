#!/usr/bin/env bash
# The local demo (`make demo`): S3 + SQS (moto) with real event notifications, an Iceberg table in
# Iceberg's REST catalog server written in small commits by Spark, icepack counting and compacting
# it in a Spark container through the Docker Engine API (podman), and a before/after table.
# Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."

printf '\033[1;36m==> building icepack\033[0m\n'
./deploy/local/install-deps.sh
cargo build --quiet --bin icepack
export ICEPACK_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/icepack"

exec ./deploy/local/with-stack.sh python3 deploy/local/demo.py
