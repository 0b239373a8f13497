#!/usr/bin/env bash
# Runs every benchmark of BENCHMARKS.md and prints its figures.
#
#   deploy/local/with-stack.sh bench/run-all.sh           full run (release build; ~15 min here)
#   deploy/local/with-stack.sh bench/run-all.sh --smoke   every benchmark, small, debug build (CI)
#
# with-stack.sh provides the container engine, the Spark image and the host Spark that the
# compaction benchmark needs; the others need only moto (installed by `make deps`) and, for the
# SQS benchmark's second server, ElasticMQ's jars (deploy/local/elasticmq.sh, run by with-stack.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m[bench]\033[0m %s\n' "$*"; }

if [[ "${1:-}" == "--smoke" ]]; then
  # Without --bench each benchmark binary runs its smoke (small sizes, same code paths). The
  # benchmark targets only: `--benches` would also build and run the library's unit tests
  # (bench = true by default), a second time and without the fault points.
  step "intake, memory, trigger latency, SQS (smoke)"
  cargo test --bench '*'
  step "policy simulator (smoke)"
  cargo run --quiet --bin icepack -- simulate --days 1 --tables 2
  # With the features `make test` built its test binaries with: the smoke reuses them instead of
  # compiling and linking two more (the fault points stay unarmed).
  step "compaction run: Docker runner vs bare spark-sql (one run each)"
  cargo test --features failpoints --test integration -- --ignored --nocapture compaction_e2e::measure_docker_runner_against_bare_spark_sql
  step "runners: connect vs docker vs process, threshold crossed → run settled (one round)"
  ICEPACK_BENCH_ROUNDS=1 cargo test --features failpoints --test integration -- --ignored --nocapture connect_e2e::measure_runners_threshold_to_settled
  step "--packages vs baked jars (one run each)"
  bench/packages-vs-jars.sh 1
  exit 0
fi

step "1. intake ceiling"
cargo bench --bench intake
step "2. through a real SQS server (moto, and ElasticMQ when its classpath is exported)"
cargo bench --bench sqs
cargo bench --bench sqs -- --server elasticmq --rtt-ms 10 --messages 2000
step "3. memory"
cargo bench --bench memory
step "4. trigger latency"
cargo bench --bench trigger
step "5a. compaction run: Docker runner vs bare spark-sql"
cargo test --release --test integration -- --ignored --nocapture compaction_e2e::measure_docker_runner_against_bare_spark_sql
step "5b. runners: connect (warm Spark Connect) vs docker vs process, threshold crossed → run settled"
cargo test --release --test integration -- --ignored --nocapture connect_e2e::measure_runners_threshold_to_settled
step "5c. --packages vs baked jars"
bench/packages-vs-jars.sh 3
step "5d. the first run on a fresh Spark Connect server, with and without the runner's warm-up"
cargo test --release --test integration -- --ignored --nocapture --exact connect_e2e::measure_first_run_on_a_fresh_server
step "6. tenants: start-up, memory and reload at scale"
cargo bench --bench tenants
step "8. the native engine's orphan scan: 1,000 snapshots x 100 files"
cargo bench --bench orphans
step "policy simulator"
cargo run --release --quiet --bin icepack -- simulate
