#!/usr/bin/env bash
# Issue 32's engine figures (BENCHMARKS.md §5, "Engines on identical tables"), one command:
#
#   bench/engines.sh [CASES]     CASES: a comma-separated subset of a,b,c (default a,b,c)
#
#   (a) 24 tiny files and (b) 200 files of 1 MiB in 10 partitions: threshold crossed → run
#       settled through `icepack run` for native, connect (a warm Spark Connect server), docker
#       and process, and iceberg-go's `iceberg compact run` on an identical table
#       (tests/integration/connect_e2e.rs measure_engines_threshold_to_settled);
#   (c) 1 GiB of 1 MiB files on the local file system rewritten into 64 MiB files: the native
#       engine against Spark local (spark-sql, local[2]), MB per CPU-second and peak RSS
#       (tests/integration/native_engine.rs measure_native_against_spark_local_on_local_files).
#
# Release build; starts the local stack (deploy/local/with-stack.sh) unless already inside it.
# iceberg-go's CLI comes from the Go module proxy (`go install`, cached).
# Env: ICEPACK_BENCH_ROUNDS (5), ICEPACK_FIGURES_ENGINES (native,connect,docker,process,iceberg-go),
#      ICEPACK_FIGURES_C_MB (1024), ICEPACK_FIGURES_DIR (scratch for (c), default $TMPDIR),
#      ICEBERG_GO_VERSION (v0.7.0), ICEPACK_CACHE_DIR (default ~/.cache/icepack).
# Takes about an hour on 2 cores with the default 5 rounds. Never part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-a,b,c}

if [[ -z "${ICEPACK_E2E:-}" ]]; then
  exec ./deploy/local/with-stack.sh "$0" "$cases"
fi

step() { printf '\n\033[1m[engines]\033[0m %s\n' "$*"; }

if [[ "$cases" == *a* || "$cases" == *b* ]] && [[ -z "${ICEPACK_BENCH_ICEBERG_GO:-}" ]]; then
  version=${ICEBERG_GO_VERSION:-v0.7.0}
  bin="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack}/iceberg-go/$version"
  if [[ ! -x "$bin/iceberg" ]]; then
    step "iceberg-go $version's CLI from the Go module proxy"
    mkdir -p "$bin"
    GOBIN="$bin" go install "github.com/apache/iceberg-go/cmd/iceberg@$version"
  fi
  export ICEPACK_BENCH_ICEBERG_GO="$bin/iceberg"
fi

export ICEPACK_FIGURES_CASES="$cases"
if [[ "$cases" == *a* || "$cases" == *b* ]]; then
  step "(a), (b): threshold crossed → run settled, engines alternating"
  cargo test --release --test integration -- --ignored --nocapture --exact connect_e2e::measure_engines_threshold_to_settled
fi
if [[ "$cases" == *c* ]]; then
  step "(c): 1 GiB on the local file system, native against Spark local"
  cargo test --release --test integration -- --ignored --nocapture --exact native_engine::measure_native_against_spark_local_on_local_files
fi
