#!/usr/bin/env bash
# PyIceberg in a virtualenv of its own (cached), the independent Python reader of the demo and of
# the stack tests that check what the native engine wrote.
#   deploy/local/pyiceberg.sh prepare   creates it when missing or broken
#   deploy/local/pyiceberg.sh --env     prepares it, then prints ICEPACK_PYICEBERG_PYTHON=<its python>
set -euo pipefail

venv="${XDG_CACHE_HOME:-$HOME/.cache}/icepack/pyiceberg-venv"

prepare() {
  if ! "$venv/bin/python" -c 'import pyiceberg, pyarrow, s3fs' >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'pyiceberg[pyarrow,s3fs]==0.12.0'
  fi
}

case "${1:-}" in
  prepare) prepare ;;
  --env)
    prepare
    printf 'ICEPACK_PYICEBERG_PYTHON=%q\n' "$venv/bin/python"
    ;;
  *)
    echo "usage: $0 prepare | --env" >&2
    exit 2
    ;;
esac
