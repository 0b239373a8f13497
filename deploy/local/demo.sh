#!/usr/bin/env bash
# The local demo (`make demo`): S3 + SQS (moto) with real event notifications, an Iceberg table in
# Iceberg's REST catalog server written in small commits by PyIceberg, icepack counting and
# compacting it with its own JVM-free engine, in its process, and a before/after table read by
# PyIceberg. It prepares only that: no Spark, no container image.
#
# `make demo-spark` (ICEPACK_DEMO_ENGINE=spark): the same table written and read by Spark and
# compacted in a Spark container through the Docker Engine API (podman), inside the local stack.
# Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."

printf '\033[1;36m==> building icepack\033[0m\n'
# Only what the build and the demo use: no Chromium, no cargo-deny (the tests' and lints').
./deploy/local/install-deps.sh build
cargo build --quiet --bin icepack
export ICEPACK_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/icepack"

if [ "${ICEPACK_DEMO_ENGINE:-native}" = spark ]; then
  export ICEPACK_DEMO_ENGINE=spark
  exec ./deploy/local/with-stack.sh python3 deploy/local/demo.py
fi

printf '\033[1;36m==> preparing the REST catalog server and PyIceberg (cached after the first time)\033[0m\n'
./deploy/local/rest-catalog.sh prepare
eval "$(./deploy/local/pyiceberg.sh --env)"
export ICEPACK_DEMO_PYTHON="$ICEPACK_PYICEBERG_PYTHON"
export ICEPACK_DEMO_ENGINE=native
exec python3 deploy/local/demo.py
