#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 30) with cargo-fuzz (libFuzzer, nightly),
# installing the nightly toolchain and cargo-fuzz when missing. Prints each target's executions;
# fails if any target crashes (the crashing input is kept under fuzz/artifacts/).
#
#   fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-30}
log() { printf '\033[1m[fuzz]\033[0m %s\n' "$*" >&2; }
if ! rustup toolchain list | grep -q '^nightly'; then
  log "installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  log "installing cargo-fuzz from crates.io"
  # A debug build: it only drives cargo (21 s to build on 2 cores against 33 s for a release one).
  cargo install --locked --debug cargo-fuzz
fi
# Outside the main build's target directory: libFuzzer builds use other flags.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/fuzz-target}"
for target in message_body event_key config run_preparation; do
  mkdir -p "corpus/$target"
  log "$target for ${seconds}s"
  out=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "corpus/$target" -- \
      -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=1024 -print_final_stats=1 >"$out" 2>&1; then
    tail -n 40 "$out"
    log "$target crashed; the input is under fuzz/artifacts/$target/"
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out" | grep -o '[0-9]*$' || echo '?')
  echo "fuzz $target: $runs executions in ${seconds}s, 0 crashes"
  rm -f "$out"
done
